//! Spark scratch directories on the node (apache/spark `LocalDirsFeatureStep.scala`; docs/rules/orphaned-local-dir.md).
//!
//! Spark writes `blockmgr-<uuid>` and `spark-<uuid>` directories into each local dir. On
//! Kubernetes a local dir is an emptyDir volume named `spark-local-dir-N`, which lives at
//! `<kubelet dir>/pods/<pod uid>/volumes/kubernetes.io~empty-dir/spark-local-dir-N/`, or a
//! hostPath the user mounts (configured here as roots). Each such directory is measured
//! (bytes, newest mtime) without following symlinks or entering a mount point below it
//! (another device, or another mount ID: bind mounts of the same file system included); a hard-linked file counts only when all its links are below. A root that is
//! itself a symlink, missing, or unreadable is skipped and noted, since nothing nodemedic
//! does may leave a root. Names that are not UTF-8 are scanned too, shown escaped (`\xNN`).

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nodemedic_rules::hostpath::{escape, normalize};
use nodemedic_rules::snapshot::{LocalDir, Observed};

use super::read::trace;
use crate::host::HostPaths;

/// At most this many entries are visited below one scratch directory; past it the size is
/// a lower bound and a note says so.
const MAX_ENTRIES: usize = 200_000;

/// Whether a directory name is one Spark creates in a local dir.
pub fn is_spark_scratch_name(name: &str) -> bool {
    is_spark_scratch_bytes(name.as_bytes())
}

/// [`is_spark_scratch_name`] for a name that need not be UTF-8.
pub fn is_spark_scratch_bytes(name: &[u8]) -> bool {
    name.starts_with(b"blockmgr-") || name.starts_with(b"spark-")
}

/// Why the mount a directory is on cannot be told.
#[derive(Debug, thiserror::Error)]
pub enum LocalDirsError {
    /// `/proc/self/fdinfo/<fd>` cannot be read.
    #[error("cannot tell which mount a directory is on ({path}: {source})")]
    Fdinfo { path: String, source: std::io::Error },
    /// `/proc/self/fdinfo/<fd>` has no `mnt_id:` line (a kernel before 3.15).
    #[error("cannot tell which mount a directory is on (no mnt_id in {path})")]
    NoMountId { path: String },
}

/// The mount ID of the file open at `fd`, from `/proc/self/fdinfo/<fd>` (`mnt_id:`, Linux
/// 3.15+). Unlike the device number, it tells a bind mount of the same file system from the
/// directory it sits in.
pub fn mount_id(fd: &impl AsRawFd) -> Result<u64, LocalDirsError> {
    let path = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    trace::file(Path::new(&path));
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(source) => return Err(LocalDirsError::Fdinfo { path, source }),
    };
    parse_mnt_id(&text).ok_or(LocalDirsError::NoMountId { path })
}

/// `mnt_id` of a `/proc/<pid>/fdinfo/<fd>` text.
pub fn parse_mnt_id(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The mount ID of directory `path`, opened without following a symlink.
fn dir_mount_id(path: &Path) -> Option<u64> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let flags = (nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_NOFOLLOW).bits();
    // Opened, not listed: for the floor bench, a lookup like a stat.
    trace::stat(path);
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .ok()?;
    mount_id(&dir).ok()
}

/// What [`measure`] found below a scratch directory.
#[derive(Debug, Default)]
struct Measured {
    /// Bytes its removal frees: each file once, a hard-linked file only when all its links are below.
    bytes: u64,
    newest: Option<i64>,
    /// The walk stopped at [`MAX_ENTRIES`].
    truncated: bool,
    /// Mount points below it, not walked.
    mounts: Vec<PathBuf>,
}

/// Bytes and newest mtime below `dir`, symlinks not followed, mount points (another device,
/// or another mount of the same one: a bind mount) not entered.
fn measure(dir: &Path) -> Measured {
    use std::os::unix::fs::MetadataExt;
    let mut m = Measured::default();
    trace::stat(dir);
    let dev = std::fs::symlink_metadata(dir).map(|d| d.dev()).ok();
    let mnt = dir_mount_id(dir);
    let mut files: HashMap<(u64, u64), (u64, u64, u64)> = HashMap::new();
    let mut seen = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    'walk: while let Some(d) = stack.pop() {
        trace::dir(&d);
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                m.truncated = true;
                break 'walk;
            }
            let path = e.path();
            trace::stat(&path);
            // Relative to the open directory (an fstatat by name, not the whole path's lookup
            // again); a symlink is not followed, as with symlink_metadata.
            let Ok(meta) = e.metadata() else {
                continue;
            };
            m.newest = m.newest.max(Some(meta.mtime()));
            if meta.file_type().is_dir() {
                if Some(meta.dev()) != dev || (mnt.is_some() && dir_mount_id(&path) != mnt) {
                    m.mounts.push(path);
                } else {
                    stack.push(path);
                }
            } else if meta.file_type().is_file() {
                let f = files
                    .entry((meta.dev(), meta.ino()))
                    .or_insert((0, meta.nlink(), meta.len()));
                f.0 += 1;
            }
        }
    }
    m.bytes = files
        .values()
        .filter(|(seen, nlink, _)| seen >= nlink)
        .map(|f| f.2)
        .sum();
    trace::stat(dir);
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        m.newest = m.newest.max(Some(meta.mtime()));
    }
    m
}

fn scan_root(host: &HostPaths, root: &Path, pod_uid: Option<&str>, out: &mut Vec<LocalDir>, notes: &mut Vec<String>) {
    use std::os::unix::ffi::OsStrExt as _;
    trace::dir(root);
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) => {
            notes.push(format!("local dir {}: {e}: not scanned", host.display(root)));
            return;
        }
    };
    let mut found: Vec<_> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| is_spark_scratch_bytes(e.file_name().as_bytes()))
        .map(|e| (e.path(), e.file_name()))
        .collect();
    found.sort();
    let shown_root = normalize(&host.display(root));
    for (dir, name) in found {
        let m = measure(&dir);
        let path = format!("{}/{}", shown_root.trim_end_matches('/'), escape(name.as_bytes()));
        if m.truncated {
            notes.push(format!(
                "{path}: more than {MAX_ENTRIES} entries, size counted up to there"
            ));
        }
        for mp in &m.mounts {
            notes.push(format!(
                "{}: a file system is mounted there, inside {path}: its bytes are not counted, and no repair enters it",
                host.display(mp)
            ));
        }
        let (bytes, newest_mtime) = (m.bytes, m.newest);
        out.push(LocalDir {
            path,
            root: shown_root.clone(),
            pod_uid: pod_uid.map(str::to_string),
            bytes,
            newest_mtime,
        });
    }
}

/// Finds the Spark scratch directories in the kubelet's emptyDir volumes and under the
/// hostPath `roots` (host paths).
pub fn read_local_dirs(
    host: &HostPaths,
    kubelet_dir: &Path,
    roots: &[String],
    notes: &mut Vec<String>,
) -> Observed<Vec<LocalDir>> {
    let pods_dir = kubelet_dir.join("pods");
    let mut out = Vec::new();
    trace::dir(&pods_dir);
    let pods = std::fs::read_dir(&pods_dir);
    if pods.is_err() && roots.is_empty() {
        return Observed::Missing {
            path: host.display(&pods_dir),
        };
    }
    if let Ok(pods) = pods {
        let mut uids: Vec<_> = pods
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        uids.sort();
        for uid in uids {
            let empty_dirs = pods_dir.join(&uid).join("volumes/kubernetes.io~empty-dir");
            trace::dir(&empty_dirs);
            let Ok(vols) = std::fs::read_dir(&empty_dirs) else {
                continue;
            };
            let mut vols: Vec<_> = vols
                .flatten()
                .filter(|v| v.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|v| {
                    v.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("spark-local-dir-"))
                })
                .map(|v| v.path())
                .collect();
            vols.sort();
            for vol in vols {
                scan_root(host, &vol, Some(&uid), &mut out, notes);
            }
        }
    }
    for root in roots {
        let local = host.host(root);
        trace::stat(&local);
        match std::fs::symlink_metadata(&local) {
            Ok(m) if m.file_type().is_symlink() => {
                notes.push(format!("local-dir root {root} is a symlink: not followed"));
            }
            Ok(m) if m.is_dir() => scan_root(host, &local, None, &mut out, notes),
            Ok(_) => notes.push(format!("local-dir root {root} is not a directory")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                notes.push(format!("local-dir root {root} does not exist on this node"));
            }
            Err(e) => notes.push(format!("local-dir root {root}: {e}: not scanned")),
        }
    }
    Observed::Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_mount_ids() {
        assert_eq!(
            parse_mnt_id("pos:\t0\nflags:\t02200000\nmnt_id:\t31\nino:\t5\n"),
            Some(31)
        );
        assert_eq!(parse_mnt_id("pos:\t0\n"), None);
        assert_eq!(parse_mnt_id("mnt_id:\tx\n"), None);
        // This process's own /proc: a directory and its parent on one mount agree.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        assert!(dir_mount_id(dir.path()).is_some());
        assert_eq!(dir_mount_id(dir.path()), dir_mount_id(&dir.path().join("a")));
    }

    #[test]
    fn mount_id_errors_name_the_fdinfo_file() {
        let e = LocalDirsError::NoMountId {
            path: "/proc/self/fdinfo/7".into(),
        };
        assert_eq!(
            e.to_string(),
            "cannot tell which mount a directory is on (no mnt_id in /proc/self/fdinfo/7)"
        );
        let e = LocalDirsError::Fdinfo {
            path: "/proc/self/fdinfo/7".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(
            e.to_string(),
            "cannot tell which mount a directory is on (/proc/self/fdinfo/7: entity not found)"
        );
    }

    #[test]
    fn hard_links_count_once_and_only_when_all_are_below() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("blockmgr-1");
        std::fs::create_dir_all(scratch.join("a")).unwrap();
        std::fs::write(scratch.join("a/f"), vec![0u8; 100]).unwrap();
        std::fs::hard_link(scratch.join("a/f"), scratch.join("f-again")).unwrap();
        std::fs::write(scratch.join("g"), vec![0u8; 10]).unwrap();
        std::fs::hard_link(scratch.join("g"), dir.path().join("g-outside")).unwrap();
        std::fs::write(scratch.join("h"), vec![0u8; 1]).unwrap();
        // f: both links below, once; g: a link outside keeps it; h: alone.
        assert_eq!(measure(&scratch).bytes, 101);
    }

    #[test]
    fn finds_and_measures_scratch_dirs_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let vol = root.join("var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1");
        std::fs::create_dir_all(vol.join("blockmgr-aa/0c")).unwrap();
        std::fs::write(vol.join("blockmgr-aa/0c/shuffle_0_1_0.data"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir_all(vol.join("spark-bb")).unwrap();
        std::fs::write(vol.join("spark-bb/x"), b"12345").unwrap();
        std::fs::create_dir_all(vol.join("not-spark")).unwrap();
        let outside = root.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("big"), vec![0u8; 5000]).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("spark-bb/link")).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("blockmgr-link")).unwrap();
        std::fs::create_dir_all(root.join("var/lib/kubelet/pods/u2/volumes/kubernetes.io~empty-dir/other")).unwrap();
        // A hostPath root, and a root that is a symlink.
        std::fs::create_dir_all(root.join("mnt/spark/blockmgr-cc")).unwrap();
        std::fs::write(root.join("mnt/spark/blockmgr-cc/f"), b"abc").unwrap();
        std::os::unix::fs::symlink(root.join("mnt/spark"), root.join("mnt/link")).unwrap();

        let host = HostPaths::new(root, None);
        let mut notes = vec![];
        let Observed::Ok(dirs) = read_local_dirs(
            &host,
            &host.kubelet_dir(None),
            &["/mnt/spark".into(), "/mnt/link".into(), "/mnt/none".into()],
            &mut notes,
        ) else {
            panic!()
        };
        let got: Vec<(&str, Option<&str>, u64)> = dirs
            .iter()
            .map(|d| (d.path.as_str(), d.pod_uid.as_deref(), d.bytes))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-aa",
                    Some("u1"),
                    1000
                ),
                (
                    "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1/spark-bb",
                    Some("u1"),
                    5
                ),
                ("/mnt/spark/blockmgr-cc", None, 3),
            ]
        );
        assert_eq!(dirs[2].root, "/mnt/spark");
        assert!(dirs[0].newest_mtime.is_some());
        assert_eq!(
            notes,
            [
                "local-dir root /mnt/link is a symlink: not followed",
                "local-dir root /mnt/none does not exist on this node"
            ]
        );
    }

    #[test]
    fn no_kubelet_pods_dir_and_no_roots_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostPaths::new(dir.path(), None);
        assert!(matches!(
            read_local_dirs(&host, &host.kubelet_dir(None), &[], &mut vec![]),
            Observed::Missing { .. }
        ));
    }
}
