//! Golden reports of the four fixture layouts (cgroup v1/v2, cgroupfs/systemd,
//! containerd/CRI-O/docker), scanned by the real binary.

use nodemedic_tests::scenarios::{FIXTURES, spark_node};
use nodemedic_tests::{assert_golden, nodemedic, normalize_report};

fn rules_and_subjects(report: &serde_json::Value) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = &f["subject"];
            let who = s["name"].as_str().or(s["uid"].as_str()).unwrap_or("").to_string();
            (f["rule"].as_str().unwrap().to_string(), who)
        })
        .collect()
}

#[test]
fn every_layout_gives_the_same_findings_and_matches_its_golden() {
    for (name, layout, runtime) in FIXTURES {
        let dir = tempfile::tempdir().unwrap();
        let node = spark_node("worker-3", *layout, *runtime);
        node.write(dir.path()).unwrap();
        let root = dir.path().to_str().unwrap();
        let pods = dir.path().join("pods.json");
        let run = nodemedic(&[
            "scan",
            "--host-root",
            root,
            "--pods",
            pods.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert_eq!(
            run.code, 1,
            "{name}: findings at warning or above give exit 1\n{}",
            run.stderr
        );
        assert!(run.stderr.is_empty(), "{name}: {}", run.stderr);
        let report = normalize_report(&run.stdout);
        assert_eq!(report["node"], "worker-3");
        assert_eq!(report["sources"]["pods"], "file");
        for source in ["checkpoint", "kubelet_config", "cpus", "cgroups", "procfs"] {
            assert_eq!(report["sources"][source], "ok", "{name}: {source}");
        }
        let gone = nodemedic_tests::hosttree::pod_uid("etl-exec-2");
        assert_eq!(
            rules_and_subjects(&report),
            [
                ("stale-cpu-assignment".to_string(), gone.clone()),
                ("cpuset-drift".to_string(), "etl-exec-1".to_string()),
                ("exclusive-cpu-shortage".to_string(), "report-builder".to_string()),
            ],
            "{name}"
        );
        let drift = &report["findings"][1]["evidence"];
        assert_eq!(
            (drift["checkpoint_cpus"].as_str(), drift["cgroup_cpus"].as_str()),
            (Some("2,6"), Some("2-3,6")),
            "{name}"
        );
        assert_eq!(drift["process_cpus"], "2-3,6", "{name}: affinity read from procfs");
        let stale = &report["findings"][0]["evidence"];
        assert_eq!(stale["cpus"], "3,7");
        assert_eq!(report["findings"][2]["evidence"]["stale_cpus"], "3,7");
        assert_golden(name, &report);
    }
}

#[test]
fn without_a_pod_list_liveness_comes_from_cgroups() {
    let dir = tempfile::tempdir().unwrap();
    spark_node(
        "worker-3",
        nodemedic_tests::hosttree::Layout::V1Cgroupfs,
        nodemedic_tests::hosttree::Runtime::Containerd,
    )
    .write(dir.path())
    .unwrap();
    let run = nodemedic(&[
        "scan",
        "--host-root",
        dir.path().to_str().unwrap(),
        "--offline",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let report = normalize_report(&run.stdout);
    assert_eq!(report["sources"]["pods"], "cgroups");
    // The node name comes from /etc/hostname; only the stale entry can be judged without names.
    assert_eq!(report["node"], "worker-3");
    let gone = nodemedic_tests::hosttree::pod_uid("etl-exec-2");
    assert_eq!(
        rules_and_subjects(&report),
        [("stale-cpu-assignment".to_string(), gone)]
    );
    assert_eq!(
        report["findings"][0]["evidence"]["reason"],
        format!(
            "pod {} has no cgroup on this node",
            nodemedic_tests::hosttree::pod_uid("etl-exec-2")
        )
    );
    assert_golden("v1-cgroupfs-containerd-no-pods", &report);
}

#[test]
fn text_report_groups_by_severity_with_evidence_and_remedy() {
    let dir = tempfile::tempdir().unwrap();
    let (_, layout, runtime) = FIXTURES[0];
    spark_node("worker-3", layout, runtime).write(dir.path()).unwrap();
    let pods = dir.path().join("pods.json");
    let run = nodemedic(&[
        "scan",
        "--host-root",
        dir.path().to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1);
    let t = &run.stdout;
    let crit = t.find("CRITICAL (1)").expect("critical group");
    let warn = t.find("WARNING (2)").expect("warning group");
    assert!(crit < warn, "critical first:\n{t}");
    assert!(t.contains("[stale-cpu-assignment] pod "), "{t}");
    // A CPU list never reads as a count.
    assert!(t.contains("      cpus: [3,7]"), "{t}");
    // The CPU map, before the findings: which CPUs the stale entry keeps, and from whom.
    let map = t.find("cpu map (8 CPUs;").expect("a cpu map");
    assert!(map < crit, "{t}");
    assert!(
        t.contains(
            "  socket 0, NUMA node 0   cpu  0  1  2  3  4  5  6  7\n                               R  L  L  S  R  L  L  S\n"
        ),
        "{t}"
    );
    assert!(t.contains("  S 3,7          pod "), "{t}");
    assert!(
        t.contains(
            "    remedy: restart the kubelet (systemctl restart kubelet on worker-3): from 1.18 its first reconcile"
        ),
        "{t}"
    );
    assert!(t.contains("    docs:   docs/rules/cpuset-drift.md"), "{t}");
    assert!(t.trim_end().ends_with("1 critical, 2 warning, 0 info"), "{t}");
}

#[test]
fn a_guessed_node_name_that_matches_no_pod_falls_back_to_cgroups() {
    let dir = tempfile::tempdir().unwrap();
    let (_, layout, runtime) = FIXTURES[0];
    spark_node("worker-3", layout, runtime).write(dir.path()).unwrap();
    // Another node's pods file: nothing bound to worker-3, and no pod matches a local cgroup.
    let other = nodemedic_tests::hosttree::Node::new("worker-9", layout, runtime)
        .pod(nodemedic_tests::hosttree::Pod::driver("other", 1))
        .pod(nodemedic_tests::hosttree::Pod::executor("other", 1))
        .pod(nodemedic_tests::hosttree::Pod::new("api", 1))
        .pod(nodemedic_tests::hosttree::Pod::new("cache", 1))
        .pods_json()
        .to_string();
    let pods = dir.path().join("other-pods.json");
    std::fs::write(&pods, other).unwrap();
    let run = nodemedic(&[
        "scan",
        "--host-root",
        dir.path().to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let report = normalize_report(&run.stdout);
    assert_eq!(report["sources"]["pods"], "cgroups");
    assert!(
        report["notes"][0]
            .as_str()
            .unwrap()
            .contains("judging liveness from cgroups instead"),
        "{report:#}"
    );
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        1,
        "only the really stale entry"
    );
    // Named explicitly, the file is used as given.
    let run = nodemedic(&[
        "scan",
        "--host-root",
        dir.path().to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
        "--node",
        "worker-3",
        "--format",
        "json",
    ]);
    let report = normalize_report(&run.stdout);
    assert_eq!(report["sources"]["pods"], "file");
    assert_eq!(
        report["notes"][0],
        "the pods file has 4 pods but none is bound to node worker-3"
    );
}

/// The text report's `coverage:` section: the count of rules judged, one line per rule that
/// could not judge with the source and why, and the rules not looked at grouped by reason; and
/// README's sample of command 1 shows exactly these lines.
#[test]
fn text_report_says_which_rules_could_not_judge() {
    let dir = tempfile::tempdir().unwrap();
    let (_, layout, runtime) = FIXTURES[0];
    spark_node("worker-3", layout, runtime).write(dir.path()).unwrap();
    // An unreadable cgroup hierarchy: the liveness rules fall back, cpuset-drift cannot judge.
    let cgroup = dir.path().join("sys/fs/cgroup");
    std::fs::remove_dir_all(&cgroup).unwrap();
    std::fs::write(&cgroup, b"not a directory").unwrap();
    let pods = dir.path().join("pods.json");
    let run = nodemedic(&[
        "scan",
        "--host-root",
        dir.path().to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
    ]);
    let t = &run.stdout;
    let section: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.starts_with("coverage:"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(section[0], "coverage: 20 of 26 rules judged", "{t}");
    assert!(
        section[1].starts_with("  unknown         cpuset-drift: cgroups: "),
        "{t}"
    );
    // A one-shot scan has no growth to forecast: the daemon's rule, said as such.
    assert_eq!(
        section[2],
        "  not applicable  local-storage-eviction-risk (local_storage: a one-shot scan measures once: growth is measured by the daemon over local_storage_window_seconds)"
    );
    assert_eq!(
        section[3],
        "  not applicable  slow-api, slow-pod-admission, apiserver-unreachable, webhook-blocks-dry-run (api: not probed)"
    );
    assert_eq!(section.len(), 4, "{t}");

    // README's first command: the lines it shows are the command's.
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let example = repo.join("examples/worker-stale");
    let run = nodemedic(&[
        "scan",
        "--host-root",
        example.to_str().unwrap(),
        "--pods",
        example.join("pods.json").to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let sample: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("coverage:"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(sample.len(), 3, "README's sample has its coverage section");
    for line in sample {
        assert!(
            run.stdout.lines().any(|l| l == line),
            "README shows {line:?}; the scan prints:\n{}",
            run.stdout
        );
    }
}
