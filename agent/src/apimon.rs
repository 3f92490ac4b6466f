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
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1 as adm;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::{Api, Client};
use nodemedic_rules::admission::{
    self, LabelSelector, LabelSelectorRequirement, RuleWithOperations, WebhookKind, WebhookSpec,
};
use nodemedic_rules::promtext;
use nodemedic_rules::snapshot::{ApiObservation, Observed, ProbeSample, WebhookInfo};

use crate::kube_api;
use crate::probe::{Probe, Target};

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
        let req = match http::Request::get("/metrics").body(Vec::new()) {
            Ok(r) => r,
            Err(_) => return,
        };
        match self.client.request_text(req).await {
            Ok(text) => {
                let now_totals = promtext::webhook_admission_totals(&text);
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
                if matches!(&e, kube::Error::Api(s) if s.code == 403 || s.code == 401) {
                    self.metrics_refused_until = Some(Instant::now() + METRICS_REFUSED_BACKOFF);
                    tracing::info!("API server /metrics refused: webhook latency attribution off for 30 minutes");
                } else {
                    tracing::debug!(error = %e, "API server /metrics not readable");
                }
            }
        }
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
        ApiObservation {
            samples: self.samples.iter().cloned().collect(),
            probing_since: self.probing_since,
            last_success_at: self.last_success_at,
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

/// Runs rounds forever on `interval` (±10% jitter), hands each round's samples to
/// `on_round` (the metrics) and publishes each observation.
pub async fn run(
    mut monitor: ApiMonitor,
    interval: Duration,
    on_round: impl Fn(&[ProbeSample]) + Send + 'static,
    spark_pods: impl Fn() -> Vec<(String, BTreeMap<String, String>)> + Send + 'static,
    out: Arc<Mutex<Option<ApiObservation>>>,
) {
    let mut seed = (now() as u64) ^ u64::from(std::process::id());
    loop {
        on_round(&monitor.round().await);
        let observation = monitor.observe(&spark_pods()).await;
        if let Ok(mut slot) = out.lock() {
            *slot = Some(observation);
        }
        // xorshift for a jitter of ±10%: agents of a cluster do not probe in step.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let jitter = (seed % 2001) as f64 / 10_000.0 - 0.1;
        tokio::time::sleep(interval.mul_f64(1.0 + jitter)).await;
    }
}
