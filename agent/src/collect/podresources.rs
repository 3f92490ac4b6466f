//! The kubelet's PodResources API: its own view of the CPU manager's assignments.
//!
//! gRPC (`v1.PodResourcesLister`, our `proto/podresources.proto`) over the unix socket
//! `<kubelet dir>/pod-resources/kubelet.sock`. The socket is found under the host root, in the
//! kubelet's directory the agent already mounts: the kubelet removes and re-creates the socket
//! when it restarts, which a mount of the directory sees and a mount of the socket file would
//! not. Each read opens a fresh connection, so a restarted kubelet is simply found again.
//!
//! Bounded: every call has [`CALL_TIMEOUT`], an answer larger than [`MAX_RESPONSE_BYTES`] is
//! refused by the decoder, and a failed `List` ends the read (a failed `GetAllocatableResources`
//! is noted in the view and the list still used). A node without
//! the socket is `missing`, a kubelet without the call `not applicable` (the report's source
//! says `unsupported`); neither is an error.
//!
//! The third method, `Get` (one pod), is never called: it exists only from 1.27, behind the
//! `KubeletPodResourcesGet` feature gate (off by default until 1.34), so most kubelets answer it
//! `Unimplemented`, and `List` already gives every pod. What the answers mean depends on the
//! kubelet's version (`GetAllocatableResources` before 1.26, shared-pool `cpu_ids` before 1.23:
//! docs/kubelet.md, "Behaviour by kubelet version"); the rules judge that, not this reader.
//!
//! `List` names pods, not UIDs: the UIDs come from the pod list when the caller has one (or the
//! daemon's last known one), else from the kubelet's log directories
//! `/var/log/pods/<namespace>_<name>_<uid>` when they are visible (`nodemedic scan --host-root
//! /` on the node; the DaemonSet does not mount them), else the rules tie pods to checkpoint
//! entries by their CPUs ([`nodemedic_rules::kubelet_view`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nodemedic_rules::CpuSet;
use nodemedic_rules::kubelet_view::{
    KubeletContainer, KubeletDevices, KubeletMemory, KubeletPod, KubeletView, UidSource,
};
use nodemedic_rules::snapshot::Observed;

use crate::host::HostPaths;

/// The generated client and messages.
#[allow(clippy::all, missing_debug_implementations, missing_docs)]
pub mod proto {
    tonic::include_proto!("v1");
}

use proto::pod_resources_lister_client::PodResourcesListerClient;

/// The socket, relative to the kubelet's directory.
pub const SOCKET: &str = "pod-resources/kubelet.sock";
/// How long one call (connecting included) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer accepted. A 250-pod node's `List` is tens of KiB; devices and memory
/// make it larger, never this large.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The kubelet's pod log directories, whose names carry namespace, name and UID.
const POD_LOGS: &str = "/var/log/pods";
/// The most log directories looked at (a node runs at most a few hundred pods).
const MAX_LOG_DIRS: usize = 20_000;

/// What a read needs besides the host.
#[derive(Debug, Clone, Default)]
pub struct ViewInputs {
    /// The kubelet's directory on this filesystem.
    pub kubelet_dir: PathBuf,
    /// The checkpoint as read (its local path and its mtime, unix seconds), to tell whether
    /// it changed before the kubelet answered.
    pub checkpoint: Option<(PathBuf, Option<f64>)>,
    /// Known pods of this node: (namespace, name) to UIDs.
    pub names: BTreeMap<(String, String), Vec<String>>,
}

/// The report's word for the outcome: `ok`, `missing`, `unsupported`, `error: ..`.
pub fn status(view: &Observed<KubeletView>) -> (String, bool) {
    match view {
        Observed::NotApplicable { reason } if reason.contains("Unimplemented") => ("unsupported".into(), false),
        other => (other.status(), matches!(other, Observed::Error { .. })),
    }
}

/// Asks the kubelet for its pods and allocatable CPUs.
pub async fn read_kubelet_view(host: &HostPaths, inputs: &ViewInputs) -> Observed<KubeletView> {
    let socket = inputs.kubelet_dir.join(SOCKET);
    let shown = host.display(&socket);
    match super::read::symlink_metadata(&socket) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Observed::Missing { path: shown },
        Err(e) => {
            return Observed::Error {
                reason: format!("{shown}: {e}"),
            };
        }
        Ok(_) => {}
    }
    let mut client = match connect(&socket, &shown).await {
        Ok(c) => c,
        Err(reason) => return Observed::Error { reason },
    };
    let list = match call(&shown, "List", client.list(proto::ListPodResourcesRequest {})).await {
        Ok(list) => list,
        Err(Failure::Unimplemented) => {
            return Observed::NotApplicable {
                reason: format!("{shown}: the kubelet does not serve v1 List (Unimplemented; Kubernetes 1.20+ does)"),
            };
        }
        Err(Failure::Other(reason)) => return Observed::Error { reason },
    };
    let listed_at = SystemTime::now();
    let checkpoint_changed = inputs.checkpoint.as_ref().is_some_and(|(path, read_mtime)| {
        let now = super::read::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .map(unix_seconds);
        match (read_mtime, now) {
            (Some(a), Some(b)) => (a - b).abs() > 1e-6,
            (None, None) => false,
            _ => true,
        }
    });
    let allocatable = match call(
        &shown,
        "GetAllocatableResources",
        client.get_allocatable_resources(proto::AllocatableResourcesRequest {}),
    )
    .await
    {
        Ok(a) => match cpu_set(&a.cpu_ids) {
            Ok(set) => Observed::Ok(set),
            Err(e) => Observed::Error {
                reason: format!("{shown}: GetAllocatableResources: {e}"),
            },
        },
        Err(Failure::Unimplemented) => Observed::NotApplicable {
            reason: "the kubelet does not serve GetAllocatableResources (Unimplemented before 1.21, behind the \
                     KubeletPodResourcesGetAllocatable feature gate in 1.21 and 1.22)"
                .into(),
        },
        Err(Failure::Other(reason)) => Observed::Error { reason },
    };
    let log_dirs = if inputs.names.is_empty() {
        read_log_dirs(host)
    } else {
        BTreeMap::new()
    };
    let mut pods = Vec::with_capacity(list.pod_resources.len());
    for p in list.pod_resources {
        let mut containers = Vec::with_capacity(p.containers.len());
        for c in p.containers {
            let cpus = match cpu_set(&c.cpu_ids) {
                Ok(set) => set,
                Err(e) => {
                    return Observed::Error {
                        reason: format!("{shown}: List: container {} of {}/{}: {e}", c.name, p.namespace, p.name),
                    };
                }
            };
            containers.push(KubeletContainer {
                name: c.name,
                cpus,
                memory: c.memory.into_iter().map(kubelet_memory).collect(),
                devices: c.devices.into_iter().map(kubelet_devices).collect(),
            });
        }
        let key = (p.namespace, p.name);
        let (uids, uid_source) = match (inputs.names.get(&key), log_dirs.get(&key)) {
            (Some(u), _) => (u.clone(), Some(UidSource::PodList)),
            (None, Some(u)) => (u.clone(), Some(UidSource::LogDir)),
            (None, None) => (Vec::new(), None),
        };
        let (namespace, name) = key;
        pods.push(KubeletPod {
            namespace,
            name,
            uids,
            uid_source,
            containers,
        });
    }
    Observed::Ok(KubeletView {
        socket: shown,
        pods,
        allocatable_cpus: allocatable,
        checkpoint_changed,
        listed_at: unix_seconds(listed_at) as i64,
    })
}

/// NUMA node ids of a `TopologyInfo`, sorted (none when the kubelet sends no topology).
fn numa_nodes(topology: Option<proto::TopologyInfo>) -> Vec<i64> {
    let mut ids: Vec<i64> = topology
        .map(|t| t.nodes.iter().map(|n| n.id).collect())
        .unwrap_or_default();
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn kubelet_memory(m: proto::ContainerMemory) -> KubeletMemory {
    KubeletMemory {
        resource: m.memory_type,
        bytes: m.size,
        numa_nodes: numa_nodes(m.topology),
    }
}

fn kubelet_devices(d: proto::ContainerDevices) -> KubeletDevices {
    KubeletDevices {
        resource: d.resource_name,
        ids: d.device_ids,
        numa_nodes: numa_nodes(d.topology),
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// CPU ids as the kubelet sends them (int64), as a set; a negative or absurd id is an error.
// Err: a plain-text reason, which the caller puts into the source's `Observed::Error`.
fn cpu_set(ids: &[i64]) -> Result<CpuSet, String> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        match u32::try_from(*id) {
            Ok(v) if v < 1 << 16 => out.push(v),
            _ => return Err(format!("CPU id {id} is not a CPU")),
        }
    }
    Ok(CpuSet::from_ids(out))
}

enum Failure {
    Unimplemented,
    Other(String),
}

/// One call, bounded by [`CALL_TIMEOUT`].
async fn call<T>(
    shown: &str,
    method: &str,
    request: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(CALL_TIMEOUT, request).await {
        Err(_) => Err(Failure::Other(format!(
            "{shown}: {method} did not answer within {} s",
            CALL_TIMEOUT.as_secs()
        ))),
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => Err(Failure::Unimplemented),
        // A kubelet that has the call behind a feature gate that is off answers a plain error
        // ("... disabled"), which gRPC carries as Unknown.
        Ok(Err(s)) if s.code() == tonic::Code::Unknown && s.message().contains("disabled") => {
            Err(Failure::Unimplemented)
        }
        Ok(Err(s)) if s.message().contains("message length too large") => Err(Failure::Other(format!(
            "{shown}: {method} answered more than the {} MiB accepted ({})",
            MAX_RESPONSE_BYTES / (1024 * 1024),
            s.message()
        ))),
        Ok(Err(s)) => Err(Failure::Other(format!(
            "{shown}: {method} failed: {:?}: {}",
            s.code(),
            s.message()
        ))),
    }
}

/// A client on a fresh connection to the socket.
// Err: a plain-text reason naming the socket (`shown`), which the caller in this file puts
// into the source's `Observed::Error`.
async fn connect(socket: &Path, shown: &str) -> Result<PodResourcesListerClient<tonic::transport::Channel>, String> {
    let path = socket.to_path_buf();
    // The URI is required by the API and never used: the connector below ignores it.
    // Calls are bounded by [`call`]'s own timeout, which says which call did not answer.
    let endpoint = tonic::transport::Endpoint::from_static("http://kubelet.sock").connect_timeout(CALL_TIMEOUT);
    let connector = tower::service_fn(move |_: http::Uri| {
        let path = path.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(&path).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    let channel = match tokio::time::timeout(CALL_TIMEOUT, endpoint.connect_with_connector(connector)).await {
        Err(_) => return Err(format!("{shown}: no connection within {} s", CALL_TIMEOUT.as_secs())),
        Ok(Err(e)) => return Err(format!("{shown}: {}", connect_error(&e))),
        Ok(Ok(c)) => c,
    };
    Ok(PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES))
}

/// What a failed connection means, in words: the io error under tonic's wrapping.
fn connect_error(e: &tonic::transport::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    "connection refused: nothing serves the socket (the kubelet is restarting, or the socket is left \
                     from one that stopped)"
                        .to_string()
                }
                std::io::ErrorKind::PermissionDenied => {
                    "permission denied: the agent must run as root to use the kubelet's socket".to_string()
                }
                std::io::ErrorKind::InvalidInput => format!(
                    "{io}: the socket's path is too long for a unix socket address (108 bytes); use a shorter \
                     --host-root"
                ),
                _ => io.to_string(),
            };
        }
        source = s.source();
    }
    e.to_string()
}

/// `(namespace, name)` to UIDs from the kubelet's pod log directories
/// (`<namespace>_<name>_<uid>`; neither a namespace nor a pod name may hold `_`). Empty when the
/// directory is not visible.
fn read_log_dirs(host: &HostPaths) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let Ok(entries) = super::read::list_dir(&host.host(POD_LOGS)) else {
        return out;
    };
    for entry in entries.filter_map(|e| e.ok()).take(MAX_LOG_DIRS) {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if let Some((ns, pod, uid)) = parse_log_dir(&name) {
            out.entry((ns.to_string(), pod.to_string()))
                .or_default()
                .push(uid.to_string());
        }
    }
    for uids in out.values_mut() {
        uids.sort();
    }
    out
}

/// `<namespace>_<name>_<uid>` split in three; `None` for any other name.
pub fn parse_log_dir(name: &str) -> Option<(&str, &str, &str)> {
    let mut parts = name.splitn(3, '_');
    let (ns, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = [ns, pod, uid].iter().all(|p| !p.is_empty()) && !uid.contains('_');
    ok.then_some((ns, pod, uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_dir_names() {
        assert_eq!(
            parse_log_dir("spark_exec-1_0f3c2a9e-1b2c-4d5e-8f90-123456789abc"),
            Some(("spark", "exec-1", "0f3c2a9e-1b2c-4d5e-8f90-123456789abc"))
        );
        for bad in ["", "spark", "spark_exec-1", "spark__u", "_a_b", "a_b_c_d"] {
            assert_eq!(parse_log_dir(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cpu_ids_are_checked() {
        assert_eq!(cpu_set(&[3, 2, 7]).unwrap().to_string(), "2-3,7");
        assert_eq!(cpu_set(&[]).unwrap().to_string(), "");
        assert!(cpu_set(&[-1]).unwrap_err().contains("CPU id -1"));
        assert!(cpu_set(&[1 << 40]).is_err());
    }

    #[tokio::test]
    async fn a_missing_socket_is_missing_and_a_dead_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostPaths::new(dir.path(), None);
        let kubelet_dir = dir.path().join("var/lib/kubelet");
        let inputs = ViewInputs {
            kubelet_dir: kubelet_dir.clone(),
            ..Default::default()
        };
        let view = read_kubelet_view(&host, &inputs).await;
        assert!(
            matches!(&view, Observed::Missing { path } if path == "/var/lib/kubelet/pod-resources/kubelet.sock"),
            "{view:?}"
        );
        // A socket file nobody listens on: what a stopped kubelet leaves.
        std::fs::create_dir_all(kubelet_dir.join("pod-resources")).unwrap();
        drop(std::os::unix::net::UnixListener::bind(kubelet_dir.join(SOCKET)).unwrap());
        let view = read_kubelet_view(&host, &inputs).await;
        let Observed::Error { reason } = &view else {
            panic!("{view:?}")
        };
        assert!(
            reason.starts_with("/var/lib/kubelet/pod-resources/kubelet.sock: connection refused"),
            "{reason}"
        );
        assert!(status(&view).1);
    }
}
