//! What Spark and spark-operator write on their pods, and how to tell the pods apart.
//!
//! Label keys and container names as Spark sets them (apache/spark
//! `resource-managers/kubernetes/core/src/main/scala/org/apache/spark/deploy/k8s/Constants.scala`)
//! and as spark-operator adds them (kubeflow/spark-operator `pkg/common`), with the small pod
//! classifications the rules and the agent share: driver or executor, the Spark container, the
//! scheduler, the words a driver lookup is reported with, and which drivers belong to one
//! application ([`same_application`]).

use crate::snapshot::{ContainerInfo, LookupMethod, NodeSnapshot, PodInfo, PodPhase};

pub use crate::snapshot::SparkRole;

/// The role label: [`DRIVER`] or [`EXECUTOR`] (read as a [`SparkRole`] by `PodInfo::spark_role`).
pub const ROLE: &str = "spark-role";
/// The value of [`ROLE`] on a driver pod.
pub const DRIVER: &str = "driver";
/// The value of [`ROLE`] on an executor pod.
pub const EXECUTOR: &str = "executor";
/// The application id label (`spark-<32 hex digits>`), on the driver and its executors.
pub const APP_SELECTOR: &str = "spark-app-selector";
/// The executor id label (`1`, `2`, ...), on executors.
pub const EXEC_ID: &str = "spark-exec-id";
/// The Spark version label (Spark 3.3 and later).
pub const VERSION: &str = "spark-version";
/// The application name label (from `spark.app.name`).
pub const APP_NAME: &str = "spark-app-name";

/// spark-operator's label with the SparkApplication's name.
pub const OPERATOR_APP_NAME: &str = "sparkoperator.k8s.io/app-name";
/// spark-operator's label with the run's submission id.
pub const OPERATOR_SUBMISSION_ID: &str = "sparkoperator.k8s.io/submission-id";
/// spark-operator's mark (`"true"`) on the pods of the applications it runs.
pub const OPERATOR_LAUNCHED: &str = "sparkoperator.k8s.io/launched-by-spark-operator";

/// The driver's container (unless a pod template names another).
pub const DRIVER_CONTAINER: &str = "spark-kubernetes-driver";
/// The executor's container since Spark 3.0 (unless a pod template names another).
pub const EXECUTOR_CONTAINER: &str = "spark-kubernetes-executor";
/// The executor's container before Spark 3.0.
pub const LEGACY_EXECUTOR_CONTAINER: &str = "executor";

/// Whether `pod` is a Spark executor (`spark-role=executor`).
pub fn is_executor(pod: &PodInfo) -> bool {
    pod.spark_role() == Some(SparkRole::Executor)
}

/// Whether `pod` is a Spark driver (`spark-role=driver`).
pub fn is_driver(pod: &PodInfo) -> bool {
    pod.spark_role() == Some(SparkRole::Driver)
}

/// Whether `pod` is a Spark driver bound to `node` that waits to start there: `Pending`, not
/// being deleted, no container running (`driver-blocked-by-partition`, and the agent's choice
/// of whose Events to read for it).
pub fn driver_waits_to_start(pod: &PodInfo, node: &str) -> bool {
    is_driver(pod)
        && pod.node_name.as_deref() == Some(node)
        && pod.phase == PodPhase::Pending
        && !pod.deleting
        && !pod.containers.iter().any(|c| c.state.as_deref() == Some("running"))
}

/// The unfinished drivers the snapshot knows of (every driver of the applications with a driver
/// here, and this node's), once per UID.
pub(crate) fn alive_drivers(snap: &NodeSnapshot) -> Vec<&PodInfo> {
    let mut out: Vec<&PodInfo> = Vec::new();
    let local = snap.pods.bound.iter().filter(|p| is_driver(p));
    for d in snap
        .api
        .lookups
        .app_drivers
        .values()
        .flatten()
        .map(|d| &**d)
        .chain(local)
    {
        if !d.is_terminal() && !out.iter().any(|o| o.uid == d.uid) {
            out.push(d);
        }
    }
    out
}

/// A label's value, when it is set and not empty.
pub(crate) fn non_empty_label<'a>(pod: &'a PodInfo, key: &str) -> Option<&'a str> {
    pod.label(key).filter(|v| !v.is_empty())
}

/// `(namespace, spark-app-selector)`: the application.
pub(crate) fn app_key(pod: &PodInfo) -> Option<(&str, &str)> {
    Some((pod.namespace.as_str(), non_empty_label(pod, APP_SELECTOR)?))
}

/// `(namespace, operator app name, submission id)`: one run of a SparkApplication.
pub(crate) fn run_key(pod: &PodInfo) -> Option<(&str, &str, &str)> {
    Some((
        pod.namespace.as_str(),
        non_empty_label(pod, OPERATOR_APP_NAME)?,
        non_empty_label(pod, OPERATOR_SUBMISSION_ID)?,
    ))
}

/// The UID of the Job that controls the pod (its controller owner reference of kind `Job`).
pub fn job_uid(pod: &PodInfo) -> Option<&str> {
    pod.controller()
        .filter(|o| o.kind == "Job" && !o.uid.is_empty())
        .map(|o| o.uid.as_str())
}

/// What ties two pods to one Spark application, if anything: the same namespace and
/// `spark-app-selector` ([`APP_SELECTOR`]); the same spark-operator run, namespace,
/// `sparkoperator.k8s.io/app-name` and `sparkoperator.k8s.io/submission-id`
/// ([`OPERATOR_SUBMISSION_ID`]); or the same controlling Job (`"job"`: a driver that a Job runs is
/// recreated from the Job's template when its pod is deleted). Missing or empty labels tie
/// nothing.
pub fn same_application(a: &PodInfo, b: &PodInfo) -> Option<&'static str> {
    if app_key(a).is_some() && app_key(a) == app_key(b) {
        Some(APP_SELECTOR)
    } else if run_key(a).is_some() && run_key(a) == run_key(b) {
        Some(OPERATOR_SUBMISSION_ID)
    } else if job_uid(a).is_some() && job_uid(a) == job_uid(b) && a.namespace == b.namespace {
        Some("job")
    } else {
        None
    }
}

/// The key a driver's application is listed under in `ApiLookups::app_drivers`: its
/// `spark-app-selector`, else, for a driver a Job runs, `job:<the Job's UID>`.
pub fn app_drivers_key(pod: &PodInfo) -> Option<String> {
    non_empty_label(pod, APP_SELECTOR)
        .map(str::to_string)
        .or_else(|| job_uid(pod).map(|uid| format!("job:{uid}")))
}

/// The Spark container of a pod (`spark-kubernetes-executor`, `executor` or
/// `spark-kubernetes-driver`), else its first container.
pub(crate) fn spark_container(pod: &PodInfo) -> Option<&ContainerInfo> {
    pod.containers
        .iter()
        .find(|c| {
            matches!(
                c.name.as_str(),
                EXECUTOR_CONTAINER | LEGACY_EXECUTOR_CONTAINER | DRIVER_CONTAINER
            )
        })
        .or_else(|| pod.containers.first())
}

/// `spec.schedulerName`, `default-scheduler` when unset.
pub(crate) fn scheduler_of(pod: &PodInfo) -> &str {
    pod.scheduler_name
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("default-scheduler")
}

/// The snake_case word of a lookup method (as it serializes).
pub(crate) fn lookup_str(by: LookupMethod) -> &'static str {
    match by {
        LookupMethod::OwnerReference => "owner_reference",
        LookupMethod::Labels => "labels",
        LookupMethod::DriverUrl => "driver_url",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::OwnerRef;

    fn pod(ns: &str, labels: &[(&str, &str)], job: Option<&str>) -> PodInfo {
        PodInfo {
            namespace: ns.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            owner_refs: job
                .map(|uid| OwnerRef {
                    kind: "Job".into(),
                    name: "etl".into(),
                    uid: uid.into(),
                    controller: true,
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn drivers_of_one_application_are_tied_by_labels_or_their_job() {
        let app = [(APP_SELECTOR, "spark-1")];
        let run = [(OPERATOR_APP_NAME, "etl"), (OPERATOR_SUBMISSION_ID, "s1")];
        let cases: [(&str, PodInfo, PodInfo, Option<&str>); 7] = [
            ("app id", pod("a", &app, None), pod("a", &app, None), Some(APP_SELECTOR)),
            (
                "app id, other namespace",
                pod("a", &app, None),
                pod("b", &app, None),
                None,
            ),
            (
                "operator run",
                pod("a", &run, None),
                pod("a", &run, None),
                Some(OPERATOR_SUBMISSION_ID),
            ),
            ("job", pod("a", &[], Some("j1")), pod("a", &[], Some("j1")), Some("job")),
            ("other job", pod("a", &[], Some("j1")), pod("a", &[], Some("j2")), None),
            (
                "empty labels",
                pod("a", &[(APP_SELECTOR, "")], None),
                pod("a", &[(APP_SELECTOR, "")], None),
                None,
            ),
            ("nothing", pod("a", &[], None), pod("a", &[], None), None),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(same_application(&a, &b), want, "{name}");
        }
        assert_eq!(app_drivers_key(&pod("a", &app, Some("j1"))).as_deref(), Some("spark-1"));
        assert_eq!(app_drivers_key(&pod("a", &[], Some("j1"))).as_deref(), Some("job:j1"));
        assert_eq!(app_drivers_key(&pod("a", &[], None)), None);
    }
}
