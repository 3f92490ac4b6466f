//! The daemon's API work, beside the scan loop and never in its way: Spark driver lookups,
//! Events, node conditions and automatic repair.
//!
//! The scan loop hands each scan's outcome over a `watch` channel (a newer outcome replaces
//! one not yet taken) and goes on with its schedule. This task takes the newest outcome and
//! runs one pass:
//! 1. resolves the drivers of the executors (one list of each namespace's drivers, through the
//!    cache and its budget), reads the Events of drivers here that wait to start and the nodes
//!    of their applications' other drivers (`driver-blocked-by-partition`, rarely more than
//!    nothing: [`spark::partition`]), and publishes them for the next scan, which it wakes when
//!    they changed;
//! 2. records the findings as Events, then syncs the node's conditions;
//! 3. runs automatic repair when it is switched on.
//!
//! Every request has its own deadline (the request timeout), and a failure that says the API
//! server is unavailable (no answer, a timeout, 5xx, 429, 401) ends the pass and closes a
//! [`Gate`]: the next pass waits a jittered pause that doubles from 2 s to 5 min, so an outage
//! costs a few requests per node per minute at most; within a pass, the first failed driver
//! lookup stops the others ([`Breaker`]). When the pod watch is back (it retries at most 30 s
//! apart), the pause ends at once.
//!
//! A driver lookup that fails keeps the answer of the last lookup that succeeded, marked
//! stale: an orphaned executor stays reported (its evidence says since when the driver could
//! not be re-checked) instead of disappearing and coming back as a new Event.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodemedic_rules::finding::Finding;
use nodemedic_rules::snapshot::{
    ApiLookups, DriverLookup, NodeSnapshot, NodeStatus, PodEvent, PodInfo, PodSource, PodsSnapshot,
};
use tokio::sync::{Notify, watch};

use crate::conditions::NodeConditions;
use crate::config::Effective;
use crate::events::EventRecorder;
use crate::host::HostPaths;
use crate::kube_api::{DriverDirectory, driver_directory};
use crate::metrics::Metrics;
use crate::repair::audit::{ActionResult, Audit, RepairAction};
use crate::repair::auto::{AutoRepairState, LocalDirTarget, auto_repair};
use crate::retry::Gate;
use crate::spark;

use super::watch::SharedStore;

/// How long after a pass the API work passes again over the same outcome: the nearest of the
/// clocks that age on the API side (the driver cache's TTL, the condition heartbeat, the Event
/// series interval), so that none waits longer than before the scan loop stopped judging on
/// every interval.
pub fn revisit(effective: &Effective) -> Duration {
    effective
        .driver_cache_ttl
        .min(effective.condition_heartbeat)
        .min(effective.event_series_interval)
        .max(Duration::from_secs(1))
}

/// What one scan hands to the API work.
#[derive(Debug, Clone)]
pub struct ScanOutcome {
    /// What the API work keeps of the scan (not `scan::Scanned`: the snapshot, whole or its pods),
    /// shared by the outcomes of the judgements of the API rules alone that follow it.
    pub kept: Arc<KeptScan>,
    /// The findings of the rules that judged, and the last judged findings of those that
    /// could not (see `coverage`).
    pub findings: Vec<Finding>,
    /// Whether each rule judged this scan: the findings of one that could not are held, with
    /// no Event sent for them, and its node condition is `Unknown`.
    pub coverage: BTreeMap<&'static str, nodemedic_rules::coverage::Coverage>,
    /// The configuration the scan ran with (a reload reaches the API work this way).
    pub effective: Effective,
    /// Whether the node holds prepared DRA claims, and the ResourceClaims to look up
    /// (`stale-dra-claim`), judged on the whole snapshot.
    pub claims: nodemedic_rules::facts::ClaimsToAsk,
}

/// What the API work reads of a scan's snapshot.
#[derive(Debug, Clone)]
pub enum KeptScan {
    /// The whole snapshot: automatic repair judges it again.
    Whole(Box<NodeSnapshot>),
    /// Only what the lookups read (automatic repair off): the host's cgroup tree and processes
    /// do not live on in the channel between scans.
    Pods(ScanPods),
}

/// The pods of a scan, as the driver lookups and the reads of [`spark::partition`] need them.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanPods {
    pub node: String,
    /// When the snapshot was taken, unix seconds.
    pub taken_at: i64,
    /// The snapshot's pods part, as it is.
    pub pods: PodsSnapshot,
}

impl KeptScan {
    /// The scan's snapshot as the API work keeps it: whole when automatic repair will judge it
    /// again (`whole`), else only its pods.
    pub fn keep(snapshot: NodeSnapshot, whole: bool) -> Self {
        if whole {
            return KeptScan::Whole(Box::new(snapshot));
        }
        KeptScan::Pods(ScanPods {
            node: snapshot.node,
            taken_at: snapshot.taken_at,
            pods: snapshot.pods,
        })
    }

    /// Where the pods came from.
    pub fn pod_source(&self) -> &PodSource {
        match self {
            KeptScan::Whole(s) => &s.pods.source,
            KeptScan::Pods(p) => &p.pods.source,
        }
    }

    /// The pods, on the scan's node, at its time.
    pub fn pods_at(&self) -> spark::PodsAt<'_> {
        match self {
            KeptScan::Whole(s) => spark::PodsAt::of(s),
            KeptScan::Pods(p) => spark::PodsAt {
                node: &p.node,
                now: p.taken_at,
                pods: &p.pods,
            },
        }
    }
}

/// The drivers the last pass resolved, for the next scans.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriverView {
    /// The drivers by executor pod UID, every driver of each application with a driver on this
    /// node by application id, the Warning Events of the drivers here that wait to start and the
    /// other nodes of their applications' drivers (`driver-blocked-by-partition`; see
    /// [`spark::partition`]), and the ResourceClaims of the claims stale on this node
    /// (`stale-dra-claim`). A read that failed keeps the last answer.
    pub lookups: ApiLookups,
    /// Executors whose driver could not be re-checked: the answer above is the last good one,
    /// and this says since when and why (evidence `driver_lookup_stale`).
    pub stale: BTreeMap<String, String>,
    /// Counts the views published: the scan loop judges again only when it moved.
    pub generation: u64,
}

/// Driver lookups of one pass take at most this long together.
const LOOKUPS_DEADLINE: Duration = Duration::from_secs(30);

/// The pod Event and node reads of one pass take at most this long together.
const PARTITION_DEADLINE: Duration = Duration::from_secs(10);

/// The API work's state.
pub struct ApiWork {
    pub client: kube::Client,
    pub host: HostPaths,
    pub directory: DriverDirectory,
    pub driver_memory: spark::DriverMemory,
    pub events: EventRecorder,
    pub conditions: NodeConditions,
    pub auto_repair: AutoRepairState,
    pub repair_audit: Audit,
    pub metrics: Metrics,
    /// Where the scan loop reads the drivers.
    pub view: Arc<Mutex<DriverView>>,
    /// When each stale answer was last confirmed by a lookup that succeeded.
    pub last_good: BTreeMap<String, i64>,
    /// Wakes the scan loop when the drivers changed.
    pub wake: Arc<Notify>,
    pub gate: Gate,
    /// The settings the directory was built with (rebuilt when a reload changes them).
    pub directory_settings: (Duration, u32),
    /// The pod watch's store: the Spark pods that changed since the last pass.
    pub store: SharedStore,
}

impl std::fmt::Debug for ApiWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiWork").field("events", &self.events).finish()
    }
}

fn unix_now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The API work's gate: after a pass the API server did not serve, the next waits a pause
/// drawn from the upper half of a ceiling that doubles from this...
const GATE_FIRST: Duration = Duration::from_secs(2);
/// ... up to this.
const GATE_CAP: Duration = Duration::from_secs(300);
/// The seed of the gate's jitter.
const GATE_SEED: u64 = 0xa91;

impl ApiWork {
    /// The API work of `agent` through `client`, with `effective`'s driver cache, Event series
    /// interval, condition heartbeat and repair limit (a reload reaches it through each
    /// [`ScanOutcome`]); cluster-level Events name the Lease of `agent`'s namespace. Its
    /// [`DriverView`] starts empty.
    pub fn new(
        client: kube::Client,
        host: HostPaths,
        agent: &super::wiring::Agent,
        effective: &Effective,
        shared: &super::wiring::Shared,
    ) -> Self {
        let (ttl, budget) = (effective.driver_cache_ttl, effective.driver_lookup_budget);
        let (node, instance) = (&agent.node, &agent.instance);
        ApiWork {
            directory: driver_directory(client.clone(), ttl, budget),
            directory_settings: (ttl, budget),
            driver_memory: spark::DriverMemory::default(),
            events: EventRecorder::new(client.clone(), node, instance, effective.event_series_interval)
                .with_cluster_object(crate::events::lease_reference(
                    &agent.namespace,
                    crate::leader::LEASE_NAME,
                )),
            conditions: NodeConditions::new(client.clone(), node, effective.condition_heartbeat),
            auto_repair: AutoRepairState::new(effective.repair.max_actions_per_hour),
            repair_audit: Audit::new(Some(client.clone()), node, instance),
            metrics: shared.metrics.clone(),
            view: Arc::new(Mutex::new(DriverView::default())),
            last_good: Default::default(),
            wake: shared.wake.clone(),
            gate: Gate::new(GATE_FIRST, GATE_CAP, GATE_SEED),
            store: shared.store.clone(),
            client,
            host,
        }
    }

    /// Takes outcomes until the scan loop goes away. `api_back` changes when the API server
    /// serves again after trouble (`ApiContact::back_signal`), and the pause is cut short.
    ///
    /// A pass runs on each newer outcome, and without one (the scan loop judges only when
    /// something changed) on the work's own clocks: a failed pass again after its pause, and
    /// the last outcome again [`revisit`] after its pass, for what ages on the API side (the
    /// driver cache's TTL: a driver elsewhere may have finished; the condition heartbeat; the
    /// Event series).
    pub async fn run(
        mut self,
        mut outcomes: watch::Receiver<Option<Arc<ScanOutcome>>>,
        mut api_back: watch::Receiver<u64>,
    ) {
        let mut last: Option<Arc<ScanOutcome>> = None;
        loop {
            let again = match &last {
                Some(_) if self.gate.failures() > 0 => Some(self.gate.wait()),
                Some(outcome) => Some(revisit(&outcome.effective)),
                None => None,
            };
            tokio::select! {
                changed = outcomes.changed() => if changed.is_err() {
                    return;
                },
                _ = tokio::time::sleep(again.unwrap_or_default()), if again.is_some() => {}
                Ok(()) = api_back.changed(), if again.is_some() && self.gate.failures() > 0 => self.gate.succeed(),
            }
            // After a failure, wait out the pause (a newer outcome may arrive meanwhile), unless
            // the API server is seen back first.
            tokio::select! {
                _ = tokio::time::sleep(self.gate.wait()) => {}
                Ok(()) = api_back.changed() => self.gate.succeed(),
            }
            if let Some(newer) = outcomes.borrow_and_update().clone() {
                last = Some(newer);
            }
            let Some(outcome) = last.clone() else {
                continue;
            };
            if self.pass(&outcome).await {
                self.gate.succeed();
            } else {
                let pause = self.gate.fail();
                tracing::info!(
                    failures = self.gate.failures(),
                    retry_in_s = pause.as_secs_f64(),
                    "API server unavailable; Events, conditions and lookups wait"
                );
            }
        }
    }

    /// Forgets the cached driver lookups that the pod watch's changes make stale: a driver on
    /// this node deleted, replaced or finished is known at once, and so is the driver of an
    /// executor that changed (its driver may run elsewhere). After a relist, all of them.
    fn forget_changed_drivers(&mut self) {
        let Ok(mut store) = self.store.write() else { return };
        let (relisted, changed) = store.take_changes();
        drop(store);
        let cache = &self.directory.inner.inner;
        if relisted {
            cache.forget_all();
        }
        for pod in &changed {
            cache.forget(pod);
        }
    }

    /// One pass; false when the API server was unavailable.
    async fn pass(&mut self, outcome: &ScanOutcome) -> bool {
        let cfg = &outcome.effective;
        let settings = (cfg.driver_cache_ttl, cfg.driver_lookup_budget);
        if settings != self.directory_settings {
            self.directory = driver_directory(self.client.clone(), settings.0, settings.1);
            self.directory_settings = settings;
        }
        self.events.set_series_interval(cfg.event_series_interval);
        self.conditions.set_heartbeat(cfg.condition_heartbeat);
        self.forget_changed_drivers();
        let kept: &KeptScan = &outcome.kept;
        let mut available = true;
        if *kept.pod_source() == PodSource::Api {
            available &= self.resolve(kept.pods_at(), &outcome.claims).await;
        }
        if !available {
            return false;
        }

        let write_failures = |metrics: &Metrics, kind: &str, n: usize| {
            metrics
                .api_write_failures_total
                .with_label_values(&[kind])
                .inc_by(n as u64);
        };
        let (judged, held): (Vec<Finding>, Vec<Finding>) = outcome
            .findings
            .iter()
            .cloned()
            .partition(|f| outcome.coverage.get(f.rule.as_str()).is_none_or(|c| c.judged()));
        self.events.hold(&held);
        let stats = self.events.record(&judged).await;
        for reason in &stats.reasons {
            self.metrics.events_emitted_total.with_label_values(&[reason]).inc();
        }
        write_failures(&self.metrics, "event", stats.failed);
        if stats.unavailable {
            return false;
        }
        match self.conditions.sync(&outcome.findings, &outcome.coverage).await {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not update node conditions");
                write_failures(&self.metrics, "node_condition", 1);
                if e.status().is_none_or(|c| c >= 500 || c == 429 || c == 401) {
                    return false;
                }
            }
        }
        // Automatic repair: off unless switched on, rate-limited, never cpu-state.
        let policy = cfg.repair.clone();
        if let (true, KeptScan::Whole(snapshot)) = (policy.any(), kept)
            && snapshot.pods.source == PodSource::Api
        {
            let records = auto_repair(
                &self.client,
                &self.repair_audit,
                snapshot,
                &cfg.settings,
                &policy,
                &mut self.auto_repair,
                Some(LocalDirTarget {
                    host: &self.host,
                    roots: &cfg.local_dir_roots,
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
                    Some(false) => write_failures(&self.metrics, "event", 1),
                    None => {}
                }
                // A pod action fails only when its DELETE did (a gone pod or a changed UID is
                // skipped, not failed); a local-dir failure is the filesystem's, not the API's.
                if rec.result == ActionResult::Failed
                    && matches!(
                        rec.action,
                        RepairAction::Orphans | RepairAction::FailedPods | RepairAction::HalfSubmitted
                    )
                {
                    write_failures(&self.metrics, "pod_deletion", 1);
                }
            }
        }
        true
    }

    /// Resolves the drivers of the snapshot's executors and publishes them; false when a
    /// lookup failed (the last good answers are kept, marked stale).
    async fn resolve(&mut self, at: spark::PodsAt<'_>, claims: &nodemedic_rules::facts::ClaimsToAsk) -> bool {
        // A new pass: the first failure of this pass stops the rest (see `Breaker`).
        self.directory.inner.reset();
        let resolved = tokio::time::timeout(LOOKUPS_DEADLINE, async {
            let (mut drivers, app_drivers) = spark::resolve_all(&self.directory, &at.pods.bound).await;
            self.driver_memory.recall(&self.directory, &mut drivers).await;
            (drivers, app_drivers)
        })
        .await;
        let previous = self.view.lock().map(|v| v.clone()).unwrap_or_default();
        let (mut drivers, mut app_drivers) = match resolved {
            Ok(r) => r,
            Err(_) => {
                let reason = format!("driver lookups took over {} s (timeout)", LOOKUPS_DEADLINE.as_secs());
                let drivers = at
                    .pods
                    .bound
                    .iter()
                    .filter(|p| nodemedic_rules::spark::is_executor(p))
                    .map(|p| (p.uid.clone(), DriverLookup::Unknown { reason: reason.clone() }))
                    .collect();
                (drivers, BTreeMap::new())
            }
        };
        let (stale, failed) = keep_last_good(&mut drivers, &previous.lookups.drivers, &mut self.last_good, unix_now());
        // An application whose driver list could not be read keeps the last list.
        for (app, list) in &previous.lookups.app_drivers {
            app_drivers.entry(app.clone()).or_insert_with(|| list.clone());
        }
        app_drivers.retain(|app, _| {
            at.pods
                .bound
                .iter()
                .any(|p| nodemedic_rules::spark::app_drivers_key(p).as_deref() == Some(app.as_str()))
        });
        let (pod_events, nodes, resource_claims) =
            self.read_partition_inputs(at, &app_drivers, &previous, claims).await;
        let mut view = DriverView {
            lookups: ApiLookups {
                drivers,
                app_drivers,
                pod_events,
                resource_claims,
                nodes,
            },
            stale,
            generation: previous.generation,
        };
        if view != previous {
            view.generation += 1;
            if let Ok(mut slot) = self.view.lock() {
                *slot = view;
            }
            self.wake.notify_one();
        }
        !failed
    }

    /// Reads the pod Events and nodes of `driver-blocked-by-partition` for the drivers here that
    /// wait to start (through the cache: a blocked driver costs one Event list and one node GET
    /// per [`crate::spark::CachedDirectory`] status period). What could not be read keeps the
    /// last pass's answer; a read that ran out of time keeps all of them. Failures are logged, not
    /// counted against the pass: Events and conditions go on.
    async fn read_partition_inputs(
        &self,
        at: spark::PodsAt<'_>,
        app_drivers: &BTreeMap<String, Vec<Arc<PodInfo>>>,
        previous: &DriverView,
        claims: &nodemedic_rules::facts::ClaimsToAsk,
    ) -> (
        BTreeMap<String, Vec<PodEvent>>,
        BTreeMap<String, NodeStatus>,
        BTreeMap<String, nodemedic_rules::snapshot::ClaimObject>,
    ) {
        let last = spark::PartitionInputs {
            pod_events: previous.lookups.pod_events.clone(),
            nodes: previous.lookups.nodes.clone(),
            resource_claims: previous.lookups.resource_claims.clone(),
            ..Default::default()
        };
        let read = spark::partition_inputs(&self.directory, at, app_drivers, claims);
        let mut inputs = match tokio::time::timeout(PARTITION_DEADLINE, read).await {
            Ok(inputs) => inputs,
            Err(_) => {
                tracing::warn!(
                    "pod Events and nodes took over {} s (timeout): the last ones are kept",
                    PARTITION_DEADLINE.as_secs()
                );
                last.clone()
            }
        };
        if inputs.failed() {
            tracing::warn!(
                events = ?inputs.events_failed,
                nodes = ?inputs.nodes_failed,
                "pod Events or nodes could not be read (driver-blocked-by-partition): the last ones are kept"
            );
        }
        inputs.keep_last_good(&last);
        // Only the drivers still here.
        inputs
            .pod_events
            .retain(|uid, _| at.pods.bound.iter().any(|p| &p.uid == uid));
        (inputs.pod_events, inputs.nodes, inputs.resource_claims)
    }
}

/// Replaces each failed lookup (`Unknown`) of an executor whose driver was known by the last
/// known answer, and says so in the returned stale map (by executor UID: since when and why).
/// `last_good` remembers when each executor's lookup last succeeded. Returns the stale map and
/// whether a lookup failed for the API server's reason (not a spent budget).
pub fn keep_last_good(
    drivers: &mut BTreeMap<String, DriverLookup>,
    previous: &BTreeMap<String, DriverLookup>,
    last_good: &mut BTreeMap<String, i64>,
    now: i64,
) -> (BTreeMap<String, String>, bool) {
    let mut stale = BTreeMap::new();
    let mut failed = false;
    for (uid, lookup) in drivers.iter_mut() {
        let DriverLookup::Unknown { reason } = lookup else {
            last_good.insert(uid.clone(), now);
            continue;
        };
        // A spent budget is ours, not the API server's.
        failed |= !reason.contains("rate limited");
        if let Some(before) = previous.get(uid).filter(|b| !matches!(b, DriverLookup::Unknown { .. })) {
            let since = last_good.get(uid).copied().unwrap_or(now);
            let at = jiff::Timestamp::from_second(since).map_or_else(|_| since.to_string(), |t| t.to_string());
            stale.insert(
                uid.clone(),
                format!("the driver could not be re-checked ({reason}); this is the answer of the lookup at {at}"),
            );
            *lookup = before.clone();
        }
    }
    last_good.retain(|uid, _| drivers.contains_key(uid));
    (stale, failed)
}

/// Adds `driver_lookup_stale` to the evidence of findings about executors whose driver could
/// not be re-checked.
pub fn mark_stale(findings: &mut [Finding], stale: &BTreeMap<String, String>) {
    for f in findings.iter_mut() {
        let uid = f
            .evidence
            .get("executor_uid")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        if let Some(why) = uid.and_then(|u| stale.get(&u)) {
            f.evidence
                .insert("driver_lookup_stale".into(), serde_json::Value::String(why.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::finding::{Severity, Subject};
    use nodemedic_rules::snapshot::LookupMethod;

    fn gone() -> DriverLookup {
        DriverLookup::Gone {
            by: LookupMethod::OwnerReference,
            expected: "spark/etl-driver (uid d1)".into(),
        }
    }

    #[test]
    fn a_failed_re_check_keeps_the_last_answer_marked_stale() {
        let mut last_good = BTreeMap::new();
        // Pass 1: found gone.
        let mut first: BTreeMap<String, DriverLookup> = [("e1".to_string(), gone())].into();
        let (stale, failed) = keep_last_good(&mut first, &BTreeMap::new(), &mut last_good, 1_000);
        assert!(stale.is_empty() && !failed);
        // Pass 2 and 3: the lookup fails; the answer stays, stale since the first pass.
        let mut view = first.clone();
        for now in [1_030, 1_060] {
            let mut next: BTreeMap<String, DriverLookup> = [(
                "e1".to_string(),
                DriverLookup::Unknown {
                    reason: "GET pod spark/etl-driver: HTTP 500".into(),
                },
            )]
            .into();
            let (stale, failed) = keep_last_good(&mut next, &view, &mut last_good, now);
            assert!(failed);
            assert_eq!(next["e1"], gone());
            assert_eq!(
                stale["e1"],
                "the driver could not be re-checked (GET pod spark/etl-driver: HTTP 500); this is the answer of the lookup at 1970-01-01T00:16:40Z"
            );
            view = next;
        }
        // A spent budget is not the API server failing; an executor never resolved stays unknown.
        let mut limited: BTreeMap<String, DriverLookup> = [
            (
                "e1".to_string(),
                DriverLookup::Unknown {
                    reason: "rate limited: driver lookups over budget for this period".into(),
                },
            ),
            (
                "e2".to_string(),
                DriverLookup::Unknown {
                    reason: "rate limited: driver lookups over budget for this period".into(),
                },
            ),
        ]
        .into();
        let (stale, failed) = keep_last_good(&mut limited, &view, &mut last_good, 1_090);
        assert!(!failed);
        assert!(stale.contains_key("e1") && !stale.contains_key("e2"));
        assert!(matches!(limited["e2"], DriverLookup::Unknown { .. }));

        // The finding about e1 carries the staleness in its evidence.
        let mut findings = vec![
            Finding::new(
                nodemedic_rules::rules::orphaned_executor::ID,
                Severity::Warning,
                Subject::node("n"),
                "s".into(),
                "r".into(),
            )
            .with("executor_uid", "e1"),
        ];
        mark_stale(&mut findings, &stale);
        assert!(
            findings[0].evidence["driver_lookup_stale"]
                .as_str()
                .is_some_and(|s| s.contains("could not be re-checked"))
        );
    }

    #[test]
    fn without_repair_the_outcome_keeps_only_the_pods_of_the_snapshot() {
        use nodemedic_rules::snapshot::Observed;
        let mut snapshot = NodeSnapshot::empty("node-a", 42);
        snapshot.pods.source = PodSource::Api;
        snapshot.pods.bound = vec![PodInfo {
            uid: "d1".into(),
            ..Default::default()
        }];
        snapshot.pods.conf_mounts.insert(
            "d1".into(),
            nodemedic_rules::snapshot::ConfMount::Mounted { path: "/m".into() },
        );
        snapshot.host.cgroups = Observed::Error { reason: "r".into() };
        let KeptScan::Pods(pods) = KeptScan::keep(snapshot.clone(), false) else {
            panic!("without repair only the pods are kept");
        };
        assert_eq!(
            pods,
            ScanPods {
                node: "node-a".into(),
                taken_at: 42,
                pods: snapshot.pods.clone(),
            }
        );
        let kept = KeptScan::Pods(pods);
        let at = kept.pods_at();
        assert_eq!((at.node, at.now, at.pods.bound.len()), ("node-a", 42, 1));
        // With repair the whole snapshot, host sources with it, goes to the API work.
        let KeptScan::Whole(whole) = KeptScan::keep(snapshot.clone(), true) else {
            panic!("with repair the whole snapshot is kept");
        };
        assert_eq!(*whole, snapshot);
    }
}
