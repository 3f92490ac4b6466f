//! A fleet of agents against one API server double, as the fleet test (`tests/fleet.rs`) and
//! the fleet bench (`fleet-bench`) see it: agent `i` is node `node-<i>`, pod `nodemedic-<i>`,
//! bearer token `token-<i>` ([`crate::agent::Identity::fleet`]), so the double's request log
//! and the prober Lease tell the agents apart.
//!
//! Here: the Lease sampled on a period (the API server's own view of who leads), the requests
//! counted per agent and kind, and, for the bench (a release program, where
//! [`crate::agent::Agent`]'s binary lookup does not apply), a bare agent process at default
//! settings.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::apiserver::{ApiServer, RequestRecord, Store};

/// The prober Lease's name (`nodemedic::leader::LEASE_NAME`).
pub const LEASE: &str = nodemedic::leader::LEASE_NAME;

/// The Node object of `node-<i>`, so that condition patches find it.
pub fn node_object(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{i}"), "uid": format!("node-uid-{i}")},
           "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                      "lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-21T08:00:00Z"}]}})
}

/// The agent number of a Lease holder identity `nodemedic-<i>/node-<i>`.
pub fn holder_index(identity: &str) -> Option<usize> {
    identity.strip_prefix("nodemedic-")?.split('/').next()?.parse().ok()
}

/// The agent number of a bearer token `token-<i>`.
pub fn token_index(token: &str) -> Option<usize> {
    token.strip_prefix("token-")?.parse().ok()
}

/// The agent that sent `r`, by its token.
pub fn sender(r: &RequestRecord) -> Option<usize> {
    r.bearer_token.as_deref().and_then(token_index)
}

/// A dry-run pod create: the admission probe, which only the prober sends.
pub fn is_dry_run(r: &RequestRecord) -> bool {
    r.method == "POST" && r.resource == "pods" && r.query_param("dryRun").as_deref() == Some("All")
}

/// A request the API server's `--max-mutating-requests-inflight` counts (by verb, dry runs
/// included), as opposed to `--max-requests-inflight` (reads, non-resource paths).
pub fn is_mutating(r: &RequestRecord) -> bool {
    matches!(
        r.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    ) || (r.verb.is_empty() && !matches!(r.method.as_str(), "GET" | "HEAD" | "OPTIONS"))
}

/// One reading of the Lease.
#[derive(Debug, Clone)]
pub struct LeaseSample {
    pub at: SystemTime,
    /// `spec.holderIdentity`, `None` when empty or missing (released, or no Lease yet).
    pub holder: Option<String>,
    pub renew_time: Option<String>,
    pub transitions: i64,
    pub exists: bool,
}

impl LeaseSample {
    /// The holder's agent number.
    pub fn holder_index(&self) -> Option<usize> {
        self.holder.as_deref().and_then(holder_index)
    }
}

/// The Lease as the store has it now.
pub fn read_lease(store: &Store) -> LeaseSample {
    let lease = store.get("leases", Some("default"), LEASE);
    let spec = lease.as_ref().map(|l| l["spec"].clone()).unwrap_or(Value::Null);
    LeaseSample {
        at: SystemTime::now(),
        holder: spec["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_string),
        renew_time: spec["renewTime"].as_str().map(str::to_string),
        transitions: spec["leaseTransitions"].as_i64().unwrap_or(0),
        exists: lease.is_some(),
    }
}

/// The Lease read every `every` on a task of the current runtime, until the handle is dropped.
#[derive(Debug)]
pub struct LeaseSampler {
    samples: Arc<Mutex<Vec<LeaseSample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseSampler {
    pub fn start(api: &ApiServer, every: Duration) -> LeaseSampler {
        let store = api.store();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sink = samples.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let s = read_lease(&store);
                sink.lock().unwrap().push(s);
            }
        });
        LeaseSampler { samples, task }
    }

    pub fn samples(&self) -> Vec<LeaseSample> {
        self.samples.lock().unwrap().clone()
    }
}

impl Drop for LeaseSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The moments the sampled holder changed: (time of the first sample with the new holder,
/// old holder, new holder).
pub fn holder_changes(samples: &[LeaseSample]) -> Vec<(SystemTime, Option<usize>, Option<usize>)> {
    samples
        .windows(2)
        .filter(|w| w[0].holder != w[1].holder)
        .map(|w| (w[1].at, w[0].holder_index(), w[1].holder_index()))
        .collect()
}

/// The non-watch requests of each agent that arrived in `[from, to)`, by kind
/// ([`crate::measure::request_kind`]).
pub fn count_by_agent(
    requests: &[RequestRecord],
    from: SystemTime,
    to: SystemTime,
) -> BTreeMap<usize, BTreeMap<String, usize>> {
    let mut out: BTreeMap<usize, BTreeMap<String, usize>> = BTreeMap::new();
    for r in requests.iter().filter(|r| !r.is_watch && r.time >= from && r.time < to) {
        if let Some(i) = sender(r) {
            *out.entry(i)
                .or_default()
                .entry(crate::measure::request_kind(r))
                .or_default() += 1;
        }
    }
    out
}

/// Seconds from `a` to `b` (negative when `b` is earlier).
pub fn secs_between(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// A bare `nodemedic run` for the bench: agent `i` at default settings (plus `extra`), an
/// empty host tree, logging at warn (the first 64 KiB kept). Killed when dropped.
#[derive(Debug)]
pub struct FleetProcess {
    pub index: usize,
    child: Child,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl FleetProcess {
    pub fn start(api: &ApiServer, bin: &Path, i: usize, extra: &[String]) -> Result<FleetProcess, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let root = dir.path().join("host");
        std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, true).map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(&kubeconfig)
            .map_err(|e| e.to_string())?
            .replace(crate::apiserver::TEST_TOKEN, &format!("token-{i}"));
        std::fs::write(&kubeconfig, text).map_err(|e| e.to_string())?;
        let mut child = Command::new(bin)
            .arg("run")
            .arg("--host-root")
            .arg(&root)
            .args(["--node", &format!("node-{i}"), "--pod-name", &format!("nodemedic-{i}")])
            .args(["--listen", "127.0.0.1:0"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(extra)
            .env("NODEMEDIC_LOG", "warn")
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("NODE_NAME")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let log = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            let sink = log.clone();
            std::thread::spawn(move || {
                use std::io::BufRead as _;
                for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut l = sink.lock().unwrap();
                    if l.len() < 64 * 1024 {
                        l.push_str(&line);
                        l.push('\n');
                    }
                }
            });
        }
        Ok(FleetProcess {
            index: i,
            child,
            log,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGTERM (the holder releases the Lease).
    pub fn terminate(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

impl Drop for FleetProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
