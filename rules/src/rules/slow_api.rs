//! `slow-api`: reading from the API server is slow from this node.
//!
//! The agent times two read probes like `curl -w` does (DNS, connect, TLS, first byte, total):
//! `get` (`/version`) and `list` (this node's pods, `limit=1`). This rule takes the successful
//! read samples of the last `api_latency_window_seconds`, and fires on the probe whose median
//! total time is at or above `slow_api_warning_seconds` (critical at
//! `slow_api_critical_seconds`). The phases of the slowest sample say where the time goes: time
//! to first byte is the API server being slow to answer; DNS, connect and TLS point at the
//! node's path to it.
//!
//! The window, the median and the phases are [`crate::probes`], shared with the other API rules.

use serde_json::{Value, json};

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::probes::{Phase, READ_PROBES, api, dominant_phase, recent, sample_json, spread};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, ProbeSample};
use crate::text::ms;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("slow-api");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Reading from the API server is slow from this node",
    severity: Severity::Warning,
    looks_at: "API probes (get, list)",
    fires_when: "the median time of a read probe in the window is at or above slow_api_warning_seconds (critical at slow_api_critical_seconds); the slowest request's phases say whether DNS, connect, TLS or the API server's answer is slow",
    event_reason: "SlowAPI",
    needs: Needs {
        all: &[One(Source::Api)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it times the agent's own reads from the API server, in which the kubelet takes no part",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::probes::window_turn),
};

/// What it means when most of the time goes to `phase`.
fn diagnosis(phase: Phase) -> &'static str {
    match phase {
        Phase::Dns => "DNS lookup: the node is slow to resolve the API server's name",
        Phase::Connect => "TCP connect: the network path to the API server (or its load balancer) is slow",
        Phase::Tls => {
            "TLS handshake: the API server or its load balancer is slow to handshake (overloaded), or the path loses packets"
        }
        Phase::FirstByte => "time to first byte: the API server is slow to answer, not the network",
        Phase::Transfer => {
            "transfer: the answer is slow to arrive after its first byte (a large answer or a slow path)"
        }
    }
}

/// What to check, by where the time goes.
fn remedy(phase: Phase) -> String {
    match phase {
        Phase::FirstByte => "The API server itself is slow to answer: check its request latency by verb and resource \
             (apiserver_request_duration_seconds), API Priority and Fairness queueing \
             (apiserver_flowcontrol_request_wait_duration_seconds), etcd latency (etcd_request_duration_seconds), \
             clients that list large collections without a limit, and `kubectl get --raw '/readyz?verbose'`. \
             If only this node sees it (compare nodemedic_api_request_duration_seconds across nodes), check this \
             node's path to the API server instead"
            .to_string(),
        Phase::Dns => "Resolving the API server's name is slow on this node: check the node's resolver \
             (/etc/resolv.conf, systemd-resolved, the upstream DNS servers), or address the API server by IP"
            .to_string(),
        Phase::Connect | Phase::Tls => "Connecting to the API server is slow from this node: check the path \
             (packet loss with `mtr`, a full conntrack table with `conntrack -S`, MTU), the API server's load \
             balancer, and the API server's CPU (TLS handshakes are CPU-bound)"
            .to_string(),
        Phase::Transfer => "Answers arrive slowly after their first byte: check this node's bandwidth and packet \
             loss to the API server (`mtr`), and the size of what is read"
            .to_string(),
    }
}

/// One read probe's successful samples in the window.
struct ProbeStats<'a> {
    probe: &'static str,
    median: f64,
    min: f64,
    max: f64,
    count: usize,
    slowest: &'a ProbeSample,
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let Some(api) = api(snap) else { return vec![] };
    let reads: Vec<&ProbeSample> = recent(api, snap, settings)
        .filter(|s| READ_PROBES.contains(&s.probe.as_str()))
        .collect();
    let failed = reads.iter().filter(|s| !s.ok).count();

    let per_probe: Vec<ProbeStats> = READ_PROBES
        .iter()
        .filter_map(|probe| {
            let ok: Vec<&ProbeSample> = reads
                .iter()
                .copied()
                .filter(|s| s.ok && s.probe == *probe && s.total_seconds.is_finite())
                .collect();
            let (median, min, max, slowest) = spread(&ok)?;
            Some(ProbeStats {
                probe,
                median,
                min,
                max,
                count: ok.len(),
                slowest,
            })
        })
        .collect();
    let Some(&ProbeStats {
        probe,
        median,
        min,
        max,
        count,
        slowest,
    }) = per_probe.iter().max_by(|a, b| a.median.total_cmp(&b.median))
    else {
        return vec![];
    };
    let (severity, threshold) = if median >= settings.slow_api_critical_seconds {
        (Severity::Critical, settings.slow_api_critical_seconds)
    } else if median >= settings.slow_api_warning_seconds {
        (Severity::Warning, settings.slow_api_warning_seconds)
    } else {
        return vec![];
    };
    let (phase, phase_seconds) = dominant_phase(slowest);
    let probes: serde_json::Map<String, Value> = per_probe
        .iter()
        .map(|p| {
            (
                p.probe.to_string(),
                json!({"median_seconds": ms(p.median), "max_seconds": ms(p.max), "samples": p.count}),
            )
        })
        .collect();
    vec![
        Finding::new(
            ID,
            severity,
            Subject::node(&snap.node),
            format!(
                "API {probe} requests from {} take {:.2} s (median of {count}), at or above the {} s {} threshold; \
                 most of the slowest one ({:.2} s) is {}",
                snap.node,
                median,
                threshold,
                severity.as_str(),
                max,
                diagnosis(phase)
            ),
            remedy(phase),
        )
        .with("probe", probe)
        .with("median_seconds", ms(median))
        .with("min_seconds", ms(min))
        .with("max_seconds", ms(max))
        .with("samples", count)
        .with("failed_samples", failed)
        .with("threshold_seconds", threshold)
        .with("window_seconds", settings.api_latency_window_seconds)
        .with("slowest_sample", sample_json(slowest))
        .with("dominant_phase", phase.as_str())
        .with("dominant_phase_seconds", ms(phase_seconds))
        .with("diagnosis", diagnosis(phase))
        .with("probes", probes),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, probe_failed, probe_ok, probe_phases};
    use crate::snapshot::Observed;

    fn run(samples: Vec<ProbeSample>) -> Vec<Finding> {
        crate::rules::testkit::judged(
            check,
            &SnapshotBuilder::spark_node(&[]).with_api(samples).build(),
            &Settings::default(),
        )
    }

    #[test]
    fn median_and_thresholds() {
        assert!(run(vec![probe_ok("get", 30, 0.02), probe_ok("list", 30, 0.9)]).is_empty());
        // One slow outlier does not move the median.
        assert!(
            run(vec![
                probe_ok("get", 90, 0.02),
                probe_ok("get", 60, 9.0),
                probe_ok("get", 30, 0.03)
            ])
            .is_empty()
        );
        let f = run(vec![
            probe_ok("get", 90, 0.02),
            probe_ok("list", 90, 1.2),
            probe_ok("list", 60, 1.5),
            probe_ok("list", 30, 0.4),
        ]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].evidence["probe"], "list");
        assert_eq!(f[0].evidence["median_seconds"], 1.2);
        assert_eq!(f[0].evidence["min_seconds"], 0.4);
        assert_eq!(f[0].evidence["max_seconds"], 1.5);
        assert_eq!(f[0].evidence["samples"], 3);
        assert_eq!(f[0].evidence["probes"]["get"]["median_seconds"], 0.02);
        assert_eq!(f[0].evidence["dominant_phase"], "first_byte");
        assert!(
            f[0].summary
                .contains("the API server is slow to answer, not the network"),
            "{}",
            f[0].summary
        );

        let f = run(vec![probe_ok("get", 60, 6.0), probe_ok("get", 30, 4.0)]);
        assert_eq!(
            f[0].severity,
            Severity::Critical,
            "median 5.0 is at the critical threshold"
        );
        assert_eq!(f[0].evidence["threshold_seconds"], 5.0);
    }

    #[test]
    fn only_successful_reads_in_the_window_count() {
        assert!(
            run(vec![
                probe_failed("get", 30, None, "timeout", 10.0),
                probe_ok("create_dry_run", 30, 30.0),
                probe_ok("get", 3600, 8.0),
                probe_ok("get", 20, 0.05),
            ])
            .is_empty()
        );
        assert!(
            run(vec![probe_failed(
                "list",
                30,
                Some(503),
                "503 Service Unavailable",
                2.0
            )])
            .is_empty()
        );
        let mut offline = SnapshotBuilder::spark_node(&[]).build();
        assert!(crate::rules::testkit::judged(check, &offline, &Settings::default()).is_empty());
        offline.api.server = Observed::Error {
            reason: "no credentials".into(),
        };
        assert!(crate::rules::testkit::judged(check, &offline, &Settings::default()).is_empty());
    }

    #[test]
    fn phases_name_the_slow_part() {
        let cases = [
            (probe_phases("get", 30, 2.5, 2.51, 2.52, 2.6, 2.61), "dns"),
            (probe_phases("get", 30, 0.0, 2.0, 2.1, 2.2, 2.2), "connect"),
            (probe_phases("get", 30, 0.0, 0.01, 2.0, 2.1, 2.1), "tls"),
            (probe_phases("get", 30, 0.0, 0.01, 0.02, 2.0, 2.01), "first_byte"),
            (probe_phases("get", 30, 0.0, 0.01, 0.02, 0.03, 2.0), "transfer"),
        ];
        for (sample, want) in cases {
            let f = run(vec![sample]);
            assert_eq!(f[0].evidence["dominant_phase"], want);
            assert_eq!(
                f[0].evidence["slowest_sample"]["total_seconds"],
                f[0].evidence["max_seconds"]
            );
        }
    }
}
