//! A repair acts on exactly what `nodemedic scan` reports: for each fixture node and each pod
//! source (a pods file, the cgroups alone, the API), the entries `repair cpu-state` plans to
//! free are the `stale-cpu-assignment` findings of the scan, and the pods `repair orphans`
//! judges are its `orphaned-executor` findings. Both run as the real binary; only their JSON
//! outputs are compared.

use std::collections::BTreeSet;
use std::path::Path;

use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::hosttree::Node;
use nodemedic_tests::nodemedic;
use nodemedic_tests::scenarios::{FIXTURES, example_node, seed_api, spark_node};
use serde_json::Value;

/// A cpuset as its CPU numbers (`"3,2"` and `"2-3"` are the same set).
fn cpus(text: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => {
                out.insert(part.parse().unwrap());
            }
        }
    }
    out
}

type Entry = (String, Option<String>, BTreeSet<u32>);

/// Runs `nodemedic <command> --host-root <root> --node <node> --format json <extra>` (a scan
/// or a repair's plan), which must exit 0 (nothing found) or 1 (findings, or a plan shown),
/// and parses its report.
fn run_json(command: &[&str], root: &str, node: &str, extra: &[&str], what: &str) -> Value {
    let mut args = command.to_vec();
    args.extend_from_slice(&["--host-root", root, "--node", node, "--format", "json"]);
    args.extend_from_slice(extra);
    let run = nodemedic(&args);
    assert!(
        run.code == 0 || run.code == 1,
        "{what}: {}: {}\n{}",
        command.join(" "),
        run.stdout,
        run.stderr
    );
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}\n{}", run.stdout, run.stderr))
}

/// The stale entries a scan report names: (pod UID, container, CPUs).
fn reported_stale(report: &Value) -> BTreeSet<Entry> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "stale-cpu-assignment")
        .map(|f| {
            let e = &f["evidence"];
            (
                e["pod_uid"].as_str().unwrap().to_string(),
                e["container"].as_str().map(String::from),
                cpus(e["cpus"].as_str().unwrap()),
            )
        })
        .collect()
}

/// The entries a cpu-state plan removes: (pod UID, container, CPUs).
fn planned_removals(plan: &Value) -> BTreeSet<Entry> {
    plan["removals"]
        .as_array()
        .unwrap_or_else(|| panic!("no removals in {plan:#}"))
        .iter()
        .map(|r| {
            (
                r["pod_uid"].as_str().unwrap().to_string(),
                r["container"].as_str().map(String::from),
                cpus(r["cpus"].as_str().unwrap()),
            )
        })
        .collect()
}

/// Scans `root` and plans `repair cpu-state` with the same pod-source flags, and checks that
/// the plan frees exactly the reported stale entries. Returns how many there were.
fn cpu_state_acts_on_the_report(root: &Path, node: &str, source: &[&str], what: &str) -> usize {
    let r = root.to_str().unwrap();
    let report = run_json(&["scan"], r, node, source, what);
    let plan = run_json(&["repair", "cpu-state"], r, node, source, what);
    let reported = reported_stale(&report);
    assert_eq!(
        planned_removals(&plan),
        reported,
        "{what}: the plan and the report differ\n{plan:#}"
    );
    assert_eq!(
        plan["pod_source"], report["sources"]["pods"],
        "{what}: liveness from different sources"
    );
    reported.len()
}

fn written(node: &Node) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    node.write(dir.path()).unwrap();
    dir
}

#[test]
fn cpu_state_frees_what_scan_reports_from_a_pods_file_and_from_cgroups() {
    let mut nodes: Vec<(String, Node)> = FIXTURES
        .iter()
        .map(|(name, layout, runtime)| (name.to_string(), spark_node("worker-1", *layout, *runtime)))
        .collect();
    nodes.push(("example".into(), example_node()));
    let mut stale = 0;
    for (name, node) in &nodes {
        let dir = written(node);
        let pods = dir.path().join("pods.json");
        let p = pods.to_str().unwrap();
        stale += cpu_state_acts_on_the_report(dir.path(), &node.name, &["--pods", p], &format!("{name}, pods file"));
        stale += cpu_state_acts_on_the_report(dir.path(), &node.name, &["--offline"], &format!("{name}, cgroups"));
    }
    eprintln!(
        "{stale} stale entries in {} nodes, judged alike by scan and repair",
        nodes.len()
    );
    // Each fixture has stale entries by both sources: the comparison is not between two empty sets.
    assert!(
        stale >= 2 * nodes.len(),
        "only {stale} stale entries in {} nodes",
        nodes.len()
    );
}

/// The orphaned executors a scan report names (their pod UIDs).
fn reported_orphans(report: &Value) -> BTreeSet<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "orphaned-executor")
        .map(|f| f["subject"]["uid"].as_str().unwrap().to_string())
        .collect()
}

/// The pods an orphans plan judges: deleted and left.
fn planned_orphans(out: &Value) -> BTreeSet<String> {
    let plan = &out["plan"];
    ["delete", "kept"]
        .iter()
        .flat_map(|k| plan[*k].as_array().cloned().unwrap_or_default())
        .map(|p| p["uid"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repairs_act_on_what_scan_reports_from_the_api() {
    let mut stale = 0;
    for (name, node) in [
        ("example", example_node()),
        ("spark", spark_node("worker-1", FIXTURES[0].1, FIXTURES[0].2)),
    ] {
        let api = ApiServer::start().await.unwrap();
        seed_api(&api.store(), &node);
        // One executor's driver is gone (deleted from the API): an orphan by the API's word.
        let dir = written(&node);
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, true).unwrap();
        let orphan = node
            .pods_json()
            .get("items")
            .and_then(Value::as_array)
            .and_then(|items| {
                items
                    .iter()
                    .find(|p| {
                        p["metadata"]["labels"]["spark-role"] == "driver" && p["spec"]["nodeName"] == node.name.as_str()
                    })
                    .cloned()
            });
        if let Some(driver) = orphan {
            let ns = driver["metadata"]["namespace"].as_str().unwrap().to_string();
            let n = driver["metadata"]["name"].as_str().unwrap().to_string();
            api.store().delete("pods", Some(&ns), &n);
        }
        let (root, node_name, kc) = (
            dir.path().to_path_buf(),
            node.name.clone(),
            kubeconfig.to_str().unwrap().to_string(),
        );
        let what = format!("{name}, API");
        let (found, report, plan) = tokio::task::spawn_blocking(move || {
            let r = root.to_str().unwrap();
            let found = cpu_state_acts_on_the_report(&root, &node_name, &["--kubeconfig", &kc], &what);
            let api = ["--kubeconfig", kc.as_str()];
            let report = run_json(&["scan"], r, &node_name, &api, &what);
            let orphans = ["--kubeconfig", kc.as_str(), "--include-running"];
            let plan = run_json(&["repair", "orphans"], r, &node_name, &orphans, &what);
            (found, report, plan)
        })
        .await
        .unwrap();
        assert_eq!(report["sources"]["pods"], "api", "{name}: {report:#}");
        stale += found;
        let reported = reported_orphans(&report);
        assert!(
            !reported.is_empty(),
            "{name}: the driver was deleted, yet no orphan: {report:#}"
        );
        assert_eq!(
            planned_orphans(&plan),
            reported,
            "{name}: the orphans plan and the report differ\n{plan:#}"
        );
        eprintln!(
            "{name}: {} orphans, {found} stale entries, judged alike by scan and repair",
            reported.len()
        );
    }
    assert!(stale >= 2, "only {stale} stale entries");
}

/// Client mode, the case the daemon found and the one-shot commands did not: executors with no
/// owner reference whose driver URL names a pod IP that no pod has any more. Inside a node's
/// pod CIDR that IP belonged to a driver pod that is gone: `scan` reports the executors as
/// orphans and `repair orphans --include-running` plans exactly them, both with the request
/// counts a demanding user expects (one LIST of nodes, one lookup per driver IP). An IP
/// outside every pod CIDR is still a driver outside the cluster: no orphan, only the info.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_mode_orphans_are_found_by_scan_and_planned_by_repair() {
    use nodemedic_tests::sparkpods::{SparkApp, SparkVersion};
    use serde_json::json;

    const NODE: &str = "worker-1";
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    for (name, cidr) in [(NODE, "10.244.1.0/24"), ("worker-2", "10.244.2.0/24")] {
        store.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]}}));
    }
    // The driver of `gone` ran on this node at 10.244.1.31 and was deleted; the driver of
    // `notebook` runs on a laptop at 192.0.2.10.
    let gone = SparkApp::new(SparkVersion::V3_5, "analytics", "adhoc-join");
    let notebook = SparkApp::new(SparkVersion::V3_5, "analytics", "notebook-query");
    let mut orphans = BTreeSet::new();
    for n in 1..=3 {
        let uid = format!("gone-exec-uid-{n}");
        store.create(gone.executor(n, &uid, NODE, None, "10.244.1.31"));
        orphans.insert(uid);
    }
    store.create(notebook.executor(1, "notebook-exec-uid-1", NODE, None, "192.0.2.10"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, true).unwrap();
    let root = dir.path().join("host");
    // A node with nothing on its host but /proc (a scan refuses a root with none of a node's
    // parts): its pods all come from the API.
    std::fs::create_dir_all(root.join("proc")).unwrap();
    let (report, plan) = tokio::task::spawn_blocking(move || {
        let (r, kc) = (root.to_str().unwrap(), kubeconfig.to_str().unwrap());
        let report = run_json(&["scan"], r, NODE, &["--kubeconfig", kc], "client mode");
        let plan = run_json(
            &["repair", "orphans"],
            r,
            NODE,
            &["--kubeconfig", kc, "--include-running"],
            "client mode",
        );
        (report, plan)
    })
    .await
    .unwrap();
    assert_eq!(reported_orphans(&report), orphans, "{report:#}");
    let orphan = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "orphaned-executor")
        .unwrap();
    assert_eq!(orphan["severity"], "warning", "{orphan:#}");
    assert!(
        orphan.to_string().contains("10.244.1.0/24"),
        "the evidence names the pod network: {orphan:#}"
    );
    // The notebook's executor keeps its info: its driver is outside the cluster.
    let outside: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "executor-without-owner" && f.to_string().contains("192.0.2.10"))
        .collect();
    assert_eq!(outside.len(), 1, "{report:#}");
    assert_eq!(outside[0]["severity"], "info");
    assert_eq!(planned_orphans(&plan), orphans, "{plan:#}");
    // One LIST of nodes per command, and one lookup per driver IP, not one per executor.
    let requests = api.requests();
    let count = |pred: &dyn Fn(&str, &str) -> bool| requests.iter().filter(|r| pred(&r.path, &r.query)).count();
    assert_eq!(count(&|p, _| p == "/api/v1/nodes"), 2, "{requests:#?}");
    assert_eq!(
        count(&|p, q| p == "/api/v1/pods" && q.contains("10.244.1.31")),
        2,
        "{requests:#?}"
    );
}
