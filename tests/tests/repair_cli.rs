//! The repairs through the real binary, on the bundled example node.

use std::path::Path;

use nodemedic_tests::{copy_tree, nodemedic};

#[test]
fn cpu_state_on_the_example_node_plans_refuses_then_frees_only_the_stale_entries() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("worker-stale");
    std::fs::create_dir_all(&root).unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/worker-stale"),
        &root,
    );
    let r = root.to_str().unwrap();
    let pods = root.join("pods.json");
    let p = pods.to_str().unwrap();
    let checkpoint = root.join("var/lib/kubelet/cpu_manager_state");
    let before = std::fs::read(&checkpoint).unwrap();

    // Dry run: the plan, exit 1, nothing written.
    let run = nodemedic(&["repair", "cpu-state", "--host-root", r, "--pods", p]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("6,14") && run.stdout.contains('7'),
        "{}",
        run.stdout
    );
    assert_eq!(std::fs::read(&checkpoint).unwrap(), before);

    // The example's kubelet "runs" (its /proc entry): applying without --restart-kubelet is refused.
    let run = nodemedic(&["repair", "cpu-state", "--host-root", r, "--pods", p, "--apply", "--yes"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        format!("{}{}", run.stdout, run.stderr).contains("kubelet"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(std::fs::read(&checkpoint).unwrap(), before);

    // With the kubelet stopped (its process gone from /proc), the repair applies: only the plan
    // the dry run showed, named by its fingerprint (what `kubectl nodemedic` passes on).
    std::fs::remove_dir_all(root.join("proc/1000")).unwrap();
    let dry = nodemedic(&["repair", "cpu-state", "--host-root", r, "--pods", p]);
    let fingerprint = dry
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Plan fingerprint: "))
        .unwrap_or_else(|| panic!("no fingerprint in the plan:\n{}", dry.stdout))
        .to_string();
    assert_eq!(fingerprint.len(), 16, "{fingerprint}");
    // The JSON plan carries the same.
    let json = nodemedic(&["repair", "cpu-state", "--host-root", r, "--pods", p, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["plan_fingerprint"], fingerprint.as_str());
    // Another plan's fingerprint: nothing written, exit 1, and why.
    let apply_expecting = |print: &str| {
        nodemedic(&[
            "repair",
            "cpu-state",
            "--host-root",
            r,
            "--pods",
            p,
            "--apply",
            "--yes",
            "--expect-plan",
            print,
        ])
    };
    let run = apply_expecting("0000000000000000");
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "the plan changed since it was shown (fingerprint 0000000000000000, now {fingerprint})"
        )),
        "{}",
        run.stdout
    );
    assert_eq!(std::fs::read(&checkpoint).unwrap(), before);
    let run = apply_expecting(&fingerprint);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_ne!(std::fs::read(&checkpoint).unwrap(), before);
    let backups: Vec<_> = std::fs::read_dir(checkpoint.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("cpu_manager_state.nodemedic-backup-")
        })
        .collect();
    assert_eq!(backups.len(), 1);
    assert_eq!(
        std::fs::read(backups[0].path()).unwrap(),
        before,
        "the backup is the original"
    );
    let verify = nodemedic(&["checkpoint", "verify", checkpoint.to_str().unwrap()]);
    assert_eq!(verify.code, 0, "{}", verify.stdout);
    assert!(
        verify.stdout.contains("layout V2 as CPUManagerCheckpoint"),
        "{}",
        verify.stdout
    );

    // The scan agrees: nothing stale, the state is valid; a second repair has nothing to do.
    let scan = nodemedic(&["scan", "--host-root", r, "--pods", p, "--format", "json"]);
    let report: serde_json::Value = serde_json::from_str(&scan.stdout).unwrap();
    let rules: Vec<&str> = nodemedic_tests::finding_rules(&report);
    assert!(
        !rules.contains(&"stale-cpu-assignment") && !rules.contains(&"checkpoint-invalid-state"),
        "{rules:?}"
    );
    let again = nodemedic(&["repair", "cpu-state", "--host-root", r, "--pods", p, "--apply", "--yes"]);
    assert_eq!(again.code, 0, "{}", again.stdout);
    assert!(
        again.stdout.to_lowercase().contains("nothing to do"),
        "{}",
        again.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_cpu_state_repair_is_an_event_on_the_node() {
    let api = nodemedic_tests::apiserver::ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("worker-stale");
    std::fs::create_dir_all(&root).unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/worker-stale"),
        &root,
    );
    std::fs::remove_dir_all(root.join("proc/1000")).unwrap(); // the kubelet is stopped
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc, true).unwrap();
    let (r, p, k) = (
        root.to_str().unwrap().to_string(),
        root.join("pods.json").to_str().unwrap().to_string(),
        kc.to_str().unwrap().to_string(),
    );
    let run = tokio::task::spawn_blocking(move || {
        nodemedic(&[
            "repair",
            "cpu-state",
            "--host-root",
            &r,
            "--pods",
            &p,
            "--kubeconfig",
            &k,
            "--apply",
            "--yes",
        ])
    })
    .await
    .unwrap();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let events: Vec<serde_json::Value> = api
        .store()
        .list("events.events.k8s.io")
        .into_iter()
        .filter(|e| e["reason"] == "CPUManagerStateRepaired")
        .collect();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["regarding"]["kind"], "Node");
    assert_eq!(events[0]["regarding"]["name"], "worker-stale");
    assert!(
        events[0]["note"].as_str().unwrap().contains("stale entr"),
        "{}",
        events[0]["note"]
    );
}

/// A `--kubeconfig` the user named that is missing, garbage, or whose API server refuses the
/// pod list stops `repair cpu-state` and the pod repairs as it stops `scan`: exit 2, one line
/// on stderr naming the file and the reason, nothing planned. (Before, `repair cpu-state` fell
/// back to the cgroups and planned from them, and the pod repairs named only the request.)
#[test]
fn an_explicit_kubeconfig_that_cannot_be_used_stops_the_repairs() {
    use nodemedic_tests::hosttree::{Layout, Runtime};
    use nodemedic_tests::scenarios::spark_node;

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    spark_node("worker-3", Layout::V1Cgroupfs, Runtime::Containerd)
        .write(&root)
        .unwrap();
    let checkpoint = root.join("var/lib/kubelet/cpu_manager_state");
    let before = std::fs::read(&checkpoint).unwrap();
    let root = root.to_str().unwrap();
    for (file, reason) in nodemedic_tests::unusable_kubeconfigs(dir.path(), "worker-3") {
        let (file, reason) = (file.as_str(), reason.as_str());
        let common = ["--node", "worker-3", "--kubeconfig", file];
        for command in [
            [&["repair", "cpu-state", "--host-root", root][..], &common[..]].concat(),
            [
                &["repair", "cpu-state", "--host-root", root, "--apply", "--yes"][..],
                &common[..],
            ]
            .concat(),
            [&["repair", "orphans"][..], &common[..]].concat(),
            [&["repair", "failed-pods"][..], &common[..]].concat(),
        ] {
            let run = nodemedic(&command);
            assert_eq!(run.code, 2, "{command:?}: {}{}", run.stdout, run.stderr);
            assert!(
                run.stderr.starts_with(&format!("nodemedic: {file}: ")) && run.stderr.contains(reason),
                "{command:?}: {}",
                run.stderr
            );
            assert_eq!(run.stderr.lines().count(), 1, "{command:?}: {}", run.stderr);
            assert_eq!(run.stdout, "", "{command:?}");
        }
    }
    assert_eq!(std::fs::read(&checkpoint).unwrap(), before, "nothing written");
}
