//! The watch of this node's pods: list, then watch from the list's resource version, with a
//! store that the scan loop reads.
//!
//! It is written out here rather than taken from kube-runtime's `watcher` for two reasons
//! that matter at fleet scale. Backoff: the watcher yields an event before every list attempt
//! and its backoff starts over on any event, so a list that fails every time is retried at a
//! flat second or so, from every node at once; here each failure (list or watch) doubles a
//! jittered pause from 1 s to [`WATCH_BACKOFF_CAP`], and only a watch that ran (for
//! [`SHORT_WATCH`] or more, or delivered a change) starts it over: a server that answers every
//! watch with `410 Gone` or cuts it at once gets relists at the backoff's pace, not in a loop. Health: the watcher says nothing when a watch
//! resumes without events, so "up" could only be learned from the next pod change; here the
//! watch is up from the moment the API server answers the watch request (HTTP 200) until it
//! fails, whether or not any pod changes.
//!
//! A watch the server ends (its `timeoutSeconds`, a cut connection) is resumed at once from the
//! last resource version seen (events and bookmarks move it); `410 Gone` lists again. A watch
//! that sends nothing, not even a bookmark, for [`WATCH_IDLE`] is treated as broken.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use tokio::sync::Notify;
// tokio's clock: the system's monotonic clock, except under a test's paused clock.
use tokio::time::Instant;

use super::serve::Health;
use nodemedic_rules::snapshot::PodInfo;

use crate::collect::pods::{PodObject, pod_info};
use crate::metrics::Metrics;
use crate::retry::Backoff;

/// The longest pause between two failed attempts: after an outage the watch is back within
/// this long of the API server's return.
pub const WATCH_BACKOFF_CAP: Duration = Duration::from_secs(30);
/// The server ends each watch after about this long (`timeoutSeconds`); it is then resumed.
const WATCH_TIMEOUT_SECONDS: u32 = 290;
/// Nothing at all on an open watch for this long: the connection is dead.
const WATCH_IDLE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECONDS as u64 + 60);
/// A watch that ends sooner than this after it was accepted did not really run: the pause
/// before resuming it is not reset.
const SHORT_WATCH: Duration = Duration::from_secs(5);

/// Why a watch ended when the server said `410 Gone`.
const GONE: &str = "410 Gone";

/// This node's pods by `namespace/name`, as the watch last saw them: in the form the rules
/// read ([`PodInfo`]), converted once when they arrive, so a cycle copies them and the store
/// keeps a fraction of the API objects' size.
#[derive(Debug, Default)]
pub struct PodStore {
    pods: BTreeMap<String, PodInfo>,
    /// Pods that changed since the API work last looked (both versions of a pod replaced
    /// under the same name): the driver lookups they may answer are forgotten at once.
    changed: Vec<PodInfo>,
    /// The store was filled by a list since the API work last looked: changes may have been
    /// missed, so every driver lookup is forgotten.
    relisted: bool,
    /// Counts the changes the store has seen: the scan loop judges again only when it moved.
    generation: u64,
}

impl PodStore {
    fn key(p: &PodObject) -> String {
        format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or(""),
            p.metadata.name.as_deref().unwrap_or("")
        )
    }

    fn info_key(p: &PodInfo) -> String {
        format!("{}/{}", p.namespace, p.name)
    }

    /// Takes the pods that changed since the last call, and whether the store was
    /// listed anew meanwhile.
    pub fn take_changes(&mut self) -> (bool, Vec<PodInfo>) {
        (std::mem::take(&mut self.relisted), std::mem::take(&mut self.changed))
    }

    fn note_change(&mut self, pod: &PodInfo) {
        // Every pod, not only Spark's: a client-mode driver is often a notebook without Spark
        // labels, found by its IP.
        self.changed.push(pod.clone());
    }

    /// Puts `pod` in the store (added or modified).
    fn put(&mut self, pod: PodObject) {
        let Some(info) = pod_info(pod) else {
            return;
        };
        self.generation += 1;
        self.note_change(&info);
        let uid = info.uid.clone();
        if let Some(old) = self.pods.insert(PodStore::info_key(&info), info) {
            if old.uid != uid {
                self.note_change(&old);
            }
        }
    }

    /// Takes `pod` out of the store (deleted).
    fn remove(&mut self, pod: PodObject) {
        self.generation += 1;
        if let Some(old) = self.pods.remove(&PodStore::key(&pod)) {
            self.note_change(&old);
        }
        if let Some(info) = pod_info(pod) {
            if self.changed.last().is_none_or(|l| l.uid != info.uid) {
                self.note_change(&info);
            }
        }
    }

    /// Replaces the whole store with a list's pods.
    pub(crate) fn fill(&mut self, pods: Vec<PodObject>) {
        self.pods = pods
            .into_iter()
            .filter_map(pod_info)
            .map(|p| (PodStore::info_key(&p), p))
            .collect();
        self.changed.clear();
        self.relisted = true;
        self.generation += 1;
    }

    /// How many changes the store has seen (a list, an added, modified or deleted pod): the
    /// same number means the same pods.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every pod in the store.
    pub fn pods(&self) -> impl Iterator<Item = &PodInfo> {
        self.pods.values()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// The store the watch writes and the scan loop reads.
pub type SharedStore = Arc<RwLock<PodStore>>;

/// What the watch reports to the rest of the daemon.
#[derive(Debug, Clone)]
pub struct WatchSignals {
    pub health: Arc<Health>,
    pub metrics: Metrics,
    /// Notified when the pods changed (the scan loop runs a cycle soon).
    pub wake: Arc<Notify>,
    /// Told when a watch stream fails (its requests are reported by the client) and when a
    /// change or bookmark arrives on it: both are news of the API server. The watch's list
    /// after a failure is one of the requests that tell the other API loops, through the
    /// contact's `back_signal`, that the API server serves again.
    pub contact: Arc<crate::contact::ApiContact>,
}

impl WatchSignals {
    fn up(&self, up: bool) {
        self.health.watch_up.store(up, Ordering::Relaxed);
        self.metrics.pod_watch_up.set(i64::from(up));
    }
}

/// Lists and watches this node's pods forever. Only an error the API server or the network
/// returns stops a step; every retry waits its backoff.
/// `deadline`: how long the list, and the start of each watch, may take.
pub async fn run(client: kube::Client, node: String, store: SharedStore, signals: WatchSignals, deadline: Duration) {
    let api: Api<PodObject> = Api::all(client);
    let selector = format!("spec.nodeName={node}");
    let mut backoff = Backoff::new(Duration::from_secs(1), WATCH_BACKOFF_CAP, 0x77a7c4);
    'list: loop {
        // resourceVersion=0: served from the API server's watch cache, not from etcd.
        // The watch's client has no read timeout (a quiet watch sends nothing for minutes), so
        // the list and the start of each watch get the request timeout here.
        let params = ListParams::default().fields(&selector).match_any();
        let list = match crate::kube_api::with_deadline("LIST", format!("pods {selector}"), deadline, api.list(&params))
            .await
        {
            Ok(list) => list,
            Err(e) => {
                signals.up(false);
                let pause = backoff.fail();
                tracing::warn!(error = %e, retry_in_s = pause.as_secs_f64(), "pod list failed");
                tokio::time::sleep(pause).await;
                continue 'list;
            }
        };
        let mut version = list.metadata.resource_version.clone().unwrap_or_default();
        if let Ok(mut s) = store.write() {
            s.fill(list.items);
        }
        signals.health.pods_synced.store(true, Ordering::Relaxed);
        signals.up(true);
        signals.wake.notify_one();
        loop {
            let params = WatchParams::default().fields(&selector).timeout(WATCH_TIMEOUT_SECONDS);
            let started = tokio::time::timeout(deadline, api.watch(&params, &version)).await;
            let stream = match started {
                Ok(Ok(s)) => s,
                Err(_) => {
                    signals.up(false);
                    let pause = backoff.fail();
                    tracing::warn!(
                        error = %crate::kube_api::Error::Timeout {
                            verb: "WATCH",
                            resource: format!("pods {selector}"),
                            seconds: deadline.as_secs_f64().ceil() as u64,
                        },
                        retry_in_s = pause.as_secs_f64(),
                        "pod watch failed"
                    );
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 410 => {
                    let pause = backoff.fail();
                    tracing::info!(
                        retry_in_s = pause.as_secs_f64(),
                        "pod watch: resource version {version} expired; listing again"
                    );
                    tokio::time::sleep(pause).await;
                    continue 'list;
                }
                Ok(Err(e)) => {
                    signals.up(false);
                    let pause = backoff.fail();
                    tracing::warn!(error = %crate::kube_api::Error::request("WATCH", format!("pods {selector}"), &e),
                        retry_in_s = pause.as_secs_f64(), "pod watch failed");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            // The API server accepted the watch: established, whether or not a pod changes.
            signals.up(true);
            let began = Instant::now();
            let mut changes = 0u64;
            let mut stream = std::pin::pin!(stream);
            let ended = loop {
                let next = match tokio::time::timeout(WATCH_IDLE, stream.next()).await {
                    Ok(Some(n)) => n,
                    Ok(None) => break None,
                    Err(_) => break Some(format!("no event nor bookmark for {} s", WATCH_IDLE.as_secs())),
                };
                match &next {
                    Ok(_) => signals.contact.streamed(),
                    Err(e) => signals.contact.failed(&format!("pod watch stream: {e}")),
                }
                match next {
                    Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)) => {
                        version = p.metadata.resource_version.clone().unwrap_or(version);
                        if let Ok(mut s) = store.write() {
                            s.put(p);
                        }
                        changes += 1;
                        signals.wake.notify_one();
                    }
                    Ok(WatchEvent::Deleted(p)) => {
                        version = p.metadata.resource_version.clone().unwrap_or(version);
                        if let Ok(mut s) = store.write() {
                            s.remove(p);
                        }
                        changes += 1;
                        signals.wake.notify_one();
                    }
                    Ok(WatchEvent::Bookmark(b)) => version = b.metadata.resource_version,
                    Ok(WatchEvent::Error(status)) if status.code == 410 => break Some(GONE.to_string()),
                    Ok(WatchEvent::Error(status)) => break Some(format!("error event: {}", status.message)),
                    Err(e) => break Some(e.to_string()),
                }
            };
            let ran = began.elapsed();
            let worked = ran >= SHORT_WATCH || changes > 0;
            if worked {
                backoff.reset();
            }
            match ended {
                // The server closed it (its timeout) after it ran: resume at once.
                None if worked => {}
                Some(why) if why == GONE => {
                    let pause = if worked { Duration::ZERO } else { backoff.fail() };
                    tracing::info!(
                        retry_in_s = pause.as_secs_f64(),
                        "pod watch: resource version {version} expired; listing again"
                    );
                    tokio::time::sleep(pause).await;
                    continue 'list;
                }
                why => {
                    if why.is_some() {
                        signals.up(false);
                    }
                    let pause = backoff.fail();
                    tracing::info!(
                        reason = why.as_deref().unwrap_or("closed early by the server"),
                        ran_s = ran.as_secs_f64(),
                        retry_in_s = pause.as_secs_f64(),
                        "pod watch ended; resuming"
                    );
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str, role: Option<&str>) -> PodObject {
        let labels = role.map_or(serde_json::json!({}), |r| serde_json::json!({"spark-role": r}));
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "labels": labels},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    fn uids(changed: &[PodInfo]) -> Vec<&str> {
        changed.iter().map(|p| p.uid.as_str()).collect()
    }

    #[test]
    fn pod_changes_are_kept_for_the_driver_cache() {
        let mut store = PodStore::default();
        store.fill(vec![pod("d", "d1", Some("driver")), pod("web", "w1", None)]);
        assert_eq!(store.len(), 2);
        let (relisted, changed) = store.take_changes();
        assert!(relisted, "a list may have missed changes: everything is forgotten");
        assert!(changed.is_empty());

        // Every modification counts (a client-mode driver may be any pod, found by its IP).
        store.put(pod("d", "d1", Some("driver")));
        store.put(pod("web", "w1", None));
        let (relisted, changed) = store.take_changes();
        assert!(!relisted);
        assert_eq!(uids(&changed), ["d1", "w1"]);

        // Replaced under the same name: both the old pod and the new one.
        store.put(pod("d", "d2", Some("driver")));
        assert_eq!(uids(&store.take_changes().1), ["d2", "d1"]);

        // Deleted: once.
        store.remove(pod("d", "d2", Some("driver")));
        assert_eq!(uids(&store.take_changes().1), ["d2"]);
        assert_eq!(store.len(), 1);
        assert_eq!(store.pods().next().map(|p| p.uid.as_str()), Some("w1"));
        // Taken changes are gone.
        assert_eq!(store.take_changes(), (false, vec![]));
    }
}
