//! Checkpoint read + verify + state on a large node: 256 CPUs, 250 containers in 125 pods
//! (two exclusive CPUs each), the rest in the default set; and the other managers' files of the
//! same node: 250 containers with a memory block each on one of two NUMA nodes, 250 device
//! entries of one GPU each (with a 120-byte Allocate answer), 125 DRA claims of two devices.
//! Numbers: docs/performance.md.

use criterion::{Criterion, criterion_group, criterion_main};
use nodemedic_rules::checkpoint::{Assignment, CpuState, EntryKey};
use nodemedic_rules::managers::devices::DeviceCheckpoint;
use nodemedic_rules::managers::dra::{DraCheckpoint, crc32_ieee};
use nodemedic_rules::managers::memory::{MemoryCandidate, MemoryCheckpoint, checksum};
use nodemedic_rules::{Checkpoint, CpuSet, Verification};
use std::hint::black_box;

fn big_state() -> CpuState {
    let mut assignments = Vec::new();
    for i in 0..250u32 {
        assignments.push(Assignment {
            key: EntryKey::Container {
                pod_uid: format!("{:08x}-1f2e-4d3c-8b7a-{:012x}", i / 2, i / 2),
                container: format!("spark-kubernetes-executor-{}", i % 2),
            },
            cpus: CpuSet::from_ids([6 + 2 * i, 7 + 2 * i]),
        });
    }
    CpuState {
        policy_name: "static".into(),
        default_cpus: CpuSet::parse("0-5").unwrap_or_default(),
        assignments,
        pod_assignments: vec![],
    }
}

fn uid(i: u32) -> String {
    format!("{:08x}-1f2e-4d3c-8b7a-{:012x}", i / 2, i / 2)
}

/// memory_manager_state of the node, signed.
fn memory_json() -> String {
    let gib: u64 = 1 << 30;
    let mut entries = serde_json::Map::new();
    for i in 0..250u32 {
        let pod = entries.entry(uid(i)).or_insert_with(|| serde_json::json!({}));
        pod[format!("spark-kubernetes-executor-{}", i % 2)] =
            serde_json::json!([{"numaAffinity": [i % 2], "type": "memory", "size": 4 * gib}]);
    }
    let node = |id: u32| {
        serde_json::json!({"numberOfAssignments": 125, "memoryMap": {"memory": {"total": 512 * gib,
            "systemReserved": gib, "allocatable": 511 * gib, "reserved": 500 * gib, "free": 11 * gib}}, "cells": [id]})
    };
    let mut v = serde_json::json!({"policyName": "Static", "machineState": {"0": node(0), "1": node(1)},
        "entries": entries, "checksum": 0});
    let sum = MemoryCheckpoint::parse(v.to_string().as_bytes())
        .ok()
        .and_then(|cp| checksum(&cp, MemoryCandidate::V1))
        .unwrap_or_default();
    v["checksum"] = serde_json::json!(sum);
    v.to_string()
}

/// kubelet_internal_checkpoint of the node, signed.
fn devices_json() -> String {
    let entries: Vec<serde_json::Value> = (0..250u32)
        .map(|i| {
            serde_json::json!({"PodUID": uid(i), "ContainerName": format!("spark-kubernetes-executor-{}", i % 2),
                "ResourceName": "nvidia.com/gpu", "DeviceIDs": {(i % 2).to_string(): [format!("GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd")]},
                "AllocResp": "Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3JhCh8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3JhCh8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRl"})
        })
        .collect();
    let mut v = serde_json::json!({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 0});
    if let Some(Verification::Mismatch { computed, .. }) = DeviceCheckpoint::parse(v.to_string().as_bytes())
        .ok()
        .map(|cp| cp.verify())
    {
        v["Checksum"] = serde_json::json!(computed[0].1);
    }
    v.to_string()
}

/// dra_manager_state (1.31+) of the node.
fn dra_json() -> String {
    let entries: Vec<serde_json::Value> = (0..125u32)
        .map(|i| {
            let devices: Vec<serde_json::Value> = (0..2)
                .map(|d| {
                    serde_json::json!({"PoolName": "worker-1", "DeviceName": format!("gpu-{}", 2 * i + d),
                    "RequestNames": ["gpu"], "CDIDeviceIDs": [format!("k8s.gpu.nvidia.com/gpu=gpu-{}", 2 * i + d)]})
                })
                .collect();
            serde_json::json!({"ClaimUID": uid(2 * i), "ClaimName": format!("exec-{i}-gpu"), "Namespace": "spark",
                "PodUIDs": {uid(2 * i): {}}, "DriverState": {"gpu.nvidia.com": {"Devices": devices}}})
        })
        .collect();
    let data = serde_json::json!({"kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1",
        "Entries": entries})
    .to_string();
    serde_json::json!({"Data": data, "Checksum": crc32_ieee(data.as_bytes())}).to_string()
}

fn bench(c: &mut Criterion) {
    let json = big_state().to_checkpoint_json();
    c.bench_function("checkpoint_parse_verify_state_256cpu_250ctr", |b| {
        b.iter(|| {
            let cp = Checkpoint::parse(black_box(json.as_bytes())).ok();
            let verified = cp.as_ref().map(|cp| cp.verify().accepted());
            let state = cp.and_then(|cp| cp.state().ok());
            black_box((verified, state))
        })
    });
    let state = big_state();
    c.bench_function("checkpoint_write_256cpu_250ctr", |b| {
        b.iter(|| black_box(state.to_checkpoint_json()))
    });
    let memory = memory_json();
    let (devices, dra) = (devices_json(), dra_json());
    // What is measured is the accepted path: every file verifies.
    assert!(MemoryCheckpoint::parse(memory.as_bytes()).is_ok_and(|cp| cp.verify().accepted()));
    assert!(DeviceCheckpoint::parse(devices.as_bytes()).is_ok_and(|cp| cp.verify().accepted()));
    assert!(DraCheckpoint::parse(dra.as_bytes()).is_ok_and(|cp| cp.verify().accepted()));
    c.bench_function("memory_manager_state_parse_verify_state_250ctr", |b| {
        b.iter(|| {
            let cp = MemoryCheckpoint::parse(black_box(memory.as_bytes())).ok();
            let verified = cp.as_ref().map(|cp| cp.verify().accepted());
            black_box((verified, cp.and_then(|cp| cp.state().ok())))
        })
    });
    c.bench_function("device_checkpoint_parse_verify_state_250ctr", |b| {
        b.iter(|| {
            let cp = DeviceCheckpoint::parse(black_box(devices.as_bytes())).ok();
            let verified = cp.as_ref().map(|cp| cp.verify().accepted());
            black_box((verified, cp.and_then(|cp| cp.state().ok())))
        })
    });
    c.bench_function("dra_manager_state_parse_verify_state_125claims", |b| {
        b.iter(|| {
            let cp = DraCheckpoint::parse(black_box(dra.as_bytes())).ok();
            let verified = cp.as_ref().map(|cp| cp.verify().accepted());
            black_box((verified, cp.and_then(|cp| cp.state().ok())))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
