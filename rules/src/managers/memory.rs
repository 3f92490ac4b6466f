//! The memory manager checkpoint, `<kubelet dir>/memory_manager_state`.
//!
//! Upstream: `pkg/kubelet/cm/memorymanager/state/checkpoint.go` and `state.go`. One struct from
//! 1.21 to 1.35; 1.36 added a V2 with pod-level `podEntries` (`PodLevelResourceManagers`); 1.37
//! development builds write a V3 that keeps a V1 copy outside and the real checkpoint as a
//! JSON string in `data`, with its own `dataChecksum`. docs/kubelet.md ("The memory manager
//! checkpoint") has the layouts, the checksum renderings and what each kubelet accepts.
//!
//! Reading follows Go's `encoding/json` as the kubelet uses it: keys match field names without
//! regard to case (Go's folding, which also lets `ſ`, `K` (U+212A), `İ` and `ı` stand for `s`,
//! `k` and `i`), unknown keys are skipped, a key given twice decodes into the same field again
//! (two `machineState` objects merge; a map key given twice keeps the last), `null` leaves a
//! string or number at zero and makes a map or a slice nil, and a number must be an integer
//! literal in the field's range (`int` is 64-bit, sizes are `uint64`). Nil and empty maps and
//! slices stay apart, because the checksum renders them differently.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::checkpoint::checksum::{first_match, verify_payload};
use crate::checkpoint::{CheckpointError, Verification, invalid_json, json_reason};

mod spew;

pub use spew::{checksum, spew_dump};

/// `machineState`: NUMA node id -> node (`None`: a `null` node, a nil pointer in Go).
pub type NumaNodeMap = BTreeMap<i64, Option<RawNumaNode>>;

/// `entries`: pod UID -> container name -> blocks (`None`: `null`, nil in Go).
pub type ContainerMemoryAssignments = BTreeMap<String, Option<BTreeMap<String, Option<Vec<RawBlock>>>>>;

/// V2 `podEntries`: pod UID -> the pod's `memoryBlocks` (`None`: nil; a `null` entry and an
/// entry without `memoryBlocks` are both a `PodEntry` whose blocks are nil).
pub type PodMemoryAssignments = BTreeMap<String, Option<Vec<RawBlock>>>;

/// One `NUMANodeState` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawNumaNode {
    pub number_of_assignments: i64,
    /// `memoryMap`: resource name -> table (`None` inside: a `null` table).
    pub memory_map: Option<BTreeMap<String, Option<RawMemoryTable>>>,
    pub cells: Option<Vec<i64>>,
}

/// One `MemoryTable` as written, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawMemoryTable {
    pub total: u64,
    pub system_reserved: u64,
    pub allocatable: u64,
    pub reserved: u64,
    pub free: u64,
}

/// One `Block` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawBlock {
    pub numa_affinity: Option<Vec<i64>>,
    /// `type`: `memory`, `hugepages-1Gi`, ...
    pub resource: String,
    pub size: u64,
}

/// `podEntries` of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodEntries {
    /// No `podEntries` key: the V2 struct keeps the empty map it was created with.
    Absent,
    /// `"podEntries": null`.
    Null,
    Map(PodMemoryAssignments),
    /// A value the V2 struct cannot decode. A 1.36 or later kubelet then falls back to the V1
    /// struct, which has no such field, so the file still loads (as V1, without pod entries).
    Invalid(CheckpointError),
}

/// A V3 file's real checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V3Payload {
    /// `data` exactly as stored (itself a JSON checkpoint without a checksum).
    pub data: String,
    /// The stored `dataChecksum`.
    pub data_checksum: u64,
    /// `data` decoded (its `checksum` is 0 and it has no payload of its own).
    pub inner: Box<MemoryCheckpoint>,
}

/// The file as written (raw model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryCheckpoint {
    pub policy_name: String,
    /// `None` for `"machineState": null`; an absent key is an empty map (the kubelet creates
    /// the struct with one before decoding).
    pub machine_state: Option<NumaNodeMap>,
    /// As `machine_state`.
    pub entries: Option<ContainerMemoryAssignments>,
    pub pod_entries: PodEntries,
    /// The stored checksum (`0`: "not computed", see [`MemoryCheckpoint::verify`]).
    pub checksum: u64,
    /// Present when the file carries a V3 payload (`data` not empty or `dataChecksum` not 0).
    pub v3: Option<V3Payload>,
}

/// The struct renderings the kubelet has hashed, in the order [`MemoryCheckpoint::verify`]
/// tries them. A V3 file is checked by its `dataChecksum` alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum MemoryCandidate {
    /// `PolicyName MachineState Entries Checksum` as `MemoryManagerCheckpoint`: every kubelet
    /// from 1.21, and the V1 fallback of 1.36 and later.
    V1,
    /// V1 plus `PodEntries`, as `MemoryManagerCheckpoint`: 1.36 with `PodLevelResourceManagers`
    /// on, and the V2 fallback of 1.37.
    V2,
    /// V1 printed as `MemoryManagerCheckpointV1`: 1.36 development builds with the gate off,
    /// before kubernetes#137751 made them hash under the old name.
    V1Named,
}

impl MemoryCandidate {
    /// Every candidate in verification order.
    pub const ORDER: [MemoryCandidate; 3] = [MemoryCandidate::V1, MemoryCandidate::V2, MemoryCandidate::V1Named];

    /// The layout name (`V1`, `V2`).
    pub fn layout(self) -> &'static str {
        match self {
            MemoryCandidate::V1 | MemoryCandidate::V1Named => "V1",
            MemoryCandidate::V2 => "V2",
        }
    }

    /// The Go type name go-spew prints for this candidate.
    pub fn type_name(self) -> &'static str {
        match self {
            MemoryCandidate::V1 | MemoryCandidate::V2 => "MemoryManagerCheckpoint",
            MemoryCandidate::V1Named => "MemoryManagerCheckpointV1",
        }
    }
}

/// The file's meaning.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryState {
    /// `policyName` (`Static`, `None`; `BestEffort` on Windows).
    pub policy_name: String,
    /// `machineState`, sorted by NUMA node id.
    pub numa_nodes: Vec<NumaMemory>,
    /// `entries`, sorted by (pod UID, container name).
    pub assignments: Vec<MemoryAssignment>,
    /// V2 and V3 `podEntries`: (pod UID, the pod's blocks), sorted by UID. Which kubelets use
    /// them: docs/kubelet.md ("The memory manager checkpoint").
    pub pod_assignments: Vec<(String, Vec<MemoryBlock>)>,
}

/// One NUMA node of `machineState`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct NumaMemory {
    pub id: i64,
    /// `numberOfAssignments`.
    pub assignments: i64,
    /// `cells`: the NUMA nodes this one is grouped with for multi-node assignments.
    pub cells: Vec<i64>,
    /// `memoryMap`, sorted by resource name (`hugepages-1Gi`, ..., `memory`).
    pub resources: Vec<MemoryTable>,
}

/// One resource of a NUMA node, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryTable {
    pub resource: String,
    pub total: u64,
    pub system_reserved: u64,
    pub allocatable: u64,
    pub reserved: u64,
    pub free: u64,
}

/// One container's memory blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryAssignment {
    pub pod_uid: String,
    pub container: String,
    pub blocks: Vec<MemoryBlock>,
}

/// One block: `size` bytes of `type` on the NUMA nodes of `numaAffinity`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryBlock {
    pub numa_nodes: Vec<i64>,
    pub resource: String,
    pub bytes: u64,
}

impl MemoryCheckpoint {
    /// Reads a checkpoint file's bytes. Does not check the checksum ([`MemoryCheckpoint::verify`]).
    ///
    /// Errors are those every kubelet refuses the file for: invalid JSON, a V1 field of the
    /// wrong type, and for a V3 file a `data` that does not decode. A `podEntries` that does
    /// not decode is kept as [`PodEntries::Invalid`], since the kubelet then reads the file
    /// as V1.
    pub fn parse(bytes: &[u8]) -> Result<MemoryCheckpoint, CheckpointError> {
        // The CPU reader's limits and error messages first; then the tree that keeps raw
        // numbers and repeated keys, which serde_json's Value cannot.
        super::parse_object(bytes)?;
        let root = tree_of_slice(bytes).map_err(|e| CheckpointError::Json {
            line: e.line(),
            column: e.column(),
            reason: json_reason(&e),
        })?;
        let J::Obj(pairs) = root else {
            return Err(CheckpointError::NotAnObject { found: root.kind() });
        };
        decode_file(&pairs)
    }

    /// The checkpoint whose content the kubelet uses: the V3 payload when there is one.
    pub fn effective(&self) -> &MemoryCheckpoint {
        self.v3.as_ref().map_or(self, |p| &p.inner)
    }

    /// The file's layout by shape: V3 with a payload, V2 with a `podEntries` key, else V1.
    pub fn layout(&self) -> &'static str {
        if self.v3.is_some() {
            "V3"
        } else if matches!(self.pod_entries, PodEntries::Absent) {
            "V1"
        } else {
            "V2"
        }
    }

    /// Matches the stored checksum against every rendering in [`MemoryCandidate::ORDER`] and
    /// says which one matched; a V3 file by its `dataChecksum`.
    ///
    /// A stored `0` that no rendering matches is [`Verification::Unverified`]: the V1 verifier
    /// of 1.36 and later accepts it without a check, while 1.21 to 1.35 refuse it.
    pub fn verify(&self) -> Verification {
        if let Some(payload) = &self.v3 {
            return verify_payload("V3", &payload.data, payload.data_checksum);
        }
        let tried = MemoryCandidate::ORDER
            .into_iter()
            .filter_map(|c| checksum(self, c).map(|sum| (c.layout(), c.type_name(), sum)));
        let computed = match first_match(self.checksum, tried) {
            Ok(matched) => return matched,
            Err(computed) => computed,
        };
        if self.checksum == 0 {
            return Verification::Unverified { layout: "V1" };
        }
        Verification::Mismatch {
            stored: self.checksum,
            computed,
        }
    }

    /// The file's meaning, from the V3 payload when there is one. Never fails for a parsed
    /// checkpoint: every value was checked by [`MemoryCheckpoint::parse`].
    pub fn state(&self) -> Result<MemoryState, CheckpointError> {
        let cp = self.effective();
        let numa_nodes = cp
            .machine_state
            .iter()
            .flatten()
            .map(|(&id, node)| {
                let node = node.clone().unwrap_or_default();
                NumaMemory {
                    id,
                    assignments: node.number_of_assignments,
                    cells: node.cells.unwrap_or_default(),
                    resources: node
                        .memory_map
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(resource, table)| {
                            let t = table.unwrap_or_default();
                            MemoryTable {
                                resource,
                                total: t.total,
                                system_reserved: t.system_reserved,
                                allocatable: t.allocatable,
                                reserved: t.reserved,
                                free: t.free,
                            }
                        })
                        .collect(),
                }
            })
            .collect();
        let mut assignments = Vec::new();
        for (pod_uid, containers) in cp.entries.iter().flatten() {
            for (container, blocks) in containers.iter().flatten() {
                assignments.push(MemoryAssignment {
                    pod_uid: pod_uid.clone(),
                    container: container.clone(),
                    blocks: meaning_of_blocks(blocks),
                });
            }
        }
        let pod_assignments = match &cp.pod_entries {
            PodEntries::Map(map) => map
                .iter()
                .map(|(uid, blocks)| (uid.clone(), meaning_of_blocks(blocks)))
                .collect(),
            PodEntries::Absent | PodEntries::Null | PodEntries::Invalid(_) => Vec::new(),
        };
        Ok(MemoryState {
            policy_name: cp.policy_name.clone(),
            numa_nodes,
            assignments,
            pod_assignments,
        })
    }
}

fn meaning_of_blocks(blocks: &Option<Vec<RawBlock>>) -> Vec<MemoryBlock> {
    blocks
        .iter()
        .flatten()
        .map(|b| MemoryBlock {
            numa_nodes: b.numa_affinity.clone().unwrap_or_default(),
            resource: b.resource.clone(),
            bytes: b.size,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Decoding, as Go's encoding/json decodes into the kubelet's structs.
// ---------------------------------------------------------------------------------------------

/// A JSON value with repeated keys kept in file order and numbers as written.
#[derive(Debug)]
enum J {
    Null,
    Bool,
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn kind(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool => "a boolean",
            J::Num(_) => "a number",
            J::Str(_) => "a string",
            J::Arr(_) => "an array",
            J::Obj(_) => "an object",
        }
    }
}

/// An object's members in file order, repeated keys included.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(V)
    }
}

fn tree_of_slice(bytes: &[u8]) -> Result<J, serde_json::Error> {
    let raw: Box<RawValue> = serde_json::from_slice(bytes)?;
    tree(&raw)
}

fn tree_of_str(text: &str) -> Result<J, serde_json::Error> {
    let raw: Box<RawValue> = serde_json::from_str(text)?;
    tree(&raw)
}

/// The input was validated as a whole first, so the recursion is as deep as serde_json's
/// nesting limit allows at most.
fn tree(raw: &RawValue) -> Result<J, serde_json::Error> {
    let text = raw.get().trim();
    Ok(match text.as_bytes().first() {
        Some(b'{') => {
            let Members(members) = serde_json::from_str(text)?;
            let mut pairs = Vec::with_capacity(members.len());
            for (k, v) in members {
                pairs.push((k, tree(&v)?));
            }
            J::Obj(pairs)
        }
        Some(b'[') => {
            let items: Vec<Box<RawValue>> = serde_json::from_str(text)?;
            J::Arr(items.iter().map(|v| tree(v)).collect::<Result<_, _>>()?)
        }
        Some(b'"') => J::Str(serde_json::from_str(text)?),
        Some(b'n') => J::Null,
        Some(b't' | b'f') => J::Bool,
        _ => J::Num(text.to_string()),
    })
}

/// Go's `encoding/json` key folding: ASCII letters to upper case, and any other character to
/// `unicode.ToUpper(unicode.ToLower(r))`. Only the characters that fold onto an ASCII letter
/// can make a key match one of these (ASCII) field names.
fn fold(c: char) -> char {
    match c {
        'ſ' => 'S',
        '\u{212A}' => 'K',
        'İ' | 'ı' => 'I',
        c => c.to_ascii_uppercase(),
    }
}

/// Whether `key` decodes into the field whose JSON name is `name`.
fn is_field(key: &str, name: &str) -> bool {
    key.chars().map(fold).eq(name.chars().map(fold))
}

fn type_error(field: &str, expected: &'static str, v: &J) -> CheckpointError {
    CheckpointError::FieldType {
        field: field.to_string(),
        expected,
        found: v.kind().to_string(),
    }
}

fn number_error(field: &str, expected: &'static str, text: &str) -> CheckpointError {
    CheckpointError::FieldType {
        field: field.to_string(),
        expected,
        found: format!("the number {text}"),
    }
}

/// A Go `string`: `null` leaves it as it is.
fn dec_string(field: &str, v: &J, slot: &mut String) -> Result<(), CheckpointError> {
    match v {
        J::Null => Ok(()),
        J::Str(s) => {
            slot.clone_from(s);
            Ok(())
        }
        other => Err(type_error(field, "a string", other)),
    }
}

/// A Go `uint64`: `strconv.ParseUint(text, 10, 64)`, so no sign, fraction or exponent.
fn dec_u64(field: &str, v: &J, slot: &mut u64) -> Result<(), CheckpointError> {
    match v {
        J::Null => Ok(()),
        J::Num(text) => {
            *slot = text
                .parse::<u64>()
                .map_err(|_| number_error(field, "an unsigned 64-bit integer", text))?;
            Ok(())
        }
        other => Err(type_error(field, "an unsigned integer", other)),
    }
}

/// A Go `int` (64-bit on the kubelet's platforms): `strconv.ParseInt(text, 10, 64)`.
fn dec_i64(field: &str, v: &J, slot: &mut i64) -> Result<(), CheckpointError> {
    match v {
        J::Null => Ok(()),
        J::Num(text) => {
            *slot = text
                .parse::<i64>()
                .map_err(|_| number_error(field, "a 64-bit integer", text))?;
            Ok(())
        }
        other => Err(type_error(field, "an integer", other)),
    }
}

type Decode<T> = fn(&str, &J, &mut T) -> Result<(), CheckpointError>;

/// A Go slice: `null` makes it nil; an array decodes element by element into the slice it
/// already has (elements past the old length start at zero) and then sets its length.
fn dec_slice<T: Default>(
    field: &str,
    v: &J,
    slot: &mut Option<Vec<T>>,
    elem: Decode<T>,
) -> Result<(), CheckpointError> {
    match v {
        J::Null => {
            *slot = None;
            Ok(())
        }
        J::Arr(items) => {
            let vec = slot.get_or_insert_with(Vec::new);
            for (i, item) in items.iter().enumerate() {
                if i == vec.len() {
                    vec.push(T::default());
                }
                if let Some(e) = vec.get_mut(i) {
                    elem(&format!("{field}[{i}]"), item, e)?;
                }
            }
            vec.truncate(items.len());
            Ok(())
        }
        other => Err(type_error(field, "an array", other)),
    }
}

/// A Go map: `null` makes it nil; an object adds to the map it already has, each key's value
/// decoded into a fresh zero value (a key given twice keeps the last).
fn dec_map<K: Ord, V: Default>(
    field: &str,
    v: &J,
    slot: &mut Option<BTreeMap<K, V>>,
    key: fn(&str, &str) -> Result<K, CheckpointError>,
    value: Decode<V>,
) -> Result<(), CheckpointError> {
    match v {
        J::Null => {
            *slot = None;
            Ok(())
        }
        J::Obj(members) => {
            let map = slot.get_or_insert_with(BTreeMap::new);
            for (k, val) in members {
                let at = format!("{field}[{k:?}]");
                let mut fresh = V::default();
                value(&at, val, &mut fresh)?;
                map.insert(key(field, k)?, fresh);
            }
            Ok(())
        }
        other => Err(type_error(field, "an object", other)),
    }
}

fn string_key(_field: &str, k: &str) -> Result<String, CheckpointError> {
    Ok(k.to_string())
}

/// An `int` map key: `strconv.ParseInt(key, 10, 64)`, which also takes `+1` and `007`.
fn numa_key(field: &str, k: &str) -> Result<i64, CheckpointError> {
    k.parse::<i64>().map_err(|_| CheckpointError::FieldType {
        field: format!("{field}[{k:?}]"),
        expected: "a NUMA node id (a decimal integer)",
        found: format!("the key {k:?}"),
    })
}

/// A Go pointer to a struct: `null` makes it nil; an object allocates it and decodes into it.
fn dec_ptr<T: Default>(field: &str, v: &J, slot: &mut Option<T>, inner: Decode<T>) -> Result<(), CheckpointError> {
    if let J::Null = v {
        *slot = None;
        return Ok(());
    }
    inner(field, v, slot.get_or_insert_with(T::default))
}

/// A struct's members: `null` leaves the struct as it is, an object decodes its known keys.
fn members<'a>(field: &str, v: &'a J) -> Result<&'a [(String, J)], CheckpointError> {
    match v {
        J::Null => Ok(&[]),
        J::Obj(members) => Ok(members),
        other => Err(type_error(field, "an object", other)),
    }
}

fn dec_node(field: &str, v: &J, node: &mut RawNumaNode) -> Result<(), CheckpointError> {
    for (k, val) in members(field, v)? {
        if is_field(k, "numberOfAssignments") {
            dec_i64(
                &format!("{field}.numberOfAssignments"),
                val,
                &mut node.number_of_assignments,
            )?;
        } else if is_field(k, "memoryMap") {
            dec_map(
                &format!("{field}.memoryMap"),
                val,
                &mut node.memory_map,
                string_key,
                |f, v, t| dec_ptr(f, v, t, dec_table),
            )?;
        } else if is_field(k, "cells") {
            dec_slice(&format!("{field}.cells"), val, &mut node.cells, dec_i64)?;
        }
    }
    Ok(())
}

fn dec_table(field: &str, v: &J, t: &mut RawMemoryTable) -> Result<(), CheckpointError> {
    for (k, val) in members(field, v)? {
        let slot = if is_field(k, "total") {
            &mut t.total
        } else if is_field(k, "systemReserved") {
            &mut t.system_reserved
        } else if is_field(k, "allocatable") {
            &mut t.allocatable
        } else if is_field(k, "reserved") {
            &mut t.reserved
        } else if is_field(k, "free") {
            &mut t.free
        } else {
            continue;
        };
        let name = canonical(k, &["total", "systemReserved", "allocatable", "reserved", "free"]);
        dec_u64(&format!("{field}.{name}"), val, slot)?;
    }
    Ok(())
}

/// The JSON name among `names` that `key` decodes into (for error messages).
fn canonical<'a>(key: &'a str, names: &[&'a str]) -> &'a str {
    names.iter().copied().find(|n| is_field(key, n)).unwrap_or(key)
}

fn dec_block(field: &str, v: &J, b: &mut RawBlock) -> Result<(), CheckpointError> {
    for (k, val) in members(field, v)? {
        if is_field(k, "numaAffinity") {
            dec_slice(&format!("{field}.numaAffinity"), val, &mut b.numa_affinity, dec_i64)?;
        } else if is_field(k, "type") {
            dec_string(&format!("{field}.type"), val, &mut b.resource)?;
        } else if is_field(k, "size") {
            dec_u64(&format!("{field}.size"), val, &mut b.size)?;
        }
    }
    Ok(())
}

fn dec_blocks(field: &str, v: &J, slot: &mut Option<Vec<RawBlock>>) -> Result<(), CheckpointError> {
    dec_slice(field, v, slot, dec_block)
}

fn dec_machine_state(field: &str, v: &J, slot: &mut Option<NumaNodeMap>) -> Result<(), CheckpointError> {
    dec_map(field, v, slot, numa_key, |f, v, node| dec_ptr(f, v, node, dec_node))
}

fn dec_entries(field: &str, v: &J, slot: &mut Option<ContainerMemoryAssignments>) -> Result<(), CheckpointError> {
    dec_map(field, v, slot, string_key, |f, v, containers| {
        dec_map(f, v, containers, string_key, dec_blocks)
    })
}

/// `podEntries`: pod UID -> `PodEntry{MemoryBlocks}` (a struct, not a pointer, so a `null`
/// entry is a zero entry).
fn dec_pod_entries(field: &str, v: &J, slot: &mut PodEntries) -> Result<(), CheckpointError> {
    let mut map = match std::mem::replace(slot, PodEntries::Absent) {
        PodEntries::Map(map) => Some(map),
        PodEntries::Absent | PodEntries::Null | PodEntries::Invalid(_) => Some(BTreeMap::new()),
    };
    let result = dec_map(field, v, &mut map, string_key, |f, v, blocks| {
        for (k, val) in members(f, v)? {
            if is_field(k, "memoryBlocks") {
                dec_blocks(&format!("{f}.memoryBlocks"), val, blocks)?;
            }
        }
        Ok(())
    });
    *slot = match map {
        Some(map) => PodEntries::Map(map),
        None => PodEntries::Null,
    };
    result
}

/// The fields the V1 struct has (and the V3 struct's outer part, and the V3 payload).
fn dec_common(k: &str, v: &J, prefix: &str, cp: &mut MemoryCheckpoint) -> Result<bool, CheckpointError> {
    if is_field(k, "policyName") {
        dec_string(&format!("{prefix}policyName"), v, &mut cp.policy_name)?;
    } else if is_field(k, "machineState") {
        dec_machine_state(&format!("{prefix}machineState"), v, &mut cp.machine_state)?;
    } else if is_field(k, "entries") {
        dec_entries(&format!("{prefix}entries"), v, &mut cp.entries)?;
    } else {
        return Ok(false);
    }
    Ok(true)
}

fn empty_checkpoint() -> MemoryCheckpoint {
    MemoryCheckpoint {
        policy_name: String::new(),
        machine_state: Some(BTreeMap::new()),
        entries: Some(BTreeMap::new()),
        pod_entries: PodEntries::Absent,
        checksum: 0,
        v3: None,
    }
}

fn decode_file(pairs: &[(String, J)]) -> Result<MemoryCheckpoint, CheckpointError> {
    let mut cp = empty_checkpoint();
    // `data` and `dataChecksum` only count when the file is a V3 one; `podEntries` only for
    // the V2 struct. Their errors are kept and judged at the end, as the kubelet does.
    let mut data = String::new();
    let mut data_sum: u64 = 0;
    let mut data_error: Option<CheckpointError> = None;
    for (k, v) in pairs {
        if dec_common(k, v, "", &mut cp)? {
            // policyName, machineState, entries: done.
        } else if is_field(k, "checksum") {
            dec_u64("checksum", v, &mut cp.checksum)?;
        } else if is_field(k, "podEntries") {
            if !matches!(cp.pod_entries, PodEntries::Invalid(_)) {
                if let Err(e) = dec_pod_entries("podEntries", v, &mut cp.pod_entries) {
                    cp.pod_entries = PodEntries::Invalid(e);
                }
            }
        } else if is_field(k, "data") {
            if let Err(e) = dec_string("data", v, &mut data) {
                data_error.get_or_insert(e);
            }
        } else if is_field(k, "dataChecksum") {
            if let Err(e) = dec_u64("dataChecksum", v, &mut data_sum) {
                data_error.get_or_insert(e);
            }
        }
    }
    // 1.37 reads the file as V3 first; when that fails it falls back to V2 and V1 only if
    // `data` is empty and `dataChecksum` is 0 (state_checkpoint.go, loadAndMigrateCheckpointV3).
    if data.is_empty() && data_sum == 0 {
        return Ok(cp);
    }
    if let Some(e) = data_error {
        return Err(e);
    }
    let inner = decode_payload(&data)?;
    cp.v3 = Some(V3Payload {
        data,
        data_checksum: data_sum,
        inner: Box::new(inner),
    });
    Ok(cp)
}

/// `MemoryManagerCheckpointData`: policy, machine state, entries and pod entries, decoded
/// strictly (any error fails the V3 load, and a V3 file is not read any other way).
fn decode_payload(data: &str) -> Result<MemoryCheckpoint, CheckpointError> {
    let tree = tree_of_str(data).map_err(|e| CheckpointError::Value {
        field: "data".into(),
        reason: invalid_json(&e),
    })?;
    let mut cp = empty_checkpoint();
    let pairs = match &tree {
        // Go decodes `null` into a struct as "leave it".
        J::Null => return Ok(cp),
        J::Obj(pairs) => pairs,
        other => {
            return Err(CheckpointError::Value {
                field: "data".into(),
                reason: format!("holds {}, not a JSON object", other.kind()),
            });
        }
    };
    for (k, v) in pairs {
        if dec_common(k, v, "data.", &mut cp)? {
            continue;
        }
        if is_field(k, "podEntries") {
            dec_pod_entries("data.podEntries", v, &mut cp.pod_entries)?;
        }
    }
    Ok(cp)
}

#[cfg(test)]
mod tests;
