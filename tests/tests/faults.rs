//! Failure injection, end to end: the real `nodemedic run` daemon against the API server
//! double with its `Faults` (erroring, watch-dropping, 410-answering), and a host whose
//! files change under the scanner (a checkpoint rewritten mid-read, processes exiting between
//! listing and reading); and `repair cpu-state --apply` on a full disk. In every case: the
//! daemon keeps running and scanning, never panics, and reports nothing that is not there.
//!
//! (API server down and back is covered by `daemon.rs`, a slow or silent one by `slow_api.rs`,
//! outages by `outage.rs` and `watch_health.rs`.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::{assert_no_panic, events_with_reason, node_object, orphan, stale_host};
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime, pod_uid};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion};
use nodemedic_tests::{copy_tree, nodemedic};
use serde_json::Value;

async fn started(api: &ApiServer, host: Option<&Node>, extra: &[&str]) -> Agent {
    let agent = Agent::start(api, host, extra);
    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_throttling_on_reads_then_recovery_without_duplicate_events() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "throttled");
    api.store().create(orphan(&app, 1, "exec-before"));
    let mut agent = started(&api, Some(&stale_host()), &[]).await;
    wait_for("the first events", Duration::from_secs(30), &agent, || {
        events_with_reason(&api, "StaleCPUAssignment").len() == 1
            && events_with_reason(&api, "OrphanedExecutor").len() == 1
    })
    .await;

    let faults = api.faults();
    faults.fail("list", "*", 500, None, None);
    faults.fail("get", "*", 429, None, Some(1));
    faults.drop_watches_now();
    let failing_at = Instant::now();
    while failing_at.elapsed() < Duration::from_secs(8) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(agent.alive(), "{}", agent.log());
        assert_eq!(
            agent.metric("nodemedic_rule_firing{rule=\"stale-cpu-assignment\"}"),
            Some(1.0)
        );
    }
    faults.fail("list", "*", 429, Some(3), Some(1));
    faults.fail("get", "*", 500, Some(3), None);
    tokio::time::sleep(Duration::from_secs(2)).await;
    faults.clear();

    api.store().create(orphan(&app, 2, "exec-after"));
    wait_for("recovery: two orphans", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_orphaned_executors") == Some(2.0)
    })
    .await;
    wait_for("the new orphan's event", Duration::from_secs(30), &agent, || {
        events_with_reason(&api, "OrphanedExecutor").len() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        events_with_reason(&api, "StaleCPUAssignment").len(),
        1,
        "no duplicate events"
    );
    // One Event per executor: the one whose finding lapsed while its driver lookups failed
    // kept its series (it came back within the series interval).
    assert_eq!(
        events_with_reason(&api, "OrphanedExecutor").len(),
        2,
        "no duplicate events"
    );
    let after: Vec<Value> = events_with_reason(&api, "OrphanedExecutor")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == format!("{}-exec-2", app.prefix))
        .collect();
    assert_eq!(after.len(), 1, "no duplicate events: {after:#?}");
    assert!(agent.alive());
    assert_no_panic(&agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_cut_every_2_seconds_still_deliver_new_pods_without_an_event_storm() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let mut agent = started(&api, Some(&stale_host()), &[]).await;
    api.faults().drop_watches_every(Some(Duration::from_secs(2)));
    let app = SparkApp::new(SparkVersion::V4_0, "etl", "cut");
    for n in 1..=3u32 {
        api.store().create(orphan(&app, n, &format!("exec-cut-{n}")));
        tokio::time::sleep(Duration::from_millis(1700)).await;
    }
    wait_for("three orphans", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_orphaned_executors") == Some(3.0)
    })
    .await;
    // A deletion during the cuts reaches the rules too.
    api.store()
        .delete("pods", Some("etl"), &format!("{}-exec-1", app.prefix));
    wait_for("two orphans", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_orphaned_executors") == Some(2.0)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(agent.alive());
    let events = api.store().list("events.events.k8s.io");
    assert!(
        events_with_reason(&api, "OrphanedExecutor").len() == 3,
        "one event per orphan: {events:#?}"
    );
    assert_eq!(events_with_reason(&api, "StaleCPUAssignment").len(), 1);
    assert!(events.len() <= 6, "event storm: {} events: {events:#?}", events.len());
    assert_no_panic(&agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_on_every_watch_relists_and_sees_new_pods() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let mut agent = started(&api, None, &[]).await;
    api.faults().gone_on_every_watch(true);
    // The open watch ends; every new one is answered 410 Gone.
    api.faults().drop_watches_now();
    let lists_before = api
        .requests()
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "pods")
        .count();
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "expired");
    api.store().create(orphan(&app, 1, "exec-gone-1"));
    wait_for(
        "the new orphan through a relist",
        Duration::from_secs(60),
        &agent,
        || agent.metric("nodemedic_orphaned_executors") == Some(1.0),
    )
    .await;
    let watch_at = std::time::SystemTime::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let requests = api.requests();
    let lists = requests
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "pods")
        .count();
    assert!(lists > lists_before, "relisted after 410 Gone");
    // Relisting is not a hot loop: kube's watcher backs off.
    let recent = requests
        .iter()
        .filter(|r| r.resource == "pods" && r.time >= watch_at)
        .count();
    assert!(recent < 200, "{recent} pod requests in 5 s: a relist storm");
    assert!(agent.alive());
    assert_eq!(events_with_reason(&api, "OrphanedExecutor").len(), 1);
    assert_no_panic(&agent);
}

/// The "new finding" lines of the log: (rule, the rest of the line).
fn new_findings(log: &str) -> Vec<(String, String)> {
    log.lines()
        .filter(|l| l.contains("new finding"))
        .map(|l| {
            let rule = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("rule="))
                .unwrap_or("?")
                .trim_matches('"')
                .to_string();
            (rule, l.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_rewritten_under_the_scanner_reports_only_what_some_version_holds() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let node_a =
        Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd).pod(Pod::new("gone-a", 2).exclusive("2,6").gone());
    let node_b =
        Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd).pod(Pod::new("gone-b", 2).exclusive("3,7").gone());
    let (uid_a, uid_b) = (pod_uid("gone-a"), pod_uid("gone-b"));
    let a = node_a.state().to_checkpoint_json().into_bytes();
    let b = node_b.state().to_checkpoint_json().into_bytes();
    let mut agent = started(&api, Some(&node_a), &["--scan-interval-seconds", "0.05"]).await;
    let cp = agent.host_root().join("var/lib/kubelet/cpu_manager_state");
    let tmp = cp.with_file_name(".cpu_manager_state.test-tmp");
    let scans_before = agent.scans();
    let writer = std::thread::spawn(move || {
        let started = Instant::now();
        let mut i = 0u64;
        while started.elapsed() < Duration::from_secs(8) {
            let content = if i % 2 == 0 { &a } else { &b };
            match i % 3 {
                // Atomic: temp file and rename.
                0 => {
                    std::fs::write(&tmp, content).unwrap();
                    std::fs::rename(&tmp, &cp).unwrap();
                }
                // In place: truncate, then two halves with a pause between.
                1 => {
                    let mut f = std::fs::File::create(&cp).unwrap();
                    let half = content.len() / 2;
                    f.write_all(&content[..half]).unwrap();
                    std::thread::sleep(Duration::from_millis(3));
                    f.write_all(&content[half..]).unwrap();
                }
                // Torn: left half-written for a while.
                _ => {
                    std::fs::write(&cp, &content[..content.len() / 2]).unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                    std::fs::write(&cp, content).unwrap();
                }
            }
            std::thread::sleep(Duration::from_millis(7));
            i += 1;
        }
        i
    });
    let mut checked = 0;
    while !writer.is_finished() {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (_, body) = agent.get("/metrics");
        for line in body.lines().filter(|l| l.starts_with("nodemedic_findings{")) {
            let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            if value > 0.0 {
                assert!(
                    line.contains("rule=\"stale-cpu-assignment\"") || line.contains("rule=\"checkpoint-unreadable\""),
                    "a finding neither checkpoint holds: {line}\n{}",
                    agent.log()
                );
            }
        }
        checked += 1;
    }
    let writes = writer.join().unwrap();
    assert!(agent.alive(), "{}", agent.log());
    assert!(
        agent.scans() > scans_before + 20,
        "scans went on while the file changed"
    );
    let findings = new_findings(&agent.log());
    let mut unreadable = 0;
    for (rule, line) in &findings {
        match rule.as_str() {
            "stale-cpu-assignment" => assert!(
                line.contains(&uid_a) || line.contains(&uid_b),
                "a stale entry neither checkpoint holds: {line}"
            ),
            "checkpoint-unreadable" => unreadable += 1,
            _ => panic!("a finding neither checkpoint holds: {line}\n(of {writes} writes, {checked} scrapes)"),
        }
    }
    assert!(
        findings.iter().any(|(_, l)| l.contains(&uid_b)),
        "the rewrites were seen: {findings:#?}"
    );
    eprintln!(
        "{writes} writes, {} new-finding lines, {unreadable} unreadable",
        findings.len()
    );
    assert_no_panic(&agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_exiting_between_listing_and_reading_never_panic() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node_object());
    let host = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .pod(Pod::new("live", 2).exclusive("2-3"))
        .pod(Pod::new("gone-job", 2).exclusive("4,6").gone());
    // Scans every 0.1 s: /healthz allows three intervals without one, 0.3 s, which a scan
    // through this churn can take when the suite loads both cores (at 0.05 s it failed so).
    let mut agent = started(&api, Some(&host), &["--scan-interval-seconds", "0.1"]).await;
    let root = agent.host_root();
    // Every cgroup.procs below kubepods.
    let mut procs_files = Vec::new();
    let mut stack = vec![root.join("sys/fs/cgroup/cpuset/kubepods")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if e.file_name() == "cgroup.procs" {
                procs_files.push(e.path());
            }
        }
    }
    assert!(procs_files.len() >= 2, "{procs_files:?}");
    let scans_before = agent.scans();
    let proc_dir = root.join("proc");
    let churn = std::thread::spawn(move || {
        let started = Instant::now();
        let mut pid = 40_000u32;
        while started.elapsed() < Duration::from_secs(6) {
            for f in &procs_files {
                let d = proc_dir.join(pid.to_string());
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(
                    d.join("status"),
                    format!("Name:\tjava\nPid:\t{pid}\nCpus_allowed_list:\t2-3\n"),
                )
                .unwrap();
                std::fs::write(d.join("cmdline"), b"java\0-jar\0x.jar\0").unwrap();
                // Listed, then gone (status first, then the directory), sometimes before the
                // listing changes back.
                std::fs::write(f, format!("{pid}\n{}\n", pid + 1)).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                let _ = std::fs::remove_file(d.join("status"));
                std::thread::sleep(Duration::from_millis(1));
                let _ = std::fs::remove_dir_all(&d);
                pid += 2;
            }
        }
    });
    while !churn.is_finished() {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(agent.alive(), "{}", agent.log());
        assert_eq!(agent.get("/healthz").0, 200);
    }
    churn.join().unwrap();
    assert!(agent.scans() > scans_before + 20, "scans went on");
    assert_eq!(
        agent.metric("nodemedic_rule_firing{rule=\"stale-cpu-assignment\"}"),
        Some(1.0)
    );
    assert_eq!(agent.get("/healthz").0, 200);
    assert_no_panic(&agent);
}

/// A tmpfs mounted on `dir`, unmounted when dropped (pass or fail).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Fills the file system of `dir` with `filler` until it is full, then frees `keep` bytes.
fn fill(dir: &Path, keep: usize) {
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0x5au8; 1024];
    loop {
        if f.write_all(&chunk).and_then(|_| f.sync_all()).is_err() {
            break;
        }
    }
    // Single bytes into the last partial page.
    while f.write_all(&[0x5a]).and_then(|_| f.flush()).is_ok() {}
    let len = f.metadata().unwrap().len();
    drop(f);
    let f = std::fs::OpenOptions::new().write(true).open(&filler).unwrap();
    f.set_len(len.saturating_sub(keep as u64)).unwrap();
}

/// A repair host: the node's files, without the kubelet process.
fn repair_host() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
        .pod(Pod::new("live", 2).exclusive("2-3"))
        .pod(Pod::new("gone-job", 2).exclusive("4,6").gone());
    node.write(dir.path()).unwrap();
    std::fs::remove_dir_all(dir.path().join("proc/1000")).unwrap();
    let before = std::fs::read(dir.path().join("var/lib/kubelet/cpu_manager_state")).unwrap();
    (dir, before)
}

fn repair(root: &Path, prefix: &[&str]) -> nodemedic_tests::Run {
    let root_s = root.to_str().unwrap();
    let pods = format!("{root_s}/pods.json");
    let args = [
        "repair",
        "cpu-state",
        "--host-root",
        root_s,
        "--node",
        NODE,
        "--pods",
        &pods,
        "--apply",
        "--yes",
    ];
    if prefix.is_empty() {
        return nodemedic(&args);
    }
    let out = Command::new(prefix[0])
        .args(&prefix[1..])
        .arg(nodemedic_tests::nodemedic_bin())
        .args(args)
        .env("KUBECONFIG", "/nonexistent/nodemedic-tests/kubeconfig")
        .env("RUST_BACKTRACE", "1")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    out.into()
}

fn assert_failed_cleanly(
    run: &nodemedic_tests::Run,
    kubelet: &Path,
    before: &[u8],
    listing_before: &[String],
    what: &str,
) {
    let all = format!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        run.code, run.stdout, run.stderr
    );
    // 3: the repair acted and an action (the backup or the write) failed.
    assert_eq!(run.code, 3, "{what}: {all}");
    assert!(
        !run.stderr.contains("panicked") && !run.stdout.contains("panicked"),
        "{what}: {all}"
    );
    assert!(
        !run.stderr.trim().is_empty() || run.stdout.to_lowercase().contains("space"),
        "{what}: a message: {all}"
    );
    assert_eq!(
        std::fs::read(kubelet.join("cpu_manager_state")).unwrap(),
        before,
        "{what}: the checkpoint is untouched"
    );
    let after = listing(kubelet);
    let extra: Vec<&String> = after
        .iter()
        .filter(|n| !listing_before.contains(n) && !n.contains("nodemedic-backup"))
        .collect();
    assert!(
        extra.is_empty(),
        "{what}: temporary files left behind: {extra:?}\n{all}"
    );
    // A backup that could not be completed is not left as if it were one.
    for n in after.iter().filter(|n| n.contains("nodemedic-backup")) {
        assert_eq!(
            std::fs::read(kubelet.join(n)).unwrap(),
            before,
            "{what}: a torn backup {n}\n{all}"
        );
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

#[test]
fn repair_on_a_full_disk_fails_cleanly_and_leaves_the_checkpoint() {
    // CI runs as root; elsewhere this fails rather than skip (a skipped test proves nothing).
    assert!(
        is_root(),
        "mounting a tmpfs needs root: run the suite as root, as CI does"
    );
    // keep 0: nothing fits (not even the backup); keep 4096: the backup fits, the new file not.
    for keep in [0usize, 4096] {
        let (dir, before) = repair_host();
        let kubelet = dir.path().join("var/lib/kubelet");
        let saved = dir.path().join("kubelet-saved");
        copy_tree(&kubelet, &saved);
        std::fs::remove_dir_all(&kubelet).unwrap();
        std::fs::create_dir_all(&kubelet).unwrap();
        let _mount = Tmpfs::mount(&kubelet, "64k").expect("mount -t tmpfs (root, as CI)");
        copy_tree(&saved, &kubelet);
        fill(&kubelet, keep);
        let listing_before = listing(&kubelet);
        let run = repair(dir.path(), &[]);
        assert_failed_cleanly(
            &run,
            &kubelet,
            &before,
            &listing_before,
            &format!("tmpfs, {keep} bytes free"),
        );
        eprintln!("full disk ({keep} free): exit {}: {}", run.code, run.stderr.trim());
    }
}
