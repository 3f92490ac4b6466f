//! `repair orphans`, `repair failed-pods` and the daemon's automatic repair against the API
//! server double: deletions carry the pod's UID as a precondition, a pod recreated under the
//! same name survives, dry runs delete nothing, running orphans need --include-running, and
//! the automatic repair's rate limit holds.
//!
//! The repairs run in this process through the library (`nodemedic::repair::pods`); the
//! commands make their own current-thread runtime, so they run on a blocking thread while the
//! double serves from the test's runtime.

use std::path::PathBuf;
use std::time::Duration;

use nodemedic::cli::args::{
    ApplyArgs, FailedPodsArgs, Format, FormatArg, KubeArgs, OrphansArgs, PodRepairArgs, RepairAction as Command,
};
use nodemedic::repair::audit::{ActionResult, Audit, RepairAction};
use nodemedic::repair::auto::{AutoRepairPolicy, AutoRepairState, auto_repair};
use nodemedic::repair::pods::{self, api_snapshot, apply_pod_plan, plan_orphans};
use nodemedic_rules::Settings;
use nodemedic_tests::apiserver::{ApiServer, RequestRecord};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, bound_pod, finish, rejected_pod};
use serde_json::{Value, json};

const NODE: &str = "worker-7";
const NS: &str = "spark-jobs";

struct Fixture {
    api: ApiServer,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    app: SparkApp,
}

async fn fixture() -> Fixture {
    let api = ApiServer::start().await.unwrap();
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, true).unwrap();
    Fixture {
        api,
        kubeconfig,
        _dir: dir,
        app: SparkApp::new(SparkVersion::V3_5, NS, "etl"),
    }
}

impl Fixture {
    fn driver_name(&self) -> String {
        format!("{}-driver", self.app.prefix)
    }

    /// An executor of the fixture's application whose driver (owner reference) does not exist:
    /// an orphan. Finished (`Failed`, keeping its emptyDir local dir) unless `running`.
    fn orphan(&self, n: u32, uid: &str, running: bool) -> Value {
        let driver = self.driver_name();
        let mut pod = self
            .app
            .executor(n, uid, NODE, Some((&driver, "driver-uid-gone")), "10.42.0.9");
        if !running {
            finish(&mut pod, "Failed", 1, 900);
        }
        self.api.store().create(pod.clone());
        pod
    }

    fn exec_name(&self, n: u32) -> String {
        format!("{}-exec-{n}", self.app.prefix)
    }

    fn pod_uid(&self, name: &str) -> Option<String> {
        self.api
            .store()
            .get("pods", Some(NS), name)
            .and_then(|p| p["metadata"]["uid"].as_str().map(String::from))
    }

    fn common_args(&self, apply: bool, yes: bool) -> PodRepairArgs {
        PodRepairArgs {
            node: Some(NODE.into()),
            kube: KubeArgs {
                kubeconfig: Some(self.kubeconfig.clone()),
            },
            host_root: None,
            kubelet_dir: None,
            config: None,
            rule_setting: vec![],
            apply: ApplyArgs {
                apply,
                yes,
                expect_plan: None,
            },
            format: FormatArg { format: Format::Text },
        }
    }

    fn orphans_args(&self) -> OrphansArgs {
        OrphansArgs {
            common: self.common_args(false, false),
            older_than_seconds: None,
            include_running: false,
        }
    }

    fn deletes(&self) -> Vec<RequestRecord> {
        self.api
            .requests()
            .into_iter()
            .filter(|r| r.method == "DELETE")
            .collect()
    }

    async fn client(&self) -> kube::Client {
        self.connection().await.client
    }

    async fn connection(&self) -> nodemedic::kube_api::Connection {
        nodemedic::kube_api::Connection::load(Some(&self.kubeconfig), Duration::from_secs(10))
            .await
            .unwrap()
    }
}

async fn run_command(command: Command) -> (Result<u8, String>, String) {
    nodemedic_tests::repairs::run_pod_repair(command).await
}

async fn run_orphans(args: OrphansArgs) -> (Result<u8, String>, String) {
    run_command(Command::Orphans(args)).await
}

async fn run_failed_pods(args: FailedPodsArgs) -> (Result<u8, String>, String) {
    run_command(Command::FailedPods(args)).await
}

fn precondition_uid(r: &RequestRecord) -> Option<String> {
    r.body_json()?["preconditions"]["uid"].as_str().map(String::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_prints_the_plan_and_deletes_nothing() {
    let f = fixture().await;
    f.orphan(1, "exec-uid-1", false);
    f.orphan(2, "exec-uid-2", true);
    let (code, out) = run_orphans(f.orphans_args()).await;
    assert_eq!(code, Ok(1), "a plan, not applied:\n{out}");
    assert!(
        out.contains(&format!("delete pod {NS}/{} (uid exec-uid-1, Failed)", f.exec_name(1))),
        "{out}"
    );
    assert!(out.contains("why: no driver pod exists"), "{out}");
    assert!(out.contains("evidence: "), "{out}");
    assert!(
        out.contains("--include-running"),
        "the running orphan is named as left:\n{out}"
    );
    assert!(out.contains("dry run: nothing changed"), "{out}");
    // --apply without --yes and no answer: not confirmed, nothing deleted.
    let mut args = f.orphans_args();
    args.common.apply.apply = true;
    let (code, out) = run_orphans(args).await;
    assert_eq!(code, Ok(1), "{out}");
    assert!(out.contains("not confirmed: nothing changed"), "{out}");
    assert!(f.deletes().is_empty(), "{:?}", f.deletes());
    assert!(f.pod_uid(&f.exec_name(1)).is_some());
    assert!(f.pod_uid(&f.exec_name(2)).is_some());
    // Nothing to do: exit 0.
    let g = fixture().await;
    let (code, out) = run_orphans(g.orphans_args()).await;
    assert_eq!(code, Ok(0), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_deletes_with_the_uid_precondition_and_keeps_running_orphans() {
    let f = fixture().await;
    f.orphan(1, "exec-uid-1", false);
    f.orphan(2, "exec-uid-2", true);
    // A healthy executor of another application whose driver runs elsewhere.
    let other = SparkApp::new(SparkVersion::V3_5, NS, "report");
    f.api
        .store()
        .create(other.driver("report-driver-uid", "worker-2", "10.42.3.3"));
    let healthy_driver = format!("{}-driver", other.prefix);
    f.api.store().create(other.executor(
        1,
        "report-exec-uid",
        NODE,
        Some((&healthy_driver, "report-driver-uid")),
        "10.42.3.3",
    ));

    let mut args = f.orphans_args();
    args.common.apply.apply = true;
    args.common.apply.yes = true;
    let (code, out) = run_orphans(args).await;
    assert_eq!(code, Ok(0), "{out}");
    assert!(
        out.contains(&format!("applied: delete pod {NS}/{} (uid exec-uid-1)", f.exec_name(1))),
        "{out}"
    );
    assert!(f.pod_uid(&f.exec_name(1)).is_none(), "the finished orphan is deleted");
    assert_eq!(
        f.pod_uid(&f.exec_name(2)).as_deref(),
        Some("exec-uid-2"),
        "running: kept"
    );
    assert!(
        f.pod_uid(&format!("{}-exec-1", other.prefix)).is_some(),
        "healthy: kept"
    );
    let deletes = f.deletes();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0].name.as_deref(), Some(f.exec_name(1).as_str()));
    assert_eq!(
        precondition_uid(&deletes[0]).as_deref(),
        Some("exec-uid-1"),
        "{}",
        deletes[0].body
    );
    // The action is an Event on the pod.
    let events: Vec<Value> = f
        .api
        .store()
        .list("events.events.k8s.io")
        .into_iter()
        .filter(|e| e["reason"] == "OrphanedExecutorDeleted")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["regarding"]["name"], f.exec_name(1));
    assert_eq!(events[0]["regarding"]["uid"], "exec-uid-1");
    assert_eq!(events[0]["reportingController"], "nodemedic.io/agent");
    assert!(
        events[0]["note"]
            .as_str()
            .unwrap_or("")
            .contains("no driver pod exists")
    );

    // With --include-running the running orphan goes too, also by UID.
    let mut args = f.orphans_args();
    args.common.apply.apply = true;
    args.common.apply.yes = true;
    args.include_running = true;
    args.common.format.format = Format::Json;
    let (code, out) = run_orphans(args).await;
    assert_eq!(code, Ok(0), "{out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["repair"], "orphans");
    assert_eq!(report["dry_run"], false);
    assert_eq!(report["actions"][0]["result"], "applied");
    assert_eq!(report["actions"][0]["target"]["uid"], "exec-uid-2");
    assert_eq!(report["actions"][0]["evidence"]["driver_state"], "gone");
    assert!(f.pod_uid(&f.exec_name(2)).is_none());
    let deletes = f.deletes();
    assert_eq!(deletes.len(), 2);
    assert_eq!(precondition_uid(&deletes[1]).as_deref(), Some("exec-uid-2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_recreated_under_the_same_name_is_never_touched() {
    let f = fixture().await;
    f.orphan(1, "exec-uid-old", false);
    f.orphan(2, "exec-uid-2", false);
    let client = f.client().await;
    let snapshot = api_snapshot(&f.connection().await, NODE, None, &[]).await.unwrap();
    let plan = plan_orphans(&snapshot, &Settings::default(), false);
    assert_eq!(plan.delete.len(), 2, "{plan:?}");

    // Between plan and apply, exec-1 is deleted and created again under its name.
    f.api.store().delete("pods", Some(NS), &f.exec_name(1));
    f.orphan(1, "exec-uid-new", false);

    let audit = Audit::new(Some(client.clone()), NODE, "test");
    let records = apply_pod_plan(&client, &plan, &audit, None).await;
    assert_eq!(records.len(), 2);
    let old = records
        .iter()
        .find(|r| r.target.uid.as_deref() == Some("exec-uid-old"))
        .unwrap();
    assert_eq!(old.result, ActionResult::Skipped, "{old:?}");
    assert!(
        old.detail.as_deref().unwrap_or("").contains("UID precondition failed"),
        "{old:?}"
    );
    assert_eq!(old.event_recorded, None, "no Event for what was not done");
    let two = records
        .iter()
        .find(|r| r.target.uid.as_deref() == Some("exec-uid-2"))
        .unwrap();
    assert_eq!(two.result, ActionResult::Applied);
    assert_eq!(two.event_recorded, Some(true));

    assert_eq!(
        f.pod_uid(&f.exec_name(1)).as_deref(),
        Some("exec-uid-new"),
        "the new pod survives"
    );
    assert!(f.pod_uid(&f.exec_name(2)).is_none());
    let conflict = f
        .deletes()
        .into_iter()
        .find(|r| r.name.as_deref() == Some(f.exec_name(1).as_str()))
        .unwrap();
    assert_eq!(conflict.status, 409);
    assert_eq!(precondition_uid(&conflict).as_deref(), Some("exec-uid-old"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_rechecks_before_deleting() {
    // A recreated pod is left by the re-check without even a DELETE; the plan's other pod goes.
    let f = fixture().await;
    f.orphan(1, "exec-uid-1", false);
    let client = f.client().await;
    let snapshot = api_snapshot(&f.connection().await, NODE, None, &[]).await.unwrap();
    let plan = plan_orphans(&snapshot, &Settings::default(), false);
    f.api.store().delete("pods", Some(NS), &f.exec_name(1));
    f.orphan(1, "exec-uid-1b", false);
    let fresh = pods::refresh_snapshot(&client, &snapshot, &plan.lookups())
        .await
        .unwrap();
    let (confirmed, skipped) = pods::recheck(&plan, &plan_orphans(&fresh, &Settings::default(), false));
    assert!(confirmed.delete.is_empty());
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].result, ActionResult::Skipped);
    assert!(f.deletes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_pods_older_than_the_threshold_are_deleted() {
    let f = fixture().await;
    let msg = "Pod was rejected: Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000";
    // Created 30 s ago (the builder's time).
    f.api.store().create(rejected_pod(
        NS,
        "batch-a",
        "rej-uid-a",
        NODE,
        "volcano",
        "OutOfcpu",
        msg,
    ));
    f.api
        .store()
        .create(bound_pod(NS, "web-1", "web-uid-1", NODE, "default-scheduler"));
    let args = |older: i64, apply: bool| FailedPodsArgs {
        common: f.common_args(apply, true),
        older_than_seconds: older,
    };
    // Younger than the default threshold: left.
    let (code, out) = run_failed_pods(args(pods::DEFAULT_FAILED_POD_MIN_AGE_SECONDS, true)).await;
    assert_eq!(code, Ok(0), "{out}");
    assert!(out.contains("0 pod(s) to delete"), "{out}");
    assert!(out.contains("rejected pods are deleted once older than 600 s"), "{out}");
    assert!(f.deletes().is_empty());
    // Dry run with a low threshold: planned, not deleted.
    let (code, out) = run_failed_pods(args(10, false)).await;
    assert_eq!(code, Ok(1), "{out}");
    assert!(out.contains("with reason OutOfcpu"), "{out}");
    assert!(out.contains("requested=56033"), "{out}");
    assert!(f.deletes().is_empty());
    // Applied.
    let (code, out) = run_failed_pods(args(10, true)).await;
    assert_eq!(code, Ok(0), "{out}");
    assert!(f.pod_uid("batch-a").is_none());
    assert!(f.pod_uid("web-1").is_some(), "a running pod is never a candidate");
    let deletes = f.deletes();
    assert_eq!(deletes.len(), 1);
    assert_eq!(precondition_uid(&deletes[0]).as_deref(), Some("rej-uid-a"));
    assert!(
        f.api
            .store()
            .list("events.events.k8s.io")
            .iter()
            .any(|e| e["reason"] == "RejectedPodDeleted" && e["regarding"]["name"] == "batch-a")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_repair_is_off_by_default_and_rate_limited() {
    let f = fixture().await;
    for n in 1..=5 {
        f.orphan(n, &format!("exec-uid-{n}"), false);
    }
    let client = f.client().await;
    let audit = Audit::new(Some(client.clone()), NODE, "test");
    let settings = Settings::default();
    let snapshot = api_snapshot(&f.connection().await, NODE, None, &[]).await.unwrap();

    // Off by default.
    let mut state = AutoRepairState::new(2);
    let none = auto_repair(
        &client,
        &audit,
        &snapshot,
        &settings,
        &AutoRepairPolicy::default(),
        &mut state,
        None,
    )
    .await;
    assert!(none.is_empty());
    assert!(f.deletes().is_empty());

    let policy = AutoRepairPolicy {
        orphans: true,
        max_actions_per_hour: 2,
        ..Default::default()
    };
    let first = auto_repair(&client, &audit, &snapshot, &settings, &policy, &mut state, None).await;
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(
        first
            .iter()
            .all(|r| r.result == ActionResult::Applied && r.action == RepairAction::Orphans)
    );
    assert_eq!(first[0].metric_labels(), ["orphans", "applied"]);
    let left = f.api.store().list("pods").len();
    assert_eq!(left, 3, "5 candidates, 2 deleted");

    // The next cycle, within the hour: nothing.
    let snapshot = api_snapshot(&f.connection().await, NODE, None, &[]).await.unwrap();
    assert_eq!(plan_orphans(&snapshot, &settings, false).delete.len(), 3);
    let second = auto_repair(&client, &audit, &snapshot, &settings, &policy, &mut state, None).await;
    assert!(second.is_empty(), "{second:?}");
    assert_eq!(f.api.store().list("pods").len(), 3);
    assert_eq!(f.deletes().len(), 2);
    assert!(f.deletes().iter().all(|r| precondition_uid(r).is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_local_dir_repair_shares_the_rate_limit() {
    use nodemedic::host::HostPaths;
    use nodemedic::repair::auto::LocalDirTarget;
    let f = fixture().await;
    // Running: with the host read, a finished orphan counts only when its emptyDir holds data.
    f.orphan(1, "exec-uid-1", true);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    for n in 1..=3 {
        let scratch = root.join(format!("mnt/spark/blockmgr-{n}"));
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(scratch.join("shuffle.data"), vec![0u8; 100 * n]).unwrap();
    }
    // The live-process check sees this process only.
    std::fs::create_dir_all(root.join("proc")).unwrap();
    let me = std::process::id();
    std::os::unix::fs::symlink(format!("/proc/{me}"), root.join(format!("proc/{me}"))).unwrap();
    let host = HostPaths::new(&root, None);
    let roots = vec!["/mnt/spark".to_string()];
    let client = f.client().await;
    let audit = Audit::new(Some(client.clone()), NODE, "test");
    let settings = Settings {
        local_dir_min_age_seconds: 0,
        ..Default::default()
    };
    let snapshot = api_snapshot(&f.connection().await, NODE, Some(&host), &roots)
        .await
        .unwrap();
    let policy = AutoRepairPolicy {
        orphans: true,
        include_running_orphans: true,
        local_dirs: true,
        max_actions_per_hour: 2,
        ..Default::default()
    };
    let mut state = AutoRepairState::new(2);
    let target = LocalDirTarget {
        host: &host,
        roots: &roots,
    };
    let records = auto_repair(&client, &audit, &snapshot, &settings, &policy, &mut state, Some(target)).await;
    let kinds: Vec<(&str, &str)> = records.iter().map(|r| (r.action.as_str(), r.result.as_str())).collect();
    assert_eq!(
        kinds,
        [("orphans", "applied"), ("local-dirs", "applied")],
        "{records:?}"
    );
    assert_eq!(records[1].bytes_freed, Some(100));
    assert_eq!(records[1].event_recorded, Some(true));
    assert!(!root.join("mnt/spark/blockmgr-1").exists());
    assert!(root.join("mnt/spark/blockmgr-2").exists());
    assert!(
        f.api
            .store()
            .list("events.events.k8s.io")
            .iter()
            .any(|e| e["reason"] == "OrphanedLocalDirRemoved" && e["regarding"]["kind"] == "Node")
    );
    let again = auto_repair(&client, &audit, &snapshot, &settings, &policy, &mut state, Some(target)).await;
    assert!(again.is_empty(), "{again:?}");
    assert!(root.join("mnt/spark/blockmgr-3").exists());
}
