//! `nodemedic repair orphans`, `nodemedic repair failed-pods` and `nodemedic repair half-submitted`: delete pods
//! useless, with the pod's UID as a precondition, and the daemon's automatic repair.
//!
//! - `orphans`: the Spark executors `orphaned-executor` reports (driver gone, replaced, or
//!   finished for longer than the orphan grace). A finished orphan only holds local data, and
//!   deleting its pod object makes the kubelet remove its emptyDir local dirs. An orphan that
//!   has not finished (Pending, Running) is deleted only with `--include-running`: its JVM is
//!   stopped with the pod's grace period.
//! - `failed-pods`: the pods `admission-rejection` counts (Failed at kubelet admission:
//!   `OutOfcpu`, `UnexpectedAdmissionError`, ...) once older than `--older-than-seconds`. They
//!   are never retried and stay until deleted.
//! - `half-submitted`: the Spark drivers `half-submitted-driver` reports (spark-submit gave up
//!   on them; they wait to start without their ConfigMap, or after a newer driver of their
//!   submission started), once they have waited `--older-than-seconds` (the rule's grace). The
//!   re-check before deleting lists the pods again: a driver that started meanwhile, or that
//!   is no longer `Pending`, is left. Never automatic.
//!
//! They all build the snapshot the way `nodemedic scan` does from the API (this node's pods and
//! their drivers' lookups; with `--host-root` also the host, for the local data evidence), judge
//! with the rules' own functions, and print the plan (pod, why, evidence). With `--apply` (and
//! `--yes` or a typed `yes`) they judge once more from a fresh pod list and fresh driver
//! lookups, then delete each pod with `DeleteOptions.preconditions.uid`: a pod recreated under
//! the same name in between answers 409 Conflict and is reported as skipped, never touched.
//! Each action is logged with what, why and the evidence and recorded as an Event on the pod
//! ([`super::audit`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client};
use nodemedic_rules::Settings;
use nodemedic_rules::facts;
use nodemedic_rules::rules::{half_submitted_driver, orphaned_executor};
use nodemedic_rules::snapshot::{DriverLookup, NodeSnapshot, PodInfo, PodSource};
use serde_json::{Map, Value, json};

use super::audit::{ActionRecord, ActionResult, ActionTarget, Audit, RateLimiter, RepairAction, now_unix};
use super::command::{self, Confirm, End, Flow, Ran, Readiness, Repair, RepairError};
use crate::host::HostPaths;
use crate::kube_api::{self, ApiDirectory};
use crate::scan::{self, Pods};

/// `failed-pods`: rejected pods younger than this are left (the rules and the people looking
/// at them still see them for a while), unless `--older-than-seconds` says otherwise.
pub const DEFAULT_FAILED_POD_MIN_AGE_SECONDS: i64 = 600;

/// Timeout of each API request of a repair run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// All driver lookups of one judgement together.
const LOOKUPS_TIMEOUT: Duration = Duration::from_secs(30);

/// A pod the plan deletes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PodCandidate {
    pub namespace: String,
    pub name: String,
    /// The UID the deletion is conditioned on.
    pub uid: String,
    pub phase: String,
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

    fn what(&self) -> String {
        format!("delete pod {} (uid {})", self.display(), self.uid)
    }

    fn target(&self) -> ActionTarget {
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
    pub phase: String,
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
    if snapshot.pod_source == PodSource::Api {
        return true;
    }
    plan.notes.push(format!(
        "the pod list is not from the live API ({}): pods are deleted only on its word",
        snapshot.pod_source.as_str()
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
    // The rule's own findings, for their summary and evidence (one per orphan).
    let findings = by_pod(orphaned_executor::check(snapshot, settings));
    for o in facts::orphaned_executors(snapshot, settings) {
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
    let findings = by_pod(half_submitted_driver::check(snapshot, settings));
    for h in facts::half_submitted_drivers(snapshot, settings) {
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

/// This node's pods and their drivers from the API, through the scan's own assembler: with
/// `host`, the host is read too (local dir sizes, the CPU manager checkpoint), without it the
/// snapshot holds only the pods and the driver lookups.
pub async fn api_snapshot(
    api: &kube_api::Connection,
    node: &str,
    host: Option<&HostPaths>,
    local_dir_roots: &[String],
) -> Result<NodeSnapshot, scan::ScanError> {
    let pods = Pods::Api {
        api: Box::new(api.clone()),
        node: node.to_string(),
        fallback: false,
    };
    let opts = scan::Options {
        node: Some(node.to_string()),
        skip_host: host.is_none(),
        local_dir_roots: local_dir_roots.to_vec(),
        host_reads_inline: true,
        lookups_timeout: Some(LOOKUPS_TIMEOUT),
        ..Default::default()
    };
    let root = HostPaths::new("/", None);
    let scanned = scan::snapshot::<ApiDirectory>(host.unwrap_or(&root), pods, None, &opts).await?;
    Ok(scanned.snapshot)
}

/// `base` with this node's pods listed again and the drivers of `executors` looked up again
/// (uncached), for the judgement right before deleting. A driver found only through an earlier
/// lookup (a client-mode driver whose IP now leads nowhere) keeps the earlier verdict.
pub async fn refresh_snapshot(
    client: &Client,
    base: &NodeSnapshot,
    executors: &BTreeSet<String>,
) -> Result<NodeSnapshot, kube_api::Error> {
    let pods = kube_api::node_pods(client, &base.node).await?;
    let directory = ApiDirectory::new(client.clone());
    let lookups = async {
        let mut drivers = BTreeMap::new();
        for p in pods.iter().filter(|p| executors.contains(&p.uid)) {
            let mut lookup = crate::spark::resolve_driver(&directory, p).await;
            if matches!(lookup, DriverLookup::External { .. }) {
                if let Some(before @ (DriverLookup::Gone { .. } | DriverLookup::Replaced { .. })) =
                    base.drivers.get(&p.uid)
                {
                    lookup = before.clone();
                }
            }
            drivers.insert(p.uid.clone(), lookup);
        }
        drivers
    };
    let drivers = tokio::time::timeout(LOOKUPS_TIMEOUT, lookups)
        .await
        .map_err(|_| kube_api::Error::Timeout {
            verb: "GET",
            resource: "the executors' driver pods".into(),
            seconds: LOOKUPS_TIMEOUT.as_secs(),
        })?;
    let mut fresh = base.clone();
    fresh.taken_at = now_unix();
    fresh.pod_source = PodSource::Api;
    fresh.pods = pods;
    fresh.drivers = drivers;
    Ok(fresh)
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

/// Deletes `pod` only if it still has the planned UID. `Skipped` when the name now belongs to
/// another pod (409) or is gone (404).
pub async fn delete_pod(client: &Client, pod: &PodCandidate) -> (ActionResult, Option<String>) {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&pod.name, &params).await {
        Ok(_) => (ActionResult::Applied, None),
        Err(kube::Error::Api(s)) if s.code == 409 => (
            ActionResult::Skipped,
            Some(format!(
                "the pod named {} is not the one judged (UID precondition failed: {}): a pod recreated under \
                 the same name is never touched",
                pod.display(),
                s.message
            )),
        ),
        Err(kube::Error::Api(s)) if s.code == 404 => (ActionResult::Skipped, Some("the pod is already gone".into())),
        Err(e) => (ActionResult::Failed, Some(format!("DELETE pod {}: {e}", pod.display()))),
    }
}

/// Deletes the plan's pods in order (each with its UID as a precondition), logging each and
/// recording an Event on the pod. With a limiter, each DELETE sent takes a unit; once none is
/// left the rest waits for a later call.
pub async fn apply_pod_plan(
    client: &Client,
    plan: &PodPlan,
    audit: &Audit,
    mut limiter: Option<&mut RateLimiter>,
) -> Vec<ActionRecord> {
    let mut out = vec![];
    for (i, c) in plan.delete.iter().enumerate() {
        if let Some(lim) = limiter.as_deref_mut() {
            if !lim.try_acquire() {
                tracing::info!(
                    target: "nodemedic::repair",
                    action = plan.action.as_str(),
                    left = plan.delete.len() - i,
                    max_actions_per_hour = lim.max_per_hour(),
                    "repair rate limit reached; the rest waits"
                );
                break;
            }
        }
        let (result, detail) = delete_pod(client, c).await;
        let mut rec = ActionRecord::new(
            plan.action,
            result,
            c.target(),
            c.what(),
            c.why.clone(),
            c.evidence.clone(),
        );
        rec.detail = detail;
        audit.record(&mut rec).await;
        out.push(rec);
    }
    out
}

/// `k=v k=v` for scalars, JSON for the rest.
pub(crate) fn evidence_line(evidence: &Map<String, Value>) -> String {
    evidence
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s:?}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What `repair orphans` and `repair failed-pods` run with (the command line, as plain values).
#[derive(Debug, Clone)]
pub struct Options {
    /// [`RepairAction::Orphans`], [`RepairAction::FailedPods`] or [`RepairAction::HalfSubmitted`].
    pub action: RepairAction,
    /// This node; default: the host's name.
    pub node: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    /// Read the host too (the evidence's local data sizes); `None`: pods only.
    pub host: Option<HostPaths>,
    /// The rule settings (`orphan_grace_seconds`, ...).
    pub settings: Settings,
    /// `orphans`: also delete orphans that have not finished.
    pub include_running: bool,
    /// `failed-pods`: only pods rejected longer ago than this.
    pub older_than_seconds: i64,
    /// The name this run's Events are reported by.
    pub instance: String,
    pub flow: Flow,
}

impl Options {
    fn judge(&self, snapshot: &NodeSnapshot) -> PodPlan {
        match self.action {
            RepairAction::FailedPods => plan_failed_pods(snapshot, self.older_than_seconds),
            RepairAction::HalfSubmitted => plan_half_submitted(snapshot, &self.settings),
            _ => plan_orphans(snapshot, &self.settings, self.include_running),
        }
    }
}

/// The pod repairs for [`command::run`].
struct PodRepair<'a> {
    opts: &'a Options,
    api: kube_api::Connection,
    runtime: &'a tokio::runtime::Runtime,
    snapshot: NodeSnapshot,
}

impl Repair for PodRepair<'_> {
    type Plan = PodPlan;
    type Applied = Vec<ActionRecord>;

    fn readiness(&self, plan: &PodPlan) -> Readiness {
        if plan.delete.is_empty() {
            Readiness::NothingToDo
        } else {
            Readiness::Ready
        }
    }

    fn question(&self, plan: &PodPlan) -> String {
        format!("Delete the {} pod(s) above?", plan.delete.len())
    }

    fn render_plan(&self, plan: &PodPlan, dry_run: bool) -> String {
        render_plan(plan, !dry_run)
    }

    fn apply(&mut self, plan: &PodPlan) -> Result<Vec<ActionRecord>, RepairError> {
        let client = &self.api.client;
        let audit = Audit::new(Some(client.clone()), &plan.node, &self.opts.instance).echoing();
        self.runtime.block_on(async {
            let fresh = refresh_snapshot(client, &self.snapshot, &plan.lookups())
                .await
                .map_err(|e| RepairError::CouldNotRun(e.to_string()))?;
            let (confirmed, skipped) = recheck(plan, &self.opts.judge(&fresh));
            let mut records = vec![];
            for mut rec in skipped {
                audit.record(&mut rec).await;
                records.push(rec);
            }
            records.extend(apply_pod_plan(client, &confirmed, &audit, None).await);
            Ok(records)
        })
    }

    fn render_applied(&self, _: &PodPlan, records: &Vec<ActionRecord>) -> String {
        render_records(records)
    }

    fn end(&self, records: &Vec<ActionRecord>) -> End {
        records_end(records)
    }

    fn json(&self, plan: &PodPlan, records: Option<&Vec<ActionRecord>>, end: &End) -> Value {
        json!({"repair": plan.action.as_str(), "node": plan.node, "dry_run": records.is_none(),
               "plan": plan, "actions": records.cloned().unwrap_or_default(), "exit_code": end.exit_code()})
    }

    fn targets(&self, plan: &PodPlan) -> Vec<String> {
        plan.delete
            .iter()
            .map(|p| format!("delete pod {}/{} uid {}", p.namespace, p.name, p.uid))
            .collect()
    }
}

/// `nodemedic repair orphans`, `failed-pods` and `half-submitted`: plan from the API (and the host with
/// `host`), then the flow of [`command`].
pub fn run(
    opts: &Options,
    out: &mut dyn Write,
    confirm: Confirm<'_>,
) -> Result<Ran<PodPlan, Vec<ActionRecord>>, RepairError> {
    let runtime = crate::runtime().map_err(|e| format!("tokio runtime: {e}"))?;
    let node = opts
        .node
        .clone()
        .unwrap_or_else(|| crate::collect::host_node_name(opts.host.as_ref().unwrap_or(&HostPaths::new("/", None))));
    if let Some(h) = &opts.host {
        if !h.root().is_dir() {
            return Err(format!("{}: host root does not exist or is not a directory", h.root().display()).into());
        }
    }
    let (api, snapshot) = runtime.block_on(async {
        // A kubeconfig the user named that cannot be used is an error naming it, as in `scan`.
        let named = |e: scan::ScanError| scan::blame_kubeconfig(opts.kubeconfig.as_deref(), e).to_string();
        let api = kube_api::Connection::load(opts.kubeconfig.as_deref(), REQUEST_TIMEOUT)
            .await
            .map_err(|e| named(e.into()))?;
        let snapshot = api_snapshot(&api, &node, opts.host.as_ref(), &[])
            .await
            .map_err(named)?;
        Ok::<_, String>((api, snapshot))
    })?;
    let plan = opts.judge(&snapshot);
    let mut repair = PodRepair {
        opts,
        api,
        runtime: &runtime,
        snapshot,
    };
    command::run(&mut repair, plan, &opts.flow, out, confirm)
}

/// How applying `records` ended: an action that failed makes it [`RepairError::ActionsFailed`].
pub(crate) fn records_end(records: &[ActionRecord]) -> End {
    let failed: Vec<&ActionRecord> = records.iter().filter(|r| r.result == ActionResult::Failed).collect();
    match failed.first() {
        None => End::Applied,
        Some(first) => End::Failed(RepairError::ActionsFailed(format!(
            "{} of {} action(s) failed; first: {}: {}",
            failed.len(),
            records.len(),
            first.what,
            first.detail.as_deref().unwrap_or("")
        ))),
    }
}

fn render_plan(plan: &PodPlan, apply: bool) -> String {
    let mut text = format!(
        "nodemedic repair {} on node {}: {} pod(s) to delete\n",
        plan.action.as_str(),
        plan.node,
        plan.delete.len()
    );
    for note in &plan.notes {
        text.push_str(&format!("  note: {note}\n"));
    }
    for c in &plan.delete {
        text.push_str(&format!("  delete pod {} (uid {}, {})\n", c.display(), c.uid, c.phase));
        text.push_str(&format!("    why: {}\n", c.why));
        if !c.evidence.is_empty() {
            text.push_str(&format!("    evidence: {}\n", evidence_line(&c.evidence)));
        }
    }
    if !plan.kept.is_empty() {
        text.push_str(&format!("left alone: {} pod(s)\n", plan.kept.len()));
        for k in &plan.kept {
            text.push_str(&format!(
                "  {}/{} (uid {}, {}): {}\n    why it was judged: {}\n",
                k.namespace, k.name, k.uid, k.phase, k.kept_because, k.why
            ));
        }
    }
    if !apply && !plan.delete.is_empty() {
        text.push_str(
            "dry run: nothing changed; add --apply to delete (each pod only if its UID is still the one above)\n",
        );
    }
    text
}

/// Each record's line, and the counts.
pub(crate) fn render_records(records: &[ActionRecord]) -> String {
    let mut text = String::new();
    for r in records {
        text.push_str(&format!("{}\n", r.line()));
    }
    let count = |res: ActionResult| records.iter().filter(|r| r.result == res).count();
    text.push_str(&format!(
        "{} applied, {} skipped, {} failed\n",
        count(ActionResult::Applied),
        count(ActionResult::Skipped),
        count(ActionResult::Failed)
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::snapshot::{ContainerInfo, LocalDirVolume, LookupMethod, OwnerRef};

    const NOW: i64 = 1_790_000_000;
    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";

    fn executor(uid: &str, n: u32, phase: &str) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: "spark".into(),
            name: format!("etl-exec-{n}"),
            node_name: Some("n1".into()),
            phase: phase.into(),
            labels: [
                ("spark-role".to_string(), "executor".to_string()),
                ("spark-app-selector".to_string(), APP.to_string()),
            ]
            .into(),
            containers: vec![ContainerInfo {
                name: "spark-kubernetes-executor".into(),
                ..Default::default()
            }],
            owner_refs: vec![OwnerRef {
                kind: "Pod".into(),
                name: "etl-driver".into(),
                uid: "d1".into(),
                controller: true,
            }],
            local_dir_volumes: vec![LocalDirVolume {
                name: "spark-local-dir-1".into(),
                host_path: None,
            }],
            created_at: Some(NOW - 3600),
            ..Default::default()
        }
    }

    fn gone() -> DriverLookup {
        DriverLookup::Gone {
            by: LookupMethod::OwnerReference,
            expected: "spark/etl-driver (uid d1)".into(),
        }
    }

    fn snapshot(pods: Vec<PodInfo>) -> NodeSnapshot {
        let mut s = NodeSnapshot::empty("n1", NOW);
        s.pod_source = PodSource::Api;
        for p in pods.iter().filter(|p| p.spark_role() == Some("executor")) {
            s.drivers.insert(p.uid.clone(), gone());
        }
        s.pods = pods;
        s
    }

    #[test]
    fn orphans_running_ones_only_when_asked() {
        let snap = snapshot(vec![executor("e1", 1, "Running"), executor("e2", 2, "Failed")]);
        let plan = plan_orphans(&snap, &Settings::default(), false);
        assert_eq!(plan.delete.iter().map(|c| c.uid.as_str()).collect::<Vec<_>>(), ["e2"]);
        assert_eq!(plan.kept[0].uid, "e1");
        assert!(plan.kept[0].kept_because.contains("--include-running"));
        assert_eq!(plan.delete[0].evidence["driver_state"], "gone");
        assert!(plan.delete[0].why.starts_with("no driver pod exists"));
        let all = plan_orphans(&snap, &Settings::default(), true);
        assert_eq!(all.delete.len(), 2);
        assert!(all.kept.is_empty());
        // Only from the live API.
        let mut file = snap.clone();
        file.pod_source = PodSource::File;
        let none = plan_orphans(&file, &Settings::default(), true);
        assert!(none.delete.is_empty());
        assert_eq!(none.notes.len(), 1);
    }

    #[test]
    fn failed_pods_by_age() {
        let rejected = |uid: &str, age: Option<i64>| {
            let mut p = executor(uid, 9, "Failed");
            p.reason = Some("OutOfcpu".into());
            p.message = Some(
                "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 7000, capacity: 8000"
                    .into(),
            );
            p.created_at = age.map(|a| NOW - a);
            p
        };
        let mut deleting = rejected("r4", Some(7200));
        deleting.deleting = true;
        let plain_failure = executor("f1", 3, "Failed");
        let snap = snapshot(vec![
            rejected("r1", Some(7200)),
            rejected("r2", Some(60)),
            rejected("r3", None),
            deleting,
            plain_failure,
        ]);
        let plan = plan_failed_pods(&snap, 600);
        assert_eq!(plan.delete.iter().map(|c| c.uid.as_str()).collect::<Vec<_>>(), ["r1"]);
        let ev = &plan.delete[0].evidence;
        assert_eq!(ev["reason"], "OutOfcpu");
        assert_eq!(ev["requested"], 2000);
        assert_eq!(ev["age_seconds"], 7200);
        assert_eq!(ev["scheduler"], "default-scheduler");
        let kept: Vec<&str> = plan.kept.iter().map(|k| k.uid.as_str()).collect();
        assert_eq!(kept, ["r2", "r3", "r4"], "a plain failure is not a rejection");
        assert_eq!(plan_failed_pods(&snap, 0).delete.len(), 2);
    }

    #[test]
    fn recheck_keeps_only_what_is_still_judged_so() {
        let snap = snapshot(vec![executor("e1", 1, "Failed"), executor("e2", 2, "Failed")]);
        let plan = plan_orphans(&snap, &Settings::default(), false);
        // e2 was recreated (another uid), e1 is unchanged.
        let fresh = snapshot(vec![executor("e1", 1, "Failed"), executor("e2-new", 2, "Failed")]);
        let (kept, skipped) = recheck(&plan, &plan_orphans(&fresh, &Settings::default(), false));
        assert_eq!(kept.delete.iter().map(|c| c.uid.as_str()).collect::<Vec<_>>(), ["e1"]);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].target.uid.as_deref(), Some("e2"));
        assert_eq!(skipped[0].result, ActionResult::Skipped);
        assert!(skipped[0].detail.as_deref().unwrap_or("").contains("re-check"));
    }
}
