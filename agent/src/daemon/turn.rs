//! When a judgement turns by the clock alone: the daemon judges again then, even if nothing
//! on the node or in the API changed.

use std::time::{Duration, Instant};

/// When a judgement of `snapshot` turns by the clock alone: the nearest of the enabled rules'
/// own deadlines ([`nodemedic_rules::rules::RuleInfo::next_judgement`]: the grace the kubelet is
/// given after the checkpoint was written or a pod finished, a Spark driver's wait to start, ...).
/// `None` when nothing waits on it.
pub(super) fn next_turn(
    snapshot: &nodemedic_rules::snapshot::NodeSnapshot,
    settings: &nodemedic_rules::Settings,
) -> Option<Instant> {
    nodemedic_rules::rules::ALL
        .iter()
        .filter(|r| settings.enabled(r.id))
        .filter_map(|r| r.next_judgement)
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
