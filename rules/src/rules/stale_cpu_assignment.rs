//! `stale-cpu-assignment`: a checkpoint entry holds exclusive CPUs for a pod or container
//! that is not alive on this node (kubernetes #63018, #107074, #109562, #118375).
//!
//! Liveness comes from the pod list when there is one (a pod is alive when it is bound here
//! and not `Succeeded`/`Failed`; a container when it is in the pod's spec), and from the cgroup
//! tree when there is not (a pod is alive when its cgroup has processes; containers cannot be
//! named from cgroups, so only whole pods are judged). V1 entries, keyed by container ID, are
//! alive when the ID is the current container of a live pod (pod list) or a cgroup leaf with
//! processes (no pod list).
//!
//! The kubelet drops stale entries itself at its next reconcile (`cpuManagerReconcilePeriod`),
//! so an entry is not called stale while that is still to come: a pod that finished less than
//! the period ago, or (without a pod list) a pod with no cgroup yet in a checkpoint written
//! less than the period ago, since admission writes the entry before the cgroup exists.

use crate::CpuSet;
use crate::checkpoint::{CpuState, EntryKey};
use crate::finding::{Finding, Severity, Subject};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed, PodInfo, PodSource};

use super::{checkpoint_path, repair_cpu_state_remedy};

pub const ID: &str = "stale-cpu-assignment";

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
    /// Processes still in the pod's cgroup (`None`: no pod cgroup).
    pub cgroup_processes: Option<usize>,
}

enum Verdict {
    Alive,
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
        let checkpoint_age = snap.checkpoint.ok().and_then(|f| f.age_seconds);
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

fn judge_pod(snap: &NodeSnapshot, clock: &Clock, uid: &str, container: Option<&str>) -> Verdict {
    match snap.pod_source {
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
        PodSource::Cgroups => {
            let Observed::Ok(tree) = &snap.cgroups else {
                return Verdict::Unknown;
            };
            match tree.pod(uid) {
                None if clock.checkpoint_recent() => Verdict::Unknown,
                None => Verdict::Stale(format!("pod {uid} has no cgroup on this node"), None),
                Some(pc) if pc.process_count() == 0 => {
                    Verdict::Stale(format!("the cgroup of pod {uid} has no processes left"), None)
                }
                Some(_) => Verdict::Alive,
            }
        }
    }
}

fn judge_container_id(snap: &NodeSnapshot, clock: &Clock, id: &str) -> Verdict {
    match snap.pod_source {
        PodSource::Api | PodSource::File => {
            let owner = snap
                .pods
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
        PodSource::Cgroups => {
            let Observed::Ok(tree) = &snap.cgroups else {
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
    let Observed::Ok(file) = &snap.checkpoint else {
        return vec![];
    };
    let Ok(cp) = &file.content else { return vec![] };
    let Ok(state) = cp.state() else { return vec![] };
    stale_entries_of(snap, settings, &state)
}

/// [`stale_entries`] for an already parsed state.
pub fn stale_entries_of(snap: &NodeSnapshot, settings: &Settings, state: &CpuState) -> Vec<StaleEntry> {
    let clock = Clock::of(snap, settings);
    let processes = |uid: Option<&str>| -> Option<usize> {
        let tree = snap.cgroups.ok()?;
        tree.pod(uid?).map(|p| p.process_count())
    };
    let mut out = Vec::new();
    for a in &state.assignments {
        let (pod_uid, container, container_id, verdict) = match &a.key {
            EntryKey::Container { pod_uid, container } => (
                Some(pod_uid.clone()),
                Some(container.clone()),
                None,
                judge_pod(snap, &clock, pod_uid, Some(container)),
            ),
            EntryKey::ContainerId { container_id } => {
                let owner = snap.owner_of_container_id(container_id);
                let (uid, name) = owner.map_or((None, None), |(u, n)| (Some(u), n));
                (
                    uid,
                    name,
                    Some(container_id.clone()),
                    judge_container_id(snap, &clock, container_id),
                )
            }
        };
        if let Verdict::Stale(reason, pod) = verdict {
            let pod = pod.map(|p| *p);
            out.push(StaleEntry {
                cgroup_processes: processes(pod_uid.as_deref()),
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
        if let Verdict::Stale(reason, pod) = judge_pod(snap, &clock, uid, None) {
            let pod = pod.map(|p| *p);
            out.push(StaleEntry {
                pod_uid: Some(uid.clone()),
                container: None,
                container_id: None,
                cpus: cpus.clone(),
                reason,
                pod,
                cgroup_processes: processes(Some(uid)),
            });
        }
    }
    out
}

/// CPUs held by stale entries (the `nodemedic_cpu_manager_stale_cpus` gauge).
pub fn stale_cpus(entries: &[StaleEntry]) -> CpuSet {
    entries.iter().fold(CpuSet::new(), |acc, e| acc.union(&e.cpus))
}

pub fn check(snap: &NodeSnapshot, settings: &Settings) -> Vec<Finding> {
    let path = checkpoint_path(snap);
    stale_entries(snap, settings)
        .into_iter()
        .map(|e| {
            let subject = match (&e.pod, &e.pod_uid) {
                (Some(p), _) => Subject::pod(p),
                (None, Some(uid)) => Subject::pod_uid(uid),
                (None, None) => Subject { kind: "Pod".into(), ..Default::default() },
            }
            .with_container(e.container.clone());
            let whose = match (&e.container, &e.container_id) {
                (Some(c), _) => format!("container {c} of {}", subject.display()),
                (None, Some(id)) => format!("container {id}"),
                (None, None) => subject.display(),
            };
            // Only a V2 entry judged against a pod list can say the pod object is gone.
            let object_gone = e.pod.is_none() && e.container_id.is_none() && snap.pod_source != PodSource::Cgroups;
            let still_running = match (e.cgroup_processes, &e.pod) {
                (Some(n), None) if n > 0 && object_gone => {
                    Some(format!("its pod cgroup still has {n} process(es): the pod object is gone but its containers are not (force-deleted?)"))
                }
                (Some(n), Some(p)) if n > 0 && p.is_terminal() => Some(format!("its pod cgroup still has {n} process(es)")),
                _ => None,
            };
            Finding::new(
                ID,
                Severity::Critical,
                subject,
                format!("CPUs {} are held for {whose}, which no longer runs on this node: {}", e.cpus, e.reason),
                repair_cpu_state_remedy(&snap.node),
            )
            .with("pod_uid", e.pod_uid.clone())
            .with("container", e.container.clone())
            .with("container_id", e.container_id.clone())
            .with("cpus", e.cpus.to_string())
            .with("reason", e.reason.clone())
            .with("liveness_source", snap.pod_source.as_str())
            .with("pod_cgroup_processes", e.cgroup_processes)
            .with("note", still_running)
            .with("path", path.as_str())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, leaf, pod, pod_cgroup};

    fn stale(snap: &NodeSnapshot) -> Vec<(String, String, String)> {
        check(snap, &Settings::default())
            .iter()
            .map(|f| {
                let s = |k: &str| f.evidence.get(k).and_then(|v| v.as_str()).unwrap_or("-").to_string();
                (s("pod_uid"), s("container"), s("cpus"))
            })
            .collect()
    }

    fn entries() -> Vec<(&'static str, &'static str, &'static str)> {
        vec![
            ("live", "app", "2-3"),
            ("gone", "app", "4-5"),
            ("done", "app", "6"),
            ("live", "old-sidecar", "7"),
        ]
    }

    #[test]
    fn judged_from_the_pod_list() {
        let snap = SnapshotBuilder::static_node("0-1", &entries())
            .with_pod_list(&[
                pod("live", "spark-exec-1", "Running", &[("app", "c1")]),
                pod("done", "job", "Succeeded", &[("app", "c2")]),
            ])
            .build();
        assert_eq!(
            stale(&snap),
            [
                ("done".into(), "app".into(), "6".into()),
                ("gone".into(), "app".into(), "4-5".into()),
                ("live".into(), "old-sidecar".into(), "7".into()),
            ]
        );
        let f = check(&snap, &Settings::default());
        let done = f.iter().find(|f| f.evidence["pod_uid"] == "done").unwrap();
        assert_eq!(done.subject.name.as_deref(), Some("job"));
        assert!(done.summary.contains("phase Succeeded"));
        assert_eq!(done.evidence["liveness_source"], "file");
    }

    #[test]
    fn judged_from_cgroups_without_a_pod_list() {
        let snap = SnapshotBuilder::static_node("0-1", &entries())
            .with_pod_cgroups(vec![
                pod_cgroup("live", vec![leaf("c1", "2-3", 2)]),
                pod_cgroup("done", vec![leaf("c2", "6", 0)]),
            ])
            .build();
        // Containers cannot be named from cgroups: old-sidecar of a live pod is not judged.
        assert_eq!(
            stale(&snap),
            [
                ("done".into(), "app".into(), "6".into()),
                ("gone".into(), "app".into(), "4-5".into())
            ]
        );
        let f = check(&snap, &Settings::default());
        assert_eq!(f[0].evidence["liveness_source"], "cgroups");
        assert_eq!(f[0].evidence["pod_cgroup_processes"], 0);
    }

    #[test]
    fn force_deleted_pod_with_processes_is_stale_with_a_note() {
        let snap = SnapshotBuilder::static_node("0-1", &[("ghost", "app", "2-3")])
            .with_pod_list(&[])
            .with_pod_cgroups(vec![pod_cgroup("ghost", vec![leaf("c9", "2-3", 3)])])
            .build();
        let f = check(&snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert!(
            f[0].evidence["note"]
                .as_str()
                .unwrap()
                .contains("3 process(es): the pod object is gone")
        );
    }

    #[test]
    fn v1_entries_map_through_container_ids() {
        let v1 = crate::Checkpoint::parse(
            br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"aaa111":"2-3","bbb222":"4-5","ccc333":"6-7"},"checksum":0}"#,
        )
        .unwrap();
        let state = v1.state().unwrap();
        // From cgroups: aaa111 runs, bbb222's leaf is empty, ccc333 has no leaf.
        let snap = SnapshotBuilder::from_state(state.clone())
            .with_pod_cgroups(vec![pod_cgroup(
                "p1",
                vec![leaf("aaa111", "2-3", 1), leaf("bbb222", "4-5", 0)],
            )])
            .build();
        let got: Vec<_> = stale_entries_of(&snap, &Settings::default(), &state)
            .into_iter()
            .map(|e| (e.container_id.unwrap(), e.pod_uid))
            .collect();
        assert_eq!(
            got,
            [
                ("bbb222".to_string(), Some("p1".to_string())),
                ("ccc333".to_string(), None)
            ]
        );
        // No pod object was looked at: no claim that one was force-deleted.
        assert!(
            check(&snap, &Settings::default())
                .iter()
                .all(|f| f.evidence.get("note").is_none())
        );
        // From the pod list: the pod's current container ids decide.
        let snap = SnapshotBuilder::from_state(state.clone())
            .with_pod_list(&[
                pod("p1", "a", "Running", &[("app", "aaa111")]),
                pod("p2", "b", "Failed", &[("app", "bbb222")]),
            ])
            .build();
        let got: Vec<_> = stale_entries_of(&snap, &Settings::default(), &state)
            .into_iter()
            .map(|e| (e.container_id.unwrap(), e.pod_uid, e.container))
            .collect();
        assert_eq!(
            got,
            [
                ("bbb222".to_string(), Some("p2".to_string()), Some("app".to_string())),
                ("ccc333".to_string(), None, None)
            ]
        );
    }

    #[test]
    fn unknown_liveness_reports_nothing() {
        let mut snap = SnapshotBuilder::static_node("0-1", &entries()).build();
        snap.cgroups = Observed::Error {
            reason: "permission denied".into(),
        };
        assert!(check(&snap, &Settings::default()).is_empty());
    }

    #[test]
    fn stale_cpus_unions_entries() {
        let snap = SnapshotBuilder::static_node("0-1", &entries())
            .with_pod_list(&[])
            .build();
        assert_eq!(
            stale_cpus(&stale_entries(&snap, &Settings::default())).to_string(),
            "2-7"
        );
    }

    #[test]
    fn the_kubelet_gets_one_reconcile_period_first() {
        let mut just_done = pod("done", "job", "Succeeded", &[("app", "c2")]);
        just_done.finished_at = Some(1_700_000_000 - 4);
        let snap = SnapshotBuilder::static_node("0-1", &[("done", "app", "6")])
            .with_pod_list(&[just_done.clone()])
            .build();
        assert!(
            check(&snap, &Settings::default()).is_empty(),
            "finished 4 s ago, period 10 s"
        );
        just_done.finished_at = Some(1_700_000_000 - 60);
        let snap = SnapshotBuilder::static_node("0-1", &[("done", "app", "6")])
            .with_pod_list(&[just_done])
            .build();
        assert_eq!(check(&snap, &Settings::default()).len(), 1);

        // Without a pod list, a pod with no cgroup in a checkpoint written 2 s ago may have just been admitted.
        let fresh = SnapshotBuilder::static_node("0-1", &[("new", "app", "2")])
            .checkpoint_age(2.0)
            .build();
        assert!(check(&fresh, &Settings::default()).is_empty());
        let old = SnapshotBuilder::static_node("0-1", &[("new", "app", "2")])
            .checkpoint_age(20.0)
            .build();
        assert_eq!(check(&old, &Settings::default()).len(), 1);
    }

    #[test]
    fn a_running_pods_removed_container_gets_no_process_note() {
        let snap = SnapshotBuilder::static_node("0-1", &[("live", "old-sidecar", "7")])
            .with_pod_list(&[pod("live", "exec", "Running", &[("app", "c1")])])
            .with_pod_cgroups(vec![pod_cgroup("live", vec![leaf("c1", "0-1", 2)])])
            .build();
        let f = check(&snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert!(f[0].evidence.get("note").is_none());
    }
}
