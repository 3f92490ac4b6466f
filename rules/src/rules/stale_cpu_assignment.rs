//! `stale-cpu-assignment`: a checkpoint entry holds exclusive CPUs for a pod or container
//! that is not alive on this node (kubernetes #63018, #107074, #109562, #118375).
//!
//! Liveness comes from the pod list when there is one (a pod is alive when it is bound here
//! and not `Succeeded`/`Failed`; a container when it is in the pod's spec); without one (API
//! unreachable, `--offline`), from the kubelet's PodResources API when it answers (a pod is
//! alive when the kubelet lists it as active; see [`crate::kubelet_view`] for how its names are
//! tied to UIDs), else from the cgroup tree (a pod is alive when its cgroup has processes).
//! Without a pod list only whole pods are judged: neither cgroups nor the kubelet's list name
//! every container (the kubelet leaves out init containers). V1 entries, keyed by container ID, are
//! alive when the ID is the current container of a live pod (pod list) or a cgroup leaf with
//! processes (no pod list).
//!
//! The kubelet drops stale entries itself at its next reconcile (`cpuManagerReconcilePeriod`),
//! so an entry is not called stale while that is still to come: a pod that finished less than
//! the period ago, or (without a pod list) a pod with no cgroup yet in a checkpoint written
//! less than the period ago, since admission writes the entry before the cgroup exists.
//!
//! The judgement is [`crate::facts::stale_entries`], which `exclusive-cpu-shortage`, the
//! `nodemedic_cpu_manager_stale_cpus` gauge and `repair cpu-state` share.
//!
//! The remedy is the least invasive one that works ([`Fix`], shared with
//! `exclusive-cpu-shortage`): a plain kubelet restart, since from 1.18 the kubelet's first
//! reconcile after a start removes every entry of a container that is not among its active
//! pods (`removeStaleState` in `pkg/kubelet/cm/cpumanager/cpu_manager.go`; docs/kubelet.md,
//! "What a kubelet restart clears"). `repair cpu-state` stays for what a restart does not
//! clear or where the kubelet would refuse to start: V1 entries, keyed by container ID, which
//! a kubelet from 1.18 cannot migrate once their container is gone, and a node where any
//! checkpoint would fail the kubelet's start-up checks. Containers that still run are stopped
//! first either way. Whether a kubelet would refuse a checkpoint at its next start is
//! [`crate::facts::checkpoint_refusals`], the judgement `checkpoint-unreadable` and
//! `checkpoint-invalid-state` report.

use crate::coverage::{Comparison, KubeletVersions, Need, Need::One, Needs, Source};
use crate::facts::{CheckpointRefusal, Facts, Manager, StaleEntry, checkpoint_path};
use crate::finding::{Finding, Severity, Subject, SubjectKind};
use crate::rules::{CPU_MANAGER_STATE_STALE, RuleInfo};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, PodSource};
use crate::text::{repair_cpu_state_remedy, stop_containers};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("stale-cpu-assignment");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Exclusive CPUs are held for a container that no longer runs here",
    severity: Severity::Critical,
    looks_at: "checkpoint, pods, cgroups",
    fires_when: "an entry names a pod UID or container that is not alive on this node",
    event_reason: "StaleCPUAssignment",
    needs: Needs {
        all: &[One(Source::Checkpoint), Need::LIVENESS],
        about: &[Source::Checkpoint],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[
        Comparison {
            what: "V2 and V3 entries (pod UID, container name) of `cpu_manager_state` against the live pods",
            from: "1.18 (V2 entries)",
            older: "a 1.8 to 1.17 file has V1 entries, keyed by container ID: alive when the ID is a current container of a live pod (pod list) or a cgroup leaf with processes",
            unknown: "the file's layout says which entries these are; the version is not used",
        },
        Comparison {
            what: "the remedy \"restart the kubelet\" (its first reconcile drops the entries of containers that are not active: `removeStaleState`)",
            from: "1.18",
            older: "not offered for V1 entries, which a kubelet from 1.18 cannot migrate once their container is gone: `repair cpu-state` instead",
            unknown: "chosen by the entries' layout (only kubelets from 1.18 write V2 and V3), not by the version",
        },
        Comparison::PODRESOURCES_LIVENESS,
    ]),
    check,
    condition: Some(CPU_MANAGER_STATE_STALE),
    gauge: None,
    next_judgement: Some(crate::facts::grace_turn),
};

pub fn check(snap: &NodeSnapshot, facts: &Facts, _settings: &Settings) -> Vec<Finding> {
    let path = checkpoint_path(snap);
    let entries = &facts.stale_cpu;
    if entries.is_empty() {
        return vec![];
    }
    let refusal = refusal_at_start(facts);
    entries
        .iter()
        .map(|e| {
            let subject = match (&e.pod, &e.pod_uid) {
                (Some(p), _) => Subject::pod(p),
                (None, Some(uid)) => Subject::pod_uid(uid),
                (None, None) => Subject {
                    kind: SubjectKind::Pod,
                    ..Default::default()
                },
            }
            .with_container(e.container.clone());
            let whose = match (&e.container, &e.container_id) {
                (Some(c), _) => format!("container {c} of {}", subject.display()),
                (None, Some(id)) => format!("container {id}"),
                (None, None) => subject.display(),
            };
            let list = if snap.pods.source == PodSource::PodResources {
                "the kubelet's list"
            } else {
                "the pod list"
            };
            let still_running = running_despite_the_list(snap, e);
            let summary = match &still_running {
                Some(why) if e.pod_uid.is_some() => format!(
                    "{} held for {whose}, which is not alive by {list} ({}), yet {why}: stop its \
                     containers before freeing the CPUs",
                    crate::text::cpus_subject(&e.cpus),
                    e.reason
                ),
                _ => format!(
                    "{} held for {whose}, which no longer runs on this node: {}",
                    crate::text::cpus_subject(&e.cpus),
                    e.reason
                ),
            };
            let remedy = Remedy::choose(snap, refusal.as_ref(), std::slice::from_ref(e)).text(snap);
            Finding::new(ID, Severity::Critical, subject, summary, remedy)
                .with("pod_uid", e.pod_uid.clone())
                .with("container", e.container.clone())
                .with("container_id", e.container_id.clone())
                .with("cpus", e.cpus.to_string())
                .with("reason", e.reason.clone())
                .with("liveness_source", snap.pods.source.as_str())
                .with("pod_cgroup_processes", e.cgroup_processes)
                .with("note", still_running)
                .with("path", path.as_str())
        })
        .collect()
}

/// Stale by the pod list, yet something runs in the pod's cgroups: the pod object is gone
/// (force-deleted?) or finished while its containers are not. The checkpoint must not lose
/// the entry before they are stopped. `None` when liveness came from the cgroups themselves,
/// or the pod runs (its cgroups hold its other containers: no news).
fn running_despite_the_list(snap: &NodeSnapshot, e: &StaleEntry) -> Option<String> {
    let by_list = snap.pods.source != PodSource::Cgroups;
    let gone = if snap.pods.source == PodSource::PodResources {
        "the kubelet no longer lists the pod as active but its containers are not gone"
    } else {
        "the pod object is gone but its containers are not (force-deleted?)"
    };
    match (&e.still_running, &e.pod) {
        (Some(why), None) if by_list => Some(format!("{why}: {gone}")),
        (Some(why), Some(p)) if by_list && p.is_terminal() => {
            Some(format!("{why}: the pod has finished but its containers are not gone"))
        }
        _ => None,
    }
}

/// A checkpoint the kubelet would refuse at its next start: the first of the snapshot's
/// [`crate::facts::checkpoint_refusals`], any manager's file (files it cannot read first, as
/// `checkpoint-unreadable` reports them, then states `checkpoint-invalid-state` reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The rule that reports it.
    pub rule: String,
    /// The refused file, as the host sees it.
    pub path: String,
    /// What the kubelet would say, else what is wrong with the file
    /// ([`CheckpointRefusal::message`]).
    pub error: String,
    /// Whether the refused file is the CPU manager checkpoint, which `repair cpu-state` rewrites.
    pub cpu_file: bool,
}

impl From<&CheckpointRefusal> for Refusal {
    fn from(r: &CheckpointRefusal) -> Self {
        let rule = if r.unreadable() {
            crate::rules::checkpoint_unreadable::ID
        } else {
            crate::rules::checkpoint_invalid_state::ID
        };
        Refusal {
            rule: rule.to_string(),
            path: r.path.clone(),
            error: r.message(),
            cpu_file: r.manager == Manager::Cpu,
        }
    }
}

/// What a kubelet start would refuse now, if anything (see [`Refusal`]).
pub(crate) fn refusal_at_start(facts: &Facts) -> Option<Refusal> {
    facts.refusals.first().map(Refusal::from)
}

/// The remedy for every stale entry of the snapshot at once (`exclusive-cpu-shortage`'s
/// "free them").
pub(crate) fn remedy_for_all(snap: &NodeSnapshot, facts: &Facts) -> String {
    Remedy::choose(snap, refusal_at_start(facts).as_ref(), &facts.stale_cpu).text(snap)
}

/// The least invasive fix for stale CPU entries, chosen from what the snapshot says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fix {
    /// Restart the kubelet: its first reconcile after the start removes the entries.
    Restart,
    /// The kubelet would refuse to start: a restart makes things worse. When the CPU manager
    /// checkpoint is the refused file, freeing the stale entries with the kubelet stopped may
    /// make it acceptable (the repair's plan says); another file is fixed first.
    RefusedAtStart(Refusal),
    /// V1 entries (keyed by container ID, written before 1.18): a kubelet from 1.18 migrates
    /// the file at start and refuses it when an entry's container is no longer known to its
    /// runtime, so only the repair clears them.
    ContainerIdEntries,
}

/// A [`Fix`] and the pods whose containers must be stopped before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remedy {
    pub fix: Fix,
    /// UIDs of the pods whose containers still run although their pod is gone or finished.
    pub stop_first: Vec<String>,
}

impl Remedy {
    /// The remedy for `entries` (one finding's, or all of them for `exclusive-cpu-shortage`).
    pub(crate) fn choose(snap: &NodeSnapshot, refusal: Option<&Refusal>, entries: &[StaleEntry]) -> Remedy {
        let mut stop_first: Vec<String> = entries
            .iter()
            .filter(|e| running_despite_the_list(snap, e).is_some())
            .filter_map(|e| e.pod_uid.clone())
            .collect();
        stop_first.dedup();
        let fix = match refusal {
            Some(r) => Fix::RefusedAtStart(r.clone()),
            None if entries.iter().any(|e| e.container_id.is_some()) => Fix::ContainerIdEntries,
            None => Fix::Restart,
        };
        Remedy { fix, stop_first }
    }

    /// The remedy as the finding says it.
    pub(crate) fn text(&self, snap: &NodeSnapshot) -> String {
        let node = &snap.node;
        let path = checkpoint_path(snap);
        let repair = repair_cpu_state_remedy(node);
        let restart = format!(
            "restart the kubelet (systemctl restart kubelet on {node}): from 1.18 its first reconcile, about \
             cpuManagerReconcilePeriod (10 s) after it starts, removes the entries of containers that are not among \
             its active pods (it logs RemoveStaleState) and keeps the live pods' CPUs; if they are still in {path} \
             a minute later, free them with the kubelet stopped: {repair}"
        );
        let fix = match &self.fix {
            Fix::Restart => restart,
            Fix::RefusedAtStart(r) if r.cpu_file => format!(
                "do not restart the kubelet to clear this: at its next start it would refuse {} ({}; see {}). Free \
                 the stale entries with the kubelet stopped instead (the plan says whether the file it writes passes \
                 the kubelet's start-up checks): {repair}; if it does not, follow the {} remedy",
                r.path, r.error, r.rule, r.rule
            ),
            Fix::RefusedAtStart(r) => format!(
                "do not restart the kubelet yet: at its next start it would refuse {} ({}; see {}); fix that first, \
                 then {restart}",
                r.path, r.error, r.rule
            ),
            Fix::ContainerIdEntries => format!(
                "a kubelet restart does not clear V1 entries: they are keyed by container ID (a file written before \
                 1.18), and a kubelet from 1.18 migrates such a file at start and refuses to start when an entry's \
                 container is no longer known to its runtime (containerID ... not found in initial containers list). \
                 Free them with the kubelet stopped: {repair}"
            ),
        };
        if self.stop_first.is_empty() {
            return fix;
        }
        let stops: Vec<String> = self.stop_first.iter().map(|uid| stop_containers(node, uid)).collect();
        format!(
            "the containers of {} still run although the pod object is gone or finished; first {}; once the pod \
             cgroups are empty, {fix}",
            if self.stop_first.len() == 1 {
                "the pod"
            } else {
                "these pods"
            },
            stops.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::stale_entries_of;
    use crate::rules::testkit::{SnapshotBuilder, leaf, pod, pod_cgroup};
    use crate::snapshot::Observed;

    fn stale(snap: &NodeSnapshot) -> Vec<(String, String, String)> {
        crate::rules::testkit::judged(check, snap, &Settings::default())
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
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
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
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f[0].evidence["liveness_source"], "cgroups");
        assert_eq!(f[0].evidence["pod_cgroup_processes"], 0);
    }

    #[test]
    fn force_deleted_pod_with_processes_is_stale_with_a_note() {
        let snap = SnapshotBuilder::static_node("0-1", &[("ghost", "app", "2-3")])
            .with_pod_list(&[])
            .with_pod_cgroups(vec![pod_cgroup("ghost", vec![leaf("c9", "2-3", 3)])])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert!(
            f[0].evidence["note"]
                .as_str()
                .unwrap()
                .contains("3 processes in its cgroups: the pod object is gone")
        );
        // The finding says so, and sends the operator to stop the containers first: the repair
        // alone would refuse.
        assert!(
            f[0].summary.contains("yet 3 processes in its cgroups"),
            "{}",
            f[0].summary
        );
        assert!(f[0].summary.contains("stop its containers before freeing the CPUs"));
        let remedy = &f[0].remedy;
        assert!(
            remedy.contains("crictl ps --label io.kubernetes.pod.uid=ghost"),
            "{remedy}"
        );
        let (stop, repair) = (remedy.find("crictl stop"), remedy.find("repair node-a cpu-state"));
        assert!(stop.is_some() && repair.is_some() && stop < repair, "{remedy}");
    }

    #[test]
    fn nested_processes_populated_and_cut_walks_keep_a_pod_alive() {
        use crate::snapshot::Subtree;
        let entries = [("deep", "app", "2-3")];
        let judged = |mut pc: crate::snapshot::PodCgroup| {
            pc.containers[0].processes.clear();
            let snap = SnapshotBuilder::static_node("0-1", &entries)
                .with_pod_cgroups(vec![pc])
                .build();
            crate::rules::testkit::judged(check, &snap, &Settings::default())
        };
        let base = pod_cgroup("deep", vec![leaf("c1", "2-3", 0)]);
        // Nothing anywhere: stale.
        assert_eq!(judged(base.clone()).len(), 1);
        // A process in a cgroup of the pod that is not a container leaf (conmon, a nested tree).
        assert!(
            judged(crate::snapshot::PodCgroup {
                other_pids: vec![42],
                ..base.clone()
            })
            .is_empty()
        );
        // cgroup v2 says a process runs somewhere below.
        let populated = Subtree {
            populated: Some(true),
            ..Default::default()
        };
        assert!(
            judged(crate::snapshot::PodCgroup {
                subtree: populated,
                ..base.clone()
            })
            .is_empty()
        );
        // The walk stopped at its limit: what it did not see may hold processes.
        let cut = Subtree {
            dirs: 4096,
            truncated: true,
            populated: None,
        };
        assert!(
            judged(crate::snapshot::PodCgroup {
                subtree: cut,
                ..base.clone()
            })
            .is_empty()
        );
        // v2 says the subtree is empty: stale.
        let empty = Subtree {
            populated: Some(false),
            ..Default::default()
        };
        assert_eq!(judged(crate::snapshot::PodCgroup { subtree: empty, ..base }).len(), 1);
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
            crate::rules::testkit::judged(check, &snap, &Settings::default())
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
        snap.host.cgroups = Observed::Error {
            reason: "permission denied".into(),
        };
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }

    #[test]
    fn the_kubelet_gets_one_reconcile_period_first() {
        let mut just_done = pod("done", "job", "Succeeded", &[("app", "c2")]);
        just_done.finished_at = Some(1_700_000_000 - 4);
        let snap = SnapshotBuilder::static_node("0-1", &[("done", "app", "6")])
            .with_pod_list(&[just_done.clone()])
            .build();
        assert!(
            crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty(),
            "finished 4 s ago, period 10 s"
        );
        just_done.finished_at = Some(1_700_000_000 - 60);
        let snap = SnapshotBuilder::static_node("0-1", &[("done", "app", "6")])
            .with_pod_list(&[just_done])
            .build();
        assert_eq!(
            crate::rules::testkit::judged(check, &snap, &Settings::default()).len(),
            1
        );

        // Without a pod list, a pod with no cgroup in a checkpoint written 2 s ago may have just been admitted.
        let fresh = SnapshotBuilder::static_node("0-1", &[("new", "app", "2")])
            .checkpoint_age(2.0)
            .build();
        assert!(crate::rules::testkit::judged(check, &fresh, &Settings::default()).is_empty());
        let old = SnapshotBuilder::static_node("0-1", &[("new", "app", "2")])
            .checkpoint_age(20.0)
            .build();
        assert_eq!(
            crate::rules::testkit::judged(check, &old, &Settings::default()).len(),
            1
        );
    }

    #[test]
    fn a_running_pods_removed_container_gets_no_process_note() {
        let snap = SnapshotBuilder::static_node("0-1", &[("live", "old-sidecar", "7")])
            .with_pod_list(&[pod("live", "exec", "Running", &[("app", "c1")])])
            .with_pod_cgroups(vec![pod_cgroup("live", vec![leaf("c1", "0-1", 2)])])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert!(f[0].evidence.get("note").is_none());
    }

    #[test]
    fn judged_from_the_kubelets_list_without_a_pod_list() {
        use crate::rules::testkit::{kubelet_pod, kubelet_view};
        use crate::snapshot::PodSource;
        let entries = [("live", "app", "2-3"), ("gone", "app", "4-5"), ("named", "app", "6")];
        let mut snap = SnapshotBuilder::static_node("0-1", &entries)
            // The gone pod's cgroup still has a process: the kubelet decides, and the note says.
            .with_pod_cgroups(vec![pod_cgroup("gone", vec![leaf("c9", "4-5", 1)])])
            .build();
        snap.pods.source = PodSource::PodResources;
        // "live" is found by its CPUs, "named" by its UID.
        snap.host.kubelet_view = Observed::Ok(kubelet_view(
            vec![
                kubelet_pod("spark", "exec-1", &[], &[("app", "2-3")]),
                kubelet_pod("spark", "exec-2", &["named"], &[("app", "6")]),
            ],
            None,
        ));
        assert_eq!(stale(&snap), [("gone".into(), "app".into(), "4-5".into())]);
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f[0].evidence["liveness_source"], "podresources");
        assert!(
            f[0].evidence["reason"]
                .as_str()
                .unwrap()
                .contains("the kubelet does not list pod gone")
        );
        assert!(
            f[0].summary.contains("not alive by the kubelet's list")
                && f[0].summary.contains("no longer lists the pod"),
            "{}",
            f[0].summary
        );
        // A file rewritten while the kubelet was asked: nothing is judged stale by it.
        if let Observed::Ok(v) = &mut snap.host.kubelet_view {
            v.checkpoint_changed = true;
        }
        assert!(stale(&snap).is_empty());
    }

    fn remedy_of(snap: &NodeSnapshot) -> (Remedy, String) {
        let settings = Settings::default();
        let facts = crate::facts::derive(snap, &settings);
        let chosen = Remedy::choose(snap, refusal_at_start(&facts).as_ref(), &facts.stale_cpu);
        let f = crate::rules::testkit::judged(check, snap, &settings);
        assert_eq!(f.len(), 1, "{f:#?}");
        (chosen, f[0].remedy.clone())
    }

    /// The 1.23 kubelet started after the pod's containers were removed behind its back
    /// removed the entry at its first reconcile: a restart is the whole fix, the repair only
    /// the fallback.
    #[test]
    fn a_gone_pod_and_a_container_that_left_its_pod_are_cleared_by_a_restart() {
        let gone = SnapshotBuilder::static_node("0-1", &[("gone", "app", "4-5")])
            .with_pod_list(&[])
            .build();
        let left = SnapshotBuilder::static_node("0-1", &[("live", "old-sidecar", "7")])
            .with_pod_list(&[pod("live", "exec", "Running", &[("app", "c1")])])
            .build();
        for snap in [gone, left] {
            let (chosen, remedy) = remedy_of(&snap);
            assert_eq!(
                chosen,
                Remedy {
                    fix: Fix::Restart,
                    stop_first: vec![]
                }
            );
            assert!(
                remedy.starts_with("restart the kubelet (systemctl restart kubelet on node-a): from 1.18"),
                "{remedy}"
            );
            let (fallback, repair) = (remedy.find("a minute later"), remedy.find("repair node-a cpu-state"));
            assert!(fallback.is_some() && fallback < repair, "{remedy}");
            assert!(!remedy.contains("crictl"), "{remedy}");
        }
    }

    #[test]
    fn a_file_the_kubelet_would_refuse_gets_the_repair_not_a_restart() {
        // CPU 7 went offline: the kubelet's check 4 fails at its next start.
        let snap = SnapshotBuilder::static_node("0-1", &[("gone", "app", "6-7")])
            .with_pod_list(&[])
            .with_online("0-6")
            .build();
        let (chosen, remedy) = remedy_of(&snap);
        match &chosen.fix {
            Fix::RefusedAtStart(r) => {
                assert_eq!(
                    (r.rule.as_str(), r.path.as_str(), r.cpu_file),
                    ("checkpoint-invalid-state", "/var/lib/kubelet/cpu_manager_state", true)
                );
                assert!(r.error.starts_with("current set of available CPUs"), "{}", r.error);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            remedy.starts_with("do not restart the kubelet to clear this"),
            "{remedy}"
        );
        assert!(remedy.contains("repair node-a cpu-state --apply"), "{remedy}");
        assert!(!remedy.contains("systemctl restart kubelet"), "{remedy}");
    }

    #[test]
    fn another_refused_file_is_fixed_before_the_restart() {
        use crate::managers::memory::MemoryCheckpoint;
        use crate::snapshot::ManagerFile;
        let mut snap = SnapshotBuilder::static_node("0-1", &[("gone", "app", "4-5")])
            .with_pod_list(&[])
            .build();
        snap.host.managers.memory = Observed::Ok(ManagerFile::<MemoryCheckpoint>::new(
            "/var/lib/kubelet/memory_manager_state".into(),
            Some(60.0),
            MemoryCheckpoint::parse(b"{\"policyName\":"),
        ));
        let (chosen, remedy) = remedy_of(&snap);
        assert!(
            matches!(&chosen.fix, Fix::RefusedAtStart(r) if !r.cpu_file && r.path == "/var/lib/kubelet/memory_manager_state"),
            "{chosen:?}"
        );
        let (first, then) = (remedy.find("fix that first"), remedy.find("then restart the kubelet"));
        assert!(
            remedy.starts_with("do not restart the kubelet yet") && first.is_some() && first < then,
            "{remedy}"
        );
    }

    #[test]
    fn v1_entries_get_the_repair() {
        let v1 = crate::Checkpoint::parse(
            br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"aaa111":"2-3"},"checksum":0}"#,
        )
        .unwrap();
        let snap = SnapshotBuilder::from_state(v1.state().unwrap())
            .with_pod_cgroups(vec![])
            .build();
        let (chosen, remedy) = remedy_of(&snap);
        assert_eq!(chosen.fix, Fix::ContainerIdEntries);
        assert!(
            remedy.starts_with("a kubelet restart does not clear V1 entries: they are keyed by container ID"),
            "{remedy}"
        );
        assert!(remedy.contains("repair node-a cpu-state --apply"), "{remedy}");
    }

    #[test]
    fn running_containers_are_stopped_before_the_restart() {
        let snap = SnapshotBuilder::static_node("0-1", &[("ghost", "app", "2-3")])
            .with_pod_list(&[])
            .with_pod_cgroups(vec![pod_cgroup("ghost", vec![leaf("c9", "2-3", 3)])])
            .build();
        let (chosen, remedy) = remedy_of(&snap);
        assert_eq!(
            chosen,
            Remedy {
                fix: Fix::Restart,
                stop_first: vec!["ghost".into()]
            }
        );
        let (stop, restart) = (remedy.find("crictl stop"), remedy.find("restart the kubelet"));
        assert!(stop.is_some() && stop < restart, "{remedy}");
    }
}
