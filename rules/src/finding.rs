//! What a rule reports: a [`Finding`] with its subject, evidence and remedy.
//!
//! The JSON form is the report contract of docs/architecture.md (`rule`, `severity`, `subject`,
//! `summary`, `evidence`, `remedy`).

use serde_json::{Map, Value};

/// How bad it is. Ordered: `Info < Warning < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    /// `info`, `warning`, `critical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// The kind of object a finding is about, as Kubernetes names it (`Pod`, `Node`,
/// `ResourceClaim`). Only nodemedic writes it, so the list is closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SubjectKind {
    /// A pod, by namespace and name or by UID only (its object may be gone). The default.
    #[default]
    Pod,
    /// The node itself.
    Node,
    /// A Dynamic Resource Allocation claim (resource.k8s.io).
    ResourceClaim,
}

impl SubjectKind {
    /// The Kubernetes kind: `Pod`, `Node`, `ResourceClaim`.
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectKind::Pod => "Pod",
            SubjectKind::Node => "Node",
            SubjectKind::ResourceClaim => "ResourceClaim",
        }
    }
}

impl std::fmt::Display for SubjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for SubjectKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The object a finding is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Subject {
    pub kind: SubjectKind,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
    pub container: Option<String>,
}

impl Subject {
    /// The node itself.
    pub fn node(name: &str) -> Self {
        Subject {
            kind: SubjectKind::Node,
            name: Some(name.to_string()),
            ..Default::default()
        }
    }

    /// A pod known by UID only (its object may be gone).
    pub fn pod_uid(uid: &str) -> Self {
        Subject {
            kind: SubjectKind::Pod,
            uid: Some(uid.to_string()),
            ..Default::default()
        }
    }

    /// A pod from the pod list.
    pub fn pod(pod: &crate::snapshot::PodInfo) -> Self {
        Subject {
            kind: SubjectKind::Pod,
            namespace: Some(pod.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: Some(pod.uid.clone()),
            container: None,
        }
    }

    /// The same subject narrowed to one container.
    pub fn with_container(mut self, container: Option<String>) -> Self {
        self.container = container;
        self
    }

    /// How a person names it: `ns/name`, else the UID, else the node name.
    pub fn display(&self) -> String {
        match (&self.namespace, &self.name, &self.uid) {
            (Some(ns), Some(name), _) => format!("{ns}/{name}"),
            (_, _, Some(uid)) => format!("pod {uid}"),
            (_, Some(name), _) => name.clone(),
            _ => self.kind.to_string(),
        }
    }
}

/// One problem found, with the evidence to believe it and the command that fixes it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    pub rule: String,
    pub severity: Severity,
    pub subject: Subject,
    pub summary: String,
    pub evidence: Map<String, Value>,
    pub remedy: String,
}

impl Finding {
    /// A finding of `rule` with empty evidence.
    pub fn new(rule: &str, severity: Severity, subject: Subject, summary: String, remedy: String) -> Self {
        Finding {
            rule: rule.to_string(),
            severity,
            subject,
            summary,
            evidence: Map::new(),
            remedy,
        }
    }

    /// Adds one evidence field (skipped when the value is `null`).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        let value = value.into();
        if !value.is_null() {
            self.evidence.insert(key.to_string(), value);
        }
        self
    }

    /// A stable order: worst first, then rule, then subject.
    pub fn sort_key(&self) -> (std::cmp::Reverse<Severity>, String, String, String, String) {
        (
            std::cmp::Reverse(self.severity),
            self.rule.clone(),
            self.subject
                .uid
                .clone()
                .or_else(|| self.subject.name.clone())
                .unwrap_or_default(),
            self.subject.container.clone().unwrap_or_default(),
            self.summary.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report's JSON of a finding is the contract: the subject's kind prints as the
    /// Kubernetes kind, byte for byte what the `String` field printed.
    #[test]
    fn findings_serialize_their_subject_kind_as_kubernetes_names_it() {
        let pod = crate::snapshot::PodInfo {
            uid: "u1".into(),
            namespace: "spark".into(),
            name: "exec-1".into(),
            ..Default::default()
        };
        let cases = [
            (
                Subject::pod(&pod).with_container(Some("app".into())),
                r#"{"kind":"Pod","namespace":"spark","name":"exec-1","uid":"u1","container":"app"}"#,
            ),
            (
                Subject::pod_uid("39b3"),
                r#"{"kind":"Pod","namespace":null,"name":null,"uid":"39b3","container":null}"#,
            ),
            (
                Subject::node("worker-3"),
                r#"{"kind":"Node","namespace":null,"name":"worker-3","uid":null,"container":null}"#,
            ),
            (
                Subject {
                    kind: SubjectKind::ResourceClaim,
                    namespace: Some("ml".into()),
                    name: Some("gpu".into()),
                    uid: Some("c1".into()),
                    container: None,
                },
                r#"{"kind":"ResourceClaim","namespace":"ml","name":"gpu","uid":"c1","container":null}"#,
            ),
        ];
        for (subject, want) in cases {
            let finding = Finding::new("r", Severity::Warning, subject, "s".into(), "fix".into()).with("cpus", "2-3");
            assert_eq!(
                serde_json::to_string(&finding).unwrap(),
                format!(
                    r#"{{"rule":"r","severity":"warning","subject":{want},"summary":"s","evidence":{{"cpus":"2-3"}},"remedy":"fix"}}"#
                )
            );
        }
        let kinds = [SubjectKind::Pod, SubjectKind::Node, SubjectKind::ResourceClaim];
        let printed: Vec<String> = kinds.iter().map(|k| format!("{k} {}", k.as_str())).collect();
        assert_eq!(printed, ["Pod Pod", "Node Node", "ResourceClaim ResourceClaim"]);
        // A subject with no name or UID is shown by its kind.
        let nameless = Subject {
            kind: SubjectKind::ResourceClaim,
            ..Default::default()
        };
        assert_eq!(nameless.display(), "ResourceClaim");
        assert_eq!(Subject::default().kind, SubjectKind::Pod);
    }
}
