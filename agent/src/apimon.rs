//! The daemon's view of the API server: probes on an interval (with jitter), the admission
//! webhooks that apply to pod creation, and their latency from the API server's own metrics.
//!
//! Each round runs the three probes of [`crate::probe`], records them in
//! `nodemedic_api_request_duration_seconds{probe}` and `nodemedic_api_up`, reads the API
//! server's `/metrics` (when RBAC allows; the `apiserver-metrics` component grants it) to turn
//! the change in `apiserver_admission_webhook_admission_duration_seconds` `_sum` over `_count`
//! into each webhook's mean latency, and lists the webhook configurations every few minutes.
//! The latest [`ApiObservation`] is shared with the scan loop, which never waits for a probe.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1 as adm;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::{Api, Client};
use nodemedic_rules::admission::{
    self, LabelSelector, LabelSelectorRequirement, RuleWithOperations, WebhookKind, WebhookSpec,
};
use nodemedic_rules::promtext;
use nodemedic_rules::snapshot::{ApiObservation, Observed, ProbeSample, WebhookInfo};
// tokio's clock: the system's monotonic clock, except under a test's paused clock.
use tokio::time::Instant;

use crate::kube_api;
use crate::leader::{Elector, PUBLISHED_SAMPLES, Published, PublishedWebhook, Role};
use crate::probe::{Probe, Target};
use crate::retry::{Gate, Jitter};

/// The labels of the probe pod (as [`crate::probe`] creates it).
pub fn probe_pod_labels() -> BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name", "nodemedic-probe"),
        ("nodemedic.io/probe", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Samples kept for the rules: the last rounds.
const WINDOW: usize = 15;
const WEBHOOK_REFRESH: Duration = Duration::from_secs(300);
const NAMESPACE_REFRESH: Duration = Duration::from_secs(300);

fn selector(s: Option<&meta::LabelSelector>) -> Option<LabelSelector> {
    s.map(|s| LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default().into_iter().collect(),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|e| LabelSelectorRequirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
            })
            .collect(),
    })
}

fn rules(rules: Option<&Vec<adm::RuleWithOperations>>) -> Vec<RuleWithOperations> {
    rules
        .into_iter()
        .flatten()
        .map(|r| RuleWithOperations {
            operations: r.operations.clone().unwrap_or_default(),
            api_groups: r.api_groups.clone().unwrap_or_default(),
            api_versions: r.api_versions.clone().unwrap_or_default(),
            resources: r.resources.clone().unwrap_or_default(),
            scope: r.scope.clone(),
        })
        .collect()
}

/// A `WebhookSpec` from a mutating or validating webhook: the two API types have the same
/// fields under different names, hence a macro rather than a function.
macro_rules! spec_of {
    ($configuration:expr, $w:expr, $kind:expr) => {
        WebhookSpec {
            configuration: $configuration.clone(),
            name: $w.name.clone(),
            kind: $kind,
            rules: rules($w.rules.as_ref()),
            namespace_selector: selector($w.namespace_selector.as_ref()),
            object_selector: selector($w.object_selector.as_ref()),
            timeout_seconds: $w.timeout_seconds,
            failure_policy: $w.failure_policy.clone(),
            side_effects: Some($w.side_effects.clone()),
            match_policy: $w.match_policy.clone(),
            match_conditions: $w.match_conditions.iter().flatten().map(|m| m.name.clone()).collect(),
        }
    };
}

/// Our view of every webhook in the cluster's configurations.
pub fn webhook_specs(
    mutating: &[adm::MutatingWebhookConfiguration],
    validating: &[adm::ValidatingWebhookConfiguration],
) -> Vec<WebhookSpec> {
    let mut out = vec![];
    for c in mutating {
        let configuration = c.metadata.name.clone().unwrap_or_default();
        out.extend(
            c.webhooks
                .iter()
                .flatten()
                .map(|w| spec_of!(configuration, w, WebhookKind::Mutating)),
        );
    }
    for c in validating {
        let configuration = c.metadata.name.clone().unwrap_or_default();
        out.extend(
            c.webhooks
                .iter()
                .flatten()
                .map(|w| spec_of!(configuration, w, WebhookKind::Validating)),
        );
    }
    out
}

/// Probes the API server and keeps what it learned.
pub struct ApiMonitor {
    target: Target,
    client: Client,
    timeout: Duration,
    samples: VecDeque<ProbeSample>,
    probing_since: i64,
    last_success_at: Option<i64>,
    webhooks: Option<(Instant, Result<Vec<WebhookSpec>, kube_api::Error>)>,
    namespaces: HashMap<String, (Instant, BTreeMap<String, String>)>,
    metrics_before: Option<BTreeMap<String, (f64, f64)>>,
    latency: BTreeMap<String, f64>,
    /// The API server refused `/metrics` (no `apiserver-metrics` component): not asked again
    /// before this, so a default install spends no request on it.
    metrics_refused_until: Option<Instant>,
}

/// The most of the API server's `/metrics` read in one round.
const METRICS_READ_LIMIT: usize = 64 * 1024 * 1024;

/// How long a refused `/metrics` read is not retried.
const METRICS_REFUSED_BACKOFF: Duration = Duration::from_secs(1800);

impl std::fmt::Debug for ApiMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiMonitor")
            .field("target", &self.target)
            .field("samples", &self.samples.len())
            .finish()
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl ApiMonitor {
    pub fn new(target: Target, client: Client, timeout: Duration) -> Self {
        ApiMonitor {
            target,
            client,
            timeout,
            samples: VecDeque::new(),
            probing_since: now(),
            last_success_at: None,
            webhooks: None,
            namespaces: HashMap::new(),
            metrics_before: None,
            latency: BTreeMap::new(),
            metrics_refused_until: None,
        }
    }

    /// Reads the API server's metrics once, so that the next round's reading gives each
    /// webhook's latency during that round (one-shot scans).
    pub async fn prime(&mut self) {
        self.read_apiserver_metrics().await;
    }

    /// One round: the three probes, the API server's metrics, the webhook list when due.
    /// Returns the round's samples (for the metrics).
    pub async fn round(&mut self) -> Vec<ProbeSample> {
        let mut any_ok = false;
        let mut round = Vec::with_capacity(Probe::ALL.len());
        for p in Probe::ALL {
            let sample = self.target.probe(p, self.timeout).await;
            round.push(sample.clone());
            if sample.ok {
                any_ok = true;
                self.last_success_at = Some(sample.at);
            } else {
                tracing::debug!(probe = p.name(), error = ?sample.error, "API probe failed");
            }
            self.samples.push_back(sample);
        }
        while self.samples.len() > WINDOW {
            self.samples.pop_front();
        }
        if !any_ok {
            return round;
        }
        self.read_apiserver_metrics().await;
        if self
            .webhooks
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= WEBHOOK_REFRESH)
        {
            let listed = self.list_webhooks().await;
            if let Err(e) = &listed {
                tracing::warn!(error = %e, "could not list admission webhook configurations");
            }
            self.webhooks = Some((Instant::now(), listed));
        }
        round
    }

    async fn read_apiserver_metrics(&mut self) {
        if self.metrics_refused_until.is_some_and(|t| Instant::now() < t) {
            return;
        }
        match self.webhook_totals().await {
            Ok(now_totals) => {
                if let Some(before) = &self.metrics_before {
                    let fresh = promtext::mean_latency(before, &now_totals);
                    // Keep the last known mean of webhooks not called since.
                    self.latency.extend(fresh);
                }
                self.metrics_before = Some(now_totals);
            }
            Err(e) => {
                // Forbidden without the apiserver-metrics component: attribution by latency
                // is then unavailable, which the webhook list says (no mean latency).
                if matches!(e.status(), Some(401 | 403)) {
                    self.metrics_refused_until = Some(Instant::now() + METRICS_REFUSED_BACKOFF);
                    tracing::info!("API server /metrics refused: webhook latency attribution off for 30 minutes");
                } else {
                    tracing::debug!(error = %e, "API server /metrics not readable");
                }
            }
        }
    }

    /// The webhook admission totals of the API server's `/metrics`, read line by line: only
    /// the lines of `apiserver_admission_webhook_admission_duration_seconds` are kept, and the
    /// read stops at [`METRICS_READ_LIMIT`] bytes (a big cluster's exposition is megabytes).
    async fn webhook_totals(&self) -> Result<BTreeMap<String, (f64, f64)>, kube_api::Error> {
        use futures::{AsyncBufReadExt as _, StreamExt as _};
        let failed = |e: &kube::Error| kube_api::Error::request("GET", "/metrics", e);
        let req = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(|e| kube_api::Error::Request {
                verb: "GET",
                resource: "/metrics".into(),
                message: e.to_string(),
                status: None,
            })?;
        let body = self.client.request_stream(req).await.map_err(|e| failed(&e))?;
        let mut lines = std::pin::pin!(body.lines());
        let mut totals: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        let mut read = 0usize;
        while let Some(line) = lines.next().await {
            let line = line.map_err(|e| kube_api::Error::Request {
                verb: "GET",
                resource: "/metrics".into(),
                message: format!("reading the answer: {e}"),
                status: None,
            })?;
            read += line.len() + 1;
            if read > METRICS_READ_LIMIT {
                tracing::warn!(
                    limit_bytes = METRICS_READ_LIMIT,
                    "API server /metrics is larger than the read limit; using what came before it"
                );
                break;
            }
            // Only `_sum` and `_count` count; each line is folded in as it comes.
            if line.starts_with(promtext::WEBHOOK_DURATION) && !line.contains("_bucket{") {
                for (webhook, (sum, count)) in promtext::webhook_admission_totals(&line) {
                    let entry = totals.entry(webhook).or_insert((0.0, 0.0));
                    entry.0 += sum;
                    entry.1 += count;
                }
            }
        }
        Ok(totals)
    }

    async fn list_webhooks(&self) -> Result<Vec<WebhookSpec>, kube_api::Error> {
        let m: Api<adm::MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let v: Api<adm::ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let lp = kube::api::ListParams::default();
        let mutating = m
            .list(&lp)
            .await
            .map_err(|e| kube_api::Error::request("LIST", "mutatingwebhookconfigurations", &e))?;
        let validating = v
            .list(&lp)
            .await
            .map_err(|e| kube_api::Error::request("LIST", "validatingwebhookconfigurations", &e))?;
        Ok(webhook_specs(&mutating.items, &validating.items))
    }

    async fn namespace_labels(&mut self, name: &str) -> BTreeMap<String, String> {
        if let Some((at, labels)) = self.namespaces.get(name) {
            if at.elapsed() < NAMESPACE_REFRESH {
                return labels.clone();
            }
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        let labels = match api.get_opt(name).await {
            Ok(Some(ns)) => ns.metadata.labels.unwrap_or_default().into_iter().collect(),
            _ => BTreeMap::new(),
        };
        let labels = admission::namespace_labels(name, &labels);
        self.namespaces
            .insert(name.to_string(), (Instant::now(), labels.clone()));
        labels
    }

    /// What the rules see: the samples, and the webhooks matching a pod CREATE of the probe
    /// pod or of pods in `spark_namespaces`.
    /// `spark_pods`: the namespace and labels of each Spark pod on this node.
    pub async fn observe(&mut self, spark_pods: &[(String, BTreeMap<String, String>)]) -> ApiObservation {
        let mut spark_namespaces: Vec<String> = spark_pods.iter().map(|(ns, _)| ns.clone()).collect();
        spark_namespaces.sort();
        spark_namespaces.dedup();
        let webhooks = match &self.webhooks {
            None => Observed::NotApplicable {
                reason: "not listed yet".into(),
            },
            Some((_, Err(e))) => Observed::Error { reason: e.to_string() },
            Some((_, Ok(specs))) => {
                let specs = specs.clone();
                let probe_ns = self.target.namespace.clone();
                let probe_ns_labels = self.namespace_labels(&probe_ns).await;
                let mut ns_labels = vec![];
                for ns in &spark_namespaces {
                    ns_labels.push((ns.clone(), self.namespace_labels(ns).await));
                }
                let probe_labels = probe_pod_labels();
                let mut infos: Vec<WebhookInfo> = vec![];
                for spec in &specs {
                    let probe = admission::matches_pod_create(spec, &probe_ns_labels, &probe_labels);
                    // A namespace counts when the webhook is called for one of its Spark pods here.
                    let namespaces: Vec<String> = ns_labels
                        .iter()
                        .filter(|(ns, l)| {
                            spark_pods
                                .iter()
                                .any(|(pns, labels)| pns == ns && admission::matches_pod_create(spec, l, labels))
                        })
                        .map(|(n, _)| n.clone())
                        .collect();
                    if !probe && namespaces.is_empty() {
                        continue;
                    }
                    let mut info = admission::info(spec, probe, namespaces);
                    info.mean_latency_seconds = self.latency.get(&spec.name).copied();
                    infos.push(info);
                }
                Observed::Ok(infos)
            }
        };
        // The probes' own view; the daemon stamps the record of every request over it
        // (`ApiContact::stamp`), a one-shot scan keeps it.
        let failing = self
            .samples
            .iter()
            .filter(|s| !s.ok && s.status.is_none() && self.last_success_at.is_none_or(|t| s.at >= t));
        let unreachable_since = failing.clone().map(|s| s.at).min();
        let last_error = failing.max_by_key(|s| s.at).and_then(|s| s.error.clone());
        ApiObservation {
            samples: self.samples.iter().cloned().collect(),
            probing_since: self.probing_since,
            last_success_at: self.last_success_at,
            unreachable_since,
            last_error,
            webhooks,
        }
    }
}

/// One round of probes for a one-shot scan, with the API server's metrics read before and
/// after it so that each webhook's latency during the round's dry-run create is known.
/// `spark_pods`: the namespace and labels of each Spark pod on this node.
pub async fn probe_once(
    api: &crate::kube_api::Connection,
    node: &str,
    spark_pods: &[(String, BTreeMap<String, String>)],
) -> Result<ApiObservation, crate::probe::ProbeError> {
    let target = Target::from_config(&api.config, &api.config.default_namespace, node)?;
    let mut monitor = ApiMonitor::new(target, api.client.clone(), Duration::from_secs(60));
    monitor.prime().await;
    monitor.round().await;
    Ok(monitor.observe(spark_pods).await)
}

/// What the probe task tells the rest of the daemon about the election.
#[derive(Debug, Clone, Default)]
pub struct ElectionView {
    /// This agent holds the Lease.
    pub leading: bool,
    /// The holder, as last read.
    pub holder: Option<String>,
    /// What the holder published, as last read.
    pub published: Option<Published>,
}

/// Where the probe task publishes, and how the daemon stops it.
#[derive(Debug, Clone)]
pub struct ProbeOutputs {
    pub observation: Arc<Mutex<Option<ApiObservation>>>,
    pub election: Arc<Mutex<ElectionView>>,
    /// Set to true to stop: the holder releases the Lease, then `released` is notified.
    pub stop: tokio::sync::watch::Receiver<bool>,
    pub released: Arc<tokio::sync::Notify>,
    /// Changes when the API server serves again after trouble, whichever request of the agent
    /// saw it first ([`crate::contact::ApiContact::back_signal`]): an election waiting out a
    /// failure reads (or renews) and a prober whose last round failed probes at once.
    pub api_back: tokio::sync::watch::Receiver<u64>,
    /// `nodemedic_prober`: set as the election changes, not at the next scan.
    pub prober: crate::exposition::IntGauge,
}

impl ApiMonitor {
    /// A sample taken elsewhere (the election's timed read of the Lease).
    pub fn push_sample(&mut self, sample: ProbeSample) {
        if sample.ok {
            self.last_success_at = Some(sample.at);
        }
        self.samples.push_back(sample);
        while self.samples.len() > WINDOW {
            self.samples.pop_front();
        }
    }

    /// This agent stopped probing for the cluster: its dry-run samples and webhook list go,
    /// so that cluster-level findings are raised by the new prober only.
    pub fn forget_admission(&mut self) {
        self.samples.retain(|s| s.probe != Probe::CreateDryRun.name());
        self.webhooks = None;
    }

    /// The admission result to publish on the Lease.
    pub async fn published(&mut self, node: &str) -> Published {
        let observed = self.observe(&[]).await;
        let mut samples: Vec<ProbeSample> = observed
            .samples
            .into_iter()
            .filter(|s| s.probe == Probe::CreateDryRun.name())
            .collect();
        let skip = samples.len().saturating_sub(PUBLISHED_SAMPLES);
        samples.drain(..skip);
        let webhooks = match observed.webhooks {
            Observed::Ok(list) => list
                .into_iter()
                .map(|w| PublishedWebhook {
                    name: w.name,
                    configuration: w.configuration,
                    mean_latency_seconds: w.mean_latency_seconds,
                })
                .collect(),
            _ => vec![],
        };
        Published {
            node: node.to_string(),
            at: now(),
            samples,
            webhooks,
        }
    }
}

/// The probe task: the election, and the probe rounds while this agent holds the Lease.
///
/// Every agent's samples of its own path to the API server are the election's timed reads of
/// the Lease (every four fifths of the lease duration). The holder also runs the three probes
/// (`get`, `list`, `create_dry_run`), reads the API server's `/metrics` and lists the webhooks
/// every `interval` (±10% jitter), and publishes the result on the Lease. A round in which
/// every probe failed is followed by a pause that doubles up to five minutes instead of the
/// interval. Each round's samples go to `on_round` (the metrics).
pub async fn run(
    mut monitor: ApiMonitor,
    mut elector: Elector,
    interval: Duration,
    on_round: impl Fn(&[ProbeSample]) + Send + 'static,
    spark_pods: impl Fn() -> Vec<(String, BTreeMap<String, String>)> + Send + 'static,
    mut outputs: ProbeOutputs,
) {
    let node = monitor.target.node.clone();
    let mut jitter = Jitter::new(u64::from(std::process::id()));
    let mut round_gate = Gate::new(interval, Duration::from_secs(300).max(interval), 0x5eed);
    let mut next_round = Instant::now();
    let mut next_step = Instant::now();
    let mut leading = false;
    // The last round got no answer that served: the next one is due as soon as the API
    // server serves again.
    let mut round_failed = false;
    outputs.prober.set(0);
    loop {
        let stopped = tokio::select! {
            biased;
            _ = outputs.stop.wait_for(|stop| *stop) => true,
            _ = async {
                let wake_at = if leading { next_step.min(next_round) } else { next_step };
                tokio::select! {
                    _ = tokio::time::sleep_until(wake_at) => {}
                    Ok(()) = outputs.api_back.changed() => {
                        // Only what waits out a pause because of a failure goes now: a round
                        // that worked is not repeated, a Lease read on time is not added.
                        if elector.failing() {
                            tracing::info!("the API server answers again: reading the Lease now");
                            elector.nudge();
                            next_step = Instant::now();
                        }
                        if round_failed {
                            round_gate.succeed();
                            next_round = next_round.min(Instant::now());
                        }
                    }
                }
                if Instant::now() >= next_step {
                    let step = elector.step().await;
                    if let Some(sample) = step.sample {
                        on_round(std::slice::from_ref(&sample));
                        monitor.push_sample(sample);
                    }
                    let now_leading = step.role == Role::Leading;
                    if leading && !now_leading {
                        monitor.forget_admission();
                    }
                    if now_leading && !leading {
                        next_round = Instant::now();
                    }
                    leading = now_leading;
                    outputs.prober.set(i64::from(leading));
                    next_step = Instant::now() + step.next;
                    if let Ok(mut view) = outputs.election.lock() {
                        view.leading = leading;
                        view.holder = match &step.role {
                            Role::Leading => Some(elector.identity().to_string()),
                            Role::Following { holder } => holder.clone(),
                        };
                        view.published = step.published;
                    }
                }
                if leading && Instant::now() >= next_round {
                    let round = monitor.round().await;
                    on_round(&round);
                    round_failed = !round.iter().any(|s| s.ok);
                    let pause = if !round_failed {
                        round_gate.succeed();
                        jitter.spread(interval, 0.1)
                    } else {
                        round_gate.fail()
                    };
                    next_round = Instant::now() + pause;
                    elector.publish(monitor.published(&node).await);
                }
                let observation = monitor.observe(&if leading { spark_pods() } else { vec![] }).await;
                if let Ok(mut slot) = outputs.observation.lock() {
                    *slot = Some(observation);
                }
            } => false,
        };
        if stopped {
            elector.release(Duration::from_millis(800)).await;
            outputs.prober.set(0);
            outputs.released.notify_one();
            return;
        }
    }
}
