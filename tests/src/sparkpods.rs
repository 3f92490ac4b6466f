//! Pod objects as Spark and the spark-operator really write them (apache/spark
//! `resource-managers/kubernetes/core/src/main/scala/org/apache/spark/deploy/k8s/`,
//! kubeflow/spark-operator), for the API server double and pods files: labels, owner
//! references, env, volumes, container names, per Spark version.
//!
//! - Spark 2.4: `spark-app-selector`, `spark-role`, `spark-exec-id`; executor container
//!   `executor`; no `spark-app-name`/`spark-version` labels.
//! - Spark 3.x: adds `spark-exec-resourceprofile-id` (3.1), `spark-app-name` and
//!   `spark-version` (3.3), `SPARK_RESOURCE_PROFILE_ID`; executor container
//!   `spark-kubernetes-executor`.
//! - Spark 4.x: adds `SPARK_DRIVER_POD_IP` (3.5+).
//! - spark-operator: `sparkoperator.k8s.io/app-name`, `launched-by-spark-operator`,
//!   `submission-id`; the driver is owned by the SparkApplication.
//!
//! Executors carry an owner reference to their driver pod only in cluster mode (or when
//! `spark.kubernetes.driver.pod.name` is set); client-mode executors have none.

use serde_json::{Value, json};

/// Which Spark wrote the pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SparkVersion {
    V2_4,
    V3_5,
    V4_0,
}

impl SparkVersion {
    fn text(self) -> &'static str {
        match self {
            SparkVersion::V2_4 => "2.4.8",
            SparkVersion::V3_5 => "3.5.1",
            SparkVersion::V4_0 => "4.0.0",
        }
    }
}

/// One Spark application's naming.
#[derive(Debug, Clone)]
pub struct SparkApp {
    pub version: SparkVersion,
    pub namespace: String,
    /// `spark.app.name`.
    pub name: String,
    /// `spark-app-selector`: `spark-<32 hex>` in cluster mode, the SparkContext id in client mode.
    pub app_id: String,
    /// The resource name prefix (`<name>-<hash>`): pods are `<prefix>-driver`, `<prefix>-exec-N`.
    pub prefix: String,
    /// spark-operator: (SparkApplication name, submission id).
    pub operator: Option<(String, String)>,
}

impl SparkApp {
    /// A cluster-mode application.
    pub fn new(version: SparkVersion, namespace: &str, name: &str) -> Self {
        let hex = crate::hosttree::container_id(name);
        SparkApp {
            version,
            namespace: namespace.into(),
            name: name.into(),
            app_id: format!("spark-{}", &hex[..32]),
            prefix: format!("{name}-{}", &hex[32..48]),
            operator: None,
        }
    }

    /// Launched by the spark-operator as SparkApplication `name`, run `submission`.
    pub fn operator(mut self, submission: &str) -> Self {
        self.operator = Some((self.name.clone(), submission.into()));
        self
    }

    fn labels(&self, role: &str) -> serde_json::Map<String, Value> {
        let mut l = serde_json::Map::new();
        l.insert("spark-app-selector".into(), json!(self.app_id));
        l.insert("spark-role".into(), json!(role));
        if self.version != SparkVersion::V2_4 {
            l.insert("spark-app-name".into(), json!(self.name));
            l.insert("spark-version".into(), json!(self.version.text()));
        }
        if let Some((app, submission)) = &self.operator {
            l.insert("sparkoperator.k8s.io/app-name".into(), json!(app));
            l.insert("sparkoperator.k8s.io/launched-by-spark-operator".into(), json!("true"));
            l.insert("sparkoperator.k8s.io/submission-id".into(), json!(submission));
        }
        l
    }

    /// The driver pod `<prefix>-driver` on `node`.
    pub fn driver(&self, uid: &str, node: &str, ip: &str) -> Value {
        let mut meta = json!({
            "name": format!("{}-driver", self.prefix), "namespace": self.namespace, "uid": uid,
            "labels": self.labels("driver"),
        });
        if let Some((app, _)) = &self.operator {
            meta["ownerReferences"] = json!([{"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                "name": app, "uid": format!("{uid}-sparkapp"), "controller": true}]);
        }
        let env = json!([
            {"name": "SPARK_USER", "value": "spark"},
            {"name": "SPARK_APPLICATION_ID", "value": self.app_id},
            {"name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
            {"name": "SPARK_LOCAL_DIRS", "value": "/var/data/spark-7c1f5a2e-3b4d-4e6f-8a9b-0c1d2e3f4a5b"},
            {"name": "SPARK_CONF_DIR", "value": "/opt/spark/conf"},
        ]);
        pod(meta, node, "spark-kubernetes-driver", env, self.version, "Always", ip)
    }

    /// Executor `n` on `node`; `owner` is the driver's (name, uid) in cluster mode, `None` in
    /// client mode; `driver_host` is what `SPARK_DRIVER_URL` names.
    pub fn executor(&self, n: u32, uid: &str, node: &str, owner: Option<(&str, &str)>, driver_host: &str) -> Value {
        let mut labels = self.labels("executor");
        labels.insert("spark-exec-id".into(), json!(n.to_string()));
        if self.version != SparkVersion::V2_4 {
            labels.insert("spark-exec-resourceprofile-id".into(), json!("0"));
        }
        let mut meta = json!({"name": format!("{}-exec-{n}", self.prefix), "namespace": self.namespace, "uid": uid, "labels": labels});
        if let Some((name, owner_uid)) = owner {
            meta["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": owner_uid, "controller": true}]);
        }
        let mut env = vec![
            json!({"name": "SPARK_USER", "value": "spark"}),
            json!({"name": "SPARK_DRIVER_URL", "value": format!("spark://CoarseGrainedScheduler@{driver_host}:7078")}),
            json!({"name": "SPARK_EXECUTOR_CORES", "value": "2"}),
            json!({"name": "SPARK_EXECUTOR_MEMORY", "value": "4g"}),
            json!({"name": "SPARK_APPLICATION_ID", "value": self.app_id}),
            json!({"name": "SPARK_EXECUTOR_ID", "value": n.to_string()}),
            json!({"name": "SPARK_EXECUTOR_POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}),
            json!({"name": "SPARK_EXECUTOR_POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}),
            json!({"name": "SPARK_LOCAL_DIRS", "value": "/var/data/spark-7c1f5a2e-3b4d-4e6f-8a9b-0c1d2e3f4a5b"}),
        ];
        if self.version != SparkVersion::V2_4 {
            env.push(json!({"name": "SPARK_RESOURCE_PROFILE_ID", "value": "0"}));
        }
        if self.version == SparkVersion::V4_0 {
            env.push(json!({"name": "SPARK_DRIVER_POD_IP", "value": driver_host}));
        }
        let container = if self.version == SparkVersion::V2_4 {
            "executor"
        } else {
            "spark-kubernetes-executor"
        };
        pod(meta, node, container, Value::Array(env), self.version, "Never", "")
    }
}

fn pod(meta: Value, node: &str, container: &str, env: Value, version: SparkVersion, restart: &str, ip: &str) -> Value {
    let mut meta = meta;
    meta["creationTimestamp"] = json!(now_rfc3339(-120));
    let uid = meta_uid(&meta);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node, "restartPolicy": restart, "schedulerName": "default-scheduler",
            "serviceAccountName": "spark", "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": container, "image": format!("apache/spark:{}", version.text()),
                "args": [if container == "spark-kubernetes-driver" { "driver" } else { "executor" }],
                "env": env,
                "resources": {"requests": {"cpu": "2", "memory": "4505Mi"}, "limits": {"cpu": "2", "memory": "4505Mi"}},
                "volumeMounts": [{"name": "spark-local-dir-1", "mountPath": "/var/data/spark-7c1f5a2e-3b4d-4e6f-8a9b-0c1d2e3f4a5b"}],
            }],
            "volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}],
        },
        "status": {
            "phase": "Running", "qosClass": "Guaranteed", "podIP": ip, "hostIP": "10.0.0.10",
            "startTime": now_rfc3339(-118),
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(-119)}],
            "containerStatuses": [{"name": container, "ready": true, "restartCount": 0, "started": true,
                "image": format!("docker.io/apache/spark:{}", version.text()), "imageID": "",
                "containerID": format!("containerd://{}", crate::hosttree::container_id(&format!("{uid}/{container}"))),
                "state": {"running": {"startedAt": now_rfc3339(-115)}}}],
        }
    })
}

fn meta_uid(meta: &Value) -> String {
    meta["uid"].as_str().unwrap_or_default().to_string()
}

/// Now plus `offset_seconds`, RFC 3339.
pub fn now_rfc3339(offset_seconds: i64) -> String {
    let t = jiff::Timestamp::now().as_second() + offset_seconds;
    jiff::Timestamp::from_second(t)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Marks a pod finished: phase, terminated container state with `exit_code`, finished
/// `ago_seconds` ago.
pub fn finish(pod: &mut Value, phase: &str, exit_code: i32, ago_seconds: i64) {
    pod["status"]["phase"] = json!(phase);
    if let Some(statuses) = pod["status"]["containerStatuses"].as_array_mut() {
        for s in statuses {
            s["ready"] = json!(false);
            s["state"] = json!({"terminated": {"exitCode": exit_code, "reason": if exit_code == 0 {"Completed"} else {"Error"},
                "startedAt": now_rfc3339(-ago_seconds - 600), "finishedAt": now_rfc3339(-ago_seconds)}});
        }
    }
}

/// A pod the kubelet rejected at admission (`OutOfcpu` and the like), bound by `scheduler`.
pub fn rejected_pod(
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
    scheduler: &str,
    reason: &str,
    message: &str,
) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": now_rfc3339(-30)},
        "spec": {"nodeName": node, "schedulerName": scheduler, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "56033m"}, "limits": {"cpu": "56033m"}}}]},
        "status": {"phase": "Failed", "reason": reason, "message": message, "startTime": now_rfc3339(-29),
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(-30)}]}
    })
}

/// A running pod bound by `scheduler` (for the scheduler mix), Volcano's group annotation
/// when the scheduler is `volcano`.
pub fn bound_pod(namespace: &str, name: &str, uid: &str, node: &str, scheduler: &str) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": now_rfc3339(-60)},
        "spec": {"nodeName": node, "schedulerName": scheduler,
                 "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "startTime": now_rfc3339(-59),
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(-60)}]}
    });
    if scheduler == "volcano" {
        p["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": format!("{name}-podgroup")});
    }
    p
}

/// Turns a Spark 3.x driver pod into one spark-submit left half made, `waited_seconds` after
/// it was created and bound: its spec mounts the configuration ConfigMap
/// (`spark-conf-volume-driver` from `spark-drv-<id>-conf-map`, as Spark 3.x names it) that
/// never came, and the kubelet keeps it `Pending` with its container waiting in
/// `ContainerCreating`. Returns the ConfigMap's name.
pub fn half_submitted(pod: &mut Value, waited_seconds: i64) -> String {
    let uid = meta_uid(&pod["metadata"]);
    let config_map = format!("spark-drv-{}-conf-map", &crate::hosttree::container_id(&uid)[..16]);
    pod["metadata"]["creationTimestamp"] = json!(now_rfc3339(-waited_seconds));
    if let Some(volumes) = pod["spec"]["volumes"].as_array_mut() {
        volumes.push(json!({"name": "spark-conf-volume-driver",
            "configMap": {"name": config_map, "defaultMode": 420, "items": [{"key": "spark.properties", "path": "spark.properties", "mode": 420}]}}));
    }
    if let Some(mounts) = pod["spec"]["containers"][0]["volumeMounts"].as_array_mut() {
        mounts.push(json!({"name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf"}));
    }
    let container = pod["spec"]["containers"][0]["name"].clone();
    let image = pod["spec"]["containers"][0]["image"].clone();
    pod["status"] = json!({
        "phase": "Pending", "qosClass": "Guaranteed", "hostIP": "10.0.0.10", "startTime": now_rfc3339(-waited_seconds + 1),
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(-waited_seconds)},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now_rfc3339(-waited_seconds + 1)},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now_rfc3339(-waited_seconds + 1)},
        ],
        "containerStatuses": [{"name": container, "ready": false, "restartCount": 0, "started": false, "image": image,
            "imageID": "", "state": {"waiting": {"reason": "ContainerCreating"}}}],
    });
    config_map
}
