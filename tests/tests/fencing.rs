//! Driver fencing end to end (docs/operations/partitions.md): the real `nodemedic run` against
//! the API server double, with each "driver" made of real processes (`sleep`) in a real cgroup
//! v1 pod cgroup (a cpuset sandbox laid out as the kubelet's cgroupfs driver lays pods out; one
//! test uses a cgroup2 hierarchy of its own instead), while the double refuses connections,
//! answers 503, or stays quiet. Needs root and the cgroup v1 cpuset controller, as CI has.
//!
//! Unless a test says otherwise, the pods tolerate the `unreachable` and `not-ready` taints for
//! 10 s and the margin is 5 s: a candidate is fenced 5 s after the agent's first failed
//! request. The heartbeat runs every second. Each "never" of the fencing contract is a test of
//! its own, and where it can be, it runs beside a driver that is fenced in the same outage: the
//! outage was long enough and fencing worked, and still the pod under test was left alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nodemedic_tests::agent::{Agent, Identity, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cgroup_v1::{CpusetSandbox, write_node_files};
use nodemedic_tests::cgroup_v2::Cgroup2Mount;
use nodemedic_tests::cluster::{events_with_reason, node_object};
use nodemedic_tests::hosttree::container_id;
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion};
use serde_json::{Value, json};

const OPT_IN: &str = "nodemedic.io/fence-on-partition";
const TOLERATION_SECONDS: i64 = 10;
const MARGIN_SECONDS: f64 = 5.0;
/// `TOLERATION_SECONDS - MARGIN_SECONDS`.
const FENCE_AFTER: Duration = Duration::from_secs(5);
/// The scan interval of these agents: "fenced within one scan interval after fence_after".
const SCAN_INTERVAL: Duration = Duration::from_secs(2);

/// Whether `pid` runs (exists and is not a zombie: the sandbox reaps its children only when
/// it is dropped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Where the pod cgroups of a test live.
enum Cgroups {
    /// A cgroup v1 cpuset sandbox (the kubelet's `cgroupRoot` is the sandbox).
    V1(CpusetSandbox),
    /// A cgroup2 hierarchy of the test's own, as the host's `/sys/fs/cgroup`.
    V2(Cgroup2Mount),
}

/// One node: the API server double, the pod cgroups, a directory for the configuration and
/// the journal, and the agent once started.
struct Node {
    api: ApiServer,
    cgroups: Cgroups,
    dir: tempfile::TempDir,
    agent: Option<Agent>,
}

/// A driver pod of application `name` (Spark 3.5, cluster mode) bound to this node, owned by a
/// Job, opted in by label, tolerating the partition taints for `toleration` seconds.
fn job_driver(name: &str, uid: &str, toleration: i64) -> Value {
    let mut p = SparkApp::new(SparkVersion::V3_5, "etl", name).driver(uid, NODE, "10.244.1.5");
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": name,
        "uid": format!("{uid}-job"), "controller": true, "blockOwnerDeletion": true}]);
    p["metadata"]["labels"][OPT_IN] = json!("true");
    p["spec"]["tolerations"] = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": toleration},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": toleration},
    ]);
    p
}

impl Node {
    async fn new(prefix: &str) -> Node {
        Node::with(Cgroups::V1(CpusetSandbox::new(prefix).unwrap())).await
    }

    async fn with(cgroups: Cgroups) -> Node {
        let api = ApiServer::start().await.unwrap();
        api.store().create(node_object());
        Node {
            api,
            cgroups,
            dir: tempfile::tempdir().unwrap(),
            agent: None,
        }
    }

    /// Puts `pod` in the API and gives it a container cgroup with `procs` processes, the
    /// second one nested below the container's leaf. Returns their pids.
    fn pod(&mut self, pod: Value, procs: usize) -> Vec<u32> {
        let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
        self.api.store().create(pod);
        let leaf = format!("kubepods/pod{uid}/{}", container_id(&format!("{uid}/main")));
        let nested = format!("{leaf}/payload");
        match &mut self.cgroups {
            Cgroups::V1(sandbox) => {
                sandbox.mkdir(&nested, None).unwrap();
                (0..procs)
                    .map(|i| sandbox.spawn_sleep(if i == 0 { &leaf } else { &nested }).unwrap())
                    .collect()
            }
            Cgroups::V2(mount) => {
                mount.mkdir(&nested).unwrap();
                // cgroup v2 keeps processes in leaves only ("no internal processes").
                (0..procs).map(|_| mount.spawn_sleep(&nested).unwrap()).collect()
            }
        }
    }

    fn journal_path(&self) -> PathBuf {
        self.dir.path().join("state/fencing.jsonl")
    }

    /// The journal's actions (not the `published` notes).
    fn journal(&self) -> Vec<Value> {
        self.journal_lines()
            .into_iter()
            .filter(|l| l.get("id").is_some())
            .collect()
    }

    fn journal_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.journal_path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Starts the agent with fencing in `mode` (and `more` configuration lines under
    /// `fencing:`), `flags` and `env`, and its host tree (this sandbox's cgroups).
    fn start(&mut self, mode: &str, more: &str, flags: &[&str], env: &[(&str, &str)]) -> &Agent {
        let config = self.dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "fencing:\n  mode: \"{mode}\"\n  margin_seconds: {MARGIN_SECONDS}\n  journal: {}\n{}{more}",
                self.journal_path().display(),
                if more.contains("heartbeat_seconds") {
                    ""
                } else {
                    "  heartbeat_seconds: 1\n"
                }
            ),
        )
        .unwrap();
        let scan = SCAN_INTERVAL.as_secs().to_string();
        let mut args = vec!["--config", config.to_str().unwrap(), "--scan-interval-seconds", &scan];
        args.extend_from_slice(flags);
        let agent = Agent::start_env(&self.api, None, &Identity::default(), &args, env);
        let root = agent.host_root();
        let cpus = CpusetSandbox::machine_cpus().unwrap();
        match &self.cgroups {
            Cgroups::V1(sandbox) => {
                sandbox.write_host(root, &cpus, &[]).unwrap();
            }
            Cgroups::V2(mount) => {
                std::fs::create_dir_all(root.join("sys/fs")).unwrap();
                std::os::unix::fs::symlink(mount.root(), root.join("sys/fs/cgroup")).unwrap();
                let kubelet = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                               cgroupDriver: cgroupfs\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n";
                write_node_files(root, kubelet, &cpus, &[]).unwrap();
            }
        }
        self.agent.insert(agent)
    }

    fn agent(&self) -> &Agent {
        self.agent.as_ref().unwrap()
    }

    async fn wait_candidates(&self, n: usize) {
        let agent = self.agent();
        wait_for("the fencing candidates", Duration::from_secs(20), agent, || {
            agent.metric("nodemedic_fence_candidates") == Some(n as f64)
        })
        .await;
    }

    /// Waits until every pid of `pids` has exited; how long that took from `since`.
    async fn wait_gone(&self, pids: &[u32], since: Instant, within: Duration) -> Duration {
        wait_for("the driver's processes to be stopped", within, self.agent(), || {
            pids.iter().all(|&p| !alive(p))
        })
        .await;
        since.elapsed()
    }

    fn fence_metric(&self, mode: &str, outcome: &str) -> Option<f64> {
        self.agent().metric(&format!(
            "nodemedic_fence_actions_total{{mode=\"{mode}\",outcome=\"{outcome}\"}}"
        ))
    }
}

/// An outage of `FENCE_AFTER` plus 3 s: refused connections, as when the API server is down or
/// a firewall rejects; every pid of `alive_pids` must have lived through it.
async fn outage(node: &Node, alive_pids: &[u32]) {
    node.api.faults().set_refusing(true);
    tokio::time::sleep(FENCE_AFTER + Duration::from_secs(3)).await;
    for &pid in alive_pids {
        assert!(alive(pid), "pid {pid} was stopped\n{}", node.agent().log());
    }
    node.api.faults().set_refusing(false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mode_stops_the_driver_within_a_scan_interval_after_fence_after_and_publishes_it_once() {
    let mut node = Node::new("fence-on").await;
    let pids = node.pod(
        job_driver("stream", "a1a1a1a1-0000-4000-8000-000000000001", TOLERATION_SECONDS),
        2,
    );
    node.start("on", "", &[], &[]);
    node.wait_candidates(1).await;
    assert!(pids.iter().all(|&p| alive(p)));

    let cut = Instant::now();
    node.api.faults().set_refusing(true);
    let took = node.wait_gone(&pids, cut, Duration::from_secs(30)).await;
    eprintln!(
        "fenced {:.2} s after the API server started refusing connections",
        took.as_secs_f64()
    );
    // The clock starts at the first failed request, which is at or after the cut.
    assert!(took >= FENCE_AFTER, "fenced after {took:?}, before fence_after");
    assert!(
        took <= FENCE_AFTER + SCAN_INTERVAL,
        "fenced after {took:?}\n{}",
        node.agent().log()
    );

    // The journal is written once the stop has seen the cgroup empty.
    wait_for("the journal entry", Duration::from_secs(5), node.agent(), || {
        node.journal().len() == 1
    })
    .await;
    let journal = node.journal();
    assert_eq!(journal.len(), 1, "{journal:#?}");
    let e = &journal[0];
    assert_eq!(
        (e["mode"].as_str(), e["outcome"].as_str()),
        (Some("on"), Some("fenced"))
    );
    assert!(e["pod"].as_str().unwrap().starts_with("stream-"), "{e}");
    assert_eq!(e["uid"], "a1a1a1a1-0000-4000-8000-000000000001");
    assert_eq!(e["replaced_by"], "Job/stream");
    assert_eq!(e["opted_in_by"], "label");
    assert_eq!(e["fence_after_seconds"], 5.0);
    assert_eq!(e["evicted_after_seconds"], 10);
    assert_eq!(e["stopped"]["method"], "signals", "cgroup v1: SIGTERM, then SIGKILL");
    assert_eq!(e["stopped"]["processes"], 2, "the nested process too");
    assert_eq!(e["stopped"]["terminated"], 2, "sleep ends on SIGTERM");
    assert_eq!(e["stopped"]["killed"], 0);
    assert!(
        e["cgroup"]
            .as_str()
            .unwrap()
            .ends_with("/kubepods/poda1a1a1a1-0000-4000-8000-000000000001"),
        "{e}"
    );
    let outage = e["outage_seconds"].as_f64().unwrap();
    assert!((5.0..7.5).contains(&outage), "{outage}");
    assert_eq!(node.fence_metric("on", "fenced"), Some(1.0));
    // Nothing could be published yet.
    assert!(events_with_reason(&node.api, "DriverFenced").is_empty());

    // The API server is back: one Event on the pod, one on the Node, once.
    node.api.faults().set_refusing(false);
    let agent = node.agent();
    wait_for("the fencing Events", Duration::from_secs(30), agent, || {
        events_with_reason(&node.api, "DriverFenced").len() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let events = events_with_reason(&node.api, "DriverFenced");
    let mut kinds: Vec<&str> = events
        .iter()
        .map(|e| e["regarding"]["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["Node", "Pod"], "{events:#?}");
    let on_pod = events.iter().find(|e| e["regarding"]["kind"] == "Pod").unwrap();
    assert_eq!(on_pod["regarding"]["uid"], "a1a1a1a1-0000-4000-8000-000000000001");
    assert_eq!(on_pod["type"], "Warning");
    assert!(
        on_pod["note"].as_str().unwrap().contains("stopped driver etl/"),
        "{on_pod}"
    );
    let published: Vec<Value> = node
        .journal_lines()
        .into_iter()
        .filter(|l| l.get("published").is_some())
        .collect();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0]["published"], journal[0]["id"]);
    assert_eq!(node.fence_metric("on", "fenced"), Some(1.0), "counted once");
    assert_eq!(node.fence_metric("on", "failed"), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cgroup_v2_the_whole_pod_goes_with_one_write_to_cgroup_kill() {
    let mut node = Node::with(Cgroups::V2(Cgroup2Mount::new().unwrap())).await;
    let pids = node.pod(
        job_driver("stream", "abababab-0000-4000-8000-00000000000a", TOLERATION_SECONDS),
        3,
    );
    node.start("on", "", &[], &[]);
    node.wait_candidates(1).await;
    let cut = Instant::now();
    node.api.faults().set_refusing(true);
    let took = node.wait_gone(&pids, cut, Duration::from_secs(30)).await;
    eprintln!(
        "fenced {:.2} s after the API server started refusing connections (cgroup v2)",
        took.as_secs_f64()
    );
    assert!(
        took >= FENCE_AFTER && took <= FENCE_AFTER + SCAN_INTERVAL,
        "{took:?}\n{}",
        node.agent().log()
    );
    wait_for("the journal entry", Duration::from_secs(5), node.agent(), || {
        node.journal().len() == 1
    })
    .await;
    let e = &node.journal()[0];
    assert_eq!(e["outcome"], "fenced", "{e}");
    assert_eq!(e["stopped"]["method"], "cgroup.kill");
    assert_eq!(e["stopped"]["processes"], 3);
    assert_eq!(e["stopped"]["killed"], 3);
    node.api.faults().set_refusing(false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_leaves_the_driver_running_and_writes_down_what_it_would_have_done() {
    let mut node = Node::new("fence-dry").await;
    let pids = node.pod(
        job_driver("stream", "b2b2b2b2-0000-4000-8000-000000000002", TOLERATION_SECONDS),
        2,
    );
    node.start("dry-run", "", &[], &[]);
    node.wait_candidates(1).await;
    outage(&node, &pids).await;
    let journal = node.journal();
    assert_eq!(journal.len(), 1, "{journal:#?}");
    assert_eq!(
        (journal[0]["mode"].as_str(), journal[0]["outcome"].as_str()),
        (Some("dry-run"), Some("would-fence"))
    );
    assert!(journal[0]["stopped"].is_null());
    assert!(
        journal[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("dry run: would have stopped driver etl/")
    );
    let at = journal[0]["outage_seconds"].as_f64().unwrap();
    assert!((5.0..6.5).contains(&at), "would have fenced at {at} s");
    assert_eq!(node.fence_metric("dry-run", "would_fence"), Some(1.0));
    let agent = node.agent();
    wait_for("the dry-run Events", Duration::from_secs(30), agent, || {
        events_with_reason(&node.api, "DriverWouldBeFenced").len() == 2
    })
    .await;
    assert!(pids.iter().all(|&p| alive(p)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_that_answers_503_is_reachable_and_nothing_is_fenced() {
    let mut node = Node::new("fence-503").await;
    let pids = node.pod(
        job_driver("stream", "c3c3c3c3-0000-4000-8000-000000000003", TOLERATION_SECONDS),
        2,
    );
    node.start("on", "", &[], &[]);
    node.wait_candidates(1).await;
    node.api.clear_requests();
    node.api.faults().fail("*", "*", 503, None, None);
    node.api.faults().drop_watches_now();
    tokio::time::sleep(FENCE_AFTER * 2).await;
    assert!(pids.iter().all(|&p| alive(p)), "{}", node.agent().log());
    assert!(node.journal().is_empty());
    assert_eq!(node.agent().metric("nodemedic_api_unreachable_seconds"), Some(0.0));
    let heartbeats_503 = node
        .api
        .requests()
        .iter()
        .filter(|r| r.path == "/readyz" && r.status == 503)
        .count();
    // One heartbeat a period (1 s here): it kept asking, and no faster.
    assert!(
        (8..=12).contains(&heartbeats_503),
        "{heartbeats_503} heartbeats in 10 s"
    );
    node.api.faults().clear();
    assert_eq!(node.fence_metric("on", "fenced"), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_an_executor() {
    let mut node = Node::new("fence-exec").await;
    let control = node.pod(
        job_driver("stream", "d4d4d4d4-0000-4000-8000-000000000004", TOLERATION_SECONDS),
        1,
    );
    let mut executor = job_driver("batch", "d4d4d4d4-0000-4000-8000-0000000000e1", TOLERATION_SECONDS);
    executor["metadata"]["labels"]["spark-role"] = json!("executor");
    let executor = node.pod(executor, 1);
    node.start("on", "", &[], &[]);
    node.wait_candidates(1).await;
    outage(&node, &executor).await;
    assert!(control.iter().all(|&p| !alive(p)), "the control driver was fenced");
    assert_eq!(node.journal().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_without_a_controller_that_replaces_the_driver() {
    let mut node = Node::new("fence-owner").await;
    let control = node.pod(
        job_driver("stream", "e5e5e5e5-0000-4000-8000-000000000005", TOLERATION_SECONDS),
        1,
    );
    // A bare driver pod (spark-submit's own, client-less cluster mode): nothing recreates it.
    let mut bare = job_driver("bare", "e5e5e5e5-0000-4000-8000-0000000000b1", TOLERATION_SECONDS);
    bare["metadata"].as_object_mut().unwrap().remove("ownerReferences");
    let bare = node.pod(bare, 1);
    // Two SparkApplications: one that restarts its driver (fenced), one that does not.
    let mut operator_pids = Vec::new();
    for (name, uid, restart) in [
        ("restarts", "e5e5e5e5-0000-4000-8000-0000000000a1", "OnFailure"),
        ("once", "e5e5e5e5-0000-4000-8000-0000000000a2", "Never"),
    ] {
        node.api.store().create(json!({
            "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": name, "namespace": "etl", "uid": format!("{uid}-sparkapp")},
            "spec": {"type": "Scala", "mode": "cluster", "restartPolicy": {"type": restart, "onFailureRetries": 3}},
        }));
        let mut pod = SparkApp::new(SparkVersion::V3_5, "etl", name)
            .operator("sub-1")
            .driver(uid, NODE, "10.244.1.9");
        pod["metadata"]["labels"][OPT_IN] = json!("true");
        pod["spec"]["tolerations"] = job_driver(name, uid, TOLERATION_SECONDS)["spec"]["tolerations"].clone();
        operator_pids.push(node.pod(pod, 1));
    }
    node.start("on", "", &[], &[]);
    node.wait_candidates(2).await;
    outage(&node, &[bare.clone(), operator_pids[1].clone()].concat()).await;
    assert!(
        control.iter().chain(&operator_pids[0]).all(|&p| !alive(p)),
        "{}",
        node.agent().log()
    );
    let mut fenced: Vec<String> = node
        .journal()
        .iter()
        .map(|e| e["replaced_by"].as_str().unwrap().to_string())
        .collect();
    fenced.sort();
    assert_eq!(fenced, ["Job/stream", "SparkApplication/restarts"]);
    let log = node.agent().log();
    assert!(
        log.contains("SparkApplication etl/once has restart policy Never"),
        "{log}"
    );
    assert!(log.contains("no controller owner"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_without_opting_in() {
    let mut node = Node::new("fence-optin").await;
    let control = node.pod(
        job_driver("stream", "f6f6f6f6-0000-4000-8000-000000000006", TOLERATION_SECONDS),
        1,
    );
    let mut silent = job_driver("quiet", "f6f6f6f6-0000-4000-8000-0000000000c1", TOLERATION_SECONDS);
    silent["metadata"]["labels"].as_object_mut().unwrap().remove(OPT_IN);
    let silent = node.pod(silent, 1);
    // Opted in by its namespace (the configuration's list), with no label.
    let mut by_namespace = job_driver("nightly", "f6f6f6f6-0000-4000-8000-0000000000c2", TOLERATION_SECONDS);
    by_namespace["metadata"]["namespace"] = json!("streaming");
    by_namespace["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(OPT_IN);
    let by_namespace = node.pod(by_namespace, 1);
    node.start("on", "  namespaces: [streaming]\n", &[], &[]);
    node.wait_candidates(2).await;
    outage(&node, &silent).await;
    assert!(
        control.iter().chain(&by_namespace).all(|&p| !alive(p)),
        "{}",
        node.agent().log()
    );
    let mut how: Vec<String> = node
        .journal()
        .iter()
        .map(|e| e["opted_in_by"].as_str().unwrap().to_string())
        .collect();
    how.sort();
    assert_eq!(how, ["label", "namespace"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_before_the_agent_has_seen_the_api_server() {
    let mut node = Node::new("fence-never").await;
    let pids = node.pod(
        job_driver("stream", "a7a7a7a7-0000-4000-8000-000000000007", TOLERATION_SECONDS),
        2,
    );
    // The API server is away from before the agent starts: it has no pod list it could trust.
    node.api.faults().set_refusing(true);
    node.start("on", "", &[], &[]);
    tokio::time::sleep(FENCE_AFTER * 2 + SCAN_INTERVAL).await;
    assert!(pids.iter().all(|&p| alive(p)), "{}", node.agent().log());
    assert!(node.journal().is_empty());
    assert_eq!(node.agent().metric("nodemedic_fence_candidates"), Some(0.0));
    assert_eq!(
        node.agent().metric("nodemedic_api_unreachable_seconds"),
        Some(0.0),
        "never reached: no outage clock"
    );
    // Once it is back the driver is a candidate, and still nothing is fenced.
    node.api.faults().set_refusing(false);
    node.wait_candidates(1).await;
    tokio::time::sleep(SCAN_INTERVAL).await;
    assert!(pids.iter().all(|&p| alive(p)));
    assert_eq!(node.fence_metric("on", "fenced"), Some(0.0));
}

/// libfaketime's preload library (Debian's `faketime` package).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_jump_does_not_bring_fencing_forward() {
    assert!(
        std::path::Path::new(LIBFAKETIME).is_file(),
        "{LIBFAKETIME} is missing: install Debian's faketime package (tests/run.sh does)"
    );
    let mut node = Node::new("fence-clock").await;
    // Fenced 12 s after the first failure.
    let pids = node.pod(job_driver("stream", "a8a8a8a8-0000-4000-8000-000000000008", 17), 1);
    let offset = node.dir.path().join("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    let offset_text = offset.to_str().unwrap().to_string();
    // The agent's wall clock (CLOCK_REALTIME) follows the file; its monotonic clock is real.
    node.start(
        "on",
        "",
        &[],
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", &offset_text),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    node.wait_candidates(1).await;
    let cut = Instant::now();
    node.api.faults().set_refusing(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // NTP, or someone, sets the clock two hours ahead during the outage.
    std::fs::write(&offset, "+2h\n").unwrap();
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(
        pids.iter().all(|&p| alive(p)),
        "fenced early, by the wall clock\n{}",
        node.agent().log()
    );
    let took = node.wait_gone(&pids, cut, Duration::from_secs(20)).await;
    assert!(took >= Duration::from_secs(12), "{took:?}");
    wait_for("the journal entry", Duration::from_secs(5), node.agent(), || {
        node.journal().len() == 1
    })
    .await;
    let journal = node.journal();
    assert_eq!(journal.len(), 1);
    let lasted = journal[0]["outage_seconds"].as_f64().unwrap();
    eprintln!("fenced with the wall clock 2 h ahead: the outage as counted was {lasted} s, {took:?} after the cut");
    assert!((12.0..15.0).contains(&lasted), "the outage as counted: {lasted} s");
    // The agent did see the jump: the journal's wall time is two hours ahead.
    let at: jiff::Timestamp = journal[0]["at"].as_str().unwrap().parse().unwrap();
    let ahead = at.as_second() - jiff::Timestamp::now().as_second();
    assert!((7000..7300).contains(&ahead), "the agent's clock was {ahead} s ahead");
    node.api.faults().set_refusing(false);
}

/// Starts a quiet agent in `on` mode (fencing a driver that tolerates 25 s at 20 s): the heartbeat every
/// 60 s, the probes, the Lease, the conditions and the driver lookups rarely, and the watch's
/// bookmarks at the real API server's pace (the double's default is 2 s, for tests that wait on
/// them), so between heartbeats the agent sends nothing and its open watch says nothing for a
/// minute. Returns once its candidate is known.
async fn start_quiet(node: &mut Node) {
    node.api.set_bookmark_interval(Duration::from_secs(60));
    node.start(
        "on",
        "  heartbeat_seconds: 60\n",
        &[
            "--probe-interval-seconds",
            "600",
            "--lease-duration-seconds",
            "600",
            "--condition-heartbeat-seconds",
            "600",
            "--rule-setting",
            "apiserver_unreachable_seconds=1200",
            "--driver-cache-ttl-seconds",
            "600",
        ],
        &[],
    );
    node.wait_candidates(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_outage_after_a_long_quiet_period_is_not_fenced() {
    let mut node = Node::new("fence-quiet").await;
    let pids = node.pod(job_driver("stream", "a9a9a9a9-0000-4000-8000-000000000009", 25), 1);
    start_quiet(&mut node).await;
    // Quiet: 25 s in which no request reaches the API server, more than fence_after.
    let quiet = Instant::now();
    tokio::time::sleep(Duration::from_secs(25)).await;
    let last = node
        .api
        .requests()
        .iter()
        .filter(|r| !r.is_watch)
        .map(|r| r.time)
        .max()
        .unwrap();
    let silent_for = last.elapsed().unwrap();
    let recent: Vec<String> = node
        .api
        .requests()
        .iter()
        .filter(|r| !r.is_watch && r.time.elapsed().unwrap() < Duration::from_secs(25))
        .map(|r| format!("{} {}?{} {}", r.method, r.path, r.query, r.status))
        .collect();
    assert!(
        silent_for >= Duration::from_secs(21),
        "not quiet: a request {silent_for:?} ago (quiet period began {:?} ago): {recent:#?}",
        quiet.elapsed()
    );
    // A 10 s outage: the watch is cut, and retried with backoff until it is back.
    node.api.faults().set_refusing(true);
    tokio::time::sleep(Duration::from_secs(10)).await;
    node.api.faults().set_refusing(false);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(pids.iter().all(|&p| alive(p)), "{}", node.agent().log());
    assert!(node.journal().is_empty(), "{:#?}", node.journal());
}

/// The outage ends while the agent happens to ask nothing: its reconnecting watch is accepted
/// but held (a slow API server), its heartbeat a minute away. By the time `fence_after` has
/// passed since the first failure, the last failure is old news: the agent asks first (a
/// heartbeat out of turn), is answered, and fences nothing. Found in CI, where the watch's
/// reconnect backoff once left such a gap after a real 10 s outage and a driver was stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_that_ended_while_nobody_asked_is_not_fenced() {
    let mut node = Node::new("fence-stale-evidence").await;
    let pids = node.pod(job_driver("stream", "a9a9a9a9-0000-4000-8000-00000000000a", 25), 1);
    start_quiet(&mut node).await;
    // The outage: refused until the watch has failed three times (MIN_FAILURES)...
    node.api.faults().set_refusing(true);
    wait_for("three failed requests", Duration::from_secs(30), node.agent(), || {
        node.agent().log().matches("pod watch failed").count() >= 3
    })
    .await;
    // ... then the API server is back, but slow for pods: the watch's reconnect is accepted
    // and held, neither answered nor failed. Nothing else asks for a minute.
    node.api.faults().set_latency("*", "pods", Duration::from_secs(120));
    node.api.faults().set_refusing(false);
    // fence_after (20 s since the first failure) passes with no failure since the last one.
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(pids.iter().all(|&p| alive(p)), "{}", node.agent().log());
    assert!(node.journal().is_empty(), "{:#?}", node.journal());
    // The agent asked before acting: a heartbeat well before its minute was up.
    let readyz = node
        .api
        .requests()
        .iter()
        .filter(|r| r.path == "/readyz" && r.status == 200)
        .count();
    assert!(readyz >= 2, "{readyz} heartbeats answered\n{}", node.agent().log());
    node.api.faults().set_latency("*", "pods", Duration::ZERO);
}

/// An API server that answers 2 s out of every 14 (three cycles) is reachable, as
/// docs/operations/partitions.md promises: each outage (12 s) is shorter than `fence_after`
/// (20 s), and together they last longer. The agent is quiet (`start_quiet`: the heartbeat
/// every 60 s while the API server answers, nothing else for minutes), so what sees each
/// up-window is the heartbeat that runs every second once a request has failed. Before it, the
/// heartbeat kept its period and the watch's reconnects spread out with their backoff: the
/// up-windows went unseen and the outages merged into one past `fence_after` (the driver was
/// stopped at about 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_that_answers_2_s_in_14_is_reachable_and_nothing_is_fenced() {
    let mut node = Node::new("fence-flapping").await;
    let pids = node.pod(job_driver("stream", "a9a9a9a9-0000-4000-8000-00000000000b", 25), 1);
    start_quiet(&mut node).await;
    let began = std::time::SystemTime::now();
    // The longest outage the agent counted, sampled every 200 ms.
    let mut longest = 0.0f64;
    for _ in 0..3 {
        for (refusing, seconds) in [(true, 12), (false, 2)] {
            node.api.faults().set_refusing(refusing);
            let phase = Instant::now();
            while phase.elapsed() < Duration::from_secs(seconds) {
                let counted = node.agent().metric("nodemedic_api_unreachable_seconds").unwrap_or(0.0);
                longest = longest.max(counted);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert!(pids.iter().all(|&p| alive(p)), "{}", node.agent().log());
    assert!(node.journal().is_empty(), "{:#?}", node.journal());
    assert_eq!(node.fence_metric("on", "fenced"), Some(0.0));
    // No outage outlived its down-window by more than the second it takes to see the API
    // server back: none merged with the next.
    assert!(
        longest > 5.0 && longest < 13.5,
        "the longest outage counted: {longest} s"
    );
    // And no more than about one heartbeat a second was sent.
    let answered = node
        .api
        .requests()
        .iter()
        .filter(|r| r.path == "/readyz" && r.time >= began && r.status == 200)
        .count();
    assert!(answered <= 3 * 3, "{answered} heartbeats answered in 6 s of up-windows");
    eprintln!("the longest outage counted: {longest:.1} s; {answered} heartbeats answered");
}
