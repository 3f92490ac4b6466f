//! What Spark and spark-operator write on their pods, and how to tell the pods apart.
//!
//! Label keys and container names as Spark sets them (apache/spark
//! `resource-managers/kubernetes/core/src/main/scala/org/apache/spark/deploy/k8s/Constants.scala`)
//! and as spark-operator adds them (kubeflow/spark-operator `pkg/common`), with the small pod
//! classifications the rules and the agent share: driver or executor, the Spark container, the
//! scheduler, the words a driver lookup is reported with.

use crate::snapshot::{ContainerInfo, LookupMethod, PodInfo};

/// The role label: [`DRIVER`] or [`EXECUTOR`].
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
pub(crate) fn is_executor(pod: &PodInfo) -> bool {
    pod.spark_role() == Some(EXECUTOR)
}

/// Whether `pod` is a Spark driver (`spark-role=driver`).
pub(crate) fn is_driver(pod: &PodInfo) -> bool {
    pod.spark_role() == Some(DRIVER)
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
