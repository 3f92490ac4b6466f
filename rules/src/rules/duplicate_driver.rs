//! `duplicate-driver`: two or more drivers of one Spark application are alive at once, one of
//! them on this node.
//!
//! One application must have one driver: two drivers of it write the same output, commit the
//! same tables and ask for executors twice. It happens when whatever recreates drivers cannot
//! see the old one die: a driver run as a Kubernetes Job (Banzai Cloud's Spark fork) is
//! recreated by the Job controller when its node goes `NotReady`, while the old driver may
//! still run on the cut-off node; the old pod shows `Unknown` or stays `Terminating` because
//! its kubelet cannot confirm anything (docs/rules/duplicate-driver.md, "Cause"). A
//! submission retried after a client timeout can also leave two (a POST that timed out on the
//! client may still have created the pod).
//!
//! Drivers are of one application when they share namespace and `spark-app-selector`, or,
//! for spark-operator, namespace, `sparkoperator.k8s.io/app-name` and
//! `sparkoperator.k8s.io/submission-id` (the same run; another submission id is an earlier run,
//! which the operator replaces on purpose). Inputs: `ApiLookups::app_drivers` (every driver
//! pod of the applications with a driver here, wherever it runs) and this node's pods. A driver
//! counts while it is not `Succeeded`/`Failed`, including `Unknown` and pods being deleted: a
//! driver on a lost node is exactly that. Critical: one finding per application, on the driver
//! that runs on this node.

use serde_json::{Map, Value};

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, PodInfo};
use crate::spark::{
    self, APP_SELECTOR, OPERATOR_APP_NAME, OPERATOR_SUBMISSION_ID, alive_drivers, app_key,
    non_empty_label as non_empty, run_key,
};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("duplicate-driver");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Two drivers of one Spark application are alive",
    severity: Severity::Critical,
    looks_at: "driver pods",
    fires_when: "two or more unfinished drivers of one application (same spark-app-selector, or same operator app and submission id), one of them on this node",
    event_reason: "DuplicateDriver",
    needs: Needs {
        all: &[One(Source::Pods)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it reads driver pods through the API (or a pod list), nothing of the kubelet",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: None,
};

/// Groups of drivers of one application (connected by either key), each with what matched.
fn groups<'a>(drivers: &[&'a PodInfo]) -> Vec<(Vec<&'a PodInfo>, Vec<&'static str>)> {
    let n = drivers.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut by_app = vec![false; n];
    let mut by_run = vec![false; n];
    for i in 0..n {
        for j in i + 1..n {
            let same_app = app_key(drivers[i]).is_some() && app_key(drivers[i]) == app_key(drivers[j]);
            let same_run = run_key(drivers[i]).is_some() && run_key(drivers[i]) == run_key(drivers[j]);
            if same_app || same_run {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[b] = a;
                for k in [i, j] {
                    by_app[k] |= same_app;
                    by_run[k] |= same_run;
                }
            }
        }
    }
    let mut out: Vec<(usize, Vec<&PodInfo>, Vec<&'static str>)> = Vec::new();
    for i in 0..n {
        let r = root(&mut parent, i);
        let idx = match out.iter().position(|(root, _, _)| *root == r) {
            Some(idx) => idx,
            None => {
                out.push((r, Vec::new(), Vec::new()));
                out.len() - 1
            }
        };
        let group = &mut out[idx];
        group.1.push(drivers[i]);
        for (flag, word) in [(by_app[i], APP_SELECTOR), (by_run[i], OPERATOR_SUBMISSION_ID)] {
            if flag && !group.2.contains(&word) {
                group.2.push(word);
            }
        }
    }
    out.into_iter()
        .filter(|(_, members, _)| members.len() >= 2)
        .map(|(_, members, matched)| (members, matched))
        .collect()
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    let on_this_node = |d: &PodInfo| d.node_name.as_deref() == Some(snap.node.as_str()) || snap.pod(&d.uid).is_some();
    let drivers = alive_drivers(snap);
    let mut findings = Vec::new();
    for (mut members, matched_by) in groups(&drivers) {
        // Oldest first; no creation time last.
        members.sort_by(|a, b| {
            (a.created_at.is_none(), a.created_at, &a.name).cmp(&(b.created_at.is_none(), b.created_at, &b.name))
        });
        let Some(local) = members.iter().copied().find(|d| on_this_node(d)) else {
            continue;
        };
        let oldest = members[0];
        let app = non_empty(local, APP_SELECTOR)
            .or_else(|| non_empty(local, OPERATOR_APP_NAME))
            .unwrap_or("(unnamed)");
        let mut app_ids: Vec<&str> = members.iter().filter_map(|d| non_empty(d, APP_SELECTOR)).collect();
        app_ids.dedup();
        let describe = |d: &PodInfo| {
            let mut s = format!("{} (node {}", d.display(), d.node_name.as_deref().unwrap_or("none"));
            if on_this_node(d) {
                s.push_str(", this node");
            }
            s.push_str(&format!(", {}", d.phase));
            if d.deleting {
                s.push_str(", being deleted");
            }
            s.push(')');
            s
        };
        let listed: Vec<Value> = members
            .iter()
            .map(|d| {
                let mut m = Map::new();
                let fields: [(&str, Value); 8] = [
                    ("pod", d.display().into()),
                    ("uid", d.uid.clone().into()),
                    ("node", d.node_name.clone().into()),
                    ("phase", d.phase.clone().into()),
                    ("created_at", d.created_at.into()),
                    ("deleting", d.deleting.into()),
                    ("on_this_node", on_this_node(d).into()),
                    ("owner", d.controller().map(|o| format!("{}/{}", o.kind, o.name)).into()),
                ];
                for (k, v) in fields {
                    if !v.is_null() {
                        m.insert(k.into(), v);
                    }
                }
                Value::Object(m)
            })
            .collect();
        let operator = non_empty(local, OPERATOR_APP_NAME);
        let job = members
            .iter()
            .find_map(|d| d.controller().filter(|o| o.kind == "Job"))
            .map(|o| o.name.as_str());
        let which = match (operator, job) {
            (Some(name), _) => format!(
                "spark-operator: kubectl get sparkapplication -n {} {name} -o jsonpath='{{.status.driverInfo.podName}} {{.status.submissionID}}'",
                local.namespace
            ),
            (None, Some(job)) => format!(
                "Job {job} considers its newest pod current: kubectl get pods -n {} -l job-name={job} \
                 --sort-by=.metadata.creationTimestamp",
                local.namespace
            ),
            (None, None) => "for plain spark-submit, the one your submitter is waiting on".to_string(),
        };
        let remedy = format!(
            "find the driver the cluster manager considers current ({which}), then delete the other one, usually the \
             older: kubectl delete pod -n {} {}. A driver on a node that cannot reach the API server stays \
             Terminating until the node is back; force-delete it (--force --grace-period=0) only once that node is \
             powered off or fenced, since the old driver may still be running and writing the same output. To \
             prevent a repeat, give the driver a ReadWriteOnce volume: a second driver cannot start while the first \
             holds it",
            oldest.namespace, oldest.name
        );
        findings.push(
            Finding::new(
                ID,
                Severity::Critical,
                Subject::pod(local),
                format!(
                    "{} drivers of Spark application {app} are alive at once: {}",
                    members.len(),
                    members.iter().map(|d| describe(d)).collect::<Vec<_>>().join(", ")
                ),
                remedy,
            )
            .with("app_id", non_empty(local, APP_SELECTOR))
            .with("app_ids", (app_ids.len() > 1).then_some(app_ids))
            .with("app_name", non_empty(local, spark::APP_NAME))
            .with("matched_by", matched_by)
            .with("operator_app_name", operator)
            .with("submission_id", non_empty(local, OPERATOR_SUBMISSION_ID))
            .with("driver_count", members.len())
            .with("local_driver", local.display())
            .with("oldest_driver", oldest.display())
            .with("drivers", listed),
        );
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{NOW, SnapshotBuilder, by_operator, spark_driver};
    use crate::snapshot::OwnerRef;

    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";

    fn driver(uid: &str, app: &str, node: &str, phase: &str, created_ago: i64) -> PodInfo {
        let mut d = spark_driver(uid, app, "etl", phase);
        d.node_name = Some(node.into());
        d.created_at = Some(NOW - created_ago);
        d
    }

    #[test]
    fn fires_for_two_alive_drivers_with_one_here() {
        let here = driver("new", APP, "node-a", "Running", 300);
        let mut lost = driver("old", APP, "node-b", "Unknown", 7200);
        lost.deleting = true;
        let cases: Vec<(&str, Vec<PodInfo>, Vec<PodInfo>, usize)> = vec![
            ("partition", vec![here.clone()], vec![here.clone(), lost.clone()], 1),
            ("only one", vec![here.clone()], vec![here.clone()], 0),
            (
                "the other finished",
                vec![here.clone()],
                vec![here.clone(), driver("old", APP, "node-b", "Failed", 7200)],
                0,
            ),
            (
                "neither here",
                vec![],
                vec![
                    driver("x", APP, "node-c", "Running", 10),
                    driver("y", APP, "node-b", "Running", 20),
                ],
                0,
            ),
            (
                "other application",
                vec![here.clone()],
                vec![here.clone(), driver("z", "spark-other", "node-b", "Running", 20)],
                0,
            ),
            ("here only in the app list", vec![], vec![here.clone(), lost.clone()], 1),
        ];
        for (name, local, app_drivers, want) in cases {
            let snap = SnapshotBuilder::spark_node(&local)
                .with_app_drivers(APP, &app_drivers)
                .build();
            assert_eq!(
                crate::rules::testkit::judged(check, &snap, &Settings::default()).len(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn evidence_names_both_and_the_older() {
        let here = driver("new", APP, "node-a", "Running", 300);
        let mut lost = driver("old", APP, "node-b", "Unknown", 7200);
        lost.deleting = true;
        lost.node_name = None;
        let job = OwnerRef {
            kind: "Job".into(),
            name: "etl-hourly".into(),
            uid: "j1".into(),
            controller: true,
        };
        lost.owner_refs.push(job.clone());
        let mut here = here;
        here.owner_refs.push(job);
        let snap = SnapshotBuilder::spark_node(std::slice::from_ref(&here))
            .with_app_drivers(APP, &[here.clone(), lost])
            .build();
        let f = &crate::rules::testkit::judged(check, &snap, &Settings::default())[0];
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.subject.uid.as_deref(), Some("new"));
        assert_eq!(f.evidence["app_id"], APP);
        assert_eq!(f.evidence["matched_by"], serde_json::json!(["spark-app-selector"]));
        assert_eq!(f.evidence["oldest_driver"], "spark-jobs/etl-driver");
        assert_eq!(f.evidence["drivers"][0]["uid"], "old");
        assert_eq!(f.evidence["drivers"][0]["deleting"], true);
        assert_eq!(f.evidence["drivers"][1]["on_this_node"], true);
        assert_eq!(f.evidence["drivers"][0]["owner"], "Job/etl-hourly");
        assert!(f.evidence["drivers"][0].get("node").is_none());
        assert!(
            f.summary.contains("(node none, Unknown, being deleted)"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("kubectl delete pod -n spark-jobs etl-driver"));
        assert!(
            f.remedy.contains(
                "Job etl-hourly considers its newest pod current: kubectl get pods -n spark-jobs -l job-name=etl-hourly"
            ),
            "{}",
            f.remedy
        );
    }

    #[test]
    fn spark_operator_runs() {
        // Two submissions of one run (different app ids), and an earlier run that is not a duplicate.
        let a = by_operator(driver("a", "spark-aaa", "node-a", "Running", 100), "etl", "sub-2");
        let b = by_operator(driver("b", "spark-bbb", "node-b", "Running", 90), "etl", "sub-2");
        let earlier = by_operator(driver("c", "spark-ccc", "node-b", "Running", 5000), "etl", "sub-1");
        let snap = SnapshotBuilder::spark_node(std::slice::from_ref(&a))
            .with_app_drivers("spark-aaa", std::slice::from_ref(&a))
            .with_app_drivers("spark-bbb", &[b])
            .with_app_drivers("spark-ccc", &[earlier])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].evidence["driver_count"], 2);
        assert_eq!(f[0].evidence["matched_by"], serde_json::json!([OPERATOR_SUBMISSION_ID]));
        assert_eq!(f[0].evidence["app_ids"], serde_json::json!(["spark-aaa", "spark-bbb"]));
        assert_eq!(f[0].evidence["submission_id"], "sub-2");
        assert!(f[0].remedy.contains("kubectl get sparkapplication -n spark-jobs etl"));
    }

    #[test]
    fn unlabelled_drivers_are_not_grouped() {
        let mut a = driver("a", "", "node-a", "Running", 10);
        let mut b = driver("b", "", "node-b", "Running", 10);
        a.labels.remove("spark-app-selector");
        b.labels.insert("spark-app-selector".into(), String::new());
        a.created_at = None;
        let snap = SnapshotBuilder::spark_node(std::slice::from_ref(&a))
            .with_app_drivers("", &[a, b])
            .build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }
}
