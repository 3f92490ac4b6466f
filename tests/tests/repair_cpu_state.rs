//! `repair cpu-state`: the plan, the apply, every refusal, the kubelet stop and start, and
//! crash safety of the write.
//!
//! Most tests run the library (`plan`, `apply`, `run_with`) on fixture host trees
//! (`nodemedic_tests::hosttree`). Kubelets are real processes: a copy of `sleep` named
//! `kubelet`, seen through the host root's own `proc` directory, which holds only symlinks to
//! the `/proc/<pid>` of the processes a test wants visible. So tests running in parallel never
//! see each other's kubelets, and one that exits (or is a zombie: empty command line) is gone.
//! A fake `systemctl` script kills and starts them and records its arguments. The cgroup
//! tests use a real cgroup v1 cpuset sandbox with real `sleep` processes (root, as on CI). The
//! crash tests kill a child running the write (`crash-writer`) at each step and after random
//! delays.

use std::io::BufRead as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nodemedic::cli::args::{CpuStateArgs, parse_alone};
use nodemedic::repair::atomic;
use nodemedic::repair::command::RepairError;
use nodemedic::repair::cpu_state::{self, ApplyOutcome, BACKUP_PREFIX, Options, RunOutcome, Target, Verdict};
use nodemedic::repair::kubelet::StopMethod;
use nodemedic_rules::CpuSet;
use nodemedic_rules::checkpoint::checksum::{self, Candidate};
use nodemedic_rules::checkpoint::{Checkpoint, CpuState, Entries, EntryKey, Verification};
use nodemedic_rules::validate::{StateProblem, validate_static_state};
use nodemedic_tests::cgroup_v1::CpusetSandbox;
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime, container_id, pod_uid};
use serde_json::json;

const NODE: &str = "worker-1";
const EXEC: &str = "spark-kubernetes-executor";

/// A 12-CPU node (6 cores, 2 threads; reserved 0,4): a driver and an executor alive (the
/// executor's entry written non-canonically, `"3,2"`), an executor gone with its entry left
/// (8-9), and a finished batch pod whose CPU was never freed (10).
fn node() -> Node {
    Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .cpus(1, 6, 2)
        .pod(Pod::driver("etl", 2).exclusive("1,7"))
        .pod(Pod::executor("etl", 1).exclusive("2-3"))
        .pod(Pod::executor("etl", 2).exclusive("8-9").gone())
        .pod(Pod::new("batch", 1).exclusive("10").finished("Succeeded"))
        .pod(Pod::new("web", 1).burstable())
}

fn live_exec_uid() -> String {
    pod_uid("etl-exec-1")
}

/// The node's checkpoint with the live executor's entry written `"3,2"` and a V2 checksum
/// over that raw text (as a kubelet that wrote it so would have).
fn raw_checkpoint(node: &Node) -> Vec<u8> {
    let mut cp = node.state().to_checkpoint();
    let Entries::ByPod(map) = &mut cp.entries else { panic!() };
    map.get_mut(&live_exec_uid())
        .unwrap()
        .as_mut()
        .unwrap()
        .insert(EXEC.into(), "3,2".into());
    cp.checksum = u64::from(checksum::checksum(&cp, Candidate::V2).unwrap());
    cp.to_json().into_bytes()
}

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    /// Writes `node` with `checkpoint` (default: [`raw_checkpoint`]), mode 0600, and no
    /// kubelet process.
    fn new(node: Node, checkpoint: Option<Vec<u8>>) -> Host {
        let mut node = node;
        node.raw_checkpoint = Some(checkpoint.unwrap_or_else(|| raw_checkpoint(&node)));
        let dir = tempfile::tempdir().unwrap();
        node.write(dir.path()).unwrap();
        let host = Host { dir };
        // The fixture's kubelet is a file; tests that want one start a real process.
        std::fs::remove_dir_all(host.root().join("proc/1000")).unwrap();
        std::fs::set_permissions(host.checkpoint(), std::fs::Permissions::from_mode(0o600)).unwrap();
        host
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn kubelet_dir(&self) -> PathBuf {
        self.root().join("var/lib/kubelet")
    }

    fn checkpoint(&self) -> PathBuf {
        self.kubelet_dir().join("cpu_manager_state")
    }

    fn read(&self) -> Vec<u8> {
        std::fs::read(self.checkpoint()).unwrap()
    }

    fn backups(&self) -> Vec<PathBuf> {
        backups_in(&self.kubelet_dir())
    }

    fn args(&self, extra: &[&str]) -> Options {
        let root = self.root().to_str().unwrap().to_string();
        let pods = format!("{root}/pods.json");
        let mut a: Vec<String> = ["--host-root", &root, "--node", NODE, "--pods", &pods]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        nodemedic::cli::cpu_state_options(&parse_alone::<CpuStateArgs>("cpu-state", a).unwrap()).unwrap()
    }
}

/// What the kubelet's start-up checks say of `state` on the test node (CPUs 0-11, 0 and 4
/// reserved).
fn startup_problems(state: &CpuState) -> Vec<StateProblem> {
    validate_static_state(
        state,
        &CpuSet::parse("0-11").unwrap(),
        &CpuSet::parse("0,4").unwrap(),
        false,
    )
}

fn backups_in(dir: &Path) -> Vec<PathBuf> {
    let mut b: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().unwrap().starts_with(BACKUP_PREFIX))
        .map(|e| e.path())
        .collect();
    b.sort();
    b
}

/// Runs the command; a confirmation request is answered "no terminal".
fn run(args: &Options) -> (u8, String, RunOutcome) {
    let mut out = Vec::new();
    let mut no_terminal =
        |_: &str| -> Result<bool, RepairError> { Err(RepairError::NotConfirmed("no terminal (test)".into())) };
    let outcome = cpu_state::run_with(args, &mut out, &mut no_terminal).unwrap();
    (outcome.code(), String::from_utf8(out).unwrap(), outcome)
}

fn container_target(uid: &str, container: &str) -> Target {
    Target::Container {
        pod_uid: uid.into(),
        container: container.into(),
    }
}

/// The repaired node's file: V2, live entries byte for byte, stale ones gone, every check of
/// docs/kubelet.md#why-a-kubelet-refuses-to-start holding.
fn assert_repaired(bytes: &[u8]) {
    let cp = Checkpoint::parse(bytes).unwrap();
    assert_eq!(
        cp.verify(),
        Verification::Matched {
            layout: "V2",
            type_name: "CPUManagerCheckpoint",
            v4: false
        }
    );
    let Entries::ByPod(map) = &cp.entries else {
        panic!("{cp:?}")
    };
    let driver = pod_uid("etl-driver");
    let want: Vec<(String, Vec<(String, String)>)> = {
        let mut w = vec![
            (
                driver.clone(),
                vec![("spark-kubernetes-driver".to_string(), "1,7".to_string())],
            ),
            (live_exec_uid(), vec![(EXEC.to_string(), "3,2".to_string())]),
        ];
        w.sort();
        w
    };
    let got: Vec<(String, Vec<(String, String)>)> = map
        .iter()
        .map(|(p, c)| {
            (
                p.clone(),
                c.as_ref()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(got, want, "live entries exactly as written, stale ones gone");
    assert_eq!(cp.default_cpu_set, "0,4-6,8-11");
    let state = cp.state().unwrap();
    let problems = startup_problems(&state);
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn dry_run_shows_the_plan_and_changes_nothing() {
    let host = Host::new(node(), None);
    let before = host.read();
    let (code, out, outcome) = run(&host.args(&[]));
    assert_eq!(code, 1, "{out}");
    let gone = pod_uid("etl-exec-2");
    let batch = pod_uid("batch");
    for want in [
        "repair cpu-state on node worker-1: /var/lib/kubelet/cpu_manager_state",
        "checksum matches V2 as CPUManagerCheckpoint",
        "Remove 2 stale entries:",
        &format!("  - pod {gone} container {EXEC}: CPUs \"8-9\""),
        &format!("why: pod {gone} is not bound to node worker-1; no cgroup"),
        &format!("  - pod {batch} container app (default/batch): CPUs \"10\""),
        "why: pod default/batch has finished (phase Succeeded); cgroup /sys/fs/cgroup/cpuset/kubepods/pod",
        "has 0 processes",
        "Keep 2 live entries exactly as written:",
        &format!("  = pod {} container {EXEC}: CPUs \"3,2\"", live_exec_uid()),
        "CPUs returned to the default set: 8-10",
        "defaultCpuSet: \"0,4-6,11\" -> \"0,4-6,8-11\"",
        "Checks on the result (the kubelet's start-up checks, docs/kubelet.md; online CPUs 0-11, reserved 0,4, strict-cpu-reservation off): all pass",
        "New file: layout V2",
        "-   \"defaultCpuSet\": \"0,4-6,11\",\n+   \"defaultCpuSet\": \"0,4-6,8-11\",",
        &format!("-     \"{gone}\": {{"),
        "Resulting file:\n{\"policyName\":\"static\",\"defaultCpuSet\":\"0,4-6,8-11\",\"entries\":{",
        "Dry run: nothing was changed. To apply: nodemedic repair cpu-state --apply",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("--restart-kubelet"), "the kubelet is not running:\n{out}");
    assert_eq!(host.read(), before, "a dry run writes nothing");
    assert!(host.backups().is_empty());
    assert!(outcome.applied.is_none());
    // The planned bytes are what an apply would write.
    assert_repaired(&outcome.plan.new_bytes);

    // The same plan as JSON.
    let (code, out, _) = run(&host.args(&["--format", "json"]));
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "ready");
    assert_eq!(v["node"], NODE);
    assert_eq!(v["checkpoint"], "/var/lib/kubelet/cpu_manager_state");
    assert_eq!(v["mode"], "600");
    assert_eq!(v["pod_source"], "file");
    assert_eq!(v["cpus_returned"], "8-10");
    assert_eq!(v["old_default"], "0,4-6,11");
    assert_eq!(v["new_default"], "0,4-6,8-11");
    assert_eq!(v["new_layout"], "V2");
    assert_eq!(v["removals"].as_array().unwrap().len(), 2);
    let gone_removal = v["removals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pod_uid"] == gone.as_str())
        .unwrap();
    assert_eq!(
        *gone_removal,
        json!({"kind": "container", "pod_uid": gone, "container": EXEC, "cpus": "8-9",
               "reason": format!("pod {gone} is not bound to node worker-1"), "pod": null, "cgroup": null, "cgroup_processes": null,
               "still_running": null})
    );
    assert_eq!(v["kept"].as_array().unwrap().len(), 2);
    assert_repaired(v["new_file"].as_str().unwrap().as_bytes());
    assert_eq!(v["apply"], serde_json::Value::Null);
    assert_eq!(host.read(), before);
}

#[test]
fn apply_with_the_kubelet_stopped_frees_stale_entries_only_and_is_idempotent() {
    let host = Host::new(node(), None);
    let before = host.read();
    let started = Instant::now();
    let (code, out, outcome) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 0, "{out}");
    let report = outcome.applied.unwrap();
    assert_eq!(report.outcome, ApplyOutcome::Applied, "{report:?}");
    assert!(report.kubelet_was_running.is_none() && report.stopped.is_none() && report.started.is_none());
    assert_eq!(
        report.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
        ["backup", "write-checkpoint"]
    );
    let write = &report.actions[1];
    assert_eq!(write.evidence["cpus_returned"], "8-10");
    assert_eq!(write.evidence["removed"].as_array().unwrap().len(), 2);
    assert!(
        out.contains("Applied: freed 2 stale entries (8-10 CPUs returned to the default set)"),
        "{out}"
    );
    assert!(
        out.contains("Backup: /var/lib/kubelet/cpu_manager_state.nodemedic-backup-"),
        "{out}"
    );

    let after = host.read();
    assert_repaired(&after);
    assert_eq!(after, outcome.plan.new_bytes);
    assert_eq!(
        std::fs::metadata(host.checkpoint()).unwrap().mode() & 0o7777,
        0o600,
        "the file's mode is kept"
    );
    let backups = host.backups();
    assert_eq!(backups.len(), 1);
    assert_eq!(report.backup.as_deref(), Some(backups[0].as_path()));
    assert_eq!(
        std::fs::read(&backups[0]).unwrap(),
        before,
        "the backup is the original"
    );
    assert_eq!(std::fs::metadata(&backups[0]).unwrap().mode() & 0o7777, 0o600);
    assert!(atomic::leftovers(&host.checkpoint()).is_empty());
    eprintln!("apply took {:?}", started.elapsed());

    // Idempotent: nothing left to do, nothing written.
    let (code, out, _) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Nothing to do: no stale entries in /var/lib/kubelet/cpu_manager_state"),
        "{out}"
    );
    assert_eq!(host.read(), after);
    assert_eq!(host.backups().len(), 1);

    // And `scan` agrees: nothing stale, nothing invalid.
    let root = host.root().to_str().unwrap();
    let pods = format!("{root}/pods.json");
    let scan = nodemedic_tests::nodemedic(&[
        "scan",
        "--host-root",
        root,
        "--node",
        NODE,
        "--pods",
        &pods,
        "--format",
        "json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&scan.stdout).unwrap();
    let rules: Vec<&str> = nodemedic_tests::finding_rules(&report);
    for rule in [
        "stale-cpu-assignment",
        "checkpoint-invalid-state",
        "checkpoint-unreadable",
    ] {
        assert!(!rules.contains(&rule), "{rule} after the repair: {report:#}");
    }
}

#[test]
fn apply_needs_confirmation_or_yes() {
    let host = Host::new(node(), None);
    let before = host.read();
    // No terminal (the test's confirm answers so): refused.
    let (code, out, outcome) = run(&host.args(&["--apply"]));
    assert_eq!(code, 1);
    assert!(
        out.contains("Not applied: no terminal (test); nothing was changed"),
        "{out}"
    );
    assert!(outcome.applied.is_none());
    // Answered "no".
    let mut buf = Vec::new();
    let o = cpu_state::run_with(&host.args(&["--apply"]), &mut buf, &mut |_| Ok(false)).unwrap();
    assert_eq!(o.code(), 1);
    assert!(String::from_utf8(buf).unwrap().contains("Not applied: not confirmed"));
    assert_eq!(host.read(), before);
    assert!(host.backups().is_empty());
    // Answered "yes".
    let mut buf = Vec::new();
    let o = cpu_state::run_with(&host.args(&["--apply"]), &mut buf, &mut |_| Ok(true)).unwrap();
    assert_eq!(o.code(), 0);
    assert_repaired(&host.read());
}

#[test]
fn refuses_an_unknown_checksum_unless_forced() {
    let n = node();
    let mut cp = Checkpoint::parse(&raw_checkpoint(&n)).unwrap();
    cp.checksum = 1337;
    let host = Host::new(n, Some(cp.to_json().into_bytes()));
    let before = host.read();
    let (code, out, outcome) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 1, "{out}");
    let Verdict::Refused { reasons } = &outcome.plan.verdict else {
        panic!("{:?}", outcome.plan.verdict)
    };
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with("the stored checksum 1337 matches no known kubelet layout"),
        "{reasons:?}"
    );
    assert!(out.contains("Refused: nothing will be changed, because"), "{out}");
    assert!(out.contains("--force-unknown-layout"), "{out}");
    assert_eq!(host.read(), before);
    assert!(host.backups().is_empty());

    let (code, out, _) = run(&host.args(&["--apply", "--yes", "--force-unknown-layout"]));
    assert_eq!(code, 0, "{out}");
    assert_repaired(&host.read());
    assert_eq!(std::fs::read(&host.backups()[0]).unwrap(), before);
}

#[test]
fn refuses_an_unreadable_checkpoint() {
    let host = Host::new(
        node(),
        Some(b"{\"policyName\":\"static\",\"defaultCpuSet\":\"0-".to_vec()),
    );
    let before = host.read();
    let (code, out, outcome) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 1, "{out}");
    let Verdict::Refused { reasons } = &outcome.plan.verdict else {
        panic!()
    };
    assert!(
        reasons[0].starts_with("/var/lib/kubelet/cpu_manager_state is unreadable (invalid JSON"),
        "{reasons:?}"
    );
    assert_eq!(host.read(), before);
    // A bad cpuset is unreadable too.
    let host = Host::new(
        node(),
        Some(br#"{"policyName":"static","defaultCpuSet":"0-x","checksum":0}"#.to_vec()),
    );
    let (code, _, outcome) = run(&host.args(&[]));
    assert_eq!(code, 1);
    assert!(
        matches!(&outcome.plan.verdict, Verdict::Refused { reasons } if reasons[0].contains("field defaultCpuSet")),
        "{:?}",
        outcome.plan.verdict
    );
    // No file at all: could not run.
    std::fs::remove_file(host.checkpoint()).unwrap();
    let mut out = Vec::new();
    let e = cpu_state::run_with(&host.args(&[]), &mut out, &mut |_| Ok(true))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cpu_manager_state: no such file"), "{e}");
}

#[test]
fn refuses_a_result_that_breaks_section_3() {
    // Two CPUs were hot-added: default plus entries no longer cover the online CPUs, and
    // freeing stale entries does not change that (kubernetes #84333).
    let host = Host::new(node(), None);
    std::fs::write(host.root().join("sys/devices/system/cpu/online"), "0-13\n").unwrap();
    let before = host.read();
    let (code, out, outcome) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 1, "{out}");
    let Verdict::Refused { reasons } = &outcome.plan.verdict else {
        panic!()
    };
    assert_eq!(
        reasons,
        &[
            "the result would fail the kubelet's start-up checks (current set of available CPUs \"0-13\" doesn't \
             match with CPUs in state \"0-11\"): the kubelet would refuse to start with it"
        ]
    );
    assert_eq!(host.read(), before);

    // A reserved CPU held by a stale entry is returned, and that is what makes it valid.
    let mut n = node();
    n.kubelet_yaml = n
        .kubelet_yaml
        .replace("reservedSystemCPUs: \"0,4\"", "reservedSystemCPUs: \"0,4,10\"");
    let host = Host::new(n, None);
    let (code, out, _) = run(&host.args(&[]));
    assert_eq!(code, 1);
    assert!(
        out.contains("reserved 0,4,10, strict-cpu-reservation off): all pass"),
        "{out}"
    );

    // strict-cpu-reservation: the reserved CPUs must stay out of the default set; here the
    // file keeps them in, and the repair does not pretend otherwise.
    let mut n = node();
    n.kubelet_yaml
        .push_str("cpuManagerPolicyOptions:\n  strict-cpu-reservation: \"true\"\n");
    let host = Host::new(n, None);
    let (code, _, outcome) = run(&host.args(&[]));
    assert_eq!(code, 1);
    let Verdict::Refused { reasons } = &outcome.plan.verdict else {
        panic!()
    };
    assert!(
        reasons[0].contains("some of strictly reserved cpus: \"0,4\" are present in defaultCpuSet"),
        "{reasons:?}"
    );
}

#[test]
fn frees_v3_pod_level_entries() {
    let n = node();
    let driver = pod_uid("etl-driver");
    let gone = pod_uid("etl-exec-2");
    // Pod-level CPUs 11 for the live driver, and 8-9 for the gone executor, instead of its
    // container entry.
    let mut state = n.state();
    state
        .assignments
        .retain(|a| !matches!(&a.key, EntryKey::Container { pod_uid, .. } if *pod_uid == gone));
    state.pod_assignments = vec![
        (driver.clone(), CpuSet::parse("11").unwrap()),
        (gone.clone(), CpuSet::parse("8-9").unwrap()),
    ];
    state.pod_assignments.sort_by(|a, b| a.0.cmp(&b.0));
    state.default_cpus = CpuSet::parse("0,4-6").unwrap();
    let bytes = state.to_checkpoint_json().into_bytes();
    assert!(matches!(
        Checkpoint::parse(&bytes).unwrap().verify(),
        Verification::Matched { layout: "V3", .. }
    ));
    let host = Host::new(n, Some(bytes));
    let (code, out, outcome) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("  - pod {gone} (pod-level): CPUs \"8-9\"")),
        "{out}"
    );
    assert!(
        out.contains(&format!("  = pod {driver} (pod-level): CPUs \"11\"")),
        "{out}"
    );
    assert!(out.contains("defaultCpuSet: \"0,4-6\" -> \"0,4-6,8-10\""), "{out}");
    assert_eq!(outcome.plan.new_layout, Some("V3"));
    let cp = Checkpoint::parse(&host.read()).unwrap();
    assert_eq!(
        cp.verify(),
        Verification::Matched {
            layout: "V3",
            type_name: "CPUManagerCheckpoint",
            v4: false
        }
    );
    let s = cp.state().unwrap();
    assert_eq!(s.pod_assignments, [(driver, CpuSet::parse("11").unwrap())]);
    assert_eq!(s.assignments.len(), 2);
    assert!(startup_problems(&s).is_empty());
}

// ---------------------------------------------------------------------------------------
// Kubelets: real processes, a fake systemctl.

fn sleep_binary() -> PathBuf {
    ["/bin/sleep", "/usr/bin/sleep"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("sleep")
}

/// Makes `pid` visible under the host root's `proc` (replacing a fixture entry of that number).
fn expose(root: &Path, pid: u32) {
    let link = root.join("proc").join(pid.to_string());
    if link.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(&link).unwrap();
    } else {
        let _ = std::fs::remove_file(&link);
    }
    symlink(format!("/proc/{pid}"), &link).unwrap();
}

fn cmdline(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).replace('\0', " ")
}

/// A kubelet that is a renamed `sleep`, and a `systemctl` that stops and starts it.
struct FakeKubelet {
    bin: tempfile::TempDir,
    first: Child,
}

#[derive(Clone, Copy, PartialEq)]
enum Stop {
    /// `systemctl stop` kills the kubelet.
    Works,
    /// `systemctl stop` fails (no systemd, no capabilities): the repair must fall back to SIGTERM.
    Fails,
}

/// Shell run by the fakes at the steps of a `--restart-kubelet` repair (`$PPID` is the
/// repair: `kill -9 $PPID` kills it right there).
#[derive(Default, Clone)]
struct Hooks {
    /// At the end of `systemd-run` (the guard is armed, the kubelet not yet stopped).
    armed: String,
    /// After `systemctl stop kubelet` stopped it.
    stopped: String,
    /// At `systemctl start kubelet`, before it starts one.
    starting: String,
}

impl FakeKubelet {
    /// Starts the kubelet, visible under `root`; `on_start` is shell run after
    /// `systemctl start` started a new one.
    fn start(root: &Path, stop: Stop, on_start: &str) -> FakeKubelet {
        Self::start_with(root, stop, on_start, &Hooks::default())
    }

    /// [`Self::start`] with shell run at the other steps too. `systemctl start` starts no second
    /// kubelet while one runs (as systemd does), and `systemd-run --on-active=N ... --
    /// <command>` runs `<command>` after N seconds from a process of its own, which
    /// `systemctl stop <unit>.timer` kills: a guard that outlives the repair, like systemd's.
    fn start_with(root: &Path, stop: Stop, on_start: &str, hooks: &Hooks) -> FakeKubelet {
        let bin = tempfile::tempdir().unwrap();
        let kubelet = bin.path().join("kubelet");
        std::fs::copy(sleep_binary(), &kubelet).unwrap();
        let first = Command::new(&kubelet)
            .arg("600")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Right after exec the command line may still read empty for a moment.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cmdline(first.id()).starts_with(&kubelet.display().to_string()) {
            assert!(Instant::now() < deadline, "the fake kubelet did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        let pidfile = bin.path().join("kubelet.pid");
        std::fs::write(&pidfile, first.id().to_string()).unwrap();
        expose(root, first.id());
        let stop_body = match stop {
            Stop::Works => format!("kill $(cat {pidfile})", pidfile = pidfile.display()),
            Stop::Fails => {
                "echo 'Failed to stop kubelet.service: Interactive authentication required.' >&2; exit 1".into()
            }
        };
        let b = bin.path().display();
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> {log}\n\
             running() {{ s=$(awk '{{print $3}}' /proc/$(cat {pidfile})/stat 2>/dev/null); [ -n \"$s\" ] && [ \"$s\" != Z ]; }}\n\
             case \"$1 $2\" in\n\
             stop\\ *.timer)\n    u=${{2%.timer}}\n    [ -f {b}/guard-$u.pid ] && kill $(cat {b}/guard-$u.pid) 2>/dev/null\n    \
             rm -f {b}/guard-$u.pid\n    ;;\n\
             stop\\ *)\n    {stop_body}\n    {stopped}\n    ;;\n\
             start\\ *)\n    {starting}\n    if running; then exit 0; fi\n    \
             {kubelet} 600 </dev/null >/dev/null 2>&1 &\n    echo $! > {pidfile}\n    ln -sf /proc/$! {proc}/$!\n    {on_start}\n    ;;\nesac\n",
            log = bin.path().join("calls.log").display(),
            kubelet = kubelet.display(),
            pidfile = pidfile.display(),
            proc = root.join("proc").display(),
            stopped = hooks.stopped,
            starting = hooks.starting,
        );
        let systemd_run = format!(
            "#!/bin/sh\necho \"systemd-run $*\" >> {log}\nunit=\ndelay=\n\
             while [ $# -gt 0 ]; do\n  case \"$1\" in\n    --unit=*) unit=${{1#--unit=}} ;;\n    \
             --on-active=*) delay=${{1#--on-active=}} ;;\n    --) shift; break ;;\n    --*) ;;\n    *) break ;;\n  esac\n  shift\ndone\n\
             setsid sh -c 'sleep \"$0\"; exec \"$@\"' \"$delay\" \"$@\" </dev/null >/dev/null 2>&1 &\n\
             echo $! > {b}/guard-$unit.pid\n{armed}\n",
            log = bin.path().join("calls.log").display(),
            armed = hooks.armed,
        );
        let systemd_run_path = bin.path().join("systemd-run");
        std::fs::write(&systemd_run_path, systemd_run).unwrap();
        std::fs::set_permissions(&systemd_run_path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let systemctl = bin.path().join("systemctl");
        std::fs::write(&systemctl, script).unwrap();
        std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeKubelet { bin, first }
    }

    fn systemctl(&self) -> String {
        self.bin.path().join("systemctl").to_str().unwrap().to_string()
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.bin.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// [`Self::calls`] with the guard's two shown as `arm guard` and `disarm guard`, once
    /// checked that the disarmed unit is the armed one and that it starts the kubelet.
    fn guarded_calls(&self) -> Vec<String> {
        let calls = self.calls();
        let unit = calls
            .iter()
            .find_map(|c| c.strip_prefix("systemd-run --unit="))
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_string);
        calls
            .into_iter()
            .map(|c| match &unit {
                Some(u)
                    if c.starts_with(&format!("systemd-run --unit={u} --on-active="))
                        && c.ends_with(&format!("-- {} start kubelet", self.systemctl())) =>
                {
                    "arm guard".to_string()
                }
                Some(u) if c == format!("stop {u}.timer") => "disarm guard".to_string(),
                _ => c,
            })
            .collect()
    }

    /// The current kubelet's pid (the last one started).
    fn pid(&self) -> u32 {
        std::fs::read_to_string(self.bin.path().join("kubelet.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn ours(&self, pid: u32) -> bool {
        cmdline(pid).starts_with(&self.bin.path().join("kubelet").display().to_string())
    }

    fn flags(&self, extra: &[&str]) -> Vec<String> {
        let systemd_run = self.bin.path().join("systemd-run").display().to_string();
        let mut f: Vec<String> = [
            "--systemctl",
            &self.systemctl(),
            "--systemd-run",
            &systemd_run,
            "--kubelet-timeout-seconds",
            "10",
            "--settle-seconds",
            "0.5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        f.extend(extra.iter().map(|s| s.to_string()));
        f
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        // Guards still armed: their session (the timer's shell and its sleep), so none fires later.
        for e in std::fs::read_dir(self.bin.path()).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("guard-") {
                if let Some(pid) = std::fs::read_to_string(e.path())
                    .ok()
                    .and_then(|p| p.trim().parse::<i32>().ok())
                {
                    let _ =
                        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
        let _ = self.first.kill();
        let _ = self.first.wait();
        // A kubelet the fake systemctl started: ours by its command line, ended by its pid.
        let pid = self.pid();
        if pid != self.first.id() && self.ours(pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn args_with(host: &Host, kubelet: &FakeKubelet, extra: &[&str]) -> Options {
    let flags = kubelet.flags(extra);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    host.args(&flags)
}

#[test]
fn refuses_while_the_kubelet_runs_without_restart_kubelet() {
    let host = Host::new(node(), None);
    let kubelet = FakeKubelet::start(host.root(), Stop::Works, "");
    let before = host.read();
    let (code, out, outcome) = run(&args_with(&host, &kubelet, &["--apply", "--yes"]));
    assert_eq!(code, 1, "{out}");
    assert!(outcome.applied.is_none());
    assert!(
        out.contains(&format!("  kubelet:    running (pid {})", kubelet.first.id())),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Not applied: the kubelet is running (pid {}): it would overwrite the file from its memory; pass --restart-kubelet",
            kubelet.first.id()
        )),
        "{out}"
    );
    assert_eq!(host.read(), before);
    assert!(host.backups().is_empty());
    assert!(kubelet.calls().is_empty(), "the kubelet was not touched");
    assert!(kubelet.ours(kubelet.first.id()), "still running");

    // The dry run says how to apply on a node whose kubelet runs.
    let (code, out, _) = run(&args_with(&host, &kubelet, &[]));
    assert_eq!(code, 1);
    assert!(
        out.contains("To apply: nodemedic repair cpu-state --apply --restart-kubelet"),
        "{out}"
    );
}

#[test]
fn restart_kubelet_stops_writes_and_starts_it() {
    let host = Host::new(node(), None);
    let kubelet = FakeKubelet::start(host.root(), Stop::Works, "");
    let first = kubelet.first.id();
    let before = host.read();
    let t = Instant::now();
    let (code, out, outcome) = run(&args_with(&host, &kubelet, &["--apply", "--yes", "--restart-kubelet"]));
    eprintln!("apply with a kubelet restart took {:?}", t.elapsed());
    assert_eq!(code, 0, "{out}");
    let report = outcome.applied.unwrap();
    assert_eq!(report.outcome, ApplyOutcome::Applied, "{report:#?}");
    assert_eq!(
        kubelet.guarded_calls(),
        ["arm guard", "stop kubelet", "start kubelet", "disarm guard"]
    );
    assert_eq!(report.kubelet_was_running.as_ref().unwrap().pid, first);
    let stopped = report.stopped.as_ref().unwrap();
    assert_eq!(stopped.method, StopMethod::Systemctl);
    assert_eq!(stopped.command, [kubelet.systemctl(), "stop".into(), "kubelet".into()]);
    let started = report.started.as_ref().unwrap();
    let new_pid = kubelet.pid();
    assert_ne!(new_pid, first);
    assert_eq!(started.process.as_ref().unwrap().pid, new_pid);
    assert!(kubelet.ours(new_pid), "the new kubelet runs");
    assert!(!kubelet.ours(first), "the old one is gone");
    assert_eq!(
        report.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
        [
            "arm-guard",
            "stop-kubelet",
            "backup",
            "write-checkpoint",
            "start-kubelet",
            "disarm-guard"
        ]
    );
    assert!(!report.kubelet_rewrote);
    assert!(report.came_back.is_empty());
    assert_repaired(&host.read());
    assert_eq!(std::fs::read(&host.backups()[0]).unwrap(), before);
    assert!(
        out.contains("stop-kubelet: a running kubelet rewrites cpu_manager_state from memory"),
        "{out}"
    );
}

#[test]
fn sigterm_when_systemctl_cannot_stop_the_kubelet() {
    let host = Host::new(node(), None);
    let kubelet = FakeKubelet::start(host.root(), Stop::Fails, "");
    let first = kubelet.first.id();
    let (code, out, outcome) = run(&args_with(&host, &kubelet, &["--apply", "--yes", "--restart-kubelet"]));
    assert_eq!(code, 0, "{out}");
    let report = outcome.applied.unwrap();
    let stopped = report.stopped.as_ref().unwrap();
    assert_eq!(stopped.method, StopMethod::Sigterm);
    assert!(
        stopped
            .systemctl_error
            .as_deref()
            .unwrap()
            .ends_with("exit status: 1: Failed to stop kubelet.service: Interactive authentication required."),
        "{stopped:?}"
    );
    let mut first_child = kubelet;
    let status = first_child.first.wait().unwrap();
    assert_eq!(status.signal(), Some(15), "the kubelet got SIGTERM");
    assert_eq!(
        first_child.guarded_calls(),
        ["arm guard", "stop kubelet", "start kubelet", "disarm guard"]
    );
    assert_ne!(first_child.pid(), first);
    assert_repaired(&host.read());
}

#[test]
fn never_signals_a_pid_that_is_another_process_here() {
    // The host root's /proc numbers the kubelet 4194000 (another pid namespace, as in a pod
    // without hostPID); in ours that pid is not that process. systemctl fails, and SIGTERM
    // must not be sent to whatever has that number here.
    let host = Host::new(node(), None);
    let kubelet = FakeKubelet::start(host.root(), Stop::Fails, "");
    let first = kubelet.first.id();
    std::fs::remove_file(host.root().join(format!("proc/{first}"))).unwrap();
    symlink(format!("/proc/{first}"), host.root().join("proc/4194000")).unwrap();
    let before = host.read();
    let (code, out, outcome) = run(&args_with(&host, &kubelet, &["--apply", "--yes", "--restart-kubelet"]));
    assert_eq!(code, 1, "{out}");
    let report = outcome.applied.unwrap();
    assert_eq!(report.outcome, ApplyOutcome::Aborted);
    assert!(
        report
            .message
            .starts_with("could not stop the kubelet: cannot send SIGTERM to the kubelet: pid 4194000")
            && report.message.contains("hostPID: true")
            && report.message.ends_with("nothing was written"),
        "{}",
        report.message
    );
    assert_eq!(kubelet.guarded_calls(), ["arm guard", "stop kubelet", "disarm guard"]);
    assert!(kubelet.ours(first), "the kubelet was left alone");
    assert_eq!(host.read(), before);
    assert!(host.backups().is_empty());
}

#[test]
fn aborts_when_the_file_changed_between_plan_and_apply() {
    let host = Host::new(node(), None);
    let kubelet = FakeKubelet::start(host.root(), Stop::Works, "");
    let args = args_with(&host, &kubelet, &["--apply", "--yes", "--restart-kubelet"]);
    let plan = cpu_state::plan(&args).unwrap();
    assert!(plan.ready());
    // The kubelet admits a pod before it is stopped: the file the plan was made for is gone.
    let changed = [host.read(), b"\n".to_vec()].concat();
    std::fs::write(host.checkpoint(), &changed).unwrap();
    let report = cpu_state::apply(&plan, &args.apply);
    assert_eq!(report.outcome, ApplyOutcome::Aborted, "{report:#?}");
    assert_eq!(report.end().exit_code(), 1);
    assert!(
        report
            .message
            .starts_with("/var/lib/kubelet/cpu_manager_state changed since the plan: nothing was written"),
        "{}",
        report.message
    );
    assert_eq!(host.read(), changed);
    assert!(host.backups().is_empty());
    // The kubelet it stopped is running again.
    assert_eq!(
        kubelet.guarded_calls(),
        ["arm guard", "stop kubelet", "start kubelet", "disarm guard"]
    );
    assert!(kubelet.ours(kubelet.pid()));
    assert_eq!(
        report.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
        ["arm-guard", "stop-kubelet", "start-kubelet", "disarm-guard"]
    );

    // Planned again, it applies.
    let plan = cpu_state::plan(&args).unwrap();
    let report = cpu_state::apply(&plan, &args.apply);
    assert_eq!(report.outcome, ApplyOutcome::Applied, "{report:#?}");
    assert_repaired(&host.read());
}

#[test]
fn reports_entries_the_restarted_kubelet_writes_back() {
    let host = Host::new(node(), None);
    let original = host.kubelet_dir().join("original-copy");
    std::fs::write(&original, host.read()).unwrap();
    // A kubelet that still believes in the stale containers writes them back on start.
    let kubelet = FakeKubelet::start(
        host.root(),
        Stop::Works,
        &format!(
            "cp {} {}.tmp && mv {}.tmp {}",
            original.display(),
            host.checkpoint().display(),
            host.checkpoint().display(),
            host.checkpoint().display()
        ),
    );
    let (code, out, outcome) = run(&args_with(&host, &kubelet, &["--apply", "--yes", "--restart-kubelet"]));
    assert_eq!(code, 3, "written, but a later check failed: {out}");
    let report = outcome.applied.unwrap();
    assert_eq!(report.outcome, ApplyOutcome::AppliedWithProblems);
    assert!(report.kubelet_rewrote);
    let gone = pod_uid("etl-exec-2");
    let batch = pod_uid("batch");
    let mut want = vec![container_target(&gone, EXEC), container_target(&batch, "app")];
    want.sort();
    assert_eq!(report.came_back, want);
    assert!(out.contains("Applied, with problems:"), "{out}");
    assert!(out.contains("the kubelet wrote back removed entries"), "{out}");
}

// ---------------------------------------------------------------------------------------
// A real cgroup v1 cpuset hierarchy with real processes.

struct CgroupHost {
    _sandbox: CpusetSandbox,
    root: tempfile::TempDir,
    live: String,
    empty: String,
    gone: String,
    busy: String,
    busy_pid: u32,
}

/// Pods L (alive: a sleep pinned to CPU 1), E (cgroup, no processes), G (no cgroup) and B
/// (a sleep in its cgroup, but missing from the pod list), on a host root whose sysfs says 5
/// CPUs, whose cgroups are the machine's, and whose `proc` shows only L's sleep: B's
/// process is found from `cgroup.procs` alone.
fn cgroup_host() -> CgroupHost {
    let mut sb = CpusetSandbox::new("nodemedic-repair").expect("cgroup v1 cpuset sandbox (run as root)");
    let (live, empty, gone, busy) = (
        pod_uid("repair-live"),
        pod_uid("repair-empty"),
        pod_uid("repair-gone"),
        pod_uid("repair-busy"),
    );
    let live_leaf = format!("kubepods/pod{live}/{}", container_id("repair-live/app"));
    sb.mkdir(&live_leaf, Some("1")).unwrap();
    let live_pid = sb.spawn_sleep(&live_leaf).unwrap();
    sb.mkdir(
        &format!("kubepods/burstable/pod{empty}/{}", container_id("repair-empty/app")),
        Some("0"),
    )
    .unwrap();
    let busy_leaf = format!("kubepods/pod{busy}/{}", container_id("repair-busy/app"));
    sb.mkdir(&busy_leaf, None).unwrap();
    let busy_pid = sb.spawn_sleep(&busy_leaf).unwrap();

    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    std::fs::create_dir_all(r.join("proc")).unwrap();
    symlink(format!("/proc/{live_pid}"), r.join(format!("proc/{live_pid}"))).unwrap();
    // Written an hour ago: the kubelet had every chance to drop stale entries itself.
    sb.write_host(r, "0-4", &[(&live, "1"), (&empty, "2"), (&gone, "3"), (&busy, "4")])
        .unwrap();
    CgroupHost {
        _sandbox: sb,
        root,
        live,
        empty,
        gone,
        busy,
        busy_pid,
    }
}

impl CgroupHost {
    fn args(&self, extra: &[&str]) -> Options {
        let mut a = vec!["--host-root", self.root.path().to_str().unwrap(), "--node", "cg-node"];
        a.extend_from_slice(extra);
        nodemedic::cli::cpu_state_options(&parse_alone::<CpuStateArgs>("cpu-state", a).unwrap()).unwrap()
    }

    fn checkpoint(&self) -> PathBuf {
        self.root.path().join("var/lib/kubelet/cpu_manager_state")
    }

    /// A pods file listing only the live pod.
    fn pods_file(&self) -> String {
        let pods = json!({"apiVersion": "v1", "kind": "List", "items": [{
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "live", "namespace": "default", "uid": self.live},
            "spec": {"nodeName": "cg-node", "containers": [{"name": "app", "image": "busybox",
                     "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}]},
            "status": {"phase": "Running", "qosClass": "Guaranteed"}
        }]});
        let path = self.root.path().join("pods.json");
        std::fs::write(&path, pods.to_string()).unwrap();
        path.to_str().unwrap().to_string()
    }
}

#[test]
fn real_cgroups_refuse_while_a_stale_pod_still_has_processes() {
    let h = cgroup_host();
    let pods = h.pods_file();
    let before = std::fs::read(h.checkpoint()).unwrap();
    let (code, out, outcome) = run(&h.args(&["--pods", &pods, "--apply", "--yes"]));
    assert_eq!(code, 1, "{out}");
    let plan = &outcome.plan;
    let stale: Vec<String> = plan
        .removals
        .iter()
        .map(|r| r.target.pod_uid().unwrap().to_string())
        .collect();
    let mut want = vec![h.empty.clone(), h.gone.clone(), h.busy.clone()];
    want.sort();
    let mut got = stale.clone();
    got.sort();
    assert_eq!(got, want, "stale by the pod list");
    let Verdict::Refused { reasons } = &plan.verdict else {
        panic!("{:?}", plan.verdict)
    };
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with(&format!(
            "pod {} container app is stale by the pods file (pod {} is not bound to node cg-node) but its cgroup /sys/fs/cgroup/cpuset/{}/kubepods/pod{} shows 1 process in its cgroups: something still runs there",
            h.busy, h.busy, h._sandbox.name, h.busy
        )),
        "{reasons:?}"
    );
    assert_eq!(std::fs::read(h.checkpoint()).unwrap(), before);
    assert!(backups_in(h.checkpoint().parent().unwrap()).is_empty());
}

#[test]
fn real_cgroups_free_empty_and_gone_pods_and_keep_the_live_one() {
    let h = cgroup_host();
    // Liveness from the cgroups (no pod list): L and B have processes, so they are alive;
    // E (empty cgroup) and G (no cgroup) are stale. B's process must be visible in `proc`
    // for the cgroup liveness to count it (the repair's own count of `cgroup.procs` would
    // refuse otherwise, as the test above shows).
    expose(h.root.path(), h.busy_pid);
    let (code, out, outcome) = run(&h.args(&["--offline", "--apply", "--yes"]));
    assert_eq!(code, 0, "{out}");
    assert_eq!(outcome.plan.pod_source.as_str(), "cgroups");
    let report = outcome.applied.unwrap();
    assert_eq!(report.outcome, ApplyOutcome::Applied);
    let cp = Checkpoint::parse(&std::fs::read(h.checkpoint()).unwrap()).unwrap();
    assert!(matches!(cp.verify(), Verification::Matched { layout: "V2", .. }));
    let s = cp.state().unwrap();
    assert_eq!(s.default_cpus.to_string(), "0,2-3");
    let owners: Vec<String> = s
        .assignments
        .iter()
        .map(|a| match &a.key {
            EntryKey::Container { pod_uid, .. } => pod_uid.clone(),
            EntryKey::ContainerId { container_id } => container_id.clone(),
        })
        .collect();
    let mut want = vec![h.live.clone(), h.busy.clone()];
    want.sort();
    assert_eq!(owners, want);
    assert!(validate_static_state(&s, &CpuSet::parse("0-4").unwrap(), &CpuSet::parse("0").unwrap(), false).is_empty());
    let (code, out, _) = run(&h.args(&["--offline", "--apply", "--yes"]));
    assert_eq!(code, 0);
    assert!(out.contains("Nothing to do"), "{out}");
}

// ---------------------------------------------------------------------------------------
// Crash safety: the writer killed at every step, and at random moments.

const STEPS: [&str; 6] = ["backup", "temp_created", "written", "synced", "renamed", "dir_synced"];

struct CrashDir {
    dir: tempfile::TempDir,
    inputs: tempfile::TempDir,
    old: Vec<u8>,
    new: Vec<u8>,
}

impl CrashDir {
    fn new(size: usize) -> CrashDir {
        let dir = tempfile::tempdir().unwrap();
        let inputs = tempfile::tempdir().unwrap();
        let old: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
        let new: Vec<u8> = (0..size + 7).map(|i| b'A' + (i % 23) as u8).collect();
        let cp = dir.path().join("cpu_manager_state");
        std::fs::write(&cp, &old).unwrap();
        std::fs::set_permissions(&cp, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(inputs.path().join("new"), &new).unwrap();
        CrashDir { dir, inputs, old, new }
    }

    fn checkpoint(&self) -> PathBuf {
        self.dir.path().join("cpu_manager_state")
    }

    fn command(&self, step: Option<&str>) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_crash-writer"));
        c.arg(self.checkpoint())
            .arg(self.dir.path())
            .arg(self.inputs.path().join("new"));
        if let Some(s) = step {
            c.arg(s);
        }
        c
    }

    /// Checks what a killed writer left; returns (new content, leftover temporary files).
    fn check(&self) -> (bool, usize) {
        let now = std::fs::read(self.checkpoint()).unwrap();
        let is_new = now == self.new;
        assert!(is_new || now == self.old, "a partial checkpoint ({} bytes)", now.len());
        assert_eq!(std::fs::metadata(self.checkpoint()).unwrap().mode() & 0o7777, 0o600);
        let backups = backups_in(self.dir.path());
        assert!(backups.len() <= 1, "{backups:?}");
        for b in &backups {
            assert_eq!(std::fs::read(b).unwrap(), self.old, "a backup is always whole");
        }
        let temps = atomic::leftovers(&self.checkpoint());
        if is_new || !temps.is_empty() {
            assert_eq!(backups.len(), 1, "the write started, so the backup is on disk");
        }
        // The next run clears what this one left.
        atomic::remove_leftovers(&self.checkpoint());
        atomic::remove_leftovers_in(self.dir.path(), BACKUP_PREFIX);
        assert!(atomic::leftovers(&self.checkpoint()).is_empty());
        let names: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_str().unwrap().to_string())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(names.is_empty(), "{names:?}");
        (is_new, temps.len())
    }
}

#[test]
fn a_writer_killed_after_any_step_leaves_the_old_or_the_new_file() {
    for step in STEPS {
        let d = CrashDir::new(256 * 1024);
        let status = d.command(Some(step)).stdout(Stdio::null()).status().unwrap();
        assert_eq!(status.signal(), Some(9), "{step}: killed by SIGKILL");
        let (is_new, temps) = d.check();
        assert_eq!(is_new, matches!(step, "renamed" | "dir_synced"), "{step}");
        assert_eq!(
            temps,
            usize::from(matches!(step, "temp_created" | "written" | "synced")),
            "{step}"
        );
        assert_eq!(backups_in(d.dir.path()).len(), 1, "{step}");
    }
    // Not killed: the new file, the backup, nothing else.
    let d = CrashDir::new(1024);
    assert!(d.command(None).stdout(Stdio::null()).status().unwrap().success());
    assert_eq!(d.check(), (true, 0));
}

#[test]
fn a_writer_killed_at_random_moments_leaves_the_old_or_the_new_file() {
    // 4 MiB, so that writing and syncing take long enough to be interrupted.
    let mut seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut counts = [0usize; 3]; // old, new, old with a leftover
    let t = Instant::now();
    for _ in 0..40 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = Duration::from_micros((seed >> 33) % 20_000);
        let d = CrashDir::new(4 * 1024 * 1024);
        let mut child = d.command(None).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "started");
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
        match d.check() {
            (true, _) => counts[1] += 1,
            (false, 0) => counts[0] += 1,
            (false, _) => counts[2] += 1,
        }
    }
    eprintln!(
        "40 random kills in {:?}: {} old, {} new, {} old with a temporary file left",
        t.elapsed(),
        counts[0],
        counts[1],
        counts[2]
    );
}

#[test]
fn the_runbook_documents_every_flag() {
    let help = parse_alone::<CpuStateArgs>("cpu-state", ["--help"])
        .unwrap_err()
        .to_string();
    let flags = |text: &str| -> std::collections::BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(str::to_string)
            .collect()
    };
    // The option lines of the help (`  -y, --yes`, `      --apply`), not the descriptions.
    let options: String = help
        .lines()
        .map(str::trim_start)
        .filter_map(|l| {
            l.split_once(", ")
                .map_or(Some(l), |(short, rest)| (short.len() == 2).then_some(rest))
        })
        .filter(|l| l.starts_with("--"))
        .filter_map(|l| l.split_whitespace().next())
        .collect::<Vec<_>>()
        .join(" ");
    let mut in_help = flags(&options);
    in_help.remove("--help");
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations/runbooks/repair-cpu-state.md"),
    )
    .unwrap();
    // The first column of the flags table.
    let table: String = doc
        .lines()
        .filter(|l| l.starts_with("| `--"))
        .filter_map(|l| l.split('|').nth(1))
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        flags(&table),
        in_help,
        "the runbook's flags table and `repair cpu-state --help` differ"
    );
}

/// `node()`'s state changed by `edit`, written as a V2 file with its checksum.
fn edited_checkpoint(edit: impl FnOnce(&mut nodemedic_rules::checkpoint::CpuState)) -> Vec<u8> {
    let mut state = node().state();
    edit(&mut state);
    state.assignments.sort_by(|a, b| a.key.cmp(&b.key));
    state.to_checkpoint_json().into_bytes()
}

/// Sets the CPUs of `uid`'s entries (container `container`).
fn set_entry(state: &mut nodemedic_rules::checkpoint::CpuState, uid: &str, container: &str, cpus: &str) {
    let entry = state
        .assignments
        .iter_mut()
        .find(|a| matches!(&a.key, EntryKey::Container { pod_uid, container: c } if pod_uid == uid && c == container))
        .unwrap();
    entry.cpus = CpuSet::parse(cpus).unwrap();
}

#[test]
fn a_file_invalid_today_because_of_stale_entries_is_said_plainly_and_fixed() {
    let gone = pod_uid("etl-exec-2");
    let batch = pod_uid("batch");
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "a stale entry overlaps the default set",
            edited_checkpoint(|s| s.default_cpus = CpuSet::parse("0,4-6,8,11").unwrap()),
            format!("pod: {gone}, container: {EXEC} cpuset: \"8-9\" overlaps with default cpuset \"0,4-6,8,11\""),
        ),
        (
            "a reserved CPU is held by a stale entry",
            edited_checkpoint(|s| {
                s.default_cpus = CpuSet::parse("0,5-6,11").unwrap();
                set_entry(s, &batch, "app", "4,10");
            }),
            "not all reserved cpus: \"0,4\" are present in defaultCpuSet: \"0,5-6,11\"".to_string(),
        ),
        (
            "the default set is empty (stale entries hold every CPU)",
            edited_checkpoint(|s| {
                s.default_cpus = CpuSet::new();
                s.assignments.retain(
                    |a| matches!(&a.key, EntryKey::Container { pod_uid, .. } if *pod_uid == gone || *pod_uid == batch),
                );
                set_entry(s, &gone, EXEC, "0-9");
                set_entry(s, &batch, "app", "10-11");
            }),
            "default cpuset cannot be empty".to_string(),
        ),
    ];
    for (what, bytes, message) in cases {
        let host = Host::new(node(), Some(bytes));
        // The dry run says it first, in the kubelet's words, and that the repair fixes it.
        let (code, out, outcome) = run(&host.args(&[]));
        assert_eq!(code, 1, "{what}: {out}");
        let plan = &outcome.plan;
        assert!(
            plan.current_file_problems.contains(&message),
            "{what}: {:?}",
            plan.current_file_problems
        );
        assert!(plan.fixes_current_file, "{what}");
        let invalid_at = out
            .find("The file is INVALID today")
            .unwrap_or_else(|| panic!("{what}: {out}"));
        assert!(
            out.contains(&format!("start cpu manager error: {message}")),
            "{what}: {out}"
        );
        assert!(out.contains("this repair fixes it"), "{what}: {out}");
        assert!(
            invalid_at < out.find("Remove ").unwrap(),
            "{what}: said before the plan\n{out}"
        );
        // JSON says the same.
        let (_, json_out, _) = run(&host.args(&["--format", "json"]));
        let v: serde_json::Value = serde_json::from_str(&json_out).unwrap();
        assert!(
            v["current_file_problems"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p == message.as_str()),
            "{what}"
        );
        assert_eq!(v["fixes_current_file"], true, "{what}");
        // Applied, the result verifies and passes every check.
        let (code, out, _) = run(&host.args(&["--apply", "--yes"]));
        assert_eq!(code, 0, "{what}: {out}");
        let cp = Checkpoint::parse(&host.read()).unwrap();
        assert!(matches!(cp.verify(), Verification::Matched { .. }), "{what}");
        let state = cp.state().unwrap();
        let problems = startup_problems(&state);
        assert!(problems.is_empty(), "{what}: {problems:?}");
        assert!(!String::from_utf8(host.read()).unwrap().contains(&gone), "{what}");
    }
}

#[test]
fn an_invalid_file_with_nothing_stale_is_refused_with_the_documented_remedy() {
    // CPUs hot-added and no stale entry: the repair cannot fix it and says so.
    let host = Host::new(
        node(),
        Some(edited_checkpoint(|s| {
            let gone = pod_uid("etl-exec-2");
            let batch = pod_uid("batch");
            s.assignments.retain(
                |a| !matches!(&a.key, EntryKey::Container { pod_uid, .. } if *pod_uid == gone || *pod_uid == batch),
            );
            s.default_cpus = CpuSet::parse("0,4-6,8-11").unwrap();
        })),
    );
    std::fs::write(host.root().join("sys/devices/system/cpu/online"), "0-13\n").unwrap();
    let (code, out, outcome) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 1, "{out}");
    let Verdict::Refused { reasons } = &outcome.plan.verdict else {
        panic!("{:?}", outcome.plan.verdict)
    };
    assert!(
        reasons[0].contains("has no stale entry to remove: this repair cannot fix it"),
        "{reasons:?}"
    );
    assert!(
        reasons[0].contains("current set of available CPUs \"0-13\" doesn't match"),
        "{reasons:?}"
    );
    assert!(out.contains("The file is INVALID today"), "{out}");
    assert!(!outcome.plan.fixes_current_file);
}

/// Whether `pid` runs (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(") ").next().and_then(|r| r.chars().next()))
        .is_some_and(|state| state != 'Z')
}

/// Runs the real binary: `repair cpu-state --apply --yes --restart-kubelet` on `host` with the
/// kubelet's fakes and `extra`; returns its status and stdout.
fn repair_binary(host: &Host, kubelet: &FakeKubelet, extra: &[&str]) -> (std::process::ExitStatus, String) {
    let mut flags = kubelet.flags(&["--apply", "--yes", "--restart-kubelet", "--format", "json"]);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let root = host.root().to_str().unwrap().to_string();
    let pods = format!("{root}/pods.json");
    let out = Command::new(nodemedic_tests::nodemedic_bin())
        .args([
            "repair",
            "cpu-state",
            "--host-root",
            &root,
            "--node",
            NODE,
            "--pods",
            &pods,
        ])
        .args(&flags)
        .env("KUBECONFIG", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Shell that runs once (the guard's later call of the same fake must not run it again).
fn once(bin_marker: &Path, body: &str) -> String {
    format!("if [ ! -e {m} ]; then touch {m}; {body}; fi", m = bin_marker.display())
}

#[test]
fn the_guard_starts_the_kubelet_again_whenever_the_repair_is_killed() {
    const GUARD: u64 = 2;
    let marker_dir = tempfile::tempdir().unwrap();
    let kill = "kill -9 $PPID";
    for step in ["before stop", "after stop", "after write", "after start"] {
        let marker = marker_dir.path().join(step.replace(' ', "-"));
        let mut hooks = Hooks::default();
        let mut on_start = String::new();
        match step {
            "before stop" => hooks.armed = once(&marker, kill),
            "after stop" => hooks.stopped = once(&marker, kill),
            // Killed at `systemctl start`, before it starts one: only the guard can.
            "after write" => hooks.starting = once(&marker, &format!("{kill}; exit 1")),
            _ => on_start = once(&marker, kill),
        }
        let host = Host::new(node(), None);
        let before = host.read();
        let kubelet = FakeKubelet::start_with(host.root(), Stop::Works, &on_start, &hooks);
        let (status, out) = repair_binary(&host, &kubelet, &["--guard-seconds", &GUARD.to_string()]);
        let killed_at = Instant::now();
        assert_eq!(
            status.signal(),
            Some(9),
            "{step}: the repair was killed: {status:?}\n{out}"
        );
        // Within the guard's N seconds (and a margin for the machine), a kubelet runs.
        let deadline = killed_at + Duration::from_secs(GUARD + 5);
        while !(alive(kubelet.pid()) && kubelet.ours(kubelet.pid())) {
            assert!(
                Instant::now() < deadline,
                "{step}: no kubelet {GUARD} s after the repair died: {:?}",
                kubelet.calls()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let calls = kubelet.guarded_calls();
        assert_eq!(calls[0], "arm guard", "{step}: {calls:?}");
        // The checkpoint is the old file or the new one, nothing else.
        let now = host.read();
        match step {
            "before stop" | "after stop" => assert_eq!(now, before, "{step}"),
            _ => assert_repaired(&now),
        }
        eprintln!(
            "{step}: killed; a kubelet runs {:?} later; calls {calls:?}",
            killed_at.elapsed()
        );
    }
}

#[test]
fn sigterm_while_the_kubelet_is_stopped_starts_it_before_exiting() {
    let marker = tempfile::tempdir().unwrap();
    let hooks = Hooks {
        stopped: once(&marker.path().join("term"), "kill -TERM $PPID"),
        ..Default::default()
    };
    let host = Host::new(node(), None);
    let before = host.read();
    let kubelet = FakeKubelet::start_with(host.root(), Stop::Works, "", &hooks);
    // A long guard: whatever starts the kubelet now is the repair itself.
    let (status, out) = repair_binary(&host, &kubelet, &["--guard-seconds", "600"]);
    assert_eq!(status.code(), Some(1), "{status:?}\n{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["apply"]["outcome"], "aborted", "{v:#}");
    assert_eq!(v["apply"]["interrupted_by"], "SIGTERM");
    assert!(
        v["apply"]["message"]
            .as_str()
            .unwrap()
            .starts_with("interrupted by SIGTERM before the write: nothing was written"),
        "{v:#}"
    );
    assert!(
        alive(kubelet.pid()) && kubelet.ours(kubelet.pid()),
        "the kubelet runs when the repair exits"
    );
    assert_ne!(kubelet.pid(), kubelet.first.id(), "a new one, started by the repair");
    assert_eq!(
        kubelet.guarded_calls(),
        ["arm guard", "stop kubelet", "start kubelet", "disarm guard"]
    );
    assert_eq!(host.read(), before, "nothing was written");
}

#[test]
fn without_systemd_the_guard_cannot_be_armed_and_the_kubelet_is_not_stopped() {
    let host = Host::new(node(), None);
    let before = host.read();
    let kubelet = FakeKubelet::start(host.root(), Stop::Works, "");
    // No systemd-run on this "host".
    std::fs::remove_file(kubelet.bin.path().join("systemd-run")).unwrap();
    let (code, out, outcome) = run(&args_with(&host, &kubelet, &["--apply", "--yes", "--restart-kubelet"]));
    assert_eq!(code, 1, "{out}");
    let report = outcome.applied.unwrap();
    assert_eq!(report.outcome, ApplyOutcome::Refused);
    assert!(report.message.contains("cannot arm the guard"), "{}", report.message);
    assert!(report.message.contains("--no-guard"), "{}", report.message);
    assert!(kubelet.calls().is_empty(), "nothing was stopped: {:?}", kubelet.calls());
    assert!(alive(kubelet.first.id()));
    assert_eq!(host.read(), before);
    // --no-guard: stopped, written and started, no guard.
    let (code, out, _) = run(&args_with(
        &host,
        &kubelet,
        &["--apply", "--yes", "--restart-kubelet", "--no-guard"],
    ));
    assert_eq!(code, 0, "{out}");
    assert_eq!(kubelet.calls(), ["stop kubelet", "start kubelet"]);
    assert_repaired(&host.read());
}

#[test]
fn a_killed_runs_temporary_files_are_gone_after_the_next_apply_even_with_nothing_to_do() {
    let host = Host::new(node(), None);
    let dir = host.kubelet_dir();
    let leftovers = [
        dir.join(".cpu_manager_state.nodemedic-tmp-4242-1"),
        dir.join(format!(".{BACKUP_PREFIX}20261124T000000Z.nodemedic-tmp-4242-2")),
    ];
    for l in &leftovers {
        std::fs::write(l, b"half").unwrap();
    }
    // scan notes them.
    let root = host.root().to_str().unwrap().to_string();
    let scan = nodemedic_tests::nodemedic(&[
        "scan",
        "--host-root",
        &root,
        "--node",
        NODE,
        "--offline",
        "--format",
        "json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&scan.stdout).unwrap();
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    for l in &leftovers {
        let name = l.file_name().unwrap().to_str().unwrap();
        assert!(
            notes.iter().any(|n| n.contains(name) && n.contains("interrupted")),
            "{name}: {notes:?}"
        );
    }
    // A first apply frees the stale entries; then leftovers again, and an apply with nothing to do.
    let (code, out, _) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 0, "{out}");
    assert!(leftovers.iter().all(|l| !l.exists()));
    for l in &leftovers {
        std::fs::write(l, b"half").unwrap();
    }
    let (code, out, outcome) = run(&host.args(&["--apply", "--yes"]));
    assert_eq!(code, 0, "{out}");
    assert!(matches!(outcome.plan.verdict, Verdict::NothingToDo { .. }));
    assert!(leftovers.iter().all(|l| !l.exists()), "{out}");
    assert!(
        out.contains("removed /var/lib/kubelet/.cpu_manager_state.nodemedic-tmp-4242-1"),
        "{out}"
    );
    // A dry run leaves them alone.
    std::fs::write(&leftovers[0], b"half").unwrap();
    let _ = run(&host.args(&[]));
    assert!(leftovers[0].exists());
}

/// Commands for the host (`systemd-run`, `systemctl`) run in the namespaces of the host's pid 1
/// when those differ from nodemedic's, as in a pod, with no `nsenter` (the image has none):
/// here "pid 1" is a real process in a mount namespace of its own, where a tmpfs holds a
/// `systemd-run` that exists nowhere else. Needs root (unshare), as on CI.
#[test]
fn host_commands_run_in_the_namespaces_of_pid_1() {
    use nodemedic::host::HostPaths;
    use nodemedic::repair::kubelet::{KubeletControl, run_bounded};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let hidden = dir.path().join("hidden");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&hidden).unwrap();
    let script = src.join("systemd-run");
    std::fs::write(&script, "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/ran\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let setup = format!(
        "mount -t tmpfs nodemedic-test {h} && cp {s} {h}/ && echo ready && exec sleep 60",
        h = hidden.display(),
        s = script.display()
    );
    let mut other = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &setup])
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux) runs as root");
    let mut line = String::new();
    std::io::BufReader::new(other.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the namespace was not set up");
    let pid = other.id();

    // The host root: its proc/1 is that process.
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("proc")).unwrap();
    symlink(format!("/proc/{pid}"), root.join("proc/1")).unwrap();
    let ctl = KubeletControl {
        host: HostPaths::new(&root, None),
        systemctl: hidden.join("systemctl"),
        systemd_run: hidden.join("systemd-run"),
        unit: "kubelet.service".into(),
        timeout: Duration::from_secs(10),
    };
    assert!(ctl.enters_host_namespaces());
    assert!(
        !hidden.join("systemd-run").exists(),
        "the program exists only in the other mount namespace"
    );
    let guard = ctl.arm_guard(60).expect("systemd-run ran in pid 1's namespaces");
    let ran = std::fs::read_to_string(format!("/proc/{pid}/root{}/ran", hidden.display())).unwrap();
    assert_eq!(
        ran.trim(),
        format!(
            "--unit={} --on-active=60 --timer-property=AccuracySec=1s --collect -- {} start kubelet.service",
            guard.unit,
            hidden.join("systemctl").display()
        )
    );
    // Not entering them, the same command finds nothing.
    let argv = vec![hidden.join("systemd-run").display().to_string()];
    let e = run_bounded(&argv, Duration::from_secs(5), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("No such file or directory"), "{e}");
    // A pid 1 whose namespaces cannot be opened: said so, nothing runs.
    let gone = dir.path().join("gone");
    std::fs::create_dir_all(gone.join("proc/1")).unwrap();
    let e = run_bounded(&argv, Duration::from_secs(5), Some(&gone.join("proc/1")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot open") && e.contains("to enter the host's namespaces"),
        "{e}"
    );
    let _ = other.kill();
    let _ = other.wait();
}
