//! The daemon's judgement: facts made once, and what a rule that cannot judge keeps.

use nodemedic_rules::coverage::{Coverage, Judgement, Source};
use nodemedic_rules::finding::{Finding, Severity, Subject};

use super::hold_unjudged;

fn finding(rule: &'static str, summary: &str) -> Finding {
    Finding::new(
        rule.into(),
        Severity::Critical,
        Subject::node("n"),
        summary.into(),
        String::new(),
    )
}

/// A rule that cannot judge keeps its last judged findings, whatever scans pass, until it
/// judges again; a rule that judged clears as usual.
#[test]
fn a_rule_that_cannot_judge_keeps_its_last_findings() {
    let mut last = Default::default();
    let judged = |findings: Vec<Finding>| Judgement {
        findings,
        coverage: [
            ("kubelet-state-divergence", Coverage::Judged),
            ("stale-cpu-assignment", Coverage::Judged),
        ]
        .into(),
    };
    let unknown = |findings: Vec<Finding>| Judgement {
        findings,
        coverage: [
            (
                "kubelet-state-divergence",
                Coverage::Unknown {
                    missing: vec![Source::Podresources],
                    reason: "hung".into(),
                },
            ),
            ("stale-cpu-assignment", Coverage::Judged),
        ]
        .into(),
    };
    let summaries = |f: &[Finding]| f.iter().map(|f| f.summary.clone()).collect::<Vec<_>>();
    let first = hold_unjudged(
        judged(vec![
            finding("kubelet-state-divergence", "d"),
            finding("stale-cpu-assignment", "s"),
        ]),
        &mut last,
    );
    assert_eq!(summaries(&first), ["d", "s"]);
    for _ in 0..3 {
        // The PodResources API hangs: divergence keeps "d"; stale-cpu-assignment cleared.
        assert_eq!(summaries(&hold_unjudged(unknown(vec![]), &mut last)), ["d"]);
    }
    // It judges again and finds nothing: cleared, and nothing is kept after.
    assert!(hold_unjudged(judged(vec![]), &mut last).is_empty());
    assert!(hold_unjudged(unknown(vec![]), &mut last).is_empty());
}

/// One judgement cycle of the daemon makes each shared judgement exactly once: the rules, the
/// metrics, the published topology and the claims to ask all read the one `Facts` value
/// (before, `stale_entries_of` ran 5 + N times a cycle, `stale_devices` and `stale_claims`
/// four times each). The bundled example node has stale entries and a pod refused CPUs: the
/// facts reach the rules and the metrics.
#[test]
fn a_judgement_cycle_makes_each_shared_judgement_once() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/worker-stale");
    let host = crate::host::HostPaths::new(&example, None);
    let opts = crate::scan::Options {
        host: crate::collect::HostOptions {
            local_dirs: crate::collect::LocalDirs::Measure,
            ..Default::default()
        },
        ..Default::default()
    };
    let scanned =
        crate::scan::snapshot_blocking(&host, crate::scan::Pods::File(example.join("pods.json")), &opts).unwrap();
    let metrics = crate::metrics::Metrics::new().unwrap();
    let memory: std::collections::BTreeMap<u32, u64> = (0..8).map(|n| (n, 1 << 34)).collect();
    let before = nodemedic_rules::facts::counts();
    let judged = super::judge(
        &scanned.snapshot,
        &scanned.records,
        &nodemedic_rules::Settings::default(),
        &mut Default::default(),
        &Default::default(),
        &metrics,
        Some(&memory),
    );
    let after = nodemedic_rules::facts::counts();
    let made: std::collections::BTreeMap<&str, u64> = after
        .iter()
        .map(|(k, v)| (*k, v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let once: std::collections::BTreeMap<&str, u64> = [
        "checkpoint_refusals",
        "exclusive_cpus_by_numa",
        "half_submitted_drivers",
        "orphaned_dirs",
        "orphaned_executors",
        "rejections",
        "stale_claims",
        "stale_devices",
        "stale_entries_of",
        "stale_memory",
        "storage_risks",
    ]
    .into_iter()
    .map(|k| (k, 1))
    .collect();
    assert_eq!(made, once);
    // And they found something: the example's stale entries reach the rules, the metrics and
    // the topology.
    assert!(
        judged
            .findings
            .iter()
            .any(|f| f.rule.as_str() == "stale-cpu-assignment")
    );
    assert!(
        judged
            .findings
            .iter()
            .any(|f| f.rule.as_str() == "exclusive-cpu-shortage")
    );
    assert!(
        metrics.render().contains("nodemedic_cpu_manager_stale_cpus 3"),
        "{}",
        metrics.render()
    );
}

/// Every rule of the catalogue reaches its sinks from its declarations alone: its findings
/// count in `nodemedic_findings` and `nodemedic_rule_firing` under its id, the gauge it declares
/// is set, the node condition it declares turns `True` (the others stay `False`), and its
/// Event carries the catalogue's reason. A rule added to the catalogue is wired by this.
#[test]
fn every_rule_reaches_its_metrics_its_condition_and_its_event_reason() {
    use nodemedic_rules::finding::Subject;
    use nodemedic_rules::rules;

    use crate::conditions::{Status, wanted};

    for r in rules::ALL {
        let metrics = crate::metrics::Metrics::new().unwrap();
        let snap = nodemedic_rules::snapshot::NodeSnapshot::empty("n", 0);
        let finding = Finding::new(
            r.id,
            r.severity,
            Subject::node("n"),
            format!("{} found something", r.id),
            String::new(),
        )
        .with("bytes", 4096u64);
        let facts = nodemedic_rules::facts::derive(&snap, &nodemedic_rules::Settings::default());
        metrics.observe_scan(&snap, &facts, std::slice::from_ref(&finding), &Default::default());
        let text = metrics.render();
        let value = |series: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
                .and_then(|v| v.parse::<f64>().ok())
        };
        assert_eq!(
            value(&format!("nodemedic_rule_firing{{rule=\"{}\"}}", r.id)),
            Some(1.0),
            "{}",
            r.id
        );
        assert_eq!(
            value(&format!(
                "nodemedic_findings{{rule=\"{}\",severity=\"{}\"}}",
                r.id,
                r.severity.as_str()
            )),
            Some(1.0),
            "{}",
            r.id
        );
        if let Some(g) = r.gauge {
            let v = value(&format!("nodemedic_{}", g.name));
            assert!(v.is_some_and(|v| v > 0.0), "{}: nodemedic_{} is {v:?}", r.id, g.name);
        }
        for w in wanted(std::slice::from_ref(&finding), &Default::default()) {
            let its = r.condition.is_some_and(|c| c.type_ == w.type_);
            assert_eq!(
                w.status,
                if its { Status::True } else { Status::False },
                "{} {}",
                r.id,
                w.type_
            );
            if its {
                assert_eq!(w.message, finding.summary);
            }
        }
        assert_eq!(crate::events::reason_of(&finding), r.event_reason);
    }
}
