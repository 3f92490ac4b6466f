//! The API server double over real HTTP and HTTPS: with a plain hyper client for the wire
//! format, and with kube-rs (client, watcher, reflector, event recorder) to prove that the
//! daemon's client library works against it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use nodemedic_tests::apiserver::{ApiServer, GIT_VERSION, TEST_TOKEN};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A minimal client: one connection per request, HTTP/1.1, optionally TLS with the
/// double's CA (verifying the DNS name `localhost`).
struct Client {
    addr: SocketAddr,
    tls: Option<TlsConnector>,
}

/// A whole answer.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

/// What reading the next watch event gave.
#[derive(Debug)]
enum Next {
    Event(Value),
    /// The body ended cleanly.
    End,
    /// The connection broke mid-body.
    Broken,
    Timeout,
}

struct Watch {
    body: Incoming,
    buf: Vec<u8>,
}

impl Watch {
    async fn next(&mut self, within: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Next::Event(serde_json::from_slice(&line).expect("watch line is JSON"));
            }
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return Next::Timeout,
                Ok(None) => return Next::End,
                Ok(Some(Err(_))) => return Next::Broken,
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event, which must come within five seconds.
    async fn event(&mut self) -> Value {
        match self.next(Duration::from_secs(5)).await {
            Next::Event(e) => e,
            other => panic!("expected a watch event, got {other:?}"),
        }
    }

    /// The next event that is not a bookmark.
    async fn change(&mut self) -> Value {
        loop {
            let e = self.event().await;
            if e["type"] != "BOOKMARK" {
                return e;
            }
        }
    }
}

impl Client {
    fn http(api: &ApiServer) -> Client {
        Client {
            addr: api.http_addr(),
            tls: None,
        }
    }

    fn https(api: &ApiServer) -> Client {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(api.ca_pem().as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Client {
            addr: api.https_addr(),
            tls: Some(TlsConnector::from(Arc::new(config))),
        }
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Result<http::Response<Incoming>, BoxError> {
        let tcp = TcpStream::connect(self.addr).await?;
        match &self.tls {
            None => {
                let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
                tokio::spawn(conn);
                Ok(sender.send_request(req).await?)
            }
            Some(connector) => {
                let stream = connector.connect(ServerName::try_from("localhost")?, tcp).await?;
                let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
                tokio::spawn(conn);
                Ok(sender.send_request(req).await?)
            }
        }
    }

    fn request(method: &str, path: &str, content_type: Option<&str>, body: Option<&Value>) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {TEST_TOKEN}"))
            .header("user-agent", "apiserver-test");
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        let bytes = body.map(|v| Bytes::from(v.to_string())).unwrap_or_default();
        b.body(Full::new(bytes)).unwrap()
    }

    async fn try_call(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Reply, BoxError> {
        let resp = self.send(Self::request(method, path, content_type, body)).await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok(Reply {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    async fn call(&self, method: &str, path: &str, content_type: Option<&str>, body: Option<&Value>) -> Reply {
        self.try_call(method, path, content_type, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    async fn get(&self, path: &str) -> Reply {
        self.call("GET", path, None, None).await
    }

    async fn post(&self, path: &str, body: &Value) -> Reply {
        self.call("POST", path, Some("application/json"), Some(body)).await
    }

    async fn patch(&self, path: &str, content_type: &str, body: &Value) -> Reply {
        self.call("PATCH", path, Some(content_type), Some(body)).await
    }

    async fn delete(&self, path: &str, body: Option<&Value>) -> Reply {
        self.call("DELETE", path, Some("application/json"), body).await
    }

    async fn put(&self, path: &str, body: &Value) -> Reply {
        self.call("PUT", path, Some("application/json"), Some(body)).await
    }

    async fn watch(&self, path: &str) -> Watch {
        let resp = self
            .send(Self::request("GET", path, None, None))
            .await
            .unwrap_or_else(|e| panic!("watch {path}: {e}"));
        assert_eq!(resp.status(), 200, "watch {path}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        assert_eq!(resp.headers()["transfer-encoding"], "chunked");
        Watch {
            body: resp.into_body(),
            buf: Vec::new(),
        }
    }
}

fn pod(ns: &str, name: &str, node: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]}
    })
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        ]}
    })
}

/// A node heartbeat Lease as the kubelet writes it, with MicroTime timestamps.
fn lease(ns: &str, name: &str, holder: &str, renew: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": {"nodemedic.io/last-report": "{\"healthy\":true}", "example.com/empty": ""}
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 40,
            "acquireTime": "2026-11-24T03:39:20.000001Z",
            "renewTime": renew,
            "leaseTransitions": 3
        }
    })
}

/// A SparkApplication as a user or the Spark operator's webhook writes it.
fn spark_app(ns: &str, name: &str, restart: Value, labels: Value) -> Value {
    json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "type": "Scala",
            "mode": "cluster",
            "sparkVersion": "3.5.3",
            "image": "spark:3.5.3",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "restartPolicy": restart,
            "driver": {"cores": 1, "memory": "512m", "serviceAccount": "spark"},
            "executor": {"instances": 2, "cores": 1, "memory": "512m"}
        }
    })
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn version_health_discovery_and_metrics() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let v = c.get("/version").await.json();
    assert_eq!(v["gitVersion"], GIT_VERSION);
    assert_eq!(v["major"], "1");
    for path in ["/readyz", "/livez", "/healthz"] {
        let r = c.get(path).await;
        assert_eq!((r.status, r.text.as_str()), (200, "ok"), "{path}");
    }
    assert!(c.get("/readyz?verbose").await.text.ends_with("readyz check passed\n"));
    assert_eq!(c.get("/api").await.json()["versions"], json!(["v1"]));
    let core = c.get("/api/v1").await.json();
    assert_eq!(core["kind"], "APIResourceList");
    let pods = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap();
    assert_eq!(pods["namespaced"], true);
    let groups = c.get("/apis").await.json();
    let group_names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        group_names,
        [
            "events.k8s.io",
            "admissionregistration.k8s.io",
            "coordination.k8s.io",
            "sparkoperator.k8s.io",
            "topology.node.k8s.io",
            "resource.k8s.io"
        ]
    );
    assert_eq!(
        c.get("/apis/events.k8s.io/v1").await.json()["resources"][0]["name"],
        "events"
    );

    api.store()
        .set_metrics_text("# TYPE apiserver_request_total counter\napiserver_request_total 3\n");
    let m = c.get("/metrics").await;
    assert_eq!(m.status, 200);
    assert!(
        m.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    assert!(m.text.contains("apiserver_request_total 3"));

    let missing = c.get("/apis/apps/v1/deployments").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["reason"], "NotFound");
    assert_eq!(missing.json()["kind"], "Status");

    let seen = api.requests();
    assert!(seen.iter().all(|r| r.bearer_token.as_deref() == Some(TEST_TOKEN)));
    assert!(
        seen.iter()
            .any(|r| r.path == "/version" && r.status == 200 && r.scheme == "http")
    );
    api.clear_requests();
    assert!(api.requests().is_empty());
}

#[tokio::test]
async fn requests_are_numbered_by_the_connection_they_came_on() {
    let api = ApiServer::start().await.unwrap();
    // This file's client opens a connection per request, over HTTP and over HTTPS.
    Client::http(&api).get("/version").await;
    Client::https(&api).get("/version").await;
    // Two requests on one kept-alive connection.
    let tcp = TcpStream::connect(api.http_addr()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    for _ in 0..2 {
        sender.ready().await.unwrap();
        let answer = sender
            .send_request(Client::request("GET", "/livez", None, None))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        answer.into_body().collect().await.unwrap();
    }
    let seen: Vec<(&str, String, u64)> = api
        .requests()
        .iter()
        .map(|r| (r.scheme, r.path.clone(), r.connection))
        .collect();
    let expected = [
        ("http", "/version", 1),
        ("https", "/version", 2),
        ("http", "/livez", 3),
        ("http", "/livez", 3),
    ];
    assert_eq!(seen, expected.map(|(s, p, n)| (s, p.to_string(), n)));
}

#[tokio::test]
async fn list_with_selectors_and_pagination() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    for (ns, name, node, role) in [
        ("spark", "driver", "n1", "driver"),
        ("spark", "exec-1", "n1", "executor"),
        ("spark", "exec-2", "n2", "executor"),
        ("spark", "exec-3", "n1", "executor"),
        ("other", "web", "n1", ""),
    ] {
        let labels = if role.is_empty() {
            json!({"app": "web"})
        } else {
            json!({"spark-role": role, "spark-app-selector": "spark-123"})
        };
        store.create(pod(ns, name, node, labels));
    }
    store.modify("pods", Some("spark"), "exec-3", |p| {
        p["status"]["phase"] = "Failed".into()
    });
    let c = Client::http(&api);

    let all = c.get("/api/v1/pods").await.json();
    assert_eq!(all["kind"], "PodList");
    assert_eq!(all["apiVersion"], "v1");
    assert_eq!(all["metadata"]["resourceVersion"], store.resource_version());
    assert_eq!(
        names(&all),
        ["web", "driver", "exec-1", "exec-2", "exec-3"],
        "sorted by namespace/name"
    );
    assert!(
        all["items"][0].get("kind").is_none(),
        "list items carry no kind, as from a real API server"
    );

    let q = |s: &str| {
        s.replace(' ', "%20")
            .replace('=', "%3D")
            .replace(',', "%2C")
            .replace('!', "%21")
    };
    let list = |sel: String| {
        let c = &c;
        async move { c.get(&sel).await }
    };
    let sel = |ls: &str| format!("/api/v1/namespaces/spark/pods?labelSelector={}", q(ls));
    assert_eq!(
        names(&list(sel("spark-role=executor")).await.json()),
        ["exec-1", "exec-2", "exec-3"]
    );
    assert_eq!(names(&list(sel("spark-role==driver")).await.json()), ["driver"]);
    assert_eq!(names(&list(sel("spark-role!=executor")).await.json()), ["driver"]);
    assert_eq!(
        names(
            &list(sel("spark-role in (driver,executor),spark-app-selector"))
                .await
                .json()
        )
        .len(),
        4
    );
    assert_eq!(
        names(&list(sel("spark-role notin (executor)")).await.json()),
        ["driver"]
    );
    assert!(names(&list(sel("!spark-role")).await.json()).is_empty());
    assert_eq!(
        names(
            &c.get(&format!("/api/v1/pods?labelSelector={}", q("!spark-role")))
                .await
                .json()
        ),
        ["web"]
    );

    let fsel = |fs: &str| format!("/api/v1/pods?fieldSelector={}", q(fs));
    assert_eq!(
        names(&list(fsel("spec.nodeName=n1")).await.json()),
        ["web", "driver", "exec-1", "exec-3"]
    );
    assert_eq!(
        names(&list(fsel("spec.nodeName==n1,status.phase!=Failed")).await.json()),
        ["web", "driver", "exec-1"]
    );
    assert_eq!(names(&list(fsel("metadata.namespace=other")).await.json()), ["web"]);
    assert_eq!(
        names(
            &c.get(&format!(
                "{}&labelSelector=spark-role%3Dexecutor",
                fsel("spec.nodeName=n1")
            ))
            .await
            .json()
        ),
        ["exec-1", "exec-3"]
    );

    let bad = c.get(&sel("spark-role in (x")).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["reason"], "BadRequest");
    let unsupported = c.get(&fsel("spec.foo=x")).await;
    assert_eq!(unsupported.status, 400);
    assert_eq!(unsupported.json()["message"], "field label not supported: spec.foo");

    // Pagination: pages of two, consistent with the first page's resource version even when
    // objects change in between.
    let first = c.get("/api/v1/pods?limit=2").await.json();
    assert_eq!(names(&first), ["web", "driver"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    let list_rv = first["metadata"]["resourceVersion"].clone();
    store.delete("pods", Some("spark"), "exec-2");
    store.create(pod("spark", "exec-0", "n1", json!({})));
    let mut seen = names(&first);
    let mut token = first["metadata"]["continue"].as_str().unwrap().to_string();
    loop {
        let page = c.get(&format!("/api/v1/pods?limit=2&continue={token}")).await.json();
        assert_eq!(page["metadata"]["resourceVersion"], list_rv);
        seen.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) => token = t.to_string(),
            None => break,
        }
    }
    assert_eq!(seen, ["web", "driver", "exec-1", "exec-2", "exec-3"]);
    // With a selector the page is filled from matching objects only.
    let sel_page = c.get(&format!("{}&limit=1", sel("spark-role=executor"))).await.json();
    assert_eq!(names(&sel_page), ["exec-1"]);
    assert!(sel_page["metadata"]["continue"].is_string());
    assert!(sel_page["metadata"].get("remainingItemCount").is_none());
    assert_eq!(c.get("/api/v1/pods?continue=garbage").await.status, 400);

    // Exact reads of an old version, and versions from the future.
    let exact = c
        .get(&format!(
            "/api/v1/pods?resourceVersion={}&resourceVersionMatch=Exact",
            list_rv.as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(names(&exact).len(), 5);
    assert!(names(&exact).contains(&"exec-2".to_string()));
    let future = c
        .get("/api/v1/pods?resourceVersion=999999&resourceVersionMatch=NotOlderThan")
        .await;
    assert_eq!(future.status, 504);
    assert_eq!(c.get("/api/v1/pods?resourceVersionMatch=Exact").await.status, 400);
    assert_eq!(c.get("/api/v1/pods?resourceVersion=0").await.status, 200);
}

#[tokio::test]
async fn watch_replays_history_then_streams_live_changes() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    let p1 = store.create(pod("ns", "p1", "n1", json!({"app": "a"})));
    let from = rv_of(&p1);
    store.create(pod("ns", "p2", "n2", json!({"app": "a"})));
    store.modify("pods", Some("ns"), "p1", |p| p["metadata"]["labels"]["x"] = "y".into());
    store.delete("pods", Some("ns"), "p2");
    let c = Client::http(&api);

    let mut w = c
        .watch(&format!("/api/v1/namespaces/ns/pods?watch=true&resourceVersion={from}"))
        .await;
    let types: Vec<(String, String)> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let e = w.event().await;
            v.push((
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"].as_str().unwrap().to_string(),
            ));
            assert_eq!(e["object"]["kind"], "Pod", "watch objects carry kind");
        }
        v
    };
    assert_eq!(
        types,
        [("ADDED", "p2"), ("MODIFIED", "p1"), ("DELETED", "p2")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    store.create(pod("ns", "p3", "n1", json!({})));
    store.create(pod("elsewhere", "p4", "n1", json!({})));
    let live = w.event().await;
    assert_eq!(
        (live["type"].as_str(), live["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("p3"))
    );
    assert!(
        matches!(w.next(Duration::from_millis(300)).await, Next::Timeout),
        "other namespaces are not seen"
    );

    // Without a resource version the watch starts with the current objects; the field
    // selector turns objects that stop matching into DELETED and ones that start into ADDED.
    let mut w = c.watch("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dn1").await;
    let mut initial = Vec::new();
    for _ in 0..3 {
        let e = w.event().await;
        assert_eq!(e["type"], "ADDED");
        initial.push(e["object"]["metadata"]["name"].as_str().unwrap().to_string());
    }
    assert_eq!(initial, ["p4", "p1", "p3"]);
    store.modify("pods", Some("ns"), "p3", |p| p["spec"]["nodeName"] = "n2".into());
    let gone = w.event().await;
    assert_eq!(
        (gone["type"].as_str(), gone["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("p3"))
    );
    store.modify("pods", Some("ns"), "p3", |p| p["spec"]["nodeName"] = "n1".into());
    assert_eq!(w.event().await["type"], "ADDED");

    // A single object is watched through its collection with a name selector.
    let mut one = c.watch("/api/v1/namespaces/ns/pods/p1?watch=true").await;
    assert_eq!(one.event().await["object"]["metadata"]["name"], "p1");
}

#[tokio::test]
async fn watch_from_a_compacted_version_is_gone() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    let p = store.create(pod("ns", "p", "n1", json!({})));
    let old = rv_of(&p);
    store.modify("pods", Some("ns"), "p", |p| p["metadata"]["labels"]["a"] = "b".into());
    store.compact();
    let c = Client::http(&api);
    let mut w = c.watch(&format!("/api/v1/pods?watch=true&resourceVersion={old}")).await;
    let e = w.event().await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["kind"], "Status");
    assert_eq!(e["object"]["apiVersion"], "v1");
    assert_eq!(e["object"]["status"], "Failure");
    assert_eq!(e["object"]["reason"], "Expired");
    assert_eq!(e["object"]["code"], 410);
    assert!(
        e["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("too old resource version: {old} ("))
    );
    assert!(matches!(w.next(Duration::from_secs(5)).await, Next::End));

    // The current version is still fine, and so are later ones.
    let now = store.resource_version();
    let mut w = c.watch(&format!("/api/v1/pods?watch=true&resourceVersion={now}")).await;
    store.delete("pods", Some("ns"), "p");
    assert_eq!(w.event().await["type"], "DELETED");
    let exact = c
        .get(&format!(
            "/api/v1/pods?resourceVersion={old}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(exact.status, 410);
    assert_eq!(exact.json()["reason"], "Expired");

    // gone_on_every_watch makes every watch expire, whatever it asks for.
    api.faults().gone_on_every_watch(true);
    let mut w = c.watch("/api/v1/pods?watch=true").await;
    assert_eq!(w.event().await["object"]["code"], 410);
    assert!(matches!(w.next(Duration::from_secs(5)).await, Next::End));
    api.faults().gone_on_every_watch(false);
}

#[tokio::test]
async fn bookmarks_and_timeout() {
    let api = ApiServer::start().await.unwrap();
    api.set_bookmark_interval(Duration::from_millis(100));
    let store = api.store();
    store.create(node("n1"));
    let rv = store.resource_version();
    let c = Client::http(&api);
    let mut w = c
        .watch(&format!(
            "/api/v1/nodes?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=2"
        ))
        .await;
    let started = Instant::now();
    let b = w.event().await;
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["kind"], "Node");
    assert_eq!(b["object"]["metadata"]["resourceVersion"], rv);
    store.create(node("n2"));
    let added = w.change().await;
    assert_eq!(added["object"]["metadata"]["name"], "n2");
    let b2 = w.event().await;
    assert_eq!(b2["type"], "BOOKMARK");
    assert_eq!(b2["object"]["metadata"]["resourceVersion"], store.resource_version());
    // timeoutSeconds=2 ends the stream cleanly.
    let end = loop {
        match w.next(Duration::from_secs(10)).await {
            Next::Event(_) => continue,
            other => break other,
        }
    };
    assert!(matches!(end, Next::End), "{end:?}");
    assert!(started.elapsed() >= Duration::from_millis(1500));

    // Streaming lists: initial objects, then a bookmark marking their end.
    let mut w = c
        .watch("/api/v1/nodes?watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=")
        .await;
    assert_eq!(w.event().await["type"], "ADDED");
    assert_eq!(w.event().await["type"], "ADDED");
    let end = w.event().await;
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
}

#[tokio::test]
async fn dry_run_create_is_not_stored() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let mut body = pod("spark", "", "", json!({"spark-role": "driver"}));
    body["metadata"]["generateName"] = "nodemedic-probe-".into();
    body["metadata"].as_object_mut().unwrap().remove("name");
    body["status"] = json!({"phase": "Running"});
    let r = c.post("/api/v1/namespaces/spark/pods?dryRun=All", &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let obj = r.json();
    let name = obj["metadata"]["name"].as_str().unwrap();
    assert!(
        name.starts_with("nodemedic-probe-") && name.len() == "nodemedic-probe-".len() + 5,
        "{name}"
    );
    assert!(obj["metadata"]["uid"].is_string());
    assert!(obj["metadata"].get("resourceVersion").is_none());
    assert_eq!(obj["status"], json!({"phase": "Pending", "qosClass": "BestEffort"}));
    assert_eq!(obj["spec"]["schedulerName"], "default-scheduler");
    assert!(api.store().list("pods").is_empty());
    assert!(
        c.get("/api/v1/pods").await.json()["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A real create stores; creating it again conflicts.
    let real = pod("spark", "d1", "", json!({}));
    let created = c.post("/api/v1/namespaces/spark/pods", &real).await;
    assert_eq!(created.status, 201);
    let again = c.post("/api/v1/namespaces/spark/pods", &real).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.json()["reason"], "AlreadyExists");
    assert_eq!(again.json()["message"], "pods \"d1\" already exists");
    let invalid = c
        .post(
            "/api/v1/namespaces/spark/pods",
            &json!({"metadata": {"name": "x"}, "spec": {}}),
        )
        .await;
    assert_eq!(invalid.status, 422);
    assert_eq!(invalid.json()["reason"], "Invalid");
    let wrong_ns = c.post("/api/v1/namespaces/other/pods", &real).await;
    assert_eq!(wrong_ns.status, 400);
    let not_json = c
        .call("POST", "/api/v1/namespaces/spark/pods", Some("application/json"), None)
        .await;
    assert_eq!(not_json.status, 400);

    // A webhook with side effects makes dry-run pod creates fail, as upstream.
    api.store().create(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "injector"},
        "webhooks": [{"name": "inject.example.com", "sideEffects": "Unknown", "timeoutSeconds": 30,
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}]
    }));
    let refused = c.post("/api/v1/namespaces/spark/pods?dryRun=All", &body).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("inject.example.com")
    );
    let hooks = c
        .get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations")
        .await
        .json();
    assert_eq!(hooks["kind"], "MutatingWebhookConfigurationList");
    assert_eq!(hooks["items"][0]["webhooks"][0]["timeoutSeconds"], 30);
    let vh = c
        .get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")
        .await
        .json();
    assert_eq!(vh["kind"], "ValidatingWebhookConfigurationList");
}

#[tokio::test]
async fn node_status_strategic_merge_over_https() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    let before = store.create(node("n1"));
    let c = Client::https(&api);
    let patch = json!({"status": {"conditions": [
        {"type": "CPUManagerStateStale", "status": "True", "reason": "StaleEntries", "message": "2 stale entries"},
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "still ready"}
    ]}});
    let r = c
        .patch(
            "/api/v1/nodes/n1/status",
            "application/strategic-merge-patch+json",
            &patch,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let conds = r.json()["status"]["conditions"].clone();
    let types: Vec<&str> = conds
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["MemoryPressure", "Ready", "CPUManagerStateStale"]);
    assert_eq!(conds[1]["message"], "still ready");
    assert!(rv_of(&r.json()) > rv_of(&before));
    assert_eq!(store.get("nodes", None, "n1").unwrap()["status"]["conditions"], conds);

    // The same patch again changes nothing and is not written.
    let again = c
        .patch(
            "/api/v1/nodes/n1/status",
            "application/strategic-merge-patch+json",
            &patch,
        )
        .await
        .json();
    assert_eq!(rv_of(&again), rv_of(&r.json()));

    // The main resource ignores status; the status subresource ignores spec.
    let main = c
        .patch(
            "/api/v1/nodes/n1",
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"nodemedic": "on"}}, "status": {"conditions": []}}),
        )
        .await
        .json();
    assert_eq!(main["metadata"]["labels"]["nodemedic"], "on");
    assert_eq!(main["status"]["conditions"], conds);
    let status_only = c
        .patch(
            "/api/v1/nodes/n1/status",
            "application/merge-patch+json",
            &json!({"spec": {"unschedulable": true}}),
        )
        .await
        .json();
    assert!(status_only["spec"].get("unschedulable").is_none());

    // JSON patch, stale resource versions, bad patches.
    let jp = c
        .patch(
            "/api/v1/nodes/n1",
            "application/json-patch+json",
            &json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}]),
        )
        .await;
    assert_eq!(jp.json()["metadata"]["annotations"]["a"], "1");
    let stale = c
        .patch(
            "/api/v1/nodes/n1",
            "application/merge-patch+json",
            &json!({"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}}),
        )
        .await;
    assert_eq!(stale.status, 409);
    assert_eq!(stale.json()["reason"], "Conflict");
    let failed_test = c
        .patch(
            "/api/v1/nodes/n1",
            "application/json-patch+json",
            &json!([{"op": "test", "path": "/spec/x", "value": 1}]),
        )
        .await;
    assert_eq!(failed_test.status, 422);
    let no_key = c
        .patch(
            "/api/v1/nodes/n1/status",
            "application/strategic-merge-patch+json",
            &json!({"status": {"conditions": [{"status": "True"}]}}),
        )
        .await;
    assert_eq!(no_key.status, 400);
    // Server-side apply needs a field manager (see server_side_apply_creates_then_merges).
    let apply = c
        .patch("/api/v1/nodes/n1", "application/apply-patch+yaml", &json!({}))
        .await;
    assert_eq!((apply.status, apply.json()["reason"].as_str()), (422, Some("Invalid")));
    let missing = c
        .patch("/api/v1/nodes/nope/status", "application/merge-patch+json", &json!({}))
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["message"], "nodes \"nope\" not found");

    // A pod's containers merge by name.
    store.create(pod("ns", "p", "n1", json!({})));
    let merged = c
        .patch(
            "/api/v1/namespaces/ns/pods/p",
            "application/strategic-merge-patch+json",
            &json!({"spec": {"containers": [{"name": "side", "image": "envoy"}]}}),
        )
        .await
        .json();
    assert_eq!(merged["spec"]["containers"].as_array().unwrap().len(), 2);
    assert!(api.requests().iter().all(|r| r.scheme == "https"));
}

#[tokio::test]
async fn delete_honours_uid_preconditions() {
    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    let p = store.create(pod("spark", "exec-1", "n1", json!({})));
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let c = Client::http(&api);
    let path = "/api/v1/namespaces/spark/pods/exec-1";

    let wrong = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-the-uid"}});
    let r = c.delete(path, Some(&wrong)).await;
    assert_eq!(r.status, 409);
    let s = r.json();
    assert_eq!(s["reason"], "Conflict");
    assert_eq!(
        s["message"],
        format!(
            "Operation cannot be fulfilled on pods \"exec-1\": Precondition failed: UID in precondition: not-the-uid, UID in object meta: {uid}"
        )
    );
    assert!(store.get("pods", Some("spark"), "exec-1").is_some(), "the pod survives");

    let stale_rv = json!({"preconditions": {"uid": uid, "resourceVersion": "1"}});
    assert_eq!(c.delete(path, Some(&stale_rv)).await.status, 409);
    let dry = c
        .delete(
            &format!("{path}?dryRun=All"),
            Some(&json!({"preconditions": {"uid": uid}})),
        )
        .await;
    assert_eq!(dry.status, 200);
    assert!(store.get("pods", Some("spark"), "exec-1").is_some());

    let mut w = c
        .watch(&format!(
            "/api/v1/pods?watch=true&resourceVersion={}",
            store.resource_version()
        ))
        .await;
    let ok = c.delete(path, Some(&json!({"preconditions": {"uid": uid}}))).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.json()["kind"], "Pod", "pods answer a delete with the object");
    assert!(store.get("pods", Some("spark"), "exec-1").is_none());
    let e = w.event().await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["uid"], uid.as_str());

    let missing = c.delete(path, None).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["details"], json!({"name": "exec-1", "kind": "pods"}));

    // Other kinds answer with a success Status.
    store.create(node("n9"));
    let s = c.delete("/api/v1/nodes/n9", None).await.json();
    assert_eq!(
        (s["kind"].as_str(), s["status"].as_str()),
        (Some("Status"), Some("Success"))
    );

    // Graceful deletion: a bound pod is only marked until deleted with grace 0.
    store.set_graceful_pod_deletion(true);
    store.create(pod("spark", "exec-2", "n1", json!({})));
    let marked = c.delete("/api/v1/namespaces/spark/pods/exec-2", None).await.json();
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert!(store.get("pods", Some("spark"), "exec-2").is_some());
    c.delete("/api/v1/namespaces/spark/pods/exec-2?gracePeriodSeconds=0", None)
        .await;
    assert!(store.get("pods", Some("spark"), "exec-2").is_none());
}

#[tokio::test]
async fn latency_injection_delays_matching_requests() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let delay = Duration::from_millis(300);
    api.faults().set_latency("list", "pods", delay);
    let t = Instant::now();
    assert_eq!(c.get("/api/v1/pods").await.status, 200);
    assert!(t.elapsed() >= delay, "{:?}", t.elapsed());
    let rec = api.requests().pop().unwrap();
    assert!(rec.elapsed >= delay);
    assert_eq!((rec.verb.as_str(), rec.resource.as_str()), ("list", "pods"));

    // Creates, dry-run ones included, for the slow-admission probe.
    api.faults().set_latency("create", "pods", delay);
    let body = pod("ns", "probe", "", json!({}));
    let t = Instant::now();
    assert_eq!(c.post("/api/v1/namespaces/ns/pods?dryRun=All", &body).await.status, 201);
    assert!(t.elapsed() >= delay);

    // Watches get their response head late.
    api.faults().set_latency("watch", "*", delay);
    let t = Instant::now();
    let _w = c.watch("/api/v1/nodes?watch=true").await;
    assert!(t.elapsed() >= delay);

    api.faults().clear();
    let t = Instant::now();
    c.get("/api/v1/pods").await;
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn injected_failures_carry_status_bodies() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    api.faults().fail("list", "pods", 429, Some(2), Some(3));
    for _ in 0..2 {
        let r = c.get("/api/v1/pods").await;
        assert_eq!(r.status, 429);
        assert_eq!(r.headers["retry-after"], "3");
        let s = r.json();
        assert_eq!(s["kind"], "Status");
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(s["details"]["retryAfterSeconds"], 3);
        assert_eq!(s["code"], 429);
    }
    assert_eq!(
        c.get("/api/v1/pods").await.status,
        200,
        "after `times` answers it heals"
    );

    api.faults().fail("*", "events", 500, None, None);
    let r = c
        .post("/apis/events.k8s.io/v1/namespaces/default/events", &json!({}))
        .await;
    assert_eq!((r.status, r.json()["reason"].as_str()), (500, Some("InternalError")));
    assert_eq!(c.get("/api/v1/namespaces/default/events").await.status, 500);
    api.faults().fail("get", "/version", 503, None, None);
    assert_eq!(c.get("/version").await.json()["reason"], "ServiceUnavailable");
    api.faults().fail("list", "nodes", 403, None, None);
    let forbidden = c.get("/api/v1/nodes").await.json();
    assert_eq!(forbidden["reason"], "Forbidden");
    assert!(
        forbidden["message"]
            .as_str()
            .unwrap()
            .contains("cannot list resource \"nodes\"")
    );
    api.faults().clear();
    assert_eq!(c.get("/version").await.status, 200);
    assert_eq!(c.get("/api/v1/namespaces/default/events").await.status, 200);
}

#[tokio::test]
async fn down_server_refuses_then_recovers() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node("n1"));
    let plain = Client::http(&api);
    let tls = Client::https(&api);
    let mut w = plain.watch("/api/v1/nodes?watch=true").await;
    assert_eq!(w.event().await["type"], "ADDED");

    api.faults().set_down(true);
    assert!(
        matches!(w.next(Duration::from_secs(5)).await, Next::Broken),
        "open watches are cut"
    );
    assert!(plain.try_call("GET", "/api/v1/nodes", None, None).await.is_err());
    assert!(tls.try_call("GET", "/api/v1/nodes", None, None).await.is_err());

    api.faults().set_down(false);
    assert_eq!(plain.get("/api/v1/nodes").await.status, 200);
    assert_eq!(tls.get("/api/v1/nodes").await.status, 200);
}

#[tokio::test]
async fn drop_watches_every_cuts_streams() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let mut w = c.watch("/api/v1/pods?watch=true").await;
    api.faults().drop_watches_every(Some(Duration::from_millis(200)));
    let t = Instant::now();
    assert!(matches!(w.next(Duration::from_secs(5)).await, Next::Broken));
    assert!(t.elapsed() < Duration::from_secs(5));
    // A new watch is cut again on the next tick.
    let mut w2 = c.watch("/api/v1/pods?watch=true").await;
    assert!(matches!(w2.next(Duration::from_secs(5)).await, Next::Broken));
    api.faults().drop_watches_every(None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut w3 = c.watch("/api/v1/pods?watch=true&timeoutSeconds=1").await;
    assert!(matches!(w3.next(Duration::from_secs(5)).await, Next::End));
}

#[tokio::test]
async fn both_event_apis_share_objects() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let ev = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "n1.17a8", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "nodemedic", "reportingInstance": "n1",
        "action": "Scan", "reason": "StaleCPUAssignment", "type": "Warning",
        "note": "CPUs 2-3 are held for a pod that is gone",
        "regarding": {"kind": "Node", "name": "n1", "apiVersion": "v1"}
    });
    let r = c.post("/apis/events.k8s.io/v1/namespaces/default/events", &ev).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["note"], ev["note"]);
    let core = c
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DNode,involvedObject.name%3Dn1")
        .await
        .json();
    assert_eq!(core["kind"], "EventList");
    assert_eq!(core["items"][0]["message"], ev["note"]);
    assert_eq!(core["items"][0]["involvedObject"]["name"], "n1");
    assert_eq!(core["items"][0]["reportingComponent"], "nodemedic");
    let series = c
        .patch(
            "/apis/events.k8s.io/v1/namespaces/default/events/n1.17a8",
            "application/merge-patch+json",
            &json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}}),
        )
        .await
        .json();
    assert_eq!(series["series"]["count"], 2);
    assert_eq!(
        api.store().get("events", Some("default"), "n1.17a8").unwrap()["series"]["count"],
        2
    );
    let v1 = c
        .get("/apis/events.k8s.io/v1/events?fieldSelector=regarding.name%3Dn1")
        .await
        .json();
    assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
    assert_eq!(v1["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn bad_requests_get_status_answers() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node("n1"));
    let c = Client::http(&api);
    let json_ct = Some("application/json");
    let merge = Some("application/merge-patch+json");
    let big = "x".repeat(4 * 1024 * 1024);
    // method, path, content type, body, expected status
    type Case<'a> = (&'a str, String, Option<&'a str>, Option<String>, u16);
    let cases: Vec<Case> = vec![
        ("GET", "/api/v1/pods?limit=abc".into(), None, None, 400),
        ("GET", "/api/v1/pods?limit=-1".into(), None, None, 400),
        ("GET", "/api/v1/pods?watch=maybe".into(), None, None, 400),
        (
            "GET",
            "/api/v1/pods?watch=true&resourceVersion=abc".into(),
            None,
            None,
            400,
        ),
        (
            "GET",
            "/api/v1/pods?watch=true&sendInitialEvents=true".into(),
            None,
            None,
            422,
        ),
        ("GET", "/api/v1/pods?labelSelector=%ff%fe".into(), None, None, 400),
        (
            "GET",
            "/api/v1/pods?fieldSelector=spec.nodeName".into(),
            None,
            None,
            400,
        ),
        (
            "GET",
            "/api/v1/pods?continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MX0".into(),
            None,
            None,
            400,
        ),
        ("GET", "/api/v1/pods?resourceVersion=abc".into(), None, None, 400),
        (
            "GET",
            "/api/v1/pods?resourceVersion=1000&resourceVersionMatch=Sometimes".into(),
            None,
            None,
            400,
        ),
        ("GET", "/api/v1/pods/x".into(), None, None, 404),
        ("GET", "/api/v1/namespaces/ns/pods/x".into(), None, None, 404),
        (
            "POST",
            "/api/v1/namespaces/ns/pods".into(),
            json_ct,
            Some("[1,2]".into()),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods".into(),
            json_ct,
            Some("{not json".into()),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods".into(),
            Some("application/yaml"),
            Some("a: b".into()),
            415,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods".into(),
            json_ct,
            Some(r#"{"kind":"Node"}"#.into()),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods".into(),
            json_ct,
            Some(r#"{"metadata":"x"}"#.into()),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods".into(),
            json_ct,
            Some(r#"{"metadata":{"name":"Bad_Name"},"spec":{"containers":[{"name":"a"}]}}"#.into()),
            422,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods".into(),
            json_ct,
            Some(format!("\"{big}\"")),
            413,
        ),
        ("POST", "/api/v1/pods".into(), json_ct, Some("{}".into()), 405),
        ("POST", "/version".into(), json_ct, Some("{}".into()), 405),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods".into(),
            merge,
            Some("{}".into()),
            405,
        ),
        ("PATCH", "/api/v1/nodes/n1".into(), merge, Some("[1]".into()), 400),
        ("PATCH", "/api/v1/nodes/n1".into(), merge, Some("{".into()), 400),
        (
            "PATCH",
            "/api/v1/nodes/n1".into(),
            Some("application/json-patch+json"),
            Some("{}".into()),
            400,
        ),
        ("PATCH", "/api/v1/nodes/n1".into(), None, Some("{}".into()), 415),
        (
            "PATCH",
            "/api/v1/nodes/n1".into(),
            merge,
            Some(r#"{"metadata":{"name":"n2"}}"#.into()),
            400,
        ),
        (
            "PATCH",
            "/api/v1/nodes/n1".into(),
            merge,
            Some(r#"{"metadata":{"uid":"other"}}"#.into()),
            409,
        ),
        (
            "PATCH",
            "/api/v1/nodes/n1".into(),
            merge,
            Some(r#"{"kind":"Pod"}"#.into()),
            400,
        ),
        (
            "PUT",
            "/api/v1/nodes/n1".into(),
            json_ct,
            Some(r#"{"metadata":{"name":"n2"}}"#.into()),
            400,
        ),
        (
            "PUT",
            "/api/v1/nodes/n9".into(),
            json_ct,
            Some(r#"{"metadata":{"name":"n9"}}"#.into()),
            404,
        ),
        ("DELETE", "/api/v1/nodes/n1".into(), json_ct, Some("nope".into()), 400),
        ("DELETE", "/api/v1/nodes/n1?dryRun=Maybe".into(), None, None, 400),
        (
            "DELETE",
            "/api/v1/nodes/n1?gracePeriodSeconds=soon".into(),
            None,
            None,
            400,
        ),
    ];
    for (method, path, ct, body, want) in cases {
        let resp = c
            .send({
                let mut b = Request::builder()
                    .method(method)
                    .uri(path.as_str())
                    .header("host", "127.0.0.1");
                if let Some(ct) = ct {
                    b = b.header("content-type", ct);
                }
                b.body(Full::new(Bytes::from(body.unwrap_or_default()))).unwrap()
            })
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        let s: Value = serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        assert_eq!(status, want, "{method} {path}: {s}");
        assert_eq!(
            (s["kind"].as_str(), s["status"].as_str()),
            (Some("Status"), Some("Failure")),
            "{method} {path}"
        );
        assert_eq!(s["code"], want, "{method} {path}");
    }
    assert!(api.store().get("nodes", None, "n1").is_some());
    assert_eq!(c.get("/version").await.status, 200, "still serving");
}

#[tokio::test]
async fn leases_round_trip_with_optimistic_concurrency() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let coll = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let path = format!("{coll}/n1");
    let first = lease("kube-node-lease", "n1", "n1", "2026-11-24T03:40:00.123456Z");

    let created = c.post(coll, &first).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let created = created.json();
    assert_eq!(
        (&created["apiVersion"], &created["kind"]),
        (&json!("coordination.k8s.io/v1"), &json!("Lease"))
    );
    assert_eq!(created["spec"], first["spec"], "spec round-trips unchanged");
    assert_eq!(created["metadata"]["annotations"], first["metadata"]["annotations"]);
    assert!(created["metadata"]["uid"].is_string() && created["metadata"]["creationTimestamp"].is_string());
    assert!(created.get("status").is_none(), "Lease has no status");
    let rv1 = rv_of(&created);

    // Creating it again: 409 AlreadyExists.
    let again = c.post(coll, &first).await;
    assert_eq!(again.status, 409);
    assert_eq!(
        again.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "leases.coordination.k8s.io \"n1\" already exists", "reason": "AlreadyExists",
               "details": {"name": "n1", "group": "coordination.k8s.io", "kind": "leases"}, "code": 409})
    );

    let got = c.get(&path).await.json();
    assert_eq!(got, created);
    assert_eq!(
        api.store().get("leases", Some("kube-node-lease"), "n1").unwrap(),
        created
    );

    // Renew with the current resource version.
    let mut renewed = got.clone();
    renewed["spec"]["renewTime"] = "2026-11-24T03:40:10.654321Z".into();
    renewed["spec"]["holderIdentity"] = "n1-restarted".into();
    renewed["spec"]["leaseTransitions"] = 4.into();
    renewed["metadata"]["annotations"]["nodemedic.io/last-report"] = "{\"healthy\":false}".into();
    let r = c.put(&path, &renewed).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let updated = r.json();
    assert!(rv_of(&updated) > rv1);
    assert_eq!(updated["spec"], renewed["spec"]);
    assert_eq!(updated["metadata"]["annotations"], renewed["metadata"]["annotations"]);
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(c.get(&path).await.json(), updated);

    // A writer holding the first version loses: 409 Conflict, nothing written.
    let mut stale = got.clone();
    stale["spec"]["holderIdentity"] = "someone-else".into();
    let r = c.put(&path, &stale).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Operation cannot be fulfilled on leases.coordination.k8s.io \"n1\": the object has been \
                           modified; please apply your changes to the latest version and try again",
               "reason": "Conflict",
               "details": {"name": "n1", "group": "coordination.k8s.io", "kind": "leases"}, "code": 409})
    );
    assert_eq!(c.get(&path).await.json()["spec"]["holderIdentity"], "n1-restarted");

    // Without a resource version the update is unconditional (leases allow it).
    let mut blind = lease("kube-node-lease", "n1", "n2", "2026-11-24T03:41:00.000000Z");
    blind["spec"]["leaseTransitions"] = 5.into();
    let r = c.put(&path, &blind).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let taken = r.json();
    assert_eq!(taken["spec"], blind["spec"]);
    assert!(rv_of(&taken) > rv_of(&updated));
    assert_eq!(
        taken["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );

    // A merge patch (another way holders renew) keeps the other fields.
    let patched = c
        .patch(
            &path,
            "application/merge-patch+json",
            &json!({"spec": {"renewTime": "2026-11-24T03:41:05.000007Z"}}),
        )
        .await
        .json();
    assert_eq!(patched["spec"]["renewTime"], "2026-11-24T03:41:05.000007Z");
    assert_eq!(patched["spec"]["acquireTime"], "2026-11-24T03:39:20.000001Z");
    assert_eq!(patched["spec"]["leaseDurationSeconds"], 40);

    // ValidateLeaseSpec.
    let mut bad = lease("kube-node-lease", "n2", "n2", "2026-11-24T03:40:00.000000Z");
    bad["spec"]["leaseDurationSeconds"] = 0.into();
    let r = c.post(coll, &bad).await;
    assert_eq!((r.status, r.json()["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        r.json()["message"],
        "Lease \"n2\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
    );

    // Lists, in one namespace and across all, and discovery.
    c.post(
        "/apis/coordination.k8s.io/v1/namespaces/nodemedic/leases",
        &lease("nodemedic", "nodemedic-leader", "pod-a", "2026-11-24T03:40:00.000000Z"),
    )
    .await;
    let all = c.get("/apis/coordination.k8s.io/v1/leases").await.json();
    assert_eq!(all["kind"], "LeaseList");
    assert_eq!(names(&all), ["n1", "nodemedic-leader"]);
    let one = c
        .get("/apis/coordination.k8s.io/v1/namespaces/nodemedic/leases?fieldSelector=metadata.name%3Dnodemedic-leader")
        .await
        .json();
    assert_eq!(names(&one), ["nodemedic-leader"]);
    assert_eq!(
        c.get("/apis/coordination.k8s.io/v1/leases?fieldSelector=spec.holderIdentity%3Dn1")
            .await
            .status,
        400,
        "no field labels beyond metadata"
    );
    assert_eq!(
        c.get(&format!("{path}/status")).await.status,
        404,
        "no status subresource"
    );
    let resources = c.get("/apis/coordination.k8s.io/v1").await.json();
    assert_eq!(
        resources["resources"],
        json!([{"name": "leases", "singularName": "lease", "namespaced": true, "kind": "Lease",
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}])
    );

    // Deleting answers with a Status.
    let gone = c.delete(&path, None).await.json();
    assert_eq!(
        (&gone["status"], &gone["details"]["kind"]),
        (&json!("Success"), &json!("leases"))
    );
    assert_eq!(c.get(&path).await.status, 404);
}

#[tokio::test]
async fn spark_applications_are_served_with_a_status_subresource() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let group = "/apis/sparkoperator.k8s.io/v1beta2";
    let coll = format!("{group}/namespaces/spark/sparkapplications");
    let path = format!("{coll}/pi");
    let restart = json!({"type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 10,
                         "onSubmissionFailureRetries": 5, "onSubmissionFailureRetryInterval": 20});

    // Create: the spec is stored as given, a status in the body is dropped.
    let mut body = spark_app("spark", "pi", restart.clone(), json!({"team": "data"}));
    body["status"] = json!({"applicationState": {"state": "COMPLETED"}});
    let r = c.post(&coll, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let created = r.json();
    assert_eq!(
        (&created["apiVersion"], &created["kind"]),
        (&json!("sparkoperator.k8s.io/v1beta2"), &json!("SparkApplication"))
    );
    assert_eq!(created["spec"], body["spec"]);
    assert_eq!(created["spec"]["restartPolicy"], restart);
    assert!(created.get("status").is_none(), "{created}");
    assert!(created["metadata"]["uid"].is_string());
    assert_eq!(c.get(&path).await.json(), created);
    assert_eq!(api.store().get("sparkapp", Some("spark"), "pi").unwrap(), created);
    assert_eq!(
        c.post(&coll, &body).await.json()["message"],
        "sparkapplications.sparkoperator.k8s.io \"pi\" already exists"
    );

    // Direct inserts keep their status; lists filter by label and namespace.
    let store = api.store();
    let mut running = spark_app("spark", "etl", json!({"type": "Never"}), json!({"team": "data"}));
    running["status"] = json!({"applicationState": {"state": "RUNNING"}, "driverInfo": {"podName": "etl-driver"}});
    store.create(running);
    store.create(spark_app(
        "other",
        "adhoc",
        json!({"type": "Always"}),
        json!({"team": "ml"}),
    ));
    assert_eq!(
        store.get("sparkapplications", Some("spark"), "etl").unwrap()["status"]["driverInfo"]["podName"],
        "etl-driver"
    );
    let all = c.get(&format!("{group}/sparkapplications")).await.json();
    assert_eq!(
        (&all["kind"], &all["apiVersion"]),
        (&json!("SparkApplicationList"), &json!("sparkoperator.k8s.io/v1beta2"))
    );
    assert_eq!(names(&all), ["adhoc", "etl", "pi"]);
    assert_eq!(
        names(&c.get(&format!("{coll}?labelSelector=team%3Ddata")).await.json()),
        ["etl", "pi"]
    );
    assert_eq!(
        names(
            &c.get(&format!("{group}/sparkapplications?labelSelector=team%20in%20(ml)"))
                .await
                .json()
        ),
        ["adhoc"]
    );
    assert_eq!(
        names(
            &c.get(&format!(
                "{group}/sparkapplications?fieldSelector=metadata.namespace%3Dother"
            ))
            .await
            .json()
        ),
        ["adhoc"]
    );
    assert_eq!(
        c.get(&format!("{coll}?fieldSelector=spec.restartPolicy.type%3DNever"))
            .await
            .status,
        400,
        "a CRD without selectableFields has only the metadata field labels"
    );

    // The status subresource changes the status and nothing else, labels included.
    let rv = rv_of(&created);
    let r = c
        .patch(
            &format!("{path}/status"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"team": "ml"}}, "spec": {"restartPolicy": {"type": "Never"}},
                    "status": {"applicationState": {"state": "FAILED", "errorMessage": "driver pod failed"},
                               "driverInfo": {"podName": "pi-driver"}, "executionAttempts": 1}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let failed = r.json();
    assert_eq!(failed["status"]["applicationState"]["state"], "FAILED");
    assert_eq!(failed["status"]["driverInfo"]["podName"], "pi-driver");
    assert_eq!(failed["spec"], created["spec"]);
    assert_eq!(failed["metadata"]["labels"], json!({"team": "data"}));
    assert!(rv_of(&failed) > rv);
    assert_eq!(c.get(&format!("{path}/status")).await.json(), failed);

    // The main endpoint changes the spec and ignores the status.
    let r = c
        .patch(
            &path,
            "application/merge-patch+json",
            &json!({"spec": {"restartPolicy": {"onFailureRetries": 0}}, "status": null}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let patched = r.json();
    assert_eq!(patched["spec"]["restartPolicy"]["onFailureRetries"], 0);
    assert_eq!(patched["spec"]["restartPolicy"]["type"], "OnFailure");
    assert_eq!(patched["status"], failed["status"]);
    let r = c
        .patch(
            &path,
            "application/json-patch+json",
            &json!([{"op": "replace", "path": "/spec/restartPolicy/type", "value": "Never"}]),
        )
        .await;
    assert_eq!(
        (r.status, &r.json()["spec"]["restartPolicy"]["type"]),
        (200, &json!("Never"))
    );

    // No strategic merge patch for custom resources.
    let r = c
        .patch(
            &path,
            "application/strategic-merge-patch+json",
            &json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    assert_eq!(
        r.json()["message"],
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    assert_eq!(
        c.patch(
            &format!("{path}/status"),
            "application/strategic-merge-patch+json",
            &json!({})
        )
        .await
        .status,
        415
    );

    // No unconditional PUT either; with the resource version it is an ordinary update.
    let mut current = c.get(&path).await.json();
    current["metadata"]["annotations"] = json!({"nodemedic.io/fenced": "true"});
    let mut blind = current.clone();
    blind["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let r = c.put(&path, &blind).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "sparkapplications.sparkoperator.k8s.io \"pi\" is invalid: metadata.resourceVersion: \
                           Invalid value: 0x0: must be specified for an update",
               "reason": "Invalid",
               "details": {"name": "pi", "group": "sparkoperator.k8s.io", "kind": "sparkapplications",
                           "causes": [{"reason": "FieldValueInvalid",
                                       "message": "Invalid value: 0x0: must be specified for an update",
                                       "field": "metadata.resourceVersion"}]},
               "code": 422})
    );
    let r = c.put(&path, &current).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["metadata"]["annotations"]["nodemedic.io/fenced"], "true");
    assert_eq!(r.json()["status"], failed["status"]);

    // Watch and delete: the DELETED event, a success Status.
    let mut w = c
        .watch(&format!("{coll}?watch=true&resourceVersion={}", rv_of(&r.json())))
        .await;
    let gone = c.delete(&path, None).await.json();
    assert_eq!(
        (&gone["kind"], &gone["status"], &gone["details"]),
        (
            &json!("Status"),
            &json!("Success"),
            &json!({"name": "pi", "group": "sparkoperator.k8s.io", "kind": "sparkapplications",
                    "uid": created["metadata"]["uid"]})
        )
    );
    let e = w.change().await;
    assert_eq!(
        (&e["type"], &e["object"]["kind"]),
        (&json!("DELETED"), &json!("SparkApplication"))
    );
    assert_eq!(c.get(&path).await.status, 404);

    // Discovery, legacy and aggregated.
    let resources = c.get(group).await.json();
    assert_eq!(
        resources,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "sparkoperator.k8s.io/v1beta2",
        "resources": [
            {"name": "sparkapplications", "singularName": "sparkapplication", "namespaced": true,
             "kind": "SparkApplication",
             "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
             "shortNames": ["sparkapp"]},
            {"name": "sparkapplications/status", "singularName": "", "namespaced": true,
             "kind": "SparkApplication", "verbs": ["get", "patch", "update"]}
        ]})
    );
    assert_eq!(
        c.get("/apis/sparkoperator.k8s.io").await.json()["preferredVersion"]["version"],
        "v1beta2"
    );
}

#[tokio::test]
async fn node_resource_topologies_are_served_cluster_scoped() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let group = "/apis/topology.node.k8s.io/v1alpha2";
    let coll = format!("{group}/noderesourcetopologies");
    let path = format!("{coll}/worker-1");
    let crd = nodemedic_tests::crd::node_resource_topology_crd();
    let node_uid = api.store().create(node("worker-1"))["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = c.watch(&format!("{coll}?watch=true")).await;

    // Create, then GET: stored as sent, with the server's metadata; valid against the CRD.
    let body = nodemedic_tests::crd::example_node_resource_topology("worker-1", &node_uid, ["3", "6"]);
    nodemedic_tests::crd::validate(&crd, "v1alpha2", &body).unwrap();
    let r = c.post(&coll, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let created = r.json();
    assert_eq!(
        (&created["apiVersion"], &created["kind"]),
        (&json!("topology.node.k8s.io/v1alpha2"), &json!("NodeResourceTopology"))
    );
    assert_eq!(created["zones"], body["zones"]);
    assert_eq!(created["attributes"], body["attributes"]);
    assert_eq!(created["metadata"]["labels"], body["metadata"]["labels"]);
    assert_eq!(
        created["metadata"]["ownerReferences"],
        body["metadata"]["ownerReferences"]
    );
    assert!(created["metadata"]["uid"].is_string() && created["metadata"].get("namespace").is_none());
    nodemedic_tests::crd::validate(&crd, "v1alpha2", &created).unwrap();
    let got = c.get(&path).await;
    assert_eq!((got.status, got.json()), (200, created.clone()));
    assert_eq!(api.store().get("node-res-topo", None, "worker-1").unwrap(), created);
    let e = w.change().await;
    assert_eq!((&e["type"], &e["object"]), (&json!("ADDED"), &created));
    let dup = c.post(&coll, &body).await;
    assert_eq!(
        (
            dup.status,
            dup.json()["reason"].as_str(),
            dup.json()["message"].as_str()
        ),
        (
            409,
            Some("AlreadyExists"),
            Some("noderesourcetopologies.topology.node.k8s.io \"worker-1\" already exists")
        )
    );
    // Cluster-scoped: no namespaced path.
    assert_eq!(
        c.get(&format!("{group}/namespaces/default/noderesourcetopologies/worker-1"))
            .await
            .status,
        404
    );
    // No subresources either.
    assert_eq!(c.get(&format!("{path}/status")).await.status, 404);

    // PUT with the current resource version: an update. With a stale one: 409 Conflict, the
    // object unchanged. Without one: 422, as for every custom resource.
    let mut update = created.clone();
    update["zones"][0]["resources"][0]["available"] = json!("5");
    update["attributes"][2]["value"] = json!("");
    let r = c.put(&path, &update).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let updated = r.json();
    assert_eq!(updated["zones"][0]["resources"][0]["available"], "5");
    assert!(rv_of(&updated) > rv_of(&created));
    let e = w.change().await;
    assert_eq!((&e["type"], &e["object"]), (&json!("MODIFIED"), &updated));
    let mut stale = created.clone();
    stale["zones"][1]["resources"][0]["available"] = json!("2");
    let r = c.put(&path, &stale).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Operation cannot be fulfilled on noderesourcetopologies.topology.node.k8s.io \"worker-1\": \
                           the object has been modified; please apply your changes to the latest version and try again",
               "reason": "Conflict",
               "details": {"name": "worker-1", "group": "topology.node.k8s.io", "kind": "noderesourcetopologies"},
               "code": 409})
    );
    assert_eq!(c.get(&path).await.json(), updated);
    let mut blind = stale.clone();
    blind["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    assert_eq!(c.put(&path, &blind).await.status, 422);
    // A PUT that changes nothing stores nothing.
    let r = c.put(&path, &updated).await;
    assert_eq!((r.status, rv_of(&r.json())), (200, rv_of(&updated)));

    // Patches: JSON merge and JSON patch (with a resource-version test); no strategic merge,
    // no server-side apply.
    let r = c
        .patch(
            &path,
            "application/merge-patch+json",
            &json!({"metadata": {"resourceVersion": updated["metadata"]["resourceVersion"]},
                    "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                                   {"name": "topologyManagerScope", "value": "pod"}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let merged = r.json();
    assert_eq!(
        merged["attributes"].as_array().unwrap().len(),
        2,
        "a merge patch replaces lists"
    );
    assert_eq!(merged["zones"], updated["zones"]);
    let stale_merge = c
        .patch(
            &path,
            "application/merge-patch+json",
            &json!({"metadata": {"resourceVersion": updated["metadata"]["resourceVersion"]}, "zones": []}),
        )
        .await;
    assert_eq!(stale_merge.status, 409);
    let r = c
        .patch(
            &path,
            "application/json-patch+json",
            &json!([{"op": "test", "path": "/metadata/resourceVersion", "value": merged["metadata"]["resourceVersion"]},
                    {"op": "replace", "path": "/zones/1/resources/0/available", "value": "7"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let patched = r.json();
    assert_eq!(patched["zones"][1]["resources"][0]["available"], "7");
    nodemedic_tests::crd::validate(&crd, "v1alpha2", &patched).unwrap();
    let failed_test = c
        .patch(
            &path,
            "application/json-patch+json",
            &json!([{"op": "test", "path": "/metadata/resourceVersion", "value": merged["metadata"]["resourceVersion"]}]),
        )
        .await;
    assert_eq!(failed_test.status, 422, "{}", failed_test.text);
    let r = c
        .patch(&path, "application/strategic-merge-patch+json", &json!({"zones": []}))
        .await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    // Server-side apply works on custom resources, with a field manager.
    let r = c
        .patch(&path, "application/apply-patch+yaml", &json!({"zones": []}))
        .await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (422, Some("Invalid")),
        "{}",
        r.text
    );

    // Faults match the plural, with or without the group.
    api.faults().fail(
        "update",
        "noderesourcetopologies.topology.node.k8s.io",
        500,
        Some(1),
        None,
    );
    let mut next = patched.clone();
    next["zones"][0]["resources"][0]["available"] = json!("4");
    assert_eq!(c.put(&path, &next).await.status, 500);
    let r = c.put(&path, &next).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let last = r.json();

    // Lists: the List kind, label selectors, field selectors on metadata.name only.
    let mut other = nodemedic_tests::crd::example_node_resource_topology(
        "worker-2",
        "7d0c0f57-8a32-4a8e-b1a4-6f5a5b2c1d0e",
        ["8", "8"],
    );
    other["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "nfd-topology-updater"});
    api.store().create(other);
    let all = c.get(&coll).await.json();
    assert_eq!(
        (&all["kind"], &all["apiVersion"]),
        (
            &json!("NodeResourceTopologyList"),
            &json!("topology.node.k8s.io/v1alpha2")
        )
    );
    assert_eq!(names(&all), ["worker-1", "worker-2"]);
    assert_eq!(
        names(
            &c.get(&format!(
                "{coll}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dnodemedic"
            ))
            .await
            .json()
        ),
        ["worker-1"]
    );
    assert_eq!(
        names(
            &c.get(&format!("{coll}?fieldSelector=metadata.name%3Dworker-2"))
                .await
                .json()
        ),
        ["worker-2"]
    );
    assert_eq!(
        c.get(&format!("{coll}?fieldSelector=metadata.namespace%3Ddefault"))
            .await
            .status,
        400
    );

    // Delete: a success Status, then 404.
    let gone = c.delete(&path, None).await.json();
    assert_eq!(
        (&gone["status"], &gone["details"]),
        (
            &json!("Success"),
            &json!({"name": "worker-1", "group": "topology.node.k8s.io", "kind": "noderesourcetopologies",
                    "uid": created["metadata"]["uid"]})
        )
    );
    assert_eq!(c.get(&path).await.status, 404);

    // Discovery.
    let resources = c.get(group).await.json();
    assert_eq!(
        resources,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "topology.node.k8s.io/v1alpha2",
        "resources": [
            {"name": "noderesourcetopologies", "singularName": "noderesourcetopology", "namespaced": false,
             "kind": "NodeResourceTopology",
             "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
             "shortNames": ["node-res-topo"]}
        ]})
    );
    assert_eq!(
        c.get("/apis/topology.node.k8s.io").await.json()["preferredVersion"]["groupVersion"],
        "topology.node.k8s.io/v1alpha2"
    );

    // Every write is in the request log, failed ones included, so a test can count the writes
    // of an agent: (verb, status) in order.
    let writes: Vec<(String, u16)> = api
        .requests()
        .iter()
        .filter(|r| r.group == "topology.node.k8s.io" && r.resource == "noderesourcetopologies")
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .map(|r| (r.verb.clone(), r.status))
        .collect();
    let want: Vec<(String, u16)> = [
        ("create", 201),
        ("create", 409),
        ("update", 200),
        ("update", 409),
        ("update", 422),
        ("update", 200),
        ("patch", 200),
        ("patch", 409),
        ("patch", 200),
        ("patch", 422),
        ("patch", 415),
        ("patch", 422),
        ("update", 500),
        ("update", 200),
        ("delete", 200),
    ]
    .iter()
    .map(|(v, s)| (v.to_string(), *s))
    .collect();
    assert_eq!(writes, want);
    let log = api.requests();
    let first_create = log
        .iter()
        .find(|r| r.verb == "create" && r.resource == "noderesourcetopologies")
        .unwrap();
    assert_eq!(
        (
            first_create.method.as_str(),
            first_create.path.as_str(),
            first_create.name.as_deref()
        ),
        ("POST", coll.as_str(), None)
    );
    assert_eq!(first_create.body_json().unwrap(), body);
    let last_update = log.iter().rfind(|r| r.verb == "update" && r.status == 200).unwrap();
    assert_eq!(last_update.name.as_deref(), Some("worker-1"));
    assert_eq!(last_update.namespace, None);
    assert_eq!(
        last_update.body_json().unwrap()["zones"][0]["resources"][0]["available"],
        last["zones"][0]["resources"][0]["available"]
    );
}

#[tokio::test]
async fn pods_get_the_default_tolerations() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let default =
        |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300});
    let not_ready = default("node.kubernetes.io/not-ready");
    let unreachable = default("node.kubernetes.io/unreachable");

    // Through the API: exactly the two.
    let r = c
        .post("/api/v1/namespaces/spark/pods", &pod("spark", "a", "n1", json!({})))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["spec"]["tolerations"], json!([not_ready, unreachable]));

    // A user's own toleration for a taint, keyed exactly or by an empty key with Exists,
    // stays as given (its tolerationSeconds too) and is not added again.
    let mut own = pod("spark", "b", "n1", json!({}));
    let own_not_ready = json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                               "effect": "NoExecute", "tolerationSeconds": 30});
    own["spec"]["tolerations"] = json!([own_not_ready]);
    let r = c.post("/api/v1/namespaces/spark/pods", &own).await;
    assert_eq!(r.json()["spec"]["tolerations"], json!([own_not_ready, unreachable]));
    let mut everything = pod("spark", "c", "n1", json!({}));
    everything["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    let r = c.post("/api/v1/namespaces/spark/pods", &everything).await;
    assert_eq!(r.json()["spec"]["tolerations"], json!([{"operator": "Exists"}]));

    // A dry run shows them too.
    let r = c
        .post(
            "/api/v1/namespaces/spark/pods?dryRun=All",
            &pod("spark", "d", "n1", json!({})),
        )
        .await;
    assert_eq!(r.json()["spec"]["tolerations"], json!([not_ready, unreachable]));

    // Direct inserts model pods that went through admission: the same.
    let store = api.store();
    let inserted = store.create(pod("spark", "e", "n1", json!({})));
    assert_eq!(inserted["spec"]["tolerations"], json!([not_ready, unreachable]));

    // A test that wants a pod without them takes them away afterwards; updates do not add
    // them back.
    store.modify("pods", Some("spark"), "e", |p| {
        p["spec"].as_object_mut().unwrap().remove("tolerations");
    });
    assert!(
        store.get("pods", Some("spark"), "e").unwrap()["spec"]
            .get("tolerations")
            .is_none()
    );
    let r = c
        .patch(
            "/api/v1/namespaces/spark/pods/e",
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["spec"].get("tolerations").is_none());
    let r = c
        .patch(
            "/api/v1/namespaces/spark/pods/a",
            "application/json-patch+json",
            &json!([{"op": "remove", "path": "/spec/tolerations"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["spec"].get("tolerations").is_none());
}

#[tokio::test]
async fn configmaps_create_get_list() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let cm = |ns: &str, name: &str, app: &str| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "data": {"nodemedic.yaml": "scan_interval: 30s\nrules:\n  - stale-cpu\n", "empty": ""},
            "binaryData": {"blob": "AAEC/w=="}
        })
    };
    let body = cm("nodemedic", "nodemedic-config", "nodemedic");
    let r = c.post("/api/v1/namespaces/nodemedic/configmaps", &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let created = r.json();
    assert_eq!(created["data"], body["data"]);
    assert_eq!(created["binaryData"], body["binaryData"]);
    assert_eq!(created["kind"], "ConfigMap");
    let got = c
        .get("/api/v1/namespaces/nodemedic/configmaps/nodemedic-config")
        .await
        .json();
    assert_eq!(got, created);
    assert_eq!(
        api.store().get("cm", Some("nodemedic"), "nodemedic-config").unwrap(),
        created
    );
    assert_eq!(
        c.post("/api/v1/namespaces/nodemedic/configmaps", &body).await.json()["message"],
        "configmaps \"nodemedic-config\" already exists"
    );

    api.store().create(cm("nodemedic", "other", "other"));
    api.store().create(cm("kube-system", "kube-proxy", "kube-proxy"));
    let list = c.get("/api/v1/namespaces/nodemedic/configmaps").await.json();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(names(&list), ["nodemedic-config", "other"]);
    let all = c.get("/api/v1/configmaps").await.json();
    assert_eq!(names(&all), ["kube-proxy", "nodemedic-config", "other"]);
    let labelled = c.get("/api/v1/configmaps?labelSelector=app%3Dnodemedic").await.json();
    assert_eq!(names(&labelled), ["nodemedic-config"]);
    let by_ns = c
        .get("/api/v1/configmaps?fieldSelector=metadata.namespace%3Dkube-system")
        .await
        .json();
    assert_eq!(names(&by_ns), ["kube-proxy"]);
    assert_eq!(c.get("/api/v1/configmaps?fieldSelector=data.x%3Dy").await.status, 400);

    let core = c.get("/api/v1").await.json();
    let entry = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "configmaps")
        .unwrap()
        .clone();
    assert_eq!(
        (&entry["kind"], &entry["namespaced"], &entry["shortNames"]),
        (&json!("ConfigMap"), &json!(true), &json!(["cm"]))
    );
}

/// What spark-submit creates beside the driver: a headless Service and, with on-demand volumes,
/// PersistentVolumeClaims; both with their defaults, deleted one by one (answering with the
/// object) or by collection (answering with the list of what went), with DELETED events.
#[tokio::test]
async fn services_and_claims_are_served_and_deleted_by_collection() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    let core = c.get("/api/v1").await.json();
    let entry = |name: &str| {
        core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {core}"))
            .clone()
    };
    assert_eq!(
        (&entry("services")["kind"], &entry("services")["shortNames"]),
        (&json!("Service"), &json!(["svc"]))
    );
    assert_eq!(
        (
            &entry("persistentvolumeclaims")["kind"],
            &entry("persistentvolumeclaims")["shortNames"]
        ),
        (&json!("PersistentVolumeClaim"), &json!(["pvc"]))
    );
    assert_eq!(entry("services/status")["verbs"], json!(["get", "patch", "update"]));
    assert_eq!(entry("persistentvolumeclaims/status")["namespaced"], true);

    let svc = |name: &str, app: &str, cluster_ip: Option<&str>| {
        let mut s = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "labels": {"spark-app-selector": app}},
            "spec": {"selector": {"spark-role": "driver"}, "ports": [{"name": "driver-rpc-port", "port": 7078}]}
        });
        if let Some(ip) = cluster_ip {
            s["spec"]["clusterIP"] = ip.into();
        }
        s
    };
    let headless = c
        .post(
            "/api/v1/namespaces/spark/services",
            &svc("a-driver-svc", "a", Some("None")),
        )
        .await;
    assert_eq!(headless.status, 201, "{}", headless.text);
    let headless = headless.json();
    assert_eq!(
        (
            &headless["spec"]["type"],
            &headless["spec"]["clusterIP"],
            &headless["spec"]["clusterIPs"]
        ),
        (&json!("ClusterIP"), &json!("None"), &json!(["None"]))
    );
    assert_eq!(
        headless["spec"]["ports"][0],
        json!({"name": "driver-rpc-port", "port": 7078, "protocol": "TCP", "targetPort": 7078})
    );
    assert_eq!(headless["status"], json!({"loadBalancer": {}}));
    let plain = c
        .post("/api/v1/namespaces/spark/services", &svc("b-driver-svc", "b", None))
        .await
        .json();
    let ip: Vec<u32> = plain["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .split('.')
        .map(|o| o.parse().unwrap())
        .collect();
    assert!(ip.len() == 4 && ip[0] == 10 && (96..112).contains(&ip[1]), "{plain}");
    assert_eq!(plain["spec"]["clusterIPs"], json!([plain["spec"]["clusterIP"]]));
    c.post(
        "/api/v1/namespaces/spark/services",
        &svc("c-driver-svc", "a", Some("None")),
    )
    .await;
    let claim = |name: &str, app: &str| {
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": {"spark-app-selector": app}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"}
        })
    };
    let pvc = c
        .post(
            "/api/v1/namespaces/spark/persistentvolumeclaims",
            &claim("a-exec-1-pvc-0", "a"),
        )
        .await;
    assert_eq!(pvc.status, 201, "{}", pvc.text);
    assert_eq!(
        (&pvc.json()["status"], &pvc.json()["spec"]["volumeMode"]),
        (&json!({"phase": "Pending"}), &json!("Filesystem"))
    );
    c.post(
        "/api/v1/namespaces/spark/persistentvolumeclaims",
        &claim("b-exec-1-pvc-0", "b"),
    )
    .await;

    let rv = api.store().resource_version();
    let mut w = c
        .watch(&format!(
            "/api/v1/namespaces/spark/services?watch=true&resourceVersion={rv}"
        ))
        .await;
    // One by one: the deleted object comes back, as for pods.
    let gone = c.delete("/api/v1/namespaces/spark/services/b-driver-svc", None).await;
    assert_eq!((gone.status, &gone.json()["kind"]), (200, &json!("Service")));
    assert_eq!(gone.json()["metadata"]["name"], "b-driver-svc");
    // By collection: the list of what was deleted.
    let r = c
        .delete(
            "/api/v1/namespaces/spark/services?labelSelector=spark-app-selector%3Da",
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["kind"], "ServiceList");
    assert_eq!(names(&r.json()), ["a-driver-svc", "c-driver-svc"]);
    assert!(api.store().list("services").is_empty());
    let mut deleted = Vec::new();
    for _ in 0..3 {
        let e = w.change().await;
        assert_eq!(e["type"], "DELETED", "{e}");
        deleted.push(e["object"]["metadata"]["name"].as_str().unwrap().to_string());
    }
    assert_eq!(deleted, ["b-driver-svc", "a-driver-svc", "c-driver-svc"]);
    let r = c
        .delete(
            "/api/v1/namespaces/spark/persistentvolumeclaims?labelSelector=spark-app-selector%3Db",
            None,
        )
        .await;
    assert_eq!(
        (r.json()["kind"].as_str(), names(&r.json())),
        (Some("PersistentVolumeClaimList"), vec!["b-exec-1-pvc-0".to_string()])
    );
    let left: Vec<Value> = api.store().list("pvc");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["metadata"]["name"], "a-exec-1-pvc-0");
    let log = api.requests();
    let deletes: Vec<(&str, &str, u16)> = log
        .iter()
        .filter(|r| r.verb.starts_with("delete"))
        .map(|r| (r.verb.as_str(), r.resource.as_str(), r.status))
        .collect();
    assert_eq!(
        deletes,
        [
            ("delete", "services", 200),
            ("deletecollection", "services", 200),
            ("deletecollection", "persistentvolumeclaims", 200)
        ]
    );
}

/// Server-side apply as fabric8 sends it (`PATCH ...?fieldManager=fabric8&force=true` with
/// `application/apply-patch+yaml; charset=utf-8` and a JSON body): creates what is missing
/// (201), merges the applied fields into what exists (200), changes nothing when nothing differs.
#[tokio::test]
async fn server_side_apply_creates_then_merges() {
    let api = ApiServer::start().await.unwrap();
    let c = Client::http(&api);
    const APPLY: &str = "application/apply-patch+yaml; charset=utf-8";
    let path = "/api/v1/namespaces/spark/configmaps/drv-conf-map?fieldManager=fabric8&force=true";
    let owner = json!([{"apiVersion": "v1", "kind": "Pod", "controller": true, "name": "pi-driver", "uid": "d6c1f4c4-0000-4000-8000-000000000001"}]);
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "drv-conf-map", "namespace": "spark", "ownerReferences": owner},
        "data": {"spark.properties": "spark.app.name=pi\n"},
        "immutable": true
    });
    let created = c.patch(path, APPLY, &cm).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let created = created.json();
    assert_eq!(created["metadata"]["ownerReferences"], owner);
    assert_eq!(created["data"], cm["data"]);
    assert!(created["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    let stored = api.store().get("configmaps", Some("spark"), "drv-conf-map").unwrap();
    assert_eq!(stored, created);

    // Applying the same again changes nothing; applying more merges it in.
    let same = c.patch(path, APPLY, &cm).await;
    assert_eq!(same.status, 200);
    assert_eq!(
        same.json()["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let mut more = cm.clone();
    more["metadata"]["labels"] = json!({"spark-app-selector": "spark-1"});
    more["data"] = json!({"extra": "1"});
    let merged = c.patch(path, APPLY, &more).await;
    assert_eq!(merged.status, 200, "{}", merged.text);
    let merged = merged.json();
    assert_eq!(merged["metadata"]["uid"], created["metadata"]["uid"]);
    assert!(rv_of(&merged) > rv_of(&created));
    assert_eq!(merged["metadata"]["labels"]["spark-app-selector"], "spark-1");
    assert_eq!(
        merged["data"],
        json!({"spark.properties": "spark.app.name=pi\n", "extra": "1"}),
        "fields of earlier applies stay: field ownership is not modelled"
    );

    // A Service is created with its defaults.
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "pi-driver-svc", "ownerReferences": owner},
        "spec": {"clusterIP": "None", "ports": [{"name": "spark-ui", "port": 4040, "targetPort": 4040}],
                 "selector": {"spark-role": "driver"}}
    });
    let r = c
        .patch(
            "/api/v1/namespaces/spark/services/pi-driver-svc?fieldManager=fabric8&force=true",
            APPLY,
            &svc,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        (
            &r.json()["metadata"]["namespace"],
            &r.json()["spec"]["ports"][0]["protocol"]
        ),
        (&json!("spark"), &json!("TCP"))
    );

    // What the API server refuses.
    let no_manager = c
        .patch("/api/v1/namespaces/spark/configmaps/drv-conf-map", APPLY, &cm)
        .await;
    assert_eq!(
        (no_manager.status, no_manager.json()["message"].as_str()),
        (
            422,
            Some("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
        )
    );
    let forced_merge = c
        .patch(path, "application/merge-patch+json", &json!({"data": {"x": "y"}}))
        .await;
    assert_eq!(forced_merge.status, 422, "{}", forced_merge.text);
    let mut renamed = cm.clone();
    renamed["metadata"]["name"] = "other".into();
    assert_eq!(c.patch(path, APPLY, &renamed).await.status, 400);
    let untyped = json!({"metadata": {"name": "drv-conf-map"}, "data": {}});
    assert_eq!(c.patch(path, APPLY, &untyped).await.status, 400);
    assert_eq!(
        c.patch(
            "/api/v1/namespaces/spark/services/nope/status?fieldManager=m",
            APPLY,
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nope"}})
        )
        .await
        .status,
        404
    );
    let dry = c
        .patch(
            "/api/v1/namespaces/spark/configmaps/dry?fieldManager=m&dryRun=All",
            APPLY,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}}),
        )
        .await;
    assert_eq!(dry.status, 201, "{}", dry.text);
    assert!(api.store().get("cm", Some("spark"), "dry").is_none());
    let statuses: Vec<u16> = api
        .requests()
        .iter()
        .filter(|r| r.verb == "patch")
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [201, 200, 200, 201, 422, 422, 400, 400, 404, 201]);
}

/// With writes that outlive their clients, a create whose client gives up before the
/// (injected) admission delay is over still lands, and a second create of the same name, also
/// abandoned, is refused as AlreadyExists once its own delay is over: what spark-submit's
/// retried POSTs meet behind a proxy that keeps them going. By default, as kube-apiserver,
/// the double cancels them.
#[tokio::test]
async fn a_create_the_client_gave_up_on_lands_only_when_writes_outlive_clients() {
    use tokio::io::AsyncWriteExt as _;
    let api = ApiServer::start().await.unwrap();
    let delay = Duration::from_millis(1500);
    api.faults().set_latency("create", "pods", delay);
    api.faults().set_writes_outlive_clients(true);
    let post = |name: &str| {
        let body = pod("spark", name, "", json!({"spark-role": "driver"})).to_string();
        format!(
            "POST /api/v1/namespaces/spark/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let request = post("pi-driver");
    let started = Instant::now();
    for _ in 0..2 {
        let mut conn = TcpStream::connect(api.http_addr()).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        // The client's own timeout: it closes the connection without waiting for the answer.
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(conn);
    }
    assert!(started.elapsed() < delay);
    assert!(
        api.store().get("pods", Some("spark"), "pi-driver").is_none(),
        "not before the delay"
    );
    assert!(api.requests().is_empty(), "recorded once answered");
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.requests().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pod = api
        .store()
        .get("pods", Some("spark"), "pi-driver")
        .expect("created after the client left");
    assert_eq!(pod["status"]["phase"], "Pending");
    let creates: Vec<(u16, Option<String>)> = api
        .requests()
        .iter()
        .map(|r| {
            assert!(r.elapsed >= delay, "{r:?}");
            assert_eq!(r.verb, "create");
            (r.status, r.reason.clone())
        })
        .collect();
    assert_eq!(creates, [(201, None), (409, Some("AlreadyExists".to_string()))]);

    // By default, as kube-apiserver, a write whose client left is cancelled.
    api.faults().set_writes_outlive_clients(false);
    let mut conn = TcpStream::connect(api.http_addr()).await.unwrap();
    conn.write_all(post("pi-driver-2").as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(conn);
    tokio::time::sleep(delay + Duration::from_millis(500)).await;
    assert!(api.store().get("pods", Some("spark"), "pi-driver-2").is_none());
    assert_eq!(api.requests().len(), 2, "not recorded either");
}

#[tokio::test]
async fn refusing_server_closes_its_ports_then_listens_on_them_again() {
    use std::io::ErrorKind;

    let api = ApiServer::start().await.unwrap();
    api.store().create(node("n1"));
    let plain = Client::http(&api);
    let tls = Client::https(&api);
    let mut w = plain.watch("/api/v1/nodes?watch=true").await;
    assert_eq!(w.event().await["type"], "ADDED");
    assert_eq!(tls.get("/version").await.status, 200);
    let (http_addr, https_addr) = (api.http_addr(), api.https_addr());

    api.faults().set_refusing(true);
    assert!(api.faults().is_refusing());
    api.clear_requests();
    for addr in [http_addr, https_addr] {
        let err = TcpStream::connect(addr).await.expect_err("nothing listens");
        assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{addr}: {err}");
    }
    assert!(
        matches!(w.next(Duration::from_secs(5)).await, Next::Broken),
        "open watches are cut"
    );
    assert!(plain.try_call("GET", "/version", None, None).await.is_err());
    assert!(tls.try_call("GET", "/version", None, None).await.is_err());
    assert!(api.requests().is_empty(), "refused connections never reach the server");
    // Still refusing a while later: nothing re-opens the ports behind the test's back.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        TcpStream::connect(http_addr).await.unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );

    api.faults().set_refusing(false);
    assert!(!api.faults().is_refusing());
    TcpStream::connect(http_addr).await.expect("listening again");
    TcpStream::connect(https_addr).await.expect("listening again");
    assert_eq!((api.http_addr(), api.https_addr()), (http_addr, https_addr));
    let v = plain.get("/version").await;
    assert_eq!((v.status, v.json()["gitVersion"].clone()), (200, json!(GIT_VERSION)));
    assert_eq!(tls.get("/api/v1/nodes").await.status, 200);
    let mut w = plain.watch("/api/v1/nodes?watch=true").await;
    assert_eq!(w.event().await["type"], "ADDED");
    assert_eq!(api.requests().len(), 3);

    // Several outages in a row, and `clear` ends one.
    for _ in 0..3 {
        api.faults().set_refusing(true);
        assert!(TcpStream::connect(https_addr).await.is_err());
        api.faults().set_refusing(false);
        assert_eq!(tls.get("/version").await.status, 200);
    }
    api.faults().set_refusing(true);
    api.faults().set_refusing(true);
    api.faults().clear();
    assert_eq!(plain.get("/version").await.status, 200);

    // A `Faults` handle that outlives the server does not bring its ports back.
    let faults = api.faults();
    drop(api);
    faults.set_refusing(true);
    faults.set_refusing(false);
    assert_eq!(
        TcpStream::connect(http_addr).await.unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
}

#[tokio::test]
async fn injected_401_answers_every_request() {
    let api = ApiServer::start().await.unwrap();
    api.store().create(node("n1"));
    api.store()
        .create(lease("kube-node-lease", "n1", "n1", "2026-11-24T03:40:00.123456Z"));
    api.faults().fail("*", "*", 401, None, None);
    let unauthorized = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": "Unauthorized", "reason": "Unauthorized", "code": 401});
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1";
    let merge = Some("application/merge-patch+json");
    let json_ct = Some("application/json");
    let node_body = node("n2");
    let lease_body = lease("kube-node-lease", "n1", "n2", "2026-11-24T03:41:00.000000Z");
    let status_patch = json!({"status": {}});
    let cases: Vec<(&str, &str, Option<&str>, Option<&Value>)> = vec![
        ("GET", "/version", None, None),
        ("GET", "/metrics", None, None),
        ("GET", "/healthz", None, None),
        ("GET", "/readyz?verbose", None, None),
        ("GET", "/", None, None),
        ("GET", "/api", None, None),
        ("GET", "/api/v1", None, None),
        ("GET", "/apis", None, None),
        ("GET", "/apis/coordination.k8s.io/v1", None, None),
        ("GET", "/apis/apps/v1/deployments", None, None),
        ("GET", "/api/v1/nodes", None, None),
        ("GET", "/api/v1/pods?limit=1", None, None),
        ("GET", "/api/v1/nodes?watch=true", None, None),
        ("GET", "/api/v1/watch/nodes/n1", None, None),
        ("GET", "/api/v1/nodes?watch=maybe", None, None),
        ("GET", "/api/v1/nodes/n1", None, None),
        ("GET", lease_path, None, None),
        ("POST", "/api/v1/nodes", json_ct, Some(&node_body)),
        ("PUT", lease_path, json_ct, Some(&lease_body)),
        ("PATCH", "/api/v1/nodes/n1/status", merge, Some(&status_patch)),
        ("DELETE", "/api/v1/nodes/n1", None, None),
        (
            "DELETE",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            None,
            None,
        ),
        ("PUT", "/api/v1/nodes", json_ct, Some(&node_body)),
    ];
    for client in [Client::http(&api), Client::https(&api)] {
        for (method, path, ct, body) in &cases {
            let r = client.call(method, path, *ct, *body).await;
            assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
            assert_eq!(r.headers["content-type"], "application/json", "{method} {path}");
            assert_eq!(r.json(), unauthorized, "{method} {path}");
        }
    }
    let seen = api.requests();
    assert_eq!(seen.len(), 2 * cases.len());
    assert!(seen.iter().all(|r| r.status == 401));
    assert!(seen.iter().any(|r| r.is_watch && r.resource == "nodes"));
    assert!(api.store().get("nodes", None, "n1").is_some(), "nothing was written");
    assert!(api.store().get("nodes", None, "n2").is_none());
    assert_eq!(
        api.store().get("leases", Some("kube-node-lease"), "n1").unwrap()["spec"]["holderIdentity"],
        "n1"
    );

    api.faults().clear();
    let c = Client::http(&api);
    assert_eq!(c.get("/version").await.status, 200);
    let mut w = c.watch("/api/v1/nodes?watch=true").await;
    assert_eq!(w.event().await["type"], "ADDED");
}

mod kube_compat {
    //! The same double through kube-rs, over HTTPS with a kubeconfig, as the daemon uses it.

    use super::*;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
    use k8s_openapi::api::events::v1::Event as EventV1;
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    use kube::{Client, Config, Discovery, ResourceExt};

    async fn client(api: &ApiServer, dir: &std::path::Path) -> Client {
        let path = dir.join("kubeconfig");
        api.write_kubeconfig(&path, true).unwrap();
        let kc = Kubeconfig::read_from(&path).unwrap();
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), format!("{}/", api.https_url()));
        Client::try_from(config).unwrap()
    }

    /// What the watcher task reported, in order.
    struct Seen {
        rx: tokio::sync::mpsc::UnboundedReceiver<String>,
        seen: Vec<String>,
    }

    impl Seen {
        /// Waits (up to 15 s) until one of `any` is reported.
        async fn expect(&mut self, any: &[&str]) {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            loop {
                let got = tokio::time::timeout_at(deadline, self.rx.recv())
                    .await
                    .unwrap_or_else(|_| panic!("waiting for {any:?}, saw {:?}", self.seen))
                    .expect("watcher task ended");
                self.seen.push(got.clone());
                if any.contains(&got.as_str()) {
                    return;
                }
            }
        }
    }

    fn typed_pod(ns: &str, name: &str, node: &str, labels: Value) -> Pod {
        serde_json::from_value(pod(ns, name, node, labels)).unwrap()
    }

    #[tokio::test]
    async fn api_verbs_through_kube() {
        let api = ApiServer::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let client = client(&api, dir.path()).await;
        assert_eq!(client.apiserver_version().await.unwrap().git_version, GIT_VERSION);

        let pods: Api<Pod> = Api::namespaced(client.clone(), "spark");
        let created = pods
            .create(
                &PostParams::default(),
                &typed_pod("spark", "driver", "n1", json!({"spark-role": "driver"})),
            )
            .await
            .unwrap();
        let uid = created.uid().unwrap();
        pods.create(
            &PostParams::default(),
            &typed_pod("spark", "exec-1", "n1", json!({"spark-role": "executor"})),
        )
        .await
        .unwrap();
        let dry = pods
            .create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &typed_pod("spark", "probe", "n1", json!({})),
            )
            .await
            .unwrap();
        assert_eq!(dry.name_any(), "probe");
        assert!(pods.get_opt("probe").await.unwrap().is_none());

        let executors = pods
            .list(&ListParams::default().labels("spark-role=executor"))
            .await
            .unwrap();
        assert_eq!(executors.items.len(), 1);
        assert!(executors.metadata.resource_version.is_some());
        let on_n1 = Api::<Pod>::all(client.clone())
            .list(&ListParams::default().fields("spec.nodeName=n1").limit(1))
            .await
            .unwrap();
        assert_eq!(on_n1.items.len(), 1);
        assert!(on_n1.metadata.continue_.is_some());
        let got = pods.get("driver").await.unwrap();
        assert_eq!(got.spec.unwrap().scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(got.status.unwrap().phase.as_deref(), Some("Pending"));

        let patched = pods
            .patch(
                "driver",
                &PatchParams::default(),
                &Patch::Strategic(json!({"metadata": {"labels": {"nodemedic": "seen"}}})),
            )
            .await
            .unwrap();
        assert_eq!(patched.labels()["nodemedic"], "seen");
        let merged = pods
            .patch(
                "driver",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
            )
            .await
            .unwrap();
        assert_eq!(merged.annotations()["a"], "b");
        let err = pods.get("nope").await.unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 404 && s.reason == "NotFound"),
            "{err:?}"
        );

        let wrong = DeleteParams::default().preconditions(Preconditions {
            uid: Some("00000000-0000-4000-8000-000000000000".into()),
            resource_version: None,
        });
        let err = pods.delete("driver", &wrong).await.unwrap_err();
        match err {
            kube::Error::Api(s) => {
                assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
                assert!(
                    s.message.contains("Precondition failed: UID in precondition"),
                    "{}",
                    s.message
                );
            }
            other => panic!("{other:?}"),
        }
        let right = DeleteParams::default().preconditions(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        });
        let deleted = pods.delete("driver", &right).await.unwrap();
        assert_eq!(deleted.left().unwrap().uid().as_deref(), Some(uid.as_str()));
        assert!(pods.get_opt("driver").await.unwrap().is_none());

        let nodes: Api<Node> = Api::all(client.clone());
        api.store().create(node("n1"));
        let status = nodes
            .patch_status(
                "n1",
                &PatchParams::default(),
                &Patch::Strategic(json!({"status": {"conditions": [{"type": "SlowPodAdmission", "status": "False"}]}})),
            )
            .await
            .unwrap();
        assert_eq!(status.status.unwrap().conditions.unwrap().len(), 3);
        assert!(nodes.delete("n1", &DeleteParams::default()).await.unwrap().is_right());

        // Discovery, legacy and aggregated.
        let discovery = Discovery::new(client.clone()).run().await.unwrap();
        assert!(discovery.has_group("events.k8s.io"));
        let aggregated = Discovery::new(client.clone()).run_aggregated().await.unwrap();
        assert!(aggregated.has_group("admissionregistration.k8s.io"));

        // The event recorder creates events.k8s.io/v1 Events, then patches their series.
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "nodemedic".into(),
                instance: Some("n1".into()),
            },
        );
        let reference = ObjectReference {
            kind: Some("Node".into()),
            name: Some("n1".into()),
            api_version: Some("v1".into()),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "StaleCPUAssignment".into(),
            note: Some("CPUs 2-3 are held for a pod that is gone".into()),
            action: "Scan".into(),
            secondary: None,
        };
        recorder.publish(&event, &reference).await.unwrap();
        recorder.publish(&event, &reference).await.unwrap();
        let events: Api<EventV1> = Api::namespaced(client.clone(), "default");
        let listed = events.list(&ListParams::default()).await.unwrap();
        assert_eq!(listed.items.len(), 1);
        assert_eq!(listed.items[0].series.as_ref().map(|s| s.count), Some(2));
        let core = api.store().list("events");
        assert_eq!(core[0]["involvedObject"]["name"], "n1");

        let reqs = api.requests();
        assert!(reqs.iter().all(|r| r.bearer_token.as_deref() == Some(TEST_TOKEN)));
        assert!(reqs.iter().any(|r| r.verb == "create" && r.group == "events.k8s.io"));
        assert!(reqs.iter().any(|r| r.verb == "patch" && r.group == "events.k8s.io"));
    }

    #[tokio::test]
    async fn spark_applications_through_kube() {
        use kube::api::{DynamicObject, GroupVersionKind};
        use kube::discovery::Scope;

        let api = ApiServer::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let client = client(&api, dir.path()).await;

        // Found through discovery, as a controller that does not know the CRD up front would.
        let discovery = Discovery::new(client.clone()).run_aggregated().await.unwrap();
        let gvk = GroupVersionKind::gvk("sparkoperator.k8s.io", "v1beta2", "SparkApplication");
        let (ar, caps) = discovery.resolve_gvk(&gvk).unwrap();
        assert_eq!(ar.plural, "sparkapplications");
        assert_eq!(caps.scope, Scope::Namespaced);
        assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
        let legacy = Discovery::new(client.clone()).run().await.unwrap();
        assert!(legacy.has_group("sparkoperator.k8s.io"));

        let apps: Api<DynamicObject> = Api::namespaced_with(client.clone(), "spark", &ar);
        for (name, role) in [("pi", "batch"), ("etl", "stream")] {
            let obj: DynamicObject = serde_json::from_value(spark_app(
                "spark",
                name,
                json!({"type": "OnFailure", "onFailureRetries": 2}),
                json!({"role": role}),
            ))
            .unwrap();
            apps.create(&PostParams::default(), &obj).await.unwrap();
        }
        let batch = apps.list(&ListParams::default().labels("role=batch")).await.unwrap();
        assert_eq!(batch.items.iter().map(|a| a.name_any()).collect::<Vec<_>>(), ["pi"]);
        assert_eq!(batch.items[0].data["spec"]["restartPolicy"]["onFailureRetries"], 2);

        let status = apps
            .patch_status(
                "pi",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"applicationState": {"state": "RUNNING"}}})),
            )
            .await
            .unwrap();
        assert_eq!(status.data["status"]["applicationState"]["state"], "RUNNING");
        let got = apps.get_status("pi").await.unwrap();
        assert_eq!(got.data["status"], status.data["status"]);
        match apps
            .patch("pi", &PatchParams::default(), &Patch::Strategic(json!({"spec": {}})))
            .await
        {
            Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (415, "UnsupportedMediaType")),
            other => panic!("expected 415, got {other:?}"),
        }
        assert!(apps.delete("etl", &DeleteParams::default()).await.unwrap().is_right());
    }

    #[tokio::test]
    async fn node_resource_topologies_through_kube() {
        use kube::api::{DynamicObject, GroupVersionKind};
        use kube::discovery::Scope;

        let api = ApiServer::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let client = client(&api, dir.path()).await;

        let discovery = Discovery::new(client.clone()).run_aggregated().await.unwrap();
        let gvk = GroupVersionKind::gvk("topology.node.k8s.io", "v1alpha2", "NodeResourceTopology");
        let (ar, caps) = discovery.resolve_gvk(&gvk).unwrap();
        assert_eq!(ar.plural, "noderesourcetopologies");
        assert_eq!(caps.scope, Scope::Cluster);
        assert!(caps.subresources.is_empty());

        let nrts: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let obj: DynamicObject = serde_json::from_value(nodemedic_tests::crd::example_node_resource_topology(
            "n1",
            "0b7f4e1c-2d3a-4b5c-8d9e-0f1a2b3c4d5e",
            ["3", "6"],
        ))
        .unwrap();
        let created = nrts.create(&PostParams::default(), &obj).await.unwrap();
        assert_eq!(created.data["zones"][0]["resources"][0]["available"], "3");
        let got = nrts.get("n1").await.unwrap();
        assert_eq!(got.resource_version(), created.resource_version());

        // replace with the resource version read: fine; again with the same one: 409.
        let mut next = got.clone();
        next.data["zones"][0]["resources"][0]["available"] = json!("2");
        let replaced = nrts.replace("n1", &PostParams::default(), &next).await.unwrap();
        assert_ne!(replaced.resource_version(), got.resource_version());
        match nrts.replace("n1", &PostParams::default(), &next).await {
            Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
            other => panic!("expected 409, got {other:?}"),
        }
        let patched = nrts
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"zones": [{"name": "node-0", "type": "Node"}]})),
            )
            .await
            .unwrap();
        assert_eq!(patched.data["zones"], json!([{"name": "node-0", "type": "Node"}]));
        let listed = nrts
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=nodemedic"))
            .await
            .unwrap();
        assert_eq!(listed.items.iter().map(|o| o.name_any()).collect::<Vec<_>>(), ["n1"]);
        assert!(nrts.delete("n1", &DeleteParams::default()).await.unwrap().is_right());

        let writes: Vec<(String, u16)> = api
            .requests()
            .iter()
            .filter(|r| r.resource == "noderesourcetopologies" && r.verb != "get" && r.verb != "list")
            .map(|r| (r.verb.clone(), r.status))
            .collect();
        assert_eq!(
            writes,
            [
                ("create".to_string(), 201),
                ("update".to_string(), 200),
                ("update".to_string(), 409),
                ("patch".to_string(), 200),
                ("delete".to_string(), 200)
            ]
        );
    }

    #[tokio::test]
    async fn leases_through_kube() {
        use k8s_openapi::api::coordination::v1::Lease;

        let api = ApiServer::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let client = client(&api, dir.path()).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        let raw = lease("kube-node-lease", "n1", "n1", "2026-11-24T03:40:00.123456Z");
        let typed: Lease = serde_json::from_value(raw.clone()).unwrap();
        let created = leases.create(&PostParams::default(), &typed).await.unwrap();
        assert_eq!(created.spec, typed.spec);
        assert_eq!(created.metadata.annotations, typed.metadata.annotations);
        // k8s-openapi writes MicroTime back exactly as the server stored it.
        assert_eq!(serde_json::to_value(&created).unwrap()["spec"], raw["spec"]);

        let mut renewed = created.clone();
        renewed.spec.as_mut().unwrap().holder_identity = Some("n1-restarted".into());
        let renewed = leases.replace("n1", &PostParams::default(), &renewed).await.unwrap();
        assert_ne!(renewed.metadata.resource_version, created.metadata.resource_version);

        // The second writer, holding the old version, gets the conflict leader election
        // relies on.
        let mut stale = created.clone();
        stale.spec.as_mut().unwrap().holder_identity = Some("other".into());
        match leases.replace("n1", &PostParams::default(), &stale).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"), "{s:?}");
                assert!(s.message.contains("the object has been modified"), "{s:?}");
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
        match leases.create(&PostParams::default(), &typed).await {
            Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        let got = leases.get("n1").await.unwrap();
        assert_eq!(got.spec.unwrap().holder_identity.as_deref(), Some("n1-restarted"));

        // Through an outage in which nothing listens, the client reconnects to the same URL.
        api.faults().set_refusing(true);
        assert!(leases.get("n1").await.is_err());
        api.faults().set_refusing(false);
        assert!(leases.get("n1").await.is_ok());

        // Unauthorized, as a kube client sees it.
        api.faults().fail("*", "*", 401, None, None);
        match leases.get("n1").await {
            Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized")),
            other => panic!("expected 401, got {other:?}"),
        }
        assert!(client.apiserver_version().await.is_err());
    }

    #[tokio::test]
    async fn watcher_and_reflector_with_node_field_selector() {
        let api = ApiServer::start().await.unwrap();
        api.set_bookmark_interval(Duration::from_millis(200));
        let store = api.store();
        store.create(pod("spark", "a", "n1", json!({})));
        store.create(pod("spark", "b", "n2", json!({})));
        let dir = tempfile::tempdir().unwrap();
        let client = client(&api, dir.path()).await;

        let (reader, writer) = reflector::store::<Pod>();
        let cfg = watcher::Config::default().fields("spec.nodeName=n1").timeout(30);
        let stream = reflector(writer, watcher(Api::<Pod>::all(client.clone()), cfg).default_backoff());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let text = match item {
                    Ok(watcher::Event::Apply(p)) => format!("apply {}", p.name_any()),
                    Ok(watcher::Event::Delete(p)) => format!("delete {}", p.name_any()),
                    Ok(watcher::Event::InitApply(p)) => format!("init {}", p.name_any()),
                    Ok(watcher::Event::Init) => "init-start".to_string(),
                    Ok(watcher::Event::InitDone) => "init-done".to_string(),
                    Err(e) => format!("error {e}"),
                };
                if tx.send(text).is_err() {
                    break;
                }
            }
        });
        let mut events = Seen { rx, seen: Vec::new() };
        events.expect(&["init a"]).await;
        events.expect(&["init-done"]).await;
        assert_eq!(reader.state().len(), 1);

        store.create(pod("spark", "c", "n1", json!({})));
        store.create(pod("spark", "d", "n2", json!({})));
        events.expect(&["apply c"]).await;
        store.modify("pods", Some("spark"), "a", |p| p["spec"]["nodeName"] = "n2".into());
        events.expect(&["delete a"]).await;
        store.delete("pods", Some("spark"), "c");
        events.expect(&["delete c"]).await;
        assert!(
            !events.seen.iter().any(|s| s.ends_with(" b") || s.ends_with(" d")),
            "{:?}",
            events.seen
        );

        // Expire the watch: the watcher gets a 410, relists and carries on.
        let lists_before = api.requests().iter().filter(|r| r.verb == "list").count();
        api.faults().gone_on_every_watch(true);
        api.faults().drop_watches_now();
        events.expect(&["init-start"]).await;
        api.faults().gone_on_every_watch(false);
        store.create(pod("spark", "e", "n1", json!({})));
        events.expect(&["apply e", "init e"]).await;
        let reqs = api.requests();
        assert!(reqs.iter().filter(|r| r.verb == "list").count() > lists_before);
        let watches: Vec<_> = reqs.iter().filter(|r| r.is_watch).collect();
        assert!(
            watches
                .iter()
                .all(|w| w.query_param("fieldSelector").as_deref() == Some("spec.nodeName=n1"))
        );
        assert!(
            watches
                .iter()
                .all(|w| w.query_param("allowWatchBookmarks").as_deref() == Some("true"))
        );
        assert!(
            watches
                .iter()
                .all(|w| w.query_param("timeoutSeconds").as_deref() == Some("30"))
        );
        let lists: Vec<_> = reqs.iter().filter(|r| r.verb == "list").collect();
        assert!(lists.iter().all(|l| l.query_param("limit").as_deref() == Some("500")));
        let names: Vec<String> = reader.state().iter().map(|p| p.name_any()).collect();
        assert!(
            names.contains(&"e".to_string()) && !names.contains(&"a".to_string()),
            "{names:?}"
        );

        // The watch survives an API server outage.
        api.faults().set_down(true);
        tokio::time::sleep(Duration::from_millis(300)).await;
        api.faults().set_down(false);
        store.create(pod("spark", "f", "n1", json!({})));
        events.expect(&["apply f", "init f"]).await;
        // And one in which nothing listens on its port.
        api.faults().set_refusing(true);
        tokio::time::sleep(Duration::from_millis(300)).await;
        api.faults().set_refusing(false);
        store.create(pod("spark", "g", "n1", json!({})));
        events.expect(&["apply g", "init g"]).await;
        task.abort();
        let _ = task.await;
    }
}
