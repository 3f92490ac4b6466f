//! The kubelet CPU manager checkpoint (`cpu_manager_state`): reader, verifier and writer.
//!
//! Reading mirrors the kubelet (`pkg/kubelet/cm/cpumanager/state/checkpoint.go` and Go's
//! `encoding/json`): keys match case-insensitively (ASCII), unknown keys are ignored, a later
//! duplicate key wins, and `"entries": null` stays distinct from an absent `entries` because
//! the two hash differently. Values keep their raw text, since the checksum is computed over
//! the strings as written, not their canonical form.
//!
//! Flow: [`Checkpoint::parse`] (bytes to raw model) -> [`Checkpoint::verify`] (which kubelet
//! layout's checksum matches) -> [`Checkpoint::state`] (parsed cpusets, [`CpuState`]).
//! [`CpuState::to_checkpoint_json`] writes a file every kubelet since 1.18 accepts.

pub mod checksum;
pub mod rewrite;

use std::collections::BTreeMap;

use serde_json::Value;

pub use checksum::Candidate;

use crate::{CpuSet, CpuSetError};

/// Larger than any real checkpoint (a 1,000-container node writes about 100 KiB); a reader
/// refuses bigger files instead of loading them.
pub const MAX_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;

/// Why a checkpoint file could not be read. The kubelet's CPU, memory and DRA managers refuse
/// to start on each of these (its device manager logs them and starts empty), except
/// `TooLarge`, which is nodemedic's own limit (a file that size is not a real checkpoint, but
/// whether a kubelet would parse it is not checked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("file is empty")]
    Empty,
    #[error("is a directory, not a file")]
    NotAFile,
    #[error("file is {size} bytes, larger than any kubelet checkpoint (limit {limit})")]
    TooLarge { size: u64, limit: u64 },
    #[error("invalid JSON at line {line} column {column}: {reason}")]
    Json { line: usize, column: usize, reason: String },
    #[error("top-level JSON value is {found}, not an object")]
    NotAnObject { found: &'static str },
    #[error("field {field}: expected {expected}, found {found}")]
    FieldType {
        field: String,
        expected: &'static str,
        found: String,
    },
    #[error("field {field}: {source}")]
    CpuSet { field: String, source: CpuSetError },
    #[error("field data (V4 payload): {reason}")]
    Payload { reason: String },
    /// A value of the right JSON type that the kubelet could not use (another checkpoint's
    /// field: a bad NUMA node id, base64 that does not decode, ...).
    #[error("field {field}: {reason}")]
    Value { field: String, reason: String },
}

/// `entries` as written: the key decides the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entries {
    /// No `entries` key (the kubelet omits an empty map).
    Absent,
    /// `"entries": null`.
    Null,
    /// V1: container ID -> cpuset.
    ByContainerId(BTreeMap<String, String>),
    /// V2 and later: pod UID -> container name -> cpuset (`None` for a `null` inner map).
    /// An empty object is read as this variant; it fits V1 too.
    ByPod(BTreeMap<String, Option<BTreeMap<String, String>>>),
}

/// V3 `podEntries`: pod UID -> pod-level cpuset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodEntries {
    Absent,
    Null,
    Map(BTreeMap<String, String>),
}

/// A V4 file's real payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V4Payload {
    /// The raw `data` string (itself a JSON checkpoint).
    pub data: String,
    /// The stored `dataChecksum`.
    pub data_checksum: u64,
    /// `data` parsed.
    pub inner: Box<Checkpoint>,
}

/// A checkpoint as written in the file, values raw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub policy_name: String,
    /// `defaultCpuSet` as written.
    pub default_cpu_set: String,
    pub entries: Entries,
    pub pod_entries: PodEntries,
    /// The stored checksum (`0` means "not verified").
    pub checksum: u64,
    /// Present when the file carries `data` (V4).
    pub v4: Option<V4Payload>,
}

/// The result of matching the stored checksum against every known kubelet layout.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Verification {
    /// The stored checksum equals the kubelet's hash for this layout and type name.
    Matched {
        layout: &'static str,
        type_name: &'static str,
        /// True for a V4 file whose `dataChecksum` matched.
        v4: bool,
    },
    /// `checksum: 0`: the kubelet accepts the file unverified (V1/V2 only).
    Unverified { layout: &'static str },
    /// No layout's hash equals the stored value: the kubelet refuses the file.
    Mismatch { stored: u64, computed: Vec<(String, u32)> },
}

impl Verification {
    /// Whether a kubelet of some version accepts the file.
    pub fn accepted(&self) -> bool {
        !matches!(self, Verification::Mismatch { .. })
    }
}

/// Whose CPUs an assignment holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(untagged)]
pub enum EntryKey {
    /// V2 and later.
    Container { pod_uid: String, container: String },
    /// V1: a runtime container ID.
    ContainerId { container_id: String },
}

/// One exclusive assignment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Assignment {
    #[serde(flatten)]
    pub key: EntryKey,
    pub cpus: CpuSet,
}

/// The checkpoint's meaning: parsed cpusets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CpuState {
    pub policy_name: String,
    pub default_cpus: CpuSet,
    /// Sorted by key.
    pub assignments: Vec<Assignment>,
    /// V3 pod-level assignments: (pod UID, cpuset), sorted by UID.
    pub pod_assignments: Vec<(String, CpuSet)>,
}

pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn type_error(field: impl Into<String>, expected: &'static str, v: &Value) -> CheckpointError {
    CheckpointError::FieldType {
        field: field.into(),
        expected,
        found: json_kind(v).to_string(),
    }
}

/// Go decodes `null` into a string as "leave it": the zero value.
pub(crate) fn go_string(field: &str, v: &Value) -> Result<String, CheckpointError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        other => Err(type_error(field, "a string", other)),
    }
}

pub(crate) fn go_string_map(
    field: &str,
    v: &serde_json::Map<String, Value>,
) -> Result<BTreeMap<String, String>, CheckpointError> {
    v.iter()
        .map(|(k, val)| Ok((k.clone(), go_string(&format!("{field}[{k:?}]"), val)?)))
        .collect()
}

impl Checkpoint {
    /// Reads a checkpoint file's bytes. Does not check the checksum (see [`Checkpoint::verify`]).
    pub fn parse(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        Self::from_value(&Value::Object(parse_object(bytes)?))
    }

    fn from_value(value: &Value) -> Result<Checkpoint, CheckpointError> {
        let Value::Object(obj) = value else {
            return Err(CheckpointError::NotAnObject {
                found: json_kind(value),
            });
        };
        let mut cp = Checkpoint {
            policy_name: String::new(),
            default_cpu_set: String::new(),
            entries: Entries::Absent,
            pod_entries: PodEntries::Absent,
            checksum: 0,
            v4: None,
        };
        let mut data: Option<String> = None;
        let mut data_checksum: u64 = 0;
        // Keys in file order; a later (case-folded) duplicate overwrites, as in Go.
        for (key, v) in obj {
            match key.to_ascii_lowercase().as_str() {
                "policyname" => cp.policy_name = go_string("policyName", v)?,
                "defaultcpuset" => cp.default_cpu_set = go_string("defaultCpuSet", v)?,
                "entries" => cp.entries = read_entries(v)?,
                "podentries" => cp.pod_entries = read_pod_entries(v)?,
                "checksum" => cp.checksum = read_u64("checksum", v)?,
                "data" => data = Some(go_string("data", v)?),
                "datachecksum" => data_checksum = read_u64("dataChecksum", v)?,
                _ => {}
            }
        }
        if let Some(data) = data {
            let inner: Value = serde_json::from_str(&data).map_err(|e| CheckpointError::Payload {
                reason: invalid_json(&e),
            })?;
            let inner =
                Checkpoint::from_value(&inner).map_err(|e| CheckpointError::Payload { reason: e.to_string() })?;
            // The payload is the kubelet's V3 structure: `entries` keyed by pod UID. A V4
            // kubelet cannot unmarshal container-ID (V1) entries there, and it has no
            // payload inside a payload; such a file is not one the kubelet can restore.
            if matches!(inner.entries, Entries::ByContainerId(_)) {
                return Err(CheckpointError::Payload {
                    reason: "entries are keyed by container ID (V1), which a V4 payload cannot hold".into(),
                });
            }
            if inner.v4.is_some() {
                return Err(CheckpointError::Payload {
                    reason: "the payload has a data field of its own".into(),
                });
            }
            cp.v4 = Some(V4Payload {
                data,
                data_checksum,
                inner: Box::new(inner),
            });
        }
        Ok(cp)
    }

    /// The checkpoint whose content the kubelet uses: the V4 payload when there is one.
    pub fn effective(&self) -> &Checkpoint {
        self.v4.as_ref().map_or(self, |p| &p.inner)
    }

    /// The file's layout by shape: V4 with `data`, V3 with `podEntries`, V1 with string
    /// entries, else V2.
    pub fn layout(&self) -> &'static str {
        if self.v4.is_some() {
            "V4"
        } else if !matches!(self.pod_entries, PodEntries::Absent) {
            "V3"
        } else if matches!(self.entries, Entries::ByContainerId(_)) {
            "V1"
        } else {
            "V2"
        }
    }

    /// Matches the stored checksum against each kubelet layout in the order of docs/kubelet.md
    /// ("The checksum") and says which one matched.
    pub fn verify(&self) -> Verification {
        if let Some(payload) = &self.v4 {
            return checksum::verify_payload("V4", &payload.data, payload.data_checksum);
        }
        let tried = Candidate::ORDER
            .into_iter()
            .filter_map(|c| checksum::checksum(self, c).map(|sum| (c.layout(), c.type_name(), sum)));
        let computed = match checksum::first_match(self.checksum, tried) {
            Ok(matched) => return matched,
            Err(computed) => computed,
        };
        if self.checksum == 0 && matches!(self.pod_entries, PodEntries::Absent) {
            return Verification::Unverified { layout: self.layout() };
        }
        Verification::Mismatch {
            stored: self.checksum,
            computed,
        }
    }

    /// Parses every cpuset; errors name the field (`entries["uid"]["c1"]`).
    pub fn state(&self) -> Result<CpuState, CheckpointError> {
        let cp = self.effective();
        let parse =
            |field: String, text: &str| CpuSet::parse(text).map_err(|source| CheckpointError::CpuSet { field, source });
        let default_cpus = parse("defaultCpuSet".to_string(), &cp.default_cpu_set)?;
        let mut assignments = Vec::new();
        match &cp.entries {
            Entries::Absent | Entries::Null => {}
            Entries::ByContainerId(map) => {
                for (id, cpus) in map {
                    assignments.push(Assignment {
                        key: EntryKey::ContainerId {
                            container_id: id.clone(),
                        },
                        cpus: parse(format!("entries[{id:?}]"), cpus)?,
                    });
                }
            }
            Entries::ByPod(map) => {
                for (uid, containers) in map {
                    for (name, cpus) in containers.iter().flatten() {
                        assignments.push(Assignment {
                            key: EntryKey::Container {
                                pod_uid: uid.clone(),
                                container: name.clone(),
                            },
                            cpus: parse(format!("entries[{uid:?}][{name:?}]"), cpus)?,
                        });
                    }
                }
            }
        }
        let mut pod_assignments = Vec::new();
        if let PodEntries::Map(map) = &cp.pod_entries {
            for (uid, cpus) in map {
                pod_assignments.push((uid.clone(), parse(format!("podEntries[{uid:?}].cpuSet"), cpus)?));
            }
        }
        Ok(CpuState {
            policy_name: cp.policy_name.clone(),
            default_cpus,
            assignments,
            pod_assignments,
        })
    }
}

/// The bytes of a checkpoint file as one JSON object, with every reader's limits and errors:
/// too large, empty, invalid JSON, not an object.
pub(crate) fn parse_object(bytes: &[u8]) -> Result<serde_json::Map<String, Value>, CheckpointError> {
    if bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
        return Err(CheckpointError::TooLarge {
            size: bytes.len() as u64,
            limit: MAX_CHECKPOINT_BYTES,
        });
    }
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(CheckpointError::Empty);
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| CheckpointError::Json {
        line: e.line(),
        column: e.column(),
        reason: json_reason(&e),
    })?;
    match value {
        Value::Object(obj) => Ok(obj),
        other => Err(CheckpointError::NotAnObject {
            found: json_kind(&other),
        }),
    }
}

/// `invalid JSON at line L column C: <reason>`, for JSON inside a field (a payload string).
pub(crate) fn invalid_json(e: &serde_json::Error) -> String {
    format!(
        "invalid JSON at line {} column {}: {}",
        e.line(),
        e.column(),
        json_reason(e)
    )
}

pub(crate) fn json_reason(e: &serde_json::Error) -> String {
    // serde_json appends " at line L column C"; we report those separately.
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

pub(crate) fn read_u64(field: &str, v: &Value) -> Result<u64, CheckpointError> {
    match v {
        Value::Null => Ok(0),
        Value::Number(n) => n.as_u64().ok_or_else(|| CheckpointError::FieldType {
            field: field.to_string(),
            expected: "an unsigned 64-bit integer",
            found: format!("the number {n}"),
        }),
        other => Err(type_error(field, "an unsigned integer", other)),
    }
}

fn read_entries(v: &Value) -> Result<Entries, CheckpointError> {
    let obj = match v {
        Value::Null => return Ok(Entries::Null),
        Value::Object(obj) => obj,
        other => return Err(type_error("entries", "an object", other)),
    };
    let any_string = obj.values().any(Value::is_string);
    let any_object = obj.values().any(Value::is_object);
    if any_string && any_object {
        return Err(CheckpointError::FieldType {
            field: "entries".into(),
            expected: "all values cpusets (V1) or all values objects (V2)",
            found: "a mix of strings and objects".into(),
        });
    }
    if any_string {
        return Ok(Entries::ByContainerId(go_string_map("entries", obj)?));
    }
    let mut pods = BTreeMap::new();
    for (uid, containers) in obj {
        let inner = match containers {
            Value::Null => None,
            Value::Object(c) => Some(go_string_map(&format!("entries[{uid:?}]"), c)?),
            other => return Err(type_error(format!("entries[{uid:?}]"), "an object", other)),
        };
        pods.insert(uid.clone(), inner);
    }
    Ok(Entries::ByPod(pods))
}

fn read_pod_entries(v: &Value) -> Result<PodEntries, CheckpointError> {
    let obj = match v {
        Value::Null => return Ok(PodEntries::Null),
        Value::Object(obj) => obj,
        other => return Err(type_error("podEntries", "an object", other)),
    };
    let mut map = BTreeMap::new();
    for (uid, entry) in obj {
        let field = format!("podEntries[{uid:?}]");
        let Value::Object(entry) = entry else {
            return Err(type_error(field, "an object", entry));
        };
        let mut cpus = String::new();
        for (k, val) in entry {
            if k.eq_ignore_ascii_case("cpuset") {
                cpus = go_string(&format!("{field}.cpuSet"), val)?;
            }
        }
        map.insert(uid.clone(), cpus);
    }
    Ok(PodEntries::Map(map))
}

impl CpuState {
    /// The checkpoint the kubelet would write for this state: V2, or V3 when there are pod
    /// entries, always under the type name `CPUManagerCheckpoint`, cpusets canonical.
    pub fn to_checkpoint(&self) -> Checkpoint {
        let mut pods: BTreeMap<String, Option<BTreeMap<String, String>>> = BTreeMap::new();
        let mut v1: BTreeMap<String, String> = BTreeMap::new();
        for a in &self.assignments {
            match &a.key {
                EntryKey::Container { pod_uid, container } => {
                    pods.entry(pod_uid.clone())
                        .or_insert_with(|| Some(BTreeMap::new()))
                        .get_or_insert_with(BTreeMap::new)
                        .insert(container.clone(), a.cpus.to_string());
                }
                EntryKey::ContainerId { container_id } => {
                    v1.insert(container_id.clone(), a.cpus.to_string());
                }
            }
        }
        let entries = if !v1.is_empty() {
            Entries::ByContainerId(v1)
        } else if pods.is_empty() {
            Entries::Absent
        } else {
            Entries::ByPod(pods)
        };
        let pod_entries = if self.pod_assignments.is_empty() {
            PodEntries::Absent
        } else {
            PodEntries::Map(
                self.pod_assignments
                    .iter()
                    .map(|(u, c)| (u.clone(), c.to_string()))
                    .collect(),
            )
        };
        let mut cp = Checkpoint {
            policy_name: self.policy_name.clone(),
            default_cpu_set: self.default_cpus.to_string(),
            entries,
            pod_entries,
            checksum: 0,
            v4: None,
        };
        let candidate = match (&cp.entries, &cp.pod_entries) {
            (Entries::ByContainerId(_), _) => Candidate::V1,
            (_, PodEntries::Map(_)) => Candidate::V3,
            _ => Candidate::V2,
        };
        cp.checksum = checksum::checksum(&cp, candidate).map_or(0, u64::from);
        cp
    }

    /// The file's bytes as the kubelet writes them: compact JSON, fields in the order
    /// `policyName`, `defaultCpuSet`, `entries`, `podEntries`, `checksum`, empty maps omitted.
    pub fn to_checkpoint_json(&self) -> String {
        self.to_checkpoint().to_json()
    }
}

impl Checkpoint {
    /// Compact JSON in the kubelet's field order. Raw values are written as they are.
    pub fn to_json(&self) -> String {
        let mut obj = serde_json::Map::new();
        obj.insert("policyName".into(), Value::String(self.policy_name.clone()));
        obj.insert("defaultCpuSet".into(), Value::String(self.default_cpu_set.clone()));
        match &self.entries {
            Entries::Absent => {}
            Entries::Null => {
                obj.insert("entries".into(), Value::Null);
            }
            Entries::ByContainerId(map) => {
                obj.insert("entries".into(), serde_json::to_value(map).unwrap_or(Value::Null));
            }
            Entries::ByPod(map) => {
                obj.insert("entries".into(), serde_json::to_value(map).unwrap_or(Value::Null));
            }
        }
        match &self.pod_entries {
            PodEntries::Absent => {}
            PodEntries::Null => {
                obj.insert("podEntries".into(), Value::Null);
            }
            PodEntries::Map(map) => {
                let pods = map
                    .iter()
                    .map(|(uid, cpus)| (uid.clone(), serde_json::json!({ "cpuSet": cpus })))
                    .collect();
                obj.insert("podEntries".into(), Value::Object(pods));
            }
        }
        obj.insert("checksum".into(), Value::from(self.checksum));
        Value::Object(obj).to_string()
    }
}

#[cfg(test)]
mod tests;
