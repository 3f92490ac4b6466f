//! What changes on the host, as inotify(7) tells it: the daemon re-reads only that.
//!
//! Watched (each a directory watch, which reports on the directory's entries):
//! - the kubelet directory: `cpu_manager_state`, `memory_manager_state` or `dra_manager_state`
//!   created, renamed over (the kubelet writes a temporary file and renames it), written or
//!   deleted; and its `device-plugins` directory: `kubelet_internal_checkpoint` the same;
//! - the pod cgroup tree: `kubepods` and its QoS directories (pod cgroups created and
//!   removed), and every directory of every pod cgroup (containers' cgroups created and
//!   removed; `cpuset.cpus`, `cgroup.procs`, `tasks` written; cgroup v2's `cgroup.events`
//!   changed, which the kernel reports when the last process of a subtree exits).
//!
//! Each event names the pod cgroup it concerns; the daemon re-reads that pod. What inotify
//! cannot tell (a process exiting in a cgroup v1 leaf that stays, a process's affinity set by
//! `sched_setaffinity`, files growing in local dirs, the kubelet's configuration) waits for
//! the full rescan. A queue overflow or a watch limit reached asks for a full rescan too, and
//! the latter makes the daemon poll: see docs/architecture.md, "What is event-driven".

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use futures::{FutureExt as _, StreamExt as _};
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask, Watches};

use crate::collect::cgroups::{Layout, SUBTREE_DIR_LIMIT, parse_pod_dir_name, parse_qos_dir_name, subdirs};
use crate::collect::checkpoint::FILE_NAME;

/// The kubelet's resource manager checkpoints, by file name: the CPU manager's and the memory
/// and DRA managers' in the kubelet directory, the device manager's in `device-plugins`.
const CHECKPOINTS: [&str; 4] = [
    FILE_NAME,
    "memory_manager_state",
    "dra_manager_state",
    "kubelet_internal_checkpoint",
];

/// The device manager's directory below the kubelet directory.
const DEVICE_PLUGINS: &str = "device-plugins";

/// What changed since the daemon last looked.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// A kubelet checkpoint (the CPU manager's or another resource manager's) was replaced,
    /// written or removed.
    pub checkpoint: bool,
    /// Pod cgroup directories (below `kubepods` or a QoS directory) with a change at or below
    /// them.
    pub pods: BTreeSet<PathBuf>,
    /// Everything must be read again, and why.
    pub rescan: Option<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        !self.checkpoint && self.pods.is_empty() && self.rescan.is_none()
    }

    /// Adds `other`'s changes.
    pub fn merge(&mut self, other: Changes) {
        self.checkpoint |= other.checkpoint;
        self.pods.extend(other.pods);
        if self.rescan.is_none() {
            self.rescan = other.rescan;
        }
    }
}

/// What a watched directory is.
#[derive(Debug, Clone)]
enum Role {
    KubeletDir,
    /// `kubepods` or a QoS directory: its subdirectories are pod cgroups (or QoS directories).
    Parent(PathBuf),
    /// A directory at or below the pod cgroup `pod`.
    InPod {
        pod: PathBuf,
        dir: PathBuf,
    },
}

/// Files whose writes matter in a pod's cgroups.
fn interesting_file(name: &OsStr) -> bool {
    matches!(
        name.to_str(),
        Some("cpuset.cpus" | "cgroup.procs" | "tasks" | "cgroup.events" | "cgroup.threads")
    )
}

const DIR_EVENTS: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::MODIFY)
    .union(WatchMask::ONLYDIR);

const KUBELET_DIR_EVENTS: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::ONLYDIR);

/// The daemon's inotify instance and what each of its watches is.
pub struct HostWatch {
    watches: Watches,
    stream: EventStream<Vec<u8>>,
    roles: HashMap<WatchDescriptor, Role>,
    /// What the watches were set up for.
    armed_for: Option<(PathBuf, Option<Layout>)>,
    /// A watch could not be added (the limit, `fs.inotify.max_user_watches`, or an error):
    /// changes may go unseen, so the daemon polls.
    pub incomplete: Option<String>,
    /// The event stream ended (it does not, short of a kernel error).
    ended: bool,
}

impl std::fmt::Debug for HostWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostWatch")
            .field("watches", &self.roles.len())
            .field("incomplete", &self.incomplete)
            .finish()
    }
}

impl HostWatch {
    /// A new inotify instance (it watches nothing until [`HostWatch::arm`]).
    pub fn new() -> std::io::Result<HostWatch> {
        let inotify = Inotify::init()?;
        let watches = inotify.watches();
        // Room for at least 60 events per read; the kernel queues the rest (16,384 by default).
        let stream = inotify.into_event_stream(vec![0u8; 16 * 1024])?;
        Ok(HostWatch {
            watches,
            stream,
            roles: HashMap::new(),
            armed_for: None,
            incomplete: None,
            ended: false,
        })
    }

    /// Whether the event stream ended: nothing will be reported any more.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// How many directories are watched.
    pub fn len(&self) -> usize {
        self.roles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.roles.is_empty()
    }

    fn add(&mut self, dir: &Path, mask: WatchMask, role: Role) {
        match self.watches.add(dir, mask) {
            Ok(wd) => {
                self.roles.insert(wd, role);
            }
            // Gone since it was listed: its parent's watch reported (or will report) that.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                if self.incomplete.is_none() {
                    let why = if e.raw_os_error() == Some(nix::libc::ENOSPC) {
                        format!(
                            "the inotify watch limit is reached at {} watches (raise fs.inotify.max_user_watches)",
                            self.roles.len()
                        )
                    } else {
                        format!("inotify watch of {}: {e}", dir.display())
                    };
                    tracing::warn!("{why}: changes may go unseen, so the host is scanned in full on every interval");
                    self.incomplete = Some(why);
                }
            }
        }
    }

    /// Watches the kubelet directory and the pod cgroups of `layout`, from scratch when they
    /// moved since the last call; pods already watched are watched again (a no-op for
    /// inotify), so that directories created while no watch was there are covered.
    pub fn arm(&mut self, kubelet_dir: &Path, layout: Option<&Layout>) {
        let target = (kubelet_dir.to_path_buf(), layout.cloned());
        if self.armed_for.as_ref() != Some(&target) {
            for wd in self.roles.drain().map(|(wd, _)| wd).collect::<Vec<_>>() {
                let _ = self.watches.remove(wd);
            }
            self.incomplete = None;
        }
        self.add(kubelet_dir, KUBELET_DIR_EVENTS, Role::KubeletDir);
        let plugins = kubelet_dir.join(DEVICE_PLUGINS);
        if plugins.is_dir() {
            self.add(&plugins, KUBELET_DIR_EVENTS, Role::KubeletDir);
        }
        if let Some(layout) = layout {
            self.arm_parent(&layout.kubepods);
        }
        self.armed_for = Some(target);
    }

    /// Watches `kubepods` or a QoS directory and everything below it.
    fn arm_parent(&mut self, dir: &Path) {
        self.add(dir, DIR_EVENTS, Role::Parent(dir.to_path_buf()));
        for (name, path) in subdirs(dir) {
            if parse_pod_dir_name(&name).is_some() {
                self.arm_pod(&path);
            } else if parse_qos_dir_name(&name).is_some() {
                self.arm_parent(&path);
            }
        }
    }

    /// Watches the pod cgroup `pod` and every directory below it (at most
    /// [`SUBTREE_DIR_LIMIT`], as the scan reads).
    pub fn arm_pod(&mut self, pod: &Path) {
        self.arm_below(pod, pod);
    }

    fn arm_below(&mut self, pod: &Path, top: &Path) {
        let mut stack = vec![top.to_path_buf()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            if seen == SUBTREE_DIR_LIMIT {
                break;
            }
            seen += 1;
            let role = Role::InPod {
                pod: pod.to_path_buf(),
                dir: dir.clone(),
            };
            self.add(&dir, DIR_EVENTS, role);
            stack.extend(subdirs(&dir).into_iter().map(|(_, p)| p));
        }
    }

    /// Drops the watches of `gone` and everything below it. cgroupfs does not report the
    /// removal of a watched directory to its own watch (no `IN_DELETE_SELF`, no `IN_IGNORED`:
    /// checked on Linux 6.18, cgroup v1), and the watch keeps the directory's inode: without
    /// this, every pod that came and went would hold its watches until the agent restarts.
    fn unwatch_below(&mut self, gone: &Path) {
        let stale: Vec<WatchDescriptor> = self
            .roles
            .iter()
            .filter(|(_, role)| match role {
                Role::KubeletDir => false,
                Role::Parent(dir) | Role::InPod { dir, .. } => dir.starts_with(gone),
            })
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in stale {
            self.roles.remove(&wd);
            // Fails where the kernel dropped it already (tmpfs sends IN_IGNORED).
            let _ = self.watches.remove(wd);
        }
    }

    /// Waits for events that change something the scan reads and returns what they changed,
    /// with every event already queued behind them.
    pub async fn next(&mut self) -> Changes {
        let mut changes = Changes::default();
        while changes.is_empty() {
            let first = self.stream.next().await;
            self.take(first, &mut changes);
            while let Some(more) = self.stream.next().now_or_never() {
                self.take(more, &mut changes);
            }
        }
        changes
    }

    fn take(&mut self, item: Option<std::io::Result<inotify::Event<std::ffi::OsString>>>, changes: &mut Changes) {
        match item {
            Some(Ok(event)) => self.apply(event.wd, event.mask, event.name.as_deref(), changes),
            Some(Err(e)) => changes.rescan = Some(format!("reading inotify events: {e}")),
            None => {
                self.ended = true;
                changes.rescan = Some("the inotify stream ended".into());
            }
        }
    }

    /// What one event changed; new directories are watched at once.
    fn apply(&mut self, wd: WatchDescriptor, mask: EventMask, name: Option<&OsStr>, changes: &mut Changes) {
        if mask.contains(EventMask::Q_OVERFLOW) {
            changes.rescan = Some("the inotify queue overflowed".into());
            return;
        }
        if mask.contains(EventMask::IGNORED) {
            // The directory was removed (or unwatched): its parent reported the removal.
            self.roles.remove(&wd);
            return;
        }
        let Some(role) = self.roles.get(&wd).cloned() else {
            return;
        };
        let is_dir = mask.contains(EventMask::ISDIR);
        let created = is_dir && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO);
        if is_dir && mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
            if let (Some(name), Role::Parent(dir) | Role::InPod { dir, .. }) = (name, &role) {
                self.unwatch_below(&dir.join(name));
            }
        }
        match role {
            Role::KubeletDir => {
                if name.is_some_and(|n| CHECKPOINTS.iter().any(|c| n == OsStr::new(c))) {
                    changes.checkpoint = true;
                }
            }
            Role::Parent(dir) => {
                let Some(name) = name.and_then(OsStr::to_str) else {
                    return;
                };
                let path = dir.join(name);
                if parse_pod_dir_name(name).is_some() {
                    if created {
                        self.arm_pod(&path);
                    }
                    changes.pods.insert(path);
                } else if parse_qos_dir_name(name).is_some() && created {
                    self.arm_parent(&path);
                    // Pods made before the watch was there.
                    changes.pods.extend(
                        subdirs(&path)
                            .into_iter()
                            .filter(|(n, _)| parse_pod_dir_name(n).is_some())
                            .map(|(_, p)| p),
                    );
                }
            }
            Role::InPod { pod, dir } => {
                if created {
                    if let Some(name) = name {
                        self.arm_below(&pod, &dir.join(name));
                    }
                }
                let relevant = is_dir || name.is_some_and(interesting_file);
                if relevant {
                    changes.pods.insert(pod);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nodemedic_rules::snapshot::CgroupVersion;

    use super::*;

    const UID: &str = "0d6f7a3c-3d49-4a55-9c7e-1b2f3a4b5c6d";

    fn layout(root: &Path) -> Layout {
        Layout {
            kubepods: root.join("kubepods"),
            version: CgroupVersion::V1,
            driver: "cgroupfs",
        }
    }

    async fn next(w: &mut HostWatch) -> Changes {
        tokio::time::timeout(Duration::from_secs(20), w.next())
            .await
            .expect("an inotify event within 20 s")
    }

    /// Everything already queued, or nothing within 200 ms.
    async fn quiet(w: &mut HostWatch) -> Option<Changes> {
        tokio::time::timeout(Duration::from_millis(200), w.next()).await.ok()
    }

    #[tokio::test]
    async fn checkpoint_renames_and_pod_cgroups_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (kubelet, root) = (dir.path().join("kubelet"), dir.path().join("cpuset"));
        let burstable = root.join("kubepods/burstable");
        std::fs::create_dir_all(&kubelet).unwrap();
        std::fs::create_dir_all(&burstable).unwrap();
        let mut w = HostWatch::new().unwrap();
        w.arm(&kubelet, Some(&layout(&root)));
        assert_eq!(w.len(), 3, "kubelet dir, kubepods, burstable");

        // The kubelet's write: a temporary file renamed over the checkpoint.
        std::fs::write(kubelet.join(".tmp-state"), "{}").unwrap();
        std::fs::rename(kubelet.join(".tmp-state"), kubelet.join(FILE_NAME)).unwrap();
        let c = next(&mut w).await;
        assert!(c.checkpoint, "{c:?}");
        assert!(c.pods.is_empty() && c.rescan.is_none(), "{c:?}");
        // The other managers' checkpoints are reported the same; other files are not.
        std::fs::write(kubelet.join("memory_manager_state"), "{}").unwrap();
        assert!(next(&mut w).await.checkpoint);
        std::fs::write(kubelet.join("kubeadm-flags.env"), "x").unwrap();
        assert_eq!(quiet(&mut w).await, None);
        std::fs::create_dir(kubelet.join(DEVICE_PLUGINS)).unwrap();
        assert_eq!(quiet(&mut w).await, None, "a new directory is not a checkpoint");
        w.arm(&kubelet, Some(&layout(&root)));
        std::fs::write(kubelet.join(DEVICE_PLUGINS).join("kubelet.sock"), "").unwrap();
        assert_eq!(quiet(&mut w).await, None);
        std::fs::write(kubelet.join(DEVICE_PLUGINS).join("kubelet_internal_checkpoint"), "{}").unwrap();
        assert!(next(&mut w).await.checkpoint);

        // A pod cgroup with a container appears: the pod is reported, and then watched.
        let pod = burstable.join(format!("pod{UID}"));
        std::fs::create_dir(&pod).unwrap();
        let c = next(&mut w).await;
        assert_eq!(c.pods, BTreeSet::from([pod.clone()]));
        let leaf = pod.join("4b1e8d8c");
        std::fs::create_dir(&leaf).unwrap();
        let c = next(&mut w).await;
        assert_eq!(c.pods, BTreeSet::from([pod.clone()]));
        // A write to the container's cpuset is the pod's change; other files are not.
        std::fs::write(leaf.join("memory.limit_in_bytes"), "1").unwrap();
        assert_eq!(quiet(&mut w).await, None);
        std::fs::write(leaf.join("cpuset.cpus"), "2-3").unwrap();
        let c = next(&mut w).await;
        assert_eq!(c.pods, BTreeSet::from([pod.clone()]));
        // Removal, leaf first as the runtime does.
        std::fs::remove_dir_all(&pod).unwrap();
        let mut c = next(&mut w).await;
        while let Some(more) = quiet(&mut w).await {
            c.merge(more);
        }
        assert_eq!(c.pods, BTreeSet::from([pod.clone()]));
        assert_eq!(
            w.len(),
            4,
            "kubelet dir, device-plugins, kubepods, burstable: the removed directories' watches are dropped: {w:?}"
        );
    }

    #[tokio::test]
    async fn a_qos_directory_created_late_is_watched_with_its_pods() {
        let dir = tempfile::tempdir().unwrap();
        let (kubelet, root) = (dir.path().join("kubelet"), dir.path().join("cpuset"));
        std::fs::create_dir_all(&kubelet).unwrap();
        std::fs::create_dir_all(root.join("kubepods")).unwrap();
        let mut w = HostWatch::new().unwrap();
        w.arm(&kubelet, Some(&layout(&root)));
        // The QoS directory and a pod in it, both before the watcher hears of the first: the
        // pod is found when the QoS directory is watched.
        let besteffort = root.join("kubepods/besteffort");
        std::fs::create_dir(&besteffort).unwrap();
        let pod = besteffort.join(format!("pod{UID}"));
        std::fs::create_dir(&pod).unwrap();
        let c = next(&mut w).await;
        assert_eq!(c.pods, BTreeSet::from([pod.clone()]));
        // ... and then watched itself.
        std::fs::write(pod.join("cgroup.procs"), "42\n").unwrap();
        let c = next(&mut w).await;
        assert_eq!(c.pods, BTreeSet::from([pod]));
    }

    #[tokio::test]
    async fn arming_elsewhere_drops_the_old_watches() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let mut w = HostWatch::new().unwrap();
        w.arm(&a, None);
        w.arm(&b, None);
        assert_eq!(w.len(), 1);
        std::fs::write(a.join(FILE_NAME), "{}").unwrap();
        assert_eq!(quiet(&mut w).await, None, "the old directory is no longer watched");
        std::fs::write(b.join(FILE_NAME), "{}").unwrap();
        assert!(next(&mut w).await.checkpoint);
    }
}
