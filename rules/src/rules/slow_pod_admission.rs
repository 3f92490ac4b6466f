//! `slow-pod-admission`: creating a pod takes long enough to trip Spark's Kubernetes client.
//!
//! The agent times a dry-run pod create (`create_dry_run`: `dryRun=All` runs the whole
//! admission chain, webhooks included, and skips only the write). Spark's client gives up on a
//! request after `spark.kubernetes.submission.requestTimeout` (spark-submit creating the driver)
//! or `spark.kubernetes.driver.requestTimeout` (the driver creating executors), 10000 ms by
//! default since Spark 3.0; Spark 2.4 uses fabric8's `-Dkubernetes.request.timeout` or
//! `KUBERNETES_REQUEST_TIMEOUT` (also 10 s). See [`crate::submission`],
//! docs/rules/slow-pod-admission.md, "Cause", and the two keys in apache/spark
//! `docs/running-on-kubernetes.md`.
//!
//! The rule compares the median create time of the window (and its maximum) with that timeout:
//! warning from half of it, critical at or above it. Creates that timed out count with the time
//! they waited (a lower bound); creates refused because a webhook does not support dry run are
//! left to `webhook-blocks-dry-run`. The timeout is the smallest one the drivers on this node
//! set, else `spark_client_timeout_seconds`. The finding names the webhooks that match pod
//! CREATE and the Spark keys to raise. It blames the slowest webhook (by the API server's own
//! metrics) only when the matching webhooks' mean latencies explain at least half of the median
//! create (mutating ones add up, validating ones run in parallel); otherwise it says that they
//! do not, and lists what else can hold a create (unmeasured webhooks, the API server, etcd).
//!
//! A driver whose `spark.properties` could not be read (permission denied, a file outside its
//! volume, a running driver whose conf volume holds none: [`crate::snapshot::SparkConfRead`])
//! may set a timeout smaller than any known here: Spark declares both keys as plain `intConf`
//! with a default and no `checkValue` (apache/spark `resource-managers/kubernetes/core/src/main/
//! scala/org/apache/spark/deploy/k8s/Config.scala`), so a driver may set as little as 1 ms, and
//! a median create well under half of the known timeout may be over half, or over all, of the
//! unread one. The unread timeout can
//! only lower the timeout in force (it is the smallest), so it can only make the verdict worse:
//! a finding made with the known timeout holds as it is or worse, and no finding means nothing.
//! So the rule needs `spark_conf` and can do without it in part ([`Needs::partial`]): it still
//! runs on the configurations it read, its finding (when it makes one) names the drivers not
//! read and says its severity is a lower bound, and its coverage is `unknown` naming them,
//! never `judged`. It is not left out altogether, because what it does find is certain: a
//! create at or past the known timeout is at or past the one in force.

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::probes::{DRY_RUN_PROBE, api, dominant_phase, sample_json, webhook_json};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed, PodInfo, WebhookInfo};
use crate::spark::is_driver;
pub use crate::submission::{
    DRIVER_TIMEOUT_KEY, FABRIC8_TIMEOUT_ENV, FABRIC8_TIMEOUT_PROPERTY, SUBMISSION_TIMEOUT_KEY, spark_client_timeout,
    timed_out,
};
use crate::submission::{client_timeout, driver_name, is_spark2, pod_creates, suggested_timeout_ms, unread_confs};
use crate::text::ms;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("slow-pod-admission");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Creating a pod nears or passes the Spark client timeout",
    severity: Severity::Critical,
    looks_at: "dry-run pod creates, webhook configurations, API server metrics, Spark driver configurations",
    fires_when: "the median dry-run pod create in the window takes half the Spark client timeout or more (warning; also when the slowest passes it) or the whole timeout (critical); names the webhooks that match pod CREATE and the slowest one when measurable",
    event_reason: "SlowPodAdmission",
    needs: Needs {
        all: &[One(Source::Api), One(Source::SparkConf)],
        about: &[],
        partial: &[Source::SparkConf],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it times dry-run pod creates and reads webhook configurations and API server metrics, in which the kubelet takes no part",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::probes::window_turn),
};

/// The running drivers on this node: (`ns/name`, Spark version from the `spark-version` label
/// or the Spark image's tag).
fn local_drivers(snap: &NodeSnapshot) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = snap
        .pods
        .bound
        .iter()
        .filter(|p| is_driver(p) && !p.is_terminal())
        .map(|p: &PodInfo| (p.display(), p.spark_version().map(|(v, _)| v)))
        .collect();
    for (uid, conf) in &snap.pods.spark_confs {
        let (name, alive) = driver_name(snap, uid);
        if alive && !out.iter().any(|(n, _)| *n == name) {
            out.push((name, conf.version.clone()));
        }
    }
    out
}

fn configuration_kind(w: &WebhookInfo) -> &'static str {
    if w.kind == "validating" {
        "ValidatingWebhookConfiguration"
    } else {
        "MutatingWebhookConfiguration"
    }
}

/// How long the matching webhooks may hold a create at most: mutating webhooks run one after
/// another, validating ones in parallel, each up to its `timeoutSeconds`.
fn worst_case_seconds(webhooks: &[&WebhookInfo]) -> i64 {
    let mutating: i64 = webhooks
        .iter()
        .filter(|w| w.kind != "validating")
        .map(|w| i64::from(w.timeout_seconds))
        .sum();
    let validating = webhooks
        .iter()
        .filter(|w| w.kind == "validating")
        .map(|w| i64::from(w.timeout_seconds))
        .max()
        .unwrap_or(0);
    mutating + validating
}

/// Whether the API server lets a create through when `w`'s call fails or times out
/// (`failurePolicy: Ignore`): advising Ignore for it would change nothing.
fn ignores_failures(w: &WebhookInfo) -> bool {
    w.failure_policy == "Ignore"
}

/// How much of a create the matching webhooks' mean latencies account for, seconds: mutating
/// webhooks run one after another (their means add up), validating ones in parallel (the
/// slowest mean). Webhooks without a measured mean count 0.
fn explained_seconds(webhooks: &[&WebhookInfo]) -> f64 {
    let mean = |w: &&&WebhookInfo| w.mean_latency_seconds.filter(|m| m.is_finite()).unwrap_or(0.0);
    let mutating: f64 = webhooks
        .iter()
        .filter(|w| w.kind != "validating")
        .map(|w| mean(&w))
        .sum();
    let validating = webhooks
        .iter()
        .filter(|w| w.kind == "validating")
        .map(|w| mean(&w))
        .fold(0.0, f64::max);
    mutating + validating
}

/// What the remedy says about the webhooks, after the timeouts.
fn webhook_advice(
    webhooks: &[&WebhookInfo],
    webhooks_status: &Option<String>,
    blamed: Option<&WebhookInfo>,
    explained: f64,
    median: f64,
) -> String {
    let unmeasured: Vec<&str> = webhooks
        .iter()
        .filter(|w| !w.mean_latency_seconds.is_some_and(f64::is_finite))
        .map(|w| w.name.as_str())
        .collect();
    let any_measured = unmeasured.len() < webhooks.len();
    match (blamed, webhooks.is_empty(), webhooks_status) {
        (Some(w), _, _) => format!(
            "Then fix or time-box the slowest webhook, {} ({} {}, {:.1} s mean, timeoutSeconds {}, failurePolicy {}): \
             give its backend what it needs, or {} (kubectl edit {} {})",
            w.name,
            configuration_kind(w),
            w.configuration,
            w.mean_latency_seconds.unwrap_or_default(),
            w.timeout_seconds,
            w.failure_policy,
            if ignores_failures(w) {
                "lower its timeoutSeconds below Spark's timeout: its failurePolicy is already Ignore, so the API \
                 server lets the pod through without it once that timeout passes"
            } else {
                "lower its timeoutSeconds below Spark's timeout and, if pods may be created without it, set \
                 failurePolicy: Ignore"
            },
            configuration_kind(w).to_ascii_lowercase(),
            w.configuration
        ),
        (None, false, _) if any_measured => format!(
            "Then find where the time goes: the webhooks that match pod CREATE and have latency metrics ({}) \
             account for {explained:.1} s of the {median:.1} s a create takes, less than half, so none of them is \
             the cause. Candidates: {}the API server itself (API Priority and Fairness queueing, built-in \
             admission), etcd (apiserver_request_duration_seconds{{verb=\"POST\",resource=\"pods\"}} and \
             etcd_request_duration_seconds on the API server), or a webhook the API server calls on another path \
             (a proxy, a service mesh sidecar in front of a webhook backend)",
            webhooks
                .iter()
                .filter(|w| w.mean_latency_seconds.is_some_and(f64::is_finite))
                .map(|w| format!("{} {:.2} s mean", w.name, w.mean_latency_seconds.unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", "),
            if unmeasured.is_empty() {
                String::new()
            } else {
                format!(
                    "the matching webhooks without latency metrics ({}), ",
                    unmeasured.join(", ")
                )
            }
        ),
        (None, false, _) => format!(
            "Then find the slow one among the webhooks that match pod CREATE ({}): nodemedic could not read their \
             latencies (it needs get on the nonResourceURL /metrics); `kubectl get --raw /metrics | grep \
             apiserver_admission_webhook_admission_duration_seconds_sum` shows them. Fix or time-box it \
             ({})",
            webhooks.iter().map(|w| w.name.as_str()).collect::<Vec<_>>().join(", "),
            if webhooks.iter().all(|w| ignores_failures(w)) {
                "timeoutSeconds; their failurePolicy is already Ignore"
            } else {
                "timeoutSeconds, failurePolicy: Ignore if acceptable"
            }
        ),
        (None, true, Some(_)) => "Then find the slow admission webhook: `kubectl get \
             mutatingwebhookconfigurations,validatingwebhookconfigurations` and `kubectl get --raw /metrics | grep \
             apiserver_admission_webhook_admission_duration_seconds_sum`; fix or time-box it (timeoutSeconds, \
             failurePolicy: Ignore if acceptable)"
            .to_string(),
        (None, true, None) => "No admission webhook matches pod creation, so the time is the API server's own \
             (etcd, built-in admission, API Priority and Fairness): see \
             apiserver_request_duration_seconds{verb=\"POST\",resource=\"pods\"} on the API server"
            .to_string(),
    }
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let Some(api) = api(snap) else { return vec![] };
    let Some(creates) = pod_creates(snap, settings) else {
        return vec![];
    };
    let (median, min, max, slowest) = (creates.median, creates.min, creates.max, creates.slowest);
    let timeout = client_timeout(snap, settings);
    let t = timeout.seconds;
    let (severity, how) = if median >= t {
        (Severity::Critical, "at or above".to_string())
    } else if median >= t / 2.0 {
        (Severity::Warning, "at least half of".to_string())
    } else if max >= t {
        (
            Severity::Warning,
            format!("below, but the slowest ({max:.1} s) passed,"),
        )
    } else {
        return vec![];
    };
    let timed_out_count = creates.samples.iter().filter(|s| !s.ok).count();

    // The webhooks that apply to pod creation here, slowest first.
    let (mut webhooks, webhooks_status): (Vec<&WebhookInfo>, Option<String>) = match &api.webhooks {
        Observed::Ok(list) => (
            list.iter()
                .filter(|w| w.matches_probe || !w.matches_namespaces.is_empty())
                .collect(),
            None,
        ),
        other => (vec![], Some(other.status())),
    };
    webhooks.sort_by(|a, b| {
        let key = |w: &WebhookInfo| w.mean_latency_seconds.filter(|m| m.is_finite()).unwrap_or(-1.0);
        key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name))
    });
    let slowest_webhook = webhooks
        .first()
        .copied()
        .filter(|w| w.mean_latency_seconds.is_some_and(f64::is_finite));
    // The slowest is blamed only when the measured webhooks explain at least half the create.
    let explained = explained_seconds(&webhooks);
    let explains = explained >= median / 2.0;
    let blamed = slowest_webhook.filter(|_| explains);

    // Twice the slowest create, whole seconds, in milliseconds.
    let suggested_ms = suggested_timeout_ms(max);
    let drivers = local_drivers(snap);
    let spark2: Vec<&str> = drivers
        .iter()
        .filter(|(_, v)| is_spark2(v.as_deref()))
        .map(|(n, _)| n.as_str())
        .collect();
    let unknown_version = drivers.iter().any(|(_, v)| v.is_none());

    let spark2_how = format!(
        "{FABRIC8_TIMEOUT_ENV}={suggested_ms} in spark-submit's environment and --conf \
         spark.kubernetes.driverEnv.{FABRIC8_TIMEOUT_ENV}={suggested_ms} (or -D{FABRIC8_TIMEOUT_PROPERTY}=\
         {suggested_ms} in SPARK_SUBMIT_OPTS and spark.driver.extraJavaOptions, which wins over the variable)"
    );
    let mut remedy = vec![format!(
        "Raise Spark's client timeouts above the pod creation time, e.g. to {suggested_ms} ms (twice the slowest \
         create measured): --conf {SUBMISSION_TIMEOUT_KEY}={suggested_ms} --conf {DRIVER_TIMEOUT_KEY}={suggested_ms} \
         (Spark 3.0 and later; {FABRIC8_TIMEOUT_ENV} does nothing there, since Spark overrides fabric8's timeouts \
         with these keys)"
    )];
    if !spark2.is_empty() {
        remedy.push(format!(
            "For the Spark 2.4 driver(s) {}: {spark2_how}",
            spark2.join(", ")
        ));
    } else if unknown_version {
        remedy.push(format!(
            "On Spark 2.4 (a driver whose version neither a spark-version label nor a Spark image tag gives may \
             be 2.4): {spark2_how}"
        ));
    }
    remedy.push(webhook_advice(&webhooks, &webhooks_status, blamed, explained, median));
    remedy.push(
        "A create that times out on the client may still create the pod on the server: Spark 3.x retries it \
         (kubernetes.request.retry.backoffLimit, 3 in Spark 3.5) and fails after about four timeouts, and each \
         driver pod a timed-out create left behind waits without its ConfigMap (half-submitted-driver); a driver \
         can also end up with more executors than it asked for"
            .to_string(),
    );

    let (phase, _) = dominant_phase(slowest);
    let webhook_note = match (blamed, slowest_webhook) {
        (Some(w), _) => format!(
            "; slowest matching webhook: {} ({:.1} s mean)",
            w.name,
            w.mean_latency_seconds.unwrap_or_default()
        ),
        (None, Some(_)) => format!("; the matching webhooks' latency metrics explain only {explained:.1} s of it"),
        (None, None) => String::new(),
    };
    let n = creates.samples.len();
    let unread: Vec<String> = unread_confs(snap).into_iter().map(|u| u.driver).collect();
    let unread_note = match unread.as_slice() {
        [] => String::new(),
        [one] => format!(
            "; the configuration of driver {one} could not be read: the timeout it sets may be smaller, and this \
             verdict worse"
        ),
        many => format!(
            "; the configurations of drivers {} could not be read: the timeouts they set may be smaller, and this \
             verdict worse",
            many.join(", ")
        ),
    };
    let summary = format!(
        "Creating a pod takes {median:.1} s (median of {n} dry-run create{}, slowest {max:.1} s), {how} the Spark \
         client timeout of {t} s ({}){webhook_note}{unread_note}",
        if n == 1 { "" } else { "s" },
        timeout.source
    );
    let mut finding = Finding::new(ID, severity, Subject::node(&snap.node), summary, remedy.join(". "))
        .with("probe", DRY_RUN_PROBE)
        .with("median_seconds", ms(median))
        .with("min_seconds", ms(min))
        .with("max_seconds", ms(max))
        .with("samples", n)
        .with("timed_out_samples", timed_out_count)
        .with("spark_timeout_seconds", t)
        .with("spark_timeout_source", timeout.source.clone())
        .with("spark_timeout_driver", timeout.driver.clone())
        .with("spark_timeout_key", timeout.key)
        .with("warning_from_seconds", t / 2.0)
        .with("suggested_timeout_ms", suggested_ms)
        .with("slowest_sample", sample_json(slowest))
        .with("dominant_phase", phase.as_str())
        .with("webhooks", webhooks.iter().map(|w| webhook_json(w)).collect::<Vec<_>>())
        .with("webhooks_worst_case_seconds", worst_case_seconds(&webhooks))
        .with("webhooks_explained_seconds", ms(explained))
        .with("webhooks_explain_create", slowest_webhook.map(|_| explains))
        .with("webhooks_source", webhooks_status)
        .with("slowest_webhook", blamed.map(webhook_json));
    if !spark2.is_empty() {
        finding = finding.with("spark_2_drivers", spark2);
    }
    if !unread.is_empty() {
        finding = finding.with("spark_conf_unread_drivers", unread);
    }
    vec![finding]
}

#[cfg(test)]
mod tests;
