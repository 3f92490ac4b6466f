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
    pub local_storage_interval_seconds: Option<f64>,
    pub local_storage_window_seconds: Option<f64>,
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
    /// The kubelet's `/stats/summary` to read Spark's local storage from
    /// (docs/rules/local-storage-eviction-risk.md, "The kubelet's accounting").
    pub kubelet_stats_url: Option<String>,
    /// Accept the kubelet's serving certificate without checking it.
    pub kubelet_stats_insecure_tls: Option<bool>,
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
    /// `kubelet_stats_url` is not an https:// or http:// URL with a host.
    #[error("{0:?} is not a URL like https://10.0.0.5:10250")]
    NotAKubeletUrl(String),
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
    positive("local_storage_interval_seconds", cfg.local_storage_interval_seconds)?;
    positive("local_storage_window_seconds", cfg.local_storage_window_seconds)?;
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
    if let Some(url) = &cfg.kubelet_stats_url {
        kubelet_url(url).map_err(|p| key("kubelet_stats_url", p))?;
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

/// Checks a `kubelet_stats_url`: an empty one is unset, anything else an https:// or http:// URL
/// with a host. An IPv6 address written without brackets (`https://$(NODE_IP):10250` on a node
/// whose primary address is IPv6) is bracketed.
pub fn kubelet_url(url: &str) -> Result<Option<String>, Problem> {
    if url.is_empty() {
        return Ok(None);
    }
    let url = bracket_ipv6(url);
    match url.parse::<http::Uri>() {
        Ok(u) if matches!(u.scheme_str(), Some("https" | "http")) && u.host().is_some_and(is_host) => Ok(Some(url)),
        _ => Err(Problem::NotAKubeletUrl(url)),
    }
}

/// An IP address (IPv6 in brackets) or a DNS name (not a variable left unexpanded).
fn is_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>().is_ok()
        || (!host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'))
}

/// `scheme://ADDR:PORT/...` with an IPv6 `ADDR` not in brackets, bracketed; anything else as it is.
fn bracket_ipv6(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let bare = |a: &str| a.parse::<std::net::Ipv6Addr>().is_ok();
    if authority.starts_with('[') || authority.matches(':').count() < 2 {
        return url.to_string();
    }
    if bare(authority) {
        return format!("{scheme}://[{authority}]{path}");
    }
    match authority.rsplit_once(':') {
        Some((addr, port)) if bare(addr) && port.parse::<u16>().is_ok() => format!("{scheme}://[{addr}]:{port}{path}"),
        _ => url.to_string(),
    }
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
    /// How often the running Spark pods' local dirs are measured.
    pub local_storage_interval: Duration,
    /// How long their growth is measured over.
    pub local_storage_window: Duration,
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
    /// The kubelet's `/stats/summary` base URL, when set.
    pub kubelet_stats_url: Option<String>,
    pub kubelet_stats_insecure_tls: bool,
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
    pub local_storage_interval_seconds: Option<f64>,
    pub local_storage_window_seconds: Option<f64>,
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
    /// `--kubelet-stats-url`.
    pub kubelet_stats_url: Option<String>,
    /// `--kubelet-stats-insecure-tls`.
    pub kubelet_stats_insecure_tls: Option<bool>,
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
        ("--local-storage-interval-seconds", args.local_storage_interval_seconds),
        ("--local-storage-window-seconds", args.local_storage_window_seconds),
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
    let kubelet_stats_url = match &args.kubelet_stats_url {
        Some(url) => kubelet_url(url).map_err(|problem| ConfigError::Flag {
            flag: "--kubelet-stats-url",
            problem,
        })?,
        None => file
            .kubelet_stats_url
            .as_deref()
            .map(kubelet_url)
            .transpose()
            .map_err(|p| key("kubelet_stats_url", p))?
            .flatten(),
    };
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
        local_storage_interval: secs(
            args.local_storage_interval_seconds
                .or(file.local_storage_interval_seconds)
                .unwrap_or(60.0),
        ),
        local_storage_window: secs(
            args.local_storage_window_seconds
                .or(file.local_storage_window_seconds)
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
        kubelet_stats_url,
        kubelet_stats_insecure_tls: args
            .kubelet_stats_insecure_tls
            .or(file.kubelet_stats_insecure_tls)
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
mod settings_tests;
#[cfg(test)]
mod tests;
