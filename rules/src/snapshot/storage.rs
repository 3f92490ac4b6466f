//! Spark's local storage on the node as the daemon measures it over a window (the
//! `local_storage` collector), and the TCP ports the node's network namespace listens on (the
//! `listeners` collector): what `local-storage-eviction-risk`, `spark-executor-evicted` and
//! `shuffle-service-missing` judge.

use std::collections::BTreeMap;

/// What a Spark local dir (`spark-local-dir-N` volume) is backed by.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DirBacking {
    /// An `emptyDir` on the node's disk: counted against the pod's `ephemeral-storage` and the
    /// kubelet's file system (nodefs).
    EmptyDir,
    /// An `emptyDir` with `medium: Memory` (`spark.kubernetes.local.dirs.tmpfs=true`): a tmpfs,
    /// counted against the pod's memory, not its disk.
    Memory,
    /// A `hostPath` volume: on whatever file system holds the path, counted against no pod.
    HostPath { path: String },
    /// A PersistentVolumeClaim (Spark's `claimName=OnDemand`): a file system of its own.
    Claim { claim: String },
}

impl DirBacking {
    /// Whether its bytes count against the pod's `ephemeral-storage` limit.
    pub fn counts_against_pod_limit(&self) -> bool {
        matches!(self, DirBacking::EmptyDir)
    }
}

/// Where a local dir's bytes come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasuredBy {
    /// The agent's own walk of the directory (allocated blocks of its files).
    #[default]
    Walk,
    /// The kubelet's accounting (`/stats/summary`: the volume's `usedBytes`, which the kubelet
    /// takes from `du` for an `emptyDir` and from the CSI driver for a claim), as of when the
    /// kubelet last measured it ([`StorageDir::measured_at`]).
    Kubelet,
}

/// One local dir of a Spark pod, measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StorageDir {
    /// The pod's volume name (`spark-local-dir-1`).
    pub volume: String,
    pub backing: DirBacking,
    /// Host path of the directory measured.
    pub path: String,
    /// The file system it is on, by device number ([`LocalStorage::filesystems`]); `None` for
    /// a memory-backed dir.
    pub device: Option<u64>,
    /// Bytes allocated below it now (`st_blocks`, as `du` and the kubelet count them).
    pub bytes: u64,
    /// Files below it.
    pub files: u64,
    /// Bytes per second it grew over the window; `None` until two measurements at least
    /// [`MIN_GROWTH_SPAN`] seconds apart exist.
    pub growth_bytes_per_second: Option<f64>,
    /// Seconds the growth was measured over.
    pub growth_span_seconds: f64,
    /// The walk stopped at its bound: `bytes` is a lower bound.
    pub truncated: bool,
    /// Who measured `bytes` and `files`.
    pub measured_by: MeasuredBy,
    /// When, unix seconds: the walk's time, or the kubelet's (its volume figures are refreshed
    /// every `volumeStatsAggPeriod`, a minute by default, so they can be that much older).
    pub measured_at: i64,
}

/// The keys [`FileSystemUse::device`] takes for file systems known only from the kubelet's
/// figures start here (no device number is this large: Linux's are 32 bits).
pub const KUBELET_ONLY_DEVICES: u64 = 1 << 63;

/// Growth is not reported over less than this many seconds of measurements.
pub const MIN_GROWTH_SPAN: f64 = 30.0;

/// A Spark pod's local dirs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PodStorage {
    pub pod_uid: String,
    pub dirs: Vec<StorageDir>,
    /// The kubelet's count of the pod's ephemeral storage (`/stats/summary`'s
    /// `ephemeral-storage.usedBytes`: its containers' writable layers and logs and its
    /// disk-backed `emptyDir`s), which is what the kubelet holds against the pod's
    /// `ephemeral-storage` limit; `None` without the kubelet's accounting.
    pub kubelet_ephemeral: Option<KubeletCount>,
}

/// Bytes the kubelet counted, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct KubeletCount {
    pub bytes: u64,
    /// Unix seconds.
    pub at: i64,
}

/// Whether the kubelet's own accounting (`/stats/summary` on its port 10250) was read for
/// this measurement.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum KubeletStats {
    /// Not configured (`kubelet_stats_url` unset): every local dir was walked.
    #[default]
    Off,
    /// Read: the volumes the kubelet reports (emptyDirs, claims whose CSI driver reports
    /// usage) are its figures, the others (hostPath) walked.
    Read { url: String },
    /// Configured but not read (why): every local dir was walked.
    Unreadable { url: String, reason: String },
}

/// A file system that holds local dirs, as `statvfs(3)` tells it (or, for a claim's volume
/// the agent cannot see, the kubelet's figures for it).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FileSystemUse {
    /// Device number (`st_dev`); for a claim's volume known only from the kubelet's figures, a
    /// key of its own at or above [`KUBELET_ONLY_DEVICES`].
    pub device: u64,
    /// A host path on it (the first local dir measured there, or the kubelet's directory).
    pub path: String,
    pub capacity_bytes: u64,
    /// Bytes available to unprivileged users (`f_bavail`), as the kubelet's eviction manager
    /// counts `available`.
    pub available_bytes: u64,
    /// It is the kubelet's root directory's file system (the eviction manager's `nodefs`).
    pub nodefs: bool,
}

/// A local dir the agent could not measure: a volume mounted after the agent started is not
/// seen through its read-only, non-propagating mount of the kubelet's directory, and its
/// mount point reads as an empty directory of the kubelet's disk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnseenDir {
    pub pod_uid: String,
    pub volume: String,
    pub backing: DirBacking,
    /// Host path where it would be.
    pub path: String,
    pub reason: String,
}

/// Where the container runtime keeps its images (the kubelet's imagefs), against the kubelet's
/// own file system: whether `imagefs.available` thresholds apply to the file system Spark's
/// emptyDirs are on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "imagefs", rename_all = "snake_case")]
pub enum ImageFs {
    /// On the kubelet's file system (the usual node): its thresholds apply there too.
    Shared { path: String },
    /// On a file system of its own: its thresholds concern the containers' writable layers.
    Dedicated { path: String },
    /// Not known (why): taken as shared, whose threshold comes first.
    Unknown { reason: String },
}

impl Default for ImageFs {
    fn default() -> Self {
        ImageFs::Unknown {
            reason: "not looked at".into(),
        }
    }
}

impl ImageFs {
    /// Whether its thresholds apply to the kubelet's file system (assumed when unknown).
    pub fn on_nodefs(&self) -> bool {
        !matches!(self, ImageFs::Dedicated { .. })
    }
}

/// What the daemon remembers of a pod it measured: for `spark-executor-evicted`, which judges
/// pods whose local dirs the kubelet has removed.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Remembered {
    /// Bytes its disk-backed local dirs held at the last measurement.
    pub bytes: u64,
    /// When that was, unix seconds.
    pub measured_at: i64,
    /// When `local-storage-eviction-risk` first reported it, unix seconds, and the worst
    /// severity it reported.
    pub warned_at: Option<i64>,
    pub warned_severity: Option<crate::finding::Severity>,
}

/// Spark's local storage on this node.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct LocalStorage {
    /// When it was measured, unix seconds.
    pub measured_at: i64,
    /// The window growth is measured over, seconds.
    pub window_seconds: f64,
    /// Each running Spark pod with local dirs, by pod UID order.
    pub pods: Vec<PodStorage>,
    /// The file systems the disk-backed dirs are on.
    pub filesystems: Vec<FileSystemUse>,
    /// Whether the runtime's image file system is the kubelet's.
    pub imagefs: ImageFs,
    /// Local dirs of running Spark pods that could not be measured.
    pub unseen: Vec<UnseenDir>,
    /// Pods measured before, by UID (those measured now included).
    pub remembered: BTreeMap<String, Remembered>,
    /// Whether the kubelet's accounting was read.
    pub kubelet_stats: KubeletStats,
}

impl LocalStorage {
    /// The file system with device `device`.
    pub fn filesystem(&self, device: u64) -> Option<&FileSystemUse> {
        self.filesystems.iter().find(|f| f.device == device)
    }
}

/// A TCP socket in the `LISTEN` state in the node's network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Listener {
    pub port: u16,
    /// Listening on IPv6 (`/proc/net/tcp6`).
    pub ipv6: bool,
}
