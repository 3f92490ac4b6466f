//! Rule settings: which rules run and their thresholds. Defaults are what a node wants
//! without any configuration; the daemon's configuration file fills this in.

use std::collections::{BTreeMap, BTreeSet};

use crate::finding::Severity;

/// Settings shared by all rules.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct Settings {
    /// Rule ids that do not run.
    pub disabled_rules: BTreeSet<String>,
    /// Severity of every finding of a rule, replacing the rule's own (rule id -> severity).
    pub severity_overrides: BTreeMap<String, Severity>,
    /// How long the kubelet may take to reconcile, in seconds: a shared-pool cpuset may lag
    /// the checkpoint this long, and an entry of a pod that finished (or was admitted) this
    /// recently is not called stale yet. `None`: the kubelet's `cpuManagerReconcilePeriod`
    /// (10 s by default).
    pub reconcile_grace_seconds: Option<f64>,
    /// Pods the kubelet refused count for `exclusive-cpu-shortage` and `admission-rejection`
    /// while they are younger than this, in seconds (they stay in the API until deleted).
    /// Applies to pods from the live API; a pods file is judged as it was captured.
    pub rejection_window_seconds: i64,
    /// How long a Spark driver may have finished (`Succeeded`/`Failed`, from its containers'
    /// `finishedAt`) before `orphaned-executor` calls its remaining executors orphaned, in
    /// seconds. A driver that stops cleanly deletes its executors within seconds; this leaves
    /// room for that and for the garbage collector.
    pub orphan_grace_seconds: i64,
    /// `scheduler-conflict` counts the schedulers (`spec.schedulerName`) of the pods bound to
    /// this node this recently, in seconds (by the `PodScheduled` condition, else creation
    /// time). Applies to pods from the live API; a pods file is judged as it was captured.
    pub scheduler_conflict_window_seconds: i64,
    /// `orphaned-local-dir` judges a Spark scratch directory only when nothing below it was
    /// modified for this long, in seconds (its newest mtime), so that a directory of a pod
    /// that is starting or just stopped is left to Spark and the kubelet.
    pub local_dir_min_age_seconds: i64,
    /// `slow-api`, `slow-pod-admission` and `webhook-blocks-dry-run` judge the API probe samples
    /// taken this recently, in seconds (by each sample's start time).
    pub api_latency_window_seconds: i64,
    /// `slow-api` warns when the median latency of a read probe (`get`, `list`) is at least
    /// this, in seconds.
    pub slow_api_warning_seconds: f64,
    /// `slow-api` is critical when that median is at least this, in seconds.
    pub slow_api_critical_seconds: f64,
    /// The Spark client's request timeout assumed by `slow-pod-admission` when no driver on the
    /// node says otherwise, in seconds: Spark 3.x's `spark.kubernetes.submission.requestTimeout`
    /// and `spark.kubernetes.driver.requestTimeout` default to 10000 ms, as does fabric8's
    /// `KUBERNETES_REQUEST_TIMEOUT` under Spark 2.4.
    pub spark_client_timeout_seconds: f64,
    /// `apiserver-unreachable` fires when no API probe succeeded for this long, in seconds.
    pub apiserver_unreachable_seconds: i64,
    /// `half-submitted-driver` judges a Spark driver that waits to start on this node once it
    /// has waited this long, in seconds (since it was bound to the node): the kubelet retries a
    /// missing ConfigMap for a while, and spark-submit may still be applying it.
    pub half_submitted_grace_seconds: i64,
    /// `half-submitted-driver` is critical once the driver has waited this long, in seconds.
    pub half_submitted_critical_seconds: i64,
    /// `local-storage-eviction-risk` warns when a Spark pod's local storage, at the growth
    /// measured, reaches its limit or the node's eviction threshold within this many seconds.
    pub local_storage_warning_seconds: f64,
    /// ... and is critical within this many seconds.
    pub local_storage_critical_seconds: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            disabled_rules: BTreeSet::new(),
            severity_overrides: BTreeMap::new(),
            reconcile_grace_seconds: None,
            rejection_window_seconds: 3600,
            orphan_grace_seconds: 600,
            scheduler_conflict_window_seconds: 3600,
            local_dir_min_age_seconds: 3600,
            api_latency_window_seconds: 300,
            slow_api_warning_seconds: 1.0,
            slow_api_critical_seconds: 5.0,
            spark_client_timeout_seconds: 10.0,
            apiserver_unreachable_seconds: 120,
            half_submitted_grace_seconds: 300,
            half_submitted_critical_seconds: 1800,
            local_storage_warning_seconds: 1800.0,
            local_storage_critical_seconds: 300.0,
        }
    }
}

/// What is wrong with the rule settings: the rule id, or the key and its value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    /// `disabled_rules` or `severity_overrides` names no rule.
    #[error("unknown rule id {id:?} (see `nodemedic rules`)")]
    UnknownRule { id: String },
    /// A number of seconds that is negative or not a number.
    #[error("{key}: {value} is not a non-negative number of seconds")]
    NotNonNegative { key: &'static str, value: f64 },
    /// A whole number of seconds that is negative.
    #[error("{key}: {value} is negative")]
    Negative { key: &'static str, value: i64 },
    /// A number of seconds that is not above zero, or not a number.
    #[error("{key}: {value} is not a positive number of seconds")]
    NotPositive { key: &'static str, value: f64 },
    /// A whole number of seconds that is not above zero.
    #[error("{key}: {value} is not a positive number of seconds")]
    NotPositiveWhole { key: &'static str, value: i64 },
    /// A number of seconds below the one it must not be below (its key and value).
    #[error("{key}: {value} is below {floor_key} ({floor})")]
    Below {
        key: &'static str,
        value: f64,
        floor_key: &'static str,
        floor: f64,
    },
    /// A whole number of seconds below the one it must not be below (its key and value).
    #[error("{key}: {value} is below {floor_key} ({floor})")]
    BelowWhole {
        key: &'static str,
        value: i64,
        floor_key: &'static str,
        floor: i64,
    },
}

impl Settings {
    /// Checks what serde cannot: rule ids exist, numbers are in range. The error names the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for id in self.disabled_rules.iter().chain(self.severity_overrides.keys()) {
            if crate::rules::by_id(id).is_none() {
                return Err(SettingsError::UnknownRule { id: id.clone() });
            }
        }
        if let Some(g) = self.reconcile_grace_seconds {
            if !g.is_finite() || g < 0.0 {
                return Err(SettingsError::NotNonNegative {
                    key: "reconcile_grace_seconds",
                    value: g,
                });
            }
        }
        for (key, v) in [
            ("rejection_window_seconds", self.rejection_window_seconds),
            ("orphan_grace_seconds", self.orphan_grace_seconds),
            (
                "scheduler_conflict_window_seconds",
                self.scheduler_conflict_window_seconds,
            ),
            ("local_dir_min_age_seconds", self.local_dir_min_age_seconds),
            ("apiserver_unreachable_seconds", self.apiserver_unreachable_seconds),
            ("half_submitted_grace_seconds", self.half_submitted_grace_seconds),
            ("half_submitted_critical_seconds", self.half_submitted_critical_seconds),
        ] {
            if v < 0 {
                return Err(SettingsError::Negative { key, value: v });
            }
        }
        if self.api_latency_window_seconds <= 0 {
            return Err(SettingsError::NotPositiveWhole {
                key: "api_latency_window_seconds",
                value: self.api_latency_window_seconds,
            });
        }
        for (key, v) in [
            ("slow_api_warning_seconds", self.slow_api_warning_seconds),
            ("slow_api_critical_seconds", self.slow_api_critical_seconds),
            ("spark_client_timeout_seconds", self.spark_client_timeout_seconds),
            ("local_storage_warning_seconds", self.local_storage_warning_seconds),
            ("local_storage_critical_seconds", self.local_storage_critical_seconds),
        ] {
            if !v.is_finite() || v <= 0.0 {
                return Err(SettingsError::NotPositive { key, value: v });
            }
        }
        if self.half_submitted_critical_seconds < self.half_submitted_grace_seconds {
            return Err(SettingsError::BelowWhole {
                key: "half_submitted_critical_seconds",
                value: self.half_submitted_critical_seconds,
                floor_key: "half_submitted_grace_seconds",
                floor: self.half_submitted_grace_seconds,
            });
        }
        // Critical is the nearer forecast: the warning's window is the longer one.
        if self.local_storage_warning_seconds < self.local_storage_critical_seconds {
            return Err(SettingsError::Below {
                key: "local_storage_warning_seconds",
                value: self.local_storage_warning_seconds,
                floor_key: "local_storage_critical_seconds",
                floor: self.local_storage_critical_seconds,
            });
        }
        if self.slow_api_critical_seconds < self.slow_api_warning_seconds {
            return Err(SettingsError::Below {
                key: "slow_api_critical_seconds",
                value: self.slow_api_critical_seconds,
                floor_key: "slow_api_warning_seconds",
                floor: self.slow_api_warning_seconds,
            });
        }
        Ok(())
    }

    /// The reconcile grace in force for `snapshot`.
    pub fn reconcile_grace(&self, snapshot: &crate::NodeSnapshot) -> f64 {
        self.reconcile_grace_seconds
            .unwrap_or_else(|| snapshot.cpu_manager().reconcile_period_seconds)
    }

    /// Whether rule `id` runs.
    pub fn enabled(&self, id: &str) -> bool {
        !self.disabled_rules.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_settings_are_checked() {
        let bad = |f: fn(&mut Settings)| {
            let mut s = Settings::default();
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        assert_eq!(Settings::default().validate(), Ok(()));
        assert_eq!(
            bad(|s| s.slow_api_warning_seconds = 0.0),
            "slow_api_warning_seconds: 0 is not a positive number of seconds"
        );
        assert_eq!(
            bad(|s| s.spark_client_timeout_seconds = f64::NAN),
            "spark_client_timeout_seconds: NaN is not a positive number of seconds"
        );
        assert_eq!(
            bad(|s| s.slow_api_critical_seconds = 0.5),
            "slow_api_critical_seconds: 0.5 is below slow_api_warning_seconds (1)"
        );
        assert_eq!(
            bad(|s| s.apiserver_unreachable_seconds = -5),
            "apiserver_unreachable_seconds: -5 is negative"
        );
        assert_eq!(
            bad(|s| s.api_latency_window_seconds = 0),
            "api_latency_window_seconds: 0 is not a positive number of seconds"
        );
        assert_eq!(
            bad(|s| s.reconcile_grace_seconds = Some(-1.5)),
            "reconcile_grace_seconds: -1.5 is not a non-negative number of seconds"
        );
        assert_eq!(
            bad(|s| s.local_storage_warning_seconds = 60.0),
            "local_storage_warning_seconds: 60 is below local_storage_critical_seconds (300)",
        );
        assert_eq!(
            bad(|s| s.local_storage_critical_seconds = f64::NAN),
            "local_storage_critical_seconds: NaN is not a positive number of seconds",
        );
        assert_eq!(
            bad(|s| s.half_submitted_critical_seconds = 10),
            "half_submitted_critical_seconds: 10 is below half_submitted_grace_seconds (300)"
        );
        assert_eq!(
            bad(|s| {
                s.disabled_rules.insert("no-such-rule".into());
            }),
            "unknown rule id \"no-such-rule\" (see `nodemedic rules`)"
        );
        let negative = Settings {
            orphan_grace_seconds: -1,
            ..Default::default()
        };
        assert_eq!(
            negative.validate(),
            Err(SettingsError::Negative {
                key: "orphan_grace_seconds",
                value: -1
            })
        );
    }
}
