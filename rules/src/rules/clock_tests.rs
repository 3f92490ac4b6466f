//! What the daemon relies on to judge less. It judges again only when an input changes or a
//! rule's [`RuleInfo::next_judgement`] comes, and when only the API's observation changed it
//! judges only the rules that judge the API ([`RuleInfo::judges_the_api`]) on the drivers
//! alone ([`PodsSnapshot::for_api_rules`]).
//!
//! The first is held here for every rule: on snapshots whose verdicts turn with the clock
//! alone (a rejection leaving its window, a driver's grace running out, a scratch dir growing
//! old, an outage lasting, probe samples ageing out of their window, the kubelet's grace after
//! a checkpoint write), the clock is moved a second at a time, the rules judged at every second,
//! and the catalogue judged again only at the deadlines it declared. A finding (its key and
//! severity) that appears, goes or changes severity before the next declared deadline is a
//! rule that would have gone stale in the daemon.

use std::collections::BTreeSet;

use super::testkit::*;
use super::{ALL, RuleInfo};
use crate::finding::FindingKey;
use crate::settings::Settings;
use crate::snapshot::*;

/// The verdicts of a judgement: each finding's key and severity.
fn verdicts(snap: &NodeSnapshot, settings: &Settings) -> BTreeSet<(FindingKey, crate::finding::Severity)> {
    let facts = crate::facts::derive(snap, settings);
    super::judge(snap, &facts, settings)
        .findings
        .iter()
        .map(|f| (f.key(), f.severity))
        .collect()
}

/// The nearest deadline of the enabled rules, as the daemon takes it.
fn next_turn(rules: &[RuleInfo], snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    rules
        .iter()
        .filter(|r| settings.enabled(r.id.as_str()))
        .filter_map(|r| r.next_judgement)
        .filter_map(|next| next(snap, settings))
        .min_by(f64::total_cmp)
}

/// `snap` `seconds` later: the snapshot's time and the ages of the files it read.
fn later(snap: &NodeSnapshot, seconds: i64) -> NodeSnapshot {
    let mut s = snap.clone();
    s.taken_at += seconds;
    if let Observed::Ok(f) = &mut s.host.checkpoint {
        f.age_seconds = f.age_seconds.map(|a| a + seconds as f64);
    }
    s.host.managers.add_age(seconds as f64);
    s
}

/// Moves the clock over `horizon` seconds a second at a time, judging at each, and re-judging
/// "as the daemon would" only at declared deadlines. Returns the seconds at which the daemon
/// judged (for the caller to check that the scenario really turned).
fn holds_to_its_deadlines(name: &str, snap: &NodeSnapshot, settings: &Settings, horizon: i64) -> Vec<i64> {
    let mut judged_at = 0;
    let mut judged = verdicts(snap, settings);
    let mut due = next_turn(ALL, snap, settings).map(|left| left.ceil() as i64);
    let mut turns = vec![];
    for t in 1..=horizon {
        let now = later(snap, t);
        let seen = verdicts(&now, settings);
        if due.is_some_and(|d| t >= judged_at + d) {
            judged_at = t;
            judged = seen;
            due = next_turn(ALL, &now, settings).map(|left| left.ceil() as i64);
            turns.push(t);
            continue;
        }
        assert_eq!(
            seen, judged,
            "{name}: at +{t} s the verdicts differ from the judgement at +{judged_at} s, and no rule declared \
             a deadline before then (next: {due:?} s after it)"
        );
    }
    turns
}

/// A pod rejected `ago` seconds before [`NOW`] (`OutOfcpu`).
fn rejected(uid: &str, ago: i64, scheduler: &str) -> PodInfo {
    let mut p = pod(uid, uid, "Failed", &[("c", "")]);
    p.reason = Some("OutOfcpu".into());
    p.message = Some(
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 15000, capacity: 16000".into(),
    );
    p.created_at = Some(NOW - ago);
    p.scheduled_at = Some(NOW - ago);
    p.scheduler_name = Some(scheduler.into());
    p
}

#[test]
fn rejections_and_scheduler_conflicts_turn_at_their_windows() {
    let settings = Settings::default();
    let mut bound = pod("b1", "b1", "Running", &[("c", "c1")]);
    bound.scheduler_name = Some("volcano".into());
    bound.created_at = Some(NOW - 1000);
    bound.scheduled_at = Some(NOW - 1000);
    let snap = SnapshotBuilder::spark_node(&[
        rejected("r1", 100, "default-scheduler"),
        rejected("r2", 50, "default-scheduler"),
        bound,
    ])
    .build();
    assert!(!verdicts(&snap, &settings).is_empty(), "the scenario fires");
    let turns = holds_to_its_deadlines("rejections", &snap, &settings, 3700);
    // The conflict's bound pod leaves its window first, then each rejection leaves its own.
    assert!(
        turns.contains(&2601) && turns.contains(&3501) && turns.contains(&3551),
        "{turns:?}"
    );
    assert!(verdicts(&later(&snap, 3600), &settings).is_empty());
}

#[test]
fn an_orphan_turns_when_its_drivers_grace_runs_out() {
    let settings = Settings::default();
    let mut driver = spark_driver("d1", "spark-1", "etl", "Succeeded");
    driver.finished_at = Some(NOW - 100);
    let executor = owned_by(spark_executor("e1", "spark-1", "etl", 1, "Running"), &driver);
    let snap = SnapshotBuilder::spark_node(&[executor])
        .with_driver(
            "e1",
            DriverLookup::Found {
                by: LookupMethod::OwnerReference,
                driver: std::sync::Arc::new(driver),
            },
        )
        .build();
    let turns = holds_to_its_deadlines("orphan", &snap, &settings, 700);
    assert_eq!(turns, [500]);
    assert!(verdicts(&snap, &settings).is_empty());
    assert!(
        !verdicts(&later(&snap, 500), &settings).is_empty(),
        "an orphan after the grace"
    );
}

#[test]
fn a_scratch_dir_turns_when_it_is_old_enough() {
    let settings = Settings::default();
    let snap = SnapshotBuilder::spark_node(&[])
        .with_local_dirs(vec![empty_dir_scratch("gone-pod", 1 << 30, Some(NOW - 600))])
        .build();
    let turns = holds_to_its_deadlines("local dir", &snap, &settings, 3700);
    assert_eq!(turns, [3000]);
    assert!(!verdicts(&later(&snap, 3000), &settings).is_empty());
}

#[test]
fn an_outage_turns_when_it_has_lasted() {
    let settings = Settings::default();
    let snap = SnapshotBuilder::spark_node(&[])
        .with_api(vec![probe_failed("get", 30, None, "connection refused", 0.0)])
        .api(|a| {
            a.unreachable_since = Some(NOW - 30);
            a.last_success_at = Some(NOW - 60);
            a.last_error = Some("connection refused".into());
        })
        .build();
    let turns = holds_to_its_deadlines("outage", &snap, &settings, 400);
    assert!(turns.first() == Some(&90), "{turns:?}");
    assert!(!verdicts(&later(&snap, 90), &settings).is_empty());
}

#[test]
fn slow_probes_turn_when_they_leave_the_window() {
    let settings = Settings::default();
    let samples = (0..5).map(|i| probe_ok("list", 100 + i * 10, 2.5)).collect();
    let snap = SnapshotBuilder::spark_node(&[]).with_api(samples).build();
    assert!(!verdicts(&snap, &settings).is_empty(), "slow-api fires");
    let turns = holds_to_its_deadlines("slow api", &snap, &settings, 400);
    // Each sample leaves the window 300 s after it was taken; the last one clears the rule.
    assert_eq!(turns, [161, 171, 181, 191, 201]);
    assert!(verdicts(&later(&snap, 201), &settings).is_empty());
}

#[test]
fn a_stale_entry_turns_when_the_kubelets_grace_ends() {
    let settings = Settings::default();
    let snap = SnapshotBuilder::static_node("0-1,4-15", &[("gone", "c1", "2-3")])
        .with_pod_list(&[])
        .checkpoint_age(5.0)
        .build();
    let turns = holds_to_its_deadlines("stale entry", &snap, &settings, 120);
    assert!(!turns.is_empty(), "the grace ends within two minutes");
    assert!(!verdicts(&later(&snap, 120), &settings).is_empty());
}

/// The rules that judge the API give the same verdicts, coverage and deadlines on the drivers
/// alone as on the whole snapshot: outages with drivers here, slow reads, slow creates under a
/// driver's own timeout, a webhook that refuses dry runs, and no observation at all.
#[test]
fn the_api_rules_judge_the_drivers_alone_as_the_whole_node() {
    let settings = Settings::default();
    let mut driver = spark_driver("d1", "spark-1", "etl", "Running");
    driver.node_name = Some("node-a".into());
    let waiting = spark_driver("d2", "spark-2", "ml", "Pending");
    let executor = spark_executor("e1", "spark-1", "etl", 1, "Running");
    let web = pod("w1", "web", "Running", &[("c", "c1")]);
    let conf = spark_conf(Some("3.5.1"), &[("spark.kubernetes.driver.requestTimeout", "4000")]);
    let base = || SnapshotBuilder::spark_node(&[driver.clone(), waiting.clone(), executor.clone(), web.clone()]);
    let mut blocking = webhook("gatekeeper", "validation.gatekeeper.sh");
    blocking.side_effects = "Unknown".into();
    blocking.matches_probe = true;
    let scenarios: Vec<(&str, NodeSnapshot)> = vec![
        (
            "outage",
            base()
                .with_api(vec![probe_failed("get", 200, None, "connection refused", 0.0)])
                .api(|a| {
                    a.unreachable_since = Some(NOW - 300);
                    a.last_success_at = Some(NOW - 400);
                    a.last_error = Some("connection refused".into());
                })
                .build(),
        ),
        (
            "slow reads",
            base()
                .with_api((0..4).map(|i| probe_ok("list", 30 * i, 6.0)).collect())
                .build(),
        ),
        (
            "slow creates",
            base()
                .with_api((0..4).map(|i| probe_ok("create_dry_run", 30 * i, 3.0)).collect())
                .with_spark_conf("d1", conf)
                .build(),
        ),
        (
            "dry runs refused",
            base()
                .with_api(vec![probe_failed(
                    "create_dry_run",
                    20,
                    Some(400),
                    "admission webhook denied",
                    0.2,
                )])
                .with_webhooks(vec![blocking])
                .build(),
        ),
        ("not probed", base().build()),
    ];
    let api_rules: Vec<RuleInfo> = ALL.iter().copied().filter(RuleInfo::judges_the_api).collect();
    assert_eq!(
        api_rules.len(),
        4,
        "slow-api, slow-pod-admission, apiserver-unreachable, webhook-blocks-dry-run"
    );
    for (name, whole) in scenarios {
        let mut alone = NodeSnapshot::empty(&whole.node, whole.taken_at);
        alone.api = whole.api.clone();
        alone.pods = whole.pods.for_api_rules();
        let judge = |s: &NodeSnapshot| {
            let facts = crate::facts::derive(s, &settings);
            super::judge_where(s, &facts, &settings, RuleInfo::judges_the_api)
        };
        let (w, a) = (judge(&whole), judge(&alone));
        assert_eq!(w.coverage, a.coverage, "{name}: coverage");
        let keys = |j: &crate::coverage::Judgement| {
            j.findings
                .iter()
                .map(|f| (f.key(), f.severity, f.evidence.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&w), keys(&a), "{name}: findings");
        assert_eq!(
            next_turn(&api_rules, &whole, &settings),
            next_turn(&api_rules, &alone, &settings),
            "{name}"
        );
        if name != "not probed" {
            assert!(!w.findings.is_empty(), "{name}: the scenario fires");
        }
    }
}
