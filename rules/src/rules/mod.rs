//! The rule catalogue. One module per rule id (`stale-cpu-assignment` lives in
//! `stale_cpu_assignment.rs`); each exposes `check(&NodeSnapshot, &Facts, &Settings) -> Vec<Finding>`,
//! reading the shared judgements of [`crate::facts::derive`], made once per judgement.
//! [`judge`] runs every enabled rule and returns the findings in a stable order.
//!
//! A rule module holds its id, its catalogue entry (`RULE`: what it needs, from which kubelet
//! versions it holds, its Event reason, node condition, gauge and clock deadline), the
//! evaluation that turns facts into findings, and its tests. [`ALL`] lists the entries; the
//! agent wires metrics, conditions, Events, deadlines and coverage from them.
//! Rule modules do not use each other: what several of them need is in the shared modules
//! ([`crate::facts`], [`crate::probes`], [`crate::spark`], [`crate::text`]).

pub mod admission_rejection;
pub mod apiserver_unreachable;
pub mod checkpoint_invalid_state;
pub mod checkpoint_unreadable;
pub mod cpuset_drift;
pub mod cross_pod_cpu_overlap;
pub mod device_admission_failure;
pub mod driver_blocked_by_partition;
pub mod duplicate_driver;
pub mod exclusive_cpu_shortage;
pub mod executor_without_owner;
pub mod half_submitted_driver;
pub mod kubelet_state_divergence;
pub mod local_storage_eviction_risk;
pub mod orphaned_executor;
pub mod orphaned_local_dir;
pub mod scheduler_conflict;
pub mod shuffle_service_missing;
pub mod slow_api;
pub mod slow_pod_admission;
pub mod spark_executor_evicted;
pub mod stale_cpu_assignment;
pub mod stale_device_assignment;
pub mod stale_dra_claim;
pub mod stale_memory_assignment;
pub mod webhook_blocks_dry_run;

use crate::coverage::{Coverage, Judgement, KubeletVersions, Needs};
use crate::facts::Facts;
use crate::finding::{Finding, Severity};
use crate::settings::Settings;
use crate::snapshot::NodeSnapshot;

/// A rule's signature: a pure function of the snapshot, the facts derived from it once
/// ([`crate::facts::derive`]) and the settings they were derived under.
pub type CheckFn = fn(&NodeSnapshot, &Facts, &Settings) -> Vec<Finding>;

/// A rule's identity and documentation.
#[derive(Debug, Clone, Copy)]
pub struct RuleInfo {
    /// The stable id (docs/architecture.md), also the name of its page under docs/rules/.
    pub id: crate::finding::RuleId,
    /// One line for people.
    pub title: &'static str,
    /// The severity of its usual finding (a rule may report some findings lower).
    pub severity: Severity,
    /// The inputs it reads.
    pub looks_at: &'static str,
    /// When it fires.
    pub fires_when: &'static str,
    /// The Kubernetes Event reason for its findings.
    pub event_reason: &'static str,
    /// The sources it needs to judge ([`crate::coverage`]); its page's "Needs" line lists them.
    pub needs: Needs,
    /// From which kubelet version each of its comparisons holds ([`crate::coverage::KubeletVersions`]);
    /// its page's "Kubelet versions" block says it.
    pub kubelet_versions: KubeletVersions,
    pub check: CheckFn,
    /// The node condition its findings make `True`, if any (the agent patches one condition per
    /// [`NodeCondition`], from every rule that declares it).
    pub condition: Option<NodeCondition>,
    /// The gauge its findings set, if any (the agent registers one per declaring rule).
    pub gauge: Option<RuleGauge>,
    /// When its judgement of a snapshot changes by the clock alone (a grace that runs out):
    /// seconds after the snapshot was taken, `None` when nothing waits on the clock. The daemon
    /// judges again then, even if nothing on the node or in the API changed.
    pub next_judgement: Option<NextJudgementFn>,
}

impl RuleInfo {
    /// Whether it judges the API server as this node sees it ([`crate::coverage::Source::Api`]):
    /// what it reads besides is the node's Spark drivers and their configurations, never the
    /// host. The daemon judges these rules alone when only the API's observation changed.
    pub fn judges_the_api(&self) -> bool {
        self.needs
            .all
            .iter()
            .any(|n| matches!(n, crate::coverage::Need::One(crate::coverage::Source::Api)))
    }
}

/// A rule's [`RuleInfo::next_judgement`].
pub type NextJudgementFn = fn(&NodeSnapshot, &Settings) -> Option<f64>;

/// A node condition some rules' findings make `True` (`False` when none of them found
/// anything, `Unknown` when none found anything and one could not judge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeCondition {
    /// The condition's `type`.
    pub type_: &'static str,
    /// Its `reason` while `True`.
    pub reason_true: &'static str,
    /// Its `reason` while `False`.
    pub reason_false: &'static str,
}

/// The CPU manager's checkpoint holds what the kubelet does not, or cannot be read by it.
pub const CPU_MANAGER_STATE_STALE: NodeCondition = NodeCondition {
    type_: "CPUManagerStateStale",
    reason_true: "CPUManagerStateStale",
    reason_false: "CPUManagerStateConsistent",
};

/// Spark executors outlive their driver on the node.
pub const SPARK_EXECUTOR_ORPHANS: NodeCondition = NodeCondition {
    type_: "SparkExecutorOrphans",
    reason_true: "SparkExecutorOrphans",
    reason_false: "NoSparkExecutorOrphans",
};

/// The node conditions of the catalogue, each once, in catalogue order.
pub fn conditions() -> Vec<NodeCondition> {
    let mut out: Vec<NodeCondition> = vec![];
    for c in ALL.iter().filter_map(|r| r.condition) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// A gauge that one rule's findings set.
#[derive(Debug, Clone, Copy)]
pub struct RuleGauge {
    /// The metric's name without the `nodemedic_` prefix.
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Its value from the rule's findings of one judgement (those a rule that could not judge
    /// keeps included).
    pub value: fn(&[&Finding]) -> u64,
}

/// A [`RuleGauge::value`]: how many findings.
pub fn count_findings(findings: &[&Finding]) -> u64 {
    findings.len() as u64
}

impl RuleInfo {
    /// The rule's documentation page, relative to the repository root.
    pub fn docs_path(&self) -> String {
        format!("docs/rules/{}.md", self.id)
    }
}

/// Every rule nodemedic runs, in catalogue order.
pub const ALL: &[RuleInfo] = &[
    checkpoint_unreadable::RULE,
    checkpoint_invalid_state::RULE,
    stale_cpu_assignment::RULE,
    cross_pod_cpu_overlap::RULE,
    cpuset_drift::RULE,
    kubelet_state_divergence::RULE,
    exclusive_cpu_shortage::RULE,
    stale_memory_assignment::RULE,
    stale_device_assignment::RULE,
    stale_dra_claim::RULE,
    device_admission_failure::RULE,
    orphaned_executor::RULE,
    executor_without_owner::RULE,
    admission_rejection::RULE,
    scheduler_conflict::RULE,
    duplicate_driver::RULE,
    driver_blocked_by_partition::RULE,
    half_submitted_driver::RULE,
    orphaned_local_dir::RULE,
    local_storage_eviction_risk::RULE,
    spark_executor_evicted::RULE,
    shuffle_service_missing::RULE,
    slow_api::RULE,
    slow_pod_admission::RULE,
    apiserver_unreachable::RULE,
    webhook_blocks_dry_run::RULE,
];

/// The rule with `id`.
pub fn by_id(id: &str) -> Option<&'static RuleInfo> {
    ALL.iter().find(|r| r.id.as_str() == id)
}

/// Runs every enabled rule that can judge ([`crate::coverage`]): its findings worst first, then
/// by rule and subject, and every rule's coverage. A rule that could not judge does not run
/// (unless it lacks only what it can do without in part: see [`Needs::partial`]). `facts` are
/// those of `snapshot` under `settings` ([`crate::facts::derive`]).
pub fn judge(snapshot: &NodeSnapshot, facts: &Facts, settings: &Settings) -> Judgement {
    judge_where(snapshot, facts, settings, |_| true)
}

/// [`judge`] of the rules `which` picks: the judgement's coverage has only those.
pub fn judge_where(
    snapshot: &NodeSnapshot,
    facts: &Facts,
    settings: &Settings,
    which: impl Fn(&RuleInfo) -> bool,
) -> Judgement {
    let mut coverage = std::collections::BTreeMap::new();
    let mut findings = Vec::new();
    for r in ALL.iter().filter(|r| which(r)) {
        let covered = if settings.enabled(r.id.as_str()) {
            crate::coverage::coverage(snapshot, &r.needs)
        } else {
            Coverage::Disabled
        };
        if covered.runs(&r.needs) {
            let mut found = (r.check)(snapshot, facts, settings);
            if let Some(severity) = settings.severity_overrides.get(r.id.as_str()) {
                for f in &mut found {
                    f.severity = *severity;
                }
            }
            findings.extend(found);
        }
        coverage.insert(r.id.as_str(), covered);
    }
    findings.sort_by_key(Finding::sort_key);
    Judgement { findings, coverage }
}

/// The findings of [`judge`], the facts derived here: for callers that need nothing else of
/// the snapshot's facts.
pub fn evaluate(snapshot: &NodeSnapshot, settings: &Settings) -> Vec<Finding> {
    judge(snapshot, &crate::facts::derive(snapshot, settings), settings).findings
}

#[cfg(test)]
mod clock_tests;
#[cfg(test)]
mod docs_map;
#[cfg(test)]
pub(crate) mod testkit;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_ids_are_unique_kebab_case_and_match_modules() {
        let mut ids: Vec<&str> = ALL.iter().map(|r| r.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), ALL.len());
        for r in ALL {
            assert!(
                r.id.as_str().bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{}",
                r.id
            );
            assert!(r.event_reason.chars().next().is_some_and(|c| c.is_ascii_uppercase()));
            assert_eq!(by_id(r.id.as_str()).map(|x| x.id), Some(r.id));
        }
    }

    #[test]
    fn severity_overrides_apply_and_settings_validate() {
        let snap = testkit::SnapshotBuilder::static_node("0-1", &[("dead-pod", "app", "2-3")])
            .with_pod_list(&[])
            .build();
        let mut settings = Settings::default();
        settings
            .severity_overrides
            .insert("stale-cpu-assignment".into(), Severity::Info);
        let f = evaluate(&snap, &settings);
        assert!(
            f.iter()
                .filter(|f| f.rule.as_str() == "stale-cpu-assignment")
                .all(|f| f.severity == Severity::Info)
        );
        assert_eq!(settings.validate(), Ok(()));
        settings
            .severity_overrides
            .insert("no-such-rule".into(), Severity::Info);
        assert!(
            settings
                .validate()
                .unwrap_err()
                .to_string()
                .contains("\"no-such-rule\"")
        );
        let negative = Settings {
            orphan_grace_seconds: -1,
            ..Default::default()
        };
        assert_eq!(
            negative.validate().map_err(|e| e.to_string()),
            Err("orphan_grace_seconds: -1 is negative".into())
        );
    }

    #[test]
    fn disabled_rules_do_not_run() {
        let snap = testkit::SnapshotBuilder::static_node("0-1", &[("dead-pod", "app", "2-3")])
            .with_pod_list(&[])
            .build();
        let all = evaluate(&snap, &Settings::default());
        assert!(all.iter().any(|f| f.rule.as_str() == "stale-cpu-assignment"));
        let mut settings = Settings::default();
        settings.disabled_rules.insert("stale-cpu-assignment".into());
        assert!(
            evaluate(&snap, &settings)
                .iter()
                .all(|f| f.rule.as_str() != "stale-cpu-assignment")
        );
    }
}
