//! The Spark configuration collector: per driver, read, not there, or failed.

use super::*;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

fn props(text: &str) -> Vec<(String, String)> {
    parse_spark_properties(text).into_iter().collect()
}

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

#[test]
fn what_spark_writes() {
    let text = "#Java properties built from Kubernetes config map with name: spark-drv-6b1dcd956d6c0338-conf-map\n\
                #Thu Nov 21 10:00:00 UTC 2024\n\
                spark.kubernetes.driver.requestTimeout=30000\n\
                spark.master=k8s\\://https\\://10.96.0.1\\:443\n\
                spark.app.name=etl\\ hourly\n\
                spark.driver.extraJavaOptions=-Dfoo\\=bar -Dpath\\=C\\:\\\\tmp\n\
                spark.kubernetes.submission.requestTimeout=60000\n";
    assert_eq!(
        props(text),
        [
            pair("spark.app.name", "etl hourly"),
            pair("spark.driver.extraJavaOptions", "-Dfoo=bar -Dpath=C:\\tmp"),
            pair("spark.kubernetes.driver.requestTimeout", "30000"),
            pair("spark.kubernetes.submission.requestTimeout", "60000"),
            pair("spark.master", "k8s://https://10.96.0.1:443"),
        ]
    );
}

#[test]
fn separators_comments_and_whitespace() {
    let text = "a=1\n\
                b: 2\n\
                c 3\n\
                d = 4\n\
                e\t:\t5\n\
                f:=6\n\
                g==7\n\
                \x20  ! bang comment\n\
                \t# hash comment\n\
                \n   \n\
                \x20  h = indented\n\
                i=\n\
                j\n\
                k\\ with\\ spaces\\=and\\:colons = v\n\
                l = trailing  \n\
                a=last wins\n";
    assert_eq!(
        props(text),
        [
            pair("a", "last wins"),
            pair("b", "2"),
            pair("c", "3"),
            pair("d", "4"),
            pair("e", "5"),
            pair("f", "=6"),
            pair("g", "=7"),
            pair("h", "indented"),
            pair("i", ""),
            pair("j", ""),
            pair("k with spaces=and:colons", "v"),
            pair("l", "trailing  "),
        ]
    );
}

#[test]
fn continuations_and_line_ends() {
    let text = "list = a,\\\n      b,\\\r\n\t c\n\
                even=ends in a backslash\\\\\n\
                next=1\n\
                # a comment does not continue \\\n\
                after=comment\n\
                cont=x\\\n# not a comment here\n\
                blank=y\\\n\nz=after blank\r\
                cr=only\r\n\
                eof=z\\";
    assert_eq!(
        props(text),
        [
            pair("after", "comment"),
            pair("blank", "y"),
            pair("cont", "x# not a comment here"),
            pair("cr", "only"),
            pair("eof", "z"),
            pair("even", "ends in a backslash\\"),
            pair("list", "a,b,c"),
            pair("next", "1"),
            pair("z", "after blank"),
        ]
    );
}

#[test]
fn escapes_and_unicode() {
    let text = "u=caf\\u00e9 \\uD83D\\uDE00 \\u20ac\n\
                lone=\\uD83Dx\n\
                bad=\\u12G4 and \\u12\n\
                ctl=tab\\there\\nline\\rcr\\fff\\q\n\
                raw=ünïcode as is\n";
    assert_eq!(
        props(text),
        [
            pair("bad", "u12G4 and u12"),
            pair("ctl", "tab\there\nline\rcr\x0cffq"),
            pair("lone", "\u{fffd}x"),
            pair("raw", "ünïcode as is"),
            pair("u", "café 😀 €"),
        ]
    );
    assert!(props("").is_empty());
    assert!(props("\\").is_empty() || props("\\") == [pair("", "")]);
}

proptest::proptest! {
    #[test]
    fn never_panics(text in "\\PC*") {
        let _ = parse_spark_properties(&text);
    }

    #[test]
    fn never_panics_on_escape_heavy_text(text in "[a-z=: \\\\u0-9A-F#!\t\r\n]{0,60}") {
        let _ = parse_spark_properties(&text);
    }
}

/// A ConfigMap volume laid out as the kubelet's atomic writer does.
fn configmap_volume(root: &Path, uid: &str, volume: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = root.join(format!(
        "var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/{volume}"
    ));
    let stamp = "..2024_11_21_10_00_00.123456789";
    std::fs::create_dir_all(dir.join(stamp)).unwrap();
    symlink(stamp, dir.join("..data")).unwrap();
    for (name, content) in files {
        std::fs::write(dir.join(stamp).join(name), content).unwrap();
        symlink(format!("..data/{name}"), dir.join(name)).unwrap();
    }
    dir
}

fn driver(uid: &str, version: Option<&str>) -> PodInfo {
    let mut p = PodInfo {
        uid: uid.into(),
        namespace: "spark-jobs".into(),
        name: "etl-driver".into(),
        ..Default::default()
    };
    p.labels.insert("spark-role".into(), "driver".into());
    if let Some(v) = version {
        p.labels.insert("spark-version".into(), v.into());
    }
    p
}

#[test]
fn reads_the_driver_conf_volume_through_the_kubelets_links() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    configmap_volume(
        root,
        "u31",
        "spark-conf-volume-driver",
        &[
            ("spark.properties", "#x\nspark.kubernetes.driver.requestTimeout=30000\n"),
            ("log4j2.properties", "rootLogger.level=info\n"),
        ],
    );
    configmap_volume(
        root,
        "u24",
        "spark-conf-volume",
        &[("spark.properties", "spark.kubernetes.namespace=old\n")],
    );
    configmap_volume(root, "other", "app-config", &[("spark.properties", "x=1\n")]);
    let host = HostPaths::new(root, None);
    let kubelet = host.kubelet_dir(None);

    let conf = read_spark_conf(&host, &kubelet, &driver("u31", Some("3.5.1")))
        .unwrap()
        .unwrap();
    assert_eq!(conf.version.as_deref(), Some("3.5.1"));
    assert_eq!(
        conf.properties
            .get("spark.kubernetes.driver.requestTimeout")
            .map(String::as_str),
        Some("30000")
    );
    assert_eq!(conf.kubernetes_request_timeout_env, None);
    let (shown, _) = find_spark_properties(&host, &kubelet, &driver("u31", None))
        .unwrap()
        .unwrap();
    assert_eq!(
        shown,
        "/var/lib/kubelet/pods/u31/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties"
    );

    let old = read_spark_conf(&host, &kubelet, &driver("u24", None)).unwrap().unwrap();
    assert_eq!(old.version, None);
    assert_eq!(
        old.properties.get("spark.kubernetes.namespace").map(String::as_str),
        Some("old")
    );

    assert!(
        read_spark_conf(&host, &kubelet, &driver("other", None))
            .ok()
            .flatten()
            .is_none(),
        "not a Spark conf volume"
    );
    assert!(
        read_spark_conf(&host, &kubelet, &driver("absent", None))
            .ok()
            .flatten()
            .is_none()
    );
    assert!(
        read_spark_conf(&host, &kubelet, &driver("..", None))
            .ok()
            .flatten()
            .is_none()
    );
    assert!(
        read_spark_conf(&host, &kubelet, &driver("../u31", None))
            .ok()
            .flatten()
            .is_none()
    );
}

#[test]
fn refuses_links_out_of_the_volume_and_large_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/secret"), "password=hunter2\n").unwrap();
    let vol = configmap_volume(root, "evil", "spark-conf-volume-driver", &[]);
    symlink("../../../../../../../../etc/secret", vol.join("spark.properties")).unwrap();
    let big = "x=".to_string() + &"y".repeat(PROPERTIES_LIMIT as usize);
    configmap_volume(root, "big", "spark-conf-volume-driver", &[("spark.properties", &big)]);
    let host = HostPaths::new(root, None);
    let kubelet = host.kubelet_dir(None);

    let err = find_spark_properties(&host, &kubelet, &driver("evil", None)).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "/var/lib/kubelet/pods/evil/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties: resolves to "
        ),
        "{err}"
    );
    assert!(err.to_string().ends_with("/etc/secret, outside its volume"), "{err}");
    assert!(
        read_spark_conf(&host, &kubelet, &driver("evil", None)).is_err(),
        "a file outside its volume is an error, not an absent file"
    );

    let err = find_spark_properties(&host, &kubelet, &driver("big", None)).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("larger than the 1048576-byte limit for this file"),
        "{err}"
    );
}

/// The `spark_conf` collector: a driver whose properties are read, a driver with none here,
/// and one whose file points outside its volume; the record says which read failed, and the
/// other drivers' configurations are kept.
#[test]
fn the_collector_reads_every_driver_and_names_the_one_it_could_not() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    configmap_volume(
        root,
        "good",
        "spark-conf-volume-driver",
        &[("spark.properties", "spark.kubernetes.driver.requestTimeout=30000\n")],
    );
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/secret"), "password=hunter2\n").unwrap();
    let vol = configmap_volume(root, "evil", "spark-conf-volume-driver", &[]);
    symlink("../../../../../../../../etc/secret", vol.join("spark.properties")).unwrap();
    let host = HostPaths::new(root, None);
    let kubelet = host.kubelet_dir(None);
    let pods = [driver("good", None), driver("none-here", None), driver("evil", None)];

    let read = read_drivers(&host, &kubelet, &pods, "worker-1");
    assert_eq!(read.confs.keys().collect::<Vec<_>>(), ["good"]);
    assert_eq!(read.errors.len(), 1, "{:?}", read.errors);
    let (status, failed) = read.status();
    assert!(failed);
    assert!(status.starts_with("error: driver "), "{status}");
    assert!(
        status.contains("/evil/") && status.ends_with("outside its volume"),
        "{status}"
    );

    let fine = read_drivers(&host, &kubelet, &pods[..2], "worker-1");
    assert_eq!(fine.status(), ("ok".to_string(), false));
    let two = DriverConfs {
        errors: vec!["a".into(), "b".into(), "c".into()],
        ..Default::default()
    };
    assert_eq!(two.status(), ("error: a (and 2 more drivers)".to_string(), true));
}

/// Per driver, the snapshot says whether its configuration was read, is not there to read
/// (no conf volume; waiting to start; being deleted) or failed (a read error; a driver that
/// has started with its conf volume and has no `spark.properties` in it, which the
/// collector once counted as "no such volume here", hiding the failure behind `ok`).
#[test]
fn the_collector_says_per_driver_whether_its_conf_was_read() {
    use nodemedic_rules::snapshot::{ConfVolume, ContainerInfo};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    configmap_volume(
        root,
        "read",
        "spark-conf-volume-driver",
        &[("spark.properties", "spark.kubernetes.driver.requestTimeout=5000\n")],
    );
    // A directory where the file should be: a read error.
    let odd = configmap_volume(root, "unreadable", "spark-conf-volume-driver", &[]);
    std::fs::create_dir_all(odd.join("..data/spark.properties")).unwrap();
    symlink("..data/spark.properties", odd.join("spark.properties")).unwrap();
    // The pod's directory, without its conf volume.
    std::fs::create_dir_all(root.join("var/lib/kubelet/pods/started/volumes")).unwrap();
    let host = HostPaths::new(root, None);
    let kubelet = host.kubelet_dir(None);
    let with_volume = |uid: &str, phase: PodPhase, container: Option<&str>| {
        let mut p = driver(uid, Some("3.5.1"));
        p.phase = phase;
        p.conf_volume = Some(ConfVolume {
            volume: "spark-conf-volume-driver".into(),
            config_map: format!("spark-drv-{uid}-conf-map"),
        });
        p.containers = container
            .map(|state| ContainerInfo {
                name: "spark-kubernetes-driver".into(),
                state: Some(state.into()),
                ..Default::default()
            })
            .into_iter()
            .collect();
        p
    };
    let mut deleting = with_volume("deleting", PodPhase::Running, Some("running"));
    deleting.deleting = true;
    let mut client_mode = driver("client-mode", None);
    client_mode.phase = PodPhase::Running;
    let pods = [
        with_volume("read", PodPhase::Running, Some("running")),
        with_volume("unreadable", PodPhase::Running, Some("running")),
        with_volume("started", PodPhase::Running, Some("running")),
        // Pending, but its container has run: the kubelet had mounted its volumes.
        with_volume("restarted", PodPhase::Pending, Some("terminated")),
        with_volume("waiting", PodPhase::Pending, Some("waiting")),
        deleting,
        client_mode,
    ];

    let got = read_drivers(&host, &kubelet, &pods, "worker-1");
    let state = |uid: &str| got.reads.get(uid).cloned();
    let conf_path = |uid: &str| {
        format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties")
    };
    assert_eq!(
        state("read"),
        Some(SparkConfRead::Read {
            path: conf_path("read")
        })
    );
    assert_eq!(
        got.confs["read"]
            .properties
            .get("spark.kubernetes.driver.requestTimeout")
            .map(String::as_str),
        Some("5000")
    );
    assert_eq!(
        state("unreadable"),
        Some(SparkConfRead::Failed {
            reason: format!("{}: is a directory, not a file", conf_path("unreadable"))
        })
    );
    let not_in_volume = |uid: &str| SparkConfRead::Failed {
        reason: format!(
            "{}: not there, although the driver has started with its conf volume spark-conf-volume-driver",
            conf_path(uid)
        ),
    };
    assert_eq!(state("started"), Some(not_in_volume("started")));
    assert_eq!(state("restarted"), Some(not_in_volume("restarted")));
    assert_eq!(
        state("waiting"),
        Some(SparkConfRead::NotThere {
            reason: "it waits to start: the kubelet has not set up its conf volume spark-conf-volume-driver yet".into()
        })
    );
    assert_eq!(
        state("deleting"),
        Some(SparkConfRead::NotThere {
            reason: "it is being deleted: the kubelet tears its volumes down".into()
        })
    );
    assert_eq!(
        state("client-mode"),
        Some(SparkConfRead::NotThere {
            reason: "its pod mounts no Spark conf volume (spark-conf-volume-driver or spark-conf-volume): client \
                     mode, or a Spark before 2.4"
                .into()
        })
    );
    assert_eq!(got.reads.len(), pods.len(), "every unfinished driver has a state");
    // The record names the first failure and counts the others.
    assert_eq!(got.errors.len(), 3, "{:?}", got.errors);
    let (status, failed) = got.status();
    assert!(failed);
    assert_eq!(
        status,
        format!(
            "error: driver spark-jobs/etl-driver: {}: is a directory, not a file (and 2 more drivers)",
            conf_path("unreadable")
        )
    );
    // A finished driver is not looked at.
    let mut done = with_volume("started", PodPhase::Succeeded, Some("terminated"));
    done.uid = "done".into();
    assert!(read_drivers(&host, &kubelet, &[done], "worker-1").reads.is_empty());
}

#[test]
fn conf_mount_tells_a_missing_volume_from_a_pod_the_kubelet_has_not_started() {
    use nodemedic_rules::snapshot::ConfVolume;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let host = HostPaths::new(root, None);
    let kubelet = host.kubelet_dir(None);
    let pods = root.join("var/lib/kubelet/pods");
    let waiting = |uid: &str| PodInfo {
        uid: uid.into(),
        conf_volume: Some(ConfVolume {
            volume: "spark-conf-volume-driver".into(),
            config_map: "spark-drv-1-conf-map".into(),
        }),
        ..Default::default()
    };
    let volume =
        |uid: &str| format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/spark-conf-volume-driver");
    std::fs::create_dir_all(pods.join("mounted/volumes/kubernetes.io~configmap/spark-conf-volume-driver")).unwrap();
    std::fs::create_dir_all(pods.join("missing/volumes/kubernetes.io~projected/kube-api-access-1")).unwrap();
    // A file where the volume's directory should be is not a set-up volume.
    std::fs::create_dir_all(pods.join("odd/volumes/kubernetes.io~configmap")).unwrap();
    std::fs::write(
        pods.join("odd/volumes/kubernetes.io~configmap/spark-conf-volume-driver"),
        "x",
    )
    .unwrap();
    let mount = |uid: &str| conf_mount(&host, &kubelet, &waiting(uid));
    assert_eq!(
        mount("mounted"),
        Some(ConfMount::Mounted {
            path: volume("mounted")
        })
    );
    assert_eq!(
        mount("missing"),
        Some(ConfMount::Missing {
            path: volume("missing")
        })
    );
    assert_eq!(mount("odd"), Some(ConfMount::Missing { path: volume("odd") }));
    assert_eq!(
        mount("new"),
        Some(ConfMount::NoPodDir {
            path: "/var/lib/kubelet/pods/new".into()
        })
    );
    // A UID or volume name that is not one path component is never looked up.
    assert_eq!(mount(".."), None);
    let mut sneaky = waiting("missing");
    sneaky.conf_volume.as_mut().unwrap().volume = "../../../etc".into();
    assert_eq!(conf_mount(&host, &kubelet, &sneaky), None);
    assert_eq!(
        conf_mount(
            &host,
            &kubelet,
            &PodInfo {
                uid: "missing".into(),
                ..Default::default()
            }
        ),
        None
    );
    // A pod directory the agent may not read is said as such.
    std::fs::write(pods.join("file-not-dir"), "x").unwrap();
    let m = mount("file-not-dir");
    assert!(
        matches!(m, Some(ConfMount::Unknown { ref reason }) if reason.contains("file-not-dir")),
        "{m:?}"
    );
}
