//! The command line (see docs/architecture.md, "Command line"). Every flag is long, has a
//! default and an environment variable where the DaemonSet needs one, so it can be set
//! without a shell. Flag groups that several commands share are defined once and flattened.
//!
//! Nothing below the `cli` module sees these types: each command turns its arguments into the
//! plain options of the library function it calls ([`crate::scan::Options`],
//! [`crate::repair::cpu_state::Options`], ...).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::output;

/// nodemedic: finds and explains kubelet CPU manager and Spark-on-Kubernetes failures on a node.
#[derive(Debug, Parser)]
#[command(
    name = "nodemedic",
    version = concat!(env!("CARGO_PKG_VERSION"), " (revision ", env!("NODEMEDIC_REVISION"), ")"),
    about,
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect the node and report findings (exit 0: none at warning or above, 1: some, 2: could not run, 4: incomplete: none at warning or above, but a rule could not judge because a source it needs could not be read).
    Scan(ScanArgs),
    /// Read a kubelet checkpoint file: the CPU manager's, the memory, device or DRA manager's, or
    /// a DRA driver's.
    Checkpoint {
        #[command(subcommand)]
        action: CheckpointAction,
    },
    /// List the rules nodemedic runs.
    Rules(FormatArg),
    /// Run as the DaemonSet's daemon: watch this node's pods, scan periodically, export metrics, Events and node conditions.
    Run(RunArgs),
    /// Repair what a scan found: a plan first, action only with --apply (exit 0: nothing to do or applied, 1: plan shown, refused or not confirmed, 2: could not run, 3: applied, but some actions failed).
    Repair {
        #[command(subcommand)]
        action: RepairAction,
    },
    /// Time requests to the API server like `curl -w` (DNS, connect, TLS, first byte, total).
    Probe {
        #[command(subcommand)]
        target: ProbeTarget,
    },
    /// Ask a running daemon to re-read its configuration file (sends it SIGHUP; in the agent's container it is PID 1).
    Reload {
        /// The daemon's process id.
        #[arg(long, default_value_t = 1)]
        pid: i32,
    },
}

#[derive(Debug, Subcommand)]
pub enum RepairAction {
    /// Free the CPU manager checkpoint's stale entries and keep every live pod's pinning (the kubelet must be stopped, or --restart-kubelet, which arms a guard timer that starts the kubelet again even if nodemedic dies).
    ///
    /// The plan says first when the file is invalid today (a kubelet that restarts now refuses it, in its own words) and whether removing only the stale entries makes it valid; it refuses entries whose pod cgroups still hold a process at any depth.
    CpuState(CpuStateArgs),
    /// Delete orphaned Spark executors (driver gone, replaced or long finished), with their UID as a precondition.
    Orphans(OrphansArgs),
    /// Delete pods the kubelet rejected at admission (OutOfcpu, ...), older than a threshold, with their UID as a precondition.
    FailedPods(FailedPodsArgs),
    /// Delete Spark drivers that spark-submit gave up on (half-submitted-driver: waiting without their ConfigMap, or replaced by a newer driver of the submission), with their UID as a precondition.
    HalfSubmitted(HalfSubmittedArgs),
    /// Remove orphaned Spark blockmgr-*/spark-* directories under the configured hostPath local-dir roots.
    LocalDirs(LocalDirsArgs),
}

#[derive(Debug, Subcommand)]
pub enum ProbeTarget {
    /// Probe the API server: a GET of /version, a LIST of this node's pods (limit=1), and a dry-run CREATE of a minimal pod through the whole admission chain.
    Api(ProbeArgs),
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

impl From<Format> for output::Format {
    fn from(f: Format) -> Self {
        match f {
            Format::Text => output::Format::Text,
            Format::Json => output::Format::Json,
        }
    }
}

#[derive(Debug, Args)]
pub struct FormatArg {
    /// Output format.
    #[arg(long, value_enum, default_value = "text", env = "NODEMEDIC_FORMAT")]
    pub format: Format,
}

impl FormatArg {
    /// The library's format.
    pub fn get(&self) -> output::Format {
        self.format.into()
    }
}

/// Where the Kubernetes API configuration comes from.
#[derive(Debug, Args)]
pub struct KubeArgs {
    /// A kubeconfig file; default: in-cluster configuration, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "NODEMEDIC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// Rule ids to skip and rule settings.
#[derive(Debug, Args)]
pub struct RuleArgs {
    /// Rule ids to skip (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', env = "NODEMEDIC_DISABLE_RULES")]
    pub disable_rule: Vec<String>,
    /// A rule setting, KEY=VALUE (repeat), e.g. orphan_grace_seconds=300; see docs/README.md#settings.
    #[arg(long = "rule-setting", value_name = "KEY=VALUE")]
    pub rule_setting: Vec<String>,
}

/// Whether a repair acts.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Act on the plan (without it: a dry run that only prints the plan).
    #[arg(long, default_value_t = false)]
    pub apply: bool,
    /// With --apply: do not ask for confirmation (required when nobody can answer).
    #[arg(long, short = 'y', default_value_t = false)]
    pub yes: bool,
    /// With --apply: act only if the plan is still the one a dry run showed with this fingerprint (its "Plan fingerprint:" line); otherwise change nothing and exit 1.
    #[arg(long, value_name = "FINGERPRINT")]
    pub expect_plan: Option<String>,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Rounds of the three probes.
    #[arg(long, default_value_t = 5)]
    pub count: u32,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// The namespace of the dry-run pod (the agent's own); default: the configuration's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// The node whose pods the LIST probe asks for; default: the host's name.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,
    /// Seconds each request may take before it counts as failed.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_seconds: f64,
    #[command(flatten)]
    pub format: FormatArg,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// This node's name (the DaemonSet sets NODE_NAME from the downward API). Required to run.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,
    /// This agent's pod name, used as the Events' reporting instance.
    #[arg(long, env = "POD_NAME", default_value = "nodemedic")]
    pub pod_name: String,
    /// The configuration file (YAML; see docs/configuration.md). Flags override its keys. Reloaded on SIGHUP.
    #[arg(long, env = "NODEMEDIC_CONFIG")]
    pub config: Option<PathBuf>,
    /// Check the configuration (file and flags) and exit: 0 when valid, 2 with the bad key named.
    #[arg(long, default_value_t = false)]
    pub check_config: bool,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Address of the /metrics, /healthz and /readyz endpoint [default: 0.0.0.0:9904].
    #[arg(long, env = "NODEMEDIC_LISTEN")]
    pub listen: Option<String>,
    /// Seconds between judgements of the rules on what is known (host changes and pod changes
    /// are judged at once, read from inotify and the pod watch) [default: 30].
    #[arg(long, env = "NODEMEDIC_SCAN_INTERVAL_SECONDS")]
    pub scan_interval_seconds: Option<f64>,
    /// Seconds between full host scans, the safety net under the change-driven reads; every
    /// scan is a full one where inotify is unavailable [default: 600].
    #[arg(long, env = "NODEMEDIC_FULL_SCAN_INTERVAL_SECONDS")]
    pub full_scan_interval_seconds: Option<f64>,
    /// Seconds between walks of the Spark local dirs, which can be large [default: 600].
    #[arg(long, env = "NODEMEDIC_LOCAL_DIR_INTERVAL_SECONDS")]
    pub local_dir_interval_seconds: Option<f64>,
    /// Seconds between measurements of the running Spark pods' local dirs, an incremental walk
    /// [default: 60].
    #[arg(long, env = "NODEMEDIC_LOCAL_STORAGE_INTERVAL_SECONDS")]
    pub local_storage_interval_seconds: Option<f64>,
    /// Seconds the growth of Spark's local storage is measured over [default: 600].
    #[arg(long, env = "NODEMEDIC_LOCAL_STORAGE_WINDOW_SECONDS")]
    pub local_storage_window_seconds: Option<f64>,
    /// hostPath directories (host paths) where Spark local dirs live (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', env = "NODEMEDIC_LOCAL_DIR_ROOTS")]
    pub local_dir_root: Vec<String>,
    /// Seconds a driver lookup is remembered [default: 300].
    #[arg(long, env = "NODEMEDIC_DRIVER_CACHE_TTL_SECONDS")]
    pub driver_cache_ttl_seconds: Option<f64>,
    /// At most this many driver lookups reach the API server per cache TTL [default: 100].
    #[arg(long, env = "NODEMEDIC_DRIVER_LOOKUP_BUDGET")]
    pub driver_lookup_budget: Option<u32>,
    /// Seconds between updates of a lasting finding's Event series [default: 600].
    #[arg(long, env = "NODEMEDIC_EVENT_SERIES_INTERVAL_SECONDS")]
    pub event_series_interval_seconds: Option<f64>,
    /// Seconds between node condition heartbeats when nothing changes [default: 300].
    #[arg(long, env = "NODEMEDIC_CONDITION_HEARTBEAT_SECONDS")]
    pub condition_heartbeat_seconds: Option<f64>,
    /// Timeout of each API request, in seconds [default: 10].
    #[arg(long, env = "NODEMEDIC_REQUEST_TIMEOUT_SECONDS")]
    pub request_timeout_seconds: Option<f64>,
    /// Seconds between rounds of API server probes, with ±10% jitter [default: 60].
    #[arg(long, env = "NODEMEDIC_PROBE_INTERVAL_SECONDS")]
    pub probe_interval_seconds: Option<f64>,
    /// Seconds a probe may take before it counts as failed [default: 60].
    #[arg(long, env = "NODEMEDIC_PROBE_TIMEOUT_SECONDS")]
    pub probe_timeout_seconds: Option<f64>,
    /// Seconds of the prober election's Lease: the holder renews every third, the others
    /// read it every four fifths and take over when it is not renewed for a whole duration
    /// [default: 60].
    #[arg(long, env = "NODEMEDIC_LEASE_DURATION_SECONDS")]
    pub lease_duration_seconds: Option<f64>,
    #[command(flatten)]
    pub rules: RuleArgs,
    /// Log format [default: text].
    #[arg(long, value_enum, env = "NODEMEDIC_LOG_FORMAT")]
    pub log_format: Option<Format>,
    /// Driver fencing on partitioned nodes: off, dry-run or on; wins over the configuration's
    /// `fencing.mode` (docs/operations/partitions.md) [default: off].
    #[arg(long, value_parser = ["off", "dry-run", "on"], env = "NODEMEDIC_FENCING")]
    pub fencing: Option<String>,
    /// Publish this node's NodeResourceTopology object (topology.node.k8s.io/v1alpha2) with
    /// the free exclusive CPUs per NUMA node, stale ones excluded; wins over the
    /// configuration's `publish_node_resource_topology`
    /// (docs/operations/node-resource-topology.md) [default: false].
    #[arg(long, env = "NODEMEDIC_PUBLISH_NODE_RESOURCE_TOPOLOGY")]
    pub publish_node_resource_topology: Option<bool>,
    /// Read Spark's local storage from the kubelet's own accounting, GET /stats/summary at
    /// this URL (https://NODE_IP:10250; needs get on nodes/stats: components/kubelet-stats),
    /// walking only what it does not report; wins over the configuration's
    /// `kubelet_stats_url`; empty is unset [default: unset, every local dir is walked].
    #[arg(long, env = "NODEMEDIC_KUBELET_STATS_URL")]
    pub kubelet_stats_url: Option<String>,
    /// Accept the kubelet's serving certificate unchecked (one it signed itself); wins over
    /// the configuration's `kubelet_stats_insecure_tls` [default: false].
    #[arg(long, env = "NODEMEDIC_KUBELET_STATS_INSECURE_TLS")]
    pub kubelet_stats_insecure_tls: Option<bool>,
    /// A DRA driver's checkpoint to judge, as FORMAT=PATH (host path; formats: nvidia-gpu),
    /// repeat or comma-separate; replaces the configuration's `dra_driver_checkpoints`.
    #[arg(
        long,
        value_name = "FORMAT=PATH",
        value_delimiter = ',',
        env = "NODEMEDIC_DRA_DRIVER_CHECKPOINTS"
    )]
    pub dra_driver_checkpoint: Vec<String>,
}

/// Where the host's files are.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// Read every host path under this directory (`/host` in the DaemonSet).
    #[arg(long, default_value = "/", env = "NODEMEDIC_HOST_ROOT")]
    pub host_root: PathBuf,
    /// The kubelet's directory (holding cpu_manager_state), used as given; default: the kubelet's --root-dir under the host root.
    #[arg(long, env = "NODEMEDIC_KUBELET_DIR")]
    pub kubelet_dir: Option<PathBuf>,
}

/// Where a command learns which pods are on the node: a pods file, the API, or neither.
#[derive(Debug, Args)]
pub struct PodSourceArgs {
    /// The node's name (the DaemonSet sets NODE_NAME); default: the kubelet's --hostname-override, else (scan, repair cpu-state) the node most local pods are bound to in --pods, else /etc/hostname.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,
    /// A `kubectl get pods -o json` file (v1 List or PodList) to judge which pods are alive, instead of the API.
    #[arg(long, env = "NODEMEDIC_PODS")]
    pub pods: Option<PathBuf>,
    /// Never contact the Kubernetes API: without --pods, liveness comes from the cgroup tree (repair local-dirs requires --pods).
    #[arg(long, default_value_t = false)]
    pub offline: bool,
    /// A kubeconfig file for reading this node's pods from the API (scan: one that cannot be read, or whose API server refuses, stops the scan, exit 2); default: in-cluster configuration, else $KUBECONFIG or ~/.kube/config, and without a usable one liveness comes from the kubelet or the cgroups.
    #[arg(long, env = "NODEMEDIC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub source: PodSourceArgs,
    /// A hostPath directory (host path) where Spark local dirs live, besides emptyDir volumes (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', env = "NODEMEDIC_LOCAL_DIR_ROOTS")]
    pub local_dir_root: Vec<String>,
    /// A DRA driver's checkpoint to judge, as FORMAT=PATH (host path; formats: nvidia-gpu),
    /// repeat or comma-separate.
    #[arg(
        long,
        value_name = "FORMAT=PATH",
        value_delimiter = ',',
        env = "NODEMEDIC_DRA_DRIVER_CHECKPOINTS"
    )]
    pub dra_driver_checkpoint: Vec<String>,
    /// The daemon's configuration file: its `rules` settings are judged with, `--rule-setting`
    /// over them, as the daemon does (in the agent: /etc/nodemedic/config.yaml).
    #[arg(long, env = "NODEMEDIC_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub rules: RuleArgs,
    #[command(flatten)]
    pub format: FormatArg,
    /// Print only the map of the node's CPUs (each CPU's socket, NUMA node, and whether it is
    /// reserved, in the shared pool, pinned by a live container or held by a stale entry): the
    /// grid in text, the `cpu_map` array in JSON. Exit status 0 when it is drawn, 4 when the
    /// CPUs could not be read (no map), 2 when the scan could not run.
    #[arg(long)]
    pub cpu_map: bool,
    /// For the floor bench (tests/src/bin/floor-bench.rs): after the scan, write to FILE every file it read, directory it listed and path it looked at, in order, one a line (`read|list|stat PATH`).
    #[arg(long, value_name = "FILE", hide = true)]
    pub record_reads: Option<PathBuf>,
}

/// The checkpoint formats `nodemedic checkpoint` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckpointKind {
    /// cpu_manager_state.
    Cpu,
    /// memory_manager_state.
    Memory,
    /// device-plugins/kubelet_internal_checkpoint.
    Devices,
    /// dra_manager_state.
    Dra,
    /// The NVIDIA GPU DRA driver's checkpoint.json (no checksum is verified).
    NvidiaGpu,
}

impl CheckpointKind {
    /// The kind a file's name says: the kubelet's names, a `checkpoint.json` in a
    /// `gpu.nvidia.com` directory; else the CPU manager's.
    pub fn of(path: &std::path::Path) -> CheckpointKind {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let parent = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        match (name, parent) {
            ("memory_manager_state", _) => CheckpointKind::Memory,
            ("kubelet_internal_checkpoint", _) => CheckpointKind::Devices,
            ("dra_manager_state", _) => CheckpointKind::Dra,
            ("checkpoint.json", "gpu.nvidia.com") => CheckpointKind::NvidiaGpu,
            _ => CheckpointKind::Cpu,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum CheckpointAction {
    /// Check the file as a scan judges it: its checksum against every kubelet layout, and what any kubelet refuses (exit 0 valid, 1 invalid, 2 unreadable).
    Verify {
        file: PathBuf,
        /// Which checkpoint the file is [default: by its name: memory_manager_state,
        /// kubelet_internal_checkpoint, dra_manager_state, a checkpoint.json under
        /// gpu.nvidia.com; else cpu].
        #[arg(long, value_enum)]
        kind: Option<CheckpointKind>,
        #[command(flatten)]
        format: FormatArg,
    },
    /// Print what the file holds: its layout, and its assignments, entries or claims.
    Show {
        file: PathBuf,
        /// Which checkpoint the file is [default: by its name, as for verify].
        #[arg(long, value_enum)]
        kind: Option<CheckpointKind>,
        #[command(flatten)]
        format: FormatArg,
    },
}

/// `nodemedic repair cpu-state`.
#[derive(Debug, Args)]
pub struct CpuStateArgs {
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub source: PodSourceArgs,
    /// Rewrite the checkpoint (default: show the plan only). The kubelet must be stopped, or --restart-kubelet given.
    #[arg(long, default_value_t = false)]
    pub apply: bool,
    /// With --apply: stop the kubelet for the write and start it again afterwards.
    #[arg(long, default_value_t = false)]
    pub restart_kubelet: bool,
    /// With --apply: do not ask for confirmation (required without a terminal).
    #[arg(long, short = 'y', default_value_t = false)]
    pub yes: bool,
    /// With --apply: act only if the plan is still the one a dry run showed with this fingerprint (its "Plan fingerprint:" line); otherwise change nothing and exit 1.
    #[arg(long, value_name = "FINGERPRINT")]
    pub expect_plan: Option<String>,
    /// Rewrite a checkpoint whose checksum matches no known kubelet layout (the new file gets a V2/V3 checksum).
    #[arg(long, default_value_t = false)]
    pub force_unknown_layout: bool,
    /// Where the backup of the original file is written; default: beside the checkpoint, in the kubelet directory.
    #[arg(long, env = "NODEMEDIC_BACKUP_DIR")]
    pub backup_dir: Option<PathBuf>,
    /// The systemctl program that stops and starts the kubelet (run in the namespaces of the host's pid 1 when the agent runs in a pod: the host's own).
    #[arg(long, env = "NODEMEDIC_SYSTEMCTL", default_value = "systemctl")]
    pub systemctl: PathBuf,
    /// The systemd-run program that arms the guard: a transient timer on the host that starts the kubelet if nodemedic dies after stopping it.
    #[arg(long, env = "NODEMEDIC_SYSTEMD_RUN", default_value = "systemd-run")]
    pub systemd_run: PathBuf,
    /// The daemon's configuration file: its `rules` settings (reconcile_grace_seconds, ...) judge which entries are stale, as for `nodemedic scan` and the daemon (in the agent: /etc/nodemedic/config.yaml).
    #[arg(long, env = "NODEMEDIC_CONFIG")]
    pub config: Option<PathBuf>,
    /// A rule setting, KEY=VALUE (repeat), as for `nodemedic scan`.
    #[arg(long = "rule-setting", value_name = "KEY=VALUE")]
    pub rule_setting: Vec<String>,
    /// With --restart-kubelet: seconds after the stop at which the guard starts the kubelet if nodemedic has not (it is disarmed once nodemedic has started it).
    #[arg(long, default_value_t = crate::repair::cpu_state::DEFAULT_GUARD_SECONDS)]
    pub guard_seconds: u64,
    /// With --restart-kubelet: stop the kubelet without arming the guard (for hosts without systemd; if nodemedic dies meanwhile, nothing starts the kubelet).
    #[arg(long, default_value_t = false)]
    pub no_guard: bool,
    /// The kubelet's systemd unit.
    #[arg(long, env = "NODEMEDIC_KUBELET_UNIT", default_value = "kubelet")]
    pub kubelet_unit: String,
    /// Seconds the kubelet may take to stop, and to run again after the start.
    #[arg(long, default_value_t = 60.0)]
    pub kubelet_timeout_seconds: f64,
    /// Seconds to watch the restarted kubelet (does it stay up, does it rewrite the file) before the final check.
    #[arg(long, default_value_t = 15.0)]
    pub settle_seconds: f64,
    #[command(flatten)]
    pub format: FormatArg,
}

/// The flags both pod repairs take.
#[derive(Debug, Args)]
pub struct PodRepairArgs {
    /// This node's name (the DaemonSet sets NODE_NAME); default: the kubelet's --hostname-override or /etc/hostname.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Read the host under this directory too, for the evidence: local data sizes, exclusive CPUs (`/host` in the DaemonSet).
    #[arg(long, env = "NODEMEDIC_HOST_ROOT")]
    pub host_root: Option<PathBuf>,
    /// The kubelet's directory, used as given (with --host-root); default: the kubelet's --root-dir under the host root.
    #[arg(long, env = "NODEMEDIC_KUBELET_DIR")]
    pub kubelet_dir: Option<PathBuf>,
    /// The daemon's configuration file: its `rules` settings (orphan_grace_seconds, ...) are used (in the agent: /etc/nodemedic/config.yaml).
    #[arg(long, env = "NODEMEDIC_CONFIG")]
    pub config: Option<PathBuf>,
    /// A rule setting, KEY=VALUE (repeat), as for `nodemedic scan`.
    #[arg(long = "rule-setting", value_name = "KEY=VALUE")]
    pub rule_setting: Vec<String>,
    #[command(flatten)]
    pub apply: ApplyArgs,
    #[command(flatten)]
    pub format: FormatArg,
}

/// `nodemedic repair orphans`.
#[derive(Debug, Args)]
pub struct OrphansArgs {
    #[command(flatten)]
    pub common: PodRepairArgs,
    /// How long a driver must have finished before its executors are orphans, in seconds [default: the rule's orphan_grace_seconds, 600].
    #[arg(long)]
    pub older_than_seconds: Option<i64>,
    /// Also delete orphans that have not finished (Pending, Running): their JVM is stopped.
    #[arg(long, default_value_t = false)]
    pub include_running: bool,
}

/// `nodemedic repair failed-pods`.
#[derive(Debug, Args)]
pub struct FailedPodsArgs {
    #[command(flatten)]
    pub common: PodRepairArgs,
    /// Only pods rejected (created) longer ago than this, in seconds.
    #[arg(long, default_value_t = crate::repair::pods::DEFAULT_FAILED_POD_MIN_AGE_SECONDS)]
    pub older_than_seconds: i64,
}

/// `nodemedic repair half-submitted`.
#[derive(Debug, Args)]
pub struct HalfSubmittedArgs {
    #[command(flatten)]
    pub common: PodRepairArgs,
    /// How long a driver must have waited to start, in seconds [default: the rule's half_submitted_grace_seconds, 300].
    #[arg(long)]
    pub older_than_seconds: Option<i64>,
}

/// `nodemedic repair local-dirs`.
#[derive(Debug, Args)]
pub struct LocalDirsArgs {
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub source: PodSourceArgs,
    /// A hostPath directory (host path) where Spark local dirs live (repeat or comma-separate); only directories directly under these are removed. Default: the configuration file's local_dir_roots.
    #[arg(long, value_delimiter = ',', env = "NODEMEDIC_LOCAL_DIR_ROOTS")]
    pub local_dir_root: Vec<String>,
    /// The daemon's configuration file: its local_dir_roots and `rules` settings are used (in the agent: /etc/nodemedic/config.yaml).
    #[arg(long, env = "NODEMEDIC_CONFIG")]
    pub config: Option<PathBuf>,
    /// A rule setting, KEY=VALUE (repeat), as for `nodemedic scan`.
    #[arg(long = "rule-setting", value_name = "KEY=VALUE")]
    pub rule_setting: Vec<String>,
    /// Only directories in which nothing changed for this long, in seconds [default: the rule's local_dir_min_age_seconds, 3600].
    #[arg(long)]
    pub older_than_seconds: Option<i64>,
    #[command(flatten)]
    pub apply: ApplyArgs,
    #[command(flatten)]
    pub format: FormatArg,
}

/// Parses one subcommand's flags alone (`["--host-root", "/x", "--apply"]`), for tests and for
/// callers without the whole command line.
pub fn parse_alone<A: Args>(
    name: &'static str,
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
) -> Result<A, clap::Error> {
    let command = A::augment_args(clap::Command::new(name).no_binary_name(true));
    let matches = command.try_get_matches_from(args)?;
    <A as clap::FromArgMatches>::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repair(args: &[&str]) -> Result<RepairAction, clap::Error> {
        let argv = ["nodemedic", "repair"].into_iter().chain(args.iter().copied());
        match Cli::try_parse_from(argv)?.command {
            Command::Repair { action } => Ok(action),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn repair_flags_parse_as_subcommands() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let Ok(RepairAction::Orphans(o)) =
            repair(&["orphans", "--node", "n1", "--include-running", "--apply", "--yes"])
        else {
            panic!()
        };
        assert!(o.include_running && o.common.apply.apply && o.common.apply.yes);
        assert_eq!(o.common.node.as_deref(), Some("n1"));
        let Ok(RepairAction::FailedPods(f)) =
            repair(&["failed-pods", "--older-than-seconds", "60", "--format", "json"])
        else {
            panic!()
        };
        assert_eq!(
            (f.older_than_seconds, f.common.format.format, f.common.apply.apply),
            (60, Format::Json, false)
        );
        let Ok(RepairAction::LocalDirs(l)) = repair(&[
            "local-dirs",
            "--local-dir-root",
            "/a,/b",
            "--offline",
            "--pods",
            "p.json",
        ]) else {
            panic!()
        };
        assert_eq!(l.local_dir_root, ["/a", "/b"]);
        assert!(repair(&["orphans", "--older-than-seconds", "soon"]).is_err());
    }

    #[test]
    fn one_subcommand_parses_alone() {
        let a = parse_alone::<CpuStateArgs>(
            "cpu-state",
            ["--host-root", "/x", "--apply", "--yes", "--format", "json"],
        )
        .unwrap();
        assert!(a.apply && a.yes && !a.restart_kubelet);
        assert_eq!(a.host.host_root, PathBuf::from("/x"));
        assert_eq!(a.systemctl, PathBuf::from("systemctl"));
        assert_eq!(a.format.format, Format::Json);
        assert!(parse_alone::<CpuStateArgs>("cpu-state", ["--nope"]).is_err());
    }
}
