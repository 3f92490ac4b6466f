//! A pod list decoded as it arrives: the body of a LIST read in chunks by the caller's task
//! and decoded by the pods file's decoder (`collect::pods`, its bounded window) on a blocking
//! task, so the list is never in memory whole.

use nodemedic_rules::snapshot::PodInfo;

/// Why [`stream_pods`] has no pods: the body could not be read, or is not a pod list.
#[derive(Debug)]
pub(super) enum StreamFailure {
    Read(std::io::Error),
    Decode(String),
}

/// The chunks of a body in flight between the task that reads it and the decoder.
const CHUNKS_IN_FLIGHT: usize = 2;
const CHUNK: usize = 64 * 1024;

/// Decodes a pod list as `body` arrives: a blocking task runs the pods file's decoder
/// (`collect::pods`, its bounded window) over the chunks this task reads, at most
/// [`CHUNKS_IN_FLIGHT`] of [`CHUNK`] bytes waiting in between. A read error wins over what
/// the decoder says of the text it saw end early.
pub(super) async fn stream_pods(mut body: impl futures::AsyncRead + Unpin) -> Result<Vec<PodInfo>, StreamFailure> {
    use futures::AsyncReadExt as _;
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(CHUNKS_IN_FLIGHT);
    let decoder = tokio::task::spawn_blocking(move || {
        crate::collect::pods::read_pods(Chunks {
            rx,
            chunk: Vec::new(),
            at: 0,
        })
    });
    let mut read_error = None;
    loop {
        let mut chunk = vec![0; CHUNK];
        match body.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => {
                chunk.truncate(n);
                // A decoder that stopped has found an error: its result says which.
                if tx.send(chunk).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                read_error = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let decoded = decoder.await;
    if let Some(e) = read_error {
        return Err(StreamFailure::Read(e));
    }
    match decoded {
        Ok(Ok(pods)) => Ok(pods),
        Ok(Err(e)) => Err(StreamFailure::Decode(e.to_string())),
        Err(e) => Err(StreamFailure::Decode(format!("the decoder stopped: {e}"))),
    }
}

/// The decoder's side of [`stream_pods`]: the chunks as one `Read`, which ends when the
/// reading task hangs up.
struct Chunks {
    rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl std::io::Read for Chunks {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.blocking_recv() {
                Some(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_api::Error;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A body that gives `step` bytes a read, then fails with `fail` if one is given.
    struct Body {
        rest: Vec<u8>,
        step: usize,
        fail: Option<std::io::ErrorKind>,
    }

    impl futures::AsyncRead for Body {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, out: &mut [u8]) -> Poll<std::io::Result<usize>> {
            if self.rest.is_empty() {
                return Poll::Ready(match self.fail {
                    Some(kind) => Err(std::io::Error::new(kind, "connection reset by the test")),
                    None => Ok(0),
                });
            }
            let n = self.rest.len().min(self.step).min(out.len());
            out[..n].copy_from_slice(&self.rest[..n]);
            self.rest.drain(..n);
            Poll::Ready(Ok(n))
        }
    }

    /// A PodList of `n` pods whose names are padded to make it many chunks long.
    fn pod_list(n: usize) -> Vec<u8> {
        let items: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!({
                    "metadata": {"name": format!("p{i}"), "namespace": "spark", "uid": format!("u{i}"),
                                 "annotations": {"ignored": "x".repeat(2_000)}},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
                    "status": {"phase": "Running"}
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({"kind": "PodList", "apiVersion": "v1", "items": items})).unwrap()
    }

    #[tokio::test]
    async fn a_pod_list_is_decoded_as_it_arrives() {
        // 700 pods are about 1.5 MB, arriving 1,000 bytes a read: far more than the chunks
        // that may wait between the reader and the decoder.
        let text = pod_list(700);
        assert!(text.len() > 20 * CHUNK, "{}", text.len());
        let body = Body {
            rest: text,
            step: 1_000,
            fail: None,
        };
        let pods = stream_pods(body).await.unwrap();
        let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names.len(), 700);
        assert_eq!((names[0], names[699]), ("p0", "p699"));
        assert!(
            pods.iter().all(|p| p.annotations.is_empty()),
            "what no rule reads is dropped"
        );
    }

    #[tokio::test]
    async fn a_read_error_wins_over_the_text_it_cut_short() {
        let mut text = pod_list(50);
        text.truncate(text.len() / 2);
        let body = Body {
            rest: text,
            step: 4_096,
            fail: Some(std::io::ErrorKind::TimedOut),
        };
        let failure = stream_pods(body).await.unwrap_err();
        let StreamFailure::Read(e) = &failure else {
            panic!("{failure:?}");
        };
        let err = Error::failed("LIST", "pods", None, e);
        assert_eq!(err.to_string(), "LIST pods: timeout (connection reset by the test)");
    }

    #[tokio::test]
    async fn an_answer_that_is_no_pod_list_is_refused_with_its_place() {
        let body = Body {
            rest: br#"{"kind":"PodList","items":[{"metadata":{"uid":"u"}} {"x":1}]}"#.to_vec(),
            step: 7,
            fail: None,
        };
        let failure = stream_pods(body).await.unwrap_err();
        let StreamFailure::Decode(message) = failure else {
            panic!("{failure:?}");
        };
        assert_eq!(message, "invalid JSON at line 1 column 53: expected `,` or `]`");
        let body = Body {
            rest: br#"{"kind":"NodeList","items":[]}"#.to_vec(),
            step: 7,
            fail: None,
        };
        let StreamFailure::Decode(message) = stream_pods(body).await.unwrap_err() else {
            panic!();
        };
        assert_eq!(
            message,
            "expected a Pod, a PodList or a v1 List, found kind \"NodeList\""
        );
    }
}
