//! Which admission webhooks apply to a pod CREATE: admissionregistration.k8s.io/v1 matching,
//! on our own small types.
//!
//! The agent lists the Mutating/ValidatingWebhookConfigurations, converts each webhook into a
//! [`WebhookSpec`], and asks [`matches_pod_create`] whether the API server would call it for a
//! pod created in a namespace with given labels; [`info`] turns the answer into the snapshot's
//! [`WebhookInfo`]. The semantics mirror the API server's
//! (`k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/{rules,namespace,object}` and
//! `generic/webhook.go`'s `ShouldCallHook`):
//!
//! - a rule matches when its scope, operations, API groups, API versions and resources all do:
//!   operations `*` or `CREATE`; apiGroups `""` (core) or `*`; apiVersions `v1` or `*`;
//!   resources `pods`, `*`, `pods/*` or `*/*` (a `res/sub` entry matches the resource itself when
//!   `sub` is `*`, as upstream's rule tests show; `pods/status` or `*/exec` do not match a create
//!   of the pod itself); scope unset or `*`, or `Namespaced` (pods are namespaced), never
//!   `Cluster`. Any one rule matching is enough; empty lists match nothing.
//! - `namespaceSelector` is evaluated against the namespace's labels, which include
//!   `kubernetes.io/metadata.name: <namespace>` (set by the API server since 1.21; use
//!   [`namespace_labels`] to add it); `objectSelector` against the pod's labels. An absent
//!   selector (v1 defaults it to `{}`) and an empty one match everything.
//! - `matchPolicy` makes no difference for pods: no other group or version serves them, so
//!   `Equivalent` (the default) finds nothing `Exact` would not.
//! - `matchConditions` (CEL) are not evaluated here: a webhook with conditions is reported as
//!   matching when its rules and selectors do, which can only overstate (the caller may say so).
//! - A selector the API server could not parse (an unknown operator, `In` without values,
//!   `Exists` with values) makes the API server fail the request with an internal error when
//!   the rules match; such a webhook therefore affects pod creation and counts as matching.
//!   Validation keeps such selectors out of stored configurations, so this is a corner.
//!
//! Defaults (admissionregistration/v1): `timeoutSeconds` 10, `failurePolicy` `Fail`,
//! `matchPolicy` `Equivalent`; `sideEffects` is required in v1 (v1beta1 defaulted it to
//! `Unknown`, which is what an unset value means here).

use std::collections::BTreeMap;

use crate::snapshot::WebhookInfo;

/// The label the API server puts on every namespace, holding its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// `timeoutSeconds` when unset (admissionregistration/v1).
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 10;
/// `failurePolicy` when unset (admissionregistration/v1).
pub const DEFAULT_FAILURE_POLICY: &str = "Fail";
/// `matchPolicy` when unset (admissionregistration/v1).
pub const DEFAULT_MATCH_POLICY: &str = "Equivalent";
/// `sideEffects` when unset (the v1beta1 default; v1 requires the field).
pub const DEFAULT_SIDE_EFFECTS: &str = "Unknown";

/// A mutating or a validating webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookKind {
    #[default]
    Mutating,
    Validating,
}

impl WebhookKind {
    /// `mutating` or `validating`, as in [`WebhookInfo::kind`].
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookKind::Mutating => "mutating",
            WebhookKind::Validating => "validating",
        }
    }
}

/// One entry of a webhook's `rules` (`RuleWithOperations`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleWithOperations {
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`.
    pub operations: Vec<String>,
    /// `""` is the core group; `*` all groups.
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    /// `pods`, `pods/status`, `*`, `*/*`, `pods/*`, `*/scale`, ...
    pub resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*` (`None`: `*`).
    pub scope: Option<String>,
}

/// One requirement of a label selector's `matchExpressions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelectorRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist` (as the API spells them).
    pub operator: String,
    pub values: Vec<String>,
}

/// A `metav1.LabelSelector`: every `matchLabels` pair and every expression must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// A selector the API server would refuse to parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{key}: {operator:?} is not a valid label selector operator")]
    UnknownOperator { key: String, operator: String },
    #[error("{key}: for 'In' and 'NotIn' the values must not be empty")]
    ValuesRequired { key: String },
    #[error("{key}: for 'Exists' and 'DoesNotExist' the values must be empty")]
    ValuesForbidden { key: String },
}

impl LabelSelector {
    /// Whether it selects everything (no labels, no expressions).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` satisfy the selector (`metav1.LabelSelectorAsSelector` semantics).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
        // Parse everything first, as the API server does, so an invalid expression is an error
        // even when an earlier requirement already fails.
        for r in &self.match_expressions {
            match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Err(SelectorError::ValuesRequired { key: r.key.clone() });
                }
                "Exists" | "DoesNotExist" if !r.values.is_empty() => {
                    return Err(SelectorError::ValuesForbidden { key: r.key.clone() });
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => {
                    return Err(SelectorError::UnknownOperator {
                        key: r.key.clone(),
                        operator: other.to_string(),
                    });
                }
            }
        }
        let labels_ok = self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
        let expressions_ok = self.match_expressions.iter().all(|r| {
            let value = labels.get(&r.key);
            match r.operator.as_str() {
                "In" => value.is_some_and(|v| r.values.contains(v)),
                "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                "Exists" => value.is_some(),
                _ => value.is_none(), // DoesNotExist
            }
        });
        Ok(labels_ok && expressions_ok)
    }
}

/// An admission webhook as configured, in admissionregistration/v1 terms. Optional fields are
/// `None` when unset; the `effective_*` methods apply the v1 defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookSpec {
    /// The Mutating/ValidatingWebhookConfiguration's name.
    pub configuration: String,
    /// The webhook's name (unique within its configuration).
    pub name: String,
    pub kind: WebhookKind,
    pub rules: Vec<RuleWithOperations>,
    pub namespace_selector: Option<LabelSelector>,
    pub object_selector: Option<LabelSelector>,
    pub timeout_seconds: Option<i32>,
    /// `Fail` or `Ignore`.
    pub failure_policy: Option<String>,
    /// `None`, `NoneOnDryRun`, `Some` or `Unknown`.
    pub side_effects: Option<String>,
    /// `Exact` or `Equivalent`.
    pub match_policy: Option<String>,
    /// Names of its `matchConditions` (CEL, not evaluated here).
    pub match_conditions: Vec<String>,
}

impl WebhookSpec {
    /// `timeoutSeconds`, 10 when unset.
    pub fn effective_timeout_seconds(&self) -> i32 {
        self.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS)
    }

    /// `failurePolicy`, `Fail` when unset.
    pub fn effective_failure_policy(&self) -> &str {
        self.failure_policy.as_deref().unwrap_or(DEFAULT_FAILURE_POLICY)
    }

    /// `matchPolicy`, `Equivalent` when unset.
    pub fn effective_match_policy(&self) -> &str {
        self.match_policy.as_deref().unwrap_or(DEFAULT_MATCH_POLICY)
    }

    /// `sideEffects`, `Unknown` when unset.
    pub fn effective_side_effects(&self) -> &str {
        self.side_effects.as_deref().unwrap_or(DEFAULT_SIDE_EFFECTS)
    }

    /// Whether a dry-run request it matches fails with 400 (`sideEffects` other than `None`
    /// and `NoneOnDryRun`), whatever its `failurePolicy`.
    pub fn blocks_dry_run(&self) -> bool {
        !matches!(self.effective_side_effects(), "None" | "NoneOnDryRun")
    }
}

/// Whether a list holds `wanted` or `*`.
fn exact_or_wildcard(items: &[String], wanted: &str) -> bool {
    items.iter().any(|i| i == "*" || i == wanted)
}

/// Whether one rule matches a CREATE of `pods` (core/v1, no subresource, namespaced).
pub fn rule_matches_pod_create(rule: &RuleWithOperations) -> bool {
    let scope = match rule.scope.as_deref() {
        None | Some("*") | Some("Namespaced") => true,
        Some(_) => false, // "Cluster", or a value the API server would not match either
    };
    let resource = rule.resources.iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == "pods") && (sub == "*" || sub.is_empty())
    });
    scope
        && exact_or_wildcard(&rule.operations, "CREATE")
        && exact_or_wildcard(&rule.api_groups, "")
        && exact_or_wildcard(&rule.api_versions, "v1")
        && resource
}

/// Whether a selector (absent: everything) selects `labels`; an unparsable one counts as
/// selecting (see the module docs).
fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    selector.is_none_or(|s| s.matches(labels).unwrap_or(true))
}

/// Whether the API server calls `spec` for a pod CREATE in a namespace labelled
/// `namespace_labels` (including [`NAMESPACE_NAME_LABEL`]) of a pod labelled `pod_labels`.
pub fn matches_pod_create(
    spec: &WebhookSpec,
    namespace_labels: &BTreeMap<String, String>,
    pod_labels: &BTreeMap<String, String>,
) -> bool {
    spec.rules.iter().any(rule_matches_pod_create)
        && selects(spec.namespace_selector.as_ref(), namespace_labels)
        && selects(spec.object_selector.as_ref(), pod_labels)
}

/// A namespace's labels as the API server sees them: `labels` plus
/// `kubernetes.io/metadata.name: <name>` (which the API server sets and keeps).
pub fn namespace_labels(name: &str, labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut all = labels.clone();
    all.insert(NAMESPACE_NAME_LABEL.to_string(), name.to_string());
    all
}

/// The snapshot's view of `spec`, with the v1 defaults applied and no latency yet.
pub fn info(spec: &WebhookSpec, matches_probe: bool, matches_namespaces: Vec<String>) -> WebhookInfo {
    WebhookInfo {
        configuration: spec.configuration.clone(),
        name: spec.name.clone(),
        kind: spec.kind.as_str().to_string(),
        timeout_seconds: spec.effective_timeout_seconds(),
        failure_policy: spec.effective_failure_policy().to_string(),
        side_effects: spec.effective_side_effects().to_string(),
        matches_probe,
        matches_namespaces,
        mean_latency_seconds: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn rule(
        ops: &[&str],
        groups: &[&str],
        versions: &[&str],
        resources: &[&str],
        scope: Option<&str>,
    ) -> RuleWithOperations {
        RuleWithOperations {
            operations: strings(ops),
            api_groups: strings(groups),
            api_versions: strings(versions),
            resources: strings(resources),
            scope: scope.map(str::to_string),
        }
    }

    fn pods_rule() -> RuleWithOperations {
        rule(&["CREATE"], &[""], &["v1"], &["pods"], None)
    }

    fn spec_with(rules: Vec<RuleWithOperations>) -> WebhookSpec {
        WebhookSpec {
            configuration: "istio-sidecar-injector".into(),
            name: "sidecar-injector.istio.io".into(),
            kind: WebhookKind::Mutating,
            rules,
            ..Default::default()
        }
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: strings(values),
        }
    }

    #[test]
    fn rules_table() {
        let cases: &[(&str, RuleWithOperations, bool)] = &[
            ("pods create", pods_rule(), true),
            ("operation *", rule(&["*"], &[""], &["v1"], &["pods"], None), true),
            (
                "update only",
                rule(&["UPDATE", "DELETE"], &[""], &["v1"], &["pods"], None),
                false,
            ),
            (
                "create among others",
                rule(&["UPDATE", "CREATE"], &[""], &["v1"], &["pods"], None),
                true,
            ),
            (
                "lowercase operation",
                rule(&["create"], &[""], &["v1"], &["pods"], None),
                false,
            ),
            ("group *", rule(&["CREATE"], &["*"], &["v1"], &["pods"], None), true),
            (
                "group apps",
                rule(&["CREATE"], &["apps"], &["v1"], &["pods"], None),
                false,
            ),
            ("version *", rule(&["CREATE"], &[""], &["*"], &["pods"], None), true),
            (
                "version v1beta1",
                rule(&["CREATE"], &[""], &["v1beta1"], &["pods"], None),
                false,
            ),
            ("resource *", rule(&["CREATE"], &[""], &["v1"], &["*"], None), true),
            ("resource */*", rule(&["CREATE"], &[""], &["v1"], &["*/*"], None), true),
            (
                "resource pods/* includes pods",
                rule(&["CREATE"], &[""], &["v1"], &["pods/*"], None),
                true,
            ),
            (
                "subresource pods/status",
                rule(&["CREATE"], &[""], &["v1"], &["pods/status"], None),
                false,
            ),
            (
                "subresource pods/ephemeralcontainers",
                rule(&["CREATE"], &[""], &["v1"], &["pods/ephemeralcontainers"], None),
                false,
            ),
            ("*/exec", rule(&["CREATE"], &[""], &["v1"], &["*/exec"], None), false),
            (
                "other resource",
                rule(&["CREATE"], &[""], &["v1"], &["configmaps", "services"], None),
                false,
            ),
            (
                "resource among others",
                rule(&["CREATE"], &[""], &["v1"], &["configmaps", "pods"], None),
                true,
            ),
            ("scope *", rule(&["CREATE"], &[""], &["v1"], &["pods"], Some("*")), true),
            (
                "scope Namespaced",
                rule(&["CREATE"], &[""], &["v1"], &["pods"], Some("Namespaced")),
                true,
            ),
            (
                "scope Cluster",
                rule(&["CREATE"], &[""], &["v1"], &["pods"], Some("Cluster")),
                false,
            ),
            ("empty operations", rule(&[], &[""], &["v1"], &["pods"], None), false),
            ("empty groups", rule(&["CREATE"], &[], &["v1"], &["pods"], None), false),
            ("empty resources", rule(&["CREATE"], &[""], &["v1"], &[], None), false),
        ];
        for (name, r, want) in cases {
            assert_eq!(rule_matches_pod_create(r), *want, "{name}");
            let spec = spec_with(vec![r.clone()]);
            assert_eq!(
                matches_pod_create(&spec, &BTreeMap::new(), &BTreeMap::new()),
                *want,
                "{name}"
            );
        }
        // Any one rule is enough; no rules match nothing.
        let spec = spec_with(vec![
            rule(&["CREATE"], &["apps"], &["v1"], &["deployments"], None),
            pods_rule(),
        ]);
        assert!(matches_pod_create(&spec, &BTreeMap::new(), &BTreeMap::new()));
        assert!(!matches_pod_create(
            &spec_with(vec![]),
            &BTreeMap::new(),
            &BTreeMap::new()
        ));
    }

    #[test]
    fn label_selector_table() {
        let pod = labels(&[("spark-role", "driver"), ("team", "etl")]);
        let sel = |match_labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>| LabelSelector {
            match_labels: labels(match_labels),
            match_expressions: exprs,
        };
        let cases: Vec<(&str, LabelSelector, Result<bool, SelectorError>)> = vec![
            ("empty {}", sel(&[], vec![]), Ok(true)),
            ("matchLabels equal", sel(&[("spark-role", "driver")], vec![]), Ok(true)),
            (
                "matchLabels differ",
                sel(&[("spark-role", "executor")], vec![]),
                Ok(false),
            ),
            (
                "matchLabels absent",
                sel(&[("istio-injection", "enabled")], vec![]),
                Ok(false),
            ),
            (
                "all pairs must hold",
                sel(&[("spark-role", "driver"), ("team", "ml")], vec![]),
                Ok(false),
            ),
            ("In hit", sel(&[], vec![expr("team", "In", &["etl", "ml"])]), Ok(true)),
            ("In miss", sel(&[], vec![expr("team", "In", &["ml"])]), Ok(false)),
            ("In absent key", sel(&[], vec![expr("tier", "In", &["a"])]), Ok(false)),
            ("NotIn hit", sel(&[], vec![expr("team", "NotIn", &["etl"])]), Ok(false)),
            ("NotIn other", sel(&[], vec![expr("team", "NotIn", &["ml"])]), Ok(true)),
            (
                "NotIn absent key",
                sel(&[], vec![expr("tier", "NotIn", &["a"])]),
                Ok(true),
            ),
            ("Exists", sel(&[], vec![expr("team", "Exists", &[])]), Ok(true)),
            ("Exists absent", sel(&[], vec![expr("tier", "Exists", &[])]), Ok(false)),
            (
                "DoesNotExist",
                sel(&[], vec![expr("tier", "DoesNotExist", &[])]),
                Ok(true),
            ),
            (
                "DoesNotExist present",
                sel(&[], vec![expr("team", "DoesNotExist", &[])]),
                Ok(false),
            ),
            (
                "labels and expressions together",
                sel(&[("spark-role", "driver")], vec![expr("team", "Exists", &[])]),
                Ok(true),
            ),
            (
                "In without values",
                sel(&[], vec![expr("team", "In", &[])]),
                Err(SelectorError::ValuesRequired { key: "team".into() }),
            ),
            (
                "Exists with values",
                sel(&[], vec![expr("team", "Exists", &["x"])]),
                Err(SelectorError::ValuesForbidden { key: "team".into() }),
            ),
            (
                "unknown operator, even after a failing requirement",
                sel(&[], vec![expr("tier", "In", &["a"]), expr("team", "in", &["etl"])]),
                Err(SelectorError::UnknownOperator {
                    key: "team".into(),
                    operator: "in".into(),
                }),
            ),
        ];
        for (name, s, want) in cases {
            assert_eq!(s.matches(&pod), want, "{name}");
        }
    }

    #[test]
    fn namespace_and_object_selectors() {
        let mut spec = spec_with(vec![pods_rule()]);
        let ns = namespace_labels("spark-jobs", &labels(&[("istio-injection", "enabled")]));
        assert_eq!(ns["kubernetes.io/metadata.name"], "spark-jobs");
        let driver = labels(&[("spark-role", "driver")]);

        // Absent selectors and empty ones select everything.
        assert!(matches_pod_create(&spec, &BTreeMap::new(), &BTreeMap::new()));
        spec.namespace_selector = Some(LabelSelector::default());
        spec.object_selector = Some(LabelSelector::default());
        assert!(matches_pod_create(&spec, &BTreeMap::new(), &BTreeMap::new()));

        // namespaceSelector against the namespace's labels, not the pod's.
        spec.namespace_selector = Some(LabelSelector {
            match_labels: labels(&[("istio-injection", "enabled")]),
            ..Default::default()
        });
        assert!(matches_pod_create(&spec, &ns, &driver));
        assert!(
            !matches_pod_create(&spec, &driver, &ns),
            "the pod's labels are not the namespace's"
        );
        assert!(!matches_pod_create(
            &spec,
            &namespace_labels("default", &BTreeMap::new()),
            &driver
        ));

        // The name label the API server adds, as webhooks commonly exclude kube-system by it.
        spec.namespace_selector = Some(LabelSelector {
            match_expressions: vec![expr(NAMESPACE_NAME_LABEL, "NotIn", &["kube-system", "nodemedic"])],
            ..Default::default()
        });
        assert!(matches_pod_create(&spec, &ns, &driver));
        assert!(!matches_pod_create(
            &spec,
            &namespace_labels("nodemedic", &BTreeMap::new()),
            &driver
        ));

        // objectSelector against the pod's labels.
        spec.namespace_selector = None;
        spec.object_selector = Some(LabelSelector {
            match_expressions: vec![expr("spark-role", "In", &["driver", "executor"])],
            ..Default::default()
        });
        assert!(matches_pod_create(&spec, &ns, &driver));
        assert!(!matches_pod_create(&spec, &ns, &labels(&[("app", "nodemedic-probe")])));

        // An unparsable selector fails the request when the rules match: it applies.
        spec.object_selector = Some(LabelSelector {
            match_expressions: vec![expr("spark-role", "Equals", &["driver"])],
            ..Default::default()
        });
        assert!(matches_pod_create(&spec, &ns, &BTreeMap::new()));
        spec.rules = vec![rule(&["CREATE"], &[""], &["v1"], &["configmaps"], None)];
        assert!(
            !matches_pod_create(&spec, &ns, &BTreeMap::new()),
            "but only when the rules match"
        );
    }

    #[test]
    fn match_policy_and_conditions_do_not_change_pod_matching() {
        let mut spec = spec_with(vec![pods_rule()]);
        for policy in [None, Some("Exact"), Some("Equivalent")] {
            spec.match_policy = policy.map(str::to_string);
            assert!(matches_pod_create(&spec, &BTreeMap::new(), &BTreeMap::new()));
        }
        spec.match_conditions = vec!["exclude-leases".into()];
        assert!(matches_pod_create(&spec, &BTreeMap::new(), &BTreeMap::new()));
    }

    #[test]
    fn defaults_and_info() {
        let spec = spec_with(vec![pods_rule()]);
        assert_eq!(spec.effective_timeout_seconds(), 10);
        assert_eq!(spec.effective_failure_policy(), "Fail");
        assert_eq!(spec.effective_match_policy(), "Equivalent");
        assert_eq!(spec.effective_side_effects(), "Unknown");
        assert!(spec.blocks_dry_run());
        let i = info(&spec, true, vec!["spark-jobs".into()]);
        assert_eq!(
            i,
            WebhookInfo {
                configuration: "istio-sidecar-injector".into(),
                name: "sidecar-injector.istio.io".into(),
                kind: "mutating".into(),
                timeout_seconds: 10,
                failure_policy: "Fail".into(),
                side_effects: "Unknown".into(),
                matches_probe: true,
                matches_namespaces: vec!["spark-jobs".into()],
                mean_latency_seconds: None,
            }
        );

        let set = WebhookSpec {
            kind: WebhookKind::Validating,
            timeout_seconds: Some(30),
            failure_policy: Some("Ignore".into()),
            side_effects: Some("NoneOnDryRun".into()),
            match_policy: Some("Exact".into()),
            ..spec
        };
        assert!(!set.blocks_dry_run());
        assert_eq!(set.effective_match_policy(), "Exact");
        let i = info(&set, false, vec![]);
        assert_eq!(
            (
                i.kind.as_str(),
                i.timeout_seconds,
                i.failure_policy.as_str(),
                i.side_effects.as_str()
            ),
            ("validating", 30, "Ignore", "NoneOnDryRun")
        );
        for (side_effects, blocks) in [
            ("None", false),
            ("NoneOnDryRun", false),
            ("Some", true),
            ("Unknown", true),
        ] {
            let s = WebhookSpec {
                side_effects: Some(side_effects.into()),
                ..Default::default()
            };
            assert_eq!(s.blocks_dry_run(), blocks, "{side_effects}");
        }
    }
}
