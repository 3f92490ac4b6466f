//! Builders for the rules' table tests: a static-policy node in a few lines.

use crate::CpuSet;
use crate::checkpoint::{Assignment, CpuState, EntryKey};
use crate::snapshot::*;
use crate::topology::{CpuInfo, CpuTopology};
use crate::validate::CpuManagerConfig;

pub struct SnapshotBuilder {
    snap: NodeSnapshot,
}

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

/// A pod in the list: `uid`, `default/<name>`, phase, containers `(name, container id)`.
pub fn pod(uid: &str, name: &str, phase: &str, containers: &[(&str, &str)]) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        namespace: "default".into(),
        name: name.into(),
        node_name: Some("node-a".into()),
        phase: phase.into(),
        qos_class: Some("Guaranteed".into()),
        containers: containers
            .iter()
            .map(|(n, id)| ContainerInfo {
                name: n.to_string(),
                kind: Some(ContainerKind::Regular),
                cpu_request_millis: Some(1000),
                cpu_limit_millis: Some(1000),
                container_id: (!id.is_empty()).then(|| id.to_string()),
                state: Some(if phase == "Running" { "running" } else { "terminated" }.into()),
                exit_code: None,
            })
            .collect(),
        ..Default::default()
    }
}

/// A container leaf with `cpus` as its cpuset and `procs` processes.
pub fn leaf(id: &str, cpus_text: &str, procs: u32) -> ContainerCgroup {
    ContainerCgroup {
        id: id.into(),
        runtime: Runtime::Containerd,
        path: format!("/sys/fs/cgroup/cpuset/kubepods/pod/{id}"),
        cpus: (!cpus_text.is_empty()).then(|| cpus(cpus_text)),
        effective_cpus: (!cpus_text.is_empty()).then(|| cpus(cpus_text)),
        processes: (0..procs)
            .map(|i| ProcessInfo {
                pid: 1000 + i,
                cpus_allowed: Some(cpus(cpus_text)),
            })
            .collect(),
    }
}

/// A pod cgroup with leaves.
pub fn pod_cgroup(uid: &str, leaves: Vec<ContainerCgroup>) -> PodCgroup {
    PodCgroup {
        uid: uid.into(),
        qos: "guaranteed".into(),
        path: format!("/sys/fs/cgroup/cpuset/kubepods/pod{uid}"),
        pids: vec![],
        containers: leaves,
    }
}

impl SnapshotBuilder {
    /// A static-policy node whose online CPUs are the default set plus every entry, one
    /// core per CPU on one socket, no reserved CPUs, pods judged from cgroups (none).
    pub fn static_node(default: &str, entries: &[(&str, &str, &str)]) -> Self {
        let state = CpuState {
            policy_name: "static".into(),
            default_cpus: cpus(default),
            assignments: entries
                .iter()
                .map(|(p, c, s)| Assignment {
                    key: EntryKey::Container {
                        pod_uid: p.to_string(),
                        container: c.to_string(),
                    },
                    cpus: cpus(s),
                })
                .collect(),
            pod_assignments: vec![],
        };
        Self::from_state(state)
    }

    pub fn from_state(state: CpuState) -> Self {
        let online = state
            .assignments
            .iter()
            .fold(state.default_cpus.clone(), |acc, a| acc.union(&a.cpus));
        let topo = CpuTopology::new(
            online
                .iter()
                .map(|c| CpuInfo {
                    cpu: c,
                    core: c,
                    socket: 0,
                })
                .collect(),
        );
        let content = crate::Checkpoint::parse(state.to_checkpoint_json().as_bytes());
        let mut snap = NodeSnapshot::empty("node-a", 1_700_000_000);
        snap.checkpoint = Observed::Ok(CheckpointFile {
            path: "/var/lib/kubelet/cpu_manager_state".into(),
            age_seconds: Some(3600.0),
            content,
        });
        snap.cpus = Observed::Ok(topo);
        snap.kubelet = Observed::Ok(KubeletConfig {
            path: Some("/var/lib/kubelet/config.yaml".into()),
            found_by: "default".into(),
            cpu_manager: CpuManagerConfig {
                policy: "static".into(),
                ..Default::default()
            },
            cgroup_driver: "cgroupfs".into(),
            cgroup_root: "/".into(),
        });
        snap.cgroups = Observed::Ok(CgroupTree {
            version: CgroupVersion::V1,
            driver: "cgroupfs".into(),
            kubepods: "/sys/fs/cgroup/cpuset/kubepods".into(),
            pods: vec![],
        });
        snap.procfs = Observed::Ok(());
        SnapshotBuilder { snap }
    }

    /// Uses a pod list (source `file`).
    pub fn with_pod_list(mut self, pods: &[PodInfo]) -> Self {
        self.snap.pod_source = PodSource::File;
        self.snap.pods = pods.to_vec();
        self
    }

    pub fn with_pod_cgroups(mut self, pods: Vec<PodCgroup>) -> Self {
        if let Observed::Ok(tree) = &mut self.snap.cgroups {
            tree.pods = pods;
        }
        self
    }

    pub fn with_cpu_manager(mut self, f: impl FnOnce(&mut CpuManagerConfig)) -> Self {
        if let Observed::Ok(k) = &mut self.snap.kubelet {
            f(&mut k.cpu_manager);
        }
        self
    }

    pub fn with_online(mut self, online: &str) -> Self {
        self.snap.cpus = Observed::Ok(CpuTopology::new(
            cpus(online)
                .iter()
                .map(|c| CpuInfo {
                    cpu: c,
                    core: c,
                    socket: 0,
                })
                .collect(),
        ));
        self
    }

    pub fn checkpoint_age(mut self, seconds: f64) -> Self {
        if let Observed::Ok(f) = &mut self.snap.checkpoint {
            f.age_seconds = Some(seconds);
        }
        self
    }

    pub fn with_raw_checkpoint(mut self, bytes: &[u8]) -> Self {
        if let Observed::Ok(f) = &mut self.snap.checkpoint {
            f.content = crate::Checkpoint::parse(bytes);
        }
        self
    }

    pub fn build(self) -> NodeSnapshot {
        self.snap
    }
}
