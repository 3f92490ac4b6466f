//! `stale-device-assignment`: a device manager entry (`device-plugins/kubelet_internal_checkpoint`)
//! holds devices of a device plugin for a pod or container that is not alive on this node.
//!
//! The device manager forgets the devices of deleted pods only when it next allocates that
//! resource, and not always then: entries of deleted pods stay in the file (kubernetes
//! #137010), partial allocations of failed pods linger and make every later pod fail with
//! `UnexpectedAdmissionError` (`Allocate failed due to requested number of devices
//! unavailable`, #137317, #130172), and a reboot restores them (#109595). A maintainer's answer
//! on #137010 is that the PodResources API is the supported view of the real allocation: when
//! the kubelet answers, the finding says whether it still holds the devices too.
//!
//! The remedy follows that answer. When only the file holds them, nothing needs freeing: the
//! file catches up at the next device allocation, and a kubelet restart would only reload the
//! entries into its memory until the next admission drops them again. Otherwise the next
//! admission drops them from the kubelet's memory (docs/kubelet.md, "What a kubelet restart
//! clears").

use serde_json::json;

use crate::coverage::{Comparison, KubeletVersions, Need, Need::One, Needs, Source};
use crate::finding::{Finding, Severity};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::NodeSnapshot;
use crate::text::{device_state_remedy, stale_subject, still_running_note, stop_containers};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("stale-device-assignment");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "The device manager holds devices for a container that no longer runs",
    severity: Severity::Warning,
    looks_at: "device-plugins/kubelet_internal_checkpoint, pods on the node (or the kubelet's PodResources list, or cgroups)",
    fires_when: "a PodDeviceEntries entry with devices belongs to a pod that is not alive on the node (after the reconcile grace)",
    event_reason: "StaleDeviceAssignment",
    needs: Needs {
        all: &[One(Source::DeviceState), Need::LIVENESS],
        about: &[Source::DeviceState],
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
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::facts::grace_turn),
};

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    let Some(file) = snap.host.managers.devices.ok() else {
        return vec![];
    };
    // The devices the kubelet's memory holds for live containers (PodResources List).
    let kubelet_holds = snap.host.kubelet_view.ok().map(|v| {
        v.pods
            .iter()
            .flat_map(|p| &p.containers)
            .flat_map(|c| &c.devices)
            .flat_map(|d| d.ids.iter().map(move |id| (d.resource.as_str(), id.as_str())))
            .collect::<std::collections::BTreeSet<_>>()
    });
    facts
        .stale_devices
        .iter()
        .map(|s| {
            let e = &s.entry;
            let subject = stale_subject(s.pod.as_ref(), &e.pod_uid, Some(&e.container));
            // Distinct IDs in file order: a device on two NUMA nodes is listed under each.
            let mut ids: Vec<&str> = Vec::with_capacity(e.devices.len());
            for d in &e.devices {
                if !ids.contains(&d.id.as_str()) {
                    ids.push(d.id.as_str());
                }
            }
            let numa: std::collections::BTreeSet<i64> = e.devices.iter().filter_map(|d| d.numa_node).collect();
            let note = still_running_note(snap, s.still_running.as_deref(), s.pod.as_ref());
            let in_memory = kubelet_holds.as_ref().map(|held| {
                ids.iter()
                    .filter(|id| held.contains(&(e.resource.as_str(), **id)))
                    .count()
            });
            let mut summary = format!(
                "{} {} ({}) held for container {} of {}, which no longer runs on this node: {}",
                ids.len(),
                e.resource,
                ids.join(", "),
                e.container,
                subject.display(),
                s.reason
            );
            match in_memory {
                Some(0) => {
                    summary.push_str("; the kubelet's PodResources list no longer holds them, only the file does")
                }
                Some(n) => summary.push_str(&format!("; the kubelet's PodResources list still holds {n} of them")),
                None => {}
            }
            let mut remedy = if in_memory == Some(0) {
                only_the_file_remedy(&file.path)
            } else {
                device_state_remedy(&snap.node, &file.path, &e.resource)
            };
            if let Some(why) = &note {
                summary.push_str(&format!("; yet {why}"));
                remedy = format!("{}; then {remedy}", stop_containers(&snap.node, &e.pod_uid));
            }
            // Only the file holds them: the kubelet's memory is clean, the entries are leftovers
            // that a restart would restore until the next admission drops them again.
            let severity = if in_memory == Some(0) {
                Severity::Info
            } else {
                Severity::Warning
            };
            Finding::new(ID, severity, subject, summary, remedy)
                .with("pod_uid", e.pod_uid.as_str())
                .with("container", e.container.as_str())
                .with("resource", e.resource.as_str())
                .with("device_ids", json!(ids))
                .with("numa_nodes", json!(numa))
                .with("held_by_kubelet", in_memory)
                .with("reason", s.reason.clone())
                .with("liveness_source", snap.pods.source.as_str())
                .with("note", note)
                .with("path", file.path.as_str())
        })
        .collect()
}

/// The remedy when the kubelet's memory no longer holds the devices and only the file does.
fn only_the_file_remedy(path: &str) -> String {
    format!(
        "nothing to free: the kubelet's PodResources List gives these devices to no container, only {path} still \
         lists them, and the device manager rewrites the file at its next device allocation. Do not restart the \
         kubelet for this: a restart does not clear the file, it reloads these entries into the kubelet's memory \
         until the next admission drops them again. Do not delete the file: with no device checkpoint the kubelet \
         takes the node for a new one and resets its extended resources. nodemedic does not edit this file"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet_view::KubeletDevices;
    use crate::rules::testkit::{SnapshotBuilder, device_entry, kubelet_pod, kubelet_view, pod};

    fn node() -> SnapshotBuilder {
        SnapshotBuilder::static_node("0-7", &[]).with_device_entries(
            vec![
                device_entry("live", "exec", "nvidia.com/gpu", &[("GPU-aaa", Some(0))]),
                device_entry(
                    "gone",
                    "exec",
                    "nvidia.com/gpu",
                    &[("GPU-bbb", Some(0)), ("GPU-ccc", Some(1))],
                ),
                device_entry("gone", "init", "example.com/nic", &[]),
            ],
            &[("nvidia.com/gpu", &["GPU-aaa", "GPU-bbb", "GPU-ccc", "GPU-ddd"])],
        )
    }

    fn gpus(ids: &[&str]) -> Vec<KubeletDevices> {
        vec![KubeletDevices {
            resource: "nvidia.com/gpu".into(),
            ids: ids.iter().map(|i| i.to_string()).collect(),
            numa_nodes: vec![0],
        }]
    }

    #[test]
    fn judged_from_the_pod_list_with_device_ids_and_numa() {
        let snap = node()
            .with_pod_list(&[pod("live", "exec-1", "Running", &[("exec", "c1")])])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        // An entry without devices holds nothing.
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].evidence["pod_uid"], "gone");
        assert_eq!(f[0].evidence["device_ids"], json!(["GPU-bbb", "GPU-ccc"]));
        assert_eq!(f[0].evidence["numa_nodes"], json!([0, 1]));
        assert!(
            f[0].evidence.get("held_by_kubelet").is_none(),
            "no kubelet view, nothing said"
        );
        assert!(
            f[0].summary
                .starts_with("2 nvidia.com/gpu (GPU-bbb, GPU-ccc) held for container exec of pod gone"),
            "{}",
            f[0].summary
        );
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].remedy.contains("requesting nvidia.com/gpu are still refused"),
            "{}",
            f[0].remedy
        );
        assert!(f[0].remedy.contains("\"nodeName\":\"node-a\""), "{}", f[0].remedy);
        // Without the kubelet's answer the devices may still be held: the admission first.
        assert!(f[0].remedy.starts_with("the device manager forgets"), "{}", f[0].remedy);
    }

    #[test]
    fn the_kubelets_list_says_whether_only_the_file_holds_them() {
        let mut exec = kubelet_pod("spark", "exec-1", &[], &[("exec", "")]);
        exec.containers[0].devices = gpus(&["GPU-aaa"]);
        let snap = node().with_kubelet_view(kubelet_view(vec![exec.clone()], None)).build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].evidence["held_by_kubelet"], 0);
        assert_eq!(f[0].severity, Severity::Info, "leftovers in the file only");
        assert!(f[0].summary.contains("only the file does"));
        assert!(f[0].remedy.starts_with("nothing to free:"), "{}", f[0].remedy);
        assert!(
            f[0].remedy.contains("Do not restart the kubelet for this"),
            "{}",
            f[0].remedy
        );
        assert!(!f[0].remedy.contains("kubectl run"), "{}", f[0].remedy);

        // A listed pod of unknown UID holding one of the devices: cannot tell, not judged.
        exec.containers[0].devices = gpus(&["GPU-aaa", "GPU-bbb"]);
        let snap = node().with_kubelet_view(kubelet_view(vec![exec], None)).build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }
}
