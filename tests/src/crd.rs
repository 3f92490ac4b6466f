//! Custom resources checked against their CustomResourceDefinition's schema, as the API server
//! would before storing them: for the NodeResourceTopology object nodemedic publishes
//! (docs/operations/node-resource-topology.md), against the CRD in `tests/crds/`.
//!
//! The checking is done by `tests/crds/validate.py` with Python's `jsonschema` package (it
//! comes with kubernetes-validate; `tests/run.sh` installs both, and PyYAML). The script turns
//! the version's structural `openAPIV3Schema` into a JSON Schema: `x-kubernetes-int-or-string`
//! is an integer or a string (a `pattern`, such as the quantity syntax, applies to strings
//! only), `nullable` allows null, other `x-kubernetes-*` keys are not checked, and a field an
//! object schema does not declare is an error, since the API server would prune it. It also
//! checks that `apiVersion` is the CRD's group and `version`, that `kind` is the CRD's kind, and
//! that `metadata.name` is a DNS subdomain. Only the schema: no CEL rules
//! (`x-kubernetes-validations`), no defaults, no list-type uniqueness.
//!
//! ```no_run
//! let object = serde_json::json!({"apiVersion": "topology.node.k8s.io/v1alpha2",
//!     "kind": "NodeResourceTopology", "metadata": {"name": "worker-1"}, "zones": []});
//! nodemedic_tests::crd::validate(&nodemedic_tests::crd::node_resource_topology_crd(), "v1alpha2", &object)
//!     .unwrap_or_else(|e| panic!("not a valid NodeResourceTopology:\n{e}"));
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// `tests/crds/noderesourcetopologies.topology.node.k8s.io.yaml`: the v1alpha2
/// NodeResourceTopology CRD, written from the upstream Go types.
pub fn node_resource_topology_crd() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/noderesourcetopologies.topology.node.k8s.io.yaml")
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/validate.py")
}

/// Checks `object` against version `version` of the CRD in `crd_path` (a YAML file with one
/// CustomResourceDefinition). `Err` lists every problem, one a line, each starting with the
/// field's path in the API server's style (`zones[0].resources[0].available: Invalid value:
/// "lots": must be a quantity such as 8, 500m or 1Gi`), or says why nothing could be checked
/// (no python3, a missing Python package, no such version in the CRD).
pub fn validate(crd_path: &Path, version: &str, object: &Value) -> Result<(), String> {
    let mut child = Command::new("python3")
        .arg(script())
        .arg(crd_path)
        .arg(version)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run python3 {}: {e}", script().display()))?;
    let body = serde_json::to_vec(object).map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&body)
            .map_err(|e| format!("cannot write the object to validate.py: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("validate.py: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    match out.status.code() {
        Some(0) => Ok(()),
        Some(1) if !stdout.is_empty() => Err(stdout),
        _ => Err(format!(
            "validate.py could not check the object ({}): {stderr}{stdout}",
            out.status
        )),
    }
}

/// A NodeResourceTopology as nodemedic publishes it (docs/operations/node-resource-topology.md)
/// for a node with two NUMA nodes of 8 CPUs, stale entries holding CPUs 4-5, and `available`
/// CPUs on each NUMA node.
pub fn example_node_resource_topology(node: &str, node_uid: &str, available: [&str; 2]) -> Value {
    serde_json::json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {
            "name": node,
            "labels": {"app.kubernetes.io/managed-by": "nodemedic"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
        },
        "attributes": [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": "container"},
            {"name": "nodemedic.io/stale-cpus", "value": "4-5"}
        ],
        "zones": [
            {"name": "node-0", "type": "Node",
             "resources": [{"name": "cpu", "capacity": "8", "allocatable": "7", "available": available[0]},
                           {"name": "memory", "capacity": "68719476736", "allocatable": "68719476736", "available": "68719476736"}]},
            {"name": "node-1", "type": "Node",
             "resources": [{"name": "cpu", "capacity": "8", "allocatable": "8", "available": available[1]},
                           {"name": "memory", "capacity": "68719476736", "allocatable": "68719476736", "available": "68719476736"}]}
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn example() -> Value {
        example_node_resource_topology("worker-1", "5a1c6f7e-3b7d-4c57-9a53-0f1e2d3c4b5a", ["3", "6"])
    }

    fn check(object: &Value) -> Result<(), String> {
        validate(&node_resource_topology_crd(), "v1alpha2", object)
    }

    /// The problems found, one a line; panics when the object is valid.
    fn problems(object: &Value) -> Vec<String> {
        match check(object) {
            Ok(()) => panic!("accepted: {object}"),
            Err(e) => e.lines().map(str::to_string).collect(),
        }
    }

    #[test]
    fn crd_the_published_object_is_valid() {
        check(&example()).unwrap();
        // topologyPolicies (deprecated) and attributes are optional; quantities may be integers;
        // a zone needs no resources; costs and parents as upstream.
        let mut o = example();
        o.as_object_mut().unwrap().remove("attributes");
        o["topologyPolicies"] = json!(["SingleNUMANodeContainerLevel"]);
        o["zones"][0]["resources"][0] = json!({"name": "cpu", "capacity": 8, "allocatable": "7500m", "available": 0});
        o["zones"][1].as_object_mut().unwrap().remove("resources");
        o["zones"][1]["parent"] = json!("socket-0");
        o["zones"][1]["costs"] = json!([{"name": "node-0", "value": 20}, {"name": "node-1", "value": 10}]);
        o["zones"][1]["attributes"] = json!([{"name": "cpus", "value": "8-15"}]);
        check(&o).unwrap();
        // An empty zone list is still a list.
        o["zones"] = json!([]);
        check(&o).unwrap();
    }

    #[test]
    fn crd_a_zone_without_type_is_rejected() {
        let mut o = example();
        o["zones"][1].as_object_mut().unwrap().remove("type");
        assert_eq!(problems(&o), ["zones[1].type: Required value"]);
    }

    #[test]
    fn crd_an_available_that_is_no_quantity_is_rejected() {
        let mut o = example();
        o["zones"][0]["resources"][0]["available"] = json!("lots");
        assert_eq!(
            problems(&o),
            ["zones[0].resources[0].available: Invalid value: \"lots\": must be a quantity such as 8, 500m or 1Gi"]
        );
        o["zones"][0]["resources"][0]["available"] = json!(2.5);
        assert_eq!(
            problems(&o),
            ["zones[0].resources[0].available: Invalid value: 2.5: must be of type integer or string, not number"]
        );
    }

    #[test]
    fn crd_zones_that_are_an_object_are_rejected() {
        let mut o = example();
        o["zones"] = json!({"node-0": {"type": "Node"}});
        assert_eq!(
            problems(&o),
            ["zones: Invalid value: {\"node-0\": {\"type\": \"Node\"}}: must be of type array, not object"]
        );
        o.as_object_mut().unwrap().remove("zones");
        assert_eq!(problems(&o), ["zones: Required value"]);
    }

    #[test]
    fn crd_every_resource_amount_and_attribute_field_is_required() {
        let mut o = example();
        o["zones"][0]["resources"][0] = json!({"name": "cpu", "capacity": "8"});
        o["attributes"][2] = json!({"name": "nodemedic.io/stale-cpus"});
        o["zones"][1]["costs"] = json!([{"name": "node-0", "value": "20"}]);
        assert_eq!(
            problems(&o),
            [
                "attributes[2].value: Required value",
                "zones[0].resources[0].allocatable: Required value",
                "zones[0].resources[0].available: Required value",
                "zones[1].costs[0].value: Invalid value: \"20\": must be of type integer, not string",
            ]
        );
    }

    #[test]
    fn crd_type_meta_name_and_unknown_fields() {
        let mut o = example();
        o["apiVersion"] = json!("topology.node.k8s.io/v1alpha1");
        o["kind"] = json!("NodeResourceTopologies");
        o["metadata"]["name"] = json!("Worker_1");
        o["zones"][0]["resources"][0]["avialable"] = json!("3");
        assert_eq!(
            problems(&o),
            [
                "apiVersion: Invalid value: \"topology.node.k8s.io/v1alpha1\": must be topology.node.k8s.io/v1alpha2",
                "kind: Invalid value: \"NodeResourceTopologies\": must be NodeResourceTopology",
                "metadata.name: Invalid value: \"Worker_1\": must be a lowercase RFC 1123 subdomain of at most 253 characters",
                "zones[0].resources[0].avialable: unknown field (the API server would prune it)",
            ]
        );
        let mut o = example();
        o["metadata"].as_object_mut().unwrap().remove("name");
        assert_eq!(
            problems(&o),
            ["metadata.name: Required value: name or generateName is required"]
        );
    }

    #[test]
    fn crd_a_version_the_crd_does_not_serve_cannot_be_checked() {
        let e = validate(&node_resource_topology_crd(), "v1", &example()).unwrap_err();
        assert!(e.contains("the CRD serves no version v1"), "{e}");
    }

    /// The CRD itself is a valid apiextensions.k8s.io/v1 object, with the names upstream's has.
    #[test]
    fn crd_the_definition_is_valid_and_named_as_upstream() {
        let text = std::fs::read_to_string(node_resource_topology_crd()).unwrap();
        crate::manifests::validate(&text, "noderesourcetopologies-crd");
        let crd = crate::manifests::yaml_docs(&text).remove(0);
        assert_eq!(crd["metadata"]["name"], "noderesourcetopologies.topology.node.k8s.io");
        assert_eq!(
            crd["spec"]["names"],
            json!({"kind": "NodeResourceTopology", "listKind": "NodeResourceTopologyList",
                   "plural": "noderesourcetopologies", "singular": "noderesourcetopology",
                   "shortNames": ["node-res-topo"]})
        );
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let versions = crd["spec"]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1);
        assert_eq!(
            (&versions[0]["name"], &versions[0]["served"], &versions[0]["storage"]),
            (&json!("v1alpha2"), &json!(true), &json!(true))
        );
        assert_eq!(versions[0]["schema"]["openAPIV3Schema"]["required"], json!(["zones"]));
    }
}
