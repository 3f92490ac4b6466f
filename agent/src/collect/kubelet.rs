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

/// A Go `time.Duration` string (`10s`, `1m30s`, `500ms`, `1.5h`) in seconds.
pub fn parse_go_duration(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let err = || format!("invalid duration {text:?}");
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
fn parse_key_values(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Builds the configuration from the file's text (if any) and the kubelet's flags (`path`,
/// `found_by` and `started_at` are left for the caller).
pub fn parse_kubelet_config(yaml: Option<&str>, args: &[String]) -> Result<KubeletConfig, String> {
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
) -> Result<KubeletConfig, String> {
    let mut merged = match file {
        Some(text) => parse_document(text)?,
        None => serde_json::Value::Object(Default::default()),
    };
    for (path, text) in drop_ins {
        let patch = parse_document(text).map_err(|e| format!("drop-in {path}: {e}"))?;
        merge_patch(&mut merged, patch, 0);
    }
    let file: ConfigFile =
        serde_json::from_value(merged).map_err(|e| format!("invalid KubeletConfiguration YAML: {e}"))?;
    from_file_and_flags(file, args)
}

/// A `KubeletConfiguration` document (YAML, or JSON, which is YAML) as a JSON object; an
/// empty document is an empty object.
fn parse_document(text: &str) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let value: Value = serde_saphyr::from_str(text).map_err(|e| format!("invalid KubeletConfiguration YAML: {e}"))?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Default::default())),
        _ => Err("invalid KubeletConfiguration YAML: the document is not a mapping".into()),
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
fn from_file_and_flags(file: ConfigFile, args: &[String]) -> Result<KubeletConfig, String> {
    let mut cpu = CpuManagerConfig::default();
    if let Some(p) = file.cpu_manager_policy.filter(|p| !p.is_empty()) {
        cpu.policy = p;
    }
    if let Some(opts) = file.cpu_manager_policy_options {
        cpu.policy_options = opts.into_iter().map(|(k, v)| (k, v.text())).collect();
    }
    if let Some(d) = file.cpu_manager_reconcile_period {
        cpu.reconcile_period_seconds =
            parse_go_duration(&d.text()).map_err(|e| format!("cpuManagerReconcilePeriod: {e}"))?;
    }
    if let Some(r) = file.reserved_system_cpus.filter(|r| !r.trim().is_empty()) {
        cpu.reserved_system_cpus = Some(CpuSet::parse(&r).map_err(|e| format!("reservedSystemCPUs: {e}"))?);
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

    // Flags override the file.
    if let Some(p) = flag_value(args, "cpu-manager-policy") {
        cpu.policy = p;
    }
    if let Some(o) = flag_value(args, "cpu-manager-policy-options") {
        cpu.policy_options = parse_key_values(&o);
    }
    if let Some(d) = flag_value(args, "cpu-manager-reconcile-period") {
        cpu.reconcile_period_seconds =
            parse_go_duration(&d).map_err(|e| format!("--cpu-manager-reconcile-period: {e}"))?;
    }
    if let Some(r) = flag_value(args, "reserved-cpus").filter(|r| !r.is_empty()) {
        cpu.reserved_system_cpus = Some(CpuSet::parse(&r).map_err(|e| format!("--reserved-cpus: {e}"))?);
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
        Err(reason) => Observed::Error {
            reason: match &path {
                Some(p) => format!("{p}: {reason}"),
                None => reason,
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
mod tests {
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
            let err = parse_kubelet_config(Some(yaml), &[]).unwrap_err();
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
            err.starts_with("drop-in /d/99-bad.conf: invalid KubeletConfiguration YAML"),
            "{err}"
        );
        let err = parse_layers(Some("- a list"), &[], &[]).unwrap_err();
        assert_eq!(err, "invalid KubeletConfiguration YAML: the document is not a mapping");
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
    const PACKAGE_UNIT: &str = "[Unit]\nDescription=kubelet: The Kubernetes Node Agent\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n";
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
}
