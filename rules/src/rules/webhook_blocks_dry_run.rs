//! `webhook-blocks-dry-run`: an admission webhook that may have side effects makes every
//! dry-run pod create fail, so pod admission latency cannot be measured.
//!
//! When a dry-run request matches a webhook whose `sideEffects` is not `None` or
//! `NoneOnDryRun`, the API server refuses it with HTTP 400 and the message
//! `admission webhook "<name>" does not support dry run` (`NewDryRunUnsupportedErr` in
//! `k8s.io/apiserver/pkg/admission/plugin/webhook/errors`), before calling the webhook and
//! whatever its `failurePolicy`. The rule fires on such refusals of the `create_dry_run` probe
//! in the window, and on webhooks that match the probe pod with `sideEffects` `Unknown` or
//! `Some` (unless dry-run creates succeed anyway, which means the webhook does not apply after
//! all, e.g. by its CEL `matchConditions`).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::probes::{DRY_RUN_PROBE, api, is_dry_run_unsupported, recent, webhook_json};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed, ProbeSample, WebhookInfo};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("webhook-blocks-dry-run");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "An admission webhook makes dry-run pod creates fail",
    severity: Severity::Warning,
    looks_at: "dry-run pod creates, webhook configurations",
    fires_when: "dry-run pod creates fail with 400 `admission webhook \"<name>\" does not support dry run`, or a webhook matching the probe pod has sideEffects Unknown or Some: pod admission latency cannot be measured",
    event_reason: "WebhookBlocksDryRun",
    needs: Needs {
        all: &[One(Source::Api)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it reads dry-run pod creates and webhook configurations from the API server, in which the kubelet takes no part",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::probes::window_turn),
};

/// The webhook named in the API server's refusal of a dry run:
/// `admission webhook "<name>" does not support dry run`.
pub fn refused_by(error: &str) -> Option<String> {
    const HEAD: &str = "admission webhook \"";
    const TAIL: &str = "\" does not support dry run";
    let end = error.find(TAIL)?;
    let before = error.get(..end)?;
    let start = before.rfind(HEAD)? + HEAD.len();
    before.get(start..).map(str::to_string).filter(|n| !n.is_empty())
}

/// Whether a webhook's `sideEffects` makes a dry run it matches fail.
fn blocks_dry_run(w: &WebhookInfo) -> bool {
    !matches!(w.side_effects.as_str(), "None" | "NoneOnDryRun")
}

fn edit_command(w: &WebhookInfo) -> String {
    let kind = if w.kind == "validating" {
        "validating"
    } else {
        "mutating"
    };
    format!("kubectl edit {kind}webhookconfiguration {}", w.configuration)
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let Some(api) = api(snap) else { return vec![] };
    let creates: Vec<&ProbeSample> = recent(api, snap, settings)
        .filter(|s| s.probe == DRY_RUN_PROBE)
        .collect();
    let refusals: Vec<&ProbeSample> = creates.iter().copied().filter(|s| is_dry_run_unsupported(s)).collect();
    let listed: &[WebhookInfo] = match &api.webhooks {
        Observed::Ok(list) => list,
        _ => &[],
    };
    let named: BTreeSet<String> = refusals
        .iter()
        .filter_map(|s| s.error.as_deref().and_then(refused_by))
        .collect();
    let configured: Vec<&WebhookInfo> = listed.iter().filter(|w| w.matches_probe && blocks_dry_run(w)).collect();
    if refusals.is_empty() && (configured.is_empty() || creates.iter().any(|s| s.ok)) {
        return vec![];
    }

    // The webhooks named by the API server first, then the configured ones that would block.
    let mut entries: Vec<(String, Option<&WebhookInfo>, bool)> = named
        .iter()
        .map(|n| (n.clone(), listed.iter().find(|w| w.name == *n), true))
        .collect();
    for w in &configured {
        if !named.contains(&w.name) {
            entries.push((w.name.clone(), Some(w), false));
        }
    }
    let evidence: Vec<Value> = entries
        .iter()
        .map(|(name, w, by_api)| {
            let mut v = w.map_or_else(|| serde_json::json!({ "name": name }), webhook_json);
            if let Some(map) = v.as_object_mut() {
                map.insert("named_by_api_server".into(), (*by_api).into());
            }
            v
        })
        .collect();
    let describe = |(name, w, _): &(String, Option<&WebhookInfo>, bool)| match w {
        Some(w) => format!("{name} (sideEffects {})", w.side_effects),
        None => name.clone(),
    };
    let names: Vec<String> = entries.iter().map(describe).collect();
    let newest = refusals.iter().copied().max_by_key(|s| s.at);
    let summary = match newest {
        Some(s) => format!(
            "Dry-run pod creates fail ({} in the last {} s): {}; nodemedic cannot measure pod admission latency",
            refusals.len(),
            settings.api_latency_window_seconds,
            s.error.as_deref().unwrap_or("400 Bad Request")
        ),
        None => format!(
            "Admission webhook(s) {} match pod creation and do not support dry run, so a dry-run pod create fails and \
             nodemedic cannot measure pod admission latency",
            names.join(", ")
        ),
    };
    let fixes: Vec<String> = entries
        .iter()
        .map(|(name, w, _)| match w {
            Some(w) => format!("{name} ({})", edit_command(w)),
            None => {
                format!("{name} (find it: kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations)")
            }
        })
        .collect();
    let remedy = format!(
        "Set sideEffects: None, or NoneOnDryRun if the webhook has side effects it skips when the \
         AdmissionReview's request.dryRun is true, on {}. admissionregistration.k8s.io/v1 accepts only these two values; \
         Unknown and Some come from configurations created through v1beta1 (removed in Kubernetes 1.22). \
         failurePolicy: Ignore does not help: the API server refuses the dry run before calling the webhook. Until \
         then nodemedic probes the API with reads only (get, list), so slow-pod-admission cannot measure how long \
         pod creation takes, and server-side dry runs of pods (kubectl apply --dry-run=server, kubectl diff) fail \
         the same way",
        fixes.join(", ")
    );
    vec![
        Finding::new(ID, Severity::Warning, Subject::node(&snap.node), summary, remedy)
            .with("webhooks", evidence)
            .with("message", newest.and_then(|s| s.error.clone()))
            .with("failed_samples", refusals.len())
            .with("last_failed_at", newest.map(|s| s.at)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{NOW, SnapshotBuilder, probe_failed, probe_ok, webhook};
    use serde_json::json;

    const MESSAGE: &str = "400 Bad Request: admission webhook \"audit.example.com\" does not support dry run";

    fn refusal(ago: i64) -> ProbeSample {
        probe_failed(DRY_RUN_PROBE, ago, Some(400), MESSAGE, 0.04)
    }

    fn auditor() -> WebhookInfo {
        let mut w = webhook("audit-logger", "audit.example.com");
        w.side_effects = "Unknown".into();
        w.kind = "validating".into();
        w
    }

    #[test]
    fn names_the_webhook_from_the_api_message() {
        assert_eq!(refused_by(MESSAGE).as_deref(), Some("audit.example.com"));
        assert_eq!(
            refused_by(
                "admission webhook \"x\" denied the request; admission webhook \"y.io\" does not support dry run"
            )
            .as_deref(),
            Some("y.io")
        );
        assert_eq!(refused_by("admission webhook \"x\" denied the request"), None);
        assert_eq!(refused_by("\" does not support dry run"), None);
        assert_eq!(refused_by("admission webhook \"\" does not support dry run"), None);
    }

    #[test]
    fn refusals_fire_with_the_configuration() {
        let snap = SnapshotBuilder::spark_node(&[])
            .with_api(vec![probe_ok("get", 90, 0.01), refusal(60), refusal(30)])
            .with_webhooks(vec![auditor(), webhook("injector", "inject.example.com")])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].evidence["failed_samples"], 2);
        assert_eq!(f[0].evidence["last_failed_at"], NOW - 30);
        assert_eq!(f[0].evidence["message"], MESSAGE);
        assert_eq!(
            f[0].evidence["webhooks"],
            json!([{
                "name": "audit.example.com", "configuration": "audit-logger", "kind": "validating",
                "timeout_seconds": 10, "failure_policy": "Fail", "side_effects": "Unknown", "matches_probe": true,
                "named_by_api_server": true
            }])
        );
        assert!(
            f[0].summary
                .starts_with("Dry-run pod creates fail (2 in the last 300 s): 400 Bad Request: admission webhook")
        );
        for needle in [
            "kubectl edit validatingwebhookconfiguration audit-logger",
            "sideEffects: None",
            "NoneOnDryRun",
            "failurePolicy: Ignore does not help",
            "reads only",
        ] {
            assert!(f[0].remedy.contains(needle), "{needle}: {}", f[0].remedy);
        }
        // Not latency: slow-pod-admission stays silent on the same snapshot.
        let slow_pod_admission = crate::rules::by_id("slow-pod-admission").unwrap();
        assert!(crate::rules::testkit::judged(slow_pod_admission.check, &snap, &Settings::default()).is_empty());
    }

    #[test]
    fn configured_webhooks_alone() {
        let mut some = webhook("backup", "backup.example.com");
        some.side_effects = "Some".into();
        let mut elsewhere = auditor();
        elsewhere.matches_probe = false;
        elsewhere.matches_namespaces = vec!["spark-jobs".into()];
        let snap = SnapshotBuilder::spark_node(&[])
            .with_api(vec![probe_ok("get", 30, 0.01)])
            .with_webhooks(vec![some, elsewhere, webhook("ok", "ok.example.com")])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert!(
            f[0].summary
                .starts_with("Admission webhook(s) backup.example.com (sideEffects Some) match pod creation"),
            "{}",
            f[0].summary
        );
        assert_eq!(f[0].evidence["webhooks"][0]["named_by_api_server"], false);
        assert!(f[0].evidence.get("message").is_none());
        assert!(f[0].remedy.contains("kubectl edit mutatingwebhookconfiguration backup"));

        // Dry-run creates succeed: the webhook does not apply after all.
        let snap = SnapshotBuilder::spark_node(&[])
            .with_api(vec![probe_ok(DRY_RUN_PROBE, 30, 0.2)])
            .with_webhooks(vec![{
                let mut w = webhook("backup", "backup.example.com");
                w.side_effects = "Some".into();
                w
            }])
            .build();
        assert!(crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty());
    }

    #[test]
    fn a_refusal_naming_an_unlisted_webhook_and_quiet_cases() {
        let snap = SnapshotBuilder::spark_node(&[])
            .with_api(vec![refusal(30)])
            .api(|a| {
                a.webhooks = Observed::Error {
                    reason: "forbidden".into(),
                }
            })
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(
            f[0].evidence["webhooks"],
            json!([{"name": "audit.example.com", "named_by_api_server": true}])
        );
        assert!(
            f[0].remedy.contains(
                "on audit.example.com (find it: kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations)"
            ),
            "{}",
            f[0].remedy
        );

        let old = SnapshotBuilder::spark_node(&[]).with_api(vec![refusal(3600)]).build();
        assert!(
            crate::rules::testkit::judged(check, &old, &Settings::default()).is_empty(),
            "outside the window"
        );
        let other_400 = SnapshotBuilder::spark_node(&[])
            .with_api(vec![probe_failed(
                DRY_RUN_PROBE,
                30,
                Some(400),
                "400 Bad Request: bad pod",
                0.01,
            )])
            .build();
        assert!(crate::rules::testkit::judged(check, &other_400, &Settings::default()).is_empty());
        assert!(
            crate::rules::testkit::judged(check, &SnapshotBuilder::spark_node(&[]).build(), &Settings::default())
                .is_empty()
        );
    }
}
