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
//!
//! [`plan`] judges a snapshot into a [`PodPlan`] and narrows it on the re-check; [`api`] builds
//! the snapshots from the API server and sends the deletions; this file runs the command.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use nodemedic_rules::Settings;
use nodemedic_rules::snapshot::NodeSnapshot;
use serde_json::{Map, Value, json};

use super::audit::{ActionRecord, ActionResult, Audit, RepairAction};
use super::command::{self, Confirm, End, Flow, Ran, Readiness, Repair, RepairError};
use crate::host::HostPaths;
use crate::kube_api;
use crate::scan;

pub mod api;
pub mod plan;

pub use api::{api_snapshot, apply_pod_plan, delete_pod, refresh_snapshot};
pub use plan::{
    DEFAULT_FAILED_POD_MIN_AGE_SECONDS, KeptPod, PodCandidate, PodPlan, plan_failed_pods, plan_half_submitted,
    plan_orphans, recheck,
};

/// Timeout of each API request of a repair run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

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
