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
//! The API server may go away at any time: the watch retries with backoff and resumes (a
//! `410 Gone` makes it list again), the store keeps the last known pods, host scans go on,
//! and Events and condition patches that fail are retried on a later cycle. SIGTERM or
//! SIGINT ends the loop after the cycle in progress.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event as WatchEvent};
use nodemedic_rules::rules;
use nodemedic_rules::snapshot::{Observed, PodSource};
use tokio::sync::Notify;

use crate::collect::{
    self, ScanOptions,
    pods::{PodObject, pod_info},
};
use crate::conditions::NodeConditions;
use crate::config::Effective;
use crate::events::EventRecorder;
use crate::host::HostPaths;
use crate::kube_api::{self, ApiDirectory};
use crate::metrics::Metrics;
use crate::serve::{self, Health};
use crate::spark::{self, CachedDirectory};

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
    /// The command line, which keeps winning over the file after a reload.
    pub args: crate::args::RunArgs,
    pub effective: Effective,
}

/// Runs until SIGTERM/SIGINT. Errors only when it cannot start (no API configuration, the
/// listen address is taken).
pub async fn run(cfg: DaemonConfig) -> Result<(), String> {
    let config = kube_api::config(cfg.kubeconfig.as_deref()).await?;
    let client = kube_api::request_client(config.clone(), cfg.effective.request_timeout)?;
    let metrics = Metrics::new().map_err(|e| format!("metrics: {e}"))?;
    let health = Arc::new(Health::default());
    let listener = tokio::net::TcpListener::bind(&cfg.effective.listen)
        .await
        .map_err(|e| format!("listen on {}: {e}", cfg.effective.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(node = %cfg.node, listen = %addr, "nodemedic daemon starting");
    tokio::spawn(serve::serve(listener, metrics.clone(), health.clone()));

    // One watch: the pods bound to this node (its own client, without a read timeout).
    let watch_client = kube_api::watch_client(config.clone(), cfg.effective.request_timeout)?;
    let pods: Api<PodObject> = Api::all(watch_client);
    let (store, writer) = reflector::store::<PodObject>();
    let wake = Arc::new(Notify::new());
    let watch_config = watcher::Config::default().fields(&format!("spec.nodeName={}", cfg.node));
    let stream = watcher::watcher(pods, watch_config)
        .default_backoff()
        .modify(|p: &mut PodObject| p.metadata.managed_fields = None)
        .reflect(writer);
    {
        let wake = wake.clone();
        let health = health.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
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
        });
    }

    // The API server as this node sees it: probes in their own task, never in the scan's way.
    let api_observation = Arc::new(std::sync::Mutex::new(None));
    match crate::probe::Target::from_config(&config, &config.default_namespace, &cfg.node) {
        Ok(target) => {
            let monitor = crate::apimon::ApiMonitor::new(target, client.clone(), cfg.effective.probe_timeout);
            let reader = store.clone();
            let spark_pods = move || {
                reader
                    .state()
                    .iter()
                    .filter_map(|p| {
                        let labels = p.metadata.labels.clone()?;
                        let namespace = p.metadata.namespace.clone()?;
                        labels
                            .contains_key("spark-role")
                            .then(|| (namespace, labels.into_iter().collect()))
                    })
                    .collect::<Vec<_>>()
            };
            tokio::spawn(crate::apimon::run(
                monitor,
                cfg.effective.probe_interval,
                metrics.clone(),
                spark_pods,
                api_observation.clone(),
            ));
        }
        Err(e) => tracing::warn!(error = %e, "API probes disabled"),
    }

    let mut daemon = Daemon {
        auto_repair: crate::repair::pods::AutoRepairState::new(cfg.effective.repair.max_actions_per_hour),
        repair_audit: crate::repair::audit::Audit::new(Some(client.clone()), &cfg.node, &cfg.instance),
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
    if tokio::time::timeout(Duration::from_secs(10), daemon.store.wait_until_ready())
        .await
        .is_err()
    {
        tracing::warn!("the pod watch has not synced after 10 s; scanning with liveness from cgroups until it does");
    }
    let mut tick = tokio::time::interval(daemon.cfg.effective.scan_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let signal = |kind| tokio::signal::unix::signal(kind).map_err(|e| format!("signal handler: {e}"));
    let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sighup = signal(tokio::signal::unix::SignalKind::hangup())?;
    daemon.metrics.config_last_reload_successful.set(1);
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

struct Daemon {
    auto_repair: crate::repair::pods::AutoRepairState,
    repair_audit: crate::repair::audit::Audit,
    /// Findings already logged (by key), so a lasting one is logged once.
    logged: std::collections::HashSet<String>,
    api_observation: Arc<std::sync::Mutex<Option<nodemedic_rules::snapshot::ApiObservation>>>,
    cfg: DaemonConfig,
    client: kube::Client,
    host: HostPaths,
    store: Store<PodObject>,
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
            .and_then(|file| crate::config::effective(&self.cfg.args, &file));
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
        self.metrics.config_last_reload_successful.set(1);
        if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            self.metrics
                .config_last_reload_success_timestamp_seconds
                .set(now.as_secs_f64());
        }
        tracing::info!(
            scan_interval_seconds = new.scan_interval.as_secs_f64(),
            "configuration reloaded"
        );
        old.scan_interval != new.scan_interval
    }

    async fn cycle(&mut self) {
        let started = Instant::now();
        let synced = self.health.pods_synced.load(Ordering::Relaxed);
        let pods = synced.then(|| {
            let list: Vec<_> = self.store.state().iter().filter_map(|p| pod_info(p)).collect();
            (list, PodSource::Api)
        });
        let local_due = self
            .last_local_dirs
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= self.cfg.effective.local_dir_interval);
        let opts = ScanOptions {
            node: Some(self.cfg.node.clone()),
            pods_file: None,
            pods,
            local_dir_roots: self.cfg.effective.local_dir_roots.clone(),
            skip_local_dirs: !local_due,
        };
        let host = self.host.clone();
        let collected = match tokio::task::spawn_blocking(move || collect::collect(&host, &opts)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "host scan failed");
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "host scan task failed");
                return;
            }
        };
        let mut snapshot = collected.snapshot;
        if local_due {
            self.last_local_dirs = Some((Instant::now(), snapshot.local_dirs.clone()));
        } else if let Some((_, dirs)) = &self.last_local_dirs {
            snapshot.local_dirs = dirs.clone();
        }
        snapshot.api = match self.api_observation.lock().ok().and_then(|o| o.clone()) {
            Some(o) => Observed::Ok(o),
            None => Observed::NotApplicable {
                reason: "no probe round has completed yet".into(),
            },
        };
        if snapshot.pod_source == PodSource::Api {
            let (mut drivers, app_drivers) = spark::resolve_all(&self.directory, &snapshot.pods).await;
            self.driver_memory.recall(&self.directory, &mut drivers).await;
            snapshot.drivers = drivers;
            snapshot.app_drivers = app_drivers;
        }
        let findings = rules::evaluate(&snapshot, &self.cfg.effective.settings);
        self.metrics
            .observe_scan(&snapshot, &findings, &collected.timings, &self.cfg.effective.settings);
        self.health.scanned.store(true, Ordering::Relaxed);

        let stats = self.events.record(&findings).await;
        for reason in &stats.reasons {
            self.metrics.events_emitted_total.with_label_values(&[reason]).inc();
        }
        let conditions = match self.conditions.sync(&findings).await {
            Ok(patched) => patched,
            Err(e) => {
                tracing::warn!(error = %e, "could not update node conditions");
                false
            }
        };
        // Automatic repair: off unless switched on, rate-limited, never cpu-state.
        let policy = self.cfg.effective.repair.clone();
        if policy.any() && snapshot.pod_source == PodSource::Api {
            let records = crate::repair::pods::auto_repair(
                &self.client,
                &self.repair_audit,
                &snapshot,
                &self.cfg.effective.settings,
                &policy,
                &mut self.auto_repair,
                Some(crate::repair::pods::LocalDirTarget {
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
                if rec.event_recorded == Some(true) {
                    self.metrics
                        .events_emitted_total
                        .with_label_values(&[rec.action.event_reason()])
                        .inc();
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
