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

/// The remedy for a stale entry whose pod object is gone (or finished) while its containers
/// still run: stop them first, since freeing CPUs a running process is pinned to would let the
/// kubelet give them to another pod; then the repair.
pub(crate) fn stop_containers_then_repair_remedy(node: &str, pod_uid: &str) -> String {
    format!(
        "the pod's containers still run although its pod object is gone or finished: on node {node}, list them \
         with `crictl ps --label io.kubernetes.pod.uid={pod_uid}` and stop them with `crictl stop <id>` (or \
         `crictl stopp` on `crictl pods --label io.kubernetes.pod.uid={pod_uid} -q`); once its cgroups are empty, \
         {}",
        repair_cpu_state_remedy(node)
    )
}

#[cfg(test)]
mod tests {
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
