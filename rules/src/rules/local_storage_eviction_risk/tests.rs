use super::*;
use crate::local_storage::EvictionConfig;
use crate::rules::testkit::*;
use crate::snapshot::*;

const GIB: u64 = 1 << 30;
const MIB: f64 = (1u64 << 20) as f64;

fn executor(uid: &str, app: &str, limit: Option<u64>) -> PodInfo {
    let mut p = spark_executor(uid, app, uid, 1, "Running");
    for c in &mut p.containers {
        c.ephemeral_storage_limit_bytes = limit;
    }
    p
}

fn run(snap: &NodeSnapshot) -> Vec<Finding> {
    judged(check, snap, &Settings::default())
}

#[test]
fn a_pod_limit_reached_in_minutes_is_critical_and_names_it() {
    // 10 GiB limit, 8 GiB used, 10 MiB/s: 2 GiB left, 204.8 s.
    let snap = SnapshotBuilder::spark_node(&[executor("e1", "spark-1", Some(10 * GIB))])
        .with_local_storage(
            0,
            vec![PodStorage {
                pod_uid: "e1".into(),
                dirs: vec![empty_dir_use("spark-local-dir-1", 8 * GIB, 10.0 * MIB)],
                kubelet_ephemeral: None,
            }],
            vec![nodefs(1000 * GIB, 900 * GIB)],
        )
        .build();
    let f = run(&snap);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].evidence["forecast_seconds"], 205);
    assert_eq!(f[0].evidence["reaches"]["limit"], "pod_limit");
    assert_eq!(f[0].evidence["reaches"]["limit_bytes"], 10 * GIB);
    assert_eq!(f[0].evidence["growth_bytes_per_minute"], 600 * (1 << 20));
    assert_eq!(f[0].evidence["app_id"], "spark-1");
    assert!(
        f[0].summary.contains("its ephemeral-storage limit of 10.0 GiB"),
        "{}",
        f[0].summary
    );
    assert!(f[0].remedy.contains("podTemplateFile"), "{}", f[0].remedy);
    assert!(f[0].remedy.contains("claimName=OnDemand"), "{}", f[0].remedy);
    // Measured 100 s ago: 100 s nearer now.
    let mut later = snap.clone();
    later.taken_at += 100;
    assert_eq!(run(&later)[0].evidence["forecast_seconds"], 105);
}

#[test]
fn the_nodes_threshold_counts_every_application_growing_there() {
    // 100 GiB, 12 GiB available, the default 10%: 2 GiB left before DiskPressure, at 5 + 5 MiB/s.
    let pods = [executor("e1", "spark-1", None), executor("e2", "spark-2", None)];
    let snap = SnapshotBuilder::spark_node(&pods)
        .with_local_storage(
            0,
            vec![
                PodStorage {
                    pod_uid: "e1".into(),
                    dirs: vec![empty_dir_use("spark-local-dir-1", GIB, 5.0 * MIB)],
                    kubelet_ephemeral: None,
                },
                PodStorage {
                    pod_uid: "e2".into(),
                    dirs: vec![empty_dir_use("spark-local-dir-1", GIB, 5.0 * MIB)],
                    kubelet_ephemeral: None,
                },
            ],
            vec![nodefs(100 * GIB, 12 * GIB)],
        )
        .build();
    let f = run(&snap);
    assert_eq!(f.len(), 2);
    let e1 = f.iter().find(|f| f.subject.uid.as_deref() == Some("e1")).unwrap();
    assert_eq!(e1.evidence["forecast_seconds"], 205);
    assert_eq!(e1.evidence["reaches"]["limit"], "eviction_threshold");
    assert_eq!(e1.evidence["reaches"]["threshold"]["signal"], "nodefs.available");
    assert_eq!(e1.evidence["reaches"]["threshold"]["text"], "10%");
    assert_eq!(e1.evidence["reaches"]["imagefs"], "dedicated");
    assert_eq!(
        e1.evidence["others_growing_on_the_file_system"],
        serde_json::json!(["spark-2"])
    );
    assert!(e1.remedy.contains("spark-2 grow there too"), "{}", e1.remedy);
    // An evictionHard that leaves nodefs out (not merged): no threshold, the disk fills.
    let mut replaced = snap.clone();
    let mut kubelet = crate::rules::testkit::SnapshotBuilder::static_node("0-3", &[])
        .build()
        .host
        .kubelet;
    if let Observed::Ok(k) = &mut kubelet {
        k.eviction = EvictionConfig {
            hard: Some([("memory.available".to_string(), "200Mi".to_string())].into()),
            ..Default::default()
        };
    }
    replaced.host.kubelet = kubelet;
    let f = run(&replaced);
    assert_eq!(f[0].evidence["reaches"]["limit"], "file_system_full");
    assert_eq!(f[0].evidence["forecast_seconds"], 1229);
}

/// Where the runtime's images share the kubelet's disk (the usual node), `imagefs.available<15%`
/// is crossed before `nodefs.available<10%`, and the kubelet evicts pods for it once collecting
/// images is not enough; where nodemedic cannot tell, it takes the earlier and says so.
#[test]
fn images_on_the_kubelets_disk_bring_the_threshold_forward() {
    // 100 GiB, 20 GiB available, 10 MiB/s: 5 GiB above 15% (512 s), 10 GiB above 10% (1024 s).
    let snap = |imagefs: ImageFs| {
        SnapshotBuilder::spark_node(&[executor("e1", "spark-1", None)])
            .with_local_storage(
                0,
                vec![PodStorage {
                    pod_uid: "e1".into(),
                    dirs: vec![empty_dir_use("spark-local-dir-1", GIB, 10.0 * MIB)],
                    kubelet_ephemeral: None,
                }],
                vec![nodefs(100 * GIB, 20 * GIB)],
            )
            .with_imagefs(imagefs)
            .build()
    };
    let dedicated = run(&snap(ImageFs::Dedicated {
        path: "/var/lib/containerd".into(),
    }));
    assert_eq!(dedicated[0].evidence["forecast_seconds"], 1024);
    assert_eq!(dedicated[0].severity, Severity::Warning);

    let shared = run(&snap(ImageFs::Shared {
        path: "/var/lib/containerd".into(),
    }));
    assert_eq!(shared[0].evidence["forecast_seconds"], 512);
    assert_eq!(
        shared[0].evidence["reaches"]["threshold"]["signal"],
        "imagefs.available"
    );
    assert_eq!(shared[0].evidence["reaches"]["threshold"]["text"], "15%");
    assert_eq!(shared[0].evidence["reaches"]["imagefs"], "shared");
    assert!(
        shared[0].summary.contains("imagefs.available threshold on /var/lib/kubelet (evictionHard 15%, the default; the runtime's images (/var/lib/containerd) are on the same file system"),
        "{}",
        shared[0].summary
    );
    // One forecast per file system: the threshold crossed first.
    assert_eq!(shared[0].evidence["forecasts"].as_array().unwrap().len(), 1);

    let unknown = run(&snap(ImageFs::Unknown {
        reason: "/proc/1/mountinfo: no such file".into(),
    }));
    assert_eq!(unknown[0].evidence["forecast_seconds"], 512);
    assert_eq!(unknown[0].evidence["reaches"]["imagefs"], "unknown");
    assert_eq!(
        unknown[0].evidence["reaches"]["reason"],
        "/proc/1/mountinfo: no such file"
    );
    assert!(
        unknown[0]
            .summary
            .contains("taken to share it with the runtime's images: /proc/1/mountinfo: no such file"),
        "{}",
        unknown[0].summary
    );

    // A configured evictionHard without imagefs.available: nodefs's threshold alone.
    let mut configured = snap(ImageFs::Shared {
        path: "/var/lib/containerd".into(),
    });
    let mut kubelet = SnapshotBuilder::static_node("0-3", &[]).build().host.kubelet;
    let Observed::Ok(k) = &mut kubelet else {
        panic!("{kubelet:?}")
    };
    k.eviction = EvictionConfig {
        hard: Some([("nodefs.available".to_string(), "10%".to_string())].into()),
        ..Default::default()
    };
    configured.host.kubelet = kubelet;
    let f = run(&configured);
    assert_eq!(f[0].evidence["reaches"]["threshold"]["signal"], "nodefs.available");
    assert_eq!(f[0].evidence["forecast_seconds"], 1024);
}

#[test]
fn slow_growth_memory_and_quiet_pods_are_no_risk() {
    let pods = [
        executor("slow", "spark-1", Some(100 * GIB)),
        executor("tmpfs", "spark-2", Some(GIB)),
        executor("quiet", "spark-3", Some(GIB)),
    ];
    let mut memory = empty_dir_use("spark-local-dir-1", GIB, 100.0 * MIB);
    memory.backing = DirBacking::Memory;
    memory.device = None;
    let snap = SnapshotBuilder::spark_node(&pods)
        .with_local_storage(
            0,
            vec![
                // Two hours to its limit: not within 30 minutes.
                PodStorage {
                    pod_uid: "slow".into(),
                    dirs: vec![empty_dir_use("spark-local-dir-1", 0, (100 * GIB) as f64 / 7200.0)],
                    kubelet_ephemeral: None,
                },
                PodStorage {
                    pod_uid: "tmpfs".into(),
                    dirs: vec![memory],
                    kubelet_ephemeral: None,
                },
                PodStorage {
                    pod_uid: "quiet".into(),
                    dirs: vec![empty_dir_use("spark-local-dir-1", GIB - 1, 0.0)],
                    kubelet_ephemeral: None,
                },
            ],
            vec![nodefs(1000 * GIB, 900 * GIB)],
        )
        .build();
    assert_eq!(run(&snap), vec![]);
    // Its deadline: when the slow one's forecast passes 30 minutes left.
    let turn = crate::facts::storage_turn(&snap, &Settings::default()).unwrap();
    assert!((turn - 5400.0).abs() < 1.0, "{turn}");
}

#[test]
fn an_emptydir_size_limit_is_a_limit_of_its_own() {
    let mut p = executor("e1", "spark-1", None);
    p.local_dir_volumes[0].size_limit_bytes = Some(2 * GIB);
    let snap = SnapshotBuilder::spark_node(&[p])
        .with_local_storage(
            0,
            vec![PodStorage {
                pod_uid: "e1".into(),
                dirs: vec![empty_dir_use("spark-local-dir-1", GIB, MIB)],
                kubelet_ephemeral: None,
            }],
            vec![nodefs(1000 * GIB, 900 * GIB)],
        )
        .build();
    let f = run(&snap);
    assert_eq!(
        f[0].severity,
        Severity::Warning,
        "1 GiB at 1 MiB/s: 1024 s is under 30 min, not under 5"
    );
    // 1024 s: a warning, not critical.
    assert_eq!(f[0].evidence["forecast_seconds"], 1024);
}

/// A claimed local dir mounted after the agent started is not seen: the rule says it could not
/// look (info), or adds it to the pod's finding, and never reads it as "nothing grows".
#[test]
fn an_unseen_local_dir_is_said() {
    let pods = [
        executor("e1", "spark-1", None),
        executor("e2", "spark-2", Some(10 * GIB)),
    ];
    let claim = |uid: &str| UnseenDir {
        pod_uid: uid.into(),
        volume: "spark-local-dir-2".into(),
        backing: DirBacking::Claim {
            claim: format!("{uid}-pvc-0"),
        },
        path: format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~csi/pvc-1/mount"),
        reason: "not a mount point as the agent sees it".into(),
    };
    let mut snap = SnapshotBuilder::spark_node(&pods)
        .with_local_storage(
            0,
            vec![PodStorage {
                pod_uid: "e2".into(),
                dirs: vec![empty_dir_use("spark-local-dir-1", 8 * GIB, 10.0 * MIB)],
                kubelet_ephemeral: None,
            }],
            vec![nodefs(1000 * GIB, 900 * GIB)],
        )
        .build();
    if let Observed::Ok(s) = &mut snap.host.local_storage {
        s.unseen = vec![claim("e1"), claim("e2")];
        // A memory-backed dir unseen is no disk: not said.
        s.unseen.push(UnseenDir {
            backing: DirBacking::Memory,
            volume: "spark-local-dir-3".into(),
            ..claim("e1")
        });
    }
    let f = run(&snap);
    assert_eq!(f.len(), 2, "{f:#?}");
    let e1 = f.iter().find(|f| f.subject.uid.as_deref() == Some("e1")).unwrap();
    assert_eq!(e1.severity, Severity::Info);
    assert!(
        e1.summary.contains("the local dir(s) spark-local-dir-2 of Spark pod"),
        "{}",
        e1.summary
    );
    assert!(
        e1.summary.contains("could not be measured: not a mount point"),
        "{}",
        e1.summary
    );
    assert_eq!(e1.evidence["unseen_local_dirs"].as_array().unwrap().len(), 1);
    assert!(e1.remedy.contains("HostToContainer"), "{}", e1.remedy);
    // The pod with a forecast keeps it, and names what it could not see.
    let e2 = f.iter().find(|f| f.subject.uid.as_deref() == Some("e2")).unwrap();
    assert_eq!(e2.severity, Severity::Critical);
    assert_eq!(e2.evidence["unseen_local_dirs"][0]["volume"], "spark-local-dir-2");
}

#[test]
fn the_kubelets_count_of_the_pod_is_held_against_its_limit_from_when_it_counted() {
    // A 10 GiB limit. The local dir holds 6 GiB, but the kubelet counts 8 GiB for the pod (its
    // containers' writable layers and logs too), 40 s before the measurement: 2 GiB left at
    // 10 MiB/s is 204.8 s from then, 165 s from now.
    let mut dir = empty_dir_use("spark-local-dir-1", 6 * GIB, 10.0 * MIB);
    dir.measured_by = MeasuredBy::Kubelet;
    dir.measured_at = NOW - 40;
    let snap = SnapshotBuilder::spark_node(&[executor("e1", "spark-1", Some(10 * GIB))])
        .with_local_storage(
            0,
            vec![PodStorage {
                pod_uid: "e1".into(),
                dirs: vec![dir],
                kubelet_ephemeral: Some(KubeletCount {
                    bytes: 8 * GIB,
                    at: NOW - 40,
                }),
            }],
            vec![nodefs(1000 * GIB, 900 * GIB)],
        )
        .build();
    let f = run(&snap);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].evidence["forecast_seconds"], 165);
    assert_eq!(f[0].evidence["reaches"]["limit"], "pod_limit");
    assert_eq!(f[0].evidence["reaches"]["used_bytes"], 8 * GIB);
    assert_eq!(f[0].evidence["reaches"]["by_kubelet"], true);
    assert_eq!(f[0].evidence["local_dirs"][0]["measured_by"], "kubelet");
    let counted = f[0].evidence["usage_counted"].as_str().unwrap();
    assert!(counted.starts_with("the kubelet's count"), "{counted}");
    // Without the kubelet's count the local dir's 6 GiB is all there is: 4 GiB left, 409.6 s
    // from its own time.
    let mut walked = snap.clone();
    if let Observed::Ok(s) = &mut walked.host.local_storage {
        s.pods[0].kubelet_ephemeral = None;
    }
    let f = run(&walked);
    assert_eq!(f[0].evidence["reaches"]["used_bytes"], 6 * GIB);
    assert_eq!(f[0].evidence["reaches"]["by_kubelet"], false);
    assert_eq!(f[0].evidence["forecast_seconds"], 370);
}
