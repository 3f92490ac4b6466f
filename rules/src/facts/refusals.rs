//! What the kubelet does at its next start with each of its checkpoints that it cannot restore
//! as they are (docs/kubelet.md, "Why a kubelet refuses to start").
//!
//! Two kinds of refusal, one rule each: the kubelet cannot read the file at all (bad JSON, a
//! checksum no layout of its manager produces, a value it cannot use: `checkpoint-unreadable`,
//! for the CPU, memory, device and DRA managers' files), or it reads a CPU manager state that
//! its policy refuses (the configured policy is not the file's, or a static-policy check of
//! `validateState` fails: `checkpoint-invalid-state`). What follows depends on the manager: the
//! CPU, memory and DRA managers fail the kubelet's start; the device manager logs the error and
//! starts with no record of which container holds which device (`Start` in
//! `pkg/kubelet/cm/devicemanager/manager.go`: "Continue after failing to read checkpoint file").
//!
//! `stale-cpu-assignment` and `exclusive-cpu-shortage` read the same judgement to know whether
//! a kubelet restart is safe, and `checkpoint verify` makes it for one file, so a file is
//! judged the same way wherever it is judged.

use std::fmt;

use crate::CpuSet;
use crate::checkpoint::{CheckpointError, Verification};
use crate::kubelet_version::{KubeletVersion, newer_than_known_layouts};
use crate::managers::KubeletCheckpoint;
use crate::managers::devices::DeviceCheckpoint;
use crate::managers::dra::DraCheckpoint;
use crate::managers::memory::MemoryCheckpoint;
use crate::snapshot::{ManagerFile, NodeSnapshot, Observed};
use crate::validate::{CPU_MANAGER_POLICIES, ReservedCpusError, StateProblem, validate_static_state};

/// The kubelet resource manager a checkpoint belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    /// `cpu_manager_state`.
    Cpu,
    /// `memory_manager_state`.
    Memory,
    /// `device-plugins/kubelet_internal_checkpoint`.
    Devices,
    /// `dra_manager_state`.
    Dra,
}

impl Manager {
    /// The manager's name for people (`memory manager`), as the findings' evidence says it.
    pub fn name(self) -> &'static str {
        match self {
            Manager::Cpu => "CPU manager",
            Manager::Memory => MemoryCheckpoint::MANAGER,
            Manager::Devices => DeviceCheckpoint::MANAGER,
            Manager::Dra => DraCheckpoint::MANAGER,
        }
    }
}

/// What the kubelet does at its next start with a checkpoint it cannot restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtStart {
    /// It refuses to start (the CPU, memory and DRA managers).
    Refuses,
    /// It starts without the file: the device manager forgets which container holds which
    /// device, so devices in use can be allocated to new pods.
    StartsWithout,
    /// Not known: the CPU manager checkpoint's checksum matches no layout nodemedic knows, but
    /// the kubelet is newer than those ([`crate::kubelet_version::NEWEST_KNOWN_LAYOUTS`]) and
    /// may write a layout nodemedic cannot check. The kubelet's own verdict comes at its next
    /// start.
    Unsure {
        /// The running kubelet's version.
        kubelet: KubeletVersion,
    },
}

/// Why the reserved CPUs the static policy's checks need are not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservedUnknown {
    /// The kubelet's configuration was not found (the path looked at last).
    ConfigMissing { path: String },
    /// The kubelet's configuration could not be read.
    ConfigFailed { reason: String },
    /// The kubelet's configuration was not read, by choice (`checkpoint verify`).
    ConfigNotRead { reason: String },
    /// The configuration was read, but its reserved CPUs cannot be computed from it.
    Uncomputable(ReservedCpusError),
}

impl fmt::Display for ReservedUnknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unknown = "its reserved CPUs and policy options are unknown";
        match self {
            ReservedUnknown::ConfigMissing { path } => {
                write!(
                    f,
                    "the kubelet's configuration was not found (nor at {path}): {unknown}"
                )
            }
            ReservedUnknown::ConfigFailed { reason } => {
                write!(f, "the kubelet's configuration could not be read ({reason}): {unknown}")
            }
            ReservedUnknown::ConfigNotRead { reason } => write!(
                f,
                "the kubelet's configuration was not read (not applicable: {reason}): {unknown}"
            ),
            ReservedUnknown::Uncomputable(e) => write!(f, "the reserved CPUs cannot be computed ({e})"),
        }
    }
}

/// What the static policy's checks were run against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChecked {
    /// The file's `defaultCpuSet`.
    pub default_cpus: CpuSet,
    /// The online CPUs.
    pub online: CpuSet,
    /// The reserved CPUs of the kubelet's configuration; `None` when they are not known, and
    /// then only the checks that fail whatever is reserved were judged.
    pub reserved: Option<CpuSet>,
    /// Why the reserved CPUs are not known.
    pub reserved_unknown: Option<ReservedUnknown>,
    /// The `strict-cpu-reservation` policy option, when the configuration is known.
    pub strict: Option<bool>,
}

/// Why the kubelet does not restore a checkpoint as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The file cannot be decoded: empty, not JSON, wrong types, larger than any checkpoint.
    Unreadable(CheckpointError),
    /// The stored checksum matches no layout of the file's manager.
    ChecksumMismatch {
        stored: u64,
        /// What each layout nodemedic knows would hash the file to, by layout and type name.
        computed: Vec<(String, u32)>,
        /// The file's layout, for the CPU manager checkpoint (`V2`).
        layout: Option<&'static str>,
    },
    /// The file decodes and its checksum matches, but a value is one the kubelet cannot use (a
    /// bad cpuset, a bad NUMA node id).
    BadValue(CheckpointError),
    /// The kubelet is configured with another CPU manager policy than the file's
    /// (`state_checkpoint.go` `restoreState`).
    PolicyMismatch { configured: String, checkpoint: String },
    /// The file names a CPU manager policy no kubelet runs ([`CPU_MANAGER_POLICIES`]), so it is
    /// refused whatever the (unknown) configuration.
    UnknownPolicy { checkpoint: String },
    /// A static-policy check of `validateState` fails.
    InvalidState {
        problem: StateProblem,
        checked: StateChecked,
    },
}

impl Problem {
    /// What is wrong, in one line: the kubelet's words for a policy or state problem, the
    /// decoder's error, or the kubelet's `checkpoint is corrupted` for a checksum.
    pub fn reason(&self) -> String {
        match self {
            Problem::Unreadable(e) | Problem::BadValue(e) => e.to_string(),
            Problem::ChecksumMismatch { .. } => "checkpoint is corrupted".to_string(),
            Problem::PolicyMismatch { configured, checkpoint } => {
                format!("configured policy \"{configured}\" differs from state checkpoint policy \"{checkpoint}\"")
            }
            Problem::UnknownPolicy { checkpoint } => format!(
                "configured policy \"<{}>\" differs from state checkpoint policy \"{checkpoint}\"",
                CPU_MANAGER_POLICIES.join("|")
            ),
            Problem::InvalidState { problem, .. } => problem.kubelet_message(),
        }
    }
}

/// A kubelet checkpoint the kubelet will not restore as it is at its next start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRefusal {
    /// Whose file it is.
    pub manager: Manager,
    /// The file, as the host sees it.
    pub path: String,
    /// Why the kubelet does not restore it.
    pub problem: Problem,
    /// What the kubelet does about it.
    pub at_start: AtStart,
}

impl CheckpointRefusal {
    /// Whether the kubelet cannot read the file at all (`checkpoint-unreadable`), rather than
    /// reads a state its CPU manager policy refuses (`checkpoint-invalid-state`).
    pub fn unreadable(&self) -> bool {
        matches!(
            self.problem,
            Problem::Unreadable(_) | Problem::ChecksumMismatch { .. } | Problem::BadValue(_)
        )
    }

    /// Whether the kubelet is known to refuse to start on it.
    pub fn refuses_start(&self) -> bool {
        self.at_start == AtStart::Refuses
    }

    /// The error the kubelet logs for it, where nodemedic knows its words: a CPU manager
    /// checksum it refuses (the whole line of `NewCheckpointState` in
    /// `pkg/kubelet/cm/cpumanager/state/state_checkpoint.go`), a policy or a state problem (the
    /// reason it quotes). Go's decoder errors are not imitated.
    pub fn kubelet_error(&self) -> Option<String> {
        match (&self.problem, &self.at_start) {
            (Problem::ChecksumMismatch { .. }, AtStart::Refuses) if self.manager == Manager::Cpu => Some(format!(
                "could not restore state from checkpoint: {}, please drain this node and delete the CPU manager \
                 checkpoint file \"{}\" before restarting Kubelet",
                self.problem.reason(),
                self.path
            )),
            (Problem::PolicyMismatch { .. } | Problem::UnknownPolicy { .. } | Problem::InvalidState { .. }, _) => {
                Some(self.problem.reason())
            }
            _ => None,
        }
    }

    /// What the kubelet would say ([`Self::kubelet_error`]), else what is wrong
    /// ([`Problem::reason`]).
    pub fn message(&self) -> String {
        self.kubelet_error().unwrap_or_else(|| self.problem.reason())
    }
}

/// Every kubelet checkpoint of `snap` the kubelet will not restore as it is at its next start,
/// in this order: the CPU, memory, device and DRA managers' files it cannot read, then the CPU
/// manager states its policy refuses (a file may be both: its state is checked whatever its
/// checksum). Files that are absent or not read are not judged.
pub fn checkpoint_refusals(snap: &NodeSnapshot) -> Vec<CheckpointRefusal> {
    crate::facts::count("checkpoint_refusals");
    let mut refusals: Vec<CheckpointRefusal> = cpu_unreadable(snap).into_iter().collect();
    refusals.extend(manager_unreadable(Manager::Memory, &snap.host.managers.memory));
    refusals.extend(manager_unreadable(Manager::Devices, &snap.host.managers.devices));
    refusals.extend(manager_unreadable(Manager::Dra, &snap.host.managers.dra));
    refusals.extend(cpu_invalid_state(snap));
    refusals
}

fn cpu_unreadable(snap: &NodeSnapshot) -> Option<CheckpointRefusal> {
    let Observed::Ok(file) = &snap.host.checkpoint else {
        return None;
    };
    let refusal = |problem: Problem, at_start: AtStart| CheckpointRefusal {
        manager: Manager::Cpu,
        path: file.path.clone(),
        problem,
        at_start,
    };
    let cp = match &file.content {
        Err(e) => return Some(refusal(Problem::Unreadable(e.clone()), AtStart::Refuses)),
        Ok(cp) => cp,
    };
    if let Verification::Mismatch { stored, computed } = cp.verify() {
        let at_start = match newer_than_known_layouts(snap) {
            Some(v) => AtStart::Unsure { kubelet: v.clone() },
            None => AtStart::Refuses,
        };
        let problem = Problem::ChecksumMismatch {
            stored,
            computed,
            layout: Some(cp.layout()),
        };
        return Some(refusal(problem, at_start));
    }
    let e = file.state.as_ref().err()?;
    Some(refusal(Problem::BadValue(e.clone()), AtStart::Refuses))
}

fn manager_unreadable<C: KubeletCheckpoint>(
    manager: Manager,
    file: &Observed<ManagerFile<C>>,
) -> Option<CheckpointRefusal> {
    let Observed::Ok(file) = file else { return None };
    let at_start = if manager == Manager::Devices {
        AtStart::StartsWithout
    } else {
        AtStart::Refuses
    };
    let problem = match (&file.content, &file.verification, &file.state) {
        (Err(e), _, _) => Problem::Unreadable(e.clone()),
        (Ok(_), Some(Verification::Mismatch { stored, computed }), _) => Problem::ChecksumMismatch {
            stored: *stored,
            computed: computed.clone(),
            layout: None,
        },
        (Ok(_), Some(_), Err(e)) => Problem::BadValue(e.clone()),
        _ => return None,
    };
    Some(CheckpointRefusal {
        manager,
        path: file.path.clone(),
        problem,
        at_start,
    })
}

/// Whether `problem`, found with no reserved CPUs, breaks the kubelet's checks whatever its
/// reserved CPUs are: an empty default set or an assignment inside it always does; CPUs that
/// do not add up to the online ones do when `strict-cpu-reservation` is known to be off, or
/// when the state holds CPUs that are not online (with it on, the reserved CPUs are rightly
/// missing from the state).
fn holds_whatever_is_reserved(problem: &StateProblem, online: &CpuSet, strict: Option<bool>) -> bool {
    match problem {
        StateProblem::EmptyDefault | StateProblem::OverlapsDefault { .. } => true,
        StateProblem::CpusMismatch { in_state, .. } => strict == Some(false) || !in_state.is_subset(online),
        StateProblem::ReservedNotInDefault { .. } | StateProblem::ReservedInDefault { .. } => false,
    }
}

fn cpu_invalid_state(snap: &NodeSnapshot) -> Vec<CheckpointRefusal> {
    let Observed::Ok(file) = &snap.host.checkpoint else {
        return vec![];
    };
    let Ok(state) = &file.state else { return vec![] };
    let refusal = |problem: Problem| CheckpointRefusal {
        manager: Manager::Cpu,
        path: file.path.clone(),
        problem,
        at_start: AtStart::Refuses,
    };
    if let Observed::Ok(kubelet) = &snap.host.kubelet {
        let configured = &kubelet.cpu_manager.policy;
        if *configured != state.policy_name {
            // The other checks are those of a policy this kubelet will not run.
            return vec![refusal(Problem::PolicyMismatch {
                configured: configured.clone(),
                checkpoint: state.policy_name.clone(),
            })];
        }
    } else if !CPU_MANAGER_POLICIES.contains(&state.policy_name.as_str()) {
        // Whatever the kubelet's configuration, its policy is one of these: a file written by
        // no policy of theirs (`{}`, a pods list) is refused at every start.
        return vec![refusal(Problem::UnknownPolicy {
            checkpoint: state.policy_name.clone(),
        })];
    }
    if state.policy_name != "static" {
        return vec![];
    }
    let Observed::Ok(topology) = &snap.host.cpus else {
        return vec![];
    };
    let online = topology.all();
    // The reserved CPUs and `strict-cpu-reservation` are the kubelet's configuration's. When
    // they are unknown, the checks that depend on them are not judged (never against "no
    // reserved CPUs"), and the judgement says why.
    let (reserved, strict, reserved_unknown) = match &snap.host.kubelet {
        Observed::Ok(k) => {
            let strict = k.cpu_manager.strict_cpu_reservation();
            match k.cpu_manager.reserved_cpus(topology) {
                Ok(r) => (Some(r), Some(strict), None),
                Err(e) => (None, Some(strict), Some(ReservedUnknown::Uncomputable(e))),
            }
        }
        Observed::Missing { path } => (None, None, Some(ReservedUnknown::ConfigMissing { path: path.clone() })),
        Observed::Error { reason } => (
            None,
            None,
            Some(ReservedUnknown::ConfigFailed { reason: reason.clone() }),
        ),
        Observed::NotApplicable { reason } => (
            None,
            None,
            Some(ReservedUnknown::ConfigNotRead { reason: reason.clone() }),
        ),
    };
    let none = CpuSet::new();
    let problems = validate_static_state(
        state,
        &online,
        reserved.as_ref().unwrap_or(&none),
        strict.unwrap_or(false),
    );
    let checked = StateChecked {
        default_cpus: state.default_cpus.clone(),
        online: online.clone(),
        reserved: reserved.clone(),
        reserved_unknown,
        strict,
    };
    problems
        .into_iter()
        .filter(|p| reserved.is_some() || holds_whatever_is_reserved(p, &online, strict))
        .map(|problem| {
            refusal(Problem::InvalidState {
                problem,
                checked: checked.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{Finding, Severity};
    use crate::managers::memory::MemoryCheckpoint;
    use crate::rules::testkit::SnapshotBuilder;
    use crate::rules::{checkpoint_invalid_state, checkpoint_unreadable};
    use crate::settings::Settings;

    /// A problem's kind, as the table names it: `checkpoint-invalid-state`'s `problem` codes,
    /// and three words for the files the kubelet cannot read.
    fn kind(p: &Problem) -> &'static str {
        match p {
            Problem::Unreadable(_) => "unreadable",
            Problem::ChecksumMismatch { .. } => "checksum-mismatch",
            Problem::BadValue(_) => "bad-value",
            Problem::PolicyMismatch { .. } => "policy-mismatch",
            Problem::UnknownPolicy { .. } => "unknown-policy",
            Problem::InvalidState { problem, .. } => problem.code(),
        }
    }

    fn at_start(a: &AtStart) -> &'static str {
        match a {
            AtStart::Refuses => "refuses",
            AtStart::StartsWithout => "starts-without",
            AtStart::Unsure { .. } => "unsure",
        }
    }

    /// `finding` says exactly `refusal`: its rule, file, manager, severity, messages and what
    /// the problem carries.
    fn says(r: &CheckpointRefusal, f: &Finding, case: &str) {
        let text = |key: &str| f.evidence.get(key).and_then(|v| v.as_str()).map(str::to_string);
        let rule = if r.unreadable() {
            checkpoint_unreadable::ID
        } else {
            checkpoint_invalid_state::ID
        };
        assert_eq!(f.rule, rule, "{case}");
        assert_eq!(text("path").as_deref(), Some(r.path.as_str()), "{case}");
        assert!(f.summary.contains(&r.path), "{case}: {}", f.summary);
        assert_eq!(text("kubelet_error"), r.kubelet_error(), "{case}");
        let severity = if r.refuses_start() {
            Severity::Critical
        } else {
            Severity::Warning
        };
        assert_eq!(f.severity, severity, "{case}");
        if r.unreadable() {
            assert_eq!(text("error"), Some(r.problem.reason()), "{case}");
            let manager = (r.manager != Manager::Cpu).then(|| r.manager.name().to_string());
            assert_eq!(text("manager"), manager, "{case}");
        } else {
            assert_eq!(text("problem").as_deref(), Some(kind(&r.problem)), "{case}");
            assert_eq!(text("kubelet_error"), Some(r.problem.reason()), "{case}");
        }
        match &r.problem {
            Problem::ChecksumMismatch {
                stored,
                computed,
                layout,
            } => {
                assert_eq!(f.evidence["stored_checksum"], *stored, "{case}");
                for (name, sum) in computed {
                    assert_eq!(f.evidence["computed_checksums"][name], *sum, "{case}");
                }
                assert_eq!(text("layout").as_deref(), *layout, "{case}");
            }
            Problem::PolicyMismatch { configured, checkpoint } => {
                assert_eq!(text("configured_policy").as_ref(), Some(configured), "{case}");
                assert_eq!(text("checkpoint_policy").as_ref(), Some(checkpoint), "{case}");
            }
            Problem::UnknownPolicy { checkpoint } => {
                assert_eq!(text("checkpoint_policy").as_ref(), Some(checkpoint), "{case}");
            }
            Problem::InvalidState { checked, .. } => {
                assert_eq!(text("default_cpus"), Some(checked.default_cpus.human()), "{case}");
                assert_eq!(text("online_cpus"), Some(checked.online.human()), "{case}");
                let reserved = checked.reserved.as_ref().map_or("unknown".to_string(), CpuSet::human);
                assert_eq!(text("reserved_cpus"), Some(reserved), "{case}");
                let note = checked.reserved_unknown.as_ref().map(ToString::to_string);
                assert_eq!(text("reserved_cpus_note"), note, "{case}");
                let strict = f.evidence.get("strict_cpu_reservation").and_then(|v| v.as_bool());
                assert_eq!(strict, checked.strict, "{case}");
            }
            Problem::Unreadable(_) | Problem::BadValue(_) => {}
        }
    }

    fn newer_kubelet(mut snap: NodeSnapshot, version: &str) -> NodeSnapshot {
        snap.api.kubelet_version = Observed::Ok(crate::kubelet_version::VersionReading {
            version: KubeletVersion::parse(version).unwrap(),
            source: crate::kubelet_version::NODE_STATUS.into(),
            read_at: snap.taken_at,
        });
        snap
    }

    fn without_config(mut snap: NodeSnapshot, config: Observed<crate::snapshot::KubeletConfig>) -> NodeSnapshot {
        snap.host.kubelet = config;
        snap
    }

    /// Every kind of refusal, each as the fact says it and as the two rules' findings say it:
    /// one finding per refusal, in the fact's order, with the same file, manager, severity (what
    /// the kubelet does at its start), kubelet message and problem.
    #[test]
    fn each_refusal_is_what_the_two_rules_say() {
        use Manager::{Cpu, Devices, Dra, Memory};
        const BAD_SUM: &[u8] =
            br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":1337}"#;
        let node = |default: &str, entries: &[(&str, &str, &str)]| SnapshotBuilder::static_node(default, entries);
        let raw = |bytes: &[u8]| node("0-3", &[]).with_raw_checkpoint(bytes).build();
        let managers = || {
            let mut snap = NodeSnapshot::empty("node-a", 0);
            let memory = "/var/lib/kubelet/memory_manager_state".to_string();
            snap.host.managers.memory = Observed::Ok(ManagerFile::new(
                memory.clone(),
                None,
                MemoryCheckpoint::parse(b"{\"policyName\":"),
            ));
            snap.host.managers.devices = Observed::Ok(ManagerFile::new(
                "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint".into(),
                None,
                DeviceCheckpoint::parse(b"[]"),
            ));
            snap.host.managers.dra = Observed::Ok(ManagerFile::new(
                "/var/lib/kubelet/dra_manager_state".into(),
                None,
                DraCheckpoint::parse(b""),
            ));
            (snap, memory)
        };
        let memory_mismatch = {
            let (mut snap, path) = managers();
            let bytes = br#"{"policyName":"None","machineState":{},"entries":{},"checksum":1}"#;
            let file = ManagerFile::new(path, None, MemoryCheckpoint::parse(bytes));
            assert!(
                matches!(file.verification, Some(Verification::Mismatch { .. })),
                "{file:?}"
            );
            snap.host.managers = crate::snapshot::ManagerFiles::missing();
            snap.host.managers.memory = Observed::Ok(file);
            snap
        };
        let memory_bad_value = {
            let (mut snap, path) = managers();
            let bytes = br#"{"policyName":"None","machineState":{},"entries":{},"checksum":0}"#;
            let mut file = ManagerFile::new(path, None, MemoryCheckpoint::parse(bytes));
            file.verification = Some(Verification::Unverified { layout: "V1" });
            file.state = Err(CheckpointError::Value {
                field: "machineState[\"x\"]".into(),
                reason: "not a NUMA node id".into(),
            });
            snap.host.managers = crate::snapshot::ManagerFiles::missing();
            snap.host.managers.memory = Observed::Ok(file);
            snap
        };
        let strict = |c: &mut crate::validate::CpuManagerConfig| {
            c.reserved_system_cpus = Some(CpuSet::parse("0-1").unwrap());
            c.policy_options.insert("strict-cpu-reservation".into(), "true".into());
        };
        // A case: its name, the node, and the refusals wanted (manager, problem, at start).
        type Case = (&'static str, NodeSnapshot, Vec<(Manager, &'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            ("CPU file empty", raw(b""), vec![(Cpu, "unreadable", "refuses")]),
            (
                "CPU checksum",
                raw(BAD_SUM),
                vec![(Cpu, "checksum-mismatch", "refuses")],
            ),
            (
                "CPU checksum, kubelet newer than every known layout",
                newer_kubelet(raw(BAD_SUM), "v1.38.2"),
                vec![(Cpu, "checksum-mismatch", "unsure")],
            ),
            (
                "CPU checksum, kubelet of a known layout",
                newer_kubelet(raw(BAD_SUM), "v1.37.0-alpha.1"),
                vec![(Cpu, "checksum-mismatch", "refuses")],
            ),
            (
                "CPU bad cpuset",
                raw(br#"{"policyName":"static","defaultCpuSet":"1.3","checksum":0}"#),
                vec![(Cpu, "bad-value", "refuses")],
            ),
            (
                "the other managers' files",
                managers().0,
                vec![
                    (Memory, "unreadable", "refuses"),
                    (Devices, "unreadable", "starts-without"),
                    (Dra, "unreadable", "refuses"),
                ],
            ),
            (
                "memory checksum",
                memory_mismatch,
                vec![(Memory, "checksum-mismatch", "refuses")],
            ),
            (
                "memory bad value",
                memory_bad_value,
                vec![(Memory, "bad-value", "refuses")],
            ),
            (
                "policy mismatch",
                node("0-3", &[]).with_cpu_manager(|c| c.policy = "none".into()).build(),
                vec![(Cpu, "policy-mismatch", "refuses")],
            ),
            (
                "a checksum and a policy mismatch: both, the unreadable file first",
                node("0-3", &[])
                    .with_raw_checkpoint(BAD_SUM)
                    .with_cpu_manager(|c| c.policy = "none".into())
                    .build(),
                vec![
                    (Cpu, "checksum-mismatch", "refuses"),
                    (Cpu, "policy-mismatch", "refuses"),
                ],
            ),
            (
                "unknown policy",
                without_config(
                    raw(b"{}"),
                    Observed::Missing {
                        path: "/var/lib/kubelet/config.yaml".into(),
                    },
                ),
                vec![(Cpu, "unknown-policy", "refuses")],
            ),
            (
                "empty default set",
                node("", &[("p", "c", "0-3")]).build(),
                vec![(Cpu, "empty-default-cpuset", "refuses")],
            ),
            (
                "reserved CPU held",
                node("2-3", &[("p", "c", "0-1,4-7")])
                    .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0").unwrap()))
                    .build(),
                vec![(Cpu, "reserved-not-in-default", "refuses")],
            ),
            (
                "strictly reserved CPUs in the default set",
                node("0-3", &[("p", "c", "4-7")]).with_cpu_manager(strict).build(),
                vec![
                    (Cpu, "reserved-in-default", "refuses"),
                    (Cpu, "cpus-mismatch", "refuses"),
                ],
            ),
            (
                "overlap",
                node("0-5", &[("p", "c", "4-7")]).build(),
                vec![(Cpu, "assignment-overlaps-default", "refuses")],
            ),
            (
                "CPUs offline, configuration missing",
                without_config(
                    node("0-3", &[("p", "c", "4-7")]).with_online("0-5").build(),
                    Observed::Missing {
                        path: "/var/lib/kubelet/config.yaml".into(),
                    },
                ),
                vec![(Cpu, "cpus-mismatch", "refuses")],
            ),
            (
                "CPUs offline, configuration not read",
                without_config(
                    node("0-3", &[("p", "c", "4-7")]).with_online("0-5").build(),
                    Observed::NotApplicable {
                        reason: "checkpoint verify reads the file alone".into(),
                    },
                ),
                vec![(Cpu, "cpus-mismatch", "refuses")],
            ),
            (
                "CPUs hot-added, reserved CPUs not computable",
                node("0-3", &[("p", "c", "4-5")])
                    .with_online("0-7")
                    .with_cpu_manager(|c| c.kube_reserved_cpu = Some("64".into()))
                    .build(),
                vec![(Cpu, "cpus-mismatch", "refuses")],
            ),
            ("healthy", node("0-3", &[("p", "c", "4-7")]).build(), vec![]),
        ];
        let settings = Settings::default();
        for (case, snap, want) in cases {
            let facts = crate::facts::derive(&snap, &settings);
            let got: Vec<(Manager, &str, &str)> = facts
                .refusals
                .iter()
                .map(|r| (r.manager, kind(&r.problem), at_start(&r.at_start)))
                .collect();
            assert_eq!(got, want, "{case}");
            let findings: Vec<Finding> = checkpoint_unreadable::check(&snap, &facts, &settings)
                .into_iter()
                .chain(checkpoint_invalid_state::check(&snap, &facts, &settings))
                .collect();
            assert_eq!(findings.len(), facts.refusals.len(), "{case}: {findings:#?}");
            for (r, f) in facts.refusals.iter().zip(&findings) {
                says(r, f, case);
            }
        }
    }

    /// What the kubelet's configuration said when the reserved CPUs are unknown, word for word
    /// as the evidence has always said it.
    #[test]
    fn why_the_reserved_cpus_are_unknown() {
        let unknown = "its reserved CPUs and policy options are unknown";
        let cases = [
            (
                ReservedUnknown::ConfigMissing { path: "/c.yaml".into() },
                format!("the kubelet's configuration was not found (nor at /c.yaml): {unknown}"),
            ),
            (
                ReservedUnknown::ConfigFailed {
                    reason: "permission denied".into(),
                },
                format!("the kubelet's configuration could not be read (permission denied): {unknown}"),
            ),
            (
                ReservedUnknown::ConfigNotRead { reason: "alone".into() },
                format!("the kubelet's configuration was not read (not applicable: alone): {unknown}"),
            ),
            (
                ReservedUnknown::Uncomputable(ReservedCpusError::TooMany {
                    requested: 64,
                    online: 8,
                }),
                "the reserved CPUs cannot be computed (64 reserved CPUs requested but the node has 8 online)"
                    .to_string(),
            ),
        ];
        for (why, want) in cases {
            assert_eq!(why.to_string(), want);
        }
    }
}
