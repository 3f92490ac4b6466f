use super::*;
use crate::collect::read::trace;
use nodemedic_rules::snapshot::LocalDirVolume;

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A running executor `uid` whose local dirs are `volumes`.
fn executor(uid: &str, volumes: Vec<LocalDirVolume>) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        namespace: "spark".into(),
        name: format!("{uid}-exec-1"),
        phase: "Running".into(),
        labels: [("spark-role".to_string(), "executor".to_string())].into(),
        local_dir_volumes: volumes,
        ..Default::default()
    }
}

fn volume(name: &str) -> LocalDirVolume {
    LocalDirVolume {
        name: name.into(),
        ..Default::default()
    }
}

fn write(path: &Path, bytes: usize) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, vec![1u8; bytes]).unwrap();
}

/// Sets a file's modification time `ago` seconds back (an old shuffle file).
fn age(path: &Path, ago: i64) {
    let t = nix::sys::time::TimeSpec::new(unix_now() as i64 - ago, 0);
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        path,
        &t,
        &t,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
}

#[test]
fn emptydirs_are_measured_in_allocated_bytes_and_grow_over_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostPaths::new(dir.path(), None);
    let kubelet = host.kubelet_dir(None);
    let vol = kubelet.join("pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1");
    write(&vol.join("blockmgr-1/0c/shuffle_0_1_0.data"), 64 * 1024);
    let pods = [executor("u1", vec![volume("spark-local-dir-1")])];
    let mut store = LocalStore::default();
    let t0 = unix_now();
    // The first measurement has no growth yet: not applicable.
    assert!(matches!(
        store.measure(&host, &kubelet, &pods, t0, 600.0, ImageFs::default()),
        Observed::NotApplicable { .. }
    ));
    write(&vol.join("blockmgr-1/0d/shuffle_0_2_0.data"), 64 * 1024);
    let Observed::Ok(s) = store.measure(&host, &kubelet, &pods, t0 + 60.0, 600.0, ImageFs::default()) else {
        panic!()
    };
    let d = &s.pods[0].dirs[0];
    assert_eq!((d.files, d.backing.clone()), (2, DirBacking::EmptyDir));
    assert!(d.bytes >= 128 * 1024, "{}", d.bytes);
    let growth = d.growth_bytes_per_second.unwrap();
    assert!((growth * 60.0 - 65536.0).abs() < 8192.0, "{growth}");
    assert!(s.filesystems[0].nodefs, "an emptyDir is on the kubelet's file system");
    assert!(s.filesystems[0].capacity_bytes >= s.filesystems[0].available_bytes);
    assert_eq!(s.remembered["u1"].bytes, d.bytes);
}

/// The second walk of a tree that did not change lists nothing and looks at the directories
/// and the recent files only (modified within `HOT_SECONDS`: not the files of five minutes
/// ago, inside the window); a file that grows in place (no directory changes) is seen.
#[test]
fn an_unchanged_tree_is_not_listed_again() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostPaths::new(dir.path(), None);
    let kubelet = host.kubelet_dir(None);
    let vol = kubelet.join("pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1");
    for sub in 0..8 {
        for f in 0..25 {
            let path = vol.join(format!("blockmgr-1/{sub:02x}/shuffle_{f}.data"));
            write(&path, 4096);
            age(&path, 300);
        }
        age(&vol.join(format!("blockmgr-1/{sub:02x}")), 3600);
    }
    let growing = vol.join("blockmgr-1/00/spill_0.data");
    write(&growing, 4096);
    age(&vol.join("blockmgr-1/00"), 3600);
    let pods = [executor("u1", vec![volume("spark-local-dir-1")])];
    let mut store = LocalStore::default();
    let now = unix_now();
    store.measure(&host, &kubelet, &pods, now - 60.0, 600.0, ImageFs::default());
    std::fs::OpenOptions::new()
        .append(true)
        .open(&growing)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &vec![2u8; 1 << 20]))
        .unwrap();
    age(&vol.join("blockmgr-1/00"), 3600);
    let _one = trace::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    trace::start();
    let measured = store.measure(&host, &kubelet, &pods, now, 600.0, ImageFs::default());
    let ops = trace::stop();
    let mine: Vec<_> = ops.iter().filter(|(_, p)| p.starts_with(dir.path())).collect();
    let lists = mine
        .iter()
        .filter(|(op, p)| *op == trace::Op::List && p.starts_with(&vol))
        .count();
    let stats = mine.iter().filter(|(op, _)| *op == trace::Op::Stat).count();
    assert_eq!(lists, 0, "{mine:#?}");
    // The volume, blockmgr-1, 8 subdirectories (each stat'ed as a child and as itself), the
    // kubelet directory, and the one recent file: not the 200 old ones.
    assert!(stats < 30, "{stats} stats: {mine:#?}");
    let Observed::Ok(s) = measured else { panic!() };
    let d = &s.pods[0].dirs[0];
    assert_eq!(d.files, 201);
    assert!(d.bytes >= 200 * 4096 + (1 << 20), "{}", d.bytes);
}

/// A tmpfs mounted at a path for a test (CI runs as root), unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(at: &Path) -> Mounted {
        std::fs::create_dir_all(at).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
            .arg(at)
            .status()
            .expect("mount(8)");
        assert!(
            status.success(),
            "mount -t tmpfs {}: {status} (needs root, as CI runs it)",
            at.display()
        );
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A memory-backed emptyDir and a claim are mounts of their own (here real tmpfs mounts); a
/// hostPath is the node's path; where a claim's or tmpfs's mount is not seen (mounted after
/// the agent started), its empty mount point is not read as its contents.
#[test]
fn memory_host_path_and_claimed_dirs_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostPaths::new(dir.path(), None);
    let kubelet = host.kubelet_dir(None);
    let pod = kubelet.join("pods/u1/volumes");
    let _memory = Mounted::tmpfs(&pod.join("kubernetes.io~empty-dir/spark-local-dir-1"));
    let _claim = Mounted::tmpfs(&pod.join("kubernetes.io~csi/pvc-0a1b/mount"));
    write(
        &pod.join("kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-a/f"),
        4096,
    );
    write(&pod.join("kubernetes.io~csi/pvc-0a1b/mount/blockmgr-b/f"), 8192);
    write(&dir.path().join("mnt/nvme/spark/blockmgr-c/f"), 4096);
    let volumes = vec![
        LocalDirVolume {
            name: "spark-local-dir-1".into(),
            memory: true,
            ..Default::default()
        },
        LocalDirVolume {
            name: "spark-local-dir-2".into(),
            claim: Some("exec-1-pvc-0".into()),
            ..Default::default()
        },
        LocalDirVolume {
            name: "spark-local-dir-3".into(),
            host_path: Some("/mnt/nvme/spark".into()),
            ..Default::default()
        },
        // Not there: skipped.
        volume("spark-local-dir-4"),
    ];
    let pods = [executor("u1", volumes)];
    let mut store = LocalStore::default();
    let now = unix_now();
    store.measure(&host, &kubelet, &pods, now - 60.0, 600.0, ImageFs::default());
    let Observed::Ok(s) = store.measure(&host, &kubelet, &pods, now, 600.0, ImageFs::default()) else {
        panic!()
    };
    assert!(s.unseen.is_empty(), "{:?}", s.unseen);
    let claimed = s.pods[0].dirs.iter().find(|d| d.volume == "spark-local-dir-2").unwrap();
    assert_eq!(claimed.bytes, 8192, "the claim's own file system");
    assert_ne!(claimed.device, s.pods[0].dirs[2].device);
    let dirs = &s.pods[0].dirs;
    let got: Vec<(&str, &DirBacking, &str, bool)> = dirs
        .iter()
        .map(|d| (d.volume.as_str(), &d.backing, d.path.as_str(), d.device.is_some()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "spark-local-dir-1",
                &DirBacking::Memory,
                "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1",
                false
            ),
            (
                "spark-local-dir-2",
                &DirBacking::Claim {
                    claim: "exec-1-pvc-0".into()
                },
                "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-0a1b/mount",
                true
            ),
            (
                "spark-local-dir-3",
                &DirBacking::HostPath {
                    path: "/mnt/nvme/spark".into()
                },
                "/mnt/nvme/spark",
                true
            ),
        ]
    );
    // A finished pod is not measured, and is remembered only while it exists.
    let mut done = pods[0].clone();
    done.phase = "Failed".into();
    let Observed::Ok(s) = store.measure(&host, &kubelet, &[done], now + 60.0, 600.0, ImageFs::default()) else {
        panic!()
    };
    assert!(s.pods.is_empty());
    assert!(s.remembered.contains_key("u1"));
    assert!(s.unseen.is_empty(), "{:?}", s.unseen);
    let Observed::Ok(s) = store.measure(&host, &kubelet, &[], now + 120.0, 600.0, ImageFs::default()) else {
        panic!()
    };
    assert!(s.remembered.is_empty());
}

/// Volumes mounted after the agent started are not seen through its mount of the kubelet's
/// directory: their mount points are plain empty directories there. They are listed as
/// unseen, not measured as empty; a claim without any CSI mount is unseen too.
#[test]
fn mounts_the_agent_does_not_see_are_unseen_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostPaths::new(dir.path(), None);
    let kubelet = host.kubelet_dir(None);
    let pod = kubelet.join("pods/u2/volumes");
    std::fs::create_dir_all(pod.join("kubernetes.io~csi/pvc-9f/mount")).unwrap();
    std::fs::create_dir_all(pod.join("kubernetes.io~empty-dir/spark-local-dir-1")).unwrap();
    let claim = |name: &str| LocalDirVolume {
        name: name.into(),
        claim: Some(format!("exec-2-{name}")),
        ..Default::default()
    };
    let volumes = vec![
        LocalDirVolume {
            name: "spark-local-dir-1".into(),
            memory: true,
            ..Default::default()
        },
        claim("spark-local-dir-2"),
        // A second claim, and only one CSI mount.
        claim("spark-local-dir-3"),
    ];
    let pods = [executor("u2", volumes)];
    let mut store = LocalStore::default();
    let now = unix_now();
    store.measure(&host, &kubelet, &pods, now - 60.0, 600.0, ImageFs::default());
    let Observed::Ok(s) = store.measure(&host, &kubelet, &pods, now, 600.0, ImageFs::default()) else {
        panic!()
    };
    assert!(s.pods.is_empty(), "nothing measured: {:?}", s.pods);
    let got: Vec<(&str, &str, bool)> = s
        .unseen
        .iter()
        .map(|u| {
            (
                u.volume.as_str(),
                u.path.as_str(),
                u.reason.starts_with("not a mount point"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "spark-local-dir-1",
                "/var/lib/kubelet/pods/u2/volumes/kubernetes.io~empty-dir/spark-local-dir-1",
                true
            ),
            (
                "spark-local-dir-2",
                "/var/lib/kubelet/pods/u2/volumes/kubernetes.io~csi/pvc-9f/mount",
                true
            ),
            (
                "spark-local-dir-3",
                "/var/lib/kubelet/pods/u2/volumes/kubernetes.io~csi",
                false
            ),
        ]
    );
    assert_eq!(s.unseen[2].reason, "no CSI volume mount of the pod's here");
}

/// Past `max_recent` recent files, the others are counted as old ones: their bytes are in the
/// total, and an unchanged walk looks at no more than the kept ones again.
#[test]
fn recent_files_past_the_cap_are_counted_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostPaths::new(dir.path(), None);
    let kubelet = host.kubelet_dir(None);
    let vol = kubelet.join("pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1");
    for f in 0..10 {
        write(&vol.join(format!("blockmgr-1/00/shuffle_0_{f}_0.data")), 4096);
    }
    let pods = [executor("u1", vec![volume("spark-local-dir-1")])];
    let mut store = LocalStore::with_max_recent(3);
    let now = unix_now();
    store.measure(&host, &kubelet, &pods, now - 60.0, 600.0, ImageFs::default());
    let _one = trace::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    trace::start();
    let measured = store.measure(&host, &kubelet, &pods, now, 600.0, ImageFs::default());
    let ops = trace::stop();
    let files_looked_at = ops
        .iter()
        .filter(|(op, p)| *op == trace::Op::Stat && p.extension().is_some_and(|e| e == "data"))
        .count();
    assert_eq!(files_looked_at, 3, "{ops:#?}");
    let Observed::Ok(s) = measured else { panic!() };
    let d = &s.pods[0].dirs[0];
    assert_eq!(d.files, 10);
    assert!(d.bytes >= 10 * 4096, "{}", d.bytes);
}

/// With the kubelet's `/stats/summary`, the volumes it measures are its figures, dated at its
/// time (its figure read again is no new point), a claim the agent cannot see is measured all
/// the same on a file system known from the kubelet's figures, and a hostPath is walked;
/// without it again, the walk starts the history over.
#[test]
fn the_kubelets_figures_replace_the_walk_where_it_reports_the_volume() {
    use crate::collect::kubelet_stats::{PodUsage, Summary, VolumeUsage};
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let host = HostPaths::new(dir.path(), None);
    let kubelet = host.kubelet_dir(None);
    let pod = kubelet.join("pods/u3/volumes");
    write(
        &pod.join("kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-1/00/shuffle_0.data"),
        64 * 1024,
    );
    std::fs::create_dir_all(pod.join("kubernetes.io~empty-dir/spark-local-dir-2")).unwrap();
    std::fs::create_dir_all(pod.join("kubernetes.io~csi/pvc-1/mount")).unwrap();
    write(&dir.path().join("mnt/spark/blockmgr-2/shuffle_1.data"), 8 * 1024);
    let volumes = vec![
        volume("spark-local-dir-1"),
        LocalDirVolume {
            name: "spark-local-dir-2".into(),
            memory: true,
            ..Default::default()
        },
        LocalDirVolume {
            name: "spark-local-dir-3".into(),
            claim: Some("exec-3-pvc-0".into()),
            ..Default::default()
        },
        LocalDirVolume {
            name: "spark-local-dir-4".into(),
            host_path: Some("/mnt/spark".into()),
            ..Default::default()
        },
    ];
    let pods = [executor("u3", volumes)];
    let now = unix_now();
    let summary = |at: i64, scale: u64| {
        let used = |name: &str, bytes: u64, capacity: Option<u64>| {
            let usage = VolumeUsage {
                used_bytes: bytes,
                inodes_used: Some(7),
                capacity_bytes: capacity,
                available_bytes: capacity.map(|c| c - bytes),
                at,
                claim: None,
            };
            (name.to_string(), usage)
        };
        let pod = PodUsage {
            volumes: [
                used("spark-local-dir-1", 10 * MIB * scale, None),
                used("spark-local-dir-2", MIB * scale, None),
                used("spark-local-dir-3", 100 * MIB * scale, Some(10_000 * MIB)),
                // The kubelet does not measure a hostPath; were it to, the walk still counts.
                used("spark-local-dir-4", 999, None),
            ]
            .into(),
            ephemeral: Some(nodemedic_rules::snapshot::KubeletCount {
                bytes: 11 * MIB * scale,
                at,
            }),
        };
        Summary {
            pods: [("u3".to_string(), pod)].into(),
        }
    };
    let mut store = LocalStore::default();
    let (first, second) = (summary(now as i64 - 90, 1), summary(now as i64 - 30, 2));
    let measure = |store: &mut LocalStore, at: f64, s: Option<&Summary>| match store.measure_with(
        &host,
        &kubelet,
        &pods,
        at,
        600.0,
        ImageFs::default(),
        s,
    ) {
        Observed::Ok(m) => m,
        other => panic!("{other:?}"),
    };
    store.measure_with(
        &host,
        &kubelet,
        &pods,
        now - 60.0,
        600.0,
        ImageFs::default(),
        Some(&first),
    );
    let s = measure(&mut store, now, Some(&second));
    assert!(s.unseen.is_empty(), "{:?}", s.unseen);
    let p = &s.pods[0];
    let by: Vec<(&str, MeasuredBy, u64)> = p
        .dirs
        .iter()
        .map(|d| (d.volume.as_str(), d.measured_by, d.bytes))
        .collect();
    assert_eq!(
        by[..3],
        [
            ("spark-local-dir-1", MeasuredBy::Kubelet, 20 * MIB),
            ("spark-local-dir-2", MeasuredBy::Kubelet, 2 * MIB),
            ("spark-local-dir-3", MeasuredBy::Kubelet, 200 * MIB),
        ]
    );
    assert_eq!((by[3].0, by[3].1), ("spark-local-dir-4", MeasuredBy::Walk));
    assert!((8 * 1024..64 * 1024).contains(&by[3].2), "{}", by[3].2);
    // Growth between the kubelet's two times, 60 s apart.
    let d1 = &p.dirs[0];
    assert_eq!(d1.measured_at, now as i64 - 30);
    assert_eq!(d1.files, 7);
    assert!((d1.growth_bytes_per_second.unwrap() - (10 * MIB) as f64 / 60.0).abs() < 1.0);
    assert_eq!(p.kubelet_ephemeral.map(|k| k.bytes), Some(22 * MIB));
    // The claim's file system, as the kubelet reports it (the agent does not see the mount).
    let claim = &p.dirs[2];
    let fs = s.filesystem(claim.device.unwrap()).unwrap();
    assert!(fs.device >= KUBELET_ONLY_DEVICES);
    assert_eq!(
        (fs.capacity_bytes, fs.available_bytes, fs.nodefs),
        (10_000 * MIB, 9_800 * MIB, false)
    );
    assert_eq!(p.dirs[1].device, None, "a memory dir is on no file system");
    assert!(s.filesystem(d1.device.unwrap()).unwrap().nodefs);
    // The same figures read again: no new point, the same growth.
    let again = measure(&mut store, now + 60.0, Some(&second));
    assert_eq!(
        again.pods[0].dirs[0].growth_bytes_per_second,
        d1.growth_bytes_per_second
    );
    // The kubelet not read: the emptyDir is walked, and its history starts over. Until the
    // walk's own growth is known the rules cannot judge (they keep what they found).
    match store.measure_with(&host, &kubelet, &pods, now + 120.0, 600.0, ImageFs::default(), None) {
        Observed::Error { reason } => assert!(reason.contains("changed source"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let walked = measure(&mut store, now + 120.0 + MIN_GROWTH_SPAN, None);
    let d1 = &walked.pods[0].dirs[0];
    assert_eq!(d1.measured_by, MeasuredBy::Walk);
    assert!(d1.bytes < MIB, "{}", d1.bytes);
    assert_eq!(d1.growth_bytes_per_second, Some(0.0));
    assert_eq!(walked.pods[0].kubelet_ephemeral, None);
}
