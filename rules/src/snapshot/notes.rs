//! The notes of a snapshot: what the collectors and the scan noticed and skipped, shown in
//! the report. The few that the code changes after they are written (which source decides
//! liveness) are typed, so none is found or rewritten by matching its text; the rest are free
//! text ([`Note::Other`]).

use std::fmt;

/// Where a scan without a usable pod list takes liveness from (which pods are alive), as a
/// note tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// A pod is alive while its cgroup has processes.
    Cgroups,
    /// A pod is alive while the kubelet's PodResources API lists it.
    PodResources,
}

impl fmt::Display for Liveness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Liveness::Cgroups => "cgroups",
            Liveness::PodResources => "the kubelet's PodResources API",
        })
    }
}

/// One note of a snapshot. [`Display`](fmt::Display) gives its text in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The Kubernetes API was not used (its configuration did not load, or its pod list
    /// failed and the caller allowed a fallback): `reason` is the error as shown.
    ApiNotUsed { reason: String, liveness: Liveness },
    /// A pods file holds `pods` pods but none bound to `node`, a name guessed for this host
    /// (not given): the file is not used, since every entry would look stale.
    GuessedNodeUnmatched {
        pods: usize,
        node: String,
        liveness: Liveness,
    },
    /// Anything else, as written.
    Other(String),
}

impl Note {
    /// The Kubernetes API was not used because of `reason`; liveness from the cgroups.
    pub fn api_not_used(reason: impl fmt::Display) -> Self {
        Note::ApiNotUsed {
            reason: reason.to_string(),
            liveness: Liveness::Cgroups,
        }
    }

    /// Says that liveness comes from `source`, for the notes that tell where it comes from
    /// (the others are left as they are).
    pub fn set_liveness(&mut self, source: Liveness) {
        match self {
            Note::ApiNotUsed { liveness, .. } | Note::GuessedNodeUnmatched { liveness, .. } => *liveness = source,
            Note::Other(_) => {}
        }
    }

    /// The note's text without where liveness comes from: for [`Note::ApiNotUsed`], why
    /// there is no pod list (`Kubernetes API not used (<reason>)`); the whole text otherwise.
    pub fn without_liveness(&self) -> String {
        match self {
            Note::ApiNotUsed { reason, .. } => format!("Kubernetes API not used ({reason})"),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::ApiNotUsed { liveness, .. } => write!(f, "{}: liveness from {liveness}", self.without_liveness()),
            Note::GuessedNodeUnmatched { pods, node, liveness } => write!(
                f,
                "the pods file has {pods} pods but none is bound to node {node} (a guessed name): \
                 judging liveness from {liveness} instead; pass --node to use the file"
            ),
            Note::Other(text) => f.write_str(text),
        }
    }
}

impl From<String> for Note {
    fn from(text: String) -> Self {
        Note::Other(text)
    }
}

impl From<&str> for Note {
    fn from(text: &str) -> Self {
        Note::Other(text.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report shows each note as the text the string notes held before they were typed,
    /// in both states of the liveness clause, and moving liveness touches only the notes that
    /// tell it (never free text, even free text that reads like them).
    #[test]
    fn notes_print_their_text_and_only_typed_ones_move_liveness() {
        let mut api = Note::api_not_used("no kubeconfig: $HOME/.kube/config not found");
        let mut guessed = Note::GuessedNodeUnmatched {
            pods: 3,
            node: "ip-10-0-3-17".into(),
            liveness: Liveness::Cgroups,
        };
        let mut other = Note::from("Kubernetes API not used (x): liveness from cgroups");
        assert_eq!(
            api.to_string(),
            "Kubernetes API not used (no kubeconfig: $HOME/.kube/config not found): liveness from cgroups"
        );
        assert_eq!(
            api.without_liveness(),
            "Kubernetes API not used (no kubeconfig: $HOME/.kube/config not found)"
        );
        assert_eq!(
            guessed.to_string(),
            "the pods file has 3 pods but none is bound to node ip-10-0-3-17 (a guessed name): \
             judging liveness from cgroups instead; pass --node to use the file"
        );
        for n in [&mut api, &mut guessed, &mut other] {
            n.set_liveness(Liveness::PodResources);
        }
        assert_eq!(
            api.to_string(),
            "Kubernetes API not used (no kubeconfig: $HOME/.kube/config not found): \
             liveness from the kubelet's PodResources API"
        );
        assert_eq!(
            api.without_liveness(),
            "Kubernetes API not used (no kubeconfig: $HOME/.kube/config not found)"
        );
        assert_eq!(
            guessed.to_string(),
            "the pods file has 3 pods but none is bound to node ip-10-0-3-17 (a guessed name): \
             judging liveness from the kubelet's PodResources API instead; pass --node to use the file"
        );
        assert_eq!(other.to_string(), "Kubernetes API not used (x): liveness from cgroups");
        assert_eq!(other.without_liveness(), other.to_string());
    }
}
