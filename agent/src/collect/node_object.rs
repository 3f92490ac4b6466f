//! A `v1 Node` as nodemedic reads it from the API: [`NodeObject`], only its `Ready`
//! condition, its taints and its kubelet's version; [`node_status`] turns another node's into
//! the rules' [`NodeStatus`], and [`kubelet_version`] reads this node's kubelet version
//! (`status.nodeInfo.kubeletVersion`, which the kubelet writes with every node status update:
//! `VersionInfo` in `pkg/kubelet/nodestatus/setters.go`).
//!
//! The node lifecycle controller sets `Ready` to `Unknown` (reason `NodeStatusUnknown`) when the
//! node's kubelet stops renewing its lease, and taints the node
//! `node.kubernetes.io/unreachable:NoExecute`; a kubelet that reports itself not ready gives
//! `False` and `node.kubernetes.io/not-ready` (kubernetes `pkg/controller/nodelifecycle`).

use nodemedic_rules::kubelet_version::{KubeletVersion, NODE_STATUS, VersionReading};
use nodemedic_rules::snapshot::{NodeStatus, Observed};

/// A `v1 Node`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct NodeObject {
    #[serde(default)]
    pub metadata: NodeMeta,
    #[serde(default)]
    pub spec: NodeSpec,
    #[serde(default)]
    pub status: NodeObjectStatus,
}

/// Its `metadata`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct NodeMeta {
    #[serde(default)]
    pub name: String,
}

/// `v1 NodeSpec`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct NodeSpec {
    #[serde(default)]
    pub taints: Vec<Taint>,
}

/// `v1 Taint`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Taint {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub effect: String,
}

/// `v1 NodeStatus`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct NodeObjectStatus {
    #[serde(default)]
    pub conditions: Vec<NodeCondition>,
    #[serde(default, rename = "nodeInfo")]
    pub node_info: NodeSystemInfo,
}

/// `v1 NodeSystemInfo`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSystemInfo {
    /// The kubelet's git version (`v1.23.8`); empty until the kubelet first reports its status.
    #[serde(default)]
    pub kubelet_version: String,
}

/// `v1 NodeCondition`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCondition {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub last_transition_time: Option<String>,
}

/// The rules' view of a node: its `Ready` condition (status, since when, why) and its
/// `NoExecute` taints.
pub fn node_status(node: &NodeObject) -> NodeStatus {
    let ready = node.status.conditions.iter().find(|c| c.type_ == "Ready");
    NodeStatus {
        name: node.metadata.name.clone(),
        ready: ready.and_then(|c| c.status.clone()),
        ready_since: ready
            .and_then(|c| c.last_transition_time.as_deref())
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second()),
        ready_reason: ready.and_then(|c| c.reason.clone()).filter(|r| !r.is_empty()),
        no_execute_taints: node
            .spec
            .taints
            .iter()
            .filter(|t| t.effect == "NoExecute")
            .map(|t| t.key.clone())
            .collect(),
    }
}

/// A node from the API's answer to a GET.
pub fn parse_node(text: &[u8]) -> Result<NodeStatus, serde_json::Error> {
    serde_json::from_slice::<NodeObject>(text).map(|n| node_status(&n))
}

/// The kubelet version `node` reports, read at `read_at` (unix seconds); an error that quotes
/// the text when it is empty or not a version.
pub fn kubelet_version(node: &NodeObject, read_at: i64) -> Observed<VersionReading> {
    match KubeletVersion::parse(&node.status.node_info.kubelet_version) {
        Ok(version) => Observed::Ok(VersionReading {
            version,
            source: NODE_STATUS.to_string(),
            read_at,
        }),
        Err(e) => Observed::Error {
            reason: format!("node {}: status.nodeInfo.kubeletVersion: {e}", node.metadata.name),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_node_reads_as_the_lifecycle_controller_left_it() {
        let node = br#"{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "worker-2"},
          "spec": {"podCIDR": "10.244.2.0/24", "taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": "2026-03-02T10:00:40Z"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-03-02T10:00:45Z"}]},
          "status": {"conditions": [
            {"type": "MemoryPressure", "status": "Unknown", "reason": "NodeStatusUnknown"},
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
             "message": "Kubelet stopped posting node status.",
             "lastHeartbeatTime": "2026-03-02T09:59:58Z", "lastTransitionTime": "2026-03-02T10:00:40Z"}],
            "images": [{"names": ["apache/spark:3.5.1"], "sizeBytes": 1}]}}"#;
        let status = parse_node(node).unwrap();
        assert_eq!(
            status,
            NodeStatus {
                name: "worker-2".into(),
                ready: Some("Unknown".into()),
                ready_since: Some("2026-03-02T10:00:40Z".parse::<jiff::Timestamp>().unwrap().as_second()),
                ready_reason: Some("NodeStatusUnknown".into()),
                no_execute_taints: vec!["node.kubernetes.io/unreachable".into()],
            }
        );
        // A node without conditions yet (just registered): nothing to judge.
        let bare = parse_node(br#"{"metadata": {"name": "n"}, "status": {}}"#).unwrap();
        assert_eq!((bare.ready, bare.ready_since), (None, None));
    }

    #[test]
    fn the_kubelet_version_of_a_node() {
        let node = |version: &str| -> NodeObject {
            serde_json::from_str(&format!(
                r#"{{"kind": "Node", "metadata": {{"name": "worker-1"}}, "status": {{"nodeInfo": {{
                   "architecture": "amd64", "containerRuntimeVersion": "containerd://1.6.20",
                   "kubeProxyVersion": "{version}", "kubeletVersion": "{version}",
                   "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12 (bookworm)"}}}}}}"#
            ))
            .unwrap()
        };
        let Observed::Ok(r) = kubelet_version(&node("v1.23.8"), 1_800_000_000) else {
            panic!()
        };
        assert_eq!((r.version.major, r.version.minor, r.version.patch), (1, 23, 8));
        assert_eq!(
            (r.describe(), r.read_at),
            ("v1.23.8, Node status".to_string(), 1_800_000_000)
        );
        let Observed::Ok(r) = kubelet_version(&node("v1.28.3-eks-7f8a1f2"), 0) else {
            panic!()
        };
        assert_eq!(r.version.minor, 28);
        let garbage = kubelet_version(&node("vfoo"), 0);
        assert_eq!(
            garbage,
            Observed::Error {
                reason: "node worker-1: status.nodeInfo.kubeletVersion: kubelet version \"vfoo\" is not of the form \
                         v<major>.<minor>.<patch>[-suffix][+build]"
                    .into()
            }
        );
        // A node the kubelet has not reported on yet.
        let bare: NodeObject = serde_json::from_str(r#"{"metadata": {"name": "n"}, "status": {}}"#).unwrap();
        assert_eq!(
            kubelet_version(&bare, 0).status(),
            "error: node n: status.nodeInfo.kubeletVersion: the kubelet version is empty"
        );
    }
}
