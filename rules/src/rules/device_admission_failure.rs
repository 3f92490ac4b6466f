//! `device-admission-failure`: pods refused for devices, NUMA locality or DRA devices while
//! stale checkpoint entries hold what they needed.
//!
//! Three refusals, each tied to the stale entries that explain it:
//! - `UnexpectedAdmissionError` with the device manager's `Allocate failed due to requested
//!   number of devices unavailable for <resource>` (kubernetes #137317, #130172): the stale
//!   entries of `kubelet_internal_checkpoint` that hold devices of that resource;
//! - `TopologyAffinityError` (`Resources cannot be allocated with Topology locality`): the
//!   stale memory manager entries (NUMA memory that looks reserved, kubernetes #129819) and
//!   the stale device entries, with the NUMA nodes they hold;
//! - the kubelet's `FailedPrepareDynamicResources` Event on a pod waiting to start, whose
//!   message names a device `already allocated to different claim <uid>`
//!   (dra-driver-nvidia-gpu #1278): the stale prepared claim with that UID or device.
//!
//! A refusal with nothing stale behind it is `admission-rejection`'s (a node that is simply
//! full). Pods count while younger than `rejection_window_seconds`, as for `admission-rejection`;
//! Events are read for the pods with ResourceClaims on this node that wait to start, while the
//! node holds prepared claims. A `TopologyAffinityError` is tied to the stale entries of the
//! node, not to the NUMA nodes the refused pod asked for (the pod's hints are not in its
//! status): the finding names what is held so that a person can tell.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::coverage::{Comparison, KubeletVersions, Need::One, Needs, Source};
use crate::facts::{Facts, StaleClaim, stale_memory_bytes};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, PodInfo};
use crate::text::{LISTED, device_state_remedy, dra_claim_remedy, human_bytes, memory_state_remedy};

/// What to do when the device manager refuses devices that only stale entries hold: its memory
/// kept them (the admission's own clean-up did not drop them), or leaks them where the file
/// does not show it (kubernetes #130172); a restart rebuilds its allocations from the file, and
/// the next admission drops the inactive pods' entries.
fn device_refusal_remedy(node: &str, path: &str, resource: &str) -> String {
    format!(
        "the device manager drops the devices of inactive pods at each admission, so a refusal means its memory still \
         holds them (its pod sources were not ready, or an allocation leaked them: kubernetes #130172, #137317): \
         restart the kubelet (systemctl restart kubelet on {node}); it restores {path}, and the next admission of a pod \
         asking for {resource} drops the entries of pods that are gone. The refused pods are never retried: delete them \
         (kubectl nodemedic repair {node} failed-pods) so that their controllers create new ones. nodemedic does not \
         edit this file"
    )
}

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("device-admission-failure");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Pods are refused devices, NUMA locality or DRA devices that stale entries hold",
    severity: Severity::Critical,
    looks_at: "refused pods, Events of pods waiting to start, the stale memory, device and DRA entries",
    fires_when: "UnexpectedAdmissionError (devices unavailable), TopologyAffinityError or FailedPrepareDynamicResources (already allocated to a different claim) while stale entries hold what was refused",
    event_reason: "DeviceAdmissionFailure",
    needs: Needs {
        all: &[
            One(Source::Pods),
            One(Source::MemoryState),
            One(Source::DeviceState),
            One(Source::DraState),
        ],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[Comparison {
        what: "refused pods (`UnexpectedAdmissionError` with `requested number of devices unavailable`, `TopologyAffinityError`) and `FailedPrepareDynamicResources` Events (`already allocated to different claim`) against the stale memory, device and DRA entries",
        from: "each manager's first file: memory 1.21, devices (V1 before 1.20, V2 from 1.20), DRA 1.27",
        older: "a manager the kubelet does not have writes no file, and its part finds nothing",
        unknown: "the version is not used: the refusals are matched as current kubelets word them; whether older kubelets word them the same is not established",
    }]),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::facts::grace_or_window_turn),
};

/// The kubelet's Event reason for a claim it could not prepare.
pub const FAILED_PREPARE: &str = "FailedPrepareDynamicResources";

/// The resource of the device manager's `requested number of devices unavailable for <res>.`.
pub fn devices_unavailable_for(message: &str) -> Option<&str> {
    const MARK: &str = "requested number of devices unavailable for ";
    let (_, rest) = message.split_once(MARK)?;
    let end = rest.find(". Requested").or_else(|| rest.find(' '))?;
    Some(rest[..end].trim()).filter(|r| !r.is_empty())
}

/// The device and the claim UID of a DRA driver's `requested device <d> is already allocated
/// to different claim <uid>`.
pub fn already_allocated(message: &str) -> Option<(Option<&str>, &str)> {
    const MARK: &str = " is already allocated to different claim ";
    let at = message.find(MARK)?;
    let claim = message[at + MARK.len()..]
        .split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == ')' || c == '"')
        .next()?
        .trim_end_matches('.');
    let device = message[..at]
        .rsplit(' ')
        .next()
        .filter(|d| !d.is_empty() && *d != "device");
    (!claim.is_empty()).then_some((device, claim))
}

fn pod_names(pods: &[&PodInfo]) -> String {
    let mut names: Vec<String> = pods.iter().take(LISTED).map(|p| p.display()).collect();
    if pods.len() > LISTED {
        names.push(format!("and {} more", pods.len() - LISTED));
    }
    names.join(", ")
}

/// A finding about the node's refused pods of `kind` (`devices`, `topology`).
fn node_refusal(snap: &NodeSnapshot, kind: &str, pods: &[&PodInfo], summary: String, remedy: String) -> Finding {
    Finding::new(ID, Severity::Critical, Subject::node(&snap.node), summary, remedy)
        .with("kind", kind)
        .with("refused_pods", pods.iter().map(|p| p.display()).collect::<Vec<_>>())
}

fn device_refusals(snap: &NodeSnapshot, facts: &Facts, settings: &Settings, out: &mut Vec<Finding>) {
    let stale = &facts.stale_devices;
    let mut refused: BTreeMap<&str, Vec<&PodInfo>> = BTreeMap::new();
    let rejections = facts.recent_rejections(snap, settings);
    for r in &rejections {
        if r.reason != "UnexpectedAdmissionError" {
            continue;
        }
        if let Some(resource) = r.pod.message.as_deref().and_then(devices_unavailable_for) {
            refused.entry(resource).or_default().push(r.pod);
        }
    }
    let Some(file) = snap.host.managers.devices.ok() else {
        return;
    };
    for (resource, pods) in refused {
        let holding: Vec<_> = stale.iter().filter(|s| s.entry.resource == resource).collect();
        if holding.is_empty() {
            continue;
        }
        let ids: BTreeSet<&str> = holding
            .iter()
            .flat_map(|s| s.entry.devices.iter().map(|d| d.id.as_str()))
            .collect();
        let holders: BTreeSet<&str> = holding.iter().map(|s| s.entry.pod_uid.as_str()).collect();
        let summary = format!(
            "{} pod(s) were refused {resource} (Allocate failed: requested number of devices unavailable) while stale \
             entries of {} hold {} {resource} device(s) ({}) for {} pod(s) that no longer run here; refused: {}",
            pods.len(),
            file.path,
            ids.len(),
            ids.iter().copied().collect::<Vec<_>>().join(", "),
            holders.len(),
            pod_names(&pods)
        );
        out.push(
            node_refusal(
                snap,
                "devices",
                &pods,
                summary,
                device_refusal_remedy(&snap.node, &file.path, resource),
            )
            .with("resource", resource)
            .with("message", pods[0].message.clone())
            .with("stale_device_ids", json!(ids))
            .with("stale_pod_uids", json!(holders))
            .with("path", file.path.as_str()),
        );
    }
}

fn topology_refusals(snap: &NodeSnapshot, facts: &Facts, settings: &Settings, out: &mut Vec<Finding>) {
    let rejections = facts.recent_rejections(snap, settings);
    let pods: Vec<&PodInfo> = rejections
        .iter()
        .filter(|r| r.reason == "TopologyAffinityError")
        .map(|r| r.pod)
        .collect();
    if pods.is_empty() {
        return;
    }
    let memory = &facts.stale_memory;
    let devices = &facts.stale_devices;
    if memory.is_empty() && devices.is_empty() {
        return;
    }
    let by_numa = stale_memory_bytes(memory);
    let mut held = Vec::new();
    for ((numa, resource), bytes) in &by_numa {
        let nodes = numa.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        held.push(format!("{} {resource} on NUMA node {nodes}", human_bytes(*bytes)));
    }
    for s in devices {
        let numa: BTreeSet<i64> = s.entry.devices.iter().filter_map(|d| d.numa_node).collect();
        let on = if numa.is_empty() {
            String::new()
        } else {
            format!(
                " on NUMA node {}",
                numa.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
            )
        };
        held.push(format!("{} {}{on}", s.entry.devices.len(), s.entry.resource));
    }
    let mut remedies = Vec::new();
    if let (false, Some(file)) = (memory.is_empty(), snap.host.managers.memory.ok()) {
        remedies.push(memory_state_remedy(&snap.node, &file.path));
    }
    if let (Some(first), Some(file)) = (devices.first(), snap.host.managers.devices.ok()) {
        remedies.push(device_state_remedy(&snap.node, &file.path, &first.entry.resource));
    }
    let summary = format!(
        "{} pod(s) were refused with TopologyAffinityError (Resources cannot be allocated with Topology locality) \
         while stale checkpoint entries of pods that no longer run here hold {}: {}",
        pods.len(),
        held.join(", "),
        pod_names(&pods)
    );
    out.push(
        node_refusal(snap, "topology", &pods, summary, remedies.join("; for the devices: "))
            .with(
                "stale_memory",
                by_numa
                    .iter()
                    .map(|((numa, resource), bytes)| json!({"numa_nodes": numa, "resource": resource, "bytes": bytes}))
                    .collect::<Vec<_>>(),
            )
            .with(
                "stale_devices",
                devices
                    .iter()
                    .map(|s| {
                        json!({
                            "resource": s.entry.resource,
                            "device_ids": s.entry.devices.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
                            "pod_uid": s.entry.pod_uid,
                        })
                    })
                    .collect::<Vec<_>>(),
            ),
    );
}

fn dra_refusals(snap: &NodeSnapshot, facts: &Facts, _settings: &Settings, out: &mut Vec<Finding>) {
    let claims = &facts.stale_claims;
    if claims.is_empty() {
        return;
    }
    for (uid, events) in &snap.api.lookups.pod_events {
        let Some(pod) = snap.pod(uid) else { continue };
        let Some((event, (device, claim_uid))) = events
            .iter()
            .filter(|e| e.reason == FAILED_PREPARE)
            .filter_map(|e| already_allocated(&e.message).map(|a| (e, a)))
            .max_by_key(|(e, _)| e.last_at)
        else {
            continue;
        };
        let device_matches = |c: &&StaleClaim<'_>| {
            device.is_some_and(|d| c.devices.iter().any(|x| x == d || x.ends_with(&format!("/{d}"))))
        };
        let Some(holder) = claims
            .iter()
            .find(|c| c.claim_uid == claim_uid)
            .or_else(|| claims.iter().find(device_matches))
        else {
            continue;
        };
        let path = holder.source.path(snap);
        let summary = format!(
            "Pod {} cannot start: the DRA driver refuses to prepare {} because it is still prepared for claim {} \
             ({}), a claim whose pods are gone ({} in {path})",
            pod.display(),
            device.map_or_else(|| "its device".to_string(), |d| format!("device {d}")),
            claim_uid,
            if event.count == 1 {
                "once".to_string()
            } else {
                format!("{} times", event.count)
            },
            holder.reason,
        );
        out.push(
            Finding::new(
                ID,
                Severity::Critical,
                Subject::pod(pod),
                summary,
                dra_claim_remedy(&snap.node, &path, holder.source.driver(), holder.claim.as_deref()),
            )
            .with("kind", "dra")
            .with("device", device)
            .with("claim_uid", claim_uid)
            .with("message", event.message.as_str())
            .with("event_count", event.count)
            .with("stale_claim", holder.claim.clone())
            .with("path", path),
        );
    }
}

pub fn check(snap: &NodeSnapshot, facts: &Facts, settings: &Settings) -> Vec<Finding> {
    let mut out = Vec::new();
    device_refusals(snap, facts, settings, &mut out);
    topology_refusals(snap, facts, settings, &mut out);
    dra_refusals(snap, facts, settings, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managers::drivers::DriverClaim;
    use crate::rules::testkit::{SnapshotBuilder, device_entry, memory_entry, pod, spark_executor, warning_event};

    fn refused(uid: &str, reason: &str, message: &str) -> PodInfo {
        let mut p = pod(uid, &format!("exec-{uid}"), "Failed", &[("exec", "")]);
        p.reason = Some(reason.into());
        p.message = Some(message.into());
        p
    }

    const GPU_REFUSAL: &str = "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected";

    #[test]
    fn messages_are_read() {
        assert_eq!(devices_unavailable_for(GPU_REFUSAL), Some("nvidia.com/gpu"));
        assert_eq!(
            devices_unavailable_for(
                "requested number of devices unavailable for domain1.com/resource1. Requested: 1, Available: 0"
            ),
            Some("domain1.com/resource1")
        );
        assert_eq!(
            devices_unavailable_for("Allocate failed due to no healthy devices present"),
            None
        );
        let msg = "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for claim spark/exec-2-gpu: error preparing devices for claim 5b2d: requested device gpu-3 is already allocated to different claim 9f1c-aa";
        assert_eq!(already_allocated(msg), Some((Some("gpu-3"), "9f1c-aa")));
        assert_eq!(already_allocated("is already allocated to different claim "), None);
    }

    #[test]
    fn device_refusals_are_tied_to_the_stale_entries_of_the_resource() {
        let snap = SnapshotBuilder::static_node("0-7", &[])
            .with_device_entries(
                vec![
                    device_entry("gone", "exec", "nvidia.com/gpu", &[("GPU-bbb", Some(0))]),
                    device_entry("gone2", "exec", "example.com/nic", &[("nic-1", None)]),
                ],
                &[],
            )
            .with_pod_list(&[
                refused("r1", "UnexpectedAdmissionError", GPU_REFUSAL),
                refused("r2", "UnexpectedAdmissionError", GPU_REFUSAL),
                refused("r3", "UnexpectedAdmissionError", "Allocate failed due to requested number of devices unavailable for amd.com/gpu. Requested: 1, Available: 0, which is unexpected"),
            ])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        // amd.com/gpu has no stale entry: a full node, not this rule's.
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].evidence["resource"], "nvidia.com/gpu");
        assert_eq!(
            f[0].evidence["refused_pods"],
            json!(["default/exec-r1", "default/exec-r2"])
        );
        assert_eq!(f[0].evidence["stale_device_ids"], json!(["GPU-bbb"]));
        assert!(
            f[0].summary.starts_with("2 pod(s) were refused nvidia.com/gpu"),
            "{}",
            f[0].summary
        );
    }

    #[test]
    fn topology_refusals_name_the_numa_memory_held() {
        let snap = SnapshotBuilder::static_node("0-7", &[])
            .with_memory_entries(vec![memory_entry("gone", "exec", &[(&[1], "memory", 32 << 30)])])
            .with_pod_list(&[refused(
                "r1",
                "TopologyAffinityError",
                "Resources cannot be allocated with Topology locality",
            )])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].evidence["kind"], "topology");
        assert_eq!(f[0].evidence["stale_memory"][0]["bytes"], 32u64 << 30);
        assert!(
            f[0].summary.contains("hold 32.0 GiB memory on NUMA node 1"),
            "{}",
            f[0].summary
        );

        // No stale entry: admission-rejection's, not this rule's.
        let snap = SnapshotBuilder::static_node("0-7", &[])
            .with_memory_entries(vec![])
            .with_pod_list(&[refused(
                "r1",
                "TopologyAffinityError",
                "Resources cannot be allocated with Topology locality",
            )])
            .build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }

    #[test]
    fn a_pod_waiting_on_a_device_of_a_stale_claim() {
        let mut waiting = spark_executor("w1", "spark-app-1", "etl", 1, "Pending");
        waiting.node_name = Some("node-a".into());
        let snap = SnapshotBuilder::static_node("0-7", &[])
            .with_driver_claims(vec![DriverClaim {
                claim_uid: "9f1c-aa".into(),
                namespace: Some("spark-jobs".into()),
                claim_name: Some("old-gpu".into()),
                state: "PrepareCompleted".into(),
                pod_uids: vec!["gone".into()],
                devices: vec!["gpu-3".into()],
            }])
            .with_pod_list(&[waiting])
            .with_pod_events(
                "w1",
                vec![warning_event(
                    FAILED_PREPARE,
                    "Failed to prepare dynamic resources: requested device gpu-3 is already allocated to different claim 9f1c-aa",
                    7,
                    30,
                )],
            )
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].subject.uid.as_deref(), Some("w1"));
        assert_eq!(f[0].evidence["device"], "gpu-3");
        assert_eq!(f[0].evidence["stale_claim"], "spark-jobs/old-gpu");
        assert!(f[0].summary.contains("(7 times)"), "{}", f[0].summary);
    }
}
