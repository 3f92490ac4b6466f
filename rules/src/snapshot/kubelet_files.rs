//! The kubelet's files as read: the CPU manager checkpoint, the other resource managers'
//! checkpoints (memory, devices, DRA, and the DRA drivers' own), and the kubelet's
//! configuration with where its command line was found.

use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::managers::KubeletCheckpoint;
use crate::managers::devices::DeviceCheckpoint;
use crate::managers::dra::DraCheckpoint;
use crate::managers::drivers::{DriverClaim, DriverFormat};
use crate::managers::memory::MemoryCheckpoint;
use crate::validate::CpuManagerConfig;

use super::Observed;

/// The checkpoint file as read.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFile {
    /// Host path of the file.
    pub path: String,
    /// Seconds since the file was last written (from its mtime), when known.
    pub age_seconds: Option<f64>,
    /// Its mtime, unix seconds (with the fraction), when known.
    pub modified_at: Option<f64>,
    /// The parsed file, or why the kubelet could not read it either.
    pub content: Result<Checkpoint, CheckpointError>,
    /// Its state (cpusets parsed), computed once when the file is read; every rule, the
    /// metrics and the repairs use this one.
    pub state: Result<crate::checkpoint::CpuState, CheckpointError>,
}

impl CheckpointFile {
    /// The file at host path `path`, `age_seconds` old, as parsed: its state is computed here,
    /// once.
    pub fn new(path: String, age_seconds: Option<f64>, content: Result<Checkpoint, CheckpointError>) -> Self {
        let state = content.as_ref().map_err(Clone::clone).and_then(Checkpoint::state);
        CheckpointFile {
            path,
            age_seconds,
            modified_at: None,
            content,
            state,
        }
    }
}

/// One of the other resource managers' checkpoints as read (memory, devices, DRA).
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerFile<C: KubeletCheckpoint> {
    /// Host path of the file.
    pub path: String,
    /// Seconds since the file was last written (from its mtime), when known.
    pub age_seconds: Option<f64>,
    /// The parsed file, or why it cannot be read.
    pub content: Result<C, CheckpointError>,
    /// Which kubelet layout's checksum matched (`None` when the content is unreadable).
    pub verification: Option<crate::Verification>,
    /// Its meaning, computed once when the file is read.
    pub state: Result<C::State, CheckpointError>,
}

impl<C: KubeletCheckpoint> ManagerFile<C> {
    /// The file at host path `path`, `age_seconds` old, as parsed: its checksum and state are
    /// computed here, once.
    pub fn new(path: String, age_seconds: Option<f64>, content: Result<C, CheckpointError>) -> Self {
        let verification = content.as_ref().ok().map(C::verify);
        let state = content.as_ref().map_err(Clone::clone).and_then(C::state);
        ManagerFile {
            path,
            age_seconds,
            content,
            verification,
            state,
        }
    }

    /// The file's meaning when it is readable and a kubelet accepts its checksum: what the
    /// kubelet restores at its next start, and what the stale rules judge.
    pub fn accepted_state(&self) -> Option<&C::State> {
        let accepted = self.verification.as_ref().is_some_and(crate::Verification::accepted);
        self.state.as_ref().ok().filter(|_| accepted)
    }
}

/// A DRA driver's own checkpoint, configured by path (`dra_driver_checkpoints`).
#[derive(Debug, Clone, PartialEq)]
pub struct DriverFile {
    pub format: DriverFormat,
    /// Host path of the file.
    pub path: String,
    /// Seconds since the file was last written, when known.
    pub age_seconds: Option<f64>,
    /// The claims it holds, or why it cannot be read (`Missing` when there is no file).
    pub claims: Observed<Vec<DriverClaim>>,
}

/// The other resource managers' checkpoints (`Missing` where a file is absent, the normal
/// state of a manager that is not enabled).
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerFiles {
    pub memory: Observed<ManagerFile<MemoryCheckpoint>>,
    pub devices: Observed<ManagerFile<DeviceCheckpoint>>,
    pub dra: Observed<ManagerFile<DraCheckpoint>>,
    /// The configured DRA driver checkpoints, in configuration order.
    pub drivers: Vec<DriverFile>,
}

impl ManagerFiles {
    /// Whether a readable DRA file (the kubelet's or a driver's) holds a prepared claim.
    pub fn holds_prepared_claims(&self) -> bool {
        let kubelet = self
            .dra
            .ok()
            .and_then(|f| f.state.as_ref().ok())
            .is_some_and(|s| !s.claims.is_empty());
        kubelet
            || self
                .drivers
                .iter()
                .any(|d| d.claims.ok().is_some_and(|c| !c.is_empty()))
    }

    /// The files' ages moved on by `seconds` (a snapshot assembled from earlier readings).
    pub fn add_age(&mut self, seconds: f64) {
        let bump = |age: &mut Option<f64>| *age = age.map(|a| a + seconds);
        if let Observed::Ok(f) = &mut self.memory {
            bump(&mut f.age_seconds);
        }
        if let Observed::Ok(f) = &mut self.devices {
            bump(&mut f.age_seconds);
        }
        if let Observed::Ok(f) = &mut self.dra {
            bump(&mut f.age_seconds);
        }
        for d in &mut self.drivers {
            bump(&mut d.age_seconds);
        }
    }

    /// No file read: every kubelet file missing at its default path, no driver configured.
    pub fn missing() -> Self {
        fn at<T>(file: &str) -> Observed<T> {
            Observed::Missing {
                path: format!("/var/lib/kubelet/{file}"),
            }
        }
        ManagerFiles {
            memory: at(MemoryCheckpoint::FILE),
            devices: at(DeviceCheckpoint::FILE),
            dra: at(DraCheckpoint::FILE),
            drivers: Vec::new(),
        }
    }
}

/// The kubelet's `containerRuntimeEndpoint` when it sets none (1.27+: containerd's socket).
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// The kubelet's configuration as far as nodemedic uses it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KubeletConfig {
    /// Host path of the file it came from: the `--config` file, else the `--config-dir`
    /// directory when only drop-ins were read (`None`: defaults and flags only).
    pub path: Option<String>,
    /// Where the command line and the path came from.
    pub found_by: FoundBy,
    pub cpu_manager: CpuManagerConfig,
    /// `cgroupDriver`: `cgroupfs` or `systemd`.
    pub cgroup_driver: String,
    /// `cgroupRoot` (`/` when unset).
    pub cgroup_root: String,
    /// `topologyManagerPolicy` (`none` when unset).
    pub topology_manager_policy: String,
    /// `topologyManagerScope` (`container` when unset).
    pub topology_manager_scope: String,
    /// `evictionHard`, `evictionSoft`, `mergeDefaultEvictionSettings` (and their flags).
    pub eviction: crate::local_storage::EvictionConfig,
    /// `containerRuntimeEndpoint` (`--container-runtime-endpoint`; the kubelet's default,
    /// containerd's socket, when unset): which runtime keeps the images.
    pub container_runtime_endpoint: String,
    /// When the kubelet process started, unix seconds (from procfs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
}

/// Where nodemedic found the kubelet's command line, and with it the configuration file
/// (docs/kubelet.md, "The kubelet's configuration").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundBy {
    /// The running kubelet's command line (`/proc/<pid>/cmdline`): its `--config` and flags.
    Cmdline,
    /// No kubelet runs: the command line its systemd unit starts it with. `file` is the host
    /// path of the unit, drop-in or environment file whose line named `--config` (the unit's
    /// own file when nothing did).
    SystemdUnit { file: String },
    /// No kubelet runs and no unit says how it starts: a distribution's usual place.
    DefaultPath,
}

impl FoundBy {
    /// How the report says it, after the path: `from the systemd drop-in <file>`; `None` for
    /// the running kubelet's command line and a default path, which need no words.
    pub fn describe(&self) -> Option<String> {
        match self {
            FoundBy::SystemdUnit { file } if file.contains(".service.d/") => {
                Some(format!("from the systemd drop-in {file}"))
            }
            FoundBy::SystemdUnit { file } if file.ends_with(".service") => {
                Some(format!("from the systemd unit {file}"))
            }
            FoundBy::SystemdUnit { file } => Some(format!("from {file}, read by the kubelet's systemd unit")),
            FoundBy::Cmdline | FoundBy::DefaultPath => None,
        }
    }
}

impl std::fmt::Display for FoundBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FoundBy::Cmdline => write!(f, "cmdline"),
            FoundBy::SystemdUnit { file } => write!(f, "systemd unit {file}"),
            FoundBy::DefaultPath => write!(f, "default path"),
        }
    }
}

impl serde::Serialize for FoundBy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
