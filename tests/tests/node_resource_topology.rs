//! Per-NUMA exclusive CPUs and the published NodeResourceTopology: the real `nodemedic run`
//! against the API server double, on a two-NUMA fixture whose stale entries all sit on NUMA
//! node 1. The object is checked against a CRD written from the upstream API types, and must
//! be written once, then only when it changes.

use std::time::Duration;

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::node_object;
use nodemedic_tests::crd;
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime};
use serde_json::{Value, json};

/// 8 CPUs on two NUMA nodes (0-3, 4-7), CPUs 0 and 4 reserved, single-numa-node alignment.
/// exec-1 holds 1-2 and runs; exec-3's pod is gone and its entry still holds 5-7.
fn two_numa(with_stale: bool) -> Node {
    let mut node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .cpus(2, 4, 1)
        .pod(Pod::new("exec-1", 2).exclusive("1-2"));
    if with_stale {
        node = node.pod(Pod::new("exec-3", 3).exclusive("5-7").gone());
    }
    node.kubelet_yaml.push_str("topologyManagerPolicy: single-numa-node\n");
    node
}

/// The double with the Node and the pods of [`two_numa`]`(true)`, and an agent that publishes,
/// once its object is there.
async fn publishing() -> (ApiServer, Agent) {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    let host = two_numa(true);
    for pod in host.pods_json()["items"].as_array().unwrap() {
        store.create(pod.clone());
    }
    let agent = Agent::start(&api, Some(&host), &["--publish-node-resource-topology", "true"]);
    wait_for("the NodeResourceTopology", Duration::from_secs(60), &agent, || {
        store.get("noderesourcetopologies", None, NODE).is_some()
    })
    .await;
    (api, agent)
}

fn nrt_writes(api: &ApiServer) -> Vec<(String, u16)> {
    api.requests()
        .iter()
        .filter(|r| r.path.contains("/noderesourcetopologies") && matches!(r.method.as_str(), "POST" | "PUT" | "PATCH"))
        .map(|r| (r.method.clone(), r.status))
        .collect()
}

/// (capacity, allocatable, available) of `resource` in zone `zone`.
fn zone(obj: &Value, zone: &str, resource: &str) -> (String, String, String) {
    let z = obj["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["name"] == zone)
        .unwrap();
    let r = z["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == resource)
        .unwrap();
    let s = |k: &str| r[k].as_str().unwrap().to_string();
    (s("capacity"), s("allocatable"), s("available"))
}

fn attribute(obj: &Value, name: &str) -> Option<String> {
    obj["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == name)
        .map(|a| a["value"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_cpus_on_one_numa_node_are_counted_and_published_once() {
    let (api, agent) = publishing().await;
    let store = api.store();

    // The gauge: every online CPU once, per NUMA node.
    let m = |numa: u32, state: &str| {
        agent.metric(&format!(
            "nodemedic_exclusive_cpus{{numa_node=\"{numa}\",state=\"{state}\"}}"
        ))
    };
    assert_eq!(
        [m(0, "reserved"), m(0, "live"), m(0, "stale"), m(0, "free")],
        [Some(1.0), Some(2.0), Some(0.0), Some(1.0)]
    );
    assert_eq!(
        [m(1, "reserved"), m(1, "live"), m(1, "stale"), m(1, "free")],
        [Some(1.0), Some(0.0), Some(3.0), Some(0.0)]
    );

    let obj = store.get("noderesourcetopologies", None, NODE).unwrap();
    crd::validate(&crd::node_resource_topology_crd(), "v1alpha2", &obj).unwrap_or_else(|e| panic!("{e}\n{obj:#}"));
    assert_eq!(obj["metadata"]["labels"]["app.kubernetes.io/managed-by"], "nodemedic");
    // Owned by its Node, so it goes when the Node does.
    assert_eq!(
        obj["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid-7"}])
    );
    // NUMA node 1: 4 CPUs, 3 allocatable (4 reserved), none available (5-7 stale).
    assert_eq!(zone(&obj, "node-0", "cpu"), ("4".into(), "3".into(), "1".into()));
    assert_eq!(zone(&obj, "node-1", "cpu"), ("4".into(), "3".into(), "0".into()));
    assert_eq!(zone(&obj, "node-1", "memory").0, (16u64 << 30).to_string());
    assert_eq!(attribute(&obj, "nodemedic.io/stale-cpus").as_deref(), Some("5-7"));
    assert_eq!(
        attribute(&obj, "topologyManagerPolicy").as_deref(),
        Some("single-numa-node")
    );

    // Nothing changes: no more writes, however many scans.
    let scans = agent.scans();
    wait_for("ten more scans", Duration::from_secs(60), &agent, || {
        agent.scans() >= scans + 10
    })
    .await;
    assert_eq!(nrt_writes(&api), [("POST".to_string(), 201)]);

    // The stale entry is freed (the checkpoint rewritten without it): one update.
    two_numa(false).write(agent.host_root()).unwrap();
    wait_for("the update", Duration::from_secs(60), &agent, || {
        nrt_writes(&api).len() == 2
    })
    .await;
    assert_eq!(nrt_writes(&api)[1], ("PUT".to_string(), 200));
    let obj = store.get("noderesourcetopologies", None, NODE).unwrap();
    crd::validate(&crd::node_resource_topology_crd(), "v1alpha2", &obj).unwrap();
    assert_eq!(zone(&obj, "node-1", "cpu"), ("4".into(), "3".into(), "3".into()));
    assert_eq!(attribute(&obj, "nodemedic.io/stale-cpus").as_deref(), Some(""));
    assert_eq!(
        agent.metric("nodemedic_node_resource_topology_writes_total{outcome=\"created\"}"),
        Some(1.0)
    );
    assert_eq!(
        agent.metric("nodemedic_node_resource_topology_writes_total{outcome=\"updated\"}"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_publishers_object_is_left_alone() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    // node-feature-discovery's topology-updater got there first.
    store.create(json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": NODE},
        "zones": [{"name": "node-0", "type": "Node",
                   "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"}]}]
    }));
    let host = two_numa(true);
    let agent = Agent::start(&api, Some(&host), &["--publish-node-resource-topology", "true"]);
    wait_for("a conflict", Duration::from_secs(60), &agent, || {
        agent
            .metric("nodemedic_node_resource_topology_writes_total{outcome=\"conflict\"}")
            .is_some_and(|n| n >= 1.0)
    })
    .await;
    let scans = agent.scans();
    wait_for("five more scans", Duration::from_secs(60), &agent, || {
        agent.scans() >= scans + 5
    })
    .await;
    assert!(nrt_writes(&api).is_empty(), "{:?}", nrt_writes(&api));
    let obj = store.get("noderesourcetopologies", None, NODE).unwrap();
    assert_eq!(zone(&obj, "node-0", "cpu").2, "4");
    assert!(agent.log().contains("another publisher"), "{}", agent.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_keeps_the_label_is_noticed_and_not_fought() {
    let (api, agent) = publishing().await;
    let store = api.store();
    // node-feature-discovery's topology-updater rewrites the zones and keeps the labels.
    store.modify("noderesourcetopologies", None, NODE, |o| {
        o["zones"] = json!([{"name": "node-0", "type": "Node",
                             "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"}]}]);
    });
    // The agent's next object (the stale entry freed) finds it changed behind its back.
    two_numa(false).write(agent.host_root()).unwrap();
    wait_for("a conflict", Duration::from_secs(60), &agent, || {
        agent
            .metric("nodemedic_node_resource_topology_writes_total{outcome=\"conflict\"}")
            .is_some_and(|n| n >= 1.0)
    })
    .await;
    assert_eq!(nrt_writes(&api), [("POST".to_string(), 201)]);
    let obj = store.get("noderesourcetopologies", None, NODE).unwrap();
    assert_eq!(zone(&obj, "node-0", "cpu").2, "4");
    assert!(agent.log().contains("changed by another writer"), "{}", agent.log());
}
