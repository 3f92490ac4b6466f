//! What a rule reports: a [`Finding`] with its subject, evidence and remedy.
//!
//! The JSON form is the report contract of docs/architecture.md (`rule`, `severity`, `subject`,
//! `summary`, `evidence`, `remedy`).

use serde_json::{Map, Value};

/// The evidence field that tells apart the findings of one rule about one subject (what each
/// is about, such as `checkpoint-invalid-state`'s `cpus-mismatch`): part of [`FindingKey`].
/// It stays evidence, not a field of its own, because the report shows it there.
pub const PROBLEM: &str = "problem";

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

/// What identifies one finding across scans, processes and restarts: its rule, its subject's
/// kind, the subject (UID, else name), its container, and its problem code (the node-level
/// findings of one rule can differ by what they are about: `evidence["problem"]`). Nothing
/// process-local, so the same finding has the same key in any agent. A missing part is empty.
///
/// Its [`parts`](FindingKey::parts), in this order, are the text Event names are hashed from
/// (and [`Display`](std::fmt::Display) joins them with `|`, the form the key had as a string):
/// neither may ever change, or a restarted agent would not find its series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FindingKey {
    pub rule: RuleId,
    pub kind: SubjectKind,
    /// The subject's UID, else its name; empty with neither.
    pub object: String,
    /// The container; empty for a whole pod or another kind.
    pub container: String,
    /// The finding's problem code; empty when its rule sets none.
    pub problem: String,
}

impl FindingKey {
    /// Rule, kind, object, container, problem, as text.
    pub fn parts(&self) -> [&str; 5] {
        [
            self.rule.as_str(),
            self.kind.as_str(),
            &self.object,
            &self.container,
            &self.problem,
        ]
    }
}

/// By [`parts`](FindingKey::parts), compared as text (the kind by its Kubernetes name).
impl Ord for FindingKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

impl PartialOrd for FindingKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for FindingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.parts().join("|"))
    }
}

/// A rule's stable id (`stale-cpu-assignment`): the name of its page under docs/rules/, its
/// findings' `rule`, the `rule` label of its metrics. Each rule declares its own as a constant
/// (`stale_cpu_assignment::ID`), and code that means a rule names that constant, so a rule id
/// is never a free string compared by hand. Serialized as the plain string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(&'static str);

impl RuleId {
    /// The id `id` (a rule's constant; ids are lowercase words joined by `-`).
    pub const fn new(id: &'static str) -> Self {
        RuleId(id)
    }

    /// The id as text.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

/// For tests and tables that name a rule by its text; rules declare theirs with [`RuleId::new`].
impl From<&'static str> for RuleId {
    fn from(id: &'static str) -> Self {
        RuleId(id)
    }
}

/// The id, padded as a string is (`{:<26}`).
impl std::fmt::Display for RuleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.0)
    }
}

impl serde::Serialize for RuleId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

/// One problem found, with the evidence to believe it and the command that fixes it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    pub rule: RuleId,
    pub severity: Severity,
    pub subject: Subject,
    pub summary: String,
    pub evidence: Map<String, Value>,
    pub remedy: String,
}

impl Finding {
    /// A finding of `rule` with empty evidence.
    pub fn new(rule: RuleId, severity: Severity, subject: Subject, summary: String, remedy: String) -> Self {
        Finding {
            rule,
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

    /// Its identity across scans ([`FindingKey`]).
    pub fn key(&self) -> FindingKey {
        let s = &self.subject;
        FindingKey {
            rule: self.rule,
            kind: s.kind,
            object: s.uid.clone().or_else(|| s.name.clone()).unwrap_or_default(),
            container: s.container.clone().unwrap_or_default(),
            problem: self
                .evidence
                .get(PROBLEM)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// A stable order: worst first, then rule, then subject.
    pub fn sort_key(&self) -> (std::cmp::Reverse<Severity>, RuleId, String, String, String) {
        (
            std::cmp::Reverse(self.severity),
            self.rule,
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

    #[test]
    fn a_rule_id_prints_and_serializes_as_its_text() {
        let id = RuleId::new("stale-cpu-assignment");
        assert_eq!(format!("[{id:<22}]"), "[stale-cpu-assignment  ]");
        assert_eq!(
            serde_json::to_value(id).unwrap(),
            serde_json::json!("stale-cpu-assignment")
        );
        assert_eq!(id.as_str(), "stale-cpu-assignment");
    }

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
            let finding = Finding::new(
                crate::finding::RuleId::new("r"),
                Severity::Warning,
                subject,
                "s".into(),
                "fix".into(),
            )
            .with("cpus", "2-3");
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

    /// A finding's key is its identity and nothing else: the evidence beyond the problem code,
    /// the severity, the summary and a pod's namespace and name beside its UID do not move it;
    /// each part does, and an absent part is empty, as the `|`-joined string key had it.
    #[test]
    fn finding_keys_hold_the_identity_only() {
        let pod = Subject {
            kind: SubjectKind::Pod,
            namespace: Some("spark".into()),
            name: Some("exec-1".into()),
            uid: Some("u1".into()),
            container: Some("c".into()),
        };
        let f = |subject: Subject| {
            Finding::new(
                crate::finding::RuleId::new("orphaned-executor"),
                Severity::Warning,
                subject,
                "s".into(),
                "r".into(),
            )
        };
        let key = f(pod.clone()).key();
        assert_eq!(
            key,
            FindingKey {
                rule: crate::finding::RuleId::new("orphaned-executor"),
                kind: SubjectKind::Pod,
                object: "u1".into(),
                container: "c".into(),
                problem: String::new(),
            }
        );
        assert_eq!(key.to_string(), "orphaned-executor|Pod|u1|c|");
        let mut same = f(Subject {
            namespace: Some("other".into()),
            ..pod.clone()
        })
        .with("cpus", "2-3");
        same.severity = Severity::Critical;
        same.summary = "else".into();
        assert_eq!(same.key(), key);
        let node = Finding::new(
            RuleId::new("checkpoint-invalid-state"),
            Severity::Critical,
            Subject::node("n1"),
            "s".into(),
            "r".into(),
        );
        assert_eq!(node.key().to_string(), "checkpoint-invalid-state|Node|n1||");
        let mismatch = node.clone().with(PROBLEM, "cpus-mismatch");
        assert_eq!(
            mismatch.key().to_string(),
            "checkpoint-invalid-state|Node|n1||cpus-mismatch"
        );
        assert_eq!(
            mismatch.key().parts(),
            ["checkpoint-invalid-state", "Node", "n1", "", "cpus-mismatch"]
        );
        let keys = [
            key.clone(),
            f(Subject {
                container: None,
                ..pod.clone()
            })
            .key(),
            f(Subject {
                uid: None,
                ..pod.clone()
            })
            .key(),
            f(Subject::pod_uid("u2")).key(),
            f(Subject {
                kind: SubjectKind::ResourceClaim,
                ..pod.clone()
            })
            .key(),
            node.key(),
            mismatch.key(),
            node.clone().with(PROBLEM, "policy-mismatch").key(),
        ];
        let distinct: std::collections::HashSet<&FindingKey> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        // Without a UID the name identifies; a subject with neither has an empty object.
        assert_eq!(keys[2].object, "exec-1");
        assert_eq!(
            Finding::new(
                crate::finding::RuleId::new("r"),
                Severity::Info,
                Subject::default(),
                "s".into(),
                "r".into()
            )
            .key()
            .object,
            ""
        );
        // Ordered by the parts as text: the kind by its name, so a Node sorts before a Pod.
        let mut sorted = keys.to_vec();
        sorted.sort();
        let shown: Vec<String> = sorted.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "checkpoint-invalid-state|Node|n1||",
                "checkpoint-invalid-state|Node|n1||cpus-mismatch",
                "checkpoint-invalid-state|Node|n1||policy-mismatch",
                "orphaned-executor|Pod|exec-1|c|",
                "orphaned-executor|Pod|u1||",
                "orphaned-executor|Pod|u1|c|",
                "orphaned-executor|Pod|u2||",
                "orphaned-executor|ResourceClaim|u1|c|",
            ]
        );
    }
}
