//! The device manager checkpoint, `<kubelet dir>/device-plugins/kubelet_internal_checkpoint`.
//!
//! The kubelet's device manager (`pkg/kubelet/cm/devicemanager`) records here which devices of
//! which device plugin every container holds, the plugin's `Allocate` answer for each, and the
//! device IDs each plugin last reported. Two layouts exist: V1 (before 1.20) lists a
//! container's device IDs flat, V2 (1.20 and later) groups them by NUMA node. The struct names
//! and the checksum rules are in docs/kubelet.md ("The device manager checkpoint").
//!
//! Reading mirrors the kubelet's `encoding/json` decode into a freshly built checkpoint:
//! keys match case-insensitively (with Go's folding of the Kelvin sign and the long s),
//! unknown keys are ignored, a field met twice under two spellings is decoded over its first
//! value (objects merge, arrays are decoded element by element), `null` leaves a string or a
//! number as it was and makes a slice or a map nil, and a missing `PodDeviceEntries` or
//! `RegisteredDevices` stays the empty (not nil) value the kubelet starts from. Nil and empty
//! hash differently, so the raw model keeps them apart. `AllocResp` is decoded from base64
//! exactly as Go's `base64.StdEncoding` does (padding required, line breaks skipped, stray
//! low bits ignored), because the checksum covers the decoded bytes.
//!
//! Flow: [`DeviceCheckpoint::parse`] (bytes to raw model) -> [`DeviceCheckpoint::verify`]
//! (which layout's checksum matches) -> [`DeviceCheckpoint::state`] ([`DeviceState`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::checkpoint::checksum::fnv1a32;
use crate::checkpoint::{CheckpointError, Verification, read_u64, type_error};

/// The Go type name the kubelet hashes for both layouts (V1's is renamed to it first).
const HASHED_TYPE: &str = "checkpointData";

/// The NUMA node id the kubelet records for a device that reported no topology.
const NO_TOPOLOGY: i64 = -1;

/// The file as written (raw model): what the kubelet's `checkpoint.Data` holds after
/// decoding it, values raw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCheckpoint {
    /// `Data.PodDeviceEntries`, in file order. `None` for `null` (a Go nil slice, which the
    /// kubelet writes when no container holds a device); a missing key is `Some(vec![])`.
    pub entries: Option<Vec<RawDeviceEntry>>,
    /// `Data.RegisteredDevices`: resource name -> device IDs (`None` for a `null` list).
    /// `None` for `null`; a missing key is an empty map.
    pub registered: Option<BTreeMap<String, Option<Vec<String>>>>,
    /// The stored `Checksum`.
    pub checksum: u64,
    /// `BootID`, written only by the newest upstream tree and not covered by the checksum;
    /// `""` when absent.
    pub boot_id: String,
}

/// One `PodDevicesEntry` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawDeviceEntry {
    /// `PodUID`.
    pub pod_uid: String,
    /// `ContainerName`.
    pub container_name: String,
    /// `ResourceName`.
    pub resource_name: String,
    /// `DeviceIDs`, whose JSON shape tells the layout.
    pub device_ids: DeviceIds,
    /// `AllocResp` decoded from base64: the plugin's `ContainerAllocateResponse` in protobuf
    /// encoding. `None` for `null` or a missing key.
    pub alloc_resp: Option<Vec<u8>>,
}

/// `DeviceIDs` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DeviceIds {
    /// `null` or no key: a nil map (V2) or a nil slice (V1); fits both layouts.
    #[default]
    Nil,
    /// V2 `DevicesPerNUMA`: NUMA node id (`-1`: no topology) -> device IDs (`None` for
    /// `null`). Keys are the parsed integers, sorted numerically as the hash prints them.
    ByNuma(BTreeMap<i64, Option<Vec<String>>>),
    /// V1: a flat list.
    Flat(Vec<String>),
}

/// The file's meaning.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceState {
    /// `V2` (device IDs by NUMA node, 1.20 and later) or `V1` (a flat list).
    pub layout: &'static str,
    /// `PodDeviceEntries`, in file order.
    pub entries: Vec<DeviceEntry>,
    /// `RegisteredDevices`: resource name -> device IDs.
    pub registered: BTreeMap<String, Vec<String>>,
}

/// One container's devices of one resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceEntry {
    /// The pod's UID.
    pub pod_uid: String,
    /// The container's name.
    pub container: String,
    /// `nvidia.com/gpu`, ...
    pub resource: String,
    /// The device IDs, by ascending NUMA node (V2) or in file order (V1). A device that
    /// belongs to two NUMA nodes is listed once per node, as the kubelet records it.
    pub devices: Vec<Device>,
    /// Size of the decoded `AllocResp` (the plugin's Allocate answer).
    pub alloc_resp_bytes: usize,
}

/// One device ID.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Device {
    /// The ID the device plugin gave the device.
    pub id: String,
    /// Its NUMA node (`None`: a V1 file, or the kubelet's -1 for "no topology").
    pub numa_node: Option<i64>,
}

/// The two struct layouts the kubelet has hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    V2,
    V1,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::V2 => "V2",
            Layout::V1 => "V1",
        }
    }
}

impl DeviceCheckpoint {
    /// Reads a checkpoint file's bytes. Does not check the checksum (see
    /// [`DeviceCheckpoint::verify`]). Refuses what the kubelet cannot decode: wrong JSON
    /// types, NUMA node keys that are not 64-bit integers, `AllocResp` that is not base64,
    /// and entries that mix the V1 and V2 shapes of `DeviceIDs`.
    pub fn parse(bytes: &[u8]) -> Result<DeviceCheckpoint, CheckpointError> {
        let obj = super::parse_object(bytes)?;
        let mut cp = DeviceCheckpoint {
            entries: Some(Vec::new()),
            registered: Some(BTreeMap::new()),
            checksum: 0,
            boot_id: String::new(),
        };
        for (key, v) in &obj {
            match go_field(key, &["Data", "Checksum", "BootID"]) {
                Some("Data") => decode_data(&mut cp, v)?,
                Some("Checksum") if !v.is_null() => cp.checksum = read_u64("Checksum", v)?,
                Some("BootID") => decode_string(&mut cp.boot_id, "BootID", v)?,
                _ => {}
            }
        }
        cp.check_one_shape()?;
        Ok(cp)
    }

    /// Matches the stored checksum against the V2 hash, then the V1 hash: the order in which
    /// the kubelets that read both layouts try them (#102882 until #123398 removed V1 in
    /// 2024); 1.19 and earlier read V1 only, newer kubelets V2 only. A stored `0` is not
    /// special: the kubelet refuses it like any other wrong value.
    pub fn verify(&self) -> Verification {
        let mut computed = Vec::new();
        for layout in [Layout::V2, Layout::V1] {
            if let Some(dump) = self.spew_dump(layout) {
                let sum = fnv1a32(dump.as_bytes());
                if u64::from(sum) == self.checksum {
                    return Verification::Matched {
                        layout: layout.name(),
                        type_name: HASHED_TYPE,
                        v4: false,
                    };
                }
                computed.push((format!("{} as {HASHED_TYPE}", layout.name()), sum));
            }
        }
        Verification::Mismatch {
            stored: self.checksum,
            computed,
        }
    }

    /// The file's meaning: entries in file order, the NUMA node `-1` read as "no topology".
    /// Never fails today: every value the kubelet cannot use is refused by
    /// [`DeviceCheckpoint::parse`].
    pub fn state(&self) -> Result<DeviceState, CheckpointError> {
        let entries = self.entries.iter().flatten().map(DeviceEntry::from_raw).collect();
        let registered = self
            .registered
            .iter()
            .flatten()
            .map(|(resource, ids)| (resource.clone(), ids.clone().unwrap_or_default()))
            .collect();
        Ok(DeviceState {
            layout: self.layout().name(),
            entries,
            registered,
        })
    }

    /// V1 when an entry lists its devices flat, else V2.
    fn layout(&self) -> Layout {
        let flat = self.raw_entries().any(|e| matches!(e.device_ids, DeviceIds::Flat(_)));
        if flat { Layout::V1 } else { Layout::V2 }
    }

    fn raw_entries(&self) -> impl Iterator<Item = &RawDeviceEntry> {
        self.entries.iter().flatten()
    }

    /// The kubelet decodes the file into one struct: a V2 kubelet fails on a flat list and a
    /// V1 kubelet on a per-NUMA map, so a file with both can be read by neither.
    fn check_one_shape(&self) -> Result<(), CheckpointError> {
        let mut first: Option<Layout> = None;
        for (i, entry) in self.raw_entries().enumerate() {
            let this = match entry.device_ids {
                DeviceIds::Nil => continue,
                DeviceIds::ByNuma(_) => Layout::V2,
                DeviceIds::Flat(_) => Layout::V1,
            };
            match first {
                None => first = Some(this),
                Some(earlier) if earlier != this => {
                    return Err(CheckpointError::FieldType {
                        field: format!("Data.PodDeviceEntries[{i}].DeviceIDs"),
                        expected: match earlier {
                            Layout::V2 => "an object of NUMA node -> device IDs, as in the earlier entries (V2)",
                            Layout::V1 => "an array of device IDs, as in the earlier entries (V1)",
                        },
                        found: match this {
                            Layout::V2 => "an object".into(),
                            Layout::V1 => "an array".into(),
                        },
                    });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The go-spew `%#v` rendering of `Data` that the kubelet hashes for `layout`, after V1's
    /// renaming, or `None` when an entry's `DeviceIDs` cannot have that layout.
    fn spew_dump(&self, layout: Layout) -> Option<String> {
        let (data_type, entry_type) = match layout {
            Layout::V2 => ("checkpointData", "PodDevicesEntry"),
            Layout::V1 => ("checkpointDataV1", "PodDevicesEntryV1"),
        };
        let mut out = String::with_capacity(512);
        let _ = write!(
            out,
            "(checkpoint.{data_type}){{PodDeviceEntries:([]checkpoint.{entry_type})"
        );
        match &self.entries {
            None => out.push_str("<nil>"),
            Some(entries) => {
                out.push('[');
                for (i, entry) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    dump_entry(&mut out, entry, layout)?;
                }
                out.push(']');
            }
        }
        out.push_str(" RegisteredDevices:(map[string][]string)");
        match &self.registered {
            None => out.push_str("<nil>"),
            Some(map) => {
                out.push_str("map[");
                for (i, (resource, ids)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(resource);
                    out.push(':');
                    dump_list(&mut out, ids.as_deref());
                }
                out.push(']');
            }
        }
        out.push('}');
        Some(match layout {
            Layout::V2 => out,
            // checkpointv1.go renames the types in the whole rendering, values included.
            Layout::V1 => out
                .replacen("checkpointDataV1", "checkpointData", 1)
                .replace("PodDevicesEntryV1", "PodDevicesEntry"),
        })
    }
}

impl DeviceEntry {
    fn from_raw(raw: &RawDeviceEntry) -> DeviceEntry {
        let devices = match &raw.device_ids {
            DeviceIds::Nil => Vec::new(),
            DeviceIds::Flat(ids) => ids
                .iter()
                .map(|id| Device {
                    id: id.clone(),
                    numa_node: None,
                })
                .collect(),
            DeviceIds::ByNuma(map) => map
                .iter()
                .flat_map(|(node, ids)| {
                    let numa_node = (*node != NO_TOPOLOGY).then_some(*node);
                    ids.iter().flatten().map(move |id| Device {
                        id: id.clone(),
                        numa_node,
                    })
                })
                .collect(),
        };
        DeviceEntry {
            pod_uid: raw.pod_uid.clone(),
            container: raw.container_name.clone(),
            resource: raw.resource_name.clone(),
            devices,
            alloc_resp_bytes: raw.alloc_resp.as_ref().map_or(0, Vec::len),
        }
    }
}

/// One `PodDevicesEntry` struct: the elements of a slice carry no type, the fields do.
fn dump_entry(out: &mut String, entry: &RawDeviceEntry, layout: Layout) -> Option<()> {
    let _ = write!(
        out,
        "{{PodUID:(string){} ContainerName:(string){} ResourceName:(string){} ",
        entry.pod_uid, entry.container_name, entry.resource_name
    );
    match (layout, &entry.device_ids) {
        (Layout::V2, DeviceIds::Nil) => out.push_str("DeviceIDs:(checkpoint.DevicesPerNUMA)<nil>"),
        (Layout::V2, DeviceIds::ByNuma(map)) => {
            out.push_str("DeviceIDs:(checkpoint.DevicesPerNUMA)map[");
            for (i, (node, ids)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{node}:");
                dump_list(out, ids.as_deref());
            }
            out.push(']');
        }
        (Layout::V1, DeviceIds::Nil) => out.push_str("DeviceIDs:([]string)<nil>"),
        (Layout::V1, DeviceIds::Flat(ids)) => {
            out.push_str("DeviceIDs:([]string)");
            dump_list(out, Some(ids));
        }
        (Layout::V2, DeviceIds::Flat(_)) | (Layout::V1, DeviceIds::ByNuma(_)) => return None,
    }
    // A []byte is a slice like any other here: decimal elements (go-spew's hex dump is only
    // for Dump/Sdump, not for the %#v formatter the kubelet uses).
    out.push_str(" AllocResp:([]uint8)");
    match &entry.alloc_resp {
        None => out.push_str("<nil>"),
        Some(bytes) => {
            out.push('[');
            for (i, b) in bytes.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{b}");
            }
            out.push(']');
        }
    }
    out.push('}');
    Some(())
}

/// A `[]string` inside a map or struct field value: strings raw, `<nil>` for nil.
fn dump_list(out: &mut String, ids: Option<&[String]>) {
    match ids {
        None => out.push_str("<nil>"),
        Some(ids) => {
            out.push('[');
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(id);
            }
            out.push(']');
        }
    }
}

/// The Go field among `names` that a JSON key decodes into. Go compares names with Unicode
/// simple case folding; for these ASCII names that is ASCII case plus two letters that fold
/// into ASCII ones: the Kelvin sign (K) and the long s (s).
fn go_field(key: &str, names: &[&'static str]) -> Option<&'static str> {
    let fold = |c: char| match c {
        '\u{212A}' => 'K',
        '\u{017F}' => 'S',
        c => c.to_ascii_uppercase(),
    };
    names
        .iter()
        .copied()
        .find(|name| key.chars().map(fold).eq(name.chars().map(|c| c.to_ascii_uppercase())))
}

/// `Data` (a `checkpointData` struct): `null` leaves it as it was.
fn decode_data(cp: &mut DeviceCheckpoint, v: &Value) -> Result<(), CheckpointError> {
    let obj = match v {
        Value::Null => return Ok(()),
        Value::Object(obj) => obj,
        other => return Err(type_error("Data", "an object", other)),
    };
    for (key, v) in obj {
        match go_field(key, &["PodDeviceEntries", "RegisteredDevices"]) {
            Some("PodDeviceEntries") => decode_entries(&mut cp.entries, v)?,
            Some("RegisteredDevices") => decode_registered(&mut cp.registered, v)?,
            _ => {}
        }
    }
    Ok(())
}

/// `Data.PodDeviceEntries`: array elements are decoded into the existing ones, as Go does.
fn decode_entries(slot: &mut Option<Vec<RawDeviceEntry>>, v: &Value) -> Result<(), CheckpointError> {
    let items = match v {
        Value::Null => {
            *slot = None;
            return Ok(());
        }
        Value::Array(items) => items,
        other => return Err(type_error("Data.PodDeviceEntries", "an array", other)),
    };
    let mut entries = slot.take().unwrap_or_default();
    entries.truncate(items.len());
    entries.resize_with(items.len(), RawDeviceEntry::default);
    for (i, (entry, item)) in entries.iter_mut().zip(items).enumerate() {
        decode_entry(entry, &format!("Data.PodDeviceEntries[{i}]"), item)?;
    }
    *slot = Some(entries);
    Ok(())
}

fn decode_entry(entry: &mut RawDeviceEntry, field: &str, v: &Value) -> Result<(), CheckpointError> {
    let obj = match v {
        Value::Null => return Ok(()),
        Value::Object(obj) => obj,
        other => return Err(type_error(field, "an object", other)),
    };
    const NAMES: [&str; 5] = ["PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp"];
    for (key, v) in obj {
        let Some(name) = go_field(key, &NAMES) else {
            continue;
        };
        let sub = format!("{field}.{name}");
        match name {
            "PodUID" => decode_string(&mut entry.pod_uid, &sub, v)?,
            "ContainerName" => decode_string(&mut entry.container_name, &sub, v)?,
            "ResourceName" => decode_string(&mut entry.resource_name, &sub, v)?,
            "DeviceIDs" => decode_device_ids(&mut entry.device_ids, &sub, v)?,
            _ => decode_bytes(&mut entry.alloc_resp, &sub, v)?,
        }
    }
    Ok(())
}

/// A Go string: `null` leaves it unchanged.
fn decode_string(slot: &mut String, field: &str, v: &Value) -> Result<(), CheckpointError> {
    match v {
        Value::Null => Ok(()),
        Value::String(s) => {
            slot.clone_from(s);
            Ok(())
        }
        other => Err(type_error(field, "a string", other)),
    }
}

/// A Go `[]string`: `null` makes it nil; elements are decoded into the existing ones.
fn decode_string_list(slot: &mut Option<Vec<String>>, field: &str, v: &Value) -> Result<(), CheckpointError> {
    let items = match v {
        Value::Null => {
            *slot = None;
            return Ok(());
        }
        Value::Array(items) => items,
        other => return Err(type_error(field, "an array of strings", other)),
    };
    let mut list = slot.take().unwrap_or_default();
    list.truncate(items.len());
    list.resize_with(items.len(), String::new);
    for (i, (s, item)) in list.iter_mut().zip(items).enumerate() {
        decode_string(s, &format!("{field}[{i}]"), item)?;
    }
    *slot = Some(list);
    Ok(())
}

/// `Data.RegisteredDevices` (`map[string][]string`): an object adds to the existing map,
/// each value decoded fresh.
fn decode_registered(
    slot: &mut Option<BTreeMap<String, Option<Vec<String>>>>,
    v: &Value,
) -> Result<(), CheckpointError> {
    let obj = match v {
        Value::Null => {
            *slot = None;
            return Ok(());
        }
        Value::Object(obj) => obj,
        other => return Err(type_error("Data.RegisteredDevices", "an object", other)),
    };
    let map = slot.get_or_insert_with(BTreeMap::new);
    for (resource, ids) in obj {
        let mut list = None;
        decode_string_list(&mut list, &format!("Data.RegisteredDevices[{resource:?}]"), ids)?;
        map.insert(resource.clone(), list);
    }
    Ok(())
}

/// `DeviceIDs`: an object is V2's `DevicesPerNUMA`, an array V1's flat list.
fn decode_device_ids(slot: &mut DeviceIds, field: &str, v: &Value) -> Result<(), CheckpointError> {
    match v {
        Value::Null => *slot = DeviceIds::Nil,
        Value::Object(obj) => {
            let mut map = match std::mem::take(slot) {
                DeviceIds::ByNuma(map) => map,
                DeviceIds::Nil => BTreeMap::new(),
                DeviceIds::Flat(_) => return Err(type_error(field, "an array of device IDs (V1)", v)),
            };
            decode_numa_map(&mut map, field, obj)?;
            *slot = DeviceIds::ByNuma(map);
        }
        Value::Array(_) => {
            let mut list = match std::mem::take(slot) {
                DeviceIds::Flat(list) => Some(list),
                DeviceIds::Nil => None,
                DeviceIds::ByNuma(_) => {
                    return Err(type_error(field, "an object of NUMA node -> device IDs (V2)", v));
                }
            };
            decode_string_list(&mut list, field, v)?;
            *slot = DeviceIds::Flat(list.unwrap_or_default());
        }
        other => {
            return Err(type_error(
                field,
                "an object of NUMA node -> device IDs (V2) or an array of device IDs (V1)",
                other,
            ));
        }
    }
    Ok(())
}

/// V2's `map[int64][]string`: Go parses each key with `strconv.ParseInt(key, 10, 64)`
/// (a sign allowed, leading zeros too); a later key with the same value replaces the earlier.
fn decode_numa_map(
    map: &mut BTreeMap<i64, Option<Vec<String>>>,
    field: &str,
    obj: &Map<String, Value>,
) -> Result<(), CheckpointError> {
    for (key, ids) in obj {
        let sub = format!("{field}[{key:?}]");
        let node = key.parse::<i64>().map_err(|_| CheckpointError::Value {
            field: sub.clone(),
            reason: "not a NUMA node id (a 64-bit decimal integer)".into(),
        })?;
        let mut list = None;
        decode_string_list(&mut list, &sub, ids)?;
        map.insert(node, list);
    }
    Ok(())
}

/// `AllocResp` (`[]byte`): Go reads a base64 string, or an array of byte values decoded
/// into the existing ones; `null` makes it nil.
fn decode_bytes(slot: &mut Option<Vec<u8>>, field: &str, v: &Value) -> Result<(), CheckpointError> {
    match v {
        Value::Null => *slot = None,
        Value::String(text) => {
            let bytes = go_std_base64(text).map_err(|reason| CheckpointError::Value {
                field: field.to_string(),
                reason,
            })?;
            *slot = Some(bytes);
        }
        Value::Array(items) => {
            let mut bytes = slot.take().unwrap_or_default();
            bytes.truncate(items.len());
            bytes.resize(items.len(), 0);
            for (i, (b, item)) in bytes.iter_mut().zip(items).enumerate() {
                decode_byte(b, &format!("{field}[{i}]"), item)?;
            }
            *slot = Some(bytes);
        }
        other => return Err(type_error(field, "a base64 string", other)),
    }
    Ok(())
}

/// One element of a `[]byte` array: an integer from 0 to 255 (`null` leaves it).
fn decode_byte(slot: &mut u8, field: &str, v: &Value) -> Result<(), CheckpointError> {
    match v {
        Value::Null => Ok(()),
        Value::Number(n) => {
            *slot = n
                .as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| CheckpointError::FieldType {
                    field: field.to_string(),
                    expected: "a byte (an integer from 0 to 255)",
                    found: format!("the number {n}"),
                })?;
            Ok(())
        }
        other => Err(type_error(field, "a byte (an integer from 0 to 255)", other)),
    }
}

/// Go's `base64.StdEncoding.Decode`: the standard alphabet, `=` padding required, `\r` and
/// `\n` skipped anywhere, nothing but line breaks after the padding, and the unused low bits
/// of the last symbol ignored (the encoding is not strict). Errors read like Go's.
fn go_std_base64(text: &str) -> Result<Vec<u8>, String> {
    let illegal = |offset: usize| format!("illegal base64 data at input byte {offset}");
    let symbols: Vec<(usize, u8)> = text
        .bytes()
        .enumerate()
        .filter(|&(_, b)| b != b'\n' && b != b'\r')
        .collect();
    let mut out = Vec::with_capacity(symbols.len() / 4 * 3);
    let quanta = symbols.len().div_ceil(4);
    for (q, quantum) in symbols.chunks(4).enumerate() {
        let Some(&[(_, c0), (_, c1), (p2, c2), (p3, c3)]) = quantum.get(..4) else {
            return Err(illegal(quantum.first().map_or(text.len(), |s| s.0)));
        };
        let last = q + 1 == quanta;
        let mut word = (sextet(c0).ok_or_else(|| illegal(quantum[0].0))? << 18)
            | (sextet(c1).ok_or_else(|| illegal(quantum[1].0))? << 12);
        let len = match (c2, c3) {
            (b'=', b'=') if last => 1,
            (b'=', _) if c3 != b'=' => return Err(illegal(p3)),
            (b'=', _) => return Err(illegal(symbols.get((q + 1) * 4).map_or(p3, |s| s.0))),
            (_, b'=') if last => {
                word |= sextet(c2).ok_or_else(|| illegal(p2))? << 6;
                2
            }
            (_, b'=') => return Err(illegal(symbols.get((q + 1) * 4).map_or(p3, |s| s.0))),
            _ => {
                word |= (sextet(c2).ok_or_else(|| illegal(p2))? << 6) | sextet(c3).ok_or_else(|| illegal(p3))?;
                3
            }
        };
        let bytes = word.to_be_bytes();
        out.extend_from_slice(&bytes[1..=len]);
    }
    Ok(out)
}

/// The value of one symbol of the standard base64 alphabet.
fn sextet(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Files written by real kubelets (1.20 or later, V2), quoted in public write-ups: a
    /// single-board node whose GPU reports no topology (`-1`), a node with two NUMA nodes and
    /// three GPUs (one or two containers, a device list in a kubelet's unsorted order, a
    /// container holding GPUs on both nodes), and a node where no container holds a device.
    /// No upstream test and no published file of the V1 layout exists (see `v1_*` below).
    const KUBELET_FILES: &[&str] = &[
        r#"{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3","ContainerName":"check","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"}],"RegisteredDevices":{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}"#,
        r#"{"Data":{"PodDeviceEntries":[{"PodUID":"9a15d2b5-c152-46b9-96e0-d57032629e1f","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]},"AllocResp":"CmsKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSUUdQVS1jMWU5ZjI0OS1iMzdiLTgxYzItYThkOS1iYTVjYTAyOTQ4NDEsR1BVLTliMzQxYzU5LWY5NmItYmE4NS1jMTM3LTc4YzM2NTJmZWE2NRokCg4vZGV2L252aWRpYWN0bBIOL2Rldi9udmlkaWFjdGwaAnJ3GiYKDy9kZXYvbnZpZGlhLXV2bRIPL2Rldi9udmlkaWEtdXZtGgJydxoyChUvZGV2L252aWRpYS11dm0tdG9vbHMSFS9kZXYvbnZpZGlhLXV2bS10b29scxoCcncaLgoTL2Rldi9udmlkaWEtbW9kZXNldBITL2Rldi9udmlkaWEtbW9kZXNldBoCcncaIAoML2Rldi9udmlkaWExEgwvZGV2L252aWRpYTEaAnJ3GiAKDC9kZXYvbnZpZGlhMhIML2Rldi9udmlkaWEyGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":2530956716}"#,
        r#"{"Data":{"PodDeviceEntries":[{"PodUID":"513cb897-0262-4868-826f-aa943ee45a38","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1lMzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":133412836}"#,
        r#"{"Data":{"PodDeviceEntries":[{"PodUID":"513cb897-0262-4868-826f-aa943ee45a38","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1lMzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="},{"PodUID":"f22736b4-45a9-4852-8fdd-feb948918597","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-9b341c59-f96b-ba85-c137-78c3652fea65"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS05YjM0MWM1OS1mOTZiLWJhODUtYzEzNy03OGMzNjUyZmVhNjUaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMRIML2Rldi9udmlkaWExGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841","GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65"]}},"Checksum":3082069630}"#,
        r#"{"Data":{"PodDeviceEntries":[{"PodUID":"08b4a90a-534a-4fc6-90c3-b57ee777071d","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"],"1":["GPU-9b341c59-f96b-ba85-c137-78c3652fea65"]},"AllocResp":"CmsKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSUUdQVS05YjM0MWM1OS1mOTZiLWJhODUtYzEzNy03OGMzNjUyZmVhNjUsR1BVLTc3YTcwMmRiLWUzN2YtM2E3NC1kNDZkLWM1NzEzZjY2MDU4YxokCg4vZGV2L252aWRpYWN0bBIOL2Rldi9udmlkaWFjdGwaAnJ3GiYKDy9kZXYvbnZpZGlhLXV2bRIPL2Rldi9udmlkaWEtdXZtGgJydxoyChUvZGV2L252aWRpYS11dm0tdG9vbHMSFS9kZXYvbnZpZGlhLXV2bS10b29scxoCcncaLgoTL2Rldi9udmlkaWEtbW9kZXNldBITL2Rldi9udmlkaWEtbW9kZXNldBoCcncaIAoML2Rldi9udmlkaWEwEgwvZGV2L252aWRpYTAaAnJ3GiAKDC9kZXYvbnZpZGlhMRIML2Rldi9udmlkaWExGgJydw=="},{"PodUID":"f21fe02b-e6e2-4d04-9a4a-9e57367fa324","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS1jMWU5ZjI0OS1iMzdiLTgxYzItYThkOS1iYTVjYTAyOTQ4NDEaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMhIML2Rldi9udmlkaWEyGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":3342579237}"#,
        r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280}"#,
    ];

    fn parse(text: &str) -> DeviceCheckpoint {
        DeviceCheckpoint::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn error(text: &str) -> String {
        DeviceCheckpoint::parse(text.as_bytes()).expect_err(text).to_string()
    }

    fn dump(text: &str, layout: Layout) -> String {
        parse(text).spew_dump(layout).unwrap()
    }

    const MATCHED_V2: Verification = Verification::Matched {
        layout: "V2",
        type_name: "checkpointData",
        v4: false,
    };

    #[test]
    fn every_kubelet_file_verifies_as_v2() {
        for file in KUBELET_FILES {
            assert_eq!(parse(file).verify(), MATCHED_V2, "{file}");
        }
    }

    #[test]
    fn the_rendering_is_byte_for_byte_what_the_kubelet_hashes() {
        let dump = dump(KUBELET_FILES[0], Layout::V2);
        assert_eq!(
            dump,
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)bf52b2cd-b611-4e79-86b1-280b283185c3 \
             ContainerName:(string)check ResourceName:(string)nvidia.com/gpu DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[tegra]] \
             AllocResp:([]uint8)[10 31 10 22 78 86 73 68 73 65 95 86 73 83 73 66 76 69 95 68 69 86 73 67 69 83 18 5 116 101 103 114 97]}] \
             RegisteredDevices:(map[string][]string)map[nvidia.com/gpu:[tegra]]}"
        );
        assert_eq!(fnv1a32(dump.as_bytes()), 3_660_592_824);
    }

    #[test]
    fn tampered_copies_fail() {
        for file in KUBELET_FILES {
            let tampered = [
                file.replacen("\"Checksum\":", "\"Checksum\":1", 1),
                file.replacen("GPU-77a7", "GPU-77a8", 1),
                file.replacen("bf52b2cd", "bf52b2ce", 1),
                file.replacen("\"-1\":", "\"-2\":", 1),
                file.replacen("\"1\":[", "\"2\":[", 1),
                // One base64 symbol in the middle: one decoded byte changes.
                file.replacen("SURJQV9W", "SURJQV8W", 1),
                file.replacen("\"nvidia.com/gpu\":[", "\"nvidia.com/gpu\":[\"x\",", 1),
                file.replacen("\"PodDeviceEntries\":null", "\"PodDeviceEntries\":[]", 1),
                file.replacen("\"ContainerName\":\"app\"", "\"ContainerName\":\"app2\"", 1),
            ];
            for t in tampered.iter().filter(|t| t != file) {
                let verdict = parse(t).verify();
                assert!(!verdict.accepted(), "tampered copy verified: {t}");
            }
        }
    }

    #[test]
    fn a_zero_or_wrong_checksum_is_refused_and_the_hashes_tried_are_listed() {
        // A file with per-NUMA device IDs has no V1 rendering, so only V2 is tried.
        let zero = KUBELET_FILES[0].replace("3660592824", "0");
        assert_eq!(
            parse(&zero).verify(),
            Verification::Mismatch {
                stored: 0,
                computed: vec![("V2 as checkpointData".to_string(), 3_660_592_824)],
            }
        );
        // No entries: both layouts render alike; V2 is tried (and reported) first.
        let empty = parse(KUBELET_FILES[5]);
        assert_eq!(empty.spew_dump(Layout::V1), empty.spew_dump(Layout::V2));
        assert_eq!(empty.verify(), MATCHED_V2);
        let wrong = KUBELET_FILES[5].replace("3952659280", "3952659281");
        assert_eq!(
            parse(&wrong).verify(),
            Verification::Mismatch {
                stored: 3_952_659_281,
                computed: vec![
                    ("V2 as checkpointData".to_string(), 3_952_659_280),
                    ("V1 as checkpointData".to_string(), 3_952_659_280),
                ],
            }
        );
    }

    #[test]
    fn state_keeps_file_order_and_numa_nodes() {
        let state = parse(KUBELET_FILES[4]).state().unwrap();
        assert_eq!(state.layout, "V2");
        let summary: Vec<_> = state
            .entries
            .iter()
            .map(|e| {
                (
                    &e.pod_uid[..8],
                    e.container.as_str(),
                    e.resource.as_str(),
                    e.alloc_resp_bytes,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("08b4a90a", "app", "nvidia.com/gpu", 355),
                ("f21fe02b", "app", "nvidia.com/gpu", 280)
            ]
        );
        assert_eq!(
            state.entries[0].devices,
            [
                Device {
                    id: "GPU-77a702db-e37f-3a74-d46d-c5713f66058c".into(),
                    numa_node: Some(0)
                },
                Device {
                    id: "GPU-9b341c59-f96b-ba85-c137-78c3652fea65".into(),
                    numa_node: Some(1)
                },
            ]
        );
        assert_eq!(state.registered["nvidia.com/gpu"].len(), 3);
        // The kubelet's own (unsorted) order of a device list is kept.
        let state = parse(KUBELET_FILES[3]).state().unwrap();
        assert_eq!(
            state.registered["nvidia.com/gpu"][0],
            "GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"
        );
        let empty = parse(KUBELET_FILES[5]).state().unwrap();
        assert!(empty.entries.is_empty());
        assert_eq!(empty.registered.len(), 1);
    }

    #[test]
    fn no_topology_is_none_in_the_state_and_minus_one_in_the_hash() {
        let cp = parse(KUBELET_FILES[0]);
        let state = cp.state().unwrap();
        assert_eq!(
            state.entries[0].devices,
            [Device {
                id: "tegra".into(),
                numa_node: None
            }]
        );
        assert_eq!(state.entries[0].alloc_resp_bytes, 33);
        assert!(cp.spew_dump(Layout::V2).unwrap().contains("map[-1:[tegra]]"));
    }

    #[test]
    fn a_device_on_two_numa_nodes_is_listed_once_per_node() {
        let state = parse(r#"{"Data":{"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":{"1":["d"],"0":["d","e"]}}]}}"#)
            .state()
            .unwrap();
        let devices: Vec<_> = state.entries[0]
            .devices
            .iter()
            .map(|d| (d.id.as_str(), d.numa_node))
            .collect();
        assert_eq!(devices, [("d", Some(0)), ("e", Some(0)), ("d", Some(1))]);
    }

    /// V1 (before 1.20): no upstream vector exists, so the rendering is checked against
    /// the rules of checkpointv1.go: the V1 type names, then the renaming.
    const V1_FILE: &str = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"pod1","ContainerName":"c1","ResourceName":"example.com/dev","DeviceIDs":["dev2","dev1"],"AllocResp":"CgA="}],"RegisteredDevices":{"example.com/dev":["dev1","dev2"]}},"Checksum":4026212169}"#;

    #[test]
    fn v1_renders_with_the_v1_types_renamed() {
        let cp = parse(V1_FILE);
        assert_eq!(cp.spew_dump(Layout::V2), None, "a flat list has no V2 rendering");
        assert_eq!(
            cp.spew_dump(Layout::V1).unwrap(),
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)pod1 \
             ContainerName:(string)c1 ResourceName:(string)example.com/dev DeviceIDs:([]string)[dev2 dev1] \
             AllocResp:([]uint8)[10 0]}] RegisteredDevices:(map[string][]string)map[example.com/dev:[dev1 dev2]]}"
        );
        assert_eq!(
            cp.verify(),
            Verification::Matched {
                layout: "V1",
                type_name: "checkpointData",
                v4: false
            }
        );
        let state = cp.state().unwrap();
        assert_eq!(state.layout, "V1");
        let devices: Vec<_> = state.entries[0]
            .devices
            .iter()
            .map(|d| (d.id.as_str(), d.numa_node))
            .collect();
        assert_eq!(devices, [("dev2", None), ("dev1", None)]);
        assert_eq!(state.entries[0].alloc_resp_bytes, 2);
    }

    #[test]
    fn v1_renaming_reaches_values_too() {
        // strings.Replace runs over the whole rendering, so a value holding the V1 type name
        // is renamed as well; only the first checkpointDataV1 is.
        let cp = parse(
            r#"{"Data":{"PodDeviceEntries":[{"PodUID":"PodDevicesEntryV1","ContainerName":"checkpointDataV1","DeviceIDs":[]}]}}"#,
        );
        let dump = cp.spew_dump(Layout::V1).unwrap();
        assert!(
            dump.contains("PodUID:(string)PodDevicesEntry ContainerName:(string)checkpointDataV1 "),
            "{dump}"
        );
    }

    #[test]
    fn nil_empty_and_missing_render_as_go_holds_them() {
        let cases = [
            (r#"{"Data":{"PodDeviceEntries":null}}"#, "PodDevicesEntry)<nil> "),
            (r#"{"Data":{"PodDeviceEntries":[]}}"#, "PodDevicesEntry)[] "),
            // The kubelet decodes into empty (not nil) values: a missing key stays empty.
            (
                r#"{}"#,
                "PodDevicesEntry)[] RegisteredDevices:(map[string][]string)map[]}",
            ),
            (
                r#"{"Data":null}"#,
                "PodDevicesEntry)[] RegisteredDevices:(map[string][]string)map[]}",
            ),
            (r#"{"Data":{"RegisteredDevices":null}}"#, "(map[string][]string)<nil>}"),
            (r#"{"Data":{"RegisteredDevices":{"r":null}}}"#, "map[r:<nil>]}"),
            (r#"{"Data":{"RegisteredDevices":{"r":[]}}}"#, "map[r:[]]}"),
            (
                r#"{"Data":{"PodDeviceEntries":[{}]}}"#,
                "DevicesPerNUMA)<nil> AllocResp:([]uint8)<nil>}",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[null]}}"#,
                "[{PodUID:(string) ContainerName:(string) ResourceName:(string) ",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{}}]}}"#,
                "DevicesPerNUMA)map[] ",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":null}}]}}"#,
                "DevicesPerNUMA)map[0:<nil>] ",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"AllocResp":""}]}}"#,
                "AllocResp:([]uint8)[]}",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"AllocResp":null}]}}"#,
                "AllocResp:([]uint8)<nil>}",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"AllocResp":[1,2,255]}]}}"#,
                "AllocResp:([]uint8)[1 2 255]}",
            ),
        ];
        for (file, want) in cases {
            let dump = dump(file, Layout::V2);
            assert!(dump.contains(want), "{file}: {dump}");
        }
    }

    #[test]
    fn alloc_resp_is_decoded_as_go_decodes_base64() {
        let bytes = |file: &str| parse(file).entries.unwrap()[0].alloc_resp.clone().unwrap();
        // Stray low bits are ignored (not strict), line breaks anywhere are skipped.
        assert_eq!(bytes(r#"{"Data":{"PodDeviceEntries":[{"AllocResp":"AB=="}]}}"#), [0]);
        assert_eq!(
            bytes(r#"{"Data":{"PodDeviceEntries":[{"AllocResp":"AA\nA\r\nA"}]}}"#),
            [0, 0, 0]
        );
        assert_eq!(
            bytes(r#"{"Data":{"PodDeviceEntries":[{"AllocResp":"AAA=\n"}]}}"#),
            [0, 0]
        );
        assert_eq!(
            bytes(r#"{"Data":{"PodDeviceEntries":[{"AllocResp":"+/+/"}]}}"#),
            [0xfb, 0xff, 0xbf]
        );
        for bad in [
            "AAA", "A===", "AA=A", "AA==AA==", "AA-A", "AA_A", "AAAA=", "AAA=AAAA", " AAA",
        ] {
            let file = format!(
                r#"{{"Data":{{"PodDeviceEntries":[{{}},{{}},{{}},{{"AllocResp":{}}}]}}}}"#,
                serde_json::to_string(bad).unwrap()
            );
            let err = DeviceCheckpoint::parse(file.as_bytes()).unwrap_err();
            match err {
                CheckpointError::Value { field, reason } => {
                    assert_eq!(field, "Data.PodDeviceEntries[3].AllocResp", "{bad}");
                    assert!(
                        reason.starts_with("illegal base64 data at input byte "),
                        "{bad}: {reason}"
                    );
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn numa_keys_are_read_as_strconv_reads_them() {
        let cp =
            parse(r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"+1":["a"],"007":["b"],"-0":["c"],"1":["d"]}}]}}"#);
        // "+1" and "1" are the same node: the later one wins.
        assert!(cp.spew_dump(Layout::V2).unwrap().contains("map[0:[c] 1:[d] 7:[b]]"));
        // Sorted as integers, not as text.
        let cp = parse(r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"10":["a"],"9":["b"],"-1":["c"]}}]}}"#);
        assert!(cp.spew_dump(Layout::V2).unwrap().contains("map[-1:[c] 9:[b] 10:[a]]"));
        for bad in ["x", "1.5", "", " 1", "0x1", "1_0", "9223372036854775808"] {
            let file = format!(r#"{{"Data":{{"PodDeviceEntries":[{{"DeviceIDs":{{"{bad}":[]}}}}]}}}}"#);
            assert_eq!(
                DeviceCheckpoint::parse(file.as_bytes()).unwrap_err(),
                CheckpointError::Value {
                    field: format!("Data.PodDeviceEntries[0].DeviceIDs[{bad:?}]"),
                    reason: "not a NUMA node id (a 64-bit decimal integer)".into()
                }
            );
        }
    }

    #[test]
    fn keys_match_as_go_matches_them_and_boot_id_is_not_hashed() {
        let file = KUBELET_FILES[0]
            .replace("\"Data\"", "\"data\"")
            .replace("\"PodDeviceEntries\"", "\"PODDEVICEENTRIES\"")
            .replace("\"DeviceIDs\"", "\"deviceIds\"")
            // The Kelvin sign and the long s fold into k and s in Go.
            .replace("\"Checksum\"", "\"Chec\u{212A}\u{017F}um\"")
            .replace("\"ContainerName\"", "\"futureField\":[1,{}],\"ContainerName\"")
            .replacen('{', r#"{"BootID":"6c1f0c1e","#, 1);
        let cp = parse(&file);
        assert_eq!(cp.boot_id, "6c1f0c1e");
        assert_eq!(cp.verify(), MATCHED_V2, "{file}");
        // Near misses are not the field.
        let cp = parse(r#"{"Checksums":5,"Data_":{"PodDeviceEntries":null}}"#);
        assert_eq!(cp.checksum, 0);
        assert_eq!(cp.entries, Some(Vec::new()));
    }

    #[test]
    fn a_field_spelled_twice_is_decoded_over_itself() {
        let cp = parse(
            r#"{"Data":{"PodDeviceEntries":[{"PodUID":"a","ContainerName":"c"}]},
                "data":{"RegisteredDevices":{"r":["x"]},"podDeviceEntries":[{"poduid":null,"ResourceName":"res"}]},
                "Checksum":7,"checksum":null}"#,
        );
        let entry = &cp.entries.as_ref().unwrap()[0];
        assert_eq!((entry.pod_uid.as_str(), entry.container_name.as_str()), ("a", "c"));
        assert_eq!(entry.resource_name, "res");
        assert_eq!(cp.registered.unwrap()["r"], Some(vec!["x".to_string()]));
        assert_eq!(cp.checksum, 7);
        // Per-NUMA maps merge; an identical duplicate key is collapsed by the parser (last wins).
        let cp = parse(
            r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":["a"]},"deviceids":{"1":["b"]},"PodUID":"x","PodUID":"y"}]}}"#,
        );
        let entry = &cp.entries.unwrap()[0];
        assert_eq!(entry.pod_uid, "y");
        assert_eq!(
            entry.device_ids,
            DeviceIds::ByNuma(BTreeMap::from([
                (0, Some(vec!["a".into()])),
                (1, Some(vec!["b".into()]))
            ]))
        );
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases: &[(&str, &str)] = &[
            ("", "file is empty"),
            ("[]", "top-level JSON value is an array, not an object"),
            (r#"{"Data":"#, "invalid JSON at line 1"),
            (r#"{"Data":[]}"#, "field Data: expected an object, found an array"),
            (
                r#"{"Checksum":-1}"#,
                "field Checksum: expected an unsigned 64-bit integer, found the number -1",
            ),
            (
                r#"{"Checksum":1.0}"#,
                "field Checksum: expected an unsigned 64-bit integer",
            ),
            (
                r#"{"Checksum":"1"}"#,
                "field Checksum: expected an unsigned integer, found a string",
            ),
            (r#"{"BootID":1}"#, "field BootID: expected a string, found a number"),
            (
                r#"{"Data":{"PodDeviceEntries":{}}}"#,
                "field Data.PodDeviceEntries: expected an array, found an object",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{},"x"]}}"#,
                "field Data.PodDeviceEntries[1]: expected an object, found a string",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"PodUID":5}]}}"#,
                "field Data.PodDeviceEntries[0].PodUID: expected a string, found a number",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"containername":true}]}}"#,
                "field Data.PodDeviceEntries[0].ContainerName: expected a string, found a boolean",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":"d"}]}}"#,
                "field Data.PodDeviceEntries[0].DeviceIDs: expected an object of NUMA node -> device IDs (V2) or an array of device IDs (V1), found a string",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":["a",3]}}]}}"#,
                "field Data.PodDeviceEntries[0].DeviceIDs[\"0\"][1]: expected a string, found a number",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":"a"}}]}}"#,
                "field Data.PodDeviceEntries[0].DeviceIDs[\"0\"]: expected an array of strings, found a string",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":["a"]},{"DeviceIDs":null},{"DeviceIDs":{"0":["b"]}}]}}"#,
                "field Data.PodDeviceEntries[2].DeviceIDs: expected an array of device IDs, as in the earlier entries (V1), found an object",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":[]},"deviceids":["a"]}]}}"#,
                "field Data.PodDeviceEntries[0].DeviceIDs: expected an object of NUMA node -> device IDs (V2), found an array",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"AllocResp":7}]}}"#,
                "field Data.PodDeviceEntries[0].AllocResp: expected a base64 string, found a number",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"AllocResp":[1,256]}]}}"#,
                "field Data.PodDeviceEntries[0].AllocResp[1]: expected a byte (an integer from 0 to 255), found the number 256",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"AllocResp":[-1]}]}}"#,
                "field Data.PodDeviceEntries[0].AllocResp[0]: expected a byte",
            ),
            (
                r#"{"Data":{"PodDeviceEntries":[{"AllocResp":["1"]}]}}"#,
                "field Data.PodDeviceEntries[0].AllocResp[0]: expected a byte (an integer from 0 to 255), found a string",
            ),
            (
                r#"{"Data":{"RegisteredDevices":[]}}"#,
                "field Data.RegisteredDevices: expected an object, found an array",
            ),
            (
                r#"{"Data":{"RegisteredDevices":{"nvidia.com/gpu":["a",null,{}]}}}"#,
                "field Data.RegisteredDevices[\"nvidia.com/gpu\"][2]: expected a string, found an object",
            ),
        ];
        for (input, want) in cases {
            let err = error(input);
            assert!(err.contains(want), "{input}: {err}");
        }
    }

    #[test]
    fn null_elements_read_as_go_zero_values() {
        let cp =
            parse(r#"{"Data":{"RegisteredDevices":{"r":["a",null]},"PodDeviceEntries":[{"AllocResp":[null,7]}]}}"#);
        assert_eq!(cp.registered.unwrap()["r"], Some(vec!["a".to_string(), String::new()]));
        assert_eq!(cp.entries.unwrap()[0].alloc_resp, Some(vec![0, 7]));
    }

    /// Test-only writer: the JSON a kubelet writes for a raw model, checksum included.
    fn to_kubelet_json(cp: &DeviceCheckpoint) -> String {
        let entries = cp.entries.as_ref().map(|entries| {
            entries
                .iter()
                .map(|e| {
                    let ids = match &e.device_ids {
                        DeviceIds::Nil => Value::Null,
                        DeviceIds::ByNuma(map) => Value::Object(
                            map.iter()
                                .map(|(k, v)| (k.to_string(), serde_json::to_value(v).unwrap()))
                                .collect(),
                        ),
                        DeviceIds::Flat(list) => serde_json::to_value(list).unwrap(),
                    };
                    serde_json::json!({
                        "PodUID": e.pod_uid, "ContainerName": e.container_name, "ResourceName": e.resource_name,
                        "DeviceIDs": ids, "AllocResp": e.alloc_resp.as_deref().map(base64),
                    })
                })
                .collect::<Vec<_>>()
        });
        let sum = fnv1a32(cp.spew_dump(cp.layout()).unwrap().as_bytes());
        serde_json::json!({
            "Data": {"PodDeviceEntries": entries, "RegisteredDevices": cp.registered},
            "Checksum": sum,
        })
        .to_string()
    }

    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let word = chunk
                .iter()
                .enumerate()
                .fold(0u32, |w, (i, &b)| w | (u32::from(b) << (16 - 8 * i)));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[((word >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    fn arb_checkpoint() -> impl Strategy<Value = DeviceCheckpoint> {
        let text = || "\\PC{0,10}";
        let list = || proptest::option::of(proptest::collection::vec(text(), 0..4));
        let ids = prop_oneof![
            Just(DeviceIds::Nil),
            proptest::collection::btree_map(-1i64..4, list(), 0..3).prop_map(DeviceIds::ByNuma),
        ];
        let entry = (
            text(),
            text(),
            text(),
            ids,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        )
            .prop_map(
                |(pod_uid, container_name, resource_name, device_ids, alloc_resp)| RawDeviceEntry {
                    pod_uid,
                    container_name,
                    resource_name,
                    device_ids,
                    alloc_resp,
                },
            );
        (
            proptest::option::of(proptest::collection::vec(entry, 0..5)),
            proptest::option::of(proptest::collection::btree_map(text(), list(), 0..3)),
        )
            .prop_map(|(entries, registered)| DeviceCheckpoint {
                entries,
                registered,
                checksum: 0,
                boot_id: String::new(),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

        #[test]
        fn whatever_a_kubelet_writes_reads_back_and_verifies(cp in arb_checkpoint()) {
            let json = to_kubelet_json(&cp);
            let read = DeviceCheckpoint::parse(json.as_bytes()).unwrap();
            prop_assert_eq!(read.verify(), MATCHED_V2);
            prop_assert_eq!(&read.entries, &cp.entries);
            prop_assert_eq!(&read.registered, &cp.registered);
            let state = read.state().unwrap();
            prop_assert_eq!(state.entries.len(), cp.entries.as_ref().map_or(0, Vec::len));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(cp) = DeviceCheckpoint::parse(&bytes) {
                let _ = cp.verify();
                let _ = cp.state();
            }
        }

        #[test]
        fn mutated_kubelet_files_never_panic(
            base in proptest::sample::select(KUBELET_FILES.to_vec()),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
            cut in any::<usize>(),
        ) {
            let mut bytes = base.as_bytes().to_vec();
            for (pos, byte) in edits {
                let p = pos % bytes.len();
                bytes[p] = byte;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            if let Ok(cp) = DeviceCheckpoint::parse(&bytes) {
                let _ = cp.verify();
                let _ = cp.state();
            }
        }

        #[test]
        fn base64_never_panics_and_reads_what_is_written(bytes in proptest::collection::vec(any::<u8>(), 0..64), noise in "[A-Za-z0-9+/=\\n-]{0,12}") {
            prop_assert_eq!(go_std_base64(&base64(&bytes)).unwrap(), bytes);
            let _ = go_std_base64(&noise);
        }
    }
}
