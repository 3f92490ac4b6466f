//! Tests of [`super`] (kubelet_state_divergence.rs keeps the code, this file its tests).

use super::*;
use crate::rules::testkit::{SnapshotBuilder, kubelet_pod as listed, kubelet_view, pod};

fn with_view(mut snap: NodeSnapshot, pods: Vec<KubeletPod>, allocatable: Option<&str>) -> NodeSnapshot {
    snap.host.kubelet_view = Observed::Ok(kubelet_view(pods, allocatable));
    snap
}

/// `snap` with the kubelet's version read from its Node, long after the kubelet started.
fn at_version(mut snap: NodeSnapshot, version: &str) -> NodeSnapshot {
    snap.api.kubelet_version = Observed::Ok(kubelet_version::VersionReading {
        version: kubelet_version::KubeletVersion::parse(version).unwrap(),
        source: kubelet_version::NODE_STATUS.into(),
        read_at: snap.taken_at,
    });
    snap
}

fn base() -> SnapshotBuilder {
    SnapshotBuilder::static_node("0-1,6-7", &[("u1", "app", "2-3"), ("u2", "app", "4-5")]).with_online("0-7")
}

#[test]
fn memory_and_devices_compared_for_pods_of_known_uid() {
    use crate::kubelet_view::{KubeletDevices, KubeletMemory};
    use crate::rules::testkit::{device_entry, memory_entry};
    const GIB: u64 = 1 << 30;
    let mut exec = listed("spark", "exec-1", &["u1"], &[("app", "2-3")]);
    exec.containers[0].memory = vec![KubeletMemory {
        resource: "memory".into(),
        bytes: 8 * GIB,
        numa_nodes: vec![0],
    }];
    exec.containers[0].devices = vec![KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: vec!["GPU-a".into()],
        numa_nodes: vec![0],
    }];
    let unknown = listed("spark", "exec-2", &[], &[("app", "4-5")]);
    let build = |mem_numa: i64, gpu: &str| {
        with_view(
            base()
                .with_memory_entries(vec![
                    memory_entry("u1", "app", &[(&[mem_numa], "memory", 8 * GIB)]),
                    memory_entry("u2", "app", &[(&[1], "memory", GIB)]),
                ])
                .with_device_entries(
                    vec![device_entry("u1", "app", "nvidia.com/gpu", &[(gpu, Some(0))])],
                    &[],
                )
                .build(),
            vec![exec.clone(), unknown.clone()],
            None,
        )
    };
    assert_eq!(
        crate::rules::testkit::judged(check, &build(0, "GPU-a"), &Settings::default()),
        vec![]
    );
    let f = crate::rules::testkit::judged(check, &build(1, "GPU-b"), &Settings::default());
    assert_eq!(f.len(), 2, "{f:#?}");
    assert_eq!(f[0].evidence["resource_kind"], "memory");
    assert_eq!(
        f[0].evidence["checkpoint_memory"][0]["numa_nodes"],
        serde_json::json!([1])
    );
    assert!(
        f[0].summary
            .contains("holds 8.0 GiB memory on NUMA node 0 for container app"),
        "{}",
        f[0].summary
    );
    assert_eq!(f[1].evidence["resource_kind"], "devices");
    assert_eq!(f[1].evidence["kubelet_device_ids"], serde_json::json!(["GPU-a"]));
    assert_eq!(f[1].evidence["checkpoint_device_ids"], serde_json::json!(["GPU-b"]));
    assert!(f[1].remedy.contains("restores nvidia.com/gpu GPU-b"), "{}", f[1].remedy);

    // A file written a moment ago may be a write in flight.
    let mut snap = build(1, "GPU-b");
    if let Observed::Ok(m) = &mut snap.host.managers.memory {
        m.age_seconds = Some(2.0);
    }
    assert_eq!(
        crate::rules::testkit::judged(check, &snap, &Settings::default()).len(),
        1
    );
}

#[test]
fn agreement_is_silent() {
    let snap = with_view(
        base().build(),
        vec![
            listed("spark", "exec-1", &["u1"], &[("app", "2-3"), ("sidecar", "")]),
            listed("spark", "exec-2", &[], &[("app", "4-5")]),
        ],
        Some("0-7"),
    );
    assert_eq!(
        crate::rules::testkit::judged(check, &snap, &Settings::default()),
        vec![]
    );
}

#[test]
fn a_container_pinned_elsewhere_in_memory_is_reported_with_both_sets() {
    let snap = with_view(
        base()
            .with_pod_list(&[pod("u1", "exec-1", "Running", &[("app", "c1")])])
            .build(),
        vec![listed("spark", "exec-1", &["u1"], &[("app", "2,6")])],
        Some("0-7"),
    );
    let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].evidence["kubelet_cpus"], "2,6");
    assert_eq!(f[0].evidence["checkpoint_cpus"], "2-3");
    assert_eq!(f[0].evidence["pod_uid"], "u1");
    assert!(
        f[0].summary
            .contains("pins container app of spark/exec-1 to CPUs 2,6 in memory"),
        "{}",
        f[0].summary
    );
    assert!(
        f[0].remedy.contains("is moved from CPUs 2,6 to CPUs 2-3"),
        "{}",
        f[0].remedy
    );
    assert!(
        f[0].remedy.contains("`systemctl restart kubelet` on node-a"),
        "{}",
        f[0].remedy
    );
}

#[test]
fn pinning_the_file_lost_is_reported_even_without_a_uid() {
    // The file has no entry holding 6-7 for a container "app"; the kubelet pins one there.
    let snap = with_view(
        base().build(),
        vec![listed("spark", "new", &[], &[("app", "6-7")])],
        None,
    );
    let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].evidence["checkpoint_cpus"], "none");
    assert_eq!(f[0].evidence.get("pod_uid"), None);
    assert!(
        f[0].remedy.contains("no entry of a container app holds CPUs 6-7"),
        "{}",
        f[0].remedy
    );
    assert!(
        f[0].summary
            .ends_with("has no entry for a container app on these CPUs: the file was changed while the kubelet runs"),
        "{}",
        f[0].summary
    );
}

#[test]
fn allocatable_against_online_minus_reserved() {
    let build = |alloc: &str| {
        at_version(
            with_view(
                base()
                    .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0").unwrap()))
                    .build(),
                vec![],
                Some(alloc),
            ),
            "v1.26.0",
        )
    };
    assert_eq!(
        crate::rules::testkit::judged(check, &build("1-7"), &Settings::default()),
        vec![]
    );
    let f = crate::rules::testkit::judged(check, &build("2-7"), &Settings::default());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].evidence["expected_cpus"], "1-7");
    assert_eq!(f[0].evidence["kubelet_allocatable_cpus"], "2-7");
    assert_eq!(f[0].evidence["reserved_cpus"], "0");
    assert_eq!(f[0].evidence["kubelet_version"], "v1.26.0");
    assert!(f[0].remedy.contains("refuses to start"), "{}", f[0].remedy);
    assert_eq!(notes(&build("2-7")), Vec::<String>::new());
}

/// A 1.23 kubelet restarted while a Guaranteed pod holds CPUs 2-3 and 4-5 answers only the
/// CPUs unassigned at its start (kubernetes#112913): none here, all of them held.
fn restarted_with_every_cpu_held(version: Option<&str>) -> NodeSnapshot {
    let snap = with_view(
        SnapshotBuilder::static_node("0-1", &[("u1", "app", "2-3"), ("u2", "app", "4-5")])
            .with_online("0-5")
            .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0-1").unwrap()))
            .build(),
        vec![
            listed("spark", "exec-1", &["u1"], &[("app", "2-3")]),
            listed("spark", "exec-2", &["u2"], &[("app", "4-5")]),
        ],
        Some(""),
    );
    match version {
        Some(v) => at_version(snap, v),
        None => snap,
    }
}

#[test]
fn allocatable_is_compared_only_with_a_kubelet_known_to_be_1_26_or_later() {
    // 1.23: no finding, and a note that says why.
    let old = restarted_with_every_cpu_held(Some("v1.23.8"));
    assert_eq!(crate::rules::testkit::judged(check, &old, &Settings::default()), vec![]);
    let note = notes(&old);
    assert_eq!(note.len(), 1, "{note:?}");
    assert!(
        note[0].starts_with(
            "kubelet-state-divergence: the kubelet's allocatable CPUs (none) were not compared with the online \
                 CPUs minus the reserved ones: the kubelet is v1.23.8: before 1.26"
        ),
        "{}",
        note[0]
    );
    // Unknown (offline): no finding either, and the note names the unknown version.
    let unknown = restarted_with_every_cpu_held(None);
    assert_eq!(
        crate::rules::testkit::judged(check, &unknown, &Settings::default()),
        vec![]
    );
    assert!(notes(&unknown)[0].contains("the kubelet's version is unknown (no Node object read)"));
    // A 1.25 kubelet as well (the fix reached 1.26.0; the backports are not relied on).
    assert_eq!(
        crate::rules::testkit::judged(
            check,
            &restarted_with_every_cpu_held(Some("v1.25.3")),
            &Settings::default()
        ),
        vec![]
    );
    // 1.26 and later: the same answer means what it says, and is critical as before.
    for v in ["v1.26.0", "v1.27.1", "v1.30.1+k3s1"] {
        let f = crate::rules::testkit::judged(check, &restarted_with_every_cpu_held(Some(v)), &Settings::default());
        assert_eq!(f.len(), 1, "{v}: {f:#?}");
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(f[0].evidence["kubelet_allocatable_cpus"], "none");
        assert_eq!(f[0].evidence["expected_cpus"], "2-5");
        assert!(
            f[0].summary.starts_with(
                "The kubelet's allocatable CPUs (none) differ from the online CPUs minus the reserved ones (2-5)"
            ),
            "{}",
            f[0].summary
        );
        assert!(
            f[0].remedy.starts_with("The kubelet hands out CPUs none, but"),
            "{}",
            f[0].remedy
        );
        assert!(!f[0].summary.contains("()") && !f[0].remedy.contains("CPUs ,"));
    }
}

#[test]
fn a_shared_container_listed_on_the_shared_pool_is_a_divergence_only_from_1_23() {
    // Before 1.23 the kubelet lists a shared-pool container with the whole shared pool.
    let build = |version: Option<&str>| {
        let snap = with_view(
            base().build(),
            vec![listed(
                "spark",
                "exec-1",
                &["u1"],
                &[("app", "2-3"), ("sidecar", "0-1,6-7")],
            )],
            None,
        );
        match version {
            Some(v) => at_version(snap, v),
            None => snap,
        }
    };
    assert_eq!(
        crate::rules::testkit::judged(check, &build(Some("v1.22.17")), &Settings::default()),
        vec![]
    );
    assert_eq!(
        crate::rules::testkit::judged(check, &build(None), &Settings::default()),
        vec![]
    );
    let f = crate::rules::testkit::judged(check, &build(Some("v1.23.0")), &Settings::default());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].evidence["container"], "sidecar");
    assert_eq!(f[0].evidence["checkpoint_cpus"], "none");
}

#[test]
fn a_file_rewritten_during_the_comparison_or_not_static_is_not_judged() {
    let mut snap = at_version(
        with_view(
            base().build(),
            vec![listed("spark", "exec-1", &["u1"], &[("app", "6")])],
            Some("0"),
        ),
        "v1.28.3-eks-7f8a1f2",
    );
    assert_eq!(
        crate::rules::testkit::judged(check, &snap, &Settings::default()).len(),
        2
    );
    if let Observed::Ok(v) = &mut snap.host.kubelet_view {
        v.checkpoint_changed = true;
    }
    assert_eq!(
        crate::rules::testkit::judged(check, &snap, &Settings::default()),
        vec![]
    );
    let none = crate::Checkpoint::parse(br#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#)
        .unwrap()
        .state()
        .unwrap();
    let none = SnapshotBuilder::from_state(none).build();
    let none = with_view(
        none,
        vec![listed("spark", "exec-1", &["u1"], &[("app", "6")])],
        Some("0"),
    );
    assert_eq!(
        crate::rules::testkit::judged(check, &none, &Settings::default()),
        vec![]
    );
}

#[test]
fn pods_with_pod_level_cpus_are_not_compared() {
    // pod2 holds 7-9 as a pod (V3 file); the kubelet lists its container on them.
    let state = crate::Checkpoint::parse(
            br#"{"policyName":"static","defaultCpuSet":"0-4","entries":{"pod1":{"app":"5-6"}},"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":0}"#,
        )
        .unwrap()
        .state()
        .unwrap();
    let snap = with_view(
        SnapshotBuilder::from_state(state).with_online("0-9").build(),
        vec![
            listed("spark", "exec-1", &["pod1"], &[("app", "5-6")]),
            listed("spark", "exec-2", &["pod2"], &[("app", "7-9")]),
        ],
        None,
    );
    assert_eq!(
        crate::rules::testkit::judged(check, &snap, &Settings::default()),
        vec![]
    );
}
