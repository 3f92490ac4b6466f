//! Pods as the rules read them: the pod, its containers, owner references and the volumes
//! Spark uses, where the pod list came from, and the Spark version a pod's image names. The
//! words on a pod (phase, QoS class, Spark role) are enums, in [`words`].

use std::collections::BTreeMap;

use crate::spark;

pub mod words;

pub use words::{PodPhase, QosClass, SparkRole};

/// The annotations nodemedic reads. Pods are decoded with these and no others (the agent's
/// `collect::pod_object::ANNOTATIONS_READ`): a rule that reads another one names it here.
pub mod annotations {
    /// The kubelet's mark on a static pod's mirror.
    pub const MIRROR: &str = "kubernetes.io/config.mirror";
    /// Volcano's pod group annotation (`<app id>-podgroup` for Spark).
    pub const VOLCANO_GROUP: &str = "scheduling.k8s.io/group-name";
    /// The label or annotation that opts a driver pod in to fencing (value `"true"`).
    pub const FENCE_OPT_IN: &str = "nodemedic.io/fence-on-partition";
}

/// Init, regular or ephemeral container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerKind {
    Init,
    Regular,
    Ephemeral,
}

/// A container of a pod, from its spec and status.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ContainerInfo {
    pub name: String,
    pub kind: Option<ContainerKind>,
    pub cpu_request_millis: Option<u64>,
    pub cpu_limit_millis: Option<u64>,
    /// The runtime's id from `status.containerStatuses[].containerID`, without the scheme.
    pub container_id: Option<String>,
    /// `running`, `waiting` or `terminated`, from the container's status.
    pub state: Option<String>,
    /// The exit code, when terminated.
    pub exit_code: Option<i32>,
    /// Why it waits, when waiting (`ContainerCreating`, `CreateContainerConfigError`, ...).
    pub waiting_reason: Option<String>,
    /// The container's image, as in the spec (`apache/spark:3.5.1`).
    pub image: Option<String>,
    /// `resources.limits.ephemeral-storage`, bytes.
    pub ephemeral_storage_limit_bytes: Option<u64>,
    /// `ports` (TCP).
    pub ports: Vec<ContainerPort>,
}

/// An owner reference of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OwnerRef {
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
}

/// The ConfigMap volume that carries a Spark driver's configuration (`spark-conf-volume-driver`
/// since Spark 3.0, `spark-conf-volume` in 2.4): spark-submit creates the ConfigMap only after
/// the driver pod, so a driver whose ConfigMap never came waits for this volume forever.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConfVolume {
    /// The volume's name in the pod spec.
    pub volume: String,
    /// The ConfigMap it mounts (`spark-drv-<id>-conf-map` in Spark 3.x).
    pub config_map: String,
}

/// Whether the kubelet set a driver's [`ConfVolume`] up under its pod directory on this node
/// (`<kubelet dir>/pods/<uid>/volumes/kubernetes.io~configmap/<volume>`: the kubelet creates
/// that directory only once it has read the ConfigMap).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ConfMount {
    /// The volume's directory exists.
    Mounted { path: String },
    /// The pod's directory exists, the volume's does not: the kubelet could not read the ConfigMap.
    Missing { path: String },
    /// The kubelet has no directory for the pod (it has not started on it): nothing to judge.
    NoPodDir { path: String },
    /// The directory could not be examined (why).
    Unknown { reason: String },
}

/// A volume Spark uses as a local dir (named `spark-local-dir-N`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LocalDirVolume {
    /// The volume's name.
    pub name: String,
    /// `Some(host path)` for a hostPath volume, `None` for an emptyDir.
    pub host_path: Option<String>,
    /// An emptyDir with `medium: Memory` (a tmpfs).
    pub memory: bool,
    /// The claim of a PersistentVolumeClaim volume.
    pub claim: Option<String>,
    /// An emptyDir's `sizeLimit`, bytes.
    pub size_limit_bytes: Option<u64>,
}

/// A port a container declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ContainerPort {
    pub container_port: u16,
    /// `hostPort`: the port on the node's address (through the CNI's port mapping).
    pub host_port: Option<u16>,
}

/// A pod, reduced to what the rules use.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node_name: Option<String>,
    /// `status.phase` (`Pending` when the object has none).
    pub phase: PodPhase,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// `status.qosClass`, or computed from the spec when absent.
    pub qos_class: Option<QosClass>,
    pub containers: Vec<ContainerInfo>,
    pub labels: BTreeMap<String, String>,
    /// Creation time, unix seconds.
    pub created_at: Option<i64>,
    /// When its last container terminated, unix seconds (finished pods).
    pub finished_at: Option<i64>,
    /// Those of [`annotations`] the pod has (the agent keeps no others).
    pub annotations: BTreeMap<String, String>,
    pub owner_refs: Vec<OwnerRef>,
    /// `spec.schedulerName` (`default-scheduler` when unset).
    pub scheduler_name: Option<String>,
    /// When the pod was bound to its node: the `PodScheduled` condition's
    /// `lastTransitionTime`, unix seconds.
    pub scheduled_at: Option<i64>,
    /// `metadata.deletionTimestamp` is set: the pod is being deleted.
    pub deleting: bool,
    /// The literal `SPARK_DRIVER_URL` env value of its first container (executors).
    pub spark_driver_url: Option<String>,
    /// The literal `KUBERNETES_REQUEST_TIMEOUT` env value of its first container (the fabric8
    /// client's timeout, in ms; only Spark 2.4 honours it).
    pub kubernetes_request_timeout_env: Option<String>,
    /// The literal `SPARK_SUBMIT_OPTS` env value of its first container (JVM options of the
    /// driver's own spark-submit; Spark 2.4's fabric8 reads `-Dkubernetes.request.timeout`).
    pub spark_submit_opts_env: Option<String>,
    /// Its Spark configuration volume, when a driver's spec has one.
    pub conf_volume: Option<ConfVolume>,
    /// Volumes named `spark-local-dir-N`.
    pub local_dir_volumes: Vec<LocalDirVolume>,
    /// `status.podIP`.
    pub pod_ip: Option<String>,
    /// `spec.tolerations`, as far as eviction by `NoExecute` taints goes.
    pub tolerations: Vec<crate::eviction::Toleration>,
    /// `spec.terminationGracePeriodSeconds` (the API server defaults it to 30).
    pub termination_grace_seconds: Option<i64>,
    /// The names of `spec.resourceClaims` (Dynamic Resource Allocation).
    pub resource_claims: Vec<String>,
    /// `spec.hostNetwork`: its containers listen in the node's network namespace.
    pub host_network: bool,
    /// The literal values of its first container's `SPARK_JAVA_OPT_<n>` variables, in `<n>`
    /// order: the JVM options Spark passes an executor (`spark.executor.extraJavaOptions`, and
    /// the configuration an executor needs at start: `spark.*.port`, `spark.auth*`, ...).
    pub spark_java_opts: Vec<String>,
}

impl PodInfo {
    /// Whether the pod has finished (its containers will not run again).
    pub fn is_terminal(&self) -> bool {
        self.phase.is_terminal()
    }

    /// `namespace/name`.
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The Spark version of a Spark pod: its `spark-version` label (Spark 3.3 and later set
    /// it), else the tag of its Spark container's image when that is a Spark image with a
    /// version tag (`apache/spark:2.4.8`, `gcr.io/spark-operator/spark:v2.4.5`). With where
    /// it came from: `label` or `image`.
    pub fn spark_version(&self) -> Option<(String, &'static str)> {
        if let Some(v) = self.label(spark::VERSION) {
            return Some((v.to_string(), "label"));
        }
        // The container Spark runs in: named so by Spark, else the first regular one.
        let spark = self
            .containers
            .iter()
            .find(|c| matches!(c.name.as_str(), spark::DRIVER_CONTAINER | spark::EXECUTOR_CONTAINER))
            .or_else(|| {
                self.containers
                    .iter()
                    .find(|c| c.kind.is_none_or(|k| k == ContainerKind::Regular))
            })?;
        spark_version_of_image(spark.image.as_deref()?).map(|v| (v, "image"))
    }

    /// A label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// The `spark-role` label: `driver`, `executor`, or another value as written.
    pub fn spark_role(&self) -> Option<SparkRole> {
        self.label(spark::ROLE).map(SparkRole::from)
    }

    /// The Spark application id (`spark-app-selector`).
    pub fn spark_app(&self) -> Option<&str> {
        self.label(spark::APP_SELECTOR)
    }

    /// The controller owner reference, if any.
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owner_refs.iter().find(|o| o.controller)
    }
}

/// Where the pod list came from; it decides how liveness is judged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PodSource {
    /// The Kubernetes API.
    Api,
    /// A `kubectl get pods -o json` file.
    File,
    /// No pod list: the pods the kubelet's PodResources API lists are alive.
    PodResources,
    /// No pod list: a pod is alive when its cgroup has processes.
    Cgroups,
}

impl PodSource {
    /// The report's word: `api`, `file`, `podresources`, `cgroups`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PodSource::Api => "api",
            PodSource::File => "file",
            PodSource::PodResources => "podresources",
            PodSource::Cgroups => "cgroups",
        }
    }

    /// A list of pod objects (API or file), which names every container and phase.
    pub fn is_pod_list(&self) -> bool {
        matches!(self, PodSource::Api | PodSource::File)
    }
}

/// The Spark version an image's tag names, for images whose name says Spark: `apache/spark:3.5.1`,
/// `apache/spark:3.4.0-scala2.12-java11-ubuntu`, `gcr.io/spark-operator/spark:v3.1.1`,
/// `bitnami/spark:3.3.2-debian-11-r0`, `registry:5000/team/spark-py:2.4.8`. `None` for any
/// other image or tag (an application image's own version says nothing about Spark's), and for
/// digests without a tag.
pub fn spark_version_of_image(image: &str) -> Option<String> {
    let without_digest = image.split('@').next()?;
    // The tag follows the last ':' after the last '/' (a registry's port comes before it).
    let last = without_digest.rsplit('/').next()?;
    let (name, tag) = last.split_once(':')?;
    if !name.to_ascii_lowercase().contains("spark") {
        return None;
    }
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let end = tag
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(tag.len());
    let version = tag[..end].trim_end_matches('.');
    let parts: Vec<&str> = version.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()));
    // Spark versions are major.minor[.patch], major 1 to 9: not a date or a build number.
    let major_ok = parts.first().is_some_and(|m| m.len() == 1 && *m != "0");
    let versioned = (2..=3).contains(&parts.len()) && numeric && major_ok;
    // What follows the version must be a separator (`-scala2.12`), not more of a word.
    let rest_ok = tag[end..].is_empty() || tag[end..].starts_with(['-', '_', '+']);
    (versioned && rest_ok).then(|| version.to_string())
}

#[cfg(test)]
mod tests;
