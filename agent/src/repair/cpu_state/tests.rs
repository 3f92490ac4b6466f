//! Tests of [`super::plan()`] and [`super::apply()`] over host trees written into a tempdir
//! (`crate::scan::tests::Tree`): which entries the plan removes and keeps, every refusal, and
//! the preconditions apply checks again right before it writes. The end-to-end suite
//! (`tests/tests/repair_cpu_state.rs`) runs the same decisions through the command, with real
//! kubelet processes and cgroups; these prove them at the function level in milliseconds.
//!
//! The node: 8 CPUs, reserved 0,4. `live` runs (entry `"5,1"`, written non-canonically, one
//! process in its cgroup), `done` finished (entry `"2,6"`, an empty cgroup), `gone` is in no
//! pod list and has no cgroup (entry `"3,7"`); `defaultCpuSet` is `"0,4"`.

use std::os::unix::fs::PermissionsExt as _;

use nodemedic_rules::checkpoint::{Checkpoint, Entries, Verification};
use nodemedic_rules::snapshot::PodSource;

use super::*;
use crate::repair::atomic::{self, Attrs, Step};
use crate::scan::tests::{NODE, TestPod, Tree, checkpoint_bytes};
use crate::scan::{Pods, Source};

fn live() -> TestPod {
    TestPod::new("live")
}

fn done() -> TestPod {
    TestPod::new("done").finished("Succeeded")
}

fn gone() -> TestPod {
    TestPod::new("gone")
}

/// The checkpoint of the node.
fn original() -> Vec<u8> {
    checkpoint_bytes(
        "0,4",
        &[
            (&live().uid, "app", "5,1"),
            (&done().uid, "app", "2,6"),
            (&gone().uid, "app", "3,7"),
        ],
    )
}

/// The node's tree with `checkpoint` (mode 0600) and the pods file listing live and done.
fn node_with(checkpoint: &[u8]) -> Tree {
    let tree = Tree::new();
    tree.pod_cgroup(&live(), "1,5", &[101]);
    tree.pod_cgroup(&done(), "2,6", &[]);
    tree.checkpoint(checkpoint);
    std::fs::set_permissions(tree.checkpoint_path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    tree.pods_file(&[live(), done()]);
    tree
}

fn node() -> Tree {
    node_with(&original())
}

/// The command's options for `tree` with pods from `source`; `systemctl` and `systemd-run`
/// are paths that do not exist, so that no test can ever act on this machine's kubelet.
fn options(tree: &Tree, source: Source) -> Options {
    let mut opts = Options::new(tree.host(), source);
    opts.apply.control.systemctl = tree.path("no-systemctl");
    opts.apply.control.systemd_run = tree.path("no-systemd-run");
    opts
}

/// Options for the pods file (`--pods`, `--node`).
fn with_pods_file(tree: &Tree) -> Options {
    let source = Source {
        node: Some(NODE.into()),
        pods_file: Some(tree.path("pods.json")),
        ..Default::default()
    };
    options(tree, source)
}

/// Options without a pod list (`--offline`): liveness from the cgroups.
fn offline(tree: &Tree) -> Options {
    let source = Source {
        node: Some(NODE.into()),
        offline: true,
        ..Default::default()
    };
    options(tree, source)
}

fn container(pod: &TestPod) -> Target {
    Target::Container {
        pod_uid: pod.uid.clone(),
        container: "app".into(),
    }
}

fn reasons(plan: &Plan) -> Vec<String> {
    match &plan.verdict {
        Verdict::Refused { reasons } => reasons.clone(),
        other => panic!("not refused: {other:?}"),
    }
}

/// The removals' targets.
fn removed(plan: &Plan) -> Vec<Target> {
    plan.removals.iter().map(|r| r.target.clone()).collect()
}

/// `want`, sorted as the plan sorts its removals.
fn sorted(mut want: Vec<Target>) -> Vec<Target> {
    want.sort();
    want
}

fn backups(tree: &Tree) -> Vec<std::path::PathBuf> {
    let mut b: Vec<_> = std::fs::read_dir(tree.path("var/lib/kubelet"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(BACKUP_PREFIX))
        .map(|e| e.path())
        .collect();
    b.sort();
    b
}

/// With a pod list: the entry of a pod bound nowhere here and the entry of a finished pod are
/// removed, with why and what their cgroups hold; the live entry is kept with the very string
/// the file had (`"5,1"`); their CPUs go back to the default set; the new bytes are a V2 file
/// that verifies, and the rescan before the write judges with the same pods.
#[test]
fn plan_removes_stale_entries_and_keeps_live_ones_as_written() {
    let tree = node();
    let plan = plan(&with_pods_file(&tree)).unwrap();
    assert_eq!(plan.verdict, Verdict::Ready, "{plan:#?}");
    assert_eq!(plan.pod_source, PodSource::File);
    assert_eq!(plan.shown, "/var/lib/kubelet/cpu_manager_state");
    assert_eq!(plan.original, original());
    assert_eq!(plan.mode, 0o600);
    assert_eq!(plan.layout, Some("V2"));
    assert!(plan.kubelet.is_none());
    let mut want = vec![
        Removal {
            target: container(&gone()),
            cpus: "3,7".into(),
            reason: format!("pod {} is not bound to node {NODE}", gone().uid),
            pod: None,
            cgroup: None,
            cgroup_processes: None,
            still_running: None,
        },
        Removal {
            target: container(&done()),
            cpus: "2,6".into(),
            reason: "pod default/done has finished (phase Succeeded)".into(),
            pod: Some("default/done".into()),
            cgroup: Some(format!("/sys/fs/cgroup/cpuset/kubepods/pod{}", done().uid)),
            cgroup_processes: Some(0),
            still_running: None,
        },
    ];
    want.sort_by(|a, b| a.target.cmp(&b.target));
    assert_eq!(plan.removals, want);
    assert_eq!(
        plan.kept,
        [Kept {
            target: container(&live()),
            cpus: "5,1".into()
        }]
    );
    assert_eq!(plan.cpus_returned, "2-3,6-7");
    assert_eq!(plan.cpus_withheld, "");
    assert_eq!(
        (plan.old_default.as_str(), plan.new_default.as_str()),
        ("0,4", "0,2-4,6-7")
    );
    assert_eq!(plan.checks.problems, Vec::<String>::new());
    assert_eq!(plan.checks.reserved_cpus.as_deref(), Some("0,4"));

    let new = Checkpoint::parse(&plan.new_bytes).unwrap();
    assert!(matches!(new.verify(), Verification::Matched { layout: "V2", .. }));
    assert_eq!(plan.new_checksum, Some(new.checksum));
    assert_eq!(new.default_cpu_set, "0,2-4,6-7");
    let Entries::ByPod(map) = &new.entries else {
        panic!("{new:?}")
    };
    assert_eq!(map.len(), 1);
    assert_eq!(map[&live().uid].as_ref().unwrap()["app"], "5,1");
    assert_eq!(new.to_json().into_bytes(), plan.new_bytes);
    let Some(Pods::Given { pods, source, .. }) = &plan.rescan else {
        panic!("{:?}", plan.rescan)
    };
    assert_eq!((pods.len(), source), (2, &PodSource::File));
}

/// Without a pod list, by the cgroups alone: an entry whose pod has no cgroup and one whose
/// cgroup has no processes are stale; the pod with a process keeps its entry; the rescan
/// before the write reads the cgroups again.
#[test]
fn plan_by_cgroups_alone_removes_entries_without_cgroup_or_processes() {
    let tree = node();
    let plan = plan(&offline(&tree)).unwrap();
    assert_eq!(plan.verdict, Verdict::Ready, "{plan:#?}");
    assert_eq!(plan.pod_source, PodSource::Cgroups);
    assert_eq!(removed(&plan), sorted(vec![container(&done()), container(&gone())]));
    let reason_of = |pod: &TestPod| {
        plan.removals
            .iter()
            .find(|r| r.target == container(pod))
            .map(|r| r.reason.clone())
            .unwrap()
    };
    assert_eq!(
        reason_of(&gone()),
        format!("pod {} has no cgroup on this node", gone().uid)
    );
    assert_eq!(
        reason_of(&done()),
        format!("the cgroup of pod {} has no processes left", done().uid)
    );
    assert_eq!(plan.kept.len(), 1);
    assert_eq!(plan.cpus_returned, "2-3,6-7");
    assert!(matches!(plan.rescan, Some(Pods::Cgroups)));
}

/// A checksum of no known kubelet layout is refused (one reason, naming the flag) unless
/// `--force-unknown-layout`; forced, the plan is ready and the new file verifies.
#[test]
fn plan_refuses_an_unknown_checksum_unless_forced() {
    let mut cp = Checkpoint::parse(&original()).unwrap();
    cp.checksum = 1337;
    let tree = node_with(cp.to_json().as_bytes());
    let refused = plan(&with_pods_file(&tree)).unwrap();
    let r = reasons(&refused);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with("the stored checksum 1337 matches no known kubelet layout"),
        "{r:?}"
    );
    assert!(r[0].contains("--force-unknown-layout"), "{r:?}");

    let mut opts = with_pods_file(&tree);
    opts.force_unknown_layout = true;
    let forced = plan(&opts).unwrap();
    assert_eq!(forced.verdict, Verdict::Ready, "{forced:#?}");
    assert_eq!(removed(&forced), removed(&refused));
    assert!(matches!(
        Checkpoint::parse(&forced.new_bytes).unwrap().verify(),
        Verification::Matched { layout: "V2", .. }
    ));
}

/// No pod list and no readable cgroups: nothing can be judged stale, so the plan is refused
/// with why, and removes nothing.
#[test]
fn plan_refuses_without_a_pod_list_or_cgroups() {
    let tree = node();
    std::fs::remove_dir_all(tree.path("sys/fs/cgroup")).unwrap();
    let plan = plan(&offline(&tree)).unwrap();
    assert_eq!(
        reasons(&plan),
        [
            "no pod list (--pods, or the API) and the cgroups are not readable (missing): cannot tell which entries are stale"
        ]
    );
    assert!(plan.removals.is_empty());
    assert!(plan.new_bytes.is_empty());
}

/// With a pod list but no readable cgroups, the stale entries are found but not freed: that
/// their pods have no processes left cannot be checked.
#[test]
fn plan_refuses_stale_entries_whose_cgroups_cannot_be_checked() {
    let tree = node();
    std::fs::remove_dir_all(tree.path("sys/fs/cgroup")).unwrap();
    let plan = plan(&with_pods_file(&tree)).unwrap();
    assert_eq!(removed(&plan), sorted(vec![container(&done()), container(&gone())]));
    assert_eq!(
        reasons(&plan),
        ["the cgroups are not readable (missing): cannot check that the stale entries' pods have no processes left"]
    );
}

/// A finished pod whose cgroup still has a process: stale by the pod list, but not freed
/// (the reason names the entry and the cgroup); the other stale entry alone does not make
/// the plan ready.
#[test]
fn plan_refuses_a_stale_entry_whose_cgroup_still_has_processes() {
    let tree = node();
    tree.pod_cgroup(&done(), "2,6", &[202]);
    let plan = plan(&with_pods_file(&tree)).unwrap();
    let r = reasons(&plan);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        r[0],
        format!(
            "pod {} container app is stale by the pods file (pod default/done has finished (phase Succeeded)) but its \
             cgroup /sys/fs/cgroup/cpuset/kubepods/pod{} shows 1 process in its cgroups: something still runs there; \
             not freeing its CPUs (stop its containers first: crictl ps --label io.kubernetes.pod.uid=<uid>, crictl stop)",
            done().uid,
            done().uid
        )
    );
    let done_removal = plan.removals.iter().find(|r| r.target == container(&done())).unwrap();
    assert_eq!(done_removal.cgroup_processes, Some(1));
}

/// A checkpoint that is not JSON is refused as unreadable, with the documented remedy.
#[test]
fn plan_refuses_an_unreadable_checkpoint() {
    let tree = node_with(b"{\"policyName\":\"static\",\"defaultCpuSet\":\"0-");
    let plan = plan(&with_pods_file(&tree)).unwrap();
    let r = reasons(&plan);
    assert!(
        r[0].starts_with("/var/lib/kubelet/cpu_manager_state is unreadable (invalid JSON"),
        "{r:?}"
    );
    assert!(r[0].ends_with("(drain, stop the kubelet, delete the file)"), "{r:?}");
    assert_eq!(plan.layout, None);
}

/// Every entry alive: nothing to do, everything kept, no new bytes.
#[test]
fn plan_with_nothing_stale_has_nothing_to_do() {
    let tree = node_with(&checkpoint_bytes("0,2-4,6-7", &[(&live().uid, "app", "5,1")]));
    let plan = plan(&with_pods_file(&tree)).unwrap();
    assert_eq!(
        plan.verdict,
        Verdict::NothingToDo {
            reason: "no stale entries in /var/lib/kubelet/cpu_manager_state (liveness from file)".into()
        }
    );
    assert_eq!(plan.kept.len(), 1);
    assert!(plan.removals.is_empty() && plan.new_bytes.is_empty());
}

/// Two CPUs hot-added (online 0-9): freeing the stale entries leaves a file the kubelet
/// rejects at start (its CPUs no longer cover the online ones), so the plan is refused in the
/// kubelet's own words.
#[test]
fn plan_refuses_a_result_the_kubelet_would_reject_at_start() {
    let tree = node();
    tree.put("sys/devices/system/cpu/online", "0-9\n");
    let plan = plan(&with_pods_file(&tree)).unwrap();
    assert_eq!(
        reasons(&plan),
        [
            "the result would fail the kubelet's start-up checks (current set of available CPUs \"0-9\" doesn't match \
             with CPUs in state \"0-7\"): the kubelet would refuse to start with it"
        ]
    );
    assert_eq!(plan.checks.online_cpus.as_deref(), Some("0-9"));
    assert!(!plan.fixes_current_file);
}

/// A file the kubelet rejects today because a stale entry's CPUs are also in the default set:
/// the problem is named in the kubelet's words, and removing the entry fixes it (ready,
/// `fixes_current_file`); its CPUs are already in the default set, so none are returned.
#[test]
fn plan_fixes_a_file_invalid_today_because_of_a_stale_entry() {
    let tree = node_with(&checkpoint_bytes(
        "0,2-4,6-7",
        &[(&live().uid, "app", "5,1"), (&gone().uid, "app", "3,7")],
    ));
    tree.pods_file(&[live()]);
    let plan = plan(&with_pods_file(&tree)).unwrap();
    assert_eq!(
        plan.current_file_problems,
        [format!(
            "pod: {}, container: app cpuset: \"3,7\" overlaps with default cpuset \"0,2-4,6-7\"",
            gone().uid
        )]
    );
    assert_eq!(plan.verdict, Verdict::Ready, "{plan:#?}");
    assert!(plan.fixes_current_file);
    assert_eq!(removed(&plan), [container(&gone())]);
    assert_eq!(plan.cpus_returned, "");
    assert_eq!(plan.new_default, "0,2-4,6-7");
}

/// A file the kubelet rejects today with nothing stale to remove: refused, with the
/// documented remedy; the repair does not claim to fix it.
#[test]
fn plan_refuses_a_file_invalid_today_with_nothing_stale() {
    let tree = node_with(&checkpoint_bytes("0-4,6-7", &[(&live().uid, "app", "5,1")]));
    let plan = plan(&with_pods_file(&tree)).unwrap();
    let r = reasons(&plan);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with("/var/lib/kubelet/cpu_manager_state fails the kubelet's start-up checks today (pod: "),
        "{r:?}"
    );
    assert!(
        r[0].contains("and has no stale entry to remove: this repair cannot fix it"),
        "{r:?}"
    );
    assert!(
        r[0].ends_with("(the documented remedy: drain the node, stop the kubelet, delete the file, start the kubelet)"),
        "{r:?}"
    );
    assert!(!plan.fixes_current_file);
    assert!(plan.removals.is_empty());
}

/// V3 pod-level entries (`podEntries`): the stale pod's is removed and its CPUs returned, the
/// live pod's (and its container entry) kept as written; the new file keeps the V3 layout.
#[test]
fn plan_frees_v3_pod_level_entries() {
    use nodemedic_rules::CpuSet;
    use nodemedic_rules::checkpoint::{Assignment, CpuState, EntryKey};
    let state = CpuState {
        policy_name: "static".into(),
        default_cpus: CpuSet::parse("0,4,6").unwrap(),
        assignments: vec![Assignment {
            key: EntryKey::Container {
                pod_uid: live().uid,
                container: "app".into(),
            },
            cpus: CpuSet::parse("1,5").unwrap(),
        }],
        pod_assignments: vec![
            (live().uid, CpuSet::parse("2").unwrap()),
            (gone().uid, CpuSet::parse("3,7").unwrap()),
        ],
    };
    let bytes = state.to_checkpoint_json().into_bytes();
    assert!(matches!(
        Checkpoint::parse(&bytes).unwrap().verify(),
        Verification::Matched { layout: "V3", .. }
    ));
    let tree = node_with(&bytes);
    let plan = plan(&with_pods_file(&tree)).unwrap();
    assert_eq!(plan.verdict, Verdict::Ready, "{plan:#?}");
    assert_eq!(removed(&plan), [Target::Pod { pod_uid: gone().uid }]);
    assert_eq!(
        plan.removals[0].reason,
        format!("pod {} is not bound to node {NODE}", gone().uid)
    );
    assert_eq!(
        plan.kept,
        [
            Kept {
                target: container(&live()),
                cpus: "1,5".into()
            },
            Kept {
                target: Target::Pod { pod_uid: live().uid },
                cpus: "2".into()
            }
        ]
    );
    assert_eq!(plan.cpus_returned, "3,7");
    assert_eq!(plan.new_default, "0,3-4,6-7");
    assert_eq!(plan.new_layout, Some("V3"));
    let new = Checkpoint::parse(&plan.new_bytes).unwrap().state().unwrap();
    assert_eq!(new.pod_assignments, state.pod_assignments[..1]);
    assert_eq!(new.assignments, state.assignments);
}

/// No checkpoint: the plan cannot run at all (an error naming the file), not a verdict.
#[test]
fn plan_without_a_checkpoint_cannot_run() {
    let tree = node();
    std::fs::remove_file(tree.checkpoint_path()).unwrap();
    let Err(RepairError::CouldNotRun(e)) = plan(&with_pods_file(&tree)) else {
        panic!("ran without a checkpoint")
    };
    assert!(e.starts_with("/var/lib/kubelet/cpu_manager_state: no such file"), "{e}");
}

/// A running kubelet: the plan is computed (and names it), but neither the precheck nor
/// apply acts without `--restart-kubelet`: nothing is written, no backup.
#[test]
fn a_running_kubelet_is_refused_without_restart_kubelet() {
    let tree = node();
    tree.kubelet_process(4242);
    let opts = with_pods_file(&tree);
    let plan = plan(&opts).unwrap();
    assert_eq!(plan.verdict, Verdict::Ready);
    assert_eq!(plan.kubelet.as_ref().map(|k| k.pid), Some(4242));
    let e = precheck(&plan, &opts.apply).unwrap_err();
    assert!(matches!(e, ApplyError::KubeletRunning { pid: 4242 }), "{e:?}");
    assert!(e.to_string().starts_with("the kubelet is running (pid 4242)"), "{e}");
    let report = apply(&plan, &opts.apply);
    assert_eq!(report.outcome, ApplyOutcome::Refused);
    assert!(
        report.message.starts_with("the kubelet is running (pid 4242)"),
        "{}",
        report.message
    );
    assert!(report.actions.is_empty());
    assert_eq!(std::fs::read(tree.checkpoint_path()).unwrap(), original());
    assert!(backups(&tree).is_empty());
}

/// A plan that is not ready is never applied.
#[test]
fn apply_refuses_a_plan_that_is_not_ready() {
    let tree = node();
    std::fs::remove_dir_all(tree.path("sys/fs/cgroup")).unwrap();
    let opts = offline(&tree);
    let plan = plan(&opts).unwrap();
    assert!(!plan.ready());
    let e = precheck(&plan, &opts.apply).unwrap_err();
    assert!(matches!(e, ApplyError::NotReady), "{e:?}");
    assert_eq!(e.to_string(), "the plan is not ready to apply");
    let report = apply(&plan, &opts.apply);
    assert_eq!(report.outcome, ApplyOutcome::Refused);
    assert_eq!(std::fs::read(tree.checkpoint_path()).unwrap(), original());
}

/// Apply with the kubelet stopped: the original goes to a backup (same bytes, same mode),
/// then the file is replaced by exactly the plan's bytes (mode kept); the actions are
/// `backup` then `write-checkpoint`; planning again finds nothing to do.
#[test]
fn apply_backs_up_the_original_then_writes_the_plans_bytes() {
    let tree = node();
    let opts = with_pods_file(&tree);
    let plan = plan(&opts).unwrap();
    precheck(&plan, &opts.apply).unwrap();
    let report = apply(&plan, &opts.apply);
    assert_eq!(report.outcome, ApplyOutcome::Applied, "{report:#?}");
    assert_eq!(
        report.message,
        "freed 2 stale entries (2-3,6-7 CPUs returned to the default set) in /var/lib/kubelet/cpu_manager_state"
    );
    assert_eq!(
        report.actions.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
        ["backup", "write-checkpoint"]
    );
    assert_eq!(std::fs::read(tree.checkpoint_path()).unwrap(), plan.new_bytes);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&tree.checkpoint_path()), 0o600);
    let b = backups(&tree);
    assert_eq!(b.len(), 1);
    assert_eq!(report.backup.as_deref(), Some(b[0].as_path()));
    assert_eq!(std::fs::read(&b[0]).unwrap(), original());
    assert_eq!(mode(&b[0]), 0o600);
    assert!(atomic::leftovers(&tree.checkpoint_path()).is_empty());

    let again = super::plan(&opts).unwrap();
    assert!(
        matches!(again.verdict, Verdict::NothingToDo { .. }),
        "{:?}",
        again.verdict
    );
}

/// The file changed between the plan and the apply (a kubelet wrote it): aborted before any
/// write, the new content left as it is, no backup.
#[test]
fn apply_refuses_a_file_changed_since_the_plan() {
    let tree = node();
    let opts = with_pods_file(&tree);
    let plan = plan(&opts).unwrap();
    let changed = checkpoint_bytes("0,2-4,6-7", &[(&live().uid, "app", "5,1")]);
    std::fs::write(tree.checkpoint_path(), &changed).unwrap();
    let report = apply(&plan, &opts.apply);
    assert_eq!(report.outcome, ApplyOutcome::Aborted);
    assert_eq!(
        report.message,
        "/var/lib/kubelet/cpu_manager_state changed since the plan: nothing was written; run the repair again"
    );
    assert!(report.actions.is_empty());
    assert_eq!(std::fs::read(tree.checkpoint_path()).unwrap(), changed);
    assert!(backups(&tree).is_empty());
}

/// A planned removal that is no longer stale when apply looks again (the cgroup-judged
/// `gone` pod has a cgroup with a process now): aborted, nothing written.
#[test]
fn apply_refuses_an_entry_no_longer_stale() {
    let tree = node();
    let opts = offline(&tree);
    let plan = plan(&opts).unwrap();
    assert!(removed(&plan).contains(&container(&gone())));
    tree.pod_cgroup(&gone(), "3,7", &[303]);
    let report = apply(&plan, &opts.apply);
    assert_eq!(report.outcome, ApplyOutcome::Aborted);
    assert_eq!(
        report.message,
        format!(
            "pod {} container app is no longer stale: nothing was written",
            gone().uid
        )
    );
    assert_eq!(std::fs::read(tree.checkpoint_path()).unwrap(), original());
    assert!(backups(&tree).is_empty());
}

/// A planned removal still stale by the pod list whose cgroup has a process now: aborted,
/// nothing written.
#[test]
fn apply_refuses_an_entry_whose_cgroup_has_processes_now() {
    let tree = node();
    let opts = with_pods_file(&tree);
    let plan = plan(&opts).unwrap();
    tree.pod_cgroup(&done(), "2,6", &[202]);
    let report = apply(&plan, &opts.apply);
    assert_eq!(report.outcome, ApplyOutcome::Aborted);
    assert_eq!(
        report.message,
        format!(
            "the cgroup of pod {} container app shows 1 process in its cgroups now: nothing was written",
            done().uid
        )
    );
    assert_eq!(std::fs::read(tree.checkpoint_path()).unwrap(), original());
}

/// The commit order: the backup is complete on disk (the checkpoint still the original)
/// before the replacement's first step, and the replacement's steps follow in order; a
/// backup that cannot be written (the name is taken) leaves the checkpoint untouched.
#[test]
fn the_backup_is_on_disk_before_the_replacement_starts() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("cpu_manager_state");
    let backup = dir.path().join("backup");
    std::fs::write(&checkpoint, b"old").unwrap();
    let attrs = Attrs {
        mode: 0o600,
        owner: None,
    };
    let mut seen = Vec::new();
    replace_with_backup(&checkpoint, &backup, b"old", b"new", attrs, &mut |step| {
        if step == CommitStep::BackupWritten {
            assert_eq!(std::fs::read(&backup).unwrap(), b"old");
            assert_eq!(std::fs::read(&checkpoint).unwrap(), b"old");
        }
        seen.push(step);
    })
    .unwrap();
    assert_eq!(
        seen,
        [
            CommitStep::BackupWritten,
            CommitStep::Replace(Step::TempCreated),
            CommitStep::Replace(Step::Written),
            CommitStep::Replace(Step::Synced),
            CommitStep::Replace(Step::Renamed),
            CommitStep::Replace(Step::DirSynced),
        ]
    );
    assert_eq!(std::fs::read(&checkpoint).unwrap(), b"new");

    // The backup's name is taken: nothing else happens.
    let mut seen = Vec::new();
    let e = replace_with_backup(&checkpoint, &backup, b"new", b"newer", attrs, &mut |s| seen.push(s)).unwrap_err();
    assert!(matches!(e, apply::CommitError::Backup(_)), "{e}");
    assert!(seen.is_empty());
    assert_eq!(std::fs::read(&checkpoint).unwrap(), b"new");
    assert_eq!(std::fs::read(&backup).unwrap(), b"old");
}

/// The re-check right before the write names the entry and what it found.
#[test]
fn apply_errors_name_the_entry() {
    let target = Target::Container {
        pod_uid: "39b3".into(),
        container: "app".into(),
    }
    .display();
    assert_eq!(
        ApplyError::NoLongerStale { target: target.clone() }.to_string(),
        "pod 39b3 container app is no longer stale"
    );
    assert_eq!(
        ApplyError::StillRunning {
            target,
            why: "2 processes".into()
        }
        .to_string(),
        "the cgroup of pod 39b3 container app shows 2 processes now"
    );
    assert_eq!(
        ApplyError::KubeletRunning { pid: 7 }.to_string(),
        "the kubelet is running (pid 7): it would overwrite the file from its memory; pass --restart-kubelet to \
         stop it for the write and start it again, or stop it yourself"
    );
}
