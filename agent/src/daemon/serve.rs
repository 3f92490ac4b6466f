//! The agent's HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (the scan loop completed
//! a scan within the last three scan intervals) and `/readyz` (a host scan is done, the pod
//! watch has synced and is established now).
//!
//! A slow client cannot hold the agent: headers must arrive within 5 s, a connection lives at
//! most 30 s, and at most 32 connections are served at once (more wait in the kernel's
//! backlog).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::metrics::Metrics;

const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_CONNECTIONS: usize = 32;

/// What `/readyz` and `/healthz` report.
#[derive(Debug, Default)]
pub struct Health {
    /// A host scan has completed.
    pub scanned: AtomicBool,
    /// The watch of this node's pods has listed once (the store holds the node's pods).
    pub pods_synced: AtomicBool,
    /// The watch is established: the API server accepted it and it has not failed since.
    pub watch_up: AtomicBool,
    /// When the scan loop last completed a scan (or started), unix milliseconds.
    pub last_scan_ms: AtomicU64,
    /// The scan interval in force, milliseconds.
    pub scan_interval_ms: AtomicU64,
    /// The agent is stopping (SIGTERM or SIGINT): a supervised task that ends now is neither
    /// restarted nor counted (see `supervise`).
    pub stopping: AtomicBool,
}

/// `/healthz` fails when the scan loop has not completed a scan for this many intervals.
pub const STALLED_INTERVALS: u64 = 3;
/// How long the daemon waits for the pod watch's first list before its first scan.
pub const FIRST_SYNC_WAIT_MS: u64 = 10_000;

pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Health {
    /// The agent has begun to stop.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether the agent has begun to stop.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The scan loop made progress (a scan completed, or the loop started).
    pub fn progressed(&self) {
        self.last_scan_ms.store(unix_ms(), Ordering::Relaxed);
    }

    /// Why the scan loop looks stuck, if it does. Before the first scan the daemon may wait
    /// [`FIRST_SYNC_WAIT_MS`] for the pod watch's first list, which counts on top.
    pub fn stalled(&self) -> Option<String> {
        let interval = self.scan_interval_ms.load(Ordering::Relaxed).max(1);
        let since = unix_ms().saturating_sub(self.last_scan_ms.load(Ordering::Relaxed));
        let first = !self.scanned.load(Ordering::Relaxed);
        let allowed = STALLED_INTERVALS * interval + if first { FIRST_SYNC_WAIT_MS } else { 0 };
        (since > allowed).then(|| {
            format!(
                "no scan completed for {:.0} s ({STALLED_INTERVALS} scan intervals{} are {:.0} s)",
                since as f64 / 1000.0,
                if first {
                    " and the wait for the first pod list"
                } else {
                    ""
                },
                allowed as f64 / 1000.0
            )
        })
    }
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

fn route(req: &Request<Incoming>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        "/healthz" => match health.stalled() {
            None => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            Some(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("unhealthy: {why}\n"),
            ),
        },
        "/readyz" => {
            let scanned = health.scanned.load(Ordering::Relaxed);
            let synced = health.pods_synced.load(Ordering::Relaxed);
            let watching = health.watch_up.load(Ordering::Relaxed);
            if scanned && synced && watching {
                reply(StatusCode::OK, "text/plain", "ok\n".into())
            } else {
                let mut why = vec![];
                if !scanned {
                    why.push("no host scan has completed yet");
                }
                if !synced {
                    why.push("the pod watch has not synced yet");
                }
                if !watching {
                    why.push("the pod watch is down (retrying with backoff)");
                }
                reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("not ready: {}\n", why.join("; ")),
                )
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Metrics, health: Arc<Health>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |req: Request<Incoming>| {
                let resp = route(&req, &metrics, &health);
                async move { Ok::<_, Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_fails_after_three_intervals_without_a_scan_with_grace_for_the_first() {
        let h = Health::default();
        h.scan_interval_ms.store(1_000, Ordering::Relaxed);
        h.last_scan_ms.store(unix_ms() - 5_000, Ordering::Relaxed);
        // No scan yet: 3 s + the 10 s wait for the first list.
        assert_eq!(h.stalled(), None);
        h.last_scan_ms.store(unix_ms() - 14_000, Ordering::Relaxed);
        assert!(h.stalled().is_some_and(|w| w.contains("wait for the first pod list")));
        // After a scan: 3 intervals.
        h.scanned.store(true, Ordering::Relaxed);
        h.last_scan_ms.store(unix_ms() - 2_000, Ordering::Relaxed);
        assert_eq!(h.stalled(), None);
        h.last_scan_ms.store(unix_ms() - 4_000, Ordering::Relaxed);
        let why = h.stalled().unwrap_or_default();
        assert!(
            why.starts_with("no scan completed for 4 s (3 scan intervals are 3 s)"),
            "{why}"
        );
    }
}
