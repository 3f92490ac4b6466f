//! Bad input on the host: each case gives a finding, a source error or a note that names
//! the file, the scan goes on, and nothing panics.

use std::path::{Path, PathBuf};

use nodemedic_tests::hosttree::{Layout, Runtime};
use nodemedic_tests::scenarios::spark_node;
use nodemedic_tests::{Run, nodemedic};
use serde_json::Value;

struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        spark_node("worker-3", Layout::V1Cgroupfs, Runtime::Containerd)
            .write(dir.path())
            .unwrap();
        Tree { dir }
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn checkpoint(&self) -> PathBuf {
        self.path("var/lib/kubelet/cpu_manager_state")
    }
    fn scan(&self) -> (Run, Value) {
        let pods = self.path("pods.json");
        let run = nodemedic(&[
            "scan",
            "--host-root",
            self.dir.path().to_str().unwrap(),
            "--pods",
            pods.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
        assert!(run.code == 0 || run.code == 1, "exit {}: {}", run.code, run.stderr);
        let report = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
        (run, report)
    }
    /// The evidence `error` of the checkpoint-unreadable finding.
    fn unreadable_error(&self) -> String {
        let (_, report) = self.scan();
        let f: Vec<&Value> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["rule"] == "checkpoint-unreadable")
            .collect();
        assert_eq!(f.len(), 1, "{report:#}");
        assert_eq!(f[0]["evidence"]["path"], "/var/lib/kubelet/cpu_manager_state");
        f[0]["evidence"]["error"].as_str().unwrap().to_string()
    }
}

fn has_finding(report: &Value, rule: &str) -> bool {
    report["findings"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f["rule"] == rule))
}

#[test]
fn broken_checkpoints_are_findings() {
    let cases: &[(&str, &[u8], &str)] = &[
        (
            "truncated",
            br#"{"policyName":"static","defaultCpuSet":"0,4","entr"#,
            "invalid JSON at line 1 column 50: EOF while parsing a string",
        ),
        (
            "bad cpuset",
            br#"{"policyName":"static","defaultCpuSet":"1.3","checksum":0}"#,
            "field defaultCpuSet: invalid cpuset token \"1.3\"",
        ),
        (
            "reversed",
            br#"{"policyName":"static","defaultCpuSet":"0","entries":{"u":{"c":"3-1"}},"checksum":0}"#,
            "invalid cpuset range \"3-1\": 3 > 1",
        ),
        ("empty", b"", "file is empty"),
        ("not UTF-8", b"\xff\xfe\x00{", "invalid JSON"),
        (
            "checksum",
            br#"{"policyName":"static","defaultCpuSet":"0-7","checksum":1337}"#,
            "checkpoint is corrupted",
        ),
    ];
    for (name, bytes, want) in cases {
        let t = Tree::new();
        std::fs::write(t.checkpoint(), bytes).unwrap();
        let err = t.unreadable_error();
        assert!(err.contains(want), "{name}: {err}");
    }
}

#[test]
fn directory_and_huge_checkpoint() {
    let t = Tree::new();
    std::fs::remove_file(t.checkpoint()).unwrap();
    std::fs::create_dir(t.checkpoint()).unwrap();
    assert_eq!(t.unreadable_error(), "is a directory, not a file");

    let t = Tree::new();
    let f = std::fs::File::create(t.checkpoint()).unwrap();
    f.set_len(100 * 1024 * 1024).unwrap(); // 100 MB (sparse)
    assert_eq!(
        t.unreadable_error(),
        "file is 104857600 bytes, larger than any kubelet checkpoint (limit 16777216)"
    );
}

#[test]
fn broken_sources_are_reported_and_the_rest_still_judged() {
    let t = Tree::new();
    std::fs::write(t.path("var/lib/kubelet/config.yaml"), b"cpuManagerPolicy: \xff\xfe\n").unwrap();
    std::fs::write(t.path("sys/devices/system/cpu/online"), b"3-1\n").unwrap();
    let (run, report) = t.scan();
    assert_eq!(
        report["sources"]["kubelet_config"],
        "error: /var/lib/kubelet/config.yaml: not UTF-8 text"
    );
    assert_eq!(
        report["sources"]["cpus"],
        "error: /sys/devices/system/cpu/online: invalid cpuset range \"3-1\": 3 > 1"
    );
    // The stale entry is still found from the checkpoint and the pod list.
    assert_eq!(run.code, 1);
    assert!(has_finding(&report, "stale-cpu-assignment"), "{report:#}");

    // The kubelet runs with --config under /etc/kubernetes, which the base DaemonSet does not
    // mount: said so, with the component that mounts it, never judged by the defaults.
    let t = tempfile::tempdir().unwrap();
    let mut node = spark_node("worker-3", Layout::V1Cgroupfs, Runtime::Containerd);
    node.kubelet_config_path = "/etc/kubernetes/kubelet-config.yaml".into();
    node.write(t.path()).unwrap();
    let tree = Tree { dir: t };
    let (run, report) = tree.scan();
    assert_eq!(report["sources"]["kubelet_config"], "ok", "{report:#}");
    assert_eq!(run.code, 1);
    std::fs::remove_dir_all(tree.path("etc/kubernetes")).unwrap();
    let (run, report) = tree.scan();
    assert_eq!(
        report["sources"]["kubelet_config"],
        "error: the kubelet runs with --config /etc/kubernetes/kubelet-config.yaml, which is not visible at \
         /etc/kubernetes/kubelet-config.yaml: its directory is not mounted into the agent (for /etc/kubernetes, \
         add the component daemonset/components/etc-kubernetes; docs/operations/security.md)"
    );
    // The checkpoint is still judged.
    assert_eq!(run.code, 1);
    assert!(has_finding(&report, "stale-cpu-assignment"), "{report:#}");

    let t = Tree::new();
    std::fs::remove_file(t.path("var/lib/kubelet/config.yaml")).unwrap();
    std::fs::create_dir(t.path("var/lib/kubelet/config.yaml")).unwrap();
    let (_, report) = t.scan();
    assert_eq!(
        report["sources"]["kubelet_config"],
        "error: /var/lib/kubelet/config.yaml: is a directory, not a file"
    );
}

fn leaves(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![root.join("sys/fs/cgroup/cpuset/kubepods")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                if e.file_name().len() == 64 {
                    out.push(e.path());
                } else {
                    stack.push(e.path());
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn bad_cgroup_and_proc_files_become_notes() {
    let t = Tree::new();
    let all = leaves(t.dir.path());
    std::fs::write(all[0].join("cpuset.cpus"), "1.3\n").unwrap();
    // A leaf whose files are gone: what a cgroup removed mid-scan looks like.
    for f in ["cpuset.cpus", "cpuset.effective_cpus", "cgroup.procs"] {
        std::fs::remove_file(all[1].join(f)).unwrap();
    }
    let pid = std::fs::read_to_string(all[2].join("cgroup.procs"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    std::fs::write(
        t.path(&format!("proc/{pid}/status")),
        b"Name:\tjava\nCpus_allowed_list:\t\xff\n",
    )
    .unwrap();
    let (_, report) = t.scan();
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let shown = |p: &Path| format!("/{}", p.strip_prefix(t.dir.path()).unwrap().display());
    assert!(
        notes.contains(
            &format!(
                "{}/cpuset.cpus: invalid cpuset token \"1.3\": not a CPU id or a low-high range",
                shown(&all[0])
            )
            .as_str()
        ),
        "{notes:?}"
    );
    assert!(
        notes.contains(&format!("cgroup {} vanished during the scan", shown(&all[1])).as_str()),
        "{notes:?}"
    );
    assert!(
        notes.contains(&format!("/proc/{pid}/status: Cpus_allowed_list: not UTF-8 text").as_str()),
        "{notes:?}"
    );
}

#[test]
fn cgroups_created_and_removed_during_scans() {
    let t = Tree::new();
    let kubepods = t.path("sys/fs/cgroup/cpuset/kubepods");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        let kubepods = kubepods.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let pod = kubepods.join(format!("pod00000000-0000-4000-8000-{:012}", i % 7));
                let leaf = pod.join(nodemedic_tests::hosttree::container_id(&i.to_string()));
                let _ = std::fs::create_dir_all(&leaf);
                let _ = std::fs::write(leaf.join("cpuset.cpus"), "1-2\n");
                let _ = std::fs::write(leaf.join("cgroup.procs"), "999999\n");
                let _ = std::fs::remove_dir_all(&pod);
                i += 1;
            }
        })
    };
    for _ in 0..30 {
        let (_, report) = t.scan();
        // The churning pods are never in the checkpoint or the pod list: the real findings stay.
        let rules: Vec<&str> = nodemedic_tests::finding_rules(&report);
        assert_eq!(
            rules,
            ["stale-cpu-assignment", "cpuset-drift", "exclusive-cpu-shortage"]
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
}
