//! The commands: parse arguments, run, print, and turn the outcome into an exit code.
//! Errors end as one line on stderr naming the file and the reason, never a panic.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use nodemedic_rules::checkpoint::Verification;
use nodemedic_rules::finding::Severity;
use nodemedic_rules::{Settings, rules};
use serde_json::json;

use crate::args::{CheckpointAction, Cli, Command, Format, ScanArgs};
use crate::collect::{self, ScanOptions, checkpoint::read_checkpoint_file};
use crate::host::HostPaths;
use crate::report::Report;

/// Exit code: nothing at warning or above / valid.
pub const EXIT_OK: u8 = 0;
/// Exit code: findings at warning or above / invalid.
pub const EXIT_FINDINGS: u8 = 1;
/// Exit code: could not run.
pub const EXIT_ERROR: u8 = 2;

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_ERROR } else { EXIT_OK });
        }
    };
    let result = match cli.command {
        Command::Scan(args) => scan(args),
        Command::Checkpoint { action } => checkpoint(action),
        Command::Rules(f) => Ok(list_rules(f.format)),
        Command::Run(args) => run(args),
        Command::Reload { pid } => reload(pid),
        Command::Repair { action } => match action {
            crate::args::RepairAction::CpuState(a) => crate::repair::cpu_state::run(a),
            crate::args::RepairAction::Orphans(a) => crate::repair::pods::run_orphans(a),
            crate::args::RepairAction::FailedPods(a) => crate::repair::pods::run_failed_pods(a),
            crate::args::RepairAction::LocalDirs(a) => crate::repair::local_dirs::run_local_dirs(a),
        },
        Command::Probe {
            target: crate::args::ProbeTarget::Api(args),
        } => probe_api(args),
    };
    if std::env::var_os("NODEMEDIC_REPORT_PEAK_RSS").is_some() {
        report_peak_rss();
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "nodemedic: {message}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Writes this process's peak resident set (`VmHWM`) to stderr, for benchmarks: measuring
/// from outside with `getrusage` also counts the parent's pages at fork time.
fn report_peak_rss() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(kib) = status.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
        let kib = kib.trim().trim_end_matches("kB").trim();
        let _ = writeln!(std::io::stderr(), "nodemedic: peak_rss_kib={kib}");
    }
}

fn print(text: &str) {
    // A closed pipe (`| head`) is not worth a panic.
    let _ = std::io::stdout().write_all(text.as_bytes());
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
pub fn settings_from(base: Settings, pairs: &[String], disabled: Vec<String>) -> Result<Settings, String> {
    let mut obj = match serde_json::to_value(&base) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("--rule-setting {pair:?}: expected KEY=VALUE"));
        };
        obj.insert(key.trim().to_string(), setting_value(value.trim()));
    }
    let mut settings: Settings =
        serde_json::from_value(serde_json::Value::Object(obj)).map_err(|e| format!("--rule-setting: {e}"))?;
    for id in disabled {
        if rules::by_id(&id).is_none() {
            return Err(format!(
                "--disable-rule: unknown rule id {id:?} (see `nodemedic rules`)"
            ));
        }
        settings.disabled_rules.insert(id);
    }
    settings.validate()?;
    Ok(settings)
}

/// `nodemedic probe api`.
fn probe_api(args: crate::args::ProbeArgs) -> Result<u8, String> {
    use crate::probe::{Probe, Target, summary};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (server, samples) = runtime.block_on(async {
        let config = crate::kube_api::config(args.kubeconfig.as_deref()).await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let node = args
            .node
            .clone()
            .unwrap_or_else(|| collect::host_node_name(&HostPaths::new("/", None)));
        let target = Target::from_config(&config, &namespace, &node)?;
        let timeout = std::time::Duration::from_secs_f64(args.timeout_seconds.max(0.1));
        let mut samples = vec![];
        for _ in 0..args.count.max(1) {
            for p in Probe::ALL {
                samples.push(target.probe(p, timeout).await);
            }
        }
        Ok::<_, String>((config.cluster_url.to_string(), samples))
    })?;
    let mut summaries = serde_json::Map::new();
    for p in Probe::ALL {
        let mine: Vec<&nodemedic_rules::snapshot::ProbeSample> =
            samples.iter().filter(|s| s.probe == p.name()).collect();
        let ok: Vec<f64> = mine.iter().filter(|s| s.ok).map(|s| s.total_seconds).collect();
        let mut entry = json!({"ok": ok.len(), "failed": mine.len() - ok.len()});
        if let Some((min, median, p99, max)) = summary(&ok) {
            entry["total_seconds"] = json!({"min": min, "median": median, "p99": p99, "max": max});
        }
        summaries.insert(p.name().into(), entry);
    }
    let failed = samples.iter().any(|s| !s.ok);
    match args.format.format {
        Format::Json => {
            let out = json!({"server": server, "samples": samples, "summary": summaries});
            print(&(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n"));
        }
        Format::Text => {
            let ms = |s: f64| format!("{:>9.1}", s * 1000.0);
            let mut text = format!("probing {server}\n");
            text.push_str(&format!(
                "{:<15} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}  (ms from the start of each request)\n",
                "probe", "status", "dns", "connect", "tls", "1st byte", "total"
            ));
            for s in &samples {
                text.push_str(&format!(
                    "{:<15} {:>6} {} {} {} {} {}{}\n",
                    s.probe,
                    s.status.map_or("-".to_string(), |c| c.to_string()),
                    ms(s.dns_seconds),
                    ms(s.connect_seconds),
                    ms(s.tls_seconds),
                    ms(s.first_byte_seconds),
                    ms(s.total_seconds),
                    s.error.as_ref().map_or(String::new(), |e| format!("  {e}"))
                ));
            }
            text.push_str("\nsummary of successful requests (total ms): min / median / p99 / max\n");
            for (name, entry) in &summaries {
                let t = &entry["total_seconds"];
                let f = |k: &str| t[k].as_f64().map_or("-".to_string(), |v| format!("{:.1}", v * 1000.0));
                text.push_str(&format!(
                    "  {name:<15} {} / {} / {} / {}   ({} ok, {} failed)\n",
                    f("min"),
                    f("median"),
                    f("p99"),
                    f("max"),
                    entry["ok"],
                    entry["failed"]
                ));
            }
            print(&text);
        }
    }
    Ok(if failed { EXIT_FINDINGS } else { EXIT_OK })
}

/// `nodemedic reload`: SIGHUP to the daemon, after checking it is one.
fn reload(pid: i32) -> Result<u8, String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|e| format!("process {pid}: {e}"))?;
    let args = crate::collect::procfs::parse_cmdline(&cmdline);
    let is_daemon = args.first().is_some_and(|a| a.ends_with("nodemedic")) && args.get(1).is_some_and(|a| a == "run");
    if !is_daemon {
        return Err(format!(
            "process {pid} is not `nodemedic run` ({}); pass --pid",
            args.join(" ")
        ));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGHUP)
        .map_err(|e| format!("SIGHUP to process {pid}: {e}"))?;
    print(&format!(
        "sent SIGHUP to nodemedic run (pid {pid}); its log and nodemedic_config_last_reload_successful say whether the new configuration took\n"
    ));
    Ok(EXIT_OK)
}

/// `nodemedic run`.
fn run(args: crate::args::RunArgs) -> Result<u8, String> {
    let file = crate::config::load(args.config.as_ref())?;
    let effective = crate::config::effective(&args, &file)?;
    if args.check_config {
        let shown = args
            .config
            .as_ref()
            .map_or("(no file: defaults and flags)".to_string(), |p| p.display().to_string());
        print(&format!("{shown}: valid\n"));
        return Ok(EXIT_OK);
    }
    let Some(node) = args.node.clone() else {
        return Err("--node (or NODE_NAME) is required to run".into());
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("NODEMEDIC_LOG").unwrap_or_else(|_| "info".into());
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match effective.log_format {
        Format::Json => builder.json().try_init(),
        Format::Text => builder.try_init(),
    };
    let cfg = crate::daemon::DaemonConfig {
        host_root: args.host.host_root.clone(),
        kubelet_dir: args.host.kubelet_dir.clone(),
        node,
        instance: args.pod_name.clone(),
        kubeconfig: args.kubeconfig.clone(),
        config_file: args.config.clone(),
        args,
        effective,
    };
    if !cfg.host_root.is_dir() {
        return Err(format!(
            "{}: host root does not exist or is not a directory",
            cfg.host_root.display()
        ));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(crate::daemon::run(cfg))?;
    Ok(EXIT_OK)
}

type Lookups = (
    std::collections::BTreeMap<String, nodemedic_rules::snapshot::DriverLookup>,
    std::collections::BTreeMap<String, Vec<nodemedic_rules::snapshot::PodInfo>>,
    Option<nodemedic_rules::snapshot::ApiObservation>,
);

/// This node's pods and their Spark drivers from the API, within a few seconds or not at all.
fn scan_api(
    kubeconfig: Option<&std::path::Path>,
    node: &str,
) -> Result<(Vec<nodemedic_rules::snapshot::PodInfo>, Lookups), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let timeout = std::time::Duration::from_secs(5);
        let config = crate::kube_api::config(kubeconfig).await?;
        let client = crate::kube_api::request_client(config.clone(), timeout)?;
        let pods = crate::kube_api::node_pods(&client, node).await?;
        let directory = crate::kube_api::ApiDirectory::new(client.clone());
        let (drivers, app_drivers) = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            crate::spark::resolve_all(&directory, &pods),
        )
        .await
        .map_err(|_| "driver lookups took over 20 s".to_string())?;
        // One round of probes, with the API server's metrics read before and after it so that
        // each webhook's latency during the round's dry-run create is known.
        let api = match crate::probe::Target::from_config(&config, &config.default_namespace, node) {
            Ok(target) => {
                let mut monitor = crate::apimon::ApiMonitor::new(target, client, std::time::Duration::from_secs(60));
                let metrics = crate::metrics::Metrics::new().map_err(|e| e.to_string())?;
                monitor.prime().await;
                monitor.round(&metrics).await;
                let spark_pods: Vec<(String, std::collections::BTreeMap<String, String>)> = pods
                    .iter()
                    .filter(|p| p.spark_role().is_some())
                    .map(|p| (p.namespace.clone(), p.labels.clone()))
                    .collect();
                Some(monitor.observe(&spark_pods).await)
            }
            Err(_) => None,
        };
        Ok((pods, (drivers, app_drivers, api)))
    })
}

/// `nodemedic scan`.
pub fn scan(args: ScanArgs) -> Result<u8, String> {
    let host = HostPaths::new(args.host.host_root, args.host.kubelet_dir);
    if !host.root().is_dir() {
        return Err(format!(
            "{}: host root does not exist or is not a directory",
            host.root().display()
        ));
    }
    // The API when it can be used: not with --pods or --offline, and only if a configuration
    // exists and answers; otherwise liveness comes from the cgroup tree, and a note says why.
    let mut api_note = None;
    let mut api = None;
    if let Some(node) = args.source.api_node(&host) {
        match scan_api(args.source.kubeconfig.as_deref(), &node) {
            Ok(found) => api = Some((node, found)),
            Err(e) => api_note = Some(format!("Kubernetes API not used ({e}): liveness from cgroups")),
        }
    }
    let opts = ScanOptions {
        node: args
            .source
            .node
            .clone()
            .or_else(|| api.as_ref().map(|(n, _)| n.clone())),
        pods_file: args.source.pods,
        pods: api
            .as_ref()
            .map(|(_, (pods, _))| (pods.clone(), nodemedic_rules::snapshot::PodSource::Api)),
        local_dir_roots: args.local_dir_root,
        ..Default::default()
    };
    let collected = collect::collect(&host, &opts).map_err(|e| e.to_string())?;
    let mut snapshot = collected.snapshot;
    snapshot.notes.extend(api_note);
    if opts.pods_file.is_some() {
        // Offline, the pods file is the whole directory of pods: drivers are looked up in it.
        let directory = crate::spark::ListDirectory::new(collected.cluster_pods);
        let (drivers, app_drivers) = futures::executor::block_on(crate::spark::resolve_all(&directory, &snapshot.pods));
        snapshot.drivers = drivers;
        snapshot.app_drivers = app_drivers;
    } else if let Some((_, (_, (drivers, app_drivers, observation)))) = api {
        snapshot.drivers = drivers;
        snapshot.app_drivers = app_drivers;
        if let Some(o) = observation {
            snapshot.api = nodemedic_rules::snapshot::Observed::Ok(o);
        }
    }
    let settings = settings_from(Settings::default(), &args.rule_setting, args.disable_rule)?;
    let findings = rules::evaluate(&snapshot, &settings);
    let report = Report::new(&snapshot, findings);
    match args.format.format {
        Format::Json => print(&(report.to_json() + "\n")),
        Format::Text => print(&report.to_text(&snapshot)),
    }
    Ok(if report.worst() >= Some(Severity::Warning) {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    })
}

fn checkpoint(action: CheckpointAction) -> Result<u8, String> {
    let (file, format, show) = match action {
        CheckpointAction::Verify { file, format } => (file, format.format, false),
        CheckpointAction::Show { file, format } => (file, format.format, true),
    };
    let shown = file.display().to_string();
    let parsed = read_checkpoint_file(&file)?;
    let (verification, layout, state, error) = match &parsed {
        Err(e) => (None, None, None, Some(e.to_string())),
        Ok(cp) => {
            let v = cp.verify();
            match cp.state() {
                Ok(s) => (Some(v), Some(cp.layout()), Some(s), None),
                Err(e) => (Some(v), Some(cp.layout()), None, Some(e.to_string())),
            }
        }
    };
    let valid = error.is_none() && verification.as_ref().is_some_and(Verification::accepted);
    match format {
        Format::Json => {
            let mut out = json!({
                "file": shown, "valid": valid, "layout": layout,
                "verification": verification, "error": error,
            });
            if show {
                out["state"] = serde_json::to_value(&state).unwrap_or_default();
            }
            print(&(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n"));
        }
        Format::Text => {
            let mut text = String::new();
            let verdict = match (&error, &verification) {
                (Some(e), _) => format!("invalid: {e}"),
                (None, Some(Verification::Matched { layout, type_name, .. })) => {
                    format!("valid: checksum matches layout {layout} as {type_name}")
                }
                (None, Some(Verification::Unverified { layout })) => {
                    format!("valid: layout {layout} with checksum 0 (not verified; the kubelet accepts it)")
                }
                (None, Some(Verification::Mismatch { stored, computed })) => {
                    let tried: Vec<String> = computed.iter().map(|(n, s)| format!("{n} = {s}")).collect();
                    format!(
                        "invalid: stored checksum {stored} matches no kubelet layout (computed: {})",
                        tried.join(", ")
                    )
                }
                (None, None) => "invalid".to_string(),
            };
            text.push_str(&format!("{shown}: {verdict}\n"));
            if let (true, Some(s)) = (show, &state) {
                text.push_str(&format!(
                    "policy:      {}\ndefault set: {}\n",
                    s.policy_name, s.default_cpus
                ));
                text.push_str(&format!("assignments: {}\n", s.assignments.len()));
                for a in &s.assignments {
                    let who = match &a.key {
                        nodemedic_rules::checkpoint::EntryKey::Container { pod_uid, container } => {
                            format!("{pod_uid} {container}")
                        }
                        nodemedic_rules::checkpoint::EntryKey::ContainerId { container_id } => container_id.clone(),
                    };
                    text.push_str(&format!("  {who:<60} {}\n", a.cpus));
                }
                for (uid, cpus) in &s.pod_assignments {
                    text.push_str(&format!("  {uid:<60} {cpus} (pod-level)\n"));
                }
            }
            print(&text);
        }
    }
    Ok(if valid { EXIT_OK } else { EXIT_FINDINGS })
}

fn list_rules(format: Format) -> u8 {
    match format {
        Format::Json => {
            let list: Vec<_> = rules::ALL
                .iter()
                .map(|r| {
                    json!({
                        "id": r.id, "title": r.title, "severity": r.severity, "looks_at": r.looks_at,
                        "fires_when": r.fires_when, "event_reason": r.event_reason, "docs": r.docs_path(),
                    })
                })
                .collect();
            print(&(serde_json::to_string_pretty(&list).unwrap_or_default() + "\n"));
        }
        Format::Text => {
            let mut text = String::new();
            for r in rules::ALL {
                text.push_str(&format!(
                    "{:<26} {:<8} {}\n{:<35} looks at: {}\n{:<35} fires when: {}\n{:<35} docs: {}\n",
                    r.id,
                    r.severity.as_str(),
                    r.title,
                    "",
                    r.looks_at,
                    "",
                    r.fires_when,
                    "",
                    r.docs_path()
                ));
            }
            print(&text);
        }
    }
    EXIT_OK
}

#[cfg(test)]
mod tests {
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
        assert!(
            settings_from(Settings::default(), &["nope=1".into()], vec![])
                .unwrap_err()
                .contains("unknown field `nope`")
        );
        assert!(
            settings_from(Settings::default(), &["rejection_window_seconds=soon".into()], vec![])
                .unwrap_err()
                .contains("invalid type: string \"soon\"")
        );
        assert!(
            settings_from(Settings::default(), &["novalue".into()], vec![])
                .unwrap_err()
                .contains("expected KEY=VALUE")
        );
        assert!(
            settings_from(Settings::default(), &[], vec!["no-such-rule".into()])
                .unwrap_err()
                .contains("unknown rule id")
        );
        assert_eq!(setting_value("[a, b]"), serde_json::json!(["a", "b"]));
    }
}
