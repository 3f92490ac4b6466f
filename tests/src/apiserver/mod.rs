//! An in-process Kubernetes API server double for end-to-end tests.
//!
//! [`ApiServer::start`] listens on `127.0.0.1` twice, plain HTTP and HTTPS (a CA and serving
//! certificate made at start), and speaks the API server's JSON wire format closely enough
//! for kube-rs clients, watchers and reflectors, `kubectl`-style raw requests, and the real
//! `nodemedic` daemon: lists with selectors and pagination, watches with resource versions,
//! bookmarks (objects of the watched type as the API server makes them) and 410 Gone, strategic
//! merge patches, server-side apply (without field ownership), delete preconditions,
//! `deletecollection`, dry-run creates, optimistic concurrency (a write with a stale
//! `metadata.resourceVersion` is a 409 `Conflict`, one without is unconditional; creating an
//! existing name is a 409 `AlreadyExists`), `metav1.Status` errors, discovery, `/version`,
//! health and `/metrics`; and, standing in for a kubelet, its `/stats/summary` (a document the
//! test sets, and its 403 without `nodes/stats`: [`ApiServer::set_kubelet_summary`]). The real
//! `spark-submit` (fabric8) works against it too
//! (`crate::spark_submit`, `tests/tests/spark_client.rs`).
//!
//! The served types (`resources::RESOURCES`, which discovery is derived from): core `v1`
//! Pods (with `/status`), Nodes (with `/status`), Namespaces (with `/status`), Events,
//! ConfigMaps (short name `cm`), Services (`svc`, with `/status`; a cluster IP, `None` for a
//! headless one) and PersistentVolumeClaims (`pvc`, with `/status`); `events.k8s.io/v1` Events (the same objects as core
//! Events); `admissionregistration.k8s.io/v1` Mutating- and ValidatingWebhookConfigurations;
//! `coordination.k8s.io/v1` Leases (no `/status`; `spec` fields such as the MicroTime
//! `renewTime` are stored as given, `leaseDurationSeconds` and `leaseTransitions` validated);
//! and the Spark operator's custom resource, `sparkoperator.k8s.io/v1beta2` SparkApplications
//! (short name `sparkapp`, with `/status`), served as the apiextensions-apiserver serves a
//! CRD: no strategic merge patch (415), no PUT without a resource version (422), a status
//! given to a create is dropped, `/status` changes only the status; `spec` (such as
//! `restartPolicy`) is stored as given, the CRD's schema is not checked. And the
//! NodeResourceTopology custom resource, `topology.node.k8s.io/v1alpha2`
//! NodeResourceTopologies (cluster-scoped, short name `node-res-topo`, no subresources), with
//! the same custom resource rules; its schema is not checked either (`crate::crd::validate`
//! checks an object against the CRD in `tests/crds/`).
//!
//! Pods get what the API server's defaults and the DefaultTolerationSeconds admission plugin
//! give them, both when created through the API and when a test inserts them with
//! [`Store::create`] (they stand for pods that went through admission): among others the
//! `NoExecute` tolerations of `node.kubernetes.io/not-ready` and
//! `node.kubernetes.io/unreachable` for 300 s, unless the pod tolerates those taints already.
//! A test that needs a pod without them removes them afterwards (with [`Store::modify`] or a
//! patch); updates do not add them back.
//!
//! The pieces:
//! - [`Store`] ([`store`]): the objects, one global resource version, the change history.
//! - [`Faults`] ([`faults`]): down (connections accepted, then closed), refusing (nothing
//!   listens: ECONNREFUSED until turned off, then the same ports again), latency, error
//!   answers (an injected 401 for `*`/`*` answers every request, watches, `/version` and
//!   `/metrics` included), cut and expired watches. A request whose client disconnects
//!   during its injected latency is cancelled, as kube-apiserver cancels it; with
//!   [`Faults::set_writes_outlive_clients`] a write runs to its end on a task of its own
//!   instead (the object is stored, the request recorded with the answer nobody read), as
//!   behind a proxy that does not pass the client's abort on.
//! - `http`: routing and handlers; `watch`: watch streams; `resources`: the served types;
//!   `selectors`, `patch`: the pure parts; `tls`: certificates; `discovery`: the documents;
//!   `listener`: the listening sockets, which refusing closes and re-binds. They are bound on
//!   random ports below the kernel's ephemeral range, which outgoing connections never take,
//!   so the port is still free when refusing ends.
//!
//! Every request is recorded ([`ApiServer::requests`]) with the number of the connection it
//! came on, in the order the server accepted them: how a test sees whether a client keeps its
//! connections alive between requests, or pays a TCP connection and a TLS handshake for each.
//!
//! Everything the server runs is a task on the runtime that started it; dropping the
//! [`ApiServer`] stops them all (writes still waiting out a latency included) and closes every
//! connection.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use nodemedic_tests::apiserver::ApiServer;
//! let api = ApiServer::start().await?;
//! api.store().create(serde_json::json!({
//!     "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}
//! }));
//! let dir = tempfile::tempdir()?;
//! api.write_kubeconfig(&dir.path().join("kubeconfig"), true)?;
//! // ... run the client under test against it, then:
//! assert!(api.requests().iter().any(|r| r.verb == "list" && r.resource == "pods"));
//! # Ok(()) }
//! ```

mod discovery;
mod faults;
mod http;
mod listener;
mod patch;
mod resources;
mod selectors;
mod status;
mod store;
mod tls;
mod util;
mod watch;

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

pub use discovery::GIT_VERSION;
pub use faults::Faults;
pub use http::RequestRecord;
pub use selectors::{FieldRequirement, FieldSelector, LabelSelector};
pub use store::Store;

use http::Shared;
use listener::{Accepted, ListenerSlot};

/// The bearer token written into kubeconfigs by [`ApiServer::write_kubeconfig`]. Any token
/// is accepted; this one just makes it easy to check that a client sent it.
pub const TEST_TOKEN: &str = "nodemedic-test-token";

/// The default period of watch bookmarks: short, so that tests see them soon.
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(2);

/// kube-apiserver's period of watch bookmarks (its watch cache's `defaultBookmarkFrequency`,
/// one minute, besides the one it sends just before a watch's deadline): what the benches of
/// a daemon at steady state set ([`ApiServer::set_bookmark_interval`]), so that an agent's
/// watch costs what it costs against a real API server.
pub const APISERVER_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// A running API server double. See the module documentation.
#[derive(Debug)]
pub struct ApiServer {
    shared: Arc<Shared>,
    http_addr: SocketAddr,
    https_addr: SocketAddr,
    ca_pem: String,
    listeners: Vec<Arc<ListenerSlot>>,
    tasks: Vec<JoinHandle<()>>,
}

impl ApiServer {
    /// Starts the double on `127.0.0.1`, one plain HTTP and one HTTPS listener serving the same
    /// store, each on a random free port below the kernel's ephemeral range (20000 up to the low
    /// end of `/proc/sys/net/ipv4/ip_local_port_range`), so that no outgoing connection can take
    /// a port while [`Faults::set_refusing`] has it closed; on port 0 if none is free. Its tasks
    /// run on the current tokio runtime.
    pub async fn start() -> io::Result<ApiServer> {
        let http_listener = TcpListener::from_std(listener::bind_outside_ephemeral()?)?;
        let https_listener = TcpListener::from_std(listener::bind_outside_ephemeral()?)?;
        let http_addr = http_listener.local_addr()?;
        let https_addr = https_listener.local_addr()?;
        let tls = tls::generate()?;
        let shared = Arc::new(Shared {
            store: Store::new(),
            faults: Faults::new(),
            requests: Mutex::new(Vec::new()),
            bookmark_interval_ms: AtomicU64::new(DEFAULT_BOOKMARK_INTERVAL.as_millis() as u64),
            server_address: https_addr.to_string(),
            detached: Mutex::new(Vec::new()),
            kubelet_stats: Mutex::new(http::KubeletStats::default()),
            connections: AtomicU64::new(0),
        });
        let acceptor = TlsAcceptor::from(tls.server_config.clone());
        let http_slot = Arc::new(ListenerSlot::new(http_listener)?);
        let https_slot = Arc::new(ListenerSlot::new(https_listener)?);
        shared.faults.attach_listener(&http_slot);
        shared.faults.attach_listener(&https_slot);
        let tasks = vec![
            tokio::spawn(accept_loop(http_slot.clone(), shared.clone(), None)),
            tokio::spawn(accept_loop(https_slot.clone(), shared.clone(), Some(acceptor))),
            tokio::spawn(watch_cutter(shared.faults.clone())),
        ];
        Ok(ApiServer {
            shared,
            http_addr,
            https_addr,
            ca_pem: tls.ca_pem,
            listeners: vec![http_slot, https_slot],
            tasks,
        })
    }

    /// `http://127.0.0.1:PORT`
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// `https://127.0.0.1:PORT`
    pub fn https_url(&self) -> String {
        format!("https://{}", self.https_addr)
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    pub fn https_addr(&self) -> SocketAddr {
        self.https_addr
    }

    /// The PEM of the CA that signed the serving certificate (whose SANs include IP
    /// `127.0.0.1` and DNS `localhost`).
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    /// Writes a kubeconfig with one cluster (this server over HTTPS with its CA, or over plain
    /// HTTP), one user with the bearer token [`TEST_TOKEN`], and a current context using them
    /// with namespace `default`.
    pub fn write_kubeconfig(&self, path: &Path, https: bool) -> io::Result<()> {
        let cluster = if https {
            format!(
                "    server: {}\n    certificate-authority-data: {}\n",
                self.https_url(),
                util::base64_std(self.ca_pem.as_bytes())
            )
        } else {
            format!("    server: {}\n", self.http_url())
        };
        let text = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: nodemedic-test\n  cluster:\n{cluster}\
             users:\n\
             - name: nodemedic-test\n  user:\n    token: {TEST_TOKEN}\n\
             contexts:\n\
             - name: nodemedic-test\n  context:\n    cluster: nodemedic-test\n    user: nodemedic-test\n    namespace: default\n\
             current-context: nodemedic-test\n\
             preferences: {{}}\n"
        );
        std::fs::write(path, text)
    }

    /// The objects.
    pub fn store(&self) -> Store {
        self.shared.store.clone()
    }

    /// Fault injection.
    pub fn faults(&self) -> Faults {
        self.shared.faults.clone()
    }

    /// Serves `summary` as a kubelet's `GET /stats/summary` (on both listeners; `None`: a 404,
    /// as a server that has no such path). A kubelet's endpoint, not the API server's: served
    /// here so that a test points the agent's `kubelet_stats_url` at this server, with the
    /// same CA and token.
    pub fn set_kubelet_summary(&self, summary: Option<serde_json::Value>) {
        self.shared
            .kubelet_stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .summary = summary;
    }

    /// Whether the caller holds `get` on `nodes/stats`: when not, `/stats/summary` answers
    /// as the kubelet's webhook authorization does, `403` with its plain-text `Forbidden
    /// (user=..., verb=get, resource=nodes, subresource=stats)`. Granted at start.
    pub fn set_kubelet_stats_granted(&self, granted: bool) {
        self.shared
            .kubelet_stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .denied = !granted;
    }

    /// Every request seen so far, in arrival order of their answers.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn clear_requests(&self) {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// How often watches that allow bookmarks get one (default
    /// [`DEFAULT_BOOKMARK_INTERVAL`]; the real API server sends about one a minute). Applies
    /// to watches opened afterwards.
    pub fn set_bookmark_interval(&self, every: Duration) {
        self.shared
            .bookmark_interval_ms
            .store(every.as_millis().max(1) as u64, Ordering::Relaxed);
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        // Aborting an accept loop drops its JoinSet, which aborts every connection task and
        // with it every open watch.
        for t in &self.tasks {
            t.abort();
        }
        self.shared.abort_detached();
        // Close the ports now (not when the runtime gets round to dropping the aborted
        // tasks), and for good: a `Faults` handle that outlives the server cannot reopen them.
        for l in &self.listeners {
            l.retire();
        }
    }
}

/// Accepts connections until aborted; each is served on its own task in `conns`. When the
/// listening socket is closed ([`Faults::set_refusing`]) every connection is closed too, and
/// accepting resumes once the socket is open again.
async fn accept_loop(slot: Arc<ListenerSlot>, shared: Arc<Shared>, tls: Option<TlsAcceptor>) {
    let mut conns = JoinSet::new();
    let mut closes_seen = 0;
    loop {
        tokio::select! {
            accepted = std::future::poll_fn(|cx| slot.poll_accept(cx, &mut closes_seen)) => match accepted {
                Accepted::Connection(stream) => {
                    if shared.faults.is_down() || shared.faults.is_refusing() {
                        // Down: accept, then close without a byte.
                        drop(stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let number = shared.connections.fetch_add(1, Ordering::Relaxed) + 1;
                    conns.spawn(serve_connection(stream, number, shared.clone(), tls.clone()));
                }
                // Nothing listens any more: the server process is gone, and its connections.
                Accepted::Closed => conns.abort_all(),
                // Out of file descriptors and the like: back off instead of spinning.
                Accepted::Failed => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, number: u64, shared: Arc<Shared>, tls: Option<TlsAcceptor>) {
    let builder = hyper::server::conn::http1::Builder::new();
    match tls {
        None => {
            let svc = service_fn(move |req| http::handle(shared.clone(), req, "http", number));
            let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
        }
        Some(acceptor) => {
            let Ok(tls_stream) = acceptor.accept(stream).await else {
                return;
            };
            if shared.faults.is_down() || shared.faults.is_refusing() {
                return;
            }
            let svc = service_fn(move |req| http::handle(shared.clone(), req, "https", number));
            let _ = builder.serve_connection(TokioIo::new(tls_stream), svc).await;
        }
    }
}

/// Cuts the open watches periodically while [`Faults::drop_watches_every`] says so.
async fn watch_cutter(faults: Faults) {
    let mut period = faults.drop_period();
    loop {
        let current = *period.borrow_and_update();
        match current {
            None => {
                if period.changed().await.is_err() {
                    return;
                }
            }
            Some(every) => {
                tokio::select! {
                    _ = tokio::time::sleep(every) => faults.drop_watches_now(),
                    changed = period.changed() => if changed.is_err() { return },
                }
            }
        }
    }
}
