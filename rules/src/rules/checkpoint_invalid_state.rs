//! `checkpoint-invalid-state`: the file reads fine but the static policy's checks on it fail
//! (docs/kubelet.md, "Why a kubelet refuses to start"), or the kubelet is configured with
//! another policy than the file's.
//! Either way the kubelet refuses to start after its next restart.

use crate::facts::checkpoint_path;
use crate::finding::{Finding, Severity, Subject};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed};
use crate::text::reset_checkpoint_remedy;
use crate::validate::validate_static_state;

pub const ID: &str = "checkpoint-invalid-state";

pub fn check(snap: &NodeSnapshot, _settings: &Settings) -> Vec<Finding> {
    let Observed::Ok(file) = &snap.checkpoint else {
        return vec![];
    };
    let Ok(state) = &file.state else { return vec![] };
    let path = checkpoint_path(snap);
    let remedy = reset_checkpoint_remedy(&snap.node, &path);
    let mut findings = Vec::new();

    if let Observed::Ok(kubelet) = &snap.kubelet {
        let configured = &kubelet.cpu_manager.policy;
        if *configured != state.policy_name {
            let message = format!(
                "configured policy \"{configured}\" differs from state checkpoint policy \"{}\"",
                state.policy_name
            );
            findings.push(
                Finding::new(
                    ID,
                    Severity::Critical,
                    Subject::node(&snap.node),
                    format!("The kubelet is configured with CPU manager policy {configured} but {path} was written by policy {}: the kubelet will refuse to restart", state.policy_name),
                    remedy.clone(),
                )
                .with("problem", "policy-mismatch")
                .with("kubelet_error", message)
                .with("configured_policy", configured.as_str())
                .with("checkpoint_policy", state.policy_name.as_str())
                .with("path", path.as_str()),
            );
            // The other checks are those of a policy this kubelet will not run.
            return findings;
        }
    }
    if state.policy_name != "static" {
        return findings;
    }
    let Observed::Ok(topology) = &snap.cpus else {
        return findings;
    };
    let online = topology.all();
    let config = snap.cpu_manager();
    // Without a readable reserved setting, judge the other rules with no reserved CPUs.
    let (reserved, reserved_note) = match config.reserved_cpus(topology) {
        Ok(r) => (r, None),
        Err(e) => (crate::CpuSet::new(), Some(e)),
    };
    for problem in validate_static_state(state, &online, &reserved, config.strict_cpu_reservation()) {
        findings.push(
            Finding::new(
                ID,
                Severity::Critical,
                Subject::node(&snap.node),
                format!(
                    "The CPU manager state in {path} is inconsistent ({}): the kubelet will refuse to restart",
                    problem.kubelet_message()
                ),
                remedy.clone(),
            )
            .with("problem", problem.code())
            .with("kubelet_error", problem.kubelet_message())
            .with("default_cpus", state.default_cpus.to_string())
            .with("online_cpus", online.to_string())
            .with("reserved_cpus", reserved.to_string())
            .with("reserved_cpus_note", reserved_note.clone())
            .with("strict_cpu_reservation", config.strict_cpu_reservation())
            .with("path", path.as_str()),
        );
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuSet;
    use crate::rules::testkit::SnapshotBuilder;

    fn problems(snap: &NodeSnapshot) -> Vec<String> {
        check(snap, &Settings::default())
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
        let f = check(&from_kube_reserved, &Settings::default());
        assert_eq!(f[0].evidence["reserved_cpus"], "0");

        let mismatch = SnapshotBuilder::static_node("0-3", &[])
            .with_cpu_manager(|c| c.policy = "none".into())
            .build();
        let f = check(&mismatch, &Settings::default());
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
        assert!(check(&snap, &Settings::default()).is_empty());
    }

    #[test]
    fn unknown_kubelet_config_still_checks_cpus() {
        let mut snap = SnapshotBuilder::static_node("0-3", &[("p", "c", "4-5")])
            .with_online("0-7")
            .build();
        snap.kubelet = Observed::Missing {
            path: "/var/lib/kubelet/config.yaml".into(),
        };
        assert_eq!(problems(&snap), ["cpus-mismatch"]);
    }
}
