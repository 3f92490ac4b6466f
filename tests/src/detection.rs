//! Detection latency (issue 16): how long the running daemon takes to report a change on a
//! 250-pod node, from the change to the `/metrics` sample that shows it. Shared by
//! `tests/tests/detection.rs` (a few rounds, a generous bound) and the `detection-bench`
//! program (many rounds, percentiles).
//!
//! A [`Scenario`] is the generated node of [`crate::scenarios::big_node`] (256 CPUs, cgroup v1,
//! cgroupfs, containerd; every fourth pod pinned to 2 exclusive CPUs) as node [`NODE`], its pods
//! and their drivers in the API server double, the Node object with the pod CIDR [`POD_CIDR`],
//! and the real `nodemedic run` on its host tree with every periodic timer far away
//! ([`DAEMON_FLAGS`]: rules judged again every 300 s, a full rescan every 600 s, driver lookups
//! cached 300 s). A detection within seconds can only come from the daemon reacting to the
//! change itself. Three [`Action`]s, each repeatable on the one running daemon with another pod
//! every round:
//!
//! - [`Action::StaleEntry`]: a pinned pod's cgroups are removed from the host tree (its
//!   processes' `/proc` entries with them) and the pod is deleted in the API, while its
//!   checkpoint entry stays: `nodemedic_findings{rule="stale-cpu-assignment"}` must rise.
//! - [`Action::Orphan`]: a fresh client-mode application (a notebook pod on this node, IP in the
//!   node's pod CIDR, no Spark labels; two executors on this node with no owner reference whose
//!   `SPARK_DRIVER_URL` names that IP) is created, host cgroups first, and the daemon is given
//!   the time to see it alive; then the notebook's cgroups are removed and the pod deleted:
//!   `nodemedic_findings{rule="orphaned-executor"}` must rise. The executors are then cleaned
//!   up (not measured).
//! - [`Action::CpusetDrift`]: a pinned container's `cpuset.cpus` is rewritten in place with
//!   the checkpoint's shared pool (as the kernel's cgroupfs is written: the processes'
//!   `Cpus_allowed_list` and `cpuset.effective_cpus` first, `cpuset.cpus` last):
//!   `nodemedic_findings{rule="cpuset-drift"}` must rise. Exclusive containers are judged
//!   without grace.
//!
//! Each round first waits for the daemon to be quiet (no scan for half a second), takes the
//! rule's findings as its baseline, starts the clock just before the first write, and scrapes
//! `/metrics` every [`POLL`] until the findings exceed the baseline; the latency is taken when
//! the scrape that shows it has returned (an upper bound, within one poll period and one scrape
//! of the change).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodemedic_rules::CpuSet;
use serde_json::{Value, json};

use crate::agent::{Agent, NODE};
use crate::apiserver::ApiServer;
use crate::hosttree::{Node, container_id, pod_uid};
use crate::sparkpods::{SparkApp, SparkVersion, now_rfc3339};

/// The node's pod CIDR (`spec.podCIDR` of its Node object); client-mode drivers get IPs in it.
pub const POD_CIDR: &str = "10.244.1.0/24";
/// The namespace of the client-mode applications.
pub const CLIENT_NAMESPACE: &str = "analytics";
/// How often `/metrics` is scraped while waiting for a detection.
pub const POLL: Duration = Duration::from_millis(20);
/// How long setup steps (the daemon seeing a new application, dropping cleaned-up orphans)
/// may take before a round gives up.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(20);
/// The daemon's settings: every periodic timer far beyond any bound measured here.
/// `--full-scan-interval-seconds` is left out when the binary does not know it (a daemon from
/// before issue 16, measured for comparison).
pub const DAEMON_FLAGS: &[&str] = &[
    "--scan-interval-seconds",
    "300",
    "--full-scan-interval-seconds",
    "600",
    "--driver-cache-ttl-seconds",
    "300",
    "--lease-duration-seconds",
    "60",
];
/// Executors of each client-mode application.
const EXECUTORS_PER_APP: u32 = 2;
/// Process IDs of the pods written after the node (the generated tree uses 1000 and up).
const FIRST_PID: u32 = 200_000;
/// The most rounds of one action: the pinned pods are shared by two actions, and the client
/// applications' IPs must stay in [`POD_CIDR`].
pub const MAX_ROUNDS: usize = 31;

/// What a round changes on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    StaleEntry,
    Orphan,
    CpusetDrift,
}

impl Action {
    pub const ALL: [Action; 3] = [Action::StaleEntry, Action::Orphan, Action::CpusetDrift];

    /// The rule whose findings must rise.
    pub fn rule(self) -> &'static str {
        match self {
            Action::StaleEntry => "stale-cpu-assignment",
            Action::Orphan => "orphaned-executor",
            Action::CpusetDrift => "cpuset-drift",
        }
    }

    /// What the round does, for tables.
    pub fn describe(self) -> &'static str {
        match self {
            Action::StaleEntry => "pinned pod deleted in the API, its cgroups removed, its checkpoint entry kept",
            Action::Orphan => "client-mode driver pod (on this node) deleted, its cgroups removed",
            Action::CpusetDrift => "pinned container's cpuset.cpus rewritten with the shared pool",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Action::StaleEntry => "stale entry",
            Action::Orphan => "orphaned executor",
            Action::CpusetDrift => "cpuset drift",
        })
    }
}

/// How one round ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// The metric showed it this long after the change.
    Detected(Duration),
    /// Not shown within the timeout (given).
    Missed(Duration),
}

impl Outcome {
    /// Milliseconds; infinite for a miss.
    pub fn ms(self) -> f64 {
        match self {
            Outcome::Detected(d) => d.as_secs_f64() * 1000.0,
            Outcome::Missed(_) => f64::INFINITY,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Detected(d) => write!(f, "{:.0} ms", d.as_secs_f64() * 1000.0),
            Outcome::Missed(t) => write!(f, "not within {} s", t.as_secs_f64()),
        }
    }
}

/// The node, the API server double and the daemon, with what the rounds have used up.
#[derive(Debug)]
pub struct Scenario {
    pub api: ApiServer,
    pub agent: Agent,
    pub node: Node,
    /// What the daemon was started with, and anything left out (see [`DAEMON_FLAGS`]).
    pub notes: Vec<String>,
    /// Indices in `node.pods` of the pinned pods: stale rounds take them from the front,
    /// drift rounds from the back.
    pinned: Vec<usize>,
    stale_used: usize,
    drift_used: usize,
    apps_used: u32,
    next_pid: u32,
    /// The checkpoint's shared pool, as a cpuset file holds it.
    default_cpus: String,
    online_cpus: String,
}

impl Scenario {
    /// Builds the node of `pods` pods, fills the API server double, starts the daemon and waits
    /// until it has scanned and gone quiet with no finding of the measured rules.
    pub async fn start(pods: usize) -> Result<Scenario, String> {
        let api = ApiServer::start()
            .await
            .map_err(|e| format!("API server double: {e}"))?;
        let store = api.store();
        let mut node = crate::scenarios::big_node(pods, 5);
        node.name = NODE.into();
        crate::scenarios::seed_api(&store, &node);
        let ready = crate::cluster::node_object()["status"].clone();
        store.modify("nodes", None, NODE, |n| {
            n["spec"] = json!({"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]});
            n["status"] = ready;
        });
        store.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CLIENT_NAMESPACE}}));
        let mut notes = vec![];
        let flags = daemon_flags(&mut notes);
        notes.insert(0, format!("nodemedic run {}", flags.join(" ")));
        let agent = Agent::start(&api, Some(&node), &flags);
        let state = node.state();
        let pinned = (0..node.pods.len())
            .filter(|&i| !node.pods[i].entries.is_empty() && node.pods[i].has_cgroup)
            .collect();
        let online = CpuSet::from_ids(0..node.cpu_count());
        let scenario = Scenario {
            api,
            agent,
            node,
            notes,
            pinned,
            stale_used: 0,
            drift_used: 0,
            apps_used: 0,
            next_pid: FIRST_PID,
            default_cpus: format!("{}\n", state.default_cpus),
            online_cpus: format!("{online}\n"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while scenario.agent.get("/readyz").0 != 200 {
            if Instant::now() > deadline {
                return Err(format!("the daemon is not ready after 60 s\n{}", scenario.log_tail(40)));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        scenario.quiet(Duration::from_secs(1), Duration::from_secs(20)).await;
        let metrics = scenario.metrics().unwrap_or_default();
        for action in Action::ALL {
            let n = findings(&metrics, action.rule());
            if n != Some(0.0) {
                return Err(format!(
                    "the generated node should start without {} findings, the daemon shows {n:?}\n{}",
                    action.rule(),
                    scenario.log_tail(40)
                ));
            }
        }
        Ok(scenario)
    }

    /// Runs one round of `action`, waiting at most `timeout` for the detection. `Err` when the
    /// round could not be staged (no pod left, the daemon never saw the new application).
    pub async fn round(&mut self, action: Action, timeout: Duration) -> Result<Outcome, String> {
        match action {
            Action::StaleEntry => self.stale_entry(timeout).await,
            Action::Orphan => self.orphan(timeout).await,
            Action::CpusetDrift => self.cpuset_drift(timeout).await,
        }
    }

    /// A pinned pod is deleted in the API and its cgroups removed; its entry stays.
    pub async fn stale_entry(&mut self, timeout: Duration) -> Result<Outcome, String> {
        let i = self.take_pinned(true)?;
        let pod = self.node.pods[i].clone();
        let root = self.agent.host_root().to_path_buf();
        self.quiet(Duration::from_millis(500), Duration::from_secs(5)).await;
        let before = self.baseline(Action::StaleEntry)?;
        let start = Instant::now();
        // As on a node: the containers stop and the kubelet removes the pod's cgroups, then the
        // pod object goes.
        remove_pod_cgroups(&root, &pod.uid)?;
        self.api
            .store()
            .delete("pods", Some(&pod.namespace), &pod.name)
            .ok_or_else(|| format!("pod {}/{} is not in the API server double", pod.namespace, pod.name))?;
        Ok(self.detect(Action::StaleEntry, start, before, timeout).await)
    }

    /// A fresh client-mode application, seen alive by the daemon, loses its driver pod.
    pub async fn orphan(&mut self, timeout: Duration) -> Result<Outcome, String> {
        if self.apps_used as usize >= MAX_ROUNDS {
            return Err(format!("at most {MAX_ROUNDS} orphan rounds"));
        }
        let r = self.apps_used;
        self.apps_used += 1;
        let root = self.agent.host_root().to_path_buf();
        let store = self.api.store();
        let app = SparkApp::new(SparkVersion::V3_5, CLIENT_NAMESPACE, &format!("adhoc-query-{r}"));
        let driver_ip = format!("10.244.1.{}", 31 + r);
        let driver = client_driver(
            &format!("jupyter-user-{r}"),
            &pod_uid(&format!("detection-driver-{r}")),
            &driver_ip,
        );
        let executors: Vec<Value> = (1..=EXECUTORS_PER_APP)
            .map(|n| {
                let mut e = app.executor(n, &pod_uid(&format!("detection-exec-{r}-{n}")), NODE, None, &driver_ip);
                let ip = format!("10.244.1.{}", 100 + r * EXECUTORS_PER_APP + n - 1);
                e["status"]["podIP"] = json!(ip);
                e["status"]["podIPs"] = json!([{"ip": ip}]);
                e
            })
            .collect();

        self.quiet(Duration::from_millis(500), Duration::from_secs(5)).await;
        let metrics = self.metrics().ok_or("no /metrics")?;
        let apps_before = findings(&metrics, "executor-without-owner").ok_or("no executor-without-owner findings")?;
        let before = findings(&metrics, Action::Orphan.rule()).ok_or("no orphaned-executor findings")?;
        // As on a node: the containers (and their cgroups) exist before the API reports the pods
        // running.
        for pod in std::iter::once(&driver).chain(&executors) {
            self.next_pid = write_pod_cgroups(&root, pod, &self.default_cpus, &self.online_cpus, self.next_pid)?;
        }
        store.create(driver.clone());
        for e in &executors {
            store.create(e.clone());
        }
        // Seen alive: the application counted among the executors without owner, and time for
        // the driver lookup that follows and the judgement after it.
        if let Outcome::Missed(_) = self
            .poll(Instant::now(), SETUP_TIMEOUT, |m| {
                findings(m, "executor-without-owner").is_some_and(|n| n > apps_before)
            })
            .await
        {
            return Err(format!(
                "the daemon did not count the executors of client-mode application {r} within {} s\n{}",
                SETUP_TIMEOUT.as_secs(),
                self.log_tail(40)
            ));
        }
        self.quiet(Duration::from_secs(1), Duration::from_secs(10)).await;
        let alive = findings(&self.metrics().unwrap_or_default(), Action::Orphan.rule());
        if alive != Some(before) {
            return Err(format!(
                "client-mode application {r}: orphaned-executor findings {alive:?} (was {before}) while its driver still runs"
            ));
        }

        let start = Instant::now();
        remove_pod_cgroups(&root, json_str(&driver, "/metadata/uid"))?;
        store.delete("pods", Some(CLIENT_NAMESPACE), json_str(&driver, "/metadata/name"));
        let outcome = self.detect(Action::Orphan, start, before, timeout).await;

        // Someone cleans the orphans up; the next round needs the count back where it was.
        for e in &executors {
            remove_pod_cgroups(&root, json_str(e, "/metadata/uid"))?;
            store.delete("pods", Some(CLIENT_NAMESPACE), json_str(e, "/metadata/name"));
        }
        if let Outcome::Missed(_) = self
            .poll(Instant::now(), SETUP_TIMEOUT, |m| {
                findings(m, Action::Orphan.rule()).is_some_and(|n| n <= before)
            })
            .await
        {
            return Err(format!(
                "client-mode application {r}: the daemon still counts its orphaned executors {} s after they were deleted",
                SETUP_TIMEOUT.as_secs()
            ));
        }
        Ok(outcome)
    }

    /// A pinned container's cpuset is rewritten with the shared pool.
    pub async fn cpuset_drift(&mut self, timeout: Duration) -> Result<Outcome, String> {
        let i = self.take_pinned(false)?;
        let pod = self.node.pods[i].clone();
        let (container, cpus) = pod.entries[0].clone();
        let Some(dir) = find_pod_dir(self.agent.host_root(), &pod.uid) else {
            return Err(format!("pod {} has no cgroup", pod.uid));
        };
        let leaf = dir.join(container_id(&format!("{}/{container}", pod.uid)));
        let now = std::fs::read_to_string(leaf.join("cpuset.cpus")).map_err(|e| format!("{}: {e}", leaf.display()))?;
        let (now, want) = (CpuSet::parse(now.trim()), CpuSet::parse(&cpus));
        if now.is_err() || now.ok() != want.ok() {
            return Err(format!("{}: cpuset.cpus is not its entry's {cpus}", leaf.display()));
        }
        self.quiet(Duration::from_millis(500), Duration::from_secs(5)).await;
        let before = self.baseline(Action::CpusetDrift)?;
        let start = Instant::now();
        rewrite_cpuset(self.agent.host_root(), &leaf, &self.default_cpus)?;
        Ok(self.detect(Action::CpusetDrift, start, before, timeout).await)
    }

    /// The body of one `/metrics` scrape.
    pub fn metrics(&self) -> Option<String> {
        let (code, body) = self.agent.get("/metrics");
        (code == 200).then_some(body)
    }

    /// The last `lines` lines of the daemon's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.agent.log();
        let all: Vec<&str> = log.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        format!("--- the daemon's log, last {lines} lines\n{tail}")
    }

    /// Waits until neither the daemon's count of logged scans nor its last scan time has moved
    /// for `window`, or `max` has passed.
    pub async fn quiet(&self, window: Duration, max: Duration) {
        let read = || {
            let ts = self
                .metrics()
                .and_then(|m| sample(&m, "nodemedic_last_scan_timestamp_seconds", None));
            (self.agent.scans(), ts.map(f64::to_bits))
        };
        let started = Instant::now();
        let mut last = read();
        let mut since = Instant::now();
        while since.elapsed() < window && started.elapsed() < max {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = read();
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
    }

    fn take_pinned(&mut self, front: bool) -> Result<usize, String> {
        if self.stale_used + self.drift_used >= self.pinned.len() {
            return Err(format!(
                "all {} pinned pods are used up (stale and drift rounds share them)",
                self.pinned.len()
            ));
        }
        Ok(if front {
            self.stale_used += 1;
            self.pinned[self.stale_used - 1]
        } else {
            self.drift_used += 1;
            self.pinned[self.pinned.len() - self.drift_used]
        })
    }

    fn baseline(&self, action: Action) -> Result<f64, String> {
        let m = self.metrics().ok_or("no /metrics")?;
        findings(&m, action.rule()).ok_or_else(|| format!("no {} findings in /metrics", action.rule()))
    }

    async fn detect(&self, action: Action, start: Instant, before: f64, timeout: Duration) -> Outcome {
        self.poll(start, timeout, |m| {
            findings(m, action.rule()).is_some_and(|n| n > before)
        })
        .await
    }

    /// Scrapes every [`POLL`] until `check` holds on a scrape: `Detected` with the time from
    /// `start` to that scrape's end, or `Missed` once `timeout` has passed since `start`.
    async fn poll(&self, start: Instant, timeout: Duration, mut check: impl FnMut(&str) -> bool) -> Outcome {
        loop {
            let body = self.metrics();
            let at = start.elapsed();
            if body.as_deref().is_some_and(&mut check) {
                return Outcome::Detected(at);
            }
            if at >= timeout {
                return Outcome::Missed(timeout);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// `nodemedic run`'s flags for the scenario: [`DAEMON_FLAGS`], without
/// `--full-scan-interval-seconds` when this nodemedic does not know it (noted in `notes`).
fn daemon_flags(notes: &mut Vec<String>) -> Vec<&'static str> {
    let help = crate::nodemedic(&["run", "--help"]);
    let known = help.stdout.contains("--full-scan-interval-seconds");
    let mut flags = vec![];
    let mut it = DAEMON_FLAGS.iter();
    while let (Some(flag), Some(value)) = (it.next(), it.next()) {
        if *flag == "--full-scan-interval-seconds" && !known {
            notes.push(format!(
                "{} does not know {flag} (a daemon from before issue 16): started without it",
                crate::nodemedic_bin().display()
            ));
            continue;
        }
        flags.extend([*flag, *value]);
    }
    flags
}

/// The sum of the samples of metric `name` (with the label `label` = value when given), or
/// `None` when there is none.
pub fn sample(metrics: &str, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    let want = label.map(|(k, v)| format!("{k}=\"{v}\""));
    let mut total = None;
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        if want.as_deref().is_some_and(|w| !labels.split(',').any(|l| l == w)) {
            continue;
        }
        if let Ok(v) = value.trim().parse::<f64>() {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

/// `nodemedic_findings` of `rule`, all severities.
pub fn findings(metrics: &str, rule: &str) -> Option<f64> {
    sample(metrics, "nodemedic_findings", Some(("rule", rule)))
}

fn json_str<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// A client-mode driver as it runs in a cluster: a notebook pod (Burstable, no Spark labels)
/// on [`NODE`] with IP `ip`, where `spark-submit --deploy-mode client` runs.
fn client_driver(name: &str, uid: &str, ip: &str) -> Value {
    let container = "notebook";
    let image = "quay.io/jupyter/pyspark-notebook:spark-3.5.1";
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": CLIENT_NAMESPACE, "uid": uid,
                     "creationTimestamp": now_rfc3339(-60),
                     "labels": {"app": "jupyterhub", "component": "singleuser-server"}},
        "spec": {"nodeName": NODE, "restartPolicy": "OnFailure", "schedulerName": "default-scheduler",
                 "containers": [{"name": container, "image": image,
                                 "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.10",
                   "startTime": now_rfc3339(-58),
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(-59)}],
                   "containerStatuses": [{"name": container, "ready": true, "restartCount": 0, "started": true,
                       "image": image, "imageID": "",
                       "containerID": format!("containerd://{}", container_id(&format!("{uid}/{container}"))),
                       "state": {"running": {"startedAt": now_rfc3339(-55)}}}]}
    })
}

/// The `kubepods` cgroup of the generated nodes (cgroup v1, cgroupfs driver).
fn kubepods(root: &Path) -> PathBuf {
    root.join("sys/fs/cgroup/cpuset/kubepods")
}

/// The pod cgroup of `uid`, in whichever QoS class it is.
fn find_pod_dir(root: &Path, uid: &str) -> Option<PathBuf> {
    let base = kubepods(root);
    ["", "burstable", "besteffort"]
        .iter()
        .map(|qos| base.join(qos).join(format!("pod{uid}")))
        .find(|d| d.is_dir())
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

fn write(path: &Path, content: &str) -> Result<(), String> {
    std::fs::write(path, content).map_err(io(path))
}

/// A process's `/proc/<pid>/status`, as the generated tree writes it.
fn proc_status(comm: &str, pid: u32, cpus: &str) -> String {
    format!(
        "Name:\t{comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t1\n\
         Threads:\t1\nCpus_allowed_list:\t{}\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t12\n",
        cpus.trim()
    )
}

/// Writes the cgroups of API pod `pod` as the kubelet and containerd would create them on the
/// generated node: the pod cgroup in its QoS class, the sandbox's leaf (on every online CPU,
/// as the generated tree has it) and one leaf per container status on `cpus`, each with one
/// process whose `/proc` entry is written too, numbered from `pid`. Returns the next free pid.
fn write_pod_cgroups(root: &Path, pod: &Value, cpus: &str, online: &str, mut pid: u32) -> Result<u32, String> {
    let uid = json_str(pod, "/metadata/uid");
    let qos = json_str(pod, "/status/qosClass").to_ascii_lowercase();
    let dir = match qos.as_str() {
        "guaranteed" => kubepods(root).join(format!("pod{uid}")),
        _ => kubepods(root).join(&qos).join(format!("pod{uid}")),
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    write(&dir.join("cgroup.procs"), "")?;
    let mut leaves = vec![(container_id(&format!("{uid}/pause")), online, "pause")];
    for s in pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let id = json_str(s, "/containerID");
        let id = id.split_once("://").map_or(id, |(_, id)| id);
        let comm = if json_str(s, "/name").starts_with("spark") {
            "java"
        } else {
            "python3"
        };
        leaves.push((id.to_string(), cpus, comm));
    }
    for (id, cpus, comm) in leaves {
        let leaf = dir.join(id);
        std::fs::create_dir_all(&leaf).map_err(io(&leaf))?;
        write(&leaf.join("cpuset.cpus"), cpus)?;
        write(&leaf.join("cpuset.effective_cpus"), cpus)?;
        write(&leaf.join("cgroup.procs"), &format!("{pid}\n"))?;
        let proc = root.join(format!("proc/{pid}"));
        std::fs::create_dir_all(&proc).map_err(io(&proc))?;
        write(&proc.join("status"), &proc_status(comm, pid, cpus))?;
        write(&proc.join("cmdline"), &format!("/usr/bin/{comm}\0"))?;
        pid += 1;
    }
    Ok(pid)
}

/// The processes listed in the `cgroup.procs` files of `dir` and its subdirectories.
fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut files = vec![dir.join("cgroup.procs")];
    if let Ok(entries) = std::fs::read_dir(dir) {
        files.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .map(|p| p.join("cgroup.procs")),
        );
    }
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Removes the pod cgroup of `uid` and its processes' `/proc` entries: its containers have
/// stopped and the kubelet has cleaned up.
fn remove_pod_cgroups(root: &Path, uid: &str) -> Result<(), String> {
    let dir =
        find_pod_dir(root, uid).ok_or_else(|| format!("pod {uid} has no cgroup under {}", kubepods(root).display()))?;
    let pids = cgroup_pids(&dir);
    std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    for pid in pids {
        let proc = root.join(format!("proc/{pid}"));
        if proc.is_dir() {
            std::fs::remove_dir_all(&proc).map_err(io(&proc))?;
        }
    }
    Ok(())
}

/// Gives the container cgroup `leaf` the CPUs `cpus` as the kernel does when its cpuset is
/// written: its processes' affinity and the effective set follow at once (written first here),
/// `cpuset.cpus` is written in place (no rename: cgroupfs files are written, not replaced).
fn rewrite_cpuset(root: &Path, leaf: &Path, cpus: &str) -> Result<(), String> {
    for pid in cgroup_pids(leaf) {
        let status = root.join(format!("proc/{pid}/status"));
        let Ok(text) = std::fs::read_to_string(&status) else {
            continue;
        };
        let text: String = text
            .lines()
            .map(|l| match l.strip_prefix("Cpus_allowed_list:") {
                Some(_) => format!("Cpus_allowed_list:\t{}\n", cpus.trim()),
                None => format!("{l}\n"),
            })
            .collect();
        write(&status, &text)?;
    }
    write(&leaf.join("cpuset.effective_cpus"), cpus)?;
    write(&leaf.join("cpuset.cpus"), cpus)
}

/// A Markdown table of the rounds of each action: detected count, p50, p95 and max in ms
/// (nearest rank; a miss counts as longer than any detection and shows as `> timeout`).
pub fn table(results: &[(Action, Vec<Outcome>)], timeout: Duration) -> String {
    let show = |ms: f64| {
        if ms.is_finite() {
            format!("{ms:.0}")
        } else {
            format!("> {:.0}", timeout.as_secs_f64() * 1000.0)
        }
    };
    let mut out =
        String::from("| action | rule | detected | p50 ms | p95 ms | max ms |\n|---|---|---:|---:|---:|---:|\n");
    for (action, outcomes) in results {
        let ms: Vec<f64> = outcomes.iter().map(|o| o.ms()).collect();
        let detected = ms.iter().filter(|m| m.is_finite()).count();
        let max = ms.iter().copied().fold(f64::NAN, f64::max);
        out.push_str(&format!(
            "| {action}: {} | `{}` | {detected}/{} | {} | {} | {} |\n",
            action.describe(),
            action.rule(),
            ms.len(),
            show(crate::measure::percentile(ms.clone(), 50.0)),
            show(crate::measure::percentile(ms.clone(), 95.0)),
            show(max),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_summed_over_the_label_asked_for() {
        let text = "# HELP nodemedic_findings x\n# TYPE nodemedic_findings gauge\n\
            nodemedic_findings{rule=\"cpuset-drift\",severity=\"warning\"} 2\n\
            nodemedic_findings{rule=\"cpuset-drift\",severity=\"critical\"} 1\n\
            nodemedic_findings{rule=\"cpuset-drift-x\",severity=\"warning\"} 5\n\
            nodemedic_findings_total 9\n\
            nodemedic_last_scan_timestamp_seconds 1764000000.25\n";
        assert_eq!(findings(text, "cpuset-drift"), Some(3.0));
        assert_eq!(findings(text, "stale-cpu-assignment"), None);
        assert_eq!(
            sample(text, "nodemedic_last_scan_timestamp_seconds", None),
            Some(1_764_000_000.25)
        );
    }

    #[test]
    fn misses_sort_after_detections_and_show_as_over_the_timeout() {
        let t = Duration::from_secs(10);
        let rounds = vec![
            Outcome::Detected(Duration::from_millis(300)),
            Outcome::Detected(Duration::from_millis(700)),
            Outcome::Missed(t),
        ];
        let text = table(&[(Action::Orphan, rounds)], t);
        assert!(text.contains("| 2/3 | 700 | > 10000 | > 10000 |"), "{text}");
    }

    #[test]
    fn pod_cgroups_are_written_and_removed_with_their_processes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let pod = client_driver("nb", "uid-1", "10.244.1.31");
        let next = write_pod_cgroups(root, &pod, "2-255\n", "0-255\n", 500).unwrap();
        assert_eq!(next, 502);
        let pod_dir = find_pod_dir(root, "uid-1").unwrap();
        assert!(pod_dir.ends_with("kubepods/burstable/poduid-1"));
        let leaf = pod_dir.join(container_id("uid-1/notebook"));
        assert_eq!(std::fs::read_to_string(leaf.join("cpuset.cpus")).unwrap(), "2-255\n");
        rewrite_cpuset(root, &leaf, "0-1\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(leaf.join("cpuset.effective_cpus")).unwrap(),
            "0-1\n"
        );
        let status = std::fs::read_to_string(root.join("proc/501/status")).unwrap();
        assert!(status.contains("Cpus_allowed_list:\t0-1\n"), "{status}");
        let mut pids = cgroup_pids(&pod_dir);
        pids.sort_unstable();
        assert_eq!(pids, [500, 501]);
        remove_pod_cgroups(root, "uid-1").unwrap();
        assert!(find_pod_dir(root, "uid-1").is_none());
        assert!(!root.join("proc/500").exists() && !root.join("proc/501").exists());
    }
}
