//! `driver-blocked-by-partition` end to end: the real `nodemedic scan` against the API server
//! double, which holds this node, an unreachable `worker-2`, an old driver bound there, its
//! replacement stuck in `ContainerCreating` here, and the attach/detach controller's
//! Multi-Attach Event on the replacement. The scan reads that Event and that node through the
//! API (one LIST of Events by `involvedObject.uid`, one GET of the node) and names the old
//! driver, its node, how long it has been unreachable and the volume; with `worker-2` Ready it
//! is a slow detach, and the rule stays silent. The daemon finds it too, through its API work
//! (`nodemedic_rule_firing` and an Event `DriverBlockedByPartition` on the blocked driver).

use std::time::Duration;

use nodemedic_tests::agent::{self, Agent, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::events_with_reason;
use nodemedic_tests::findings_of as findings;
use nodemedic_tests::sparkpods::now_rfc3339;
use serde_json::{Value, json};

const NODE: &str = "worker-1";
const OLD_NODE: &str = "worker-2";
const APP: &str = "spark-123";
const PV: &str = "pvc-7f3a9c0e-12d4-4b8a-9f6d-7e2a5c1b8d40";
const OLD_UID: &str = "9b8a7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d";
const NEW_UID: &str = "2f7c1d9e-5a4b-4c3d-8e2f-1a0b9c8d7e6f";
/// How long ago `worker-2`'s Ready condition changed.
const UNREACHABLE_FOR: i64 = 200;

/// A node object whose Ready condition is `ready` since `since_ago` seconds, tainted
/// unreachable unless Ready.
fn node(name: &str, ready: &str, reason: &str, since_ago: i64) -> Value {
    let taints = if ready == "True" {
        json!([])
    } else {
        json!([
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": now_rfc3339(-since_ago)},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now_rfc3339(-since_ago)},
        ])
    };
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "spec": {"taints": taints},
           "status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason,
                      "lastHeartbeatTime": now_rfc3339(-since_ago - 10),
                      "lastTransitionTime": now_rfc3339(-since_ago)}]}})
}

/// A driver pod of the Job `etl-hourly` that mounts the claim `etl-checkpoint`.
fn driver(name: &str, uid: &str, node: &str, created_ago: i64, status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "spark-jobs", "uid": uid,
            "creationTimestamp": now_rfc3339(-created_ago),
            "labels": {"spark-role": "driver", "spark-app-selector": APP, "spark-app-name": "etl-hourly",
                       "job-name": "etl-hourly"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "etl-hourly",
                                 "uid": "0c4d6e8f-job", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"nodeName": node, "restartPolicy": "Never", "schedulerName": "default-scheduler",
            "containers": [{"name": "spark-kubernetes-driver", "image": "apache/spark:3.5.1",
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                "volumeMounts": [{"name": "checkpoint", "mountPath": "/checkpoint"}]}],
            "volumes": [{"name": "checkpoint", "persistentVolumeClaim": {"claimName": "etl-checkpoint"}}]},
        "status": status})
}

/// Seeds the double, the new driver bound to `here`; `old_node_ready` is worker-2's Ready
/// status.
fn seed(api: &ApiServer, here: &str, old_node_ready: (&str, &str)) {
    let store = api.store();
    store.create(node(here, "True", "KubeletReady", 86_400));
    store.create(node(OLD_NODE, old_node_ready.0, old_node_ready.1, UNREACHABLE_FOR));
    let running = json!({"phase": "Running", "qosClass": "Burstable",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(-3600)}],
        "containerStatuses": [{"name": "spark-kubernetes-driver", "ready": true, "restartCount": 0,
            "image": "docker.io/apache/spark:3.5.1", "imageID": "", "containerID": "containerd://0a1b2c",
            "state": {"running": {"startedAt": now_rfc3339(-3590)}}}]});
    store.create(driver("etl-hourly-driver-a", OLD_UID, OLD_NODE, 3600, running));
    let creating = json!({"phase": "Pending", "qosClass": "Burstable",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(-119)}],
        "containerStatuses": [{"name": "spark-kubernetes-driver", "ready": false, "restartCount": 0,
            "image": "apache/spark:3.5.1", "imageID": "",
            "state": {"waiting": {"reason": "ContainerCreating"}}}]});
    store.create(driver("etl-hourly-driver-b", NEW_UID, here, 120, creating));
    store.create(json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "etl-hourly-driver-b.17f2a1b3c4d5e6f7", "namespace": "spark-jobs"},
        "involvedObject": {"kind": "Pod", "namespace": "spark-jobs", "name": "etl-hourly-driver-b",
                           "uid": NEW_UID, "apiVersion": "v1"},
        "reason": "FailedAttachVolume",
        "message": format!("Multi-Attach error for volume \"{PV}\" Volume is already exclusively attached to one node and can't be attached to another"),
        "source": {"component": "attachdetach-controller"},
        "firstTimestamp": now_rfc3339(-110), "lastTimestamp": now_rfc3339(-110), "count": 1,
        "type": "Warning"}));
    // Another Warning of the same pod that says nothing about a partition.
    store.create(json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "etl-hourly-driver-b.17f2a1b3c4d5e6f8", "namespace": "spark-jobs"},
        "involvedObject": {"kind": "Pod", "namespace": "spark-jobs", "name": "etl-hourly-driver-b",
                           "uid": NEW_UID, "apiVersion": "v1"},
        "reason": "FailedScheduling", "message": "0/3 nodes are available: 1 node(s) had untolerated taint",
        "source": {"component": "default-scheduler"},
        "firstTimestamp": now_rfc3339(-121), "lastTimestamp": now_rfc3339(-121), "count": 1,
        "type": "Warning"}));
}

/// Runs `nodemedic scan` on a fixture host of [`NODE`] against the double; the JSON report.
async fn scan(api: &ApiServer) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let (root, kubeconfig) = nodemedic_tests::scan_host(api, dir.path(), NODE);
    let run = tokio::task::spawn_blocking(move || {
        nodemedic_tests::nodemedic(&[
            "scan",
            "--host-root",
            root.to_str().unwrap(),
            "--node",
            NODE,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--format",
            "json",
        ])
    })
    .await
    .unwrap();
    assert!(run.code == 0 || run.code == 1, "{}\n{}", run.stdout, run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    assert_eq!(report["sources"]["pods"], "api", "{report:#}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_driver_blocked_by_an_unreachable_node_is_explained() {
    let api = ApiServer::start().await.unwrap();
    seed(&api, NODE, ("Unknown", "NodeStatusUnknown"));
    let report = scan(&api).await;
    let found = findings(&report, "driver-blocked-by-partition");
    assert_eq!(found.len(), 1, "{report:#}");
    let f = found[0];
    assert_eq!(f["severity"], "critical");
    assert_eq!(f["subject"]["name"], "etl-hourly-driver-b");
    assert_eq!(f["subject"]["uid"], NEW_UID);
    let e = &f["evidence"];
    assert_eq!(e["old_pod"], "spark-jobs/etl-hourly-driver-a");
    assert_eq!(e["old_pod_uid"], OLD_UID);
    assert_eq!(e["old_node"], OLD_NODE);
    assert_eq!(e["old_node_ready"], "Unknown");
    assert_eq!(e["old_node_ready_reason"], "NodeStatusUnknown");
    assert_eq!(
        e["old_node_no_execute_taints"],
        json!(["node.kubernetes.io/unreachable"])
    );
    let unreachable = e["old_node_not_ready_seconds"].as_i64().unwrap();
    assert!(
        (UNREACHABLE_FOR..UNREACHABLE_FOR + 60).contains(&unreachable),
        "not ready for {unreachable} s"
    );
    assert_eq!(e["volumes"], json!([PV]));
    assert_eq!(e["block"], "multi-attach");
    assert_eq!(e["event_reason"], "FailedAttachVolume");
    assert_eq!(e["event_source"], "attachdetach-controller");
    assert_eq!(e["event_count"], 1);
    assert_eq!(e["matched_by"], "spark-app-selector");
    assert_eq!(e["owner"], "Job/etl-hourly");
    let remedy = f["remedy"].as_str().unwrap();
    assert!(
        remedy.contains("kubectl taint node worker-2 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"),
        "{remedy}"
    );
    assert!(
        remedy.contains("kubectl delete pod --force --grace-period=0 -n spark-jobs etl-hourly-driver-a"),
        "{remedy}"
    );
    // Read through the API as designed: the Warning Events of the waiting driver by its UID, in its
    // namespace, and worker-2 by name.
    let requests = api.requests();
    let event_lists: Vec<_> = requests
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "events")
        .collect();
    assert_eq!(event_lists.len(), 1, "{event_lists:#?}");
    assert_eq!(event_lists[0].path, "/api/v1/namespaces/spark-jobs/events");
    assert!(
        event_lists[0]
            .query
            .contains(&format!("involvedObject.uid%3D{NEW_UID}%2Ctype%3DWarning")),
        "{}",
        event_lists[0].query
    );
    assert!(
        requests
            .iter()
            .any(|r| r.verb == "get" && r.resource == "nodes" && r.path == "/api/v1/nodes/worker-2"),
        "worker-2 was not read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_old_node_ready_it_is_a_slow_detach_and_stays_silent() {
    let api = ApiServer::start().await.unwrap();
    seed(&api, NODE, ("True", "KubeletReady"));
    let report = scan(&api).await;
    assert!(
        findings(&report, "driver-blocked-by-partition").is_empty(),
        "{report:#}"
    );
    // The node was looked at; with it Ready, the Events were not worth a request.
    let requests = api.requests();
    assert!(requests.iter().any(|r| r.verb == "get" && r.resource == "nodes"));
    assert!(!requests.iter().any(|r| r.resource == "events" && r.verb == "list"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_reports_it_with_a_metric_and_an_event() {
    let api = ApiServer::start().await.unwrap();
    seed(&api, agent::NODE, ("Unknown", "NodeStatusUnknown"));
    let agent = Agent::start(&api, None, &[]);
    wait_for("driver-blocked-by-partition", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_rule_firing{rule=\"driver-blocked-by-partition\"}") == Some(1.0)
    })
    .await;
    wait_for("its event", Duration::from_secs(30), &agent, || {
        !events_with_reason(&api, "DriverBlockedByPartition").is_empty()
    })
    .await;
    let event = &events_with_reason(&api, "DriverBlockedByPartition")[0];
    assert_eq!(event["regarding"]["uid"], NEW_UID, "{event:#}");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("etl-hourly-driver-a") && note.contains(OLD_NODE),
        "{event:#}"
    );
}
