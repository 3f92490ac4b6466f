//! The kubelet's checkpoint checksum, byte for byte.
//!
//! `pkg/kubelet/checkpointmanager/checksum` hashes the go-spew `%#v` dump of a pointer to the
//! checkpoint struct (with `Checksum` zeroed) with 32-bit FNV-1a. This module builds the same
//! dump from our model and hashes it; docs/kubelet.md ("The checksum") has the dump rules and
//! the upstream test vectors, which the tests below reproduce.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Checkpoint, Entries, PodEntries};
use crate::CpuSet;

/// 32-bit FNV-1a, as Go's `hash/fnv.New32a`.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 2_166_136_261;
    for &b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(16_777_619);
    }
    hash
}

/// The struct layouts the kubelet has hashed, in the order a verifier tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Candidate {
    /// `map[string]map[string]string` entries, printed as `CPUManagerCheckpoint` (1.18 - 1.35).
    V2,
    /// `map[string]string` entries (1.8 - 1.17); the kubelet renames `...V1` before hashing.
    V1,
    /// V2 plus `PodEntries`, printed as `CPUManagerCheckpoint` (1.36).
    V3,
    /// V3 printed as `CPUManagerCheckpointV3` (some 1.36 development builds).
    V3Named,
    /// V2 printed as `CPUManagerCheckpointV2` (some builds around the 1.18 rename).
    V2Named,
}

impl Candidate {
    /// Every candidate in verification order (docs/kubelet.md, "The checksum").
    pub const ORDER: [Candidate; 5] = [
        Candidate::V2,
        Candidate::V1,
        Candidate::V3,
        Candidate::V3Named,
        Candidate::V2Named,
    ];

    /// The layout name (`V1`, `V2`, `V3`).
    pub fn layout(self) -> &'static str {
        match self {
            Candidate::V1 => "V1",
            Candidate::V2 | Candidate::V2Named => "V2",
            Candidate::V3 | Candidate::V3Named => "V3",
        }
    }

    /// The Go type name go-spew prints for this candidate.
    pub fn type_name(self) -> &'static str {
        match self {
            Candidate::V1 | Candidate::V2 | Candidate::V3 => "CPUManagerCheckpoint",
            Candidate::V3Named => "CPUManagerCheckpointV3",
            Candidate::V2Named => "CPUManagerCheckpointV2",
        }
    }
}

/// The go-spew dump that the kubelet hashes for `candidate`, or `None` when the file's shape
/// cannot be that layout (a V1 file has string entries; a V2/V3 file has object entries).
pub fn spew_dump(cp: &Checkpoint, candidate: Candidate) -> Option<String> {
    let mut out = String::with_capacity(256);
    let _ = write!(
        out,
        "(*state.{}){{PolicyName:(string){} DefaultCPUSet:(string){} ",
        candidate.type_name(),
        cp.policy_name,
        cp.default_cpu_set
    );
    match candidate {
        Candidate::V1 => {
            out.push_str("Entries:(map[string]string)");
            match &cp.entries {
                Entries::Absent => out.push_str("map[]"),
                Entries::Null => out.push_str("<nil>"),
                Entries::ByContainerId(map) => dump_string_map(&mut out, map),
                Entries::ByPod(map) if map.is_empty() => out.push_str("map[]"),
                Entries::ByPod(_) => return None,
            }
        }
        _ => {
            out.push_str("Entries:(map[string]map[string]string)");
            match &cp.entries {
                Entries::Absent => out.push_str("map[]"),
                Entries::Null => out.push_str("<nil>"),
                Entries::ByContainerId(_) => return None,
                Entries::ByPod(map) => {
                    out.push_str("map[");
                    for (i, (pod, containers)) in map.iter().enumerate() {
                        if i > 0 {
                            out.push(' ');
                        }
                        out.push_str(pod);
                        out.push(':');
                        match containers {
                            Some(c) => dump_string_map(&mut out, c),
                            None => out.push_str("<nil>"),
                        }
                    }
                    out.push(']');
                }
            }
        }
    }
    if matches!(candidate, Candidate::V3 | Candidate::V3Named) {
        out.push_str(" PodEntries:(state.PodCPUAssignments)");
        match &cp.pod_entries {
            PodEntries::Absent => out.push_str("map[]"),
            PodEntries::Null => out.push_str("<nil>"),
            PodEntries::Map(map) => {
                out.push_str("map[");
                for (i, (pod, cpus)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    // The entry's cpuset is a parsed cpuset.CPUSet: a map[int]struct{} with
                    // numerically sorted keys. An unparsable cpuset cannot be hashed.
                    let set = CpuSet::parse(cpus).ok()?;
                    let _ = write!(out, "{pod}:{{CPUSet:(cpuset.CPUSet){{elems:(map[int]struct {{}})map[");
                    for (j, id) in set.iter().enumerate() {
                        if j > 0 {
                            out.push(' ');
                        }
                        let _ = write!(out, "{id}:{{}}");
                    }
                    out.push_str("]}}");
                }
                out.push(']');
            }
        }
    } else if !matches!(cp.pod_entries, PodEntries::Absent) {
        // A V1/V2 struct has no PodEntries field: a file with the key only hashes as V3.
        return None;
    }
    out.push_str(" Checksum:(checksum.Checksum)0}");
    Some(out)
}

fn dump_string_map(out: &mut String, map: &BTreeMap<String, String>) {
    out.push_str("map[");
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(k);
        out.push(':');
        out.push_str(v);
    }
    out.push(']');
}

/// The checksum the kubelet computes for `candidate`, if the layout fits the file.
pub fn checksum(cp: &Checkpoint, candidate: Candidate) -> Option<u32> {
    spew_dump(cp, candidate).map(|dump| fnv1a32(dump.as_bytes()))
}

/// The first of `tried` (layout, Go type name, computed checksum) whose checksum is `stored`, as
/// a match; else every computed checksum, named `<layout> as <type name>`, in order: a
/// verifier's mismatch evidence.
pub(crate) fn first_match(
    stored: u64,
    tried: impl IntoIterator<Item = (&'static str, &'static str, u32)>,
) -> Result<crate::Verification, Vec<(String, u32)>> {
    let mut computed = Vec::new();
    for (layout, type_name, sum) in tried {
        if u64::from(sum) == stored {
            return Ok(crate::Verification::Matched {
                layout,
                type_name,
                v4: false,
            });
        }
        computed.push((format!("{layout} as {type_name}"), sum));
    }
    Err(computed)
}

/// The verification of a checkpoint whose real content is the string `data` (the CPU manager's
/// V4, the memory manager's V3): [`data_checksum`] against `stored`, as layout `layout`.
pub(crate) fn verify_payload(layout: &'static str, data: &str, stored: u64) -> crate::Verification {
    let computed = data_checksum(data);
    if u64::from(computed) == stored {
        crate::Verification::Matched {
            layout,
            type_name: "string",
            v4: true,
        }
    } else {
        crate::Verification::Mismatch {
            stored,
            computed: vec![(format!("{layout} dataChecksum"), computed)],
        }
    }
}

/// The V4 `dataChecksum`: the same hash over the dump of a Go string, `(string)<data>`.
pub fn data_checksum(data: &str) -> u32 {
    let mut bytes = Vec::with_capacity(data.len() + 8);
    bytes.extend_from_slice(b"(string)");
    bytes.extend_from_slice(data.as_bytes());
    fnv1a32(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_reference_values() {
        // Published FNV-1a 32 test values.
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn v2_dump_is_exactly_the_kubelet_string() {
        let cp = Checkpoint::parse(
            br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":3094260139}"#,
        )
        .unwrap();
        let dump = spew_dump(&cp, Candidate::V2).unwrap();
        assert_eq!(
            dump,
            "(*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0-1 Entries:(map[string]map[string]string)map[uid1:map[c1:2-3]] Checksum:(checksum.Checksum)0}"
        );
        assert_eq!(fnv1a32(dump.as_bytes()), 3_094_260_139);
    }

    #[test]
    fn v3_dump_prints_pod_entries_as_int_maps() {
        let cp = Checkpoint::parse(
            br#"{"policyName":"static","defaultCPUSet":"1-2","entries":{"pod1":{"container1":"5-6","container2":"3-4"}},"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":766259872}"#,
        )
        .unwrap();
        let dump = spew_dump(&cp, Candidate::V3).unwrap();
        assert!(
            dump.contains(" PodEntries:(state.PodCPUAssignments)map[pod2:{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})map[7:{} 8:{} 9:{}]}}] Checksum:"),
            "{dump}"
        );
        assert_eq!(spew_dump(&cp, Candidate::V2), None, "a file with podEntries is no V2");
    }

    #[test]
    fn shapes_rule_out_candidates() {
        let v1 = Checkpoint::parse(br#"{"policyName":"none","defaultCpuSet":"","entries":{"id":"1"},"checksum":0}"#)
            .unwrap();
        assert!(spew_dump(&v1, Candidate::V2).is_none());
        assert!(spew_dump(&v1, Candidate::V1).is_some());
        let empty =
            Checkpoint::parse(br#"{"policyName":"none","defaultCpuSet":"","entries":{},"checksum":0}"#).unwrap();
        assert!(spew_dump(&empty, Candidate::V1).is_some() && spew_dump(&empty, Candidate::V2).is_some());
    }

    #[test]
    fn null_and_absent_entries_hash_differently() {
        let absent = Checkpoint::parse(br#"{"policyName":"none","defaultCpuSet":"","checksum":0}"#).unwrap();
        let null =
            Checkpoint::parse(br#"{"policyName":"none","defaultCpuSet":"","entries":null,"checksum":0}"#).unwrap();
        assert!(spew_dump(&absent, Candidate::V2).unwrap().contains("map[] Checksum"));
        assert!(spew_dump(&null, Candidate::V2).unwrap().contains("<nil> Checksum"));
        assert_eq!(checksum(&absent, Candidate::V2), Some(1_353_318_690));
        assert_ne!(checksum(&absent, Candidate::V2), checksum(&null, Candidate::V2));
    }
}
