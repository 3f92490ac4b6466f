//! Stale checkpoint entries: entries whose pod or container is not alive on this node.

use crate::CpuSet;
use crate::checkpoint::{CpuState, EntryKey};
use crate::kubelet_view::{KubeletView, Listed};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed, PodInfo, PodSource};

/// A checkpoint entry whose owner is not alive here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleEntry {
    /// The pod UID (known for V2/V3 entries, and V1 entries whose ID maps to a pod).
    pub pod_uid: Option<String>,
    /// The container name (`None` for a V3 pod-level entry or an unmapped V1 entry).
    pub container: Option<String>,
    /// The runtime container ID of a V1 entry.
    pub container_id: Option<String>,
    pub cpus: CpuSet,
    /// Why it is stale, for people.
    pub reason: String,
    /// The pod, when it is still in the pod list (finished, or the container left its spec).
    pub pod: Option<PodInfo>,
    /// Processes found in the pod's cgroups (see [`crate::snapshot::PodCgroup::process_count`]; `None`: no pod
    /// cgroup).
    pub cgroup_processes: Option<usize>,
    /// Why the pod's cgroups say something still runs although the entry is stale by the pod
    /// list (the pod object is gone or finished, its containers are not): freeing its CPUs
    /// would unpin a running process, so the containers must be stopped first.
    pub still_running: Option<String>,
}

/// Whether the pod that holds a checkpoint entry is alive on this node.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Alive,
    /// Not alive: why, for people, and the pod when it is still in the pod list (finished,
    /// or the container left its spec).
    Stale(String, Option<Box<PodInfo>>),
    /// Cannot be judged with what we have.
    Unknown,
}

/// What the judges need besides the snapshot.
struct Clock {
    grace: f64,
    checkpoint_age: Option<f64>,
}

impl Clock {
    fn of(snap: &NodeSnapshot, settings: &Settings) -> Self {
        Self::for_file(snap, settings, snap.host.checkpoint.ok().and_then(|f| f.age_seconds))
    }

    fn for_file(snap: &NodeSnapshot, settings: &Settings, checkpoint_age: Option<f64>) -> Self {
        Clock {
            grace: settings.reconcile_grace(snap),
            checkpoint_age,
        }
    }

    /// Whether the kubelet may still be about to reconcile something that happened at `at`.
    fn too_recent(&self, snap: &NodeSnapshot, at: Option<i64>) -> bool {
        at.is_some_and(|t| ((snap.taken_at - t) as f64) < self.grace)
    }

    fn checkpoint_recent(&self) -> bool {
        self.checkpoint_age.is_some_and(|a| a < self.grace)
    }
}

/// Whether pod `uid` (and its container `container`, when the entry is a container's) is alive
/// on this node, for an entry of a checkpoint file `file_age` seconds old, by the snapshot's
/// liveness source. With the kubelet's PodResources list as the source, `listed` ties the
/// entry to the pod the kubelet lists (pods are listed by name, entries keyed by UID): each
/// checkpoint's entries are matched by what they hold.
pub fn judge_pod(
    snap: &NodeSnapshot,
    settings: &Settings,
    file_age: Option<f64>,
    uid: &str,
    container: Option<&str>,
    listed: impl FnOnce(&KubeletView) -> Listed<'_>,
) -> Verdict {
    judge_entry_pod(snap, &Clock::for_file(snap, settings, file_age), uid, container, listed)
}

fn judge_entry_pod(
    snap: &NodeSnapshot,
    clock: &Clock,
    uid: &str,
    container: Option<&str>,
    listed: impl FnOnce(&KubeletView) -> Listed<'_>,
) -> Verdict {
    match snap.pods.source {
        PodSource::Api | PodSource::File => match snap.pod(uid) {
            None => Verdict::Stale(format!("pod {uid} is not bound to node {}", snap.node), None),
            Some(p) if p.is_terminal() && clock.too_recent(snap, p.finished_at) => Verdict::Unknown,
            Some(p) if p.is_terminal() => Verdict::Stale(
                format!("pod {} has finished (phase {})", p.display(), p.phase),
                Some(Box::new(p.clone())),
            ),
            Some(p) => match container {
                Some(c) if !p.containers.iter().any(|x| x.name == c) => Verdict::Stale(
                    format!("container {c} is not in the spec of pod {}", p.display()),
                    Some(Box::new(p.clone())),
                ),
                _ => Verdict::Alive,
            },
        },
        // Whole pods only: the kubelet does not list init containers, whose entries a live pod
        // may still have.
        PodSource::PodResources => match snap.host.kubelet_view.ok().map(|v| (v, listed(v))) {
            Some((_, Listed::Pod(..))) => Verdict::Alive,
            Some((view, Listed::NotListed)) if !view.checkpoint_changed && !clock.checkpoint_recent() => {
                Verdict::Stale(
                    format!("the kubelet does not list pod {uid} among its active pods (PodResources List)"),
                    None,
                )
            }
            Some(_) => Verdict::Unknown,
            None => judge_pod_by_cgroups(snap, clock, uid),
        },
        PodSource::Cgroups => judge_pod_by_cgroups(snap, clock, uid),
    }
}

fn judge_pod_by_cgroups(snap: &NodeSnapshot, clock: &Clock, uid: &str) -> Verdict {
    let Observed::Ok(tree) = &snap.host.cgroups else {
        return Verdict::Unknown;
    };
    match tree.pod(uid) {
        None if clock.checkpoint_recent() => Verdict::Unknown,
        None => Verdict::Stale(format!("pod {uid} has no cgroup on this node"), None),
        Some(pc) if !pc.alive() => Verdict::Stale(format!("the cgroup of pod {uid} has no processes left"), None),
        Some(_) => Verdict::Alive,
    }
}

fn judge_entry_container_id(snap: &NodeSnapshot, clock: &Clock, id: &str) -> Verdict {
    match snap.pods.source {
        PodSource::Api | PodSource::File => {
            let owner = snap
                .pods
                .bound
                .iter()
                .find(|p| p.containers.iter().any(|c| c.container_id.as_deref() == Some(id)));
            match owner {
                Some(p) if !p.is_terminal() => Verdict::Alive,
                Some(p) if clock.too_recent(snap, p.finished_at) => Verdict::Unknown,
                Some(p) => Verdict::Stale(
                    format!("container {id} belongs to pod {}, which has finished", p.display()),
                    Some(Box::new(p.clone())),
                ),
                None => Verdict::Stale(format!("no pod on node {} runs container {id}", snap.node), None),
            }
        }
        // The kubelet lists no container IDs: V1 entries are judged by their cgroups.
        PodSource::PodResources | PodSource::Cgroups => {
            let Observed::Ok(tree) = &snap.host.cgroups else {
                return Verdict::Unknown;
            };
            match tree.container(id) {
                Some((_, leaf)) if !leaf.processes.is_empty() => Verdict::Alive,
                Some(_) => Verdict::Stale(format!("container {id} has no processes left"), None),
                None if clock.checkpoint_recent() => Verdict::Unknown,
                None => Verdict::Stale(format!("container {id} has no cgroup on this node"), None),
            }
        }
    }
}

/// The stale entries of the checkpoint's state; empty when the checkpoint is unreadable or
/// liveness cannot be judged.
pub fn stale_entries(snap: &NodeSnapshot, settings: &Settings) -> Vec<StaleEntry> {
    let Observed::Ok(file) = &snap.host.checkpoint else {
        return vec![];
    };
    let Ok(state) = &file.state else { return vec![] };
    stale_entries_of(snap, settings, state)
}

/// [`stale_entries`] for an already parsed state.
pub fn stale_entries_of(snap: &NodeSnapshot, settings: &Settings, state: &CpuState) -> Vec<StaleEntry> {
    crate::facts::count("stale_entries_of");
    let clock = Clock::of(snap, settings);
    let processes = |uid: Option<&str>| -> Option<usize> {
        let tree = snap.host.cgroups.ok()?;
        tree.pod(uid?).map(|p| p.process_count())
    };
    let still_running = |uid: Option<&str>| -> Option<String> {
        let tree = snap.host.cgroups.ok()?;
        tree.pod(uid?)?.alive_because()
    };
    let mut out = Vec::new();
    for a in &state.assignments {
        let (pod_uid, container, container_id, verdict) = match &a.key {
            EntryKey::Container { pod_uid, container } => (
                Some(pod_uid.clone()),
                Some(container.clone()),
                None,
                judge_entry_pod(snap, &clock, pod_uid, Some(container), |v| v.uid_of(pod_uid, state)),
            ),
            EntryKey::ContainerId { container_id } => {
                let owner = snap.owner_of_container_id(container_id);
                let (uid, name) = owner.map_or((None, None), |(u, n)| (Some(u), n));
                (
                    uid,
                    name,
                    Some(container_id.clone()),
                    judge_entry_container_id(snap, &clock, container_id),
                )
            }
        };
        if let Verdict::Stale(reason, pod) = verdict {
            let pod = pod.map(|p| *p);
            out.push(StaleEntry {
                cgroup_processes: processes(pod_uid.as_deref()),
                still_running: still_running(pod_uid.as_deref()),
                pod_uid,
                container,
                container_id,
                cpus: a.cpus.clone(),
                reason,
                pod,
            });
        }
    }
    for (uid, cpus) in &state.pod_assignments {
        if let Verdict::Stale(reason, pod) = judge_entry_pod(snap, &clock, uid, None, |v| v.uid_of(uid, state)) {
            let pod = pod.map(|p| *p);
            out.push(StaleEntry {
                pod_uid: Some(uid.clone()),
                container: None,
                container_id: None,
                cpus: cpus.clone(),
                reason,
                pod,
                cgroup_processes: processes(Some(uid)),
                still_running: still_running(Some(uid)),
            });
        }
    }
    out
}

/// When the liveness judgement of `snap` changes by the clock alone: seconds until the grace
/// the kubelet is given after the checkpoint was written, or after a pod finished, runs out
/// (stale entries and shared cpusets are judged only after it); the nearest that is still
/// ahead, `None` when none is. The [`crate::rules::RuleInfo::next_judgement`] of every rule
/// that judges liveness.
pub fn grace_turn(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    let grace = settings.reconcile_grace(snap);
    let checkpoint = snap
        .host
        .checkpoint
        .ok()
        .and_then(|f| f.age_seconds)
        .map(|age| grace - age);
    // Finish times are whole seconds: a second more makes sure the grace is over.
    let pods = snap
        .pods
        .bound
        .iter()
        .filter(|p| p.is_terminal())
        .filter_map(|p| p.finished_at)
        .map(|t| grace - (snap.taken_at - t) as f64 + 1.0);
    checkpoint
        .into_iter()
        .chain(pods)
        .filter(|left| *left > 0.0)
        .min_by(f64::total_cmp)
}

/// CPUs held by stale entries (the `nodemedic_cpu_manager_stale_cpus` gauge).
pub fn stale_cpus(entries: &[StaleEntry]) -> CpuSet {
    entries.iter().fold(CpuSet::new(), |acc, e| acc.union(&e.cpus))
}
