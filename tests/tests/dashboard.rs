//! The Grafana dashboard (`daemonset/monitoring/dashboards`), against the real thing.
//!
//! - Its JSON model is well formed: unique panel ids, a layout without overlaps, a title, a
//!   description and the `${datasource}` variable on every panel, a query on every target, the
//!   `node` variable; every link into the repository resolves (the runbooks of the agent's alerts
//!   among them); every metric a query names is documented in docs/metrics.md, and every rule
//!   it names has its page under docs/rules/.
//! - Every query of every panel is evaluated by a real Prometheus (Debian's `prometheus`, as
//!   `promtool` for the alert tests) that scrapes a real `nodemedic run` agent every second,
//!   the agent running on a node with real findings (stale CPU manager entries, orphaned
//!   executors, orphaned scratch data, a pod rejected at admission) against the API server
//!   double. Every query must parse and evaluate; the panels that must show data on that node
//!   do, with the values the scenario gives.
//! - The kustomization renders the ConfigMap the Grafana sidecar picks up, holding the file.
//!
//! Like tests/tests/manifests.rs, these tests need external tools (`prometheus`, `kubectl`,
//! `kubernetes-validate`, `python3` with PyYAML; tests/run.sh installs them) and fail rather
//! than skip without them.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::cluster::orphan;
use nodemedic_tests::hosttree::{Layout, Node, Runtime, pod_uid, spark_app_id};
use nodemedic_tests::manifests::{kustomize, repo, require, validate, yaml_docs};
use nodemedic_tests::scenarios::{seed_api, spark_node};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, rejected_pod};
use serde_json::{Value, json};

const DASHBOARD: &str = "daemonset/monitoring/dashboards/nodemedic.json";
/// Where the dashboard links into the repository (the URL of daemonset/Dockerfile's labels).
const BLOB: &str = "https://github.com/nodemedic/nodemedic/blob/main/";
/// The scrape interval of the test's Prometheus.
const SCRAPE_SECONDS: u64 = 1;
/// What Grafana makes of `$__rate_interval` for a data source whose scrape interval is 1 s:
/// max($__interval + scrape interval, 4 x scrape interval), with `$__interval` about 1 s for a
/// one-minute range.
const RATE_INTERVAL: &str = "4s";
/// The time range the queries are evaluated over (range queries), and `$__range`.
const RANGE_SECONDS: u64 = 60;
/// The values the `node` variable is tried with: this node, All, and a multi-value selection
/// as Grafana writes it into a regex matcher.
const NODE_SELECTIONS: &[&str] = &[NODE, ".*", "(worker-7|worker-8)"];

// ------------------------------------------------------------------------------------ helpers

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// Every panel that is not a row (including those inside collapsed rows).
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = vec![];
    for p in d["panels"].as_array().expect("panels") {
        if p["type"] == "row" {
            out.extend(p["panels"].as_array().into_iter().flatten());
        } else {
            out.push(p);
        }
    }
    out
}

/// Every panel, rows included.
fn all_panels(d: &Value) -> Vec<&Value> {
    let mut out = vec![];
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Every string in `v`, recursively.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The metric names of a PromQL expression that start with `prefix` (outside string literals).
fn metric_names(expr: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let ident: String = chars[start..i].iter().collect();
            if ident.starts_with(prefix) {
                out.insert(ident);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The rule ids a PromQL expression names in `rule="..."` or `rule=~"a|b"` matchers.
fn rules_named(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("rule=") {
        rest = &rest[i + 5..];
        let value = rest.trim_start_matches('~');
        let Some(value) = value.strip_prefix('"') else { continue };
        let end = value.find('"').unwrap();
        out.extend(value[..end].split('|').map(str::to_string));
        rest = &value[end..];
    }
    out
}

/// Whether `name` is a documented metric (a histogram's `_bucket`, `_sum` and `_count` series
/// through the histogram).
fn is_documented(name: &str, docs: &BTreeMap<String, String>) -> bool {
    docs.contains_key(name)
        || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|base| docs.get(base).is_some_and(|t| t == "histogram"))
        })
}

/// A panel's targets: (refId, expr).
fn targets(p: &Value) -> Vec<(String, String)> {
    p["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["refId"].as_str().unwrap_or_default().to_string(),
                t["expr"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn title(p: &Value) -> &str {
    p["title"].as_str().unwrap_or_default()
}

/// `expr` as Grafana sends it: its variables substituted, `node` being `node`.
fn substitute(expr: &str, node: &str) -> String {
    let range = format!("{RANGE_SECONDS}s");
    let mut out = expr.to_string();
    for (var, value) in [
        ("__rate_interval", RATE_INTERVAL),
        ("__interval", "1s"),
        ("__range", range.as_str()),
        ("node", node),
    ] {
        out = out
            .replace(&format!("${{{var}}}"), value)
            .replace(&format!("${var}"), value);
    }
    assert!(!out.contains('$'), "a variable the test does not know in {expr}");
    out
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------- Prometheus

/// A running Prometheus with its own storage, killed when dropped (pass or fail).
struct Prometheus {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        nodemedic_tests::stop_child(&mut self.child);
    }
}

impl Prometheus {
    /// Starts `prometheus` with `config` (JSON, which is YAML) on a free local port and waits
    /// until it is ready.
    fn start(config: &Value) -> Prometheus {
        let exe = require("prometheus", "Debian's prometheus package, as promtool");
        let mut last_log = String::new();
        // A free port can be taken between finding it and Prometheus binding it: try again.
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let config_path = dir.path().join("prometheus.yml");
            std::fs::write(&config_path, serde_json::to_string_pretty(config).unwrap()).unwrap();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let addr = format!("127.0.0.1:{port}");
            let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
            let child = Command::new(&exe)
                .arg(format!("--config.file={}", config_path.display()))
                .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--web.enable-lifecycle")
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
            let mut prometheus = Prometheus { child, addr, dir };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if prometheus.get("/-/ready").0 == 200 {
                    return prometheus;
                }
                if let Ok(Some(_)) = prometheus.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            last_log = prometheus.log();
        }
        panic!("Prometheus did not become ready:\n{last_log}");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An HTTP/1.0 GET: (status, body). Status 0 when nothing answers.
    fn get(&self, path: &str) -> (u16, String) {
        nodemedic_tests::http_get(&self.addr, path, Duration::from_secs(10))
    }

    /// An API call: its `data`, or the error Prometheus gives.
    fn api(&self, path: &str) -> Result<Value, String> {
        let (code, body) = self.get(path);
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {code}, not JSON ({e}): {body}"))?;
        if v["status"] == "success" {
            Ok(v["data"].clone())
        } else {
            Err(format!("HTTP {code}: {} {}", v["errorType"], v["error"]))
        }
    }

    /// `/api/v1/query` now: the result's series or samples.
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(expr)))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// `/api/v1/query_range` over the last [`RANGE_SECONDS`], one point per scrape.
    fn query_range(&self, expr: &str) -> Result<Vec<Value>, String> {
        let end = unix_now();
        let data = self.api(&format!(
            "/api/v1/query_range?query={}&start={:.3}&end={end:.3}&step={SCRAPE_SECONDS}",
            encode(expr),
            end - RANGE_SECONDS as f64
        ))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The single value of an instant query (panics otherwise).
    fn value(&self, expr: &str) -> f64 {
        let result = self.query(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        assert_eq!(result.len(), 1, "{expr}: {result:?}");
        sample_value(&result[0]["value"])
    }
}

/// A `[time, "value"]` pair's value.
fn sample_value(pair: &Value) -> f64 {
    pair[1].as_str().unwrap().parse().unwrap()
}

/// A series' labels as `k=v,k=v` (sorted, `__name__` left out).
fn label_key(metric: &Value) -> String {
    metric
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect::<Vec<_>>()
        .join(",")
}

/// An instant query's result by series labels.
fn instant_by_labels(result: &[Value]) -> BTreeMap<String, f64> {
    result
        .iter()
        .map(|s| (label_key(&s["metric"]), sample_value(&s["value"])))
        .collect()
}

/// A range query's largest value per series.
fn range_max_by_labels(result: &[Value]) -> BTreeMap<String, f64> {
    result
        .iter()
        .map(|s| {
            let max = s["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(sample_value)
                .fold(f64::NEG_INFINITY, f64::max);
            (label_key(&s["metric"]), max)
        })
        .collect()
}

/// The scrape job of daemonset/monitoring/scrape-config.yaml for one agent. Debian's Prometheus
/// is built without Kubernetes service discovery (as its promtool, see tests/tests/manifests.rs),
/// so the pod discovery is replaced by static targets that carry the `__meta_kubernetes_pod_*`
/// labels the pod discovery would give: the file's own relabelling then keeps the agent's
/// `metrics` port (and drops a decoy target on another port) and adds `node` and `pod` exactly
/// as it does in a cluster. Only the intervals are shortened.
fn scrape_job(agent_addr: &str, pod: &str) -> Value {
    let file = yaml_docs(&read("daemonset/monitoring/scrape-config.yaml"));
    let mut job = file[0]["scrape_configs"][0].clone();
    let discovered = |port_name: &str| {
        json!({
            "__meta_kubernetes_pod_node_name": NODE,
            "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": "nodemedic",
            "__meta_kubernetes_pod_container_port_name": port_name,
        })
    };
    let obj = job.as_object_mut().unwrap();
    assert!(
        obj.remove("kubernetes_sd_configs").is_some(),
        "the scrape job discovers pods"
    );
    obj.insert("scrape_interval".into(), json!(format!("{SCRAPE_SECONDS}s")));
    obj.insert("scrape_timeout".into(), json!(format!("{SCRAPE_SECONDS}s")));
    obj.insert(
        "static_configs".into(),
        json!([
            {"targets": [agent_addr], "labels": discovered("metrics")},
            {"targets": ["127.0.0.1:9"], "labels": discovered("health")},
        ]),
    );
    job
}

// --------------------------------------------------------------------- structure of the model

#[test]
fn dashboard_model_is_well_formed() {
    let d = dashboard();
    assert_eq!(d["uid"], "nodemedic");
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "a Grafana 10/11 model");
    // The two variables: the data source, and the node as the scrape configuration labels it.
    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    let node = var("node");
    assert_eq!(node["type"], "query");
    assert_eq!(node["multi"], true);
    assert_eq!(node["includeAll"], true);
    assert_eq!(node["allValue"], ".*");
    assert_eq!(node["datasource"]["uid"], "${datasource}");
    let definition = node["definition"].as_str().unwrap();
    assert_eq!(node["query"]["query"], definition);
    let metric = definition
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(", node)"))
        .unwrap_or_else(|| panic!("the node variable is label_values(<metric>, node): {definition}"));
    assert!(
        metric.starts_with("nodemedic_") && is_documented(metric, &nodemedic_tests::exposition::documented()),
        "the node variable lists a documented nodemedic metric's nodes: {metric}"
    );

    // Panels: unique ids, laid out on the 24-column grid without overlaps.
    let all = all_panels(&d);
    let ids: Vec<u64> = all.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "panel ids repeat: {ids:?}");
    let rects: Vec<(u64, u64, u64, u64, &str)> = all
        .iter()
        .map(|p| {
            let g = &p["gridPos"];
            let n = |k: &str| g[k].as_u64().unwrap_or_else(|| panic!("{}: gridPos.{k}", title(p)));
            (n("x"), n("y"), n("w"), n("h"), title(p))
        })
        .collect();
    for (i, a) in rects.iter().enumerate() {
        assert!(a.0 + a.2 <= 24 && a.2 > 0 && a.3 > 0, "{}: {a:?}", a.4);
        for b in &rects[i + 1..] {
            let apart = a.0 + a.2 <= b.0 || b.0 + b.2 <= a.0 || a.1 + a.3 <= b.1 || b.1 + b.3 <= a.1;
            assert!(apart, "panels {} and {} overlap", a.4, b.4);
        }
    }
    let rows: Vec<&str> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "row")
        .map(title)
        .collect();
    assert_eq!(
        rows,
        [
            "Fleet",
            "CPU manager",
            "Memory, devices & DRA",
            "Spark executors & local dirs",
            "Spark local storage",
            "API server & admission",
            "Agent health"
        ]
    );

    // Every panel: title, description, the data source variable, queries.
    let docs = nodemedic_tests::exposition::documented();
    let mut titles = BTreeSet::new();
    for p in panels(&d) {
        let t = title(p);
        assert!(!t.is_empty(), "a panel without a title: {p}");
        assert!(titles.insert(t), "two panels are titled {t}");
        assert!(
            ["stat", "timeseries", "table"].contains(&p["type"].as_str().unwrap()),
            "{t}: type {}",
            p["type"]
        );
        assert!(
            p["description"].as_str().is_some_and(|s| s.len() > 40),
            "{t}: no description"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{t}");
        let ts = p["targets"].as_array().unwrap_or_else(|| panic!("{t}: no targets"));
        assert!(!ts.is_empty(), "{t}: no targets");
        let mut refs = BTreeSet::new();
        for target in ts {
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "{t}: a target without expr");
            assert!(refs.insert(target["refId"].as_str().unwrap()), "{t}: refIds repeat");
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{t}: {expr}");
            // Timeseries panels draw ranges; stats and tables show the latest value.
            let range = p["type"] == "timeseries";
            assert_eq!(target["range"], range, "{t}: {expr}");
            assert_eq!(target["instant"], !range, "{t}: {expr}");
            if p["type"] == "table" {
                assert_eq!(target["format"], "table", "{t}");
            }
            // Rates over Grafana's rate interval, so that a range holds two scrapes whatever
            // the scrape interval.
            if expr.contains("rate(") {
                assert!(expr.contains("[$__rate_interval]"), "{t}: {expr}");
            }
            // Metric names: documented (a renamed metric breaks this test).
            for prefix in ["nodemedic_", "process_"] {
                for name in metric_names(expr, prefix) {
                    assert!(is_documented(&name, &docs), "{t}: {name} is not in docs/metrics.md");
                }
            }
            for rule in rules_named(expr) {
                assert!(
                    repo().join(format!("docs/rules/{rule}.md")).is_file(),
                    "{t}: rule {rule} has no docs/rules/{rule}.md"
                );
            }
        }
    }
}

#[test]
fn dashboard_links_resolve_and_cover_the_alert_runbooks() {
    let d = dashboard();
    let mut all = vec![];
    strings(&d, &mut all);
    let mut linked = BTreeSet::new();
    for s in &all {
        let mut rest = s.as_str();
        while let Some(i) = rest.find("https://") {
            let url = &rest[i..];
            let end = url.find(|c: char| c.is_whitespace() || c == ')').unwrap_or(url.len());
            let url = &url[..end];
            rest = &rest[i + end..];
            let path = url
                .strip_prefix(BLOB)
                .unwrap_or_else(|| panic!("a link outside the repository's main branch: {url}"));
            let path = path.split('#').next().unwrap();
            if path.contains("${") {
                // Per-series links to the rule pages: checked against the rules Prometheus sees
                // in dashboard_queries_run_against_a_real_prometheus.
                assert_eq!(path.split("${").next().unwrap(), "docs/rules/", "templated link {url}");
                continue;
            }
            assert!(repo().join(path).is_file(), "link {url}: no file {path}");
            linked.insert(path.to_string());
        }
    }
    let runbooks: BTreeSet<&String> = linked
        .iter()
        .filter(|p| p.starts_with("docs/operations/runbooks/"))
        .collect();
    assert!(runbooks.len() >= 5, "{runbooks:?}");
    // Every runbook of the agent's own alerts is a click away from its panel.
    let alerts = read("daemonset/alerts/alerts.yaml");
    let named: Vec<String> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook: "))
        .map(|r| format!("docs/{}", r.trim()))
        .collect();
    assert!(named.len() >= 5, "{named:?}");
    for runbook in &named {
        assert!(
            linked.contains(runbook),
            "the dashboard does not link {runbook}, an alert's runbook"
        );
    }
}

// ------------------------------------------------------------------ against a real Prometheus

/// Why a target may have no data on the test's node; every other target must have some.
const MAY_BE_EMPTY: &[(&str, &str, &str)] = &[
    (
        "Memory: RSS against limit",
        "B",
        "the agent's own cgroup has no memory limit here: nodemedic_memory_limit_bytes is +Inf, drawn only when finite",
    ),
    (
        "Memory: RSS against limit",
        "C",
        "kube_pod_container_resource_limits comes from kube-state-metrics, which the test does not run",
    ),
    (
        "CPU against limit",
        "B",
        "the agent's own cgroup has no CPU limit here: nodemedic_cpu_limit_cores is +Inf, drawn only when finite",
    ),
    (
        "CPU against limit",
        "C",
        "kube_pod_container_resource_limits comes from kube-state-metrics, which the test does not run",
    ),
];

/// What the scenario's node gives (see `scenario`), by panel and target.
enum Want {
    /// The instant query's series (labels as `k=v,...`) and values, exactly.
    Series(&'static [(&'static str, f64)]),
    /// One sample, within [lo, hi].
    Between(f64, f64),
    /// The range query has these series among its own (others may be there: an Event written
    /// late for a finding of the start), each reaching at least this value.
    RangeAtLeast(&'static [(&'static str, f64)]),
}

const WANT: &[(&str, &str, Want)] = &[
    ("Agents up", "A", Want::Series(&[("", 1.0)])),
    ("Agents up", "B", Want::Series(&[("", 1.0)])),
    ("Nodes with critical findings", "A", Want::Series(&[("", 1.0)])),
    ("Nodes with warning findings", "A", Want::Series(&[("", 1.0)])),
    ("Admission prober", "A", Want::Series(&[("", 1.0)])),
    // One pod rejected after Prometheus began scraping; increase() extrapolates a little.
    ("Pods rejected at admission", "A", Want::Between(1.0, 2.0)),
    ("Versions running", "A", Want::Series(&[("", 1.0)])),
    (
        "Findings by rule",
        "A",
        Want::Series(&[
            ("rule=admission-rejection", 1.0),
            ("rule=cpuset-drift", 1.0),
            ("rule=exclusive-cpu-shortage", 1.0),
            ("rule=orphaned-executor", 2.0),
            ("rule=orphaned-local-dir", 1.0),
            ("rule=stale-cpu-assignment", 1.0),
            ("rule=stale-device-assignment", 1.0),
            ("rule=stale-dra-claim", 1.0),
            ("rule=stale-memory-assignment", 1.0),
        ]),
    ),
    (
        "Findings now",
        "A",
        Want::Series(&[
            ("node=worker-7,rule=admission-rejection,severity=warning", 1.0),
            ("node=worker-7,rule=cpuset-drift,severity=warning", 1.0),
            ("node=worker-7,rule=exclusive-cpu-shortage,severity=warning", 1.0),
            ("node=worker-7,rule=orphaned-executor,severity=warning", 2.0),
            ("node=worker-7,rule=orphaned-local-dir,severity=warning", 1.0),
            ("node=worker-7,rule=stale-cpu-assignment,severity=critical", 1.0),
            ("node=worker-7,rule=stale-device-assignment,severity=warning", 1.0),
            ("node=worker-7,rule=stale-dra-claim,severity=warning", 1.0),
            ("node=worker-7,rule=stale-memory-assignment,severity=warning", 1.0),
        ]),
    ),
    // The gone executor's entry holds CPUs 3,7.
    (
        "Stale exclusive CPUs by node",
        "A",
        Want::Series(&[("node=worker-7", 2.0)]),
    ),
    // 8 CPUs: driver 1,5, executors 2,6 and 3,7 (stale) exclusive; reserved 0,4 shared.
    ("Exclusive and shared CPUs", "A", Want::Series(&[("", 6.0)])),
    ("Exclusive and shared CPUs", "B", Want::Series(&[("", 2.0)])),
    ("Exclusive and shared CPUs", "C", Want::Series(&[("", 2.0)])),
    (
        "CPU manager findings",
        "A",
        Want::Series(&[
            ("node=worker-7,rule=cpuset-drift,severity=warning", 1.0),
            ("node=worker-7,rule=exclusive-cpu-shortage,severity=warning", 1.0),
            ("node=worker-7,rule=stale-cpu-assignment,severity=critical", 1.0),
        ]),
    ),
    // The gone executor's memory entry: 8 GiB on NUMA node 1 (see `with_manager_files`).
    (
        "Stale NUMA memory by node",
        "A",
        Want::Series(&[("node=worker-7", 8.0 * 1073741824.0)]),
    ),
    (
        "Devices and DRA claims by state",
        "A",
        Want::Series(&[
            ("resource=nvidia.com/gpu,state=allocated", 2.0),
            ("resource=nvidia.com/gpu,state=registered", 3.0),
            ("resource=nvidia.com/gpu,state=stale", 1.0),
        ]),
    ),
    (
        "Devices and DRA claims by state",
        "B",
        Want::Series(&[("source=kubelet,state=live", 1.0), ("source=kubelet,state=stale", 1.0)]),
    ),
    (
        "Memory, device and DRA findings",
        "A",
        Want::Series(&[
            ("node=worker-7,rule=stale-device-assignment,severity=warning", 1.0),
            ("node=worker-7,rule=stale-dra-claim,severity=warning", 1.0),
            ("node=worker-7,rule=stale-memory-assignment,severity=warning", 1.0),
        ]),
    ),
    (
        "Orphaned executors by node",
        "A",
        Want::Series(&[("node=worker-7", 2.0)]),
    ),
    (
        "Spark findings by rule",
        "A",
        Want::Series(&[
            ("rule=orphaned-executor,severity=warning", 2.0),
            ("rule=orphaned-local-dir,severity=warning", 1.0),
        ]),
    ),
    // One 4,096-byte shuffle file under /mnt/spark/blockmgr-0a1b2c3d (see `scenario`).
    (
        "Orphaned local-dir bytes by node",
        "A",
        Want::Series(&[("node=worker-7", 4096.0)]),
    ),
    (
        "Admission rejections by reason",
        "A",
        Want::RangeAtLeast(&[("reason=OutOfcpu", 1.0)]),
    ),
    (
        "Events emitted by reason",
        "A",
        Want::RangeAtLeast(&[("reason=AdmissionRejection", 1.0)]),
    ),
    ("API server reachability", "A", Want::Series(&[("", 0.0)])),
    ("API server reachability", "B", Want::Series(&[("", 0.0)])),
    (
        "API write failures",
        "A",
        Want::Series(&[
            ("kind=event", 0.0),
            ("kind=node_condition", 0.0),
            ("kind=pod_deletion", 0.0),
        ]),
    ),
    ("Oldest scan", "A", Want::Between(0.0, 10.0)),
    ("Pod watches down", "A", Want::Series(&[("", 0.0)])),
    ("Failing collectors", "A", Want::Series(&[("", 0.0)])),
    ("Rejected configurations", "A", Want::Series(&[("", 0.0)])),
    ("Task restarts", "A", Want::Series(&[("", 0.0)])),
    ("Highest memory use", "A", Want::Between(0.0, 0.8)),
    ("Agents", "C", Want::Series(&[("node=worker-7", 1.0)])),
    ("Agents", "D", Want::Series(&[("node=worker-7", 1.0)])),
    ("Agents", "E", Want::Series(&[("node=worker-7", 1.0)])),
];

/// The node the agent runs on: the Spark workload of the golden tests (a driver and an executor
/// pinned, one executor drifted, one gone with its checkpoint entry left: 2 stale CPUs), its
/// pods in the API server double, two executors whose driver does not exist, and Spark scratch
/// data under a hostPath root no pod mounts. A rejected pod comes later (see the test).
async fn scenario(api: &ApiServer) -> Agent {
    let store = api.store();
    let node = with_manager_files(spark_node(NODE, Layout::V1Cgroupfs, Runtime::Containerd));
    seed_api(&store, &node);
    let app = SparkApp::new(SparkVersion::V3_5, "etl", "lost-join");
    store.create(orphan(&app, 1, "orphan-uid-1"));
    store.create(orphan(&app, 2, "orphan-uid-2"));
    let agent = Agent::start(
        api,
        Some(&node),
        &[
            "--local-dir-root",
            "/mnt/spark",
            "--local-dir-interval-seconds",
            "1",
            "--rule-setting",
            "local_dir_min_age_seconds=0",
            // Probe rounds (and so the latency histogram) every second.
            "--probe-interval-seconds",
            "1",
            // The driver's local dir measured every second (growth is known 30 s after the
            // first measurement).
            "--local-storage-interval-seconds",
            "1",
        ],
    );
    let local_dir = driver_local_dir(&agent);
    std::fs::create_dir_all(&local_dir).unwrap();
    std::fs::write(local_dir.join("shuffle_0_0_0.data"), vec![7u8; 64 * 1024]).unwrap();
    let scratch = agent.host_root().join("mnt/spark/blockmgr-0a1b2c3d");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("shuffle_0_0_0.data"), vec![7u8; 4096]).unwrap();
    wait_for("the scenario's findings", Duration::from_secs(30), &agent, || {
        agent.metric("nodemedic_orphaned_executors") == Some(2.0)
            && agent.metric("nodemedic_rule_firing{rule=\"orphaned-local-dir\"}") == Some(1.0)
            && agent.metric("nodemedic_cpu_manager_stale_cpus") == Some(2.0)
    })
    .await;
    agent
}

/// The scenario driver's `spark-local-dir-1` emptyDir, where the kubelet keeps it, with a
/// block manager directory below it.
fn driver_local_dir(agent: &Agent) -> std::path::PathBuf {
    agent
        .host_root()
        .join("var/lib/kubelet/pods")
        .join(pod_uid("etl-driver"))
        .join("volumes/kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-5e1d")
}

/// The other managers' files of the scenario's node: the driver (live) holds 4 GiB on NUMA node
/// 0, a GPU and a claim; the gone executor's entries still hold 8 GiB on NUMA node 1, a GPU and
/// a claim.
fn with_manager_files(node: Node) -> Node {
    use nodemedic_tests::checkpoints::*;
    let (live, gone) = (node.pods[0].uid.clone(), node.pods[2].uid.clone());
    let claim = |uid: &str, pod: &str, gpu: &str| DraClaim {
        uid: uid.into(),
        namespace: "etl".into(),
        name: format!("{uid}-gpu"),
        pods: vec![pod.to_string()],
        devices: vec![("gpu.nvidia.com".into(), NODE.into(), gpu.into())],
    };
    node.file(
        "/var/lib/kubelet/memory_manager_state",
        memory_manager_state(
            2,
            64 * GIB,
            &[
                MemoryEntry::new(&live, "spark-kubernetes-driver", 0, 4 * GIB),
                MemoryEntry::new(&gone, "spark-kubernetes-executor", 1, 8 * GIB),
            ],
        ),
    )
    .file(
        "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
        device_checkpoint(
            &[
                DeviceEntry::new(&live, "spark-kubernetes-driver", "nvidia.com/gpu", &[("GPU-0", 0)]),
                DeviceEntry::new(&gone, "spark-kubernetes-executor", "nvidia.com/gpu", &[("GPU-1", 1)]),
            ],
            &[("nvidia.com/gpu", &["GPU-0", "GPU-1", "GPU-2"])],
        ),
    )
    .file(
        "/var/lib/kubelet/dra_manager_state",
        dra_manager_state(&[claim("claim-live", &live, "gpu-0"), claim("claim-gone", &gone, "gpu-1")]),
    )
}

/// Polls `check` (blocking HTTP to Prometheus) until it holds or `timeout` passes.
async fn wait_until(
    what: &str,
    timeout: Duration,
    prometheus: &Prometheus,
    agent: &Agent,
    mut check: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "timed out waiting for {what}\n--- prometheus log\n{}\n--- agent log\n{}",
        prometheus.log(),
        agent.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_queries_run_against_a_real_prometheus() {
    let started = Instant::now();
    let api = ApiServer::start().await.unwrap();
    let agent = scenario(&api).await;
    let pod = "nodemedic-7xk2p";
    let config = json!({
        "global": {"scrape_interval": format!("{SCRAPE_SECONDS}s"), "evaluation_interval": format!("{SCRAPE_SECONDS}s")},
        "scrape_configs": [scrape_job(&agent.addr, pod)],
    });
    let prometheus = Prometheus::start(&config);

    // Enough scrapes for rates over the rate interval.
    wait_until(
        "five scrapes of the agent",
        Duration::from_secs(60),
        &prometheus,
        &agent,
        || {
            prometheus
                .query(r#"min(count_over_time(up{job="nodemedic"}[1m])) >= 5 and min(up{job="nodemedic"}) == 1"#)
                .is_ok_and(|r| !r.is_empty())
        },
    )
    .await;
    // The relabelling kept the agent only, and named its node and pod.
    let up = prometheus.query(r#"up{job="nodemedic"}"#).unwrap();
    assert_eq!(up.len(), 1, "the decoy port was scraped: {up:?}");
    assert_eq!(up[0]["metric"]["node"], NODE);
    assert_eq!(up[0]["metric"]["pod"], pod);
    assert_eq!(up[0]["metric"]["instance"], agent.addr.as_str());

    // A pod the kubelet rejects, now that Prometheus has the counters at 0: the rejection and
    // its Event appear as increases.
    api.store().create(rejected_pod(
        "batch",
        "big-1",
        "rej-uid-1",
        NODE,
        "default-scheduler",
        "OutOfcpu",
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 56033, used: 34036, capacity: 90000",
    ));
    wait_until("the rejection in Prometheus", Duration::from_secs(30), &prometheus, &agent, || {
        prometheus
            .query(r#"nodemedic_admission_rejections_total{reason="OutOfcpu"} == 1 and on () nodemedic_findings{rule="admission-rejection",severity="warning"} == 1"#)
            .is_ok_and(|r| !r.is_empty())
    })
    .await;
    // The driver's local dir grows by 192 KiB; once its measurements span 30 s the agent
    // reports the growth and a forecast (against the test machine's disk, far off).
    let local_dir = driver_local_dir(&agent);
    std::fs::write(local_dir.join("shuffle_1_0_0.data"), vec![7u8; 192 * 1024]).unwrap();
    let app = spark_app_id("etl");
    let forecast = format!(r#"nodemedic_local_storage_forecast_seconds{{app="{app}"}}"#);
    wait_until(
        "the local storage forecast in Prometheus",
        Duration::from_secs(60),
        &prometheus,
        &agent,
        || {
            prometheus
                .query(&format!(
                    "{forecast} > 0 and on () nodemedic_local_storage_growth_bytes_per_second > 0"
                ))
                .is_ok_and(|r| !r.is_empty())
        },
    )
    .await;
    // Two more scrapes, so the latest values are in every rate interval.
    tokio::time::sleep(Duration::from_secs(2 * SCRAPE_SECONDS)).await;

    // The node variable's query lists the node.
    let d = dashboard();
    let node_var = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "node")
        .unwrap();
    let metric = node_var["definition"]
        .as_str()
        .unwrap()
        .strip_prefix("label_values(")
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    let values = prometheus
        .api(&format!("/api/v1/label/node/values?match[]={}", encode(metric)))
        .unwrap();
    assert_eq!(values, json!([NODE]), "label_values({metric}, node)");

    // The per-series rule links: a page for every rule Prometheus sees.
    for series in prometheus.query("group by (rule) (nodemedic_findings)").unwrap() {
        let rule = series["metric"]["rule"].as_str().unwrap();
        assert!(
            repo().join(format!("docs/rules/{rule}.md")).is_file(),
            "no page for rule {rule}"
        );
    }

    // Every target of every panel, for every kind of node selection.
    let mut failures = vec![];
    let mut evaluated = 0;
    let mut with_data = BTreeSet::new();
    for p in panels(&d) {
        let t = title(p);
        let timeseries = p["type"] == "timeseries";
        for (ref_id, expr) in targets(p) {
            for node in NODE_SELECTIONS {
                let q = substitute(&expr, node);
                evaluated += 1;
                let instant = prometheus.query(&q);
                let range = if timeseries {
                    Some(prometheus.query_range(&q))
                } else {
                    None
                };
                let has_data = match (&instant, &range) {
                    (Err(e), _) | (_, Some(Err(e))) => {
                        failures.push(format!("{t} {ref_id}: {q}: {e}"));
                        continue;
                    }
                    // A timeseries panel draws the range; a stat or table the instant.
                    (_, Some(Ok(r))) => !r.is_empty(),
                    (Ok(r), None) => !r.is_empty(),
                };
                if has_data {
                    with_data.insert((t.to_string(), ref_id.clone(), node.to_string()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "queries that failed:\n{}", failures.join("\n"));

    // Data: every target but those that need what the test does not run.
    let mut empty = vec![];
    for p in panels(&d) {
        let t = title(p);
        for (ref_id, expr) in targets(p) {
            let excused = MAY_BE_EMPTY.iter().any(|(pt, r, _)| *pt == t && *r == ref_id);
            for node in NODE_SELECTIONS {
                if !excused && !with_data.contains(&(t.to_string(), ref_id.clone(), node.to_string())) {
                    empty.push(format!("{t} {ref_id} (node {node}): {expr}"));
                }
            }
        }
    }
    assert!(empty.is_empty(), "targets without data:\n{}", empty.join("\n"));
    for (t, r, why) in MAY_BE_EMPTY {
        assert!(
            panels(&d)
                .iter()
                .any(|p| title(p) == *t && targets(p).iter().any(|(ref_id, _)| ref_id == r)),
            "MAY_BE_EMPTY names {t} {r}, which is not in the dashboard ({why})"
        );
    }

    // Values: what the scenario gives.
    let expr_of = |t: &str, r: &str| -> String {
        let p = panels(&d)
            .into_iter()
            .find(|p| title(p) == t)
            .unwrap_or_else(|| panic!("no panel {t}"));
        let (_, expr) = targets(p)
            .into_iter()
            .find(|(ref_id, _)| ref_id == r)
            .unwrap_or_else(|| panic!("{t}: no target {r}"));
        substitute(&expr, NODE)
    };
    for (t, r, want) in WANT {
        let q = expr_of(t, r);
        match want {
            Want::Series(series) => {
                let got = instant_by_labels(&prometheus.query(&q).unwrap());
                let want: BTreeMap<String, f64> = series.iter().map(|(k, v)| (k.to_string(), *v)).collect();
                assert_eq!(got, want, "{t} {r}: {q}");
            }
            Want::Between(lo, hi) => {
                let v = prometheus.value(&q);
                assert!(*lo <= v && v <= *hi, "{t} {r}: {v} not in [{lo}, {hi}]: {q}");
            }
            Want::RangeAtLeast(series) => {
                let got = range_max_by_labels(&prometheus.query_range(&q).unwrap());
                for (k, at_least) in *series {
                    let max = got
                        .get(*k)
                        .unwrap_or_else(|| panic!("{t} {r}: no series {k} in {got:?}: {q}"));
                    assert!(max >= at_least, "{t} {r}: {k} at most {max}: {q}");
                }
            }
        }
    }
    // Spark's local storage: the driver's two files (256 KiB, allocated as du counts), growing
    // over the measurements since the first; executors evicted: none, every reason shown.
    let app_series = |t: &str| instant_by_labels(&prometheus.query(&expr_of(t, "A")).unwrap());
    let bytes = app_series("Local storage by application");
    assert_eq!(
        bytes.keys().collect::<Vec<_>>(),
        [&format!("app={app},node={NODE}")],
        "{bytes:?}"
    );
    let held = bytes.values().next().copied().unwrap();
    assert!(
        (256.0 * 1024.0..=320.0 * 1024.0).contains(&held),
        "local storage bytes {held}"
    );
    let growth = app_series("Local storage growth by application")
        .values()
        .next()
        .copied();
    // 192 KiB (256 if the first measurement saw the dir before its first file) over at least 30 s
    // and at most the test's run.
    assert!(
        growth.is_some_and(|g| g > 192.0 * 1024.0 / 300.0 && g <= 256.0 * 1024.0 / 30.0 * 1.1),
        "growth {growth:?}"
    );
    let seconds = app_series("Time to an eviction limit by application")
        .values()
        .next()
        .copied();
    assert!(
        seconds.is_some_and(|s| s > 0.0 && s.is_finite()),
        "forecast {seconds:?}"
    );
    let evicted = instant_by_labels(
        &prometheus
            .query(&expr_of("Executors evicted for local storage", "A"))
            .unwrap(),
    );
    let reasons: Vec<&str> = evicted.keys().map(|k| k.trim_start_matches("reason=")).collect();
    assert_eq!(
        reasons,
        ["container_limit", "emptydir_limit", "node_pressure", "pod_limit"]
    );
    assert!(evicted.values().all(|v| *v == 0.0), "{evicted:?}");

    // The agents table names the version that runs.
    let build = prometheus.query(&expr_of("Agents", "A")).unwrap();
    assert_eq!(build.len(), 1, "{build:?}");
    assert_eq!(build[0]["metric"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(build[0]["metric"]["node"], NODE);
    // The process metrics are the agent's own.
    let rss = prometheus.value(&expr_of("Memory: RSS against limit", "A"));
    assert!(rss > 1e6 && rss < 512e6, "RSS {rss}");
    let cpu = prometheus.query_range(&expr_of("CPU against limit", "A")).unwrap();
    assert_eq!(cpu.len(), 1, "{cpu:?}");

    eprintln!(
        "{evaluated} queries of {} panels evaluated by Prometheus in {:.1} s",
        panels(&d).len(),
        started.elapsed().as_secs_f64()
    );
}

// ------------------------------------------------------------------------------- the ConfigMap

#[test]
fn kustomization_renders_the_dashboard_config_map() {
    let rendered = kustomize(&repo().join("daemonset/monitoring/dashboards"));
    validate(&rendered, "dashboards");

    let docs = yaml_docs(&rendered);
    assert_eq!(docs.len(), 1, "{rendered}");
    let cm = &docs[0];
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "nodemedic-dashboard");
    assert_eq!(cm["metadata"]["namespace"], "nodemedic");
    // The Grafana Helm chart's sidecar finds dashboards by this label (its default).
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let data = cm["data"].as_object().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["nodemedic.json"]);
    let text = read(DASHBOARD);
    assert_eq!(
        data["nodemedic.json"].as_str().unwrap(),
        text,
        "the ConfigMap holds the file as it is"
    );
    // `kubectl apply` keeps the whole object in an annotation limited to 256 KiB.
    assert!(text.len() < 200 * 1024, "the dashboard is {} bytes", text.len());
}
