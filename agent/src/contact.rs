//! Whether this node can reach the API server, as every request of the daemon finds it.
//!
//! [`ApiContact`] is told the outcome of each request the daemon sends (the pod watch, the API
//! work, the probes, the fencing heartbeat): *answered* when any HTTP answer came back (a 200,
//! a 503, a 429 alike: the API server, or its load balancer, is there), *failed* when none
//! did (the connection refused, a TLS failure, a timeout). From that it keeps one number
//! that driver fencing acts on: how long the API server has been unreachable, counted from
//! the first failure after the last answer, on the monotonic clock.
//!
//! Counted from the first failure, not from the last answer: a quiet daemon sends nothing for
//! long stretches (only its watch is open), and "no answer for N seconds" measured from the
//! last answer would call a 10 s blip after 25 s of silence a 35 s outage. Counted on the
//! monotonic clock ([`Instant`]): a wall clock set forward by NTP or by hand does not make an
//! outage longer. The wall time of the first failure is kept beside it, for people.

use std::sync::Mutex;
use std::time::{Instant, SystemTime};

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
    outage: Option<Outage>,
}

/// What the daemon's requests found; shared by every task that sends one.
#[derive(Debug, Default)]
pub struct ApiContact {
    state: Mutex<State>,
}

impl ApiContact {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request got an HTTP answer, whatever its status.
    pub fn answered(&self) {
        self.answered_at(Instant::now());
    }

    /// [`ApiContact::answered`] at `now`.
    pub fn answered_at(&self, now: Instant) {
        let mut s = self.state();
        s.answered += 1;
        s.last_answer = Some(s.last_answer.map_or(now, |t| t.max(now)));
        s.outage = None;
    }

    /// A request got no answer (`error` says why).
    pub fn failed(&self, error: &str) {
        self.failed_at(Instant::now(), SystemTime::now(), error);
    }

    /// [`ApiContact::failed`] at `now` (monotonic) and `wall`.
    pub fn failed_at(&self, now: Instant, wall: SystemTime, error: &str) {
        let mut s = self.state();
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
    }

    /// Records the outcome of a request: answered when `status` is some HTTP status.
    pub fn observe(&self, status: Option<u16>, error: Option<&str>) {
        match (status, error) {
            (Some(_), _) | (None, None) => self.answered(),
            (None, Some(e)) => self.failed(e),
        }
    }

    /// Where contact stands now.
    pub fn reach(&self) -> Reach {
        let s = self.state();
        match &s.outage {
            Some(o) if s.answered > 0 => Reach::Unreachable(o.clone()),
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
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
        c.answered_at(t0 + Duration::from_secs(1));
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
        c.answered_at(t0);
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
}
