//! The election's schedules ([`crate::leader`]): one holder's renewals, retries, step-down and
//! reads through a long refusal; and a fleet of agents, each running the real probe task
//! ([`crate::apimon::run`]), electing one prober, keeping their periods and failing over, as
//! `fleet.rs` does end to end with 30 processes (there with a 6 s lease, here with the
//! default 60 s one).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::fake::{FakeApi, Mode, Sent};
use super::{IDENTITY, NODE, Probes, Shared, Who, assert_backoff, secs, show, start_probes};
use crate::config::{Effective, FileConfig, Flags};
use crate::contact::ApiContact;
use crate::leader::{ElectionConfig, Elector, LEASE_NAME, Role};
use crate::metrics::Metrics;
use crate::probe::Target;

fn config(identity: &str) -> ElectionConfig {
    ElectionConfig {
        namespace: "default".into(),
        name: LEASE_NAME.into(),
        identity: identity.into(),
        duration: Duration::from_secs(60),
        timeout: Duration::from_secs(10),
    }
}

/// `outage.rs`'s election term and its note on the prober's return, for one holder stepped on
/// its own (no other loop tells it the API server is back): elected, it renews every 20 s
/// (a third of the 60 s lease); when renewals fail it retries 10 s later (its backoff, from 48
/// s, capped at half the renew period) until it has not renewed for 40 s (two thirds), then
/// steps down: 3 attempts at 20, 30 and 40 s. Its reads of the Lease then wait out pauses
/// of at least 96 s (the backoff's third ceiling, 192 s), then at least 150 s (the 300 s
/// cap): at most one a minute, through 30 minutes of refusal and 401s. When the API server is
/// back, its next read (at most 300 s later) finds the record still naming it and takes the
/// Lease back.
#[tokio::test(start_paused = true)]
async fn a_holder_that_cannot_renew_steps_down_at_40_s_and_reads_at_most_every_150_s() {
    let fake = FakeApi::new(vec![]);
    fake.switch_after_updates(2, Mode::Refusing);
    let target = Target::through(fake.client("target", None), "default", NODE);
    let mut elector = Elector::new(config(IDENTITY), fake.client("election", None), target);
    // The outage's phases, timed from its start: refused for 15 minutes, then 401s for 15.
    let phases = fake.clone();
    tokio::spawn(async move {
        let t0 = loop {
            if let Some((t, _)) = phases.switched_at() {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let origin = tokio::time::Instant::now() - (phases.now() - t0);
        tokio::time::sleep_until(origin + Duration::from_secs(900)).await;
        phases.set_mode(Mode::Unauthorized);
        tokio::time::sleep_until(origin + Duration::from_secs(1800)).await;
        phases.set_mode(Mode::Serving);
    });
    // (when, role, next) of every step, taken as `apimon::run` takes them.
    let mut steps: Vec<(f64, Role, f64)> = vec![];
    loop {
        let step = elector.step().await;
        steps.push((secs(fake.now()), step.role.clone(), secs(step.next)));
        tokio::time::sleep(step.next).await;
        if fake
            .switched_at()
            .is_some_and(|(t0, _)| fake.now() > t0 + Duration::from_secs(1800 + 360))
        {
            break;
        }
    }
    let (t0, _) = fake.switched_at().expect("the outage began");
    let t0 = secs(t0);
    let back = t0 + 1800.0;
    let log = fake.log();
    let context = format!(
        "steps (s from the outage, role, next):\n{}\nrequests:\n{}",
        steps
            .iter()
            .map(|(t, r, n)| format!("  {:>8.3} {r:?} {n:.3}", t - t0))
            .collect::<Vec<_>>()
            .join("\n"),
        show(&log, t0)
    );
    let leading = |r: &Role| *r == Role::Leading;
    // Before: elected at once (no Lease yet), renewed at 20 and 40 s, every step 20 s apart.
    let before: Vec<&(f64, Role, f64)> = steps.iter().filter(|s| s.0 < t0).collect();
    assert!(before.iter().all(|(_, r, n)| leading(r) && *n == 20.0), "{context}");
    assert_eq!(before.len(), 2, "{context}");
    // The outage: renewals at 20 and 30 s retry 10 s later; the one at 40 s steps down.
    let during: Vec<&(f64, Role, f64)> = steps.iter().filter(|s| s.0 >= t0 && s.0 < back).collect();
    let at = |i: usize| during.get(i).map(|(t, r, n)| (t - t0, leading(r), *n));
    assert_eq!(
        at(0),
        Some((0.0, true, 20.0)),
        "the renewal that began the outage\n{context}"
    );
    assert_eq!(at(1), Some((20.0, true, 10.0)), "{context}");
    assert_eq!(at(2), Some((30.0, true, 10.0)), "{context}");
    let (t, holding, next) = at(3).expect("a step at 40 s");
    assert!(t == 40.0 && !holding && (96.0..=192.0).contains(&next), "{context}");
    // Then reads only, following, 150 to 300 s apart.
    assert!(
        during[4..]
            .iter()
            .all(|(_, r, n)| !leading(r) && (150.0..=300.0).contains(n)),
        "{context}"
    );
    let lease_requests: Vec<&Sent> = log.iter().filter(|r| secs(r.at) > t0 && secs(r.at) < back).collect();
    let writes: Vec<f64> = lease_requests
        .iter()
        .filter(|r| r.kind() == "update lease")
        .map(|r| secs(r.at) - t0)
        .collect();
    assert_eq!(writes, [20.0, 30.0, 40.0], "{context}");
    let mut reads = vec![40.0];
    reads.extend(
        lease_requests
            .iter()
            .filter(|r| r.kind() == "get lease")
            .map(|r| secs(r.at) - t0),
    );
    assert_eq!(reads.len() - 1 + writes.len(), lease_requests.len(), "{context}");
    // 30 minutes: at least 1 + (1800 - 232) / 300 reads, at most 1 + (1800 - 136) / 150.
    assert!(
        (6..=12).contains(&(reads.len() - 1)),
        "{} reads\n{context}",
        reads.len() - 1
    );
    assert_backoff("Lease reads", &reads, 48.0, 300.0, 2, &context);
    // Back: the next read, when its pause is over, takes the Lease back; renewals every 20 s.
    let after: Vec<&(f64, Role, f64)> = steps.iter().filter(|s| s.0 >= back).collect();
    let (first, role, next) = after
        .first()
        .map(|s| (s.0 - back, s.1.clone(), s.2))
        .expect("a step after");
    assert!(first <= 300.0 && leading(&role) && next == 20.0, "{context}");
    assert_eq!(fake.holder().as_deref(), Some(IDENTITY));
}

/// One agent of the fleet.
struct Member {
    identity: String,
    metrics: Metrics,
    /// `stop`: SIGTERM.
    probes: Probes,
    task: tokio::task::JoinHandle<()>,
    alive: bool,
}

/// One look at the fleet, every 250 ms (as `fleet.rs` samples the Lease).
#[derive(Debug, Clone)]
struct Sample {
    at: f64,
    /// The agent the Lease names.
    holder: Option<usize>,
    /// The live agents whose `nodemedic_prober` is 1.
    ones: Vec<usize>,
}

struct Fleet {
    fake: FakeApi,
    members: Vec<Member>,
    samples: Vec<Sample>,
}

impl Fleet {
    fn holder(&self) -> Option<usize> {
        let h = self.fake.holder()?;
        self.members.iter().position(|m| m.identity == h)
    }

    fn sample(&mut self) {
        let ones = (0..self.members.len())
            .filter(|&i| self.members[i].alive && self.members[i].metrics.prober.get() == 1)
            .collect();
        let sample = Sample {
            at: secs(self.fake.now()),
            holder: self.holder(),
            ones,
        };
        self.samples.push(sample);
    }

    /// Runs the fleet for `d`, sampling.
    async fn run_for(&mut self, d: Duration) {
        let end = tokio::time::Instant::now() + d;
        while tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(250)).await;
            self.sample();
        }
    }

    /// Runs until `done` holds at a sample (or panics after `limit`); returns when, in seconds.
    async fn until(&mut self, what: &str, limit: Duration, done: impl Fn(&Fleet) -> bool) -> f64 {
        let end = tokio::time::Instant::now() + limit;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            self.sample();
            if done(self) {
                return secs(self.fake.now());
            }
            assert!(tokio::time::Instant::now() < end, "{what}: not within {limit:?}");
        }
    }

    /// The live holder, when it alone reports `nodemedic_prober 1`.
    fn one_leader(&self) -> Option<usize> {
        let h = self.holder().filter(|&h| self.members[h].alive)?;
        (self.samples.last()?.ones == [h]).then_some(h)
    }

    /// Whether agent `i` sent a dry run at or after `since` seconds.
    fn probed_since(&self, i: usize, since: f64) -> bool {
        self.fake
            .log()
            .iter()
            .any(|r| r.agent == i && r.kind() == "probe dry-run" && secs(r.at) >= since)
    }
}

/// `fleet.rs`: 30 agents with the default periods (a 60 s lease: renewed every 20 s, read by
/// the others every 48 s +-10%; a 60 s probe interval +-10%), started over one read period.
/// One is elected and alone reports `nodemedic_prober 1`; at steady state (10 minutes) the
/// followers only read the Lease, each 43.2 to 52.8 s apart, and the holder only renews (every
/// 20 s) and probes (dry runs 54 to 66 s apart); killed, the holder is replaced within the
/// lease duration plus one read period (leader.rs: at most 113 s; the e2e test: under two
/// durations); stopped, it releases the Lease and another agent takes it at its next read
/// (within one read period and a second); through 5 lease durations of refused connections
/// (the e2e test's 30 s at its 6 s lease) no agent claims to probe once the holder could not
/// renew for two thirds of the duration, and one holder probes again within two durations of
/// the API server's return. Never two agents report `nodemedic_prober 1` at once, and every
/// dry run comes from the agent the Lease names.
#[tokio::test(start_paused = true)]
async fn thirty_agents_elect_one_prober_keep_their_periods_and_fail_over() {
    const N: usize = 30;
    let effective: Effective = crate::config::effective(&Flags::default(), &FileConfig::default()).expect("defaults");
    let cfg = config("");
    let (lease, renew, read) = (60.0, secs(cfg.renew_every()), secs(cfg.read_every()));
    // The periods leader.rs documents for the default lease.
    assert_eq!((renew, read), (20.0, 48.0));
    assert_eq!(
        (effective.lease_duration, effective.probe_interval),
        (cfg.duration, Duration::from_secs(60))
    );
    let fake = FakeApi::new(vec![]);
    let mut fleet = Fleet {
        fake: fake.clone(),
        members: vec![],
        samples: vec![],
    };
    // Started one after another over one read period, as a DaemonSet's pods come up.
    for i in 0..N {
        let (instance, node) = (format!("nodemedic-{i}"), format!("worker-{i}"));
        let shared = Shared::new(Arc::new(ApiContact::new()), Metrics::new().expect("metrics"));
        let who = Who {
            agent: i,
            instance: &instance,
            node: &node,
        };
        let (probes, task) = start_probes(&fake, who, &effective, &shared);
        fleet.members.push(Member {
            identity: who.wiring().identity(),
            metrics: shared.metrics,
            probes,
            task,
            alive: true,
        });
        fleet.run_for(cfg.read_every() / N as u32).await;
    }
    let first = fleet.one_leader().expect("one elected prober");
    assert_eq!(first, 0, "the first agent found no Lease and created it");

    // Steady state: one lease duration of warm-up, then 10 minutes counted.
    fleet.run_for(Duration::from_secs(60)).await;
    let w0 = secs(fake.now());
    fleet.run_for(Duration::from_secs(600)).await;
    let w1 = secs(fake.now());
    let window: Vec<Sent> = fake
        .log()
        .into_iter()
        .filter(|r| secs(r.at) >= w0 && secs(r.at) < w1)
        .collect();
    let context = |from: f64| {
        show(
            &fake
                .log()
                .into_iter()
                .filter(|r| secs(r.at) >= from)
                .take(200)
                .collect::<Vec<_>>(),
            from,
        )
    };
    assert!(
        fleet
            .samples
            .iter()
            .filter(|s| s.at >= w0)
            .all(|s| s.holder == Some(first) && s.ones == [first]),
        "the holder changed, or another agent claimed to probe, at steady state"
    );
    let of = |i: usize, kind: &str| -> Vec<f64> {
        window
            .iter()
            .filter(|r| r.agent == i && r.kind() == kind)
            .map(|r| secs(r.at))
            .collect()
    };
    for i in (0..N).filter(|&i| i != first) {
        let sent: Vec<&Sent> = window.iter().filter(|r| r.agent == i).collect();
        assert!(
            sent.iter().all(|r| r.kind() == "get lease"),
            "follower {i} sent more than Lease reads: {sent:?}"
        );
        let reads = of(i, "get lease");
        assert!(
            reads
                .windows(2)
                .all(|w| (read * 0.9 - 1e-6..=read * 1.1 + 1e-6).contains(&(w[1] - w[0]))),
            "follower {i}: Lease reads not {read} s +-10% apart: {reads:?}"
        );
        assert!(
            reads.len() as f64 >= (600.0 / read).floor() - 1.0,
            "follower {i}: {reads:?}"
        );
    }
    let renewals = of(first, "update lease");
    assert!(
        renewals.windows(2).all(|w| w[1] - w[0] == renew),
        "renewals: {renewals:?}"
    );
    assert!(
        renewals.len() as f64 >= 600.0 / renew - 1.0,
        "a renewal every {renew} s: {renewals:?}"
    );
    assert!(of(first, "get lease").is_empty(), "the holder does not read the Lease");
    let dry = of(first, "probe dry-run");
    assert!(
        dry.windows(2)
            .all(|w| (54.0 - 1e-6..=66.0 + 1e-6).contains(&(w[1] - w[0]))),
        "dry runs: {dry:?}"
    );
    assert!((9..=12).contains(&dry.len()), "dry runs: {dry:?}");
    let holder_kinds: BTreeSet<&str> = window.iter().filter(|r| r.agent == first).map(Sent::kind).collect();
    assert!(
        holder_kinds.is_subset(&BTreeSet::from([
            "update lease",
            "probe get",
            "probe list",
            "probe dry-run",
            "list webhooks",
            "get namespace",
        ])),
        "the holder's requests: {holder_kinds:?}"
    );

    // SIGKILL of the holder: another live agent holds the Lease and probes.
    let k = secs(fake.now());
    fleet.members[first].task.abort();
    fleet.members[first].alive = false;
    let second_at = fleet
        .until(
            "a live agent holding the Lease and probing after a kill",
            Duration::from_secs(120),
            |f| f.one_leader().is_some_and(|h| f.probed_since(h, k)),
        )
        .await;
    let second = fleet.one_leader().expect("a new holder");
    eprintln!(
        "SIGKILL: agent {second} took over and probes after {:.2} s",
        second_at - k
    );
    assert!(
        second_at - k <= lease + read * 1.1 + 0.5 + 0.25,
        "failover after a kill took {:.2} s\n{}",
        second_at - k,
        context(k)
    );
    fleet.run_for(Duration::from_secs(60)).await;

    // SIGTERM of the holder: it releases the Lease; another agent takes it at its next read.
    let s = secs(fake.now());
    let _ = fleet.members[second].probes.stop.send(true);
    fleet.run_for(Duration::from_millis(250)).await;
    assert!(
        fleet.members[second].task.is_finished(),
        "the stopped agent's task ended"
    );
    fleet.members[second].alive = false;
    let released = fake
        .log()
        .iter()
        .any(|r| r.agent == second && r.kind() == "update lease" && secs(r.at) >= s);
    assert!(released, "agent {second} released the Lease");
    let third_at = fleet
        .until(
            "a live agent holding the released Lease and probing",
            Duration::from_secs(120),
            |f| f.one_leader().is_some_and(|h| f.probed_since(h, s)),
        )
        .await;
    let third = fleet.one_leader().expect("a new holder");
    eprintln!(
        "SIGTERM: agent {third} took over and probes after {:.2} s",
        third_at - s
    );
    assert!(
        third_at - s <= read + 1.0,
        "the released Lease was taken {:.2} s after it was released\n{}",
        third_at - s,
        context(s)
    );
    fleet.run_for(Duration::from_secs(60)).await;

    // Refused for 5 lease durations.
    let o = secs(fake.now());
    fake.set_mode(Mode::Refusing);
    fleet.run_for(Duration::from_secs(300)).await;
    fake.set_mode(Mode::Serving);
    let r = secs(fake.now());
    let quiet_from = o + secs(cfg.renew_deadline()) + renew;
    let claimed: Vec<&Sample> = fleet
        .samples
        .iter()
        .filter(|x| x.at >= quiet_from && x.at < r && !x.ones.is_empty())
        .collect();
    assert!(
        claimed.is_empty(),
        "agents claimed to probe while the API server refused connections: {claimed:?}"
    );
    let back_at = fleet
        .until(
            "one live agent holding the Lease and probing after the outage",
            Duration::from_secs(120),
            |f| f.one_leader().is_some_and(|h| f.probed_since(h, r)),
        )
        .await;
    eprintln!("after {} s refused: one prober again after {:.2} s", r - o, back_at - r);
    assert!(back_at - r < 2.0 * lease, "{}", context(r));
    fleet.run_for(Duration::from_secs(60)).await;

    // The whole run: never two agents claiming to probe, every dry run from the agent the
    // Lease named at the closest sample.
    let doubles: Vec<&Sample> = fleet.samples.iter().filter(|x| x.ones.len() > 1).collect();
    assert!(doubles.is_empty(), "two agents claimed to probe at once: {doubles:?}");
    for d in fake.log().iter().filter(|r| r.kind() == "probe dry-run") {
        let t = secs(d.at);
        let named = fleet
            .samples
            .iter()
            .any(|x| (x.at - t).abs() <= 0.25 && x.holder == Some(d.agent));
        assert!(
            named,
            "a dry run from agent {} at {t:.2} s when the Lease did not name it",
            d.agent
        );
    }
}
