//! An API server outage, end to end, and what it costs it: the API server refuses connections
//! for a minute, then answers 401 to everything for a minute, then is healthy again. One
//! agent, which is also the elected prober: the most request-hungry role (it renews the Lease
//! and probes besides its watch and its API work). It must stay within a small per-minute
//! request budget while the API server is away, and be ready again by itself once it is back.
//!
//! Counting. Refused connections never reach the API server double, so they are counted by the
//! kernel: `Tcp: AttemptFails` of /proc/net/snmp grows by one for each active open that fails
//! (SYN_SENT -> CLOSED, a refused `connect()`), sampled at each minute's boundaries. It counts
//! for a whole network namespace, and other tests on the machine refuse connections too (a run
//! in the machine's namespace once saw 296 refused connects in a minute where nothing refused
//! the agent): so the test runs itself again under `unshare --net`, test, double and agent alone
//! in a namespace of their own, when the machine allows it (it falls back to the machine's
//! namespace, and says so, when not). It first checks that three refused connects of its own
//! show in the counter, and takes them off. Requests that reach the double (the 401s, and
//! requests that raced the close) are counted from its request log. A minute's attempts are
//! both: watches are requests too. The agent's log gives a breakdown by loop (its kube client
//! logs every failed request; the probes' and the Lease reads' own connections are not logged).
//!
//! Flags: the DaemonSet's defaults for everything that paces the requests of an outage
//! (`--lease-duration-seconds 60`, `--probe-interval-seconds 60`, `--probe-timeout-seconds 60`,
//! `--request-timeout-seconds 10`). The harness's short scan interval (0.3 s) and driver cache
//! TTL (0.5 s) are kept on purpose: the API work then wants a driver lookup at every scan, so
//! only its backoff gate paces it (with the defaults, 30 s scans and a 300 s cache, it would ask
//! less). The node has one Spark executor whose driver runs on another node, so each API-work
//! pass makes a request: the LIST of the namespace's drivers; when it fails, the pass's other
//! lookups (the GET of the driver) are not sent (`spark::Breaker`): 1 request a pass.
//!
//! The schedules this budget is added up from are proved request by request, in milliseconds,
//! by the agent's unit test `daemon::outage_tests::an_outage_costs_the_budget_the_backoff_schedules_compute`
//! (the same loops against a fake API server under tokio's paused clock).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::{ApiServer, RequestRecord};
use nodemedic_tests::cluster::node_object;
use nodemedic_tests::measure::request_kind;
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, bound_pod};

/// The DaemonSet's defaults for what paces an outage's requests (daemonset/base/config.yaml).
const FLAGS: &[&str] = &[
    "--lease-duration-seconds",
    "60",
    "--probe-interval-seconds",
    "60",
    "--probe-timeout-seconds",
    "60",
    "--request-timeout-seconds",
    "10",
];

const MINUTE: Duration = Duration::from_secs(60);
/// Each fault lasts this many minutes.
/// One real minute of each: the first minute's ramp and a minute of 401s after it, with the
/// real binary, the kernel's count of refused connects and the recovery on wall time. Three
/// minutes of each, every request against its backoff ceiling, are the paused-clock unit
/// test's (`daemon::outage_tests`), in milliseconds.
const PHASE_MINUTES: u32 = 1;

// The budget, from the backoff schedules (agent/src/retry.rs: each pause is drawn from the
// upper half [c/2, c] of a ceiling c that doubles from `first` to `cap` with each failure; a
// success starts it over). While the API server is away:
//
// - the pod watch (daemon/watch.rs), 1 s doubling to 30 s: the cut watch may be resumed at once
//   (a cut that looks like the server ending it), then pauses of at least 0.5, 1, 2, 4, 8, 15,
//   15 s: attempts at >= 0, 0.5, 1.5, 3.5, 7.5, 15.5, 30.5, 45.5 s, so at most 8 in the first
//   minute; then at least 15 s apart, at most 4 a minute. It only watches again (no list) until
//   a 410.
// - the API work (daemon/apiwork.rs), gate 2 s doubling to 5 min, a pass wanted at every scan:
//   passes at >= 0, 1, 3, 7, 15, 31 s, then at least 32 s apart (64, 128 s... after more
//   failures): at most 6 passes in the first minute, 2 in any later one; 1 request a pass
//   (the first failed lookup stops the pass's others).
// - the election (leader.rs): the holder renews every 20 s (a third of the 60 s lease); a
//   failed renewal is retried after 10 s (its backoff, first 48 s = 4/5 of the lease, capped at
//   half the renew period) until it has not renewed for 40 s (2/3 of the lease), then it steps
//   down: at most 3 renewals, all within the first 40 s. Its next read of the Lease waits a
//   pause of at least 96 s (the backoff's third ceiling is 192 s), the following ones at least
//   150 s (the 300 s cap): at most 1 a minute.
// - the probes (apimon.rs `run`), only while it holds the Lease: a round (3 probes: /version,
//   a LIST, a dry-run create) every 60 s +-10%, and after a round where all failed a pause of
//   at least 30 s (60 s doubling to 5 min): within the 40 s before it steps down, at most 2
//   rounds, 6 requests. None after it stepped down.
//
// First minute of the refusal: 8 + 6 + 3 + 6 = 23. Any later minute: 4 + 2 + 1 = 7.
// The 401s start with every loop already backed off (a 401 is a failure like a refused
// connection: nothing starts over), so the first minute of the 401 phase has the later
// minutes' budget.
const RAMP: u64 = 23;
const STEADY: u64 = 7;

/// Back within the watch's 30 s cap of the API server's return, with a margin.
const RECOVERY: Duration = Duration::from_secs(60);
/// How long the test keeps watching for the prober's return when it is late, for the report.
const PROBER_EVIDENCE: Duration = Duration::from_secs(330);

/// `Tcp: AttemptFails` of /proc/net/snmp: failed active opens, system-wide.
fn attempt_fails() -> u64 {
    let text = std::fs::read_to_string("/proc/net/snmp").expect("/proc/net/snmp");
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "AttemptFails")
        .and_then(|(_, v)| v.parse().ok())
        .expect("Tcp: AttemptFails in /proc/net/snmp")
}

/// The agent's log lines written in `[from, to)` (each line starts with its RFC 3339 time).
fn log_between(log: &str, from: SystemTime, to: SystemTime) -> Vec<String> {
    let (from, to) = (
        jiff::Timestamp::try_from(from).unwrap(),
        jiff::Timestamp::try_from(to).unwrap(),
    );
    log.lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t >= from && t < to)
        })
        .map(str::to_string)
        .collect()
}

/// What the agent's log says it tried, by loop (refused attempts have no other trace).
fn log_counts(lines: &[String]) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for l in lines {
        let key = if l.contains("daemon::watch") && (l.contains("pod watch failed") || l.contains("pod list failed")) {
            "watch"
        } else if l.contains("API server unavailable; Events") {
            "api-work pass"
        } else if l.contains("nodemedic::leader") && l.contains("could not") {
            "lease write"
        } else if l.contains("kube_client") && l.contains("failed with error") {
            "kube-client request failed"
        } else {
            continue;
        };
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

/// One minute of an outage.
#[derive(Debug)]
struct Minute {
    phase: &'static str,
    index: u32,
    /// Failed connects (AttemptFails), the test's own subtracted.
    refused: u64,
    /// Requests that reached the double, by kind and status.
    reached: BTreeMap<String, usize>,
    reached_total: u64,
    /// Of which answered 401.
    unauthorized: u64,
    log: BTreeMap<&'static str, usize>,
}

impl Minute {
    fn attempts(&self) -> u64 {
        self.refused + self.reached_total
    }

    fn line(&self) -> String {
        format!(
            "{} minute {}: {} attempts = {} refused connects + {} requests ({} answered 401) {:?}; log: {:?}",
            self.phase,
            self.index + 1,
            self.attempts(),
            self.refused,
            self.reached_total,
            self.unauthorized,
            self.reached,
            self.log
        )
    }
}

/// The recovery as sampled every second after the API server is healthy again: when each
/// thing came back, from the moment of `clear()`.
#[derive(Debug, Default)]
struct Recovery {
    ready: Option<Duration>,
    watch_up: Option<Duration>,
    api_up: Option<Duration>,
    lease_renewed: Option<Duration>,
}

fn lease_renew_time(api: &ApiServer) -> Option<jiff::Timestamp> {
    let lease = api.store().get("leases", Some("default"), "nodemedic-prober")?;
    lease["spec"]["renewTime"].as_str()?.parse().ok()
}

/// This test's name, to run it again inside a network namespace of its own.
const TEST: &str = "outage::a_minute_refused_then_a_minute_of_401_cost_a_few_requests_and_the_agent_recovers_alone";
/// Set in the copy of this test that runs in its own network namespace.
const INSIDE: &str = "NODEMEDIC_OUTAGE_OWN_NETNS";

/// Where failed connects are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counting {
    /// In a network namespace of the test's own: only the test's and the agent's connects.
    OwnNamespace,
    /// In the machine's: anything else refusing connections meanwhile counts too.
    SystemWide,
}

#[test]
fn a_minute_refused_then_a_minute_of_401_cost_a_few_requests_and_the_agent_recovers_alone() {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    if std::env::var_os(INSIDE).is_some() {
        let lo = Command::new("ip").args(["link", "set", "lo", "up"]).status();
        assert!(
            lo.as_ref().is_ok_and(|s| s.success()),
            "ip link set lo up in the test's network namespace: {lo:?}"
        );
        return runtime().block_on(outage(Counting::OwnNamespace));
    }
    // AttemptFails counts for a whole network namespace: run this test again (test, double
    // and agent) in a new one of its own, where only they connect, when the machine allows it
    // (`unshare --net` needs CAP_SYS_ADMIN); else count in the machine's.
    let own = Command::new("unshare")
        .args(["--net", "ip", "link", "set", "lo", "up"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !own {
        eprintln!("no network namespace of its own (`unshare --net` failed): refused connects are counted system-wide");
        return runtime().block_on(outage(Counting::SystemWide));
    }
    let status = Command::new("unshare")
        .arg("--net")
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
        .env(INSIDE, "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the outage test, run in a network namespace of its own, failed ({status}): its output is above"
    );
}

async fn outage(counting: Counting) {
    eprintln!("counting failed connects: {counting:?}");
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    store.create(bound_pod("batch", "job-0", "pod-uid-0", NODE, "default-scheduler"));
    store.create(bound_pod("batch", "job-1", "pod-uid-1", NODE, "default-scheduler"));
    // A Spark application: its driver on another node, one executor here (owned by it).
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "nightly");
    let driver = format!("{}-driver", app.prefix);
    store.create(app.driver("driver-uid-1", "worker-2", "10.42.2.10"));
    store.create(app.executor(
        1,
        "exec-uid-1",
        NODE,
        Some((&driver, "driver-uid-1")),
        &format!("{}-driver-svc.etl.svc", app.prefix),
    ));

    let agent = Agent::start(&api, None, FLAGS);
    wait_for(
        "ready, prober, API up, the driver found",
        Duration::from_secs(90),
        &agent,
        || {
            agent.get("/readyz").0 == 200
                && agent.metric("nodemedic_prober") == Some(1.0)
                && agent.metric("nodemedic_api_up") == Some(1.0)
                && agent.metric("nodemedic_orphaned_executors") == Some(0.0)
                && api
                    .requests()
                    .iter()
                    .any(|r| r.verb == "list" && r.resource == "pods" && r.query.contains("spark-role"))
        },
    )
    .await;
    // Begin just after the holder's second renewal (40 s after it was elected, at its first
    // probe round): the next round is due 14 to 26 s into the outage, while it still holds the
    // Lease (until 40 s in), so the outage meets a renewal schedule and a probe round.
    let renewals = || {
        api.requests()
            .iter()
            .filter(|r| r.verb == "update" && r.resource == "leases" && r.status == 200)
            .count()
    };
    wait_for("two renewals of the Lease", Duration::from_secs(90), &agent, || {
        renewals() >= 2
    })
    .await;

    let faults = api.faults();
    let mut minutes: Vec<Minute> = vec![];
    let outage_began = Instant::now();
    // Windows follow each other without a gap: each starts where the last one ended.
    let mut at = (SystemTime::now(), attempt_fails());
    for phase in ["refused", "401"] {
        let phase_began = Instant::now();
        if phase == "refused" {
            faults.set_refusing(true);
            // The counter works here: three refused connects of our own show in it (and are
            // not the agent's: taken off the first minute).
            let before = attempt_fails();
            for _ in 0..3 {
                let e = std::net::TcpStream::connect(api.https_addr()).expect_err("the port is closed");
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
            }
            let grew = attempt_fails() - before;
            assert!(grew >= 3, "AttemptFails grew by {grew} for 3 refused connects");
            eprintln!("self-check: 3 refused connects of the test's own: AttemptFails +{grew}");
            at.1 += 3;
        } else {
            // 401 first, then listening again: no request is served normally in between.
            faults.fail("*", "*", 401, None, None);
            faults.set_refusing(false);
        }
        for index in 0..PHASE_MINUTES {
            tokio::time::sleep_until((phase_began + MINUTE * (index + 1)).into()).await;
            let now = (SystemTime::now(), attempt_fails());
            let requests: Vec<RequestRecord> = api
                .requests()
                .into_iter()
                .filter(|r| r.time >= at.0 && r.time < now.0)
                .collect();
            let mut reached = BTreeMap::new();
            for r in &requests {
                *reached.entry(format!("{} {}", request_kind(r), r.status)).or_insert(0) += 1;
            }
            let m = Minute {
                phase,
                index,
                refused: now.1.saturating_sub(at.1),
                reached,
                reached_total: requests.len() as u64,
                unauthorized: requests.iter().filter(|r| r.status == 401).count() as u64,
                log: log_counts(&log_between(&agent.log(), at.0, now.0)),
            };
            eprintln!("{}", m.line());
            minutes.push(m);
            at = now;
        }
    }

    // Back: nothing is done for the agent.
    faults.clear();
    let cleared = Instant::now();
    let cleared_sys = SystemTime::now();
    let cleared_at = jiff::Timestamp::try_from(cleared_sys).unwrap();
    let mut rec = Recovery::default();
    while cleared.elapsed() < PROBER_EVIDENCE {
        let t = cleared.elapsed();
        if rec.ready.is_none() && agent.get("/readyz").0 == 200 {
            rec.ready = Some(t);
        }
        if rec.watch_up.is_none() && agent.metric("nodemedic_pod_watch_up") == Some(1.0) {
            rec.watch_up = Some(t);
        }
        if rec.api_up.is_none() && agent.metric("nodemedic_api_up") == Some(1.0) {
            rec.api_up = Some(t);
        }
        if rec.lease_renewed.is_none() && lease_renew_time(&api).is_some_and(|r| r > cleared_at) {
            rec.lease_renewed = Some(t);
        }
        let done = rec.ready.is_some() && rec.watch_up.is_some();
        let prober_back = rec.api_up.is_some() || rec.lease_renewed.is_some();
        // The watch and readiness must be back within RECOVERY; the prober is waited for
        // longer only to report when it came back.
        if (done && prober_back) || (t > RECOVERY && !done) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let since_clear: Vec<RequestRecord> = api.requests().into_iter().filter(|r| r.time >= cleared_sys).collect();
    let mut after = BTreeMap::new();
    for r in &since_clear {
        *after.entry(format!("{} {}", request_kind(r), r.status)).or_insert(0) += 1;
    }
    // Events written since the API server came back (the API work's first passes).
    let events_after: Vec<String> = store
        .list("events.events.k8s.io")
        .into_iter()
        .filter_map(|e| {
            let created = e["metadata"]["creationTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())?;
            // creationTimestamp has whole seconds.
            let after = (created - cleared_at).total(jiff::Unit::Second).ok()?;
            (after > -1.0).then(|| {
                format!(
                    "{} ~{after:.0} s after clear(): {}",
                    e["reason"].as_str().unwrap_or_default(),
                    e["note"].as_str().unwrap_or_default()
                )
            })
        })
        .collect();

    eprintln!("--- per minute (attempts = refused connects + requests that reached the server)");
    for m in &minutes {
        eprintln!("{}", m.line());
    }
    let secs = |d: Option<Duration>| d.map_or("not back".to_string(), |d| format!("{:.0} s", d.as_secs_f64()));
    eprintln!(
        "--- recovery after clear(): /readyz 200 after {}, pod_watch_up 1 after {}, api_up 1 after {}, Lease renewed after {}",
        secs(rec.ready),
        secs(rec.watch_up),
        secs(rec.api_up),
        secs(rec.lease_renewed)
    );
    eprintln!(
        "requests in the {:.0} s since clear(): {after:?}",
        cleared.elapsed().as_secs_f64()
    );
    eprintln!(
        "apiserver-unreachable firing now: {:?}; Events since clear(): {events_after:#?}",
        agent.metric("nodemedic_rule_firing{rule=\"apiserver-unreachable\"}"),
    );
    let outage_log = agent.log();
    let interesting: Vec<&str> = outage_log
        .lines()
        .filter(|l| !l.contains(" scan ") && !l.ends_with(" scan") && !l.contains("kube_client"))
        .collect();
    eprintln!(
        "--- agent log (without scans and kube-client lines), outage began {:.0} s before clear()\n{}",
        (cleared - outage_began).as_secs_f64(),
        interesting.join("\n")
    );

    // The budget.
    let over: Vec<String> = minutes
        .iter()
        .filter(|m| {
            let budget = if m.phase == "refused" && m.index == 0 {
                RAMP
            } else {
                STEADY
            };
            m.attempts() > budget
        })
        .map(Minute::line)
        .collect();
    assert!(
        over.is_empty(),
        "over budget ({RAMP} attempts in the first minute, {STEADY} in any other; refused connects counted \
         {counting:?}{}):\n{}",
        if counting == Counting::SystemWide {
            ", so another process refusing connections meanwhile counts too"
        } else {
            ""
        },
        over.join("\n")
    );
    // Recovery, by itself.
    assert!(
        rec.ready.is_some_and(|t| t <= RECOVERY) && rec.watch_up.is_some_and(|t| t <= RECOVERY),
        "not ready within {RECOVERY:?} of the API server's return: {rec:?}\n{}",
        agent.log()
    );
    // Required: the prober is back within RECOVERY too. The first answered request after the
    // outage wakes the election (`apimon::run` on ApiContact's "back" signal), so its Lease read
    // follows the watch's return instead of waiting out its backoff (up to 5 minutes).
    assert!(
        rec.api_up.is_some_and(|t| t <= RECOVERY) || rec.lease_renewed.is_some_and(|t| t <= RECOVERY),
        "the prober did not come back (nodemedic_api_up 1 or the Lease renewed) within {RECOVERY:?} of the API \
         server's return: {rec:?}"
    );
}
