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

#[derive(Debug, Args)]
pub struct ScanArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// The node's name; default: the kubelet's --hostname-override, the node most local pods are bound to in --pods, or /etc/hostname.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,
    /// A `kubectl get pods -o json` file (v1 List or PodList) to judge which pods are alive.
    #[arg(long, env = "NODEMEDIC_PODS")]
    pub pods: Option<PathBuf>,
    /// Never contact the Kubernetes API (scan reads only the host and --pods today).
    #[arg(long, default_value_t = false)]
    pub offline: bool,
    /// A hostPath directory (host path) where Spark local dirs live, besides emptyDir volumes (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', env = "NODEMEDIC_LOCAL_DIR_ROOTS")]
    pub local_dir_root: Vec<String>,
    /// Rule ids to skip (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', env = "NODEMEDIC_DISABLE_RULES")]
    pub disable_rule: Vec<String>,
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
