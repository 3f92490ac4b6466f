//! How findings say things: the shared pieces of summaries, evidence and remedies.
//!
//! List lengths (`LISTED`), human sizes and durations, evidence numbers (`ms`, `counts`),
//! and the command lines and remedy texts that more than one rule (and the repairs) hand to
//! people. Nothing here judges; the judgements are in [`crate::facts`].

use std::collections::BTreeMap;

use serde_json::Value;

use crate::snapshot::PodInfo;

/// How many names or paths a finding lists.
pub(crate) const LISTED: usize = 20;

/// A CPU list as the subject of a sentence, so that it never reads as a count: `CPU 7 is`,
/// `CPUs 6,14 are`.
pub fn cpus_subject(cpus: &crate::CpuSet) -> String {
    if cpus.len() == 1 {
        format!("CPU {cpus} is")
    } else {
        format!("CPUs {} are", cpus.human())
    }
}

/// Human size: `1.5 GiB` (binary units, one decimal; bytes as they are below 1 KiB).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Human duration, rounded down to its largest unit: `45s`, `47m`, `19h`, `4d`.
pub(crate) fn human_seconds(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// Seconds rounded to the millisecond, for evidence.
pub(crate) fn ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// A JSON object of counts.
pub(crate) fn counts(map: &BTreeMap<&str, usize>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect())
}

/// `kubectl delete pod -n NS NAME`.
pub(crate) fn kubectl_delete(pod: &PodInfo) -> String {
    format!("kubectl delete pod -n {} {}", pod.namespace, pod.name)
}

/// How to get rid of rejected pods, which nothing retries or removes.
pub(crate) fn cleanup_remedy(node: &str, reason: &str) -> String {
    format!(
        "rejected pods are never retried and stay until deleted: list them with \
         kubectl get pods -A --field-selector spec.nodeName={node},status.phase=Failed -o wide \
         and delete those with reason {reason} (kubectl delete pod -n NS NAME; Spark drivers ask for new executors \
         themselves); to clean them up automatically, use the descheduler's RemoveFailedPods with reasons [{reason}] \
         (Spark executors also need evictLocalStoragePods: true, client-mode executors evictFailedBarePods: true)"
    )
}

/// The documented remedy for a checkpoint the kubelet cannot use or that holds stale CPUs
/// (<https://kubernetes.io/docs/tasks/administer-cluster/cpu-management-policies/#changing-the-cpu-manager-policy>):
/// drain, stop the kubelet, move the file (and the memory manager's) aside, start the kubelet,
/// uncordon.
pub(crate) fn reset_checkpoint_remedy(node: &str, checkpoint_path: &str) -> String {
    let dir = checkpoint_path.rsplit_once('/').map_or(".", |(d, _)| d);
    let dir = if dir.is_empty() { "/" } else { dir };
    format!(
        "kubectl drain {node} --ignore-daemonsets --delete-emptydir-data; then on the node: \
         systemctl stop kubelet && mv {checkpoint_path} {checkpoint_path}.bak && \
         rm -f {dir}/memory_manager_state && systemctl start kubelet; then kubectl uncordon {node}"
    )
}

/// The remedy for stale entries: `nodemedic repair cpu-state`, which frees only the stale
/// entries and keeps every live pod's pinning (the kubelet is stopped and started around the
/// write), instead of the drain-and-delete reset.
pub(crate) fn repair_cpu_state_remedy(node: &str) -> String {
    format!(
        "kubectl nodemedic repair {node} cpu-state (shows the plan), then kubectl nodemedic repair {node} cpu-state \
         --apply --restart-kubelet --yes (frees only the stale entries, keeps live pinning, backs the file up); \
         on the node itself: nodemedic repair cpu-state --apply --restart-kubelet --yes"
    )
}

/// The subject of a stale checkpoint entry: the pod when the list still has it, else its UID,
/// narrowed to the container.
pub(crate) fn stale_subject(pod: Option<&PodInfo>, uid: &str, container: Option<&str>) -> crate::finding::Subject {
    match pod {
        Some(p) => crate::finding::Subject::pod(p),
        None => crate::finding::Subject::pod_uid(uid),
    }
    .with_container(container.map(str::to_string))
}

/// Why a stale entry's pod still has processes although the pod list calls it gone or finished
/// (`None` when the pod is running or liveness came from the cgroups themselves).
pub(crate) fn still_running_note(
    snap: &crate::NodeSnapshot,
    still_running: Option<&str>,
    pod: Option<&PodInfo>,
) -> Option<String> {
    use crate::snapshot::PodSource;
    let by_list = snap.pods.source != PodSource::Cgroups;
    match (still_running, pod) {
        (Some(why), None) if by_list => Some(format!(
            "{why}: the pod object is gone but its containers are not (force-deleted?)"
        )),
        (Some(why), Some(p)) if by_list && p.is_terminal() => {
            Some(format!("{why}: the pod has finished but its containers are not gone"))
        }
        _ => None,
    }
}

/// How to stop the containers of a pod whose object is gone, before its resources are freed.
pub(crate) fn stop_containers(node: &str, pod_uid: &str) -> String {
    format!(
        "on node {node}, list the pod's containers with `crictl ps --label io.kubernetes.pod.uid={pod_uid}` and stop \
         them with `crictl stop <id>` (or `crictl stopp` on `crictl pods --label io.kubernetes.pod.uid={pod_uid} -q`)"
    )
}

/// A command that has the kubelet admit one short pod on `node`: each admission runs the
/// memory and device managers' clean-up of entries whose pods are gone.
pub(crate) fn admit_one_pod(node: &str) -> String {
    format!(
        "kubectl run nodemedic-admit --restart=Never --image=busybox:1.36 \
         --overrides='{{\"apiVersion\":\"v1\",\"spec\":{{\"nodeName\":\"{node}\"}}}}' -- true, then kubectl delete \
         pod nodemedic-admit"
    )
}

/// The remedy for stale memory manager entries. The memory manager drops the entries of pods
/// that are gone when it admits the next pod (`removeStaleState`, once the kubelet's pod sources
/// are ready); until then they count as reserved NUMA memory, and a kubelet restart restores
/// them from the file. Deleting the file is for a drained node only.
pub(crate) fn memory_state_remedy(node: &str, path: &str) -> String {
    format!(
        "the memory manager drops entries of gone pods when it admits the next pod on the node (removeStaleState), and \
         a kubelet restart restores {path} as written, stale entries included; to have them dropped now, let the \
         kubelet admit one pod: {}; if they stay (the kubelet's pod sources are not ready, or the file keeps \
         coming back), reset the memory manager on a drained node: kubectl drain {node} --ignore-daemonsets \
         --delete-emptydir-data; then on the node: systemctl stop kubelet && mv {path} {path}.bak && systemctl start \
         kubelet; then kubectl uncordon {node}. nodemedic does not edit this file",
        admit_one_pod(node)
    )
}

/// The remedy for stale device manager entries. The device manager forgets the devices of
/// inactive pods at every admission and every PodResources `List` (`UpdateAllocatedDevices`),
/// but writes the file only when it allocates again, so the file trails its memory; a restart
/// restores the file's entries until the next admission drops them. Deleting the file is
/// worse than it looks: with no checkpoint the kubelet takes the node for a new one and resets
/// its extended resources' capacity.
pub(crate) fn device_state_remedy(node: &str, path: &str, resource: &str) -> String {
    format!(
        "the device manager forgets the devices of pods that are no longer active at every admission and every \
         PodResources List, but rewrites {path} only when it allocates devices again, so the file trails its memory; \
         the next allocation of a device on the node clears the file, and a kubelet restart (which restores the \
         file's entries) drops them again at the next admission: {}. If pods requesting {resource} are still refused \
         while nothing holds them (device-admission-failure), the kubelet's memory holds devices the file does not show \
         (kubernetes #130172): restart the kubelet (systemctl restart kubelet on {node}). Do not delete the file: with \
         no device checkpoint the kubelet takes the node for a new one and resets its extended resources. nodemedic \
         does not edit this file",
        admit_one_pod(node)
    )
}

/// The remedy for a stale DRA claim: in the kubelet's `dra_manager_state` (the kubelet removes
/// a claim only after every driver unprepared it, retrying from its reconcile loop), or in a
/// driver's own checkpoint (the kubelet asks drivers to unprepare only the claims it holds).
pub(crate) fn dra_claim_remedy(node: &str, path: &str, driver: Option<&str>, claim: Option<&str>) -> String {
    let delete_claim = match claim {
        Some(c) => {
            let (ns, name) = c.split_once('/').unwrap_or(("default", c));
            format!(
                "if the ResourceClaim still exists and nothing needs it, delete it (kubectl delete resourceclaim -n \
                 {ns} {name}); "
            )
        }
        None => String::new(),
    };
    let fix = match driver {
        Some(d) => format!(
            "the kubelet asks {d} to unprepare only the claims it holds itself, so this one is never released by it: \
             restart the driver's kubelet plugin pod on {node} (kubectl delete pod -n <driver namespace> <plugin pod \
             on {node}>; drivers that clean up at start release claims whose ResourceClaim is gone); if the claim \
             stays, drain the pods that use {d} from {node}, stop the plugin, move {path} aside and start it again"
        ),
        None => format!(
            "the kubelet removes a claim from {path} only after every driver unprepared it (NodeUnprepareResources), \
             retrying from its reconcile loop: a claim that stays means a driver keeps failing or is no longer \
             registered (kubernetes #129402); check that the driver's kubelet plugin runs on {node} and its logs for \
             NodeUnprepareResources errors, and the kubelet removes the claim once the driver answers; if the driver \
             is gone for good, drain {node}, stop the kubelet, move {path} aside and start it (it refuses to start on \
             a corrupt file and starts empty without one)"
        ),
    };
    format!("{delete_claim}{fix}. nodemedic does not edit this file")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cpu_list_is_never_read_as_a_count() {
        let subject = |text: &str| super::cpus_subject(&crate::CpuSet::parse(text).unwrap());
        assert_eq!(subject("7"), "CPU 7 is");
        assert_eq!(subject("6,14"), "CPUs 6,14 are");
        assert_eq!(subject("4-7"), "CPUs 4-7 are");
        assert_eq!(subject(""), "CPUs none are");
    }

    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 40), "5.0 TiB");
        assert_eq!(human_seconds(-3), "-3s");
        assert_eq!(human_seconds(2820), "47m");
        assert_eq!(human_seconds(68400), "19h");
        assert_eq!(human_seconds(345600), "4d");
    }
}

/// Unix seconds as an RFC 3339 UTC time (`2026-11-24T19:39:04Z`); `None` before 1970 or past
/// year 9999. The civil date comes from the day count by the usual era arithmetic of the
/// proleptic Gregorian calendar (400-year eras of 146,097 days).
pub fn unix_to_rfc3339(secs: i64) -> Option<String> {
    if !(0..253_402_300_800).contains(&secs) {
        return None;
    }
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 0000-03-01, so that the leap day ends a year.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    ))
}

#[cfg(test)]
mod rfc3339_tests {
    use super::unix_to_rfc3339;

    #[test]
    fn dates_match_known_instants() {
        // Values checked against `date -u -d @N +%FT%TZ`.
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_700_000_000, "2023-11-14T22:13:20Z"),
            (1_709_251_199, "2024-02-29T23:59:59Z"),
            (1_795_549_144, "2026-11-24T19:39:04Z"),
            (4_102_444_800, "2100-01-01T00:00:00Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ];
        for (secs, want) in cases {
            assert_eq!(unix_to_rfc3339(secs).as_deref(), Some(want), "{secs}");
        }
        assert_eq!(unix_to_rfc3339(-1), None);
        assert_eq!(unix_to_rfc3339(253_402_300_800), None);
    }
}
