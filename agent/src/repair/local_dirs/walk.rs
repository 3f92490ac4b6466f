//! The no-follow walk under a local-dir root: every directory opened relative to its parent's
//! descriptor with `O_NOFOLLOW`, its real path checked to stay under the root, symlinks
//! unlinked and never followed, and a file system mounted inside left alone.

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;

use super::{MAX_DEPTH, MAX_ENTRIES};
use crate::collect::localdirs::{LocalDirsError, mount_id};
use crate::host::HostPaths;

pub(super) fn errno(e: Errno) -> String {
    e.desc().to_string()
}

/// Why a configured root is refused, or a walk below it stopped: the root as configured (a host
/// path), or the name of the entry below it, and what failed. Its text becomes a root's
/// `problem` in the plan or an action's `detail`.
#[derive(Debug, thiserror::Error)]
pub(super) enum WalkError {
    /// The configured root is relative.
    #[error("{root} is not an absolute host path")]
    NotAbsolute { root: String },
    /// The configured root has `.` or `..` components.
    #[error("{root} has .. components")]
    DotDot { root: String },
    /// The configured root is `/`.
    #[error("the host's root directory cannot be a local-dir root")]
    HostRoot,
    /// The configured root is itself a symlink.
    #[error("{root} is a symlink: refused (nothing may leave a root)")]
    RootIsSymlink { root: String },
    /// A directory on the way to the root (`path`, a host path) is a symlink.
    #[error("{path}, on the way to {root}, is a symlink: refused")]
    SymlinkOnTheWay { path: String, root: String },
    /// The root, or a path on the way to it (a host path), is not a directory.
    #[error("{path} is not a directory")]
    NotADirectory { path: String },
    /// The root is not there.
    #[error("{root} does not exist on this node")]
    Missing { root: String },
    /// The root, a path on the way to it, or the host root cannot be looked at.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The root's real path is not the configured one below the host root.
    #[error("{root} resolves to {} : refused", resolved.display())]
    Resolves { root: String, resolved: PathBuf },
    /// The root is in the kubelet's directory.
    #[error("{root} is inside the kubelet's directory: emptyDir volumes are removed by deleting their pod")]
    InKubeletDir { root: String },
    /// Opening the root or an entry (`name`) failed.
    #[error("{name}: open: {}", errno.desc())]
    Open { name: String, errno: Errno },
    /// Reading the attributes of the root or of an entry (`name`) failed.
    #[error("{name}: {}", errno.desc())]
    Stat { name: String, errno: Errno },
    /// Reading the attributes of a directory just opened failed.
    #[error("{}", errno.desc())]
    StatOpened { errno: Errno },
    /// The root or an entry (`name`) is not the inode it was a moment before.
    #[error("{name} changed while it was opened")]
    Changed { name: String },
    /// Which mount the root is on cannot be told.
    #[error("{root}: {source}")]
    RootMount { root: String, source: LocalDirsError },
    /// Which mount a directory below the root is on cannot be told.
    #[error(transparent)]
    Mount(LocalDirsError),
    /// Where an open directory is cannot be told.
    #[error("cannot verify where a directory is (/proc/self/fd: {0})")]
    Where(#[source] std::io::Error),
    /// An open directory is no longer below the root (moved meanwhile).
    #[error("{} is not under the root {} any more: stopped", path.display(), root.display())]
    Escaped { path: PathBuf, root: PathBuf },
    /// A directory cannot be listed.
    #[error("cannot list a directory through /proc/self/fd: {0}")]
    List(#[source] std::io::Error),
    /// An entry of a directory's listing cannot be read.
    #[error("{0}")]
    ListEntry(#[source] std::io::Error),
    /// Another file system (another device) is mounted at entry `name`; `then` says what
    /// that means here.
    #[error("another file system is mounted at {name}: {then}")]
    OtherDevice { name: String, then: &'static str },
    /// A mount point (another mount of any file system, bind mounts included) is at `name`.
    #[error("another file system is mounted at {name} (a mount point, bind mounts included): {then}")]
    MountPoint { name: String, then: &'static str },
    /// More entries below a scratch directory than are walked.
    #[error("more than {MAX_ENTRIES} entries: left for removal by hand")]
    TooManyEntries,
    /// Deeper than the walk goes; `then` says what that means here.
    #[error("deeper than {MAX_DEPTH} levels: {then}")]
    TooDeep { then: &'static str },
    /// Removing the directory `name` (emptied) failed.
    #[error("{name}: rmdir: {}", errno.desc())]
    Rmdir { name: String, errno: Errno },
    /// Removing the file, symlink or other entry `name` failed.
    #[error("{name}: unlink: {}", errno.desc())]
    Unlink { name: String, errno: Errno },
    /// Removing the scratch directory itself, once emptied, failed.
    #[error("rmdir: {}", errno.desc())]
    RmdirTop { errno: Errno },
}

/// (device, inode); `dev_t` and `ino_t` are not `u64` on every target.
#[allow(clippy::unnecessary_cast)]
pub(super) fn identity(st: &FileStat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

pub(super) fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
}

pub(super) fn is_regular(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG
}

pub(super) const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// A configured root, opened and checked.
#[derive(Debug)]
pub(super) struct SafeRoot {
    /// Its canonical local path: everything removed must be below it.
    pub(super) canon: PathBuf,
    pub(super) fd: OwnedFd,
    pub(super) dev: u64,
    pub(super) ino: u64,
    /// Its mount's ID: a directory below it with another one is a mount point.
    pub(super) mnt_id: u64,
}

/// Opens the configured root `root` (a host path) under `host`, or says why it is refused.
pub(super) fn open_root(host: &HostPaths, root: &str) -> Result<SafeRoot, WalkError> {
    let root_s = || root.to_string();
    let path = Path::new(root);
    if !path.is_absolute() {
        return Err(WalkError::NotAbsolute { root: root_s() });
    }
    let rel: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Ok(n)),
            Component::RootDir => None,
            _ => Some(Err(())),
        })
        .collect::<Result<_, _>>()
        .map_err(|_| WalkError::DotDot { root: root_s() })?;
    if rel.is_empty() {
        return Err(WalkError::HostRoot);
    }
    // Neither the root nor any directory on the way to it may be a symlink.
    let mut local = host.root().to_path_buf();
    for (i, part) in rel.iter().enumerate() {
        local.push(part);
        let shown = format!(
            "/{}",
            rel[..=i]
                .iter()
                .map(|p| p.to_string_lossy())
                .collect::<Vec<_>>()
                .join("/")
        );
        match std::fs::symlink_metadata(&local) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(if i + 1 == rel.len() {
                    WalkError::RootIsSymlink { root: root_s() }
                } else {
                    WalkError::SymlinkOnTheWay {
                        path: shown,
                        root: root_s(),
                    }
                });
            }
            Ok(m) if !m.is_dir() => return Err(WalkError::NotADirectory { path: shown }),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(WalkError::Missing { root: root_s() });
            }
            Err(source) => return Err(WalkError::Io { path: shown, source }),
        }
    }
    let canon_host = std::fs::canonicalize(host.root()).map_err(|source| WalkError::Io {
        path: host.root().display().to_string(),
        source,
    })?;
    let canon = std::fs::canonicalize(&local).map_err(|source| WalkError::Io { path: root_s(), source })?;
    let expected: PathBuf = rel.iter().fold(canon_host.clone(), |p, part| p.join(part));
    if canon != expected {
        return Err(WalkError::Resolves {
            root: root_s(),
            resolved: canon,
        });
    }
    let kubelet = host.kubelet_dir(None);
    if let Ok(k) = std::fs::canonicalize(&kubelet) {
        if canon.starts_with(&k) {
            return Err(WalkError::InKubeletDir { root: root_s() });
        }
    }
    let fd = nix::fcntl::open(&canon, DIR_FLAGS, Mode::empty())
        .map_err(|errno| WalkError::Open { name: root_s(), errno })?;
    let st = nix::sys::stat::fstat(&fd).map_err(|errno| WalkError::Stat { name: root_s(), errno })?;
    let again = nix::sys::stat::lstat(&canon).map_err(|errno| WalkError::Stat { name: root_s(), errno })?;
    if identity(&st) != identity(&again) {
        return Err(WalkError::Changed { name: root_s() });
    }
    let mnt_id = mount_id(&fd).map_err(|source| WalkError::RootMount { root: root_s(), source })?;
    Ok(SafeRoot {
        canon,
        dev: identity(&st).0,
        ino: identity(&st).1,
        mnt_id,
        fd,
    })
}

/// The real path of an open descriptor, from `/proc/self/fd`.
pub(super) fn fd_path(fd: &OwnedFd) -> Result<PathBuf, WalkError> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(WalkError::Where)
}

/// Fails unless the directory open at `fd` is strictly below `root`.
pub(super) fn contained(fd: &OwnedFd, root: &Path) -> Result<(), WalkError> {
    let p = fd_path(fd)?;
    if p.starts_with(root) && p != root {
        Ok(())
    } else {
        Err(WalkError::Escaped {
            path: p,
            root: root.to_path_buf(),
        })
    }
}

/// The names in the directory open at `fd` (without `.` and `..`).
pub(super) fn names(fd: &OwnedFd) -> Result<Vec<std::ffi::OsString>, WalkError> {
    let dir = std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(WalkError::List)?;
    let mut out = vec![];
    for e in dir {
        out.push(e.map_err(WalkError::ListEntry)?.file_name());
    }
    out.sort();
    Ok(out)
}

/// Opens directory `name` in `parent` without following symlinks and checks it is the inode
/// `fstatat` saw and on the root's mount: a mount point (another file system, or a bind mount of
/// the same one, whose device number is the root's) is never entered; `then` ends that message
/// (`left alone`, `stopped`).
pub(super) fn open_child(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    seen: &FileStat,
    root: &SafeRoot,
    then: &'static str,
) -> Result<OwnedFd, WalkError> {
    let shown = || name.to_string_lossy().into_owned();
    if identity(seen).0 != root.dev {
        return Err(WalkError::OtherDevice { name: shown(), then });
    }
    let fd = nix::fcntl::openat(parent.as_fd(), name, DIR_FLAGS, Mode::empty())
        .map_err(|errno| WalkError::Open { name: shown(), errno })?;
    let st = nix::sys::stat::fstat(&fd).map_err(|errno| WalkError::StatOpened { errno })?;
    if identity(&st) != identity(seen) {
        return Err(WalkError::Changed { name: shown() });
    }
    if mount_id(&fd).map_err(WalkError::Mount)? != root.mnt_id {
        return Err(WalkError::MountPoint { name: shown(), then });
    }
    Ok(fd)
}

/// What is below a scratch directory.
#[derive(Debug, Default)]
pub(super) struct Measure {
    /// Bytes its removal frees: each regular file's size once, and a file with other hard
    /// links only when all of them are below it.
    pub(super) bytes: u64,
    pub(super) newest_mtime: Option<i64>,
    pub(super) entries: usize,
    /// (device, inode) of it and of everything below it.
    pub(super) inodes: HashSet<(u64, u64)>,
}

/// Walks the directory open at `top` (whose own stat is `st`) by descriptors, never following
/// symlinks, never crossing into another file system, never leaving `root`.
pub(super) fn measure(top: OwnedFd, st: &FileStat, root: &SafeRoot) -> Result<Measure, WalkError> {
    let mut m = Measure::default();
    m.inodes.insert(identity(st));
    m.newest_mtime = Some(st.st_mtime);
    let mut links = HardLinks::default();
    let mut stack = vec![(top, 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        contained(&dir, &root.canon)?;
        for name in names(&dir)? {
            let st = match nix::sys::stat::fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::ENOENT) => continue,
                Err(errno) => {
                    return Err(WalkError::Stat {
                        name: name.to_string_lossy().into_owned(),
                        errno,
                    });
                }
            };
            m.entries += 1;
            if m.entries > MAX_ENTRIES {
                return Err(WalkError::TooManyEntries);
            }
            m.inodes.insert(identity(&st));
            m.newest_mtime = m.newest_mtime.max(Some(st.st_mtime));
            if is_dir(&st) {
                if depth + 1 > MAX_DEPTH {
                    return Err(WalkError::TooDeep {
                        then: "left for removal by hand",
                    });
                }
                stack.push((open_child(&dir, &name, &st, root, "left alone")?, depth + 1));
            } else if is_regular(&st) {
                links.see(identity(&st), st.st_nlink as u64, st.st_size as u64);
            }
        }
    }
    m.bytes = links.freed();
    Ok(m)
}

/// Removes everything below the directory open at `dir`, adding the sizes of the regular
/// files removed to `freed`.
pub(super) fn remove_contents(dir: &OwnedFd, root: &SafeRoot, depth: usize, freed: &mut u64) -> Result<(), WalkError> {
    contained(dir, &root.canon)?;
    for name in names(dir)? {
        let st = match nix::sys::stat::fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => continue,
            Err(errno) => {
                return Err(WalkError::Stat {
                    name: name.to_string_lossy().into_owned(),
                    errno,
                });
            }
        };
        if is_dir(&st) {
            if depth + 1 > MAX_DEPTH {
                return Err(WalkError::TooDeep { then: "stopped" });
            }
            let child = open_child(dir, &name, &st, root, "stopped")?;
            remove_contents(&child, root, depth + 1, freed)?;
            drop(child);
            nix::unistd::unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::RemoveDir).map_err(|errno| {
                WalkError::Rmdir {
                    name: name.to_string_lossy().into_owned(),
                    errno,
                }
            })?;
        } else {
            // Files, symlinks (the link itself, never its target), fifos, sockets.
            match nix::unistd::unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) => {
                    // Only the last link's removal frees the file's blocks.
                    if is_regular(&st) && st.st_nlink <= 1 {
                        *freed += st.st_size as u64;
                    }
                }
                Err(Errno::ENOENT) => {}
                Err(errno) => {
                    return Err(WalkError::Unlink {
                        name: name.to_string_lossy().into_owned(),
                        errno,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Regular files seen below a directory, by (device, inode): the bytes their removal frees
/// are each file's size once, and a hard-linked file's only when every link is below it.
#[derive(Debug, Default)]
pub(super) struct HardLinks(std::collections::HashMap<(u64, u64), (u64, u64, u64)>);

impl HardLinks {
    /// One link of file `id`, which has `nlink` links and `size` bytes.
    pub(super) fn see(&mut self, id: (u64, u64), nlink: u64, size: u64) {
        let e = self.0.entry(id).or_insert((0, nlink, size));
        e.0 += 1;
    }

    /// The bytes freed by removing everything seen.
    pub(super) fn freed(&self) -> u64 {
        self.0
            .values()
            .filter(|(seen, nlink, _)| seen >= nlink)
            .map(|(_, _, size)| size)
            .sum()
    }
}

/// A host tree for the root checks' tests: a root (`/mnt/spark`), the kubelet's directory
/// below which a root may not be, a file, a link to the root and a link to its parent.
#[cfg(test)]
pub(super) fn plant_roots(root: &Path) {
    std::fs::create_dir_all(root.join("mnt/spark")).unwrap();
    std::fs::create_dir_all(root.join("var/lib/kubelet/spark")).unwrap();
    std::fs::write(root.join("mnt/file"), b"x").unwrap();
    std::os::unix::fs::symlink(root.join("mnt/spark"), root.join("mnt/link")).unwrap();
    std::os::unix::fs::symlink(root.join("mnt"), root.join("alias")).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root's refusal is a variant naming the root (or the path on the way to it), and reads
    /// as the plan and the records always printed it.
    #[test]
    fn refusals_are_typed_and_name_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        plant_roots(root);
        let host = HostPaths::new(root, None);
        let refused = |r: &str| open_root(&host, r).unwrap_err();
        let e = refused("/mnt/link");
        assert!(matches!(&e, WalkError::RootIsSymlink { root } if root == "/mnt/link"));
        assert_eq!(
            e.to_string(),
            "/mnt/link is a symlink: refused (nothing may leave a root)"
        );
        let e = refused("/alias/spark");
        assert!(matches!(&e, WalkError::SymlinkOnTheWay { path, root } if path == "/alias" && root == "/alias/spark"));
        assert_eq!(
            e.to_string(),
            "/alias, on the way to /alias/spark, is a symlink: refused"
        );
        let e = refused("/mnt/file");
        assert!(matches!(&e, WalkError::NotADirectory { path } if path == "/mnt/file"));
        assert_eq!(e.to_string(), "/mnt/file is not a directory");
        let e = refused("/mnt/none");
        assert!(matches!(&e, WalkError::Missing { root } if root == "/mnt/none"));
        assert_eq!(e.to_string(), "/mnt/none does not exist on this node");
        assert!(matches!(refused("/mnt/../mnt/spark"), WalkError::DotDot { .. }));
        assert!(matches!(refused("mnt/spark"), WalkError::NotAbsolute { .. }));
        assert!(matches!(refused("/"), WalkError::HostRoot));
        let e = refused("/var/lib/kubelet/spark");
        assert!(matches!(&e, WalkError::InKubeletDir { root } if root == "/var/lib/kubelet/spark"));
        assert_eq!(
            e.to_string(),
            "/var/lib/kubelet/spark is inside the kubelet's directory: emptyDir volumes are removed by deleting \
             their pod"
        );
    }

    /// A walk stopped by its limits or by a mount says so in a variant, with the words the
    /// records always carried.
    #[test]
    fn walk_stops_are_typed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("mnt/spark/blockmgr-1/a")).unwrap();
        let host = HostPaths::new(dir.path(), None);
        let safe = open_root(&host, "/mnt/spark").unwrap();
        let st = nix::sys::stat::fstatat(safe.fd.as_fd(), "blockmgr-1", AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        // The same directory seen with another device number: another file system there.
        let mut elsewhere = st;
        elsewhere.st_dev = elsewhere.st_dev.wrapping_add(1);
        let e = open_child(&safe.fd, "blockmgr-1".as_ref(), &elsewhere, &safe, "left alone").unwrap_err();
        assert!(matches!(&e, WalkError::OtherDevice { name, then: "left alone" } if name == "blockmgr-1"));
        assert_eq!(
            e.to_string(),
            "another file system is mounted at blockmgr-1: left alone"
        );
        // Another inode under that name: replaced since it was seen.
        let mut other = st;
        other.st_ino = other.st_ino.wrapping_add(1);
        let e = open_child(&safe.fd, "blockmgr-1".as_ref(), &other, &safe, "stopped").unwrap_err();
        assert!(matches!(&e, WalkError::Changed { name } if name == "blockmgr-1"));
        assert_eq!(e.to_string(), "blockmgr-1 changed while it was opened");
        // The root itself is never "below the root".
        let e = contained(&safe.fd, &safe.canon).unwrap_err();
        assert!(matches!(&e, WalkError::Escaped { .. }));
        assert!(e.to_string().ends_with("any more: stopped"), "{e}");
        assert_eq!(
            WalkError::TooDeep { then: "stopped" }.to_string(),
            format!("deeper than {MAX_DEPTH} levels: stopped")
        );
        assert_eq!(
            WalkError::RmdirTop {
                errno: Errno::ENOTEMPTY
            }
            .to_string(),
            format!("rmdir: {}", Errno::ENOTEMPTY.desc())
        );
    }
}
