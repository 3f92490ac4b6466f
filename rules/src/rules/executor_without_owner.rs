//! `executor-without-owner`: Spark executors on this node that nothing will delete when their
//! driver dies.
//!
//! Spark gives executors an owner reference to the driver pod only when
//! `spark.kubernetes.driver.pod.name` is set. spark-submit sets it in cluster mode; in client
//! mode it stays unset unless the user sets it, and then the garbage collector has nothing to
//! go by: if the driver dies without stopping cleanly (killed, OOM, its node lost, a notebook
//! kernel restarted), its executors run on with no one to talk to (SPARK-25295, closed as "by
//! design"). This rule finds the risk before it happens; `orphaned-executor` finds it after.
//!
//! Fires for running or pending executors (`spark-role=executor`, not finished, not being
//! deleted) with no owner reference of kind `Pod`: the garbage collector acts on any owner
//! reference, controller or not, so an owner of another kind does not tie them to the driver
//! either. One finding per application (namespace and `spark-app-selector`), on its executor
//! with the lowest `spark-exec-id`, listing the others. Warning when the driver is (or was) a
//! pod in this cluster, where setting the driver pod name fixes it; info when the driver lookup
//! says it runs outside the cluster (`External`), where no owner reference is possible.

use std::collections::BTreeMap;

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{DriverLookup, NodeSnapshot, PodInfo};
use crate::spark::{self, is_executor, lookup_str};
use crate::text::LISTED;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("executor-without-owner");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Spark executors have no owner reference to their driver",
    severity: Severity::Warning,
    looks_at: "executor pods, their drivers",
    fires_when: "running executors have no owner reference of kind Pod, so they will be left behind when their driver dies (info when the driver runs outside the cluster)",
    event_reason: "ExecutorWithoutOwner",
    needs: Needs {
        all: &[One(Source::Pods)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it reads the executors' owner references and labels through the API (or a pod list), nothing of the kubelet",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: None,
};

/// Where the executors' driver is, from the lookups of their executors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Location {
    /// A pod in this cluster (found, or gone / replaced: it was one).
    Pod,
    /// Outside the cluster.
    External,
    /// Not looked up, or the lookup failed.
    Unknown,
}

impl Location {
    fn as_str(self) -> &'static str {
        match self {
            Location::Pod => "pod",
            Location::External => "external",
            Location::Unknown => "unknown",
        }
    }
}

/// Sort key: the numeric `spark-exec-id`, then the name.
fn exec_order(pod: &PodInfo) -> (u64, String) {
    let id = pod
        .label(spark::EXEC_ID)
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    (id, pod.name.clone())
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    let mut apps: BTreeMap<(&str, &str), Vec<&PodInfo>> = BTreeMap::new();
    for p in
        snap.pods.bound.iter().filter(|p| {
            is_executor(p) && !p.is_terminal() && !p.deleting && !p.owner_refs.iter().any(|o| o.kind == "Pod")
        })
    {
        apps.entry((p.namespace.as_str(), p.spark_app().unwrap_or("")))
            .or_default()
            .push(p);
    }
    let mut findings = Vec::new();
    for ((namespace, app), mut execs) in apps {
        execs.sort_by_key(|p| exec_order(p));
        let first = execs[0];
        // The first decisive lookup among the executors: a pod beats outside beats unknown.
        let lookups: Vec<&DriverLookup> = execs
            .iter()
            .filter_map(|e| snap.api.lookups.drivers.get(&e.uid))
            .collect();
        let found = lookups.iter().find_map(|l| match l {
            DriverLookup::Found { by, driver } => Some((*by, driver.as_ref())),
            _ => None,
        });
        let location = if found.is_some()
            || lookups
                .iter()
                .any(|l| matches!(l, DriverLookup::Gone { .. } | DriverLookup::Replaced { .. }))
        {
            Location::Pod
        } else if lookups.iter().any(|l| matches!(l, DriverLookup::External { .. })) {
            Location::External
        } else {
            Location::Unknown
        };
        let lookup_method = found.map(|(by, _)| lookup_str(by)).or_else(|| {
            lookups.iter().find_map(|l| match l {
                DriverLookup::Gone { by, .. } => Some(lookup_str(*by)),
                _ => None,
            })
        });
        let driver = found.map(|(_, d)| d);
        let url = execs.iter().find_map(|e| e.spark_driver_url.as_deref());
        let app_shown = if app.is_empty() { "(no spark-app-selector)" } else { app };
        let other_owners: Vec<String> = execs
            .iter()
            .flat_map(|e| e.owner_refs.iter().map(|o| format!("{}/{}", o.kind, o.name)))
            .collect();

        let (severity, remedy) = match location {
            Location::External => (
                Severity::Info,
                format!(
                    "the driver runs outside the cluster, so no owner reference can tie the executors to it: stop the \
                     SparkContext cleanly (spark.stop()) so that it deletes its executors \
                     (spark.kubernetes.executor.deleteOnTermination=true, the default), and once the application is over \
                     delete what is left: kubectl delete pod -n {namespace} -l spark-app-selector={app_shown},spark-role=executor; \
                     or run the driver in a pod with spark.kubernetes.driver.pod.name set"
                ),
            ),
            _ => (
                Severity::Warning,
                format!(
                    "in client mode set spark.kubernetes.driver.pod.name to the name of the pod the driver runs in \
                     (for example --conf spark.kubernetes.driver.pod.name=$(hostname) when the pod's hostname is its \
                     name){}: Spark then gives every executor an owner reference to the driver pod, and the garbage \
                     collector deletes them when the driver pod is deleted (SPARK-25295). Executors already running \
                     keep no owner until the application restarts",
                    driver.map(|d| format!(", here {}", d.name)).unwrap_or_default()
                ),
            ),
        };
        let where_driver = match (location, driver) {
            (_, Some(d)) => format!("its driver is pod {}", d.display()),
            (Location::External, _) => format!("its driver runs outside the cluster ({})", url.unwrap_or("?")),
            (Location::Pod, None) => "its driver pod is already gone (see orphaned-executor)".to_string(),
            _ => "its driver was not looked up".to_string(),
        };
        findings.push(
            Finding::new(
                ID,
                severity,
                Subject::pod(first),
                format!(
                    "{} executor(s) of Spark application {app_shown} in {namespace} have no owner reference to their \
                     driver and will be left behind if it dies: {where_driver}",
                    execs.len()
                ),
                remedy,
            )
            .with("app_id", (!app.is_empty()).then_some(app))
            .with("app_name", first.label(spark::APP_NAME))
            .with("namespace", namespace)
            .with("executors", execs.len())
            .with(
                "executor_pods",
                execs.iter().take(LISTED).map(|e| e.name.clone()).collect::<Vec<_>>(),
            )
            .with("driver_location", location.as_str())
            .with("lookup_method", lookup_method)
            .with("driver", driver.map(PodInfo::display))
            .with("driver_uid", driver.map(|d| d.uid.clone()))
            .with("driver_url", url)
            .with("other_owners", (!other_owners.is_empty()).then_some(other_owners)),
        );
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, owned_by, spark_driver, spark_executor};
    use crate::snapshot::{LookupMethod, OwnerRef};

    const APP: &str = "spark-application-1700000000000";

    fn client_exec(uid: &str, id: u32) -> PodInfo {
        let mut e = spark_executor(uid, APP, "notebook-3f2a", id, "Running");
        e.spark_driver_url = Some("spark://CoarseGrainedScheduler@10.42.3.17:7078".into());
        e
    }

    #[test]
    fn one_finding_per_application() {
        let driver = spark_driver("d1", APP, "notebook-3f2a", "Running");
        let mut finished = client_exec("e5", 5);
        finished.phase = "Failed".into();
        let mut deleting = client_exec("e6", 6);
        deleting.deleting = true;
        let pods = vec![
            client_exec("e10", 10),
            client_exec("e2", 2),
            finished,
            deleting,
            owned_by(spark_executor("c1", "spark-cluster", "etl", 1, "Running"), &driver),
            spark_executor("o1", "spark-other", "other", 1, "Pending"),
        ];
        let snap = SnapshotBuilder::spark_node(&pods)
            .with_driver(
                "e2",
                DriverLookup::Found {
                    by: LookupMethod::DriverUrl,
                    driver: std::sync::Arc::new(driver),
                },
            )
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 2, "{f:#?}");
        let nb = &f[0];
        assert_eq!(nb.evidence["app_id"], APP);
        assert_eq!(nb.severity, Severity::Warning);
        assert_eq!(
            nb.subject.name.as_deref(),
            Some("notebook-3f2a-exec-2"),
            "lowest exec id"
        );
        assert_eq!(nb.evidence["executors"], 2);
        assert_eq!(
            nb.evidence["executor_pods"],
            serde_json::json!(["notebook-3f2a-exec-2", "notebook-3f2a-exec-10"])
        );
        assert_eq!(nb.evidence["driver_location"], "pod");
        assert_eq!(nb.evidence["lookup_method"], "driver_url");
        assert_eq!(nb.evidence["driver"], "spark-jobs/notebook-3f2a-driver");
        assert!(nb.remedy.contains("spark.kubernetes.driver.pod.name"));
        assert!(nb.remedy.contains(", here notebook-3f2a-driver"));
        assert_eq!(f[1].evidence["app_id"], "spark-other");
        assert_eq!(f[1].evidence["driver_location"], "unknown");
    }

    #[test]
    fn external_driver_is_info() {
        let snap = SnapshotBuilder::spark_node(&[client_exec("e1", 1)])
            .with_driver(
                "e1",
                DriverLookup::External {
                    url: "spark://CoarseGrainedScheduler@10.42.3.17:7078".into(),
                },
            )
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].evidence["driver_location"], "external");
        assert!(
            f[0].remedy
                .contains(&format!("-l spark-app-selector={APP},spark-role=executor"))
        );
    }

    #[test]
    fn owners_and_odd_labels() {
        // A non-controller Pod owner is enough for the garbage collector.
        let mut e = client_exec("e1", 1);
        e.owner_refs.push(OwnerRef {
            kind: "Pod".into(),
            name: "notebook-3f2a-driver".into(),
            uid: "d1".into(),
            controller: false,
        });
        // An owner of another kind is not the driver.
        let mut other = client_exec("e2", 2);
        other.owner_refs.push(OwnerRef {
            kind: "ConfigMap".into(),
            name: "keep".into(),
            uid: "cm".into(),
            controller: false,
        });
        // No app id, no exec id.
        let mut bare = client_exec("e3", 3);
        bare.labels.retain(|k, _| k == "spark-role");
        bare.spark_driver_url = None;
        let snap = SnapshotBuilder::spark_node(&[e, other, bare]).build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 2, "{f:#?}");
        assert!(f[0].evidence.get("app_id").is_none());
        assert!(f[0].summary.contains("(no spark-app-selector)"));
        assert_eq!(f[1].evidence["other_owners"], serde_json::json!(["ConfigMap/keep"]));
        assert_eq!(f[1].evidence["executors"], 1);
    }
}
