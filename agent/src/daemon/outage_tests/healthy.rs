//! The steady state of a healthy node (`budget.rs`): what an agent asks of the API server when
//! nothing is wrong, with the product's default periods.

use std::collections::BTreeSet;
use std::time::Duration;

use super::fake::{FakeApi, Sent};
use super::{Who, driver, executor, secs, show, start};
use crate::config::Flags;

/// `budget.rs`, at the product's own periods (the e2e test runs them at a tenth): the prober on
/// an empty node, and a follower on a node with 250 Spark executors of 25 applications whose
/// drivers run on another node. Over 20 minutes (the e2e test's 120 s at its scale) the
/// follower makes under 2 requests a minute, of three kinds only: its read of the Lease
/// (every 48 s +-10%), one list of the namespace's drivers per driver cache TTL (300 s: one
/// list at the first scan after it expired) and the node condition heartbeat (300 s); no dry
/// run, no /metrics, no per-driver GET; its watch is resumed only when the server ends it
/// (every 290 s). The prober sends one dry-run create per probe interval (60 s +-10%) for the
/// whole cluster, under 10 requests a minute, and nobody else probes admission.
#[tokio::test(start_paused = true)]
async fn a_healthy_250_pod_node_costs_under_two_requests_a_minute() {
    const BENCH: &str = "bench-node";
    let mut node_pods = vec![];
    for i in 0..250 {
        let app = format!("app{}", i / 10);
        node_pods.push(executor(BENCH, "spark", &app, i, &format!("{app}-driver")));
    }
    let mut pods: Vec<_> = (0..25).map(|a| driver("spark", &format!("app{a}"))).collect();
    pods.extend(node_pods.iter().cloned());
    let fake = FakeApi::new(pods);

    // The prober first, on a node of its own, so that the 250-pod agent follows.
    let prober = Who {
        agent: 0,
        instance: "nodemedic-p",
        node: "prober-node",
    };
    let prober = start(&fake, prober, Flags::default(), &[]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(prober.shared.metrics.prober.get(), 1, "the prober holds the Lease");
    let agent = Who {
        agent: 1,
        instance: "nodemedic-b",
        node: BENCH,
    };
    let agent = start(&fake, agent, Flags::default(), &node_pods);
    // Warm-up (the e2e test's 15 s): the first list, the first driver lookups, the first
    // condition patch.
    tokio::time::sleep(Duration::from_secs(150)).await;
    assert!(agent.shared.health.watch_up.load(std::sync::atomic::Ordering::Relaxed));
    let w0 = secs(fake.now());
    let window = 1200.0;
    tokio::time::sleep(Duration::from_secs_f64(window)).await;
    let minutes = window / 60.0;
    let log: Vec<Sent> = fake.log().into_iter().filter(|r| secs(r.at) >= w0).collect();
    let context = show(&log, w0);
    let of = |agent: usize| -> Vec<&Sent> { log.iter().filter(|r| r.agent == agent).collect() };
    let times = |agent: usize, kind: &str| -> Vec<f64> {
        log.iter()
            .filter(|r| r.agent == agent && r.kind() == kind)
            .map(|r| secs(r.at) - w0)
            .collect()
    };

    // The follower.
    assert_eq!(agent.shared.metrics.prober.get(), 0);
    let (watches, requests): (Vec<&Sent>, Vec<&Sent>) = of(1).into_iter().partition(|r| r.kind() == "watch pods");
    let per_minute = requests.len() as f64 / minutes;
    eprintln!(
        "250-pod agent: {per_minute:.2} requests a minute, {} watch requests in {minutes} min",
        watches.len()
    );
    assert!(
        per_minute <= 2.0,
        "the 250-pod agent made {per_minute:.2} requests a minute\n{context}"
    );
    let kinds: BTreeSet<&str> = requests.iter().map(|r| r.kind()).collect();
    assert!(
        kinds.is_subset(&BTreeSet::from(["get lease", "patch node status", "list drivers"])),
        "unexpected request kinds from a follower: {kinds:?}\n{context}"
    );
    let reads = times(1, "get lease");
    assert!(
        reads
            .windows(2)
            .all(|w| (43.2 - 1e-6..=52.8 + 1e-6).contains(&(w[1] - w[0]))),
        "Lease reads: {reads:?}"
    );
    for kind in ["list drivers", "patch node status"] {
        let t = times(1, kind);
        assert!(
            t.windows(2)
                .all(|w| (300.0 - 1e-6..=330.0 + 1e-6).contains(&(w[1] - w[0])))
                && t.len() >= 3,
            "{kind} not once per 300 s (at the first scan after): {t:?}"
        );
    }
    assert!(
        watches.len() as f64 <= 1.0 + window / 290.0,
        "{} watches\n{context}",
        watches.len()
    );

    // The prober.
    let dry = times(0, "probe dry-run");
    let intervals = window / 60.0;
    assert!(
        dry.len() as f64 <= intervals * 1.15 + 1.0 && dry.len() as f64 >= intervals * 0.85 - 1.0,
        "{} dry-run creates in {intervals} probe intervals",
        dry.len()
    );
    assert!(
        dry.windows(2)
            .all(|w| (54.0 - 1e-6..=66.0 + 1e-6).contains(&(w[1] - w[0]))),
        "dry runs: {dry:?}"
    );
    let prober_requests = of(0).into_iter().filter(|r| r.kind() != "watch pods").count();
    eprintln!("prober: {:.2} requests a minute", prober_requests as f64 / minutes);
    assert!(prober_requests as f64 / minutes <= 10.0, "{context}");
    assert!(times(1, "probe dry-run").is_empty(), "only the prober probes admission");
}
