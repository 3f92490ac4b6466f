//! `orphaned-executor`: a Spark executor on this node whose driver no longer needs it.
//!
//! An executor only works for its driver. When the driver pod is gone, was recreated under the
//! same name with another UID, or has finished, the executor's CPUs, memory and local disk are
//! held for nothing. Kubernetes cleans up only in two cases (docs/rules/orphaned-executor.md,
//! "Cause"): the garbage collector deletes executors whose owner reference names a deleted
//! driver *object* (not one that merely exited), and a driver that stops cleanly deletes its
//! executors by label when `spark.kubernetes.executor.deleteOnTermination` is true (apache/spark
//! `resource-managers/kubernetes/core/src/main/scala/org/apache/spark/`: the owner reference in
//! `deploy/k8s/features/BasicExecutorFeatureStep.scala`, the deletion in `stop` of
//! `scheduler/cluster/k8s/KubernetesClusterSchedulerBackend.scala`). Everything else stays:
//! client-mode executors without an owner (SPARK-25295), executors of a driver that was killed or
//! whose node was lost, kept `Error` executors whose emptyDir still holds their shuffle data.
//!
//! The agent looks up each executor's driver ([`DriverLookup`](crate::snapshot::DriverLookup) in
//! `ApiLookups::drivers`).
//! Judged: a non-terminal executor (not being deleted), and a finished one that still holds
//! local data (scratch dirs measured under its emptyDir, or, when the dirs were not measured,
//! an emptyDir `spark-local-dir-*` volume). Orphaned when the lookup says the driver is gone,
//! replaced, or found but not this executor's (another application's pod at the driver's
//! address, another spark-operator run), or finished longer than `orphan_grace_seconds` ago
//! (a finished driver with no finish time counts as finished when seen). `External` and
//! `Unknown` lookups, and executors with no lookup, are not judged.
//!
//! Critical when a still-running executor holds exclusive CPUs in the CPU manager checkpoint
//! (whole cores no one else can use), warning otherwise.
//!
//! The judgement is [`crate::facts::orphaned_executors`], which `orphaned-local-dir`, the
//! `nodemedic_orphaned_executors` gauge and `repair orphans` share.

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::facts::{DriverState, Orphan};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::{RuleGauge, RuleInfo, SPARK_EXECUTOR_ORPHANS, count_findings};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, PodInfo};
use crate::spark::{self, OPERATOR_APP_NAME, OPERATOR_SUBMISSION_ID, lookup_str, spark_container};
use crate::text::{LISTED, human_bytes, kubectl_delete};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("orphaned-executor");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "A Spark executor outlives its driver",
    severity: Severity::Warning,
    looks_at: "pods on the node, their drivers, local dirs, checkpoint",
    fires_when: "a Spark executor (running, or finished but keeping local data) whose driver pod is gone, replaced (other UID, another application or operator run) or finished for longer than the grace period (critical when it still runs on exclusive CPUs)",
    event_reason: "OrphanedExecutor",
    needs: Needs {
        all: &[One(Source::Pods)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it judges Spark pods and their drivers through the API (or a pod list), whose fields mean the same whichever kubelet runs; the exclusive CPUs that make a finding critical are read from `cpu_manager_state` in whichever layout it has",
    ),
    check,
    condition: Some(SPARK_EXECUTOR_ORPHANS),
    gauge: Some(RuleGauge {
        name: "orphaned_executors",
        help: "Spark executor pods on this node whose driver is gone, replaced or long finished.",
        value: count_findings,
    }),
    next_judgement: Some(crate::facts::orphan_grace_turn),
};

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    facts.orphans.iter().map(|o| finding(&snap.node, o)).collect()
}

fn finding(node: &str, o: &Orphan<'_>) -> Finding {
    let exec = o.executor;
    let container = spark_container(exec);
    let running = !exec.is_terminal();
    let severity = if running && o.exclusive_cpus.is_some() {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let app = exec.spark_app().filter(|a| !a.is_empty());
    let what = if running {
        // A sidecar (istio-proxy, a log shipper) keeps a pod up after its Spark JVM has exited.
        let jvm_exited = container.is_some_and(|c| c.state.as_deref() == Some("terminated"));
        let others_up = exec.containers.iter().any(|c| {
            Some(c.name.as_str()) != container.map(|x| x.name.as_str()) && c.state.as_deref() != Some("terminated")
        });
        if jvm_exited && others_up {
            format!(
                "is still {}, although its Spark container has exited (another container keeps the pod up)",
                exec.phase
            )
        } else {
            format!("is still {}", exec.phase)
        }
    } else {
        let size = if o.local.measured {
            format!(" {} of", human_bytes(o.local.bytes))
        } else {
            String::new()
        };
        format!("has finished ({}) but keeps{size} local data", exec.phase)
    };
    let summary = format!(
        "Spark executor {}{} {what}: {}",
        exec.display(),
        app.map(|a| format!(" of application {a}")).unwrap_or_default(),
        o.reason
    );

    // `repair orphans` leaves orphans that have not finished unless told otherwise.
    let include = if running { " --include-running" } else { "" };
    let mut remedy = format!(
        "kubectl nodemedic repair {node} orphans{include} (shows the plan), then kubectl nodemedic repair {node} \
         orphans{include} --apply --yes (deletes each orphan with its UID as a precondition; needs pod delete, \
         components/pod-repairs)"
    );
    if !running && o.local.held() {
        remedy.push_str("; deleting the pod object also removes its emptyDir local dirs");
    }
    remedy.push_str(&format!(
        "; or by hand, first check it is still the same pod (UID {}): kubectl get pod -n {} {} -o \
         jsonpath='{{.metadata.uid}}', then {}",
        exec.uid,
        exec.namespace,
        exec.name,
        kubectl_delete(exec)
    ));
    if let Some(app) = app.filter(|_| matches!(o.state, DriverState::Gone | DriverState::Finished)) {
        remedy.push_str(&format!(
            " (or every executor of the application at once: kubectl delete pod -n {} -l spark-app-selector={app},spark-role=executor)",
            exec.namespace
        ));
    }

    let found = o.found;
    Finding::new(ID, severity, Subject::pod(exec), summary, remedy)
        .with("executor", exec.display())
        .with("executor_uid", exec.uid.as_str())
        .with("app_id", app)
        .with("app_name", exec.label(spark::APP_NAME))
        .with("driver_state", o.state.as_str())
        .with("reason", o.reason.as_str())
        .with("lookup_method", o.lookup.map(lookup_str))
        .with("driver_expected", o.expected.clone())
        .with("expected_driver_uid", o.expected_driver_uid.clone())
        .with("driver", found.map(PodInfo::display))
        .with("driver_uid", found.map(|d| d.uid.clone()))
        .with("driver_node", found.and_then(|d| d.node_name.clone()))
        .with("driver_phase", found.map(|d| d.phase.clone()))
        .with("driver_finished_seconds_ago", o.finished_seconds)
        .with("driver_url", exec.spark_driver_url.clone())
        .with("executor_phase", exec.phase.as_str())
        .with("executor_container_state", container.and_then(|c| c.state.clone()))
        .with("executor_exit_code", container.and_then(|c| c.exit_code))
        .with("exclusive_cpus", o.exclusive_cpus.as_ref().map(|c| c.to_string()))
        .with(
            "local_dir_volumes",
            (!o.local.empty_dir_volumes.is_empty()).then(|| o.local.empty_dir_volumes.clone()),
        )
        .with(
            "local_dirs",
            (!o.local.dirs.is_empty()).then(|| {
                o.local
                    .dirs
                    .iter()
                    .take(LISTED)
                    .map(|d| d.path.clone())
                    .collect::<Vec<_>>()
            }),
        )
        .with("local_dir_bytes", o.local.measured.then_some(o.local.bytes))
        .with("submission_id", exec.label(OPERATOR_SUBMISSION_ID))
        .with("operator_app_name", exec.label(OPERATOR_APP_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{
        NOW, SnapshotBuilder, by_operator, empty_dir_scratch, owned_by, spark_driver, spark_executor, spark_pod,
    };
    use crate::snapshot::{ContainerInfo, DriverLookup, LookupMethod};

    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";

    fn found(by: LookupMethod, driver: &PodInfo) -> DriverLookup {
        DriverLookup::Found {
            by,
            driver: std::sync::Arc::new(driver.clone()),
        }
    }

    fn finished_driver(secs_ago: Option<i64>) -> PodInfo {
        let mut d = spark_driver("d1", APP, "etl", "Succeeded");
        d.node_name = Some("node-b".into());
        d.finished_at = secs_ago.map(|s| NOW - s);
        d
    }

    /// (executor phase, lookup) -> expected driver_state, or None when silent.
    #[test]
    fn verdicts_by_lookup() {
        let driver = spark_driver("d1", APP, "etl", "Running");
        let mut other_app = spark_driver("x1", "spark-0000", "other", "Running");
        other_app.pod_ip = Some("10.0.0.7".into());
        let cases: Vec<(&str, &str, DriverLookup, Option<&str>)> = vec![
            (
                "running driver",
                "Running",
                found(LookupMethod::OwnerReference, &driver),
                None,
            ),
            (
                "gone",
                "Running",
                DriverLookup::Gone {
                    by: LookupMethod::OwnerReference,
                    expected: "spark-jobs/etl-driver (uid d1)".into(),
                },
                Some("gone"),
            ),
            (
                "replaced",
                "Running",
                DriverLookup::Replaced {
                    expected_uid: "d1".into(),
                    found: std::sync::Arc::new(spark_driver("d2", APP, "etl", "Running")),
                },
                Some("replaced"),
            ),
            (
                "finished long ago",
                "Running",
                found(LookupMethod::Labels, &finished_driver(Some(3600))),
                Some("finished"),
            ),
            (
                "finished within grace",
                "Running",
                found(LookupMethod::Labels, &finished_driver(Some(30))),
                None,
            ),
            (
                "finished, time unknown",
                "Pending",
                found(LookupMethod::Labels, &finished_driver(None)),
                Some("finished"),
            ),
            (
                "driver url led to another app",
                "Running",
                found(LookupMethod::DriverUrl, &other_app),
                Some("replaced"),
            ),
            (
                "external",
                "Running",
                DriverLookup::External {
                    url: "spark://CoarseGrainedScheduler@10.200.1.5:7078".into(),
                },
                None,
            ),
            (
                "unknown",
                "Running",
                DriverLookup::Unknown {
                    reason: "429 Too Many Requests".into(),
                },
                None,
            ),
        ];
        for (name, phase, lookup, want) in cases {
            let exec = owned_by(spark_executor("e1", APP, "etl", 1, phase), &driver);
            let snap = SnapshotBuilder::spark_node(&[exec]).with_driver("e1", lookup).build();
            let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
            let got = f
                .first()
                .map(|f| f.evidence["driver_state"].as_str().unwrap_or("-").to_string());
            assert_eq!(got.as_deref(), want, "{name}: {f:#?}");
        }
    }

    #[test]
    fn gone_driver_evidence_and_remedy() {
        let driver = spark_driver("d1", APP, "etl", "Running");
        let exec = owned_by(spark_executor("e1", APP, "etl", 3, "Running"), &driver);
        let snap = SnapshotBuilder::spark_node(&[exec])
            .with_driver(
                "e1",
                DriverLookup::Gone {
                    by: LookupMethod::OwnerReference,
                    expected: "spark-jobs/etl-driver (uid d1)".into(),
                },
            )
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        let f = &f[0];
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.subject.name.as_deref(), Some("etl-exec-3"));
        assert_eq!(f.evidence["executor"], "spark-jobs/etl-exec-3");
        assert_eq!(f.evidence["app_id"], APP);
        assert_eq!(f.evidence["lookup_method"], "owner_reference");
        assert_eq!(f.evidence["expected_driver_uid"], "d1");
        assert_eq!(f.evidence["executor_container_state"], "running");
        assert!(f.evidence.get("driver").is_none());
        assert!(f.evidence.get("local_dir_bytes").is_none(), "dirs not measured");
        assert!(
            f.remedy.starts_with(
                "kubectl nodemedic repair node-a orphans --include-running (shows the plan), then \
                 kubectl nodemedic repair node-a orphans --include-running --apply --yes (deletes each orphan with \
                 its UID as a precondition; needs pod delete, components/pod-repairs); or by hand, first check it is still the same \
                 pod (UID e1): kubectl get pod -n spark-jobs etl-exec-3 -o jsonpath='{.metadata.uid}', then \
                 kubectl delete pod -n spark-jobs etl-exec-3 (or every executor"
            ),
            "{}",
            f.remedy
        );
        assert!(
            f.remedy
                .ends_with(&format!("-l spark-app-selector={APP},spark-role=executor)"))
        );
        assert!(!f.remedy.contains("planned"));
    }

    #[test]
    fn running_orphan_with_exclusive_cpus_is_critical() {
        let exec = spark_executor("e1", APP, "etl", 1, "Running");
        let mut snap = SnapshotBuilder::static_node("0-1", &[("e1", "spark-kubernetes-executor", "2-5")])
            .with_pod_list(&[exec])
            .with_driver(
                "e1",
                DriverLookup::Gone {
                    by: LookupMethod::Labels,
                    expected: format!("a pod labelled spark-role=driver of {APP}"),
                },
            )
            .build();
        snap.pods.source = crate::snapshot::PodSource::Api;
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(f[0].evidence["exclusive_cpus"], "2-5");
    }

    #[test]
    fn finished_executors_count_only_with_local_data() {
        let driver = finished_driver(Some(7200));
        let failed = spark_executor("e1", APP, "etl", 1, "Failed");
        let mut clean = spark_executor("e2", APP, "etl", 2, "Failed");
        clean.local_dir_volumes.clear();
        let lookup = found(LookupMethod::Labels, &driver);
        let base = SnapshotBuilder::spark_node(&[failed.clone(), clean])
            .with_driver("e1", lookup.clone())
            .with_driver("e2", lookup);
        // Not measured: the emptyDir volume may hold data.
        let f = crate::rules::testkit::judged(check, &base.build(), &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].evidence["executor_uid"], "e1");
        assert_eq!(
            f[0].evidence["local_dir_volumes"],
            serde_json::json!(["spark-local-dir-1"])
        );

        // Measured: only dirs that are there count.
        let driver = finished_driver(Some(7200));
        let lookup = found(LookupMethod::Labels, &driver);
        let snap = SnapshotBuilder::spark_node(&[failed])
            .with_driver("e1", lookup.clone())
            .with_local_dirs(vec![empty_dir_scratch("e1", 3 << 30, Some(NOW - 7000))])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f[0].evidence["local_dir_bytes"], 3u64 << 30);
        assert_eq!(f[0].evidence["executor_exit_code"], 1);
        assert!(f[0].summary.contains("keeps 3.0 GiB of local data"), "{}", f[0].summary);
        assert!(f[0].remedy.contains("removes its emptyDir local dirs"));
        assert!(
            f[0].remedy
                .starts_with("kubectl nodemedic repair node-a orphans (shows the plan), then"),
            "a finished orphan needs no --include-running: {}",
            f[0].remedy
        );
        assert!(!f[0].remedy.contains("--include-running"));
        let spark_stopped_cleanly = SnapshotBuilder::spark_node(&[spark_executor("e1", APP, "etl", 1, "Failed")])
            .with_driver("e1", lookup)
            .with_local_dirs(vec![])
            .build();
        assert!(crate::rules::testkit::judged(check, &spark_stopped_cleanly, &Settings::default()).is_empty());
    }

    #[test]
    fn operator_runs_and_odd_pods() {
        let driver = by_operator(spark_driver("d2", APP, "etl", "Running"), "etl", "sub-2");
        let exec = by_operator(spark_executor("e1", APP, "etl", 1, "Running"), "etl", "sub-1");
        let snap = SnapshotBuilder::spark_node(&[exec])
            .with_driver("e1", found(LookupMethod::DriverUrl, &driver))
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f[0].evidence["driver_state"], "replaced");
        assert_eq!(f[0].evidence["submission_id"], "sub-1");
        assert_eq!(f[0].evidence["operator_app_name"], "etl");

        // No labels beyond the role, no times, no containers, no lookup: no panic, not judged.
        let mut bare = spark_pod("e9", "x", "executor", "", "Running");
        bare.labels.retain(|k, _| k == "spark-role");
        bare.containers.clear();
        bare.created_at = None;
        let snap = SnapshotBuilder::spark_node(&[bare.clone()]).build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
        let snap = SnapshotBuilder::spark_node(&[bare])
            .with_driver(
                "e9",
                DriverLookup::Gone {
                    by: LookupMethod::DriverUrl,
                    expected: "spark-jobs/x-driver".into(),
                },
            )
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert!(f[0].evidence.get("app_id").is_none());
        assert!(!f[0].remedy.contains("spark-app-selector="));
    }

    #[test]
    fn deleting_and_driver_pods_are_not_judged() {
        let mut exec = spark_executor("e1", APP, "etl", 1, "Running");
        exec.deleting = true;
        let driver = spark_driver("d1", APP, "etl", "Running");
        let gone = DriverLookup::Gone {
            by: LookupMethod::Labels,
            expected: "x".into(),
        };
        let snap = SnapshotBuilder::spark_node(&[exec, driver])
            .with_driver("e1", gone.clone())
            .with_driver("d1", gone)
            .build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }

    #[test]
    fn a_sidecar_keeping_the_pod_up_is_named() {
        let mut exec = spark_executor("e1", APP, "etl", 1, "Running");
        exec.containers[0].state = Some("terminated".into());
        exec.containers[0].exit_code = Some(1);
        exec.containers.push(ContainerInfo {
            name: "istio-proxy".into(),
            state: Some("running".into()),
            ..Default::default()
        });
        let snap = SnapshotBuilder::spark_node(&[exec])
            .with_driver("e1", found(LookupMethod::OwnerReference, &finished_driver(Some(2820))))
            .build();
        let f = &crate::rules::testkit::judged(check, &snap, &Settings::default())[0];
        assert!(
            f.summary.contains("although its Spark container has exited"),
            "{}",
            f.summary
        );
        assert!(f.summary.ends_with("finished (Succeeded) 47m ago"), "{}", f.summary);
        assert_eq!(f.evidence["executor_container_state"], "terminated");
        assert_eq!(f.evidence["executor_exit_code"], 1);
    }
}
