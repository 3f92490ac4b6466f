//! The daemon's configuration: one YAML file (`--config`, the DaemonSet's ConfigMap), with
//! flags and environment variables for the common keys taking precedence over it.
//!
//! Every key is optional; unknown keys and bad values are errors that name the key, at start
//! (`nodemedic run` exits 2), with `nodemedic run --check-config`, and on SIGHUP (the daemon
//! keeps its old configuration and says why).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodemedic_rules::Settings;

use crate::collect::managers::{DriverCheckpoint, DriverCheckpointError};
use crate::collect::read::{ReadError, read_text};
use crate::fence::{FencePolicy, PolicyError};
use crate::output::Format;
use crate::repair::auto::AutoRepairPolicy;
use nodemedic_rules::rules;

/// A configuration file is small; anything larger is a mistake.
const CONFIG_LIMIT: u64 = 1024 * 1024;

/// The file, as written (every key optional).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    pub scan_interval_seconds: Option<f64>,
    pub full_scan_interval_seconds: Option<f64>,
    pub local_dir_interval_seconds: Option<f64>,
    pub local_dir_roots: Option<Vec<String>>,
    pub driver_cache_ttl_seconds: Option<f64>,
    pub driver_lookup_budget: Option<u32>,
    pub event_series_interval_seconds: Option<f64>,
    pub condition_heartbeat_seconds: Option<f64>,
    pub request_timeout_seconds: Option<f64>,
    pub probe_interval_seconds: Option<f64>,
    pub probe_timeout_seconds: Option<f64>,
    /// The prober election's lease duration (see docs/operations/prober.md).
    pub lease_duration_seconds: Option<f64>,
    pub log_format: Option<String>,
    pub rules: Option<Settings>,
    pub repair: Option<AutoRepairPolicy>,
    /// Driver fencing on partitioned nodes (docs/operations/partitions.md).
    pub fencing: Option<FencePolicy>,
    /// Publish this node's NodeResourceTopology (docs/operations/node-resource-topology.md).
    pub publish_node_resource_topology: Option<bool>,
    /// DRA drivers' checkpoints to judge (docs/configuration.md).
    pub dra_driver_checkpoints: Option<Vec<DriverCheckpointConfig>>,
}

/// One entry of `dra_driver_checkpoints`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverCheckpointConfig {
    /// The driver's checkpoint format (`nvidia-gpu`).
    pub format: String,
    /// The file's host path.
    pub path: String,
}

/// `--dra-driver-checkpoint FORMAT=PATH` values, checked.
pub fn driver_checkpoints_from_flags(values: &[String]) -> Result<Vec<DriverCheckpoint>, ConfigError> {
    values
        .iter()
        .map(|v| {
            DriverCheckpoint::parse(v).map_err(|e| ConfigError::Flag {
                flag: "--dra-driver-checkpoint",
                problem: Problem::DriverCheckpoint(e),
            })
        })
        .collect()
}

/// The file's `dra_driver_checkpoints`, checked.
fn driver_checkpoints_from_file(entries: &[DriverCheckpointConfig]) -> Result<Vec<DriverCheckpoint>, ConfigError> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            DriverCheckpoint::new(&e.format, &e.path)
                .map_err(|e| key(&format!("dra_driver_checkpoints[{i}]"), Problem::DriverCheckpoint(e)))
        })
        .collect()
}

/// What is wrong with a configuration: the file, the key or the flag, and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// There is no file at the path given.
    #[error("{file}: no such file")]
    Missing { file: String },
    /// The file cannot be read (a directory, permission denied, too large, not UTF-8); the
    /// error names it.
    #[error(transparent)]
    Read(ReadError),
    /// The text is not YAML of the configuration's shape (an unknown key, a value of the
    /// wrong type): the parser's own words, which name the key where they can.
    #[error("the configuration: {reason}")]
    Yaml { reason: String },
    /// What is wrong inside the file `file`.
    #[error("{file}: {source}")]
    InFile { file: String, source: Box<ConfigError> },
    /// A key's value is wrong (`key` as written in the file, `repair: ...` under a section).
    #[error("{key}: {problem}")]
    Key { key: String, problem: Problem },
    /// A flag's value is wrong.
    #[error("{flag}: {problem}")]
    Flag { flag: &'static str, problem: Problem },
}

/// What is wrong with one key's or flag's value.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// A number of seconds that is zero, negative or not finite.
    #[error("{0} is not a positive number of seconds")]
    NotPositive(f64),
    /// `lease_duration_seconds` below 3.
    #[error("{0} is too short: the holder renews every third of it (3 s at least)")]
    LeaseTooShort(f64),
    /// `listen` is not a socket address.
    #[error("{0:?} is not an address:port like 0.0.0.0:9904")]
    NotAnAddress(String),
    /// `log_format` is not `text` or `json`.
    #[error("{0:?} is not text or json")]
    NotALogFormat(String),
    /// A host path that is not absolute.
    #[error("{0:?} is not an absolute host path")]
    RelativePath(String),
    /// A number that may not be negative.
    #[error("{0} is negative")]
    Negative(i64),
    /// The rule settings (`rules`, `--rule-setting`) are invalid.
    #[error(transparent)]
    Settings(nodemedic_rules::settings::SettingsError),
    /// A `--rule-setting` pair without `=`.
    #[error("{0:?}: expected KEY=VALUE")]
    NotKeyValue(String),
    /// A `--rule-setting` key or value the settings do not take (the deserializer's words).
    #[error(transparent)]
    SettingValue(serde_json::Error),
    /// A `--disable-rule` id no rule has.
    #[error("unknown rule id {0:?} (see `nodemedic rules`)")]
    UnknownRule(String),
    /// The fencing policy is invalid.
    #[error(transparent)]
    Fencing(PolicyError),
    /// A DRA driver checkpoint entry is invalid.
    #[error(transparent)]
    DriverCheckpoint(DriverCheckpointError),
    /// `apiserver-unreachable` could fire with no failed probe: its window is not above the
    /// time between two API samples.
    #[error(
        "{unreachable} s is not above the time between two API samples ({period:.0} s: the larger of \
         probe_interval_seconds and four fifths of lease_duration_seconds); the rule would fire \
         with no failed probe"
    )]
    UnreachableWithinSample { unreachable: i64, period: f64 },
}

impl From<ConfigError> for String {
    fn from(e: ConfigError) -> String {
        e.to_string()
    }
}

fn key(key: &str, problem: Problem) -> ConfigError {
    ConfigError::Key {
        key: key.to_string(),
        problem,
    }
}

/// Reads and checks a configuration file; errors name the file and the key.
pub fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let shown = path.display().to_string();
    let text = read_text(path, &shown, CONFIG_LIMIT)
        .map_err(ConfigError::Read)?
        .ok_or_else(|| ConfigError::Missing { file: shown.clone() })?;
    parse(&text).map_err(|e| ConfigError::InFile {
        file: shown,
        source: Box::new(e),
    })
}

/// Parses and checks a configuration text.
pub fn parse(text: &str) -> Result<FileConfig, ConfigError> {
    let cfg: FileConfig = if text.trim().is_empty() {
        FileConfig::default()
    } else {
        serde_saphyr::from_str(text).map_err(|e| ConfigError::Yaml { reason: e.to_string() })?
    };
    let positive = |name: &str, v: Option<f64>| match v {
        Some(s) if !(s.is_finite() && s > 0.0) => Err(key(name, Problem::NotPositive(s))),
        _ => Ok(()),
    };
    positive("scan_interval_seconds", cfg.scan_interval_seconds)?;
    positive("full_scan_interval_seconds", cfg.full_scan_interval_seconds)?;
    positive("local_dir_interval_seconds", cfg.local_dir_interval_seconds)?;
    positive("driver_cache_ttl_seconds", cfg.driver_cache_ttl_seconds)?;
    positive("event_series_interval_seconds", cfg.event_series_interval_seconds)?;
    positive("condition_heartbeat_seconds", cfg.condition_heartbeat_seconds)?;
    positive("request_timeout_seconds", cfg.request_timeout_seconds)?;
    positive("probe_interval_seconds", cfg.probe_interval_seconds)?;
    positive("probe_timeout_seconds", cfg.probe_timeout_seconds)?;
    positive("lease_duration_seconds", cfg.lease_duration_seconds)?;
    if let Some(d) = cfg.lease_duration_seconds {
        if d < 3.0 {
            return Err(key("lease_duration_seconds", Problem::LeaseTooShort(d)));
        }
    }
    if let Some(listen) = &cfg.listen {
        listen
            .parse::<std::net::SocketAddr>()
            .map_err(|_| key("listen", Problem::NotAnAddress(listen.clone())))?;
    }
    if let Some(f) = &cfg.log_format {
        if f != "text" && f != "json" {
            return Err(key("log_format", Problem::NotALogFormat(f.clone())));
        }
    }
    for root in cfg.local_dir_roots.iter().flatten() {
        if !root.starts_with('/') {
            return Err(key("local_dir_roots", Problem::RelativePath(root.clone())));
        }
    }
    if let Some(r) = &cfg.repair {
        if r.failed_pods_older_than_seconds < 0 {
            return Err(key(
                "repair: failed_pods_older_than_seconds",
                Problem::Negative(r.failed_pods_older_than_seconds),
            ));
        }
    }
    if let Some(rules) = &cfg.rules {
        rules.validate().map_err(|e| key("rules", Problem::Settings(e)))?;
    }
    if let Some(f) = &cfg.fencing {
        f.validate().map_err(|e| key("fencing", Problem::Fencing(e)))?;
    }
    driver_checkpoints_from_file(cfg.dra_driver_checkpoints.as_deref().unwrap_or_default())?;
    Ok(cfg)
}

/// What the daemon runs with, after flags, file and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    pub listen: String,
    /// How often the rules are judged again on what is known.
    pub scan_interval: Duration,
    /// How often the host is read in full (where inotify works; else at every judgement).
    pub full_scan_interval: Duration,
    pub local_dir_interval: Duration,
    pub local_dir_roots: Vec<String>,
    pub driver_cache_ttl: Duration,
    pub driver_lookup_budget: u32,
    pub event_series_interval: Duration,
    pub condition_heartbeat: Duration,
    pub request_timeout: Duration,
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    pub lease_duration: Duration,
    pub log_format: Format,
    pub settings: Settings,
    pub repair: AutoRepairPolicy,
    pub fencing: FencePolicy,
    pub publish_node_resource_topology: bool,
    /// The DRA driver checkpoints to read.
    pub driver_checkpoints: Vec<DriverCheckpoint>,
}

/// Seconds as a duration; fractions allowed (tests run fast cycles), never below 50 ms.
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() { s.max(0.05) } else { 0.05 })
}

/// The daemon's flags that override the file's keys (the command line, as plain values:
/// `None` and empty lists mean "not given").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flags {
    pub listen: Option<String>,
    pub scan_interval_seconds: Option<f64>,
    pub full_scan_interval_seconds: Option<f64>,
    pub local_dir_interval_seconds: Option<f64>,
    pub local_dir_root: Vec<String>,
    pub driver_cache_ttl_seconds: Option<f64>,
    pub driver_lookup_budget: Option<u32>,
    pub event_series_interval_seconds: Option<f64>,
    pub condition_heartbeat_seconds: Option<f64>,
    pub request_timeout_seconds: Option<f64>,
    pub probe_interval_seconds: Option<f64>,
    pub probe_timeout_seconds: Option<f64>,
    pub lease_duration_seconds: Option<f64>,
    pub disable_rule: Vec<String>,
    pub rule_setting: Vec<String>,
    pub log_format: Option<Format>,
    /// `--fencing`: the fencing mode.
    pub fencing: Option<crate::fence::Mode>,
    /// `--publish-node-resource-topology`.
    pub publish_node_resource_topology: Option<bool>,
    /// `--dra-driver-checkpoint` values (`FORMAT=PATH`).
    pub dra_driver_checkpoint: Vec<String>,
}

/// Flags win over the file, the file over the defaults. Rule settings: the file's `rules`,
/// then `--rule-setting` pairs, then `--disable-rule` ids added.
pub fn effective(args: &Flags, file: &FileConfig) -> Result<Effective, ConfigError> {
    for (flag, v) in [
        ("--scan-interval-seconds", args.scan_interval_seconds),
        ("--full-scan-interval-seconds", args.full_scan_interval_seconds),
        ("--local-dir-interval-seconds", args.local_dir_interval_seconds),
        ("--driver-cache-ttl-seconds", args.driver_cache_ttl_seconds),
        ("--event-series-interval-seconds", args.event_series_interval_seconds),
        ("--condition-heartbeat-seconds", args.condition_heartbeat_seconds),
        ("--request-timeout-seconds", args.request_timeout_seconds),
        ("--probe-interval-seconds", args.probe_interval_seconds),
        ("--probe-timeout-seconds", args.probe_timeout_seconds),
        ("--lease-duration-seconds", args.lease_duration_seconds),
    ] {
        if let Some(s) = v {
            if !(s.is_finite() && s > 0.0) {
                return Err(ConfigError::Flag {
                    flag,
                    problem: Problem::NotPositive(s),
                });
            }
        }
    }
    // What the file's keys are checked for (`parse`), its flags are too: `run --check-config`
    // says valid only for what `run` will take.
    if let Some(d) = args.lease_duration_seconds {
        if d < 3.0 {
            return Err(ConfigError::Flag {
                flag: "--lease-duration-seconds",
                problem: Problem::LeaseTooShort(d),
            });
        }
    }
    if let Some(listen) = &args.listen {
        if listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::Flag {
                flag: "--listen",
                problem: Problem::NotAnAddress(listen.clone()),
            });
        }
    }
    if let Some(root) = args.local_dir_root.iter().find(|r| !r.starts_with('/')) {
        return Err(ConfigError::Flag {
            flag: "--local-dir-root",
            problem: Problem::RelativePath(root.clone()),
        });
    }
    let settings = settings_from(
        file.rules.clone().unwrap_or_default(),
        &args.rule_setting,
        args.disable_rule.clone(),
    )?;
    let log_format = match (args.log_format, file.log_format.as_deref()) {
        (Some(f), _) => f,
        (None, Some("json")) => Format::Json,
        _ => Format::Text,
    };
    Effective {
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
        full_scan_interval: secs(
            args.full_scan_interval_seconds
                .or(file.full_scan_interval_seconds)
                .unwrap_or(600.0),
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
        lease_duration: secs(
            args.lease_duration_seconds
                .or(file.lease_duration_seconds)
                .unwrap_or(60.0)
                .max(3.0),
        ),
        log_format,
        settings,
        repair: file.repair.clone().unwrap_or_default(),
        fencing: {
            let mut f = file.fencing.clone().unwrap_or_default();
            if let Some(mode) = args.fencing {
                f.mode = mode;
            }
            f
        },
        publish_node_resource_topology: args
            .publish_node_resource_topology
            .or(file.publish_node_resource_topology)
            .unwrap_or(false),
        driver_checkpoints: if args.dra_driver_checkpoint.is_empty() {
            driver_checkpoints_from_file(file.dra_driver_checkpoints.as_deref().unwrap_or_default())?
        } else {
            driver_checkpoints_from_flags(&args.dra_driver_checkpoint)?
        },
    }
    .meaningful()
}

impl Effective {
    /// The longest an agent goes between two samples of its path to the API server when all is
    /// well: the prober's probe interval, the others' Lease reads (four fifths of the lease).
    pub fn sample_period(&self) -> Duration {
        self.probe_interval.max(self.lease_duration * 4 / 5)
    }

    /// Rejects settings that make a rule meaningless, naming the key.
    fn meaningful(self) -> Result<Effective, ConfigError> {
        let unreachable = self.settings.apiserver_unreachable_seconds;
        let period = self.sample_period().as_secs_f64();
        if (unreachable as f64) <= period {
            return Err(key(
                "rules: apiserver_unreachable_seconds",
                Problem::UnreachableWithinSample { unreachable, period },
            ));
        }
        Ok(self)
    }
}

/// Loads the file named by `--config` (none: defaults).
pub fn load(path: Option<&PathBuf>) -> Result<FileConfig, ConfigError> {
    match path {
        Some(p) => read_file(p),
        None => Ok(FileConfig::default()),
    }
}

/// A `--rule-setting` value as JSON: a number, `true`/`false`, `[a,b]` (a list of strings),
/// or a string.
fn setting_value(text: &str) -> serde_json::Value {
    if let Ok(i) = text.parse::<i64>() {
        return serde_json::json!(i);
    }
    if let Ok(f) = text.parse::<f64>() {
        return serde_json::json!(f);
    }
    match text {
        "true" => return serde_json::json!(true),
        "false" => return serde_json::json!(false),
        _ => {}
    }
    if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let items: Vec<&str> = inner.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        return serde_json::json!(items);
    }
    serde_json::json!(text)
}

/// `base` with `--rule-setting KEY=VALUE` pairs applied over it and `--disable-rule` ids
/// added; an unknown key, a bad value or an unknown rule id is an error naming it.
pub fn settings_from(base: Settings, pairs: &[String], disabled: Vec<String>) -> Result<Settings, ConfigError> {
    let flag = |flag: &'static str, problem: Problem| ConfigError::Flag { flag, problem };
    let mut obj = match serde_json::to_value(&base) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(flag("--rule-setting", Problem::NotKeyValue(pair.clone())));
        };
        obj.insert(key.trim().to_string(), setting_value(value.trim()));
    }
    let mut settings: Settings = serde_json::from_value(serde_json::Value::Object(obj))
        .map_err(|e| flag("--rule-setting", Problem::SettingValue(e)))?;
    for id in disabled {
        if rules::by_id(&id).is_none() {
            return Err(flag("--disable-rule", Problem::UnknownRule(id)));
        }
        settings.disabled_rules.insert(id);
    }
    settings
        .validate()
        .map_err(|e| flag("--rule-setting", Problem::Settings(e)))?;
    Ok(settings)
}

/// The rule settings of a repair run: the daemon's configuration file's `rules` (when given),
/// then `--rule-setting` pairs.
pub fn repair_settings(config: Option<&PathBuf>, pairs: &[String]) -> Result<Settings, ConfigError> {
    let base = match config {
        Some(path) => load(Some(path))?.rules.unwrap_or_default(),
        None => Settings::default(),
    };
    settings_from(base, pairs, vec![])
}

#[cfg(test)]
mod tests {
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
}

#[cfg(test)]
mod settings_tests {
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
}
