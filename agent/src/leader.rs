//! Which agent probes the cluster: an election on a `coordination.k8s.io/v1` Lease.
//!
//! Admission latency is a property of the cluster (the API server calls the webhooks), so one
//! agent measures it for all: the holder of the Lease `nodemedic-prober` in the agent's
//! namespace. The rules are client-go's leader election, scaled to a fleet's request budget:
//! - the holder renews every third of the lease duration (20 s of the default 60 s) with an
//!   update conditioned on the Lease's `resourceVersion`, and publishes the admission result in
//!   the Lease's annotation [`ADMISSION_ANNOTATION`] with the same request; when it could not
//!   renew for two thirds of the duration it stops probing, before anyone may take over;
//! - every other agent reads the Lease every four fifths of the duration (48 s, ±10%), timed like the
//!   read probe `get` (so the read is also its measurement of its own path to the API
//!   server), and takes the Lease over, again conditioned on the `resourceVersion`, once the
//!   record has not changed for a whole lease duration by its own clock (no clock is compared
//!   across nodes). When the record is about to expire it reads again right then, so a killed
//!   holder is replaced within the lease duration plus one read period (at most 113 s), under
//!   two durations;
//! - a holder that shuts down releases the Lease (empty holder), so another agent takes over at
//!   its next read.
//!
//! Reads and updates that fail back off (jittered, doubling up to five minutes).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use nodemedic_rules::snapshot::ProbeSample;
// tokio's clock: the system's monotonic clock, except under a test's paused clock.
use tokio::time::Instant;

use crate::kube_api;
use crate::probe::Target;
use crate::retry::{Backoff, Jitter};

/// The Lease's name.
pub const LEASE_NAME: &str = "nodemedic-prober";
/// The annotation where the holder publishes the admission result (JSON, [`Published`]).
pub const ADMISSION_ANNOTATION: &str = "nodemedic.io/admission";
/// The annotation with a one-line summary of [`ADMISSION_ANNOTATION`], for people
/// (`kubectl nodemedic status`).
pub const SUMMARY_ANNOTATION: &str = "nodemedic.io/admission-summary";
/// The default lease duration.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(60);

/// What the prober publishes for every agent and every user: the last dry-run creates and the
/// webhooks' mean latencies, as measured from its node.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Published {
    /// The node of the agent that measured.
    pub node: String,
    /// When, unix seconds.
    pub at: i64,
    /// The last dry-run creates (`create_dry_run` samples), oldest first.
    pub samples: Vec<ProbeSample>,
    /// Webhooks that match pod CREATE, with their mean latency when known (seconds).
    pub webhooks: Vec<PublishedWebhook>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PublishedWebhook {
    pub name: String,
    pub configuration: String,
    pub mean_latency_seconds: Option<f64>,
}

impl Published {
    /// One line for people: the dry-run creates' median and maximum, failures, the slowest
    /// webhook by the API server's own metrics.
    pub fn summary(&self) -> String {
        let at = jiff::Timestamp::from_second(self.at).map_or_else(|_| self.at.to_string(), |t| t.to_string());
        let mut totals: Vec<f64> = self.samples.iter().filter(|s| s.ok).map(|s| s.total_seconds).collect();
        totals.sort_by(f64::total_cmp);
        let failed = self.samples.len() - totals.len();
        let n = self.samples.len();
        let creates = if n == 1 { "create" } else { "creates" };
        let mut line = format!("{n} dry-run {creates} from {} at {at}", self.node);
        if let (Some(median), Some(max)) = (totals.get(totals.len() / 2), totals.last()) {
            line.push_str(&format!(": median {median:.3} s, max {max:.3} s"));
        }
        line.push_str(&format!(", {failed} failed"));
        let slowest = self
            .webhooks
            .iter()
            .filter_map(|w| w.mean_latency_seconds.map(|l| (l, &w.name)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((latency, name)) = slowest {
            line.push_str(&format!("; slowest webhook {name} ({latency:.3} s mean)"));
        }
        line.replace('|', "/")
    }
}

/// The most samples published (the annotation stays small).
pub const PUBLISHED_SAMPLES: usize = 5;

/// This agent's part in the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// This agent holds the Lease: it probes for the cluster.
    Leading,
    /// Another agent (named when known) holds it, or nobody does yet.
    Following { holder: Option<String> },
}

/// What one step did.
#[derive(Debug)]
pub struct Step {
    pub role: Role,
    /// The timed read of the Lease, when this step read it.
    pub sample: Option<ProbeSample>,
    /// What the holder published, as last read.
    pub published: Option<Published>,
    /// When to step again.
    pub next: Duration,
}

/// The election's settings.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    pub namespace: String,
    pub name: String,
    /// This agent: its pod name, and its node after a slash.
    pub identity: String,
    pub duration: Duration,
    /// The timeout of each read and update.
    pub timeout: Duration,
}

impl ElectionConfig {
    pub fn renew_every(&self) -> Duration {
        self.duration / 3
    }
    pub fn read_every(&self) -> Duration {
        self.duration * 4 / 5
    }
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }
}

/// One agent's side of the election.
pub struct Elector {
    cfg: ElectionConfig,
    api: Api<Lease>,
    target: Target,
    /// The Lease as last read or written.
    lease: Option<Lease>,
    /// The record last seen (holder, renew time, transitions) and when it was first seen.
    observed: Option<(String, Instant)>,
    leading: bool,
    last_renewed: Option<Instant>,
    backoff: Backoff,
    jitter: Jitter,
    published: Option<Published>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("identity", &self.cfg.identity)
            .field("leading", &self.leading)
            .finish()
    }
}

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

fn record(lease: &Lease) -> String {
    let spec = lease.spec.clone().unwrap_or_default();
    format!(
        "{}|{}|{}",
        spec.holder_identity.unwrap_or_default(),
        spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
        spec.lease_transitions.unwrap_or(0)
    )
}

fn holder(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
}

/// What the holder published on `lease`, if anything readable.
pub fn published(lease: &Lease) -> Option<Published> {
    let text = lease.metadata.annotations.as_ref()?.get(ADMISSION_ANNOTATION)?;
    serde_json::from_str(text).ok()
}

impl Elector {
    pub fn new(cfg: ElectionConfig, client: kube::Client, target: Target) -> Self {
        let api = Api::namespaced(client, &cfg.namespace);
        let backoff = Backoff::new(cfg.read_every(), Duration::from_secs(300), 0x1ea5e);
        Elector {
            cfg,
            api,
            target,
            lease: None,
            observed: None,
            leading: false,
            last_renewed: None,
            backoff,
            jitter: Jitter::new(0x1ea5e),
            published: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    /// The API server answers again: the next failure starts the backoff from its first step.
    pub fn nudge(&mut self) {
        self.backoff.reset();
    }

    /// The last read or renewal failed: the next step waits out a backoff.
    pub fn failing(&self) -> bool {
        self.backoff.failures() > 0
    }

    /// Sets what the next renewal publishes (only the holder publishes).
    pub fn publish(&mut self, p: Published) {
        self.published = Some(p);
    }

    fn role(&self) -> Role {
        if self.leading {
            Role::Leading
        } else {
            Role::Following {
                holder: self.lease.as_ref().and_then(holder),
            }
        }
    }

    fn step_result(&self, sample: Option<ProbeSample>, next: Duration) -> Step {
        Step {
            role: self.role(),
            sample,
            published: self.lease.as_ref().and_then(published),
            next,
        }
    }

    /// One step of the election: renew (holder) or read and maybe take over (others).
    pub async fn step(&mut self) -> Step {
        if self.leading {
            return self.renew().await;
        }
        let path = format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
            self.cfg.namespace, self.cfg.name
        );
        let (sample, answer) = self.target.get(&path, self.cfg.timeout).await;
        let lease = match answer {
            Some((200, body)) => match serde_json::from_slice::<Lease>(&body) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(lease = %self.cfg.name, error = %e, "the Lease does not parse");
                    let pause = self.backoff.fail();
                    return self.step_result(Some(sample), pause);
                }
            },
            Some((404, _)) => return self.create(sample).await,
            Some((403, body)) => {
                // The API server answered (the path is fine); RBAC is missing.
                let mut sample = sample;
                sample.ok = true;
                sample.error = None;
                let pause = self.backoff.fail();
                tracing::error!(
                    lease = %self.cfg.name,
                    namespace = %self.cfg.namespace,
                    answer = %String::from_utf8_lossy(&body[..body.len().min(300)]),
                    "reading the prober Lease is forbidden: no agent can be elected to probe admission \
                     (RBAC: get, update and create on leases, docs/operations/prober.md)"
                );
                return self.step_result(Some(sample), pause);
            }
            _ => {
                let pause = self.backoff.fail();
                tracing::debug!(error = ?sample.error, retry_in_s = pause.as_secs_f64(), "reading the Lease failed");
                return self.step_result(Some(sample), pause);
            }
        };
        self.backoff.reset();
        let key = record(&lease);
        if self.observed.as_ref().is_none_or(|(k, _)| *k != key) {
            self.observed = Some((key, Instant::now()));
        }
        let duration = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .filter(|d| *d > 0)
            .map_or(self.cfg.duration, |d| Duration::from_secs(d as u64));
        let seen_for = self.observed.as_ref().map_or(Duration::ZERO, |(_, at)| at.elapsed());
        let current = holder(&lease);
        let mine = current.as_deref() == Some(self.cfg.identity.as_str());
        self.lease = Some(lease);
        if mine || current.is_none() || seen_for >= duration {
            return self.take_over(sample).await;
        }
        // Read again at the usual period (±10%, so agents started together drift apart), or
        // right when the record would expire.
        let until_expiry = duration.saturating_sub(seen_for) + Duration::from_millis(500);
        let period = self.jitter.spread(self.cfg.read_every(), 0.1);
        self.step_result(Some(sample), period.min(until_expiry))
    }

    fn spec_now(&self, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.cfg.duration.as_secs() as i32),
            acquire_time: Some(acquired.unwrap_or_else(now_micro)),
            renew_time: Some(now_micro()),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    fn annotate(&self, lease: &mut Lease) {
        if let Some(p) = &self.published {
            if let Ok(text) = serde_json::to_string(p) {
                let annotations = lease.metadata.annotations.get_or_insert_with(Default::default);
                annotations.insert(ADMISSION_ANNOTATION.into(), text);
                annotations.insert(SUMMARY_ANNOTATION.into(), p.summary());
            }
        }
    }

    async fn create(&mut self, sample: ProbeSample) -> Step {
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.cfg.name.clone()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: Some([("app.kubernetes.io/name".to_string(), "nodemedic".to_string())].into()),
                ..Default::default()
            },
            spec: Some(self.spec_now(0, None)),
        };
        self.annotate(&mut lease);
        let created = kube_api::with_deadline(
            "POST",
            format!("leases {}/{}", self.cfg.namespace, self.cfg.name),
            self.cfg.timeout,
            self.api.create(&PostParams::default(), &lease),
        )
        .await;
        match created {
            Ok(l) => self.became_leader(l),
            Err(e) => {
                // Another agent created it first (409), or the API failed: read again soon.
                if e.status() != Some(409) {
                    tracing::warn!(error = %e, "could not create the Lease");
                }
                let pause = if e.status() == Some(409) {
                    Duration::from_secs(1)
                } else {
                    self.backoff.fail()
                };
                self.step_result(Some(sample), pause)
            }
        }
    }

    fn became_leader(&mut self, lease: Lease) -> Step {
        tracing::info!(lease = %self.cfg.name, identity = %self.cfg.identity, "elected: this agent probes admission for the cluster");
        self.leading = true;
        self.last_renewed = Some(Instant::now());
        self.observed = Some((record(&lease), Instant::now()));
        self.lease = Some(lease);
        self.backoff.reset();
        self.step_result(None, self.cfg.renew_every())
    }

    /// Takes the Lease over (or renews it when the record already names this agent).
    async fn take_over(&mut self, sample: ProbeSample) -> Step {
        let Some(mut lease) = self.lease.clone() else {
            return self.step_result(Some(sample), self.cfg.read_every());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.cfg.identity.as_str());
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        lease.spec = Some(self.spec_now(transitions, if mine { spec.acquire_time } else { None }));
        self.annotate(&mut lease);
        match self.replace(&lease).await {
            Ok(l) => self.became_leader(l),
            Err(e) => {
                if e.status() != Some(409) {
                    tracing::warn!(error = %e, "could not take the Lease over");
                }
                let pause = if e.status() == Some(409) {
                    self.cfg.read_every()
                } else {
                    self.backoff.fail()
                };
                self.step_result(Some(sample), pause)
            }
        }
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, kube_api::Error> {
        kube_api::with_deadline(
            "PUT",
            format!("leases {}/{}", self.cfg.namespace, self.cfg.name),
            self.cfg.timeout,
            self.api.replace(&self.cfg.name, &PostParams::default(), lease),
        )
        .await
    }

    async fn renew(&mut self) -> Step {
        let Some(mut lease) = self.lease.clone() else {
            self.leading = false;
            return self.step_result(None, Duration::ZERO);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        lease.spec = Some(self.spec_now(spec.lease_transitions.unwrap_or(0), spec.acquire_time));
        self.annotate(&mut lease);
        match self.replace(&lease).await {
            Ok(l) => {
                self.lease = Some(l);
                self.last_renewed = Some(Instant::now());
                self.backoff.reset();
                self.step_result(None, self.cfg.renew_every())
            }
            Err(e) if e.status() == Some(409) => {
                // Someone else wrote it: read it and follow whoever holds it now.
                tracing::warn!(lease = %self.cfg.name, "the Lease changed under this agent: stepping down");
                self.step_down();
                self.step_result(None, Duration::ZERO)
            }
            Err(e) => {
                let silent = self.last_renewed.map_or(Duration::MAX, |t| t.elapsed());
                if silent >= self.cfg.renew_deadline() {
                    tracing::warn!(error = %e, "could not renew the Lease in time: stepping down");
                    self.step_down();
                    let pause = self.backoff.fail();
                    return self.step_result(None, pause);
                }
                tracing::warn!(error = %e, "could not renew the Lease; retrying");
                // Retry within the renew deadline, a little later each time.
                let pause = self
                    .backoff
                    .fail()
                    .min(self.cfg.renew_every() / 2)
                    .max(Duration::from_secs(1));
                self.step_result(None, pause)
            }
        }
    }

    fn step_down(&mut self) {
        self.leading = false;
        self.last_renewed = None;
        self.observed = None;
    }

    /// Gives the Lease up (on shutdown) so that another agent takes over at its next read.
    /// Bounded by `deadline`; a failure is only logged (the Lease then expires by itself).
    pub async fn release(&mut self, deadline: Duration) {
        if !self.leading {
            return;
        }
        let Some(mut lease) = self.lease.clone() else { return };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = Some(now_micro());
            spec.lease_duration_seconds = Some(1);
        }
        let released = kube_api::with_deadline(
            "PUT",
            format!("leases {}/{}", self.cfg.namespace, self.cfg.name),
            deadline,
            self.api.replace(&self.cfg.name, &PostParams::default(), &lease),
        )
        .await;
        match released {
            Ok(_) => tracing::info!(lease = %self.cfg.name, "released the Lease"),
            Err(e) => tracing::warn!(error = %e, "could not release the Lease; it expires by itself"),
        }
        self.step_down();
    }
}

#[cfg(test)]
mod tests {
    use nodemedic_rules::snapshot::ProbeSample;

    use super::*;

    fn sample(total: f64) -> ProbeSample {
        ProbeSample {
            probe: "create_dry_run".into(),
            ok: true,
            total_seconds: total,
            ..Default::default()
        }
    }

    #[test]
    fn the_summary_counts_its_creates_in_words() {
        let mut p = Published {
            node: "worker-3".into(),
            at: 0,
            samples: vec![sample(0.25)],
            webhooks: vec![PublishedWebhook {
                name: "a|b.example.com".into(),
                configuration: "c".into(),
                mean_latency_seconds: Some(0.2),
            }],
        };
        let one = p.summary();
        assert!(
            one.starts_with("1 dry-run create from worker-3 at 1970-01-01T00:00:00Z: median 0.250 s"),
            "{one}"
        );
        // `|` is the plugin's field separator: never inside the line.
        assert!(
            one.ends_with("0 failed; slowest webhook a/b.example.com (0.200 s mean)"),
            "{one}"
        );
        p.samples.push(sample(0.5));
        assert!(
            p.summary().starts_with("2 dry-run creates from worker-3"),
            "{}",
            p.summary()
        );
    }
}
