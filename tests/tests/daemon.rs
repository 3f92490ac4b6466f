//! End to end: the real `nodemedic run` daemon against the in-repo API server double over
//! HTTPS. Each test starts its own double and daemon; the daemon is killed when the test
//! ends, pass or fail.

use std::path::Path;
use std::time::{Duration, Instant};

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::{events_with_reason, node_condition, node_object, stale_host};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, bound_pod, finish, rejected_pod};
use serde_json::json;

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
    // The Event and the log carry the remedy, as the text report does.
    let note = ev["note"].as_str().unwrap();
    assert!(note.contains(" Remedy: kubectl nodemedic repair "), "{note}");
    assert!(
        agent
            .log()
            .lines()
            .any(|l| l.contains("new finding") && l.contains("orphaned-executor") && l.contains("remedy=")),
        "{}",
        agent.log()
    );
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

/// An API server holding this node and `n` executors the kubelet rejected with `OutOfcpu`
/// (`batch/exec-<i>`, UID `rej-<i>`).
async fn api_with_rejected_pods(n: u32) -> ApiServer {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    for i in 0..n {
        store.create(rejected_pod(
            "batch",
            &format!("exec-{i}"),
            &format!("rej-{i}"),
            NODE,
            "default-scheduler",
            "OutOfcpu",
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
        ));
    }
    api
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_writes_are_counted_by_kind_and_stop_when_the_api_answers() {
    let api = api_with_rejected_pods(2).await;
    let store = api.store();
    // Every write the daemon makes is refused from the start: Events, the node's conditions
    // and the automatic repair's DELETEs. (403: each write is refused on its own; a 5xx would
    // say the API server is unavailable and end the pass at the first write, see the outage
    // tests.)
    let faults = api.faults();
    faults.fail("create", "events.events.k8s.io", 403, None, None);
    faults.fail("patch", "events.events.k8s.io", 403, None, None);
    faults.fail("patch", "nodes/status", 403, None, None);
    faults.fail("delete", "pods", 403, None, None);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "repair:\n  automatic_failed_pods: true\n  failed_pods_older_than_seconds: 0\n  max_actions_per_hour: 50\n",
    )
    .unwrap();
    let agent = Agent::start(
        &api,
        None,
        &["--config", config.to_str().unwrap(), "--scan-interval-seconds", "0.5"],
    );
    let failures = |kind: &str| {
        agent
            .metric(&format!("nodemedic_api_write_failures_total{{kind=\"{kind}\"}}"))
            .unwrap_or(-1.0)
    };
    wait_for("failed writes of every kind", Duration::from_secs(60), &agent, || {
        failures("event") >= 1.0 && failures("node_condition") >= 1.0 && failures("pod_deletion") >= 1.0
    })
    .await;
    assert_eq!(store.list("pods").len(), 2, "no DELETE went through");
    assert!(store.list("events.events.k8s.io").is_empty(), "no Event went through");
    assert!(
        node_condition(&api, "CPUManagerStateStale").is_none(),
        "no condition went through"
    );
    // Every failed pod action is a failed DELETE here, so the two counters agree.
    assert_eq!(
        Some(failures("pod_deletion")),
        agent.metric("nodemedic_repair_actions_total{action=\"failed-pods\",result=\"failed\"}")
    );

    // Back: the finding's Event and the condition go through at the next pass. (A pod whose
    // DELETE failed is tried again after a pause of a minute, doubling up to an hour.)
    faults.clear();
    wait_for("the writes through", Duration::from_secs(60), &agent, || {
        !store.list("events.events.k8s.io").is_empty() && node_condition(&api, "CPUManagerStateStale").is_some()
    })
    .await;
    let settled = WRITE_KINDS.map(failures);
    let scans = agent.scans();
    wait_for("three more scans", Duration::from_secs(30), &agent, || {
        agent.scans() >= scans + 3
    })
    .await;
    assert_eq!(
        WRITE_KINDS.map(failures),
        settled,
        "no failures counted once the API answers"
    );
}

const WRITE_KINDS: [&str; 3] = ["event", "node_condition", "pod_deletion"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_repair_deletes_rejected_pods_only_when_switched_on() {
    for on in [false, true] {
        let api = api_with_rejected_pods(3).await;
        let store = api.store();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!("repair:\n  automatic_failed_pods: {on}\n  failed_pods_older_than_seconds: 0\n  max_actions_per_hour: 2\n"),
        )
        .unwrap();
        let agent = Agent::start(&api, None, &["--config", config.to_str().unwrap()]);
        wait_for("readyz", Duration::from_secs(60), &agent, || {
            agent.get("/readyz").0 == 200
        })
        .await;
        let applied = "nodemedic_repair_actions_total{action=\"failed-pods\",result=\"applied\"}";
        if on {
            wait_for("two deletions", Duration::from_secs(60), &agent, || {
                agent.metric(applied) == Some(2.0)
            })
            .await;
            // The budget of 2 per hour holds: the third pod stays.
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert_eq!(agent.metric(applied), Some(2.0));
            assert_eq!(store.list("pods").len(), 1);
            let deletes: Vec<_> = api.requests().into_iter().filter(|r| r.method == "DELETE").collect();
            assert_eq!(deletes.len(), 2);
            assert!(deletes.iter().all(|r| r.body.contains("\"uid\"")), "UID preconditions");
            wait_for("the repair events", Duration::from_secs(30), &agent, || {
                events_with_reason(&api, "RejectedPodDeleted").len() == 2
            })
            .await;
        } else {
            wait_for("scans", Duration::from_secs(60), &agent, || agent.scans() >= 5).await;
            assert_eq!(agent.metric(applied), Some(0.0));
            assert_eq!(store.list("pods").len(), 3, "off by default: nothing deleted");
        }
    }
}

/// The event-driven daemon reads a quiet node once: every judgement after the first full scan
/// reads nothing from the host, and a change reads only the pod it concerns. (A daemon that
/// fell back to full scans would pass every latency test while costing a scan per interval.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_node_is_read_once_and_a_change_reads_one_pod() {
    use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime};

    let api = ApiServer::start().await.unwrap();
    let pinned = Pod::new("pinned", 2).exclusive("2,6");
    let app_id = pinned.container_id(&pinned.containers[0]);
    let pinned_dir = format!("sys/fs/cgroup/cpuset/kubepods/pod{}", pinned.uid);
    let node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .pod(pinned)
        .pod(Pod::new("web", 1).burstable());
    nodemedic_tests::scenarios::seed_api(&api.store(), &node);
    // A probe round every second: API observations that change while the node stays quiet.
    let agent = Agent::start(
        &api,
        Some(&node),
        &["--scan-interval-seconds", "0.3", "--probe-interval-seconds", "1"],
    );
    let reads = |kind: &str| {
        agent
            .log()
            .lines()
            .filter(|l| l.contains(" scan ") && l.contains(&format!("read=\"{kind}\"")))
            .count()
    };
    // A quiet node: once the first probe round and driver lookups are in (each a change the
    // rules read), the loop turns, finds nothing changed, and judges nothing.
    wait_for("ten quiet turns", Duration::from_secs(60), &agent, || {
        agent.turns("current") >= 10
    })
    .await;
    let judged = agent.turns("judged");
    let current = agent.turns("current");
    wait_for("ten more", Duration::from_secs(60), &agent, || {
        agent.turns("current") >= current + 10
    })
    .await;
    assert_eq!(
        agent.turns("judged"),
        judged,
        "no judgement while nothing changes\n{}",
        agent.log()
    );
    assert_eq!(reads("full"), 1, "{}", agent.log());
    assert_eq!(reads("changes"), 0, "{}", agent.log());
    // The judgements after the first read nothing of the host.
    assert_eq!(reads("none"), judged - 1, "{}", agent.log());
    // The probe rounds and timed Lease requests meanwhile: the API rules alone judged them.
    assert!(agent.turns("api") > 0, "{}", agent.get("/metrics").1);
    // Every directory of the cgroup tree (kubepods, the QoS directories, the pods and their
    // containers) and the kubelet's directory.
    fn dirs(d: &Path) -> usize {
        1 + std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_dir())
            .map(|e| dirs(&e.path()))
            .sum::<usize>()
    }
    let tree = dirs(&agent.host_root().join("sys/fs/cgroup/cpuset/kubepods"));
    assert!(tree >= 5, "kubepods, burstable, two pods, their containers: {tree}");
    assert_eq!(agent.metric("nodemedic_host_watches"), Some((tree + 1) as f64));

    // A rewrite of the pinned container's cpuset: one pod read again, the drift judged.
    let leaf = agent.host_root().join(&pinned_dir).join(&app_id);
    assert!(leaf.is_dir(), "{}", leaf.display());
    let before = agent.metric("nodemedic_rule_firing{rule=\"cpuset-drift\"}");
    assert_eq!(before, Some(0.0));
    std::fs::write(leaf.join("cpuset.cpus"), "0-7").unwrap();
    wait_for("cpuset-drift", Duration::from_secs(10), &agent, || {
        agent.metric("nodemedic_rule_firing{rule=\"cpuset-drift\"}") == Some(1.0)
    })
    .await;
    let changed: Vec<String> = agent
        .log()
        .lines()
        .filter(|l| l.contains(" scan ") && l.contains("read=\"changes\""))
        .map(str::to_string)
        .collect();
    assert!(!changed.is_empty(), "{}", agent.log());
    assert!(changed.iter().all(|l| l.contains("changed_pods=1")), "{changed:#?}");
    assert_eq!(reads("full"), 1, "still no full scan: {}", agent.log());

    // The kubelet writes a new checkpoint (a temporary file renamed over the old one) that pins
    // CPUs to a pod this node does not run: the checkpoint alone is read again, the entry is stale.
    let with_gone = node.clone().pod(Pod::new("gone-job", 2).exclusive("3,7").gone());
    let other = tempfile::tempdir().unwrap();
    with_gone.write(other.path()).unwrap();
    let state = "var/lib/kubelet/cpu_manager_state";
    let tmp = agent.host_root().join("var/lib/kubelet/.cpu_manager_state.tmp");
    std::fs::copy(other.path().join(state), &tmp).unwrap();
    assert_eq!(
        agent.metric("nodemedic_rule_firing{rule=\"stale-cpu-assignment\"}"),
        Some(0.0)
    );
    std::fs::rename(&tmp, agent.host_root().join(state)).unwrap();
    wait_for("stale-cpu-assignment", Duration::from_secs(10), &agent, || {
        agent.metric("nodemedic_rule_firing{rule=\"stale-cpu-assignment\"}") == Some(1.0)
    })
    .await;
    assert!(
        agent.log().lines().any(|l| l.contains("read=\"changes\"")
            && l.contains("checkpoint_changed=true")
            && l.contains("changed_pods=0")),
        "{}",
        agent.log()
    );
    assert_eq!(reads("full"), 1, "still no full scan: {}", agent.log());
    nodemedic_tests::cluster::assert_no_panic(&agent);
}

/// A refused connection is logged once, at WARN, by the code that made the request (kube's
/// client logs it at ERROR too unless told not to); SIGTERM ends the supervised tasks without a
/// "restarting" line or a restart counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_failures_are_logged_once_at_warn_and_sigterm_restarts_nothing() {
    let api = ApiServer::start().await.unwrap();
    api.faults().set_refusing(true);
    let mut agent = Agent::start(&api, None, &[]);
    let refused = |agent: &Agent| {
        agent
            .log()
            .lines()
            .filter(|l| l.contains("Connection refused"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    wait_for("two refused pod lists", Duration::from_secs(30), &agent, || {
        agent.log().matches("pod list failed").count() >= 2
    })
    .await;
    let lines = refused(&agent);
    assert!(!lines.is_empty(), "{}", agent.log());
    for line in &lines {
        assert!(
            line.contains(" WARN "),
            "a connect failure logged other than at WARN: {line}"
        );
    }
    // Each failed request is one line: the pod lists' WARN lines, nothing from kube's client.
    assert!(
        !agent.log().contains("kube_client") && !agent.log().contains(" ERROR "),
        "{}",
        agent.log()
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("pod list failed")).count(),
        agent.log().matches("LIST pods").count(),
        "one line per failed LIST:\n{}",
        agent.log()
    );

    // The API answers again, so every task runs; then SIGTERM.
    api.faults().set_refusing(false);
    wait_for("the watch up", Duration::from_secs(30), &agent, || {
        agent.metric("nodemedic_pod_watch_up") == Some(1.0)
    })
    .await;
    agent.signal(nix::sys::signal::Signal::SIGTERM);
    let sent = Instant::now();
    while agent.alive() {
        assert!(sent.elapsed() < Duration::from_secs(5), "SIGTERM did not end the agent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The stderr reader drains what the agent wrote last.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = agent.log();
    assert!(log.contains("nodemedic daemon stopping"), "{log}");
    assert!(
        !log.contains("restarting it"),
        "a task that ends because the agent stops is not restarted:\n{log}"
    );
}
