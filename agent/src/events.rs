//! Kubernetes Events for findings, one series per finding.
//!
//! The first time a finding is seen it becomes an `events.k8s.io/v1` Event on its Pod (when
//! the pod object exists) or on the Node. While it persists, repeats are counted locally and
//! sent as the Event's `series` (count, last observed time) at most once per
//! `series_interval`, so a finding that lasts a day is one Event object and a few dozen
//! patches, never an Event per scan. When the finding clears, its series ends; if it comes
//! back later it starts a new one. The same idea as kube-runtime's `Recorder`, with the
//! series kept for as long as the finding lasts instead of a fixed cache lifetime.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use nodemedic_rules::finding::{Finding, Severity};
use nodemedic_rules::rules;

/// The `reportingController` of nodemedic's Events.
pub const REPORTING_CONTROLLER: &str = "nodemedic.io/agent";

/// What identifies one finding across scans: rule, subject, container.
pub fn finding_key(f: &Finding) -> String {
    let s = &f.subject;
    format!(
        "{}|{}|{}|{}|{}",
        f.rule,
        s.kind,
        s.uid.as_deref().or(s.name.as_deref()).unwrap_or(""),
        s.container.as_deref().unwrap_or(""),
        // Node-level findings of one rule can differ by what they are about (a problem code).
        f.evidence.get("problem").and_then(|v| v.as_str()).unwrap_or("")
    )
}

#[derive(Debug)]
struct Series {
    /// The last scan that had the finding.
    last_seen: Instant,
    namespace: String,
    name: String,
    reason: String,
    count: i32,
    last_sent: Instant,
}

/// What one `record` call did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecordStats {
    pub created: usize,
    pub patched: usize,
    pub failed: usize,
    /// Event reasons of what was sent, for `nodemedic_events_emitted_total{reason}`.
    pub reasons: Vec<String>,
    /// A request failed because the API server is unavailable; the rest was not tried.
    pub unavailable: bool,
}

/// Publishes findings as Event series.
pub struct EventRecorder {
    client: Client,
    node: String,
    instance: String,
    series_interval: Duration,
    series: HashMap<String, Series>,
    /// What cluster-level findings (admission) are recorded on: the prober's Lease.
    cluster_object: Option<ObjectReference>,
    /// Findings over the budget, reported in the summary Event.
    summarized: std::collections::HashSet<String>,
    summary: Option<Series>,
    /// The current budget window and the series started in it.
    window_start: Option<Instant>,
    created_in_window: usize,
}

/// Rules about the cluster, not the node: only the elected prober raises them, and their
/// Events are on its Lease, so the cluster has one series whichever agent probes.
pub const CLUSTER_RULES: &[&str] = &[
    nodemedic_rules::rules::slow_pod_admission::ID,
    nodemedic_rules::rules::webhook_blocks_dry_run::ID,
];

/// The prober's Lease, as an Event's `regarding`.
pub fn lease_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        ..Default::default()
    }
}

/// New Event series per series interval, per node; more findings go into one summary Event.
pub const NEW_EVENTS_PER_WINDOW: usize = 20;
/// The reason of the summary Event.
pub const SUMMARY_REASON: &str = "FindingsSummarized";

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("node", &self.node)
            .field("series", &self.series.len())
            .finish()
    }
}

/// What an Event is about: the pod `namespace/name` (with its UID) when the subject is a pod,
/// else this node.
pub fn regarding(
    kind: &str,
    namespace: Option<&str>,
    name: Option<&str>,
    uid: Option<&str>,
    node: &str,
) -> ObjectReference {
    match (namespace, name) {
        (Some(ns), Some(name)) if kind == "Pod" => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(ns.to_string()),
            name: Some(name.to_string()),
            uid: uid.map(str::to_string),
            ..Default::default()
        },
        _ => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            // The kubelet's convention: a node's uid in its events is its name.
            uid: Some(node.to_string()),
            ..Default::default()
        },
    }
}

fn reference(f: &Finding, node: &str) -> ObjectReference {
    let s = &f.subject;
    regarding(
        &s.kind,
        s.namespace.as_deref(),
        s.name.as_deref(),
        s.uid.as_deref(),
        node,
    )
}

/// A note cut to the API's 1 kB limit on a character boundary, with `...` where it was cut.
pub fn note_text(mut text: String) -> String {
    if text.len() > 1024 {
        let mut cut = 1021;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

/// One of nodemedic's Events (events.k8s.io/v1), as findings and repairs both record them.
#[derive(Debug, Clone)]
pub struct EventSpec {
    pub regarding: ObjectReference,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// PascalCase, one per rule or repair.
    pub reason: String,
    /// `Detected`, `Delete`, `Remove`, `Rewrite`.
    pub action: &'static str,
    pub note: String,
    /// The label that says what recorded it: (`nodemedic.io/rule`, id) or (`nodemedic.io/repair`, action).
    pub label: (&'static str, String),
    /// This agent's instance (its pod name).
    pub instance: String,
}

impl EventSpec {
    /// The Event object and the namespace it is created in (the pod's, or `default` for the node).
    pub fn build(self) -> (String, Event) {
        let namespace = self.regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let stamp = jiff::Timestamp::now();
        let base = self.regarding.name.clone().unwrap_or_default();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{base}.{:x}", stamp.as_nanosecond())),
                namespace: Some(namespace.clone()),
                labels: Some([(self.label.0.to_string(), self.label.1)].into()),
                ..Default::default()
            },
            event_time: Some(MicroTime(stamp)),
            type_: Some(self.type_.into()),
            reason: Some(self.reason),
            action: Some(self.action.into()),
            note: Some(note_text(self.note)),
            regarding: Some(self.regarding),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.instance),
            series: None::<EventSeries>,
            ..Default::default()
        };
        (namespace, event)
    }
}

impl EventRecorder {
    /// A recorder for `node`; `instance` names this agent (its pod name).
    pub fn new(client: Client, node: &str, instance: &str, series_interval: Duration) -> Self {
        EventRecorder {
            client,
            node: node.to_string(),
            instance: instance.to_string(),
            series_interval,
            series: HashMap::new(),
            cluster_object: None,
            summarized: Default::default(),
            summary: None,
            window_start: None,
            created_in_window: 0,
        }
    }

    /// Records cluster-level findings (see [`CLUSTER_RULES`]) on `object` instead of the Node.
    pub fn with_cluster_object(mut self, object: ObjectReference) -> Self {
        self.cluster_object = Some(object);
        self
    }

    fn reference(&self, f: &Finding) -> ObjectReference {
        match &self.cluster_object {
            Some(o) if CLUSTER_RULES.contains(&f.rule.as_str()) => o.clone(),
            _ => reference(f, &self.node),
        }
    }

    /// Changes how often a lasting finding's series is updated.
    pub fn set_series_interval(&mut self, every: Duration) {
        self.series_interval = every;
    }

    /// Open series (findings currently reported).
    pub fn open_series(&self) -> usize {
        self.series.len()
    }

    /// Creates Events for new findings, updates the series of lasting ones when due, and ends
    /// the series of findings that cleared.
    ///
    /// At most [`NEW_EVENTS_PER_WINDOW`] new series start per series interval: a burst of
    /// findings beyond that (a node where 200 pods break at once) becomes one summary Event on
    /// the Node that counts them by rule, and those findings stay in the summary for as long as
    /// they last. A request that fails because the API server is unavailable (no answer, 5xx,
    /// 429, 401) ends the call: the rest waits for the caller's next attempt, after its backoff.
    pub async fn record(&mut self, findings: &[Finding]) -> RecordStats {
        let mut stats = RecordStats::default();
        let now = Instant::now();
        let current: HashMap<String, &Finding> = findings.iter().map(|f| (finding_key(f), f)).collect();
        // A finding missing from a few scans (a lookup that failed, a source briefly
        // unreadable) keeps its series for one series interval: if it comes back, it is the
        // same series, not a new Event.
        let keep = self.series_interval;
        self.series
            .retain(|k, s| current.contains_key(k) || now.duration_since(s.last_seen) < keep);
        self.summarized.retain(|k| current.contains_key(k));
        if self
            .window_start
            .is_none_or(|w| now.duration_since(w) >= self.series_interval)
        {
            self.window_start = Some(now);
            self.created_in_window = 0;
        }
        let mut keys: Vec<&String> = current.keys().collect();
        // Worst first, so a capped burst spends its Events on what matters most.
        keys.sort_by(|a, b| current[*b].severity.cmp(&current[*a].severity).then(a.cmp(b)));
        let mut overflow: Vec<&Finding> = vec![];
        for key in keys {
            let f = current[key];
            if self.summarized.contains(key) {
                overflow.push(f);
                continue;
            }
            let reason = rules::by_id(&f.rule)
                .map_or("NodemedicFinding", |r| r.event_reason)
                .to_string();
            if let Some(s) = self.series.get_mut(key) {
                s.count += 1;
                s.last_seen = now;
                if now.duration_since(s.last_sent) < self.series_interval {
                    continue;
                }
                let (namespace, name, count) = (s.namespace.clone(), s.name.clone(), s.count);
                match self.patch_series(&namespace, &name, count).await {
                    Ok(()) => {
                        if let Some(s) = self.series.get_mut(key) {
                            s.last_sent = now;
                            stats.reasons.push(s.reason.clone());
                        }
                        stats.patched += 1;
                    }
                    Err(e) => {
                        tracing::warn!(event = %name, error = %crate::kube_api::Error::request("PATCH", format!("events {namespace}/{name}"), &e), "could not update an event series");
                        stats.failed += 1;
                        if unavailable(&e) {
                            stats.unavailable = true;
                            return stats;
                        }
                    }
                }
                continue;
            }
            if self.created_in_window >= NEW_EVENTS_PER_WINDOW {
                self.summarized.insert(key.clone());
                overflow.push(f);
                continue;
            }
            let spec = EventSpec {
                regarding: self.reference(f),
                type_: if f.severity >= Severity::Warning {
                    "Warning"
                } else {
                    "Normal"
                },
                reason: reason.clone(),
                action: "Detected",
                // What the text report prints: the finding, then what to do.
                note: format!("{} Remedy: {}", f.summary, f.remedy),
                label: ("nodemedic.io/rule", f.rule.clone()),
                instance: self.instance.clone(),
            };
            match self.create(spec).await {
                Ok((namespace, name)) => {
                    stats.created += 1;
                    self.created_in_window += 1;
                    stats.reasons.push(reason.clone());
                    self.series.insert(
                        key.clone(),
                        Series {
                            last_seen: now,
                            namespace,
                            name,
                            reason,
                            count: 1,
                            last_sent: now,
                        },
                    );
                }
                Err(e) => {
                    // Not remembered: the next attempt tries again.
                    tracing::warn!(rule = %f.rule, error = %e, "could not create an event");
                    stats.failed += 1;
                    if e.status().is_none_or(|c| c >= 500 || c == 429 || c == 401) {
                        stats.unavailable = true;
                        return stats;
                    }
                }
            }
        }
        self.summarize(&overflow, now, &mut stats).await;
        stats
    }

    /// The summary Event of findings over the budget: created when the first one overflows,
    /// its series updated when due while any remain.
    async fn summarize(&mut self, overflow: &[&Finding], now: Instant, stats: &mut RecordStats) {
        if overflow.is_empty() {
            self.summary = None;
            return;
        }
        if let Some(s) = &mut self.summary {
            s.count += 1;
            s.last_seen = now;
            if now.duration_since(s.last_sent) < self.series_interval {
                return;
            }
            let (namespace, name, count) = (s.namespace.clone(), s.name.clone(), s.count);
            match self.patch_series(&namespace, &name, count).await {
                Ok(()) => {
                    if let Some(s) = &mut self.summary {
                        s.last_sent = now;
                    }
                    stats.patched += 1;
                    stats.reasons.push(SUMMARY_REASON.into());
                }
                Err(e) => {
                    stats.failed += 1;
                    stats.unavailable |= unavailable(&e);
                }
            }
            return;
        }
        let mut by_rule: std::collections::BTreeMap<&str, usize> = Default::default();
        for f in overflow {
            *by_rule.entry(f.rule.as_str()).or_default() += 1;
        }
        let counts: Vec<String> = by_rule.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        let spec = EventSpec {
            regarding: regarding("Node", None, None, None, &self.node),
            type_: "Warning",
            reason: SUMMARY_REASON.into(),
            action: "Detected",
            note: format!(
                "{} more findings on node {} than nodemedic sends as Events of their own ({NEW_EVENTS_PER_WINDOW} new \
                 per {} s): {}. `kubectl nodemedic scan {}` lists them all, with evidence.",
                overflow.len(),
                self.node,
                self.series_interval.as_secs(),
                counts.join(", "),
                self.node
            ),
            label: ("nodemedic.io/rule", "summary".into()),
            instance: self.instance.clone(),
        };
        match self.create(spec).await {
            Ok((namespace, name)) => {
                stats.created += 1;
                stats.reasons.push(SUMMARY_REASON.into());
                self.summary = Some(Series {
                    last_seen: now,
                    namespace,
                    name,
                    reason: SUMMARY_REASON.into(),
                    count: 1,
                    last_sent: now,
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not create the summary event");
                stats.failed += 1;
                stats.unavailable |= e.status().is_none_or(|c| c >= 500 || c == 429 || c == 401);
            }
        }
    }

    async fn patch_series(&self, namespace: &str, name: &str, count: i32) -> Result<(), kube::Error> {
        let patch = serde_json::json!({
            "series": {"count": count, "lastObservedTime": MicroTime(jiff::Timestamp::now())},
        });
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    /// Creates one Event; returns its namespace and name.
    async fn create(&self, spec: EventSpec) -> Result<(String, String), crate::kube_api::Error> {
        let (namespace, event) = spec.build();
        let name = event.metadata.name.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event)
            .await
            .map_err(|e| crate::kube_api::Error::request("POST", format!("events in {namespace}"), &e))?;
        Ok((namespace, name))
    }
}

/// Whether a failed request says the API server is unavailable to us (no answer, 5xx, 429,
/// 401) rather than that this one request was wrong.
pub fn unavailable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429 || s.code == 401,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::finding::Subject;

    fn finding(rule: &str, subject: Subject) -> Finding {
        Finding::new(rule, Severity::Critical, subject, "s".repeat(2000), "r".into())
    }

    #[test]
    fn keys_and_references() {
        let pod = Subject {
            kind: "Pod".into(),
            namespace: Some("spark".into()),
            name: Some("exec-1".into()),
            uid: Some("u1".into()),
            container: Some("c".into()),
        };
        let f = finding("orphaned-executor", pod.clone());
        assert_eq!(finding_key(&f), "orphaned-executor|Pod|u1|c|");
        let r = reference(&f, "n1");
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Pod"), Some("spark"), Some("exec-1"))
        );
        // A pod known only by UID (gone) gets its event on the node.
        let gone = finding("stale-cpu-assignment", Subject::pod_uid("u9"));
        let r = reference(&gone, "n1");
        assert_eq!(
            (r.kind.as_deref(), r.name.as_deref(), r.namespace.as_deref()),
            (Some("Node"), Some("n1"), None)
        );
        assert!(note_text(gone.summary.clone()).len() <= 1024);
        let node = finding("checkpoint-invalid-state", Subject::node("n1")).with("problem", "cpus-mismatch");
        assert_eq!(finding_key(&node), "checkpoint-invalid-state|Node|n1||cpus-mismatch");
    }

    #[tokio::test]
    async fn admission_findings_are_recorded_on_the_prober_lease_the_rest_on_their_subject() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let recorder = EventRecorder::new(client, "worker-3", "nodemedic-x", Duration::from_secs(600))
            .with_cluster_object(lease_reference("nodemedic", "nodemedic-prober"));
        for rule in CLUSTER_RULES {
            let r = recorder.reference(&finding(rule, Subject::node("worker-3")));
            assert_eq!(
                (
                    r.api_version.as_deref(),
                    r.kind.as_deref(),
                    r.namespace.as_deref(),
                    r.name.as_deref()
                ),
                (
                    Some("coordination.k8s.io/v1"),
                    Some("Lease"),
                    Some("nodemedic"),
                    Some("nodemedic-prober")
                ),
                "{rule}"
            );
        }
        let node_finding = recorder.reference(&finding("stale-cpu-assignment", Subject::node("worker-3")));
        assert_eq!(
            (node_finding.kind.as_deref(), node_finding.name.as_deref()),
            (Some("Node"), Some("worker-3"))
        );
    }
}
