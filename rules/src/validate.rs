//! The static policy's checks on a restored checkpoint (`policy_static.go` `validateState`;
//! docs/kubelet.md, "Why a kubelet refuses to start"), and the reserved CPUs they depend on.
//!
//! The kubelet stops at the first failed check and refuses to start; we report every problem,
//! each with the message the kubelet would log, so one scan shows everything to fix.

use crate::CpuSet;
use crate::checkpoint::{CpuState, EntryKey};
use crate::quantity::{QuantityError, parse_cpu_millis};
use crate::topology::CpuTopology;

/// The CPU manager policies a kubelet runs (`cpuManagerPolicy`; upstream
/// `pkg/kubelet/cm/cpumanager/cpu_manager.go` `NewManager` refuses any other name). Its
/// checkpoint's `policyName` must equal the configured one (`state_checkpoint.go`
/// `restoreState`), so a file naming none of these is refused whatever the configuration.
pub const CPU_MANAGER_POLICIES: &[&str] = &["none", "static"];

/// The CPU manager part of a kubelet's configuration (file plus flags), in our own terms.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CpuManagerConfig {
    /// `cpuManagerPolicy` (`none` when unset).
    pub policy: String,
    /// `cpuManagerPolicyOptions`.
    pub policy_options: std::collections::BTreeMap<String, String>,
    /// `cpuManagerReconcilePeriod` in seconds (10 when unset).
    pub reconcile_period_seconds: f64,
    /// `reservedSystemCPUs`, when set.
    pub reserved_system_cpus: Option<CpuSet>,
    /// `kubeReserved.cpu`, as written.
    pub kube_reserved_cpu: Option<String>,
    /// `systemReserved.cpu`, as written.
    pub system_reserved_cpu: Option<String>,
}

impl Default for CpuManagerConfig {
    fn default() -> Self {
        CpuManagerConfig {
            policy: "none".to_string(),
            policy_options: Default::default(),
            reconcile_period_seconds: 10.0,
            reserved_system_cpus: None,
            kube_reserved_cpu: None,
            system_reserved_cpu: None,
        }
    }
}

/// Why the reserved CPUs of a configuration cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReservedCpusError {
    /// `kubeReserved` or `systemReserved` has a `cpu` that is not a quantity.
    #[error(transparent)]
    Quantity(#[from] QuantityError),
    /// More CPUs reserved than are online.
    #[error("{requested} reserved CPUs requested but the node has {online} online")]
    TooMany { requested: usize, online: usize },
}

impl CpuManagerConfig {
    /// Whether the `strict-cpu-reservation` policy option is on.
    pub fn strict_cpu_reservation(&self) -> bool {
        self.policy_options
            .get("strict-cpu-reservation")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// The reserved CPUs as the static policy computes them: `reservedSystemCPUs` when set,
    /// else `ceil(kubeReserved.cpu + systemReserved.cpu)` CPUs chosen by topology.
    pub fn reserved_cpus(&self, topology: &CpuTopology) -> Result<CpuSet, ReservedCpusError> {
        if let Some(set) = &self.reserved_system_cpus {
            return Ok(set.clone());
        }
        let mut millis = 0u64;
        for q in [&self.kube_reserved_cpu, &self.system_reserved_cpu]
            .into_iter()
            .flatten()
        {
            millis = millis.saturating_add(parse_cpu_millis(q)?);
        }
        let n = millis.div_ceil(1000) as usize;
        topology
            .take_by_topology(&topology.all(), n)
            .ok_or(ReservedCpusError::TooMany {
                requested: n,
                online: topology.cpus.len(),
            })
    }
}

/// One broken rule of docs/kubelet.md, "Why a kubelet refuses to start".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProblem {
    /// Rule 1: assignments exist but `defaultCpuSet` is empty.
    EmptyDefault,
    /// Rule 2: reserved CPUs missing from `defaultCpuSet`.
    ReservedNotInDefault { reserved: CpuSet, default: CpuSet },
    /// Rule 2 with `strict-cpu-reservation`: reserved CPUs inside `defaultCpuSet`.
    ReservedInDefault { overlap: CpuSet, default: CpuSet },
    /// Rule 3: an assignment overlaps `defaultCpuSet`.
    OverlapsDefault {
        owner: String,
        cpus: CpuSet,
        default: CpuSet,
    },
    /// Rule 4: default plus assignments is not exactly the CPUs the kubelet manages.
    CpusMismatch { expected: CpuSet, in_state: CpuSet },
}

impl StateProblem {
    /// Short stable name for evidence and tests.
    pub fn code(&self) -> &'static str {
        match self {
            StateProblem::EmptyDefault => "empty-default-cpuset",
            StateProblem::ReservedNotInDefault { .. } => "reserved-not-in-default",
            StateProblem::ReservedInDefault { .. } => "reserved-in-default",
            StateProblem::OverlapsDefault { .. } => "assignment-overlaps-default",
            StateProblem::CpusMismatch { .. } => "cpus-mismatch",
        }
    }

    /// The error the kubelet logs for it.
    pub fn kubelet_message(&self) -> String {
        match self {
            StateProblem::EmptyDefault => "default cpuset cannot be empty".to_string(),
            StateProblem::ReservedNotInDefault { reserved, default } => {
                format!("not all reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\"")
            }
            StateProblem::ReservedInDefault { overlap, default } => {
                format!("some of strictly reserved cpus: \"{overlap}\" are present in defaultCpuSet: \"{default}\"")
            }
            StateProblem::OverlapsDefault { owner, cpus, default } => {
                format!("{owner} cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\"")
            }
            StateProblem::CpusMismatch { expected, in_state } => {
                format!("current set of available CPUs \"{expected}\" doesn't match with CPUs in state \"{in_state}\"")
            }
        }
    }
}

fn owner(key: &EntryKey) -> String {
    match key {
        EntryKey::Container { pod_uid, container } => format!("pod: {pod_uid}, container: {container}"),
        EntryKey::ContainerId { container_id } => format!("container id: {container_id}"),
    }
}

/// What a kubelet does with a CPU manager checkpoint file at its next start: the judgement a
/// scan makes on it ([`crate::facts::checkpoint_refusals`]), with the kubelet's configuration
/// and the online CPUs where known (a check that needs what is not known is skipped), said as
/// the scan's rules say it: the `checkpoint-unreadable` findings when the kubelet cannot read
/// the file, else the `checkpoint-invalid-state` ones. `checkpoint verify` calls this, so it
/// never calls valid a file a scan reports; no finding means no kubelet would refuse the file
/// for what could be checked.
pub fn file_refusals(
    file: crate::snapshot::CheckpointFile,
    kubelet: crate::snapshot::Observed<crate::snapshot::KubeletConfig>,
    cpus: crate::snapshot::Observed<CpuTopology>,
    node: &str,
) -> Vec<crate::finding::Finding> {
    let mut snap = crate::snapshot::NodeSnapshot::empty(node, 0);
    snap.host.checkpoint = crate::snapshot::Observed::Ok(file);
    snap.host.kubelet = kubelet;
    snap.host.cpus = cpus;
    let refusals = crate::facts::checkpoint_refusals(&snap);
    let say = |rule: fn(&crate::snapshot::NodeSnapshot, &crate::facts::CheckpointRefusal) -> Option<crate::Finding>| {
        refusals.iter().filter_map(|r| rule(&snap, r)).collect::<Vec<_>>()
    };
    let unreadable = say(crate::rules::checkpoint_unreadable::finding);
    if !unreadable.is_empty() {
        return unreadable;
    }
    say(crate::rules::checkpoint_invalid_state::finding)
}

/// Checks a static-policy state against the online and reserved CPUs.
pub fn validate_static_state(state: &CpuState, online: &CpuSet, reserved: &CpuSet, strict: bool) -> Vec<StateProblem> {
    let mut problems = Vec::new();
    let default = &state.default_cpus;
    let owned: Vec<(String, &CpuSet)> = state
        .assignments
        .iter()
        .map(|a| (owner(&a.key), &a.cpus))
        .chain(
            state
                .pod_assignments
                .iter()
                .map(|(uid, cpus)| (format!("pod: {uid}"), cpus)),
        )
        .collect();
    if default.is_empty() {
        // An empty default with no assignment is a fresh state the kubelet initialises.
        if !owned.is_empty() {
            problems.push(StateProblem::EmptyDefault);
        }
        return problems;
    }
    if strict {
        if reserved.intersects(default) {
            problems.push(StateProblem::ReservedInDefault {
                overlap: reserved.intersection(default),
                default: default.clone(),
            });
        }
    } else if !reserved.is_subset(default) {
        problems.push(StateProblem::ReservedNotInDefault {
            reserved: reserved.clone(),
            default: default.clone(),
        });
    }
    let mut in_state = default.clone();
    for (owner, cpus) in &owned {
        if cpus.intersects(default) {
            problems.push(StateProblem::OverlapsDefault {
                owner: owner.clone(),
                cpus: (*cpus).clone(),
                default: default.clone(),
            });
        }
        in_state = in_state.union(cpus);
    }
    let expected = if strict {
        online.difference(reserved)
    } else {
        online.clone()
    };
    if in_state != expected {
        problems.push(StateProblem::CpusMismatch { expected, in_state });
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Assignment;

    fn state(default: &str, entries: &[(&str, &str, &str)]) -> CpuState {
        CpuState {
            policy_name: "static".into(),
            default_cpus: CpuSet::parse(default).unwrap(),
            assignments: entries
                .iter()
                .map(|(p, c, cpus)| Assignment {
                    key: EntryKey::Container {
                        pod_uid: p.to_string(),
                        container: c.to_string(),
                    },
                    cpus: CpuSet::parse(cpus).unwrap(),
                })
                .collect(),
            pod_assignments: vec![],
        }
    }

    fn codes(p: &[StateProblem]) -> Vec<&'static str> {
        p.iter().map(StateProblem::code).collect()
    }

    #[test]
    fn table() {
        let online = CpuSet::parse("0-7").unwrap();
        let r01 = CpuSet::parse("0-1").unwrap();
        let none = CpuSet::new();
        let cases: &[(&str, CpuState, &CpuSet, bool, &[&str])] = &[
            ("healthy", state("0-3", &[("p", "c", "4-7")]), &r01, false, &[]),
            ("fresh empty state", state("", &[]), &r01, false, &[]),
            (
                "empty default with assignments",
                state("", &[("p", "c", "0-7")]),
                &r01,
                false,
                &["empty-default-cpuset"],
            ),
            (
                "reserved taken",
                state("2-3", &[("p", "c", "0-1,4-7")]),
                &r01,
                false,
                &["reserved-not-in-default"],
            ),
            (
                "overlap",
                state("0-4", &[("p", "c", "4-7")]),
                &r01,
                false,
                &["assignment-overlaps-default"],
            ),
            (
                "CPU hot-added",
                state("0-3", &[("p", "c", "4-5")]),
                &r01,
                false,
                &["cpus-mismatch"],
            ),
            (
                "CPU removed",
                state("0-3,8", &[("p", "c", "4-7")]),
                &r01,
                false,
                &["cpus-mismatch"],
            ),
            ("strict healthy", state("2-3", &[("p", "c", "4-7")]), &r01, true, &[]),
            (
                "strict reserved in default",
                state("0-3", &[("p", "c", "4-7")]),
                &r01,
                true,
                &["reserved-in-default", "cpus-mismatch"],
            ),
            ("no reserved", state("0-3", &[("p", "c", "4-7")]), &none, false, &[]),
            (
                "same pod overlap is not checked",
                state("0-3", &[("p", "init", "4-5"), ("p", "app", "4-7")]),
                &r01,
                false,
                &[],
            ),
        ];
        for (name, st, reserved, strict, want) in cases {
            assert_eq!(
                codes(&validate_static_state(st, &online, reserved, *strict)),
                *want,
                "{name}"
            );
        }
    }

    #[test]
    fn kubelet_messages() {
        let p = validate_static_state(
            &state("0-3", &[("p", "c", "4-5")]),
            &CpuSet::parse("0-7").unwrap(),
            &CpuSet::new(),
            false,
        );
        assert_eq!(
            p[0].kubelet_message(),
            "current set of available CPUs \"0-7\" doesn't match with CPUs in state \"0-5\""
        );
        let p = validate_static_state(
            &state("0-4", &[("p", "c", "4-7")]),
            &CpuSet::parse("0-7").unwrap(),
            &CpuSet::new(),
            false,
        );
        assert_eq!(
            p[0].kubelet_message(),
            "pod: p, container: c cpuset: \"4-7\" overlaps with default cpuset \"0-4\""
        );
    }

    #[test]
    fn reserved_from_config() {
        let topo = CpuTopology::uniform(1, 4, 2);
        let mut cfg = CpuManagerConfig {
            kube_reserved_cpu: Some("500m".into()),
            system_reserved_cpu: Some("1".into()),
            ..Default::default()
        };
        assert_eq!(cfg.reserved_cpus(&topo).unwrap().to_string(), "0,4");
        cfg.reserved_system_cpus = Some(CpuSet::parse("7").unwrap());
        assert_eq!(cfg.reserved_cpus(&topo).unwrap().to_string(), "7");
        let cfg = CpuManagerConfig {
            kube_reserved_cpu: Some("100".into()),
            ..Default::default()
        };
        let e = cfg.reserved_cpus(&topo).unwrap_err();
        assert_eq!(
            e,
            ReservedCpusError::TooMany {
                requested: 100,
                online: 8
            }
        );
        assert_eq!(e.to_string(), "100 reserved CPUs requested but the node has 8 online");
        let cfg = CpuManagerConfig {
            kube_reserved_cpu: Some("lots".into()),
            ..Default::default()
        };
        let e = cfg.reserved_cpus(&topo).unwrap_err();
        assert!(
            matches!(&e, ReservedCpusError::Quantity(q) if q.text == "lots"),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("invalid CPU quantity \"lots\""), "{e}");
        assert_eq!(CpuManagerConfig::default().reserved_cpus(&topo).unwrap(), CpuSet::new());
    }

    /// `checkpoint verify`'s judgement: files no kubelet restores (no policy name, a pods
    /// list, a checksum no layout makes) have findings, a file a kubelet wrote has none.
    #[test]
    fn file_refusals_name_what_every_kubelet_refuses() {
        use crate::snapshot::{CheckpointFile, Observed};
        let refusals = |bytes: &[u8]| {
            let file = CheckpointFile::new("/x/cpu_manager_state".into(), None, crate::Checkpoint::parse(bytes));
            let (kubelet, cpus) = (
                Observed::Missing { path: "/x".into() },
                Observed::Missing { path: "/y".into() },
            );
            file_refusals(file, kubelet, cpus, "n")
                .into_iter()
                .map(|f| {
                    (
                        f.rule.as_str().to_string(),
                        f.evidence
                            .get("problem")
                            .and_then(|p| p.as_str())
                            .unwrap_or("")
                            .to_string(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let unknown_policy = vec![("checkpoint-invalid-state".to_string(), "unknown-policy".to_string())];
        assert_eq!(refusals(b"{}"), unknown_policy);
        assert_eq!(refusals(br#"{"foo":1}"#), unknown_policy);
        assert_eq!(
            refusals(br#"{"apiVersion":"v1","kind":"List","items":[{"metadata":{"name":"p"}}]}"#),
            unknown_policy
        );
        assert_eq!(
            refusals(
                br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":1337}"#
            ),
            vec![("checkpoint-unreadable".to_string(), String::new())]
        );
        assert_eq!(
            refusals(br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":3094260139}"#),
            vec![]
        );
        assert_eq!(
            refusals(br#"{"policyName":"none","defaultCpuSet":"","checksum":0}"#),
            vec![]
        );
    }
}
