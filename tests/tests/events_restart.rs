//! Event series that survive their writer: a finding's Event has a fixed name, so an agent
//! killed and started again, or a create whose answer was lost to a client timeout while the
//! write landed, continues the series that is there (409 `AlreadyExists`, then GET and PATCH)
//! instead of making a second Event.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nodemedic::events::EventRecorder;
use nodemedic_rules::finding::{Finding, Severity, Subject};
use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::{events_with_reason, node_object, stale_host};
use serde_json::Value;

/// Every Event in the double by name: (reason, what it is about, series count; 1 without one).
fn events(api: &ApiServer) -> BTreeMap<String, (String, String, i64)> {
    api.store()
        .list("events.events.k8s.io")
        .into_iter()
        .map(|e| {
            let about = format!(
                "{}/{}/{}",
                e["regarding"]["kind"].as_str().unwrap_or(""),
                e["regarding"]["namespace"].as_str().unwrap_or(""),
                e["regarding"]["name"].as_str().unwrap_or("")
            );
            (
                e["metadata"]["name"].as_str().unwrap_or("").to_string(),
                (
                    e["reason"].as_str().unwrap_or("").to_string(),
                    about,
                    e["series"]["count"].as_i64().unwrap_or(1),
                ),
            )
        })
        .collect()
}

fn series_count(event: &Value) -> i64 {
    event["series"]["count"].as_i64().unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_and_started_again_continues_its_event_series() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let mut first = Agent::start(&api, Some(&stale_host()), &[]);
    wait_for("the stale entry's Event", Duration::from_secs(60), &first, || {
        !events_with_reason(&api, "StaleCPUAssignment").is_empty()
    })
    .await;
    // A few more passes: every finding of the node has had its Event created.
    let scans = first.scans();
    wait_for("three more scans", Duration::from_secs(30), &first, || {
        first.scans() >= scans + 3
    })
    .await;
    let before = events(&api);
    assert!(
        before.values().all(|(_, _, count)| *count == 1),
        "a new series counts 1: {before:#?}"
    );

    // SIGKILL: no shutdown, nothing handed over; the new agent knows nothing of the old one.
    first.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    while first.alive() {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "SIGKILL did not end the agent"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = Agent::start(&api, Some(&stale_host()), &[]);
    wait_for(
        "the new agent to continue every series",
        Duration::from_secs(60),
        &second,
        || events(&api).values().all(|(_, _, count)| *count >= 2),
    )
    .await;
    let scans = second.scans();
    wait_for("three more scans", Duration::from_secs(30), &second, || {
        second.scans() >= scans + 3
    })
    .await;
    let after = events(&api);
    // The same Event objects, one per finding, each with its series advanced by the restart.
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "before: {before:#?}\nafter: {after:#?}"
    );
    for (name, (reason, about, count)) in &after {
        let (reason_before, about_before, _) = &before[name];
        assert_eq!((reason, about), (reason_before, about_before), "{name}");
        assert_eq!(*count, 2, "{name}: one more observation, by the new agent");
    }
    let stale = events_with_reason(&api, "StaleCPUAssignment");
    assert_eq!(stale.len(), 1, "{stale:#?}");
    assert_eq!(series_count(&stale[0]), 2);
    // The new agent's creates were answered 409 and read back, never retried as new objects.
    let requests = api.requests();
    let conflicts = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("/events") && r.status == 409)
        .count();
    assert_eq!(conflicts, before.len(), "one 409 per series");
    assert!(
        !second.log().contains("could not create an event"),
        "a 409 is not a failure:\n{}",
        second.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_landed_after_its_client_gave_up_is_continued_not_duplicated() {
    let api = ApiServer::start().await.unwrap();
    let faults = api.faults();
    // The create reaches storage 2 s after it arrived; the client gives up after 1 s.
    faults.set_writes_outlive_clients(true);
    faults.set_latency("create", "events", Duration::from_secs(2));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, true).unwrap();
    let config = nodemedic::kube_api::config(Some(&kubeconfig)).await.unwrap();
    let client = nodemedic::kube_api::request_client(config, Duration::from_secs(1)).unwrap();
    let recorder = |client| EventRecorder::new(client, NODE, "nodemedic-test", Duration::from_secs(600));
    let mut agent = recorder(client.clone());
    let finding = Finding::new(
        nodemedic_rules::rules::stale_cpu_assignment::ID,
        Severity::Critical,
        Subject::pod_uid("39b3c1d2"),
        "CPUs 2-3 are held for a pod that no longer runs on this node".into(),
        "nodemedic repair cpu-state --apply".into(),
    );

    let timed_out = agent.record(std::slice::from_ref(&finding)).await;
    assert_eq!(
        (timed_out.created, timed_out.failed, timed_out.unavailable),
        (0, 1, true),
        "{timed_out:?}"
    );
    let landed = Instant::now();
    while api.store().list("events.events.k8s.io").is_empty() {
        assert!(
            landed.elapsed() < Duration::from_secs(5),
            "the abandoned create never landed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    faults.set_latency("create", "events", Duration::ZERO);

    // The retry: 409, the Event read back, its series continued.
    let retried = agent.record(std::slice::from_ref(&finding)).await;
    assert_eq!(
        (retried.created, retried.patched, retried.continued, retried.failed),
        (0, 1, 1, 0),
        "{retried:?}"
    );
    let stored = api.store().list("events.events.k8s.io");
    assert_eq!(stored.len(), 1, "{stored:#?}");
    assert_eq!(series_count(&stored[0]), 2);
    assert_eq!(stored[0]["reason"], "StaleCPUAssignment");

    // A recorder that starts afresh (a restarted agent) continues it too.
    let mut restarted = recorder(client);
    let again = restarted.record(std::slice::from_ref(&finding)).await;
    assert_eq!((again.created, again.continued, again.failed), (0, 1, 0), "{again:?}");
    let stored = api.store().list("events.events.k8s.io");
    assert_eq!(stored.len(), 1, "{stored:#?}");
    assert_eq!(series_count(&stored[0]), 3);

    // What went over the wire: three creates of one name (the first answered to nobody), two
    // answered 409, each followed by a GET and a PATCH of that name.
    let name = stored[0]["metadata"]["name"].as_str().unwrap().to_string();
    let calls: Vec<(String, u16)> = api
        .requests()
        .iter()
        .filter(|r| r.path.contains("/events"))
        .map(|r| (r.method.clone(), r.status))
        .collect();
    assert_eq!(
        calls,
        [
            ("POST", 201),
            ("POST", 409),
            ("GET", 200),
            ("PATCH", 200),
            ("POST", 409),
            ("GET", 200),
            ("PATCH", 200)
        ]
        .map(|(m, s)| (m.to_string(), s)),
        "{name}"
    );
    assert!(
        api.requests()
            .iter()
            .filter(|r| r.method != "POST" && r.path.contains("/events"))
            .all(|r| r.path.ends_with(&format!("/{name}"))),
        "GET and PATCH address the series by its name"
    );
}
