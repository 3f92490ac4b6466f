//! The pod cgroups under the kubelet's `kubepods` cgroup, their container leaves and the
//! processes in them (with each process's CPU affinity).

use crate::CpuSet;

/// cgroup v1 or v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// The container runtime a cgroup leaf belongs to, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Containerd,
    Crio,
    Docker,
    /// A bare 64-hex id (cgroupfs driver): containerd or docker.
    Unknown,
}

/// A process in a container's cgroup.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProcessInfo {
    pub pid: u32,
    /// `Cpus_allowed_list` from `/proc/<pid>/status`; `None` when the process exited first.
    pub cpus_allowed: Option<CpuSet>,
}

/// A container's cgroup leaf.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ContainerCgroup {
    /// The runtime's container id (no `containerd://` prefix).
    pub id: String,
    pub runtime: Runtime,
    /// Host path of the leaf directory.
    pub path: String,
    /// `cpuset.cpus` (`None`: empty, which on v2 means inherited).
    pub cpus: Option<CpuSet>,
    /// `cpuset.effective_cpus` (v1) or `cpuset.cpus.effective` (v2).
    pub effective_cpus: Option<CpuSet>,
    pub processes: Vec<ProcessInfo>,
}

/// A pod's cgroup and its container leaves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PodCgroup {
    pub uid: String,
    /// `guaranteed`, `burstable` or `besteffort`, from where the cgroup sits.
    pub qos: String,
    pub path: String,
    /// Processes directly in the pod cgroup (rare).
    pub pids: Vec<u32>,
    /// Each container leaf; its `processes` are the leaf's own, or, when it holds none, those of
    /// the cgroups nested below it at any depth (a container that runs systemd,
    /// Docker-in-Docker or kind nests cgroups below its leaf). Either way a container with a
    /// process anywhere below its leaf has one here.
    pub containers: Vec<ContainerCgroup>,
    /// Processes in the pod's other cgroups: neither the pod's own nor below a container leaf
    /// (CRI-O's conmon monitor, intermediate directories).
    pub other_pids: Vec<u32>,
    /// How the whole subtree was looked at.
    pub subtree: Subtree,
}

/// How a pod's whole cgroup subtree was looked at: at any depth, within a limit on the
/// directories visited (a pathological tree cannot stall a scan).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Subtree {
    /// cgroup directories visited, the pod's own included.
    pub dirs: usize,
    /// The walk stopped at its limit: what was not visited may hold processes, so the pod
    /// counts as alive.
    pub truncated: bool,
    /// cgroup v2's `cgroup.events` of the pod: `populated 1` means a process somewhere below,
    /// whatever the walk found (`None`: v1, or the file is missing).
    pub populated: Option<bool>,
}

impl PodCgroup {
    /// Processes found in the pod's cgroup subtree: the pod cgroup's own, its other cgroups',
    /// and each container's (see `containers`).
    pub fn process_count(&self) -> usize {
        self.pids.len() + self.other_pids.len() + self.containers.iter().map(|c| c.processes.len()).sum::<usize>()
    }

    /// Whether anything may still run in the pod's cgroups: a process found at any depth, the
    /// kernel saying the subtree is populated, or a walk that stopped before it saw everything.
    pub fn alive(&self) -> bool {
        self.process_count() > 0 || self.subtree.populated == Some(true) || self.subtree.truncated
    }

    /// Why [`alive`](Self::alive) says so, for evidence and refusals.
    pub fn alive_because(&self) -> Option<String> {
        let n = self.process_count();
        if n > 0 {
            Some(format!("{n} process{} in its cgroups", if n == 1 { "" } else { "es" }))
        } else if self.subtree.populated == Some(true) {
            Some("its cgroup.events says populated 1 (a process somewhere below)".into())
        } else if self.subtree.truncated {
            Some(format!(
                "its cgroup tree is larger than the {} directories looked at, so it may hold processes",
                self.subtree.dirs
            ))
        } else {
            None
        }
    }
}

/// The pod cgroups under the kubelet's `kubepods` cgroup.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CgroupTree {
    pub version: CgroupVersion,
    /// `cgroupfs` or `systemd`, as detected from the names.
    pub driver: String,
    /// Host path of the kubepods cgroup.
    pub kubepods: String,
    pub pods: Vec<PodCgroup>,
}

impl CgroupTree {
    /// The pod cgroup of `uid`.
    pub fn pod(&self, uid: &str) -> Option<&PodCgroup> {
        self.pods.iter().find(|p| p.uid == uid)
    }

    /// The container leaf with runtime id `id`, and its pod.
    pub fn container(&self, id: &str) -> Option<(&PodCgroup, &ContainerCgroup)> {
        self.pods
            .iter()
            .find_map(|p| p.containers.iter().find(|c| c.id == id).map(|c| (p, c)))
    }

    /// Every container leaf by its ID (the first, should two leaves share one): for callers
    /// that look up many IDs, where [`CgroupTree::container`] would search the tree each time
    /// (a 250-pod node has 1,000 leaves).
    pub fn containers_by_id(&self) -> std::collections::HashMap<&str, (&PodCgroup, &ContainerCgroup)> {
        let mut index = std::collections::HashMap::new();
        for p in &self.pods {
            for c in &p.containers {
                index.entry(c.id.as_str()).or_insert((p, c));
            }
        }
        index
    }
}
