//! The in-memory object store: one global, increasing resource version stamped on every
//! write, objects keyed like etcd (`<namespace>/<name>`, so lists come back in the API
//! server's order), and the history of changes that watches replay and paginated or exact
//! lists are served from.
//!
//! Every write goes through [`State::commit`], which bumps the resource version, records the
//! change and hands it to the open watches of that storage while still holding the lock, so
//! a watch sees every change exactly once and in order. [`Store::compact`] forgets the
//! history: resource versions older than the compaction then answer 410 Gone, as after an
//! etcd compaction.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::patch::{self, JsonPatchError};
use super::resources::{self, ResourceType};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::{self, ApiError};
use super::util;

/// The first resource version; everything before it counts as compacted.
const INITIAL_RV: u64 = 1000;
/// Changes kept for watches and consistent lists before the oldest are forgotten.
const HISTORY_LIMIT: usize = 100_000;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One write, as watches see it.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub storage: &'static str,
    pub kind: ChangeType,
    /// The object after the change; for deletions its last state stamped with the
    /// deletion's resource version.
    pub object: Value,
    /// The object before the change (modifications and deletions).
    pub prev: Option<Value>,
}

#[derive(Debug)]
struct Subscriber {
    storage: &'static str,
    tx: mpsc::UnboundedSender<Arc<Change>>,
}

#[derive(Debug)]
struct State {
    rv: u64,
    /// Changes at or before this resource version are forgotten.
    compacted_rv: u64,
    objects: HashMap<&'static str, BTreeMap<String, Value>>,
    history: VecDeque<Arc<Change>>,
    subscribers: Vec<Subscriber>,
    graceful_pod_deletion: bool,
    garbage_collection: bool,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    metrics: Mutex<String>,
}

/// A clone-able handle to the double's objects. Writes through it behave like writes by some
/// other client of the API server: they get resource versions and are seen by watches.
///
/// The direct methods are for test fixtures and panic on misuse (an unknown kind, a missing
/// name, creating twice); requests over HTTP never panic.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

static EMPTY: BTreeMap<String, Value> = BTreeMap::new();

/// `<namespace>/<name>` or `<name>`, the order etcd keys sort in.
fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn key_of(obj: &Value) -> String {
    key(
        str_at(obj, "/metadata/namespace"),
        str_at(obj, "/metadata/name").unwrap_or(""),
    )
}

fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let m = obj.as_object_mut()?;
    if !m.get("metadata").is_some_and(Value::is_object) {
        m.insert("metadata".into(), json!({}));
    }
    m.get_mut("metadata").and_then(Value::as_object_mut)
}

/// Equal apart from `metadata.resourceVersion`: such a write is a no-op the API server does
/// not store.
fn same_content(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}

/// The parameters of a list request that shape the answer.
#[derive(Debug, Default)]
pub(crate) struct ListQuery {
    pub label: LabelSelector,
    pub field: FieldSelector,
    pub limit: Option<u64>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// How an update arrives.
#[derive(Debug)]
pub(crate) enum WriteOp {
    /// PUT of a whole object.
    Replace(Value),
    /// PATCH with its content type.
    Patch(PatchType, Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    Merge,
    Strategic,
    Json,
    /// Server-side apply to an existing object, modelled as a merge of the applied fields:
    /// objects merge key by key, everything else (lists included) is replaced.
    Apply,
}

/// `DeleteOptions`, from the body and the query.
#[derive(Debug, Default)]
pub(crate) struct DeleteOpts {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub orphan: bool,
    pub dry_run: bool,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WatchStart {
    /// No resource version or `"0"`: the current objects as synthetic ADDED events first.
    Current,
    /// Every change after this resource version.
    After(u64),
}

/// An open watch's view of the store.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub initial: Vec<Arc<Change>>,
    pub rx: mpsc::UnboundedReceiver<Arc<Change>>,
    /// The store's resource version when the watch opened.
    pub rv: u64,
}

impl State {
    fn map(&self, storage: &str) -> &BTreeMap<String, Value> {
        self.objects.get(storage).unwrap_or(&EMPTY)
    }

    fn get(&self, storage: &str, k: &str) -> Option<&Value> {
        self.objects.get(storage)?.get(k)
    }

    /// Records one write: stamps the next resource version on `object`, stores or removes
    /// it, appends the change to the history and sends it to the open watches.
    fn commit(&mut self, storage: &'static str, kind: ChangeType, mut object: Value, prev: Option<Value>) -> Value {
        self.rv += 1;
        let rv = self.rv;
        if let Some(m) = meta_mut(&mut object) {
            m.insert("resourceVersion".into(), rv.to_string().into());
        }
        let k = key_of(&object);
        let map = self.objects.entry(storage).or_default();
        match kind {
            ChangeType::Added | ChangeType::Modified => {
                map.insert(k, object.clone());
            }
            ChangeType::Deleted => {
                map.remove(&k);
            }
        }
        let change = Arc::new(Change {
            rv,
            storage,
            kind,
            object: object.clone(),
            prev,
        });
        self.history.push_back(change.clone());
        while self.history.len() > HISTORY_LIMIT {
            if let Some(old) = self.history.pop_front() {
                self.compacted_rv = old.rv;
            }
        }
        self.subscribers.retain(|s| {
            if s.storage == storage {
                s.tx.send(change.clone()).is_ok()
            } else {
                !s.tx.is_closed()
            }
        });
        object
    }

    /// The objects of `storage` as they were at resource version `at`, rebuilt from the
    /// history when something changed since.
    fn view_at(&self, storage: &str, at: u64) -> Result<Cow<'_, BTreeMap<String, Value>>, ApiError> {
        if at < self.compacted_rv {
            return Err(ApiError::too_old(at, self.compacted_rv));
        }
        let changed_since = self
            .history
            .iter()
            .rev()
            .take_while(|c| c.rv > at)
            .any(|c| c.storage == storage);
        if !changed_since {
            return Ok(Cow::Borrowed(self.map(storage)));
        }
        let mut map = self.map(storage).clone();
        for c in self.history.iter().rev().take_while(|c| c.rv > at) {
            if c.storage != storage {
                continue;
            }
            let k = key_of(&c.object);
            match (&c.kind, &c.prev) {
                (ChangeType::Added, _) => {
                    map.remove(&k);
                }
                (_, Some(prev)) => {
                    map.insert(k, prev.clone());
                }
                (_, None) => {}
            }
        }
        Ok(Cow::Owned(map))
    }

    /// A name for `generateName` not yet taken.
    fn generate_name(&self, storage: &str, namespace: Option<&str>, prefix: &str) -> String {
        loop {
            let name = format!("{prefix}{}", util::name_suffix());
            if self.get(storage, &key(namespace, &name)).is_none() {
                return name;
            }
        }
    }

    /// A dry-run pod create fails when a webhook that would be called has side effects
    /// (`sideEffects: Unknown` or `Some`): the API server cannot promise it skips the write.
    fn check_dry_run_webhooks(&self) -> Result<(), ApiError> {
        for storage in ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"] {
            for cfg in self.map(storage).values() {
                for hook in cfg.get("webhooks").and_then(Value::as_array).into_iter().flatten() {
                    let side_effects = hook.get("sideEffects").and_then(Value::as_str).unwrap_or("Unknown");
                    if !matches!(side_effects, "Unknown" | "Some") || !webhook_matches_pod_create(hook) {
                        continue;
                    }
                    let name = hook.get("name").and_then(Value::as_str).unwrap_or("");
                    return Err(ApiError::bad_request(format!(
                        "admission webhook \"{name}\" has side effects and does not support dry run"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The create path shared by HTTP creates and [`Store::create`].
    fn insert_new(
        &mut self,
        rt: &'static ResourceType,
        path_namespace: Option<&str>,
        body: Value,
        from_api: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request("the body of the request must be a JSON object"));
        }
        check_type_meta(rt, &body)?;
        let mut obj = rt.to_storage(body);
        if obj.get("metadata").is_some_and(|m| !m.is_object()) {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
        let storage = rt.storage;
        let Some(meta) = meta_mut(&mut obj) else {
            return Err(ApiError::bad_request("the body of the request must be a JSON object"));
        };
        // Namespace: the URL's wins, a different one in the body is an error.
        let namespace = if rt.namespaced {
            let body_ns = meta.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty());
            let ns = match (path_namespace, body_ns) {
                (Some(p), Some(b)) if p != b => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                (Some(p), _) => p.to_string(),
                (None, Some(b)) => b.to_string(),
                (None, None) => "default".to_string(),
            };
            meta.insert("namespace".into(), ns.clone().into());
            Some(ns)
        } else {
            meta.remove("namespace");
            None
        };
        // Name, or one generated from generateName.
        let given = meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let prefix = meta
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let name = match (given, prefix) {
            (Some(n), _) => n,
            (None, Some(p)) => self.generate_name(storage, namespace.as_deref(), &p),
            (None, None) => {
                return Err(ApiError::invalid(
                    rt,
                    "",
                    &[(
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
        };
        if let Err(why) = util::validate_subdomain(&name) {
            return Err(ApiError::invalid(
                rt,
                &name,
                &[(
                    "metadata.name",
                    "FieldValueInvalid",
                    format!("Invalid value: \"{name}\": {why}"),
                )],
            ));
        }
        meta.insert("name".into(), name.clone().into());
        meta.remove("resourceVersion");
        if from_api || meta.get("uid").and_then(Value::as_str).is_none_or(str::is_empty) {
            meta.insert("uid".into(), util::new_uid().into());
        }
        if from_api || meta.get("creationTimestamp").is_none_or(Value::is_null) {
            meta.insert("creationTimestamp".into(), util::now_rfc3339().into());
        }
        if from_api {
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
        }
        resources::apply_create_defaults(rt, &mut obj, from_api);
        if from_api {
            resources::validate(rt, &obj, &name)?;
        }
        let k = key(namespace.as_deref(), &name);
        if self.get(storage, &k).is_some() {
            return Err(ApiError::already_exists(rt, &name));
        }
        if dry_run {
            if storage == "pods" {
                self.check_dry_run_webhooks()?;
            }
            return Ok(obj);
        }
        Ok(self.commit(storage, ChangeType::Added, obj, None))
    }

    /// The update path shared by PUT, PATCH and their `/status` forms.
    fn write(
        &mut self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        op: WriteOp,
        status_only: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let k = key(namespace, name);
        let existing = self
            .get(rt.storage, &k)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let mut new = match op {
            WriteOp::Replace(body) => {
                if !body.is_object() {
                    return Err(ApiError::bad_request("the body of the request must be a JSON object"));
                }
                check_type_meta(rt, &body)?;
                if rt.custom_resource && str_at(&body, "/metadata/resourceVersion").is_none_or(str::is_empty) {
                    // `AllowUnconditionalUpdate` is false for custom resources.
                    return Err(ApiError::unconditional_update(rt, name));
                }
                body
            }
            WriteOp::Patch(kind, patch_body) => {
                let mut doc = rt.present(&existing);
                match kind {
                    PatchType::Merge | PatchType::Apply => {
                        if !patch_body.is_object() {
                            return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                        }
                        patch::merge_patch(&mut doc, &patch_body);
                    }
                    PatchType::Strategic => {
                        patch::strategic_merge_patch(&mut doc, &patch_body).map_err(ApiError::bad_request)?
                    }
                    PatchType::Json => match patch::json_patch(&mut doc, &patch_body) {
                        Ok(()) => {}
                        Err(JsonPatchError::Malformed(m)) => return Err(ApiError::bad_request(m)),
                        Err(JsonPatchError::Failed(m)) => return Err(ApiError::new(422, m)),
                    },
                }
                if !doc.is_object() {
                    return Err(ApiError::new(422, "the patched object is not a JSON object"));
                }
                check_type_meta(rt, &doc)?;
                doc
            }
        };
        let Some(meta) = meta_mut(&mut new) else {
            return Err(ApiError::bad_request("the body of the request must be a JSON object"));
        };
        // Identity: the name and namespace are the URL's, the UID and resource version act as
        // preconditions.
        name_from_url(meta, name)?;
        if rt.namespaced {
            let ns = namespace.unwrap_or("default");
            match meta.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                Some(b) if b != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    meta.insert("namespace".into(), ns.into());
                }
            }
        } else {
            meta.remove("namespace");
        }
        let old_uid = str_at(&existing, "/metadata/uid").unwrap_or("").to_string();
        if let Some(uid) = meta.get("uid").and_then(Value::as_str).filter(|s| !s.is_empty())
            && uid != old_uid
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}"),
            ));
        }
        let old_rv = str_at(&existing, "/metadata/resourceVersion").unwrap_or("");
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty() && rv != old_rv)
        {
            return Err(ApiError::stale(rt, name));
        }
        let mut new = rt.to_storage(new);
        // Server-owned metadata survives any write.
        if let (Some(nm), Some(om)) = (meta_mut(&mut new), existing.get("metadata").and_then(Value::as_object)) {
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "resourceVersion",
            ] {
                match om.get(f) {
                    Some(v) => nm.insert(f.into(), v.clone()),
                    None => nm.remove(f),
                };
            }
        }
        if rt.status_subresource {
            if status_only && rt.custom_resource {
                // The custom resource status strategy: the old object with the new status.
                let mut merged = existing.clone();
                if let Some(m) = merged.as_object_mut() {
                    match new.get("status") {
                        Some(st) => m.insert("status".into(), st.clone()),
                        None => m.remove("status"),
                    };
                }
                new = merged;
            } else if status_only {
                // The status endpoint changes status (and labels, annotations), never spec.
                let mut merged = new.clone();
                if let (Some(m), Some(old)) = (merged.as_object_mut(), existing.as_object()) {
                    match old.get("spec") {
                        Some(spec) => m.insert("spec".into(), spec.clone()),
                        None => m.remove("spec"),
                    };
                    if let Some(Value::Object(meta)) = m.get_mut("metadata") {
                        match old.get("metadata").and_then(|om| om.get("ownerReferences")) {
                            Some(refs) => meta.insert("ownerReferences".into(), refs.clone()),
                            None => meta.remove("ownerReferences"),
                        };
                    }
                }
                new = merged;
            } else if let Some(m) = new.as_object_mut() {
                // The main endpoint ignores status changes.
                match existing.get("status") {
                    Some(st) => m.insert("status".into(), st.clone()),
                    None => m.remove("status"),
                };
            }
        }
        resources::validate(rt, &new, name)?;
        if same_content(&new, &existing) || dry_run {
            return Ok(if dry_run { new } else { existing });
        }
        Ok(self.commit(rt.storage, ChangeType::Modified, new, Some(existing)))
    }

    /// Removes an object now, and with garbage collection on, its dependents.
    fn remove_now(&mut self, storage: &'static str, k: &str, orphan: bool) -> Option<Value> {
        let existing = self.get(storage, k)?.clone();
        let mut last = existing.clone();
        if storage == "pods"
            && let Some(m) = meta_mut(&mut last)
        {
            if !m.contains_key("deletionTimestamp") {
                m.insert("deletionTimestamp".into(), util::now_rfc3339().into());
            }
            m.insert("deletionGracePeriodSeconds".into(), 0.into());
        }
        let deleted = self.commit(storage, ChangeType::Deleted, last, Some(existing));
        if self.garbage_collection
            && let Some(uid) = str_at(&deleted, "/metadata/uid")
        {
            self.collect_dependents(uid.to_string(), orphan);
        }
        Some(deleted)
    }

    /// The garbage collector's part: dependents whose owners are all gone are deleted (in
    /// the background, immediately here); with `orphan` their reference is removed instead.
    fn collect_dependents(&mut self, owner_uid: String, orphan: bool) {
        let mut work = vec![owner_uid];
        while let Some(gone) = work.pop() {
            let live_uids: std::collections::HashSet<String> = self
                .objects
                .values()
                .flat_map(|m| m.values())
                .filter_map(|o| str_at(o, "/metadata/uid").map(str::to_string))
                .collect();
            let mut dependents = Vec::new();
            for (storage, map) in &self.objects {
                for (k, o) in map {
                    let refs = o.pointer("/metadata/ownerReferences").and_then(Value::as_array);
                    if refs.is_some_and(|r| r.iter().any(|r| r.get("uid").and_then(Value::as_str) == Some(&gone))) {
                        dependents.push((*storage, k.clone(), o.clone()));
                    }
                }
            }
            for (storage, k, o) in dependents {
                let refs = o
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let remaining: Vec<Value> = refs
                    .into_iter()
                    .filter(|r| {
                        r.get("uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| u != gone && live_uids.contains(u))
                    })
                    .collect();
                if remaining.is_empty() && !orphan {
                    if let Some(d) = self.remove_now_plain(storage, &k)
                        && let Some(uid) = str_at(&d, "/metadata/uid")
                    {
                        work.push(uid.to_string());
                    }
                } else {
                    let mut updated = o.clone();
                    if let Some(m) = meta_mut(&mut updated) {
                        if remaining.is_empty() {
                            m.remove("ownerReferences");
                        } else {
                            m.insert("ownerReferences".into(), Value::Array(remaining));
                        }
                    }
                    self.commit(storage, ChangeType::Modified, updated, Some(o));
                }
            }
        }
    }

    fn remove_now_plain(&mut self, storage: &'static str, k: &str) -> Option<Value> {
        let existing = self.get(storage, k)?.clone();
        Some(self.commit(storage, ChangeType::Deleted, existing.clone(), Some(existing)))
    }
}

/// Whether an admission webhook's rules select pod CREATE in the core group (namespace and
/// object selectors are not evaluated).
fn webhook_matches_pod_create(hook: &Value) -> bool {
    let has = |rule: &Value, field: &str, wanted: &[&str]| {
        rule.get(field)
            .and_then(Value::as_array)
            .is_some_and(|l| l.iter().filter_map(Value::as_str).any(|s| wanted.contains(&s)))
    };
    hook.get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            has(r, "operations", &["CREATE", "*"])
                && has(r, "apiGroups", &["", "*"])
                && has(r, "apiVersions", &["v1", "*"])
                && has(r, "resources", &["pods", "*", "*/*"])
        })
}

/// An `apiVersion` or `kind` in the body must be the endpoint's.
fn check_type_meta(rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    if let Some(av) = str_at(body, "/apiVersion")
        && av != rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if let Some(kind) = str_at(body, "/kind")
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    Ok(())
}

/// A continue token: base64url of `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}`,
/// the API server's own format.
fn encode_continue(rv: u64, last_key: &str) -> String {
    let body = json!({ "v": "meta.k8s.io/v1", "rv": rv, "start": format!("{last_key}\u{0}") });
    util::base64_url(body.to_string().as_bytes())
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    let bad = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = util::base64_url_decode(token).ok_or_else(|| bad("illegal base64 data"))?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(&e.to_string()))?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(bad("server does not recognize this encoded key"));
    }
    let rv = v.get("rv").and_then(Value::as_u64).filter(|rv| *rv > 0);
    let start = v.get("start").and_then(Value::as_str);
    match (rv, start) {
        (Some(rv), Some(start)) => Ok((rv, start.trim_end_matches('\u{0}').to_string())),
        _ => Err(bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")),
    }
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("resourceVersion: Invalid value: \"{s}\": must be a number")))
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

impl Store {
    /// An empty store.
    pub fn new() -> Store {
        Store {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    rv: INITIAL_RV,
                    compacted_rv: INITIAL_RV,
                    objects: HashMap::new(),
                    history: VecDeque::new(),
                    subscribers: Vec::new(),
                    graceful_pod_deletion: false,
                    garbage_collection: false,
                }),
                metrics: Mutex::new(String::new()),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn type_of(obj: &Value) -> &'static ResourceType {
        let av = str_at(obj, "/apiVersion").unwrap_or("");
        let kind = str_at(obj, "/kind").unwrap_or("");
        resources::find_by_kind(av, kind)
            .unwrap_or_else(|| panic!("Store: no resource serves apiVersion {av:?} kind {kind:?}"))
    }

    fn named(resource: &str) -> &'static ResourceType {
        resources::resolve(resource).unwrap_or_else(|| panic!("Store: unknown resource {resource:?}"))
    }

    /// Inserts an object as if some client had created it: the type comes from `apiVersion`
    /// and `kind`, a missing `uid` and `creationTimestamp` are filled (given ones are kept, so
    /// fixtures can pin pod UIDs), `generateName` works, pods get the API server's defaults
    /// (missing `status.phase` is `Pending`, `qosClass` computed, the DefaultTolerationSeconds
    /// tolerations of `node.kubernetes.io/not-ready` and `unreachable` unless already
    /// tolerated; remove them with [`Store::modify`] for a pod without them) and watches see
    /// ADDED. A given status is kept, custom resources' too. Namespaced objects without a
    /// namespace go to `default`. Returns the stored object.
    ///
    /// Panics if the type is unknown, the object has no usable name, or it already exists.
    pub fn create(&self, obj: Value) -> Value {
        let rt = Self::type_of(&obj);
        let result = self.lock().insert_new(rt, None, obj, false, false);
        match result {
            Ok(stored) => rt.present(&stored),
            Err(e) => panic!("Store::create: {}", e.message),
        }
    }

    /// Replaces an object (found by type, namespace and name) as some client's update would:
    /// a new resource version and a MODIFIED event, unless nothing changed. `uid` and
    /// `creationTimestamp` are kept when the replacement lacks them; status is replaced too
    /// (this is not the API's main endpoint). Panics if the object does not exist.
    pub fn update(&self, obj: Value) -> Value {
        let rt = Self::type_of(&obj);
        let mut st = self.lock();
        let mut new = rt.to_storage(obj);
        if rt.namespaced
            && let Some(m) = meta_mut(&mut new)
            && m.get("namespace").and_then(Value::as_str).is_none_or(str::is_empty)
        {
            m.insert("namespace".into(), "default".into());
        }
        let k = key_of(&new);
        let Some(existing) = st.get(rt.storage, &k).cloned() else {
            drop(st);
            panic!("Store::update: {} {k:?} does not exist", rt.qualified());
        };
        if let (Some(nm), Some(om)) = (meta_mut(&mut new), existing.get("metadata").and_then(Value::as_object)) {
            for f in ["uid", "creationTimestamp"] {
                if nm.get(f).is_none_or(Value::is_null)
                    && let Some(v) = om.get(f)
                {
                    nm.insert(f.into(), v.clone());
                }
            }
            nm.insert(
                "resourceVersion".into(),
                om.get("resourceVersion").cloned().unwrap_or(Value::Null),
            );
        }
        if same_content(&new, &existing) {
            return rt.present(&existing);
        }
        let stored = st.commit(rt.storage, ChangeType::Modified, new, Some(existing));
        rt.present(&stored)
    }

    /// Changes an object in place with `f` and stores the result like [`Store::update`].
    /// Panics if the object does not exist.
    pub fn modify(&self, resource: &str, namespace: Option<&str>, name: &str, f: impl FnOnce(&mut Value)) -> Value {
        let mut obj = self
            .get(resource, namespace, name)
            .unwrap_or_else(|| panic!("Store::modify: {resource} {namespace:?}/{name} does not exist"));
        f(&mut obj);
        self.update(obj)
    }

    /// Removes an object at once (no grace period), as the last step of a deletion; watches
    /// see DELETED. With garbage collection on, its dependents go too. Returns the last state,
    /// or `None` when there was no such object.
    pub fn delete(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let rt = Self::named(resource);
        let ns = if rt.namespaced {
            Some(namespace.unwrap_or("default"))
        } else {
            None
        };
        let deleted = self.lock().remove_now(rt.storage, &key(ns, name), false)?;
        Some(rt.present(&deleted))
    }

    /// One object in the shape of `resource` (`"pods"`, `"nodes"`, `"events"` for core v1
    /// Events, `"events.events.k8s.io"` for `events.k8s.io/v1`, ...).
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let rt = Self::named(resource);
        let ns = if rt.namespaced {
            Some(namespace.unwrap_or("default"))
        } else {
            None
        };
        self.lock().get(rt.storage, &key(ns, name)).map(|o| rt.present(o))
    }

    /// Every object of `resource` in all namespaces, in the API server's order.
    pub fn list(&self, resource: &str) -> Vec<Value> {
        let rt = Self::named(resource);
        self.lock().map(rt.storage).values().map(|o| rt.present(o)).collect()
    }

    /// The current resource version, as a string like the API server writes it.
    pub fn resource_version(&self) -> String {
        self.lock().rv.to_string()
    }

    /// Forgets the history: watches and exact or paginated lists from an older resource
    /// version now answer 410 Gone (as after an etcd compaction); open watches are unaffected.
    pub fn compact(&self) {
        let mut st = self.lock();
        st.history.clear();
        st.compacted_rv = st.rv;
    }

    /// Graceful pod deletion (off by default). Off: deleting a pod removes it at once, as if a
    /// kubelet confirmed immediately. On: deleting a pod that is bound to a node and not
    /// finished only sets `deletionTimestamp` and `deletionGracePeriodSeconds` (a MODIFIED
    /// event); it goes when deleted again with `gracePeriodSeconds=0` or through
    /// [`Store::delete`], as a kubelet would.
    pub fn set_graceful_pod_deletion(&self, on: bool) {
        self.lock().graceful_pod_deletion = on;
    }

    /// Owner-reference garbage collection (off by default, the double runs no controllers).
    /// On: deleting an object deletes the objects whose `ownerReferences` then point only at
    /// deleted owners (background propagation, done at once), or with
    /// `propagationPolicy: Orphan` removes the reference from them.
    pub fn set_garbage_collection(&self, on: bool) {
        self.lock().garbage_collection = on;
    }

    /// Sets the text `/metrics` answers with (Prometheus exposition format).
    pub fn set_metrics_text(&self, text: impl Into<String>) {
        *self.inner.metrics.lock().unwrap_or_else(PoisonError::into_inner) = text.into();
    }

    pub fn metrics_text(&self) -> String {
        self.inner
            .metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    // ---- the API's verbs, used by the HTTP layer ----

    pub(crate) fn api_get(&self, rt: &ResourceType, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.lock()
            .get(rt.storage, &key(namespace, name))
            .map(|o| rt.present(o))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    pub(crate) fn api_list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        q: &ListQuery,
    ) -> Result<Value, ApiError> {
        let st = self.lock();
        let current = st.rv;
        if q.resource_version_match.is_some() && q.resource_version.as_deref().is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        let (read_rv, start_after) = if let Some(token) = &q.continue_token {
            if q.resource_version
                .as_deref()
                .is_some_and(|rv| !rv.is_empty() && rv != "0")
            {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let (rv, start) = decode_continue(token)?;
            if rv < st.compacted_rv {
                return Err(ApiError::new(
                    410,
                    "The provided continue parameter is too old to display a consistent list result. You can start \
                     a new list without the continue parameter, or use the continue token in this response to \
                     retrieve the remainder of the results. Continuing with an inconsistent list may cause the \
                     watcher to miss events.",
                ));
            }
            (rv, Some(start))
        } else {
            match (q.resource_version.as_deref(), q.resource_version_match.as_deref()) {
                (None | Some(""), _) | (Some("0"), _) => (current, None),
                (Some(rv), m) => {
                    let n = parse_rv(rv)?;
                    if n > current {
                        return Err(ApiError::too_large(n, current));
                    }
                    match m {
                        None | Some("NotOlderThan") => (current, None),
                        Some("Exact") => (n, None),
                        Some(other) => {
                            return Err(ApiError::bad_request(format!(
                                "resourceVersionMatch: Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
                            )));
                        }
                    }
                }
            }
        };
        let view = st.view_at(rt.storage, read_rv)?;
        let selectors_empty = q.label.is_empty() && q.field.is_empty();
        let prefix = namespace.map(|ns| format!("{ns}/"));
        let lower = match &start_after {
            Some(k) => Bound::Excluded(k.clone()),
            None => Bound::Unbounded,
        };
        let mut items = Vec::new();
        let mut last_key: Option<String> = None;
        let mut more = false;
        let mut remaining = 0u64;
        for (k, obj) in view.range((lower, Bound::Unbounded)) {
            if prefix.as_deref().is_some_and(|p| !k.starts_with(p)) {
                continue;
            }
            if !q.label.matches_object(obj) || !q.field.matches(|f| rt.field_value(obj, f)) {
                continue;
            }
            if q.limit.is_some_and(|l| items.len() as u64 >= l) {
                more = true;
                if selectors_empty {
                    remaining += 1;
                    continue;
                }
                break;
            }
            let mut item = rt.present(obj);
            if let Some(m) = item.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            items.push(item);
            last_key = Some(k.clone());
        }
        let mut meta = json!({ "resourceVersion": read_rv.to_string() });
        if more && let Some(k) = &last_key {
            meta["continue"] = encode_continue(read_rv, k).into();
            if selectors_empty {
                meta["remainingItemCount"] = remaining.into();
            }
        }
        Ok(json!({
            "kind": rt.list_kind(),
            "apiVersion": rt.api_version(),
            "metadata": meta,
            "items": items,
        }))
    }

    pub(crate) fn api_create(
        &self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let stored = self.lock().insert_new(rt, namespace, body, true, dry_run)?;
        Ok(rt.present(&stored))
    }

    pub(crate) fn api_write(
        &self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        op: WriteOp,
        status_only: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let stored = self.lock().write(rt, namespace, name, op, status_only, dry_run)?;
        Ok(rt.present(&stored))
    }

    /// Server-side apply: the object updated with the applied fields, or created from them when
    /// it does not exist (`true` with the answer then). The applied object's name must be the
    /// URL's (a missing one is taken from the URL). Applying to `/status` of a missing object is
    /// a 404, as upstream.
    pub(crate) fn api_apply(
        &self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        mut applied: Value,
        status_only: bool,
        dry_run: bool,
    ) -> Result<(Value, bool), ApiError> {
        let mut st = self.lock();
        if st.get(rt.storage, &key(namespace, name)).is_some() || status_only {
            let stored = st.write(
                rt,
                namespace,
                name,
                WriteOp::Patch(PatchType::Apply, applied),
                status_only,
                dry_run,
            )?;
            return Ok((rt.present(&stored), false));
        }
        let Some(meta) = meta_mut(&mut applied) else {
            return Err(ApiError::bad_request("the body of the request must be a JSON object"));
        };
        name_from_url(meta, name)?;
        meta.remove("generateName");
        let stored = st.insert_new(rt, namespace, applied, true, dry_run)?;
        Ok((rt.present(&stored), true))
    }

    /// DELETE of one object: preconditions, graceful pod deletion, the answer (the object
    /// for pods, a success `Status` otherwise).
    pub(crate) fn api_delete(
        &self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let k = key(namespace, name);
        let existing = st
            .get(rt.storage, &k)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let uid = str_at(&existing, "/metadata/uid").unwrap_or("").to_string();
        if let Some(want) = opts.uid.as_deref()
            && want != uid
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
            ));
        }
        let rv = str_at(&existing, "/metadata/resourceVersion").unwrap_or("").to_string();
        if let Some(want) = opts.resource_version.as_deref()
            && want != rv
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
                ),
            ));
        }
        let answer = |obj: &Value| {
            if rt.delete_returns_object {
                rt.present(obj)
            } else {
                status::delete_success(rt, name, &uid)
            }
        };
        let phase = str_at(&existing, "/status/phase").unwrap_or("");
        let graceful = rt.storage == "pods"
            && st.graceful_pod_deletion
            && str_at(&existing, "/spec/nodeName").is_some()
            && !matches!(phase, "Succeeded" | "Failed");
        let grace = opts.grace_period_seconds.unwrap_or_else(|| {
            existing
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(30)
        });
        if opts.dry_run {
            return Ok(answer(&existing));
        }
        if graceful && grace > 0 {
            if existing.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(answer(&existing));
            }
            let mut marked = existing.clone();
            if let Some(m) = meta_mut(&mut marked) {
                m.insert("deletionTimestamp".into(), util::rfc3339_after(grace).into());
                m.insert("deletionGracePeriodSeconds".into(), grace.into());
            }
            let stored = st.commit(rt.storage, ChangeType::Modified, marked, Some(existing));
            return Ok(answer(&stored));
        }
        match st.remove_now(rt.storage, &k, opts.orphan) {
            Some(deleted) => Ok(answer(&deleted)),
            None => Err(ApiError::not_found(rt, name)),
        }
    }

    /// DELETE of a collection: every selected object, answered with the list of them.
    pub(crate) fn api_delete_collection(
        &self,
        rt: &'static ResourceType,
        namespace: Option<&str>,
        q: &ListQuery,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let list = self.api_list(
            rt,
            namespace,
            &ListQuery {
                label: q.label.clone(),
                field: q.field.clone(),
                ..ListQuery::default()
            },
        )?;
        let mut deleted = Vec::new();
        for item in list["items"].as_array().into_iter().flatten() {
            let name = str_at(item, "/metadata/name").unwrap_or("");
            let ns = str_at(item, "/metadata/namespace");
            match self.api_delete(
                rt,
                ns,
                name,
                &DeleteOpts {
                    grace_period_seconds: opts.grace_period_seconds,
                    orphan: opts.orphan,
                    dry_run: opts.dry_run,
                    ..DeleteOpts::default()
                },
            ) {
                Ok(_) | Err(ApiError { code: 404, .. }) => deleted.push(item.clone()),
                Err(e) => return Err(e),
            }
        }
        Ok(json!({
            "kind": rt.list_kind(),
            "apiVersion": rt.api_version(),
            "metadata": { "resourceVersion": self.resource_version() },
            "items": deleted,
        }))
    }

    /// Opens a watch on `storage`: the events to send first, and a channel of later changes.
    pub(crate) fn subscribe(&self, storage: &'static str, start: WatchStart) -> Result<Subscription, ApiError> {
        let mut st = self.lock();
        let initial = match start {
            WatchStart::Current => st
                .map(storage)
                .values()
                .map(|o| {
                    Arc::new(Change {
                        rv: str_at(o, "/metadata/resourceVersion")
                            .and_then(|r| r.parse().ok())
                            .unwrap_or(0),
                        storage,
                        kind: ChangeType::Added,
                        object: o.clone(),
                        prev: None,
                    })
                })
                .collect(),
            WatchStart::After(rv) => {
                if rv < st.compacted_rv {
                    return Err(ApiError::too_old(rv, st.compacted_rv));
                }
                st.history
                    .iter()
                    .filter(|c| c.rv > rv && c.storage == storage)
                    .cloned()
                    .collect()
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        st.subscribers.push(Subscriber { storage, tx });
        Ok(Subscription { initial, rx, rv: st.rv })
    }

    /// For a bookmark: the current resource version and, taken under the same lock, every
    /// change already queued for this watch, so the bookmark never runs ahead of an event the
    /// watch has not sent yet.
    pub(crate) fn bookmark_point(&self, rx: &mut mpsc::UnboundedReceiver<Arc<Change>>) -> (u64, Vec<Arc<Change>>) {
        let st = self.lock();
        let mut pending = Vec::new();
        while let Ok(c) = rx.try_recv() {
            pending.push(c);
        }
        (st.rv, pending)
    }

    /// The current resource version as a number.
    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }
}

/// The object's name is the URL's: a body that names another object is refused, one that
/// names none gets the URL's.
fn name_from_url(meta: &mut Map<String, Value>, name: &str) -> Result<(), ApiError> {
    match meta.get("name").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(n) if n != name => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
        _ => {
            meta.insert("name".into(), name.into());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, node: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": "x"}},
               "spec": {"nodeName": node, "containers": [{"name": "c"}]}})
    }

    #[test]
    fn writes_bump_one_counter_and_lists_are_ordered() {
        let s = Store::new();
        let a = s.create(pod("b", "p2", "n1"));
        let b = s.create(pod("a", "p1", "n1"));
        let ra: u64 = a["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        let rb: u64 = b["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert_eq!(rb, ra + 1);
        let names: Vec<_> = s.list("pods").iter().map(|p| p["metadata"]["name"].clone()).collect();
        assert_eq!(names, vec![json!("p1"), json!("p2")]);
        assert_eq!(s.resource_version(), rb.to_string());
    }

    #[test]
    fn pagination_is_consistent_with_the_first_page() {
        let s = Store::new();
        for i in 0..5 {
            s.create(pod("ns", &format!("p{i}"), "n1"));
        }
        let pods = resources::resolve("pods").unwrap();
        let q = ListQuery {
            limit: Some(2),
            ..ListQuery::default()
        };
        let page1 = s.api_list(pods, None, &q).unwrap();
        assert_eq!(page1["metadata"]["remainingItemCount"], 3);
        let rv = page1["metadata"]["resourceVersion"].clone();
        // Changes after the first page do not show in later pages.
        s.delete("pods", Some("ns"), "p3");
        s.create(pod("ns", "p9", "n1"));
        let mut names = Vec::new();
        let mut page = page1;
        loop {
            names.extend(
                page["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["metadata"]["name"].clone()),
            );
            assert_eq!(page["metadata"]["resourceVersion"], rv);
            let Some(token) = page["metadata"]["continue"].as_str() else {
                break;
            };
            page = s
                .api_list(
                    pods,
                    None,
                    &ListQuery {
                        limit: Some(2),
                        continue_token: Some(token.to_string()),
                        ..ListQuery::default()
                    },
                )
                .unwrap();
        }
        assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"].map(Value::from));
        s.compact();
        let err = s
            .api_list(
                pods,
                None,
                &ListQuery {
                    continue_token: Some(encode_continue(1001, "ns/p1")),
                    ..ListQuery::default()
                },
            )
            .unwrap_err();
        assert_eq!(err.code, 410);
        let err = s
            .api_list(
                pods,
                None,
                &ListQuery {
                    continue_token: Some("!!".into()),
                    ..ListQuery::default()
                },
            )
            .unwrap_err();
        assert_eq!(err.code, 400);
    }

    #[test]
    fn no_op_updates_are_not_written() {
        let s = Store::new();
        let p = s.create(pod("ns", "p", "n1"));
        let again = s.update(p.clone());
        assert_eq!(again["metadata"]["resourceVersion"], p["metadata"]["resourceVersion"]);
        let changed = s.modify("pods", Some("ns"), "p", |p| p["status"]["phase"] = "Running".into());
        assert_ne!(changed["metadata"]["resourceVersion"], p["metadata"]["resourceVersion"]);
        assert_eq!(changed["metadata"]["uid"], p["metadata"]["uid"]);
    }

    #[test]
    fn garbage_collection_follows_owner_references() {
        let s = Store::new();
        s.set_garbage_collection(true);
        let driver = s.create(pod("ns", "driver", "n1"));
        let mut exec = pod("ns", "exec-1", "n1");
        exec["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "driver",
            "uid": driver["metadata"]["uid"], "controller": true}]);
        s.create(exec);
        s.create(pod("ns", "loner", "n1"));
        s.delete("pods", Some("ns"), "driver");
        assert!(s.get("pods", Some("ns"), "exec-1").is_none());
        assert!(s.get("pods", Some("ns"), "loner").is_some());
    }
}
