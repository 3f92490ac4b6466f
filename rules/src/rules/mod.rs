//! The rule catalogue. One module per rule id (`stale-cpu-assignment` lives in
//! `stale_cpu_assignment.rs`); each exposes `check(&NodeSnapshot, &Settings) -> Vec<Finding>`.
//! [`evaluate`] runs every enabled rule and returns the findings in a stable order.
//!
//! A rule module holds its id, the evaluation that turns facts into findings, and its tests.
//! Rule modules do not use each other: what several of them need is in the shared modules
//! ([`crate::facts`], [`crate::probes`], [`crate::spark`], [`crate::text`]).

pub mod admission_rejection;
pub mod apiserver_unreachable;
pub mod checkpoint_invalid_state;
pub mod checkpoint_unreadable;
pub mod cpuset_drift;
pub mod cross_pod_cpu_overlap;
pub mod device_admission_failure;
pub mod driver_blocked_by_partition;
pub mod duplicate_driver;
pub mod exclusive_cpu_shortage;
pub mod executor_without_owner;
pub mod half_submitted_driver;
pub mod kubelet_state_divergence;
pub mod orphaned_executor;
pub mod orphaned_local_dir;
pub mod scheduler_conflict;
pub mod slow_api;
pub mod slow_pod_admission;
pub mod stale_cpu_assignment;
pub mod stale_device_assignment;
pub mod stale_dra_claim;
pub mod stale_memory_assignment;
pub mod webhook_blocks_dry_run;

use crate::finding::{Finding, Severity};
use crate::settings::Settings;
use crate::snapshot::NodeSnapshot;

/// A rule's signature: a pure function of the snapshot and the settings.
pub type CheckFn = fn(&NodeSnapshot, &Settings) -> Vec<Finding>;

/// A rule's identity and documentation.
#[derive(Debug, Clone, Copy)]
pub struct RuleInfo {
    /// The stable id (docs/architecture.md), also the name of its page under docs/rules/.
    pub id: &'static str,
    /// One line for people.
    pub title: &'static str,
    /// The severity of its usual finding (a rule may report some findings lower).
    pub severity: Severity,
    /// The inputs it reads.
    pub looks_at: &'static str,
    /// When it fires.
    pub fires_when: &'static str,
    /// The Kubernetes Event reason for its findings.
    pub event_reason: &'static str,
    pub check: CheckFn,
}

impl RuleInfo {
    /// The rule's documentation page, relative to the repository root.
    pub fn docs_path(&self) -> String {
        format!("docs/rules/{}.md", self.id)
    }
}

/// Every rule nodemedic runs, in catalogue order.
pub const ALL: &[RuleInfo] = &[
    RuleInfo {
        id: checkpoint_unreadable::ID,
        title: "A kubelet checkpoint cannot be read by the kubelet",
        severity: Severity::Critical,
        looks_at: "cpu_manager_state, memory_manager_state, device-plugins/kubelet_internal_checkpoint, dra_manager_state",
        fires_when: "bad JSON, a bad value, or a checksum no kubelet layout matches: the kubelet will refuse to restart (the device manager's file: it starts and forgets its device assignments, a warning)",
        event_reason: "KubeletCheckpointUnreadable",
        check: checkpoint_unreadable::check,
    },
    RuleInfo {
        id: checkpoint_invalid_state::ID,
        title: "The CPU manager checkpoint breaks a static-policy rule",
        severity: Severity::Critical,
        looks_at: "checkpoint, online CPUs, kubelet config",
        fires_when: "a static-policy rule of docs/kubelet.md (\"Why a kubelet refuses to start\") is broken, or the configured policy differs from the file's",
        event_reason: "CPUManagerInvalidState",
        check: checkpoint_invalid_state::check,
    },
    RuleInfo {
        id: stale_cpu_assignment::ID,
        title: "Exclusive CPUs are held for a container that no longer runs here",
        severity: Severity::Critical,
        looks_at: "checkpoint, pods, cgroups",
        fires_when: "an entry names a pod UID or container that is not alive on this node",
        event_reason: "StaleCPUAssignment",
        check: stale_cpu_assignment::check,
    },
    RuleInfo {
        id: cross_pod_cpu_overlap::ID,
        title: "Two pods hold the same exclusive CPU",
        severity: Severity::Critical,
        looks_at: "checkpoint",
        fires_when: "two different pods hold the same exclusive CPU",
        event_reason: "CrossPodCPUOverlap",
        check: cross_pod_cpu_overlap::check,
    },
    RuleInfo {
        id: cpuset_drift::ID,
        title: "A container's cgroup cpuset differs from the checkpoint",
        severity: Severity::Warning,
        looks_at: "checkpoint, cgroups",
        fires_when: "a running container's cgroup cpuset differs from its checkpoint entry (exclusive containers at once; shared-pool containers once the checkpoint is older than the reconcile period)",
        event_reason: "CPUSetDrift",
        check: cpuset_drift::check,
    },
    RuleInfo {
        id: kubelet_state_divergence::ID,
        title: "The kubelet's CPU, memory or device assignments in memory differ from its checkpoint files",
        severity: Severity::Critical,
        looks_at: "PodResources API, cpu_manager_state, memory_manager_state, kubelet_internal_checkpoint, online CPUs, kubelet config",
        fires_when: "a container the kubelet lists has other exclusive CPUs, memory blocks or devices in memory than in its checkpoint files, or the kubelet's allocatable CPUs differ from the online CPUs minus the reserved ones: the next kubelet restart moves containers, hands out what is in use, or fails",
        event_reason: "KubeletStateDivergence",
        check: kubelet_state_divergence::check,
    },
    RuleInfo {
        id: exclusive_cpu_shortage::ID,
        title: "Guaranteed pods cannot get the exclusive CPUs they need",
        severity: Severity::Critical,
        looks_at: "checkpoint, pods",
        fires_when: "pods fail with \"not enough cpus available\" or the free exclusive CPUs cannot fit pending Guaranteed pods",
        event_reason: "ExclusiveCPUShortage",
        check: exclusive_cpu_shortage::check,
    },
    RuleInfo {
        id: stale_memory_assignment::ID,
        title: "The memory manager holds NUMA memory for a container that no longer runs",
        severity: Severity::Warning,
        looks_at: "memory_manager_state, pods on the node (or the kubelet's PodResources list, or cgroups)",
        fires_when: "an entry of memory_manager_state belongs to a pod that is not alive on the node (after the reconcile grace)",
        event_reason: "StaleMemoryAssignment",
        check: stale_memory_assignment::check,
    },
    RuleInfo {
        id: stale_device_assignment::ID,
        title: "The device manager holds devices for a container that no longer runs",
        severity: Severity::Warning,
        looks_at: "device-plugins/kubelet_internal_checkpoint, pods on the node (or the kubelet's PodResources list, or cgroups)",
        fires_when: "a PodDeviceEntries entry with devices belongs to a pod that is not alive on the node (after the reconcile grace)",
        event_reason: "StaleDeviceAssignment",
        check: stale_device_assignment::check,
    },
    RuleInfo {
        id: stale_dra_claim::ID,
        title: "A ResourceClaim stays prepared on the node after its pods are gone",
        severity: Severity::Warning,
        looks_at: "dra_manager_state, configured DRA driver checkpoints, pods on the node",
        fires_when: "every pod a prepared claim was prepared for is gone, or a driver keeps a claim the kubelet's file no longer holds",
        event_reason: "StaleDRAClaim",
        check: stale_dra_claim::check,
    },
    RuleInfo {
        id: device_admission_failure::ID,
        title: "Pods are refused devices, NUMA locality or DRA devices that stale entries hold",
        severity: Severity::Critical,
        looks_at: "refused pods, Events of pods waiting to start, the stale memory, device and DRA entries",
        fires_when: "UnexpectedAdmissionError (devices unavailable), TopologyAffinityError or FailedPrepareDynamicResources (already allocated to a different claim) while stale entries hold what was refused",
        event_reason: "DeviceAdmissionFailure",
        check: device_admission_failure::check,
    },
    RuleInfo {
        id: orphaned_executor::ID,
        title: "A Spark executor outlives its driver",
        severity: Severity::Warning,
        looks_at: "pods on the node, their drivers, local dirs, checkpoint",
        fires_when: "a Spark executor (running, or finished but keeping local data) whose driver pod is gone, replaced (other UID, another application or operator run) or finished for longer than the grace period (critical when it still runs on exclusive CPUs)",
        event_reason: "OrphanedExecutor",
        check: orphaned_executor::check,
    },
    RuleInfo {
        id: executor_without_owner::ID,
        title: "Spark executors have no owner reference to their driver",
        severity: Severity::Warning,
        looks_at: "executor pods, their drivers",
        fires_when: "running executors have no owner reference of kind Pod, so they will be left behind when their driver dies (info when the driver runs outside the cluster)",
        event_reason: "ExecutorWithoutOwner",
        check: executor_without_owner::check,
    },
    RuleInfo {
        id: admission_rejection::ID,
        title: "The kubelet rejected pods bound to this node",
        severity: Severity::Warning,
        looks_at: "pods on the node",
        fires_when: "pods failed kubelet admission (OutOfcpu, OutOfmemory, OutOfpods, UnexpectedAdmissionError, a predicate name, ...; from the live API only within the rejection window)",
        event_reason: "AdmissionRejection",
        check: admission_rejection::check,
    },
    RuleInfo {
        id: scheduler_conflict::ID,
        title: "Two schedulers overcommit this node",
        severity: Severity::Warning,
        looks_at: "rejections, schedulerName",
        fires_when: "capacity rejections (OutOf*, NodePorts) on a node where two or more schedulers bound pods in the window",
        event_reason: "SchedulerConflict",
        check: scheduler_conflict::check,
    },
    RuleInfo {
        id: duplicate_driver::ID,
        title: "Two drivers of one Spark application are alive",
        severity: Severity::Critical,
        looks_at: "driver pods",
        fires_when: "two or more unfinished drivers of one application (same spark-app-selector, or same operator app and submission id), one of them on this node",
        event_reason: "DuplicateDriver",
        check: duplicate_driver::check,
    },
    RuleInfo {
        id: driver_blocked_by_partition::ID,
        title: "A replacement Spark driver waits for a volume held on a node cut off from the API server",
        severity: Severity::Critical,
        looks_at: "driver pods bound here, their Events, other drivers of the app, their nodes",
        fires_when: "a driver here stays Pending with a FailedAttachVolume (Multi-Attach) or FailedMount (mount timeout) Warning while another unfinished driver of its application (same spark-app-selector, operator run or Job) is on a node whose Ready is Unknown or False",
        event_reason: "DriverBlockedByPartition",
        check: driver_blocked_by_partition::check,
    },
    RuleInfo {
        id: half_submitted_driver::ID,
        title: "A Spark driver that spark-submit gave up on waits forever without its ConfigMap",
        severity: Severity::Warning,
        looks_at: "driver pods bound here that wait to start, their kubelet pod directory, their Events, newer drivers of the submission, dry-run pod creates",
        fires_when: "a driver has waited half_submitted_grace_seconds (since bound) and its spark-conf-volume-driver ConfigMap volume never appeared under its kubelet directory, or a newer driver of the same submission (spark-app-selector, or spark-app-name within an hour) started; critical after half_submitted_critical_seconds",
        event_reason: "HalfSubmittedDriver",
        check: half_submitted_driver::check,
    },
    RuleInfo {
        id: orphaned_local_dir::ID,
        title: "Spark scratch data that nothing will read again",
        severity: Severity::Warning,
        looks_at: "Spark local dirs on the node, pods, cgroups",
        fires_when: "blockmgr/spark dirs idle for the minimum age whose pod has finished or is gone, or under a hostPath root no running pod could have written them for (info when they hold no bytes)",
        event_reason: "OrphanedLocalDir",
        check: orphaned_local_dir::check,
    },
    RuleInfo {
        id: slow_api::ID,
        title: "Reading from the API server is slow from this node",
        severity: Severity::Warning,
        looks_at: "API probes (get, list)",
        fires_when: "the median time of a read probe in the window is at or above slow_api_warning_seconds (critical at slow_api_critical_seconds); the slowest request's phases say whether DNS, connect, TLS or the API server's answer is slow",
        event_reason: "SlowAPI",
        check: slow_api::check,
    },
    RuleInfo {
        id: slow_pod_admission::ID,
        title: "Creating a pod nears or passes the Spark client timeout",
        severity: Severity::Critical,
        looks_at: "dry-run pod creates, webhook configurations, API server metrics, Spark driver configurations",
        fires_when: "the median dry-run pod create in the window takes half the Spark client timeout or more (warning; also when the slowest passes it) or the whole timeout (critical); names the webhooks that match pod CREATE and the slowest one when measurable",
        event_reason: "SlowPodAdmission",
        check: slow_pod_admission::check,
    },
    RuleInfo {
        id: apiserver_unreachable::ID,
        title: "This node cannot reach the API server",
        severity: Severity::Critical,
        looks_at: "API probes, driver pods",
        fires_when: "no API probe succeeded for apiserver_unreachable_seconds; lists the Spark drivers on this node that may end up running twice",
        event_reason: "APIServerUnreachable",
        check: apiserver_unreachable::check,
    },
    RuleInfo {
        id: webhook_blocks_dry_run::ID,
        title: "An admission webhook makes dry-run pod creates fail",
        severity: Severity::Warning,
        looks_at: "dry-run pod creates, webhook configurations",
        fires_when: "dry-run pod creates fail with 400 `admission webhook \"<name>\" does not support dry run`, or a webhook matching the probe pod has sideEffects Unknown or Some: pod admission latency cannot be measured",
        event_reason: "WebhookBlocksDryRun",
        check: webhook_blocks_dry_run::check,
    },
];

/// The rule with `id`.
pub fn by_id(id: &str) -> Option<&'static RuleInfo> {
    ALL.iter().find(|r| r.id == id)
}

/// Runs every enabled rule; findings worst first, then by rule and subject.
pub fn evaluate(snapshot: &NodeSnapshot, settings: &Settings) -> Vec<Finding> {
    let mut findings: Vec<Finding> = ALL
        .iter()
        .filter(|r| settings.enabled(r.id))
        .flat_map(|r| {
            let mut found = (r.check)(snapshot, settings);
            if let Some(severity) = settings.severity_overrides.get(r.id) {
                for f in &mut found {
                    f.severity = *severity;
                }
            }
            found
        })
        .collect();
    findings.sort_by_key(Finding::sort_key);
    findings
}

#[cfg(test)]
pub(crate) mod testkit;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_ids_are_unique_kebab_case_and_match_modules() {
        let mut ids: Vec<&str> = ALL.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), ALL.len());
        for r in ALL {
            assert!(r.id.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'), "{}", r.id);
            assert!(r.event_reason.chars().next().is_some_and(|c| c.is_ascii_uppercase()));
            assert_eq!(by_id(r.id).map(|x| x.id), Some(r.id));
        }
    }

    #[test]
    fn severity_overrides_apply_and_settings_validate() {
        let snap = testkit::SnapshotBuilder::static_node("0-1", &[("dead-pod", "app", "2-3")])
            .with_pod_list(&[])
            .build();
        let mut settings = Settings::default();
        settings
            .severity_overrides
            .insert("stale-cpu-assignment".into(), Severity::Info);
        let f = evaluate(&snap, &settings);
        assert!(
            f.iter()
                .filter(|f| f.rule == "stale-cpu-assignment")
                .all(|f| f.severity == Severity::Info)
        );
        assert_eq!(settings.validate(), Ok(()));
        settings
            .severity_overrides
            .insert("no-such-rule".into(), Severity::Info);
        assert!(settings.validate().unwrap_err().contains("\"no-such-rule\""));
        let negative = Settings {
            orphan_grace_seconds: -1,
            ..Default::default()
        };
        assert_eq!(negative.validate(), Err("orphan_grace_seconds: -1 is negative".into()));
    }

    #[test]
    fn disabled_rules_do_not_run() {
        let snap = testkit::SnapshotBuilder::static_node("0-1", &[("dead-pod", "app", "2-3")])
            .with_pod_list(&[])
            .build();
        let all = evaluate(&snap, &Settings::default());
        assert!(all.iter().any(|f| f.rule == "stale-cpu-assignment"));
        let mut settings = Settings::default();
        settings.disabled_rules.insert("stale-cpu-assignment".into());
        assert!(
            evaluate(&snap, &settings)
                .iter()
                .all(|f| f.rule != "stale-cpu-assignment")
        );
    }
}
