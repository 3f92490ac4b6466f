//! `nodemedic hold`: the first process of a one-off repair pod (`kubectl nodemedic repair NODE
//! cpu-state|local-dirs`, template in daemonset/base/repair-pods/).
//!
//! The plugin creates the pod, waits for it to be Ready, and runs `nodemedic repair ...` in it
//! with `kubectl exec`, so the plan, the question and the result reach the operator's
//! terminal. This process only keeps the container alive in between, and ends it well:
//!  - it exits by itself after `limit` (a plugin killed with SIGKILL cannot delete its pod;
//!    the pod's `activeDeadlineSeconds` is the second line), with status 0;
//!  - on SIGTERM (the pod's deletion), SIGINT or SIGHUP it does not leave at once. The
//!    container runtime kills whatever is left in the container when its first process exits,
//!    and a repair may be between stopping and starting the kubelet. It passes SIGTERM on to
//!    the other processes of its own cgroup (the exec'd repair: `nodemedic repair` finishes or
//!    undoes the step in progress and starts the kubelet again on SIGTERM, see
//!    [`super::interrupt`]) and waits up to `grace` for them to exit.
//!
//! The container's processes are found by their cgroup, not by name: every process that
//! `kubectl exec` starts joins the container's cgroup, and with `hostPID` the pod sees every
//! process of the node, so a name would also match the DaemonSet's agent.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use super::interrupt::Interrupts;

const POLL: Duration = Duration::from_millis(200);

/// How the hold ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// `limit` passed.
    Limit,
    /// A signal came (its name); `left` processes of the container were still running after
    /// `grace` (0: every one had exited).
    Signal { signal: &'static str, left: usize },
}

/// The processes (pids, as `proc` numbers them) whose `/proc/<pid>/cgroup` is the same as
/// `own`'s, other than `own` itself. Unreadable processes (gone meanwhile) are skipped.
pub fn same_cgroup(proc: &Path, own: u32) -> Vec<u32> {
    let Ok(mine) = std::fs::read(proc.join(own.to_string()).join("cgroup")) else {
        return vec![];
    };
    let Ok(entries) = std::fs::read_dir(proc) else {
        return vec![];
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| std::fs::read(proc.join(pid.to_string()).join("cgroup")).is_ok_and(|c| c == mine))
        .collect();
    pids.sort_unstable();
    pids
}

/// Keeps the pod alive until `limit` or a signal; see the module's documentation.
pub fn hold(limit: Duration, grace: Duration, out: &mut dyn Write) -> Result<Ended, String> {
    let interrupts = Interrupts::install()?;
    let proc = Path::new("/proc");
    let own = std::process::id();
    let _ = writeln!(
        out,
        "nodemedic hold: keeping this repair pod alive for at most {} s; `kubectl exec` runs the repair",
        limit.as_secs()
    );
    let until = Instant::now() + limit;
    let signal = loop {
        if let Some(signal) = interrupts.received() {
            break signal;
        }
        if Instant::now() >= until {
            let _ = writeln!(out, "nodemedic hold: {} s passed, exiting", limit.as_secs());
            return Ok(Ended::Limit);
        }
        std::thread::sleep(POLL);
    };
    let others = same_cgroup(proc, own);
    let _ = writeln!(
        out,
        "nodemedic hold: {signal}: passing SIGTERM to {} process(es) of this container {:?} and waiting up to {} s",
        others.len(),
        others,
        grace.as_secs()
    );
    for &pid in &others {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let deadline = Instant::now() + grace;
    let left = loop {
        let left = same_cgroup(proc, own);
        if left.is_empty() || Instant::now() >= deadline {
            break left.len();
        }
        std::thread::sleep(POLL);
    };
    let _ = writeln!(
        out,
        "nodemedic hold: exiting, {left} process(es) of this container still running"
    );
    Ok(Ended::Signal { signal, left })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, pid: u32, cgroup: &str) {
        std::fs::create_dir_all(dir.join(pid.to_string())).unwrap();
        std::fs::write(dir.join(pid.to_string()).join("cgroup"), cgroup).unwrap();
    }

    #[test]
    fn siblings_are_the_processes_of_the_same_cgroup() {
        let proc = tempfile::tempdir().unwrap();
        let pod = "0::/kubepods/besteffort/podabc/cid1\n";
        write(proc.path(), 1, "0::/init.scope\n");
        write(proc.path(), 40, pod);
        write(proc.path(), 41, pod);
        write(proc.path(), 7, pod);
        // The DaemonSet's agent: same binary, another container.
        write(proc.path(), 50, "0::/kubepods/burstable/poddef/cid2\n");
        // Not a process directory.
        std::fs::create_dir_all(proc.path().join("self")).unwrap();
        assert_eq!(same_cgroup(proc.path(), 40), vec![7, 41]);
        assert_eq!(same_cgroup(proc.path(), 1), Vec::<u32>::new());
        // A pid whose cgroup cannot be read: nobody is its sibling.
        assert_eq!(same_cgroup(proc.path(), 99), Vec::<u32>::new());
    }
}
