//! The kubelet's eviction thresholds for disk, and the forecasts of when Spark's local storage
//! reaches them (docs/rules/local-storage-eviction-risk.md).
//!
//! The kubelet evicts pods for disk in two ways (kubernetes/kubernetes
//! `pkg/kubelet/eviction/eviction_manager.go`): a pod whose ephemeral-storage usage (its
//! containers' writable layers and logs, and its disk-backed `emptyDir` volumes) passes the sum
//! of its containers' `ephemeral-storage` limits is evicted at once ("Pod ephemeral local
//! storage usage exceeds the total limit of containers ..."), as is one whose container passes
//! its own limit or whose `emptyDir` passes its `sizeLimit`; and when the file system of its
//! root directory (`nodefs`) has less available than `evictionHard`'s `nodefs.available` (or
//! `evictionSoft`'s, for its grace period), the node reports `DiskPressure` and pods are evicted
//! ("The node was low on resource: ephemeral-storage. ").
//!
//! Thresholds (`pkg/kubelet/apis/config/v1beta1/defaults_linux.go`): without `evictionHard` the
//! kubelet uses `memory.available<100Mi`, `nodefs.available<10%`, `nodefs.inodesFree<5%`,
//! `imagefs.available<15%` (recent kubelets also `imagefs.inodesFree<5%`). An `evictionHard`
//! that is set replaces the defaults whole, so a signal it leaves out has no threshold, unless
//! `mergeDefaultEvictionSettings: true` (recent kubelets) merges the defaults under it. `0%` and
//! `100%` mean no threshold (`parseThresholdStatement`). `evictionSoft` has no defaults.
//!
//! `imagefs.available` is observed on the runtime's image file system, whether or not it is
//! the kubelet's: where the two share a device (`HasDedicatedImageFs` false, the usual node),
//! crossing it makes the kubelet collect unused images and containers and then evict pods
//! ranked by all their disk use, local volumes included (`buildSignalToRankFunc`). So on such
//! a node the first disk threshold Spark's emptyDirs meet is `imagefs.available<15%`, before
//! `nodefs.available<10%`.

use std::collections::BTreeMap;

use crate::quantity::parse_bytes;

/// The kubelet's eviction settings as configured (file, then flags).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EvictionConfig {
    /// `evictionHard` (`--eviction-hard`): signal to value (`10%`, `1Gi`); `None` when unset.
    pub hard: Option<BTreeMap<String, String>>,
    /// `evictionSoft` (`--eviction-soft`); `None` when unset.
    pub soft: Option<BTreeMap<String, String>>,
    /// `mergeDefaultEvictionSettings`: the defaults fill in what `evictionHard` leaves out.
    pub merge_defaults: bool,
}

/// The eviction signal of the kubelet's root file system's available bytes.
pub const NODEFS_AVAILABLE: &str = "nodefs.available";

/// The eviction signal of the container runtime's image file system's available bytes.
pub const IMAGEFS_AVAILABLE: &str = "imagefs.available";

/// The Linux default of `evictionHard` for a disk signal (memory and inodes are not this
/// module's): `nodefs.available<10%`, `imagefs.available<15%`.
pub fn default_threshold(signal: &str) -> Option<(&'static str, f64)> {
    match signal {
        NODEFS_AVAILABLE => Some(("10%", 0.10)),
        IMAGEFS_AVAILABLE => Some(("15%", 0.15)),
        _ => None,
    }
}

/// A threshold's value.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThresholdValue {
    Bytes(u64),
    /// A fraction of the file system's capacity (`10%` is 0.1).
    Fraction(f64),
}

impl ThresholdValue {
    /// Available bytes below which the threshold is crossed, on a file system of `capacity`.
    pub fn bytes(self, capacity: u64) -> u64 {
        match self {
            ThresholdValue::Bytes(b) => b,
            ThresholdValue::Fraction(f) => (capacity as f64 * f).ceil() as u64,
        }
    }
}

/// A disk eviction threshold in force: its signal, where it comes from and its value.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EvictionThreshold {
    /// `nodefs.available` or `imagefs.available`.
    pub signal: &'static str,
    /// `evictionHard` or `evictionSoft`.
    pub kind: &'static str,
    /// As written (`10%`, `2Gi`).
    pub text: String,
    /// It is the kubelet's default, not a configured value.
    pub default: bool,
    pub value: ThresholdValue,
}

/// Why a threshold value cannot be read (the signal and the value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {signal}: {value:?} is not a percentage or a size")]
pub struct ThresholdError {
    pub kind: &'static str,
    pub signal: String,
    pub value: String,
}

fn parse_value(kind: &'static str, signal: &str, text: &str) -> Result<Option<ThresholdValue>, ThresholdError> {
    let err = || ThresholdError {
        kind,
        signal: signal.to_string(),
        value: text.to_string(),
    };
    let t = text.trim();
    if let Some(p) = t.strip_suffix('%') {
        let p: f64 = p.trim().parse().map_err(|_| err())?;
        if !(0.0..=100.0).contains(&p) {
            return Err(err());
        }
        // The kubelet ignores 0% and 100%.
        return Ok((p > 0.0 && p < 100.0).then_some(ThresholdValue::Fraction(p / 100.0)));
    }
    match parse_bytes(t) {
        Ok(0) | Err(_) => Err(err()),
        Ok(b) => Ok(Some(ThresholdValue::Bytes(b))),
    }
}

impl EvictionConfig {
    /// The thresholds of `signal` in force: hard (configured, else the default when
    /// `evictionHard` is unset or merged), and soft when configured. The one that is crossed
    /// first (the larger) comes first.
    pub fn thresholds(&self, signal: &'static str, capacity: u64) -> Result<Vec<EvictionThreshold>, ThresholdError> {
        let mut out = Vec::new();
        let hard = self.hard.as_ref().and_then(|h| h.get(signal));
        match (hard, &self.hard, default_threshold(signal)) {
            (Some(text), _, _) => {
                if let Some(value) = parse_value("evictionHard", signal, text)? {
                    out.push(EvictionThreshold {
                        signal,
                        kind: "evictionHard",
                        text: text.clone(),
                        default: false,
                        value,
                    });
                }
            }
            (None, Some(_), _) if !self.merge_defaults => {}
            (None, _, Some((text, fraction))) => out.push(EvictionThreshold {
                signal,
                kind: "evictionHard",
                text: text.into(),
                default: true,
                value: ThresholdValue::Fraction(fraction),
            }),
            (None, _, None) => {}
        }
        if let Some(text) = self.soft.as_ref().and_then(|s| s.get(signal)) {
            if let Some(value) = parse_value("evictionSoft", signal, text)? {
                out.push(EvictionThreshold {
                    signal,
                    kind: "evictionSoft",
                    text: text.clone(),
                    default: false,
                    value,
                });
            }
        }
        out.sort_by_key(|t| std::cmp::Reverse(t.value.bytes(capacity)));
        Ok(out)
    }
}

/// Seconds until `left` bytes are used at `growth` bytes per second; `Some(0.0)` when none are
/// left, `None` when nothing grows.
pub fn seconds_until(left: i128, growth: f64) -> Option<f64> {
    if left <= 0 {
        return Some(0.0);
    }
    (growth > 0.0 && growth.is_finite()).then(|| left as f64 / growth)
}

/// What the kubelet's eviction message of a pod says it was evicted for, when it is disk
/// (`pkg/kubelet/eviction/helpers.go`'s formats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskEviction {
    /// "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
    PodLimit,
    /// "Container %s exceeded its local ephemeral storage limit %q. "
    ContainerLimit,
    /// "Usage of EmptyDir volume %q exceeds the limit %q. "
    EmptyDirLimit,
    /// "The node was low on resource: ephemeral-storage. " (`DiskPressure`)
    NodePressure,
}

impl DiskEviction {
    /// What a `reason: Evicted` pod's message says; `None` for another resource (memory, pids).
    pub fn of_message(message: &str) -> Option<DiskEviction> {
        if message.contains("Pod ephemeral local storage usage exceeds the total limit of containers") {
            Some(DiskEviction::PodLimit)
        } else if message.contains("exceeded its local ephemeral storage limit") {
            Some(DiskEviction::ContainerLimit)
        } else if message.contains("Usage of EmptyDir volume") && message.contains("exceeds the limit") {
            Some(DiskEviction::EmptyDirLimit)
        } else if message.contains("The node was low on resource: ephemeral-storage")
            || message.contains("The node had condition: [DiskPressure]")
        {
            Some(DiskEviction::NodePressure)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DiskEviction::PodLimit => "pod_limit",
            DiskEviction::ContainerLimit => "container_limit",
            DiskEviction::EmptyDirLimit => "emptydir_limit",
            DiskEviction::NodePressure => "node_pressure",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn thresholds_follow_the_kubelets_defaults_and_overrides() {
        let cap = 100 << 30;
        let bytes = |c: &EvictionConfig| -> Vec<(&'static str, bool, u64)> {
            c.thresholds(NODEFS_AVAILABLE, cap)
                .unwrap()
                .iter()
                .map(|t| (t.kind, t.default, t.value.bytes(cap)))
                .collect()
        };
        // Unset: the default 10%.
        assert_eq!(bytes(&EvictionConfig::default()), [("evictionHard", true, 10 << 30)]);
        // Set without nodefs: the defaults are gone, unless merged.
        let partial = EvictionConfig {
            hard: map(&[("memory.available", "200Mi")]),
            ..Default::default()
        };
        assert_eq!(bytes(&partial), []);
        let merged = EvictionConfig {
            merge_defaults: true,
            ..partial.clone()
        };
        assert_eq!(bytes(&merged), [("evictionHard", true, 10 << 30)]);
        // A size, a soft threshold above it first; 0% is no threshold.
        let both = EvictionConfig {
            hard: map(&[("nodefs.available", "5Gi")]),
            soft: map(&[("nodefs.available", "15%")]),
            merge_defaults: false,
        };
        assert_eq!(
            bytes(&both),
            [
                ("evictionSoft", false, 15 * (1u64 << 30)),
                ("evictionHard", false, 5 << 30)
            ]
        );
        let off = EvictionConfig {
            hard: map(&[("nodefs.available", "0%")]),
            ..Default::default()
        };
        assert_eq!(bytes(&off), []);
        let bad = EvictionConfig {
            hard: map(&[("nodefs.available", "ten percent")]),
            ..Default::default()
        };
        assert_eq!(
            bad.thresholds(NODEFS_AVAILABLE, cap).unwrap_err().to_string(),
            "evictionHard nodefs.available: \"ten percent\" is not a percentage or a size"
        );
        // imagefs.available: 15% by default, gone with an evictionHard that leaves it out.
        let image = |c: &EvictionConfig| -> Vec<(&'static str, &'static str, u64)> {
            c.thresholds(IMAGEFS_AVAILABLE, cap)
                .unwrap()
                .iter()
                .map(|t| (t.signal, t.kind, t.value.bytes(cap)))
                .collect()
        };
        assert_eq!(
            image(&EvictionConfig::default()),
            [("imagefs.available", "evictionHard", 15 * (1u64 << 30))]
        );
        assert_eq!(image(&both), []);
        assert_eq!(
            image(&merged),
            [("imagefs.available", "evictionHard", 15 * (1u64 << 30))]
        );
        // A signal without a default has no threshold unless configured.
        assert_eq!(
            EvictionConfig::default().thresholds("nodefs.inodesFree", cap).unwrap(),
            []
        );
    }

    /// The kubelet's own messages, as `pkg/kubelet/eviction/helpers.go` formats them (old and
    /// current container fragments), and others that are not disk.
    #[test]
    fn eviction_messages_say_what_was_evicted_for() {
        let cases = [
            (
                "Pod ephemeral local storage usage exceeds the total limit of containers 10Gi. ",
                Some(DiskEviction::PodLimit),
            ),
            (
                "Container spark-kubernetes-executor exceeded its local ephemeral storage limit \"4Gi\". ",
                Some(DiskEviction::ContainerLimit),
            ),
            (
                "Usage of EmptyDir volume \"spark-local-dir-1\" exceeds the limit \"20Gi\". ",
                Some(DiskEviction::EmptyDirLimit),
            ),
            (
                "The node was low on resource: ephemeral-storage. Threshold quantity: 10736395469, available: \
                 9943176Ki. Container spark-kubernetes-executor was using 38517416Ki, request is 0, has larger \
                 consumption of ephemeral-storage. ",
                Some(DiskEviction::NodePressure),
            ),
            (
                "The node was low on resource: ephemeral-storage. Container app was using 20Ki, which exceeds its \
                 request of 0. ",
                Some(DiskEviction::NodePressure),
            ),
            (
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi. ",
                None,
            ),
            (
                "The node had condition: [DiskPressure]. ",
                Some(DiskEviction::NodePressure),
            ),
            ("The node had condition: [MemoryPressure]. ", None),
        ];
        for (message, want) in cases {
            assert_eq!(DiskEviction::of_message(message), want, "{message}");
        }
    }

    #[test]
    fn time_left_at_a_rate() {
        assert_eq!(seconds_until(600, 10.0), Some(60.0));
        assert_eq!(seconds_until(0, 10.0), Some(0.0));
        assert_eq!(seconds_until(-5, 0.0), Some(0.0));
        assert_eq!(seconds_until(600, 0.0), None);
        assert_eq!(seconds_until(600, -3.0), None);
    }
}
