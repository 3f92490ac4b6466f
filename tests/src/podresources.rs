//! A fake kubelet PodResources server: the gRPC service `v1.PodResourcesLister` (`List`,
//! `GetAllocatableResources`, `Get`) served on a unix socket, as the kubelet serves it on
//! `/var/lib/kubelet/pod-resources/kubelet.sock`.
//!
//! What it answers comes from a [`Scenario`] the test can change while the agent runs, through
//! a clone-able [`KubeletHandle`]: the pods with the CPUs the CPU manager pinned their
//! containers to, the allocatable CPUs, and per method a [`Behaviour`]: a normal answer, the
//! `Unimplemented` of an old kubelet, no answer at all, an oversized answer, or any gRPC error.
//! The handle counts the calls per method.
//!
//! The server runs on the tokio runtime that started it. [`FakeKubelet::restart`] stands for
//! a kubelet restart (connections cut, the socket file replaced by a new one), and dropping
//! the [`FakeKubelet`] stops it: its connections are cut and the socket file removed.
//!
//! Unix socket paths are limited by `sun_path`: under 108 bytes (107 plus the terminating
//! NUL). [`FakeKubelet::start`] refuses longer ones with `InvalidInput`. Keep them short: a
//! temporary directory under `/tmp` (what `tempfile::tempdir()` gives unless `$TMPDIR` says
//! otherwise) plus `pod-resources/kubelet.sock` fits easily; one under a deep build directory
//! may not.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use nodemedic_tests::podresources::{Behaviour, FakeKubelet, FakePod, Scenario, GET_ALLOCATABLE};
//! let dir = tempfile::tempdir()?;
//! let socket = dir.path().join("pod-resources/kubelet.sock");
//! let scenario = Scenario::default()
//!     .pod(FakePod::new("spark", "exec-1").container("spark-kubernetes-executor", &[2, 3]))
//!     .allocatable(&[1, 2, 3, 5, 6, 7]);
//! let kubelet = FakeKubelet::start(&socket, scenario).await?;
//! kubelet.handle().set_behaviour(GET_ALLOCATABLE, Behaviour::Unimplemented); // a 1.20 kubelet
//! // ... run the agent against `socket`, then:
//! assert_eq!(kubelet.handle().calls("List"), 1);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::io;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tonic::transport::server::{Connected, UdsConnectInfo};
use tonic::{Code, Request, Response, Status};

/// The code tonic-prost-build generated from `agent/proto/podresources.proto`: the messages,
/// the server (which the fake implements) and the client (for tests that want to call it).
pub mod proto {
    tonic::include_proto!("v1");
}

mod huge;
pub use huge::{Codec, huge_list};

use proto::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices, ContainerMemory, ContainerResources,
    GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest, ListPodResourcesResponse, NumaNode,
    PodResources, TopologyInfo,
};

/// The method name of `List`, as [`KubeletHandle::calls`] and [`KubeletHandle::set_behaviour`]
/// take it.
pub const LIST: &str = "List";
/// The method name of `GetAllocatableResources`.
pub const GET_ALLOCATABLE: &str = "GetAllocatableResources";
/// The method name of `Get`.
pub const GET: &str = "Get";
/// The three methods of `v1.PodResourcesLister`.
pub const METHODS: [&str; 3] = [LIST, GET_ALLOCATABLE, GET];

/// The longest unix socket path `bind(2)` takes: `sun_path` holds 108 bytes, NUL included.
pub const MAX_SOCKET_PATH: usize = 107;

/// A pod as the kubelet reports it: its containers with the CPUs the CPU manager assigned
/// them exclusively (empty for a container on the shared pool), and the memory blocks and
/// devices the memory and device managers hold for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakePod {
    pub namespace: String,
    pub name: String,
    /// `(container name, cpu ids)`, in the pod's container order.
    pub containers: Vec<(String, Vec<i64>)>,
    /// `(container name, memory type, bytes, NUMA nodes)`.
    pub memory: Vec<(String, String, u64, Vec<i64>)>,
    /// `(container name, resource name, device ids, NUMA nodes)`.
    pub devices: Vec<(String, String, Vec<String>, Vec<i64>)>,
}

impl FakePod {
    /// A pod without containers yet.
    pub fn new(namespace: &str, name: &str) -> Self {
        FakePod {
            namespace: namespace.to_string(),
            name: name.to_string(),
            ..Default::default()
        }
    }

    /// Adds a memory block of `bytes` of `memory_type` on `numa` to container `container`.
    pub fn memory(mut self, container: &str, memory_type: &str, bytes: u64, numa: &[i64]) -> Self {
        self.memory
            .push((container.to_string(), memory_type.to_string(), bytes, numa.to_vec()));
        self
    }

    /// Adds devices `ids` of `resource` on `numa` to container `container`.
    pub fn devices(mut self, container: &str, resource: &str, ids: &[&str], numa: &[i64]) -> Self {
        self.devices.push((
            container.to_string(),
            resource.to_string(),
            ids.iter().map(|i| i.to_string()).collect(),
            numa.to_vec(),
        ));
        self
    }

    /// Adds a container pinned to `cpu_ids` (`&[]` for the shared pool).
    pub fn container(mut self, name: &str, cpu_ids: &[i64]) -> Self {
        self.containers.push((name.to_string(), cpu_ids.to_vec()));
        self
    }

    fn to_proto(&self) -> PodResources {
        PodResources {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            containers: self
                .containers
                .iter()
                .map(|(name, cpus)| ContainerResources {
                    name: name.clone(),
                    cpu_ids: cpus.clone(),
                    memory: self
                        .memory
                        .iter()
                        .filter(|(c, ..)| c == name)
                        .map(|(_, memory_type, size, numa)| ContainerMemory {
                            memory_type: memory_type.clone(),
                            size: *size,
                            topology: Some(topology(numa)),
                        })
                        .collect(),
                    devices: self
                        .devices
                        .iter()
                        .filter(|(c, ..)| c == name)
                        .map(|(_, resource, ids, numa)| ContainerDevices {
                            resource_name: resource.clone(),
                            device_ids: ids.clone(),
                            topology: Some(topology(numa)),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// NUMA node ids as the kubelet's `TopologyInfo`.
fn topology(numa: &[i64]) -> TopologyInfo {
    TopologyInfo {
        nodes: numa.iter().map(|id| NumaNode { id: *id }).collect(),
    }
}

/// How one method answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Behaviour {
    /// From the scenario, as a healthy kubelet.
    #[default]
    Answer,
    /// `Unimplemented`, as grpc-go answers a method the server does not have: kubelets before
    /// 1.21 have no `GetAllocatableResources`, kubelets before 1.27 no `Get`. (Later ones
    /// may have the method behind a feature gate that is off: see
    /// [`Behaviour::feature_gate_off`].)
    Unimplemented,
    /// Never answers (the call stays open until the client gives up or the server stops).
    Hang,
    /// An oversized answer, for a client's message size cap. `List`: `pods` made-up pods
    /// (see [`huge_list`]) instead of the scenario's, 833 bytes each encoded, so 5,100 pods
    /// pass 4 MiB. `Get`: the asked-for pod with the containers of `pods` made-up pods (about
    /// 570 bytes per `pods`). `GetAllocatableResources`: the scenario's CPUs followed by
    /// `256 * pods` made-up ids (about 770 bytes per `pods`).
    Huge { pods: usize },
    /// This gRPC status.
    Error(Code, String),
}

impl Behaviour {
    /// What a kubelet that has `method` behind a feature gate answers while the gate is off:
    /// a plain Go error, which grpc-go sends as `Unknown`, with the kubelet's wording.
    /// `GetAllocatableResources` is gated by `KubeletPodResourcesGetAllocatable` (alpha, off,
    /// in 1.21 and 1.22; on by default from 1.23), `Get` by `KubeletPodResourcesGet` (alpha,
    /// off, from 1.27 to 1.33; beta, on by default, from 1.34). `List` has no gate: panics.
    pub fn feature_gate_off(method: &str) -> Behaviour {
        let message = match method {
            GET_ALLOCATABLE => "Pod Resources API GetAllocatableResources disabled",
            GET => "PodResources API Get method disabled",
            other => panic!("{other:?} has no feature gate in the PodResources API"),
        };
        Behaviour::Error(Code::Unknown, message.to_string())
    }
}

/// What the fake kubelet serves. The default: no pods, no allocatable CPUs, every method
/// answering normally.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scenario {
    pub pods: Vec<FakePod>,
    pub allocatable_cpus: Vec<i64>,
    pub list: Behaviour,
    pub get_allocatable: Behaviour,
    pub get: Behaviour,
}

impl Scenario {
    /// Adds a pod.
    pub fn pod(mut self, pod: FakePod) -> Self {
        self.pods.push(pod);
        self
    }

    /// Sets the allocatable CPUs (`GetAllocatableResources`' `cpu_ids`).
    pub fn allocatable(mut self, cpu_ids: &[i64]) -> Self {
        self.allocatable_cpus = cpu_ids.to_vec();
        self
    }

    /// Sets how `method` ([`LIST`], [`GET_ALLOCATABLE`] or [`GET`]) answers.
    pub fn behaviour(mut self, method: &str, behaviour: Behaviour) -> Self {
        *self.behaviour_mut(method) = behaviour;
        self
    }

    /// Encodes a huge `List` answer now, so that a request is answered in the time it takes
    /// to copy it, not to build it (see the `huge` module).
    fn prepare(&self) {
        if let Behaviour::Huge { pods } = self.list {
            huge::prepare(pods);
        }
    }

    fn behaviour_mut(&mut self, method: &str) -> &mut Behaviour {
        match method {
            LIST => &mut self.list,
            GET_ALLOCATABLE => &mut self.get_allocatable,
            GET => &mut self.get,
            other => panic!("the PodResources API has no method {other:?}; it has {METHODS:?}"),
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    scenario: Scenario,
    calls: HashMap<&'static str, usize>,
}

/// The clone-able handle on a [`FakeKubelet`]'s scenario and call counts. Changes apply to
/// the next request.
#[derive(Clone, Debug, Default)]
pub struct KubeletHandle {
    shared: Arc<Mutex<Shared>>,
}

impl KubeletHandle {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic elsewhere while holding the lock leaves the data as consistent as ever.
        self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the pods.
    pub fn set_pods(&self, pods: Vec<FakePod>) {
        self.lock().scenario.pods = pods;
    }

    /// Replaces the allocatable CPUs.
    pub fn set_allocatable(&self, cpu_ids: &[i64]) {
        self.lock().scenario.allocatable_cpus = cpu_ids.to_vec();
    }

    /// Sets how `method` ([`LIST`], [`GET_ALLOCATABLE`] or [`GET`]) answers from now on.
    /// Panics on another name.
    pub fn set_behaviour(&self, method: &str, behaviour: Behaviour) {
        let mut shared = self.lock();
        *shared.scenario.behaviour_mut(method) = behaviour;
        shared.scenario.prepare();
    }

    /// Replaces the whole scenario (the call counts stay).
    pub fn set_scenario(&self, scenario: Scenario) {
        let mut shared = self.lock();
        shared.scenario = scenario;
        shared.scenario.prepare();
    }

    /// A copy of the current scenario.
    pub fn scenario(&self) -> Scenario {
        self.lock().scenario.clone()
    }

    /// How many requests of `method` arrived, whatever they were answered (a hanging one
    /// counts once it arrived). Panics on a name that is not a method.
    pub fn calls(&self, method: &str) -> usize {
        let Some(key) = METHODS.iter().find(|m| **m == method) else {
            panic!("the PodResources API has no method {method:?}; it has {METHODS:?}");
        };
        self.lock().calls.get(key).copied().unwrap_or(0)
    }

    /// The calls of all methods together.
    pub fn total_calls(&self) -> usize {
        self.lock().calls.values().sum()
    }

    /// Sets every call count back to zero.
    pub fn reset_calls(&self) {
        self.lock().calls.clear();
    }

    /// Counts a call of `method` and returns how it is to be answered, with the scenario as it
    /// is now.
    fn arrive(&self, method: &'static str) -> (Behaviour, Scenario) {
        let mut shared = self.lock();
        *shared.calls.entry(method).or_insert(0) += 1;
        let mut scenario = shared.scenario.clone();
        let behaviour = std::mem::take(scenario.behaviour_mut(method));
        (behaviour, scenario)
    }
}

/// Turns a behaviour into either an error to answer with, or the shape of the answer:
/// `None` for the scenario's, `Some(pods)` for a huge one. `Hang` never returns.
async fn decide(method: &str, behaviour: Behaviour) -> Result<Option<usize>, Status> {
    match behaviour {
        Behaviour::Answer => Ok(None),
        Behaviour::Huge { pods } => Ok(Some(pods)),
        Behaviour::Unimplemented => Err(Status::unimplemented(format!(
            "unknown method {method} for service v1.PodResourcesLister"
        ))),
        Behaviour::Error(code, message) => Err(Status::new(code, message)),
        Behaviour::Hang => std::future::pending().await,
    }
}

/// The service the gRPC server runs.
#[derive(Clone, Debug)]
struct Lister {
    handle: KubeletHandle,
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _request: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        let (behaviour, scenario) = self.handle.arrive(LIST);
        let answer = match decide(LIST, behaviour).await? {
            Some(pods) => huge::stand_in(pods),
            None => ListPodResourcesResponse {
                pod_resources: scenario.pods.iter().map(FakePod::to_proto).collect(),
            },
        };
        Ok(Response::new(answer))
    }

    async fn get_allocatable_resources(
        &self,
        _request: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        let (behaviour, scenario) = self.handle.arrive(GET_ALLOCATABLE);
        let mut cpu_ids = scenario.allocatable_cpus;
        if let Some(pods) = decide(GET_ALLOCATABLE, behaviour).await? {
            // Ids of 100,000 and up take three bytes each.
            cpu_ids.extend((0..256 * pods as i64).map(|i| 100_000 + i));
        }
        Ok(Response::new(AllocatableResourcesResponse {
            cpu_ids,
            ..Default::default()
        }))
    }

    async fn get(&self, request: Request<GetPodResourcesRequest>) -> Result<Response<GetPodResourcesResponse>, Status> {
        let (behaviour, scenario) = self.handle.arrive(GET);
        let asked = request.into_inner();
        let pod = match decide(GET, behaviour).await? {
            Some(pods) => PodResources {
                name: asked.pod_name,
                namespace: asked.pod_namespace,
                containers: (0..pods).flat_map(|i| huge::made_up_pod(i).containers).collect(),
            },
            None => match scenario
                .pods
                .iter()
                .find(|p| p.name == asked.pod_name && p.namespace == asked.pod_namespace)
            {
                Some(pod) => pod.to_proto(),
                // The kubelet returns a plain Go error here, which grpc-go sends as Unknown
                // (not NotFound), with this wording.
                None => {
                    return Err(Status::unknown(format!(
                        "pod {} in namespace {} not found",
                        asked.pod_name, asked.pod_namespace
                    )));
                }
            },
        };
        Ok(Response::new(GetPodResourcesResponse {
            pod_resources: Some(pod),
        }))
    }
}

/// The connections of one serving period, so stopping can cut them: tonic runs each
/// connection on a task of its own, which aborting the accept loop would leave running. Each
/// entry is a duplicate of the connection's descriptor; `shutdown(2)` on it ends the
/// connection for both the server's task and the client.
#[derive(Debug, Default)]
struct Connections {
    next_id: u64,
    open: HashMap<u64, std::os::unix::net::UnixStream>,
}

type ConnectionSet = Arc<Mutex<Connections>>;

fn lock_connections(set: &ConnectionSet) -> MutexGuard<'_, Connections> {
    set.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An accepted connection that leaves its [`Connections`] entry when the server drops it.
#[derive(Debug)]
struct TrackedStream {
    io: UnixStream,
    id: u64,
    set: ConnectionSet,
}

impl TrackedStream {
    fn track(io: UnixStream, set: &ConnectionSet) -> io::Result<Self> {
        let duplicate = std::os::unix::net::UnixStream::from(io.as_fd().try_clone_to_owned()?);
        let mut conns = lock_connections(set);
        let id = conns.next_id;
        conns.next_id += 1;
        conns.open.insert(id, duplicate);
        Ok(TrackedStream {
            io,
            id,
            set: Arc::clone(set),
        })
    }
}

impl Drop for TrackedStream {
    fn drop(&mut self) {
        lock_connections(&self.set).open.remove(&self.id);
    }
}

impl Connected for TrackedStream {
    type ConnectInfo = UdsConnectInfo;

    fn connect_info(&self) -> UdsConnectInfo {
        self.io.connect_info()
    }
}

impl AsyncRead for TrackedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A listening socket and its server task.
#[derive(Debug)]
struct Serving {
    task: JoinHandle<()>,
    connections: ConnectionSet,
}

impl Serving {
    /// Binds `path` (replacing whatever file is there, as the kubelet does) and serves on it.
    fn bind(path: &Path, handle: &KubeletHandle) -> io::Result<Serving> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        let connections = ConnectionSet::default();
        let set = Arc::clone(&connections);
        let incoming = futures::stream::unfold(listener, move |listener| {
            let set = Arc::clone(&set);
            async move {
                let next = match listener.accept().await {
                    Ok((io, _)) => TrackedStream::track(io, &set),
                    Err(e) => Err(e),
                };
                Some((next, listener))
            }
        });
        let service = PodResourcesListerServer::new(Lister { handle: handle.clone() });
        let task = tokio::spawn(async move {
            // Ends only with an error of the service, which never fails; accept errors are
            // skipped by tonic.
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming(service, incoming)
                .await;
        });
        Ok(Serving { task, connections })
    }

    /// Stops accepting and cuts every open connection, at once.
    fn cut(&self) {
        self.task.abort();
        let mut conns = lock_connections(&self.connections);
        for stream in conns.open.values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        conns.open.clear();
    }

    /// [`Serving::cut`], then waits until the aborted task has dropped the listening socket,
    /// so that connecting is refused from now on.
    async fn stop(self) {
        self.cut();
        let _ = self.task.await;
    }
}

/// A fake kubelet serving `v1.PodResourcesLister` on a unix socket; stops when dropped.
#[derive(Debug)]
pub struct FakeKubelet {
    socket_path: PathBuf,
    handle: KubeletHandle,
    serving: Option<Serving>,
}

impl FakeKubelet {
    /// Serves `scenario` on a new unix socket at `socket_path` (parent directories are
    /// created; an existing file there is replaced), on the current tokio runtime. The path
    /// must be at most [`MAX_SOCKET_PATH`] bytes.
    pub async fn start(socket_path: impl AsRef<Path>, scenario: Scenario) -> io::Result<FakeKubelet> {
        let socket_path = socket_path.as_ref().to_path_buf();
        let len = socket_path.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is {len} bytes long; a unix socket path must be at most {MAX_SOCKET_PATH} \
                     (sun_path): use a shorter directory",
                    socket_path.display()
                ),
            ));
        }
        if let Some(parent) = socket_path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        let handle = KubeletHandle::default();
        handle.set_scenario(scenario);
        let serving = Serving::bind(&socket_path, &handle)?;
        Ok(FakeKubelet {
            socket_path,
            handle,
            serving: Some(serving),
        })
    }

    /// Where it listens.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// The handle on the scenario and the call counts (clone-able, may outlive the server).
    pub fn handle(&self) -> KubeletHandle {
        self.handle.clone()
    }

    /// Short for `handle().set_pods(pods)`.
    pub fn set_pods(&self, pods: Vec<FakePod>) {
        self.handle.set_pods(pods);
    }

    /// Short for `handle().set_allocatable(cpu_ids)`.
    pub fn set_allocatable(&self, cpu_ids: &[i64]) {
        self.handle.set_allocatable(cpu_ids);
    }

    /// Short for `handle().set_behaviour(method, behaviour)`.
    pub fn set_behaviour(&self, method: &str, behaviour: Behaviour) {
        self.handle.set_behaviour(method, behaviour);
    }

    /// Short for `handle().calls(method)`.
    pub fn calls(&self, method: &str) -> usize {
        self.handle.calls(method)
    }

    /// Whether it is listening (between [`FakeKubelet::stop_serving`] and
    /// [`FakeKubelet::serve_again`] it is not).
    pub fn is_serving(&self) -> bool {
        self.serving.is_some()
    }

    /// A dead kubelet: open connections are cut and nothing listens any more, but the socket
    /// file stays, so connecting fails with `ECONNREFUSED` (as after the kubelet was killed).
    pub async fn stop_serving(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.stop().await;
        }
    }

    /// A kubelet starting: the socket file is removed and bound anew (a new inode), and
    /// served with the current scenario. Does nothing while serving.
    pub fn serve_again(&mut self) -> io::Result<()> {
        if self.serving.is_none() {
            self.serving = Some(Serving::bind(&self.socket_path, &self.handle)?);
        }
        Ok(())
    }

    /// A kubelet restart: [`FakeKubelet::stop_serving`] then [`FakeKubelet::serve_again`].
    /// Clients see their connections end and a new socket file at the same path.
    pub async fn restart(&mut self) -> io::Result<()> {
        self.stop_serving().await;
        self.serve_again()
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.cut();
        }
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

#[cfg(test)]
mod tests {
    use super::proto::pod_resources_lister_client::PodResourcesListerClient;
    use super::*;
    use std::os::unix::fs::MetadataExt as _;
    use std::time::Duration;
    use tokio::io::AsyncReadExt as _;
    use tonic::transport::{Channel, Endpoint};

    /// A tonic client on the unix socket at `path`, with tonic's default 4 MiB decoding cap.
    async fn client(path: &Path) -> PodResourcesListerClient<Channel> {
        let path = path.to_path_buf();
        // The URI is required by the API but unused: the connector ignores it.
        let channel = Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move { Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(UnixStream::connect(path).await?)) }
            }))
            .await
            .unwrap();
        PodResourcesListerClient::new(channel)
    }

    fn spark_scenario() -> Scenario {
        Scenario::default()
            .pod(
                FakePod::new("spark", "exec-1")
                    .container("spark-kubernetes-executor", &[2, 3])
                    .container("sidecar", &[]),
            )
            .pod(FakePod::new("kube-system", "kube-proxy-x").container("kube-proxy", &[]))
            .allocatable(&[1, 2, 3, 5, 6, 7])
    }

    async fn started(scenario: Scenario) -> (tempfile::TempDir, FakeKubelet) {
        let dir = tempfile::tempdir().unwrap();
        let kubelet = FakeKubelet::start(dir.path().join("pod-resources/kubelet.sock"), scenario)
            .await
            .unwrap();
        (dir, kubelet)
    }

    #[tokio::test]
    async fn list_and_allocatable_answer_the_scenario() {
        let (_dir, kubelet) = started(spark_scenario()).await;
        let mut c = client(kubelet.socket_path()).await;

        let pods = c
            .list(ListPodResourcesRequest {})
            .await
            .unwrap()
            .into_inner()
            .pod_resources;
        assert_eq!(pods.len(), 2);
        assert_eq!((pods[0].namespace.as_str(), pods[0].name.as_str()), ("spark", "exec-1"));
        assert_eq!(pods[0].containers.len(), 2);
        assert_eq!(pods[0].containers[0].name, "spark-kubernetes-executor");
        assert_eq!(pods[0].containers[0].cpu_ids, vec![2, 3]);
        assert_eq!(pods[0].containers[1].name, "sidecar");
        assert!(pods[0].containers[1].cpu_ids.is_empty());
        assert_eq!(pods[1].name, "kube-proxy-x");

        let alloc = c
            .get_allocatable_resources(AllocatableResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(alloc.cpu_ids, vec![1, 2, 3, 5, 6, 7]);
        assert!(alloc.devices.is_empty() && alloc.memory.is_empty());

        // Changes through the handle apply to the next call, on the same connection.
        kubelet.set_pods(vec![FakePod::new("spark", "exec-2").container("c", &[5])]);
        kubelet.set_allocatable(&[0, 1]);
        let pods = c
            .list(ListPodResourcesRequest {})
            .await
            .unwrap()
            .into_inner()
            .pod_resources;
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].name, "exec-2");
        assert_eq!(pods[0].containers[0].cpu_ids, vec![5]);
        let alloc = c
            .get_allocatable_resources(AllocatableResourcesRequest {})
            .await
            .unwrap();
        assert_eq!(alloc.into_inner().cpu_ids, vec![0, 1]);
    }

    #[tokio::test]
    async fn get_answers_the_named_pod_or_the_kubelets_not_found() {
        let (_dir, kubelet) = started(spark_scenario()).await;
        let mut c = client(kubelet.socket_path()).await;
        let pod = c
            .get(GetPodResourcesRequest {
                pod_name: "exec-1".into(),
                pod_namespace: "spark".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .pod_resources
            .unwrap();
        assert_eq!(pod.name, "exec-1");
        assert_eq!(pod.containers[0].cpu_ids, vec![2, 3]);

        // Right name, wrong namespace.
        let err = c
            .get(GetPodResourcesRequest {
                pod_name: "exec-1".into(),
                pod_namespace: "default".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unknown);
        assert_eq!(err.message(), "pod exec-1 in namespace default not found");
    }

    #[tokio::test]
    async fn unimplemented_and_injected_errors() {
        let scenario = spark_scenario().behaviour(GET_ALLOCATABLE, Behaviour::Unimplemented);
        let (_dir, kubelet) = started(scenario).await;
        let mut c = client(kubelet.socket_path()).await;
        let err = c
            .get_allocatable_resources(AllocatableResourcesRequest {})
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented);
        // The other methods are unaffected.
        assert_eq!(
            c.list(ListPodResourcesRequest {})
                .await
                .unwrap()
                .into_inner()
                .pod_resources
                .len(),
            2
        );

        kubelet.set_behaviour(
            LIST,
            Behaviour::Error(Code::ResourceExhausted, "rejected by rate limit".into()),
        );
        let err = c.list(ListPodResourcesRequest {}).await.unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted);
        assert_eq!(err.message(), "rejected by rate limit");

        kubelet.set_behaviour(LIST, Behaviour::Answer);
        assert!(c.list(ListPodResourcesRequest {}).await.is_ok());

        // A kubelet with the method behind a feature gate that is off.
        kubelet.set_behaviour(GET, Behaviour::feature_gate_off(GET));
        let err = c.get(GetPodResourcesRequest::default()).await.unwrap_err();
        assert_eq!(err.code(), Code::Unknown);
        assert_eq!(err.message(), "PodResources API Get method disabled");
    }

    #[tokio::test]
    async fn hang_never_answers_and_other_calls_still_do() {
        let (_dir, kubelet) = started(spark_scenario().behaviour(LIST, Behaviour::Hang)).await;
        let mut c = client(kubelet.socket_path()).await;
        let waited = tokio::time::timeout(Duration::from_millis(300), c.list(ListPodResourcesRequest {})).await;
        assert!(waited.is_err(), "a hanging List answered: {waited:?}");
        assert_eq!(kubelet.calls(LIST), 1, "the hanging call arrived");
        // Another stream on the same connection is served meanwhile.
        let alloc = c
            .get_allocatable_resources(AllocatableResourcesRequest {})
            .await
            .unwrap();
        assert_eq!(alloc.into_inner().cpu_ids.len(), 6);
    }

    #[tokio::test]
    async fn huge_exceeds_the_default_4_mib_cap() {
        const PODS: usize = 8_000;
        let size = prost::Message::encoded_len(&huge_list(PODS));
        // The per-pod size the Behaviour::Huge documentation gives.
        assert_eq!(size, 833 * PODS);
        assert!(size > 6 << 20);

        let (_dir, kubelet) = started(spark_scenario().behaviour(LIST, Behaviour::Huge { pods: PODS })).await;
        let mut c = client(kubelet.socket_path()).await;
        let err = c.list(ListPodResourcesRequest {}).await.unwrap_err();
        // tonic refuses a message over its decoding cap with OutOfRange.
        assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
        assert!(err.message().contains("message length too large"), "{err:?}");

        // The server itself has no cap: a client that allows more gets it all.
        let mut big = c.clone().max_decoding_message_size(64 << 20);
        let pods = big
            .list(ListPodResourcesRequest {})
            .await
            .unwrap()
            .into_inner()
            .pod_resources;
        assert_eq!(pods.len(), PODS);
        assert_eq!(pods[0].name.len(), 253);
    }

    #[tokio::test]
    async fn calls_are_counted_per_method() {
        let (_dir, kubelet) = started(spark_scenario()).await;
        let handle = kubelet.handle();
        let mut c = client(kubelet.socket_path()).await;
        for _ in 0..3 {
            c.list(ListPodResourcesRequest {}).await.unwrap();
        }
        c.get_allocatable_resources(AllocatableResourcesRequest {})
            .await
            .unwrap();
        let _ = c
            .get(GetPodResourcesRequest {
                pod_name: "nope".into(),
                pod_namespace: "spark".into(),
            })
            .await;
        assert_eq!(handle.calls(LIST), 3);
        assert_eq!(handle.calls(GET_ALLOCATABLE), 1);
        assert_eq!(handle.calls(GET), 1, "a failed call counts too");
        assert_eq!(handle.total_calls(), 5);
        handle.reset_calls();
        assert_eq!(handle.total_calls(), 0);
    }

    #[tokio::test]
    #[should_panic(expected = "no method")]
    async fn an_unknown_method_name_panics() {
        KubeletHandle::default().calls("list");
    }

    #[tokio::test]
    async fn too_long_socket_paths_are_refused() {
        let long = format!("/tmp/{}/kubelet.sock", "d".repeat(100));
        let err = FakeKubelet::start(&long, Scenario::default()).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(!Path::new(&long).exists());
    }

    #[tokio::test]
    async fn restart_replaces_the_socket_and_cuts_connections() {
        let (_dir, mut kubelet) = started(spark_scenario()).await;
        let path = kubelet.socket_path().to_path_buf();
        let inode = std::fs::metadata(&path).unwrap().ino();

        // A raw connection: once the server's HTTP/2 SETTINGS frame arrived it was accepted.
        let mut raw = UnixStream::connect(&path).await.unwrap();
        let mut head = [0u8; 9];
        raw.read_exact(&mut head).await.unwrap();
        assert_eq!(head[3], 0x4, "expected a SETTINGS frame, got {head:?}");

        kubelet.stop_serving().await;
        assert!(!kubelet.is_serving());
        // The connection ends (EOF, perhaps after a GOAWAY) ...
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(2), raw.read_to_end(&mut rest))
            .await
            .expect("the connection stayed open")
            .unwrap();
        // ... and the stale socket file refuses connections, as a dead kubelet's does.
        assert!(path.exists());
        let refused = UnixStream::connect(&path).await.unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);

        kubelet.serve_again().unwrap();
        assert_ne!(
            std::fs::metadata(&path).unwrap().ino(),
            inode,
            "the socket was not re-created"
        );
        let mut c = client(&path).await;
        assert_eq!(
            c.list(ListPodResourcesRequest {})
                .await
                .unwrap()
                .into_inner()
                .pod_resources
                .len(),
            2
        );

        // restart() does both in one go.
        let inode = std::fs::metadata(&path).unwrap().ino();
        kubelet.restart().await.unwrap();
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), inode);
        let mut c = client(&path).await;
        assert!(c.list(ListPodResourcesRequest {}).await.is_ok());
        assert_eq!(kubelet.calls(LIST), 2);
    }

    #[tokio::test]
    async fn dropping_stops_and_removes_the_socket() {
        let (_dir, kubelet) = started(spark_scenario()).await;
        let path = kubelet.socket_path().to_path_buf();
        let mut raw = UnixStream::connect(&path).await.unwrap();
        let mut head = [0u8; 9];
        raw.read_exact(&mut head).await.unwrap();
        drop(kubelet);
        assert!(!path.exists());
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(2), raw.read_to_end(&mut rest))
            .await
            .expect("the connection stayed open")
            .unwrap();
    }
}
