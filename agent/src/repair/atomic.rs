//! Crash-safe file replacement: the new content appears whole or not at all.
//!
//! [`write_atomic`] does what the kubelet's own file store does
//! (`pkg/kubelet/util/store/filestore.go`, `writeFile`), plus the directory fsync the kubelet
//! skips: write a temporary file in the same directory (its name starts with `.`, so nothing
//! that lists checkpoints mistakes it for one), fsync it, rename it over the target (atomic
//! within one file system), fsync the directory so the rename itself survives a power loss.
//! A process killed at any point leaves the old file or the new one, never a mix; at worst a
//! temporary file stays behind, which [`remove_leftovers`] clears on the next run.
//!
//! [`write_atomic_with`] is the same with the owner to keep and a hook called after each
//! [`Step`], so a test can kill the writer exactly between two steps.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Marks our temporary files: `.<name>.nodemedic-tmp-<pid>-<nanos>`.
const TMP_MARK: &str = crate::collect::checkpoint::TMP_MARK;

/// A step of [`write_atomic_with`], reported to its hook once done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// The temporary file exists (empty).
    TempCreated,
    /// Its content is written (not yet synced).
    Written,
    /// Its content, mode and owner are on disk.
    Synced,
    /// It has replaced the target.
    Renamed,
    /// The directory entry is on disk.
    DirSynced,
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 5] = [
        Step::TempCreated,
        Step::Written,
        Step::Synced,
        Step::Renamed,
        Step::DirSynced,
    ];
}

/// A failed step, with the file it was about.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct WriteError {
    /// What was being done (`create`, `write`, `fsync`, `rename to ...`).
    pub op: String,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn err(op: impl Into<String>, path: &Path) -> impl FnOnce(std::io::Error) -> WriteError {
    let op = op.into();
    let path = path.to_path_buf();
    move |source| WriteError { op, path, source }
}

/// The file's permission bits and, when it must be kept, its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    /// Permission bits (`0o644`); applied exactly, whatever the umask.
    pub mode: u32,
    /// `(uid, gid)` to give the new file (needs the right to chown: root).
    pub owner: Option<(u32, u32)>,
}

/// Replaces `path` with `bytes` atomically, with permission bits `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    write_atomic_with(path, bytes, Attrs { mode, owner: None }, &mut |_| {})
}

/// The temporary file name used for `path` by this process.
fn temp_path(path: &Path) -> Result<PathBuf, WriteError> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| WriteError {
        op: "name a temporary file for".into(),
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"),
    })?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Ok(path.with_file_name(format!(".{name}{TMP_MARK}{}-{nanos}", std::process::id())))
}

/// [`write_atomic`] keeping `attrs`, calling `hook` after each step.
pub fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    attrs: Attrs,
    hook: &mut dyn FnMut(Step),
) -> Result<(), WriteError> {
    let dir = parent_dir(path);
    let tmp = temp_path(path)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(attrs.mode)
        .open(&tmp)
        .map_err(err("create", &tmp))?;
    hook(Step::TempCreated);
    let result = (|| {
        file.write_all(bytes).map_err(err("write", &tmp))?;
        hook(Step::Written);
        // The umask may have narrowed the mode given to open(2).
        file.set_permissions(std::fs::Permissions::from_mode(attrs.mode))
            .map_err(err("chmod", &tmp))?;
        if let Some((uid, gid)) = attrs.owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid)).map_err(err("chown", &tmp))?;
        }
        file.sync_all().map_err(err("fsync", &tmp))?;
        hook(Step::Synced);
        std::fs::rename(&tmp, path).map_err(err(format!("rename to {}", path.display()), &tmp))?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    hook(Step::Renamed);
    sync_dir(&dir)?;
    hook(Step::DirSynced);
    Ok(())
}

/// Writes `bytes` to `path`, which must not exist yet, atomically (a reader sees the whole
/// file or none) and durably. For backups: never overwrites.
pub fn write_new(path: &Path, bytes: &[u8], attrs: Attrs) -> Result<(), WriteError> {
    if path.symlink_metadata().is_ok() {
        return Err(WriteError {
            op: "create".into(),
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "already exists"),
        });
    }
    write_atomic_with(path, bytes, attrs, &mut |_| {})
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// fsyncs a directory, so that the entries created or renamed in it are on disk.
pub fn sync_dir(dir: &Path) -> Result<(), WriteError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(err("fsync directory", dir))
}

/// Removes the temporary files a killed [`write_atomic`] of `path` left behind (ours only:
/// the kubelet's own temporary files are not touched). Call it only while no other writer of
/// `path` runs. Returns what was removed.
pub fn remove_leftovers(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return vec![];
    };
    let prefix = format!(".{name}{TMP_MARK}");
    let Ok(entries) = std::fs::read_dir(parent_dir(path)) else {
        return vec![];
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        if e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) && std::fs::remove_file(e.path()).is_ok() {
            removed.push(e.path());
        }
    }
    removed.sort();
    removed
}

/// Removes the temporary files a killed [`write_atomic`] left in `dir` for any file whose
/// name starts with `name_prefix` (backups, whose names carry a timestamp).
pub fn remove_leftovers_in(dir: &Path, name_prefix: &str) -> Vec<PathBuf> {
    let prefix = format!(".{name_prefix}");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let ours = e
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix) && n.contains(TMP_MARK));
        if ours && std::fs::remove_file(e.path()).is_ok() {
            removed.push(e.path());
        }
    }
    removed.sort();
    removed
}

/// The leftovers [`remove_leftovers`] would remove (for tests and reports).
pub fn leftovers(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return vec![];
    };
    let prefix = format!(".{name}{TMP_MARK}");
    let mut found: Vec<PathBuf> = std::fs::read_dir(parent_dir(path))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    #[test]
    fn replaces_content_and_keeps_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu_manager_state");
        std::fs::write(&path, b"old").unwrap();
        write_atomic(&path, b"new content", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new content");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        // Mode bits wider than a usual umask allows are applied exactly.
        write_atomic(&path, b"x", 0o666).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o666);
        assert!(leftovers(&path).is_empty());
        // Only the target is in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn creates_a_missing_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"", 0o644).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"");
    }

    #[test]
    fn hook_sees_every_step_in_order_and_the_target_changes_only_at_rename() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        std::fs::write(&path, b"old").unwrap();
        let mut seen = Vec::new();
        write_atomic_with(
            &path,
            b"new",
            Attrs {
                mode: 0o644,
                owner: None,
            },
            &mut |s| {
                let now = std::fs::read(&path).unwrap();
                let want: &[u8] = if matches!(s, Step::Renamed | Step::DirSynced) {
                    b"new"
                } else {
                    b"old"
                };
                assert_eq!(now, want, "at {s:?}");
                let temps = leftovers(&path);
                assert_eq!(temps.len(), usize::from(!matches!(s, Step::Renamed | Step::DirSynced)));
                if let Some(t) = temps.first() {
                    assert!(
                        t.file_name()
                            .unwrap()
                            .to_str()
                            .unwrap()
                            .starts_with(".state.nodemedic-tmp-")
                    );
                }
                seen.push(s);
            },
        )
        .unwrap();
        assert_eq!(seen, Step::ALL);
    }

    #[test]
    fn keeps_the_owner_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let (uid, gid) = {
            let m = std::fs::metadata(dir.path()).unwrap();
            (m.uid(), m.gid())
        };
        write_atomic_with(
            &path,
            b"x",
            Attrs {
                mode: 0o644,
                owner: Some((uid, gid)),
            },
            &mut |_| {},
        )
        .unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid));
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        // The target is a non-empty directory: rename(2) over it fails after the temporary
        // file was written and synced.
        let path = dir.path().join("state");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"x").unwrap();
        let e = write_atomic(&path, b"new", 0o644).unwrap_err();
        assert!(e.to_string().starts_with("rename to "), "{e}");
        assert!(path.join("inside").is_file());
        assert!(leftovers(&path).is_empty());
        // A missing directory names the temporary file it could not create.
        let e = write_atomic(&dir.path().join("nope/state"), b"x", 0o644).unwrap_err();
        assert!(e.to_string().starts_with("create "), "{e}");
        assert!(e.to_string().contains("nope/.state.nodemedic-tmp-"), "{e}");
    }

    #[test]
    fn write_new_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("backup");
        let attrs = Attrs {
            mode: 0o644,
            owner: None,
        };
        write_new(&path, b"one", attrs).unwrap();
        let e = write_new(&path, b"two", attrs).unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
    }

    #[test]
    fn leftovers_are_ours_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu_manager_state");
        std::fs::write(&path, b"x").unwrap();
        let ours = dir.path().join(".cpu_manager_state.nodemedic-tmp-1-2");
        let kubelets = dir.path().join(".cpu_manager_state123456");
        let other = dir.path().join(".memory_manager_state.nodemedic-tmp-1-2");
        for p in [&ours, &kubelets, &other] {
            std::fs::write(p, b"partial").unwrap();
        }
        assert_eq!(leftovers(&path), std::slice::from_ref(&ours));
        assert_eq!(remove_leftovers(&path), std::slice::from_ref(&ours));
        assert!(!ours.exists() && kubelets.exists() && other.exists() && path.exists());
        let backup_tmp = dir
            .path()
            .join(".cpu_manager_state.nodemedic-backup-20261121T100000Z.nodemedic-tmp-1-2");
        std::fs::write(&backup_tmp, b"partial").unwrap();
        assert_eq!(
            remove_leftovers_in(dir.path(), "cpu_manager_state.nodemedic-backup-"),
            [backup_tmp]
        );
        assert!(kubelets.exists() && other.exists());
    }
}
