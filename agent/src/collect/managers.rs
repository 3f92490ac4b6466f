//! The other resource managers' checkpoints: `memory_manager_state`,
//! `device-plugins/kubelet_internal_checkpoint` and `dra_manager_state` in the kubelet
//! directory, and the DRA drivers' own checkpoints the configuration names.
//!
//! Each is read like `cpu_manager_state` ([`super::checkpoint::read_file`]): a missing file is
//! the normal state of a manager that is not enabled, content the kubelet could not read
//! either is kept for `checkpoint-unreadable`, and only a failure that says nothing about the
//! file is a source error. The files are small (a few KiB on a busy node), so every host read
//! reads them all.

use std::path::Path;
use std::time::SystemTime;

use nodemedic_rules::managers::KubeletCheckpoint;
use nodemedic_rules::managers::drivers::{self, DriverFormat};
use nodemedic_rules::snapshot::{DriverFile, ManagerFile, ManagerFiles, Observed};

use super::checkpoint::{FileRead, read_file};
use crate::host::HostPaths;

/// The kubelet directory the device manager's checkpoint is always under.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";

/// A DRA driver checkpoint to read: its format and host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverCheckpoint {
    pub format: DriverFormat,
    /// The host's path (`/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json`).
    pub path: String,
}

/// Why a DRA driver checkpoint to read is named wrongly (a flag's value or a configuration
/// entry; the caller names which).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverCheckpointError {
    /// Not `FORMAT=PATH` (the text as given).
    #[error("{text:?}: expected FORMAT=PATH, e.g. nvidia-gpu=/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json")]
    NotFormatPath { text: String },
    /// A format nodemedic does not read.
    #[error(
        "{format:?} is not a driver format nodemedic reads (known: {})",
        DriverFormat::ALL.map(DriverFormat::name).join(", ")
    )]
    UnknownFormat { format: String },
    /// The path is not absolute.
    #[error("{path:?} is not an absolute host path")]
    RelativePath { path: String },
}

impl DriverCheckpoint {
    /// Reads `format=path` (the command line's form).
    pub fn parse(text: &str) -> Result<DriverCheckpoint, DriverCheckpointError> {
        let Some((format, path)) = text.split_once('=') else {
            return Err(DriverCheckpointError::NotFormatPath { text: text.to_string() });
        };
        Self::new(format, path)
    }

    /// A checkpoint of the format named `format` at host path `path`.
    pub fn new(format: &str, path: &str) -> Result<DriverCheckpoint, DriverCheckpointError> {
        let format = DriverFormat::from_name(format).ok_or_else(|| DriverCheckpointError::UnknownFormat {
            format: format.to_string(),
        })?;
        if !path.starts_with('/') {
            return Err(DriverCheckpointError::RelativePath { path: path.to_string() });
        }
        Ok(DriverCheckpoint {
            format,
            path: path.to_string(),
        })
    }
}

/// Reads one kubelet checkpoint of type `C` below `kubelet_dir`.
pub fn read_manager_file<C: KubeletCheckpoint>(
    host: &HostPaths,
    kubelet_dir: &Path,
    now: SystemTime,
) -> Observed<ManagerFile<C>> {
    match read_file(host, &kubelet_dir.join(C::FILE), now) {
        Observed::Ok(FileRead {
            path,
            age_seconds,
            bytes,
            ..
        }) => Observed::Ok(ManagerFile::new(path, age_seconds, bytes.and_then(|b| C::parse(&b)))),
        Observed::Missing { path } => Observed::Missing { path },
        Observed::NotApplicable { reason } => Observed::NotApplicable { reason },
        Observed::Error { reason } => Observed::Error { reason },
    }
}

/// Reads one DRA driver checkpoint.
pub fn read_driver_file(host: &HostPaths, checkpoint: &DriverCheckpoint, now: SystemTime) -> DriverFile {
    let local = host.host(&checkpoint.path);
    let (age_seconds, claims) = match read_file(host, &local, now) {
        Observed::Ok(read) => (
            read.age_seconds,
            match read.bytes.and_then(|b| drivers::parse(checkpoint.format, &b)) {
                Ok(claims) => Observed::Ok(claims),
                Err(e) => Observed::Error {
                    reason: format!("{}: {e}", read.path),
                },
            },
        ),
        Observed::Missing { path } => (None, Observed::Missing { path }),
        Observed::NotApplicable { reason } => (None, Observed::NotApplicable { reason }),
        Observed::Error { reason } => (None, Observed::Error { reason }),
    };
    DriverFile {
        format: checkpoint.format,
        path: checkpoint.path.clone(),
        age_seconds,
        claims,
    }
}

/// Reads every manager checkpoint below `kubelet_dir` and the configured driver checkpoints.
pub fn read_managers(
    host: &HostPaths,
    kubelet_dir: &Path,
    drivers: &[DriverCheckpoint],
    now: SystemTime,
) -> ManagerFiles {
    // The device manager's directory is fixed (`pluginapi.DevicePluginPath`), whatever the
    // kubelet's --root-dir.
    let devices_dir = host.host(DEFAULT_KUBELET_DIR);
    ManagerFiles {
        memory: read_manager_file(host, kubelet_dir, now),
        devices: read_manager_file(host, &devices_dir, now),
        dra: read_manager_file(host, kubelet_dir, now),
        drivers: drivers.iter().map(|d| read_driver_file(host, d, now)).collect(),
    }
}

/// The report's status of the manager checkpoints together: `ok` when every file present
/// was read (content errors are findings, not source errors), else the first source error.
pub fn status(files: &ManagerFiles) -> (String, bool) {
    let errors: Vec<String> = [files.memory.status(), files.devices.status(), files.dra.status()]
        .into_iter()
        .chain(files.drivers.iter().map(|d| d.claims.status()))
        .filter(|s| s.starts_with("error: "))
        .collect();
    match errors.first() {
        Some(e) => (e.clone(), true),
        None => ("ok".to_string(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::CheckpointError;
    use nodemedic_rules::managers::memory::MemoryCheckpoint;

    #[test]
    fn driver_checkpoints_parse_from_the_command_line() {
        let d = DriverCheckpoint::parse("nvidia-gpu=/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json").unwrap();
        assert_eq!(d.format, DriverFormat::NvidiaGpu);
        assert_eq!(d.path, "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json");
        let e = DriverCheckpoint::parse("nvidia-gpu").unwrap_err();
        assert_eq!(
            e,
            DriverCheckpointError::NotFormatPath {
                text: "nvidia-gpu".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "\"nvidia-gpu\": expected FORMAT=PATH, e.g. nvidia-gpu=/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json"
        );
        let e = DriverCheckpoint::parse("amd=/x").unwrap_err();
        assert_eq!(e, DriverCheckpointError::UnknownFormat { format: "amd".into() });
        assert!(
            e.to_string()
                .starts_with("\"amd\" is not a driver format nodemedic reads (known: nvidia-gpu"),
            "{e}"
        );
        let e = DriverCheckpoint::parse("nvidia-gpu=rel/x").unwrap_err();
        assert_eq!(e, DriverCheckpointError::RelativePath { path: "rel/x".into() });
        assert_eq!(e.to_string(), "\"rel/x\" is not an absolute host path");
    }

    #[test]
    fn outcomes() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostPaths::new(dir.path(), None);
        let kdir = dir.path().join("var/lib/kubelet");
        std::fs::create_dir_all(kdir.join("device-plugins")).unwrap();
        let now = SystemTime::now();
        let nvidia =
            DriverCheckpoint::parse("nvidia-gpu=/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json").unwrap();
        let files = read_managers(&host, &kdir, std::slice::from_ref(&nvidia), now);
        assert_eq!(files.memory.status(), "missing");
        assert!(
            matches!(&files.devices, Observed::Missing { path } if path == "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
        );
        assert!(
            matches!(&files.drivers[0].claims, Observed::Missing { path } if path == "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json")
        );
        assert_eq!(status(&files), ("ok".to_string(), false));

        std::fs::write(kdir.join("memory_manager_state"), b"{not json").unwrap();
        let Observed::Ok(f) = read_manager_file::<MemoryCheckpoint>(&host, &kdir, now) else {
            panic!()
        };
        assert!(
            matches!(f.content, Err(CheckpointError::Json { line: 1, .. })),
            "{:?}",
            f.content
        );
        assert_eq!(f.path, "/var/lib/kubelet/memory_manager_state");

        let plugin = dir.path().join("var/lib/kubelet/plugins/gpu.nvidia.com");
        std::fs::create_dir_all(&plugin).unwrap();
        std::fs::write(plugin.join("checkpoint.json"), b"[]").unwrap();
        let d = read_driver_file(&host, &nvidia, now);
        assert_eq!(
            d.claims.status(),
            "error: /var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json: top-level JSON value is an array, not an object"
        );
    }
}
