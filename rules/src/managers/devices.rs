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
use crate::managers::gospew::{plain_slice, slice};

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
        slice(&mut out, self.entries.as_deref(), |out, entry| {
            dump_entry(out, entry, layout)
        })?;
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
                    plain_slice(&mut out, ids.as_deref());
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
                plain_slice(out, ids.as_deref());
            }
            out.push(']');
        }
        (Layout::V1, DeviceIds::Nil) => out.push_str("DeviceIDs:([]string)<nil>"),
        (Layout::V1, DeviceIds::Flat(ids)) => {
            out.push_str("DeviceIDs:([]string)");
            plain_slice(out, Some(ids));
        }
        (Layout::V2, DeviceIds::Flat(_)) | (Layout::V1, DeviceIds::ByNuma(_)) => return None,
    }
    // A []byte is a slice like any other here: decimal elements (go-spew's hex dump is only
    // for Dump/Sdump, not for the %#v formatter the kubelet uses).
    out.push_str(" AllocResp:([]uint8)");
    plain_slice(out, entry.alloc_resp.as_deref());
    out.push('}');
    Some(())
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
// Err: Go's own message as text, which the one caller puts into `CheckpointError::Value` with
// the field's name at once.
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
mod tests;
