//! `nodemedic run`: the DaemonSet's daemon.
//!
//! ```text
//!  watch pods (spec.nodeName=<node>) ──> reflector store ──┐ (changes wake the loop)
//!  timer (scan interval) ──────────────────────────────────┤
//!                                                          ▼
//!  cycle: collect host (blocking thread) + pods from the store
//!         -> resolve Spark drivers (cached, budgeted API lookups)
//!         -> rules::evaluate -> metrics, Events (series), node conditions
//! ```
//!
//! Everything runs on one runtime (the command's). The pod watch and the API probes are
//! supervised tasks ([`supervise`]): one that ends or panics is logged, counted in
//! `nodemedic_task_restarts_total{task}` and started again with backoff, and `/readyz` is
//! unready while the watch is down. Host reads run on the blocking pool.
//!
//! The API server may go away at any time: the watch retries with backoff and resumes (a
//! `410 Gone` makes it list again), the store keeps the last known pods, host scans go on,
//! and Events and condition patches that fail are retried on a later cycle. SIGTERM or
//! SIGINT ends the loop after the cycle in progress.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event as WatchEvent};
use nodemedic_rules::rules;
use nodemedic_rules::snapshot::{Observed, PodSource};
use tokio::sync::Notify;

use crate::collect::pods::{PodObject, pod_info};
use crate::conditions::NodeConditions;
use crate::config::{Effective, Flags};
use crate::events::EventRecorder;
use crate::host::HostPaths;
use crate::kube_api::{self, ApiDirectory};
use crate::metrics::Metrics;
use crate::repair::audit::{ActionResult, Audit, RepairAction};
use crate::repair::auto::{AutoRepairState, LocalDirTarget, auto_repair};
use crate::scan::{self, Pods};
use crate::spark::{self, CachedDirectory};

pub mod serve;
pub mod supervise;

use serve::Health;

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

/// The pods the watch keeps: a store that a restarted watch replaces.
type SharedStore = Arc<RwLock<Store<PodObject>>>;

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
    let client = kube_api::request_client(config.clone(), cfg.effective.request_timeout)?;
    let metrics = Metrics::new()?;
    let health = Arc::new(Health::default());
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

    // One watch: the pods bound to this node (its own client, without a read timeout).
    let watch_client = kube_api::watch_client(config.clone(), cfg.effective.request_timeout)?;
    let (first_store, _) = reflector::store::<PodObject>();
    let store: SharedStore = Arc::new(RwLock::new(first_store));
    let wake = Arc::new(Notify::new());
    {
        let (store, wake, health, metrics, node) = (
            store.clone(),
            wake.clone(),
            health.clone(),
            metrics.clone(),
            cfg.node.clone(),
        );
        supervise::spawn("pod_watch", metrics.clone(), health.clone(), move || {
            watch_pods(
                watch_client.clone(),
                node.clone(),
                store.clone(),
                wake.clone(),
                health.clone(),
                metrics.clone(),
            )
        });
    }

    // The API server as this node sees it: probes in their own task, never in the scan's way.
    let api_observation = Arc::new(std::sync::Mutex::new(None));
    match crate::probe::Target::from_config(&config, &config.default_namespace, &cfg.node) {
        Ok(target) => {
            let (client, store, out, interval, timeout) = (
                client.clone(),
                store.clone(),
                api_observation.clone(),
                cfg.effective.probe_interval,
                cfg.effective.probe_timeout,
            );
            let probe_metrics = metrics.clone();
            supervise::spawn("api_probes", metrics.clone(), health.clone(), move || {
                let monitor = crate::apimon::ApiMonitor::new(target.clone(), client.clone(), timeout);
                let reader = store.clone();
                let spark_pods = move || spark_pods(&reader);
                let m = probe_metrics.clone();
                crate::apimon::run(
                    monitor,
                    interval,
                    move |round| m.observe_probes(round),
                    spark_pods,
                    out.clone(),
                )
            });
        }
        Err(e) => tracing::warn!(error = %e, "API probes disabled"),
    }

    let mut daemon = Daemon {
        auto_repair: AutoRepairState::new(cfg.effective.repair.max_actions_per_hour),
        repair_audit: Audit::new(Some(client.clone()), &cfg.node, &cfg.instance),
        logged: Default::default(),
        api_observation,
        host: HostPaths::new(&cfg.host_root, cfg.kubelet_dir.clone()),
        directory: CachedDirectory::new(
            ApiDirectory::new(client.clone()),
            cfg.effective.driver_cache_ttl,
            cfg.effective.driver_lookup_budget,
        ),
        events: EventRecorder::new(
            client.clone(),
            &cfg.node,
            &cfg.instance,
            cfg.effective.event_series_interval,
        ),
        conditions: NodeConditions::new(client.clone(), &cfg.node, cfg.effective.condition_heartbeat),
        client,
        last_local_dirs: None,
        driver_memory: spark::DriverMemory::default(),
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
    if tokio::time::timeout(Duration::from_secs(10), synced).await.is_err() {
        tracing::warn!("the pod watch has not synced after 10 s; scanning with liveness from cgroups until it does");
    }
    let mut tick = tokio::time::interval(daemon.cfg.effective.scan_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let signal = |kind| tokio::signal::unix::signal(kind).map_err(DaemonError::Signal);
    let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sighup = signal(tokio::signal::unix::SignalKind::hangup())?;
    // The configuration in force was read at start: that counts as the first load.
    daemon.metrics.configuration_loaded();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = wake.notified() => {
                // Let a burst of pod changes settle into one cycle.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            _ = sighup.recv() => {
                if daemon.reload() {
                    tick = tokio::time::interval(daemon.cfg.effective.scan_interval);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
                continue;
            }
            _ = sigterm.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
        daemon.cycle().await;
    }
    tracing::info!("nodemedic daemon stopping");
    Ok(())
}

/// The namespace and labels of each Spark pod in the store (for webhook matching).
fn spark_pods(store: &SharedStore) -> Vec<(String, std::collections::BTreeMap<String, String>)> {
    let Ok(store) = store.read() else { return vec![] };
    store
        .state()
        .iter()
        .filter_map(|p| {
            let labels = p.metadata.labels.clone()?;
            let namespace = p.metadata.namespace.clone()?;
            labels
                .contains_key(nodemedic_rules::spark::ROLE)
                .then(|| (namespace, labels.into_iter().collect()))
        })
        .collect()
}

/// One run of the watch of this node's pods into a fresh store (which replaces the shared
/// one), until its stream ends. Retries inside are the watcher's, with backoff.
async fn watch_pods(
    client: kube::Client,
    node: String,
    shared: SharedStore,
    wake: Arc<Notify>,
    health: Arc<Health>,
    metrics: Metrics,
) {
    let pods: Api<PodObject> = Api::all(client);
    let (store, writer) = reflector::store::<PodObject>();
    if let Ok(mut slot) = shared.write() {
        *slot = store;
    }
    health.pods_synced.store(false, Ordering::Relaxed);
    let watch_config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let stream = watcher::watcher(pods, watch_config)
        .default_backoff()
        .modify(|p: &mut PodObject| p.metadata.managed_fields = None)
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(WatchEvent::InitDone) => {
                health.pods_synced.store(true, Ordering::Relaxed);
                metrics.pod_watch_up.set(1);
                wake.notify_one();
            }
            Ok(WatchEvent::Apply(_) | WatchEvent::Delete(_)) => {
                // Events flow again (a resumed watch sends no InitDone).
                metrics.pod_watch_up.set(1);
                wake.notify_one();
            }
            Ok(_) => metrics.pod_watch_up.set(1),
            Err(e) => {
                metrics.pod_watch_up.set(0);
                tracing::warn!(error = %e, "pod watch failed; retrying with backoff");
            }
        }
    }
}

struct Daemon {
    auto_repair: AutoRepairState,
    repair_audit: Audit,
    /// Findings already logged (by key), so a lasting one is logged once.
    logged: std::collections::HashSet<String>,
    api_observation: Arc<std::sync::Mutex<Option<nodemedic_rules::snapshot::ApiObservation>>>,
    cfg: DaemonConfig,
    client: kube::Client,
    host: HostPaths,
    store: SharedStore,
    directory: CachedDirectory<ApiDirectory>,
    events: EventRecorder,
    conditions: NodeConditions,
    metrics: Metrics,
    health: Arc<Health>,
    last_local_dirs: Option<(Instant, Observed<Vec<nodemedic_rules::snapshot::LocalDir>>)>,
    driver_memory: spark::DriverMemory,
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
        if old.listen != new.listen || old.request_timeout != new.request_timeout {
            tracing::warn!("listen and request_timeout_seconds changes take effect at the next restart");
        }
        if old.driver_cache_ttl != new.driver_cache_ttl || old.driver_lookup_budget != new.driver_lookup_budget {
            self.directory = CachedDirectory::new(
                ApiDirectory::new(self.client.clone()),
                new.driver_cache_ttl,
                new.driver_lookup_budget,
            );
        }
        self.events.set_series_interval(new.event_series_interval);
        self.conditions.set_heartbeat(new.condition_heartbeat);
        if old.local_dir_roots != new.local_dir_roots {
            self.last_local_dirs = None;
        }
        self.metrics.configuration_loaded();
        tracing::info!(
            scan_interval_seconds = new.scan_interval.as_secs_f64(),
            "configuration reloaded"
        );
        old.scan_interval != new.scan_interval
    }

    async fn cycle(&mut self) {
        let started = Instant::now();
        let synced = self.health.pods_synced.load(Ordering::Relaxed);
        let pods = match (synced, self.store.read()) {
            (true, Ok(store)) => Pods::Given {
                node: self.cfg.node.clone(),
                pods: store.state().iter().filter_map(|p| pod_info(p)).collect(),
                source: PodSource::Api,
            },
            _ => Pods::Cgroups,
        };
        let local_due = self
            .last_local_dirs
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= self.cfg.effective.local_dir_interval);
        let opts = scan::Options {
            node: Some(self.cfg.node.clone()),
            local_dir_roots: self.cfg.effective.local_dir_roots.clone(),
            skip_local_dirs: !local_due,
            api: self.api_observation.lock().ok().and_then(|o| o.clone()),
            ..Default::default()
        };
        let mut scanned = match scan::snapshot(&self.host, pods, Some(&self.directory), &opts).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "host scan failed");
                return;
            }
        };
        let snapshot = &mut scanned.snapshot;
        if local_due {
            self.last_local_dirs = Some((Instant::now(), snapshot.local_dirs.clone()));
        } else if let Some((_, dirs)) = &self.last_local_dirs {
            snapshot.local_dirs = dirs.clone();
            if let Some(mut record) = scanned.records.get("local_dirs").cloned() {
                record.status = dirs.status();
                record.failed = matches!(dirs, Observed::Error { .. });
                scanned.records.set(record);
            }
        }
        if opts.api.is_none() {
            snapshot.api = Observed::NotApplicable {
                reason: "no probe round has completed yet".into(),
            };
        }
        if snapshot.pod_source == PodSource::Api {
            self.driver_memory.recall(&self.directory, &mut snapshot.drivers).await;
        }
        let snapshot = scanned.snapshot;
        let findings = rules::evaluate(&snapshot, &self.cfg.effective.settings);
        self.metrics
            .observe_scan(&snapshot, &findings, &scanned.records, &self.cfg.effective.settings);
        self.health.scanned.store(true, Ordering::Relaxed);

        let stats = self.events.record(&findings).await;
        for reason in &stats.reasons {
            self.metrics.events_emitted_total.with_label_values(&[reason]).inc();
        }
        let write_failures = |kind: &str, n: usize| {
            self.metrics
                .api_write_failures_total
                .with_label_values(&[kind])
                .inc_by(n as u64);
        };
        write_failures("event", stats.failed);
        let conditions = match self.conditions.sync(&findings).await {
            Ok(patched) => patched,
            Err(e) => {
                tracing::warn!(error = %e, "could not update node conditions");
                write_failures("node_condition", 1);
                false
            }
        };
        // Automatic repair: off unless switched on, rate-limited, never cpu-state.
        let policy = self.cfg.effective.repair.clone();
        if policy.any() && snapshot.pod_source == PodSource::Api {
            let records = auto_repair(
                &self.client,
                &self.repair_audit,
                &snapshot,
                &self.cfg.effective.settings,
                &policy,
                &mut self.auto_repair,
                Some(LocalDirTarget {
                    host: &self.host,
                    roots: &self.cfg.effective.local_dir_roots,
                }),
            )
            .await;
            for rec in &records {
                self.metrics
                    .repair_actions_total
                    .with_label_values(&rec.metric_labels())
                    .inc();
                match rec.event_recorded {
                    Some(true) => self
                        .metrics
                        .events_emitted_total
                        .with_label_values(&[rec.action.event_reason()])
                        .inc(),
                    Some(false) => write_failures("event", 1),
                    None => {}
                }
                // A pod action fails only when its DELETE did (a gone pod or a changed UID is
                // skipped, not failed); a local-dir failure is the filesystem's, not the API's.
                if rec.result == ActionResult::Failed
                    && matches!(rec.action, RepairAction::Orphans | RepairAction::FailedPods)
                {
                    write_failures("pod_deletion", 1);
                }
            }
        }
        tracing::info!(
            pods = snapshot.pods.len(),
            pod_source = snapshot.pod_source.as_str(),
            findings = findings.len(),
            events_created = stats.created,
            events_updated = stats.patched,
            events_failed = stats.failed,
            conditions_patched = conditions,
            driver_lookups = self.directory.lookups(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "scan"
        );
        // New findings go to the log with their evidence: the node's own record, which holds
        // even when the API server (and so Events) cannot be reached.
        let keys: std::collections::HashSet<String> = findings.iter().map(crate::events::finding_key).collect();
        for f in findings
            .iter()
            .filter(|f| !self.logged.contains(&crate::events::finding_key(f)))
        {
            tracing::warn!(
                rule = %f.rule,
                severity = f.severity.as_str(),
                subject = %f.subject.display(),
                evidence = %serde_json::Value::Object(f.evidence.clone()),
                "new finding: {}",
                f.summary
            );
        }
        self.logged = keys;
    }
}
