//! One judgement of a scanned snapshot, as the daemon makes it each cycle: the shared facts
//! derived once ([`nodemedic_rules::facts::derive`]) and read by every rule, the published
//! `NodeResourceTopology`, the metrics and the ResourceClaims the API work asks for; and the
//! findings a rule that could not judge keeps from its last judgement.

use std::collections::BTreeMap;

use nodemedic_rules::coverage::Coverage;
use nodemedic_rules::snapshot::NodeSnapshot;
use nodemedic_rules::{Finding, Settings, facts, rules};

use crate::collect::Records;
use crate::metrics::Metrics;

/// What one judgement gives the daemon.
#[derive(Debug)]
pub(super) struct Judged {
    /// Every rule's findings, those of a rule that could not judge kept from its last judgement,
    /// orphans whose driver lookups are stale marked so.
    pub findings: Vec<Finding>,
    /// How each rule judged.
    pub coverage: BTreeMap<&'static str, Coverage>,
    /// The `NodeResourceTopology` object to publish, when `numa_memory` was given and the static
    /// policy's state is known.
    pub topology: Option<serde_json::Value>,
    /// Whether the node holds prepared DRA claims, and the ResourceClaims the API work reads.
    pub claims: facts::ClaimsToAsk,
}

/// Judges `snapshot` under `settings` once: facts, rules, topology, metrics, claims.
/// `last_judged` holds each rule's findings at its last judgement ([`hold_unjudged`]);
/// `stale_drivers` the executors whose driver lookups are stale (`apiwork::mark_stale`);
/// `numa_memory` is given when the topology is published.
pub(super) fn judge(
    snapshot: &NodeSnapshot,
    records: &Records,
    settings: &Settings,
    last_judged: &mut BTreeMap<&'static str, Vec<Finding>>,
    stale_drivers: &BTreeMap<String, String>,
    metrics: &Metrics,
    numa_memory: Option<&BTreeMap<u32, u64>>,
) -> Judged {
    let facts = facts::derive(snapshot, settings);
    let judgement = rules::judge(snapshot, &facts, settings);
    let coverage = judgement.coverage.clone();
    let mut findings = hold_unjudged(judgement, last_judged);
    let topology = numa_memory.and_then(|memory| crate::nrt::build(snapshot, &facts, memory));
    super::apiwork::mark_stale(&mut findings, stale_drivers);
    metrics.observe_scan(snapshot, &facts, &findings, records);
    metrics.observe_coverage(&coverage);
    for (rule, c) in &coverage {
        if let Coverage::Unknown { reason, .. } = c {
            tracing::warn!(rule, reason = %reason, "rule could not judge; its last findings are kept");
        }
    }
    let claims = facts::claims_to_ask(snapshot, &facts.stale_claims);
    Judged {
        findings,
        coverage,
        topology,
        claims,
    }
}

/// What the rules that judge the API read besides the API's observation, kept from the last
/// full judgement with what it found: the node's drivers and their configurations
/// ([`nodemedic_rules::snapshot::PodsSnapshot::for_api_rules`]), every rule's findings and
/// coverage, and the claims the API work asks for.
#[derive(Debug)]
pub(super) struct ApiBase {
    pub node: String,
    pub pods: nodemedic_rules::snapshot::PodsSnapshot,
    pub findings: Vec<Finding>,
    pub coverage: BTreeMap<&'static str, Coverage>,
    pub claims: facts::ClaimsToAsk,
}

impl ApiBase {
    /// The base of the API judgements that follow the full judgement of `snapshot`.
    pub fn of(snapshot: &NodeSnapshot, judged: &Judged) -> Self {
        ApiBase {
            node: snapshot.node.clone(),
            pods: snapshot.pods.for_api_rules(),
            findings: judged.findings.clone(),
            coverage: judged.coverage.clone(),
            claims: judged.claims.clone(),
        }
    }
}

/// Judges the rules that judge the API alone, on `base` with the API server as `server` shows
/// it at `taken_at`: their findings and coverage replace theirs in `base` (a rule that could
/// not judge keeps its last findings, as in [`judge`]); every other rule's stand. The findings
/// gauges and the coverage are updated. Returns the judged snapshot (for the API rules'
/// deadlines) and whether any finding or coverage changed.
pub(super) fn judge_api(
    base: &mut ApiBase,
    server: nodemedic_rules::snapshot::Observed<nodemedic_rules::snapshot::ApiObservation>,
    taken_at: i64,
    settings: &Settings,
    last_judged: &mut BTreeMap<&'static str, Vec<Finding>>,
    metrics: &Metrics,
) -> (NodeSnapshot, bool) {
    let mut snapshot = NodeSnapshot::empty(&base.node, taken_at);
    snapshot.pods = base.pods.clone();
    snapshot.api.server = server;
    let facts = facts::derive(&snapshot, settings);
    let judgement = rules::judge_where(&snapshot, &facts, settings, rules::RuleInfo::judges_the_api);
    let coverage = judgement.coverage.clone();
    let theirs = hold_unjudged(judgement, last_judged);
    let mut findings: Vec<Finding> = base
        .findings
        .iter()
        .filter(|f| !coverage.contains_key(f.rule.as_str()))
        .cloned()
        .chain(theirs)
        .collect();
    findings.sort_by_key(Finding::sort_key);
    let mut all_coverage = base.coverage.clone();
    all_coverage.extend(coverage.iter().map(|(rule, c)| (*rule, c.clone())));
    // A change of verdict (a finding found or gone, a severity, a rule's coverage); evidence
    // that only ages (seconds since) is not news for the API work.
    let verdicts = |f: &[Finding]| f.iter().map(|f| (f.key(), f.severity)).collect::<Vec<_>>();
    let changed = verdicts(&findings) != verdicts(&base.findings) || all_coverage != base.coverage;
    metrics.observe_findings(&findings);
    metrics.observe_coverage(&coverage);
    base.findings = findings;
    base.coverage = all_coverage;
    (snapshot, changed)
}

/// The findings of `judgement`, with, for each rule that could not judge (a source it needs
/// failed), its findings at its last judgement instead; `last` is updated with the rules that
/// judged. A rule not applicable or disabled holds nothing.
pub(super) fn hold_unjudged(
    judgement: nodemedic_rules::coverage::Judgement,
    last: &mut std::collections::BTreeMap<&'static str, Vec<nodemedic_rules::Finding>>,
) -> Vec<nodemedic_rules::Finding> {
    let mut findings = judgement.findings;
    for (rule, c) in &judgement.coverage {
        match c {
            Coverage::Judged => {
                last.insert(
                    rule,
                    findings.iter().filter(|f| f.rule.as_str() == *rule).cloned().collect(),
                );
            }
            Coverage::Unknown { .. } => {
                // A rule that runs in part reports now what does not depend on the source it
                // lacks; its other findings are the last judged ones.
                let now: std::collections::HashSet<nodemedic_rules::finding::FindingKey> = findings
                    .iter()
                    .filter(|f| f.rule.as_str() == *rule)
                    .map(nodemedic_rules::Finding::key)
                    .collect();
                let kept = last.get(rule).into_iter().flatten();
                let kept: Vec<_> = kept.filter(|f| !now.contains(&f.key())).cloned().collect();
                findings.extend(kept);
            }
            Coverage::NotApplicable { .. } | Coverage::Disabled => {
                last.remove(rule);
            }
        }
    }
    findings.sort_by_key(nodemedic_rules::Finding::sort_key);
    findings
}

#[cfg(test)]
mod tests;
