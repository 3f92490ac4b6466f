//! Stopping every process of a pod through its cgroup, never by name.
//!
//! cgroup v2 (kernel 5.14 or later): one write of `1` to the pod cgroup's `cgroup.kill`, which
//! SIGKILLs every process of the subtree, those forked meanwhile included. cgroup v1 (and v2
//! without `cgroup.kill`): SIGTERM to each process of the subtree, then SIGKILL to those left
//! once the pod's grace has passed, listing the subtree again between rounds (a process may
//! fork while it shuts down), until it is empty.
//!
//! A pid read from `cgroup.procs` may belong to another process by the time it is signalled
//! (the first exited, the pid was reused). So each process is pinned first (`pidfd_open`),
//! the subtree is listed again, and only pinned processes whose pid is still listed are
//! signalled (`pidfd_send_signal`): a pidfd names one process for its lifetime, and a pid
//! listed after the pin that matches it is that process, since no two live processes share a
//! pid. The pids are those of the agent's pid namespace: on cgroup v1 the agent needs the
//! host's (`hostPID`) to see them at all.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodemedic_rules::snapshot::CgroupVersion;
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};

use crate::collect::cgroups::{ProcsError, parse_cgroup_procs, subdirs};

/// At most this many directories of a pod's subtree are listed (a pathological tree cannot
/// keep the fence busy).
const MAX_DIRS: usize = 4096;
/// Between two listings.
const POLL: Duration = Duration::from_millis(50);

/// How stopping a pod went.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stopped {
    /// `cgroup.kill` or `signals`.
    pub method: &'static str,
    /// Distinct processes seen in the subtree.
    pub processes: usize,
    /// Processes that ended after SIGTERM.
    pub terminated: usize,
    /// Processes that were sent SIGKILL (or all of them, with `cgroup.kill`).
    pub killed: usize,
    /// Processes still there when it gave up.
    pub remaining: Vec<u32>,
    /// Milliseconds from start to an empty subtree (or giving up).
    pub took_ms: u64,
    /// What went wrong (the subtree could not be listed, `cgroup.kill` refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Stopped {
    /// Whether the pod's subtree is empty now.
    pub fn complete(&self) -> bool {
        self.remaining.is_empty() && self.error.is_none()
    }
}

/// Why a pod's subtree could not be listed in full: the cgroup directory or the
/// `cgroup.procs` file, as the agent sees it.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The subtree has more cgroups than are listed ([`MAX_DIRS`]).
    #[error("{}: more than {MAX_DIRS} cgroups below it", dir.display())]
    TooManyCgroups { dir: PathBuf },
    /// A `cgroup.procs` file could not be read (the pod's own: not even when it is missing).
    #[error("{}: {source}", file.display())]
    Read { file: PathBuf, source: std::io::Error },
    /// A `cgroup.procs` file holds something that is not a pid.
    #[error("{}: {source}", file.display())]
    BadProcs { file: PathBuf, source: ProcsError },
}

/// Every process of the subtree at `dir`, and whether all of it could be listed.
pub fn processes(dir: &Path) -> Result<BTreeSet<u32>, ListError> {
    let mut out = BTreeSet::new();
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        seen += 1;
        if seen > MAX_DIRS {
            return Err(ListError::TooManyCgroups { dir: dir.to_path_buf() });
        }
        let file = d.join("cgroup.procs");
        match std::fs::read_to_string(&file) {
            Ok(text) => match parse_cgroup_procs(&text) {
                Ok(pids) => out.extend(pids),
                Err(source) => return Err(ListError::BadProcs { file, source }),
            },
            // Removed while we walked (its processes exited): nothing there.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && d != dir => continue,
            Err(source) => return Err(ListError::Read { file, source }),
        }
        stack.extend(subdirs(&d).into_iter().map(|(_, p)| p));
    }
    Ok(out)
}

/// [`processes`] again while stopping: a pod cgroup removed meanwhile (its processes exited and
/// the runtime cleaned up) is empty, not an error.
fn relist(dir: &Path) -> Result<BTreeSet<u32>, ListError> {
    match processes(dir) {
        Err(_) if !dir.is_dir() => Ok(BTreeSet::new()),
        other => other,
    }
}

/// Stops every process below the pod cgroup `dir`. `grace`: between SIGTERM and SIGKILL
/// (signals only); `patience`: how long after that (or after `cgroup.kill`) it waits for the
/// subtree to empty before it reports what is left.
pub fn stop_pod(dir: &Path, version: CgroupVersion, grace: Duration, patience: Duration) -> Stopped {
    let started = Instant::now();
    let mut out = Stopped::default();
    let first = match processes(dir) {
        Ok(p) => p,
        Err(e) => {
            out.error = Some(e.to_string());
            out.method = "signals";
            return out;
        }
    };
    out.processes = first.len();
    let kill_file = dir.join("cgroup.kill");
    if version == CgroupVersion::V2 && kill_file.is_file() {
        out.method = "cgroup.kill";
        if let Err(e) = std::fs::write(&kill_file, "1") {
            out.error = Some(format!("{}: {e}", kill_file.display()));
            out.remaining = first.into_iter().collect();
            return out;
        }
        out.killed = out.processes;
        let deadline = started + patience;
        loop {
            match relist(dir) {
                Ok(left) if left.is_empty() => break,
                Ok(left) if Instant::now() >= deadline => {
                    out.remaining = left.into_iter().collect();
                    break;
                }
                Ok(_) => std::thread::sleep(POLL),
                Err(e) => {
                    out.error = Some(e.to_string());
                    break;
                }
            }
        }
        out.took_ms = started.elapsed().as_millis() as u64;
        return out;
    }
    out.method = "signals";
    signal_until_empty(dir, first, grace, patience, started, &mut out);
    out.took_ms = started.elapsed().as_millis() as u64;
    out
}

/// The SIGTERM-then-SIGKILL rounds of [`stop_pod`].
fn signal_until_empty(
    dir: &Path,
    mut listed: BTreeSet<u32>,
    grace: Duration,
    patience: Duration,
    started: Instant,
    out: &mut Stopped,
) {
    let mut all: BTreeSet<u32> = listed.clone();
    let mut termed: BTreeSet<u32> = BTreeSet::new();
    let mut killed: BTreeSet<u32> = BTreeSet::new();
    loop {
        if listed.is_empty() {
            break;
        }
        let kill = started.elapsed() >= grace;
        if started.elapsed() >= grace + patience {
            out.remaining = listed.into_iter().collect();
            break;
        }
        let due: Vec<u32> = listed
            .iter()
            .copied()
            .filter(|pid| kill || !termed.contains(pid))
            .collect();
        let pinned: HashMap<u32, OwnedFd> = due
            .iter()
            .filter_map(|&pid| {
                let p = Pid::from_raw(i32::try_from(pid).ok()?)?;
                pidfd_open(p, PidfdFlags::empty()).ok().map(|fd| (pid, fd))
            })
            .collect();
        let now_listed = match relist(dir) {
            Ok(p) => p,
            Err(e) => {
                out.error = Some(e.to_string());
                out.remaining = listed.into_iter().collect();
                break;
            }
        };
        for (pid, fd) in &pinned {
            if !now_listed.contains(pid) {
                continue; // gone, or not this process any more
            }
            let sig = if kill { Signal::KILL } else { Signal::TERM };
            if pidfd_send_signal(fd, sig).is_ok() {
                if kill {
                    killed.insert(*pid);
                } else {
                    termed.insert(*pid);
                }
            }
        }
        all.extend(now_listed.iter().copied());
        listed = now_listed;
        if !listed.is_empty() {
            std::thread::sleep(POLL);
            listed = match relist(dir) {
                Ok(p) => p,
                Err(e) => {
                    out.error = Some(e.to_string());
                    out.remaining = listed.into_iter().collect();
                    break;
                }
            };
            all.extend(listed.iter().copied());
        }
    }
    out.processes = all.len();
    out.killed = killed.len();
    out.terminated = termed.difference(&killed).count();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_listed_at_any_depth_and_a_missing_pod_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let pod = dir.path().join("podx");
        std::fs::create_dir_all(pod.join("c1/nested/deeper")).unwrap();
        std::fs::create_dir_all(pod.join("c2")).unwrap();
        std::fs::write(pod.join("cgroup.procs"), "").unwrap();
        std::fs::write(pod.join("c1/cgroup.procs"), "11\n12\n").unwrap();
        std::fs::write(pod.join("c1/nested/cgroup.procs"), "").unwrap();
        std::fs::write(pod.join("c1/nested/deeper/cgroup.procs"), "13\n").unwrap();
        std::fs::write(pod.join("c2/cgroup.procs"), "14\n").unwrap();
        assert_eq!(
            processes(&pod).unwrap().into_iter().collect::<Vec<_>>(),
            [11, 12, 13, 14]
        );
        let err = processes(&dir.path().join("gone")).unwrap_err();
        assert!(matches!(&err, ListError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains("gone/cgroup.procs"), "{err}");
        std::fs::write(pod.join("c2/cgroup.procs"), "x\n").unwrap();
        let err = processes(&pod).unwrap_err();
        assert!(matches!(&err, ListError::BadProcs { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!("{}: not a pid: \"x\"", pod.join("c2/cgroup.procs").display())
        );
    }
}
