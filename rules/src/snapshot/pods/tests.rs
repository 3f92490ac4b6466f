//! Tests of [`super`] (pods.rs keeps the code, this file its tests): the Spark version of an
//! image and of a pod, and the pod's words (phase, QoS class, Spark role) as it reads and
//! prints them.

use super::*;

#[test]
fn spark_images_give_their_version_and_others_none() {
    let cases = [
        ("apache/spark:3.5.1", Some("3.5.1")),
        ("apache/spark:3.4.0-scala2.12-java11-ubuntu", Some("3.4.0")),
        ("gcr.io/spark-operator/spark:v3.1.1", Some("3.1.1")),
        ("gcr.io/spark-operator/spark-py:v2.4.5", Some("2.4.5")),
        ("bitnami/spark:3.3.2-debian-11-r0", Some("3.3.2")),
        ("registry.local:5000/team/spark:2.4", Some("2.4")),
        ("apache/spark:3.5.1@sha256:abcd", Some("3.5.1")),
        ("apache/spark@sha256:abcd", None),
        ("apache/spark", None),
        ("apache/spark:latest", None),
        ("apache/spark:20240101", None),
        ("apache/spark:3", None),
        ("apache/spark:3.5.1.2", None),
        ("apache/spark:3.5beta", None),
        ("registry.local:5000/team/etl-job:2.4.8", None),
        ("registry.local:5000/spark/etl:1.2.3", None),
        ("", None),
    ];
    for (image, want) in cases {
        assert_eq!(spark_version_of_image(image).as_deref(), want, "{image}");
    }
}

#[test]
fn the_label_wins_over_the_image() {
    let mut p = PodInfo {
        containers: vec![
            ContainerInfo {
                name: "istio-proxy".into(),
                kind: Some(ContainerKind::Regular),
                image: Some("docker.io/istio/proxyv2:1.20.0".into()),
                ..Default::default()
            },
            ContainerInfo {
                name: "spark-kubernetes-driver".into(),
                kind: Some(ContainerKind::Regular),
                image: Some("apache/spark:2.4.8".into()),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    assert_eq!(p.spark_version(), Some(("2.4.8".to_string(), "image")));
    p.labels.insert("spark-version".into(), "3.5.1".into());
    assert_eq!(p.spark_version(), Some(("3.5.1".to_string(), "label")));
    p.labels.clear();
    p.containers[1].image = Some("company/etl:7.1.0".into());
    assert_eq!(p.spark_version(), None);
}

/// A pod prints its phase and QoS class as the API wrote them, known or not: the JSON is what
/// the `String` fields printed.
#[test]
fn a_pods_words_print_as_the_api_wrote_them() {
    let mut p = PodInfo {
        phase: PodPhase::Running,
        qos_class: Some(QosClass::Guaranteed),
        ..Default::default()
    };
    let words = |p: &PodInfo| {
        let json = serde_json::to_value(p).unwrap();
        (json["phase"].clone(), json["qos_class"].clone())
    };
    assert_eq!(
        words(&p),
        (serde_json::json!("Running"), serde_json::json!("Guaranteed"))
    );
    assert!(!p.is_terminal());
    p.phase = "Evicted".into();
    p.qos_class = Some("Platinum".into());
    assert_eq!(words(&p), (serde_json::json!("Evicted"), serde_json::json!("Platinum")));
    assert!(!p.is_terminal(), "a phase this version does not know is not an end");
    p.qos_class = None;
    assert_eq!(words(&p).1, serde_json::Value::Null);
    p.phase = "Failed".into();
    assert_eq!(p.phase, PodPhase::Failed);
    assert!(p.is_terminal());
    assert_eq!(
        PodInfo::default().phase,
        PodPhase::Pending,
        "a pod object without a phase is Pending"
    );
}

/// `spark_role` reads the label as written: the two roles Spark sets, any other value as
/// `Other`, no label as `None`.
#[test]
fn the_spark_role_is_read_from_the_label() {
    let role = |value: Option<&str>| {
        let mut p = PodInfo::default();
        if let Some(v) = value {
            p.labels.insert(spark::ROLE.into(), v.into());
        }
        (p.spark_role(), spark::is_driver(&p), spark::is_executor(&p))
    };
    assert_eq!(role(Some("driver")), (Some(SparkRole::Driver), true, false));
    assert_eq!(role(Some("executor")), (Some(SparkRole::Executor), false, true));
    assert_eq!(
        role(Some("Executor")),
        (Some(SparkRole::Other("Executor".into())), false, false)
    );
    assert_eq!(role(Some("")), (Some(SparkRole::Other(String::new())), false, false));
    assert_eq!(role(None), (None, false, false));
}
