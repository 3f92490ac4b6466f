//! `cpuset-drift`: a running container's cgroup cpuset is not what the checkpoint says.
//!
//! Three views of a container's CPUs are shown side by side: the checkpoint's entry, the
//! cgroup's `cpuset.cpus`, and, when the kubelet's PodResources API answered, the exclusive
//! CPUs the kubelet holds for it in memory (`kubelet_cpus`; where it sides with the cgroup
//! against the file, the file is what changed: see `kubelet-state-divergence`).
//!
//! Exclusive containers get their cpuset when they are created, so a difference is drift at
//! once. Shared-pool containers follow `defaultCpuSet` only at the kubelet's next reconcile
//! (`cpuManagerReconcilePeriod`, 10 s by default) after the default set shrinks or grows, so
//! they count as drifted only when the checkpoint (rewritten whenever the default set
//! changes) is older than that period. The kubelet re-applies a cpuset only when the value
//! it wants changes, so a cpuset rewritten by someone else stays wrong until the kubelet
//! restarts: drift does not heal by itself. Only containers
//! that can be tied to a checkpoint entry are judged: through the pod list's container IDs,
//! or directly by ID for V1 files. The pause container is never in a pod's statuses and is
//! not judged.

use std::collections::HashMap;

use crate::CpuSet;
use crate::checkpoint::{CpuState, EntryKey};
use crate::coverage::{Comparison, KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject, SubjectKind};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{CgroupTree, ContainerCgroup, NodeSnapshot, Observed, PodInfo, PodSource};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("cpuset-drift");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "A container's cgroup cpuset differs from the checkpoint",
    severity: Severity::Warning,
    looks_at: "checkpoint, cgroups",
    fires_when: "a running container's cgroup cpuset differs from its checkpoint entry (exclusive containers at once; shared-pool containers once the checkpoint is older than the reconcile period)",
    event_reason: "CPUSetDrift",
    needs: Needs {
        all: &[One(Source::Checkpoint), One(Source::Cgroups)],
        about: &[Source::Checkpoint],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[Comparison {
        what: "a running container's cgroup cpuset against its entry in `cpu_manager_state` (or the shared pool)",
        from: "1.18 (V2 entries, tied to cgroup leaves through the pod list's container IDs)",
        older: "V1 entries (1.8 to 1.17) are tied to their cgroup leaves directly by container ID, and are the only ones judged without a pod list",
        unknown: "the file's layout decides; the version is not used",
    }]),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::facts::grace_turn),
};

struct Expected<'a> {
    cpus: &'a CpuSet,
    exclusive: bool,
}

/// The checkpoint's assignments by their keys, built once per judgement: a pass over every
/// assignment for each container grew with containers x assignments.
struct Assignments<'a> {
    state: &'a CpuState,
    /// Position of the first assignment of each (pod UID, container name).
    by_container: HashMap<(&'a str, &'a str), usize>,
    /// Position of the first assignment of each container ID (V1 files).
    by_id: HashMap<&'a str, usize>,
    /// The first V3 pod-level set of each pod UID.
    by_pod: HashMap<&'a str, &'a CpuSet>,
}

impl<'a> Assignments<'a> {
    fn new(state: &'a CpuState) -> Self {
        let (mut by_container, mut by_id, mut by_pod) = (HashMap::new(), HashMap::new(), HashMap::new());
        for (i, a) in state.assignments.iter().enumerate() {
            match &a.key {
                EntryKey::Container { pod_uid, container } => {
                    by_container.entry((pod_uid.as_str(), container.as_str())).or_insert(i);
                }
                EntryKey::ContainerId { container_id } => {
                    by_id.entry(container_id.as_str()).or_insert(i);
                }
            }
        }
        for (uid, cpus) in &state.pod_assignments {
            by_pod.entry(uid.as_str()).or_insert(cpus);
        }
        Assignments {
            state,
            by_container,
            by_id,
            by_pod,
        }
    }

    /// What the checkpoint gives the container `container` of `pod` whose leaf is `id`: the
    /// first assignment keyed by either, else the pod's V3 set, else the shared pool.
    fn expected_for(&self, pod: Option<&PodInfo>, container: Option<&str>, id: &str) -> Expected<'a> {
        let named = pod
            .zip(container)
            .and_then(|(p, c)| self.by_container.get(&(p.uid.as_str(), c)));
        let first = named.into_iter().chain(self.by_id.get(id)).min();
        if let Some(&i) = first {
            return Expected {
                cpus: &self.state.assignments[i].cpus,
                exclusive: true,
            };
        }
        // Pod-level resources (V3): the pod's shared containers run on the pod's CPUs.
        if let Some(cpus) = pod.and_then(|p| self.by_pod.get(p.uid.as_str())) {
            return Expected { cpus, exclusive: false };
        }
        Expected {
            cpus: &self.state.default_cpus,
            exclusive: false,
        }
    }
}

/// The cpuset the container really has: `cpuset.cpus`, or the effective set when that is
/// empty (v2: inherited from the parent).
fn actual(leaf: &ContainerCgroup) -> Option<&CpuSet> {
    leaf.cpus.as_ref().or(leaf.effective_cpus.as_ref())
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let Observed::Ok(file) = &snap.host.checkpoint else {
        return vec![];
    };
    let Ok(state) = &file.state else { return vec![] };
    if state.policy_name != "static" {
        return vec![];
    }
    let Observed::Ok(tree) = &snap.host.cgroups else {
        return vec![];
    };
    let grace = settings.reconcile_grace(snap);
    let shared_judged = file.age_seconds.is_some_and(|age| age > grace);

    // (pod, container name, leaf)
    let mut judged: Vec<(Option<&PodInfo>, Option<String>, &ContainerCgroup)> = Vec::new();
    match snap.pods.source {
        PodSource::Api | PodSource::File => {
            let leaves = tree.containers_by_id();
            for pod in snap.pods.bound.iter().filter(|p| !p.is_terminal()) {
                for c in &pod.containers {
                    if let Some((_, leaf)) = c.container_id.as_deref().and_then(|id| leaves.get(id)) {
                        judged.push((Some(pod), Some(c.name.clone()), leaf));
                    }
                }
            }
        }
        PodSource::PodResources | PodSource::Cgroups => {
            judged.extend(v1_leaves(state, tree).into_iter().map(|l| (None, None, l)))
        }
    }

    let assignments = Assignments::new(state);
    let mut findings = Vec::new();
    for (pod, container, leaf) in judged {
        if leaf.processes.is_empty() {
            continue; // an exited container's leaf about to be removed
        }
        let want = assignments.expected_for(pod, container.as_deref(), &leaf.id);
        if !want.exclusive && !shared_judged {
            continue;
        }
        let Some(have) = actual(leaf) else { continue };
        if have == want.cpus {
            continue;
        }
        let subject = pod
            .map_or_else(
                || match snap.owner_of_container_id(&leaf.id) {
                    Some((uid, _)) => Subject::pod_uid(&uid),
                    None => Subject {
                        kind: SubjectKind::Pod,
                        ..Default::default()
                    },
                },
                Subject::pod,
            )
            .with_container(container.clone());
        let kind = if want.exclusive { "exclusive" } else { "shared" };
        // The third view: the CPUs the kubelet holds for the container in memory (its
        // PodResources API; empty on the shared pool).
        let kubelet_cpus = match (snap.host.kubelet_view.ok(), pod, container.as_deref()) {
            (Some(view), Some(p), Some(c)) => view
                .pods
                .iter()
                .find(|k| k.namespace == p.namespace && k.name == p.name)
                .and_then(|k| k.container_cpus(c))
                .cloned(),
            _ => None,
        };
        let kubelet_says = match &kubelet_cpus {
            Some(k) if k.is_empty() => ", and the kubelet's memory gives it no exclusive CPUs".to_string(),
            Some(k) => format!(", and the kubelet's memory holds {k}"),
            None => String::new(),
        };
        let who = container.clone().unwrap_or_else(|| leaf.id.clone());
        let process_cpus = leaf
            .processes
            .iter()
            .filter_map(|p| p.cpus_allowed.as_ref())
            .fold(CpuSet::new(), |acc, c| acc.union(c));
        findings.push(
            Finding::new(
                ID,
                Severity::Warning,
                subject.clone(),
                format!(
                    "Container {who} of {} runs on CPUs {have}, but the checkpoint gives it {} ({kind}){kubelet_says}",
                    subject.display(),
                    want.cpus.human()
                ),
                if kubelet_cpus.as_ref() == Some(have) && want.exclusive {
                    format!(
                        "the kubelet's memory agrees with the cgroup ({have}): the checkpoint file is what changed, and \
                         restarting the kubelet would move the container to the file's {}; see kubelet-state-divergence \
                         for how to make the file and the kubelet agree",
                        want.cpus.human()
                    )
                } else {
                    format!(
                        "find and stop whatever rewrote {path}/cpuset.cpus (another agent, a manual edit, a runtime \
                         hook); the kubelet re-applies a cpuset only when the one it wants changes, so restart it to \
                         restore {}: systemctl restart kubelet on {}",
                        want.cpus.human(),
                        snap.node,
                        path = leaf.path
                    )
                },
            )
            .with("pod_uid", subject.uid.clone())
            .with("container", container.clone())
            .with("container_id", leaf.id.clone())
            .with("cgroup", leaf.path.clone())
            .with("kind", kind)
            .with("checkpoint_cpus", want.cpus.human())
            .with("cgroup_cpus", have.to_string())
            .with("kubelet_cpus", kubelet_cpus.as_ref().map(CpuSet::human))
            .with("effective_cpus", leaf.effective_cpus.as_ref().map(|c| c.to_string()))
            .with(
                "process_cpus",
                (!process_cpus.is_empty()).then(|| process_cpus.to_string()),
            )
            .with("checkpoint_age_seconds", file.age_seconds.map(|a| a.round()))
            .with("grace_seconds", grace),
        );
    }
    findings
}

/// Leaves named by V1 entries (container IDs), the only ones judged without a pod list.
fn v1_leaves<'a>(state: &CpuState, tree: &'a CgroupTree) -> Vec<&'a ContainerCgroup> {
    let leaves = tree.containers_by_id();
    state
        .assignments
        .iter()
        .filter_map(|a| match &a.key {
            EntryKey::ContainerId { container_id } => leaves.get(container_id.as_str()).map(|&(_, l)| l),
            EntryKey::Container { .. } => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{SnapshotBuilder, leaf, pod, pod_cgroup};

    fn node(cgroup_cpus_exclusive: &str, cgroup_cpus_shared: &str, age: f64) -> NodeSnapshot {
        SnapshotBuilder::static_node("0-1", &[("p1", "app", "2-3")])
            .with_pod_list(&[
                pod("p1", "exec-1", "Running", &[("app", "c1")]),
                pod("p2", "web", "Running", &[("web", "c2")]),
            ])
            .with_pod_cgroups(vec![
                pod_cgroup(
                    "p1",
                    vec![leaf("c1", cgroup_cpus_exclusive, 1), leaf("pause1", "0-3", 1)],
                ),
                pod_cgroup("p2", vec![leaf("c2", cgroup_cpus_shared, 1)]),
            ])
            .checkpoint_age(age)
            .build()
    }

    fn drifted(snap: &NodeSnapshot) -> Vec<(String, String, String)> {
        crate::rules::testkit::judged(check, snap, &Settings::default())
            .iter()
            .map(|f| {
                (
                    f.evidence["container"].as_str().unwrap().to_string(),
                    f.evidence["kind"].as_str().unwrap().to_string(),
                    f.evidence["cgroup_cpus"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn table() {
        assert!(
            drifted(&node("2-3", "0-1", 3600.0)).is_empty(),
            "in sync; the pause leaf is not judged"
        );
        assert_eq!(
            drifted(&node("2", "0-1", 3600.0)),
            [("app".into(), "exclusive".into(), "2".into())]
        );
        assert_eq!(
            drifted(&node("2-3", "0-3", 3600.0)),
            [("web".into(), "shared".into(), "0-3".into())]
        );
        assert!(
            drifted(&node("2-3", "0-3", 4.0)).is_empty(),
            "shared pool may lag one reconcile period"
        );
        assert_eq!(
            drifted(&node("0-3", "0-3", 4.0)),
            [("app".into(), "exclusive".into(), "0-3".into())],
            "exclusive drift is immediate"
        );
    }

    #[test]
    fn grace_follows_settings_and_kubelet_config() {
        let snap = node("2-3", "0-3", 30.0);
        assert_eq!(drifted(&snap).len(), 1);
        let settings = Settings {
            reconcile_grace_seconds: Some(60.0),
            ..Default::default()
        };
        assert!(crate::rules::testkit::judged(check, &snap, &settings).is_empty());
    }

    #[test]
    fn v2_inherited_cpuset_uses_effective() {
        let mut snap = node("2-3", "0-1", 3600.0);
        if let Observed::Ok(tree) = &mut snap.host.cgroups {
            let l = &mut tree.pods[0].containers[0];
            l.cpus = None;
            l.effective_cpus = Some(CpuSet::parse("0-3").unwrap());
        }
        assert_eq!(drifted(&snap), [("app".into(), "exclusive".into(), "0-3".into())]);
    }

    #[test]
    fn v1_without_pod_list_judges_by_id() {
        let state = crate::Checkpoint::parse(
            br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"c1":"2-3"},"checksum":0}"#,
        )
        .unwrap()
        .state()
        .unwrap();
        let snap = SnapshotBuilder::from_state(state)
            .with_pod_cgroups(vec![pod_cgroup("p1", vec![leaf("c1", "1-3", 1)])])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].subject.uid.as_deref(), Some("p1"));
        assert_eq!(f[0].evidence["container_id"], "c1");
    }

    #[test]
    fn the_first_assignment_of_either_key_then_the_pods_set_then_the_shared_pool() {
        use crate::checkpoint::Assignment;
        let set = |s: &str| CpuSet::parse(s).unwrap();
        let by_name = |uid: &str, c: &str| EntryKey::Container {
            pod_uid: uid.into(),
            container: c.into(),
        };
        let by_id = |id: &str| EntryKey::ContainerId {
            container_id: id.into(),
        };
        let state = CpuState {
            policy_name: "static".into(),
            default_cpus: set("0-1"),
            assignments: vec![
                Assignment {
                    key: by_id("c9"),
                    cpus: set("6"),
                },
                Assignment {
                    key: by_name("p1", "app"),
                    cpus: set("2-3"),
                },
                Assignment {
                    key: by_id("c1"),
                    cpus: set("4"),
                },
                Assignment {
                    key: by_name("p1", "app"),
                    cpus: set("5"),
                },
            ],
            pod_assignments: vec![("p2".into(), set("7")), ("p2".into(), set("8"))],
        };
        let index = Assignments::new(&state);
        let (p1, p2) = (pod("p1", "x", "Running", &[]), pod("p2", "y", "Running", &[]));
        let want = |p: Option<&PodInfo>, c: Option<&str>, id: &str| {
            let e = index.expected_for(p, c, id);
            (e.cpus.to_string(), e.exclusive)
        };
        // Both keys name it: the earlier entry; a key given twice: its first entry.
        assert_eq!(want(Some(&p1), Some("app"), "c1"), ("2-3".into(), true));
        assert_eq!(want(Some(&p1), Some("app"), "c9"), ("6".into(), true));
        assert_eq!(want(Some(&p1), Some("app"), "c0"), ("2-3".into(), true));
        // By ID alone (V1, no pod list); another container of the pod is not the named one.
        assert_eq!(want(None, None, "c1"), ("4".into(), true));
        assert_eq!(want(Some(&p1), Some("sidecar"), "c0"), ("0-1".into(), false));
        // The pod's first V3 set, then the shared pool.
        assert_eq!(want(Some(&p2), Some("app"), "c0"), ("7".into(), false));
        assert_eq!(want(None, None, "c0"), ("0-1".into(), false));
    }

    #[test]
    fn none_policy_is_not_judged() {
        let snap = SnapshotBuilder::static_node("0-1", &[])
            .with_raw_checkpoint(br#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#)
            .with_pod_list(&[pod("p2", "web", "Running", &[("web", "c2")])])
            .with_pod_cgroups(vec![pod_cgroup("p2", vec![leaf("c2", "0", 1)])])
            .build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }

    #[test]
    fn the_kubelets_view_is_the_third_column() {
        use crate::rules::testkit::{kubelet_pod, kubelet_view};
        let mut snap = node("2,5", "0-1", 3600.0);
        snap.host.kubelet_view = Observed::Ok(kubelet_view(
            vec![kubelet_pod("default", "exec-1", &[], &[("app", "2,5")])],
            None,
        ));
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].evidence["checkpoint_cpus"], "2-3");
        assert_eq!(f[0].evidence["cgroup_cpus"], "2,5");
        assert_eq!(f[0].evidence["kubelet_cpus"], "2,5");
        assert!(
            f[0].summary
                .ends_with("(exclusive), and the kubelet's memory holds 2,5"),
            "{}",
            f[0].summary
        );
        // The kubelet sides with the cgroup: the file is what changed, and restarting the
        // kubelet would apply it.
        assert!(f[0].remedy.contains("kubelet-state-divergence"), "{}", f[0].remedy);
        assert!(!f[0].remedy.contains("systemctl restart kubelet"), "{}", f[0].remedy);
        // Without the kubelet's view, no third column.
        snap.host.kubelet_view = Observed::Missing { path: "x".into() };
        assert_eq!(
            crate::rules::testkit::judged(check, &snap, &Settings::default())[0]
                .evidence
                .get("kubelet_cpus"),
            None
        );
    }
}
