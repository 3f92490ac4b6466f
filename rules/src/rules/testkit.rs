//! Builders for the rules' table tests: a static-policy node in a few lines.

use crate::CpuSet;
use crate::checkpoint::{Assignment, CpuState, EntryKey};
use crate::eviction::TAINT_UNREACHABLE;
use crate::snapshot::*;
use crate::topology::{CpuInfo, CpuTopology};
use crate::validate::CpuManagerConfig;

/// One rule's findings on `snap` under `settings`, its facts derived as a judgement derives them.
pub fn judged(
    check: crate::rules::CheckFn,
    snap: &NodeSnapshot,
    settings: &crate::settings::Settings,
) -> Vec<crate::Finding> {
    check(snap, &crate::facts::derive(snap, settings), settings)
}

pub struct SnapshotBuilder {
    snap: NodeSnapshot,
}

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

/// A pod in the list: `uid`, `default/<name>`, phase, containers `(name, container id)`.
pub fn pod(uid: &str, name: &str, phase: &str, containers: &[(&str, &str)]) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        namespace: "default".into(),
        name: name.into(),
        node_name: Some("node-a".into()),
        phase: phase.into(),
        qos_class: Some("Guaranteed".into()),
        containers: containers
            .iter()
            .map(|(n, id)| ContainerInfo {
                name: n.to_string(),
                kind: Some(ContainerKind::Regular),
                cpu_request_millis: Some(1000),
                cpu_limit_millis: Some(1000),
                container_id: (!id.is_empty()).then(|| id.to_string()),
                state: Some(if phase == "Running" { "running" } else { "terminated" }.into()),
                exit_code: None,
                waiting_reason: None,
                image: None,
                ephemeral_storage_limit_bytes: None,
                ports: vec![],
            })
            .collect(),
        ..Default::default()
    }
}

/// A container leaf with `cpus` as its cpuset and `procs` processes.
pub fn leaf(id: &str, cpus_text: &str, procs: u32) -> ContainerCgroup {
    ContainerCgroup {
        id: id.into(),
        runtime: Runtime::Containerd,
        path: format!("/sys/fs/cgroup/cpuset/kubepods/pod/{id}"),
        cpus: (!cpus_text.is_empty()).then(|| cpus(cpus_text)),
        effective_cpus: (!cpus_text.is_empty()).then(|| cpus(cpus_text)),
        processes: (0..procs)
            .map(|i| ProcessInfo {
                pid: 1000 + i,
                cpus_allowed: Some(cpus(cpus_text)),
            })
            .collect(),
    }
}

/// A pod cgroup with leaves.
pub fn pod_cgroup(uid: &str, leaves: Vec<ContainerCgroup>) -> PodCgroup {
    PodCgroup {
        uid: uid.into(),
        qos: "guaranteed".into(),
        path: format!("/sys/fs/cgroup/cpuset/kubepods/pod{uid}"),
        pids: vec![],
        containers: leaves,
        other_pids: vec![],
        subtree: Default::default(),
    }
}

/// One core per CPU, all on socket 0.
fn flat_topology(online: &CpuSet) -> CpuTopology {
    CpuTopology::new(
        online
            .iter()
            .map(|c| CpuInfo {
                cpu: c,
                core: c,
                socket: 0,
                numa: 0,
            })
            .collect(),
    )
}

impl SnapshotBuilder {
    /// A static-policy node whose online CPUs are the default set plus every entry, one
    /// core per CPU on one socket, no reserved CPUs, pods judged from cgroups (none).
    pub fn static_node(default: &str, entries: &[(&str, &str, &str)]) -> Self {
        let state = CpuState {
            policy_name: "static".into(),
            default_cpus: cpus(default),
            assignments: entries
                .iter()
                .map(|(p, c, s)| Assignment {
                    key: EntryKey::Container {
                        pod_uid: p.to_string(),
                        container: c.to_string(),
                    },
                    cpus: cpus(s),
                })
                .collect(),
            pod_assignments: vec![],
        };
        Self::from_state(state)
    }

    pub fn from_state(state: CpuState) -> Self {
        let online = state
            .assignments
            .iter()
            .fold(state.default_cpus.clone(), |acc, a| acc.union(&a.cpus));
        let topo = flat_topology(&online);
        let content = crate::Checkpoint::parse(state.to_checkpoint_json().as_bytes());
        let mut snap = NodeSnapshot::empty("node-a", 1_700_000_000);
        snap.host.listeners = Observed::Ok(vec![]);
        snap.host.checkpoint = Observed::Ok(CheckpointFile::new(
            "/var/lib/kubelet/cpu_manager_state".into(),
            Some(3600.0),
            content,
        ));
        snap.host.cpus = Observed::Ok(topo);
        snap.host.kubelet = Observed::Ok(KubeletConfig {
            path: Some("/var/lib/kubelet/config.yaml".into()),
            found_by: FoundBy::DefaultPath,
            cpu_manager: CpuManagerConfig {
                policy: "static".into(),
                ..Default::default()
            },
            cgroup_driver: "cgroupfs".into(),
            cgroup_root: "/".into(),
            topology_manager_policy: "none".into(),
            topology_manager_scope: "container".into(),
            container_runtime_endpoint: crate::snapshot::DEFAULT_RUNTIME_ENDPOINT.into(),
            eviction: Default::default(),
            started_at: None,
        });
        snap.host.cgroups = Observed::Ok(CgroupTree {
            version: CgroupVersion::V1,
            driver: "cgroupfs".into(),
            kubepods: "/sys/fs/cgroup/cpuset/kubepods".into(),
            pods: vec![],
        });
        snap.host.procfs = Observed::Ok(());
        SnapshotBuilder { snap }
    }

    /// Uses a pod list (source `file`).
    pub fn with_pod_list(mut self, pods: &[PodInfo]) -> Self {
        self.snap.pods.source = PodSource::File;
        self.snap.pods.bound = pods.to_vec();
        self
    }

    pub fn with_pod_cgroups(mut self, pods: Vec<PodCgroup>) -> Self {
        if let Observed::Ok(tree) = &mut self.snap.host.cgroups {
            tree.pods = pods;
        }
        self
    }

    pub fn with_cpu_manager(mut self, f: impl FnOnce(&mut CpuManagerConfig)) -> Self {
        if let Observed::Ok(k) = &mut self.snap.host.kubelet {
            f(&mut k.cpu_manager);
        }
        self
    }

    pub fn with_online(mut self, online: &str) -> Self {
        self.snap.host.cpus = Observed::Ok(flat_topology(&cpus(online)));
        self
    }

    pub fn checkpoint_age(mut self, seconds: f64) -> Self {
        if let Observed::Ok(f) = &mut self.snap.host.checkpoint {
            f.age_seconds = Some(seconds);
        }
        self
    }

    pub fn with_raw_checkpoint(mut self, bytes: &[u8]) -> Self {
        if let Observed::Ok(f) = &mut self.snap.host.checkpoint {
            *f = CheckpointFile::new(f.path.clone(), f.age_seconds, crate::Checkpoint::parse(bytes));
        }
        self
    }

    pub fn build(self) -> NodeSnapshot {
        self.snap
    }
}

// Spark pods, driver lookups and local dirs, for the Spark rules' tests. Pods are shaped like
// Spark 3.5 makes them (apache/spark `resource-managers/kubernetes/core`, `Constants.scala` and
// `features/Basic{Driver,Executor}FeatureStep.scala`): namespace `spark-jobs`, node `node-a`,
// the `spark-*` labels, containers `spark-kubernetes-driver` / `spark-kubernetes-executor`.

/// The clock of every Spark snapshot here, unix seconds.
pub const NOW: i64 = 1_700_000_000;

/// A Spark pod of application `app` with role `role`, named `name`, created and bound 40
/// minutes ago (finished 30 minutes ago when terminal).
pub fn spark_pod(uid: &str, name: &str, role: &str, app: &str, phase: &str) -> PodInfo {
    let container = if role == "driver" {
        "spark-kubernetes-driver"
    } else {
        "spark-kubernetes-executor"
    };
    let (state, exit_code) = match phase {
        "Running" => ("running", None),
        "Pending" => ("waiting", None),
        "Succeeded" => ("terminated", Some(0)),
        _ => ("terminated", Some(1)),
    };
    let prefix = name.split("-exec-").next().unwrap_or(name).trim_end_matches("-driver");
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("spark-app-selector".to_string(), app.to_string());
    labels.insert("spark-role".to_string(), role.to_string());
    labels.insert("spark-app-name".to_string(), prefix.to_string());
    labels.insert("spark-version".to_string(), "3.5.1".to_string());
    PodInfo {
        uid: uid.into(),
        namespace: "spark-jobs".into(),
        name: name.into(),
        node_name: Some("node-a".into()),
        phase: phase.into(),
        qos_class: Some("Burstable".into()),
        containers: vec![ContainerInfo {
            name: container.into(),
            kind: Some(ContainerKind::Regular),
            cpu_request_millis: Some(1000),
            cpu_limit_millis: None,
            container_id: Some(format!("c-{uid}")),
            state: Some(state.into()),
            exit_code,
            waiting_reason: None,
            image: Some("apache/spark:3.5.1".into()),
            ephemeral_storage_limit_bytes: None,
            ports: vec![],
        }],
        labels,
        created_at: Some(NOW - 2400),
        finished_at: (phase == "Succeeded" || phase == "Failed").then_some(NOW - 1800),
        scheduler_name: Some("default-scheduler".into()),
        scheduled_at: Some(NOW - 2400),
        ..Default::default()
    }
}

/// Executor `exec_id` of application `app`, named `<prefix>-exec-<id>`, with an emptyDir local dir.
pub fn spark_executor(uid: &str, app: &str, prefix: &str, exec_id: u32, phase: &str) -> PodInfo {
    let mut p = spark_pod(uid, &format!("{prefix}-exec-{exec_id}"), "executor", app, phase);
    p.labels.insert("spark-exec-id".into(), exec_id.to_string());
    p.labels.insert("spark-exec-resourceprofile-id".into(), "0".into());
    p.spark_driver_url = Some(format!(
        "spark://CoarseGrainedScheduler@{prefix}-driver-svc.spark-jobs.svc:7078"
    ));
    p.local_dir_volumes = vec![LocalDirVolume {
        name: "spark-local-dir-1".into(),
        ..Default::default()
    }];
    p
}

/// The driver of application `app`, named `<prefix>-driver`.
pub fn spark_driver(uid: &str, app: &str, prefix: &str, phase: &str) -> PodInfo {
    spark_pod(uid, &format!("{prefix}-driver"), "driver", app, phase)
}

/// `pod` with a controller owner reference to `driver` (cluster mode).
pub fn owned_by(mut pod: PodInfo, driver: &PodInfo) -> PodInfo {
    pod.owner_refs.push(OwnerRef {
        kind: "Pod".into(),
        name: driver.name.clone(),
        uid: driver.uid.clone(),
        controller: true,
    });
    pod
}

/// `pod` as spark-operator labels it for SparkApplication `app_name`, run `submission_id`.
pub fn by_operator(mut pod: PodInfo, app_name: &str, submission_id: &str) -> PodInfo {
    pod.labels
        .insert("sparkoperator.k8s.io/app-name".into(), app_name.into());
    pod.labels
        .insert("sparkoperator.k8s.io/launched-by-spark-operator".into(), "true".into());
    pod.labels
        .insert("sparkoperator.k8s.io/submission-id".into(), submission_id.into());
    pod
}

/// A `blockmgr-*` dir in emptyDir `spark-local-dir-1` of pod `uid`.
pub fn empty_dir_scratch(uid: &str, bytes: u64, newest_mtime: Option<i64>) -> LocalDir {
    let root = format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/spark-local-dir-1");
    LocalDir {
        path: format!("{root}/blockmgr-{uid}"),
        root,
        pod_uid: Some(uid.into()),
        bytes,
        newest_mtime,
    }
}

/// A scratch dir `name` under hostPath root `root`.
pub fn host_path_scratch(root: &str, name: &str, bytes: u64, newest_mtime: Option<i64>) -> LocalDir {
    LocalDir {
        path: format!("{root}/{name}"),
        root: root.into(),
        pod_uid: None,
        bytes,
        newest_mtime,
    }
}

impl SnapshotBuilder {
    /// A node `node-a` at [`NOW`] with no CPU manager inputs and pods from the live API.
    pub fn spark_node(pods: &[PodInfo]) -> Self {
        let mut snap = NodeSnapshot::empty("node-a", NOW);
        snap.host.listeners = Observed::Ok(vec![]);
        snap.pods.source = PodSource::Api;
        snap.pods.bound = pods.to_vec();
        SnapshotBuilder { snap }
    }

    /// The driver lookup of executor `executor_uid`.
    pub fn with_driver(mut self, executor_uid: &str, lookup: DriverLookup) -> Self {
        self.snap.api.lookups.drivers.insert(executor_uid.into(), lookup);
        self
    }

    /// Every driver pod of application `app`, wherever it runs.
    pub fn with_app_drivers(mut self, app: &str, drivers: &[PodInfo]) -> Self {
        let drivers = drivers.iter().cloned().map(std::sync::Arc::new).collect();
        self.snap.api.lookups.app_drivers.insert(app.into(), drivers);
        self
    }

    /// The Spark pods' local dirs as measured `ago` seconds before [`NOW`], the runtime's
    /// images on a disk of their own (see [`Self::with_imagefs`]).
    /// The walked dirs among `pods` are dated at the measurement.
    pub fn with_local_storage(mut self, ago: i64, mut pods: Vec<PodStorage>, filesystems: Vec<FileSystemUse>) -> Self {
        for d in pods.iter_mut().flat_map(|p| &mut p.dirs) {
            if d.measured_by == MeasuredBy::Walk {
                d.measured_at = NOW - ago;
            }
        }
        self.snap.host.local_storage = Observed::Ok(LocalStorage {
            measured_at: NOW - ago,
            window_seconds: 600.0,
            pods,
            filesystems,
            imagefs: ImageFs::Dedicated {
                path: "/var/lib/containerd".into(),
            },
            unseen: vec![],
            remembered: Default::default(),
            kubelet_stats: KubeletStats::Off,
        });
        self
    }

    /// Where the runtime's images are, against the kubelet's file system (after
    /// [`Self::with_local_storage`]).
    pub fn with_imagefs(mut self, imagefs: ImageFs) -> Self {
        if let Observed::Ok(s) = &mut self.snap.host.local_storage {
            s.imagefs = imagefs;
        }
        self
    }

    /// The Spark scratch dirs found on the node.
    pub fn with_local_dirs(mut self, dirs: Vec<LocalDir>) -> Self {
        self.snap.host.local_dirs = Observed::Ok(dirs);
        self
    }

    /// Changes where the pod list came from.
    pub fn pod_source(mut self, source: PodSource) -> Self {
        self.snap.pods.source = source;
        self
    }

    /// Uses a cgroup tree (v1, cgroupfs) with these pod cgroups.
    pub fn with_cgroup_tree(mut self, pods: Vec<PodCgroup>) -> Self {
        self.snap.host.cgroups = Observed::Ok(CgroupTree {
            version: CgroupVersion::V1,
            driver: "cgroupfs".into(),
            kubepods: "/sys/fs/cgroup/cpuset/kubepods".into(),
            pods,
        });
        self
    }
}

// API probes, admission webhooks and Spark driver configurations, for the API rules' tests.

/// A successful probe sample started `ago` seconds before [`NOW`] that took `total` seconds,
/// nearly all of it waiting for the first byte (a reused connection: no DNS, 1 ms connect,
/// 5 ms TLS).
pub fn probe_ok(probe: &str, ago: i64, total: f64) -> ProbeSample {
    ProbeSample {
        probe: probe.into(),
        at: NOW - ago,
        ok: true,
        status: Some(if probe == "create_dry_run" { 201 } else { 200 }),
        error: None,
        dns_seconds: 0.0,
        connect_seconds: 0.001_f64.min(total),
        tls_seconds: 0.005_f64.min(total),
        first_byte_seconds: (total - 0.001).max(0.0),
        total_seconds: total,
    }
}

/// A failed probe sample started `ago` seconds before [`NOW`]: HTTP `status` (or none: no
/// answer), the error text, `total` seconds spent.
pub fn probe_failed(probe: &str, ago: i64, status: Option<u16>, error: &str, total: f64) -> ProbeSample {
    ProbeSample {
        probe: probe.into(),
        at: NOW - ago,
        ok: false,
        status,
        error: Some(error.into()),
        total_seconds: total,
        ..Default::default()
    }
}

/// A probe sample with explicit phase end times (seconds from its start, like `curl -w`).
pub fn probe_phases(
    probe: &str,
    ago: i64,
    dns: f64,
    connect: f64,
    tls: f64,
    first_byte: f64,
    total: f64,
) -> ProbeSample {
    ProbeSample {
        dns_seconds: dns,
        connect_seconds: connect,
        tls_seconds: tls,
        first_byte_seconds: first_byte,
        ..probe_ok(probe, ago, total)
    }
}

/// A mutating webhook `name` of configuration `configuration` that matches the probe pod, with
/// the v1 defaults (10 s, `Fail`) and `sideEffects: None`.
pub fn webhook(configuration: &str, name: &str) -> WebhookInfo {
    WebhookInfo {
        configuration: configuration.into(),
        name: name.into(),
        kind: "mutating".into(),
        timeout_seconds: 10,
        failure_policy: "Fail".into(),
        side_effects: "None".into(),
        matches_probe: true,
        matches_namespaces: vec![],
        mean_latency_seconds: None,
    }
}

/// The configuration of a Spark driver: `version` (`spark-version`), properties `(key, value)`.
pub fn spark_conf(version: Option<&str>, properties: &[(&str, &str)]) -> SparkConf {
    SparkConf {
        version: version.map(str::to_string),
        properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        kubernetes_request_timeout_env: None,
        spark_submit_opts_env: None,
    }
}

impl SnapshotBuilder {
    /// The API as probed: `samples`, probing for the last hour, the last success the newest
    /// successful sample's start, webhooks listed (none).
    pub fn with_api(mut self, samples: Vec<ProbeSample>) -> Self {
        let last_success_at = samples.iter().filter(|s| s.ok).map(|s| s.at).max();
        self.snap.api.server = Observed::Ok(ApiObservation {
            samples,
            probing_since: NOW - 3600,
            last_success_at,
            unreachable_since: None,
            last_error: None,
            webhooks: Observed::Ok(vec![]),
        });
        self
    }

    /// Changes the API observation (after [`Self::with_api`]).
    pub fn api(mut self, f: impl FnOnce(&mut ApiObservation)) -> Self {
        if let Observed::Ok(api) = &mut self.snap.api.server {
            f(api);
        }
        self
    }

    /// The webhooks that apply to pod creation (after [`Self::with_api`]).
    pub fn with_webhooks(self, webhooks: Vec<WebhookInfo>) -> Self {
        self.api(|a| a.webhooks = Observed::Ok(webhooks))
    }

    /// The Spark configuration of driver pod `uid`.
    pub fn with_spark_conf(mut self, uid: &str, conf: SparkConf) -> Self {
        self.snap.pods.spark_confs.insert(uid.into(), conf);
        self
    }
}

// Pod Events and other nodes, for `driver-blocked-by-partition`.

/// A Warning Event `reason` with `message`, seen `count` times, the last `last_ago` seconds before
/// [`NOW`].
pub fn warning_event(reason: &str, message: &str, count: u32, last_ago: i64) -> PodEvent {
    PodEvent {
        type_: "Warning".into(),
        reason: reason.into(),
        message: message.into(),
        source: Some(
            if reason == "FailedAttachVolume" {
                "attachdetach-controller"
            } else {
                "kubelet"
            }
            .into(),
        ),
        count,
        first_at: Some(NOW - last_ago - 60),
        last_at: Some(NOW - last_ago),
    }
}

/// Node `name` whose `Ready` condition is `ready` (with `reason`) since `since_ago` seconds before
/// [`NOW`], tainted `node.kubernetes.io/unreachable:NoExecute` unless it is `True`.
pub fn node_status(name: &str, ready: &str, reason: &str, since_ago: i64) -> NodeStatus {
    NodeStatus {
        name: name.into(),
        ready: Some(ready.into()),
        ready_since: Some(NOW - since_ago),
        ready_reason: Some(reason.into()),
        no_execute_taints: if ready == "True" {
            vec![]
        } else {
            vec![TAINT_UNREACHABLE.into()]
        },
    }
}

impl SnapshotBuilder {
    /// The Warning Events of pod `uid`.
    /// What the collector found of driver `uid`'s configuration volume on this node.
    pub fn with_conf_mount(mut self, uid: &str, mount: crate::snapshot::ConfMount) -> Self {
        self.snap.pods.conf_mounts.insert(uid.to_string(), mount);
        self
    }

    pub fn with_pod_events(mut self, uid: &str, events: Vec<PodEvent>) -> Self {
        self.snap.api.lookups.pod_events.insert(uid.into(), events);
        self
    }

    /// Another node as the API server shows it.
    pub fn with_node(mut self, node: NodeStatus) -> Self {
        self.snap.api.lookups.nodes.insert(node.name.clone(), node);
        self
    }
}

/// A pod the kubelet lists: `ns/name`, its known UIDs (none: not known), containers
/// `(name, exclusive CPUs)`.
pub fn kubelet_pod(
    ns: &str,
    name: &str,
    uids: &[&str],
    containers: &[(&str, &str)],
) -> crate::kubelet_view::KubeletPod {
    crate::kubelet_view::KubeletPod {
        namespace: ns.into(),
        name: name.into(),
        uids: uids.iter().map(|u| u.to_string()).collect(),
        uid_source: (!uids.is_empty()).then_some(crate::kubelet_view::UidSource::PodList),
        containers: containers
            .iter()
            .map(|(n, c)| crate::kubelet_view::KubeletContainer {
                name: n.to_string(),
                cpus: cpus(c),
                ..Default::default()
            })
            .collect(),
    }
}

/// What the kubelet's PodResources API answered: `pods`, and its allocatable CPUs (`None`: a
/// kubelet without `GetAllocatableResources`).
pub fn kubelet_view(
    pods: Vec<crate::kubelet_view::KubeletPod>,
    allocatable: Option<&str>,
) -> crate::kubelet_view::KubeletView {
    crate::kubelet_view::KubeletView {
        socket: "/var/lib/kubelet/pod-resources/kubelet.sock".into(),
        pods,
        allocatable_cpus: match allocatable {
            Some(a) => Observed::Ok(cpus(a)),
            None => Observed::NotApplicable {
                reason: "the kubelet does not serve GetAllocatableResources (Unimplemented)".into(),
            },
        },
        checkpoint_changed: false,
        listed_at: NOW,
    }
}

// The other resource managers' checkpoints, built from their meaning (the readers' own tests
// cover the bytes): accepted as if their checksum matched, an hour old.

/// A manager file holding `state`, accepted by its checksum, `age` seconds old.
pub fn manager_file<C: crate::managers::KubeletCheckpoint>(state: C::State, age: f64) -> ManagerFile<C> {
    ManagerFile {
        path: format!("/var/lib/kubelet/{}", C::FILE),
        age_seconds: Some(age),
        content: Err(crate::CheckpointError::Value {
            field: "-".into(),
            reason: "built from its state by the testkit".into(),
        }),
        verification: Some(crate::Verification::Matched {
            layout: "V1",
            type_name: "testkit",
            v4: false,
        }),
        state: Ok(state),
    }
}

/// A memory manager entry: `uid`, `container`, blocks `(numa nodes, resource, bytes)`.
pub fn memory_entry(
    uid: &str,
    container: &str,
    blocks: &[(&[i64], &str, u64)],
) -> crate::managers::memory::MemoryAssignment {
    crate::managers::memory::MemoryAssignment {
        pod_uid: uid.into(),
        container: container.into(),
        blocks: blocks
            .iter()
            .map(|(numa, resource, bytes)| crate::managers::memory::MemoryBlock {
                numa_nodes: numa.to_vec(),
                resource: resource.to_string(),
                bytes: *bytes,
            })
            .collect(),
    }
}

/// A device manager entry: `uid`, `container`, `resource`, devices `(id, numa node)`.
pub fn device_entry(
    uid: &str,
    container: &str,
    resource: &str,
    devices: &[(&str, Option<i64>)],
) -> crate::managers::devices::DeviceEntry {
    crate::managers::devices::DeviceEntry {
        pod_uid: uid.into(),
        container: container.into(),
        resource: resource.into(),
        devices: devices
            .iter()
            .map(|(id, numa)| crate::managers::devices::Device {
                id: id.to_string(),
                numa_node: *numa,
            })
            .collect(),
        alloc_resp_bytes: 0,
    }
}

/// A claim the kubelet prepared: `uid`, `namespace/name`, pods, devices `driver/pool/device`.
pub fn dra_claim(uid: &str, claim: &str, pods: &[&str], devices: &[&str]) -> crate::managers::dra::DraClaim {
    let (namespace, name) = claim.split_once('/').unwrap_or(("default", claim));
    crate::managers::dra::DraClaim {
        claim_uid: uid.into(),
        claim_name: name.into(),
        namespace: namespace.into(),
        pod_uids: pods.iter().map(|p| p.to_string()).collect(),
        devices: devices
            .iter()
            .map(|d| {
                let mut parts = d.splitn(3, '/');
                crate::managers::dra::DraDevice {
                    driver: parts.next().unwrap_or_default().into(),
                    pool: parts.next().unwrap_or_default().into(),
                    device: parts.next().unwrap_or_default().into(),
                    requests: vec!["gpu".into()],
                }
            })
            .collect(),
    }
}

impl SnapshotBuilder {
    /// A memory manager (Static policy) checkpoint with two NUMA nodes of 64 GiB and `entries`.
    pub fn with_memory_entries(mut self, entries: Vec<crate::managers::memory::MemoryAssignment>) -> Self {
        let gib = 1u64 << 30;
        let numa = |id: i64| crate::managers::memory::NumaMemory {
            id,
            assignments: 0,
            cells: vec![id],
            resources: vec![crate::managers::memory::MemoryTable {
                resource: "memory".into(),
                total: 64 * gib,
                system_reserved: gib,
                allocatable: 63 * gib,
                reserved: 0,
                free: 63 * gib,
            }],
        };
        let state = crate::managers::memory::MemoryState {
            policy_name: "Static".into(),
            numa_nodes: vec![numa(0), numa(1)],
            assignments: entries,
            pod_assignments: vec![],
        };
        self.snap.host.managers.memory = Observed::Ok(manager_file(state, 3600.0));
        self
    }

    /// A device manager checkpoint with `entries` and the registered devices of `registered`
    /// (resource, IDs).
    pub fn with_device_entries(
        mut self,
        entries: Vec<crate::managers::devices::DeviceEntry>,
        registered: &[(&str, &[&str])],
    ) -> Self {
        let state = crate::managers::devices::DeviceState {
            layout: "V2",
            entries,
            registered: registered
                .iter()
                .map(|(r, ids)| (r.to_string(), ids.iter().map(|i| i.to_string()).collect()))
                .collect(),
        };
        self.snap.host.managers.devices = Observed::Ok(manager_file(state, 3600.0));
        self
    }

    /// A DRA manager checkpoint with `claims`.
    pub fn with_dra_claims(mut self, claims: Vec<crate::managers::dra::DraClaim>) -> Self {
        let state = crate::managers::dra::DraState { layout: "V1", claims };
        self.snap.host.managers.dra = Observed::Ok(manager_file(state, 3600.0));
        self
    }

    /// A configured NVIDIA GPU driver checkpoint with `claims`.
    pub fn with_driver_claims(mut self, claims: Vec<crate::managers::drivers::DriverClaim>) -> Self {
        self.snap.host.managers.drivers.push(DriverFile {
            format: crate::managers::drivers::DriverFormat::NvidiaGpu,
            path: "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json".into(),
            age_seconds: Some(3600.0),
            claims: Observed::Ok(claims),
        });
        self
    }

    /// The kubelet's PodResources list as the liveness source.
    pub fn with_kubelet_view(mut self, view: crate::kubelet_view::KubeletView) -> Self {
        self.snap.pods.source = PodSource::PodResources;
        self.snap.host.kubelet_view = Observed::Ok(view);
        self
    }
}

/// An emptyDir local dir on device 1 (the kubelet's file system) holding `bytes`, growing
/// `per_second` bytes a second over ten minutes.
pub fn empty_dir_use(volume: &str, bytes: u64, per_second: f64) -> StorageDir {
    StorageDir {
        volume: volume.into(),
        backing: DirBacking::EmptyDir,
        path: format!("/var/lib/kubelet/pods/x/volumes/kubernetes.io~empty-dir/{volume}"),
        device: Some(1),
        bytes,
        files: 100,
        growth_bytes_per_second: Some(per_second),
        growth_span_seconds: 600.0,
        truncated: false,
        measured_by: MeasuredBy::Walk,
        // The walk's time: [`SnapshotBuilder::with_local_storage`] sets it to the measurement's.
        measured_at: 0,
    }
}

/// The kubelet's file system (device 1) of `capacity` bytes with `available` left.
pub fn nodefs(capacity: u64, available: u64) -> FileSystemUse {
    FileSystemUse {
        device: 1,
        path: "/var/lib/kubelet".into(),
        capacity_bytes: capacity,
        available_bytes: available,
        nodefs: true,
    }
}
