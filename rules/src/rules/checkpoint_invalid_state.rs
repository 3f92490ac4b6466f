//! `checkpoint-invalid-state`: the file reads fine but the static policy's checks on it fail
//! (docs/kubelet.md, "Why a kubelet refuses to start"), or the kubelet is configured with
//! another policy than the file's.
//! Either way the kubelet refuses to start after its next restart.
//!
//! The judgement is [`crate::facts::checkpoint_refusals`] (the refusals that are not
//! [`CheckpointRefusal::unreadable`]: a policy mismatch, a policy no kubelet runs, a failed
//! static-policy check, with what the checks were run against), which `stale-cpu-assignment`,
//! `exclusive-cpu-shortage` and `checkpoint verify` share; this rule says each one as a finding.

use crate::CpuSet;
use crate::coverage::{Comparison, KubeletVersions, Need::One, Needs, Source};
use crate::facts::{CheckpointRefusal, Facts, Problem};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::{CPU_MANAGER_STATE_STALE, RuleInfo};
use crate::settings::Settings;
use crate::snapshot::NodeSnapshot;
use crate::text::reset_checkpoint_remedy;
use crate::validate::CPU_MANAGER_POLICIES;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("checkpoint-invalid-state");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "The CPU manager checkpoint breaks a static-policy rule",
    severity: Severity::Critical,
    looks_at: "checkpoint, online CPUs, kubelet config",
    fires_when: "a static-policy rule of docs/kubelet.md (\"Why a kubelet refuses to start\") is broken, or the configured policy differs from the file's",
    event_reason: "CPUManagerInvalidState",
    needs: Needs {
        all: &[One(Source::Checkpoint), One(Source::Cpus), One(Source::KubeletConfig)],
        about: &[Source::Checkpoint],
        partial: &[Source::KubeletConfig],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[Comparison {
        what: "`cpu_manager_state` against the static policy's start-up checks (`validateState`: an empty shared pool only for an empty state, every reserved CPU in the shared pool, no entry overlapping it, the online CPUs exactly) and the configured policy against the file's",
        from: "1.23 as established: a real 1.23.8 kubelet refuses these files with the same reasons, and the checks are those of current upstream `policy_static.go`",
        older: "judged the same; whether a kubelet before 1.23 refuses exactly the same files is not established",
        unknown: "judged the same; the version is not used",
    }]),
    check,
    condition: Some(CPU_MANAGER_STATE_STALE),
    gauge: None,
    next_judgement: None,
};

pub fn check(snap: &NodeSnapshot, facts: &Facts, _settings: &Settings) -> Vec<Finding> {
    facts.refusals.iter().filter_map(|r| finding(snap, r)).collect()
}

/// The finding that says `refusal`, or `None` for one of a file the kubelet cannot read
/// (`checkpoint-unreadable`'s). `checkpoint verify` formats its judgement through this too.
pub(crate) fn finding(snap: &NodeSnapshot, refusal: &CheckpointRefusal) -> Option<Finding> {
    let path = refusal.path.as_str();
    let remedy = reset_checkpoint_remedy(&snap.node, path);
    let finding = |summary: String, problem: &str| {
        Finding::new(ID, Severity::Critical, Subject::node(&snap.node), summary, remedy)
            .with("problem", problem)
            .with("kubelet_error", refusal.kubelet_error())
    };
    Some(match &refusal.problem {
        Problem::PolicyMismatch { configured, checkpoint } => finding(
            format!(
                "The kubelet is configured with CPU manager policy {configured} but {path} was written by policy \
                 {checkpoint}: the kubelet will refuse to restart"
            ),
            "policy-mismatch",
        )
        .with("configured_policy", configured.as_str())
        .with("checkpoint_policy", checkpoint.as_str())
        .with("path", path),
        Problem::UnknownPolicy { checkpoint } => finding(
            format!(
                "{path} names CPU manager policy \"{checkpoint}\", which no kubelet runs (it runs {}): the kubelet \
                 will refuse to restart",
                CPU_MANAGER_POLICIES.join(" or ")
            ),
            "unknown-policy",
        )
        .with("checkpoint_policy", checkpoint.as_str())
        .with("path", path),
        Problem::InvalidState { problem, checked } => finding(
            format!(
                "The CPU manager state in {path} is inconsistent ({}): the kubelet will refuse to restart",
                problem.kubelet_message()
            ),
            problem.code(),
        )
        .with("default_cpus", checked.default_cpus.human())
        .with("online_cpus", checked.online.human())
        .with(
            "reserved_cpus",
            checked
                .reserved
                .as_ref()
                .map_or_else(|| "unknown".to_string(), CpuSet::human),
        )
        .with(
            "reserved_cpus_note",
            checked.reserved_unknown.as_ref().map(ToString::to_string),
        )
        .with("strict_cpu_reservation", checked.strict)
        .with("path", path),
        Problem::Unreadable(_) | Problem::ChecksumMismatch { .. } | Problem::BadValue(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuSet;
    use crate::rules::testkit::SnapshotBuilder;
    use crate::snapshot::Observed;

    fn problems(snap: &NodeSnapshot) -> Vec<String> {
        crate::rules::testkit::judged(check, snap, &Settings::default())
            .iter()
            .map(|f| f.evidence["problem"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn table() {
        let healthy = SnapshotBuilder::static_node("0-3", &[("p", "c", "4-7")]);
        assert!(problems(&healthy.build()).is_empty());

        let hot_added = SnapshotBuilder::static_node("0-3", &[("p", "c", "4-7")])
            .with_online("0-9")
            .build();
        assert_eq!(problems(&hot_added), ["cpus-mismatch"]);

        let reserved = SnapshotBuilder::static_node("2-3", &[("p", "c", "0-1,4-7")])
            .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0").unwrap()))
            .build();
        assert_eq!(problems(&reserved), ["reserved-not-in-default"]);

        let from_kube_reserved = SnapshotBuilder::static_node("2-3", &[("p", "c", "0-1,4-7")])
            .with_cpu_manager(|c| c.kube_reserved_cpu = Some("500m".into()))
            .build();
        let f = crate::rules::testkit::judged(check, &from_kube_reserved, &Settings::default());
        assert_eq!(f[0].evidence["reserved_cpus"], "0");

        let mismatch = SnapshotBuilder::static_node("0-3", &[])
            .with_cpu_manager(|c| c.policy = "none".into())
            .build();
        let f = crate::rules::testkit::judged(check, &mismatch, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].evidence["kubelet_error"],
            "configured policy \"none\" differs from state checkpoint policy \"static\""
        );
    }

    #[test]
    fn none_policy_state_is_not_validated() {
        let snap = SnapshotBuilder::static_node("0-3", &[])
            .with_raw_checkpoint(br#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#)
            .with_cpu_manager(|c| c.policy = "none".into())
            .with_online("0-63")
            .build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }

    /// Without the kubelet's configuration the checks that need its reserved CPUs are not
    /// judged against "no reserved CPUs": a reserved CPU held by a container is neither
    /// reported nor cleared, and CPUs missing from the state may be the reserved ones of
    /// `strict-cpu-reservation`. What breaks the checks whatever is reserved is still said.
    #[test]
    fn unknown_kubelet_config_judges_only_what_holds_whatever_is_reserved() {
        let missing = |mut snap: NodeSnapshot| {
            snap.host.kubelet = Observed::Missing {
                path: "/var/lib/kubelet/config.yaml".into(),
            };
            snap
        };
        // CPUs 6-7 are online but not in the state: a hot-add, or strict reservation.
        let fewer = missing(
            SnapshotBuilder::static_node("0-3", &[("p", "c", "4-5")])
                .with_online("0-7")
                .build(),
        );
        assert!(problems(&fewer).is_empty());
        // CPUs 6-7 are in the state but not online: broken whatever the configuration.
        let offline = missing(
            SnapshotBuilder::static_node("0-3", &[("p", "c", "4-7")])
                .with_online("0-5")
                .build(),
        );
        let f = crate::rules::testkit::judged(check, &offline, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].evidence["problem"], "cpus-mismatch");
        assert_eq!(f[0].evidence["reserved_cpus"], "unknown");
        assert_eq!(
            f[0].evidence["reserved_cpus_note"],
            "the kubelet's configuration was not found (nor at /var/lib/kubelet/config.yaml): its reserved CPUs and \
             policy options are unknown"
        );
        assert!(!f[0].evidence.contains_key("strict_cpu_reservation"));
        // An assignment inside the default set: broken whatever is reserved.
        let overlap = missing(SnapshotBuilder::static_node("0-5", &[("p", "c", "4-7")]).build());
        assert_eq!(problems(&overlap), ["assignment-overlaps-default"]);
        // The case of the issue: CPU 0 reserved and held by a container. Known: reported;
        // unknown: not judged (before, it was judged against no reserved CPUs and passed).
        let reserved_held = || {
            SnapshotBuilder::static_node("1-3", &[("p", "c", "0,4-7")])
                .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0").unwrap()))
                .build()
        };
        assert_eq!(problems(&reserved_held()), ["reserved-not-in-default"]);
        assert!(problems(&missing(reserved_held())).is_empty());
    }

    /// A configuration whose reserved CPUs cannot be computed (more than the node has): the
    /// checks that need them are not judged; with `strict-cpu-reservation` known to be off, the
    /// count of CPUs still is.
    #[test]
    fn uncomputable_reserved_cpus_are_unknown() {
        let snap = SnapshotBuilder::static_node("0-3", &[("p", "c", "4-5")])
            .with_online("0-7")
            .with_cpu_manager(|c| c.kube_reserved_cpu = Some("64".into()))
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].evidence["problem"], "cpus-mismatch");
        assert_eq!(f[0].evidence["reserved_cpus"], "unknown");
        assert_eq!(f[0].evidence["strict_cpu_reservation"], false);
    }
}
