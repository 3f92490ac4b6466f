//! A fleet: 30 real `nodemedic run` agents against one API server double elect one prober
//! (the Lease `nodemedic-prober`), keep to their request budget, fail over when the holder is
//! killed or stops, and come back to exactly one prober after the API server refused
//! connections for 30 s.
//!
//! Leadership is judged from the API server's side, independently of what the agents say: the
//! Lease is sampled every 250 ms, and the dry-run creates (the admission probe, which only the
//! prober sends) are attributed by bearer token. What the agents say (`nodemedic_prober` on
//! each `/metrics`) is scraped from all of them every second and must never name two.
//!
//! Periods are short so the test takes about three minutes: a 6 s lease (renewed every 2 s,
//! read by the others every 4.8 s), a 3 s probe interval, a 2 s scan interval (30 debug
//! processes on two cores). The request counts it prints are per minute at these periods; the
//! `fleet-bench` program measures the default ones.
//!
//! The election's schedules (renewals, reads, failover after a kill, a release and an outage)
//! are proved at the default 60 s lease under tokio's paused clock by the agent's unit tests
//! `daemon::outage_tests::election`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use nodemedic::leader::ElectionConfig;
use nodemedic_tests::agent::{Agent, Identity};
use nodemedic_tests::apiserver::{ApiServer, RequestRecord};
use nodemedic_tests::fleet::{self, LeaseSample, LeaseSampler, secs_between};

const N: usize = 30;
const LEASE_SECONDS: u64 = 6;
const PROBE_SECONDS: f64 = 3.0;
const SCAN_SECONDS: f64 = 2.0;
/// The default `--condition-heartbeat-seconds`.
const HEARTBEAT_SECONDS: f64 = 300.0;
/// The probe interval's jitter (±10%, `apimon::run`).
const PROBE_JITTER: f64 = 0.1;
const STEADY: Duration = Duration::from_secs(60);
const OUTAGE: Duration = Duration::from_secs(30);

/// The election's periods at this test's lease duration, from the agent's own code.
fn election() -> ElectionConfig {
    ElectionConfig {
        namespace: "default".into(),
        name: fleet::LEASE.into(),
        identity: String::new(),
        duration: Duration::from_secs(LEASE_SECONDS),
        timeout: Duration::from_secs(3),
    }
}

fn lease_duration() -> f64 {
    LEASE_SECONDS as f64
}

/// One scrape of every agent's `nodemedic_prober`.
#[derive(Debug, Clone)]
struct Sweep {
    start: SystemTime,
    end: SystemTime,
    /// Per agent; `None` when it did not answer (killed, stopped, or too slow).
    values: Vec<Option<f64>>,
}

impl Sweep {
    fn ones(&self) -> Vec<usize> {
        (0..self.values.len())
            .filter(|&i| self.values[i] == Some(1.0))
            .collect()
    }
}

fn prober_metric(addr: &str) -> Option<f64> {
    let sock = addr.parse().ok()?;
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.lines()
        .find_map(|l| l.strip_prefix("nodemedic_prober ")?.trim().parse().ok())
}

/// Scrapes every agent once a second on its own thread (blocking sockets, off the runtime
/// that serves the API double).
struct Sweeper {
    stop: Arc<AtomicBool>,
    sweeps: Arc<Mutex<Vec<Sweep>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sweeper {
    fn start(addrs: Vec<String>) -> Sweeper {
        let stop = Arc::new(AtomicBool::new(false));
        let sweeps = Arc::new(Mutex::new(Vec::new()));
        let (stop2, sink) = (stop.clone(), sweeps.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let start = SystemTime::now();
                let values = addrs.iter().map(|a| prober_metric(a)).collect();
                let end = SystemTime::now();
                sink.lock().unwrap().push(Sweep { start, end, values });
                std::thread::sleep(Duration::from_secs(1).saturating_sub(t0.elapsed()));
            }
        });
        Sweeper {
            stop,
            sweeps,
            thread: Some(thread),
        }
    }

    fn all(&self) -> Vec<Sweep> {
        self.sweeps.lock().unwrap().clone()
    }

    fn latest_since(&self, t: SystemTime) -> Option<Sweep> {
        self.sweeps.lock().unwrap().iter().rev().find(|s| s.start >= t).cloned()
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `check` every 100 ms until it gives a value, or panics after `timeout` with `context()`.
async fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}\n{}", context());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn dry_runs(requests: &[RequestRecord]) -> Vec<(SystemTime, usize)> {
    let mut v: Vec<(SystemTime, usize)> = requests
        .iter()
        .filter(|r| fleet::is_dry_run(r))
        .filter_map(|r| Some((r.time, fleet::sender(r)?)))
        .collect();
    v.sort();
    v
}

/// The agent the Lease names now, if it is alive.
fn live_holder(api: &ApiServer, dead: &BTreeSet<usize>) -> Option<usize> {
    fleet::read_lease(&api.store())
        .holder_index()
        .filter(|h| !dead.contains(h))
}

/// The agent that holds the Lease now, if it is alive and has sent a dry run since `since`.
fn live_prober_since(api: &ApiServer, dead: &BTreeSet<usize>, since: SystemTime) -> Option<usize> {
    let h = live_holder(api, dead)?;
    dry_runs(&api.requests())
        .iter()
        .any(|(t, i)| *t >= since && *i == h)
        .then_some(h)
}

/// When agent `i` first wrote the Lease (an accepted create or update) at or after `after`.
fn lease_write(requests: &[RequestRecord], i: usize, after: SystemTime) -> Option<SystemTime> {
    requests
        .iter()
        .filter(|r| r.time >= after && r.resource == "leases" && matches!(r.verb.as_str(), "update" | "create"))
        .filter(|r| (200..300).contains(&r.status) && fleet::sender(r) == Some(i))
        .map(|r| r.time)
        .min()
}

fn fmt_samples(samples: &[LeaseSample], last: usize) -> String {
    samples[samples.len().saturating_sub(last)..]
        .iter()
        .map(|s| {
            format!(
                "  {:.2} holder={:?} renew={:?} transitions={}",
                s.at.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs_f64()
                    % 1000.0,
                s.holder,
                s.renew_time,
                s.transitions
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The warnings of every agent's log, for a failure message.
fn warnings(agents: &[Agent]) -> String {
    let mut out = String::new();
    for (i, a) in agents.iter().enumerate() {
        let lines: Vec<String> = a
            .log()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("elected") || l.contains("released"))
            .map(str::to_string)
            .collect();
        let skip = lines.len().saturating_sub(8);
        for l in &lines[skip..] {
            out.push_str(&format!("  [{i}] {l}\n"));
        }
    }
    out
}

/// The one agent the Lease names, when it is alive and a sweep started after `since` found
/// every live agent answering and it alone reporting `nodemedic_prober 1`.
fn one_leader(api: &ApiServer, sweeper: &Sweeper, dead: &BTreeSet<usize>, since: SystemTime) -> Option<usize> {
    let h = live_holder(api, dead)?;
    let sweep = sweeper.latest_since(since)?;
    let all_answered = (0..N).filter(|i| !dead.contains(i)).all(|i| sweep.values[i].is_some());
    (all_answered && sweep.ones() == [h]).then_some(h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_agents_elect_one_prober_keep_the_budget_and_fail_over() {
    let cfg = election();
    let (renew, read, lease) = (
        cfg.renew_every().as_secs_f64(),
        cfg.read_every().as_secs_f64(),
        lease_duration(),
    );
    let api = ApiServer::start().await.unwrap();
    for i in 0..N {
        api.store().create(fleet::node_object(i));
    }
    let leases = LeaseSampler::start(&api, Duration::from_millis(250));
    let (lease_s, probe_s, scan_s) = (
        LEASE_SECONDS.to_string(),
        PROBE_SECONDS.to_string(),
        SCAN_SECONDS.to_string(),
    );
    let flags = [
        "--lease-duration-seconds",
        lease_s.as_str(),
        "--probe-interval-seconds",
        probe_s.as_str(),
        "--scan-interval-seconds",
        scan_s.as_str(),
    ];
    let started = Instant::now();
    // Started one after another over one read period, as a DaemonSet's pods come up: the
    // followers read the Lease at a fixed period without jitter, so agents started at the
    // same instant would read it at the same instants until a failure's backoff spreads them.
    let mut agents: Vec<Agent> = Vec::with_capacity(N);
    for i in 0..N {
        agents.push(tokio::task::block_in_place(|| {
            Agent::start_as(&api, None, &Identity::fleet(i), &flags)
        }));
        tokio::time::sleep(cfg.read_every() / N as u32).await;
    }
    eprintln!("fleet: {N} agents started in {:.1} s", started.elapsed().as_secs_f64());
    let sweeper = Sweeper::start(agents.iter().map(|a| a.addr.clone()).collect());
    let mut dead: BTreeSet<usize> = BTreeSet::new();
    let ctx = |what: &str| format!("{what}\n--- lease\n{}", fmt_samples(&leases.samples(), 40));

    // Election: one holder, and it alone says so.
    let t0 = SystemTime::now();
    let first = wait_until(
        "one elected prober",
        Duration::from_secs(90),
        || one_leader(&api, &sweeper, &dead, t0),
        || {
            format!(
                "{}\n--- last sweep {:?}\n--- warnings\n{}",
                ctx(""),
                sweeper.all().last().map(Sweep::ones),
                warnings(&agents)
            )
        },
    )
    .await;
    eprintln!(
        "fleet: agent {first} elected {:.1} s after the start",
        started.elapsed().as_secs_f64()
    );

    // Steady state: one lease duration of warm-up (every agent has read the Lease and sent
    // its first condition patch), then a minute counted.
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;
    let w0 = SystemTime::now();
    tokio::time::sleep(STEADY).await;
    let w1 = SystemTime::now();
    let minutes = secs_between(w0, w1) / 60.0;
    let window = secs_between(w0, w1);
    let requests = api.requests();
    let samples = leases.samples();
    let holders: BTreeSet<Option<usize>> = samples
        .iter()
        .filter(|s| s.at >= w0 && s.at < w1)
        .map(LeaseSample::holder_index)
        .collect();
    assert_eq!(
        holders,
        BTreeSet::from([Some(first)]),
        "the holder changed at steady state\n{}",
        ctx("")
    );
    let leader = first;
    let counts = fleet::count_by_agent(&requests, w0, w1);
    let total = |i: usize| counts.get(&i).map_or(0, |k| k.values().sum::<usize>());
    let kind = |i: usize, k: &str| counts.get(&i).and_then(|m| m.get(k)).copied().unwrap_or(0);
    const LEASE_GET: &str = "get leases.coordination.k8s.io";
    const LEASE_PUT: &str = "update leases.coordination.k8s.io";
    const DRY_RUN: &str = "create pods (dry run)";
    let followers: Vec<usize> = (0..N).filter(|&i| i != leader).collect();
    let follower_rates: Vec<f64> = followers.iter().map(|&i| total(i) as f64 / minutes).collect();
    let follower_mean = follower_rates.iter().sum::<f64>() / follower_rates.len() as f64;
    let follower_max = follower_rates.iter().copied().fold(0.0, f64::max);
    let leader_rate = total(leader) as f64 / minutes;
    let cluster_rate = (0..N).map(total).sum::<usize>() as f64 / minutes;
    let mut follower_kinds: BTreeMap<String, usize> = BTreeMap::new();
    for &i in &followers {
        for (k, n) in counts.get(&i).into_iter().flatten() {
            *follower_kinds.entry(k.clone()).or_default() += n;
        }
    }
    // The periods as the API server saw them: the median gap between one agent's requests of
    // a kind, over all agents.
    let median_gap = |pick: &dyn Fn(&RequestRecord) -> bool| {
        let mut gaps = vec![];
        for i in 0..N {
            let times: Vec<SystemTime> = requests
                .iter()
                .filter(|r| r.time >= w0 && r.time < w1 && fleet::sender(r) == Some(i) && pick(r))
                .map(|r| r.time)
                .collect();
            gaps.extend(times.windows(2).map(|w| secs_between(w[0], w[1])));
        }
        nodemedic_tests::measure::median(gaps)
    };
    let read_period = median_gap(&|r| r.resource == "leases" && r.verb == "get");
    let renew_period = median_gap(&|r| r.resource == "leases" && r.verb == "update");
    let probe_period = median_gap(&|r| fleet::is_dry_run(r));
    eprintln!(
        "fleet: measured periods (median): Lease read {read_period:.2} s (set: {read} s), renewal {renew_period:.2} s \
         (set: {renew} s), dry run {probe_period:.2} s (set: {PROBE_SECONDS} s ±10%)"
    );
    let steady_dry: Vec<(SystemTime, usize)> = dry_runs(&requests)
        .into_iter()
        .filter(|(t, _)| *t >= w0 && *t < w1)
        .collect();
    let dry_per_interval = steady_dry.len() as f64 * PROBE_SECONDS / window;
    eprintln!("fleet: steady window {window:.1} s, leader agent {leader}");
    eprintln!(
        "fleet: follower requests/min (non-watch): mean {follower_mean:.2}, max {follower_max:.2}; by kind, \
         per follower per minute: {}",
        follower_kinds
            .iter()
            .map(|(k, n)| format!("{k}: {:.2}", *n as f64 / followers.len() as f64 / minutes))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!(
        "fleet: leader requests/min: {leader_rate:.2} ({})",
        counts
            .get(&leader)
            .into_iter()
            .flatten()
            .map(|(k, n)| format!("{k}: {:.2}", *n as f64 / minutes))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!(
        "fleet: cluster-wide requests/min (non-watch, {N} agents): {cluster_rate:.1}; dry-runs {} = {dry_per_interval:.2} per \
         probe interval",
        steady_dry.len()
    );

    // Followers: the Lease read every four fifths of the duration (±10%), condition
    // heartbeats, nothing else. Bounds: whole shortest periods in the window, plus one for the
    // window's edges.
    let reads_max = (window / (read * 0.9)).floor() + 1.0;
    let heartbeats_max = (window / HEARTBEAT_SECONDS).ceil();
    let follower_bound = reads_max + heartbeats_max;
    eprintln!(
        "fleet: expected per follower in {window:.0} s: {:.1} Lease reads + {:.1} heartbeats (bound {follower_bound})",
        window / read,
        window / HEARTBEAT_SECONDS
    );
    for &i in &followers {
        assert!(
            total(i) as f64 <= follower_bound,
            "follower {i} made {} requests in {window:.0} s, more than {follower_bound}: {:?}",
            total(i),
            counts.get(&i)
        );
        assert!(
            kind(i, LEASE_GET) as f64 >= (window / read).floor() - 1.0,
            "follower {i} read the Lease {} times in {window:.0} s: {:?}",
            kind(i, LEASE_GET),
            counts.get(&i)
        );
        assert_eq!(kind(i, DRY_RUN), 0, "follower {i} probed: {:?}", counts.get(&i));
        assert_eq!(
            kind(i, LEASE_PUT),
            0,
            "follower {i} wrote the Lease: {:?}",
            counts.get(&i)
        );
    }
    // The leader: a renewal every third of the duration, a probe round (GET /version, LIST
    // pods, the dry run, the API server's /metrics) every probe interval (-10% at most), the
    // webhook configurations and the probe namespace every five minutes, heartbeats. No reads
    // of the Lease.
    let rounds_max = (window / (PROBE_SECONDS * (1.0 - PROBE_JITTER))).floor() + 1.0;
    let renews_max = (window / renew).floor() + 1.0;
    let leader_bound = renews_max + 4.0 * rounds_max + 3.0 + heartbeats_max;
    assert!(
        total(leader) as f64 <= leader_bound,
        "the leader made {} requests in {window:.0} s, more than {leader_bound}: {:?}",
        total(leader),
        counts.get(&leader)
    );
    assert!(
        kind(leader, LEASE_PUT) as f64 >= (window / renew).floor() - 2.0
            && kind(leader, LEASE_PUT) as f64 <= renews_max,
        "the leader renewed {} times in {window:.0} s (every {renew} s expected)",
        kind(leader, LEASE_PUT)
    );
    assert_eq!(kind(leader, LEASE_GET), 0, "the holder does not read the Lease");
    // Cluster-wide: at most one dry run per probe interval, from the leader.
    assert!(
        steady_dry.len() as f64 <= rounds_max,
        "{} dry runs in {window:.0} s: more than one per probe interval ({rounds_max} at most)",
        steady_dry.len()
    );
    assert!(
        steady_dry.len() as f64 >= window / (PROBE_SECONDS * (1.0 + PROBE_JITTER)) / 2.0,
        "only {} dry runs in {window:.0} s: the prober does not probe",
        steady_dry.len()
    );
    assert!(
        steady_dry.iter().all(|(_, i)| *i == leader),
        "dry runs at steady state from others than the leader {leader}: {:?}",
        steady_dry.iter().map(|(_, i)| *i).collect::<BTreeSet<_>>()
    );
    let min_gap = steady_dry
        .windows(2)
        .map(|w| secs_between(w[0].0, w[1].0))
        .fold(f64::MAX, f64::min);
    eprintln!("fleet: shortest gap between two dry runs at steady state: {min_gap:.2} s");
    assert!(
        min_gap >= PROBE_SECONDS * (1.0 - PROBE_JITTER) - 0.3,
        "two dry runs {min_gap:.2} s apart at steady state"
    );
    // Every sweep of the window: the holder alone reports prober 1.
    let steady_sweeps: Vec<Sweep> = sweeper
        .all()
        .into_iter()
        .filter(|s| s.start >= w0 && s.end < w1)
        .collect();
    let exact = steady_sweeps.iter().filter(|s| s.ones() == [leader]).count();
    eprintln!(
        "fleet: {exact} of {} sweeps of the steady window found the leader alone reporting prober 1",
        steady_sweeps.len()
    );
    assert!(
        steady_sweeps.iter().all(|s| s.ones().iter().all(|&i| i == leader)),
        "another agent reported prober 1 at steady state"
    );
    assert!(
        exact * 10 >= steady_sweeps.len() * 9 && !steady_sweeps.is_empty(),
        "the leader reported prober 1 in only {exact} of {} sweeps",
        steady_sweeps.len()
    );

    // Failover: the holder is killed. Another live agent holds the Lease and probes within
    // two lease durations (the record unchanged for a whole duration by the followers'
    // clocks, plus at most one read period).
    let killed = leader;
    let k = SystemTime::now();
    agents[killed].signal(Signal::SIGKILL);
    dead.insert(killed);
    let second = wait_until(
        "another agent to take over from the killed holder and probe",
        Duration::from_secs(LEASE_SECONDS * 4),
        || live_prober_since(&api, &dead, k),
        || format!("{}\n--- warnings\n{}", ctx(""), warnings(&agents)),
    )
    .await;
    let taken = lease_write(&api.requests(), second, k).unwrap();
    let probing = dry_runs(&api.requests())
        .into_iter()
        .find(|(t, i)| *t >= k && *i == second)
        .map(|(t, _)| t)
        .unwrap();
    let kill_lease = secs_between(k, taken);
    let kill_failover = secs_between(k, taken.max(probing));
    eprintln!(
        "fleet: SIGKILL of holder {killed}: agent {second} holds the Lease after {kill_lease:.2} s, probes after {:.2} s \
         (lease {lease} s, bound {} s)",
        secs_between(k, probing),
        2.0 * lease
    );
    assert!(
        kill_failover < 2.0 * lease,
        "failover after SIGKILL took {kill_failover:.2} s, not under two lease durations\n{}",
        ctx("")
    );
    let t = SystemTime::now();
    let again = wait_until(
        "the new holder alone reporting prober 1",
        Duration::from_secs(LEASE_SECONDS * 3),
        || one_leader(&api, &sweeper, &dead, t),
        || ctx(""),
    )
    .await;
    assert_eq!(again, second);
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;

    // SIGTERM: the holder releases the Lease, and another agent takes over at its next read.
    let stopped = second;
    let s = SystemTime::now();
    agents[stopped].signal(Signal::SIGTERM);
    dead.insert(stopped);
    let exited = Instant::now() + Duration::from_secs(10);
    while agents[stopped].alive() && Instant::now() < exited {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!agents[stopped].alive(), "agent {stopped} did not exit on SIGTERM");
    assert!(
        agents[stopped].log().contains("released the Lease"),
        "agent {stopped} did not release the Lease:\n{}",
        agents[stopped].log()
    );
    let third = wait_until(
        "another agent to take the released Lease and probe",
        Duration::from_secs(LEASE_SECONDS * 4),
        || live_prober_since(&api, &dead, s),
        || format!("{}\n--- warnings\n{}", ctx(""), warnings(&agents)),
    )
    .await;
    // The sampler's next reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let samples = leases.samples();
    let first_change = samples
        .iter()
        .find(|x| x.at >= s && x.holder_index() != Some(stopped))
        .unwrap();
    assert!(
        first_change.holder.is_none() || first_change.holder_index() == Some(third),
        "after SIGTERM the Lease went to {:?}",
        first_change.holder
    );
    let released_seen = samples.iter().any(|x| x.at >= s && x.exists && x.holder.is_none());
    let released = lease_write(&api.requests(), stopped, s);
    let taken = lease_write(&api.requests(), third, s).unwrap();
    let term_takeover = secs_between(s, taken);
    eprintln!(
        "fleet: SIGTERM of holder {stopped}: released after {:.2} s (seen empty by the sampler: {released_seen}), agent \
         {third} holds it after {term_takeover:.2} s (read period {read} s)",
        released.map_or(f64::NAN, |t| secs_between(s, t))
    );
    assert!(released.is_some(), "no release written by agent {stopped}");
    assert!(
        term_takeover <= read + 1.0,
        "the released Lease was taken {term_takeover:.2} s after SIGTERM, more than one read period ({read} s) + 1 s\n{}",
        ctx("")
    );
    let t = SystemTime::now();
    let again = wait_until(
        "the holder after SIGTERM alone reporting prober 1",
        Duration::from_secs(LEASE_SECONDS * 3),
        || one_leader(&api, &sweeper, &dead, t),
        || ctx(""),
    )
    .await;
    assert_eq!(again, third);
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;

    // Outage: connections refused for 30 s. The holder stops claiming to probe once it could
    // not renew for two thirds of the duration. Afterwards one live agent holds the Lease
    // again and probes, and it alone says so. No agent compares clocks: a follower that had
    // not seen the Lease's last record before the outage waits a whole duration from its first
    // read after it, and that first read comes when its backoff (from four fifths of the
    // duration, doubling) says.
    let o = SystemTime::now();
    api.faults().set_refusing(true);
    tokio::time::sleep(OUTAGE).await;
    api.faults().set_refusing(false);
    let r = SystemTime::now();
    let before = fleet::read_lease(&api.store());
    let (fourth, rewritten, probing) = wait_until(
        "a live agent holding the Lease and probing after the outage",
        Duration::from_secs(LEASE_SECONDS * 10),
        || {
            let h = live_holder(&api, &dead)?;
            let requests = api.requests();
            let written = lease_write(&requests, h, r)?;
            let probed = dry_runs(&requests).into_iter().find(|(t, i)| *t >= r && *i == h)?.0;
            Some((h, written, probed))
        },
        || format!("{}\n--- warnings\n{}", ctx(""), warnings(&agents)),
    )
    .await;
    let again = wait_until(
        "the holder after the outage alone reporting prober 1",
        Duration::from_secs(LEASE_SECONDS * 3),
        || one_leader(&api, &sweeper, &dead, r),
        || ctx(""),
    )
    .await;
    let settled = SystemTime::now();
    assert_eq!(again, fourth);
    let outage_lease = secs_between(r, rewritten);
    let outage_back = secs_between(r, rewritten.max(probing));
    let outage_one = secs_between(r, settled);
    eprintln!(
        "fleet: after {} s refused: agent {fourth} (agent {:?} before) holds the Lease after {outage_lease:.2} s, probes \
         after {:.2} s; all agents' metrics agree after {outage_one:.2} s",
        OUTAGE.as_secs(),
        before.holder_index(),
        secs_between(r, probing)
    );
    let in_outage: Vec<Sweep> = sweeper
        .all()
        .into_iter()
        .filter(|x| x.start >= o && x.end < r)
        .collect();
    let quiet_from = o + Duration::from_secs_f64(cfg.renew_deadline().as_secs_f64() + renew + SCAN_SECONDS + 2.0);
    let claimed: Vec<(f64, Vec<usize>)> = in_outage
        .iter()
        .filter(|x| x.start >= quiet_from && !x.ones().is_empty())
        .map(|x| (secs_between(o, x.start), x.ones()))
        .collect();
    assert!(
        claimed.is_empty(),
        "agents kept reporting prober 1 while the API server refused connections (seconds into the outage, agents): \
         {claimed:?}"
    );
    assert!(
        outage_back < 2.0 * lease,
        "one prober again {outage_back:.2} s after the API server came back, not within two lease durations ({} s)\n{}",
        2.0 * lease,
        ctx("")
    );
    // The metric follows at the holder's next scan; the sweeps come every second.
    assert!(
        outage_one < 2.0 * lease + SCAN_SECONDS + 1.5,
        "the agents' metrics agreed on one prober only {outage_one:.2} s after the API server came back"
    );
    // A few more probe rounds, for the whole-run checks below.
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;

    // The whole run. Never two agents reporting prober 1 in one sweep.
    let sweeps = sweeper.all();
    let doubles: Vec<(f64, Vec<usize>)> = sweeps
        .iter()
        .filter(|x| x.ones().len() > 1)
        .map(|x| (secs_between(o, x.start), x.ones()))
        .collect();
    let zero_sweeps = sweeps.iter().filter(|x| x.ones().is_empty()).count();
    eprintln!(
        "fleet: {} sweeps of all agents' nodemedic_prober: {} with two or more at 1, {zero_sweeps} with none (transitions, \
         the outage)",
        sweeps.len(),
        doubles.len()
    );
    assert!(
        doubles.is_empty(),
        "two agents reported prober 1 at once (seconds from the outage's start, agents): {doubles:?}"
    );
    // Every dry run from the agent the Lease named then, and two agents' dry runs within one
    // probe interval only around a takeover.
    let samples = leases.samples();
    let changes = fleet::holder_changes(&samples);
    let all_dry = dry_runs(&api.requests());
    for (t, i) in &all_dry {
        let named = samples
            .iter()
            .any(|x| x.holder_index() == Some(*i) && secs_between(*t, x.at).abs() <= 1.0);
        assert!(
            named,
            "a dry run from agent {i} at {:.2} s (from the outage's start) when the Lease did not name it",
            secs_between(o, *t)
        );
    }
    let mut overlaps = 0;
    for (a, pair) in all_dry.iter().enumerate() {
        for b in &all_dry[a + 1..] {
            if secs_between(pair.0, b.0) >= PROBE_SECONDS * (1.0 - PROBE_JITTER) {
                break;
            }
            if b.1 == pair.1 {
                continue;
            }
            overlaps += 1;
            let near_takeover = changes
                .iter()
                .any(|(t, _, _)| secs_between(pair.0, *t) >= -renew && secs_between(b.0, *t) <= renew);
            assert!(
                near_takeover,
                "agents {} and {} both probed within one probe interval ({:.2} s apart, {:.2} s from the outage's start) \
                 with no takeover around\n{}",
                pair.1,
                b.1,
                secs_between(pair.0, b.0),
                secs_between(o, pair.0),
                ctx("")
            );
        }
    }
    eprintln!(
        "fleet: {} dry runs in the run from {} agents, {} holder changes, {overlaps} pairs of two agents' dry runs within \
         one probe interval (all around a takeover)",
        all_dry.len(),
        all_dry.iter().map(|(_, i)| *i).collect::<BTreeSet<_>>().len(),
        changes.len()
    );
    eprintln!(
        "fleet: summary: follower {follower_mean:.2} req/min (max {follower_max:.2}), leader {leader_rate:.2} req/min, \
         cluster {cluster_rate:.1} req/min, dry runs {dry_per_interval:.2} per probe interval; failover after SIGKILL \
         {kill_failover:.2} s (Lease {kill_lease:.2} s), after SIGTERM {term_takeover:.2} s, after a {} s outage {outage_back:.2} s \
         (Lease written {outage_lease:.2} s, metrics agree {outage_one:.2} s); total {:.0} s",
        OUTAGE.as_secs(),
        started.elapsed().as_secs_f64()
    );

    // Stop them all at once rather than one by one in the drops.
    drop(sweeper);
    for a in &agents {
        a.signal(Signal::SIGTERM);
    }
    drop(agents);
}
