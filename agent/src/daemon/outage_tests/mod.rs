//! The request schedules of the daemon's API loops, proved under tokio's paused clock: the
//! pod watch ([`super::watch::run`]), the API work ([`super::apiwork::ApiWork::run`]), the
//! election and the probes ([`crate::apimon::run`] with its [`crate::leader::Elector`]), each the
//! real loop, started by the functions [`super::run`] starts them with ([`super::wiring`]),
//! against a fake API server ([`fake`]) that records every request. Minutes of an outage run
//! in milliseconds, and the tests assert the request sequences that the headers of the
//! end-to-end tests `outage.rs`, `budget.rs` and `fleet.rs` compute by hand: when each loop
//! asks (relative to the outage's start), what, and the per-minute totals.
//!
//! Each pause of a backoff is drawn from the upper half `[c/2, c]` of a ceiling `c` that doubles
//! ([`crate::retry`]): the tests assert every gap between two attempts of a loop against its
//! ceiling, which holds whatever the jitter draws.

mod election;
mod fake;
mod healthy;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::apiwork::{KeptScan, ScanOutcome};
use super::wiring::{self, Agent, ApiLoops, Clients, Loop, ProbeTask, Probes, Shared};
use crate::config::{Effective, FileConfig, Flags};
use crate::contact::ApiContact;
use crate::metrics::Metrics;
use crate::probe::Target;
use fake::{FakeApi, Mode, Sent};

const NODE: &str = "worker-1";
const INSTANCE: &str = "nodemedic-abcde";
/// `INSTANCE` on `NODE` in the election.
const IDENTITY: &str = "nodemedic-abcde/worker-1";

/// A Spark executor on `node`, owned by its driver `driver` (on another node).
fn executor(node: &str, namespace: &str, app: &str, n: u32, driver: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-exec-{n}"), "namespace": namespace, "uid": format!("{app}-exec-uid-{n}"),
            "labels": {"spark-role": "executor", "spark-app-selector": format!("spark-{app}"),
                       "spark-exec-id": n.to_string()},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": driver,
                                 "uid": format!("{driver}-uid"), "controller": true}],
        },
        "spec": {"nodeName": node,
                 "containers": [{"name": "spark-kubernetes-executor", "image": "apache/spark:3.5.1"}]},
        "status": {"phase": "Running", "podIP": "10.42.1.7"},
    })
}

/// The driver of `app`, on another node.
fn driver(namespace: &str, app: &str) -> Value {
    let name = format!("{app}-driver");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{name}-uid"),
                     "labels": {"spark-role": "driver", "spark-app-selector": format!("spark-{app}")}},
        "spec": {"nodeName": "worker-2",
                 "containers": [{"name": "spark-kubernetes-driver", "image": "apache/spark:3.5.1"}]},
        "status": {"phase": "Running", "podIP": "10.42.2.10"},
    })
}

/// One agent: its index in the fake's log, its pod name, its node.
#[derive(Debug, Clone, Copy)]
struct Who<'a> {
    agent: usize,
    instance: &'a str,
    node: &'a str,
}

impl Who<'_> {
    /// The agent as the daemon knows itself, in the fake's namespace.
    fn wiring(&self) -> Agent {
        Agent {
            node: self.node.into(),
            instance: self.instance.into(),
            namespace: "default".into(),
        }
    }

    /// Its probe target: the probes' requests go through a client of their own on `fake`,
    /// which does not report to the contact (the probe task reports their outcomes, as in the
    /// daemon).
    fn target(&self, fake: &FakeApi) -> Target {
        Target::through(fake.client_of(self.agent, "target", None), "default", self.node)
    }

    /// The clients of its loops on `fake`, each tagged with the loop's name (so each loop's
    /// requests are told apart) and reporting to `contact` as the daemon's clients do.
    fn clients(&self, fake: &FakeApi, contact: &Arc<ApiContact>) -> Clients {
        let (fake, contact, agent) = (fake.clone(), contact.clone(), self.agent);
        Arc::new(move |l: Loop| fake.client_of(agent, l.as_str(), Some(&contact)))
    }
}

/// The agent's API loops, running against a [`FakeApi`].
struct Loops {
    shared: Shared,
    /// Kept: dropping it would stop the probe task and the API work.
    api: ApiLoops,
}

/// Starts the pod watch, the probe task (election and probes) and the API work of `who` as
/// the daemon does ([`wiring::start_api_loops`]), each with a client of its own on `fake`,
/// and a stand-in for the scan loop that hands the API work an outcome with `node_pods` at
/// every scan interval.
fn start(fake: &FakeApi, who: Who, flags: Flags, node_pods: &[Value]) -> Loops {
    start_with(fake, who, flags, node_pods, Ok(who.target(fake)))
}

/// [`start`] with the probe target `target` (an error: none, as when the daemon cannot build
/// one from its client configuration).
fn start_with(
    fake: &FakeApi,
    who: Who,
    flags: Flags,
    node_pods: &[Value],
    target: Result<Target, crate::probe::ProbeError>,
) -> Loops {
    let effective: Effective = crate::config::effective(&flags, &FileConfig::default()).expect("valid flags");
    let shared = Shared::new(Arc::new(ApiContact::new()), Metrics::new().expect("metrics"));
    let agent = who.wiring();
    let loops = wiring::start_api_loops(
        &shared,
        &agent,
        &effective,
        crate::host::HostPaths::new(std::path::Path::new("/nonexistent"), None),
        target,
        who.clients(fake, &shared.contact),
    );

    let mut snapshot = nodemedic_rules::snapshot::NodeSnapshot::empty(&agent.node, 0);
    snapshot.pods.source = nodemedic_rules::snapshot::PodSource::Api;
    snapshot.pods.bound = node_pods
        .iter()
        .filter_map(|p| serde_json::from_value(p.clone()).ok())
        .filter_map(crate::collect::pods::pod_info)
        .collect();
    assert_eq!(snapshot.pods.bound.len(), node_pods.len(), "every pod converts");
    let outcome = Arc::new(ScanOutcome {
        kept: Arc::new(KeptScan::keep(snapshot, effective.repair.any())),
        findings: vec![],
        coverage: BTreeMap::new(),
        effective,
        claims: Default::default(),
    });
    // A quiet node, as the scan loop sees it: one judgement, then nothing changes, so no
    // newer outcome comes; the API work passes again on its own clocks (`apiwork::revisit`,
    // the gate's pauses).
    loops.outcomes.send_replace(Some(outcome));
    Loops { shared, api: loops }
}

/// Starts the probe task of `who` (the election and, while it holds the Lease, the probes) as
/// the daemon does ([`ProbeTask`]), its requests through `fake`, on a task of its own (not
/// supervised: aborting it kills it, as SIGKILL kills the agent). Sending `true` on the
/// returned [`Probes::stop`] stops it as SIGTERM does (the holder releases the Lease).
fn start_probes(
    fake: &FakeApi,
    who: Who,
    effective: &Effective,
    shared: &Shared,
) -> (Probes, tokio::task::JoinHandle<()>) {
    let probes = Probes::default();
    let task = ProbeTask::new(
        shared,
        &who.wiring(),
        effective,
        who.target(fake),
        who.clients(fake, &shared.contact),
        &probes,
    );
    let task = tokio::spawn(task.run());
    (probes, task)
}

/// Seconds, for the assertions.
fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The requests in `[from, to)` seconds of `log`.
fn between(log: &[Sent], from: f64, to: f64) -> Vec<Sent> {
    log.iter()
        .filter(|r| secs(r.at) >= from && secs(r.at) < to)
        .cloned()
        .collect()
}

fn show(log: &[Sent], origin: f64) -> String {
    log.iter()
        .map(|r| {
            format!(
                "  {:>8.3} s {:<8} {:<18} {:?} {} {}",
                secs(r.at) - origin,
                r.task(),
                r.kind(),
                r.status,
                r.method,
                r.path
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts that each gap between two of `times` lies in the upper half `[c/2, c]` of its
/// ceiling, the ceilings doubling from `first` up to `cap` (what [`crate::retry::Backoff`]
/// draws from), with `skip` ceilings already spent. Returns the ceilings used.
fn assert_backoff(what: &str, times: &[f64], first: f64, cap: f64, skip: u32, context: &str) -> Vec<f64> {
    let mut ceiling = (first * 2f64.powi(skip as i32)).min(cap);
    let mut used = vec![];
    for w in times.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= ceiling / 2.0 - 1e-6 && gap <= ceiling + 1e-6,
            "{what}: a gap of {gap:.3} s at {:.3} s, outside [{}, {ceiling}] s\n{context}",
            w[0],
            ceiling / 2.0
        );
        used.push(ceiling);
        ceiling = (ceiling * 2.0).min(cap);
    }
    used
}

/// The most requests in any window of `width` seconds that starts at one of `times`.
fn densest(times: &[f64], width: f64) -> usize {
    (0..times.len())
        .map(|i| times[i..].iter().take_while(|t| **t < times[i] + width).count())
        .max()
        .unwrap_or(0)
}

/// `outage.rs` (the DaemonSet's defaults for what paces an outage: a 60 s lease, 60 s probe
/// interval and timeout, a 10 s request timeout; the harness's 0.3 s scans and 0.5 s driver
/// cache; one executor whose driver runs on another node): the elected prober, its API server
/// refusing connections for 3 minutes, then answering 401 to everything for 3 minutes, then
/// healthy again. Mirrors the e2e test's budget (RAMP 23 requests in the first minute, STEADY
/// 7 in any later one) and each term of its header's sum, loop by loop; and its recovery (the
/// watch and the prober back within 60 s, by themselves).
#[tokio::test(start_paused = true)]
async fn an_outage_costs_the_budget_the_backoff_schedules_compute() {
    const RAMP: usize = 23;
    const STEADY: usize = 7;
    let namespace = "etl";
    let node_pods = vec![executor(NODE, namespace, "nightly", 1, "nightly-driver")];
    let mut pods = node_pods.clone();
    pods.push(driver(namespace, "nightly"));
    let fake = FakeApi::new(pods);
    let flags = Flags {
        scan_interval_seconds: Some(0.3),
        driver_cache_ttl_seconds: Some(0.5),
        lease_duration_seconds: Some(60.0),
        probe_interval_seconds: Some(60.0),
        probe_timeout_seconds: Some(60.0),
        request_timeout_seconds: Some(10.0),
        ..Flags::default()
    };
    // The outage begins right after the holder's second renewal, as in the e2e test.
    fake.switch_after_updates(2, Mode::Refusing);
    let who = Who {
        agent: 0,
        instance: INSTANCE,
        node: NODE,
    };
    let loops = start(&fake, who, flags, &node_pods);
    let (t0, first) = loop {
        if let Some(switched) = fake.switched_at() {
            break switched;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let origin = tokio::time::Instant::now() - (fake.now() - t0);
    tokio::time::sleep_until(origin + Duration::from_secs(180)).await;
    fake.set_mode(Mode::Unauthorized);
    tokio::time::sleep_until(origin + Duration::from_secs(360)).await;
    fake.set_mode(Mode::Serving);
    tokio::time::sleep_until(origin + Duration::from_secs(420)).await;

    let t0 = secs(t0);
    let log = fake.log();
    let context = format!(
        "requests from the outage's start (s):\n{}",
        show(&between(&log, t0 - 45.0, t0 + 420.0), t0)
    );
    let (before, outage) = log.split_at(first);
    let outage = between(outage, t0, t0 + 360.0);
    let tasks = fake::by_task(&outage);
    let rel = |rs: &[Sent]| rs.iter().map(|r| secs(r.at) - t0).collect::<Vec<f64>>();
    let empty = vec![];
    let task = |name: &str| tasks.get(name).unwrap_or(&empty);

    // Healthy before: the agent was elected (it created the Lease) and probed.
    assert!(
        before
            .iter()
            .any(|r| r.kind() == "create lease" && r.status == Some(201))
            && before
                .iter()
                .any(|r| r.kind() == "probe dry-run" && r.status == Some(201)),
        "not elected and probing before the outage\n{}",
        show(before, t0)
    );
    // Nothing failed, nor was answered, but as the phase says.
    for r in &outage {
        let refused = secs(r.at) - t0 < 180.0;
        assert_eq!(r.status, if refused { None } else { Some(401) }, "{r:?}\n{context}");
    }

    // The pod watch: the cut watch resumed at once, then watches (no list) 1 s doubling to 30 s.
    let watch = task("watch");
    assert!(
        watch.iter().all(|r| r.kind() == "watch pods"),
        "the watch only watches again\n{context}"
    );
    let times = rel(watch);
    assert_eq!(
        times.first().copied(),
        Some(0.0),
        "the cut watch is resumed at once\n{context}"
    );
    let ceilings = assert_backoff("pod watch", &times, 1.0, 30.0, 0, &context);
    // Its pauses' lower bounds, as the header adds them up: 0.5, 1, 2, 4, 8, 15, 15 s.
    assert_eq!(
        ceilings.iter().take(7).map(|c| c / 2.0).collect::<Vec<_>>(),
        [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0]
    );

    // The API work: one request a pass (the list of the namespace's drivers), passes behind a
    // gate of 2 s doubling to 5 min; the first at the first scan whose lookup is not cached.
    let work = task("apiwork");
    assert!(
        work.iter().all(|r| r.kind() == "list drivers"),
        "the API work only lists the drivers: the first failed lookup stops the pass\n{context}"
    );
    let times = rel(work);
    assert!(times.first().is_some_and(|t| *t <= 0.3 + 0.5 + 1e-6), "{context}");
    assert_backoff("API work", &times, 2.0, 300.0, 0, &context);

    // The election: renewals at 20 and 30 s (10 s apart, the backoff capped at half the renew
    // period), the last at 40 s (2/3 of the lease), then it steps down; its reads of the Lease
    // follow from the backoff's third ceiling (192 s, pauses >= 96 s), then 300 s (>= 150 s).
    let election = task("election");
    let writes: Vec<&Sent> = election.iter().filter(|r| r.kind() == "update lease").collect();
    let reads: Vec<&Sent> = election.iter().filter(|r| r.kind() == "get lease").collect();
    assert_eq!(writes.len() + reads.len(), election.len(), "{context}");
    let write_times: Vec<f64> = writes.iter().map(|r| secs(r.at) - t0).collect();
    assert_eq!(write_times, [20.0, 30.0, 40.0], "renewals\n{context}");
    let mut read_times: Vec<f64> = vec![40.0];
    read_times.extend(reads.iter().map(|r| secs(r.at) - t0));
    // The first read comes 136 to 232 s into the outage, the second 286 to 532 s.
    assert!(
        read_times.len() >= 2,
        "no read of the Lease after it stepped down\n{context}"
    );
    assert_backoff("Lease reads", &read_times, 48.0, 300.0, 2, &context);

    // The probes: one round (3 probes) while it still holds the Lease, the one due 54 to 66 s
    // after the last round (elected 40 s before the outage); none after it stepped down.
    let probes = task("probes");
    let kinds: Vec<&str> = probes.iter().map(Sent::kind).collect();
    assert_eq!(kinds, ["probe get", "probe list", "probe dry-run"], "{context}");
    let round = secs(probes[0].at) - t0;
    assert!((14.0..=26.0).contains(&round), "the round at {round} s\n{context}");
    assert!(probes.iter().all(|r| secs(r.at) - t0 == round), "{context}");

    // The budget, minute by minute, and each loop's part in it.
    let mut minutes = vec![];
    for (phase, start) in [("refused", 0.0), ("401", 180.0)] {
        for m in 0..3 {
            let from = t0 + start + 60.0 * f64::from(m);
            let minute = between(&outage, from, from + 60.0);
            let parts = fake::by_task(&minute);
            let count = |t: &str| parts.get(t).map_or(0, Vec::len);
            let budget = if phase == "refused" && m == 0 { RAMP } else { STEADY };
            let line = format!(
                "{phase} minute {}: {} requests (watch {}, API work {}, election {}, probes {})",
                m + 1,
                minute.len(),
                count("watch"),
                count("apiwork"),
                count("election"),
                count("probes")
            );
            assert!(minute.len() <= budget, "over budget ({budget}): {line}\n{context}");
            let (watch, work, election, probes) = if budget == RAMP { (8, 6, 3, 6) } else { (4, 2, 1, 0) };
            assert!(
                count("watch") <= watch
                    && count("apiwork") <= work
                    && count("election") <= election
                    && count("probes") <= probes,
                "a loop over its part ({watch} + {work} + {election} + {probes}): {line}\n{context}"
            );
            minutes.push(line);
        }
    }
    // Any minute, not only the e2e test's whole ones: the later minutes' bound holds in every
    // 60 s window that starts after the first minute.
    let later: Vec<f64> = rel(&outage).into_iter().filter(|t| *t >= 60.0).collect();
    assert!(densest(&later, 60.0) <= STEADY, "{context}");
    eprintln!("{}\n{context}", minutes.join("\n"));

    // Back: the watch within its 30 s cap, and with its first served answer (or the election's,
    // when its read falls first) every loop that waits out a failure goes at once: the
    // election reads the Lease and renews it, the holder probes, the API work passes (at its
    // next scan, its lookup not cached).
    let after = between(&log, t0 + 360.0, t0 + 420.0);
    let context = format!(
        "requests after the API server's return (s):\n{}",
        show(&after, t0 + 360.0)
    );
    let served = |kind: &str| {
        after
            .iter()
            .find(|r| r.kind() == kind && r.status.is_some_and(|s| (200..300).contains(&s)))
            .map(|r| secs(r.at) - t0 - 360.0)
    };
    let watch_back = served("watch pods").expect("the watch is back");
    assert!(
        watch_back <= 30.0,
        "the watch came back {watch_back} s after the API server\n{context}"
    );
    for kind in ["get lease", "update lease", "probe dry-run", "list drivers"] {
        let back = served(kind).unwrap_or(f64::MAX);
        assert!(
            back <= watch_back + 0.3 + 0.5 + 1e-6,
            "{kind} came back {back} s after the API server, the watch {watch_back} s\n{context}"
        );
    }
    let shared = &loops.shared;
    assert!(shared.health.watch_up.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(shared.metrics.prober.get(), 1, "the prober again");
    assert_eq!(fake.holder().as_deref(), Some(IDENTITY));
    assert_eq!(shared.contact.reach(), crate::contact::Reach::Reachable);
}

/// Without a probe target (the daemon cannot build one from its client configuration), the
/// agent's pod watch and API work run as ever, but it neither takes part in the election nor
/// probes: every request comes from the watch or the API work, `nodemedic_prober` stays 0,
/// and the probe task counts as released at once (SIGTERM does not wait for it).
#[tokio::test(start_paused = true)]
async fn without_a_probe_target_the_agent_watches_and_looks_up_but_neither_elects_nor_probes() {
    let node_pods = vec![executor(NODE, "etl", "nightly", 1, "nightly-driver")];
    let mut pods = node_pods.clone();
    pods.push(driver("etl", "nightly"));
    let fake = FakeApi::new(pods);
    let who = Who {
        agent: 0,
        instance: INSTANCE,
        node: NODE,
    };
    let flags = Flags {
        scan_interval_seconds: Some(0.3),
        driver_cache_ttl_seconds: Some(0.5),
        ..Flags::default()
    };
    let no_target = Err(crate::probe::ProbeError::Config("server URL has no host".into()));
    let loops = start_with(&fake, who, flags, &node_pods, no_target);
    tokio::time::sleep(Duration::from_secs(300)).await;

    let log = fake.log();
    let context = show(&log, 0.0);
    let kinds: std::collections::BTreeSet<&str> = log.iter().map(Sent::kind).collect();
    for kind in ["list pods", "watch pods", "list drivers"] {
        assert!(kinds.contains(kind), "no {kind}\n{context}");
    }
    assert!(
        log.iter().all(|r| r.client == "watch" || r.client == "apiwork"),
        "a request of the probe task\n{context}"
    );
    assert_eq!(fake.holder(), None, "nobody holds the Lease");
    assert_eq!(loops.shared.metrics.prober.get(), 0);
    assert!(loops.shared.health.watch_up.load(std::sync::atomic::Ordering::Relaxed));
    let released = loops.api.probes.released.clone();
    tokio::time::timeout(Duration::from_millis(1), released.notified())
        .await
        .expect("released at once");
}
