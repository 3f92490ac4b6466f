//! What a platform team installs and relies on: the HTTP endpoint (`/metrics` checked by
//! promtool and against docs/metrics.md, `/healthz`, `/readyz`), the configuration file
//! (checked against docs/configuration.md, reloaded on SIGHUP, a bad one kept out).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::exposition;
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime};
use serde_json::json;

fn repo(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// A pod gone with its CPU, memory, device and DRA entries left, so that every family of the
/// resource managers has series.
fn stale_host() -> Node {
    use nodemedic_tests::checkpoints::*;
    let gone = Pod::new("gone-job", 2).exclusive("2,6").gone();
    let uid = gone.uid.clone();
    Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .pod(gone)
        .file(
            "/var/lib/kubelet/memory_manager_state",
            memory_manager_state(1, 16 * GIB, &[MemoryEntry::new(&uid, "app", 0, GIB)]),
        )
        .file(
            "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
            device_checkpoint(
                &[DeviceEntry::new(&uid, "app", "example.com/nic", &[("nic-0", 0)])],
                &[("example.com/nic", &["nic-0", "nic-1"])],
            ),
        )
        .file(
            "/var/lib/kubelet/dra_manager_state",
            dra_manager_state(&[DraClaim {
                uid: "claim-1".into(),
                namespace: "default".into(),
                name: "gone-job-nic".into(),
                pods: vec![uid.clone()],
                devices: vec![("nic.example.com".into(), NODE.into(), "nic-2".into())],
            }]),
        )
}

async fn started(api: &ApiServer, extra: &[&str]) -> Agent {
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    let agent = Agent::start(api, Some(&stale_host()), extra);
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_metrics_pass_promtool_and_match_the_docs() {
    let api = ApiServer::start().await.unwrap();
    let agent = started(&api, &[]).await;
    assert_eq!(agent.get("/healthz"), (200, "ok\n".to_string()));
    assert_eq!(agent.get("/readyz"), (200, "ok\n".to_string()));
    assert_eq!(agent.get("/nope").0, 404);
    let (code, body) = agent.get("/metrics");
    assert_eq!(code, 200);
    assert!(
        body.contains("nodemedic_rule_firing{rule=\"stale-cpu-assignment\"} 1"),
        "{body}"
    );
    // build_info and --version name the commit this checkout is at (the test binary and the
    // agent are built from the same tree), or `unknown` outside git.
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo("."))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("unknown".to_string(), |o| {
            String::from_utf8(o.stdout).unwrap().trim().to_string()
        });
    let build_info = format!(
        "nodemedic_build_info{{revision=\"{revision}\",version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(body.contains(&build_info), "{build_info} not in\n{body}");
    let version = nodemedic_tests::nodemedic(&["--version"]);
    assert_eq!(
        version.stdout,
        format!("nodemedic {} (revision {revision})\n", env!("CARGO_PKG_VERSION"))
    );

    // promtool, as Prometheus' own linter, on the real output.
    exposition::promtool_check(&body).unwrap();

    // docs/metrics.md lists exactly the families served, with their types (those that need a
    // growing Spark pod's local dirs are checked where one grows, in local_storage.rs).
    let documented: BTreeSet<(String, String)> = exposition::documented()
        .into_iter()
        .filter(|(name, _)| !exposition::GROWING_SPARK_POD_FAMILIES.contains(&name.as_str()))
        .collect();
    assert_eq!(
        documented,
        exposition::families(&body),
        "docs/metrics.md and /metrics differ"
    );
}

fn write_config(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_good_configuration_and_keeps_out_a_bad_one() {
    let api = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    write_config(&config, "scan_interval_seconds: 0.2\n");
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let launched = unix_now();
    let agent = started(
        &api,
        &["--config", config.to_str().unwrap(), "--scan-interval-seconds", "0.2"],
    )
    .await;
    let stale = "nodemedic_rule_firing{rule=\"stale-cpu-assignment\"}";
    wait_for("the stale finding", Duration::from_secs(30), &agent, || {
        agent.metric(stale) == Some(1.0)
    })
    .await;
    assert_eq!(agent.metric("nodemedic_config_last_reload_successful"), Some(1.0));
    // The configuration read at start counts as the first load: not 0 until a SIGHUP.
    let loaded_at_start = agent
        .metric("nodemedic_config_last_reload_success_timestamp_seconds")
        .unwrap();
    assert!(
        launched <= loaded_at_start && loaded_at_start <= unix_now(),
        "loaded at {loaded_at_start}, launched at {launched}"
    );
    // CPU seconds keep their fraction: the metric lies between the kernel's tick counts read
    // just before and just after the scrape (the prometheus crate's own collector rounded down
    // to whole seconds, below both).
    let ticks = || -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", agent.pid())).unwrap();
        let after_command = &stat[stat.rfind(')').unwrap() + 1..];
        let fields: Vec<u64> = after_command
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|f| f.parse().unwrap())
            .collect();
        let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap().unwrap();
        (fields[0] + fields[1]) as f64 / per_second as f64
    };
    let before = ticks();
    let cpu = agent.metric("process_cpu_seconds_total").unwrap();
    let after = ticks();
    assert!(
        before > 0.0 && before <= cpu && cpu <= after,
        "process_cpu_seconds_total {cpu}, kernel {before} then {after}"
    );

    // A good file: the rule is switched off at once.
    write_config(
        &config,
        "scan_interval_seconds: 0.2\nrules:\n  disabled_rules: [stale-cpu-assignment]\n",
    );
    agent.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for("the rule to be disabled", Duration::from_secs(30), &agent, || {
        agent.metric(stale) == Some(0.0)
    })
    .await;
    assert!(
        agent
            .metric("nodemedic_config_last_reload_success_timestamp_seconds")
            .unwrap()
            > loaded_at_start,
        "a good reload moves the timestamp forward"
    );
    assert!(agent.log().contains("configuration reloaded"));

    // A bad file: nothing changes, and the metric and the log say why.
    write_config(
        &config,
        "scan_interval_seconds: 0.2\nrules:\n  disabled_rules: []\n  orphan_grace: 3\n",
    );
    // This time through `nodemedic reload`, as an operator would (kubectl exec).
    let pid = agent.pid().to_string();
    let run = nodemedic_tests::nodemedic(&["reload", "--pid", &pid]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with(&format!("sent SIGHUP to nodemedic run (pid {pid})"))
    );
    let not_daemon = nodemedic_tests::nodemedic(&["reload", "--pid", &std::process::id().to_string()]);
    assert_eq!(not_daemon.code, 2);
    assert!(
        not_daemon.stderr.contains("is not `nodemedic run`"),
        "{}",
        not_daemon.stderr
    );
    wait_for("the failed reload", Duration::from_secs(30), &agent, || {
        agent.metric("nodemedic_config_last_reload_successful") == Some(0.0)
    })
    .await;
    let scans = agent.scans();
    wait_for("more scans", Duration::from_secs(30), &agent, || {
        agent.scans() >= scans + 5
    })
    .await;
    assert_eq!(
        agent.metric(stale),
        Some(0.0),
        "the old configuration (rule disabled) stays in force"
    );
    let log = agent.log();
    assert!(
        log.contains("configuration reload failed") && log.contains("orphan_grace"),
        "{log}"
    );
    let mut agent = agent;
    assert!(agent.alive());
}

#[test]
fn check_config_and_the_configuration_reference() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &good,
        "scan_interval_seconds: 15\nrules:\n  orphan_grace_seconds: 120\n",
    )
    .unwrap();
    std::fs::write(&bad, "scan_interval_seconds: 15\nrules:\n  orphan_grace_secs: 120\n").unwrap();
    let run = nodemedic_tests::nodemedic(&["run", "--check-config", "--config", good.to_str().unwrap()]);
    assert_eq!(
        (run.code, run.stdout.trim_end()),
        (0, format!("{}: valid", good.display()).as_str()),
        "{}",
        run.stderr
    );
    let run = nodemedic_tests::nodemedic(&["run", "--check-config", "--config", bad.to_str().unwrap()]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("orphan_grace_secs") && run.stderr.starts_with(&format!("nodemedic: {}", bad.display())),
        "{}",
        run.stderr
    );
    let run = nodemedic_tests::nodemedic(&["run", "--check-config", "--scan-interval-seconds", "0"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("--scan-interval-seconds: 0 is not a positive number of seconds"),
        "{}",
        run.stderr
    );
    // What run would refuse, check-config refuses: a port that is no port (was "valid").
    let run = nodemedic_tests::nodemedic(&["run", "--check-config", "--listen", "127.0.0.1:99999"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stderr
            .contains("--listen: \"127.0.0.1:99999\" is not an address:port like 0.0.0.0:9904"),
        "{}",
        run.stderr
    );

    // The documented file is valid and its tables name exactly the keys the code knows.
    let docs = std::fs::read_to_string(repo("docs/configuration.md")).unwrap();
    let yaml = docs
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    nodemedic::config::parse(yaml).unwrap_or_else(|e| panic!("docs/configuration.md example: {e}"));
    let documented: BTreeSet<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next().map(str::to_string))
        .collect();
    let mut known: BTreeSet<String> = BTreeSet::new();
    if let serde_json::Value::Object(m) = serde_json::to_value(nodemedic::config::FileConfig::default()).unwrap() {
        known.extend(m.keys().cloned());
    }
    if let serde_json::Value::Object(m) = serde_json::to_value(nodemedic_rules::Settings::default()).unwrap() {
        known.extend(m.keys().cloned());
    }
    if let serde_json::Value::Object(m) =
        serde_json::to_value(nodemedic::repair::auto::AutoRepairPolicy::default()).unwrap()
    {
        known.extend(m.keys().cloned());
    }
    if let serde_json::Value::Object(m) = serde_json::to_value(nodemedic::fence::FencePolicy::default()).unwrap() {
        known.extend(m.keys().cloned());
    }
    assert_eq!(
        documented, known,
        "docs/configuration.md tables and the code's keys differ"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_cannot_hold_the_endpoint() {
    use std::io::Read;
    let api = ApiServer::start().await.unwrap();
    let agent = started(&api, &[]).await;
    // Ten clients connect and never send a request (or send half a header).
    let mut idle: Vec<std::net::TcpStream> = (0..10)
        .map(|_| std::net::TcpStream::connect(&agent.addr).unwrap())
        .collect();
    std::io::Write::write_all(&mut idle[0], b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
    // Others are served meanwhile.
    let started_at = std::time::Instant::now();
    assert_eq!(agent.get("/healthz").0, 200);
    assert!(
        started_at.elapsed() < Duration::from_secs(2),
        "served while slow clients hang"
    );
    // The server closes the idle connections once the header timeout (5 s) passes.
    for conn in &mut idle {
        conn.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut buf = Vec::new();
        let t = std::time::Instant::now();
        let _ = conn.read_to_end(&mut buf);
        assert!(
            t.elapsed() < Duration::from_secs(14),
            "an idle connection was held open"
        );
    }
}

/// Moves `pid` into the v1 memory cgroup `dir` (`cgroup.procs` takes one pid per write).
fn move_to_cgroup(dir: &Path, pid: u32) {
    std::fs::write(dir.join("cgroup.procs"), pid.to_string())
        .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", dir.display()));
}

/// The agent's own memory limit, read by the kernel's rules from a real cgroup v1 memory
/// hierarchy (CI runs as root; the machines mount the v1 memory controller): the limit of
/// whichever cgroup the agent is in at the scrape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_follows_the_agents_own_cgroup_on_real_cgroup_v1() {
    let api = ApiServer::start().await.unwrap();
    let agent = started(&api, &[]).await;
    let pid = agent.pid();
    let mount = Path::new("/sys/fs/cgroup/memory");
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let own_path = own
        .lines()
        .find_map(|l| {
            let mut p = l.splitn(3, ':');
            let (_, controllers, path) = (p.next()?, p.next()?, p.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.trim_start_matches('/').to_string())
        })
        .expect("a v1 memory line in /proc/PID/cgroup");
    let home = mount.join(&own_path);
    let expected_before = std::fs::read_to_string(home.join("memory.limit_in_bytes"))
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap();
    let metric = || agent.metric("nodemedic_memory_limit_bytes");
    if expected_before >= 1 << 62 {
        assert_eq!(metric(), Some(f64::INFINITY), "an unlimited cgroup is +Inf");
    } else {
        assert_eq!(metric(), Some(expected_before as f64));
    }

    let dir = mount.join(format!("nodemedic-test-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    std::fs::write(dir.join("memory.limit_in_bytes"), "209715200").unwrap();
    // The kernel keeps the limit rounded to pages: 200 MiB is a whole number of them.
    move_to_cgroup(&dir, pid);
    let seen = metric();
    move_to_cgroup(&home, pid);
    let back = metric();
    std::fs::remove_dir(&dir).unwrap();
    assert_eq!(
        seen,
        Some(209_715_200.0),
        "the limit of the cgroup the agent was moved into"
    );
    assert_eq!(back, metric(), "and its home cgroup's again after moving back");
}
