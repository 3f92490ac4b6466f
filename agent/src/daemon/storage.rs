//! The daemon's measurements of Spark's local storage: every `local_storage_interval_seconds`
//! the running Spark pods' local dirs are walked ([`crate::collect::localstore`], on the
//! blocking pool), and a measurement that changed what the rules would judge makes the loop
//! judge again.
//!
//! A walk can hang (a hostPath local dir on a hung network mount: `stat` does not return).
//! The loop waits for it [`WALK_WAIT`] at most; past that the measurement is an error that
//! says so (the rules that need it cannot judge: never "nothing grows"), the walk is left to
//! finish on its thread, and no other is started until it has: each turn meanwhile reports it
//! still running. Nothing the loop does waits on the store while a walk holds it.
//!
//! With `kubelet_stats_url` set, each measurement first asks the kubelet for its
//! `/stats/summary` ([`crate::collect::kubelet_stats`]) and walks only what the kubelet does not
//! measure; when the kubelet cannot be read, everything is walked and the measurement says why.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodemedic_rules::Finding;
use nodemedic_rules::finding::Severity;
use nodemedic_rules::snapshot::{KubeletStats, LocalStorage, Observed, PodInfo};

use crate::collect::kubelet_stats::KubeletStatsClient;
use crate::collect::localstore::LocalStore;
use crate::collect::mountinfo::image_fs;
use crate::host::HostPaths;

/// How long the loop waits for a walk before it reports the measurement as not done.
pub(super) const WALK_WAIT: Duration = Duration::from_secs(10);

/// The measurements and what the last judgement saw of them.
#[derive(Debug)]
pub(super) struct Storage {
    store: Arc<Mutex<LocalStore>>,
    /// The last measurement and when it was made.
    last: Option<(Instant, Observed<LocalStorage>)>,
    /// The measurement the rules last judged.
    judged: Option<Observed<LocalStorage>>,
    /// A walk that outlasted [`WALK_WAIT`], and when it started.
    running: Option<(Instant, tokio::task::JoinHandle<Observed<LocalStorage>>)>,
    /// Warnings of `local-storage-eviction-risk` not yet given to the store (it was busy).
    pending_warned: Vec<(String, i64, Severity)>,
    /// [`WALK_WAIT`], or less in a test.
    walk_wait: Duration,
    /// The kubelet's `/stats/summary`, when configured: its client, or why there is none
    /// (with the URL).
    kubelet: Option<Result<KubeletStatsClient, (String, String)>>,
    /// The last reason the kubelet could not be read (logged when it changes).
    kubelet_failing: Option<String>,
    /// Whether the last measurement read the kubelet's summary.
    kubelet_read: bool,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            store: Arc::new(Mutex::new(LocalStore::default())),
            last: None,
            judged: None,
            running: None,
            pending_warned: Vec::new(),
            walk_wait: WALK_WAIT,
            kubelet: None,
            kubelet_failing: None,
            kubelet_read: false,
        }
    }
}

/// The measurement while a walk has not returned: the same words every turn (a source's
/// status that changed every minute would be news every minute).
fn not_returned(wait: Duration) -> Observed<LocalStorage> {
    Observed::Error {
        reason: format!(
            "the walk of the Spark pods' local dirs has not returned within {} s (a hung mount below a local \
             dir?): not measured, and no other walk starts until it returns",
            wait.as_secs()
        ),
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
                || a.kubelet_stats != b.kubelet_stats
                || (grows && (a.filesystems != b.filesystems || a.imagefs != b.imagefs))
        }
        (Some(a), b) => a != b,
        (None, _) => true,
    }
}

impl Storage {
    /// The measurements `effective` asks for: asking the kubelet first when `kubelet_stats_url`
    /// is set, with the agent's credentials from `config`.
    pub fn configured(effective: &crate::config::Effective, config: &kube::Config) -> Self {
        match &effective.kubelet_stats_url {
            None => Storage::default(),
            Some(url) => Storage::with_kubelet(
                KubeletStatsClient::new(
                    config,
                    url,
                    effective.kubelet_stats_insecure_tls,
                    effective.request_timeout,
                )
                .map_err(|e| (url.clone(), e)),
            ),
        }
    }

    /// Measurements that ask the kubelet first: `kubelet` is its client, or the URL and why no
    /// client could be made for it.
    fn with_kubelet(kubelet: Result<KubeletStatsClient, (String, String)>) -> Self {
        if let Err((url, reason)) = &kubelet {
            tracing::error!(
                url,
                reason,
                "the kubelet's /stats/summary will not be read: every local dir is walked"
            );
        }
        Storage {
            kubelet: Some(kubelet),
            ..Default::default()
        }
    }

    /// The kubelet's summary, if configured and readable, and what to say of it.
    async fn ask_kubelet(&mut self) -> (Option<crate::collect::kubelet_stats::Summary>, KubeletStats) {
        let client = match &self.kubelet {
            None => return (None, KubeletStats::Off),
            Some(Err((url, reason))) => {
                return (
                    None,
                    KubeletStats::Unreadable {
                        url: url.clone(),
                        reason: reason.clone(),
                    },
                );
            }
            Some(Ok(client)) => client,
        };
        let url = client.url().to_string();
        match client.summary().await {
            Ok(summary) => {
                if self.kubelet_failing.take().is_some() {
                    tracing::info!(url, "the kubelet's /stats/summary is read again");
                }
                (Some(summary), KubeletStats::Read { url })
            }
            Err(reason) => {
                if self.kubelet_failing.as_ref() != Some(&reason) {
                    tracing::warn!(
                        url,
                        reason,
                        "the kubelet's /stats/summary could not be read: the local dirs are walked"
                    );
                    self.kubelet_failing = Some(reason.clone());
                }
                (None, KubeletStats::Unreadable { url, reason })
            }
        }
    }

    /// Whether the last measurement read the kubelet's `/stats/summary`.
    pub fn kubelet_read(&self) -> bool {
        self.kubelet_read
    }

    /// Whether a measurement is due (or a walk that outlasted its wait has ended).
    pub fn due(&self, interval: Duration) -> bool {
        self.running.as_ref().is_some_and(|(_, h)| h.is_finished())
            || self.last.as_ref().is_none_or(|(at, _)| at.elapsed() >= interval)
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
        let measured = match self.running.take() {
            // The walk that did not return in time: its result when it has one (a measurement
            // of when it started: the forecast counts from then), else still not measured.
            Some((started, handle)) if !handle.is_finished() => {
                self.running = Some((started, handle));
                not_returned(self.walk_wait)
            }
            Some((started, handle)) => {
                tracing::info!(
                    seconds = started.elapsed().as_secs(),
                    "the walk of the Spark pods' local dirs that had not returned has returned"
                );
                handle.await.unwrap_or_else(|e| Observed::Error {
                    reason: format!("the local storage walk failed: {e}"),
                })
            }
            None => {
                let (summary, said) = self.ask_kubelet().await;
                self.kubelet_read = summary.is_some();
                let (store, host) = (self.store.clone(), host.clone());
                let warned = std::mem::take(&mut self.pending_warned);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                let started = Instant::now();
                let mut handle = tokio::task::spawn_blocking(move || match store.lock() {
                    Ok(mut store) => {
                        for (uid, at, severity) in warned {
                            store.warned(&uid, at, severity);
                        }
                        let imagefs = image_fs(&host, &host.display(&kubelet_dir), runtime_endpoint.as_deref());
                        let window = window.as_secs_f64();
                        let mut measured =
                            store.measure_with(&host, &kubelet_dir, &pods, now, window, imagefs, summary.as_ref());
                        if let Observed::Ok(m) = &mut measured {
                            m.kubelet_stats = said;
                        }
                        measured
                    }
                    Err(_) => Observed::Error {
                        reason: "the local storage measurements were lost to a panic".into(),
                    },
                });
                match tokio::time::timeout(self.walk_wait, &mut handle).await {
                    Ok(done) => done.unwrap_or_else(|e| Observed::Error {
                        reason: format!("the local storage walk failed: {e}"),
                    }),
                    Err(_) => {
                        tracing::warn!(
                            wait_seconds = self.walk_wait.as_secs(),
                            "the walk of the Spark pods' local dirs has not returned: local_storage not measured"
                        );
                        self.running = Some((started, handle));
                        not_returned(self.walk_wait)
                    }
                }
            }
        };
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
        for f in findings.iter().filter(|f| f.rule == risk) {
            if let Some(uid) = &f.subject.uid {
                self.pending_warned.push((uid.clone(), at, f.severity));
            }
        }
        // Not waiting on a walk that holds the store: its warnings go to the next walk.
        if let Ok(mut store) = self.store.try_lock() {
            for (uid, at, severity) in self.pending_warned.drain(..) {
                store.warned(&uid, at, severity);
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
                    measured_by: Default::default(),
                    measured_at: 0,
                }],
                kubelet_ephemeral: None,
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
            kubelet_stats: KubeletStats::Off,
            remembered: Default::default(),
        })
    }

    /// A walk that does not return (here: it waits on the store, held as a hung `stat`
    /// would hold it) makes the measurement an error after the wait, not a stall of the loop;
    /// no second walk starts beside it; the judgement's warnings do not wait on the store; once
    /// it returns, its measurement is taken and the warnings reach the store.
    #[tokio::test]
    async fn a_walk_that_does_not_return_is_said_and_waited_for_once() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostPaths::new(dir.path(), None);
        let kubelet = host.kubelet_dir(None);
        std::fs::create_dir_all(kubelet.join("pods")).unwrap();
        let mut storage = Storage {
            walk_wait: Duration::from_millis(100),
            ..Default::default()
        };
        // A thread holds the store as a walk stuck in `stat` would, until told to let go.
        let (store, (release, released)) = (storage.store.clone(), std::sync::mpsc::channel::<()>());
        let (held, holding) = std::sync::mpsc::channel::<()>();
        let hung = std::thread::spawn(move || {
            let _walk = store.lock().unwrap();
            held.send(()).unwrap();
            released.recv().ok();
        });
        holding.recv().unwrap();
        let began = Instant::now();
        let news = storage
            .measure(&host, kubelet.clone(), None, vec![], Duration::from_secs(600))
            .await;
        assert!(news, "an error is news after nothing");
        assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
        let Observed::Error { reason } = storage.observed() else {
            panic!("{:?}", storage.observed())
        };
        assert!(reason.contains("has not returned within 0 s"), "{reason}");
        // The judgement of that turn: its warning is kept, not waited on.
        let warned = Finding::new(
            nodemedic_rules::rules::local_storage_eviction_risk::ID,
            Severity::Warning,
            nodemedic_rules::finding::Subject {
                kind: nodemedic_rules::finding::SubjectKind::Pod,
                namespace: Some("spark".into()),
                name: Some("exec-1".into()),
                uid: Some("u1".into()),
                container: None,
            },
            "grows".into(),
            "more room".into(),
        );
        storage.judged(std::slice::from_ref(&warned), 100);
        assert_eq!(storage.pending_warned.len(), 1);
        // Due again: still running, the same words, no second walk (it would wait on the
        // store too, and the first would never be taken).
        assert!(storage.due(Duration::ZERO));
        assert!(
            !storage
                .measure(&host, kubelet.clone(), None, vec![], Duration::from_secs(600))
                .await
        );
        assert!(storage.running.is_some());
        release.send(()).unwrap();
        hung.join().unwrap();
        let returned = Instant::now();
        while !storage.running.as_ref().is_some_and(|(_, h)| h.is_finished()) {
            assert!(returned.elapsed() < Duration::from_secs(10), "the walk did not return");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            storage.due(Duration::from_secs(3600)),
            "a returned walk is taken at once"
        );
        storage
            .measure(&host, kubelet, None, vec![], Duration::from_secs(600))
            .await;
        assert!(storage.running.is_none());
        assert!(
            !matches!(storage.observed(), Observed::Error { .. }),
            "{:?}",
            storage.observed()
        );
        storage.judged(&[], 160);
        assert!(storage.pending_warned.is_empty(), "given to the store once it was free");
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
