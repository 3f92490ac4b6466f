//! `checkpoint-unreadable`: the kubelet cannot restore its CPU manager state from the file
//! (bad JSON, a bad cpuset, or a checksum that no kubelet layout produces), so it will refuse
//! to start the next time it restarts (docs/kubelet.md, "Why a kubelet refuses to start").

use serde_json::json;

use crate::checkpoint::Verification;
use crate::facts::checkpoint_path;
use crate::finding::{Finding, Severity, Subject};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed};
use crate::text::reset_checkpoint_remedy;

pub const ID: &str = "checkpoint-unreadable";

/// The line the kubelet logs before exiting on a checksum mismatch. (For bad JSON or a bad
/// cpuset it logs Go's own decoder error, which we do not imitate.)
fn kubelet_error(reason: &str, path: &str) -> String {
    format!(
        "could not restore state from checkpoint: {reason}, please drain this node and delete the CPU manager \
         checkpoint file \"{path}\" before restarting Kubelet"
    )
}

pub fn check(snap: &NodeSnapshot, _settings: &Settings) -> Vec<Finding> {
    let Observed::Ok(file) = &snap.checkpoint else {
        return vec![];
    };
    let path = checkpoint_path(snap);
    let finding = |summary: String, reason: String| {
        Finding::new(
            ID,
            Severity::Critical,
            Subject::node(&snap.node),
            summary,
            reset_checkpoint_remedy(&snap.node, &path),
        )
        .with("path", path.clone())
        .with("error", reason)
    };
    let cp = match &file.content {
        Err(e) => {
            return vec![finding(
                format!("The CPU manager checkpoint {path} cannot be read: {e}"),
                e.to_string(),
            )];
        }
        Ok(cp) => cp,
    };
    if let Verification::Mismatch { stored, computed } = cp.verify() {
        let computed: serde_json::Map<String, serde_json::Value> =
            computed.into_iter().map(|(name, sum)| (name, json!(sum))).collect();
        return vec![
            finding(
                format!(
                    "The checksum of {path} ({stored}) matches no kubelet layout: the kubelet will refuse to restart"
                ),
                "checkpoint is corrupted".to_string(),
            )
            .with("kubelet_error", kubelet_error("checkpoint is corrupted", &path))
            .with("layout", cp.layout())
            .with("stored_checksum", stored)
            .with("computed_checksums", computed),
        ];
    }
    match &file.state {
        Err(e) => vec![finding(
            format!("The CPU manager checkpoint {path} has an unreadable cpuset: {e}"),
            e.to_string(),
        )],
        Ok(_) => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::SnapshotBuilder;

    fn run(bytes: &[u8]) -> Vec<Finding> {
        check(
            &SnapshotBuilder::static_node("0-3", &[])
                .with_raw_checkpoint(bytes)
                .build(),
            &Settings::default(),
        )
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
    fn missing_checkpoint_is_not_a_finding() {
        let snap = NodeSnapshot::empty("n", 0);
        assert!(check(&snap, &Settings::default()).is_empty());
    }
}
