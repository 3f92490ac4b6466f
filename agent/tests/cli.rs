//! The command line's contracts: exit codes, one-line errors, `checkpoint` and `rules`.
//! (Having this integration test also makes `cargo test` build the `nodemedic` binary that
//! the end-to-end tests in `tests/` run.)

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemedic"))
        .args(args)
        .env_remove("NODE_NAME")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", "/nonexistent/nodemedic-tests/kubeconfig")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn file(dir: &tempfile::TempDir, name: &str, content: &[u8]) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn checkpoint_verify_names_the_layout_and_exits_by_validity() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = file(
        &dir,
        "v2",
        br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":3094260139}"#,
    );
    let (code, out, _) = run(&["checkpoint", "verify", &v2]);
    assert_eq!(code, 0);
    assert!(
        out.ends_with(": valid: checksum matches layout V2 as CPUManagerCheckpoint\n"),
        "{out}"
    );

    let v3 = file(&dir, "v3", br#"{"policyName":"static","defaultCPUSet":"1-2","entries":{"pod1":{"container1":"5-6","container2":"3-4"}},"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":2284712151}"#);
    let (code, out, _) = run(&["checkpoint", "verify", &v3, "--format", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verification"]["type_name"], "CPUManagerCheckpointV3");
    assert_eq!(v["layout"], "V3");

    let bad = file(
        &dir,
        "bad",
        br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":1337}"#,
    );
    let (code, out, _) = run(&["checkpoint", "verify", &bad]);
    assert_eq!(code, 1);
    assert!(
        out.contains(
            "invalid: stored checksum 1337 matches no kubelet layout (computed: V2 as CPUManagerCheckpoint = 3094260139"
        ),
        "{out}"
    );

    let truncated = file(&dir, "trunc", br#"{"policyName":"sta"#);
    let (code, out, _) = run(&["checkpoint", "verify", &truncated]);
    assert_eq!(code, 1);
    assert!(out.contains("invalid: invalid JSON at line 1 column"), "{out}");

    let (code, out, err) = run(&["checkpoint", "verify", "/nonexistent/cpu_manager_state"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(err, "nodemedic: /nonexistent/cpu_manager_state: no such file\n");

    let (code, _, err) = run(&["checkpoint", "verify", dir.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.ends_with("is a directory, not a file\n") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn checkpoint_show_lists_assignments() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = file(&dir, "v1", br#"{"policyName":"static","defaultCPUSet":"7-9","entries":{"containerID1":"4-6","containerID2":"1-3"},"checksum":2026311253}"#);
    let (code, out, _) = run(&["checkpoint", "show", &v1]);
    assert_eq!(code, 0);
    assert!(out.contains("valid: checksum matches layout V1"), "{out}");
    assert!(out.contains("default set: 7-9"));
    assert!(out.contains("containerID1") && out.contains(" 4-6\n"), "{out}");
    let (_, out, _) = run(&["checkpoint", "show", &v1, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["state"]["assignments"][1]["container_id"], "containerID2");
    assert_eq!(v["state"]["assignments"][1]["cpus"], "1-3");
}

#[test]
fn rules_catalogue() {
    let (code, out, _) = run(&["rules", "--format", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "checkpoint-unreadable",
            "checkpoint-invalid-state",
            "stale-cpu-assignment",
            "cross-pod-cpu-overlap",
            "cpuset-drift",
            "kubelet-state-divergence",
            "exclusive-cpu-shortage",
            "stale-memory-assignment",
            "stale-device-assignment",
            "stale-dra-claim",
            "device-admission-failure",
            "orphaned-executor",
            "executor-without-owner",
            "admission-rejection",
            "scheduler-conflict",
            "duplicate-driver",
            "driver-blocked-by-partition",
            "orphaned-local-dir",
            "slow-api",
            "slow-pod-admission",
            "apiserver-unreachable",
            "webhook-blocks-dry-run"
        ]
    );
    assert_eq!(v[2]["docs"], "docs/rules/stale-cpu-assignment.md");
    let (_, text, _) = run(&["rules"]);
    assert!(text.starts_with("checkpoint-unreadable      critical"), "{text}");
}

#[test]
fn bad_flags_and_missing_inputs_exit_2_with_one_line() {
    let (code, _, err) = run(&["scan", "--format", "yaml"]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid value 'yaml'"), "{err}");
    let (code, _, err) = run(&["scan", "--host-root", "/nonexistent-root"]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "nodemedic: /nonexistent-root: host root does not exist or is not a directory\n"
        )
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let (code, _, err) = run(&["scan", "--host-root", root, "--pods", "/nonexistent/pods.json"]);
    assert_eq!(
        (code, err.as_str()),
        (2, "nodemedic: /nonexistent/pods.json: no such file\n")
    );
    let pods = file(&dir, "pods.json", b"{\"kind\":\"List\",\"items\":[");
    let (code, _, err) = run(&["scan", "--host-root", root, "--pods", &pods]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with(&format!("nodemedic: {pods}: invalid JSON at line 1 column")) && err.lines().count() == 1,
        "{err}"
    );
    let (code, _, err) = run(&["scan", "--host-root", root, "--disable-rule", "no-such-rule"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown rule id \"no-such-rule\""), "{err}");
}

#[test]
fn an_empty_host_scans_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(&[
        "scan",
        "--host-root",
        dir.path().to_str().unwrap(),
        "--node",
        "n1",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["node"], "n1");
    assert_eq!(v["sources"]["checkpoint"], "missing");
    assert_eq!(v["sources"]["cgroups"], "missing");
    assert_eq!(v["findings"], serde_json::json!([]));
    // No --pods, no --offline: the API was tried, could not be used, and the report says so.
    assert_eq!(v["sources"]["pods"], "cgroups");
    let note = v["notes"][0].as_str().unwrap();
    assert!(
        note.starts_with("Kubernetes API not used (") && note.ends_with("): liveness from cgroups"),
        "{note}"
    );
    let (_, out, _) = run(&[
        "scan",
        "--host-root",
        dir.path().to_str().unwrap(),
        "--node",
        "n1",
        "--offline",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["notes"], serde_json::json!([]));
}
