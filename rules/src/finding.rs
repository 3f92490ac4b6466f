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

/// The object a finding is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Subject {
    /// `Pod` or `Node`.
    pub kind: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
    pub container: Option<String>,
}

impl Subject {
    /// The node itself.
    pub fn node(name: &str) -> Self {
        Subject {
            kind: "Node".into(),
            name: Some(name.to_string()),
            ..Default::default()
        }
    }

    /// A pod known by UID only (its object may be gone).
    pub fn pod_uid(uid: &str) -> Self {
        Subject {
            kind: "Pod".into(),
            uid: Some(uid.to_string()),
            ..Default::default()
        }
    }

    /// A pod from the pod list.
    pub fn pod(pod: &crate::snapshot::PodInfo) -> Self {
        Subject {
            kind: "Pod".into(),
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
            _ => self.kind.clone(),
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
