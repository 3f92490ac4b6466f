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
use std::fmt::{self, Write as _};

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::checkpoint::checksum::{first_match, fnv1a32, verify_payload};
use crate::checkpoint::{CheckpointError, Verification, invalid_json, json_reason};

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
// The checksum: go-spew `%#v` of a pointer to the struct, checksum zeroed, FNV-1a 32.
// ---------------------------------------------------------------------------------------------

/// The go-spew dump the kubelet hashes for `candidate`, or `None` when the file's shape
/// cannot be that struct (a `podEntries` the V2 struct cannot decode).
///
/// Rules that matter here (verified against the kubelet's test vectors): a struct field prints
/// `Name:(type)value`; map keys, map values and slice elements print without a type; a non-nil
/// pointer inside a map prints `<*>` and then its value, a nil one `<nil>`; nil maps and nil
/// slices print `<nil>`, empty ones `map[]` and `[]`; int keys sort numerically and string
/// keys (`v1.ResourceName` too) bytewise; strings print raw.
pub fn spew_dump(cp: &MemoryCheckpoint, candidate: MemoryCandidate) -> Option<String> {
    let mut out = String::with_capacity(512);
    let _ = write!(
        out,
        "(*state.{}){{PolicyName:(string){} MachineState:(state.NUMANodeMap)",
        candidate.type_name(),
        cp.policy_name
    );
    dump_numa_map(&mut out, cp.machine_state.as_ref());
    out.push_str(" Entries:(state.ContainerMemoryAssignments)");
    match &cp.entries {
        None => out.push_str("<nil>"),
        Some(pods) => {
            out.push_str("map[");
            for (i, (uid, containers)) in pods.iter().enumerate() {
                sep(&mut out, i);
                let _ = write!(out, "{uid}:");
                match containers {
                    None => out.push_str("<nil>"),
                    Some(containers) => {
                        out.push_str("map[");
                        for (j, (name, blocks)) in containers.iter().enumerate() {
                            sep(&mut out, j);
                            let _ = write!(out, "{name}:");
                            dump_blocks(&mut out, blocks.as_deref());
                        }
                        out.push(']');
                    }
                }
            }
            out.push(']');
        }
    }
    if candidate == MemoryCandidate::V2 {
        out.push_str(" PodEntries:(state.PodMemoryAssignments)");
        match &cp.pod_entries {
            PodEntries::Absent => out.push_str("map[]"),
            PodEntries::Null => out.push_str("<nil>"),
            PodEntries::Invalid(_) => return None,
            PodEntries::Map(pods) => {
                out.push_str("map[");
                for (i, (uid, blocks)) in pods.iter().enumerate() {
                    sep(&mut out, i);
                    let _ = write!(out, "{uid}:{{MemoryBlocks:([]state.Block)");
                    dump_blocks(&mut out, blocks.as_deref());
                    out.push('}');
                }
                out.push(']');
            }
        }
    }
    out.push_str(" Checksum:(checksum.Checksum)0}");
    Some(out)
}

/// The checksum the kubelet computes for `candidate`, if the struct fits the file.
pub fn checksum(cp: &MemoryCheckpoint, candidate: MemoryCandidate) -> Option<u32> {
    spew_dump(cp, candidate).map(|dump| fnv1a32(dump.as_bytes()))
}

fn sep(out: &mut String, i: usize) {
    if i > 0 {
        out.push(' ');
    }
}

fn dump_ints(out: &mut String, ints: Option<&[i64]>) {
    match ints {
        None => out.push_str("<nil>"),
        Some(ints) => {
            out.push('[');
            for (i, n) in ints.iter().enumerate() {
                sep(out, i);
                let _ = write!(out, "{n}");
            }
            out.push(']');
        }
    }
}

fn dump_numa_map(out: &mut String, map: Option<&NumaNodeMap>) {
    let Some(map) = map else {
        out.push_str("<nil>");
        return;
    };
    out.push_str("map[");
    for (i, (id, node)) in map.iter().enumerate() {
        sep(out, i);
        let _ = write!(out, "{id}:");
        let Some(node) = node else {
            out.push_str("<nil>");
            continue;
        };
        let _ = write!(
            out,
            "<*>{{NumberOfAssignments:(int){} MemoryMap:(map[v1.ResourceName]*state.MemoryTable)",
            node.number_of_assignments
        );
        match &node.memory_map {
            None => out.push_str("<nil>"),
            Some(tables) => {
                out.push_str("map[");
                for (j, (resource, table)) in tables.iter().enumerate() {
                    sep(out, j);
                    let _ = write!(out, "{resource}:");
                    match table {
                        None => out.push_str("<nil>"),
                        Some(t) => {
                            let _ = write!(
                                out,
                                "<*>{{TotalMemSize:(uint64){} SystemReserved:(uint64){} Allocatable:(uint64){} Reserved:(uint64){} Free:(uint64){}}}",
                                t.total, t.system_reserved, t.allocatable, t.reserved, t.free
                            );
                        }
                    }
                }
                out.push(']');
            }
        }
        out.push_str(" Cells:([]int)");
        dump_ints(out, node.cells.as_deref());
        out.push('}');
    }
    out.push(']');
}

fn dump_blocks(out: &mut String, blocks: Option<&[RawBlock]>) {
    let Some(blocks) = blocks else {
        out.push_str("<nil>");
        return;
    };
    out.push('[');
    for (i, b) in blocks.iter().enumerate() {
        sep(out, i);
        out.push_str("{NUMAAffinity:([]int)");
        dump_ints(out, b.numa_affinity.as_deref());
        let _ = write!(out, " Type:(v1.ResourceName){} Size:(uint64){}}}", b.resource, b.size);
    }
    out.push(']');
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The kubelet's own files (kubernetes/kubernetes
    /// `pkg/kubelet/cm/memorymanager/state/state_checkpoint_test.go`, 1.21 to 1.37).
    const UPSTREAM_V1: &str = r#"{
        "policyName":"static",
        "machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
        "entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},
        "checksum": 4215593881
    }"#;
    const UPSTREAM_V2: &str = r#"{
        "policyName":"static",
        "machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
        "entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},
        "podEntries":{"pod":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":512}]}},
        "checksum": 1278640530
    }"#;
    /// A V3 file whose outer (V1) part is deliberately wrong: only `data` counts.
    const UPSTREAM_V3: &str = r#"{
        "policyName":"other",
        "machineState":{"0":{"numberOfAssignments":5,"memoryMap":{"memory":{"total":1024,"systemReserved":256,"allocatable":768,"reserved":256,"free":512}},"cells":[]}},
        "entries":{"pod":{"containerX":[{"numaAffinity":[0],"type":"memory","size":128}]}},
        "checksum": 1234,
        "data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",
        "dataChecksum": 1849615440
    }"#;
    const UPSTREAM_V3_PODS: &str = r#"{
        "policyName":"other",
        "machineState":{"0":{"numberOfAssignments":5,"memoryMap":{"memory":{"total":1024,"systemReserved":256,"allocatable":768,"reserved":256,"free":512}},"cells":[]}},
        "entries":{"pod":{"containerX":[{"numaAffinity":[0],"type":"memory","size":128}]}},
        "podEntries":{"podY":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":64}]}},
        "checksum": 1234,
        "data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}},\"podEntries\":{\"pod\":{\"memoryBlocks\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",
        "dataChecksum": 637296054
    }"#;
    const UPSTREAM_V3_UNKNOWN_FIELD: &str = r#"{
        "policyName":"other",
        "checksum": 1234,
        "data": "{\"unknownField\":\"value\",\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",
        "dataChecksum": 2100279793
    }"#;

    fn parse(text: &str) -> MemoryCheckpoint {
        MemoryCheckpoint::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn matched(cp: &MemoryCheckpoint) -> (&'static str, &'static str) {
        match cp.verify() {
            Verification::Matched { layout, type_name, .. } => (layout, type_name),
            other => panic!("not matched: {other:?}"),
        }
    }

    fn field_of(text: &str) -> String {
        match MemoryCheckpoint::parse(text.as_bytes()) {
            Err(CheckpointError::FieldType { field, .. } | CheckpointError::Value { field, .. }) => field,
            other => panic!("{text}: expected a field error, got {other:?}"),
        }
    }

    fn block(bytes: u64) -> MemoryBlock {
        MemoryBlock {
            numa_nodes: vec![0],
            resource: "memory".into(),
            bytes,
        }
    }

    #[test]
    fn v1_dump_is_exactly_the_kubelet_string() {
        let cp = parse(UPSTREAM_V1);
        assert_eq!(
            spew_dump(&cp, MemoryCandidate::V1).unwrap(),
            "(*state.MemoryManagerCheckpoint){PolicyName:(string)static MachineState:(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[memory:<*>{TotalMemSize:(uint64)2048 SystemReserved:(uint64)512 Allocatable:(uint64)1536 Reserved:(uint64)512 Free:(uint64)1024}] Cells:([]int)[]}] Entries:(state.ContainerMemoryAssignments)map[pod:map[container1:[{NUMAAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)512}]]] Checksum:(checksum.Checksum)0}"
        );
        assert_eq!(matched(&cp), ("V1", "MemoryManagerCheckpoint"));
        assert_eq!(cp.layout(), "V1");
    }

    #[test]
    fn v2_vector_matches_with_its_pod_entries() {
        let cp = parse(UPSTREAM_V2);
        assert!(
            spew_dump(&cp, MemoryCandidate::V2)
                .unwrap()
                .contains(" PodEntries:(state.PodMemoryAssignments)map[pod:{MemoryBlocks:([]state.Block)[{NUMAAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)512}]}] Checksum:")
        );
        assert_eq!(matched(&cp), ("V2", "MemoryManagerCheckpoint"));
        assert_eq!(cp.layout(), "V2");
        let state = cp.state().unwrap();
        assert_eq!(state.pod_assignments, vec![("pod".to_string(), vec![block(512)])]);
    }

    #[test]
    fn v1_named_rendering_of_1_36_development_builds_matches() {
        // The same content hashed as `(*state.MemoryManagerCheckpointV1)`.
        let text = UPSTREAM_V1.replace("4215593881", "2267633148");
        assert_eq!(matched(&parse(&text)), ("V1", "MemoryManagerCheckpointV1"));
    }

    #[test]
    fn wrong_checksums_of_the_upstream_tests_are_rejected() {
        // "Restore checkpoint with invalid checksum": also an unknown key (`affinity`).
        let text = UPSTREAM_V1
            .replace("\"numaAffinity\"", "\"affinity\"")
            .replace("4215593881", "101010");
        match parse(&text).verify() {
            Verification::Mismatch { stored, computed } => {
                assert_eq!(stored, 101_010);
                assert_eq!(computed.len(), 3);
            }
            other => panic!("{other:?}"),
        }
        assert!(!parse(&UPSTREAM_V2.replace("1278640530", "101010")).verify().accepted());
        assert!(!parse(&UPSTREAM_V3.replace("1849615440", "1234")).verify().accepted());
    }

    #[test]
    fn checksum_zero_is_unverified_v1_with_or_without_pod_entries() {
        for text in [
            UPSTREAM_V1.replace("4215593881", "0"),
            UPSTREAM_V2.replace("1278640530", "0"),
        ] {
            assert_eq!(parse(&text).verify(), Verification::Unverified { layout: "V1" });
        }
    }

    #[test]
    fn v3_uses_the_payload_and_its_data_checksum() {
        let cp = parse(UPSTREAM_V3);
        assert_eq!(cp.layout(), "V3");
        assert_eq!(
            cp.verify(),
            Verification::Matched {
                layout: "V3",
                type_name: "string",
                v4: true
            }
        );
        let state = cp.state().unwrap();
        assert_eq!(state.policy_name, "static");
        assert_eq!(state.assignments.len(), 1);
        assert_eq!(state.assignments[0].container, "container1");
        assert_eq!(state.assignments[0].blocks, vec![block(512)]);
        assert_eq!(state.numa_nodes[0].resources[0].free, 1024);
        assert!(state.pod_assignments.is_empty());

        let cp = parse(UPSTREAM_V3_PODS);
        assert!(cp.verify().accepted());
        // The outer `podEntries` (podY) is not part of V3; the payload's (pod) is.
        assert_eq!(
            cp.state().unwrap().pod_assignments,
            vec![("pod".to_string(), vec![block(512)])]
        );

        assert!(parse(UPSTREAM_V3_UNKNOWN_FIELD).verify().accepted());
    }

    #[test]
    fn broken_v3_payloads_are_refused() {
        // "Fail to restore checkpoint with invalid data JSON" and "... without data section".
        let bad_json = UPSTREAM_V3.replace(r#""data": "{\"policyName"#, r#""data": "{", "x": "{\"policyName"#);
        assert_eq!(field_of(&bad_json), "data");
        let no_data = r#"{"policyName":"static","checksum":4215593881,"dataChecksum":1234}"#;
        assert_eq!(field_of(no_data), "data");
        let payload_type = r#"{"data":"{\"machineState\":{\"0\":{\"cells\":[-1.5]}}}","dataChecksum":1}"#;
        assert_eq!(field_of(payload_type), r#"data.machineState["0"].cells[0]"#);
        assert_eq!(field_of(r#"{"data":"[1]","dataChecksum":1}"#), "data");
        // A V3 file's data must be a string, its dataChecksum a uint64.
        assert_eq!(field_of(r#"{"data":5,"dataChecksum":7}"#), "data");
        assert_eq!(field_of(r#"{"data":"{}","dataChecksum":-7}"#), "dataChecksum");
    }

    #[test]
    fn not_v3_when_data_is_empty_and_data_checksum_zero() {
        // 1.37 falls back to V2 and V1, which have neither field.
        for extra in [
            r#""data":"""#,
            r#""data":5"#,
            r#""data":null,"dataChecksum":0"#,
            r#""dataChecksum":"x""#,
        ] {
            let text = UPSTREAM_V1.replace("\"checksum\"", &format!("{extra}, \"checksum\""));
            let cp = parse(&text);
            assert_eq!(cp.layout(), "V1", "{extra}");
            assert_eq!(matched(&cp), ("V1", "MemoryManagerCheckpoint"), "{extra}");
        }
        // `"data":"null"` is a V3 payload that decodes to nothing.
        let data = "null";
        let text = format!(
            r#"{{"data":"{data}","dataChecksum":{}}}"#,
            crate::checkpoint::checksum::data_checksum(data)
        );
        let cp = parse(&text);
        assert!(cp.verify().accepted());
        assert_eq!(cp.state().unwrap(), MemoryState::default());
    }

    #[test]
    fn nil_and_empty_render_apart() {
        let cases = [
            (
                r#"{"policyName":"None","machineState":{},"checksum":0}"#,
                "MachineState:(state.NUMANodeMap)map[] Entries:(state.ContainerMemoryAssignments)map[] ",
            ),
            (
                r#"{"machineState":null,"entries":null}"#,
                "MachineState:(state.NUMANodeMap)<nil> Entries:(state.ContainerMemoryAssignments)<nil> ",
            ),
            (r#"{"machineState":{"0":null}}"#, "map[0:<nil>]"),
            (
                r#"{"machineState":{"0":{}}}"#,
                "map[0:<*>{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)<nil> Cells:([]int)<nil>}]",
            ),
            (
                r#"{"machineState":{"0":{"memoryMap":{},"cells":[]}}}"#,
                "MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[] Cells:([]int)[]}",
            ),
            (
                r#"{"machineState":{"0":{"memoryMap":{"memory":null},"cells":[0,1]}}}"#,
                "map[memory:<nil>] Cells:([]int)[0 1]}",
            ),
            (
                r#"{"entries":{"p":null,"q":{},"r":{"c":null,"d":[]}}}"#,
                "map[p:<nil> q:map[] r:map[c:<nil> d:[]]]",
            ),
            (
                r#"{"entries":{"p":{"c":[{},null]}}}"#,
                "map[p:map[c:[{NUMAAffinity:([]int)<nil> Type:(v1.ResourceName) Size:(uint64)0} {NUMAAffinity:([]int)<nil> Type:(v1.ResourceName) Size:(uint64)0}]]]",
            ),
        ];
        for (text, part) in cases {
            let dump = spew_dump(&parse(text), MemoryCandidate::V1).unwrap();
            assert!(dump.contains(part), "{text}\n{dump}");
        }
        let pods = [
            (
                r#"{"podEntries":null}"#,
                "PodEntries:(state.PodMemoryAssignments)<nil> ",
            ),
            (r#"{}"#, "PodEntries:(state.PodMemoryAssignments)map[] "),
            (
                r#"{"podEntries":{"a":null,"b":{},"c":{"memoryBlocks":[]}}}"#,
                "map[a:{MemoryBlocks:([]state.Block)<nil>} b:{MemoryBlocks:([]state.Block)<nil>} c:{MemoryBlocks:([]state.Block)[]}]",
            ),
        ];
        for (text, part) in pods {
            let dump = spew_dump(&parse(text), MemoryCandidate::V2).unwrap();
            assert!(dump.contains(part), "{text}\n{dump}");
        }
        // As a 1.35 kubelet writes a node with the None policy.
        let none = r#"{"policyName":"None","machineState":{},"checksum":4236770233}"#;
        assert_eq!(matched(&parse(none)), ("V1", "MemoryManagerCheckpoint"));
    }

    #[test]
    fn keys_sort_as_go_spew_sorts_them() {
        let text = r#"{"machineState":{"10":{"memoryMap":{"memory":{},"hugepages-2Mi":{},"hugepages-1Gi":{}}},"2":{},"-1":{}},
            "entries":{"b":{"z":[],"a":[]},"B":{}}}"#;
        let dump = spew_dump(&parse(text), MemoryCandidate::V1).unwrap();
        let order = [
            "-1:<*>",
            "2:<*>",
            "10:<*>",
            "hugepages-1Gi:",
            "hugepages-2Mi:",
            "memory:",
            "B:map[]",
            "b:map[a:[] z:[]]",
        ];
        let at: Vec<usize> = order
            .iter()
            .map(|s| dump.find(s).unwrap_or_else(|| panic!("{s}: {dump}")))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{dump}");
        let state = parse(text).state().unwrap();
        assert_eq!(
            state.numa_nodes.iter().map(|n| n.id).collect::<Vec<_>>(),
            vec![-1, 2, 10]
        );
        let resources: Vec<_> = state.numa_nodes[2]
            .resources
            .iter()
            .map(|r| r.resource.as_str())
            .collect();
        assert_eq!(resources, vec!["hugepages-1Gi", "hugepages-2Mi", "memory"]);
    }

    #[test]
    fn numbers_go_would_refuse_name_their_field() {
        let cases = [
            (
                r#"{"entries":{"p":{"c":[{"size":-1}]}}}"#,
                r#"entries["p"]["c"][0].size"#,
            ),
            (
                r#"{"entries":{"p":{"c":[{"size":1.5}]}}}"#,
                r#"entries["p"]["c"][0].size"#,
            ),
            (
                r#"{"entries":{"p":{"c":[{"size":1e3}]}}}"#,
                r#"entries["p"]["c"][0].size"#,
            ),
            (
                r#"{"entries":{"p":{"c":[{"size":18446744073709551616}]}}}"#,
                r#"entries["p"]["c"][0].size"#,
            ),
            (
                r#"{"entries":{"p":{"c":[{"numaAffinity":[0,"1"]}]}}}"#,
                r#"entries["p"]["c"][0].numaAffinity[1]"#,
            ),
            (
                r#"{"machineState":{"0":{"numberOfAssignments":1.0}}}"#,
                r#"machineState["0"].numberOfAssignments"#,
            ),
            (
                r#"{"machineState":{"0":{"numberOfAssignments":9223372036854775808}}}"#,
                r#"machineState["0"].numberOfAssignments"#,
            ),
            (
                r#"{"machineState":{"0":{"memoryMap":{"memory":{"Free":-0}}}}}"#,
                r#"machineState["0"].memoryMap["memory"].free"#,
            ),
            (r#"{"machineState":{"x":{}}}"#, r#"machineState["x"]"#),
            (r#"{"machineState":{"1.0":{}}}"#, r#"machineState["1.0"]"#),
            (r#"{"machineState":[]}"#, "machineState"),
            (r#"{"checksum":-1}"#, "checksum"),
            (r#"{"policyName":1}"#, "policyName"),
            (r#"{"entries":{"p":{"c":{}}}}"#, r#"entries["p"]["c"]"#),
        ];
        for (text, field) in cases {
            assert_eq!(field_of(text), field, "{text}");
        }
        // What Go accepts: `-0` for an int, `+1` and `007` as int map keys, null anywhere.
        let cp = parse(r#"{"machineState":{"+1":{"cells":[-0,null]},"007":null},"checksum":null,"policyName":null}"#);
        let ids: Vec<_> = cp.machine_state.as_ref().unwrap().keys().copied().collect();
        assert_eq!(ids, vec![1, 7]);
        assert_eq!(
            cp.machine_state.as_ref().unwrap()[&1].as_ref().unwrap().cells,
            Some(vec![0, 0])
        );
    }

    #[test]
    fn keys_fold_as_go_folds_them() {
        let text = "{\"PolicyName\":\"Static\",\"machine\u{17F}tate\":{\"0\":{\"NUMBEROFASSIGNMENTS\":2}},\
            \"entries\":{\"p\":{\"c\":[{\"\u{17F}ize\":5,\"TYPE\":\"memory\",\"numaAff\u{131}nity\":[1]}]}},\
            \"podEntries\":{\"p\":{\"memoryBloc\u{212A}s\":[{\"size\":7}]}}}";
        let state = parse(text).state().unwrap();
        assert_eq!(state.policy_name, "Static");
        assert_eq!(state.numa_nodes[0].assignments, 2);
        assert_eq!(
            state.assignments[0].blocks,
            vec![MemoryBlock {
                numa_nodes: vec![1],
                resource: "memory".into(),
                bytes: 5
            }]
        );
        assert_eq!(state.pod_assignments[0].1[0].bytes, 7);
        // Not a fold: a Unicode letter that only looks alike.
        assert_eq!(parse("{\"policyNam\u{435}\":\"x\"}").policy_name, "");
    }

    #[test]
    fn repeated_keys_decode_into_the_same_field() {
        // Two objects for one map field merge; a repeated map key keeps its last value.
        let text = r#"{"machineState":{"0":{"numberOfAssignments":1},"0":{"numberOfAssignments":2}},
            "MachineState":{"1":{}},"policyName":"a","policyName":"b"}"#;
        let cp = parse(text);
        let nodes = cp.machine_state.as_ref().unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[&0].as_ref().unwrap().number_of_assignments, 2);
        assert_eq!(cp.policy_name, "b");
        // null after an object makes the map nil again.
        assert_eq!(parse(r#"{"entries":{"p":{}},"entries":null}"#).entries, None);
        // A repeated struct field decodes into the same struct.
        let cp = parse(r#"{"entries":{"p":{"c":[{"type":"memory","size":1,"Size":2}]}}}"#);
        assert_eq!(cp.state().unwrap().assignments[0].blocks[0].bytes, 2);
    }

    #[test]
    fn pod_entries_the_v2_struct_cannot_decode_leave_a_v1_file() {
        let text = UPSTREAM_V1.replace(
            "\"checksum\"",
            r#""podEntries":{"p":{"memoryBlocks":[{"size":-1}]}}, "checksum""#,
        );
        let cp = parse(&text);
        assert!(matches!(
            cp.pod_entries,
            PodEntries::Invalid(CheckpointError::FieldType { .. })
        ));
        assert_eq!(spew_dump(&cp, MemoryCandidate::V2), None);
        assert_eq!(matched(&cp), ("V1", "MemoryManagerCheckpoint"));
        assert!(cp.state().unwrap().pod_assignments.is_empty());
    }

    #[test]
    fn state_of_null_parts_is_empty_not_an_error() {
        let cp = parse(
            r#"{"machineState":{"0":null,"1":{"memoryMap":{"memory":null}}},"entries":{"p":null,"q":{"c":null}}}"#,
        );
        let state = cp.state().unwrap();
        assert_eq!(state.numa_nodes.len(), 2);
        assert!(state.numa_nodes[0].resources.is_empty());
        assert_eq!(
            state.numa_nodes[1].resources[0],
            MemoryTable {
                resource: "memory".into(),
                ..MemoryTable::default()
            }
        );
        assert_eq!(
            state.assignments,
            vec![MemoryAssignment {
                pod_uid: "q".into(),
                container: "c".into(),
                blocks: vec![]
            }]
        );
    }

    #[test]
    fn file_level_errors_match_the_cpu_reader() {
        assert_eq!(MemoryCheckpoint::parse(b" \n"), Err(CheckpointError::Empty));
        assert!(matches!(
            MemoryCheckpoint::parse(b"{"),
            Err(CheckpointError::Json { .. })
        ));
        assert_eq!(
            MemoryCheckpoint::parse(b"[]"),
            Err(CheckpointError::NotAnObject { found: "an array" })
        );
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(text in ".{0,200}") {
            if let Ok(cp) = MemoryCheckpoint::parse(text.as_bytes()) {
                let _ = cp.verify();
                let _ = cp.state();
            }
        }

        #[test]
        fn generated_files_parse_and_state_round_trips(
            nodes in proptest::collection::btree_map(-3i64..64, (0i64..9, 0u64..1 << 40, proptest::collection::vec(0i64..8, 0..4)), 0..4),
            blocks in proptest::collection::btree_map("[a-z0-9-]{1,12}", (0u64..u64::MAX, proptest::collection::vec(0i64..8, 0..3)), 0..4),
        ) {
            let machine: serde_json::Map<String, serde_json::Value> = nodes
                .iter()
                .map(|(id, (n, free, cells))| {
                    (id.to_string(), serde_json::json!({"numberOfAssignments": n, "memoryMap": {"memory": {"total": free, "free": free}}, "cells": cells}))
                })
                .collect();
            let containers: serde_json::Map<String, serde_json::Value> = blocks
                .iter()
                .map(|(c, (size, aff))| (c.clone(), serde_json::json!([{"numaAffinity": aff, "type": "memory", "size": size}])))
                .collect();
            let text = serde_json::json!({"policyName": "Static", "machineState": machine, "entries": {"pod": containers}}).to_string();
            let state = MemoryCheckpoint::parse(text.as_bytes()).unwrap().state().unwrap();
            prop_assert_eq!(state.numa_nodes.len(), nodes.len());
            for (node, (id, (n, free, cells))) in state.numa_nodes.iter().zip(&nodes) {
                prop_assert_eq!((node.id, node.assignments, &node.cells), (*id, *n, cells));
                prop_assert_eq!(node.resources[0].free, *free);
            }
            prop_assert_eq!(state.assignments.len(), blocks.len());
            for (a, (c, (size, aff))) in state.assignments.iter().zip(&blocks) {
                prop_assert_eq!((&a.container, a.blocks[0].bytes, &a.blocks[0].numa_nodes), (c, *size, aff));
            }
        }
    }
}
