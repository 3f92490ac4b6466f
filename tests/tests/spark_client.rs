//! The real Spark client in the loop: pyspark 3.5.9's `spark-submit` (Spark's Kubernetes
//! submission client on fabric8 6.7.2 and okhttp, run by the machine's java) submits a
//! cluster-mode application to the API server double over plain HTTP, while pod creates take
//! 30 s, as behind a slow admission webhook.
//!
//! One test, three steps on one double:
//! 1. spark-submit with Spark's defaults fails as users see it: okhttp's 10 s call timeout,
//!    retried three times (`kubernetes.request.retry.backoffLimit=3`), then
//!    `KubernetesClientException` after about 41 s. The double carries out the writes the
//!    client gave up on (`set_writes_outlive_clients`: as behind a proxy that does not pass
//!    the client's abort on; kube-apiserver itself cancels them): the first POST creates the
//!    driver pod 30 s after it arrived, the three retries are refused as AlreadyExists, and
//!    the driver is left without its Service and ConfigMap, which Spark 3.5 applies only once
//!    the create has answered.
//! 2. `nodemedic scan` (run meanwhile) measures the 30 s with its dry-run probe and raises
//!    `slow-pod-admission` with the two `--conf` arguments to add.
//! 3. The same spark-submit with exactly those arguments succeeds a little over 30 s later:
//!    driver pod, then its Service and ConfigMap by server-side apply, owned by the pod.
//! 4. A spark-submit that waits for its application survives the watch's bookmarks.
//! 5. Step 1's leftover driver, bound to the node and waiting in `ContainerCreating` as the
//!    kubelet keeps it, is what `half-submitted-driver` reports (with the kubelet directory
//!    the agent reads: the pod's, without the ConfigMap volume), and `repair half-submitted`
//!    deletes it with its UID as a precondition.
//!
//! It needs java and pyspark 3.5.9 (`tests/run.sh` installs them) and fails, never skips,
//! without them. Run alone: `cargo test -p nodemedic-tests --test e2e spark_client::`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nodemedic_tests::agent::NODE;
use nodemedic_tests::apiserver::{ApiServer, RequestRecord};
use nodemedic_tests::spark_submit::{PYSPARK_VERSION, SparkSubmit, Submission, cluster_mode_args, with_confs};
use serde_json::{Value, json};

const NAMESPACE: &str = "spark";
const APP: &str = "pi";
/// The application of step 4, which waits for its driver to finish.
const WATCHING_APP: &str = "pi-watched";
const IMAGE: &str = "apache/spark:3.5.1";
/// The admission delay every pod create meets.
const ADMISSION: Duration = Duration::from_secs(30);
/// Spark's default `spark.kubernetes.submission.requestTimeout`.
const SPARK_TIMEOUT: Duration = Duration::from_secs(10);
/// fabric8's attempts at one request under Spark: one plus `kubernetes.request.retry.backoffLimit`.
const ATTEMPTS: usize = 4;
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(150);
/// What a spark-submit may spend besides its requests: the JVM's start, the client's set-up
/// and its shutdown. Three of them start together in this test, on two cores that the rest
/// of the suite keeps busy: 22.8 s was seen on a full suite run (62.8 s for 40 s of
/// attempts) and 20.3 s in CI (50.3 s for one 30 s create).
const JVM_ROOM: Duration = Duration::from_secs(35);
const SUBMISSION_KEY: &str = "spark.kubernetes.submission.requestTimeout";
const DRIVER_KEY: &str = "spark.kubernetes.driver.requestTimeout";

/// Every request the double saw, one a line (arrival relative to `t0`, the time to the answer,
/// the answer), with the start of each body: what fabric8 sent, for failure messages.
fn journal(api: &ApiServer, t0: SystemTime) -> String {
    let mut out = String::from("requests the API server double saw, by arrival:\n");
    let mut requests = api.requests();
    requests.sort_by_key(|r| r.time);
    for r in requests {
        let at = r.time.duration_since(t0).unwrap_or_default().as_secs_f64();
        let body: String = r.body.chars().take(600).collect();
        out.push_str(&format!(
            "  +{at:7.3}s {:>7.3}s {} {}{}{} -> {}{} [{}; {}]\n      {body}\n",
            r.elapsed.as_secs_f64(),
            r.method,
            r.path,
            if r.query.is_empty() { "" } else { "?" },
            r.query,
            r.status,
            r.reason.as_deref().map(|s| format!(" {s}")).unwrap_or_default(),
            r.user_agent.as_deref().unwrap_or("-"),
            r.content_type.as_deref().unwrap_or("-"),
        ));
    }
    out
}

fn describe(run: &Submission) -> String {
    format!(
        "{}\nexit {:?} after {:.1} s{}\n{}",
        run.command,
        run.code,
        run.elapsed.as_secs_f64(),
        if run.timed_out { " (killed by the timeout)" } else { "" },
        run.output()
    )
}

fn is_fabric8(r: &RequestRecord) -> bool {
    r.user_agent
        .as_deref()
        .is_some_and(|ua| ua.starts_with("fabric8-kubernetes-client/"))
}

/// The driver pod a request of spark-submit is about: the pod it creates, reads or watches, or
/// the owner of what it applies.
fn submission_of(r: &RequestRecord) -> Option<String> {
    if r.method == "GET" {
        let by_field = r
            .query_param("fieldSelector")
            .and_then(|f| f.strip_prefix("metadata.name=").map(str::to_string));
        return r.name.clone().or(by_field);
    }
    let body = r.body_json()?;
    let name = match r.resource.as_str() {
        "pods" => &body["metadata"]["name"],
        _ => &body["metadata"]["ownerReferences"][0]["name"],
    };
    name.as_str().map(str::to_string)
}

/// fabric8's requests about the driver pod `driver`, by arrival.
fn requests_of(api: &ApiServer, driver: &str) -> Vec<RequestRecord> {
    let mut out: Vec<RequestRecord> = api
        .requests()
        .into_iter()
        .filter(|r| is_fabric8(r) && submission_of(r).as_deref() == Some(driver))
        .collect();
    out.sort_by_key(|r| r.time);
    out
}

/// The driver pods of the submissions of application `app` (`spark-app-name`), in the order
/// of their first creates.
fn submissions(api: &ApiServer, app: &str) -> Vec<String> {
    let mut posts: Vec<RequestRecord> = api
        .requests()
        .into_iter()
        .filter(|r| is_fabric8(r) && r.method == "POST" && r.resource == "pods")
        .collect();
    posts.sort_by_key(|r| r.time);
    let mut out: Vec<String> = Vec::new();
    for body in posts.iter().filter_map(RequestRecord::body_json) {
        if body["metadata"]["labels"]["spark-app-name"] == app
            && let Some(name) = body["metadata"]["name"].as_str()
            && !out.iter().any(|n| n == name)
        {
            out.push(name.to_string());
        }
    }
    out
}

/// The ConfigMap the driver pod mounts (`spark-conf-volume-driver`).
fn conf_map_of(pod: &Value) -> String {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "spark-conf-volume-driver")
        .and_then(|v| v["configMap"]["name"].as_str())
        .unwrap_or_else(|| panic!("no spark-conf-volume-driver in {pod}"))
        .to_string()
}

/// A webhook on pod CREATE, as the platform's sidecar injector: the 30 s it stands for are
/// injected with `set_latency`.
fn slow_webhook() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "sidecar-injector"},
        "webhooks": [{
            "name": "inject.sidecars.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "timeoutSeconds": 30, "failurePolicy": "Fail",
            "clientConfig": {"service": {"namespace": "sidecars", "name": "injector", "path": "/mutate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}]
        }]
    })
}

/// `nodemedic scan` of the node at `root` against the double: its findings.
fn scan(root: &std::path::Path, kubeconfig: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    let report = nodemedic_tests::scan_report(root, kubeconfig, NODE, extra);
    report["findings"].as_array().cloned().unwrap_or_default()
}

/// The `--conf key=value` arguments of a remedy for the two Spark keys, in the remedy's order.
fn spark_confs(remedy: &str) -> Vec<String> {
    let words: Vec<&str> = remedy.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "--conf")
        .map(|w| w[1].trim_end_matches([',', '.', ')', ';']).to_string())
        .filter(|kv| kv.starts_with(&format!("{SUBMISSION_KEY}=")) || kv.starts_with(&format!("{DRIVER_KEY}=")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_submit_meets_a_30_second_admission_then_the_remedy_of_slow_pod_admission() {
    let spark = SparkSubmit::require();
    assert_eq!(
        spark.version.as_deref(),
        Some(PYSPARK_VERSION),
        "this test is written against pyspark {PYSPARK_VERSION} (Spark 3.5, fabric8 6.7.2); {} is {:?}: run tests/run.sh",
        spark.script.display(),
        spark.version
    );
    let api = Arc::new(ApiServer::start().await.unwrap());
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    api.store().create(slow_webhook());
    api.faults().set_latency("create", "pods", ADMISSION);
    // The creates spark-submit gives up on still land, as behind a proxy that does not pass
    // the client's abort on (kube-apiserver alone would cancel them: see tests/README.md).
    api.faults().set_writes_outlive_clients(true);
    let t0 = SystemTime::now();
    let started = Instant::now();
    let args = cluster_mode_args(&api.http_url(), NAMESPACE, APP, IMAGE);

    // 1. and 2.: spark-submit with Spark's defaults, and the scan, side by side; 4. beside them.
    let without = tokio::task::spawn_blocking({
        let (spark, args) = (spark.clone(), args.clone());
        move || spark.run(&args, SUBMIT_TIMEOUT)
    });
    let watching = tokio::task::spawn_blocking({
        let mut args = cluster_mode_args(&api.http_url(), NAMESPACE, WATCHING_APP, IMAGE);
        let wait = args
            .iter()
            .position(|a| a == "spark.kubernetes.submission.waitAppCompletion=false")
            .unwrap();
        args[wait] = "spark.kubernetes.submission.waitAppCompletion=true".into();
        let args = with_confs(
            &args,
            &[
                format!("{SUBMISSION_KEY}=120000"),
                format!("{DRIVER_KEY}=120000"),
                "spark.kubernetes.report.interval=1s".into(),
            ],
        );
        let spark = spark.clone();
        move || spark.run(&args, SUBMIT_TIMEOUT)
    });
    let finisher = tokio::spawn(finish_when_watched(api.clone()));
    let dir = tempfile::tempdir().unwrap();
    let (root, kubeconfig) = nodemedic_tests::scan_host(&api, &dir.path().join("first"), NODE);
    let findings = tokio::task::spawn_blocking({
        let (root, kubeconfig) = (root.clone(), kubeconfig.clone());
        move || scan(&root, &kubeconfig, &[])
    })
    .await
    .unwrap();

    // 2. The finding and its remedy.
    let slow: Vec<&Value> = findings.iter().filter(|f| f["rule"] == "slow-pod-admission").collect();
    assert_eq!(slow.len(), 1, "{findings:#?}");
    let evidence = &slow[0]["evidence"];
    assert!(
        evidence["max_seconds"].as_f64().unwrap() >= ADMISSION.as_secs_f64(),
        "{evidence:#}"
    );
    assert_eq!(evidence["spark_timeout_seconds"], 10.0, "{evidence:#}");
    let suggested = evidence["suggested_timeout_ms"].as_u64().unwrap();
    assert!(
        suggested >= 2 * ADMISSION.as_millis() as u64 && suggested % 1000 == 0,
        "{evidence:#}"
    );
    let remedy = slow[0]["remedy"].as_str().unwrap();
    let confs = spark_confs(remedy);
    assert_eq!(
        confs,
        [
            format!("{SUBMISSION_KEY}={suggested}"),
            format!("{DRIVER_KEY}={suggested}")
        ],
        "{remedy}"
    );

    // 3. The same command with exactly those two arguments, as soon as the finding is there
    // (step 1 is still retrying: the submissions are told apart by their driver pods).
    let with = tokio::task::spawn_blocking({
        let (spark, args) = (spark.clone(), with_confs(&args, &confs));
        move || spark.run(&args, SUBMIT_TIMEOUT)
    });
    let without = without.await.unwrap();
    // 5. Meanwhile: step 1's driver pod is there (its first create landed 30 s after it was
    // sent); the scheduler binds it here and the kubelet keeps it waiting for its ConfigMap.
    let leftover = submissions(&api, APP).first().cloned().expect("step 1's driver");
    let leftover_pod = bind_waiting(&api, &leftover);
    let (half_root, half_kubeconfig) = nodemedic_tests::scan_host(&api, &dir.path().join("second"), NODE);
    let uid = leftover_pod["metadata"]["uid"].as_str().unwrap().to_string();
    std::fs::create_dir_all(half_root.join(format!(
        "var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/kube-api-access-5xq8v"
    )))
    .unwrap();
    let half = tokio::task::spawn_blocking({
        let (root, kubeconfig) = (half_root.clone(), half_kubeconfig.clone());
        move || {
            scan(
                &root,
                &kubeconfig,
                &["--rule-setting", "half_submitted_grace_seconds=5"],
            )
        }
    });
    let with = with.await.unwrap();
    let watching = watching.await.unwrap();
    let finished = finisher.await.unwrap();
    // The last retry of step 1 is answered 30 s after it arrived, about 66 s into the test.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answered = || {
        submissions(&api, APP)
            .first()
            .is_some_and(|d| requests_of(&api, d).len() >= ATTEMPTS)
    };
    while !answered() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = journal(&api, t0);
    let store = api.store();
    let drivers = submissions(&api, APP);
    assert_eq!(drivers.len(), 2, "two submissions, two driver pods: {drivers:?}\n{log}");

    // 1. As users see it.
    let a = describe(&without);
    assert!(!without.timed_out && without.code.is_some_and(|c| c != 0), "{a}\n{log}");
    for needle in [
        "io.fabric8.kubernetes.client.KubernetesClientException: An error has occurred",
        "Caused by: java.io.IOException: timeout",
        "Caused by: java.io.InterruptedIOException: timeout",
        "Please check \"kubectl auth can-i create pod\" first",
    ] {
        assert!(
            without.output().contains(needle),
            "{needle:?} not in the output:\n{a}\n{log}"
        );
    }
    // Four attempts of 10 s, with backoff pauses in between: over 40 s in all (the count of
    // attempts is held below, by the POSTs sent).
    let attempts = SPARK_TIMEOUT * ATTEMPTS as u32;
    assert!(
        without.elapsed > attempts && without.elapsed < attempts + JVM_ROOM,
        "{a}\n{log}"
    );
    // What it sent: the same POST four times, and nothing else.
    let driver = &drivers[0];
    let a_requests = requests_of(&api, driver);
    let posts: Vec<&RequestRecord> = a_requests.iter().collect();
    assert_eq!(posts.len(), ATTEMPTS, "{log}");
    assert!(
        posts
            .iter()
            .all(|r| r.method == "POST" && r.path == format!("/api/v1/namespaces/{NAMESPACE}/pods")),
        "{log}"
    );
    let all = api.requests();
    let unrelated = all
        .iter()
        .filter(|r| is_fabric8(r) && submission_of(r).is_none())
        .count();
    assert_eq!(unrelated, 0, "fabric8 requests of no submission\n{log}");
    let at: Vec<f64> = posts
        .iter()
        .map(|r| r.time.duration_since(posts[0].time).unwrap().as_secs_f64())
        .collect();
    for pair in at.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((9.9..11.5).contains(&gap), "attempts {at:?} s apart\n{log}");
    }
    // Backoff: 100, 200 and 400 ms after the three timeouts, less the first attempt's slower
    // start (a new connection in a cold JVM).
    assert!(at[3] >= 30.3, "attempts at {at:?} s\n{log}");
    // Each was answered only after the client had stopped waiting: the first created the pod,
    // the others found it there.
    let answers: Vec<(u16, Option<&str>)> = posts.iter().map(|r| (r.status, r.reason.as_deref())).collect();
    assert_eq!(
        answers,
        [
            (201, None),
            (409, Some("AlreadyExists")),
            (409, Some("AlreadyExists")),
            (409, Some("AlreadyExists"))
        ],
        "{log}"
    );
    assert!(posts.iter().all(|r| r.elapsed >= ADMISSION), "{log}");
    // The half-submitted driver: the pod exists, its Service and ConfigMap never came.
    let pod = store
        .get("pods", Some(NAMESPACE), driver)
        .unwrap_or_else(|| panic!("driver {driver} missing\n{log}"));
    let prefix = driver.trim_end_matches("-driver");
    let a_conf_map = conf_map_of(&pod);
    assert!(
        store
            .get("services", Some(NAMESPACE), &format!("{prefix}-driver-svc"))
            .is_none(),
        "{log}"
    );
    assert!(store.get("configmaps", Some(NAMESPACE), &a_conf_map).is_none(), "{log}");

    // 3. With the remedy.
    let c = describe(&with);
    assert_eq!(with.code, Some(0), "{c}\n{log}");
    assert!(with.output().contains("Deployed Spark application"), "{c}\n{log}");
    // One create that waits out the admission (that it was sent once is held below).
    assert!(
        with.elapsed > ADMISSION && with.elapsed < ADMISSION + JVM_ROOM,
        "{c}\n{log}"
    );
    let driver = &drivers[1];
    let c_requests = requests_of(&api, driver);
    let steps: Vec<(&str, String, u16)> = c_requests
        .iter()
        .map(|r| (r.method.as_str(), r.resource.clone(), r.status))
        .collect();
    assert_eq!(
        steps,
        [
            ("POST", "pods".to_string(), 201),
            ("PATCH", "services".to_string(), 201),
            ("PATCH", "configmaps".to_string(), 201)
        ],
        "{log}"
    );
    assert!(c_requests[0].elapsed >= ADMISSION, "{log}");
    let pod = store.get("pods", Some(NAMESPACE), driver).unwrap();
    let prefix = driver.trim_end_matches("-driver");
    let owner = json!([{
        "apiVersion": "v1", "kind": "Pod", "controller": true,
        "name": driver, "uid": pod["metadata"]["uid"]
    }]);
    for (r, name) in [
        (&c_requests[1], format!("{prefix}-driver-svc")),
        (&c_requests[2], conf_map_of(&pod)),
    ] {
        // Server-side apply, forced, as fabric8's field manager.
        assert_eq!(r.name.as_deref(), Some(name.as_str()), "{log}");
        assert!(
            r.content_type
                .as_deref()
                .is_some_and(|ct| ct.starts_with("application/apply-patch+yaml")),
            "{log}"
        );
        assert_eq!(
            (
                r.query_param("fieldManager").as_deref(),
                r.query_param("force").as_deref()
            ),
            (Some("fabric8"), Some("true")),
            "{log}"
        );
        let applied = r.body_json().unwrap_or_else(|| panic!("not JSON: {}", r.body));
        assert_eq!(applied["metadata"]["ownerReferences"], owner, "{log}");
        let stored = store.get(&r.resource, Some(NAMESPACE), &name).unwrap();
        assert_eq!(stored["metadata"]["ownerReferences"], owner, "{log}");
    }
    let svc = store
        .get("services", Some(NAMESPACE), &format!("{prefix}-driver-svc"))
        .unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "None", "the driver's headless Service: {svc}");
    let conf = store.get("configmaps", Some(NAMESPACE), &conf_map_of(&pod)).unwrap();
    let properties = conf["data"]["spark.properties"].as_str().unwrap_or_default();
    assert!(
        properties.contains(&format!("spark.kubernetes.driver.pod.name={driver}")),
        "{properties}"
    );
    for kv in &confs {
        assert!(
            properties.contains(kv.as_str()),
            "{kv} reaches the driver: {properties}"
        );
    }

    // 4. Waiting for the application: Spark's pod watcher gets the watch's bookmarks as pod
    // events and reads their status (`phase: null`); with the API server's bookmark objects,
    // which carry an empty spec and status, that is harmless. (Objects with only metadata
    // made spark-submit die of a NullPointerException.)
    let d = describe(&watching);
    assert_eq!(watching.code, Some(0), "{d}\n{log}");
    let watched = submissions(&api, WATCHING_APP);
    assert_eq!(watched.len(), 1, "{log}");
    let watches: Vec<RequestRecord> = requests_of(&api, &watched[0])
        .into_iter()
        .filter(|r| r.is_watch)
        .collect();
    assert!(!watches.is_empty(), "{log}");
    assert!(
        watches
            .iter()
            .all(|w| w.query_param("allowWatchBookmarks").as_deref() == Some("true")),
        "{log}"
    );
    assert_eq!(finished.as_ref(), Some(&watched[0]), "{log}");
    let out = watching.output();
    assert!(!out.contains("NullPointerException"), "{d}");
    assert!(
        out.contains("(phase: null)"),
        "a bookmark reached the watcher as a pod: {d}"
    );
    assert!(out.contains("(phase: Succeeded)") && out.contains("finished"), "{d}");

    // 5. The leftover driver, as half-submitted-driver reports it.
    let half = half.await.unwrap();
    let found: Vec<&Value> = half.iter().filter(|f| f["rule"] == "half-submitted-driver").collect();
    assert_eq!(found.len(), 1, "{half:#?}\n{log}");
    let e = &found[0]["evidence"];
    assert_eq!(e["pod"], format!("{NAMESPACE}/{leftover}"), "{e:#}");
    assert_eq!(e["pod_uid"], uid.as_str(), "{e:#}");
    assert_eq!(
        e["config_map"],
        a_conf_map.as_str(),
        "the name spark-submit gave it: {e:#}"
    );
    assert_eq!(e["conf_volume"], "spark-conf-volume-driver", "{e:#}");
    assert_eq!(e["waiting_reason"], "ContainerCreating", "{e:#}");
    assert_eq!(
        e["missing_volume_path"],
        format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/spark-conf-volume-driver"),
        "{e:#}"
    );
    assert_eq!(e["app_name"], APP, "{e:#}");
    assert!(
        e["slow_pod_admission"]["max_seconds"].as_f64().unwrap() >= ADMISSION.as_secs_f64(),
        "the creates measured meanwhile are the evidence of the cause: {e:#}"
    );
    let remedy = found[0]["remedy"].as_str().unwrap();
    assert!(
        remedy.contains(&format!("kubectl nodemedic repair {NODE} half-submitted")),
        "{remedy}"
    );
    assert_eq!(spark_confs(remedy).len(), 2, "{remedy}");
    // And repair half-submitted deletes it, on its UID.
    let args = nodemedic::cli::args::HalfSubmittedArgs {
        common: nodemedic::cli::args::PodRepairArgs {
            node: Some(NODE.into()),
            kube: nodemedic::cli::args::KubeArgs {
                kubeconfig: Some(half_kubeconfig.clone()),
            },
            host_root: Some(half_root.clone()),
            kubelet_dir: None,
            config: None,
            rule_setting: vec!["half_submitted_grace_seconds=5".into()],
            apply: nodemedic::cli::args::ApplyArgs {
                apply: true,
                yes: true,
                expect_plan: None,
            },
            format: nodemedic::cli::args::FormatArg {
                format: nodemedic::cli::args::Format::Text,
            },
        },
        older_than_seconds: None,
    };
    let (code, out) =
        nodemedic_tests::repairs::run_pod_repair(nodemedic::cli::args::RepairAction::HalfSubmitted(args)).await;
    assert_eq!(code, Ok(0), "{out}");
    assert!(store.get("pods", Some(NAMESPACE), &leftover).is_none(), "{out}");
    let delete = api
        .requests()
        .into_iter()
        .find(|r| r.method == "DELETE" && r.name.as_deref() == Some(leftover.as_str()))
        .expect("a DELETE of the leftover driver");
    assert_eq!(delete.body_json().unwrap()["preconditions"]["uid"], uid.as_str());

    println!(
        "spark_client: spark-submit without the remedy {:.1} s, with it {:.1} s, waiting for the \
         application {:.1} s; test {:.1} s\n{log}",
        without.elapsed.as_secs_f64(),
        with.elapsed.as_secs_f64(),
        watching.elapsed.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// Binds driver pod `name` to this node and has it wait in `ContainerCreating`, as the
/// scheduler and a kubelet that cannot find its ConfigMap leave it; returns the pod.
fn bind_waiting(api: &ApiServer, name: &str) -> Value {
    let created =
        api.store().get("pods", Some(NAMESPACE), name).expect("the driver pod")["metadata"]["creationTimestamp"]
            .clone();
    api.store().modify("pods", Some(NAMESPACE), name, |pod| {
        pod["spec"]["nodeName"] = json!(NODE);
        pod["status"] = json!({
            "phase": "Pending", "qosClass": "Burstable",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": created}],
            "containerStatuses": [{"name": "spark-kubernetes-driver", "image": IMAGE, "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}],
        });
    });
    api.store().get("pods", Some(NAMESPACE), name).unwrap()
}

/// Step 4's driver: once spark-submit watches it, lets a few bookmarks through (one every
/// 500 ms), then ends it as a kubelet would report a driver that completed. Returns the driver
/// it ended, `None` when no watch came.
async fn finish_when_watched(api: Arc<ApiServer>) -> Option<String> {
    const EVERY: Duration = Duration::from_millis(500);
    const BOOKMARKS: u32 = 4;
    api.set_bookmark_interval(EVERY);
    let deadline = Instant::now() + SUBMIT_TIMEOUT;
    let driver = loop {
        let watched = submissions(&api, WATCHING_APP);
        let watching = watched
            .first()
            .is_some_and(|d| requests_of(&api, d).iter().any(|r| r.is_watch));
        if watching || Instant::now() > deadline {
            break watched.first().cloned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let driver = driver.filter(|d| requests_of(&api, d).iter().any(|r| r.is_watch))?;
    tokio::time::sleep(EVERY * BOOKMARKS + EVERY / 2).await;
    api.store().modify("pods", Some(NAMESPACE), &driver, |pod| {
        pod["status"]["phase"] = "Succeeded".into();
        pod["status"]["containerStatuses"] = json!([{
            "name": "spark-kubernetes-driver", "image": IMAGE, "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}
        }]);
    });
    Some(driver)
}
