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

use nodemedic_rules::snapshot::Observed;
use tokio::sync::Notify;

use crate::config::{Effective, Flags};
use crate::contact::ApiContact;
use crate::host::HostPaths;
use crate::kube_api;
use crate::metrics::Metrics;

pub mod apiwork;
mod cycle;
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
    Metrics(#[from] crate::exposition::Error),
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
