//! `cross-pod-cpu-overlap`: two different pods hold the same exclusive CPU in the checkpoint.
//!
//! The kubelet never checks overlap between assignments, because it is legitimate inside one
//! pod (an init container's CPUs are reused by the app containers of the same pod). Across
//! pods it means both containers are pinned to the same CPU: corruption, or a hand edit.
//! V1 entries are attributed to pods through the pod list or the cgroup tree; an entry whose
//! pod is unknown is left out rather than guessed.

use std::collections::BTreeMap;

use crate::CpuSet;
use crate::checkpoint::EntryKey;
use crate::coverage::{Comparison, KubeletVersions, Need::One, Needs, Source};
use crate::facts::checkpoint_path;
use crate::finding::{Finding, Severity, Subject};
use crate::rules::{CPU_MANAGER_STATE_STALE, RuleInfo};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed};
use crate::text::reset_checkpoint_remedy;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("cross-pod-cpu-overlap");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Two pods hold the same exclusive CPU",
    severity: Severity::Critical,
    looks_at: "checkpoint",
    fires_when: "two different pods hold the same exclusive CPU",
    event_reason: "CrossPodCPUOverlap",
    needs: Needs {
        all: &[One(Source::Checkpoint)],
        about: &[Source::Checkpoint],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[Comparison {
        what: "the exclusive CPUs of different pods in `cpu_manager_state`",
        from: "1.18 (V2 entries name the pod UID)",
        older: "V1 entries (1.8 to 1.17) name a container ID and are tied to their pod through the pod list or the cgroup tree",
        unknown: "the file's layout decides; the version is not used",
    }]),
    check,
    condition: Some(CPU_MANAGER_STATE_STALE),
    gauge: None,
    next_judgement: None,
};

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    let Observed::Ok(file) = &snap.host.checkpoint else {
        return vec![];
    };
    let Ok(state) = &file.state else { return vec![] };
    // pod uid -> [(holder label, cpus)]
    let mut by_pod: BTreeMap<String, Vec<(String, CpuSet)>> = BTreeMap::new();
    for a in &state.assignments {
        let (uid, label) = match &a.key {
            EntryKey::Container { pod_uid, container } => (pod_uid.clone(), container.clone()),
            EntryKey::ContainerId { container_id } => match snap.owner_of_container_id(container_id) {
                Some((uid, name)) => (uid, name.unwrap_or_else(|| container_id.clone())),
                None => continue,
            },
        };
        by_pod.entry(uid).or_default().push((label, a.cpus.clone()));
    }
    for (uid, cpus) in &state.pod_assignments {
        by_pod
            .entry(uid.clone())
            .or_default()
            .push(("(pod-level)".to_string(), cpus.clone()));
    }
    // (pod uid, all its CPUs, its holders)
    type PodCpus<'a> = (&'a String, CpuSet, &'a Vec<(String, CpuSet)>);
    let pods: Vec<PodCpus> = by_pod
        .iter()
        .map(|(uid, holders)| {
            (
                uid,
                holders.iter().fold(CpuSet::new(), |acc, (_, c)| acc.union(c)),
                holders,
            )
        })
        .collect();
    let path = checkpoint_path(snap);
    let mut findings = Vec::new();
    for (i, (uid_a, all_a, holders_a)) in pods.iter().enumerate() {
        for (uid_b, all_b, holders_b) in &pods[i + 1..] {
            let shared = all_a.intersection(all_b);
            if shared.is_empty() {
                continue;
            }
            let who = |holders: &Vec<(String, CpuSet)>| -> Vec<String> {
                holders
                    .iter()
                    .filter(|(_, c)| c.intersects(&shared))
                    .map(|(n, _)| n.clone())
                    .collect()
            };
            let name = |uid: &str| snap.pod(uid).map_or_else(|| format!("pod {uid}"), |p| p.display());
            let subject = snap.pod(uid_a).map_or_else(|| Subject::pod_uid(uid_a), Subject::pod);
            findings.push(
                Finding::new(
                    ID,
                    Severity::Critical,
                    subject,
                    format!(
                        "{} pinned exclusively to both {} and {}",
                        crate::text::cpus_subject(&shared),
                        name(uid_a),
                        name(uid_b)
                    ),
                    reset_checkpoint_remedy(&snap.node, &path),
                )
                .with("pod_uids", vec![uid_a.to_string(), uid_b.to_string()])
                .with("containers", vec![who(holders_a).join(","), who(holders_b).join(",")])
                .with("cpus", shared.to_string())
                .with("path", path.as_str()),
            );
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, leaf, pod, pod_cgroup};

    #[test]
    fn table() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str, &'a str)], &'a [&'a str]);
        let cases: &[Case] = &[
            ("disjoint", &[("a", "c", "2-3"), ("b", "c", "4-5")], &[]),
            ("same pod init reuse", &[("a", "init", "2-3"), ("a", "app", "2-5")], &[]),
            ("two pods", &[("a", "c", "2-3"), ("b", "c", "3-4")], &["3"]),
            (
                "three pods",
                &[("a", "c", "2-3"), ("b", "c", "3-4"), ("c", "c", "4")],
                &["3", "4"],
            ),
        ];
        for (name, entries, want) in cases {
            let f = crate::rules::testkit::judged(
                check,
                &SnapshotBuilder::static_node("0-1", entries).build(),
                &Settings::default(),
            );
            let got: Vec<&str> = f.iter().map(|f| f.evidence["cpus"].as_str().unwrap()).collect();
            assert_eq!(got, *want, "{name}");
        }
    }

    #[test]
    fn evidence_names_pods_and_containers() {
        let snap = SnapshotBuilder::static_node("0-1", &[("a", "init", "2"), ("a", "app", "3"), ("b", "exec", "3")])
            .with_pod_list(&[pod("a", "driver", "Running", &[]), pod("b", "exec-1", "Running", &[])])
            .build();
        let f = &crate::rules::testkit::judged(check, &snap, &Settings::default())[0];
        assert_eq!(f.evidence["pod_uids"], serde_json::json!(["a", "b"]));
        assert_eq!(f.evidence["containers"], serde_json::json!(["app", "exec"]));
        assert_eq!(
            f.summary,
            "CPU 3 is pinned exclusively to both default/driver and default/exec-1"
        );
    }

    #[test]
    fn v1_entries_attributed_through_cgroups() {
        let state = crate::Checkpoint::parse(br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"id1":"2-3","id2":"3","id3":"3"},"checksum":0}"#)
            .unwrap()
            .state()
            .unwrap();
        // id1 and id2 are in the same pod (fine); id3 is unknown (left out).
        let snap = SnapshotBuilder::from_state(state)
            .with_pod_cgroups(vec![pod_cgroup("p1", vec![leaf("id1", "2-3", 1), leaf("id2", "3", 1)])])
            .build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }
}
