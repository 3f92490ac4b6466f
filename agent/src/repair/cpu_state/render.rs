//! The cpu-state plan and apply report as text (with a diff of the file) and as JSON.

use nodemedic_rules::Verification;
use nodemedic_rules::snapshot::PodSource;
use serde_json::{Value, json};

use super::apply::{ApplyOutcome, ApplyReport, now_rfc3339};
use super::plan::{Plan, Verdict};
use crate::host::HostPaths;

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
        PodSource::PodResources => {
            "the kubelet's PodResources API (a pod is alive while the kubelet lists it as active)".to_string()
        }
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
    if !plan.current_file_problems.is_empty() {
        line(
            w,
            "\nThe file is INVALID today: a kubelet that starts now refuses it, in its own words:".to_string(),
        );
        for p in &plan.current_file_problems {
            // validateState's failures: the kubelet logs "Policy start error" with the reason,
            // then "Failed to start ContainerManager" with this error (cpu_manager.go Start,
            // container_manager_linux.go).
            line(w, format!("  start cpu manager error: {p}"));
        }
        if plan.fixes_current_file {
            line(
                w,
                "Removing only the stale entries makes it valid: this repair fixes it (the checks on the result \
                 below pass)."
                    .to_string(),
            );
        }
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
            let cgroup = match (&r.cgroup, r.cgroup_processes, &r.still_running) {
                (Some(c), _, Some(why)) => format!("cgroup {c} shows {why}"),
                (Some(c), Some(p), None) => format!("cgroup {c} has {p} process{}", if p == 1 { "" } else { "es" }),
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
                    "Checks on the result (the kubelet's start-up checks, docs/kubelet.md; online CPUs {online}, reserved {}, strict-cpu-reservation {}): {}",
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
pub fn render_json(plan: &Plan, applied: Option<&ApplyReport>, refusal: Option<&str>) -> Value {
    let mut v = serde_json::to_value(plan).unwrap_or(Value::Null);
    v["generated_at"] = json!(now_rfc3339());
    v["new_file"] = if plan.new_bytes.is_empty() {
        Value::Null
    } else {
        json!(String::from_utf8_lossy(&plan.new_bytes))
    };
    v["apply"] = applied.map_or(Value::Null, |r| serde_json::to_value(r).unwrap_or(Value::Null));
    v["not_applied"] = refusal.map_or(Value::Null, |r| json!(r));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
