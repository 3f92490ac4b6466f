//! The Kubernetes API as nodemedic uses it: the client, pods as our lean [`PodObject`], and a
//! [`PodDirectory`] for driver lookups.
//!
//! `PodObject` implements `kube::Resource`, so the watch of this node's pods and every GET
//! decode only the fields the rules read (managed fields, env, volumes' details are skipped
//! while parsing): a 250-pod store stays small.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use nodemedic_rules::snapshot::PodInfo;

use crate::collect::pods::{PodObject, pod_info};
use crate::contact::ApiContact;
use crate::deadline::{self, DeadlineLayer};
use crate::spark::network::Cidr;
use crate::spark::{Breaker, CachedDirectory, IndexedDirectory, LookupError, PodDirectory};

mod pod_stream;

impl kube::Resource for PodObject {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What went wrong talking to the API server: the verb and resource of a request, or the
/// configuration that could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No usable client configuration.
    #[error("{source_name}: {message}")]
    Config { source_name: String, message: String },
    /// A request failed (the API server answered with an error, or could not be reached).
    #[error("{verb} {resource}: {message}")]
    Request {
        verb: &'static str,
        resource: String,
        message: String,
        /// The HTTP status, when the API server answered.
        status: Option<u16>,
    },
    /// A request or a group of requests ran out of time.
    #[error("{verb} {resource}: timeout after {seconds} s")]
    Timeout {
        verb: &'static str,
        resource: String,
        seconds: u64,
    },
}

impl Error {
    /// A failed request, classified: a request that ran out of time says "timeout", whatever
    /// layer of the client noticed (a connect timeout inside hyper's error, or the request's
    /// deadline).
    pub fn request(verb: &'static str, resource: impl Into<String>, e: &kube::Error) -> Self {
        let status = match e {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        };
        Error::failed(verb, resource, status, e)
    }

    /// [`Error::request`] for any error, with the HTTP status if the API server answered.
    pub fn failed(
        verb: &'static str,
        resource: impl Into<String>,
        status: Option<u16>,
        e: &(dyn std::error::Error + 'static),
    ) -> Self {
        let message = chain_text(e);
        let timed_out = status.is_none() && is_timeout(e);
        Error::Request {
            verb,
            resource: resource.into(),
            message: if timed_out {
                format!("timeout ({message})")
            } else {
                message
            },
            status,
        }
    }

    /// The HTTP status the API server answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Request { status, .. } => *status,
            _ => None,
        }
    }
}

/// An error and its sources, outermost first, joined by `: ` (repeats left out).
pub fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = s.source();
    }
    parts.join(": ")
}

/// Whether any error in the chain is a timeout (an I/O `TimedOut`, tokio's elapsed deadline).
pub fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        if err.downcast_ref::<tokio::time::error::Elapsed>().is_some() {
            return true;
        }
        let text = err.to_string().to_ascii_lowercase();
        if text.contains("timed out") || text.contains("deadline has elapsed") {
            return true;
        }
        next = err.source();
    }
    false
}

/// Runs one request with a deadline of its own: when it runs out the error says "timeout" with
/// the verb and resource.
pub async fn with_deadline<T>(
    verb: &'static str,
    resource: impl Into<String>,
    deadline: Duration,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, Error> {
    let resource = resource.into();
    match tokio::time::timeout(deadline, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::request(verb, resource, &e)),
        Err(_) => Err(Error::Timeout {
            verb,
            resource,
            seconds: deadline.as_secs_f64().ceil() as u64,
        }),
    }
}

impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// The client configuration: from `kubeconfig` when given, else in-cluster or `$KUBECONFIG`
/// (`Config::infer`).
pub async fn config(kubeconfig: Option<&Path>) -> Result<Config, Error> {
    match kubeconfig {
        Some(path) => {
            let shown = path.display().to_string();
            let err = |message: String| Error::Config {
                source_name: shown.clone(),
                message,
            };
            let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| err(e.to_string()))
        }
        None => Config::infer().await.map_err(|e| Error::Config {
            source_name: "no Kubernetes configuration".into(),
            message: e.to_string(),
        }),
    }
}

/// A client for watches: a connect timeout, but no read timeout, since a quiet watch may
/// send nothing for minutes (the watcher has its own idle timeout past the server's); no
/// retries inside the client ([`deadline`](crate::deadline)).
pub fn watch_client(config: Config, connect_timeout: Duration) -> Result<Client, Error> {
    Client::try_from(deadline::configured(config, connect_timeout)).map_err(client_error)
}

/// Reports how each request of a client ended to an [`ApiContact`]: answered, with its HTTP
/// status, or failed (no answer: refused, TLS, timeout). A watch counts as answered when its
/// response starts; what happens to the stream later is the watcher's to report.
#[derive(Debug, Clone)]
pub struct ContactLayer(pub Arc<ApiContact>);

impl<S> tower::Layer<S> for ContactLayer {
    type Service = ContactService<S>;

    fn layer(&self, inner: S) -> ContactService<S> {
        ContactService {
            inner,
            contact: self.0.clone(),
        }
    }
}

/// The service [`ContactLayer`] wraps around a client's stack.
#[derive(Debug, Clone)]
pub struct ContactService<S> {
    inner: S,
    contact: Arc<ApiContact>,
}

impl<S, Req, B> tower::Service<Req> for ContactService<S>
where
    S: tower::Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let sent = self.inner.call(req);
        let contact = self.contact.clone();
        Box::pin(async move {
            let result = sent.await;
            match &result {
                Ok(answer) => contact.answered_with(answer.status().as_u16()),
                Err(e) => contact.failed(&e.to_string()),
            }
            result
        })
    }
}

/// [`watch_client`] (`request_timeout: None`) or [`request_client`], whose every request is
/// reported to `contact`.
pub fn observed_client(
    config: Config,
    timeout: Duration,
    request_timeout: bool,
    contact: &Arc<ApiContact>,
) -> Result<Client, Error> {
    let builder = kube::client::ClientBuilder::try_from(deadline::configured(config, timeout)).map_err(client_error)?;
    let contact = ContactLayer(contact.clone());
    Ok(if request_timeout {
        builder.with_layer(&DeadlineLayer(timeout)).with_layer(&contact).build()
    } else {
        builder.with_layer(&contact).build()
    })
}

fn client_error(e: kube::Error) -> Error {
    Error::Config {
        source_name: "Kubernetes client".into(),
        message: e.to_string(),
    }
}

/// Builds a client for requests: every request has `timeout` to connect and write, for its
/// answer to start and between any two pieces of it, counted from when it is sent; its idle
/// connections stay open between requests ([`deadline::client`]).
pub fn request_client(config: Config, timeout: Duration) -> Result<Client, Error> {
    deadline::client(config, timeout).map_err(client_error)
}

/// [`request_client`] for the configuration [`config`] loads.
pub async fn client(kubeconfig: Option<&Path>, timeout: Duration) -> Result<Client, Error> {
    request_client(config(kubeconfig).await?, timeout)
}

/// A configuration and a request client made from it: what a command needs to list pods,
/// look drivers up and probe the API server.
#[derive(Clone)]
pub struct Connection {
    pub config: Config,
    pub client: Client,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection({})", self.config.cluster_url)
    }
}

impl Connection {
    /// Loads the configuration (see [`config`]) and builds a client with `timeout` per request.
    pub async fn load(kubeconfig: Option<&Path>, timeout: Duration) -> Result<Self, Error> {
        let config = config(kubeconfig).await?;
        let client = request_client(config.clone(), timeout)?;
        Ok(Connection { config, client })
    }
}

/// The pods bound to `node` (one LIST with a field selector, served from the API server's
/// cache), decoded item by item as the answer arrives ([`stream_pods`]): the list is never in
/// memory whole (kube's `Api::list` holds the body twice, as bytes and as text, beside every
/// decoded item before the first is turned into a [`PodInfo`]).
pub async fn node_pods(client: &Client, node: &str) -> Result<Vec<PodInfo>, Error> {
    let resource = format!("pods spec.nodeName={node}");
    let params = ListParams::default()
        .fields(&format!("spec.nodeName={node}"))
        .match_any();
    let request = kube::core::Request::new("/api/v1/pods")
        .list(&params)
        .map_err(|e| Error::request("LIST", resource.clone(), &kube::Error::BuildRequest(e)))?;
    let body = client
        .request_stream(request)
        .await
        .map_err(|e| Error::request("LIST", resource.clone(), &e))?;
    pod_stream::stream_pods(body).await.map_err(|failure| match failure {
        pod_stream::StreamFailure::Read(e) => Error::failed("LIST", resource, None, &e),
        pod_stream::StreamFailure::Decode(message) => Error::Request {
            verb: "LIST",
            resource,
            message: format!("the answer is not a pod list: {message}"),
            status: None,
        },
    })
}

/// The version of `node`'s kubelet, from its Node object (one GET, served from the API
/// server's cache): `Missing` when there is no such Node, `Error` when the GET fails or the
/// Node reports no version nodemedic can read.
pub async fn node_kubelet_version(
    client: &Client,
    node: &str,
) -> nodemedic_rules::snapshot::Observed<nodemedic_rules::kubelet_version::VersionReading> {
    read_kubelet_version(client, node)
        .await
        .unwrap_or_else(|e| nodemedic_rules::snapshot::Observed::Error { reason: e.to_string() })
}

/// [`node_kubelet_version`], with a GET that got no usable answer as `Err`: what is worth
/// asking again soon, unlike a Node that is absent or reports no version yet.
async fn read_kubelet_version(
    client: &Client,
    node: &str,
) -> Result<nodemedic_rules::snapshot::Observed<nodemedic_rules::kubelet_version::VersionReading>, Error> {
    use crate::collect::node_object::{NodeObject, kubelet_version};
    use nodemedic_rules::snapshot::Observed;
    let uri = format!("/api/v1/nodes/{}?resourceVersion=0", percent_encode(node));
    let request = http::Request::get(&uri).body(Vec::new()).map_err(|e| Error::Request {
        verb: "GET",
        resource: format!("nodes/{node}"),
        message: e.to_string(),
        status: None,
    })?;
    let read_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    match client.request::<NodeObject>(request).await {
        Ok(object) => Ok(kubelet_version(&object, read_at)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Observed::Missing {
            path: format!("nodes/{node}"),
        }),
        Err(e) => Err(Error::request("GET", format!("nodes/{node}"), &e)),
    }
}

/// How often the daemon reads its kubelet's version again: a kubelet upgrade restarts the
/// kubelet, and a version read before a restart is not trusted anyway
/// ([`nodemedic_rules::kubelet_version::in_force`]).
pub const KUBELET_VERSION_REFRESH: Duration = Duration::from_secs(300);
/// How soon a failed read is tried again.
pub const KUBELET_VERSION_RETRY: Duration = Duration::from_secs(30);

/// What the daemon knows of its kubelet's version, shared with its scans.
pub type KubeletVersionSlot =
    Arc<std::sync::Mutex<nodemedic_rules::snapshot::Observed<nodemedic_rules::kubelet_version::VersionReading>>>;

/// Keeps `slot` up to date with `node`'s kubelet version: a GET at once, then every
/// [`KUBELET_VERSION_REFRESH`], or [`KUBELET_VERSION_RETRY`] after a failed read (no answer,
/// or a Node without a readable version yet; a Node that does not exist is asked for again at
/// the slow pace). A failed read leaves a version read before in place (it is the last one
/// known; a kubelet restarted since makes it untrusted by itself). Never ends.
pub async fn track_kubelet_version(client: Client, node: String, slot: KubeletVersionSlot) {
    use nodemedic_rules::snapshot::Observed;
    loop {
        let read = read_kubelet_version(&client, &node).await;
        let failed = read.is_err();
        let read = read.unwrap_or_else(|e| Observed::Error { reason: e.to_string() });
        if let Ok(mut known) = slot.lock() {
            if read.ok().is_some() || known.ok().is_none() {
                *known = read;
            }
        }
        let pause = if failed {
            KUBELET_VERSION_RETRY
        } else {
            KUBELET_VERSION_REFRESH
        };
        tokio::time::sleep(pause).await;
    }
}

/// Driver lookups against the API server.
#[derive(Clone)]
pub struct ApiDirectory {
    client: Client,
    /// The pod networks of the nodes, when last read.
    networks: std::sync::Arc<tokio::sync::Mutex<Option<KnownNetworks>>>,
}

/// Where drivers are looked up through the API server: one list of each namespace's drivers,
/// a breaker that stops a pass at its first failure, a cache with its TTL and `budget`
/// lookups per TTL, the API server. The daemon keeps one; a one-shot command makes one per
/// scan, so that executors of one application share one lookup.
pub type DriverDirectory = IndexedDirectory<Breaker<CachedDirectory<ApiDirectory>>>;

/// The [`DriverDirectory`] of `client` with a cache of `ttl` and `budget` lookups per TTL.
pub fn driver_directory(client: Client, ttl: Duration, budget: u32) -> DriverDirectory {
    IndexedDirectory {
        inner: Breaker::new(CachedDirectory::new(ApiDirectory::new(client), ttl, budget)),
    }
}

/// The nodes' pod networks and when they were read.
type KnownNetworks = (std::time::Instant, Vec<Cidr>);

/// The versions of `resource.k8s.io` that serve ResourceClaims, newest first.
const RESOURCE_API_VERSIONS: [&str; 3] = ["v1", "v1beta2", "v1beta1"];

/// Just an object's UID.
#[derive(Debug, serde::Deserialize)]
struct ObjectUid {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// Whether a 404 is about the object `name` (the API server names it in the details and the
/// message), not about a path it does not serve.
fn names_object(status: &kube::core::Status, name: &str) -> bool {
    status.details.as_ref().is_some_and(|d| d.name == name)
        || status.message.ends_with(&format!("\"{name}\" not found"))
}

/// How long the nodes' pod networks are trusted: they are set when a node registers, so a new
/// node's network is known within this long.
const NETWORKS_TTL: Duration = Duration::from_secs(3600);
/// Nodes per page when the pod networks are read.
const NODES_PAGE: u32 = 500;

impl std::fmt::Debug for ApiDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiDirectory")
    }
}

impl ApiDirectory {
    pub fn new(client: Client) -> Self {
        ApiDirectory {
            client,
            networks: Default::default(),
        }
    }

    /// Reads every node's `spec.podCIDRs` (`spec.podCIDR` on old nodes), a page of
    /// [`NODES_PAGE`] nodes at a time, from the API server's cache. A 403 (no `list nodes` in
    /// an older RBAC) is no error: the networks are then unknown, and said so in the log.
    async fn read_networks(&self) -> Result<Vec<Cidr>, LookupError> {
        #[derive(serde::Deserialize)]
        struct NodeList {
            #[serde(default)]
            metadata: ListMeta,
            #[serde(default)]
            items: Vec<NodeItem>,
        }
        #[derive(serde::Deserialize, Default)]
        struct ListMeta {
            #[serde(rename = "continue", default)]
            next: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct NodeItem {
            #[serde(default)]
            metadata: NodeMeta,
            #[serde(default)]
            spec: NodeSpec,
        }
        #[derive(serde::Deserialize, Default)]
        struct NodeMeta {
            #[serde(default)]
            name: String,
        }
        #[derive(serde::Deserialize, Default)]
        struct NodeSpec {
            #[serde(rename = "podCIDR", default)]
            pod_cidr: Option<String>,
            #[serde(rename = "podCIDRs", default)]
            pod_cidrs: Vec<String>,
        }
        let mut networks: Vec<Cidr> = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let uri = match &next {
                None => format!("/api/v1/nodes?limit={NODES_PAGE}&resourceVersion=0"),
                Some(token) => format!("/api/v1/nodes?limit={NODES_PAGE}&continue={}", percent_encode(token)),
            };
            let request = http::Request::get(&uri)
                .body(Vec::new())
                .map_err(|e| LookupError::Failed(format!("LIST nodes: {e}")))?;
            let page: NodeList = match self.client.request(request).await {
                Ok(page) => page,
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    tracing::warn!(
                        "LIST nodes forbidden (RBAC without `list nodes`): the cluster's pod networks are unknown, so a \
                         client-mode driver whose IP no pod has counts as outside the cluster"
                    );
                    return Ok(vec![]);
                }
                Err(e) => return Err(LookupError::Failed(Error::request("LIST", "nodes", &e).to_string())),
            };
            for node in page.items {
                let texts = node.spec.pod_cidrs.iter().chain(node.spec.pod_cidr.iter());
                for text in texts {
                    match Cidr::parse(text) {
                        Ok(c) if !networks.contains(&c) => networks.push(c),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(node = %node.metadata.name, "spec.podCIDRs: {e}"),
                    }
                }
            }
            match page.metadata.next.filter(|t| !t.is_empty()) {
                Some(token) => next = Some(token),
                None => return Ok(networks),
            }
        }
    }
}

/// `text` with everything but unreserved URI characters percent-encoded (a continue token is
/// base64, whose `=`, `+` and `/` must not reach the query as they are).
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn infos(list: Vec<PodObject>) -> Vec<Arc<PodInfo>> {
    list.into_iter().filter_map(pod_info).map(Arc::new).collect()
}

impl PodDirectory for ApiDirectory {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<PodInfo>>, LookupError> {
        let api: Api<PodObject> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(p) => Ok(p.and_then(pod_info).map(Arc::new)),
            Err(e) => Err(LookupError::Failed(
                Error::request("GET", format!("pod {namespace}/{name}"), &e).to_string(),
            )),
        }
    }
    async fn list(&self, namespace: Option<&str>, label_selector: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        let api: Api<PodObject> = match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        // resourceVersion=0: served from the API server's cache, not etcd.
        let params = ListParams::default().labels(label_selector).match_any();
        api.list(&params)
            .await
            .map(|l| infos(l.items))
            .map_err(|e| LookupError::Failed(Error::request("LIST", format!("pods {label_selector}"), &e).to_string()))
    }
    async fn by_ip(&self, ip: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        let api: Api<PodObject> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("status.podIP={ip}")).match_any();
        api.list(&params)
            .await
            .map(|l| infos(l.items))
            .map_err(|e| LookupError::Failed(Error::request("LIST", format!("pods status.podIP={ip}"), &e).to_string()))
    }
    async fn pod_networks(&self) -> Result<Vec<Cidr>, LookupError> {
        // One reader at a time: lookups of many executors share one read.
        let mut known = self.networks.lock().await;
        if let Some((_, networks)) = known.as_ref().filter(|(at, _)| at.elapsed() < NETWORKS_TTL) {
            return Ok(networks.clone());
        }
        let networks = self.read_networks().await?;
        *known = Some((std::time::Instant::now(), networks.clone()));
        Ok(networks)
    }
    /// One LIST of the pod's Warning Events with the field selector
    /// `involvedObject.uid=<uid>,type=Warning`, from the API server's cache.
    async fn pod_events(
        &self,
        namespace: &str,
        uid: &str,
    ) -> Result<Vec<nodemedic_rules::snapshot::PodEvent>, LookupError> {
        use crate::collect::event_object::{EventList, pod_event};
        let selector = format!("involvedObject.uid={uid},type=Warning");
        let resource = format!("events -n {namespace} {selector}");
        let uri = format!(
            "/api/v1/namespaces/{}/events?fieldSelector={}&resourceVersion=0",
            percent_encode(namespace),
            percent_encode(&selector)
        );
        let request = http::Request::get(&uri)
            .body(Vec::new())
            .map_err(|e| LookupError::Failed(format!("LIST {resource}: {e}")))?;
        match self.client.request::<EventList>(request).await {
            Ok(list) => Ok(list.items.iter().map(pod_event).collect()),
            Err(e) => Err(LookupError::Failed(Error::request("LIST", resource, &e).to_string())),
        }
    }
    /// One GET of the ResourceClaim per served version of `resource.k8s.io`, newest first (v1
    /// from 1.34, v1beta2 in 1.33, v1beta1 in 1.32): a 404 for the version itself (the API
    /// server's "could not find the requested resource") tries the next one, a 404 for the
    /// object is `None`.
    async fn resource_claim(&self, namespace: &str, name: &str) -> Result<Option<String>, LookupError> {
        let resource = format!("resourceclaim {namespace}/{name}");
        let mut last = String::new();
        for version in RESOURCE_API_VERSIONS {
            let uri = format!(
                "/apis/resource.k8s.io/{version}/namespaces/{}/resourceclaims/{}?resourceVersion=0",
                percent_encode(namespace),
                percent_encode(name)
            );
            let request = http::Request::get(&uri)
                .body(Vec::new())
                .map_err(|e| LookupError::Failed(format!("GET {resource}: {e}")))?;
            match self.client.request::<ObjectUid>(request).await {
                Ok(claim) => return Ok(claim.metadata.uid),
                Err(kube::Error::Api(s)) if s.code == 404 && names_object(&s, name) => return Ok(None),
                Err(kube::Error::Api(s)) if s.code == 404 => last = format!("resource.k8s.io/{version} not served"),
                Err(e) => return Err(LookupError::Failed(Error::request("GET", &resource, &e).to_string())),
            }
        }
        Err(LookupError::Failed(format!(
            "GET {resource}: the API server serves no resource.k8s.io version nodemedic reads ({last})"
        )))
    }
    /// One GET of the node, from the API server's cache; `None` on 404.
    async fn node(&self, name: &str) -> Result<Option<nodemedic_rules::snapshot::NodeStatus>, LookupError> {
        use crate::collect::node_object::{NodeObject, node_status};
        let uri = format!("/api/v1/nodes/{}?resourceVersion=0", percent_encode(name));
        let request = http::Request::get(&uri)
            .body(Vec::new())
            .map_err(|e| LookupError::Failed(format!("GET node {name}: {e}")))?;
        match self.client.request::<NodeObject>(request).await {
            Ok(node) => Ok(Some(node_status(&node))),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(LookupError::Failed(
                Error::request("GET", format!("node {name}"), &e).to_string(),
            )),
        }
    }
}
