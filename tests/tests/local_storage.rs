//! Spark's local storage end to end: the real `nodemedic run` against a real file system that
//! fills (a tmpfs of a fixed size the test mounts: CI runs as root), the kubelet's eviction of
//! the executor through the API server double, and real listening sockets (and none) for the
//! external shuffle service.
//!
//! - The forecast of `local-storage-eviction-risk` is held to the real time: an executor's
//!   emptyDir on a 64 MiB tmpfs grows at 1 MiB/s until the file system's available bytes fall
//!   below the kubelet's `nodefs.available` threshold (10%); the forecast the agent reports as
//!   soon as it knows the growth is within 20% of when that really happens. Whether the images
//!   share the disk comes from the machine's own mount table.
//! - Then the kubelet evicts it (its pod `Failed`, `Evicted`, the kubelet's own message):
//!   `spark-executor-evicted` names it, the bytes last measured and the warning before;
//!   `nodemedic_spark_executor_evictions_total{reason="node_pressure"}` counts it once.
//! - With `kubelet_stats_url`, the kubelet's `/stats/summary` (served by the double) is the
//!   measurement where it is readable; its 403 is said and walked around, and the switch is
//!   "cannot judge yet", never "nothing grows".
//! - `shuffle-service-missing` reads the kernel's own socket tables, live: an executor with
//!   `spark.shuffle.service.enabled=true` is fine while a socket listens on its port, critical
//!   once it closes, fine again when it listens again.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::events_with_reason;
use nodemedic_tests::hosttree::{Layout, Node, Runtime};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, now_rfc3339};
use serde_json::{Value, json};

const MIB: u64 = 1 << 20;

/// A tmpfs of a fixed size, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_mib: u64) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m,mode=0755"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount(8)");
        assert!(
            status.success(),
            "mount -t tmpfs {}: {status} (this test needs root, as CI runs it)",
            dir.path().display()
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// (capacity, available) bytes, as the kubelet's eviction manager reads them.
    fn room(&self) -> (u64, u64) {
        let fs = nix::sys::statvfs::statvfs(self.path()).unwrap();
        let frsize = fs.fragment_size() as u64;
        (fs.blocks() as u64 * frsize, fs.blocks_available() as u64 * frsize)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// The application's driver on another node and its executor 1 here, `env` added to the
/// executor's container.
fn application(app: &SparkApp, executor_uid: &str, env: &[(&str, String)]) -> (Value, Value) {
    let driver_uid = format!("{executor_uid}-driver");
    let driver = app.driver(&driver_uid, "worker-9", "10.0.9.4");
    let driver_name = driver["metadata"]["name"].as_str().unwrap().to_string();
    let mut executor = app.executor(
        1,
        executor_uid,
        NODE,
        Some((&driver_name, &driver_uid)),
        &format!("{}-driver-svc.{}.svc", app.prefix, app.namespace),
    );
    let vars = executor["spec"]["containers"][0]["env"].as_array_mut().unwrap();
    for (name, value) in env {
        vars.push(json!({"name": name, "value": value}));
    }
    (driver, executor)
}

/// A sample of the agent's metrics whose line starts with `prefix` and names `label`.
fn sample(agent: &Agent, prefix: &str, label: &str) -> Option<f64> {
    let (_, body) = agent.get("/metrics");
    body.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(label))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Writes `rate` bytes a second into new shuffle files below `dir`, in 64 KiB chunks on an
/// even clock, until `stop` says so; returns when it stopped and the bytes written.
fn write_steadily(dir: &Path, rate: u64, mut stop: impl FnMut() -> bool) -> (Instant, u64) {
    use std::io::Write as _;
    const CHUNK: u64 = 64 * 1024;
    let per_second = rate / CHUNK;
    let tick = Duration::from_secs_f64(1.0 / per_second as f64);
    let chunk = vec![0x5au8; CHUNK as usize];
    let start = Instant::now();
    let mut written = 0u64;
    let mut file = None;
    for n in 0u64.. {
        if n % per_second == 0 {
            // A new map output file every second, as shuffle writers make them.
            let sub = dir.join(format!("{:02x}", n / per_second % 64));
            std::fs::create_dir_all(&sub).unwrap();
            file = Some(std::fs::File::create(sub.join(format!("shuffle_0_{}_0.data", n / per_second))).unwrap());
        }
        if let Err(e) = file.as_mut().unwrap().write_all(&chunk) {
            panic!("writing shuffle data: {e} after {written} bytes (the threshold was never crossed)");
        }
        written += CHUNK;
        if stop() {
            return (Instant::now(), written);
        }
        let next = start + tick * (n as u32 + 1);
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forecast_on_a_filling_file_system_holds_to_the_real_time_and_the_eviction_is_named() {
    let api = ApiServer::start().await.unwrap();
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "shuffle-heavy");
    let (driver, executor) = application(&app, "exec-uid-1", &[]);
    let executor_name = executor["metadata"]["name"].as_str().unwrap().to_string();
    api.store().create(driver);
    api.store().create(executor);

    // The kubelet's directory on a 64 MiB tmpfs, with the node's files in it; the kubelet
    // evicts at nodefs.available<10%.
    let fs = Tmpfs::mount(64);
    let mut node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd);
    node.kubelet_yaml = node.kubelet_yaml.replace(
        "evictionHard:\n  memory.available: 100Mi\n",
        "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: \"10%\"\n",
    );
    let scratch = tempfile::tempdir().unwrap();
    node.write(scratch.path()).unwrap();
    copy_tree(&scratch.path().join("var/lib/kubelet"), fs.path());
    let local_dir = fs
        .path()
        .join("pods/exec-uid-1/volumes/kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-3f1c");
    std::fs::create_dir_all(&local_dir).unwrap();

    let kubelet_dir = fs.path().to_str().unwrap().to_string();
    let agent = Agent::start(
        &api,
        Some(&node),
        &[
            "--kubelet-dir",
            &kubelet_dir,
            "--local-storage-interval-seconds",
            "1",
            "--local-storage-window-seconds",
            "60",
        ],
    );
    // The machine's own mount table, live: where the images are against the tmpfs.
    let mountinfo = agent.host_root().join("proc/1/mountinfo");
    let _ = std::fs::remove_file(&mountinfo);
    std::os::unix::fs::symlink("/proc/self/mountinfo", &mountinfo).unwrap();

    let (capacity, _) = fs.room();
    assert_eq!(capacity, 64 * MIB);
    let threshold = (capacity as f64 * 0.10).ceil() as u64;
    let forecast_line = "nodemedic_local_storage_forecast_seconds{";
    let app_label = format!("app=\"{}\"", app.app_id);

    // The writer on its own thread; this one watches the agent's forecast.
    let writer = {
        let (dir, fs_path) = (local_dir.clone(), fs.path().to_path_buf());
        std::thread::spawn(move || {
            write_steadily(&dir, MIB, || {
                let s = nix::sys::statvfs::statvfs(&fs_path).unwrap();
                (s.blocks_available() as u64 * s.fragment_size() as u64) < threshold
            })
        })
    };
    let started = Instant::now();
    let (seen_at, forecast) = loop {
        if let Some(f) = sample(&agent, forecast_line, &app_label) {
            break (Instant::now(), f);
        }
        assert!(
            started.elapsed() < Duration::from_secs(50) && !writer.is_finished(),
            "no forecast within {:?}\n--- agent log\n{}",
            started.elapsed(),
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The families that need a growing Spark pod are served now, as docs/metrics.md says,
    // and Prometheus' own linter takes the text.
    let (_, body) = agent.get("/metrics");
    let served = nodemedic_tests::exposition::families(&body);
    let documented = nodemedic_tests::exposition::documented();
    for name in nodemedic_tests::exposition::GROWING_SPARK_POD_FAMILIES {
        let kind = documented
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not in docs/metrics.md"));
        assert!(
            served.contains(&(name.to_string(), kind.clone())),
            "{name} ({kind}) not served:\n{body}"
        );
    }
    nodemedic_tests::exposition::promtool_check(&body).unwrap();

    // It is critical (under 5 minutes), against the nodefs threshold: the images (on the
    // machine's root) are not on the tmpfs.
    wait_for("the critical finding", Duration::from_secs(10), &agent, || {
        agent.metric("nodemedic_findings{rule=\"local-storage-eviction-risk\",severity=\"critical\"}") == Some(1.0)
    })
    .await;
    let (crossed_at, written) = tokio::task::spawn_blocking(move || writer.join().unwrap())
        .await
        .unwrap();
    let real = crossed_at.duration_since(seen_at).as_secs_f64();
    let error = (forecast - real).abs() / real;
    eprintln!(
        "forecast {forecast:.1} s after {:.1} s of growth; the threshold was crossed {real:.1} s later \
         ({written} bytes written; error {:.1}%)",
        seen_at.duration_since(started).as_secs_f64(),
        error * 100.0
    );
    assert!(
        error <= 0.20,
        "forecast {forecast:.1} s, really {real:.1} s: {:.0}% off",
        error * 100.0
    );

    let risk = events_with_reason(&api, "LocalStorageEvictionRisk");
    let note = risk
        .iter()
        .find(|e| e["regarding"]["name"] == executor_name.as_str())
        .map(|e| e["note"].as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("no LocalStorageEvictionRisk Event for {executor_name}: {risk:#?}"));
    assert!(
        note.contains(&format!(
            "the kubelet's nodefs.available threshold on {kubelet_dir} (evictionHard 10%"
        )),
        "{note}"
    );
    assert!(note.contains(&app.app_id), "{note}");

    // The kubelet evicts it, as it words it, and removes its volumes.
    let used_ki = written / 1024;
    api.store().modify("pods", Some(&app.namespace), &executor_name, |p| {
        p["status"]["phase"] = json!("Failed");
        p["status"]["reason"] = json!("Evicted");
        p["status"]["message"] = json!(format!(
            "The node was low on resource: ephemeral-storage. Threshold quantity: {threshold}, available: {}Ki. \
             Container spark-kubernetes-executor was using {used_ki}Ki, request is 0, has larger consumption of \
             ephemeral-storage. ",
            (capacity - written) / 1024
        ));
        p["status"]["containerStatuses"][0]["state"] = json!({"terminated": {"exitCode": 137, "reason": "Error",
            "startedAt": now_rfc3339(-120), "finishedAt": now_rfc3339(0)}});
    });
    std::fs::remove_dir_all(fs.path().join("pods/exec-uid-1")).unwrap();
    wait_for("the eviction counted", Duration::from_secs(20), &agent, || {
        agent.metric("nodemedic_spark_executor_evictions_total{reason=\"node_pressure\"}") == Some(1.0)
            && agent.metric("nodemedic_findings{rule=\"spark-executor-evicted\",severity=\"warning\"}") == Some(1.0)
            && agent.metric("nodemedic_findings{rule=\"local-storage-eviction-risk\",severity=\"critical\"}")
                == Some(0.0)
    })
    .await;
    wait_for("its Event", Duration::from_secs(20), &agent, || {
        !events_with_reason(&api, "SparkExecutorEvicted").is_empty()
    })
    .await;
    let ev = &events_with_reason(&api, "SparkExecutorEvicted")[0];
    assert_eq!(ev["regarding"]["name"], executor_name.as_str());
    let note = ev["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("for the node's disk running low (DiskPressure)"),
        "{note}"
    );
    assert!(note.contains("its local dirs held "), "{note}");
    assert!(note.contains("local-storage-eviction-risk warned about it"), "{note}");
    assert!(note.contains("(critical)"), "{note}");
    // Counted once, however many turns see it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        agent.metric("nodemedic_spark_executor_evictions_total{reason=\"node_pressure\"}"),
        Some(1.0)
    );
    assert_eq!(
        agent.metric("nodemedic_spark_executor_evictions_total{reason=\"pod_limit\"}"),
        Some(0.0)
    );
}

/// Copies the files below `from` into `to`.
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target: PathBuf = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shuffle_service_is_missing_while_nothing_listens_on_its_port() {
    let api = ApiServer::start().await.unwrap();
    // A port of our own stands for the shuffle service's.
    let service = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = service.local_addr().unwrap().port();
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "dynamic-allocation");
    let (driver, executor) = application(
        &app,
        "exec-uid-ess",
        &[
            ("SPARK_JAVA_OPT_0", "-Dspark.shuffle.service.enabled=true".into()),
            ("SPARK_JAVA_OPT_1", format!("-Dspark.shuffle.service.port={port}")),
        ],
    );
    api.store().create(driver);
    api.store().create(executor);
    let node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd);
    let agent = Agent::start(&api, Some(&node), &[]);
    // The kernel's own tables of this network namespace, live.
    let net = agent.host_root().join("proc/1/net");
    std::fs::remove_dir_all(&net).unwrap();
    std::os::unix::fs::symlink("/proc/self/net", &net).unwrap();

    let missing = "nodemedic_findings{rule=\"shuffle-service-missing\",severity=\"critical\"}";
    let judged = "nodemedic_rule_judged{rule=\"shuffle-service-missing\"}";
    // Listening: judged, nothing missing, after a turn that read the live tables.
    let turns = agent.scans();
    wait_for(
        "a judgement with the service listening",
        Duration::from_secs(20),
        &agent,
        || agent.scans() > turns + 2 && agent.metric(judged) == Some(1.0),
    )
    .await;
    assert_eq!(agent.metric(missing), Some(0.0), "{}", agent.log());

    drop(service);
    wait_for("the service missing", Duration::from_secs(20), &agent, || {
        agent.metric(missing) == Some(1.0)
    })
    .await;
    wait_for("its Event", Duration::from_secs(20), &agent, || {
        !events_with_reason(&api, "ShuffleServiceMissing").is_empty()
    })
    .await;
    let note = events_with_reason(&api, "ShuffleServiceMissing")[0]["note"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(note.contains(&port.to_string()), "{note}");
    assert!(note.contains(&app.app_id), "{note}");

    // It listens again: the finding clears.
    let _back = TcpListener::bind(("127.0.0.1", port)).unwrap();
    wait_for("the service back", Duration::from_secs(20), &agent, || {
        agent.metric(missing) == Some(0.0)
    })
    .await;
}

/// The kubelet's `/stats/summary` for `executor` (uid `uid`): its local dir holds `used` bytes
/// and the pod `ephemeral` bytes, as the kubelet measured them at unix second `at`.
fn kubelet_summary(executor: &Value, uid: &str, at: i64, used: u64, ephemeral: u64) -> Value {
    let time = jiff::Timestamp::from_second(at)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    json!({
        "node": {"nodeName": NODE, "fs": {"time": time, "availableBytes": 1, "capacityBytes": 2}},
        "pods": [{
            "podRef": {"name": executor["metadata"]["name"], "namespace": executor["metadata"]["namespace"], "uid": uid},
            "containers": [{"name": "spark-kubernetes-executor", "rootfs": {"time": time, "usedBytes": 40960}}],
            "volume": [
                {"time": time, "availableBytes": 500_000_000_000u64, "capacityBytes": 1_000_000_000_000u64,
                 "usedBytes": used, "inodesFree": 1000, "inodes": 2000, "inodesUsed": 1000, "name": "spark-local-dir-1"},
                {"time": time, "usedBytes": 12288, "inodesUsed": 9, "name": "kube-api-access-6xq2v"}
            ],
            "ephemeral-storage": {"time": time, "usedBytes": ephemeral, "inodesUsed": 1010}
        }]
    })
}

/// With `kubelet_stats_url`, Spark's local storage is the kubelet's own accounting, read with
/// the agent's credentials: its bytes (not the walk's), its growth between its own times, the
/// pod's ephemeral storage held against the pod's limit. Without `get` on `nodes/stats` (the
/// kubelet's 403) the log says what to grant, the dirs are walked, and while the walk's growth
/// is not known yet the rule cannot judge and keeps its finding: never "nothing grows".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_accounting_is_read_where_granted_and_walked_around_where_not() {
    const GIB: u64 = 1 << 30;
    let api = ApiServer::start().await.unwrap();
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "kubelet-counted");
    let uid = "exec-uid-kc";
    let (driver, mut executor) = application(&app, uid, &[]);
    executor["spec"]["containers"][0]["resources"]["limits"]["ephemeral-storage"] = json!("10Gi");
    api.store().create(driver);
    api.store().create(executor.clone());
    // Two figures a minute apart (the kubelet's volumeStatsAggPeriod): 1 GiB/min; the pod
    // counts 9.5 GiB of its 10 GiB limit at the second, 30 s from it at that growth.
    let t = jiff::Timestamp::now().as_second();
    api.set_kubelet_summary(Some(kubelet_summary(
        &executor,
        uid,
        t - 60,
        8 * GIB,
        8 * GIB + GIB / 2,
    )));

    let node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd);
    let agent = Agent::start(
        &api,
        Some(&node),
        &[
            "--kubelet-stats-url",
            &api.https_url(),
            "--local-storage-interval-seconds",
            "1",
        ],
    );
    // What is on disk is 4 KiB: the walk's figure, told apart from the kubelet's.
    let local_dir = agent.host_root().join(format!(
        "var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/spark-local-dir-1"
    ));
    std::fs::create_dir_all(&local_dir).unwrap();
    std::fs::write(local_dir.join("shuffle_0_0_0.data"), vec![1u8; 4096]).unwrap();
    let asked = || {
        api.requests()
            .iter()
            .filter(|r| r.path == "/stats/summary" && r.status == 200)
            .count()
    };
    wait_for("the kubelet asked", Duration::from_secs(20), &agent, || asked() > 0).await;
    api.set_kubelet_summary(Some(kubelet_summary(&executor, uid, t, 9 * GIB, 9 * GIB + GIB / 2)));

    let critical = "nodemedic_findings{rule=\"local-storage-eviction-risk\",severity=\"critical\"}";
    wait_for("the critical finding", Duration::from_secs(20), &agent, || {
        agent.metric(critical) == Some(1.0)
    })
    .await;
    let app_label = format!("{{app=\"{}\"}}", app.app_id);
    assert_eq!(agent.metric("nodemedic_kubelet_stats_readable"), Some(1.0));
    assert_eq!(
        agent.metric(&format!("nodemedic_local_storage_bytes{app_label}")),
        Some((9 * GIB) as f64),
        "the kubelet's figure, not the walk's"
    );
    let growth = agent
        .metric(&format!("nodemedic_local_storage_growth_bytes_per_second{app_label}"))
        .unwrap();
    assert!((growth - GIB as f64 / 60.0).abs() < 1.0, "{growth}");
    // The kubelet was asked with the agent's own token.
    let request = api.requests().into_iter().find(|r| r.path == "/stats/summary").unwrap();
    assert_eq!(request.method, "GET");
    assert_eq!(
        request.bearer_token.as_deref(),
        Some(nodemedic_tests::apiserver::TEST_TOKEN)
    );
    wait_for("its Event", Duration::from_secs(20), &agent, || {
        !events_with_reason(&api, "LocalStorageEvictionRisk").is_empty()
    })
    .await;
    let note = events_with_reason(&api, "LocalStorageEvictionRisk")[0]["note"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(note.contains("its ephemeral-storage limit of 10.0 GiB"), "{note}");

    // nodes/stats not granted: the kubelet's 403, said once with what to grant.
    api.set_kubelet_stats_granted(false);
    wait_for("the kubelet unreadable", Duration::from_secs(20), &agent, || {
        agent.metric("nodemedic_kubelet_stats_readable") == Some(0.0)
    })
    .await;
    let judged = "nodemedic_rule_judged{rule=\"local-storage-eviction-risk\"}";
    wait_for(
        "the rule waiting on the walk's growth",
        Duration::from_secs(20),
        &agent,
        || agent.metric(judged) == Some(0.0),
    )
    .await;
    let log = agent.log();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("could not be read") && l.contains("/stats/summary"))
        .collect();
    assert_eq!(said.len(), 1, "once per reason:\n{log}");
    assert!(said[0].contains("403"), "{}", said[0]);
    assert!(
        said[0].contains("nodes/stats (components/kubelet-stats)"),
        "{}",
        said[0]
    );
    // Walked now, and its growth not known yet: the finding is kept, not cleared.
    assert_eq!(agent.metric(critical), Some(1.0), "{}", agent.log());
    // Once the walk has measured over 30 s: its own figure, which does not grow.
    wait_for("the walk's figure", Duration::from_secs(45), &agent, || {
        agent.metric(judged) == Some(1.0)
            && agent
                .metric(&format!("nodemedic_local_storage_bytes{app_label}"))
                .is_some_and(|b| b < 1_048_576.0)
    })
    .await;
    assert_eq!(agent.metric(critical), Some(0.0), "{}", agent.log());
}
