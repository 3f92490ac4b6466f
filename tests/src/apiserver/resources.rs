//! The resource types the double serves, and what is particular to each: where it lives in
//! the URL space, its kind, whether it is namespaced, which field selectors it supports, its
//! defaults and validation on create, and how the two Event APIs share one storage.
//!
//! Objects are stored in the shape of their *storage* type. Core `v1` Events and
//! `events.k8s.io/v1` Events are the same objects in a real cluster; here they are stored in
//! the core shape and renamed field by field on the way in and out of the `events.k8s.io` API
//! (`regarding` is `involvedObject`, `note` is `message`, ...), as the API server's conversion
//! does.

use serde_json::{Map, Value, json};

use super::status::ApiError;

/// One REST resource (group, version, plural) and its behaviour.
#[derive(Debug)]
pub struct ResourceType {
    /// API group; empty for the core group (`/api/v1`).
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Objects of types with the same storage are the same objects.
    pub storage: &'static str,
    /// Has a `/status` subresource: the main resource ignores status changes and the
    /// subresource changes only status.
    pub status_subresource: bool,
    pub short_names: &'static [&'static str],
    /// Field selector labels beyond `metadata.name` (and `metadata.namespace` when namespaced).
    pub field_labels: &'static [&'static str],
    /// DELETE answers with the deleted object (pods) instead of a `Status`.
    pub delete_returns_object: bool,
    /// Served from a CustomResourceDefinition (apiextensions-apiserver `customresource`):
    /// no strategic merge patch, no unconditional PUT, a create through the API drops the
    /// status, and the `/status` subresource changes the status and nothing else.
    pub custom_resource: bool,
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingComponent",
    "reportingController",
    "source",
    "type",
];

/// Everything the double serves.
pub static RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        storage: "pods",
        status_subresource: true,
        short_names: &["po"],
        field_labels: POD_FIELDS,
        delete_returns_object: true,
        custom_resource: false,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        storage: "nodes",
        status_subresource: true,
        short_names: &["no"],
        field_labels: &["spec.unschedulable"],
        delete_returns_object: false,
        custom_resource: false,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        storage: "namespaces",
        status_subresource: true,
        short_names: &["ns"],
        field_labels: &["status.phase"],
        delete_returns_object: false,
        custom_resource: false,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        storage: "events",
        status_subresource: false,
        short_names: &["ev"],
        field_labels: EVENT_FIELDS,
        delete_returns_object: false,
        custom_resource: false,
    },
    ResourceType {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        storage: "events",
        status_subresource: false,
        short_names: &["ev"],
        field_labels: EVENT_FIELDS,
        delete_returns_object: false,
        custom_resource: false,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        storage: "configmaps",
        status_subresource: false,
        short_names: &["cm"],
        field_labels: &[],
        delete_returns_object: false,
        custom_resource: false,
    },
    // What spark-submit creates beside the driver pod: the driver's headless Service and, with
    // on-demand volumes, PersistentVolumeClaims. Both have `/status` and, like pods, answer a
    // DELETE with the deleted object (`ReturnDeletedObject` in their registries).
    ResourceType {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        storage: "services",
        status_subresource: true,
        short_names: &["svc"],
        field_labels: &[],
        delete_returns_object: true,
        custom_resource: false,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        storage: "persistentvolumeclaims",
        status_subresource: true,
        short_names: &["pvc"],
        field_labels: &[],
        delete_returns_object: true,
        custom_resource: false,
    },
    ResourceType {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "mutatingwebhookconfigurations",
        singular: "mutatingwebhookconfiguration",
        kind: "MutatingWebhookConfiguration",
        namespaced: false,
        storage: "mutatingwebhookconfigurations",
        status_subresource: false,
        short_names: &[],
        field_labels: &[],
        delete_returns_object: false,
        custom_resource: false,
    },
    ResourceType {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "validatingwebhookconfigurations",
        singular: "validatingwebhookconfiguration",
        kind: "ValidatingWebhookConfiguration",
        namespaced: false,
        storage: "validatingwebhookconfigurations",
        status_subresource: false,
        short_names: &[],
        field_labels: &[],
        delete_returns_object: false,
        custom_resource: false,
    },
    ResourceType {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        storage: "leases",
        status_subresource: false,
        short_names: &[],
        field_labels: &[],
        delete_returns_object: false,
        custom_resource: false,
    },
    // The Spark operator's CRD (kubeflow/spark-operator
    // `config/crd/bases/sparkoperator.k8s.io_sparkapplications.yaml`): one served and stored
    // version, `scope: Namespaced`, `shortNames: [sparkapp]`, `subresources: {status: {}}`, no
    // `selectableFields`. Objects are stored as given: the CRD's OpenAPI schema (for
    // `spec.restartPolicy.type` the enum Never, OnFailure, Always) is not checked.
    ResourceType {
        group: "sparkoperator.k8s.io",
        version: "v1beta2",
        plural: "sparkapplications",
        singular: "sparkapplication",
        kind: "SparkApplication",
        namespaced: true,
        storage: "sparkapplications",
        status_subresource: true,
        short_names: &["sparkapp"],
        field_labels: &[],
        delete_returns_object: false,
        custom_resource: true,
    },
    // The NodeResourceTopology CRD (k8stopologyawareschedwg/noderesourcetopology-api, as
    // node-feature-discovery and the scheduler-plugins ship it): `scope: Cluster`,
    // `shortNames: [node-res-topo]`, no subresources, no `selectableFields`; v1alpha2 only here
    // (older releases of the shipped CRDs also serve v1alpha1). Objects are stored as given:
    // the schema (tests/crds/, checked with `crate::crd::validate`) is not applied.
    ResourceType {
        group: "topology.node.k8s.io",
        version: "v1alpha2",
        plural: "noderesourcetopologies",
        singular: "noderesourcetopology",
        kind: "NodeResourceTopology",
        namespaced: false,
        storage: "noderesourcetopologies",
        status_subresource: false,
        short_names: &["node-res-topo"],
        field_labels: &[],
        delete_returns_object: false,
        custom_resource: true,
    },
    // Dynamic Resource Allocation's claims as a v1.33 API server with DRA enabled serves them:
    // `resource.k8s.io/v1beta2` (v1 is GA from 1.34; a GET there is a path this server does not
    // serve, so clients fall back as they must on 1.33). Namespaced, with a status subresource
    // (the scheduler writes `status.allocation` and `status.reservedFor`). Listed last: its
    // group comes after the others in discovery.
    ResourceType {
        group: "resource.k8s.io",
        version: "v1beta2",
        plural: "resourceclaims",
        singular: "resourceclaim",
        kind: "ResourceClaim",
        namespaced: true,
        storage: "resourceclaims",
        status_subresource: true,
        short_names: &[],
        field_labels: &[],
        delete_returns_object: true,
        custom_resource: false,
    },
];

/// Core Event field names and their `events.k8s.io/v1` names.
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Renames top-level keys in place, keeping their positions.
fn rename_keys(obj: &mut Value, from_to: impl Fn(&str) -> Option<&'static str>) {
    if let Value::Object(m) = obj {
        let old = std::mem::take(m);
        for (k, v) in old {
            match from_to(&k) {
                Some(new) => m.insert(new.to_string(), v),
                None => m.insert(k, v),
            };
        }
    }
}

/// The type serving `plural` in `group`/`version`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The type of an object with this `apiVersion` and `kind`.
pub fn find_by_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

/// A type named as `kubectl` would: plural, singular, short name or kind, optionally
/// qualified by group (`events.events.k8s.io`). Unqualified names prefer the core group.
pub fn resolve(name: &str) -> Option<&'static ResourceType> {
    let matches_name =
        |r: &ResourceType, n: &str| r.plural == n || r.singular == n || r.kind == n || r.short_names.contains(&n);
    RESOURCES.iter().find(|r| matches_name(r, name)).or_else(|| {
        RESOURCES.iter().find(|r| {
            !r.group.is_empty()
                && name
                    .strip_suffix(r.group)
                    .and_then(|n| n.strip_suffix('.'))
                    .is_some_and(|n| matches_name(r, n))
        })
    })
}

/// The type objects of `storage` are stored as.
pub fn storage_type(storage: &str) -> &'static ResourceType {
    RESOURCES.iter().find(|r| r.storage == storage).unwrap_or(&RESOURCES[0])
}

impl ResourceType {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods`, or `events.events.k8s.io` for a named group (as in error messages).
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    fn is_events_v1(&self) -> bool {
        self.group == "events.k8s.io"
    }

    /// Converts an object in this type's shape to the storage shape.
    pub fn to_storage(&self, mut obj: Value) -> Value {
        if self.is_events_v1() {
            rename_keys(&mut obj, |k| {
                EVENT_RENAMES.iter().find(|(_, ext)| *ext == k).map(|(core, _)| *core)
            });
        }
        let st = storage_type(self.storage);
        if let Value::Object(m) = &mut obj {
            set_type_meta(m, &st.api_version(), st.kind);
        }
        obj
    }

    /// Converts a stored object to this type's shape, `apiVersion` and `kind` first.
    pub fn present(&self, stored: &Value) -> Value {
        let mut obj = stored.clone();
        if self.is_events_v1() {
            rename_keys(&mut obj, |k| {
                EVENT_RENAMES.iter().find(|(core, _)| *core == k).map(|(_, ext)| *ext)
            });
        }
        if let Value::Object(m) = &mut obj {
            set_type_meta(m, &self.api_version(), self.kind);
        }
        obj
    }

    /// Whether `field` can be used in a field selector on this type.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name"
            || (self.namespaced && field == "metadata.namespace")
            || self.field_labels.contains(&field)
    }

    /// The value a field selector compares for `field` of a stored object: missing fields
    /// are `""`, booleans `"true"`/`"false"`.
    pub fn field_value(&self, stored: &Value, field: &str) -> String {
        let field = match field {
            f if f.starts_with("regarding.") => f.replacen("regarding.", "involvedObject.", 1),
            "reportingController" => "reportingComponent".to_string(),
            "source" => "source.component".to_string(),
            f => f.to_string(),
        };
        let ptr = format!("/{}", field.replace('.', "/"));
        match stored.pointer(&ptr) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => n.to_string(),
            None | Some(Value::Null) if field == "spec.hostNetwork" || field == "spec.unschedulable" => "false".into(),
            _ => String::new(),
        }
    }
}

/// Puts `apiVersion` and `kind` first, as the API server serialises them.
fn set_type_meta(m: &mut Map<String, Value>, api_version: &str, kind: &str) {
    let rest = std::mem::take(m);
    m.insert("kind".into(), kind.into());
    m.insert("apiVersion".into(), api_version.into());
    for (k, v) in rest {
        if k != "kind" && k != "apiVersion" {
            m.insert(k, v);
        }
    }
}

/// Parses a resource quantity (`500m`, `2`, `1Gi`, `1e3`) to a number for comparisons.
fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, mult) in SUFFIXES {
        if let Some(num) = q.strip_suffix(suffix) {
            return num.parse::<f64>().ok().map(|n| n * mult);
        }
    }
    q.parse::<f64>().ok()
}

fn quantity(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::String(s) => parse_quantity(s),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// The pod's QoS class as the API server computes it on create (`qos.GetPodQOS`, cpu and
/// memory only): BestEffort without any requests or limits, Guaranteed when every container
/// has cpu and memory limits equal to its requests (missing requests default to limits),
/// Burstable otherwise.
pub fn qos_class(pod: &Value) -> &'static str {
    let mut containers: Vec<&Value> = Vec::new();
    for field in ["containers", "initContainers"] {
        if let Some(list) = pod.pointer(&format!("/spec/{field}")).and_then(Value::as_array) {
            containers.extend(list);
        }
    }
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in containers {
        let requests = c.pointer("/resources/requests");
        let limits = c.pointer("/resources/limits");
        for res in ["cpu", "memory"] {
            let req = quantity(requests.and_then(|r| r.get(res)));
            let lim = quantity(limits.and_then(|l| l.get(res)));
            if req.is_some_and(|q| q > 0.0) || lim.is_some_and(|q| q > 0.0) {
                any = true;
            }
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if (r - l).abs() > f64::EPSILON * l.abs().max(1.0) => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn set_default(m: &mut Map<String, Value>, key: &str, v: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), v);
    }
}

/// The taints the DefaultTolerationSeconds admission plugin (on by default in
/// kube-apiserver) makes every pod tolerate for a while, and for how many seconds: the
/// defaults of `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds`.
pub const DEFAULT_TOLERATIONS: [(&str, u64); 2] = [
    ("node.kubernetes.io/not-ready", 300),
    ("node.kubernetes.io/unreachable", 300),
];

/// Fills what the API server fills on create. For pods created through the API the status is
/// reset to `{phase: Pending, qosClass}` (the pod strategy's `PrepareForCreate`); for objects
/// a test inserts directly (`from_api == false`) a given status is kept and only missing
/// fields are filled. Both get the spec defaults and the tolerations of
/// [`add_default_tolerations`], since direct inserts model pods that went through admission.
/// Custom resources with a `/status` subresource lose a status given to a create through the
/// API (the custom resource strategy's `PrepareForCreate`); direct inserts keep it.
pub fn apply_create_defaults(rt: &ResourceType, obj: &mut Value, from_api: bool) {
    if rt.custom_resource {
        if rt.status_subresource
            && from_api
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        return;
    }
    if rt.storage == "services" {
        service_defaults(obj, from_api);
        return;
    }
    if rt.storage == "persistentvolumeclaims" {
        if let Some(Value::Object(spec)) = obj.get_mut("spec") {
            set_default(spec, "volumeMode", "Filesystem".into());
        }
        if let Some(m) = obj.as_object_mut() {
            if from_api {
                m.insert("status".into(), json!({ "phase": "Pending" }));
            } else if let Value::Object(s) = m.entry("status").or_insert_with(|| json!({})) {
                set_default(s, "phase", "Pending".into());
            }
        }
        return;
    }
    if rt.storage != "pods" {
        if rt.storage == "namespaces" {
            let status = obj
                .as_object_mut()
                .map(|m| m.entry("status").or_insert_with(|| json!({})));
            if let Some(Value::Object(s)) = status {
                set_default(s, "phase", "Active".into());
            }
        }
        return;
    }
    if let Some(Value::Object(spec)) = obj.get_mut("spec") {
        set_default(spec, "restartPolicy", "Always".into());
        set_default(spec, "schedulerName", "default-scheduler".into());
        set_default(spec, "dnsPolicy", "ClusterFirst".into());
        set_default(spec, "terminationGracePeriodSeconds", 30.into());
        set_default(spec, "securityContext", json!({}));
        add_default_tolerations(spec);
    }
    let qos = qos_class(obj);
    let Some(m) = obj.as_object_mut() else { return };
    if from_api {
        m.insert("status".into(), json!({ "phase": "Pending", "qosClass": qos }));
    } else {
        let status = m.entry("status").or_insert_with(|| json!({}));
        if let Value::Object(s) = status {
            set_default(s, "phase", "Pending".into());
            set_default(s, "qosClass", qos.into());
        }
    }
}

/// A Service's defaults (`SetDefaults_Service` and the service registry's create): `type`
/// `ClusterIP`, `sessionAffinity` `None`, each port's `protocol` `TCP` and `targetPort` its
/// `port`; for the `ClusterIP` type `internalTrafficPolicy` `Cluster`, a single-stack IPv4
/// family, and a cluster IP (a random address of the default `10.96.0.0/12` range unless one was
/// given, `None` staying `None` for a headless service) repeated in `clusterIPs`. A create
/// through the API starts with an empty status (`{loadBalancer: {}}`). No IP is ever released
/// or checked for duplicates, and node ports are not allocated.
fn service_defaults(obj: &mut Value, from_api: bool) {
    if let Some(Value::Object(spec)) = obj.get_mut("spec") {
        set_default(spec, "type", "ClusterIP".into());
        set_default(spec, "sessionAffinity", "None".into());
        if let Some(Value::Array(ports)) = spec.get_mut("ports") {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                set_default(port, "protocol", "TCP".into());
                if let Some(p) = port.get("port").cloned() {
                    set_default(port, "targetPort", p);
                }
            }
        }
        if spec.get("type").and_then(Value::as_str) == Some("ClusterIP") {
            set_default(spec, "internalTrafficPolicy", "Cluster".into());
            let given = spec
                .get("clusterIP")
                .and_then(Value::as_str)
                .filter(|ip| !ip.is_empty());
            let ip = match given {
                Some(ip) => ip.to_string(),
                None => {
                    let r = super::util::random_u64();
                    // 10.96.0.0/12 without its network address and the API server's own .1.
                    let host = 2 + (r % ((1 << 20) - 3));
                    format!("10.{}.{}.{}", 96 + (host >> 16), (host >> 8) & 0xff, host & 0xff)
                }
            };
            spec.insert("clusterIP".into(), ip.clone().into());
            set_default(spec, "clusterIPs", json!([ip]));
            set_default(spec, "ipFamilies", json!(["IPv4"]));
            set_default(spec, "ipFamilyPolicy", "SingleStack".into());
        }
    }
    if let Some(m) = obj.as_object_mut() {
        if from_api || !m.get("status").is_some_and(Value::is_object) {
            m.insert("status".into(), json!({ "loadBalancer": {} }));
        }
    }
}

/// The DefaultTolerationSeconds admission plugin
/// (kubernetes `plugin/pkg/admission/defaulttolerationseconds/admission.go`): for each of
/// [`DEFAULT_TOLERATIONS`] that no toleration of the pod already covers, appends
/// `{key, operator: Exists, effect: NoExecute, tolerationSeconds}`. A toleration covers a
/// taint when its key is the taint's or empty, and its effect is `NoExecute` or empty; its
/// operator and `tolerationSeconds` do not matter, so a user's own `tolerationSeconds` stays.
/// A `tolerations` that is not a list is left alone.
pub fn add_default_tolerations(spec: &mut Map<String, Value>) {
    let tolerations = spec
        .entry("tolerations")
        .and_modify(|t| {
            if t.is_null() {
                *t = json!([]);
            }
        })
        .or_insert_with(|| json!([]));
    let Value::Array(list) = tolerations else { return };
    let covers = |t: &Value, taint: &str| {
        let field = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or("");
        (field("key") == taint || field("key").is_empty()) && matches!(field("effect"), "NoExecute" | "")
    };
    let missing: Vec<(&str, u64)> = DEFAULT_TOLERATIONS
        .into_iter()
        .filter(|(taint, _)| !list.iter().any(|t| covers(t, taint)))
        .collect();
    for (taint, seconds) in missing {
        list.push(json!({
            "key": taint,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": seconds,
        }));
    }
}

/// The type-specific checks of create and update that tests are likely to trip over.
pub fn validate(rt: &ResourceType, obj: &Value, name: &str) -> Result<(), ApiError> {
    if rt.storage == "leases" {
        return validate_lease(rt, obj, name);
    }
    if rt.storage == "pods" {
        let containers = obj.pointer("/spec/containers").and_then(Value::as_array);
        if containers.is_none_or(|c| c.is_empty()) {
            return Err(ApiError::invalid(
                rt,
                name,
                &[("spec.containers", "FieldValueRequired", "Required value".into())],
            ));
        }
        for (i, c) in containers.into_iter().flatten().enumerate() {
            if c.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    &[(
                        &format!("spec.containers[{i}].name"),
                        "FieldValueRequired",
                        "Required value".into(),
                    )],
                ));
            }
        }
    }
    Ok(())
}

/// `ValidateLeaseSpec`'s checks of the numbers a lease holder writes.
fn validate_lease(rt: &ResourceType, obj: &Value, name: &str) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    let checks = [
        ("leaseDurationSeconds", 1, "must be greater than 0"),
        ("leaseTransitions", 0, "must be greater than or equal to 0"),
    ];
    for (field, min, why) in checks {
        if let Some(n) = obj.pointer(&format!("/spec/{field}")).and_then(Value::as_i64)
            && n < min
        {
            causes.push((format!("spec.{field}"), format!("Invalid value: {n}: {why}")));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let causes: Vec<(&str, &str, String)> = causes
        .iter()
        .map(|(f, m)| (f.as_str(), "FieldValueInvalid", m.clone()))
        .collect();
    Err(ApiError::invalid(rt, name, &causes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_names() {
        assert_eq!(resolve("pods").unwrap().kind, "Pod");
        assert_eq!(resolve("po").unwrap().plural, "pods");
        assert_eq!(resolve("Node").unwrap().plural, "nodes");
        assert_eq!(resolve("events").unwrap().group, "");
        assert_eq!(resolve("events.events.k8s.io").unwrap().group, "events.k8s.io");
        assert_eq!(
            resolve("mutatingwebhookconfigurations.admissionregistration.k8s.io")
                .unwrap()
                .kind,
            "MutatingWebhookConfiguration"
        );
        assert!(resolve("deployments").is_none());
        assert_eq!(resolve("cm").unwrap().kind, "ConfigMap");
        assert_eq!(resolve("leases").unwrap().group, "coordination.k8s.io");
        assert_eq!(resolve("leases.coordination.k8s.io").unwrap().kind, "Lease");
        assert_eq!(
            find_by_kind("coordination.k8s.io/v1", "Lease").unwrap().plural,
            "leases"
        );
        assert_eq!(
            find_by_kind("events.k8s.io/v1", "Event").unwrap().group,
            "events.k8s.io"
        );
    }

    #[test]
    fn events_convert_both_ways() {
        let v1 = resolve("events.events.k8s.io").unwrap();
        let external = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "n1.1", "namespace": "default"},
            "regarding": {"kind": "Node", "name": "n1"}, "note": "hello", "reportingController": "nodemedic",
            "reason": "StaleCPUAssignment"});
        let stored = v1.to_storage(external.clone());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "n1");
        assert_eq!(stored["message"], "hello");
        assert_eq!(stored["reportingComponent"], "nodemedic");
        assert!(stored.get("regarding").is_none());
        assert_eq!(v1.present(&stored), external);
        assert_eq!(v1.field_value(&stored, "regarding.name"), "n1");
        assert_eq!(v1.field_value(&stored, "involvedObject.kind"), "Node");
        assert_eq!(v1.field_value(&stored, "reportingController"), "nodemedic");
    }

    #[test]
    fn pod_field_values() {
        let pods = resolve("pods").unwrap();
        let p = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {}});
        assert_eq!(pods.field_value(&p, "spec.nodeName"), "n1");
        assert_eq!(pods.field_value(&p, "status.phase"), "");
        assert_eq!(pods.field_value(&p, "spec.hostNetwork"), "false");
        assert!(pods.supports_field("metadata.namespace"));
        assert!(!pods.supports_field("spec.foo"));
        assert!(!resolve("nodes").unwrap().supports_field("metadata.namespace"));
    }

    #[test]
    fn qos_classes() {
        let g =
            json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}});
        assert_eq!(qos_class(&g), "Guaranteed");
        let g2 = json!({"spec": {"containers": [{"name": "a", "resources": {
            "requests": {"cpu": "2000m", "memory": "1024Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}}]}});
        assert_eq!(qos_class(&g2), "Guaranteed");
        let b = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(qos_class(&b), "Burstable");
        let be = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(qos_class(&be), "BestEffort");
    }

    #[test]
    fn lease_numbers_are_validated() {
        let leases = resolve("leases").unwrap();
        let ok = json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0}});
        assert!(validate(leases, &ok, "l").is_ok());
        assert!(validate(leases, &json!({}), "l").is_ok());
        let bad = json!({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}});
        let s = validate(leases, &bad, "l").unwrap_err().to_status();
        assert_eq!(
            s["message"],
            "Lease \"l\" is invalid: [spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0, \
             spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0]"
        );
        assert_eq!(s["details"]["group"], "coordination.k8s.io");
        assert_eq!(s["code"], 422);
    }

    #[test]
    fn pod_defaults() {
        let pods = resolve("pods").unwrap();
        let mut p = json!({"spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Running"}});
        apply_create_defaults(pods, &mut p, false);
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        assert_eq!(p["spec"]["schedulerName"], "default-scheduler");
        apply_create_defaults(pods, &mut p, true);
        assert_eq!(p["status"], json!({"phase": "Pending", "qosClass": "BestEffort"}));
    }

    const NOT_READY: &str = "node.kubernetes.io/not-ready";
    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

    /// The pod's tolerations after create defaults, through the API or inserted directly.
    fn tolerations_after_create(given: Option<Value>, from_api: bool) -> Value {
        let mut spec = json!({"containers": [{"name": "a"}]});
        if let Some(t) = given {
            spec["tolerations"] = t;
        }
        let mut p = json!({"spec": spec});
        apply_create_defaults(resolve("pods").unwrap(), &mut p, from_api);
        p["spec"]["tolerations"].clone()
    }

    fn default_toleration(key: &str) -> Value {
        json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    }

    #[test]
    fn pods_get_exactly_the_two_default_tolerations() {
        let both = json!([default_toleration(NOT_READY), default_toleration(UNREACHABLE)]);
        for from_api in [true, false] {
            assert_eq!(tolerations_after_create(None, from_api), both, "from_api {from_api}");
            assert_eq!(tolerations_after_create(Some(Value::Null), from_api), both);
            assert_eq!(tolerations_after_create(Some(json!([])), from_api), both);
        }
        // Appended after the pod's own, which are kept as given.
        let gpu = json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"});
        assert_eq!(
            tolerations_after_create(Some(json!([gpu])), true),
            json!([gpu, default_toleration(NOT_READY), default_toleration(UNREACHABLE)])
        );
        // Running the defaults again adds nothing.
        let mut p = json!({"spec": {"containers": [{"name": "a"}]}});
        let pods = resolve("pods").unwrap();
        apply_create_defaults(pods, &mut p, false);
        let once = p.clone();
        apply_create_defaults(pods, &mut p, false);
        assert_eq!(p, once);
    }

    #[test]
    fn a_toleration_already_there_is_not_added_again() {
        // Table: the pod's tolerations, then which defaults are added after them.
        let cases: &[(Value, &[&str])] = &[
            // The exact key with a user's tolerationSeconds, which stays.
            (
                json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]),
                &[UNREACHABLE],
            ),
            (
                json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 6000}]),
                &[NOT_READY],
            ),
            // The exact key, every effect: tolerated for ever.
            (json!([{"key": UNREACHABLE, "operator": "Exists"}]), &[NOT_READY]),
            // An empty key with operator Exists tolerates every taint.
            (json!([{"operator": "Exists"}]), &[]),
            (json!([{"key": "", "operator": "Exists", "effect": "NoExecute"}]), &[]),
            (
                json!([{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]),
                &[],
            ),
            // Upstream looks only at key and effect, not the operator.
            (
                json!([{"key": NOT_READY, "operator": "Equal", "value": "x", "effect": "NoExecute"}]),
                &[UNREACHABLE],
            ),
            // Another effect does not cover NoExecute.
            (
                json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]),
                &[NOT_READY, UNREACHABLE],
            ),
            (
                json!([{"operator": "Exists", "effect": "NoSchedule"}]),
                &[NOT_READY, UNREACHABLE],
            ),
            // Both there: nothing added.
            (
                json!([
                    {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1},
                    {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}
                ]),
                &[],
            ),
        ];
        for (given, added) in cases {
            let mut want = given.as_array().unwrap().clone();
            want.extend(added.iter().map(|k| default_toleration(k)));
            for from_api in [true, false] {
                assert_eq!(
                    tolerations_after_create(Some(given.clone()), from_api),
                    Value::Array(want.clone()),
                    "given {given}, from_api {from_api}"
                );
            }
        }
        // Something that is not a list is left for validation to find.
        assert_eq!(tolerations_after_create(Some(json!("x")), false), json!("x"));
    }

    #[test]
    fn only_pods_get_tolerations() {
        for (name, obj) in [
            ("nodes", json!({"metadata": {"name": "n1"}, "spec": {}})),
            (
                "sparkapplications",
                json!({"metadata": {"name": "a"}, "spec": {"driver": {}}}),
            ),
        ] {
            let mut o = obj.clone();
            apply_create_defaults(resolve(name).unwrap(), &mut o, false);
            assert!(o["spec"].get("tolerations").is_none(), "{name}: {o}");
        }
    }

    #[test]
    fn spark_applications_are_a_custom_resource_with_status() {
        let rt = resolve("sparkapp").unwrap();
        assert_eq!(
            (rt.group, rt.version, rt.plural, rt.singular, rt.kind),
            (
                "sparkoperator.k8s.io",
                "v1beta2",
                "sparkapplications",
                "sparkapplication",
                "SparkApplication"
            )
        );
        assert!(rt.namespaced && rt.status_subresource && rt.custom_resource && !rt.delete_returns_object);
        assert_eq!(rt.list_kind(), "SparkApplicationList");
        assert_eq!(rt.qualified(), "sparkapplications.sparkoperator.k8s.io");
        for name in [
            "sparkapplications",
            "sparkapplication",
            "SparkApplication",
            "sparkapplications.sparkoperator.k8s.io",
        ] {
            assert!(std::ptr::eq(resolve(name).unwrap(), rt), "{name}");
        }
        assert!(std::ptr::eq(
            find_by_kind("sparkoperator.k8s.io/v1beta2", "SparkApplication").unwrap(),
            rt
        ));
        assert!(rt.supports_field("metadata.namespace"));
        assert!(!rt.supports_field("spec.restartPolicy.type"));

        // A create through the API drops the status; a direct insert keeps it. The spec
        // (`restartPolicy` included) is stored as given either way.
        let app = json!({"metadata": {"name": "a", "namespace": "spark"},
            "spec": {"restartPolicy": {"type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 10}},
            "status": {"applicationState": {"state": "RUNNING"}}});
        let mut via_api = app.clone();
        apply_create_defaults(rt, &mut via_api, true);
        assert_eq!(via_api.get("status"), None);
        assert_eq!(via_api["spec"], app["spec"]);
        let mut direct = app.clone();
        apply_create_defaults(rt, &mut direct, false);
        assert_eq!(direct, app);
        assert!(validate(rt, &json!({"spec": {"restartPolicy": {"type": "Sometimes"}}}), "a").is_ok());
    }

    #[test]
    fn node_resource_topologies_are_a_cluster_scoped_custom_resource() {
        let rt = resolve("node-res-topo").unwrap();
        assert_eq!(
            (rt.group, rt.version, rt.plural, rt.singular, rt.kind),
            (
                "topology.node.k8s.io",
                "v1alpha2",
                "noderesourcetopologies",
                "noderesourcetopology",
                "NodeResourceTopology"
            )
        );
        assert!(rt.custom_resource && !rt.namespaced && !rt.status_subresource && !rt.delete_returns_object);
        assert_eq!(rt.list_kind(), "NodeResourceTopologyList");
        assert_eq!(rt.qualified(), "noderesourcetopologies.topology.node.k8s.io");
        for name in [
            "noderesourcetopologies",
            "noderesourcetopology",
            "NodeResourceTopology",
            "noderesourcetopologies.topology.node.k8s.io",
        ] {
            assert!(std::ptr::eq(resolve(name).unwrap(), rt), "{name}");
        }
        assert!(std::ptr::eq(
            find_by_kind("topology.node.k8s.io/v1alpha2", "NodeResourceTopology").unwrap(),
            rt
        ));
        assert!(find_by_kind("topology.node.k8s.io/v1alpha1", "NodeResourceTopology").is_none());
        assert!(rt.supports_field("metadata.name"));
        assert!(!rt.supports_field("metadata.namespace"));

        // No status subresource: nothing is dropped on create, through the API or not, and
        // the object is stored as given (no schema).
        let nrt = json!({"metadata": {"name": "worker-1"}, "zones": [{"name": "node-0", "type": "Node"}],
                         "status": {"x": 1}});
        for from_api in [true, false] {
            let mut o = nrt.clone();
            apply_create_defaults(rt, &mut o, from_api);
            assert_eq!(o, nrt);
        }
        assert!(validate(rt, &json!({"zones": {"not": "a list"}}), "worker-1").is_ok());
    }
}
