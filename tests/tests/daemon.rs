//! End to end: the real `nodemedic run` daemon against the in-repo API server double over
//! HTTPS. Each test starts its own double and daemon; the daemon is killed when the test
//! ends, pass or fail.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime};
use nodemedic_tests::nodemedic_bin;
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, bound_pod, finish, rejected_pod};
use serde_json::{Value, json};

const NODE: &str = "worker-7";

struct Agent {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    /// Starts `nodemedic run` on a host tree with `node`'s files against `api`.
    fn start(api: &ApiServer, host: Option<&Node>, extra: &[&str]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        std::fs::create_dir_all(&root).unwrap();
        if let Some(node) = host {
            node.write(&root).unwrap();
        }
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, true).unwrap();
        let mut args: Vec<String> = [
            "run",
            "--host-root",
            root.to_str().unwrap(),
            "--node",
            NODE,
            "--pod-name",
            "nodemedic-test",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Fast defaults for tests, unless the test sets its own.
        for (flag, value) in [
            ("--scan-interval-seconds", "0.3"),
            ("--driver-cache-ttl-seconds", "0.5"),
            ("--request-timeout-seconds", "3"),
        ] {
            if !extra.contains(&flag) {
                args.extend([flag.to_string(), value.to_string()]);
            }
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Command::new(nodemedic_bin())
            .args(&args)
            .env("NODEMEDIC_LOG", "info,kube=warn")
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("NODE_NAME")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            let text = log.lock().unwrap().clone();
            if let Some(i) = text.find("listen=") {
                let rest = &text[i + 7..];
                break rest.split_whitespace().next().unwrap().to_string();
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("nodemedic run exited with {status}:\n{text}");
            }
            assert!(Instant::now() < deadline, "no listen address logged:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        };
        Agent {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    fn get(&self, path: &str) -> (u16, String) {
        let Ok(mut s) = TcpStream::connect(&self.addr) else {
            return (0, String::new());
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (code, body)
    }

    /// The value of one metric sample, e.g. `nodemedic_rule_firing{rule="duplicate-driver"}`.
    fn metric(&self, sample: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.trim().parse().ok())
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn scans(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains(" scan ") || l.ends_with(" scan"))
            .count()
    }
}

async fn wait_for(what: &str, timeout: Duration, agent: &Agent, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}\n--- agent log\n{}", agent.log());
}

fn node_object() -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid-7"},
           "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                      "lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-21T08:00:00Z"}]}})
}

fn events_with_reason(api: &ApiServer, reason: &str) -> Vec<Value> {
    api.store()
        .list("events.events.k8s.io")
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

fn node_condition(api: &ApiServer, type_: &str) -> Option<Value> {
    let node = api.store().get("nodes", None, NODE)?;
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_mode_executor_whose_driver_is_deleted_is_orphaned_everywhere() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    // Client mode: the driver is a notebook pod on another node; executors have no owner
    // reference and find it only through SPARK_DRIVER_URL.
    let app = SparkApp::new(SparkVersion::V3_5, "analytics", "adhoc-join");
    let notebook = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "jupyter-alice", "namespace": "analytics", "uid": "nb-uid-1"},
        "spec": {"nodeName": "worker-2", "containers": [{"name": "notebook", "image": "jupyter/pyspark-notebook"}]},
        "status": {"phase": "Running", "podIP": "10.42.3.17"}});
    store.create(notebook);
    let exec = app.executor(1, "exec-uid-1", NODE, None, "10.42.3.17");
    store.create(exec);
    let agent = Agent::start(&api, None, &[]);
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    // The daemon has seen the driver alive...
    wait_for("a few scans", Duration::from_secs(60), &agent, || agent.scans() >= 3).await;
    assert_eq!(agent.metric("nodemedic_orphaned_executors"), Some(0.0));
    assert_eq!(
        agent.metric("nodemedic_rule_firing{rule=\"executor-without-owner\"}"),
        Some(1.0)
    );
    // ...and then the driver is deleted.
    store.delete("pods", Some("analytics"), "jupyter-alice");
    wait_for("the orphan metric", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_orphaned_executors") == Some(1.0)
    })
    .await;
    wait_for("the event on the executor", Duration::from_secs(30), &agent, || {
        !events_with_reason(&api, "OrphanedExecutor").is_empty()
    })
    .await;
    let ev = &events_with_reason(&api, "OrphanedExecutor")[0];
    assert_eq!(ev["regarding"]["kind"], "Pod");
    assert_eq!(ev["regarding"]["name"], format!("{}-exec-1", app.prefix));
    assert_eq!(ev["regarding"]["namespace"], "analytics");
    assert_eq!(ev["reportingController"], "nodemedic.io/agent");
    assert_eq!(ev["type"], "Warning");
    wait_for("the node condition", Duration::from_secs(30), &agent, || {
        node_condition(&api, "SparkExecutorOrphans").is_some_and(|c| c["status"] == "True")
    })
    .await;
    // The kubelet's own condition is untouched by the strategic merge.
    assert_eq!(node_condition(&api, "Ready").unwrap()["status"], "True");
    // Cleaning up the executor clears the finding, the metric and the condition.
    store.delete("pods", Some("analytics"), &format!("{}-exec-1", app.prefix));
    wait_for("the condition to clear", Duration::from_secs(30), &agent, || {
        node_condition(&api, "SparkExecutorOrphans").is_some_and(|c| c["status"] == "False")
    })
    .await;
    assert_eq!(agent.metric("nodemedic_orphaned_executors"), Some(0.0));
    assert_eq!(
        node_condition(&api, "SparkExecutorOrphans").unwrap()["reason"],
        "NoSparkExecutorOrphans"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_executor_of_a_finished_driver_waits_for_the_grace_period() {
    for (grace, want) in [("3600", 0.0), ("5", 1.0)] {
        let api = ApiServer::start().await.unwrap();
        let store = api.store();
        store.create(node_object());
        let app = SparkApp::new(SparkVersion::V4_0, "etl", "nightly");
        let mut driver = app.driver("drv-uid-1", "worker-2", "10.42.1.9");
        finish(&mut driver, "Succeeded", 0, 60);
        store.create(driver);
        // Executors kept after the driver finished (deleteOnTermination=false).
        store.create(app.executor(
            1,
            "exec-uid-1",
            NODE,
            Some((&format!("{}-driver", app.prefix), "drv-uid-1")),
            "nightly-svc",
        ));
        let setting = format!("orphan_grace_seconds={grace}");
        let agent = Agent::start(&api, None, &["--rule-setting", &setting]);
        wait_for("readyz", Duration::from_secs(60), &agent, || {
            agent.get("/readyz").0 == 200
        })
        .await;
        wait_for("scans", Duration::from_secs(60), &agent, || agent.scans() >= 4).await;
        assert_eq!(
            agent.metric("nodemedic_orphaned_executors"),
            Some(want),
            "grace {grace}\n{}",
            agent.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejections_with_two_schedulers_are_a_scheduler_conflict() {
    for (schedulers, conflict) in [
        (&["default-scheduler", "volcano"][..], 1.0),
        (&["default-scheduler"][..], 0.0),
    ] {
        let api = ApiServer::start().await.unwrap();
        let store = api.store();
        store.create(node_object());
        for (i, s) in schedulers.iter().enumerate() {
            store.create(bound_pod(
                "batch",
                &format!("running-{i}"),
                &format!("run-{i}"),
                NODE,
                s,
            ));
        }
        for i in 0..3 {
            store.create(rejected_pod(
                "batch",
                &format!("exec-{i}"),
                &format!("rej-{i}"),
                NODE,
                schedulers[i % schedulers.len()],
                "OutOfcpu",
                "Pod was rejected: Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
            ));
        }
        let agent = Agent::start(&api, None, &[]);
        wait_for("readyz", Duration::from_secs(60), &agent, || {
            agent.get("/readyz").0 == 200
        })
        .await;
        wait_for("scans", Duration::from_secs(60), &agent, || agent.scans() >= 3).await;
        assert_eq!(
            agent.metric("nodemedic_rule_firing{rule=\"admission-rejection\"}"),
            Some(1.0)
        );
        assert_eq!(
            agent.metric("nodemedic_rule_firing{rule=\"scheduler-conflict\"}"),
            Some(conflict),
            "{schedulers:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_running_drivers_of_one_application_are_duplicates() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "hourly").operator("sub-1");
    let mut here = app.driver("drv-a", NODE, "10.42.7.3");
    here["metadata"]["name"] = json!("hourly-driver");
    let mut there = app.driver("drv-b", "worker-2", "10.42.2.3");
    there["metadata"]["name"] = json!("hourly-driver-2");
    store.create(here);
    store.create(there);
    let agent = Agent::start(&api, None, &[]);
    wait_for("duplicate-driver", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_rule_firing{rule=\"duplicate-driver\"}") == Some(1.0)
    })
    .await;
    wait_for("its event", Duration::from_secs(30), &agent, || {
        !events_with_reason(&api, "DuplicateDriver").is_empty()
    })
    .await;
}

/// A node whose checkpoint holds a stale entry: a host finding that needs no API.
fn stale_host() -> Node {
    Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd).pod(Pod::new("gone-job", 2).exclusive("2,6").gone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_down_for_30_seconds_then_back() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    let mut agent = Agent::start(&api, Some(&stale_host()), &[]);
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    wait_for("the stale event", Duration::from_secs(30), &agent, || {
        !events_with_reason(&api, "StaleCPUAssignment").is_empty()
    })
    .await;

    api.faults().set_down(true);
    let down_at = Instant::now();
    let scan_before = agent.metric("nodemedic_last_scan_timestamp_seconds").unwrap();
    while down_at.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(agent.alive(), "the daemon died while the API was down\n{}", agent.log());
        // Host findings keep coming.
        assert_eq!(
            agent.metric("nodemedic_rule_firing{rule=\"stale-cpu-assignment\"}"),
            Some(1.0)
        );
    }
    let scan_during = agent.metric("nodemedic_last_scan_timestamp_seconds").unwrap();
    assert!(scan_during > scan_before + 20.0, "scans went on while the API was down");
    assert_eq!(agent.metric("nodemedic_pod_watch_up"), Some(0.0));

    api.faults().set_down(false);
    // The watch resumes: a pod created after the outage reaches the rules.
    let app = SparkApp::new(SparkVersion::V2_4, "etl", "legacy");
    store.create(app.executor(
        3,
        "exec-after",
        NODE,
        Some(("legacy-driver", "no-such-uid")),
        "legacy-driver-svc.etl.svc",
    ));
    wait_for("the watch to resume", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_orphaned_executors") == Some(1.0)
    })
    .await;
    assert_eq!(agent.metric("nodemedic_pod_watch_up"), Some(1.0));
    // Nothing duplicated: still one event for the stale entry, one for the orphan.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(events_with_reason(&api, "StaleCPUAssignment").len(), 1);
    assert_eq!(events_with_reason(&api, "OrphanedExecutor").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finding_lasting_100_scans_is_one_event_series() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let agent = Agent::start(
        &api,
        Some(&stale_host()),
        &[
            "--scan-interval-seconds",
            "0.05",
            "--event-series-interval-seconds",
            "1",
            "--condition-heartbeat-seconds",
            "600",
        ],
    );
    wait_for("100 scans", Duration::from_secs(120), &agent, || agent.scans() >= 100).await;
    let events = events_with_reason(&api, "StaleCPUAssignment");
    assert_eq!(events.len(), 1, "{events:#?}");
    let series = &events[0]["series"];
    assert!(
        series["count"].as_i64().unwrap_or(0) >= 2,
        "the series counts repeats: {:#}",
        events[0]
    );
    // Condition patches only on change or heartbeat: one patch for 100 scans.
    let patches = api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/nodes/{NODE}/status")))
        .count();
    assert_eq!(patches, 1);
    assert_eq!(node_condition(&api, "CPUManagerStateStale").unwrap()["status"], "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_versions_and_the_operator_as_they_write_pods() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    let apps = [
        SparkApp::new(SparkVersion::V2_4, "etl", "legacy"),
        SparkApp::new(SparkVersion::V3_5, "etl", "daily"),
        SparkApp::new(SparkVersion::V4_0, "etl", "ml-train"),
        SparkApp::new(SparkVersion::V3_5, "etl", "operator-run").operator("sub-7"),
    ];
    // Each app: its driver deleted, one executor left on this node with the owner reference.
    for (i, app) in apps.iter().enumerate() {
        let driver = format!("{}-driver", app.prefix);
        store.create(app.executor(
            1,
            &format!("e{i}"),
            NODE,
            Some((&driver, &format!("d{i}"))),
            &format!("{}-driver-svc.etl.svc", app.prefix),
        ));
    }
    let agent = Agent::start(&api, None, &[]);
    wait_for("four orphans", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_orphaned_executors") == Some(4.0)
    })
    .await;
    wait_for("four events", Duration::from_secs(30), &agent, || {
        events_with_reason(&api, "OrphanedExecutor").len() == 4
    })
    .await;
    let budget = api
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && !r.is_watch && r.path.contains("/pods/"))
        .count();
    assert!(budget >= 4, "drivers are looked up by name: {budget}");
    let _ = Path::new(".");
}
