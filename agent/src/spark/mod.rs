//! Spark driver resolution: for each executor on this node, find its driver pod.
//!
//! In order (apache/spark `ExecutorPodsAllocator` and `KubernetesClusterSchedulerBackend`; docs/rules/orphaned-executor.md): the executor's controller owner reference (GET the driver by name and
//! compare the UID: another UID means the driver was recreated); else the labels
//! `spark-role=driver,spark-app-selector=<app>` in the executor's namespace; else the host of
//! `SPARK_DRIVER_URL` (a driver service `<prefix>-driver-svc` names the pod `<prefix>-driver`;
//! an IP is looked up as a pod IP). A driver URL that leads to no pod is `External`: a
//! client-mode driver outside the cluster, which Kubernetes cannot judge.
//!
//! Lookups go through a [`PodDirectory`]: a pods file (offline) or the API server (the
//! daemon, wrapped in [`CachedDirectory`] so that executors of one application share one
//! lookup per TTL and a burst is rate-limited). The same directory lists every driver of the
//! applications with a driver here ([`resolve_all`]: by app id, spark-operator app, and Job), and
//! reads the pod Events and nodes of `driver-blocked-by-partition` ([`partition`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use nodemedic_rules::snapshot::{DriverLookup, LookupMethod, NodeStatus, PodEvent, PodInfo, PodPhase};
use nodemedic_rules::spark;

mod directory;
pub mod network;
pub mod partition;

pub use directory::{Breaker, CachedDirectory, IndexedDirectory, ListDirectory};
use network::Cidr;
pub use partition::{PartitionInputs, PodsAt, partition_inputs};

/// Why a driver lookup has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The cache's budget of lookups for this period is spent; a later cycle tries again.
    #[error("rate limited: driver lookups over budget for this period")]
    RateLimited,
    /// The directory could not answer (the API request failed: its verb, resource and why).
    #[error("{0}")]
    Failed(String),
}

/// Where pods can be looked up.
pub trait PodDirectory {
    /// The pod `namespace/name`, if it exists.
    fn get(&self, namespace: &str, name: &str) -> impl Future<Output = Result<Option<Arc<PodInfo>>, LookupError>>;
    /// Pods in `namespace` (all namespaces when `None`) matching `label_selector`.
    fn list(
        &self,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> impl Future<Output = Result<Vec<Arc<PodInfo>>, LookupError>>;
    /// The pods of [`PodDirectory::list`] that `keep` accepts: a cache answers it without
    /// copying the pods it does not return (250 executors looking their driver up in their
    /// namespace's list of 25 drivers copy 250 pods, not 6,250).
    fn list_where(
        &self,
        namespace: Option<&str>,
        label_selector: &str,
        keep: impl Fn(&PodInfo) -> bool,
    ) -> impl Future<Output = Result<Vec<Arc<PodInfo>>, LookupError>> {
        async move {
            self.list(namespace, label_selector)
                .await
                .map(|all| all.into_iter().filter(|p| keep(p)).collect())
        }
    }
    /// Pods whose `status.podIP` is `ip`.
    fn by_ip(&self, ip: &str) -> impl Future<Output = Result<Vec<Arc<PodInfo>>, LookupError>>;
    /// The cluster's pod networks (the nodes' `spec.podCIDRs`); empty when none is known (a
    /// pods file, a network plugin that does not use them, no permission to list nodes).
    fn pod_networks(&self) -> impl Future<Output = Result<Vec<Cidr>, LookupError>>;
    /// The Warning Events about the pod with `uid` in `namespace` (core `v1`, by
    /// `involvedObject.uid`); empty where there are none to read (a pods file).
    fn pod_events(&self, namespace: &str, uid: &str) -> impl Future<Output = Result<Vec<PodEvent>, LookupError>>;
    /// The node `name` as the API server shows it; `None` when it does not exist or there are no
    /// nodes to read (a pods file).
    fn node(&self, name: &str) -> impl Future<Output = Result<Option<NodeStatus>, LookupError>>;
    /// The UID of the ResourceClaim `namespace/name`; `None` when it does not exist. Where no
    /// claims can be read (a pods file), an error that says so.
    fn resource_claim(&self, namespace: &str, name: &str) -> impl Future<Output = Result<Option<String>, LookupError>> {
        let _ = (namespace, name);
        async {
            Err(LookupError::Failed(
                "no ResourceClaims to read without the API server".into(),
            ))
        }
    }
}

/// The host of a `spark://CoarseGrainedScheduler@host:port` URL.
pub fn driver_url_host(url: &str) -> Option<&str> {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let rest = rest.strip_prefix("spark://").unwrap_or(rest);
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.0,
        None => rest.rsplit_once(':').map_or(rest, |(h, _)| h),
    };
    (!host.is_empty()).then_some(host)
}

/// Picks the driver among candidates: running before finished, then the newest.
fn best(mut drivers: Vec<Arc<PodInfo>>) -> Option<Arc<PodInfo>> {
    drivers.sort_by_key(|d| (!d.is_terminal(), d.created_at.unwrap_or(0)));
    drivers.pop()
}

/// Resolves the driver of one executor.
pub async fn resolve_driver<D: PodDirectory>(dir: &D, executor: &PodInfo) -> DriverLookup {
    let unknown = |reason: String| DriverLookup::Unknown { reason };
    if let Some(owner) = executor.controller().filter(|o| o.kind == "Pod") {
        return match dir.get(&executor.namespace, &owner.name).await {
            Err(e) => unknown(e.to_string()),
            Ok(None) => DriverLookup::Gone {
                by: LookupMethod::OwnerReference,
                expected: format!("{}/{} (uid {})", executor.namespace, owner.name, owner.uid),
            },
            Ok(Some(found)) if found.uid != owner.uid => DriverLookup::Replaced {
                expected_uid: owner.uid.clone(),
                found,
            },
            Ok(Some(found)) => DriverLookup::Found {
                by: LookupMethod::OwnerReference,
                driver: found,
            },
        };
    }
    if let Some(app) = executor.spark_app() {
        let selector = format!("spark-role=driver,spark-app-selector={app}");
        match dir.list(Some(&executor.namespace), &selector).await {
            Err(e) => return unknown(e.to_string()),
            Ok(found) => {
                if let Some(driver) = best(found) {
                    return DriverLookup::Found {
                        by: LookupMethod::Labels,
                        driver,
                    };
                }
            }
        }
    }
    let Some(url) = executor.spark_driver_url.as_deref() else {
        return DriverLookup::Gone {
            by: LookupMethod::Labels,
            expected: format!(
                "a pod labelled spark-role=driver of {}",
                executor.spark_app().unwrap_or("(no app id)")
            ),
        };
    };
    let Some(host) = driver_url_host(url) else {
        return DriverLookup::External { url: url.to_string() };
    };
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return match dir.by_ip(host).await {
            Err(e) => unknown(e.to_string()),
            Ok(found) => match best(found) {
                Some(driver) => DriverLookup::Found {
                    by: LookupMethod::DriverUrl,
                    driver,
                },
                // No pod has the IP. Inside a pod network it belonged to a pod that is gone
                // (a client-mode driver pod deleted); outside every one, the driver runs
                // outside the cluster.
                None => match dir.pod_networks().await {
                    Err(e) => unknown(format!(
                        "no pod has the driver's IP {host}, and the cluster's pod networks could not be read: {e}"
                    )),
                    Ok(networks) => match network::network_of(&networks, ip) {
                        Some(net) => DriverLookup::Gone {
                            by: LookupMethod::DriverUrl,
                            expected: format!("the pod with IP {host} (pod network {net}): no pod has that IP now"),
                        },
                        None => DriverLookup::External { url: url.to_string() },
                    },
                },
            },
        };
    }
    // `<prefix>-driver-svc[.<ns>.svc...]`: the cluster-mode driver service.
    let first = host.split('.').next().unwrap_or(host);
    let namespace = host.split('.').nth(1).unwrap_or(&executor.namespace);
    if let Some(prefix) = first.strip_suffix("-driver-svc") {
        let name = format!("{prefix}-driver");
        return match dir.get(namespace, &name).await {
            Err(e) => unknown(e.to_string()),
            Ok(Some(driver)) => DriverLookup::Found {
                by: LookupMethod::DriverUrl,
                driver,
            },
            Ok(None) => DriverLookup::Gone {
                by: LookupMethod::DriverUrl,
                expected: format!("{namespace}/{name}"),
            },
        };
    }
    DriverLookup::External { url: url.to_string() }
}

/// Resolves the drivers of every executor among `pods` (this node's), and lists every driver
/// of each application that has a driver among `pods`, under [`spark::app_drivers_key`] (with,
/// for a driver that waits to start, the drivers of the same `spark-app-name`).
pub async fn resolve_all<D: PodDirectory>(
    dir: &D,
    pods: &[PodInfo],
) -> (BTreeMap<String, DriverLookup>, BTreeMap<String, Vec<Arc<PodInfo>>>) {
    let mut drivers = BTreeMap::new();
    for executor in pods.iter().filter(|p| spark::is_executor(p)) {
        drivers.insert(executor.uid.clone(), resolve_driver(dir, executor).await);
    }
    let mut app_drivers: BTreeMap<String, Vec<Arc<PodInfo>>> = BTreeMap::new();
    for driver in pods.iter().filter(|p| spark::is_driver(p)) {
        let Some(key) = spark::app_drivers_key(driver) else {
            continue;
        };
        if app_drivers.contains_key(&key) {
            continue;
        }
        let mut found = Vec::new();
        let mut add = |more: Vec<Arc<PodInfo>>| {
            for p in more {
                if !found.iter().any(|f: &Arc<PodInfo>| f.uid == p.uid) {
                    found.push(p);
                }
            }
        };
        if let Some(app) = driver.spark_app().filter(|a| !a.is_empty()) {
            let selector = format!("spark-role=driver,spark-app-selector={app}");
            add(dir.list(Some(&driver.namespace), &selector).await.unwrap_or_default());
        }
        // spark-operator: the same SparkApplication's drivers, whatever their app id.
        if let Some(name) = driver.label(spark::OPERATOR_APP_NAME) {
            let selector = format!("spark-role=driver,{}={name}", spark::OPERATOR_APP_NAME);
            add(dir.list(Some(&driver.namespace), &selector).await.unwrap_or_default());
        }
        // A Job's drivers, whatever their labels: the Job recreates its pod from one template
        // (answered from the namespace's list of drivers).
        if let Some(job) = spark::job_uid(driver) {
            let same_job = |p: &PodInfo| spark::job_uid(p) == Some(job);
            add(dir
                .list_where(Some(&driver.namespace), "spark-role=driver", same_job)
                .await
                .unwrap_or_default());
        }
        // A driver that waits to start: the drivers submitted under its name (a resubmission
        // has a new app id), for `half-submitted-driver` to find the newer one that started.
        if driver.phase == PodPhase::Pending && !driver.deleting {
            if let Some(name) = driver.label(spark::APP_NAME).filter(|n| !n.is_empty()) {
                let selector = format!("spark-role=driver,{}={name}", spark::APP_NAME);
                add(dir.list(Some(&driver.namespace), &selector).await.unwrap_or_default());
            }
        }
        add(vec![Arc::new(driver.clone())]);
        found.sort_by(|a, b| a.uid.cmp(&b.uid));
        app_drivers.insert(key, found);
    }
    (drivers, app_drivers)
}

/// What the daemon remembers between cycles: the driver each executor was last found with.
/// A client-mode executor finds its driver only through `SPARK_DRIVER_URL`'s IP; once that
/// pod is deleted the IP leads nowhere, which alone would look like an outside driver. With
/// the memory, the driver found before is looked up by name: gone is gone. Each executor
/// shares its driver with the lookup that found it (a node's 250 executors of 25 drivers keep
/// 25 pods, not 250 copies).
#[derive(Debug, Default)]
pub struct DriverMemory {
    known: HashMap<String, Arc<PodInfo>>,
}

impl DriverMemory {
    /// Updates the memory with this cycle's `lookups` and turns `External` answers of
    /// executors whose driver was found before into what became of that driver.
    pub async fn recall<D: PodDirectory>(&mut self, dir: &D, lookups: &mut BTreeMap<String, DriverLookup>) {
        self.known.retain(|exec, _| lookups.contains_key(exec));
        for (exec, lookup) in lookups.iter_mut() {
            match lookup {
                DriverLookup::Found { driver, .. } => {
                    self.known.insert(exec.clone(), driver.clone());
                }
                DriverLookup::External { .. } => {
                    let Some(before) = self.known.get(exec) else { continue };
                    *lookup = match dir.get(&before.namespace, &before.name).await {
                        Err(e) => DriverLookup::Unknown { reason: e.to_string() },
                        Ok(None) => DriverLookup::Gone {
                            by: LookupMethod::DriverUrl,
                            expected: format!(
                                "{} (uid {}), found earlier at {}",
                                before.display(),
                                before.uid,
                                before.pod_ip.as_deref().unwrap_or("?")
                            ),
                        },
                        Ok(Some(now)) if now.uid != before.uid => DriverLookup::Replaced {
                            expected_uid: before.uid.clone(),
                            found: now,
                        },
                        Ok(Some(now)) => DriverLookup::Found {
                            by: LookupMethod::DriverUrl,
                            driver: now,
                        },
                    };
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
