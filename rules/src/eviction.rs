//! When the taint manager evicts a pod from a node that lost the control plane: the pod's
//! tolerations of the `NoExecute` taints the node lifecycle controller puts on such a node, and
//! the taint manager's reckoning of them (driver fencing's deadline is counted from it).

use crate::snapshot::PodInfo;

/// A toleration of a pod (`spec.tolerations[]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Toleration {
    /// The taint key it tolerates; `None` (or empty) with operator `Exists` tolerates every key.
    pub key: Option<String>,
    /// `Equal` (the default) or `Exists`.
    pub operator: Option<String>,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; `None` tolerates every effect.
    pub effect: Option<String>,
    /// `tolerationSeconds`: how long a `NoExecute` taint is tolerated; `None` is for ever.
    pub seconds: Option<i64>,
}

/// The taint the node lifecycle controller puts on a node whose kubelet stopped reporting.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint it puts on a node whose kubelet reports `Ready=False`.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";

/// When a pod is evicted from a node carrying a `NoExecute` taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// No toleration matches: as soon as the taint is there.
    Immediately,
    /// After this many seconds (the smallest `tolerationSeconds` of the matching tolerations).
    After(i64),
    /// A matching toleration has no `tolerationSeconds`: never.
    Never,
}

impl Toleration {
    /// Whether it tolerates the taint `key` with effect `NoExecute` (the taint's value is
    /// empty, as the node lifecycle controller sets it).
    pub fn tolerates_no_execute(&self, key: &str) -> bool {
        let effect_ok = self.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoExecute");
        let own_key = self.key.as_deref().unwrap_or("");
        let key_ok = match self.operator.as_deref() {
            Some("Exists") => own_key.is_empty() || own_key == key,
            _ => own_key == key && self.value.as_deref().unwrap_or("").is_empty(),
        };
        effect_ok && key_ok
    }
}

impl PodInfo {
    /// When the taint manager evicts this pod from a node tainted `key:NoExecute`, by the
    /// taint manager's own reckoning: no matching toleration evicts at once; otherwise the
    /// smallest `tolerationSeconds` among the matching ones counts (0 or less is at once), and
    /// only when none has it is the pod left for ever.
    pub fn eviction_for(&self, key: &str) -> Eviction {
        let matching: Vec<&Toleration> = self
            .tolerations
            .iter()
            .filter(|t| t.tolerates_no_execute(key))
            .collect();
        if matching.is_empty() {
            return Eviction::Immediately;
        }
        match matching.iter().filter_map(|t| t.seconds).min() {
            Some(s) if s <= 0 => Eviction::Immediately,
            Some(s) => Eviction::After(s),
            None => Eviction::Never,
        }
    }

    /// How soon this pod is evicted from a node cut off from the control plane: the sooner of
    /// the `unreachable` and `not-ready` taints (which one the node gets depends on whether its
    /// kubelet last said `Ready=False` or stopped reporting).
    pub fn partition_eviction(&self) -> Eviction {
        let rank = |e: Eviction| match e {
            Eviction::Immediately => (0, 0),
            Eviction::After(s) => (1, s),
            Eviction::Never => (2, 0),
        };
        let (a, b) = (self.eviction_for(TAINT_UNREACHABLE), self.eviction_for(TAINT_NOT_READY));
        if rank(a) <= rank(b) { a } else { b }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::PodInfo;

    fn tol(key: Option<&str>, op: Option<&str>, effect: Option<&str>, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: key.map(str::to_string),
            operator: op.map(str::to_string),
            value: None,
            effect: effect.map(str::to_string),
            seconds,
        }
    }

    fn with(tolerations: Vec<Toleration>) -> PodInfo {
        PodInfo {
            tolerations,
            ..Default::default()
        }
    }

    #[test]
    fn eviction_follows_the_taint_managers_reckoning() {
        let exists = Some("Exists");
        // What the DefaultTolerationSeconds admission plugin adds to every pod.
        let defaults = vec![
            tol(Some(TAINT_NOT_READY), exists, Some("NoExecute"), Some(300)),
            tol(Some(TAINT_UNREACHABLE), exists, Some("NoExecute"), Some(300)),
        ];
        assert_eq!(with(defaults.clone()).partition_eviction(), Eviction::After(300));
        // The sooner of the two taints counts.
        let mut short = defaults.clone();
        short[0].seconds = Some(120);
        assert_eq!(with(short).partition_eviction(), Eviction::After(120));
        // No toleration at all: evicted as soon as the node is tainted.
        assert_eq!(with(vec![]).partition_eviction(), Eviction::Immediately);
        // Zero or negative seconds: at once, whatever else matches.
        let zero = vec![
            tol(Some(TAINT_UNREACHABLE), exists, None, Some(0)),
            tol(None, exists, None, None),
        ];
        assert_eq!(with(zero).eviction_for(TAINT_UNREACHABLE), Eviction::Immediately);
        // A match without seconds beside one with seconds: the seconds count (the smallest).
        let mixed = vec![
            tol(None, exists, None, None),
            tol(Some(TAINT_UNREACHABLE), exists, Some("NoExecute"), Some(600)),
        ];
        assert_eq!(with(mixed).eviction_for(TAINT_UNREACHABLE), Eviction::After(600));
        // Only matches without seconds: never.
        let forever = vec![tol(None, exists, None, None)];
        assert_eq!(with(forever).partition_eviction(), Eviction::Never);
        // Other effects, other keys and other values do not match.
        let mut valued = tol(Some(TAINT_UNREACHABLE), Some("Equal"), Some("NoExecute"), None);
        valued.value = Some("x".into());
        let other = vec![
            tol(Some(TAINT_UNREACHABLE), exists, Some("NoSchedule"), Some(5)),
            tol(Some("example.com/gpu"), exists, Some("NoExecute"), Some(5)),
            valued,
        ];
        assert_eq!(with(other).eviction_for(TAINT_UNREACHABLE), Eviction::Immediately);
        // `Equal` (the default operator) with the taint's empty value matches.
        let equal = vec![tol(Some(TAINT_UNREACHABLE), None, Some("NoExecute"), Some(45))];
        assert_eq!(with(equal).eviction_for(TAINT_UNREACHABLE), Eviction::After(45));
    }
}
