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
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::checkpoint::checksum::{first_match, fnv1a32};
use crate::checkpoint::{CheckpointError, Verification, go_string, invalid_json, read_u64, type_error};

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
// Checksums

/// CRC-32 with the IEEE polynomial, as Go's `hash/crc32.ChecksumIEEE`.
pub fn crc32_ieee(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc = CRC32_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The CRC-32 (IEEE, reflected polynomial 0xEDB88320) of every byte value, computed at compile
/// time: one lookup a byte instead of eight shifts.
const CRC32_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

fn verify_data(body: &DataBody) -> Verification {
    let computed = crc32_ieee(body.data.as_deref().unwrap_or(DEFAULT_DATA).as_bytes());
    let stored = body.checksum.unwrap_or_else(|| crc32_ieee(DEFAULT_DATA.as_bytes()));
    if computed == stored {
        Verification::Matched {
            layout: "1.31",
            type_name: "Checkpoint",
            v4: false,
        }
    } else {
        Verification::Mismatch {
            stored: u64::from(stored),
            computed: vec![("1.31 CRC-32 of Data".to_string(), computed)],
        }
    }
}

fn verify_spew(body: &SpewBody) -> Verification {
    let tried = Candidate::ORDER
        .into_iter()
        .filter_map(|c| spew_dump(body, c).map(|dump| (c.layout(), c.type_name(), fnv1a32(dump.as_bytes()))));
    let computed = match first_match(body.checksum, tried) {
        Ok(matched) => return matched,
        Err(computed) => computed,
    };
    Verification::Mismatch {
        stored: body.checksum,
        computed,
    }
}

/// The go-spew `%#v` dump of the checkpoint struct of `candidate` (checksum zeroed), or `None`
/// when that struct cannot hold the file (a 1.30 handle with `structuredData` set, which
/// nodemedic does not render).
fn spew_dump(body: &SpewBody, candidate: Candidate) -> Option<String> {
    let version = if candidate == Candidate::V127Fallback {
        "v1"
    } else {
        &body.version
    };
    let mut out = String::with_capacity(512);
    let _ = write!(
        out,
        "(*state.DRAManagerCheckpoint){{Version:(string){version} Entries:(state.ClaimInfoStateList)"
    );
    match &body.entries {
        // The fallback copies the entries into a fresh, non-nil list.
        SpewEntries::Null if candidate != Candidate::V127Fallback => out.push_str("<nil>"),
        SpewEntries::Null | SpewEntries::Absent => out.push_str("[]"),
        SpewEntries::List(list) => {
            out.push('[');
            for (i, entry) in list.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                dump_entry(&mut out, entry, candidate)?;
            }
            out.push(']');
        }
    }
    out.push_str(" Checksum:(checksum.Checksum)0}");
    Some(out)
}

fn dump_entry(out: &mut String, e: &ClaimEntry, candidate: Candidate) -> Option<()> {
    out.push('{');
    if candidate != Candidate::V131Dev {
        let _ = write!(
            out,
            "DriverName:(string){} ClassName:(string){} ",
            e.driver_name, e.class_name
        );
    }
    let _ = write!(
        out,
        "ClaimUID:(types.UID){} ClaimName:(string){} Namespace:(string){} PodUIDs:(sets.Set[string])",
        e.claim_uid, e.claim_name, e.namespace
    );
    dump_set(out, e.pod_uids.as_ref());
    match candidate {
        Candidate::V128 | Candidate::V130 => {
            out.push_str(" ResourceHandles:([]v1alpha2.ResourceHandle)");
            dump_handles(out, e.resource_handles.as_deref(), candidate == Candidate::V130)?;
            out.push_str(" CDIDevices:(map[string][]string)");
            dump_cdi(out, e.cdi_devices.as_ref());
        }
        Candidate::V127 | Candidate::V127Fallback => {
            out.push_str(" CDIDevices:(map[string][]string)");
            dump_cdi(out, e.cdi_devices.as_ref());
        }
        Candidate::V131Dev => {
            out.push_str(" DriverState:(map[string]state.DriverState)");
            dump_driver_state(out, e.driver_state.as_ref());
        }
    }
    out.push('}');
    Some(())
}

/// A list's elements carry no type annotation: `[a b]`, `[]` when empty, `<nil>` when nil.
fn dump_strings(out: &mut String, list: Option<&[String]>) {
    let Some(list) = list else {
        out.push_str("<nil>");
        return;
    };
    out.push('[');
    out.push_str(&list.join(" "));
    out.push(']');
}

fn dump_set(out: &mut String, set: Option<&BTreeSet<String>>) {
    let Some(set) = set else {
        out.push_str("<nil>");
        return;
    };
    out.push_str("map[");
    for (i, uid) in set.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{uid}:{{}}");
    }
    out.push(']');
}

fn dump_handles(out: &mut String, handles: Option<&[ResourceHandle]>, with_structured: bool) -> Option<()> {
    let Some(handles) = handles else {
        out.push_str("<nil>");
        return Some(());
    };
    out.push('[');
    for (i, h) in handles.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{{DriverName:(string){} Data:(string){}", h.driver_name, h.data);
        if with_structured {
            if h.structured_data {
                return None;
            }
            out.push_str(" StructuredData:(*v1alpha2.StructuredResourceHandle)<nil>");
        }
        out.push('}');
    }
    out.push(']');
    Some(())
}

fn dump_cdi(out: &mut String, cdi: Option<&CdiMap>) {
    let Some(cdi) = cdi else {
        out.push_str("<nil>");
        return;
    };
    out.push_str("map[");
    for (i, (driver, ids)) in cdi.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(driver);
        out.push(':');
        dump_strings(out, ids.as_deref());
    }
    out.push(']');
}

fn dump_driver_state(out: &mut String, state: Option<&DriverStates>) {
    let Some(state) = state else {
        out.push_str("<nil>");
        return;
    };
    out.push_str("map[");
    for (i, (driver, devices)) in state.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{driver}:{{Devices:([]state.Device)");
        match devices {
            None => out.push_str("<nil>"),
            Some(devices) => {
                out.push('[');
                for (j, d) in devices.iter().enumerate() {
                    if j > 0 {
                        out.push(' ');
                    }
                    let _ = write!(
                        out,
                        "{{PoolName:(string){} DeviceName:(string){} RequestNames:([]string)",
                        d.pool_name, d.device_name
                    );
                    dump_strings(out, d.request_names.as_deref());
                    out.push_str(" CDIDeviceIDs:([]string)");
                    dump_strings(out, d.cdi_device_ids.as_deref());
                    out.push('}');
                }
                out.push(']');
            }
        }
        out.push('}');
    }
    out.push(']');
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    const U1: &str = "067798be-454e-4be4-9047-1aa06aea63f7";
    const U2: &str = "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c";
    const POD: &str = "139cdb46-f989-4f17-9561-ca10cfb509a6";

    /// kubernetes/kubernetes `pkg/kubelet/cm/dra/state/state_checkpoint_test.go` (1.30 tree,
    /// resource.k8s.io/v1alpha2): `ResourceHandles` with `StructuredData`.
    const V130_SINGLE: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":"test-driver.cdi.k8s.io","data":"{\"a\": \"b\"}"}],"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example"]}}],"checksum":113577689}"#;
    const V130_TWO_PLUGINS: &str = r#"{"version":"v1","entries":[{"DriverName":"meta-test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":"test-driver-1.cdi.k8s.io","data":"{\"a\": \"b\"}"},{"driverName":"test-driver-2.cdi.k8s.io","data":"{\"c\": \"d\"}"}],"CDIDevices":{"test-driver-1.cdi.k8s.io":["example-1.com/example-1=cdi-example-1"],"test-driver-2.cdi.k8s.io":["example-2.com/example-2=cdi-example-2"]}}],"checksum":1466990255}"#;
    const V130_TWO_CLAIMS: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name-1","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example-1","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":"test-driver.cdi.k8s.io","data":"{\"a\": \"b\"}"}],"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example-1"]}},{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name-2","ClaimUID":"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c","ClaimName":"example-2","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":"test-driver.cdi.k8s.io","data":"{\"c\": \"d\"}"}],"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example-2"]}}],"checksum":471181742}"#;
    /// Same test file, `TestOldCheckpointRestore`: `"ResourceHandles":null` (1.28 to 1.30).
    const V128_NULL_HANDLES: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":null,"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example"]}}],"checksum":453625682}"#;
    /// Same test: a 1.27 file, accepted by 1.28 to 1.30 through the fallback.
    const V127: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example"]}}],"checksum":153446146}"#;
    /// Same file, "invalid checksum": upstream expects `checkpoint is corrupted`.
    const CORRUPT_127: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example"]}}],"checksum":1988120168}"#;

    /// The same test file in a 1.31 development tree (`DriverState`, FNV over go-spew).
    const DEV131_SINGLE: &str = r#"{"version":"v1","entries":[{"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]}]}}}],"checksum":1925941526}"#;
    const DEV131_TWO_DEVICES: &str = r#"{"version":"v1","entries":[{"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]},{"PoolName":"worker-1","DeviceName":"dev-2","RequestNames":["test request2"],"CDIDeviceIDs":["example.com/example=cdi-example2"]}]}}}],"checksum":3560752542}"#;
    const DEV131_TWO_CLAIMS: &str = r#"{"version":"v1","entries":[{"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example-1","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]}]}}},{"ClaimUID":"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c","ClaimName":"example-2","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]}]}}}],"checksum":351581974}"#;
    const DEV131_NULL_LISTS: &str = r#"{"version":"v1","entries":[{"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example-1","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]}]}}},{"ClaimUID":"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c","ClaimName":"example-2","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-2","RequestNames":null,"CDIDeviceIDs":null}]}}}],"checksum":1191151426}"#;

    /// kubernetes/kubernetes `pkg/kubelet/cm/dra/state/checkpointer_test.go` (1.31 and later).
    const V131_SINGLE: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1597924435}"#;
    const V131_TWO_DEVICES: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]},{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1812303514}"#;
    const V131_TWO_CLAIMS: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":3633532417}"#;
    /// Same test, "incorrect-checksum": upstream expects `checkpoint is corrupted`.
    const V131_CORRUPT: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":2930258365}"#;
    /// Another revision of that test file, whose list key is `ClaimInfoStateList`.
    const V131_LIST_KEY: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1656016162}"#;
    const V131_LIST_KEY_TWO_CLAIMS: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":1582256999}"#;

    /// (file, layout, Go type name) of every upstream vector that must verify.
    const UPSTREAM_VECTORS: &[(&str, &str, &str)] = &[
        (V130_SINGLE, "1.30", "DRAManagerCheckpoint"),
        (V130_TWO_PLUGINS, "1.30", "DRAManagerCheckpoint"),
        (V130_TWO_CLAIMS, "1.30", "DRAManagerCheckpoint"),
        (V128_NULL_HANDLES, "1.28", "DRAManagerCheckpoint"),
        (V127, "1.27", "DRAManagerCheckpoint"),
        (DEV131_SINGLE, "1.31-dev", "DRAManagerCheckpoint"),
        (DEV131_TWO_DEVICES, "1.31-dev", "DRAManagerCheckpoint"),
        (DEV131_TWO_CLAIMS, "1.31-dev", "DRAManagerCheckpoint"),
        (DEV131_NULL_LISTS, "1.31-dev", "DRAManagerCheckpoint"),
        (V131_SINGLE, "1.31", "Checkpoint"),
        (V131_TWO_DEVICES, "1.31", "Checkpoint"),
        (V131_TWO_CLAIMS, "1.31", "Checkpoint"),
        (V131_LIST_KEY, "1.31", "Checkpoint"),
        (V131_LIST_KEY_TWO_CLAIMS, "1.31", "Checkpoint"),
    ];

    fn parse(text: &str) -> DraCheckpoint {
        DraCheckpoint::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn parse_err(text: &str) -> CheckpointError {
        match DraCheckpoint::parse(text.as_bytes()) {
            Ok(cp) => panic!("{text}: parsed as {cp:?}"),
            Err(e) => e,
        }
    }

    fn spew(text: &str) -> SpewBody {
        match parse(text).body {
            DraBody::Spew(body) => body,
            DraBody::Data(_) => panic!("{text}: read as the Data layout"),
        }
    }

    fn device(driver: &str, pool: &str, name: &str, requests: &[&str]) -> DraDevice {
        DraDevice {
            driver: driver.into(),
            pool: pool.into(),
            device: name.into(),
            requests: requests.iter().map(|r| r.to_string()).collect(),
        }
    }

    fn claim(uid: &str, name: &str, devices: Vec<DraDevice>) -> DraClaim {
        DraClaim {
            claim_uid: uid.into(),
            claim_name: name.into(),
            namespace: "default".into(),
            pod_uids: vec![POD.into()],
            devices,
        }
    }

    fn assert_field_type(err: CheckpointError, want: &str) {
        match err {
            CheckpointError::FieldType { field, .. } => assert_eq!(field, want),
            other => panic!("expected a type error at {want}, got {other:?}"),
        }
    }

    #[test]
    fn crc32_matches_reference_values() {
        assert_eq!(crc32_ieee(b""), 0);
        assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_ieee(b"a"), 0xE8B7_BE43);
    }

    #[test]
    fn every_upstream_vector_verifies_with_its_layout() {
        for (text, layout, type_name) in UPSTREAM_VECTORS {
            match parse(text).verify() {
                Verification::Matched {
                    layout: l,
                    type_name: t,
                    v4,
                } => assert_eq!((l, t, v4), (*layout, *type_name, false), "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn upstream_corrupt_vectors_are_refused() {
        for text in [CORRUPT_127, V131_CORRUPT] {
            assert!(!parse(text).verify().accepted(), "{text}");
        }
    }

    /// The file with the last digit of its stored checksum changed.
    fn bump_checksum(text: &str) -> String {
        let end = text.rfind('}').unwrap_or(text.len());
        let mut bytes = text.as_bytes().to_vec();
        if let Some(d) = bytes.get_mut(end.saturating_sub(1)) {
            *d = if *d == b'9' { b'0' } else { *d + 1 };
        }
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn tampered_vectors_fail() {
        for (text, _, _) in UPSTREAM_VECTORS {
            let tampered = [
                text.replacen("example", "exbmple", 1),
                text.replacen("139cdb46", "139cdb47", 1),
                bump_checksum(text),
                text.replacen("default", "defaulu", 1),
            ];
            for t in tampered {
                assert_ne!(&t, text);
                let cp = DraCheckpoint::parse(t.as_bytes()).unwrap_or_else(|e| panic!("{t}: {e}"));
                assert!(!cp.verify().accepted(), "{t}");
            }
        }
    }

    #[test]
    fn v130_dump_is_exactly_the_kubelet_string() {
        let dump = spew_dump(&spew(V130_SINGLE), Candidate::V130).unwrap();
        let want = format!(
            "(*state.DRAManagerCheckpoint){{Version:(string)v1 Entries:(state.ClaimInfoStateList)[{{DriverName:(string)test-driver.cdi.k8s.io ClassName:(string)class-name ClaimUID:(types.UID){U1} ClaimName:(string)example Namespace:(string)default PodUIDs:(sets.Set[string])map[{POD}:{{}}] ResourceHandles:([]v1alpha2.ResourceHandle)[{{DriverName:(string)test-driver.cdi.k8s.io Data:(string){{\"a\": \"b\"}} StructuredData:(*v1alpha2.StructuredResourceHandle)<nil>}}] CDIDevices:(map[string][]string)map[test-driver.cdi.k8s.io:[example.com/example=cdi-example]]}}] Checksum:(checksum.Checksum)0}}"
        );
        assert_eq!(dump, want);
        assert_eq!(fnv1a32(dump.as_bytes()), 113_577_689);
    }

    #[test]
    fn dev131_dump_is_exactly_the_kubelet_string() {
        let dump = spew_dump(&spew(DEV131_NULL_LISTS), Candidate::V131Dev).unwrap();
        let want = format!(
            "(*state.DRAManagerCheckpoint){{Version:(string)v1 Entries:(state.ClaimInfoStateList)[{{ClaimUID:(types.UID){U1} ClaimName:(string)example-1 Namespace:(string)default PodUIDs:(sets.Set[string])map[{POD}:{{}}] DriverState:(map[string]state.DriverState)map[test-driver.cdi.k8s.io:{{Devices:([]state.Device)[{{PoolName:(string)worker-1 DeviceName:(string)dev-1 RequestNames:([]string)[test request] CDIDeviceIDs:([]string)[example.com/example=cdi-example]}}]}}]}} {{ClaimUID:(types.UID){U2} ClaimName:(string)example-2 Namespace:(string)default PodUIDs:(sets.Set[string])map[{POD}:{{}}] DriverState:(map[string]state.DriverState)map[test-driver.cdi.k8s.io:{{Devices:([]state.Device)[{{PoolName:(string)worker-1 DeviceName:(string)dev-2 RequestNames:([]string)<nil> CDIDeviceIDs:([]string)<nil>}}]}}]}}] Checksum:(checksum.Checksum)0}}"
        );
        assert_eq!(dump, want);
        assert_eq!(fnv1a32(dump.as_bytes()), 1_191_151_426);
    }

    #[test]
    fn v128_handles_hash_without_structured_data() {
        // No upstream vector has non-null handles in a 1.28/1.29 tree: check the rendering.
        let dump = spew_dump(&spew(V130_SINGLE), Candidate::V128).unwrap();
        assert!(dump.contains(
            "ResourceHandles:([]v1alpha2.ResourceHandle)[{DriverName:(string)test-driver.cdi.k8s.io Data:(string){\"a\": \"b\"}}] CDIDevices:"
        ));
        // The 1.30 vector does not verify as 1.28, and vice versa for a rewritten checksum.
        let sum = fnv1a32(dump.as_bytes());
        let as_128 = V130_SINGLE.replace("113577689", &sum.to_string());
        match parse(&as_128).verify() {
            Verification::Matched { layout, .. } => assert_eq!(layout, "1.28"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn v127_fallback_fixes_version_and_entries() {
        let body = spew(r#"{"version":"v9","entries":null,"checksum":1}"#);
        let own = spew_dump(&body, Candidate::V127).unwrap();
        let fallback = spew_dump(&body, Candidate::V127Fallback).unwrap();
        assert!(
            own.starts_with("(*state.DRAManagerCheckpoint){Version:(string)v9 Entries:(state.ClaimInfoStateList)<nil>")
        );
        assert!(
            fallback
                .starts_with("(*state.DRAManagerCheckpoint){Version:(string)v1 Entries:(state.ClaimInfoStateList)[]")
        );
    }

    #[test]
    fn structured_data_is_not_rendered() {
        let text = V130_SINGLE.replace(r#""data":"#, r#""structuredData":{"nodeName":"n"},"data":"#);
        let body = spew(&text);
        assert_eq!(spew_dump(&body, Candidate::V130), None);
        assert!(spew_dump(&body, Candidate::V128).is_some());
        assert_eq!(parse(&text).shape_layout(), "1.30");
    }

    #[test]
    fn v131_reads_devices_with_pools_and_requests() {
        let state = parse(V131_TWO_CLAIMS).state().unwrap();
        assert_eq!(state.layout, "1.31");
        assert_eq!(
            state.claims,
            vec![
                claim(
                    U1,
                    "example-1",
                    vec![device("test-driver.cdi.k8s.io", "worker-1", "dev-1", &["test request"])]
                ),
                claim(
                    U2,
                    "example-2",
                    vec![device("test-driver.cdi.k8s.io", "worker-1", "dev-2", &[])]
                ),
            ]
        );
        let list_key = parse(V131_LIST_KEY).state().unwrap();
        assert_eq!(list_key.claims.len(), 1);
        assert_eq!(list_key.claims[0].devices[0].device, "dev-1");
    }

    #[test]
    fn dev131_reads_devices() {
        let state = parse(DEV131_TWO_DEVICES).state().unwrap();
        assert_eq!(state.layout, "1.31-dev");
        assert_eq!(
            state.claims,
            vec![claim(
                U1,
                "example",
                vec![
                    device("test-driver.cdi.k8s.io", "worker-1", "dev-1", &["test request"]),
                    device("test-driver.cdi.k8s.io", "worker-1", "dev-2", &["test request2"]),
                ]
            )]
        );
    }

    #[test]
    fn classic_layouts_read_devices_from_cdi_ids() {
        let state = parse(V130_TWO_PLUGINS).state().unwrap();
        assert_eq!(state.layout, "1.30");
        assert_eq!(
            state.claims,
            vec![claim(
                U1,
                "example",
                vec![
                    device("test-driver-1.cdi.k8s.io", "", "cdi-example-1", &[]),
                    device("test-driver-2.cdi.k8s.io", "", "cdi-example-2", &[]),
                ]
            )]
        );
        let old = parse(V127).state().unwrap();
        assert_eq!(old.layout, "1.27");
        assert_eq!(
            old.claims,
            vec![claim(
                U1,
                "example",
                vec![device("test-driver.cdi.k8s.io", "", "cdi-example", &[])]
            )]
        );
        let null = parse(V128_NULL_HANDLES).state().unwrap();
        assert_eq!(null.layout, "1.28");
    }

    #[test]
    fn claims_are_sorted_by_uid() {
        let text = V130_TWO_CLAIMS
            .replace(U1, "ffff")
            .replace("checksum\":471181742", "checksum\":0");
        let state = parse(&text).state().unwrap();
        let uids: Vec<_> = state.claims.iter().map(|c| c.claim_uid.as_str()).collect();
        assert_eq!(uids, vec![U2, "ffff"]);
        // An unverified file is named by its shape.
        assert_eq!(state.layout, "1.28");
    }

    #[test]
    fn files_without_data_key_and_empty_files() {
        // {} is what a 1.31+ kubelet keeps its default for: accepted, empty.
        let empty = parse("{}");
        assert!(matches!(empty.verify(), Verification::Matched { layout: "1.31", .. }));
        assert_eq!(empty.state().unwrap().claims, vec![]);
        // A 1.30 file read by a 1.31+ kubelet is corrupt to it, but verifies as 1.30 here.
        assert!(matches!(parse(V130_SINGLE).body, DraBody::Spew(_)));
        // An old file whose checksum is absent hashes against 0: refused.
        assert!(!parse(r#"{"version":"v1"}"#).verify().accepted());
        // Data without Checksum keeps the default CRC, so only the default data verifies.
        let default_only = format!("{{\"Data\":{}}}", serde_json::to_string(DEFAULT_DATA).unwrap());
        assert!(parse(&default_only).verify().accepted());
        assert!(!parse(r#"{"Data":"{}"}"#).verify().accepted());
    }

    #[test]
    fn keys_match_without_case_and_later_duplicates_win() {
        let text = V131_SINGLE
            .replace("\"Data\"", "\"data\"")
            .replace("\"Checksum\"", "\"CHECKSUM\"");
        assert!(parse(&text).verify().accepted());
        let body = spew(r#"{"Version":"v1","VERSION":"v2","entries":[],"checksum":5}"#);
        assert_eq!(body.version, "v2");
        assert_eq!(body.entries, SpewEntries::List(vec![]));
    }

    #[test]
    fn nil_and_empty_stay_apart() {
        let with = |pods: &str| {
            let text = format!(r#"{{"version":"v1","entries":[{{"ClaimUID":"u","PodUIDs":{pods}}}],"checksum":0}}"#);
            spew_dump(&spew(&text), Candidate::V127).unwrap()
        };
        assert!(with("null").contains("PodUIDs:(sets.Set[string])<nil>"));
        assert!(with("{}").contains("PodUIDs:(sets.Set[string])map[]"));
        let entries = |e: &str| spew(&format!(r#"{{"entries":{e},"checksum":0}}"#)).entries;
        assert_eq!(entries("null"), SpewEntries::Null);
        assert_eq!(entries("[]"), SpewEntries::List(vec![]));
        assert_eq!(spew(r#"{"checksum":0}"#).entries, SpewEntries::Absent);
    }

    #[test]
    fn share_id_is_read() {
        let data =
            r#"{"Entries":[{"ClaimUID":"u","DriverState":{"d":{"Devices":[{"DeviceName":"x","ShareID":"s-1"}]}}}]}"#;
        let text = format!(
            r#"{{"Data":{},"Checksum":{}}}"#,
            serde_json::to_string(data).unwrap(),
            crc32_ieee(data.as_bytes())
        );
        let DraBody::Data(body) = parse(&text).body else {
            panic!("not the Data layout");
        };
        let devices = body.entries[0].driver_state.as_ref().unwrap()["d"].as_ref().unwrap();
        assert_eq!(devices[0].share_id.as_deref(), Some("s-1"));
        assert!(parse(&text).verify().accepted());
    }

    #[test]
    fn bad_input_names_the_field() {
        assert_field_type(parse_err(r#"{"version":1,"checksum":0}"#), "version");
        assert_field_type(parse_err(r#"{"entries":{},"checksum":0}"#), "entries");
        assert_field_type(parse_err(r#"{"entries":[1],"checksum":0}"#), "entries[0]");
        assert_field_type(parse_err(r#"{"entries":[{"ClaimUID":7}]}"#), "entries[0].ClaimUID");
        assert_field_type(parse_err(r#"{"entries":[{"PodUIDs":[]}]}"#), "entries[0].PodUIDs");
        assert_field_type(
            parse_err(r#"{"entries":[{"PodUIDs":{"p":1}}]}"#),
            "entries[0].PodUIDs[\"p\"]",
        );
        assert_field_type(
            parse_err(r#"{"entries":[{"ResourceHandles":[{"data":1}]}]}"#),
            "entries[0].ResourceHandles[0].data",
        );
        assert_field_type(
            parse_err(r#"{"entries":[{"CDIDevices":{"d":[1]}}]}"#),
            "entries[0].CDIDevices[\"d\"][0]",
        );
        assert_field_type(
            parse_err(r#"{"entries":[{"DriverState":{"d":{"Devices":[{"RequestNames":"r"}]}}}]}"#),
            "entries[0].DriverState[\"d\"].Devices[0].RequestNames",
        );
        assert_field_type(parse_err(r#"{"checksum":-1}"#), "checksum");
        assert_field_type(parse_err(r#"{"checksum":1.5}"#), "checksum");
        assert_field_type(parse_err(r#"{"Data":"{}","Checksum":4294967296}"#), "Checksum");
        assert_field_type(parse_err(r#"{"Data":5}"#), "Data");
        assert_field_type(parse_err(r#"{"Data":"[]"}"#), "Data");
        assert_field_type(parse_err(r#"{"Data":"{\"Entries\":{}}"}"#), "Data.Entries");
        assert_field_type(parse_err(r#"{"Data":"{\"kind\":1}"}"#), "Data.kind");
        assert_field_type(
            parse_err(r#"{"Data":"{\"Entries\":[{\"DriverState\":{\"d\":{\"Devices\":[{\"ShareID\":2}]}}}]}"}"#),
            "Data.Entries[0].DriverState[\"d\"].Devices[0].ShareID",
        );
        match parse_err(r#"{"Data":"{"}"#) {
            CheckpointError::Value { field, .. } => assert_eq!(field, "Data"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_err(""), CheckpointError::Empty));
        assert!(matches!(parse_err("{"), CheckpointError::Json { .. }));
        assert!(matches!(parse_err("[]"), CheckpointError::NotAnObject { .. }));
    }

    #[test]
    fn null_elements_are_zero_values() {
        let body = spew(r#"{"entries":[null,{"ClaimUID":null,"ResourceHandles":[null],"CDIDevices":{"d":null}}]}"#);
        let SpewEntries::List(list) = body.entries else {
            panic!("no list");
        };
        assert_eq!(list[0], ClaimEntry::default());
        assert_eq!(list[1].claim_uid, "");
        assert_eq!(list[1].resource_handles, Some(vec![ResourceHandle::default()]));
        assert_eq!(list[1].cdi_devices.as_ref().unwrap()["d"], None);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(cp) = DraCheckpoint::parse(&bytes) {
                let _ = cp.verify();
                let _ = cp.state();
            }
        }

        #[test]
        fn mutated_vectors_never_panic(
            index in 0..UPSTREAM_VECTORS.len(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        ) {
            let mut bytes = UPSTREAM_VECTORS[index].0.as_bytes().to_vec();
            for (at, byte) in edits {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            if let Ok(cp) = DraCheckpoint::parse(&bytes) {
                let _ = cp.verify();
                let state = cp.state();
                prop_assert!(state.is_ok());
            }
        }
    }
}
