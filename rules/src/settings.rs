//! Rule settings: which rules run and their thresholds. Defaults are what a node wants
//! without any configuration; the daemon's configuration file fills this in.

use std::collections::BTreeSet;

/// Settings shared by all rules.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct Settings {
    /// Rule ids that do not run.
    pub disabled_rules: BTreeSet<String>,
    /// How long a shared-pool container's cpuset may lag the checkpoint before it is drift,
    /// in seconds. `None`: the kubelet's `cpuManagerReconcilePeriod` (10 s by default).
    pub drift_grace_seconds: Option<f64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { disabled_rules: BTreeSet::new(), drift_grace_seconds: None }
    }
}

impl Settings {
    /// Whether rule `id` runs.
    pub fn enabled(&self, id: &str) -> bool {
        !self.disabled_rules.contains(id)
    }
}
