//! The memory manager checkpoint's checksum: go-spew `%#v` of a pointer to the struct, checksum
//! zeroed, FNV-1a 32 (see docs/kubelet.md, "The memory manager checkpoint").

use std::fmt::Write as _;

use super::*;
use crate::checkpoint::checksum::fnv1a32;
use crate::managers::gospew::{plain_slice, slice};

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
        plain_slice(out, node.cells.as_deref());
        out.push('}');
    }
    out.push(']');
}

fn dump_blocks(out: &mut String, blocks: Option<&[RawBlock]>) {
    let _ = slice(out, blocks, |out, b| {
        out.push_str("{NUMAAffinity:([]int)");
        plain_slice(out, b.numa_affinity.as_deref());
        let _ = write!(out, " Type:(v1.ResourceName){} Size:(uint64){}}}", b.resource, b.size);
        Some(())
    });
}
