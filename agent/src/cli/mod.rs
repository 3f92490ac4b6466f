//! The commands: parse arguments ([`args`], the only clap types), turn them into the plain
//! options of the library, run, print, and turn the outcome into an exit code: in one place,
//! [`main`]. Errors end as one line on stderr naming the file and the reason, never a panic.

pub mod args;
mod checkpoint;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use nodemedic_rules::finding::Severity;
use nodemedic_rules::rules;
use serde_json::json;

use crate::collect;
use crate::config::{self, ConfigError};
use crate::host::HostPaths;
use crate::output::Format;
use crate::repair::command::{self, Flow, RepairError};
use crate::repair::{cpu_state, local_dirs, pods};
use crate::report::Report;
use crate::scan;
use args::{Cli, Command};

/// Exit code: nothing at warning or above / valid.
pub const EXIT_OK: u8 = 0;
/// Exit code: findings at warning or above / invalid.
pub const EXIT_FINDINGS: u8 = 1;
/// Exit code: could not run.
pub const EXIT_ERROR: u8 = 2;
/// Exit code of `scan`: nothing at warning or above, but a rule could not judge because a
/// source it needs could not be read ("incomplete"; 3 is a repair's "some actions failed").
pub const EXIT_INCOMPLETE: u8 = 4;

/// Why a command could not run (exit 2), or how a repair ended short of its plan.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Scan(#[from] scan::ScanError),
    #[error(transparent)]
    Api(#[from] crate::kube_api::Error),
    #[error(transparent)]
    Repair(#[from] RepairError),
    #[error(transparent)]
    Probe(#[from] crate::probe::ProbeError),
    #[error(transparent)]
    Daemon(#[from] crate::daemon::DaemonError),
    #[error(transparent)]
    Checkpoint(#[from] crate::collect::checkpoint::NamedFileError),
    #[error("{0}")]
    Other(String),
}

impl From<String> for CliError {
    fn from(e: String) -> Self {
        CliError::Other(e)
    }
}

impl CliError {
    /// The exit code: a repair's own (1 refused/not confirmed, 3 actions failed), else 2.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Repair(e) => e.exit_code(),
            _ => EXIT_ERROR,
        }
    }
}

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
        Command::Checkpoint { action } => checkpoint::checkpoint(action),
        Command::Rules(f) => Ok(list_rules(f.get())),
        Command::Run(args) => run(args),
        Command::Reload { pid } => reload(pid),
        Command::Repair { action } => repair(action),
        Command::Probe {
            target: args::ProbeTarget::Api(args),
        } => probe_api(args),
    };
    if std::env::var_os("NODEMEDIC_REPORT_PEAK_RSS").is_some() {
        report_peak_rss();
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "nodemedic: {e}");
            ExitCode::from(e.exit_code())
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

/// `nodemedic probe api`.
fn probe_api(args: args::ProbeArgs) -> Result<u8, CliError> {
    use crate::probe::{Probe, Target, summary};
    let (server, samples) = crate::block_on(async {
        let config = crate::kube_api::config(args.kube.kubeconfig.as_deref()).await?;
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
        Ok::<_, CliError>((config.cluster_url.to_string(), samples))
    })
    .map_err(|e| format!("tokio runtime: {e}"))??;
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
    match args.format.get() {
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
fn reload(pid: i32) -> Result<u8, CliError> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|e| format!("process {pid}: {e}"))?;
    let args = crate::collect::procfs::parse_cmdline(&cmdline);
    let is_daemon = args.first().is_some_and(|a| a.ends_with("nodemedic")) && args.get(1).is_some_and(|a| a == "run");
    if !is_daemon {
        return Err(format!("process {pid} is not `nodemedic run` ({}); pass --pid", args.join(" ")).into());
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGHUP)
        .map_err(|e| format!("SIGHUP to process {pid}: {e}"))?;
    print(&format!(
        "sent SIGHUP to nodemedic run (pid {pid}); its log and nodemedic_config_last_reload_successful say whether the new configuration took\n"
    ));
    Ok(EXIT_OK)
}

/// The daemon's flag overrides, as plain values.
fn run_flags(a: &args::RunArgs) -> config::Flags {
    config::Flags {
        listen: a.listen.clone(),
        scan_interval_seconds: a.scan_interval_seconds,
        full_scan_interval_seconds: a.full_scan_interval_seconds,
        local_dir_interval_seconds: a.local_dir_interval_seconds,
        local_storage_interval_seconds: a.local_storage_interval_seconds,
        local_storage_window_seconds: a.local_storage_window_seconds,
        local_dir_root: a.local_dir_root.clone(),
        driver_cache_ttl_seconds: a.driver_cache_ttl_seconds,
        driver_lookup_budget: a.driver_lookup_budget,
        event_series_interval_seconds: a.event_series_interval_seconds,
        condition_heartbeat_seconds: a.condition_heartbeat_seconds,
        request_timeout_seconds: a.request_timeout_seconds,
        probe_interval_seconds: a.probe_interval_seconds,
        lease_duration_seconds: a.lease_duration_seconds,
        probe_timeout_seconds: a.probe_timeout_seconds,
        disable_rule: a.rules.disable_rule.clone(),
        rule_setting: a.rules.rule_setting.clone(),
        log_format: a.log_format.map(Into::into),
        fencing: a.fencing.as_deref().and_then(crate::fence::Mode::parse),
        publish_node_resource_topology: a.publish_node_resource_topology,
        kubelet_stats_url: a.kubelet_stats_url.clone(),
        kubelet_stats_insecure_tls: a.kubelet_stats_insecure_tls,
        dra_driver_checkpoint: a.dra_driver_checkpoint.clone(),
    }
}

/// `nodemedic run`.
fn run(args: args::RunArgs) -> Result<u8, CliError> {
    let flags = run_flags(&args);
    let file = config::load(args.config.as_ref())?;
    let effective = config::effective(&flags, &file)?;
    if args.check_config {
        let shown = args
            .config
            .as_ref()
            .map_or("(no file: defaults and flags)".to_string(), |p| p.display().to_string());
        print(&format!("{shown}: valid\n"));
        return Ok(EXIT_OK);
    }
    let Some(node) = args.node.clone() else {
        return Err("--node (or NODE_NAME) is required to run".to_string().into());
    };
    crate::telemetry::init(effective.log_format);
    let cfg = crate::daemon::DaemonConfig {
        host_root: args.host.host_root.clone(),
        kubelet_dir: args.host.kubelet_dir.clone(),
        node,
        instance: args.pod_name.clone(),
        kubeconfig: args.kube.kubeconfig.clone(),
        config_file: args.config.clone(),
        flags,
        effective,
    };
    if !cfg.host_root.is_dir() {
        return Err(format!(
            "{}: host root does not exist or is not a directory",
            cfg.host_root.display()
        )
        .into());
    }
    let runtime = crate::runtime().map_err(|e| format!("tokio runtime: {e}"))?;
    let result = runtime.block_on(crate::daemon::run(cfg));
    // A host read stuck on a hung mount must not keep the process from exiting.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    result?;
    Ok(EXIT_OK)
}

/// Where a command's pods come from, as plain values.
fn source(a: &args::PodSourceArgs) -> scan::Source {
    scan::Source {
        node: a.node.clone(),
        pods_file: a.pods.clone(),
        offline: a.offline,
        kubeconfig: a.kubeconfig.clone(),
    }
}

/// `nodemedic scan`.
pub fn scan(args: args::ScanArgs) -> Result<u8, CliError> {
    use crate::collect::read::trace;
    if args.record_reads.is_some() {
        trace::start();
    }
    let host = HostPaths::new(args.host.host_root.clone(), args.host.kubelet_dir.clone());
    trace::stat(host.root());
    scan::check_host_root(&host)?;
    let settings = config::settings_from(
        config::load(args.config.as_ref())?.rules.unwrap_or_default(),
        &args.rules.rule_setting,
        args.rules.disable_rule.clone(),
    )?;
    let driver_checkpoints = config::driver_checkpoints_from_flags(&args.dra_driver_checkpoint)?;
    let source = source(&args.source);
    if let Some(file) = &source.pods_file {
        // The first file the scan reads (collect::pods has no hook of its own).
        trace::file(file);
    }
    let scanned = crate::block_on(async {
        let resolved = source.resolve(&host).await?;
        let opts = scan::Options {
            host: crate::collect::HostOptions {
                node: source.node.clone(),
                local_dir_roots: args.local_dir_root.clone(),
                local_dirs: crate::collect::LocalDirs::Measure,
                driver_checkpoints,
            },
            api_probe: scan::ApiProbe::Once,
            notes: resolved.note.into_iter().collect(),
            pod_list: resolved.pod_list,
            // A one-shot scan waits at most this long for Spark drivers, then reports without.
            lookups_timeout: Some(std::time::Duration::from_secs(20)),
            host_reads: scan::HostReads::Inline,
            settings: settings.clone(),
            ..Default::default()
        };
        // A kubeconfig the user named whose API server refuses the pod list: the file is
        // what to look at.
        let kubeconfig = resolved.kubeconfig;
        scan::snapshot::<crate::spark::ListDirectory>(&host, resolved.pods, None, &opts)
            .await
            .map_err(|e| scan::blame_kubeconfig(kubeconfig.as_deref(), e))
    })
    .map_err(|e| format!("tokio runtime: {e}"))??;
    let snapshot = scanned.snapshot;
    let facts = nodemedic_rules::facts::derive(&snapshot, &settings);
    let report = Report::judged(
        &snapshot,
        &facts,
        rules::judge(&snapshot, &facts, &settings),
        &scanned.records,
    );
    if args.cpu_map {
        return Ok(print_cpu_map(&report, &snapshot, args.format.get()));
    }
    match args.format.get() {
        Format::Json => print(&(report.to_json() + "\n")),
        Format::Text => print(&report.to_text(&snapshot)),
    }
    if let Some(path) = &args.record_reads {
        let ops = trace::stop();
        std::fs::File::create(path)
            .and_then(|f| trace::write(&mut std::io::BufWriter::new(f), &ops))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let code = scan_exit_code(&report);
    // The process ends here: its memory goes back whole, so the snapshot's and the report's
    // tens of thousands of allocations are not freed one by one (3 M instructions at 250 pods).
    std::mem::forget((facts, report));
    std::mem::forget(snapshot);
    Ok(code)
}

/// `scan --cpu-map`: the map alone, and its exit code: 0 drawn, 4 without it (the CPUs could
/// not be read: the line says why).
fn print_cpu_map(report: &Report, snapshot: &nodemedic_rules::NodeSnapshot, format: Format) -> u8 {
    match (&report.cpu_map, format) {
        (Some(map), Format::Text) => {
            print(&format!(
                "node {}\n{}",
                report.node,
                nodemedic_rules::cpu_map::draw(map)
            ));
            EXIT_OK
        }
        (Some(map), Format::Json) => {
            print(&(serde_json::to_string_pretty(map).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")) + "\n"));
            EXIT_OK
        }
        (None, _) => {
            eprintln!(
                "nodemedic: no CPU map of node {}: the CPUs could not be read (cpus: {})",
                report.node,
                snapshot.host.cpus.status()
            );
            EXIT_INCOMPLETE
        }
    }
}

/// `scan`'s exit code: 1 with a finding at warning or above (it already says "look", whatever
/// could not be judged), else 4 when a rule could not judge because a source it needs failed
/// (a scan that could not look is never 0), else 0.
fn scan_exit_code(report: &Report) -> u8 {
    if report.worst() >= Some(Severity::Warning) {
        EXIT_FINDINGS
    } else if report.unknown().next().is_some() {
        EXIT_INCOMPLETE
    } else {
        EXIT_OK
    }
}

/// Asks on stdin: a line `y`/`yes` says yes; no terminal and nothing piped says no.
fn stdin_answer(_: &str) -> Result<bool, RepairError> {
    let stdin = std::io::stdin();
    command::read_answer(&mut stdin.lock())
}

/// The instance named in a repair's Events: the agent's pod name in the DaemonSet.
fn instance() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nodemedic".into())
}

/// `apply`, `yes` and `expect_plan` as the repair flow's.
fn flow(apply: bool, yes: bool, expect_plan: Option<&String>, format: &args::FormatArg) -> Flow {
    Flow {
        apply,
        yes,
        expect_plan: expect_plan.cloned(),
        format: format.get(),
    }
}

/// The options of `repair cpu-state`; its rule settings are the configuration file's and
/// `--rule-setting`'s, as `scan` and the daemon judge with.
pub fn cpu_state_options(a: &args::CpuStateArgs) -> Result<cpu_state::Options, CliError> {
    let host = HostPaths::new(a.host.host_root.clone(), a.host.kubelet_dir.clone());
    let mut opts = cpu_state::Options::new(host, source(&a.source));
    opts.settings = config::repair_settings(a.config.as_ref(), &a.rule_setting)?;
    opts.force_unknown_layout = a.force_unknown_layout;
    opts.apply.restart_kubelet = a.restart_kubelet;
    opts.apply.backup_dir = a.backup_dir.clone();
    opts.apply.control.systemctl = a.systemctl.clone();
    opts.apply.control.systemd_run = a.systemd_run.clone();
    opts.apply.guard_seconds = (!a.no_guard).then_some(a.guard_seconds.max(1));
    opts.apply.control.unit = a.kubelet_unit.clone();
    opts.apply.control.timeout = std::time::Duration::from_secs_f64(a.kubelet_timeout_seconds.clamp(0.1, 3600.0));
    opts.apply.settle = std::time::Duration::from_secs_f64(a.settle_seconds.clamp(0.0, 3600.0));
    opts.flow = flow(a.apply, a.yes, a.expect_plan.as_ref(), &a.format);
    Ok(opts)
}

/// The options of `repair orphans`, `repair failed-pods` and `repair half-submitted`.
pub fn pod_repair_options(action: args::RepairAction) -> Result<pods::Options, CliError> {
    use crate::repair::audit::RepairAction;
    let (action, common, older, include_running) = match action {
        args::RepairAction::Orphans(a) => (RepairAction::Orphans, a.common, a.older_than_seconds, a.include_running),
        args::RepairAction::FailedPods(a) => (RepairAction::FailedPods, a.common, Some(a.older_than_seconds), false),
        args::RepairAction::HalfSubmitted(a) => (RepairAction::HalfSubmitted, a.common, a.older_than_seconds, false),
        _ => return Err("not a pod repair".to_string().into()),
    };
    if let Some(s) = older.filter(|s| *s < 0) {
        return Err(format!("--older-than-seconds: {s} is negative").into());
    }
    let mut settings = config::repair_settings(common.config.as_ref(), &common.rule_setting)?;
    let older_than_seconds = match action {
        RepairAction::Orphans => {
            if let Some(s) = older {
                settings.orphan_grace_seconds = s;
            }
            settings.orphan_grace_seconds
        }
        RepairAction::HalfSubmitted => {
            if let Some(s) = older {
                settings.half_submitted_grace_seconds = s;
                settings.half_submitted_critical_seconds = settings.half_submitted_critical_seconds.max(s);
            }
            settings.half_submitted_grace_seconds
        }
        _ => older.unwrap_or(pods::DEFAULT_FAILED_POD_MIN_AGE_SECONDS),
    };
    Ok(pods::Options {
        action,
        node: common.node.clone(),
        kubeconfig: common.kube.kubeconfig.clone(),
        host: common
            .host_root
            .as_ref()
            .map(|r| HostPaths::new(r, common.kubelet_dir.clone())),
        settings,
        include_running,
        older_than_seconds,
        instance: instance(),
        flow: flow(
            common.apply.apply,
            common.apply.yes,
            common.apply.expect_plan.as_ref(),
            &common.format,
        ),
    })
}

/// The options of `repair local-dirs`.
pub fn local_dirs_options(a: &args::LocalDirsArgs) -> Result<local_dirs::Options, CliError> {
    let file = config::load(a.config.as_ref())?;
    let roots = if a.local_dir_root.is_empty() {
        file.local_dir_roots.clone().unwrap_or_default()
    } else {
        a.local_dir_root.clone()
    };
    let mut settings = config::repair_settings(a.config.as_ref(), &a.rule_setting)?;
    if let Some(s) = a.older_than_seconds {
        if s < 0 {
            return Err(format!("--older-than-seconds: {s} is negative").into());
        }
        settings.local_dir_min_age_seconds = s;
    }
    if a.source.offline && a.source.pods.is_none() {
        return Err(
            "--offline needs --pods FILE: whether a pod still uses a hostPath root is judged from a pod list"
                .to_string()
                .into(),
        );
    }
    Ok(local_dirs::Options {
        host: HostPaths::new(a.host.host_root.clone(), a.host.kubelet_dir.clone()),
        node: a.source.node.clone(),
        roots,
        pods_file: a.source.pods.clone(),
        kubeconfig: a.source.kubeconfig.clone(),
        settings,
        instance: instance(),
        flow: flow(a.apply.apply, a.apply.yes, a.apply.expect_plan.as_ref(), &a.format),
    })
}

/// `nodemedic repair ...`: the exit code of the flow's end; a run that could not start is an
/// error (exit 2).
fn repair(action: args::RepairAction) -> Result<u8, CliError> {
    let mut out = std::io::stdout();
    let end = match action {
        args::RepairAction::CpuState(a) => {
            let opts = cpu_state_options(&a)?;
            crate::telemetry::init(opts.flow.format);
            cpu_state::run_with(&opts, &mut out, &mut stdin_answer)?.end
        }
        args::RepairAction::LocalDirs(a) => local_dirs::run(&local_dirs_options(&a)?, &mut out, &mut stdin_answer)?.end,
        other => pods::run(&pod_repair_options(other)?, &mut out, &mut stdin_answer)?.end,
    };
    match end {
        command::End::Failed(e @ RepairError::ActionsFailed(_)) => Err(e.into()),
        end => Ok(end.exit_code()),
    }
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
                        "needs": r.needs.all.iter().map(|n| n.describe()).collect::<Vec<_>>(),
                        "kubelet_versions": r.kubelet_versions,
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
