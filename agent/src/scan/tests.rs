//! Tests of [`super`] (scan.rs keeps the code, this file its tests): [`snapshot`] and
//! [`snapshot_blocking`] over small host trees written into a tempdir by [`Tree`], one per
//! pod source and option, and the sources that are missing or broken.
//!
//! [`Tree`] is the agent's own minimal host-tree writer (the end-to-end tests' richer builder
//! lives in nodemedic-tests, which this crate cannot use); the `repair cpu-state` tests use it
//! too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodemedic_rules::checkpoint::checksum::{self, Candidate};
use nodemedic_rules::checkpoint::{Checkpoint, Entries, PodEntries};
use nodemedic_rules::snapshot::{Observed, PodSource};
use serde_json::{Value, json};

use super::*;

/// The node every tree is.
pub(crate) const NODE: &str = "worker-1";

/// A pod of a [`Tree`]: its identity, where it is bound, its phase and its containers (name,
/// runtime ID).
#[derive(Debug, Clone)]
pub(crate) struct TestPod {
    pub name: String,
    pub uid: String,
    pub node: String,
    pub phase: String,
    pub containers: Vec<(String, String)>,
}

impl TestPod {
    /// A running Guaranteed pod `default/<name>` on [`NODE`] with one container `app`; its UID
    /// and container ID are derived from `name`.
    pub fn new(name: &str) -> Self {
        TestPod {
            name: name.into(),
            uid: uid(name),
            node: NODE.into(),
            phase: "Running".into(),
            containers: vec![("app".into(), container_id(name))],
        }
    }

    /// Bound to another node.
    pub fn on(mut self, node: &str) -> Self {
        self.node = node.into();
        self
    }

    /// Finished with `phase` (its containers terminated long ago).
    pub fn finished(mut self, phase: &str) -> Self {
        self.phase = phase.into();
        self
    }

    /// The `kubectl get pods -o json` item of this pod: 1 CPU requested and limited per
    /// container (Guaranteed), statuses with containerd IDs.
    pub fn json(&self) -> Value {
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|(name, _)| {
                json!({"name": name, "image": "app:1",
                       "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}})
            })
            .collect();
        let statuses: Vec<Value> = self
            .containers
            .iter()
            .map(|(name, id)| {
                let state = if self.phase == "Running" {
                    json!({"running": {"startedAt": "2020-01-01T00:00:05Z"}})
                } else {
                    json!({"terminated": {"exitCode": 0, "reason": "Completed",
                           "startedAt": "2020-01-01T00:00:05Z", "finishedAt": "2020-01-01T00:10:00Z"}})
                };
                json!({"name": name, "ready": self.phase == "Running", "restartCount": 0, "image": "app:1",
                       "imageID": "app@sha256:00", "containerID": format!("containerd://{id}"), "state": state})
            })
            .collect();
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": "default", "uid": self.uid,
                         "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"nodeName": self.node, "containers": containers},
            "status": {"phase": self.phase, "qosClass": "Guaranteed", "startTime": "2020-01-01T00:00:01Z",
                       "containerStatuses": statuses},
        })
    }
}

/// A stable pod UID for a name.
pub(crate) fn uid(name: &str) -> String {
    let hex = container_id(name);
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// A stable 64-hex-digit runtime container ID for a name.
pub(crate) fn container_id(name: &str) -> String {
    // FNV-1a, stretched: distinct names give distinct IDs.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = String::new();
    for round in 0u8..4 {
        for b in name.bytes().chain([round]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

/// The `kubectl get pods -o json` list of `pods`.
pub(crate) fn pods_json(pods: &[TestPod]) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": pods.iter().map(TestPod::json).collect::<Vec<_>>()})
}

/// A V2 checkpoint (static policy) with `entries` (pod UID, container, cpuset exactly as
/// written) and `default` as `defaultCpuSet`, with the checksum a 1.18+ kubelet writes over
/// those very strings.
pub(crate) fn checkpoint_bytes(default: &str, entries: &[(&str, &str, &str)]) -> Vec<u8> {
    let mut map: BTreeMap<String, Option<BTreeMap<String, String>>> = BTreeMap::new();
    for (pod, container, cpus) in entries {
        map.entry(pod.to_string())
            .or_insert_with(|| Some(BTreeMap::new()))
            .get_or_insert_with(BTreeMap::new)
            .insert(container.to_string(), cpus.to_string());
    }
    let mut cp = Checkpoint {
        policy_name: "static".into(),
        default_cpu_set: default.into(),
        entries: Entries::ByPod(map),
        pod_entries: PodEntries::Absent,
        checksum: 0,
        v4: None,
    };
    cp.checksum = u64::from(checksum::checksum(&cp, Candidate::V2).unwrap());
    cp.to_json().into_bytes()
}

/// A host root in a tempdir: an 8-CPU node (1 socket, 4 cores, 2 threads; CPUs `n` and
/// `n+4` are siblings) with a static-policy kubelet configuration (reserved 0,4), cgroup v1
/// (cgroupfs driver) with an empty `kubepods`, an empty `/proc` (no kubelet runs) and
/// `/etc/hostname` = [`NODE`]; no checkpoint until [`Tree::checkpoint`].
pub(crate) struct Tree {
    dir: tempfile::TempDir,
}

/// The kubelet configuration every [`Tree`] starts with.
pub(crate) const KUBELET_YAML: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
    cgroupDriver: cgroupfs\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0,4\"\n";

impl Tree {
    pub fn new() -> Tree {
        let tree = Tree {
            dir: tempfile::tempdir().unwrap(),
        };
        tree.put("etc/hostname", format!("{NODE}\n"));
        tree.put("sys/devices/system/cpu/online", "0-7\n");
        for cpu in 0..8 {
            tree.put(
                &format!("sys/devices/system/cpu/cpu{cpu}/topology/core_id"),
                format!("{}\n", cpu % 4),
            );
            tree.put(
                &format!("sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                "0\n",
            );
        }
        tree.put("var/lib/kubelet/config.yaml", KUBELET_YAML);
        tree.put("sys/fs/cgroup/cpuset/cpuset.cpus", "0-7\n");
        tree.put("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-7\n");
        std::fs::create_dir_all(tree.path("sys/fs/cgroup/cpuset/kubepods")).unwrap();
        std::fs::create_dir_all(tree.path("proc")).unwrap();
        tree
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn host(&self) -> HostPaths {
        HostPaths::new(self.root(), None)
    }

    /// The local path of host path `rel` (relative to the root).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// Writes `content` at `rel`, creating its directories.
    pub fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// The checkpoint's local path.
    pub fn checkpoint_path(&self) -> PathBuf {
        self.path("var/lib/kubelet/cpu_manager_state")
    }

    /// Writes the CPU manager checkpoint, last modified an hour ago (past every grace).
    pub fn checkpoint(&self, bytes: &[u8]) {
        let path = self.checkpoint_path();
        std::fs::write(&path, bytes).unwrap();
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }

    /// Writes `pods` as `pods.json` at the root; returns its local path.
    pub fn pods_file(&self, pods: &[TestPod]) -> PathBuf {
        self.put("pods.json", pods_json(pods).to_string());
        self.path("pods.json")
    }

    /// The pod cgroup of `pod` (Guaranteed, cgroupfs): a leaf per container with cpuset
    /// `cpus` and `pids` in it (their `/proc/<pid>/status` written with that affinity).
    pub fn pod_cgroup(&self, pod: &TestPod, cpus: &str, pids: &[u32]) {
        let dir = format!("sys/fs/cgroup/cpuset/kubepods/pod{}", pod.uid);
        self.put(&format!("{dir}/cgroup.procs"), "");
        for (_, id) in &pod.containers {
            let procs: String = pids.iter().map(|p| format!("{p}\n")).collect();
            self.put(&format!("{dir}/{id}/cpuset.cpus"), format!("{cpus}\n"));
            self.put(&format!("{dir}/{id}/cpuset.effective_cpus"), format!("{cpus}\n"));
            self.put(&format!("{dir}/{id}/cgroup.procs"), procs);
        }
        for pid in pids {
            self.put(
                &format!("proc/{pid}/status"),
                format!("Name:\tapp\nPid:\t{pid}\nCpus_allowed_list:\t{cpus}\n"),
            );
        }
    }

    /// A kubelet process `pid` visible in the tree's `/proc`.
    pub fn kubelet_process(&self, pid: u32) {
        self.put(
            &format!("proc/{pid}/cmdline"),
            "/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0",
        );
    }
}

/// The pods of the scans below: `live` runs here (CPUs 1,5 pinned), `done` finished here,
/// `away` runs on another node.
fn pods() -> Vec<TestPod> {
    vec![
        TestPod::new("live"),
        TestPod::new("done").finished("Succeeded"),
        TestPod::new("away").on("worker-2"),
    ]
}

/// A whole node: [`pods`]' cgroups (live's with one process, done's empty; away has none
/// here), and a checkpoint that pins live to 1,5 and done to 2,6.
fn node_tree() -> Tree {
    let tree = Tree::new();
    let [live, done, _] = &pods()[..] else { unreachable!() };
    tree.pod_cgroup(live, "1,5", &[101]);
    tree.pod_cgroup(done, "2,6", &[]);
    tree.checkpoint(&checkpoint_bytes(
        "0,3-4,7",
        &[(&live.uid, "app", "1,5"), (&done.uid, "app", "2,6")],
    ));
    tree
}

/// The pods as the daemon's watch gives them (parsed from the same JSON a pods file holds).
fn given(pods: &[TestPod]) -> Vec<nodemedic_rules::snapshot::PodInfo> {
    collect::pods::parse_pods_json(pods_json(pods).to_string().as_bytes()).unwrap()
}

/// Every record as (name, status), in the report's order.
fn statuses(records: &Records) -> Vec<(&'static str, String)> {
    records.iter().map(|r| (r.name, r.status.clone())).collect()
}

/// The UIDs of the snapshot's pods.
fn uids(snapshot: &NodeSnapshot) -> Vec<String> {
    snapshot.pods.bound.iter().map(|p| p.uid.clone()).collect()
}

/// Offline options for `node`: no API, no PodResources socket in the trees.
fn offline(node: Option<&str>) -> Options {
    Options {
        host: collect::HostOptions {
            node: node.map(str::to_string),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `Pods::Given` (the daemon's watch): the snapshot is the named node's, its pods are the
/// given ones bound there, liveness is the given source, and every host source reads `ok`; the
/// PodResources socket is missing and no kubelet version was given (`unknown`).
#[test]
fn given_pods_are_the_snapshots_and_every_host_source_is_read() {
    let tree = node_tree();
    let watched = Pods::Given {
        node: NODE.into(),
        pods: given(&pods()),
        source: PodSource::Api,
    };
    let scanned = snapshot_blocking(&tree.host(), watched, &offline(None)).unwrap();
    let s = &scanned.snapshot;
    assert_eq!(s.node, NODE);
    assert_eq!(s.pods.source, PodSource::Api);
    assert_eq!(uids(s), [uid("live"), uid("done")], "away is bound to worker-2");
    let file = s.host.checkpoint.ok().unwrap();
    assert_eq!(file.path, "/var/lib/kubelet/cpu_manager_state");
    assert!(file.age_seconds.unwrap() >= 3599.0, "{:?}", file.age_seconds);
    assert_eq!(file.state.as_ref().unwrap().assignments.len(), 2);
    assert_eq!(
        s.host.cpus.ok().unwrap().all(),
        nodemedic_rules::CpuSet::parse("0-7").unwrap()
    );
    let tree_read = s.host.cgroups.ok().unwrap();
    assert_eq!(tree_read.kubepods, "/sys/fs/cgroup/cpuset/kubepods");
    assert_eq!(tree_read.pods.len(), 2);
    assert_eq!(tree_read.pod(&uid("live")).unwrap().process_count(), 1);
    assert_eq!(tree_read.pod(&uid("done")).unwrap().process_count(), 0);
    assert_eq!(s.host.kubelet.ok().unwrap().cpu_manager.policy, "static");
    assert_eq!(s.host.procfs, Observed::Ok(()));
    assert_eq!(
        s.host.kubelet_view,
        Observed::Missing {
            path: "/var/lib/kubelet/pod-resources/kubelet.sock".into()
        }
    );
    assert_eq!(
        s.pods.list,
        Observed::NotApplicable {
            reason: "no pod list given".into()
        }
    );
    assert_eq!(
        statuses(&scanned.records),
        [
            ("checkpoint", "ok".to_string()),
            ("manager_files", "ok".into()),
            ("kubelet_config", "ok".into()),
            ("cpus", "ok".into()),
            ("cgroups", "ok".into()),
            ("procfs", "ok".into()),
            ("podresources", "missing".into()),
            ("pods", "api".into()),
            ("local_dirs", "missing".into()),
            (
                "local_storage",
                format!("not applicable: {}", crate::collect::ONE_SHOT_STORAGE)
            ),
            ("spark_conf", "ok".into()),
            ("listeners", "missing".into()),
            ("kubelet_version", "unknown".into()),
        ]
    );
    assert!(scanned.records.iter().all(|r| !r.failed));

    // The node is the one named with the pods, whatever `/etc/hostname` says.
    let elsewhere = Pods::Given {
        node: "worker-2".into(),
        pods: given(&pods()),
        source: PodSource::Api,
    };
    let scanned = snapshot_blocking(&tree.host(), elsewhere.clone(), &offline(None)).unwrap();
    assert_eq!(scanned.snapshot.node, "worker-2");
    assert_eq!(uids(&scanned.snapshot), [uid("away")]);
    // And whatever the options name: the pods' node wins.
    let scanned = snapshot_blocking(&tree.host(), elsewhere, &offline(Some(NODE))).unwrap();
    assert_eq!(scanned.snapshot.node, "worker-2");
    assert_eq!(uids(&scanned.snapshot), [uid("away")]);
}

/// `Pods::File`: the file's pods bound to this node, liveness `file`; without `--node` the
/// node is the one most of this host's pod cgroups are bound to in the file (worker-2 here,
/// whatever `/etc/hostname` says), and with it, the named one.
#[test]
fn a_pods_file_gives_this_nodes_pods_and_names_the_node() {
    let tree = node_tree();
    let path = tree.pods_file(&pods());
    let scanned = snapshot_blocking(&tree.host(), Pods::File(path.clone()), &offline(Some(NODE))).unwrap();
    assert_eq!(scanned.snapshot.node, NODE);
    assert_eq!(scanned.snapshot.pods.source, PodSource::File);
    assert_eq!(uids(&scanned.snapshot), [uid("live"), uid("done")]);
    assert_eq!(scanned.records.get("pods").unwrap().status, "file");

    // No name given: inferred from the cgroups. Only away's cgroup is here now.
    let tree = Tree::new();
    tree.pod_cgroup(&TestPod::new("away"), "1", &[7]);
    let path = tree.pods_file(&pods());
    let scanned = snapshot_blocking(&tree.host(), Pods::File(path), &offline(None)).unwrap();
    assert_eq!(scanned.snapshot.node, "worker-2");
    assert_eq!(uids(&scanned.snapshot), [uid("away")]);
}

/// `Pods::Cgroups`: no pods, liveness from the cgroups, the node from `/etc/hostname`; the
/// caller's reason for having no pod list is the snapshot's `pod_list`.
#[test]
fn cgroups_alone_name_no_pods_and_keep_the_callers_reason() {
    let tree = node_tree();
    let why = Observed::NotApplicable {
        reason: "--offline".to_string(),
    };
    let opts = Options {
        pod_list: Some(why.clone()),
        ..offline(None)
    };
    let scanned = snapshot_blocking(&tree.host(), Pods::Cgroups, &opts).unwrap();
    assert_eq!(scanned.snapshot.node, NODE);
    assert_eq!(scanned.snapshot.pods.source, PodSource::Cgroups);
    assert!(scanned.snapshot.pods.bound.is_empty());
    assert_eq!(scanned.snapshot.pods.list, why);
    assert_eq!(scanned.records.get("pods").unwrap().status, "cgroups");
    assert_eq!(scanned.snapshot.host.cgroups.ok().unwrap().pods.len(), 2);
}

/// `LocalDirs::Skip`: the local dirs are not measured (`not applicable: not measured this
/// cycle`) while the other sources are read as before.
#[test]
fn local_dirs_skipped_are_left_unmeasured() {
    let tree = node_tree();
    let mut opts = offline(Some(NODE));
    opts.host.local_dirs = collect::LocalDirs::Skip;
    let scanned = snapshot_blocking(&tree.host(), Pods::Cgroups, &opts).unwrap();
    assert_eq!(
        scanned.snapshot.host.local_dirs,
        Observed::NotApplicable {
            reason: "not measured this cycle".into()
        }
    );
    assert_eq!(
        scanned.records.get("local_dirs").unwrap().status,
        "not applicable: not measured this cycle"
    );
    assert_eq!(scanned.records.get("checkpoint").unwrap().status, "ok");
}

/// `node`: the name given wins over `/etc/hostname` (and the file's pods are matched
/// against it).
#[test]
fn a_named_node_wins_over_the_hostname() {
    let tree = node_tree();
    let path = tree.pods_file(&pods());
    let scanned = snapshot_blocking(&tree.host(), Pods::File(path), &offline(Some("worker-2"))).unwrap();
    assert_eq!(scanned.snapshot.node, "worker-2");
    assert_eq!(uids(&scanned.snapshot), [uid("away")]);
}

/// `readings`: the snapshot is assembled from the host as read before, not from the host
/// now: a checkpoint deleted since is still the one read, a scan without them sees it gone.
#[test]
fn readings_given_are_used_instead_of_reading_the_host() {
    let tree = node_tree();
    let host = tree.host();
    let readings = collect::read_host(&host, &collect::HostOptions::default()).unwrap();
    std::fs::remove_file(tree.checkpoint_path()).unwrap();

    let with = Options {
        readings: Some(Arc::new(readings)),
        ..offline(Some(NODE))
    };
    let scanned = snapshot_blocking(&host, Pods::Cgroups, &with).unwrap();
    assert_eq!(
        scanned
            .snapshot
            .host
            .checkpoint
            .ok()
            .unwrap()
            .state
            .as_ref()
            .unwrap()
            .assignments
            .len(),
        2
    );
    assert_eq!(scanned.records.get("checkpoint").unwrap().status, "ok");

    let scanned = snapshot_blocking(&host, Pods::Cgroups, &offline(Some(NODE))).unwrap();
    assert_eq!(
        scanned.snapshot.host.checkpoint,
        Observed::Missing {
            path: "/var/lib/kubelet/cpu_manager_state".into()
        }
    );
    assert_eq!(scanned.records.get("checkpoint").unwrap().status, "missing");
}

/// `last_known_pods`: the names the kubelet's PodResources pods are matched by are the
/// caller's last known pods and the snapshot's own, a UID listed once per name.
#[test]
fn last_known_pods_name_the_kubelets_pods_with_the_snapshots() {
    let tree = node_tree();
    let path = tree.pods_file(&pods());
    let scanned = snapshot_blocking(&tree.host(), Pods::File(path), &offline(Some(NODE))).unwrap();
    let key = |n: &str| ("default".to_string(), n.to_string());
    let opts = Options {
        last_known_pods: BTreeMap::from([
            (key("live"), vec!["old-live-uid".to_string(), uid("live")]),
            (key("gone"), vec!["gone-uid".to_string()]),
        ]),
        ..Default::default()
    };
    let names = pod_names(&opts, &scanned.snapshot);
    assert_eq!(
        names,
        BTreeMap::from([
            (key("done"), vec![uid("done")]),
            (key("gone"), vec!["gone-uid".to_string()]),
            (key("live"), vec!["old-live-uid".to_string(), uid("live")]),
        ])
    );
}

/// No kubelet directory: the checkpoint, the other managers' files and the kubelet's
/// configuration are `missing`, the PodResources socket too, and the cgroups, the CPUs and
/// the pods are still read.
#[test]
fn a_missing_kubelet_dir_is_missing_and_the_rest_is_read() {
    let tree = node_tree();
    std::fs::remove_dir_all(tree.path("var/lib/kubelet")).unwrap();
    let path = tree.pods_file(&pods());
    let scanned = snapshot_blocking(&tree.host(), Pods::File(path), &offline(Some(NODE))).unwrap();
    let s = &scanned.snapshot;
    assert_eq!(
        s.host.checkpoint,
        Observed::Missing {
            path: "/var/lib/kubelet/cpu_manager_state".into()
        }
    );
    assert!(
        matches!(&s.host.kubelet, Observed::Missing { .. }),
        "{:?}",
        s.host.kubelet
    );
    assert_eq!(
        statuses(&scanned.records),
        [
            ("checkpoint", "missing".to_string()),
            ("manager_files", "ok".into()),
            ("kubelet_config", "missing".into()),
            ("cpus", "ok".into()),
            ("cgroups", "ok".into()),
            ("procfs", "ok".into()),
            ("podresources", "missing".into()),
            ("pods", "file".into()),
            ("local_dirs", "missing".into()),
            (
                "local_storage",
                format!("not applicable: {}", crate::collect::ONE_SHOT_STORAGE)
            ),
            ("spark_conf", "ok".into()),
            ("listeners", "missing".into()),
            ("kubelet_version", "unknown".into()),
        ]
    );
    assert_eq!(s.host.cgroups.ok().unwrap().pods.len(), 2);
    assert_eq!(uids(s), [uid("live"), uid("done")]);
}

/// A checkpoint that is not JSON: the file was read (`ok`, the kubelet's own verdict is in
/// the file's content: invalid JSON), and every other source is read as usual.
#[test]
fn a_checkpoint_that_is_not_json_is_read_as_unparsable() {
    let tree = node_tree();
    tree.checkpoint(b"{\"policyName\":\"static\",\"defaultCpuSet\":\"0-");
    let scanned = snapshot_blocking(&tree.host(), Pods::Cgroups, &offline(Some(NODE))).unwrap();
    let file = scanned.snapshot.host.checkpoint.ok().unwrap();
    let e = file.content.as_ref().unwrap_err().to_string();
    assert!(e.starts_with("invalid JSON"), "{e}");
    assert_eq!(file.state.as_ref().unwrap_err().to_string(), e);
    let records = statuses(&scanned.records);
    assert_eq!(records[0], ("checkpoint", "ok".to_string()));
    assert_eq!(records[4], ("cgroups", "ok".to_string()));
    assert_eq!(scanned.snapshot.host.cgroups.ok().unwrap().pods.len(), 2);
}

/// No cgroup hierarchy: `cgroups` is `missing` with the path looked for, and the checkpoint
/// and the pods are still read.
#[test]
fn no_cgroup_tree_is_missing_and_the_rest_is_read() {
    let tree = node_tree();
    std::fs::remove_dir_all(tree.path("sys/fs/cgroup")).unwrap();
    let path = tree.pods_file(&pods());
    let scanned = snapshot_blocking(&tree.host(), Pods::File(path), &offline(Some(NODE))).unwrap();
    assert_eq!(
        scanned.snapshot.host.cgroups,
        Observed::Missing {
            path: "/sys/fs/cgroup".into()
        }
    );
    assert_eq!(scanned.records.get("cgroups").unwrap().status, "missing");
    assert!(!scanned.records.get("cgroups").unwrap().failed);
    assert_eq!(scanned.records.get("checkpoint").unwrap().status, "ok");
    assert_eq!(uids(&scanned.snapshot), [uid("live"), uid("done")]);
}

/// The daemon's way (`snapshot` on the runtime, host reads on a blocking thread) gives the
/// same snapshot and records as a one-shot command's (`snapshot_blocking`, inline).
#[tokio::test]
async fn the_blocking_pool_and_inline_reads_agree() {
    let tree = node_tree();
    let host = tree.host();
    let pods = Pods::Given {
        node: NODE.into(),
        pods: given(&pods()),
        source: PodSource::Api,
    };
    let opts = offline(None);
    let pooled = snapshot::<ListDirectory>(&host, pods.clone(), None, &opts)
        .await
        .unwrap();
    let (inline_host, inline_pods, inline_opts) = (host.clone(), pods, opts.clone());
    let inline = tokio::task::spawn_blocking(move || snapshot_blocking(&inline_host, inline_pods, &inline_opts))
        .await
        .unwrap()
        .unwrap();
    let mut a = pooled.snapshot;
    let mut b = inline.snapshot;
    // Taken a moment apart: the clock and the file's age differ.
    b.taken_at = a.taken_at;
    for f in [&mut a, &mut b] {
        if let Observed::Ok(file) = &mut f.host.checkpoint {
            file.age_seconds = None;
        }
    }
    assert_eq!(a, b);
    assert_eq!(statuses(&pooled.records), statuses(&inline.records));
}

/// `HostReads::PodsOnly`: no host file is read: only the pods, and no host source is
/// recorded (`snapshot_blocking` keeps it, reading inline only what it would read).
#[test]
fn pods_only_reads_no_host_file() {
    let tree = node_tree();
    let path = tree.pods_file(&pods());
    let opts = Options {
        host_reads: HostReads::PodsOnly,
        ..offline(Some(NODE))
    };
    let scanned = snapshot_blocking(&tree.host(), Pods::File(path), &opts).unwrap();
    assert_eq!(uids(&scanned.snapshot), [uid("live"), uid("done")]);
    assert_eq!(
        scanned.snapshot.host.checkpoint,
        Observed::Missing {
            path: "/var/lib/kubelet/cpu_manager_state".into()
        }
    );
    assert_eq!(
        scanned.snapshot.host.cgroups,
        Observed::Missing {
            path: "/sys/fs/cgroup".into()
        }
    );
    assert_eq!(
        statuses(&scanned.records),
        [("pods", "file".to_string()), ("kubelet_version", "unknown".into())]
    );
}

/// `HostReads::PodsOnly` with pods of a known node: the snapshot is that node's whatever the
/// options name, liveness is the given source, and no host source is recorded.
#[test]
fn pods_only_takes_the_node_the_known_pods_name() {
    let tree = node_tree();
    let pods = Pods::Given {
        node: "worker-2".into(),
        pods: given(&pods()),
        source: PodSource::Api,
    };
    let opts = Options {
        host_reads: HostReads::PodsOnly,
        ..offline(Some(NODE))
    };
    let scanned = snapshot_blocking(&tree.host(), pods, &opts).unwrap();
    assert_eq!(scanned.snapshot.node, "worker-2");
    assert_eq!(scanned.snapshot.pods.source, PodSource::Api);
    assert_eq!(uids(&scanned.snapshot), [uid("away")]);
    assert_eq!(
        statuses(&scanned.records),
        [("pods", "api".to_string()), ("kubelet_version", "unknown".into())]
    );
}

/// Local-dir roots without a pod list: measured (`LocalDirs::Measure`), a note says they are
/// not judged; skipped (`LocalDirs::Skip`), nothing was measured and no note says so.
#[test]
fn roots_measured_without_a_pod_list_are_noted_only_when_measured() {
    let tree = node_tree();
    let note = "local-dir roots /mnt/spark were measured but not judged";
    let mut opts = offline(Some(NODE));
    opts.host.local_dir_roots = vec!["/mnt/spark".into()];
    let scanned = snapshot_blocking(&tree.host(), Pods::Cgroups, &opts).unwrap();
    assert_eq!(scanned.snapshot.pods.source, PodSource::Cgroups);
    assert_eq!(
        scanned
            .snapshot
            .notes
            .iter()
            .filter(|n| n.to_string().starts_with(note))
            .count(),
        1
    );

    opts.host.local_dirs = collect::LocalDirs::Skip;
    let scanned = snapshot_blocking(&tree.host(), Pods::Cgroups, &opts).unwrap();
    assert!(!scanned.snapshot.notes.iter().any(|n| n.to_string().starts_with(note)));
}
