//! `scheduler-conflict`: the kubelet rejects pods for lack of room on a node where two or more
//! schedulers bind pods.
//!
//! Each scheduler keeps its own cache of what runs where. When the default scheduler and a
//! batch scheduler (kube-batch, Volcano, YuniKorn) both bind to one node, each counts only the
//! pods it knows of, together they overcommit the node, and the kubelet, which counts every
//! pod, fails the ones that do not fit with `OutOfcpu`, `OutOfmemory`, `OutOfpods`, ...
//! (kubernetes #72043, #60469, #106419; volcano #2700). Spark makes this easy to fall into:
//! `spark.kubernetes.scheduler.name` (3.3) or `spark.kubernetes.executor.scheduler.name` (3.0)
//! sends Spark pods to a batch scheduler while everything else on the node, DaemonSets
//! included, goes through the default one.
//!
//! Fires when this node has capacity rejections (`OutOf*`, and host-port `NodePorts`; counted
//! as `admission-rejection` counts them, window included) and the pods bound to it within
//! `scheduler_conflict_window_seconds` (by `scheduled_at`, else `created_at`; from a pods file,
//! all pods) name two or more `schedulerName`s (unset counts as `default-scheduler`). Mirror
//! pods of static pods are bound by no scheduler and do not count. With one scheduler only
//! `admission-rejection` fires.

use std::collections::{BTreeMap, BTreeSet};

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::pods::annotations::{MIRROR, VOLCANO_GROUP};
use crate::snapshot::{NodeSnapshot, PodInfo, PodSource};
use crate::spark::scheduler_of;
use crate::text::{LISTED, cleanup_remedy, counts};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("scheduler-conflict");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Two schedulers overcommit this node",
    severity: Severity::Warning,
    looks_at: "rejections, schedulerName",
    fires_when: "capacity rejections (OutOf*, NodePorts) on a node where two or more schedulers bound pods in the window",
    event_reason: "SchedulerConflict",
    needs: Needs {
        all: &[One(Source::Pods)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it reads rejection reasons (`OutOf<resource>`, in every kubelet source read; `NodePorts`, `PodFitsHostPorts` before 1.19, both matched) and `spec.schedulerName` through the API",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(next_judgement),
};

/// When the judgement turns by the clock: a rejection leaves its window, or a pod bound within
/// the conflict window leaves it (from the live API; a pods file is judged as captured).
fn next_judgement(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    let bound = (snap.pods.source == PodSource::Api)
        .then(|| {
            snap.pods
                .bound
                .iter()
                .filter_map(|p| p.scheduled_at.or(p.created_at))
                .map(|t| (t + settings.scheduler_conflict_window_seconds - snap.taken_at) as f64 + 1.0)
                .filter(|left| *left > 0.0)
                .min_by(f64::total_cmp)
        })
        .flatten();
    crate::facts::nearest([crate::facts::rejection_window_turn(snap, settings), bound])
}

/// Whether a rejection reason says the node was overcommitted (what two schedulers cause).
fn capacity_reason(reason: &str) -> bool {
    reason.starts_with("OutOf") || matches!(reason, "NodePorts" | "PodFitsHostPorts")
}

/// The pods bound to this node within the window (all pods from a file).
fn bound_recently<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Vec<&'a PodInfo> {
    let live = snap.pods.source == PodSource::Api;
    snap.pods
        .bound
        .iter()
        .filter(|p| !p.annotations.contains_key(MIRROR))
        .filter(|p| {
            !live
                || p.scheduled_at
                    .or(p.created_at)
                    .is_some_and(|t| snap.taken_at - t <= settings.scheduler_conflict_window_seconds)
        })
        .collect()
}

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let rejected: Vec<_> = facts
        .recent_rejections(snap, settings)
        .into_iter()
        .filter(|r| capacity_reason(r.reason))
        .collect();
    if rejected.is_empty() {
        return vec![];
    }
    let bound = bound_recently(snap, settings);
    let mut schedulers: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &bound {
        *schedulers.entry(scheduler_of(p)).or_default() += 1;
    }
    if schedulers.len() < 2 {
        return vec![];
    }
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut rejected_by: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rejected {
        *reasons.entry(r.reason).or_default() += 1;
        *rejected_by.entry(scheduler_of(r.pod)).or_default() += 1;
    }
    let groups: BTreeSet<&str> = bound
        .iter()
        .filter_map(|p| p.annotations.get(VOLCANO_GROUP).map(String::as_str))
        .collect();
    let volcano_pods = bound
        .iter()
        .filter(|p| p.annotations.contains_key(VOLCANO_GROUP))
        .count();
    let live = snap.pods.source == PodSource::Api;
    let names: Vec<&str> = schedulers.keys().copied().collect();
    let listed = names
        .iter()
        .map(|s| format!("{s} {}", schedulers[s]))
        .collect::<Vec<_>>()
        .join(", ");
    let rejections = reasons
        .iter()
        .map(|(r, n)| format!("{n} {r}"))
        .collect::<Vec<_>>()
        .join(", ");
    let spark_names = names
        .iter()
        .filter(|s| **s != "default-scheduler")
        .copied()
        .next()
        .unwrap_or("default-scheduler");

    vec![
        Finding::new(
            ID,
            Severity::Warning,
            Subject::node(&snap.node),
            format!(
                "{} schedulers bind pods to {} (pods bound: {listed}) and the kubelet rejected {} pod(s) that did not fit: {rejections}",
                names.len(),
                snap.node,
                rejected.len()
            ),
            format!(
                "make one scheduler own this node: give each scheduler its own nodes (a node label with node affinity \
                 or a nodeSelector, and a taint its pods tolerate), or send all pods that run here through one \
                 scheduler (for Spark: spark.kubernetes.scheduler.name={spark_names}, Spark 3.3+, or \
                 spark.kubernetes.driver.scheduler.name / spark.kubernetes.executor.scheduler.name); two schedulers \
                 binding from separate caches overcommit the node (kubernetes #72043, #106419; volcano #2700). \
                 Then clean up: {}",
                cleanup_remedy(
                    &snap.node,
                    &reasons.keys().copied().collect::<Vec<_>>().join(", ")
                )
            ),
        )
        .with("schedulers", counts(&schedulers))
        .with("scheduler_count", names.len())
        .with("rejected_pods", rejected.len())
        .with("rejections", counts(&reasons))
        .with("rejected_by_scheduler", counts(&rejected_by))
        .with(
            "pods",
            rejected.iter().take(LISTED).map(|r| r.pod.display()).collect::<Vec<_>>(),
        )
        .with("volcano_pods", (volcano_pods > 0).then_some(volcano_pods))
        .with(
            "volcano_pod_groups",
            (!groups.is_empty()).then(|| groups.iter().take(LISTED).copied().collect::<Vec<_>>()),
        )
        .with("window_seconds", live.then_some(settings.scheduler_conflict_window_seconds)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{NOW, SnapshotBuilder, pod, spark_executor};

    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";

    fn volcano(mut p: PodInfo) -> PodInfo {
        p.scheduler_name = Some("volcano".into());
        p.annotations.insert(VOLCANO_GROUP.into(), format!("{APP}-podgroup"));
        p
    }

    fn out_of_cpu(uid: &str, exec_id: u32) -> PodInfo {
        let mut p = volcano(spark_executor(uid, APP, "etl", exec_id, "Failed"));
        p.reason = Some("OutOfcpu".into());
        p.message = Some(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 8000, used: 58000, capacity: 62000"
                .into(),
        );
        p.created_at = Some(NOW - 120);
        p.scheduled_at = Some(NOW - 119);
        p
    }

    fn default_pod(uid: &str, bound_ago: i64) -> PodInfo {
        let mut p = pod(uid, uid, "Running", &[("app", "")]);
        p.scheduler_name = None;
        p.scheduled_at = Some(NOW - bound_ago);
        p.created_at = Some(NOW - bound_ago);
        p
    }

    #[test]
    fn fires_only_with_rejections_and_two_schedulers() {
        let running = volcano(spark_executor("e1", APP, "etl", 1, "Running"));
        let mut mirror = default_pod("kube-proxy", 60);
        mirror.annotations.insert(MIRROR.into(), "x".into());
        let mut not_capacity = out_of_cpu("aff", 9);
        not_capacity.reason = Some("NodeAffinity".into());
        let cases: Vec<(&str, Vec<PodInfo>, bool)> = vec![
            (
                "conflict",
                vec![running.clone(), out_of_cpu("r1", 2), default_pod("web", 300)],
                true,
            ),
            ("one scheduler", vec![running.clone(), out_of_cpu("r1", 2)], false),
            (
                "two schedulers, no rejections",
                vec![running.clone(), default_pod("web", 300)],
                false,
            ),
            (
                "the default-scheduler pod was bound before the window",
                vec![running.clone(), out_of_cpu("r1", 2), default_pod("web", 7200)],
                false,
            ),
            (
                "mirror pods are bound by no scheduler",
                vec![running.clone(), out_of_cpu("r1", 2), mirror],
                false,
            ),
            (
                "not a capacity rejection",
                vec![running, not_capacity, default_pod("web", 300)],
                false,
            ),
        ];
        for (name, pods, want) in cases {
            let snap = SnapshotBuilder::spark_node(&pods).build();
            assert_eq!(
                !crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn evidence() {
        let mut no_times = default_pod("daemon", 0);
        no_times.scheduled_at = None;
        no_times.created_at = None;
        let pods = vec![
            volcano(spark_executor("e1", APP, "etl", 1, "Running")),
            out_of_cpu("r1", 2),
            out_of_cpu("r2", 3),
            default_pod("web", 300),
            no_times,
        ];
        let snap = SnapshotBuilder::spark_node(&pods).build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        let f = &f[0];
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.subject.kind, crate::finding::SubjectKind::Node);
        assert_eq!(
            f.evidence["schedulers"],
            serde_json::json!({"default-scheduler": 1, "volcano": 3})
        );
        assert_eq!(f.evidence["rejections"], serde_json::json!({"OutOfcpu": 2}));
        assert_eq!(f.evidence["rejected_by_scheduler"], serde_json::json!({"volcano": 2}));
        assert_eq!(f.evidence["volcano_pods"], 3);
        assert_eq!(
            f.evidence["volcano_pod_groups"],
            serde_json::json!([format!("{APP}-podgroup")])
        );
        assert!(f.remedy.contains("spark.kubernetes.scheduler.name=volcano"));
        assert!(
            f.summary.starts_with("2 schedulers bind pods to node-a"),
            "{}",
            f.summary
        );

        // From a file every pod counts, even one with no times.
        let file = SnapshotBuilder::spark_node(&pods).pod_source(PodSource::File).build();
        let f = crate::rules::testkit::judged(check, &file, &Settings::default());
        assert_eq!(
            f[0].evidence["schedulers"],
            serde_json::json!({"default-scheduler": 2, "volcano": 3})
        );
        assert!(f[0].evidence.get("window_seconds").is_none());
    }
}
