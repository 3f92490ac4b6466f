//! What the agent saw on one node at one moment, in our own small types.
//!
//! The agent's collectors fill a [`NodeSnapshot`]; the rules only read it. Each input is an
//! [`Observed`] value, so a source that is absent or failed is explicit and never hides the
//! others. Paths are as the host sees them (`/var/lib/kubelet/cpu_manager_state`), whatever
//! root the agent read them under.

use std::collections::BTreeMap;

use crate::CpuSet;
use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::managers::KubeletCheckpoint;
use crate::managers::devices::DeviceCheckpoint;
use crate::managers::dra::DraCheckpoint;
use crate::managers::drivers::{DriverClaim, DriverFormat};
use crate::managers::memory::MemoryCheckpoint;
use crate::spark;
use crate::topology::CpuTopology;
use crate::validate::CpuManagerConfig;

/// One input of the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed<T> {
    /// Read.
    Ok(T),
    /// Not there on this node (a normal outcome, like a node without the static policy).
    Missing { path: String },
    /// Does not apply here (why).
    NotApplicable { reason: String },
    /// Could not be read (where and why).
    Error { reason: String },
}

impl<T> Observed<T> {
    /// The value, when read.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Observed::Ok(v) => Some(v),
            _ => None,
        }
    }

    /// The report's word for this source: `ok`, `missing`, `not applicable: ..`, `error: ..`.
    pub fn status(&self) -> String {
        match self {
            Observed::Ok(_) => "ok".to_string(),
            Observed::Missing { .. } => "missing".to_string(),
            Observed::NotApplicable { reason } => format!("not applicable: {reason}"),
            Observed::Error { reason } => format!("error: {reason}"),
        }
    }
}

/// The checkpoint file as read.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFile {
    /// Host path of the file.
    pub path: String,
    /// Seconds since the file was last written (from its mtime), when known.
    pub age_seconds: Option<f64>,
    /// Its mtime, unix seconds (with the fraction), when known.
    pub modified_at: Option<f64>,
    /// The parsed file, or why the kubelet could not read it either.
    pub content: Result<Checkpoint, CheckpointError>,
    /// Its state (cpusets parsed), computed once when the file is read; every rule, the
    /// metrics and the repairs use this one.
    pub state: Result<crate::checkpoint::CpuState, CheckpointError>,
}

impl CheckpointFile {
    /// The file at host path `path`, `age_seconds` old, as parsed: its state is computed here,
    /// once.
    pub fn new(path: String, age_seconds: Option<f64>, content: Result<Checkpoint, CheckpointError>) -> Self {
        let state = content.as_ref().map_err(Clone::clone).and_then(Checkpoint::state);
        CheckpointFile {
            path,
            age_seconds,
            modified_at: None,
            content,
            state,
        }
    }
}

/// One of the other resource managers' checkpoints as read (memory, devices, DRA).
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerFile<C: KubeletCheckpoint> {
    /// Host path of the file.
    pub path: String,
    /// Seconds since the file was last written (from its mtime), when known.
    pub age_seconds: Option<f64>,
    /// The parsed file, or why it cannot be read.
    pub content: Result<C, CheckpointError>,
    /// Which kubelet layout's checksum matched (`None` when the content is unreadable).
    pub verification: Option<crate::Verification>,
    /// Its meaning, computed once when the file is read.
    pub state: Result<C::State, CheckpointError>,
}

impl<C: KubeletCheckpoint> ManagerFile<C> {
    /// The file at host path `path`, `age_seconds` old, as parsed: its checksum and state are
    /// computed here, once.
    pub fn new(path: String, age_seconds: Option<f64>, content: Result<C, CheckpointError>) -> Self {
        let verification = content.as_ref().ok().map(C::verify);
        let state = content.as_ref().map_err(Clone::clone).and_then(C::state);
        ManagerFile {
            path,
            age_seconds,
            content,
            verification,
            state,
        }
    }

    /// The file's meaning when it is readable and a kubelet accepts its checksum: what the
    /// kubelet restores at its next start, and what the stale rules judge.
    pub fn accepted_state(&self) -> Option<&C::State> {
        let accepted = self.verification.as_ref().is_some_and(crate::Verification::accepted);
        self.state.as_ref().ok().filter(|_| accepted)
    }
}

/// A DRA driver's own checkpoint, configured by path (`dra_driver_checkpoints`).
#[derive(Debug, Clone, PartialEq)]
pub struct DriverFile {
    pub format: DriverFormat,
    /// Host path of the file.
    pub path: String,
    /// Seconds since the file was last written, when known.
    pub age_seconds: Option<f64>,
    /// The claims it holds, or why it cannot be read (`Missing` when there is no file).
    pub claims: Observed<Vec<DriverClaim>>,
}

/// The other resource managers' checkpoints (`Missing` where a file is absent, the normal
/// state of a manager that is not enabled).
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerFiles {
    pub memory: Observed<ManagerFile<MemoryCheckpoint>>,
    pub devices: Observed<ManagerFile<DeviceCheckpoint>>,
    pub dra: Observed<ManagerFile<DraCheckpoint>>,
    /// The configured DRA driver checkpoints, in configuration order.
    pub drivers: Vec<DriverFile>,
}

impl ManagerFiles {
    /// Whether a readable DRA file (the kubelet's or a driver's) holds a prepared claim.
    pub fn holds_prepared_claims(&self) -> bool {
        let kubelet = self
            .dra
            .ok()
            .and_then(|f| f.state.as_ref().ok())
            .is_some_and(|s| !s.claims.is_empty());
        kubelet
            || self
                .drivers
                .iter()
                .any(|d| d.claims.ok().is_some_and(|c| !c.is_empty()))
    }

    /// The files' ages moved on by `seconds` (a snapshot assembled from earlier readings).
    pub fn add_age(&mut self, seconds: f64) {
        let bump = |age: &mut Option<f64>| *age = age.map(|a| a + seconds);
        if let Observed::Ok(f) = &mut self.memory {
            bump(&mut f.age_seconds);
        }
        if let Observed::Ok(f) = &mut self.devices {
            bump(&mut f.age_seconds);
        }
        if let Observed::Ok(f) = &mut self.dra {
            bump(&mut f.age_seconds);
        }
        for d in &mut self.drivers {
            bump(&mut d.age_seconds);
        }
    }

    /// No file read: every kubelet file missing at its default path, no driver configured.
    pub fn missing() -> Self {
        fn at<T>(file: &str) -> Observed<T> {
            Observed::Missing {
                path: format!("/var/lib/kubelet/{file}"),
            }
        }
        ManagerFiles {
            memory: at(MemoryCheckpoint::FILE),
            devices: at(DeviceCheckpoint::FILE),
            dra: at(DraCheckpoint::FILE),
            drivers: Vec::new(),
        }
    }
}

/// The kubelet's configuration as far as nodemedic uses it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KubeletConfig {
    /// Host path of the file it came from: the `--config` file, else the `--config-dir`
    /// directory when only drop-ins were read (`None`: defaults and flags only).
    pub path: Option<String>,
    /// Where the command line and the path came from.
    pub found_by: FoundBy,
    pub cpu_manager: CpuManagerConfig,
    /// `cgroupDriver`: `cgroupfs` or `systemd`.
    pub cgroup_driver: String,
    /// `cgroupRoot` (`/` when unset).
    pub cgroup_root: String,
    /// `topologyManagerPolicy` (`none` when unset).
    pub topology_manager_policy: String,
    /// `topologyManagerScope` (`container` when unset).
    pub topology_manager_scope: String,
    /// When the kubelet process started, unix seconds (from procfs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
}

/// Where nodemedic found the kubelet's command line, and with it the configuration file
/// (docs/kubelet.md, "The kubelet's configuration").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundBy {
    /// The running kubelet's command line (`/proc/<pid>/cmdline`): its `--config` and flags.
    Cmdline,
    /// No kubelet runs: the command line its systemd unit starts it with. `file` is the host
    /// path of the unit, drop-in or environment file whose line named `--config` (the unit's
    /// own file when nothing did).
    SystemdUnit { file: String },
    /// No kubelet runs and no unit says how it starts: a distribution's usual place.
    DefaultPath,
}

impl FoundBy {
    /// How the report says it, after the path: `from the systemd drop-in <file>`; `None` for
    /// the running kubelet's command line and a default path, which need no words.
    pub fn describe(&self) -> Option<String> {
        match self {
            FoundBy::SystemdUnit { file } if file.contains(".service.d/") => {
                Some(format!("from the systemd drop-in {file}"))
            }
            FoundBy::SystemdUnit { file } if file.ends_with(".service") => {
                Some(format!("from the systemd unit {file}"))
            }
            FoundBy::SystemdUnit { file } => Some(format!("from {file}, read by the kubelet's systemd unit")),
            FoundBy::Cmdline | FoundBy::DefaultPath => None,
        }
    }
}

impl std::fmt::Display for FoundBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FoundBy::Cmdline => write!(f, "cmdline"),
            FoundBy::SystemdUnit { file } => write!(f, "systemd unit {file}"),
            FoundBy::DefaultPath => write!(f, "default path"),
        }
    }
}

impl serde::Serialize for FoundBy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// cgroup v1 or v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// The container runtime a cgroup leaf belongs to, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Containerd,
    Crio,
    Docker,
    /// A bare 64-hex id (cgroupfs driver): containerd or docker.
    Unknown,
}

/// A process in a container's cgroup.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProcessInfo {
    pub pid: u32,
    /// `Cpus_allowed_list` from `/proc/<pid>/status`; `None` when the process exited first.
    pub cpus_allowed: Option<CpuSet>,
}

/// A container's cgroup leaf.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ContainerCgroup {
    /// The runtime's container id (no `containerd://` prefix).
    pub id: String,
    pub runtime: Runtime,
    /// Host path of the leaf directory.
    pub path: String,
    /// `cpuset.cpus` (`None`: empty, which on v2 means inherited).
    pub cpus: Option<CpuSet>,
    /// `cpuset.effective_cpus` (v1) or `cpuset.cpus.effective` (v2).
    pub effective_cpus: Option<CpuSet>,
    pub processes: Vec<ProcessInfo>,
}

/// A pod's cgroup and its container leaves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PodCgroup {
    pub uid: String,
    /// `guaranteed`, `burstable` or `besteffort`, from where the cgroup sits.
    pub qos: String,
    pub path: String,
    /// Processes directly in the pod cgroup (rare).
    pub pids: Vec<u32>,
    /// Each container leaf; its `processes` are the leaf's own, or, when it holds none, those of
    /// the cgroups nested below it at any depth (a container that runs systemd,
    /// Docker-in-Docker or kind nests cgroups below its leaf). Either way a container with a
    /// process anywhere below its leaf has one here.
    pub containers: Vec<ContainerCgroup>,
    /// Processes in the pod's other cgroups: neither the pod's own nor below a container leaf
    /// (CRI-O's conmon monitor, intermediate directories).
    pub other_pids: Vec<u32>,
    /// How the whole subtree was looked at.
    pub subtree: Subtree,
}

/// How a pod's whole cgroup subtree was looked at: at any depth, within a limit on the
/// directories visited (a pathological tree cannot stall a scan).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Subtree {
    /// cgroup directories visited, the pod's own included.
    pub dirs: usize,
    /// The walk stopped at its limit: what was not visited may hold processes, so the pod
    /// counts as alive.
    pub truncated: bool,
    /// cgroup v2's `cgroup.events` of the pod: `populated 1` means a process somewhere below,
    /// whatever the walk found (`None`: v1, or the file is missing).
    pub populated: Option<bool>,
}

impl PodCgroup {
    /// Processes found in the pod's cgroup subtree: the pod cgroup's own, its other cgroups',
    /// and each container's (see `containers`).
    pub fn process_count(&self) -> usize {
        self.pids.len() + self.other_pids.len() + self.containers.iter().map(|c| c.processes.len()).sum::<usize>()
    }

    /// Whether anything may still run in the pod's cgroups: a process found at any depth, the
    /// kernel saying the subtree is populated, or a walk that stopped before it saw everything.
    pub fn alive(&self) -> bool {
        self.process_count() > 0 || self.subtree.populated == Some(true) || self.subtree.truncated
    }

    /// Why [`alive`](Self::alive) says so, for evidence and refusals.
    pub fn alive_because(&self) -> Option<String> {
        let n = self.process_count();
        if n > 0 {
            Some(format!("{n} process{} in its cgroups", if n == 1 { "" } else { "es" }))
        } else if self.subtree.populated == Some(true) {
            Some("its cgroup.events says populated 1 (a process somewhere below)".into())
        } else if self.subtree.truncated {
            Some(format!(
                "its cgroup tree is larger than the {} directories looked at, so it may hold processes",
                self.subtree.dirs
            ))
        } else {
            None
        }
    }
}

/// The pod cgroups under the kubelet's `kubepods` cgroup.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CgroupTree {
    pub version: CgroupVersion,
    /// `cgroupfs` or `systemd`, as detected from the names.
    pub driver: String,
    /// Host path of the kubepods cgroup.
    pub kubepods: String,
    pub pods: Vec<PodCgroup>,
}

impl CgroupTree {
    /// The pod cgroup of `uid`.
    pub fn pod(&self, uid: &str) -> Option<&PodCgroup> {
        self.pods.iter().find(|p| p.uid == uid)
    }

    /// The container leaf with runtime id `id`, and its pod.
    pub fn container(&self, id: &str) -> Option<(&PodCgroup, &ContainerCgroup)> {
        self.pods
            .iter()
            .find_map(|p| p.containers.iter().find(|c| c.id == id).map(|c| (p, c)))
    }

    /// Every container leaf by its ID (the first, should two leaves share one): for callers
    /// that look up many IDs, where [`CgroupTree::container`] would search the tree each time
    /// (a 250-pod node has 1,000 leaves).
    pub fn containers_by_id(&self) -> std::collections::HashMap<&str, (&PodCgroup, &ContainerCgroup)> {
        let mut index = std::collections::HashMap::new();
        for p in &self.pods {
            for c in &p.containers {
                index.entry(c.id.as_str()).or_insert((p, c));
            }
        }
        index
    }
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
}

/// A pod, reduced to what the rules use.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node_name: Option<String>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub phase: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// `status.qosClass`, or computed from the spec when absent.
    pub qos_class: Option<String>,
    pub containers: Vec<ContainerInfo>,
    pub labels: BTreeMap<String, String>,
    /// Creation time, unix seconds.
    pub created_at: Option<i64>,
    /// When its last container terminated, unix seconds (finished pods).
    pub finished_at: Option<i64>,
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
}

impl PodInfo {
    /// Whether the pod has finished (its containers will not run again).
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase.as_str(), "Succeeded" | "Failed")
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

    /// The `spark-role` label: `driver` or `executor`.
    pub fn spark_role(&self) -> Option<&str> {
        self.label(spark::ROLE)
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

/// How an executor's driver was looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupMethod {
    /// The executor's controller owner reference (kind Pod): GET by name, compare UID.
    OwnerReference,
    /// `spark-role=driver,spark-app-selector=<app>` in the executor's namespace.
    Labels,
    /// The host of `SPARK_DRIVER_URL` (a pod IP, or a driver service name).
    DriverUrl,
}

/// What the lookup of an executor's driver found (filled by the agent: from the API, or from
/// a cluster-wide pods file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverLookup {
    /// The driver pod, as it is now (it may have finished).
    Found { by: LookupMethod, driver: Box<PodInfo> },
    /// No driver pod exists (`expected` names what was looked for).
    Gone { by: LookupMethod, expected: String },
    /// A pod with the driver's name exists but has another UID: the driver was recreated and
    /// this executor belongs to the old one.
    Replaced { expected_uid: String, found: Box<PodInfo> },
    /// The driver is not a pod in this cluster (client mode with an outside driver): the
    /// executor's fate cannot be judged from Kubernetes.
    External { url: String },
    /// The lookup failed (API error, rate limit): not judged this time.
    Unknown { reason: String },
}

/// A Spark scratch directory (`blockmgr-*` or `spark-*`) found on the node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LocalDir {
    /// Host path of the `blockmgr-*`/`spark-*` directory.
    pub path: String,
    /// The directory it sits in: an emptyDir volume's directory, or a configured hostPath root.
    pub root: String,
    /// The pod whose emptyDir holds it (`None` under a hostPath root).
    pub pod_uid: Option<String>,
    /// Bytes of the files below it (symlinks not followed).
    pub bytes: u64,
    /// The newest modification time below it, unix seconds.
    pub newest_mtime: Option<i64>,
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

/// One timed request to the API server, like `curl -w`: seconds from the start of the
/// request until each phase ended.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProbeSample {
    /// `get` (`/version`), `list` (this node's pods, `limit=1`) or `create_dry_run` (a minimal
    /// pod created with `dryRun=All`, through the whole admission chain).
    pub probe: String,
    /// When it started, unix seconds.
    pub at: i64,
    /// A 2xx answer arrived.
    pub ok: bool,
    /// The HTTP status, when an answer arrived.
    pub status: Option<u16>,
    /// Why it failed (connection refused, timeout, TLS, HTTP status with the Status message).
    pub error: Option<String>,
    pub dns_seconds: f64,
    pub connect_seconds: f64,
    /// TLS handshake done (equal to `connect_seconds` over plain HTTP).
    pub tls_seconds: f64,
    pub first_byte_seconds: f64,
    pub total_seconds: f64,
}

/// An admission webhook that can apply to pod creation, as configured.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct WebhookInfo {
    /// The Mutating/ValidatingWebhookConfiguration's name.
    pub configuration: String,
    /// The webhook's name (as in `apiserver_admission_webhook_admission_duration_seconds{name}`).
    pub name: String,
    /// `mutating` or `validating`.
    pub kind: String,
    /// `timeoutSeconds` (10 when unset, in admissionregistration/v1).
    pub timeout_seconds: i32,
    /// `Fail` or `Ignore`.
    pub failure_policy: String,
    /// `None`, `NoneOnDryRun`, `Some` or `Unknown`.
    pub side_effects: String,
    /// Whether it matches a pod CREATE of the probe pod (in the agent's namespace, with the
    /// probe's labels).
    pub matches_probe: bool,
    /// The namespaces of Spark pods on this node whose pod CREATEs it matches.
    pub matches_namespaces: Vec<String>,
    /// Mean admission latency between the last two readings of the API server's metrics,
    /// seconds (`None`: not readable, or no call in between).
    pub mean_latency_seconds: Option<f64>,
}

/// What the agent measured of the API server.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiObservation {
    /// Recent probe samples, oldest first (the daemon keeps a window; `probe api` its rounds).
    pub samples: Vec<ProbeSample>,
    /// When probing started, unix seconds.
    pub probing_since: i64,
    /// The last request of the agent that the API server answered (any HTTP status), unix
    /// seconds; in a one-shot scan, the last successful probe.
    pub last_success_at: Option<i64>,
    /// The first request that got no answer after the last answered one, unix seconds: when
    /// the API server became unreachable (`None` while requests are answered).
    pub unreachable_since: Option<i64>,
    /// The error of the last request that got no answer, while unreachable.
    pub last_error: Option<String>,
    /// The webhooks that apply to pod creation (`Missing` when they could not be listed).
    pub webhooks: Observed<Vec<WebhookInfo>>,
}

/// A Spark driver's configuration as the node sees it (its `spark.properties` from the
/// config-map volume under the kubelet's pod directory).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SparkConf {
    /// The Spark version: the `spark-version` label (3.3+), else the Spark image's tag
    /// ([`PodInfo::spark_version`]).
    pub version: Option<String>,
    pub properties: BTreeMap<String, String>,
    /// The driver container's literal `KUBERNETES_REQUEST_TIMEOUT` env (Spark 2.4), in ms.
    pub kubernetes_request_timeout_env: Option<String>,
    /// The driver container's literal `SPARK_SUBMIT_OPTS` env (JVM options, Spark 2.4 reads
    /// `-Dkubernetes.request.timeout` from them).
    pub spark_submit_opts_env: Option<String>,
}

/// Everything the rules look at.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSnapshot {
    pub node: String,
    /// When the snapshot was taken, unix seconds.
    pub taken_at: i64,
    pub checkpoint: Observed<CheckpointFile>,
    /// The memory, device and DRA managers' checkpoints, and the configured DRA drivers'.
    pub managers: ManagerFiles,
    pub kubelet: Observed<KubeletConfig>,
    /// Online CPUs with topology (sysfs).
    pub cpus: Observed<CpuTopology>,
    pub cgroups: Observed<CgroupTree>,
    /// procfs status (its data lives in the cgroup tree's processes).
    pub procfs: Observed<()>,
    pub pod_source: PodSource,
    /// Why there is no pod list when `pod_source` is neither `Api` nor `File`:
    /// `NotApplicable` when none was asked for (`--offline`, no API configured), `Error` when
    /// it could not be read (the API failed, the daemon's watch has not synced). Not read with
    /// a pod list. Decides the coverage of the rules that need one ([`crate::coverage`]).
    pub pod_list: Observed<()>,
    /// Pods bound to this node (empty with [`PodSource::Cgroups`] and
    /// [`PodSource::PodResources`]).
    pub pods: Vec<PodInfo>,
    /// The kubelet's own view (its PodResources API).
    pub kubelet_view: Observed<crate::kubelet_view::KubeletView>,
    /// The kubelet's version (the Node's `status.nodeInfo.kubeletVersion`; unknown offline):
    /// which of its answers a comparison may rely on ([`crate::kubelet_version`]).
    pub kubelet_version: Observed<crate::kubelet_version::VersionReading>,
    /// Things the collectors noticed and skipped (a cgroup that vanished mid-scan, an
    /// unparsable file): shown in the report, never fatal.
    pub notes: Vec<String>,
    /// Driver lookups of the Spark executors on this node, by executor pod UID.
    pub drivers: BTreeMap<String, DriverLookup>,
    /// Every driver pod of the Spark applications that have a driver on this node, wherever
    /// they run, by application id (`spark-app-selector`; a driver without one that a Job runs:
    /// `job:<the Job's UID>`, see [`spark::app_drivers_key`]); for `duplicate-driver` and
    /// `driver-blocked-by-partition`.
    pub app_drivers: BTreeMap<String, Vec<PodInfo>>,
    /// Spark scratch directories on the node (kubelet emptyDir volumes named
    /// `spark-local-dir-*`, and the configured hostPath roots).
    pub local_dirs: Observed<Vec<LocalDir>>,
    /// The API server as this node sees it (`NotApplicable` offline).
    pub api: Observed<ApiObservation>,
    /// Spark configurations of the driver pods on this node, by pod UID.
    pub spark_confs: BTreeMap<String, SparkConf>,
    /// Whether the kubelet set up the configuration volume of the drivers here that wait to
    /// start, by pod UID (for `half-submitted-driver`).
    pub conf_mounts: BTreeMap<String, ConfMount>,
    /// Warning Events of the driver pods on this node that wait to start (`Pending`), by pod
    /// UID; for `driver-blocked-by-partition`.
    pub pod_events: BTreeMap<String, Vec<PodEvent>>,
    /// The ResourceClaims of the prepared claims whose pods are gone, by `namespace/name`, as
    /// the API server shows them (none offline); for `stale-dra-claim`.
    pub resource_claims: BTreeMap<String, ClaimObject>,
    /// The other nodes that drivers of this node's applications run on, by name, as the API
    /// server shows them; for `driver-blocked-by-partition`.
    pub nodes: BTreeMap<String, NodeStatus>,
}

/// A ResourceClaim object as the API server answered for a claim a checkpoint names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ClaimObject {
    /// It exists, with this UID (another UID than the checkpoint's: recreated under the name).
    Exists { uid: String },
    /// No ResourceClaim of that name.
    Gone,
    /// It could not be asked (why).
    Unknown { reason: String },
}

/// A core `v1` Event about a pod, as much as the rules read.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PodEvent {
    /// `Normal` or `Warning`.
    pub type_: String,
    /// `FailedMount`, `FailedAttachVolume`, ...
    pub reason: String,
    pub message: String,
    /// Who reported it (`kubelet`, `attachdetach-controller`).
    pub source: Option<String>,
    /// How many times it was seen (`count`, or the series' count).
    pub count: u32,
    /// First and last seen, unix seconds.
    pub first_at: Option<i64>,
    pub last_at: Option<i64>,
}

/// Another node as the API server shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct NodeStatus {
    pub name: String,
    /// The `Ready` condition's status: `True`, `False` or `Unknown` (`None`: no condition).
    pub ready: Option<String>,
    /// Since when (`lastTransitionTime`), unix seconds.
    pub ready_since: Option<i64>,
    /// The condition's reason (`NodeStatusUnknown`: the kubelet stopped posting status).
    pub ready_reason: Option<String>,
    /// Its `NoExecute` taints' keys.
    pub no_execute_taints: Vec<String>,
}

impl NodeSnapshot {
    /// An empty snapshot of `node` with every source missing; tests build on it.
    pub fn empty(node: &str, taken_at: i64) -> Self {
        fn missing<T>(p: &str) -> Observed<T> {
            Observed::Missing { path: p.to_string() }
        }
        NodeSnapshot {
            node: node.to_string(),
            taken_at,
            checkpoint: missing("/var/lib/kubelet/cpu_manager_state"),
            managers: ManagerFiles::missing(),
            kubelet: missing("/var/lib/kubelet/config.yaml"),
            cpus: missing("/sys/devices/system/cpu/online"),
            cgroups: missing("/sys/fs/cgroup"),
            procfs: missing("/proc"),
            pod_source: PodSource::Cgroups,
            pod_list: Observed::NotApplicable {
                reason: "no pod list given".into(),
            },
            pods: Vec::new(),
            kubelet_view: missing("/var/lib/kubelet/pod-resources/kubelet.sock"),
            kubelet_version: Observed::NotApplicable {
                reason: "no Node object read".into(),
            },
            notes: Vec::new(),
            drivers: BTreeMap::new(),
            app_drivers: BTreeMap::new(),
            conf_mounts: BTreeMap::new(),
            local_dirs: missing("/var/lib/kubelet/pods"),
            api: Observed::NotApplicable {
                reason: "not probed".into(),
            },
            spark_confs: BTreeMap::new(),
            pod_events: BTreeMap::new(),
            resource_claims: BTreeMap::new(),
            nodes: BTreeMap::new(),
        }
    }

    /// The pod with `uid` in the pod list.
    pub fn pod(&self, uid: &str) -> Option<&PodInfo> {
        self.pods.iter().find(|p| p.uid == uid)
    }

    /// The CPU manager settings in force: the kubelet's, or the defaults when unknown.
    pub fn cpu_manager(&self) -> CpuManagerConfig {
        self.kubelet.ok().map(|k| k.cpu_manager.clone()).unwrap_or_default()
    }

    /// The pod and container that own runtime container id `id`: from the pod list's
    /// statuses, else from the cgroup tree (pod only).
    pub fn owner_of_container_id(&self, id: &str) -> Option<(String, Option<String>)> {
        for pod in &self.pods {
            if let Some(c) = pod.containers.iter().find(|c| c.container_id.as_deref() == Some(id)) {
                return Some((pod.uid.clone(), Some(c.name.clone())));
            }
        }
        let tree = self.cgroups.ok()?;
        tree.container(id).map(|(pod, _)| (pod.uid.clone(), None))
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
mod spark_version_tests {
    use super::*;

    #[test]
    fn spark_images_give_their_version_and_others_none() {
        let cases = [
            ("apache/spark:3.5.1", Some("3.5.1")),
            ("apache/spark:3.4.0-scala2.12-java11-ubuntu", Some("3.4.0")),
            ("gcr.io/spark-operator/spark:v3.1.1", Some("3.1.1")),
            ("gcr.io/spark-operator/spark-py:v2.4.5", Some("2.4.5")),
            ("bitnami/spark:3.3.2-debian-11-r0", Some("3.3.2")),
            ("registry.local:5000/team/spark:2.4", Some("2.4")),
            ("apache/spark:3.5.1@sha256:abcd", Some("3.5.1")),
            ("apache/spark@sha256:abcd", None),
            ("apache/spark", None),
            ("apache/spark:latest", None),
            ("apache/spark:20240101", None),
            ("apache/spark:3", None),
            ("apache/spark:3.5.1.2", None),
            ("apache/spark:3.5beta", None),
            ("registry.local:5000/team/etl-job:2.4.8", None),
            ("registry.local:5000/spark/etl:1.2.3", None),
            ("", None),
        ];
        for (image, want) in cases {
            assert_eq!(spark_version_of_image(image).as_deref(), want, "{image}");
        }
    }

    #[test]
    fn the_label_wins_over_the_image() {
        let mut p = PodInfo {
            containers: vec![
                ContainerInfo {
                    name: "istio-proxy".into(),
                    kind: Some(ContainerKind::Regular),
                    image: Some("docker.io/istio/proxyv2:1.20.0".into()),
                    ..Default::default()
                },
                ContainerInfo {
                    name: "spark-kubernetes-driver".into(),
                    kind: Some(ContainerKind::Regular),
                    image: Some("apache/spark:2.4.8".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(p.spark_version(), Some(("2.4.8".to_string(), "image")));
        p.labels.insert("spark-version".into(), "3.5.1".into());
        assert_eq!(p.spark_version(), Some(("3.5.1".to_string(), "label")));
        p.labels.clear();
        p.containers[1].image = Some("company/etl:7.1.0".into());
        assert_eq!(p.spark_version(), None);
    }
}
