//! Stale entries of the other resource managers' checkpoints: memory blocks, devices and DRA
//! claims held for pods that are not alive on this node.
//!
//! Liveness is the CPU rules' ([`judge_pod`]): the pod list when there is one, else the
//! kubelet's PodResources list, else the pod cgroups; each file's own age keeps an entry of a
//! pod admitted a moment ago from being judged before its cgroup exists. With the PodResources
//! list, entries are tied to the pods the kubelet lists (by name, not UID) through the UIDs the
//! agent learned, else by what the listed container holds: the same memory blocks or device
//! IDs.
//!
//! These managers clean up only when they allocate for a new pod (the memory manager's and the
//! device manager's `removeStaleState`/`UpdateAllocatedDevices` run from admission, never on a
//! timer): a node where nothing new is admitted keeps its stale entries, and the admission
//! that would clean them is the one that is refused first (docs/kubelet.md).

use std::collections::BTreeSet;

use crate::facts::{Verdict, judge_pod};
use crate::kubelet_view::{Holds, KubeletPod};
use crate::managers::devices::{Device, DeviceEntry};
use crate::managers::drivers::DriverFormat;
use crate::managers::memory::{MemoryAssignment, MemoryBlock};
use crate::settings::Settings;
use crate::snapshot::{ClaimObject, NodeSnapshot, Observed, PodInfo};

/// An entry held for a pod that is not alive here.
#[derive(Debug, Clone, PartialEq)]
pub struct Stale<T> {
    /// The entry (a memory manager's pod-level entry, from 1.36 pod-level resources, is a
    /// [`MemoryAssignment`] with an empty container name).
    pub entry: T,
    /// Why it is stale, for people.
    pub reason: String,
    /// The pod, when it is still in the pod list (finished, or the container left its spec).
    pub pod: Option<PodInfo>,
    /// Why the pod's cgroups say something still runs although the pod list says it is gone.
    pub still_running: Option<String>,
}

fn stale<T>(snap: &NodeSnapshot, entry: T, uid: &str, verdict: Verdict) -> Option<Stale<T>> {
    let Verdict::Stale(reason, pod) = verdict else {
        return None;
    };
    let still_running = snap
        .host
        .cgroups
        .ok()
        .and_then(|t| t.pod(uid))
        .and_then(|p| p.alive_because());
    Some(Stale {
        entry,
        reason,
        pod: pod.map(|p| *p),
        still_running,
    })
}

fn same_blocks(listed: &[crate::kubelet_view::KubeletMemory], blocks: &[MemoryBlock]) -> bool {
    let mut a: Vec<(&str, u64, Vec<i64>)> = listed
        .iter()
        .map(|m| (m.resource.as_str(), m.bytes, m.numa_nodes.clone()))
        .collect();
    let mut b: Vec<(&str, u64, Vec<i64>)> = blocks
        .iter()
        .map(|m| {
            let mut nodes = m.numa_nodes.clone();
            nodes.sort_unstable();
            nodes.dedup();
            (m.resource.as_str(), m.bytes, nodes)
        })
        .collect();
    a.sort();
    b.sort();
    a == b
}

/// How a listed pod of unknown UID compares with a memory entry: a container of the same name
/// with the same blocks is the same pod; one of the same name with other blocks cannot be told
/// apart.
fn holds_memory(pod: &KubeletPod, entry: &MemoryAssignment) -> Holds {
    match pod.containers.iter().find(|c| c.name == entry.container) {
        Some(c) if same_blocks(&c.memory, &entry.blocks) => Holds::Same,
        Some(c) if !c.memory.is_empty() => Holds::Overlapping,
        _ => Holds::Unrelated,
    }
}

/// Memory manager entries (`memory_manager_state`) whose pod is not alive here. Empty when the
/// file is absent, unreadable or refused by its checksum (then `checkpoint-unreadable` speaks).
pub fn stale_memory(snap: &NodeSnapshot, settings: &Settings) -> Vec<Stale<MemoryAssignment>> {
    crate::facts::count("stale_memory");
    let Observed::Ok(file) = &snap.host.managers.memory else {
        return vec![];
    };
    let Some(state) = file.accepted_state() else {
        return vec![];
    };
    let pod_level = state.pod_assignments.iter().map(|(uid, blocks)| MemoryAssignment {
        pod_uid: uid.clone(),
        container: String::new(),
        blocks: blocks.clone(),
    });
    state
        .assignments
        .iter()
        .cloned()
        .chain(pod_level)
        .filter_map(|a| {
            let container = (!a.container.is_empty()).then_some(a.container.as_str());
            let verdict = judge_pod(snap, settings, file.age_seconds, &a.pod_uid, container, |v| {
                v.listed_by(&a.pod_uid, |p| holds_memory(p, &a))
            });
            let uid = a.pod_uid.clone();
            stale(snap, a, &uid, verdict)
        })
        .collect()
}

/// How a listed pod of unknown UID compares with a device entry: a container of the same name
/// holding exactly these devices of the resource is the same pod; any container holding one of
/// them (devices are exclusive) cannot be told apart.
fn holds_devices(pod: &KubeletPod, entry: &DeviceEntry) -> Holds {
    let mine: BTreeSet<&str> = entry.devices.iter().map(|d| d.id.as_str()).collect();
    fn listed<'c>(c: &'c crate::kubelet_view::KubeletContainer, resource: &str) -> BTreeSet<&'c str> {
        c.devices
            .iter()
            .filter(|d| d.resource == resource)
            .flat_map(|d| d.ids.iter().map(String::as_str))
            .collect()
    }
    if pod
        .containers
        .iter()
        .any(|c| c.name == entry.container && listed(c, &entry.resource) == mine)
    {
        return Holds::Same;
    }
    if pod
        .containers
        .iter()
        .any(|c| !listed(c, &entry.resource).is_disjoint(&mine))
    {
        Holds::Overlapping
    } else {
        Holds::Unrelated
    }
}

/// Device manager entries (`kubelet_internal_checkpoint`) whose pod is not alive here. The
/// kubelet reads a file whose checksum does not match as empty and goes on, so only an accepted
/// file's entries count.
pub fn stale_devices(snap: &NodeSnapshot, settings: &Settings) -> Vec<Stale<DeviceEntry>> {
    crate::facts::count("stale_devices");
    let Observed::Ok(file) = &snap.host.managers.devices else {
        return vec![];
    };
    let Some(state) = file.accepted_state() else {
        return vec![];
    };
    state
        .entries
        .iter()
        .filter(|e| !e.devices.is_empty())
        .filter_map(|e| {
            let verdict = judge_pod(snap, settings, file.age_seconds, &e.pod_uid, Some(&e.container), |v| {
                v.listed_by(&e.pod_uid, |p| holds_devices(p, e))
            });
            stale(snap, e.clone(), &e.pod_uid, verdict)
        })
        .collect()
}

/// Where a prepared claim is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimSource<'a> {
    /// The kubelet's `dra_manager_state`.
    Kubelet,
    /// A DRA driver's own checkpoint (format, host path).
    Driver(DriverFormat, &'a str),
}

impl ClaimSource<'_> {
    /// The checkpoint's host path.
    pub fn path(&self, snap: &NodeSnapshot) -> String {
        match self {
            ClaimSource::Kubelet => match &snap.host.managers.dra {
                Observed::Ok(f) => f.path.clone(),
                Observed::Missing { path } => path.clone(),
                _ => "/var/lib/kubelet/dra_manager_state".to_string(),
            },
            ClaimSource::Driver(_, path) => (*path).to_string(),
        }
    }

    /// The DRA driver whose devices these are (`None` for the kubelet's file, which holds
    /// every driver's).
    pub fn driver(&self) -> Option<&'static str> {
        match self {
            ClaimSource::Kubelet => None,
            ClaimSource::Driver(format, _) => Some(format.driver()),
        }
    }
}

/// A prepared ResourceClaim whose pods are all gone from this node.
#[derive(Debug, Clone, PartialEq)]
pub struct StaleClaim<'a> {
    pub source: ClaimSource<'a>,
    pub claim_uid: String,
    /// `namespace/name` when the checkpoint records it.
    pub claim: Option<String>,
    /// The driver's state for it (`PrepareCompleted`, ...), for drivers' checkpoints.
    pub state: Option<String>,
    /// The pods it was prepared for.
    pub pod_uids: Vec<String>,
    /// Its devices: `driver/pool/device` for the kubelet's file, the driver's names for a
    /// driver's.
    pub devices: Vec<String>,
    /// Why it is stale, for people.
    pub reason: String,
    /// Its ResourceClaim as the API server shows it, when asked.
    pub object: Option<ClaimObject>,
}

impl StaleClaim<'_> {
    /// What the API server said of its ResourceClaim, for people (`None` when not asked).
    pub fn object_said(&self) -> Option<String> {
        let name = self.claim.as_deref()?;
        Some(match self.object.as_ref()? {
            ClaimObject::Gone => format!("its ResourceClaim {name} is gone too"),
            ClaimObject::Exists { uid } if *uid == self.claim_uid => {
                format!("its ResourceClaim {name} still exists")
            }
            ClaimObject::Exists { uid } => {
                format!("ResourceClaim {name} is another object now (UID {uid}): recreated under the same name")
            }
            ClaimObject::Unknown { reason } => format!("its ResourceClaim {name} could not be read: {reason}"),
        })
    }

    /// Whether the claim's own ResourceClaim object still exists (not a new one of its name).
    pub fn object_exists(&self) -> bool {
        matches!(&self.object, Some(ClaimObject::Exists { uid }) if *uid == self.claim_uid)
    }
}

/// The API server's answer for the ResourceClaim `namespace/name`, when asked.
fn claim_object(snap: &NodeSnapshot, claim: Option<&str>) -> Option<ClaimObject> {
    snap.api.lookups.resource_claims.get(claim?).cloned()
}

/// Judges a claim by its pods: stale when none is alive and each is known to be gone.
fn claim_verdict(
    snap: &NodeSnapshot,
    settings: &Settings,
    file_age: Option<f64>,
    pod_uids: &[String],
) -> Option<String> {
    let mut reasons = Vec::with_capacity(pod_uids.len());
    for uid in pod_uids {
        // A pod of unknown UID in the kubelet's list could be any claim's.
        match judge_pod(snap, settings, file_age, uid, None, |v| {
            v.listed_by(uid, |_| Holds::Overlapping)
        }) {
            Verdict::Stale(reason, _) => reasons.push(reason),
            Verdict::Alive | Verdict::Unknown => return None,
        }
    }
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// Prepared claims whose pods are all gone: the kubelet's (`dra_manager_state`) and the
/// configured drivers'. A driver's claim with no pod recorded is the kubelet's to judge while
/// the kubelet's file holds it; otherwise it is stale when that file (readable and old enough)
/// no longer holds it, since the kubelet will never ask the driver to unprepare a claim it
/// forgot, or when the API server says its ResourceClaim is gone (or another object now).
pub fn stale_claims<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Vec<StaleClaim<'a>> {
    crate::facts::count("stale_claims");
    let mut out = Vec::new();
    let kubelet_claims = match &snap.host.managers.dra {
        Observed::Ok(file) => file.accepted_state().map(|s| (s, file.age_seconds)),
        _ => None,
    };
    if let Some((state, age)) = kubelet_claims {
        for c in &state.claims {
            if let Some(reason) = claim_verdict(snap, settings, age, &c.pod_uids) {
                let claim = (!c.claim_name.is_empty()).then(|| format!("{}/{}", c.namespace, c.claim_name));
                out.push(StaleClaim {
                    source: ClaimSource::Kubelet,
                    claim_uid: c.claim_uid.clone(),
                    object: claim_object(snap, claim.as_deref()),
                    claim,
                    state: None,
                    pod_uids: c.pod_uids.clone(),
                    devices: c
                        .devices
                        .iter()
                        .map(|d| format!("{}/{}/{}", d.driver, d.pool, d.device))
                        .collect(),
                    reason,
                });
            }
        }
    }
    let grace = settings.reconcile_grace(snap);
    for file in &snap.host.managers.drivers {
        let Observed::Ok(claims) = &file.claims else { continue };
        for c in claims {
            let claim = match (&c.namespace, &c.claim_name) {
                (Some(ns), Some(name)) => Some(format!("{ns}/{name}")),
                _ => None,
            };
            let object = claim_object(snap, claim.as_deref());
            let object_gone = match &object {
                Some(ClaimObject::Gone) => true,
                Some(ClaimObject::Exists { uid }) => *uid != c.claim_uid,
                _ => false,
            };
            // A claim the kubelet holds is the kubelet's to judge (its pods are in its file).
            let held_by_kubelet =
                kubelet_claims.is_some_and(|(s, _)| s.claims.iter().any(|k| k.claim_uid == c.claim_uid));
            let reason = if c.pod_uids.is_empty() && held_by_kubelet {
                None
            } else if c.pod_uids.is_empty() && object_gone && file.age_seconds.is_some_and(|a| a >= grace) {
                Some(format!(
                    "no pod is recorded for it and its ResourceClaim {} is gone",
                    claim.as_deref().unwrap_or_default()
                ))
            } else if c.pod_uids.is_empty() {
                match kubelet_claims {
                    Some((state, age))
                        if age.is_some_and(|a| a >= grace)
                            && file.age_seconds.is_some_and(|a| a >= grace)
                            && !state.claims.iter().any(|k| k.claim_uid == c.claim_uid) =>
                    {
                        Some(format!(
                            "no pod is recorded for it and the kubelet's {} holds no claim {}",
                            ClaimSource::Kubelet.path(snap),
                            c.claim_uid
                        ))
                    }
                    _ => None,
                }
            } else {
                claim_verdict(snap, settings, file.age_seconds, &c.pod_uids)
            };
            if let Some(reason) = reason {
                out.push(StaleClaim {
                    source: ClaimSource::Driver(file.format, &file.path),
                    claim_uid: c.claim_uid.clone(),
                    claim: claim.clone(),
                    object: object.clone(),
                    state: (!c.state.is_empty()).then(|| c.state.clone()),
                    pod_uids: c.pod_uids.clone(),
                    devices: c.devices.clone(),
                    reason,
                });
            }
        }
    }
    out
}

/// The most ResourceClaims [`claims_to_ask`] names per pass.
pub const CLAIMS_ASKED: usize = 20;

/// What the API is asked about DRA claims for `stale-dra-claim` ([`claims_to_ask`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimsToAsk {
    /// The node holds prepared claims: the Events of its pods that wait for claims are read.
    pub prepared: bool,
    /// The ResourceClaims (`namespace/name`) whose objects are read.
    pub names: Vec<String>,
}

/// What the API is asked about claims: whether the node holds prepared claims, and the
/// ResourceClaims (`namespace/name`) whose objects `stale-dra-claim` reads: those of the
/// stale claims, and of the drivers' claims with no pod recorded (gone objects make them
/// stale); at most [`CLAIMS_ASKED`], sorted. `stale` is [`crate::facts::Facts::stale_claims`].
pub fn claims_to_ask(snap: &NodeSnapshot, stale: &[StaleClaim]) -> ClaimsToAsk {
    let mut names: Vec<String> = stale.iter().filter_map(|c| c.claim.clone()).collect();
    for file in &snap.host.managers.drivers {
        let Observed::Ok(claims) = &file.claims else { continue };
        names.extend(
            claims
                .iter()
                .filter(|c| c.pod_uids.is_empty())
                .filter_map(|c| Some(format!("{}/{}", c.namespace.as_deref()?, c.claim_name.as_deref()?))),
        );
    }
    names.sort();
    names.dedup();
    names.truncate(CLAIMS_ASKED);
    ClaimsToAsk {
        prepared: snap.host.managers.holds_prepared_claims(),
        names,
    }
}

/// Memory held by stale entries, by (NUMA nodes of the block, resource): bytes.
pub fn stale_memory_bytes(stale: &[Stale<MemoryAssignment>]) -> Vec<((Vec<i64>, String), u64)> {
    let mut sums: std::collections::BTreeMap<(Vec<i64>, String), u64> = Default::default();
    for s in stale {
        for b in &s.entry.blocks {
            let e = sums.entry((b.numa_nodes.clone(), b.resource.clone())).or_default();
            *e = e.saturating_add(b.bytes);
        }
    }
    sums.into_iter().collect()
}

/// The device IDs of stale entries, by resource.
pub fn stale_device_ids(stale: &[Stale<DeviceEntry>]) -> std::collections::BTreeMap<&str, Vec<&Device>> {
    let mut by: std::collections::BTreeMap<&str, Vec<&Device>> = Default::default();
    for s in stale {
        by.entry(s.entry.resource.as_str())
            .or_default()
            .extend(s.entry.devices.iter());
    }
    by
}
