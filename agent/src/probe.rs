//! API server probes, timed like `curl -w`: for each request, when DNS resolution, the TCP
//! connection, the TLS handshake, the first byte of the answer and the whole answer were done,
//! in seconds from its start. Each probe opens a fresh connection so that every phase is
//! measured, the way a new client (spark-submit) meets the API server.
//!
//! The probes: `get` (`/version`), `list` (this node's pods, `limit=1`), and `create_dry_run`
//! (a minimal pod created with `dryRun=All`, which runs the whole admission chain, webhooks
//! included, and stores nothing).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use nodemedic_rules::snapshot::ProbeSample;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Get,
    List,
    CreateDryRun,
}

impl Probe {
    /// Every probe, in the order they run.
    pub const ALL: [Probe; 3] = [Probe::Get, Probe::List, Probe::CreateDryRun];

    /// The metric label and report name.
    pub fn name(self) -> &'static str {
        match self {
            Probe::Get => "get",
            Probe::List => "list",
            Probe::CreateDryRun => "create_dry_run",
        }
    }
}

/// Why a probe target cannot be built, or a probe failed: what and why. A failed probe's
/// error becomes its sample's `error` text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The client configuration cannot be used (server URL, CA, client certificate, token).
    #[error("{0}")]
    Config(String),
    /// A phase of the request failed (DNS, connect, TLS, HTTP), or the server said no.
    #[error("{0}")]
    Request(String),
}

/// Where the bearer token comes from. A token file (a projected service-account token,
/// rotated by the kubelet about hourly) is read again for every probe, so a rotated token is
/// used as soon as it is on disk.
#[derive(Clone)]
enum Token {
    None,
    Static(String),
    File(std::path::PathBuf),
}

impl Token {
    fn get(&self) -> Result<Option<String>, ProbeError> {
        match self {
            Token::None => Ok(None),
            Token::Static(t) => Ok(Some(t.clone())),
            Token::File(path) => std::fs::read_to_string(path)
                .map(|t| Some(t.trim().to_string()))
                .map_err(|e| ProbeError::Config(format!("token file {}: {e}", path.display()))),
        }
    }
}

/// Where and how to reach the API server, from the client configuration.
#[derive(Clone)]
pub struct Target {
    host: String,
    port: u16,
    /// `None`: plain HTTP.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The base path of the server URL (usually empty).
    base: String,
    token: Token,
    /// The namespace the dry-run pod is created in (the agent's own).
    pub namespace: String,
    /// This node, for the pod list.
    pub node: String,
    /// Tests: the requests go through this client (a fake API server under a paused clock)
    /// instead of connections of their own.
    #[cfg(test)]
    through: Option<kube::Client>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

fn pem_or_der_certs(der: &[Vec<u8>]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    der.iter()
        .map(|d| rustls::pki_types::CertificateDer::from(d.clone()))
        .collect()
}

impl Target {
    /// The target of a kube client configuration: its server, CA and bearer token. Client
    /// certificates are used when the configuration has them as data.
    pub fn from_config(config: &kube::Config, namespace: &str, node: &str) -> Result<Target, ProbeError> {
        let config_error = ProbeError::Config;
        use secrecy::ExposeSecret as _;
        let uri = &config.cluster_url;
        let https = uri.scheme_str() == Some("https");
        let host = uri
            .host()
            .ok_or_else(|| config_error(format!("server URL {uri} has no host")))?
            .trim_matches(['[', ']'])
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let token = match (&config.auth_info.token, &config.auth_info.token_file) {
            (Some(t), _) => Token::Static(t.expose_secret().to_string()),
            (None, Some(file)) => Token::File(file.into()),
            _ => Token::None,
        };
        // A token file that cannot be read now is a configuration error now.
        token.get()?;
        let tls = if https {
            let mut roots = rustls::RootCertStore::empty();
            let ca: Vec<Vec<u8>> = match (&config.root_cert_file, &config.root_cert) {
                (Some(path), _) => {
                    let pem =
                        std::fs::read(path).map_err(|e| config_error(format!("CA file {}: {e}", path.display())))?;
                    pem_blocks(&pem)
                }
                (None, Some(der)) => der.clone(),
                (None, None) => vec![],
            };
            for cert in pem_or_der_certs(&ca) {
                roots
                    .add(cert)
                    .map_err(|e| config_error(format!("CA certificate: {e}")))?;
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let builder = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| config_error(format!("TLS: {e}")))?
                .with_root_certificates(roots);
            let cfg = match (
                &config.auth_info.client_certificate_data,
                &config.auth_info.client_key_data,
            ) {
                (Some(cert), Some(key)) => {
                    let cert = decode_b64_pem(cert)?;
                    let key = decode_b64_pem(key.expose_secret())?;
                    let certs = pem_or_der_certs(&pem_blocks(&cert));
                    let key =
                        pem_private_key(&key).ok_or_else(|| config_error("client key: no PEM private key".into()))?;
                    builder
                        .with_client_auth_cert(certs, key)
                        .map_err(|e| config_error(format!("client certificate: {e}")))?
                }
                _ => builder.with_no_client_auth(),
            };
            Some(Arc::new(cfg))
        } else {
            None
        };
        Ok(Target {
            host,
            port,
            tls,
            base: uri.path().trim_end_matches('/').to_string(),
            token,
            namespace: namespace.to_string(),
            node: node.to_string(),
            #[cfg(test)]
            through: None,
        })
    }

    /// A target whose requests go through `client` (tests: a fake API server, under a paused
    /// clock where connections of its own could not be timed).
    #[cfg(test)]
    pub(crate) fn through(client: kube::Client, namespace: &str, node: &str) -> Target {
        Target {
            host: "fake".into(),
            port: 80,
            tls: None,
            base: String::new(),
            token: Token::None,
            namespace: namespace.to_string(),
            node: node.to_string(),
            through: Some(client),
        }
    }

    fn request(&self, probe: Probe) -> (http::Method, String, Option<Vec<u8>>) {
        match probe {
            Probe::Get => (http::Method::GET, format!("{}/version", self.base), None),
            Probe::List => (
                http::Method::GET,
                format!(
                    "{}/api/v1/pods?fieldSelector=spec.nodeName%3D{}&limit=1",
                    self.base, self.node
                ),
                None,
            ),
            Probe::CreateDryRun => {
                let pod = serde_json::json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {
                        "generateName": "nodemedic-probe-",
                        "namespace": self.namespace,
                        "labels": {"app.kubernetes.io/name": "nodemedic-probe", "nodemedic.io/probe": "true"},
                    },
                    "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]},
                });
                (
                    http::Method::POST,
                    format!("{}/api/v1/namespaces/{}/pods?dryRun=All", self.base, self.namespace),
                    Some(pod.to_string().into_bytes()),
                )
            }
        }
    }

    /// Runs one probe with an overall `timeout`; never fails, the sample says what happened.
    pub async fn probe(&self, probe: Probe, timeout: Duration) -> ProbeSample {
        self.timed(probe.name(), self.request(probe), timeout).await.0
    }

    /// A timed `GET` of `path` (under the server's base path), as the read probe `get`: the
    /// sample, and the answer's status and body when one arrived. A `404` counts as a good
    /// sample (the API server answered); the caller reads the status.
    pub async fn get(&self, path: &str, timeout: Duration) -> (ProbeSample, Option<(u16, Bytes)>) {
        let request = (http::Method::GET, format!("{}{path}", self.base), None);
        let (mut sample, answer) = self.timed(Probe::Get.name(), request, timeout).await;
        if sample.status == Some(404) {
            sample.ok = true;
            sample.error = None;
        }
        (sample, answer)
    }

    async fn timed(
        &self,
        name: &str,
        request: (http::Method, String, Option<Vec<u8>>),
        timeout: Duration,
    ) -> (ProbeSample, Option<(u16, Bytes)>) {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut sample = ProbeSample {
            probe: name.into(),
            at,
            ..Default::default()
        };
        let start = Instant::now();
        let mut answer = None;
        let result = tokio::time::timeout(timeout, self.run(request, start, &mut sample, &mut answer)).await;
        sample.total_seconds = start.elapsed().as_secs_f64();
        match result {
            Err(_) => sample.error = Some(format!("no complete answer within {:.0} s", timeout.as_secs_f64())),
            Ok(Err(e)) => sample.error = Some(e.to_string()),
            Ok(Ok(())) => {}
        }
        // Phases not reached stay at 0; make the breakdown monotonic for readers.
        sample.ok = sample.error.is_none() && sample.status.is_some_and(|s| (200..300).contains(&s));
        (sample, answer)
    }

    async fn run(
        &self,
        request: (http::Method, String, Option<Vec<u8>>),
        start: Instant,
        s: &mut ProbeSample,
        answer: &mut Option<(u16, Bytes)>,
    ) -> Result<(), ProbeError> {
        let fail = ProbeError::Request;
        #[cfg(test)]
        if let Some(client) = &self.through {
            let (method, path, body) = request;
            let req = http::Request::builder()
                .method(method)
                .uri(path)
                .body(kube::client::Body::from(body.unwrap_or_default()))
                .map_err(|e| fail(format!("request: {e}")))?;
            let resp = client.send(req).await.map_err(|e| fail(format!("HTTP: {e}")))?;
            let status = resp.status().as_u16();
            s.status = Some(status);
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| fail(format!("reading the answer: {e}")))?
                .to_bytes();
            *answer = Some((status, bytes));
            if !(200..300).contains(&status) {
                return Err(fail(format!("HTTP {status}")));
            }
            return Ok(());
        }
        let addrs: Vec<std::net::SocketAddr> = match self.host.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![std::net::SocketAddr::new(ip, self.port)],
            Err(_) => tokio::net::lookup_host((self.host.as_str(), self.port))
                .await
                .map_err(|e| fail(format!("DNS lookup of {}: {e}", self.host)))?
                .collect(),
        };
        s.dns_seconds = start.elapsed().as_secs_f64();
        let addr = *addrs
            .first()
            .ok_or_else(|| fail(format!("DNS lookup of {}: no address", self.host)))?;
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| fail(format!("connect to {addr}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        s.connect_seconds = start.elapsed().as_secs_f64();
        match &self.tls {
            None => {
                s.tls_seconds = s.connect_seconds;
                self.exchange(request, tcp, start, s, answer).await
            }
            Some(cfg) => {
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| fail(format!("server name {}: {e}", self.host)))?;
                let tls = tokio_rustls::TlsConnector::from(cfg.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| fail(format!("TLS handshake with {addr}: {e}")))?;
                s.tls_seconds = start.elapsed().as_secs_f64();
                self.exchange(request, tls, start, s, answer).await
            }
        }
    }

    async fn exchange<IO>(
        &self,
        (method, path, body): (http::Method, String, Option<Vec<u8>>),
        io: IO,
        start: Instant,
        s: &mut ProbeSample,
        answer: &mut Option<(u16, Bytes)>,
    ) -> Result<(), ProbeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| ProbeError::Request(format!("HTTP: {e}")))?;
        let driver = tokio::spawn(conn);
        let mut req = http::Request::builder()
            .method(method)
            .uri(&path)
            .header(http::header::HOST, format!("{}:{}", self.host, self.port))
            .header(
                http::header::USER_AGENT,
                concat!("nodemedic/", env!("CARGO_PKG_VERSION"), " probe"),
            )
            .header(http::header::ACCEPT, "application/json");
        if let Some(t) = self.token.get()? {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| ProbeError::Request(format!("request: {e}")))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| ProbeError::Request(format!("HTTP: {e}")))?;
        s.first_byte_seconds = start.elapsed().as_secs_f64();
        let status = resp.status().as_u16();
        s.status = Some(status);
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ProbeError::Request(format!("reading the answer: {e}")))?
            .to_bytes();
        driver.abort();
        *answer = Some((status, bytes.clone()));
        if !(200..300).contains(&status) {
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned());
            return Err(ProbeError::Request(format!("HTTP {status}: {message}")));
        }
        Ok(())
    }
}

/// The PEM blocks of `bytes` as DER, or `bytes` itself when it is not PEM.
fn pem_blocks(bytes: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(bytes);
    if !text.contains("-----BEGIN") {
        return vec![bytes.to_vec()];
    }
    let mut out = vec![];
    let mut inside = false;
    let mut b64 = String::new();
    for line in text.lines() {
        if line.starts_with("-----BEGIN CERTIFICATE") {
            inside = true;
            b64.clear();
        } else if line.starts_with("-----END CERTIFICATE") {
            inside = false;
            if let Some(der) = base64_decode(&b64) {
                out.push(der);
            }
        } else if inside {
            b64.push_str(line.trim());
        }
    }
    out
}

fn pem_private_key(pem: &[u8]) -> Option<rustls::pki_types::PrivateKeyDer<'static>> {
    let text = String::from_utf8_lossy(pem);
    let begin = text.find("-----BEGIN ")?;
    let kind_end = text[begin + 11..].find("-----")? + begin + 11;
    let kind = &text[begin + 11..kind_end];
    let body_start = kind_end + 5;
    let end = text[body_start..].find("-----END")? + body_start;
    let der = base64_decode(&text[body_start..end].split_whitespace().collect::<String>())?;
    match kind {
        "PRIVATE KEY" => Some(rustls::pki_types::PrivateKeyDer::Pkcs8(der.into())),
        "RSA PRIVATE KEY" => Some(rustls::pki_types::PrivateKeyDer::Pkcs1(der.into())),
        "EC PRIVATE KEY" => Some(rustls::pki_types::PrivateKeyDer::Sec1(der.into())),
        _ => None,
    }
}

/// kubeconfig `*-data` fields are base64 of PEM.
fn decode_b64_pem(data: &str) -> Result<Vec<u8>, ProbeError> {
    base64_decode(&data.split_whitespace().collect::<String>())
        .ok_or_else(|| ProbeError::Config("invalid base64 in kubeconfig".to_string()))
}

/// Standard base64 (with or without padding).
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buf = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            b'\n' | b'\r' | b' ' => continue,
            _ => return None,
        };
        buf = (buf << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// min, median, p99, max of `values` (p99 by nearest rank).
pub fn summary(values: &[f64]) -> Option<(f64, f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some((v[0], rank(0.5), rank(0.99), v[v.len() - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_pem() {
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("aGVsbG8"), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("a*"), None);
        let pem = b"-----BEGIN CERTIFICATE-----\naGVs\nbG8=\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_blocks(pem), vec![b"hello".to_vec()]);
        assert_eq!(pem_blocks(b"\x30\x82"), vec![b"\x30\x82".to_vec()]);
        let key = b"-----BEGIN PRIVATE KEY-----\naGVsbG8=\n-----END PRIVATE KEY-----\n";
        assert!(matches!(
            pem_private_key(key),
            Some(rustls::pki_types::PrivateKeyDer::Pkcs8(_))
        ));
    }

    #[test]
    fn summaries() {
        assert_eq!(summary(&[]), None);
        assert_eq!(summary(&[3.0, 1.0, 2.0]), Some((1.0, 2.0, 3.0, 3.0)));
        let many: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(summary(&many), Some((1.0, 50.0, 99.0, 100.0)));
    }
}
