//! Tests of [`super`] (fence.rs keeps the code, this file its tests).

//! The fencing task against a fake API server under tokio's paused clock: the requests it
//! sends and when, and what it journals (dry-run), in seconds of virtual time.

use std::sync::atomic::{AtomicBool, AtomicUsize};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::json;

use super::*;
use crate::collect::pods::PodObject;

/// Whether the fake API server answers at this many seconds after the start.
type Schedule = Arc<dyn Fn(f64) -> bool + Send + Sync>;

/// A fake API server: answers `/readyz` and Event creates while `up`, and refuses the
/// connection (after `down_delay`: a black hole's timeout) while not; it records every
/// request's start (seconds after `start`) and path, and the most requests in flight.
#[derive(Clone)]
struct FakeApi {
    start: tokio::time::Instant,
    up: Schedule,
    down_delay: Duration,
    log: Arc<Mutex<Vec<(f64, String, bool)>>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl FakeApi {
    fn new(up: Schedule, down_delay: Duration) -> FakeApi {
        FakeApi {
            start: tokio::time::Instant::now(),
            up,
            down_delay,
            log: Default::default(),
            in_flight: Default::default(),
            most_in_flight: Default::default(),
        }
    }

    fn at(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn client(&self, contact: &Arc<ApiContact>) -> kube::Client {
        let api = self.clone();
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let api = api.clone();
            async move {
                let at = api.at();
                let up = (api.up)(at);
                api.log.lock().unwrap().push((at, req.uri().path().to_string(), up));
                let n = api.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                api.most_in_flight.fetch_max(n, Ordering::SeqCst);
                if !up {
                    tokio::time::sleep(api.down_delay).await;
                }
                api.in_flight.fetch_sub(1, Ordering::SeqCst);
                if !up {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        "connection refused",
                    ));
                }
                let body = if req.method() == http::Method::POST {
                    use http_body_util::BodyExt as _;
                    req.into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default()
                } else {
                    Bytes::from_static(b"ok")
                };
                let status = if body.as_ref() == b"ok" { 200 } else { 201 };
                Ok(http::Response::builder().status(status).body(Full::new(body)).unwrap())
            }
        });
        let svc = tower::ServiceBuilder::new()
            .layer(crate::kube_api::ContactLayer(contact.clone()))
            .service(svc);
        kube::Client::new(svc, "default")
    }

    /// The times of the heartbeats sent.
    fn beats(&self) -> Vec<f64> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, path, _)| path == "/readyz")
            .map(|(at, _, _)| *at)
            .collect()
    }
}

/// A Spark driver run by a Job, opted in, tolerating the partition taints for 35 s: with a
/// margin of 5 s, fenced 30 s after the first failed request.
fn driver(uid: &str) -> PodObject {
    serde_json::from_value(json!({
            "metadata": {"name": format!("{uid}-driver"), "namespace": "etl", "uid": uid,
                "labels": {"spark-role": "driver", "spark-app-selector": format!("spark-{uid}"),
                    crate::fence::OPT_IN: "true"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": uid, "uid": format!("{uid}-job"),
                    "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "spark-kubernetes-driver"}],
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 35},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 35}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
}

const FENCE_AFTER: f64 = 30.0;

struct Run {
    contact: Arc<ApiContact>,
    task: tokio::task::JoinHandle<()>,
    _policy: watch::Sender<FencePolicy>,
}

/// Starts a fencing task in dry-run with the default heartbeat (10 s), its journal in
/// `dir`, against `api`. `pods`: what the pod watch listed (`None`: it could not list,
/// as after a restart during an outage). The pod watch's list is the first answer.
fn start(api: &FakeApi, dir: &std::path::Path, pods: Option<&[PodObject]>) -> Run {
    start_with(api, dir, pods, Arc::new(ApiContact::new()))
}

/// [`start`] with the record of requests `contact` (a task restarted in the same process).
fn start_with(api: &FakeApi, dir: &std::path::Path, pods: Option<&[PodObject]>, contact: Arc<ApiContact>) -> Run {
    let store: SharedStore = Default::default();
    let health = Arc::new(Health::default());
    if let Some(pods) = pods {
        store.write().unwrap().fill(pods.to_vec());
        health.pods_synced.store(true, Ordering::Relaxed);
        contact.answered();
    }
    let policy = FencePolicy {
        mode: Mode::DryRun,
        margin_seconds: 5.0,
        journal: dir.join("state/fencing.jsonl").display().to_string(),
        ..Default::default()
    };
    let (tx, rx) = watch::channel(policy);
    let task = FenceTask {
        client: api.client(&contact),
        contact: contact.clone(),
        store,
        health,
        host: HostPaths::new(dir, None),
        layout: Default::default(),
        node: "n1".into(),
        instance: "agent-1".into(),
        metrics: Metrics::new().unwrap(),
        policy: rx,
    };
    Run {
        contact,
        task: tokio::spawn(task.run()),
        _policy: tx,
    }
}

fn journal(dir: &std::path::Path) -> Vec<Entry> {
    Journal::new(dir.join("state/fencing.jsonl"), 1 << 20)
        .unpublished()
        .unwrap()
        .0
}

async fn run_until(api: &FakeApi, seconds: f64) {
    let left = seconds - api.at();
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left)).await;
    }
}

#[test]
fn off_never_turns_and_the_others_turn_every_second_or_heartbeat() {
    let with = |mode, heartbeat_seconds| FencePolicy {
        mode,
        heartbeat_seconds,
        ..Default::default()
    };
    assert_eq!(turn_every(&with(Mode::Off, 10.0)), None);
    assert_eq!(turn_every(&with(Mode::DryRun, 10.0)), Some(Duration::from_secs(1)));
    assert_eq!(turn_every(&with(Mode::On, 0.5)), Some(Duration::from_millis(500)));
}

#[tokio::test(start_paused = true)]
async fn off_waits_for_a_new_policy_and_acts_on_it_within_a_second() {
    let api = FakeApi::new(Arc::new(|_| true), Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let run = start(&api, dir.path(), Some(&[driver("u1")]));
    run._policy.send_modify(|p| p.mode = Mode::Off);
    run_until(&api, 60.0).await;
    assert_eq!(api.beats(), Vec::<f64>::new(), "no heartbeat while off");
    run._policy.send_modify(|p| p.mode = Mode::DryRun);
    run_until(&api, 61.5).await;
    // The new policy wakes the task at once, and its first turn under it is a second later.
    assert_eq!(api.beats(), vec![61.0], "the candidate's first heartbeat");
    run.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_flapping_api_server_2_s_up_in_22_is_reachable_and_never_fenced() {
    // Up for 10 s, then 20 s down and 2 s up, again and again: every outage is shorter
    // than fence_after, and together they last far longer.
    let up: Schedule = Arc::new(|t: f64| t < 10.0 || (t - 10.0) % 22.0 >= 20.0);
    let api = FakeApi::new(up, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let run = start(&api, dir.path(), Some(&[driver("u1")]));
    run_until(&api, 10.0 + 22.0 * 5.0).await;
    assert_eq!(journal(dir.path()), vec![], "nothing fenced in five cycles");
    // Each up-window was seen: an answer between every two outages.
    let answered_in_windows = api
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|(at, _, up)| *up && *at > 10.0)
        .map(|(at, _, _)| ((at - 10.0) / 22.0) as u32)
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(answered_in_windows, (0..5).collect(), "{:?}", api.log.lock().unwrap());
    run.task.abort();
}

#[tokio::test(start_paused = true)]
async fn after_the_first_failure_the_heartbeat_runs_every_second_one_at_a_time() {
    // Down from 11.5 s; a request sent then hangs 2.5 s before it fails (a black hole).
    let up: Schedule = Arc::new(|t: f64| t < 11.5);
    let api = FakeApi::new(up, Duration::from_millis(2500));
    let dir = tempfile::tempdir().unwrap();
    let run = start(&api, dir.path(), Some(&[driver("u1")]));
    run_until(&api, 35.0).await;
    let beats = api.beats();
    // Every 10 s while the API server answers (the heartbeat at 11 s was answered); the
    // one at 21 s is the first to fail (at 23.5 s); then one a second, each sent once the
    // one before it has failed: 3 s apart (2.5 s hanging, then the next tick).
    assert_eq!(&beats[..3], &[1.0, 11.0, 21.0], "{beats:?}");
    let gaps: Vec<f64> = beats[2..].windows(2).map(|p| p[1] - p[0]).collect();
    assert!(
        gaps.len() >= 3 && gaps.iter().all(|g| (2.5..=3.0).contains(g)),
        "{beats:?}"
    );
    assert_eq!(api.most_in_flight.load(Ordering::SeqCst), 1);
    // Refused at once instead: one a second.
    let api = FakeApi::new(Arc::new(|t: f64| t < 11.5), Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let run2 = start(&api, dir.path(), Some(&[driver("u1")]));
    run_until(&api, 35.0).await;
    let beats = api.beats();
    let gaps: Vec<f64> = beats.windows(2).map(|p| p[1] - p[0]).collect();
    assert_eq!(&gaps[..2], &[10.0, 10.0], "{beats:?}");
    assert!(gaps.len() >= 14 && gaps[2..].iter().all(|g| *g == 1.0), "{beats:?}");
    run.task.abort();
    run2.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_real_partition_is_fenced_at_fence_after_from_the_first_failure() {
    let up: Schedule = Arc::new(|t: f64| t < 15.0);
    let api = FakeApi::new(up, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let run = start(&api, dir.path(), Some(&[driver("u1")]));
    run_until(&api, 49.0).await;
    assert_eq!(journal(dir.path()), vec![], "not before 21 s + 30 s");
    run_until(&api, 52.0).await;
    let entries = journal(dir.path());
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].outcome, "would-fence");
    assert_eq!(entries[0].uid, "u1");
    // The heartbeat at 21 s was the first failure: 30 s after it, within a second.
    assert!(
        (FENCE_AFTER..FENCE_AFTER + 1.0).contains(&entries[0].outage_seconds),
        "{entries:?}"
    );
    assert!(matches!(run.contact.reach(), Reach::Unreachable(_)));
    run.task.abort();
}

#[tokio::test(start_paused = true)]
async fn an_agent_restarted_during_the_outage_fences_at_the_original_deadline() {
    let up: Schedule = Arc::new(|t: f64| t < 15.0);
    let api = FakeApi::new(up, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let first = start(&api, dir.path(), Some(&[driver("u1")]));
    // The first failure is at 21 s; the agent dies at 28 s.
    run_until(&api, 28.0).await;
    first.task.abort();
    let _ = first.task.await;
    let since = match first.contact.reach() {
        Reach::Unreachable(o) => o.since_wall,
        other => panic!("{other:?}"),
    };
    // It is back 4 s later; its watch cannot list, so it knows no pod by itself.
    run_until(&api, 32.0).await;
    let second = start(&api, dir.path(), None);
    run_until(&api, 49.0).await;
    assert_eq!(journal(dir.path()), vec![], "not before the original deadline");
    run_until(&api, 52.0).await;
    let entries = journal(dir.path());
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].uid, "u1");
    assert_eq!(
        entries[0].outage_since,
        jiff::Timestamp::try_from(since).unwrap().to_string(),
        "the outage of the first run"
    );
    assert!(
        (FENCE_AFTER..FENCE_AFTER + 1.0).contains(&entries[0].outage_seconds),
        "{entries:?}"
    );
    second.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_fencing_task_restarted_by_its_supervisor_keeps_its_candidates() {
    let up: Schedule = Arc::new(|t: f64| t < 15.0);
    let api = FakeApi::new(up, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let first = start(&api, dir.path(), Some(&[driver("u1")]));
    // The task ends (a panic, say) at 28 s, in the outage that began at 21 s, and is
    // started again at once, in the same process: same record of requests, and the
    // watch's store cannot be refreshed.
    run_until(&api, 28.0).await;
    first.task.abort();
    let contact = first.contact.clone();
    let again = start_with(&api, dir.path(), None, contact);
    run_until(&api, 52.0).await;
    let entries = journal(dir.path());
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(
        (FENCE_AFTER..FENCE_AFTER + 1.0).contains(&entries[0].outage_seconds),
        "{entries:?}"
    );
    again.task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_restart_long_after_the_last_failure_or_after_an_answer_takes_nothing_up() {
    // Restarted 40 s after its last failure: the API server may have answered meanwhile.
    let up: Schedule = Arc::new(|t: f64| t < 15.0);
    let api = FakeApi::new(up, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let first = start(&api, dir.path(), Some(&[driver("u1")]));
    run_until(&api, 25.0).await;
    first.task.abort();
    run_until(&api, 65.0).await;
    let second = start(&api, dir.path(), None);
    run_until(&api, 120.0).await;
    assert_eq!(journal(dir.path()), vec![]);
    assert_eq!(second.contact.reach(), Reach::Never);
    second.task.abort();

    // Restarted at once, but the API server answers the new agent: the outage is over,
    // and only the pods it now lists count.
    let flag = Arc::new(AtomicBool::new(false));
    let down = flag.clone();
    let api = FakeApi::new(
        Arc::new(move |t: f64| t < 15.0 || !down.load(Ordering::SeqCst)),
        Duration::ZERO,
    );
    let dir = tempfile::tempdir().unwrap();
    let first = start(&api, dir.path(), Some(&[driver("u1")]));
    run_until(&api, 25.0).await;
    first.task.abort();
    flag.store(true, Ordering::SeqCst);
    let api_up_again = FakeApi::new(Arc::new(|_| true), Duration::ZERO);
    let second = start(&api_up_again, dir.path(), Some(&[]));
    run_until(&api_up_again, 60.0).await;
    assert_eq!(journal(dir.path()), vec![]);
    assert_eq!(second.contact.reach(), Reach::Reachable);
    second.task.abort();
}
