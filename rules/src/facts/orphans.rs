//! Spark executors whose driver no longer needs them, and the local data they hold.

use crate::CpuSet;
use crate::checkpoint::EntryKey;
use crate::settings::Settings;
use crate::snapshot::{DriverLookup, LocalDir, LookupMethod, NodeSnapshot, Observed, PodInfo};
use crate::spark::{self, OPERATOR_SUBMISSION_ID, is_executor};
use crate::text::human_seconds;

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
    let (dirs, measured): (Vec<&LocalDir>, bool) = match &snap.host.local_dirs {
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
    let state = snap.host.checkpoint.ok()?.state.as_ref().ok()?;
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
    if let Some(role) = found.spark_role().filter(|r| *r != spark::SparkRole::Driver) {
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
    crate::facts::count("orphaned_executors");
    let mut out = Vec::new();
    for exec in snap.pods.bound.iter().filter(|p| is_executor(p) && !p.deleting) {
        let local = local_data(snap, exec);
        if exec.is_terminal() && !local.held() {
            continue;
        }
        let Some(lookup) = snap.api.lookups.drivers.get(&exec.uid) else {
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

/// Seconds until a driver that finished within `orphan_grace_seconds` has been finished for
/// longer (its executors here are orphans then, if they still run): `orphaned-executor` judges
/// again then.
pub fn orphan_grace_turn(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    snap.api
        .lookups
        .drivers
        .values()
        .filter_map(|lookup| match lookup {
            DriverLookup::Found { driver, .. } if driver.is_terminal() => driver.finished_at,
            _ => None,
        })
        // Within the grace while `taken_at - finished < grace`.
        .map(|finished| (finished + settings.orphan_grace_seconds - snap.taken_at) as f64)
        .filter(|left| *left > 0.0)
        .min_by(f64::total_cmp)
}
