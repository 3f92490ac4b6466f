//! What the node shows of Spark applications beyond their pods: how an executor's driver was
//! looked up and what was found, a driver's configuration, and the scratch directories Spark
//! leaves on the node.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::PodInfo;

/// How an executor's driver was looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupMethod {
    /// The executor's controller owner reference (kind Pod): GET by name, compare UID.
    OwnerReference,
    /// `spark-role=driver,spark-app-selector=<app>` in the executor's namespace.
    Labels,
    /// The host of `SPARK_DRIVER_URL` (a pod IP, or a driver service name).
    DriverUrl,
}

/// What the lookup of an executor's driver found (filled by the agent: from the API, or from
/// a cluster-wide pods file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverLookup {
    /// The driver pod, as it is now (it may have finished), shared: the executors of one
    /// application hold the one copy their lookup found.
    Found { by: LookupMethod, driver: Arc<PodInfo> },
    /// No driver pod exists (`expected` names what was looked for).
    Gone { by: LookupMethod, expected: String },
    /// A pod with the driver's name exists but has another UID: the driver was recreated and
    /// this executor belongs to the old one.
    Replaced { expected_uid: String, found: Arc<PodInfo> },
    /// The driver is not a pod in this cluster (client mode with an outside driver): the
    /// executor's fate cannot be judged from Kubernetes.
    External { url: String },
    /// The lookup failed (API error, rate limit): not judged this time.
    Unknown { reason: String },
}

/// A Spark scratch directory (`blockmgr-*` or `spark-*`) found on the node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LocalDir {
    /// Host path of the `blockmgr-*`/`spark-*` directory.
    pub path: String,
    /// The directory it sits in: an emptyDir volume's directory, or a configured hostPath root.
    pub root: String,
    /// The pod whose emptyDir holds it (`None` under a hostPath root).
    pub pod_uid: Option<String>,
    /// Bytes of the files below it (symlinks not followed).
    pub bytes: u64,
    /// The newest modification time below it, unix seconds.
    pub newest_mtime: Option<i64>,
}

/// A Spark driver's configuration as the node sees it (its `spark.properties` from the
/// config-map volume under the kubelet's pod directory).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SparkConf {
    /// The Spark version: the `spark-version` label (3.3+), else the Spark image's tag
    /// ([`PodInfo::spark_version`]).
    pub version: Option<String>,
    pub properties: BTreeMap<String, String>,
    /// The driver container's literal `KUBERNETES_REQUEST_TIMEOUT` env (Spark 2.4), in ms.
    pub kubernetes_request_timeout_env: Option<String>,
    /// The driver container's literal `SPARK_SUBMIT_OPTS` env (JVM options, Spark 2.4 reads
    /// `-Dkubernetes.request.timeout` from them).
    pub spark_submit_opts_env: Option<String>,
}

/// Whether the `spark.properties` of a driver on this node was read ([`super::PodsSnapshot`]'s
/// `spark_conf_reads`, by pod UID): what `slow-pod-admission` may rely on when it takes the
/// smallest client timeout the drivers here set.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SparkConfRead {
    /// Read from this file (host path).
    Read { path: String },
    /// There is nothing to read, normally (why): the pod mounts no Spark conf volume (client
    /// mode, or Spark before 2.4, which passes the driver's configuration in its environment),
    /// or the driver waits to start and the kubelet has not set its volume up yet.
    NotThere { reason: String },
    /// It should be there and could not be read (where and why): permission denied, a file
    /// outside its volume, too large, not UTF-8, or a driver that runs with its conf volume
    /// and no `spark.properties` in it.
    Failed { reason: String },
}
