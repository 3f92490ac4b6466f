//! The kubelet's configuration as the real binary finds it, and one set of rule settings for
//! `scan` and `repair cpu-state`.
//!
//! - With the kubelet stopped (the moment before the restart that will refuse the checkpoint),
//!   its configuration is found through its systemd unit: kubeadm's drop-in names a file
//!   outside the kubelet directory, and both `scan` and `repair cpu-state` judge the
//!   checkpoint against the reserved CPUs it sets.
//! - A configured `reconcile_grace_seconds` (the configuration file both commands read, or
//!   `--rule-setting`) decides what `scan` reports as stale, and `repair cpu-state` plans to
//!   free exactly those entries.

use std::collections::BTreeSet;
use std::path::Path;

use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime, pod_uid};
use serde_json::Value;

const NODE: &str = "worker-1";
const DROP_IN: &str = "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf";

/// Writes `node` under a new root with no kubelet process (the fixture's kubelet is a file).
fn stopped(node: &Node) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    node.write(dir.path()).unwrap();
    std::fs::remove_dir_all(dir.path().join("proc/1000")).unwrap();
    dir
}

fn put(root: &Path, host_path: &str, content: &str) {
    let local = root.join(host_path.trim_start_matches('/'));
    std::fs::create_dir_all(local.parent().unwrap()).unwrap();
    std::fs::write(local, content).unwrap();
}

fn run(args: &[&str]) -> (i32, String, String) {
    let r = nodemedic_tests::nodemedic(args);
    (r.code, r.stdout, r.stderr)
}

fn json(stdout: &str, stderr: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\nstderr: {stderr}"))
}

/// The case: the kubelet is stopped; kubeadm's drop-in names
/// `/etc/kubernetes/kubelet-config.yaml` (reserved CPUs 0 and 4); the checkpoint gives CPUs
/// 0-1 to the container of a pod that is gone. A kubelet started now refuses the file. Before,
/// the configuration was looked for at `/var/lib/kubelet/config.yaml` only: `kubelet_config
/// missing`, no `checkpoint-invalid-state`, and the repair checked its result against no
/// reserved CPUs.
#[test]
fn a_stopped_kubelets_unit_names_its_config_and_the_refusal_is_predicted() {
    let mut node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .cpus(1, 4, 2)
        .pod(Pod::driver("etl", 2).exclusive("2,6"))
        .pod(Pod::executor("etl", 1).exclusive("0-1").gone());
    node.kubelet_config_path = "/etc/kubernetes/kubelet-config.yaml".into();
    let dir = stopped(&node);
    let root = dir.path();
    assert!(!root.join("var/lib/kubelet/config.yaml").exists());
    put(
        root,
        "/lib/systemd/system/kubelet.service",
        "[Unit]\nDescription=kubelet: The Kubernetes Node Agent\n\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n",
    );
    put(
        root,
        DROP_IN,
        "[Service]\n\
         Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"\n\
         Environment=\"KUBELET_CONFIG_ARGS=--config=/etc/kubernetes/kubelet-config.yaml\"\n\
         EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n\
         EnvironmentFile=-/etc/default/kubelet\n\
         ExecStart=\n\
         ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n",
    );
    put(
        root,
        "/var/lib/kubelet/kubeadm-flags.env",
        "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock\"\n",
    );
    let root_s = root.to_str().unwrap();
    let pods = format!("{root_s}/pods.json");
    let common = ["--host-root", root_s, "--node", NODE, "--pods", pods.as_str()];

    // scan: the configuration, where it came from, and the prediction.
    let (code, out, err) = run(&[&["scan"][..], &common, &["--format", "json"]].concat());
    assert_ne!(code, 2, "{err}");
    let report = json(&out, &err);
    assert_eq!(report["sources"]["kubelet_config"], "ok", "{out}");
    let invalid: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "checkpoint-invalid-state")
        .collect();
    assert_eq!(invalid.len(), 1, "{out}");
    let evidence = &invalid[0]["evidence"];
    assert_eq!(evidence["problem"], "reserved-not-in-default");
    assert_eq!(evidence["reserved_cpus"], "0,4");
    assert_eq!(evidence["default_cpus"], "3-5,7");
    let (_, text, err) = run(&[&["scan"][..], &common].concat());
    assert!(
        text.contains(&format!(
            "kubelet_config  ok (/etc/kubernetes/kubelet-config.yaml from the systemd drop-in {DROP_IN}, policy static)"
        )),
        "{text}\n{err}"
    );

    // repair cpu-state: validated against the real reserved set, and it fixes the file.
    let (code, out, err) = run(&[&["repair", "cpu-state"][..], &common, &["--format", "json"]].concat());
    assert_ne!(code, 2, "{err}");
    let plan = json(&out, &err);
    assert_eq!(plan["checks"]["reserved_cpus"], "0,4", "{out}");
    assert_eq!(plan["checks"]["problems"], Value::Array(vec![]), "{out}");
    assert_eq!(plan["verdict"], "ready", "{out}");
    assert_eq!(plan["fixes_current_file"], true, "{out}");
    assert_eq!(plan["new_default"], "0-1,3-5,7", "{out}");
    assert_eq!(
        plan["current_file_problems"],
        serde_json::json!(["not all reserved cpus: \"0,4\" are present in defaultCpuSet: \"3-5,7\""]),
        "{out}"
    );
    assert_eq!(removed_pods(&plan), BTreeSet::from([pod_uid("etl-exec-1")]));
}

/// Without any configuration of the kubelet (no process, no unit, no file where the
/// distributions put one), the repair refuses to check its result against "no reserved
/// CPUs", and says why.
#[test]
fn the_repair_refuses_to_validate_without_the_kubelets_configuration() {
    let mut node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .cpus(1, 4, 2)
        .pod(Pod::executor("etl", 1).exclusive("2-3").gone());
    node.kubelet_config_path = "/etc/kubernetes/kubelet-config.yaml".into();
    let dir = stopped(&node);
    std::fs::remove_file(dir.path().join("etc/kubernetes/kubelet-config.yaml")).unwrap();
    let root_s = dir.path().to_str().unwrap();
    let pods = format!("{root_s}/pods.json");
    let (code, out, err) = run(&[
        "repair",
        "cpu-state",
        "--host-root",
        root_s,
        "--node",
        NODE,
        "--pods",
        &pods,
        "--format",
        "json",
    ]);
    assert_ne!(code, 2, "{err}");
    let plan = json(&out, &err);
    assert_eq!(plan["verdict"], "refused", "{out}");
    assert_eq!(
        plan["reasons"],
        serde_json::json!([
            "the kubelet's configuration was not found (nor at /var/lib/kubelet/config.yaml), so its reserved CPUs \
             and strict-cpu-reservation are unknown: cannot check the result against the kubelet's start-up checks"
        ]),
        "{out}"
    );
    assert_eq!(plan["checks"]["reserved_cpus"], Value::Null, "{out}");
    assert_eq!(removed_pods(&plan), BTreeSet::from([pod_uid("etl-exec-1")]));
}

/// The pod UIDs a plan removes entries of.
fn removed_pods(plan: &Value) -> BTreeSet<String> {
    plan["removals"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|r| r["pod_uid"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The pod UIDs `scan` reports `stale-cpu-assignment` for.
fn stale_in_scan(report: &Value) -> BTreeSet<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "stale-cpu-assignment")
        .map(|f| f["evidence"]["pod_uid"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `reconcile_grace_seconds` from the configuration file (as the daemon reads it) and from
/// `--rule-setting`: a batch pod finished two minutes ago is stale under a 30 s grace and not
/// yet under a 600 s one; a gone executor is stale under both. `repair cpu-state` plans to
/// free exactly what `scan` reports in each case. Before, the repair judged with the default
/// grace whatever was configured (and had neither flag).
#[test]
fn repair_cpu_state_frees_exactly_what_scan_reports_under_the_configured_grace() {
    let node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .cpus(1, 4, 2)
        .pod(Pod::driver("etl", 2).exclusive("1,5"))
        .pod(Pod::executor("etl", 1).exclusive("2-3").gone())
        .pod(Pod::new("batch", 1).exclusive("6").finished("Succeeded"));
    let dir = tempfile::tempdir().unwrap();
    node.write(dir.path()).unwrap();
    let root = dir.path();
    // The batch pod finished two minutes ago.
    let pods_path = root.join("pods.json");
    let mut pods: Value = serde_json::from_slice(&std::fs::read(&pods_path).unwrap()).unwrap();
    let finished = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(120);
    let batch = pod_uid("batch");
    for p in pods["items"].as_array_mut().unwrap() {
        if p["metadata"]["uid"] == batch.as_str() {
            for s in p["status"]["containerStatuses"].as_array_mut().unwrap() {
                s["state"]["terminated"]["finishedAt"] =
                    Value::String(finished.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
            }
        }
    }
    std::fs::write(&pods_path, serde_json::to_vec(&pods).unwrap()).unwrap();
    let root_s = root.to_str().unwrap();
    let pods_s = pods_path.to_str().unwrap();
    let exec = pod_uid("etl-exec-1");

    for (grace, want) in [
        (600, BTreeSet::from([exec.clone()])),
        (30, BTreeSet::from([exec.clone(), batch.clone()])),
    ] {
        let config = root.join(format!("config-{grace}.yaml"));
        std::fs::write(&config, format!("rules:\n  reconcile_grace_seconds: {grace}\n")).unwrap();
        let config_s = config.to_str().unwrap();
        let setting = format!("reconcile_grace_seconds={grace}");
        for how in [["--config", config_s], ["--rule-setting", setting.as_str()]] {
            let common = [
                "--host-root",
                root_s,
                "--node",
                NODE,
                "--pods",
                pods_s,
                "--format",
                "json",
            ];
            let (code, out, err) = run(&[&["scan"][..], &common, &how].concat());
            assert_ne!(code, 2, "{err}");
            let scanned = stale_in_scan(&json(&out, &err));
            assert_eq!(scanned, want, "scan, grace {grace} by {}: {out}", how[0]);
            let (code, out, err) = run(&[&["repair", "cpu-state"][..], &common, &how].concat());
            assert_ne!(code, 2, "{err}");
            let plan = json(&out, &err);
            assert_eq!(
                removed_pods(&plan),
                scanned,
                "repair, grace {grace} by {}: {out}",
                how[0]
            );
        }
    }
    // A configuration file with a bad key stops both commands, naming it.
    let bad = root.join("bad.yaml");
    std::fs::write(&bad, "rules:\n  reconcile_grace_seconds: -1\n").unwrap();
    for cmd in [&["scan"][..], &["repair", "cpu-state"][..]] {
        let (code, _, err) = run(&[
            cmd,
            &[
                "--host-root",
                root_s,
                "--pods",
                pods_s,
                "--config",
                bad.to_str().unwrap(),
            ],
        ]
        .concat());
        assert_eq!(code, 2, "{cmd:?}: {err}");
        assert!(err.contains("reconcile_grace_seconds"), "{cmd:?}: {err}");
    }
}
