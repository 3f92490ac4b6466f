//! The API server as the node sees it: `nodemedic probe api` and the daemon's probes against
//! the API server double over HTTPS.

use std::time::Duration;

use nodemedic_tests::apiserver::ApiServer;
use serde_json::Value;

fn probe_json(api: &ApiServer, extra: &[&str]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc, true).unwrap();
    let mut args = vec![
        "probe",
        "api",
        "--kubeconfig",
        kc.to_str().unwrap(),
        "--namespace",
        "nodemedic",
        "--node",
        "worker-7",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let run = nodemedic_tests::nodemedic(&args);
    let v = serde_json::from_str(&run.stdout).unwrap_or(Value::Null);
    (run.code, v, run.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_api_reports_every_phase_and_they_add_up() {
    let api = ApiServer::start().await.unwrap();
    api.faults().set_latency("create", "pods", Duration::from_millis(300));
    let (code, v, stderr) = probe_json(&api, &["--count", "3"]);
    assert_eq!(code, 0, "{stderr}\n{v:#}");
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 9);
    for s in samples {
        let f = |k: &str| s[k].as_f64().unwrap();
        assert!(s["ok"].as_bool().unwrap(), "{s}");
        assert!(f("dns_seconds") <= f("connect_seconds"), "{s}");
        assert!(f("connect_seconds") <= f("tls_seconds"), "{s}");
        assert!(
            f("tls_seconds") < f("first_byte_seconds"),
            "TLS is a real handshake before the answer: {s}"
        );
        assert!(f("first_byte_seconds") <= f("total_seconds"), "{s}");
    }
    let dry: Vec<&Value> = samples.iter().filter(|s| s["probe"] == "create_dry_run").collect();
    assert!(
        dry.iter().all(|s| s["first_byte_seconds"].as_f64().unwrap() >= 0.3),
        "the injected admission delay is measured"
    );
    assert_eq!(v["summary"]["create_dry_run"]["ok"], 3);
    assert!(v["summary"]["get"]["total_seconds"]["median"].as_f64().unwrap() < 0.3);
    // The dry-run pod was never stored, and the LIST asked for this node's pods.
    assert!(api.store().list("pods").is_empty());
    let reqs = api.requests();
    assert!(
        reqs.iter()
            .any(|r| r.verb == "create" && r.query.contains("dryRun=All"))
    );
    assert!(
        reqs.iter()
            .any(|r| r.verb == "list" && r.query.contains("spec.nodeName%3Dworker-7") && r.query.contains("limit=1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_api_says_what_failed() {
    let api = ApiServer::start().await.unwrap();
    api.faults().fail("list", "pods", 503, None, None);
    let (code, v, _) = probe_json(&api, &["--count", "1"]);
    assert_eq!(code, 1);
    let list = v["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["probe"] == "list")
        .unwrap()
        .clone();
    assert_eq!(list["status"], 503);
    assert!(list["error"].as_str().unwrap().starts_with("HTTP 503: "), "{list}");
    api.faults().clear();
    api.faults().set_down(true);
    let (code, v, _) = probe_json(&api, &["--count", "1", "--timeout-seconds", "3"]);
    assert_eq!(code, 1);
    assert!(
        v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["ok"].as_bool().unwrap())
    );
}
