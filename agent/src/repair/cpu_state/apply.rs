//! Carrying out a ready cpu-state plan: stop the kubelet when asked to, check that nothing
//! changed since the plan, back the file up, replace it atomically, start the kubelet again,
//! and check the result.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodemedic_rules::checkpoint::Checkpoint;
use nodemedic_rules::checkpoint::rewrite::Target;
use nodemedic_rules::facts::stale_entries_of;
use serde_json::{Value, json};

use super::BACKUP_PREFIX;
use super::plan::{Plan, Removal, cgroup_of, read_file};
use crate::repair::atomic::{self, Attrs, Step};
use crate::repair::command::{End, RepairError};
use crate::repair::interrupt::Interrupts;
use crate::repair::kubelet::{Guard, KubeletControl, KubeletError, KubeletProcess, Started, Stopped, running_kubelet};
use crate::scan;

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
    /// Arm a [`Guard`](crate::repair::kubelet::Guard) that starts the kubelet this many seconds
    /// after nodemedic stops it, whatever happens to nodemedic; `None` (`--no-guard`): none.
    pub guard_seconds: Option<u64>,
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
    #[serde(skip)]
    pub backup: Option<PathBuf>,
    /// The backup's path as the host sees it.
    #[serde(rename = "backup")]
    pub backup_shown: Option<String>,
    /// The guard armed before the kubelet was stopped (`None`: nothing was stopped, or
    /// `--no-guard`).
    pub guard: Option<Guard>,
    /// The signal received during the apply, if any.
    pub interrupted_by: Option<&'static str>,
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
    /// How the command ends after this apply.
    pub fn end(&self) -> End {
        match self.outcome {
            ApplyOutcome::Applied => End::Applied,
            ApplyOutcome::AppliedWithProblems | ApplyOutcome::Failed => {
                End::Failed(RepairError::ActionsFailed(self.message.clone()))
            }
            ApplyOutcome::Refused => End::Failed(RepairError::Refused(self.message.clone())),
            ApplyOutcome::Aborted => End::Failed(RepairError::Aborted(self.message.clone())),
        }
    }
}

/// Now, RFC 3339 UTC to the millisecond, cut (not rounded): an action at 22:59:34.9 is listed
/// at 22:59:34.900, as the backup it wrote is named `...225934Z`.
pub(super) fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

struct Recorder<'a> {
    report: ApplyReport,
    plan: &'a Plan,
    /// Signals recorded while the kubelet is stopped.
    interrupts: Option<Interrupts>,
}

impl Recorder<'_> {
    /// The signal received so far, if any (also kept in the report).
    fn interrupted(&mut self) -> Option<&'static str> {
        let signal = self.interrupts.as_ref()?.received()?;
        self.report.interrupted_by = Some(signal);
        Some(signal)
    }

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
) -> Result<(), CommitError> {
    atomic::write_new(backup, original, attrs).map_err(CommitError::Backup)?;
    hook(CommitStep::BackupWritten);
    atomic::write_atomic_with(checkpoint, new, attrs, &mut |s| hook(CommitStep::Replace(s))).map_err(CommitError::Write)
}

/// Which half of [`replace_with_backup`] failed, and how.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The backup could not be written: the checkpoint was not touched.
    #[error("backup: {0}")]
    Backup(atomic::WriteError),
    /// The replacement failed: the checkpoint is the old file (the backup is on disk).
    #[error("write: {0}")]
    Write(atomic::WriteError),
}

/// Why [`apply`] will not act: a precondition [`precheck`] finds before anything is asked, or a
/// part of the plan that no longer holds when it is checked again right before the write.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The plan refuses, or has nothing to do.
    #[error("the plan is not ready to apply")]
    NotReady,
    /// A kubelet runs (its pid under the host root) and `--restart-kubelet` was not given.
    #[error(
        "the kubelet is running (pid {pid}): it would overwrite the file from its memory; \
         pass --restart-kubelet to stop it for the write and start it again, or stop it yourself"
    )]
    KubeletRunning { pid: u32 },
    /// Whether the kubelet runs cannot be told (the host's `/proc`).
    #[error(transparent)]
    Kubelet(#[from] KubeletError),
    /// The plan carries no host to read again (a plan not made by [`super::plan`]).
    #[error("the plan has no host to check again")]
    NoHost,
    /// The plan carries no pod list to judge again with.
    #[error("the plan has no pod list to judge again with")]
    NoPodList,
    /// Reading the host again failed.
    #[error("reading the host again: {0}")]
    Rescan(#[source] scan::ScanError),
    /// A planned removal's entry (`pod <uid> container <name>`, ...) is no longer stale.
    #[error("{target} is no longer stale")]
    NoLongerStale { target: String },
    /// A planned removal's cgroup shows processes (or cannot be read) now.
    #[error("the cgroup of {target} shows {why} now")]
    StillRunning { target: String, why: String },
}

/// Why [`apply`] would refuse before doing anything (checked again inside it): for asking
/// for confirmation only when there is something to confirm.
pub fn precheck(plan: &Plan, opts: &ApplyOptions) -> Result<(), ApplyError> {
    if !plan.ready() {
        return Err(ApplyError::NotReady);
    }
    match running_kubelet(&opts.control.host)? {
        Some(k) if !opts.restart_kubelet => Err(ApplyError::KubeletRunning { pid: k.pid }),
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
            backup_shown: None,
            guard: None,
            interrupted_by: None,
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
        interrupts: None,
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
    let _lock = match lock_dir(&dir) {
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
        Err(e) => return rec.end(ApplyOutcome::Refused, e.to_string()),
    };
    rec.report.kubelet_was_running = running.clone();
    let mut stopped_it = false;
    if let Some(k) = &running {
        if !opts.restart_kubelet {
            return rec.end(
                ApplyOutcome::Refused,
                ApplyError::KubeletRunning { pid: k.pid }.to_string(),
            );
        }
        // Signals no longer end the process: the step in progress finishes, the kubelet starts.
        let interrupts = match Interrupts::install() {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::warn!(error = %e, "repair cpu-state: signals will end the repair at once (the guard still restarts the kubelet)");
                None
            }
        };
        // A restart that happens even if nodemedic dies from here on (SIGKILL, OOM).
        if let Some(seconds) = opts.guard_seconds {
            match opts.control.arm_guard(seconds) {
                Ok(guard) => {
                    rec.act(
                        "arm-guard",
                        "if this repair dies after stopping the kubelet, a timer on the host starts it again",
                        json!({"unit": guard.unit, "seconds": guard.seconds, "command": guard.command.join(" ")}),
                    );
                    rec.report.guard = Some(guard);
                }
                Err(e) => {
                    return rec.end(
                        ApplyOutcome::Refused,
                        format!(
                            "cannot arm the guard that starts the kubelet again if this repair dies ({e}): the kubelet \
                             was not stopped; on a host without systemd, pass --no-guard to stop it without one"
                        ),
                    );
                }
            }
        }
        rec.interrupts = interrupts;
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
                } else if let Some(guard) = rec.report.guard.clone() {
                    // It still runs: the guard has nothing to do.
                    if opts.control.disarm_guard(&guard).is_ok() {
                        rec.act(
                            "disarm-guard",
                            "the kubelet was never stopped",
                            json!({"unit": guard.unit}),
                        );
                    }
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
    if let Some(signal) = rec.interrupted() {
        return abort(
            rec,
            ApplyOutcome::Aborted,
            format!("interrupted by {signal} before the write: nothing was written"),
        );
    }
    let backup_dir = opts.backup_dir.clone().unwrap_or_else(|| dir.clone());
    for leftover in leftovers(&plan.checkpoint, &backup_dir) {
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
        Err(e) => return abort(rec, ApplyOutcome::Aborted, e.to_string()),
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
        rec.report.backup_shown = Some(host.display(&backup));
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
            let what = other.map_or_else(|e| e.to_string(), |b| format!("{} bytes", b.map_or(0, |b| b.0.len())));
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
    if let Some(signal) = rec.interrupted() {
        rec.report.problems.push(format!(
            "interrupted by {signal}: the write was finished and the kubelet started first"
        ));
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

/// An exclusive lock on the checkpoint's directory: one repair of it at a time.
// Err: the OS's reason alone, as text: both callers (in this file) say which directory could
// not be locked and what that means for them.
fn lock_dir(dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, String> {
    std::fs::File::open(dir).map_err(|e| e.to_string()).and_then(|f| {
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e.to_string())
    })
}

/// Removes the temporary files (of the checkpoint and of backups) that earlier, interrupted
/// repairs left; returns what it removed. Only under [`lock_dir`].
fn leftovers(checkpoint: &Path, backup_dir: &Path) -> Vec<PathBuf> {
    let mut removed = atomic::remove_leftovers(checkpoint);
    removed.extend(atomic::remove_leftovers_in(backup_dir, BACKUP_PREFIX));
    removed
}

/// What every `--apply` run does first, whether or not it has something to write: remove the
/// temporary files of earlier, interrupted repairs (under the directory's lock, so never a
/// running repair's). Returns a note per file removed, or why nothing was looked at.
pub fn remove_leftovers(plan: &Plan, opts: &ApplyOptions) -> Vec<String> {
    let dir = plan
        .checkpoint
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let host = &opts.control.host;
    let _lock = match lock_dir(&dir) {
        Ok(l) => l,
        Err(e) => {
            return vec![format!(
                "temporary files of earlier repairs were not looked for: cannot lock {} ({e})",
                host.display(&dir)
            )];
        }
    };
    let backup_dir = opts.backup_dir.clone().unwrap_or_else(|| dir.clone());
    leftovers(&plan.checkpoint, &backup_dir)
        .into_iter()
        .map(|p| {
            tracing::info!(path = %host.display(&p), "repair cpu-state: removed a temporary file of an earlier, interrupted repair");
            format!("removed {}: a temporary file of an earlier, interrupted repair", host.display(&p))
        })
        .collect()
}

/// The planned removals are still stale, and their cgroups still empty.
fn recheck(plan: &Plan) -> Result<(), ApplyError> {
    let (Some(host), Some(state)) = (&plan.host, &plan.state) else {
        return Err(ApplyError::NoHost);
    };
    let Some(pods) = plan.rescan.clone() else {
        return Err(ApplyError::NoPodList);
    };
    let opts = scan::Options {
        host: crate::collect::HostOptions {
            node: Some(plan.node.clone()),
            local_dirs: crate::collect::LocalDirs::Skip,
            ..Default::default()
        },
        ..Default::default()
    };
    let snap = scan::snapshot_blocking(host, pods, &opts)
        .map_err(ApplyError::Rescan)?
        .snapshot;
    let stale = stale_entries_of(&snap, &plan.settings, state);
    let tree = snap.host.cgroups.ok();
    for r in &plan.removals {
        let Some(e) = stale
            .iter()
            .find(|e| super::plan::target_of_stale(e).as_ref() == Some(&r.target))
        else {
            return Err(ApplyError::NoLongerStale {
                target: r.target.display(),
            });
        };
        let still_running = tree.map_or(e.still_running.clone(), |t| cgroup_of(t, e).2);
        if let Some(why) = still_running {
            return Err(ApplyError::StillRunning {
                target: r.target.display(),
                why,
            });
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
        let guard = rec.report.guard.as_ref().map_or(String::new(), |g| {
            format!(
                "; the guard {} tries `systemctl start` once more when its timer fires",
                g.unit
            )
        });
        rec.report.problems.push(format!(
            "the kubelet did not run again within {:.0} s: start it by hand (systemctl start {}) and check its log{guard}",
            opts.control.timeout.as_secs_f64(),
            opts.control.unit
        ));
        final_check(rec);
        return;
    }
    // nodemedic started it and saw it run: the guard's work is done.
    if let Some(guard) = rec.report.guard.clone() {
        match opts.control.disarm_guard(&guard) {
            Ok(()) => rec.act(
                "disarm-guard",
                "the kubelet runs again, started by this repair",
                json!({"unit": guard.unit}),
            ),
            Err(e) => rec.report.problems.push(format!(
                "could not disarm the guard {} ({e}): its timer will run `systemctl start` on the running kubelet, \
                 which does nothing",
                guard.unit
            )),
        }
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
