//! A running `nodemedic run` daemon for end-to-end tests: started against the API server
//! double over HTTPS, its log captured, its endpoints scraped, and stopped (SIGTERM, then
//! SIGKILL) when dropped, pass or fail.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::apiserver::ApiServer;
use crate::hosttree::Node;
use crate::nodemedic_bin;

/// The node the agent runs for.
pub const NODE: &str = "worker-7";

/// Who an agent is, for tests that run several: its node, its pod name (its identity in the
/// prober election and in Events), the bearer token it sends (so the API server double's
/// request log tells agents apart), and the API server URL it is given.
#[derive(Debug, Clone)]
pub struct Identity {
    pub node: String,
    pub pod: String,
    /// `None`: the double's [`crate::apiserver::TEST_TOKEN`].
    pub token: Option<String>,
    /// `None`: the double's HTTPS URL.
    pub server: Option<String>,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            node: NODE.into(),
            pod: "nodemedic-test".into(),
            token: None,
            server: None,
        }
    }
}

impl Identity {
    /// Agent number `i` of a fleet: node `node-<i>`, pod `nodemedic-<i>`, token `token-<i>`.
    pub fn fleet(i: usize) -> Identity {
        Identity {
            node: format!("node-{i}"),
            pod: format!("nodemedic-{i}"),
            token: Some(format!("token-{i}")),
            server: None,
        }
    }
}

/// A running daemon.
#[derive(Debug)]
pub struct Agent {
    child: Child,
    pub addr: String,
    log: Arc<Mutex<String>>,
    root: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        crate::stop_child(&mut self.child);
    }
}

impl Agent {
    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal to the daemon.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig);
    }

    /// Starts `nodemedic run` on a host tree with `node`'s files against `api`, as the agent
    /// of [`NODE`].
    pub fn start(api: &ApiServer, host: Option<&Node>, extra: &[&str]) -> Agent {
        Agent::start_as(api, host, &Identity::default(), extra)
    }

    /// [`Agent::start`] as another agent: its node, pod name, bearer token, or API server URL.
    pub fn start_as(api: &ApiServer, host: Option<&Node>, who: &Identity, extra: &[&str]) -> Agent {
        Agent::start_env(api, host, who, extra, &[])
    }

    /// [`Agent::start_as`] with more environment variables for the daemon (`LD_PRELOAD`...).
    pub fn start_env(
        api: &ApiServer,
        host: Option<&Node>,
        who: &Identity,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        std::fs::create_dir_all(&root).unwrap();
        if let Some(node) = host {
            node.write(&root).unwrap();
        }
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, true).unwrap();
        if who.token.is_some() || who.server.is_some() {
            let mut text = std::fs::read_to_string(&kubeconfig).unwrap();
            if let Some(token) = &who.token {
                text = text.replace(crate::apiserver::TEST_TOKEN, token);
            }
            if let Some(server) = &who.server {
                text = text.replace(&api.https_url(), server);
            }
            std::fs::write(&kubeconfig, text).unwrap();
        }
        let mut args: Vec<String> = [
            "run",
            "--host-root",
            root.to_str().unwrap(),
            "--node",
            &who.node,
            "--pod-name",
            &who.pod,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Fast defaults for tests, unless the test sets its own.
        for (flag, value) in [
            ("--scan-interval-seconds", "0.3"),
            ("--driver-cache-ttl-seconds", "0.5"),
            ("--request-timeout-seconds", "3"),
            // The only agent takes the prober Lease at once; a short lease keeps short
            // `apiserver_unreachable_seconds` settings meaningful.
            ("--lease-duration-seconds", "3"),
        ] {
            if !extra.contains(&flag) {
                args.extend([flag.to_string(), value.to_string()]);
            }
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Command::new(nodemedic_bin())
            .args(&args)
            .env("NODEMEDIC_LOG", "info,kube=warn")
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("NODE_NAME")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            let text = log.lock().unwrap().clone();
            if let Some(i) = text.find("listen=") {
                let rest = &text[i + 7..];
                break rest.split_whitespace().next().unwrap().to_string();
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("nodemedic run exited with {status}:\n{text}");
            }
            assert!(Instant::now() < deadline, "no listen address logged:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        };
        Agent {
            child,
            addr,
            log,
            root,
            _dir: dir,
        }
    }

    /// The agent's `--host-root`: the node's tree, which a test may change under it.
    pub fn host_root(&self) -> &std::path::Path {
        &self.root
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        crate::http_get(&self.addr, path, Duration::from_secs(5))
    }

    /// The value of one metric sample, e.g. `nodemedic_rule_firing{rule="duplicate-driver"}`.
    pub fn metric(&self, sample: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.trim().parse().ok())
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Turns of the scan loop so far (`nodemedic_scan_loop_turns_total`): each a judgement, or
    /// a check that nothing a judgement reads changed. A change made before turn N is judged by
    /// turn N+1.
    pub fn scans(&self) -> usize {
        self.turns("judged") + self.turns("api") + self.turns("current")
    }

    /// Turns of the scan loop that ended as `outcome` (`judged`, `api`, `current`, `failed`).
    pub fn turns(&self, outcome: &str) -> usize {
        self.metric(&format!("nodemedic_scan_loop_turns_total{{outcome=\"{outcome}\"}}"))
            .map_or(0, |n| n as usize)
    }
}

/// Polls `check` until it holds or `timeout` passes (then panics with the agent's log).
pub async fn wait_for(what: &str, timeout: Duration, agent: &Agent, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}\n--- agent log\n{}", agent.log());
}
