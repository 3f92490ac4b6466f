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
use crate::collect::localdirs::mount_id;
use crate::host::HostPaths;

pub(super) fn errno(e: Errno) -> String {
    e.desc().to_string()
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
// Err: a plain-text reason, never leaving `local_dirs` (a root's problem, an action's detail).
pub(super) fn open_root(host: &HostPaths, root: &str) -> Result<SafeRoot, String> {
    let path = Path::new(root);
    if !path.is_absolute() {
        return Err(format!("{root} is not an absolute host path"));
    }
    let rel: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Ok(n)),
            Component::RootDir => None,
            _ => Some(Err(())),
        })
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{root} has .. components"))?;
    if rel.is_empty() {
        return Err("the host's root directory cannot be a local-dir root".into());
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
                    format!("{root} is a symlink: refused (nothing may leave a root)")
                } else {
                    format!("{shown}, on the way to {root}, is a symlink: refused")
                });
            }
            Ok(m) if !m.is_dir() => return Err(format!("{shown} is not a directory")),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("{root} does not exist on this node"));
            }
            Err(e) => return Err(format!("{shown}: {e}")),
        }
    }
    let canon_host = std::fs::canonicalize(host.root()).map_err(|e| format!("{}: {e}", host.root().display()))?;
    let canon = std::fs::canonicalize(&local).map_err(|e| format!("{root}: {e}"))?;
    let expected: PathBuf = rel.iter().fold(canon_host.clone(), |p, part| p.join(part));
    if canon != expected {
        return Err(format!("{root} resolves to {} : refused", canon.display()));
    }
    let kubelet = host.kubelet_dir(None);
    if let Ok(k) = std::fs::canonicalize(&kubelet) {
        if canon.starts_with(&k) {
            return Err(format!(
                "{root} is inside the kubelet's directory: emptyDir volumes are removed by deleting their pod"
            ));
        }
    }
    let fd = nix::fcntl::open(&canon, DIR_FLAGS, Mode::empty()).map_err(|e| format!("{root}: open: {}", errno(e)))?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| format!("{root}: {}", errno(e)))?;
    let again = nix::sys::stat::lstat(&canon).map_err(|e| format!("{root}: {}", errno(e)))?;
    if identity(&st) != identity(&again) {
        return Err(format!("{root} changed while it was opened"));
    }
    let mnt_id = mount_id(&fd).map_err(|e| format!("{root}: {e}"))?;
    Ok(SafeRoot {
        canon,
        dev: identity(&st).0,
        ino: identity(&st).1,
        mnt_id,
        fd,
    })
}

/// The real path of an open descriptor, from `/proc/self/fd`.
// Err: a plain-text reason, never leaving `local_dirs` (a root's problem, an action's detail).
pub(super) fn fd_path(fd: &OwnedFd) -> Result<PathBuf, String> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| format!("cannot verify where a directory is (/proc/self/fd: {e})"))
}

/// Fails unless the directory open at `fd` is strictly below `root`.
// Err: a plain-text reason, never leaving `local_dirs` (a root's problem, an action's detail).
pub(super) fn contained(fd: &OwnedFd, root: &Path) -> Result<(), String> {
    let p = fd_path(fd)?;
    if p.starts_with(root) && p != root {
        Ok(())
    } else {
        Err(format!(
            "{} is not under the root {} any more: stopped",
            p.display(),
            root.display()
        ))
    }
}

/// The names in the directory open at `fd` (without `.` and `..`).
// Err: a plain-text reason, never leaving `local_dirs` (a root's problem, an action's detail).
pub(super) fn names(fd: &OwnedFd) -> Result<Vec<std::ffi::OsString>, String> {
    let dir = std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| format!("cannot list a directory through /proc/self/fd: {e}"))?;
    let mut out = vec![];
    for e in dir {
        out.push(e.map_err(|e| e.to_string())?.file_name());
    }
    out.sort();
    Ok(out)
}

/// Opens directory `name` in `parent` without following symlinks and checks it is the inode
/// `fstatat` saw and on the root's mount: a mount point (another file system, or a bind mount of
/// the same one, whose device number is the root's) is never entered; `then` ends that message
/// (`left alone`, `stopped`).
// Err: a plain-text reason, never leaving `local_dirs` (a root's problem, an action's detail).
pub(super) fn open_child(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    seen: &FileStat,
    root: &SafeRoot,
    then: &str,
) -> Result<OwnedFd, String> {
    let shown = name.to_string_lossy();
    if identity(seen).0 != root.dev {
        return Err(format!("another file system is mounted at {shown}: {then}"));
    }
    let fd = nix::fcntl::openat(parent.as_fd(), name, DIR_FLAGS, Mode::empty())
        .map_err(|e| format!("{shown}: open: {}", errno(e)))?;
    let st = nix::sys::stat::fstat(&fd).map_err(errno)?;
    if identity(&st) != identity(seen) {
        return Err(format!("{shown} changed while it was opened"));
    }
    if mount_id(&fd).map_err(|e| e.to_string())? != root.mnt_id {
        return Err(format!(
            "another file system is mounted at {shown} (a mount point, bind mounts included): {then}"
        ));
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
// Err: a plain-text reason, never leaving `local_dirs` (a root's problem, an action's detail).
pub(super) fn measure(top: OwnedFd, st: &FileStat, root: &SafeRoot) -> Result<Measure, String> {
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
                Err(e) => return Err(format!("{}: {}", name.to_string_lossy(), errno(e))),
            };
            m.entries += 1;
            if m.entries > MAX_ENTRIES {
                return Err(format!("more than {MAX_ENTRIES} entries: left for removal by hand"));
            }
            m.inodes.insert(identity(&st));
            m.newest_mtime = m.newest_mtime.max(Some(st.st_mtime));
            if is_dir(&st) {
                if depth + 1 > MAX_DEPTH {
                    return Err(format!("deeper than {MAX_DEPTH} levels: left for removal by hand"));
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
// Err: a plain-text reason, never leaving `local_dirs` (a root's problem, an action's detail).
pub(super) fn remove_contents(dir: &OwnedFd, root: &SafeRoot, depth: usize, freed: &mut u64) -> Result<(), String> {
    contained(dir, &root.canon)?;
    for name in names(dir)? {
        let st = match nix::sys::stat::fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(format!("{}: {}", name.to_string_lossy(), errno(e))),
        };
        if is_dir(&st) {
            if depth + 1 > MAX_DEPTH {
                return Err(format!("deeper than {MAX_DEPTH} levels: stopped"));
            }
            let child = open_child(dir, &name, &st, root, "stopped")?;
            remove_contents(&child, root, depth + 1, freed)?;
            drop(child);
            nix::unistd::unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::RemoveDir)
                .map_err(|e| format!("{}: rmdir: {}", name.to_string_lossy(), errno(e)))?;
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
                Err(e) => return Err(format!("{}: unlink: {}", name.to_string_lossy(), errno(e))),
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
