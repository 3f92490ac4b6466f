//! Tests of [`super`] (kubelet.rs keeps the code, this file its tests).

use super::*;

fn args(s: &[&str]) -> Vec<String> {
    s.iter().map(|a| a.to_string()).collect()
}

#[test]
fn durations() {
    for (t, want) in [
        ("10s", 10.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("0", 0.0),
        ("2m", 120.0),
    ] {
        assert_eq!(parse_go_duration(t), Ok(want), "{t}");
    }
    for t in ["", "10", "s", "10x", "-1s", "1..2s"] {
        assert!(parse_go_duration(t).is_err(), "{t}");
    }
    let e = parse_go_duration("10x").unwrap_err();
    assert_eq!(e, KubeletConfigError::Duration { text: "10x".into() });
    assert_eq!(e.to_string(), "invalid duration \"10x\"");
}

/// A wrong flag's error names the flag and its value; a wrong key's, the key.
#[test]
fn config_errors_name_the_key_or_flag() {
    let e = parse_kubelet_config(None, &args(&["kubelet", "--cpu-manager-reconcile-period=soon"])).unwrap_err();
    assert_eq!(
        e,
        KubeletConfigError::Key {
            key: "--cpu-manager-reconcile-period",
            source: Box::new(KubeletConfigError::Duration { text: "soon".into() }),
        }
    );
    assert_eq!(
        e.to_string(),
        "--cpu-manager-reconcile-period: invalid duration \"soon\""
    );
    let e = parse_kubelet_config(None, &args(&["kubelet", "--reserved-cpus=1.3"])).unwrap_err();
    assert!(
        matches!(
            e,
            KubeletConfigError::Cpus {
                key: "--reserved-cpus",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "--reserved-cpus: invalid cpuset token \"1.3\": not a CPU id or a low-high range"
    );
}

#[test]
fn flags() {
    let a = args(&[
        "kubelet",
        "--config=/etc/k.yaml",
        "--root-dir",
        "/data/kubelet",
        "--v=2",
        "--config",
        "/etc/k2.yaml",
    ]);
    assert_eq!(flag_value(&a, "config").as_deref(), Some("/etc/k2.yaml"));
    assert_eq!(flag_value(&a, "root-dir").as_deref(), Some("/data/kubelet"));
    assert_eq!(flag_value(&a, "cgroup-root"), None);
    assert_eq!(flag_value(&args(&["kubelet", "--config"]), "config"), None);
}

const YAML: &str = r#"
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cpuManagerPolicy: static
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
  strict-cpu-reservation: true
cpuManagerReconcilePeriod: 5s
topologyManagerPolicy: single-numa-node
kubeReserved:
  cpu: 500m
  memory: 1Gi
systemReserved:
  cpu: 1
evictionHard:
  memory.available: 100Mi
"#;

#[test]
fn file_then_flags() {
    let k = parse_kubelet_config(Some(YAML), &[]).unwrap();
    let (cpu, driver, root) = (k.cpu_manager, k.cgroup_driver, k.cgroup_root);
    assert_eq!(cpu.policy, "static");
    assert_eq!(cpu.reconcile_period_seconds, 5.0);
    assert_eq!(cpu.kube_reserved_cpu.as_deref(), Some("500m"));
    assert_eq!(cpu.system_reserved_cpu.as_deref(), Some("1"));
    assert!(cpu.strict_cpu_reservation());
    assert_eq!(cpu.policy_options["full-pcpus-only"], "true");
    assert_eq!((driver.as_str(), root.as_str()), ("systemd", "/"));
    assert_eq!(k.topology_manager_policy, "single-numa-node");
    assert_eq!(k.topology_manager_scope, "container");

    let flags = args(&[
        "kubelet",
        "--cpu-manager-policy=none",
        "--reserved-cpus=0-1",
        "--cgroup-root=/custom",
        "--kube-reserved=cpu=2,memory=1Gi",
        "--topology-manager-policy=restricted",
        "--topology-manager-scope=pod",
    ]);
    let k = parse_kubelet_config(Some(YAML), &flags).unwrap();
    assert_eq!(k.topology_manager_policy, "restricted");
    assert_eq!(k.topology_manager_scope, "pod");
    let (cpu, root) = (k.cpu_manager, k.cgroup_root);
    assert_eq!(cpu.policy, "none");
    assert_eq!(cpu.reserved_system_cpus.unwrap().to_string(), "0-1");
    assert_eq!(cpu.kube_reserved_cpu.as_deref(), Some("2"));
    assert_eq!(root, "/custom");
}

/// `evictionHard`, `evictionSoft` and `mergeDefaultEvictionSettings` from the file, the
/// `signal<value` flags over them; unset is `None` (the kubelet's defaults apply).
#[test]
fn eviction_thresholds_from_the_file_and_the_flags() {
    let yaml = "evictionHard:\n  memory.available: 200Mi\n  nodefs.available: \"5%\"\nevictionSoft:\n  nodefs.available: 15%\nmergeDefaultEvictionSettings: true\n";
    let k = parse_kubelet_config(Some(yaml), &[]).unwrap();
    let hard = k.eviction.hard.clone().unwrap();
    assert_eq!(hard["nodefs.available"], "5%");
    assert_eq!(hard["memory.available"], "200Mi");
    assert_eq!(k.eviction.soft.clone().unwrap()["nodefs.available"], "15%");
    assert!(k.eviction.merge_defaults);
    let k = parse_kubelet_config(
        Some(yaml),
        &args(&["kubelet", "--eviction-hard=memory.available<100Mi,nodefs.available<2Gi"]),
    )
    .unwrap();
    assert_eq!(k.eviction.hard.unwrap()["nodefs.available"], "2Gi");
    let none = parse_kubelet_config(None, &[]).unwrap();
    assert_eq!(none.eviction, Default::default());
}

#[test]
fn defaults_and_bad_input() {
    let k = parse_kubelet_config(None, &[]).unwrap();
    assert_eq!(
        (k.topology_manager_policy.as_str(), k.topology_manager_scope.as_str()),
        ("none", "container")
    );
    let (cpu, driver, root) = (k.cpu_manager, k.cgroup_driver, k.cgroup_root);
    assert_eq!((cpu.policy.as_str(), cpu.reconcile_period_seconds), ("none", 10.0));
    assert_eq!((driver.as_str(), root.as_str()), ("cgroupfs", "/"));
    let cases = [
        ("cpuManagerPolicy: [static", "invalid KubeletConfiguration YAML"),
        (
            "reservedSystemCPUs: \"1.3\"",
            "reservedSystemCPUs: invalid cpuset token \"1.3\"",
        ),
        (
            "cpuManagerReconcilePeriod: soon",
            "cpuManagerReconcilePeriod: invalid duration \"soon\"",
        ),
        ("cpuManagerPolicy: {a: b}", "invalid KubeletConfiguration YAML"),
    ];
    for (yaml, want) in cases {
        let err = parse_kubelet_config(Some(yaml), &[]).unwrap_err().to_string();
        assert!(err.contains(want), "{yaml}: {err}");
    }
}

#[test]
fn drop_ins_merge_over_the_file_and_flags_win() {
    let file = "cpuManagerPolicy: none\nkubeReserved:\n  cpu: 500m\n  memory: 1Gi\ncgroupDriver: systemd\n";
    let drop_ins = vec![
            (
                "/etc/kubernetes/kubelet.conf.d/10-cpu.conf".to_string(),
                // JSON is YAML; a map merges key by key.
                r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cpuManagerPolicy": "static", "kubeReserved": {"memory": "2Gi"}}"#.to_string(),
            ),
            (
                "/etc/kubernetes/kubelet.conf.d/20-reserved.conf".to_string(),
                "reservedSystemCPUs: \"0,8\"\ncgroupDriver: null\n".to_string(),
            ),
        ];
    let k = parse_layers(Some(file), &drop_ins, &[]).unwrap();
    assert_eq!(k.cpu_manager.policy, "static");
    assert_eq!(k.cpu_manager.kube_reserved_cpu.as_deref(), Some("500m"));
    assert_eq!(k.cpu_manager.reserved_system_cpus.unwrap().to_string(), "0,8");
    // `null` removes the key: the default again.
    assert_eq!(k.cgroup_driver, "cgroupfs");
    // Flags over the drop-ins, as the kubelet re-applies them last.
    let k = parse_layers(Some(file), &drop_ins, &args(&["kubelet", "--reserved-cpus=1"])).unwrap();
    assert_eq!(k.cpu_manager.reserved_system_cpus.unwrap().to_string(), "1");
    // Drop-ins alone (k3s writes no main file).
    let k = parse_layers(None, &drop_ins[..1], &[]).unwrap();
    assert_eq!(k.cpu_manager.policy, "static");
    // A bad drop-in is named.
    let bad = vec![("/d/99-bad.conf".to_string(), "cpuManagerPolicy: [static".to_string())];
    let err = parse_layers(Some(file), &bad, &[]).unwrap_err();
    assert!(
        matches!(&err, KubeletConfigError::DropIn { path, source }
            if path == "/d/99-bad.conf" && matches!(**source, KubeletConfigError::Yaml { .. })),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("drop-in /d/99-bad.conf: invalid KubeletConfiguration YAML"),
        "{err}"
    );
    let err = parse_layers(Some("- a list"), &[], &[]).unwrap_err();
    assert_eq!(err, KubeletConfigError::NotAMapping);
    assert_eq!(
        err.to_string(),
        "invalid KubeletConfiguration YAML: the document is not a mapping"
    );
}

/// A host tree: `files` (host path, content) under a temporary root.
fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, HostPaths) {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let local = dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(local.parent().unwrap()).unwrap();
        std::fs::write(local, content).unwrap();
    }
    std::fs::create_dir_all(dir.path().join("proc")).unwrap();
    let host = HostPaths::new(dir.path(), None);
    (dir, host)
}

const STATIC_08: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0,8\"\n";
const PACKAGE_UNIT: &str =
    "[Unit]\nDescription=kubelet: The Kubernetes Node Agent\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n";
const KUBEADM_DROP_IN: &str = "[Service]\n\
        Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"\n\
        Environment=\"KUBELET_CONFIG_ARGS=--config=/etc/kubernetes/kubelet-config.yaml\"\n\
        EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n\
        EnvironmentFile=-/etc/default/kubelet\n\
        ExecStart=\n\
        ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n";

fn ok(host: &HostPaths) -> KubeletConfig {
    match read_kubelet(host).config {
        Observed::Ok(k) => k,
        other => panic!("{other:?}"),
    }
}

/// The case of the issue: no kubelet runs; kubeadm's drop-in names a configuration outside
/// the kubelet directory. Before, the scan fell back to `/var/lib/kubelet/config.yaml`,
/// found nothing, and judged with no reserved CPUs.
#[test]
fn kubeadm_drop_in_names_the_config_of_a_stopped_kubelet() {
    let drop_in = "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf";
    let (_d, host) = tree(&[
        ("/lib/systemd/system/kubelet.service", PACKAGE_UNIT),
        (drop_in, KUBEADM_DROP_IN),
        ("/etc/kubernetes/kubelet-config.yaml", STATIC_08),
        (
            "/var/lib/kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --cgroup-driver=systemd\"\n",
        ),
        // KUBELET_EXTRA_ARGS is last: it wins.
        (
            "/etc/default/kubelet",
            "KUBELET_EXTRA_ARGS=--cgroup-driver=cgroupfs --root-dir=/data/kubelet\n",
        ),
    ]);
    let found = read_kubelet(&host);
    assert_eq!(found.root_dir.as_deref(), Some("/data/kubelet"));
    let k = ok(&host);
    assert_eq!(k.path.as_deref(), Some("/etc/kubernetes/kubelet-config.yaml"));
    assert_eq!(k.found_by, FoundBy::SystemdUnit { file: drop_in.into() });
    assert_eq!(k.found_by.to_string(), format!("systemd unit {drop_in}"));
    assert_eq!(
        k.found_by.describe().unwrap(),
        format!("from the systemd drop-in {drop_in}")
    );
    assert_eq!(k.cpu_manager.policy, "static");
    assert_eq!(k.cpu_manager.reserved_system_cpus.unwrap().to_string(), "0,8");
    assert_eq!(k.cgroup_driver, "cgroupfs");
    assert_eq!(k.started_at, None);
}

/// The running kubelet's command line wins over its unit's.
#[test]
fn a_running_kubelet_wins_over_its_unit() {
    let (d, host) = tree(&[
        ("/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", KUBEADM_DROP_IN),
        ("/etc/systemd/system/kubelet.service", PACKAGE_UNIT),
        ("/etc/kubernetes/kubelet-config.yaml", STATIC_08),
        ("/etc/kubernetes/other.yaml", "cpuManagerPolicy: none\n"),
    ]);
    std::fs::create_dir_all(d.path().join("proc/4242")).unwrap();
    std::fs::write(
        d.path().join("proc/4242/cmdline"),
        "/usr/bin/kubelet\0--config=/etc/kubernetes/other.yaml\0",
    )
    .unwrap();
    let k = ok(&host);
    assert_eq!(k.found_by, FoundBy::Cmdline);
    assert_eq!(k.found_by.describe(), None);
    assert_eq!(k.path.as_deref(), Some("/etc/kubernetes/other.yaml"));
    assert_eq!(k.cpu_manager.policy, "none");
}

/// The other distributions' layouts, each with the kubelet stopped.
#[test]
fn distribution_layouts_with_the_kubelet_stopped() {
    // EKS AL2: --config on the unit's ExecStart, flags in a drop-in with single quotes and
    // continuation lines.
    let (_d, host) = tree(&[
        (
            "/etc/systemd/system/kubelet.service",
            "[Service]\nExecStartPre=/sbin/iptables -P FORWARD ACCEPT -w 5\nExecStart=/usr/bin/kubelet \\\n    --config /etc/kubernetes/kubelet/kubelet-config.json \\\n    --kubeconfig /var/lib/kubelet/kubeconfig \\\n    $KUBELET_ARGS \\\n    $KUBELET_EXTRA_ARGS\n",
        ),
        (
            "/etc/systemd/system/kubelet.service.d/10-kubelet-args.conf",
            "[Service]\nEnvironment='KUBELET_ARGS=--node-ip=10.0.0.7 --pod-infra-container-image=pause:3.5 --v=2'\n",
        ),
        (
            "/etc/systemd/system/kubelet.service.d/30-kubelet-extra-args.conf",
            "[Service]\nEnvironment='KUBELET_EXTRA_ARGS=--reserved-cpus=0-1'\n",
        ),
        (
            "/etc/kubernetes/kubelet/kubelet-config.json",
            r#"{"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1", "cpuManagerPolicy": "static", "kubeReserved": {"cpu": "70m"}}"#,
        ),
    ]);
    let k = ok(&host);
    assert_eq!(k.path.as_deref(), Some("/etc/kubernetes/kubelet/kubelet-config.json"));
    assert_eq!(
        k.found_by.describe().unwrap(),
        "from the systemd unit /etc/systemd/system/kubelet.service"
    );
    assert_eq!(k.cpu_manager.reserved_system_cpus.unwrap().to_string(), "0-1");

    // EKS AL2023 (nodeadm): flags and --config-dir in an environment file.
    let (_d, host) = tree(&[
        (
            "/etc/systemd/system/kubelet.service",
            "[Service]\nSlice=runtime.slice\nEnvironmentFile=/etc/eks/kubelet/environment\nExecStart=/usr/bin/kubelet \\\n    --config /etc/kubernetes/kubelet/config.json \\\n    $NODEADM_KUBELET_ARGS \\\n    $KUBELET_EXTRA_ARGS\n",
        ),
        (
            "/etc/eks/kubelet/environment",
            "NODEADM_KUBELET_ARGS=\"--node-ip=10.0.0.7 --config-dir=/etc/kubernetes/kubelet/config.json.d\"\n",
        ),
        ("/etc/kubernetes/kubelet/config.json", r#"{"cpuManagerPolicy": "none"}"#),
        (
            "/etc/kubernetes/kubelet/config.json.d/00-nodeadm.conf",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n",
        ),
        (
            "/etc/kubernetes/kubelet/config.json.d/sub/10-late.conf",
            "reservedSystemCPUs: \"3\"\n",
        ),
        (
            "/etc/kubernetes/kubelet/config.json.d/README",
            "cpuManagerPolicy: none\n",
        ),
    ]);
    let k = ok(&host);
    assert_eq!(k.cpu_manager.policy, "static");
    assert_eq!(k.cpu_manager.reserved_system_cpus.unwrap().to_string(), "3");
    assert_eq!(
        k.found_by,
        FoundBy::SystemdUnit {
            file: "/etc/systemd/system/kubelet.service".into()
        }
    );

    // GKE COS and kube-up: every flag in KUBELET_OPTS of /etc/default/kubelet, `--config`
    // as two words.
    let (_d, host) = tree(&[
        (
            "/etc/systemd/system/kubelet.service",
            "[Unit]\nDescription=Kubernetes kubelet\n[Service]\nRestart=always\nEnvironmentFile=/etc/default/kubelet\nExecStart=/home/kubernetes/bin/kubelet $KUBELET_OPTS\n",
        ),
        (
            "/etc/default/kubelet",
            "KUBELET_OPTS=\"--v=2 --cloud-provider=external --config /home/kubernetes/kubelet-config.yaml --cgroup-driver=systemd\"\nKUBE_COVERAGE_FILE=\"/var/log/kubelet.cov\"\n",
        ),
        ("/home/kubernetes/kubelet-config.yaml", STATIC_08),
    ]);
    let k = ok(&host);
    assert_eq!(k.path.as_deref(), Some("/home/kubernetes/kubelet-config.yaml"));
    assert_eq!(
        k.found_by.describe().unwrap(),
        "from /etc/default/kubelet, read by the kubelet's systemd unit"
    );
    assert_eq!(k.cgroup_driver, "systemd");

    // kOps: DAEMON_ARGS in /etc/sysconfig/kubelet, quoted on ExecStart.
    let (_d, host) = tree(&[
        (
            "/lib/systemd/system/kubelet.service",
            "[Service]\nEnvironmentFile=/etc/sysconfig/kubelet\nExecStart=/usr/local/bin/kubelet \"$DAEMON_ARGS\"\n",
        ),
        (
            "/etc/sysconfig/kubelet",
            "DAEMON_ARGS=\"--node-ip=10.0.0.7 --config=/var/lib/kubelet/kubelet.conf\"\nHOME=\"/root\"\n",
        ),
        ("/var/lib/kubelet/kubelet.conf", STATIC_08),
    ]);
    let k = ok(&host);
    assert_eq!(k.path.as_deref(), Some("/var/lib/kubelet/kubelet.conf"));
    assert_eq!(
        k.found_by,
        FoundBy::SystemdUnit {
            file: "/etc/sysconfig/kubelet".into()
        }
    );
}

#[test]
fn default_paths_missing_and_errors() {
    // No kubelet, no unit: the distributions' usual files, kubeadm's first.
    let (_d, host) = tree(&[
        (
            "/etc/kubernetes/kubelet/config.json",
            r#"{"cpuManagerPolicy": "static"}"#,
        ),
        ("/home/kubernetes/kubelet-config.yaml", "cpuManagerPolicy: none\n"),
    ]);
    let k = ok(&host);
    assert_eq!(k.path.as_deref(), Some("/etc/kubernetes/kubelet/config.json"));
    assert_eq!(
        (k.found_by.clone(), k.found_by.to_string()),
        (FoundBy::DefaultPath, "default path".to_string())
    );
    assert_eq!(k.cpu_manager.policy, "static");
    let (_d, host) = tree(&[
        ("/var/lib/kubelet/config.yaml", STATIC_08),
        ("/etc/kubernetes/kubelet/config.json", r#"{"cpuManagerPolicy": "none"}"#),
        (
            "/var/lib/kubelet/kubeadm-flags.env",
            "KUBELET_KUBEADM_ARGS=\"--cgroup-driver=systemd --hostname-override=node-7 --reserved-cpus=2\"\n",
        ),
    ]);
    let k = ok(&host);
    assert_eq!(k.path.as_deref(), Some("/var/lib/kubelet/config.yaml"));
    // kubeadm's flags beside it apply over it, as its drop-in would put them.
    assert_eq!(k.cgroup_driver, "systemd");
    assert_eq!(k.cpu_manager.reserved_system_cpus.unwrap().to_string(), "2");
    assert_eq!(read_kubelet(&host).hostname_override.as_deref(), Some("node-7"));

    // Nothing anywhere: missing, not the defaults.
    let (_d, host) = tree(&[]);
    assert_eq!(
        read_kubelet(&host).config,
        Observed::Missing {
            path: "/var/lib/kubelet/config.yaml".into()
        }
    );

    // The unit names a file the agent does not see: an error naming both.
    let (_d, host) = tree(&[
        ("/usr/lib/systemd/system/kubelet.service", PACKAGE_UNIT),
        (
            "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
            KUBEADM_DROP_IN,
        ),
        ("/var/lib/kubelet/config.yaml", STATIC_08),
    ]);
    let Observed::Error { reason } = read_kubelet(&host).config else {
        panic!()
    };
    assert!(
        reason.starts_with(
            "no kubelet runs, and its systemd unit starts it with --config /etc/kubernetes/kubelet-config.yaml \
                 (/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf), which is not visible at \
                 /etc/kubernetes/kubelet-config.yaml: its directory is not mounted into the agent"
        ),
        "{reason}"
    );

    // A drop-in in /etc hides the one of the same name in /usr/lib.
    let (_d, host) = tree(&[
        ("/usr/lib/systemd/system/kubelet.service", PACKAGE_UNIT),
        (
            "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
            KUBEADM_DROP_IN,
        ),
        (
            "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
            "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml\n",
        ),
        ("/var/lib/kubelet/config.yaml", STATIC_08),
    ]);
    assert_eq!(ok(&host).path.as_deref(), Some("/var/lib/kubelet/config.yaml"));

    // A required environment file that is not visible: the flags are unknown.
    let (_d, host) = tree(&[(
        "/etc/systemd/system/kubelet.service",
        "[Service]\nEnvironmentFile=/etc/default/kubelet\nExecStart=/home/kubernetes/bin/kubelet $KUBELET_OPTS\n",
    )]);
    let Observed::Error { reason } = read_kubelet(&host).config else {
        panic!()
    };
    assert_eq!(
        reason,
        "no kubelet runs, and its systemd unit /etc/systemd/system/kubelet.service reads /etc/default/kubelet \
             (EnvironmentFile=), which the agent does not see: its flags are unknown"
    );

    // A unit whose ExecStart cannot be split.
    let (_d, host) = tree(&[(
        "/etc/systemd/system/kubelet.service",
        "[Service]\nExecStart=/usr/bin/kubelet \"--config=/x\n",
    )]);
    let Observed::Error { reason } = read_kubelet(&host).config else {
        panic!()
    };
    assert_eq!(
        reason,
        "no kubelet runs, and its systemd unit cannot be read: /etc/systemd/system/kubelet.service: ExecStart: \
             unterminated \" quote"
    );

    // A masked unit (a link to /dev/null) starts nothing: the default paths.
    let (d, host) = tree(&[("/var/lib/kubelet/config.yaml", STATIC_08)]);
    std::fs::create_dir_all(d.path().join("etc/systemd/system")).unwrap();
    std::os::unix::fs::symlink("/dev/null", d.path().join("etc/systemd/system/kubelet.service")).unwrap();
    assert_eq!(ok(&host).found_by, FoundBy::DefaultPath);

    // A unit file linked with an absolute target is read under the host root.
    let (d, host) = tree(&[
        (
            "/opt/units/kubelet.service",
            "[Service]\nExecStart=/usr/bin/kubelet --config=/etc/k.yaml\n",
        ),
        ("/etc/k.yaml", STATIC_08),
    ]);
    std::fs::create_dir_all(d.path().join("etc/systemd/system")).unwrap();
    std::os::unix::fs::symlink(
        "/opt/units/kubelet.service",
        d.path().join("etc/systemd/system/kubelet.service"),
    )
    .unwrap();
    assert_eq!(ok(&host).path.as_deref(), Some("/etc/k.yaml"));
}

proptest::proptest! {
    #[test]
    fn config_reader_never_panics(yaml in "\\PC{0,200}", duration in "[0-9.a-zµ]{0,12}") {
        let _ = parse_kubelet_config(Some(&yaml), &[]);
        let _ = parse_kubelet_config(Some(&format!("cpuManagerPolicy: static\nreservedSystemCPUs: \"{yaml}\"\n")), &[]);
        let _ = parse_go_duration(&duration);
    }
}

/// `containerRuntimeEndpoint` from the file, the flag over it, the kubelet's default (containerd)
/// when neither says.
#[test]
fn the_runtime_endpoint_from_the_file_the_flag_or_the_default() {
    let none = parse_kubelet_config(None, &[]).unwrap();
    assert_eq!(
        none.container_runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    let yaml = "containerRuntimeEndpoint: unix:///var/run/crio/crio.sock\n";
    let k = parse_kubelet_config(Some(yaml), &[]).unwrap();
    assert_eq!(k.container_runtime_endpoint, "unix:///var/run/crio/crio.sock");
    let k = parse_kubelet_config(
        Some(yaml),
        &args(&[
            "kubelet",
            "--container-runtime-endpoint=unix:///var/run/cri-dockerd.sock",
        ]),
    )
    .unwrap();
    assert_eq!(k.container_runtime_endpoint, "unix:///var/run/cri-dockerd.sock");
}
