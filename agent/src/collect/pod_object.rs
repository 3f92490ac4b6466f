//! A pod as nodemedic reads it from the API or a pods file: [`PodObject`], the real
//! `metadata` and only the parts of `spec` and `status` the rules use (with the API's field
//! names and types), and [`pod_info`], which turns it into the rules' [`PodInfo`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use nodemedic_rules::quantity::parse_cpu_millis;
use nodemedic_rules::snapshot::{
    ConfVolume, ContainerInfo, ContainerKind, LocalDirVolume, OwnerRef, PodInfo, PodPhase, QosClass,
};

/// A `v1 Pod` with the fields nodemedic reads.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct PodObject {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<PodSpec>,
    #[serde(default)]
    pub status: Option<PodStatus>,
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
    pub empty_dir: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    pub config_map: Option<ConfigMapSource>,
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

/// `v1 EnvVar`, in part: only literal values matter to us.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct EnvVar {
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
}

/// `v1 Container`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Container {
    pub name: String,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub resources: Option<Resources>,
    #[serde(default)]
    pub env: Option<Vec<EnvVar>>,
}

/// `v1 ResourceRequirements`, in part.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Resources {
    #[serde(default)]
    pub limits: Option<BTreeMap<String, Quantity>>,
    #[serde(default)]
    pub requests: Option<BTreeMap<String, Quantity>>,
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

fn container_info(c: &Container, kind: ContainerKind, statuses: &[ContainerStatus]) -> ContainerInfo {
    let res = c.resources.as_ref();
    let status = statuses.iter().find(|s| s.name == c.name);
    let state = status.and_then(|s| s.state.as_ref());
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
    let limit = cpu_millis(res.and_then(|r| r.limits.as_ref()).and_then(|l| l.get("cpu")));
    // A request defaults to the limit when only the limit is set.
    let request = cpu_millis(res.and_then(|r| r.requests.as_ref()).and_then(|l| l.get("cpu"))).or(limit);
    ContainerInfo {
        name: c.name.clone(),
        kind: Some(kind),
        image: c.image.clone().filter(|i| !i.is_empty()),
        cpu_request_millis: request,
        cpu_limit_millis: limit,
        container_id: status
            .and_then(|s| s.container_id.as_deref())
            .filter(|id| !id.is_empty())
            .map(strip_scheme),
        state: state_name.map(str::to_string),
        exit_code: state.and_then(|st| st.terminated.as_ref()).and_then(|t| t.exit_code),
        waiting_reason: state
            .and_then(|st| st.waiting.as_ref())
            .and_then(|w| w.reason.clone())
            .filter(|r| !r.is_empty()),
    }
}

/// `containerd://abc` -> `abc`.
pub fn strip_scheme(id: &str) -> String {
    id.split_once("://").map_or(id, |(_, rest)| rest).to_string()
}

/// The QoS class the API server would compute (used when `status.qosClass` is absent).
fn compute_qos(containers: &[&Container]) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let res = c.resources.as_ref();
        let req = res.and_then(|r| r.requests.as_ref());
        let lim = res.and_then(|r| r.limits.as_ref());
        any |= req.is_some_and(|m| !m.is_empty()) || lim.is_some_and(|m| !m.is_empty());
        for name in ["cpu", "memory"] {
            let l = lim.and_then(|m| m.get(name));
            let r = req.and_then(|m| m.get(name)).or(l);
            let equal = match (name, l, r) {
                ("cpu", Some(l), Some(r)) => cpu_millis(Some(l)) == cpu_millis(Some(r)),
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
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

/// The Spark configuration volume of a driver's spec: the first ConfigMap volume named as Spark
/// names it ([`super::sparkconf::CONF_VOLUMES`]).
fn conf_volume(spec: &PodSpec) -> Option<ConfVolume> {
    spec.volumes.iter().flatten().find_map(|v| {
        let cm = v.config_map.as_ref()?;
        super::sparkconf::CONF_VOLUMES
            .contains(&v.name.as_str())
            .then(|| ConfVolume {
                volume: v.name.clone(),
                config_map: cm.name.clone(),
            })
    })
}

/// Our view of a pod; `None` without a UID.
pub fn pod_info(pod: &PodObject) -> Option<PodInfo> {
    let meta = &pod.metadata;
    let uid = meta.uid.clone().filter(|u| !u.is_empty())?;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let none: &[ContainerStatus] = &[];
    let init_statuses = status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(none);
    let app_statuses = status.and_then(|s| s.container_statuses.as_deref()).unwrap_or(none);
    let eph_statuses = status
        .and_then(|s| s.ephemeral_container_statuses.as_deref())
        .unwrap_or(none);
    let mut containers = Vec::new();
    if let Some(spec) = spec {
        for c in spec.init_containers.iter().flatten() {
            containers.push(container_info(c, ContainerKind::Init, init_statuses));
        }
        for c in &spec.containers {
            containers.push(container_info(c, ContainerKind::Regular, app_statuses));
        }
        for c in spec.ephemeral_containers.iter().flatten() {
            containers.push(container_info(c, ContainerKind::Ephemeral, eph_statuses));
        }
    }
    let qos_class = status
        .and_then(|s| s.qos_class.as_deref())
        .map(QosClass::from)
        .or_else(|| {
            spec.map(|s| {
                let all: Vec<&Container> = s.init_containers.iter().flatten().chain(s.containers.iter()).collect();
                compute_qos(&all)
            })
        });
    Some(PodInfo {
        uid,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
        node_name: spec.and_then(|s| s.node_name.clone()),
        phase: status
            .and_then(|s| s.phase.as_deref())
            .map_or(PodPhase::Pending, PodPhase::from),
        reason: status.and_then(|s| s.reason.clone()),
        message: status.and_then(|s| s.message.clone()),
        qos_class,
        containers,
        labels: meta
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
        created_at: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        finished_at: init_statuses
            .iter()
            .chain(app_statuses.iter())
            .filter_map(|s| s.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
            .map(|t| t.0.as_second())
            .max(),
        annotations: meta.annotations.clone().unwrap_or_default().into_iter().collect(),
        owner_refs: meta
            .owner_references
            .iter()
            .flatten()
            .map(|o| OwnerRef {
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller == Some(true),
            })
            .collect(),
        scheduler_name: spec.and_then(|s| s.scheduler_name.clone()),
        scheduled_at: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status.as_deref() == Some("True"))
            })
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.as_second()),
        deleting: meta.deletion_timestamp.is_some(),
        spark_driver_url: spec
            .and_then(|s| s.containers.first())
            .and_then(|c| c.env.as_ref())
            .and_then(|env| env.iter().find(|e| e.name == "SPARK_DRIVER_URL"))
            .and_then(|e| e.value.clone()),
        kubernetes_request_timeout_env: first_env(spec, "KUBERNETES_REQUEST_TIMEOUT"),
        spark_submit_opts_env: first_env(spec, nodemedic_rules::submission::SUBMIT_OPTS_ENV),
        conf_volume: spec.and_then(conf_volume),

        local_dir_volumes: spec
            .and_then(|s| s.volumes.as_ref())
            .map(|vols| {
                vols.iter()
                    .filter(|v| v.name.starts_with("spark-local-dir-"))
                    .map(|v| LocalDirVolume {
                        name: v.name.clone(),
                        host_path: v.host_path.as_ref().map(|h| h.path.clone()),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        pod_ip: status.and_then(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()),
        tolerations: spec
            .and_then(|s| s.tolerations.as_ref())
            .map(|ts| {
                ts.iter()
                    .map(|t| nodemedic_rules::eviction::Toleration {
                        key: t.key.clone(),
                        operator: t.operator.clone(),
                        value: t.value.clone(),
                        effect: t.effect.clone(),
                        seconds: t.toleration_seconds,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        termination_grace_seconds: spec.and_then(|s| s.termination_grace_period_seconds),
        resource_claims: spec
            .and_then(|s| s.resource_claims.as_ref())
            .map(|c| c.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default(),
    })
}
