//! `local-storage-eviction-risk`: a Spark pod's shuffle and spill data grow toward what the
//! kubelet evicts it at, and will reach it soon.
//!
//! Spark keeps shuffle output and spills in its local dirs (`spark-local-dir-N`): by default an
//! `emptyDir` on the node's disk, counted against the pod's `ephemeral-storage`; or a `hostPath`
//! or a PersistentVolumeClaim. The kubelet evicts a pod at once when its usage passes the sum
//! of its containers' `ephemeral-storage` limits or an `emptyDir`'s `sizeLimit`, and evicts pods
//! under `DiskPressure` when its file system falls below the `nodefs.available` threshold
//! (`evictionHard`, 10% by default), or `imagefs.available` (15%) where the runtime's images
//! share that file system. The executor's shuffle output goes with it: the stage fails
//! with fetch failures and is computed again, sometimes in a loop.
//!
//! The daemon measures every running Spark pod's local dirs over a window
//! (`local_storage_window_seconds`, 10 minutes by default) and forecasts, at the growth
//! measured ([`crate::facts::storage_risks`]), when each limit is reached: warning within
//! `local_storage_warning_seconds` (30 minutes), critical within
//! `local_storage_critical_seconds` (5). One finding per pod, on its nearest forecast; the
//! evidence lists every forecast and the other applications growing on the same file system.
//! The remedy is Spark's own settings; nothing is deleted. A one-shot scan measures once and
//! has no growth: the rule does not apply there.

use serde_json::{Value, json};

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::facts::{Forecast, Reach, StorageRisk};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::{RuleGauge, RuleInfo};
use crate::settings::Settings;
use crate::snapshot::{DirBacking, ImageFs, KubeletStats, NodeSnapshot, StorageDir};
use crate::spark;
use crate::text::{human_bytes, human_seconds};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("local-storage-eviction-risk");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "A Spark pod's local storage will reach its eviction limit soon",
    severity: Severity::Warning,
    looks_at: "Spark pods' local dirs over a window, their limits, the kubelet's eviction thresholds",
    fires_when: "at the growth measured, a Spark pod's local dirs reach its ephemeral-storage limit, an emptyDir sizeLimit or the node's nodefs.available (or shared imagefs.available) threshold within local_storage_warning_seconds (critical within local_storage_critical_seconds)",
    event_reason: "LocalStorageEvictionRisk",
    needs: Needs {
        all: &[One(Source::LocalStorage), One(Source::Pods)],
        about: &[Source::LocalStorage],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "ephemeral-storage limits, emptyDir sizeLimit and nodefs.available and imagefs.available eviction are the same in every kubelet nodemedic supports (1.25+: LocalStorageCapacityIsolation GA)",
    ),
    check,
    condition: None,
    gauge: Some(RuleGauge {
        name: "local_storage_at_risk_pods",
        help: "Spark pods on this node whose local storage reaches an eviction limit within local_storage_warning_seconds at the growth measured (the local-storage-eviction-risk findings).",
        value: count,
    }),
    next_judgement: Some(crate::facts::storage_turn),
};

fn count(findings: &[&Finding]) -> u64 {
    findings.len() as u64
}

/// What a forecast reaches, in words.
fn reach_text(reach: &Reach) -> String {
    match reach {
        Reach::PodLimit { limit_bytes, .. } => {
            format!("its ephemeral-storage limit of {}", human_bytes(*limit_bytes))
        }
        Reach::EmptyDirLimit {
            volume, limit_bytes, ..
        } => format!("the sizeLimit of its emptyDir {volume} ({})", human_bytes(*limit_bytes)),
        Reach::EvictionThreshold {
            path,
            threshold,
            imagefs,
            ..
        } => format!(
            "the kubelet's {} threshold on {path} ({} {}{}{}: the node goes into DiskPressure and pods are evicted)",
            threshold.signal,
            threshold.kind,
            threshold.text,
            if threshold.default { ", the default" } else { "" },
            match (threshold.signal, imagefs) {
                (crate::local_storage::IMAGEFS_AVAILABLE, ImageFs::Shared { path }) => {
                    format!("; the runtime's images ({path}) are on the same file system")
                }
                (crate::local_storage::IMAGEFS_AVAILABLE, ImageFs::Unknown { reason }) => {
                    format!("; taken to share it with the runtime's images: {reason}")
                }
                _ => String::new(),
            }
        ),
        Reach::FileSystemFull { path, .. } => {
            format!("a full file system at {path} (the kubelet does not evict for it: the executors fail to write)")
        }
    }
}

fn forecast_json(f: &Forecast) -> Value {
    let mut v = serde_json::to_value(&f.reach).unwrap_or(Value::Null);
    if let Some(map) = v.as_object_mut() {
        map.insert(
            "growth_bytes_per_minute".into(),
            json!((f.growth_bytes_per_second * 60.0).round() as u64),
        );
        map.insert("forecast_seconds".into(), json!(f.seconds.round() as u64));
    }
    v
}

fn dir_json(d: &StorageDir) -> Value {
    json!({
        "volume": d.volume,
        "backing": match &d.backing {
            DirBacking::EmptyDir => "emptyDir",
            DirBacking::Memory => "emptyDir (memory)",
            DirBacking::HostPath { .. } => "hostPath",
            DirBacking::Claim { .. } => "persistentVolumeClaim",
        },
        "path": d.path,
        "bytes": d.bytes,
        "files": d.files,
        "growth_bytes_per_minute": d.growth_bytes_per_second.map(|g| (g * 60.0).round() as i64),
        "measured_over_seconds": d.growth_span_seconds.round() as u64,
        "truncated": d.truncated.then_some(true),
        "measured_by": d.measured_by,
    })
}

/// The remedy for what the nearest forecast reaches.
fn remedy(risk: &StorageRisk, reach: &Reach) -> String {
    let role = if spark::is_driver(risk.pod) {
        "driver"
    } else {
        "executor"
    };
    let volume = risk
        .dirs
        .iter()
        .find(|d| d.backing != DirBacking::Memory)
        .map_or("spark-local-dir-1", |d| d.volume.as_str());
    let dedicated = format!(
        "give the {role}s a volume of their own for shuffle: spark.kubernetes.{role}.volumes.persistentVolumeClaim.{volume}.options.claimName=OnDemand, \
         ...{volume}.options.storageClass=<class>, ...{volume}.options.sizeLimit=<size>, ...{volume}.mount.path=<the local dir's path>, \
         ...{volume}.mount.readOnly=false (the claim goes with the pod)"
    );
    let fewer = "fewer cores per executor (spark.executor.cores) so that each writes less shuffle at once".to_string();
    match reach {
        Reach::PodLimit { .. } | Reach::EmptyDirLimit { .. } => format!(
            "raise the {role}'s ephemeral-storage limit (and request) through a pod template \
             (spark.kubernetes.{role}.podTemplateFile with resources.limits.ephemeral-storage on the \
             spark-kubernetes-{role} container), or {dedicated}, or {fewer}. Nothing is deleted: the data is live shuffle"
        ),
        Reach::EvictionThreshold { .. } | Reach::FileSystemFull { .. } => format!(
            "{dedicated}; or set ephemeral-storage requests on the {role}s through a pod template \
             (spark.kubernetes.{role}.podTemplateFile) so that the scheduler places no more of them than the disk holds; \
             or {fewer}. The file system is shared by every application's shuffle{}: nothing is deleted",
            if risk.others_growing.is_empty() {
                String::new()
            } else {
                format!(" ({} grow there too)", risk.others_growing.join(", "))
            }
        ),
    }
}

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let mut findings = Vec::new();
    for risk in &facts.storage {
        let Some(nearest) = risk.nearest() else { continue };
        let severity = if nearest.seconds <= settings.local_storage_critical_seconds {
            Severity::Critical
        } else if nearest.seconds <= settings.local_storage_warning_seconds {
            Severity::Warning
        } else {
            continue;
        };
        let pod = risk.pod;
        let bytes: u64 = risk
            .dirs
            .iter()
            .filter(|d| d.backing != DirBacking::Memory)
            .map(|d| d.bytes)
            .sum();
        let when = if nearest.seconds <= 0.0 {
            "has already reached".to_string()
        } else {
            format!("reaches in about {}", human_seconds(nearest.seconds.round() as i64))
        };
        let app = pod.spark_app();
        findings.push(
            Finding::new(
                ID,
                severity,
                Subject::pod(pod),
                format!(
                    "the local storage of Spark pod {} ({}{}: {} growing {}/min) {when} {}",
                    pod.display(),
                    app.unwrap_or("no spark-app-selector"),
                    pod.label(spark::APP_NAME).map(|n| format!(", {n}")).unwrap_or_default(),
                    human_bytes(bytes),
                    human_bytes((nearest.growth_bytes_per_second * 60.0).round() as u64),
                    reach_text(&nearest.reach)
                ),
                remedy(risk, &nearest.reach),
            )
            .with("app_id", app)
            .with("app_name", pod.label(spark::APP_NAME))
            .with("role", pod.spark_role().map(|r| r.as_str().to_string()))
            .with("bytes", bytes)
            .with(
                "growth_bytes_per_minute",
                (nearest.growth_bytes_per_second * 60.0).round() as u64,
            )
            .with("forecast_seconds", nearest.seconds.round() as u64)
            .with("reaches", forecast_json(nearest))
            .with(
                "forecasts",
                risk.forecasts.iter().map(forecast_json).collect::<Vec<_>>(),
            )
            .with("local_dirs", risk.dirs.iter().map(|d| dir_json(d)).collect::<Vec<_>>())
            .with(
                "others_growing_on_the_file_system",
                (!risk.others_growing.is_empty()).then(|| risk.others_growing.clone()),
            )
            .with("threshold_unread", risk.threshold_unread.clone())
            .with(
                "usage_counted",
                if risk.kubelet_ephemeral {
                    "the kubelet's count of the pod's ephemeral storage (its emptyDirs, its containers' writable layers and logs) against its limit; the local dirs' own figures against the file system"
                } else {
                    "the pod's local dirs (the kubelet also counts its containers' writable layers and logs)"
                },
            )
            .with(
                "measured_at",
                match &snap.host.local_storage {
                    crate::snapshot::Observed::Ok(s) => Some(s.measured_at),
                    _ => None,
                },
            )
            .with(
                "kubelet_stats",
                match &snap.host.local_storage {
                    crate::snapshot::Observed::Ok(s) if s.kubelet_stats != KubeletStats::Off => {
                        serde_json::to_value(&s.kubelet_stats).ok()
                    }
                    _ => None,
                },
            ),
        );
    }
    if let crate::snapshot::Observed::Ok(storage) = &snap.host.local_storage {
        unseen(snap, storage, &mut findings);
    }
    findings
}

/// The disk-backed local dirs the agent could not measure: named in the pod's finding, or in
/// an info finding of their own (could not look is not "nothing grows").
fn unseen(snap: &NodeSnapshot, storage: &crate::snapshot::LocalStorage, findings: &mut Vec<Finding>) {
    let mut by_pod: std::collections::BTreeMap<&str, Vec<&crate::snapshot::UnseenDir>> = Default::default();
    for u in storage.unseen.iter().filter(|u| u.backing != DirBacking::Memory) {
        by_pod.entry(u.pod_uid.as_str()).or_default().push(u);
    }
    for (uid, dirs) in by_pod {
        let Some(pod) = snap.pods.bound.iter().find(|p| p.uid == uid) else {
            continue;
        };
        let json: Vec<Value> = dirs
            .iter()
            .map(|u| json!({"volume": u.volume, "backing": u.backing, "path": u.path, "reason": u.reason}))
            .collect();
        if let Some(f) = findings.iter_mut().find(|f| f.subject.uid.as_deref() == Some(uid)) {
            f.evidence.insert("unseen_local_dirs".into(), Value::Array(json));
            continue;
        }
        let names: Vec<&str> = dirs.iter().map(|u| u.volume.as_str()).collect();
        findings.push(
            Finding::new(
                ID,
                Severity::Info,
                Subject::pod(pod),
                format!(
                    "the local dir(s) {} of Spark pod {} ({}) could not be measured: {}; their growth is not forecast",
                    names.join(", "),
                    pod.display(),
                    pod.spark_app().unwrap_or("no spark-app-selector"),
                    dirs[0].reason
                ),
                "to measure volumes mounted after the agent started, mount the kubelet's directory into the agent with \
                 mountPropagation: HostToContainer (which recursiveReadOnly does not allow: see docs/rules/local-storage-eviction-risk.md); \
                 restarting the agent's pod sees the volumes mounted until then"
                    .to_string(),
            )
            .with("app_id", pod.spark_app())
            .with("unseen_local_dirs", Value::Array(json)),
        );
    }
}

#[cfg(test)]
mod tests;
