//! This node's `NodeResourceTopology` (`topology.node.k8s.io/v1alpha2`): the per-NUMA CPU
//! availability that the scheduler-plugins `NodeResourceTopologyMatch` plugin places Guaranteed
//! pods by, with the CPUs of stale checkpoint entries counted as taken.
//!
//! node-feature-discovery's topology-updater publishes the same object from the kubelet's
//! PodResources API, which does not know about stale entries: where both would run, use one
//! (docs/operations/node-resource-topology.md). The agent writes only an object it created
//! (label `app.kubernetes.io/managed-by: nodemedic`) and only when its content changes.
//!
//! [`build`] is pure (the object from a snapshot); [`Publisher`] writes it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use nodemedic_rules::NodeSnapshot;
use nodemedic_rules::facts::{Facts, ReservedFrom};
use serde_json::{Value, json};

pub const GROUP: &str = "topology.node.k8s.io";
pub const VERSION: &str = "v1alpha2";
pub const KIND: &str = "NodeResourceTopology";
pub const PLURAL: &str = "noderesourcetopologies";
/// The label that marks the object as the agent's.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "nodemedic");
/// The attribute that names the CPUs stale entries hold.
pub const STALE_ATTRIBUTE: &str = "nodemedic.io/stale-cpus";

/// The object for the node of `snap`, or `None` when the static policy's state is not known
/// or a NUMA node's memory is (nothing trustworthy to publish).
///
/// Each zone carries `memory` too (`numa_memory`, bytes per NUMA node, from sysfs): the
/// scheduler plugin checks every native resource a container requests against the zones and
/// refuses a node whose zones do not list it, so an object with CPUs alone would keep every
/// Guaranteed pod (they all request memory) off the node. nodemedic does not judge memory:
/// the zone's whole memory is given as capacity, allocatable and available.
pub fn build(snap: &NodeSnapshot, facts: &Facts, numa_memory: &BTreeMap<u32, u64>) -> Option<Value> {
    let (nodes, reserved_from) = facts.numa.as_ref()?;
    let reserved_from = *reserved_from;
    if nodes.iter().any(|n| !numa_memory.contains_key(&n.node)) {
        return None;
    }
    let kubelet = snap.host.kubelet.ok();
    let stale = nodes
        .iter()
        .fold(nodemedic_rules::CpuSet::new(), |acc, n| acc.union(&n.stale));
    let zones: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let memory = numa_memory.get(&n.node).copied().unwrap_or_default().to_string();
            json!({
                "name": format!("node-{}", n.node),
                "type": "Node",
                "resources": [{
                    "name": "cpu",
                    "capacity": n.online.len().to_string(),
                    "allocatable": n.allocatable().len().to_string(),
                    // Free for the next Guaranteed container: neither live nor stale entries.
                    "available": n.free.len().to_string(),
                }, {
                    "name": "memory",
                    "capacity": memory,
                    "allocatable": memory,
                    "available": memory,
                }],
            })
        })
        .collect();
    let mut attributes = vec![
        json!({"name": "topologyManagerPolicy", "value": kubelet.map_or("none", |k| k.topology_manager_policy.as_str())}),
        json!({"name": "topologyManagerScope", "value": kubelet.map_or("container", |k| k.topology_manager_scope.as_str())}),
        json!({"name": STALE_ATTRIBUTE, "value": stale.to_string()}),
    ];
    if reserved_from == ReservedFrom::Config {
        attributes.push(json!({"name": "nodemedic.io/reserved-cpus-from", "value": "kubelet-config"}));
    }
    Some(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {
            "name": snap.node,
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
        },
        "attributes": attributes,
        "zones": zones,
    }))
}

/// What one publication did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Updated,
    /// The object already says this (no write).
    Unchanged,
    /// An object of that name exists that the agent did not create: left alone.
    Conflict,
    Failed,
}

impl Outcome {
    /// The `outcome` label of `nodemedic_node_resource_topology_writes_total`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Conflict => "conflict",
            Outcome::Failed => "failed",
        }
    }
}

/// Writes the node's object when it changes.
#[derive(Debug)]
pub struct Publisher {
    api: Api<DynamicObject>,
    /// Nodes, read for their UID alone: decoded untyped (no typed Node decoder for it).
    nodes: Api<DynamicObject>,
    /// The content last written or found equal (`attributes`, `zones`), and the
    /// resourceVersion the object had then.
    last: Option<(Value, Option<String>)>,
    /// When the object was last read or written.
    last_checked: Option<Instant>,
    /// Since when an object of another owner is left alone, and why.
    conflict: Option<(Instant, String)>,
    /// The Node's UID, for the owner reference (the object goes when the Node does).
    node_uid: Option<String>,
}

/// How long the agent trusts that the object still says what it wrote.
pub const RECHECK: Duration = Duration::from_secs(600);

/// The part of the object that carries meaning (not metadata).
fn content(obj: &Value) -> Value {
    json!({"attributes": obj.get("attributes"), "zones": obj.get("zones")})
}

impl Publisher {
    pub fn new(client: Client) -> Self {
        let gvk = GroupVersionKind::gvk(GROUP, VERSION, KIND);
        let resource = ApiResource::from_gvk_with_plural(&gvk, PLURAL);
        Publisher {
            api: Api::all_with(client.clone(), &resource),
            nodes: Api::all_with(client, &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&())),
            last: None,
            last_checked: None,
            conflict: None,
            node_uid: None,
        }
    }

    /// `desired` with the owner reference to its Node, when the Node's UID can be read.
    // Err: a plain-text reason, which `publish` returns beside `Outcome::Failed` as it does the
    // API's own.
    async fn owned(&mut self, desired: &Value, name: &str) -> Result<DynamicObject, String> {
        if self.node_uid.is_none() {
            // Without it the object is published all the same; it outlives a deleted Node.
            self.node_uid = self.nodes.get(name).await.ok().and_then(|n| n.metadata.uid);
        }
        let mut object = desired.clone();
        if let Some(uid) = &self.node_uid {
            object["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]);
        }
        serde_json::from_value(object).map_err(|e| format!("{PLURAL}/{name}: {e}"))
    }

    /// Makes the object on the API server say `desired`: nothing when it already does (no
    /// request at all when the agent wrote it less than [`RECHECK`] ago), a create when it is
    /// absent, an update (with the read resourceVersion as precondition) when it differs. An
    /// object of that name that another writer owns is left alone: one without the agent's
    /// label, or one whose content someone else changed since the agent wrote it (the
    /// topology-updater of node-feature-discovery keeps labels it did not set).
    pub async fn publish(&mut self, desired: &Value) -> (Outcome, Option<String>) {
        let want = content(desired);
        let fresh = self.last_checked.is_some_and(|t| t.elapsed() < RECHECK);
        if fresh && self.last.as_ref().is_some_and(|(c, _)| *c == want) {
            return (Outcome::Unchanged, None);
        }
        if let Some((since, _)) = &self.conflict {
            if since.elapsed() < RECHECK {
                return (Outcome::Conflict, None);
            }
        }
        let name = desired["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let existing = match self.api.get_opt(&name).await {
            Ok(o) => o,
            Err(e) => return (Outcome::Failed, Some(format!("get {PLURAL}/{name}: {e}"))),
        };
        self.last_checked = Some(Instant::now());
        let (outcome, version) = match existing {
            None => {
                let object = match self.owned(desired, &name).await {
                    Ok(o) => o,
                    Err(e) => return (Outcome::Failed, Some(e)),
                };
                match self.api.create(&PostParams::default(), &object).await {
                    Ok(o) => (Outcome::Created, o.metadata.resource_version),
                    Err(e) => return (Outcome::Failed, Some(format!("create {PLURAL}/{name}: {e}"))),
                }
            }
            Some(current) => {
                let ours = current
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(MANAGED_BY.0))
                    .map(String::as_str)
                    == Some(MANAGED_BY.1);
                let have = content(&serde_json::to_value(&current).unwrap_or_default());
                // Changed by someone since the agent wrote it: not the agent's to fight over.
                let overwritten = self.last.as_ref().is_some_and(|(written, version)| {
                    *written != have && version.is_some() && *version != current.metadata.resource_version
                });
                if !ours || overwritten {
                    let why = if ours {
                        format!(
                            "{PLURAL}/{name} was changed by another writer since nodemedic wrote it (node-feature-discovery's \
                             topology-updater keeps the labels it finds): nodemedic leaves it alone; run one publisher per node"
                        )
                    } else {
                        format!(
                            "{PLURAL}/{name} exists without the label {}={}: another publisher (node-feature-discovery's \
                             topology-updater?) owns it; nodemedic leaves it alone",
                            MANAGED_BY.0, MANAGED_BY.1
                        )
                    };
                    self.conflict = Some((Instant::now(), why.clone()));
                    self.last = None;
                    return (Outcome::Conflict, Some(why));
                }
                self.conflict = None;
                if have == want {
                    (Outcome::Unchanged, current.metadata.resource_version.clone())
                } else {
                    let mut object = match self.owned(desired, &name).await {
                        Ok(o) => o,
                        Err(e) => return (Outcome::Failed, Some(e)),
                    };
                    object.metadata.resource_version = current.metadata.resource_version.clone();
                    match self.api.replace(&name, &PostParams::default(), &object).await {
                        Ok(o) => (Outcome::Updated, o.metadata.resource_version),
                        Err(e) => return (Outcome::Failed, Some(format!("update {PLURAL}/{name}: {e}"))),
                    }
                }
            }
        };
        self.last = Some((want, version));
        (outcome, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::CpuSet;
    use nodemedic_rules::Settings;
    use nodemedic_rules::checkpoint::Checkpoint;
    use nodemedic_rules::snapshot::{CheckpointFile, KubeletConfig, Observed, PodSource};
    use nodemedic_rules::topology::CpuTopology;
    use nodemedic_rules::validate::CpuManagerConfig;

    #[test]
    fn zones_per_numa_node_with_stale_cpus_taken() {
        let mut snap = NodeSnapshot::empty("worker-1", 1_700_000_000);
        let file = br#"{"policyName":"static","defaultCpuSet":"0-1,7","entries":{"gone":{"app":"4-6"},"live":{"app":"2-3"}},"checksum":0}"#;
        snap.host.checkpoint = Observed::Ok(CheckpointFile::new(
            "/var/lib/kubelet/cpu_manager_state".into(),
            Some(3600.0),
            Checkpoint::parse(file),
        ));
        snap.host.cpus = Observed::Ok(CpuTopology::uniform(2, 4, 1));
        snap.host.kubelet = Observed::Ok(KubeletConfig {
            path: None,
            found_by: nodemedic_rules::snapshot::FoundBy::DefaultPath,
            cpu_manager: CpuManagerConfig {
                policy: "static".into(),
                reserved_system_cpus: Some(CpuSet::parse("0").unwrap()),
                ..Default::default()
            },
            cgroup_driver: "systemd".into(),
            cgroup_root: "/".into(),
            topology_manager_policy: "single-numa-node".into(),
            topology_manager_scope: "container".into(),
            container_runtime_endpoint: nodemedic_rules::snapshot::DEFAULT_RUNTIME_ENDPOINT.into(),
            eviction: Default::default(),
            started_at: None,
        });
        snap.pods.source = PodSource::File;
        snap.pods.bound = vec![nodemedic_rules::snapshot::PodInfo {
            uid: "live".into(),
            name: "exec-1".into(),
            namespace: "spark".into(),
            phase: "Running".into(),
            containers: vec![nodemedic_rules::snapshot::ContainerInfo {
                name: "app".into(),
                ..Default::default()
            }],
            ..Default::default()
        }];
        let memory: BTreeMap<u32, u64> = [(0, 1 << 34), (1, 1 << 34)].into();
        // Without each NUMA node's memory, nothing: the object would keep pods off the node.
        assert_eq!(
            build(
                &snap,
                &nodemedic_rules::facts::derive(&snap, &Settings::default()),
                &[(0, 1 << 34)].into()
            ),
            None
        );
        let obj = build(
            &snap,
            &nodemedic_rules::facts::derive(&snap, &Settings::default()),
            &memory,
        )
        .unwrap();
        assert_eq!(obj["zones"][1]["resources"][1]["name"], "memory");
        assert_eq!(obj["zones"][1]["resources"][1]["available"], "17179869184");
        assert_eq!(obj["metadata"]["name"], "worker-1");
        assert_eq!(obj["metadata"]["labels"]["app.kubernetes.io/managed-by"], "nodemedic");
        let zone = |i: usize| {
            let r = &obj["zones"][i]["resources"][0];
            (
                obj["zones"][i]["name"].as_str().unwrap().to_string(),
                [&r["capacity"], &r["allocatable"], &r["available"]].map(|v| v.as_str().unwrap().to_string()),
            )
        };
        // Node 0: CPU 0 reserved, 2-3 live, 1 free. Node 1: 4-6 stale, 7 free.
        assert_eq!(zone(0), ("node-0".to_string(), ["4", "3", "1"].map(String::from)));
        assert_eq!(zone(1), ("node-1".to_string(), ["4", "4", "1"].map(String::from)));
        let attrs = obj["attributes"].as_array().unwrap();
        assert!(attrs.contains(&json!({"name": "nodemedic.io/stale-cpus", "value": "4-6"})));
        assert!(attrs.contains(&json!({"name": "topologyManagerPolicy", "value": "single-numa-node"})));
        // Not the static policy: nothing to publish.
        snap.host.checkpoint = Observed::Missing { path: "x".into() };
        assert_eq!(
            build(
                &snap,
                &nodemedic_rules::facts::derive(&snap, &Settings::default()),
                &memory
            ),
            None
        );
    }
}
