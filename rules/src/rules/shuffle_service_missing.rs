//! `shuffle-service-missing`: Spark executors here expect an external shuffle service that does
//! not run on this node.
//!
//! With `spark.shuffle.service.enabled=true` (dynamic allocation without shuffle tracking) an
//! executor registers with the shuffle service of its own node, on `spark.shuffle.service.port`
//! (7337 by default), and serves its shuffle output through it. On Kubernetes that service is a
//! DaemonSet (or a sidecar with `hostNetwork`) the cluster runs itself; where it is not
//! scheduled, has crashed or listens on another port, executors fail to start ("Unable to
//! register with external shuffle server") or lose their shuffle when they are removed.
//!
//! What an executor's configuration says is read where this node can read it: the
//! `spark.properties` of its application's driver when the driver runs here (the executor gets
//! `spark.shuffle.service.enabled` from its driver), and the executor's own JVM options
//! (`SPARK_JAVA_OPT_*`, which carry `spark.*.port` settings and `spark.executor.extraJavaOptions`),
//! whose port wins as Spark's `setIfMissing` lets it. Executors whose configuration is held
//! by a driver on another node are not judged (the evidence of a finding counts them).
//!
//! Fires (critical) per application with running executors here that have it enabled, when
//! nothing listens on the port in the node's network namespace (`/proc/1/net/tcp`, `tcp6`) and
//! no running pod here publishes it (a `hostPort`, or a `hostNetwork` pod's container port).
//! The evidence names the pods that look like a shuffle service and the ports they publish.

use std::collections::BTreeMap;

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, Observed, PodInfo, PodPhase};
use crate::spark::{self, is_driver, is_executor};
use crate::text::LISTED;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("shuffle-service-missing");

/// Spark's `spark.shuffle.service.port` default.
pub const DEFAULT_PORT: u16 = 7337;
const ENABLED: &str = "spark.shuffle.service.enabled";
const PORT: &str = "spark.shuffle.service.port";

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Spark executors expect an external shuffle service this node does not run",
    severity: Severity::Critical,
    looks_at: "executor pods and their configuration, listening sockets, the node's pods",
    fires_when: "running executors have spark.shuffle.service.enabled=true while nothing listens on spark.shuffle.service.port on the node and no pod here publishes it",
    event_reason: "ShuffleServiceMissing",
    needs: Needs {
        all: &[One(Source::Pods), One(Source::Listeners), One(Source::SparkConf)],
        about: &[],
        partial: &[Source::SparkConf],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it reads the pods, Spark's configuration and the node's sockets, nothing the kubelet decides",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: None,
};

/// Where the shuffle service setting of an executor was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShuffleConf {
    pub enabled: bool,
    pub port: u16,
    /// `driver spark.properties (<driver>)` or `executor JVM options`.
    pub read_from: String,
}

/// A `-Dkey=value` among JVM options.
fn jvm_property<'a>(opts: &'a [String], key: &str) -> Option<&'a str> {
    opts.iter()
        .flat_map(|o| o.split_whitespace())
        .filter_map(|t| t.strip_prefix("-D")?.split_once('='))
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .next_back()
}

fn truthy(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("true")
}

/// The first unfinished driver of each Spark application among the pods bound here, by
/// `spark-app-selector`: built once per judgement, so that looking up each executor's driver is
/// not a pass over every pod (at 1,000 pods that pass was 45% of a scan's instructions).
pub fn drivers_by_app(snap: &NodeSnapshot) -> BTreeMap<&str, &PodInfo> {
    let mut out = BTreeMap::new();
    for p in snap.pods.bound.iter().filter(|p| is_driver(p) && !p.is_terminal()) {
        if let Some(app) = p.spark_app() {
            out.entry(app).or_insert(p);
        }
    }
    out
}

/// What `executor`'s configuration says of the shuffle service, as far as this node can read
/// it; `None` when nothing here says whether it is enabled. `drivers` is [`drivers_by_app`]'s.
pub fn shuffle_conf(
    snap: &NodeSnapshot,
    drivers: &BTreeMap<&str, &PodInfo>,
    executor: &PodInfo,
) -> Option<ShuffleConf> {
    let driver = executor.spark_app().and_then(|app| drivers.get(app).copied());
    let props = driver.and_then(|d| Some((d, snap.pods.spark_confs.get(&d.uid)?)));
    let own = &executor.spark_java_opts;
    let (enabled, read_from) = match props.and_then(|(d, c)| Some((d, c.properties.get(ENABLED)?))) {
        Some((d, v)) => (truthy(v), format!("driver {}'s spark.properties", d.display())),
        None => (
            truthy(jvm_property(own, ENABLED)?),
            "the executor's JVM options".to_string(),
        ),
    };
    let port = jvm_property(own, PORT)
        .or_else(|| props.and_then(|(_, c)| c.properties.get(PORT).map(String::as_str)))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(DEFAULT_PORT);
    Some(ShuffleConf {
        enabled,
        port,
        read_from,
    })
}

/// Running pods here that publish `port` on the node: a `hostPort`, or a `hostNetwork`
/// container's port.
fn publishers(snap: &NodeSnapshot, port: u16) -> Vec<&PodInfo> {
    snap.pods
        .bound
        .iter()
        .filter(|p| p.phase == PodPhase::Running && !is_executor(p))
        .filter(|p| {
            p.containers
                .iter()
                .flat_map(|c| &c.ports)
                .any(|cp| cp.host_port == Some(port) || (p.host_network && cp.container_port == port))
        })
        .collect()
}

/// Pods that look like a shuffle service (name or image), with the ports they publish.
fn lookalikes(snap: &NodeSnapshot) -> Vec<serde_json::Value> {
    snap.pods
        .bound
        .iter()
        .filter(|p| !is_executor(p) && !is_driver(p))
        .filter(|p| {
            let named = p.name.to_ascii_lowercase().contains("shuffle");
            let imaged = p
                .containers
                .iter()
                .any(|c| c.image.as_deref().is_some_and(|i| i.to_ascii_lowercase().contains("shuffle")));
            named || imaged
        })
        .map(|p| {
            let ports: Vec<serde_json::Value> = p
                .containers
                .iter()
                .flat_map(|c| &c.ports)
                .map(|cp| serde_json::json!({"container_port": cp.container_port, "host_port": cp.host_port}))
                .collect();
            serde_json::json!({"pod": p.display(), "phase": p.phase.as_str(), "host_network": p.host_network, "ports": ports})
        })
        .collect()
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    let Observed::Ok(listeners) = &snap.host.listeners else {
        return vec![];
    };
    let running: Vec<&PodInfo> = snap
        .pods
        .bound
        .iter()
        .filter(|p| is_executor(p) && p.phase == PodPhase::Running && !p.deleting)
        .collect();
    let drivers = drivers_by_app(snap);
    let mut unread = 0usize;
    // (namespace, app, port) -> executors and where their setting was read.
    let mut apps: BTreeMap<(&str, &str, u16), (Vec<&PodInfo>, String)> = BTreeMap::new();
    for e in &running {
        match shuffle_conf(snap, &drivers, e) {
            None => unread += 1,
            Some(c) if !c.enabled => {}
            Some(c) => {
                let entry = apps
                    .entry((e.namespace.as_str(), e.spark_app().unwrap_or(""), c.port))
                    .or_insert_with(|| (vec![], c.read_from));
                entry.0.push(e);
            }
        }
    }
    let mut findings = Vec::new();
    for ((namespace, app, port), (execs, read_from)) in apps {
        let listening = listeners.iter().any(|l| l.port == port);
        let published = publishers(snap, port);
        if listening || !published.is_empty() {
            continue;
        }
        let mut others: Vec<u16> = listeners.iter().map(|l| l.port).collect();
        others.sort_unstable();
        others.dedup();
        let looks = lookalikes(snap);
        let app_shown = if app.is_empty() { "(no spark-app-selector)" } else { app };
        findings.push(
            Finding::new(
                ID,
                Severity::Critical,
                Subject::pod(execs[0]),
                format!(
                    "{} running executor(s) of Spark application {app_shown} in {namespace} have \
                     spark.shuffle.service.enabled=true, but nothing listens on port {port} on this node and no pod here \
                     publishes it: they cannot register with the external shuffle service{}",
                    execs.len(),
                    if looks.is_empty() {
                        String::new()
                    } else {
                        format!(" ({} pod(s) here look like one, on other ports or not running)", looks.len())
                    }
                ),
                format!(
                    "run the shuffle service on this node: check that its DaemonSet's pods are scheduled here (node \
                     selectors, taints the executors tolerate and it does not), running, and listening on {port} \
                     (hostPort or hostNetwork), the port the executors use (spark.shuffle.service.port); or, without a \
                     shuffle service, turn it off for the application (spark.shuffle.service.enabled=false with \
                     spark.dynamicAllocation.shuffleTracking.enabled=true, the default since Spark 3.4)"
                ),
            )
            .with("app_id", (!app.is_empty()).then_some(app))
            .with("app_name", execs[0].label(spark::APP_NAME))
            .with("namespace", namespace)
            .with("port", port)
            .with("configuration_read_from", read_from)
            .with("executors", execs.len())
            .with(
                "executor_pods",
                execs.iter().take(LISTED).map(|e| e.name.clone()).collect::<Vec<_>>(),
            )
            .with("shuffle_service_like_pods", (!looks.is_empty()).then_some(looks))
            .with("listening_ports", others.into_iter().take(LISTED * 4).collect::<Vec<_>>())
            .with(
                "executors_not_judged",
                (unread > 0).then_some(unread),
            ),
        );
    }
    findings
}

#[cfg(test)]
mod tests;
