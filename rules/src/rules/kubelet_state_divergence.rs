//! `kubelet-state-divergence`: the kubelet's CPU manager in memory is not what its checkpoint
//! file says.
//!
//! The kubelet writes `cpu_manager_state` whenever its state changes and reads it only when it
//! starts, so a file edited or replaced while it runs goes unnoticed until the next restart,
//! when the file wins (containers are moved to the file's CPUs at the first reconcile) or the
//! kubelet refuses to start (the file's sets no longer add up). Its PodResources API shows the
//! memory ([`crate::kubelet_view`]); two comparisons:
//!
//! - per container the kubelet lists: its exclusive CPUs (`cpu_ids`) against the file's entry
//!   for the same pod and container (none on either side counts as empty). Before 1.23 a
//!   container of the shared pool is listed with the whole shared pool (kubernetes#97415), so a
//!   container listed on exactly the file's `defaultCpuSet` without an entry is not compared
//!   unless the kubelet is known to be 1.23 or later;
//! - `GetAllocatableResources` against the online CPUs minus the reserved ones as the kubelet's
//!   configuration now computes them: only with a kubelet known to be 1.26 or later. Before
//!   kubernetes#112913 the call answers the CPUs that were unassigned when the kubelet started
//!   (a healthy 1.23 kubelet restarted while a Guaranteed pod runs answers none of that pod's
//!   CPUs); with an older or unknown kubelet nothing is compared and [`notes`] says so.
//!
//! Judged only with the static policy in the file, and only when the file did not change
//! between its reading and the kubelet's answer (else the two are different moments).
//!
//! The same holds for the memory manager and the device manager: `List` gives each
//! container's memory blocks (`memory`, with their NUMA nodes) and devices (`devices`), which
//! are compared with `memory_manager_state` and `kubelet_internal_checkpoint` for the pods whose
//! UID is known (their entries are keyed by UID, and blocks or device IDs alone do not name a
//! pod). A file written within the reconcile grace is not compared (a write may be in flight),
//! nor a memory file when the kubelet lists no memory for any container (a kubelet before 1.21,
//! or its memory manager's policy is `None`).

use crate::CpuSet;
use crate::checkpoint::{CpuState, EntryKey};
use crate::coverage::{Comparison, KubeletVersions, Need::One, Needs, Source};
use crate::facts::checkpoint_path;
use crate::finding::{Finding, Severity, Subject, SubjectKind};
use crate::kubelet_version;
use crate::kubelet_view::{KubeletPod, KubeletView};
use crate::rules::{CPU_MANAGER_STATE_STALE, RuleInfo};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed};
use crate::text::{human_bytes, repair_cpu_state_remedy, unix_to_rfc3339};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("kubelet-state-divergence");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "The kubelet's CPU, memory or device assignments in memory differ from its checkpoint files",
    severity: Severity::Critical,
    looks_at: "PodResources API, cpu_manager_state, memory_manager_state, kubelet_internal_checkpoint, online CPUs, kubelet config",
    fires_when: "a container the kubelet lists has other exclusive CPUs, memory blocks or devices in memory than in its checkpoint files, or the kubelet's allocatable CPUs differ from the online CPUs minus the reserved ones: the next kubelet restart moves containers, hands out what is in use, or fails",
    event_reason: "KubeletStateDivergence",
    needs: Needs {
        all: &[
            One(Source::Podresources),
            One(Source::Checkpoint),
            One(Source::MemoryState),
            One(Source::DeviceState),
        ],
        about: &[Source::Checkpoint, Source::MemoryState, Source::DeviceState],
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
    check,
    condition: Some(CPU_MANAGER_STATE_STALE),
    gauge: None,
    next_judgement: Some(crate::facts::grace_turn),
};

/// The file's entry of `uid`/`container`, empty when it has none.
fn file_cpus(state: &CpuState, uid: &str, container: &str) -> CpuSet {
    state
        .assignments
        .iter()
        .find(|a| matches!(&a.key, EntryKey::Container { pod_uid, container: c } if pod_uid == uid && c == container))
        .map(|a| a.cpus.clone())
        .unwrap_or_default()
}

/// The UID a listed pod has in the file: its only known UID, or the one of its known UIDs the
/// file has entries for (a pod recreated under the same name).
fn uid_in_file<'a>(pod: &'a KubeletPod, state: &CpuState) -> Option<&'a str> {
    let with_entries: Vec<&str> = pod
        .uids
        .iter()
        .map(String::as_str)
        .filter(|u| {
            state
                .assignments
                .iter()
                .any(|a| matches!(&a.key, EntryKey::Container { pod_uid, .. } if pod_uid == u))
        })
        .collect();
    match (pod.uids.as_slice(), with_entries.as_slice()) {
        ([only], _) => Some(only.as_str()),
        (_, [one]) => Some(one),
        _ => None,
    }
}

/// The file's entries for containers named as in `pod` whose CPUs equal the kubelet's: how a
/// pod of unknown UID is found in the file.
fn uid_by_cpus<'a>(pod: &KubeletPod, state: &'a CpuState) -> Option<&'a str> {
    pod.containers.iter().filter(|c| !c.cpus.is_empty()).find_map(|c| {
        state.assignments.iter().find_map(|a| match &a.key {
            EntryKey::Container { pod_uid, container } if *container == c.name && a.cpus == c.cpus => {
                Some(pod_uid.as_str())
            }
            _ => None,
        })
    })
}

fn restart_remedy(snap: &NodeSnapshot, path: &str, what_restart_does: &str) -> String {
    format!(
        "{what_restart_does} Make them agree before the kubelet restarts for another reason: if the file is what you \
         want (a repair or a deliberate edit), restart the kubelet now so it loads it (`systemctl restart kubelet` on \
         {node}; `repair cpu-state --apply --restart-kubelet` does this around its own write); if the file was \
         changed by mistake or by another tool, put the kubelet's view back before any restart: the kubelet writes its \
         whole state over the file at its next change (any pod with whole CPUs admitted to or removed from the node), \
         or restore a backup that matches its view ({path}.nodemedic-backup-*, written by every nodemedic repair), or \
         stop the kubelet, drain the node and remove the file (the kubelet rebuilds it empty). Stale entries in a file \
         that is otherwise right are freed by {repair}",
        node = snap.node,
        repair = repair_cpu_state_remedy(&snap.node),
    )
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let Observed::Ok(view) = &snap.host.kubelet_view else {
        return vec![];
    };
    let mut findings = cpus(snap, view);
    let grace = settings.reconcile_grace(snap);
    findings.extend(memory(snap, view, grace));
    findings.extend(devices(snap, view, grace));
    findings
}

fn cpus(snap: &NodeSnapshot, view: &KubeletView) -> Vec<Finding> {
    let Observed::Ok(file) = &snap.host.checkpoint else {
        return vec![];
    };
    let Ok(state) = &file.state else { return vec![] };
    if state.policy_name != "static" || view.checkpoint_changed {
        return vec![];
    }
    let path = checkpoint_path(snap);
    let mut findings = containers(snap, view, state, &path, file.modified_at);
    findings.extend(allocatable(snap, view, &path));
    findings
}

/// The listed pods whose one UID is known, with it.
fn known_uid(pod: &KubeletPod) -> Option<&str> {
    match pod.uids.as_slice() {
        [only] => Some(only.as_str()),
        _ => None,
    }
}

fn pod_subject(pod: &KubeletPod, uid: &str, container: &str) -> Subject {
    Subject {
        kind: SubjectKind::Pod,
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: Some(uid.to_string()),
        ..Default::default()
    }
    .with_container(Some(container.to_string()))
}

/// A memory block as `(resource, bytes, sorted NUMA nodes)`, the shape both sides compare in.
type Block = (String, u64, Vec<i64>);

fn show_blocks(blocks: &[Block]) -> String {
    if blocks.is_empty() {
        return "no memory blocks".to_string();
    }
    blocks
        .iter()
        .map(|(r, b, n)| {
            let nodes = n.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
            format!("{} {r} on NUMA node {nodes}", human_bytes(*b))
        })
        .collect::<Vec<_>>()
        .join(" and ")
}

fn memory(snap: &NodeSnapshot, view: &KubeletView, grace: f64) -> Vec<Finding> {
    let Observed::Ok(file) = &snap.host.managers.memory else {
        return vec![];
    };
    let Some(state) = file.accepted_state() else {
        return vec![];
    };
    let listed_any = view
        .pods
        .iter()
        .flat_map(|p| &p.containers)
        .any(|c| !c.memory.is_empty());
    if !state.policy_name.eq_ignore_ascii_case("static") || !listed_any || file.age_seconds.is_none_or(|a| a < grace) {
        return vec![];
    }
    let mut findings = Vec::new();
    for pod in &view.pods {
        let Some(uid) = known_uid(pod) else { continue };
        // A pod with pod-level memory (1.36 podEntries) holds its blocks as a pod; how the
        // kubelet reports those per container is not settled, so such pods are not compared.
        if state.pod_assignments.iter().any(|(p, _)| p == uid) {
            continue;
        }
        for c in &pod.containers {
            let mut kubelet: Vec<Block> = c
                .memory
                .iter()
                .map(|m| (m.resource.clone(), m.bytes, m.numa_nodes.clone()))
                .collect();
            let mut in_file: Vec<Block> = state
                .assignments
                .iter()
                .filter(|a| a.pod_uid == uid && a.container == c.name)
                .flat_map(|a| &a.blocks)
                .map(|b| {
                    let mut nodes = b.numa_nodes.clone();
                    nodes.sort_unstable();
                    nodes.dedup();
                    (b.resource.clone(), b.bytes, nodes)
                })
                .collect();
            kubelet.sort();
            in_file.sort();
            if kubelet == in_file {
                continue;
            }
            let restart = format!(
                "At the next kubelet restart the file wins: the memory manager restores {} for container {} (the \
                 kubelet refuses to start when the file's machine state no longer adds up).",
                show_blocks(&in_file),
                c.name
            );
            findings.push(
                Finding::new(
                    ID,
                    Severity::Critical,
                    pod_subject(pod, uid, &c.name),
                    format!(
                        "The kubelet's memory manager holds {} for container {} of {} in memory, but {} has {}: the \
                         file was changed while the kubelet runs",
                        show_blocks(&kubelet),
                        c.name,
                        pod.display(),
                        file.path,
                        show_blocks(&in_file)
                    ),
                    manager_restart_remedy(snap, &file.path, &restart),
                )
                .with("resource_kind", "memory")
                .with("pod_uid", uid)
                .with("container", c.name.clone())
                .with("kubelet_memory", blocks_json(&kubelet))
                .with("checkpoint_memory", blocks_json(&in_file))
                .with("kubelet_started", started(snap))
                .with("path", file.path.as_str())
                .with("socket", view.socket.clone()),
            );
        }
    }
    findings
}

fn blocks_json(blocks: &[Block]) -> serde_json::Value {
    blocks
        .iter()
        .map(|(r, b, n)| serde_json::json!({"resource": r, "bytes": b, "numa_nodes": n}))
        .collect()
}

fn devices(snap: &NodeSnapshot, view: &KubeletView, grace: f64) -> Vec<Finding> {
    use std::collections::{BTreeMap, BTreeSet};
    let Observed::Ok(file) = &snap.host.managers.devices else {
        return vec![];
    };
    let Some(state) = file.accepted_state() else {
        return vec![];
    };
    if file.age_seconds.is_none_or(|a| a < grace) {
        return vec![];
    }
    let mut findings = Vec::new();
    for pod in &view.pods {
        let Some(uid) = known_uid(pod) else { continue };
        for c in &pod.containers {
            let mut kubelet: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
            for d in &c.devices {
                kubelet
                    .entry(d.resource.as_str())
                    .or_default()
                    .extend(d.ids.iter().map(String::as_str));
            }
            let mut in_file: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
            for e in state
                .entries
                .iter()
                .filter(|e| e.pod_uid == uid && e.container == c.name)
            {
                in_file
                    .entry(e.resource.as_str())
                    .or_default()
                    .extend(e.devices.iter().map(|d| d.id.as_str()));
            }
            kubelet.retain(|_, ids| !ids.is_empty());
            in_file.retain(|_, ids| !ids.is_empty());
            let resources: BTreeSet<&str> = kubelet.keys().chain(in_file.keys()).copied().collect();
            for resource in resources {
                let empty = BTreeSet::new();
                let (k, f) = (
                    kubelet.get(resource).unwrap_or(&empty),
                    in_file.get(resource).unwrap_or(&empty),
                );
                if k == f {
                    continue;
                }
                let show = |ids: &BTreeSet<&str>| {
                    if ids.is_empty() {
                        "none".to_string()
                    } else {
                        ids.iter().copied().collect::<Vec<_>>().join(", ")
                    }
                };
                let restart = format!(
                    "At the next kubelet restart the file wins: the device manager restores {resource} {} for \
                     container {} and marks them in use, so devices the container really uses ({}) can be handed to \
                     another pod, or devices nobody uses stay allocated.",
                    show(f),
                    c.name,
                    show(k)
                );
                findings.push(
                    Finding::new(
                        ID,
                        Severity::Critical,
                        pod_subject(pod, uid, &c.name),
                        format!(
                            "The kubelet's device manager holds {resource} {} for container {} of {} in memory, but {} \
                             has {}: the file was changed while the kubelet runs",
                            show(k),
                            c.name,
                            pod.display(),
                            file.path,
                            show(f)
                        ),
                        manager_restart_remedy(snap, &file.path, &restart),
                    )
                    .with("resource_kind", "devices")
                    .with("resource", resource)
                    .with("pod_uid", uid)
                    .with("container", c.name.clone())
                    .with("kubelet_device_ids", k.iter().copied().collect::<Vec<_>>())
                    .with("checkpoint_device_ids", f.iter().copied().collect::<Vec<_>>())
                    .with("kubelet_started", started(snap))
                    .with("path", file.path.as_str())
                    .with("socket", view.socket.clone()),
                );
            }
        }
    }
    findings
}

fn manager_restart_remedy(snap: &NodeSnapshot, path: &str, what_restart_does: &str) -> String {
    format!(
        "{what_restart_does} Do not restart the kubelet until they agree: the kubelet writes its whole state over \
         {path} at its next change (a pod admitted or removed that uses this manager), which puts its view back; if \
         the file is what you want instead, restart the kubelet now so it loads it (`systemctl restart kubelet` on \
         {node}). nodemedic does not edit this file",
        node = snap.node
    )
}

fn started(snap: &NodeSnapshot) -> Option<String> {
    snap.host
        .kubelet
        .ok()
        .and_then(|k| k.started_at)
        .and_then(unix_to_rfc3339)
}

fn containers(
    snap: &NodeSnapshot,
    view: &KubeletView,
    state: &CpuState,
    path: &str,
    modified_at: Option<f64>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    // Before 1.23 `cpu_ids` of a shared-pool container is the whole shared pool
    // (kubernetes#97415): such a listing is no divergence unless the kubelet is known to be newer.
    let lists_only_exclusive = kubelet_version::in_force(snap).is_ok_and(|v| v.at_least(1, 23));
    for pod in &view.pods {
        let uid = uid_in_file(pod, state).or_else(|| uid_by_cpus(pod, state));
        // A pod with pod-level resources (V3 files) holds its CPUs as a pod; how the kubelet
        // reports those per container is not settled, so such pods are not compared.
        if uid.is_some_and(|u| state.pod_assignments.iter().any(|(p, _)| p == u)) {
            continue;
        }
        for c in &pod.containers {
            let in_file = match uid {
                Some(uid) => file_cpus(state, uid, &c.name),
                // No UID: only a kubelet pinning that no entry of that name has can be told.
                None if c.cpus.is_empty() => continue,
                None => CpuSet::new(),
            };
            if in_file == c.cpus {
                continue;
            }
            if in_file.is_empty() && c.cpus == state.default_cpus && !lists_only_exclusive {
                continue;
            }
            let subject = Subject {
                kind: SubjectKind::Pod,
                namespace: Some(pod.namespace.clone()),
                name: Some(pod.name.clone()),
                uid: uid.map(str::to_string),
                ..Default::default()
            }
            .with_container(Some(c.name.clone()));
            let show = |s: &CpuSet| {
                if s.is_empty() {
                    "no exclusive CPUs".to_string()
                } else {
                    format!("CPUs {s}")
                }
            };
            // Without the pod's UID the file can only be searched by container name and CPUs.
            let in_file_shown = match uid {
                Some(_) => format!("{} for it", show(&in_file)),
                None => format!("no entry for a container {} on these CPUs", c.name),
            };
            let restart = if uid.is_none() {
                format!(
                    "At the next kubelet restart the file wins: whatever it holds for this pod (its UID is not known \
                     here, and no entry of a container {} holds CPUs {}) is what the container gets at the first \
                     reconcile (or the kubelet refuses to start when the file's sets no longer cover every CPU; see \
                     checkpoint-invalid-state).",
                    c.name, c.cpus
                )
            } else if in_file.is_empty() {
                format!(
                    "At the next kubelet restart the file wins: container {} loses its exclusive CPUs {} and joins the \
                     shared pool (or the kubelet refuses to start when the file's sets no longer cover every CPU; see \
                     checkpoint-invalid-state).",
                    c.name, c.cpus
                )
            } else {
                format!(
                    "At the next kubelet restart the file wins: container {} is moved from {} to CPUs {} at the first \
                     reconcile (or the kubelet refuses to start when the file's sets no longer cover every CPU; see \
                     checkpoint-invalid-state).",
                    c.name,
                    show(&c.cpus),
                    in_file
                )
            };
            findings.push(
                Finding::new(
                    ID,
                    Severity::Critical,
                    subject,
                    format!(
                        "The kubelet pins container {} of {} to {} in memory, but {path} has {in_file_shown}: the file \
                         was changed while the kubelet runs",
                        c.name,
                        pod.display(),
                        show(&c.cpus),
                    ),
                    restart_remedy(snap, path, &restart),
                )
                .with("pod_uid", uid.map(str::to_string))
                .with("container", c.name.clone())
                .with("kubelet_cpus", c.cpus.human())
                .with("checkpoint_cpus", in_file.human())
                .with(
                    "checkpoint_modified",
                    modified_at.and_then(|t| unix_to_rfc3339(t as i64)),
                )
                .with("kubelet_started", started(snap))
                .with("path", path)
                .with("socket", view.socket.clone()),
            );
        }
    }
    findings
}

/// What the report says about the comparisons this rule could not make: the allocatable CPUs
/// of a kubelet not known to be 1.26 or later. Empty when there was nothing to compare.
pub fn notes(snap: &NodeSnapshot) -> Vec<String> {
    let Observed::Ok(view) = &snap.host.kubelet_view else {
        return vec![];
    };
    let Observed::Ok(kubelet_has) = &view.allocatable_cpus else {
        return vec![];
    };
    match kubelet_version::allocatable_is_all_cpus(snap) {
        Ok(()) => vec![],
        Err(why) => vec![format!(
            "{ID}: the kubelet's allocatable CPUs ({}) were not compared with the online CPUs minus the reserved \
             ones: {why}",
            kubelet_has.human()
        )],
    }
}

fn allocatable(snap: &NodeSnapshot, view: &KubeletView, path: &str) -> Option<Finding> {
    let Observed::Ok(kubelet_has) = &view.allocatable_cpus else {
        return None;
    };
    // Before 1.26 the answer is the CPUs unassigned at the kubelet's start: no comparison.
    kubelet_version::allocatable_is_all_cpus(snap).ok()?;
    let topo = snap.host.cpus.ok()?;
    let config = snap.host.kubelet.ok()?;
    let reserved = config.cpu_manager.reserved_cpus(topo).ok()?;
    let expected = topo.all().difference(&reserved);
    if *kubelet_has == expected {
        return None;
    }
    let online = topo.all();
    let version = kubelet_version::in_force(snap).map(ToString::to_string).ok();
    let (kubelet_has, expected, reserved, online) =
        (kubelet_has.human(), expected.human(), reserved.human(), online.human());
    let restart = format!(
        "The kubelet hands out CPUs {kubelet_has}, but the online CPUs ({online}) minus the reserved ones its \
         configuration names now ({reserved}) are {expected}: CPUs were taken offline or brought online since it \
         started, or its reserved CPUs were changed in its configuration without a restart (its version, {}, \
         answers every CPU it may hand out, whatever it has assigned). At the next restart it computes {expected}. If the online CPUs changed, a checkpoint written for the old set fails its state check \
         (\"current set of available CPUs doesn't match with CPUs in state\") and the kubelet refuses to start until \
         the file is removed; if only the reserved CPUs changed, it refuses to start when an entry holds a newly \
         reserved CPU (checkpoint-invalid-state reports that before the restart).",
        version.as_deref().unwrap_or_default()
    );
    Some(
        Finding::new(
            ID,
            Severity::Critical,
            Subject::node(&snap.node),
            format!(
                "The kubelet's allocatable CPUs ({kubelet_has}) differ from the online CPUs minus the reserved ones \
                 ({expected}) on {}",
                snap.node
            ),
            format!(
                "{restart} Either put the configuration back to what the kubelet runs with, or plan the change: drain \
                 the node, stop the kubelet, remove {path} and start the kubelet (the documented procedure for a \
                 changed CPU set)"
            ),
        )
        .with("kubelet_allocatable_cpus", kubelet_has)
        .with("online_cpus", online)
        .with("reserved_cpus", reserved)
        .with("expected_cpus", expected)
        .with("kubelet_version", version)
        .with("kubelet_started", started(snap))
        .with("path", path)
        .with("socket", view.socket.clone()),
    )
}

#[cfg(test)]
mod tests;
