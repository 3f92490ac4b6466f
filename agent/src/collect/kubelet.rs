//! The kubelet's configuration: the `KubeletConfiguration` file, the drop-ins of its
//! `--config-dir`, and the command-line flags that override both (docs/kubelet.md, "The
//! kubelet's configuration").
//!
//! The command line is the running kubelet's (`/proc/<pid>/cmdline`); with no kubelet
//! running, the one its systemd unit would start it with ([`super::kubelet_units`]); with
//! neither, the file is looked for where the distributions put it ([`DEFAULT_FILES`]). The
//! kubelet merges the file, then the drop-ins in name order (a JSON merge patch each), then
//! re-applies its flags over the result (`cmd/kubelet/app/server.go`); so does
//! [`parse_layers`]. Only the fields nodemedic uses are read; every other key is ignored, as
//! the kubelet's own decoder would for ours.

use std::collections::BTreeMap;

use nodemedic_rules::CpuSet;
use nodemedic_rules::snapshot::{FoundBy, KubeletConfig, Observed};
use nodemedic_rules::validate::CpuManagerConfig;

use super::kubelet_units::{self, Word};
use super::procfs::find_kubelet;
use super::read::read_text;
use crate::host::HostPaths;

const CONFIG_LIMIT: u64 = 1024 * 1024;

/// At most this many `--config-dir` drop-ins are read.
const MAX_CONFIG_DROP_INS: usize = 64;
/// How deep `--config-dir` is walked (the kubelet walks it whole; a deeper tree is not a
/// configuration).
const MAX_CONFIG_DIR_DEPTH: usize = 4;

/// Where the distributions put the kubelet's configuration file when no kubelet runs and no
/// systemd unit says how it starts, looked at in this order after kubeadm's
/// `<kubelet dir>/config.yaml`: EKS's AL2023 AMIs (`nodeadm`), EKS's AL2 AMIs, GKE's COS nodes
/// and kube-up (`$KUBE_HOME`), kOps (`nodeup`).
pub const DEFAULT_FILES: [&str; 4] = [
    "/etc/kubernetes/kubelet/config.json",
    "/etc/kubernetes/kubelet/kubelet-config.json",
    "/home/kubernetes/kubelet-config.yaml",
    "/var/lib/kubelet/kubelet.conf",
];

/// A YAML scalar that may be written as a string or a number (`cpu: 1` or `cpu: "500m"`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Scalar::Text(s) => s.clone(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// The fields of `KubeletConfiguration` nodemedic reads.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    cpu_manager_policy: Option<String>,
    cpu_manager_policy_options: Option<BTreeMap<String, Scalar>>,
    cpu_manager_reconcile_period: Option<Scalar>,
    #[serde(rename = "reservedSystemCPUs")]
    reserved_system_cpus: Option<String>,
    kube_reserved: Option<BTreeMap<String, Scalar>>,
    system_reserved: Option<BTreeMap<String, Scalar>>,
    cgroup_driver: Option<String>,
    cgroup_root: Option<String>,
    topology_manager_policy: Option<String>,
    topology_manager_scope: Option<String>,
    eviction_hard: Option<BTreeMap<String, Scalar>>,
    eviction_soft: Option<BTreeMap<String, Scalar>>,
    merge_default_eviction_settings: Option<bool>,
    container_runtime_endpoint: Option<String>,
}

/// What reading the kubelet's configuration found.
#[derive(Debug, Clone)]
pub struct KubeletDiscovery {
    pub config: Observed<KubeletConfig>,
    /// `--root-dir`, when the kubelet has one.
    pub root_dir: Option<String>,
    /// `--hostname-override`, when the kubelet has one.
    pub hostname_override: Option<String>,
    /// What was skipped on the way (an environment file of the unit not visible, ...).
    pub notes: Vec<String>,
}

/// Why the kubelet's configuration cannot be built: the document, the drop-in or the key or
/// flag that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeletConfigError {
    /// Not a Go `time.Duration` (the text as given).
    #[error("invalid duration {text:?}")]
    Duration { text: String },
    /// A document that is not YAML, or whose fields have the wrong types (the parser's reason).
    #[error("invalid KubeletConfiguration YAML: {reason}")]
    Yaml { reason: String },
    /// A document that is YAML but not a mapping.
    #[error("invalid KubeletConfiguration YAML: the document is not a mapping")]
    NotAMapping,
    /// A `--config-dir` drop-in (its host path) is wrong.
    #[error("drop-in {path}: {source}")]
    DropIn {
        path: String,
        source: Box<KubeletConfigError>,
    },
    /// A duration field (`cpuManagerReconcilePeriod`) or flag (`--cpu-manager-reconcile-period`)
    /// is wrong.
    #[error("{key}: {source}")]
    Key {
        key: &'static str,
        source: Box<KubeletConfigError>,
    },
    /// A CPU list field (`reservedSystemCPUs`) or flag (`--reserved-cpus`) is wrong.
    #[error("{key}: {source}")]
    Cpus {
        key: &'static str,
        source: nodemedic_rules::cpuset::CpuSetError,
    },
}

/// A Go `time.Duration` string (`10s`, `1m30s`, `500ms`, `1.5h`) in seconds.
pub fn parse_go_duration(text: &str) -> Result<f64, KubeletConfigError> {
    let t = text.trim();
    let err = || KubeletConfigError::Duration { text: text.to_string() };
    if t == "0" {
        return Ok(0.0);
    }
    let mut rest = t;
    let mut total = 0.0;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// The value of `--name` in a command line (`--name=value` or `--name value`); the last
/// occurrence wins, as with Go's flag package.
pub fn flag_value(args: &[String], name: &str) -> Option<String> {
    flag_at(args, name).map(|(_, v)| v)
}

/// [`flag_value`], and the index of the argument that names the flag.
fn flag_at(args: &[String], name: &str) -> Option<(usize, String)> {
    let long = format!("--{name}");
    let short = format!("-{name}");
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        for prefix in [&long, &short] {
            if let Some(v) = a.strip_prefix(prefix.as_str()).and_then(|r| r.strip_prefix('=')) {
                found = Some((i, v.to_string()));
            } else if a == prefix {
                if let Some(v) = args.get(i + 1) {
                    found = Some((i, v.clone()));
                    i += 1;
                }
            }
        }
        i += 1;
    }
    found
}

/// `cpu=500m,memory=1Gi` -> map.
/// An `--eviction-hard`/`--eviction-soft` flag: `signal<value` statements, comma separated
/// (`memory.available<100Mi,nodefs.available<10%`).
fn parse_eviction_flag(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|s| s.split_once('<'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn parse_key_values(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Builds the configuration from the file's text (if any) and the kubelet's flags (`path`,
/// `found_by` and `started_at` are left for the caller).
pub fn parse_kubelet_config(yaml: Option<&str>, args: &[String]) -> Result<KubeletConfig, KubeletConfigError> {
    parse_layers(yaml, &[], args)
}

/// Builds the configuration the kubelet would run with: the file's text (`None`: no file),
/// merged with each `--config-dir` drop-in `(host path, text)` in the order given, then the
/// flags in `args` over the result (`path`, `found_by` and `started_at` are left for the
/// caller).
pub fn parse_layers(
    file: Option<&str>,
    drop_ins: &[(String, String)],
    args: &[String],
) -> Result<KubeletConfig, KubeletConfigError> {
    let mut merged = match file {
        Some(text) => parse_document(text)?,
        None => serde_json::Value::Object(Default::default()),
    };
    for (path, text) in drop_ins {
        let patch = parse_document(text).map_err(|e| KubeletConfigError::DropIn {
            path: path.clone(),
            source: Box::new(e),
        })?;
        merge_patch(&mut merged, patch, 0);
    }
    let file: ConfigFile =
        serde_json::from_value(merged).map_err(|e| KubeletConfigError::Yaml { reason: e.to_string() })?;
    from_file_and_flags(file, args)
}

/// A `KubeletConfiguration` document (YAML, or JSON, which is YAML) as a JSON object; an
/// empty document is an empty object.
fn parse_document(text: &str) -> Result<serde_json::Value, KubeletConfigError> {
    use serde_json::Value;
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let value: Value = serde_saphyr::from_str(text).map_err(|e| KubeletConfigError::Yaml { reason: e.to_string() })?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Default::default())),
        _ => Err(KubeletConfigError::NotAMapping),
    }
}

/// Nesting below which a merge patch replaces instead of merging (a configuration is a few
/// levels deep; this only bounds the recursion on hostile input).
const MAX_MERGE_DEPTH: usize = 32;

/// `patch` applied to `target` as a JSON merge patch (RFC 7386), as the kubelet applies each
/// drop-in: mappings merge key by key, `null` removes a key, anything else replaces.
fn merge_patch(target: &mut serde_json::Value, patch: serde_json::Value, depth: usize) {
    use serde_json::Value;
    let Value::Object(fields) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() || depth > MAX_MERGE_DEPTH {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (key, value) in fields {
            if value.is_null() {
                t.remove(&key);
            } else {
                merge_patch(t.entry(key).or_insert(Value::Null), value, depth + 1);
            }
        }
    }
}

/// The file's fields, then the flags over them.
fn from_file_and_flags(file: ConfigFile, args: &[String]) -> Result<KubeletConfig, KubeletConfigError> {
    let duration = |key, text: &str| {
        parse_go_duration(text).map_err(|e| KubeletConfigError::Key {
            key,
            source: Box::new(e),
        })
    };
    let cpus = |key, text: &str| CpuSet::parse(text).map_err(|source| KubeletConfigError::Cpus { key, source });
    let mut cpu = CpuManagerConfig::default();
    if let Some(p) = file.cpu_manager_policy.filter(|p| !p.is_empty()) {
        cpu.policy = p;
    }
    if let Some(opts) = file.cpu_manager_policy_options {
        cpu.policy_options = opts.into_iter().map(|(k, v)| (k, v.text())).collect();
    }
    if let Some(d) = file.cpu_manager_reconcile_period {
        cpu.reconcile_period_seconds = duration("cpuManagerReconcilePeriod", &d.text())?;
    }
    if let Some(r) = file.reserved_system_cpus.filter(|r| !r.trim().is_empty()) {
        cpu.reserved_system_cpus = Some(cpus("reservedSystemCPUs", &r)?);
    }
    cpu.kube_reserved_cpu = file.kube_reserved.and_then(|m| m.get("cpu").map(Scalar::text));
    cpu.system_reserved_cpu = file.system_reserved.and_then(|m| m.get("cpu").map(Scalar::text));
    let mut driver = file
        .cgroup_driver
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "cgroupfs".into());
    let mut root = file.cgroup_root.filter(|r| !r.is_empty()).unwrap_or_else(|| "/".into());
    let mut topology_policy = file
        .topology_manager_policy
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "none".into());
    let mut topology_scope = file
        .topology_manager_scope
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "container".into());

    let texts = |m: BTreeMap<String, Scalar>| m.into_iter().map(|(k, v)| (k, v.text())).collect();
    let mut eviction = nodemedic_rules::local_storage::EvictionConfig {
        hard: file.eviction_hard.map(texts),
        soft: file.eviction_soft.map(texts),
        merge_defaults: file.merge_default_eviction_settings.unwrap_or(false),
    };

    let mut runtime_endpoint = file
        .container_runtime_endpoint
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| nodemedic_rules::snapshot::DEFAULT_RUNTIME_ENDPOINT.into());

    // Flags override the file.
    if let Some(e) = flag_value(args, "container-runtime-endpoint").filter(|e| !e.trim().is_empty()) {
        runtime_endpoint = e;
    }
    if let Some(h) = flag_value(args, "eviction-hard") {
        eviction.hard = Some(parse_eviction_flag(&h));
    }
    if let Some(s) = flag_value(args, "eviction-soft") {
        eviction.soft = Some(parse_eviction_flag(&s));
    }
    if let Some(p) = flag_value(args, "cpu-manager-policy") {
        cpu.policy = p;
    }
    if let Some(o) = flag_value(args, "cpu-manager-policy-options") {
        cpu.policy_options = parse_key_values(&o);
    }
    if let Some(d) = flag_value(args, "cpu-manager-reconcile-period") {
        cpu.reconcile_period_seconds = duration("--cpu-manager-reconcile-period", &d)?;
    }
    if let Some(r) = flag_value(args, "reserved-cpus").filter(|r| !r.is_empty()) {
        cpu.reserved_system_cpus = Some(cpus("--reserved-cpus", &r)?);
    }
    if let Some(kr) = flag_value(args, "kube-reserved") {
        cpu.kube_reserved_cpu = parse_key_values(&kr).remove("cpu");
    }
    if let Some(sr) = flag_value(args, "system-reserved") {
        cpu.system_reserved_cpu = parse_key_values(&sr).remove("cpu");
    }
    if let Some(d) = flag_value(args, "cgroup-driver") {
        driver = d;
    }
    if let Some(r) = flag_value(args, "cgroup-root").filter(|r| !r.is_empty()) {
        root = r;
    }
    if let Some(p) = flag_value(args, "topology-manager-policy").filter(|p| !p.is_empty()) {
        topology_policy = p;
    }
    if let Some(s) = flag_value(args, "topology-manager-scope").filter(|s| !s.is_empty()) {
        topology_scope = s;
    }
    Ok(KubeletConfig {
        path: None,
        found_by: FoundBy::DefaultPath,
        cpu_manager: cpu,
        cgroup_driver: driver,
        cgroup_root: root,
        topology_manager_policy: topology_policy,
        topology_manager_scope: topology_scope,
        started_at: None,
        eviction,
        container_runtime_endpoint: runtime_endpoint,
    })
}

/// Where the command line came from.
enum Source {
    /// The running kubelet's.
    Process,
    /// The kubelet's systemd unit's (no kubelet runs); the unit file's host path.
    Unit(String),
    /// Neither: no kubelet runs and no unit says how it starts.
    Nothing,
}

/// A path as the kubelet resolves a flag's value: relative to its working directory, which
/// systemd makes `/`.
fn absolute(path: String) -> String {
    if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    }
}

/// The hint for a file the kubelet names that the agent does not see.
const MOUNT_HINT: &str = "its directory is not mounted into the agent (for /etc/kubernetes, add the component \
     daemonset/components/etc-kubernetes; docs/operations/security.md)";

/// The drop-ins of `--config-dir` (a host path) as the kubelet walks it (`filepath.WalkDir`:
/// each directory's entries in name order, a subdirectory entered where its name sorts):
/// every file whose name ends in `.conf`, with its text; `Ok(None)` when the directory is not
/// there.
// Err: a plain-text reason, which `read_kubelet` puts into the configuration's `Observed::Error`.
fn read_config_dir(host: &HostPaths, dir: &str) -> Result<Option<Vec<(String, String)>>, String> {
    fn walk(host: &HostPaths, dir: &str, depth: usize, out: &mut Vec<(String, String)>) -> Result<bool, String> {
        let local = host.host(dir);
        super::read::trace::dir(&local);
        let entries = match std::fs::read_dir(&local) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("{dir}: {e}")),
        };
        let mut entries: Vec<(String, bool)> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                let is_dir = e.file_type().ok()?.is_dir();
                Some((e.file_name().into_string().ok()?, is_dir))
            })
            .collect();
        entries.sort();
        for (name, is_dir) in entries {
            let path = format!("{}/{name}", dir.trim_end_matches('/'));
            if is_dir {
                if depth < MAX_CONFIG_DIR_DEPTH {
                    walk(host, &path, depth + 1, out)?;
                }
            } else if name.ends_with(".conf") && out.len() < MAX_CONFIG_DROP_INS {
                let text = read_text(&host.host(&path), &path, CONFIG_LIMIT).map_err(|e| e.to_string())?;
                out.extend(text.map(|t| (path, t)));
            }
        }
        Ok(true)
    }
    let mut out = Vec::new();
    Ok(walk(host, dir, 0, &mut out)?.then_some(out))
}

/// Finds and reads the kubelet's configuration under the host root: the running kubelet's
/// command line, else its systemd unit's, else the distributions' usual files
/// ([`DEFAULT_FILES`], after `<kubelet dir>/config.yaml`); then its `--config` file and
/// `--config-dir` drop-ins, with its flags over them. Not found anywhere: missing. A file the
/// command line names that the agent cannot see: an error, never the defaults.
pub fn read_kubelet(host: &HostPaths) -> KubeletDiscovery {
    let process = find_kubelet(host);
    let mut notes = Vec::new();
    let failed = |reason: String, root_dir: Option<String>, hostname_override: Option<String>, notes: Vec<String>| {
        KubeletDiscovery {
            config: Observed::Error { reason },
            root_dir,
            hostname_override,
            notes,
        }
    };
    let (words, source): (Vec<Word>, Source) = match &process {
        Some((_, args)) => (
            args.iter()
                .map(|a| Word {
                    text: a.clone(),
                    from: "cmdline".into(),
                })
                .collect(),
            Source::Process,
        ),
        None => match kubelet_units::read_unit(host) {
            Ok(Some(unit)) if !unit.missing.is_empty() => {
                let reason = format!(
                    "no kubelet runs, and its systemd unit {} reads {} (EnvironmentFile=), which the agent does not see: \
                     its flags are unknown",
                    unit.unit,
                    unit.missing.join(", ")
                );
                return failed(reason, None, None, unit.notes);
            }
            Ok(Some(unit)) if !unit.words.is_empty() => {
                notes.extend(unit.notes);
                (unit.words, Source::Unit(unit.unit))
            }
            Ok(Some(unit)) => {
                notes.extend(unit.notes);
                notes.push(format!(
                    "{}: no ExecStart=: the kubelet's command line is unknown",
                    unit.unit
                ));
                (vec![], Source::Nothing)
            }
            Ok(None) => (vec![], Source::Nothing),
            Err(e) => {
                return failed(
                    format!("no kubelet runs, and its systemd unit cannot be read: {e}"),
                    None,
                    None,
                    notes,
                );
            }
        },
    };
    let mut args: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
    let root_dir = flag_value(&args, "root-dir");
    let mut hostname_override = flag_value(&args, "hostname-override");
    let config_flag = flag_at(&args, "config")
        .filter(|(_, p)| !p.is_empty())
        .map(|(i, p)| (absolute(p), words.get(i).map(|w| w.from.clone()).unwrap_or_default()));
    let dir_flag = flag_value(&args, "config-dir").filter(|d| !d.is_empty()).map(absolute);
    let default_file = host.kubelet_dir(root_dir.as_deref()).join("config.yaml");

    // The file: the one the command line names (which must then be there), else where the
    // distributions put it.
    let (local, named, mut found_by) = match (&source, config_flag) {
        (Source::Process, Some((path, _))) => (Some(host.host(&path)), Some(path), FoundBy::Cmdline),
        (Source::Unit(_), Some((path, from))) => {
            (Some(host.host(&path)), Some(path), FoundBy::SystemdUnit { file: from })
        }
        // A running kubelet without --config: its flags, and `<kubelet dir>/config.yaml` when
        // there is one.
        (Source::Process, None) => (Some(default_file.clone()), None, FoundBy::Cmdline),
        (Source::Unit(unit), None) => (None, None, FoundBy::SystemdUnit { file: unit.clone() }),
        (Source::Nothing, _) => {
            let mut candidates = vec![default_file.clone()];
            candidates.extend(DEFAULT_FILES.iter().map(|p| host.host(p)));
            let found = candidates.into_iter().find(|c| {
                super::read::trace::stat(c);
                c.is_file()
            });
            (found, None, FoundBy::DefaultPath)
        }
    };
    let mut path = None;
    let mut text = None;
    if let Some(local) = &local {
        let shown = host.display(local);
        match read_text(local, &shown, CONFIG_LIMIT) {
            Ok(Some(t)) => {
                text = Some(t);
                path = Some(shown);
                if matches!(source, Source::Process) && named.is_none() {
                    found_by = FoundBy::DefaultPath;
                }
            }
            Ok(None) => {
                // The kubelet cannot start without its --config file: when the agent does not
                // see it, the file's directory is not mounted into the agent (the base mounts
                // /var/lib/kubelet only). Going on with the flags alone would judge the CPU
                // manager by its defaults.
                if let Some(flag) = &named {
                    let reason = match &found_by {
                        FoundBy::SystemdUnit { file } => format!(
                            "no kubelet runs, and its systemd unit starts it with --config {flag} ({file}), which is not \
                             visible at {shown}: {MOUNT_HINT}"
                        ),
                        _ => format!(
                            "the kubelet runs with --config {flag}, which is not visible at {shown}: {MOUNT_HINT}"
                        ),
                    };
                    return failed(reason, root_dir, hostname_override, notes);
                }
            }
            Err(e) => return failed(e.to_string(), root_dir, hostname_override, notes),
        }
    }
    // The drop-ins: the kubelet refuses to start when its --config-dir cannot be walked.
    let mut drop_ins = Vec::new();
    if let Some(dir) = &dir_flag {
        match read_config_dir(host, dir) {
            Ok(Some(files)) => {
                drop_ins = files;
                if path.is_none() && !drop_ins.is_empty() {
                    path = Some(dir.clone());
                }
            }
            Ok(None) => {
                let reason = format!(
                    "the kubelet's --config-dir {dir} is not visible at {}: {MOUNT_HINT}",
                    host.display(&host.host(dir))
                );
                return failed(reason, root_dir, hostname_override, notes);
            }
            Err(e) => return failed(e, root_dir, hostname_override, notes),
        }
    }
    // kubeadm's layout without its unit in sight (the agent mounts the kubelet directory, not
    // the unit's): the flags kubeadm writes beside its config.yaml, `KUBELET_KUBEADM_ARGS` of
    // `kubeadm-flags.env`, which its drop-in puts on the command line.
    if matches!(source, Source::Nothing) && text.is_some() && local.as_ref() == Some(&default_file) {
        let env = default_file.with_file_name("kubeadm-flags.env");
        match read_text(&env, &host.shown(&env), CONFIG_LIMIT) {
            Ok(Some(env_text)) => {
                let (pairs, _) = kubelet_units::parse_env_file(&env_text);
                if let Some((_, value)) = pairs.iter().rev().find(|(n, _)| n == "KUBELET_KUBEADM_ARGS") {
                    args.extend(kubelet_units::split_words(value, true).unwrap_or_default());
                    hostname_override = hostname_override.or_else(|| flag_value(&args, "hostname-override"));
                }
            }
            Ok(None) => {}
            Err(e) => notes.push(format!("{e}: kubeadm's kubelet flags are not known")),
        }
    }
    if matches!(source, Source::Nothing) && text.is_none() && drop_ins.is_empty() {
        return KubeletDiscovery {
            config: Observed::Missing {
                path: host.display(&default_file),
            },
            root_dir,
            hostname_override,
            notes,
        };
    }
    let config = match parse_layers(text.as_deref(), &drop_ins, &args) {
        Ok(parsed) => Observed::Ok(KubeletConfig {
            path: path.clone(),
            found_by,
            started_at: process
                .as_ref()
                .and_then(|(pid, _)| super::procfs::started_at(host, *pid)),
            ..parsed
        }),
        Err(e) => Observed::Error {
            reason: match &path {
                Some(p) => format!("{p}: {e}"),
                None => e.to_string(),
            },
        },
    };
    KubeletDiscovery {
        config,
        root_dir,
        hostname_override,
        notes,
    }
}

#[cfg(test)]
mod tests;
