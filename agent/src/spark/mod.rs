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

use nodemedic_rules::snapshot::{DriverLookup, LookupMethod, NodeStatus, PodEvent, PodInfo};
use nodemedic_rules::spark;

mod directory;
pub mod network;
pub mod partition;

pub use directory::{Breaker, CachedDirectory, IndexedDirectory, ListDirectory};
use network::Cidr;
pub use partition::{PartitionInputs, partition_inputs};

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
    fn get(&self, namespace: &str, name: &str) -> impl Future<Output = Result<Option<PodInfo>, LookupError>>;
    /// Pods in `namespace` (all namespaces when `None`) matching `label_selector`.
    fn list(
        &self,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> impl Future<Output = Result<Vec<PodInfo>, LookupError>>;
    /// The pods of [`PodDirectory::list`] that `keep` accepts: a cache answers it without
    /// copying the pods it does not return (250 executors looking their driver up in their
    /// namespace's list of 25 drivers copy 250 pods, not 6,250).
    fn list_where(
        &self,
        namespace: Option<&str>,
        label_selector: &str,
        keep: impl Fn(&PodInfo) -> bool,
    ) -> impl Future<Output = Result<Vec<PodInfo>, LookupError>> {
        async move {
            self.list(namespace, label_selector)
                .await
                .map(|all| all.into_iter().filter(|p| keep(p)).collect())
        }
    }
    /// Pods whose `status.podIP` is `ip`.
    fn by_ip(&self, ip: &str) -> impl Future<Output = Result<Vec<PodInfo>, LookupError>>;
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
fn best(mut drivers: Vec<PodInfo>) -> Option<PodInfo> {
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
                found: Box::new(found),
            },
            Ok(Some(found)) => DriverLookup::Found {
                by: LookupMethod::OwnerReference,
                driver: Box::new(found),
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
                        driver: Box::new(driver),
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
                    driver: Box::new(driver),
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
                driver: Box::new(driver),
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
) -> (BTreeMap<String, DriverLookup>, BTreeMap<String, Vec<PodInfo>>) {
    let mut drivers = BTreeMap::new();
    for executor in pods.iter().filter(|p| p.spark_role() == Some("executor")) {
        drivers.insert(executor.uid.clone(), resolve_driver(dir, executor).await);
    }
    let mut app_drivers: BTreeMap<String, Vec<PodInfo>> = BTreeMap::new();
    for driver in pods.iter().filter(|p| p.spark_role() == Some("driver")) {
        let Some(key) = spark::app_drivers_key(driver) else {
            continue;
        };
        if app_drivers.contains_key(&key) {
            continue;
        }
        let mut found = Vec::new();
        let mut add = |more: Vec<PodInfo>| {
            for p in more {
                if !found.iter().any(|f: &PodInfo| f.uid == p.uid) {
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
        if driver.phase == "Pending" && !driver.deleting {
            if let Some(name) = driver.label(spark::APP_NAME).filter(|n| !n.is_empty()) {
                let selector = format!("spark-role=driver,{}={name}", spark::APP_NAME);
                add(dir.list(Some(&driver.namespace), &selector).await.unwrap_or_default());
            }
        }
        add(vec![driver.clone()]);
        found.sort_by(|a, b| a.uid.cmp(&b.uid));
        app_drivers.insert(key, found);
    }
    (drivers, app_drivers)
}

/// What the daemon remembers between cycles: the driver each executor was last found with.
/// A client-mode executor finds its driver only through `SPARK_DRIVER_URL`'s IP; once that
/// pod is deleted the IP leads nowhere, which alone would look like an outside driver. With
/// the memory, the driver found before is looked up by name: gone is gone.
#[derive(Debug, Default)]
pub struct DriverMemory {
    known: HashMap<String, PodInfo>,
}

impl DriverMemory {
    /// Updates the memory with this cycle's `lookups` and turns `External` answers of
    /// executors whose driver was found before into what became of that driver.
    pub async fn recall<D: PodDirectory>(&mut self, dir: &D, lookups: &mut BTreeMap<String, DriverLookup>) {
        self.known.retain(|exec, _| lookups.contains_key(exec));
        for (exec, lookup) in lookups.iter_mut() {
            match lookup {
                DriverLookup::Found { driver, .. } => {
                    self.known.insert(exec.clone(), (**driver).clone());
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
                            found: Box::new(now),
                        },
                        Ok(Some(now)) => DriverLookup::Found {
                            by: LookupMethod::DriverUrl,
                            driver: Box::new(now),
                        },
                    };
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::directory::narrows_drivers;
    use super::*;
    use futures::executor::block_on;
    use nodemedic_rules::snapshot::OwnerRef;

    fn pod(ns: &str, name: &str, uid: &str, role: &str, app: &str, phase: &str) -> PodInfo {
        let mut p = PodInfo {
            uid: uid.into(),
            namespace: ns.into(),
            name: name.into(),
            phase: phase.into(),
            created_at: Some(100),
            ..Default::default()
        };
        p.labels.insert("spark-role".into(), role.into());
        p.labels.insert("spark-app-selector".into(), app.into());
        p
    }

    fn owned(mut exec: PodInfo, driver: &str, uid: &str) -> PodInfo {
        exec.owner_refs.push(OwnerRef {
            kind: "Pod".into(),
            name: driver.into(),
            uid: uid.into(),
            controller: true,
        });
        exec
    }

    #[test]
    fn driver_url_hosts() {
        let cases = [
            (
                "spark://CoarseGrainedScheduler@etl-1a2b-driver-svc.spark.svc:7078",
                Some("etl-1a2b-driver-svc.spark.svc"),
            ),
            ("spark://CoarseGrainedScheduler@10.4.2.17:7078", Some("10.4.2.17")),
            ("spark://CoarseGrainedScheduler@[fd00::17]:7078", Some("fd00::17")),
            ("spark://CoarseGrainedScheduler@:7078", None),
            ("garbage", Some("garbage")),
        ];
        for (url, want) in cases {
            assert_eq!(driver_url_host(url), want, "{url}");
        }
    }

    #[test]
    fn resolution_table() {
        let driver = pod("spark", "etl-driver", "d1", "driver", "app1", "Running");
        let recreated = pod("spark", "etl-driver", "d2", "driver", "app1", "Running");
        let mut client_driver = pod("jupyter", "notebook-0", "n1", "notebook", "", "Running");
        client_driver.pod_ip = Some("10.0.0.9".into());
        let exec = pod("spark", "etl-exec-1", "e1", "executor", "app1", "Running");
        let dir = ListDirectory::new(vec![driver.clone(), client_driver.clone()]);

        let found = block_on(resolve_driver(&dir, &owned(exec.clone(), "etl-driver", "d1")));
        assert!(
            matches!(found, DriverLookup::Found { by: LookupMethod::OwnerReference, ref driver } if driver.uid == "d1")
        );

        let dir2 = ListDirectory::new(vec![recreated]);
        let replaced = block_on(resolve_driver(&dir2, &owned(exec.clone(), "etl-driver", "d1")));
        assert!(
            matches!(replaced, DriverLookup::Replaced { ref expected_uid, ref found } if expected_uid == "d1" && found.uid == "d2")
        );

        let gone = block_on(resolve_driver(
            &ListDirectory::default(),
            &owned(exec.clone(), "etl-driver", "d1"),
        ));
        assert_eq!(
            gone,
            DriverLookup::Gone {
                by: LookupMethod::OwnerReference,
                expected: "spark/etl-driver (uid d1)".into()
            }
        );

        let by_labels = block_on(resolve_driver(&dir, &exec));
        assert!(matches!(
            by_labels,
            DriverLookup::Found {
                by: LookupMethod::Labels,
                ..
            }
        ));

        // Client mode: no owner, no driver labels; the URL's IP is a notebook pod.
        let mut client_exec = pod("spark", "nb-exec-1", "e2", "executor", "spark-client-42", "Running");
        client_exec.spark_driver_url = Some("spark://CoarseGrainedScheduler@10.0.0.9:7078".into());
        let by_ip = block_on(resolve_driver(&dir, &client_exec));
        assert!(matches!(by_ip, DriverLookup::Found { by: LookupMethod::DriverUrl, ref driver } if driver.uid == "n1"));
        client_exec.spark_driver_url = Some("spark://CoarseGrainedScheduler@192.168.7.7:7078".into());
        assert!(matches!(
            block_on(resolve_driver(&dir, &client_exec)),
            DriverLookup::External { .. }
        ));
        client_exec.spark_driver_url = Some("spark://CoarseGrainedScheduler@etl-driver-svc.spark.svc:7078".into());
        assert!(matches!(
            block_on(resolve_driver(&dir, &client_exec)),
            DriverLookup::Found {
                by: LookupMethod::DriverUrl,
                ..
            }
        ));
        client_exec.spark_driver_url = Some("spark://CoarseGrainedScheduler@old-driver-svc.spark.svc:7078".into());
        assert_eq!(
            block_on(resolve_driver(&dir, &client_exec)),
            DriverLookup::Gone {
                by: LookupMethod::DriverUrl,
                expected: "spark/old-driver".into()
            }
        );
        client_exec.spark_driver_url = None;
        assert!(matches!(
            block_on(resolve_driver(&dir, &client_exec)),
            DriverLookup::Gone {
                by: LookupMethod::Labels,
                ..
            }
        ));
    }

    #[test]
    fn memory_turns_a_vanished_client_driver_into_gone() {
        let mut notebook = pod("jupyter", "notebook-0", "n1", "notebook", "", "Running");
        notebook.pod_ip = Some("10.0.0.9".into());
        let mut exec = pod("spark", "nb-exec-1", "e2", "executor", "spark-client-42", "Running");
        exec.spark_driver_url = Some("spark://CoarseGrainedScheduler@10.0.0.9:7078".into());
        let mut memory = DriverMemory::default();
        let with = ListDirectory::new(vec![notebook]);
        let (mut lookups, _) = block_on(resolve_all(&with, std::slice::from_ref(&exec)));
        block_on(memory.recall(&with, &mut lookups));
        assert!(matches!(lookups["e2"], DriverLookup::Found { .. }));
        let without = ListDirectory::default();
        let (mut lookups, _) = block_on(resolve_all(&without, std::slice::from_ref(&exec)));
        assert!(
            matches!(lookups["e2"], DriverLookup::External { .. }),
            "alone it looks external"
        );
        block_on(memory.recall(&without, &mut lookups));
        assert!(
            matches!(&lookups["e2"], DriverLookup::Gone { by: LookupMethod::DriverUrl, expected } if expected.starts_with("jupyter/notebook-0 (uid n1)")),
            "{lookups:?}"
        );
        // An executor never seen with a driver stays external.
        let mut fresh = DriverMemory::default();
        let (mut lookups, _) = block_on(resolve_all(&without, std::slice::from_ref(&exec)));
        block_on(fresh.recall(&without, &mut lookups));
        assert!(matches!(lookups["e2"], DriverLookup::External { .. }));
    }

    #[test]
    fn app_drivers_include_duplicates_elsewhere() {
        let here = pod("spark", "etl-driver", "d1", "driver", "app1", "Running");
        let elsewhere = pod("spark", "etl-driver-2", "d2", "driver", "app1", "Running");
        let other = pod("spark", "x-driver", "d3", "driver", "app2", "Running");
        let dir = ListDirectory::new(vec![here.clone(), elsewhere, other]);
        let (_, apps) = block_on(resolve_all(&dir, &[here]));
        assert_eq!(apps.len(), 1);
        assert_eq!(
            apps["app1"].iter().map(|p| p.uid.as_str()).collect::<Vec<_>>(),
            ["d1", "d2"]
        );
    }

    #[test]
    fn app_drivers_include_the_jobs_other_drivers_whatever_their_labels() {
        let job = OwnerRef {
            kind: "Job".into(),
            name: "etl".into(),
            uid: "j1".into(),
            controller: true,
        };
        let mut here = pod("spark", "etl-b", "d2", "driver", "", "Pending");
        here.labels.remove("spark-app-selector");
        here.owner_refs.push(job.clone());
        let mut before = pod("spark", "etl-a", "d1", "driver", "spark-old-run", "Running");
        before.owner_refs.push(job);
        let stranger = pod("spark", "x-driver", "d3", "driver", "", "Running");
        let dir = ListDirectory::new(vec![here.clone(), before, stranger]);
        let (_, apps) = block_on(resolve_all(&dir, &[here]));
        assert_eq!(
            apps["job:j1"].iter().map(|p| p.uid.as_str()).collect::<Vec<_>>(),
            ["d1", "d2"]
        );
        assert_eq!(apps.len(), 1);
    }

    #[test]
    fn events_and_nodes_are_cached_briefly_and_an_events_answer_goes_with_its_pod() {
        let cached = CachedDirectory::new(
            Counting(ListDirectory::default(), 0.into()),
            Duration::from_secs(3600),
            1000,
        );
        let count = || cached.inner.1.load(std::sync::atomic::Ordering::Relaxed);
        block_on(cached.pod_events("spark", "d1")).unwrap();
        block_on(cached.node("worker-2")).unwrap();
        block_on(cached.pod_events("spark", "d1")).unwrap();
        block_on(cached.node("worker-2")).unwrap();
        assert_eq!(count(), 2, "the second reads are answered from the cache");
        cached.forget(&pod("spark", "etl-driver", "d1", "driver", "app", "Pending"));
        block_on(cached.pod_events("spark", "d1")).unwrap();
        block_on(cached.node("worker-2")).unwrap();
        assert_eq!(
            count(),
            3,
            "the pod changed: its Events are read again, the node is not"
        );
    }

    /// Counts the lookups that reach it.
    struct Counting(ListDirectory, std::sync::atomic::AtomicU32);
    impl PodDirectory for Counting {
        async fn get(&self, ns: &str, name: &str) -> Result<Option<PodInfo>, LookupError> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.get(ns, name).await
        }
        async fn list(&self, ns: Option<&str>, sel: &str) -> Result<Vec<PodInfo>, LookupError> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.list(ns, sel).await
        }
        async fn by_ip(&self, ip: &str) -> Result<Vec<PodInfo>, LookupError> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.by_ip(ip).await
        }
        async fn pod_networks(&self) -> Result<Vec<Cidr>, LookupError> {
            Ok(vec![])
        }
        async fn pod_events(&self, ns: &str, uid: &str) -> Result<Vec<PodEvent>, LookupError> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.pod_events(ns, uid).await
        }
        async fn node(&self, name: &str) -> Result<Option<NodeStatus>, LookupError> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.node(name).await
        }
    }

    #[test]
    fn two_hundred_executors_of_twenty_apps_make_twenty_lookups() {
        let mut pods = vec![];
        let mut drivers = vec![];
        for app in 0..20 {
            let d = pod(
                "spark",
                &format!("app{app}-driver"),
                &format!("d{app}"),
                "driver",
                &format!("app{app}"),
                "Running",
            );
            drivers.push(d);
            for e in 0..10 {
                pods.push(owned(
                    pod(
                        "spark",
                        &format!("app{app}-exec-{e}"),
                        &format!("e{app}-{e}"),
                        "executor",
                        &format!("app{app}"),
                        "Running",
                    ),
                    &format!("app{app}-driver"),
                    &format!("d{app}"),
                ));
            }
        }
        let cached = CachedDirectory::new(
            Counting(ListDirectory::new(drivers), 0.into()),
            Duration::from_secs(60),
            1000,
        );
        let (lookups, _) = block_on(resolve_all(&cached, &pods));
        assert_eq!(lookups.len(), 200);
        assert!(lookups.values().all(|l| matches!(l, DriverLookup::Found { .. })));
        assert_eq!(cached.inner.1.load(std::sync::atomic::Ordering::Relaxed), 20);
        // A second cycle within the TTL costs nothing.
        block_on(resolve_all(&cached, &pods));
        assert_eq!(cached.lookups(), 20);
    }

    #[test]
    fn a_changed_pod_is_looked_up_again_at_once_not_after_the_ttl() {
        let driver = pod("spark", "app-driver", "d1", "driver", "app", "Running");
        let exec = owned(
            pod("spark", "app-exec", "e1", "executor", "app", "Running"),
            "app-driver",
            "d1",
        );
        let other = pod("spark", "other-driver", "d9", "driver", "other", "Running");
        let indexed = IndexedDirectory {
            inner: CachedDirectory::new(
                Counting(ListDirectory::new(vec![driver.clone(), other.clone()]), 0.into()),
                Duration::from_secs(3600),
                1000,
            ),
        };
        let count = || indexed.inner.inner.1.load(std::sync::atomic::Ordering::Relaxed);
        let resolve = || block_on(resolve_all(&indexed, std::slice::from_ref(&exec))).0;
        assert!(matches!(resolve()["e1"], DriverLookup::Found { .. }));
        assert_eq!(count(), 1, "one list of the namespace's drivers");
        resolve();
        assert_eq!(count(), 1, "cached");
        // Another application's driver changed: its list held it, so the list goes.
        indexed.inner.forget(&other);
        resolve();
        assert_eq!(count(), 2);
        // The driver itself changed (the watch saw it deleted): asked again.
        indexed.inner.forget(&driver);
        resolve();
        assert_eq!(count(), 3);
        // The executor changed: its driver's lookups go (its driver may run elsewhere).
        indexed.inner.forget(&exec);
        resolve();
        assert_eq!(count(), 4);
        // A pod of another namespace changes nothing here.
        indexed
            .inner
            .forget(&pod("batch", "x-driver", "x1", "driver", "x", "Running"));
        resolve();
        assert_eq!(count(), 4);
        indexed.inner.forget_all();
        resolve();
        assert_eq!(count(), 5);
    }

    #[test]
    fn a_driver_ip_inside_a_pod_network_that_no_pod_has_is_gone() {
        let mut exec = pod("spark", "nb-exec-1", "e1", "executor", "nb", "Running");
        exec.spark_driver_url = Some("spark://CoarseGrainedScheduler@10.244.1.31:7078".into());
        let mut laptop = exec.clone();
        laptop.uid = "e2".into();
        laptop.spark_driver_url = Some("spark://CoarseGrainedScheduler@192.0.2.10:7078".into());
        let networks = vec![network::Cidr::parse("10.244.1.0/24").unwrap()];
        let dir = ListDirectory::default().with_networks(networks);
        match block_on(resolve_driver(&dir, &exec)) {
            DriverLookup::Gone { by, expected } => {
                assert_eq!(by, LookupMethod::DriverUrl);
                assert!(
                    expected.contains("10.244.1.31") && expected.contains("10.244.1.0/24"),
                    "{expected}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            block_on(resolve_driver(&dir, &laptop)),
            DriverLookup::External { .. }
        ));
        // Without the networks (a pods file), the IP leads nowhere known: outside.
        assert!(matches!(
            block_on(resolve_driver(&ListDirectory::default(), &exec)),
            DriverLookup::External { .. }
        ));
    }

    #[test]
    fn one_list_per_namespace_answers_the_drivers_of_twenty_apps() {
        let mut pods = vec![];
        let mut cluster = vec![];
        for app in 0..20 {
            cluster.push(pod(
                "spark",
                &format!("app{app}-driver"),
                &format!("d{app}"),
                "driver",
                &format!("app{app}"),
                "Running",
            ));
            pods.push(owned(
                pod(
                    "spark",
                    &format!("app{app}-exec"),
                    &format!("e{app}"),
                    "executor",
                    &format!("app{app}"),
                    "Running",
                ),
                &format!("app{app}-driver"),
                &format!("d{app}"),
            ));
        }
        // A driver that is gone: not in the list, so asked for by name (and not found).
        pods.push(owned(
            pod("spark", "gone-exec", "e-gone", "executor", "gone", "Running"),
            "gone-driver",
            "d-gone",
        ));
        let indexed = IndexedDirectory {
            inner: CachedDirectory::new(
                Counting(ListDirectory::new(cluster), 0.into()),
                Duration::from_secs(60),
                1000,
            ),
        };
        let (lookups, _) = block_on(resolve_all(&indexed, &pods));
        let found = lookups
            .values()
            .filter(|l| matches!(l, DriverLookup::Found { .. }))
            .count();
        assert_eq!(found, 20);
        assert!(matches!(lookups["e-gone"], DriverLookup::Gone { .. }));
        // One LIST of the namespace's drivers, one GET of the gone driver, one LIST by the gone
        // application's labels (answered from the same list, so not counted again).
        assert_eq!(indexed.inner.inner.1.load(std::sync::atomic::Ordering::Relaxed), 2);
        assert!(narrows_drivers("spark-role=driver,spark-app-selector=a"));
        assert!(!narrows_drivers("spark-role=executor"));
        assert!(!narrows_drivers("spark-role=driver,spark-app-selector!=a"));
    }

    /// Fails every lookup, counting them.
    struct Failing(std::sync::atomic::AtomicU32);
    impl PodDirectory for Failing {
        async fn get(&self, _: &str, _: &str) -> Result<Option<PodInfo>, LookupError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(LookupError::Failed("GET pod: HTTP 503".into()))
        }
        async fn list(&self, _: Option<&str>, _: &str) -> Result<Vec<PodInfo>, LookupError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(LookupError::Failed("LIST pods: connection refused".into()))
        }
        async fn by_ip(&self, _: &str) -> Result<Vec<PodInfo>, LookupError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(LookupError::Failed("LIST pods: connection refused".into()))
        }
        async fn pod_networks(&self) -> Result<Vec<Cidr>, LookupError> {
            Ok(vec![])
        }
        async fn pod_events(&self, _: &str, _: &str) -> Result<Vec<PodEvent>, LookupError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(LookupError::Failed("LIST events: connection refused".into()))
        }
        async fn node(&self, _: &str) -> Result<Option<NodeStatus>, LookupError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(LookupError::Failed("GET node: connection refused".into()))
        }
    }

    #[test]
    fn after_the_first_failure_a_pass_sends_nothing_more() {
        let pods: Vec<PodInfo> = (0..200)
            .map(|i| {
                owned(
                    pod(
                        "spark",
                        &format!("e{i}"),
                        &format!("e{i}"),
                        "executor",
                        "app",
                        "Running",
                    ),
                    "app-driver",
                    "d1",
                )
            })
            .collect();
        let dir = IndexedDirectory {
            inner: Breaker::new(Failing(0.into())),
        };
        let (lookups, _) = block_on(resolve_all(&dir, &pods));
        assert_eq!(lookups.len(), 200);
        assert!(
            lookups
                .values()
                .all(|l| matches!(l, DriverLookup::Unknown { reason } if reason.contains("connection refused")))
        );
        assert_eq!(dir.inner.inner.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        // The next pass tries again, once.
        dir.inner.reset();
        block_on(resolve_all(&dir, &pods));
        assert_eq!(dir.inner.inner.0.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn the_budget_caps_lookups_and_defers_the_rest() {
        let mut pods = vec![];
        for app in 0..5 {
            pods.push(owned(
                pod(
                    "spark",
                    &format!("e{app}"),
                    &format!("e{app}"),
                    "executor",
                    "a",
                    "Running",
                ),
                &format!("d{app}"),
                "x",
            ));
        }
        let cached = CachedDirectory::new(ListDirectory::default(), Duration::from_secs(60), 3);
        let (lookups, _) = block_on(resolve_all(&cached, &pods));
        let unknown = lookups
            .values()
            .filter(|l| matches!(l, DriverLookup::Unknown { reason } if reason.starts_with("rate limited")))
            .count();
        assert_eq!(unknown, 2);
        assert_eq!(cached.lookups(), 3);
    }
}
