//! Fault injection: an API server that is down, refusing connections, slow, failing, or
//! cutting watches.
//!
//! Rules name a verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
//! `deletecollection`, or `*`) and a resource (`pods`, `nodes`, `events`, a group-qualified
//! `events.events.k8s.io`, a subresource `nodes/status`, a non-resource path such as
//! `/version` or `/metrics`, or `*`). `nodes` also covers `nodes/status`; `events` covers both
//! Event APIs. Non-resource paths are matched with the verb `get`. Rules are applied before
//! the request is checked, as the API server authenticates and authorizes first: a resource
//! request the handler would refuse (a method the path does not take, a malformed `watch`
//! flag) still meets the rules for its resource whose verb is `*`, and a path nothing serves
//! is a non-resource path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::listener::ListenerSlot;

/// What a request is, for matching rules against it.
#[derive(Debug, Clone)]
pub(crate) struct Target<'a> {
    pub verb: &'a str,
    /// Plural name, or the path for non-resource requests.
    pub resource: &'a str,
    pub group: &'a str,
    pub subresource: Option<&'a str>,
}

impl Target<'_> {
    fn matches(&self, verb: &str, resource: &str) -> bool {
        if verb != "*" && verb != self.verb {
            return false;
        }
        if resource == "*" {
            return true;
        }
        let (res, sub) = match resource.split_once('/') {
            Some((r, s)) if !r.is_empty() => (r, Some(s)),
            _ => (resource, None),
        };
        if res.starts_with('/') || resource.starts_with('/') {
            return resource == self.resource;
        }
        let name_ok =
            res == self.resource || (!self.group.is_empty() && res == format!("{}.{}", self.resource, self.group));
        let sub_ok = match sub {
            None => true,
            Some(s) => self.subresource == Some(s),
        };
        name_ok && sub_ok
    }
}

#[derive(Debug, Clone)]
struct LatencyRule {
    verb: String,
    resource: String,
    delay: Duration,
}

/// An injected error answer.
#[derive(Debug, Clone)]
pub(crate) struct FailRule {
    verb: String,
    resource: String,
    pub status: u16,
    /// Remaining answers; `None` until cleared.
    times: Option<u32>,
    pub retry_after: Option<u32>,
}

#[derive(Debug, Default)]
struct Rules {
    latency: Vec<LatencyRule>,
    fails: Vec<FailRule>,
    gone_on_every_watch: bool,
}

#[derive(Debug)]
struct Inner {
    down: AtomicBool,
    refusing: AtomicBool,
    /// A write runs to its end after its client disconnected (see `set_writes_outlive_clients`).
    writes_outlive_clients: AtomicBool,
    /// The listening sockets of the server using these faults, closed while refusing.
    listeners: Mutex<Vec<Weak<ListenerSlot>>>,
    rules: Mutex<Rules>,
    /// Bumped to cut every open watch stream.
    drop_epoch: watch::Sender<u64>,
    /// The period of automatic cuts, read by the server's ticker task.
    drop_every: watch::Sender<Option<Duration>>,
}

/// A clone-able handle to the double's fault injection. Everything applies to requests that
/// arrive after the call; [`Faults::clear`] restores a healthy server.
#[derive(Debug, Clone)]
pub struct Faults {
    inner: Arc<Inner>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults::new()
    }
}

impl Faults {
    pub fn new() -> Faults {
        Faults {
            inner: Arc::new(Inner {
                down: AtomicBool::new(false),
                refusing: AtomicBool::new(false),
                writes_outlive_clients: AtomicBool::new(false),
                listeners: Mutex::new(Vec::new()),
                rules: Mutex::new(Rules::default()),
                drop_epoch: watch::channel(0).0,
                drop_every: watch::channel(None).0,
            }),
        }
    }

    fn rules(&self) -> MutexGuard<'_, Rules> {
        self.inner.rules.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// While down, the server accepts TCP connections and closes them at once without a
    /// byte (a TLS handshake fails, a plain HTTP client sees the connection closed), requests
    /// on kept-alive connections are answered by closing the connection, and open watch
    /// streams are cut. Going up again serves normally.
    pub fn set_down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
        if down {
            self.drop_watches_now();
        }
    }

    pub fn is_down(&self) -> bool {
        self.inner.down.load(Ordering::SeqCst)
    }

    /// While refusing, nothing listens on the server's HTTP and HTTPS ports: a `connect()`
    /// fails with ECONNREFUSED (`io::ErrorKind::ConnectionRefused`), as when the API server
    /// process is not running. Turning it on closes both listening sockets and every open
    /// connection (open watch streams are cut mid-body, kept-alive connections are closed);
    /// turning it off listens again on the same addresses, so URLs and kubeconfigs written
    /// before stay valid, and the server serves normally. Both take effect before the call
    /// returns.
    ///
    /// Connection attempts made while refusing never reach the server and are therefore not
    /// in [`super::ApiServer::requests`]; a request that raced the close on an
    /// already-open connection is recorded with status 0, as while [`Faults::set_down`].
    ///
    /// Panics if the port cannot be bound again when turned off (something else took it
    /// meanwhile, which is unlikely for the short outages of a test).
    pub fn set_refusing(&self, refusing: bool) {
        // The lock also keeps concurrent calls from interleaving their closes and opens.
        let mut listeners = self.inner.listeners.lock().unwrap_or_else(PoisonError::into_inner);
        listeners.retain(|l| l.strong_count() > 0);
        let slots: Vec<Arc<ListenerSlot>> = listeners.iter().filter_map(Weak::upgrade).collect();
        if refusing {
            // Flag first: requests on connections not yet closed are not served.
            self.inner.refusing.store(true, Ordering::SeqCst);
            for slot in &slots {
                slot.close();
            }
        } else {
            // Flag first: a connection accepted on a re-opened socket is served.
            self.inner.refusing.store(false, Ordering::SeqCst);
            for slot in &slots {
                slot.open();
            }
        }
        drop(listeners);
        if refusing {
            self.drop_watches_now();
        }
    }

    pub fn is_refusing(&self) -> bool {
        self.inner.refusing.load(Ordering::SeqCst)
    }

    /// Delays matching requests by `delay` before they are handled (a watch's response
    /// headers are delayed). A zero delay removes the rule. When several rules match, the most
    /// specific wins: exact verb and resource, then verb with `*`, then `*` with resource.
    ///
    /// A request whose client gives up and disconnects during its delay is dropped, never
    /// carried out nor recorded, as kube-apiserver (1.16 and later) cancels a request's context
    /// when its client goes, and with it the webhook calls and the storage write; with
    /// [`Faults::set_writes_outlive_clients`] a write is carried out anyway.
    pub fn set_latency(&self, verb: &str, resource: &str, delay: Duration) {
        let mut r = self.rules();
        r.latency.retain(|l| !(l.verb == verb && l.resource == resource));
        if !delay.is_zero() {
            r.latency.push(LatencyRule {
                verb: verb.to_string(),
                resource: resource.to_string(),
                delay,
            });
        }
    }

    /// On: a write (any method but GET and HEAD) runs to its end, injected delay included,
    /// even when its client gives up and disconnects meanwhile: the object is stored `delay`
    /// after the request arrived and the request recorded with the answer nobody read;
    /// concurrent creates of one name give the later ones 409 `AlreadyExists`. This is what a
    /// client meets when something between it and the API server does not pass its abort on
    /// (a proxy or gateway that keeps the upstream request going), or when the write reached
    /// storage just as the client gave up. Off (the default): the request is cancelled with the
    /// connection, as kube-apiserver does (see [`Faults::set_latency`]). Not reset by
    /// [`Faults::clear`].
    pub fn set_writes_outlive_clients(&self, on: bool) {
        self.inner.writes_outlive_clients.store(on, Ordering::SeqCst);
    }

    pub fn writes_outlive_clients(&self) -> bool {
        self.inner.writes_outlive_clients.load(Ordering::SeqCst)
    }

    /// Answers matching requests with HTTP `status` and a real `metav1.Status` body (reason
    /// from the code: 429 `TooManyRequests`, 500 `InternalError`, 503 `ServiceUnavailable`,
    /// 403 `Forbidden`, 401 `Unauthorized`, ...). `fail("*", "*", 401, None, None)` answers
    /// every request, watches, discovery, `/version`, health and `/metrics` included, as the
    /// API server answers a client whose credentials it rejects. `times: Some(n)` answers the next `n` matching requests so,
    /// `None` every one until cleared. `retry_after` adds a `Retry-After` header and
    /// `details.retryAfterSeconds`. A new rule for the same verb and resource replaces the old;
    /// rules are tried in the order they were set.
    pub fn fail(&self, verb: &str, resource: &str, status: u16, times: Option<u32>, retry_after: Option<u32>) {
        let mut r = self.rules();
        r.fails.retain(|f| !(f.verb == verb && f.resource == resource));
        if times != Some(0) {
            r.fails.push(FailRule {
                verb: verb.to_string(),
                resource: resource.to_string(),
                status,
                times,
                retry_after,
            });
        }
    }

    /// Cuts every open watch stream now (the connection is closed mid-body, as when an API
    /// server restarts or a load balancer drops an idle connection).
    pub fn drop_watches_now(&self) {
        self.inner.drop_epoch.send_modify(|e| *e += 1);
    }

    /// Cuts open watch streams every `period` (`None` stops it).
    pub fn drop_watches_every(&self, period: Option<Duration>) {
        self.inner.drop_every.send_replace(period.filter(|p| !p.is_zero()));
    }

    /// While on, every watch answers with a single `ERROR` event carrying a 410 `Expired`
    /// Status and ends, whatever resource version it asks for; clients must relist.
    pub fn gone_on_every_watch(&self, on: bool) {
        self.rules().gone_on_every_watch = on;
    }

    /// Back to a healthy server: up, listening, no latency, no failures, no watch cuts.
    pub fn clear(&self) {
        self.inner.down.store(false, Ordering::SeqCst);
        if self.is_refusing() {
            self.set_refusing(false);
        }
        *self.rules() = Rules::default();
        self.inner.drop_every.send_replace(None);
    }

    // ---- used by the server ----

    /// Registers one of the server's listening sockets for [`Faults::set_refusing`].
    pub(crate) fn attach_listener(&self, slot: &Arc<ListenerSlot>) {
        let mut listeners = self.inner.listeners.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_refusing() {
            slot.close();
        }
        listeners.push(Arc::downgrade(slot));
    }

    pub(crate) fn latency_for(&self, t: &Target<'_>) -> Option<Duration> {
        let r = self.rules();
        let rank = |l: &LatencyRule| match (l.verb == "*", l.resource == "*") {
            (false, false) => 0,
            (false, true) => 1,
            (true, false) => 2,
            (true, true) => 3,
        };
        r.latency
            .iter()
            .filter(|l| t.matches(&l.verb, &l.resource))
            .min_by_key(|l| rank(l))
            .map(|l| l.delay)
    }

    /// The failure to answer with, if a rule matches; counts it against `times`.
    pub(crate) fn take_failure(&self, t: &Target<'_>) -> Option<FailRule> {
        let mut r = self.rules();
        let i = r.fails.iter().position(|f| t.matches(&f.verb, &f.resource))?;
        let rule = r.fails[i].clone();
        if let Some(n) = &mut r.fails[i].times {
            *n -= 1;
            if *n == 0 {
                r.fails.remove(i);
            }
        }
        Some(rule)
    }

    pub(crate) fn gone_on_watch(&self) -> bool {
        self.rules().gone_on_every_watch
    }

    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.inner.drop_epoch.subscribe()
    }

    pub(crate) fn drop_period(&self) -> watch::Receiver<Option<Duration>> {
        self.inner.drop_every.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t<'a>(verb: &'a str, resource: &'a str, group: &'a str, sub: Option<&'a str>) -> Target<'a> {
        Target {
            verb,
            resource,
            group,
            subresource: sub,
        }
    }

    #[test]
    fn matching() {
        let pods = t("list", "pods", "", None);
        assert!(pods.matches("list", "pods"));
        assert!(pods.matches("*", "pods"));
        assert!(pods.matches("list", "*"));
        assert!(!pods.matches("watch", "pods"));
        let status = t("patch", "nodes", "", Some("status"));
        assert!(status.matches("patch", "nodes"));
        assert!(status.matches("patch", "nodes/status"));
        assert!(!t("patch", "nodes", "", None).matches("patch", "nodes/status"));
        let ev = t("create", "events", "events.k8s.io", None);
        assert!(ev.matches("create", "events"));
        assert!(ev.matches("create", "events.events.k8s.io"));
        assert!(!t("create", "events", "", None).matches("create", "events.events.k8s.io"));
        let version = t("get", "/version", "", None);
        assert!(version.matches("get", "/version"));
        assert!(version.matches("*", "*"));
        assert!(!version.matches("get", "pods"));
    }

    #[test]
    fn fail_counts_down_and_latency_prefers_specific() {
        let f = Faults::new();
        f.fail("list", "pods", 429, Some(2), Some(1));
        let target = t("list", "pods", "", None);
        assert_eq!(f.take_failure(&target).map(|r| r.status), Some(429));
        assert_eq!(f.take_failure(&target).map(|r| r.retry_after), Some(Some(1)));
        assert!(f.take_failure(&target).is_none());
        f.set_latency("*", "*", Duration::from_millis(5));
        f.set_latency("list", "pods", Duration::from_millis(50));
        assert_eq!(f.latency_for(&target), Some(Duration::from_millis(50)));
        assert_eq!(
            f.latency_for(&t("get", "nodes", "", None)),
            Some(Duration::from_millis(5))
        );
        f.clear();
        assert_eq!(f.latency_for(&target), None);
    }
}
