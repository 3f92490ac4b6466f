//! CPU topology (which logical CPU sits on which core and socket) and the kubelet's
//! topology-aware choice of CPUs.
//!
//! The agent fills [`CpuTopology`] from sysfs (`cpuN/topology/{core_id,physical_package_id}`).
//! [`CpuTopology::take_by_topology`] follows the packing of the kubelet's
//! `takeByTopologyNUMAPacked` (`pkg/kubelet/cm/cpumanager/cpu_assignment.go`): whole
//! sockets first when the request is at least a socket, then whole cores, then single CPUs,
//! preferring cores on sockets the result already uses. The static policy uses it to pick
//! the reserved CPUs from `kubeReserved` + `systemReserved` (with all CPUs free, which is the
//! case this module is exact for): 2 reserved CPUs on a 4-core, 8-thread machine give `{0,4}`.

use crate::CpuSet;

/// One logical CPU's place in the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CpuInfo {
    pub cpu: u32,
    /// `core_id` from sysfs; unique only within a socket.
    pub core: u32,
    /// `physical_package_id`.
    pub socket: u32,
    /// The NUMA node (sysfs `cpuN/nodeM`; 0 on a machine without NUMA).
    pub numa: u32,
}

/// The online CPUs with their cores and sockets, sorted by CPU id, and the offline ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpuTopology {
    pub cpus: Vec<CpuInfo>,
    /// The CPUs present but offline (sysfs `offline`); the kernel keeps no topology for them.
    #[serde(skip_serializing_if = "CpuSet::is_empty")]
    pub offline: CpuSet,
}

type CoreKey = (u32, u32); // (socket, core)

impl CpuTopology {
    /// A topology from entries in any order.
    pub fn new(mut cpus: Vec<CpuInfo>) -> Self {
        cpus.sort_by_key(|c| c.cpu);
        cpus.dedup_by_key(|c| c.cpu);
        CpuTopology {
            cpus,
            offline: CpuSet::new(),
        }
    }

    /// A machine with `sockets` x `cores` x `threads`, numbered like Linux on x86: the first
    /// thread of every core first, then the second threads (`cpu = thread * cores_total + core`);
    /// one NUMA node per socket.
    pub fn uniform(sockets: u32, cores_per_socket: u32, threads: u32) -> Self {
        let total_cores = sockets * cores_per_socket;
        let mut cpus = Vec::new();
        for t in 0..threads {
            for s in 0..sockets {
                for c in 0..cores_per_socket {
                    cpus.push(CpuInfo {
                        cpu: t * total_cores + s * cores_per_socket + c,
                        core: c,
                        socket: s,
                        numa: s,
                    });
                }
            }
        }
        CpuTopology::new(cpus)
    }

    /// The CPUs of each NUMA node.
    pub fn numa_nodes(&self) -> std::collections::BTreeMap<u32, CpuSet> {
        let mut nodes: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
        for c in &self.cpus {
            nodes.entry(c.numa).or_default().push(c.cpu);
        }
        nodes.into_iter().map(|(n, cpus)| (n, CpuSet::from_ids(cpus))).collect()
    }

    /// Every CPU in the topology.
    pub fn all(&self) -> CpuSet {
        CpuSet::from_ids(self.cpus.iter().map(|c| c.cpu))
    }

    fn core_of(c: &CpuInfo) -> CoreKey {
        (c.socket, c.core)
    }

    fn cpus_where(&self, pred: impl Fn(&CpuInfo) -> bool) -> CpuSet {
        CpuSet::from_ids(self.cpus.iter().filter(|c| pred(c)).map(|c| c.cpu))
    }

    fn sockets(&self) -> Vec<u32> {
        let mut s: Vec<u32> = self.cpus.iter().map(|c| c.socket).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    fn cores(&self) -> Vec<CoreKey> {
        let mut k: Vec<CoreKey> = self.cpus.iter().map(Self::core_of).collect();
        k.sort_unstable();
        k.dedup();
        k
    }

    /// Threads per core (the largest core's size).
    pub fn cpus_per_core(&self) -> usize {
        self.cores()
            .iter()
            .map(|k| self.cpus.iter().filter(|c| Self::core_of(c) == *k).count())
            .max()
            .unwrap_or(1)
    }

    /// CPUs per socket (the largest socket's size).
    pub fn cpus_per_socket(&self) -> usize {
        self.sockets()
            .iter()
            .map(|s| self.cpus.iter().filter(|c| c.socket == *s).count())
            .max()
            .unwrap_or(1)
    }

    /// Chooses `n` CPUs out of `available` the way the kubelet packs them; `None` when fewer
    /// than `n` are available.
    pub fn take_by_topology(&self, available: &CpuSet, n: usize) -> Option<CpuSet> {
        let mut free = available.intersection(&self.all());
        if n > free.len() {
            return None;
        }
        let mut result = CpuSet::new();
        let mut need = n;
        let take = |set: &CpuSet, result: &mut CpuSet, free: &mut CpuSet, need: &mut usize| {
            *result = result.union(set);
            *free = free.difference(set);
            *need -= set.len();
        };
        // 1. Whole sockets, lowest id first.
        let per_socket = self.cpus_per_socket();
        for s in self.sockets() {
            let cpus = self.cpus_where(|c| c.socket == s);
            if need >= per_socket && cpus.len() == per_socket && cpus.is_subset(&free) {
                take(&cpus, &mut result, &mut free, &mut need);
            }
        }
        // 2. Whole cores, by socket then core id.
        let per_core = self.cpus_per_core();
        for k in self.cores() {
            let cpus = self.cpus_where(|c| Self::core_of(c) == k);
            if need >= per_core && cpus.len() == per_core && cpus.is_subset(&free) {
                take(&cpus, &mut result, &mut free, &mut need);
            }
        }
        // 3. Single threads: cores on sockets the result already uses first, then sockets and
        //    cores with fewer free CPUs (fill partly used ones), then by id.
        // Sort key of a core for the next single thread: (shares a socket with the result,
        // free CPUs on its socket, free CPUs on the core, socket, core).
        type Rank = (std::cmp::Reverse<usize>, usize, usize, u32, u32);
        while need > 0 {
            let mut best: Option<(Rank, u32)> = None;
            for k in self.cores() {
                let core_free = self.cpus_where(|c| Self::core_of(c) == k).intersection(&free);
                let Some(first) = core_free.first() else { continue };
                let socket_cpus = self.cpus_where(|c| c.socket == k.0);
                let key = (
                    std::cmp::Reverse(socket_cpus.intersection(&result).len()),
                    socket_cpus.intersection(&free).len(),
                    core_free.len(),
                    k.0,
                    k.1,
                );
                if best.as_ref().is_none_or(|(b, _)| key < *b) {
                    best = Some((key, first));
                }
            }
            let (_, cpu) = best?;
            take(&CpuSet::from_ids([cpu]), &mut result, &mut free, &mut need);
        }
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_numbering_matches_linux() {
        let t = CpuTopology::uniform(1, 4, 2);
        assert_eq!(t.cpus.len(), 8);
        assert_eq!(
            t.cpus[4],
            CpuInfo {
                cpu: 4,
                core: 0,
                socket: 0,
                numa: 0
            }
        );
        assert_eq!(t.cpus_per_core(), 2);
        assert_eq!(t.cpus_per_socket(), 8);
    }

    #[test]
    fn reserved_cpu_choices_match_the_kubelet() {
        let ht = CpuTopology::uniform(1, 4, 2); // cores {0,4} {1,5} {2,6} {3,7}
        let two_sockets = CpuTopology::uniform(2, 4, 2); // socket 0: 0-3,8-11
        let no_ht = CpuTopology::uniform(1, 6, 1);
        let cases: &[(&CpuTopology, usize, &str)] = &[
            (&ht, 1, "0"),
            (&ht, 2, "0,4"),
            (&ht, 3, "0-1,4"),
            (&ht, 4, "0-1,4-5"),
            (&ht, 8, "0-7"),
            (&two_sockets, 2, "0,8"),
            (&two_sockets, 8, "0-3,8-11"),
            (&two_sockets, 9, "0-4,8-11"),
            (&no_ht, 2, "0-1"),
            (&ht, 0, ""),
        ];
        for (topo, n, want) in cases {
            let got = topo.take_by_topology(&topo.all(), *n).expect("enough CPUs");
            assert_eq!(got.to_string(), *want, "n={n} on {} CPUs", topo.cpus.len());
        }
    }

    #[test]
    fn takes_only_available_cpus_and_fills_partial_cores() {
        let ht = CpuTopology::uniform(1, 4, 2);
        let available = CpuSet::parse("1-3,5-7").unwrap();
        assert_eq!(ht.take_by_topology(&available, 2).unwrap().to_string(), "1,5");
        // 4 taken: core 0 is half free, so a single thread goes there first.
        let available = CpuSet::parse("0-3,5-7").unwrap();
        assert_eq!(ht.take_by_topology(&available, 1).unwrap().to_string(), "0");
        assert_eq!(ht.take_by_topology(&available, 8), None);
    }
}
