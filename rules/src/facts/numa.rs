//! The node's CPUs by NUMA node and by what the CPU manager's static policy does with them:
//! the one count that the `nodemedic_exclusive_cpus` gauge, the published
//! `NodeResourceTopology` object and `exclusive-cpu-shortage` share.

use std::collections::BTreeMap;

use crate::CpuSet;
use crate::checkpoint::CpuState;
use crate::snapshot::{NodeSnapshot, Observed};

/// One NUMA node's CPUs, each online CPU in exactly one of the four sets but for a checkpoint
/// that contradicts itself (a CPU both free and assigned).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaCpus {
    /// The NUMA node's id.
    pub node: u32,
    /// Its online CPUs.
    pub online: CpuSet,
    /// Never handed out: the reserved CPUs (the kubelet's own word through
    /// `GetAllocatableResources` when it answered, else the configuration's).
    pub reserved: CpuSet,
    /// Free for the next Guaranteed container: in the checkpoint's default set and not reserved.
    pub free: CpuSet,
    /// Held by entries of pods that are alive.
    pub live: CpuSet,
    /// Held by stale entries (`stale-cpu-assignment`): lost until they are freed.
    pub stale: CpuSet,
}

impl NumaCpus {
    /// What the kubelet could hand out here if no pod held any: online minus reserved.
    pub fn allocatable(&self) -> CpuSet {
        self.online.difference(&self.reserved)
    }
}

/// Where the reserved CPUs came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservedFrom {
    /// The kubelet's `GetAllocatableResources`: online minus what it can hand out.
    Kubelet,
    /// The kubelet's configuration (`reservedSystemCPUs`, else kube+system reserved).
    Config,
}

/// The node's exclusive CPUs by NUMA node, ordered by node id, `stale` being the CPUs stale
/// entries hold ([`crate::facts::Facts::stale_cpus`]); `None` when the static policy is not in
/// force or the CPUs or checkpoint could not be read.
pub fn exclusive_cpus_by_numa(snap: &NodeSnapshot, stale: &CpuSet) -> Option<(Vec<NumaCpus>, ReservedFrom)> {
    crate::facts::count("exclusive_cpus_by_numa");
    let topo = snap.host.cpus.ok()?;
    let state = snap.host.checkpoint.ok()?.state.as_ref().ok()?;
    if state.policy_name != "static" {
        return None;
    }
    let (reserved, from) = reserved_cpus(snap);
    let assigned = assigned_cpus(state);
    let live = assigned.difference(stale);
    let free = state.default_cpus.difference(&reserved);
    let nodes = topo
        .numa_nodes()
        .into_iter()
        .map(|(node, cpus)| NumaCpus {
            node,
            reserved: reserved.intersection(&cpus),
            free: free.intersection(&cpus),
            live: live.intersection(&cpus),
            stale: stale.intersection(&cpus),
            online: cpus,
        })
        .collect();
    Some((nodes, from))
}

/// The CPUs the static policy never hands out: the online ones minus the kubelet's
/// `GetAllocatableResources` when its PodResources API answered and the kubelet is known to
/// be 1.26 or later ([`crate::kubelet_version::allocatable_is_all_cpus`]), else those of its
/// configuration (`reservedSystemCPUs`, else kube+system reserved chosen by topology; the
/// configured list as written when the CPUs are unknown).
pub fn reserved_cpus(snap: &NodeSnapshot) -> (CpuSet, ReservedFrom) {
    let config = snap.cpu_manager();
    match (
        snap.host.cpus.ok(),
        snap.host.kubelet_view.ok().map(|v| &v.allocatable_cpus),
    ) {
        // Before 1.26 the kubelet's answer leaves out the CPUs assigned when it started
        // (kubernetes#112913): taken as reserved, they would be wrong.
        (Some(topo), Some(Observed::Ok(allocatable)))
            if !allocatable.is_empty() && crate::kubelet_version::allocatable_is_all_cpus(snap).is_ok() =>
        {
            (topo.all().difference(allocatable), ReservedFrom::Kubelet)
        }
        (Some(topo), _) => (config.reserved_cpus(topo).unwrap_or_default(), ReservedFrom::Config),
        (None, _) => (
            config.reserved_system_cpus.clone().unwrap_or_default(),
            ReservedFrom::Config,
        ),
    }
}

/// Every CPU an entry holds (containers' and, with pod-level resources, pods').
fn assigned_cpus(state: &CpuState) -> CpuSet {
    let containers = state.assignments.iter().map(|a| &a.cpus);
    let pods = state.pod_assignments.iter().map(|(_, c)| c);
    containers.chain(pods).fold(CpuSet::new(), |acc, c| acc.union(c))
}

/// The counts of [`exclusive_cpus_by_numa`] by NUMA node and state (`free`, `live`, `stale`,
/// `reserved`), as the gauge shows them.
pub fn exclusive_cpu_counts(nodes: &[NumaCpus]) -> BTreeMap<(u32, &'static str), usize> {
    let mut out = BTreeMap::new();
    for n in nodes {
        for (state, set) in [
            ("free", &n.free),
            ("live", &n.live),
            ("stale", &n.stale),
            ("reserved", &n.reserved),
        ] {
            out.insert((n.node, state), set.len());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, kubelet_view, pod};
    use crate::settings::Settings;
    use crate::topology::CpuTopology;

    /// Two NUMA nodes of 4 CPUs (0-3, 4-7); CPU 0 reserved; a live entry on node 0, stale ones
    /// on node 1.
    fn two_numa() -> NodeSnapshot {
        let mut snap = SnapshotBuilder::static_node(
            "0-1,7",
            &[("live", "app", "2-3"), ("gone", "app", "4-5"), ("gone2", "app", "6")],
        )
        .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0").unwrap()))
        .with_pod_list(&[pod("live", "exec-1", "Running", &[("app", "c1")])])
        .build();
        snap.host.cpus = Observed::Ok(CpuTopology::uniform(2, 4, 1));
        snap
    }

    #[test]
    fn every_online_cpu_is_counted_once_per_numa_node() {
        let snap = two_numa();
        let (nodes, from) = crate::facts::derive(&snap, &Settings::default()).numa.unwrap();
        assert_eq!(from, ReservedFrom::Config);
        let show = |n: &NumaCpus| [&n.online, &n.reserved, &n.free, &n.live, &n.stale].map(|s| s.to_string());
        assert_eq!(show(&nodes[0]), ["0-3", "0", "1", "2-3", ""]);
        assert_eq!(show(&nodes[1]), ["4-7", "", "7", "", "4-6"]);
        assert_eq!(nodes[1].allocatable().to_string(), "4-7");
        let counts = exclusive_cpu_counts(&nodes);
        assert_eq!(counts[&(1, "stale")], 3);
        assert_eq!(counts[&(0, "reserved")], 1);
        for n in &nodes {
            let sum: usize = ["free", "live", "stale", "reserved"]
                .iter()
                .map(|s| counts[&(n.node, *s)])
                .sum();
            assert_eq!(sum, n.online.len(), "node {}", n.node);
        }
    }

    #[test]
    fn the_kubelets_allocatable_decides_what_is_reserved() {
        let mut snap = two_numa();
        snap.host.kubelet_view = Observed::Ok(kubelet_view(vec![], Some("2-7")));
        // A kubelet not known to be 1.26 or later may leave assigned CPUs out of its answer.
        let (_, from) = crate::facts::derive(&snap, &Settings::default()).numa.unwrap();
        assert_eq!(from, ReservedFrom::Config);
        snap.api.kubelet_version = Observed::Ok(crate::kubelet_version::VersionReading {
            version: crate::kubelet_version::KubeletVersion::parse("v1.26.0").unwrap(),
            source: crate::kubelet_version::NODE_STATUS.into(),
            read_at: snap.taken_at,
        });
        let (nodes, from) = crate::facts::derive(&snap, &Settings::default()).numa.unwrap();
        assert_eq!(from, ReservedFrom::Kubelet);
        assert_eq!(nodes[0].reserved.to_string(), "0-1");
        assert_eq!(nodes[0].free.to_string(), "");
    }
}
