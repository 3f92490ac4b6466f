//! Spark's local storage, measured over a window: the `local_storage` collector of the daemon
//! (docs/rules/local-storage-eviction-risk.md).
//!
//! Every running Spark pod's `spark-local-dir-*` volumes are measured where the kubelet keeps
//! them: an `emptyDir` at `<kubelet dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>`, a
//! `hostPath` at its path, a PersistentVolumeClaim at the pod's CSI mount
//! (`volumes/kubernetes.io~csi/<pv>/mount`, matched to the claims in order). Bytes are allocated
//! blocks (`st_blocks` x 512, as `du` and the kubelet count them), symlinks are not followed, and
//! no other file system below a dir is entered.
//!
//! The walk is incremental. The store keeps, for every directory it has seen, its modification
//! time, the bytes and count of its files last modified more than [`HOT_SECONDS`] ago (Spark
//! writes a shuffle or spill file within one task and closes it: such files no longer change),
//! and its files modified since (which may still grow). A directory whose modification time
//! has not changed since the last walk is not listed: only those recent files are looked at
//! again. One whose time changed (files were
//! created or removed) is listed and its files looked at. So a walk costs a `stat` per directory
//! and per recent file, and a listing and a `stat` per entry of the directories that changed,
//! not a `stat` per file of the tree. At most [`MAX_ENTRIES`] entries are visited per local dir.
//!
//! Where the kubelet's `/stats/summary` was read ([`LocalStore::measure_with`]), the volumes it
//! measures (emptyDirs, claims whose CSI driver reports usage) are its figures, dated at its
//! time, and are not walked; hostPaths always are.
//!
//! Growth is the change of a dir's bytes over the measurements of the window; it is reported
//! once they span [`MIN_GROWTH_SPAN`] seconds.
//!
//! A claim's volume and a memory-backed emptyDir are mounts of their own. The DaemonSet mounts
//! the kubelet's directory read-only without propagation, so a volume mounted after the agent
//! started is not seen: its mount point reads as an empty directory of the kubelet's disk.
//! Such a dir is not walked (its zero bytes would read as "nothing grows") but listed as
//! unseen, and `local-storage-eviction-risk` says it could not look.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use nodemedic_rules::snapshot::storage::{KUBELET_ONLY_DEVICES, MIN_GROWTH_SPAN};
use nodemedic_rules::snapshot::{
    DirBacking, FileSystemUse, ImageFs, KubeletStats, LocalStorage, MeasuredBy, Observed, PodInfo, PodStorage,
    Remembered, StorageDir, UnseenDir,
};

use super::kubelet_stats::Summary;
use super::read::{list_dir, symlink_metadata};
use crate::host::HostPaths;

/// At most this many entries are visited below one local dir per walk; past it the bytes are a
/// lower bound and say so.
pub const MAX_ENTRIES: usize = 200_000;

/// A file modified within this many seconds may still grow: it is looked at on every walk;
/// older ones are counted once. Two minutes is two walks at the default
/// `local_storage_interval_seconds`; the cost of a longer horizon is a `stat` per recent file
/// per walk and their names kept (docs/performance.md, "Spark's local storage"). A file
/// appended to after sitting two minutes unchanged, in a directory where nothing was created
/// or removed since, is not seen to grow until something is.
pub const HOT_SECONDS: f64 = 120.0;

/// At most this many recent files are kept (about 100 bytes each: 10 MiB) over the node's
/// local dirs; past it, further recent files are counted as old ones are (their bytes now,
/// not looked at again until their directory changes), so that a node writing shuffle
/// everywhere at once cannot take the agent's memory past its limit.
pub const MAX_RECENT_FILES: usize = 100_000;

/// What the store keeps of one directory.
#[derive(Debug, Default)]
struct DirTrack {
    /// Its modification time (seconds, nanoseconds) at the last walk.
    mtime: (i64, i64),
    /// Bytes and count of its files last modified [`HOT_SECONDS`] ago or earlier.
    cold_bytes: u64,
    cold_files: u64,
    /// Its files modified since: name, bytes, modification time.
    hot: Vec<(OsString, u64, i64)>,
    /// Its subdirectories (on the same file system).
    subdirs: Vec<PathBuf>,
}

/// The measurements of one local dir in the window.
#[derive(Debug, Default)]
struct History {
    /// Who measured them: the kubelet's `du` counts directories too, a walk only files, so a
    /// change of who measures starts the history again (the difference is not growth).
    by: MeasuredBy,
    /// (unix seconds, bytes), oldest first.
    points: VecDeque<(f64, u64)>,
}

impl History {
    /// Adds a point; whether it starts the history over for a change of who measures.
    fn push(&mut self, by: MeasuredBy, at: f64, bytes: u64, window: f64) -> bool {
        let switched = by != self.by && !self.points.is_empty();
        if by != self.by {
            self.by = by;
            self.points.clear();
        }
        // The kubelet's figure of a minute ago, read again, is not a new point.
        if self.points.back().is_some_and(|(t, _)| at <= *t) {
            return switched;
        }
        self.points.push_back((at, bytes));
        // Keep the oldest point that is still in the window, and one before it at most.
        while self.points.len() > 2 && self.points.get(1).is_some_and(|(t, _)| at - t >= window) {
            self.points.pop_front();
        }
        switched
    }

    /// Bytes per second over the window, and the seconds it spans.
    fn growth(&self) -> (Option<f64>, f64) {
        match (self.points.front(), self.points.back()) {
            (Some((t0, b0)), Some((t1, b1))) if t1 - t0 >= MIN_GROWTH_SPAN => {
                (Some((*b1 as f64 - *b0 as f64) / (t1 - t0)), t1 - t0)
            }
            (Some((t0, _)), Some((t1, _))) => (None, t1 - t0),
            _ => (None, 0.0),
        }
    }
}

/// What the daemon keeps between measurements.
#[derive(Debug)]
pub struct LocalStore {
    dirs: HashMap<PathBuf, DirTrack>,
    histories: HashMap<PathBuf, History>,
    remembered: BTreeMap<String, Remembered>,
    /// When the store first measured, unix seconds.
    first_at: Option<f64>,
    /// When a local dir's figures last changed source (the kubelet's, a walk's), unix seconds.
    switched_at: Option<f64>,
    /// [`MAX_RECENT_FILES`], or fewer in a test.
    max_recent: usize,
}

impl Default for LocalStore {
    fn default() -> Self {
        LocalStore::with_max_recent(MAX_RECENT_FILES)
    }
}

/// One walk of a local dir.
#[derive(Debug, Default)]
struct Walked {
    bytes: u64,
    files: u64,
    truncated: bool,
    device: Option<u64>,
}

/// Whether `path` is a directory on another file system than its parent's.
fn is_mount_point(path: &Path) -> bool {
    match (symlink_metadata(path), path.parent().map(symlink_metadata)) {
        (Ok(m), Some(Ok(parent))) => m.is_dir() && m.dev() != parent.dev(),
        _ => false,
    }
}

/// Allocated bytes of `blocks` 512-byte blocks (`st_blocks`, whichever call gave it).
fn allocated(blocks: u64) -> u64 {
    blocks.saturating_mul(512)
}

impl LocalStore {
    /// A store that keeps at most `max_recent` recent files.
    pub fn with_max_recent(max_recent: usize) -> Self {
        LocalStore {
            dirs: HashMap::new(),
            histories: HashMap::new(),
            remembered: BTreeMap::new(),
            first_at: None,
            switched_at: None,
            max_recent,
        }
    }

    /// Walks `root` incrementally; `now` and `window` in seconds; `recent` is how many more
    /// recent files may be kept in this measurement.
    fn walk(&mut self, root: &Path, now: f64, window: f64, seen: &mut HashSet<PathBuf>, recent: &mut usize) -> Walked {
        let mut w = Walked::default();
        let hot_for = HOT_SECONDS.min(window);
        let Ok(meta) = symlink_metadata(root) else { return w };
        if !meta.is_dir() {
            return w;
        }
        let device = meta.dev();
        w.device = Some(device);
        let mut stack = vec![(root.to_path_buf(), meta)];
        let mut entries = 0usize;
        while let Some((dir, meta)) = stack.pop() {
            seen.insert(dir.clone());
            let mtime = (meta.mtime(), meta.mtime_nsec());
            let track = self.dirs.entry(dir.clone()).or_default();
            let unchanged =
                track.mtime == mtime && (track.cold_files > 0 || !track.hot.is_empty() || !track.subdirs.is_empty());
            if unchanged {
                // Only the recent files can have grown; those older than the horizon now are cold.
                let mut hot = Vec::with_capacity(track.hot.len());
                // Each looked at relative to the directory, opened once (an fstatat by name,
                // not the whole path's lookup per file).
                let opened = if track.hot.is_empty() {
                    None
                } else {
                    super::read::trace::stat(&dir);
                    std::fs::File::open(&dir).ok()
                };
                for (name, bytes, at) in std::mem::take(&mut track.hot) {
                    if super::read::trace::on() {
                        super::read::trace::stat(&dir.join(&name));
                    }
                    let now_is = opened.as_ref().and_then(|d| {
                        nix::sys::stat::fstatat(d, name.as_os_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()
                    });
                    let (bytes, at) = match now_is {
                        Some(st) if st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG => {
                            (allocated(st.st_blocks as u64), st.st_mtime)
                        }
                        _ => (bytes, at),
                    };
                    if now - (at as f64) < hot_for && *recent > 0 {
                        *recent -= 1;
                        hot.push((name, bytes, at));
                    } else {
                        track.cold_bytes += bytes;
                        track.cold_files += 1;
                    }
                }
                track.hot = hot;
                entries += track.cold_files as usize + track.hot.len() + track.subdirs.len();
            } else {
                let Ok(list) = list_dir(&dir) else { continue };
                let mut fresh = DirTrack {
                    mtime,
                    ..Default::default()
                };
                for e in list.flatten() {
                    entries += 1;
                    if entries > MAX_ENTRIES {
                        w.truncated = true;
                        break;
                    }
                    let path = e.path();
                    // Relative to the open directory (an fstatat, not the whole path's lookup
                    // again); not following a symlink, as symlink_metadata.
                    super::read::trace::stat(&path);
                    let Ok(m) = e.metadata() else { continue };
                    if m.is_dir() {
                        if m.dev() == device {
                            fresh.subdirs.push(path);
                        }
                    } else if m.is_file() {
                        if now - (m.mtime() as f64) < hot_for && *recent > 0 {
                            *recent -= 1;
                            fresh.hot.push((e.file_name(), allocated(m.blocks()), m.mtime()));
                        } else {
                            fresh.cold_bytes += allocated(m.blocks());
                            fresh.cold_files += 1;
                        }
                    }
                }
                *track = fresh;
            }
            let track = &self.dirs[&dir];
            w.bytes += track.cold_bytes + track.hot.iter().map(|(_, b, _)| b).sum::<u64>();
            w.files += track.cold_files + track.hot.len() as u64;
            if w.truncated || entries > MAX_ENTRIES {
                w.truncated = true;
                break;
            }
            for sub in track.subdirs.clone() {
                if let Ok(m) = symlink_metadata(&sub) {
                    if m.is_dir() && m.dev() == device {
                        stack.push((sub, m));
                    }
                }
            }
        }
        w
    }

    /// Measures the local dirs of the running Spark pods among `pods` at `now` (unix seconds),
    /// growth over `window` seconds, every one by a walk. `kubelet_dir` is where the kubelet
    /// keeps its pods; `imagefs` whether the runtime's images share its file system.
    pub fn measure(
        &mut self,
        host: &HostPaths,
        kubelet_dir: &Path,
        pods: &[PodInfo],
        now: f64,
        window: f64,
        imagefs: ImageFs,
    ) -> Observed<LocalStorage> {
        self.measure_with(host, kubelet_dir, pods, now, window, imagefs, None)
    }

    /// [`Self::measure`], taking from `kubelet` (its `/stats/summary`, when read) the figures
    /// of the volumes it reports: an `emptyDir` (on disk or in memory) and a claim whose CSI
    /// driver reports usage are not walked, and a claim the agent cannot see is measured all
    /// the same. A `hostPath` is always walked (the kubelet does not measure it).
    #[allow(clippy::too_many_arguments)]
    pub fn measure_with(
        &mut self,
        host: &HostPaths,
        kubelet_dir: &Path,
        pods: &[PodInfo],
        now: f64,
        window: f64,
        imagefs: ImageFs,
        kubelet: Option<&Summary>,
    ) -> Observed<LocalStorage> {
        self.first_at.get_or_insert(now);
        let kubelet_device = symlink_metadata(kubelet_dir).ok().map(|m| m.dev());
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut filesystems: BTreeMap<u64, FileSystemUse> = BTreeMap::new();
        let mut measured_roots = HashSet::new();
        let mut unseen = Vec::new();
        let mut recent = self.max_recent;
        let mut kubelet_only = KUBELET_ONLY_DEVICES;
        let running: Vec<&PodInfo> = pods
            .iter()
            .filter(|p| p.spark_role().is_some() && !p.is_terminal() && !p.local_dir_volumes.is_empty())
            .collect();
        for pod in running {
            let counted = kubelet.and_then(|k| k.pods.get(&pod.uid));
            let pod_dir = kubelet_dir.join("pods").join(&pod.uid).join("volumes");
            let mut csi: Vec<PathBuf> = list_dir(&pod_dir.join("kubernetes.io~csi"))
                .map(|l| l.flatten().map(|e| e.path().join("mount")).collect())
                .unwrap_or_default();
            csi.sort();
            let mut csi = csi.into_iter();
            let mut dirs = Vec::new();
            for v in &pod.local_dir_volumes {
                let mut not_seen = |backing: DirBacking, path: &Path, reason: String| {
                    unseen.push(UnseenDir {
                        pod_uid: pod.uid.clone(),
                        volume: v.name.clone(),
                        backing,
                        path: host.display(path),
                        reason,
                    });
                };
                let empty_dir = || pod_dir.join("kubernetes.io~empty-dir").join(&v.name);
                let (backing, path) = if let Some(h) = &v.host_path {
                    (DirBacking::HostPath { path: h.clone() }, Some(host.host(h)))
                } else if let Some(claim) = &v.claim {
                    (DirBacking::Claim { claim: claim.clone() }, csi.next())
                } else if v.memory {
                    (DirBacking::Memory, Some(empty_dir()))
                } else {
                    (DirBacking::EmptyDir, Some(empty_dir()))
                };
                // A claim's file system and a memory-backed tmpfs are mounts of their own: where
                // the path is not a mount point here, what is below it is not the volume.
                let own_mount = matches!(backing, DirBacking::Claim { .. } | DirBacking::Memory);
                let visible = path
                    .as_deref()
                    .filter(|p| !own_mount || symlink_metadata(p).is_err() || is_mount_point(p));
                // The kubelet's figures, for what it measures (not a hostPath).
                let usage = counted
                    .and_then(|c| c.volumes.get(&v.name))
                    .filter(|_| !matches!(backing, DirBacking::HostPath { .. }));
                // Where it is (or would be): what the history is kept by and the evidence shows.
                let key = path
                    .clone()
                    .unwrap_or_else(|| pod_dir.join("kubernetes.io~csi").join(&v.name));
                let (bytes, files, truncated, device, at, by) = if let Some(u) = usage {
                    let seen_device = match &backing {
                        DirBacking::Memory => None,
                        DirBacking::EmptyDir => kubelet_device,
                        _ => visible.and_then(|p| symlink_metadata(p).ok()).map(|m| m.dev()),
                    };
                    // A dir on disk not seen here (a claim mounted later): its file system as
                    // the kubelet reports it.
                    let device = (backing != DirBacking::Memory).then(|| {
                        seen_device.unwrap_or_else(|| {
                            kubelet_only += 1;
                            filesystems.insert(
                                kubelet_only,
                                FileSystemUse {
                                    device: kubelet_only,
                                    path: host.display(&key),
                                    capacity_bytes: u.capacity_bytes.unwrap_or(0),
                                    available_bytes: u.available_bytes.unwrap_or(0),
                                    nodefs: false,
                                },
                            );
                            kubelet_only
                        })
                    });
                    let files = u.inodes_used.unwrap_or(0);
                    (u.used_bytes, files, false, device, u.at as f64, MeasuredBy::Kubelet)
                } else {
                    let Some(path) = path.as_deref() else {
                        let dir = pod_dir.join("kubernetes.io~csi");
                        not_seen(backing, &dir, "no CSI volume mount of the pod's here".into());
                        continue;
                    };
                    if visible.is_none() {
                        not_seen(
                            backing,
                            path,
                            "not a mount point as the agent sees it: the volume was mounted after the agent started, \
                             and the agent's mount of the kubelet's directory does not propagate later mounts"
                                .into(),
                        );
                        continue;
                    }
                    let walked = self.walk(path, now, window, &mut seen, &mut recent);
                    let Some(device) = walked.device else { continue };
                    let device = (backing != DirBacking::Memory).then_some(device);
                    (
                        walked.bytes,
                        walked.files,
                        walked.truncated,
                        device,
                        now,
                        MeasuredBy::Walk,
                    )
                };
                measured_roots.insert(key.clone());
                let history = self.histories.entry(key.clone()).or_default();
                if history.push(by, at, bytes, window) {
                    self.switched_at = Some(now);
                }
                let (growth, span) = history.growth();
                let shown = host.display(&key);
                if let (Some(device), Some(path)) = (device, visible) {
                    if let std::collections::btree_map::Entry::Vacant(slot) = filesystems.entry(device) {
                        if let Ok(fs) = nix::sys::statvfs::statvfs(path) {
                            let frsize = fs.fragment_size();
                            slot.insert(FileSystemUse {
                                device,
                                // The kubelet's file system by the kubelet's directory.
                                path: if kubelet_device == Some(device) {
                                    host.display(kubelet_dir)
                                } else {
                                    shown.clone()
                                },
                                capacity_bytes: fs.blocks().saturating_mul(frsize),
                                available_bytes: fs.blocks_available().saturating_mul(frsize),
                                nodefs: kubelet_device == Some(device),
                            });
                        }
                    }
                }
                dirs.push(StorageDir {
                    volume: v.name.clone(),
                    device,
                    backing,
                    path: shown,
                    bytes,
                    files,
                    growth_bytes_per_second: growth,
                    growth_span_seconds: span,
                    truncated,
                    measured_by: by,
                    measured_at: at as i64,
                });
            }
            if dirs.is_empty() {
                continue;
            }
            let disk: u64 = dirs
                .iter()
                .filter(|d| d.backing != DirBacking::Memory)
                .map(|d| d.bytes)
                .sum();
            let kept = self.remembered.entry(pod.uid.clone()).or_insert(Remembered {
                bytes: 0,
                measured_at: 0,
                warned_at: None,
                warned_severity: None,
            });
            kept.bytes = disk;
            kept.measured_at = now as i64;
            out.push(PodStorage {
                pod_uid: pod.uid.clone(),
                dirs,
                kubelet_ephemeral: counted.and_then(|c| c.ephemeral),
            });
        }
        // Forget directories and histories of what is gone; remember pods while they exist.
        self.dirs.retain(|d, _| seen.contains(d));
        self.histories.retain(|d, _| measured_roots.contains(d));
        let known: HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        self.remembered.retain(|uid, _| known.contains(uid.as_str()));
        out.sort_by(|a, b| a.pod_uid.cmp(&b.pod_uid));
        // Growth is not known yet, unless every dir's growth is (the kubelet's figures can span
        // the time already). At the first measurement nothing is known, so nothing applies; when
        // a dir's figures come from another source now (the kubelet became unreadable, or
        // readable again), growth is measured afresh: an error for that while, so that the rules
        // cannot judge and keep what they last found (not "nothing grows").
        let since = self.first_at.map_or(0.0, |t| now - t);
        let switched = self.switched_at.map(|t| now - t).filter(|s| *s < MIN_GROWTH_SPAN);
        let all_known = !out.is_empty()
            && out
                .iter()
                .flat_map(|p| &p.dirs)
                .all(|d| d.growth_bytes_per_second.is_some());
        if (since < MIN_GROWTH_SPAN || switched.is_some()) && !all_known {
            return match switched {
                Some(s) => Observed::Error {
                    reason: format!(
                        "growth not known: a local dir's figures changed source (the kubelet's accounting, the walk) \
                         {s:.0} s ago, and growth needs measurements {MIN_GROWTH_SPAN:.0} s apart"
                    ),
                },
                None => Observed::NotApplicable {
                    reason: format!(
                        "growth needs measurements {MIN_GROWTH_SPAN:.0} s apart: the first was {since:.0} s ago"
                    ),
                },
            };
        }
        Observed::Ok(LocalStorage {
            measured_at: now as i64,
            window_seconds: window,
            pods: out,
            filesystems: filesystems.into_values().collect(),
            imagefs,
            unseen,
            remembered: self.remembered.clone(),
            kubelet_stats: KubeletStats::Off,
        })
    }

    /// Notes that `local-storage-eviction-risk` reported pod `uid` at `at` with `severity`
    /// (kept: the first time, and the worst).
    pub fn warned(&mut self, uid: &str, at: i64, severity: nodemedic_rules::finding::Severity) {
        if let Some(r) = self.remembered.get_mut(uid) {
            r.warned_at.get_or_insert(at);
            r.warned_severity = Some(r.warned_severity.map_or(severity, |s| s.max(severity)));
        }
    }
}

#[cfg(test)]
mod tests;
