//! `admission-rejection`: pods bound to this node that the kubelet refused to run.
//!
//! The scheduler and the kubelet each decide whether a pod fits. When the kubelet disagrees
//! after the pod was bound, it fails the pod at admission: `status.phase: Failed`, a reason
//! (`OutOf<resource>`, `UnexpectedAdmissionError`, a predicate name, ...) and the message
//! `Pod was rejected: <why>` (older kubelets: `Pod <why>`), plus a Warning event
//! (`pkg/kubelet/lifecycle/predicate.go`, `rejectPod` in `kubelet.go`). Such pods are never
//! retried and stay until deleted; for Spark each one is a lost executor that the driver has
//! to ask for again. A stream of `OutOf*` rejections is the mark of two schedulers binding to
//! one node (`scheduler-conflict`).
//!
//! One finding per reason, for the node. Pods the CPU manager refused for lack of exclusive
//! CPUs are left to `exclusive-cpu-shortage` while that rule runs. From the live API only pods
//! created within `rejection_window_seconds` count (old rejections are history); a pods file is
//! judged as it was captured. Which pods are rejections is [`crate::facts::rejections`], which
//! lists every rejected pod, without the window, for the
//! `nodemedic_admission_rejections_total{reason}` counter.

use std::collections::BTreeMap;

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::facts::{Rejection, rejected_for_cpus};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, PodSource};
use crate::spark::scheduler_of;
use crate::text::{LISTED, cleanup_remedy, counts};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("admission-rejection");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "The kubelet rejected pods bound to this node",
    severity: Severity::Warning,
    looks_at: "pods on the node",
    fires_when: "pods failed kubelet admission (OutOfcpu, OutOfmemory, OutOfpods, UnexpectedAdmissionError, a predicate name, ...; from the live API only within the rejection window)",
    event_reason: "AdmissionRejection",
    needs: Needs {
        all: &[One(Source::Pods)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it reads the pods' `status.reason` and `status.message`; the kubelet's `OutOf<resource>` reasons and `Node didn't have enough resource` messages are in every kubelet source read, from the oldest admission handler on, and `UnexpectedAdmissionError` in every source read that checks device plugin resources at admission",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::facts::rejection_window_turn),
};

/// The rule that reports pods the CPU manager refused (`exclusive-cpu-shortage`): while it runs,
/// this rule leaves those pods to it.
const CPU_SHORTAGE_RULE: &str = "exclusive-cpu-shortage";

fn cause(reason: &str, newest: &Rejection<'_>) -> String {
    match reason {
        r if r.starts_with("OutOf") => {
            "the scheduler bound pods that the kubelet's own accounting could not fit: usually two schedulers bind \
             to this node from separate caches (see scheduler-conflict), or pods were bound by setting spec.nodeName \
             directly"
                .to_string()
        }
        "UnexpectedAdmissionError"
            if newest
                .pod
                .message
                .as_deref()
                .is_some_and(|m| m.contains("not enough cpus")) =>
        {
            "the CPU manager had no exclusive CPUs left for a Guaranteed pod (see exclusive-cpu-shortage)".to_string()
        }
        "UnexpectedAdmissionError" => {
            "a kubelet resource manager (CPU, memory, device or topology manager) failed to allocate: read the \
             message and the kubelet's log"
                .to_string()
        }
        "TopologyAffinityError" => {
            "the topology manager's policy could not place the pod's CPUs, memory and devices on one NUMA node: \
             lower the request or relax topologyManagerPolicy"
                .to_string()
        }
        _ => "the kubelet's check disagrees with the scheduler's: the node's labels or NoExecute taints changed \
              between scheduling and admission, or something bound the pod without checking them"
            .to_string(),
    }
}

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    // Pods the CPU manager refused are `exclusive-cpu-shortage`'s (critical, with the stale
    // CPUs that usually cause it): one problem, one finding, unless that rule is off.
    let cpu_rule = settings.enabled(CPU_SHORTAGE_RULE);
    let mut by_reason: BTreeMap<&str, Vec<&Rejection<'_>>> = BTreeMap::new();
    for r in facts.recent_rejections(snap, settings) {
        if cpu_rule && rejected_for_cpus(r.pod) {
            continue;
        }
        by_reason.entry(r.reason).or_default().push(r);
    }
    let live = snap.pods.source == PodSource::Api;
    by_reason
        .into_iter()
        .filter_map(|(reason, mut pods)| {
            // Newest first; pods with no creation time last.
            pods.sort_by_key(|r| std::cmp::Reverse(r.pod.created_at.unwrap_or(i64::MIN)));
            let newest = pods.first()?;
            let mut schedulers: BTreeMap<&str, usize> = BTreeMap::new();
            for r in &pods {
                *schedulers.entry(scheduler_of(r.pod)).or_default() += 1;
            }
            let numbers = newest.insufficient.as_ref();
            let detail = numbers.map_or(String::new(), |n| {
                format!(
                    " (newest: {} requested {} {}, {} of {} {} in use)",
                    newest.pod.display(),
                    n.resource,
                    n.requested,
                    n.used,
                    n.capacity,
                    n.unit()
                )
            });
            Some(
                Finding::new(
                    ID,
                    Severity::Warning,
                    Subject::node(&snap.node),
                    format!(
                        "{} pod(s) were rejected by the kubelet on {} with reason {reason}{detail}",
                        pods.len(),
                        snap.node
                    ),
                    format!("{}; {}", cause(reason, newest), cleanup_remedy(&snap.node, reason)),
                )
                .with("reason", reason)
                .with("rejected_pods", pods.len())
                .with(
                    "pods",
                    pods.iter().take(LISTED).map(|r| r.pod.display()).collect::<Vec<_>>(),
                )
                .with("newest_pod", newest.pod.display())
                .with("newest_age_seconds", newest.pod.created_at.map(|t| snap.taken_at - t))
                .with("message", newest.pod.message.clone())
                .with("resource", numbers.map(|n| n.resource.clone()))
                .with("requested", numbers.map(|n| n.requested))
                .with("used", numbers.map(|n| n.used))
                .with("capacity", numbers.map(|n| n.capacity))
                .with("unit", numbers.map(|n| n.unit()))
                .with("shortfall", numbers.map(|n| n.shortfall()))
                .with("schedulers", counts(&schedulers))
                .with("window_seconds", live.then_some(settings.rejection_window_seconds)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::rejections;
    use crate::rules::testkit::{NOW, SnapshotBuilder, spark_executor};
    use crate::snapshot::PodInfo;

    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";

    fn rejected(uid: &str, exec_id: u32, reason: &str, message: &str, age: Option<i64>) -> PodInfo {
        let mut p = spark_executor(uid, APP, "etl", exec_id, "Failed");
        p.reason = Some(reason.into());
        p.message = Some(message.into());
        p.created_at = age.map(|a| NOW - a);
        p.containers[0].state = None;
        p.containers[0].exit_code = None;
        p
    }

    #[test]
    fn one_finding_per_reason_with_the_newest_numbers() {
        let snap = SnapshotBuilder::spark_node(&[
            rejected(
                "r1",
                7,
                "OutOfcpu",
                "Pod was rejected: Node didn't have enough resource: cpu, requested: 4000, used: 60000, capacity: 62000",
                Some(600),
            ),
            rejected(
                "r2",
                8,
                "OutOfcpu",
                "Pod Node didn't have enough resource: cpu, requested: 8000, used: 58000, capacity: 62000",
                Some(60),
            ),
            rejected(
                "r3",
                9,
                "OutOfmemory",
                "Pod was rejected: Node didn't have enough resource: memory, requested: 17179869184, used: 120259084288, capacity: 132070244352",
                Some(120),
            ),
            rejected("old", 1, "OutOfcpu", "Pod was rejected: ...", Some(7200)),
            spark_executor("ok", APP, "etl", 2, "Running"),
        ])
        .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 2, "{f:#?}");
        let cpu = &f[0];
        assert_eq!(cpu.subject.kind, crate::finding::SubjectKind::Node);
        assert_eq!(cpu.evidence["reason"], "OutOfcpu");
        assert_eq!(cpu.evidence["rejected_pods"], 2);
        assert_eq!(
            cpu.evidence["pods"],
            serde_json::json!(["spark-jobs/etl-exec-8", "spark-jobs/etl-exec-7"])
        );
        assert_eq!(cpu.evidence["requested"], 8000);
        assert_eq!(cpu.evidence["shortfall"], 4000);
        assert_eq!(cpu.evidence["unit"], "millicores");
        assert_eq!(cpu.evidence["schedulers"], serde_json::json!({"default-scheduler": 2}));
        assert_eq!(cpu.evidence["window_seconds"], 3600);
        assert!(cpu.remedy.contains("scheduler-conflict"));
        assert!(cpu.remedy.contains("reasons [OutOfcpu]"));
        assert_eq!(f[1].evidence["unit"], "bytes");
        assert!(
            cpu.summary
                .ends_with("with reason OutOfcpu (newest: spark-jobs/etl-exec-8 requested cpu 8000, 58000 of 62000 millicores in use)"),
            "{}",
            cpu.summary
        );

        // A pods file is judged as captured: the old one counts too, no window in evidence.
        let file = SnapshotBuilder::spark_node(&snap.pods.bound)
            .pod_source(PodSource::File)
            .build();
        let f = crate::rules::testkit::judged(check, &file, &Settings::default());
        assert_eq!(f[0].evidence["rejected_pods"], 3);
        assert!(f[0].evidence.get("window_seconds").is_none());
        // The counter's list ignores the window.
        assert_eq!(rejections(&snap).len(), 4);
    }

    #[test]
    fn cpu_manager_refusals_are_left_to_exclusive_cpu_shortage() {
        let p = rejected(
            "r1",
            1,
            "UnexpectedAdmissionError",
            "Pod was rejected: Allocate failed due to not enough cpus available to satisfy request, which is unexpected",
            Some(60),
        );
        let snap = SnapshotBuilder::spark_node(&[p]).build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
        assert_eq!(rejections(&snap).len(), 1, "still counted for the metric");
        let mut settings = Settings::default();
        settings.disabled_rules.insert("exclusive-cpu-shortage".into());
        let f = crate::rules::testkit::judged(check, &snap, &settings);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].remedy.starts_with("the CPU manager had no exclusive CPUs left"),
            "{}",
            f[0].remedy
        );
    }

    #[test]
    fn odd_rejections_do_not_panic() {
        let mut p = rejected("r1", 1, "UnexpectedAdmissionError", "", None);
        p.message = None;
        p.labels.clear();
        let snap = SnapshotBuilder::spark_node(&[p]).build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert!(f[0].evidence.get("requested").is_none());
        assert!(f[0].evidence.get("newest_age_seconds").is_none());
        assert!(f[0].remedy.starts_with("a kubelet resource manager"));
        assert!(
            crate::rules::testkit::judged(check, &SnapshotBuilder::spark_node(&[]).build(), &Settings::default())
                .is_empty()
        );
    }
}
