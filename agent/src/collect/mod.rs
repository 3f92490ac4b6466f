//! Collectors: read the host (and a pod list) into a [`NodeSnapshot`].
//!
//! Each collector is a thin `read_*` doing I/O under [`HostPaths`] with pure `parse_*`
//! functions beside it. A collector never fails the scan: what it cannot read becomes
//! `missing` or `error: <reason>` in the snapshot, and the other sources still count. Only
//! inputs the user named explicitly (a `--pods` file) stop the scan when unusable.

pub mod cgroups;
pub mod checkpoint;
pub mod event_object;
pub mod kubelet;
pub mod kubelet_stats;
pub mod kubelet_units;
pub mod listeners;
pub mod localdirs;
pub mod localstore;
pub mod managers;
pub mod mountinfo;
pub mod node_object;
pub mod pod_object;
pub mod podresources;
pub mod pods;
pub mod procfs;
pub mod read;
pub mod sparkconf;
pub mod sysfs;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nodemedic_rules::snapshot::{ApiSnapshot, HostSnapshot, NodeSnapshot, Observed, PodInfo, PodSource, PodsSnapshot};
use nodemedic_rules::snapshot::{Liveness, Note};

use crate::host::HostPaths;

/// How a scan reads the host: the same value from the command line, the daemon's
/// configuration or a repair, passed to every collector as it is.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// The node's name; inferred when `None` (see [`infer_node_name`]). A pod list of a known
    /// node ([`PodInput::Known`]) names the node instead.
    pub node: Option<String>,
    /// hostPath roots (host paths) where Spark local dirs live, besides emptyDir volumes.
    pub local_dir_roots: Vec<String>,
    /// Whether the local dirs are measured this read.
    pub local_dirs: LocalDirs,
    /// DRA drivers' checkpoints to read (the configuration's `dra_driver_checkpoints`).
    pub driver_checkpoints: Vec<managers::DriverCheckpoint>,
}

/// Whether a read measures the Spark local dirs (a walk of every pod's volumes and of the
/// hostPath roots: the slowest collector).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LocalDirs {
    /// Walk and measure them.
    #[default]
    Measure,
    /// Leave them out: their source is `not applicable: not measured this cycle` (the daemon
    /// walks them less often than the rest; a CPU state repair does not judge them).
    Skip,
}

/// The pods a collection judges liveness with.
#[derive(Debug, Clone, Default)]
pub enum PodInput {
    /// No pod list: liveness from the cgroup tree.
    #[default]
    None,
    /// A `kubectl get pods -o json` file (read and timed as the `pods` collector); every pod
    /// of it is kept for driver lookups offline ([`Collection::cluster_pods`]).
    File(PathBuf),
    /// The pods of `node` already known (the daemon's watch, an API list, an earlier
    /// snapshot's list), from `source`. `node` names the node over [`HostOptions::node`].
    Known {
        node: String,
        pods: Vec<PodInfo>,
        source: PodSource,
    },
}

impl PodInput {
    /// The node a known pod list names.
    pub fn node(&self) -> Option<&str> {
        match self {
            PodInput::Known { node, .. } => Some(node),
            PodInput::None | PodInput::File(_) => None,
        }
    }
}

/// What was read, and how each collector went: what every command, the daemon and every
/// repair judge ([`crate::scan::snapshot`] completes it with the API's part).
#[derive(Debug)]
pub struct Scanned {
    pub snapshot: NodeSnapshot,
    /// One record per collector: name, duration, outcome (the report's `sources` and the
    /// collector metrics are made from these).
    pub records: Records,
}

/// A pod of the pods file: one bound to this node, by its position in the snapshot's pods
/// (which hold it: a copy for the directory was 3.6% of a 1,000-pod scan's instructions), or
/// one bound elsewhere.
#[derive(Debug)]
pub enum FilePod {
    Bound(usize),
    /// Shared as the directory's answers share it.
    Elsewhere(std::sync::Arc<PodInfo>),
}

/// A collection: the scan so far, and what the scan's later steps read besides it.
#[derive(Debug)]
pub struct Collection {
    pub scanned: Scanned,
    /// Every pod of the pods file, on any node, in the file's order (for driver lookups
    /// offline).
    pub cluster_pods: Vec<FilePod>,
    /// The kubelet's directory on this filesystem, where its PodResources socket is (`None`:
    /// the host was not read).
    pub kubelet_dir: Option<PathBuf>,
}

/// Inputs that make a scan impossible.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("{0}: host root does not exist or is not a directory")]
    HostRoot(String),
    #[error("{path}: {reason}")]
    PodsFile { path: String, reason: String },
}

/// How one collector went: the one record that the report's `sources`, the
/// `nodemedic_collector_success` and `nodemedic_collector_duration_seconds` metrics and the
/// benchmarks are all made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The source's name (`checkpoint`, `kubelet_config`, `cpus`, `cgroups`, `procfs`,
    /// `podresources`, `pods`, `local_dirs`).
    pub name: &'static str,
    pub duration: Duration,
    /// The report's word: `ok`, `missing`, `not applicable: ..`, `error: ..`; for `pods`,
    /// where liveness came from (`api`, `file`, `cgroups`).
    pub status: String,
    /// The collector failed (an `error: ..` outcome).
    pub failed: bool,
}

/// The records of one collection, in the order the report lists its sources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Records(Vec<Record>);

/// The report's order of sources.
pub const SOURCES: [&str; 12] = [
    "checkpoint",
    "manager_files",
    "kubelet_config",
    "cpus",
    "cgroups",
    "procfs",
    "podresources",
    "pods",
    "local_dirs",
    "local_storage",
    "spark_conf",
    "listeners",
];

impl Records {
    /// Runs `collector`, timing it, and records its outcome as `status` says.
    pub fn run<T>(
        &mut self,
        name: &'static str,
        status: impl Fn(&T) -> (String, bool),
        collector: impl FnOnce() -> T,
    ) -> T {
        let start = Instant::now();
        let value = collector();
        let (status, failed) = status(&value);
        self.set(Record {
            name,
            duration: start.elapsed(),
            status,
            failed,
        });
        value
    }

    /// Runs a collector that yields an [`Observed`] value.
    pub fn observe<T>(&mut self, name: &'static str, collector: impl FnOnce() -> Observed<T>) -> Observed<T> {
        self.run(
            name,
            |o: &Observed<T>| (o.status(), matches!(o, Observed::Error { .. })),
            collector,
        )
    }

    /// Adds or replaces the record named `record.name`, keeping the report's order.
    pub fn set(&mut self, record: Record) {
        self.0.retain(|r| r.name != record.name);
        self.0.push(record);
        self.0
            .sort_by_key(|r| SOURCES.iter().position(|s| *s == r.name).unwrap_or(SOURCES.len()));
    }

    /// The record of `name`.
    pub fn get(&self, name: &str) -> Option<&Record> {
        self.0.iter().find(|r| r.name == name)
    }

    /// Every record, in the report's order.
    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        self.0.iter()
    }
}

/// Reads everything and returns the snapshot.
///
/// A pods file is decoded on a second thread while this one reads the host: decoding is
/// user-space work (a 250-pod `kubectl get pods -o json` is 2.4 MB), the host reads mostly
/// the kernel's, and a node has more than one CPU. Without a second thread (it cannot be
/// started) the file is decoded after the host is read.
pub fn collect(host: &HostPaths, opts: &HostOptions, pods: PodInput) -> Result<Collection, CollectError> {
    let PodInput::File(path) = pods else {
        return assemble(host, read_host(host, opts)?, opts, pods);
    };
    let (readings, decoded) = std::thread::scope(|scope| {
        let decoding = std::thread::Builder::new()
            .name("pods-file".into())
            .spawn_scoped(scope, || decode_pods_file(&path));
        let readings = read_host(host, opts);
        let decoded = match decoding {
            Ok(thread) => thread.join().unwrap_or_else(|_| {
                Err(CollectError::PodsFile {
                    path: path.display().to_string(),
                    reason: "its decoding ended in a panic".into(),
                })
            }),
            Err(_) => decode_pods_file(&path),
        };
        (readings, decoded)
    });
    // A bad host root is the first thing to say, as when the two are read one after the other.
    let mut readings = readings?;
    let (list, record) = decoded?;
    readings.records.set(record);
    let read = ReadPods {
        list: Some((list, PodSource::File)),
        keep_all: true,
        node: None,
    };
    assemble_read(host, readings, opts, read)
}

/// The host's part of a snapshot as the daemon keeps it between scans, with what refreshing
/// it takes: the daemon refreshes parts of it when inotify says they changed
/// ([`KeptHost::reread_checkpoint`], [`KeptHost::reread_pod`]).
#[derive(Debug, Clone)]
pub struct KeptHost {
    /// What was read (its `kubelet_view` is filled by the scan, which asks the kubelet).
    pub snapshot: HostSnapshot,
    /// The kubelet's `--hostname-override`, when it has one.
    hostname_override: Option<String>,
    /// The kubelet's directory (where the checkpoint is), on this filesystem.
    pub kubelet_dir: PathBuf,
    /// When the checkpoint was read (its age moves on from there).
    checkpoint_read: SystemTime,
    /// The DRA driver checkpoints to read.
    driver_checkpoints: Vec<managers::DriverCheckpoint>,
    /// Where the pod cgroups are, when found.
    pub layout: Option<cgroups::Layout>,
    /// Notes of the last full read.
    notes: Vec<String>,
    /// Notes of the refreshes since (replaced by each refresh).
    refresh_notes: Vec<String>,
    /// The host collectors' records.
    pub records: Records,
    pinned: cgroups::Pinned,
}

/// What the `local_storage` source says outside the daemon.
pub const ONE_SHOT_STORAGE: &str =
    "a one-shot scan measures once: growth is measured by the daemon over local_storage_window_seconds";

/// Reads every host source (not the pods).
pub fn read_host(host: &HostPaths, opts: &HostOptions) -> Result<KeptHost, CollectError> {
    if !read::is_dir(host.root()) {
        return Err(CollectError::HostRoot(host.root().display().to_string()));
    }
    let mut records = Records::default();
    let now = SystemTime::now();
    let mut notes = Vec::new();
    let kubelet = records.run(
        "kubelet_config",
        |k: &kubelet::KubeletDiscovery| (k.config.status(), matches!(k.config, Observed::Error { .. })),
        || kubelet::read_kubelet(host),
    );
    notes.extend(kubelet.notes.iter().cloned());
    let kubelet_dir = host.kubelet_dir(kubelet.root_dir.as_deref());
    let checkpoint = records.observe("checkpoint", || checkpoint::read_checkpoint(host, &kubelet_dir, now));
    notes.extend(checkpoint::leftover_notes(host, &kubelet_dir));
    let managers = records.run("manager_files", managers::status, || {
        managers::read_managers(host, &kubelet_dir, &opts.driver_checkpoints, now)
    });
    let cpus = records.observe("cpus", || sysfs::read_cpus(host, &mut notes));
    let pinned = pinned_by(&checkpoint);
    let located = cgroups::locate(host, kubelet.config.ok());
    let cgroups = records.observe("cgroups", || cgroups::read_cgroups(host, &located, &pinned, &mut notes));
    let layout = located.ok();
    let local_dirs = records.observe("local_dirs", || match opts.local_dirs {
        LocalDirs::Skip => Observed::NotApplicable {
            reason: "not measured this cycle".into(),
        },
        LocalDirs::Measure => localdirs::read_local_dirs(host, &kubelet_dir, &opts.local_dir_roots, &mut notes),
    });
    let listeners = records.observe("listeners", || listeners::read_listeners(host));
    // Growth needs measurements over a window: the daemon's ([`localstore::LocalStore`]).
    let local_storage = records.observe("local_storage", || Observed::NotApplicable {
        reason: ONE_SHOT_STORAGE.into(),
    });
    let procfs = records.observe("procfs", || {
        if read::is_dir(&host.proc()) {
            Observed::Ok(())
        } else {
            Observed::Missing {
                path: host.display(&host.proc()),
            }
        }
    });
    Ok(KeptHost {
        snapshot: HostSnapshot {
            checkpoint,
            managers,
            kubelet: kubelet.config,
            cpus,
            cgroups,
            procfs,
            kubelet_view: Observed::NotApplicable {
                reason: "not read".into(),
            },
            local_dirs,
            local_storage,
            listeners,
        },
        hostname_override: kubelet.hostname_override,
        kubelet_dir,
        checkpoint_read: now,
        driver_checkpoints: opts.driver_checkpoints.clone(),
        layout,
        notes,
        refresh_notes: Vec::new(),
        records,
        pinned,
    })
}

impl KeptHost {
    /// Forgets the notes of earlier refreshes (before a new round of them).
    pub fn clear_refresh_notes(&mut self) {
        self.refresh_notes.clear();
    }

    /// Reads the checkpoint again, and the cgroups of the pods whose pinning it changed (a
    /// pinned container's processes get their affinity read).
    pub fn reread_checkpoint(&mut self, host: &HostPaths) {
        let now = SystemTime::now();
        self.snapshot.checkpoint = self.records.observe("checkpoint", || {
            checkpoint::read_checkpoint(host, &self.kubelet_dir, now)
        });
        self.checkpoint_read = now;
        self.snapshot.managers = self.records.run("manager_files", managers::status, || {
            managers::read_managers(host, &self.kubelet_dir, &self.driver_checkpoints, now)
        });
        let pinned = pinned_by(&self.snapshot.checkpoint);
        let changed: Vec<PathBuf> = match &self.snapshot.cgroups {
            Observed::Ok(tree) => tree
                .pods
                .iter()
                .filter(|p| {
                    p.containers
                        .iter()
                        .any(|c| pinned.wants(&p.uid, &c.id) != self.pinned.wants(&p.uid, &c.id))
                })
                .map(|p| host.host(&p.path))
                .collect(),
            _ => vec![],
        };
        self.pinned = pinned;
        for dir in changed {
            self.reread_pod(host, &dir);
        }
    }

    /// Walks the local dirs again (under the kubelet's pods and `roots`).
    pub fn reread_local_dirs(&mut self, host: &HostPaths, roots: &[String]) {
        let mut notes = Vec::new();
        self.snapshot.local_dirs = self.records.observe("local_dirs", || {
            localdirs::read_local_dirs(host, &self.kubelet_dir, roots, &mut notes)
        });
        self.refresh_notes.extend(notes);
    }

    /// Reads the pod cgroup at `dir` again (a directory below the QoS level or `kubepods`):
    /// replaced when it is there, dropped when it is gone.
    pub fn reread_pod(&mut self, host: &HostPaths, dir: &Path) {
        let (Observed::Ok(tree), Some(layout)) = (&mut self.snapshot.cgroups, &self.layout) else {
            return;
        };
        let Some((uid, qos)) = layout.pod_of(dir) else { return };
        let mut notes = Vec::new();
        let start = Instant::now();
        let read = cgroups::read_pod(host, layout, &self.pinned, &uid, qos, dir, &mut notes);
        tree.pods.retain(|p| p.uid != uid);
        if let Some(pod) = read {
            let at = tree.pods.partition_point(|p| p.uid < pod.uid);
            tree.pods.insert(at, pod);
        }
        self.refresh_notes.extend(notes);
        if let Some(mut record) = self.records.get("cgroups").cloned() {
            record.duration = start.elapsed();
            self.records.set(record);
        }
    }
}

/// The snapshot of `readings` with `pods`, at this moment (the checkpoint's age moved on since
/// it was read).
pub fn assemble(
    host: &HostPaths,
    mut kept: KeptHost,
    opts: &HostOptions,
    pods: PodInput,
) -> Result<Collection, CollectError> {
    let read = read_pods(pods, &mut kept.records)?;
    assemble_read(host, kept, opts, read)
}

/// The pods a collection judges with, as read: the list and where it came from (`None`:
/// none), whether every pod of it is kept for driver lookups (a pods file's), and the node a
/// known list names.
struct ReadPods {
    list: Option<(Vec<PodInfo>, PodSource)>,
    keep_all: bool,
    node: Option<String>,
}

/// [`assemble`] with the pods read.
fn assemble_read(
    host: &HostPaths,
    kept: KeptHost,
    opts: &HostOptions,
    read: ReadPods,
) -> Result<Collection, CollectError> {
    let KeptHost {
        snapshot: mut host_snapshot,
        hostname_override,
        kubelet_dir,
        checkpoint_read,
        notes,
        refresh_notes,
        mut records,
        ..
    } = kept;
    let now = SystemTime::now();
    let mut notes: Vec<Note> = notes.into_iter().chain(refresh_notes).map(Note::Other).collect();
    if let (Observed::Ok(file), Ok(since)) = (&mut host_snapshot.checkpoint, now.duration_since(checkpoint_read)) {
        file.age_seconds = file.age_seconds.map(|a| a + since.as_secs_f64());
    }
    if let Ok(since) = now.duration_since(checkpoint_read) {
        host_snapshot.managers.add_age(since.as_secs_f64());
    }

    let ReadPods {
        list: pods,
        keep_all,
        node: given_node,
    } = read;

    let named = given_node
        .or_else(|| opts.node.clone())
        .or_else(|| hostname_override.clone());
    let node = named.clone().unwrap_or_else(|| {
        infer_node_name(
            host,
            pods.as_ref().map(|(p, _)| p.as_slice()),
            host_snapshot.cgroups.ok(),
        )
    });
    // Offline, the whole pods file is the directory drivers are looked up in: the pods of
    // other nodes are moved there, and this node's are named by their place in the snapshot.
    let mut cluster_pods = Vec::new();
    let (pod_source, pods) = match pods {
        Some((all, file_source)) => {
            let (mut here, mut elsewhere_count) = (Vec::new(), 0);
            // In file order, which the directory keeps for its listings.
            for p in all {
                if p.node_name.as_deref() == Some(node.as_str()) {
                    if keep_all {
                        cluster_pods.push(FilePod::Bound(here.len()));
                    }
                    here.push(p);
                } else {
                    elsewhere_count += 1;
                    if keep_all {
                        cluster_pods.push(FilePod::Elsewhere(std::sync::Arc::new(p)));
                    }
                }
            }
            if here.is_empty() && elsewhere_count > 0 && named.is_none() {
                // A guessed name that matches nothing would make every entry look stale.
                notes.push(Note::GuessedNodeUnmatched {
                    pods: elsewhere_count,
                    node: node.clone(),
                    liveness: Liveness::Cgroups,
                });
                (PodSource::Cgroups, Vec::new())
            } else {
                if here.is_empty() && elsewhere_count > 0 {
                    notes.push(Note::Other(format!(
                        "the pods file has {elsewhere_count} pods but none is bound to node {node}"
                    )));
                }
                (file_source, here)
            }
        }
        None => (PodSource::Cgroups, Vec::new()),
    };

    if pod_source == PodSource::Cgroups && !opts.local_dir_roots.is_empty() && opts.local_dirs == LocalDirs::Measure {
        notes.push(Note::Other(format!(
            "local-dir roots {} were measured but not judged: who uses a hostPath root can only be read from a pod \
             list (the API, or --pods)",
            opts.local_dir_roots.join(", ")
        )));
    }
    let pods_duration = records.get("pods").map_or(Duration::ZERO, |r| r.duration);
    records.set(Record {
        name: "pods",
        duration: pods_duration,
        status: pod_source.as_str().to_string(),
        failed: false,
    });

    // The Spark configuration of the drivers on this node (their spark.properties), and the
    // configuration volumes of those that wait to start.
    let drivers = records.run("spark_conf", sparkconf::DriverConfs::status, || {
        sparkconf::read_drivers(host, &kubelet_dir, &pods, &node)
    });

    let taken_at = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    Ok(Collection {
        scanned: Scanned {
            snapshot: NodeSnapshot {
                node,
                taken_at,
                host: host_snapshot,
                pods: PodsSnapshot {
                    source: pod_source,
                    list: Observed::NotApplicable {
                        reason: "no pod list given".into(),
                    },
                    bound: pods,
                    spark_confs: drivers.confs,
                    spark_conf_reads: drivers.reads,
                    conf_mounts: drivers.mounts,
                },
                api: ApiSnapshot {
                    server: Observed::NotApplicable {
                        reason: "not probed".into(),
                    },
                    kubelet_version: Observed::NotApplicable {
                        reason: "no Node object read".into(),
                    },
                    lookups: Default::default(),
                },
                notes,
            },
            records,
        },
        cluster_pods,
        kubelet_dir: Some(kubelet_dir),
    })
}

/// The pods of `pods` and where they come from: the file's (read and timed as the `pods`
/// collector, source [`PodSource::File`]) or the known ones.
fn read_pods(pods: PodInput, records: &mut Records) -> Result<ReadPods, CollectError> {
    let keep_all = matches!(pods, PodInput::File(_));
    let node = pods.node().map(str::to_string);
    let list = match pods {
        PodInput::None => None,
        PodInput::Known { pods, source, .. } => Some((pods, source)),
        PodInput::File(path) => {
            let (list, record) = decode_pods_file(&path)?;
            records.set(record);
            Some((list, PodSource::File))
        }
    };
    Ok(ReadPods { list, keep_all, node })
}

/// The pods of a pods file, and the `pods` collector's record of reading them.
fn decode_pods_file(path: &Path) -> Result<(Vec<PodInfo>, Record), CollectError> {
    let shown = path.display().to_string();
    let err = |reason: String| CollectError::PodsFile {
        path: shown.clone(),
        reason,
    };
    let t = Instant::now();
    let list = pods::read_pods_file(path, &shown)
        .map_err(|e| err(e.to_string().trim_start_matches(&format!("{shown}: ")).to_string()))?
        .ok_or_else(|| err("no such file".into()))?;
    let record = Record {
        name: "pods",
        duration: t.elapsed(),
        status: String::new(),
        failed: false,
    };
    Ok((list, record))
}

/// A snapshot of the pods alone, no host file read: for a pod repair run without a host
/// root. The node must be named (by `opts` or by `pods`).
pub fn pods_only(opts: &HostOptions, pods: PodInput) -> Result<Collection, CollectError> {
    let mut records = Records::default();
    let ReadPods {
        list: all,
        keep_all,
        node: given_node,
    } = read_pods(pods, &mut records)?;
    let node = given_node
        .or_else(|| opts.node.clone())
        .unwrap_or_else(|| "unknown".into());
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut snapshot = NodeSnapshot::empty(&node, now);
    let mut cluster_pods = Vec::new();
    if let Some((all, source)) = all {
        snapshot.pods.source = source;
        for p in all {
            if p.node_name.as_deref() == Some(node.as_str()) {
                if keep_all {
                    cluster_pods.push(FilePod::Bound(snapshot.pods.bound.len()));
                }
                snapshot.pods.bound.push(p);
            } else if keep_all {
                cluster_pods.push(FilePod::Elsewhere(std::sync::Arc::new(p)));
            }
        }
    }
    records.set(Record {
        name: "pods",
        duration: records.get("pods").map_or(Duration::ZERO, |r| r.duration),
        status: snapshot.pods.source.as_str().to_string(),
        failed: false,
    });
    Ok(Collection {
        scanned: Scanned { snapshot, records },
        cluster_pods,
        kubelet_dir: None,
    })
}

/// The pods and containers the checkpoint pins (whose processes' affinity is worth reading).
fn pinned_by(checkpoint: &Observed<nodemedic_rules::snapshot::CheckpointFile>) -> cgroups::Pinned {
    let mut pinned = cgroups::Pinned::default();
    let Some(Ok(state)) = checkpoint.ok().map(|f| &f.state) else {
        return pinned;
    };
    for a in &state.assignments {
        match &a.key {
            nodemedic_rules::checkpoint::EntryKey::Container { pod_uid, .. } => {
                pinned.pod_uids.insert(pod_uid.clone());
            }
            nodemedic_rules::checkpoint::EntryKey::ContainerId { container_id } => {
                pinned.container_ids.insert(container_id.clone());
            }
        }
    }
    pinned
        .pod_uids
        .extend(state.pod_assignments.iter().map(|(uid, _)| uid.clone()));
    pinned
}

/// The node's name as far as the host alone tells: the kubelet's `--hostname-override`, else
/// `/etc/hostname`.
pub fn host_node_name(host: &HostPaths) -> String {
    kubelet::read_kubelet(host)
        .hostname_override
        .unwrap_or_else(|| infer_node_name(host, None, None))
}

/// The node's name when nobody said it: the node most pods of this host's pod cgroups are
/// bound to in the pod list, else the host's `/etc/hostname`, else `unknown`.
pub fn infer_node_name(
    host: &HostPaths,
    pods: Option<&[PodInfo]>,
    cgroups: Option<&nodemedic_rules::snapshot::CgroupTree>,
) -> String {
    if let (Some(pods), Some(tree)) = (pods, cgroups) {
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for p in pods {
            if let (Some(n), Some(_)) = (p.node_name.as_deref(), tree.pod(&p.uid)) {
                *counts.entry(n).or_default() += 1;
            }
        }
        if let Some((name, _)) = counts.into_iter().max_by_key(|(_, c)| *c) {
            return name.to_string();
        }
    }
    let path = host.host("/etc/hostname");
    match read::read_text(&path, &"/etc/hostname", 4096) {
        Ok(Some(name)) if !name.trim().is_empty() => name.trim().to_string(),
        _ => "unknown".to_string(),
    }
}
