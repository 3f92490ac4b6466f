//! The memory manager checkpoint's checksum: go-spew `%#v` of a pointer to the struct, checksum
//! zeroed, FNV-1a 32 (see docs/kubelet.md, "The memory manager checkpoint").

use std::fmt::Write as _;

use super::*;
use crate::checkpoint::checksum::fnv1a32;
use crate::managers::gospew::{NextType, field, plain_slice, pointer_map, slice};

/// The go-spew dump the kubelet hashes for `candidate`, or `None` when the file's shape
/// cannot be that struct (a `podEntries` the V2 struct cannot decode).
///
/// Rules that matter here (verified against the kubelet's test vectors): a struct field prints
/// `Name:(type)value`; map keys, map values and slice elements print without a type; a non-nil
/// pointer inside a map prints `<*>` and then its value, a nil one `<nil>`; nil maps and nil
/// slices print `<nil>`, empty ones `map[]` and `[]`; int keys sort numerically and string
/// keys (`v1.ResourceName` too) bytewise; strings print raw. And one rule of go-spew's own
/// making: when the last value of `machineState` or of a `memoryMap` is `null`, the field
/// printed after that map (`Entries`, `Cells`) loses its `(type)` (see [`NextType`]).
pub fn spew_dump(cp: &MemoryCheckpoint, candidate: MemoryCandidate) -> Option<String> {
    let mut out = String::with_capacity(512);
    let _ = write!(
        out,
        "(*state.{}){{PolicyName:(string){} MachineState:(state.NUMANodeMap)",
        candidate.type_name(),
        cp.policy_name
    );
    let after = pointer_map(&mut out, cp.machine_state.as_ref(), dump_numa_node);
    field(&mut out, " Entries", "state.ContainerMemoryAssignments", after);
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

/// One non-nil `*NUMANodeState` after its `<*>`. Its last field, `Cells`, is a slice, whose
/// printing clears go-spew's flag again.
fn dump_numa_node(out: &mut String, node: &RawNumaNode) -> NextType {
    let _ = write!(
        out,
        "{{NumberOfAssignments:(int){} MemoryMap:(map[v1.ResourceName]*state.MemoryTable)",
        node.number_of_assignments
    );
    let after = pointer_map(out, node.memory_map.as_ref(), |out, t| {
        let _ = write!(
            out,
            "{{TotalMemSize:(uint64){} SystemReserved:(uint64){} Allocatable:(uint64){} Reserved:(uint64){} Free:(uint64){}}}",
            t.total, t.system_reserved, t.allocatable, t.reserved, t.free
        );
        NextType::Shown
    });
    field(out, " Cells", "[]int", after);
    plain_slice(out, node.cells.as_deref());
    out.push('}');
    NextType::Shown
}

fn dump_blocks(out: &mut String, blocks: Option<&[RawBlock]>) {
    let _ = slice(out, blocks, |out, b| {
        out.push_str("{NUMAAffinity:([]int)");
        plain_slice(out, b.numa_affinity.as_deref());
        let _ = write!(out, " Type:(v1.ResourceName){} Size:(uint64){}}}", b.resource, b.size);
        Some(())
    });
}
