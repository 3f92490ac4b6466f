//! The time each request of a kube client has, counted per request, so that the client's idle
//! connections stay open between requests.
//!
//! kube's own read timeout (`Config::read_timeout`, hyper-timeout around each socket) times
//! every read of a connection, and hyper keeps a read pending on a kept-alive connection while
//! it waits in the pool. So every pooled connection closed `read_timeout` after its last
//! answer, and a request spaced further apart than that (the Lease renewal every 20 s, a probe
//! round, an Event) paid a new TCP connection and TLS handshake, on this node and on the API
//! server. [`DeadlineLayer`] times the request instead: its answer has `timeout` to start from
//! when it is sent, and then `timeout` between any two pieces of its body; an idle connection
//! is not timed at all.
//!
//! The clients built here also leave out kube's retry layer (`Config::default_retry`), which
//! retries 429, 503 and 504 up to 15 times with backoff inside one call. Every answer reaches
//! the caller, and its [`ApiContact`](crate::contact::ApiContact), as it comes: a 503 is an
//! answer from an API server that is there, not a call that seems to hang for minutes; and the
//! agent's loops retry after backoffs of their own (`retry`), which know what the request was
//! for.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use kube::{Client, Config};
use tokio::time::{Instant, Sleep};
use tower::BoxError;

/// What ran out of time. Carried as an [`std::io::Error`] of kind `TimedOut`, so that
/// `kube_api::is_timeout` and every error chain say "timeout".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimedOut {
    /// No answer (status and headers) within the time from when the request was sent.
    #[error("no answer within {} s", .0.as_secs_f64())]
    Answer(Duration),
    /// The answer's body stopped coming for that long before its end.
    #[error("the answer stopped for {} s before its end", .0.as_secs_f64())]
    Body(Duration),
}

impl TimedOut {
    fn into_error(self) -> BoxError {
        Box::new(std::io::Error::new(std::io::ErrorKind::TimedOut, self))
    }
}

/// A client for `config` whose every request has `timeout` (see the module's docs) to connect,
/// write, start its answer, and between any two pieces of that answer's body; without retries
/// inside the client.
pub fn client(config: Config, timeout: Duration) -> Result<Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(configured(config, timeout))?
        .with_layer(&DeadlineLayer(timeout))
        .build())
}

/// `config` for a client of this module: `connect` to connect and for each write, no read
/// timeout on the sockets (a request client's [`DeadlineLayer`] times its requests; a watch
/// may stay quiet for minutes, and its watcher has an idle timeout of its own), no retry layer.
pub fn configured(mut config: Config, connect: Duration) -> Config {
    config.connect_timeout = Some(connect);
    config.write_timeout = Some(connect);
    config.read_timeout = None;
    config.reset_reader_on_write = false;
    config.default_retry = false;
    config
}

/// Gives every request of the service it wraps a time to answer and a time between the pieces
/// of its body, both the same.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer(pub Duration);

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner, timeout: self.0 }
    }
}

/// The service of [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
    timeout: Duration,
}

impl<S, Req, B> tower::Service<Req> for Deadline<S>
where
    S: tower::Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<IdleBody<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let answer = self.inner.call(req);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(answer)) => Ok(answer.map(|body| IdleBody::new(body, timeout))),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => Err(TimedOut::Answer(timeout).into_error()),
            }
        })
    }
}

/// A response body that fails with [`TimedOut::Body`] when no piece of it comes for `timeout`.
#[derive(Debug)]
pub struct IdleBody<B> {
    inner: B,
    timeout: Duration,
    /// The wait for the next piece: armed when a poll finds none ready, disarmed by a piece.
    /// Only time spent waiting on the server counts, not time the reader spends elsewhere.
    idle: Option<Pin<Box<Sleep>>>,
    waiting: bool,
    timed_out: bool,
}

impl<B> IdleBody<B> {
    fn new(inner: B, timeout: Duration) -> Self {
        IdleBody {
            inner,
            timeout,
            idle: None,
            waiting: false,
            timed_out: false,
        }
    }
}

impl<B> Body for IdleBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.waiting = false;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let timeout = this.timeout;
                let idle = this.idle.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if !this.waiting {
                    idle.as_mut().reset(Instant::now() + timeout);
                    this.waiting = true;
                }
                if idle.as_mut().poll(cx).is_ready() {
                    this.timed_out = true;
                    return Poll::Ready(Some(Err(TimedOut::Body(timeout).into_error())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.timed_out || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
