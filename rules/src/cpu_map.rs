//! The node's CPUs as a map: for each CPU, its socket and NUMA node and what it is used for
//! (reserved, the shared pool, pinned by a live container, held by a stale entry, offline), and
//! who holds it. The scan's text report draws it as a grid and its JSON carries it as data
//! (`cpu_map`), so that an SRE sees at once which CPUs a stale entry keeps from the next
//! Guaranteed pod.
//!
//! What decides each CPU's use:
//! - **offline**: listed in sysfs `offline` (no socket or NUMA node: the kernel keeps no
//!   topology for it);
//! - under the static policy, with the checkpoint read: **stale** when a stale entry holds it
//!   ([`crate::facts::Facts::stale_cpu`], the judgement of `stale-cpu-assignment`), **live**
//!   when another entry holds it, **reserved** when the static policy never hands it out
//!   ([`crate::facts::reserved_cpus`]), else **shared** (the default set every other container
//!   runs on);
//! - under the static policy with the checkpoint unreadable: **unknown** for every online CPU
//!   that is not reserved: who holds what cannot be known (never drawn as shared);
//! - with neither the kubelet's configuration nor the checkpoint read, the policy is not known:
//!   **unknown** for every online CPU;
//! - under the `none` policy every online CPU is **shared** (nothing is pinned, nothing is
//!   reserved from the pool).
//!
//! No map is made when the CPUs could not be read.

use std::collections::BTreeMap;

use crate::CpuSet;
use crate::checkpoint::EntryKey;
use crate::facts::Facts;
use crate::snapshot::NodeSnapshot;

/// What one CPU is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuUse {
    /// Never handed out by the static policy (`reservedSystemCPUs`, or kube- plus
    /// system-reserved chosen by topology, or what the kubelet's PodResources API leaves out).
    Reserved,
    /// In the shared pool: every container without exclusive CPUs runs here.
    Shared,
    /// Pinned to a container (or a pod) that is alive.
    Live,
    /// Held by a checkpoint entry of a container that is gone: lost until it is freed.
    Stale,
    /// Present but offline.
    Offline,
    /// The checkpoint could not be read: whether an entry holds it is not known.
    Unknown,
}

impl CpuUse {
    /// The one-letter mark of the text grid.
    pub fn mark(self) -> char {
        match self {
            CpuUse::Reserved => 'R',
            CpuUse::Shared => '.',
            CpuUse::Live => 'L',
            CpuUse::Stale => 'S',
            CpuUse::Offline => 'x',
            CpuUse::Unknown => '?',
        }
    }
}

/// One CPU of the map.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CpuCell {
    pub cpu: u32,
    /// `physical_package_id`; `None` offline.
    pub socket: Option<u32>,
    /// `None` offline.
    pub numa_node: Option<u32>,
    #[serde(rename = "state")]
    pub used: CpuUse,
    /// Who holds it (live or stale): `namespace/name container C`, `pod UID container C`,
    /// `pod UID` (a pod-level entry) or `container ID` (a V1 entry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// The map of the node's CPUs, ordered by CPU id; `None` when the CPUs could not be read.
pub fn cpu_map(snap: &NodeSnapshot, facts: &Facts) -> Option<Vec<CpuCell>> {
    let topo = snap.host.cpus.ok()?;
    let file_state = snap.host.checkpoint.ok().and_then(|f| f.state.as_ref().ok());
    let state = file_state.filter(|s| s.policy_name == "static");
    let static_policy = snap.cpu_manager().policy == "static" || state.is_some();
    // The policy is known from the kubelet's configuration or the file the policy wrote; with
    // neither, nothing can be said of any CPU.
    let policy_known = snap.host.kubelet.ok().is_some() || file_state.is_some();
    // The reserved CPUs as the judgement's facts hold them (static policy, file read), else as
    // the same function finds them from the configuration.
    let reserved = match &facts.numa {
        Some((nodes, _)) => nodes.iter().fold(CpuSet::new(), |all, n| all.union(&n.reserved)),
        None if static_policy => crate::facts::reserved_cpus(snap).0,
        None => CpuSet::new(),
    };
    // Holders by CPU: the stale entries first (their judgement), then every entry of the file.
    let mut stale: BTreeMap<u32, String> = BTreeMap::new();
    for e in &facts.stale_cpu {
        let who = match (&e.pod, &e.pod_uid, &e.container, &e.container_id) {
            (Some(p), _, Some(c), _) => format!("{} container {c}", p.display()),
            (Some(p), _, None, _) => p.display(),
            (None, Some(uid), Some(c), _) => format!("pod {uid} container {c}"),
            (None, Some(uid), None, _) => format!("pod {uid}"),
            (None, None, _, Some(id)) => format!("container {id}"),
            (None, None, _, None) => "an entry of no known pod".to_string(),
        };
        for cpu in e.cpus.iter() {
            stale.entry(cpu).or_insert_with(|| who.clone());
        }
    }
    let mut live: BTreeMap<u32, String> = BTreeMap::new();
    if let Some(state) = state {
        let pod_name = |uid: &str| snap.pod(uid).map_or_else(|| format!("pod {uid}"), |p| p.display());
        for a in &state.assignments {
            let who = match &a.key {
                EntryKey::Container { pod_uid, container } => format!("{} container {container}", pod_name(pod_uid)),
                EntryKey::ContainerId { container_id } => match snap.owner_of_container_id(container_id) {
                    Some((uid, Some(c))) => format!("{} container {c}", pod_name(&uid)),
                    Some((uid, None)) => format!("{} container {container_id}", pod_name(&uid)),
                    None => format!("container {container_id}"),
                },
            };
            for cpu in a.cpus.iter() {
                live.entry(cpu).or_insert_with(|| who.clone());
            }
        }
        for (uid, cpus) in &state.pod_assignments {
            for cpu in cpus.iter() {
                live.entry(cpu).or_insert_with(|| pod_name(uid));
            }
        }
    }
    let unreadable = !policy_known || (static_policy && state.is_none());
    let mut cells: Vec<CpuCell> = topo
        .cpus
        .iter()
        .map(|c| {
            let (used, holder) = if let Some(who) = stale.get(&c.cpu) {
                (CpuUse::Stale, Some(who.clone()))
            } else if let Some(who) = live.get(&c.cpu) {
                (CpuUse::Live, Some(who.clone()))
            } else if reserved.contains(c.cpu) {
                (CpuUse::Reserved, None)
            } else if unreadable {
                (CpuUse::Unknown, None)
            } else {
                (CpuUse::Shared, None)
            };
            CpuCell {
                cpu: c.cpu,
                socket: Some(c.socket),
                numa_node: Some(c.numa),
                used,
                holder,
            }
        })
        .collect();
    let online = topo.all();
    cells.extend(
        topo.offline
            .iter()
            .filter(|cpu| !online.contains(*cpu))
            .map(|cpu| CpuCell {
                cpu,
                socket: None,
                numa_node: None,
                used: CpuUse::Offline,
                holder: None,
            }),
    );
    cells.sort_by_key(|c| c.cpu);
    Some(cells)
}

/// The map as text: one block per socket and NUMA node, a row of CPU ids over a row of marks,
/// at most 16 CPUs a row; then the offline CPUs; then who holds the live and stale CPUs, one
/// line per holder with its CPUs.
pub fn draw(cells: &[CpuCell]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cpu map ({} CPUs; R reserved, . shared pool, L pinned by a live container, S held by a stale entry, x offline, ? unknown):",
        cells.len()
    );
    let width = cells.iter().map(|c| c.cpu.to_string().len()).max().unwrap_or(1).max(2);
    let mut groups: BTreeMap<(u32, u32), Vec<&CpuCell>> = BTreeMap::new();
    for c in cells {
        if let (Some(s), Some(n)) = (c.socket, c.numa_node) {
            groups.entry((s, n)).or_default().push(c);
        }
    }
    for ((socket, node), group) in &groups {
        let label = format!("  socket {socket}, NUMA node {node}");
        for (i, row) in group.chunks(16).enumerate() {
            let head = if i == 0 { label.as_str() } else { "" };
            let ids: Vec<String> = row.iter().map(|c| format!("{:>width$}", c.cpu)).collect();
            let marks: Vec<String> = row.iter().map(|c| format!("{:>width$}", c.used.mark())).collect();
            let _ = writeln!(out, "{head:<26}cpu {}", ids.join(" "));
            let _ = writeln!(out, "{:<26}    {}", "", marks.join(" "));
        }
    }
    let offline = CpuSet::from_ids(cells.iter().filter(|c| c.used == CpuUse::Offline).map(|c| c.cpu));
    if !offline.is_empty() {
        let _ = writeln!(out, "  offline: CPUs {offline}");
    }
    let mut holders: Vec<(CpuUse, &str, Vec<u32>)> = vec![];
    for c in cells {
        let Some(who) = c.holder.as_deref() else { continue };
        match holders.iter_mut().find(|(u, w, _)| *u == c.used && *w == who) {
            Some((_, _, cpus)) => cpus.push(c.cpu),
            None => holders.push((c.used, who, vec![c.cpu])),
        }
    }
    for (used, who, cpus) in holders {
        let what = if used == CpuUse::Stale { " (stale entry)" } else { "" };
        let _ = writeln!(
            out,
            "  {} {:<12} {who}{what}",
            used.mark(),
            CpuSet::from_ids(cpus).to_string()
        );
    }
    out
}

#[cfg(test)]
mod tests;
