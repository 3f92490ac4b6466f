//! What a pod repair deletes: the plans of `orphans`, `failed-pods` and `half-submitted`, judged
//! from a snapshot with the rules' own functions, and the re-check that narrows a plan to the
//! pods a fresh judgement still deletes with the same UID.

use std::collections::{BTreeSet, HashMap};

use nodemedic_rules::Settings;
use nodemedic_rules::facts;
use nodemedic_rules::rules::{half_submitted_driver, orphaned_executor};
use nodemedic_rules::snapshot::{NodeSnapshot, PodInfo, PodPhase, PodSource};
use serde_json::{Map, Value, json};

use crate::repair::audit::{ActionRecord, ActionResult, ActionTarget, RepairAction};

/// `failed-pods`: rejected pods younger than this are left (the rules and the people looking
/// at them still see them for a while), unless `--older-than-seconds` says otherwise.
pub const DEFAULT_FAILED_POD_MIN_AGE_SECONDS: i64 = 600;

/// A pod the plan deletes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PodCandidate {
    pub namespace: String,
    pub name: String,
    /// The UID the deletion is conditioned on.
    pub uid: String,
    pub phase: PodPhase,
    /// Why it is a candidate (the rule's reason).
    pub why: String,
    /// The rule's summary.
    pub summary: String,
    /// The rule's evidence.
    pub evidence: Map<String, Value>,
}

impl PodCandidate {
    /// `ns/name`.
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub(super) fn what(&self) -> String {
        format!("delete pod {} (uid {})", self.display(), self.uid)
    }

    pub(super) fn target(&self) -> ActionTarget {
        ActionTarget::pod(&self.namespace, &self.name, &self.uid)
    }

    /// `pod`, deleted because `why`, with its rule finding's summary and evidence when the rule
    /// reported it (else `why` as the summary).
    fn judged(pod: &PodInfo, why: String, finding: Option<&nodemedic_rules::Finding>) -> Self {
        PodCandidate {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            phase: pod.phase.clone(),
            summary: finding.map_or_else(|| why.clone(), |f| f.summary.clone()),
            evidence: finding.map(|f| f.evidence.clone()).unwrap_or_default(),
            why,
        }
    }
}

/// A rule's findings by the UID of the pod each is about.
fn by_pod(findings: Vec<nodemedic_rules::Finding>) -> HashMap<String, nodemedic_rules::Finding> {
    findings
        .into_iter()
        .filter_map(|f| Some((f.subject.uid.clone()?, f)))
        .collect()
}

/// A pod the rules judge, left alone by this plan, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KeptPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub phase: PodPhase,
    /// What the rule says about it.
    pub why: String,
    /// Why the plan leaves it.
    pub kept_because: String,
}

/// What a pod repair would delete.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PodPlan {
    pub action: RepairAction,
    pub node: String,
    /// Deleted, in this order.
    pub delete: Vec<PodCandidate>,
    /// Judged, but left.
    pub kept: Vec<KeptPod>,
    /// Why nothing could be judged, and the like.
    pub notes: Vec<String>,
}

impl PodPlan {
    fn new(action: RepairAction, node: &str) -> Self {
        PodPlan {
            action,
            node: node.to_string(),
            delete: vec![],
            kept: vec![],
            notes: vec![],
        }
    }

    /// The UIDs of the pods to delete.
    pub fn uids(&self) -> BTreeSet<String> {
        self.delete.iter().map(|c| c.uid.clone()).collect()
    }

    /// The executors whose drivers a re-check must look up again (orphans only).
    pub fn lookups(&self) -> BTreeSet<String> {
        match self.action {
            RepairAction::Orphans => self.uids(),
            _ => BTreeSet::new(),
        }
    }
}

/// Whether the pods of `snapshot` may be acted on: only a live pod list from the API.
fn live_pods(snapshot: &NodeSnapshot, plan: &mut PodPlan) -> bool {
    if snapshot.pods.source == PodSource::Api {
        return true;
    }
    plan.notes.push(format!(
        "the pod list is not from the live API ({}): pods are deleted only on its word",
        snapshot.pods.source.as_str()
    ));
    false
}

/// The orphaned executors `orphaned-executor` reports, as a plan: finished ones (they only hold
/// local data) always, unfinished ones only with `include_running`. The orphan grace is
/// `settings.orphan_grace_seconds`.
pub fn plan_orphans(snapshot: &NodeSnapshot, settings: &Settings, include_running: bool) -> PodPlan {
    let mut plan = PodPlan::new(RepairAction::Orphans, &snapshot.node);
    if !live_pods(snapshot, &mut plan) {
        return plan;
    }
    // The rule's own findings, for their summary and evidence (one per orphan), from the one
    // judgement of this snapshot.
    let facts = facts::derive(snapshot, settings);
    let findings = by_pod(orphaned_executor::check(snapshot, &facts, settings));
    for o in &facts.orphans {
        let pod = o.executor;
        let finding = findings.get(&pod.uid);
        if !pod.is_terminal() && !include_running {
            plan.kept.push(KeptPod {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                phase: pod.phase.clone(),
                why: o.reason.clone(),
                kept_because: format!(
                    "it is still {}: an orphan that has not finished is deleted only with --include-running",
                    pod.phase
                ),
            });
            continue;
        }
        plan.delete.push(PodCandidate::judged(pod, o.reason.clone(), finding));
    }
    plan
}

/// The pods the kubelet rejected at admission (`admission-rejection`'s, whatever the window),
/// as a plan: those created at least `older_than_seconds` ago; younger ones, ones with no
/// creation time and ones already being deleted are left.
pub fn plan_failed_pods(snapshot: &NodeSnapshot, older_than_seconds: i64) -> PodPlan {
    let mut plan = PodPlan::new(RepairAction::FailedPods, &snapshot.node);
    if !live_pods(snapshot, &mut plan) {
        return plan;
    }
    for r in facts::rejections(snapshot) {
        let pod = r.pod;
        let age = pod.created_at.map(|t| snapshot.taken_at - t);
        let why = format!(
            "rejected by the kubelet on {} with reason {}{}",
            snapshot.node,
            r.reason,
            pod.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
        );
        let kept = |because: String| KeptPod {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            phase: pod.phase.clone(),
            why: why.clone(),
            kept_because: because,
        };
        if pod.deleting {
            plan.kept.push(kept("it is already being deleted".into()));
            continue;
        }
        match age {
            None => {
                plan.kept
                    .push(kept("its creation time is unknown, so its age is".into()));
                continue;
            }
            Some(a) if a < older_than_seconds => {
                plan.kept.push(kept(format!(
                    "it was created {a} s ago; rejected pods are deleted once older than {older_than_seconds} s"
                )));
                continue;
            }
            Some(_) => {}
        }
        let numbers = r.insufficient.as_ref();
        let mut evidence = Map::new();
        let mut put = |k: &str, v: Value| {
            if !v.is_null() {
                evidence.insert(k.to_string(), v);
            }
        };
        put("pod", json!(pod.display()));
        put("pod_uid", json!(pod.uid));
        put("phase", json!(pod.phase));
        put("reason", json!(r.reason));
        put("message", json!(pod.message));
        put("age_seconds", json!(age));
        put("scheduler", json!(admission_scheduler(pod)));
        put("spark_role", json!(pod.spark_role()));
        put("app_id", json!(pod.spark_app()));
        put(
            "owner",
            json!(pod.controller().map(|o| format!("{}/{}", o.kind, o.name))),
        );
        put("resource", json!(numbers.map(|n| n.resource.clone())));
        put("requested", json!(numbers.map(|n| n.requested)));
        put("used", json!(numbers.map(|n| n.used)));
        put("capacity", json!(numbers.map(|n| n.capacity)));
        put("unit", json!(numbers.map(|n| n.unit())));
        plan.delete.push(PodCandidate {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            phase: pod.phase.clone(),
            summary: format!("pod {} {why}", pod.display()),
            why,
            evidence,
        });
    }
    plan
}

/// The drivers `half-submitted-driver` reports, as a plan (the grace is
/// `settings.half_submitted_grace_seconds`): each deleted with its finding's summary and
/// evidence.
pub fn plan_half_submitted(snapshot: &NodeSnapshot, settings: &Settings) -> PodPlan {
    let mut plan = PodPlan::new(RepairAction::HalfSubmitted, &snapshot.node);
    if !live_pods(snapshot, &mut plan) {
        return plan;
    }
    let facts = facts::derive(snapshot, settings);
    let findings = by_pod(half_submitted_driver::check(snapshot, &facts, settings));
    for h in &facts.half_submitted {
        let why = format!("waited {} s to start: {}", h.waited_seconds, h.reason);
        plan.delete
            .push(PodCandidate::judged(h.pod, why, findings.get(&h.pod.uid)));
    }
    plan
}

/// `spec.schedulerName`, `default-scheduler` when unset.
fn admission_scheduler(pod: &PodInfo) -> &str {
    pod.scheduler_name
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("default-scheduler")
}

/// `plan` narrowed to the pods `fresh` (the same judgement made again) still deletes with the
/// same UID; the others become skipped records.
pub fn recheck(plan: &PodPlan, fresh: &PodPlan) -> (PodPlan, Vec<ActionRecord>) {
    let mut kept = plan.clone();
    kept.delete.clear();
    let mut skipped = vec![];
    for c in &plan.delete {
        if fresh.delete.iter().any(|f| f.uid == c.uid) {
            kept.delete.push(c.clone());
            continue;
        }
        let detail = match fresh.kept.iter().find(|k| k.uid == c.uid) {
            Some(k) => format!("left on the re-check right before deleting: {}", k.kept_because),
            None => "no longer a candidate on the re-check right before deleting (the pod is gone, was \
                     recreated, or is no longer judged so)"
                .to_string(),
        };
        skipped.push(
            ActionRecord::new(
                plan.action,
                ActionResult::Skipped,
                c.target(),
                c.what(),
                c.why.clone(),
                c.evidence.clone(),
            )
            .with_detail(detail),
        );
    }
    (kept, skipped)
}

#[cfg(test)]
mod tests;
