//! The command line (DESIGN.md "Command line"). Every flag is long, has a default and an
//! environment variable, so the DaemonSet can set them without a shell.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// nodemedic: finds and explains kubelet CPU manager and Spark-on-Kubernetes failures on a node.
#[derive(Debug, Parser)]
#[command(name = "nodemedic", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect the node and report findings (exit 0: none at warning or above, 1: some, 2: could not run).
    Scan(ScanArgs),
    /// Read a kubelet CPU manager checkpoint file.
    Checkpoint {
        #[command(subcommand)]
        action: CheckpointAction,
    },
    /// List the rules nodemedic runs.
    Rules(FormatArg),
    /// Run as the DaemonSet's daemon: watch this node's pods, scan periodically, export metrics, Events and node conditions.
    Run(RunArgs),
    /// Repair what a scan found: a plan first, action only with --apply.
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
    /// Free the CPU manager checkpoint's stale entries and keep every live pod's pinning (the kubelet must be stopped, or --restart-kubelet).
    CpuState(crate::repair::cpu_state::CpuStateArgs),
    /// Delete orphaned Spark executors (driver gone, replaced or long finished), with their UID as a precondition.
    Orphans(crate::repair::pods::OrphansArgs),
    /// Delete pods the kubelet rejected at admission (OutOfcpu, ...), older than a threshold, with their UID as a precondition.
    FailedPods(crate::repair::pods::FailedPodsArgs),
    /// Remove orphaned Spark blockmgr-*/spark-* directories under the configured hostPath local-dir roots.
    LocalDirs(crate::repair::local_dirs::LocalDirsArgs),
}

#[derive(Debug, Subcommand)]
pub enum ProbeTarget {
    /// Probe the API server: a GET of /version, a LIST of this node's pods (limit=1), and a dry-run CREATE of a minimal pod through the whole admission chain.
    Api(ProbeArgs),
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Rounds of the three probes.
    #[arg(long, default_value_t = 5)]
    pub count: u32,
    /// A kubeconfig file; default: in-cluster configuration, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "NODEMEDIC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
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
    /// A kubeconfig file; default: in-cluster configuration, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "NODEMEDIC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the /metrics, /healthz and /readyz endpoint [default: 0.0.0.0:9904].
    #[arg(long, env = "NODEMEDIC_LISTEN")]
    pub listen: Option<String>,
    /// Seconds between host scans; pod changes also trigger one [default: 30].
    #[arg(long, env = "NODEMEDIC_SCAN_INTERVAL_SECONDS")]
    pub scan_interval_seconds: Option<f64>,
    /// Seconds between walks of the Spark local dirs, which can be large [default: 600].
    #[arg(long, env = "NODEMEDIC_LOCAL_DIR_INTERVAL_SECONDS")]
    pub local_dir_interval_seconds: Option<f64>,
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
    /// Rule ids to skip (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', env = "NODEMEDIC_DISABLE_RULES")]
    pub disable_rule: Vec<String>,
    /// A rule setting, KEY=VALUE (repeat), e.g. orphan_grace_seconds=300; see docs/README.md#settings.
    #[arg(long = "rule-setting", value_name = "KEY=VALUE")]
    pub rule_setting: Vec<String>,
    /// Log format [default: text].
    #[arg(long, value_enum, env = "NODEMEDIC_LOG_FORMAT")]
    pub log_format: Option<Format>,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct FormatArg {
    /// Output format.
    #[arg(long, value_enum, default_value = "text", env = "NODEMEDIC_FORMAT")]
    pub format: Format,
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
    /// A kubeconfig file for reading this node's pods from the API; default: in-cluster configuration, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "NODEMEDIC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl PodSourceArgs {
    /// The node whose pods to ask the API for, when the API is to be asked (not with --pods or
    /// --offline): --node, else the kubelet's --hostname-override or the host's /etc/hostname.
    pub fn api_node(&self, host: &crate::host::HostPaths) -> Option<String> {
        if self.pods.is_some() || self.offline {
            return None;
        }
        Some(
            self.node
                .clone()
                .unwrap_or_else(|| crate::collect::host_node_name(host)),
        )
    }
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
    /// Rule ids to skip (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', env = "NODEMEDIC_DISABLE_RULES")]
    pub disable_rule: Vec<String>,
    /// A rule setting, KEY=VALUE (repeat), e.g. orphan_grace_seconds=300; see docs/README.md#settings.
    #[arg(long = "rule-setting", value_name = "KEY=VALUE")]
    pub rule_setting: Vec<String>,
    #[command(flatten)]
    pub format: FormatArg,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointAction {
    /// Check the file's checksum against every kubelet layout (exit 0 valid, 1 invalid, 2 unreadable).
    Verify {
        file: PathBuf,
        #[command(flatten)]
        format: FormatArg,
    },
    /// Print the file's policy, default set and assignments.
    Show {
        file: PathBuf,
        #[command(flatten)]
        format: FormatArg,
    },
}
