//! Stopping and starting the kubelet for a repair, and knowing whether it runs.
//!
//! A running kubelet rewrites `cpu_manager_state` from memory, so the checkpoint may only be
//! edited while it is stopped (docs/kubelet.md, "What the kubelet cleans by itself"). Whether it runs is read from the host's
//! `/proc` under the host root ([`crate::collect::procfs::find_kubelet`]): a process whose
//! command line is the kubelet's. A zombie has an empty command line and counts as gone.
//!
//! Stopping: `systemctl stop <unit>` in the host's namespaces. When the agent runs in a pod
//! (the host root's pid 1 has another mount namespace than ours), the command is started in
//! pid 1's mount, UTS, IPC and network namespaces: nodemedic opens `<host>/proc/1/ns/*`, and a
//! thread of its own joins them with setns(2) and starts the command, which inherits them. So
//! the host's own `systemctl` runs, found on the host's file system, with no `nsenter` in the
//! image. Opening another process's namespaces needs ptrace read access to it
//! (`CAP_SYS_PTRACE` towards pid 1), joining them `CAP_SYS_ADMIN`, and a mount namespace also
//! `CAP_SYS_CHROOT`. When that fails (no systemd, or a container without those capabilities),
//! the kubelet gets SIGTERM, but only if
//! the pid read under the host root is the same process in our own pid namespace (same start
//! time in both `/proc`s, which needs `hostPID` in a pod). Starting: `systemctl start <unit>`;
//! when that fails, a supervisor (systemd's `Restart=always`) may still bring it back, so the
//! caller waits for it either way.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::collect::procfs::{find_kubelet, parse_cmdline, parse_stat};
use crate::host::HostPaths;

/// How often a wait polls `/proc`.
const POLL: Duration = Duration::from_millis(50);

/// A kubelet process seen under the host root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KubeletProcess {
    /// Its pid as the host root's `/proc` numbers it.
    pub pid: u32,
    /// Its command line.
    pub args: Vec<String>,
}

/// What went wrong stopping, starting or finding the kubelet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeletError {
    /// The host's `/proc` cannot be read: nobody can tell whether the kubelet runs.
    #[error("{path}: {message}: cannot tell whether the kubelet runs")]
    Proc { path: String, message: String },
    /// A command (`systemctl ...`) failed or did not answer in time: the command and why.
    #[error("{0}")]
    Command(String),
    /// The kubelet could not be signalled.
    #[error("{0}")]
    Signal(String),
    /// A kubelet still runs when it should be gone.
    #[error("{0}")]
    StillRunning(String),
}

impl From<KubeletError> for String {
    fn from(e: KubeletError) -> String {
        e.to_string()
    }
}

/// Whether a kubelet runs on the host. `Err` when the host's `/proc` cannot be read, since
/// then nobody can tell.
pub fn running_kubelet(host: &HostPaths) -> Result<Option<KubeletProcess>, KubeletError> {
    let proc = host.proc();
    if let Err(e) = std::fs::read_dir(&proc) {
        return Err(KubeletError::Proc {
            path: host.display(&proc),
            message: e.to_string(),
        });
    }
    Ok(find_kubelet(host).map(|(pid, args)| KubeletProcess { pid, args }))
}

/// How the kubelet was stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopMethod {
    /// `systemctl stop` (the command line is in [`Stopped::command`]).
    Systemctl,
    /// SIGTERM to its pid, after `systemctl stop` failed.
    Sigterm,
}

/// The outcome of [`KubeletControl::stop`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stopped {
    pub method: StopMethod,
    /// The systemctl command line that was run.
    pub command: Vec<String>,
    /// Why systemctl did not do it, when it did not.
    pub systemctl_error: Option<String>,
    /// Seconds from the stop request until no kubelet process was left.
    pub seconds: f64,
}

/// The outcome of [`KubeletControl::start`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Started {
    /// The systemctl command line that was run.
    pub command: Vec<String>,
    /// Why systemctl failed, when it did (the kubelet may still have been started by its
    /// supervisor).
    pub systemctl_error: Option<String>,
    /// The kubelet process found running afterwards (`None`: none within the timeout).
    pub process: Option<KubeletProcess>,
    /// Seconds until it was seen running (or the timeout).
    pub seconds: f64,
}

/// How to stop and start the host's kubelet.
#[derive(Debug, Clone)]
pub struct KubeletControl {
    pub host: HostPaths,
    /// The systemctl program (a path, or a name looked up on `PATH`).
    pub systemctl: PathBuf,
    /// The systemd-run program that arms the [`Guard`].
    pub systemd_run: PathBuf,
    /// The kubelet's systemd unit.
    pub unit: String,
    /// How long a stop or a start may take, each.
    pub timeout: Duration,
}

/// A restart of the kubelet armed on the host before nodemedic stops it: a transient systemd
/// timer that runs `systemctl start <unit>` after a delay, whatever happens to nodemedic (OOM,
/// a cut `kubectl exec`, SIGKILL). Disarmed only once nodemedic has started the kubelet itself
/// and seen it run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Guard {
    /// The transient unit's name (`<name>.timer` and `<name>.service` on the host).
    pub unit: String,
    /// Seconds after arming that the timer starts the kubelet.
    pub seconds: u64,
    /// The command that armed it.
    pub command: Vec<String>,
}

/// The namespaces a command for the host joins, in this order (all are opened first).
const HOST_NAMESPACES: [(&str, nix::sched::CloneFlags); 4] = [
    ("ipc", nix::sched::CloneFlags::CLONE_NEWIPC),
    ("uts", nix::sched::CloneFlags::CLONE_NEWUTS),
    ("net", nix::sched::CloneFlags::CLONE_NEWNET),
    ("mnt", nix::sched::CloneFlags::CLONE_NEWNS),
];

impl KubeletControl {
    /// Where the commands run: `Some(<host>/proc/1)` when they must join pid 1's namespaces
    /// ([`needs_host_namespaces`]), `None` when they run as they are.
    fn target(&self) -> Option<PathBuf> {
        needs_host_namespaces(&self.host).then(|| self.host.proc().join("1"))
    }

    /// The command line of `systemctl <verb> <unit>` (run in the host's namespaces).
    pub fn command(&self, verb: &str) -> Vec<String> {
        vec![
            self.systemctl.display().to_string(),
            verb.to_string(),
            self.unit.clone(),
        ]
    }

    /// Whether the commands join the namespaces of the host's pid 1.
    pub fn enters_host_namespaces(&self) -> bool {
        self.target().is_some()
    }

    fn run(&self, argv: &[String]) -> Result<(), KubeletError> {
        run_bounded(argv, self.timeout, self.target().as_deref())
    }

    /// Arms the [`Guard`]: `systemd-run --on-active=<seconds>` a transient unit that starts the
    /// kubelet. `Err` when it cannot be armed (no systemd on the host, no permission): the
    /// caller must not stop the kubelet then, unless told to go without a guard.
    pub fn arm_guard(&self, seconds: u64) -> Result<Guard, KubeletError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let unit = format!("nodemedic-kubelet-guard-{}-{stamp}", std::process::id());
        let command = vec![
            self.systemd_run.display().to_string(),
            format!("--unit={unit}"),
            format!("--on-active={seconds}"),
            "--timer-property=AccuracySec=1s".into(),
            "--collect".into(),
            "--".into(),
            self.systemctl.display().to_string(),
            "start".into(),
            self.unit.clone(),
        ];
        self.run(&command)?;
        Ok(Guard { unit, seconds, command })
    }

    /// Disarms `guard` (`systemctl stop <unit>.timer`): the kubelet runs, started by nodemedic.
    pub fn disarm_guard(&self, guard: &Guard) -> Result<(), KubeletError> {
        let command = vec![
            self.systemctl.display().to_string(),
            "stop".into(),
            format!("{}.timer", guard.unit),
        ];
        self.run(&command)
    }

    /// Stops the kubelet `process` and waits until no kubelet runs.
    pub fn stop(&self, process: &KubeletProcess) -> Result<Stopped, KubeletError> {
        let start = Instant::now();
        let command = self.command("stop");
        let systemctl_error = match self.run(&command) {
            Ok(()) => match self.wait_gone(self.timeout.saturating_sub(start.elapsed())) {
                Ok(()) => {
                    return Ok(Stopped {
                        method: StopMethod::Systemctl,
                        command,
                        systemctl_error: None,
                        seconds: start.elapsed().as_secs_f64(),
                    });
                }
                Err(still) => format!("it succeeded, but {still}"),
            },
            Err(e) => e.to_string(),
        };
        tracing::warn!(
            command = command.join(" "),
            error = systemctl_error.as_str(),
            pid = process.pid,
            "systemctl could not stop the kubelet: sending it SIGTERM"
        );
        sigterm(&self.host, process.pid)?;
        let sent = Instant::now();
        self.wait_gone(self.timeout).map_err(|still| {
            KubeletError::StillRunning(format!(
                "{} failed ({systemctl_error}) and after SIGTERM to pid {} {still}",
                command.join(" "),
                process.pid
            ))
        })?;
        tracing::info!(
            pid = process.pid,
            seconds = sent.elapsed().as_secs_f64(),
            "the kubelet exited after SIGTERM"
        );
        Ok(Stopped {
            method: StopMethod::Sigterm,
            command,
            systemctl_error: Some(systemctl_error),
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Starts the kubelet and waits (up to the timeout) until it runs.
    pub fn start(&self) -> Started {
        let start = Instant::now();
        let command = self.command("start");
        let systemctl_error = self.run(&command).err().map(|e| e.to_string());
        let process = self.wait_running(self.timeout.saturating_sub(start.elapsed()));
        Started {
            command,
            systemctl_error,
            process,
            seconds: start.elapsed().as_secs_f64(),
        }
    }

    /// Waits until no kubelet runs; `Err` says which one still does.
    pub fn wait_gone(&self, timeout: Duration) -> Result<(), KubeletError> {
        let deadline = Instant::now() + timeout;
        loop {
            match find_kubelet(&self.host) {
                None => return Ok(()),
                Some((pid, _)) if Instant::now() >= deadline => {
                    return Err(KubeletError::StillRunning(format!(
                        "a kubelet (pid {pid}) still runs after {:.1} s",
                        timeout.as_secs_f64()
                    )));
                }
                Some(_) => std::thread::sleep(POLL),
            }
        }
    }

    /// Waits until a kubelet runs.
    pub fn wait_running(&self, timeout: Duration) -> Option<KubeletProcess> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((pid, args)) = find_kubelet(&self.host) {
                return Some(KubeletProcess { pid, args });
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }
}

/// Whether commands for the host must join pid 1's namespaces: the host root's pid 1 is
/// visible and lives in another mount namespace than this process (or we may not tell).
pub fn needs_host_namespaces(host: &HostPaths) -> bool {
    if host.root() == Path::new("/") {
        return false;
    }
    let theirs = host.proc().join("1/ns/mnt");
    if theirs.symlink_metadata().is_err() {
        return false;
    }
    match (std::fs::read_link(&theirs), std::fs::read_link("/proc/self/ns/mnt")) {
        (Ok(a), Ok(b)) => a != b,
        _ => true,
    }
}

/// Opens the namespaces of the process `proc_pid` (`<proc>/<pid>`) that [`HOST_NAMESPACES`]
/// names, to join them before a command runs.
fn open_namespaces(
    proc_pid: &Path,
) -> Result<Vec<(&'static str, std::fs::File, nix::sched::CloneFlags)>, KubeletError> {
    HOST_NAMESPACES
        .iter()
        .map(|&(name, flag)| {
            let path = proc_pid.join("ns").join(name);
            std::fs::File::open(&path).map(|f| (name, f, flag)).map_err(|e| {
                KubeletError::Command(format!(
                    "cannot open {} to enter the host's namespaces: {e} (needs CAP_SYS_PTRACE and, under \
                     AppArmor, a profile that allows it)",
                    path.display()
                ))
            })
        })
        .collect()
}

/// Runs `argv` and waits at most `timeout`; `Err` with its status and stderr when it fails.
/// With `enter` (`<proc>/<pid>`), the command runs in that process's namespaces.
pub fn run_bounded(argv: &[String], timeout: Duration, enter: Option<&Path>) -> Result<(), KubeletError> {
    let fail = KubeletError::Command;
    let Some((program, args)) = argv.split_first() else {
        return Err(fail("empty command".into()));
    };
    let shown = match enter {
        Some(target) => format!("{} (in the namespaces of {})", argv.join(" "), target.display()),
        None => argv.join(" "),
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = match enter {
        None => command.spawn().map_err(|e| fail(format!("{shown}: {e}")))?,
        Some(target) => {
            // A thread of its own joins the namespaces and starts the command, which inherits
            // them; the thread then ends, and no other thread of nodemedic ever changes
            // namespace. A mount namespace can be joined only by a thread that shares its
            // file-system context (root, working directory) with no other: unshare it first.
            let namespaces = open_namespaces(target)?;
            let joined = std::thread::Builder::new()
                .name("nodemedic-host-ns".into())
                // A plain-text reason: `fail` below puts it into `KubeletError::Command`.
                .spawn(move || -> Result<std::process::Child, String> {
                    let mut command = command;
                    nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)
                        .map_err(|e| format!("unshare(CLONE_FS): {e}"))?;
                    for (name, file, flag) in &namespaces {
                        nix::sched::setns(file, *flag).map_err(|e| {
                            format!(
                                "joining the host's {name} namespace: {e} (needs CAP_SYS_ADMIN{})",
                                if *name == "mnt" { " and CAP_SYS_CHROOT" } else { "" }
                            )
                        })?;
                    }
                    command.spawn().map_err(|e| e.to_string())
                })
                .map_err(|e| fail(format!("{shown}: {e}")))?
                .join()
                .map_err(|_| {
                    fail(format!(
                        "{shown}: the thread that enters the host's namespaces panicked"
                    ))
                })?;
            joined.map_err(|e| fail(format!("{shown}: {e}")))?
        }
    };
    wait_bounded(child, &shown, timeout)
}

/// Waits for `child` at most `timeout` (killing it then); `Err` with its status and stderr.
fn wait_bounded(mut child: std::process::Child, shown: &str, timeout: Duration) -> Result<(), KubeletError> {
    let fail = KubeletError::Command;
    // stderr is read on the side: a child it started in the background (a daemon) may keep
    // the pipe open long after it exited.
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(mut pipe) = child.stderr.take() {
        std::thread::spawn(move || {
            use std::io::Read as _;
            let mut text = String::new();
            let _ = pipe.by_ref().take(4096).read_to_string(&mut text);
            let _ = tx.send(text);
        });
    }
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "{shown}: no answer within {:.0} s",
                    timeout.as_secs_f64()
                )));
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => return Err(fail(format!("{shown}: {e}"))),
        }
    };
    if status.success() {
        return Ok(());
    }
    let stderr = rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default();
    let stderr = stderr.trim();
    Err(fail(if stderr.is_empty() {
        format!("{shown}: {status}")
    } else {
        format!("{shown}: {status}: {stderr}")
    }))
}

/// The start time (clock ticks since boot, field 22) of a `/proc/<pid>/stat` text.
pub fn parse_stat_start_time(stat: &str) -> Option<u64> {
    Some(parse_stat(stat)?.starttime)
}

/// SIGTERM to `pid` of the host root's `/proc`, only if it is the same process in ours.
fn sigterm(host: &HostPaths, pid: u32) -> Result<(), KubeletError> {
    let theirs = host.proc().join(pid.to_string());
    let ours = Path::new("/proc").join(pid.to_string());
    let read = |dir: &Path| -> Option<(Option<u64>, Vec<String>)> {
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
        Some((parse_stat_start_time(&stat), parse_cmdline(&cmdline)))
    };
    match (read(&theirs), read(&ours)) {
        (Some(a), Some(b)) if a == b && a.0.is_some() => {}
        (None, _) => return Ok(()), // exited meanwhile
        _ => {
            return Err(KubeletError::Signal(format!(
                "cannot send SIGTERM to the kubelet: pid {pid} under {} is not the same process in this \
                 process's pid namespace (in a pod, the agent needs hostPID: true)",
                host.display(&host.proc())
            )));
        }
    }
    let pid = i32::try_from(pid).map_err(|_| KubeletError::Signal(format!("pid {pid} out of range")))?;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(KubeletError::Signal(format!("SIGTERM to the kubelet (pid {pid}): {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_start_time() {
        // Full lines as Linux 3.5 and later write them (52 fields).
        let stat = "4242 (kube let) S 1 4242 4242 0 -1 4194560 1234 0 0 0 10 5 0 0 20 0 12 0 987654 1000000 500 \
                    18446744073709551615 1 1 0 0 0 0 0 4096 17415 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert_eq!(parse_stat_start_time(stat), Some(987654));
        assert_eq!(
            parse_stat_start_time(
                "1 (a)) b) S 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 77 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 \
                 0 0 0 0 0 0 0 0 0 0 0 0 0 0"
            ),
            Some(77)
        );
        assert_eq!(parse_stat_start_time("garbage"), None);
        assert_eq!(parse_stat_start_time("1 (x) S 2"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat_start_time(&own).is_some());
    }

    #[test]
    fn host_namespaces_only_for_another_mount_namespace() {
        assert!(!needs_host_namespaces(&HostPaths::new("/", None)));
        let dir = tempfile::tempdir().unwrap();
        // No pid 1 under the root: nothing to enter.
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        assert!(!needs_host_namespaces(&HostPaths::new(dir.path(), None)));
        let ctl = KubeletControl {
            host: HostPaths::new(dir.path(), None),
            systemctl: "systemctl".into(),
            systemd_run: "systemd-run".into(),
            unit: "kubelet".into(),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(ctl.command("stop"), ["systemctl", "stop", "kubelet"]);
        assert!(!ctl.enters_host_namespaces());
        // Our own /proc under another root: pid 1's namespaces unless pid 1 is known to share
        // our mount namespace (reading its ns link needs ptrace access, which a sandbox may deny).
        let same = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/proc", same.path().join("proc")).unwrap();
        let ours = std::fs::read_link("/proc/self/ns/mnt").ok();
        let shared = std::fs::read_link("/proc/1/ns/mnt")
            .ok()
            .is_some_and(|l| Some(l) == ours);
        let ctl = KubeletControl {
            host: HostPaths::new(same.path(), None),
            ..ctl
        };
        assert_eq!(needs_host_namespaces(&ctl.host), !shared);
        assert_eq!(ctl.enters_host_namespaces(), !shared);
        // The command line stays the host's own systemctl either way.
        assert_eq!(ctl.command("start"), ["systemctl", "start", "kubelet"]);
    }

    #[test]
    fn the_guard_is_a_transient_timer_that_starts_the_kubelet() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        let log = dir.path().join("calls");
        let fake = dir.path().join("fake");
        std::fs::write(&fake, format!("#!/bin/sh\necho \"$0 $*\" >> {}\n", log.display())).unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let ctl = KubeletControl {
            host: HostPaths::new(dir.path(), None),
            systemctl: fake.clone(),
            systemd_run: fake.clone(),
            unit: "kubelet.service".into(),
            timeout: Duration::from_secs(5),
        };
        let guard = ctl.arm_guard(45).unwrap();
        assert!(guard.unit.starts_with("nodemedic-kubelet-guard-"), "{}", guard.unit);
        ctl.disarm_guard(&guard).unwrap();
        let calls = std::fs::read_to_string(&log).unwrap();
        let f = fake.display();
        assert_eq!(
            calls,
            format!(
                "{f} --unit={u} --on-active=45 --timer-property=AccuracySec=1s --collect -- {f} start kubelet.service\n\
                 {f} stop {u}.timer\n",
                u = guard.unit
            )
        );
        // No systemd: arming fails, and says with what.
        let ctl = KubeletControl {
            systemd_run: "/nonexistent/systemd-run".into(),
            ..ctl
        };
        let e = ctl.arm_guard(45).unwrap_err().to_string();
        assert!(
            e.starts_with("/nonexistent/systemd-run --unit=nodemedic-kubelet-guard-"),
            "{e}"
        );
    }

    #[test]
    fn commands_report_status_and_stderr() {
        let argv = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(run_bounded(&argv(&["true"]), Duration::from_secs(5), None), Ok(()));
        let e = run_bounded(
            &argv(&["sh", "-c", "echo nope >&2; exit 3"]),
            Duration::from_secs(5),
            None,
        )
        .unwrap_err();
        assert_eq!(
            e,
            KubeletError::Command("sh -c echo nope >&2; exit 3: exit status: 3: nope".into())
        );
        let e = run_bounded(&argv(&["/nonexistent/systemctl", "stop"]), Duration::from_secs(5), None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/systemctl stop: "), "{e}");
        let t = Instant::now();
        let e = run_bounded(&argv(&["sleep", "5"]), Duration::from_millis(200), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no answer within"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn unreadable_proc_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = running_kubelet(&HostPaths::new(dir.path(), None))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/proc") && e.contains("cannot tell whether the kubelet runs"),
            "{e}"
        );
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        assert_eq!(running_kubelet(&HostPaths::new(dir.path(), None)), Ok(None));
    }
}
