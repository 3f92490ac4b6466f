//! The HTTP side: one function per request that records it, applies injected faults, routes
//! the path to a handler and writes the answer (JSON objects, lists, `Status` errors, watch
//! streams, discovery and health documents).
//!
//! URL space (as the API server's):
//! `/api/v1/<plural>[/<name>[/status]]` for cluster-scoped types and cross-namespace lists,
//! `/api/v1/namespaces/<ns>/<plural>[/<name>[/status]]` for namespaced ones,
//! `/apis/<group>/<version>/...` likewise for named groups, the deprecated
//! `/api/v1/watch/...` prefix, and `/`, `/version`, `/healthz`, `/livez`, `/readyz`,
//! `/metrics`, `/api`, `/apis`, `/apis/<group>` outside it.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::Value;
use tokio::task::AbortHandle;

use super::discovery;
use super::faults::{Faults, Target};
use super::resources::{self, ResourceType};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{DeleteOpts, ListQuery, PatchType, Store, WriteOp};
use super::util;
use super::watch::{self, WatchParams};

/// Response bodies: whole documents or watch streams.
pub(crate) type Body = UnsyncBoxBody<Bytes, io::Error>;

/// Largest request body accepted, the API server's 3 MiB.
const MAX_BODY: usize = 3 * 1024 * 1024;

/// A watch without `timeoutSeconds` lasts this long (the API server picks 30 to 60 minutes).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// `http` or `https`.
    pub scheme: &'static str,
    pub method: String,
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    /// The connection it came on: 1 for the first the server accepted, and so on (a TLS
    /// handshake each, over HTTPS). Requests with the same number shared a kept-alive
    /// connection.
    pub connection: u64,
    /// The HTTP status answered; 0 when the connection was closed instead (server down, or a
    /// request that raced [`super::Faults::set_refusing`] on an open connection).
    pub status: u16,
    /// When the request arrived.
    pub time: SystemTime,
    /// Arrival to response head (for watches, not the length of the stream).
    pub elapsed: Duration,
    pub is_watch: bool,
    /// The API verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`), empty for non-resource paths.
    pub verb: String,
    /// The plural resource (`pods`), empty for non-resource paths.
    pub resource: String,
    /// The API group, empty for the core group.
    pub group: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The bearer token of the `Authorization` header, if any.
    pub bearer_token: Option<String>,
    pub user_agent: Option<String>,
    pub content_type: Option<String>,
    /// The request body as text (lossy UTF-8).
    pub body: String,
    /// For an error answer, the `reason` of its `Status` (`AlreadyExists`, `Conflict`,
    /// `NotFound`, ...).
    pub reason: Option<String>,
}

impl RequestRecord {
    /// A decoded query parameter (the first if repeated).
    pub fn query_param(&self, key: &str) -> Option<String> {
        util::parse_query(&self.query)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The body parsed as JSON, if it is JSON.
    pub fn body_json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }
}

/// What every connection task shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Store,
    pub faults: Faults,
    pub requests: Mutex<Vec<RequestRecord>>,
    pub bookmark_interval_ms: AtomicU64,
    /// `host:port` for `serverAddressByClientCIDRs`.
    pub server_address: String,
    /// The writes running on tasks of their own (see `handle`), aborted when the server stops.
    pub detached: Mutex<Vec<AbortHandle>>,
    /// What `/stats/summary` answers, as a kubelet.
    pub kubelet_stats: Mutex<KubeletStats>,
    /// Connections accepted and served so far (the last one's number).
    pub connections: AtomicU64,
}

/// The kubelet's `/stats/summary` as the double serves it.
#[derive(Debug, Default)]
pub(crate) struct KubeletStats {
    pub summary: Option<Value>,
    /// The caller lacks `get` on `nodes/stats`.
    pub denied: bool,
}

impl Shared {
    fn track_detached(&self, task: AbortHandle) {
        let mut tasks = self.detached.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Stops the writes still running.
    pub fn abort_detached(&self) {
        for t in self.detached.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            t.abort();
        }
    }
}

/// Decoded query parameters.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// A boolean parameter as Go's `strconv.ParseBool` reads it; absent or empty is false.
    fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None | Some("") => Ok(false),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(other) => Err(ApiError::bad_request(format!(
                "{key}: Invalid value: \"{other}\": strconv.ParseBool: parsing \"{other}\": invalid syntax"
            ))),
        }
    }

    fn number(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "{key}: Invalid value: \"{v}\": strconv.ParseInt: parsing \"{v}\": invalid syntax"
                    ))
                })
            })
            .transpose()
    }

    fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
            ))),
        }
    }
}

/// A request for objects.
#[derive(Debug)]
struct ResourceRoute {
    rt: &'static ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    /// Came in under the deprecated `/watch/` prefix.
    watch_prefix: bool,
}

#[derive(Debug)]
enum Route {
    Root,
    Version,
    Health(String),
    Metrics,
    /// A kubelet's `/stats/summary`.
    KubeletSummary,
    CoreVersions,
    GroupList,
    Group(String),
    ResourceList(String, String),
    Resource(ResourceRoute),
    NotFound,
}

fn route(path: &str) -> Route {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    let owned: Vec<String> = if trimmed.is_empty() {
        Vec::new()
    } else {
        trimmed.split('/').map(util::percent_decode).collect()
    };
    if owned.iter().any(String::is_empty) {
        return Route::NotFound;
    }
    let segs: Vec<&str> = owned.iter().map(String::as_str).collect();
    match segs.as_slice() {
        [] => Route::Root,
        ["version"] => Route::Version,
        [h @ ("healthz" | "livez" | "readyz"), ..] => Route::Health((*h).to_string()),
        ["metrics"] => Route::Metrics,
        ["stats", "summary"] => Route::KubeletSummary,
        ["api"] => Route::CoreVersions,
        ["api", "v1"] => Route::ResourceList(String::new(), "v1".into()),
        ["apis"] => Route::GroupList,
        ["apis", g] => Route::Group((*g).to_string()),
        ["apis", g, v] => Route::ResourceList((*g).to_string(), (*v).to_string()),
        ["api", "v1", rest @ ..] => resource_route("", "v1", rest),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let (watch_prefix, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let namespaced = match rest {
        ["namespaces", ns, plural, tail @ ..] => resources::find(group, version, plural)
            .filter(|rt| rt.namespaced)
            .map(|rt| (rt, Some((*ns).to_string()), tail)),
        _ => None,
    };
    let (rt, namespace, tail) = match namespaced {
        Some(found) => found,
        None => match rest {
            [plural, tail @ ..] => match resources::find(group, version, plural) {
                // A namespaced type is only listed or watched across namespaces here.
                Some(rt) if rt.namespaced && !tail.is_empty() => return Route::NotFound,
                Some(rt) => (rt, None, tail),
                None => return Route::NotFound,
            },
            [] => return Route::NotFound,
        },
    };
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some((*name).to_string()), None),
        [name, "status"] if rt.status_subresource => (Some((*name).to_string()), Some("status".to_string())),
        _ => return Route::NotFound,
    };
    Route::Resource(ResourceRoute {
        rt,
        namespace,
        name,
        subresource,
        watch_prefix,
    })
}

fn base_response(code: u16, content_type: &str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache, private"),
    );
    if let Ok(v) = header::HeaderValue::from_str(&util::new_uid()) {
        h.insert("audit-id", v);
    }
    resp
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    base_response(
        code,
        "application/json",
        full(serde_json::to_vec(v).unwrap_or_default()),
    )
}

fn text_response(code: u16, text: impl Into<String>) -> Response<Body> {
    let mut r = base_response(code, "text/plain; charset=utf-8", full(text.into()));
    r.headers_mut()
        .insert("x-content-type-options", header::HeaderValue::from_static("nosniff"));
    r
}

/// The `reason` of an error answer's `Status`, kept with the response (never sent) for
/// [`RequestRecord::reason`].
#[derive(Debug, Clone, Copy)]
struct AnsweredReason(&'static str);

fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(e.code, &e.to_status());
    if !e.reason.is_empty() {
        resp.extensions_mut().insert(AnsweredReason(e.reason));
    }
    if let Some(secs) = e.retry_after
        && let Ok(v) = header::HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// Serves one request. `Err` makes hyper close the connection without an answer, which is
/// how a server that is down treats requests on connections it had already accepted.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    scheme: &'static str,
    connection: u64,
) -> Result<Response<Body>, io::Error> {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let mut rec = RequestRecord {
        scheme,
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        connection,
        status: 0,
        time: SystemTime::now(),
        elapsed: Duration::ZERO,
        is_watch: false,
        verb: String::new(),
        resource: String::new(),
        group: String::new(),
        subresource: None,
        namespace: None,
        name: None,
        bearer_token: bearer(&parts.headers),
        user_agent: header_str(&parts.headers, header::USER_AGENT),
        content_type: header_str(&parts.headers, header::CONTENT_TYPE),
        body: String::new(),
        reason: None,
    };
    if shared.faults.is_down() || shared.faults.is_refusing() {
        push_record(&shared, rec, 0, None, started);
        return Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "API server double is down",
        ));
    }
    let bytes = match Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let resp = error_response(&ApiError::new(
                413,
                format!("Request entity too large: limit is {MAX_BODY}"),
            ));
            push_record(&shared, rec, 413, reason_of(&resp), started);
            return Ok(resp);
        }
        Err(e) => return Err(io::Error::other(e.to_string())),
    };
    rec.body = String::from_utf8_lossy(&bytes).into_owned();
    if matches!(parts.method, Method::GET | Method::HEAD) || !shared.faults.writes_outlive_clients() {
        let resp = serve(&shared, &parts, bytes, &mut rec).await;
        push_record(&shared, rec, resp.status().as_u16(), reason_of(&resp), started);
        return Ok(resp);
    }
    // `Faults::set_writes_outlive_clients`: a write runs to its end on a task of its own,
    // injected latency included, even when the client gives up and closes the connection
    // meanwhile (hyper then drops this future): the object is stored and the request recorded
    // with the answer nobody read.
    let task_shared = shared.clone();
    let task = tokio::spawn(async move {
        let resp = serve(&task_shared, &parts, bytes, &mut rec).await;
        push_record(&task_shared, rec, resp.status().as_u16(), reason_of(&resp), started);
        resp
    });
    shared.track_detached(task.abort_handle());
    task.await
        .map_err(|e| io::Error::other(format!("API server double: a write's task ended: {e}")))
}

fn reason_of(resp: &Response<Body>) -> Option<&'static str> {
    resp.extensions().get::<AnsweredReason>().map(|r| r.0)
}

fn push_record(shared: &Shared, mut rec: RequestRecord, status: u16, reason: Option<&str>, started: Instant) {
    rec.status = status;
    rec.reason = reason.map(str::to_string);
    rec.elapsed = started.elapsed();
    shared.requests.lock().unwrap_or_else(PoisonError::into_inner).push(rec);
}

async fn serve(shared: &Shared, parts: &http::request::Parts, body: Bytes, rec: &mut RequestRecord) -> Response<Body> {
    let query = Query(util::parse_query(parts.uri.query().unwrap_or("")));
    let route = route(parts.uri.path());
    let Route::Resource(r) = route else {
        let path = parts.uri.path().trim_end_matches('/');
        let path = if path.is_empty() { "/" } else { path };
        let target = Target {
            verb: "get",
            resource: path,
            group: "",
            subresource: None,
        };
        if let Some(resp) = apply_faults(&shared.faults, &target, None, None).await {
            return resp;
        }
        if parts.method != Method::GET && parts.method != Method::HEAD {
            return error_response(&ApiError::method_not_allowed());
        }
        return serve_non_resource(shared, parts, &query, route);
    };
    rec.resource = r.rt.plural.to_string();
    rec.group = r.rt.group.to_string();
    rec.subresource = r.subresource.clone();
    rec.namespace = r.namespace.clone();
    rec.name = r.name.clone();
    let verb = query.flag("watch").and_then(|watch| {
        let watch = watch || r.watch_prefix;
        Ok(match (&parts.method, r.name.is_some(), r.subresource.is_some()) {
            (&Method::GET, false, _) if watch => "watch",
            (&Method::GET, false, _) => "list",
            (&Method::GET, true, false) if watch => "watch",
            (&Method::GET, true, _) => "get",
            (&Method::POST, false, _) if r.namespace.is_some() || !r.rt.namespaced => "create",
            (&Method::DELETE, false, false) if r.namespace.is_some() || !r.rt.namespaced => "deletecollection",
            (&Method::PUT, true, _) => "update",
            (&Method::PATCH, true, _) => "patch",
            (&Method::DELETE, true, false) => "delete",
            _ => return Err(ApiError::method_not_allowed()),
        })
    });
    if let Ok(verb) = verb {
        rec.verb = verb.to_string();
        rec.is_watch = verb == "watch";
    }
    // Faults come first, as authentication and authorization come before the handler in the
    // API server: a request without a verb (a bad `watch` flag, a method the path does not
    // take) still meets the rules for every verb (`*`), an injected 401 for instance.
    let target = Target {
        verb: verb.as_ref().map_or("", |v| *v),
        resource: r.rt.plural,
        group: r.rt.group,
        subresource: r.subresource.as_deref(),
    };
    if let Some(resp) = apply_faults(&shared.faults, &target, Some(r.rt), r.namespace.as_deref()).await {
        return resp;
    }
    let verb = match verb {
        Ok(v) => v,
        Err(e) => return error_response(&e),
    };
    match serve_resource(shared, parts, &query, &r, verb, body) {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

/// Sleeps for injected latency, then answers with an injected failure if one matches.
async fn apply_faults(
    faults: &Faults,
    target: &Target<'_>,
    rt: Option<&ResourceType>,
    namespace: Option<&str>,
) -> Option<Response<Body>> {
    if let Some(d) = faults.latency_for(target) {
        tokio::time::sleep(d).await;
    }
    let rule = faults.take_failure(target)?;
    let err = ApiError::injected(rule.status, target.verb, rt, namespace).with_retry_after(rule.retry_after);
    Some(error_response(&err))
}

fn serve_non_resource(shared: &Shared, parts: &http::request::Parts, query: &Query, route: Route) -> Response<Body> {
    let accept = header_str(&parts.headers, header::ACCEPT).unwrap_or_default();
    match route {
        Route::Root => json_response(200, &discovery::root_paths()),
        Route::Version => json_response(200, &discovery::version()),
        Route::Health(name) => {
            if query.get("verbose").is_some() {
                let checks = ["ping", "log", "etcd", "poststarthook/start-informers"];
                let mut text: String = checks.iter().map(|c| format!("[+]{c} ok\n")).collect();
                text.push_str(&format!("{name} check passed\n"));
                text_response(200, text)
            } else {
                text_response(200, "ok")
            }
        }
        Route::Metrics => base_response(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            full(shared.store.metrics_text()),
        ),
        Route::KubeletSummary => {
            let stats = shared.kubelet_stats.lock().unwrap_or_else(PoisonError::into_inner);
            match (&stats.summary, stats.denied) {
                (None, _) => text_response(404, "404 page not found\n"),
                // The kubelet's words (pkg/kubelet/server), for a ServiceAccount without the right.
                (Some(_), true) => text_response(
                    403,
                    "Forbidden (user=system:serviceaccount:nodemedic:nodemedic, verb=get, resource=nodes, subresource=stats)",
                ),
                (Some(summary), false) => json_response(200, summary),
            }
        }
        Route::CoreVersions if discovery::wants_aggregated(&accept) => base_response(
            200,
            discovery::AGGREGATED_CONTENT_TYPE,
            full(discovery::aggregated(true).to_string()),
        ),
        Route::CoreVersions => json_response(200, &discovery::core_versions(&shared.server_address)),
        Route::GroupList if discovery::wants_aggregated(&accept) => base_response(
            200,
            discovery::AGGREGATED_CONTENT_TYPE,
            full(discovery::aggregated(false).to_string()),
        ),
        Route::GroupList => json_response(200, &discovery::group_list()),
        Route::Group(g) => match discovery::api_group(&g) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::no_route()),
        },
        Route::ResourceList(g, v) => match discovery::resource_list(&g, &v) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::no_route()),
        },
        Route::Resource(_) | Route::NotFound => error_response(&ApiError::no_route()),
    }
}

fn parse_json_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

/// The media type of a `Content-Type`, without parameters.
fn media_type(parts: &http::request::Parts) -> Option<String> {
    header_str(&parts.headers, header::CONTENT_TYPE)
        .map(|ct| ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
}

fn require_json(parts: &http::request::Parts) -> Result<(), ApiError> {
    match media_type(parts).as_deref() {
        None | Some("application/json") | Some("*/*") => Ok(()),
        Some(other) => Err(ApiError::new(
            415,
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json (got {other})"
            ),
        )),
    }
}

fn list_query(rt: &ResourceType, q: &Query) -> Result<ListQuery, ApiError> {
    let label = LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    let field = FieldSelector::parse(q.get("fieldSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    if let Some(bad) = field.reqs.iter().find(|r| !rt.supports_field(&r.field)) {
        return Err(ApiError::bad_request(format!(
            "field label not supported: {}",
            bad.field
        )));
    }
    let limit = match q.number("limit")? {
        Some(n) if n < 0 => {
            return Err(ApiError::bad_request(format!(
                "limit: Invalid value: {n}: must be non-negative"
            )));
        }
        Some(0) | None => None,
        Some(n) => Some(n as u64),
    };
    Ok(ListQuery {
        label,
        field,
        limit,
        continue_token: q.get("continue").filter(|c| !c.is_empty()).map(str::to_string),
        resource_version: q.get("resourceVersion").map(str::to_string),
        resource_version_match: q
            .get("resourceVersionMatch")
            .filter(|c| !c.is_empty())
            .map(str::to_string),
    })
}

fn delete_opts(q: &Query, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let mut opts = DeleteOpts::default();
    let text = std::str::from_utf8(body).unwrap_or("").trim();
    if !text.is_empty() {
        let v = parse_json_body(body)?;
        if !v.is_object() {
            return Err(ApiError::bad_request("DeleteOptions must be a JSON object"));
        }
        let pre = v.get("preconditions");
        opts.uid = pre
            .and_then(|p| p.get("uid"))
            .and_then(Value::as_str)
            .map(str::to_string);
        opts.resource_version = pre
            .and_then(|p| p.get("resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_string);
        opts.grace_period_seconds = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        match v.get("propagationPolicy").and_then(Value::as_str) {
            None | Some("Background" | "Foreground") => {}
            Some("Orphan") => opts.orphan = true,
            Some(other) => {
                return Err(ApiError::new(
                    422,
                    format!(
                        "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                    ),
                ));
            }
        }
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            opts.orphan = true;
        }
        if let Some(dry) = v.get("dryRun").and_then(Value::as_array) {
            for d in dry {
                match d.as_str() {
                    Some("All") => opts.dry_run = true,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "dryRun: Unsupported value: {d}: supported values: \"All\""
                        )));
                    }
                }
            }
        }
    }
    if let Some(g) = q.number("gracePeriodSeconds")? {
        opts.grace_period_seconds = Some(g);
    }
    if q.get("propagationPolicy") == Some("Orphan") {
        opts.orphan = true;
    }
    opts.dry_run |= q.dry_run()?;
    Ok(opts)
}

fn serve_resource(
    shared: &Shared,
    parts: &http::request::Parts,
    q: &Query,
    r: &ResourceRoute,
    verb: &str,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let store = &shared.store;
    let ns = r.namespace.as_deref();
    let name = r.name.as_deref().unwrap_or("");
    let status_only = r.subresource.is_some();
    match verb {
        "get" => Ok(json_response(200, &store.api_get(r.rt, ns, name)?)),
        "list" => Ok(json_response(200, &store.api_list(r.rt, ns, &list_query(r.rt, q)?)?)),
        "watch" => serve_watch(shared, q, r),
        "create" => {
            require_json(parts)?;
            let obj = parse_json_body(&body)?;
            Ok(json_response(201, &store.api_create(r.rt, ns, obj, q.dry_run()?)?))
        }
        "update" => {
            require_json(parts)?;
            let obj = parse_json_body(&body)?;
            let dry = q.dry_run()?;
            Ok(json_response(
                200,
                &store.api_write(r.rt, ns, name, WriteOp::Replace(obj), status_only, dry)?,
            ))
        }
        "patch" => {
            let media = media_type(parts);
            let apply = matches!(
                media.as_deref(),
                Some("application/apply-patch+yaml" | "application/apply-patch+cbor")
            );
            // `force` belongs to server-side apply, even `force=false` (`ValidatePatchOptions`);
            // `fieldManager` is optional elsewhere.
            q.flag("force")?;
            if q.get("force").is_some() && !apply {
                return Err(ApiError::new(
                    422,
                    "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
                ));
            }
            if apply {
                return serve_apply(store, parts, q, r, ns, name, status_only, &body);
            }
            let kind = match media.as_deref() {
                Some("application/merge-patch+json") => PatchType::Merge,
                // Custom resources have no Go struct to take patch strategies from.
                Some("application/strategic-merge-patch+json") if r.rt.custom_resource => {
                    return Err(ApiError::new(
                        415,
                        "the body of the request was in an unknown format - accepted media types include: \
                         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    ));
                }
                Some("application/strategic-merge-patch+json") => PatchType::Strategic,
                Some("application/json-patch+json") => PatchType::Json,
                other => {
                    return Err(ApiError::new(
                        415,
                        format!(
                            "the body of the request was in an unknown format ({}) - accepted media types include: \
                             application/json-patch+json, application/merge-patch+json, \
                             application/apply-patch+yaml, application/strategic-merge-patch+json",
                            other.unwrap_or("none")
                        ),
                    ));
                }
            };
            let patch = parse_json_body(&body)?;
            let dry = q.dry_run()?;
            Ok(json_response(
                200,
                &store.api_write(r.rt, ns, name, WriteOp::Patch(kind, patch), status_only, dry)?,
            ))
        }
        "delete" => {
            let opts = delete_opts(q, &body)?;
            Ok(json_response(200, &store.api_delete(r.rt, ns, name, &opts)?))
        }
        "deletecollection" => {
            let opts = delete_opts(q, &body)?;
            let lq = list_query(r.rt, q)?;
            Ok(json_response(200, &store.api_delete_collection(r.rt, ns, &lq, &opts)?))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// Server-side apply (`PATCH` with `application/apply-patch+yaml`): creates the object when it
/// does not exist (201), else merges the applied fields into it (200). The body must be JSON (a
/// subset of YAML, and what clients such as fabric8 send); `fieldManager` is required as
/// upstream, `force` accepted. Field ownership is not modelled: no `managedFields`, no
/// conflicts, and fields a manager stops applying are not removed.
#[allow(clippy::too_many_arguments)]
fn serve_apply(
    store: &Store,
    parts: &http::request::Parts,
    q: &Query,
    r: &ResourceRoute,
    ns: Option<&str>,
    name: &str,
    status_only: bool,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    if media_type(parts).as_deref() == Some("application/apply-patch+cbor") {
        return Err(ApiError::new(
            415,
            "the API server double reads server-side apply bodies as JSON only (application/apply-patch+yaml)",
        ));
    }
    if q.get("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError::new(
            422,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    let applied: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "error decoding YAML: the API server double reads apply bodies written as JSON only: {e}"
        ))
    })?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("the body of an apply patch must be an object"));
    }
    for (field, what) in [("/apiVersion", "apiVersion"), ("/kind", "kind")] {
        if applied.pointer(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "error decoding apply patch: Object '{what}' is missing in the applied configuration"
            )));
        }
    }
    let (obj, created) = store.api_apply(r.rt, ns, name, applied, status_only, q.dry_run()?)?;
    Ok(json_response(if created { 201 } else { 200 }, &obj))
}

fn serve_watch(shared: &Shared, q: &Query, r: &ResourceRoute) -> Result<Response<Body>, ApiError> {
    let lq = list_query(r.rt, q)?;
    let mut field = lq.field;
    if let Some(name) = &r.name {
        // A watch on one object is a watch of the collection selecting it by name.
        field.reqs.push(super::selectors::FieldRequirement {
            field: "metadata.name".into(),
            negate: false,
            value: name.clone(),
        });
    }
    let allow_bookmarks = q.flag("allowWatchBookmarks")?;
    let send_initial_events = q.flag("sendInitialEvents")?;
    if send_initial_events && !allow_bookmarks {
        return Err(ApiError::new(
            422,
            "allowWatchBookmarks: Required value: sendInitialEvents requires setting allowWatchBookmarks to true",
        ));
    }
    let timeout = match q.number("timeoutSeconds")? {
        // Capped at a day: a watch never outlives a test, and the deadline cannot overflow.
        Some(s) if s > 0 => Duration::from_secs((s as u64).min(86_400)),
        _ => DEFAULT_WATCH_TIMEOUT,
    };
    let params = WatchParams {
        resource_version: lq.resource_version,
        allow_bookmarks,
        send_initial_events,
        timeout,
        label: lq.label,
        field,
    };
    let interval = Duration::from_millis(shared.bookmark_interval_ms.load(Ordering::Relaxed));
    let stream = watch::open(
        &shared.store,
        r.rt,
        r.namespace.as_deref(),
        params,
        interval,
        shared.faults.drop_signal(),
        shared.faults.gone_on_watch(),
    )?;
    let body = StreamBody::new(stream.map(|chunk| chunk.map(Frame::data))).boxed_unsync();
    Ok(base_response(200, "application/json", body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> (String, Option<String>, Option<String>, Option<String>, bool) {
        match route(path) {
            Route::Resource(r) => (r.rt.qualified(), r.namespace, r.name, r.subresource, r.watch_prefix),
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn routes() {
        assert_eq!(res("/api/v1/pods"), ("pods".into(), None, None, None, false));
        assert_eq!(
            res("/api/v1/namespaces/ns/pods/p"),
            ("pods".into(), Some("ns".into()), Some("p".into()), None, false)
        );
        assert_eq!(res("/api/v1/nodes/n1/status").3.as_deref(), Some("status"));
        assert_eq!(res("/api/v1/namespaces/ns1").2.as_deref(), Some("ns1"));
        assert_eq!(res("/api/v1/namespaces/ns1/status").3.as_deref(), Some("status"));
        assert!(res("/api/v1/watch/namespaces/ns/pods").4);
        assert_eq!(
            res("/apis/events.k8s.io/v1/namespaces/d/events").0,
            "events.events.k8s.io"
        );
        assert_eq!(
            res("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/w")
                .2
                .as_deref(),
            Some("w")
        );
        assert_eq!(res("/api/v1/pods/").0, "pods");
        for nf in [
            "/api/v1/pods/p",
            "/api/v1/namespaces/ns/pods/p/log",
            "/api/v1/namespaces/ns/events/e/status",
            "/apis/apps/v1/deployments",
            "/api/v2/pods",
            "/api//v1",
            "/nope",
        ] {
            assert!(matches!(route(nf), Route::NotFound), "{nf}");
        }
        assert!(matches!(route("/"), Route::Root));
        assert!(matches!(route("/readyz/ping"), Route::Health(_)));
        assert!(matches!(route("/apis/events.k8s.io"), Route::Group(_)));
    }

    #[test]
    fn query_flags() {
        let q = Query(util::parse_query("watch=1&allowWatchBookmarks=true&x=maybe&dryRun=All"));
        assert!(q.flag("watch").unwrap());
        assert!(q.flag("allowWatchBookmarks").unwrap());
        assert!(!q.flag("absent").unwrap());
        assert!(q.flag("x").is_err());
        assert!(q.dry_run().unwrap());
        assert!(Query(util::parse_query("dryRun=Some")).dry_run().is_err());
    }

    #[test]
    fn delete_options_from_body_and_query() {
        let body = br#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"u1","resourceVersion":"7"},"dryRun":["All"]}"#;
        let o = delete_opts(&Query(util::parse_query("gracePeriodSeconds=0")), body).unwrap();
        assert_eq!(o.uid.as_deref(), Some("u1"));
        assert_eq!(o.resource_version.as_deref(), Some("7"));
        assert_eq!(o.grace_period_seconds, Some(0));
        assert!(o.dry_run);
        assert!(delete_opts(&Query::default(), b"[1]").is_err());
        assert!(delete_opts(&Query::default(), b"{bad").is_err());
        assert!(delete_opts(&Query::default(), br#"{"propagationPolicy":"Sideways"}"#).is_err());
    }
}
