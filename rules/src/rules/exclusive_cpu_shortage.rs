//! `exclusive-cpu-shortage`: Guaranteed pods cannot get exclusive CPUs on this node.
//!
//! Two signs: pods that already failed with the CPU manager's "not enough cpus available to
//! satisfy request" (`UnexpectedAdmissionError`, or a failed `PreStartContainer` hook), and
//! pending Guaranteed pods whose integer CPU request is larger than the free exclusive CPUs
//! (`defaultCpuSet` minus the reserved CPUs, which the static policy never hands out). The
//! evidence says how many CPUs stale entries hold, since freeing those is usually the fix.
//!
//! With the kubelet's topology manager policy `single-numa-node` or `restricted`, a pending pod
//! that fits in the node's free CPUs can still be refused: its request (per container, or per
//! pod with `topologyManagerScope: pod`) must fit in the free CPUs of one NUMA node (or of the
//! fewest NUMA nodes that can hold it at all, under `restricted`). Free CPUs split across NUMA
//! nodes, often by stale entries on one of them, are reported per NUMA node.

use crate::CpuSet;
use crate::checkpoint::{CpuState, EntryKey};
use crate::coverage::{Comparison, KubeletVersions, Need::One, Needs, Source};
use crate::facts::{Facts, NumaCpus, checkpoint_path, rejected_for_cpus, reserved_cpus};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::RuleInfo;
use crate::rules::stale_cpu_assignment::remedy_for_all;
use crate::settings::Settings;
use crate::snapshot::{ContainerKind, NodeSnapshot, Observed, PodInfo, PodPhase, PodSource, QosClass};
use crate::text::LISTED;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("exclusive-cpu-shortage");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Guaranteed pods cannot get the exclusive CPUs they need",
    severity: Severity::Critical,
    looks_at: "checkpoint, pods",
    fires_when: "pods fail with \"not enough cpus available\" or the free exclusive CPUs cannot fit pending Guaranteed pods",
    event_reason: "ExclusiveCPUShortage",
    needs: Needs {
        all: &[One(Source::Checkpoint), One(Source::Cpus), One(Source::Pods)],
        about: &[Source::Checkpoint],
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
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::facts::grace_or_window_turn),
};

/// Exclusive CPUs a Guaranteed pod needs: integer CPU requests, the larger of the biggest
/// init container and the sum of the app containers (init CPUs are reused).
pub fn exclusive_cpus_needed(pod: &PodInfo) -> usize {
    if pod.qos_class != Some(QosClass::Guaranteed) {
        return 0;
    }
    let whole = |m: Option<u64>| m.filter(|m| *m > 0 && m % 1000 == 0).map_or(0, |m| (m / 1000) as usize);
    let init = pod
        .containers
        .iter()
        .filter(|c| c.kind == Some(ContainerKind::Init))
        .map(|c| whole(c.cpu_request_millis))
        .max()
        .unwrap_or(0);
    let app: usize = pod
        .containers
        .iter()
        .filter(|c| c.kind == Some(ContainerKind::Regular))
        .map(|c| whole(c.cpu_request_millis))
        .sum();
    init.max(app)
}

struct Pool<'a> {
    free: CpuSet,
    stale: CpuSet,
    state: &'a CpuState,
}

fn pool<'a>(snap: &'a NodeSnapshot, facts: &Facts) -> Option<Pool<'a>> {
    let Observed::Ok(file) = &snap.host.checkpoint else {
        return None;
    };
    let state = file.state.as_ref().ok()?;
    if state.policy_name != "static" {
        return None;
    }
    let reserved = reserved_cpus(snap).0;
    Some(Pool {
        free: state.default_cpus.difference(&reserved),
        stale: facts.stale_cpus.clone(),
        state,
    })
}

pub fn check(snap: &NodeSnapshot, facts: &Facts, settings: &Settings) -> Vec<Finding> {
    let pool = pool(snap, facts);
    let path = checkpoint_path(snap);
    // How to free the stale entries: the same for every finding here (whether a kubelet would
    // refuse a checkpoint at its next start is a fact of the snapshot), so worded once, when a
    // finding first needs it.
    let freeing = std::cell::OnceCell::new();
    let free_stale = || freeing.get_or_init(|| remedy_for_all(snap, facts)).clone();
    let remedy = |pool: Option<&Pool>| match pool {
        None => format!(
            "the CPU manager checkpoint could not be read to count free CPUs: see the checkpoint findings and `nodemedic checkpoint show {path}`"
        ),
        Some(p) if p.stale.is_empty() => {
            "the node has no exclusive CPUs to spare: run the pod elsewhere or lower its integer CPU request"
                .to_string()
        }
        Some(p) => format!("stale entries hold CPUs {}; free them: {}", p.stale, free_stale()),
    };
    let mut findings = Vec::new();

    // Refused pods stay in the API until deleted: from the live API only recent ones say the
    // shortage is now. A pods file is a capture of one moment and is judged as it stands.
    let live = snap.pods.source == PodSource::Api;
    let recent = |p: &PodInfo| {
        !live
            || p.created_at
                .is_none_or(|t| snap.taken_at - t <= settings.rejection_window_seconds)
    };
    let rejected: Vec<&PodInfo> = snap
        .pods
        .bound
        .iter()
        .filter(|p| rejected_for_cpus(p) && recent(p))
        .collect();
    if !rejected.is_empty() {
        let names: Vec<String> = rejected.iter().take(LISTED).map(|p| p.display()).collect();
        let stale = pool.as_ref().map(|p| p.stale.clone()).unwrap_or_default();
        findings.push(
            Finding::new(
                ID,
                Severity::Critical,
                Subject::node(&snap.node),
                format!(
                    "{} pod(s) were refused exclusive CPUs on {}{}",
                    rejected.len(),
                    snap.node,
                    if stale.is_empty() {
                        String::new()
                    } else {
                        format!(" while stale entries hold CPUs {stale}")
                    }
                ),
                remedy(pool.as_ref()),
            )
            .with("rejected_pods", rejected.len())
            .with("pods", names)
            .with("message", rejected[0].message.clone())
            .with("free_exclusive_cpus", pool.as_ref().map(|p| p.free.to_string()))
            .with("free_exclusive_cpu_count", pool.as_ref().map(|p| p.free.len()))
            .with("stale_cpus", pool.as_ref().map(|p| p.stale.to_string())),
        );
    }

    let Some(pool) = pool else { return findings };
    let allocated = |uid: &str| {
        pool.state
            .assignments
            .iter()
            .any(|a| matches!(&a.key, EntryKey::Container { pod_uid, .. } if pod_uid == uid))
    };
    for pod in snap
        .pods
        .bound
        .iter()
        .filter(|p| p.phase == PodPhase::Pending && !rejected_for_cpus(p) && !allocated(&p.uid))
    {
        let need = exclusive_cpus_needed(pod);
        if need == 0 {
            continue;
        }
        if need <= pool.free.len() {
            findings.extend(numa_refusal(snap, facts, pod, need, &free_stale));
            continue;
        }
        findings.push(
            Finding::new(
                ID,
                Severity::Warning,
                Subject::pod(pod),
                format!(
                    "Pending Guaranteed pod {} needs {need} exclusive CPUs but only {} are free{}",
                    pod.display(),
                    pool.free.len(),
                    if pool.free.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", pool.free)
                    }
                ),
                remedy(Some(&pool)),
            )
            .with("requested_cpus", need)
            .with("free_exclusive_cpus", pool.free.human())
            .with("free_exclusive_cpu_count", pool.free.len())
            .with("stale_cpus", pool.stale.human()),
        );
    }
    findings
}

/// The integer CPU requests the topology manager aligns one at a time: the whole pod's with
/// `topologyManagerScope: pod`, else each container's (the app containers', and the largest
/// init container's, which runs alone before them).
fn aligned_units(pod: &PodInfo, scope: &str) -> Vec<(String, usize)> {
    if scope == "pod" {
        return vec![("the pod".to_string(), exclusive_cpus_needed(pod))];
    }
    let whole = |m: Option<u64>| m.filter(|m| *m > 0 && m % 1000 == 0).map_or(0, |m| (m / 1000) as usize);
    pod.containers
        .iter()
        .filter(|c| matches!(c.kind, Some(ContainerKind::Regular) | Some(ContainerKind::Init)))
        .map(|c| (format!("container {}", c.name), whole(c.cpu_request_millis)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The fewest NUMA nodes whose CPUs together hold `need` (the topology manager's narrowest
/// affinity for the request, counted on all CPUs of the nodes, as the CPU manager's hints do).
fn narrowest(nodes: &[NumaCpus], need: usize) -> Option<usize> {
    let mut sizes: Vec<usize> = nodes.iter().map(|n| n.online.len()).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let mut total = 0;
    for (i, s) in sizes.iter().enumerate() {
        total += s;
        if total >= need {
            return Some(i + 1);
        }
    }
    None
}

/// A pending Guaranteed pod that fits in the node's free CPUs but not within the NUMA
/// alignment the kubelet's topology manager insists on: `single-numa-node` admits only a
/// request that one NUMA node's free CPUs hold, `restricted` only one that the narrowest
/// possible set of NUMA nodes holds (the CPU manager calls only those hints preferred, and both
/// policies refuse a pod without a preferred hint: `TopologyAffinityError`). `free_stale` says
/// how to free the stale entries (made once per judgement by [`check`]).
fn numa_refusal(
    snap: &NodeSnapshot,
    facts: &Facts,
    pod: &PodInfo,
    need: usize,
    free_stale: &dyn Fn() -> String,
) -> Option<Finding> {
    let config = snap.host.kubelet.ok()?;
    let policy = config.topology_manager_policy.as_str();
    if !matches!(policy, "single-numa-node" | "restricted") {
        return None;
    }
    let (nodes, _) = facts.numa.as_ref()?;
    if nodes.len() < 2 {
        return None;
    }
    let mut by_free: Vec<&NumaCpus> = nodes.iter().collect();
    by_free.sort_by_key(|x| std::cmp::Reverse(x.free.len()));
    let refused = aligned_units(pod, &config.topology_manager_scope)
        .into_iter()
        .find_map(|(unit, n)| {
            let width = narrowest(nodes, n)?;
            if policy == "single-numa-node" && width > 1 {
                return Some((unit, n, width, ", more than any one NUMA node has".to_string()));
            }
            let best: usize = by_free.iter().take(width).map(|x| x.free.len()).sum();
            (best < n).then(|| {
                let within = if width == 1 {
                    "one NUMA node".to_string()
                } else {
                    format!("{width} NUMA nodes")
                };
                (unit, n, width, format!(" with at most {best} free within {within}"))
            })
        })?;
    let (unit, n, _, why) = refused;
    let per_node: Vec<String> = nodes
        .iter()
        .map(|x| match x.free.len() {
            0 => format!("node {}: 0 free, {} stale", x.node, x.stale.len()),
            n => format!("node {}: {n} free ({}), {} stale", x.node, x.free, x.stale.len()),
        })
        .collect();
    let stale_total: usize = nodes.iter().map(|x| x.stale.len()).sum();
    let remedy = if stale_total > 0 {
        format!(
            "stale entries hold {stale_total} CPUs ({}); freeing them may make room within one NUMA node: {}",
            per_node.join("; "),
            free_stale()
        )
    } else {
        format!(
            "no NUMA node has room: run the pod on another node, lower {unit}'s integer CPU request to what one NUMA \
             node holds, or relax topologyManagerPolicy ({policy}) if alignment is not needed"
        )
    };
    Some(
        Finding::new(
            ID,
            Severity::Warning,
            Subject::pod(pod),
            format!(
                "Pending Guaranteed pod {} needs {need} exclusive CPUs and {} are free on the node, but {unit} needs \
                 {n}{why}: the kubelet's topology manager policy {policy} will refuse it (TopologyAffinityError)",
                pod.display(),
                nodes.iter().map(|x| x.free.len()).sum::<usize>()
            ),
            remedy,
        )
        .with("requested_cpus", need)
        .with("aligned_unit", unit)
        .with("aligned_cpus", n)
        .with("topology_manager_policy", policy)
        .with("topology_manager_scope", config.topology_manager_scope.clone())
        .with("free_by_numa_node", per_node)
        .with(
            "free_exclusive_cpu_count",
            nodes.iter().map(|x| x.free.len()).sum::<usize>(),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, pod};
    use crate::snapshot::ContainerInfo;

    fn guaranteed(uid: &str, phase: &str, app_cpus: &[u64], init_cpus: &[u64]) -> PodInfo {
        let mut p = pod(uid, uid, phase, &[]);
        for (i, m) in app_cpus.iter().enumerate() {
            p.containers.push(ContainerInfo {
                name: format!("app{i}"),
                kind: Some(ContainerKind::Regular),
                cpu_request_millis: Some(*m),
                ..Default::default()
            });
        }
        for (i, m) in init_cpus.iter().enumerate() {
            p.containers.push(ContainerInfo {
                name: format!("init{i}"),
                kind: Some(ContainerKind::Init),
                cpu_request_millis: Some(*m),
                ..Default::default()
            });
        }
        p
    }

    #[test]
    fn exclusive_needs() {
        assert_eq!(
            exclusive_cpus_needed(&guaranteed("a", "Pending", &[2000, 1000], &[])),
            3
        );
        assert_eq!(exclusive_cpus_needed(&guaranteed("a", "Pending", &[2000], &[4000])), 4);
        assert_eq!(
            exclusive_cpus_needed(&guaranteed("a", "Pending", &[1500, 2000], &[])),
            2,
            "fractional requests share"
        );
        let mut burstable = guaranteed("a", "Pending", &[4000], &[]);
        burstable.qos_class = Some("Burstable".into());
        assert_eq!(exclusive_cpus_needed(&burstable), 0);
    }

    #[test]
    fn rejected_pods_with_stale_cpus() {
        let mut rejected = pod("r1", "exec-9", "Failed", &[]);
        rejected.reason = Some("UnexpectedAdmissionError".into());
        rejected.message =
            Some("Allocate failed due to not enough cpus available to satisfy request, which is unexpected".into());
        let snap = SnapshotBuilder::static_node("0-1", &[("gone", "app", "2-5")])
            .with_pod_list(&[rejected])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(f[0].evidence["stale_cpus"], "2-5");
        // The free CPUs as a list, and how many under a name of their own: "1" is CPU 1.
        assert_eq!(f[0].evidence["free_exclusive_cpus"], "0-1");
        assert_eq!(f[0].evidence["free_exclusive_cpu_count"], 2);
        assert_eq!(f[0].evidence["pods"], serde_json::json!(["default/exec-9"]));
        assert!(
            f[0].remedy.starts_with(
                "stale entries hold CPUs 2-5; free them: restart the kubelet (systemctl restart kubelet on node-a)"
            ),
            "{}",
            f[0].remedy
        );
        // The same snapshot with a CPU gone offline: the kubelet would refuse the file at its
        // next start, so the repair is offered, not a restart.
        let mut rejected = pod("r1", "exec-9", "Failed", &[]);
        rejected.reason = Some("UnexpectedAdmissionError".into());
        rejected.message =
            Some("Allocate failed due to not enough cpus available to satisfy request, which is unexpected".into());
        let snap = SnapshotBuilder::static_node("0-1", &[("gone", "app", "2-5")])
            .with_pod_list(&[rejected])
            .with_online("0-4")
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert!(
            f[0].remedy
                .starts_with("stale entries hold CPUs 2-5; free them: do not restart the kubelet to clear this"),
            "{}",
            f[0].remedy
        );
        assert!(
            f[0].remedy.contains("repair node-a cpu-state --apply"),
            "{}",
            f[0].remedy
        );
    }

    #[test]
    fn old_rejections_do_not_count() {
        let mut rejected = pod("r1", "exec-9", "Failed", &[]);
        rejected.reason = Some("UnexpectedAdmissionError".into());
        rejected.message = Some("not enough cpus available to satisfy request".into());
        rejected.created_at = Some(1_700_000_000 - 7200);
        let mut snap = SnapshotBuilder::static_node("0-3", &[])
            .with_pod_list(&[rejected.clone()])
            .build();
        assert_eq!(
            crate::rules::testkit::judged(check, &snap, &Settings::default()).len(),
            1,
            "a pods file is judged as captured"
        );
        snap.pods.source = PodSource::Api;
        assert!(
            crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty(),
            "live: two hours old is history"
        );
        rejected.created_at = Some(1_700_000_000 - 60);
        let mut snap = SnapshotBuilder::static_node("0-3", &[])
            .with_pod_list(&[rejected])
            .build();
        snap.pods.source = PodSource::Api;
        assert_eq!(
            crate::rules::testkit::judged(check, &snap, &Settings::default()).len(),
            1
        );
    }

    #[test]
    fn prestart_hook_message_counts_too() {
        let mut p = pod("r2", "exec-2", "Pending", &[]);
        p.message = Some("PreStartContainer hook failed: not enough cpus available to satisfy request".into());
        let mut snap = SnapshotBuilder::static_node("0-3", &[]).with_pod_list(&[p]).build();
        assert_eq!(
            crate::rules::testkit::judged(check, &snap, &Settings::default()).len(),
            1
        );
        snap.host.checkpoint = Observed::Missing {
            path: "/var/lib/kubelet/cpu_manager_state".into(),
        };
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert!(
            f[0].remedy.starts_with("the CPU manager checkpoint could not be read"),
            "{}",
            f[0].remedy
        );
    }

    #[test]
    fn pending_guaranteed_pods_that_cannot_fit() {
        let snap = SnapshotBuilder::static_node("0-3", &[("busy", "app0", "4-7")])
            .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0").unwrap()))
            .with_pod_list(&[
                guaranteed("busy", "Running", &[4000], &[]),
                guaranteed("fits", "Pending", &[3000], &[]),
                guaranteed("too-big", "Pending", &[4000], &[]),
            ])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].subject.uid.as_deref(), Some("too-big"));
        assert_eq!(f[0].evidence["requested_cpus"], 4);
        assert_eq!(f[0].evidence["free_exclusive_cpus"], "1-3");
        assert!(f[0].remedy.starts_with("the node has no exclusive CPUs to spare"));
    }

    #[test]
    fn healthy_node_is_silent() {
        let snap = SnapshotBuilder::static_node("0-7", &[])
            .with_pod_list(&[guaranteed("p", "Pending", &[2000], &[])])
            .build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }

    /// Two NUMA nodes of 4 CPUs (0-3, 4-7), CPU 0 reserved; a live pod on 2-3, stale entries
    /// on 4-5; free: 1 on node 0, 6-7 on node 1.
    fn two_numa(policy: &str, scope: &str, pending: PodInfo) -> NodeSnapshot {
        let mut snap = SnapshotBuilder::static_node("0-1,6-7", &[("busy", "app0", "2-3"), ("gone", "app0", "4-5")])
            .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0").unwrap()))
            .with_pod_list(&[guaranteed("busy", "Running", &[2000], &[]), pending])
            .build();
        snap.host.cpus = Observed::Ok(crate::topology::CpuTopology::uniform(2, 4, 1));
        if let Observed::Ok(k) = &mut snap.host.kubelet {
            k.topology_manager_policy = policy.into();
            k.topology_manager_scope = scope.into();
        }
        snap
    }

    #[test]
    fn free_cpus_split_across_numa_nodes_refuse_an_aligned_pod() {
        let pending = || guaranteed("p", "Pending", &[3000], &[]);
        // 3 free in all (1, 6, 7), at most 2 on one NUMA node.
        let f = crate::rules::testkit::judged(
            check,
            &two_numa("single-numa-node", "container", pending()),
            &Settings::default(),
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(
            f[0].summary
                .contains("needs 3 exclusive CPUs and 3 are free on the node"),
            "{}",
            f[0].summary
        );
        assert!(
            f[0].summary
                .contains("container app0 needs 3 with at most 2 free within one NUMA node"),
            "{}",
            f[0].summary
        );
        assert!(f[0].summary.contains("TopologyAffinityError"));
        assert_eq!(f[0].evidence["free_by_numa_node"][1], "node 1: 2 free (6-7), 2 stale");
        assert!(f[0].remedy.contains("stale entries hold 2 CPUs"), "{}", f[0].remedy);
        assert!(
            f[0].remedy.contains("within one NUMA node: restart the kubelet"),
            "{}",
            f[0].remedy
        );
        // restricted: 3 CPUs fit in one NUMA node's 4, so one node it must be: refused too.
        assert_eq!(
            crate::rules::testkit::judged(
                check,
                &two_numa("restricted", "container", pending()),
                &Settings::default()
            )
            .len(),
            1
        );
        // Without alignment the kubelet spreads it: no finding.
        assert!(
            crate::rules::testkit::judged(
                check,
                &two_numa("best-effort", "container", pending()),
                &Settings::default()
            )
            .is_empty()
        );
        assert!(
            crate::rules::testkit::judged(check, &two_numa("none", "container", pending()), &Settings::default())
                .is_empty()
        );
        // Per container, two containers of 2 and 1 each fit in a node of their own.
        let two = guaranteed("p", "Pending", &[2000, 1000], &[]);
        assert!(
            crate::rules::testkit::judged(
                check,
                &two_numa("single-numa-node", "container", two.clone()),
                &Settings::default()
            )
            .is_empty()
        );
        // The pod scope aligns the pod's 3 as one.
        let f = crate::rules::testkit::judged(check, &two_numa("single-numa-node", "pod", two), &Settings::default());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].evidence["aligned_unit"], "the pod");
    }

    #[test]
    fn wider_than_a_numa_node() {
        // 5 CPUs: more than a NUMA node has. single-numa-node never admits it; restricted
        // admits it on two nodes when their free CPUs hold it (here 3 free: the node-wide
        // check reports it instead).
        let big = guaranteed("p", "Pending", &[5000], &[]);
        let f = crate::rules::testkit::judged(
            check,
            &two_numa("restricted", "container", big.clone()),
            &Settings::default(),
        );
        assert_eq!(f.len(), 1);
        assert!(f[0].summary.contains("only 3 are free"), "{}", f[0].summary);
        let mut snap = two_numa(
            "single-numa-node",
            "container",
            guaranteed("p", "Pending", &[3000], &[]),
        );
        snap.host.cpus = Observed::Ok(crate::topology::CpuTopology::uniform(4, 2, 1));
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(
            f[0].summary
                .contains("container app0 needs 3, more than any one NUMA node has: "),
            "{}",
            f[0].summary
        );
    }
}
