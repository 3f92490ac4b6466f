//! The daemon's configuration: one YAML file (`--config`, the DaemonSet's ConfigMap), with
//! flags and environment variables for the common keys taking precedence over it.
//!
//! Every key is optional; unknown keys and bad values are errors that name the key, at start
//! (`nodemedic run` exits 2), with `nodemedic run --check-config`, and on SIGHUP (the daemon
//! keeps its old configuration and says why).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodemedic_rules::Settings;

use crate::args::{Format, RunArgs};
use crate::collect::read::read_text;

/// A configuration file is small; anything larger is a mistake.
const CONFIG_LIMIT: u64 = 1024 * 1024;

/// The file, as written (every key optional).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    pub scan_interval_seconds: Option<f64>,
    pub local_dir_interval_seconds: Option<f64>,
    pub local_dir_roots: Option<Vec<String>>,
    pub driver_cache_ttl_seconds: Option<f64>,
    pub driver_lookup_budget: Option<u32>,
    pub event_series_interval_seconds: Option<f64>,
    pub condition_heartbeat_seconds: Option<f64>,
    pub request_timeout_seconds: Option<f64>,
    pub probe_interval_seconds: Option<f64>,
    pub probe_timeout_seconds: Option<f64>,
    pub log_format: Option<String>,
    pub rules: Option<Settings>,
    pub repair: Option<RepairConfig>,
}

/// `repair:`: automatic repair in the daemon, every switch off by default. cpu-state is never
/// automatic.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RepairConfig {
    /// Delete orphaned executors that have finished (they only hold local data).
    pub automatic_orphans: bool,
    /// Delete pods the kubelet rejected at admission, once older than `failed_pods_older_than_seconds`.
    pub automatic_failed_pods: bool,
    /// Remove orphaned Spark scratch directories under `local_dir_roots`.
    pub automatic_local_dirs: bool,
    /// Also delete orphans that are still running.
    pub include_running_orphans: bool,
    /// At most this many automatic actions per hour (a sliding window).
    pub max_actions_per_hour: u32,
    /// Rejected pods younger than this are left alone, in seconds.
    pub failed_pods_older_than_seconds: i64,
}

impl Default for RepairConfig {
    fn default() -> Self {
        let p = crate::repair::pods::AutoRepairPolicy::default();
        RepairConfig {
            automatic_orphans: p.orphans,
            automatic_failed_pods: p.failed_pods,
            automatic_local_dirs: p.local_dirs,
            include_running_orphans: p.include_running_orphans,
            max_actions_per_hour: p.max_actions_per_hour,
            failed_pods_older_than_seconds: p.failed_pods_older_than_seconds,
        }
    }
}

impl RepairConfig {
    /// The daemon's policy.
    pub fn policy(&self) -> crate::repair::pods::AutoRepairPolicy {
        crate::repair::pods::AutoRepairPolicy {
            orphans: self.automatic_orphans,
            failed_pods: self.automatic_failed_pods,
            local_dirs: self.automatic_local_dirs,
            max_actions_per_hour: self.max_actions_per_hour,
            include_running_orphans: self.include_running_orphans,
            failed_pods_older_than_seconds: self.failed_pods_older_than_seconds,
        }
    }
}

/// Reads and checks a configuration file; errors name the file and the key.
pub fn read_file(path: &Path) -> Result<FileConfig, String> {
    let shown = path.display().to_string();
    let text = read_text(path, &shown, CONFIG_LIMIT)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{shown}: no such file"))?;
    parse(&text).map_err(|e| format!("{shown}: {e}"))
}

/// Parses and checks a configuration text.
pub fn parse(text: &str) -> Result<FileConfig, String> {
    let cfg: FileConfig = if text.trim().is_empty() {
        FileConfig::default()
    } else {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())?
    };
    let positive = |key: &str, v: Option<f64>| match v {
        Some(s) if !(s.is_finite() && s > 0.0) => Err(format!("{key}: {s} is not a positive number of seconds")),
        _ => Ok(()),
    };
    positive("scan_interval_seconds", cfg.scan_interval_seconds)?;
    positive("local_dir_interval_seconds", cfg.local_dir_interval_seconds)?;
    positive("driver_cache_ttl_seconds", cfg.driver_cache_ttl_seconds)?;
    positive("event_series_interval_seconds", cfg.event_series_interval_seconds)?;
    positive("condition_heartbeat_seconds", cfg.condition_heartbeat_seconds)?;
    positive("request_timeout_seconds", cfg.request_timeout_seconds)?;
    positive("probe_interval_seconds", cfg.probe_interval_seconds)?;
    positive("probe_timeout_seconds", cfg.probe_timeout_seconds)?;
    if let Some(listen) = &cfg.listen {
        listen
            .parse::<std::net::SocketAddr>()
            .map_err(|_| format!("listen: {listen:?} is not an address:port like 0.0.0.0:9904"))?;
    }
    if let Some(f) = &cfg.log_format {
        if f != "text" && f != "json" {
            return Err(format!("log_format: {f:?} is not text or json"));
        }
    }
    for root in cfg.local_dir_roots.iter().flatten() {
        if !root.starts_with('/') {
            return Err(format!("local_dir_roots: {root:?} is not an absolute host path"));
        }
    }
    if let Some(r) = &cfg.repair {
        if r.failed_pods_older_than_seconds < 0 {
            return Err(format!(
                "repair: failed_pods_older_than_seconds: {} is negative",
                r.failed_pods_older_than_seconds
            ));
        }
    }
    if let Some(rules) = &cfg.rules {
        rules.validate().map_err(|e| format!("rules: {e}"))?;
    }
    Ok(cfg)
}

/// What the daemon runs with, after flags, file and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    pub listen: String,
    pub scan_interval: Duration,
    pub local_dir_interval: Duration,
    pub local_dir_roots: Vec<String>,
    pub driver_cache_ttl: Duration,
    pub driver_lookup_budget: u32,
    pub event_series_interval: Duration,
    pub condition_heartbeat: Duration,
    pub request_timeout: Duration,
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    pub log_format: Format,
    pub settings: Settings,
    pub repair: crate::repair::pods::AutoRepairPolicy,
}

/// Seconds as a duration; fractions allowed (tests run fast cycles), never below 50 ms.
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() { s.max(0.05) } else { 0.05 })
}

/// Flags win over the file, the file over the defaults. Rule settings: the file's `rules`,
/// then `--rule-setting` pairs, then `--disable-rule` ids added.
pub fn effective(args: &RunArgs, file: &FileConfig) -> Result<Effective, String> {
    for (flag, v) in [
        ("--scan-interval-seconds", args.scan_interval_seconds),
        ("--local-dir-interval-seconds", args.local_dir_interval_seconds),
        ("--driver-cache-ttl-seconds", args.driver_cache_ttl_seconds),
        ("--event-series-interval-seconds", args.event_series_interval_seconds),
        ("--condition-heartbeat-seconds", args.condition_heartbeat_seconds),
        ("--request-timeout-seconds", args.request_timeout_seconds),
        ("--probe-interval-seconds", args.probe_interval_seconds),
        ("--probe-timeout-seconds", args.probe_timeout_seconds),
    ] {
        if let Some(s) = v {
            if !(s.is_finite() && s > 0.0) {
                return Err(format!("{flag}: {s} is not a positive number of seconds"));
            }
        }
    }
    let settings = crate::cli::settings_from(
        file.rules.clone().unwrap_or_default(),
        &args.rule_setting,
        args.disable_rule.clone(),
    )?;
    let log_format = match (args.log_format, file.log_format.as_deref()) {
        (Some(f), _) => f,
        (None, Some("json")) => Format::Json,
        _ => Format::Text,
    };
    Ok(Effective {
        listen: args
            .listen
            .clone()
            .or_else(|| file.listen.clone())
            .unwrap_or_else(|| "0.0.0.0:9904".into()),
        scan_interval: secs(
            args.scan_interval_seconds
                .or(file.scan_interval_seconds)
                .unwrap_or(30.0),
        ),
        local_dir_interval: secs(
            args.local_dir_interval_seconds
                .or(file.local_dir_interval_seconds)
                .unwrap_or(600.0),
        ),
        local_dir_roots: if args.local_dir_root.is_empty() {
            file.local_dir_roots.clone().unwrap_or_default()
        } else {
            args.local_dir_root.clone()
        },
        driver_cache_ttl: secs(
            args.driver_cache_ttl_seconds
                .or(file.driver_cache_ttl_seconds)
                .unwrap_or(300.0),
        ),
        driver_lookup_budget: args.driver_lookup_budget.or(file.driver_lookup_budget).unwrap_or(100),
        event_series_interval: secs(
            args.event_series_interval_seconds
                .or(file.event_series_interval_seconds)
                .unwrap_or(600.0),
        ),
        condition_heartbeat: secs(
            args.condition_heartbeat_seconds
                .or(file.condition_heartbeat_seconds)
                .unwrap_or(300.0),
        ),
        request_timeout: secs(
            args.request_timeout_seconds
                .or(file.request_timeout_seconds)
                .unwrap_or(10.0),
        ),
        probe_interval: secs(
            args.probe_interval_seconds
                .or(file.probe_interval_seconds)
                .unwrap_or(60.0),
        ),
        probe_timeout: secs(
            args.probe_timeout_seconds
                .or(file.probe_timeout_seconds)
                .unwrap_or(60.0),
        ),
        log_format,
        settings,
        repair: file.repair.clone().unwrap_or_default().policy(),
    })
}

/// Loads the file named by `--config` (none: defaults).
pub fn load(path: Option<&PathBuf>) -> Result<FileConfig, String> {
    match path {
        Some(p) => read_file(p),
        None => Ok(FileConfig::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["nodemedic", "run", "--node", "n1"];
        argv.extend_from_slice(extra);
        match crate::args::Cli::try_parse_from(argv).unwrap().command {
            crate::args::Command::Run(a) => a,
            _ => panic!(),
        }
    }

    #[test]
    fn full_file_and_flag_precedence() {
        let file = parse(FULL).unwrap();
        let e = effective(&run_args(&[]), &file).unwrap();
        assert_eq!(e.scan_interval, Duration::from_secs(15));
        assert_eq!(e.local_dir_roots, ["/mnt/disk1/spark"]);
        assert_eq!(e.log_format, Format::Json);
        assert!(!e.settings.enabled("cpuset-drift"));
        assert_eq!(e.settings.orphan_grace_seconds, 300);
        assert!(e.repair.orphans && !e.repair.failed_pods && !e.repair.local_dirs);
        assert_eq!(e.repair.max_actions_per_hour, 3);
        let e = effective(
            &run_args(&[
                "--scan-interval-seconds",
                "5",
                "--rule-setting",
                "orphan_grace_seconds=60",
                "--log-format",
                "text",
            ]),
            &file,
        )
        .unwrap();
        assert_eq!(e.scan_interval, Duration::from_secs(5));
        assert_eq!(e.settings.orphan_grace_seconds, 60, "a flag wins");
        assert_eq!(
            e.settings.rejection_window_seconds, 1800,
            "the file's other settings stay"
        );
        assert!(!e.settings.enabled("cpuset-drift"));
        assert_eq!(e.log_format, Format::Text);
        let defaults = effective(&run_args(&[]), &FileConfig::default()).unwrap();
        assert_eq!(
            (defaults.scan_interval, defaults.listen.as_str()),
            (Duration::from_secs(30), "0.0.0.0:9904")
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
            let err = parse(text).expect_err(text);
            assert!(err.contains(want), "{text:?}: {err}");
        }
        assert_eq!(parse("").unwrap(), FileConfig::default());
        assert_eq!(parse("# only a comment\n").unwrap(), FileConfig::default());
    }

    #[test]
    fn files_are_read_with_errors_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        assert!(read_file(&p).unwrap_err().ends_with("config.yaml: no such file"));
        std::fs::write(&p, "scan_interval_seconds: 0\n").unwrap();
        let err = read_file(&p).unwrap_err();
        assert!(
            err.starts_with(&p.display().to_string()) && err.contains("scan_interval_seconds: 0 is not a positive"),
            "{err}"
        );
    }
}
