//! `nodemedic repair cpu-state`: free the CPUs that stale checkpoint entries hold, keeping
//! every live pod's pinning (docs/kubelet.md, "What the kubelet cleans by itself").
//!
//! Flow: [`plan`] reads the host like `scan` does (the checkpoint's raw bytes, the snapshot,
//! the pods from `--pods`, the API or the cgroups), finds the stale entries with
//! [`stale_entries_of`], and computes the new file: exactly those entries removed, their CPUs
//! back in `defaultCpuSet` (V3 pod-level entries too), every other entry kept with the very
//! string the file had (the kubelet hashes the strings as written, so a live entry written
//! `"5,4"` stays `"5,4"`; only the new default set is written canonically), and a checksum
//! every kubelet since 1.18 accepts. The plan is refused when a "stale" entry's pod cgroup
//! still has processes, when the result fails one of the kubelet's start-up checks (docs/kubelet.md), when the
//! checksum matches no known layout (unless `--force-unknown-layout`), or when the file is
//! unreadable. [`apply`] then acts, checking its preconditions again right before each step:
//! the kubelet stopped (stopping it itself with `--restart-kubelet`), the file's bytes
//! unchanged since the plan, the entries still stale and empty; it writes a backup, replaces
//! the file atomically ([`super::atomic`]), starts the kubelet again and checks that the
//! removed entries did not come back.
//!
//! [`run_with`] is the command: [`plan`], then the flow of [`command`] with [`apply`], and
//! an Event for a written file. `plan.rs` computes, `apply.rs` acts, `render.rs` shows; the
//! pure rewrite of the file is `nodemedic_rules::checkpoint::rewrite`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::command::{self, Confirm, End, Flow, Ran, Readiness, Repair, RepairError};
use crate::host::HostPaths;
use crate::repair::kubelet::KubeletControl;
use crate::scan;

mod apply;
mod plan;
mod render;
#[cfg(test)]
mod tests;

pub use apply::apply;
pub use apply::{
    Action, ApplyError, ApplyOptions, ApplyOutcome, ApplyReport, CommitStep, backup_path, precheck, remove_leftovers,
    replace_with_backup,
};
pub use nodemedic_rules::checkpoint::rewrite::Target;
pub use plan::{Checks, Kept, Plan, Removal, Verdict, plan};
pub use render::{line_diff, render_apply, render_json, render_plan};

/// Seconds after which the guard starts a kubelet that nodemedic stopped, if nodemedic has not
/// started it by then (`--guard-seconds`).
pub const DEFAULT_GUARD_SECONDS: u64 = 60;

/// The name of a backup: `cpu_manager_state.nodemedic-backup-<UTC timestamp>[.<n>]`.
pub const BACKUP_PREFIX: &str = "cpu_manager_state.nodemedic-backup-";

/// What `repair cpu-state` runs with (the command line, as plain values).
#[derive(Debug, Clone)]
pub struct Options {
    pub host: HostPaths,
    /// Where liveness comes from.
    pub source: scan::Source,
    /// Rewrite a checkpoint whose checksum matches no known kubelet layout.
    pub force_unknown_layout: bool,
    /// The rule settings stale entries are judged with: the same as `scan` and the daemon
    /// (`--config`, `--rule-setting`), so the plan frees what they report.
    pub settings: nodemedic_rules::Settings,
    /// How to act.
    pub apply: ApplyOptions,
    pub flow: Flow,
}

impl Options {
    /// The options of a plan for the checkpoint under `host`, with the defaults of the command
    /// line: pods from `source`, `systemctl` on the `kubelet` unit, 60 s to stop and start,
    /// 15 s to settle.
    pub fn new(host: HostPaths, source: scan::Source) -> Self {
        Options {
            apply: ApplyOptions {
                restart_kubelet: false,
                backup_dir: None,
                control: KubeletControl {
                    host: host.clone(),
                    systemctl: PathBuf::from("systemctl"),
                    systemd_run: PathBuf::from("systemd-run"),
                    unit: "kubelet".into(),
                    timeout: Duration::from_secs(60),
                },
                settle: Duration::from_secs(15),
                guard_seconds: Some(DEFAULT_GUARD_SECONDS),
            },
            host,
            source,
            force_unknown_layout: false,
            settings: nodemedic_rules::Settings::default(),
            flow: Flow::default(),
        }
    }
}

/// What a run did: the plan, the apply report when it acted, and how it ended.
pub type RunOutcome = Ran<Plan, ApplyReport>;

struct CpuState<'a> {
    opts: &'a Options,
}

impl Repair for CpuState<'_> {
    type Plan = Plan;
    type Applied = ApplyReport;

    fn readiness(&self, plan: &Plan) -> Readiness {
        match &plan.verdict {
            Verdict::NothingToDo { .. } => Readiness::NothingToDo,
            Verdict::Ready => Readiness::Ready,
            Verdict::Refused { reasons } => Readiness::Refused(reasons.join("; ")),
        }
    }

    fn precheck(&self, plan: &Plan) -> Result<(), RepairError> {
        precheck(plan, &self.opts.apply).map_err(|e| RepairError::Refused(e.to_string()))
    }

    fn question(&self, plan: &Plan) -> String {
        format!("Apply this plan to {} on node {}?", plan.shown, plan.node)
    }

    fn render_plan(&self, plan: &Plan, dry_run: bool) -> String {
        render_plan(plan, dry_run)
    }

    fn apply(&mut self, plan: &Plan) -> Result<ApplyReport, RepairError> {
        Ok(apply(plan, &self.opts.apply))
    }

    fn render_applied(&self, plan: &Plan, report: &ApplyReport) -> String {
        render_apply(plan, report)
    }

    fn end(&self, report: &ApplyReport) -> End {
        report.end()
    }

    fn json(&self, plan: &Plan, report: Option<&ApplyReport>, end: &End) -> Value {
        let refusal = match end {
            End::Failed(e) if report.is_none() => Some(match e {
                RepairError::NotConfirmed(why) => why.clone(),
                RepairError::Refused(why) => why.clone(),
                other => other.to_string(),
            }),
            _ => None,
        };
        let mut v = render_json(plan, report, refusal.as_deref());
        v["exit_code"] = serde_json::json!(end.exit_code());
        v
    }

    fn targets(&self, plan: &Plan) -> Vec<String> {
        plan.removals
            .iter()
            .map(|r| {
                let target = serde_json::to_string(&r.target).unwrap_or_default();
                format!("remove {target} cpus {}", r.cpus)
            })
            .collect()
    }
}

/// `nodemedic repair cpu-state`: the plan, then the flow of [`command`], writing to `out` and
/// confirming through `confirm`; a written file is also recorded as an Event on the Node.
pub fn run_with(opts: &Options, out: &mut dyn Write, confirm: Confirm<'_>) -> Result<RunOutcome, RepairError> {
    let mut plan = plan(opts)?;
    if opts.flow.apply {
        plan.notes.extend(remove_leftovers(&plan, &opts.apply));
    }
    let ran = command::run(&mut CpuState { opts }, plan, &opts.flow, out, confirm)?;
    if let Some(report) = &ran.applied {
        record_event(opts, report);
    }
    Ok(ran)
}

/// Records a written checkpoint as an Event on the Node (`CPUManagerStateRepaired`) when the
/// API can be reached within a few seconds; the log line is written either way.
fn record_event(opts: &Options, report: &ApplyReport) {
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
    evidence.insert("backup".into(), serde_json::json!(report.backup_shown));
    let mut rec = ActionRecord::new(
        RepairAction::CpuState,
        ActionResult::Applied,
        ActionTarget::node(&report.node),
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
    let _ = crate::block_on(async {
        let client = if opts.source.offline {
            None
        } else {
            crate::kube_api::client(opts.source.kubeconfig.as_deref(), std::time::Duration::from_secs(5))
                .await
                .ok()
        };
        let audit = Audit::new(client, &report.node, "nodemedic-repair");
        audit.record(&mut rec).await;
    });
}
