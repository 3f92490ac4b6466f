//! The kubelet's own view of its CPU assignments: what its PodResources API answers.
//!
//! The kubelet keeps the CPU manager's state in memory and writes `cpu_manager_state` only
//! when that changes; at a restart the file wins. Its PodResources API (`v1.PodResourcesLister`
//! on `/var/lib/kubelet/pod-resources/kubelet.sock`) shows the memory: `List` gives the pods it
//! considers active with each container's exclusively pinned CPUs (`cpu_ids`, empty on the
//! shared pool from 1.23; before, a shared-pool container is listed with the whole shared
//! pool), `GetAllocatableResources` all CPUs minus the reserved ones (from 1.26; before, the
//! CPUs unassigned when the kubelet started: [`crate::kubelet_version`]). The agent reads it
//! into a [`KubeletView`]; this module only holds the types and the pure questions asked of
//! them.
//!
//! `List` names pods by namespace and name, not UID, while the checkpoint keys them by UID.
//! [`KubeletView::uid_of`] ties the two together: the pod list's (or the daemon's last known
//! list's) UID for the name, else the kubelet's log directory `/var/log/pods/<ns>_<name>_<uid>`,
//! else the checkpoint entry whose container name and CPUs the kubelet lists for that pod (the
//! file and the memory agree but for the divergence that `kubelet-state-divergence` reports).

use crate::CpuSet;
use crate::checkpoint::{CpuState, EntryKey};
use crate::snapshot::Observed;

/// One container as the kubelet lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct KubeletContainer {
    pub name: String,
    /// Its exclusive CPUs (`cpu_ids`), empty on the shared pool.
    pub cpus: CpuSet,
    /// Its memory blocks (`memory`, filled by the memory manager's Static policy).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<KubeletMemory>,
    /// Its devices (`devices`, from device plugins), one entry per resource and NUMA node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<KubeletDevices>,
}

/// A memory block the kubelet lists for a container (`ContainerMemory`).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct KubeletMemory {
    /// `memory` or `hugepages-<size>`.
    pub resource: String,
    pub bytes: u64,
    /// The NUMA nodes of the block (`topology`), sorted.
    pub numa_nodes: Vec<i64>,
}

/// Devices of one resource the kubelet lists for a container (`ContainerDevices`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct KubeletDevices {
    /// `nvidia.com/gpu`, ...
    pub resource: String,
    pub ids: Vec<String>,
    /// The NUMA nodes of the devices (`topology`), sorted.
    pub numa_nodes: Vec<i64>,
}

/// One pod the kubelet considers active.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct KubeletPod {
    pub namespace: String,
    pub name: String,
    /// Its UIDs as far as the agent could learn them without the kubelet (which does not say):
    /// see [`UidSource`]. Two when a pod of the same name was recreated and the old one's
    /// directory is still there.
    pub uids: Vec<String>,
    /// Where `uids` came from.
    pub uid_source: Option<UidSource>,
    pub containers: Vec<KubeletContainer>,
}

impl KubeletPod {
    /// `namespace/name`.
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The CPUs the kubelet pinned container `name` to, when it lists the container.
    pub fn container_cpus(&self, name: &str) -> Option<&CpuSet> {
        self.containers.iter().find(|c| c.name == name).map(|c| &c.cpus)
    }
}

/// Where a listed pod's UID came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UidSource {
    /// The pod list (API, file) or the daemon's last known list of this node's pods.
    PodList,
    /// The kubelet's log directory `/var/log/pods/<namespace>_<name>_<uid>`.
    LogDir,
}

/// What the kubelet's PodResources API answered.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletView {
    /// Host path of the socket.
    pub socket: String,
    /// `List`: the pods the kubelet considers active.
    pub pods: Vec<KubeletPod>,
    /// `GetAllocatableResources`' CPUs (`NotApplicable` on a kubelet without the call). Every
    /// CPU the kubelet may hand out only from 1.26: ask
    /// [`crate::kubelet_version::allocatable_is_all_cpus`] before comparing it with anything.
    pub allocatable_cpus: Observed<CpuSet>,
    /// The checkpoint file was rewritten between the agent's reading of it and the kubelet's
    /// answer: comparing the two would compare two moments.
    pub checkpoint_changed: bool,
    /// When `List` answered, unix seconds.
    pub listed_at: i64,
}

/// A checkpoint entry's owner as the kubelet lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed<'a> {
    /// The kubelet lists the pod (found by how).
    Pod(&'a KubeletPod, Matched),
    /// The kubelet lists no pod with this UID, and every pod it lists has a known UID or holds
    /// its CPUs elsewhere: not active, in the kubelet's own view.
    NotListed,
    /// Cannot tell: a listed pod's UID is unknown and could be this one.
    Unknown,
}

/// How a checkpoint entry was tied to a listed pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// By the pod's UID (pod list, log directory).
    Uid,
    /// By container name and CPUs (no UID known for the listed pod).
    Cpus,
    /// By container name and the memory or devices it holds (no UID known for the listed pod).
    Holdings,
}

/// How a listed pod of unknown UID compares with a checkpoint entry's holdings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// A container of the entry's name holds exactly what the entry holds: the same pod.
    Same,
    /// It holds some of the same things in another shape: the file and the kubelet's memory
    /// disagree about them, which is not for liveness to settle.
    Overlapping,
    /// Nothing in common.
    Unrelated,
}

impl KubeletView {
    /// The listed pod with UID `uid` for an entry of a checkpoint other than the CPU
    /// manager's: by UID, else among pods of unknown UID by what `holds` says of each.
    pub fn listed_by(&self, uid: &str, holds: impl Fn(&KubeletPod) -> Holds) -> Listed<'_> {
        if let Some(p) = self.pods.iter().find(|p| p.uids.iter().any(|u| u == uid)) {
            return Listed::Pod(p, Matched::Uid);
        }
        let mut overlapping = false;
        for p in self.pods.iter().filter(|p| p.uids.is_empty()) {
            match holds(p) {
                Holds::Same => return Listed::Pod(p, Matched::Holdings),
                Holds::Overlapping => overlapping = true,
                Holds::Unrelated => {}
            }
        }
        if overlapping {
            Listed::Unknown
        } else {
            Listed::NotListed
        }
    }

    /// Every CPU the kubelet has pinned a listed container to.
    pub fn pinned_cpus(&self) -> CpuSet {
        self.pods
            .iter()
            .flat_map(|p| &p.containers)
            .fold(CpuSet::new(), |acc, c| acc.union(&c.cpus))
    }

    /// The listed pod with UID `uid`, if the kubelet lists it: by UID, else (for a pod whose
    /// UID is unknown) by a container of the same name on exactly the entry's CPUs.
    pub fn uid_of<'a>(&'a self, uid: &str, state: &CpuState) -> Listed<'a> {
        if let Some(p) = self.pods.iter().find(|p| p.uids.iter().any(|u| u == uid)) {
            return Listed::Pod(p, Matched::Uid);
        }
        // The entry's exclusive containers, to match the kubelet's by name and CPUs.
        let entries: Vec<(&str, &CpuSet)> = state
            .assignments
            .iter()
            .filter_map(|a| match &a.key {
                EntryKey::Container { pod_uid, container } if pod_uid == uid => Some((container.as_str(), &a.cpus)),
                _ => None,
            })
            .collect();
        let unknown: Vec<&KubeletPod> = self.pods.iter().filter(|p| p.uids.is_empty()).collect();
        // A kubelet that reports no exclusive CPU at all while the file holds some (one too old
        // to fill `cpu_ids`) cannot be matched by CPUs: a pod of unknown UID may be this one.
        if !unknown.is_empty() && !entries.is_empty() && self.pinned_cpus().is_empty() {
            return Listed::Unknown;
        }
        for p in &unknown {
            let same = entries
                .iter()
                .any(|(name, cpus)| !cpus.is_empty() && p.container_cpus(name) == Some(*cpus));
            if same {
                return Listed::Pod(p, Matched::Cpus);
            }
        }
        // A listed pod of unknown UID holds some of these CPUs in a different shape: the file
        // and the memory disagree about it, which is not for liveness to settle.
        let mine = entries.iter().fold(CpuSet::new(), |acc, (_, c)| acc.union(c));
        let overlaps = unknown
            .iter()
            .flat_map(|p| &p.containers)
            .any(|c| !c.cpus.intersection(&mine).is_empty());
        // A listed pod of unknown UID without exclusive CPUs could be this pod only if the
        // kubelet dropped its CPUs from memory but not from the file: divergence again, not
        // liveness. Every other way, the pod is not among those the kubelet keeps active.
        if overlaps { Listed::Unknown } else { Listed::NotListed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Checkpoint;

    fn state(json: &str) -> CpuState {
        Checkpoint::parse(json.as_bytes()).unwrap().state().unwrap()
    }

    fn pod(ns: &str, name: &str, uids: &[&str], containers: &[(&str, &str)]) -> KubeletPod {
        crate::rules::testkit::kubelet_pod(ns, name, uids, containers)
    }

    fn view(pods: Vec<KubeletPod>) -> KubeletView {
        crate::rules::testkit::kubelet_view(pods, None)
    }

    #[test]
    fn ties_entries_to_listed_pods_by_uid_then_by_cpus() {
        // checksum is not verified by state(); any value parses.
        let s = state(
            r#"{"policyName":"static","defaultCpuSet":"0-1,8-15","entries":{"u-live":{"app":"2-3"},"u-named":{"app":"4-5"},"u-gone":{"app":"6-7"}},"checksum":1}"#,
        );
        let v = view(vec![
            pod("spark", "exec-1", &[], &[("app", "2-3")]),
            pod("spark", "exec-2", &["u-named"], &[("app", "4-5")]),
        ]);
        assert!(matches!(v.uid_of("u-named", &s), Listed::Pod(p, Matched::Uid) if p.name == "exec-2"));
        assert!(matches!(v.uid_of("u-live", &s), Listed::Pod(p, Matched::Cpus) if p.name == "exec-1"));
        assert_eq!(v.uid_of("u-gone", &s), Listed::NotListed);
        assert_eq!(v.pinned_cpus().to_string(), "2-5");
    }

    #[test]
    fn an_unknown_pod_on_overlapping_cpus_leaves_it_open() {
        let s = state(r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"u-a":{"app":"2-3"}},"checksum":1}"#);
        // The kubelet pins a pod of unknown UID to 3-4: not the entry's shape, but its CPUs.
        let v = view(vec![pod("spark", "exec-1", &[], &[("app", "3-4")])]);
        assert_eq!(v.uid_of("u-a", &s), Listed::Unknown);
        // Same name, same CPUs, another container name: no match, still overlapping.
        let v = view(vec![pod("spark", "exec-1", &[], &[("other", "2-3")])]);
        assert_eq!(v.uid_of("u-a", &s), Listed::Unknown);
        // A kubelet that pins nothing: pods of unknown UID could be anyone.
        let v = view(vec![pod("spark", "exec-1", &[], &[("app", "")])]);
        assert_eq!(v.uid_of("u-a", &s), Listed::Unknown);
        // Known UIDs elsewhere and no overlap: not listed.
        let v = view(vec![pod("spark", "exec-1", &["u-b"], &[("app", "2-3")])]);
        assert_eq!(v.uid_of("u-a", &s), Listed::NotListed);
    }
}
