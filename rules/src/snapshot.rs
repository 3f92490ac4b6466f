//! What the agent saw on one node at one moment, in our own small types.
//!
//! The agent's collectors fill a [`NodeSnapshot`]; the rules only read it. Each input is an
//! [`Observed`] value, so a source that is absent or failed is explicit and never hides the
//! others. Paths are as the host sees them (`/var/lib/kubelet/cpu_manager_state`), whatever
//! root the agent read them under.
//!
//! The types are grouped by where they come from, one file each, and re-exported here:
//! [`kubelet_files`] (the kubelet's checkpoints and configuration), [`cgroups`] (the pod cgroup
//! tree and its processes), [`pods`] (pods as the rules read them), [`spark_apps`] (what the node
//! shows of Spark applications beyond their pods) and [`api`] (the API server's probes,
//! webhooks, claims, Events and other nodes).

use std::collections::BTreeMap;

use crate::topology::CpuTopology;
use crate::validate::CpuManagerConfig;

pub mod api;
pub mod cgroups;
pub mod kubelet_files;
pub mod notes;
pub mod pods;
pub mod spark_apps;
pub mod storage;

pub use api::{ApiObservation, ClaimObject, NodeStatus, PodEvent, ProbeSample, WebhookInfo};
pub use cgroups::{CgroupTree, CgroupVersion, ContainerCgroup, PodCgroup, ProcessInfo, Runtime, Subtree};
pub use kubelet_files::{
    CheckpointFile, DEFAULT_RUNTIME_ENDPOINT, DriverFile, FoundBy, KubeletConfig, ManagerFile, ManagerFiles,
};
pub use notes::{Liveness, Note};
pub use pods::{
    ConfMount, ConfVolume, ContainerInfo, ContainerKind, ContainerPort, LocalDirVolume, OwnerRef, PodInfo, PodPhase,
    PodSource, QosClass, SparkRole, spark_version_of_image,
};
pub use spark_apps::{DriverLookup, LocalDir, LookupMethod, SparkConf, SparkConfRead};
pub use storage::{
    DirBacking, FileSystemUse, ImageFs, KubeletCount, KubeletStats, Listener, LocalStorage, MeasuredBy, PodStorage,
    Remembered, StorageDir, UnseenDir,
};

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

/// Everything the rules look at: what was read from the node's files ([`HostSnapshot`]), the
/// pods bound to it ([`PodsSnapshot`]) and what the API server told ([`ApiSnapshot`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSnapshot {
    pub node: String,
    /// When the snapshot was taken, unix seconds.
    pub taken_at: i64,
    pub host: HostSnapshot,
    pub pods: PodsSnapshot,
    pub api: ApiSnapshot,
    /// Things the collectors noticed and skipped (a cgroup that vanished mid-scan, an
    /// unparsable file): shown in the report, never fatal.
    pub notes: Vec<Note>,
}

/// What was read from the node itself: the kubelet's files and socket, sysfs, cgroups, procfs
/// and the Spark scratch directories.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSnapshot {
    pub checkpoint: Observed<CheckpointFile>,
    /// The memory, device and DRA managers' checkpoints, and the configured DRA drivers'.
    pub managers: ManagerFiles,
    pub kubelet: Observed<KubeletConfig>,
    /// Online CPUs with topology (sysfs).
    pub cpus: Observed<CpuTopology>,
    pub cgroups: Observed<CgroupTree>,
    /// procfs status (its data lives in the cgroup tree's processes).
    pub procfs: Observed<()>,
    /// The kubelet's own view (its PodResources API).
    pub kubelet_view: Observed<crate::kubelet_view::KubeletView>,
    /// Spark scratch directories on the node (kubelet emptyDir volumes named
    /// `spark-local-dir-*`, and the configured hostPath roots).
    pub local_dirs: Observed<Vec<LocalDir>>,
    /// The running Spark pods' local dirs measured over a window (the daemon's; a one-shot scan
    /// has no window: `NotApplicable`).
    pub local_storage: Observed<LocalStorage>,
    /// TCP ports listening in the node's network namespace (`/proc/1/net/tcp`, `tcp6`).
    pub listeners: Observed<Vec<Listener>>,
}

/// The pods bound to the node, where that list came from, and what the node's files tell of
/// their Spark drivers.
#[derive(Debug, Clone, PartialEq)]
pub struct PodsSnapshot {
    /// Where liveness comes from: the API, a pods file, the cgroups, the kubelet's PodResources.
    pub source: PodSource,
    /// Why there is no pod list when `source` is neither `Api` nor `File`: `NotApplicable`
    /// when none was asked for (`--offline`, no API configured), `Error` when it could not be
    /// read (the API failed, the daemon's watch has not synced). Not read with a pod list.
    /// Decides the coverage of the rules that need one ([`crate::coverage`]).
    pub list: Observed<()>,
    /// Pods bound to this node (empty with [`PodSource::Cgroups`] and
    /// [`PodSource::PodResources`]).
    pub bound: Vec<PodInfo>,
    /// Spark configurations of the driver pods on this node, by pod UID.
    pub spark_confs: BTreeMap<String, SparkConf>,
    /// Whether the `spark.properties` of each unfinished driver bound here was read, by pod
    /// UID (the `spark_conf` collector; empty without a pod list). Decides the coverage of
    /// `slow-pod-admission` ([`crate::coverage::Source::SparkConf`]).
    pub spark_conf_reads: BTreeMap<String, SparkConfRead>,
    /// Whether the kubelet set up the configuration volume of the drivers here that wait to
    /// start, by pod UID.
    pub conf_mounts: BTreeMap<String, ConfMount>,
}

impl PodsSnapshot {
    /// What the rules that judge the API server ([`crate::rules::RuleInfo::judges_the_api`])
    /// read of the pods: the Spark drivers (and any pod with a Spark configuration read or
    /// looked for), their configurations, where the pods came from. The daemon judges those
    /// rules alone on this when only the API's observation changed; a test holds their
    /// verdicts on it to their verdicts on the whole snapshot.
    pub fn for_api_rules(&self) -> PodsSnapshot {
        let keep = |p: &&PodInfo| {
            crate::spark::is_driver(p)
                || self.spark_confs.contains_key(&p.uid)
                || self.spark_conf_reads.contains_key(&p.uid)
                || self.conf_mounts.contains_key(&p.uid)
        };
        PodsSnapshot {
            source: self.source.clone(),
            list: self.list.clone(),
            bound: self.bound.iter().filter(keep).cloned().collect(),
            spark_confs: self.spark_confs.clone(),
            spark_conf_reads: self.spark_conf_reads.clone(),
            conf_mounts: self.conf_mounts.clone(),
        }
    }
}

/// What the API server told: how it answers from this node, the kubelet's version on the Node
/// object, and the lookups made for this node's pods.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSnapshot {
    /// The API server as this node sees it (`NotApplicable` offline).
    pub server: Observed<ApiObservation>,
    /// The kubelet's version (the Node's `status.nodeInfo.kubeletVersion`; unknown offline):
    /// which of its answers a comparison may rely on ([`crate::kubelet_version`]).
    pub kubelet_version: Observed<crate::kubelet_version::VersionReading>,
    /// What the API server told about this node's pods: their drivers, the Events of drivers
    /// that wait to start, the claims and nodes they name (empty offline).
    pub lookups: ApiLookups,
}

/// What the API server told about the pods of one node: looked up by the scan (one-shot) or by
/// the daemon's API work, and judged by the rules as one value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiLookups {
    /// Driver lookups of the Spark executors on this node, by executor pod UID.
    pub drivers: BTreeMap<String, DriverLookup>,
    /// Every driver pod of the Spark applications that have a driver on this node, wherever
    /// they run, by application id (`spark-app-selector`; a driver without one that a Job runs:
    /// `job:<the Job's UID>`, see [`crate::spark::app_drivers_key`]); for `duplicate-driver` and
    /// `driver-blocked-by-partition`. Shared with the directory they were found in.
    pub app_drivers: BTreeMap<String, Vec<std::sync::Arc<PodInfo>>>,
    /// Warning Events of the driver pods on this node that wait to start (`Pending`), by pod
    /// UID; for `driver-blocked-by-partition`.
    pub pod_events: BTreeMap<String, Vec<PodEvent>>,
    /// The ResourceClaims of the prepared claims whose pods are gone, by `namespace/name`, as
    /// the API server shows them (none offline); for `stale-dra-claim`.
    pub resource_claims: BTreeMap<String, ClaimObject>,
    /// The other nodes that drivers of this node's applications run on, by name, as the API
    /// server shows them; for `driver-blocked-by-partition`.
    pub nodes: BTreeMap<String, NodeStatus>,
}

impl ApiLookups {
    /// What concerns `pods`: the driver lookups and pod Events of those pods only; the
    /// applications' drivers, the claims and the nodes whole (they are keyed by application,
    /// claim and node, not by a pod here).
    pub fn for_pods(&self, pods: &[PodInfo]) -> ApiLookups {
        let here: std::collections::HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        let keep = |uid: &String| here.contains(uid.as_str());
        ApiLookups {
            drivers: self
                .drivers
                .iter()
                .filter(|(uid, _)| keep(uid))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            app_drivers: self.app_drivers.clone(),
            pod_events: self
                .pod_events
                .iter()
                .filter(|(uid, _)| keep(uid))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            resource_claims: self.resource_claims.clone(),
            nodes: self.nodes.clone(),
        }
    }
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
            host: HostSnapshot {
                checkpoint: missing("/var/lib/kubelet/cpu_manager_state"),
                managers: ManagerFiles::missing(),
                kubelet: missing("/var/lib/kubelet/config.yaml"),
                cpus: missing("/sys/devices/system/cpu/online"),
                cgroups: missing("/sys/fs/cgroup"),
                procfs: missing("/proc"),
                kubelet_view: missing("/var/lib/kubelet/pod-resources/kubelet.sock"),
                local_dirs: missing("/var/lib/kubelet/pods"),
                local_storage: Observed::NotApplicable {
                    reason: "not measured".into(),
                },
                listeners: missing("/proc/1/net/tcp"),
            },
            pods: PodsSnapshot {
                source: PodSource::Cgroups,
                list: Observed::NotApplicable {
                    reason: "no pod list given".into(),
                },
                bound: Vec::new(),
                spark_confs: BTreeMap::new(),
                spark_conf_reads: BTreeMap::new(),
                conf_mounts: BTreeMap::new(),
            },
            api: ApiSnapshot {
                server: Observed::NotApplicable {
                    reason: "not probed".into(),
                },
                kubelet_version: Observed::NotApplicable {
                    reason: "no Node object read".into(),
                },
                lookups: ApiLookups::default(),
            },
            notes: Vec::new(),
        }
    }

    /// The pod with `uid` in the pod list.
    pub fn pod(&self, uid: &str) -> Option<&PodInfo> {
        self.pods.bound.iter().find(|p| p.uid == uid)
    }

    /// The CPU manager settings in force: the kubelet's, or the defaults when unknown.
    pub fn cpu_manager(&self) -> CpuManagerConfig {
        self.host
            .kubelet
            .ok()
            .map(|k| k.cpu_manager.clone())
            .unwrap_or_default()
    }

    /// The pod and container that own runtime container id `id`: from the pod list's
    /// statuses, else from the cgroup tree (pod only).
    pub fn owner_of_container_id(&self, id: &str) -> Option<(String, Option<String>)> {
        for pod in &self.pods.bound {
            if let Some(c) = pod.containers.iter().find(|c| c.container_id.as_deref() == Some(id)) {
                return Some((pod.uid.clone(), Some(c.name.clone())));
            }
        }
        let tree = self.host.cgroups.ok()?;
        tree.container(id).map(|(pod, _)| (pod.uid.clone(), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            ..Default::default()
        }
    }

    #[test]
    fn lookups_for_pods_keep_the_drivers_and_events_of_those_pods_and_the_rest_whole() {
        let unknown = || DriverLookup::Unknown { reason: "r".into() };
        let lookups = ApiLookups {
            drivers: [("e1".to_string(), unknown()), ("gone".to_string(), unknown())].into(),
            app_drivers: [("spark-1".to_string(), vec![std::sync::Arc::new(pod("d-elsewhere"))])].into(),
            pod_events: [
                ("d1".to_string(), vec![PodEvent::default()]),
                ("gone".to_string(), vec![PodEvent::default()]),
            ]
            .into(),
            resource_claims: [("ns/claim".to_string(), ClaimObject::Gone)].into(),
            nodes: [("worker-2".to_string(), NodeStatus::default())].into(),
        };
        let got = lookups.for_pods(&[pod("e1"), pod("d1")]);
        assert_eq!(got.drivers.keys().collect::<Vec<_>>(), ["e1"]);
        assert_eq!(got.pod_events.keys().collect::<Vec<_>>(), ["d1"]);
        assert_eq!(got.app_drivers, lookups.app_drivers);
        assert_eq!(got.resource_claims, lookups.resource_claims);
        assert_eq!(got.nodes, lookups.nodes);
        assert_eq!(lookups.for_pods(&[]).drivers, BTreeMap::new());
    }
}
