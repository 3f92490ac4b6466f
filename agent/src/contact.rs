//! Whether this node can reach the API server, as every request of the daemon finds it.
//!
//! [`ApiContact`] is the agent's one record of answered requests. It is told the outcome of
//! each request the daemon sends (the pod watch and its events, the API work, the probes and
//! the election's Lease reads, the fencing heartbeat): *answered* when any HTTP answer came
//! back, whatever its status (a 200, a 404, a 401, a 429, a 503 alike: the API server, or its
//! load balancer, is there and talks to this node), *failed* when none did (the connection
//! refused or reset, a TLS failure, a timeout). From that it keeps:
//! - how long the API server has been unreachable, counted from the first failure after the
//!   last answer, on the monotonic clock ([`Reach`]): what driver fencing acts on, what the
//!   rule `apiserver-unreachable` reports ([`ApiContact::stamp`]) and what
//!   `nodemedic_api_up` shows (1 from an answer, 0 from a failure, 0 before any answer);
//! - whether the API server *serves* again after trouble: an answer that is neither a failure
//!   nor a refusal (401, 429, 5xx) after one that was. The first such answer bumps
//!   [`ApiContact::back_signal`], so the loops that back off (the election, the probes, the
//!   API work) try again at once instead of waiting out their pause, whichever request of the
//!   agent saw it first. A 403 is not trouble: it is the API server's decision about this
//!   agent's rights, which no retry changes. An event on a watch opened earlier is an answer
//!   (it ends an outage) but not news that new requests are served ([`Answer::Streamed`]).
//!
//! Counted from the first failure, not from the last answer: a quiet daemon sends nothing for
//! long stretches (only its watch is open), and "no answer for N seconds" measured from the
//! last answer would call a 10 s blip after 25 s of silence a 35 s outage. Counted on the
//! monotonic clock ([`Instant`]): a wall clock set forward by NTP or by hand does not make an
//! outage longer. The wall time of the first failure is kept beside it, for people. The clock
//! is tokio's (the monotonic clock outside tests), so that tests can run it paused.

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use nodemedic_rules::snapshot::ApiObservation;

/// The monotonic clock the agent's outage clocks read: tokio's, which is the system's
/// monotonic clock except under a test's paused clock.
pub fn mono_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Whether an HTTP answer with `status` is a refusal: the API server (or what stands in front
/// of it) is there but did not serve the request, and may serve it later: 401 (credentials
/// rejected), 429 (throttled) and every 5xx.
pub fn is_refusal(status: u16) -> bool {
    status == 401 || status == 429 || status >= 500
}

/// What kind of answer a request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP answer that served the request (any status but a refusal).
    Served,
    /// An HTTP answer that refused it ([`is_refusal`]).
    Refused,
    /// An event on a watch stream opened earlier: the connection lives, but it says nothing
    /// of whether a new request would be served (authentication and admission happen when a
    /// request starts), so it ends an outage and leaves trouble as it was.
    Streamed,
}

/// The state of contact with the API server.
#[derive(Debug, Clone, PartialEq)]
pub enum Reach {
    /// No request has been answered yet: the daemon has never seen the API server, so it
    /// knows nothing it could trust about its pods.
    Never,
    /// The last outcome was an answer (or nothing failed since the last answer).
    Reachable,
    /// Requests have failed, and none was answered, since `since`.
    Unreachable(Outage),
}

/// An outage as seen from this node.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    /// The first failure after the last answer (monotonic).
    pub since: Instant,
    /// The same moment on the wall clock, for the journal and the log.
    pub since_wall: SystemTime,
    /// Failed requests since then.
    pub failures: u64,
    /// The last failure's error.
    pub last_error: String,
    /// When the last failure happened (monotonic): how current the outage's evidence is.
    pub last_failure: Instant,
}

impl Outage {
    /// How long it has lasted at `now`.
    pub fn lasted(&self, now: Instant) -> std::time::Duration {
        now.saturating_duration_since(self.since)
    }
}

#[derive(Debug, Default)]
struct State {
    answered: u64,
    last_answer: Option<Instant>,
    /// The last answer on the wall clock, for the rule and for people.
    last_answer_wall: Option<SystemTime>,
    outage: Option<Outage>,
    /// A request failed or was refused since the last answer that served.
    troubled: bool,
    /// The outage was carried over from before this agent restarted ([`ApiContact::resume`]):
    /// the API server was seen then.
    resumed: bool,
}

/// What the daemon's requests found; shared by every task that sends one.
#[derive(Debug)]
pub struct ApiContact {
    state: Mutex<State>,
    /// Bumped at the first answer that serves after trouble.
    back: Arc<tokio::sync::watch::Sender<u64>>,
    /// `nodemedic_api_up`, when the daemon exports it.
    up: std::sync::OnceLock<crate::exposition::IntGauge>,
    /// Notified with `back`, and when any answer ends an outage: the scan loop, which judges
    /// `apiserver-unreachable` again.
    wake: std::sync::OnceLock<Arc<tokio::sync::Notify>>,
}

impl Default for ApiContact {
    fn default() -> Self {
        ApiContact {
            state: Mutex::default(),
            back: Arc::new(tokio::sync::watch::channel(0).0),
            up: std::sync::OnceLock::new(),
            wake: std::sync::OnceLock::new(),
        }
    }
}

fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

impl ApiContact {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The signal bumped when the API server serves again after trouble: the daemon's API loops
    /// stop waiting out their backoff when it changes. An answer that refuses (a 401 ending a
    /// refused-connection outage, say) bumps nothing: those loops would be refused too.
    pub fn back_signal(&self) -> Arc<tokio::sync::watch::Sender<u64>> {
        self.back.clone()
    }

    /// Exports reachability as `gauge` (`nodemedic_api_up`): 1 from an answer, 0 from a
    /// failure, 0 until the first answer.
    pub fn export_up(&self, gauge: crate::exposition::IntGauge) {
        let up = self.reach() == Reach::Reachable;
        gauge.set(i64::from(up));
        let _ = self.up.set(gauge);
    }

    /// Notifies `wake` with [`ApiContact::back_signal`], and when any answer ends an outage.
    pub fn wake_on_back(&self, wake: Arc<tokio::sync::Notify>) {
        let _ = self.wake.set(wake);
    }

    /// Tells the scan loop that reachability changed (an outage ended), and, when `served`, the
    /// loops that back off that the API server serves again.
    fn news(&self, served: bool) {
        if served {
            self.back.send_modify(|n| *n = n.wrapping_add(1));
        }
        if let Some(w) = self.wake.get() {
            w.notify_one();
        }
    }

    /// A request got an answer that served it (any status but a refusal, [`is_refusal`]).
    pub fn answered(&self) {
        self.answered_at(mono_now(), SystemTime::now(), Answer::Served);
    }

    /// A request got an HTTP answer with `status`.
    pub fn answered_with(&self, status: u16) {
        let kind = if is_refusal(status) {
            Answer::Refused
        } else {
            Answer::Served
        };
        self.answered_at(mono_now(), SystemTime::now(), kind);
    }

    /// An open watch delivered an event or a bookmark.
    pub fn streamed(&self) {
        self.answered_at(mono_now(), SystemTime::now(), Answer::Streamed);
    }

    /// An answer of `kind` at `now` (monotonic) and `wall`.
    pub fn answered_at(&self, now: Instant, wall: SystemTime, kind: Answer) {
        let mut s = self.state();
        s.answered += 1;
        s.last_answer = Some(s.last_answer.map_or(now, |t| t.max(now)));
        s.last_answer_wall = Some(s.last_answer_wall.map_or(wall, |t| t.max(wall)));
        let ended = s.outage.take().is_some();
        s.resumed = false;
        let served_again = kind == Answer::Served && s.troubled;
        match kind {
            Answer::Served => s.troubled = false,
            Answer::Refused => s.troubled = true,
            Answer::Streamed => {}
        }
        drop(s);
        if let Some(g) = self.up.get() {
            g.set(1);
        }
        if ended || served_again {
            self.news(served_again);
        }
    }

    /// A request got no answer (`error` says why).
    pub fn failed(&self, error: &str) {
        self.failed_at(mono_now(), SystemTime::now(), error);
    }

    /// [`ApiContact::failed`] at `now` (monotonic) and `wall`.
    pub fn failed_at(&self, now: Instant, wall: SystemTime, error: &str) {
        let mut s = self.state();
        s.troubled = true;
        match &mut s.outage {
            Some(o) => {
                o.failures += 1;
                o.last_error = error.to_string();
                o.last_failure = o.last_failure.max(now);
            }
            None => {
                s.outage = Some(Outage {
                    since: now,
                    since_wall: wall,
                    failures: 1,
                    last_error: error.to_string(),
                    last_failure: now,
                })
            }
        }
        drop(s);
        if let Some(g) = self.up.get() {
            g.set(0);
        }
    }

    /// Records the outcome of a request: answered when `status` is some HTTP status (or
    /// nothing failed), failed when there is no status and an error.
    pub fn observe(&self, status: Option<u16>, error: Option<&str>) {
        match (status, error) {
            (Some(s), _) => self.answered_with(s),
            (None, None) => self.answered(),
            (None, Some(e)) => self.failed(e),
        }
    }

    /// Carries over an outage this agent saw before it restarted (the fencing state): the
    /// outage then started at `outage.since`, and the API server had been seen before it.
    /// Ignored (false) once this agent has had an answer: the outage is over. Failures seen
    /// since the start are added to it, and it starts at the earlier of the two.
    pub fn resume(&self, outage: Outage) -> bool {
        let mut s = self.state();
        if s.answered > 0 {
            return false;
        }
        let merged = match s.outage.take() {
            None => outage,
            Some(now) => Outage {
                since: outage.since.min(now.since),
                since_wall: if outage.since <= now.since {
                    outage.since_wall
                } else {
                    now.since_wall
                },
                failures: outage.failures + now.failures,
                last_error: now.last_error,
                last_failure: outage.last_failure.max(now.last_failure),
            },
        };
        s.outage = Some(merged);
        s.resumed = true;
        s.troubled = true;
        true
    }

    /// Where contact stands now.
    pub fn reach(&self) -> Reach {
        let s = self.state();
        match &s.outage {
            Some(o) if s.answered > 0 || s.resumed => Reach::Unreachable(o.clone()),
            _ if s.answered == 0 => Reach::Never,
            _ => Reach::Reachable,
        }
    }

    /// How many requests have been answered since start.
    pub fn answers(&self) -> u64 {
        self.state().answered
    }

    /// When the last answer came.
    pub fn last_answer(&self) -> Option<Instant> {
        self.state().last_answer
    }

    /// `observation` with this record's view of reachability: the last answer of any request
    /// (`last_success_at`), the first failure after it (`unreachable_since`, also before any
    /// answer) and the last failure's error. What `apiserver-unreachable` judges.
    pub fn stamp(&self, mut observation: ApiObservation) -> ApiObservation {
        let s = self.state();
        observation.last_success_at = s.last_answer_wall.map(unix_seconds);
        observation.unreachable_since = s.outage.as_ref().map(|o| unix_seconds(o.since_wall));
        observation.last_error = s.outage.as_ref().map(|o| o.last_error.clone());
        observation
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt as _;

    use super::*;

    #[test]
    fn an_outage_counts_from_the_first_failure_not_the_last_answer() {
        let c = ApiContact::new();
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(c.reach(), Reach::Never);
        // Failures before any answer: still never seen.
        c.failed_at(t0, wall, "connection refused");
        assert_eq!(c.reach(), Reach::Never);
        c.answered_at(t0 + Duration::from_secs(1), wall, Answer::Served);
        assert_eq!(c.reach(), Reach::Reachable);
        // 25 s of silence, then a failure: the outage starts at the failure.
        let first = t0 + Duration::from_secs(26);
        c.failed_at(first, wall + Duration::from_secs(26), "connection refused");
        c.failed_at(first + Duration::from_secs(5), wall, "timeout");
        let Reach::Unreachable(o) = c.reach() else {
            panic!("{:?}", c.reach())
        };
        assert_eq!(o.since, first);
        assert_eq!(
            o.since_wall,
            wall + Duration::from_secs(26),
            "the first failure's wall time"
        );
        assert_eq!(o.failures, 2);
        assert_eq!(o.last_error, "timeout");
        assert_eq!(o.lasted(first + Duration::from_secs(10)), Duration::from_secs(10));
        // Any answer ends it, and the next failure starts a new one.
        c.observe(Some(503), Some("service unavailable"));
        assert_eq!(c.reach(), Reach::Reachable);
        let later = first + Duration::from_secs(60);
        c.failed_at(later, wall, "refused");
        assert!(matches!(c.reach(), Reach::Unreachable(o) if o.since == later && o.failures == 1));
        assert_eq!(c.answers(), 2);
    }

    #[test]
    fn a_wall_clock_jump_does_not_lengthen_an_outage() {
        let c = ApiContact::new();
        let t0 = Instant::now();
        c.answered_at(t0, SystemTime::UNIX_EPOCH, Answer::Served);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000);
        c.failed_at(t0 + Duration::from_secs(1), wall, "refused");
        // The wall clock jumps an hour ahead between two failures; the monotonic one moved 2 s.
        c.failed_at(t0 + Duration::from_secs(3), wall + Duration::from_secs(3600), "refused");
        let Reach::Unreachable(o) = c.reach() else { panic!() };
        assert_eq!(o.lasted(t0 + Duration::from_secs(3)), Duration::from_secs(2));
        // The last failure is when the evidence is from: the latest one, whatever order the
        // reports of concurrent requests arrive in.
        assert_eq!(o.last_failure, t0 + Duration::from_secs(3));
        c.failed_at(t0 + Duration::from_secs(2), wall, "refused");
        let Reach::Unreachable(o) = c.reach() else { panic!() };
        assert_eq!((o.last_failure, o.failures), (t0 + Duration::from_secs(3), 3));
    }
    #[test]
    fn the_back_signal_fires_at_the_first_served_answer_after_any_failure_401_included() {
        let c = ApiContact::new();
        let back = c.back_signal().subscribe();
        let changes = || *back.borrow();
        let (t, wall) = (Instant::now(), SystemTime::UNIX_EPOCH);
        // The first answers ever: nothing came back, nothing to signal (one probe round at start).
        c.answered();
        c.answered_with(404);
        assert_eq!(changes(), 0);
        // A 403 is a decision about this agent's rights, not trouble.
        c.answered_with(403);
        c.answered();
        assert_eq!(changes(), 0);
        // 401s: answered (reachable, no outage), but not served.
        c.answered_with(401);
        c.answered_with(401);
        assert_eq!(c.reach(), Reach::Reachable);
        assert_eq!(changes(), 0);
        // Events on a watch opened before say nothing of new requests.
        c.streamed();
        assert_eq!(changes(), 0);
        // The first answer that serves after them.
        c.answered_with(200);
        assert_eq!(changes(), 1);
        c.answered_with(200);
        assert_eq!(changes(), 1, "once");
        // Connection failures: a 503 ends the outage, but the loops would be refused too ...
        let wake = Arc::new(tokio::sync::Notify::new());
        c.wake_on_back(wake.clone());
        c.failed_at(t, wall, "refused");
        c.answered_with(503);
        assert_eq!(c.reach(), Reach::Reachable);
        assert_eq!(changes(), 1);
        // ... so only the scan loop hears of it (it judges apiserver-unreachable again).
        assert!(wake.notified().now_or_never().is_some());
        // The first answer that serves after the 503s tells the loops.
        c.answered_with(503);
        c.answered_with(200);
        assert_eq!(changes(), 2);
    }

    #[test]
    fn api_up_follows_the_last_outcome_and_the_stamp_gives_the_rule_its_outage() {
        let c = ApiContact::new();
        let up = crate::exposition::IntGauge::new("api_up", "test").unwrap();
        up.set(7);
        c.export_up(up.clone());
        assert_eq!(up.get(), 0, "before any answer");
        let (t0, wall) = (Instant::now(), SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
        c.answered_at(t0, wall, Answer::Served);
        assert_eq!(up.get(), 1);
        let empty = ApiObservation {
            samples: vec![],
            probing_since: 0,
            last_success_at: Some(5),
            unreachable_since: Some(6),
            last_error: Some("old".into()),
            webhooks: nodemedic_rules::snapshot::Observed::Ok(vec![]),
        };
        let o = c.stamp(empty.clone());
        assert_eq!(
            (o.last_success_at, o.unreachable_since, o.last_error),
            (Some(1_000), None, None)
        );
        // A timed-out request: 0 at once, and the outage from its failure.
        c.failed_at(
            t0 + Duration::from_secs(30),
            wall + Duration::from_secs(30),
            "timed out after 10 s",
        );
        c.failed_at(t0 + Duration::from_secs(40), wall + Duration::from_secs(40), "refused");
        assert_eq!(up.get(), 0);
        let o = c.stamp(empty.clone());
        assert_eq!(o.last_success_at, Some(1_000));
        assert_eq!(o.unreachable_since, Some(1_030));
        assert_eq!(o.last_error.as_deref(), Some("refused"));
        // The first answer (a 401 too) ends it.
        c.answered_at(
            t0 + Duration::from_secs(50),
            wall + Duration::from_secs(50),
            Answer::Refused,
        );
        assert_eq!(up.get(), 1);
        let o = c.stamp(empty);
        assert_eq!((o.last_success_at, o.unreachable_since), (Some(1_050), None));
    }

    #[test]
    fn an_outage_resumed_after_a_restart_is_merged_and_ended_by_an_answer() {
        let c = ApiContact::new();
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(5_000);
        let before = Outage {
            since: t0,
            since_wall: wall,
            failures: 4,
            last_error: "refused".into(),
            last_failure: t0 + Duration::from_secs(20),
        };
        // This agent's own first failure came after the restart.
        c.failed_at(t0 + Duration::from_secs(25), wall + Duration::from_secs(25), "timeout");
        assert_eq!(c.reach(), Reach::Never);
        assert!(c.resume(before.clone()));
        let Reach::Unreachable(o) = c.reach() else {
            panic!("{:?}", c.reach())
        };
        assert_eq!((o.since, o.since_wall, o.failures), (t0, wall, 5));
        assert_eq!(o.last_failure, t0 + Duration::from_secs(25));
        assert_eq!(o.last_error, "timeout");
        c.answered();
        assert_eq!(c.reach(), Reach::Reachable);
        // Once answered, a record from before the restart is out of date.
        assert!(!c.resume(before));
        assert_eq!(c.reach(), Reach::Reachable);
    }
}
