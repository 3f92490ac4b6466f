//! The oversized answers of [`Behaviour::Huge`](super::Behaviour::Huge), and the codec that
//! sends a huge `List` answer without building it again for each request.
//!
//! A `List` answer over a client's cap must be a real message of that size: 25,000 made-up
//! pods are 20.8 MB. Building and encoding them took 0.6 s of a debug build's CPU (0.36 s
//! for the pods, 0.25 s for prost), and on two loaded cores that passed the agent's 2 s
//! deadline for `List`, so the agent saw a timeout where the test wanted the refusal of an
//! answer too big. So the bytes are encoded once per size, when the behaviour is set
//! ([`prepare`]), and kept; `List` answers with a stand-in message that only names the size
//! ([`stand_in`]), and the fake's codec ([`Codec`], named in `build.rs`) writes the kept
//! bytes in its place. On the wire the answer is the same as prost's encoding of
//! [`huge_list`]: the fake's own tests decode it whole and compare.

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{LazyLock, Mutex};

use bytes::{BufMut as _, Bytes};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec as GrpcCodec, EncodeBuf, Encoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use super::proto::{ContainerResources, ListPodResourcesResponse, PodResources};

/// One made-up pod of a huge answer: a 253-character name (the longest a pod name may be)
/// and eight containers with 63-character names (the longest a container name may be), each
/// pinned to two CPUs: 833 bytes encoded (for `i` under 10^8).
pub(super) fn made_up_pod(i: usize) -> PodResources {
    fn padded(mut s: String, len: usize) -> String {
        let short = len.saturating_sub(s.len());
        s.extend(std::iter::repeat_n('x', short));
        s
    }
    PodResources {
        name: padded(format!("huge-{i:08}-"), 253),
        namespace: "huge".to_string(),
        containers: (0..8i64)
            .map(|c| ContainerResources {
                name: padded(format!("container-{c}-"), 63),
                cpu_ids: vec![2 * c, 2 * c + 1],
                ..Default::default()
            })
            .collect(),
    }
}

/// The `List` answer of [`Behaviour::Huge`](super::Behaviour::Huge) with `pods` pods, for
/// tests that want to know its size (`prost::Message::encoded_len`).
pub fn huge_list(pods: usize) -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: (0..pods).map(made_up_pod).collect(),
    }
}

/// The namespace of a stand-in's only pod: a NUL is in no namespace a scenario can give
/// (namespaces are DNS labels), so no real answer is taken for a stand-in.
const STAND_IN: &str = "\0huge";

/// Prost's encoding of [`huge_list`], by pod count, for the life of the test process.
static ENCODED: LazyLock<Mutex<HashMap<usize, Bytes>>> = LazyLock::new(Mutex::default);

/// The encoding of `huge_list(pods)`, made the first time it is asked for.
pub(super) fn prepare(pods: usize) -> Bytes {
    let mut kept = ENCODED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    kept.entry(pods)
        .or_insert_with(|| Bytes::from(prost::Message::encode_to_vec(&huge_list(pods))))
        .clone()
}

/// What `List` returns for a huge answer of `pods` pods: one pod that names the count, which
/// [`Codec`] replaces by the encoding of `huge_list(pods)`.
pub(super) fn stand_in(pods: usize) -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: vec![PodResources {
            name: pods.to_string(),
            namespace: STAND_IN.to_string(),
            containers: Vec::new(),
        }],
    }
}

/// The pod count a stand-in names, or `None` for any other message.
fn stood_in_for(message: &dyn Any) -> Option<usize> {
    let list = message.downcast_ref::<ListPodResourcesResponse>()?;
    match list.pod_resources.as_slice() {
        [only] if only.namespace == STAND_IN => only.name.parse().ok(),
        _ => None,
    }
}

/// The codec of the fake's gRPC server and client: prost's, except that a [`stand_in`] is
/// written as the bytes it stands for.
#[derive(Debug, Clone)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(PhantomData)
    }
}

impl<T, U> GrpcCodec for Codec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = StandInEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        StandInEncoder(ProstCodec::<T, U>::default().encoder())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::default().decoder()
    }
}

/// [`Codec`]'s encoder.
#[derive(Debug)]
pub struct StandInEncoder<T>(ProstEncoder<T>);

impl<T: prost::Message + 'static> Encoder for StandInEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        match stood_in_for(&item) {
            Some(pods) => {
                dst.put_slice(&prepare(pods));
                Ok(())
            }
            None => self.0.encode(item, dst),
        }
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stand_in_is_known_by_its_namespace_and_count_alone() {
        assert_eq!(stood_in_for(&stand_in(25_000)), Some(25_000));
        // A real answer, even one pod, is not a stand-in.
        let one = ListPodResourcesResponse {
            pod_resources: vec![made_up_pod(7)],
        };
        assert_eq!(stood_in_for(&one), None);
        assert_eq!(stood_in_for(&huge_list(2)), None);
        assert_eq!(stood_in_for(&ListPodResourcesResponse::default()), None);
        // Nor is a message of another type.
        assert_eq!(stood_in_for(&PodResources::default()), None);
    }

    #[test]
    fn the_kept_encoding_is_prosts_and_made_once() {
        let first = prepare(300);
        assert_eq!(first, prost::Message::encode_to_vec(&huge_list(300)));
        // The second call hands out the same buffer (a clone of the Bytes, not a new encoding).
        assert_eq!(prepare(300).as_ptr(), first.as_ptr());
    }
}
