//! How the daemon's API loops are wired together: written once, for [`super::run`] and for the
//! tests that prove the loops' request schedules under a paused clock.
//!
//! ```text
//!  Shared (contact, metrics, health, pod store, wake)
//!    ├─> pod watch   (Loop::Watch)                    -> store, wake, health
//!    ├─> probe task  (Loop::Monitor, Loop::Election)  -> Probes (observation, election, released)
//!    └─> API work    (Loop::ApiWork)                  <- each scan's outcome; -> DriverView
//! ```
//!
//! Every client a loop uses comes from one factory ([`Clients`]), asked once per loop (and
//! again each time a supervised task restarts): the daemon gives the pod watch its client
//! without a read timeout and every other loop one shared client; the tests give each loop a
//! client of its own on a fake API server, so that each loop's requests are told apart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use nodemedic_rules::snapshot::ApiObservation;
use tokio::sync::{Notify, watch};

use super::apiwork::{ApiWork, DriverView, ScanOutcome};
use super::serve::Health;
use super::supervise;
use super::watch::{PodStore, SharedStore, WatchSignals};
use crate::apimon::{ApiMonitor, ElectionView, ProbeOutputs};
use crate::config::Effective;
use crate::contact::ApiContact;
use crate::host::HostPaths;
use crate::leader::{ElectionConfig, Elector, LEASE_NAME};
use crate::metrics::Metrics;
use crate::probe::{ProbeError, Target};

/// Who this agent is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    /// The node it runs on.
    pub node: String,
    /// Its pod name (`reportingInstance` of its Events).
    pub instance: String,
    /// The namespace of the Lease `nodemedic-prober` (the agent's own namespace).
    pub namespace: String,
}

impl Agent {
    /// Its identity in the election: its pod name, and its node after a slash.
    pub fn identity(&self) -> String {
        format!("{}/{}", self.instance, self.node)
    }
}

/// What the daemon's tasks share.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Every request's outcome, reported by the clients and the probes.
    pub contact: Arc<ApiContact>,
    pub metrics: Metrics,
    pub health: Arc<Health>,
    /// The pod watch's store of this node's pods.
    pub store: SharedStore,
    /// Wakes the scan loop: the pods changed, the drivers changed, the API server is back.
    pub wake: Arc<Notify>,
}

impl Shared {
    /// New handles around `contact`: the API server's return wakes the scan loop, and
    /// reachability is exported as `nodemedic_api_up`.
    pub fn new(contact: Arc<ApiContact>, metrics: Metrics) -> Self {
        let shared = Shared {
            contact,
            metrics,
            health: Arc::new(Health::default()),
            store: Arc::new(RwLock::new(PodStore::default())),
            wake: Arc::new(Notify::new()),
        };
        shared.contact.wake_on_back(shared.wake.clone());
        shared.contact.export_up(shared.metrics.api_up.clone());
        shared
    }
}

/// Which API loop a client serves (the tag of its requests in the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loop {
    /// The pod watch: a watch stays quiet for minutes, so its client has no read timeout.
    Watch,
    /// The API work's lookups, Events, conditions and repairs.
    ApiWork,
    /// The probe rounds' requests other than the three probes ([`ApiMonitor`]).
    Monitor,
    /// The reads and writes of the Lease ([`Elector`]).
    Election,
}

impl Loop {
    pub fn as_str(self) -> &'static str {
        match self {
            Loop::Watch => "watch",
            Loop::ApiWork => "apiwork",
            Loop::Monitor => "monitor",
            Loop::Election => "election",
        }
    }
}

/// Makes the client of a loop.
pub type Clients = Arc<dyn Fn(Loop) -> kube::Client + Send + Sync>;

/// What the probe task publishes, and how it is stopped. Made before the task, so that the
/// daemon holds them even when the task cannot start.
#[derive(Debug)]
pub struct Probes {
    /// The API server as the last round saw it.
    pub observation: Arc<Mutex<Option<ApiObservation>>>,
    pub election: Arc<Mutex<ElectionView>>,
    /// Send `true` to stop the task: the holder releases the Lease, then `released` is notified.
    pub stop: watch::Sender<bool>,
    pub released: Arc<Notify>,
}

impl Default for Probes {
    fn default() -> Self {
        Probes {
            observation: Default::default(),
            election: Default::default(),
            stop: watch::channel(false).0,
            released: Arc::new(Notify::new()),
        }
    }
}

/// The probe task: the election, and the probe rounds while this agent holds the Lease
/// ([`crate::apimon::run`]). Each [`ProbeTask::run`] builds a new monitor and elector, so a
/// restarted task starts from nothing, as a restarted agent does.
#[derive(Clone)]
pub struct ProbeTask {
    target: Target,
    election: ElectionConfig,
    interval: Duration,
    timeout: Duration,
    clients: Clients,
    outputs: ProbeOutputs,
    shared: Shared,
}

impl std::fmt::Debug for ProbeTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeTask")
            .field("target", &self.target)
            .field("identity", &self.election.identity)
            .finish()
    }
}

impl ProbeTask {
    /// The probe task of `agent`, probing `target` every probe interval (each probe within the
    /// probe timeout) while it holds the Lease of `agent`'s namespace, elected for the lease
    /// duration (each Lease request within the request timeout); publishing to `probes`.
    pub fn new(
        shared: &Shared,
        agent: &Agent,
        effective: &Effective,
        target: Target,
        clients: Clients,
        probes: &Probes,
    ) -> Self {
        ProbeTask {
            target,
            election: ElectionConfig {
                namespace: agent.namespace.clone(),
                name: LEASE_NAME.into(),
                identity: agent.identity(),
                duration: effective.lease_duration,
                timeout: effective.request_timeout,
            },
            interval: effective.probe_interval,
            timeout: effective.probe_timeout,
            clients,
            outputs: ProbeOutputs {
                observation: probes.observation.clone(),
                election: probes.election.clone(),
                stop: probes.stop.subscribe(),
                released: probes.released.clone(),
                api_back: shared.contact.back_signal().subscribe(),
                prober: shared.metrics.prober.clone(),
            },
            shared: shared.clone(),
        }
    }

    /// One run of the task, until it is stopped. Each round's samples go to the metrics and
    /// to the contact (the probes' own requests are not reported by a client).
    pub fn run(&self) -> impl Future<Output = ()> + Send + use<> {
        let monitor = ApiMonitor::new(self.target.clone(), (self.clients)(Loop::Monitor), self.timeout);
        let elector = Elector::new(
            self.election.clone(),
            (self.clients)(Loop::Election),
            self.target.clone(),
        );
        let (metrics, contact) = (self.shared.metrics.clone(), self.shared.contact.clone());
        let store = self.shared.store.clone();
        crate::apimon::run(
            monitor,
            elector,
            self.interval,
            move |round| {
                metrics.observe_probes(round);
                for s in round {
                    contact.observe(s.status, s.error.as_deref());
                }
            },
            move || spark_pods(&store),
            self.outputs.clone(),
        )
    }
}

/// The API loops running, as [`start_api_loops`] started them.
#[derive(Debug)]
pub struct ApiLoops {
    pub probes: Probes,
    /// Where each scan's outcome goes to the API work.
    pub outcomes: watch::Sender<Option<Arc<ScanOutcome>>>,
    /// The drivers the API work resolved last.
    pub view: Arc<Mutex<DriverView>>,
}

/// Starts the pod watch and the probe task (supervised), and the API work, each with its
/// client from `clients`. Without a target (`target` an error: the configuration does not
/// say how to reach the API server on a connection of the probes' own) the probes and the
/// election are off, and the probe task counts as released.
pub fn start_api_loops(
    shared: &Shared,
    agent: &Agent,
    effective: &Effective,
    host: HostPaths,
    target: Result<Target, ProbeError>,
    clients: Clients,
) -> ApiLoops {
    // One watch: the pods bound to this node.
    {
        let signals = WatchSignals {
            health: shared.health.clone(),
            metrics: shared.metrics.clone(),
            wake: shared.wake.clone(),
            contact: shared.contact.clone(),
        };
        let client = clients(Loop::Watch);
        let (store, node, deadline) = (shared.store.clone(), agent.node.clone(), effective.request_timeout);
        supervise::spawn("pod_watch", shared.metrics.clone(), shared.health.clone(), move || {
            super::watch::run(client.clone(), node.clone(), store.clone(), signals.clone(), deadline)
        });
    }

    // The API server as this node sees it, and the election of the agent that probes
    // admission for the cluster: one task, never in the scan's way.
    let probes = Probes::default();
    match target {
        Ok(target) => {
            let task = ProbeTask::new(shared, agent, effective, target, clients.clone(), &probes);
            supervise::spawn("api_probes", shared.metrics.clone(), shared.health.clone(), move || {
                task.run()
            });
        }
        Err(e) => {
            tracing::warn!(error = %e, "API probes and the prober election disabled");
            probes.released.notify_one();
        }
    }

    // The API work, beside the scan loop.
    let work = ApiWork::new(clients(Loop::ApiWork), host, agent, effective, shared);
    let view = work.view.clone();
    let (outcomes, outcome_rx) = watch::channel(None);
    tokio::spawn(work.run(outcome_rx, shared.contact.back_signal().subscribe()));
    ApiLoops { probes, outcomes, view }
}

/// The namespace and labels of each Spark pod in the store (for webhook matching).
fn spark_pods(store: &SharedStore) -> Vec<(String, BTreeMap<String, String>)> {
    let Ok(store) = store.read() else { return vec![] };
    store
        .pods()
        .filter(|p| p.labels.contains_key(nodemedic_rules::spark::ROLE))
        .map(|p| (p.namespace.clone(), p.labels.clone()))
        .collect()
}
