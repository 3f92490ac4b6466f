//! One cycle of the daemon's scan loop ([`Daemon::cycle`]): what changed since the last
//! judgement, whether the last one still holds, the host read (whole or in part), the judgement
//! and what it hands to the API work; and the loop's other turns (a configuration reload, the
//! deadlines it sleeps until). The loop itself, and what it starts, are in the parent module.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use nodemedic_rules::snapshot::{Observed, PodSource};

use super::apiwork::ScanOutcome;
use super::hostwatch::{Changes, HostWatch};
use super::{Daemon, Inputs, apiwork, judge, storage, turn};
use crate::kube_api::ApiDirectory;
use crate::scan::{self, Pods};

impl Daemon {
    /// Re-reads the configuration file (SIGHUP). A bad file changes nothing; a good one takes
    /// effect at once, except the listen address, the request timeout and the node, which need
    /// a restart. Returns whether the scan interval changed.
    pub(super) fn reload(&mut self) -> bool {
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
    pub(super) fn full_scan_due(&self) -> Instant {
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
    pub(super) fn judge_at(&self) -> Option<Instant> {
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
    pub(super) async fn cycle(&mut self, changes: Changes, hostwatch: &mut Option<HostWatch>) {
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
