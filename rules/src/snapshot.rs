//! What the agent saw on one node at one moment, in our own small types.
//!
//! The agent's collectors fill a [`NodeSnapshot`]; the rules only read it. Each input is an
//! [`Observed`] value, so a source that is absent or failed is explicit and never hides the
//! others. Paths are as the host sees them (`/var/lib/kubelet/cpu_manager_state`), whatever
//! root the agent read them under.

use std::collections::BTreeMap;

use crate::CpuSet;
use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::topology::CpuTopology;
use crate::validate::CpuManagerConfig;

/// One input of the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed<T> {
    /// Read.
    Ok(T),
    /// Not there on this node (a normal outcome, like a node without the static policy).
    Missing { path: String },
    /// Does not apply here (why).
    NotApplicable { reason: String },
    /// Could not be read (where and why).
    Error { reason: String },
}

impl<T> Observed<T> {
    /// The value, when read.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Observed::Ok(v) => Some(v),
            _ => None,
        }
    }

    /// The report's word for this source: `ok`, `missing`, `not applicable: ..`, `error: ..`.
    pub fn status(&self) -> String {
        match self {
            Observed::Ok(_) => "ok".to_string(),
            Observed::Missing { .. } => "missing".to_string(),
            Observed::NotApplicable { reason } => format!("not applicable: {reason}"),
            Observed::Error { reason } => format!("error: {reason}"),
        }
    }
}

/// The checkpoint file as read.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFile {
    /// Host path of the file.
    pub path: String,
    /// Seconds since the file was last written (from its mtime), when known.
    pub age_seconds: Option<f64>,
    /// The parsed file, or why the kubelet could not read it either.
    pub content: Result<Checkpoint, CheckpointError>,
}

/// The kubelet's configuration as far as nodemedic uses it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KubeletConfig {
    /// Host path of the file it came from (`None`: defaults and flags only).
    pub path: Option<String>,
    /// Where the path came from: `cmdline` (the kubelet's `--config`) or `default`.
    pub found_by: String,
    pub cpu_manager: CpuManagerConfig,
    /// `cgroupDriver`: `cgroupfs` or `systemd`.
    pub cgroup_driver: String,
    /// `cgroupRoot` (`/` when unset).
    pub cgroup_root: String,
}

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
    pub containers: Vec<ContainerCgroup>,
}

impl PodCgroup {
    /// Live processes anywhere in the pod's cgroup.
    pub fn process_count(&self) -> usize {
        self.pids.len() + self.containers.iter().map(|c| c.processes.len()).sum::<usize>()
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
}

/// Init, regular or ephemeral container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerKind {
    Init,
    Regular,
    Ephemeral,
}

/// A container of a pod, from its spec and status.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ContainerInfo {
    pub name: String,
    pub kind: Option<ContainerKind>,
    pub cpu_request_millis: Option<u64>,
    pub cpu_limit_millis: Option<u64>,
    /// The runtime's id from `status.containerStatuses[].containerID`, without the scheme.
    pub container_id: Option<String>,
}

/// A pod, reduced to what the rules use.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node_name: Option<String>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub phase: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// `status.qosClass`, or computed from the spec when absent.
    pub qos_class: Option<String>,
    pub containers: Vec<ContainerInfo>,
    pub labels: BTreeMap<String, String>,
    /// Creation time, unix seconds.
    pub created_at: Option<i64>,
    /// When its last container terminated, unix seconds (finished pods).
    pub finished_at: Option<i64>,
}

impl PodInfo {
    /// Whether the pod has finished (its containers will not run again).
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase.as_str(), "Succeeded" | "Failed")
    }

    /// `namespace/name`.
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Where the pod list came from; it decides how liveness is judged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PodSource {
    /// The Kubernetes API.
    Api,
    /// A `kubectl get pods -o json` file.
    File,
    /// No pod list: a pod is alive when its cgroup has processes.
    Cgroups,
}

impl PodSource {
    /// The report's word: `api`, `file`, `cgroups`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PodSource::Api => "api",
            PodSource::File => "file",
            PodSource::Cgroups => "cgroups",
        }
    }
}

/// Everything the rules look at.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSnapshot {
    pub node: String,
    /// When the snapshot was taken, unix seconds.
    pub taken_at: i64,
    pub checkpoint: Observed<CheckpointFile>,
    pub kubelet: Observed<KubeletConfig>,
    /// Online CPUs with topology (sysfs).
    pub cpus: Observed<CpuTopology>,
    pub cgroups: Observed<CgroupTree>,
    /// procfs status (its data lives in the cgroup tree's processes).
    pub procfs: Observed<()>,
    pub pod_source: PodSource,
    /// Pods bound to this node (empty with [`PodSource::Cgroups`]).
    pub pods: Vec<PodInfo>,
    /// Things the collectors noticed and skipped (a cgroup that vanished mid-scan, an
    /// unparsable file): shown in the report, never fatal.
    pub notes: Vec<String>,
}

impl NodeSnapshot {
    /// An empty snapshot of `node` with every source missing; tests build on it.
    pub fn empty(node: &str, taken_at: i64) -> Self {
        fn missing<T>(p: &str) -> Observed<T> {
            Observed::Missing { path: p.to_string() }
        }
        NodeSnapshot {
            node: node.to_string(),
            taken_at,
            checkpoint: missing("/var/lib/kubelet/cpu_manager_state"),
            kubelet: missing("/var/lib/kubelet/config.yaml"),
            cpus: missing("/sys/devices/system/cpu/online"),
            cgroups: missing("/sys/fs/cgroup"),
            procfs: missing("/proc"),
            pod_source: PodSource::Cgroups,
            pods: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The pod with `uid` in the pod list.
    pub fn pod(&self, uid: &str) -> Option<&PodInfo> {
        self.pods.iter().find(|p| p.uid == uid)
    }

    /// The CPU manager settings in force: the kubelet's, or the defaults when unknown.
    pub fn cpu_manager(&self) -> CpuManagerConfig {
        self.kubelet.ok().map(|k| k.cpu_manager.clone()).unwrap_or_default()
    }

    /// The pod and container that own runtime container id `id`: from the pod list's
    /// statuses, else from the cgroup tree (pod only).
    pub fn owner_of_container_id(&self, id: &str) -> Option<(String, Option<String>)> {
        for pod in &self.pods {
            if let Some(c) = pod.containers.iter().find(|c| c.container_id.as_deref() == Some(id)) {
                return Some((pod.uid.clone(), Some(c.name.clone())));
            }
        }
        let tree = self.cgroups.ok()?;
        tree.container(id).map(|(pod, _)| (pod.uid.clone(), None))
    }
}
