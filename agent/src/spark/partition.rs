//! What `driver-blocked-by-partition` reads besides the pods: the Warning Events of this node's
//! drivers that wait to start, and the status of the nodes their applications' other drivers
//! run on.
//!
//! Events and nodes cost requests, so few are read, in an order that stops early:
//! 1. the drivers here that have been `Pending` (no container running) for [`PENDING_FOR`]
//!    seconds, oldest first, at most [`MAX_WAITING`] (a driver is pending for a few seconds while
//!    its image is pulled; a blocked one stays);
//! 2. of those, the ones with another unfinished driver of their application on another node
//!    (from the application lists already read: no request);
//! 3. those other nodes, one GET each (cached by the directory);
//! 4. only when one of them is not `Ready` (or could not be read), the pod's Warning Events, one
//!    LIST with `involvedObject.uid`.
//!
//! `device-admission-failure` reads Events too: of the pods on this node with ResourceClaims
//! that have waited to start as long (any pod, oldest first, at most [`MAX_WAITING`]), only while
//! the node holds prepared claims (the kubelet's `dra_manager_state` or a driver's checkpoint):
//! the kubelet reports a device a stale claim still holds there (`FailedPrepareDynamicResources`).
//!
//! So does `stale-dra-claim`: one GET each of the ResourceClaims of the claims stale on this
//! node (and of the drivers' claims with no pod recorded), at most
//! [`nodemedic_rules::facts::CLAIMS_ASKED`], remembered like node status.
//!
//! And `half-submitted-driver`: the Warning Events of the drivers here whose configuration
//! volume the kubelet has not set up although it made their pod directory
//! (`NodeSnapshot::conf_mounts`), oldest first, at most [`MAX_WAITING`]: the kubelet's
//! `FailedMount` about the missing ConfigMap is the finding's evidence. A driver whose volume is
//! set up (one pulling its image) costs nothing.
//!
//! A quiet cluster costs nothing; a driver stuck pulling its image costs nothing; a partition
//! costs one GET per cut-off node and one LIST per blocked driver per cache period. What could not
//! be read is said per pod and per node, so that the daemon keeps the last answer for it.

use std::collections::BTreeMap;
use std::sync::Arc;

use nodemedic_rules::snapshot::{ClaimObject, NodeSnapshot, NodeStatus, PodEvent, PodInfo, PodPhase, PodsSnapshot};
use nodemedic_rules::spark;

use super::{LookupError, PodDirectory};

/// How long a driver must have been waiting to start before its Events are read, seconds. The
/// attach/detach controller reports a Multi-Attach as soon as it tries; younger pending drivers
/// are mostly pulling their image.
pub const PENDING_FOR: i64 = 30;

/// At most this many waiting drivers are looked into per pass (a node where every pod waits for
/// its image must not turn into a burst of Event lists).
pub const MAX_WAITING: usize = 8;

/// The Events and nodes read for `driver-blocked-by-partition`, and what could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionInputs {
    /// Warning Events of the waiting drivers, by pod UID.
    pub pod_events: BTreeMap<String, Vec<PodEvent>>,
    /// The other nodes of their applications' drivers, by name.
    pub nodes: BTreeMap<String, NodeStatus>,
    /// Pods whose Events could not be read, by UID: why.
    pub events_failed: BTreeMap<String, String>,
    /// Nodes that could not be read, by name: why.
    pub nodes_failed: BTreeMap<String, String>,
    /// The ResourceClaims asked for (`stale-dra-claim`), by `namespace/name`; one that could not
    /// be read is `Unknown`.
    pub resource_claims: BTreeMap<String, ClaimObject>,
}

/// The drivers on `node` among `pods` that have waited to start for [`PENDING_FOR`] seconds at
/// `now` (unix seconds): `Pending`, no container running, not being deleted; oldest first, at
/// most [`MAX_WAITING`].
pub fn waiting_drivers<'a>(pods: &'a [PodInfo], node: &str, now: i64) -> Vec<&'a PodInfo> {
    let mut waiting: Vec<&PodInfo> = pods
        .iter()
        .filter(|p| {
            nodemedic_rules::spark::driver_waits_to_start(p, node)
                && p.created_at.is_some_and(|c| now - c >= PENDING_FOR)
        })
        .collect();
    waiting.sort_by_key(|p| (p.created_at, p.uid.clone()));
    waiting.truncate(MAX_WAITING);
    waiting
}

/// The pods on `node` among `pods` with ResourceClaims that have waited to start for
/// [`PENDING_FOR`] seconds at `now`: `Pending`, no container running, not being deleted; oldest
/// first, at most [`MAX_WAITING`].
pub fn waiting_for_claims<'a>(pods: &'a [PodInfo], node: &str, now: i64) -> Vec<&'a PodInfo> {
    let mut waiting: Vec<&PodInfo> = pods
        .iter()
        .filter(|p| {
            !p.resource_claims.is_empty()
                && p.node_name.as_deref() == Some(node)
                && p.phase == PodPhase::Pending
                && !p.deleting
                && !p.containers.iter().any(|c| c.state.as_deref() == Some("running"))
                && p.created_at.is_some_and(|c| now - c >= PENDING_FOR)
        })
        .collect();
    waiting.sort_by_key(|p| (p.created_at, p.uid.clone()));
    waiting.truncate(MAX_WAITING);
    waiting
}

/// The nodes other than `node` that unfinished drivers of `driver`'s application run on, from the
/// application lists (`ApiLookups::app_drivers`).
pub fn other_nodes<'a>(
    driver: &PodInfo,
    app_drivers: &'a BTreeMap<String, Vec<Arc<PodInfo>>>,
    node: &str,
) -> Vec<&'a str> {
    let mut nodes: Vec<&str> = Vec::new();
    for other in app_drivers.values().flatten() {
        let Some(name) = other.node_name.as_deref() else {
            continue;
        };
        let same = other.uid != driver.uid && spark::same_application(driver, other).is_some();
        if same && !other.is_terminal() && name != node && !nodes.contains(&name) {
            nodes.push(name);
        }
    }
    nodes
}

/// What [`partition_inputs`] reads of a scan: its node and time, the pods bound to the node, and
/// whether the kubelet set up the drivers' configuration volumes
/// ([`PodsSnapshot::conf_mounts`]).
#[derive(Debug, Clone, Copy)]
pub struct PodsAt<'a> {
    pub node: &'a str,
    /// Unix seconds.
    pub now: i64,
    /// The snapshot's pods part: the pods and their drivers' configuration volumes.
    pub pods: &'a PodsSnapshot,
}

impl<'a> PodsAt<'a> {
    /// The pods of `snapshot`, on its node, at its time.
    pub fn of(snapshot: &'a NodeSnapshot) -> Self {
        PodsAt {
            node: &snapshot.node,
            now: snapshot.taken_at,
            pods: &snapshot.pods,
        }
    }
}

/// Reads through `dir` the Events and nodes `driver-blocked-by-partition` needs for the drivers
/// among the scan's pods (on its node, at its time), the Events of the pods with
/// ResourceClaims when the node holds prepared claims, the ResourceClaims `claims` names, and the Events of the
/// drivers whose configuration volume the kubelet did not set up (see the module documentation
/// for what is read and when).
pub async fn partition_inputs<D: PodDirectory>(
    dir: &D,
    at: PodsAt<'_>,
    app_drivers: &BTreeMap<String, Vec<Arc<PodInfo>>>,
    claims: &nodemedic_rules::facts::ClaimsToAsk,
) -> PartitionInputs {
    let (pods, node, now) = (&at.pods.bound, at.node, at.now);
    let mut out = PartitionInputs::default();
    for key in &claims.names {
        let Some((namespace, name)) = key.split_once('/') else {
            continue;
        };
        let object = match dir.resource_claim(namespace, name).await {
            Ok(Some(uid)) => ClaimObject::Exists { uid },
            Ok(None) => ClaimObject::Gone,
            Err(e) => ClaimObject::Unknown { reason: e.to_string() },
        };
        out.resource_claims.insert(key.clone(), object);
    }
    if claims.prepared {
        for pod in waiting_for_claims(pods, node, now) {
            out.read_events(dir, pod).await;
        }
    }
    for driver in waiting_drivers(pods, node, now) {
        let others = other_nodes(driver, app_drivers, node);
        if others.is_empty() {
            continue;
        }
        let mut suspect = false;
        for name in others {
            if let Some(known) = out.nodes.get(name) {
                suspect |= known.ready.as_deref() != Some("True");
                continue;
            }
            if out.nodes_failed.contains_key(name) {
                suspect = true;
                continue;
            }
            match dir.node(name).await {
                Ok(Some(status)) => {
                    suspect |= status.ready.as_deref() != Some("True");
                    out.nodes.insert(name.to_string(), status);
                }
                // A deleted node's pods are removed by the pod garbage collector.
                Ok(None) => {}
                Err(e) => {
                    suspect = true;
                    out.nodes_failed.insert(name.to_string(), e.to_string());
                }
            }
        }
        if suspect {
            out.read_events(dir, driver).await;
        }
    }
    unconfigured_driver_events(dir, pods, &at.pods.conf_mounts, node, &mut out).await;
    out
}

/// Reads into `out` the Warning Events of the drivers on `node` among `pods` whose
/// configuration volume the kubelet did not set up (`conf_mounts` says `Missing`), oldest
/// first, at most [`MAX_WAITING`], skipping those already read.
async fn unconfigured_driver_events<D: PodDirectory>(
    dir: &D,
    pods: &[PodInfo],
    conf_mounts: &BTreeMap<String, nodemedic_rules::snapshot::ConfMount>,
    node: &str,
    out: &mut PartitionInputs,
) {
    use nodemedic_rules::snapshot::ConfMount;
    let mut waiting: Vec<&PodInfo> = pods
        .iter()
        .filter(|p| spark::driver_waits_to_start(p, node))
        .filter(|p| matches!(conf_mounts.get(&p.uid), Some(ConfMount::Missing { .. })))
        .collect();
    waiting.sort_by_key(|p| (p.created_at, p.uid.clone()));
    waiting.truncate(MAX_WAITING);
    for driver in waiting {
        out.read_events(dir, driver).await;
    }
}

impl PartitionInputs {
    /// Reads `pod`'s Warning Events once: into `pod_events`, or why not into `events_failed`.
    async fn read_events<D: PodDirectory>(&mut self, dir: &D, pod: &PodInfo) {
        if self.pod_events.contains_key(&pod.uid) || self.events_failed.contains_key(&pod.uid) {
            return;
        }
        match dir.pod_events(&pod.namespace, &pod.uid).await {
            Ok(events) => {
                self.pod_events.insert(pod.uid.clone(), events);
            }
            Err(e) => {
                self.events_failed.insert(pod.uid.clone(), e.to_string());
            }
        }
    }

    /// Fills in what could not be read with the answers of `previous` (the last pass), where it
    /// has them: a failed read does not make a finding disappear.
    pub fn keep_last_good(&mut self, previous: &PartitionInputs) {
        for uid in self.events_failed.keys() {
            if let Some(events) = previous.pod_events.get(uid) {
                self.pod_events.insert(uid.clone(), events.clone());
            }
        }
        for name in self.nodes_failed.keys() {
            if let Some(status) = previous.nodes.get(name) {
                self.nodes.insert(name.clone(), status.clone());
            }
        }
        for (key, object) in self.resource_claims.iter_mut() {
            if let (ClaimObject::Unknown { .. }, Some(known)) = (&*object, previous.resource_claims.get(key)) {
                if !matches!(known, ClaimObject::Unknown { .. }) {
                    *object = known.clone();
                }
            }
        }
    }

    /// Whether a lookup failed for the API server's reason (not a spent budget).
    pub fn failed(&self) -> bool {
        let limited = LookupError::RateLimited.to_string();
        self.events_failed
            .values()
            .chain(self.nodes_failed.values())
            .any(|why| *why != limited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spark::ListDirectory;
    use crate::spark::network::Cidr;
    use futures::executor::block_on;
    use nodemedic_rules::snapshot::{ContainerInfo, OwnerRef};
    use std::sync::Mutex;

    const NOW: i64 = 1_700_000_000;

    /// node-a at [`NOW`] with `pods`.
    fn snapshot(pods: &[PodInfo]) -> NodeSnapshot {
        let mut s = NodeSnapshot::empty("node-a", NOW);
        s.pods.bound = pods.to_vec();
        s
    }

    fn driver(uid: &str, node: &str, phase: &str, age: i64) -> PodInfo {
        let mut p = PodInfo {
            uid: uid.into(),
            namespace: "spark-jobs".into(),
            name: format!("etl-{uid}"),
            node_name: Some(node.into()),
            phase: phase.into(),
            created_at: Some(NOW - age),
            containers: vec![ContainerInfo {
                name: "spark-kubernetes-driver".into(),
                state: Some(if phase == "Running" { "running" } else { "waiting" }.into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        p.labels.insert("spark-role".into(), "driver".into());
        p.labels.insert("spark-app-selector".into(), "spark-1".into());
        p
    }

    /// Answers nodes and events from maps, recording what was asked.
    #[derive(Default)]
    struct Cluster {
        nodes: BTreeMap<String, NodeStatus>,
        events: BTreeMap<String, Vec<PodEvent>>,
        failing_nodes: Vec<String>,
        asked: Mutex<Vec<String>>,
    }

    impl PodDirectory for Cluster {
        async fn get(&self, ns: &str, name: &str) -> Result<Option<Arc<PodInfo>>, LookupError> {
            ListDirectory::default().get(ns, name).await
        }
        async fn list(&self, _: Option<&str>, _: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
            Ok(vec![])
        }
        async fn by_ip(&self, _: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
            Ok(vec![])
        }
        async fn pod_networks(&self) -> Result<Vec<Cidr>, LookupError> {
            Ok(vec![])
        }
        async fn pod_events(&self, _: &str, uid: &str) -> Result<Vec<PodEvent>, LookupError> {
            self.asked.lock().unwrap().push(format!("events {uid}"));
            Ok(self.events.get(uid).cloned().unwrap_or_default())
        }
        async fn node(&self, name: &str) -> Result<Option<NodeStatus>, LookupError> {
            self.asked.lock().unwrap().push(format!("node {name}"));
            if self.failing_nodes.iter().any(|n| n == name) {
                return Err(LookupError::Failed(format!("GET nodes/{name}: HTTP 503")));
            }
            Ok(self.nodes.get(name).cloned())
        }
    }

    fn status(name: &str, ready: &str) -> NodeStatus {
        NodeStatus {
            name: name.into(),
            ready: Some(ready.into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_waiting_drivers_with_a_sibling_on_a_suspect_node_cost_an_event_list() {
        let waiting = driver("new", "node-a", "Pending", 120);
        let young = driver("young", "node-a", "Pending", 5);
        let mut pulling = driver("pulling", "node-a", "Pending", 600);
        pulling.labels.insert("spark-app-selector".into(), "spark-2".into());
        let running = driver("running", "node-a", "Running", 600);
        let old = driver("old", "worker-2", "Running", 3600);
        let shared = |pods: &[&PodInfo]| pods.iter().map(|p| Arc::new((*p).clone())).collect::<Vec<_>>();
        let app_drivers: BTreeMap<String, Vec<Arc<PodInfo>>> = [
            ("spark-1".to_string(), shared(&[&waiting, &young, &running, &old])),
            ("spark-2".to_string(), shared(&[&pulling])),
        ]
        .into();
        let pods = [waiting, young, pulling, running];
        let mut cluster = Cluster::default();
        cluster.nodes.insert("worker-2".into(), status("worker-2", "Unknown"));
        cluster.events.insert("new".into(), vec![PodEvent::default()]);
        let got = block_on(partition_inputs(
            &cluster,
            PodsAt::of(&snapshot(&pods)),
            &app_drivers,
            &Default::default(),
        ));
        assert_eq!(*cluster.asked.lock().unwrap(), ["node worker-2", "events new"]);
        assert_eq!(got.pod_events.keys().collect::<Vec<_>>(), ["new"]);
        assert_eq!(got.nodes["worker-2"].ready.as_deref(), Some("Unknown"));
        assert!(!got.failed());

        // The other node is Ready: no Events are read.
        cluster.nodes.insert("worker-2".into(), status("worker-2", "True"));
        cluster.asked.lock().unwrap().clear();
        let got = block_on(partition_inputs(
            &cluster,
            PodsAt::of(&snapshot(&pods)),
            &app_drivers,
            &Default::default(),
        ));
        assert_eq!(*cluster.asked.lock().unwrap(), ["node worker-2"]);
        assert!(got.pod_events.is_empty());
    }

    #[test]
    fn the_events_of_drivers_whose_conf_volume_is_missing_are_read_alone() {
        use nodemedic_rules::snapshot::ConfMount;
        // No other driver of their applications anywhere: no node and no partition Events.
        let pods = [
            driver("unconfigured", "node-a", "Pending", 600),
            driver("mounted", "node-a", "Pending", 600),
            driver("elsewhere", "worker-2", "Pending", 600),
        ];
        let mut snap = snapshot(&pods);
        for uid in ["unconfigured", "elsewhere"] {
            snap.pods.conf_mounts.insert(
                uid.into(),
                ConfMount::Missing {
                    path: format!("/var/lib/kubelet/pods/{uid}"),
                },
            );
        }
        snap.pods
            .conf_mounts
            .insert("mounted".into(), ConfMount::Mounted { path: "/m".into() });
        let mut cluster = Cluster::default();
        cluster.events.insert("unconfigured".into(), vec![PodEvent::default()]);
        let got = block_on(partition_inputs(
            &cluster,
            PodsAt::of(&snap),
            &BTreeMap::new(),
            &Default::default(),
        ));
        assert_eq!(*cluster.asked.lock().unwrap(), ["events unconfigured"]);
        assert_eq!(got.pod_events.keys().collect::<Vec<_>>(), ["unconfigured"]);
    }

    #[test]
    fn a_job_ties_drivers_and_a_failed_read_keeps_the_last_answer() {
        let job = OwnerRef {
            kind: "Job".into(),
            name: "etl".into(),
            uid: "j1".into(),
            controller: true,
        };
        let mut new = driver("new", "node-a", "Pending", 120);
        let mut old = driver("old", "worker-2", "Running", 3600);
        for p in [&mut new, &mut old] {
            p.labels.remove("spark-app-selector");
            p.owner_refs.push(job.clone());
        }
        let app_drivers: BTreeMap<String, Vec<Arc<PodInfo>>> =
            [("job:j1".to_string(), vec![Arc::new(new.clone()), Arc::new(old)])].into();
        let mut cluster = Cluster::default();
        cluster.nodes.insert("worker-2".into(), status("worker-2", "Unknown"));
        let pods = [new];
        let good = block_on(partition_inputs(
            &cluster,
            PodsAt::of(&snapshot(&pods)),
            &app_drivers,
            &Default::default(),
        ));
        assert!(good.nodes.contains_key("worker-2") && good.pod_events.contains_key("new"));

        cluster.failing_nodes.push("worker-2".into());
        let mut failed = block_on(partition_inputs(
            &cluster,
            PodsAt::of(&snapshot(&pods)),
            &app_drivers,
            &Default::default(),
        ));
        assert!(failed.failed());
        assert!(failed.nodes_failed["worker-2"].contains("HTTP 503"));
        // Unknown is suspect: the Events are still read.
        assert!(failed.pod_events.contains_key("new"));
        failed.keep_last_good(&good);
        assert_eq!(failed.nodes["worker-2"], good.nodes["worker-2"]);
    }

    #[test]
    fn at_most_a_few_waiting_drivers_are_looked_into() {
        let pods: Vec<PodInfo> = (0..20)
            .map(|i| driver(&format!("d{i:02}"), "node-a", "Pending", 1000 - i))
            .collect();
        let waiting = waiting_drivers(&pods, "node-a", NOW);
        assert_eq!(waiting.len(), MAX_WAITING);
        assert_eq!(waiting[0].uid, "d00", "oldest first");
        assert!(waiting_drivers(&pods, "node-b", NOW).is_empty());
    }
}
