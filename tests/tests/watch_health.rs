//! The pod watch's health, end to end: `nodemedic_pod_watch_up` and `/readyz` follow the watch
//! itself, not pod changes. A ready agent loses the API server for 10 s (first refused
//! connections, then connections accepted and closed at once) while no pod changes: the watch
//! is down (metric 0, `/readyz` 503 saying so) for the whole outage, and up again (metric 1,
//! `/readyz` 200) within the watch's backoff cap of the API server's return, still without any
//! pod change.
//!
//! The metric is sampled every second; the test prints the samples as a promtool series (one
//! value a second), the shape daemonset/alerts/tests.yaml's `NodemedicPodWatchDown` cases use.

use std::time::{Duration, Instant};

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::node_object;
use nodemedic_tests::sparkpods::bound_pod;

const UP: &str = "nodemedic_pod_watch_up";
/// How long the API server stays away.
const OUTAGE: Duration = Duration::from_secs(10);
/// The watch retries at most every 30 s (`WATCH_BACKOFF_CAP`): back within that of the API
/// server's return, plus a margin.
const RECOVERY: Duration = Duration::from_secs(60);
/// A watch that broke is seen as down within this long (it is cut with the connection).
const NOTICED: Duration = Duration::from_secs(5);

/// Each pod of the node by `namespace/name`, with its resource version.
fn pod_versions(api: &ApiServer) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = api
        .store()
        .list("pods")
        .iter()
        .filter(|p| p["spec"]["nodeName"] == NODE)
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or_default(),
                    p["metadata"]["name"].as_str().unwrap_or_default()
                ),
                p["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// One sample a second: what `nodemedic_pod_watch_up` and `/readyz` said.
#[derive(Debug, Clone)]
struct Sample {
    at: Duration,
    up: Option<f64>,
    ready: u16,
    body: String,
}

struct Recorder<'a> {
    agent: &'a Agent,
    began: Instant,
    samples: Vec<Sample>,
}

impl Recorder<'_> {
    /// Samples now, then sleeps to the next whole second of the run.
    async fn tick(&mut self) -> Sample {
        let (ready, body) = self.agent.get("/readyz");
        let s = Sample {
            at: self.began.elapsed(),
            up: self.agent.metric(UP),
            ready,
            body,
        };
        self.samples.push(s.clone());
        let next = Duration::from_secs(self.samples.len() as u64);
        tokio::time::sleep(next.saturating_sub(self.began.elapsed())).await;
        s
    }

    /// Samples for `d`, checking each sample with `check`.
    async fn hold(&mut self, d: Duration, what: &str, check: impl Fn(&Sample) -> bool) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            let s = self.tick().await;
            assert!(
                check(&s),
                "{what}: {s:?}\n--- samples\n{}\n--- agent log\n{}",
                self.series(),
                self.agent.log()
            );
        }
    }

    /// Samples until `check` holds, for at most `limit`; returns how long it took.
    async fn until(&mut self, limit: Duration, what: &str, check: impl Fn(&Sample) -> bool) -> Duration {
        let from = Instant::now();
        let since = self.began.elapsed();
        loop {
            let s = self.tick().await;
            if check(&s) {
                return s.at.saturating_sub(since);
            }
            assert!(
                from.elapsed() < limit,
                "{what} not within {limit:?}: {s:?}\n--- samples\n{}\n--- agent log\n{}",
                self.series(),
                self.agent.log()
            );
        }
    }

    /// The samples of `nodemedic_pod_watch_up` as a promtool series, one value a second
    /// (`_` where the metric could not be read).
    fn series(&self) -> String {
        let values: Vec<String> = self
            .samples
            .iter()
            .map(|s| s.up.map_or("_".to_string(), |v| format!("{v}")))
            .collect();
        let mut out: Vec<String> = vec![];
        let mut i = 0;
        while i < values.len() {
            let run = values[i..].iter().take_while(|v| **v == values[i]).count();
            out.push(if run == 1 {
                values[i].clone()
            } else {
                format!("{}x{}", values[i], run - 1)
            });
            i += run;
        }
        out.join(" ")
    }
}

fn down(s: &Sample) -> bool {
    s.up == Some(0.0) && s.ready == 503 && s.body.contains("the pod watch is down")
}

fn up(s: &Sample) -> bool {
    s.up == Some(1.0) && s.ready == 200
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_is_down_while_the_api_server_is_away_and_up_when_it_returns_without_pod_changes() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(node_object());
    for (i, scheduler) in ["default-scheduler", "default-scheduler", "volcano"].iter().enumerate() {
        store.create(bound_pod(
            "batch",
            &format!("job-{i}"),
            &format!("pod-uid-{i}"),
            NODE,
            scheduler,
        ));
    }
    // Another node's pod: not in the agent's store, and not changed either.
    store.create(bound_pod(
        "batch",
        "elsewhere",
        "pod-uid-x",
        "worker-2",
        "default-scheduler",
    ));
    let agent = Agent::start(&api, None, &[]);
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    let pods_before = pod_versions(&api);
    assert_eq!(pods_before.len(), 3);

    let mut rec = Recorder {
        agent: &agent,
        began: Instant::now(),
        samples: vec![],
    };
    // Long enough for the watch to count as having run (5 s) when it is cut.
    rec.hold(Duration::from_secs(6), "ready before the outage", up).await;

    let mut recoveries = vec![];
    for (fault, on, off) in [
        (
            "refusing connections",
            Box::new(|api: &ApiServer| {
                api.faults().drop_watches_now();
                api.faults().set_refusing(true);
            }) as Box<dyn Fn(&ApiServer)>,
            Box::new(|api: &ApiServer| api.faults().set_refusing(false)) as Box<dyn Fn(&ApiServer)>,
        ),
        (
            "closing connections at once",
            Box::new(|api: &ApiServer| {
                api.faults().drop_watches_now();
                api.faults().set_down(true);
            }),
            Box::new(|api: &ApiServer| api.faults().set_down(false)),
        ),
    ] {
        on(&api);
        let away = Instant::now();
        let noticed = rec.until(NOTICED, &format!("the watch down ({fault})"), down).await;
        rec.hold(
            OUTAGE.saturating_sub(away.elapsed()),
            &format!("the watch down for the whole outage ({fault})"),
            down,
        )
        .await;
        off(&api);
        let back = rec
            .until(RECOVERY, &format!("the watch up again after {fault}"), up)
            .await;
        eprintln!(
            "{fault}: seen down {:.1} s after the cut, up {:.1} s after the API server returned (sampled every second)",
            noticed.as_secs_f64(),
            back.as_secs_f64()
        );
        recoveries.push(back);
        rec.hold(Duration::from_secs(5), &format!("up after {fault}"), up).await;
    }

    // Nothing changed: the watch came back on its own, not on a pod event.
    assert_eq!(pod_versions(&api), pods_before, "a pod changed");
    let relists = api
        .requests()
        .iter()
        // The watch's lists (the prober's `list` probe asks for one pod, `limit=1`).
        .filter(|r| {
            r.verb == "list"
                && r.resource == "pods"
                && r.query.contains("spec.nodeName")
                && r.query_param("limit").is_none()
        })
        .count();
    let watches = api
        .requests()
        .iter()
        .filter(|r| r.is_watch && r.resource == "pods")
        .count();
    eprintln!("the watch's pod lists in the whole run: {relists}; its watch requests: {watches}");
    let log = agent.log();
    let watch_log: Vec<&str> = log.lines().filter(|l| l.contains("daemon::watch")).collect();
    eprintln!("--- the watch's log\n{}", watch_log.join("\n"));
    eprintln!(
        "nodemedic_pod_watch_up, one sample a second ({} s):\n  values: '{}'",
        rec.samples.len(),
        rec.series()
    );
    let downs: Vec<f64> = rec
        .samples
        .iter()
        .filter(|s| s.up == Some(0.0))
        .map(|s| s.at.as_secs_f64())
        .collect();
    eprintln!(
        "{} samples at 0 (first at {:.0} s, last at {:.0} s)",
        downs.len(),
        downs.first().copied().unwrap_or(0.0),
        downs.last().copied().unwrap_or(0.0)
    );
    assert!(recoveries.iter().all(|r| *r < RECOVERY));
}
