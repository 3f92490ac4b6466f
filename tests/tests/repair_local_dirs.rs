//! `repair local-dirs` on temporary host trees: only Spark scratch directories directly under
//! a configured hostPath root are removed, with the bytes freed reported exactly; symlinks are
//! never followed (inside a scratch dir, as a scratch dir, or as the root); a live
//! application's directory stays (a pod that mounts the root, a process with its working
//! directory or an open file inside); a file where a directory is expected stays; emptyDir
//! volumes are left to pod deletion.
//!
//! The host tree's `proc` holds links to real processes (`<pid>` -> `/proc/<pid>`): this test
//! process and the ones a test starts. The live-process check sees exactly those, whatever else
//! runs on the machine (a sandbox's PID 1 may not be inspectable even by root, which would make
//! the check refuse everything, as it should on a node).

use std::path::{Path, PathBuf};

use nodemedic::cli::args::{ApplyArgs, Format, FormatArg, HostArgs, LocalDirsArgs, PodSourceArgs};
use nodemedic::collect;
use nodemedic::host::HostPaths;
use nodemedic::repair::audit::{ActionRecord, ActionResult, Audit};
use nodemedic::repair::local_dirs::{self, FreshPods, LocalDirPlan};
use nodemedic::scan::{self, Pods};
use nodemedic_rules::Settings;
use nodemedic_rules::snapshot::{NodeSnapshot, PodInfo, PodSource};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, bound_pod};
use serde_json::{Value, json};

const NODE: &str = "worker-7";
const ROOT: &str = "/mnt/spark";

struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
    host: HostPaths,
}

fn host_tree() -> Host {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    std::fs::create_dir_all(root.join("mnt/spark")).unwrap();
    std::fs::create_dir_all(root.join("var/lib/kubelet/pods")).unwrap();
    std::fs::create_dir_all(root.join("proc")).unwrap();
    let host = HostPaths::new(&root, None);
    let h = Host { _dir: dir, root, host };
    h.expose(std::process::id());
    h
}

impl Host {
    /// Makes process `pid` visible in the host tree's `proc`.
    fn expose(&self, pid: u32) {
        std::os::unix::fs::symlink(format!("/proc/{pid}"), self.root.join(format!("proc/{pid}"))).unwrap();
    }

    fn local(&self, host_path: &str) -> PathBuf {
        self.host.host(host_path)
    }

    /// A scratch directory under the root with `files` (relative path, size); returns the
    /// bytes written.
    fn scratch(&self, name: &str, files: &[(&str, usize)]) -> u64 {
        let dir = self.local(&format!("{ROOT}/{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        for (path, size) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, vec![7u8; *size]).unwrap();
        }
        files.iter().map(|(_, s)| *s as u64).sum()
    }

    fn exists(&self, host_path: &str) -> bool {
        std::fs::symlink_metadata(self.local(host_path)).is_ok()
    }

    fn pods_file(&self, pods: &[Value]) -> PathBuf {
        let path = self.root.parent().unwrap().join("pods.json");
        let list = json!({"apiVersion": "v1", "kind": "List", "items": pods});
        std::fs::write(&path, list.to_string()).unwrap();
        path
    }

    fn args(&self, pods_file: &Path, apply: bool) -> LocalDirsArgs {
        LocalDirsArgs {
            host: HostArgs {
                host_root: self.root.clone(),
                kubelet_dir: None,
            },
            source: PodSourceArgs {
                node: Some(NODE.into()),
                pods: Some(pods_file.to_path_buf()),
                offline: true,
                kubeconfig: None,
            },
            local_dir_root: vec![ROOT.into()],
            config: None,
            rule_setting: vec![],
            older_than_seconds: Some(0),
            apply: ApplyArgs {
                apply,
                yes: true,
                expect_plan: None,
            },
            format: FormatArg { format: Format::Json },
        }
    }

    fn snapshot(&self, pods: &[PodInfo], roots: &[&str]) -> NodeSnapshot {
        let opts = scan::Options {
            host: nodemedic::collect::HostOptions {
                node: Some(NODE.into()),
                local_dir_roots: roots.iter().map(|r| r.to_string()).collect(),
                ..Default::default()
            },
            ..Default::default()
        };
        let pods = Pods::Given {
            node: NODE.into(),
            pods: pods.to_vec(),
            source: PodSource::File,
        };
        scan::snapshot_blocking(&self.host, pods, &opts).unwrap().snapshot
    }

    fn plan(&self, pods: &[PodInfo]) -> (NodeSnapshot, LocalDirPlan) {
        let snap = self.snapshot(pods, &[ROOT]);
        let plan = local_dirs::plan(&self.host, &[ROOT.into()], &snap, &settings());
        (snap, plan)
    }

    fn apply(&self, snap: &NodeSnapshot, plan: &LocalDirPlan, pods: &[PodInfo]) -> Vec<ActionRecord> {
        let fresh = FreshPods {
            pods: pods.to_vec(),
            source: PodSource::File,
        };
        let audit = Audit::new(None, NODE, "test");
        local_dirs::apply(&self.host, plan, snap, &fresh, &settings(), &audit, None)
    }
}

/// Dirs are judged at once (the rule's minimum idle time is an hour by default).
fn settings() -> Settings {
    Settings {
        local_dir_min_age_seconds: 0,
        ..Default::default()
    }
}

fn pod_infos(pods: &[Value]) -> Vec<PodInfo> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": pods});
    collect::pods::parse_pods_json(list.to_string().as_bytes()).unwrap()
}

fn unrelated_pod() -> Value {
    bound_pod("web", "web-1", "web-uid-1", NODE, "default-scheduler")
}

/// A running executor that mounts the root as its local dir (created two minutes ago).
fn root_user() -> Value {
    let app = SparkApp::new(SparkVersion::V3_5, "spark-jobs", "etl");
    let mut pod = app.executor(1, "user-uid-1", NODE, None, "10.42.0.9");
    pod["spec"]["volumes"] = json!([{"name": "spark-local-dir-1", "hostPath": {"path": ROOT}}]);
    pod
}

fn run(args: LocalDirsArgs) -> (Result<u8, String>, Value) {
    let mut out = vec![];
    let code = nodemedic::cli::local_dirs_options(&args)
        .map_err(|e| e.to_string())
        .and_then(|opts| {
            local_dirs::run(&opts, &mut out, &mut |_| Ok(false))
                .map(|ran| ran.code())
                .map_err(|e| e.to_string())
        });
    let text = String::from_utf8_lossy(&out).into_owned();
    let v = serde_json::from_str(&text).unwrap_or(Value::Null);
    (code, v)
}

fn action<'a>(v: &'a Value, path: &str) -> &'a Value {
    v["actions"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["target"]["path"] == path))
        .unwrap_or_else(|| panic!("no action on {path}: {v:#}"))
}

#[test]
fn removes_orphaned_dirs_and_reports_the_bytes_freed_exactly() {
    let h = host_tree();
    let a = h.scratch(
        "blockmgr-aaa",
        &[
            ("0c/shuffle_0_1_0.data", 1000),
            ("0c/shuffle_0_1_0.index", 234),
            ("3f/x", 0),
        ],
    );
    std::fs::create_dir_all(h.local("/mnt/spark/blockmgr-aaa/11/empty")).unwrap();
    let b = h.scratch("spark-bbb", &[("userFiles-1/app.jar", 5)]);
    // Not Spark's: stays.
    std::fs::create_dir_all(h.local("/mnt/spark/lost+found")).unwrap();
    std::fs::write(h.local("/mnt/spark/lost+found/x"), b"keep").unwrap();
    // An emptyDir of a pod that is gone: left to the kubelet and pod deletion.
    let empty_dir = "/var/lib/kubelet/pods/gone-uid/volumes/kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-e";
    std::fs::create_dir_all(h.local(empty_dir)).unwrap();
    std::fs::write(h.local(&format!("{empty_dir}/f")), vec![0u8; 64]).unwrap();
    let pods = h.pods_file(&[unrelated_pod()]);

    // Dry run: the plan, nothing removed.
    let (code, v) = run(h.args(&pods, false));
    assert_eq!(code, Ok(1), "{v:#}");
    assert_eq!(v["dry_run"], true);
    let planned: Vec<(&str, u64)> = v["plan"]["remove"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap(), c["bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(planned, [("/mnt/spark/blockmgr-aaa", a), ("/mnt/spark/spark-bbb", b)]);
    assert!(
        v["plan"]["remove"][0]["why"]
            .as_str()
            .unwrap()
            .contains("no running pod")
    );
    let left = v["plan"]["left"].as_array().unwrap();
    assert!(
        left.iter()
            .any(|l| l["path"] == empty_dir && l["left_because"].as_str().unwrap().contains("emptyDir")),
        "{left:?}"
    );
    assert!(h.exists("/mnt/spark/blockmgr-aaa/0c/shuffle_0_1_0.data"));

    // Applied: removed, with the bytes freed, exactly.
    let (code, v) = run(h.args(&pods, true));
    assert_eq!(code, Ok(0), "{v:#}");
    let aaa = action(&v, "/mnt/spark/blockmgr-aaa");
    assert_eq!(aaa["result"], "applied", "{aaa:#}");
    assert_eq!(aaa["bytes_freed"], 1234);
    assert_eq!(aaa["evidence"]["bytes_measured"], 1234);
    assert_eq!(action(&v, "/mnt/spark/spark-bbb")["bytes_freed"], 5);
    assert!(!h.exists("/mnt/spark/blockmgr-aaa"));
    assert!(!h.exists("/mnt/spark/spark-bbb"));
    assert!(h.exists(ROOT), "the root itself stays");
    assert_eq!(std::fs::read(h.local("/mnt/spark/lost+found/x")).unwrap(), b"keep");
    assert!(
        h.exists(&format!("{empty_dir}/f")),
        "emptyDir volumes are not removed here"
    );

    // Nothing left to do.
    let (code, v) = run(h.args(&pods, true));
    assert_eq!(code, Ok(0), "{v:#}");
    assert!(v["actions"].as_array().unwrap().is_empty());
}

#[test]
fn symlinks_are_never_followed() {
    let h = host_tree();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("data")).unwrap();
    std::fs::write(outside.path().join("data/precious"), vec![1u8; 4096]).unwrap();
    h.scratch("blockmgr-x", &[("0c/shuffle.data", 100)]);
    std::os::unix::fs::symlink(
        outside.path().join("data"),
        h.local("/mnt/spark/blockmgr-x/0c/link-dir"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("data/precious"),
        h.local("/mnt/spark/blockmgr-x/link-file"),
    )
    .unwrap();
    // A scratch-named symlink in the root: not a directory, never followed, never removed.
    std::os::unix::fs::symlink(outside.path().join("data"), h.local("/mnt/spark/blockmgr-link")).unwrap();
    h.scratch("blockmgr-y", &[("f", 10)]);

    let pods = pod_infos(&[unrelated_pod()]);
    let (snap, plan) = h.plan(&pods);
    let planned: Vec<&str> = plan.remove.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(planned, ["/mnt/spark/blockmgr-x", "/mnt/spark/blockmgr-y"]);
    assert_eq!(plan.remove[0].bytes, 100, "link targets are not counted");

    // blockmgr-y becomes a symlink to the outside between plan and apply.
    std::fs::remove_dir_all(h.local("/mnt/spark/blockmgr-y")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("data"), h.local("/mnt/spark/blockmgr-y")).unwrap();

    let records = h.apply(&snap, &plan, &pods);
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].result, ActionResult::Applied, "{:?}", records[0]);
    assert_eq!(records[0].bytes_freed, Some(100));
    assert_eq!(records[1].result, ActionResult::Skipped, "{:?}", records[1]);
    assert!(
        records[1].detail.as_deref().unwrap().contains("symlink"),
        "{:?}",
        records[1]
    );

    assert!(!h.exists("/mnt/spark/blockmgr-x"));
    assert_eq!(std::fs::read(outside.path().join("data/precious")).unwrap().len(), 4096);
    assert!(
        std::fs::symlink_metadata(h.local("/mnt/spark/blockmgr-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(h.local("/mnt/spark/blockmgr-y"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_dir(outside.path().join("data")).unwrap().count(), 1);
}

#[test]
fn a_root_that_is_a_symlink_is_refused() {
    let h = host_tree();
    h.scratch("blockmgr-1", &[("f", 10)]);
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("blockmgr-2")).unwrap();
    std::fs::write(outside.path().join("blockmgr-2/f"), b"data").unwrap();
    std::os::unix::fs::symlink(h.local(ROOT), h.local("/mnt/alias")).unwrap();
    std::os::unix::fs::symlink(outside.path(), h.local("/mnt/elsewhere")).unwrap();
    let roots = ["/mnt/alias", "/mnt/elsewhere"];

    let pods = pod_infos(&[unrelated_pod()]);
    let snap = h.snapshot(&pods, &roots);
    let roots: Vec<String> = roots.iter().map(|r| r.to_string()).collect();
    let plan = local_dirs::plan(&h.host, &roots, &snap, &settings());
    assert!(plan.remove.is_empty(), "{plan:?}");
    for r in &plan.roots {
        assert!(!r.usable);
        assert!(r.problem.as_deref().unwrap().contains("is a symlink: refused"), "{r:?}");
    }
    // Through the command too: nothing to do, nothing removed.
    let file = h.pods_file(&[unrelated_pod()]);
    let mut args = h.args(&file, true);
    args.local_dir_root = roots.clone();
    let (code, v) = run(args);
    assert_eq!(code, Ok(0), "{v:#}");
    assert_eq!(v["plan"]["roots"][0]["usable"], false);
    assert!(h.exists("/mnt/spark/blockmgr-1/f"));
    assert_eq!(std::fs::read(outside.path().join("blockmgr-2/f")).unwrap(), b"data");
}

#[test]
fn a_live_applications_dir_stays() {
    let h = host_tree();
    h.scratch("blockmgr-live", &[("0c/shuffle.data", 10)]);
    let users = pod_infos(&[unrelated_pod(), root_user()]);
    let nobody = pod_infos(&[unrelated_pod()]);

    // A running pod that mounts the root, created before the dir was written: not a candidate.
    let (_, plan) = h.plan(&users);
    assert!(plan.remove.is_empty(), "{plan:?}");

    // Judged orphaned at plan time, but a user appears before the removal: left.
    let (snap, plan) = h.plan(&nobody);
    assert_eq!(plan.remove.len(), 1);
    let records = h.apply(&snap, &plan, &users);
    assert_eq!(records[0].result, ActionResult::Skipped);
    assert!(
        records[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("no longer judged orphaned"),
        "{:?}",
        records[0]
    );
    assert!(h.exists("/mnt/spark/blockmgr-live/0c/shuffle.data"));

    // A live process with its working directory inside: left, and removed once it is gone.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .current_dir(h.local("/mnt/spark/blockmgr-live/0c"))
        .spawn()
        .unwrap();
    h.expose(sleeper.id());
    let records = h.apply(&snap, &plan, &nobody);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(records[0].result, ActionResult::Skipped, "{:?}", records[0]);
    let detail = records[0].detail.clone().unwrap();
    assert!(detail.contains("in use by"), "{detail}");
    assert!(
        detail.contains(&format!("pid {} (sleep): cwd", sleeper.id())),
        "{detail}"
    );
    assert!(h.exists("/mnt/spark/blockmgr-live/0c/shuffle.data"));

    // A live process (this one) with a file open inside: left too.
    let open = std::fs::File::open(h.local("/mnt/spark/blockmgr-live/0c/shuffle.data")).unwrap();
    let records = h.apply(&snap, &plan, &nobody);
    assert_eq!(records[0].result, ActionResult::Skipped, "{:?}", records[0]);
    assert!(
        records[0].detail.as_deref().unwrap().contains(": fd "),
        "{:?}",
        records[0]
    );
    drop(open);

    let records = h.apply(&snap, &plan, &nobody);
    assert_eq!(records[0].result, ActionResult::Applied, "{:?}", records[0]);
    assert_eq!(records[0].bytes_freed, Some(10));
    assert!(!h.exists("/mnt/spark/blockmgr-live"));
}

#[test]
fn a_file_where_a_directory_is_expected_is_left() {
    let h = host_tree();
    std::fs::write(h.local("/mnt/spark/blockmgr-file"), vec![3u8; 100]).unwrap();
    h.scratch("blockmgr-swap", &[("f", 10)]);
    let pods = pod_infos(&[unrelated_pod()]);
    let (snap, plan) = h.plan(&pods);
    let planned: Vec<&str> = plan.remove.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(planned, ["/mnt/spark/blockmgr-swap"], "a file is never a candidate");

    // The directory is replaced by a file between plan and apply.
    std::fs::remove_dir_all(h.local("/mnt/spark/blockmgr-swap")).unwrap();
    std::fs::write(h.local("/mnt/spark/blockmgr-swap"), b"not a dir").unwrap();
    let records = h.apply(&snap, &plan, &pods);
    assert_eq!(records[0].result, ActionResult::Skipped, "{:?}", records[0]);
    assert!(
        records[0].detail.as_deref().unwrap().contains("not a directory"),
        "{:?}",
        records[0]
    );
    assert_eq!(
        std::fs::read(h.local("/mnt/spark/blockmgr-swap")).unwrap(),
        b"not a dir"
    );
    assert_eq!(std::fs::read(h.local("/mnt/spark/blockmgr-file")).unwrap().len(), 100);
}

/// A bind mount, unmounted when dropped (also when a test panics).
struct BindMount(PathBuf);

impl BindMount {
    fn new(source: &Path, target: &Path) -> BindMount {
        std::fs::create_dir_all(target).unwrap();
        let out = std::process::Command::new("mount")
            .arg("--bind")
            .arg(source)
            .arg(target)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount --bind needs root, as CI has: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        BindMount(target.to_path_buf())
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_bind_mount_inside_an_orphaned_dir_is_never_crossed() {
    let h = host_tree();
    // The mount's source lives outside the root, on the same file system (same device).
    let outside = h.root.parent().unwrap().join("precious");
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::write(outside.join("deep/data"), vec![1u8; 4096]).unwrap();
    let written = h.scratch("blockmgr-x", &[("0a/shuffle.data", 300)]);
    let _mount = BindMount::new(&outside, &h.local("/mnt/spark/blockmgr-x/mp"));
    let pods = h.pods_file(&[unrelated_pod()]);

    // The scan neither counts the mount's bytes nor fails to say why.
    let (code, v) = run(h.args(&pods, false));
    assert_eq!(code, Ok(1), "{v:#}");
    let planned = &v["plan"]["remove"][0];
    assert_eq!(planned["path"], "/mnt/spark/blockmgr-x");
    assert_eq!(
        planned["bytes"], written,
        "the mount's 4096 bytes are not the dir's: {planned:#}"
    );

    // Applied: left with the reason, and the mount's source untouched.
    let (code, v) = run(h.args(&pods, true));
    assert_eq!(code, Ok(0), "{v:#}");
    let x = action(&v, "/mnt/spark/blockmgr-x");
    assert_eq!(x["result"], "skipped", "{x:#}");
    let detail = x["detail"].as_str().unwrap();
    assert!(
        detail.contains("another file system is mounted at mp (a mount point, bind mounts included): left alone"),
        "{detail}"
    );
    assert_eq!(std::fs::read(outside.join("deep/data")).unwrap(), vec![1u8; 4096]);
    assert!(
        h.exists("/mnt/spark/blockmgr-x/mp/deep/data"),
        "still mounted, still there"
    );
    assert!(
        h.exists("/mnt/spark/blockmgr-x/0a/shuffle.data"),
        "nothing of the dir was removed either"
    );
}

#[test]
fn a_running_pod_mounting_the_root_spelt_another_way_keeps_its_dirs() {
    let h = host_tree();
    h.scratch("blockmgr-live", &[("0c/shuffle.data", 10)]);
    for spelling in ["/mnt//spark", "/mnt/./spark/", "/mnt/spark/", "//mnt/spark"] {
        let mut user = root_user();
        user["spec"]["volumes"] = json!([{"name": "spark-local-dir-1", "hostPath": {"path": spelling}}]);
        let (_, plan) = h.plan(&pod_infos(&[unrelated_pod(), user]));
        assert!(plan.remove.is_empty(), "{spelling}: {plan:?}");
        let pods = h.pods_file(&[unrelated_pod(), root_user_with(spelling)]);
        let (code, v) = run(h.args(&pods, true));
        assert_eq!(code, Ok(0), "{spelling}: {v:#}");
        assert!(v["actions"].as_array().unwrap().is_empty(), "{spelling}: {v:#}");
        assert!(h.exists("/mnt/spark/blockmgr-live/0c/shuffle.data"), "{spelling}");
    }
    // A configured root spelt another way is the same root.
    let pods = h.pods_file(&[unrelated_pod()]);
    let mut args = h.args(&pods, false);
    args.local_dir_root = vec!["/mnt//./spark/".into()];
    let (code, v) = run(args);
    assert_eq!(code, Ok(1), "{v:#}");
    assert_eq!(v["plan"]["roots"][0]["root"], "/mnt/spark", "{v:#}");
    assert_eq!(v["plan"]["remove"][0]["path"], "/mnt/spark/blockmgr-live");
}

/// [`root_user`] mounting its local dir as `spelling`.
fn root_user_with(spelling: &str) -> Value {
    let mut pod = root_user();
    pod["spec"]["volumes"] = json!([{"name": "spark-local-dir-1", "hostPath": {"path": spelling}}]);
    pod
}

#[test]
fn names_that_are_not_utf8_are_scanned_shown_escaped_and_removed() {
    use std::os::unix::ffi::OsStrExt as _;
    let h = host_tree();
    let name = std::ffi::OsStr::from_bytes(b"blockmgr-\xff\xfe");
    let dir = h.local("/mnt/spark").join(name);
    std::fs::create_dir_all(dir.join("0a")).unwrap();
    std::fs::write(dir.join("0a/x"), vec![0u8; 20]).unwrap();
    // A name with a newline: quoted in the text plan, so it cannot break a line.
    h.scratch("spark-two\nlines", &[("f", 3)]);
    let pods = h.pods_file(&[unrelated_pod()]);
    let (code, v) = run(h.args(&pods, false));
    assert_eq!(code, Ok(1), "{v:#}");
    let paths: Vec<&str> = v["plan"]["remove"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["/mnt/spark/blockmgr-\\xff\\xfe", "/mnt/spark/spark-two\nlines"],
        "{v:#}"
    );
    let opts = nodemedic::cli::local_dirs_options(&{
        let mut a = h.args(&pods, false);
        a.format.format = Format::Text;
        a
    })
    .unwrap();
    let mut out = vec![];
    let ran = local_dirs::run(&opts, &mut out, &mut |_| Ok(false)).unwrap();
    assert_eq!(ran.code(), 1);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("  remove \"/mnt/spark/spark-two\\nlines\" (3 B, 3 bytes)\n"),
        "{text}"
    );
    let (code, v) = run(h.args(&pods, true));
    assert_eq!(code, Ok(0), "{v:#}");
    assert_eq!(action(&v, "/mnt/spark/blockmgr-\\xff\\xfe")["bytes_freed"], 20, "{v:#}");
    assert!(
        !dir.exists(),
        "the real directory, found again from its escaped name, is gone"
    );
}
