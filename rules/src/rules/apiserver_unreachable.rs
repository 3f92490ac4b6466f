//! `apiserver-unreachable`: this node has not reached the API server for a while.
//!
//! Judged from the agent's one record of answered requests (the daemon's `ApiContact`): every
//! request of the agent counts, the pod watch and its events, the Lease reads, the probes, the
//! Events and patches. A request that got any HTTP answer (a 401 or a 503 too) reached the API
//! server; one that got none (refused, reset, a TLS failure, a timeout) did not. The finding
//! fires once no request has been answered for `apiserver_unreachable_seconds`, counted from
//! the first request that failed after the last answer (`ApiObservation::unreachable_since`),
//! and clears at the first answer. The evidence gives the last error, the last error of each
//! probe since then and where it stopped (DNS, connect, TLS, waiting for the answer), and the
//! Spark drivers on this node: if the node is cut off, the control plane marks it NotReady,
//! deletes its pods after their toleration, and whatever runs a driver as a Job recreates it
//! elsewhere while the old one keeps running here (docs/rules/duplicate-driver.md, "Cause").

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::probes::{api, sample_json};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, ProbeSample};
use crate::spark::is_driver;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("apiserver-unreachable");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "This node cannot reach the API server",
    severity: Severity::Critical,
    looks_at: "API probes, driver pods",
    fires_when: "no API probe succeeded for apiserver_unreachable_seconds; lists the Spark drivers on this node that may end up running twice",
    event_reason: "APIServerUnreachable",
    needs: Needs {
        all: &[One(Source::Api)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it counts the agent's own answered requests to the API server, in which the kubelet takes no part",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(next_judgement),
};

/// Seconds until an outage that has begun lasts `apiserver_unreachable_seconds`; `None` while
/// the API server answers, or once the rule fires (every failure after that is news of its own).
fn next_judgement(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    let since = api(snap)?.unreachable_since?;
    let left = (since + settings.apiserver_unreachable_seconds - snap.taken_at) as f64;
    (left > 0.0).then_some(left)
}

/// How to time the API server by hand from the node, like the probes do.
const CURL_TIMING: &str = "curl -sk -o /dev/null -w 'dns %{time_namelookup} connect %{time_connect} \
     tls %{time_appconnect} first byte %{time_starttransfer} total %{time_total}\\n' \
     https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/version";

/// Where a failed probe stopped: `dns`, `connect`, `tls`, `answer` (connected, no answer) or
/// `http` (the API server answered with an error status).
pub(crate) fn failure_stage(s: &ProbeSample) -> &'static str {
    let e = s.error.as_deref().unwrap_or("").to_ascii_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| e.contains(w));
    if s.status.is_some() {
        "http" // whatever the message says, it came from the API server
    } else if any(&["dns", "resolve", "lookup", "name or service not known", "no such host"]) {
        "dns"
    } else if any(&["refused", "unreachable", "no route"]) {
        "connect"
    } else if any(&["tls", "certificate", "handshake", "x509"]) {
        "tls"
    } else if s.tls_seconds > 0.0 {
        "answer"
    } else if s.connect_seconds > 0.0 {
        "tls"
    } else {
        "connect"
    }
}

/// What to check for a failure at `stage`.
fn stage_advice(stage: &str, status: Option<u16>) -> String {
    match stage {
        "dns" => "the API server's name does not resolve from this node: check the node's resolver \
             (/etc/resolv.conf, systemd-resolved, the upstream DNS servers)"
            .to_string(),
        "tls" => "the TLS handshake with the API server fails: check the node's clock (`timedatectl`), the \
             certificates, and any proxy in between"
            .to_string(),
        "answer" => "connections open but no answer comes: the API server is overloaded or stuck, or the path \
             drops larger packets (MTU)"
            .to_string(),
        "http" => format!(
            "the API server answers, but with errors{}: it is reachable and unhealthy (`kubectl get --raw \
             '/readyz?verbose'` from elsewhere; etcd)",
            status.map_or(String::new(), |s| format!(" (HTTP {s})"))
        ),
        _ => "TCP connections to the API server fail: check routes, firewalls and security groups between this \
             node and the API server or its load balancer, and whether anything listens there (a refused \
             connection: the API server is down or its load balancer has no healthy backend)"
            .to_string(),
    }
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let Some(api) = api(snap) else { return vec![] };
    // Reachable: some request was answered after the last one that failed.
    let Some(since) = api.unreachable_since else {
        return vec![];
    };
    let without = snap.taken_at.saturating_sub(since);
    if without < settings.apiserver_unreachable_seconds {
        return vec![];
    }

    // The newest failure of each probe since the outage began.
    let failures: Vec<&ProbeSample> = api.samples.iter().filter(|s| !s.ok && s.at >= since).collect();
    let mut last: BTreeMap<&str, &ProbeSample> = BTreeMap::new();
    for s in &failures {
        let newer = last.get(s.probe.as_str()).is_none_or(|l| s.at >= l.at);
        if newer {
            last.insert(s.probe.as_str(), s);
        }
    }
    // The newest failed probe, else the last failed request of any kind.
    let last_request = api.last_error.as_ref().map(|e| ProbeSample {
        probe: "request".into(),
        at: snap.taken_at,
        error: Some(e.clone()),
        ..Default::default()
    });
    let newest = last.values().copied().max_by_key(|s| s.at).or(last_request.as_ref());
    let last_errors: Vec<Value> = last
        .values()
        .map(|s| {
            let mut v = sample_json(s);
            if let Some(map) = v.as_object_mut() {
                map.insert("failed_at".into(), failure_stage(s).into());
            }
            v
        })
        .collect();

    let drivers: Vec<Value> = snap
        .pods
        .bound
        .iter()
        .filter(|p| is_driver(p) && !p.is_terminal())
        .map(|p| json!({"pod": p.display(), "uid": p.uid, "app_id": p.spark_app()}))
        .collect();
    let drivers_known = snap.pods.source.is_pod_list();

    let last_success = match api.last_success_at {
        Some(t) => format!(
            "no request answered since the first that failed; last answer {} s ago",
            snap.taken_at.saturating_sub(t)
        ),
        None => "no request answered since the agent started".to_string(),
    };
    let error = newest.map_or(String::new(), |s| {
        format!(
            ": {} failed at {} ({})",
            if s.probe == "request" {
                "the last request"
            } else {
                s.probe.as_str()
            },
            failure_stage(s),
            s.error.as_deref().unwrap_or("no error text")
        )
    });
    let at_risk = match drivers.len() {
        0 => String::new(),
        n => format!("; {n} Spark driver(s) here may be running twice if this node is cut off"),
    };
    let mut remedy = vec![
        format!(
            "Check this node's path to the API server where the probes stop: {}",
            newest.map_or_else(
                || stage_advice("connect", None),
                |s| stage_advice(failure_stage(s), s.status)
            )
        ),
        format!("From the node, `{CURL_TIMING}` shows which phase fails (DNS, connect, TLS, first byte)"),
    ];
    if !drivers.is_empty() {
        remedy.push(
            "The Spark drivers on this node may end up running twice: once the node is NotReady, its pods are \
             deleted after their toleration (300 s by default) and a driver run by a Job is recreated elsewhere \
             while this one keeps running. If the node stays cut off, stop them here first (self-fencing: \
             nodemedic's driver fencing does it for the drivers that opted in, docs/operations/partitions.md; \
             medik8s self-node-remediation reboots the whole node), and give drivers a ReadWriteOnce volume so \
             a second one cannot start"
                .to_string(),
        );
    }

    let mut finding = Finding::new(
        ID,
        Severity::Critical,
        Subject::node(&snap.node),
        format!(
            "{} has not reached the API server for {without} s ({last_success}){error}{at_risk}",
            snap.node
        ),
        remedy.join(". "),
    )
    .with("seconds_without_success", without)
    .with("threshold_seconds", settings.apiserver_unreachable_seconds)
    .with("last_success_at", api.last_success_at)
    .with("unreachable_since", since)
    .with("last_error", api.last_error.clone())
    .with("probing_since", api.probing_since)
    .with("failed_probes", failures.len())
    .with("failed_at", newest.map(failure_stage))
    .with("last_errors", last_errors);
    if drivers_known {
        finding = finding.with("drivers_at_risk", drivers);
    }
    vec![finding]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{NOW, SnapshotBuilder, probe_failed, probe_ok, spark_driver, spark_executor};
    use crate::snapshot::{Observed, PodSource};

    fn refused(probe: &str, ago: i64) -> ProbeSample {
        probe_failed(probe, ago, None, "connect: connection refused", 0.002)
    }

    #[test]
    fn fires_after_the_threshold_counted_from_the_first_failure_after_the_last_answer() {
        let s = Settings::default();
        let node = |samples, since: Option<i64>| {
            SnapshotBuilder::spark_node(&[
                spark_driver("d1", "spark-a", "etl", "Running"),
                spark_driver("d2", "spark-b", "old", "Failed"),
                spark_executor("e1", "spark-a", "etl", 1, "Running"),
            ])
            .with_api(samples)
            .api(|a| {
                // The last answer of any request (the watch, say) 400 s ago; then silence
                // until the first failure.
                a.last_success_at = Some(NOW - 400);
                a.unreachable_since = since;
                a.last_error = since.map(|_| "pod watch stream: connection reset".to_string());
            })
            .build()
        };
        // 119 s since the first failure: not yet, however long the silence before it.
        assert!(
            crate::rules::testkit::judged(check, &node(vec![probe_ok("get", 500, 0.01)], Some(NOW - 119)), &s)
                .is_empty()
        );
        let snap = node(
            vec![
                probe_ok("get", 500, 0.01),
                refused("get", 200),
                refused("get", 20),
                probe_failed("list", 25, None, "operation timed out", 10.0),
            ],
            Some(NOW - 300),
        );
        let f = crate::rules::testkit::judged(check, &snap, &s);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(f[0].evidence["seconds_without_success"], 300);
        assert_eq!(f[0].evidence["unreachable_since"], NOW - 300);
        assert_eq!(f[0].evidence["last_success_at"], NOW - 400);
        assert_eq!(f[0].evidence["last_error"], "pod watch stream: connection reset");
        assert_eq!(f[0].evidence["failed_probes"], 3);
        assert_eq!(f[0].evidence["failed_at"], "connect");
        assert_eq!(
            f[0].evidence["last_errors"].as_array().unwrap().len(),
            2,
            "one per probe"
        );
        assert_eq!(f[0].evidence["last_errors"][0]["probe"], "get");
        assert_eq!(f[0].evidence["last_errors"][0]["at"], NOW - 20);
        assert_eq!(
            f[0].evidence["drivers_at_risk"],
            json!([{"pod": "spark-jobs/etl-driver", "uid": "d1", "app_id": "spark-a"}])
        );
        assert!(f[0].summary.starts_with("node-a has not reached the API server for 300 s (no request answered since the first that failed; last answer 400 s ago): get failed at connect (connect: connection refused); 1 Spark driver(s) here may be running twice"), "{}", f[0].summary);
        assert!(f[0].remedy.contains("self-fencing"), "{}", f[0].remedy);
        assert!(f[0].remedy.contains("%{time_starttransfer}"), "{}", f[0].remedy);
    }

    #[test]
    fn the_duration_is_the_outage_and_the_first_answer_clears_it() {
        // The case of the issue: the prober's last successful round was 124 s before the
        // snapshot, but the watch was answered until 60 s ago: the outage is 60 s, under the
        // threshold, so nothing fires (the old judgement said 124 s).
        let s = Settings::default();
        let snap = |since: Option<i64>, last: i64| {
            SnapshotBuilder::spark_node(&[spark_driver("d1", "spark-a", "etl", "Running")])
                .with_api(vec![probe_ok("get", 124, 0.01), refused("get", 30)])
                .api(|a| {
                    a.last_success_at = Some(NOW - last);
                    a.unreachable_since = since;
                    a.last_error = since.map(|_| "connection refused".to_string());
                })
                .build()
        };
        assert!(crate::rules::testkit::judged(check, &snap(Some(NOW - 60), 61), &s).is_empty());
        // 130 s of outage: 130 s, not the time since the last probe round.
        let f = crate::rules::testkit::judged(check, &snap(Some(NOW - 130), 131), &s);
        assert_eq!(f[0].evidence["seconds_without_success"], 130);
        assert!(f[0].summary.contains("for 130 s"), "{}", f[0].summary);
        // The first answer, of any request, ends it at once: no finding, whatever the probes
        // last said.
        assert!(crate::rules::testkit::judged(check, &snap(None, 1), &s).is_empty());
    }

    #[test]
    fn never_answered_counts_from_the_first_failure() {
        let s = Settings::default();
        let node = |since: i64| {
            SnapshotBuilder::spark_node(&[])
                .with_api(vec![])
                .api(|a| {
                    a.probing_since = NOW - 3000;
                    a.last_success_at = None;
                    a.unreachable_since = Some(since);
                    a.last_error = Some("dns error: failed to lookup address information".into());
                })
                .build()
        };
        assert!(crate::rules::testkit::judged(check, &node(NOW - 119), &s).is_empty());
        let snap = node(NOW - 120);
        let f = crate::rules::testkit::judged(check, &snap, &s);
        assert!(
            f[0].summary
                .contains("for 120 s (no request answered since the agent started): the last request failed at dns"),
            "{}",
            f[0].summary
        );
        assert_eq!(f[0].evidence["failed_at"], "dns");
        assert!(f[0].evidence.get("last_success_at").is_none());
        assert_eq!(f[0].evidence["drivers_at_risk"], json!([]));
        assert!(!f[0].remedy.contains("self-fencing"));
        let mut cgroups_only = snap.clone();
        cgroups_only.pods.source = PodSource::Cgroups;
        assert!(
            crate::rules::testkit::judged(check, &cgroups_only, &s)[0]
                .evidence
                .get("drivers_at_risk")
                .is_none(),
            "unknown, not none"
        );
        let mut offline = snap;
        offline.api.server = Observed::NotApplicable {
            reason: "offline".into(),
        };
        assert!(crate::rules::testkit::judged(check, &offline, &s).is_empty());
    }

    #[test]
    fn failure_stages() {
        let with = |status, error: &str, connect, tls| ProbeSample {
            connect_seconds: connect,
            tls_seconds: tls,
            ..probe_failed("get", 0, status, error, 10.0)
        };
        let cases = [
            (
                with(None, "dns error: failed to lookup address information", 0.0, 0.0),
                "dns",
            ),
            (
                with(
                    None,
                    "error trying to connect: Connection refused (os error 111)",
                    0.0,
                    0.0,
                ),
                "connect",
            ),
            (with(None, "invalid peer certificate: Expired", 0.01, 0.0), "tls"),
            (with(None, "timeout", 0.01, 0.0), "tls"),
            (with(None, "timeout", 0.01, 0.02), "answer"),
            (with(None, "timeout", 0.0, 0.0), "connect"),
            (with(Some(503), "HTTP 503: Service Unavailable", 0.01, 0.02), "http"),
            (
                with(Some(500), "HTTP 500: dial tcp: lookup etcd: no such host", 0.01, 0.02),
                "http",
            ),
            (
                with(
                    None,
                    "DNS lookup of api.example.com: failed to lookup address information",
                    0.0,
                    0.0,
                ),
                "dns",
            ),
            (
                with(
                    None,
                    "TLS handshake with 10.96.0.1:443: invalid peer certificate",
                    0.01,
                    0.0,
                ),
                "tls",
            ),
            (with(None, "no complete answer within 10 s", 0.01, 0.02), "answer"),
        ];
        for (sample, want) in cases {
            assert_eq!(failure_stage(&sample), want, "{:?}", sample.error);
        }
        assert!(stage_advice("http", Some(503)).contains("(HTTP 503)"));
    }
}
