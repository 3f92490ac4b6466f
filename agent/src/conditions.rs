//! Node conditions, in the way node-problem-detector sets them: one condition per problem
//! family, `True` while a finding of its rules exists, patched on `nodes/<node>/status` only
//! when a status changes or a heartbeat is due.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use nodemedic_rules::finding::Finding;
use serde_json::json;

/// A condition nodemedic owns.
#[derive(Debug, Clone, Copy)]
pub struct ConditionSpec {
    pub type_: &'static str,
    /// The rules whose findings make it `True`.
    pub rules: &'static [&'static str],
    /// `reason` while `True`.
    pub reason_true: &'static str,
    /// `reason` while `False`.
    pub reason_false: &'static str,
}

/// The conditions of the rules nodemedic runs today.
pub const CONDITIONS: &[ConditionSpec] = &[
    ConditionSpec {
        type_: "CPUManagerStateStale",
        rules: &[
            "stale-cpu-assignment",
            "checkpoint-unreadable",
            "checkpoint-invalid-state",
            "cross-pod-cpu-overlap",
            "kubelet-state-divergence",
        ],
        reason_true: "CPUManagerStateStale",
        reason_false: "CPUManagerStateConsistent",
    },
    ConditionSpec {
        type_: "SparkExecutorOrphans",
        rules: &["orphaned-executor"],
        reason_true: "SparkExecutorOrphans",
        reason_false: "NoSparkExecutorOrphans",
    },
];

/// One condition's wanted state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub type_: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

/// The conditions `findings` call for.
pub fn wanted(findings: &[Finding]) -> Vec<Wanted> {
    CONDITIONS
        .iter()
        .map(|spec| {
            let hits: Vec<&Finding> = findings
                .iter()
                .filter(|f| spec.rules.contains(&f.rule.as_str()))
                .collect();
            let message = match hits.len() {
                0 => "nodemedic finds no problem of this kind".to_string(),
                1 => hits[0].summary.clone(),
                n => format!("{n} findings; first: {}", hits[0].summary),
            };
            Wanted {
                type_: spec.type_,
                status: !hits.is_empty(),
                reason: if hits.is_empty() {
                    spec.reason_false
                } else {
                    spec.reason_true
                },
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
    pub async fn sync(&mut self, findings: &[Finding]) -> Result<bool, crate::kube_api::Error> {
        let wanted = wanted(findings);
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
                    "status": if w.status { "True" } else { "False" },
                    "reason": w.reason,
                    "message": w.message,
                    "lastHeartbeatTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    "lastTransitionTime": transition.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                })
            })
            .collect();
        let patch = json!({"status": {"conditions": conditions}});
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
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
    use super::*;
    use nodemedic_rules::finding::{Severity, Subject};

    #[test]
    fn wanted_conditions_follow_rules() {
        let f = |rule: &str| {
            Finding::new(
                rule,
                Severity::Critical,
                Subject::node("n"),
                format!("{rule} summary"),
                String::new(),
            )
        };
        let w = wanted(&[f("stale-cpu-assignment"), f("cpuset-drift"), f("checkpoint-unreadable")]);
        assert_eq!(w[0].type_, "CPUManagerStateStale");
        assert!(w[0].status);
        assert_eq!(w[0].message, "2 findings; first: stale-cpu-assignment summary");
        assert_eq!(
            (w[1].type_, w[1].status, w[1].reason),
            ("SparkExecutorOrphans", false, "NoSparkExecutorOrphans")
        );
        let none = wanted(&[]);
        assert!(none.iter().all(|w| !w.status));
    }
}
