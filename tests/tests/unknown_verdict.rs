//! "Could not look" is never "fine": a source that hangs or fails makes the rules that need it
//! `unknown` (the report's `coverage`, `scan`'s exit 4), the daemon keeps their last judged
//! findings and gauges and sets their node condition `Unknown`; a host root, a kubeconfig or a
//! checkpoint file that cannot be what the user meant is said so (exit 2, or invalid), never
//! scanned as a healthy node.

use std::path::Path;
use std::time::Duration;

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::{node_condition, node_object};
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime};
use nodemedic_tests::podresources::{Behaviour, FakeKubelet, FakePod, LIST, Scenario};
use nodemedic_tests::scenarios::spark_node;
use nodemedic_tests::{Run, nodemedic};
use serde_json::Value;

/// A healthy static node of two NUMA nodes of 4 CPUs (0-3, 4-7; CPUs 0 and 4 reserved): exec-1
/// runs pinned to CPUs 1-2 and nothing is stale.
fn healthy(name: &str) -> Node {
    Node::new(name, Layout::V1Cgroupfs, Runtime::Containerd)
        .cpus(2, 4, 1)
        .pod(Pod::new("exec-1", 2).exclusive("1-2"))
}

/// The kubelet in agreement with [`healthy`]'s file.
fn agreeing() -> Scenario {
    Scenario::default()
        .pod(FakePod::new("default", "exec-1").container("app", &[1, 2]))
        .allocatable(&[1, 2, 3, 5, 6, 7])
}

/// The kubelet holding exec-1 on other CPUs in memory than in its file.
fn diverging() -> Scenario {
    Scenario::default()
        .pod(FakePod::new("default", "exec-1").container("app", &[1, 3]))
        .allocatable(&[1, 2, 3, 5, 6, 7])
}

fn socket(root: &Path) -> std::path::PathBuf {
    root.join("var/lib/kubelet/pod-resources/kubelet.sock")
}

/// `nodemedic scan --format json` of `root` with its pods file, off the runtime's threads.
async fn scan(root: &Path, node: &str) -> (Run, Value) {
    let (root, pods) = (root.to_str().unwrap().to_string(), root.join("pods.json"));
    let pods = pods.to_str().unwrap().to_string();
    let node = node.to_string();
    let run = tokio::task::spawn_blocking(move || {
        nodemedic(&[
            "scan",
            "--host-root",
            &root,
            "--pods",
            &pods,
            "--node",
            &node,
            "--format",
            "json",
        ])
    })
    .await
    .unwrap();
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let report = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    (run, report)
}

/// Case 5, `scan`: the PodResources API hangs. The divergence is not judged: the report says
/// `unknown` with the source and why, and the scan exits 4, not 0; once the kubelet answers,
/// the same node is judged and clean (exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_podresources_api_makes_the_scan_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    healthy("worker-1").write(dir.path()).unwrap();
    let fake = FakeKubelet::start(socket(dir.path()), agreeing().behaviour(LIST, Behaviour::Hang))
        .await
        .unwrap();
    let (run, report) = scan(dir.path(), "worker-1").await;
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
    let divergence = &report["coverage"]["kubelet-state-divergence"];
    assert_eq!(divergence["status"], "unknown", "{report:#}");
    assert_eq!(divergence["missing"], serde_json::json!(["podresources"]));
    assert_eq!(
        divergence["reason"],
        "podresources: /var/lib/kubelet/pod-resources/kubelet.sock: List did not answer within 2 s"
    );
    assert_eq!(report["coverage"]["stale-cpu-assignment"]["status"], "judged");
    assert_eq!(run.code, 4, "{}", run.stderr);

    fake.set_behaviour(LIST, Behaviour::Answer);
    let (run, report) = scan(dir.path(), "worker-1").await;
    assert_eq!(
        report["coverage"]["kubelet-state-divergence"]["status"], "judged",
        "{report:#}"
    );
    assert_eq!(run.code, 0, "{report:#}");
}

/// Case 5, the daemon: with the PodResources API hanging, the divergence it found stays in its
/// gauges (so the alert keeps its `for` timer), `nodemedic_rule_judged` says 0, and the node
/// condition goes `Unknown` with reason `CannotJudge`, not `False` "finds no problem". When
/// the kubelet answers again, in agreement, all of it clears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_holds_what_it_cannot_judge_and_says_unknown() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let node = healthy(NODE);
    // exec-1 is alive in the API too: nothing but the divergence to find.
    for pod in node.pods_json()["items"].as_array().unwrap() {
        api.store().create(pod.clone());
    }
    let agent = Agent::start(&api, Some(&node), &["--condition-heartbeat-seconds", "600"]);
    let fake = FakeKubelet::start(socket(agent.host_root()), diverging())
        .await
        .unwrap();
    let divergence = r#"nodemedic_findings{rule="kubelet-state-divergence",severity="critical"}"#;
    let judged = r#"nodemedic_rule_judged{rule="kubelet-state-divergence"}"#;
    let condition = |want: &str| node_condition(&api, "CPUManagerStateStale").is_some_and(|c| c["status"] == want);
    wait_for(
        "the divergence and its condition",
        Duration::from_secs(30),
        &agent,
        || agent.metric(divergence) == Some(1.0) && condition("True"),
    )
    .await;
    assert_eq!(agent.metric(judged), Some(1.0));

    fake.set_behaviour(LIST, Behaviour::Hang);
    wait_for("the condition to go Unknown", Duration::from_secs(30), &agent, || {
        condition("Unknown")
    })
    .await;
    let c = node_condition(&api, "CPUManagerStateStale").unwrap();
    assert_eq!(c["reason"], "CannotJudge", "{c:#}");
    assert_eq!(
        c["message"],
        "nodemedic could not judge kubelet-state-divergence (podresources: \
         /var/lib/kubelet/pod-resources/kubelet.sock: List did not answer within 2 s)"
    );
    // Scans go on (each waits out the 2 s call): the gauges hold the last judged values.
    let scans = agent.scans();
    wait_for("two more scans", Duration::from_secs(30), &agent, || {
        agent.scans() >= scans + 2
    })
    .await;
    assert_eq!(agent.metric(divergence), Some(1.0));
    assert_eq!(
        agent.metric(r#"nodemedic_rule_firing{rule="kubelet-state-divergence"}"#),
        Some(1.0)
    );
    assert_eq!(agent.metric(judged), Some(0.0));
    assert!(condition("Unknown"));

    fake.handle().set_scenario(agreeing());
    wait_for(
        "the kubelet to be judged again, clean",
        Duration::from_secs(30),
        &agent,
        || agent.metric(divergence) == Some(0.0) && condition("False"),
    )
    .await;
    assert_eq!(agent.metric(judged), Some(1.0));
}

/// Case 7: a host root that is no node (a parent directory of a node tree, an empty directory
/// like `/tmp`) is an error that names what is missing, and suggests the node below it.
#[test]
fn a_host_root_that_is_no_node_is_an_error() {
    let parent = tempfile::tempdir().unwrap();
    spark_node("worker-3", Layout::V1Cgroupfs, Runtime::Containerd)
        .write(&parent.path().join("worker-3"))
        .unwrap();
    std::fs::create_dir(parent.path().join("notes")).unwrap();
    let root = parent.path().to_str().unwrap();
    let run = nodemedic(&["scan", "--host-root", root]);
    assert_eq!(
        (run.code, run.stderr.as_str(), run.stdout.as_str()),
        (
            2,
            format!(
                "nodemedic: {root}: does not look like a node's root: no /var/lib/kubelet, no /sys/fs/cgroup, no \
                 /proc under it (pass the directory that holds them as --host-root); did you mean --host-root \
                 {root}/worker-3?\n"
            )
            .as_str(),
            ""
        )
    );
    let empty = tempfile::tempdir().unwrap();
    let root = empty.path().to_str().unwrap();
    let run = nodemedic(&["scan", "--host-root", root, "--offline"]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.stderr,
        format!(
            "nodemedic: {root}: does not look like a node's root: no /var/lib/kubelet, no /sys/fs/cgroup, no /proc \
             under it (pass the directory that holds them as --host-root)\n"
        )
    );
    // The node itself scans.
    let run = nodemedic(&[
        "scan",
        "--host-root",
        &format!("{}/worker-3", parent.path().display()),
        "--offline",
    ]);
    assert!(run.code == 0 || run.code == 1, "{}", run.stderr);
}

/// Case 7: a `--kubeconfig` the user named that is missing, garbage, or whose API server
/// refuses is an error naming the file and the reason on one line, not a scan of 2 findings
/// out of 5 with the reason in a note. The default configuration still falls back, with a note.
#[test]
fn an_explicit_kubeconfig_that_cannot_be_used_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    spark_node("worker-3", Layout::V1Cgroupfs, Runtime::Containerd)
        .write(&root)
        .unwrap();
    let root = root.to_str().unwrap();
    for (file, reason) in nodemedic_tests::unusable_kubeconfigs(dir.path(), "worker-3") {
        let (file, reason) = (file.as_str(), reason.as_str());
        let run = nodemedic(&["scan", "--host-root", root, "--node", "worker-3", "--kubeconfig", file]);
        assert_eq!(run.code, 2, "{file}: {}", run.stderr);
        assert!(
            run.stderr.starts_with(&format!("nodemedic: {file}: ")) && run.stderr.contains(reason),
            "{file}: {}",
            run.stderr
        );
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert_eq!(run.stdout, "", "{file}");
    }
    // The default configuration ($KUBECONFIG here, a missing file) falls back with a note, and
    // the rules that need a pod list say not applicable.
    let run = nodemedic(&["scan", "--host-root", root, "--node", "worker-3", "--format", "json"]);
    assert!(run.code == 0 || run.code == 1, "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        report["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("Kubernetes API not used ("),
        "{report:#}"
    );
    assert_eq!(report["coverage"]["orphaned-executor"]["status"], "not_applicable");
}

/// Case 7: `checkpoint verify` judges a file as `scan` does. `{}`, `{"foo":1}` and a pods list
/// name no CPU manager policy: every kubelet refuses them, so verify says invalid (exit 1),
/// and a scan of a node holding such a file reports `checkpoint-invalid-state`.
#[test]
fn checkpoint_verify_and_scan_agree_on_files_the_kubelet_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    spark_node("worker-3", Layout::V1Cgroupfs, Runtime::Containerd)
        .write(&root)
        .unwrap();
    let pods = std::fs::read(root.join("pods.json")).unwrap();
    let state = root.join("var/lib/kubelet/cpu_manager_state");
    for (name, content) in [
        ("{}", b"{}".to_vec()),
        ("{\"foo\":1}", b"{\"foo\":1}".to_vec()),
        ("pods.json", pods),
    ] {
        std::fs::write(&state, &content).unwrap();
        let run = nodemedic(&["checkpoint", "verify", state.to_str().unwrap()]);
        assert_eq!(run.code, 1, "{name}: {}", run.stdout);
        assert_eq!(
            run.stdout,
            format!(
                "{}: invalid: the kubelet refuses it (configured policy \"<none|static>\" differs from state \
                 checkpoint policy \"\") [checkpoint-invalid-state]\n",
                state.display()
            ),
            "{name}"
        );
        let run = nodemedic(&["checkpoint", "verify", state.to_str().unwrap(), "--format", "json"]);
        let v: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(
            (v["valid"].as_bool(), v["findings"][0]["rule"].as_str()),
            (Some(false), Some("checkpoint-invalid-state"))
        );

        let run = nodemedic(&[
            "scan",
            "--host-root",
            root.to_str().unwrap(),
            "--pods",
            root.join("pods.json").to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert_eq!(run.code, 1, "{name}: {}", run.stderr);
        let report: Value = serde_json::from_str(&run.stdout).unwrap();
        let invalid: Vec<&Value> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["rule"] == "checkpoint-invalid-state")
            .collect();
        assert_eq!(invalid.len(), 1, "{name}: {report:#}");
        assert_eq!(
            invalid[0]["evidence"]["kubelet_error"],
            "configured policy \"static\" differs from state checkpoint policy \"\"",
            "{name}"
        );
    }
}
