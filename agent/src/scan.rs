//! The one snapshot assembler: every command, the daemon and every repair get their
//! [`NodeSnapshot`] from [`snapshot`], so a repair acts on exactly the truth that `nodemedic
//! scan` reports.
//!
//! ```text
//!  Pods::Api (LIST this node's pods) ───┐
//!  Pods::Given (the daemon's store) ────┤
//!  Pods::File (kubectl get pods -o json) ┼─> collect::collect ─> drivers ─> NodeSnapshot
//!  Pods::Cgroups (no pod list) ─────────┘   (blocking thread;   (PodDirectory)
//!                                            records per collector)
//! ```
//!
//! Where liveness comes from decides where Spark drivers are looked up: the API for `Api`, the
//! caller's (cached) directory for `Given`, the whole file for `File` (a support bundle judged
//! offline), nowhere for `Cgroups`. The same directory reads the pod Events and nodes of
//! `driver-blocked-by-partition` (a pods file has neither, so that rule is silent offline).

use std::path::PathBuf;
use std::time::Duration;

use nodemedic_rules::snapshot::{ApiObservation, DriverLookup, NodeSnapshot, Observed, PodInfo, PodSource};

use crate::collect::{self, CollectError, Records, ScanOptions};
use crate::host::HostPaths;
use crate::kube_api;
use crate::spark::{self, ListDirectory, PartitionInputs, PodDirectory};

/// Where the pods bound to this node come from.
#[derive(Clone)]
pub enum Pods {
    /// Listed from the API server; drivers are looked up there. With `fallback`, a list that
    /// fails becomes a note and liveness comes from the cgroups; without it, an error.
    Api {
        api: Box<kube_api::Connection>,
        node: String,
        fallback: bool,
    },
    /// Already known: the daemon's watch of this node's pods (`source` [`PodSource::Api`]), or
    /// the list an earlier snapshot judged with; drivers are looked up in the directory passed
    /// to [`snapshot`].
    Given {
        node: String,
        pods: Vec<PodInfo>,
        source: PodSource,
    },
    /// A `kubectl get pods -o json` file: this node's pods, and the directory drivers are
    /// looked up in.
    File(PathBuf),
    /// No pod list: liveness from the cgroup tree.
    Cgroups,
}

impl std::fmt::Debug for Pods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pods::Api { node, fallback, .. } => write!(f, "Api({node}, fallback {fallback})"),
            Pods::Given { node, pods, source } => write!(f, "Given({node}, {} pods, {})", pods.len(), source.as_str()),
            Pods::File(p) => write!(f, "File({})", p.display()),
            Pods::Cgroups => write!(f, "Cgroups"),
        }
    }
}

/// What else a scan reads or is told.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The node's name; inferred when `None` (the kubelet's `--hostname-override`, the pods
    /// file's most common node among this host's pod cgroups, `/etc/hostname`).
    pub node: Option<String>,
    /// hostPath roots (host paths) where Spark local dirs live, besides emptyDir volumes.
    pub local_dir_roots: Vec<String>,
    /// DRA drivers' checkpoints to read.
    pub driver_checkpoints: Vec<collect::managers::DriverCheckpoint>,
    /// Skip measuring local dirs (the daemon walks them less often than the rest).
    pub skip_local_dirs: bool,
    /// Run one round of API probes (with `Pods::Api`): the one-shot scan's view of the API.
    pub probe_api: bool,
    /// The API as the daemon's probe task last saw it.
    pub api: Option<ApiObservation>,
    /// Notes the caller adds to the report (why the API was not used, ...).
    pub notes: Vec<String>,
    /// Timeout of all driver lookups together.
    pub lookups_timeout: Option<Duration>,
    /// Read no host file: the snapshot holds the pods and their drivers only (a pod repair
    /// run without a host root).
    pub skip_host: bool,
    /// The host as read before (the daemon's readings, kept up to date by inotify): the
    /// snapshot is assembled from these instead of reading the host again.
    pub readings: Option<std::sync::Arc<collect::HostReadings>>,
    /// Read the host files on the calling thread: a one-shot command, whose runtime does
    /// nothing else meanwhile (no blocking-pool thread to start). The daemon leaves it off, so
    /// that a hung mount never stalls its watch or `/metrics`.
    pub host_reads_inline: bool,
    /// The pods of this node last known (the daemon's store while its watch is down):
    /// (namespace, name) to UIDs, to name the pods the kubelet's PodResources API lists.
    pub last_known_pods: std::collections::BTreeMap<(String, String), Vec<String>>,
}

/// The end of a note that says liveness falls back to the cgroups; rewritten when the
/// kubelet's PodResources list decides instead.
const CGROUPS_FALLBACK: &str = ": liveness from cgroups";

/// Where a one-shot command takes its pods from: the command line, as plain values.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// The node's name; default: see [`Options::node`].
    pub node: Option<String>,
    /// A pods file, instead of the API.
    pub pods_file: Option<PathBuf>,
    /// Never contact the API.
    pub offline: bool,
    pub kubeconfig: Option<PathBuf>,
}

/// How long a one-shot command waits for each API request.
pub const COMMAND_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

impl Source {
    /// The pods this source names, and a note when the API was not used: the file when one is
    /// given, no pods offline, else the API when a configuration loads (this node's name:
    /// `node`, else the kubelet's `--hostname-override` or `/etc/hostname`).
    pub async fn pods(&self, host: &HostPaths) -> (Pods, Option<String>) {
        if let Some(path) = &self.pods_file {
            return (Pods::File(path.clone()), None);
        }
        if self.offline {
            return (Pods::Cgroups, None);
        }
        let node = self.node.clone().unwrap_or_else(|| collect::host_node_name(host));
        api_or_cgroups(self.kubeconfig.as_deref(), &node, COMMAND_REQUEST_TIMEOUT).await
    }
}

/// Why there is no snapshot at all (everything short of this is a note or a source's status).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// The host root or a pods file the user named is unusable.
    #[error(transparent)]
    Collect(#[from] CollectError),
    /// The pod list from the API was required and failed.
    #[error(transparent)]
    Api(#[from] kube_api::Error),
    /// The host scan's thread or the command's runtime failed.
    #[error("host scan task: {0}")]
    Task(String),
}

/// A snapshot and how its collectors went.
#[derive(Debug)]
pub struct Scanned {
    pub snapshot: NodeSnapshot,
    /// One record per collector: name, duration, outcome (the report's `sources` and the
    /// collector metrics are made from these).
    pub records: Records,
}

/// How long a one-shot scan's driver lookups are remembered: longer than the scan.
const ONE_SHOT_MEMORY: Duration = Duration::from_secs(3600);

/// Driver lookups of one scan take at most this long together unless the caller says.
pub const LOOKUPS_TIMEOUT: Duration = Duration::from_secs(30);

/// Builds the snapshot of the node under `host`. `directory` is where `Pods::Given` looks
/// drivers up (the daemon's cache); the other sources bring their own. Host files are read on
/// a blocking thread, so a hung mount never stalls the runtime.
pub async fn snapshot<D: PodDirectory>(
    host: &HostPaths,
    pods: Pods,
    directory: Option<&D>,
    opts: &Options,
) -> Result<Scanned, ScanError> {
    let mut notes = opts.notes.clone();
    let mut scan_opts = ScanOptions {
        node: opts.node.clone(),
        pods_file: None,
        pods: None,
        local_dir_roots: opts.local_dir_roots.clone(),
        skip_local_dirs: opts.skip_local_dirs,
        driver_checkpoints: opts.driver_checkpoints.clone(),
    };
    let mut api = None;
    match &pods {
        Pods::Api {
            api: conn,
            node,
            fallback,
        } => match kube_api::node_pods(&conn.client, node).await {
            Ok(list) => {
                scan_opts.node = Some(node.clone());
                scan_opts.pods = Some((list, PodSource::Api));
                api = Some(conn);
            }
            Err(e) if *fallback => notes.push(format!("Kubernetes API not used ({e}){CGROUPS_FALLBACK}")),
            Err(e) => return Err(ScanError::Api(e)),
        },
        Pods::Given { node, pods, source } => {
            scan_opts.node = Some(node.clone());
            scan_opts.pods = Some((pods.clone(), source.clone()));
        }
        Pods::File(path) => scan_opts.pods_file = Some(path.clone()),
        Pods::Cgroups => {}
    }
    let collected = if opts.skip_host {
        collect::pods_only(&scan_opts)?
    } else if opts.host_reads_inline {
        match opts.readings.clone() {
            Some(readings) => collect::assemble(host, std::sync::Arc::unwrap_or_clone(readings), &scan_opts)?,
            None => collect::collect(host, &scan_opts)?,
        }
    } else {
        let (task_host, readings) = (host.clone(), opts.readings.clone());
        tokio::task::spawn_blocking(move || match readings {
            Some(readings) => collect::assemble(&task_host, std::sync::Arc::unwrap_or_clone(readings), &scan_opts),
            None => collect::collect(&task_host, &scan_opts),
        })
        .await
        .map_err(|e| ScanError::Task(e.to_string()))??
    };
    let mut snapshot = collected.snapshot;
    let mut records = collected.records;
    snapshot.notes.splice(0..0, notes);
    if let Some(kubelet_dir) = &collected.kubelet_dir {
        read_kubelet_view(host, kubelet_dir, opts, &mut snapshot, &mut records).await;
    }
    let timeout = opts.lookups_timeout.unwrap_or(LOOKUPS_TIMEOUT);
    // ResourceClaims are asked for only where there is an API server to ask.
    let claims = (
        snapshot.managers.holds_prepared_claims(),
        match &pods {
            Pods::Api { .. } => nodemedic_rules::facts::claims_to_ask(&snapshot, &nodemedic_rules::Settings::default()),
            _ => vec![],
        },
    );
    let lookups = async {
        match (&pods, snapshot.pod_source == PodSource::Cgroups) {
            (_, true) => None,
            (Pods::File(_), _) => {
                let dir = ListDirectory::new(collected.cluster_pods);
                Some(lookup_drivers(&dir, &snapshot, &claims).await)
            }
            (Pods::Api { api: conn, .. }, _) => {
                // One scan's memory: executors of one application share one lookup, and the
                // first failure stops the rest.
                let dir = kube_api::driver_directory(conn.client.clone(), ONE_SHOT_MEMORY, u32::MAX);
                Some(lookup_drivers(&dir, &snapshot, &claims).await)
            }
            (Pods::Given { .. }, _) => match directory {
                Some(dir) => Some(lookup_drivers(dir, &snapshot, &claims).await),
                None => None,
            },
            (Pods::Cgroups, _) => None,
        }
    };
    match tokio::time::timeout(timeout, lookups).await {
        Ok(Some((drivers, app_drivers, partition))) => {
            snapshot.drivers = drivers;
            snapshot.app_drivers = app_drivers;
            snapshot.pod_events = partition.pod_events;
            snapshot.nodes = partition.nodes;
            snapshot.resource_claims = partition.resource_claims;
            let failed = partition.events_failed.iter().chain(&partition.nodes_failed);
            if let Some((_, why)) = failed.into_iter().next() {
                snapshot.notes.push(format!(
                    "pod Events or nodes for driver-blocked-by-partition not read: {why}"
                ));
            }
        }
        Ok(None) => {}
        Err(_) => snapshot.notes.push(format!(
            "Spark driver lookups took over {} s: drivers are unknown this scan",
            timeout.as_secs()
        )),
    }
    if let Some(o) = &opts.api {
        snapshot.api = Observed::Ok(o.clone());
    } else if let (true, Some(conn)) = (opts.probe_api, api) {
        let spark_pods: Vec<_> = snapshot
            .pods
            .iter()
            .filter(|p| p.spark_role().is_some())
            .map(|p| (p.namespace.clone(), p.labels.clone()))
            .collect();
        match crate::apimon::probe_once(conn, &snapshot.node, &spark_pods).await {
            Ok(o) => snapshot.api = Observed::Ok(o),
            Err(e) => snapshot.notes.push(format!("API probes not run: {e}")),
        }
    }
    Ok(Scanned { snapshot, records })
}

/// Asks the kubelet's PodResources API into the snapshot; without a pod list, its pods decide
/// liveness.
async fn read_kubelet_view(
    host: &HostPaths,
    kubelet_dir: &std::path::Path,
    opts: &Options,
    snapshot: &mut NodeSnapshot,
    records: &mut Records,
) {
    use collect::podresources;
    let mut names = opts.last_known_pods.clone();
    for p in &snapshot.pods {
        let uids = names.entry((p.namespace.clone(), p.name.clone())).or_default();
        if !uids.contains(&p.uid) {
            uids.push(p.uid.clone());
        }
    }
    let inputs = podresources::ViewInputs {
        kubelet_dir: kubelet_dir.to_path_buf(),
        checkpoint: snapshot.checkpoint.ok().map(|f| (host.host(&f.path), f.modified_at)),
        names,
    };
    let started = std::time::Instant::now();
    let view = podresources::read_kubelet_view(host, &inputs).await;
    let (status, failed) = podresources::status(&view);
    records.set(collect::Record {
        name: "podresources",
        duration: started.elapsed(),
        status,
        failed,
    });
    if let Observed::Ok(v) = &view {
        if let (true, Some(file)) = (v.checkpoint_changed, snapshot.checkpoint.ok()) {
            snapshot.notes.push(format!(
                "{} changed while the kubelet's PodResources API was read: the two are not compared this scan",
                file.path
            ));
        }
        if snapshot.pod_source == PodSource::Cgroups {
            snapshot.pod_source = PodSource::PodResources;
            for note in snapshot.notes.iter_mut() {
                if let Some(head) = note.strip_suffix(CGROUPS_FALLBACK) {
                    *note = format!("{head}: liveness from the kubelet's PodResources API");
                } else if note.contains(collect::GUESSED_NODE_FALLBACK) {
                    *note = note.replace(
                        collect::GUESSED_NODE_FALLBACK,
                        "judging liveness from the kubelet's PodResources API instead",
                    );
                }
            }
            if let Some(mut r) = records.get("pods").cloned() {
                r.status = PodSource::PodResources.as_str().to_string();
                records.set(r);
            }
        }
    }
    snapshot.kubelet_view = view;
}

/// The drivers of the executors among the snapshot's pods, every driver of their applications,
/// and what `driver-blocked-by-partition` reads besides (the Events of drivers that wait to
/// start on the node, the other nodes of their applications; with `claims` prepared on the
/// node, the Events of pods with ResourceClaims that wait to start), and the Events of the
/// drivers whose configuration volume was not set up (`half-submitted-driver`).
async fn lookup_drivers<D: PodDirectory>(
    dir: &D,
    snapshot: &NodeSnapshot,
    claims: &(bool, Vec<String>),
) -> (
    std::collections::BTreeMap<String, DriverLookup>,
    std::collections::BTreeMap<String, Vec<PodInfo>>,
    PartitionInputs,
) {
    let (drivers, app_drivers) = spark::resolve_all(dir, &snapshot.pods).await;
    let partition = spark::partition_inputs(dir, snapshot, &app_drivers, claims.0, &claims.1).await;
    (drivers, app_drivers, partition)
}

/// [`snapshot`] for callers outside a runtime (tests, benches): on a runtime of its own.
pub fn snapshot_blocking(host: &HostPaths, pods: Pods, opts: &Options) -> Result<Scanned, ScanError> {
    let opts = Options {
        host_reads_inline: true,
        ..opts.clone()
    };
    crate::block_on(snapshot::<ListDirectory>(host, pods, None, &opts)).map_err(|e| ScanError::Task(e.to_string()))?
}

/// The API when the command may use it (not offline, no pods file) and a configuration loads;
/// else the cgroups, with a note that says why.
pub async fn api_or_cgroups(
    kubeconfig: Option<&std::path::Path>,
    node: &str,
    timeout: Duration,
) -> (Pods, Option<String>) {
    match kube_api::Connection::load(kubeconfig, timeout).await {
        Ok(api) => (
            Pods::Api {
                api: Box::new(api),
                node: node.to_string(),
                fallback: true,
            },
            None,
        ),
        Err(e) => (
            Pods::Cgroups,
            Some(format!("Kubernetes API not used ({e}){CGROUPS_FALLBACK}")),
        ),
    }
}
