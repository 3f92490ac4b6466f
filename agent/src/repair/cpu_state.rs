//! `nodemedic repair cpu-state`: free the CPUs that stale checkpoint entries hold, keeping
//! every live pod's pinning (KUBELET.md section 4).
//!
//! Flow: [`plan`] reads the host like `scan` does (the checkpoint's raw bytes, the snapshot,
//! the pods from `--pods`, the API or the cgroups), finds the stale entries with
//! [`stale_entries_of`], and computes the new file: exactly those entries removed, their CPUs
//! back in `defaultCpuSet` (V3 pod-level entries too), every other entry kept with the very
//! string the file had (the kubelet hashes the strings as written, so a live entry written
//! `"5,4"` stays `"5,4"`; only the new default set is written canonically), and a checksum
//! every kubelet since 1.18 accepts. The plan is refused when a "stale" entry's pod cgroup
//! still has processes, when the result breaks a rule of KUBELET.md section 3, when the
//! checksum matches no known layout (unless `--force-unknown-layout`), or when the file is
//! unreadable. [`apply`] then acts, checking its preconditions again right before each step:
//! the kubelet stopped (stopping it itself with `--restart-kubelet`), the file's bytes
//! unchanged since the plan, the entries still stale and empty; it writes a backup, replaces
//! the file atomically ([`super::atomic`]), starts the kubelet again and checks that the
//! removed entries did not come back.
//!
//! [`run`] is the command: plan, print, confirm, apply, print. The library split
//! ([`plan`], [`apply`], [`replace_with_backup`]) is what the tests drive.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodemedic_rules::checkpoint::checksum::{self, Candidate};
use nodemedic_rules::checkpoint::{Checkpoint, CpuState, Entries, EntryKey, MAX_CHECKPOINT_BYTES, PodEntries};
use nodemedic_rules::rules::stale_cpu_assignment::{StaleEntry, stale_entries_of};
use nodemedic_rules::snapshot::{CgroupTree, NodeSnapshot, Observed, PodInfo, PodSource};
use nodemedic_rules::validate::validate_static_state;
use nodemedic_rules::{CpuSet, Settings, Verification};
use serde_json::{Value, json};

use super::atomic::{self, Attrs, Step};
use super::kubelet::{KubeletControl, KubeletProcess, Started, Stopped, running_kubelet};
use crate::args::{Format, FormatArg, HostArgs, PodSourceArgs};
use crate::collect::checkpoint::FILE_NAME;
use crate::collect::read::read_bytes;
use crate::collect::{self, ScanOptions};
use crate::host::HostPaths;

/// Exit code: nothing to do, or applied and verified.
pub const EXIT_OK: u8 = 0;
/// Exit code: a plan shown but not applied (dry run), refused, or applied with a problem.
pub const EXIT_NOT_APPLIED: u8 = 1;
/// Exit code: could not run.
pub const EXIT_ERROR: u8 = 2;

/// Backups are named `cpu_manager_state.nodemedic-backup-<UTC timestamp>`.
pub const BACKUP_PREFIX: &str = "cpu_manager_state.nodemedic-backup-";

/// `nodemedic repair cpu-state`.
#[derive(Debug, clap::Args)]
pub struct CpuStateArgs {
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub source: PodSourceArgs,
    /// Rewrite the checkpoint (default: show the plan only). The kubelet must be stopped, or --restart-kubelet given.
    #[arg(long, default_value_t = false)]
    pub apply: bool,
    /// With --apply: stop the kubelet for the write and start it again afterwards.
    #[arg(long, default_value_t = false)]
    pub restart_kubelet: bool,
    /// With --apply: do not ask for confirmation (required without a terminal).
    #[arg(long, short = 'y', default_value_t = false)]
    pub yes: bool,
    /// Rewrite a checkpoint whose checksum matches no known kubelet layout (the new file gets a V2/V3 checksum).
    #[arg(long, default_value_t = false)]
    pub force_unknown_layout: bool,
    /// Where the backup of the original file is written; default: beside the checkpoint, in the kubelet directory.
    #[arg(long, env = "NODEMEDIC_BACKUP_DIR")]
    pub backup_dir: Option<PathBuf>,
    /// The systemctl program that stops and starts the kubelet (run through nsenter into pid 1's namespaces when the agent runs in a pod).
    #[arg(long, env = "NODEMEDIC_SYSTEMCTL", default_value = "systemctl")]
    pub systemctl: PathBuf,
    /// The kubelet's systemd unit.
    #[arg(long, env = "NODEMEDIC_KUBELET_UNIT", default_value = "kubelet")]
    pub kubelet_unit: String,
    /// Seconds the kubelet may take to stop, and to run again after the start.
    #[arg(long, default_value_t = 60.0)]
    pub kubelet_timeout_seconds: f64,
    /// Seconds to watch the restarted kubelet (does it stay up, does it rewrite the file) before the final check.
    #[arg(long, default_value_t = 15.0)]
    pub settle_seconds: f64,
    #[command(flatten)]
    pub format: FormatArg,
}

#[derive(Debug, clap::Parser)]
#[command(name = "cpu-state", no_binary_name = true)]
struct Standalone {
    #[command(flatten)]
    args: CpuStateArgs,
}

impl CpuStateArgs {
    /// Parses the command's flags alone (`["--host-root", "/x", "--apply"]`), for tests and
    /// for callers without the whole command line.
    pub fn parse_from<I, T>(args: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser as _;
        Standalone::try_parse_from(args)
            .map(|s| s.args)
            .map_err(|e| e.to_string())
    }

    fn host(&self) -> HostPaths {
        HostPaths::new(self.host.host_root.clone(), self.host.kubelet_dir.clone())
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.kubelet_timeout_seconds.clamp(0.1, 3600.0))
    }

    /// How [`apply`] is to act, from the flags.
    pub fn apply_options(&self) -> ApplyOptions {
        ApplyOptions {
            restart_kubelet: self.restart_kubelet,
            backup_dir: self.backup_dir.clone(),
            control: KubeletControl {
                host: self.host(),
                systemctl: self.systemctl.clone(),
                unit: self.kubelet_unit.clone(),
                timeout: self.timeout(),
            },
            settle: Duration::from_secs_f64(self.settle_seconds.clamp(0.0, 3600.0)),
        }
    }
}

/// An entry of the checkpoint, by what the kubelet keys it on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// A V2/V3 container entry, `entries[pod_uid][container]`.
    Container { pod_uid: String, container: String },
    /// A V1 entry, `entries[container_id]`.
    ContainerId { container_id: String },
    /// A V3 pod-level entry, `podEntries[pod_uid]`.
    Pod { pod_uid: String },
}

impl Target {
    fn of_stale(e: &StaleEntry) -> Option<Target> {
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

    fn of_key(key: &EntryKey) -> Target {
        match key {
            EntryKey::Container { pod_uid, container } => Target::Container {
                pod_uid: pod_uid.clone(),
                container: container.clone(),
            },
            EntryKey::ContainerId { container_id } => Target::ContainerId {
                container_id: container_id.clone(),
            },
        }
    }

    /// The pod UID, when the entry names one.
    pub fn pod_uid(&self) -> Option<&str> {
        match self {
            Target::Container { pod_uid, .. } | Target::Pod { pod_uid } => Some(pod_uid),
            Target::ContainerId { .. } => None,
        }
    }

    /// `pod <uid> container <name>`, `container id <id>`, `pod <uid> (pod-level)`.
    pub fn display(&self) -> String {
        match self {
            Target::Container { pod_uid, container } => format!("pod {pod_uid} container {container}"),
            Target::ContainerId { container_id } => format!("container id {container_id}"),
            Target::Pod { pod_uid } => format!("pod {pod_uid} (pod-level)"),
        }
    }

    /// The entry's cpuset string as written in `cp`, when it is there.
    pub fn raw_in(&self, cp: &Checkpoint) -> Option<String> {
        let cp = cp.effective();
        match (self, &cp.entries, &cp.pod_entries) {
            (Target::Container { pod_uid, container }, Entries::ByPod(map), _) => {
                map.get(pod_uid)?.as_ref()?.get(container).cloned()
            }
            (Target::ContainerId { container_id }, Entries::ByContainerId(map), _) => map.get(container_id).cloned(),
            (Target::Pod { pod_uid }, _, PodEntries::Map(map)) => map.get(pod_uid).cloned(),
            _ => None,
        }
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
    /// Processes in that cgroup (`None`: no cgroup).
    pub cgroup_processes: Option<usize>,
}

/// An entry the plan keeps as it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Kept {
    #[serde(flatten)]
    pub target: Target,
    /// The cpuset as written in the file, and as it will be written again.
    pub cpus: String,
}

/// What the checks of KUBELET.md section 3 ran against.
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
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The host and pods the plan judged with, for the re-check before the write.
    #[serde(skip)]
    host: Option<HostPaths>,
    #[serde(skip)]
    rescan: ScanOptions,
    #[serde(skip)]
    state: Option<CpuState>,
}

fn octal<S: serde::Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:o}"))
}

impl Plan {
    /// Whether [`apply`] may act on it.
    pub fn ready(&self) -> bool {
        self.verdict == Verdict::Ready
    }

    /// The exit code of a run that stops after the plan.
    pub fn dry_run_code(&self) -> u8 {
        match self.verdict {
            Verdict::NothingToDo { .. } => EXIT_OK,
            _ => EXIT_NOT_APPLIED,
        }
    }
}

/// This node's pods from the API within a few seconds.
fn api_pods(kubeconfig: Option<&Path>, node: &str) -> Result<Vec<PodInfo>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let timeout = Duration::from_secs(5);
        let client = crate::kube_api::client(kubeconfig, timeout).await?;
        tokio::time::timeout(Duration::from_secs(15), crate::kube_api::node_pods(&client, node))
            .await
            .map_err(|_| "listing the node's pods took over 15 s".to_string())?
    })
}

/// A file's bytes, permission bits and `(uid, gid)`.
type FileRead = (Vec<u8>, u32, (u32, u32));

/// Reads the checkpoint's bytes and attributes; `Ok(None)` when there is no file.
fn read_file(path: &Path, shown: &str) -> Result<Option<FileRead>, String> {
    use std::os::unix::fs::MetadataExt as _;
    let Some(bytes) = read_bytes(path, &shown, MAX_CHECKPOINT_BYTES).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    Ok(Some((bytes, meta.mode() & 0o7777, (meta.uid(), meta.gid()))))
}

/// Live processes below a cgroup directory, counted from every `cgroup.procs` (independent
/// of whether `/proc` is readable: a pid listed there is a process that exists).
fn count_cgroup_processes(dir: &Path, depth: usize) -> usize {
    let own = std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.split_whitespace().count())
        .unwrap_or(0);
    if depth == 0 {
        return own;
    }
    let below: usize = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| count_cgroup_processes(&e.path(), depth - 1))
                .sum()
        })
        .unwrap_or(0);
    own + below
}

/// The cgroup of a stale entry and its processes: the snapshot's count, or a recount of
/// `cgroup.procs` when that finds more.
fn cgroup_of(host: &HostPaths, tree: &CgroupTree, entry: &StaleEntry) -> (Option<String>, Option<usize>) {
    let path = match (&entry.container_id, &entry.pod_uid) {
        (_, Some(uid)) if tree.pod(uid).is_some() => tree.pod(uid).map(|p| (p.path.clone(), p.process_count())),
        (Some(id), _) => tree.container(id).map(|(_, c)| (c.path.clone(), c.processes.len())),
        _ => None,
    };
    match path {
        None => (None, entry.cgroup_processes),
        Some((shown, counted)) => {
            let recount = count_cgroup_processes(&host.host(&shown), 8);
            (
                Some(shown),
                Some(counted.max(recount).max(entry.cgroup_processes.unwrap_or(0))),
            )
        }
    }
}

/// The checkpoint `cp` with `targets` removed and `defaultCpuSet` set to `default`, with the
/// checksum of the layout a writer uses: V1 for a V1 file, V3 when pod entries remain, else
/// V2, always under the name `CPUManagerCheckpoint` (KUBELET.md section 2). Every other value
/// keeps its raw text.
pub fn rewrite(cp: &Checkpoint, targets: &[Target], default: &str) -> (Checkpoint, Candidate) {
    let src = cp.effective();
    let v1 = matches!(src.entries, Entries::ByContainerId(_));
    let entries = match &src.entries {
        Entries::Absent | Entries::Null => Entries::Absent,
        Entries::ByContainerId(map) => {
            let mut map = map.clone();
            for t in targets {
                if let Target::ContainerId { container_id } = t {
                    map.remove(container_id);
                }
            }
            if map.is_empty() {
                Entries::Absent
            } else {
                Entries::ByContainerId(map)
            }
        }
        Entries::ByPod(map) => {
            let mut map = map.clone();
            for t in targets {
                if let Target::Container { pod_uid, container } = t {
                    if let Some(Some(containers)) = map.get_mut(pod_uid) {
                        containers.remove(container);
                        // The kubelet drops a pod whose last container it unassigns.
                        if containers.is_empty() {
                            map.remove(pod_uid);
                        }
                    }
                }
            }
            if map.is_empty() {
                Entries::Absent
            } else {
                Entries::ByPod(map)
            }
        }
    };
    let pod_entries = match &src.pod_entries {
        PodEntries::Map(map) => {
            let mut map = map.clone();
            for t in targets {
                if let Target::Pod { pod_uid } = t {
                    map.remove(pod_uid);
                }
            }
            if map.is_empty() {
                PodEntries::Absent
            } else {
                PodEntries::Map(map)
            }
        }
        PodEntries::Absent | PodEntries::Null => PodEntries::Absent,
    };
    let mut out = Checkpoint {
        policy_name: src.policy_name.clone(),
        default_cpu_set: default.to_string(),
        entries,
        pod_entries,
        checksum: 0,
        v4: None,
    };
    let candidate = if v1 {
        Candidate::V1
    } else if matches!(out.pod_entries, PodEntries::Map(_)) {
        Candidate::V3
    } else {
        Candidate::V2
    };
    out.checksum = checksum::checksum(&out, candidate).map_or(0, u64::from);
    (out, candidate)
}

/// Computes the repair. `Err` only when it cannot run at all (no host root, no checkpoint,
/// an unusable `--pods` file); every reason not to write is in [`Plan::verdict`].
pub fn plan(args: &CpuStateArgs) -> Result<Plan, String> {
    let host = args.host();
    if !host.root().is_dir() {
        return Err(format!(
            "{}: host root does not exist or is not a directory",
            host.root().display()
        ));
    }
    let mut notes = Vec::new();
    // Pods as `scan` gets them: the file, else the API when it answers, else the cgroups.
    let mut api = None;
    if let Some(node) = args.source.api_node(&host) {
        match api_pods(args.source.kubeconfig.as_deref(), &node) {
            Ok(pods) => api = Some((node, pods)),
            Err(e) => notes.push(format!("Kubernetes API not used ({e}): liveness from cgroups")),
        }
    }
    let opts = ScanOptions {
        node: args
            .source
            .node
            .clone()
            .or_else(|| api.as_ref().map(|(n, _)| n.clone())),
        pods_file: args.source.pods.clone(),
        pods: api.map(|(_, pods)| (pods, PodSource::Api)),
        local_dir_roots: vec![],
        skip_local_dirs: true,
    };
    let discovery = collect::kubelet::read_kubelet(&host);
    let path = host.kubelet_dir(discovery.root_dir.as_deref()).join(FILE_NAME);
    let shown = host.display(&path);

    // The bytes the plan is for, read on both sides of the snapshot: a file that changes
    // meanwhile is being written by a running kubelet, and is read again.
    let mut attempt = 0;
    let (snapshot, (original, mode, owner)) = loop {
        let before = read_file(&path, &shown)?.ok_or_else(|| {
            format!("{shown}: no such file (no CPU manager checkpoint on this node; is --kubelet-dir right?)")
        })?;
        let collected = collect::collect(&host, &opts).map_err(|e| e.to_string())?;
        let after = read_file(&path, &shown)?.map(|(b, _, _)| b);
        if after.as_deref() == Some(before.0.as_slice()) {
            break (collected.snapshot, before);
        }
        attempt += 1;
        if attempt == 3 {
            return Err(format!(
                "{shown} changed during each of 3 reads: a running kubelet is writing it; try again"
            ));
        }
    };
    notes.extend(snapshot.notes.iter().cloned());
    let kubelet = match running_kubelet(&host) {
        Ok(k) => k,
        Err(e) => {
            notes.push(e);
            None
        }
    };
    let rescan = ScanOptions {
        node: Some(snapshot.node.clone()),
        pods: (snapshot.pod_source != PodSource::Cgroups).then(|| (snapshot.pods.clone(), snapshot.pod_source.clone())),
        skip_local_dirs: true,
        ..Default::default()
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
        pod_source: snapshot.pod_source.clone(),
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
        verdict: Verdict::Ready,
        host: Some(host),
        rescan,
        state: None,
    };
    compute(&mut plan, &snapshot, args.force_unknown_layout);
    Ok(plan)
}

fn refuse(plan: &mut Plan, reason: String) {
    plan.verdict = Verdict::Refused { reasons: vec![reason] };
}

/// Fills `plan` from the checkpoint's bytes and the snapshot.
fn compute(plan: &mut Plan, snap: &NodeSnapshot, force_unknown_layout: bool) {
    let cp = match Checkpoint::parse(&plan.original) {
        Ok(cp) => cp,
        Err(e) => {
            return refuse(
                plan,
                format!(
                    "{} is unreadable ({e}): the kubelet cannot read it either; the remedy is the documented one (drain, stop the kubelet, delete the file)",
                    plan.shown
                ),
            );
        }
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
        Err(e) => {
            return refuse(
                plan,
                format!(
                    "{} is unreadable ({e}): the kubelet cannot read it either; the remedy is the documented one (drain, stop the kubelet, delete the file)",
                    plan.shown
                ),
            );
        }
    };
    plan.policy = Some(state.policy_name.clone());
    plan.old_default = cp.default_cpu_set.clone();
    plan.new_default = cp.default_cpu_set.clone();
    plan.state = Some(state.clone());

    // Liveness must be judgeable, and the stale entries' cgroups readable.
    if snap.pod_source == PodSource::Cgroups && snap.cgroups.ok().is_none() {
        return refuse(
            plan,
            format!(
                "no pod list (--pods, or the API) and the cgroups are not readable ({}): cannot tell which entries are stale",
                snap.cgroups.status()
            ),
        );
    }
    let settings = Settings::default();
    let stale = stale_entries_of(snap, &settings, &state);
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
    if stale.is_empty() && reasons.is_empty() {
        plan.verdict = Verdict::NothingToDo {
            reason: format!(
                "no stale entries in {} (liveness from {})",
                plan.shown,
                snap.pod_source.as_str()
            ),
        };
        plan.kept = kept_entries(&cp, &state, &[]);
        return;
    }

    // The removals, with their cgroups' processes counted again.
    let tree = snap.cgroups.ok();
    let host = plan.host.clone().unwrap_or_else(|| HostPaths::new("/", None));
    for e in &stale {
        let Some(target) = Target::of_stale(e) else { continue };
        let (cgroup, processes) = match tree {
            Some(t) => cgroup_of(&host, t, e),
            None => (None, e.cgroup_processes),
        };
        plan.removals.push(Removal {
            cpus: target.raw_in(&cp).unwrap_or_else(|| e.cpus.to_string()),
            target,
            reason: e.reason.clone(),
            pod: e.pod.as_ref().map(PodInfo::display),
            cgroup,
            cgroup_processes: processes,
        });
    }
    plan.removals.sort_by(|a, b| a.target.cmp(&b.target));
    let targets: Vec<Target> = plan.removals.iter().map(|r| r.target.clone()).collect();
    plan.kept = kept_entries(&cp, &state, &targets);

    if tree.is_none() {
        reasons.push(format!(
            "the cgroups are not readable ({}): cannot check that the stale entries' pods have no processes left",
            snap.cgroups.status()
        ));
    }
    for r in &plan.removals {
        if let Some(n) = r.cgroup_processes.filter(|n| *n > 0) {
            reasons.push(format!(
                "{} is stale by the pod list ({}) but its cgroup {} still has {n} process{}: something still runs there; not freeing its CPUs",
                r.target.display(),
                r.reason,
                r.cgroup.as_deref().unwrap_or("?"),
                if n == 1 { "" } else { "es" }
            ));
        }
    }
    if state.policy_name != "static" {
        reasons.push(format!(
            "the checkpoint's policy is {:?}, not static: only static-policy checkpoints are repaired",
            state.policy_name
        ));
    }
    if let Observed::Ok(k) = &snap.kubelet {
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
    plan.verdict = if reasons.is_empty() {
        Verdict::Ready
    } else {
        Verdict::Refused { reasons }
    };
}

fn check_state(plan: &mut Plan, snap: &NodeSnapshot, new_state: &CpuState, reasons: &mut Vec<String>) {
    let Observed::Ok(topology) = &snap.cpus else {
        reasons.push(format!(
            "the online CPUs are unknown ({}): cannot check the result against KUBELET.md section 3",
            snap.cpus.status()
        ));
        return;
    };
    let online = topology.all();
    if snap.kubelet.ok().is_none() {
        plan.notes.push(format!(
            "kubelet configuration {}: the checks assume no reserved CPUs and no policy options",
            snap.kubelet.status()
        ));
    }
    let config = snap.cpu_manager();
    let strict = config.strict_cpu_reservation();
    plan.checks.online_cpus = Some(online.to_string());
    plan.checks.strict_cpu_reservation = strict;
    let reserved = match config.reserved_cpus(topology) {
        Ok(r) => r,
        Err(e) => {
            reasons.push(format!(
                "the reserved CPUs cannot be computed ({e}): cannot check the result against KUBELET.md section 3"
            ));
            return;
        }
    };
    plan.checks.reserved_cpus = Some(reserved.to_string());
    for p in validate_static_state(new_state, &online, &reserved, strict) {
        plan.checks.problems.push(p.kubelet_message());
        reasons.push(format!(
            "the result would break a rule of KUBELET.md section 3 ({}): the kubelet would refuse to start with it",
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

/// How [`apply`] acts.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// Stop a running kubelet for the write, and start it again.
    pub restart_kubelet: bool,
    /// Where the backup goes (default: the checkpoint's directory).
    pub backup_dir: Option<PathBuf>,
    pub control: KubeletControl,
    /// How long to watch the restarted kubelet before the final check.
    pub settle: Duration,
}

/// One thing [`apply`] did, with why and the evidence (also logged).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Action {
    /// `stop-kubelet`, `backup`, `write-checkpoint`, `start-kubelet`, ...
    pub action: String,
    pub why: String,
    pub evidence: Value,
    /// When it was done, RFC 3339 UTC.
    pub at: String,
}

/// How an apply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyOutcome {
    /// Written and verified (and the kubelet back, when it was stopped).
    Applied,
    /// Written, but a later check found a problem (see [`ApplyReport::problems`]).
    AppliedWithProblems,
    /// A precondition failed before anything was written.
    Refused,
    /// Stopped between steps because something changed; the file is as it was.
    Aborted,
    /// A step failed; see the message (the file is the old or the new one, never a mix).
    Failed,
}

/// What [`apply`] did: for the summary, the log and the Events.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ApplyReport {
    pub outcome: ApplyOutcome,
    pub message: String,
    pub node: String,
    pub checkpoint: String,
    pub actions: Vec<Action>,
    /// The backup's local path.
    pub backup: Option<PathBuf>,
    pub removed: Vec<Removal>,
    pub cpus_returned: String,
    pub old_default: String,
    pub new_default: String,
    /// The kubelet that ran when the apply started.
    pub kubelet_was_running: Option<KubeletProcess>,
    pub stopped: Option<Stopped>,
    pub started: Option<Started>,
    /// The restarted kubelet rewrote the file while it was watched.
    pub kubelet_rewrote: bool,
    /// Removed entries found in the file again after the restart.
    pub came_back: Vec<Target>,
    pub problems: Vec<String>,
}

impl ApplyReport {
    /// The command's exit code for this outcome.
    pub fn code(&self) -> u8 {
        match self.outcome {
            ApplyOutcome::Applied => EXIT_OK,
            ApplyOutcome::Failed => EXIT_ERROR,
            _ => EXIT_NOT_APPLIED,
        }
    }
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}

struct Recorder<'a> {
    report: ApplyReport,
    plan: &'a Plan,
}

impl Recorder<'_> {
    fn act(&mut self, action: &str, why: &str, evidence: Value) {
        tracing::info!(
            action,
            why,
            evidence = %evidence,
            node = self.plan.node.as_str(),
            checkpoint = self.plan.shown.as_str(),
            "repair cpu-state"
        );
        self.report.actions.push(Action {
            action: action.to_string(),
            why: why.to_string(),
            evidence,
            at: now_rfc3339(),
        });
    }

    fn end(mut self, outcome: ApplyOutcome, message: String) -> ApplyReport {
        match outcome {
            ApplyOutcome::Applied => tracing::info!(node = self.plan.node.as_str(), "{message}"),
            _ => tracing::warn!(node = self.plan.node.as_str(), outcome = ?outcome, "{message}"),
        }
        self.report.outcome = outcome;
        self.report.message = message;
        self.report
    }
}

/// A step of [`replace_with_backup`], for its hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStep {
    /// The backup is complete and on disk.
    BackupWritten,
    /// A step of the atomic replacement.
    Replace(Step),
}

/// A backup path in `dir` that does not exist yet:
/// `cpu_manager_state.nodemedic-backup-<UTC timestamp>[.<n>]`.
pub fn backup_path(dir: &Path) -> PathBuf {
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string();
    let base = dir.join(format!("{BACKUP_PREFIX}{stamp}"));
    let mut candidate = base.clone();
    let mut n = 1;
    while candidate.symlink_metadata().is_ok() {
        candidate = PathBuf::from(format!("{}.{n}", base.display()));
        n += 1;
    }
    candidate
}

/// Writes `original` to `backup` (durably, never overwriting), then replaces `checkpoint`
/// with `new` atomically, calling `hook` after each step. A crash at any point leaves the
/// checkpoint whole (old or new), and once the replacement has started the backup is on disk.
pub fn replace_with_backup(
    checkpoint: &Path,
    backup: &Path,
    original: &[u8],
    new: &[u8],
    attrs: Attrs,
    hook: &mut dyn FnMut(CommitStep),
) -> Result<(), String> {
    atomic::write_new(backup, original, attrs).map_err(|e| format!("backup: {e}"))?;
    hook(CommitStep::BackupWritten);
    atomic::write_atomic_with(checkpoint, new, attrs, &mut |s| hook(CommitStep::Replace(s)))
        .map_err(|e| format!("write: {e}"))
}

/// Why [`apply`] would refuse before doing anything (checked again inside it): for asking
/// for confirmation only when there is something to confirm.
pub fn precheck(plan: &Plan, opts: &ApplyOptions) -> Result<(), String> {
    if !plan.ready() {
        return Err("the plan is not ready to apply".into());
    }
    match running_kubelet(&opts.control.host)? {
        Some(k) if !opts.restart_kubelet => Err(format!(
            "the kubelet is running (pid {}): it would overwrite the file from its memory; \
             pass --restart-kubelet to stop it for the write and start it again, or stop it yourself",
            k.pid
        )),
        _ => Ok(()),
    }
}

/// Carries out a ready plan: stops the kubelet when asked to, checks that nothing changed
/// since the plan, writes the backup and the new file, starts the kubelet again and checks
/// the result. Every action is logged and recorded in the report.
pub fn apply(plan: &Plan, opts: &ApplyOptions) -> ApplyReport {
    let mut rec = Recorder {
        report: ApplyReport {
            outcome: ApplyOutcome::Refused,
            message: String::new(),
            node: plan.node.clone(),
            checkpoint: plan.shown.clone(),
            actions: vec![],
            backup: None,
            removed: plan.removals.clone(),
            cpus_returned: plan.cpus_returned.clone(),
            old_default: plan.old_default.clone(),
            new_default: plan.new_default.clone(),
            kubelet_was_running: None,
            stopped: None,
            started: None,
            kubelet_rewrote: false,
            came_back: vec![],
            problems: vec![],
        },
        plan,
    };
    if !plan.ready() {
        return rec.end(
            ApplyOutcome::Refused,
            "the plan is not ready to apply (see its verdict)".into(),
        );
    }
    let host = &opts.control.host;
    let dir = plan
        .checkpoint
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);

    // One repair of this directory at a time.
    let lock = std::fs::File::open(&dir).map_err(|e| e.to_string()).and_then(|f| {
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e.to_string())
    });
    let _lock = match lock {
        Ok(l) => l,
        Err(e) => {
            return rec.end(
                ApplyOutcome::Refused,
                format!("cannot lock {} ({e}): is another repair running?", host.display(&dir)),
            );
        }
    };

    // 1. The kubelet must be stopped: a running one rewrites the file from memory.
    let running = match running_kubelet(host) {
        Ok(r) => r,
        Err(e) => return rec.end(ApplyOutcome::Refused, e),
    };
    rec.report.kubelet_was_running = running.clone();
    let mut stopped_it = false;
    if let Some(k) = &running {
        if !opts.restart_kubelet {
            return rec.end(
                ApplyOutcome::Refused,
                format!(
                    "the kubelet is running (pid {}): it would overwrite the file from its memory; \
                     pass --restart-kubelet to stop it for the write and start it again, or stop it yourself",
                    k.pid
                ),
            );
        }
        match opts.control.stop(k) {
            Ok(stopped) => {
                rec.act(
                    "stop-kubelet",
                    "a running kubelet rewrites cpu_manager_state from memory: the file may only change while it is stopped",
                    json!({"pid": k.pid, "method": stopped.method, "command": stopped.command.join(" "),
                           "systemctl_error": stopped.systemctl_error, "seconds": stopped.seconds}),
                );
                rec.report.stopped = Some(stopped);
                stopped_it = true;
            }
            Err(e) => {
                // A stop that gave up may still have stopped it late: never leave it down.
                if matches!(running_kubelet(host), Ok(None)) {
                    restart_and_watch(&mut rec, opts, None);
                }
                return rec.end(
                    ApplyOutcome::Aborted,
                    format!("could not stop the kubelet: {e}; nothing was written"),
                );
            }
        }
    }

    // 2. Nothing may have changed since the plan.
    let abort = |mut rec: Recorder<'_>, outcome: ApplyOutcome, message: String| -> ApplyReport {
        if stopped_it {
            restart_and_watch(&mut rec, opts, None);
        }
        rec.end(outcome, message)
    };
    match read_file(&plan.checkpoint, &plan.shown) {
        Ok(Some((bytes, _, _))) if bytes == plan.original => {}
        Ok(Some(_)) => {
            return abort(
                rec,
                ApplyOutcome::Aborted,
                format!(
                    "{} changed since the plan: nothing was written; run the repair again",
                    plan.shown
                ),
            );
        }
        Ok(None) => {
            return abort(
                rec,
                ApplyOutcome::Aborted,
                format!("{} disappeared since the plan: nothing was written", plan.shown),
            );
        }
        Err(e) => return abort(rec, ApplyOutcome::Failed, format!("re-reading the checkpoint: {e}")),
    }
    if let Err(e) = recheck(plan) {
        return abort(rec, ApplyOutcome::Aborted, format!("{e}: nothing was written"));
    }
    let backup_dir = opts.backup_dir.clone().unwrap_or_else(|| dir.clone());
    let leftovers = atomic::remove_leftovers(&plan.checkpoint)
        .into_iter()
        .chain(atomic::remove_leftovers_in(&backup_dir, BACKUP_PREFIX));
    for leftover in leftovers {
        rec.act(
            "remove-leftover",
            "a temporary file of an earlier, interrupted write",
            json!({"path": host.display(&leftover)}),
        );
    }
    // The supervisor may have restarted a kubelet we stopped with SIGTERM.
    match running_kubelet(host) {
        Ok(None) => {}
        Ok(Some(k)) => {
            return abort(
                rec,
                ApplyOutcome::Aborted,
                format!(
                    "a kubelet (pid {}) started again before the write (its supervisor?): nothing was written; \
                     stop it with systemctl and run the repair again",
                    k.pid
                ),
            );
        }
        Err(e) => return abort(rec, ApplyOutcome::Aborted, e),
    }

    // 3. Backup, then the atomic replacement.
    let backup = backup_path(&backup_dir);
    let attrs = Attrs {
        mode: plan.mode,
        owner: Some(plan.owner),
    };
    let mut done = Vec::new();
    let written = replace_with_backup(
        &plan.checkpoint,
        &backup,
        &plan.original,
        &plan.new_bytes,
        attrs,
        &mut |s| done.push(s),
    );
    if done.contains(&CommitStep::BackupWritten) {
        rec.report.backup = Some(backup.clone());
        rec.act(
            "backup",
            "the original checkpoint, to roll back to",
            json!({"path": host.display(&backup), "bytes": plan.original.len(), "mode": format!("{:o}", plan.mode)}),
        );
    }
    if let Err(e) = written {
        return abort(rec, ApplyOutcome::Failed, format!("{e}; {} is unchanged", plan.shown));
    }
    let removed: Vec<Value> = plan
        .removals
        .iter()
        .map(|r| json!({"entry": r.target.display(), "cpus": r.cpus, "reason": r.reason, "cgroup": r.cgroup, "cgroup_processes": r.cgroup_processes}))
        .collect();
    rec.act(
        "write-checkpoint",
        "stale entries hold exclusive CPUs for pods that no longer run here; freeing them keeps every live pod's pinning",
        json!({"path": plan.shown, "removed": removed, "cpus_returned": plan.cpus_returned,
               "default_cpus": {"old": plan.old_default, "new": plan.new_default},
               "layout": plan.new_layout, "checksum": plan.new_checksum, "bytes": plan.new_bytes.len()}),
    );
    match read_file(&plan.checkpoint, &plan.shown) {
        Ok(Some((bytes, _, _))) if bytes == plan.new_bytes => {}
        other => {
            let what = other.map_or_else(|e| e, |b| format!("{} bytes", b.map_or(0, |b| b.0.len())));
            return abort(
                rec,
                ApplyOutcome::Failed,
                format!("{} does not hold what was written ({what})", plan.shown),
            );
        }
    }

    // 4. The kubelet back, and the result checked.
    if stopped_it {
        restart_and_watch(&mut rec, opts, Some(&plan.new_bytes));
    } else {
        final_check(&mut rec);
    }
    let problems = rec.report.problems.clone();
    if problems.is_empty() {
        let message = format!(
            "freed {} stale entr{} ({} CPUs returned to the default set) in {}",
            plan.removals.len(),
            if plan.removals.len() == 1 { "y" } else { "ies" },
            if plan.cpus_returned.is_empty() {
                "no"
            } else {
                &plan.cpus_returned
            },
            plan.shown
        );
        rec.end(ApplyOutcome::Applied, message)
    } else {
        rec.end(
            ApplyOutcome::AppliedWithProblems,
            format!("{} was rewritten, but: {}", plan.shown, problems.join("; ")),
        )
    }
}

/// The planned removals are still stale, and their cgroups still empty.
fn recheck(plan: &Plan) -> Result<(), String> {
    let (Some(host), Some(state)) = (&plan.host, &plan.state) else {
        return Err("the plan has no host to check again".into());
    };
    let snap = collect::collect(host, &plan.rescan)
        .map_err(|e| format!("reading the host again: {e}"))?
        .snapshot;
    let stale = stale_entries_of(&snap, &Settings::default(), state);
    let tree = snap.cgroups.ok();
    for r in &plan.removals {
        let Some(e) = stale.iter().find(|e| Target::of_stale(e).as_ref() == Some(&r.target)) else {
            return Err(format!("{} is no longer stale", r.target.display()));
        };
        let processes = tree.map_or(e.cgroup_processes, |t| cgroup_of(host, t, e).1);
        if let Some(n) = processes.filter(|n| *n > 0) {
            return Err(format!("the cgroup of {} has {n} process(es) now", r.target.display()));
        }
    }
    Ok(())
}

/// Starts the kubelet we stopped, watches it for the settle time, and checks the file.
fn restart_and_watch(rec: &mut Recorder<'_>, opts: &ApplyOptions, written: Option<&[u8]>) {
    let started = opts.control.start();
    rec.act(
        "start-kubelet",
        "the repair stopped it",
        json!({"command": started.command.join(" "), "systemctl_error": started.systemctl_error,
               "pid": started.process.as_ref().map(|p| p.pid), "seconds": started.seconds}),
    );
    let up = started.process.is_some();
    rec.report.started = Some(started);
    if !up {
        rec.report.problems.push(format!(
            "the kubelet did not run again within {:.0} s: start it by hand (systemctl start {}) and check its log",
            opts.control.timeout.as_secs_f64(),
            opts.control.unit
        ));
        final_check(rec);
        return;
    }
    // The kubelet reads the file at start and writes it when its state changes (admission,
    // its reconcile loop): watch for that, and that it stays up.
    if let Some(written) = written {
        let deadline = Instant::now() + opts.settle;
        while Instant::now() < deadline {
            if std::fs::read(&rec.plan.checkpoint).is_ok_and(|b| b != written) {
                rec.report.kubelet_rewrote = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if opts.control.wait_running(Duration::ZERO).is_none() {
        rec.report.problems.push(format!(
            "the kubelet exited after its start: see `journalctl -u {}`; the backup {} holds the original file",
            opts.control.unit,
            rec.report
                .backup
                .as_deref()
                .map_or("(none)".to_string(), |b| opts.control.host.display(b))
        ));
    }
    if written.is_some() {
        final_check(rec);
    }
}

/// The file on disk now: readable, accepted, and without the removed entries.
fn final_check(rec: &mut Recorder<'_>) {
    let plan = rec.plan;
    let bytes = match std::fs::read(&plan.checkpoint) {
        Ok(b) => b,
        Err(e) => {
            rec.report.problems.push(format!("{}: {e}", plan.shown));
            return;
        }
    };
    let cp = match Checkpoint::parse(&bytes) {
        Ok(cp) => cp,
        Err(e) => {
            rec.report
                .problems
                .push(format!("{} is unreadable now: {e}", plan.shown));
            return;
        }
    };
    if !cp.verify().accepted() {
        rec.report
            .problems
            .push(format!("{}: its checksum matches no kubelet layout now", plan.shown));
    }
    let came_back: Vec<Target> = plan
        .removals
        .iter()
        .map(|r| r.target.clone())
        .filter(|t| t.raw_in(&cp).is_some())
        .collect();
    if !came_back.is_empty() {
        let names: Vec<String> = came_back.iter().map(Target::display).collect();
        rec.report.problems.push(format!(
            "the kubelet wrote back removed entries: {} (it still believes those containers are active: \
             check `nodemedic scan` and the pods on the node)",
            names.join(", ")
        ));
        rec.act(
            "entries-came-back",
            "the restarted kubelet wrote removed entries again",
            json!({"entries": names}),
        );
    }
    rec.report.came_back = came_back;
}

/// What a run did, for callers that record it (Events, metrics).
#[derive(Debug)]
pub struct RunOutcome {
    pub code: u8,
    pub plan: Plan,
    pub applied: Option<ApplyReport>,
}

/// The answer to "apply this plan?".
pub type Confirm<'a> = &'a mut dyn FnMut(&Plan) -> Result<bool, String>;

/// Asks on the terminal; without one, refuses (the caller must pass `--yes`).
pub fn terminal_confirm(plan: &Plan) -> Result<bool, String> {
    use std::io::IsTerminal as _;
    if !std::io::stdin().is_terminal() {
        return Err("no terminal to confirm on: pass --yes to apply without confirmation".into());
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "Apply this plan to {} on node {}? [y/N] ", plan.shown, plan.node);
    let _ = err.flush();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// `nodemedic repair cpu-state`: plan, print, and with `--apply` confirm, apply and print.
pub fn run(args: CpuStateArgs) -> Result<u8, String> {
    init_logging(args.format.format);
    let mut out = std::io::stdout();
    let outcome = run_with(&args, &mut out, &mut terminal_confirm)?;
    if let Some(report) = &outcome.applied {
        record_event(&args, report);
    }
    Ok(outcome.code)
}

/// Records a written checkpoint as an Event on the Node (`CPUManagerStateRepaired`) when the
/// API can be reached within a few seconds; the log line is written either way.
fn record_event(args: &CpuStateArgs, report: &ApplyReport) {
    use crate::repair::audit::{ActionRecord, ActionResult, ActionTarget, Audit, RepairAction};
    if !matches!(
        report.outcome,
        ApplyOutcome::Applied | ApplyOutcome::AppliedWithProblems
    ) {
        return;
    }
    let mut evidence = serde_json::Map::new();
    evidence.insert("checkpoint".into(), serde_json::json!(report.checkpoint));
    evidence.insert(
        "removed".into(),
        serde_json::to_value(&report.removed).unwrap_or_default(),
    );
    evidence.insert("cpus_returned".into(), serde_json::json!(report.cpus_returned));
    evidence.insert("old_default".into(), serde_json::json!(report.old_default));
    evidence.insert("new_default".into(), serde_json::json!(report.new_default));
    evidence.insert(
        "backup".into(),
        serde_json::json!(report.backup.as_ref().map(|b| b.display().to_string())),
    );
    let mut rec = ActionRecord::new(
        RepairAction::CpuState,
        ActionResult::Applied,
        ActionTarget {
            kind: "Node".into(),
            name: Some(report.node.clone()),
            ..Default::default()
        },
        format!(
            "rewrote {} without {} stale entr{}, CPUs {} back to the default set",
            report.checkpoint,
            report.removed.len(),
            if report.removed.len() == 1 { "y" } else { "ies" },
            report.cpus_returned
        ),
        "stale-cpu-assignment: CPUs held for containers that no longer run on this node".into(),
        evidence,
    );
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return;
    };
    runtime.block_on(async {
        let client = if args.source.offline {
            None
        } else {
            crate::kube_api::client(args.source.kubeconfig.as_deref(), std::time::Duration::from_secs(5))
                .await
                .ok()
        };
        let audit = Audit::new(client, &report.node, "nodemedic-repair");
        audit.record(&mut rec).await;
    });
}

fn init_logging(format: Format) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("NODEMEDIC_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        Format::Json => builder.json().try_init(),
        Format::Text => builder.try_init(),
    };
}

/// [`run`] writing to `out` and confirming through `confirm`.
pub fn run_with(args: &CpuStateArgs, out: &mut dyn Write, confirm: Confirm<'_>) -> Result<RunOutcome, String> {
    let plan = plan(args)?;
    let format = args.format.format;
    let mut applied = None;
    let mut refusal = None;
    if args.apply && plan.ready() {
        let opts = args.apply_options();
        match precheck(&plan, &opts) {
            Err(e) => refusal = Some(e),
            Ok(()) => {
                if format == Format::Text {
                    emit(out, &render_plan(&plan, false))?;
                }
                let yes = if args.yes { Ok(true) } else { confirm(&plan) };
                match yes {
                    Ok(true) => applied = Some(apply(&plan, &opts)),
                    Ok(false) => refusal = Some("not confirmed: nothing was changed".to_string()),
                    Err(e) => refusal = Some(format!("{e}; nothing was changed")),
                }
                if format == Format::Text {
                    let text = match (&applied, &refusal) {
                        (Some(r), _) => render_apply(&plan, r),
                        (None, Some(e)) => format!("\nNot applied: {e}\n"),
                        _ => String::new(),
                    };
                    emit(out, &text)?;
                }
                let code = applied.as_ref().map_or(EXIT_NOT_APPLIED, ApplyReport::code);
                if format == Format::Json {
                    emit(out, &render_json(&plan, applied.as_ref(), refusal.as_deref()))?;
                }
                return Ok(RunOutcome { code, plan, applied });
            }
        }
    }
    let code = if refusal.is_some() {
        EXIT_NOT_APPLIED
    } else {
        plan.dry_run_code()
    };
    match format {
        Format::Json => emit(out, &render_json(&plan, None, refusal.as_deref()))?,
        Format::Text => {
            let mut text = render_plan(&plan, !args.apply);
            if let Some(e) = &refusal {
                text.push_str(&format!("\nNot applied: {e}\n"));
            }
            emit(out, &text)?;
        }
    }
    Ok(RunOutcome {
        code,
        plan,
        applied: None,
    })
}

fn emit(out: &mut dyn Write, text: &str) -> Result<(), String> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not worth failing the repair over.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing the output: {e}")),
    }
}

fn pretty(bytes: &[u8]) -> Vec<String> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => serde_json::to_string_pretty(&v)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect(),
        Err(_) => String::from_utf8_lossy(bytes).lines().map(str::to_string).collect(),
    }
}

/// A line diff of `old` and `new` (longest common subsequence) with `context` unchanged
/// lines around each change; `None` when the files are too large to diff cheaply.
pub fn line_diff(old: &[String], new: &[String], context: usize) -> Option<Vec<String>> {
    let (n, m) = (old.len(), new.len());
    if n.saturating_mul(m) > 4_000_000 {
        return None;
    }
    // lcs[i][j]: length of the LCS of old[i..] and new[j..].
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if old[i] == new[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            ops.push((' ', &old[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            ops.push(('-', &old[i]));
            i += 1;
        } else {
            ops.push(('+', &new[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.0 != ' ')
        .map(|(k, _)| k)
        .collect();
    let mut out = Vec::new();
    let mut last_shown: Option<usize> = None;
    for (k, (c, line)) in ops.iter().enumerate() {
        let near = changed.iter().any(|&x| k + context >= x && k <= x + context);
        if !near {
            continue;
        }
        if last_shown.is_some_and(|l| k > l + 1) || (last_shown.is_none() && k > 0) {
            out.push("@@".to_string());
        }
        out.push(format!("{c} {line}"));
        last_shown = Some(k);
    }
    if last_shown.is_some_and(|l| l + 1 < ops.len()) {
        out.push("@@".to_string());
    }
    Some(out)
}

fn source_text(plan: &Plan) -> String {
    match plan.pod_source {
        PodSource::Api => "the pods the API lists on this node".to_string(),
        PodSource::File => "the pods file".to_string(),
        PodSource::Cgroups => "the cgroups (a pod is alive while its cgroup has processes)".to_string(),
    }
}

fn verification_text(v: &Option<Verification>) -> String {
    match v {
        Some(Verification::Matched { layout, type_name, .. }) => format!("checksum matches {layout} as {type_name}"),
        Some(Verification::Unverified { .. }) => "checksum 0 (not verified; accepted)".to_string(),
        Some(Verification::Mismatch { stored, .. }) => format!("checksum {stored} matches no kubelet layout"),
        None => "unreadable".to_string(),
    }
}

/// The plan as text: what is removed and why, what stays, the CPUs, the checks, the diff.
pub fn render_plan(plan: &Plan, dry_run: bool) -> String {
    let mut t = String::new();
    let w = &mut t;
    let _ = std::fmt::Write::write_fmt(
        w,
        format_args!("repair cpu-state on node {}: {}\n", plan.node, plan.shown),
    );
    let line = |w: &mut String, s: String| {
        w.push_str(&s);
        w.push('\n');
    };
    line(
        w,
        format!(
            "  checkpoint: layout {}, {}, policy {}, {} bytes",
            plan.layout.unwrap_or("?"),
            verification_text(&plan.verification),
            plan.policy.as_deref().unwrap_or("?"),
            plan.original.len()
        ),
    );
    line(w, format!("  liveness:   {}", source_text(plan)));
    line(
        w,
        format!(
            "  kubelet:    {}",
            match &plan.kubelet {
                Some(k) => format!("running (pid {})", k.pid),
                None => "not running".to_string(),
            }
        ),
    );
    for n in &plan.notes {
        line(w, format!("  note:       {n}"));
    }
    if let Verdict::NothingToDo { reason } = &plan.verdict {
        line(w, format!("\nNothing to do: {reason}."));
        return t;
    }
    if !plan.removals.is_empty() {
        let n = plan.removals.len();
        line(
            w,
            format!("\nRemove {n} stale entr{}:", if n == 1 { "y" } else { "ies" }),
        );
        for r in &plan.removals {
            let pod = r.pod.as_ref().map_or(String::new(), |p| format!(" ({p})"));
            line(w, format!("  - {}{pod}: CPUs \"{}\"", r.target.display(), r.cpus));
            let cgroup = match (&r.cgroup, r.cgroup_processes) {
                (Some(c), Some(p)) => format!("cgroup {c} has {p} process{}", if p == 1 { "" } else { "es" }),
                _ => "no cgroup".to_string(),
            };
            line(w, format!("      why: {}; {cgroup}", r.reason));
        }
        let k = plan.kept.len();
        line(
            w,
            format!(
                "Keep {k} live entr{} exactly as written:",
                if k == 1 { "y" } else { "ies" }
            ),
        );
        for e in &plan.kept {
            line(w, format!("  = {}: CPUs \"{}\"", e.target.display(), e.cpus));
        }
        line(
            w,
            format!(
                "CPUs returned to the default set: {}",
                if plan.cpus_returned.is_empty() {
                    "none"
                } else {
                    &plan.cpus_returned
                }
            ),
        );
        if !plan.cpus_withheld.is_empty() {
            line(
                w,
                format!(
                    "CPUs of stale entries also held by live entries (they stay held): {}",
                    plan.cpus_withheld
                ),
            );
        }
        line(
            w,
            format!("defaultCpuSet: \"{}\" -> \"{}\"", plan.old_default, plan.new_default),
        );
        if let Some(online) = &plan.checks.online_cpus {
            line(
                w,
                format!(
                    "Checks on the result (KUBELET.md section 3; online CPUs {online}, reserved {}, strict-cpu-reservation {}): {}",
                    plan.checks
                        .reserved_cpus
                        .as_deref()
                        .map_or("?", |r| if r.is_empty() { "none" } else { r }),
                    if plan.checks.strict_cpu_reservation {
                        "on"
                    } else {
                        "off"
                    },
                    if plan.checks.problems.is_empty() {
                        "all pass".to_string()
                    } else {
                        plan.checks.problems.join("; ")
                    }
                ),
            );
        }
        if let (Some(layout), Some(sum)) = (plan.new_layout, plan.new_checksum) {
            line(
                w,
                format!(
                    "New file: layout {layout}, checksum {sum} (as CPUManagerCheckpoint), {} bytes",
                    plan.new_bytes.len()
                ),
            );
        }
        if !plan.new_bytes.is_empty() {
            line(w, format!("\n--- {} (now)", plan.shown));
            line(w, format!("+++ {} (after the repair)", plan.shown));
            match line_diff(&pretty(&plan.original), &pretty(&plan.new_bytes), 3) {
                Some(diff) => {
                    for d in diff {
                        line(w, d);
                    }
                }
                None => line(w, "(too large to diff here: see the entries above)".to_string()),
            }
            line(w, "Resulting file:".to_string());
            line(w, String::from_utf8_lossy(&plan.new_bytes).into_owned());
        }
    }
    match &plan.verdict {
        Verdict::Refused { reasons } => {
            line(w, "\nRefused: nothing will be changed, because".to_string());
            for r in reasons {
                line(w, format!("  - {r}"));
            }
        }
        Verdict::Ready if dry_run => {
            let restart = if plan.kubelet.is_some() {
                " --restart-kubelet"
            } else {
                ""
            };
            line(
                w,
                format!(
                    "\nDry run: nothing was changed. To apply: nodemedic repair cpu-state --apply{restart} \
                     (the kubelet must be stopped while the file is rewritten; a backup is kept)"
                ),
            );
        }
        _ => {}
    }
    t
}

/// The summary of an apply.
pub fn render_apply(plan: &Plan, r: &ApplyReport) -> String {
    let mut t = String::from("\n");
    for a in &r.actions {
        t.push_str(&format!(
            "{}  {}: {}\n    evidence: {}\n",
            a.at, a.action, a.why, a.evidence
        ));
    }
    let head = match r.outcome {
        ApplyOutcome::Applied => "Applied",
        ApplyOutcome::AppliedWithProblems => "Applied, with problems",
        ApplyOutcome::Refused => "Refused",
        ApplyOutcome::Aborted => "Aborted",
        ApplyOutcome::Failed => "Failed",
    };
    t.push_str(&format!("{head}: {}\n", r.message));
    for p in &r.problems {
        t.push_str(&format!("  problem: {p}\n"));
    }
    if let Some(b) = &r.backup {
        let host = plan.host.clone().unwrap_or_else(|| HostPaths::new("/", None));
        t.push_str(&format!(
            "Backup: {} (to roll back: stop the kubelet, copy it over {}, start the kubelet)\n",
            host.display(b),
            plan.shown
        ));
    }
    t
}

/// The plan (and the apply) as one JSON document.
pub fn render_json(plan: &Plan, applied: Option<&ApplyReport>, refusal: Option<&str>) -> String {
    let mut v = serde_json::to_value(plan).unwrap_or(Value::Null);
    v["generated_at"] = json!(now_rfc3339());
    v["new_file"] = if plan.new_bytes.is_empty() {
        Value::Null
    } else {
        json!(String::from_utf8_lossy(&plan.new_bytes))
    };
    v["apply"] = applied.map_or(Value::Null, |r| serde_json::to_value(r).unwrap_or(Value::Null));
    v["not_applied"] = refusal.map_or(Value::Null, |r| json!(r));
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn raw_v2(default: &str, entries: &[(&str, &str, &str)], pod_entries: &[(&str, &str)]) -> Checkpoint {
        let mut pods: BTreeMap<String, Option<BTreeMap<String, String>>> = BTreeMap::new();
        for (p, c, cpus) in entries {
            pods.entry(p.to_string())
                .or_insert_with(|| Some(BTreeMap::new()))
                .as_mut()
                .unwrap()
                .insert(c.to_string(), cpus.to_string());
        }
        let mut cp = Checkpoint {
            policy_name: "static".into(),
            default_cpu_set: default.into(),
            entries: if pods.is_empty() {
                Entries::Absent
            } else {
                Entries::ByPod(pods)
            },
            pod_entries: if pod_entries.is_empty() {
                PodEntries::Absent
            } else {
                PodEntries::Map(
                    pod_entries
                        .iter()
                        .map(|(u, c)| (u.to_string(), c.to_string()))
                        .collect(),
                )
            },
            checksum: 0,
            v4: None,
        };
        let cand = if pod_entries.is_empty() {
            Candidate::V2
        } else {
            Candidate::V3
        };
        cp.checksum = u64::from(checksum::checksum(&cp, cand).unwrap());
        cp
    }

    fn container(p: &str, c: &str) -> Target {
        Target::Container {
            pod_uid: p.into(),
            container: c.into(),
        }
    }

    #[test]
    fn rewrite_keeps_raw_strings_and_verifies_as_v2() {
        // A live entry written non-canonically ("5,4"): it stays exactly so.
        let cp = raw_v2(
            "0-1",
            &[("live", "app", "5,4"), ("gone", "app", "2-3"), ("live", "side", "6")],
            &[],
        );
        assert!(matches!(cp.verify(), Verification::Matched { layout: "V2", .. }));
        let (out, cand) = rewrite(&cp, &[container("gone", "app")], "0-3");
        assert_eq!(cand, Candidate::V2);
        let text = out.to_json();
        assert_eq!(
            text,
            format!(
                r#"{{"policyName":"static","defaultCpuSet":"0-3","entries":{{"live":{{"app":"5,4","side":"6"}}}},"checksum":{}}}"#,
                out.checksum
            )
        );
        let back = Checkpoint::parse(text.as_bytes()).unwrap();
        assert_eq!(
            back.verify(),
            Verification::Matched {
                layout: "V2",
                type_name: "CPUManagerCheckpoint",
                v4: false
            }
        );
    }

    #[test]
    fn rewrite_drops_empty_pods_and_pod_level_entries() {
        let cp = raw_v2("0", &[("a", "c", "1"), ("b", "c", "2")], &[("p1", "3-4"), ("p2", "5")]);
        assert!(matches!(cp.verify(), Verification::Matched { layout: "V3", .. }));
        // One pod-level entry left: still V3.
        let (out, cand) = rewrite(
            &cp,
            &[container("a", "c"), Target::Pod { pod_uid: "p1".into() }],
            "0-1,3-4",
        );
        assert_eq!(cand, Candidate::V3);
        let back = Checkpoint::parse(out.to_json().as_bytes()).unwrap();
        assert!(matches!(
            back.verify(),
            Verification::Matched {
                layout: "V3",
                type_name: "CPUManagerCheckpoint",
                ..
            }
        ));
        let s = back.state().unwrap();
        assert_eq!(s.assignments.len(), 1);
        assert_eq!(s.pod_assignments, [("p2".to_string(), CpuSet::parse("5").unwrap())]);
        // None left: V2, no podEntries and no entries keys.
        let (out, cand) = rewrite(
            &cp,
            &[
                container("a", "c"),
                container("b", "c"),
                Target::Pod { pod_uid: "p1".into() },
                Target::Pod { pod_uid: "p2".into() },
            ],
            "0-5",
        );
        assert_eq!(cand, Candidate::V2);
        let text = out.to_json();
        assert!(
            text.starts_with(r#"{"policyName":"static","defaultCpuSet":"0-5","checksum":"#),
            "{text}"
        );
        assert!(Checkpoint::parse(text.as_bytes()).unwrap().verify().accepted());
    }

    #[test]
    fn rewrite_v1_stays_v1() {
        let text = r#"{"policyName":"static","defaultCpuSet":"7-9","entries":{"containerID1":"4-6","containerID2":"1-3"},"checksum":2026311253}"#;
        let cp = Checkpoint::parse(text.as_bytes()).unwrap();
        let (out, cand) = rewrite(
            &cp,
            &[Target::ContainerId {
                container_id: "containerID2".into(),
            }],
            "1-3,7-9",
        );
        assert_eq!(cand, Candidate::V1);
        let back = Checkpoint::parse(out.to_json().as_bytes()).unwrap();
        assert!(matches!(back.verify(), Verification::Matched { layout: "V1", .. }));
        let (out, _) = rewrite(
            &cp,
            &[
                Target::ContainerId {
                    container_id: "containerID1".into(),
                },
                Target::ContainerId {
                    container_id: "containerID2".into(),
                },
            ],
            "1-9",
        );
        let back = Checkpoint::parse(out.to_json().as_bytes()).unwrap();
        assert!(matches!(back.verify(), Verification::Matched { layout: "V1", .. }));
    }

    #[test]
    fn diff_shows_changes_with_context() {
        let l = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let old = l(&["a", "b", "c", "d", "e", "f", "g", "h", "i"]);
        let new = l(&["a", "B", "c", "d", "e", "f", "g", "i"]);
        assert_eq!(
            line_diff(&old, &new, 1).unwrap(),
            ["  a", "- b", "+ B", "  c", "@@", "  g", "- h", "  i"]
        );
        assert_eq!(line_diff(&old, &old, 3).unwrap(), Vec::<String>::new());
        let big: Vec<String> = (0..3000).map(|i| i.to_string()).collect();
        assert!(line_diff(&big, &big, 3).is_none());
    }

    #[test]
    fn args_parse_standalone() {
        let a = CpuStateArgs::parse_from(["--host-root", "/x", "--apply", "--yes", "--format", "json"]).unwrap();
        assert!(a.apply && a.yes && !a.restart_kubelet);
        assert_eq!(a.host.host_root, PathBuf::from("/x"));
        assert_eq!(a.systemctl, PathBuf::from("systemctl"));
        assert_eq!(a.format.format, Format::Json);
        assert!(CpuStateArgs::parse_from(["--nope"]).is_err());
    }
}
