//! Tests of [`super`] (slow_pod_admission.rs keeps the rule, this file its tests): thresholds,
//! timed-out, refused and unsent creates, the drivers' timeouts (Spark 2 and 3), the webhooks
//! named, blamed and advised.

use super::*;
use crate::rules::testkit::{NOW, SnapshotBuilder, probe_failed, probe_ok, spark_conf, spark_driver, webhook};
use crate::snapshot::{ProbeSample, SparkConf};
use serde_json::json;

fn node(samples: Vec<ProbeSample>) -> SnapshotBuilder {
    SnapshotBuilder::spark_node(&[]).with_api(samples)
}

fn creates(totals: &[f64]) -> Vec<ProbeSample> {
    totals
        .iter()
        .enumerate()
        .map(|(i, t)| probe_ok(DRY_RUN_PROBE, 30 * (i as i64 + 1), *t))
        .collect()
}

#[test]
fn thresholds_against_the_default_timeout() {
    let s = Settings::default();
    assert!(crate::rules::testkit::judged(check, &node(creates(&[0.2, 0.3, 4.9])).build(), &s).is_empty());
    let f = crate::rules::testkit::judged(check, &node(creates(&[5.0, 6.0, 0.3])).build(), &s);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].summary
            .contains("at least half of the Spark client timeout of 10 s"),
        "{}",
        f[0].summary
    );
    let f = crate::rules::testkit::judged(check, &node(creates(&[12.0, 30.0, 10.0])).build(), &s);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].evidence["median_seconds"], 12.0);
    assert_eq!(f[0].evidence["suggested_timeout_ms"], 60000);
    assert!(f[0].evidence.get("spark_timeout_key").is_none());
    assert!(
        f[0].summary.contains(
            "timeout of 10 s (no driver here sets one: spark_client_timeout_seconds, after Spark's default of 10000 ms)"
        ),
        "{}",
        f[0].summary
    );
    // One create past the timeout, the rest fast.
    let f = crate::rules::testkit::judged(check, &node(creates(&[0.2, 0.3, 11.0])).build(), &s);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].summary.contains("the slowest (11.0 s) passed"), "{}", f[0].summary);
    // Read probes do not count, and nothing without creates.
    assert!(crate::rules::testkit::judged(check, &node(vec![probe_ok("get", 30, 20.0)]).build(), &s).is_empty());
    assert!(crate::rules::testkit::judged(check, &SnapshotBuilder::spark_node(&[]).build(), &s).is_empty());
}

#[test]
fn timed_out_creates_count_and_dry_run_refusals_do_not() {
    let s = Settings::default();
    let refused = |ago| {
        probe_failed(
            DRY_RUN_PROBE,
            ago,
            Some(400),
            "400 Bad Request: admission webhook \"audit.example.com\" does not support dry run",
            0.05,
        )
    };
    assert!(crate::rules::testkit::judged(check, &node(vec![refused(30), refused(60)]).build(), &s).is_empty());
    // Connected and handshaken, then no answer for 10 s: the API server (a webhook) held it.
    let held = ProbeSample {
        connect_seconds: 0.002,
        tls_seconds: 0.01,
        ..probe_failed(DRY_RUN_PROBE, 30, None, "no complete answer within 10 s", 10.0)
    };
    let f = crate::rules::testkit::judged(check, &node(vec![
            held,
            probe_failed(
                DRY_RUN_PROBE,
                60,
                Some(500),
                "500 Internal Server Error: Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: Post \"https://slow.webhooks.svc:443/mutate?timeout=30s\": context deadline exceeded",
                30.0,
            ),
            probe_failed(DRY_RUN_PROBE, 90, None, "connection refused", 0.001),
            refused(120),
        ])
        .build(), &s);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].evidence["samples"], 2,
        "refused and connection errors are not latencies"
    );
    assert_eq!(f[0].evidence["timed_out_samples"], 2);
    assert_eq!(f[0].evidence["median_seconds"], 20.0);
}

#[test]
fn creates_that_never_reached_the_api_server_are_not_slow_admission() {
    let s = Settings::default();
    // A TLS handshake that hangs until the probe's timeout, and connects that hang: the
    // node's path to the API server is broken, which is apiserver-unreachable's finding.
    let tls_hang = ProbeSample {
        connect_seconds: 0.002,
        ..probe_failed(DRY_RUN_PROBE, 30, None, "no complete answer within 60 s", 60.0)
    };
    let connect_hang = probe_failed(DRY_RUN_PROBE, 90, None, "no complete answer within 60 s", 60.0);
    let handshake_error = probe_failed(DRY_RUN_PROBE, 150, None, "TLS handshake: timed out", 30.0);
    assert!(
        crate::rules::testkit::judged(
            check,
            &node(vec![tls_hang.clone(), connect_hang, handshake_error]).build(),
            &s
        )
        .is_empty()
    );
    // The same node with one create the API server held for 12 s: that one is the finding.
    let held = ProbeSample {
        connect_seconds: 0.002,
        tls_seconds: 0.01,
        ..probe_failed(DRY_RUN_PROBE, 60, None, "no complete answer within 12 s", 12.0)
    };
    let f = crate::rules::testkit::judged(check, &node(vec![tls_hang, held]).build(), &s);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].evidence["samples"], 1);
    assert_eq!(f[0].evidence["median_seconds"], 12.0);
}

#[test]
fn unlabelled_spark_2_drivers_are_known_by_their_image() {
    let mut d1 = spark_driver("d1", "spark-a", "etl", "Running");
    d1.labels.remove("spark-version");
    d1.containers[0].image = Some("gcr.io/spark-operator/spark:v2.4.5".into());
    let s = Settings::default();
    let judge = |d: &PodInfo| {
        crate::rules::testkit::judged(
            check,
            &SnapshotBuilder::spark_node(std::slice::from_ref(d))
                .with_api(creates(&[8.0]))
                .build(),
            &s,
        )
    };
    let f = judge(&d1);
    assert!(
        f[0].remedy
            .contains("For the Spark 2.4 driver(s) spark-jobs/etl-driver: KUBERNETES_REQUEST_TIMEOUT="),
        "{}",
        f[0].remedy
    );
    assert_eq!(f[0].evidence["spark_2_drivers"], json!(["spark-jobs/etl-driver"]));
    // An application's own image tag says nothing of Spark's version: the advice hedges.
    d1.containers[0].image = Some("registry.local/etl-job:2.4.8".into());
    let f = judge(&d1);
    assert!(f[0].remedy.contains("may be 2.4"), "{}", f[0].remedy);
    assert!(!f[0].evidence.contains_key("spark_2_drivers"));
    // A 3.x image: neither.
    d1.containers[0].image = Some("apache/spark:3.5.1-scala2.12-java17-ubuntu".into());
    let f = judge(&d1);
    assert!(!f[0].remedy.contains("2.4"), "{}", f[0].remedy);
}

#[test]
fn timeout_from_the_drivers_here() {
    let d1 = spark_driver("d1", "spark-a", "etl", "Running");
    let d2 = spark_driver("d2", "spark-b", "ml", "Running");
    let done = spark_driver("d3", "spark-c", "old", "Succeeded");
    let base = || SnapshotBuilder::spark_node(&[d1.clone(), d2.clone(), done.clone()]).with_api(creates(&[3.0]));
    let s = Settings::default();
    let snap = base()
        .with_spark_conf(
            "d1",
            spark_conf(
                Some("3.5.1"),
                &[(SUBMISSION_TIMEOUT_KEY, "60000"), (DRIVER_TIMEOUT_KEY, " 5000 ")],
            ),
        )
        .with_spark_conf("d2", spark_conf(Some("3.4.0"), &[(DRIVER_TIMEOUT_KEY, "8000")]))
        .with_spark_conf("d3", spark_conf(Some("3.4.0"), &[(DRIVER_TIMEOUT_KEY, "1000")]))
        .build();
    assert_eq!(
        spark_client_timeout(&snap, &s),
        (
            5.0,
            "spark.kubernetes.driver.requestTimeout=5000 (ms) of driver spark-jobs/etl-driver, Spark 3.5.1".to_string()
        ),
        "the smallest of the live drivers; the finished one does not count"
    );
    let f = crate::rules::testkit::judged(check, &snap, &s);
    assert_eq!(f[0].severity, Severity::Warning, "3 s is more than half of 5 s");
    assert_eq!(f[0].evidence["spark_timeout_driver"], "spark-jobs/etl-driver");
    assert_eq!(f[0].evidence["spark_timeout_key"], DRIVER_TIMEOUT_KEY);

    // Spark 2.4 reads fabric8's environment variable and ignores the 3.x keys; 3.x ignores the
    // variable; 0 and garbage are no timeout.
    let mut old = spark_conf(Some("2.4.8"), &[(DRIVER_TIMEOUT_KEY, "1000")]);
    old.kubernetes_request_timeout_env = Some("4000".into());
    let mut new = spark_conf(
        Some("3.5.1"),
        &[(SUBMISSION_TIMEOUT_KEY, "0"), (DRIVER_TIMEOUT_KEY, "soon")],
    );
    new.kubernetes_request_timeout_env = Some("1000".into());
    let mut d1_old = d1.clone();
    d1_old.labels.insert("spark-version".into(), "2.4.8".into());
    let snap = SnapshotBuilder::spark_node(&[d1_old, d2.clone()])
        .with_api(creates(&[3.0]))
        .with_spark_conf("d1", old)
        .with_spark_conf("d2", new)
        .build();
    let (secs, source) = spark_client_timeout(&snap, &s);
    assert_eq!(secs, 4.0);
    assert!(
        source.starts_with("KUBERNETES_REQUEST_TIMEOUT=4000 (ms) of driver spark-jobs/etl-driver"),
        "{source}"
    );
    let f = crate::rules::testkit::judged(check, &snap, &s);
    assert!(
        f[0].remedy
            .contains("For the Spark 2.4 driver(s) spark-jobs/etl-driver: KUBERNETES_REQUEST_TIMEOUT=6000"),
        "{}",
        f[0].remedy
    );
    assert_eq!(f[0].evidence["spark_2_drivers"], json!(["spark-jobs/etl-driver"]));

    // The setting is the fallback.
    let s = Settings {
        spark_client_timeout_seconds: 4.0,
        ..Default::default()
    };
    assert_eq!(spark_client_timeout(&node(vec![]).build(), &s).0, 4.0);
}

#[test]
fn names_the_matching_webhooks_and_the_slowest() {
    let mut slow = webhook("slow-injector", "inject.slow.example.com");
    slow.mean_latency_seconds = Some(29.7);
    slow.timeout_seconds = 30;
    let mut policy = webhook("policy", "validate.policy.example.com");
    policy.kind = "validating".into();
    policy.mean_latency_seconds = Some(0.02);
    let mut spark_only = webhook("spark-defaults", "defaults.spark.example.com");
    spark_only.matches_probe = false;
    spark_only.matches_namespaces = vec!["spark-jobs".into()];
    let mut elsewhere = webhook("other", "other.example.com");
    elsewhere.matches_probe = false;
    let snap = node(creates(&[30.1, 29.9, 30.2]))
        .with_webhooks(vec![policy, elsewhere, spark_only, slow])
        .build();
    let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
    assert_eq!(f[0].severity, Severity::Critical);
    let names: Vec<&str> = f[0].evidence["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "inject.slow.example.com",
            "validate.policy.example.com",
            "defaults.spark.example.com"
        ]
    );
    assert_eq!(f[0].evidence["slowest_webhook"]["name"], "inject.slow.example.com");
    assert_eq!(f[0].evidence["slowest_webhook"]["mean_latency_seconds"], 29.7);
    assert_eq!(f[0].evidence["webhooks"][2]["namespaces"], json!(["spark-jobs"]));
    assert_eq!(
        f[0].evidence["webhooks_worst_case_seconds"], 50,
        "30 + 10 mutating in turn, then 10 validating"
    );
    assert!(
        f[0].summary
            .ends_with("slowest matching webhook: inject.slow.example.com (29.7 s mean)"),
        "{}",
        f[0].summary
    );
    for needle in [
        "--conf spark.kubernetes.submission.requestTimeout=61000 --conf spark.kubernetes.driver.requestTimeout=61000",
        "KUBERNETES_REQUEST_TIMEOUT does nothing there",
        "the slowest webhook, inject.slow.example.com (MutatingWebhookConfiguration slow-injector, 29.7 s mean, timeoutSeconds 30, failurePolicy Fail)",
        "kubectl edit mutatingwebhookconfiguration slow-injector",
        "may still create the pod",
    ] {
        assert!(f[0].remedy.contains(needle), "{needle}: {}", f[0].remedy);
    }
}

#[test]
fn advises_failure_policy_ignore_only_to_a_webhook_without_it() {
    let slow = |policy: &str| {
        let mut w = webhook("slow-injector", "inject.slow.example.com");
        w.mean_latency_seconds = Some(29.7);
        w.timeout_seconds = 30;
        w.failure_policy = policy.into();
        w
    };
    let judge = |w: WebhookInfo| {
        let snap = node(creates(&[30.1, 29.9, 30.2])).with_webhooks(vec![w]).build();
        crate::rules::testkit::judged(check, &snap, &Settings::default()).remove(0)
    };
    let f = judge(slow("Fail"));
    for needle in [
        "failurePolicy Fail): give its backend what it needs, or lower its timeoutSeconds below Spark's timeout",
        "if pods may be created without it, set failurePolicy: Ignore (kubectl edit mutatingwebhookconfiguration \
         slow-injector)",
    ] {
        assert!(f.remedy.contains(needle), "{needle}: {}", f.remedy);
    }
    assert!(!f.remedy.contains("already Ignore"), "{}", f.remedy);

    let f = judge(slow("Ignore"));
    assert!(!f.remedy.contains("set failurePolicy: Ignore"), "{}", f.remedy);
    for needle in [
        "failurePolicy Ignore): give its backend what it needs, or lower its timeoutSeconds below Spark's timeout: \
         its failurePolicy is already Ignore",
        "its failurePolicy is already Ignore, so the API server lets the pod through without it once that \
         timeout passes (kubectl edit mutatingwebhookconfiguration slow-injector)",
    ] {
        assert!(f.remedy.contains(needle), "{needle}: {}", f.remedy);
    }

    // Latencies unknown: the advice names Ignore unless every matching webhook has it.
    let unknown = |policies: &[&str]| {
        let hooks = policies
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut w = webhook(&format!("c{i}"), &format!("w{i}.example.com"));
                w.failure_policy = (*p).into();
                w
            })
            .collect();
        let snap = node(creates(&[8.0])).with_webhooks(hooks).build();
        crate::rules::testkit::judged(check, &snap, &Settings::default())
            .remove(0)
            .remedy
    };
    let remedy = unknown(&["Ignore", "Fail"]);
    assert!(
        remedy.contains("(timeoutSeconds, failurePolicy: Ignore if acceptable)"),
        "{remedy}"
    );
    let remedy = unknown(&["Ignore", "Ignore"]);
    assert!(
        remedy.contains("(timeoutSeconds; their failurePolicy is already Ignore)"),
        "{remedy}"
    );
    assert!(!remedy.contains("Ignore if acceptable"), "{remedy}");
}

#[test]
fn webhooks_whose_latency_does_not_explain_the_create_are_not_blamed() {
    // The story's numbers: a 30 s create, the only matching webhook averaging 0.02 s.
    let mut policy = webhook("policy", "validate.policy.example.com");
    policy.kind = "validating".into();
    policy.mean_latency_seconds = Some(0.02);
    let unmeasured = webhook("istio-sidecar-injector", "sidecar-injector.istio.io");
    let snap = node(creates(&[30.1, 29.9, 30.2]))
        .with_webhooks(vec![policy.clone(), unmeasured])
        .build();
    let f = crate::rules::testkit::judged(check, &snap, &Settings::default()).remove(0);
    assert!(f.evidence.get("slowest_webhook").is_none(), "{:#?}", f.evidence);
    assert_eq!(f.evidence["webhooks_explain_create"], false);
    assert_eq!(f.evidence["webhooks_explained_seconds"], 0.02);
    assert!(
        f.summary
            .ends_with("the matching webhooks' latency metrics explain only 0.0 s of it"),
        "{}",
        f.summary
    );
    for needle in [
        "(validate.policy.example.com 0.02 s mean) account for 0.0 s of the 30.1 s a create takes, less than \
         half, so none of them is the cause",
        "Candidates: the matching webhooks without latency metrics (sidecar-injector.istio.io), the API server \
         itself",
        "etcd",
    ] {
        assert!(f.remedy.contains(needle), "{needle}: {}", f.remedy);
    }
    assert!(
        !f.remedy.contains("Then fix or time-box the slowest webhook"),
        "{}",
        f.remedy
    );

    // Mutating webhooks add up: two of 8 s explain a 30 s create by more than half (16 s).
    let mutating = |name: &str| {
        let mut w = webhook(name, &format!("{name}.example.com"));
        w.mean_latency_seconds = Some(8.0);
        w
    };
    let snap = node(creates(&[30.0]))
        .with_webhooks(vec![mutating("a"), mutating("b"), policy.clone()])
        .build();
    let f = crate::rules::testkit::judged(check, &snap, &Settings::default()).remove(0);
    assert_eq!(f.evidence["webhooks_explain_create"], true);
    assert_eq!(f.evidence["webhooks_explained_seconds"], 16.02);
    assert_eq!(f.evidence["slowest_webhook"]["name"], "a.example.com");
    // Validating ones run in parallel: two of 8 s explain 8 s, not enough.
    let validating = |name: &str| {
        let mut w = mutating(name);
        w.kind = "validating".into();
        w
    };
    let snap = node(creates(&[30.0]))
        .with_webhooks(vec![validating("a"), validating("b")])
        .build();
    let f = crate::rules::testkit::judged(check, &snap, &Settings::default()).remove(0);
    assert_eq!(f.evidence["webhooks_explained_seconds"], 8.0);
    assert!(f.evidence.get("slowest_webhook").is_none());
}

#[test]
fn spark_2_timeout_from_java_options() {
    let mut d1 = spark_driver("d1", "spark-a", "etl", "Running");
    d1.labels.insert("spark-version".into(), "2.4.8".into());
    let judge = |d1: &PodInfo, conf: SparkConf| {
        let snap = SnapshotBuilder::spark_node(std::slice::from_ref(d1))
            .with_api(creates(&[3.0]))
            .with_spark_conf("d1", conf)
            .build();
        spark_client_timeout(&snap, &Settings::default())
    };
    let mut conf = spark_conf(
        Some("2.4.8"),
        &[(
            "spark.driver.extraJavaOptions",
            "-XX:+UseG1GC -Dkubernetes.request.timeout=45000",
        )],
    );
    conf.kubernetes_request_timeout_env = Some("4000".into());
    assert_eq!(
        judge(&d1, conf.clone()),
        (
            45.0,
            "-Dkubernetes.request.timeout in spark.driver.extraJavaOptions=45000 (ms) of driver \
             spark-jobs/etl-driver, Spark 2.4.8"
                .to_string()
        ),
        "the system property wins over the environment variable, even when larger"
    );
    conf.spark_submit_opts_env = Some("-Dkubernetes.request.timeout=20000".into());
    assert_eq!(
        judge(&d1, conf.clone()).0,
        45.0,
        "extraJavaOptions come last on the JVM's command line"
    );
    conf.properties.clear();
    assert_eq!(
        judge(&d1, conf.clone()),
        (
            20.0,
            "-Dkubernetes.request.timeout in SPARK_SUBMIT_OPTS=20000 (ms) of driver spark-jobs/etl-driver, \
             Spark 2.4.8"
                .to_string()
        )
    );
    conf.spark_submit_opts_env = None;
    assert_eq!(judge(&d1, conf.clone()).0, 4.0, "then the variable");
    // Spark 3 ignores both.
    let mut three = conf.clone();
    three.version = Some("3.5.1".into());
    three.spark_submit_opts_env = Some("-Dkubernetes.request.timeout=1000".into());
    d1.labels.insert("spark-version".into(), "3.5.1".into());
    assert_eq!(judge(&d1, three).0, 10.0);
}

#[test]
fn one_create_is_counted_in_the_singular() {
    let f = crate::rules::testkit::judged(check, &node(creates(&[8.0])).build(), &Settings::default());
    assert!(
        f[0].summary
            .starts_with("Creating a pod takes 8.0 s (median of 1 dry-run create, slowest 8.0 s)"),
        "{}",
        f[0].summary
    );
    let f = crate::rules::testkit::judged(check, &node(creates(&[8.0, 9.0])).build(), &Settings::default());
    assert!(
        f[0].summary.contains("(median of 2 dry-run creates, slowest 9.0 s)"),
        "{}",
        f[0].summary
    );
}

#[test]
fn without_latencies_or_webhooks() {
    let snap = node(creates(&[8.0]))
        .with_webhooks(vec![webhook("a", "a.example.com")])
        .build();
    let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
    assert!(f[0].evidence.get("slowest_webhook").is_none());
    assert!(
        f[0].remedy
            .contains("among the webhooks that match pod CREATE (a.example.com)"),
        "{}",
        f[0].remedy
    );

    let snap = node(creates(&[8.0])).build();
    assert!(
        crate::rules::testkit::judged(check, &snap, &Settings::default())[0]
            .remedy
            .contains("No admission webhook matches pod creation")
    );

    let snap = node(creates(&[8.0]))
        .api(|a| {
            a.webhooks = Observed::Error {
                reason: "forbidden".into(),
            }
        })
        .build();
    let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
    assert_eq!(f[0].evidence["webhooks_source"], "error: forbidden");
    assert!(f[0].remedy.contains("kubectl get mutatingwebhookconfigurations"));
    assert_eq!(NOW - 30, f[0].evidence["slowest_sample"]["at"].as_i64().unwrap());
}

/// `snap` with the `spark.properties` of driver `uid` in state `read`.
fn with_read(mut snap: NodeSnapshot, uid: &str, read: crate::snapshot::SparkConfRead) -> NodeSnapshot {
    snap.pods.spark_conf_reads.insert(uid.into(), read);
    snap
}

fn failed(reason: &str) -> crate::snapshot::SparkConfRead {
    crate::snapshot::SparkConfRead::Failed { reason: reason.into() }
}

/// The rule's coverage of `snap`, and its findings when it runs.
fn judge_rule(snap: &NodeSnapshot) -> (crate::coverage::Coverage, Vec<Finding>) {
    let s = Settings::default();
    let judgement = crate::rules::judge(snap, &crate::facts::derive(snap, &s), &s);
    let findings = judgement.findings.iter().filter(|f| f.rule == ID).cloned().collect();
    (judgement.coverage[ID.as_str()].clone(), findings)
}

/// A driver whose configuration could not be read may set a timeout as small as 1 ms (Spark
/// bounds neither key): creates under half of the default are not "fine", the coverage is
/// unknown naming the driver, and a finding made with the known timeout names it too.
#[test]
fn a_driver_whose_conf_failed_is_never_judged_fine() {
    let d1 = spark_driver("d1", "spark-a", "etl", "Running");
    let reason = "/var/lib/kubelet/pods/d1/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties: \
                  Permission denied (os error 13)";
    let snap = |totals: &[f64]| {
        with_read(
            SnapshotBuilder::spark_node(std::slice::from_ref(&d1))
                .with_api(creates(totals))
                .build(),
            "d1",
            failed(reason),
        )
    };

    // 3 s: under half of the default 10 s, but maybe past a 2 s timeout d1 set.
    let (coverage, findings) = judge_rule(&snap(&[3.0, 3.0, 3.0]));
    assert!(findings.is_empty(), "{findings:?}");
    assert_eq!(
        coverage,
        crate::coverage::Coverage::Unknown {
            missing: vec![Source::SparkConf],
            reason: format!(
                "spark_conf: the configuration of driver spark-jobs/etl-driver could not be read ({reason}): the Spark \
                 client timeout it sets is unknown"
            ),
        }
    );
    assert!(coverage.runs(&RULE.needs), "it still judges on what it read");

    // 6 s: at least half of the default: the finding holds (or is worse) and says why.
    let (coverage, findings) = judge_rule(&snap(&[6.0, 6.0, 6.0]));
    assert_eq!(coverage.status(), "unknown");
    let [f] = findings.as_slice() else {
        panic!("{findings:?}")
    };
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(
        f.evidence["spark_conf_unread_drivers"],
        json!(["spark-jobs/etl-driver"])
    );
    assert_eq!(f.evidence["spark_timeout_seconds"], 10.0);
    assert!(
        f.summary.ends_with(
            "the Spark client timeout of 10 s (no driver here whose configuration was read sets one: \
             spark_client_timeout_seconds, after Spark's default of 10000 ms); the configuration of driver \
             spark-jobs/etl-driver could not be read: the timeout it sets may be smaller, and this verdict worse"
        ),
        "{}",
        f.summary
    );

    // Offline (no API probes) the rule does not run whatever it read: not applicable, not
    // unknown, so an offline scan's exit code does not change.
    let mut offline = snap(&[6.0]);
    offline.api.server = crate::snapshot::Observed::NotApplicable {
        reason: "offline".into(),
    };
    let (coverage, findings) = judge_rule(&offline);
    assert_eq!(coverage.status(), "not_applicable", "{coverage:?}");
    assert!(findings.is_empty());

    // A finished driver's unread configuration does not matter; nor does one with nothing to read.
    let done = spark_driver("d1", "spark-a", "etl", "Succeeded");
    let finished = with_read(
        SnapshotBuilder::spark_node(&[done]).with_api(creates(&[3.0])).build(),
        "d1",
        failed(reason),
    );
    assert_eq!(judge_rule(&finished).0, crate::coverage::Coverage::Judged);
    let waiting = with_read(
        snap(&[3.0]),
        "d1",
        crate::snapshot::SparkConfRead::NotThere {
            reason: "it waits to start".into(),
        },
    );
    assert_eq!(judge_rule(&waiting), (crate::coverage::Coverage::Judged, vec![]));
}

/// A driver whose configuration was read and sets a smaller timeout is still the timeout in
/// force; the unread one is named beside it.
#[test]
fn a_read_driver_with_a_smaller_timeout_still_wins() {
    let d1 = spark_driver("d1", "spark-a", "etl", "Running");
    let d2 = spark_driver("d2", "spark-b", "ml", "Running");
    let snap = SnapshotBuilder::spark_node(&[d1, d2])
        .with_api(creates(&[3.0, 3.0]))
        .with_spark_conf("d1", spark_conf(Some("3.5.1"), &[(DRIVER_TIMEOUT_KEY, "4000")]))
        .build();
    let snap = with_read(
        snap,
        "d1",
        crate::snapshot::SparkConfRead::Read {
            path: "/var/lib/kubelet/pods/d1/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties"
                .into(),
        },
    );
    let snap = with_read(snap, "d2", failed("spark.properties: not UTF-8 text"));
    let (coverage, findings) = judge_rule(&snap);
    assert_eq!(coverage.status(), "unknown");
    let [f] = findings.as_slice() else {
        panic!("{findings:?}")
    };
    assert_eq!(f.severity, Severity::Warning, "3 s is at least half of d1's 4 s");
    assert_eq!(f.evidence["spark_timeout_seconds"], 4.0);
    assert_eq!(f.evidence["spark_timeout_driver"], "spark-jobs/etl-driver");
    assert_eq!(f.evidence["spark_conf_unread_drivers"], json!(["spark-jobs/ml-driver"]));
    assert!(
        f.summary.contains(
            "timeout of 4 s (spark.kubernetes.driver.requestTimeout=4000 (ms) of driver spark-jobs/etl-driver, Spark \
             3.5.1); the configuration of driver spark-jobs/ml-driver could not be read"
        ),
        "{}",
        f.summary
    );
}

/// No driver on the node: the default timeout, judged, as before.
#[test]
fn no_driver_judges_with_the_default() {
    let (coverage, findings) = judge_rule(&node(creates(&[3.0, 4.0])).build());
    assert_eq!(coverage, crate::coverage::Coverage::Judged);
    assert!(findings.is_empty());
    let (coverage, findings) = judge_rule(&node(creates(&[6.0])).build());
    assert_eq!(coverage, crate::coverage::Coverage::Judged);
    assert_eq!(findings[0].evidence["spark_timeout_seconds"], 10.0);
    assert!(findings[0].evidence.get("spark_conf_unread_drivers").is_none());
    assert!(
        findings[0]
            .summary
            .ends_with("(no driver here sets one: spark_client_timeout_seconds, after Spark's default of 10000 ms)"),
        "{}",
        findings[0].summary
    );
}
