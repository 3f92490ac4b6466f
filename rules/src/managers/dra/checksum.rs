//! The DRA manager checkpoint's checksums: CRC-32 of `Data` (1.31 and later), and the go-spew
//! `%#v` rendering + FNV-1a of the older layouts (see docs/kubelet.md, "The DRA manager
//! checkpoint").

use std::fmt::Write as _;

use super::*;
use crate::checkpoint::checksum::{first_match, fnv1a32};
use crate::managers::gospew::{plain_slice, slice};

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

pub(super) fn verify_data(body: &DataBody) -> Verification {
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

pub(super) fn verify_spew(body: &SpewBody) -> Verification {
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
pub(super) fn spew_dump(body: &SpewBody, candidate: Candidate) -> Option<String> {
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
        SpewEntries::List(list) => slice(&mut out, Some(list), |out, entry| dump_entry(out, entry, candidate))?,
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
    slice(out, handles, |out, h| {
        let _ = write!(out, "{{DriverName:(string){} Data:(string){}", h.driver_name, h.data);
        if with_structured {
            if h.structured_data {
                return None;
            }
            out.push_str(" StructuredData:(*v1alpha2.StructuredResourceHandle)<nil>");
        }
        out.push('}');
        Some(())
    })
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
        plain_slice(out, ids.as_deref());
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
        let _ = slice(out, devices.as_deref(), |out, d| {
            let _ = write!(
                out,
                "{{PoolName:(string){} DeviceName:(string){} RequestNames:([]string)",
                d.pool_name, d.device_name
            );
            plain_slice(out, d.request_names.as_deref());
            out.push_str(" CDIDeviceIDs:([]string)");
            plain_slice(out, d.cdi_device_ids.as_deref());
            out.push('}');
            Some(())
        });
        out.push('}');
    }
    out.push(']');
}
