//! The cpu-state plan: the stale entries, the new file, and every reason not to write it.

use std::path::{Path, PathBuf};

use nodemedic_rules::checkpoint::rewrite::{Target, rewrite};
use nodemedic_rules::checkpoint::{Checkpoint, CpuState, MAX_CHECKPOINT_BYTES};
use nodemedic_rules::facts::{StaleEntry, stale_entries_of};
use nodemedic_rules::snapshot::{CgroupTree, NodeSnapshot, Observed, PodInfo, PodSource};
use nodemedic_rules::validate::validate_static_state;
use nodemedic_rules::{CpuSet, Settings, Verification};

use super::Options;
use crate::collect;
use crate::collect::checkpoint::FILE_NAME;
use crate::collect::read::{ReadError, read_bytes};
use crate::host::HostPaths;
use crate::repair::command::RepairError;
use crate::repair::kubelet::{KubeletProcess, running_kubelet};
use crate::scan::{self, Pods};
use crate::spark::ListDirectory;

/// The entry a stale entry names.
pub(super) fn target_of_stale(e: &StaleEntry) -> Option<Target> {
    match (&e.container_id, &e.pod_uid, &e.container) {
        (Some(id), _, _) => Some(Target::ContainerId {
            container_id: id.clone(),
        }),
        (None, Some(uid), Some(c)) => Some(Target::Container {
            pod_uid: uid.clone(),
            container: c.clone(),
        }),
        (None, Some(uid), None) => Some(Target::Pod { pod_uid: uid.clone() }),
        (None, None, _) => None,
    }
}

/// A stale entry the plan removes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Removal {
    #[serde(flatten)]
    pub target: Target,
    /// The cpuset as written in the file.
    pub cpus: String,
    /// Why it is stale.
    pub reason: String,
    /// `namespace/name` when the pod is still in the pod list.
    pub pod: Option<String>,
    /// Host path of the pod's (or V1 container's) cgroup, when there is one.
    pub cgroup: Option<String>,
    /// Processes found in that cgroup's subtree (`collect::cgroups`; `None`: no cgroup).
    pub cgroup_processes: Option<usize>,
    /// Why something may still run in it (`None`: nothing does).
    pub still_running: Option<String>,
}

/// An entry the plan keeps as it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Kept {
    #[serde(flatten)]
    pub target: Target,
    /// The cpuset as written in the file, and as it will be written again.
    pub cpus: String,
}

/// What the kubelet's start-up checks (docs/kubelet.md, "Why a kubelet refuses to start") ran
/// against.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Checks {
    pub online_cpus: Option<String>,
    pub reserved_cpus: Option<String>,
    pub strict_cpu_reservation: bool,
    /// The kubelet's messages for each broken rule of the resulting state.
    pub problems: Vec<String>,
}

/// What the plan says to do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing is stale (or there is nothing to repair).
    NothingToDo { reason: String },
    /// The new file is ready to be written.
    Ready,
    /// It must not be written, for these reasons.
    Refused { reasons: Vec<String> },
}

/// A computed repair: everything [`apply`] needs, and everything the output shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    pub node: String,
    /// Local path of the checkpoint.
    #[serde(rename = "local_path")]
    pub checkpoint: PathBuf,
    /// The checkpoint's path as the host sees it.
    #[serde(rename = "checkpoint")]
    pub shown: String,
    /// The file's bytes when planned.
    #[serde(skip)]
    pub original: Vec<u8>,
    /// Permission bits of the file (shown in octal).
    #[serde(serialize_with = "octal")]
    pub mode: u32,
    #[serde(skip)]
    pub owner: (u32, u32),
    /// The file's layout by shape (`V1`, `V2`, `V3`, `V4`; `None`: unreadable).
    pub layout: Option<&'static str>,
    pub verification: Option<Verification>,
    pub policy: Option<String>,
    /// Where liveness came from.
    pub pod_source: PodSource,
    pub notes: Vec<String>,
    /// The kubelet process when planned (`None`: not running).
    pub kubelet: Option<KubeletProcess>,
    pub removals: Vec<Removal>,
    pub kept: Vec<Kept>,
    /// CPUs that go back to the default set.
    pub cpus_returned: String,
    /// CPUs of stale entries that a live entry also holds: they stay with it.
    pub cpus_withheld: String,
    /// `defaultCpuSet` as written now, and as it will be written.
    pub old_default: String,
    pub new_default: String,
    /// The bytes to write (empty when there is nothing to write).
    #[serde(skip)]
    pub new_bytes: Vec<u8>,
    /// Layout and checksum of the new file.
    pub new_layout: Option<&'static str>,
    pub new_checksum: Option<u64>,
    pub checks: Checks,
    /// The kubelet's own words for each of its start-up checks the file fails today: a kubelet
    /// that starts now refuses it (empty: the file is valid, or the checks could not run).
    pub current_file_problems: Vec<String>,
    /// The file is invalid today and the new file passes every check: this repair fixes it.
    pub fixes_current_file: bool,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The host and pods the plan judged with, for the re-check before the write.
    #[serde(skip)]
    pub(super) host: Option<HostPaths>,
    #[serde(skip)]
    pub(super) rescan: Option<Pods>,
    #[serde(skip)]
    pub(super) state: Option<CpuState>,
    /// The rule settings it judged with (the re-check judges with the same).
    #[serde(skip)]
    pub(super) settings: Settings,
}

fn octal<S: serde::Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:o}"))
}

impl Plan {
    /// Whether [`apply`] may act on it.
    pub fn ready(&self) -> bool {
        self.verdict == Verdict::Ready
    }
}

/// A file's bytes, permission bits and `(uid, gid)`.
type FileRead = (Vec<u8>, u32, (u32, u32));

/// Reads the checkpoint's bytes and attributes; `Ok(None)` when there is no file. The error
/// names `shown`, the file as the host sees it.
pub(super) fn read_file(path: &Path, shown: &str) -> Result<Option<FileRead>, ReadError> {
    use std::os::unix::fs::MetadataExt as _;
    let Some(bytes) = read_bytes(path, &shown, MAX_CHECKPOINT_BYTES)? else {
        return Ok(None);
    };
    let meta = std::fs::metadata(path).map_err(|source| ReadError::Io {
        path: shown.to_string(),
        source,
    })?;
    Ok(Some((bytes, meta.mode() & 0o7777, (meta.uid(), meta.gid()))))
}

/// Where liveness came from, in words.
pub(super) fn liveness_words(source: &PodSource) -> &'static str {
    match source {
        PodSource::Api => "the API's pod list",
        PodSource::File => "the pods file",
        PodSource::PodResources => "the kubelet's PodResources API",
        PodSource::Cgroups => "the cgroups",
    }
}

/// The cgroup of a stale entry, the processes found anywhere in it, and why something may
/// still run there (`None`: nothing does). It is the scan's own whole-subtree look
/// (`collect::cgroups`): processes at any depth, cgroup v2's `populated`, and a walk cut short
/// counting as alive.
pub(super) fn cgroup_of(tree: &CgroupTree, entry: &StaleEntry) -> (Option<String>, Option<usize>, Option<String>) {
    if let Some(p) = entry.pod_uid.as_deref().and_then(|uid| tree.pod(uid)) {
        return (Some(p.path.clone()), Some(p.process_count()), p.alive_because());
    }
    if let Some((_, c)) = entry.container_id.as_deref().and_then(|id| tree.container(id)) {
        let n = c.processes.len();
        let why = (n > 0).then(|| format!("{n} process{} in its cgroups", if n == 1 { "" } else { "es" }));
        return (Some(c.path.clone()), Some(n), why);
    }
    (None, entry.cgroup_processes, entry.still_running.clone())
}

/// Computes the repair. `Err` only when it cannot run at all (no host root, no checkpoint,
/// an unusable `--pods` file); every reason not to write is in [`Plan::verdict`].
pub fn plan(opts: &Options) -> Result<Plan, RepairError> {
    compute_plan(opts).map_err(RepairError::CouldNotRun)
}

// A plain-text reason: [`plan`] puts it into `RepairError::CouldNotRun` at once.
fn compute_plan(opts: &Options) -> Result<Plan, String> {
    let host = opts.host.clone();
    if !host.root().is_dir() {
        return Err(format!(
            "{}: host root does not exist or is not a directory",
            host.root().display()
        ));
    }
    let discovery = collect::kubelet::read_kubelet(&host);
    let path = host.kubelet_dir(discovery.root_dir.as_deref()).join(FILE_NAME);
    let shown = host.display(&path);
    let scan_opts = scan::Options {
        host: collect::HostOptions {
            node: opts.source.node.clone(),
            local_dirs: collect::LocalDirs::Skip,
            ..Default::default()
        },
        host_reads: scan::HostReads::Inline,
        ..Default::default()
    };

    // Pods as `scan` gets them (the file, else the API when it answers, else the cgroups), and
    // the bytes the plan is for, read on both sides of the snapshot: a file that changes
    // meanwhile is being written by a running kubelet, and is read again.
    let read = crate::block_on(async {
        // A kubeconfig the user named that cannot be used is an error naming it, as in `scan`.
        let resolved = opts.source.resolve(&host).await.map_err(|e| e.to_string())?;
        let (pods, kubeconfig) = (resolved.pods, resolved.kubeconfig);
        let mut scan_opts = scan_opts.clone();
        scan_opts.notes.extend(resolved.note);
        let mut attempt = 0;
        loop {
            let before = read_file(&path, &shown).map_err(|e| e.to_string())?.ok_or_else(|| {
                format!("{shown}: no such file (no CPU manager checkpoint on this node; is --kubelet-dir right?)")
            })?;
            let scanned = scan::snapshot::<ListDirectory>(&host, pods.clone(), None, &scan_opts)
                .await
                .map_err(|e| scan::blame_kubeconfig(kubeconfig.as_deref(), e).to_string())?;
            let after = read_file(&path, &shown).map_err(|e| e.to_string())?.map(|(b, _, _)| b);
            if after.as_deref() == Some(before.0.as_slice()) {
                return Ok::<_, String>((scanned.snapshot, before));
            }
            attempt += 1;
            if attempt == 3 {
                return Err(format!(
                    "{shown} changed during each of 3 reads: a running kubelet is writing it; try again"
                ));
            }
        }
    });
    let (snapshot, (original, mode, owner)) = read.map_err(|e| format!("tokio runtime: {e}"))??;
    let mut notes: Vec<String> = snapshot.notes.iter().map(ToString::to_string).collect();
    let kubelet = match running_kubelet(&host) {
        Ok(k) => k,
        Err(e) => {
            notes.push(e.to_string());
            None
        }
    };
    // Without a pod list the rescan asks the kubelet again (or, once the repair has stopped
    // it, the cgroups alone: an entry must then still be stale by its cgroups).
    let rescan = match snapshot.pods.source {
        PodSource::Cgroups | PodSource::PodResources => Pods::Cgroups,
        _ => Pods::Given {
            node: snapshot.node.clone(),
            pods: snapshot.pods.bound.clone(),
            source: snapshot.pods.source.clone(),
        },
    };
    let mut plan = Plan {
        node: snapshot.node.clone(),
        checkpoint: path,
        shown,
        original,
        mode,
        owner,
        layout: None,
        verification: None,
        policy: None,
        pod_source: snapshot.pods.source.clone(),
        notes,
        kubelet,
        removals: vec![],
        kept: vec![],
        cpus_returned: String::new(),
        cpus_withheld: String::new(),
        old_default: String::new(),
        new_default: String::new(),
        new_bytes: vec![],
        new_layout: None,
        new_checksum: None,
        checks: Checks::default(),
        current_file_problems: vec![],
        fixes_current_file: false,
        verdict: Verdict::Ready,
        host: Some(host),
        rescan: Some(rescan),
        state: None,
        settings: opts.settings.clone(),
    };
    compute(&mut plan, &snapshot, opts.force_unknown_layout);
    Ok(plan)
}

fn refuse(plan: &mut Plan, reason: String) {
    plan.verdict = Verdict::Refused { reasons: vec![reason] };
}

/// Fills `plan` from the checkpoint's bytes and the snapshot.
fn compute(plan: &mut Plan, snap: &NodeSnapshot, force_unknown_layout: bool) {
    let unreadable = |shown: &str, e: &dyn std::fmt::Display| {
        format!(
            "{shown} is unreadable ({e}): the kubelet cannot read it either; the remedy is the documented one \
             (drain, stop the kubelet, delete the file)"
        )
    };
    let cp = match Checkpoint::parse(&plan.original) {
        Ok(cp) => cp,
        Err(e) => return refuse(plan, unreadable(&plan.shown, &e)),
    };
    plan.layout = Some(cp.layout());
    let verification = cp.verify();
    plan.verification = Some(verification.clone());
    if cp.v4.is_some() {
        return refuse(
            plan,
            format!(
                "{} has the V4 layout of unreleased kubelet builds (1.37 development): not repaired",
                plan.shown
            ),
        );
    }
    let state = match cp.state() {
        Ok(s) => s,
        Err(e) => return refuse(plan, unreadable(&plan.shown, &e)),
    };
    plan.policy = Some(state.policy_name.clone());
    plan.current_file_problems = current_problems(snap, &state);
    plan.old_default = cp.default_cpu_set.clone();
    plan.new_default = cp.default_cpu_set.clone();
    plan.state = Some(state.clone());

    // Liveness must be judgeable, and the stale entries' cgroups readable.
    if snap.pods.source == PodSource::Cgroups && snap.host.cgroups.ok().is_none() {
        return refuse(
            plan,
            format!(
                "no pod list (--pods, or the API) and the cgroups are not readable ({}): cannot tell which entries are stale",
                snap.host.cgroups.status()
            ),
        );
    }
    let stale = stale_entries_of(snap, &plan.settings, &state);
    let mut reasons = Vec::new();
    if let Verification::Mismatch { stored, .. } = &verification {
        if !force_unknown_layout {
            reasons.push(format!(
                "the stored checksum {stored} matches no known kubelet layout (see `nodemedic checkpoint verify`): \
                 a kubelet of an unknown version may have written it; pass --force-unknown-layout to rewrite it \
                 with a checksum every kubelet since 1.18 accepts"
            ));
        }
    }
    if stale.is_empty() && reasons.is_empty() && !plan.current_file_problems.is_empty() {
        plan.kept = kept_entries(&cp, &state, &[]);
        return refuse(
            plan,
            format!(
                "{} fails the kubelet's start-up checks today ({}) and has no stale entry to remove: this repair \
                 cannot fix it; a kubelet that restarts now refuses the file (the documented remedy: drain the node, \
                 stop the kubelet, delete the file, start the kubelet)",
                plan.shown,
                plan.current_file_problems.join("; ")
            ),
        );
    }
    if stale.is_empty() && reasons.is_empty() {
        plan.verdict = Verdict::NothingToDo {
            reason: format!(
                "no stale entries in {} (liveness from {})",
                plan.shown,
                snap.pods.source.as_str()
            ),
        };
        plan.kept = kept_entries(&cp, &state, &[]);
        return;
    }

    // The removals, with their cgroups' processes counted again.
    let tree = snap.host.cgroups.ok();
    for e in &stale {
        let Some(target) = target_of_stale(e) else { continue };
        let (cgroup, processes, still_running) = match tree {
            Some(t) => cgroup_of(t, e),
            None => (None, e.cgroup_processes, e.still_running.clone()),
        };
        plan.removals.push(Removal {
            cpus: target.raw_in(&cp).unwrap_or_else(|| e.cpus.to_string()),
            target,
            reason: e.reason.clone(),
            pod: e.pod.as_ref().map(PodInfo::display),
            cgroup,
            cgroup_processes: processes,
            still_running,
        });
    }
    plan.removals.sort_by(|a, b| a.target.cmp(&b.target));
    let targets: Vec<Target> = plan.removals.iter().map(|r| r.target.clone()).collect();
    plan.kept = kept_entries(&cp, &state, &targets);

    if tree.is_none() {
        reasons.push(format!(
            "the cgroups are not readable ({}): cannot check that the stale entries' pods have no processes left",
            snap.host.cgroups.status()
        ));
    }
    for r in &plan.removals {
        if let Some(why) = &r.still_running {
            reasons.push(format!(
                "{} is stale by {} ({}) but its cgroup {} shows {why}: something still runs there; not freeing its CPUs \
                 (stop its containers first: crictl ps --label io.kubernetes.pod.uid=<uid>, crictl stop)",
                r.target.display(),
                liveness_words(&snap.pods.source),
                r.reason,
                r.cgroup.as_deref().unwrap_or("?"),
            ));
        }
    }
    if state.policy_name != "static" {
        reasons.push(format!(
            "the checkpoint's policy is {:?}, not static: only static-policy checkpoints are repaired",
            state.policy_name
        ));
    }
    if let Observed::Ok(k) = &snap.host.kubelet {
        if k.cpu_manager.policy != state.policy_name {
            reasons.push(format!(
                "the kubelet is configured with policy {:?} but the file has {:?} (configured policy \"{}\" differs from state checkpoint policy \"{}\"): \
                 the kubelet refuses this file whatever its entries",
                k.cpu_manager.policy, state.policy_name, k.cpu_manager.policy, state.policy_name
            ));
        }
    }

    // CPUs: a stale CPU that a live entry also holds stays with the live entry.
    let stale_cpus = plan.removals.iter().fold(CpuSet::new(), |acc, r| {
        acc.union(&CpuSet::parse(&r.cpus).unwrap_or_default())
    });
    let live_cpus = plan.kept.iter().fold(CpuSet::new(), |acc, k| {
        acc.union(&CpuSet::parse(&k.cpus).unwrap_or_default())
    });
    let returned = stale_cpus.difference(&live_cpus).difference(&state.default_cpus);
    plan.cpus_returned = returned.to_string();
    plan.cpus_withheld = stale_cpus.intersection(&live_cpus).to_string();
    let new_default = if returned.is_empty() {
        cp.default_cpu_set.clone()
    } else {
        state.default_cpus.union(&returned).to_string()
    };
    let (new_cp, candidate) = rewrite(&cp, &targets, &new_default);
    plan.new_default = new_default;
    plan.new_bytes = new_cp.to_json().into_bytes();
    plan.new_layout = Some(candidate.layout());
    plan.new_checksum = Some(new_cp.checksum);

    // The new file as the kubelet will read it: it must verify and pass section 3.
    match Checkpoint::parse(&plan.new_bytes).map(|c| (c.verify(), c.state())) {
        Ok((Verification::Matched { .. }, Ok(new_state))) => {
            check_state(plan, snap, &new_state, &mut reasons);
        }
        other => reasons.push(format!("internal error: the new file does not verify ({other:?})")),
    }
    plan.fixes_current_file = reasons.is_empty() && !plan.current_file_problems.is_empty();
    plan.verdict = if reasons.is_empty() {
        Verdict::Ready
    } else {
        Verdict::Refused { reasons }
    };
}

/// What the kubelet checks a state against at start: the online CPUs, the reserved CPUs and
/// whether `strict-cpu-reservation` is on; `Err` says why they are unknown. Without the
/// kubelet's configuration they are unknown: never "no reserved CPUs".
// A plain-text reason, embedded into the plan's refusal reasons and notes in this module.
fn kubelet_view(snap: &NodeSnapshot) -> Result<(CpuSet, CpuSet, bool), String> {
    let Observed::Ok(topology) = &snap.host.cpus else {
        return Err(format!("the online CPUs are unknown ({})", snap.host.cpus.status()));
    };
    let kubelet = match &snap.host.kubelet {
        Observed::Ok(k) => k,
        other => {
            let why = match other {
                Observed::Missing { path } => format!("was not found (nor at {path})"),
                Observed::Error { reason } => format!("could not be read ({reason})"),
                _ => format!("was not read ({})", other.status()),
            };
            return Err(format!(
                "the kubelet's configuration {why}, so its reserved CPUs and strict-cpu-reservation are unknown"
            ));
        }
    };
    let config = &kubelet.cpu_manager;
    let reserved = config
        .reserved_cpus(topology)
        .map_err(|e| format!("the reserved CPUs cannot be computed ({e})"))?;
    Ok((topology.all(), reserved, config.strict_cpu_reservation()))
}

/// The kubelet's messages for the start-up checks `state` fails (empty when the checks cannot
/// run: [`check_state`] says why for the result).
fn current_problems(snap: &NodeSnapshot, state: &CpuState) -> Vec<String> {
    match kubelet_view(snap) {
        Ok((online, reserved, strict)) if state.policy_name == "static" => {
            validate_static_state(state, &online, &reserved, strict)
                .iter()
                .map(|p| p.kubelet_message())
                .collect()
        }
        _ => vec![],
    }
}

fn check_state(plan: &mut Plan, snap: &NodeSnapshot, new_state: &CpuState, reasons: &mut Vec<String>) {
    let (online, reserved, strict) = match kubelet_view(snap) {
        Ok(view) => view,
        Err(e) => {
            reasons.push(format!(
                "{e}: cannot check the result against the kubelet's start-up checks"
            ));
            return;
        }
    };
    plan.checks.online_cpus = Some(online.to_string());
    plan.checks.strict_cpu_reservation = strict;
    plan.checks.reserved_cpus = Some(reserved.to_string());
    for p in validate_static_state(new_state, &online, &reserved, strict) {
        plan.checks.problems.push(p.kubelet_message());
        reasons.push(format!(
            "the result would fail the kubelet's start-up checks ({}): the kubelet would refuse to start with it",
            p.kubelet_message()
        ));
    }
}

fn kept_entries(cp: &Checkpoint, state: &CpuState, removed: &[Target]) -> Vec<Kept> {
    let mut kept: Vec<Kept> = state
        .assignments
        .iter()
        .map(|a| Target::of_key(&a.key))
        .chain(
            state
                .pod_assignments
                .iter()
                .map(|(uid, _)| Target::Pod { pod_uid: uid.clone() }),
        )
        .filter(|t| !removed.contains(t))
        .map(|t| Kept {
            cpus: t.raw_in(cp).unwrap_or_default(),
            target: t,
        })
        .collect();
    kept.sort_by(|a, b| a.target.cmp(&b.target));
    kept
}
