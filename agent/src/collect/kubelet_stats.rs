//! The kubelet's own accounting of pod storage: `GET /stats/summary` on its port (10250), the
//! figures its eviction manager acts on. Optional (`kubelet_stats_url`, which
//! `components/kubelet-stats` sets); where it is read, `local_storage` takes the kubelet's
//! figures for the volumes it reports instead of walking them
//! (docs/rules/local-storage-eviction-risk.md, "The kubelet's accounting").
//!
//! What the summary holds that is used, per pod (`pods[].podRef.uid`):
//! - `volume[]`: each volume the kubelet measures, by `name`, with `usedBytes`, `inodesUsed`,
//!   `capacityBytes`, `availableBytes` and the `time` it measured them, and `pvcRef` for a
//!   claim. The kubelet measures an `emptyDir` (on disk or tmpfs) with `du`, a CSI volume
//!   through the driver's `NodeGetVolumeStats` (when the driver offers it), and no `hostPath`;
//!   it refreshes them every `volumeStatsAggPeriod` (a minute by default).
//! - `ephemeral-storage.usedBytes`: what it counts against the pod's `ephemeral-storage` limit
//!   (its containers' writable layers and logs, and its disk-backed `emptyDir`s).
//!
//! The kubelet authorizes the request as `get` on the `nodes/stats` subresource of its Node
//! (its webhook authorization asks the API server), which the base agent's ServiceAccount does
//! not have: a 403 says so, and the walk goes on.

use std::collections::HashMap;
use std::time::Duration;

use http_body_util::BodyExt as _;
use nodemedic_rules::snapshot::KubeletCount;

/// A summary larger than this is not read (a node of 110 pods answers about 200 KiB).
const SUMMARY_LIMIT: usize = 32 << 20;

/// What one volume of a pod holds, as the kubelet measured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeUsage {
    pub used_bytes: u64,
    pub inodes_used: Option<u64>,
    /// The volume's file system (a claim's own; the kubelet's disk for an `emptyDir`).
    pub capacity_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    /// When the kubelet measured it, unix seconds.
    pub at: i64,
    /// The claim's name, for a PersistentVolumeClaim.
    pub claim: Option<String>,
}

/// One pod's storage as the kubelet counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    /// By volume name.
    pub volumes: HashMap<String, VolumeUsage>,
    pub ephemeral: Option<KubeletCount>,
}

/// The parts of a `/stats/summary` answer that `local_storage` uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// By pod UID.
    pub pods: HashMap<String, PodUsage>,
}

mod wire {
    //! The summary's JSON, as much of it as is read (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`).

    #[derive(serde::Deserialize)]
    pub struct Summary {
        #[serde(default)]
        pub pods: Vec<Pod>,
    }

    #[derive(serde::Deserialize)]
    pub struct Pod {
        #[serde(rename = "podRef")]
        pub pod_ref: PodRef,
        #[serde(default)]
        pub volume: Vec<Volume>,
        #[serde(rename = "ephemeral-storage")]
        pub ephemeral_storage: Option<Fs>,
    }

    #[derive(serde::Deserialize)]
    pub struct PodRef {
        pub uid: String,
    }

    #[derive(serde::Deserialize)]
    pub struct Fs {
        pub time: Option<String>,
        #[serde(rename = "usedBytes")]
        pub used_bytes: Option<u64>,
        #[serde(rename = "capacityBytes")]
        pub capacity_bytes: Option<u64>,
        #[serde(rename = "availableBytes")]
        pub available_bytes: Option<u64>,
        #[serde(rename = "inodesUsed")]
        pub inodes_used: Option<u64>,
    }

    #[derive(serde::Deserialize)]
    pub struct Volume {
        pub name: String,
        #[serde(flatten)]
        pub fs: Fs,
        #[serde(rename = "pvcRef")]
        pub pvc_ref: Option<PvcRef>,
    }

    #[derive(serde::Deserialize)]
    pub struct PvcRef {
        pub name: String,
    }
}

/// Unix seconds of a `metav1.Time` (RFC 3339), or `fallback` when absent or unreadable.
fn seconds(time: Option<&str>, fallback: i64) -> i64 {
    time.and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map_or(fallback, |t| t.as_second())
}

/// Reads a `/stats/summary` answer; `now` (unix seconds) dates figures that carry no time.
/// A figure without `usedBytes` is left out (the kubelet could not measure it).
pub fn parse(body: &[u8], now: i64) -> Result<Summary, String> {
    let wire: wire::Summary = serde_json::from_slice(body).map_err(|e| format!("not a kubelet stats summary: {e}"))?;
    let mut pods = HashMap::new();
    for p in wire.pods {
        let volumes = p
            .volume
            .into_iter()
            .filter_map(|v| {
                let used_bytes = v.fs.used_bytes?;
                Some((
                    v.name,
                    VolumeUsage {
                        used_bytes,
                        inodes_used: v.fs.inodes_used,
                        capacity_bytes: v.fs.capacity_bytes,
                        available_bytes: v.fs.available_bytes,
                        at: seconds(v.fs.time.as_deref(), now),
                        claim: v.pvc_ref.map(|r| r.name),
                    },
                ))
            })
            .collect();
        let ephemeral = p.ephemeral_storage.and_then(|e| {
            Some(KubeletCount {
                bytes: e.used_bytes?,
                at: seconds(e.time.as_deref(), now),
            })
        });
        pods.insert(p.pod_ref.uid, PodUsage { volumes, ephemeral });
    }
    Ok(Summary { pods })
}

/// A client for the kubelet's `/stats/summary`.
#[derive(Clone)]
pub struct KubeletStatsClient {
    client: kube::Client,
    url: String,
    timeout: Duration,
}

impl std::fmt::Debug for KubeletStatsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KubeletStatsClient({})", self.url)
    }
}

impl KubeletStatsClient {
    /// A client for the kubelet at `url` (`https://NODE_IP:10250`) with the agent's own
    /// credentials from `base` (its ServiceAccount token, read again as it rotates) and the
    /// CA `base` trusts (the cluster's, which signs kubelet serving certificates issued
    /// through the `kubernetes.io/kubelet-serving` signer), or none with `insecure_tls` (a
    /// kubelet whose serving certificate it signed itself). Each request has `timeout`.
    pub fn new(base: &kube::Config, url: &str, insecure_tls: bool, timeout: Duration) -> Result<Self, String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("kubelet_stats_url {url:?}: not a URL: {e}"))?;
        let mut config = base.clone();
        config.cluster_url = uri;
        config.accept_invalid_certs = insecure_tls;
        // The kubelet is on this node: no proxy, and its certificate names its own address.
        config.proxy_url = None;
        config.tls_server_name = None;
        let client =
            crate::deadline::client(config, timeout).map_err(|e| format!("a client for the kubelet at {url}: {e}"))?;
        Ok(KubeletStatsClient {
            client,
            url: url.to_string(),
            timeout,
        })
    }

    /// Where it asks.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// One `GET /stats/summary`, read; the error names the kubelet and what went wrong (with
    /// what to do about a 403).
    pub async fn summary(&self) -> Result<Summary, String> {
        let at = |what: String| format!("GET {}/stats/summary: {what}", self.url.trim_end_matches('/'));
        let request = http::Request::get("/stats/summary")
            .body(Vec::new())
            .map_err(|e| at(e.to_string()))?;
        let answer = async {
            let response = self
                .client
                .send(request.map(kube::client::Body::from))
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(answered)) => answered,
            Ok(Err(e)) => return Err(at(e)),
            Err(_) => return Err(at(format!("no answer within {} s", self.timeout.as_secs_f64()))),
        };
        let text = |body: &[u8]| String::from_utf8_lossy(&body[..body.len().min(300)]).trim().to_string();
        match status.as_u16() {
            200 => {}
            403 => {
                return Err(at(format!(
                    "403 {}: the agent's ServiceAccount needs get on nodes/stats (components/kubelet-stats)",
                    text(&body)
                )));
            }
            code => return Err(at(format!("{code} {}", text(&body)))),
        }
        if body.len() > SUMMARY_LIMIT {
            return Err(at(format!("the answer is larger than {} MiB", SUMMARY_LIMIT >> 20)));
        }
        let now = jiff::Timestamp::now().as_second();
        parse(&body, now).map_err(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summary as a kubelet 1.33 answers it (trimmed to one pod; the fields not read left in).
    const SUMMARY: &str = r#"{
      "node": {"nodeName": "worker-1", "fs": {"time": "2026-12-02T09:00:00Z", "availableBytes": 1, "capacityBytes": 2}},
      "pods": [
        {
          "podRef": {"name": "etl-exec-1", "namespace": "spark", "uid": "u1"},
          "startTime": "2026-12-02T08:00:00Z",
          "containers": [{"name": "spark-kubernetes-executor", "rootfs": {"usedBytes": 4096}}],
          "volume": [
            {"time": "2026-12-02T09:00:10Z", "availableBytes": 50000000000, "capacityBytes": 100000000000,
             "usedBytes": 2147483648, "inodesFree": 9000, "inodes": 10000, "inodesUsed": 1000,
             "name": "spark-local-dir-1"},
            {"time": "2026-12-02T09:00:20Z", "availableBytes": 9000, "capacityBytes": 10000, "usedBytes": 1000,
             "inodesUsed": 3, "name": "spark-local-dir-2", "pvcRef": {"name": "etl-exec-1-pvc-0", "namespace": "spark"}},
            {"time": "2026-12-02T09:00:20Z", "name": "kube-api-access-x"}
          ],
          "ephemeral-storage": {"time": "2026-12-02T09:00:15Z", "usedBytes": 2200000000, "inodesUsed": 1010}
        },
        {"podRef": {"name": "other", "namespace": "x", "uid": "u2"}}
      ]
    }"#;

    #[test]
    fn reads_the_volumes_and_the_pods_ephemeral_storage() {
        let s = parse(SUMMARY.as_bytes(), 7).unwrap();
        let p = &s.pods["u1"];
        let d1 = &p.volumes["spark-local-dir-1"];
        assert_eq!(d1.used_bytes, 2_147_483_648);
        assert_eq!(d1.inodes_used, Some(1000));
        assert_eq!(d1.available_bytes, Some(50_000_000_000));
        assert_eq!(
            d1.at,
            "2026-12-02T09:00:10Z".parse::<jiff::Timestamp>().unwrap().as_second()
        );
        assert_eq!(d1.claim, None);
        let d2 = &p.volumes["spark-local-dir-2"];
        assert_eq!(d2.claim.as_deref(), Some("etl-exec-1-pvc-0"));
        assert_eq!(d2.capacity_bytes, Some(10_000));
        // A volume the kubelet reports without usedBytes is not a figure.
        assert!(!p.volumes.contains_key("kube-api-access-x"));
        assert_eq!(p.ephemeral.map(|e| e.bytes), Some(2_200_000_000));
        assert_eq!(s.pods["u2"], PodUsage::default());
    }

    #[test]
    fn a_figure_without_a_time_is_dated_now_and_a_bad_answer_says_what_it_is() {
        let s = parse(
            br#"{"pods":[{"podRef":{"uid":"u"},"volume":[{"name":"v","usedBytes":5}]}]}"#,
            42,
        )
        .unwrap();
        assert_eq!(s.pods["u"].volumes["v"].at, 42);
        let e = parse(b"<html>", 0).unwrap_err();
        assert!(e.starts_with("not a kubelet stats summary: "), "{e}");
        let e = parse(br#"{"pods":[{"volume":[]}]}"#, 0).unwrap_err();
        assert!(e.contains("podRef"), "{e}");
    }
}
