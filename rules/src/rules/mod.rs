//! The rule catalogue. One module per rule id (`stale-cpu-assignment` lives in
//! `stale_cpu_assignment.rs`); each exposes `check(&NodeSnapshot, &Facts, &Settings) -> Vec<Finding>`,
//! reading the shared judgements of [`crate::facts::derive`], made once per judgement.
//! [`judge`] runs every enabled rule and returns the findings in a stable order.
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

use crate::coverage::Need::{self, One};
use crate::coverage::Source::*;
use crate::coverage::{Comparison, Coverage, Judgement, KubeletVersions, Needs};
use crate::facts::Facts;
use crate::finding::{Finding, Severity};
use crate::settings::Settings;
use crate::snapshot::NodeSnapshot;

/// A rule's signature: a pure function of the snapshot, the facts derived from it once
/// ([`crate::facts::derive`]) and the settings they were derived under.
pub type CheckFn = fn(&NodeSnapshot, &Facts, &Settings) -> Vec<Finding>;

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
    /// The sources it needs to judge ([`crate::coverage`]); its page's "Needs" line lists them.
    pub needs: Needs,
    /// From which kubelet version each of its comparisons holds ([`crate::coverage::KubeletVersions`]);
    /// its page's "Kubelet versions" block says it.
    pub kubelet_versions: KubeletVersions,
    pub check: CheckFn,
    /// The node condition its findings make `True`, if any (the agent patches one condition per
    /// [`NodeCondition`], from every rule that declares it).
    pub condition: Option<NodeCondition>,
    /// The gauge its findings set, if any (the agent registers one per declaring rule).
    pub gauge: Option<RuleGauge>,
    /// When its judgement of a snapshot changes by the clock alone (a grace that runs out):
    /// seconds after the snapshot was taken, `None` when nothing waits on the clock. The daemon
    /// judges again then, even if nothing on the node or in the API changed.
    pub next_judgement: Option<NextJudgementFn>,
}

/// A rule's [`RuleInfo::next_judgement`].
pub type NextJudgementFn = fn(&NodeSnapshot, &Settings) -> Option<f64>;

/// A node condition some rules' findings make `True` (`False` when none of them found
/// anything, `Unknown` when none found anything and one could not judge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeCondition {
    /// The condition's `type`.
    pub type_: &'static str,
    /// Its `reason` while `True`.
    pub reason_true: &'static str,
    /// Its `reason` while `False`.
    pub reason_false: &'static str,
}

/// The CPU manager's checkpoint holds what the kubelet does not, or cannot be read by it.
pub const CPU_MANAGER_STATE_STALE: NodeCondition = NodeCondition {
    type_: "CPUManagerStateStale",
    reason_true: "CPUManagerStateStale",
    reason_false: "CPUManagerStateConsistent",
};

/// Spark executors outlive their driver on the node.
pub const SPARK_EXECUTOR_ORPHANS: NodeCondition = NodeCondition {
    type_: "SparkExecutorOrphans",
    reason_true: "SparkExecutorOrphans",
    reason_false: "NoSparkExecutorOrphans",
};

/// The node conditions of the catalogue, each once, in catalogue order.
pub fn conditions() -> Vec<NodeCondition> {
    let mut out: Vec<NodeCondition> = vec![];
    for c in ALL.iter().filter_map(|r| r.condition) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// A gauge that one rule's findings set.
#[derive(Debug, Clone, Copy)]
pub struct RuleGauge {
    /// The metric's name without the `nodemedic_` prefix.
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Its value from the rule's findings of one judgement (those a rule that could not judge
    /// keeps included).
    pub value: fn(&[&Finding]) -> u64,
}

/// A [`RuleGauge::value`]: how many findings.
pub fn count_findings(findings: &[&Finding]) -> u64 {
    findings.len() as u64
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
        needs: Needs {
            all: &[One(Checkpoint), One(MemoryState), One(DeviceState), One(DraState)],
            about: &[Checkpoint, MemoryState, DeviceState, DraState],
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
        check: checkpoint_unreadable::check,
        condition: Some(CPU_MANAGER_STATE_STALE),
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: checkpoint_invalid_state::ID,
        title: "The CPU manager checkpoint breaks a static-policy rule",
        severity: Severity::Critical,
        looks_at: "checkpoint, online CPUs, kubelet config",
        fires_when: "a static-policy rule of docs/kubelet.md (\"Why a kubelet refuses to start\") is broken, or the configured policy differs from the file's",
        event_reason: "CPUManagerInvalidState",
        needs: Needs {
            all: &[One(Checkpoint), One(Cpus), One(KubeletConfig)],
            about: &[Checkpoint],
            partial: &[KubeletConfig],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[Comparison {
            what: "`cpu_manager_state` against the static policy's start-up checks (`validateState`: an empty shared pool only for an empty state, every reserved CPU in the shared pool, no entry overlapping it, the online CPUs exactly) and the configured policy against the file's",
            from: "1.23 as established: a real 1.23.8 kubelet refuses these files with the same reasons, and the checks are those of current upstream `policy_static.go`",
            older: "judged the same; whether a kubelet before 1.23 refuses exactly the same files is not established",
            unknown: "judged the same; the version is not used",
        }]),
        check: checkpoint_invalid_state::check,
        condition: Some(CPU_MANAGER_STATE_STALE),
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: stale_cpu_assignment::ID,
        title: "Exclusive CPUs are held for a container that no longer runs here",
        severity: Severity::Critical,
        looks_at: "checkpoint, pods, cgroups",
        fires_when: "an entry names a pod UID or container that is not alive on this node",
        event_reason: "StaleCPUAssignment",
        needs: Needs {
            all: &[One(Checkpoint), Need::LIVENESS],
            about: &[Checkpoint],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[
            Comparison {
                what: "V2 and V3 entries (pod UID, container name) of `cpu_manager_state` against the live pods",
                from: "1.18 (V2 entries)",
                older: "a 1.8 to 1.17 file has V1 entries, keyed by container ID: alive when the ID is a current container of a live pod (pod list) or a cgroup leaf with processes",
                unknown: "the file's layout says which entries these are; the version is not used",
            },
            Comparison {
                what: "the remedy \"restart the kubelet\" (its first reconcile drops the entries of containers that are not active: `removeStaleState`)",
                from: "1.18",
                older: "not offered for V1 entries, which a kubelet from 1.18 cannot migrate once their container is gone: `repair cpu-state` instead",
                unknown: "chosen by the entries' layout (only kubelets from 1.18 write V2 and V3), not by the version",
            },
            Comparison::PODRESOURCES_LIVENESS,
        ]),
        check: stale_cpu_assignment::check,
        condition: Some(CPU_MANAGER_STATE_STALE),
        gauge: None,
        next_judgement: Some(crate::facts::grace_turn),
    },
    RuleInfo {
        id: cross_pod_cpu_overlap::ID,
        title: "Two pods hold the same exclusive CPU",
        severity: Severity::Critical,
        looks_at: "checkpoint",
        fires_when: "two different pods hold the same exclusive CPU",
        event_reason: "CrossPodCPUOverlap",
        needs: Needs {
            all: &[One(Checkpoint)],
            about: &[Checkpoint],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[Comparison {
            what: "the exclusive CPUs of different pods in `cpu_manager_state`",
            from: "1.18 (V2 entries name the pod UID)",
            older: "V1 entries (1.8 to 1.17) name a container ID and are tied to their pod through the pod list or the cgroup tree",
            unknown: "the file's layout decides; the version is not used",
        }]),
        check: cross_pod_cpu_overlap::check,
        condition: Some(CPU_MANAGER_STATE_STALE),
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: cpuset_drift::ID,
        title: "A container's cgroup cpuset differs from the checkpoint",
        severity: Severity::Warning,
        looks_at: "checkpoint, cgroups",
        fires_when: "a running container's cgroup cpuset differs from its checkpoint entry (exclusive containers at once; shared-pool containers once the checkpoint is older than the reconcile period)",
        event_reason: "CPUSetDrift",
        needs: Needs {
            all: &[One(Checkpoint), One(Cgroups)],
            about: &[Checkpoint],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[Comparison {
            what: "a running container's cgroup cpuset against its entry in `cpu_manager_state` (or the shared pool)",
            from: "1.18 (V2 entries, tied to cgroup leaves through the pod list's container IDs)",
            older: "V1 entries (1.8 to 1.17) are tied to their cgroup leaves directly by container ID, and are the only ones judged without a pod list",
            unknown: "the file's layout decides; the version is not used",
        }]),
        check: cpuset_drift::check,
        condition: None,
        gauge: None,
        next_judgement: Some(crate::facts::grace_turn),
    },
    RuleInfo {
        id: kubelet_state_divergence::ID,
        title: "The kubelet's CPU, memory or device assignments in memory differ from its checkpoint files",
        severity: Severity::Critical,
        looks_at: "PodResources API, cpu_manager_state, memory_manager_state, kubelet_internal_checkpoint, online CPUs, kubelet config",
        fires_when: "a container the kubelet lists has other exclusive CPUs, memory blocks or devices in memory than in its checkpoint files, or the kubelet's allocatable CPUs differ from the online CPUs minus the reserved ones: the next kubelet restart moves containers, hands out what is in use, or fails",
        event_reason: "KubeletStateDivergence",
        needs: Needs {
            all: &[One(Podresources), One(Checkpoint), One(MemoryState), One(DeviceState)],
            about: &[Checkpoint, MemoryState, DeviceState],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[
            Comparison {
                what: "a container's exclusive CPUs in `List` (`cpu_ids`) against its entry in `cpu_manager_state`",
                from: "1.23 (#97415: a shared-pool container lists no CPUs); `cpu_ids` exist from 1.20",
                older: "1.20 to 1.22: compared, except a container listed on exactly `defaultCpuSet` without an entry, which is how those kubelets list a shared-pool container; before 1.20 `List` is not served and the rule is not applicable",
                unknown: "as with a 1.20 to 1.22 kubelet",
            },
            Comparison {
                what: "the allocatable CPUs (`GetAllocatableResources`) against the online CPUs minus the reserved ones",
                from: "1.26 (#112913)",
                older: "not compared: before, the answer is the CPUs that were unassigned when the kubelet started; a note says so",
                unknown: "not compared; a note says so",
            },
            Comparison {
                what: "a container's memory blocks in `List` against `memory_manager_state`",
                from: "1.21 (the memory manager)",
                older: "nothing is listed and nothing compared",
                unknown: "compared when the kubelet lists memory",
            },
            Comparison {
                what: "a container's devices in `List` against `kubelet_internal_checkpoint`",
                from: "1.20 (the `v1` service)",
                older: "`List` is not served (`Unimplemented`): the rule is not applicable",
                unknown: "compared whenever `List` answers",
            },
        ]),
        check: kubelet_state_divergence::check,
        condition: Some(CPU_MANAGER_STATE_STALE),
        gauge: None,
        next_judgement: Some(crate::facts::grace_turn),
    },
    RuleInfo {
        id: exclusive_cpu_shortage::ID,
        title: "Guaranteed pods cannot get the exclusive CPUs they need",
        severity: Severity::Critical,
        looks_at: "checkpoint, pods",
        fires_when: "pods fail with \"not enough cpus available\" or the free exclusive CPUs cannot fit pending Guaranteed pods",
        event_reason: "ExclusiveCPUShortage",
        needs: Needs {
            all: &[One(Checkpoint), One(Cpus), One(Pods)],
            about: &[Checkpoint],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[
            Comparison {
                what: "pods refused with `not enough cpus available to satisfy request` (or `UnexpectedAdmissionError` naming CPUs)",
                from: "every version nodemedic supports: the static policy's message starts the same in old and current kubelet sources (newer ones append `: requested=N, available=M`, matched too)",
                older: "matched the same; the version is not used",
                unknown: "matched the same; the version is not used",
            },
            Comparison {
                what: "the free exclusive CPUs of `cpu_manager_state` against pending Guaranteed pods",
                from: "1.8 (every layout is read)",
                older: "no kubelet before 1.8 writes the file: nothing to judge",
                unknown: "the version is not used",
            },
            Comparison {
                what: "per NUMA node under the topology manager policy `single-numa-node` or `restricted`, the reserved CPUs taken from the kubelet's allocatable CPUs",
                from: "1.26 (#112913)",
                older: "the reserved CPUs come from the kubelet's configuration",
                unknown: "from the kubelet's configuration, as with an older kubelet",
            },
        ]),
        check: exclusive_cpu_shortage::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: stale_memory_assignment::ID,
        title: "The memory manager holds NUMA memory for a container that no longer runs",
        severity: Severity::Warning,
        looks_at: "memory_manager_state, pods on the node (or the kubelet's PodResources list, or cgroups)",
        fires_when: "an entry of memory_manager_state belongs to a pod that is not alive on the node (after the reconcile grace)",
        event_reason: "StaleMemoryAssignment",
        needs: Needs {
            all: &[One(MemoryState), Need::LIVENESS],
            about: &[MemoryState],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[
            Comparison {
                what: "entries of `memory_manager_state` (pod UID, container) against the live pods",
                from: "1.21, the first memory manager (on by default from 1.22)",
                older: "no kubelet before 1.21 writes the file: nothing to judge",
                unknown: "every layout is read; the version is not used",
            },
            Comparison::PODRESOURCES_LIVENESS,
        ]),
        check: stale_memory_assignment::check,
        condition: None,
        gauge: None,
        next_judgement: Some(crate::facts::grace_turn),
    },
    RuleInfo {
        id: stale_device_assignment::ID,
        title: "The device manager holds devices for a container that no longer runs",
        severity: Severity::Warning,
        looks_at: "device-plugins/kubelet_internal_checkpoint, pods on the node (or the kubelet's PodResources list, or cgroups)",
        fires_when: "a PodDeviceEntries entry with devices belongs to a pod that is not alive on the node (after the reconcile grace)",
        event_reason: "StaleDeviceAssignment",
        needs: Needs {
            all: &[One(DeviceState), Need::LIVENESS],
            about: &[DeviceState],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[
            Comparison {
                what: "the `PodDeviceEntries` of `kubelet_internal_checkpoint` with devices against the live pods, and the devices the kubelet's PodResources `List` still gives",
                from: "1.20 (the V2 file; `List` of the `v1` service)",
                older: "a V1 file is read the same, its devices without a NUMA node; without `List` the finding does not say whether the kubelet still holds the devices",
                unknown: "the version is not used",
            },
            Comparison::PODRESOURCES_LIVENESS,
        ]),
        check: stale_device_assignment::check,
        condition: None,
        gauge: None,
        next_judgement: Some(crate::facts::grace_turn),
    },
    RuleInfo {
        id: stale_dra_claim::ID,
        title: "A ResourceClaim stays prepared on the node after its pods are gone",
        severity: Severity::Warning,
        looks_at: "dra_manager_state, configured DRA driver checkpoints, pods on the node",
        fires_when: "every pod a prepared claim was prepared for is gone, or a driver keeps a claim the kubelet's file no longer holds",
        event_reason: "StaleDRAClaim",
        needs: Needs {
            all: &[One(DraState), One(DraDrivers), Need::LIVENESS],
            about: &[DraState, DraDrivers],
            partial: &[DraDrivers],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[
            Comparison {
                what: "the claims of `dra_manager_state` against the live pods they were prepared for",
                from: "1.27, the first DRA checkpoint (the 1.31 envelope from #126303)",
                older: "no kubelet before 1.27 writes the file (1.26 keeps its claims in memory only): nothing to judge",
                unknown: "every layout is read; the version is not used",
            },
            Comparison::PODRESOURCES_LIVENESS,
        ]),
        check: stale_dra_claim::check,
        condition: None,
        gauge: None,
        next_judgement: Some(crate::facts::grace_turn),
    },
    RuleInfo {
        id: device_admission_failure::ID,
        title: "Pods are refused devices, NUMA locality or DRA devices that stale entries hold",
        severity: Severity::Critical,
        looks_at: "refused pods, Events of pods waiting to start, the stale memory, device and DRA entries",
        fires_when: "UnexpectedAdmissionError (devices unavailable), TopologyAffinityError or FailedPrepareDynamicResources (already allocated to a different claim) while stale entries hold what was refused",
        event_reason: "DeviceAdmissionFailure",
        needs: Needs {
            all: &[One(Pods), One(MemoryState), One(DeviceState), One(DraState)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[Comparison {
            what: "refused pods (`UnexpectedAdmissionError` with `requested number of devices unavailable`, `TopologyAffinityError`) and `FailedPrepareDynamicResources` Events (`already allocated to different claim`) against the stale memory, device and DRA entries",
            from: "each manager's first file: memory 1.21, devices (V1 before 1.20, V2 from 1.20), DRA 1.27",
            older: "a manager the kubelet does not have writes no file, and its part finds nothing",
            unknown: "the version is not used: the refusals are matched as current kubelets word them; whether older kubelets word them the same is not established",
        }]),
        check: device_admission_failure::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: orphaned_executor::ID,
        title: "A Spark executor outlives its driver",
        severity: Severity::Warning,
        looks_at: "pods on the node, their drivers, local dirs, checkpoint",
        fires_when: "a Spark executor (running, or finished but keeping local data) whose driver pod is gone, replaced (other UID, another application or operator run) or finished for longer than the grace period (critical when it still runs on exclusive CPUs)",
        event_reason: "OrphanedExecutor",
        needs: Needs {
            all: &[One(Pods)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it judges Spark pods and their drivers through the API (or a pod list), whose fields mean the same whichever kubelet runs; the exclusive CPUs that make a finding critical are read from `cpu_manager_state` in whichever layout it has",
        ),
        check: orphaned_executor::check,
        condition: Some(SPARK_EXECUTOR_ORPHANS),
        gauge: Some(RuleGauge {
            name: "orphaned_executors",
            help: "Spark executor pods on this node whose driver is gone, replaced or long finished.",
            value: count_findings,
        }),
        next_judgement: None,
    },
    RuleInfo {
        id: executor_without_owner::ID,
        title: "Spark executors have no owner reference to their driver",
        severity: Severity::Warning,
        looks_at: "executor pods, their drivers",
        fires_when: "running executors have no owner reference of kind Pod, so they will be left behind when their driver dies (info when the driver runs outside the cluster)",
        event_reason: "ExecutorWithoutOwner",
        needs: Needs {
            all: &[One(Pods)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it reads the executors' owner references and labels through the API (or a pod list), nothing of the kubelet",
        ),
        check: executor_without_owner::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: admission_rejection::ID,
        title: "The kubelet rejected pods bound to this node",
        severity: Severity::Warning,
        looks_at: "pods on the node",
        fires_when: "pods failed kubelet admission (OutOfcpu, OutOfmemory, OutOfpods, UnexpectedAdmissionError, a predicate name, ...; from the live API only within the rejection window)",
        event_reason: "AdmissionRejection",
        needs: Needs {
            all: &[One(Pods)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it reads the pods' `status.reason` and `status.message`; the kubelet's `OutOf<resource>` reasons and `Node didn't have enough resource` messages are in every kubelet source read, from the oldest admission handler on, and `UnexpectedAdmissionError` in every source read that checks device plugin resources at admission",
        ),
        check: admission_rejection::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: scheduler_conflict::ID,
        title: "Two schedulers overcommit this node",
        severity: Severity::Warning,
        looks_at: "rejections, schedulerName",
        fires_when: "capacity rejections (OutOf*, NodePorts) on a node where two or more schedulers bound pods in the window",
        event_reason: "SchedulerConflict",
        needs: Needs {
            all: &[One(Pods)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it reads rejection reasons (`OutOf<resource>`, in every kubelet source read; `NodePorts`, `PodFitsHostPorts` before 1.19, both matched) and `spec.schedulerName` through the API",
        ),
        check: scheduler_conflict::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: duplicate_driver::ID,
        title: "Two drivers of one Spark application are alive",
        severity: Severity::Critical,
        looks_at: "driver pods",
        fires_when: "two or more unfinished drivers of one application (same spark-app-selector, or same operator app and submission id), one of them on this node",
        event_reason: "DuplicateDriver",
        needs: Needs {
            all: &[One(Pods)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it reads driver pods through the API (or a pod list), nothing of the kubelet",
        ),
        check: duplicate_driver::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: driver_blocked_by_partition::ID,
        title: "A replacement Spark driver waits for a volume held on a node cut off from the API server",
        severity: Severity::Critical,
        looks_at: "driver pods bound here, their Events, other drivers of the app, their nodes",
        fires_when: "a driver here stays Pending with a FailedAttachVolume (Multi-Attach) or FailedMount (mount timeout) Warning while another unfinished driver of its application (same spark-app-selector, operator run or Job) is on a node whose Ready is Unknown or False",
        event_reason: "DriverBlockedByPartition",
        needs: Needs {
            all: &[One(Pods)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it reads driver pods, their Events and their nodes' `Ready` condition through the API; the Events' reasons (`FailedMount`, `FailedAttachVolume` with Multi-Attach) are matched as current releases write them, which is not established for old ones",
        ),
        check: driver_blocked_by_partition::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: half_submitted_driver::ID,
        title: "A Spark driver that spark-submit gave up on waits forever without its ConfigMap",
        severity: Severity::Warning,
        looks_at: "driver pods bound here that wait to start, their kubelet pod directory, their Events, newer drivers of the submission, dry-run pod creates",
        fires_when: "a driver has waited half_submitted_grace_seconds (since bound) and its spark-conf-volume-driver ConfigMap volume never appeared under its kubelet directory, or a newer driver of the same submission (spark-app-selector, or spark-app-name within an hour) started; critical after half_submitted_critical_seconds",
        event_reason: "HalfSubmittedDriver",
        needs: Needs {
            all: &[One(Pods)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it reads driver pods and their Events through the API, and the kubelet's pod volume directories (`pods/<uid>/volumes/<plugin>/<volume>`), laid out the same in old and current kubelet sources",
        ),
        check: half_submitted_driver::check,
        condition: None,
        gauge: Some(RuleGauge {
            name: "half_submitted_drivers",
            help: "Spark driver pods on this node that spark-submit gave up on and that wait to start without their \
                   ConfigMap, or after a newer driver of their submission started (half-submitted-driver findings).",
            value: count_findings,
        }),
        next_judgement: Some(half_submitted_driver::next_judgement),
    },
    RuleInfo {
        id: orphaned_local_dir::ID,
        title: "Spark scratch data that nothing will read again",
        severity: Severity::Warning,
        looks_at: "Spark local dirs on the node, pods, cgroups",
        fires_when: "blockmgr/spark dirs idle for the minimum age whose pod has finished or is gone, or under a hostPath root no running pod could have written them for (info when they hold no bytes)",
        event_reason: "OrphanedLocalDir",
        needs: Needs {
            all: &[One(LocalDirs), Need::LIVENESS],
            about: &[LocalDirs],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::Comparisons(&[
            Comparison {
                what: "Spark local dirs in emptyDir volumes (`pods/<uid>/volumes/kubernetes.io~empty-dir/`) against the live pods",
                from: "every version nodemedic supports: the kubelet's pod volume directories are laid out the same in old and current kubelet sources",
                older: "judged the same; the version is not used",
                unknown: "judged the same; the version is not used",
            },
            Comparison::PODRESOURCES_LIVENESS,
        ]),
        check: orphaned_local_dir::check,
        condition: None,
        gauge: Some(RuleGauge {
            name: "orphaned_local_dir_bytes",
            help: "Bytes in orphaned Spark scratch directories on this node (the orphaned-local-dir findings' sum).",
            value: orphaned_local_dir::bytes,
        }),
        next_judgement: None,
    },
    RuleInfo {
        id: slow_api::ID,
        title: "Reading from the API server is slow from this node",
        severity: Severity::Warning,
        looks_at: "API probes (get, list)",
        fires_when: "the median time of a read probe in the window is at or above slow_api_warning_seconds (critical at slow_api_critical_seconds); the slowest request's phases say whether DNS, connect, TLS or the API server's answer is slow",
        event_reason: "SlowAPI",
        needs: Needs {
            all: &[One(Api)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it times the agent's own reads from the API server, in which the kubelet takes no part",
        ),
        check: slow_api::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: slow_pod_admission::ID,
        title: "Creating a pod nears or passes the Spark client timeout",
        severity: Severity::Critical,
        looks_at: "dry-run pod creates, webhook configurations, API server metrics, Spark driver configurations",
        fires_when: "the median dry-run pod create in the window takes half the Spark client timeout or more (warning; also when the slowest passes it) or the whole timeout (critical); names the webhooks that match pod CREATE and the slowest one when measurable",
        event_reason: "SlowPodAdmission",
        needs: Needs {
            all: &[One(Api)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it times dry-run pod creates and reads webhook configurations and API server metrics, in which the kubelet takes no part",
        ),
        check: slow_pod_admission::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: apiserver_unreachable::ID,
        title: "This node cannot reach the API server",
        severity: Severity::Critical,
        looks_at: "API probes, driver pods",
        fires_when: "no API probe succeeded for apiserver_unreachable_seconds; lists the Spark drivers on this node that may end up running twice",
        event_reason: "APIServerUnreachable",
        needs: Needs {
            all: &[One(Api)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it counts the agent's own answered requests to the API server, in which the kubelet takes no part",
        ),
        check: apiserver_unreachable::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
    RuleInfo {
        id: webhook_blocks_dry_run::ID,
        title: "An admission webhook makes dry-run pod creates fail",
        severity: Severity::Warning,
        looks_at: "dry-run pod creates, webhook configurations",
        fires_when: "dry-run pod creates fail with 400 `admission webhook \"<name>\" does not support dry run`, or a webhook matching the probe pod has sideEffects Unknown or Some: pod admission latency cannot be measured",
        event_reason: "WebhookBlocksDryRun",
        needs: Needs {
            all: &[One(Api)],
            about: &[],
            partial: &[],
        },
        kubelet_versions: KubeletVersions::DoNotMatter(
            "it reads dry-run pod creates and webhook configurations from the API server, in which the kubelet takes no part",
        ),
        check: webhook_blocks_dry_run::check,
        condition: None,
        gauge: None,
        next_judgement: None,
    },
];

/// The rule with `id`.
pub fn by_id(id: &str) -> Option<&'static RuleInfo> {
    ALL.iter().find(|r| r.id == id)
}

/// Runs every enabled rule that can judge ([`crate::coverage`]): its findings worst first, then
/// by rule and subject, and every rule's coverage. A rule that could not judge does not run
/// (unless it lacks only what it can do without in part: see [`Needs::partial`]). `facts` are
/// those of `snapshot` under `settings` ([`crate::facts::derive`]).
pub fn judge(snapshot: &NodeSnapshot, facts: &Facts, settings: &Settings) -> Judgement {
    let mut coverage = std::collections::BTreeMap::new();
    let mut findings = Vec::new();
    for r in ALL {
        let covered = if settings.enabled(r.id) {
            crate::coverage::coverage(snapshot, &r.needs)
        } else {
            Coverage::Disabled
        };
        if covered.runs(&r.needs) {
            let mut found = (r.check)(snapshot, facts, settings);
            if let Some(severity) = settings.severity_overrides.get(r.id) {
                for f in &mut found {
                    f.severity = *severity;
                }
            }
            findings.extend(found);
        }
        coverage.insert(r.id, covered);
    }
    findings.sort_by_key(Finding::sort_key);
    Judgement { findings, coverage }
}

/// The findings of [`judge`], the facts derived here: for callers that need nothing else of
/// the snapshot's facts.
pub fn evaluate(snapshot: &NodeSnapshot, settings: &Settings) -> Vec<Finding> {
    judge(snapshot, &crate::facts::derive(snapshot, settings), settings).findings
}

#[cfg(test)]
mod docs_map;
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
