//! `checkpoint-unreadable`: the kubelet cannot restore its CPU manager state from the file
//! (bad JSON, a bad cpuset, or a checksum that no kubelet layout produces), so it will refuse
//! to start the next time it restarts (docs/kubelet.md, "Why a kubelet refuses to start").
//!
//! The same for the other resource managers' checkpoints, each with what the kubelet does
//! about it: the memory manager and the DRA manager refuse to start like the CPU manager; the
//! device manager logs the error and starts with no record of which container holds which
//! device, so devices in use can be handed out again (a warning, since nothing stops).
//!
//! The judgement is [`crate::facts::checkpoint_refusals`] (the refusals that are
//! [`CheckpointRefusal::unreadable`]), which `stale-cpu-assignment`, `exclusive-cpu-shortage`
//! and `checkpoint verify` share; this rule says each one as a finding.

use serde_json::json;

use crate::coverage::{Comparison, KubeletVersions, Need::One, Needs, Source};
use crate::facts::{AtStart, CheckpointRefusal, Facts, Manager, Problem};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::{CPU_MANAGER_STATE_STALE, RuleInfo};
use crate::settings::Settings;
use crate::snapshot::NodeSnapshot;
use crate::text::reset_checkpoint_remedy;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("checkpoint-unreadable");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "A kubelet checkpoint cannot be read by the kubelet",
    severity: Severity::Critical,
    looks_at: "cpu_manager_state, memory_manager_state, device-plugins/kubelet_internal_checkpoint, dra_manager_state",
    fires_when: "bad JSON, a bad value, or a checksum no kubelet layout matches: the kubelet will refuse to restart (the device manager's file: it starts and forgets its device assignments, a warning)",
    event_reason: "KubeletCheckpointUnreadable",
    needs: Needs {
        all: &[
            One(Source::Checkpoint),
            One(Source::MemoryState),
            One(Source::DeviceState),
            One(Source::DraState),
        ],
        about: &[
            Source::Checkpoint,
            Source::MemoryState,
            Source::DeviceState,
            Source::DraState,
        ],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[
        Comparison {
            what: "`cpu_manager_state`'s checksum against the CPU manager's layouts",
            from: "1.8, the first CPU manager (V1; V2 from 1.18; V3 in 1.36 with `PodLevelResourceManagers` on; V4 in 1.37 development builds)",
            older: "no kubelet before 1.8 writes the file: nothing to judge",
            unknown: "every known layout is tried, and a checksum none of them matches is critical, as under a known kubelet up to 1.37; only a kubelet known to be newer than 1.37 makes it a warning (a layout nodemedic does not know may explain it)",
        },
        Comparison {
            what: "`memory_manager_state`'s checksum against the memory manager's layouts",
            from: "1.21, the first memory manager, on by default from 1.22 (V1; V2 in 1.36 with `PodLevelResourceManagers` on; V3 in 1.37 development builds)",
            older: "no kubelet before 1.21 writes the file: nothing to judge",
            unknown: "every known layout is tried; the version is not used",
        },
        Comparison {
            what: "`kubelet_internal_checkpoint`'s checksum against the device manager's layouts",
            from: "the first device manager file (V1 before 1.20; V2 from 1.20, upstream commit a8b8995e)",
            older: "a V1 file is read and its layout reported",
            unknown: "both layouts are tried and the version is not used, so a V1 file counts as readable whichever kubelet runs (a kubelet since #123398 no longer reads it)",
        },
        Comparison {
            what: "`dra_manager_state`'s checksum against the DRA manager's layouts",
            from: "1.27, the first DRA checkpoint (the 1.28 to 1.30 layouts; the 1.31 `Data`/`Checksum` envelope of #126303)",
            older: "no kubelet before 1.27 writes the file (1.26 keeps its claims in memory only): nothing to judge",
            unknown: "every layout is tried and the version is not used, so a 1.27 to 1.30 file under a 1.31 or later kubelet, which that kubelet refuses (#127653), is not reported",
        },
    ]),
    check,
    condition: Some(CPU_MANAGER_STATE_STALE),
    gauge: None,
    next_judgement: None,
};

pub fn check(snap: &NodeSnapshot, facts: &Facts, _settings: &Settings) -> Vec<Finding> {
    facts
        .refusals
        .iter()
        .filter(|r| r.unreadable())
        .filter_map(|r| finding(snap, r))
        .collect()
}

/// The finding that says `refusal` (one of [`CheckpointRefusal::unreadable`]'s), or `None` for
/// a refusal of the other kind. `checkpoint verify` formats its judgement through this too.
pub(crate) fn finding(snap: &NodeSnapshot, refusal: &CheckpointRefusal) -> Option<Finding> {
    if !refusal.unreadable() {
        return None;
    }
    Some(match refusal.manager {
        Manager::Cpu => cpu(snap, refusal),
        _ => manager(snap, refusal),
    })
}

/// The severity and the words for what the kubelet does at its next start.
fn consequence(at_start: &AtStart) -> (Severity, &'static str) {
    match at_start {
        AtStart::StartsWithout => (
            Severity::Warning,
            "the kubelet starts without it: its device manager forgets which container holds which device, so devices \
             in use can be allocated to new pods",
        ),
        AtStart::Refuses | AtStart::Unsure { .. } => (Severity::Critical, "the kubelet will refuse to restart"),
    }
}

/// The computed checksums as evidence: layout and type name to checksum.
fn computed_evidence(computed: &[(String, u32)]) -> serde_json::Map<String, serde_json::Value> {
    computed.iter().map(|(name, sum)| (name.clone(), json!(sum))).collect()
}

fn manager(snap: &NodeSnapshot, refusal: &CheckpointRefusal) -> Finding {
    let (severity, outcome) = consequence(&refusal.at_start);
    let (path, name) = (&refusal.path, refusal.manager.name());
    let remedy = if refusal.manager == Manager::Devices {
        format!(
            "the running kubelet works from memory and overwrites {path} at its next device allocation, which repairs \
             it; until then do not restart the kubelet while pods use devices (it would start with no record of them \
             and could hand them out again): if it must restart, drain the pods that use devices from {node} first. \
             Do not delete the file: with no device checkpoint the kubelet takes the node for a new one and resets \
             its extended resources. nodemedic does not edit this file",
            node = snap.node,
        )
    } else {
        format!(
            "kubectl drain {node} --ignore-daemonsets --delete-emptydir-data; then on the node: systemctl stop \
             kubelet && mv {path} {path}.bak && systemctl start kubelet (the {name} starts from an empty state); \
             then kubectl uncordon {node}. nodemedic does not edit this file",
            node = snap.node,
        )
    };
    let reason = refusal.problem.reason();
    let summary = match &refusal.problem {
        Problem::ChecksumMismatch { stored, .. } => {
            format!("The checksum of {path} ({stored}) matches no kubelet layout of the {name} checkpoint: {outcome}")
        }
        Problem::BadValue(e) => {
            format!("The {name} checkpoint {path} holds a value the kubelet cannot use: {e}; {outcome}")
        }
        _ => format!("The {name} checkpoint {path} cannot be read: {reason}; {outcome}"),
    };
    let finding = Finding::new(ID, severity, Subject::node(&snap.node), summary, remedy)
        .with("path", path.as_str())
        .with("manager", name)
        .with("error", reason);
    match &refusal.problem {
        Problem::ChecksumMismatch { stored, computed, .. } => finding
            .with("stored_checksum", *stored)
            .with("computed_checksums", computed_evidence(computed)),
        _ => finding,
    }
}

fn cpu(snap: &NodeSnapshot, refusal: &CheckpointRefusal) -> Finding {
    let path = &refusal.path;
    let reason = refusal.problem.reason();
    let finding = |summary: String| {
        Finding::new(
            ID,
            Severity::Critical,
            Subject::node(&snap.node),
            summary,
            reset_checkpoint_remedy(&snap.node, path),
        )
        .with("path", path.as_str())
        .with("error", reason.clone())
    };
    let (stored, computed, layout) = match &refusal.problem {
        Problem::ChecksumMismatch {
            stored,
            computed,
            layout,
        } => (*stored, computed_evidence(computed), *layout),
        Problem::BadValue(e) => {
            return finding(format!(
                "The CPU manager checkpoint {path} has an unreadable cpuset: {e}"
            ));
        }
        _ => return finding(format!("The CPU manager checkpoint {path} cannot be read: {reason}")),
    };
    // A kubelet newer than every layout nodemedic knows may sign its file another way: the
    // mismatch can be a version difference, so no drain-and-delete on it.
    if let AtStart::Unsure { kubelet: v } = &refusal.at_start {
        let (major, minor) = crate::kubelet_version::NEWEST_KNOWN_LAYOUTS;
        return Finding::new(
            ID,
            Severity::Warning,
            Subject::node(&snap.node),
            format!(
                "The checksum of {path} ({stored}) matches no kubelet layout nodemedic knows, but the kubelet is {v}, \
                 newer than those (to {major}.{minor}): it may write a layout nodemedic cannot check"
            ),
            format!(
                "do not drain the node or delete the file on this finding alone: the running kubelet wrote it, and a \
                 newer layout would explain the difference. Upgrade nodemedic to one that knows {v}'s layout; the \
                 kubelet's own verdict comes at its next start (journalctl -u kubelet: \"checkpoint is corrupted\" \
                 means it refuses the file, and only then: {})",
                reset_checkpoint_remedy(&snap.node, path)
            ),
        )
        .with("path", path.as_str())
        .with("error", reason)
        .with("kubelet_version", v.to_string())
        .with("layout", layout)
        .with("stored_checksum", stored)
        .with("computed_checksums", computed);
    }
    finding(format!(
        "The checksum of {path} ({stored}) matches no kubelet layout: the kubelet will refuse to restart"
    ))
    .with("kubelet_error", refusal.kubelet_error())
    .with("layout", layout)
    .with("stored_checksum", stored)
    .with("computed_checksums", computed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managers::devices::DeviceCheckpoint;
    use crate::rules::testkit::SnapshotBuilder;
    use crate::snapshot::{ManagerFile, Observed};

    fn run(bytes: &[u8]) -> Vec<Finding> {
        crate::rules::testkit::judged(
            check,
            &SnapshotBuilder::static_node("0-3", &[])
                .with_raw_checkpoint(bytes)
                .build(),
            &Settings::default(),
        )
    }

    #[test]
    fn a_mismatch_under_a_kubelet_newer_than_every_known_layout_is_no_reason_to_drain() {
        let bytes = br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":1337}"#;
        let at = |version: &str| {
            let mut snap = SnapshotBuilder::static_node("0-3", &[])
                .with_raw_checkpoint(bytes)
                .build();
            snap.api.kubelet_version = Observed::Ok(crate::kubelet_version::VersionReading {
                version: crate::kubelet_version::KubeletVersion::parse(version).unwrap(),
                source: crate::kubelet_version::NODE_STATUS.into(),
                read_at: snap.taken_at,
            });
            crate::rules::testkit::judged(check, &snap, &Settings::default())
        };
        for known in ["v1.23.8", "v1.37.0-alpha.1"] {
            let f = at(known);
            assert_eq!(f.len(), 1, "{known}: {f:#?}");
            assert_eq!(f[0].severity, Severity::Critical, "{known}");
            assert!(f[0].remedy.starts_with("kubectl drain"), "{known}: {}", f[0].remedy);
        }
        let f = at("v1.38.2");
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].evidence["kubelet_version"], "v1.38.2");
        assert!(
            f[0].remedy
                .starts_with("do not drain the node or delete the file on this finding alone"),
            "{}",
            f[0].remedy
        );
        // Unknown version: as before.
        assert_eq!(run(bytes)[0].severity, Severity::Critical);
    }

    #[test]
    fn table() {
        let cases: &[(&str, &[u8], Option<&str>)] = &[
            ("valid V2", br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":3094260139}"#, None),
            ("unverified", br#"{"policyName":"static","defaultCpuSet":"0-3","checksum":0}"#, None),
            ("truncated", br#"{"policyName":"static","defaultCpuSet":"0-1","ent"#, Some("invalid JSON at line 1")),
            ("empty", b"", Some("file is empty")),
            ("bad checksum", br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":1337}"#, Some("checkpoint is corrupted")),
            ("bad cpuset", br#"{"policyName":"static","defaultCpuSet":"1.3","checksum":0}"#, Some("invalid cpuset token \"1.3\"")),
            ("reversed range", br#"{"policyName":"static","defaultCpuSet":"0","entries":{"u":{"c":"3-1"}},"checksum":0}"#, Some("\"3-1\"")),
        ];
        for (name, bytes, want) in cases {
            let findings = run(bytes);
            match want {
                None => assert!(findings.is_empty(), "{name}: {findings:?}"),
                Some(text) => {
                    assert_eq!(findings.len(), 1, "{name}");
                    let f = &findings[0];
                    assert_eq!(f.severity, Severity::Critical);
                    let err = f.evidence["error"].as_str().unwrap();
                    assert!(err.contains(text), "{name}: {err}");
                    let kubelet_error = f.evidence.get("kubelet_error").and_then(|v| v.as_str());
                    if *name == "bad checksum" {
                        assert_eq!(
                            kubelet_error,
                            Some(
                                "could not restore state from checkpoint: checkpoint is corrupted, please drain this node and delete the CPU manager checkpoint file \"/var/lib/kubelet/cpu_manager_state\" before restarting Kubelet"
                            )
                        );
                    } else {
                        assert_eq!(kubelet_error, None, "{name}");
                    }
                    assert!(f.remedy.contains("systemctl stop kubelet"));
                }
            }
        }
    }

    #[test]
    fn mismatch_lists_what_each_layout_would_hash_to() {
        let f = &run(br#"{"policyName":"none","defaultCPUSet":"4-6","entries":{},"checksum":1234}"#)[0];
        assert_eq!(f.evidence["stored_checksum"], 1234);
        assert_eq!(
            f.evidence["computed_checksums"]["V2 as CPUManagerCheckpoint"],
            354655845
        );
    }

    #[test]
    fn other_managers_files_by_what_the_kubelet_does_with_them() {
        use crate::managers::dra::DraCheckpoint;
        use crate::managers::memory::MemoryCheckpoint;
        let mut snap = NodeSnapshot::empty("node-a", 0);
        snap.host.managers.memory = Observed::Ok(ManagerFile::<MemoryCheckpoint>::new(
            "/var/lib/kubelet/memory_manager_state".into(),
            Some(60.0),
            MemoryCheckpoint::parse(b"{\"policyName\":"),
        ));
        snap.host.managers.devices = Observed::Ok(ManagerFile::<DeviceCheckpoint>::new(
            "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint".into(),
            Some(60.0),
            DeviceCheckpoint::parse(b"[]"),
        ));
        snap.host.managers.dra = Observed::Ok(ManagerFile::<DraCheckpoint>::new(
            "/var/lib/kubelet/dra_manager_state".into(),
            Some(60.0),
            DraCheckpoint::parse(b""),
        ));
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        let got: Vec<(&str, Severity)> = f
            .iter()
            .map(|f| (f.evidence["manager"].as_str().unwrap(), f.severity))
            .collect();
        assert_eq!(
            got,
            [
                ("memory manager", Severity::Critical),
                ("device manager", Severity::Warning),
                ("DRA manager", Severity::Critical)
            ]
        );
        assert!(f[0].summary.contains("invalid JSON at line 1"), "{}", f[0].summary);
        assert!(
            f[0].summary.ends_with("the kubelet will refuse to restart"),
            "{}",
            f[0].summary
        );
        assert!(f[1].summary.contains("not an object"), "{}", f[1].summary);
        assert!(f[1].summary.contains("devices in use can be allocated to new pods"));
        assert!(f[2].summary.contains("file is empty"));
        assert!(f[1].remedy.contains("Do not delete the file"), "{}", f[1].remedy);
        assert!(
            f[0].remedy
                .contains("mv /var/lib/kubelet/memory_manager_state /var/lib/kubelet/memory_manager_state.bak")
        );
    }

    #[test]
    fn missing_checkpoint_is_not_a_finding() {
        let snap = NodeSnapshot::empty("n", 0);
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }
}
