//! `spark-executor-evicted`: the kubelet evicted a Spark executor on this node for its disk.
//!
//! An executor evicted for local storage loses its shuffle output with it: the stages that
//! read it fail with fetch failures and run again. The kubelet marks the pod `Failed` with
//! `reason: Evicted` and a message that says why (`pkg/kubelet/eviction/helpers.go`): its
//! ephemeral-storage limit ("Pod ephemeral local storage usage exceeds the total limit of
//! containers"), a container's own limit, an `emptyDir`'s `sizeLimit`, or the node low on disk
//! ("The node was low on resource: ephemeral-storage", `DiskPressure`). Evictions for memory
//! or PIDs are not this rule's.
//!
//! Fires (warning) for each executor so evicted that is still in the API, with what the daemon
//! measured of its local dirs before it went (the kubelet removes an evicted pod's volumes) and
//! whether `local-storage-eviction-risk` had warned about it, and when.

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::local_storage::DiskEviction;
use crate::rules::{RuleGauge, RuleInfo};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed, PodInfo, PodPhase};
use crate::spark;
use crate::text::human_bytes;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("spark-executor-evicted");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "The kubelet evicted a Spark executor for its disk",
    severity: Severity::Warning,
    looks_at: "executor pods' status, Spark local storage as last measured",
    fires_when: "an executor pod failed with reason Evicted for local storage (its ephemeral-storage limit, an emptyDir sizeLimit, or the node low on ephemeral-storage)",
    event_reason: "SparkExecutorEvicted",
    needs: Needs {
        all: &[One(Source::Pods)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "the eviction messages it reads are the same in every kubelet nodemedic supports; the container fragment of DiskPressure messages changed wording, which it does not read",
    ),
    check,
    condition: None,
    gauge: Some(RuleGauge {
        name: "spark_executors_evicted",
        help: "Spark executors on this node the kubelet evicted for local storage that are still in the API (the spark-executor-evicted findings).",
        value: count,
    }),
    next_judgement: None,
};

fn count(findings: &[&Finding]) -> u64 {
    findings.len() as u64
}

/// The executors evicted for disk, with why.
pub fn evicted(snap: &NodeSnapshot) -> Vec<(&PodInfo, DiskEviction)> {
    snap.pods
        .bound
        .iter()
        .filter(|p| spark::is_executor(p) && p.phase == PodPhase::Failed && p.reason.as_deref() == Some("Evicted"))
        .filter_map(|p| Some((p, DiskEviction::of_message(p.message.as_deref()?)?)))
        .collect()
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    let remembered = match &snap.host.local_storage {
        Observed::Ok(s) => Some(&s.remembered),
        _ => None,
    };
    evicted(snap)
        .into_iter()
        .map(|(pod, why)| {
            let memory = remembered.and_then(|r| r.get(&pod.uid));
            let app = pod.spark_app();
            let what = match why {
                DiskEviction::PodLimit => "its ephemeral-storage limit",
                DiskEviction::ContainerLimit => "a container's ephemeral-storage limit",
                DiskEviction::EmptyDirLimit => "an emptyDir's sizeLimit",
                DiskEviction::NodePressure => "the node's disk running low (DiskPressure)",
            };
            let held = memory.map_or(String::new(), |m| {
                format!("; its local dirs held {} when last measured", human_bytes(m.bytes))
            });
            let warned = match memory.and_then(|m| m.warned_at.map(|at| (at, m.warned_severity))) {
                Some((at, severity)) => format!(
                    "; local-storage-eviction-risk warned about it {} s before ({})",
                    (snap.taken_at - at).max(0),
                    severity.map_or("warning", |s| s.as_str())
                ),
                None => String::new(),
            };
            Finding::new(
                ID,
                Severity::Warning,
                Subject::pod(pod),
                format!(
                    "the kubelet evicted Spark executor {} of {} for {what}: its shuffle output is lost, stages that read it \
                     run again{held}{warned}",
                    pod.display(),
                    app.unwrap_or("an application without spark-app-selector")
                ),
                "size the executors' local storage for their shuffle: a dedicated volume \
                 (spark.kubernetes.executor.volumes.persistentVolumeClaim.spark-local-dir-1.options.claimName=OnDemand with \
                 its storageClass and sizeLimit), or ephemeral-storage requests and limits through a pod template \
                 (spark.kubernetes.executor.podTemplateFile), or fewer cores per executor (spark.executor.cores); see \
                 local-storage-eviction-risk for the growth. The evicted pod stays in the API until deleted"
                    .to_string(),
            )
            .with("app_id", app)
            .with("app_name", pod.label(spark::APP_NAME))
            .with("evicted_for", why.as_str())
            .with("message", pod.message.clone())
            .with("last_measured_bytes", memory.map(|m| m.bytes))
            .with("last_measured_at", memory.map(|m| m.measured_at))
            .with("risk_warned_at", memory.and_then(|m| m.warned_at))
            .with(
                "risk_warned_severity",
                memory.and_then(|m| m.warned_severity).map(|s| s.as_str()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::*;
    use crate::snapshot::Remembered;

    fn evicted_pod(uid: &str, message: &str) -> PodInfo {
        let mut p = spark_executor(uid, "spark-1", "etl", 1, "Failed");
        p.reason = Some("Evicted".into());
        p.message = Some(message.into());
        p
    }

    #[test]
    fn executors_evicted_for_disk_with_what_was_measured_of_them() {
        let disk = evicted_pod(
            "e1",
            "Pod ephemeral local storage usage exceeds the total limit of containers 10Gi. ",
        );
        let pressure = evicted_pod(
            "e2",
            "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 900Mi. ",
        );
        let memory = evicted_pod(
            "e3",
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
        );
        let mut driver = spark_driver("d1", "spark-1", "etl", "Failed");
        driver.reason = Some("Evicted".into());
        driver.message = disk.message.clone();
        let mut snap = SnapshotBuilder::spark_node(&[disk, pressure, memory, driver])
            .with_local_storage(0, vec![], vec![])
            .build();
        if let Observed::Ok(s) = &mut snap.host.local_storage {
            s.remembered.insert(
                "e1".into(),
                Remembered {
                    bytes: 10 << 30,
                    measured_at: NOW - 30,
                    warned_at: Some(NOW - 600),
                    warned_severity: Some(Severity::Critical),
                },
            );
        }
        let f = judged(check, &snap, &Settings::default());
        let uids: Vec<_> = f.iter().map(|f| f.subject.uid.as_deref().unwrap()).collect();
        assert_eq!(
            uids,
            ["e1", "e2"],
            "executors evicted for disk, not memory, not the driver"
        );
        assert_eq!(f[0].evidence["evicted_for"], "pod_limit");
        assert_eq!(f[0].evidence["last_measured_bytes"], 10u64 << 30);
        assert_eq!(f[0].evidence["risk_warned_at"], NOW - 600);
        assert!(
            f[0].summary.contains("warned about it 600 s before (critical)"),
            "{}",
            f[0].summary
        );
        assert_eq!(f[1].evidence["evicted_for"], "node_pressure");
        assert!(f[1].evidence.get("last_measured_bytes").is_none());
        // Without the daemon's measurements (a pods file): judged the same, without memory.
        snap.host.local_storage = Observed::NotApplicable {
            reason: "one-shot".into(),
        };
        assert_eq!(judged(check, &snap, &Settings::default()).len(), 2);
    }
}
