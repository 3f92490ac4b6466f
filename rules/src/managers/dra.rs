//! The DRA manager checkpoint, `<kubelet dir>/dra_manager_state`.
//!
//! The kubelet's Dynamic Resource Allocation manager records every ResourceClaim it has
//! prepared on the node (`pkg/kubelet/cm/dra/state/`). The file has had two generations:
//!
//! - **1.27 to 1.30** (and 1.31 development trees): `{"version":"v1","entries":[...],
//!   "checksum":N}`, where `N` is the FNV-1a 32 of the go-spew dump of the Go struct, as for
//!   the CPU manager ([`crate::checkpoint::checksum`]). The struct of an entry changed with
//!   the release, so the hash depends on the kubelet version: layout `1.27` (`CDIDevices` by
//!   driver), `1.28` (plus `ResourceHandles`), `1.30` (`ResourceHandles` gained
//!   `StructuredData`), `1.31-dev` (`DriverState` with per-device pools and requests).
//! - **1.31 and later**: `{"Data":"<JSON>","Checksum":N}`, where `Data` is the claim list as a
//!   JSON string and `N` the CRC-32 (IEEE) of exactly those bytes; layout `1.31`.
//!
//! Reading mirrors Go's `encoding/json` as the kubelet uses it: keys match without regard to
//! ASCII case, unknown keys are ignored, `null` leaves a field at the value the kubelet starts
//! from, and a nil list or map stays distinct from an empty one, because go-spew renders them
//! differently. docs/kubelet.md ("The DRA manager checkpoint") has the layouts, the upstream
//! sources and test vectors, and what the kubelet does with a file it cannot verify.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::checkpoint::{CheckpointError, Verification, go_string, invalid_json, read_u64, type_error};

mod checksum;

pub use checksum::crc32_ieee;
use checksum::{verify_data, verify_spew};

/// The `Data` a 1.31+ kubelet holds before it reads the file (`NewCheckpoint(nil)`): a file
/// without a `Data` key leaves it in place.
pub const DEFAULT_DATA: &str =
    r#"{"kind":"DRACheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v1","Entries":null}"#;

/// The file as written (raw model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraCheckpoint {
    /// Which generation of the file this is, with its fields.
    pub body: DraBody,
}

/// The two generations of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraBody {
    /// 1.27 to 1.31 development: `version`, `entries`, `checksum` (FNV-1a over go-spew).
    Spew(SpewBody),
    /// 1.31 and later: `Data` and `Checksum` (CRC-32 of `Data`).
    Data(DataBody),
}

/// A `version`/`entries`/`checksum` file, as the kubelet decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpewBody {
    /// `version`; `v1` when absent or `null` (the value the kubelet starts from).
    pub version: String,
    /// `entries` as written.
    pub entries: SpewEntries,
    /// `checksum`; 0 when absent or `null`.
    pub checksum: u64,
}

/// `entries` of a [`SpewBody`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpewEntries {
    /// No `entries` key: the kubelet keeps its empty (non-nil) list.
    Absent,
    /// `"entries": null`: a nil list, rendered `<nil>`.
    Null,
    /// The claims in file order.
    List(Vec<ClaimEntry>),
}

/// A `Data`/`Checksum` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataBody {
    /// `Data` as written; `None` when absent or `null` (the kubelet keeps [`DEFAULT_DATA`]).
    pub data: Option<String>,
    /// `Checksum`; `None` when absent or `null` (the kubelet keeps the CRC of [`DEFAULT_DATA`]).
    pub checksum: Option<u32>,
    /// The claims of `Data` (its `Entries`, or `ClaimInfoStateList` in the trees that name the
    /// list that way), in file order.
    pub entries: Vec<ClaimEntry>,
}

/// One element of the claim list. It holds the fields of every kubelet generation; each
/// generation reads only its own (docs/kubelet.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimEntry {
    /// `DriverName` (1.27 to 1.30).
    pub driver_name: String,
    /// `ClassName` (1.27 to 1.30).
    pub class_name: String,
    /// `ClaimUID`.
    pub claim_uid: String,
    /// `ClaimName`.
    pub claim_name: String,
    /// `Namespace` of the claim.
    pub namespace: String,
    /// `PodUIDs` (a Go set); `None` for a nil set.
    pub pod_uids: Option<BTreeSet<String>>,
    /// `ResourceHandles` (1.28 to 1.30); `None` for a nil list.
    pub resource_handles: Option<Vec<ResourceHandle>>,
    /// Whether the entry has a `ResourceHandles` key at all.
    pub has_resource_handles: bool,
    /// `CDIDevices` (1.27 to 1.30): driver -> CDI device IDs (`None` for a nil list).
    pub cdi_devices: Option<BTreeMap<String, Option<Vec<String>>>>,
    /// `DriverState` (1.31 and later): driver -> devices (`None` for a nil list).
    pub driver_state: Option<BTreeMap<String, Option<Vec<DeviceEntry>>>>,
    /// Whether the entry has a `DriverState` key at all.
    pub has_driver_state: bool,
}

/// One `ResourceHandles` element (`resource.k8s.io/v1alpha2` `ResourceHandle`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceHandle {
    /// `driverName`.
    pub driver_name: String,
    /// `data`: opaque to the kubelet.
    pub data: String,
    /// Whether `structuredData` (1.30) is set to something other than `null`.
    pub structured_data: bool,
}

/// One device of a `DriverState` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceEntry {
    /// `PoolName`: the ResourceSlice pool.
    pub pool_name: String,
    /// `DeviceName` within the pool.
    pub device_name: String,
    /// `ShareID` (1.34 and later); `None` when absent or `null`.
    pub share_id: Option<String>,
    /// `RequestNames`; `None` for a nil list.
    pub request_names: Option<Vec<String>>,
    /// `CDIDeviceIDs`; `None` for a nil list.
    pub cdi_device_ids: Option<Vec<String>>,
}

/// The file's meaning.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DraState {
    /// Which kubelet layout the file has.
    pub layout: &'static str,
    /// The prepared claims, sorted by claim UID.
    pub claims: Vec<DraClaim>,
}

/// One ResourceClaim the kubelet prepared.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DraClaim {
    pub claim_uid: String,
    pub claim_name: String,
    pub namespace: String,
    /// The pods that use it, sorted.
    pub pod_uids: Vec<String>,
    /// The devices prepared for it.
    pub devices: Vec<DraDevice>,
}

/// One prepared device.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DraDevice {
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// The claim's requests this device serves.
    pub requests: Vec<String>,
}

/// The Go structs a kubelet has hashed a `version`/`entries` file as, in the order tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Candidate {
    /// `ResourceHandles` of `v1alpha2.ResourceHandle{DriverName, Data}` (1.28, 1.29).
    V128,
    /// As V128, the handle with `StructuredData` (1.30).
    V130,
    /// No `ResourceHandles` (1.27, which hashes the file's own `version`).
    V127,
    /// The 1.27 struct as 1.28 to 1.30 re-hash it: version fixed at `v1`, type names renamed.
    V127Fallback,
    /// `DriverState` (1.31 development trees).
    V131Dev,
}

impl Candidate {
    const ORDER: [Candidate; 5] = [
        Candidate::V128,
        Candidate::V130,
        Candidate::V127,
        Candidate::V127Fallback,
        Candidate::V131Dev,
    ];

    fn layout(self) -> &'static str {
        match self {
            Candidate::V128 => "1.28",
            Candidate::V130 => "1.30",
            Candidate::V127 | Candidate::V127Fallback => "1.27",
            Candidate::V131Dev => "1.31-dev",
        }
    }

    fn type_name(self) -> &'static str {
        match self {
            Candidate::V127Fallback => "DRAManagerCheckpointWithoutResourceHandles",
            _ => "DRAManagerCheckpoint",
        }
    }
}

impl DraCheckpoint {
    /// Reads the file's bytes. Does not check the checksum (see [`DraCheckpoint::verify`]).
    pub fn parse(bytes: &[u8]) -> Result<DraCheckpoint, CheckpointError> {
        let obj = super::parse_object(bytes)?;
        let has = |name: &str| obj.keys().any(|k| k.eq_ignore_ascii_case(name));
        // A file with none of the keys is what a 1.31+ kubelet accepts as empty.
        let data_generation = has("data") || !(has("version") || has("entries") || has("checksum"));
        let body = if data_generation {
            DraBody::Data(parse_data_body(&obj)?)
        } else {
            DraBody::Spew(parse_spew_body(&obj)?)
        };
        Ok(DraCheckpoint { body })
    }

    /// Matches the stored checksum against every kubelet layout and says which one matched.
    pub fn verify(&self) -> Verification {
        match &self.body {
            DraBody::Data(body) => verify_data(body),
            DraBody::Spew(body) => verify_spew(body),
        }
    }

    /// The claims as the kubelet that wrote the file sees them.
    pub fn state(&self) -> Result<DraState, CheckpointError> {
        let layout = match self.verify() {
            Verification::Matched { layout, .. } => layout,
            _ => self.shape_layout(),
        };
        let entries: &[ClaimEntry] = match &self.body {
            DraBody::Data(body) => &body.entries,
            DraBody::Spew(body) => match &body.entries {
                SpewEntries::List(list) => list,
                SpewEntries::Absent | SpewEntries::Null => &[],
            },
        };
        let mut claims: Vec<DraClaim> = entries.iter().map(|e| claim_of(e, layout)).collect();
        claims.sort_by(|a, b| {
            (&a.claim_uid, &a.namespace, &a.claim_name).cmp(&(&b.claim_uid, &b.namespace, &b.claim_name))
        });
        Ok(DraState { layout, claims })
    }

    /// The layout the fields point to, for a file whose checksum matches none: `DriverState`
    /// means 1.31-dev, `structuredData` 1.30, `ResourceHandles` 1.28, else 1.27.
    pub fn shape_layout(&self) -> &'static str {
        let DraBody::Spew(body) = &self.body else {
            return "1.31";
        };
        let SpewEntries::List(list) = &body.entries else {
            return "1.28";
        };
        let structured = |e: &ClaimEntry| e.resource_handles.iter().flatten().any(|h| h.structured_data);
        if list.iter().any(|e| e.has_driver_state) {
            "1.31-dev"
        } else if list.iter().any(structured) {
            "1.30"
        } else if list.iter().any(|e| e.has_resource_handles) || list.is_empty() {
            "1.28"
        } else {
            "1.27"
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// The last value whose key equals `name` without regard to ASCII case (Go's field matching;
/// a later duplicate wins).
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

fn parse_spew_body(obj: &Map<String, Value>) -> Result<SpewBody, CheckpointError> {
    let version = match field(obj, "version") {
        None | Some(Value::Null) => "v1".to_string(),
        Some(v) => go_string("version", v)?,
    };
    let entries = match field(obj, "entries") {
        None => SpewEntries::Absent,
        Some(Value::Null) => SpewEntries::Null,
        Some(Value::Array(items)) => SpewEntries::List(claim_list("entries", items)?),
        Some(other) => return Err(type_error("entries", "an array", other)),
    };
    let checksum = field(obj, "checksum").map_or(Ok(0), |v| read_u64("checksum", v))?;
    Ok(SpewBody {
        version,
        entries,
        checksum,
    })
}

fn parse_data_body(obj: &Map<String, Value>) -> Result<DataBody, CheckpointError> {
    let data = match field(obj, "data") {
        None | Some(Value::Null) => None,
        Some(v) => Some(go_string("Data", v)?),
    };
    let checksum = match field(obj, "checksum") {
        None | Some(Value::Null) => None,
        Some(v) => Some(read_u32("Checksum", v)?),
    };
    let entries = payload_entries(data.as_deref().unwrap_or(DEFAULT_DATA))?;
    Ok(DataBody {
        data,
        checksum,
        entries,
    })
}

/// A Go `uint32`: JSON numbers outside 0..=4294967295 do not decode.
fn read_u32(field: &str, v: &Value) -> Result<u32, CheckpointError> {
    let n = read_u64(field, v)?;
    u32::try_from(n).map_err(|_| CheckpointError::FieldType {
        field: field.to_string(),
        expected: "an unsigned 32-bit integer",
        found: format!("the number {n}"),
    })
}

/// The claim list inside `Data` (`state.CheckpointData`).
fn payload_entries(data: &str) -> Result<Vec<ClaimEntry>, CheckpointError> {
    let value: Value = serde_json::from_str(data).map_err(|e| CheckpointError::Value {
        field: "Data".into(),
        reason: invalid_json(&e),
    })?;
    let obj = match &value {
        Value::Null => return Ok(Vec::new()),
        Value::Object(obj) => obj,
        other => return Err(type_error("Data", "a JSON object", other)),
    };
    for name in ["kind", "apiVersion"] {
        if let Some(v) = field(obj, name) {
            go_string(&format!("Data.{name}"), v)?;
        }
    }
    let (name, list) = match (field(obj, "Entries"), field(obj, "ClaimInfoStateList")) {
        (Some(v), _) => ("Entries", v),
        (None, Some(v)) => ("ClaimInfoStateList", v),
        (None, None) => return Ok(Vec::new()),
    };
    let path = format!("Data.{name}");
    match list {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => claim_list(&path, items),
        other => Err(type_error(path, "an array", other)),
    }
}

fn claim_list(path: &str, items: &[Value]) -> Result<Vec<ClaimEntry>, CheckpointError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| claim_entry(&format!("{path}[{i}]"), v))
        .collect()
}

/// One claim; `null` decodes to the zero value, as Go does for a list element.
fn claim_entry(path: &str, v: &Value) -> Result<ClaimEntry, CheckpointError> {
    let obj = match v {
        Value::Null => return Ok(ClaimEntry::default()),
        Value::Object(obj) => obj,
        other => return Err(type_error(path, "an object", other)),
    };
    let text = |name: &str| field(obj, name).map_or(Ok(String::new()), |v| go_string(&format!("{path}.{name}"), v));
    let handles = field(obj, "ResourceHandles");
    let driver_state = field(obj, "DriverState");
    Ok(ClaimEntry {
        driver_name: text("DriverName")?,
        class_name: text("ClassName")?,
        claim_uid: text("ClaimUID")?,
        claim_name: text("ClaimName")?,
        namespace: text("Namespace")?,
        pod_uids: pod_set(&format!("{path}.PodUIDs"), field(obj, "PodUIDs"))?,
        resource_handles: resource_handles(&format!("{path}.ResourceHandles"), handles)?,
        has_resource_handles: handles.is_some(),
        cdi_devices: cdi_map(&format!("{path}.CDIDevices"), field(obj, "CDIDevices"))?,
        driver_state: driver_states(&format!("{path}.DriverState"), driver_state)?,
        has_driver_state: driver_state.is_some(),
    })
}

/// A `sets.Set[string]`: an object whose values are empty structs (objects or `null`).
fn pod_set(path: &str, v: Option<&Value>) -> Result<Option<BTreeSet<String>>, CheckpointError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(obj)) => obj,
        Some(other) => return Err(type_error(path, "an object (a set of pod UIDs)", other)),
    };
    for (k, val) in obj {
        if !matches!(val, Value::Null | Value::Object(_)) {
            return Err(type_error(format!("{path}[{k:?}]"), "an empty object", val));
        }
    }
    Ok(Some(obj.keys().cloned().collect()))
}

/// A Go `[]string`: `None` for `null`; a `null` element is the empty string.
fn string_list(path: &str, v: Option<&Value>) -> Result<Option<Vec<String>>, CheckpointError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| go_string(&format!("{path}[{i}]"), item))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(type_error(path, "an array of strings", other)),
    }
}

fn resource_handles(path: &str, v: Option<&Value>) -> Result<Option<Vec<ResourceHandle>>, CheckpointError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(type_error(path, "an array", other)),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let obj = match item {
            Value::Null => {
                out.push(ResourceHandle::default());
                continue;
            }
            Value::Object(obj) => obj,
            other => return Err(type_error(p, "an object", other)),
        };
        let text = |name: &str| field(obj, name).map_or(Ok(String::new()), |v| go_string(&format!("{p}.{name}"), v));
        let structured_data = match field(obj, "structuredData") {
            None | Some(Value::Null) => false,
            Some(Value::Object(_)) => true,
            Some(other) => return Err(type_error(format!("{p}.structuredData"), "an object", other)),
        };
        out.push(ResourceHandle {
            driver_name: text("driverName")?,
            data: text("data")?,
            structured_data,
        });
    }
    Ok(Some(out))
}

type CdiMap = BTreeMap<String, Option<Vec<String>>>;

/// An object field read as a map by key (`None` when absent or `null`), each value read by
/// `value` with its path (`<path>["<key>"]`).
fn keyed<T>(
    path: &str,
    v: Option<&Value>,
    value: impl Fn(&str, &Value) -> Result<T, CheckpointError>,
) -> Result<Option<BTreeMap<String, T>>, CheckpointError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(obj)) => obj,
        Some(other) => return Err(type_error(path, "an object", other)),
    };
    let mut out = BTreeMap::new();
    for (key, v) in obj {
        out.insert(key.clone(), value(&format!("{path}[{key:?}]"), v)?);
    }
    Ok(Some(out))
}

fn cdi_map(path: &str, v: Option<&Value>) -> Result<Option<CdiMap>, CheckpointError> {
    keyed(path, v, |p, ids| string_list(p, Some(ids)))
}

type DriverStates = BTreeMap<String, Option<Vec<DeviceEntry>>>;

fn driver_states(path: &str, v: Option<&Value>) -> Result<Option<DriverStates>, CheckpointError> {
    keyed(path, v, |p, state| match state {
        Value::Null => Ok(None),
        Value::Object(state) => device_list(&format!("{p}.Devices"), field(state, "Devices")),
        other => Err(type_error(p, "an object", other)),
    })
}

fn device_list(path: &str, v: Option<&Value>) -> Result<Option<Vec<DeviceEntry>>, CheckpointError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(type_error(path, "an array", other)),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| device_entry(&format!("{path}[{i}]"), item))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn device_entry(path: &str, v: &Value) -> Result<DeviceEntry, CheckpointError> {
    let obj = match v {
        Value::Null => return Ok(DeviceEntry::default()),
        Value::Object(obj) => obj,
        other => return Err(type_error(path, "an object", other)),
    };
    let text = |name: &str| field(obj, name).map_or(Ok(String::new()), |v| go_string(&format!("{path}.{name}"), v));
    let share_id = match field(obj, "ShareID") {
        None | Some(Value::Null) => None,
        Some(v) => Some(go_string(&format!("{path}.ShareID"), v)?),
    };
    Ok(DeviceEntry {
        pool_name: text("PoolName")?,
        device_name: text("DeviceName")?,
        share_id,
        request_names: string_list(&format!("{path}.RequestNames"), field(obj, "RequestNames"))?,
        cdi_device_ids: string_list(&format!("{path}.CDIDeviceIDs"), field(obj, "CDIDeviceIDs"))?,
    })
}

// ---------------------------------------------------------------------------------------------
// Meaning

/// The device name of a CDI ID (`vendor.com/class=name` -> `name`).
fn cdi_device_name(id: &str) -> &str {
    id.split_once('=').map_or(id, |(_, name)| name)
}

/// One claim as the layout's kubelet reads it: `DriverState` devices for 1.31 and later, the
/// CDI devices by driver before (no pools or requests there).
fn claim_of(e: &ClaimEntry, layout: &str) -> DraClaim {
    let structured = matches!(layout, "1.31" | "1.31-dev");
    let mut devices = Vec::new();
    if structured {
        for (driver, list) in e.driver_state.iter().flatten() {
            for d in list.iter().flatten() {
                devices.push(DraDevice {
                    driver: driver.clone(),
                    pool: d.pool_name.clone(),
                    device: d.device_name.clone(),
                    requests: d.request_names.clone().unwrap_or_default(),
                });
            }
        }
    } else {
        for (driver, ids) in e.cdi_devices.iter().flatten() {
            for id in ids.iter().flatten() {
                devices.push(DraDevice {
                    driver: driver.clone(),
                    pool: String::new(),
                    device: cdi_device_name(id).to_string(),
                    requests: Vec::new(),
                });
            }
        }
    }
    DraClaim {
        claim_uid: e.claim_uid.clone(),
        claim_name: e.claim_name.clone(),
        namespace: e.namespace.clone(),
        pod_uids: e.pod_uids.iter().flatten().cloned().collect(),
        devices,
    }
}

#[cfg(test)]
mod tests;
