//! The API server as this node sees it: probe samples, the admission webhooks for pod
//! creation, and what the API server answered about ResourceClaims, pod Events and other nodes.

use super::Observed;

/// One timed request to the API server, like `curl -w`: seconds from the start of the
/// request until each phase ended.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProbeSample {
    /// `get` (`/version`), `list` (this node's pods, `limit=1`) or `create_dry_run` (a minimal
    /// pod created with `dryRun=All`, through the whole admission chain).
    pub probe: String,
    /// When it started, unix seconds.
    pub at: i64,
    /// A 2xx answer arrived.
    pub ok: bool,
    /// The HTTP status, when an answer arrived.
    pub status: Option<u16>,
    /// Why it failed (connection refused, timeout, TLS, HTTP status with the Status message).
    pub error: Option<String>,
    pub dns_seconds: f64,
    pub connect_seconds: f64,
    /// TLS handshake done (equal to `connect_seconds` over plain HTTP).
    pub tls_seconds: f64,
    pub first_byte_seconds: f64,
    pub total_seconds: f64,
}

/// An admission webhook that can apply to pod creation, as configured.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct WebhookInfo {
    /// The Mutating/ValidatingWebhookConfiguration's name.
    pub configuration: String,
    /// The webhook's name (as in `apiserver_admission_webhook_admission_duration_seconds{name}`).
    pub name: String,
    /// `mutating` or `validating`.
    pub kind: String,
    /// `timeoutSeconds` (10 when unset, in admissionregistration/v1).
    pub timeout_seconds: i32,
    /// `Fail` or `Ignore`.
    pub failure_policy: String,
    /// `None`, `NoneOnDryRun`, `Some` or `Unknown`.
    pub side_effects: String,
    /// Whether it matches a pod CREATE of the probe pod (in the agent's namespace, with the
    /// probe's labels).
    pub matches_probe: bool,
    /// The namespaces of Spark pods on this node whose pod CREATEs it matches.
    pub matches_namespaces: Vec<String>,
    /// Mean admission latency between the last two readings of the API server's metrics,
    /// seconds (`None`: not readable, or no call in between).
    pub mean_latency_seconds: Option<f64>,
}

/// What the agent measured of the API server.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiObservation {
    /// Recent probe samples, oldest first (the daemon keeps a window; `probe api` its rounds).
    pub samples: Vec<ProbeSample>,
    /// When probing started, unix seconds.
    pub probing_since: i64,
    /// The last request of the agent that the API server answered (any HTTP status), unix
    /// seconds; in a one-shot scan, the last successful probe.
    pub last_success_at: Option<i64>,
    /// The first request that got no answer after the last answered one, unix seconds: when
    /// the API server became unreachable (`None` while requests are answered).
    pub unreachable_since: Option<i64>,
    /// The error of the last request that got no answer, while unreachable.
    pub last_error: Option<String>,
    /// The webhooks that apply to pod creation (`Missing` when they could not be listed).
    pub webhooks: Observed<Vec<WebhookInfo>>,
}

/// A ResourceClaim object as the API server answered for a claim a checkpoint names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ClaimObject {
    /// It exists, with this UID (another UID than the checkpoint's: recreated under the name).
    Exists { uid: String },
    /// No ResourceClaim of that name.
    Gone,
    /// It could not be asked (why).
    Unknown { reason: String },
}

/// A core `v1` Event about a pod, as much as the rules read.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PodEvent {
    /// `Normal` or `Warning`.
    pub type_: String,
    /// `FailedMount`, `FailedAttachVolume`, ...
    pub reason: String,
    pub message: String,
    /// Who reported it (`kubelet`, `attachdetach-controller`).
    pub source: Option<String>,
    /// How many times it was seen (`count`, or the series' count).
    pub count: u32,
    /// First and last seen, unix seconds.
    pub first_at: Option<i64>,
    pub last_at: Option<i64>,
}

/// Another node as the API server shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct NodeStatus {
    pub name: String,
    /// The `Ready` condition's status: `True`, `False` or `Unknown` (`None`: no condition).
    pub ready: Option<String>,
    /// Since when (`lastTransitionTime`), unix seconds.
    pub ready_since: Option<i64>,
    /// The condition's reason (`NodeStatusUnknown`: the kubelet stopped posting status).
    pub ready_reason: Option<String>,
    /// Its `NoExecute` taints' keys.
    pub no_execute_taints: Vec<String>,
}
