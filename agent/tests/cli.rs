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
            "half-submitted-driver",
            "orphaned-local-dir",
            "local-storage-eviction-risk",
            "spark-executor-evicted",
            "shuffle-service-missing",
            "slow-api",
            "slow-pod-admission",
            "apiserver-unreachable",
            "webhook-blocks-dry-run"
        ]
    );
    assert_eq!(v[2]["docs"], "docs/rules/stale-cpu-assignment.md");
    assert_eq!(
        v[2]["needs"],
        serde_json::json!(["checkpoint", "one of pods, podresources, cgroups"])
    );
    // From which kubelet version each comparison holds; an API-only rule says why none matters.
    assert_eq!(v[2]["kubelet_versions"]["comparisons"][0]["from"], "1.18 (V2 entries)");
    assert!(v[20]["kubelet_versions"]["do_not_matter"].is_string(), "{}", v[20]);
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
    // A node's root holds at least one of its parts (here /proc).
    std::fs::create_dir(dir.path().join("proc")).unwrap();
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
fn an_empty_host_is_no_node_and_a_bare_one_scans_clean() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let (code, out, err) = run(&["scan", "--host-root", root, "--node", "n1"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        format!(
            "nodemedic: {root}: does not look like a node's root: no /var/lib/kubelet, no /sys/fs/cgroup, no /proc \
             under it (pass the directory that holds them as --host-root)\n"
        )
    );
    // With /proc alone: every other source missing, nothing to judge in the absent files.
    std::fs::create_dir(dir.path().join("proc")).unwrap();
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

/// The other managers' checkpoints, kind by file name (or `--kind`), with upstream vectors: a
/// memory manager file of the kubelet's own tests, a device manager file a kubelet wrote, a DRA
/// file of the 1.31 tests; each valid as written and invalid with one digit of its checksum
/// changed.
#[test]
fn checkpoint_verify_reads_every_managers_file() {
    let dir = tempfile::tempdir().unwrap();
    let memory = r#"{"policyName":"static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},"checksum":4215593881}"#;
    let devices = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3","ContainerName":"check","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"}],"RegisteredDevices":{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}"#;
    let dra = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1597924435}"#;
    for (name, text, sum, kind) in [
        ("memory_manager_state", memory, "4215593881", "memory manager"),
        ("kubelet_internal_checkpoint", devices, "3660592824", "device manager"),
        ("dra_manager_state", dra, "1597924435", "DRA manager"),
    ] {
        let sub = dir.path().join(format!("good-{name}"));
        std::fs::create_dir_all(&sub).unwrap();
        let good = sub.join(name);
        std::fs::write(&good, text).unwrap();
        let (code, out, err) = run(&["checkpoint", "verify", good.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert!(
            out.contains(&format!("({kind} checkpoint): valid: checksum matches layout")),
            "{out}"
        );
        let (code, out, _) = run(&["checkpoint", "show", good.to_str().unwrap(), "--format", "json"]);
        assert_eq!(code, 0);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["valid"].as_bool()),
            (Some(kind), Some(true)),
            "{out}"
        );
        assert!(v["state"].is_object(), "{out}");

        // The same content under another name is read as what --kind says.
        let other = file(&dir, &format!("copy-of-{name}"), text.as_bytes());
        let flag = match name {
            "memory_manager_state" => "memory",
            "kubelet_internal_checkpoint" => "devices",
            _ => "dra",
        };
        let (code, _, _) = run(&["checkpoint", "verify", &other, "--kind", flag]);
        assert_eq!(code, 0, "{name} with --kind {flag}");

        let sub = dir.path().join(format!("bad-{name}"));
        std::fs::create_dir_all(&sub).unwrap();
        let bad = sub.join(name);
        // The first digit, one up (9 down).
        let first = sum.as_bytes()[0];
        let tampered = format!(
            "{}{}",
            if first == b'9' { '8' } else { char::from(first + 1) },
            &sum[1..]
        );
        std::fs::write(&bad, text.replace(sum, &tampered)).unwrap();
        let (code, out, _) = run(&["checkpoint", "verify", bad.to_str().unwrap()]);
        assert_eq!(code, 1, "{name}: {out}");
        assert!(
            out.contains(&format!(
                "invalid: stored checksum {tampered} matches no kubelet layout"
            )),
            "{out}"
        );
    }

    // The NVIDIA driver's file is read, not verified.
    let sub = dir.path().join("gpu.nvidia.com");
    std::fs::create_dir_all(&sub).unwrap();
    let nvidia = sub.join("checkpoint.json");
    std::fs::write(
        &nvidia,
        r#"{"checksum":1,"v2":{"checksum":1,"preparedClaims":{"c-1":{"checkpointState":"PrepareCompleted","name":"gpu","namespace":"spark","status":{"reservedFor":[{"resource":"pods","name":"p","uid":"pod-1"}]},"preparedDevices":[]}}}}"#,
    )
    .unwrap();
    let (code, out, _) = run(&["checkpoint", "show", nvidia.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("read: 1 claim(s) (the driver's checksum is not verified)"),
        "{out}"
    );
    assert!(out.contains("  c-1 spark/gpu PrepareCompleted pods: pod-1"), "{out}");
    std::fs::write(&nvidia, b"{\"v2\": 7}").unwrap();
    let (code, out, _) = run(&["checkpoint", "verify", nvidia.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.contains("invalid: field v2: expected"), "{out}");
}
