//! The kubelet's other resource managers, end to end: the real `nodemedic scan` and `nodemedic
//! run` on fixture hosts whose `memory_manager_state`, `device-plugins/kubelet_internal_checkpoint`,
//! `dra_manager_state` and NVIDIA GPU driver `checkpoint.json` hold entries of pods that are
//! gone (files written as the kubelet writes them, checksums included: `nodemedic_tests::checkpoints`),
//! tampered copies of them, and the fake PodResources server reporting memory and devices that
//! disagree with the files.

use std::path::Path;
use std::time::Duration;

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::checkpoints::{
    DeviceEntry, DraClaim, DriverClaim, GIB, MemoryEntry, device_checkpoint, dra_manager_state, memory_manager_state,
    nvidia_checkpoint,
};
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime, pod_uid};
use nodemedic_tests::podresources::{FakeKubelet, FakePod, Scenario};
use nodemedic_tests::{findings_of as findings, nodemedic};
use serde_json::{Value, json};

const MEMORY: &str = "/var/lib/kubelet/memory_manager_state";
const DEVICES: &str = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint";
const DRA: &str = "/var/lib/kubelet/dra_manager_state";
const NVIDIA: &str = "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json";
const GPU_REFUSAL: &str = "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. \
                           Requested: 1, Available: 0, which is unexpected";

fn uid(name: &str) -> String {
    pod_uid(name)
}

/// exec-1 runs and holds 8 GiB on NUMA node 0, GPU-a and claim c-live; exec-3 is gone and its
/// entries still hold 16 GiB on NUMA node 1, GPU-b and claim c-gone (gpu-1), which the NVIDIA
/// driver also keeps, with c-forgotten, a claim the kubelet no longer holds. exec-9 was refused
/// a GPU.
fn node(name: &str) -> Node {
    let (live, gone) = (uid("exec-1"), uid("exec-3"));
    let claim = |uid: &str, name: &str, pod: &str, gpu: &str| DraClaim {
        uid: uid.into(),
        namespace: "spark".into(),
        name: name.into(),
        pods: vec![pod.to_string()],
        devices: vec![("gpu.nvidia.com".into(), name_pool(), gpu.into())],
    };
    let driver_claim = |uid: &str, name: &str, pods: &[&str], gpu: &str| DriverClaim {
        uid: uid.into(),
        namespace: "spark".into(),
        name: name.into(),
        state: "PrepareCompleted".into(),
        pods: pods.iter().map(|p| p.to_string()).collect(),
        gpus: vec![gpu.into()],
        pool: name_pool(),
    };
    Node::new(name, Layout::V1Cgroupfs, Runtime::Containerd)
        .pod(Pod::new("exec-1", 2).exclusive("1-2"))
        .pod(Pod::new("exec-3", 2).exclusive("3,7").gone())
        .pod(Pod::new("exec-9", 1).rejected("UnexpectedAdmissionError", GPU_REFUSAL))
        .file(
            MEMORY,
            memory_manager_state(
                2,
                64 * GIB,
                &[
                    MemoryEntry::new(&live, "app", 0, 8 * GIB),
                    MemoryEntry::new(&gone, "app", 1, 16 * GIB),
                ],
            ),
        )
        .file(
            DEVICES,
            device_checkpoint(
                &[
                    DeviceEntry::new(&live, "app", "nvidia.com/gpu", &[("GPU-a", 0)]),
                    DeviceEntry::new(&gone, "app", "nvidia.com/gpu", &[("GPU-b", 1)]),
                ],
                &[("nvidia.com/gpu", &["GPU-a", "GPU-b"])],
            ),
        )
        .file(
            DRA,
            dra_manager_state(&[
                claim("c-live", "exec-1-gpu", &live, "gpu-0"),
                claim("c-gone", "exec-3-gpu", &gone, "gpu-1"),
            ]),
        )
        .file(
            NVIDIA,
            nvidia_checkpoint(&[
                driver_claim("c-live", "exec-1-gpu", &[&live], "gpu-0"),
                driver_claim("c-gone", "exec-3-gpu", &[&gone], "gpu-1"),
                driver_claim("c-forgotten", "old-gpu", &[], "gpu-2"),
            ]),
        )
}

fn name_pool() -> String {
    "worker-1".to_string()
}

/// `nodemedic scan` of the tree at `root` (with its pods file unless `offline`), JSON.
fn scan(root: &Path, offline: bool, extra: &[&str]) -> Value {
    serde_json::from_str(&scan_text(root, offline, extra)).unwrap()
}

/// [`scan`]'s output as printed.
fn scan_text(root: &Path, offline: bool, extra: &[&str]) -> String {
    let pods = root.join("pods.json");
    let mut args = vec![
        "scan",
        "--host-root",
        root.to_str().unwrap(),
        "--node",
        "worker-1",
        "--format",
        "json",
        "--dra-driver-checkpoint",
        "nvidia-gpu=/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json",
    ];
    if offline {
        args.push("--offline");
    } else {
        args.extend(["--pods", pods.to_str().unwrap()]);
    }
    args.extend(extra);
    let run = nodemedic(&args);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(run.code == 0 || run.code == 1, "exit {}: {}", run.code, run.stderr);
    serde_json::from_str::<Value>(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    run.stdout
}

fn evidence<'a>(report: &'a Value, rule: &str, key: &str) -> Vec<&'a Value> {
    findings(report, rule).iter().map(|f| &f["evidence"][key]).collect()
}

fn written(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    node(name).write(dir.path()).unwrap();
    dir
}

#[test]
fn stale_memory_device_and_dra_entries_of_a_gone_pod_are_reported_with_their_evidence() {
    let dir = written("worker-1");
    let text = scan_text(dir.path(), false, &[]);
    // The whole report, as people read it (tests/golden/resource-managers.json).
    nodemedic_tests::assert_golden("resource-managers", &nodemedic_tests::normalize_report(&text));
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["sources"]["manager_files"], "ok", "{report:#}");
    let gone = uid("exec-3");

    let memory = findings(&report, "stale-memory-assignment");
    assert_eq!(memory.len(), 1, "{report:#}");
    assert_eq!(memory[0]["evidence"]["pod_uid"], gone.as_str());
    assert_eq!(memory[0]["evidence"]["bytes"], 16 * GIB);
    assert_eq!(memory[0]["evidence"]["numa_nodes"], json!([1]));
    assert_eq!(memory[0]["evidence"]["path"], MEMORY);
    assert_eq!(memory[0]["severity"], "warning");

    let devices = findings(&report, "stale-device-assignment");
    assert_eq!(devices.len(), 1, "{report:#}");
    assert_eq!(devices[0]["evidence"]["device_ids"], json!(["GPU-b"]));
    assert_eq!(devices[0]["evidence"]["resource"], "nvidia.com/gpu");
    assert_eq!(devices[0]["evidence"]["pod_uid"], gone.as_str());

    let mut claims: Vec<(String, String)> = findings(&report, "stale-dra-claim")
        .iter()
        .map(|f| {
            (
                f["evidence"]["source"].as_str().unwrap().to_string(),
                f["evidence"]["claim_uid"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    claims.sort();
    assert_eq!(
        claims,
        [
            ("kubelet".to_string(), "c-gone".to_string()),
            ("nvidia-gpu".to_string(), "c-forgotten".to_string()),
            ("nvidia-gpu".to_string(), "c-gone".to_string()),
        ],
        "{report:#}"
    );
    let kubelet_claim = findings(&report, "stale-dra-claim")
        .into_iter()
        .find(|f| f["evidence"]["source"] == "kubelet")
        .unwrap();
    assert_eq!(
        kubelet_claim["evidence"]["devices"],
        json!(["gpu.nvidia.com/worker-1/gpu-1"])
    );
    assert_eq!(kubelet_claim["subject"]["name"], "exec-3-gpu");

    // The GPU refusal is tied to the stale device entry of its resource.
    let refused = findings(&report, "device-admission-failure");
    assert_eq!(refused.len(), 1, "{report:#}");
    assert_eq!(refused[0]["severity"], "critical");
    assert_eq!(refused[0]["evidence"]["stale_device_ids"], json!(["GPU-b"]));
    assert_eq!(refused[0]["evidence"]["refused_pods"], json!(["default/exec-9"]));

    // The live pod's entries are nobody's finding.
    let live = uid("exec-1");
    for rule in ["stale-memory-assignment", "stale-device-assignment"] {
        assert!(!evidence(&report, rule, "pod_uid").contains(&&json!(live)), "{rule}");
    }
}

#[test]
fn without_a_pod_list_the_cgroups_decide_and_the_judgement_is_the_same() {
    let dir = written("worker-1");
    let report = scan(dir.path(), true, &[]);
    assert_eq!(report["sources"]["pods"], "cgroups");
    assert_eq!(
        evidence(&report, "stale-memory-assignment", "pod_uid"),
        [&json!(uid("exec-3"))]
    );
    assert_eq!(
        evidence(&report, "stale-device-assignment", "device_ids"),
        [&json!(["GPU-b"])]
    );
    let sources: Vec<&Value> = evidence(&report, "stale-dra-claim", "source");
    assert_eq!(sources.len(), 3, "{report:#}");
}

/// A memory checkpoint whose last NUMA node is `null`, signed as the kubelet signs it: go-spew
/// prints the field after that map without its type, so the checksum is 585895370, not the
/// 2385965968 a typed `Entries` would give. `checkpoint verify` calls it valid and the scan
/// does not call it unreadable.
#[test]
fn a_null_numa_node_last_in_the_memory_file_verifies_as_the_kubelet_signs_it() {
    let dir = written("worker-1");
    let at = dir.path().join(MEMORY.trim_start_matches('/'));
    std::fs::write(
        &at,
        r#"{"policyName":"None","machineState":{"0":{},"1":null},"checksum":585895370}"#,
    )
    .unwrap();
    let verify = nodemedic(&["checkpoint", "verify", at.to_str().unwrap()]);
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
    assert!(
        verify
            .stdout
            .contains("(memory manager checkpoint): valid: checksum matches layout V1 as MemoryManagerCheckpoint"),
        "{}",
        verify.stdout
    );
    let report = scan(dir.path(), false, &[]);
    assert!(
        findings(&report, "checkpoint-unreadable")
            .iter()
            .all(|f| f["evidence"]["manager"] != "memory manager"),
        "{report:#}"
    );
}

#[test]
fn tampered_files_are_named_and_the_scan_goes_on() {
    let dir = written("worker-1");
    let at = |p: &str| dir.path().join(p.trim_start_matches('/'));
    // One digit of the memory file's checksum, the device file cut in half, the driver's file
    // not JSON at all.
    let mem = std::fs::read_to_string(at(MEMORY)).unwrap();
    let i = mem.rfind("\"checksum\":").unwrap() + 11;
    let digit = if mem.as_bytes()[i] == b'1' { "2" } else { "1" };
    std::fs::write(at(MEMORY), format!("{}{digit}{}", &mem[..i], &mem[i + 1..])).unwrap();
    let dev = std::fs::read(at(DEVICES)).unwrap();
    std::fs::write(at(DEVICES), &dev[..dev.len() / 2]).unwrap();
    std::fs::write(at(NVIDIA), b"{\"v2\": [").unwrap();

    let report = scan(dir.path(), false, &[]);
    let unreadable = findings(&report, "checkpoint-unreadable");
    let got: Vec<(&str, &str)> = unreadable
        .iter()
        .map(|f| {
            (
                f["evidence"]["manager"].as_str().unwrap(),
                f["severity"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [("memory manager", "critical"), ("device manager", "warning")],
        "{report:#}"
    );
    let memory = unreadable
        .iter()
        .find(|f| f["evidence"]["manager"] == "memory manager")
        .unwrap();
    assert_eq!(memory["evidence"]["error"], "checkpoint is corrupted");
    assert!(
        memory["summary"]
            .as_str()
            .unwrap()
            .contains("the kubelet will refuse to restart")
    );
    let devices = unreadable
        .iter()
        .find(|f| f["evidence"]["manager"] == "device manager")
        .unwrap();
    assert!(
        devices["evidence"]["error"]
            .as_str()
            .unwrap()
            .starts_with("invalid JSON at line 1"),
        "{devices:#}"
    );
    // The driver's file is a source error that names it; its claims are not judged.
    let status = report["sources"]["manager_files"].as_str().unwrap();
    assert!(
        status.starts_with(&format!("error: {NVIDIA}: invalid JSON")),
        "{status}"
    );
    // What is still readable is still judged: the kubelet's DRA file, and the CPU checkpoint.
    assert_eq!(evidence(&report, "stale-dra-claim", "source"), [&json!("kubelet")]);
    assert!(findings(&report, "stale-memory-assignment").is_empty());
    assert!(findings(&report, "stale-device-assignment").is_empty());
    assert_eq!(
        evidence(&report, "stale-cpu-assignment", "pod_uid"),
        [&json!(uid("exec-3"))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_memory_and_devices_against_its_files() {
    let dir = written("worker-1");
    let socket = dir.path().join("var/lib/kubelet/pod-resources/kubelet.sock");
    // The kubelet agrees with the files about exec-1...
    let agreeing = Scenario::default()
        .pod(
            FakePod::new("default", "exec-1")
                .container("app", &[1, 2])
                .memory("app", "memory", 8 * GIB, &[0])
                .devices("app", "nvidia.com/gpu", &["GPU-a"], &[0]),
        )
        .allocatable(&[1, 2, 3, 5, 6, 7]);
    let fake = FakeKubelet::start(socket, agreeing).await.unwrap();
    let root = dir.path().to_path_buf();
    let report = tokio::task::spawn_blocking(move || scan(&root, false, &[]))
        .await
        .unwrap();
    assert_eq!(report["sources"]["podresources"], "ok", "{report:#}");
    assert!(findings(&report, "kubelet-state-divergence").is_empty(), "{report:#}");

    // ...then holds its memory on NUMA node 1 and GPU-z instead: the files were changed while
    // it runs.
    fake.set_pods(vec![
        FakePod::new("default", "exec-1")
            .container("app", &[1, 2])
            .memory("app", "memory", 8 * GIB, &[1])
            .devices("app", "nvidia.com/gpu", &["GPU-z"], &[1]),
    ]);
    let root = dir.path().to_path_buf();
    let report = tokio::task::spawn_blocking(move || scan(&root, false, &[]))
        .await
        .unwrap();
    let divergence = findings(&report, "kubelet-state-divergence");
    let mut kinds: Vec<&str> = divergence
        .iter()
        .map(|f| f["evidence"]["resource_kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["devices", "memory"], "{report:#}");
    let of = |kind: &str| {
        divergence
            .iter()
            .find(|f| f["evidence"]["resource_kind"] == kind)
            .unwrap()
    };
    let (memory, devices) = (of("memory"), of("devices"));
    assert_eq!(memory["evidence"]["kubelet_memory"][0]["numa_nodes"], json!([1]));
    assert_eq!(memory["evidence"]["checkpoint_memory"][0]["numa_nodes"], json!([0]));
    assert_eq!(devices["evidence"]["kubelet_device_ids"], json!(["GPU-z"]));
    assert_eq!(devices["evidence"]["checkpoint_device_ids"], json!(["GPU-a"]));
    assert_eq!(devices["evidence"]["pod_uid"], uid("exec-1").as_str());
    // And the device entry of the gone pod is one only the file holds now: an info finding.
    let stale = findings(&report, "stale-device-assignment");
    assert_eq!(stale[0]["evidence"]["held_by_kubelet"], 0);
    assert_eq!(stale[0]["severity"], "info");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_exports_the_managers_gauges_and_follows_a_rewritten_file() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    let host = node(NODE);
    for pod in host.pods_json()["items"].as_array().unwrap() {
        store.create(pod.clone());
    }
    // exec-3's claim object is still there (a claim made by hand, not from a template); the
    // forgotten claim's is gone. The double serves resource.k8s.io/v1beta2, as a 1.33 server
    // does: the agent's GET of v1 finds no such path and falls back.
    store.create(json!({
        "apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim",
        "metadata": {"name": "exec-3-gpu", "namespace": "spark", "uid": "c-gone"},
    }));
    // Full host scans only every 10 minutes: a rewritten file is seen through inotify.
    let agent = Agent::start(
        &api,
        Some(&host),
        &[
            "--full-scan-interval-seconds",
            "600",
            "--dra-driver-checkpoint",
            "nvidia-gpu=/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json",
        ],
    );
    let m = |s: &str| agent.metric(s);
    wait_for("the managers' gauges", Duration::from_secs(60), &agent, || {
        m("nodemedic_rule_firing{rule=\"stale-memory-assignment\"}") == Some(1.0)
            && m("nodemedic_rule_firing{rule=\"stale-dra-claim\"}") == Some(1.0)
    })
    .await;
    assert_eq!(
        m("nodemedic_memory_manager_stale_bytes{numa_nodes=\"1\",resource=\"memory\"}"),
        Some((16 * GIB) as f64)
    );
    assert_eq!(
        m("nodemedic_memory_manager_bytes{numa_node=\"0\",resource=\"memory\",state=\"reserved\"}"),
        Some((8 * GIB) as f64)
    );
    assert_eq!(
        m("nodemedic_devices_checkpointed{resource=\"nvidia.com/gpu\",state=\"registered\"}"),
        Some(2.0)
    );
    assert_eq!(
        m("nodemedic_devices_checkpointed{resource=\"nvidia.com/gpu\",state=\"allocated\"}"),
        Some(2.0)
    );
    assert_eq!(
        m("nodemedic_devices_checkpointed{resource=\"nvidia.com/gpu\",state=\"stale\"}"),
        Some(1.0)
    );
    assert_eq!(
        m("nodemedic_dra_prepared_claims{source=\"kubelet\",state=\"stale\"}"),
        Some(1.0)
    );
    assert_eq!(
        m("nodemedic_dra_prepared_claims{source=\"kubelet\",state=\"live\"}"),
        Some(1.0)
    );
    assert_eq!(
        m("nodemedic_dra_prepared_claims{source=\"nvidia-gpu\",state=\"stale\"}"),
        Some(2.0)
    );
    assert_eq!(m("nodemedic_collector_success{collector=\"manager_files\"}"), Some(1.0));

    // The kubelet admits a pod and rewrites its memory file without exec-3's entry (renamed
    // over, as it writes): the stale bytes go within a few judgements, no full scan needed.
    let path = agent.host_root().join(MEMORY.trim_start_matches('/'));
    let tmp = path.with_file_name(".memory_manager_state.tmp");
    let fresh = memory_manager_state(2, 64 * GIB, &[MemoryEntry::new(&uid("exec-1"), "app", 0, 8 * GIB)]);
    std::fs::write(&tmp, fresh).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    wait_for("the rewritten memory file", Duration::from_secs(20), &agent, || {
        m("nodemedic_rule_firing{rule=\"stale-memory-assignment\"}") == Some(0.0)
    })
    .await;
    assert_eq!(
        m("nodemedic_memory_manager_stale_bytes{numa_nodes=\"1\",resource=\"memory\"}"),
        None
    );
    // A claim's Event is about the node (the claim itself may be gone).
    wait_for("the StaleDRAClaim Events", Duration::from_secs(20), &agent, || {
        store.list("events.events.k8s.io").iter().any(|e| {
            e["reason"] == "StaleDRAClaim" && e["regarding"]["kind"] == "Node" && e["regarding"]["name"] == NODE
        })
    })
    .await;
    // The stale claims' ResourceClaims were asked for: resource.k8s.io/v1 first, which this
    // 1.33 server does not serve, then v1beta2, where exec-3's exists and old-gpu's does not.
    let asked = |version: &str, name: &str| -> Vec<u16> {
        let path = format!("/apis/resource.k8s.io/{version}/namespaces/spark/resourceclaims/{name}");
        api.requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path)
            .map(|r| r.status)
            .collect()
    };
    wait_for("the ResourceClaim lookups", Duration::from_secs(20), &agent, || {
        !asked("v1beta2", "exec-3-gpu").is_empty() && !asked("v1beta2", "old-gpu").is_empty()
    })
    .await;
    assert!(
        asked("v1", "exec-3-gpu").iter().all(|s| *s == 404),
        "{:?}",
        asked("v1", "exec-3-gpu")
    );
    assert!(asked("v1beta2", "exec-3-gpu").iter().all(|s| *s == 200));
    assert!(asked("v1beta2", "old-gpu").iter().all(|s| *s == 404));
    // Remembered like node status: not asked again at every judgement.
    assert!(
        asked("v1beta2", "old-gpu").len() <= 2,
        "{:?}",
        asked("v1beta2", "old-gpu")
    );
}
