//! Node conditions, in the way node-problem-detector sets them: one condition per problem
//! family, `True` while a finding of its rules exists, `Unknown` (reason `CannotJudge`) while
//! none does and one of its rules could not judge (a source it needs failed: "could not look"
//! is never "finds no problem"), else `False`; patched on `nodes/<node>/status` only when a
//! status changes or a heartbeat is due.

use std::collections::BTreeMap;
use std::time::Duration;

// tokio's clock: the system's monotonic clock, except under a test's paused clock.
use tokio::time::Instant;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use nodemedic_rules::coverage::Coverage;
use nodemedic_rules::finding::Finding;
use nodemedic_rules::rules::{self, NodeCondition};
use serde_json::json;

/// The rules whose findings decide `condition`: those that declare it in the catalogue
/// ([`nodemedic_rules::rules::RuleInfo::condition`]).
fn rules_of(condition: NodeCondition) -> Vec<&'static str> {
    rules::ALL
        .iter()
        .filter(|r| r.condition == Some(condition))
        .map(|r| r.id.as_str())
        .collect()
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    /// None of its rules found anything, and one of them could not judge.
    Unknown,
}

impl Status {
    /// `True`, `False`, `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// `reason` of a condition whose rules could not judge.
pub const REASON_CANNOT_JUDGE: &str = "CannotJudge";

/// One condition's wanted state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub type_: &'static str,
    pub status: Status,
    pub reason: &'static str,
    pub message: String,
}

/// The conditions `findings` and the rules' `coverage` call for. A finding of a rule that could
/// not judge this time (one the caller kept from its last judgement) does not make a condition
/// `True`: with no other finding, the condition is `Unknown`. A rule missing from `coverage`
/// counts as judged.
pub fn wanted(findings: &[Finding], coverage: &BTreeMap<&'static str, Coverage>) -> Vec<Wanted> {
    let judged = |rule: &str| {
        coverage
            .get(rule)
            .is_none_or(|c| !matches!(c, Coverage::Unknown { .. }))
    };
    rules::conditions()
        .into_iter()
        .map(|spec| {
            let its_rules = rules_of(spec);
            let hits: Vec<&Finding> = findings
                .iter()
                .filter(|f| its_rules.contains(&f.rule.as_str()) && judged(f.rule.as_str()))
                .collect();
            let unknown: Vec<String> = its_rules
                .iter()
                .filter_map(|r| match coverage.get(r) {
                    Some(Coverage::Unknown { reason, .. }) => Some(format!("{r} ({reason})")),
                    _ => None,
                })
                .collect();
            let (status, reason, message) = match (hits.len(), unknown.is_empty()) {
                (0, true) => (
                    Status::False,
                    spec.reason_false,
                    "nodemedic finds no problem of this kind".to_string(),
                ),
                (0, false) => (
                    Status::Unknown,
                    REASON_CANNOT_JUDGE,
                    format!("nodemedic could not judge {}", unknown.join("; ")),
                ),
                (1, _) => (Status::True, spec.reason_true, hits[0].summary.clone()),
                (n, _) => (
                    Status::True,
                    spec.reason_true,
                    format!("{n} findings; first: {}", hits[0].summary),
                ),
            };
            Wanted {
                type_: spec.type_,
                status,
                reason,
                message: message.chars().take(1024).collect(),
            }
        })
        .collect()
}

/// Keeps the node's conditions in step with the findings.
pub struct NodeConditions {
    client: Client,
    node: String,
    heartbeat: Duration,
    last: BTreeMap<&'static str, (Wanted, jiff::Timestamp)>,
    last_patch: Option<Instant>,
}

impl std::fmt::Debug for NodeConditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConditions").field("node", &self.node).finish()
    }
}

impl NodeConditions {
    pub fn new(client: Client, node: &str, heartbeat: Duration) -> Self {
        NodeConditions {
            client,
            node: node.to_string(),
            heartbeat,
            last: BTreeMap::new(),
            last_patch: None,
        }
    }

    /// Changes the heartbeat.
    pub fn set_heartbeat(&mut self, every: Duration) {
        self.heartbeat = every;
    }

    /// Patches the node's status when a condition changed or the heartbeat is due; returns
    /// whether it patched.
    pub async fn sync(
        &mut self,
        findings: &[Finding],
        coverage: &BTreeMap<&'static str, Coverage>,
    ) -> Result<bool, crate::kube_api::Error> {
        let wanted = wanted(findings, coverage);
        // A new status or reason is patched at once; a new message waits for the heartbeat,
        // so a count in the message does not make a patch per scan.
        let changed = wanted.iter().any(|w| {
            self.last
                .get(w.type_)
                .is_none_or(|(l, _)| l.status != w.status || l.reason != w.reason)
        });
        let due = self.last_patch.is_none_or(|t| t.elapsed() >= self.heartbeat);
        if !changed && !due {
            return Ok(false);
        }
        let now = jiff::Timestamp::now();
        let conditions: Vec<serde_json::Value> = wanted
            .iter()
            .map(|w| {
                let transition = match self.last.get(w.type_) {
                    Some((l, t)) if l.status == w.status => *t,
                    _ => now,
                };
                json!({
                    "type": w.type_,
                    "status": w.status.as_str(),
                    "reason": w.reason,
                    "message": w.message,
                    "lastHeartbeatTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    "lastTransitionTime": transition.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                })
            })
            .collect();
        let patch = json!({"status": {"conditions": conditions}});
        // The reply, the whole Node, is not read: decoded untyped, so the typed Node decoder
        // (NodeStatus and all it holds) is not in the binary for it.
        let nodes: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
        );
        nodes
            .patch_status(&self.node, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map_err(|e| crate::kube_api::Error::request("PATCH", format!("nodes/{}/status", self.node), &e))?;
        for w in wanted {
            let transition = match self.last.get(w.type_) {
                Some((l, t)) if l.status == w.status => *t,
                _ => now,
            };
            self.last.insert(w.type_, (w, transition));
        }
        self.last_patch = Some(Instant::now());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    /// The catalogue declares the two conditions and which rules decide each; the conditions
    /// page and the alerts name the same.
    #[test]
    fn the_catalogue_declares_each_condition_and_its_rules() {
        let declared: Vec<(&str, Vec<&str>)> = rules::conditions()
            .into_iter()
            .map(|c| (c.type_, super::rules_of(c)))
            .collect();
        assert_eq!(
            declared,
            [
                (
                    "CPUManagerStateStale",
                    vec![
                        "checkpoint-unreadable",
                        "checkpoint-invalid-state",
                        "stale-cpu-assignment",
                        "cross-pod-cpu-overlap",
                        "kubelet-state-divergence",
                    ]
                ),
                ("SparkExecutorOrphans", vec!["orphaned-executor"]),
            ]
        );
    }

    use super::*;
    use nodemedic_rules::finding::{Severity, Subject};

    fn f(rule: &'static str) -> Finding {
        Finding::new(
            rule.into(),
            Severity::Critical,
            Subject::node("n"),
            format!("{rule} summary"),
            String::new(),
        )
    }

    #[test]
    fn wanted_conditions_follow_rules() {
        let none = BTreeMap::new();
        let w = wanted(
            &[f("stale-cpu-assignment"), f("cpuset-drift"), f("checkpoint-unreadable")],
            &none,
        );
        assert_eq!(w[0].type_, "CPUManagerStateStale");
        assert_eq!(w[0].status, Status::True);
        assert_eq!(w[0].message, "2 findings; first: stale-cpu-assignment summary");
        assert_eq!(
            (w[1].type_, w[1].status, w[1].reason),
            ("SparkExecutorOrphans", Status::False, "NoSparkExecutorOrphans")
        );
        assert!(wanted(&[], &none).iter().all(|w| w.status == Status::False));
    }

    /// A rule that could not judge makes its condition Unknown, never False "finds no problem";
    /// a finding kept from its last judgement does not make it True; a judged finding of
    /// another rule of the family does.
    #[test]
    fn a_rule_that_could_not_judge_makes_its_condition_unknown() {
        let mut coverage = BTreeMap::new();
        coverage.insert(
            "kubelet-state-divergence",
            Coverage::Unknown {
                missing: vec![nodemedic_rules::coverage::Source::Podresources],
                reason: "podresources: List did not answer within 2 s".into(),
            },
        );
        coverage.insert("stale-cpu-assignment", Coverage::Judged);
        let kept = [f("kubelet-state-divergence")];
        for findings in [&[][..], &kept[..]] {
            let w = wanted(findings, &coverage);
            assert_eq!(
                (w[0].status, w[0].reason, w[0].message.as_str()),
                (
                    Status::Unknown,
                    "CannotJudge",
                    "nodemedic could not judge kubelet-state-divergence (podresources: List did not answer within 2 s)"
                )
            );
            assert_eq!(w[1].status, Status::False, "the other family judged");
        }
        let w = wanted(&[f("stale-cpu-assignment")], &coverage);
        assert_eq!((w[0].status, w[0].reason), (Status::True, "CPUManagerStateStale"));
    }
}
