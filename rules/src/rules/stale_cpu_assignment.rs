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

use crate::facts::{checkpoint_path, stale_entries};
use crate::finding::{Finding, Severity, Subject};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, PodSource};
use crate::text::{repair_cpu_state_remedy, stop_containers_then_repair_remedy};

pub const ID: &str = "stale-cpu-assignment";

pub fn check(snap: &NodeSnapshot, settings: &Settings) -> Vec<Finding> {
    let path = checkpoint_path(snap);
    stale_entries(snap, settings)
        .into_iter()
        .map(|e| {
            let subject = match (&e.pod, &e.pod_uid) {
                (Some(p), _) => Subject::pod(p),
                (None, Some(uid)) => Subject::pod_uid(uid),
                (None, None) => Subject {
                    kind: "Pod".into(),
                    ..Default::default()
                },
            }
            .with_container(e.container.clone());
            let whose = match (&e.container, &e.container_id) {
                (Some(c), _) => format!("container {c} of {}", subject.display()),
                (None, Some(id)) => format!("container {id}"),
                (None, None) => subject.display(),
            };
            // Stale by the pod list, yet something runs in the pod's cgroups: the pod object is
            // gone (force-deleted?) or finished while its containers are not. A different case:
            // the checkpoint must not be edited before they are stopped.
            let by_list = snap.pod_source != PodSource::Cgroups;
            let list = if snap.pod_source == PodSource::PodResources {
                "the kubelet's list"
            } else {
                "the pod list"
            };
            let gone = if snap.pod_source == PodSource::PodResources {
                "the kubelet no longer lists the pod as active but its containers are not gone"
            } else {
                "the pod object is gone but its containers are not (force-deleted?)"
            };
            let still_running = match (&e.still_running, &e.pod) {
                (Some(why), None) if by_list => Some(format!("{why}: {gone}")),
                (Some(why), Some(p)) if by_list && p.is_terminal() => {
                    Some(format!("{why}: the pod has finished but its containers are not gone"))
                }
                // A running pod's cgroups hold its other containers: no news.
                _ => None,
            };
            let (summary, remedy) = match (&still_running, &e.pod_uid) {
                (Some(why), Some(uid)) => (
                    format!(
                        "CPUs {} are held for {whose}, which is not alive by {list} ({}), yet {why}: stop its \
                         containers before freeing the CPUs",
                        e.cpus, e.reason
                    ),
                    stop_containers_then_repair_remedy(&snap.node, uid),
                ),
                _ => (
                    format!(
                        "CPUs {} are held for {whose}, which no longer runs on this node: {}",
                        e.cpus, e.reason
                    ),
                    repair_cpu_state_remedy(&snap.node),
                ),
            };
            Finding::new(ID, Severity::Critical, subject, summary, remedy)
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
    use crate::facts::stale_entries_of;
    use crate::rules::testkit::{SnapshotBuilder, leaf, pod, pod_cgroup};
    use crate::snapshot::Observed;

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
            check(&snap, &Settings::default())
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

    #[test]
    fn judged_from_the_kubelets_list_without_a_pod_list() {
        use crate::rules::testkit::{kubelet_pod, kubelet_view};
        use crate::snapshot::PodSource;
        let entries = [("live", "app", "2-3"), ("gone", "app", "4-5"), ("named", "app", "6")];
        let mut snap = SnapshotBuilder::static_node("0-1", &entries)
            // The gone pod's cgroup still has a process: the kubelet decides, and the note says.
            .with_pod_cgroups(vec![pod_cgroup("gone", vec![leaf("c9", "4-5", 1)])])
            .build();
        snap.pod_source = PodSource::PodResources;
        // "live" is found by its CPUs, "named" by its UID.
        snap.kubelet_view = Observed::Ok(kubelet_view(
            vec![
                kubelet_pod("spark", "exec-1", &[], &[("app", "2-3")]),
                kubelet_pod("spark", "exec-2", &["named"], &[("app", "6")]),
            ],
            None,
        ));
        assert_eq!(stale(&snap), [("gone".into(), "app".into(), "4-5".into())]);
        let f = check(&snap, &Settings::default());
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
        if let Observed::Ok(v) = &mut snap.kubelet_view {
            v.checkpoint_changed = true;
        }
        assert!(stale(&snap).is_empty());
    }
}
