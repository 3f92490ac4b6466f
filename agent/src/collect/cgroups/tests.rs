//! Tests of [`super`] (cgroups.rs keeps the code, this file its tests).

use super::*;

const ID: &str = "4b1e8d8cbd2e1f6d5a0d2c3b4a5968778695a4b3c2d1e0f9e8d7c6b5a4938271";

#[test]
fn cgroup_events() {
    assert_eq!(parse_cgroup_events_populated("populated 1\nfrozen 0\n"), Some(true));
    assert_eq!(parse_cgroup_events_populated("frozen 0\npopulated 0\n"), Some(false));
    assert_eq!(parse_cgroup_events_populated("populated 2\n"), None);
    assert_eq!(parse_cgroup_events_populated(""), None);
}

/// A v1 host with one pod under `kubepods`, whose leaf holds `tree` below it.
fn pod_host(tree: impl FnOnce(&Path)) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let cpuset = dir.path().join("sys/fs/cgroup/cpuset");
    std::fs::create_dir_all(&cpuset).unwrap();
    std::fs::write(cpuset.join("cpuset.cpus"), "0-3\n").unwrap();
    let uid = "39b3c1f2-1d2e-4f50-9a8b-7c6d5e4f3a2b".to_string();
    let leaf = cpuset.join("kubepods").join(format!("pod{uid}")).join(ID);
    std::fs::create_dir_all(&leaf).unwrap();
    std::fs::write(leaf.join("cgroup.procs"), "").unwrap();
    tree(&leaf);
    (dir, uid)
}

/// Not found is an outcome naming the host path looked for: the cgroup file system, then
/// the driver's `kubepods` under it.
#[test]
fn pod_cgroups_not_found_name_the_path_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostPaths::new(dir.path(), None);
    let e = locate(&host, None).unwrap_err();
    assert_eq!(
        e,
        CgroupsError::NoCgroupFs {
            path: "/sys/fs/cgroup".into()
        }
    );
    assert_eq!(e.to_string(), "no cgroup file system at /sys/fs/cgroup");
    let cpuset = dir.path().join("sys/fs/cgroup/cpuset");
    std::fs::create_dir_all(&cpuset).unwrap();
    std::fs::write(cpuset.join("cpuset.cpus"), "0-3\n").unwrap();
    let e = locate(&host, None).unwrap_err();
    assert_eq!(e.path(), "/sys/fs/cgroup/cpuset/kubepods");
    assert_eq!(e.to_string(), "no pod cgroups at /sys/fs/cgroup/cpuset/kubepods");
    let mut notes = vec![];
    let tree = read_cgroups(&host, &Err(e), &Pinned::default(), &mut notes);
    assert!(
        matches!(&tree, Observed::Missing { path } if path == "/sys/fs/cgroup/cpuset/kubepods"),
        "{tree:?}"
    );
}

fn pod_of(dir: &Path, uid: &str) -> (PodCgroup, Vec<String>) {
    let mut notes = vec![];
    let tree = {
        let host = HostPaths::new(dir, None);
        read_cgroups(&host, &locate(&host, None), &Pinned::default(), &mut notes)
    };
    let Observed::Ok(tree) = tree else { panic!("{tree:?}") };
    (tree.pod(uid).unwrap().clone(), notes)
}

#[test]
fn processes_at_any_depth_below_a_leaf_are_the_containers() {
    let (dir, uid) = pod_host(|leaf| {
        let deep = leaf.join("init.scope/a/b/c/d/e/f/g/h/i/j");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("cgroup.procs"), "77\n").unwrap();
    });
    let (pod, notes) = pod_of(dir.path(), &uid);
    assert_eq!(pod.containers.len(), 1, "{pod:?}");
    assert_eq!(
        pod.containers[0].processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
        [77]
    );
    assert!(pod.alive() && pod.process_count() == 1 && !pod.subtree.truncated);
    assert_eq!(pod.subtree.dirs, 13, "the pod, its leaf and 11 levels below");
    assert!(notes.is_empty(), "{notes:?}");
}

#[test]
fn a_pathological_tree_stops_the_walk_and_counts_as_alive() {
    let (dir, uid) = pod_host(|leaf| {
        for i in 0..SUBTREE_DIR_LIMIT {
            std::fs::create_dir(leaf.join(format!("d{i}"))).unwrap();
        }
    });
    let (pod, notes) = pod_of(dir.path(), &uid);
    assert_eq!(pod.process_count(), 0);
    assert!(pod.subtree.truncated && pod.alive(), "{:?}", pod.subtree);
    assert_eq!(pod.subtree.dirs, SUBTREE_DIR_LIMIT);
    assert!(
        pod.alive_because()
            .unwrap()
            .contains("larger than the 4096 directories")
    );
    assert!(
        notes.iter().any(|n| n.contains("hold more than 4096 directories")),
        "{notes:?}"
    );
}

#[test]
fn pod_dir_names() {
    let cases: &[(&str, Option<&str>)] = &[
        (
            "pod39b3c1f2-1d2e-4f50-9a8b-7c6d5e4f3a2b",
            Some("39b3c1f2-1d2e-4f50-9a8b-7c6d5e4f3a2b"),
        ),
        (
            "kubepods-pod39b3c1f2_1d2e_4f50_9a8b_7c6d5e4f3a2b.slice",
            Some("39b3c1f2-1d2e-4f50-9a8b-7c6d5e4f3a2b"),
        ),
        ("kubepods-burstable-pod39b3c1f2_1d2e.slice", Some("39b3c1f2-1d2e")),
        ("kubepods-besteffort.slice", None),
        ("burstable", None),
        ("pod", None),
        ("pod../../etc", None),
        ("cri-containerd-abc.scope", None),
    ];
    for (name, want) in cases {
        assert_eq!(parse_pod_dir_name(name).as_deref(), *want, "{name}");
    }
    assert_eq!(parse_qos_dir_name("kubepods-besteffort.slice"), Some("besteffort"));
    assert_eq!(parse_qos_dir_name("guaranteed"), None);
}

#[test]
fn leaf_names() {
    let cases = [
        (
            format!("cri-containerd-{ID}.scope"),
            LeafName::Container(Runtime::Containerd, ID.into()),
        ),
        (
            format!("crio-{ID}.scope"),
            LeafName::Container(Runtime::Crio, ID.into()),
        ),
        (format!("crio-{ID}"), LeafName::Container(Runtime::Crio, ID.into())),
        (format!("crio-conmon-{ID}.scope"), LeafName::Conmon),
        (
            format!("docker-{ID}.scope"),
            LeafName::Container(Runtime::Docker, ID.into()),
        ),
        (ID.to_string(), LeafName::Container(Runtime::Unknown, ID.into())),
        (ID[..12].to_string(), LeafName::Other),
        (ID.to_uppercase(), LeafName::Other),
        ("container".to_string(), LeafName::Other),
        ("cri-containerd-xyz.scope".to_string(), LeafName::Other),
    ];
    for (name, want) in cases {
        assert_eq!(parse_leaf_name(&name), want, "{name}");
    }
}

#[test]
fn procs_files() {
    assert_eq!(parse_cgroup_procs("12\n345\n"), Ok(vec![12, 345]));
    // As u32's own parser: a leading '+', nothing past u32::MAX, no sign or space inside.
    assert_eq!(parse_cgroup_procs(" +7\t4294967295\n"), Ok(vec![7, 4294967295]));
    for bad in ["4294967296", "-1", "+", "1a", "٣"] {
        assert_eq!(
            parse_cgroup_procs(bad),
            Err(ProcsError::NotAPid(bad.to_string())),
            "{bad:?}"
        );
    }
    assert_eq!(
        parse_cgroup_procs_bytes(b"1\n\xff\n"),
        Err(ProcsError::NotAPid("\u{fffd}".to_string()))
    );
    assert_eq!(parse_cgroup_procs(""), Ok(vec![]));
    let err = parse_cgroup_procs("12\nabc\n").unwrap_err();
    assert_eq!(err, ProcsError::NotAPid("abc".into()));
    assert!(err.to_string().contains("\"abc\""));
}

proptest::proptest! {
    #[test]
    fn name_and_procs_parsers_never_panic(name in "\\PC{0,80}", procs in "[0-9a-z \n]{0,60}") {
        let _ = parse_pod_dir_name(&name);
        let _ = parse_qos_dir_name(&name);
        let _ = parse_leaf_name(&name);
        let _ = parse_cgroup_procs(&procs);
    }

    /// The byte parser reads every word as `u32::from_str` does.
    #[test]
    fn procs_are_read_as_u32_reads_them(procs in "[0-9+a \t\n-]{0,60}") {
        let by_str: Result<Vec<u32>, ProcsError> = procs
            .split_ascii_whitespace()
            .map(|w| w.parse::<u32>().map_err(|_| ProcsError::NotAPid(w.to_string())))
            .collect();
        proptest::prop_assert_eq!(parse_cgroup_procs(&procs), by_str);
    }

    #[test]
    fn systemd_pod_names_round_trip(uid in "[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}") {
        let systemd = format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
        proptest::prop_assert_eq!(parse_pod_dir_name(&systemd), Some(uid.clone()));
        proptest::prop_assert_eq!(parse_pod_dir_name(&format!("pod{uid}")), Some(uid));
    }
}
