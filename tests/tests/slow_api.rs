//! The real `nodemedic run` daemon against an API server that never answers in time: the
//! double with every request taking 20 s (from the start, or once the agent is up), a listener
//! that accepts TCP connections and never says a word, and driver lookups that fail for many
//! cycles. In every case the scan loop keeps its schedule (the scan timestamp is sampled
//! every 200 ms and may never be older than two scan intervals and a margin), host findings
//! appear within a scan interval, API errors say "timeout" with the verb and the resource,
//! SIGTERM ends the process within 2 s, and a finding whose driver cannot be re-checked stays
//! one finding, one Event and one condition.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;
use nodemedic_tests::agent::{Agent, Identity, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::{assert_no_panic, events_with_reason, node_condition, node_object, orphan, stale_host};
use nodemedic_tests::hosttree::{Node, Pod};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion};
use serde_json::json;

const SCAN_TS: &str = "nodemedic_last_scan_timestamp_seconds";
const STALE_CPUS: &str = "nodemedic_cpu_manager_stale_cpus";
const STALE_FIRING: &str = "nodemedic_rule_firing{rule=\"stale-cpu-assignment\"}";
const ORPHANS: &str = "nodemedic_orphaned_executors";
/// The scan interval of the cadence tests, seconds.
const INTERVAL: f64 = 2.0;
/// What the scan timestamp may lag behind beyond two intervals: a scrape, a scan, a busy
/// 2-core machine.
const MARGIN: f64 = 1.0;
/// The request latency of the slow API server.
const SLOW: Duration = Duration::from_secs(20);
/// SIGTERM to exit.
const EXIT_WITHIN: Duration = Duration::from_secs(2);

/// `node` with a second stale entry (2 more CPUs), as the kubelet would leave it.
fn with_another_stale_entry(node: Node) -> Node {
    node.pod(Pod::new("gone-later", 2).exclusive("3,7").gone())
}

/// Replaces the running agent's checkpoint with `node`'s (temp file and rename, as the
/// kubelet writes it).
fn rewrite_checkpoint(agent: &Agent, node: &Node) {
    let cp = agent.host_root().join("var/lib/kubelet/cpu_manager_state");
    let tmp = cp.with_file_name(".cpu_manager_state.slow-api-tmp");
    std::fs::write(&tmp, node.state().to_checkpoint_json()).unwrap();
    std::fs::rename(&tmp, &cp).unwrap();
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The scan timestamp, `None` before the first scan (the gauge reads 0 until then).
fn last_scan(agent: &Agent) -> Option<f64> {
    agent.metric(SCAN_TS).filter(|t| *t > 0.0)
}

/// Waits for the first scan; returns how long it took from `since`, and the `/healthz`
/// answers other than 200 meanwhile (seconds from `since`, code).
async fn first_scan(agent: &Agent, since: Instant, timeout: Duration) -> (Duration, Vec<(f64, u16)>) {
    let mut unhealthy = Vec::new();
    while last_scan(agent).is_none() {
        assert!(
            since.elapsed() < timeout,
            "no scan {:.0} s after start\n{}",
            timeout.as_secs_f64(),
            agent.log()
        );
        let code = agent.get("/healthz").0;
        if code != 200 {
            unhealthy.push(((since.elapsed().as_secs_f64() * 10.0).round() / 10.0, code));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (since.elapsed(), unhealthy)
}

/// Reports the `/healthz` failures before the first scan: the daemon waits up to 10 s for
/// the pod watch's first list before it scans, longer than 3 scan intervals of 2 s.
fn note_startup_health(what: &str, unhealthy: &[(f64, u16)]) {
    match (unhealthy.first(), unhealthy.last()) {
        (Some(first), Some(last)) => eprintln!(
            "{what}: /healthz answered {} from {:.1} s to {:.1} s after start ({} samples), before the first scan",
            first.1,
            first.0,
            last.0,
            unhealthy.len()
        ),
        _ => eprintln!("{what}: /healthz answered 200 until the first scan"),
    }
}

/// Samples the scan timestamp every 200 ms for `span` and asserts that at every sample the
/// last scan is at most two scan intervals and the margin old. `each` runs at every sample
/// (more checks, host changes). Returns the distinct scan timestamps seen.
async fn assert_scans_on_schedule(
    agent: &mut Agent,
    span: Duration,
    what: &str,
    mut each: impl FnMut(&mut Agent, Duration),
) -> Vec<f64> {
    let max_age = 2.0 * INTERVAL + MARGIN;
    let started = Instant::now();
    let mut seen: Vec<f64> = Vec::new();
    let mut worst: f64 = 0.0;
    while started.elapsed() < span {
        assert!(agent.alive(), "{what}: the daemon died\n{}", agent.log());
        let ts = last_scan(agent);
        let now = unix_now();
        let Some(ts) = ts else {
            panic!("{what}: no scan timestamp\n{}", agent.log());
        };
        if seen.last() != Some(&ts) {
            seen.push(ts);
        }
        let age = now - ts;
        worst = worst.max(age);
        assert!(
            age <= max_age,
            "{what}: the last scan is {age:.2} s old at {:.1} s into the sampling, over 2 scan intervals + {MARGIN} s ({max_age} s); scans so far at {:?}\n--- agent log\n{}",
            started.elapsed().as_secs_f64(),
            gaps(&seen),
            agent.log()
        );
        each(agent, started.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "{what}: {} scans in {:.0} s, gaps {:?}, the oldest the last scan ever was: {worst:.2} s",
        seen.len(),
        span.as_secs_f64(),
        gaps(&seen)
    );
    assert!(
        seen.len() as f64 >= span.as_secs_f64() / INTERVAL - 1.0,
        "{what}: only {} scans in {:.0} s",
        seen.len(),
        span.as_secs_f64()
    );
    seen
}

/// The gaps between consecutive scan timestamps, rounded to 10 ms.
fn gaps(ts: &[f64]) -> Vec<f64> {
    ts.windows(2).map(|w| ((w[1] - w[0]) * 100.0).round() / 100.0).collect()
}

/// Sends SIGTERM and waits for the process to exit (polling `try_wait`); returns how long it
/// took, or panics after 10 s.
/// The host's stale-entry finding is still reported (the API never holds host findings back).
fn assert_host_findings_stay(agent: &Agent) {
    assert_eq!(
        agent.metric(STALE_FIRING),
        Some(1.0),
        "host findings stay\n{}",
        agent.log()
    );
}

fn sigterm_and_time_exit(agent: &mut Agent) -> Duration {
    assert!(agent.alive(), "the daemon died before SIGTERM\n{}", agent.log());
    let sent = Instant::now();
    agent.signal(Signal::SIGTERM);
    while agent.alive() {
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    sent.elapsed()
}

fn assert_exits_within(agent: &mut Agent, what: &str) {
    let took = sigterm_and_time_exit(agent);
    eprintln!("{what}: exited {:.0} ms after SIGTERM", took.as_secs_f64() * 1000.0);
    assert!(
        took <= EXIT_WITHIN,
        "{what}: exited {:.2} s after SIGTERM (limit {} s)\n--- agent log\n{}",
        took.as_secs_f64(),
        EXIT_WITHIN.as_secs(),
        agent.log()
    );
}

/// The log lines that carry an `error=` field.
fn error_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(" error=")).collect()
}

/// The line from the `error=` field on (the error, then any fields after it: enough to look
/// for "timeout", the verb and the resource).
fn error_field(line: &str) -> &str {
    line.split_once(" error=").map_or("", |(_, e)| e)
}

/// Whether an error text names a request: an upper-case HTTP/API verb followed by a resource.
fn names_verb_and_resource(error: &str) -> bool {
    const VERBS: [&str; 8] = ["GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE", "CREATE"];
    let words: Vec<&str> = error
        .split(|c: char| c.is_whitespace() || c == '"')
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .any(|w| VERBS.contains(&w[0]) && w[1].chars().next().is_some_and(|c| c.is_ascii_lowercase()))
}

/// Every API error logged in `log` says "timeout" and names its verb and resource, and there
/// is at least one. Returns the lines.
fn assert_api_errors_say_timeout<'a>(log: &'a str, what: &str) -> Vec<&'a str> {
    let lines = error_lines(log);
    assert!(
        !lines.is_empty(),
        "{what}: no API error logged while every request took {} s\n{log}",
        SLOW.as_secs()
    );
    let bad: Vec<&&str> = lines
        .iter()
        .filter(|l| {
            let e = error_field(l);
            !e.to_ascii_lowercase().contains("timeout") || !names_verb_and_resource(e)
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: API errors that do not say \"timeout\" with the verb and resource (of {} error lines):\n{}\n--- agent log\n{log}",
        lines.len(),
        bad.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n")
    );
    let bare: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("SendRequest") && !l.to_ascii_lowercase().contains("timeout"))
        .collect();
    assert!(bare.is_empty(), "{what}: bare SendRequest errors: {bare:#?}");
    lines
}

/// A stale checkpoint entry added under the running agent at `write_at` into a sampling:
/// [`NewStaleEntry::step`] writes it and notes when the metrics first count it.
struct NewStaleEntry {
    write_at: Duration,
    /// The stale CPUs before; the new entry adds 2.
    cpus_before: f64,
    written: Option<Instant>,
    seen_after: Option<Duration>,
}

impl NewStaleEntry {
    fn at(write_at: Duration, cpus_before: f64) -> Self {
        NewStaleEntry {
            write_at,
            cpus_before,
            written: None,
            seen_after: None,
        }
    }

    fn step(&mut self, agent: &Agent, at: Duration) {
        if self.written.is_none() && at >= self.write_at {
            rewrite_checkpoint(agent, &with_another_stale_entry(stale_host()));
            self.written = Some(Instant::now());
        }
        if let (Some(w), None) = (self.written, self.seen_after) {
            let want = self.cpus_before + 2.0;
            if agent.metric(STALE_CPUS) == Some(want) && agent.metric(STALE_FIRING) == Some(1.0) {
                self.seen_after = Some(w.elapsed());
            }
        }
    }

    /// Reported within one scan interval and the margin of being written.
    fn assert_seen(&self, agent: &Agent, what: &str) {
        let limit = INTERVAL + MARGIN;
        assert!(self.written.is_some(), "{what}: the entry was never written");
        match self.seen_after {
            Some(took) => {
                eprintln!(
                    "{what}: the new stale entry was reported {:.0} ms after it was written",
                    took.as_secs_f64() * 1000.0
                );
                assert!(
                    took.as_secs_f64() <= limit,
                    "{what}: the new stale entry was reported {:.2} s after it was written (limit {limit} s)\n{}",
                    took.as_secs_f64(),
                    agent.log()
                );
            }
            None => panic!(
                "{what}: the new stale entry was never reported ({STALE_CPUS} = {:?}, want {}; firing {:?})\n--- agent log\n{}",
                agent.metric(STALE_CPUS),
                self.cpus_before + 2.0,
                agent.metric(STALE_FIRING),
                agent.log()
            ),
        }
    }
}

/// Every request takes 20 s once the agent is up (watch open, findings reported, Events
/// written): scans keep their schedule and a new stale entry is reported at once; the errors
/// say "timeout"; once the API answers again the API work resumes without duplicates; and with
/// the API slow again, SIGTERM ends the process within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_taking_20_seconds_does_not_stop_scans_or_host_findings() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let interval = INTERVAL.to_string();
    let mut agent = Agent::start(&api, Some(&stale_host()), &["--scan-interval-seconds", &interval]);
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    wait_for("the stale entry", Duration::from_secs(30), &agent, || {
        agent.metric(STALE_FIRING) == Some(1.0)
    })
    .await;
    wait_for("its event", Duration::from_secs(30), &agent, || {
        !events_with_reason(&api, "StaleCPUAssignment").is_empty()
    })
    .await;
    assert_eq!(agent.metric(STALE_CPUS), Some(2.0));

    api.faults().set_latency("*", "*", SLOW);
    let log_from = agent.log().len();
    let first = last_scan(&agent).unwrap();
    // A stale entry appears 10 s into the slowness, when the API work is stuck in requests.
    let mut entry = NewStaleEntry::at(Duration::from_secs(10), 2.0);
    let seen = assert_scans_on_schedule(&mut agent, Duration::from_secs(30), "API slow once up", |agent, at| {
        assert_eq!(agent.get("/healthz").0, 200, "liveness while the API is slow");
        assert_host_findings_stay(agent);
        entry.step(agent, at);
    })
    .await;
    assert!(*seen.last().unwrap() > first + 25.0);
    entry.assert_seen(&agent, "API slow once up");
    let log = agent.log();
    let lines = assert_api_errors_say_timeout(&log[log_from..], "API slow once up");
    eprintln!(
        "API slow once up: {} error lines, e.g.\n{}",
        lines.len(),
        lines.iter().take(6).copied().collect::<Vec<_>>().join("\n")
    );

    api.faults().clear();
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "after-slow");
    api.store().create(orphan(&app, 1, "exec-after-slow"));
    wait_for("recovery: the new orphan", Duration::from_secs(90), &agent, || {
        agent.metric(ORPHANS) == Some(1.0)
    })
    .await;
    wait_for("its event", Duration::from_secs(60), &agent, || {
        events_with_reason(&api, "OrphanedExecutor").len() == 1
    })
    .await;
    wait_for(
        "the second stale entry's event",
        Duration::from_secs(30),
        &agent,
        || events_with_reason(&api, "StaleCPUAssignment").len() == 2,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(events_with_reason(&api, "OrphanedExecutor").len(), 1);
    assert_eq!(events_with_reason(&api, "StaleCPUAssignment").len(), 2);
    assert_no_panic(&agent);

    // Slow again, with requests in flight: SIGTERM still ends it at once.
    api.faults().set_latency("*", "*", SLOW);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_exits_within(&mut agent, "API slow once up");
}

/// Every request takes 20 s from before the agent starts: it starts anyway, scans on its
/// schedule, reports a new stale entry within a scan interval, logs timeouts with the verb and
/// the resource, and SIGTERM ends it within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_taking_20_seconds_from_the_start() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    api.faults().set_latency("*", "*", SLOW);
    let interval = INTERVAL.to_string();
    let started = Instant::now();
    // Without a pod list, an entry without a cgroup in a checkpoint younger than the kubelet's
    // reconcile period (10 s here) is not judged yet: a rule's grace, not the daemon's. Zero,
    // so that the check below is about the scan loop.
    let mut agent = Agent::start(
        &api,
        Some(&stale_host()),
        &[
            "--scan-interval-seconds",
            &interval,
            "--rule-setting",
            "reconcile_grace_seconds=0",
        ],
    );
    // The daemon waits up to 10 s for the pod watch's first list before its first scan.
    let (took, unhealthy) = first_scan(&agent, started, Duration::from_secs(30)).await;
    eprintln!(
        "API slow from the start: first scan {:.1} s after start",
        took.as_secs_f64()
    );
    note_startup_health("API slow from the start", &unhealthy);
    assert!(
        took.as_secs_f64() <= 10.0 + INTERVAL + MARGIN + 2.0,
        "first scan {:.1} s after start\n{}",
        took.as_secs_f64(),
        agent.log()
    );
    assert_eq!(agent.metric(STALE_FIRING), Some(1.0), "{}", agent.log());
    assert_eq!(agent.metric(STALE_CPUS), Some(2.0), "{}", agent.log());
    let mut healthz_failures = Vec::new();
    let mut entry = NewStaleEntry::at(Duration::from_secs(10), 2.0);
    assert_scans_on_schedule(
        &mut agent,
        Duration::from_secs(30),
        "API slow from the start",
        |agent, at| {
            let (code, body) = agent.get("/healthz");
            if code != 200 {
                healthz_failures.push(format!("{:.1} s: {code} {}", at.as_secs_f64(), body.trim()));
            }
            assert_host_findings_stay(agent);
            entry.step(agent, at);
        },
    )
    .await;
    assert!(healthz_failures.is_empty(), "/healthz failed: {healthz_failures:#?}");
    entry.assert_seen(&agent, "API slow from the start");
    let log = agent.log();
    let lines = assert_api_errors_say_timeout(&log, "API slow from the start");
    eprintln!(
        "API slow from the start: {} error lines, e.g.\n{}",
        lines.len(),
        lines.iter().take(6).copied().collect::<Vec<_>>().join("\n")
    );
    assert_no_panic(&agent);
    assert_exits_within(&mut agent, "API slow from the start");
}

/// Aborts a task when dropped, pass or fail.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An "API server" that accepts TCP connections and never reads or writes a byte: the agent
/// starts, scans on its schedule, and exits within 2 s of SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_accepts_connections_and_never_answers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let _silent = AbortOnDrop(tokio::spawn(async move {
        // Held open, never read nor written, until the test ends.
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }));
    // The double only writes the kubeconfig (its CA); the agent is pointed at the listener.
    let api = ApiServer::start().await.unwrap();
    let who = Identity {
        server: Some(format!("https://127.0.0.1:{port}")),
        ..Default::default()
    };
    let interval = INTERVAL.to_string();
    let started = Instant::now();
    let mut agent = Agent::start_as(&api, Some(&stale_host()), &who, &["--scan-interval-seconds", &interval]);
    let (took, unhealthy) = first_scan(&agent, started, Duration::from_secs(30)).await;
    eprintln!("silent server: first scan {:.1} s after start", took.as_secs_f64());
    note_startup_health("silent server", &unhealthy);
    assert!(
        took.as_secs_f64() <= 10.0 + INTERVAL + MARGIN + 2.0,
        "first scan {:.1} s after start\n{}",
        took.as_secs_f64(),
        agent.log()
    );
    assert_eq!(agent.metric(STALE_FIRING), Some(1.0), "{}", agent.log());
    assert_scans_on_schedule(&mut agent, Duration::from_secs(30), "silent server", |agent, _| {
        assert_host_findings_stay(agent);
    })
    .await;
    assert!(
        accepted.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the agent never connected to the silent server"
    );
    assert!(
        api.requests().is_empty(),
        "the agent went to the double instead of the silent server"
    );
    let log = agent.log();
    let errors = error_lines(&log);
    eprintln!(
        "silent server: {} connections, {} error lines, e.g.\n{}",
        accepted.load(std::sync::atomic::Ordering::Relaxed),
        errors.len(),
        errors.iter().take(6).copied().collect::<Vec<_>>().join("\n")
    );
    assert_no_panic(&agent);
    assert_exits_within(&mut agent, "silent server");
}

/// The "new finding" lines of the log for `rule`.
fn new_finding_lines<'a>(log: &'a str, rule: &str) -> Vec<&'a str> {
    let field = format!("rule={rule} ");
    log.lines()
        .filter(|l| l.contains("new finding") && (l.contains(&field) || l.contains(&format!("rule=\"{rule}\""))))
        .collect()
}

/// The driver lookups of the API work: GET and LIST of pods that are not the pod watch's
/// (which lists with `fieldSelector=spec.nodeName=...`).
fn lookup_requests(api: &ApiServer, since: SystemTime) -> Vec<(u16, String)> {
    api.requests()
        .into_iter()
        .filter(|r| {
            r.time >= since
                && !r.is_watch
                && r.resource == "pods"
                && (r.verb == "get" || r.verb == "list")
                && !r.query.contains("spec.nodeName")
        })
        .map(|r| (r.status, format!("{} {}?{}", r.method, r.path, r.query)))
        .collect()
}

/// A client-mode executor whose driver was deleted is orphaned: one finding, one Event, the
/// node condition True. Then every GET and LIST of pods fails (500) for many scans and several
/// API work passes: the orphan stays reported (its last good lookup, marked stale), is not
/// logged again, gets no second Event, and the condition never turns False; after recovery,
/// still one Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_driver_lookups_keep_the_orphan_its_event_and_its_condition() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    // Client mode: the driver is a notebook pod on another node; the executor has no owner
    // reference and finds it only through SPARK_DRIVER_URL.
    let app = SparkApp::new(SparkVersion::V3_5, "analytics", "adhoc-join");
    store.create(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "jupyter-alice", "namespace": "analytics", "uid": "nb-uid-1"},
        "spec": {"nodeName": "worker-2", "containers": [{"name": "notebook", "image": "jupyter/pyspark-notebook"}]},
        "status": {"phase": "Running", "podIP": "10.42.3.17"}}));
    store.create(app.executor(1, "exec-uid-1", NODE, None, "10.42.3.17"));
    let agent = Agent::start(&api, None, &[]);
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    wait_for("a few scans", Duration::from_secs(60), &agent, || agent.scans() >= 3).await;
    assert_eq!(agent.metric(ORPHANS), Some(0.0), "the driver is alive\n{}", agent.log());
    store.delete("pods", Some("analytics"), "jupyter-alice");
    wait_for("the orphan", Duration::from_secs(60), &agent, || {
        agent.metric(ORPHANS) == Some(1.0)
    })
    .await;
    wait_for("its event", Duration::from_secs(30), &agent, || {
        !events_with_reason(&api, "OrphanedExecutor").is_empty()
    })
    .await;
    wait_for("the node condition", Duration::from_secs(30), &agent, || {
        node_condition(&api, "SparkExecutorOrphans").is_some_and(|c| c["status"] == "True")
    })
    .await;
    // A pass or two in the healthy state, then the failures.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(events_with_reason(&api, "OrphanedExecutor").len(), 1);
    assert_eq!(
        new_finding_lines(&agent.log(), "orphaned-executor").len(),
        1,
        "{}",
        agent.log()
    );

    let faults = api.faults();
    // The fault rules match verb and resource only, not the namespace or the field selector:
    // the pod watch's LIST fails too, should it relist (its open watch stream is a `watch`,
    // untouched, and a failed relist keeps the store).
    faults.fail("get", "pods", 500, None, None);
    faults.fail("list", "pods", 500, None, None);
    let failing_at = Instant::now();
    let failing_since = SystemTime::now();
    let log_from = agent.log().len();
    let scans_before = agent.scans();
    let mut conditions: Vec<(f64, String)> = Vec::new();
    let mut samples = 0;
    let failed_passes = |agent: &Agent| {
        agent.log()[log_from..]
            .lines()
            .filter(|l| l.contains("API server unavailable"))
            .count()
    };
    loop {
        let at = failing_at.elapsed();
        assert_eq!(
            agent.metric(ORPHANS),
            Some(1.0),
            "the orphan lapsed {:.1} s into the failing lookups\n{}",
            at.as_secs_f64(),
            agent.log()
        );
        let status = node_condition(&api, "SparkExecutorOrphans")
            .map(|c| c["status"].as_str().unwrap_or("?").to_string())
            .unwrap_or_else(|| "(none)".into());
        if conditions.last().is_none_or(|(_, s)| *s != status) {
            conditions.push((at.as_secs_f64(), status.clone()));
        }
        assert_eq!(status, "True", "the condition while lookups fail: {conditions:?}");
        let events = events_with_reason(&api, "OrphanedExecutor");
        assert_eq!(events.len(), 1, "one Event while lookups fail: {events:#?}");
        samples += 1;
        let scans = agent.scans() - scans_before;
        let failed_lookups = lookup_requests(&api, failing_since)
            .iter()
            .filter(|(s, _)| *s == 500)
            .count();
        if at >= Duration::from_secs(10) && scans >= 5 && failed_passes(&agent) >= 2 && failed_lookups >= 2 {
            break;
        }
        assert!(
            at < Duration::from_secs(60),
            "after 60 s: {scans} scans, {} failed passes, {failed_lookups} failed lookups\n{}",
            failed_passes(&agent),
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let failed_for = failing_at.elapsed();
    let lookups = lookup_requests(&api, failing_since);
    let watch_lists = api
        .requests()
        .into_iter()
        .filter(|r| r.time >= failing_since && r.verb == "list" && r.query.contains("spec.nodeName"))
        .count();
    eprintln!(
        "lookups failing for {:.1} s: {} scans, {} failed API work passes, {} lookup requests ({} answered 500), {watch_lists} watch relists, {samples} samples, condition {conditions:?}",
        failed_for.as_secs_f64(),
        agent.scans() - scans_before,
        failed_passes(&agent),
        lookups.len(),
        lookups.iter().filter(|(s, _)| *s == 500).count(),
    );
    assert_eq!(agent.metric("nodemedic_pod_watch_up"), Some(1.0), "the watch stayed up");

    faults.clear();
    let recovered_since = SystemTime::now();
    let recovery_at = Instant::now();
    // The API work waits out its backoff, then looks the driver up again.
    wait_for(
        "a successful lookup after recovery",
        Duration::from_secs(120),
        &agent,
        || lookup_requests(&api, recovered_since).iter().any(|(s, _)| *s == 200),
    )
    .await;
    eprintln!(
        "first successful lookup {:.1} s after recovery",
        recovery_at.elapsed().as_secs_f64()
    );
    // A few passes after it.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(4) {
        assert_eq!(agent.metric(ORPHANS), Some(1.0), "{}", agent.log());
        let status = node_condition(&api, "SparkExecutorOrphans")
            .map(|c| c["status"].as_str().unwrap_or("?").to_string())
            .unwrap_or_else(|| "(none)".into());
        assert_eq!(status, "True", "the condition after recovery");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let events = events_with_reason(&api, "OrphanedExecutor");
    assert_eq!(events.len(), 1, "still one Event after recovery: {events:#?}");
    let log = agent.log();
    let lines = new_finding_lines(&log, "orphaned-executor");
    assert_eq!(
        lines.len(),
        1,
        "one \"new finding\" line for the orphan: {lines:#?}\n--- agent log\n{}",
        agent.log()
    );
    assert!(
        !agent
            .log()
            .lines()
            .any(|l| l.contains("new finding") && l.contains("driver_lookup_stale")),
        "the orphan was logged again as new once its lookup went stale"
    );
    assert_no_panic(&agent);
}

/// A host read that never returns (here a FIFO where the checkpoint was, as a hung mount would
/// behave): the scan loop is stuck, so `/healthz` fails after three scan intervals and the
/// kubelet would restart the agent; `/metrics` is still served; SIGTERM still ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_host_read_fails_healthz_and_sigterm_still_ends_the_daemon() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let mut agent = Agent::start(&api, Some(&stale_host()), &["--scan-interval-seconds", "1"]);
    wait_for("a first scan", Duration::from_secs(30), &agent, || {
        last_scan(&agent).is_some_and(|t| t > 0.0)
    })
    .await;
    assert_eq!(agent.get("/healthz").0, 200);
    let cp = agent.host_root().join("var/lib/kubelet/cpu_manager_state");
    std::fs::remove_file(&cp).unwrap();
    nix::unistd::mkfifo(&cp, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let stuck_at = Instant::now();
    wait_for("/healthz failing", Duration::from_secs(15), &agent, || {
        agent.get("/healthz").0 == 503
    })
    .await;
    let took = stuck_at.elapsed();
    let (_, body) = agent.get("/healthz");
    assert!(body.contains("no scan completed for"), "{body}");
    // Three intervals of 1 s, plus the scan already under way, plus the probe's polling.
    assert!(
        took >= Duration::from_secs(2) && took <= Duration::from_secs(6),
        "{took:?}"
    );
    let (code, metrics) = agent.get("/metrics");
    assert!(code == 200 && metrics.contains(SCAN_TS), "metrics still served");
    assert_exits_within(&mut agent, "a scan stuck on a hung read");
}
