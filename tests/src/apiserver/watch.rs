//! Watch streams: newline-delimited JSON `{"type": ..., "object": ...}` events in a chunked
//! HTTP body, as `GET ...?watch=true` answers.
//!
//! A watch first sends what it must catch up on (the current objects as ADDED when no
//! resource version or `"0"` was given, otherwise the retained changes after the given
//! version), then live changes as the store commits them. Label and field selectors apply to
//! events the way the API server applies them: an object that stops matching arrives as
//! DELETED, one that starts matching as ADDED. With `allowWatchBookmarks=true` a BOOKMARK
//! carrying the current resource version is sent every bookmark interval. The stream ends
//! cleanly after `timeoutSeconds`, and is cut (the connection closed mid-body) by
//! [`super::Faults::drop_watches_now`] and friends.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, Interval, Sleep};

use super::resources::ResourceType;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{Change, ChangeType, Store, WatchStart};

/// What a watch request asked for.
#[derive(Debug)]
pub(crate) struct WatchParams {
    pub resource_version: Option<String>,
    pub allow_bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Duration,
    pub label: LabelSelector,
    pub field: FieldSelector,
}

/// Which events of a storage a watch gets.
#[derive(Debug)]
struct Filter {
    rt: &'static ResourceType,
    namespace: Option<String>,
    label: LabelSelector,
    field: FieldSelector,
}

impl Filter {
    fn selects(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns.as_str())
        {
            return false;
        }
        self.label.matches_object(obj) && self.field.matches(|f| self.rt.field_value(obj, f))
    }

    /// The event type this watch sees for a change, if any.
    fn event_type(&self, c: &Change) -> Option<&'static str> {
        match c.kind {
            ChangeType::Added => self.selects(&c.object).then_some("ADDED"),
            ChangeType::Modified => {
                let now = self.selects(&c.object);
                let before = c.prev.as_ref().is_some_and(|p| self.selects(p));
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
            ChangeType::Deleted => {
                let before = c
                    .prev
                    .as_ref()
                    .map_or_else(|| self.selects(&c.object), |p| self.selects(p));
                before.then_some("DELETED")
            }
        }
    }
}

fn line(event_type: &str, object: Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({ "type": event_type, "object": object })).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// The `ERROR` event of a watch whose resource version is gone.
pub(crate) fn error_line(err: &ApiError) -> Bytes {
    line("ERROR", err.to_status())
}

/// The object of a BOOKMARK event as the API server sends it: a new, empty object of the watched
/// type with only `metadata.resourceVersion` set (and the initial-events-end annotation),
/// serialised as Go serialises zero values. Struct fields without `omitempty`, and struct-typed
/// fields even with it, are written out empty, so a pod's bookmark carries
/// `"spec":{"containers":null},"status":{}` and every typed object `"creationTimestamp":null`.
/// Custom resources are unstructured: nothing but `apiVersion`, `kind` and the metadata.
pub(crate) fn bookmark_object(rt: &ResourceType, rv: u64, initial_end: bool) -> Value {
    let mut meta = json!({ "resourceVersion": rv.to_string() });
    if !rt.custom_resource {
        meta["creationTimestamp"] = Value::Null;
    }
    if initial_end {
        meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    let mut obj = json!({ "kind": rt.kind, "apiVersion": rt.api_version(), "metadata": meta });
    let zero = match (rt.group, rt.storage) {
        (_, _) if rt.custom_resource => json!({}),
        ("", "pods") => json!({ "spec": { "containers": null }, "status": {} }),
        ("", "nodes") => json!({
            "spec": {},
            "status": {
                "daemonEndpoints": { "kubeletEndpoint": { "Port": 0 } },
                "nodeInfo": {
                    "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                    "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
                    "operatingSystem": "", "architecture": ""
                }
            }
        }),
        ("", "namespaces") => json!({ "spec": {}, "status": {} }),
        ("", "services") => json!({ "spec": {}, "status": { "loadBalancer": {} } }),
        ("", "persistentvolumeclaims") => json!({ "spec": { "resources": {} }, "status": {} }),
        ("", "events") => json!({
            "involvedObject": {}, "source": {}, "firstTimestamp": null, "lastTimestamp": null,
            "eventTime": null, "reportingComponent": "", "reportingInstance": ""
        }),
        ("events.k8s.io", _) => json!({
            "eventTime": null, "regarding": {}, "deprecatedSource": {},
            "deprecatedFirstTimestamp": null, "deprecatedLastTimestamp": null
        }),
        ("coordination.k8s.io", _) => json!({ "spec": {} }),
        ("resource.k8s.io", _) => json!({ "spec": { "devices": {} }, "status": {} }),
        // ConfigMaps and webhook configurations: every other field is omitted when empty.
        _ => json!({}),
    };
    if let (Some(o), Value::Object(z)) = (obj.as_object_mut(), zero) {
        o.extend(z);
    }
    obj
}

fn bookmark_line(rt: &ResourceType, rv: u64, initial_end: bool) -> Bytes {
    line("BOOKMARK", bookmark_object(rt, rv, initial_end))
}

/// The body of a watch response: chunks of one or more event lines.
pub(crate) type EventStream = Pin<Box<dyn Stream<Item = Result<Bytes, io::Error>> + Send>>;

/// The state of one open watch stream.
struct WatchStream {
    store: Store,
    filter: Filter,
    rx: mpsc::UnboundedReceiver<Arc<Change>>,
    queue: VecDeque<Bytes>,
    bookmarks: Option<Interval>,
    deadline: Pin<Box<Sleep>>,
    cut: watch::Receiver<u64>,
    done: bool,
}

async fn tick(i: &mut Option<Interval>) {
    match i {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

impl WatchStream {
    fn push_change(&mut self, c: &Change) {
        if let Some(t) = self.filter.event_type(c) {
            self.queue.push_back(line(t, self.filter.rt.present(&c.object)));
        }
    }

    async fn next_chunk(&mut self) -> Option<Result<Bytes, io::Error>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(b) = self.queue.pop_front() {
                return Some(Ok(b));
            }
            tokio::select! {
                biased;
                _ = self.cut.changed() => {
                    self.done = true;
                    return Some(Err(io::Error::new(io::ErrorKind::ConnectionAborted, "watch cut by fault injection")));
                }
                _ = &mut self.deadline => {
                    self.done = true;
                    return None;
                }
                c = self.rx.recv() => match c {
                    Some(c) => self.push_change(&c),
                    None => {
                        self.done = true;
                        return None;
                    }
                },
                _ = tick(&mut self.bookmarks) => {
                    let (rv, pending) = self.store.bookmark_point(&mut self.rx);
                    for c in pending {
                        self.push_change(&c);
                    }
                    self.queue.push_back(bookmark_line(self.filter.rt, rv, false));
                }
            }
        }
    }
}

/// Opens a watch and returns its body stream. `Err` only for a request the server refuses
/// before streaming (a malformed resource version); an expired one is an `ERROR` event.
pub(crate) fn open(
    store: &Store,
    rt: &'static ResourceType,
    namespace: Option<&str>,
    params: WatchParams,
    bookmark_interval: Duration,
    cut: watch::Receiver<u64>,
    gone_fault: bool,
) -> Result<EventStream, ApiError> {
    let start = match params.resource_version.as_deref() {
        None | Some("") | Some("0") => WatchStart::Current,
        Some(_) if params.send_initial_events => WatchStart::Current,
        Some(rv) => WatchStart::After(rv.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("resourceVersion: Invalid value: \"{rv}\": must be a number"))
        })?),
    };
    if gone_fault {
        let requested = params
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse::<u64>()
            .unwrap_or(0);
        let err = ApiError::too_old(requested, store.current_rv().max(requested + 1));
        return Ok(Box::pin(futures::stream::iter([Ok(error_line(&err))])));
    }
    let sub = match store.subscribe(rt.storage, start) {
        Ok(s) => s,
        Err(err) => return Ok(Box::pin(futures::stream::iter([Ok(error_line(&err))]))),
    };
    let mut stream = WatchStream {
        store: store.clone(),
        filter: Filter {
            rt,
            namespace: namespace.map(str::to_string),
            label: params.label,
            field: params.field,
        },
        rx: sub.rx,
        queue: VecDeque::new(),
        bookmarks: params.allow_bookmarks.then(|| {
            let period = bookmark_interval.max(Duration::from_millis(10));
            let mut i = tokio::time::interval_at(Instant::now() + period, period);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        }),
        deadline: Box::pin(tokio::time::sleep(params.timeout)),
        cut,
        done: false,
    };
    for c in &sub.initial {
        stream.push_change(c);
    }
    if params.send_initial_events && params.allow_bookmarks {
        stream.queue.push_back(bookmark_line(rt, sub.rv, true));
    }
    Ok(Box::pin(futures::stream::unfold(stream, |mut s| async move {
        s.next_chunk().await.map(|item| (item, s))
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources;

    fn change(kind: ChangeType, obj: Value, prev: Option<Value>) -> Change {
        Change {
            rv: 1,
            storage: "pods",
            kind,
            object: obj,
            prev,
        }
    }

    #[test]
    fn selector_transitions_become_added_and_deleted() {
        let f = Filter {
            rt: resources::resolve("pods").unwrap(),
            namespace: Some("ns".into()),
            label: LabelSelector::default(),
            field: FieldSelector::parse("spec.nodeName=n1").unwrap(),
        };
        let on = |node: &str| json!({"metadata": {"namespace": "ns", "name": "p"}, "spec": {"nodeName": node}});
        assert_eq!(f.event_type(&change(ChangeType::Added, on("n1"), None)), Some("ADDED"));
        assert_eq!(f.event_type(&change(ChangeType::Added, on("n2"), None)), None);
        assert_eq!(
            f.event_type(&change(ChangeType::Modified, on("n1"), Some(on("")))),
            Some("ADDED")
        );
        assert_eq!(
            f.event_type(&change(ChangeType::Modified, on("n2"), Some(on("n1")))),
            Some("DELETED")
        );
        assert_eq!(
            f.event_type(&change(ChangeType::Modified, on("n1"), Some(on("n1")))),
            Some("MODIFIED")
        );
        assert_eq!(
            f.event_type(&change(ChangeType::Deleted, on("n1"), Some(on("n1")))),
            Some("DELETED")
        );
        let other_ns = json!({"metadata": {"namespace": "x", "name": "p"}, "spec": {"nodeName": "n1"}});
        assert_eq!(f.event_type(&change(ChangeType::Added, other_ns, None)), None);
    }

    #[test]
    fn bookmarks_are_empty_objects_of_the_watched_type() {
        let pod = bookmark_object(resources::resolve("pods").unwrap(), 1234, false);
        assert_eq!(
            pod.to_string(),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1234","creationTimestamp":null},"spec":{"containers":null},"status":{}}"#
        );
        let svc = bookmark_object(resources::resolve("services").unwrap(), 7, true);
        assert_eq!(svc["status"], json!({"loadBalancer": {}}));
        assert_eq!(svc["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
        let cm = bookmark_object(resources::resolve("configmaps").unwrap(), 7, false);
        assert_eq!(
            cm,
            json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "7", "creationTimestamp": null}})
        );
        let app = bookmark_object(resources::resolve("sparkapp").unwrap(), 7, false);
        assert_eq!(
            app,
            json!({"kind": "SparkApplication", "apiVersion": "sparkoperator.k8s.io/v1beta2", "metadata": {"resourceVersion": "7"}})
        );
        let ev = bookmark_object(resources::resolve("events.events.k8s.io").unwrap(), 7, false);
        assert_eq!(ev["eventTime"], Value::Null);
        assert!(
            ev.get("involvedObject").is_none() && ev["regarding"] == json!({}),
            "{ev}"
        );
    }
}
