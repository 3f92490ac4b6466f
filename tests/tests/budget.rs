//! The API budget of docs/performance.md, measured: what an agent asks of the API server at
//! steady state on a healthy node.
//!
//! Two real agents against the API server double, every period at one tenth of its default
//! (so that ten minutes of the product's time pass in one minute here): the prober on an empty
//! node, and an agent on the 250-pod node of `daemon-bench` (750 containers, 25 Spark drivers on
//! another node, no finding). Requests are told apart by each agent's bearer token.
//!
//! The same steady state, at the product's own periods, is proved request by request under
//! tokio's paused clock by the agent's unit test `daemon::outage_tests::healthy`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use nodemedic_tests::agent::{Agent, Identity, wait_for};
use nodemedic_tests::apiserver::{ApiServer, RequestRecord};
use nodemedic_tests::measure::request_kind;
use nodemedic_tests::scenarios;

/// Every period of the product's defaults, divided by ten (docs/configuration.md).
const SCALED: &[&str] = &[
    "--scan-interval-seconds",
    "3",
    "--lease-duration-seconds",
    "6",
    "--probe-interval-seconds",
    "6",
    "--probe-timeout-seconds",
    "6",
    "--condition-heartbeat-seconds",
    "30",
    "--event-series-interval-seconds",
    "60",
    "--driver-cache-ttl-seconds",
    "30",
    "--local-dir-interval-seconds",
    "60",
    "--request-timeout-seconds",
    "3",
];
/// One minute of the product's time.
const MINUTE: f64 = 6.0;

/// Requests of `token` since `since` (watches apart), by kind.
fn by_kind(requests: &[RequestRecord], token: &str, since: SystemTime) -> (BTreeMap<String, usize>, usize) {
    let mut kinds = BTreeMap::new();
    let mut watches = 0;
    for r in requests
        .iter()
        .filter(|r| r.bearer_token.as_deref() == Some(token) && r.time >= since)
    {
        if r.is_watch {
            watches += 1;
        } else {
            *kinds.entry(request_kind(r)).or_insert(0) += 1;
        }
    }
    (kinds, watches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_250_pod_node_costs_under_two_requests_a_minute() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    let node = scenarios::big_node(250, 2);
    let drivers = scenarios::seed_api(&store, &node);
    assert_eq!(drivers, 25);
    store.create(serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "prober-node"}}));

    // The prober first, on a node of its own, so that the 250-pod agent follows.
    let prober_id = Identity {
        node: "prober-node".into(),
        ..Identity::fleet(0)
    };
    let prober = Agent::start_as(&api, None, &prober_id, SCALED);
    wait_for("the prober holds the Lease", Duration::from_secs(30), &prober, || {
        prober.metric("nodemedic_prober") == Some(1.0)
    })
    .await;
    let agent_id = Identity {
        node: node.name.clone(),
        ..Identity::fleet(1)
    };
    let agent = Agent::start_as(&api, Some(&node), &agent_id, SCALED);
    wait_for("the 250-pod agent ready", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    // A healthy node: no finding, and the drivers all found.
    let findings = |a: &Agent| -> f64 {
        a.get("/metrics")
            .1
            .lines()
            .filter(|l| l.starts_with("nodemedic_findings{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    wait_for("no finding", Duration::from_secs(30), &agent, || {
        findings(&agent) == 0.0 && agent.metric("nodemedic_orphaned_executors") == Some(0.0)
    })
    .await;
    // Warm-up: the first list, the first driver lookups, the first condition patch.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let since = SystemTime::now();
    let window = Duration::from_secs(120);
    tokio::time::sleep(window).await;
    let requests = api.requests();
    let minutes = window.as_secs_f64() / MINUTE;

    let (agent_kinds, agent_watches) = by_kind(&requests, "token-1", since);
    let (prober_kinds, _) = by_kind(&requests, "token-0", since);
    let agent_total: usize = agent_kinds.values().sum();
    let prober_total: usize = prober_kinds.values().sum();
    let per_minute = |n: usize| n as f64 / minutes;
    eprintln!(
        "250-pod agent: {:.2} requests per minute, {agent_watches} watch requests in {minutes:.0} min: {agent_kinds:?}",
        per_minute(agent_total)
    );
    eprintln!(
        "prober: {:.2} requests per minute: {prober_kinds:?}",
        per_minute(prober_total)
    );
    assert_eq!(agent.metric("nodemedic_prober"), Some(0.0));
    assert!(
        per_minute(agent_total) <= 2.0,
        "the 250-pod agent made {:.2} requests a minute: {agent_kinds:?}",
        per_minute(agent_total)
    );
    // Its reads: the Lease (its own timed sample), one list of the drivers' namespace per
    // cache TTL; its writes: the condition heartbeat. No dry-run, no /metrics, no per-driver GET.
    for k in agent_kinds.keys() {
        assert!(
            ["get leases.coordination.k8s.io", "patch nodes/status", "list pods",].contains(&k.as_str()),
            "unexpected request kind {k} from a follower: {agent_kinds:?}"
        );
    }
    // One watch, which stays open (the server ends it after about 5 minutes of the product's
    // time, so at most a few here).
    assert!(
        agent_watches <= 1 + (window.as_secs() / 29) as usize,
        "{agent_watches} watches"
    );

    // The prober: one dry-run create per probe interval for the whole cluster.
    let dry_runs = prober_kinds.get("create pods (dry run)").copied().unwrap_or(0);
    let intervals = window.as_secs_f64() / 6.0;
    assert!(
        dry_runs as f64 <= intervals * 1.15 + 1.0 && dry_runs as f64 >= intervals * 0.85 - 1.0,
        "{dry_runs} dry-run creates in {intervals:.0} probe intervals"
    );
    assert!(
        per_minute(prober_total) <= 10.0,
        "the prober made {:.2} requests a minute: {prober_kinds:?}",
        per_minute(prober_total)
    );
    let others_dry_runs = requests
        .iter()
        .filter(|r| {
            r.time >= since && r.query_param("dryRun").is_some() && r.bearer_token.as_deref() != Some("token-0")
        })
        .count();
    assert_eq!(others_dry_runs, 0, "only the prober probes admission");

    // Kept-alive connections: each agent's requests (its watches and its probes apart: the
    // prober's rounds and the follower's timed Lease reads each open a connection of their own
    // by design, as `curl -w` does) came on one connection, though they were further apart
    // than the 3 s request timeout (in two minutes, the prober's Lease renewals, Events and
    // condition patches; the follower's lists and condition patches). kube's read timeout,
    // which the agent used before, closed every connection that long after its last answer: a
    // TCP connection and a TLS handshake per request.
    for token in ["token-0", "token-1"] {
        let ours: Vec<&RequestRecord> = requests
            .iter()
            .filter(|r| r.bearer_token.as_deref() == Some(token) && r.time >= since && !r.is_watch)
            .filter(|r| !r.user_agent.as_deref().is_some_and(|a| a.ends_with(" probe")))
            .collect();
        let connections: BTreeSet<u64> = ours.iter().map(|r| r.connection).collect();
        eprintln!("{token}: {} requests on {} connections", ours.len(), connections.len());
        assert!(ours.len() >= 5, "{token}: {} requests", ours.len());
        assert_eq!(
            connections.len(),
            1,
            "{token}: {} requests on connections {connections:?}",
            ours.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_findings_is_20_events_and_one_summary() {
    use nodemedic_tests::agent::NODE;
    use nodemedic_tests::sparkpods::{SparkApp, SparkVersion};
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    // 200 executors of an application whose driver is gone: 200 findings at once, one per pod.
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "burst");
    for i in 0..200 {
        store.create(app.executor(
            i,
            &format!("exec-uid-{i}"),
            NODE,
            Some((&format!("{}-driver", app.prefix), "driver-uid-gone")),
            &format!("{}-driver-svc.etl.svc", app.prefix),
        ));
    }
    let agent = Agent::start(&api, None, &["--scan-interval-seconds", "0.5"]);
    let events = || store.list("events.events.k8s.io");
    wait_for("the summary Event", Duration::from_secs(60), &agent, || {
        events().iter().any(|e| e["reason"] == "FindingsSummarized")
    })
    .await;
    // Scans go on (the same 200 findings each time): nothing more is created.
    let scans = agent.scans();
    wait_for("ten more scans", Duration::from_secs(30), &agent, || {
        agent.scans() >= scans + 10
    })
    .await;
    let all = events();
    let summaries: Vec<&serde_json::Value> = all.iter().filter(|e| e["reason"] == "FindingsSummarized").collect();
    let own = all.len() - summaries.len();
    assert_eq!(summaries.len(), 1, "one summary Event");
    assert_eq!(own, 20, "20 findings get an Event of their own");
    let note = summaries[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with(&format!("180 more findings on node {NODE}")) && note.contains("orphaned-executor: 180"),
        "{note}"
    );
    assert_eq!(summaries[0]["regarding"]["kind"], "Node");
    let creates = api
        .requests()
        .iter()
        .filter(|r| r.verb == "create" && r.resource == "events")
        .count();
    assert_eq!(creates, 21, "no Event create was retried or repeated");
}
