//! Tests of [`super`] (plan.rs keeps the plans, this file their tests): orphans, failed pods by
//! age, and the re-check right before deleting.

use super::*;
use nodemedic_rules::snapshot::{ContainerInfo, DriverLookup, LocalDirVolume, LookupMethod, OwnerRef};

const NOW: i64 = 1_790_000_000;
const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";

fn executor(uid: &str, n: u32, phase: &str) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        namespace: "spark".into(),
        name: format!("etl-exec-{n}"),
        node_name: Some("n1".into()),
        phase: phase.into(),
        labels: [
            ("spark-role".to_string(), "executor".to_string()),
            ("spark-app-selector".to_string(), APP.to_string()),
        ]
        .into(),
        containers: vec![ContainerInfo {
            name: "spark-kubernetes-executor".into(),
            ..Default::default()
        }],
        owner_refs: vec![OwnerRef {
            kind: "Pod".into(),
            name: "etl-driver".into(),
            uid: "d1".into(),
            controller: true,
        }],
        local_dir_volumes: vec![LocalDirVolume {
            name: "spark-local-dir-1".into(),
            host_path: None,
            memory: false,
            claim: None,
            size_limit_bytes: None,
        }],
        created_at: Some(NOW - 3600),
        ..Default::default()
    }
}

fn gone() -> DriverLookup {
    DriverLookup::Gone {
        by: LookupMethod::OwnerReference,
        expected: "spark/etl-driver (uid d1)".into(),
    }
}

fn snapshot(pods: Vec<PodInfo>) -> NodeSnapshot {
    let mut s = NodeSnapshot::empty("n1", NOW);
    s.pods.source = PodSource::Api;
    for p in pods.iter().filter(|p| nodemedic_rules::spark::is_executor(p)) {
        s.api.lookups.drivers.insert(p.uid.clone(), gone());
    }
    s.pods.bound = pods;
    s
}

#[test]
fn orphans_running_ones_only_when_asked() {
    let snap = snapshot(vec![executor("e1", 1, "Running"), executor("e2", 2, "Failed")]);
    let plan = plan_orphans(&snap, &Settings::default(), false);
    assert_eq!(plan.delete.iter().map(|c| c.uid.as_str()).collect::<Vec<_>>(), ["e2"]);
    assert_eq!(plan.kept[0].uid, "e1");
    assert!(plan.kept[0].kept_because.contains("--include-running"));
    assert_eq!(plan.delete[0].evidence["driver_state"], "gone");
    assert!(plan.delete[0].why.starts_with("no driver pod exists"));
    let all = plan_orphans(&snap, &Settings::default(), true);
    assert_eq!(all.delete.len(), 2);
    assert!(all.kept.is_empty());
    // Only from the live API.
    let mut file = snap.clone();
    file.pods.source = PodSource::File;
    let none = plan_orphans(&file, &Settings::default(), true);
    assert!(none.delete.is_empty());
    assert_eq!(none.notes.len(), 1);
}

#[test]
fn failed_pods_by_age() {
    let rejected = |uid: &str, age: Option<i64>| {
        let mut p = executor(uid, 9, "Failed");
        p.reason = Some("OutOfcpu".into());
        p.message = Some(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 7000, capacity: 8000"
                .into(),
        );
        p.created_at = age.map(|a| NOW - a);
        p
    };
    let mut deleting = rejected("r4", Some(7200));
    deleting.deleting = true;
    let plain_failure = executor("f1", 3, "Failed");
    let snap = snapshot(vec![
        rejected("r1", Some(7200)),
        rejected("r2", Some(60)),
        rejected("r3", None),
        deleting,
        plain_failure,
    ]);
    let plan = plan_failed_pods(&snap, 600);
    assert_eq!(plan.delete.iter().map(|c| c.uid.as_str()).collect::<Vec<_>>(), ["r1"]);
    let ev = &plan.delete[0].evidence;
    assert_eq!(ev["reason"], "OutOfcpu");
    assert_eq!(ev["requested"], 2000);
    assert_eq!(ev["age_seconds"], 7200);
    assert_eq!(ev["scheduler"], "default-scheduler");
    let kept: Vec<&str> = plan.kept.iter().map(|k| k.uid.as_str()).collect();
    assert_eq!(kept, ["r2", "r3", "r4"], "a plain failure is not a rejection");
    assert_eq!(plan_failed_pods(&snap, 0).delete.len(), 2);
}

#[test]
fn recheck_keeps_only_what_is_still_judged_so() {
    let snap = snapshot(vec![executor("e1", 1, "Failed"), executor("e2", 2, "Failed")]);
    let plan = plan_orphans(&snap, &Settings::default(), false);
    // e2 was recreated (another uid), e1 is unchanged.
    let fresh = snapshot(vec![executor("e1", 1, "Failed"), executor("e2-new", 2, "Failed")]);
    let (kept, skipped) = recheck(&plan, &plan_orphans(&fresh, &Settings::default(), false));
    assert_eq!(kept.delete.iter().map(|c| c.uid.as_str()).collect::<Vec<_>>(), ["e1"]);
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].target.uid.as_deref(), Some("e2"));
    assert_eq!(skipped[0].result, ActionResult::Skipped);
    assert!(skipped[0].detail.as_deref().unwrap_or("").contains("re-check"));
}
