//! `nodemedic run`: the DaemonSet's daemon.
//!
//! ```text
//!  watch pods (spec.nodeName=<node>) ──> store ─────────┐ (changes wake the scan loop)
//!  timer (scan interval) ───────────────────────────────┤
//!                                                       ▼
//!  scan loop: host (blocking thread) + pods from the store + drivers last resolved
//!             -> rules::judge (a rule that cannot judge keeps its last findings)
//!             -> metrics, /healthz, the log
//!                                                       │ newest outcome (watch channel)
//!                                                       ▼
//!  API work: driver lookups (cached, budgeted) -> Events, node conditions, auto repair
//!  API probes: on their own interval (the admission probe only on the elected agent)
//!  fencing: the outage clock (every request reports to `ApiContact`), a heartbeat while an
//!           opted-in driver runs here, and stopping those drivers when the outage lasts
//! ```
//!
//! The scan loop never waits for the API server: it reads the watch's store and the drivers
//! the API work resolved last, and hands its outcome over without waiting. The API work
//! ([`apiwork`]), the pod watch ([`watch`]) and the probes each retry with jittered
//! exponential backoff, so a slow or absent API server costs a bounded number of requests and
//! never delays a host scan. The pod watch, the probes and fencing are supervised tasks
//! ([`supervise`]): one that ends or panics is logged, counted in
//! `nodemedic_task_restarts_total{task}` and started again with backoff. One function starts
//! the pod watch, the probes and the API work ([`wiring::start_api_loops`]): this daemon, and
//! the tests that prove their request schedules under a paused clock.
//!
//! SIGTERM or SIGINT ends the daemon at once, whatever it is doing: a scan in progress is
//! abandoned, requests in flight are dropped, and the runtime gives blocking host reads half
//! a second before the process exits.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nodemedic_rules::snapshot::{Observed, PodSource};
use tokio::sync::Notify;

use crate::config::{Effective, Flags};
use crate::contact::ApiContact;
use crate::host::HostPaths;
use crate::kube_api::{self, ApiDirectory};
use crate::metrics::Metrics;
use crate::scan::{self, Pods};

pub mod apiwork;
pub mod fence;
pub mod hostwatch;
mod judge;
#[cfg(test)]
mod outage_tests;
pub mod serve;
mod storage;
pub mod supervise;
pub mod topology;
mod turn;
pub mod watch;
pub mod wiring;

use apiwork::{DriverView, ScanOutcome};
use hostwatch::{Changes, HostWatch};
use serve::Health;
use watch::SharedStore;
use wiring::{Agent, ApiLoops, Clients, Loop, Probes, Shared};

/// Everything the daemon is configured with.
#[derive(Debug)]
pub struct DaemonConfig {
    pub host_root: PathBuf,
    pub kubelet_dir: Option<PathBuf>,
    pub node: String,
    /// This agent's name in Events (`reportingInstance`): its pod name.
    pub instance: String,
    pub kubeconfig: Option<PathBuf>,
    /// The configuration file, re-read on SIGHUP.
    pub config_file: Option<PathBuf>,
    /// The command line's overrides, which keep winning over the file after a reload.
    pub flags: Flags,
    pub effective: Effective,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Api(#[from] kube_api::Error),
    #[error("listen on {address}: {message}")]
    Listen { address: String, message: String },
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("signal handler: {0}")]
    Signal(std::io::Error),
}

/// Runs until SIGTERM/SIGINT. Errors only when it cannot start (no API configuration, the
/// listen address is taken).
pub async fn run(cfg: DaemonConfig) -> Result<(), DaemonError> {
    let config = kube_api::config(cfg.kubeconfig.as_deref()).await?;
    // Every request of the daemon tells `contact` whether the API server answered.
    let contact = Arc::new(ApiContact::new());
    let client = kube_api::observed_client(config.clone(), cfg.effective.request_timeout, true, &contact)?;
    let shared = Shared::new(contact, Metrics::new()?);
    let Shared {
        contact,
        metrics,
        health,
        store,
        wake,
    } = shared.clone();
    health
        .scan_interval_ms
        .store(cfg.effective.scan_interval.as_millis() as u64, Ordering::Relaxed);
    health.progressed();
    let listener = tokio::net::TcpListener::bind(&cfg.effective.listen)
        .await
        .map_err(|e| DaemonError::Listen {
            address: cfg.effective.listen.clone(),
            message: e.to_string(),
        })?;
    let addr = listener.local_addr().map_err(|e| DaemonError::Listen {
        address: cfg.effective.listen.clone(),
        message: e.to_string(),
    })?;
    tracing::info!(node = %cfg.node, listen = %addr, "nodemedic daemon starting");
    tokio::spawn(serve::serve(listener, metrics.clone(), health.clone()));
    let signal = |kind| tokio::signal::unix::signal(kind).map_err(DaemonError::Signal);
    let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut sighup = signal(tokio::signal::unix::SignalKind::hangup())?;

    // The pod watch has a client of its own, without a read timeout; the other loops share one.
    let watch_client = kube_api::observed_client(config.clone(), cfg.effective.request_timeout, false, &contact)?;
    let clients: Clients = {
        let client = client.clone();
        Arc::new(move |l| {
            if l == Loop::Watch {
                watch_client.clone()
            } else {
                client.clone()
            }
        })
    };
    let agent = Agent {
        node: cfg.node.clone(),
        instance: cfg.instance.clone(),
        namespace: config.default_namespace.clone(),
    };
    let host = HostPaths::new(&cfg.host_root, cfg.kubelet_dir.clone());
    let target = crate::probe::Target::from_config(&config, &agent.namespace, &agent.node);
    let ApiLoops {
        probes:
            Probes {
                observation: api_observation,
                stop: stop_probes,
                released,
                ..
            },
        outcomes,
        view,
    } = wiring::start_api_loops(&shared, &agent, &cfg.effective, host.clone(), target, clients);

    // Driver fencing: its own task, with its own clock (off unless configured).
    let layout = Arc::new(std::sync::Mutex::new(None));
    let (fence_policy, fence_policy_rx) = tokio::sync::watch::channel(cfg.effective.fencing.clone());
    {
        let task = fence::FenceTask {
            client: client.clone(),
            contact: contact.clone(),
            store: store.clone(),
            health: health.clone(),
            host: host.clone(),
            layout: layout.clone(),
            node: cfg.node.clone(),
            instance: cfg.instance.clone(),
            metrics: metrics.clone(),
            policy: fence_policy_rx,
        };
        if task.policy.borrow().mode != crate::fence::Mode::Off {
            tracing::info!(mode = task.policy.borrow().mode.as_str(), "driver fencing enabled");
        }
        supervise::spawn("fencing", metrics.clone(), health.clone(), move || task.clone().run());
    }

    // This node's NodeResourceTopology: its own task, fed the newest object by the cycles.
    let topology = cfg.effective.publish_node_resource_topology.then(|| {
        let (tx, rx) = tokio::sync::watch::channel(None);
        let (client, task_metrics) = (client.clone(), metrics.clone());
        tracing::info!("publishing this node's NodeResourceTopology");
        supervise::spawn("topology", metrics.clone(), health.clone(), move || {
            topology::run(client.clone(), rx.clone(), task_metrics.clone())
        });
        tx
    });

    let numa_memory = if topology.is_some() {
        let memory = crate::collect::sysfs::read_numa_memory(&host);
        if memory.is_empty() {
            tracing::error!(
                "NodeResourceTopology not published: no NUMA node's memory is visible under /sys/devices/system/node \
                 (components/node-resource-topology mounts it), and an object without memory would keep Guaranteed \
                 pods off this node"
            );
        }
        memory
    } else {
        Default::default()
    };
    // This node's kubelet version, read at once and every few minutes: which of the kubelet's
    // answers kubelet-state-divergence may compare.
    let kubelet_version: kube_api::KubeletVersionSlot = Arc::new(std::sync::Mutex::new(Observed::NotApplicable {
        reason: "the Node object has not been read yet".into(),
    }));
    {
        let (client, node, slot) = (client.clone(), cfg.node.clone(), kubelet_version.clone());
        supervise::spawn("kubelet_version", metrics.clone(), health.clone(), move || {
            kube_api::track_kubelet_version(client.clone(), node.clone(), slot.clone())
        });
    }
    let mut daemon = Daemon {
        kubelet_version,
        topology,
        numa_memory,
        contact: contact.clone(),
        logged: Default::default(),
        last_judged: Default::default(),
        api_observation,
        host,
        view,
        outcomes,
        last_local_dirs: None,
        readings: None,
        last_full: None,
        full_turn_at: None,
        api_turn_at: None,
        api_base: None,
        judged_inputs: None,
        storage: storage::Storage::configured(&cfg.effective, &config),
        reloads: 0,
        kubelet_asked: None,
        layout,
        fence_policy,
        store,
        metrics,
        health,
        cfg,
    };

    // The first report should know the pods: wait a little for the watch's first list. If
    // the API server is away, scan anyway with liveness from cgroups.
    let synced = async {
        while !daemon.health.pods_synced.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let stop_health = daemon.health.clone();
    let stop = |released: Arc<Notify>| async move {
        // Tasks that end from here on are not restarted.
        stop_health.stop();
        // The prober gives its Lease up (bounded); everything else is dropped.
        let _ = stop_probes.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(1), released.notified()).await;
        stopping()
    };
    tokio::select! {
        biased;
        _ = sigterm.recv() => return stop(released).await,
        _ = sigint.recv() => return stop(released).await,
        r = tokio::time::timeout(Duration::from_millis(serve::FIRST_SYNC_WAIT_MS), synced) => if r.is_err() {
            tracing::warn!(
                "the pod watch has not synced after 10 s; scanning with liveness from the node (the kubelet's \
                 PodResources API, else cgroups) until it does"
            );
        }
    }
    // inotify: the host's changes are read as they happen; without it, every cycle is a full
    // scan, as before.
    let mut hostwatch = match HostWatch::new() {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "inotify unavailable: the host is scanned in full on every interval");
            None
        }
    };
    let mut tick = tokio::time::interval(daemon.cfg.effective.scan_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The configuration in force was read at start: that counts as the first load.
    daemon.metrics.configuration_loaded();
    let mut pending = Changes {
        rescan: Some("start".into()),
        ..Default::default()
    };
    // Changes wait this long for more of the same burst (a container starting writes a dozen
    // files; a pod deleted changes its cgroups and its object).
    let mut settle: Option<tokio::time::Instant> = None;
    loop {
        let full_due = tokio::time::Instant::from_std(daemon.full_scan_due());
        let judge_at = daemon.judge_at().map(tokio::time::Instant::from_std);
        // Signals first: a ready tick must never hide a SIGTERM.
        tokio::select! {
            biased;
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = sighup.recv() => {
                if daemon.reload() {
                    tick = tokio::time::interval(daemon.cfg.effective.scan_interval);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
                continue;
            }
            changes = host_changes(&mut hostwatch) => {
                pending.merge(changes);
                settle.get_or_insert_with(|| tokio::time::Instant::now() + SETTLE);
                continue;
            }
            _ = wake.notified() => {
                settle.get_or_insert_with(|| tokio::time::Instant::now() + SETTLE);
                continue;
            }
            _ = tokio::time::sleep_until(settle.unwrap_or(full_due)), if settle.is_some() => settle = None,
            _ = tokio::time::sleep_until(full_due) => {
                pending.rescan.get_or_insert_with(|| "full scan interval".into());
            }
            _ = tokio::time::sleep_until(judge_at.unwrap_or(full_due)), if judge_at.is_some() => {}
            _ = tick.tick() => {}
        }
        let changes = std::mem::take(&mut pending);
        tokio::select! {
            biased;
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = daemon.cycle(changes, &mut hostwatch) => {}
        }
        // The cycle's snapshot (or the work it found current) is dropped by now: its freed
        // pages go back instead of staying resident as holes in the heap (crate::heap).
        crate::heap::release_free_pages();
    }
    stop(released).await
}

/// How long a change waits for the rest of its burst before the cycle that reads it.
const SETTLE: Duration = Duration::from_millis(150);

/// The next host changes inotify reports; never, without inotify. The watcher is dropped when
/// its stream ends.
async fn host_changes(watch: &mut Option<HostWatch>) -> Changes {
    match watch {
        Some(w) => {
            let changes = w.next().await;
            if w.ended() {
                tracing::warn!("the inotify stream ended: the host is scanned in full on every interval from now on");
                *watch = None;
            }
            changes
        }
        None => std::future::pending().await,
    }
}

fn stopping() -> Result<(), DaemonError> {
    tracing::info!("nodemedic daemon stopping");
    Ok(())
}

/// What a judgement reads besides the host, as far as the scan loop can tell it changed: the
/// pod store's and the driver view's generations, the API server as the probes and every
/// request last saw it, the kubelet's version, the configuration. The time a request was last
/// answered is left out while the API server answers (only an outage reads it).
#[derive(Debug, Clone, PartialEq)]
struct Inputs {
    pods_synced: bool,
    pods: u64,
    view: u64,
    api: Option<nodemedic_rules::snapshot::ApiObservation>,
    kubelet_version: Option<Observed<nodemedic_rules::kubelet_version::VersionReading>>,
    reloads: u64,
}

impl Inputs {
    /// Whether `other` differs from these at most in the API's observation.
    fn same_but_api(&self, other: &Inputs) -> bool {
        // Every field named: one added later is compared here or this does not compile.
        let Inputs {
            pods_synced,
            pods,
            view,
            api: _,
            kubelet_version,
            reloads,
        } = self;
        (*pods_synced, *pods, *view, kubelet_version, *reloads)
            == (
                other.pods_synced,
                other.pods,
                other.view,
                &other.kubelet_version,
                other.reloads,
            )
    }
}

/// The scan loop's state.
struct Daemon {
    /// Where the cycles hand this node's NodeResourceTopology to its publisher (when on).
    topology: Option<tokio::sync::watch::Sender<Option<serde_json::Value>>>,
    /// Each NUMA node's memory (read once: it is the hardware), for the NodeResourceTopology.
    numa_memory: std::collections::BTreeMap<u32, u64>,
    /// Every request's outcome: the reachability `apiserver-unreachable` judges.
    contact: Arc<ApiContact>,
    /// Findings already logged (by key), so a lasting one is logged once.
    logged: std::collections::HashSet<nodemedic_rules::finding::FindingKey>,
    /// Each rule's findings at its last judgement: a rule that cannot judge a scan keeps them
    /// (its metrics and Event series hold; nothing clears on "could not look").
    last_judged: std::collections::BTreeMap<&'static str, Vec<nodemedic_rules::Finding>>,
    api_observation: Arc<std::sync::Mutex<Option<nodemedic_rules::snapshot::ApiObservation>>>,
    cfg: DaemonConfig,
    host: HostPaths,
    store: SharedStore,
    /// The drivers the API work resolved last.
    view: Arc<std::sync::Mutex<DriverView>>,
    /// Where each scan's outcome goes to the API work.
    outcomes: tokio::sync::watch::Sender<Option<Arc<ScanOutcome>>>,
    metrics: Metrics,
    health: Arc<Health>,
    last_local_dirs: Option<(Instant, Observed<Vec<nodemedic_rules::snapshot::LocalDir>>)>,
    /// The host as last read, kept up to date by the changes inotify reports.
    readings: Option<Arc<crate::collect::KeptHost>>,
    /// When the host was last read in full.
    last_full: Option<Instant>,
    /// When a time-bound judgement of the rules that do not judge the API turns (a grace period
    /// ends): they are judged again then.
    full_turn_at: Option<Instant>,
    /// The same of the rules that judge the API (a probe sample leaves the window, an outage
    /// lasts): they are judged again alone then.
    api_turn_at: Option<Instant>,
    /// What the rules that judge the API are judged alone with, from the last full judgement.
    api_base: Option<judge::ApiBase>,
    /// What the last judgement read besides the host: while none of it changes, the host does
    /// not, and no deadline comes, the rules are not judged again.
    judged_inputs: Option<Inputs>,
    /// Counts the configuration reloads (a reload is judged again with the new settings).
    reloads: u64,
    /// Spark's local storage, measured every `local_storage_interval_seconds`.
    storage: storage::Storage,
    /// What the last judgement asked the kubelet's PodResources API, and its answer. The API
    /// has no change notification, so every turn asks again (a kubelet that hangs or answers
    /// otherwise is judged at once); the same answer is no change.
    kubelet_asked: Option<(
        crate::collect::podresources::ViewInputs,
        Observed<nodemedic_rules::kubelet_view::KubeletView>,
    )>,
    /// Where the pod cgroups are, for the fencing task.
    layout: Arc<std::sync::Mutex<Option<crate::collect::cgroups::Layout>>>,
    /// The fencing policy in force, for the fencing task.
    fence_policy: tokio::sync::watch::Sender<crate::fence::FencePolicy>,
    /// This node's kubelet version as last read from its Node object.
    kubelet_version: kube_api::KubeletVersionSlot,
}

impl Daemon {
    /// Re-reads the configuration file (SIGHUP). A bad file changes nothing; a good one takes
    /// effect at once, except the listen address, the request timeout and the node, which need
    /// a restart. Returns whether the scan interval changed.
    fn reload(&mut self) -> bool {
        let result = crate::config::load(self.cfg.config_file.as_ref())
            .and_then(|file| crate::config::effective(&self.cfg.flags, &file));
        let new = match result {
            Ok(new) => new,
            Err(e) => {
                tracing::error!(error = %e, "configuration reload failed; keeping the configuration in force");
                self.metrics.config_last_reload_successful.set(0);
                return false;
            }
        };
        let old = std::mem::replace(&mut self.cfg.effective, new);
        let new = &self.cfg.effective;
        if old.fencing != new.fencing {
            tracing::info!(mode = new.fencing.mode.as_str(), "driver fencing policy changed");
            self.fence_policy.send_replace(new.fencing.clone());
        }
        if old.listen != new.listen
            || old.request_timeout != new.request_timeout
            || old.publish_node_resource_topology != new.publish_node_resource_topology
            || old.kubelet_stats_url != new.kubelet_stats_url
            || old.kubelet_stats_insecure_tls != new.kubelet_stats_insecure_tls
        {
            tracing::warn!(
                "listen, request_timeout_seconds, publish_node_resource_topology and kubelet_stats_* changes take \
                 effect at the next restart"
            );
        }
        if old.local_dir_roots != new.local_dir_roots {
            self.last_local_dirs = None;
        }
        self.health
            .scan_interval_ms
            .store(new.scan_interval.as_millis() as u64, Ordering::Relaxed);
        self.metrics.configuration_loaded();
        self.reloads += 1;
        tracing::info!(
            scan_interval_seconds = new.scan_interval.as_secs_f64(),
            "configuration reloaded"
        );
        old.scan_interval != new.scan_interval
    }

    /// When the next full scan is due.
    fn full_scan_due(&self) -> Instant {
        self.last_full
            .map_or_else(Instant::now, |t| t + self.cfg.effective.full_scan_interval)
    }

    /// Brings the host readings up to date: in full (at start, on the full scan interval, when
    /// inotify asked for it or cannot be trusted), else only what `changes` name. Returns the
    /// readings and what was read (for the log), or `None` when the host could not be read.
    async fn read_host(
        &mut self,
        changes: &Changes,
        opts: &crate::collect::HostOptions,
        local_due: bool,
        hostwatch: &mut Option<HostWatch>,
    ) -> Option<(Arc<crate::collect::KeptHost>, &'static str)> {
        // Without the pod cgroups located (the kubelet has not made `kubepods` yet) nothing
        // watches them: read in full until they are there.
        let located = self.readings.as_ref().is_some_and(|r| r.layout.is_some());
        let trusted = located && hostwatch.as_ref().is_some_and(|w| w.incomplete.is_none());
        let full =
            self.readings.is_none() || changes.rescan.is_some() || !trusted || self.full_scan_due() <= Instant::now();
        let host = self.host.clone();
        let roots = opts.local_dir_roots.clone();
        let (read, what) = if full {
            // The cycle's options, but the local dirs walked only when due (the snapshot
            // keeps the last walk's meanwhile).
            let local_dirs = if local_due {
                crate::collect::LocalDirs::Measure
            } else {
                crate::collect::LocalDirs::Skip
            };
            let opts = crate::collect::HostOptions {
                local_dirs,
                ..opts.clone()
            };
            let task =
                tokio::task::spawn_blocking(move || crate::collect::read_host(&host, &opts).map_err(|e| e.to_string()));
            (task.await, "full")
        } else {
            if changes.is_empty() && !local_due {
                return self.readings.clone().map(|r| (r, "none"));
            }
            // The only holder by now (the last cycle's snapshot is gone): no copy.
            let mut readings = Arc::unwrap_or_clone(self.readings.take()?);
            let (checkpoint, pods) = (changes.checkpoint, changes.pods.clone());
            let task = tokio::task::spawn_blocking(move || {
                readings.clear_refresh_notes();
                if checkpoint {
                    readings.reread_checkpoint(&host);
                }
                for dir in &pods {
                    readings.reread_pod(&host, dir);
                }
                if local_due {
                    readings.reread_local_dirs(&host, &roots);
                }
                Ok(readings)
            });
            (task.await, "changes")
        };
        let readings = match read {
            Ok(Ok(r)) => Arc::new(r),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "host scan failed");
                self.metrics.scan_loop_turn("failed");
                return None;
            }
            Err(e) => {
                tracing::error!(error = %e, "host scan task failed");
                self.metrics.scan_loop_turn("failed");
                return None;
            }
        };
        if let Some(w) = hostwatch.as_mut() {
            if full {
                w.arm(&readings.kubelet_dir, readings.layout.as_ref());
            } else {
                for dir in changes.pods.iter().filter(|d| d.is_dir()) {
                    w.arm_pod(dir);
                }
            }
            self.metrics.host_watches.set(w.len() as i64);
        }
        if full {
            self.last_full = Some(Instant::now());
            if let Ok(mut layout) = self.layout.lock() {
                layout.clone_from(&readings.layout);
            }
        }
        self.readings = Some(readings.clone());
        Some((readings, what))
    }

    /// Reads the node's listening sockets again while Spark executors run here: no inotify
    /// tells when a shuffle service stops or starts listening, so `shuffle-service-missing`
    /// would otherwise wait for the next full read. Whether they changed since the readings.
    async fn refresh_listeners(&mut self) -> bool {
        let executors = self.store.read().is_ok_and(|s| {
            s.pods()
                .any(|p| nodemedic_rules::spark::is_executor(p) && !p.is_terminal())
        });
        let Some(readings) = self.readings.as_mut().filter(|_| executors) else {
            return false;
        };
        let host = self.host.clone();
        let read = tokio::task::spawn_blocking(move || crate::collect::listeners::read_listeners(&host)).await;
        let Ok(listeners) = read else { return false };
        if readings.snapshot.listeners == listeners {
            return false;
        }
        Arc::make_mut(readings).snapshot.listeners = listeners;
        true
    }

    /// What the next judgement would read besides the host, and the API observation itself.
    fn inputs(&self, synced: bool) -> (Inputs, Option<nodemedic_rules::snapshot::ApiObservation>) {
        let api = self
            .api_observation
            .lock()
            .ok()
            .and_then(|o| o.clone())
            .map(|o| self.contact.stamp(o));
        let inputs = Inputs {
            pods_synced: synced,
            pods: self.store.read().map_or(u64::MAX, |s| s.generation()),
            view: self.view.lock().map_or(u64::MAX, |v| v.generation),
            api: api.clone().map(|mut o| {
                if o.unreachable_since.is_none() {
                    o.last_success_at = None;
                }
                o
            }),
            kubelet_version: self.kubelet_version.lock().ok().map(|v| v.clone()),
            reloads: self.reloads,
        };
        (inputs, api)
    }

    /// Whether the last judgement still holds: the host is watched (inotify trusted) and
    /// reported no change, its local dirs are not due, no rule's deadline and no full scan has
    /// come, and nothing else it read changed.
    fn still_current(
        &self,
        changes: &Changes,
        local_due: bool,
        inputs: &Inputs,
        hostwatch: &Option<HostWatch>,
    ) -> bool {
        let watched = self.readings.as_ref().is_some_and(|r| r.layout.is_some())
            && hostwatch.as_ref().is_some_and(|w| w.incomplete.is_none());
        let now = Instant::now();
        let due = self.full_turn_at.is_some_and(|t| t <= now) || self.full_scan_due() <= now;
        let same = self
            .judged_inputs
            .as_ref()
            .is_some_and(|judged| judged.same_but_api(inputs));
        changes.is_empty() && !local_due && watched && !due && same
    }

    /// When the rules are judged again by the clock alone: the nearest of both parts' deadlines.
    fn judge_at(&self) -> Option<Instant> {
        self.full_turn_at.into_iter().chain(self.api_turn_at).min()
    }

    /// Judges the rules that judge the API alone (only the API's observation changed, or one of
    /// their deadlines came), and hands the findings to the API work when a verdict changed.
    /// False when there is nothing to judge them on (no full judgement yet).
    fn api_turn(&mut self, inputs: Inputs, api: Option<nodemedic_rules::snapshot::ApiObservation>) -> bool {
        let Some(base) = self.api_base.as_mut() else {
            return false;
        };
        let started = Instant::now();
        let server = api.map_or_else(
            || Observed::NotApplicable {
                reason: "no probe round has completed yet".into(),
            },
            Observed::Ok,
        );
        let taken_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let settings = &self.cfg.effective.settings;
        let (snapshot, changed) =
            judge::judge_api(base, server, taken_at, settings, &mut self.last_judged, &self.metrics);
        self.api_turn_at = turn::next_turn_of_part(&snapshot, settings, true);
        self.judged_inputs = Some(inputs);
        self.metrics.confirmed_current();
        self.metrics.scan_loop_turn("api");
        self.health.progressed();
        let findings = base.findings.clone();
        tracing::debug!(
            findings = findings.len(),
            changed,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "API rules judged"
        );
        if changed {
            self.log_new_findings(&findings);
            let kept = self.outcomes.borrow().as_ref().map(|o| o.kept.clone());
            if let (Some(kept), Some(base)) = (kept, self.api_base.as_ref()) {
                self.outcomes.send_replace(Some(Arc::new(ScanOutcome {
                    kept,
                    findings,
                    coverage: base.coverage.clone(),
                    effective: self.cfg.effective.clone(),
                    claims: base.claims.clone(),
                })));
            }
        }
        true
    }

    /// New findings go to the log with their evidence: the node's own record, which holds even
    /// when the API server (and so Events) cannot be reached.
    fn log_new_findings(&mut self, findings: &[nodemedic_rules::Finding]) {
        let keys: std::collections::HashSet<nodemedic_rules::finding::FindingKey> =
            findings.iter().map(nodemedic_rules::Finding::key).collect();
        for f in findings.iter().filter(|f| !self.logged.contains(&f.key())) {
            tracing::warn!(
                rule = %f.rule,
                severity = f.severity.as_str(),
                subject = %f.subject.display(),
                evidence = %serde_json::Value::Object(f.evidence.clone()),
                remedy = %f.remedy,
                "new finding: {}",
                f.summary
            );
        }
        self.logged = keys;
    }

    /// Whether the kubelet's PodResources API answers what it answered at the last judgement
    /// (asked with the same inputs); true when nothing was asked then.
    async fn kubelet_answers_as_before(&self) -> bool {
        match &self.kubelet_asked {
            Some((inputs, answered)) => {
                &crate::collect::podresources::read_kubelet_view(&self.host, inputs).await == answered
            }
            None => true,
        }
    }

    /// One cycle: the host as inotify says it changed (or in full), pods from the store, drivers
    /// as last resolved, the rules judged. No API request. When nothing the last judgement read
    /// has changed and no deadline has come, the findings are only confirmed current.
    async fn cycle(&mut self, changes: Changes, hostwatch: &mut Option<HostWatch>) {
        let started = Instant::now();
        let synced = self.health.pods_synced.load(Ordering::Relaxed);
        let local_due = self
            .last_local_dirs
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= self.cfg.effective.local_dir_interval);
        let (inputs, api) = self.inputs(synced);
        let mut storage_news = false;
        if self.storage.due(self.cfg.effective.local_storage_interval) {
            let kubelet_dir = self.readings.as_ref().map(|r| r.kubelet_dir.clone());
            let endpoint = self
                .readings
                .as_ref()
                .and_then(|r| r.snapshot.kubelet.ok().map(|k| k.container_runtime_endpoint.clone()));
            let pods = self.store.read().map(|s| storage::Storage::pods_to_measure(s.pods()));
            if let (Some(dir), Ok(pods)) = (kubelet_dir, pods) {
                let window = self.cfg.effective.local_storage_window;
                storage_news = self.storage.measure(&self.host, dir, endpoint, pods, window).await;
                self.metrics.storage.kubelet_stats_read(self.storage.kubelet_read());
            }
        }
        let listeners_news = self.refresh_listeners().await;
        if !storage_news
            && !listeners_news
            && self.still_current(&changes, local_due, &inputs, hostwatch)
            && self.kubelet_answers_as_before().await
        {
            let api_due = self.api_turn_at.is_some_and(|t| t <= Instant::now());
            if self.judged_inputs.as_ref() == Some(&inputs) && !api_due {
                self.health.progressed();
                self.metrics.confirmed_current();
                return;
            }
            // Only the API's observation changed, or one of its rules' deadlines came.
            if self.api_turn(inputs.clone(), api.clone()) {
                return;
            }
        }
        // While the watch is down, the store's last pods still name the pods the kubelet's
        // PodResources API lists (which then decides liveness).
        let mut last_known_pods = std::collections::BTreeMap::new();
        let pods = match (synced, self.store.read()) {
            (true, Ok(store)) => Pods::Given {
                node: self.cfg.node.clone(),
                pods: store.pods().cloned().collect(),
                source: PodSource::Api,
            },
            (false, Ok(store)) => {
                for p in store.pods() {
                    let uids: &mut Vec<String> = last_known_pods
                        .entry((p.namespace.clone(), p.name.clone()))
                        .or_default();
                    uids.push(p.uid.clone());
                }
                Pods::Cgroups
            }
            _ => Pods::Cgroups,
        };
        // The snapshot's local dirs are measured: walked this cycle or kept from the last walk.
        let host_opts = crate::collect::HostOptions {
            node: Some(self.cfg.node.clone()),
            local_dir_roots: self.cfg.effective.local_dir_roots.clone(),
            local_dirs: crate::collect::LocalDirs::Measure,
            driver_checkpoints: self.cfg.effective.driver_checkpoints.clone(),
        };
        let Some((readings, read)) = self.read_host(&changes, &host_opts, local_due, hostwatch).await else {
            return;
        };
        let readings_dir = Some(readings.kubelet_dir.clone());
        let opts = scan::Options {
            host: host_opts,
            api,
            readings: Some(readings),
            pod_list: (!synced).then(|| Observed::Error {
                reason: "the watch of this node's pods has not synced".into(),
            }),
            last_known_pods,
            kubelet_version: self.kubelet_version.lock().ok().map(|v| v.clone()),
            // The claims to ask are judged with the rules' settings, as every judgement is.
            settings: self.cfg.effective.settings.clone(),
            ..Default::default()
        };
        let mut scanned = match scan::snapshot::<ApiDirectory>(&self.host, pods, None, &opts).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "host scan failed");
                self.metrics.scan_loop_turn("failed");
                return;
            }
        };
        let snapshot = &mut scanned.snapshot;
        if local_due {
            self.last_local_dirs = Some((Instant::now(), snapshot.host.local_dirs.clone()));
        } else if let Some((_, dirs)) = &self.last_local_dirs {
            snapshot.host.local_dirs = dirs.clone();
            if let Some(mut record) = scanned.records.get("local_dirs").cloned() {
                record.status = dirs.status();
                record.failed = matches!(dirs, Observed::Error { .. });
                scanned.records.set(record);
            }
        }
        snapshot.host.local_storage = self.storage.observed();
        if let Some(mut record) = scanned.records.get("local_storage").cloned() {
            record.status = snapshot.host.local_storage.status();
            record.failed = matches!(snapshot.host.local_storage, Observed::Error { .. });
            scanned.records.set(record);
        }
        if opts.api.is_none() {
            snapshot.api.server = Observed::NotApplicable {
                reason: "no probe round has completed yet".into(),
            };
        }
        // The drivers as the API work last resolved them: copied once, under the lock.
        let mut stale = Default::default();
        if let Ok(view) = self.view.lock() {
            stale = view.stale.clone();
            if snapshot.pods.source == PodSource::Api {
                snapshot.api.lookups = view.lookups.for_pods(&snapshot.pods.bound);
            }
        }
        let snapshot = scanned.snapshot;
        let judged = judge::judge(
            &snapshot,
            &scanned.records,
            &self.cfg.effective.settings,
            &mut self.last_judged,
            &stale,
            &self.metrics,
            self.topology.is_some().then_some(&self.numa_memory),
        );
        self.storage.judged(&judged.findings, snapshot.taken_at);
        self.api_base = Some(judge::ApiBase::of(&snapshot, &judged));
        if let (Some(tx), Some(object)) = (&self.topology, judged.topology) {
            tx.send_if_modified(|current| {
                let changed = current.as_ref() != Some(&object);
                if changed {
                    *current = Some(object);
                }
                changed
            });
        }
        let (findings, coverage, claims) = (judged.findings, judged.coverage, judged.claims);
        self.full_turn_at = turn::next_turn_of_part(&snapshot, &self.cfg.effective.settings, false);
        self.api_turn_at = turn::next_turn_of_part(&snapshot, &self.cfg.effective.settings, true);
        self.judged_inputs = Some(inputs);
        self.kubelet_asked = readings_dir.map(|dir| {
            (
                scan::kubelet_view_inputs(&self.host, &dir, &opts, &snapshot),
                snapshot.host.kubelet_view.clone(),
            )
        });
        self.metrics.scan_loop_turn("judged");
        self.health.scanned.store(true, Ordering::Relaxed);
        self.health.progressed();
        tracing::info!(
            pods = snapshot.pods.bound.len(),
            pod_source = snapshot.pods.source.as_str(),
            findings = findings.len(),
            read,
            rescan = changes.rescan.as_deref().unwrap_or(""),
            changed_pods = changes.pods.len(),
            checkpoint_changed = changes.checkpoint,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "scan"
        );
        self.log_new_findings(&findings);
        // The API work needs the pods (driver lookups) and the findings; only automatic repair
        // judges the whole snapshot again (see `KeptScan`).
        let kept = Arc::new(apiwork::KeptScan::keep(snapshot, self.cfg.effective.repair.any()));
        self.outcomes.send_replace(Some(Arc::new(ScanOutcome {
            kept,
            findings,
            coverage,
            effective: self.cfg.effective.clone(),
            claims,
        })));
    }
}
