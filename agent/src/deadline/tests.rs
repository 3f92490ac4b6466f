use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use tokio::sync::mpsc;
use tower::{Layer, Service, ServiceExt};

use super::*;

fn timed_out(e: &BoxError) -> Option<TimedOut> {
    let io = e.downcast_ref::<std::io::Error>()?;
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut, "{e}");
    io.get_ref()?.downcast_ref::<TimedOut>().copied()
}

type Piece = Result<Frame<Bytes>, Infallible>;
type TestBody = StreamBody<Pin<Box<dyn futures::Stream<Item = Piece> + Send>>>;

/// A body whose pieces the test sends, and which ends when the sender is dropped.
fn body() -> (mpsc::UnboundedSender<&'static str>, TestBody) {
    let (tx, rx) = mpsc::unbounded_channel::<&'static str>();
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let piece = rx.recv().await?;
        Some((Ok(Frame::data(Bytes::from_static(piece.as_bytes()))), rx))
    });
    (tx, StreamBody::new(Box::pin(stream)))
}

/// A service whose one answer is `body`, after `after`.
fn answering(
    after: Duration,
    body: TestBody,
) -> impl tower::Service<(), Response = http::Response<TestBody>, Error = Infallible, Future: Send + 'static> {
    let mut body = Some(body);
    tower::service_fn(move |()| {
        let body = body.take();
        async move {
            tokio::time::sleep(after).await;
            Ok::<_, Infallible>(http::Response::new(body.unwrap_or_else(|| self::body().1)))
        }
    })
}

const T: Duration = Duration::from_secs(10);

#[tokio::test(start_paused = true)]
async fn no_answer_in_time_is_a_timeout_of_the_answer() {
    let (_tx, body) = body();
    let mut svc = DeadlineLayer(T).layer(answering(Duration::from_secs(60), body));
    let sent = Instant::now();
    let Err(err) = svc.ready().await.unwrap().call(()).await else {
        panic!("answered")
    };
    assert_eq!(sent.elapsed(), T);
    assert_eq!(timed_out(&err), Some(TimedOut::Answer(T)));
    assert_eq!(err.to_string(), "no answer within 10 s");
}

#[tokio::test(start_paused = true)]
async fn an_answer_just_in_time_passes() {
    let (tx, body) = body();
    let mut svc = DeadlineLayer(T).layer(answering(T - Duration::from_millis(1), body));
    let answer = svc.ready().await.unwrap().call(()).await.unwrap();
    tx.send("ok").unwrap();
    drop(tx);
    let text = answer.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&text[..], b"ok");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_keeps_coming_is_never_timed_out_however_long_it_takes() {
    let (tx, body) = body();
    let mut svc = DeadlineLayer(T).layer(answering(Duration::ZERO, body));
    let answer = svc.ready().await.unwrap().call(()).await.unwrap();
    let started = Instant::now();
    tokio::spawn(async move {
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_secs(9)).await;
            tx.send("piece ").unwrap();
        }
    });
    let text = answer.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(text.len(), 6 * "piece ".len());
    assert_eq!(started.elapsed(), Duration::from_secs(54));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stops_is_a_timeout_of_the_body_counted_from_the_stop() {
    let (tx, body) = body();
    let mut svc = DeadlineLayer(T).layer(answering(Duration::ZERO, body));
    let mut body = svc.ready().await.unwrap().call(()).await.unwrap().into_body();
    tokio::time::sleep(Duration::from_secs(3)).await;
    tx.send("first").unwrap();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(&first[..], b"first");
    let stopped = Instant::now();
    let err = body.frame().await.unwrap().unwrap_err();
    assert_eq!(stopped.elapsed(), T);
    assert_eq!(timed_out(&err), Some(TimedOut::Body(T)));
    assert_eq!(err.to_string(), "the answer stopped for 10 s before its end");
    // Once timed out, the body is over: nothing more, even if the server sends again.
    tx.send("late").unwrap();
    assert!(body.frame().await.is_none());
    assert!(body.is_end_stream());
}

#[tokio::test(start_paused = true)]
async fn time_the_reader_spends_elsewhere_does_not_count() {
    let (tx, body) = body();
    let mut svc = DeadlineLayer(T).layer(answering(Duration::ZERO, body));
    let mut body = svc.ready().await.unwrap().call(()).await.unwrap().into_body();
    for piece in ["a", "b", "c"] {
        tx.send(piece).unwrap();
    }
    drop(tx);
    // The reader takes 30 s over each piece (a decoder behind a full channel); the pieces were
    // there all along, so the body never waited on the server.
    let mut got = String::new();
    while let Some(frame) = body.frame().await {
        got.push_str(std::str::from_utf8(&frame.unwrap().into_data().unwrap()).unwrap());
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    assert_eq!(got, "abc");
}

#[tokio::test(start_paused = true)]
async fn the_inner_services_errors_pass_through() {
    let svc = tower::service_fn(|()| async { Err::<http::Response<Full<Bytes>>, _>(std::io::Error::other("refused")) });
    let Err(err) = DeadlineLayer(T).layer(svc).oneshot(()).await else {
        panic!("answered")
    };
    assert_eq!(err.to_string(), "refused");
    assert_eq!(
        err.downcast_ref::<std::io::Error>().map(|e| e.kind()),
        Some(std::io::ErrorKind::Other)
    );
}

/// An HTTP/1.1 server on loopback that counts the connections it accepts and the requests it
/// serves; `/unavailable` is answered 503, anything else 200.
async fn counting_server() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let (c, r) = (connections.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let r = r.clone();
            let serve = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                r.fetch_add(1, Ordering::SeqCst);
                let status = if req.uri().path() == "/unavailable" { 503 } else { 200 };
                let text = format!(
                    r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"said {status}","reason":"ServiceUnavailable","code":{status}}}"#
                );
                let answer = http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(text)));
                async move { answer }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), serve),
            );
        }
    });
    (url, connections, requests)
}

fn get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).unwrap()
}

/// Real sockets and real time (a paused clock would move on while a socket waits): two
/// requests further apart than the timeout.
#[tokio::test]
async fn requests_further_apart_than_the_timeout_share_one_connection() {
    let timeout = Duration::from_secs(2);
    let ours = counting_server().await;
    let client = client(Config::new(ours.0.parse().unwrap()), timeout).unwrap();
    // The same two requests through kube's default stack with its read timeout: what the
    // agent's clients were, and the cost this module removes.
    let kubes = counting_server().await;
    let mut config = Config::new(kubes.0.parse().unwrap());
    config.read_timeout = Some(timeout);
    let kube_default = Client::try_from(config).unwrap();
    for _ in 0..2 {
        client.request_text(get("/version")).await.unwrap();
        kube_default.request_text(get("/version")).await.unwrap();
        tokio::time::sleep(timeout + Duration::from_millis(700)).await;
    }
    assert_eq!(ours.2.load(Ordering::SeqCst), 2);
    assert_eq!(ours.1.load(Ordering::SeqCst), 1, "one connection for both requests");
    assert_eq!(kubes.2.load(Ordering::SeqCst), 2);
    assert_eq!(
        kubes.1.load(Ordering::SeqCst),
        2,
        "kube's read timeout closed the idle connection"
    );
}

#[tokio::test]
async fn a_503_is_the_callers_at_once_not_retried_inside_the_client() {
    let (url, _, requests) = counting_server().await;
    let client = client(Config::new(url.parse().unwrap()), Duration::from_secs(5)).unwrap();
    let sent = std::time::Instant::now();
    let err = client.request_text(get("/unavailable")).await.unwrap_err();
    match err {
        kube::Error::Api(status) => assert_eq!((status.code, status.message.as_str()), (503, "said 503")),
        other => panic!("{other:?}"),
    }
    assert_eq!(requests.load(Ordering::SeqCst), 1, "asked once");
    assert!(sent.elapsed() < Duration::from_secs(1), "{:?}", sent.elapsed());
}

#[test]
fn the_configuration_times_connects_and_writes_but_not_idle_reads_and_leaves_retries_out() {
    let mut base = Config::new("https://10.0.0.1:6443".parse().unwrap());
    base.read_timeout = Some(Duration::from_secs(295));
    base.reset_reader_on_write = true;
    assert!(base.default_retry, "kube retries by default");
    let c = configured(base.clone(), T);
    assert_eq!(
        (c.connect_timeout, c.write_timeout, c.read_timeout),
        (Some(T), Some(T), None)
    );
    assert!(!c.default_retry && !c.reset_reader_on_write);
    assert_eq!(c.cluster_url, base.cluster_url);
}

#[tokio::test]
async fn pieces_of_a_real_answer_stream_through() {
    let (url, _, _) = counting_server().await;
    let client = client(Config::new(url.parse().unwrap()), T).unwrap();
    let answer = client.send(get("/version").map(Into::into)).await.unwrap();
    let mut stream = answer.into_body().into_data_stream();
    let mut text = Vec::new();
    while let Some(piece) = stream.next().await {
        text.extend_from_slice(&piece.unwrap());
    }
    assert!(
        text.starts_with(br#"{"kind":"Status""#),
        "{}",
        String::from_utf8_lossy(&text)
    );
}
