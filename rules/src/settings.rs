//! Rule settings: which rules run and their thresholds. Defaults are what a node wants
//! without any configuration; the daemon's configuration file fills this in.

use std::collections::BTreeSet;

/// Settings shared by all rules.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct Settings {
    /// Rule ids that do not run.
    pub disabled_rules: BTreeSet<String>,
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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            disabled_rules: BTreeSet::new(),
            reconcile_grace_seconds: None,
            rejection_window_seconds: 3600,
            orphan_grace_seconds: 600,
            scheduler_conflict_window_seconds: 3600,
            local_dir_min_age_seconds: 3600,
        }
    }
}

impl Settings {
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
