//! When a judgement turns by the clock alone: the daemon judges again then, even if nothing
//! on the node or in the API changed.

use std::time::{Duration, Instant};

use nodemedic_rules::Settings;
use nodemedic_rules::rules::{NextJudgementFn, RuleInfo};
use nodemedic_rules::snapshot::NodeSnapshot;

/// When a judgement of `snapshot` turns by the clock alone: the nearest of the enabled rules'
/// own deadlines ([`nodemedic_rules::rules::RuleInfo::next_judgement`]: the grace the kubelet is
/// given after the checkpoint was written or a pod finished, a Spark driver's wait to start, ...).
/// `None` when nothing waits on it.
#[cfg(test)]
pub(super) fn next_turn(snapshot: &NodeSnapshot, settings: &Settings) -> Option<Instant> {
    next_turn_of(nodemedic_rules::rules::ALL, snapshot, settings)
}

/// [`next_turn`] of the rules that judge the API (`api`) or of all the others: the daemon
/// judges the first alone when only the API's observation changed, so each keeps its own.
pub(super) fn next_turn_of_part(snapshot: &NodeSnapshot, settings: &Settings, api: bool) -> Option<Instant> {
    let part: Vec<RuleInfo> = nodemedic_rules::rules::ALL
        .iter()
        .copied()
        .filter(|r| r.judges_the_api() == api)
        .collect();
    next_turn_of(&part, snapshot, settings)
}

/// [`next_turn`] over `rules`. A deadline function several rules share (every rule that
/// judges liveness declares `facts::grace_turn`) is evaluated once: the same function of the
/// same snapshot and settings gives the same answer.
fn next_turn_of(rules: &[RuleInfo], snapshot: &NodeSnapshot, settings: &Settings) -> Option<Instant> {
    let mut distinct: Vec<NextJudgementFn> = Vec::new();
    let declared = rules
        .iter()
        .filter(|r| settings.enabled(r.id.as_str()))
        .filter_map(|r| r.next_judgement);
    for next in declared {
        // Two addresses of one function (codegen units) only cost a second evaluation; two
        // functions folded into one address have the same code, so the same answer.
        if !distinct.iter().any(|d| std::ptr::fn_addr_eq(*d, next)) {
            distinct.push(next);
        }
    }
    distinct
        .iter()
        .filter_map(|next| next(snapshot, settings))
        .min_by(f64::total_cmp)
        .map(|left| Instant::now() + Duration::from_secs_f64(left + 0.05))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::snapshot::{ContainerInfo, NodeSnapshot, PodInfo};

    /// A Spark driver bound to `node-a` `ago` seconds before the snapshot, waiting to start.
    fn waiting_driver(ago: i64, now: i64) -> PodInfo {
        PodInfo {
            uid: "d1".into(),
            namespace: "spark".into(),
            name: "etl-driver".into(),
            node_name: Some("node-a".into()),
            phase: "Pending".into(),
            labels: [("spark-role".to_string(), "driver".to_string())].into(),
            containers: vec![ContainerInfo {
                name: "spark-kubernetes-driver".into(),
                state: Some("waiting".into()),
                ..Default::default()
            }],
            created_at: Some(now - ago),
            scheduled_at: Some(now - ago),
            ..Default::default()
        }
    }

    /// How many times [`counted_grace_turn`] ran.
    static GRACE_TURNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn counted_grace_turn(snap: &NodeSnapshot, settings: &nodemedic_rules::Settings) -> Option<f64> {
        GRACE_TURNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        nodemedic_rules::facts::grace_turn(snap, settings)
    }

    /// Every rule that judges liveness declares the same deadline (the kubelet's grace after
    /// the checkpoint was written or a pod finished): a turn evaluates it once, not once per
    /// rule (6 times before), and finds the same deadline. The catalogue's rules, each
    /// `facts::grace_turn` swapped for a counting copy.
    #[test]
    fn a_deadline_several_rules_share_is_evaluated_once_a_turn() {
        let grace: NextJudgementFn = nodemedic_rules::facts::grace_turn;
        let counted: NextJudgementFn = counted_grace_turn;
        let mut rules = nodemedic_rules::rules::ALL.to_vec();
        let mut sharing = 0;
        for r in &mut rules {
            if r.next_judgement.is_some_and(|f| std::ptr::fn_addr_eq(f, grace)) {
                r.next_judgement = Some(counted);
                sharing += 1;
            }
        }
        assert!(sharing >= 2, "{sharing} rules declare the grace's deadline");
        let now = 1_800_000_000;
        let settings = nodemedic_rules::Settings::default();
        let mut snap = NodeSnapshot::empty("node-a", now);
        // A pod that finished 10 s ago: the grace (60 s by default) runs out later.
        snap.pods.bound = vec![PodInfo {
            uid: "p1".into(),
            namespace: "spark".into(),
            name: "done".into(),
            node_name: Some("node-a".into()),
            phase: "Succeeded".into(),
            finished_at: Some(now - 10),
            ..Default::default()
        }];
        let expected = nodemedic_rules::facts::grace_turn(&snap, &settings).expect("the grace runs out later");
        let before = GRACE_TURNS.load(std::sync::atomic::Ordering::SeqCst);
        let left = seconds_until(next_turn_of(&rules, &snap, &settings)).unwrap();
        assert_eq!(GRACE_TURNS.load(std::sync::atomic::Ordering::SeqCst) - before, 1);
        assert!((expected..expected + 0.1).contains(&left), "{left} s, not {expected} s");
        // The catalogue as it is: the same turn.
        let left = seconds_until(next_turn(&snap, &settings)).unwrap();
        assert!((expected..expected + 0.1).contains(&left), "{left} s, not {expected} s");
    }

    fn seconds_until(turn: Option<Instant>) -> Option<f64> {
        turn.map(|t| t.saturating_duration_since(Instant::now()).as_secs_f64())
    }

    #[test]
    fn a_waiting_driver_is_judged_again_when_its_grace_and_critical_time_pass() {
        let now = 1_800_000_000;
        let settings = nodemedic_rules::Settings::default();
        let mut snap = NodeSnapshot::empty("node-a", now);
        assert_eq!(next_turn(&snap, &settings), None, "nothing waits on the clock");
        snap.pods.bound = vec![waiting_driver(250, now)];
        let left = seconds_until(next_turn(&snap, &settings)).unwrap();
        assert!((50.0..52.0).contains(&left), "the grace (300 s) passes in 51 s: {left}");
        snap.pods.bound = vec![waiting_driver(1000, now)];
        let left = seconds_until(next_turn(&snap, &settings)).unwrap();
        assert!(
            (800.0..802.0).contains(&left),
            "then the critical time (1800 s): {left}"
        );
        snap.pods.bound = vec![waiting_driver(5000, now)];
        assert_eq!(next_turn(&snap, &settings), None, "both passed");
        // A driver bound elsewhere, or running, is not waiting here.
        let mut elsewhere = waiting_driver(250, now);
        elsewhere.node_name = Some("node-b".into());
        let mut running = waiting_driver(250, now);
        running.containers[0].state = Some("running".into());
        snap.pods.bound = vec![elsewhere, running];
        assert_eq!(next_turn(&snap, &settings), None);
    }
}
