//! `half-submitted-driver` and `repair half-submitted` end to end: the real `nodemedic scan`
//! against the API server double and a host tree whose kubelet pod directories say which
//! driver's configuration volume was set up, the repair through the library (as
//! tests/tests/repair_pods.rs runs the other pod repairs), the daemon, and a driver left by a
//! create that outlived its client. The real spark-submit leaves one in
//! tests/tests/spark_client.rs.

use std::path::PathBuf;
use std::time::Duration;

use nodemedic::cli::args::{
    ApplyArgs, Format, FormatArg, HalfSubmittedArgs, KubeArgs, PodRepairArgs, RepairAction as Command,
};
use nodemedic::repair::audit::ActionResult;
use nodemedic::repair::pods::{self, api_snapshot, plan_half_submitted};
use nodemedic_rules::Settings;
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::hosttree::{Layout, Node, Runtime};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, half_submitted, now_rfc3339};
use serde_json::{Value, json};

const NODE: &str = "worker-3";
const NS: &str = "spark-jobs";

struct Fixture {
    api: ApiServer,
    kubeconfig: PathBuf,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let api = ApiServer::start().await.unwrap();
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    let dir = tempfile::tempdir().unwrap();
    let (root, kubeconfig) = nodemedic_tests::scan_host(&api, dir.path(), NODE);
    Fixture {
        api,
        kubeconfig,
        root,
        _dir: dir,
    }
}

/// An application named `name` with its own app id (`seed` makes it differ from another
/// submission of the same name).
fn app(name: &str, seed: &str) -> SparkApp {
    let mut a = SparkApp::new(SparkVersion::V3_5, NS, name);
    let other = SparkApp::new(SparkVersion::V3_5, NS, seed);
    a.app_id = other.app_id;
    a.prefix = format!("{name}-{}", &other.prefix[seed.len() + 1..]);
    a
}

impl Fixture {
    /// The kubelet's directory of pod `uid` on the host, with its service account token volume
    /// set up, and its configuration volume too when `conf_mounted`.
    fn kubelet_pod_dir(&self, uid: &str, conf_mounted: bool) -> PathBuf {
        let pod = self.root.join("var/lib/kubelet/pods").join(uid);
        std::fs::create_dir_all(pod.join("volumes/kubernetes.io~projected/kube-api-access-7x2kq")).unwrap();
        if conf_mounted {
            let conf = pod.join("volumes/kubernetes.io~configmap/spark-conf-volume-driver");
            std::fs::create_dir_all(&conf).unwrap();
            std::fs::write(conf.join("spark.properties"), "spark.app.name=etl\n").unwrap();
        }
        pod
    }

    /// A half-submitted driver of `app` bound here, waiting `waited` seconds; its kubelet
    /// directory as `conf_mounted` says (`None`: no directory at all).
    fn waiting_driver(&self, app: &SparkApp, uid: &str, waited: i64, conf_mounted: Option<bool>) -> Value {
        let mut pod = app.driver(uid, NODE, "");
        half_submitted(&mut pod, waited);
        self.api.store().create(pod.clone());
        if let Some(mounted) = conf_mounted {
            self.kubelet_pod_dir(uid, mounted);
        }
        pod
    }

    fn scan(&self, extra: &[&str]) -> Value {
        let report = nodemedic_tests::scan_report(&self.root, &self.kubeconfig, NODE, extra);
        assert_eq!(report["sources"]["pods"], "api", "{report:#}");
        report
    }

    fn findings(&self, extra: &[&str]) -> Vec<Value> {
        self.scan(extra)["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["rule"] == "half-submitted-driver")
            .cloned()
            .collect()
    }

    fn repair_args(&self, apply: bool) -> HalfSubmittedArgs {
        HalfSubmittedArgs {
            common: PodRepairArgs {
                node: Some(NODE.into()),
                kube: KubeArgs {
                    kubeconfig: Some(self.kubeconfig.clone()),
                },
                host_root: Some(self.root.clone()),
                kubelet_dir: None,
                config: None,
                rule_setting: vec![],
                apply: ApplyArgs {
                    apply,
                    yes: apply,
                    expect_plan: None,
                },
                format: FormatArg { format: Format::Text },
            },
            older_than_seconds: None,
        }
    }

    fn exists(&self, name: &str) -> Option<String> {
        self.api
            .store()
            .get("pods", Some(NS), name)
            .and_then(|p| p["metadata"]["uid"].as_str().map(String::from))
    }
}

async fn run_repair(args: HalfSubmittedArgs) -> (Result<u8, String>, String) {
    nodemedic_tests::repairs::run_pod_repair(Command::HalfSubmitted(args)).await
}

/// Where the kubelet sets up the driver's configuration volume, as a host path.
fn volume_path(uid: &str) -> String {
    format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/spark-conf-volume-driver")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_whose_config_map_never_came_is_reported_then_deleted_with_its_uid() {
    let f = fixture().await;
    let stuck_app = app("etl", "etl-1");
    let stuck = f.waiting_driver(&stuck_app, "drv-stuck", 600, Some(false));
    let config_map = stuck["spec"]["volumes"][1]["configMap"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    // The kubelet's Warning about it (1.28+ words), and one about another volume.
    let stuck_name = stuck["metadata"]["name"].as_str().unwrap().to_string();
    for (n, message) in [
        (
            1,
            format!(
                "MountVolume.SetUp failed for volume \"spark-conf-volume-driver\" : configmap \"{config_map}\" not found"
            ),
        ),
        (
            2,
            "MountVolume.SetUp failed for volume \"spark-local-dir-1\" : mkdir: no space left on device".to_string(),
        ),
    ] {
        f.api.store().create(json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("{stuck_name}.17f2a1b3c4d5e6f{n}"), "namespace": NS},
            "involvedObject": {"kind": "Pod", "namespace": NS, "name": stuck_name, "uid": "drv-stuck", "apiVersion": "v1"},
            "reason": "FailedMount", "message": message, "source": {"component": "kubelet", "host": NODE},
            "firstTimestamp": now_rfc3339(-590), "lastTimestamp": now_rfc3339(-20), "count": 9, "type": "Warning"}));
    }
    // The same wait with the volume set up (an image pull, say): not this rule's.
    let pulling = f.waiting_driver(&app("report", "report-1"), "drv-pulling", 600, Some(true));
    // Still within the grace.
    let young = f.waiting_driver(&app("ml", "ml-1"), "drv-young", 60, Some(false));

    let found = f.findings(&[]);
    assert_eq!(found.len(), 1, "{found:#?}");
    let h = &found[0];
    assert_eq!(h["severity"], "warning");
    assert_eq!(h["subject"]["uid"], "drv-stuck");
    assert_eq!(h["evidence"]["config_map"], config_map.as_str());
    assert_eq!(h["evidence"]["conf_volume"], "spark-conf-volume-driver");
    assert_eq!(h["evidence"]["missing_volume_path"], volume_path("drv-stuck"));
    assert_eq!(h["evidence"]["waiting_reason"], "ContainerCreating");
    assert_eq!(h["evidence"]["cpu_request_millis"], 2000);
    let events = h["evidence"]["mount_events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "only the conf volume's: {events:#?}");
    assert_eq!(events[0]["count"], 9);
    assert!(events[0]["message"].as_str().unwrap().contains(&config_map));
    let waited = h["evidence"]["waited_seconds"].as_i64().unwrap();
    assert!((600..620).contains(&waited), "{waited}");
    assert!(
        h["summary"].as_str().unwrap().ends_with(&format!(
            "its ConfigMap {config_map} never came: volume spark-conf-volume-driver is not set up on this node"
        )),
        "{h:#}"
    );
    // Past the critical time (a setting), critical; a shorter grace takes the young one too.
    let found = f.findings(&["--rule-setting", "half_submitted_critical_seconds=500"]);
    assert_eq!(found[0]["severity"], "critical", "{found:#?}");
    let found = f.findings(&["--rule-setting", "half_submitted_grace_seconds=30"]);
    let uids: Vec<&str> = found.iter().map(|f| f["subject"]["uid"].as_str().unwrap()).collect();
    assert_eq!(uids, ["drv-stuck", "drv-young"], "oldest first");

    // The repair: the plan first, nothing deleted.
    let (code, out) = run_repair(f.repair_args(false)).await;
    assert_eq!(code, Ok(1), "a plan, not applied:\n{out}");
    assert!(
        out.contains(&format!("delete pod {NS}/{stuck_name} (uid drv-stuck, Pending)")),
        "{out}"
    );
    assert!(out.contains("never came"), "{out}");
    assert!(out.contains("dry run: nothing changed"), "{out}");
    assert!(f.api.requests().iter().all(|r| r.method != "DELETE"));
    // Applied: one DELETE, conditioned on the UID; the others stay.
    let (code, out) = run_repair(f.repair_args(true)).await;
    assert_eq!(code, Ok(0), "{out}");
    let deletes: Vec<_> = f.api.requests().into_iter().filter(|r| r.method == "DELETE").collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(
        deletes[0].body_json().unwrap()["preconditions"]["uid"],
        "drv-stuck",
        "{deletes:?}"
    );
    assert_eq!(f.exists(&stuck_name), None);
    for p in [&pulling, &young] {
        assert!(f.exists(p["metadata"]["name"].as_str().unwrap()).is_some());
    }
    // Its Event says what was deleted and why.
    let events = f.api.store().list("events");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "HalfSubmittedDriverDeleted" && e["involvedObject"]["uid"] == "drv-stuck"),
        "{events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_driver_of_the_same_submission_that_started_is_evidence_enough() {
    let f = fixture().await;
    let first = app("etl", "etl-1");
    // The kubelet never got to it (no pod directory): only the resubmission tells.
    let stuck = f.waiting_driver(&first, "drv-first", 900, None);
    // Resubmitted five minutes later under the same name: a new app id, running on another node.
    let again = app("etl", "etl-2");
    let mut newer = again.driver("drv-second", "worker-9", "10.42.9.9");
    newer["metadata"]["creationTimestamp"] = json!(now_rfc3339(-600));
    f.api.store().create(newer);
    let found = f.findings(&[]);
    assert_eq!(found.len(), 1, "{found:#?}");
    let e = &found[0]["evidence"];
    assert_eq!(e["newer_driver"]["uid"], "drv-second");
    assert_eq!(e["newer_driver"]["node"], "worker-9");
    assert_eq!(e["newer_driver"]["tie"], "spark-app-name");
    assert!(e.get("missing_volume_path").is_none(), "{e:#}");
    // The agent listed the namespace's drivers (its directory answers the name's selector from
    // that list).
    assert!(
        f.api.requests().iter().any(|r| r.verb == "list"
            && r.resource == "pods"
            && r.namespace.as_deref() == Some(NS)
            && r.query_param("labelSelector").as_deref() == Some("spark-role=driver")),
        "{:#?}",
        f.api
            .requests()
            .iter()
            .filter(|r| r.verb == "list")
            .map(|r| r.query_param("labelSelector"))
            .collect::<Vec<_>>()
    );
    // The newer one of another name ties nothing.
    f.api
        .store()
        .modify("pods", Some(NS), &format!("{}-driver", again.prefix), |p| {
            p["metadata"]["labels"]["spark-app-name"] = json!("etl-v2");
        });
    assert!(f.findings(&[]).is_empty());
    assert!(f.exists(stuck["metadata"]["name"].as_str().unwrap()).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_rechecks_and_leaves_a_driver_that_started() {
    let f = fixture().await;
    let a = app("etl", "etl-1");
    let stuck = f.waiting_driver(&a, "drv-stuck", 600, Some(false));
    let name = stuck["metadata"]["name"].as_str().unwrap().to_string();
    let conn = nodemedic::kube_api::Connection::load(Some(&f.kubeconfig), Duration::from_secs(10))
        .await
        .unwrap();
    let host = nodemedic::host::HostPaths::new(&f.root, None);
    let snapshot = api_snapshot(&conn, NODE, Some(&host), &[]).await.unwrap();
    let plan = plan_half_submitted(&snapshot, &Settings::default());
    assert_eq!(plan.delete.len(), 1, "{plan:#?}");
    // The ConfigMap came late after all and the driver started.
    f.api.store().modify("pods", Some(NS), &name, |p| {
        p["status"]["phase"] = json!("Running");
        p["status"]["containerStatuses"][0]["state"] = json!({"running": {"startedAt": now_rfc3339(-1)}});
    });
    let fresh = pods::refresh_snapshot(&conn.client, &snapshot, &plan.lookups())
        .await
        .unwrap();
    let (confirmed, skipped) = pods::recheck(&plan, &plan_half_submitted(&fresh, &Settings::default()));
    assert!(confirmed.delete.is_empty(), "{confirmed:#?}");
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].result, ActionResult::Skipped);
    assert!(f.exists(&name).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_reports_it_once_the_grace_passes_and_clears_when_it_starts() {
    use nodemedic_tests::agent::{Agent, NODE as AGENT_NODE, wait_for};
    let api = ApiServer::start().await.unwrap();
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": AGENT_NODE}}));
    let a = app("etl", "etl-1");
    let mut pod = a.driver("drv-daemon", AGENT_NODE, "");
    // Bound 55 s ago; the grace below is 60 s: the daemon must judge again by the clock.
    half_submitted(&mut pod, 55);
    api.store().create(pod.clone());
    let host = Node::new(AGENT_NODE, Layout::V1Cgroupfs, Runtime::Containerd);
    let agent = Agent::start(
        &api,
        Some(&host),
        &[
            "--full-scan-interval-seconds",
            "600",
            "--rule-setting",
            "half_submitted_grace_seconds=60",
        ],
    );
    std::fs::create_dir_all(
        agent
            .host_root()
            .join("var/lib/kubelet/pods/drv-daemon/volumes/kubernetes.io~projected/kube-api-access-7x2kq"),
    )
    .unwrap();
    let m = |s: &str| agent.metric(s);
    wait_for("a first scan", Duration::from_secs(30), &agent, || {
        m("nodemedic_half_submitted_drivers").is_some()
    })
    .await;
    assert_eq!(m("nodemedic_half_submitted_drivers"), Some(0.0), "within the grace");
    wait_for(
        "the finding once the grace passed",
        Duration::from_secs(30),
        &agent,
        || m("nodemedic_half_submitted_drivers") == Some(1.0),
    )
    .await;
    assert_eq!(
        m("nodemedic_findings{rule=\"half-submitted-driver\",severity=\"warning\"}"),
        Some(1.0)
    );
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    wait_for("its Event", Duration::from_secs(30), &agent, || {
        api.store()
            .list("events")
            .iter()
            .any(|e| e["reason"] == "HalfSubmittedDriver" && e["involvedObject"]["name"] == name.as_str())
    })
    .await;
    // Its ConfigMap came after all and it started: the finding clears.
    api.store().modify("pods", Some(NS), &name, |p| {
        p["status"]["phase"] = json!("Running");
        p["status"]["containerStatuses"][0]["state"] = json!({"running": {"startedAt": now_rfc3339(-1)}});
    });
    wait_for("the finding to clear", Duration::from_secs(30), &agent, || {
        m("nodemedic_half_submitted_drivers") == Some(0.0)
    })
    .await;
}

/// POSTs the pod `body` into the namespace over plain HTTP and closes the connection 200 ms
/// later, without waiting for an answer: a client whose timeout ran out.
async fn post_and_give_up(api: &ApiServer, body: &str) {
    use tokio::io::AsyncWriteExt as _;
    let request = format!(
        "POST /api/v1/namespaces/{NS}/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut conn = tokio::net::TcpStream::connect(api.http_addr()).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(conn);
}

/// The whole story in the double, without Spark: a client creates a driver pod and gives up
/// before the (slow) admission is over, through a path that carries the write out anyway; the
/// pod lands, is bound here and waits for its ConfigMap; the scan reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_outlived_its_client_leaves_a_driver_the_scan_reports() {
    let f = fixture().await;
    let delay = Duration::from_millis(1500);
    f.api.faults().set_latency("create", "pods", delay);
    f.api.faults().set_writes_outlive_clients(true);
    let a = app("etl", "etl-1");
    let mut pod = a.driver("", NODE, "");
    half_submitted(&mut pod, 0);
    let config_map = pod["spec"]["volumes"][1]["configMap"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    // As spark-submit sends it: no UID, no status, no creation time, not bound yet.
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    for key in ["uid", "creationTimestamp"] {
        pod["metadata"].as_object_mut().unwrap().remove(key);
    }
    pod.as_object_mut().unwrap().remove("status");
    pod["spec"].as_object_mut().unwrap().remove("nodeName");
    let body = pod.to_string();
    // The client's timeout: it gives up long before the admission is over.
    post_and_give_up(&f.api, &body).await;
    assert!(f.exists(&name).is_none(), "not before the admission is over");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while f.exists(&name).is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let uid = f.exists(&name).expect("the create landed after its client left");
    // The scheduler binds it here; the kubelet makes its directory and keeps it waiting.
    f.api.store().modify("pods", Some(NS), &name, |p| {
        p["spec"]["nodeName"] = json!(NODE);
        p["status"] = json!({"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(0)}],
            "containerStatuses": [{"name": "spark-kubernetes-driver", "ready": false, "restartCount": 0, "image": "apache/spark:3.5.1",
                "imageID": "", "state": {"waiting": {"reason": "ContainerCreating"}}}]});
    });
    f.kubelet_pod_dir(&uid, false);
    let found = f.findings(&["--rule-setting", "half_submitted_grace_seconds=0"]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["subject"]["uid"], uid.as_str());
    assert_eq!(found[0]["evidence"]["config_map"], config_map.as_str());
    assert_eq!(found[0]["evidence"]["missing_volume_path"], volume_path(&uid));
    // Through kube-apiserver's own behaviour (the default), the same abandoned create leaves
    // nothing.
    f.api.faults().set_writes_outlive_clients(false);
    let other = body.replace(&name, "etl-other-driver");
    post_and_give_up(&f.api, &other).await;
    tokio::time::sleep(delay + Duration::from_millis(500)).await;
    assert!(f.exists("etl-other-driver").is_none());
}
