//! Automatic repair in the daemon: what `repair:` in the configuration switches on (all off by
//! default), judged from the daemon's own snapshot and again from a fresh pod list right before
//! acting, within one hourly budget. `cpu-state` is never automatic.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::Client;
use nodemedic_rules::Settings;
use nodemedic_rules::snapshot::{NodeSnapshot, PodSource};

use super::audit::{ActionRecord, ActionResult, Audit, RATE_WINDOW, RateLimiter, RepairAction};
use super::local_dirs;
use super::pods::{
    DEFAULT_FAILED_POD_MIN_AGE_SECONDS, apply_pod_plan, plan_failed_pods, plan_orphans, recheck, refresh_snapshot,
};
use crate::host::HostPaths;
use crate::kube_api;

/// What the daemon repairs by itself: the configuration file's `repair:` section, read as it
/// is. Everything is off by default; when on, at most `max_actions_per_hour` mutations in any
/// sliding hour. `cpu-state` is never automatic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoRepairPolicy {
    /// Delete orphaned executors that have finished (they only hold local data).
    #[serde(rename = "automatic_orphans")]
    pub orphans: bool,
    /// Delete pods the kubelet rejected at admission, once older than `failed_pods_older_than_seconds`.
    #[serde(rename = "automatic_failed_pods")]
    pub failed_pods: bool,
    /// Remove orphaned Spark scratch directories under the configured hostPath roots.
    #[serde(rename = "automatic_local_dirs")]
    pub local_dirs: bool,
    /// At most this many automatic actions per hour (a sliding window).
    pub max_actions_per_hour: u32,
    /// Also delete orphans that have not finished (stops their JVM).
    pub include_running_orphans: bool,
    /// Rejected pods younger than this are left alone, in seconds.
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

/// What automatic repair keeps between cycles: the rate limiter, and the targets it left
/// alone for now: one a precondition refused (not tried or logged again for an hour, so a
/// lasting refusal is one log line an hour, not one a cycle), and one whose mutation failed
/// (tried again after a pause that doubles from a minute up to the hour, with jitter).
#[derive(Debug, Default)]
pub struct AutoRepairState {
    pub limiter: RateLimiter,
    /// Until when each target is left alone.
    quiet: HashMap<String, Instant>,
    /// Failed attempts per target, for its retry pause.
    failures: HashMap<String, u32>,
}

/// The first pause before automatic repair retries a target whose mutation failed.
const FIRST_RETRY: Duration = Duration::from_secs(60);

impl AutoRepairState {
    pub fn new(max_actions_per_hour: u32) -> Self {
        AutoRepairState {
            limiter: RateLimiter::new(max_actions_per_hour),
            quiet: HashMap::new(),
            failures: HashMap::new(),
        }
    }

    fn prune(&mut self) {
        let now = Instant::now();
        self.quiet.retain(|_, until| *until > now);
        let quiet = &self.quiet;
        // A target that failed and has not come back within the hour starts over.
        self.failures.retain(|k, _| quiet.contains_key(k));
    }

    fn is_quiet(&self, key: &str) -> bool {
        self.quiet.get(key).is_some_and(|until| *until > Instant::now())
    }

    /// Leaves a target alone for an hour (a precondition refused it).
    fn hush(&mut self, key: String) {
        self.quiet.insert(key, Instant::now() + RATE_WINDOW);
    }

    /// Schedules the retry of a target whose mutation failed: after 1, 2, 4 ... minutes (each
    /// drawn from the upper half of its step), at most an hour. Returns the pause.
    fn retry_later(&mut self, key: String) -> Duration {
        let n = self.failures.entry(key.clone()).or_insert(0);
        *n += 1;
        let ceiling = FIRST_RETRY.saturating_mul(1 << (*n - 1).min(10)).min(RATE_WINDOW);
        let pause = crate::retry::Jitter::new(u64::from(*n)).spread(ceiling.mul_f64(0.75), 1.0 / 3.0);
        self.quiet.insert(key, Instant::now() + pause);
        pause
    }

    fn succeeded(&mut self, key: &str) {
        self.failures.remove(key);
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
    if !policy.any() || snapshot.pods.source != PodSource::Api {
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
        for rec in &records {
            let Some(uid) = &rec.target.uid else { continue };
            match rec.result {
                ActionResult::Applied => state.succeeded(uid),
                ActionResult::Failed => {
                    let pause = state.retry_later(uid.clone());
                    tracing::info!(target: "nodemedic::repair", uid = %uid, retry_in_s = pause.as_secs(), "automatic repair: will try this target again");
                }
                _ => state.hush(uid.clone()),
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
    // Planning opens the roots and stats directories: host I/O, kept off the runtime so a hung
    // hostPath mount cannot stall the watch or /metrics.
    let planned = {
        let (host, roots, snap, settings) = (
            target.host.clone(),
            target.roots.to_vec(),
            snapshot.clone(),
            settings.clone(),
        );
        tokio::task::spawn_blocking(move || local_dirs::plan(&host, &roots, &snap, &settings)).await
    };
    let mut plan = match planned {
        Ok(plan) => plan,
        Err(e) => {
            tracing::error!(target: "nodemedic::repair", error = %e, "automatic local-dir planning task failed");
            return vec![];
        }
    };
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
        let fresh = local_dirs::FreshPods {
            pods,
            source: PodSource::Api,
        };
        let records = local_dirs::apply(&host, &plan, &snapshot, &fresh, &settings, &log, Some(&mut limiter));
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
    for rec in &records {
        let Some(path) = &rec.target.path else { continue };
        match rec.result {
            ActionResult::Applied => state.succeeded(path),
            ActionResult::Failed => {
                state.retry_later(path.clone());
            }
            _ => state.hush(path.clone()),
        }
    }
    // Only removals that started are returned (and counted); refusals were logged.
    records.retain(|r| r.result != ActionResult::Skipped);
    audit.events(&mut records).await;
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_target_is_retried_after_a_growing_pause_a_refused_one_after_an_hour() {
        let mut state = AutoRepairState::new(10);
        let pauses: Vec<Duration> = (0..8).map(|_| state.retry_later("uid-1".into())).collect();
        // Each pause within [1/2, 1] of its step: 1, 2, 4, ... minutes, then the hour.
        for (i, p) in pauses.iter().enumerate() {
            let step = FIRST_RETRY.saturating_mul(1 << i).min(RATE_WINDOW);
            assert!(
                *p >= step / 2 && *p <= step,
                "pause {i}: {p:?} outside [{:?}, {step:?}]",
                step / 2
            );
        }
        assert!(state.is_quiet("uid-1"));
        state.succeeded("uid-1");
        assert!(
            state.retry_later("uid-1".into()) <= FIRST_RETRY,
            "a success starts the schedule over"
        );
        state.hush("uid-2".into());
        let until = state.quiet["uid-2"];
        assert!(until > Instant::now() + RATE_WINDOW - Duration::from_secs(5));
        state.prune();
        assert!(state.is_quiet("uid-2") && !state.is_quiet("uid-3"));
    }

    #[test]
    fn automatic_repair_is_off_by_default() {
        let policy = AutoRepairPolicy::default();
        assert!(!policy.any());
        assert_eq!(
            policy.failed_pods_older_than_seconds,
            DEFAULT_FAILED_POD_MIN_AGE_SECONDS
        );
        assert!(
            AutoRepairPolicy {
                local_dirs: true,
                ..policy
            }
            .any()
        );
    }
}
