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
