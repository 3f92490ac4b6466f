//! Pods: a `kubectl get pods -o json` file (a `v1 List` or a `PodList`, or one `Pod`) turned
//! into our own [`PodInfo`].
//!
//! Objects are decoded with k8s-openapi's `Pod`, so the file must be what the API server
//! really returns; the conversion keeps only what the rules use.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nodemedic_rules::quantity::parse_cpu_millis;
use nodemedic_rules::snapshot::{ContainerInfo, ContainerKind, PodInfo};

/// `kubectl get pods -A -o json` of a 5,000-pod cluster is about 100 MB; refuse more.
pub const PODS_FILE_LIMIT: u64 = 512 * 1024 * 1024;

/// Why a pods file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PodsError {
    #[error("invalid JSON at line {line} column {column}: {reason}")]
    Json { line: usize, column: usize, reason: String },
    #[error("expected a Pod, a PodList or a v1 List, found kind {0:?}")]
    Kind(String),
    #[error("item {index}: {reason}")]
    Item { index: usize, reason: String },
}

/// Reads pods from the text of a pods file.
pub fn parse_pods_json(text: &[u8]) -> Result<Vec<PodInfo>, PodsError> {
    let value: serde_json::Value = serde_json::from_slice(text).map_err(|e| PodsError::Json {
        line: e.line(),
        column: e.column(),
        reason: {
            let t = e.to_string();
            t.rfind(" at line ").map_or(t.clone(), |i| t[..i].to_string())
        },
    })?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let items: Vec<serde_json::Value> = match (kind, value.get("items")) {
        ("Pod", _) => vec![value],
        ("List" | "PodList" | "", Some(serde_json::Value::Array(items))) => items.clone(),
        (k, _) => return Err(PodsError::Kind(k.to_string())),
    };
    let mut pods = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        if item.get("kind").and_then(|k| k.as_str()).is_some_and(|k| k != "Pod") {
            continue; // a v1 List may mix kinds
        }
        let pod: Pod = serde_json::from_value(item).map_err(|e| PodsError::Item { index, reason: e.to_string() })?;
        match pod_info(&pod) {
            Some(info) => pods.push(info),
            None => return Err(PodsError::Item { index, reason: "pod has no metadata.uid".into() }),
        }
    }
    Ok(pods)
}

fn cpu_millis(q: Option<&Quantity>) -> Option<u64> {
    q.and_then(|q| parse_cpu_millis(&q.0).ok())
}

fn container_info(c: &Container, kind: ContainerKind, statuses: &[ContainerStatus]) -> ContainerInfo {
    let res = c.resources.as_ref();
    let limit = cpu_millis(res.and_then(|r| r.limits.as_ref()).and_then(|l| l.get("cpu")));
    // A request defaults to the limit when only the limit is set.
    let request = cpu_millis(res.and_then(|r| r.requests.as_ref()).and_then(|l| l.get("cpu"))).or(limit);
    ContainerInfo {
        name: c.name.clone(),
        kind: Some(kind),
        cpu_request_millis: request,
        cpu_limit_millis: limit,
        container_id: statuses
            .iter()
            .find(|s| s.name == c.name)
            .and_then(|s| s.container_id.as_deref())
            .map(strip_scheme),
    }
}

/// `containerd://abc` -> `abc`.
pub fn strip_scheme(id: &str) -> String {
    id.split_once("://").map_or(id, |(_, rest)| rest).to_string()
}

/// The QoS class the API server would compute (used when `status.qosClass` is absent).
fn compute_qos(containers: &[&Container]) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let res = c.resources.as_ref();
        let req = res.and_then(|r| r.requests.as_ref());
        let lim = res.and_then(|r| r.limits.as_ref());
        any |= req.is_some_and(|m| !m.is_empty()) || lim.is_some_and(|m| !m.is_empty());
        for name in ["cpu", "memory"] {
            let l = lim.and_then(|m| m.get(name));
            let r = req.and_then(|m| m.get(name)).or(l);
            let equal = match (name, l, r) {
                ("cpu", Some(l), Some(r)) => cpu_millis(Some(l)) == cpu_millis(Some(r)),
                (_, Some(l), Some(r)) => l.0 == r.0,
                _ => false,
            };
            guaranteed &= equal;
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Our view of a pod; `None` without a UID.
pub fn pod_info(pod: &Pod) -> Option<PodInfo> {
    let meta = &pod.metadata;
    let uid = meta.uid.clone().filter(|u| !u.is_empty())?;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let empty = Vec::new();
    let statuses = |f: fn(&k8s_openapi::api::core::v1::PodStatus) -> Option<&Vec<ContainerStatus>>| {
        status.and_then(f).unwrap_or(&empty).clone()
    };
    let init_statuses = statuses(|s| s.init_container_statuses.as_ref());
    let app_statuses = statuses(|s| s.container_statuses.as_ref());
    let mut containers = Vec::new();
    if let Some(spec) = spec {
        for c in spec.init_containers.iter().flatten() {
            containers.push(container_info(c, ContainerKind::Init, &init_statuses));
        }
        for c in &spec.containers {
            containers.push(container_info(c, ContainerKind::Regular, &app_statuses));
        }
        let eph_statuses = statuses(|s| s.ephemeral_container_statuses.as_ref());
        for e in spec.ephemeral_containers.iter().flatten() {
            containers.push(ContainerInfo {
                name: e.name.clone(),
                kind: Some(ContainerKind::Ephemeral),
                container_id: eph_statuses.iter().find(|s| s.name == e.name).and_then(|s| s.container_id.as_deref()).map(strip_scheme),
                ..Default::default()
            });
        }
    }
    let qos_class = status.and_then(|s| s.qos_class.clone()).or_else(|| {
        spec.map(|s| {
            let all: Vec<&Container> = s.init_containers.iter().flatten().chain(s.containers.iter()).collect();
            compute_qos(&all).to_string()
        })
    });
    Some(PodInfo {
        uid,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
        node_name: spec.and_then(|s| s.node_name.clone()),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".into()),
        reason: status.and_then(|s| s.reason.clone()),
        message: status.and_then(|s| s.message.clone()),
        qos_class,
        containers,
        labels: meta.labels.clone().unwrap_or_default().into_iter().collect::<BTreeMap<_, _>>(),
        created_at: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        finished_at: init_statuses
            .iter()
            .chain(app_statuses.iter())
            .filter_map(|s| s.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
            .map(|t| t.0.as_second())
            .max(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXECUTOR: &str = r#"{
      "apiVersion": "v1", "kind": "List", "items": [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "etl-exec-1", "namespace": "spark", "uid": "39b3c1f2-1d2e-4f50-9a8b-7c6d5e4f3a2b",
                     "creationTimestamp": "2026-11-20T10:00:00Z",
                     "labels": {"spark-role": "executor", "spark-app-selector": "spark-0a1b"}},
        "spec": {"nodeName": "worker-3", "restartPolicy": "Never",
                 "initContainers": [{"name": "init", "image": "busybox", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
                 "containers": [{"name": "spark-kubernetes-executor", "image": "spark:3.5.1",
                                 "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}}]},
        "status": {"phase": "Running", "qosClass": "Guaranteed",
                   "containerStatuses": [{"name": "spark-kubernetes-executor", "ready": true, "restartCount": 0, "image": "spark:3.5.1", "imageID": "",
                                          "containerID": "containerd://4b1e8d8c"}]}
      }, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]
    }"#;

    #[test]
    fn reads_a_kubectl_list() {
        let pods = parse_pods_json(EXECUTOR.as_bytes()).unwrap();
        assert_eq!(pods.len(), 1);
        let p = &pods[0];
        assert_eq!((p.namespace.as_str(), p.name.as_str(), p.phase.as_str()), ("spark", "etl-exec-1", "Running"));
        assert_eq!(p.node_name.as_deref(), Some("worker-3"));
        assert_eq!(p.created_at, Some(1_763_632_800 + 365 * 86400));
        assert_eq!(p.containers.len(), 2);
        assert_eq!(p.containers[0].kind, Some(ContainerKind::Init));
        assert_eq!(p.containers[0].cpu_request_millis, Some(1000), "request defaults to limit");
        assert_eq!(p.containers[1].container_id.as_deref(), Some("4b1e8d8c"));
        assert_eq!(p.labels["spark-role"], "executor");
    }

    #[test]
    fn qos_is_computed_when_absent() {
        let pod = |res: &str| {
            format!(r#"{{"kind":"Pod","metadata":{{"uid":"u"}},"spec":{{"containers":[{{"name":"c","resources":{res}}}]}}}}"#)
        };
        let qos = |res: &str| parse_pods_json(pod(res).as_bytes()).unwrap()[0].qos_class.clone().unwrap();
        assert_eq!(qos(r#"{"limits":{"cpu":"2","memory":"1Gi"}}"#), "Guaranteed");
        assert_eq!(qos(r#"{"requests":{"cpu":"2000m","memory":"1Gi"},"limits":{"cpu":"2","memory":"1Gi"}}"#), "Guaranteed");
        assert_eq!(qos(r#"{"requests":{"cpu":"1"},"limits":{"cpu":"2","memory":"1Gi"}}"#), "Burstable");
        assert_eq!(qos(r#"{}"#), "BestEffort");
    }

    #[test]
    fn bad_files() {
        let cases: &[(&str, &str)] = &[
            ("", "invalid JSON at line 1"),
            ("{\"kind\":\"List\",\"items\":[", "invalid JSON"),
            ("{\"kind\":\"Node\"}", "found kind \"Node\""),
            ("[]", "found kind \"\""),
            (r#"{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"x"}}]}"#, "item 0: pod has no metadata.uid"),
            (r#"{"kind":"List","items":[{"kind":"Pod","metadata":{"uid":"u"},"spec":{"containers":"nope"}}]}"#, "item 0: invalid type"),
        ];
        for (text, want) in cases {
            let err = parse_pods_json(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn schemes_are_stripped() {
        assert_eq!(strip_scheme("cri-o://abc"), "abc");
        assert_eq!(strip_scheme("abc"), "abc");
    }

    proptest::proptest! {
        #[test]
        fn pods_reader_never_panics(cut in 0usize..2000, byte in proptest::prelude::any::<u8>(), pos in 0usize..2000) {
            let mut bytes = EXECUTOR.as_bytes().to_vec();
            let p = pos % bytes.len();
            bytes[p] = byte;
            bytes.truncate(cut.max(1));
            let _ = parse_pods_json(&bytes);
        }
    }
}
