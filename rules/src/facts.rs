//! The judgements several rules share, and that the agent's metrics and repairs act on.
//!
//! A rule turns these into findings; the agent counts them (`nodemedic_cpu_manager_stale_cpus`,
//! `nodemedic_admission_rejections_total`, `nodemedic_orphaned_executors`) and its repairs
//! delete or free exactly what they name, so all of them agree on what is stale, rejected or
//! orphaned:
//!
//! - stale checkpoint entries: [`StaleEntry`], [`stale_entries`], [`stale_entries_of`],
//!   [`stale_cpus`] (rule `stale-cpu-assignment`, also `exclusive-cpu-shortage`);
//! - pods the kubelet refused at admission: [`Rejection`], [`rejections`], [`rejected_reason`],
//!   [`rejected_for_cpus`], [`metric_reason`] (rules `admission-rejection`,
//!   `scheduler-conflict`, `exclusive-cpu-shortage`, `orphaned-local-dir`);
//! - Spark executors whose driver no longer needs them: [`Orphan`], [`orphaned_executors`]
//!   (rules `orphaned-executor`, `orphaned-local-dir`; `repair orphans`);
//! - Spark scratch dirs nothing will read again: [`OrphanedDirs`], [`orphaned_dirs`] (rule
//!   `orphaned-local-dir`; `repair local-dirs`).
//!
//! Each rule's module documentation says how its judgement is made and why.

use std::collections::BTreeMap;

use crate::CpuSet;
use crate::checkpoint::{CpuState, EntryKey};
use crate::settings::Settings;
use crate::snapshot::{DriverLookup, LocalDir, LookupMethod, NodeSnapshot, Observed, PodInfo, PodSource};
use crate::spark::{self, OPERATOR_SUBMISSION_ID, is_executor};
use crate::text::human_seconds;

/// The checkpoint's host path, or the default.
pub(crate) fn checkpoint_path(snapshot: &NodeSnapshot) -> String {
    match &snapshot.checkpoint {
        Observed::Ok(f) => f.path.clone(),
        Observed::Missing { path } => path.clone(),
        _ => "/var/lib/kubelet/cpu_manager_state".to_string(),
    }
}

// Stale checkpoint entries (`stale-cpu-assignment`).

/// A checkpoint entry whose owner is not alive here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleEntry {
    /// The pod UID (known for V2/V3 entries, and V1 entries whose ID maps to a pod).
    pub pod_uid: Option<String>,
    /// The container name (`None` for a V3 pod-level entry or an unmapped V1 entry).
    pub container: Option<String>,
    /// The runtime container ID of a V1 entry.
    pub container_id: Option<String>,
    pub cpus: CpuSet,
    /// Why it is stale, for people.
    pub reason: String,
    /// The pod, when it is still in the pod list (finished, or the container left its spec).
    pub pod: Option<PodInfo>,
    /// Processes still in the pod's cgroup (`None`: no pod cgroup).
    pub cgroup_processes: Option<usize>,
}

enum Verdict {
    Alive,
    Stale(String, Option<Box<PodInfo>>),
    /// Cannot be judged with what we have.
    Unknown,
}

/// What the judges need besides the snapshot.
struct Clock {
    grace: f64,
    checkpoint_age: Option<f64>,
}

impl Clock {
    fn of(snap: &NodeSnapshot, settings: &Settings) -> Self {
        let checkpoint_age = snap.checkpoint.ok().and_then(|f| f.age_seconds);
        Clock {
            grace: settings.reconcile_grace(snap),
            checkpoint_age,
        }
    }

    /// Whether the kubelet may still be about to reconcile something that happened at `at`.
    fn too_recent(&self, snap: &NodeSnapshot, at: Option<i64>) -> bool {
        at.is_some_and(|t| ((snap.taken_at - t) as f64) < self.grace)
    }

    fn checkpoint_recent(&self) -> bool {
        self.checkpoint_age.is_some_and(|a| a < self.grace)
    }
}

fn judge_entry_pod(snap: &NodeSnapshot, clock: &Clock, uid: &str, container: Option<&str>) -> Verdict {
    match snap.pod_source {
        PodSource::Api | PodSource::File => match snap.pod(uid) {
            None => Verdict::Stale(format!("pod {uid} is not bound to node {}", snap.node), None),
            Some(p) if p.is_terminal() && clock.too_recent(snap, p.finished_at) => Verdict::Unknown,
            Some(p) if p.is_terminal() => Verdict::Stale(
                format!("pod {} has finished (phase {})", p.display(), p.phase),
                Some(Box::new(p.clone())),
            ),
            Some(p) => match container {
                Some(c) if !p.containers.iter().any(|x| x.name == c) => Verdict::Stale(
                    format!("container {c} is not in the spec of pod {}", p.display()),
                    Some(Box::new(p.clone())),
                ),
                _ => Verdict::Alive,
            },
        },
        PodSource::Cgroups => {
            let Observed::Ok(tree) = &snap.cgroups else {
                return Verdict::Unknown;
            };
            match tree.pod(uid) {
                None if clock.checkpoint_recent() => Verdict::Unknown,
                None => Verdict::Stale(format!("pod {uid} has no cgroup on this node"), None),
                Some(pc) if pc.process_count() == 0 => {
                    Verdict::Stale(format!("the cgroup of pod {uid} has no processes left"), None)
                }
                Some(_) => Verdict::Alive,
            }
        }
    }
}

fn judge_entry_container_id(snap: &NodeSnapshot, clock: &Clock, id: &str) -> Verdict {
    match snap.pod_source {
        PodSource::Api | PodSource::File => {
            let owner = snap
                .pods
                .iter()
                .find(|p| p.containers.iter().any(|c| c.container_id.as_deref() == Some(id)));
            match owner {
                Some(p) if !p.is_terminal() => Verdict::Alive,
                Some(p) if clock.too_recent(snap, p.finished_at) => Verdict::Unknown,
                Some(p) => Verdict::Stale(
                    format!("container {id} belongs to pod {}, which has finished", p.display()),
                    Some(Box::new(p.clone())),
                ),
                None => Verdict::Stale(format!("no pod on node {} runs container {id}", snap.node), None),
            }
        }
        PodSource::Cgroups => {
            let Observed::Ok(tree) = &snap.cgroups else {
                return Verdict::Unknown;
            };
            match tree.container(id) {
                Some((_, leaf)) if !leaf.processes.is_empty() => Verdict::Alive,
                Some(_) => Verdict::Stale(format!("container {id} has no processes left"), None),
                None if clock.checkpoint_recent() => Verdict::Unknown,
                None => Verdict::Stale(format!("container {id} has no cgroup on this node"), None),
            }
        }
    }
}

/// The stale entries of the checkpoint's state; empty when the checkpoint is unreadable or
/// liveness cannot be judged.
pub fn stale_entries(snap: &NodeSnapshot, settings: &Settings) -> Vec<StaleEntry> {
    let Observed::Ok(file) = &snap.checkpoint else {
        return vec![];
    };
    let Ok(cp) = &file.content else { return vec![] };
    let Ok(state) = cp.state() else { return vec![] };
    stale_entries_of(snap, settings, &state)
}

/// [`stale_entries`] for an already parsed state.
pub fn stale_entries_of(snap: &NodeSnapshot, settings: &Settings, state: &CpuState) -> Vec<StaleEntry> {
    let clock = Clock::of(snap, settings);
    let processes = |uid: Option<&str>| -> Option<usize> {
        let tree = snap.cgroups.ok()?;
        tree.pod(uid?).map(|p| p.process_count())
    };
    let mut out = Vec::new();
    for a in &state.assignments {
        let (pod_uid, container, container_id, verdict) = match &a.key {
            EntryKey::Container { pod_uid, container } => (
                Some(pod_uid.clone()),
                Some(container.clone()),
                None,
                judge_entry_pod(snap, &clock, pod_uid, Some(container)),
            ),
            EntryKey::ContainerId { container_id } => {
                let owner = snap.owner_of_container_id(container_id);
                let (uid, name) = owner.map_or((None, None), |(u, n)| (Some(u), n));
                (
                    uid,
                    name,
                    Some(container_id.clone()),
                    judge_entry_container_id(snap, &clock, container_id),
                )
            }
        };
        if let Verdict::Stale(reason, pod) = verdict {
            let pod = pod.map(|p| *p);
            out.push(StaleEntry {
                cgroup_processes: processes(pod_uid.as_deref()),
                pod_uid,
                container,
                container_id,
                cpus: a.cpus.clone(),
                reason,
                pod,
            });
        }
    }
    for (uid, cpus) in &state.pod_assignments {
        if let Verdict::Stale(reason, pod) = judge_entry_pod(snap, &clock, uid, None) {
            let pod = pod.map(|p| *p);
            out.push(StaleEntry {
                pod_uid: Some(uid.clone()),
                container: None,
                container_id: None,
                cpus: cpus.clone(),
                reason,
                pod,
                cgroup_processes: processes(Some(uid)),
            });
        }
    }
    out
}

/// CPUs held by stale entries (the `nodemedic_cpu_manager_stale_cpus` gauge).
pub fn stale_cpus(entries: &[StaleEntry]) -> CpuSet {
    entries.iter().fold(CpuSet::new(), |acc, e| acc.union(&e.cpus))
}

// Pods the kubelet refused at admission (`admission-rejection`).

/// Reasons only the kubelet's admission sets (besides `OutOf<resource>`): the predicate
/// admit handler's own reasons, the scheduler predicates it re-runs (current and pre-1.19
/// names), and the topology manager's.
const KUBELET_REASONS: &[&str] = &[
    "UnexpectedAdmissionError",
    "UnknownReason",
    "UnexpectedPredicateFailureType",
    "InvalidNodeInfo",
    "PodOSSelectorNodeLabelDoesNotMatch",
    "PodOSNotSupported",
    "InitContainerRestartPolicyForbidden",
    "SupplementalGroupsPolicyNotSupported",
    "NodeAffinity",
    "NodeName",
    "NodePorts",
    "TaintToleration",
    "MatchNodeSelector",
    "HostName",
    "PodFitsHostPorts",
    "TopologyAffinityError",
];

/// What `Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000`
/// says (the kubelet's `InsufficientResourceError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insufficient {
    /// `cpu`, `memory`, `pods`, `ephemeral-storage`, or an extended resource (`nvidia.com/gpu`).
    pub resource: String,
    /// What the pod asked for.
    pub requested: i64,
    /// What the pods the kubelet had admitted asked for.
    pub used: i64,
    /// The node's allocatable.
    pub capacity: i64,
}

impl Insufficient {
    /// The unit of the numbers: `millicores` (cpu), `bytes` (memory, ephemeral-storage,
    /// hugepages-*), `count` (pods and extended resources).
    pub fn unit(&self) -> &'static str {
        match self.resource.as_str() {
            "cpu" => "millicores",
            "memory" | "ephemeral-storage" => "bytes",
            r if r.starts_with("hugepages-") => "bytes",
            _ => "count",
        }
    }

    /// How much was missing: requested minus what was left.
    pub fn shortfall(&self) -> i64 {
        self.requested.saturating_sub(self.capacity.saturating_sub(self.used))
    }
}

/// Reads the kubelet's "not enough resource" message, in either form:
/// `Pod was rejected: Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000`
/// or the older `Pod Node didn't have enough resource: ...`.
pub fn parse_insufficient(message: &str) -> Option<Insufficient> {
    const MARK: &str = "Node didn't have enough resource: ";
    let (_, rest) = message.split_once(MARK)?;
    let mut parts = rest.splitn(4, ", ");
    let resource = parts.next()?.trim();
    let mut number = |name: &str| -> Option<i64> {
        let value = parts.next()?.trim().strip_prefix(name)?.trim_start();
        let end = value
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
            .map_or(value.len(), |(i, _)| i);
        value[..end].parse().ok()
    };
    let requested = number("requested:")?;
    let used = number("used:")?;
    let capacity = number("capacity:")?;
    (!resource.is_empty()).then(|| Insufficient {
        resource: resource.to_string(),
        requested,
        used,
        capacity,
    })
}

/// Whether `reason` is one the kubelet sets when it refuses a pod at admission.
pub fn is_rejection_reason(reason: &str) -> bool {
    (reason.len() > "OutOf".len() && reason.starts_with("OutOf")) || KUBELET_REASONS.contains(&reason)
}

/// A pod the kubelet refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection<'a> {
    pub pod: &'a PodInfo,
    /// `status.reason`.
    pub reason: &'a str,
    /// The numbers of an `OutOf*` message.
    pub insufficient: Option<Insufficient>,
}

/// Whether `pod` was refused by the kubelet: `Failed` with a kubelet admission reason, or
/// with any reason and a message starting `Pod was rejected: ` (other admit handlers).
pub fn rejected_reason(pod: &PodInfo) -> Option<&str> {
    if pod.phase != "Failed" {
        return None;
    }
    let reason = pod.reason.as_deref().filter(|r| !r.is_empty())?;
    let says_so = pod
        .message
        .as_deref()
        .is_some_and(|m| m.starts_with("Pod was rejected: "));
    (is_rejection_reason(reason) || says_so).then_some(reason)
}

/// A bounded label value for a rejection reason (`nodemedic_admission_rejections_total`): the
/// core `OutOf<resource>` reasons and the kubelet's own reasons as they are, any other
/// `OutOf<extended resource>` as `OutOfExtendedResource`, anything else as `Other`. A pod's
/// `status.reason` is free text its writer controls and must not become a label as is.
pub fn metric_reason(reason: &str) -> &str {
    match reason {
        "OutOfcpu" | "OutOfmemory" | "OutOfpods" | "OutOfephemeral-storage" => reason,
        r if r.starts_with("OutOf") => "OutOfExtendedResource",
        r if KUBELET_REASONS.contains(&r) => r,
        _ => "Other",
    }
}

/// Every rejected pod on this node, whatever its age, in pod list order.
pub fn rejections(snap: &NodeSnapshot) -> Vec<Rejection<'_>> {
    snap.pods
        .iter()
        .filter_map(|pod| {
            let reason = rejected_reason(pod)?;
            Some(Rejection {
                pod,
                reason,
                insufficient: pod.message.as_deref().and_then(parse_insufficient),
            })
        })
        .collect()
}

/// The rejections that count now: from the live API only pods created within
/// `rejection_window_seconds` (a pod with no creation time counts); from a file all.
pub(crate) fn recent_rejections<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Vec<Rejection<'a>> {
    let live = snap.pod_source == PodSource::Api;
    rejections(snap)
        .into_iter()
        .filter(|r| {
            !live
                || r.pod
                    .created_at
                    .is_none_or(|t| snap.taken_at - t <= settings.rejection_window_seconds)
        })
        .collect()
}

/// Whether a pod failed because the CPU manager had no CPUs for it.
pub fn rejected_for_cpus(pod: &PodInfo) -> bool {
    let message = pod.message.as_deref().unwrap_or("").to_ascii_lowercase();
    if message.contains("not enough cpus available") {
        return true;
    }
    pod.phase == "Failed" && pod.reason.as_deref() == Some("UnexpectedAdmissionError") && message.contains("cpu")
}

// Spark executors whose driver no longer needs them (`orphaned-executor`).

/// Why the driver no longer needs the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverState {
    /// No driver pod exists.
    Gone,
    /// The pod found in the driver's place is another pod (recreated, another application,
    /// another spark-operator run).
    Replaced,
    /// The driver pod has finished (`Succeeded` or `Failed`) for longer than the grace.
    Finished,
}

impl DriverState {
    /// `gone`, `replaced`, `finished`.
    pub fn as_str(self) -> &'static str {
        match self {
            DriverState::Gone => "gone",
            DriverState::Replaced => "replaced",
            DriverState::Finished => "finished",
        }
    }
}

/// An orphaned executor and what is known about its driver.
#[derive(Debug, Clone, PartialEq)]
pub struct Orphan<'a> {
    pub executor: &'a PodInfo,
    pub state: DriverState,
    /// How the driver was looked up (`None`: a replaced driver found by a lookup the
    /// snapshot does not name).
    pub lookup: Option<LookupMethod>,
    /// What was looked for when nothing was found (the lookup's `expected`).
    pub expected: Option<String>,
    /// The driver UID the executor belongs to, when known (its owner reference).
    pub expected_driver_uid: Option<String>,
    /// The pod found in the driver's place (finished, or another pod).
    pub found: Option<&'a PodInfo>,
    /// Seconds since the driver finished, when it did and the time is known.
    pub finished_seconds: Option<i64>,
    /// Why it is orphaned, for people.
    pub reason: String,
    /// Its scratch directories on this node and their bytes.
    pub local: LocalData<'a>,
    /// Exclusive CPUs the CPU manager checkpoint holds for it.
    pub exclusive_cpus: Option<CpuSet>,
}

/// A pod's Spark scratch data on this node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalData<'a> {
    /// Measured scratch dirs under its emptyDir volumes.
    pub dirs: Vec<&'a LocalDir>,
    pub bytes: u64,
    /// Its emptyDir `spark-local-dir-*` volume names.
    pub empty_dir_volumes: Vec<&'a str>,
    /// Whether the node's local dirs were measured (`local_dirs` read).
    pub measured: bool,
}

impl LocalData<'_> {
    /// Whether deleting the pod object would free disk: measured dirs, or (not measured) an
    /// emptyDir local dir volume.
    pub fn held(&self) -> bool {
        if self.measured {
            !self.dirs.is_empty()
        } else {
            !self.empty_dir_volumes.is_empty()
        }
    }
}

/// `pod`'s scratch data on this node.
fn local_data<'a>(snap: &'a NodeSnapshot, pod: &'a PodInfo) -> LocalData<'a> {
    let (dirs, measured): (Vec<&LocalDir>, bool) = match &snap.local_dirs {
        Observed::Ok(all) => (
            all.iter()
                .filter(|d| d.pod_uid.as_deref() == Some(pod.uid.as_str()))
                .collect(),
            true,
        ),
        _ => (Vec::new(), false),
    };
    LocalData {
        bytes: dirs.iter().map(|d| d.bytes).sum(),
        dirs,
        empty_dir_volumes: pod
            .local_dir_volumes
            .iter()
            .filter(|v| v.host_path.is_none())
            .map(|v| v.name.as_str())
            .collect(),
        measured,
    }
}

/// The exclusive CPUs the CPU manager checkpoint holds for `pod` (container, pod-level and
/// V1 container-id entries), when the checkpoint is readable and holds any.
fn exclusive_cpus(snap: &NodeSnapshot, pod: &PodInfo) -> Option<CpuSet> {
    let state = snap.checkpoint.ok()?.content.as_ref().ok()?.state().ok()?;
    let ids: Vec<&str> = pod
        .containers
        .iter()
        .filter_map(|c| c.container_id.as_deref())
        .collect();
    let mut cpus = CpuSet::new();
    for a in &state.assignments {
        let mine = match &a.key {
            EntryKey::Container { pod_uid, .. } => *pod_uid == pod.uid,
            EntryKey::ContainerId { container_id } => ids.contains(&container_id.as_str()),
        };
        if mine {
            cpus = cpus.union(&a.cpus);
        }
    }
    for (uid, set) in &state.pod_assignments {
        if *uid == pod.uid {
            cpus = cpus.union(set);
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// Whether `found` cannot be `executor`'s driver although the lookup led to it: it belongs to
/// another application, is not a driver, or is another spark-operator run. Only labels both
/// pods carry are compared (a client-mode driver in a notebook pod has no Spark labels).
fn not_its_driver(executor: &PodInfo, found: &PodInfo) -> Option<String> {
    let differs = |key: &str| match (executor.label(key), found.label(key)) {
        (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() && a != b => Some((a, b)),
        _ => None,
    };
    if let Some((_, theirs)) = differs(spark::APP_SELECTOR) {
        return Some(format!("pod {} belongs to application {theirs}", found.display()));
    }
    if let Some(role) = found.spark_role().filter(|r| *r != spark::DRIVER) {
        return Some(format!("pod {} is a Spark {role}, not a driver", found.display()));
    }
    if let Some((mine, theirs)) = differs(OPERATOR_SUBMISSION_ID) {
        return Some(format!(
            "driver {} is spark-operator run {theirs}; this executor is of run {mine}",
            found.display()
        ));
    }
    None
}

/// The orphaned executors on this node (the `nodemedic_orphaned_executors` gauge counts them).
pub fn orphaned_executors<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Vec<Orphan<'a>> {
    let mut out = Vec::new();
    for exec in snap.pods.iter().filter(|p| is_executor(p) && !p.deleting) {
        let local = local_data(snap, exec);
        if exec.is_terminal() && !local.held() {
            continue;
        }
        let Some(lookup) = snap.drivers.get(&exec.uid) else {
            continue;
        };
        let owner_uid = exec.owner_refs.iter().find(|o| o.kind == "Pod").map(|o| o.uid.clone());
        let mut orphan = Orphan {
            executor: exec,
            state: DriverState::Gone,
            lookup: None,
            expected: None,
            expected_driver_uid: owner_uid.clone(),
            found: None,
            finished_seconds: None,
            reason: String::new(),
            local,
            exclusive_cpus: None,
        };
        match lookup {
            DriverLookup::External { .. } | DriverLookup::Unknown { .. } => continue,
            DriverLookup::Gone { by, expected } => {
                orphan.lookup = Some(*by);
                orphan.expected = Some(expected.clone());
                orphan.reason = format!("no driver pod exists (looked for {expected})");
            }
            DriverLookup::Replaced { expected_uid, found } => {
                orphan.state = DriverState::Replaced;
                orphan.lookup = owner_uid.is_some().then_some(LookupMethod::OwnerReference);
                orphan.expected_driver_uid = Some(expected_uid.clone());
                orphan.found = Some(found.as_ref());
                orphan.reason = format!(
                    "driver {} was recreated: it now has UID {}, this executor belongs to UID {expected_uid}",
                    found.display(),
                    found.uid
                );
            }
            DriverLookup::Found { by, driver } => {
                orphan.lookup = Some(*by);
                orphan.found = Some(driver.as_ref());
                if let Some(why) = not_its_driver(exec, driver) {
                    orphan.state = DriverState::Replaced;
                    orphan.reason = why;
                } else if driver.is_terminal() {
                    let since = driver.finished_at.map(|t| (snap.taken_at - t).max(0));
                    if since.is_some_and(|s| s < settings.orphan_grace_seconds) {
                        continue;
                    }
                    orphan.state = DriverState::Finished;
                    orphan.finished_seconds = since;
                    orphan.reason = match since {
                        Some(s) => format!(
                            "driver {} finished ({}) {} ago",
                            driver.display(),
                            driver.phase,
                            human_seconds(s)
                        ),
                        None => format!("driver {} has finished ({})", driver.display(), driver.phase),
                    };
                } else {
                    continue;
                }
            }
        }
        orphan.exclusive_cpus = exclusive_cpus(snap, exec);
        out.push(orphan);
    }
    out
}

// Spark scratch dirs that nothing will read again (`orphaned-local-dir`).

/// Orphaned scratch dirs of one pod or one hostPath root.
#[derive(Debug, Clone, PartialEq)]
pub struct OrphanedDirs<'a> {
    /// The pod whose emptyDir holds them (`None`: a hostPath root).
    pub pod_uid: Option<&'a str>,
    /// That pod, when it is still in the pod list.
    pub pod: Option<&'a PodInfo>,
    /// The hostPath root they are under.
    pub host_root: Option<&'a str>,
    pub dirs: Vec<&'a LocalDir>,
    /// Why they are orphaned, for people.
    pub reason: String,
    /// Live pods that mount the hostPath root (the dirs predate them all).
    pub root_users: Vec<&'a PodInfo>,
}

impl OrphanedDirs<'_> {
    pub fn bytes(&self) -> u64 {
        self.dirs.iter().map(|d| d.bytes).sum()
    }
}

enum Owner {
    Alive,
    Dead(String),
    Unknown,
}

fn judge_dir_owner(snap: &NodeSnapshot, uid: &str) -> Owner {
    match snap.pod_source {
        PodSource::Api | PodSource::File => match snap.pod(uid) {
            None => Owner::Dead(format!("pod {uid} is not bound to node {} any more", snap.node)),
            Some(p) if p.deleting => Owner::Unknown,
            Some(p) if p.is_terminal() => Owner::Dead(format!("pod {} has finished ({})", p.display(), p.phase)),
            Some(_) => Owner::Alive,
        },
        PodSource::Cgroups => match &snap.cgroups {
            Observed::Ok(tree) => match tree.pod(uid) {
                Some(pc) if pc.process_count() > 0 => Owner::Alive,
                Some(_) => Owner::Dead(format!("the cgroup of pod {uid} has no processes left")),
                None => Owner::Dead(format!("pod {uid} has no cgroup on this node")),
            },
            _ => Owner::Unknown,
        },
    }
}

pub(crate) fn trim_slash(path: &str) -> &str {
    let t = path.trim_end_matches('/');
    if t.is_empty() { "/" } else { t }
}

/// Whether one of two host paths (without trailing slashes) contains the other: a pod that mounts
/// a parent or a child of a root may write into it.
fn overlaps(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        outer == "/"
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    within(a, b) || within(b, a)
}

/// The orphaned scratch dirs on this node, grouped by pod and by hostPath root.
pub fn orphaned_dirs<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Vec<OrphanedDirs<'a>> {
    let Observed::Ok(all) = &snap.local_dirs else {
        return vec![];
    };
    let idle = |d: &LocalDir| d.newest_mtime.map(|t| snap.taken_at - t);
    let old_enough = |d: &LocalDir| idle(d).is_none_or(|s| s >= settings.local_dir_min_age_seconds);

    let mut by_pod: BTreeMap<&str, Vec<&LocalDir>> = BTreeMap::new();
    let mut by_root: BTreeMap<&str, Vec<&LocalDir>> = BTreeMap::new();
    for d in all.iter().filter(|d| old_enough(d)) {
        match d.pod_uid.as_deref() {
            Some(uid) => by_pod.entry(uid).or_default().push(d),
            None => by_root.entry(trim_slash(&d.root)).or_default().push(d),
        }
    }

    let mut out = Vec::new();
    for (uid, dirs) in by_pod {
        if let Owner::Dead(reason) = judge_dir_owner(snap, uid) {
            out.push(OrphanedDirs {
                pod_uid: Some(uid),
                pod: snap.pod(uid),
                host_root: None,
                dirs,
                reason,
                root_users: vec![],
            });
        }
    }

    // Who mounts a hostPath root can only be read from a pod list.
    if snap.pod_source == PodSource::Cgroups {
        return out;
    }
    for (root, dirs) in by_root {
        let users: Vec<&PodInfo> = snap
            .pods
            .iter()
            .filter(|p| !p.is_terminal())
            .filter(|p| {
                p.local_dir_volumes
                    .iter()
                    .any(|v| v.host_path.as_deref().is_some_and(|h| overlaps(trim_slash(h), root)))
            })
            .collect();
        // A dir last written before every user was created cannot be theirs.
        let oldest_user = users.iter().map(|p| p.created_at).min().unwrap_or(Some(i64::MAX));
        let Some(oldest_user) = oldest_user else {
            continue; // a user with no creation time: cannot tell
        };
        let orphaned: Vec<&LocalDir> = dirs
            .into_iter()
            .filter(|d| d.newest_mtime.is_some_and(|t| t < oldest_user))
            .collect();
        if orphaned.is_empty() {
            continue;
        }
        let reason = if users.is_empty() {
            format!("no running pod on {} mounts {root} as a Spark local dir", snap.node)
        } else {
            format!(
                "last written before any of the {} running pod(s) that mount {root} was created",
                users.len()
            )
        };
        out.push(OrphanedDirs {
            pod_uid: None,
            pod: None,
            host_root: Some(root),
            dirs: orphaned,
            reason,
            root_users: users,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, spark_executor};

    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";

    #[test]
    fn stale_cpus_unions_entries() {
        let entries = vec![
            ("live", "app", "2-3"),
            ("gone", "app", "4-5"),
            ("done", "app", "6"),
            ("live", "old-sidecar", "7"),
        ];
        let snap = SnapshotBuilder::static_node("0-1", &entries).with_pod_list(&[]).build();
        assert_eq!(
            stale_cpus(&stale_entries(&snap, &Settings::default())).to_string(),
            "2-7"
        );
    }

    #[test]
    fn metric_reasons_are_bounded() {
        assert_eq!(metric_reason("OutOfcpu"), "OutOfcpu");
        assert_eq!(metric_reason("OutOfnvidia.com/gpu"), "OutOfExtendedResource");
        assert_eq!(metric_reason("UnexpectedAdmissionError"), "UnexpectedAdmissionError");
        assert_eq!(metric_reason("Qqre-anything-a-pod-writer-chose"), "Other");
    }

    #[test]
    fn parses_both_message_forms() {
        let want = Insufficient {
            resource: "cpu".into(),
            requested: 56033,
            used: 34036,
            capacity: 90000,
        };
        for msg in [
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
            "Pod Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
            "Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
        ] {
            assert_eq!(parse_insufficient(msg).as_ref(), Some(&want), "{msg}");
        }
        let gpu = parse_insufficient(
            "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 8, capacity: 8",
        )
        .unwrap();
        assert_eq!(
            (gpu.resource.as_str(), gpu.unit(), gpu.shortfall()),
            ("nvidia.com/gpu", "count", 1)
        );
        let mem = parse_insufficient(
            "Pod was rejected: Node didn't have enough resource: memory, requested: 17179869184, used: 120259084288, capacity: 132070244352",
        )
        .unwrap();
        assert_eq!((mem.unit(), mem.shortfall()), ("bytes", 5_368_709_120));
        assert_eq!(want.shortfall(), 56033 - (90000 - 34036));
        for bad in [
            "",
            "Pod was rejected: Predicate NodeAffinity failed",
            "Node didn't have enough resource: cpu, requested: x, used: 1, capacity: 2",
            "Node didn't have enough resource: cpu, requested: 1",
            "Node didn't have enough resource: , requested: 1, used: 1, capacity: 2",
        ] {
            assert_eq!(parse_insufficient(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn which_pods_are_rejections() {
        let cases = [
            ("Failed", Some("OutOfcpu"), None, true),
            ("Failed", Some("OutOfephemeral-storage"), None, true),
            ("Failed", Some("OutOfnvidia.com/gpu"), None, true),
            ("Failed", Some("UnexpectedAdmissionError"), None, true),
            (
                "Failed",
                Some("NodeAffinity"),
                Some("Pod was rejected: Predicate NodeAffinity failed"),
                true,
            ),
            (
                "Failed",
                Some("SysctlForbidden"),
                Some("Pod was rejected: forbidden sysctl"),
                true,
            ),
            (
                "Failed",
                Some("Evicted"),
                Some("The node was low on resource: memory."),
                false,
            ),
            ("Failed", Some("OutOf"), None, false),
            ("Failed", None, Some("Pod was rejected: x"), false),
            ("Failed", Some(""), None, false),
            ("Pending", Some("OutOfcpu"), None, false),
            ("Failed", Some("Error"), None, false),
        ];
        for (phase, reason, message, want) in cases {
            let mut p = spark_executor("u", APP, "etl", 1, phase);
            p.reason = reason.map(String::from);
            p.message = message.map(String::from);
            assert_eq!(rejected_reason(&p).is_some(), want, "{phase} {reason:?} {message:?}");
        }
    }

    #[test]
    fn host_paths_trim_and_overlap() {
        assert_eq!(trim_slash("///"), "/");
        for (a, b, want) in [
            ("/mnt/nvme0/spark", "/mnt/nvme0/spark", true),
            ("/mnt/nvme0", "/mnt/nvme0/spark", true),
            ("/mnt/nvme0/spark/exec-a", "/mnt/nvme0/spark", true),
            ("/", "/mnt/nvme0/spark", true),
            ("/mnt/nvme0/spark2", "/mnt/nvme0/spark", false),
            ("/mnt/nvme1", "/mnt/nvme0/spark", false),
        ] {
            assert_eq!(overlaps(a, b), want, "{a} {b}");
        }
    }
}
