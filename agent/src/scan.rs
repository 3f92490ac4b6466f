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

use nodemedic_rules::snapshot::{ApiLookups, ApiObservation, NodeSnapshot, Observed, PodInfo, PodSource};
use nodemedic_rules::snapshot::{Liveness, Note};

pub use crate::collect::Scanned;
use crate::collect::{self, CollectError, PodInput, Records};
use crate::host::HostPaths;
use crate::kube_api;
use crate::spark::{self, ListDirectory, PodDirectory};

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
    /// How the host is read (node name, local-dir roots and whether they are measured, DRA
    /// drivers' checkpoints), passed to the collectors as it is.
    pub host: collect::HostOptions,
    /// Where the host files are read, or whether they are read at all.
    pub host_reads: HostReads,
    /// Whether the scan probes the API itself.
    pub api_probe: ApiProbe,
    /// The API as the daemon's probe task last saw it.
    pub api: Option<ApiObservation>,
    /// Notes the caller adds to the report (why the API was not used, ...).
    pub notes: Vec<Note>,
    /// Timeout of all driver lookups together.
    pub lookups_timeout: Option<Duration>,
    /// The host as read before (the daemon's readings, kept up to date by inotify): the
    /// snapshot is assembled from these instead of reading the host again.
    pub readings: Option<std::sync::Arc<collect::KeptHost>>,
    /// Why there is no pod list, when the caller knows (`--offline`, no API configured, the
    /// daemon's watch not synced): the snapshot's `pod_list` when its pods do not come from a
    /// list. A pod list from the API that fails is an error whatever this says.
    pub pod_list: Option<Observed<()>>,
    /// The pods of this node last known (the daemon's store while its watch is down):
    /// (namespace, name) to UIDs, to name the pods the kubelet's PodResources API lists.
    pub last_known_pods: std::collections::BTreeMap<(String, String), Vec<String>>,
    /// The kubelet's version as the caller knows it (the daemon's, read every few minutes);
    /// `None`: read from this node's Node object with `Pods::Api`, else unknown.
    pub kubelet_version: Option<Observed<nodemedic_rules::kubelet_version::VersionReading>>,
    /// The rule settings the caller judges with: which stale DRA claims' ResourceClaims are
    /// asked for follows them (`claims_to_ask`), so the snapshot holds what the judgement needs.
    pub settings: nodemedic_rules::Settings,
}

/// Where a scan reads the host files, or whether it reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HostReads {
    /// On a thread of the runtime's blocking pool: the daemon, so that a hung mount never
    /// stalls its watch or `/metrics`.
    #[default]
    BlockingPool,
    /// On the calling thread: a one-shot command, whose runtime does nothing else meanwhile
    /// (no blocking-pool thread to start).
    Inline,
    /// Not at all: the snapshot holds the pods and their drivers only, and no host source is
    /// recorded (a pod repair run without a host root, a re-check of the pod list). Any
    /// [`Options::readings`] are ignored.
    PodsOnly,
}

/// Whether a scan runs the API probes itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ApiProbe {
    /// No probe: the API is as [`Options::api`] says, else `not applicable: not probed`.
    #[default]
    Skip,
    /// One round of probes when the pods come from the API ([`Pods::Api`]) and
    /// [`Options::api`] is not given: the one-shot scan's view of the API.
    Once,
}

/// Where a one-shot command takes its pods from: the command line, as plain values.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// The node's name; default: see [`collect::HostOptions::node`].
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
    /// The pods this source names, for `scan` and `repair cpu-state`: the file when one is
    /// given, no pods offline, else the API (this node's name: `node`, else the kubelet's
    /// `--hostname-override` or `/etc/hostname`). A kubeconfig the user named (`--kubeconfig`)
    /// that cannot be loaded is an error, and its pod list does not fall back to the cgroups
    /// (a failed list is the file's error: [`blame_kubeconfig`]); only the default configuration
    /// (in-cluster, `$KUBECONFIG`, `~/.kube/config`) may fall back, with a note. Also says why
    /// there is no pod list when there is none by choice.
    pub async fn resolve(&self, host: &HostPaths) -> Result<Resolved, ScanError> {
        if let Some(path) = &self.pods_file {
            return Ok(Resolved::new(Pods::File(path.clone()), None, None));
        }
        if self.offline {
            let why = "--offline: the Kubernetes API is not used and no --pods file was given";
            return Ok(Resolved::new(Pods::Cgroups, None, Some(why.to_string())));
        }
        let node = self.node.clone().unwrap_or_else(|| collect::host_node_name(host));
        let Some(path) = &self.kubeconfig else {
            let (pods, note) = api_or_cgroups(None, &node, COMMAND_REQUEST_TIMEOUT).await;
            let why = note.as_ref().map(Note::without_liveness);
            return Ok(Resolved::new(pods, note, why));
        };
        let api = kube_api::Connection::load(Some(path), COMMAND_REQUEST_TIMEOUT)
            .await
            .map_err(|e| blame_kubeconfig(Some(path), e.into()))?;
        let pods = Pods::Api {
            api: Box::new(api),
            node,
            fallback: false,
        };
        Ok(Resolved {
            pods,
            note: None,
            pod_list: None,
            kubeconfig: Some(path.clone()),
        })
    }
}

/// An error of a command that uses the API through the kubeconfig the user named
/// (`--kubeconfig`): a configuration that does not load, or a request its API server refuses or
/// does not answer, is that file's error ([`ScanError::Kubeconfig`]: the file, then the first
/// line of the reason). Every other error, and every error without a named file, is returned
/// as it is.
pub fn blame_kubeconfig(kubeconfig: Option<&std::path::Path>, e: ScanError) -> ScanError {
    match (kubeconfig, e) {
        (Some(path), ScanError::Api(e)) => ScanError::Kubeconfig {
            path: path.display().to_string(),
            reason: one_line(&match e {
                kube_api::Error::Config { message, .. } => message,
                other => other.to_string(),
            }),
        },
        (_, e) => e,
    }
}

/// The first line of an error's text (a YAML parser's error goes on with the offending lines):
/// errors end as one line on stderr.
pub fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().trim_end().to_string()
}

/// Where a one-shot scan's pods come from, resolved.
#[derive(Debug)]
pub struct Resolved {
    pub pods: Pods,
    /// Why the API was not used, for the report's notes.
    pub note: Option<Note>,
    /// Why there is no pod list, when there is none by choice (see [`Options::pod_list`]).
    pub pod_list: Option<Observed<()>>,
    /// The kubeconfig the user named: a failed pod list names it.
    pub kubeconfig: Option<PathBuf>,
}

impl Resolved {
    fn new(pods: Pods, note: Option<Note>, not_applicable: Option<String>) -> Self {
        Resolved {
            pods,
            note,
            pod_list: not_applicable.map(|reason| Observed::NotApplicable { reason }),
            kubeconfig: None,
        }
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
    /// The kubeconfig the user named cannot be used: it cannot be read or parsed, or the API
    /// server it names refused the pod list.
    #[error("{path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    /// The host root holds none of what a node's root holds.
    #[error("{0}")]
    NotANode(String),
}

/// How long a one-shot scan's driver lookups are remembered: longer than the scan.
const ONE_SHOT_MEMORY: Duration = Duration::from_secs(3600);

/// Driver lookups of one scan take at most this long together unless the caller says.
pub const LOOKUPS_TIMEOUT: Duration = Duration::from_secs(30);

/// Builds the snapshot of the node under `host`. `directory` is where `Pods::Given` looks
/// drivers up (the daemon's cache); the other sources bring their own. Host files are read as
/// [`Options::host_reads`] says (by default on a blocking thread, so a hung mount never
/// stalls the runtime).
pub async fn snapshot<D: PodDirectory>(
    host: &HostPaths,
    mut pods: Pods,
    directory: Option<&D>,
    opts: &Options,
) -> Result<Scanned, ScanError> {
    let mut notes = opts.notes.clone();
    let mut api = None;
    let mut pod_list_error = None;
    // The given pods are moved into the snapshot, not copied: nothing below reads them again.
    let given = match &mut pods {
        Pods::Given { pods, .. } => std::mem::take(pods),
        _ => Vec::new(),
    };
    let input = match &pods {
        Pods::Api {
            api: conn,
            node,
            fallback,
        } => match kube_api::node_pods(&conn.client, node).await {
            Ok(list) => {
                api = Some(conn);
                PodInput::Known {
                    node: node.clone(),
                    pods: list,
                    source: PodSource::Api,
                }
            }
            Err(e) if *fallback => {
                notes.push(Note::api_not_used(&e));
                pod_list_error = Some(e.to_string());
                PodInput::None
            }
            Err(e) => return Err(ScanError::Api(e)),
        },
        Pods::Given { node, source, .. } => PodInput::Known {
            node: node.clone(),
            pods: given,
            source: source.clone(),
        },
        Pods::File(path) => PodInput::File(path.clone()),
        Pods::Cgroups => PodInput::None,
    };
    let collected = match opts.host_reads {
        HostReads::PodsOnly => collect::pods_only(&opts.host, input)?,
        HostReads::Inline => match opts.readings.clone() {
            Some(readings) => collect::assemble(host, std::sync::Arc::unwrap_or_clone(readings), &opts.host, input)?,
            None => collect::collect(host, &opts.host, input)?,
        },
        HostReads::BlockingPool => {
            let (task_host, task_opts, readings) = (host.clone(), opts.host.clone(), opts.readings.clone());
            tokio::task::spawn_blocking(move || match readings {
                Some(readings) => {
                    collect::assemble(&task_host, std::sync::Arc::unwrap_or_clone(readings), &task_opts, input)
                }
                None => collect::collect(&task_host, &task_opts, input),
            })
            .await
            .map_err(|e| ScanError::Task(e.to_string()))??
        }
    };
    let Scanned {
        mut snapshot,
        mut records,
    } = collected.scanned;
    snapshot.notes.splice(0..0, notes);
    if let Some(reason) = pod_list_error {
        snapshot.pods.list = Observed::Error { reason };
    } else if let Some(why) = &opts.pod_list {
        snapshot.pods.list = why.clone();
    }
    read_kubelet_version(api.map(|c| &c.client), opts, &mut snapshot, &mut records).await;
    if let Some(kubelet_dir) = &collected.kubelet_dir {
        read_kubelet_view(host, kubelet_dir, opts, &mut snapshot, &mut records).await;
    }
    snapshot.notes.extend(
        nodemedic_rules::rules::kubelet_state_divergence::notes(&snapshot)
            .into_iter()
            .map(Note::from),
    );
    let timeout = opts.lookups_timeout.unwrap_or(LOOKUPS_TIMEOUT);
    // ResourceClaims are asked for only where there is an API server to ask.
    let claims = match &pods {
        // Asked before the judgement, of the snapshot without the claims' objects: the one
        // shared judgement made twice in a scan (the judgement's own facts come later).
        Pods::Api { .. } => {
            let stale = nodemedic_rules::facts::stale_claims(&snapshot, &opts.settings);
            nodemedic_rules::facts::claims_to_ask(&snapshot, &stale)
        }
        _ => nodemedic_rules::facts::ClaimsToAsk {
            prepared: snapshot.host.managers.holds_prepared_claims(),
            names: vec![],
        },
    };
    let lookups = async {
        match (&pods, snapshot.pods.source == PodSource::Cgroups) {
            (_, true) => None,
            (Pods::File(_), _) => {
                let dir = ListDirectory::of_file(&snapshot.pods.bound, collected.cluster_pods);
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
        Ok(Some((lookups, unread))) => {
            snapshot.api.lookups = lookups;
            if let Some(why) = unread {
                snapshot.notes.push(Note::Other(format!(
                    "pod Events or nodes for driver-blocked-by-partition not read: {why}"
                )));
            }
        }
        Ok(None) => {}
        Err(_) => snapshot.notes.push(Note::Other(format!(
            "Spark driver lookups took over {} s: drivers are unknown this scan",
            timeout.as_secs()
        ))),
    }
    if let Some(o) = &opts.api {
        snapshot.api.server = Observed::Ok(o.clone());
    } else if let (ApiProbe::Once, Some(conn)) = (opts.api_probe, api) {
        let spark_pods: Vec<_> = snapshot
            .pods
            .bound
            .iter()
            .filter(|p| p.spark_role().is_some())
            .map(|p| (p.namespace.clone(), p.labels.clone()))
            .collect();
        match crate::apimon::probe_once(conn, &snapshot.node, &spark_pods).await {
            Ok(o) => snapshot.api.server = Observed::Ok(o),
            Err(e) => snapshot.notes.push(Note::Other(format!("API probes not run: {e}"))),
        }
    }
    Ok(Scanned { snapshot, records })
}

/// The kubelet's version into the snapshot: the caller's, else one GET of this node's Node
/// when the API is in use, else unknown. Its record says `ok` or `unknown`; a version that
/// could not be read or parsed is also a note.
async fn read_kubelet_version(
    client: Option<&kube::Client>,
    opts: &Options,
    snapshot: &mut NodeSnapshot,
    records: &mut Records,
) {
    let started = std::time::Instant::now();
    let version = match (&opts.kubelet_version, client) {
        (Some(known), _) => known.clone(),
        (None, Some(client)) => kube_api::node_kubelet_version(client, &snapshot.node).await,
        (None, None) => Observed::NotApplicable {
            reason: "no Kubernetes API used, so no Node object read".into(),
        },
    };
    let status = if version.ok().is_some() { "ok" } else { "unknown" };
    records.set(collect::Record {
        name: "kubelet_version",
        duration: started.elapsed(),
        status: status.to_string(),
        failed: false,
    });
    match &version {
        Observed::Error { reason } => snapshot
            .notes
            .push(Note::Other(format!("kubelet version unknown: {reason}"))),
        Observed::Missing { path } => snapshot
            .notes
            .push(Note::Other(format!("kubelet version unknown: {path} not found"))),
        _ => {}
    }
    snapshot.api.kubelet_version = version;
}

/// Asks the kubelet's PodResources API into the snapshot; without a pod list, its pods decide
/// liveness.
/// What the kubelet's PodResources API is asked with for `snapshot`: where its socket is, the
/// checkpoint as read (to tell a change during the call), the pods known by name.
pub fn kubelet_view_inputs(
    host: &HostPaths,
    kubelet_dir: &std::path::Path,
    opts: &Options,
    snapshot: &NodeSnapshot,
) -> collect::podresources::ViewInputs {
    collect::podresources::ViewInputs {
        kubelet_dir: kubelet_dir.to_path_buf(),
        checkpoint: snapshot
            .host
            .checkpoint
            .ok()
            .map(|f| (host.host(&f.path), f.modified_at)),
        names: pod_names(opts, snapshot),
    }
}

async fn read_kubelet_view(
    host: &HostPaths,
    kubelet_dir: &std::path::Path,
    opts: &Options,
    snapshot: &mut NodeSnapshot,
    records: &mut Records,
) {
    use collect::podresources;
    let inputs = kubelet_view_inputs(host, kubelet_dir, opts, snapshot);
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
        if let (true, Some(file)) = (v.checkpoint_changed, snapshot.host.checkpoint.ok()) {
            snapshot.notes.push(Note::Other(format!(
                "{} changed while the kubelet's PodResources API was read: the two are not compared this scan",
                file.path
            )));
        }
        if snapshot.pods.source == PodSource::Cgroups {
            snapshot.pods.source = PodSource::PodResources;
            for note in snapshot.notes.iter_mut() {
                note.set_liveness(Liveness::PodResources);
            }
            if let Some(mut r) = records.get("pods").cloned() {
                r.status = PodSource::PodResources.as_str().to_string();
                records.set(r);
            }
        }
    }
    snapshot.host.kubelet_view = view;
}

/// The UIDs of each (namespace, name) the kubelet's PodResources API may list: the caller's
/// last known pods ([`Options::last_known_pods`]) and the snapshot's, each UID once.
fn pod_names(opts: &Options, snapshot: &NodeSnapshot) -> std::collections::BTreeMap<(String, String), Vec<String>> {
    let mut names = opts.last_known_pods.clone();
    for p in &snapshot.pods.bound {
        let uids = names.entry((p.namespace.clone(), p.name.clone())).or_default();
        if !uids.contains(&p.uid) {
            uids.push(p.uid.clone());
        }
    }
    names
}

/// The drivers of the executors among the snapshot's pods, every driver of their applications,
/// and what `driver-blocked-by-partition` reads besides (the Events of drivers that wait to
/// start on the node, the other nodes of their applications; with `claims` prepared on the
/// node, the Events of pods with ResourceClaims that wait to start, and those ResourceClaims),
/// and the Events of the drivers whose configuration volume was not set up
/// (`half-submitted-driver`); with why the first pod Events or node that could not be read
/// was not.
async fn lookup_drivers<D: PodDirectory>(
    dir: &D,
    snapshot: &NodeSnapshot,
    claims: &nodemedic_rules::facts::ClaimsToAsk,
) -> (ApiLookups, Option<String>) {
    let (drivers, app_drivers) = spark::resolve_all(dir, &snapshot.pods.bound).await;
    let partition = spark::partition_inputs(dir, spark::PodsAt::of(snapshot), &app_drivers, claims).await;
    let unread = partition
        .events_failed
        .values()
        .chain(partition.nodes_failed.values())
        .next()
        .cloned();
    let lookups = ApiLookups {
        drivers,
        app_drivers,
        pod_events: partition.pod_events,
        resource_claims: partition.resource_claims,
        nodes: partition.nodes,
    };
    (lookups, unread)
}

/// [`snapshot`] for callers outside a runtime (tests, benches): on a runtime of its own, the
/// host files read on the calling thread (unless [`HostReads::PodsOnly`]).
pub fn snapshot_blocking(host: &HostPaths, pods: Pods, opts: &Options) -> Result<Scanned, ScanError> {
    let host_reads = match opts.host_reads {
        HostReads::PodsOnly => HostReads::PodsOnly,
        HostReads::BlockingPool | HostReads::Inline => HostReads::Inline,
    };
    let opts = Options {
        host_reads,
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
) -> (Pods, Option<Note>) {
    match kube_api::Connection::load(kubeconfig, timeout).await {
        Ok(api) => (
            Pods::Api {
                api: Box::new(api),
                node: node.to_string(),
                fallback: true,
            },
            None,
        ),
        Err(e) => (Pods::Cgroups, Some(Note::api_not_used(e))),
    }
}

/// What a node's root holds under it, by what its absence means: the kubelet's directory, the
/// cgroup hierarchy, procfs.
fn node_parts(host: &HostPaths) -> [(String, bool); 3] {
    let kubelet = host.kubelet_dir(None);
    let cgroup = host.host("/sys/fs/cgroup");
    let proc = host.proc();
    [
        (host.display(&kubelet), crate::collect::read::is_dir(&kubelet)),
        (host.display(&cgroup), crate::collect::read::is_dir(&cgroup)),
        (host.display(&proc), crate::collect::read::is_dir(&proc)),
    ]
}

/// Checks that `host` looks like a node's root: a directory with the kubelet's directory, a
/// cgroup hierarchy or `/proc` under it. A root with none of them (a parent directory of a
/// node tree, `/tmp`) would scan as a node where every source is missing and nothing is
/// found; it is an error instead that names what is missing and, when a directory below the
/// root looks like a node, suggests it.
pub fn check_host_root(host: &HostPaths) -> Result<(), ScanError> {
    let root = host.root();
    if !root.is_dir() {
        return Err(ScanError::NotANode(format!(
            "{}: host root does not exist or is not a directory",
            root.display()
        )));
    }
    let parts = node_parts(host);
    if parts.iter().any(|(_, there)| *there) {
        return Ok(());
    }
    let missing: Vec<&str> = parts.iter().map(|(p, _)| p.as_str()).collect();
    let mut message = format!(
        "{}: does not look like a node's root: no {} under it (pass the directory that holds them as --host-root)",
        root.display(),
        missing.join(", no ")
    );
    // Sorted, bounded: a large directory does not stall the error.
    let mut below: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .take(1000)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    below.sort();
    let nodes: Vec<String> = below
        .into_iter()
        .filter(|dir| node_parts(&HostPaths::new(dir, None)).iter().any(|(_, there)| *there))
        .take(3)
        .map(|dir| dir.display().to_string())
        .collect();
    if !nodes.is_empty() {
        message.push_str(&format!("; did you mean --host-root {}?", nodes.join(" or ")));
    }
    Err(ScanError::NotANode(message))
}

#[cfg(test)]
pub(crate) mod tests;
