//! A pod as nodemedic reads it from the API or a pods file: [`PodObject`], only the parts of
//! `metadata`, `spec` and `status` the rules use (with the API's field names and types), and
//! [`pod_info`], which turns it into the rules' [`PodInfo`].
//!
//! Decoding is where a scan of a pods file, and the pod watch, spend most of their time, so it
//! keeps what is read and nothing else, and allocates only for that: managed fields, every
//! annotation but [`ANNOTATIONS_READ`], every environment variable but [`ENV_READ`], and every
//! resource but CPU, memory and ephemeral storage are skipped while parsing, their strings
//! borrowed from the input (never copied) to be compared and dropped. [`pod_info`] takes the
//! object by value and moves its strings into the [`PodInfo`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use nodemedic_rules::quantity::parse_cpu_millis;
use nodemedic_rules::snapshot::{
    ConfVolume, ContainerInfo, ContainerKind, LocalDirVolume, OwnerRef, PodInfo, PodPhase, QosClass,
};
use serde::Deserialize as _;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};

/// The annotations a rule or the agent reads; the others are not kept.
pub const ANNOTATIONS_READ: [&str; 3] = [
    nodemedic_rules::snapshot::pods::annotations::MIRROR,
    nodemedic_rules::snapshot::pods::annotations::VOLCANO_GROUP,
    nodemedic_rules::snapshot::pods::annotations::FENCE_OPT_IN,
];

/// The environment variables (of a pod's containers) a rule or the agent reads; the others
/// are not kept.
pub const ENV_READ: [&str; 3] = [
    "SPARK_DRIVER_URL",
    "KUBERNETES_REQUEST_TIMEOUT",
    nodemedic_rules::submission::SUBMIT_OPTS_ENV,
];

/// ... and those whose name starts with this: the JVM options Spark gives an executor
/// (`SPARK_JAVA_OPT_0`, `SPARK_JAVA_OPT_1`, ...).
pub const ENV_PREFIX_READ: &str = "SPARK_JAVA_OPT_";

/// Whether container variable `name` is kept.
fn env_read(name: &str) -> bool {
    ENV_READ.contains(&name) || name.starts_with(ENV_PREFIX_READ)
}

/// A `v1 Pod` with the fields nodemedic reads.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct PodObject {
    /// What [`LeanMeta`] keeps of `metadata`, as the `ObjectMeta` `kube::Resource` needs.
    #[serde(default, deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<PodSpec>,
    #[serde(default)]
    pub status: Option<PodStatus>,
}

/// A string of the input: borrowed where the input holds it as it is (no escapes), else
/// owned. What is only compared and dropped (a key, a skipped variable's name) costs no copy.
#[derive(Debug)]
pub(super) struct Text<'de>(pub(super) Cow<'de, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s.to_string())))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// `metadata`, in part: what the rules, the pod watch (`resourceVersion`) and driver lookups
/// read.
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "kept_annotations")]
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

/// `metadata` as [`PodObject`] keeps it ([`LeanMeta`]), for a decoder that reads a pod's
/// parts one by one.
#[derive(Debug, Default)]
pub struct LeanMetadata(pub ObjectMeta);

impl<'de> serde::Deserialize<'de> for LeanMetadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lean_meta(d).map(LeanMetadata)
    }
}

fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Option::<LeanMeta>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m.owner_references,
        ..Default::default()
    })
}

/// `metadata.annotations`, only those of [`ANNOTATIONS_READ`].
fn kept_annotations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                let Text(value) = map.next_value::<Text<'de>>()?;
                if ANNOTATIONS_READ.contains(&key.as_ref()) {
                    kept.insert(key.into_owned(), value.into_owned());
                }
            }
            Ok(Some(kept))
        }
    }
    d.deserialize_option(V)
}

/// A container's `env`, only the variables of [`ENV_READ`] and [`ENV_PREFIX_READ`] with a
/// literal value.
fn kept_env<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<EnvVar>, D::Error> {
    #[derive(serde::Deserialize)]
    struct Entry<'a> {
        #[serde(borrow)]
        name: Text<'a>,
        #[serde(borrow, default)]
        value: Option<Text<'a>>,
    }
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<EnvVar>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of environment variables")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(vec![])
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(vec![])
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut kept = Vec::new();
            while let Some(Entry { name, value }) = seq.next_element::<Entry<'de>>()? {
                if let (true, Some(value)) = (env_read(name.0.as_ref()), value) {
                    kept.push(EnvVar {
                        name: name.0.into_owned(),
                        value: value.0.into_owned(),
                    });
                }
            }
            Ok(kept)
        }
    }
    d.deserialize_option(V)
}

/// `v1 PodSpec`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub init_containers: Option<Vec<Container>>,
    pub containers: Vec<Container>,
    #[serde(default)]
    pub ephemeral_containers: Option<Vec<Container>>,
    #[serde(default)]
    pub volumes: Option<Vec<Volume>>,
    #[serde(default)]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub resource_claims: Option<Vec<PodResourceClaim>>,
    #[serde(default)]
    pub host_network: Option<bool>,
}

/// `v1 PodResourceClaim`, in part: its name in the pod.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct PodResourceClaim {
    pub name: String,
}

/// `v1 Toleration`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub effect: Option<String>,
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

/// `v1 Volume`, in part: its name and whether it is a hostPath, an emptyDir or a ConfigMap.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(default)]
    pub host_path: Option<HostPathSource>,
    #[serde(default)]
    pub empty_dir: Option<EmptyDirSource>,
    #[serde(default)]
    pub config_map: Option<ConfigMapSource>,
    #[serde(default)]
    pub persistent_volume_claim: Option<ClaimSource>,
}

/// `v1 EmptyDirVolumeSource`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmptyDirSource {
    #[serde(default)]
    pub medium: Option<String>,
    #[serde(default)]
    pub size_limit: Option<Quantity>,
}

/// `v1 PersistentVolumeClaimVolumeSource`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSource {
    #[serde(default)]
    pub claim_name: String,
}

/// `v1 ContainerPort`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    #[serde(default)]
    pub container_port: i64,
    #[serde(default)]
    pub host_port: Option<i64>,
    #[serde(default)]
    pub protocol: Option<String>,
}

/// `v1 ConfigMapVolumeSource`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct ConfigMapSource {
    #[serde(default)]
    pub name: String,
}

/// `v1 HostPathVolumeSource`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct HostPathSource {
    pub path: String,
}

/// A `v1 EnvVar` with a literal value (`valueFrom` is not read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// `v1 Container`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Container {
    pub name: String,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub resources: Option<Resources>,
    /// Only the variables of [`ENV_READ`] and [`ENV_PREFIX_READ`].
    #[serde(default, deserialize_with = "kept_env")]
    pub env: Vec<EnvVar>,
    #[serde(default)]
    pub ports: Option<Vec<Port>>,
}

/// `v1 ResourceRequirements`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Resources {
    #[serde(default)]
    pub limits: Option<ResourceList>,
    #[serde(default)]
    pub requests: Option<ResourceList>,
}

/// A `v1 ResourceList`, in part: the resources nodemedic reads (the kubelet's QoS class
/// counts only CPU and memory: `isSupportedQoSComputeResource`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct ResourceList {
    #[serde(default)]
    pub cpu: Option<Quantity>,
    #[serde(default)]
    pub memory: Option<Quantity>,
    #[serde(default, rename = "ephemeral-storage")]
    pub ephemeral_storage: Option<Quantity>,
}

impl ResourceList {
    /// Whether it names CPU or memory (what makes a pod other than BestEffort).
    fn has_compute(&self) -> bool {
        self.cpu.is_some() || self.memory.is_some()
    }

    fn get(&self, name: Compute) -> Option<&Quantity> {
        match name {
            Compute::Cpu => self.cpu.as_ref(),
            Compute::Memory => self.memory.as_ref(),
        }
    }
}

/// The resources of a QoS class.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Compute {
    Cpu,
    Memory,
}
/// `v1 PodStatus`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub qos_class: Option<String>,
    #[serde(default)]
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default)]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default)]
    pub ephemeral_container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default)]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<String>,
}

/// `v1 PodCondition`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub last_transition_time: Option<Time>,
}

/// `v1 ContainerStatus`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    #[serde(default, rename = "containerID")]
    pub container_id: Option<String>,
    #[serde(default)]
    pub state: Option<ContainerState>,
}

/// `v1 ContainerState`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct ContainerState {
    #[serde(default)]
    pub running: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    pub waiting: Option<Waiting>,
    #[serde(default)]
    pub terminated: Option<Terminated>,
}

/// `v1 ContainerStateWaiting`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Waiting {
    #[serde(default)]
    pub reason: Option<String>,
}

/// `v1 ContainerStateTerminated`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terminated {
    #[serde(default)]
    pub finished_at: Option<Time>,
    #[serde(default)]
    pub exit_code: Option<i32>,
}

fn cpu_millis(q: Option<&Quantity>) -> Option<u64> {
    q.and_then(|q| parse_cpu_millis(&q.0).ok())
}

/// The status of container `name` among `statuses`, taken out (each status belongs to one
/// container).
fn take_status(statuses: &mut [ContainerStatus], name: &str) -> Option<ContainerStatus> {
    statuses.iter_mut().find(|s| s.name == name).map(std::mem::take)
}

fn container_info(c: Container, kind: ContainerKind, statuses: &mut [ContainerStatus]) -> ContainerInfo {
    let status = take_status(statuses, &c.name);
    let res = c.resources.as_ref();
    let state = status.as_ref().and_then(|s| s.state.as_ref());
    let state_name = state.and_then(|st| {
        if st.terminated.is_some() {
            Some("terminated")
        } else if st.running.is_some() {
            Some("running")
        } else if st.waiting.is_some() {
            Some("waiting")
        } else {
            None
        }
    });
    let limit = cpu_millis(res.and_then(|r| r.limits.as_ref()).and_then(|l| l.cpu.as_ref()));
    // A request defaults to the limit when only the limit is set.
    let request = cpu_millis(res.and_then(|r| r.requests.as_ref()).and_then(|l| l.cpu.as_ref())).or(limit);
    let exit_code = state.and_then(|st| st.terminated.as_ref()).and_then(|t| t.exit_code);
    let state_name = state_name.map(str::to_string);
    let (container_id, waiting_reason) = match status {
        Some(s) => (
            s.container_id.filter(|id| !id.is_empty()).map(|id| strip_scheme(&id)),
            s.state
                .and_then(|st| st.waiting)
                .and_then(|w| w.reason)
                .filter(|r| !r.is_empty()),
        ),
        None => (None, None),
    };
    ContainerInfo {
        name: c.name,
        kind: Some(kind),
        image: c.image.filter(|i| !i.is_empty()),
        cpu_request_millis: request,
        cpu_limit_millis: limit,
        container_id,
        state: state_name,
        exit_code,
        waiting_reason,
        ephemeral_storage_limit_bytes: res
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.ephemeral_storage.as_ref())
            .and_then(|q| nodemedic_rules::quantity::parse_bytes(&q.0).ok()),
        ports: c
            .ports
            .iter()
            .flatten()
            .filter(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
            .filter_map(|p| {
                Some(nodemedic_rules::snapshot::ContainerPort {
                    container_port: u16::try_from(p.container_port).ok()?,
                    host_port: p.host_port.and_then(|h| u16::try_from(h).ok()).filter(|h| *h > 0),
                })
            })
            .collect(),
    }
}

/// `containerd://abc` -> `abc`.
pub fn strip_scheme(id: &str) -> String {
    id.split_once("://").map_or(id, |(_, rest)| rest).to_string()
}

/// The QoS class the API server would compute (used when `status.qosClass` is absent), as
/// `GetPodQOS` does: only CPU and memory count; Guaranteed when every container limits both
/// and requests what it limits.
fn compute_qos<'a>(containers: impl Iterator<Item = &'a Container>) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let res = c.resources.as_ref();
        let req = res.and_then(|r| r.requests.as_ref());
        let lim = res.and_then(|r| r.limits.as_ref());
        any |= req.is_some_and(ResourceList::has_compute) || lim.is_some_and(ResourceList::has_compute);
        for name in [Compute::Cpu, Compute::Memory] {
            let l = lim.and_then(|m| m.get(name));
            let r = req.and_then(|m| m.get(name)).or(l);
            let equal = match (name, l, r) {
                (Compute::Cpu, Some(l), Some(r)) => cpu_millis(Some(l)) == cpu_millis(Some(r)),
                (_, Some(l), Some(r)) => l.0 == r.0,
                _ => false,
            };
            guaranteed &= equal;
        }
    }
    match (any, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    }
}

/// The literal value of env var `name` in the pod's first container.
fn first_env(spec: Option<&PodSpec>, name: &str) -> Option<String> {
    spec?
        .containers
        .first()?
        .env
        .iter()
        .find(|e| e.name == name)
        .map(|e| e.value.clone())
}

/// The Spark configuration volume of a driver's spec: the first ConfigMap volume named as Spark
/// names it ([`super::sparkconf::CONF_VOLUMES`]).
fn conf_volume(volumes: &[Volume]) -> Option<ConfVolume> {
    volumes.iter().find_map(|v| {
        let cm = v.config_map.as_ref()?;
        super::sparkconf::CONF_VOLUMES
            .contains(&v.name.as_str())
            .then(|| ConfVolume {
                volume: v.name.clone(),
                config_map: cm.name.clone(),
            })
    })
}

/// When the `PodScheduled` condition turned true, unix seconds.
fn scheduled_at(status: Option<&PodStatus>) -> Option<i64> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status.as_deref() == Some("True"))?
        .last_transition_time
        .as_ref()
        .map(|t| t.0.as_second())
}

/// Our view of a pod, its strings moved out of `pod`; `None` without a UID.
pub fn pod_info(pod: PodObject) -> Option<PodInfo> {
    let PodObject {
        metadata: meta,
        spec,
        status,
    } = pod;
    let uid = meta.uid.filter(|u| !u.is_empty())?;
    let mut status = status;
    let (mut init_statuses, mut app_statuses, mut eph_statuses) = match status.as_mut() {
        Some(s) => (
            s.init_container_statuses.take().unwrap_or_default(),
            s.container_statuses.take().unwrap_or_default(),
            s.ephemeral_container_statuses.take().unwrap_or_default(),
        ),
        None => Default::default(),
    };
    let finished_at = init_statuses
        .iter()
        .chain(app_statuses.iter())
        .filter_map(|s| s.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0.as_second())
        .max();
    let qos_class = status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .map(QosClass::from)
        .or_else(|| {
            spec.as_ref()
                .map(|s| compute_qos(s.init_containers.iter().flatten().chain(s.containers.iter())))
        });
    let scheduled_at = scheduled_at(status.as_ref());
    let spec_ref = spec.as_ref();
    let spark_driver_url = first_env(spec_ref, "SPARK_DRIVER_URL");
    let kubernetes_request_timeout_env = first_env(spec_ref, "KUBERNETES_REQUEST_TIMEOUT");
    let spark_submit_opts_env = first_env(spec_ref, nodemedic_rules::submission::SUBMIT_OPTS_ENV);
    let spark_java_opts = java_opts(spec_ref);
    let host_network = spec_ref.and_then(|s| s.host_network).unwrap_or(false);
    let mut containers = Vec::new();
    let mut node_name = None;
    let mut scheduler_name = None;
    let mut volumes = Vec::new();
    let mut tolerations = Vec::new();
    let mut termination_grace_seconds = None;
    let mut resource_claims = Vec::new();
    if let Some(spec) = spec {
        let regular = spec.containers.len();
        let init = spec.init_containers.as_ref().map_or(0, Vec::len);
        let ephemeral = spec.ephemeral_containers.as_ref().map_or(0, Vec::len);
        containers.reserve_exact(init + regular + ephemeral);
        for c in spec.init_containers.into_iter().flatten() {
            containers.push(container_info(c, ContainerKind::Init, &mut init_statuses));
        }
        for c in spec.containers {
            containers.push(container_info(c, ContainerKind::Regular, &mut app_statuses));
        }
        for c in spec.ephemeral_containers.into_iter().flatten() {
            containers.push(container_info(c, ContainerKind::Ephemeral, &mut eph_statuses));
        }
        node_name = spec.node_name;
        scheduler_name = spec.scheduler_name;
        volumes = spec.volumes.unwrap_or_default();
        tolerations = spec
            .tolerations
            .unwrap_or_default()
            .into_iter()
            .map(|t| nodemedic_rules::eviction::Toleration {
                key: t.key,
                operator: t.operator,
                value: t.value,
                effect: t.effect,
                seconds: t.toleration_seconds,
            })
            .collect();
        termination_grace_seconds = spec.termination_grace_period_seconds;
        resource_claims = spec
            .resource_claims
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect();
    }
    let conf_volume = conf_volume(&volumes);
    let local_dir_volumes = volumes
        .into_iter()
        .filter(|v| v.name.starts_with("spark-local-dir-"))
        .map(|v| LocalDirVolume {
            name: v.name,
            host_path: v.host_path.map(|h| h.path),
            memory: v
                .empty_dir
                .as_ref()
                .is_some_and(|e| e.medium.as_deref() == Some("Memory")),
            claim: v.persistent_volume_claim.map(|c| c.claim_name),
            size_limit_bytes: v
                .empty_dir
                .and_then(|e| e.size_limit)
                .and_then(|q| nodemedic_rules::quantity::parse_bytes(&q.0).ok()),
        })
        .collect();
    let (phase, reason, message, pod_ip) = match status {
        Some(s) => (
            s.phase.as_deref().map_or(PodPhase::Pending, PodPhase::from),
            s.reason,
            s.message,
            s.pod_ip.filter(|ip| !ip.is_empty()),
        ),
        None => (PodPhase::Pending, None, None, None),
    };
    Some(PodInfo {
        uid,
        namespace: meta.namespace.unwrap_or_else(|| "default".into()),
        name: meta.name.unwrap_or_default(),
        node_name,
        phase,
        reason,
        message,
        qos_class,
        containers,
        labels: meta.labels.unwrap_or_default(),
        created_at: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        finished_at,
        annotations: meta.annotations.unwrap_or_default(),
        owner_refs: meta
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .map(|o| OwnerRef {
                kind: o.kind,
                name: o.name,
                uid: o.uid,
                controller: o.controller == Some(true),
            })
            .collect(),
        scheduler_name,
        scheduled_at,
        deleting: meta.deletion_timestamp.is_some(),
        spark_driver_url,
        kubernetes_request_timeout_env,
        spark_submit_opts_env,
        conf_volume,
        local_dir_volumes,
        pod_ip,
        tolerations,
        termination_grace_seconds,
        resource_claims,
        host_network,
        spark_java_opts,
    })
}

/// The `SPARK_JAVA_OPT_<n>` values of the pod's first container, in `<n>` order.
fn java_opts(spec: Option<&PodSpec>) -> Vec<String> {
    let Some(first) = spec.and_then(|s| s.containers.first()) else {
        return vec![];
    };
    let mut opts: Vec<(u32, &str)> = first
        .env
        .iter()
        .filter_map(|e| Some((e.name.strip_prefix(ENV_PREFIX_READ)?.parse().ok()?, e.value.as_str())))
        .collect();
    opts.sort_by_key(|(n, _)| *n);
    opts.into_iter().map(|(_, v)| v.to_string()).collect()
}
