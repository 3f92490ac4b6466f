//! Spark drivers that spark-submit left half made.
//!
//! spark-submit (Spark 3.x, `Client.run` in apache/spark `KubernetesClientApplication.scala`)
//! creates the driver pod first and applies the driver's ConfigMap (`spark-drv-<id>-conf-map`,
//! mounted as volume `spark-conf-volume-driver`) and Service only once the create has returned.
//! When the create outlives the client's request timeout, spark-submit gives up (after its
//! retries), but the API server still finishes the create: the pod exists, bound to a node,
//! without its ConfigMap. The kubelet cannot set up the volume (`MountVolume.SetUp failed ...
//! configmap "..." not found`) and the pod waits in `ContainerCreating` forever, holding its
//! requests (and, when Guaranteed, its exclusive CPUs, allocated at admission).
//!
//! A driver is judged half-submitted when it is bound to this node, waits to start
//! ([`crate::spark::driver_waits_to_start`]) for longer than `half_submitted_grace_seconds`
//! (since it was bound, else since it was created), and either
//! - its configuration volume never appeared under its kubelet directory on this node although
//!   the kubelet made that directory (node-local evidence: no ConfigMap is read, they can hold
//!   credentials), or
//! - a newer driver of the same submission did start: the same `spark-app-selector`, or the
//!   same `spark-app-name` created within [`SIBLING_WINDOW_SECONDS`] after it (the user, or a
//!   workflow's retry, submitted again and that one ran).

use crate::checkpoint::EntryKey;
use crate::cpuset::CpuSet;
use crate::settings::Settings;
use crate::snapshot::{ConfMount, ConfVolume, NodeSnapshot, Observed, PodEvent, PodInfo, PodPhase};
use crate::spark::{self, APP_NAME, APP_SELECTOR, driver_waits_to_start, non_empty_label};

/// A newer driver with the same `spark-app-name` counts as a resubmission when it was created
/// within this many seconds after the waiting one.
pub const SIBLING_WINDOW_SECONDS: i64 = 3600;

/// A newer driver of the same submission that started.
#[derive(Debug, Clone, PartialEq)]
pub struct Sibling<'a> {
    pub pod: &'a PodInfo,
    /// What ties them: [`APP_SELECTOR`] or [`APP_NAME`].
    pub tie: &'static str,
}

/// A driver pod spark-submit left half made (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct HalfSubmitted<'a> {
    pub pod: &'a PodInfo,
    /// How long it has waited to start, seconds.
    pub waited_seconds: i64,
    /// Its configuration volume, from its spec.
    pub conf_volume: Option<&'a ConfVolume>,
    /// The kubelet directory where that volume should be and is not, when that is the evidence.
    pub missing_volume_path: Option<&'a str>,
    /// The newer driver that started, when that is (also) the evidence.
    pub sibling: Option<Sibling<'a>>,
    /// The kubelet's `FailedMount` Warnings about its configuration volume, when read.
    pub mount_events: Vec<&'a PodEvent>,
    /// The exclusive CPUs the CPU manager gave its containers at admission.
    pub exclusive_cpus: CpuSet,
    /// One line for people: why it is judged half-submitted.
    pub reason: String,
}

/// Whether a driver pod's containers got as far as running.
fn started(p: &PodInfo) -> bool {
    matches!(p.phase, PodPhase::Running | PodPhase::Succeeded)
        || p.containers
            .iter()
            .any(|c| matches!(c.state.as_deref(), Some("running" | "terminated")))
}

/// The newest started driver of the same submission as `pod`, among the drivers the snapshot
/// knows (this node's, and every driver of the applications listed in `app_drivers`).
fn sibling<'a>(snap: &'a NodeSnapshot, pod: &PodInfo) -> Option<Sibling<'a>> {
    let created = pod.created_at?;
    let selector = non_empty_label(pod, APP_SELECTOR);
    let name = non_empty_label(pod, APP_NAME);
    let local = snap.pods.bound.iter().filter(|p| spark::is_driver(p));
    let mut best: Option<Sibling<'a>> = None;
    for other in snap
        .api
        .lookups
        .app_drivers
        .values()
        .flatten()
        .map(|d| &**d)
        .chain(local)
    {
        let Some(other_created) = other.created_at else {
            continue;
        };
        if other.uid == pod.uid || other.namespace != pod.namespace || other_created <= created || !started(other) {
            continue;
        }
        let tie = if selector.is_some() && non_empty_label(other, APP_SELECTOR) == selector {
            APP_SELECTOR
        } else if name.is_some()
            && non_empty_label(other, APP_NAME) == name
            && other_created - created <= SIBLING_WINDOW_SECONDS
        {
            APP_NAME
        } else {
            continue;
        };
        if best.as_ref().is_none_or(|b| b.pod.created_at < Some(other_created)) {
            best = Some(Sibling { pod: other, tie });
        }
    }
    best
}

/// The exclusive CPUs the CPU manager checkpoint gives `uid`'s containers.
fn exclusive_cpus(snap: &NodeSnapshot, uid: &str) -> CpuSet {
    let Observed::Ok(file) = &snap.host.checkpoint else {
        return CpuSet::new();
    };
    let Ok(state) = &file.state else {
        return CpuSet::new();
    };
    state
        .assignments
        .iter()
        .filter(|a| matches!(&a.key, EntryKey::Container { pod_uid, .. } if pod_uid == uid))
        .fold(CpuSet::new(), |acc, a| acc.union(&a.cpus))
}

/// The Spark drivers that wait to start on this node, each with how long it has waited
/// (seconds since it was scheduled, else created); a driver with neither time is left out.
/// What `half-submitted-driver` judges, and what its clock deadline counts from.
pub fn waiting_drivers(snap: &NodeSnapshot) -> impl Iterator<Item = (&PodInfo, i64)> {
    snap.pods
        .bound
        .iter()
        .filter(|p| driver_waits_to_start(p, &snap.node))
        .filter_map(|p| Some((p, snap.taken_at - p.scheduled_at.or(p.created_at)?)))
}

/// The drivers on this node spark-submit left half made, oldest first.
pub fn half_submitted_drivers<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Vec<HalfSubmitted<'a>> {
    crate::facts::count("half_submitted_drivers");
    let mut out: Vec<HalfSubmitted<'a>> = Vec::new();
    for (pod, waited) in waiting_drivers(snap) {
        if waited < settings.half_submitted_grace_seconds {
            continue;
        }
        let missing_volume_path = match (pod.conf_volume.as_ref(), snap.pods.conf_mounts.get(&pod.uid)) {
            (Some(_), Some(ConfMount::Missing { path })) => Some(path.as_str()),
            _ => None,
        };
        let sibling = sibling(snap, pod);
        let reason = match (missing_volume_path, &sibling, pod.conf_volume.as_ref()) {
            (Some(_), Some(s), Some(v)) => format!(
                "its ConfigMap {} never came (volume {} is not set up on this node) and a newer driver of the same \
                 submission, {} (same {}), did start",
                v.config_map,
                v.volume,
                s.pod.display(),
                s.tie
            ),
            (Some(_), _, Some(v)) => format!(
                "its ConfigMap {} never came: volume {} is not set up on this node",
                v.config_map, v.volume
            ),
            (_, Some(s), _) => format!(
                "a newer driver of the same submission, {} (same {}), did start",
                s.pod.display(),
                s.tie
            ),
            _ => continue,
        };
        let mount_events = snap
            .api
            .lookups
            .pod_events
            .get(&pod.uid)
            .map(|events| {
                events
                    .iter()
                    .filter(|e| e.reason == "FailedMount")
                    .filter(|e| {
                        pod.conf_volume
                            .as_ref()
                            .is_some_and(|v| e.message.contains(&v.config_map) || e.message.contains(&v.volume))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(HalfSubmitted {
            pod,
            waited_seconds: waited,
            conf_volume: pod.conf_volume.as_ref(),
            missing_volume_path,
            sibling,
            mount_events,
            exclusive_cpus: exclusive_cpus(snap, &pod.uid),
            reason,
        });
    }
    out.sort_by(|a, b| {
        b.waited_seconds
            .cmp(&a.waited_seconds)
            .then_with(|| a.pod.uid.cmp(&b.pod.uid))
    });
    out
}
