//! The API server as the node sees it: `nodemedic probe api` and the daemon's probes against
//! the API server double over HTTPS.

use std::time::Duration;

use nodemedic_tests::apiserver::ApiServer;
use serde_json::Value;

fn probe_json(api: &ApiServer, extra: &[&str]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc, true).unwrap();
    let mut args = vec![
        "probe",
        "api",
        "--kubeconfig",
        kc.to_str().unwrap(),
        "--namespace",
        "nodemedic",
        "--node",
        "worker-7",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let run = nodemedic_tests::nodemedic(&args);
    let v = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
    (run.code, v, run.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_api_reports_every_phase_and_they_add_up() {
    let api = ApiServer::start().await.unwrap();
    api.faults().set_latency("create", "pods", Duration::from_millis(300));
    let (code, v, stderr) = probe_json(&api, &["--count", "3"]);
    assert_eq!(code, 0, "{stderr}\n{v:#}");
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 9);
    for s in samples {
        let f = |k: &str| s[k].as_f64().unwrap();
        assert!(s["ok"].as_bool().unwrap(), "{s}");
        assert!(f("dns_seconds") <= f("connect_seconds"), "{s}");
        assert!(f("connect_seconds") <= f("tls_seconds"), "{s}");
        assert!(
            f("tls_seconds") < f("first_byte_seconds"),
            "TLS is a real handshake before the answer: {s}"
        );
        assert!(f("first_byte_seconds") <= f("total_seconds"), "{s}");
    }
    let dry: Vec<&Value> = samples.iter().filter(|s| s["probe"] == "create_dry_run").collect();
    assert!(
        dry.iter().all(|s| s["first_byte_seconds"].as_f64().unwrap() >= 0.3),
        "the injected admission delay is measured"
    );
    assert_eq!(v["summary"]["create_dry_run"]["ok"], 3);
    assert!(v["summary"]["get"]["total_seconds"]["median"].as_f64().unwrap() < 0.3);
    // The dry-run pod was never stored, and the LIST asked for this node's pods.
    assert!(api.store().list("pods").is_empty());
    let reqs = api.requests();
    assert!(
        reqs.iter()
            .any(|r| r.verb == "create" && r.query.contains("dryRun=All"))
    );
    assert!(
        reqs.iter()
            .any(|r| r.verb == "list" && r.query.contains("spec.nodeName%3Dworker-7") && r.query.contains("limit=1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_api_says_what_failed() {
    let api = ApiServer::start().await.unwrap();
    api.faults().fail("list", "pods", 503, None, None);
    let (code, v, _) = probe_json(&api, &["--count", "1"]);
    assert_eq!(code, 1);
    let list = v["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["probe"] == "list")
        .unwrap()
        .clone();
    assert_eq!(list["status"], 503);
    assert!(list["error"].as_str().unwrap().starts_with("HTTP 503: "), "{list}");
    api.faults().clear();
    api.faults().set_down(true);
    let (code, v, _) = probe_json(&api, &["--count", "1", "--timeout-seconds", "3"]);
    assert_eq!(code, 1);
    assert!(
        v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["ok"].as_bool().unwrap())
    );
}

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::hosttree::{Layout, Node, Runtime};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion};
use serde_json::json;

const SLOW: &str = "inject.sidecars.example.com";
const FAST: &str = "labels.policy.example.com";

fn webhooks(side_effects: &str) -> Value {
    let rule = json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}]);
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "platform-webhooks"},
        "webhooks": [
            {"name": SLOW, "admissionReviewVersions": ["v1"], "sideEffects": side_effects, "timeoutSeconds": 30, "failurePolicy": "Fail",
             "clientConfig": {"service": {"namespace": "sidecars", "name": "injector", "path": "/mutate"}}, "rules": rule},
            {"name": FAST, "admissionReviewVersions": ["v1"], "sideEffects": "None", "timeoutSeconds": 5, "failurePolicy": "Ignore",
             "clientConfig": {"service": {"namespace": "policy", "name": "labels", "path": "/mutate"}}, "rules": rule},
        ]
    })
}

/// The API server's own webhook metrics, growing while the test runs: the slow webhook takes
/// about 11.8 s a call, the fast one 20 ms.
fn bump_webhook_metrics(api: &ApiServer) -> tokio::task::JoinHandle<()> {
    let store = api.store();
    tokio::spawn(async move {
        let mut n = 0u64;
        loop {
            n += 1;
            let line = |name: &str, per: f64| {
                format!(
                    "apiserver_admission_webhook_admission_duration_seconds_sum{{name=\"{name}\",operation=\"CREATE\",rejected=\"false\",type=\"admit\"}} {}\n\
                     apiserver_admission_webhook_admission_duration_seconds_count{{name=\"{name}\",operation=\"CREATE\",rejected=\"false\",type=\"admit\"}} {n}\n",
                    per * n as f64
                )
            };
            store.set_metrics_text(format!(
                "# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency\n\
                 # TYPE apiserver_admission_webhook_admission_duration_seconds histogram\n{}{}",
                line(SLOW, 11.8),
                line(FAST, 0.02)
            ));
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// A node with a Spark 3.5 driver whose spark.properties keep the 10 s client timeouts.
fn spark_node(api: &ApiServer, dir: &std::path::Path) -> String {
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "nightly");
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    api.store().create(app.driver("drv-uid-1", NODE, "10.42.7.2"));
    let root = dir.join("host");
    Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .write(&root)
        .unwrap();
    let conf = root.join("var/lib/kubelet/pods/drv-uid-1/volumes/kubernetes.io~configmap/spark-conf-volume-driver");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("spark.properties"),
        "spark.app.name=nightly\nspark.kubernetes.submission.requestTimeout=10000\nspark.kubernetes.driver.requestTimeout=10000\n",
    )
    .unwrap();
    root.to_str().unwrap().to_string()
}

fn scan_findings(api: &ApiServer, root: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc, true).unwrap();
    let run = nodemedic_tests::nodemedic(&[
        "scan",
        "--host-root",
        root,
        "--kubeconfig",
        kc.to_str().unwrap(),
        "--node",
        NODE,
        "--format",
        "json",
    ]);
    let report: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    assert_eq!(report["sources"]["pods"], "api", "{report:#}");
    report["findings"].as_array().unwrap().clone()
}

fn of_rule<'a>(findings: &'a [Value], rule: &str) -> Vec<&'a Value> {
    findings.iter().filter(|f| f["rule"] == rule).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_12_second_webhook_is_named_with_the_spark_keys_to_raise() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(webhooks("None"));
    let _bumper = bump_webhook_metrics(&api);
    api.faults().set_latency("create", "pods", Duration::from_secs(12));
    let dir = tempfile::tempdir().unwrap();
    let root = spark_node(&api, dir.path());
    let findings = tokio::task::spawn_blocking({
        let api_root = root.clone();
        let api = std::sync::Arc::new(api);
        move || (scan_findings(&api, &api_root), api)
    })
    .await
    .unwrap();
    let (findings, _api) = findings;
    let slow = of_rule(&findings, "slow-pod-admission");
    assert_eq!(slow.len(), 1, "{findings:#?}");
    let f = slow[0];
    assert_eq!(f["severity"], "critical");
    let e = &f["evidence"];
    assert!(e["median_seconds"].as_f64().unwrap() >= 12.0, "{e:#}");
    assert_eq!(e["spark_timeout_seconds"], 10.0);
    assert_eq!(e["slowest_webhook"]["name"], SLOW, "{e:#}");
    let names: Vec<&str> = e["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&SLOW) && names.contains(&FAST), "{names:?}");
    let remedy = f["remedy"].as_str().unwrap();
    assert!(
        remedy.contains("spark.kubernetes.submission.requestTimeout")
            && remedy.contains("spark.kubernetes.driver.requestTimeout"),
        "{remedy}"
    );
    assert!(f["summary"].as_str().unwrap().contains(SLOW), "{}", f["summary"]);
    assert!(of_rule(&findings, "webhook-blocks-dry-run").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2_second_admission_is_fine_at_default_settings() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(webhooks("None"));
    api.faults().set_latency("create", "pods", Duration::from_secs(2));
    let dir = tempfile::tempdir().unwrap();
    let root = spark_node(&api, dir.path());
    let api = std::sync::Arc::new(api);
    let findings = tokio::task::spawn_blocking({
        let api = api.clone();
        move || scan_findings(&api, &root)
    })
    .await
    .unwrap();
    assert!(of_rule(&findings, "slow-pod-admission").is_empty(), "{findings:#?}");
    assert!(of_rule(&findings, "slow-api").is_empty(), "{findings:#?}");
}

/// A driver whose spark.properties cannot be read may set a timeout far below the default:
/// creates that would be fine against 10 s are not judged fine. The report says
/// `slow-pod-admission` is unknown because of `spark_conf`, naming the driver, and the scan
/// exits 4 (incomplete), not 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_driver_conf_leaves_slow_pod_admission_unknown_not_fine() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(webhooks("None"));
    api.faults().set_latency("create", "pods", Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let root = spark_node(&api, dir.path());
    // A directory where the driver's spark.properties should be: a read error.
    let conf = std::path::Path::new(&root).join(
        "var/lib/kubelet/pods/drv-uid-1/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties",
    );
    std::fs::remove_file(&conf).unwrap();
    std::fs::create_dir(&conf).unwrap();
    let driver = api
        .store()
        .list("pods")
        .iter()
        .find(|p| p["metadata"]["uid"] == "drv-uid-1")
        .map(|p| format!("etl/{}", p["metadata"]["name"].as_str().unwrap()))
        .unwrap();
    let api = std::sync::Arc::new(api);
    let run = tokio::task::spawn_blocking({
        let api = api.clone();
        move || {
            let kc_dir = tempfile::tempdir().unwrap();
            let kc = kc_dir.path().join("kubeconfig");
            api.write_kubeconfig(&kc, true).unwrap();
            nodemedic_tests::nodemedic(&[
                "scan",
                "--host-root",
                &root,
                "--kubeconfig",
                kc.to_str().unwrap(),
                "--node",
                NODE,
                "--format",
                "json",
            ])
        }
    })
    .await
    .unwrap();
    let report: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    let shown =
        "/var/lib/kubelet/pods/drv-uid-1/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties";
    assert_eq!(
        report["sources"]["spark_conf"],
        format!("error: driver {driver}: {shown}: is a directory, not a file"),
        "{report:#}"
    );
    let findings = report["findings"].as_array().unwrap();
    assert!(of_rule(findings, "slow-pod-admission").is_empty(), "{findings:#?}");
    assert_eq!(
        report["coverage"]["slow-pod-admission"],
        json!({
            "status": "unknown",
            "missing": ["spark_conf"],
            "reason": format!(
                "spark_conf: the configuration of driver {driver} could not be read ({shown}: is a \
                 directory, not a file): the Spark client timeout it sets is unknown"
            ),
        }),
        "{report:#}"
    );
    assert_eq!(run.code, 4, "could not look is never 0: {}\n{report:#}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_with_unknown_side_effects_is_its_own_finding_not_a_latency_alarm() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(webhooks("Unknown"));
    let dir = tempfile::tempdir().unwrap();
    let root = spark_node(&api, dir.path());
    let api = std::sync::Arc::new(api);
    let findings = tokio::task::spawn_blocking({
        let api = api.clone();
        move || scan_findings(&api, &root)
    })
    .await
    .unwrap();
    let blocked = of_rule(&findings, "webhook-blocks-dry-run");
    assert_eq!(blocked.len(), 1, "{findings:#?}");
    assert!(
        blocked[0]["summary"].as_str().unwrap().contains(SLOW),
        "{:#}",
        blocked[0]
    );
    assert!(of_rule(&findings, "slow-pod-admission").is_empty(), "{findings:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_down_is_apiserver_unreachable_listing_the_local_drivers() {
    let api = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "hourly");
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    api.store().create(app.driver("drv-uid-9", NODE, "10.42.7.9"));
    let _ = dir;
    let agent = Agent::start(
        &api,
        None,
        &[
            "--probe-interval-seconds",
            "0.5",
            "--probe-timeout-seconds",
            "1",
            "--rule-setting",
            "apiserver_unreachable_seconds=3",
        ],
    );
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    wait_for("api_up", Duration::from_secs(30), &agent, || {
        agent.metric("nodemedic_api_up") == Some(1.0)
    })
    .await;
    assert_eq!(
        agent.metric("nodemedic_rule_firing{rule=\"apiserver-unreachable\"}"),
        Some(0.0)
    );
    api.faults().set_down(true);
    wait_for("apiserver-unreachable", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_rule_firing{rule=\"apiserver-unreachable\"}") == Some(1.0)
    })
    .await;
    assert_eq!(agent.metric("nodemedic_api_up"), Some(0.0));
    let log = agent.log();
    let line = log
        .lines()
        .find(|l| l.contains("new finding") && l.contains("apiserver-unreachable"))
        .expect("logged with evidence");
    assert!(
        line.contains(&format!("{}-driver", app.prefix)),
        "the local driver is listed: {line}"
    );
    // Back: the finding clears.
    api.faults().set_down(false);
    wait_for("recovery", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_rule_firing{rule=\"apiserver-unreachable\"}") == Some(0.0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_apiserver_metrics_is_not_asked_again_every_round() {
    let api = ApiServer::start().await.unwrap();
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    // No apiserver-metrics component: the API server answers 403 Forbidden.
    api.faults().fail("get", "/metrics", 403, None, None);
    let agent = Agent::start(&api, None, &["--probe-interval-seconds", "0.3"]);
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    let rounds = || api.requests().iter().filter(|r| r.path.ends_with("/version")).count();
    wait_for("ten probe rounds", Duration::from_secs(60), &agent, || rounds() >= 10).await;
    let metrics_reads = api.requests().iter().filter(|r| r.path == "/metrics").count();
    assert_eq!(metrics_reads, 1, "one refused read, then none for 30 minutes");
}

/// Without RBAC on leases no agent is elected, but the Lease read still measures the node's
/// path: no `apiserver-unreachable`, `nodemedic_api_up` 1, and the log says what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_lease_elects_nobody_and_is_not_an_unreachable_api() {
    use nodemedic_tests::agent::{Agent, wait_for};
    let api = ApiServer::start().await.unwrap();
    api.faults().fail("get", "leases", 403, None, None);
    api.faults().fail("create", "leases", 403, None, None);
    let agent = Agent::start(
        &api,
        None,
        &[
            "--probe-interval-seconds",
            "1",
            "--rule-setting",
            "apiserver_unreachable_seconds=5",
        ],
    );
    wait_for("the forbidden read logged", Duration::from_secs(30), &agent, || {
        agent.log().contains("reading the prober Lease is forbidden")
    })
    .await;
    // Well past apiserver_unreachable_seconds.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(agent.metric("nodemedic_prober"), Some(0.0));
    assert_eq!(agent.metric("nodemedic_api_up"), Some(1.0));
    assert_eq!(
        agent.metric("nodemedic_rule_firing{rule=\"apiserver-unreachable\"}"),
        Some(0.0)
    );
    let dry_runs = api
        .requests()
        .iter()
        .filter(|r| r.query_param("dryRun").is_some())
        .count();
    assert_eq!(dry_runs, 0, "nobody probes admission without the Lease");
}

/// After the API server answered 401 to everything long enough for the prober to step down,
/// the first request of the agent that is served again wakes the prober: it reads the Lease,
/// takes it back and probes at once. Before, only the pod watch coming back woke it, and an
/// open watch is not cut by 401s: the prober waited out its own backoff (about 2 minutes at
/// the default lease duration) while the agent's other requests were answered. Here the
/// agent's fencing heartbeat (dry-run, every second, for an opted-in driver) is that request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_401s_the_first_served_request_wakes_the_prober() {
    use nodemedic_tests::agent::{Agent, Identity, NODE, wait_for};
    use nodemedic_tests::cluster::node_object;
    use nodemedic_tests::sparkpods::{SparkApp, SparkVersion};
    use serde_json::json;
    use std::time::SystemTime;

    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let mut driver = SparkApp::new(SparkVersion::V3_5, "etl", "stream").driver(
        "e5e5e5e5-0000-4000-8000-000000000001",
        NODE,
        "10.244.1.5",
    );
    driver["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "stream",
        "uid": "e5e5e5e5-job", "controller": true}]);
    driver["metadata"]["labels"]["nodemedic.io/fence-on-partition"] = json!("true");
    api.store().create(driver);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "fencing:\n  mode: dry-run\n  heartbeat_seconds: 1\n  journal: {}\n",
            dir.path().join("state/fencing.jsonl").display()
        ),
    )
    .unwrap();
    // A 6 s lease: the holder gives up after 4 s without renewing, and reads back off from
    // 4.8 s, doubling. Rounds only at election (the interval is 10 minutes).
    let agent = Agent::start_env(
        &api,
        None,
        &Identity::default(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--lease-duration-seconds",
            "6",
            "--probe-interval-seconds",
            "600",
            "--rule-setting",
            "apiserver_unreachable_seconds=1200",
        ],
        &[],
    );
    let dry_runs = |after: SystemTime| {
        api.requests()
            .iter()
            .filter(|r| r.time >= after && r.status == 201 && r.query_param("dryRun").is_some())
            .count()
    };
    wait_for("the prober's first round", Duration::from_secs(30), &agent, || {
        agent.metric("nodemedic_prober") == Some(1.0) && dry_runs(SystemTime::UNIX_EPOCH) >= 1
    })
    .await;
    wait_for("the fencing candidate", Duration::from_secs(20), &agent, || {
        agent.metric("nodemedic_fence_candidates") == Some(1.0)
    })
    .await;

    api.faults().fail("*", "*", 401, None, None);
    wait_for("the prober to step down", Duration::from_secs(20), &agent, || {
        agent.log().contains("could not renew the Lease in time: stepping down")
    })
    .await;
    assert_eq!(agent.metric("nodemedic_prober"), Some(0.0), "set with the election");
    // 401s long enough for the Lease reads to back off past 10 s.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let cleared = SystemTime::now();
    api.faults().clear();
    wait_for("the prober back", Duration::from_secs(60), &agent, || {
        dry_runs(cleared) >= 1
    })
    .await;

    let requests = api.requests();
    let after: Vec<_> = requests.iter().filter(|r| r.time >= cleared).collect();
    let first_served = after
        .iter()
        .find(|r| r.status == 200 && !r.is_watch)
        .map(|r| r.time)
        .unwrap();
    let lease = after
        .iter()
        .find(|r| r.resource == "leases" && r.status == 200)
        .map(|r| r.time)
        .unwrap();
    let round = after
        .iter()
        .find(|r| r.status == 201 && r.query_param("dryRun").is_some())
        .map(|r| r.time)
        .unwrap();
    let since = |t: SystemTime| t.duration_since(first_served).unwrap_or_default();
    let shown: Vec<String> = after
        .iter()
        .take(20)
        .map(|r| {
            format!(
                "+{:?} {} {} {}",
                r.time.duration_since(cleared).unwrap_or_default(),
                r.method,
                r.path,
                r.status
            )
        })
        .collect();
    eprintln!(
        "after the 401s: the Lease read {:?} and the round {:?} after the first served request",
        since(lease),
        since(round)
    );
    assert!(
        since(lease) <= Duration::from_secs(2) && since(round) <= Duration::from_secs(3),
        "the Lease read {:?} and the round {:?} after the first served request\n{shown:#?}",
        since(lease),
        since(round)
    );
    assert_eq!(
        agent.metric("nodemedic_rule_firing{rule=\"apiserver-unreachable\"}"),
        Some(0.0),
        "401s are answers"
    );
}

/// An agent that starts probes once: one round when it is elected, not a second one when its
/// pod watch first lists (which used to count as "the API server answers again").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_probe_round_at_start() {
    use nodemedic_tests::agent::{Agent, wait_for};
    let api = ApiServer::start().await.unwrap();
    let agent = Agent::start(
        &api,
        None,
        &[
            "--probe-interval-seconds",
            "600",
            "--rule-setting",
            "apiserver_unreachable_seconds=1200",
        ],
    );
    let dry_runs = || {
        api.requests()
            .iter()
            .filter(|r| r.query_param("dryRun").is_some())
            .count()
    };
    wait_for("the first round", Duration::from_secs(30), &agent, || {
        dry_runs() >= 1 && agent.get("/readyz").0 == 200
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(dry_runs(), 1, "{}", agent.log());
    assert_eq!(agent.metric("nodemedic_prober"), Some(1.0));
}
