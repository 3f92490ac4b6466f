//! The kubelet's own view: the real `nodemedic scan` against a fixture host whose kubelet
//! socket is served by the fake PodResources server (`nodemedic_tests::podresources`), in each
//! of the ways a kubelet answers: in agreement with its file, with other CPUs in memory, with
//! other allocatable CPUs, not at all (no socket), `Unimplemented`, never, and too much. The
//! kubelet's version comes from its Node object in the API server double: the allocatable CPUs
//! of a kubelet before 1.26 (or of one whose version is unknown) are not compared.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime};
use nodemedic_tests::podresources::{Behaviour, FakeKubelet, FakePod, GET, GET_ALLOCATABLE, LIST, Scenario};
use nodemedic_tests::{Run, findings_of as findings, nodemedic};
use serde_json::Value;

/// Two NUMA nodes of 4 CPUs (0-3, 4-7), CPUs 0 and 4 reserved. exec-1 (1-2) and exec-2 (5)
/// run; exec-3's pod is gone and its entry holds 6-7.
fn node() -> Node {
    let mut exec2 = Pod::new("exec-2", 1).exclusive("5");
    // Admitted, pinned, its cgroup not made yet: liveness by cgroups alone would call it stale.
    exec2.has_cgroup = false;
    Node::new("worker-1", Layout::V1Cgroupfs, Runtime::Containerd)
        .cpus(2, 4, 1)
        .pod(Pod::new("exec-1", 2).exclusive("1-2"))
        .pod(exec2)
        .pod(Pod::new("exec-3", 2).exclusive("6-7").gone())
}

/// What the kubelet would answer for [`node`], in agreement with the file.
fn agreeing() -> Scenario {
    Scenario::default()
        .pod(FakePod::new("default", "exec-1").container("app", &[1, 2]))
        .pod(FakePod::new("default", "exec-2").container("app", &[5]))
        .allocatable(&[1, 2, 3, 5, 6, 7])
}

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Self {
        Host::of(node())
    }

    fn of(node: Node) -> Self {
        let dir = tempfile::tempdir().unwrap();
        node.write(dir.path()).unwrap();
        Host { dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("var/lib/kubelet/pod-resources/kubelet.sock")
    }

    /// `nodemedic scan` with `args` added, off the runtime's threads (the fake serves meanwhile).
    async fn scan(&self, extra: &[&str]) -> (Run, Value, Duration) {
        let root = self.dir.path().to_str().unwrap().to_string();
        let mut args: Vec<String> = ["scan", "--host-root", &root, "--format", "json", "--node", "worker-1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let started = Instant::now();
        let run = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            nodemedic(&refs)
        })
        .await
        .unwrap();
        let took = started.elapsed();
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
        assert!(run.code == 0 || run.code == 1, "exit {}: {}", run.code, run.stderr);
        let report: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
        (run, report, took)
    }

    async fn scan_with_pods(&self) -> Value {
        let pods = self.dir.path().join("pods.json");
        self.scan(&["--pods", pods.to_str().unwrap()]).await.1
    }
}

fn stale_uids(report: &Value) -> Vec<String> {
    let mut uids: Vec<String> = findings(report, "stale-cpu-assignment")
        .iter()
        .map(|f| f["evidence"]["pod_uid"].as_str().unwrap().to_string())
        .collect();
    uids.sort();
    uids
}

fn uid(name: &str) -> String {
    nodemedic_tests::hosttree::pod_uid(name)
}

async fn kubelet(host: &Host, scenario: Scenario) -> FakeKubelet {
    FakeKubelet::start(host.socket(), scenario).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agreement_is_silent_and_the_source_is_ok() {
    let host = Host::new();
    let fake = kubelet(&host, agreeing()).await;
    let report = host.scan_with_pods().await;
    assert_eq!(report["sources"]["podresources"], "ok", "{report:#}");
    assert!(findings(&report, "kubelet-state-divergence").is_empty(), "{report:#}");
    // The pod list decides liveness when there is one; the kubelet was asked once each.
    assert_eq!(report["sources"]["pods"], "file");
    assert_eq!(stale_uids(&report), [uid("exec-3")]);
    assert_eq!((fake.calls(LIST), fake.calls(GET_ALLOCATABLE)), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_pinned_elsewhere_in_memory_is_a_divergence() {
    let host = Host::new();
    let scenario = Scenario::default()
        .pod(FakePod::new("default", "exec-1").container("app", &[1, 3]))
        .pod(FakePod::new("default", "exec-2").container("app", &[5]))
        .allocatable(&[1, 2, 3, 5, 6, 7]);
    let _fake = kubelet(&host, scenario).await;
    let pods = host.dir.path().join("pods.json");
    let (run, report, _) = host.scan(&["--pods", pods.to_str().unwrap()]).await;
    nodemedic_tests::assert_golden(
        "podresources-divergence",
        &nodemedic_tests::normalize_report(&run.stdout),
    );
    let f = findings(&report, "kubelet-state-divergence");
    assert_eq!(f.len(), 1, "{report:#}");
    let e = &f[0]["evidence"];
    assert_eq!(f[0]["severity"], "critical");
    assert_eq!(e["pod_uid"], uid("exec-1").as_str());
    assert_eq!(
        (e["kubelet_cpus"].as_str(), e["checkpoint_cpus"].as_str()),
        (Some("1,3"), Some("1-2"))
    );
    assert_eq!(e["socket"], "/var/lib/kubelet/pod-resources/kubelet.sock");
    // The file's mtime and the kubelet's start, as the fixture wrote them (an hour old file).
    let modified = e["checkpoint_modified"].as_str().unwrap();
    assert!(modified.ends_with('Z') && modified.len() == 20, "{modified}");
    assert!(
        f[0]["remedy"]
            .as_str()
            .unwrap()
            .contains("is moved from CPUs 1,3 to CPUs 1-2"),
        "{}",
        f[0]["remedy"]
    );
}

/// The API server double with `host_node`'s Node object, its kubelet reporting
/// `kubelet_version`, and the pods `host_node` lists; and a kubeconfig for it in `dir`.
async fn api_with_kubelet(host_node: &Node, kubelet_version: &str, dir: &Path) -> (ApiServer, PathBuf) {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": host_node.name, "uid": "node-uid-1"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": "2026-11-21T08:00:00Z", "lastTransitionTime": "2026-11-21T08:00:00Z"}],
            "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.6.20",
                         "kernelVersion": "6.1.0-26-amd64", "kubeProxyVersion": kubelet_version,
                         "kubeletVersion": kubelet_version, "operatingSystem": "linux",
                         "osImage": "Debian GNU/Linux 12 (bookworm)"}}
    }));
    for pod in host_node.pods_json()["items"].as_array().unwrap() {
        store.create(pod.clone());
    }
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, true).unwrap();
    (api, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocatable_other_than_online_minus_reserved_is_a_divergence_from_1_26() {
    let host = Host::new();
    let _fake = kubelet(&host, agreeing().allocatable(&[2, 3, 5, 6, 7])).await;
    let (_api, kubeconfig) = api_with_kubelet(&node(), "v1.26.3", host.dir.path()).await;
    let (_, report, _) = host.scan(&["--kubeconfig", kubeconfig.to_str().unwrap()]).await;
    assert_eq!(report["sources"]["kubelet_version"], "ok", "{report:#}");
    let f = findings(&report, "kubelet-state-divergence");
    assert_eq!(f.len(), 1, "{report:#}");
    let e = &f[0]["evidence"];
    assert_eq!(e["kubelet_allocatable_cpus"], "2-3,5-7");
    assert_eq!(e["expected_cpus"], "1-3,5-7");
    assert_eq!(e["reserved_cpus"], "0,4");
    assert_eq!(e["online_cpus"], "0-7");
    assert_eq!(e["kubelet_version"], "v1.26.3");
    // From a pods file the version is unknown: not compared, and the notes say why.
    let report = host.scan_with_pods().await;
    assert_eq!(report["sources"]["kubelet_version"], "unknown", "{report:#}");
    assert!(report.get("kubelet_version").is_none(), "{report:#}");
    assert!(findings(&report, "kubelet-state-divergence").is_empty(), "{report:#}");
    assert!(
        notes_of(&report).iter().any(|n| n.starts_with(
            "kubelet-state-divergence: the kubelet's allocatable CPUs (2-3,5-7) were not compared with the online \
             CPUs minus the reserved ones: the kubelet's version is unknown"
        )),
        "{report:#}"
    );
}

fn notes_of(report: &Value) -> Vec<&str> {
    report["notes"]
        .as_array()
        .map(|n| n.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// [`node`] without its stale entry: exec-1 (1-2) and exec-2 (5) run, both Guaranteed.
fn healthy_node() -> Node {
    healthy_node_named("worker-1")
}

fn healthy_node_named(name: &str) -> Node {
    let mut exec2 = Pod::new("exec-2", 1).exclusive("5");
    exec2.has_cgroup = false;
    Node::new(name, Layout::V1Cgroupfs, Runtime::Containerd)
        .cpus(2, 4, 1)
        .pod(Pod::new("exec-1", 2).exclusive("1-2"))
        .pod(exec2)
}

/// A healthy node whose kubelet was restarted while its Guaranteed pods held their CPUs: a
/// kubelet before 1.26 then answers `GetAllocatableResources` with the CPUs unassigned at its
/// start (here none; kubernetes#112913), and, like every kubelet before 1.27, `Get` with
/// `Unimplemented`. At `kubelet_version`: the JSON report and the text report.
async fn restarted_kubelet_scan(kubelet_version: &str) -> (Value, String, usize) {
    let host = Host::of(healthy_node());
    let scenario = agreeing().allocatable(&[]).behaviour(GET, Behaviour::Unimplemented);
    let fake = kubelet(&host, scenario).await;
    let (_api, kubeconfig) = api_with_kubelet(&healthy_node(), kubelet_version, host.dir.path()).await;
    let kubeconfig = kubeconfig.to_str().unwrap().to_string();
    let (_, report, _) = host.scan(&["--kubeconfig", &kubeconfig]).await;
    let root = host.dir.path().to_str().unwrap().to_string();
    let text = tokio::task::spawn_blocking(move || {
        nodemedic(&[
            "scan",
            "--host-root",
            &root,
            "--kubeconfig",
            &kubeconfig,
            "--node",
            "worker-1",
        ])
        .stdout
    })
    .await
    .unwrap();
    (report, text, fake.calls(GET))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_23_kubelet_restarted_under_guaranteed_pods_is_no_divergence() {
    let (report, text, get_calls) = restarted_kubelet_scan("v1.23.8").await;
    assert_eq!(report["sources"]["kubelet_version"], "ok", "{report:#}");
    assert_eq!(report["sources"]["podresources"], "ok", "{report:#}");
    assert_eq!(report["kubelet_version"]["raw"], "v1.23.8");
    assert_eq!(
        (
            &report["kubelet_version"]["minor"],
            &report["kubelet_version"]["source"]
        ),
        (&Value::from(23), &Value::from("Node status"))
    );
    assert!(findings(&report, "kubelet-state-divergence").is_empty(), "{report:#}");
    let critical: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "critical")
        .collect();
    assert!(critical.is_empty(), "{critical:#?}");
    assert!(
        notes_of(&report).contains(
            &"kubelet-state-divergence: the kubelet's allocatable CPUs (none) were not compared with the online CPUs \
              minus the reserved ones: the kubelet is v1.23.8: before 1.26 GetAllocatableResources gives the CPUs that \
              were unassigned when the kubelet started, not every CPU it may hand out (kubernetes#112913)"
        ),
        "{report:#}"
    );
    assert!(
        text.contains("\n  kubelet_version ok (v1.23.8, Node status)\n"),
        "{text}"
    );
    // nodemedic never asks for Get, which a 1.23 kubelet does not serve.
    assert_eq!(get_calls, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_27_kubelet_with_the_same_answer_is_a_critical_divergence() {
    let (report, text, _) = restarted_kubelet_scan("v1.27.16").await;
    let f = findings(&report, "kubelet-state-divergence");
    assert_eq!(f.len(), 1, "{report:#}");
    assert_eq!(f[0]["severity"], "critical");
    let e = &f[0]["evidence"];
    assert_eq!(
        (e["kubelet_allocatable_cpus"].as_str(), e["expected_cpus"].as_str()),
        (Some("none"), Some("1-3,5-7"))
    );
    let summary = f[0]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(
            "The kubelet's allocatable CPUs (none) differ from the online CPUs minus the reserved ones (1-3,5-7)"
        ),
        "{summary}"
    );
    assert!(!text.contains("()") && !text.contains("CPUs ,"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_socket_is_missing_not_an_error() {
    let host = Host::new();
    let report = host.scan_with_pods().await;
    assert_eq!(report["sources"]["podresources"], "missing");
    assert!(findings(&report, "kubelet-state-divergence").is_empty());
    assert_eq!(stale_uids(&report), [uid("exec-3")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_kubelet_is_unsupported_and_a_gated_allocatable_is_skipped() {
    let host = Host::new();
    let fake = kubelet(&host, agreeing().behaviour(LIST, Behaviour::Unimplemented)).await;
    let report = host.scan_with_pods().await;
    assert_eq!(report["sources"]["podresources"], "unsupported", "{report:#}");
    // List works, GetAllocatableResources is behind its feature gate: the containers are
    // still compared, allocatable is not.
    fake.set_behaviour(LIST, Behaviour::Answer);
    fake.set_behaviour(GET_ALLOCATABLE, Behaviour::feature_gate_off(GET_ALLOCATABLE));
    fake.set_allocatable(&[7]);
    let report = host.scan_with_pods().await;
    assert_eq!(report["sources"]["podresources"], "ok");
    assert!(findings(&report, "kubelet-state-divergence").is_empty(), "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_that_never_answers_costs_one_timeout_and_the_scan_goes_on() {
    let host = Host::new();
    let _fake = kubelet(&host, agreeing().behaviour(LIST, Behaviour::Hang)).await;
    let (_, report, took) = host
        .scan(&["--pods", host.dir.path().join("pods.json").to_str().unwrap()])
        .await;
    let status = report["sources"]["podresources"].as_str().unwrap();
    assert_eq!(
        status,
        "error: /var/lib/kubelet/pod-resources/kubelet.sock: List did not answer within 2 s"
    );
    assert!(took < Duration::from_secs(10), "the scan took {took:?}");
    // Everything else is still judged.
    assert_eq!(stale_uids(&report), [uid("exec-3")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_cap_is_refused_with_its_size() {
    let host = Host::new();
    // 25,000 made-up pods: about 20 MB, over the 16 MiB accepted.
    let _fake = kubelet(&host, agreeing().behaviour(LIST, Behaviour::Huge { pods: 25_000 })).await;
    let report = host.scan_with_pods().await;
    let status = report["sources"]["podresources"].as_str().unwrap();
    assert!(
        status.starts_with(
            "error: /var/lib/kubelet/pod-resources/kubelet.sock: List answered more than the 16 MiB accepted"
        ),
        "{status}"
    );
    assert!(status.contains("the limit is: 16777216 bytes"), "{status}");
}

/// A kubeconfig for an API server that refuses connections.
fn dead_api(dir: &Path) -> PathBuf {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_api_server_down_the_kubelets_list_decides_liveness() {
    let host = Host::new();
    let _fake = kubelet(&host, agreeing()).await;
    let kubeconfig = dead_api(host.dir.path());
    // The default configuration ($KUBECONFIG) names the dead API server: the scan falls back
    // (a --kubeconfig named on the command line would stop it, exit 2).
    let root = host.dir.path().to_str().unwrap().to_string();
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new(nodemedic_tests::nodemedic_bin())
            .args(["scan", "--host-root", &root, "--format", "json", "--node", "worker-1"])
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("NODEMEDIC_KUBECONFIG")
            .env_remove("NODE_NAME")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", String::from_utf8_lossy(&run.stderr));
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["sources"]["pods"], "podresources", "{report:#}");
    // The pod list was wanted and failed: the rules that need one could not judge.
    assert_eq!(
        report["coverage"]["orphaned-executor"]["status"], "unknown",
        "{report:#}"
    );
    let note = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|n| n.as_str().filter(|n| n.starts_with("Kubernetes API not used")))
        .unwrap_or_else(|| panic!("{report:#}"));
    assert!(
        note.ends_with(": liveness from the kubelet's PodResources API"),
        "{note}"
    );
    // exec-3 is gone: stale. exec-1 runs. exec-2 has no cgroup, yet the kubelet lists it:
    // alive (by cgroups alone it would be called stale).
    assert_eq!(stale_uids(&report), [uid("exec-3")]);
    let f = findings(&report, "stale-cpu-assignment");
    assert_eq!(f[0]["evidence"]["liveness_source"], "podresources");
    assert!(
        f[0]["evidence"]["reason"]
            .as_str()
            .unwrap()
            .contains("the kubelet does not list pod"),
        "{:#}",
        f[0]
    );
    // Offline, the same.
    let (_, offline, _) = host.scan(&["--offline"]).await;
    assert_eq!(offline["sources"]["pods"], "podresources");
    assert_eq!(stale_uids(&offline), [uid("exec-3")]);
    // Without the kubelet's socket, cgroups decide, and exec-2's missing cgroup makes it stale.
    drop(_fake);
    let (_, cgroups, _) = host.scan(&["--offline"]).await;
    assert_eq!(cgroups["sources"]["pods"], "cgroups");
    let mut want = vec![uid("exec-2"), uid("exec-3")];
    want.sort();
    assert_eq!(stale_uids(&cgroups), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_rewritten_while_the_kubelet_is_asked_is_not_compared() {
    use nodemedic::collect::podresources::{ViewInputs, read_kubelet_view};
    use nodemedic_rules::snapshot::Observed;
    let host = Host::new();
    let _fake = kubelet(&host, agreeing()).await;
    let paths = nodemedic::host::HostPaths::new(host.dir.path(), None);
    let checkpoint = host.dir.path().join("var/lib/kubelet/cpu_manager_state");
    let mtime = std::fs::metadata(&checkpoint)
        .unwrap()
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let inputs = |read_at: f64| ViewInputs {
        kubelet_dir: host.dir.path().join("var/lib/kubelet"),
        checkpoint: Some((checkpoint.clone(), Some(read_at))),
        names: Default::default(),
    };
    let Observed::Ok(view) = read_kubelet_view(&paths, &inputs(mtime)).await else {
        panic!()
    };
    assert!(!view.checkpoint_changed);
    assert_eq!(view.pods.len(), 2);
    // As read, the file was a second older than it is when the kubelet answers: rewritten.
    let Observed::Ok(view) = read_kubelet_view(&paths, &inputs(mtime - 1.0)).await else {
        panic!()
    };
    // (kubelet_state_divergence's own tests: such a view is not compared.)
    assert!(view.checkpoint_changed);
}

/// The DaemonSet reaches the socket through its read-only mount of /var/lib/kubelet: a real
/// read-only bind mount (needs root, as CI runs) must still let a unix socket be connected (the
/// kernel's read-only check covers files, directories and links, not sockets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_answers_through_a_read_only_bind_mount() {
    let host = Host::new();
    let _fake = kubelet(&host, agreeing()).await;
    let mounted = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let status = std::process::Command::new("mount").args(args).status().unwrap();
        assert!(status.success(), "mount {args:?}: {status} (this test needs root)");
    };
    let (src, dst) = (host.dir.path().to_str().unwrap(), mounted.path().to_str().unwrap());
    run(&["--bind", src, dst]);
    /// Unmounts when the test ends, pass or fail.
    struct Unmount(String);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").args(["-l", &self.0]).status();
        }
    }
    let _unmount = Unmount(dst.to_string());
    run(&["-o", "remount,bind,ro", dst]);
    // Writing there is refused: the mount really is read-only.
    let write = std::fs::write(mounted.path().join("probe"), b"x");
    let root = mounted.path().to_str().unwrap().to_string();
    let pods = mounted.path().join("pods.json").to_str().unwrap().to_string();
    let report = tokio::task::spawn_blocking(move || {
        nodemedic(&[
            "scan",
            "--host-root",
            &root,
            "--pods",
            &pods,
            "--format",
            "json",
            "--node",
            "worker-1",
        ])
    })
    .await
    .unwrap();
    assert_eq!(write.map_err(|e| e.raw_os_error()), Err(Some(libc_erofs())));
    let report: Value = serde_json::from_str(&report.stdout).unwrap();
    assert_eq!(report["sources"]["podresources"], "ok", "{report:#}");
}

/// EROFS: "Read-only file system".
fn libc_erofs() -> i32 {
    nix::errno::Errno::EROFS as i32
}

/// The daemon reads its kubelet's version from its Node and judges with it: the same restarted
/// kubelet (allocatable `{}` while Guaranteed pods hold their CPUs) is no divergence at 1.23.8
/// and a critical one at 1.27.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_judges_allocatable_by_the_version_its_node_reports() {
    use nodemedic_tests::agent::{Agent, NODE, wait_for};
    const FIRING: &str = "nodemedic_rule_firing{rule=\"kubelet-state-divergence\"}";
    let run = |version: &'static str| async move {
        let host = healthy_node_named(NODE);
        let dir = tempfile::tempdir().unwrap();
        let (api, _) = api_with_kubelet(&host, version, dir.path()).await;
        let agent = Agent::start(&api, Some(&host), &[]);
        let socket = agent.host_root().join("var/lib/kubelet/pod-resources/kubelet.sock");
        let fake = FakeKubelet::start(&socket, agreeing().allocatable(&[])).await.unwrap();
        // Scans that asked the kubelet, after the version was read at start.
        wait_for(
            "scans with the kubelet's answer",
            Duration::from_secs(30),
            &agent,
            || fake.calls(GET_ALLOCATABLE) >= 5,
        )
        .await;
        (api, agent, fake)
    };
    let (_api, agent, _fake) = run("v1.27.16").await;
    wait_for("the divergence at 1.27", Duration::from_secs(30), &agent, || {
        agent.metric(FIRING) == Some(1.0)
    })
    .await;
    let (_api, agent, fake) = run("v1.23.8").await;
    let asked = fake.calls(GET_ALLOCATABLE);
    wait_for("five more scans", Duration::from_secs(30), &agent, || {
        fake.calls(GET_ALLOCATABLE) >= asked + 5
    })
    .await;
    assert_eq!(agent.metric(FIRING), Some(0.0), "{}", agent.log());
    assert!(
        !agent.log().contains("rule=kubelet-state-divergence"),
        "{}",
        agent.log()
    );
}
