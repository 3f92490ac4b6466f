//! The documents that describe the server rather than objects: `/version`, the legacy
//! discovery documents (`/api`, `/api/v1`, `/apis`, `/apis/<group>`, `/apis/<group>/<version>`),
//! aggregated discovery (`apidiscovery.k8s.io/v2`, which kube-rs's `Discovery::run_aggregated`
//! and kubectl ask for through the `Accept` header), and the path list at `/`.
//! All are derived from [`RESOURCES`], so they describe exactly what is served.

use serde_json::{Value, json};

use super::resources::{RESOURCES, ResourceType};

/// The `gitVersion` the double reports.
pub const GIT_VERSION: &str = "v1.33.4";

/// `version.Info` of a v1.33 API server.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": "74cdb426ddb5b1ca3e5b4c6bbe3b5c5e6f3fa2a2",
        "gitTreeState": "clean",
        "buildDate": "2025-08-12T10:24:56Z",
        "goVersion": "go1.24.5",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// Every served resource supports every verb.
const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The groups other than core, in discovery order, with their one version.
fn groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

fn group_version(g: &str, v: &str) -> Value {
    json!({ "groupVersion": format!("{g}/{v}"), "version": v })
}

/// `/api`: `APIVersions`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }]
    })
}

/// `/apis`: `APIGroupList`.
pub(crate) fn group_list() -> Value {
    let groups: Vec<Value> = groups().into_iter().map(|(g, v)| group(g, v)).collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

fn group(g: &str, v: &str) -> Value {
    json!({
        "name": g,
        "versions": [group_version(g, v)],
        "preferredVersion": group_version(g, v)
    })
}

/// `/apis/<group>`: `APIGroup`, or `None` for a group not served.
pub(crate) fn api_group(name: &str) -> Option<Value> {
    let (g, v) = groups().into_iter().find(|(g, _)| *g == name)?;
    let mut doc = group(g, v);
    if let Some(m) = doc.as_object_mut() {
        m.insert("kind".into(), "APIGroup".into());
        m.insert("apiVersion".into(), "v1".into());
    }
    Some(doc)
}

/// `/api/v1` or `/apis/<group>/<version>`: `APIResourceList`, or `None` if not served.
pub(crate) fn resource_list(group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for rt in types {
        let mut entry = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
        });
        if !rt.short_names.is_empty() {
            entry["shortNames"] = json!(rt.short_names);
        }
        if rt.plural == "pods" {
            entry["categories"] = json!(["all"]);
        }
        resources.push(entry);
        if rt.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources }))
}

fn aggregated_group(group: &str, version: &str) -> Value {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .map(|rt| {
            let kind = json!({ "group": rt.group, "version": rt.version, "kind": rt.kind });
            let mut entry = json!({
                "resource": rt.plural,
                "responseKind": kind,
                "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
                "singularResource": rt.singular,
                "verbs": VERBS,
            });
            if !rt.short_names.is_empty() {
                entry["shortNames"] = json!(rt.short_names);
            }
            if rt.status_subresource {
                entry["subresources"] = json!([{
                    "subresource": "status",
                    "responseKind": kind,
                    "verbs": ["get", "patch", "update"]
                }]);
            }
            entry
        })
        .collect();
    let mut metadata = json!({ "creationTimestamp": null });
    if !group.is_empty() {
        metadata["name"] = group.into();
    }
    json!({
        "metadata": metadata,
        "versions": [{ "version": version, "resources": resources, "freshness": "Current" }]
    })
}

/// Aggregated discovery of `/api` (core only) or `/apis` (every other group).
pub(crate) fn aggregated(core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group("", "v1")]
    } else {
        groups().into_iter().map(|(g, v)| aggregated_group(g, v)).collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items
    })
}

/// The content type of an aggregated discovery answer.
pub(crate) const AGGREGATED_CONTENT_TYPE: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header prefers aggregated discovery (it lists it before plain JSON).
pub(crate) fn wants_aggregated(accept: &str) -> bool {
    let first = accept.split(',').next().unwrap_or("");
    first.contains("as=APIGroupDiscoveryList") && first.contains("g=apidiscovery.k8s.io")
}

/// `/`: the paths served.
pub(crate) fn root_paths() -> Value {
    let mut paths = vec!["/api".to_string(), "/api/v1".to_string(), "/apis".to_string()];
    for (g, v) in groups() {
        paths.push(format!("/apis/{g}"));
        paths.push(format!("/apis/{g}/{v}"));
    }
    for p in ["/healthz", "/livez", "/metrics", "/readyz", "/version"] {
        paths.push(p.to_string());
    }
    json!({ "paths": paths })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_describe_the_table() {
        let core = resource_list("", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods") && names.contains(&"nodes/status") && names.contains(&"events"));
        assert!(names.contains(&"configmaps") && !names.contains(&"configmaps/status"));
        assert_eq!(core["groupVersion"], "v1");
        let groups = group_list();
        assert_eq!(groups["groups"][0]["name"], "events.k8s.io");
        assert!(api_group("events.k8s.io").is_some());
        assert!(api_group("apps").is_none());
        assert!(resource_list("apps", "v1").is_none());
        let agg = aggregated(false);
        assert_eq!(agg["items"][1]["metadata"]["name"], "admissionregistration.k8s.io");
        assert_eq!(agg["items"][2]["metadata"]["name"], "coordination.k8s.io");
        let leases = &agg["items"][2]["versions"][0]["resources"][0];
        assert_eq!(
            (&leases["resource"], &leases["scope"], leases.get("subresources")),
            (&json!("leases"), &json!("Namespaced"), None)
        );
        let coordination = resource_list("coordination.k8s.io", "v1").unwrap();
        assert_eq!(coordination["resources"].as_array().unwrap().len(), 1);
        // A CRD's group is listed like any other, after the built-in ones.
        assert_eq!(groups["groups"][3]["name"], "sparkoperator.k8s.io");
        assert_eq!(
            groups["groups"][3]["preferredVersion"]["groupVersion"],
            "sparkoperator.k8s.io/v1beta2"
        );
        let spark = resource_list("sparkoperator.k8s.io", "v1beta2").unwrap();
        let spark_names: Vec<&str> = spark["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(spark_names, ["sparkapplications", "sparkapplications/status"]);
        assert_eq!(spark["resources"][0]["shortNames"], json!(["sparkapp"]));
        let spark_agg = &agg["items"][3];
        assert_eq!(spark_agg["metadata"]["name"], "sparkoperator.k8s.io");
        assert_eq!(
            spark_agg["versions"][0]["resources"][0]["subresources"][0]["subresource"],
            "status"
        );
        assert!(
            root_paths()["paths"]
                .as_array()
                .unwrap()
                .contains(&json!("/apis/sparkoperator.k8s.io/v1beta2"))
        );
        // NodeResourceTopologies: a cluster-scoped CRD without subresources.
        assert_eq!(groups["groups"][4]["name"], "topology.node.k8s.io");
        let nrt = resource_list("topology.node.k8s.io", "v1alpha2").unwrap();
        assert_eq!(
            nrt["resources"],
            json!([{"name": "noderesourcetopologies", "singularName": "noderesourcetopology",
                    "namespaced": false, "kind": "NodeResourceTopology", "verbs": VERBS,
                    "shortNames": ["node-res-topo"]}])
        );
        let nrt_agg = &agg["items"][4];
        assert_eq!(nrt_agg["metadata"]["name"], "topology.node.k8s.io");
        let entry = &nrt_agg["versions"][0]["resources"][0];
        assert_eq!(
            (&entry["resource"], &entry["scope"], entry.get("subresources")),
            (&json!("noderesourcetopologies"), &json!("Cluster"), None)
        );
        assert!(
            root_paths()["paths"]
                .as_array()
                .unwrap()
                .contains(&json!("/apis/topology.node.k8s.io/v1alpha2"))
        );
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!wants_aggregated("application/json"));
    }
}
