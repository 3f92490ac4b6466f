//! The kubelet's configuration: the `KubeletConfiguration` YAML file plus the command-line
//! flags that override it (docs/kubelet.md, "Where the live truth is").
//!
//! The file is the one the running kubelet was started with (`--config` in its
//! `/proc/<pid>/cmdline`), else `<kubelet dir>/config.yaml`. Only the fields nodemedic uses
//! are read; every other key is ignored, as the kubelet's own decoder would for ours.

use std::collections::BTreeMap;

use nodemedic_rules::CpuSet;
use nodemedic_rules::snapshot::{KubeletConfig, Observed};
use nodemedic_rules::validate::CpuManagerConfig;

use super::procfs::find_kubelet;
use super::read::read_text;
use crate::host::HostPaths;

const CONFIG_LIMIT: u64 = 1024 * 1024;

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
    let long = format!("--{name}");
    let short = format!("-{name}");
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        for prefix in [&long, &short] {
            if let Some(v) = a.strip_prefix(prefix.as_str()).and_then(|r| r.strip_prefix('=')) {
                found = Some(v.to_string());
            } else if a == prefix {
                if let Some(v) = args.get(i + 1) {
                    found = Some(v.clone());
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
    let file: ConfigFile = match yaml {
        Some(text) if !text.trim().is_empty() => {
            serde_saphyr::from_str(text).map_err(|e| format!("invalid KubeletConfiguration YAML: {e}"))?
        }
        _ => ConfigFile::default(),
    };
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
        found_by: String::new(),
        cpu_manager: cpu,
        cgroup_driver: driver,
        cgroup_root: root,
        topology_manager_policy: topology_policy,
        topology_manager_scope: topology_scope,
        started_at: None,
    })
}

/// Finds and reads the kubelet's configuration under the host root.
pub fn read_kubelet(host: &HostPaths) -> KubeletDiscovery {
    let process = find_kubelet(host);
    let args: Vec<String> = process.as_ref().map(|(_, a)| a.clone()).unwrap_or_default();
    let root_dir = flag_value(&args, "root-dir");
    let hostname_override = flag_value(&args, "hostname-override");
    let flag = flag_value(&args, "config").map(|p| if p.starts_with('/') { p } else { format!("/{p}") });
    let (local, found_by) = match &flag {
        Some(abs) => (host.host(abs), "cmdline"),
        None => (host.kubelet_dir(root_dir.as_deref()).join("config.yaml"), "default"),
    };
    let shown = host.display(&local);
    let text = match read_text(&local, &shown, CONFIG_LIMIT) {
        Ok(t) => t,
        Err(e) => {
            return KubeletDiscovery {
                config: Observed::Error { reason: e.to_string() },
                root_dir,
                hostname_override,
            };
        }
    };
    // The kubelet cannot start without its --config file: when the agent does not see it, the
    // file's directory is not mounted into the agent (the base mounts /var/lib/kubelet only).
    // Going on with the flags alone would judge the CPU manager by its defaults.
    if let (None, Some(flag)) = (&text, &flag) {
        return KubeletDiscovery {
            config: Observed::Error {
                reason: format!(
                    "the kubelet runs with --config {flag}, which is not visible at {shown}: its directory is not \
                     mounted into the agent (for /etc/kubernetes, add the component \
                     daemonset/components/etc-kubernetes; docs/operations/security.md)"
                ),
            },
            root_dir,
            hostname_override,
        };
    }
    if text.is_none() && process.is_none() {
        return KubeletDiscovery {
            config: Observed::Missing { path: shown },
            root_dir,
            hostname_override,
        };
    }
    let config = match parse_kubelet_config(text.as_deref(), &args) {
        Ok(parsed) => Observed::Ok(KubeletConfig {
            path: text.is_some().then(|| shown.clone()),
            found_by: found_by.to_string(),
            started_at: process
                .as_ref()
                .and_then(|(pid, _)| super::procfs::started_at(host, *pid)),
            ..parsed
        }),
        Err(reason) => Observed::Error {
            reason: format!("{shown}: {reason}"),
        },
    };
    KubeletDiscovery {
        config,
        root_dir,
        hostname_override,
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

    proptest::proptest! {
        #[test]
        fn config_reader_never_panics(yaml in "\\PC{0,200}", duration in "[0-9.a-zµ]{0,12}") {
            let _ = parse_kubelet_config(Some(&yaml), &[]);
            let _ = parse_kubelet_config(Some(&format!("cpuManagerPolicy: static\nreservedSystemCPUs: \"{yaml}\"\n")), &[]);
            let _ = parse_go_duration(&duration);
        }
    }
}
