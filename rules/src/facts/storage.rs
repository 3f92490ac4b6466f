//! When each running Spark pod's local storage, at the growth measured, reaches what the
//! kubelet evicts it at: its own limits (the pod's `ephemeral-storage`, an `emptyDir`'s
//! `sizeLimit`) and the file system it is on (the kubelet's `nodefs.available` threshold, or
//! `imagefs.available` where the images share it; any other file system when it is full).
//! Shared by `local-storage-eviction-risk`, the forecast gauges and the judgement's deadline.

use crate::local_storage::{EvictionThreshold, IMAGEFS_AVAILABLE, NODEFS_AVAILABLE, seconds_until};
use crate::settings::Settings;
use crate::snapshot::{DirBacking, ImageFs, NodeSnapshot, Observed, PodInfo, StorageDir};
use crate::spark::{is_driver, is_executor};

/// What a pod's local storage reaches.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
pub enum Reach {
    /// The sum of its containers' `ephemeral-storage` limits, against the kubelet's own count
    /// of the pod's ephemeral storage where it was read (`by_kubelet`), else the bytes of its
    /// disk-backed `emptyDir` local dirs (the kubelet also counts the containers' writable
    /// layers and logs, which a walk does not see: the forecast is then the latest it can be).
    PodLimit {
        limit_bytes: u64,
        used_bytes: u64,
        by_kubelet: bool,
    },
    /// An `emptyDir` local dir's `sizeLimit`.
    EmptyDirLimit {
        volume: String,
        limit_bytes: u64,
        used_bytes: u64,
    },
    /// The kubelet's file system falls below an eviction threshold (`DiskPressure`): its
    /// `nodefs.available`, or `imagefs.available` where the image file system shares it.
    EvictionThreshold {
        path: String,
        threshold: EvictionThreshold,
        threshold_bytes: u64,
        available_bytes: u64,
        capacity_bytes: u64,
        /// Where the runtime's images are, when that decides the threshold.
        #[serde(flatten)]
        imagefs: ImageFs,
    },
    /// Another file system (a hostPath's, a claim's) fills up: the kubelet does not evict for
    /// it, the executors fail to write ("No space left on device").
    FileSystemFull {
        path: String,
        available_bytes: u64,
        capacity_bytes: u64,
    },
}

/// One of a pod's forecasts: what it reaches, at what growth, in how long.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Forecast {
    pub reach: Reach,
    /// Bytes per second toward it: the pod's own (its limits), or every local dir's on the
    /// file system (the file system's).
    pub growth_bytes_per_second: f64,
    /// Seconds from the snapshot's time.
    pub seconds: f64,
}

/// A Spark pod whose local storage grows, and when it reaches each of its limits.
#[derive(Debug, Clone)]
pub struct StorageRisk<'a> {
    pub pod: &'a PodInfo,
    /// Its measured local dirs (memory-backed ones included, for the evidence).
    pub dirs: Vec<&'a StorageDir>,
    /// Every forecast, nearest first.
    pub forecasts: Vec<Forecast>,
    /// Other applications whose local dirs grow on the file systems of the nearest forecast.
    pub others_growing: Vec<String>,
    /// A threshold the kubelet's configuration states but nodemedic cannot read (why).
    pub threshold_unread: Option<String>,
    /// The pod's usage against its limit is the kubelet's own count.
    pub kubelet_ephemeral: bool,
}

impl StorageRisk<'_> {
    /// The nearest forecast.
    pub fn nearest(&self) -> Option<&Forecast> {
        self.forecasts.first()
    }
}

fn growth(d: &StorageDir) -> f64 {
    d.growth_bytes_per_second
        .filter(|g| g.is_finite() && *g > 0.0)
        .unwrap_or(0.0)
}

/// The forecasts of every running Spark pod whose local storage grows, nearest first.
pub fn storage_risks<'a>(snap: &'a NodeSnapshot, _settings: &Settings) -> Vec<StorageRisk<'a>> {
    crate::facts::count("storage_risks");
    let Observed::Ok(storage) = &snap.host.local_storage else {
        return vec![];
    };
    // Seconds from what was measured at `at` to the snapshot: a forecast counts from its data.
    let since = |at: i64| (snap.taken_at - at).max(0) as f64;
    let eviction = snap.host.kubelet.ok().map(|k| k.eviction.clone()).unwrap_or_default();
    // Every disk-backed dir's growth on each file system, and whose it is.
    let on_device = |device: u64| {
        storage.pods.iter().flat_map(move |p| {
            p.dirs
                .iter()
                .filter(move |d| d.device == Some(device) && d.backing != DirBacking::Memory)
                .map(move |d| (p.pod_uid.as_str(), growth(d)))
        })
    };
    let mut risks = Vec::new();
    for ps in &storage.pods {
        let Some(pod) = snap.pods.bound.iter().find(|p| p.uid == ps.pod_uid) else {
            continue;
        };
        if pod.is_terminal() || !(is_executor(pod) || is_driver(pod)) {
            continue;
        }
        let disk: Vec<&StorageDir> = ps.dirs.iter().filter(|d| d.backing != DirBacking::Memory).collect();
        if !disk.iter().any(|d| growth(d) > 0.0) {
            continue;
        }
        let mut forecasts = Vec::new();
        let at = |left: i128, rate: f64, measured_at: i64| {
            seconds_until(left, rate).map(|s| (s - since(measured_at)).max(0.0))
        };
        // The pod's own limit, against its emptyDirs.
        let limits: Vec<u64> = pod
            .containers
            .iter()
            .filter(|c| c.kind == Some(crate::snapshot::ContainerKind::Regular))
            .filter_map(|c| c.ephemeral_storage_limit_bytes)
            .collect();
        let counted: Vec<&&StorageDir> = disk.iter().filter(|d| d.backing.counts_against_pod_limit()).collect();
        if !limits.is_empty() && !counted.is_empty() {
            let limit: u64 = limits.iter().sum();
            let oldest = counted
                .iter()
                .map(|d| d.measured_at)
                .min()
                .unwrap_or(storage.measured_at);
            let (used, measured_at) = match ps.kubelet_ephemeral {
                Some(k) => (k.bytes, k.at),
                None => (counted.iter().map(|d| d.bytes).sum(), oldest),
            };
            let rate: f64 = counted.iter().map(|d| growth(d)).sum();
            if let Some(seconds) = at(i128::from(limit) - i128::from(used), rate, measured_at) {
                forecasts.push(Forecast {
                    reach: Reach::PodLimit {
                        limit_bytes: limit,
                        used_bytes: used,
                        by_kubelet: ps.kubelet_ephemeral.is_some(),
                    },
                    growth_bytes_per_second: rate,
                    seconds,
                });
            }
        }
        // Each emptyDir's own sizeLimit.
        for d in &counted {
            let limit = pod
                .local_dir_volumes
                .iter()
                .find(|v| v.name == d.volume)
                .and_then(|v| v.size_limit_bytes);
            let Some(limit) = limit else { continue };
            if let Some(seconds) = at(i128::from(limit) - i128::from(d.bytes), growth(d), d.measured_at) {
                forecasts.push(Forecast {
                    reach: Reach::EmptyDirLimit {
                        volume: d.volume.clone(),
                        limit_bytes: limit,
                        used_bytes: d.bytes,
                    },
                    growth_bytes_per_second: growth(d),
                    seconds,
                });
            }
        }
        // The file systems its dirs are on, at every dir's growth there.
        let mut threshold_unread = None;
        let mut devices: Vec<u64> = disk.iter().filter_map(|d| d.device).collect();
        devices.sort_unstable();
        devices.dedup();
        for device in devices {
            let Some(fs) = storage.filesystem(device) else { continue };
            let rate: f64 = on_device(device).map(|(_, g)| g).sum();
            let full = || Reach::FileSystemFull {
                path: fs.path.clone(),
                available_bytes: fs.available_bytes,
                capacity_bytes: fs.capacity_bytes,
            };
            let (reach, threshold_bytes) = if fs.nodefs {
                // nodefs.available, and imagefs.available where the images share the disk;
                // the larger is crossed first.
                let mut signals = vec![NODEFS_AVAILABLE];
                if storage.imagefs.on_nodefs() {
                    signals.push(IMAGEFS_AVAILABLE);
                }
                let mut thresholds = Vec::new();
                for signal in signals {
                    match eviction.thresholds(signal, fs.capacity_bytes) {
                        Ok(t) => thresholds.extend(t),
                        Err(e) => threshold_unread = Some(e.to_string()),
                    }
                }
                thresholds.sort_by_key(|t| std::cmp::Reverse(t.value.bytes(fs.capacity_bytes)));
                match thresholds.into_iter().next() {
                    Some(t) => {
                        let bytes = t.value.bytes(fs.capacity_bytes);
                        (
                            Reach::EvictionThreshold {
                                path: fs.path.clone(),
                                threshold: t,
                                threshold_bytes: bytes,
                                available_bytes: fs.available_bytes,
                                capacity_bytes: fs.capacity_bytes,
                                imagefs: storage.imagefs.clone(),
                            },
                            bytes,
                        )
                    }
                    // A threshold that cannot be read: no forecast against a guess.
                    None if threshold_unread.is_some() => continue,
                    // No threshold for the kubelet's file system: it fills.
                    None => (full(), 0),
                }
            } else {
                (full(), 0)
            };
            let left = i128::from(fs.available_bytes) - i128::from(threshold_bytes);
            if let Some(seconds) = at(left, rate, storage.measured_at) {
                forecasts.push(Forecast {
                    reach,
                    growth_bytes_per_second: rate,
                    seconds,
                });
            }
        }
        forecasts.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        let others_growing = match forecasts.first().map(|f| &f.reach) {
            Some(Reach::EvictionThreshold { .. } | Reach::FileSystemFull { .. }) => {
                let devices: Vec<u64> = disk.iter().filter_map(|d| d.device).collect();
                let mut apps: Vec<String> = devices
                    .iter()
                    .flat_map(|dev| on_device(*dev))
                    .filter(|(uid, g)| *uid != pod.uid && *g > 0.0)
                    .filter_map(|(uid, _)| snap.pods.bound.iter().find(|p| p.uid == uid))
                    .map(|p| p.spark_app().unwrap_or(&p.name).to_string())
                    .filter(|a| Some(a.as_str()) != pod.spark_app())
                    .collect();
                apps.sort();
                apps.dedup();
                apps
            }
            _ => vec![],
        };
        risks.push(StorageRisk {
            pod,
            dirs: ps.dirs.iter().collect(),
            forecasts,
            others_growing,
            threshold_unread,
            kubelet_ephemeral: ps.kubelet_ephemeral.is_some(),
        });
    }
    risks.sort_by(|a, b| {
        let s = |r: &StorageRisk| r.nearest().map_or(f64::INFINITY, |f| f.seconds);
        s(a).total_cmp(&s(b))
    });
    risks
}

/// Seconds until a forecast passes the warning or the critical time (the verdict changes by
/// the clock then, though no measurement came): `local-storage-eviction-risk` judges again.
pub fn storage_turn(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    storage_risks(snap, settings)
        .iter()
        .filter_map(StorageRisk::nearest)
        .flat_map(|f| {
            [
                f.seconds - settings.local_storage_warning_seconds,
                f.seconds - settings.local_storage_critical_seconds,
            ]
        })
        .filter(|left| *left > 0.0)
        .min_by(f64::total_cmp)
}
