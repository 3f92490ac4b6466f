//! The directories drivers are looked up in: a pods file ([`ListDirectory`]), and the layers
//! the daemon puts in front of the API server ([`CachedDirectory`], [`Breaker`],
//! [`IndexedDirectory`]). The same layers carry the pod Events and node reads of
//! `driver-blocked-by-partition` ([`super::partition`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

// tokio's clock: the system's monotonic clock, except under a test's paused clock.
use tokio::time::Instant;

use nodemedic_rules::snapshot::{NodeStatus, PodEvent, PodInfo};

use super::network::Cidr;
use super::{LookupError, PodDirectory};
use crate::collect::FilePod;

/// A directory over a list of pods (a cluster-wide pods file). Its answers share the pods it
/// holds, in the list's order. It is indexed by name, label and IP when built, so that a scan's
/// lookups (one or more per executor) are not each a pass over the list: at 1,000 pods those
/// passes were 13% of a scan's instructions.
#[derive(Debug, Clone, Default)]
pub struct ListDirectory<'a> {
    pods: Vec<Listed<'a>>,
    networks: Vec<Cidr>,
    /// Positions in `pods`, in order, by the hash of what they are found by ([`Key`]). The
    /// index keeps no copy of a string: two keys with one hash only widen the candidates,
    /// which every answer filters by what it asked.
    index: HashMap<u64, Vec<usize>>,
}

/// A pod of a [`ListDirectory`]: one it holds, or one lent by the snapshot (a pod bound
/// here), copied into an `Arc` the first time it is an answer. Of a node's pods, only the few
/// that are drivers are answers.
#[derive(Debug, Clone)]
enum Listed<'a> {
    Held(Arc<PodInfo>),
    Lent(&'a PodInfo, OnceLock<Arc<PodInfo>>),
}

impl Listed<'_> {
    fn pod(&self) -> &PodInfo {
        match self {
            Listed::Held(p) => p,
            Listed::Lent(p, _) => p,
        }
    }

    fn shared(&self) -> Arc<PodInfo> {
        match self {
            Listed::Held(p) => p.clone(),
            Listed::Lent(p, copy) => copy.get_or_init(|| Arc::new((*p).clone())).clone(),
        }
    }
}

/// What a pod is found by in a [`ListDirectory`].
#[derive(Hash)]
enum Key<'a> {
    Name(&'a str, &'a str),
    Label(&'a str, &'a str),
    Ip(&'a str),
}

impl Key<'_> {
    fn hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        Hash::hash(self, &mut h);
        h.finish()
    }
}

impl ListDirectory<'static> {
    pub fn new(pods: Vec<PodInfo>) -> Self {
        Self::indexed(pods.into_iter().map(|p| Listed::Held(Arc::new(p))).collect())
    }
}

impl<'a> ListDirectory<'a> {
    /// The pods file's directory: `file` in its order, the pods bound here lent by `bound`
    /// (the snapshot's), whose positions [`FilePod::Bound`] gives.
    pub fn of_file(bound: &'a [PodInfo], file: Vec<FilePod>) -> Self {
        let pods = file.into_iter().filter_map(|p| match p {
            FilePod::Bound(i) => bound.get(i).map(|p| Listed::Lent(p, OnceLock::new())),
            FilePod::Elsewhere(p) => Some(Listed::Held(p)),
        });
        Self::indexed(pods.collect())
    }

    fn indexed(pods: Vec<Listed<'a>>) -> Self {
        let mut index: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, p) in pods.iter().map(Listed::pod).enumerate() {
            // Once per pod, should two of its keys share a hash.
            let mut add = |key: Key| {
                let at = index.entry(key.hash()).or_default();
                if at.last() != Some(&i) {
                    at.push(i);
                }
            };
            add(Key::Name(&p.namespace, &p.name));
            for (k, v) in &p.labels {
                add(Key::Label(k, v));
            }
            if let Some(ip) = &p.pod_ip {
                add(Key::Ip(ip));
            }
        }
        ListDirectory {
            pods,
            networks: vec![],
            index,
        }
    }

    /// The same directory, knowing the cluster's pod networks.
    pub fn with_networks(mut self, networks: Vec<Cidr>) -> Self {
        self.networks = networks;
        self
    }

    /// The positions of the pods that may be found by `key`, in order (a superset of those
    /// that are).
    fn posting(&self, key: Key) -> &[usize] {
        self.index.get(&key.hash()).map_or(&[], Vec::as_slice)
    }

    /// The pods at `positions`.
    fn at<'s>(&'s self, positions: &'s [usize]) -> impl Iterator<Item = &'s Listed<'a>> {
        positions.iter().map(|&i| &self.pods[i])
    }

    /// The positions that can match `selector`, in order: those of its rarest equality term
    /// (every match carries each term); `None` when it has no equality term.
    fn narrowed(&self, selector: &str) -> Option<&[usize]> {
        let mut rarest: Option<&[usize]> = None;
        for (k, v) in selector.split(',').filter_map(|t| t.split_once('=')) {
            let posting = self.posting(Key::Label(k.trim(), v.trim()));
            if rarest.is_none_or(|r| posting.len() < r.len()) {
                rarest = Some(posting);
            }
        }
        rarest
    }
}

/// Whether `labels` match an equality-only selector `a=b,c=d`.
pub(super) fn matches(pod: &PodInfo, selector: &str) -> bool {
    selector
        .split(',')
        .filter(|t| !t.is_empty())
        .all(|term| match term.split_once('=') {
            Some((k, v)) => pod.label(k.trim()) == Some(v.trim()),
            None => pod.label(term.trim()).is_some(),
        })
}

impl PodDirectory for ListDirectory<'_> {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<PodInfo>>, LookupError> {
        let mut found = self.at(self.posting(Key::Name(namespace, name)));
        let named = |p: &&Listed| p.pod().namespace == namespace && p.pod().name == name;
        Ok(found.find(named).map(Listed::shared))
    }
    async fn list(&self, namespace: Option<&str>, label_selector: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        let keep = |p: &&Listed| {
            let p = p.pod();
            namespace.is_none_or(|ns| p.namespace == ns) && matches(p, label_selector)
        };
        Ok(match self.narrowed(label_selector) {
            Some(at) => self.at(at).filter(keep).map(Listed::shared).collect(),
            None => self.pods.iter().filter(keep).map(Listed::shared).collect(),
        })
    }
    async fn by_ip(&self, ip: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        let found = self
            .at(self.posting(Key::Ip(ip)))
            .filter(|p| p.pod().pod_ip.as_deref() == Some(ip));
        Ok(found.map(Listed::shared).collect())
    }
    async fn pod_networks(&self) -> Result<Vec<Cidr>, LookupError> {
        Ok(self.networks.clone())
    }
    /// A pods file holds no Events.
    async fn pod_events(&self, _namespace: &str, _uid: &str) -> Result<Vec<PodEvent>, LookupError> {
        Ok(vec![])
    }
    /// ... and no nodes.
    async fn node(&self, _name: &str) -> Result<Option<NodeStatus>, LookupError> {
        Ok(None)
    }
}

/// A [`PodDirectory`] in front of another that remembers answers for `ttl` and allows at
/// most `budget` lookups per `ttl` (beyond it, lookups fail with "rate limited" and are
/// retried on a later cycle). Pod Events and node status change without a pod change that the
/// pod watch would see, so they are remembered for [`STATUS_TTL`] at most.
#[derive(Debug)]
pub struct CachedDirectory<D> {
    pub(super) inner: D,
    ttl: Duration,
    budget: u32,
    state: Mutex<CacheState>,
}

/// The longest a pod's Events or a node's status are remembered.
pub const STATUS_TTL: Duration = Duration::from_secs(60);

/// Remembered answers by key, with when they were fetched.
type Slot<V> = HashMap<String, (Instant, V)>;

#[derive(Debug, Default)]
struct CacheState {
    /// Pod answers that succeeded, their pods shared with every answer.
    entries: Slot<Arc<Vec<Arc<PodInfo>>>>,
    /// Pod Events by pod UID.
    events: Slot<Arc<Vec<PodEvent>>>,
    /// Nodes by name.
    nodes: Slot<Option<NodeStatus>>,
    /// ResourceClaim UIDs by `namespace/name`.
    claims: Slot<Option<String>>,
    window_start: Option<Instant>,
    used: u32,
    lookups_total: u64,
}

impl<D: PodDirectory> CachedDirectory<D> {
    pub fn new(inner: D, ttl: Duration, budget: u32) -> Self {
        CachedDirectory {
            inner,
            ttl,
            budget,
            state: Mutex::new(CacheState::default()),
        }
    }

    /// Lookups that reached the inner directory so far.
    pub fn lookups(&self) -> u64 {
        self.state.lock().map_or(0, |s| s.lookups_total)
    }

    /// Forgets every answer (the pod watch listed again: changes may have been missed).
    pub fn forget_all(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.entries.clear();
            st.events.clear();
            st.nodes.clear();
            st.claims.clear();
        }
    }

    /// Forgets every answer that `pod` may have changed: a lookup of it by name or IP, a
    /// list it is in or that its labels match, and, for an executor, the lookups of its
    /// driver (by owner, application and driver URL). Called when the pod watch sees a Spark
    /// pod change, so that the next lookup asks the API server instead of waiting out the TTL.
    pub fn forget(&self, pod: &PodInfo) {
        let Ok(mut st) = self.state.lock() else { return };
        st.events.remove(&pod.uid);
        let mut names = vec![format!("get {}/{}", pod.namespace, pod.name)];
        names.extend(pod.pod_ip.as_ref().map(|ip| format!("ip {ip}")));
        if nodemedic_rules::spark::is_executor(pod) {
            if let Some(owner) = pod.controller() {
                names.push(format!("get {}/{}", pod.namespace, owner.name));
            }
            if let Some(host) = pod.spark_driver_url.as_deref().and_then(super::driver_url_host) {
                names.push(format!("ip {host}"));
            }
        }
        let driver_app = pod.spark_app().filter(|_| nodemedic_rules::spark::is_executor(pod));
        st.entries.retain(|key, (_, value)| {
            if names.iter().any(|n| n == key) {
                return false;
            }
            if value.iter().any(|p| p.uid == pod.uid) {
                return false;
            }
            let Some((scope, selector)) = key.strip_prefix("list ").and_then(|k| k.split_once(' ')) else {
                return true;
            };
            let in_scope = scope == "*" || scope == pod.namespace;
            let selects_pod = matches(pod, selector);
            // An executor's driver list: the drivers of its namespace (one list answers them
            // all) or of its application.
            let selects_its_driver = driver_app.is_some_and(|app| {
                selector.split(',').any(|t| t.trim() == "spark-role=driver")
                    && selector
                        .split(',')
                        .all(|t| t.trim() == "spark-role=driver" || t.trim() == format!("spark-app-selector={app}"))
            });
            !(in_scope && (selects_pod || selects_its_driver))
        });
    }

    /// The answer for `key` in `slot`, when fetched less than `ttl` ago.
    fn cached<V: Clone>(&self, slot: fn(&mut CacheState) -> &mut Slot<V>, ttl: Duration, key: &str) -> Option<V> {
        let mut st = self.state.lock().ok()?;
        let map = slot(&mut st);
        map.retain(|_, (at, _)| at.elapsed() < ttl);
        map.get(key).map(|(_, v)| v.clone())
    }

    /// Takes one lookup from the budget, or says no.
    fn admit(&self) -> bool {
        let Ok(mut st) = self.state.lock() else { return false };
        let now = Instant::now();
        if st.window_start.is_none_or(|w| now.duration_since(w) >= self.ttl) {
            st.window_start = Some(now);
            st.used = 0;
        }
        if st.used >= self.budget {
            return false;
        }
        st.used += 1;
        st.lookups_total += 1;
        true
    }

    /// The answer for `key` in `slot`: remembered for `ttl`, or fetched (within the budget) and
    /// remembered when it succeeded (errors are not: the next cycle tries again).
    async fn through_slot<V: Clone, F: Future<Output = Result<V, LookupError>>>(
        &self,
        slot: fn(&mut CacheState) -> &mut Slot<V>,
        ttl: Duration,
        key: String,
        fetch: impl FnOnce() -> F,
    ) -> Result<V, LookupError> {
        if let Some(hit) = self.cached(slot, ttl, &key) {
            return Ok(hit);
        }
        if !self.admit() {
            return Err(LookupError::RateLimited);
        }
        let value = fetch().await?;
        if let Ok(mut st) = self.state.lock() {
            slot(&mut st).insert(key, (Instant::now(), value.clone()));
        }
        Ok(value)
    }

    /// [`Self::through_slot`] for pod answers.
    async fn through<F: Future<Output = Result<Vec<Arc<PodInfo>>, LookupError>>>(
        &self,
        key: String,
        fetch: impl FnOnce() -> F,
    ) -> Result<Arc<Vec<Arc<PodInfo>>>, LookupError> {
        self.through_slot(
            |s| &mut s.entries,
            self.ttl,
            key,
            || async { fetch().await.map(Arc::new) },
        )
        .await
    }
}

impl<D: PodDirectory> PodDirectory for CachedDirectory<D> {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<PodInfo>>, LookupError> {
        let key = format!("get {namespace}/{name}");
        let v = self
            .through(key, || async {
                self.inner.get(namespace, name).await.map(|p| p.into_iter().collect())
            })
            .await?;
        Ok(v.first().cloned())
    }
    async fn list(&self, namespace: Option<&str>, label_selector: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        self.list_where(namespace, label_selector, |_| true).await
    }
    async fn list_where(
        &self,
        namespace: Option<&str>,
        label_selector: &str,
        keep: impl Fn(&PodInfo) -> bool,
    ) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        let key = format!("list {} {label_selector}", namespace.unwrap_or("*"));
        let all = self.through(key, || self.inner.list(namespace, label_selector)).await?;
        Ok(all.iter().filter(|p| keep(p)).cloned().collect())
    }
    async fn by_ip(&self, ip: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        Ok(self
            .through(format!("ip {ip}"), || self.inner.by_ip(ip))
            .await?
            .to_vec())
    }
    async fn pod_networks(&self) -> Result<Vec<Cidr>, LookupError> {
        self.inner.pod_networks().await
    }
    async fn pod_events(&self, namespace: &str, uid: &str) -> Result<Vec<PodEvent>, LookupError> {
        let ttl = self.ttl.min(STATUS_TTL);
        let events = self
            .through_slot(
                |s| &mut s.events,
                ttl,
                uid.to_string(),
                || async { self.inner.pod_events(namespace, uid).await.map(Arc::new) },
            )
            .await?;
        Ok(events.to_vec())
    }
    async fn node(&self, name: &str) -> Result<Option<NodeStatus>, LookupError> {
        let ttl = self.ttl.min(STATUS_TTL);
        self.through_slot(|s| &mut s.nodes, ttl, name.to_string(), || self.inner.node(name))
            .await
    }
    async fn resource_claim(&self, namespace: &str, name: &str) -> Result<Option<String>, LookupError> {
        let ttl = self.ttl.min(STATUS_TTL);
        self.through_slot(
            |s| &mut s.claims,
            ttl,
            format!("{namespace}/{name}"),
            || self.inner.resource_claim(namespace, name),
        )
        .await
    }
}

/// A [`PodDirectory`] that stops asking after the first failure: once a lookup failed (the API
/// server unavailable, forbidden), every later one fails the same way without a request until
/// [`Breaker::reset`]. One pass of driver lookups over 200 executors during an outage costs one
/// request, not 200.
#[derive(Debug)]
pub struct Breaker<D> {
    pub inner: D,
    tripped: Mutex<Option<LookupError>>,
}

impl<D: PodDirectory> Breaker<D> {
    pub fn new(inner: D) -> Self {
        Breaker {
            inner,
            tripped: Mutex::new(None),
        }
    }

    /// Closes the breaker again (at the start of a pass).
    pub fn reset(&self) {
        if let Ok(mut t) = self.tripped.lock() {
            *t = None;
        }
    }

    async fn guarded<T>(&self, call: impl Future<Output = Result<T, LookupError>>) -> Result<T, LookupError> {
        if let Some(e) = self.tripped.lock().ok().and_then(|t| t.clone()) {
            return Err(e);
        }
        let result = call.await;
        if let Err(e @ LookupError::Failed(_)) = &result {
            if let Ok(mut t) = self.tripped.lock() {
                *t = Some(e.clone());
            }
        }
        result
    }
}

impl<D: PodDirectory> PodDirectory for Breaker<D> {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<PodInfo>>, LookupError> {
        self.guarded(self.inner.get(namespace, name)).await
    }
    async fn list(&self, namespace: Option<&str>, label_selector: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        self.guarded(self.inner.list(namespace, label_selector)).await
    }
    async fn list_where(
        &self,
        namespace: Option<&str>,
        label_selector: &str,
        keep: impl Fn(&PodInfo) -> bool,
    ) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        self.guarded(self.inner.list_where(namespace, label_selector, keep))
            .await
    }
    async fn by_ip(&self, ip: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        self.guarded(self.inner.by_ip(ip)).await
    }
    async fn pod_networks(&self) -> Result<Vec<Cidr>, LookupError> {
        self.guarded(self.inner.pod_networks()).await
    }
    async fn pod_events(&self, namespace: &str, uid: &str) -> Result<Vec<PodEvent>, LookupError> {
        self.guarded(self.inner.pod_events(namespace, uid)).await
    }
    async fn node(&self, name: &str) -> Result<Option<NodeStatus>, LookupError> {
        self.guarded(self.inner.node(name)).await
    }
    async fn resource_claim(&self, namespace: &str, name: &str) -> Result<Option<String>, LookupError> {
        self.guarded(self.inner.resource_claim(namespace, name)).await
    }
}

/// The label selector of every driver of a namespace.
const DRIVERS: &str = "spark-role=driver";

/// A [`PodDirectory`] that answers driver lookups from one list of each namespace's drivers
/// (`spark-role=driver`), read through `inner` (the cache, so once per TTL): a node whose
/// executors belong to 25 applications in one namespace costs one LIST per TTL, not 25 GETs.
/// A GET of a pod that is not in the list (a driver created since, one deleted, a client-mode
/// driver without the label) and lookups by IP go to `inner` as they are; so do lists whose
/// selector is not an equality selector containing `spark-role=driver`.
#[derive(Debug)]
pub struct IndexedDirectory<D> {
    pub inner: D,
}

impl<D: PodDirectory> IndexedDirectory<D> {
    /// The drivers of `namespace` that `keep` accepts, from the one list of them; `None` when
    /// that list cannot be had.
    async fn drivers(&self, namespace: &str, keep: impl Fn(&PodInfo) -> bool) -> Option<Vec<Arc<PodInfo>>> {
        self.inner.list_where(Some(namespace), DRIVERS, keep).await.ok()
    }
}

/// Whether `selector` is equality terms only (`a=b,c=d`) and selects drivers.
pub(super) fn narrows_drivers(selector: &str) -> bool {
    let terms: Vec<&str> = selector.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
    terms.contains(&DRIVERS)
        && terms.iter().all(|t| {
            t.split_once('=')
                .is_some_and(|(k, v)| !k.ends_with('!') && !v.starts_with('='))
        })
}

impl<D: PodDirectory> PodDirectory for IndexedDirectory<D> {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<PodInfo>>, LookupError> {
        if let Some(found) = self
            .drivers(namespace, |p| p.name == name)
            .await
            .and_then(|list| list.into_iter().next())
        {
            return Ok(Some(found));
        }
        self.inner.get(namespace, name).await
    }
    async fn list(&self, namespace: Option<&str>, label_selector: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        if let (Some(ns), true) = (namespace, narrows_drivers(label_selector)) {
            if let Some(list) = self.drivers(ns, |p| matches(p, label_selector)).await {
                return Ok(list);
            }
        }
        self.inner.list(namespace, label_selector).await
    }
    async fn by_ip(&self, ip: &str) -> Result<Vec<Arc<PodInfo>>, LookupError> {
        self.inner.by_ip(ip).await
    }
    async fn pod_networks(&self) -> Result<Vec<Cidr>, LookupError> {
        self.inner.pod_networks().await
    }
    async fn pod_events(&self, namespace: &str, uid: &str) -> Result<Vec<PodEvent>, LookupError> {
        self.inner.pod_events(namespace, uid).await
    }
    async fn node(&self, name: &str) -> Result<Option<NodeStatus>, LookupError> {
        self.inner.node(name).await
    }
    async fn resource_claim(&self, namespace: &str, name: &str) -> Result<Option<String>, LookupError> {
        self.inner.resource_claim(namespace, name).await
    }
}
