//! The judgements several rules share, and that the agent's metrics and repairs act on.
//!
//! A rule turns these into findings; the agent counts them (`nodemedic_cpu_manager_stale_cpus`,
//! `nodemedic_admission_rejections_total`, `nodemedic_orphaned_executors`) and its repairs
//! delete or free exactly what they name, so all of them agree on what is stale, rejected or
//! orphaned:
//!
//! - stale checkpoint entries: [`StaleEntry`], [`stale_entries`], [`stale_entries_of`],
//!   [`stale_cpus`] (rule `stale-cpu-assignment`, also `exclusive-cpu-shortage`);
//! - pods the kubelet refused at admission: [`Rejection`], [`rejections`], [`rejected_reason`],
//!   [`rejected_for_cpus`], [`metric_reason`] (rules `admission-rejection`,
//!   `scheduler-conflict`, `exclusive-cpu-shortage`, `orphaned-local-dir`);
//! - Spark executors whose driver no longer needs them: [`Orphan`], [`orphaned_executors`]
//!   (rules `orphaned-executor`, `orphaned-local-dir`; `repair orphans`);
//! - the CPUs of each NUMA node, free, live, stale or reserved: [`NumaCpus`],
//!   [`exclusive_cpus_by_numa`] (the `nodemedic_exclusive_cpus` gauge, the published
//!   `NodeResourceTopology`, rule `exclusive-cpu-shortage`);
//! - stale entries of the memory, device and DRA managers' checkpoints and the DRA drivers':
//!   [`Stale`], [`stale_memory`], [`stale_devices`], [`StaleClaim`], [`stale_claims`] (rules
//!   `stale-memory-assignment`, `stale-device-assignment`, `stale-dra-claim`,
//!   `device-admission-failure`; the `nodemedic_memory_manager_*` and `nodemedic_devices_*`
//!   gauges);
//! - Spark drivers spark-submit left half made (pod created, ConfigMap never applied):
//!   [`HalfSubmitted`], [`half_submitted_drivers`] (rule `half-submitted-driver`; `repair
//!   half-submitted`; the `nodemedic_half_submitted_drivers` gauge);
//! - Spark scratch dirs nothing will read again: [`OrphanedDirs`], [`orphaned_dirs`] (rule
//!   `orphaned-local-dir`; `repair local-dirs`);
//! - the checkpoints the kubelet will not restore at its next start, and whether it then
//!   refuses to start: [`CheckpointRefusal`], [`checkpoint_refusals`] (rules
//!   `checkpoint-unreadable`, `checkpoint-invalid-state`; `stale-cpu-assignment` and
//!   `exclusive-cpu-shortage`, whose remedy is no kubelet restart while one is refused;
//!   `checkpoint verify`).
//!
//! Each rule's module documentation says how its judgement is made and why.
//!
//! [`derive`] makes every one of these judgements once for a snapshot and its effective
//! settings: the rules, the metrics, the published `NodeResourceTopology` and the repairs all
//! read that one [`Facts`] value, so a judgement cycle computes each exactly once and every
//! consumer sees the same answer. [`counts`] tells how often each was made on this thread (the
//! tests count them).

mod dirs;
mod half_submitted;
mod managers;
mod numa;
mod orphans;
mod refusals;
mod rejections;
mod stale;
mod storage;

pub use dirs::*;
pub use half_submitted::*;
pub use managers::*;
pub use numa::*;
pub use orphans::*;
pub use refusals::*;
pub use rejections::*;
pub use stale::*;
pub use storage::*;

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::CpuSet;
use crate::managers::devices::DeviceEntry;
use crate::managers::memory::MemoryAssignment;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed};

/// Every shared judgement about one snapshot under one set of effective settings, made once by
/// [`derive`]. Fields borrow the pods and files of the snapshot they were derived from.
#[derive(Debug)]
pub struct Facts<'a> {
    /// Stale entries of `cpu_manager_state` ([`stale_entries`]); empty when the file is
    /// unreadable or liveness cannot be judged.
    pub stale_cpu: Vec<StaleEntry>,
    /// The CPUs those entries hold ([`stale_cpus`]).
    pub stale_cpus: CpuSet,
    /// The exclusive CPUs by NUMA node under the static policy ([`exclusive_cpus_by_numa`]).
    pub numa: Option<(Vec<NumaCpus>, ReservedFrom)>,
    /// Stale entries of `memory_manager_state` ([`stale_memory`]).
    pub stale_memory: Vec<Stale<MemoryAssignment>>,
    /// Stale entries of the device manager's checkpoint ([`stale_devices`]).
    pub stale_devices: Vec<Stale<DeviceEntry>>,
    /// Prepared DRA claims no live pod needs ([`stale_claims`]).
    pub stale_claims: Vec<StaleClaim<'a>>,
    /// Every pod the kubelet refused at admission ([`rejections`]).
    pub rejections: Vec<Rejection<'a>>,
    /// Spark executors whose driver no longer needs them ([`orphaned_executors`]).
    pub orphans: Vec<Orphan<'a>>,
    /// Spark drivers spark-submit left half made ([`half_submitted_drivers`]).
    pub half_submitted: Vec<HalfSubmitted<'a>>,
    /// Spark scratch dirs nothing will read again ([`orphaned_dirs`]).
    pub orphaned_dirs: Vec<OrphanedDirs<'a>>,
    /// The checkpoints the kubelet will not restore at its next start
    /// ([`checkpoint_refusals`]), files it cannot read first.
    pub refusals: Vec<CheckpointRefusal>,
    /// The growing Spark pods' forecasts of eviction ([`storage_risks`]).
    pub storage: Vec<StorageRisk<'a>>,
}

/// Makes every shared judgement about `snap` once, under `settings` (the effective settings
/// of the caller: the daemon's, a scan's or a repair's, which are the same for one
/// configuration).
pub fn derive<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Facts<'a> {
    let stale_cpu = stale_entries(snap, settings);
    let stale_cpus = stale_cpus(&stale_cpu);
    let numa = exclusive_cpus_by_numa(snap, &stale_cpus);
    Facts {
        numa,
        stale_cpus,
        stale_cpu,
        stale_memory: stale_memory(snap, settings),
        stale_devices: stale_devices(snap, settings),
        stale_claims: stale_claims(snap, settings),
        rejections: rejections(snap),
        orphans: orphaned_executors(snap, settings),
        half_submitted: half_submitted_drivers(snap, settings),
        orphaned_dirs: orphaned_dirs(snap, settings),
        refusals: checkpoint_refusals(snap),
        storage: storage_risks(snap, settings),
    }
}

impl Facts<'_> {
    /// The rejections that count now: from the live API only pods created within
    /// `rejection_window_seconds` (a pod with no creation time counts); from a file all.
    pub fn recent_rejections(&self, snap: &NodeSnapshot, settings: &Settings) -> Vec<&Rejection<'_>> {
        self.rejections
            .iter()
            .filter(|r| is_recent(snap, settings, r))
            .collect()
    }
}

thread_local! {
    static COUNTS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Notes that the judgement `what` was made once more on this thread.
/// The nearest of `turns` (seconds after the snapshot; `None`: nothing waits), for a rule whose
/// judgement turns with more than one clock.
pub fn nearest(turns: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    turns.into_iter().flatten().min_by(f64::total_cmp)
}

/// When a rule that weighs recent rejections against stale entries judges again: the kubelet's
/// grace ends ([`grace_turn`]) or a rejection leaves the window ([`rejections::rejection_window_turn`]).
pub fn grace_or_window_turn(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    nearest([
        grace_turn(snap, settings),
        rejections::rejection_window_turn(snap, settings),
    ])
}

pub(crate) fn count(what: &'static str) {
    COUNTS.with(|c| *c.borrow_mut().entry(what).or_default() += 1);
}

/// How many times each shared judgement (by its function's name) was made on this thread since
/// it started: what a test reads to check that a judgement cycle makes each one once.
pub fn counts() -> BTreeMap<&'static str, u64> {
    COUNTS.with(|c| c.borrow().clone())
}

/// The checkpoint's host path, or the default.
pub(crate) fn checkpoint_path(snapshot: &NodeSnapshot) -> String {
    match &snapshot.host.checkpoint {
        Observed::Ok(f) => f.path.clone(),
        Observed::Missing { path } => path.clone(),
        _ => "/var/lib/kubelet/cpu_manager_state".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::dirs::overlaps;
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, spark_executor};
    use crate::settings::Settings;

    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";

    #[test]
    fn stale_cpus_unions_entries() {
        let entries = vec![
            ("live", "app", "2-3"),
            ("gone", "app", "4-5"),
            ("done", "app", "6"),
            ("live", "old-sidecar", "7"),
        ];
        let snap = SnapshotBuilder::static_node("0-1", &entries).with_pod_list(&[]).build();
        assert_eq!(
            stale_cpus(&stale_entries(&snap, &Settings::default())).to_string(),
            "2-7"
        );
    }

    /// A judgement cycle over a node whose CPU manager checkpoint the kubelet would refuse (CPU
    /// 7 went offline) and whose stale entry holds CPUs a pending pod needs judges the refusal
    /// once: the checkpoint rule, `stale-cpu-assignment` and `exclusive-cpu-shortage` (whose
    /// remedies say not to restart the kubelet) all read it. Before, `stale-cpu-assignment` ran
    /// both checkpoint rules again for its own findings and once more for
    /// `exclusive-cpu-shortage`'s remedy: three judgements a cycle.
    #[test]
    fn a_judgement_cycle_judges_the_refused_checkpoint_once() {
        use crate::snapshot::{ContainerInfo, ContainerKind};
        let mut pending = crate::rules::testkit::pod("new", "etl", "Pending", &[]);
        pending.containers.push(ContainerInfo {
            name: "app".into(),
            kind: Some(ContainerKind::Regular),
            cpu_request_millis: Some(4000),
            ..Default::default()
        });
        let snap = SnapshotBuilder::static_node("0-1", &[("gone", "app", "6-7")])
            .with_pod_list(&[pending])
            .with_online("0-6")
            .build();
        let settings = Settings::default();
        let before = counts().get("checkpoint_refusals").copied().unwrap_or(0);
        let findings = crate::rules::judge(&snap, &derive(&snap, &settings), &settings).findings;
        let after = counts().get("checkpoint_refusals").copied().unwrap_or(0);
        assert_eq!(after - before, 1);
        let remedy_of = |rule: &str| {
            let f = findings.iter().find(|f| f.rule.as_str() == rule);
            f.map(|f| f.remedy.clone())
                .unwrap_or_else(|| panic!("no {rule}: {findings:#?}"))
        };
        assert_eq!(
            findings
                .iter()
                .find(|f| f.rule.as_str() == "checkpoint-invalid-state")
                .map(|f| &f.evidence["problem"]),
            Some(&serde_json::json!("cpus-mismatch"))
        );
        for rule in ["stale-cpu-assignment", "exclusive-cpu-shortage"] {
            let remedy = remedy_of(rule);
            assert!(
                remedy.contains(
                    "do not restart the kubelet to clear this: at its next start it would refuse \
                                 /var/lib/kubelet/cpu_manager_state (current set of available CPUs"
                ),
                "{rule}: {remedy}"
            );
        }
    }

    #[test]
    fn metric_reasons_are_bounded() {
        assert_eq!(metric_reason("OutOfcpu"), "OutOfcpu");
        assert_eq!(metric_reason("OutOfnvidia.com/gpu"), "OutOfExtendedResource");
        assert_eq!(metric_reason("UnexpectedAdmissionError"), "UnexpectedAdmissionError");
        assert_eq!(metric_reason("Qqre-anything-a-pod-writer-chose"), "Other");
    }

    #[test]
    fn parses_both_message_forms() {
        let want = Insufficient {
            resource: "cpu".into(),
            requested: 56033,
            used: 34036,
            capacity: 90000,
        };
        for msg in [
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
            "Pod Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
            "Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
        ] {
            assert_eq!(parse_insufficient(msg).as_ref(), Some(&want), "{msg}");
        }
        let gpu = parse_insufficient(
            "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 8, capacity: 8",
        )
        .unwrap();
        assert_eq!(
            (gpu.resource.as_str(), gpu.unit(), gpu.shortfall()),
            ("nvidia.com/gpu", "count", 1)
        );
        let mem = parse_insufficient(
            "Pod was rejected: Node didn't have enough resource: memory, requested: 17179869184, used: 120259084288, capacity: 132070244352",
        )
        .unwrap();
        assert_eq!((mem.unit(), mem.shortfall()), ("bytes", 5_368_709_120));
        assert_eq!(want.shortfall(), 56033 - (90000 - 34036));
        for bad in [
            "",
            "Pod was rejected: Predicate NodeAffinity failed",
            "Node didn't have enough resource: cpu, requested: x, used: 1, capacity: 2",
            "Node didn't have enough resource: cpu, requested: 1",
            "Node didn't have enough resource: , requested: 1, used: 1, capacity: 2",
        ] {
            assert_eq!(parse_insufficient(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn which_pods_are_rejections() {
        let cases = [
            ("Failed", Some("OutOfcpu"), None, true),
            ("Failed", Some("OutOfephemeral-storage"), None, true),
            ("Failed", Some("OutOfnvidia.com/gpu"), None, true),
            ("Failed", Some("UnexpectedAdmissionError"), None, true),
            (
                "Failed",
                Some("NodeAffinity"),
                Some("Pod was rejected: Predicate NodeAffinity failed"),
                true,
            ),
            (
                "Failed",
                Some("SysctlForbidden"),
                Some("Pod was rejected: forbidden sysctl"),
                true,
            ),
            (
                "Failed",
                Some("Evicted"),
                Some("The node was low on resource: memory."),
                false,
            ),
            ("Failed", Some("OutOf"), None, false),
            ("Failed", None, Some("Pod was rejected: x"), false),
            ("Failed", Some(""), None, false),
            ("Pending", Some("OutOfcpu"), None, false),
            ("Failed", Some("Error"), None, false),
        ];
        for (phase, reason, message, want) in cases {
            let mut p = spark_executor("u", APP, "etl", 1, phase);
            p.reason = reason.map(String::from);
            p.message = message.map(String::from);
            assert_eq!(rejected_reason(&p).is_some(), want, "{phase} {reason:?} {message:?}");
        }
    }

    #[test]
    fn host_paths_trim_and_overlap() {
        assert_eq!(crate::hostpath::normalize("///"), "/");
        for (a, b, want) in [
            ("/mnt/nvme0/spark", "/mnt/nvme0/spark", true),
            ("/mnt/nvme0", "/mnt/nvme0/spark", true),
            ("/mnt/nvme0/spark/exec-a", "/mnt/nvme0/spark", true),
            ("/", "/mnt/nvme0/spark", true),
            ("/mnt/nvme0/spark2", "/mnt/nvme0/spark", false),
            ("/mnt/nvme1", "/mnt/nvme0/spark", false),
        ] {
            assert_eq!(overlaps(a, b), want, "{a} {b}");
        }
    }
}
