//! The fencing task: the heartbeat, the clock and the actions of driver fencing
//! ([`crate::fence`]), beside the scan loop.
//!
//! Once a second (or each heartbeat, if shorter) it:
//! 1. while the API server answers and the pod watch has listed, judges this node's pods again
//!    (from the watch's store): the candidates it keeps are the ones it acts on during an
//!    outage, since it cannot ask the API server then; the restart policies of SparkApplications
//!    are read in the background (and kept) when a candidate needs one;
//! 2. sends the heartbeat (`GET /readyz`) every `heartbeat_seconds` while a candidate runs
//!    here, and every [`OUTAGE_HEARTBEAT`] once a request has failed, one at a time, so that a
//!    short return of the API server is seen and ends the outage; every request of the
//!    daemon, this one included, tells [`ApiContact`] how it went;
//! 3. during an outage, acts on each candidate whose `fence_after` has passed since the first
//!    failed request, once at least [`MIN_FAILURES`] requests in a row have failed and the last
//!    of them is at most [`CONFIRM_WITHIN`] old (else it sends the heartbeat at once and waits
//!    for its outcome: the API server may be back while nobody asked): `dry-run` journals what
//!    it would do, `on` stops the pod's processes (and stops them again should the kubelet
//!    restart its containers before the outage ends);
//! 4. once the API server answers again, publishes what the journal holds as Events on the pod
//!    and on the Node, each action once;
//! 5. keeps the outage and the candidates in the state file ([`crate::fence::state`]), so that
//!    an agent restarted during an outage takes it up and fences at the original deadline.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;

use super::serve::Health;
use super::watch::SharedStore;
use crate::collect::cgroups::{Layout, find_pod_dir};
use crate::contact::{ApiContact, Outage, Reach, mono_now};
use crate::events::{EventSpec, regarding};
use crate::fence::journal::{Entry, Journal};
use crate::fence::state::{REFRESH_EVERY, Saved, Stale, StateFile};
use crate::fence::stop::{Stopped, processes, stop_pod};
use crate::fence::{
    CONFIRM_WITHIN, Candidate, FencePolicy, MIN_FAILURES, Mode, RestartPolicies, candidates, is_driver, opted_in_by,
    spark_application,
};
use crate::host::HostPaths;
use crate::metrics::Metrics;

/// A SparkApplication's restart policy is read again after this long.
const RESTART_POLICY_TTL: Duration = Duration::from_secs(300);
/// ... or after this long when it could not be read (no permission, the API failing).
const RESTART_POLICY_RETRY: Duration = Duration::from_secs(60);
/// How long after `cgroup.kill` or SIGKILL the fence waits for the pod's cgroup to empty.
const STOP_PATIENCE: Duration = Duration::from_secs(10);
/// Between two attempts to publish the journal while the API server refuses Events.
const PUBLISH_RETRY: Duration = Duration::from_secs(10);
/// The heartbeat's period once a request has failed (or `heartbeat_seconds`, if shorter): an
/// API server back for two seconds between outages is seen, and ends the outage.
pub const OUTAGE_HEARTBEAT: Duration = Duration::from_secs(1);

/// What the state file holds, as this task last wrote it.
#[derive(Debug, Clone, PartialEq)]
struct Written {
    outage: Option<Instant>,
    last_failure: Option<Instant>,
    candidates: Vec<Candidate>,
}

/// What the fencing task shares with the rest of the daemon.
#[derive(Clone)]
pub struct FenceTask {
    pub client: kube::Client,
    pub contact: Arc<ApiContact>,
    pub store: SharedStore,
    pub health: Arc<Health>,
    pub host: HostPaths,
    /// Where the pod cgroups are, as the scan loop last found them.
    pub layout: Arc<Mutex<Option<Layout>>>,
    pub node: String,
    pub instance: String,
    pub metrics: Metrics,
    /// The policy in force (a reload changes it).
    pub policy: watch::Receiver<FencePolicy>,
}

impl std::fmt::Debug for FenceTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceTask")
            .field("node", &self.node)
            .field("mode", &self.policy.borrow().mode)
            .finish()
    }
}

/// A pod this outage acted on.
struct Acted {
    /// The outage (its first failure) it was acted on in.
    outage: Instant,
    /// `on` mode: the pod's cgroup, kept empty until the outage ends.
    dir: Option<std::path::PathBuf>,
    /// How many times it was stopped in this outage.
    stops: u32,
}

/// A stop that finished on its blocking thread.
struct StopDone {
    candidate: Candidate,
    outage: Outage,
    lasted: Duration,
    dir: Option<std::path::PathBuf>,
    stopped: Option<Stopped>,
    error: Option<String>,
    round: u32,
}

/// How often the task looks at the API server's reach and the candidates: every second, or
/// every heartbeat if that is shorter. Off (the default), never: it waits for a new policy
/// (and for stops and lookups it started before), instead of waking every second for
/// nothing.
fn turn_every(policy: &FencePolicy) -> Option<Duration> {
    (policy.mode != Mode::Off).then(|| policy.heartbeat().min(Duration::from_secs(1)))
}

impl FenceTask {
    /// Runs until the daemon stops.
    pub async fn run(mut self) {
        let restarts: Arc<Mutex<KnownRestarts>> = Default::default();
        let mut lookups_in_flight: std::collections::HashSet<String> = Default::default();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<StopDone>();
        let (looked_tx, mut looked_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let mut known: Vec<Candidate> = Vec::new();
        let mut acted: HashMap<String, Acted> = HashMap::new();
        let boot = crate::fence::state::boot_id();
        let mut written: Option<Written> = None;
        {
            let policy = self.policy.borrow().clone();
            if policy.mode != Mode::Off {
                if let Some((candidates, done)) = self.resume(&policy, boot.as_deref()) {
                    known = candidates;
                    acted = done;
                }
            }
        }
        let mut last_beat: Option<Instant> = None;
        let mut beat: Option<tokio::task::JoinHandle<()>> = None;
        let mut publish_after = mono_now();
        // The journal may hold actions of an outage the agent restarted in.
        let mut unpublished = true;
        let mut logged_skips: std::collections::HashSet<String> = Default::default();
        loop {
            let policy = self.policy.borrow_and_update().clone();
            let tick = turn_every(&policy);
            tokio::select! {
                _ = tokio::time::sleep(tick.unwrap_or_default()), if tick.is_some() => {}
                Ok(()) = self.policy.changed() => {}
                Some(done) = done_rx.recv() => {
                    self.finish_stop(&policy, done, &mut acted);
                    unpublished = true;
                    continue;
                }
                Some(key) = looked_rx.recv() => {
                    lookups_in_flight.remove(&key);
                    continue;
                }
            }
            let journal = policy.journal();
            if policy.mode == Mode::Off {
                self.metrics.fence_candidates.set(0);
                self.metrics.api_unreachable_seconds.set(0.0);
                known.clear();
                continue;
            }
            let now = mono_now();
            let reach = self.contact.reach();
            match &reach {
                Reach::Unreachable(o) => self.metrics.api_unreachable_seconds.set(o.lasted(now).as_secs_f64()),
                _ => self.metrics.api_unreachable_seconds.set(0.0),
            }
            if reach == Reach::Reachable {
                acted.clear();
                if self.health.pods_synced.load(Ordering::Relaxed) {
                    let policies = restart_policies(&restarts);
                    let pods: Vec<nodemedic_rules::snapshot::PodInfo> = match self.store.read() {
                        Ok(s) => s.pods().filter(|p| is_driver(p)).cloned().collect(),
                        Err(_) => vec![],
                    };
                    let (found, skipped) = candidates(&pods, &policy, &policies);
                    for (pod, why) in skipped {
                        if logged_skips.insert(format!("{pod}: {why}")) {
                            tracing::info!(pod = %pod, "driver opted in to fencing but not fenced: {why}");
                        }
                    }
                    for c in found.iter().filter(|c| c.late) {
                        if logged_skips.insert(format!("{}: late", c.uid)) {
                            tracing::warn!(
                                pod = %c.display(),
                                fence_after_s = c.fence_after.as_secs_f64(),
                                evicted_after_s = c.evicted_after.unwrap_or(0),
                                "the driver's toleration of an unreachable node leaves less than two heartbeats after \
                                 the fencing margin: it may be replaced before it is fenced"
                            );
                        }
                    }
                    if found != known {
                        tracing::info!(
                            candidates = found.len(),
                            pods = %found.iter().map(Candidate::display).collect::<Vec<_>>().join(", "),
                            mode = policy.mode.as_str(),
                            "fencing candidates"
                        );
                    }
                    known = found;
                    // Restart policies to read: opted-in operator drivers whose policy is
                    // unknown or old.
                    for pod in &pods {
                        let Some(key) = spark_application(pod) else { continue };
                        let fresh = restarts
                            .lock()
                            .ok()
                            .and_then(|r| r.get(&key).map(|(at, _)| at.elapsed() < RESTART_POLICY_TTL))
                            .unwrap_or(false);
                        if fresh || lookups_in_flight.contains(&key) || opted_in_by(pod, &policy).is_none() {
                            continue;
                        }
                        lookups_in_flight.insert(key.clone());
                        let (client, restarts, tx) = (self.client.clone(), restarts.clone(), looked_tx.clone());
                        tokio::spawn(async move {
                            let found = read_restart_policy(&client, &key).await;
                            if let Ok(mut r) = restarts.lock() {
                                let now = Instant::now();
                                let entry = match found {
                                    Some(found) => (now, found),
                                    // Unreadable: keep what was known, ask again in a minute.
                                    None => (
                                        now.checked_sub(RESTART_POLICY_TTL - RESTART_POLICY_RETRY)
                                            .unwrap_or(now),
                                        r.get(&key).and_then(|(_, t)| t.clone()),
                                    ),
                                };
                                r.insert(key.clone(), entry);
                            }
                            let _ = tx.send(key);
                        });
                    }
                }
                if unpublished && now >= publish_after {
                    if self.publish(&journal).await {
                        unpublished = false;
                    } else {
                        publish_after = mono_now() + PUBLISH_RETRY;
                    }
                }
            }
            self.metrics.fence_candidates.set(known.len() as i64);
            // A candidate due to be fenced on an outage whose last failure is not recent: ask
            // the API server now instead of acting on old evidence.
            let confirm = match &reach {
                Reach::Unreachable(o) => {
                    now.saturating_duration_since(o.last_failure) > CONFIRM_WITHIN
                        && known.iter().any(|c| {
                            o.lasted(now) >= c.fence_after && acted.get(&c.uid).is_none_or(|a| a.outage != o.since)
                        })
                }
                _ => false,
            };
            if let Some(boot) = &boot {
                self.persist(&policy, boot, &reach, &known, &mut written);
            }
            // The heartbeat: only while a candidate runs here (and at once to confirm); every
            // second once a request has failed.
            let period = match &reach {
                Reach::Unreachable(_) => policy.heartbeat().min(OUTAGE_HEARTBEAT),
                _ => policy.heartbeat(),
            };
            let beat_due = confirm || last_beat.is_none_or(|t| now.saturating_duration_since(t) >= period);
            if !known.is_empty() && beat_due && beat.as_ref().is_none_or(|b| b.is_finished()) {
                last_beat = Some(now);
                let client = self.client.clone();
                beat = Some(tokio::spawn(async move {
                    let req = http::Request::get("/readyz").body(Vec::new());
                    if let Ok(req) = req {
                        // The client's layer tells the contact how it went; any answer counts.
                        let _ = client.request_text(req).await;
                    }
                }));
            }
            let Reach::Unreachable(outage) = reach else { continue };
            if confirm {
                continue;
            }
            let lasted = outage.lasted(now);
            for c in &known {
                let previous = acted.get(&c.uid).filter(|a| a.outage == outage.since);
                match previous {
                    None if lasted >= c.fence_after && outage.failures >= MIN_FAILURES => {
                        acted.insert(
                            c.uid.clone(),
                            Acted {
                                outage: outage.since,
                                dir: None,
                                stops: 1,
                            },
                        );
                        self.act(&policy, c, &outage, lasted, 1, &done_tx);
                        unpublished = true;
                    }
                    // Fenced earlier in this outage: the kubelet may have started its
                    // containers again (restartPolicy OnFailure); stop them again.
                    Some(a) if policy.mode == Mode::On => {
                        let Some(dir) = a.dir.clone() else { continue };
                        if processes(&dir).is_ok_and(|p| !p.is_empty()) {
                            let round = a.stops + 1;
                            if let Some(a) = acted.get_mut(&c.uid) {
                                a.stops = round;
                                a.dir = None; // until this stop reports back
                            }
                            self.act(&policy, c, &outage, lasted, round, &done_tx);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Takes up the outage of the state file, if this agent restarted during it: the saved
    /// candidates, and the pods the journal says were already acted on in it.
    fn resume(&self, policy: &FencePolicy, boot: Option<&str>) -> Option<(Vec<Candidate>, HashMap<String, Acted>)> {
        let file = StateFile::beside(std::path::Path::new(&policy.journal));
        let saved = match file.load() {
            Ok(Some(saved)) => saved,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "the fencing state cannot be read: an outage in progress is not taken up");
                return None;
            }
        };
        let resumed = match saved.resume(&self.node, boot, mono_now()) {
            Ok(r) if !r.candidates.is_empty() => r,
            Ok(_) | Err(Stale::NoOutage) => return None,
            Err(why) => {
                tracing::info!(path = %file.path().display(), "the fencing state of an earlier run is not taken up: {why}");
                return None;
            }
        };
        // Taken up by the record of this process's requests, or already in it: this task was
        // restarted (by its supervisor) during the outage the file records.
        let same_outage =
            matches!(self.contact.reach(), Reach::Unreachable(o) if o.since_wall == resumed.outage.since_wall);
        if !same_outage && !self.contact.resume(resumed.outage.clone()) {
            return None;
        }
        let since_ms = resumed
            .outage
            .since_wall
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let ids = policy.journal().ids().unwrap_or_default();
        let acted: HashMap<String, Acted> = resumed
            .candidates
            .iter()
            .filter(|c| ids.contains(&format!("{}@{since_ms}", c.uid)))
            .map(|c| {
                let a = Acted {
                    outage: resumed.outage.since,
                    dir: None,
                    stops: 1,
                };
                (c.uid.clone(), a)
            })
            .collect();
        tracing::warn!(
            outage_since = %jiff::Timestamp::try_from(resumed.outage.since_wall).map(|t| t.to_string()).unwrap_or_default(),
            outage_s = mono_now().saturating_duration_since(resumed.outage.since).as_secs(),
            candidates = %resumed.candidates.iter().map(Candidate::display).collect::<Vec<_>>().join(", "),
            already_acted = acted.len(),
            "this agent restarted during an outage: its candidates are fenced at the original deadline unless the API \
             server answers first"
        );
        Some((resumed.candidates, acted))
    }

    /// Writes the state file when what it should hold changed: the candidates, the outage, or
    /// (every [`REFRESH_EVERY`] during an outage) the outage's last failure. Nothing is written
    /// before there is a candidate.
    fn persist(
        &self,
        policy: &FencePolicy,
        boot: &str,
        reach: &Reach,
        known: &[Candidate],
        written: &mut Option<Written>,
    ) {
        let outage = match reach {
            Reach::Unreachable(o) => Some(o),
            Reach::Reachable => None,
            // Nothing seen yet: nothing to say.
            Reach::Never => return,
        };
        let want = Written {
            outage: outage.map(|o| o.since),
            last_failure: outage.map(|o| o.last_failure),
            candidates: known.to_vec(),
        };
        let due = match written.as_ref() {
            None => !known.is_empty(),
            Some(w) => {
                w.outage != want.outage
                    || w.candidates != want.candidates
                    || match (w.last_failure, want.last_failure) {
                        (Some(then), Some(now)) => now >= then + REFRESH_EVERY,
                        _ => false,
                    }
            }
        };
        if !due {
            return;
        }
        let file = StateFile::beside(std::path::Path::new(&policy.journal));
        match file.save(&Saved::new(&self.node, boot, outage, known)) {
            Ok(()) => *written = Some(want),
            Err(e) => {
                tracing::error!(error = %e, "the fencing state is not saved: a restart during an outage would forget it");
                // Tried again at the next change, not every second.
                *written = Some(want);
            }
        }
    }

    /// Acts on `c`: journals it (dry-run), or starts stopping it on a blocking thread (on).
    fn act(
        &self,
        policy: &FencePolicy,
        c: &Candidate,
        outage: &Outage,
        lasted: Duration,
        round: u32,
        done: &tokio::sync::mpsc::UnboundedSender<StopDone>,
    ) {
        if policy.mode == Mode::DryRun {
            let entry = Entry::new(c, &self.node, Mode::DryRun, outage, lasted, None, None, None);
            self.journal(policy, &entry);
            return;
        }
        let layout = self.layout.lock().ok().and_then(|l| l.clone());
        let (c, outage, done) = (c.clone(), outage.clone(), done.clone());
        // Between SIGTERM and SIGKILL: the pod's own grace, but never past the margin, by when
        // the driver must be gone.
        let grace = c.grace.min(Duration::from_secs_f64(policy.margin_seconds));
        tokio::task::spawn_blocking(move || {
            let (dir, stopped, error) = match &layout {
                None => (
                    None,
                    None,
                    Some("the pod cgroups have not been located on this node".to_string()),
                ),
                Some(layout) => match find_pod_dir(layout, &c.uid) {
                    // No cgroup: nothing of the pod runs here.
                    None => (
                        None,
                        Some(Stopped {
                            method: "none",
                            ..Default::default()
                        }),
                        None,
                    ),
                    Some(dir) => {
                        let stopped = stop_pod(&dir, layout.version, grace, STOP_PATIENCE);
                        (Some(dir), Some(stopped), None)
                    }
                },
            };
            let _ = done.send(StopDone {
                candidate: c,
                outage,
                lasted,
                dir,
                stopped,
                error,
                round,
            });
        });
    }

    /// Journals, logs and counts a stop that finished.
    fn finish_stop(&self, policy: &FencePolicy, done: StopDone, acted: &mut HashMap<String, Acted>) {
        let shown = done.dir.as_deref().map(|d| self.host.display(d));
        let mut entry = Entry::new(
            &done.candidate,
            &self.node,
            Mode::On,
            &done.outage,
            done.lasted,
            shown,
            done.stopped.as_ref(),
            done.error,
        );
        if done.round > 1 {
            entry.id = format!("{}#{}", entry.id, done.round);
            entry.message = format!("again (its containers were started again): {}", entry.message);
        }
        if let Some(a) = acted.get_mut(&done.candidate.uid) {
            if a.outage == done.outage.since {
                a.dir = done.dir;
            }
        }
        self.journal(policy, &entry);
    }

    /// Writes `entry` to the journal, the log and the metric.
    fn journal(&self, policy: &FencePolicy, entry: &Entry) {
        self.metrics
            .fence_actions_total
            .with_label_values(&[entry.mode.as_str(), entry.metric_outcome()])
            .inc();
        tracing::warn!(
            target: "nodemedic::fence",
            pod = %format!("{}/{}", entry.namespace, entry.pod),
            uid = %entry.uid,
            mode = %entry.mode,
            outcome = %entry.outcome,
            outage_s = entry.outage_seconds,
            "{}",
            entry.message
        );
        let journal = policy.journal();
        if let Err(e) = journal.record(entry) {
            tracing::error!(error = %e, "the fencing action is in the log only");
        }
    }

    /// Publishes the journal's unpublished actions as Events; false when the API server
    /// refused one (tried again later).
    async fn publish(&self, journal: &Journal) -> bool {
        let (entries, bad) = match journal.unpublished() {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(error = %e, "the fencing journal cannot be read; its actions are not published");
                return false;
            }
        };
        if bad > 0 {
            tracing::warn!(path = %journal.path().display(), lines = bad, "fencing journal lines skipped (not JSON)");
        }
        for entry in entries {
            let reason = match entry.outcome.as_str() {
                "fenced" => "DriverFenced",
                "would-fence" => "DriverWouldBeFenced",
                _ => "DriverFenceFailed",
            };
            let note = format!(
                "{} (node {}, API server unreachable since {}, last error: {})",
                entry.message, entry.node, entry.outage_since, entry.last_error
            );
            let pod = regarding(
                "Pod",
                Some(&entry.namespace),
                Some(&entry.pod),
                Some(&entry.uid),
                &self.node,
            );
            let node = regarding("Node", None, None, None, &self.node);
            for target in [pod, node] {
                let (namespace, event) = EventSpec {
                    regarding: target,
                    type_: "Warning",
                    reason: reason.into(),
                    action: "Fence",
                    note: note.clone(),
                    label: ("nodemedic.io/fence", entry.outcome.clone()),
                    instance: self.instance.clone(),
                }
                .build();
                let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
                if let Err(e) = api.create(&PostParams::default(), &event).await {
                    self.metrics
                        .api_write_failures_total
                        .with_label_values(&["event"])
                        .inc();
                    tracing::warn!(error = %e, id = %entry.id, "could not publish a fencing action; trying again later");
                    return false;
                }
                self.metrics.events_emitted_total.with_label_values(&[reason]).inc();
            }
            if let Err(e) = journal.published(&entry.id) {
                tracing::error!(error = %e, "published, but the journal could not note it: it may be published again");
            }
        }
        true
    }
}

/// The SparkApplications' restart policies read so far, by `namespace/name`, with when.
type KnownRestarts = HashMap<String, (Instant, Option<String>)>;

/// The restart policies as known now.
fn restart_policies(known: &Mutex<KnownRestarts>) -> RestartPolicies {
    known
        .lock()
        .map(|k| k.iter().map(|(key, (_, t))| (key.clone(), t.clone())).collect())
        .unwrap_or_default()
}

/// `spec.restartPolicy.type` of the SparkApplication `namespace/name`: `Some(Some(type))`,
/// `Some(None)` when it does not exist, `None` when it could not be read (the last answer is
/// kept). The operator treats an absent type as `Never`.
async fn read_restart_policy(client: &kube::Client, key: &str) -> Option<Option<String>> {
    let (namespace, name) = key.split_once('/')?;
    let path = format!("/apis/sparkoperator.k8s.io/v1beta2/namespaces/{namespace}/sparkapplications/{name}");
    let req = http::Request::get(&path).body(Vec::new()).ok()?;
    match client.request::<serde_json::Value>(req).await {
        Ok(app) => Some(Some(
            app.pointer("/spec/restartPolicy/type")
                .and_then(|t| t.as_str())
                .unwrap_or("Never")
                .to_string(),
        )),
        Err(kube::Error::Api(s)) if s.code == 404 => Some(None),
        Err(e) => {
            tracing::warn!(
                error = %crate::kube_api::Error::request("GET", format!("sparkapplications {key}"), &e),
                "cannot read a SparkApplication's restart policy; its driver is not fenced until it can"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests;
