//! Kubernetes Events for findings, one series per finding.
//!
//! The first time a finding is seen it becomes an `events.k8s.io/v1` Event on its Pod (when
//! the pod object exists) or on the Node. While it persists, repeats are counted locally and
//! sent as the Event's `series` (count, last observed time) at most once per
//! `series_interval`, so a finding that lasts a day is one Event object and a few dozen
//! patches, never an Event per scan. The same idea as kube-runtime's `Recorder`, with the
//! series kept for as long as the finding lasts instead of a fixed cache lifetime.
//!
//! A series' Event has a name made from what it is about and a hash of the finding's identity
//! ([`FindingKey`], [`series_name`]), the same in every process. So a create answered 409 `AlreadyExists`
//! (what kube-apiserver answers for a name that is taken: its generic registry turns the
//! storage's "key exists" into `NewAlreadyExists`, `apiserver/pkg/storage/errors/storage.go`)
//! means the series is already there:
//! written by this agent before it was restarted, by a create whose answer was lost to a
//! client timeout, or by an earlier occurrence of a finding that cleared and came back while
//! its Event lives (`--event-ttl`, one hour by default). The recorder then reads that Event and
//! continues its series (count and last observed time) instead of making a second object.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use nodemedic_rules::finding::{Finding, FindingKey, Severity};
use nodemedic_rules::rules;

/// The `reportingController` of nodemedic's Events.
pub const REPORTING_CONTROLLER: &str = "nodemedic.io/agent";

/// The Event reason of a finding: its rule's, from the catalogue.
pub fn reason_of(f: &Finding) -> &'static str {
    rules::by_id(f.rule.as_str()).map_or("NodemedicFinding", |r| r.event_reason)
}

/// The longest Kubernetes object name (a DNS subdomain, RFC 1123).
const MAX_NAME: usize = 253;

/// FNV-1a, 64 bits, over `parts`, each followed by a NUL byte (no Kubernetes name or rule id
/// holds one, so two different lists never hash the same bytes). Fixed by its definition, so
/// the same in every build and process, unlike `std`'s `DefaultHasher`.
fn identity_hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Whether `name` is a DNS subdomain as Kubernetes checks object names
/// (`IsDNS1123Subdomain`): at most 253 characters, dot-separated labels of lowercase letters,
/// digits and `-`, each starting and ending with a letter or digit.
pub fn is_dns_subdomain(name: &str) -> bool {
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    name.len() <= MAX_NAME && name.split('.').all(label)
}

/// The name of an Event series: `<object>.<16 hex digits>`, the object it is about (as the
/// kubelet names its Events `<object>.<hex>`) and [`identity_hash`] of `identity`. The object's
/// name is cut so the whole stays within 253 characters, and replaced by `nodemedic` when it
/// is not a DNS subdomain; the result always is one.
pub fn series_name(object: &str, identity: &[&str]) -> String {
    let hash = format!("{:016x}", identity_hash(identity));
    let room = MAX_NAME - hash.len() - 1;
    let mut base = object.get(..object.len().min(room)).unwrap_or("");
    // A cut can end a label with `-` or leave an empty one after a `.`.
    base = base.trim_end_matches(['-', '.']);
    if !is_dns_subdomain(base) {
        base = "nodemedic";
    }
    format!("{base}.{hash}")
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
    /// Series updated, those continued after a 409 included.
    pub patched: usize,
    /// Of the new series, those whose Event was already there (409 `AlreadyExists`) and
    /// whose series was continued instead.
    pub continued: usize,
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
    series: HashMap<FindingKey, Series>,
    /// What cluster-level findings (admission) are recorded on: the prober's Lease.
    cluster_object: Option<ObjectReference>,
    /// Findings over the budget, reported in the summary Event.
    summarized: std::collections::HashSet<FindingKey>,
    summary: Option<Series>,
    /// The current budget window and the series started in it.
    window_start: Option<Instant>,
    created_in_window: usize,
}

/// Rules about the cluster, not the node: only the elected prober raises them, and their
/// Events are on its Lease, so the cluster has one series whichever agent probes.
pub const CLUSTER_RULES: &[nodemedic_rules::RuleId] = &[
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
        s.kind.as_str(),
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
            Some(o) if CLUSTER_RULES.contains(&f.rule) => o.clone(),
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

    /// Holds the series of `findings` of rules that could not judge this scan: nothing is
    /// sent for them, and they do not expire while their rule cannot judge (a later
    /// [`record`](Self::record) of the same finding continues the series).
    pub fn hold(&mut self, findings: &[Finding]) {
        let now = Instant::now();
        for f in findings {
            if let Some(s) = self.series.get_mut(&f.key()) {
                s.last_seen = now;
            }
        }
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
        let current: HashMap<FindingKey, &Finding> = findings.iter().map(|f| (f.key(), f)).collect();
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
        let mut keys: Vec<&FindingKey> = current.keys().collect();
        // Worst first, so a capped burst spends its Events on what matters most.
        keys.sort_by(|a, b| current[*b].severity.cmp(&current[*a].severity).then(a.cmp(b)));
        let mut overflow: Vec<&Finding> = vec![];
        for key in keys {
            let f = current[key];
            if self.summarized.contains(key) {
                overflow.push(f);
                continue;
            }
            let reason = reason_of(f).to_string();
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
                label: ("nodemedic.io/rule", f.rule.to_string()),
                instance: self.instance.clone(),
            };
            let name = series_name(spec.regarding.name.as_deref().unwrap_or_default(), &self.identity(key));
            match self.open(spec, name.clone()).await {
                Ok((namespace, opened)) => {
                    let count = opened.count_in(&mut stats);
                    self.created_in_window += 1;
                    stats.reasons.push(reason.clone());
                    self.series.insert(
                        key.clone(),
                        Series {
                            last_seen: now,
                            namespace,
                            name,
                            reason,
                            count,
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
                    tracing::warn!(event = %name, error = %crate::kube_api::Error::request("PATCH", format!("events {namespace}/{name}"), &e), "could not update the summary event's series");
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
        let name = series_name(&self.node, &[&self.node, SUMMARY_REASON]);
        match self.open(spec, name.clone()).await {
            Ok((namespace, opened)) => {
                let count = opened.count_in(stats);
                stats.reasons.push(SUMMARY_REASON.into());
                self.summary = Some(Series {
                    last_seen: now,
                    namespace,
                    name,
                    reason: SUMMARY_REASON.into(),
                    count,
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

    /// What the series of the finding with `key` is named after ([`series_name`]): this node
    /// and the key's [parts](FindingKey::parts); for a cluster-level finding recorded on the
    /// prober's Lease, the Lease, the rule and the problem code, so whichever agent probes
    /// continues the one series.
    fn identity<'a>(&'a self, key: &'a FindingKey) -> Vec<&'a str> {
        match &self.cluster_object {
            Some(o) if CLUSTER_RULES.contains(&key.rule) => {
                let [rule, _, _, _, problem] = key.parts();
                vec![
                    o.namespace.as_deref().unwrap_or_default(),
                    o.name.as_deref().unwrap_or_default(),
                    rule,
                    problem,
                ]
            }
            _ => {
                let mut parts = vec![self.node.as_str()];
                parts.extend(key.parts());
                parts
            }
        }
    }

    /// Starts a series under `name`: creates its Event, or, when the name is taken (409
    /// `AlreadyExists`: this series' Event, from before a restart or from a create whose answer
    /// was lost), reads that Event and continues its series at one more than it counted.
    /// Returns the namespace and which it was.
    async fn open(&self, spec: EventSpec, name: String) -> Result<(String, Opened), crate::kube_api::Error> {
        use crate::kube_api::Error;
        let (namespace, mut event) = spec.build();
        event.metadata.name = Some(name.clone());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => return Ok((namespace, Opened::Created)),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {}
            Err(e) => return Err(Error::request("POST", format!("events in {namespace}"), &e)),
        }
        let what = format!("events {namespace}/{name}");
        let existing = api
            .get(&name)
            .await
            .map_err(|e| Error::request("GET", what.clone(), &e))?;
        if existing.reporting_controller.as_deref() != Some(REPORTING_CONTROLLER) {
            return Err(Error::Request {
                verb: "POST",
                resource: what,
                message: format!(
                    "the name is taken by an Event that {} reported, not {REPORTING_CONTROLLER}",
                    existing.reporting_controller.as_deref().unwrap_or("nobody")
                ),
                status: Some(409),
            });
        }
        let count = existing.series.as_ref().map_or(1, |s| s.count).saturating_add(1);
        self.patch_series(&namespace, &name, count)
            .await
            .map_err(|e| Error::request("PATCH", what, &e))?;
        Ok((namespace, Opened::Continued(count)))
    }
}

/// How [`EventRecorder::open`] started a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    /// Its Event was created.
    Created,
    /// Its Event was there; its series was continued at this count.
    Continued(i32),
}

impl Opened {
    /// Counts it in `stats`; returns the series' count now.
    fn count_in(self, stats: &mut RecordStats) -> i32 {
        match self {
            Opened::Created => {
                stats.created += 1;
                1
            }
            Opened::Continued(count) => {
                stats.patched += 1;
                stats.continued += 1;
                count
            }
        }
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
mod tests;
