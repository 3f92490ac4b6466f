//! A fake API server for the daemon's API loops, under tokio's paused clock: a tower service
//! that [`kube::Client::new`] takes, which records every request (when, on the paused clock;
//! which client; method and path) and answers as the test's [`Mode`] says: from a small store
//! while serving, with an error (no answer: a refused connection) or with `401` to everything.
//!
//! No socket is opened: under a paused clock, tokio advances time whenever every task waits,
//! even for bytes already on their way through a loopback socket, so only answers computed in
//! the service itself keep the request sequence exact.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::kube_api::ContactLayer;

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// From its store.
    Serving,
    /// No answer at all: the request fails as a refused connection does.
    Refusing,
    /// `401 Unauthorized` to every request.
    Unauthorized,
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub(super) struct Sent {
    /// On the paused clock, from the fake's start.
    pub at: Duration,
    /// Which agent sent it (see [`FakeApi::client_of`]).
    pub agent: usize,
    /// Which of the agent's clients sent it (see [`FakeApi::client`]).
    pub client: &'static str,
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The answer's status; `None`: refused.
    pub status: Option<u16>,
}

impl Sent {
    /// What the request is, in the words of the e2e tests' breakdowns.
    pub fn kind(&self) -> &'static str {
        let (m, p) = (self.method.as_str(), self.path.as_str());
        if self.client == "watch" {
            return if p.contains("watch=true") {
                "watch pods"
            } else {
                "list pods"
            };
        }
        if p.contains("/leases") {
            return match m {
                "GET" => "get lease",
                "PUT" => "update lease",
                "POST" => "create lease",
                _ => "other",
            };
        }
        if self.client == "target" {
            return if p.starts_with("/version") {
                "probe get"
            } else if m == "POST" && p.contains("dryRun=All") {
                "probe dry-run"
            } else if p.starts_with("/api/v1/pods") {
                "probe list"
            } else {
                "other"
            };
        }
        if p.starts_with("/metrics") {
            "get /metrics"
        } else if p.contains("webhookconfigurations") {
            "list webhooks"
        } else if m == "PATCH" && p.contains("/nodes/") {
            "patch node status"
        } else if m == "POST" && p.contains("/events") {
            "create event"
        } else if m == "GET" && p.contains("/pods?") && p.contains("labelSelector") {
            "list drivers"
        } else if m == "GET" && p.contains("/pods/") {
            "get driver"
        } else if m == "GET" && p.starts_with("/api/v1/namespaces/") && !p["/api/v1/namespaces/".len()..].contains('/')
        {
            "get namespace"
        } else {
            "other"
        }
    }

    /// The request's loop in the e2e test's budget.
    pub fn task(&self) -> &'static str {
        match (self.client, self.kind()) {
            ("watch", _) => "watch",
            ("apiwork", _) => "apiwork",
            (_, "get lease" | "update lease" | "create lease") => "election",
            _ => "probes",
        }
    }
}

/// An open watch: its body's sender (held: the body ends when it is dropped), and when the
/// server ends it (`timeoutSeconds`).
struct OpenWatch {
    _body: futures::channel::mpsc::UnboundedSender<Bytes>,
    until: Instant,
}

struct State {
    mode: Mode,
    log: Vec<Sent>,
    /// Every pod, of every node.
    pods: Vec<Value>,
    lease: Option<Value>,
    version: u64,
    watches: Vec<OpenWatch>,
    /// After this many accepted Lease updates, switch to the mode and cut the open watches.
    switch: Option<(usize, Mode)>,
    /// When, and how many requests the log held then.
    switched_at: Option<(Instant, usize)>,
}

/// The fake API server. Cheap to clone: the clones share one store and one log.
#[derive(Clone)]
pub(super) struct FakeApi {
    state: Arc<Mutex<State>>,
    start: Instant,
}

pub(super) type Body = BoxBody<Bytes, Infallible>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn full(v: &Value) -> Body {
    Full::new(Bytes::from(v.to_string())).boxed()
}

fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": reason, "reason": reason,
           "code": code})
}

fn query<'a>(path: &'a str, key: &str) -> Option<&'a str> {
    path.split_once('?')?
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// Whether `pod`'s labels match an equality selector (`a%3Db%2Cc%3Dd`, as sent).
fn selected(pod: &Value, selector: &str) -> bool {
    let selector = selector.replace("%3D", "=").replace("%2C", ",");
    selector
        .split(',')
        .filter(|t| !t.is_empty())
        .all(|term| match term.split_once('=') {
            Some((k, v)) => pod["metadata"]["labels"][k] == v,
            None => !pod["metadata"]["labels"][term].is_null(),
        })
}

impl FakeApi {
    /// A serving fake with `pods` (of any node: a list by `spec.nodeName` selects).
    pub fn new(pods: Vec<Value>) -> Self {
        FakeApi {
            state: Arc::new(Mutex::new(State {
                mode: Mode::Serving,
                log: vec![],
                pods,
                lease: None,
                version: 100,
                watches: vec![],
                switch: None,
                switched_at: None,
            })),
            start: Instant::now(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The paused clock's time since the fake started.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Sets the mode; every open watch is cut (its stream ends, as when the server ends it).
    pub fn set_mode(&self, mode: Mode) {
        let mut s = self.state();
        s.mode = mode;
        s.watches.clear();
    }

    /// Switches to `mode` (and cuts the open watches) right after answering the `n`th accepted
    /// Lease update; [`FakeApi::switched_at`] then says when.
    pub fn switch_after_updates(&self, n: usize, mode: Mode) {
        self.state().switch = Some((n, mode));
    }

    /// When the switch of [`FakeApi::switch_after_updates`] happened, and how many requests
    /// came before it.
    pub fn switched_at(&self) -> Option<(Duration, usize)> {
        self.state().switched_at.map(|(t, n)| (t - self.start, n))
    }

    pub fn log(&self) -> Vec<Sent> {
        self.state().log.clone()
    }

    /// The Lease's holder, as stored.
    pub fn holder(&self) -> Option<String> {
        self.state()
            .lease
            .as_ref()
            .and_then(|l| l["spec"]["holderIdentity"].as_str())
            .map(str::to_string)
    }

    /// A client of the agent, its requests recorded as `tag`'s; with `contact`, reported to it
    /// as the daemon's clients report theirs.
    pub fn client(&self, tag: &'static str, contact: Option<&Arc<crate::contact::ApiContact>>) -> kube::Client {
        self.client_of(0, tag, contact)
    }

    /// [`FakeApi::client`] of agent `agent` of a fleet.
    pub fn client_of(
        &self,
        agent: usize,
        tag: &'static str,
        contact: Option<&Arc<crate::contact::ApiContact>>,
    ) -> kube::Client {
        let fake = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let fake = fake.clone();
            async move { fake.answer(agent, tag, req).await }
        });
        match contact {
            Some(c) => kube::Client::new(tower::Layer::layer(&ContactLayer(c.clone()), service), "default"),
            None => kube::Client::new(service, "default"),
        }
    }

    async fn answer(
        &self,
        agent: usize,
        tag: &'static str,
        req: http::Request<kube::client::Body>,
    ) -> Result<http::Response<Body>, BoxError> {
        let method = req.method().to_string();
        let path = req.uri().path_and_query().map_or_else(String::new, |p| p.to_string());
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut s = self.state();
        let at = self.now();
        let mut sent = Sent {
            at,
            agent,
            client: tag,
            method,
            path,
            status: None,
        };
        let answer = match s.mode {
            Mode::Refusing => {
                s.log.push(sent);
                return Err("connection refused (fake API server)".into());
            }
            Mode::Unauthorized => (401, full(&status(401, "Unauthorized"))),
            Mode::Serving => self.serve(&mut s, &sent, &body),
        };
        sent.status = Some(answer.0);
        let lease_update = sent.method == "PUT" && sent.path.contains("/leases/") && answer.0 == 200;
        s.log.push(sent);
        if lease_update {
            let updates = s
                .log
                .iter()
                .filter(|r| r.method == "PUT" && r.path.contains("/leases/") && r.status == Some(200))
                .count();
            if let Some((_, mode)) = s.switch.filter(|(n, _)| *n == updates) {
                s.mode = mode;
                s.watches.clear();
                s.switch = None;
                s.switched_at = Some((Instant::now(), s.log.len()));
            }
        }
        let mut response = http::Response::new(answer.1);
        *response.status_mut() = http::StatusCode::from_u16(answer.0)?;
        Ok(response)
    }

    /// The answer of a serving API server.
    fn serve(&self, s: &mut State, sent: &Sent, body: &[u8]) -> (u16, Body) {
        let (m, p) = (sent.method.as_str(), sent.path.as_str());
        let route = p.split_once('?').map_or(p, |(r, _)| r);
        let list = |items: Vec<Value>, version: u64| {
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": version.to_string()},
                   "items": items})
        };
        let lease_path = format!(
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/{}",
            crate::leader::LEASE_NAME
        );
        match (m, route) {
            ("GET", "/version") => (
                200,
                full(&json!({"major": "1", "minor": "31", "gitVersion": "v1.31.0"})),
            ),
            ("GET", "/api/v1/pods") if p.contains("watch=true") => {
                let seconds = query(p, "timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(290);
                let (tx, rx) = futures::channel::mpsc::unbounded::<Bytes>();
                let until = Instant::now() + Duration::from_secs(seconds);
                s.watches.push(OpenWatch { _body: tx, until });
                // The server ends each watch after its timeoutSeconds.
                let fake = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(until).await;
                    fake.state().watches.retain(|w| w.until > Instant::now());
                });
                let stream = rx.map(|b| Ok::<_, Infallible>(hyper::body::Frame::data(b)));
                (200, BodyExt::boxed(StreamBody::new(stream)))
            }
            ("GET", "/api/v1/pods") => {
                let node = query(p, "fieldSelector").and_then(|f| f.strip_prefix("spec.nodeName%3D"));
                let items = s
                    .pods
                    .iter()
                    .filter(|pod| node.is_none_or(|n| pod["spec"]["nodeName"] == n))
                    .cloned()
                    .collect();
                (200, full(&list(items, s.version)))
            }
            ("GET", r) if r == lease_path => match &s.lease {
                Some(l) => (200, full(l)),
                None => (404, full(&status(404, "NotFound"))),
            },
            ("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases") => {
                if s.lease.is_some() {
                    return (409, full(&status(409, "AlreadyExists")));
                }
                let Ok(mut lease) = serde_json::from_slice::<Value>(body) else {
                    return (400, full(&status(400, "BadRequest")));
                };
                s.version += 1;
                lease["metadata"]["resourceVersion"] = json!(s.version.to_string());
                s.lease = Some(lease.clone());
                (201, full(&lease))
            }
            ("PUT", r) if r == lease_path => {
                let Ok(mut lease) = serde_json::from_slice::<Value>(body) else {
                    return (400, full(&status(400, "BadRequest")));
                };
                let current = s.lease.as_ref().map(|l| l["metadata"]["resourceVersion"].clone());
                if current != Some(lease["metadata"]["resourceVersion"].clone()) {
                    return (409, full(&status(409, "Conflict")));
                }
                s.version += 1;
                lease["metadata"]["resourceVersion"] = json!(s.version.to_string());
                s.lease = Some(lease.clone());
                (200, full(&lease))
            }
            ("POST", r) if r.ends_with("/pods") && p.contains("dryRun=All") => {
                (201, full(&serde_json::from_slice::<Value>(body).unwrap_or_default()))
            }
            // No apiserver-metrics component: /metrics is forbidden.
            ("GET", "/metrics") => (403, full(&status(403, "Forbidden"))),
            ("GET", r) if r.ends_with("webhookconfigurations") => (
                200,
                full(&json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "List",
                                   "metadata": {}, "items": []})),
            ),
            ("PATCH", r) if r.starts_with("/api/v1/nodes/") && r.ends_with("/status") => {
                let name = r.trim_start_matches("/api/v1/nodes/").trim_end_matches("/status");
                (
                    200,
                    full(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})),
                )
            }
            ("POST", r) if r.ends_with("/events") => {
                (201, full(&serde_json::from_slice::<Value>(body).unwrap_or_default()))
            }
            ("GET", r) if r.starts_with("/api/v1/namespaces/") => {
                let rest: Vec<&str> = r["/api/v1/namespaces/".len()..].split('/').collect();
                match rest.as_slice() {
                    [ns] => (
                        200,
                        full(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
                    ),
                    [ns, "pods"] => {
                        let selector = query(p, "labelSelector").unwrap_or("");
                        let items: Vec<Value> = s
                            .pods
                            .iter()
                            .filter(|pod| pod["metadata"]["namespace"] == *ns && selected(pod, selector))
                            .cloned()
                            .collect();
                        (200, full(&list(items, s.version)))
                    }
                    [ns, "pods", name] => s
                        .pods
                        .iter()
                        .find(|pod| pod["metadata"]["namespace"] == *ns && pod["metadata"]["name"] == *name)
                        .map_or_else(|| (404, full(&status(404, "NotFound"))), |pod| (200, full(pod))),
                    _ => (404, full(&status(404, "NotFound"))),
                }
            }
            _ => (404, full(&status(404, "NotFound"))),
        }
    }
}

/// Requests per task (see [`Sent::task`]).
pub(super) fn by_task(log: &[Sent]) -> BTreeMap<&'static str, Vec<Sent>> {
    let mut out: BTreeMap<&'static str, Vec<Sent>> = BTreeMap::new();
    for r in log {
        out.entry(r.task()).or_default().push(r.clone());
    }
    out
}
