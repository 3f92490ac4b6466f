//! Pods: a `kubectl get pods -o json` file (a `v1 List` or a `PodList`, or one `Pod`) turned
//! into our own [`PodInfo`].
//!
//! Pods are decoded into [`PodObject`]: only the parts of `metadata`, `spec` and `status` the
//! rules use, with the API's field names and types. Everything else (managed fields, other
//! annotations and environment variables, probes, mounts) is skipped while parsing, without
//! a copy of its strings, which keeps a 250-pod node's pod list to a few MiB and a few
//! milliseconds. The document is read through a bounded window (`window.rs`), item by item,
//! so a file is never in memory whole: memory grows with the pods kept, not with the file.

use std::io::Read;
use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod_object::Text;
use nodemedic_rules::snapshot::PodInfo;
use serde_json::error::Category;
use window::{Fault, Window};

pub use super::pod_object::*;
use super::read::ReadError;

mod window;

/// `kubectl get pods -A -o json` of a 5,000-pod cluster is about 100 MB; refuse more.
pub const PODS_FILE_LIMIT: u64 = 512 * 1024 * 1024;

/// Why a pods file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PodsError {
    #[error("invalid JSON at line {line} column {column}: {reason}")]
    Json { line: usize, column: usize, reason: String },
    #[error("expected a Pod, a PodList or a v1 List, found kind {0:?}")]
    Kind(String),
    #[error("not a Pod, a PodList or a v1 List: {0}")]
    Shape(String),
    #[error("item {index}: {reason}")]
    Item { index: usize, reason: String },
}

/// Reads pods from the text of a pods file.
pub fn parse_pods_json(text: &[u8]) -> Result<Vec<PodInfo>, PodsError> {
    decode(text)
}

/// Reads pods from a reader, through a window of at most a few hundred kB (see
/// [`read_pods_file`]); I/O errors come back as invalid JSON.
pub fn read_pods<R: Read>(reader: R) -> Result<Vec<PodInfo>, PodsError> {
    decode(reader)
}

/// Why a pods file could not be used: the file, or what is in it.
#[derive(Debug, thiserror::Error)]
pub enum PodsFileError {
    /// Names the file.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Does not name the file.
    #[error(transparent)]
    Pods(#[from] PodsError),
}

/// Reads a pods file of at most [`PODS_FILE_LIMIT`] bytes, in one pass, each item straight
/// into a [`PodObject`], through a window of the file ([`window::WINDOW`], 256 KiB, larger
/// only for an item larger than that): the file is never in memory whole, so memory grows
/// with the pods kept, not with the file (2.4 MB at 250 pods, about 100 MB for a `kubectl
/// get pods -A` of a large cluster). `Ok(None)` when the file does not exist; `shown` is the
/// path as reported.
pub fn read_pods_file(path: &Path, shown: &str) -> Result<Option<Vec<PodInfo>>, PodsFileError> {
    read_pods_file_limited(path, shown, PODS_FILE_LIMIT)
}

fn read_pods_file_limited(path: &Path, shown: &str, limit: u64) -> Result<Option<Vec<PodInfo>>, PodsFileError> {
    let io = |source: std::io::Error| ReadError::Io {
        path: shown.to_string(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e).into()),
    };
    let mut counted = Counted {
        inner: file.take(limit + 1),
        read: 0,
        error: None,
    };
    let result = decode(&mut counted);
    if counted.read > limit {
        return Err(ReadError::TooLarge {
            path: shown.to_string(),
            limit,
        }
        .into());
    }
    if let Some(e) = counted.error {
        return Err(match e.kind() {
            std::io::ErrorKind::IsADirectory => ReadError::IsDir {
                path: shown.to_string(),
            },
            _ => io(e),
        }
        .into());
    }
    Ok(Some(result?))
}

/// A reader that counts its bytes and keeps its first error (serde_json keeps only a message).
struct Counted<R> {
    inner: R,
    read: u64,
    error: Option<std::io::Error>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.read += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                let kind = e.kind();
                self.error.get_or_insert(e);
                Err(kind.into())
            }
        }
    }
}

/// Decodes a whole pods document in one pass through a [`Window`]: a `Pod`, or a
/// `List`/`PodList` whose items are turned into [`PodInfo`] one at a time (items of other
/// kinds in a `v1 List` are skipped).
fn decode<R: Read>(reader: R) -> Result<Vec<PodInfo>, PodsError> {
    let mut window = Window::new(reader);
    let mut current = None;
    let top = top(&mut window, &mut current).and_then(|top| window.end().map(|()| top));
    let top = match top {
        Ok(top) => top,
        Err(fault) => {
            return Err(match (fault.category, current) {
                // A wrong type or a missing field inside an item is that item's; a syntax
                // error or an early end is the file's.
                (Category::Data, Some(index)) => PodsError::Item {
                    index,
                    reason: fault.placed(),
                },
                (Category::Data, None) => PodsError::Shape(fault.message),
                _ => PodsError::Json {
                    line: fault.line,
                    column: fault.column,
                    reason: fault.message,
                },
            });
        }
    };
    match (top.kind.as_deref().unwrap_or(""), top.items) {
        ("Pod", _) => {
            let pod = PodObject {
                metadata: top.metadata.unwrap_or_default(),
                spec: top.spec,
                status: top.status,
            };
            let info = pod_info(pod).ok_or_else(|| PodsError::Item {
                index: 0,
                reason: NO_UID.into(),
            })?;
            Ok(vec![info])
        }
        ("List" | "PodList" | "", Some(items)) => Ok(items),
        (k, _) => Err(PodsError::Kind(k.to_string())),
    }
}

const NO_UID: &str = "pod has no metadata.uid";

/// The top-level object: its kind, its items (already decoded), and the parts of a lone Pod.
#[derive(Default)]
struct Top {
    kind: Option<String>,
    items: Option<Vec<PodInfo>>,
    metadata: Option<ObjectMeta>,
    spec: Option<PodSpec>,
    status: Option<PodStatus>,
}

/// The index of the item being decoded, if one is: where a failure is.
type Current = Option<usize>;

/// What a pods document is expected to be, for serde_json's word on one that is none of
/// them (a number, a string): it accepts nothing.
struct NotAPodsDocument;

impl<'de> serde::Deserialize<'de> for NotAPodsDocument {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Refuse;
        impl serde::de::Visitor<'_> for Refuse {
            type Value = NotAPodsDocument;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a Pod, a PodList or a v1 List")
            }
        }
        d.deserialize_any(Refuse)
    }
}

/// `items` that is not an array: `null` (no items), or serde_json's word on what it is.
struct NoItems;

impl<'de> serde::Deserialize<'de> for NoItems {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Null;
        impl<'de> serde::de::Visitor<'de> for Null {
            type Value = NoItems;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of objects")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<NoItems, E> {
                Ok(NoItems)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<NoItems, E> {
                Ok(NoItems)
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<NoItems, D::Error> {
                d.deserialize_seq(self)
            }
        }
        d.deserialize_option(Null)
    }
}

/// The top-level value: an object read key by key, an array (drained, then refused by its
/// missing kind), or anything else (refused by serde_json, worded as for any document).
fn top<R: Read>(w: &mut Window<R>, current: &mut Current) -> Result<Top, Fault> {
    use serde::de::IgnoredAny;
    match w.peek()? {
        Some(b'{') => w.bump(),
        Some(b'[') => {
            w.value::<IgnoredAny>()?;
            return Ok(Top::default());
        }
        _ => {
            w.value::<NotAPodsDocument>()?;
            return Ok(Top::default());
        }
    }
    let mut top = Top::default();
    // A lone Pod's parts are kept only while the kind may still be Pod.
    let may_be_pod = |top: &Top| top.kind.as_deref().is_none_or(|k| k == "Pod");
    if w.closes(b'}')? {
        return Ok(top);
    }
    loop {
        match w.peek()? {
            Some(b'"') => {}
            Some(_) => return Err(w.fault(Category::Syntax, "key must be a string")),
            None => return Err(w.fault(Category::Eof, "EOF while parsing an object")),
        }
        let key: String = w.value()?;
        match w.peek()? {
            Some(b':') => w.bump(),
            Some(_) => return Err(w.fault(Category::Syntax, "expected `:`")),
            None => return Err(w.fault(Category::Eof, "EOF while parsing an object")),
        }
        match key.as_str() {
            "kind" => top.kind = w.value()?,
            "items" => top.items = items(w, current)?,
            "metadata" if may_be_pod(&top) => top.metadata = Some(w.value::<LeanMetadata>()?.0),
            "spec" if may_be_pod(&top) => top.spec = w.value()?,
            "status" if may_be_pod(&top) => top.status = w.value()?,
            _ => {
                w.value::<IgnoredAny>()?;
            }
        }
        if !w.another(b'}')? {
            return Ok(top);
        }
    }
}

/// `items`: `null`, or an array decoded item by item.
fn items<R: Read>(w: &mut Window<R>, current: &mut Current) -> Result<Option<Vec<PodInfo>>, Fault> {
    if w.peek()? != Some(b'[') {
        w.value::<NoItems>()?;
        return Ok(None);
    }
    w.bump();
    let mut pods = Vec::new();
    if w.closes(b']')? {
        return Ok(Some(pods));
    }
    for index in 0.. {
        *current = Some(index);
        let Item(item) = w.value()?;
        // A v1 List may mix kinds.
        if let Some(pod) = item {
            pods.push(pod_info(pod).ok_or_else(|| w.fault(Category::Data, NO_UID))?);
        }
        if !w.another(b']')? {
            break;
        }
    }
    *current = None;
    Ok(Some(pods))
}

/// One item: `Some(pod)`, or `None` for an item of another kind.
struct Item(Option<PodObject>);

impl<'de> serde::Deserialize<'de> for Item {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ItemVisitor).map(Item)
    }
}

struct ItemVisitor;

impl<'de> serde::de::Visitor<'de> for ItemVisitor {
    type Value = Option<PodObject>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Pod object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::IgnoredAny;
        let mut kind: Option<String> = None;
        let mut pod = PodObject::default();
        // The API server writes `kind` before `spec` and `status`, so another kind's spec
        // (which a PodSpec could not hold) is skipped unread.
        let is_pod = |kind: &Option<String>| kind.as_deref().is_none_or(|k| k == "Pod");
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match key.as_ref() {
                "kind" => kind = map.next_value()?,
                "metadata" if is_pod(&kind) => pod.metadata = map.next_value::<LeanMetadata>()?.0,
                "spec" if is_pod(&kind) => pod.spec = map.next_value()?,
                "status" if is_pod(&kind) => pod.status = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(is_pod(&kind).then_some(pod))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::snapshot::{ContainerKind, LocalDirVolume, PodPhase, QosClass};

    const EXECUTOR: &str = r#"{
      "apiVersion": "v1", "kind": "List", "items": [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "etl-exec-1", "namespace": "spark", "uid": "39b3c1f2-1d2e-4f50-9a8b-7c6d5e4f3a2b",
                     "creationTimestamp": "2026-11-20T10:00:00Z",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "etl-driver", "uid": "d1", "controller": true}],
                     "labels": {"spark-role": "executor", "spark-app-selector": "spark-0a1b"}},
        "spec": {"nodeName": "worker-3", "restartPolicy": "Never", "schedulerName": "volcano",
                 "initContainers": [{"name": "init", "image": "busybox", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
                 "containers": [{"name": "spark-kubernetes-executor", "image": "spark:3.5.1",
                                 "env": [{"name": "SPARK_EXECUTOR_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                                         {"name": "SPARK_DRIVER_URL", "value": "spark://CoarseGrainedScheduler@etl-driver-svc.spark.svc:7078"}],
                                 "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}}],
                 "volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}, {"name": "spark-local-dir-2", "hostPath": {"path": "/mnt/disk1/spark"}},
                             {"name": "spark-conf-volume-exec", "configMap": {"name": "c"}}]},
        "status": {"phase": "Running", "qosClass": "Guaranteed", "podIP": "10.4.2.17",
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-20T10:00:01Z"}],
                   "containerStatuses": [{"name": "spark-kubernetes-executor", "ready": true, "restartCount": 0, "image": "spark:3.5.1", "imageID": "",
                                          "containerID": "containerd://4b1e8d8c", "state": {"running": {"startedAt": "2026-11-20T10:00:05Z"}}}]}
      }, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]
    }"#;

    #[test]
    fn reads_a_kubectl_list() {
        let pods = parse_pods_json(EXECUTOR.as_bytes()).unwrap();
        assert_eq!(pods.len(), 1);
        let p = &pods[0];
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str(), &p.phase),
            ("spark", "etl-exec-1", &PodPhase::Running)
        );
        assert_eq!(p.node_name.as_deref(), Some("worker-3"));
        assert_eq!(p.created_at, Some(1_763_632_800 + 365 * 86400));
        assert_eq!(p.containers.len(), 2);
        assert_eq!(p.containers[0].kind, Some(ContainerKind::Init));
        assert_eq!(
            p.containers[0].cpu_request_millis,
            Some(1000),
            "request defaults to limit"
        );
        assert_eq!(p.containers[1].container_id.as_deref(), Some("4b1e8d8c"));
        assert_eq!(p.labels["spark-role"], "executor");
        assert_eq!(p.containers[1].state.as_deref(), Some("running"));
        assert_eq!(p.owner_refs.len(), 1);
        assert!(p.owner_refs[0].controller);
        assert_eq!(p.owner_refs[0].name, "etl-driver");
        assert_eq!(p.scheduler_name.as_deref(), Some("volcano"));
        assert_eq!(p.scheduled_at, Some(1_795_168_801));
        assert_eq!(
            p.spark_driver_url.as_deref(),
            Some("spark://CoarseGrainedScheduler@etl-driver-svc.spark.svc:7078")
        );
        assert_eq!(
            p.local_dir_volumes,
            vec![
                LocalDirVolume {
                    name: "spark-local-dir-1".into(),
                    host_path: None,
                    memory: false,
                    claim: None,
                    size_limit_bytes: None,
                },
                LocalDirVolume {
                    name: "spark-local-dir-2".into(),
                    host_path: Some("/mnt/disk1/spark".into()),
                    memory: false,
                    claim: None,
                    size_limit_bytes: None,
                }
            ]
        );
        assert_eq!(p.pod_ip.as_deref(), Some("10.4.2.17"));
        assert!(!p.deleting);
        assert_eq!(p.containers[1].image.as_deref(), Some("spark:3.5.1"));
        assert_eq!(p.spark_version(), Some(("3.5.1".to_string(), "image")));
    }

    #[test]
    fn a_waiting_driver_s_conf_volume_reason_and_jvm_options() {
        let driver = r#"{"kind":"Pod","metadata":{"uid":"d1","name":"etl-driver","labels":{"spark-role":"driver"}},
          "spec":{"nodeName":"worker-3",
            "containers":[{"name":"spark-kubernetes-driver","env":[
              {"name":"SPARK_SUBMIT_OPTS","value":"-Dkubernetes.request.timeout=60000"},
              {"name":"KUBERNETES_REQUEST_TIMEOUT","value":"30000"}]}],
            "volumes":[{"name":"spark-local-dir-1","emptyDir":{}},
                       {"name":"spark-conf-volume-driver","configMap":{"name":"spark-drv-3f2a-conf-map","defaultMode":420}}]},
          "status":{"phase":"Pending","containerStatuses":[{"name":"spark-kubernetes-driver","ready":false,"restartCount":0,
            "image":"apache/spark:3.5.1","imageID":"","state":{"waiting":{"reason":"ContainerCreating"}}}]}}"#;
        let p = &parse_pods_json(driver.as_bytes()).unwrap()[0];
        assert_eq!(
            p.conf_volume,
            Some(nodemedic_rules::snapshot::ConfVolume {
                volume: "spark-conf-volume-driver".into(),
                config_map: "spark-drv-3f2a-conf-map".into(),
            })
        );
        assert_eq!(p.containers[0].state.as_deref(), Some("waiting"));
        assert_eq!(p.containers[0].waiting_reason.as_deref(), Some("ContainerCreating"));
        assert_eq!(
            p.spark_submit_opts_env.as_deref(),
            Some("-Dkubernetes.request.timeout=60000")
        );
        assert_eq!(p.kubernetes_request_timeout_env.as_deref(), Some("30000"));
        // An executor's conf volume (spark-conf-volume-exec) is not a driver's.
        assert_eq!(parse_pods_json(EXECUTOR.as_bytes()).unwrap()[0].conf_volume, None);
    }

    #[test]
    fn qos_is_computed_when_absent() {
        let pod = |res: &str| {
            format!(
                r#"{{"kind":"Pod","metadata":{{"uid":"u"}},"spec":{{"containers":[{{"name":"c","resources":{res}}}]}}}}"#
            )
        };
        let qos = |res: &str| {
            parse_pods_json(pod(res).as_bytes()).unwrap()[0]
                .qos_class
                .clone()
                .unwrap()
        };
        assert_eq!(qos(r#"{"limits":{"cpu":"2","memory":"1Gi"}}"#), QosClass::Guaranteed);
        assert_eq!(
            qos(r#"{"requests":{"cpu":"2000m","memory":"1Gi"},"limits":{"cpu":"2","memory":"1Gi"}}"#),
            QosClass::Guaranteed
        );
        assert_eq!(
            qos(r#"{"requests":{"cpu":"1"},"limits":{"cpu":"2","memory":"1Gi"}}"#),
            QosClass::Burstable
        );
        assert_eq!(qos(r#"{}"#), QosClass::BestEffort);
    }

    #[test]
    fn bad_files() {
        let cases: &[(&str, &str)] = &[
            ("", "invalid JSON at line 1"),
            ("{\"kind\":\"List\",\"items\":[", "invalid JSON"),
            ("{\"kind\":\"Node\"}", "found kind \"Node\""),
            ("[]", "found kind \"\""),
            (
                "{\"kind\":7}",
                "not a Pod, a PodList or a v1 List: invalid type: integer `7`",
            ),
            ("\u{0}", "invalid JSON"),
            (
                r#"{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"x"}}]}"#,
                "item 0: pod has no metadata.uid",
            ),
            (
                r#"{"kind":"List","items":[{"kind":"Pod","metadata":{"uid":"u"},"spec":{"containers":"nope"}}]}"#,
                "item 0: invalid type",
            ),
        ];
        for (text, want) in cases {
            let err = parse_pods_json(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn files_are_read_through_the_window_with_the_result_of_the_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pods.json");
        std::fs::write(&path, EXECUTOR).unwrap();
        let from_file = read_pods_file(&path, "/p").unwrap().unwrap();
        assert_eq!(from_file, parse_pods_json(EXECUTOR.as_bytes()).unwrap());
        assert_eq!(from_file.len(), 1);
        // Past the limit: refused, naming the file and the limit.
        let len = EXECUTOR.len() as u64;
        assert_eq!(read_pods_file_limited(&path, "/p", len).unwrap().unwrap().len(), 1);
        let err = read_pods_file_limited(&path, "/p", len - 1).unwrap_err().to_string();
        assert_eq!(err, format!("/p: larger than the {}-byte limit for this file", len - 1));
        // No file, a directory, a bad document.
        assert!(read_pods_file(&dir.path().join("none"), "/none").unwrap().is_none());
        let err = read_pods_file(dir.path(), "/d").unwrap_err().to_string();
        assert_eq!(err, "/d: is a directory, not a file");
        std::fs::write(&path, r#"{"kind":"List","items":[{"kind":"Pod","metadata":{}}]}"#).unwrap();
        let err = read_pods_file(&path, "/p").unwrap_err().to_string();
        assert!(err.starts_with("item 0: pod has no metadata.uid"), "{err}");
    }

    /// `EXECUTOR`'s pod `n` times over, each with its own UID, one per line: 1.9 MB at 1,000.
    fn many(n: usize) -> String {
        let start = EXECUTOR
            .find("{\n        \"apiVersion\": \"v1\", \"kind\": \"Pod\"")
            .unwrap();
        let end = EXECUTOR
            .rfind(", {\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\"")
            .unwrap();
        let pod = &EXECUTOR[start..end];
        let items: Vec<String> = (0..n).map(|i| pod.replace("39b3c1f2", &format!("{i:08}"))).collect();
        format!(
            "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n{}\n]}}",
            items.join(",\n")
        )
    }

    /// A document many windows long decodes as its items one by one do, whatever the reads'
    /// sizes, and an error far into it is placed where serde_json places it in the whole text.
    #[test]
    fn a_document_many_windows_long_is_decoded_and_placed_as_a_whole() {
        let text = many(1_000);
        assert!(text.len() > 7 * window::WINDOW, "{}", text.len());
        let pods = parse_pods_json(text.as_bytes()).unwrap();
        assert_eq!(pods.len(), 1_000);
        let one = parse_pods_json(EXECUTOR.as_bytes()).unwrap().remove(0);
        for (i, pod) in pods.iter().enumerate() {
            assert_eq!(pod.uid, one.uid.replace("39b3c1f2", &format!("{i:08}")));
            assert_eq!(pod.containers, one.containers);
            assert_eq!(pod.labels, one.labels);
        }
        /// Gives at most 7 bytes a read.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(7).min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        assert_eq!(read_pods(Trickle(text.as_bytes())).unwrap(), pods);

        // A syntax error in item 900: the file's, at serde_json's place.
        let at = text.match_indices("\"restartPolicy\": \"Never\"").nth(900).unwrap().0;
        let mut bad = text.clone();
        bad.replace_range(at..at + 1, "{");
        let whole = serde_json::from_str::<serde_json::Value>(&bad).unwrap_err();
        let err = parse_pods_json(bad.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, PodsError::Json { line, column, .. } if (*line, *column) == (whole.line(), whole.column())),
            "{err} against {whole}"
        );
        // A wrong type in item 950: that item's, with the place serde_json gives.
        let scheduler = "\"schedulerName\": \"volcano\"";
        let at = text.match_indices(scheduler).nth(950).unwrap().0;
        let mut bad = text.clone();
        bad.replace_range(at..at + scheduler.len(), "\"schedulerName\": 7");
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Whole {
            items: Vec<PodObject>,
        }
        let whole = serde_json::from_str::<Whole>(&bad).err().unwrap();
        let err = parse_pods_json(bad.as_bytes()).unwrap_err().to_string();
        assert_eq!(err, format!("item 950: {whole}"));
        assert!(whole.line() > 10_000, "{whole}");
    }

    #[test]
    fn other_kinds_in_a_list_are_skipped_unread() {
        // A Deployment's spec is not a PodSpec; its kind comes first, as the API server writes.
        let text = r#"{"apiVersion":"v1","kind":"List","items":[
            {"kind":"Deployment","metadata":{"name":"d"},"spec":{"containers":"not a list","template":{}}},
            {"kind":"Pod","metadata":{"uid":"u1","name":"a"},"spec":{"containers":[]}},
            {"metadata":{"uid":"u2","name":"b"}}]}"#;
        let pods = parse_pods_json(text.as_bytes()).unwrap();
        let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        // A lone Pod, and a PodList whose items are null.
        let one = parse_pods_json(br#"{"metadata":{"uid":"u","name":"p"},"kind":"Pod"}"#).unwrap();
        assert_eq!(one[0].name, "p");
        assert!(parse_pods_json(br#"{"kind":"PodList","items":null}"#).is_err());
        assert_eq!(parse_pods_json(br#"{"kind":"PodList","items":[]}"#).unwrap(), vec![]);
    }

    /// What a rule reads is kept whether the input has it as it is or escaped, from a file or
    /// from a value (the watch's path); what no rule reads is dropped: managed fields, other
    /// annotations, other variables, `valueFrom` variables, resources besides CPU, memory and
    /// ephemeral storage.
    #[test]
    fn only_what_is_read_is_kept() {
        let text = r#"{"kind": "Pod",
          "metadata": {"name": "d", "namespace": "spark", "uid": "u1", "resourceVersion": "7",
            "managedFields": [{"manager": "kubelet", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}",
                            "scheduling.k8s.io/group-name": "app-\u0070odgroup",
                            "nodemedic.io/fence-on-partition": "true"},
            "labels": {"spark-role": "driver", "sp\u0061rk-app-selector": "spark-1"}},
          "spec": {"containers": [{"name": "spark-kubernetes-driver",
            "env": [{"name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "SPARK_DRIVER_URL", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "KUBERNETES_REQUEST_TIMEOUT", "value": "30000"},
                    {"name": "SPARK_SUBMIT_OPTS", "value": "-Dx=\"y\""},
                    {"name": "OTHER", "value": "z"}],
            "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"}}}]}}"#;
        let check = |p: &PodInfo| {
            assert_eq!(p.annotations.len(), 2, "{:?}", p.annotations);
            assert_eq!(p.annotations["scheduling.k8s.io/group-name"], "app-podgroup");
            assert_eq!(p.annotations["nodemedic.io/fence-on-partition"], "true");
            assert_eq!(p.labels["spark-app-selector"], "spark-1");
            assert_eq!(p.spark_driver_url, None, "a valueFrom variable has no literal value");
            assert_eq!(p.kubernetes_request_timeout_env.as_deref(), Some("30000"));
            assert_eq!(p.spark_submit_opts_env.as_deref(), Some("-Dx=\"y\""));
            assert_eq!(p.containers[0].cpu_limit_millis, Some(2000));
        };
        let from_file = parse_pods_json(text.as_bytes()).unwrap();
        check(&from_file[0]);
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        let object: PodObject = serde_json::from_value(value).unwrap();
        assert_eq!(object.metadata.resource_version.as_deref(), Some("7"));
        assert!(object.metadata.managed_fields.is_none());
        let env: Vec<&str> = object.spec.as_ref().unwrap().containers[0]
            .env
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(env, ["KUBERNETES_REQUEST_TIMEOUT", "SPARK_SUBMIT_OPTS"]);
        check(&pod_info(object).unwrap());
        // The same text read as bytes that are not all UTF-8 is refused with its place.
        let mut bad = text.as_bytes().to_vec();
        let at = text.find("\"z\"").unwrap() + 1;
        bad[at] = 0xff;
        let err = parse_pods_json(&bad).unwrap_err().to_string();
        assert!(err.contains("line 13 column 49"), "{err}");
    }

    /// The QoS class computed when the status has none counts CPU and memory only, as the API
    /// server does: a pod that asks for ephemeral storage alone is BestEffort.
    #[test]
    fn computed_qos_counts_cpu_and_memory_only() {
        let qos = |resources: &str| {
            let text = format!(
                r#"{{"kind":"Pod","metadata":{{"uid":"u","name":"p"}},"spec":{{"containers":[{{"name":"c","resources":{resources}}}]}}}}"#
            );
            parse_pods_json(text.as_bytes()).unwrap().remove(0).qos_class
        };
        assert_eq!(
            qos(r#"{"limits":{"ephemeral-storage":"1Gi"}}"#),
            Some(QosClass::BestEffort)
        );
        assert_eq!(qos(r#"{"requests":{"cpu":"1"}}"#), Some(QosClass::Burstable));
        assert_eq!(
            qos(r#"{"limits":{"cpu":"1","memory":"1Gi"}}"#),
            Some(QosClass::Guaranteed)
        );
        assert_eq!(
            qos(r#"{"limits":{"cpu":"1","memory":"1Gi"},"requests":{"cpu":"500m"}}"#),
            Some(QosClass::Burstable)
        );
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
