//! The configuration file: parsing, defaults, the documented example.

use super::*;

const FULL: &str = r#"
# every key, as in the DaemonSet's ConfigMap
listen: "0.0.0.0:9904"
scan_interval_seconds: 15
local_dir_interval_seconds: 900
local_dir_roots: ["/mnt/disk1/spark"]
driver_cache_ttl_seconds: 120
driver_lookup_budget: 50
event_series_interval_seconds: 300
condition_heartbeat_seconds: 120
request_timeout_seconds: 5
log_format: json
rules:
  disabled_rules: [cpuset-drift]
  severity_overrides: {executor-without-owner: info}
  reconcile_grace_seconds: 20
  rejection_window_seconds: 1800
  orphan_grace_seconds: 300
  scheduler_conflict_window_seconds: 7200
  local_dir_min_age_seconds: 600
repair:
  automatic_orphans: true
  max_actions_per_hour: 3
"#;

#[test]
fn full_file_and_flag_precedence() {
    let file = parse(FULL).unwrap();
    let e = effective(&Flags::default(), &file).unwrap();
    assert_eq!(e.scan_interval, Duration::from_secs(15));
    assert_eq!(e.local_dir_roots, ["/mnt/disk1/spark"]);
    assert_eq!(e.log_format, Format::Json);
    assert!(!e.settings.enabled("cpuset-drift"));
    assert_eq!(e.settings.orphan_grace_seconds, 300);
    assert!(e.repair.orphans && !e.repair.failed_pods && !e.repair.local_dirs);
    assert_eq!(e.repair.max_actions_per_hour, 3);
    let flags = Flags {
        scan_interval_seconds: Some(5.0),
        rule_setting: vec!["orphan_grace_seconds=60".into()],
        log_format: Some(Format::Text),
        ..Default::default()
    };
    let e = effective(&flags, &file).unwrap();
    assert_eq!(e.scan_interval, Duration::from_secs(5));
    assert_eq!(e.settings.orphan_grace_seconds, 60, "a flag wins");
    assert_eq!(
        e.settings.rejection_window_seconds, 1800,
        "the file's other settings stay"
    );
    assert!(!e.settings.enabled("cpuset-drift"));
    assert_eq!(e.log_format, Format::Text);
    let defaults = effective(&Flags::default(), &FileConfig::default()).unwrap();
    assert_eq!(
        (defaults.scan_interval, defaults.listen.as_str()),
        (Duration::from_secs(30), "0.0.0.0:9904")
    );
}

#[test]
fn settings_that_make_a_rule_meaningless_are_rejected_with_the_key() {
    let with = |unreachable: &str, flags: Flags| {
        let file = parse(&format!("rules:\n  apiserver_unreachable_seconds: {unreachable}\n")).unwrap();
        effective(&flags, &file)
    };
    // At the defaults a sample comes every 60 s (the probe interval; the Lease is read
    // every 48 s): 60 is not enough, 61 is.
    let e = with("60", Flags::default()).unwrap_err();
    assert_eq!(e.to_string().split(':').next(), Some("rules"), "the key is named: {e}");
    assert!(e.to_string().contains("apiserver_unreachable_seconds"), "{e}");
    assert!(e.to_string().contains("60 s"), "{e}");
    assert!(with("61", Flags::default()).is_ok());
    // A flag that stretches the sampling makes a good file bad, and the other way round.
    let slow = Flags {
        lease_duration_seconds: Some(200.0),
        ..Default::default()
    };
    assert!(with("120", slow).is_err(), "a read every 160 s");
    let fast = Flags {
        probe_interval_seconds: Some(5.0),
        lease_duration_seconds: Some(5.0),
        ..Default::default()
    };
    assert!(with("10", fast).is_ok());
    assert_eq!(
        parse("lease_duration_seconds: 2\n").unwrap_err().to_string(),
        "lease_duration_seconds: 2 is too short: the holder renews every third of it (3 s at least)"
    );
}

#[test]
fn bad_files_name_the_key() {
    let cases = [
        (
            "scan_interval_seconds: -3",
            "scan_interval_seconds: -3 is not a positive number",
        ),
        ("scan_intervall_seconds: 3", "unknown field `scan_intervall_seconds`"),
        ("listen: nowhere", "listen: \"nowhere\" is not an address:port"),
        ("log_format: xml", "log_format: \"xml\""),
        ("rules:\n  orphan_grace: 3", "unknown field `orphan_grace`"),
        ("rules:\n  disabled_rules: [nope]", "rules: unknown rule id \"nope\""),
        (
            "rules:\n  severity_overrides: {cpuset-drift: loud}",
            "unknown variant `loud`",
        ),
        (
            "local_dir_roots: [relative/path]",
            "local_dir_roots: \"relative/path\" is not an absolute host path",
        ),
        ("driver_lookup_budget: lots", "driver_lookup_budget"),
        ("[1, 2", ""),
        (
            "repair:\n  automatic_everything: true",
            "unknown field `automatic_everything`",
        ),
        (
            "repair:\n  failed_pods_older_than_seconds: -5",
            "repair: failed_pods_older_than_seconds: -5 is negative",
        ),
    ];
    for (text, want) in cases {
        let err = parse(text).expect_err(text).to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
    assert_eq!(parse("").unwrap(), FileConfig::default());
    assert_eq!(parse("# only a comment\n").unwrap(), FileConfig::default());
}

#[test]
fn files_are_read_with_errors_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.yaml");
    assert!(
        read_file(&p)
            .unwrap_err()
            .to_string()
            .ends_with("config.yaml: no such file")
    );
    std::fs::write(&p, "scan_interval_seconds: 0\n").unwrap();
    let err = read_file(&p).unwrap_err().to_string();
    assert!(
        err.starts_with(&p.display().to_string()) && err.contains("scan_interval_seconds: 0 is not a positive"),
        "{err}"
    );
}

#[test]
fn the_kubelets_url_is_checked_bracketed_and_the_flag_wins() {
    let ok = |u: &str| kubelet_url(u).unwrap();
    assert_eq!(ok(""), None);
    assert_eq!(ok("https://10.0.0.5:10250").as_deref(), Some("https://10.0.0.5:10250"));
    // The component's https://$(NODE_IP):10250 on an IPv6 node.
    assert_eq!(ok("https://fd00::5:10250").as_deref(), Some("https://[fd00::5]:10250"));
    assert_eq!(
        ok("https://[fd00::5]:10250").as_deref(),
        Some("https://[fd00::5]:10250")
    );
    assert_eq!(ok("https://fd00::5").as_deref(), Some("https://[fd00::5]"));
    for bad in [
        "10.0.0.5:10250",
        "ftp://10.0.0.5",
        "https://",
        "https://$(NODE_IP):10250",
    ] {
        let err = kubelet_url(bad).unwrap_err().to_string();
        assert_eq!(err, format!("{bad:?} is not a URL like https://10.0.0.5:10250"));
    }
    let e = parse("kubelet_stats_url: \"ftp://x\"\n").unwrap_err().to_string();
    assert!(e.starts_with("kubelet_stats_url: "), "{e}");
    // The flag (its variable) wins over the file; an empty flag unsets it.
    let file = parse("kubelet_stats_url: https://10.0.0.5:10250\nkubelet_stats_insecure_tls: true\n").unwrap();
    let eff = effective(&Flags::default(), &file).unwrap();
    assert_eq!(
        (eff.kubelet_stats_url.as_deref(), eff.kubelet_stats_insecure_tls),
        (Some("https://10.0.0.5:10250"), true)
    );
    let flags = Flags {
        kubelet_stats_url: Some("https://10.0.0.6:10250".into()),
        kubelet_stats_insecure_tls: Some(false),
        ..Default::default()
    };
    let eff = effective(&flags, &file).unwrap();
    assert_eq!(
        (eff.kubelet_stats_url.as_deref(), eff.kubelet_stats_insecure_tls),
        (Some("https://10.0.0.6:10250"), false)
    );
    let unset = Flags {
        kubelet_stats_url: Some(String::new()),
        ..Default::default()
    };
    assert_eq!(effective(&unset, &file).unwrap().kubelet_stats_url, None);
    let bad = Flags {
        kubelet_stats_url: Some("10.0.0.6".into()),
        ..Default::default()
    };
    let e = effective(&bad, &file).unwrap_err().to_string();
    assert!(e.starts_with("--kubelet-stats-url: "), "{e}");
}
