//! `nodemedic repair orphans` and `nodemedic repair failed-pods`: delete pods the rules judge
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
//!
//! Both build the snapshot the way `nodemedic scan` does from the API (this node's pods and
//! their drivers' lookups; with `--host-root` also the host, for the local data evidence), judge
//! with the rules' own functions, and print the plan (pod, why, evidence). With `--apply` (and
//! `--yes` or a typed `yes`) they judge once more from a fresh pod list and fresh driver
//! lookups, then delete each pod with `DeleteOptions.preconditions.uid`: a pod recreated under
//! the same name in between answers 409 Conflict and is reported as skipped, never touched.
//! Each action is logged with what, why and the evidence and recorded as an Event on the pod
//! ([`super::audit`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client};
use nodemedic_rules::Settings;
use nodemedic_rules::rules::{admission_rejection, orphaned_executor};
use nodemedic_rules::snapshot::{DriverLookup, NodeSnapshot, PodInfo, PodSource};
use serde_json::{Map, Value, json};

use super::audit::{ActionRecord, ActionResult, ActionTarget, Audit, RATE_WINDOW, RateLimiter, RepairAction, now_unix};
use crate::args::Format;
use crate::collect::{self, ScanOptions};
use crate::host::HostPaths;
use crate::kube_api::{self, ApiDirectory};

/// Exit code: nothing to do, or everything applied (or skipped on purpose).
pub const EXIT_OK: u8 = 0;
/// Exit code: a dry run with a plan, or a plan that was not confirmed.
pub const EXIT_PLAN: u8 = 1;
/// Exit code: could not run, or an action failed.
pub const EXIT_ERROR: u8 = 2;

/// `failed-pods`: rejected pods younger than this are left (the rules and the people looking
/// at them still see them for a while), unless `--older-than-seconds` says otherwise.
pub const DEFAULT_FAILED_POD_MIN_AGE_SECONDS: i64 = 600;

/// Timeout of each API request of a repair run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// All driver lookups of one judgement together.
const LOOKUPS_TIMEOUT: Duration = Duration::from_secs(30);

/// The flags both pod repairs take.
#[derive(Debug, clap::Args)]
pub struct PodRepairArgs {
    /// This node's name (the DaemonSet sets NODE_NAME); default: the kubelet's --hostname-override or /etc/hostname.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,
    /// A kubeconfig file; default: in-cluster configuration, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "NODEMEDIC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Read the host under this directory too, for the evidence: local data sizes, exclusive CPUs (`/host` in the DaemonSet).
    #[arg(long, env = "NODEMEDIC_HOST_ROOT")]
    pub host_root: Option<PathBuf>,
    /// The kubelet's directory, used as given (with --host-root); default: the kubelet's --root-dir under the host root.
    #[arg(long, env = "NODEMEDIC_KUBELET_DIR")]
    pub kubelet_dir: Option<PathBuf>,
    /// The daemon's configuration file: its `rules` settings (orphan_grace_seconds, ...) are used (in the agent: /etc/nodemedic/config.yaml).
    #[arg(long, env = "NODEMEDIC_CONFIG")]
    pub config: Option<PathBuf>,
    /// A rule setting, KEY=VALUE (repeat), as for `nodemedic scan`.
    #[arg(long = "rule-setting", value_name = "KEY=VALUE")]
    pub rule_setting: Vec<String>,
    /// Delete the pods of the plan (without it: a dry run that only prints the plan).
    #[arg(long, default_value_t = false)]
    pub apply: bool,
    /// Do not ask before deleting.
    #[arg(long, default_value_t = false)]
    pub yes: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text", env = "NODEMEDIC_FORMAT")]
    pub format: Format,
}

/// `nodemedic repair orphans`.
#[derive(Debug, clap::Args)]
pub struct OrphansArgs {
    #[command(flatten)]
    pub common: PodRepairArgs,
    /// How long a driver must have finished before its executors are orphans, in seconds [default: the rule's orphan_grace_seconds, 600].
    #[arg(long)]
    pub older_than_seconds: Option<i64>,
    /// Also delete orphans that have not finished (Pending, Running): their JVM is stopped.
    #[arg(long, default_value_t = false)]
    pub include_running: bool,
}

/// `nodemedic repair failed-pods`.
#[derive(Debug, clap::Args)]
pub struct FailedPodsArgs {
    #[command(flatten)]
    pub common: PodRepairArgs,
    /// Only pods rejected (created) longer ago than this, in seconds.
    #[arg(long, default_value_t = DEFAULT_FAILED_POD_MIN_AGE_SECONDS)]
    pub older_than_seconds: i64,
}

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
    let findings: HashMap<String, nodemedic_rules::Finding> = orphaned_executor::check(snapshot, settings)
        .into_iter()
        .filter_map(|f| Some((f.subject.uid.clone()?, f)))
        .collect();
    for o in orphaned_executor::orphaned_executors(snapshot, settings) {
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
        plan.delete.push(PodCandidate {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            phase: pod.phase.clone(),
            why: o.reason.clone(),
            summary: finding.map(|f| f.summary.clone()).unwrap_or_else(|| o.reason.clone()),
            evidence: finding.map(|f| f.evidence.clone()).unwrap_or_default(),
        });
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
    for r in admission_rejection::rejections(snapshot) {
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

/// `spec.schedulerName`, `default-scheduler` when unset.
fn admission_scheduler(pod: &PodInfo) -> &str {
    pod.scheduler_name
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("default-scheduler")
}

/// This node's pods and their drivers from the API, judged like `nodemedic scan` judges them:
/// with `host`, the host is read too (local dir sizes, the CPU manager checkpoint), without it
/// the snapshot holds only the pods and the driver lookups.
pub async fn api_snapshot(
    client: &Client,
    node: &str,
    host: Option<&HostPaths>,
    local_dir_roots: &[String],
) -> Result<NodeSnapshot, String> {
    let pods = kube_api::node_pods(client, node).await?;
    let directory = ApiDirectory::new(client.clone());
    let (drivers, app_drivers) = tokio::time::timeout(LOOKUPS_TIMEOUT, crate::spark::resolve_all(&directory, &pods))
        .await
        .map_err(|_| format!("driver lookups took over {} s", LOOKUPS_TIMEOUT.as_secs()))?;
    let mut snapshot = match host {
        Some(host) => {
            let opts = ScanOptions {
                node: Some(node.to_string()),
                pods: Some((pods, PodSource::Api)),
                local_dir_roots: local_dir_roots.to_vec(),
                ..Default::default()
            };
            collect::collect(host, &opts).map_err(|e| e.to_string())?.snapshot
        }
        None => {
            let mut s = NodeSnapshot::empty(node, now_unix());
            s.pod_source = PodSource::Api;
            s.pods = pods;
            s
        }
    };
    snapshot.drivers = drivers;
    snapshot.app_drivers = app_drivers;
    Ok(snapshot)
}

/// `base` with this node's pods listed again and the drivers of `executors` looked up again
/// (uncached), for the judgement right before deleting. A driver found only through an earlier
/// lookup (a client-mode driver whose IP now leads nowhere) keeps the earlier verdict.
pub async fn refresh_snapshot(
    client: &Client,
    base: &NodeSnapshot,
    executors: &BTreeSet<String>,
) -> Result<NodeSnapshot, String> {
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
        .map_err(|_| format!("driver lookups took over {} s", LOOKUPS_TIMEOUT.as_secs()))?;
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

/// What the daemon repairs by itself. Everything is off by default; when on, at most
/// `max_actions_per_hour` mutations in any sliding hour. `cpu-state` is never automatic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoRepairPolicy {
    /// Delete orphaned executors that have finished (they only hold local data).
    pub orphans: bool,
    /// Delete pods the kubelet rejected at admission, once older than `failed_pods_older_than_seconds`.
    pub failed_pods: bool,
    /// Remove orphaned Spark scratch directories under the configured hostPath roots.
    pub local_dirs: bool,
    pub max_actions_per_hour: u32,
    /// Also delete orphans that have not finished (stops their JVM).
    pub include_running_orphans: bool,
    pub failed_pods_older_than_seconds: i64,
}

impl Default for AutoRepairPolicy {
    fn default() -> Self {
        AutoRepairPolicy {
            orphans: false,
            failed_pods: false,
            local_dirs: false,
            max_actions_per_hour: 10,
            include_running_orphans: false,
            failed_pods_older_than_seconds: DEFAULT_FAILED_POD_MIN_AGE_SECONDS,
        }
    }
}

impl AutoRepairPolicy {
    /// Whether any automatic repair is on.
    pub fn any(&self) -> bool {
        self.orphans || self.failed_pods || self.local_dirs
    }
}

/// What automatic repair keeps between cycles: the rate limiter, and the targets it left on
/// purpose recently (not tried or logged again for an hour, so a lasting refusal is one log
/// line an hour, not one a cycle).
#[derive(Debug, Default)]
pub struct AutoRepairState {
    pub limiter: RateLimiter,
    quiet: HashMap<String, Instant>,
}

impl AutoRepairState {
    pub fn new(max_actions_per_hour: u32) -> Self {
        AutoRepairState {
            limiter: RateLimiter::new(max_actions_per_hour),
            quiet: HashMap::new(),
        }
    }

    fn prune(&mut self) {
        self.quiet.retain(|_, at| at.elapsed() < RATE_WINDOW);
    }

    fn is_quiet(&self, key: &str) -> bool {
        self.quiet.contains_key(key)
    }

    fn hush(&mut self, key: String) {
        self.quiet.insert(key, Instant::now());
    }
}

/// Where automatic local-dir repair acts: the host and the configured hostPath roots.
#[derive(Debug, Clone, Copy)]
pub struct LocalDirTarget<'a> {
    pub host: &'a HostPaths,
    pub roots: &'a [String],
}

/// One round of automatic repair for the daemon's cycle: what `policy` turns on, judged from
/// `snapshot` (the cycle's, pods from the live API only) and again from a fresh pod list right
/// before acting, within `state`'s rate limit. Returns the mutations sent (applied, skipped by
/// a precondition, failed), each already logged and recorded as an Event.
pub async fn auto_repair(
    client: &Client,
    audit: &Audit,
    snapshot: &NodeSnapshot,
    settings: &Settings,
    policy: &AutoRepairPolicy,
    state: &mut AutoRepairState,
    local: Option<LocalDirTarget<'_>>,
) -> Vec<ActionRecord> {
    let mut out = vec![];
    if !policy.any() || snapshot.pod_source != PodSource::Api {
        return out;
    }
    state.limiter.set_max_per_hour(policy.max_actions_per_hour);
    state.prune();
    for action in [RepairAction::FailedPods, RepairAction::Orphans] {
        let on = match action {
            RepairAction::FailedPods => policy.failed_pods,
            _ => policy.orphans,
        };
        if !on || state.limiter.remaining() == 0 {
            continue;
        }
        let judge = |s: &NodeSnapshot| match action {
            RepairAction::FailedPods => plan_failed_pods(s, policy.failed_pods_older_than_seconds),
            _ => plan_orphans(s, settings, policy.include_running_orphans),
        };
        let mut plan = judge(snapshot);
        plan.delete.retain(|c| !state.is_quiet(&c.uid));
        if plan.delete.is_empty() {
            continue;
        }
        let fresh = match refresh_snapshot(client, snapshot, &plan.lookups()).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(target: "nodemedic::repair", action = action.as_str(), error = %e, "automatic repair: re-check failed; trying again next cycle");
                continue;
            }
        };
        let (plan, skipped) = recheck(&plan, &judge(&fresh));
        for rec in &skipped {
            audit.log(rec);
            if let Some(uid) = &rec.target.uid {
                state.hush(uid.clone());
            }
        }
        let records = apply_pod_plan(client, &plan, audit, Some(&mut state.limiter)).await;
        for rec in records.iter().filter(|r| r.result != ActionResult::Applied) {
            if let Some(uid) = &rec.target.uid {
                state.hush(uid.clone());
            }
        }
        out.extend(records);
    }
    if let (true, Some(target)) = (policy.local_dirs, local) {
        if state.limiter.remaining() > 0 {
            out.extend(auto_local_dirs(client, audit, snapshot, settings, state, target).await);
        }
    }
    out
}

async fn auto_local_dirs(
    client: &Client,
    audit: &Audit,
    snapshot: &NodeSnapshot,
    settings: &Settings,
    state: &mut AutoRepairState,
    target: LocalDirTarget<'_>,
) -> Vec<ActionRecord> {
    let mut plan = super::local_dirs::plan_local_dirs(target.host, target.roots, snapshot, settings);
    plan.remove.retain(|c| !state.is_quiet(&c.path));
    if plan.remove.is_empty() {
        return vec![];
    }
    let pods = match kube_api::node_pods(client, &snapshot.node).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(target: "nodemedic::repair", action = "local-dirs", error = %e, "automatic repair: re-check failed; trying again next cycle");
            return vec![];
        }
    };
    let host = target.host.clone();
    let snapshot = snapshot.clone();
    let settings = settings.clone();
    let log = audit.clone();
    let mut limiter = std::mem::take(&mut state.limiter);
    let max = limiter.max_per_hour();
    let joined = tokio::task::spawn_blocking(move || {
        let fresh = super::local_dirs::FreshPods {
            pods,
            source: PodSource::Api,
        };
        let records =
            super::local_dirs::apply_local_dirs(&host, &plan, &snapshot, &fresh, &settings, &log, Some(&mut limiter));
        (records, limiter)
    })
    .await;
    let mut records = match joined {
        Ok((records, limiter)) => {
            state.limiter = limiter;
            records
        }
        Err(e) => {
            // The window's history went with the task: assume it used everything.
            state.limiter = RateLimiter::new(max);
            while state.limiter.try_acquire() {}
            tracing::error!(target: "nodemedic::repair", error = %e, "automatic local-dir repair task failed");
            return vec![];
        }
    };
    for rec in records.iter().filter(|r| r.result != ActionResult::Applied) {
        if let Some(path) = &rec.target.path {
            state.hush(path.clone());
        }
    }
    // Only removals that started are returned (and counted); refusals were logged.
    records.retain(|r| r.result != ActionResult::Skipped);
    audit.events(&mut records).await;
    records
}

/// Asks `question` on `out` and reads the answer from `input`: only `y` or `yes` says yes.
pub(crate) fn confirm(out: &mut dyn Write, input: &mut dyn BufRead, question: &str) -> bool {
    let _ = write!(out, "{question} [y/N] ");
    let _ = out.flush();
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) | Err(_) => {
            let _ = writeln!(out);
            false
        }
        Ok(_) => matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
    }
}

/// The rule settings of a repair run: the daemon's configuration file's `rules` (when given),
/// then `--rule-setting` pairs.
pub(crate) fn repair_settings(config: Option<&PathBuf>, pairs: &[String]) -> Result<Settings, String> {
    let base = match config {
        Some(path) => crate::config::load(Some(path))?.rules.unwrap_or_default(),
        None => Settings::default(),
    };
    crate::cli::settings_from(base, pairs, vec![])
}

/// The instance named in Events: the agent's pod name in the DaemonSet.
pub(crate) fn instance() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nodemedic".into())
}

/// A current-thread runtime for a command.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

/// What both pod repairs are run with.
struct PodRun {
    action: RepairAction,
    args: PodRepairArgs,
    settings: Settings,
    include_running: bool,
    older_than_seconds: i64,
}

impl PodRun {
    fn judge(&self, snapshot: &NodeSnapshot) -> PodPlan {
        match self.action {
            RepairAction::FailedPods => plan_failed_pods(snapshot, self.older_than_seconds),
            _ => plan_orphans(snapshot, &self.settings, self.include_running),
        }
    }
}

/// `nodemedic repair orphans`: exit 0 nothing to do or applied, 1 a dry run with a plan (or a
/// plan not confirmed), 2 could not run or an action failed.
pub fn run_orphans(args: OrphansArgs) -> Result<u8, String> {
    let stdin = std::io::stdin();
    run_orphans_io(args, &mut std::io::stdout(), &mut stdin.lock())
}

/// [`run_orphans`] with its output and the answer to its question elsewhere.
pub fn run_orphans_io(args: OrphansArgs, out: &mut dyn Write, input: &mut dyn BufRead) -> Result<u8, String> {
    let mut settings = repair_settings(args.common.config.as_ref(), &args.common.rule_setting)?;
    if let Some(s) = args.older_than_seconds {
        if s < 0 {
            return Err(format!("--older-than-seconds: {s} is negative"));
        }
        settings.orphan_grace_seconds = s;
    }
    run_pods(
        PodRun {
            action: RepairAction::Orphans,
            args: args.common,
            older_than_seconds: settings.orphan_grace_seconds,
            settings,
            include_running: args.include_running,
        },
        out,
        input,
    )
}

/// `nodemedic repair failed-pods`: exit codes as [`run_orphans`].
pub fn run_failed_pods(args: FailedPodsArgs) -> Result<u8, String> {
    let stdin = std::io::stdin();
    run_failed_pods_io(args, &mut std::io::stdout(), &mut stdin.lock())
}

/// [`run_failed_pods`] with its output and the answer to its question elsewhere.
pub fn run_failed_pods_io(args: FailedPodsArgs, out: &mut dyn Write, input: &mut dyn BufRead) -> Result<u8, String> {
    if args.older_than_seconds < 0 {
        return Err(format!("--older-than-seconds: {} is negative", args.older_than_seconds));
    }
    let settings = repair_settings(args.common.config.as_ref(), &args.common.rule_setting)?;
    run_pods(
        PodRun {
            action: RepairAction::FailedPods,
            args: args.common,
            settings,
            include_running: false,
            older_than_seconds: args.older_than_seconds,
        },
        out,
        input,
    )
}

fn run_pods(run: PodRun, out: &mut dyn Write, input: &mut dyn BufRead) -> Result<u8, String> {
    let host = run
        .args
        .host_root
        .as_ref()
        .map(|r| HostPaths::new(r, run.args.kubelet_dir.clone()));
    if let Some(h) = &host {
        if !h.root().is_dir() {
            return Err(format!(
                "{}: host root does not exist or is not a directory",
                h.root().display()
            ));
        }
    }
    let node = run
        .args
        .node
        .clone()
        .unwrap_or_else(|| collect::host_node_name(host.as_ref().unwrap_or(&HostPaths::new("/", None))));
    runtime()?.block_on(async {
        let client = kube_api::client(run.args.kubeconfig.as_deref(), REQUEST_TIMEOUT).await?;
        let snapshot = api_snapshot(&client, &node, host.as_ref(), &[]).await?;
        let plan = run.judge(&snapshot);
        if run.args.format == Format::Text {
            print_plan_text(out, &plan, run.args.apply);
        }
        let done = |out: &mut dyn Write, records: &[ActionRecord], applied: bool| {
            if run.args.format == Format::Json {
                let v = json!({"repair": plan.action.as_str(), "node": plan.node, "dry_run": !applied,
                               "plan": plan, "actions": records});
                let _ = writeln!(out, "{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
        };
        if plan.delete.is_empty() {
            done(out, &[], run.args.apply);
            return Ok(EXIT_OK);
        }
        if !run.args.apply {
            done(out, &[], false);
            return Ok(EXIT_PLAN);
        }
        if !run.args.yes {
            let question = format!("Delete the {} pod(s) above?", plan.delete.len());
            let yes = if run.args.format == Format::Json {
                // The question goes to stderr so stdout stays one JSON document.
                confirm(&mut std::io::stderr(), input, &question)
            } else {
                confirm(out, input, &question)
            };
            if !yes {
                if run.args.format == Format::Text {
                    let _ = writeln!(out, "not confirmed: nothing changed (add --yes to skip the question)");
                }
                done(out, &[], false);
                return Ok(EXIT_PLAN);
            }
        }
        let audit = Audit::new(Some(client.clone()), &node, &instance()).echoing();
        let fresh = refresh_snapshot(&client, &snapshot, &plan.lookups()).await?;
        let (confirmed, skipped) = recheck(&plan, &run.judge(&fresh));
        let mut records = vec![];
        for mut rec in skipped {
            audit.record(&mut rec).await;
            records.push(rec);
        }
        records.extend(apply_pod_plan(&client, &confirmed, &audit, None).await);
        if run.args.format == Format::Text {
            print_records_text(out, &records);
        }
        done(out, &records, true);
        finish(&records)
    })
}

/// Exit code after applying: an error when an action failed.
pub(crate) fn finish(records: &[ActionRecord]) -> Result<u8, String> {
    let failed: Vec<&ActionRecord> = records.iter().filter(|r| r.result == ActionResult::Failed).collect();
    match failed.first() {
        None => Ok(EXIT_OK),
        Some(first) => Err(format!(
            "{} of {} action(s) failed; first: {}: {}",
            failed.len(),
            records.len(),
            first.what,
            first.detail.as_deref().unwrap_or("")
        )),
    }
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

fn print_plan_text(out: &mut dyn Write, plan: &PodPlan, apply: bool) {
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
    let _ = out.write_all(text.as_bytes());
}

pub(crate) fn print_records_text(out: &mut dyn Write, records: &[ActionRecord]) {
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
    let _ = out.write_all(text.as_bytes());
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

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        action: Action,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Action {
        Orphans(OrphansArgs),
        FailedPods(FailedPodsArgs),
        LocalDirs(crate::repair::local_dirs::LocalDirsArgs),
    }

    #[test]
    fn flags_parse_as_subcommands() {
        use clap::{CommandFactory, Parser};
        Cli::command().debug_assert();
        let parse = |args: &[&str]| Cli::try_parse_from(std::iter::once("repair").chain(args.iter().copied()));
        let Action::Orphans(o) = parse(&["orphans", "--node", "n1", "--include-running", "--apply", "--yes"])
            .unwrap()
            .action
        else {
            panic!()
        };
        assert!(o.include_running && o.common.apply && o.common.yes);
        assert_eq!(o.common.node.as_deref(), Some("n1"));
        let Action::FailedPods(f) = parse(&["failed-pods", "--older-than-seconds", "60", "--format", "json"])
            .unwrap()
            .action
        else {
            panic!()
        };
        assert_eq!(
            (f.older_than_seconds, f.common.format, f.common.apply),
            (60, Format::Json, false)
        );
        let Action::LocalDirs(l) = parse(&[
            "local-dirs",
            "--local-dir-root",
            "/a,/b",
            "--offline",
            "--pods",
            "p.json",
        ])
        .unwrap()
        .action
        else {
            panic!()
        };
        assert_eq!(l.local_dir_root, ["/a", "/b"]);
        assert!(parse(&["orphans", "--older-than-seconds", "soon"]).is_err());
    }

    #[test]
    fn confirmation_needs_a_yes() {
        for (answer, want) in [
            ("yes\n", true),
            ("Y\n", true),
            ("no\n", false),
            ("", false),
            ("\n", false),
        ] {
            let mut out = vec![];
            assert_eq!(confirm(&mut out, &mut answer.as_bytes(), "Delete?"), want, "{answer:?}");
            assert!(String::from_utf8_lossy(&out).starts_with("Delete? [y/N]"));
        }
        assert!(!AutoRepairPolicy::default().any(), "automatic repair is off by default");
    }
}
