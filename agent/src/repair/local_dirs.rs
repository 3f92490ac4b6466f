//! `nodemedic repair local-dirs`: remove orphaned Spark scratch directories (`blockmgr-*`,
//! `spark-*`) under the configured hostPath local-dir roots, and nowhere else.
//!
//! Candidates are what `orphaned-local-dir` reports under a hostPath root (nothing ever cleans
//! those). Scratch dirs in emptyDir volumes are never removed here: deleting the pod object
//! makes the kubelet remove them (`nodemedic repair orphans` / `failed-pods`, or `kubectl
//! delete pod`), and nodemedic does not touch the kubelet's own directory.
//!
//! Safety, right before each removal:
//!
//! - the root is opened with `O_DIRECTORY|O_NOFOLLOW` after checking that neither it nor any
//!   directory between the host root and it is a symlink (a root that is a symlink is refused),
//!   that it is not the host root and not inside the kubelet's directory, and that it is still
//!   the directory (device, inode) the plan saw;
//! - the scratch directory is opened relative to the root's descriptor, by name, with
//!   `O_NOFOLLOW`: a symlink, a file where a directory is expected, or another directory than
//!   the plan's is left alone;
//! - every directory below is opened the same way, relative to its parent's descriptor, and its
//!   real path (`/proc/self/fd/N`) must still be under the root's canonical path; symlinks are
//!   unlinked, never followed; a file system mounted inside stops the removal;
//! - the directory is measured again and judged again by the rule with a fresh pod list (a pod
//!   that mounts the root and may have written it keeps it), and no live process may have its
//!   working directory, root, an open file or a memory-mapped file below it (`<host>/proc/*/
//!   {cwd,root,fd/*,maps}`, compared by device and inode, so any mount namespace counts); a
//!   process that cannot be inspected (the agent lacks `CAP_SYS_PTRACE`) makes the check
//!   fail, and the directory stays.
//!
//! The bytes freed are the sizes of the regular files removed, read just before each removal
//! without following symlinks.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use nodemedic_rules::Settings;
use nodemedic_rules::rules::orphaned_local_dir;
use nodemedic_rules::snapshot::{LocalDir, NodeSnapshot, Observed, PodInfo, PodSource};
use serde_json::{Map, Value, json};

use super::audit::{ActionRecord, ActionResult, ActionTarget, Audit, RateLimiter, RepairAction, human_bytes, now_unix};
use super::pods::{EXIT_OK, EXIT_PLAN, confirm, evidence_line, finish, instance, print_records_text, repair_settings};
use crate::args::{Format, HostArgs, PodSourceArgs};
use crate::collect::{self, ScanOptions, localdirs::is_spark_scratch_name};
use crate::host::HostPaths;

/// At most this many entries below one scratch directory; a larger one is left (remove it by
/// hand): its inodes are what live processes are compared against.
pub const MAX_ENTRIES: usize = 200_000;
/// At most this deep below a scratch directory (Spark writes two levels).
pub const MAX_DEPTH: usize = 64;
/// At most this many process links (`cwd`, `root`, fds, mappings) are inspected per check; past
/// it the check fails.
pub const MAX_PROCESS_LINKS: usize = 2_000_000;

/// `nodemedic repair local-dirs`.
#[derive(Debug, clap::Args)]
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
    /// Remove the directories of the plan (without it: a dry run that only prints the plan).
    #[arg(long, default_value_t = false)]
    pub apply: bool,
    /// Do not ask before removing.
    #[arg(long, default_value_t = false)]
    pub yes: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text", env = "NODEMEDIC_FORMAT")]
    pub format: Format,
}

/// A configured root and whether removals may happen under it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RootState {
    /// The host path as configured.
    pub root: String,
    pub usable: bool,
    /// Why it is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// (device, inode) of the root when the plan was made.
    #[serde(skip)]
    identity: Option<(u64, u64)>,
}

/// A scratch directory the plan removes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DirCandidate {
    /// Host path.
    pub path: String,
    /// The configured root it is directly under (host path).
    pub root: String,
    /// Its name in the root.
    pub name: String,
    /// Bytes as measured by the scan.
    pub bytes: u64,
    pub newest_mtime: Option<i64>,
    /// The rule's reason.
    pub why: String,
    pub evidence: Map<String, Value>,
    /// (device, inode) when the plan was made.
    #[serde(skip)]
    identity: Option<(u64, u64)>,
}

/// A scratch directory the rule reports that this repair leaves, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeftDir {
    pub path: String,
    pub bytes: u64,
    pub why: String,
    pub left_because: String,
}

/// What `repair local-dirs` would remove.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LocalDirPlan {
    pub node: String,
    pub roots: Vec<RootState>,
    pub remove: Vec<DirCandidate>,
    pub left: Vec<LeftDir>,
    pub notes: Vec<String>,
}

impl LocalDirPlan {
    /// The bytes the plan would free, as measured by the scan.
    pub fn bytes(&self) -> u64 {
        self.remove.iter().map(|c| c.bytes).sum()
    }
}

/// The pod list the re-check right before each removal judges with.
#[derive(Debug, Clone)]
pub struct FreshPods {
    pub pods: Vec<PodInfo>,
    pub source: PodSource,
}

fn errno(e: Errno) -> String {
    e.desc().to_string()
}

/// (device, inode); `dev_t` and `ino_t` are not `u64` on every target.
#[allow(clippy::unnecessary_cast)]
fn identity(st: &FileStat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
}

fn is_regular(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG
}

fn trim_slash(path: &str) -> &str {
    let t = path.trim_end_matches('/');
    if t.is_empty() { "/" } else { t }
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// A configured root, opened and checked.
#[derive(Debug)]
struct SafeRoot {
    /// Its canonical local path: everything removed must be below it.
    canon: PathBuf,
    fd: OwnedFd,
    dev: u64,
    ino: u64,
}

/// Opens the configured root `root` (a host path) under `host`, or says why it is refused.
fn open_root(host: &HostPaths, root: &str) -> Result<SafeRoot, String> {
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
        .map_err(|_| format!("{root} has . or .. components"))?;
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
    Ok(SafeRoot {
        canon,
        dev: identity(&st).0,
        ino: identity(&st).1,
        fd,
    })
}

/// The real path of an open descriptor, from `/proc/self/fd`.
fn fd_path(fd: &OwnedFd) -> Result<PathBuf, String> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| format!("cannot verify where a directory is (/proc/self/fd: {e})"))
}

/// Fails unless the directory open at `fd` is strictly below `root`.
fn contained(fd: &OwnedFd, root: &Path) -> Result<(), String> {
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
fn names(fd: &OwnedFd) -> Result<Vec<std::ffi::OsString>, String> {
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
/// `fstatat` saw.
fn open_child(parent: &OwnedFd, name: &std::ffi::OsStr, seen: &FileStat) -> Result<OwnedFd, String> {
    let fd = nix::fcntl::openat(parent.as_fd(), name, DIR_FLAGS, Mode::empty())
        .map_err(|e| format!("{}: open: {}", name.to_string_lossy(), errno(e)))?;
    let st = nix::sys::stat::fstat(&fd).map_err(errno)?;
    if identity(&st) != identity(seen) {
        return Err(format!("{} changed while it was opened", name.to_string_lossy()));
    }
    Ok(fd)
}

/// What is below a scratch directory.
#[derive(Debug, Default)]
struct Measure {
    bytes: u64,
    newest_mtime: Option<i64>,
    entries: usize,
    /// (device, inode) of it and of everything below it.
    inodes: HashSet<(u64, u64)>,
}

/// Walks the directory open at `top` (whose own stat is `st`) by descriptors, never following
/// symlinks, never crossing into another file system, never leaving `root`.
fn measure(top: OwnedFd, st: &FileStat, root: &SafeRoot) -> Result<Measure, String> {
    let mut m = Measure::default();
    m.inodes.insert(identity(st));
    m.newest_mtime = Some(st.st_mtime);
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
                if identity(&st).0 != root.dev {
                    return Err(format!(
                        "another file system is mounted at {}: left alone",
                        name.to_string_lossy()
                    ));
                }
                if depth + 1 > MAX_DEPTH {
                    return Err(format!("deeper than {MAX_DEPTH} levels: left for removal by hand"));
                }
                stack.push((open_child(&dir, &name, &st)?, depth + 1));
            } else if is_regular(&st) {
                m.bytes += st.st_size as u64;
            }
        }
    }
    Ok(m)
}

/// Removes everything below the directory open at `dir`, adding the sizes of the regular
/// files removed to `freed`.
fn remove_contents(dir: &OwnedFd, root: &SafeRoot, depth: usize, freed: &mut u64) -> Result<(), String> {
    contained(dir, &root.canon)?;
    for name in names(dir)? {
        let st = match nix::sys::stat::fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(format!("{}: {}", name.to_string_lossy(), errno(e))),
        };
        if is_dir(&st) {
            if identity(&st).0 != root.dev {
                return Err(format!(
                    "another file system is mounted at {}: stopped",
                    name.to_string_lossy()
                ));
            }
            if depth + 1 > MAX_DEPTH {
                return Err(format!("deeper than {MAX_DEPTH} levels: stopped"));
            }
            let child = open_child(dir, &name, &st)?;
            remove_contents(&child, root, depth + 1, freed)?;
            drop(child);
            nix::unistd::unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::RemoveDir)
                .map_err(|e| format!("{}: rmdir: {}", name.to_string_lossy(), errno(e)))?;
        } else {
            // Files, symlinks (the link itself, never its target), fifos, sockets.
            match nix::unistd::unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) => {
                    if is_regular(&st) {
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

/// Who holds a directory: live processes with their cwd, root, an open file or a mapping
/// below it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessCheck {
    /// `pid 123 (java): cwd /var/data/...`.
    pub holders: Vec<String>,
    /// Processes that could not be inspected (permission), by pid.
    pub uninspected: Vec<u32>,
    /// Processes inspected.
    pub inspected: usize,
    /// The check stopped at [`MAX_PROCESS_LINKS`], or `/proc` could not be read.
    pub incomplete: Option<String>,
}

impl ProcessCheck {
    /// Why the directory must stay, if it must.
    pub fn refusal(&self) -> Option<String> {
        if let Some(why) = &self.incomplete {
            return Some(format!("the live-process check could not be done: {why}"));
        }
        if !self.holders.is_empty() {
            let listed: Vec<&str> = self.holders.iter().take(5).map(String::as_str).collect();
            return Some(format!(
                "in use by {} live process link(s): {}",
                self.holders.len(),
                listed.join("; ")
            ));
        }
        if !self.uninspected.is_empty() {
            let listed: Vec<String> = self.uninspected.iter().take(10).map(u32::to_string).collect();
            return Some(format!(
                "{} process(es) could not be inspected (pids {}{}): the agent needs CAP_SYS_PTRACE (and, under \
                 AppArmor, a profile that allows ptrace read of other processes) to see every process's files; \
                 nothing is removed unless every process was checked",
                self.uninspected.len(),
                listed.join(", "),
                if self.uninspected.len() > 10 { ", ..." } else { "" }
            ));
        }
        None
    }
}

/// Whether `/proc/<pid>/stat` says the process is a kernel thread (`PF_KTHREAD`).
fn is_kernel_thread(proc_pid: &Path) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let Ok(stat) = std::fs::read_to_string(proc_pid.join("stat")) else {
        return false;
    };
    // Fields after the command (which may hold spaces and parentheses): state is field 3,
    // flags field 9.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    rest.split_whitespace()
        .nth(6)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// `(dev, inode)` of a `/proc/<pid>/maps` line, when it maps a file.
fn maps_identity(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    let dev = fields.nth(3)?;
    let inode: u64 = fields.next()?.parse().ok()?;
    if inode == 0 {
        return None;
    }
    let (major, minor) = dev.split_once(':')?;
    let major = u64::from_str_radix(major, 16).ok()?;
    let minor = u64::from_str_radix(minor, 16).ok()?;
    Some((nix::sys::stat::makedev(major, minor) as u64, inode))
}

/// Checks every process under `proc_dir` (the host's `/proc`) for a cwd, root, open file or
/// mapping whose (device, inode) is in `inodes`. Processes that exit meanwhile are skipped;
/// kernel threads are skipped.
pub fn processes_holding(proc_dir: &Path, inodes: &HashSet<(u64, u64)>) -> ProcessCheck {
    use std::os::unix::fs::MetadataExt;
    let mut check = ProcessCheck::default();
    let entries = match std::fs::read_dir(proc_dir) {
        Ok(e) => e,
        Err(e) => {
            check.incomplete = Some(format!("{}: {e}", proc_dir.display()));
            return check;
        }
    };
    let mut links = 0usize;
    let denied = |e: &std::io::Error| {
        e.kind() == std::io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(nix::libc::EPERM)
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dir = entry.path();
        if is_kernel_thread(&dir) {
            continue;
        }
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let who = format!("pid {pid} ({})", comm.trim());
        let mut blocked = false;
        let mut held = |what: String, path: &Path| {
            let shown = std::fs::read_link(path).map_or_else(|_| "?".to_string(), |p| p.display().to_string());
            check.holders.push(format!("{who}: {what} {shown}"));
        };
        for link in ["cwd", "root"] {
            links += 1;
            match std::fs::metadata(dir.join(link)) {
                Ok(m) if inodes.contains(&(m.dev(), m.ino())) => held(link.to_string(), &dir.join(link)),
                Ok(_) => {}
                Err(e) if denied(&e) => blocked = true,
                Err(_) => {} // exited, or a zombie
            }
        }
        match std::fs::read_dir(dir.join("fd")) {
            Ok(fds) => {
                for fd in fds.flatten() {
                    links += 1;
                    if links > MAX_PROCESS_LINKS {
                        check.incomplete = Some(format!("more than {MAX_PROCESS_LINKS} process links"));
                        return check;
                    }
                    if let Ok(m) = std::fs::metadata(fd.path()) {
                        if inodes.contains(&(m.dev(), m.ino())) {
                            held(format!("fd {}", fd.file_name().to_string_lossy()), &fd.path());
                        }
                    }
                }
            }
            Err(e) if denied(&e) => blocked = true,
            Err(_) => {}
        }
        match std::fs::read_to_string(dir.join("maps")) {
            Ok(maps) => {
                let mut seen: HashSet<(u64, u64)> = HashSet::new();
                for line in maps.lines() {
                    links += 1;
                    if let Some(id) = maps_identity(line) {
                        if inodes.contains(&id) && seen.insert(id) {
                            let path = line.split_whitespace().nth(5).unwrap_or("?");
                            check.holders.push(format!("{who}: maps {path}"));
                        }
                    }
                }
                if links > MAX_PROCESS_LINKS {
                    check.incomplete = Some(format!("more than {MAX_PROCESS_LINKS} process links"));
                    return check;
                }
            }
            Err(e) if denied(&e) => blocked = true,
            Err(_) => {}
        }
        // A process that exited meanwhile is neither: it is gone.
        if !dir.join("stat").exists() {
            continue;
        }
        if blocked {
            check.uninspected.push(pid);
        } else {
            check.inspected += 1;
        }
    }
    check.uninspected.sort_unstable();
    if check.inspected == 0 && check.uninspected.is_empty() {
        check.incomplete = Some(format!(
            "no process found under {} (not the host's /proc?)",
            proc_dir.display()
        ));
    }
    check
}

/// The plan: the scratch dirs `orphaned-local-dir` reports directly under a usable configured
/// root; the rule's other dirs (emptyDir volumes, other roots) are listed as left.
pub fn plan_local_dirs(
    host: &HostPaths,
    roots: &[String],
    snapshot: &NodeSnapshot,
    settings: &Settings,
) -> LocalDirPlan {
    let mut plan = LocalDirPlan {
        node: snapshot.node.clone(),
        roots: vec![],
        remove: vec![],
        left: vec![],
        notes: vec![],
    };
    for root in roots {
        let state = match open_root(host, root) {
            Ok(r) => RootState {
                root: trim_slash(root).to_string(),
                usable: true,
                problem: None,
                identity: Some((r.dev, r.ino)),
            },
            Err(problem) => RootState {
                root: trim_slash(root).to_string(),
                usable: false,
                problem: Some(problem),
                identity: None,
            },
        };
        plan.roots.push(state);
    }
    match &snapshot.local_dirs {
        Observed::Ok(_) => {}
        other => plan
            .notes
            .push(format!("Spark local dirs were not measured: {}", other.status())),
    }
    if snapshot.pod_source == PodSource::Cgroups {
        plan.notes.push(
            "no pod list (API or --pods): who uses a hostPath root cannot be judged, so nothing under one is removed"
                .into(),
        );
    }
    for o in orphaned_local_dir::orphaned_dirs(snapshot, settings) {
        for d in &o.dirs {
            let left = |because: String| LeftDir {
                path: d.path.clone(),
                bytes: d.bytes,
                why: o.reason.clone(),
                left_because: because,
            };
            if let Some(uid) = o.pod_uid {
                let whose = o
                    .pod
                    .map_or_else(|| format!("pod {uid}"), |p| format!("pod {}", p.display()));
                plan.left.push(left(format!(
                    "it is in an emptyDir volume of {whose}: deleting the pod object makes the kubelet remove it \
                     (nodemedic repair orphans / failed-pods, or kubectl delete pod); the kubelet's directory is \
                     never touched"
                )));
                continue;
            }
            let root = trim_slash(&d.root);
            let Some(state) = plan.roots.iter().find(|r| r.root == root) else {
                plan.left
                    .push(left(format!("{root} is not a configured local-dir root")));
                continue;
            };
            if let Some(problem) = &state.problem {
                plan.left.push(left(format!("its root is refused: {problem}")));
                continue;
            }
            let (parent, name) = match d.path.rsplit_once('/') {
                Some((p, n)) => (trim_slash(if p.is_empty() { "/" } else { p }), n),
                None => ("", d.path.as_str()),
            };
            if parent != root || !is_spark_scratch_name(name) || name.contains('/') {
                plan.left.push(left(format!(
                    "it is not a blockmgr-*/spark-* directory directly under {root}"
                )));
                continue;
            }
            let local = host.host(&d.path);
            let identity = match std::fs::symlink_metadata(&local) {
                Ok(m) if m.file_type().is_dir() => {
                    use std::os::unix::fs::MetadataExt;
                    Some((m.dev(), m.ino()))
                }
                Ok(m) if m.file_type().is_symlink() => {
                    plan.left.push(left("it is a symlink: never followed".into()));
                    continue;
                }
                Ok(_) => {
                    plan.left.push(left("it is not a directory: left alone".into()));
                    continue;
                }
                Err(e) => {
                    plan.left.push(left(format!("it cannot be read now: {e}")));
                    continue;
                }
            };
            let mut evidence = Map::new();
            evidence.insert("path".into(), json!(d.path));
            evidence.insert("root".into(), json!(root));
            evidence.insert("bytes".into(), json!(d.bytes));
            if let Some(t) = d.newest_mtime {
                evidence.insert("newest_mtime".into(), json!(t));
                evidence.insert("idle_seconds".into(), json!(snapshot.taken_at - t));
            }
            evidence.insert("reason".into(), json!(o.reason));
            evidence.insert("liveness_source".into(), json!(snapshot.pod_source.as_str()));
            if !o.root_users.is_empty() {
                evidence.insert(
                    "root_users".into(),
                    json!(o.root_users.iter().map(|p| p.display()).collect::<Vec<_>>()),
                );
            }
            plan.remove.push(DirCandidate {
                path: d.path.clone(),
                root: root.to_string(),
                name: name.to_string(),
                bytes: d.bytes,
                newest_mtime: d.newest_mtime,
                why: o.reason.clone(),
                evidence,
                identity,
            });
        }
    }
    plan
}

/// Removes one candidate after every check; the record says what happened.
fn remove_one(
    host: &HostPaths,
    c: &DirCandidate,
    root_state: &RootState,
    judge: &dyn Fn(&LocalDir) -> Option<String>,
    limiter: &mut Option<&mut RateLimiter>,
) -> Option<ActionRecord> {
    let mut rec = ActionRecord::new(
        RepairAction::LocalDirs,
        ActionResult::Skipped,
        ActionTarget::directory(&c.path),
        format!("remove directory {}", c.path),
        c.why.clone(),
        c.evidence.clone(),
    );
    let skip = |mut rec: ActionRecord, why: String| {
        rec.detail = Some(why);
        Some(rec)
    };
    let root = match open_root(host, &c.root) {
        Ok(r) => r,
        Err(e) => return skip(rec, format!("its root is refused: {e}")),
    };
    if Some((root.dev, root.ino)) != root_state.identity {
        return skip(rec, format!("the root {} is not the directory the plan saw", c.root));
    }
    let name = std::ffi::OsStr::new(&c.name);
    let st = match nix::sys::stat::fstatat(root.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return skip(rec, "it is already gone".into()),
        Err(e) => return skip(rec, format!("cannot read it: {}", errno(e))),
    };
    let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    if kind == SFlag::S_IFLNK {
        return skip(rec, "it is now a symlink: never followed, left alone".into());
    }
    if !is_dir(&st) {
        return skip(rec, "it is not a directory any more: left alone".into());
    }
    if Some(identity(&st)) != c.identity {
        return skip(
            rec,
            "it is not the directory the plan saw (replaced since): left alone".into(),
        );
    }
    if identity(&st).0 != root.dev {
        return skip(rec, "another file system is mounted there: left alone".into());
    }
    // Measure it again (bytes, newest change, every inode below it).
    let measured = open_child(&root.fd, name, &st).and_then(|fd| measure(fd, &st, &root));
    let m = match measured {
        Ok(m) => m,
        Err(e) => return skip(rec, e),
    };
    rec.evidence.insert("bytes_measured".into(), json!(m.bytes));
    rec.evidence.insert("entries".into(), json!(m.entries));
    // Judged again by the rule with the fresh pod list and the new measurement.
    let dir = LocalDir {
        path: c.path.clone(),
        root: c.root.clone(),
        pod_uid: None,
        bytes: m.bytes,
        newest_mtime: m.newest_mtime,
    };
    if let Some(why) = judge(&dir) {
        return skip(rec, why);
    }
    // No live process may use anything below it.
    let procs = processes_holding(&host.proc(), &m.inodes);
    rec.evidence
        .insert("processes_inspected".into(), json!(procs.inspected));
    if let Some(why) = procs.refusal() {
        return skip(rec, why);
    }
    if let Some(lim) = limiter.as_deref_mut() {
        if !lim.try_acquire() {
            tracing::info!(
                target: "nodemedic::repair",
                action = "local-dirs",
                max_actions_per_hour = lim.max_per_hour(),
                "repair rate limit reached; the rest waits"
            );
            return None;
        }
    }
    // Open it once more (the process check held no descriptor below it) and remove.
    let mut freed = 0u64;
    let result = open_child(&root.fd, name, &st)
        .and_then(|fd| {
            contained(&fd, &root.canon)?;
            remove_contents(&fd, &root, 0, &mut freed)
        })
        .and_then(|()| {
            nix::unistd::unlinkat(root.fd.as_fd(), name, UnlinkatFlags::RemoveDir)
                .map_err(|e| format!("rmdir: {}", errno(e)))
        });
    rec.bytes_freed = Some(freed);
    match result {
        Ok(()) => rec.result = ActionResult::Applied,
        Err(e) => {
            rec.result = ActionResult::Failed;
            rec.detail = Some(format!("{e} ({} freed before it stopped)", human_bytes(freed)));
        }
    }
    Some(rec)
}

/// Removes the plan's directories in order, each only after the checks of this module's
/// documentation; every record is logged as it happens (Events: [`Audit::events`] afterwards).
/// `fresh` is the pod list to judge with now; `snapshot` the one the plan came from. With a
/// limiter each removal started takes a unit; once none is left the rest waits.
pub fn apply_local_dirs(
    host: &HostPaths,
    plan: &LocalDirPlan,
    snapshot: &NodeSnapshot,
    fresh: &FreshPods,
    settings: &Settings,
    audit: &Audit,
    mut limiter: Option<&mut RateLimiter>,
) -> Vec<ActionRecord> {
    let mut base = snapshot.clone();
    base.pods = fresh
        .pods
        .iter()
        .filter(|p| p.node_name.as_deref() == Some(snapshot.node.as_str()))
        .cloned()
        .collect();
    base.pod_source = fresh.source.clone();
    let roots: BTreeMap<&str, &RootState> = plan.roots.iter().map(|r| (r.root.as_str(), r)).collect();
    let mut out = vec![];
    for c in &plan.remove {
        let Some(state) = roots.get(c.root.as_str()) else {
            continue;
        };
        let judge = |dir: &LocalDir| -> Option<String> {
            let mut snap = base.clone();
            snap.taken_at = now_unix();
            snap.local_dirs = Observed::Ok(vec![dir.clone()]);
            let orphaned = orphaned_local_dir::orphaned_dirs(&snap, settings);
            if orphaned.iter().any(|o| o.dirs.iter().any(|d| d.path == dir.path)) {
                None
            } else {
                Some(
                    "no longer judged orphaned on the re-check right before removal (changed recently, or a pod \
                     that may have written it mounts the root)"
                        .into(),
                )
            }
        };
        let Some(rec) = remove_one(host, c, state, &judge, &mut limiter) else {
            break; // rate limited
        };
        audit.log(&rec);
        out.push(rec);
    }
    out
}

/// `nodemedic repair local-dirs`: exit 0 nothing to do or applied, 1 a dry run with a plan (or
/// a plan not confirmed), 2 could not run or a removal failed.
pub fn run_local_dirs(args: LocalDirsArgs) -> Result<u8, String> {
    let stdin = std::io::stdin();
    run_local_dirs_io(args, &mut std::io::stdout(), &mut stdin.lock())
}

/// [`run_local_dirs`] with its output and the answer to its question elsewhere.
pub fn run_local_dirs_io(args: LocalDirsArgs, out: &mut dyn Write, input: &mut dyn BufRead) -> Result<u8, String> {
    let host = HostPaths::new(args.host.host_root.clone(), args.host.kubelet_dir.clone());
    if !host.root().is_dir() {
        return Err(format!(
            "{}: host root does not exist or is not a directory",
            host.root().display()
        ));
    }
    let file = crate::config::load(args.config.as_ref())?;
    let roots: Vec<String> = if args.local_dir_root.is_empty() {
        file.local_dir_roots.clone().unwrap_or_default()
    } else {
        args.local_dir_root.clone()
    };
    if roots.is_empty() {
        return Err(
            "no local-dir roots: pass --local-dir-root DIR (or --config /etc/nodemedic/config.yaml for the daemon's \
             local_dir_roots); only directories under those roots are removed"
                .into(),
        );
    }
    let mut settings = repair_settings(args.config.as_ref(), &args.rule_setting)?;
    if let Some(s) = args.older_than_seconds {
        if s < 0 {
            return Err(format!("--older-than-seconds: {s} is negative"));
        }
        settings.local_dir_min_age_seconds = s;
    }
    if args.source.offline && args.source.pods.is_none() {
        return Err(
            "--offline needs --pods FILE: whether a pod still uses a hostPath root is judged from a pod list".into(),
        );
    }
    let node = args
        .source
        .node
        .clone()
        .unwrap_or_else(|| collect::host_node_name(&host));
    let use_api = args.source.pods.is_none();
    let runtime = super::pods::runtime()?;
    let client = if use_api {
        Some(runtime.block_on(crate::kube_api::client(
            args.source.kubeconfig.as_deref(),
            std::time::Duration::from_secs(10),
        ))?)
    } else {
        None
    };
    let list_pods = || -> Result<FreshPods, String> {
        match (&client, &args.source.pods) {
            (Some(c), _) => Ok(FreshPods {
                pods: runtime
                    .block_on(crate::kube_api::node_pods(c, &node))
                    .map_err(|e| format!("{e} (local-dirs needs a pod list: the API, or --pods FILE)"))?,
                source: PodSource::Api,
            }),
            (None, Some(path)) => {
                let shown = path.display().to_string();
                let pods = collect::pods::read_pods_file(path, &shown)
                    .map_err(|e| match e {
                        collect::pods::PodsFileError::Read(e) => e.to_string(),
                        collect::pods::PodsFileError::Pods(e) => format!("{shown}: {e}"),
                    })?
                    .ok_or_else(|| format!("{shown}: no such file"))?;
                Ok(FreshPods {
                    pods,
                    source: PodSource::File,
                })
            }
            (None, None) => Err("no pod list".into()),
        }
    };
    let first = list_pods()?;
    let opts = ScanOptions {
        node: Some(node.clone()),
        pods: Some((first.pods, first.source)),
        local_dir_roots: roots.clone(),
        ..Default::default()
    };
    let snapshot = collect::collect(&host, &opts).map_err(|e| e.to_string())?.snapshot;
    let plan = plan_local_dirs(&host, &roots, &snapshot, &settings);
    let json_out = |out: &mut dyn Write, records: &[ActionRecord], applied: bool| {
        if args.format == Format::Json {
            let v = json!({"repair": "local-dirs", "node": plan.node, "dry_run": !applied, "plan": plan,
                           "actions": records});
            let _ = writeln!(out, "{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
    };
    if args.format == Format::Text {
        print_plan_text(out, &plan, args.apply);
    }
    if plan.remove.is_empty() {
        json_out(out, &[], args.apply);
        return Ok(EXIT_OK);
    }
    if !args.apply {
        json_out(out, &[], false);
        return Ok(EXIT_PLAN);
    }
    if !args.yes {
        let question = format!(
            "Remove the {} director(ies) above ({})?",
            plan.remove.len(),
            human_bytes(plan.bytes())
        );
        let yes = if args.format == Format::Json {
            confirm(&mut std::io::stderr(), input, &question)
        } else {
            confirm(out, input, &question)
        };
        if !yes {
            if args.format == Format::Text {
                let _ = writeln!(out, "not confirmed: nothing changed (add --yes to skip the question)");
            }
            json_out(out, &[], false);
            return Ok(EXIT_PLAN);
        }
    }
    let fresh = list_pods()?;
    let audit = Audit::new(client.clone(), &node, &instance()).echoing();
    let mut records = apply_local_dirs(&host, &plan, &snapshot, &fresh, &settings, &audit, None);
    if client.is_some() {
        runtime.block_on(audit.events(&mut records));
    }
    if args.format == Format::Text {
        print_records_text(out, &records);
        let freed: u64 = records.iter().filter_map(|r| r.bytes_freed).sum();
        let _ = writeln!(out, "{} freed", human_bytes(freed));
    }
    json_out(out, &records, true);
    finish(&records)
}

fn print_plan_text(out: &mut dyn Write, plan: &LocalDirPlan, apply: bool) {
    let mut text = format!(
        "nodemedic repair local-dirs on node {}: {} director(ies) to remove, {} ({} bytes)\n",
        plan.node,
        plan.remove.len(),
        human_bytes(plan.bytes()),
        plan.bytes()
    );
    for r in &plan.roots {
        match &r.problem {
            None => text.push_str(&format!("  root {}: ok\n", r.root)),
            Some(p) => text.push_str(&format!("  root {}: refused: {p}\n", r.root)),
        }
    }
    for note in &plan.notes {
        text.push_str(&format!("  note: {note}\n"));
    }
    for c in &plan.remove {
        text.push_str(&format!(
            "  remove {} ({}, {} bytes)\n",
            c.path,
            human_bytes(c.bytes),
            c.bytes
        ));
        text.push_str(&format!("    why: {}\n", c.why));
        text.push_str(&format!("    evidence: {}\n", evidence_line(&c.evidence)));
    }
    if !plan.left.is_empty() {
        text.push_str(&format!("left alone: {} director(ies)\n", plan.left.len()));
        for l in &plan.left {
            text.push_str(&format!(
                "  {} ({}): {}\n    why it was judged: {}\n",
                l.path,
                human_bytes(l.bytes),
                l.left_because,
                l.why
            ));
        }
    }
    if !apply && !plan.remove.is_empty() {
        text.push_str(
            "dry run: nothing changed; add --apply to remove (each directory is checked again right before)\n",
        );
    }
    let _ = out.write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let dev = nix::sys::stat::makedev(0xfd, 1) as u64;
        assert_eq!(
            maps_identity(
                "7f1c2a000000-7f1c2a200000 r--s 00000000 fd:01 1234567 /mnt/spark/blockmgr-1/0c/shuffle_0_1_0.data"
            ),
            Some((dev, 1234567))
        );
        assert_eq!(maps_identity("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]"), None);
        assert_eq!(maps_identity("garbage"), None);
    }

    #[test]
    fn roots_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("mnt/spark")).unwrap();
        std::fs::create_dir_all(root.join("var/lib/kubelet/spark")).unwrap();
        std::fs::write(root.join("mnt/file"), b"x").unwrap();
        std::os::unix::fs::symlink(root.join("mnt/spark"), root.join("mnt/link")).unwrap();
        std::os::unix::fs::symlink(root.join("mnt"), root.join("alias")).unwrap();
        let host = HostPaths::new(root, None);
        assert!(open_root(&host, "/mnt/spark").is_ok());
        assert!(open_root(&host, "/mnt/spark/").is_ok());
        for (bad, want) in [
            ("/mnt/link", "is a symlink"),
            ("/alias/spark", "on the way to /alias/spark, is a symlink"),
            ("/mnt/file", "is not a directory"),
            ("/mnt/none", "does not exist"),
            ("/mnt/../mnt/spark", ". or .."),
            ("mnt/spark", "not an absolute"),
            ("/", "root directory"),
            ("/var/lib/kubelet/spark", "inside the kubelet's directory"),
        ] {
            let e = open_root(&host, bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn measures_and_removes_by_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let scratch = root.join("mnt/spark/blockmgr-1");
        std::fs::create_dir_all(scratch.join("0c/deep")).unwrap();
        std::fs::write(scratch.join("0c/shuffle_0_1_0.data"), vec![0u8; 1000]).unwrap();
        std::fs::write(scratch.join("0c/deep/x"), vec![0u8; 24]).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(root.join("outside/keep"), vec![0u8; 5000]).unwrap();
        std::os::unix::fs::symlink(root.join("outside"), scratch.join("link")).unwrap();
        let host = HostPaths::new(root, None);
        let safe = open_root(&host, "/mnt/spark").unwrap();
        let st = nix::sys::stat::fstatat(safe.fd.as_fd(), "blockmgr-1", AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        let m = measure(open_child(&safe.fd, "blockmgr-1".as_ref(), &st).unwrap(), &st, &safe).unwrap();
        assert_eq!(m.bytes, 1024, "the symlink's target is not counted");
        assert_eq!(m.entries, 5);
        let mut freed = 0;
        let fd = open_child(&safe.fd, "blockmgr-1".as_ref(), &st).unwrap();
        remove_contents(&fd, &safe, 0, &mut freed).unwrap();
        assert_eq!(freed, 1024);
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
        assert_eq!(std::fs::read(root.join("outside/keep")).unwrap().len(), 5000);
    }

    #[test]
    fn finds_a_process_by_its_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(dir.path())
            .spawn()
            .unwrap();
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir.path()).unwrap();
        let inodes: HashSet<(u64, u64)> = [(m.dev(), m.ino())].into();
        let check = processes_holding(Path::new("/proc"), &inodes);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            check
                .holders
                .iter()
                .any(|h| h.contains(&format!("pid {} (sleep): cwd", child.id()))),
            "{check:?}"
        );
        assert!(check.refusal().is_some());
        let none = processes_holding(Path::new("/nonexistent/proc"), &inodes);
        assert!(none.refusal().unwrap().contains("could not be done"));
        let empty = processes_holding(dir.path(), &inodes);
        assert!(empty.refusal().unwrap().contains("no process found"), "{empty:?}");
    }
}
