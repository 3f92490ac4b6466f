//! Fixture host trees: a whole node's `/proc`, `/sys`, kubelet directory and a
//! `kubectl get pods -o json` file, written under a directory that `nodemedic scan
//! --host-root` then reads.
//!
//! The layouts follow docs/kubelet.md#where-the-live-truth-is for cgroup v1 and v2, the
//! cgroupfs and systemd drivers and the containerd, CRI-O and docker leaf names. The pods file
//! uses the shapes the API server returns for Spark pods (apache/spark
//! `resource-managers/kubernetes/core/src/main/scala/org/apache/spark/deploy/k8s/`, and
//! kubeflow/spark-operator): labels, owner references, env, volumes.
//!
//! ```no_run
//! use nodemedic_tests::hosttree::{Node, Layout, Runtime, Pod};
//! let node = Node::new("worker-1", Layout::V1Cgroupfs, Runtime::Containerd)
//!     .cpus(1, 4, 2)
//!     .pod(Pod::executor("app-1", 1).exclusive("1,5"));
//! node.write(std::path::Path::new("/tmp/worker-1")).unwrap();
//! ```

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use nodemedic_rules::CpuSet;
use nodemedic_rules::checkpoint::{Assignment, CpuState, EntryKey};
use serde_json::{Value, json};

/// cgroup version and driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    V1Cgroupfs,
    V1Systemd,
    V2Systemd,
    V2Cgroupfs,
}

/// Container runtime (decides leaf names and container ID schemes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Containerd,
    Crio,
    Docker,
}

/// A container of a fixture pod.
#[derive(Debug, Clone)]
pub struct Container {
    pub name: String,
    /// Integer CPU request (and limit) in millicores.
    pub cpu_millis: u64,
    /// The cgroup's `cpuset.cpus`; `None`: the shared pool (the checkpoint's default set).
    pub cgroup_cpus: Option<String>,
    /// Processes in the container's cgroup.
    pub processes: u32,
    /// Whether its cgroup leaf exists.
    pub has_leaf: bool,
}

/// A fixture pod.
#[derive(Debug, Clone)]
pub struct Pod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub qos: &'static str,
    pub labels: Vec<(String, String)>,
    pub containers: Vec<Container>,
    /// Checkpoint entries: (container, cpus).
    pub entries: Vec<(String, String)>,
    /// Listed in pods.json (bound to this node).
    pub in_pod_list: bool,
    /// Has a pod cgroup on the host.
    pub has_cgroup: bool,
    /// Bound to another node (listed in pods.json with that `nodeName`, no cgroup here).
    pub elsewhere: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Spark fields for the JSON object.
    pub spark: Option<SparkRole>,
}

/// Spark role of a fixture pod.
#[derive(Debug, Clone)]
pub enum SparkRole {
    Driver {
        app_id: String,
    },
    Executor {
        app_id: String,
        exec_id: u32,
        driver: String,
        driver_uid: Option<String>,
    },
}

/// A stable 64-hex container id derived from a name.
pub fn container_id(seed: &str) -> String {
    let mut out = String::new();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0..4u64 {
        for b in seed.bytes().chain(round.to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let _ = write!(out, "{h:016x}");
    }
    out
}

/// Writes `content` to `path`, creating its parent directories.
pub fn write_file(path: &Path, content: impl AsRef<[u8]>) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, content)
}

/// A stable pod UID derived from a name.
pub fn pod_uid(seed: &str) -> String {
    let id = container_id(seed);
    format!(
        "{}-{}-4{}-a{}-{}",
        &id[0..8],
        &id[8..12],
        &id[13..16],
        &id[17..20],
        &id[20..32]
    )
}

impl Pod {
    /// A plain Guaranteed pod `default/<name>` with one container `app` using `cpus` CPUs.
    pub fn new(name: &str, cpus: u64) -> Self {
        Pod {
            uid: pod_uid(name),
            namespace: "default".into(),
            name: name.into(),
            phase: "Running".into(),
            qos: "Guaranteed",
            labels: vec![],
            containers: vec![Container {
                name: "app".into(),
                cpu_millis: cpus * 1000,
                cgroup_cpus: None,
                processes: 1,
                has_leaf: true,
            }],
            entries: vec![],
            in_pod_list: true,
            has_cgroup: true,
            elsewhere: None,
            reason: None,
            message: None,
            spark: None,
        }
    }

    /// A Spark driver of application `app` (cluster mode), in namespace `spark`.
    pub fn driver(app: &str, cpus: u64) -> Self {
        let mut p = Pod::new(&format!("{app}-driver"), cpus);
        p.namespace = "spark".into();
        p.containers[0].name = "spark-kubernetes-driver".into();
        p.spark = Some(SparkRole::Driver {
            app_id: spark_app_id(app),
        });
        p.labels = vec![
            ("spark-app-selector".into(), spark_app_id(app)),
            ("spark-role".into(), "driver".into()),
            ("spark-app-name".into(), app.into()),
            ("spark-version".into(), "3.5.1".into()),
        ];
        p
    }

    /// Executor `n` of application `app`, owned by its driver.
    pub fn executor(app: &str, n: u32) -> Self {
        let mut p = Pod::new(&format!("{app}-exec-{n}"), 2);
        p.namespace = "spark".into();
        p.containers[0].name = "spark-kubernetes-executor".into();
        p.containers[0].processes = 2;
        let driver = format!("{app}-driver");
        p.spark = Some(SparkRole::Executor {
            app_id: spark_app_id(app),
            exec_id: n,
            driver_uid: Some(pod_uid(&driver)),
            driver,
        });
        p.labels = vec![
            ("spark-app-selector".into(), spark_app_id(app)),
            ("spark-role".into(), "executor".into()),
            ("spark-exec-id".into(), n.to_string()),
            ("spark-exec-resourceprofile-id".into(), "0".into()),
            ("spark-app-name".into(), app.into()),
            ("spark-version".into(), "3.5.1".into()),
        ];
        p
    }

    /// Gives the first container an exclusive checkpoint entry and the matching cgroup cpuset.
    pub fn exclusive(mut self, cpus: &str) -> Self {
        let name = self.containers[0].name.clone();
        self.entries.push((name, cpus.into()));
        self.containers[0].cgroup_cpus = Some(cpus.into());
        self
    }

    /// Sets the first container's cgroup cpuset (drift when it differs from its entry).
    pub fn cgroup_cpus(mut self, cpus: &str) -> Self {
        self.containers[0].cgroup_cpus = Some(cpus.into());
        self
    }

    /// The pod is gone: no cgroup, not in the pod list; only its checkpoint entry remains.
    pub fn gone(mut self) -> Self {
        self.in_pod_list = false;
        self.has_cgroup = false;
        self
    }

    /// The pod finished with `phase`; its containers' processes are gone.
    pub fn finished(mut self, phase: &str) -> Self {
        self.phase = phase.into();
        for c in &mut self.containers {
            c.processes = 0;
        }
        self
    }

    /// Burstable QoS, fractional request, no exclusive CPUs.
    pub fn burstable(mut self) -> Self {
        self.qos = "Burstable";
        self.containers[0].cpu_millis = 500;
        self
    }

    /// Running on another node: in the pod list, not on this host.
    pub fn on_node(mut self, node: &str) -> Self {
        self.elsewhere = Some(node.to_string());
        self.has_cgroup = false;
        self
    }

    /// Pending (bound, not started): no cgroup yet.
    pub fn pending(mut self) -> Self {
        self.phase = "Pending".into();
        self.has_cgroup = false;
        self
    }

    /// Rejected by the kubelet with `reason` and `message`.
    pub fn rejected(mut self, reason: &str, message: &str) -> Self {
        self.phase = "Failed".into();
        self.reason = Some(reason.into());
        self.message = Some(message.into());
        self.has_cgroup = false;
        self
    }

    /// The runtime ID the tree gives container `c` of this pod (its cgroup leaf's name).
    pub fn container_id(&self, c: &Container) -> String {
        container_id(&format!("{}/{}", self.uid, c.name))
    }
}

/// Spark's cluster-mode app id for a name: `spark-` and 32 hex digits.
pub fn spark_app_id(app: &str) -> String {
    format!("spark-{}", &container_id(app)[..32])
}

/// A fixture node.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub layout: Layout,
    pub runtime: Runtime,
    pub sockets: u32,
    pub cores_per_socket: u32,
    pub threads: u32,
    /// The checkpoint's default set; `None`: every online CPU not in an entry.
    pub default_cpus: Option<String>,
    /// Raw checkpoint bytes overriding the generated one.
    pub raw_checkpoint: Option<Vec<u8>>,
    /// KubeletConfiguration YAML.
    pub kubelet_yaml: String,
    /// Where the kubelet's --config points (host path); the kubelet process is written too.
    pub kubelet_config_path: String,
    pub pods: Vec<Pod>,
    /// Age of the checkpoint file in seconds (its mtime is set that far back).
    pub checkpoint_age_seconds: u64,
    /// Other files to write, by host path (the other managers' checkpoints, a DRA driver's),
    /// with the checkpoint's age.
    pub files: Vec<(String, Vec<u8>)>,
}

impl Node {
    /// A static-policy node with 8 CPUs (1 socket, 4 cores, 2 threads) and no pods.
    pub fn new(name: &str, layout: Layout, runtime: Runtime) -> Self {
        let driver = match layout {
            Layout::V1Systemd | Layout::V2Systemd => "systemd",
            _ => "cgroupfs",
        };
        Node {
            name: name.into(),
            layout,
            runtime,
            sockets: 1,
            cores_per_socket: 4,
            threads: 2,
            default_cpus: None,
            raw_checkpoint: None,
            kubelet_yaml: format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: {driver}\n\
                 cpuManagerPolicy: static\ncpuManagerReconcilePeriod: 10s\nreservedSystemCPUs: \"0,4\"\n\
                 evictionHard:\n  memory.available: 100Mi\n"
            ),
            kubelet_config_path: "/var/lib/kubelet/config.yaml".into(),
            pods: vec![],
            checkpoint_age_seconds: 3600,
            files: vec![],
        }
    }

    /// Sets the CPU topology.
    pub fn cpus(mut self, sockets: u32, cores_per_socket: u32, threads: u32) -> Self {
        self.sockets = sockets;
        self.cores_per_socket = cores_per_socket;
        self.threads = threads;
        self
    }

    /// Adds a file at host path `path` (written with the checkpoint's age).
    pub fn file(mut self, path: &str, content: Vec<u8>) -> Self {
        self.files.push((path.to_string(), content));
        self
    }

    /// Adds a pod.
    pub fn pod(mut self, pod: Pod) -> Self {
        self.pods.push(pod);
        self
    }

    /// Online CPU count.
    pub fn cpu_count(&self) -> u32 {
        self.sockets * self.cores_per_socket * self.threads
    }

    /// The checkpoint state this node's pods describe.
    pub fn state(&self) -> CpuState {
        let mut assignments = Vec::new();
        let mut taken = CpuSet::new();
        for p in &self.pods {
            for (c, cpus) in &p.entries {
                let set = CpuSet::parse(cpus).unwrap_or_default();
                taken = taken.union(&set);
                assignments.push(Assignment {
                    key: EntryKey::Container {
                        pod_uid: p.uid.clone(),
                        container: c.clone(),
                    },
                    cpus: set,
                });
            }
        }
        assignments.sort_by(|a, b| a.key.cmp(&b.key));
        let online = CpuSet::from_ids(0..self.cpu_count());
        let default_cpus = match &self.default_cpus {
            Some(d) => CpuSet::parse(d).unwrap_or_default(),
            None => online.difference(&taken),
        };
        CpuState {
            policy_name: "static".into(),
            default_cpus,
            assignments,
            pod_assignments: vec![],
        }
    }

    fn leaf_name(&self, id: &str) -> String {
        let systemd = matches!(self.layout, Layout::V1Systemd | Layout::V2Systemd);
        match (self.runtime, systemd) {
            (Runtime::Containerd, true) => format!("cri-containerd-{id}.scope"),
            (Runtime::Crio, true) => format!("crio-{id}.scope"),
            (Runtime::Docker, true) => format!("docker-{id}.scope"),
            (Runtime::Crio, false) => format!("crio-{id}"),
            (_, false) => id.to_string(),
        }
    }

    fn pod_dir(&self, kubepods: &Path, pod: &Pod) -> PathBuf {
        let qos = pod.qos.to_ascii_lowercase();
        match self.layout {
            Layout::V1Systemd | Layout::V2Systemd => {
                let u = pod.uid.replace('-', "_");
                if qos == "guaranteed" {
                    kubepods.join(format!("kubepods-pod{u}.slice"))
                } else {
                    kubepods
                        .join(format!("kubepods-{qos}.slice"))
                        .join(format!("kubepods-{qos}-pod{u}.slice"))
                }
            }
            _ => {
                if qos == "guaranteed" {
                    kubepods.join(format!("pod{}", pod.uid))
                } else {
                    kubepods.join(&qos).join(format!("pod{}", pod.uid))
                }
            }
        }
    }

    /// Writes the tree under `root` (created if needed).
    pub fn write(&self, root: &Path) -> io::Result<()> {
        let put = |rel: &str, content: &[u8]| write_file(&root.join(rel.trim_start_matches('/')), content);
        let online = CpuSet::from_ids(0..self.cpu_count());
        let state = self.state();
        put("/etc/hostname", format!("{}\n", self.name).as_bytes())?;

        // sysfs: online CPUs and topology (Linux numbering: first threads first).
        put("/sys/devices/system/cpu/online", format!("{online}\n").as_bytes())?;
        let total_cores = self.sockets * self.cores_per_socket;
        for cpu in 0..self.cpu_count() {
            let core_global = cpu % total_cores;
            let socket = core_global / self.cores_per_socket;
            let core = core_global % self.cores_per_socket;
            put(
                &format!("/sys/devices/system/cpu/cpu{cpu}/topology/core_id"),
                format!("{core}\n").as_bytes(),
            )?;
            put(
                &format!("/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                format!("{socket}\n").as_bytes(),
            )?;
            // One NUMA node per socket: the kernel's `cpuN/nodeM` link (the agent reads its name
            // only where /sys/devices/system/node has no `cpulist`, written below).
            let link = root.join(format!("sys/devices/system/cpu/cpu{cpu}/node{socket}"));
            if link.symlink_metadata().is_err() {
                std::os::unix::fs::symlink(format!("../../node/node{socket}"), link)?;
            }
        }
        // Each NUMA node's memory: 16 GiB; and its CPUs.
        for socket in 0..self.sockets {
            put(
                &format!("/sys/devices/system/node/node{socket}/meminfo"),
                format!("Node {socket} MemTotal:       16777216 kB\nNode {socket} MemFree:        8388608 kB\n")
                    .as_bytes(),
            )?;
            let cpus = (0..self.cpu_count()).filter(|cpu| cpu % total_cores / self.cores_per_socket == socket);
            put(
                &format!("/sys/devices/system/node/node{socket}/cpulist"),
                format!("{}\n", CpuSet::from_ids(cpus)).as_bytes(),
            )?;
        }

        // The node's network namespace (the host's pid 1): sshd on 22, the kubelet on 10250
        // and 10248 (localhost), and one established connection, as proc_net(5) writes them.
        put(
            "/proc/1/net/tcp",
            b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 18311 1 0000000000000000 100 0 0 10 0\n   \
1: 0100007F:2838 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21544 1 0000000000000000 100 0 0 10 0\n   \
2: 0A000311:0016 0A000301:D2A6 01 00000000:00000000 02:0009DA3B 00000000     0        0 41877 4 0000000000000000 20 4 30 10 -1\n",
        )?;
        put(
            "/proc/1/net/tcp6",
            b"  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
0: 00000000000000000000000000000000:280A 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21547 1 0000000000000000 100 0 0 10 0\n",
        )?;

        // The kubelet: a process whose command line names its config, and the config.
        let mut next_pid = 1000u32;
        let kubelet_pid = next_pid;
        next_pid += 1;
        let cmdline = format!(
            "/usr/bin/kubelet\0--config={}\0--kubeconfig=/etc/kubernetes/kubelet.conf\0--container-runtime-endpoint=unix:///run/containerd/containerd.sock\0--v=2\0",
            self.kubelet_config_path
        );
        put(&format!("/proc/{kubelet_pid}/cmdline"), cmdline.as_bytes())?;
        put(
            &format!("/proc/{kubelet_pid}/status"),
            status("kubelet", kubelet_pid, &online).as_bytes(),
        )?;
        put(&self.kubelet_config_path, self.kubelet_yaml.as_bytes())?;

        // The checkpoint, with its mtime in the past.
        let cp_rel = "/var/lib/kubelet/cpu_manager_state";
        match &self.raw_checkpoint {
            Some(raw) => put(cp_rel, raw)?,
            None => put(cp_rel, state.to_checkpoint_json().as_bytes())?,
        }
        let cp = root.join(cp_rel.trim_start_matches('/'));
        let mtime = std::time::SystemTime::now() - std::time::Duration::from_secs(self.checkpoint_age_seconds);
        std::fs::File::options().write(true).open(&cp)?.set_modified(mtime)?;
        for (path, content) in &self.files {
            put(path, content)?;
            let file = root.join(path.trim_start_matches('/'));
            std::fs::File::options().write(true).open(&file)?.set_modified(mtime)?;
        }

        // cgroups.
        let (ctrl, v2) = match self.layout {
            Layout::V1Cgroupfs | Layout::V1Systemd => ("/sys/fs/cgroup/cpuset", false),
            Layout::V2Systemd | Layout::V2Cgroupfs => ("/sys/fs/cgroup", true),
        };
        let effective_name = if v2 {
            "cpuset.cpus.effective"
        } else {
            "cpuset.effective_cpus"
        };
        if v2 {
            put(
                "/sys/fs/cgroup/cgroup.controllers",
                b"cpuset cpu io memory hugetlb pids rdma misc\n",
            )?;
        }
        put(&format!("{ctrl}/cpuset.cpus"), format!("{online}\n").as_bytes())?;
        put(&format!("{ctrl}/{effective_name}"), format!("{online}\n").as_bytes())?;
        let kubepods_rel = match self.layout {
            Layout::V1Systemd | Layout::V2Systemd => format!("{ctrl}/kubepods.slice"),
            _ => format!("{ctrl}/kubepods"),
        };
        let kubepods = root.join(kubepods_rel.trim_start_matches('/'));
        std::fs::create_dir_all(&kubepods)?;
        for pod in self.pods.iter().filter(|p| p.has_cgroup) {
            let dir = self.pod_dir(&kubepods, pod);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("cgroup.procs"), b"")?;
            // The sandbox (pause) container: one process, never in the pod's statuses.
            let pause_id = container_id(&format!("{}/pause", pod.uid));
            // The kubelet stops the sandbox of a finished pod; its cgroup stays until cleanup.
            let pause_pids: Vec<u32> = if matches!(pod.phase.as_str(), "Succeeded" | "Failed") {
                vec![]
            } else {
                vec![next_pid]
            };
            next_pid += pause_pids.len() as u32;
            self.write_leaf(&dir.join(self.leaf_name(&pause_id)), &online, &pause_pids, v2)?;
            for pid in &pause_pids {
                put(
                    &format!("/proc/{pid}/status"),
                    status("pause", *pid, &online).as_bytes(),
                )?;
            }
            if self.runtime == Runtime::Crio {
                std::fs::create_dir_all(dir.join(format!("crio-conmon-{pause_id}.scope")))?;
            }
            for c in pod.containers.iter().filter(|c| c.has_leaf) {
                let cpus = match &c.cgroup_cpus {
                    Some(s) => CpuSet::parse(s).unwrap_or_default(),
                    None => state.default_cpus.clone(),
                };
                let pids: Vec<u32> = (0..c.processes).map(|i| next_pid + i).collect();
                next_pid += c.processes;
                let leaf = dir.join(self.leaf_name(&pod.container_id(c)));
                self.write_leaf(&leaf, &cpus, &pids, v2)?;
                for pid in pids {
                    let comm = if c.name.starts_with("spark") { "java" } else { "app" };
                    put(&format!("/proc/{pid}/status"), status(comm, pid, &cpus).as_bytes())?;
                    put(&format!("/proc/{pid}/cmdline"), format!("/usr/bin/{comm}\0").as_bytes())?;
                }
            }
        }
        put(
            "/pods.json",
            serde_json::to_string_pretty(&self.pods_json())
                .unwrap_or_default()
                .as_bytes(),
        )?;
        Ok(())
    }

    fn write_leaf(&self, leaf: &Path, cpus: &CpuSet, pids: &[u32], v2: bool) -> io::Result<()> {
        std::fs::create_dir_all(leaf)?;
        std::fs::write(leaf.join("cpuset.cpus"), format!("{cpus}\n"))?;
        let effective = if v2 {
            "cpuset.cpus.effective"
        } else {
            "cpuset.effective_cpus"
        };
        std::fs::write(leaf.join(effective), format!("{cpus}\n"))?;
        let procs: String = pids.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(leaf.join("cgroup.procs"), procs)
    }

    /// The `kubectl get pods -A -o json` view of this node's listed pods.
    pub fn pods_json(&self) -> Value {
        let scheme = match self.runtime {
            Runtime::Containerd => "containerd",
            Runtime::Crio => "cri-o",
            Runtime::Docker => "docker",
        };
        let items: Vec<Value> = self
            .pods
            .iter()
            .filter(|p| p.in_pod_list)
            .map(|p| {
                let labels: serde_json::Map<String, Value> = p.labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                let containers: Vec<Value> = p
                    .containers
                    .iter()
                    .map(|c| {
                        let cpu = if c.cpu_millis % 1000 == 0 { format!("{}", c.cpu_millis / 1000) } else { format!("{}m", c.cpu_millis) };
                        let resources = if p.qos == "Guaranteed" {
                            json!({"requests": {"cpu": cpu, "memory": "4Gi"}, "limits": {"cpu": cpu, "memory": "4Gi"}})
                        } else {
                            json!({"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"memory": "2Gi"}})
                        };
                        let mut obj = json!({
                            "name": c.name, "image": "apache/spark:3.5.1", "imagePullPolicy": "IfNotPresent",
                            "resources": resources,
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                        });
                        if let Some(role) = &p.spark {
                            obj["env"] = spark_env(role, p);
                            obj["volumeMounts"] = json!([{"name": "spark-local-dir-1", "mountPath": "/var/data/spark-0c4d6e1a-8f3b-4c1d-9e2a-5b7f6d8c9a0e"}]);
                        }
                        obj
                    })
                    .collect();
                let statuses: Vec<Value> = if p.phase == "Pending" || p.reason.is_some() {
                    vec![]
                } else {
                    p.containers
                        .iter()
                        .map(|c| {
                            let state = if p.phase == "Running" {
                                json!({"running": {"startedAt": "2026-11-21T08:00:05Z"}})
                            } else {
                                json!({"terminated": {"exitCode": if p.phase == "Succeeded" {0} else {1}, "reason": if p.phase == "Succeeded" {"Completed"} else {"Error"}, "startedAt": "2026-11-21T08:00:05Z", "finishedAt": "2026-11-21T08:40:00Z"}})
                            };
                            json!({
                                "name": c.name, "ready": p.phase == "Running", "restartCount": 0, "started": p.phase == "Running",
                                "image": "docker.io/apache/spark:3.5.1", "imageID": "docker.io/apache/spark@sha256:6d5e0c3a",
                                "containerID": format!("{scheme}://{}", p.container_id(c)), "state": state,
                            })
                        })
                        .collect()
                };
                let mut meta = json!({
                    "name": p.name, "namespace": p.namespace, "uid": p.uid, "resourceVersion": "48213",
                    "creationTimestamp": "2026-11-21T08:00:00Z", "labels": labels,
                });
                if let Some(SparkRole::Executor { driver, driver_uid: Some(uid), .. }) = &p.spark {
                    meta["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": driver, "uid": uid, "controller": true}]);
                }
                let mut spec = json!({
                    "nodeName": p.elsewhere.as_deref().unwrap_or(&self.name), "restartPolicy": if matches!(p.spark, Some(SparkRole::Executor{..})) {"Never"} else {"Always"},
                    "schedulerName": "default-scheduler", "serviceAccountName": "spark", "containers": containers,
                });
                if p.spark.is_some() {
                    spec["volumes"] = json!([{"name": "spark-local-dir-1", "emptyDir": {}}]);
                }
                let mut status = json!({"phase": p.phase, "qosClass": p.qos, "startTime": "2026-11-21T08:00:01Z", "containerStatuses": statuses});
                if let Some(r) = &p.reason {
                    status["reason"] = json!(r);
                }
                if let Some(m) = &p.message {
                    status["message"] = json!(m);
                }
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status})
            })
            .collect();
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
    }
}

fn spark_env(role: &SparkRole, p: &Pod) -> Value {
    match role {
        SparkRole::Driver { app_id } => json!([
            {"name": "SPARK_APPLICATION_ID", "value": app_id},
            {"name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
            {"name": "SPARK_LOCAL_DIRS", "value": "/var/data/spark-0c4d6e1a-8f3b-4c1d-9e2a-5b7f6d8c9a0e"},
        ]),
        SparkRole::Executor {
            app_id,
            exec_id,
            driver,
            ..
        } => json!([
            {"name": "SPARK_DRIVER_URL", "value": format!("spark://CoarseGrainedScheduler@{driver}-svc.{}.svc:7078", p.namespace)},
            {"name": "SPARK_EXECUTOR_CORES", "value": "2"},
            {"name": "SPARK_EXECUTOR_MEMORY", "value": "3g"},
            {"name": "SPARK_APPLICATION_ID", "value": app_id},
            {"name": "SPARK_EXECUTOR_ID", "value": exec_id.to_string()},
            {"name": "SPARK_RESOURCE_PROFILE_ID", "value": "0"},
            {"name": "SPARK_EXECUTOR_POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "SPARK_EXECUTOR_POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
            {"name": "SPARK_LOCAL_DIRS", "value": "/var/data/spark-0c4d6e1a-8f3b-4c1d-9e2a-5b7f6d8c9a0e"},
        ]),
    }
}

fn status(comm: &str, pid: u32, cpus: &CpuSet) -> String {
    format!(
        "Name:\t{comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t1\n\
         Threads:\t1\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t12\n"
    )
}
