//! Tests of [`super`] (mod.rs keeps the code, this file its tests): driver resolution in order,
//! the memory of vanished client-mode drivers, every driver of an application, and the cached
//! directory's lookups, caching, breaker and budget.

use std::time::Duration;

use super::directory::narrows_drivers;
use super::*;
use crate::collect::FilePod;
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

/// A pass over every pod, as each answer of a pods file's directory is defined.
fn by_pass<'a>(pods: &'a [PodInfo], ns: Option<&str>, selector: &str) -> Vec<&'a str> {
    let matching = pods
        .iter()
        .filter(|p| ns.is_none_or(|n| p.namespace == n) && directory::matches(p, selector));
    matching.map(|p| p.uid.as_str()).collect()
}

#[test]
fn the_pods_files_indexed_directory_answers_as_a_pass_over_every_pod_would() {
    let mut pods = vec![
        pod("spark", "etl-driver", "d1", "driver", "app1", "Running"),
        pod("spark", "etl-exec-1", "e1", "executor", "app1", "Running"),
        pod("spark", "etl-driver", "d1-twin", "driver", "app1", "Failed"),
        pod("ml", "etl-driver", "d-ml", "driver", "app1", "Running"),
        pod("ml", "train-driver", "d2", "driver", "app2", "Running"),
        pod("ml", "train-exec-1", "e2", "executor", "app2", "Running"),
    ];
    pods[4].labels.insert("team".into(), "ml".into());
    pods[1].pod_ip = Some("10.0.0.7".into());
    pods[5].pod_ip = Some("10.0.0.7".into());
    // Held whole, or the pods bound here (the 1st, 4th and 6th) lent by the snapshot.
    let held = ListDirectory::new(pods.clone());
    let bound = [pods[0].clone(), pods[3].clone(), pods[5].clone()];
    let file = pods.iter().enumerate().map(|(i, p)| match i {
        0 => FilePod::Bound(0),
        3 => FilePod::Bound(1),
        5 => FilePod::Bound(2),
        _ => FilePod::Elsewhere(std::sync::Arc::new(p.clone())),
    });
    let lent = ListDirectory::of_file(&bound, file.collect());
    let uids = |found: Vec<std::sync::Arc<PodInfo>>| found.iter().map(|p| p.uid.clone()).collect::<Vec<_>>();
    // A lent pod is copied once, however often it is an answer.
    let twice = [
        block_on(lent.get("spark", "etl-driver")),
        block_on(lent.get("spark", "etl-driver")),
    ];
    let [Ok(Some(a)), Ok(Some(b))] = twice else {
        panic!("{twice:?}")
    };
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    for dir in [held, lent] {
        let selectors = [
            "spark-role=driver,spark-app-selector=app1",
            "spark-app-selector = app2 , spark-role=driver",
            "spark-role=driver",
            "spark-role=driver,team=ml",
            "spark-role=driver,team",
            "team",
            "",
            "spark-role=driver,spark-app-selector=app9",
            "spark-role=nobody",
        ];
        for ns in [None, Some("spark"), Some("ml"), Some("elsewhere")] {
            for sel in selectors {
                let listed = uids(block_on(dir.list(ns, sel)).unwrap());
                assert_eq!(listed, by_pass(&pods, ns, sel), "namespace {ns:?}, selector {sel:?}");
            }
        }
        // By name: the first pod of the list with that namespace and name.
        let got = |ns: &str, name: &str| block_on(dir.get(ns, name)).unwrap().map(|p| p.uid.clone());
        assert_eq!(got("spark", "etl-driver").as_deref(), Some("d1"));
        assert_eq!(got("ml", "etl-driver").as_deref(), Some("d-ml"));
        assert_eq!(got("ml", "etl-exec-1"), None);
        // By IP: every pod with it, in the list's order.
        assert_eq!(uids(block_on(dir.by_ip("10.0.0.7")).unwrap()), ["e1", "e2"]);
        assert!(block_on(dir.by_ip("10.0.0.8")).unwrap().is_empty());
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
fn memory_keeps_one_copy_of_a_driver_that_many_executors_share() {
    let driver = pod("spark", "etl-driver", "d1", "driver", "app1", "Running");
    let execs: Vec<PodInfo> = (1..=3)
        .map(|n| {
            pod(
                "spark",
                &format!("etl-exec-{n}"),
                &format!("e{n}"),
                "executor",
                "app1",
                "Running",
            )
        })
        .collect();
    let dir = ListDirectory::new(vec![driver]);
    let (mut lookups, _) = block_on(resolve_all(&dir, &execs));
    let mut memory = DriverMemory::default();
    block_on(memory.recall(&dir, &mut lookups));
    assert_eq!(memory.known.len(), 3);
    let DriverLookup::Found { driver: found, .. } = &lookups["e1"] else {
        panic!("{lookups:?}")
    };
    assert!(
        memory.known.values().all(|d| Arc::ptr_eq(d, found)),
        "every executor's memory is the pod its lookup found, not a copy"
    );
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
struct Counting(ListDirectory<'static>, std::sync::atomic::AtomicU32);
impl PodDirectory for Counting {
    async fn get(&self, ns: &str, name: &str) -> Result<Option<Arc<PodInfo>>, LookupError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.get(ns, name).await
    }
    async fn list(&self, ns: Option<&str>, sel: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.list(ns, sel).await
    }
    async fn by_ip(&self, ip: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
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
    async fn get(&self, _: &str, _: &str) -> Result<Option<Arc<PodInfo>>, LookupError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(LookupError::Failed("GET pod: HTTP 503".into()))
    }
    async fn list(&self, _: Option<&str>, _: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(LookupError::Failed("LIST pods: connection refused".into()))
    }
    async fn by_ip(&self, _: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
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
