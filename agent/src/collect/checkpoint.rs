//! The CPU manager checkpoint, `<kubelet dir>/cpu_manager_state`.
//!
//! A missing file is normal (the kubelet writes one on start, and nodes without the CPU
//! manager may have none). Content the kubelet could not read either (bad JSON, a directory,
//! an absurd size) is kept as the snapshot's content error so that `checkpoint-unreadable`
//! reports it; only a failure that says nothing about the file (permission denied) is a
//! source error.

use std::path::Path;
use std::time::SystemTime;

use nodemedic_rules::checkpoint::MAX_CHECKPOINT_BYTES;
use nodemedic_rules::snapshot::{CheckpointFile, Observed};
use nodemedic_rules::{Checkpoint, CheckpointError};

use super::read::{ReadError, read_bytes, trace};
use crate::host::HostPaths;

/// The file name inside the kubelet directory.
pub const FILE_NAME: &str = "cpu_manager_state";

/// What nodemedic's atomic writes put in the names of their temporary files
/// (`.cpu_manager_state.nodemedic-tmp-<pid>-<nanos>`, and the same for backups).
pub const TMP_MARK: &str = ".nodemedic-tmp-";

/// Notes for the temporary files an interrupted `repair cpu-state` left in the kubelet
/// directory (the next `repair cpu-state --apply` removes them).
pub fn leftover_notes(host: &HostPaths, kubelet_dir: &Path) -> Vec<String> {
    trace::dir(kubelet_dir);
    let Ok(entries) = std::fs::read_dir(kubelet_dir) else {
        return vec![];
    };
    let ours = |n: &str| n.starts_with(&format!(".{FILE_NAME}")) && n.contains(TMP_MARK);
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| ours(n))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            format!(
                "{}: a temporary file of an interrupted `repair cpu-state`; the next `nodemedic repair cpu-state \
                 --apply` removes it (the kubelet reads only {FILE_NAME}, never this file)",
                host.display(&kubelet_dir.join(n))
            )
        })
        .collect()
}

/// A kubelet checkpoint file as found on disk, before its format is read.
#[derive(Debug)]
pub struct FileRead {
    /// The host's path of the file.
    pub path: String,
    pub age_seconds: Option<f64>,
    pub modified_at: Option<f64>,
    /// Its bytes, or why the kubelet could not read them either (a directory, too large).
    pub bytes: Result<Vec<u8>, CheckpointError>,
}

/// Reads the checkpoint file `local` (at most [`MAX_CHECKPOINT_BYTES`]); `now` gives its age.
/// `Missing` when there is none, `Error` when it cannot be read for a reason that says
/// nothing about the file (permission denied).
pub fn read_file(host: &HostPaths, local: &Path, now: SystemTime) -> Observed<FileRead> {
    let path = host.display(local);
    trace::stat(local);
    let modified = std::fs::metadata(local).and_then(|m| m.modified()).ok();
    let age_seconds = modified
        .and_then(|m| now.duration_since(m).ok())
        .map(|d| d.as_secs_f64());
    let modified_at = modified
        .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64());
    let bytes = match read_bytes(local, &path, MAX_CHECKPOINT_BYTES) {
        Ok(None) => return Observed::Missing { path },
        Ok(Some(bytes)) => Ok(bytes),
        Err(ReadError::IsDir { .. }) => Err(CheckpointError::NotAFile),
        Err(ReadError::TooLarge { .. }) => Err(CheckpointError::TooLarge {
            size: {
                trace::stat(local);
                std::fs::metadata(local)
            }
            .map_or(MAX_CHECKPOINT_BYTES + 1, |m| m.len()),
            limit: MAX_CHECKPOINT_BYTES,
        }),
        Err(e) => return Observed::Error { reason: e.to_string() },
    };
    Observed::Ok(FileRead {
        path,
        age_seconds,
        modified_at,
        bytes,
    })
}

/// Reads the checkpoint in `kubelet_dir`; `now` gives the file's age.
pub fn read_checkpoint(host: &HostPaths, kubelet_dir: &Path, now: SystemTime) -> Observed<CheckpointFile> {
    let read = match read_file(host, &kubelet_dir.join(FILE_NAME), now) {
        Observed::Ok(read) => read,
        Observed::Missing { path } => return Observed::Missing { path },
        Observed::NotApplicable { reason } => return Observed::NotApplicable { reason },
        Observed::Error { reason } => return Observed::Error { reason },
    };
    let content = read.bytes.and_then(|b| Checkpoint::parse(&b));
    let mut file = CheckpointFile::new(read.path, read.age_seconds, content);
    file.modified_at = read.modified_at;
    Observed::Ok(file)
}

/// Why a checkpoint file named on the command line cannot be read at all: the path as given.
#[derive(Debug, thiserror::Error)]
pub enum NamedFileError {
    /// Nothing at that path.
    #[error("{path}: no such file")]
    Missing { path: String },
    /// It cannot be read (a directory, permission denied, larger than any checkpoint).
    #[error(transparent)]
    Read(ReadError),
}

/// Reads a checkpoint file named on the command line (`nodemedic checkpoint verify FILE`):
/// `Err` when it cannot be read at all.
pub fn read_checkpoint_file(path: &Path) -> Result<Result<Checkpoint, CheckpointError>, NamedFileError> {
    read_named_file(path).map(|bytes| bytes.and_then(|b| Checkpoint::parse(&b)))
}

/// Reads any checkpoint file named on the command line: `Err` when it cannot be read at all,
/// a [`CheckpointError`] for a directory or an absurd size (what the kubelet could not read
/// either).
pub fn read_named_file(path: &Path) -> Result<Result<Vec<u8>, CheckpointError>, NamedFileError> {
    let shown = path.display().to_string();
    match read_bytes(path, &shown, MAX_CHECKPOINT_BYTES) {
        Ok(None) => Err(NamedFileError::Missing { path: shown }),
        Ok(Some(bytes)) => Ok(Ok(bytes)),
        Err(e) => Err(NamedFileError::Read(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostPaths::new(dir.path(), None);
        let kdir = dir.path().join("var/lib/kubelet");
        std::fs::create_dir_all(&kdir).unwrap();
        let now = SystemTime::now();
        assert!(
            matches!(read_checkpoint(&host, &kdir, now), Observed::Missing { path } if path == "/var/lib/kubelet/cpu_manager_state")
        );

        std::fs::write(
            kdir.join(FILE_NAME),
            br#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
        )
        .unwrap();
        let Observed::Ok(f) = read_checkpoint(&host, &kdir, now + std::time::Duration::from_secs(30)) else {
            panic!()
        };
        assert!(f.content.is_ok());
        assert!(f.age_seconds.unwrap() >= 29.0);

        std::fs::remove_file(kdir.join(FILE_NAME)).unwrap();
        std::fs::create_dir(kdir.join(FILE_NAME)).unwrap();
        let Observed::Ok(f) = read_checkpoint(&host, &kdir, now) else {
            panic!()
        };
        assert_eq!(f.content, Err(CheckpointError::NotAFile));
        let err = read_checkpoint_file(&kdir.join(FILE_NAME)).unwrap_err();
        assert!(matches!(&err, NamedFileError::Read(ReadError::IsDir { .. })), "{err:?}");
        assert!(err.to_string().ends_with("is a directory, not a file"));
        let err = read_checkpoint_file(&kdir.join("nope")).unwrap_err();
        assert!(matches!(&err, NamedFileError::Missing { .. }), "{err:?}");
        assert!(err.to_string().ends_with("nope: no such file"));
    }
}
