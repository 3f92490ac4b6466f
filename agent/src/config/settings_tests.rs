//! Flags over the file over the defaults, and the errors that name what is wrong.

use super::*;

#[test]
fn rule_settings() {
    let s = settings_from(
        Settings::default(),
        &[
            "reconcile_grace_seconds=2.5".into(),
            "rejection_window_seconds=60".into(),
        ],
        vec!["cpuset-drift".into()],
    )
    .unwrap();
    assert_eq!(s.reconcile_grace_seconds, Some(2.5));
    assert_eq!(s.rejection_window_seconds, 60);
    assert!(!s.enabled("cpuset-drift"));
    let err = |pairs: &[&str], disabled: &[&str]| {
        settings_from(
            Settings::default(),
            &pairs.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            disabled.iter().map(|s| s.to_string()).collect(),
        )
        .unwrap_err()
        .to_string()
    };
    assert!(err(&["nope=1"], &[]).contains("unknown field `nope`"));
    assert!(err(&["rejection_window_seconds=soon"], &[]).contains("invalid type: string \"soon\""));
    assert!(err(&["novalue"], &[]).contains("expected KEY=VALUE"));
    assert!(err(&[], &["no-such-rule"]).contains("unknown rule id"));
    assert_eq!(setting_value("[a, b]"), serde_json::json!(["a", "b"]));
}

/// Each failure is its own variant, naming the file, key or flag, and reads as it always
/// has.
#[test]
fn errors_are_typed_and_read_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.yaml");
    let shown = p.display().to_string();
    let e = read_file(&p).unwrap_err();
    assert!(matches!(&e, ConfigError::Missing { file } if *file == shown), "{e:?}");
    assert_eq!(e.to_string(), format!("{shown}: no such file"));
    let e = read_file(dir.path()).unwrap_err();
    assert!(matches!(&e, ConfigError::Read(ReadError::IsDir { .. })), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!("{}: is a directory, not a file", dir.path().display())
    );
    std::fs::write(&p, "scan_interval_seconds: 0\n").unwrap();
    let e = read_file(&p).unwrap_err();
    assert!(
        matches!(&e, ConfigError::InFile { file, source } if *file == shown
            && matches!(&**source, ConfigError::Key { key, problem: Problem::NotPositive(v) }
                if key == "scan_interval_seconds" && *v == 0.0)),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!("{shown}: scan_interval_seconds: 0 is not a positive number of seconds")
    );
    std::fs::write(&p, "[1, 2").unwrap();
    let e = read_file(&p).unwrap_err();
    assert!(
        matches!(&e, ConfigError::InFile { source, .. } if matches!(**source, ConfigError::Yaml { .. })),
        "{e:?}"
    );
    assert!(
        e.to_string().starts_with(&format!("{shown}: the configuration: ")),
        "{e}"
    );

    let e = parse("listen: nowhere").unwrap_err();
    assert!(matches!(&e, ConfigError::Key { problem: Problem::NotAnAddress(a), .. } if a == "nowhere"));
    assert_eq!(
        e.to_string(),
        "listen: \"nowhere\" is not an address:port like 0.0.0.0:9904"
    );
    let e = parse("fencing:\n  journal: relative\n").unwrap_err();
    assert!(
        matches!(&e, ConfigError::Key { key, problem: Problem::Fencing(_) } if key == "fencing"),
        "{e:?}"
    );

    let flags = Flags {
        scan_interval_seconds: Some(-1.0),
        ..Default::default()
    };
    let e = effective(&flags, &FileConfig::default()).unwrap_err();
    assert!(matches!(
        &e,
        ConfigError::Flag {
            flag: "--scan-interval-seconds",
            problem: Problem::NotPositive(_)
        }
    ));
    assert_eq!(
        e.to_string(),
        "--scan-interval-seconds: -1 is not a positive number of seconds"
    );
    // The flags are checked for what the file's keys are: run would refuse them.
    for (flags, message) in [
        (
            Flags {
                listen: Some("127.0.0.1:99999".into()),
                ..Default::default()
            },
            "--listen: \"127.0.0.1:99999\" is not an address:port like 0.0.0.0:9904",
        ),
        (
            Flags {
                lease_duration_seconds: Some(1.0),
                ..Default::default()
            },
            "--lease-duration-seconds: ",
        ),
        (
            Flags {
                local_dir_root: vec!["/data".into(), "scratch".into()],
                ..Default::default()
            },
            "--local-dir-root: ",
        ),
    ] {
        let e = effective(&flags, &FileConfig::default()).unwrap_err();
        assert!(e.to_string().starts_with(message), "{e}");
    }
    let fine = Flags {
        listen: Some("[::]:9904".into()),
        lease_duration_seconds: Some(3.0),
        local_dir_root: vec!["/data".into()],
        ..Default::default()
    };
    assert_eq!(effective(&fine, &FileConfig::default()).unwrap().listen, "[::]:9904");
    let e = settings_from(Settings::default(), &["novalue".into()], vec![]).unwrap_err();
    assert!(matches!(
        &e,
        ConfigError::Flag {
            flag: "--rule-setting",
            problem: Problem::NotKeyValue(_)
        }
    ));
    assert_eq!(e.to_string(), "--rule-setting: \"novalue\": expected KEY=VALUE");
    let e = settings_from(Settings::default(), &[], vec!["nope".into()]).unwrap_err();
    assert!(
        matches!(&e, ConfigError::Flag { flag: "--disable-rule", problem: Problem::UnknownRule(id) } if id == "nope")
    );
    assert_eq!(
        e.to_string(),
        "--disable-rule: unknown rule id \"nope\" (see `nodemedic rules`)"
    );
    let e = driver_checkpoints_from_flags(&["nvidia-gpu".into()]).unwrap_err();
    assert!(matches!(
        &e,
        ConfigError::Flag {
            flag: "--dra-driver-checkpoint",
            problem: Problem::DriverCheckpoint(_)
        }
    ));
    assert!(
        e.to_string()
            .starts_with("--dra-driver-checkpoint: \"nvidia-gpu\": expected FORMAT=PATH"),
        "{e}"
    );
}

#[test]
fn the_repair_section_is_the_policy() {
    let file = parse("repair:\n  automatic_local_dirs: true\n  failed_pods_older_than_seconds: 60\n").unwrap();
    let policy = file.repair.unwrap();
    assert!(policy.local_dirs && !policy.orphans && !policy.failed_pods);
    assert_eq!(policy.failed_pods_older_than_seconds, 60);
    assert_eq!(
        policy.max_actions_per_hour,
        AutoRepairPolicy::default().max_actions_per_hour
    );
}
