//! A pod is alive while any cgroup below its pod cgroup holds a process, at any depth: a
//! container that runs systemd, Docker-in-Docker or kind nests cgroups below its leaf, and the
//! only process may sit there. Checked through the real binary on a real cgroup v1 cpuset
//! hierarchy (root, as CI) and on a cgroup v2 fixture tree with `cgroup.events`, with the
//! process 1, 3 and 12 levels below the container leaf: `scan` (liveness from the cgroups, and
//! from a pods file that no longer lists the pod) and `repair cpu-state --apply` (which must
//! refuse, the file untouched); a truly stale entry beside it is still found.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use nodemedic_tests::cgroup_v1::{CpusetSandbox, write_node_files};
use nodemedic_tests::hosttree::{container_id, pod_uid, write_file};
use nodemedic_tests::{Run, nodemedic};
use serde_json::{Value, json};

const NODE: &str = "nest-node";
const DEPTHS: [usize; 3] = [1, 3, 12];

/// A host root whose pod `nested` runs one process `depth` levels below its container leaf,
/// and whose pod `gone` has no cgroup; the checkpoint pins CPU 1 to the first, 2 to the second.
struct NestedHost {
    root: tempfile::TempDir,
    nested: String,
    gone: String,
    _sandbox: Option<CpusetSandbox>,
}

impl NestedHost {
    /// On the machine's real cgroup v1 cpuset hierarchy, with a real `sleep`.
    fn v1(depth: usize) -> NestedHost {
        let mut sb = CpusetSandbox::new("nodemedic-nest").expect("cgroup v1 cpuset sandbox (run as root)");
        let (nested, gone) = (
            pod_uid(&format!("nest-v1-{depth}")),
            pod_uid(&format!("gone-v1-{depth}")),
        );
        let leaf = format!("kubepods/pod{nested}/{}", container_id(&format!("nest-v1-{depth}/app")));
        sb.mkdir(&leaf, Some("1")).unwrap();
        let deep: String = (1..=depth).map(|i| format!("/n{i}")).collect();
        let rel = format!("{leaf}{deep}");
        sb.mkdir(&rel, None).unwrap();
        sb.spawn_sleep(&rel).unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("proc")).unwrap();
        sb.write_host(root.path(), "0-2", &[(&nested, "1"), (&gone, "2")])
            .unwrap();
        NestedHost {
            root,
            nested,
            gone,
            _sandbox: Some(sb),
        }
    }

    /// A cgroup v2 fixture tree (cgroupfs driver): the process's pid only in the deepest
    /// `cgroup.procs`, every ancestor's `cgroup.events` saying `populated 1`, as the kernel does.
    fn v2(depth: usize) -> NestedHost {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let (nested, gone) = (
            pod_uid(&format!("nest-v2-{depth}")),
            pod_uid(&format!("gone-v2-{depth}")),
        );
        let cg = r.join("sys/fs/cgroup");
        write_file(&cg.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        let mut dir = cg.join("kubepods").join(format!("pod{nested}"));
        let leaf = container_id(&format!("nest-v2-{depth}/app"));
        let mut levels = vec![dir.clone()];
        dir = dir.join(&leaf);
        levels.push(dir.clone());
        for i in 1..=depth {
            dir = dir.join(format!("n{i}"));
            levels.push(dir.clone());
        }
        for (i, d) in levels.iter().enumerate() {
            let procs = if i == levels.len() - 1 { "4242\n" } else { "" };
            write_file(&d.join("cgroup.procs"), procs).unwrap();
            write_file(&d.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        }
        write_file(&levels[1].join("cpuset.cpus"), "1\n").unwrap();
        std::fs::create_dir_all(r.join("proc")).unwrap();
        let config = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: cgroupfs\n\
                      cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n";
        write_node_files(r, config, "0-2", &[(&nested, "1"), (&gone, "2")]).unwrap();
        NestedHost {
            root,
            nested,
            gone,
            _sandbox: None,
        }
    }

    fn r(&self) -> &str {
        self.root.path().to_str().unwrap()
    }

    fn checkpoint(&self) -> PathBuf {
        self.root.path().join("var/lib/kubelet/cpu_manager_state")
    }

    /// A pods file in which neither pod is bound here any more.
    fn empty_pods_file(&self) -> String {
        let path = self.root.path().join("pods.json");
        std::fs::write(
            &path,
            json!({"apiVersion": "v1", "kind": "List", "items": []}).to_string(),
        )
        .unwrap();
        path.to_str().unwrap().to_string()
    }

    fn scan(&self, source: &[&str]) -> Value {
        let mut args = vec!["scan", "--host-root", self.r(), "--node", NODE, "--format", "json"];
        args.extend_from_slice(source);
        let run = nodemedic(&args);
        assert_eq!(run.code, 1, "findings expected: {}\n{}", run.stdout, run.stderr);
        serde_json::from_str(&run.stdout).unwrap()
    }

    /// `repair cpu-state --apply --yes --format json` with the pod source `source`.
    fn repair_apply(&self, source: &[&str]) -> Run {
        let mut args = vec!["repair", "cpu-state", "--host-root", self.r(), "--node", NODE];
        args.extend_from_slice(source);
        args.extend_from_slice(&["--apply", "--yes", "--format", "json"]);
        nodemedic(&args)
    }
}

fn stale_findings(report: &Value) -> Vec<&Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "stale-cpu-assignment")
        .collect()
}

fn uids(findings: &[&Value]) -> BTreeSet<String> {
    findings
        .iter()
        .map(|f| f["evidence"]["pod_uid"].as_str().unwrap().to_string())
        .collect()
}

fn judged_alive_at_every_depth(make: fn(usize) -> NestedHost, layout: &str) {
    for depth in DEPTHS {
        let h = make(depth);
        let what = format!("{layout}, process {depth} level(s) below the leaf");
        // Liveness from the cgroups: the nested pod is alive, the gone one stale.
        let report = h.scan(&["--offline"]);
        assert_eq!(report["sources"]["pods"], "cgroups", "{what}");
        assert_eq!(
            uids(&stale_findings(&report)),
            BTreeSet::from([h.gone.clone()]),
            "{what}: {report:#}"
        );

        // Liveness from a pods file that lists neither: both stale by the list, but the nested
        // one is the other case, said plainly: its containers still run.
        let pods = h.empty_pods_file();
        let report = h.scan(&["--pods", &pods]);
        let found = stale_findings(&report);
        assert_eq!(
            uids(&found),
            BTreeSet::from([h.gone.clone(), h.nested.clone()]),
            "{what}"
        );
        let nested = found
            .iter()
            .find(|f| f["evidence"]["pod_uid"] == h.nested.as_str())
            .unwrap();
        assert_eq!(nested["severity"], "critical", "{what}");
        let summary = nested["summary"].as_str().unwrap();
        assert!(summary.contains("yet 1 process in its cgroups"), "{what}: {summary}");
        assert!(
            nested["remedy"].as_str().unwrap().contains("crictl stop"),
            "{what}: {nested:#}"
        );
        assert_eq!(nested["evidence"]["pod_cgroup_processes"], 1, "{what}");
        let gone = found
            .iter()
            .find(|f| f["evidence"]["pod_uid"] == h.gone.as_str())
            .unwrap();
        assert!(!gone["remedy"].as_str().unwrap().contains("crictl"), "{what}: {gone:#}");

        // The repair refuses, and the file stays as it was.
        let before = std::fs::read(h.checkpoint()).unwrap();
        let run = h.repair_apply(&["--pods", &pods]);
        assert_eq!(run.code, 1, "{what}: {}\n{}", run.stdout, run.stderr);
        let plan: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(plan["verdict"], "refused", "{what}: {plan:#}");
        let reasons: Vec<&str> = plan["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            reasons
                .iter()
                .any(|r| r.contains(&h.nested) && r.contains("something still runs there")),
            "{what}: {reasons:?}"
        );
        assert_eq!(plan["apply"], Value::Null, "{what}");
        assert_eq!(
            std::fs::read(h.checkpoint()).unwrap(),
            before,
            "{what}: the file was touched"
        );

        // Judged from the cgroups, the same repair frees the gone pod's CPU and keeps the other.
        let run = h.repair_apply(&["--offline"]);
        assert_eq!(run.code, 0, "{what}: {}\n{}", run.stdout, run.stderr);
        let after = String::from_utf8(std::fs::read(h.checkpoint()).unwrap()).unwrap();
        assert!(after.contains(&h.nested) && !after.contains(&h.gone), "{what}: {after}");
    }
}

#[test]
fn a_process_nested_below_a_leaf_keeps_its_pod_alive_on_real_cgroup_v1() {
    judged_alive_at_every_depth(NestedHost::v1, "cgroup v1");
}

#[test]
fn a_process_nested_below_a_leaf_keeps_its_pod_alive_on_cgroup_v2() {
    judged_alive_at_every_depth(NestedHost::v2, "cgroup v2");
}

#[test]
fn cgroup_v2_populated_alone_keeps_a_pod_alive() {
    // Every cgroup.procs empty (a process in a cgroup this agent may not read), but the
    // kernel's cgroup.events says the subtree is populated: alive.
    let h = NestedHost::v2(3);
    let deepest = h
        .root
        .path()
        .join("sys/fs/cgroup/kubepods")
        .join(format!("pod{}", h.nested))
        .join(container_id("nest-v2-3/app"))
        .join("n1/n2/n3/cgroup.procs");
    std::fs::write(&deepest, "").unwrap();
    let report = h.scan(&["--offline"]);
    assert_eq!(
        uids(&stale_findings(&report)),
        BTreeSet::from([h.gone.clone()]),
        "{report:#}"
    );
    // And once the kernel says the subtree is empty, the entry is stale.
    for events in walk_files(&h.root.path().join("sys/fs/cgroup/kubepods"), "cgroup.events") {
        std::fs::write(events, "populated 0\nfrozen 0\n").unwrap();
    }
    let report = h.scan(&["--offline"]);
    assert_eq!(
        uids(&stale_findings(&report)),
        BTreeSet::from([h.gone.clone(), h.nested.clone()]),
        "{report:#}"
    );
}

/// Every file named `name` below `dir`.
fn walk_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.file_name() == name {
                out.push(p);
            }
        }
    }
    out
}
