//! The daemon's measurements of Spark's local storage: every `local_storage_interval_seconds`
//! the running Spark pods' local dirs are walked ([`crate::collect::localstore`], on the
//! blocking pool: a hostPath on a hung mount must not stall the scan loop), and a measurement
//! that changed what the rules would judge makes the loop judge again.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodemedic_rules::Finding;
use nodemedic_rules::snapshot::{LocalStorage, Observed, PodInfo};

use crate::collect::localstore::LocalStore;
use crate::collect::mountinfo::image_fs;
use crate::host::HostPaths;

/// The measurements and what the last judgement saw of them.
#[derive(Debug)]
pub(super) struct Storage {
    store: Arc<Mutex<LocalStore>>,
    /// The last measurement and when it was made.
    last: Option<(Instant, Observed<LocalStorage>)>,
    /// The measurement the rules last judged.
    judged: Option<Observed<LocalStorage>>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            store: Arc::new(Mutex::new(LocalStore::default())),
            last: None,
            judged: None,
        }
    }
}

/// Whether `new` says something the rules would judge otherwise than `old`: a pod's dirs (their
/// bytes or growth) changed, or something grows and a file system's room (or whether the
/// images share it) changed. The time of the measurement alone is not news (the forecast
/// counts down by the rules' own deadline).
fn judged_otherwise(old: Option<&Observed<LocalStorage>>, new: &Observed<LocalStorage>) -> bool {
    match (old, new) {
        (Some(Observed::Ok(a)), Observed::Ok(b)) => {
            let grows = b
                .pods
                .iter()
                .flat_map(|p| &p.dirs)
                .any(|d| d.growth_bytes_per_second.is_some_and(|g| g > 0.0));
            a.pods != b.pods
                || a.remembered != b.remembered
                || (grows && (a.filesystems != b.filesystems || a.imagefs != b.imagefs))
        }
        (Some(a), b) => a != b,
        (None, _) => true,
    }
}

impl Storage {
    /// Whether a measurement is due.
    pub fn due(&self, interval: Duration) -> bool {
        self.last.as_ref().is_none_or(|(at, _)| at.elapsed() >= interval)
    }

    /// Measures the local dirs of the Spark pods among `pods`; whether the rules would judge
    /// the result otherwise than the last judgement.
    pub async fn measure(
        &mut self,
        host: &HostPaths,
        kubelet_dir: PathBuf,
        runtime_endpoint: Option<String>,
        pods: Vec<PodInfo>,
        window: Duration,
    ) -> bool {
        let (store, host) = (self.store.clone(), host.clone());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let measured = tokio::task::spawn_blocking(move || match store.lock() {
            Ok(mut store) => {
                let imagefs = image_fs(&host, &host.display(&kubelet_dir), runtime_endpoint.as_deref());
                store.measure(&host, &kubelet_dir, &pods, now, window.as_secs_f64(), imagefs)
            }
            Err(_) => Observed::Error {
                reason: "the local storage measurements were lost to a panic".into(),
            },
        })
        .await
        .unwrap_or_else(|e| Observed::Error {
            reason: format!("the local storage walk failed: {e}"),
        });
        let changed = judged_otherwise(self.judged.as_ref(), &measured);
        self.last = Some((Instant::now(), measured));
        changed
    }

    /// The measurement to judge with: the last one (not applicable before the first).
    pub fn observed(&self) -> Observed<LocalStorage> {
        self.last.as_ref().map_or_else(
            || Observed::NotApplicable {
                reason: "not measured yet".into(),
            },
            |(_, o)| o.clone(),
        )
    }

    /// The rules judged the last measurement; `findings` are theirs: the pods
    /// `local-storage-eviction-risk` reported are remembered as warned (for
    /// `spark-executor-evicted`, should the kubelet evict them).
    pub fn judged(&mut self, findings: &[Finding], at: i64) {
        self.judged = self.last.as_ref().map(|(_, o)| o.clone());
        let risk = nodemedic_rules::rules::local_storage_eviction_risk::ID;
        if let Ok(mut store) = self.store.lock() {
            for f in findings.iter().filter(|f| f.rule == risk) {
                if let Some(uid) = &f.subject.uid {
                    store.warned(uid, at, f.severity);
                }
            }
        }
    }

    /// The Spark pods whose local dirs are measured (running, with `spark-local-dir-*`
    /// volumes).
    pub fn pods_to_measure<'a>(pods: impl Iterator<Item = &'a PodInfo>) -> Vec<PodInfo> {
        pods.filter(|p| p.spark_role().is_some() && !p.local_dir_volumes.is_empty())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_rules::snapshot::{DirBacking, PodStorage, StorageDir};

    fn storage(bytes: u64, growth: f64, available: u64) -> Observed<LocalStorage> {
        Observed::Ok(LocalStorage {
            measured_at: 0,
            window_seconds: 600.0,
            pods: vec![PodStorage {
                pod_uid: "u1".into(),
                dirs: vec![StorageDir {
                    volume: "spark-local-dir-1".into(),
                    backing: DirBacking::EmptyDir,
                    path: "/x".into(),
                    device: Some(1),
                    bytes,
                    files: 1,
                    growth_bytes_per_second: Some(growth),
                    growth_span_seconds: 600.0,
                    truncated: false,
                }],
            }],
            filesystems: vec![nodemedic_rules::snapshot::FileSystemUse {
                device: 1,
                path: "/var/lib/kubelet".into(),
                capacity_bytes: 100,
                available_bytes: available,
                nodefs: true,
            }],
            imagefs: Default::default(),
            unseen: vec![],
            remembered: Default::default(),
        })
    }

    #[test]
    fn a_measurement_is_news_when_the_rules_would_judge_it_otherwise() {
        let quiet = storage(10, 0.0, 50);
        assert!(judged_otherwise(None, &quiet), "the first one");
        // Nothing grows: the file system's room alone (other writers) is no news.
        assert!(!judged_otherwise(Some(&quiet), &storage(10, 0.0, 40)));
        let mut later = quiet.clone();
        if let Observed::Ok(s) = &mut later {
            s.measured_at = 60;
        }
        assert!(!judged_otherwise(Some(&quiet), &later), "its time alone");
        assert!(judged_otherwise(Some(&quiet), &storage(20, 0.0, 50)), "bytes");
        let growing = storage(10, 5.0, 50);
        assert!(judged_otherwise(Some(&quiet), &growing));
        // While something grows, the room left is what the forecast is made of.
        assert!(judged_otherwise(Some(&growing), &storage(10, 5.0, 40)));
        assert!(judged_otherwise(
            Some(&quiet),
            &Observed::Error { reason: "EIO".into() }
        ));
    }
}
