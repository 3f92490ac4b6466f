//! The ValidatingAdmissionPolicies of `daemonset/`, evaluated: each rendered variant's policy
//! (kustomize output, validated with `kubernetes-validate --strict`) is run against admission
//! requests built as the API server builds them, and its decision asserted. The expressions are
//! evaluated by cel-rust (the `cel` crate), not compared as strings.
//!
//! - `nodemedic-own-node-writes` (base/node-writes-own-node.yaml): the agent's ServiceAccount
//!   patches the status of its own Node only, the Node its token is bound to; with
//!   components/node-resource-topology it creates, updates and deletes only its own node's
//!   NodeResourceTopology; a token that names no node is refused, unless
//!   components/writes-without-node-name is taken.
//! - `nodemedic-probe-dry-run-only` (base/probe-dry-run-only.yaml): the agent's pod creates are
//!   dry runs.
//!
//! How the requests are built (staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/filter.go,
//! `CreateAdmissionRequest`, then `runtime.DefaultUnstructuredConverter.ToUnstructured`): the
//! `admission/v1` AdmissionRequest without `uid`, `object` and `oldObject`, its empty
//! `omitempty` fields left out. So a cluster-scoped request has no `namespace`, a request on
//! the main resource no `subResource`, a user without extra no `userInfo.extra` (the API server
//! makes an empty map, which the converter drops), and `dryRun` is always there. A PATCH is an
//! UPDATE. `object` and `oldObject` are the objects themselves (null where there is none: the
//! old object of a CREATE, the object of a DELETE). The service-account user is what
//! staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go makes of a token:
//! `system:serviceaccount:<ns>:<name>`, its groups, and the extra of a pod-bound token
//! (`authentication.kubernetes.io/pod-name`, `pod-uid`, `credential-id`, and `node-name`,
//! `node-uid` where ServiceAccountTokenPodNodeInfo put the node in it).
//!
//! Where this evaluation differs from Kubernetes', and what that means for the policies:
//! - Kubernetes compiles each expression with cel-go, type-checks it against the request's
//!   declared type (`request.userInfo.extra` is `map(string, list(string))`; `object` and
//!   `oldObject` are `dyn`) and refuses a policy that does not check; cel-rust has no checker.
//!   The policies therefore use only the CEL standard library (`has`, `in`, `size`, `matches`,
//!   `?:`, `+` on strings, indexing), whose types check by construction; Kubernetes' extension
//!   libraries (strings' `split`, lists, `quantity`, `ip`, `authorizer`, ...) are not in cel-rust,
//!   and an expression that used one would fail here as an undeclared reference, never pass.
//! - A missing map key or object field is an error in both (no zero value), which is why the
//!   policies guard `has(request.userInfo.extra)` before `'...' in request.userInfo.extra`, and
//!   why the requests here leave out what the API server leaves out. `has()` selects a field,
//!   so a key that is not an identifier (`authentication.kubernetes.io/node-name`) is tested
//!   with `in`; its value is a list of strings, never a string.
//! - Kubernetes evaluates `variables` lazily and once; here each is evaluated in order before
//!   the validations, and one that fails is left out of `variables`, so an expression that reads
//!   it fails as it would in Kubernetes.
//! - Runtime cost limits are not modelled (the expressions are constant-size).
//!
//! Each test also checks that every match condition and validation of its policy was seen both
//! true and false across its cases, so no expression goes untested.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use nodemedic_tests::manifests::{daemonset_dir, kustomize, render_with_components, validate, yaml_docs};

// ------------------------------------------------------------------------------- rendering

/// The documents of the base plus `components` (names under daemonset/components/), after
/// checking the rendering with kubernetes-validate.
fn render(components: &[&str]) -> Vec<Value> {
    let rendered = if components.is_empty() {
        kustomize(&daemonset_dir().join("base"))
    } else {
        render_with_components(components)
    };
    let what = if components.is_empty() {
        "admission-base".to_string()
    } else {
        format!("admission-{}", components.join("+").replace('/', "-"))
    };
    validate(&rendered, &what);
    yaml_docs(&rendered)
}

/// The policy `name` of `docs`, after checking that its binding denies (not only warns or
/// audits) and binds it to every request it matches.
fn policy(docs: &[Value], name: &str) -> Value {
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
            .clone()
    };
    let binding = find("ValidatingAdmissionPolicyBinding");
    assert_eq!(
        binding["spec"],
        json!({"policyName": name, "validationActions": ["Deny"]}),
        "the binding of {name}: Deny, no paramRef, no matchResources narrowing it"
    );
    let policy = find("ValidatingAdmissionPolicy");
    assert_eq!(
        policy["spec"]["failurePolicy"], "Fail",
        "{name}: an expression that fails must refuse, not admit"
    );
    assert!(policy["spec"]["paramKind"].is_null(), "{name} takes no parameters");
    policy
}

// -------------------------------------------------------------------------------- requests

/// The user an authenticated request carries.
#[derive(Clone, Debug)]
struct User {
    username: String,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
}

const NODE_NAME: &str = "authentication.kubernetes.io/node-name";

/// The ServiceAccount `namespace/name` with the token the kubelet projects into its pod on
/// `node`: bound to the pod, with the node in it when `node` is `Some` (the API server's
/// ServiceAccountTokenPodNodeInfo gate; without it the token names the pod only).
fn pod_token(namespace: &str, name: &str, node: Option<&str>) -> User {
    let mut extra = BTreeMap::from([
        (
            "authentication.kubernetes.io/credential-id".to_string(),
            vec!["JTI=0b3c2f0e-5a57-4d1e-9a70-2f7e3e0d8c11".to_string()],
        ),
        (
            "authentication.kubernetes.io/pod-name".to_string(),
            vec![format!("{name}-x7k2p")],
        ),
        (
            "authentication.kubernetes.io/pod-uid".to_string(),
            vec!["3f1d7c9e-2b4a-4e8f-9c61-0d5a7b2e4f10".to_string()],
        ),
    ]);
    if let Some(node) = node {
        extra.insert(NODE_NAME.to_string(), vec![node.to_string()]);
        extra.insert(
            "authentication.kubernetes.io/node-uid".to_string(),
            vec![format!("uid-of-{node}")],
        );
    }
    User {
        extra,
        ..legacy_token(namespace, name)
    }
}

/// The ServiceAccount `namespace/name` with a token bound to no pod (a legacy Secret token):
/// no extra at all.
fn legacy_token(namespace: &str, name: &str) -> User {
    User {
        username: format!("system:serviceaccount:{namespace}:{name}"),
        groups: vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".to_string(),
        ],
        extra: BTreeMap::new(),
    }
}

/// The agent on `node`, installed in the namespace `nodemedic`.
fn agent_on(node: &str) -> User {
    pod_token("nodemedic", "nodemedic", Some(node))
}

/// A kubelet.
fn kubelet(node: &str) -> User {
    User {
        username: format!("system:node:{node}"),
        groups: vec!["system:nodes".to_string(), "system:authenticated".to_string()],
        extra: BTreeMap::new(),
    }
}

/// One request as admission sees it.
#[derive(Clone, Debug)]
struct Request {
    user: User,
    operation: &'static str,
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    subresource: &'static str,
    kind: &'static str,
    name: String,
    namespace: String,
    dry_run: bool,
    object: Value,
    old_object: Value,
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-of-{name}")},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// `user` patches `nodes/<name>/status` (the agent's strategic merge patch of its conditions).
fn patch_node_status(user: &User, name: &str) -> Request {
    let mut patched = node(name);
    patched["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "CPUManagerStateStale", "status": "False", "reason": "NoStaleEntries"}));
    Request {
        user: user.clone(),
        operation: "UPDATE",
        group: "",
        version: "v1",
        resource: "nodes",
        subresource: "status",
        kind: "Node",
        name: name.to_string(),
        namespace: String::new(),
        dry_run: false,
        object: patched,
        old_object: node(name),
    }
}

fn topology(name: &str) -> Value {
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "nodemedic"}},
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
        "zones": [{"name": "node-0", "type": "Node", "resources": [
            {"name": "cpu", "capacity": "16", "allocatable": "14", "available": "6"}]}],
    })
}

/// `user` writes the NodeResourceTopology `name`: `CREATE`, `UPDATE` or `DELETE`.
fn write_topology(user: &User, operation: &'static str, name: &str) -> Request {
    let (object, old_object) = match operation {
        "CREATE" => (topology(name), Value::Null),
        "UPDATE" => (topology(name), topology(name)),
        "DELETE" => (Value::Null, topology(name)),
        other => panic!("no such operation {other}"),
    };
    Request {
        user: user.clone(),
        operation,
        group: "topology.node.k8s.io",
        version: "v1alpha2",
        resource: "noderesourcetopologies",
        subresource: "",
        kind: "NodeResourceTopology",
        name: name.to_string(),
        namespace: String::new(),
        dry_run: false,
        object,
        old_object,
    }
}

/// `user` creates a pod in `namespace`, as a dry run or for real (the API probe's pod).
fn create_pod(user: &User, namespace: &str, dry_run: bool) -> Request {
    Request {
        user: user.clone(),
        operation: "CREATE",
        group: "",
        version: "v1",
        resource: "pods",
        subresource: "",
        kind: "Pod",
        name: "nodemedic-probe-4f2a".to_string(),
        namespace: namespace.to_string(),
        dry_run,
        object: json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "nodemedic-probe-4f2a", "namespace": namespace},
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
        }),
        old_object: Value::Null,
    }
}

/// The `request` variable: the AdmissionRequest as the API server converts it for CEL.
fn request_variable(r: &Request) -> Value {
    let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let gvr = json!({"group": r.group, "version": r.version, "resource": r.resource});
    let options = match r.operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut user = json!({"username": r.user.username, "groups": r.user.groups});
    if !r.user.extra.is_empty() {
        user["extra"] = json!(r.user.extra);
    }
    let mut request = json!({
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": r.name,
        "operation": r.operation,
        "userInfo": user,
        "dryRun": r.dry_run,
        "options": {"kind": options, "apiVersion": "meta.k8s.io/v1"},
    });
    if !r.subresource.is_empty() {
        request["subResource"] = json!(r.subresource);
        request["requestSubResource"] = json!(r.subresource);
    }
    if !r.namespace.is_empty() {
        request["namespace"] = json!(r.namespace);
    }
    request
}

// ------------------------------------------------------------------------------ evaluation

/// What the policy does with a request.
#[derive(Debug, PartialEq)]
enum Decision {
    /// Not matched (by its resource rules or a match condition): the policy says nothing.
    NotMatched,
    Allowed,
    /// Refused, with the message of each failed validation (or the error, under
    /// `failurePolicy: Fail`).
    Denied(Vec<String>),
}

/// Evaluates policies' expressions with cel-rust, and records what each expression evaluated
/// to (`true`, `false`, `value` for a variable, `error`).
struct Evaluator {
    env: Arc<cel::Env>,
    seen: BTreeMap<String, BTreeSet<&'static str>>,
}

impl Evaluator {
    fn new() -> Self {
        Evaluator {
            env: Arc::new(cel::Env::stdlib()),
            seen: BTreeMap::new(),
        }
    }

    fn eval(
        &self,
        expression: &str,
        r: &Request,
        variables: &HashMap<String, cel::Value>,
    ) -> Result<cel::Value, String> {
        let program = self
            .env
            .compile(expression)
            .unwrap_or_else(|e| panic!("the policy's expression does not parse: {expression}: {e}"));
        let mut ctx = cel::Context::with_env(self.env.clone());
        ctx.add_variable("request", request_variable(r)).unwrap();
        ctx.add_variable("object", &r.object).unwrap();
        ctx.add_variable("oldObject", &r.old_object).unwrap();
        ctx.add_variable_from_value("variables", variables.clone());
        let value = program.execute(&ctx).map_err(|e| format!("{e:?}"));
        if let Err(e) = &value {
            // Kubernetes' own functions are not here: a policy must not depend on them.
            assert!(
                !e.contains("UndeclaredReference"),
                "{expression}: {e}: a function cel-rust lacks (a Kubernetes extension?)"
            );
        }
        value
    }

    fn record(&mut self, expression: &str, outcome: &'static str) {
        self.seen.entry(expression.to_string()).or_default().insert(outcome);
    }

    fn predicate(
        &mut self,
        expression: &str,
        r: &Request,
        variables: &HashMap<String, cel::Value>,
    ) -> Result<bool, String> {
        let outcome = match self.eval(expression, r, variables) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => panic!("{expression} evaluated to {other:?}, not a bool"),
            Err(e) => Err(e),
        };
        self.record(
            expression,
            match outcome {
                Ok(true) => "true",
                Ok(false) => "false",
                Err(_) => "error",
            },
        );
        outcome
    }

    /// The decision of `policy` on `r`, as the API server's validating admission policy
    /// plugin makes it: resource rules, then match conditions (any false: not matched; else
    /// any error: the failure policy), then the variables, then every validation.
    fn admit(&mut self, policy: &Value, r: &Request) -> Decision {
        let spec = &policy["spec"];
        let rules = spec["matchConstraints"]["resourceRules"].as_array().unwrap();
        if !rules.iter().any(|rule| rule_matches(rule, r)) {
            return Decision::NotMatched;
        }
        let none = HashMap::new();
        let mut condition_errors = vec![];
        for condition in spec["matchConditions"].as_array().into_iter().flatten() {
            let expression = condition["expression"].as_str().unwrap();
            match self.predicate(expression, r, &none) {
                Ok(false) => return Decision::NotMatched,
                Ok(true) => {}
                Err(e) => condition_errors.push(format!("match condition {expression}: {e}")),
            }
        }
        let fail = spec["failurePolicy"] == "Fail";
        if !condition_errors.is_empty() {
            return if fail {
                Decision::Denied(condition_errors)
            } else {
                Decision::Allowed
            };
        }
        let mut variables = HashMap::new();
        for variable in spec["variables"].as_array().into_iter().flatten() {
            let expression = variable["expression"].as_str().unwrap();
            if let Ok(value) = self.eval(expression, r, &variables) {
                self.record(expression, "value");
                variables.insert(variable["name"].as_str().unwrap().to_string(), value);
            } else {
                self.record(expression, "error");
            }
        }
        let mut refusals = vec![];
        for validation in spec["validations"].as_array().unwrap() {
            let expression = validation["expression"].as_str().unwrap();
            match self.predicate(expression, r, &variables) {
                Ok(true) => {}
                Ok(false) => {
                    assert_eq!(validation["reason"], "Forbidden", "{expression}: a refusal is a 403");
                    refusals.push(self.message(validation, r, &variables));
                }
                Err(e) if fail => refusals.push(format!("{expression}: {e}")),
                Err(_) => {}
            }
        }
        if refusals.is_empty() {
            Decision::Allowed
        } else {
            Decision::Denied(refusals)
        }
    }

    /// A failed validation's message: `messageExpression` when it gives a non-empty string
    /// on one line, else `message`, else the expression.
    fn message(&mut self, validation: &Value, r: &Request, variables: &HashMap<String, cel::Value>) -> String {
        if let Some(expression) = validation["messageExpression"].as_str() {
            match self.eval(expression, r, variables) {
                Ok(cel::Value::String(s)) if !s.is_empty() && !s.contains('\n') => {
                    self.record(expression, "value");
                    return s.to_string();
                }
                other => panic!("messageExpression {expression} gave {other:?}"),
            }
        }
        validation["message"]
            .as_str()
            .or(validation["expression"].as_str())
            .unwrap()
            .to_string()
    }

    /// Every match condition and validation of `policy` was seen true and false, and every
    /// variable evaluated.
    fn assert_covered(&self, policy: &Value) {
        let spec = &policy["spec"];
        for (field, wanted) in [
            ("matchConditions", &["true", "false"][..]),
            ("validations", &["true", "false"][..]),
            ("variables", &["value"][..]),
        ] {
            for item in spec[field].as_array().into_iter().flatten() {
                let expression = item["expression"].as_str().unwrap();
                let seen = self.seen.get(expression).cloned().unwrap_or_default();
                for w in wanted {
                    assert!(
                        seen.contains(w),
                        "{}: {field} `{expression}` never evaluated to {w} (seen: {seen:?})",
                        policy["metadata"]["name"]
                    );
                }
            }
        }
    }
}

/// Whether a resource rule of `matchConstraints` matches `r` ("*" for every group, version or
/// operation; a resource as `resource` or `resource/subresource`).
fn rule_matches(rule: &Value, r: &Request) -> bool {
    let has = |field: &str, value: &str| rule[field].as_array().unwrap().iter().any(|v| v == "*" || v == value);
    let resource = if r.subresource.is_empty() {
        r.resource.to_string()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let resources: Vec<&str> = rule["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let resource_matches = resources.iter().any(|&res| {
        res == resource
            || (res == "*" && r.subresource.is_empty())
            || res == "*/*"
            || res == format!("{}/*", r.resource)
    });
    has("apiGroups", r.group) && has("apiVersions", r.version) && has("operations", r.operation) && resource_matches
}

fn assert_denied(decision: &Decision, says: &str) {
    match decision {
        Decision::Denied(messages) => assert!(
            messages.iter().any(|m| m.contains(says)),
            "denied, but no message says {says:?}: {messages:?}"
        ),
        other => panic!("expected a refusal that says {says:?}, got {other:?}"),
    }
}

// ----------------------------------------------------------------------------- the tests

/// The base: the agent patches its own Node's status and no other; a token that names no node
/// (the gate off, or a token bound to no pod) is refused; other users, the agent's other
/// writes and other resources are not matched; another namespace's nodemedic ServiceAccount is
/// held to its own node too.
#[test]
fn the_agent_patches_only_its_own_nodes_status() {
    let docs = render(&[]);
    let policy = policy(&docs, "nodemedic-own-node-writes");
    let mut cel = Evaluator::new();
    let on_1 = agent_on("worker-1");

    assert_eq!(
        cel.admit(&policy, &patch_node_status(&on_1, "worker-1")),
        Decision::Allowed
    );
    let other = cel.admit(&policy, &patch_node_status(&on_1, "worker-2"));
    assert_denied(
        &other,
        "the nodemedic service account of node worker-1 may write only the objects of that node, not nodes/worker-2",
    );
    // A dry run is judged like the write it simulates.
    let mut dry = patch_node_status(&on_1, "worker-2");
    dry.dry_run = true;
    assert_denied(&cel.admit(&policy, &dry), "not nodes/worker-2");

    // No node in the token: refused, whether the token names its pod (the gate off) or
    // nothing (bound to no pod: no extra at all, which must not be an error either).
    for user in [
        pod_token("nodemedic", "nodemedic", None),
        legacy_token("nodemedic", "nodemedic"),
    ] {
        for target in ["worker-1", "worker-2"] {
            let decision = cel.admit(&policy, &patch_node_status(&user, target));
            assert_denied(&decision, "its token names no node");
            let Decision::Denied(messages) = &decision else {
                unreachable!()
            };
            assert_eq!(messages.len(), 1, "one refusal, no expression error: {messages:?}");
        }
    }

    // Another namespace's nodemedic: the same rule (cluster-scoped writes carry no namespace).
    let elsewhere = pod_token("monitoring", "nodemedic", Some("worker-3"));
    assert_eq!(
        cel.admit(&policy, &patch_node_status(&elsewhere, "worker-3")),
        Decision::Allowed
    );
    assert_denied(
        &cel.admit(&policy, &patch_node_status(&elsewhere, "worker-2")),
        "node worker-3",
    );

    // Not the agent: not matched, whatever node they write.
    for user in [
        pod_token("nodemedic", "default", Some("worker-1")),
        pod_token("nodemedic", "nodemedic-exporter", Some("worker-1")),
        pod_token("kube-system", "node-problem-detector", Some("worker-1")),
        legacy_token("kube-system", "node-controller"),
        kubelet("worker-2"),
        User {
            username: "kubernetes-admin".to_string(),
            groups: vec!["kubeadm:cluster-admins".to_string(), "system:authenticated".to_string()],
            extra: BTreeMap::new(),
        },
    ] {
        assert_eq!(
            cel.admit(&policy, &patch_node_status(&user, "worker-2")),
            Decision::NotMatched,
            "{}",
            user.username
        );
    }

    // Only nodes/status: the Node itself (the agent has no RBAC for it) and the base's
    // NodeResourceTopology writes are other policies' and RBAC's business.
    let mut whole_node = patch_node_status(&on_1, "worker-2");
    whole_node.subresource = "";
    assert_eq!(cel.admit(&policy, &whole_node), Decision::NotMatched);
    assert_eq!(
        cel.admit(&policy, &write_topology(&on_1, "CREATE", "worker-2")),
        Decision::NotMatched,
        "the base matches no NodeResourceTopology: components/node-resource-topology adds them"
    );
    cel.assert_covered(&policy);
}

/// components/node-resource-topology: the same policy covers the agent's NodeResourceTopology
/// create, update and delete (the old object's name), in any version of the resource.
#[test]
fn the_agent_writes_only_its_own_nodes_resource_topology() {
    let docs = render(&["node-resource-topology"]);
    let policy = policy(&docs, "nodemedic-own-node-writes");
    let mut cel = Evaluator::new();
    let on_1 = agent_on("worker-1");
    for operation in ["CREATE", "UPDATE", "DELETE"] {
        assert_eq!(
            cel.admit(&policy, &write_topology(&on_1, operation, "worker-1")),
            Decision::Allowed,
            "{operation}"
        );
        assert_denied(
            &cel.admit(&policy, &write_topology(&on_1, operation, "worker-2")),
            "of node worker-1 may write only the objects of that node, not noderesourcetopologies/worker-2",
        );
        assert_denied(
            &cel.admit(
                &policy,
                &write_topology(&pod_token("nodemedic", "nodemedic", None), operation, "worker-1"),
            ),
            "its token names no node",
        );
        assert_eq!(
            cel.admit(
                &policy,
                &write_topology(
                    &pod_token("node-feature-discovery", "nfd-topology-updater", Some("worker-1")),
                    operation,
                    "worker-2"
                )
            ),
            Decision::NotMatched,
            "node-feature-discovery's topology-updater is not the agent"
        );
    }
    // Another served version of the resource is matched too.
    let mut old_version = write_topology(&on_1, "UPDATE", "worker-2");
    old_version.version = "v1alpha1";
    old_version.object["apiVersion"] = json!("topology.node.k8s.io/v1alpha1");
    assert_denied(&cel.admit(&policy, &old_version), "not noderesourcetopologies/worker-2");
    // And the node status rule is still there.
    assert_eq!(
        cel.admit(&policy, &patch_node_status(&on_1, "worker-1")),
        Decision::Allowed
    );
    assert_denied(
        &cel.admit(&policy, &patch_node_status(&on_1, "worker-2")),
        "not nodes/worker-2",
    );
    assert_eq!(
        cel.admit(&policy, &patch_node_status(&kubelet("worker-2"), "worker-2")),
        Decision::NotMatched
    );
    cel.assert_covered(&policy);
}

/// components/writes-without-node-name: a token that names no node writes as before the policy
/// (any node: the documented exposure); a token that names one is still held to it. With
/// components/node-resource-topology, in either order, the same for its objects.
#[test]
fn writes_without_node_name_lets_only_tokens_without_a_node_through() {
    for components in [
        &["writes-without-node-name"][..],
        &["writes-without-node-name", "node-resource-topology"][..],
        &["node-resource-topology", "writes-without-node-name"][..],
    ] {
        let docs = render(components);
        let policy = policy(&docs, "nodemedic-own-node-writes");
        let mut cel = Evaluator::new();
        let on_1 = agent_on("worker-1");
        for user in [
            pod_token("nodemedic", "nodemedic", None),
            legacy_token("nodemedic", "nodemedic"),
        ] {
            assert_eq!(
                cel.admit(&policy, &patch_node_status(&user, "worker-2")),
                Decision::NotMatched,
                "{components:?}"
            );
        }
        assert_eq!(
            cel.admit(&policy, &patch_node_status(&on_1, "worker-1")),
            Decision::Allowed
        );
        assert_denied(
            &cel.admit(&policy, &patch_node_status(&on_1, "worker-2")),
            "not nodes/worker-2",
        );
        assert_eq!(
            cel.admit(&policy, &patch_node_status(&kubelet("worker-2"), "worker-2")),
            Decision::NotMatched
        );
        let topology_writes = components.contains(&"node-resource-topology");
        let unbound = pod_token("nodemedic", "nodemedic", None);
        let topology = cel.admit(&policy, &write_topology(&unbound, "CREATE", "worker-2"));
        assert_eq!(topology, Decision::NotMatched, "{components:?}");
        let held = cel.admit(&policy, &write_topology(&on_1, "UPDATE", "worker-2"));
        if topology_writes {
            assert_denied(&held, "not noderesourcetopologies/worker-2");
        } else {
            assert_eq!(held, Decision::NotMatched);
        }
        // The claim's validation now always holds; the node comparison is what refuses.
        let spec = &policy["spec"];
        let conditions = spec["matchConditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2, "{conditions:?}");
        for condition in conditions {
            let e = condition["expression"].as_str().unwrap();
            let seen = cel.seen.get(e).cloned().unwrap_or_default();
            assert!(seen.contains("true") && seen.contains("false"), "{e}: {seen:?}");
        }
    }
}

/// The base's dry-run policy: the agent's pod create in its own namespace passes as a dry run
/// and is refused for real; other users and the agent's creates in other namespaces (which its
/// Role does not grant) are not matched; another namespace's nodemedic ServiceAccount is held
/// to dry runs in its own namespace.
#[test]
fn the_agents_pod_creates_are_dry_runs_only() {
    let docs = render(&[]);
    let policy = policy(&docs, "nodemedic-probe-dry-run-only");
    let mut cel = Evaluator::new();
    let agent = agent_on("worker-1");

    assert_eq!(
        cel.admit(&policy, &create_pod(&agent, "nodemedic", true)),
        Decision::Allowed
    );
    assert_denied(
        &cel.admit(&policy, &create_pod(&agent, "nodemedic", false)),
        "may create pods only with dryRun=All",
    );
    // Whatever the token: the same (the dry-run rule does not need the node).
    for user in [
        pod_token("nodemedic", "nodemedic", None),
        legacy_token("nodemedic", "nodemedic"),
    ] {
        assert_eq!(
            cel.admit(&policy, &create_pod(&user, "nodemedic", true)),
            Decision::Allowed
        );
        assert_denied(
            &cel.admit(&policy, &create_pod(&user, "nodemedic", false)),
            "dryRun=All",
        );
    }
    let elsewhere = pod_token("monitoring", "nodemedic", Some("worker-1"));
    assert_denied(
        &cel.admit(&policy, &create_pod(&elsewhere, "monitoring", false)),
        "dryRun=All",
    );
    assert_eq!(
        cel.admit(&policy, &create_pod(&elsewhere, "nodemedic", false)),
        Decision::NotMatched,
        "another namespace's nodemedic creating here: RBAC's business (it has no Role here)"
    );
    for user in [
        pod_token("nodemedic", "default", Some("worker-1")),
        kubelet("worker-1"),
        pod_token("kube-system", "daemon-set-controller", None),
    ] {
        assert_eq!(
            cel.admit(&policy, &create_pod(&user, "nodemedic", false)),
            Decision::NotMatched,
            "{}",
            user.username
        );
    }
    // Not a pod create: not matched.
    assert_eq!(
        cel.admit(&policy, &patch_node_status(&agent, "worker-1")),
        Decision::NotMatched
    );
    cel.assert_covered(&policy);
}

/// The harness itself: a request is built as the API server builds it (no namespace on a
/// cluster-scoped request, no extra for a user without any, `dryRun` always), and an
/// expression that reads what is missing fails rather than reading a default, as in Kubernetes.
#[test]
fn requests_leave_out_what_the_api_server_leaves_out() {
    let r = patch_node_status(&legacy_token("nodemedic", "nodemedic"), "worker-1");
    let v = request_variable(&r);
    assert!(v.get("namespace").is_none(), "{v}");
    assert!(v["userInfo"].get("extra").is_none(), "{v}");
    assert_eq!(v["dryRun"], false);
    assert_eq!(v["subResource"], "status");
    let cel = Evaluator::new();
    let none = HashMap::new();
    assert!(cel.eval("request.namespace == ''", &r, &none).is_err());
    assert!(cel.eval("'x' in request.userInfo.extra", &r, &none).is_err());
    assert_eq!(
        cel.eval("has(request.userInfo.extra)", &r, &none),
        Ok(cel::Value::Bool(false))
    );
    let bound = patch_node_status(&agent_on("worker-1"), "worker-1");
    assert_eq!(
        cel.eval(&format!("request.userInfo.extra['{NODE_NAME}']"), &bound, &none)
            .map(|v| format!("{v:?}")),
        Ok(format!("{:?}", cel::Value::from(vec![cel::Value::from("worker-1")]))),
        "the node name is a list of one string"
    );
    assert!(
        cel.eval(
            "oldObject.metadata.name",
            &write_topology(&agent_on("w"), "CREATE", "w"),
            &none
        )
        .is_err()
    );
}
