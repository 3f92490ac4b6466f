//! Objects and reads that several end-to-end tests share: this node's Node object, a node with
//! a stale checkpoint entry, an orphaned executor, and the Events and conditions the daemon
//! wrote to the API server double.

use serde_json::{Value, json};

use crate::agent::{Agent, NODE};
use crate::apiserver::ApiServer;
use crate::hosttree::{Layout, Node, Pod, Runtime};
use crate::sparkpods::SparkApp;

/// The Node object of [`NODE`], Ready, as the kubelet keeps it.
pub fn node_object() -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid-7"},
           "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                      "lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-21T08:00:00Z"}]}})
}

/// The events.k8s.io Events in the double with `reason`.
pub fn events_with_reason(api: &ApiServer, reason: &str) -> Vec<Value> {
    api.store()
        .list("events.events.k8s.io")
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// The condition `type_` of [`NODE`] in the double, if set.
pub fn node_condition(api: &ApiServer, type_: &str) -> Option<Value> {
    let node = api.store().get("nodes", None, NODE)?;
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// A node whose checkpoint holds a stale entry: a host finding that needs no API.
pub fn stale_host() -> Node {
    Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd).pod(Pod::new("gone-job", 2).exclusive("2,6").gone())
}

/// Fails when the daemon's log shows a panic.
pub fn assert_no_panic(agent: &Agent) {
    let log = agent.log();
    assert!(!log.contains("panicked"), "the daemon panicked:\n{log}");
}

/// An executor on this node whose driver (by owner reference) does not exist.
pub fn orphan(app: &SparkApp, n: u32, uid: &str) -> Value {
    app.executor(
        n,
        uid,
        NODE,
        Some((&format!("{}-driver", app.prefix), &format!("no-such-driver-{uid}"))),
        &format!("{}-driver-svc.etl.svc", app.prefix),
    )
}
