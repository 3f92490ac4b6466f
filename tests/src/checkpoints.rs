//! The kubelet's other resource manager checkpoints for fixture hosts, written as the kubelet
//! writes them: `memory_manager_state` (V1, Static policy), the device manager's
//! `kubelet_internal_checkpoint` (V2, devices by NUMA node), `dra_manager_state` (the
//! `Data`/CRC-32 layout of 1.31 and later) and the NVIDIA GPU DRA driver's `checkpoint.json`
//! (V2). Checksums are computed with nodemedic's readers, whose own tests pin them to upstream
//! vectors; each writer reads its file back and refuses one the reader does not verify, so a
//! fixture is never silently corrupt.

use nodemedic_rules::Verification;
use nodemedic_rules::managers::devices::DeviceCheckpoint;
use nodemedic_rules::managers::dra::{DraCheckpoint, crc32_ieee};
use nodemedic_rules::managers::memory::{MemoryCandidate, MemoryCheckpoint, checksum};
use serde_json::{Value, json};

/// One GiB.
pub const GIB: u64 = 1 << 30;

/// A memory manager entry: a container's block of `bytes` of `resource` on `numa` nodes.
#[derive(Debug, Clone)]
pub struct MemoryEntry {
    pub pod_uid: String,
    pub container: String,
    pub numa: Vec<i64>,
    pub resource: String,
    pub bytes: u64,
}

impl MemoryEntry {
    /// `bytes` of `memory` on NUMA node `numa` for `pod_uid`/`container`.
    pub fn new(pod_uid: &str, container: &str, numa: i64, bytes: u64) -> Self {
        MemoryEntry {
            pod_uid: pod_uid.into(),
            container: container.into(),
            numa: vec![numa],
            resource: "memory".into(),
            bytes,
        }
    }
}

/// `memory_manager_state` of a Static policy on NUMA nodes `0..numa_nodes` of `per_node` bytes
/// each (1 GiB reserved for the system), holding `entries`.
pub fn memory_manager_state(numa_nodes: i64, per_node: u64, entries: &[MemoryEntry]) -> Vec<u8> {
    let mut machine = serde_json::Map::new();
    for id in 0..numa_nodes {
        let reserved: u64 = entries
            .iter()
            .filter(|e| e.numa.first() == Some(&id) && e.resource == "memory")
            .map(|e| e.bytes)
            .sum();
        let allocatable = per_node - GIB;
        let assignments = entries.iter().filter(|e| e.numa.first() == Some(&id)).count();
        machine.insert(
            id.to_string(),
            json!({
                "numberOfAssignments": assignments,
                "memoryMap": {"memory": {
                    "total": per_node, "systemReserved": GIB, "allocatable": allocatable,
                    "reserved": reserved, "free": allocatable.saturating_sub(reserved),
                }},
                "cells": [id],
            }),
        );
    }
    let mut by_pod: serde_json::Map<String, Value> = serde_json::Map::new();
    for e in entries {
        let pod = by_pod.entry(e.pod_uid.clone()).or_insert_with(|| json!({}));
        let blocks = pod
            .as_object_mut()
            .map(|p| p.entry(e.container.clone()).or_insert_with(|| json!([])));
        if let Some(Value::Array(list)) = blocks {
            list.push(json!({"numaAffinity": e.numa, "type": e.resource, "size": e.bytes}));
        }
    }
    let unsigned = json!({"policyName": "Static", "machineState": machine, "entries": by_pod, "checksum": 0});
    let cp = MemoryCheckpoint::parse(unsigned.to_string().as_bytes()).expect("the fixture parses");
    let sum = checksum(&cp, MemoryCandidate::V1).expect("a V1 file");
    let mut signed = unsigned;
    signed["checksum"] = json!(sum);
    let bytes = signed.to_string().into_bytes();
    assert!(
        matches!(
            MemoryCheckpoint::parse(&bytes).map(|c| c.verify()),
            Ok(Verification::Matched { .. })
        ),
        "the memory fixture verifies"
    );
    bytes
}

/// A device manager entry: `devices` of `resource` as `(id, NUMA node)` for a container.
#[derive(Debug, Clone)]
pub struct DeviceEntry {
    pub pod_uid: String,
    pub container: String,
    pub resource: String,
    pub devices: Vec<(String, i64)>,
}

impl DeviceEntry {
    pub fn new(pod_uid: &str, container: &str, resource: &str, devices: &[(&str, i64)]) -> Self {
        DeviceEntry {
            pod_uid: pod_uid.into(),
            container: container.into(),
            resource: resource.into(),
            devices: devices.iter().map(|(d, n)| (d.to_string(), *n)).collect(),
        }
    }
}

/// `kubelet_internal_checkpoint` with `entries` and the devices `registered` per resource.
pub fn device_checkpoint(entries: &[DeviceEntry], registered: &[(&str, &[&str])]) -> Vec<u8> {
    let entries: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut by_numa: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            for (id, numa) in &e.devices {
                by_numa.entry(numa.to_string()).or_default().push(id.clone());
            }
            json!({
                "PodUID": e.pod_uid, "ContainerName": e.container, "ResourceName": e.resource,
                "DeviceIDs": by_numa, "AllocResp": "",
            })
        })
        .collect();
    let registered: serde_json::Map<String, Value> =
        registered.iter().map(|(r, ids)| (r.to_string(), json!(ids))).collect();
    let mut file = json!({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": registered}, "Checksum": 0});
    let cp = DeviceCheckpoint::parse(file.to_string().as_bytes()).expect("the fixture parses");
    let Verification::Mismatch { computed, .. } = cp.verify() else {
        panic!("a zero checksum is no device manager checksum")
    };
    file["Checksum"] = json!(computed[0].1);
    let bytes = file.to_string().into_bytes();
    assert!(
        matches!(
            DeviceCheckpoint::parse(&bytes).map(|c| c.verify()),
            Ok(Verification::Matched { .. })
        ),
        "the device fixture verifies"
    );
    bytes
}

/// A claim the kubelet prepared: UID, `namespace/name`, pods, devices `(driver, pool, device)`.
#[derive(Debug, Clone)]
pub struct DraClaim {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub pods: Vec<String>,
    pub devices: Vec<(String, String, String)>,
}

/// `dra_manager_state` of a 1.31+ kubelet: `Data` (a JSON string) and its CRC-32.
pub fn dra_manager_state(claims: &[DraClaim]) -> Vec<u8> {
    let entries: Vec<Value> = claims
        .iter()
        .map(|c| {
            let mut drivers: serde_json::Map<String, Value> = serde_json::Map::new();
            for (driver, pool, device) in &c.devices {
                let state = drivers.entry(driver.clone()).or_insert_with(|| json!({"Devices": []}));
                if let Some(Value::Array(list)) = state.get_mut("Devices") {
                    list.push(json!({
                        "PoolName": pool, "DeviceName": device, "RequestNames": ["gpu"],
                        "CDIDeviceIDs": [format!("k8s.{driver}/gpu={device}")],
                    }));
                }
            }
            let pods: serde_json::Map<String, Value> = c.pods.iter().map(|p| (p.clone(), json!({}))).collect();
            json!({
                "ClaimUID": c.uid, "ClaimName": c.name, "Namespace": c.namespace,
                "PodUIDs": pods, "DriverState": drivers,
            })
        })
        .collect();
    let data = json!({
        "kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1", "Entries": entries,
    })
    .to_string();
    let bytes = json!({"Data": data, "Checksum": crc32_ieee(data.as_bytes())})
        .to_string()
        .into_bytes();
    assert!(
        matches!(
            DraCheckpoint::parse(&bytes).map(|c| c.verify()),
            Ok(Verification::Matched { .. })
        ),
        "the DRA fixture verifies"
    );
    bytes
}

/// A claim the NVIDIA GPU driver holds: UID, `namespace/name`, state, the pods it is reserved
/// for, GPUs (device names in pool `pool`).
#[derive(Debug, Clone)]
pub struct DriverClaim {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub state: String,
    pub pods: Vec<String>,
    pub gpus: Vec<String>,
    pub pool: String,
}

/// The NVIDIA GPU DRA driver's `checkpoint.json` (its V2 block, as driver releases with
/// `checkpointState` write it).
pub fn nvidia_checkpoint(claims: &[DriverClaim]) -> Vec<u8> {
    let prepared: serde_json::Map<String, Value> = claims
        .iter()
        .map(|c| {
            let results: Vec<Value> = c
                .gpus
                .iter()
                .map(|g| json!({"request": "gpu", "driver": "gpu.nvidia.com", "pool": c.pool, "device": g}))
                .collect();
            let reserved: Vec<Value> = c
                .pods
                .iter()
                .map(|p| json!({"resource": "pods", "name": format!("pod-{p}"), "uid": p}))
                .collect();
            let devices: Vec<Value> = c
                .gpus
                .iter()
                .map(|g| json!({"gpu": {"device": {"requests": ["gpu"], "poolName": c.pool, "deviceName": g}}}))
                .collect();
            (
                c.uid.clone(),
                json!({
                    "checkpointState": c.state,
                    "status": {"allocation": {"devices": {"results": results}}, "reservedFor": reserved},
                    "preparedDevices": [{"devices": devices}],
                    "name": c.name, "namespace": c.namespace,
                }),
            )
        })
        .collect();
    json!({"checksum": 1, "v2": {"checksum": 1, "preparedClaims": prepared}})
        .to_string()
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::managers::drivers::{DriverFormat, parse};
    use nodemedic_rules::managers::memory::MemoryCheckpoint;

    #[test]
    fn fixtures_read_back_as_written() {
        let mem = memory_manager_state(2, 64 * GIB, &[MemoryEntry::new("u1", "app", 1, 8 * GIB)]);
        let state = MemoryCheckpoint::parse(&mem).unwrap().state().unwrap();
        assert_eq!(state.assignments[0].blocks[0].numa_nodes, [1]);
        assert_eq!(state.numa_nodes[1].resources[0].reserved, 8 * GIB);

        let dev = device_checkpoint(
            &[DeviceEntry::new(
                "u1",
                "app",
                "nvidia.com/gpu",
                &[("GPU-a", 0), ("GPU-b", 1)],
            )],
            &[("nvidia.com/gpu", &["GPU-a", "GPU-b", "GPU-c"])],
        );
        let state = DeviceCheckpoint::parse(&dev).unwrap().state().unwrap();
        assert_eq!(state.entries[0].devices.len(), 2);
        assert_eq!(state.registered["nvidia.com/gpu"].len(), 3);

        let dra = dra_manager_state(&[DraClaim {
            uid: "c1".into(),
            namespace: "spark".into(),
            name: "gpu".into(),
            pods: vec!["u1".into()],
            devices: vec![("gpu.nvidia.com".into(), "node-a".into(), "gpu-0".into())],
        }]);
        let state = DraCheckpoint::parse(&dra).unwrap().state().unwrap();
        assert_eq!(state.claims[0].devices[0].device, "gpu-0");
        assert_eq!(state.claims[0].pod_uids, ["u1"]);

        let nv = nvidia_checkpoint(&[DriverClaim {
            uid: "c9".into(),
            namespace: "spark".into(),
            name: "old".into(),
            state: "PrepareCompleted".into(),
            pods: vec!["gone".into()],
            gpus: vec!["gpu-3".into()],
            pool: "node-a".into(),
        }]);
        let claims = parse(DriverFormat::NvidiaGpu, &nv).unwrap();
        assert_eq!(claims[0].pod_uids, ["gone"]);
        assert_eq!(claims[0].devices, ["gpu-3"]);
        assert_eq!(claims[0].state, "PrepareCompleted");
        assert_eq!(claims[0].claim_name.as_deref(), Some("old"));
    }
}
