use super::*;
use crate::rules::testkit::*;
use crate::snapshot::{ContainerPort, Listener};

fn with_opts(mut p: PodInfo, opts: &[&str]) -> PodInfo {
    p.spark_java_opts = opts.iter().map(|o| o.to_string()).collect();
    p
}

fn node(pods: &[PodInfo], listening: &[u16]) -> NodeSnapshot {
    let mut snap = SnapshotBuilder::spark_node(pods).build();
    snap.host.listeners = Observed::Ok(listening.iter().map(|&port| Listener { port, ipv6: false }).collect());
    snap
}

fn run(snap: &NodeSnapshot) -> Vec<Finding> {
    judged(check, snap, &Settings::default())
}

fn ess(host_port: Option<u16>, host_network: bool, phase: &str) -> PodInfo {
    let mut p = pod("s1", "spark-shuffle-service-x7k2", phase, &[("shuffle", "c9")]);
    p.host_network = host_network;
    p.containers[0].image = Some("example/spark-shuffle:3.5".into());
    p.containers[0].ports = vec![ContainerPort {
        container_port: 7337,
        host_port,
    }];
    p
}

#[test]
fn enabled_executors_without_a_listener_or_a_publisher_are_critical() {
    let exec = with_opts(
        spark_executor("e1", "spark-1", "etl", 1, "Running"),
        &["-Dspark.shuffle.service.enabled=true"],
    );
    let f = run(&node(std::slice::from_ref(&exec), &[22, 10250]));
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].evidence["port"], 7337);
    assert_eq!(f[0].evidence["configuration_read_from"], "the executor's JVM options");
    assert_eq!(f[0].evidence["listening_ports"], serde_json::json!([22, 10250]));
    // A listener on the port, on IPv4 or IPv6: none.
    assert!(run(&node(std::slice::from_ref(&exec), &[7337])).is_empty());
    let mut v6 = node(std::slice::from_ref(&exec), &[]);
    v6.host.listeners = Observed::Ok(vec![Listener { port: 7337, ipv6: true }]);
    assert!(run(&v6).is_empty());
    // A running pod that publishes it (hostPort through the CNI, or hostNetwork): none.
    assert!(run(&node(&[exec.clone(), ess(Some(7337), false, "Running")], &[])).is_empty());
    assert!(run(&node(&[exec.clone(), ess(None, true, "Running")], &[])).is_empty());
    // One on another port, or not running: still missing, and named.
    let mut other = ess(Some(7447), false, "Running");
    other.containers[0].ports[0].container_port = 7447;
    let f = run(&node(&[exec.clone(), other], &[]));
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].evidence["shuffle_service_like_pods"][0]["ports"][0]["host_port"],
        7447
    );
    assert_eq!(run(&node(&[exec, ess(Some(7337), false, "Pending")], &[])).len(), 1);
}

#[test]
fn the_drivers_configuration_here_decides_and_the_executors_port_wins() {
    let driver = spark_driver("d1", "spark-1", "etl", "Running");
    let exec = with_opts(
        spark_executor("e1", "spark-1", "etl", 1, "Running"),
        &["-Dspark.shuffle.service.port=7447 -Dspark.driver.port=7078"],
    );
    let mut snap = node(&[driver.clone(), exec.clone()], &[7337]);
    snap.pods.spark_confs.insert(
        "d1".into(),
        spark_conf(
            Some("3.5.1"),
            &[
                ("spark.shuffle.service.enabled", "true"),
                ("spark.shuffle.service.port", "7337"),
            ],
        ),
    );
    let f = run(&snap);
    assert_eq!(f.len(), 1, "7337 listens, the executor uses 7447");
    assert_eq!(f[0].evidence["port"], 7447);
    assert!(
        f[0].evidence["configuration_read_from"]
            .as_str()
            .unwrap()
            .contains("spark-jobs/etl-driver")
    );
    // Disabled by the driver: nothing, whatever the executor's own options say.
    snap.pods.spark_confs.insert(
        "d1".into(),
        spark_conf(Some("3.5.1"), &[("spark.shuffle.service.enabled", "false")]),
    );
    assert!(run(&snap).is_empty());
    // Nothing here says (the driver elsewhere, no option): not judged.
    let alone = node(&[spark_executor("e2", "spark-2", "ml", 1, "Running")], &[]);
    assert!(run(&alone).is_empty());
    assert_eq!(
        shuffle_conf(&alone, &drivers_by_app(&alone), &alone.pods.bound[0]),
        None
    );
}

#[test]
fn each_application_has_its_first_unfinished_driver_and_no_other_applications() {
    let snap = node(
        &[
            spark_driver("d-old", "spark-1", "etl", "Failed"),
            spark_driver("d-new", "spark-1", "etl", "Running"),
            spark_driver("d-later", "spark-1", "etl", "Pending"),
            spark_driver("d-ml", "spark-2", "ml", "Running"),
            spark_executor("e1", "spark-1", "etl", 1, "Running"),
            spark_executor("e3", "spark-3", "bi", 1, "Running"),
        ],
        &[],
    );
    let drivers = drivers_by_app(&snap);
    let uids: Vec<(&str, &str)> = drivers.iter().map(|(app, d)| (*app, d.uid.as_str())).collect();
    assert_eq!(uids, [("spark-1", "d-new"), ("spark-2", "d-ml")]);
    // The executor of an application whose driver is elsewhere finds none, and with no option
    // of its own nothing says whether the service is on.
    assert_eq!(shuffle_conf(&snap, &drivers, &snap.pods.bound[5]), None);
}
