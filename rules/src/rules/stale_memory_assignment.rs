//! `stale-memory-assignment`: a memory manager entry (`memory_manager_state`, Static policy)
//! holds NUMA memory for a pod or container that is not alive on this node.
//!
//! The memory manager removes the entries of deleted pods only when it next allocates
//! (`removeStaleState`, kubernetes #129819): until then the NUMA node's memory looks reserved,
//! and a Guaranteed pod that needs it on one NUMA node is refused with `TopologyAffinityError`
//! while the node shows free memory. Liveness is the CPU rules' (see [`crate::facts::judge_pod`]);
//! a file whose checksum no kubelet accepts is `checkpoint-unreadable`'s, not judged here.
//!
//! Unlike a stale CPU entry, a kubelet restart does not clear these (docs/kubelet.md, "What a
//! kubelet restart clears"): the memory manager has no reconcile loop, so the remedy is the
//! next admission, and the drained reset only when that does not help.

use serde_json::json;

use crate::coverage::{Comparison, KubeletVersions, Need, Need::One, Needs, Source};
use crate::finding::{Finding, Severity};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::NodeSnapshot;
use crate::text::{admit_one_pod, human_bytes, stale_subject, still_running_note, stop_containers};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("stale-memory-assignment");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "The memory manager holds NUMA memory for a container that no longer runs",
    severity: Severity::Warning,
    looks_at: "memory_manager_state, pods on the node (or the kubelet's PodResources list, or cgroups)",
    fires_when: "an entry of memory_manager_state belongs to a pod that is not alive on the node (after the reconcile grace)",
    event_reason: "StaleMemoryAssignment",
    needs: Needs {
        all: &[One(Source::MemoryState), Need::LIVENESS],
        about: &[Source::MemoryState],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[
        Comparison {
            what: "entries of `memory_manager_state` (pod UID, container) against the live pods",
            from: "1.21, the first memory manager (on by default from 1.22)",
            older: "no kubelet before 1.21 writes the file: nothing to judge",
            unknown: "every layout is read; the version is not used",
        },
        Comparison::PODRESOURCES_LIVENESS,
    ]),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::facts::grace_turn),
};

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    let Some(file) = snap.host.managers.memory.ok() else {
        return vec![];
    };
    facts
        .stale_memory
        .iter()
        .map(|s| {
            let e = &s.entry;
            let container = (!e.container.is_empty()).then_some(e.container.as_str());
            let subject = stale_subject(s.pod.as_ref(), &e.pod_uid, container);
            let bytes: u64 = e.blocks.iter().map(|b| b.bytes).fold(0, u64::saturating_add);
            let numa: std::collections::BTreeSet<i64> =
                e.blocks.iter().flat_map(|b| b.numa_nodes.iter().copied()).collect();
            let numa_text = numa.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
            let what = e
                .blocks
                .iter()
                .map(|b| format!("{} {}", human_bytes(b.bytes), b.resource))
                .collect::<Vec<_>>()
                .join(" and ");
            let note = still_running_note(snap, s.still_running.as_deref(), s.pod.as_ref());
            let whose = match container {
                Some(c) => format!("container {c} of {}", subject.display()),
                None => format!("{} (pod-level resources)", subject.display()),
            };
            let mut summary = format!(
                "{what} on NUMA node {numa_text} are held for {whose}, which no longer runs on this node: {}",
                s.reason
            );
            let mut remedy = remedy(&snap.node, &file.path);
            if let Some(why) = &note {
                summary.push_str(&format!("; yet {why}"));
                remedy = format!("{}; then {remedy}", stop_containers(&snap.node, &e.pod_uid));
            }
            Finding::new(ID, Severity::Warning, subject, summary, remedy)
                .with("pod_uid", e.pod_uid.as_str())
                .with("container", container)
                .with("numa_nodes", json!(numa))
                .with("bytes", bytes)
                .with(
                    "blocks",
                    e.blocks
                        .iter()
                        .map(|b| json!({"numa_nodes": b.numa_nodes, "resource": b.resource, "bytes": b.bytes}))
                        .collect::<Vec<_>>(),
                )
                .with("reason", s.reason.clone())
                .with("liveness_source", snap.pods.source.as_str())
                .with("note", note)
                .with("path", file.path.as_str())
        })
        .collect()
}

/// The remedy: the next admission drops the entries; a restart does not, and the reset of a
/// drained node is the last resort.
fn remedy(node: &str, path: &str) -> String {
    format!(
        "let the kubelet admit one pod, and do not restart it for this: the memory manager has no reconcile loop and \
         drops the entries of pods that are not active only when it admits a pod once its pod sources are ready \
         (removeStaleState, before it computes that pod's NUMA hints, so that pod already sees this memory free); \
         a kubelet restart reloads {path} as written, stale entries included, and re-admits the running pods, usually \
         before its pod sources are ready, when the clean-up does nothing. To have them dropped now: {}. If they stay (the \
         kubelet's pod sources are not ready, or the file keeps coming back), reset the memory manager on a drained \
         node: kubectl drain {node} --ignore-daemonsets --delete-emptydir-data; then on the node: systemctl stop \
         kubelet && mv {path} {path}.bak && systemctl start kubelet; then kubectl uncordon {node}. nodemedic does \
         not edit this file",
        admit_one_pod(node)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, kubelet_pod, kubelet_view, leaf, memory_entry, pod, pod_cgroup};

    const GIB: u64 = 1 << 30;

    fn node() -> SnapshotBuilder {
        SnapshotBuilder::static_node("0-7", &[]).with_memory_entries(vec![
            memory_entry("live", "app", &[(&[0], "memory", 8 * GIB)]),
            memory_entry(
                "gone",
                "exec",
                &[(&[1], "memory", 16 * GIB), (&[1], "hugepages-1Gi", 2 * GIB)],
            ),
            memory_entry("done", "app", &[(&[0, 1], "memory", 4 * GIB)]),
        ])
    }

    fn uids(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.evidence["pod_uid"].as_str().unwrap()).collect()
    }

    #[test]
    fn judged_from_the_pod_list_with_numa_and_bytes() {
        let snap = node()
            .with_pod_list(&[
                pod("live", "exec-1", "Running", &[("app", "c1")]),
                pod("done", "job", "Succeeded", &[("app", "c2")]),
            ])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(uids(&f), ["gone", "done"]);
        let gone = &f[0];
        assert_eq!(gone.severity, Severity::Warning);
        assert_eq!(gone.evidence["bytes"], 18 * GIB);
        assert_eq!(gone.evidence["numa_nodes"], json!([1]));
        assert_eq!(gone.evidence["blocks"][1]["resource"], "hugepages-1Gi");
        assert!(
            gone.summary.starts_with(
                "16.0 GiB memory and 2.0 GiB hugepages-1Gi on NUMA node 1 are held for container exec of pod gone"
            ),
            "{}",
            gone.summary
        );
        // The next admission, not a restart, and the drained reset last.
        let remedy = &gone.remedy;
        assert!(
            remedy.starts_with("let the kubelet admit one pod, and do not restart it for this"),
            "{remedy}"
        );
        let (admit, reset) = (
            remedy.find("kubectl run nodemedic-admit"),
            remedy.find("mv /var/lib/kubelet/memory_manager_state"),
        );
        assert!(admit.is_some() && admit < reset, "{remedy}");
        assert!(!remedy.contains("systemctl restart kubelet"), "{remedy}");
        let done = &f[1];
        assert_eq!(done.subject.name.as_deref(), Some("job"));
        assert_eq!(done.evidence["numa_nodes"], json!([0, 1]));
        assert!(done.summary.contains("phase Succeeded"));
    }

    #[test]
    fn a_force_deleted_pod_with_processes_says_to_stop_them_first() {
        let snap = node()
            .with_pod_list(&[
                pod("live", "exec-1", "Running", &[("app", "c1")]),
                pod("done", "job", "Running", &[("app", "c2")]),
            ])
            .with_pod_cgroups(vec![pod_cgroup("gone", vec![leaf("c9", "", 2)])])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(uids(&f), ["gone"]);
        assert!(
            f[0].summary.contains("yet 2 processes in its cgroups"),
            "{}",
            f[0].summary
        );
        let remedy = &f[0].remedy;
        assert!(
            remedy.find("crictl ps --label io.kubernetes.pod.uid=gone").unwrap()
                < remedy.find("let the kubelet admit one pod").unwrap()
        );
    }

    #[test]
    fn the_kubelets_list_ties_unknown_uids_by_the_blocks_it_holds() {
        let mut exec = kubelet_pod("spark", "exec-1", &[], &[("app", "")]);
        exec.containers[0].memory = vec![crate::kubelet_view::KubeletMemory {
            resource: "memory".into(),
            bytes: 8 * GIB,
            numa_nodes: vec![0],
        }];
        let job = kubelet_pod("spark", "job", &["done"], &[("app", "")]);
        let snap = node()
            .with_kubelet_view(kubelet_view(vec![exec.clone(), job], None))
            .build();
        // "live" is exec-1 by its blocks; "done" is listed by UID; "gone" is nobody.
        assert_eq!(
            uids(&crate::rules::testkit::judged(check, &snap, &Settings::default())),
            ["gone"]
        );

        // A container named "app" with other blocks, of unknown UID, could be "live" or "done":
        // neither is judged; "gone" (container exec) is nobody's.
        exec.containers[0].memory[0].bytes = 4 * GIB;
        let snap = node().with_kubelet_view(kubelet_view(vec![exec], None)).build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(uids(&f), ["gone"]);
        assert_eq!(f[0].evidence["liveness_source"], "podresources");
    }

    #[test]
    fn a_file_the_kubelet_refuses_or_a_fresh_one_is_not_judged() {
        let mut snap = node().with_pod_list(&[]).build();
        if let crate::snapshot::Observed::Ok(f) = &mut snap.host.managers.memory {
            f.verification = Some(crate::Verification::Mismatch {
                stored: 1,
                computed: vec![],
            });
        }
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());

        // Without a pod list, a pod with no cgroup yet in a file written a moment ago may be
        // one being admitted.
        let mut snap = node().build();
        assert_eq!(
            crate::rules::testkit::judged(check, &snap, &Settings::default()).len(),
            3
        );
        if let crate::snapshot::Observed::Ok(f) = &mut snap.host.managers.memory {
            f.age_seconds = Some(1.0);
        }
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }
}
