//! The real thing: a cgroup v1 cpuset hierarchy with real `sleep` processes pinned in it,
//! scanned by the real binary. Needs root and `/sys/fs/cgroup/cpuset` (CI has both).
//!
//! The host root is an overlay: `/proc` and `/sys/fs/cgroup` are the machine's own (through
//! symlinks), while `sys/devices/system/cpu` describes a 4-CPU machine so the checkpoint can
//! hold a live entry, two stale ones and a default set on a 2-core CI machine. The live
//! container's cgroup only ever uses CPUs 0 and 1, which every machine has.

use std::os::unix::fs::symlink;
use std::path::Path;

use nodemedic_tests::cgroup_v1::CpusetSandbox;
use nodemedic_tests::hosttree::{container_id, pod_uid, write_file};
use nodemedic_tests::nodemedic;
use serde_json::{Value, json};

struct Fixture {
    _sandbox: CpusetSandbox,
    sandbox_name: String,
    root: tempfile::TempDir,
    live_uid: String,
    empty_uid: String,
    gone_uid: String,
    live_id: String,
    live_pid: u32,
}

fn setup() -> Fixture {
    let mut sb = CpusetSandbox::new("nodemedic-test").expect("cgroup v1 cpuset sandbox (run as root)");
    let live_uid = pod_uid("cg-live");
    let empty_uid = pod_uid("cg-empty");
    let gone_uid = pod_uid("cg-gone");
    let live_id = container_id("cg-live/app");
    let live_leaf = format!("kubepods/pod{live_uid}/{live_id}");
    sb.mkdir(&live_leaf, Some("1")).unwrap();
    let live_pid = sb.spawn_sleep(&live_leaf).unwrap();
    sb.mkdir(
        &format!("kubepods/burstable/pod{empty_uid}/{}", container_id("cg-empty/app")),
        Some("0"),
    )
    .unwrap();

    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    symlink("/proc", r.join("proc")).unwrap();
    for cpu in 0..4 {
        let topology = r.join(format!("sys/devices/system/cpu/cpu{cpu}/topology"));
        write_file(&topology.join("core_id"), format!("{cpu}\n")).unwrap();
        write_file(&topology.join("physical_package_id"), "0\n").unwrap();
    }
    // Written an hour ago: the kubelet has had many reconcile periods to drop stale entries.
    sb.write_host(r, "0-3", &[(&live_uid, "1"), (&empty_uid, "2"), (&gone_uid, "3")])
        .unwrap();
    let sandbox_name = sb.name.clone();
    Fixture {
        _sandbox: sb,
        sandbox_name,
        root,
        live_uid,
        empty_uid,
        gone_uid,
        live_id,
        live_pid,
    }
}

fn scan(f: &Fixture, extra: &[&str]) -> Value {
    let mut args = vec![
        "scan",
        "--host-root",
        f.root.path().to_str().unwrap(),
        "--node",
        "cg-node",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let run = nodemedic(&args);
    assert_eq!(run.code, 1, "stderr: {}\nstdout: {}", run.stderr, run.stdout);
    serde_json::from_str(&run.stdout).unwrap()
}

fn findings(report: &Value) -> Vec<(String, String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let e = &f["evidence"];
            (
                f["rule"].as_str().unwrap().to_string(),
                e["pod_uid"].as_str().unwrap_or("").to_string(),
                e["reason"]
                    .as_str()
                    .or(e["cgroup_cpus"].as_str())
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn real_cpuset_hierarchy_live_and_stale_entries() {
    let f = setup();
    // No pod list: liveness from the real cgroup tree and the real sleep process.
    let report = scan(&f, &["--offline"]);
    assert_eq!(report["sources"]["cgroups"], "ok");
    assert_eq!(report["sources"]["pods"], "cgroups");
    let mut want = vec![
        (
            "stale-cpu-assignment".to_string(),
            f.empty_uid.clone(),
            format!("the cgroup of pod {} has no processes left", f.empty_uid),
        ),
        (
            "stale-cpu-assignment".to_string(),
            f.gone_uid.clone(),
            format!("pod {} has no cgroup on this node", f.gone_uid),
        ),
    ];
    want.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(findings(&report), want);

    // With a pod list naming the live pod and its container id, then a real cpuset change
    // (the cgroup widened to 0-1): the kernel moves the sleep's affinity with it.
    let pods = json!({"apiVersion": "v1", "kind": "List", "items": [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "live", "namespace": "default", "uid": f.live_uid},
        "spec": {"nodeName": "cg-node", "containers": [{"name": "app", "image": "busybox",
                 "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}]},
        "status": {"phase": "Running", "qosClass": "Guaranteed",
                   "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "",
                                          "containerID": format!("containerd://{}", f.live_id)}]}
    }]});
    let pods_file = f.root.path().join("pods.json");
    std::fs::write(&pods_file, pods.to_string()).unwrap();
    let report = scan(&f, &["--pods", pods_file.to_str().unwrap()]);
    assert!(
        findings(&report)
            .iter()
            .all(|(rule, _, _)| rule == "stale-cpu-assignment"),
        "in sync: no drift yet"
    );

    std::fs::write(
        Path::new(nodemedic_tests::cgroup_v1::CPUSET_MOUNT)
            .join(&f.sandbox_name)
            .join(format!("kubepods/pod{}/{}/cpuset.cpus", f.live_uid, f.live_id)),
        "0-1",
    )
    .unwrap();
    let report = scan(&f, &["--pods", pods_file.to_str().unwrap()]);
    let drift: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["rule"] == "cpuset-drift")
        .collect();
    assert_eq!(drift.len(), 1, "{report:#}");
    let e = &drift[0]["evidence"];
    assert_eq!(e["pod_uid"], f.live_uid.as_str());
    assert_eq!(e["kind"], "exclusive");
    assert_eq!(e["checkpoint_cpus"], "1");
    assert_eq!(e["cgroup_cpus"], "0-1");
    assert_eq!(
        e["process_cpus"], "0-1",
        "Cpus_allowed_list of the real sleep {}",
        f.live_pid
    );
    assert_eq!(
        e["cgroup"],
        format!(
            "/sys/fs/cgroup/cpuset/{}/kubepods/pod{}/{}",
            f.sandbox_name, f.live_uid, f.live_id
        )
    );
    let stale: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["rule"] == "stale-cpu-assignment")
        .map(|x| x["evidence"]["pod_uid"].as_str().unwrap())
        .collect();
    assert_eq!(stale.len(), 2);
    assert!(stale.contains(&f.empty_uid.as_str()) && stale.contains(&f.gone_uid.as_str()));
}

#[test]
fn sandbox_cleans_up_after_itself() {
    let name = {
        let f = setup();
        assert!(
            Path::new(nodemedic_tests::cgroup_v1::CPUSET_MOUNT)
                .join(&f.sandbox_name)
                .is_dir()
        );
        assert!(Path::new(&format!("/proc/{}", f.live_pid)).exists());
        (f.sandbox_name.clone(), f.live_pid)
    };
    assert!(
        !Path::new(nodemedic_tests::cgroup_v1::CPUSET_MOUNT)
            .join(&name.0)
            .exists(),
        "hierarchy removed"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", name.1)).unwrap_or_default();
    assert!(
        status.is_empty() || !status.contains("sleep"),
        "sleep {} was killed",
        name.1
    );
}

/// The kernel's side of the daemon's inotify watching, on a real cgroup v1 cpuset tree: which
/// changes are delivered (a pod cgroup and a container created, a cpuset written, a process
/// attached, the cgroups removed), which are not (a process exiting), and that the watches of
/// removed cgroups are released (cgroupfs never reports a watched directory's own removal).
#[tokio::test]
async fn inotify_on_a_real_cpuset_tree_reports_what_the_daemon_rereads() {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use nodemedic::collect::cgroups::Layout;
    use nodemedic::daemon::hostwatch::{Changes, HostWatch};
    use nodemedic_rules::snapshot::CgroupVersion;

    /// The inotify watches this process holds, as the kernel lists them in fdinfo.
    fn kernel_watches() -> usize {
        std::fs::read_dir("/proc/self/fdinfo")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .map(|t| t.lines().filter(|l| l.starts_with("inotify wd:")).count())
            .sum()
    }
    async fn next(w: &mut HostWatch, what: &str) -> Changes {
        tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .unwrap_or_else(|_| panic!("no inotify event within 5 s after {what}"))
    }
    async fn quiet(w: &mut HostWatch) -> Option<Changes> {
        tokio::time::timeout(Duration::from_millis(300), w.next()).await.ok()
    }

    let mut sb = CpusetSandbox::new("nodemedic-inotify").expect("cgroup v1 cpuset sandbox (run as root)");
    sb.mkdir("kubepods/burstable", None).unwrap();
    let kubelet = tempfile::tempdir().unwrap();
    let layout = Layout {
        kubepods: sb.root().join("kubepods"),
        version: CgroupVersion::V1,
        driver: "cgroupfs",
    };
    let before = kernel_watches();
    let mut w = HostWatch::new().unwrap();
    w.arm(kubelet.path(), Some(&layout));
    assert_eq!(w.len(), 3, "{w:?}");
    assert_eq!(kernel_watches(), before + 3);

    let uid = pod_uid("inotify-pod");
    let pod_rel = format!("kubepods/burstable/pod{uid}");
    let pod = sb.mkdir(&pod_rel, None).unwrap();
    let expect = BTreeSet::from([pod.clone()]);
    assert_eq!(next(&mut w, "mkdir of the pod cgroup").await.pods, expect);
    let leaf_rel = format!("{pod_rel}/{}", container_id("inotify-pod/app"));
    sb.mkdir(&leaf_rel, None).unwrap();
    assert_eq!(next(&mut w, "mkdir of the container cgroup").await.pods, expect);
    assert_eq!(w.len(), 5, "the pod and its container are watched: {w:?}");
    sb.set_cpus(&leaf_rel, "0").unwrap();
    assert_eq!(next(&mut w, "a write of cpuset.cpus").await.pods, expect);
    let pid = sb.spawn_sleep(&leaf_rel).unwrap();
    assert_eq!(
        next(&mut w, "a process attached (cgroup.procs written)").await.pods,
        expect
    );
    // Reading is no change.
    let _ = std::fs::read_to_string(sb.root().join(&leaf_rel).join("cgroup.procs")).unwrap();
    // cgroup v1 reports no exit: the daemon's full rescan has to see it (docs/architecture.md).
    sb.stop(pid);
    assert_eq!(
        quiet(&mut w).await,
        None,
        "cgroup v1 delivers no event when a process exits"
    );

    std::fs::remove_dir(sb.root().join(&leaf_rel)).unwrap();
    std::fs::remove_dir(&pod).unwrap();
    let mut c = next(&mut w, "rmdir of the cgroups").await;
    while let Some(more) = quiet(&mut w).await {
        c.merge(more);
    }
    assert_eq!(c.pods, expect);
    assert_eq!(w.len(), 3, "the removed cgroups' watches are dropped: {w:?}");
    assert_eq!(kernel_watches(), before + 3, "and the kernel released them");
}

/// The agent reports its own container's limits as the kernel holds them: moved into real
/// cgroup v1 `cpu` and `memory` cgroups with a CFS quota of 20 ms per 100 ms and a 96 MiB
/// limit (the base DaemonSet's 200m and 96Mi), its `/metrics` says 0.2 cores and 100663296
/// bytes. The dashboard draws usage against these.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reports_its_own_cgroup_limits() {
    use nodemedic_tests::agent::{Agent, wait_for};
    use nodemedic_tests::apiserver::ApiServer;
    use std::time::Duration;

    struct Cgroup(std::path::PathBuf);
    impl Drop for Cgroup {
        fn drop(&mut self) {
            // The agent is killed first (declared later, dropped earlier); a cgroup whose last
            // task just died can be busy for a moment.
            for _ in 0..50 {
                if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let name = format!("nodemedic-limits-{}", std::process::id());
    let make = |controller: &str, files: &[(&str, &str)]| {
        let dir = Path::new("/sys/fs/cgroup").join(controller).join(&name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e} (needs root and cgroup v1)", dir.display()));
        for (file, value) in files {
            std::fs::write(dir.join(file), value).unwrap_or_else(|e| panic!("{file}: {e}"));
        }
        Cgroup(dir)
    };
    let cpu = make("cpu", &[("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "20000")]);
    let memory = make("memory", &[("memory.limit_in_bytes", "100663296")]);

    let api = ApiServer::start().await.unwrap();
    let agent = Agent::start(&api, None, &[]);
    for cg in [&cpu, &memory] {
        std::fs::write(cg.0.join("cgroup.procs"), agent.pid().to_string()).unwrap();
    }
    wait_for("the limits in /metrics", Duration::from_secs(30), &agent, || {
        agent.metric("nodemedic_cpu_limit_cores") == Some(0.2)
            && agent.metric("nodemedic_memory_limit_bytes") == Some(100_663_296.0)
    })
    .await;
    // The quota lifted: no limit, +Inf.
    std::fs::write(cpu.0.join("cpu.cfs_quota_us"), "-1").unwrap();
    wait_for("no CPU limit", Duration::from_secs(30), &agent, || {
        agent.metric("nodemedic_cpu_limit_cores") == Some(f64::INFINITY)
    })
    .await;
    drop(agent);
}
