//! Jittered exponential backoff, for every loop that retries a request to the API server.
//!
//! A fleet of agents that lose the API server at the same moment must not come back at the
//! same moment, nor retry at a flat rate while it is away: each failure doubles the pause up
//! to a cap, and each pause is drawn from its upper half (`[d/2, d]`, "equal jitter"), so the
//! agents spread out while every pause stays within a factor of two of the schedule. A success
//! starts the schedule over.
//!
//! A [`Gate`] reads tokio's clock (the system's monotonic clock except under a test's paused
//! clock), so the schedules can be proved in tests that run minutes in milliseconds.

use std::time::Duration;

use tokio::time::Instant;

/// A small xorshift generator: the jitter needs spread, not cryptographic quality, and each
/// agent seeds it from its pid and the clock.
#[derive(Debug, Clone)]
pub struct Jitter(u64);

impl Jitter {
    /// Seeded from the process id, the clock and `salt` (so two loops of one agent differ).
    pub fn new(salt: u64) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = nanos ^ (u64::from(std::process::id()) << 32) ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Jitter(seed | 1)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `d` scaled by a factor in `[1 - spread, 1 + spread]`.
    pub fn spread(&mut self, d: Duration, spread: f64) -> Duration {
        d.mul_f64(1.0 - spread + 2.0 * spread * self.unit())
    }
}

/// One retry schedule: `first`, doubling up to `cap`.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    /// The ceiling of the next pause.
    next: Duration,
    failures: u32,
    jitter: Jitter,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration, salt: u64) -> Self {
        Backoff {
            first,
            cap: cap.max(first),
            next: first,
            failures: 0,
            jitter: Jitter::new(salt),
        }
    }

    /// The pause after one more failure: drawn from `[c/2, c]` where `c` doubles from `first`
    /// to `cap` with each failure.
    pub fn fail(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(self.cap);
        self.failures = self.failures.saturating_add(1);
        ceiling.mul_f64(0.5 + 0.5 * self.jitter.unit())
    }

    /// A success: the next failure pauses `first` again.
    pub fn reset(&mut self) {
        self.next = self.first;
        self.failures = 0;
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// A [`Backoff`] for work that runs on its own schedule (a write pass, a probe round): after a
/// failure, the work is not attempted again before the pause is over.
#[derive(Debug, Clone)]
pub struct Gate {
    backoff: Backoff,
    not_before: Option<Instant>,
}

impl Gate {
    pub fn new(first: Duration, cap: Duration, salt: u64) -> Self {
        Gate {
            backoff: Backoff::new(first, cap, salt),
            not_before: None,
        }
    }

    /// Whether the work may run now.
    pub fn open(&self) -> bool {
        self.not_before.is_none_or(|t| Instant::now() >= t)
    }

    /// How long until it may run (zero when open).
    pub fn wait(&self) -> Duration {
        self.not_before
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(Instant::now()))
    }

    /// The work failed: closed for the next pause, which is returned.
    pub fn fail(&mut self) -> Duration {
        let pause = self.backoff.fail();
        self.not_before = Some(Instant::now() + pause);
        pause
    }

    /// The work succeeded: open, and the schedule starts over.
    pub fn succeed(&mut self) {
        self.backoff.reset();
        self.not_before = None;
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.backoff.failures()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_within_their_upper_half_up_to_the_cap_and_reset() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(300), 7);
        let ceilings = [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300];
        for c in ceilings {
            let p = b.fail().as_secs_f64();
            assert!(
                p >= c as f64 / 2.0 && p <= c as f64,
                "pause {p} outside [{}, {c}]",
                c as f64 / 2.0
            );
        }
        assert_eq!(b.failures(), 12);
        b.reset();
        assert!(b.fail() <= Duration::from_secs(1));
    }

    #[test]
    fn the_jitter_spreads_agents_that_fail_together() {
        // 50 agents failing at the same moment: their third pause (ceiling 4 s) spreads over
        // [2, 4] s instead of landing on one instant.
        let pauses: Vec<f64> = (0..50)
            .map(|i| {
                let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(300), i);
                b.fail();
                b.fail();
                b.fail().as_secs_f64()
            })
            .collect();
        let min = pauses.iter().cloned().fold(f64::MAX, f64::min);
        let max = pauses.iter().cloned().fold(0.0, f64::max);
        assert!(min >= 2.0 && max <= 4.0);
        assert!(max - min > 1.0, "pauses bunched in [{min}, {max}]");
    }

    #[test]
    fn a_gate_closes_after_a_failure_and_opens_on_success() {
        let mut g = Gate::new(Duration::from_secs(10), Duration::from_secs(60), 1);
        assert!(g.open());
        let pause = g.fail();
        assert!(!g.open() && pause >= Duration::from_secs(5));
        assert!(g.wait() > Duration::from_secs(4));
        g.succeed();
        assert!(g.open() && g.wait() == Duration::ZERO && g.failures() == 0);
    }

    /// The daemon's schedules are proved under tokio's paused clock
    /// (`daemon::outage_tests`): a gate must follow that clock, not the system's.
    #[tokio::test(start_paused = true)]
    async fn a_gate_opens_when_its_pause_is_over_on_tokios_clock() {
        let mut g = Gate::new(Duration::from_secs(2), Duration::from_secs(300), 5);
        let pause = g.fail();
        assert!(pause >= Duration::from_secs(1) && pause <= Duration::from_secs(2));
        tokio::time::advance(pause - Duration::from_millis(1)).await;
        assert!(!g.open() && g.wait() == Duration::from_millis(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(g.open() && g.wait() == Duration::ZERO);
    }

    #[test]
    fn spread_stays_within_bounds() {
        let mut j = Jitter::new(3);
        for _ in 0..1000 {
            let d = j.spread(Duration::from_secs(100), 0.1).as_secs_f64();
            assert!((90.0..=110.0).contains(&d));
        }
    }
}
