//! Supervised tasks: a task of the daemon that ends or panics is logged, counted in
//! `nodemedic_task_restarts_total{task}` and started again after a jittered backoff that doubles
//! from one second up to a minute (and starts over once a run lasted a minute). Once the agent
//! is stopping ([`Health::stop`]), a task that ends is expected: it is neither restarted nor
//! counted, and logged only at debug level.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::serve::Health;
use crate::metrics::Metrics;
use crate::retry::Backoff;

/// The first pause before a restart.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The pause after a run that lasted `ran`: the schedule starts over after a long run.
pub fn next_backoff(backoff: &mut Backoff, ran: Duration) -> Duration {
    if ran >= MAX_BACKOFF {
        backoff.reset();
    }
    backoff.fail()
}

/// Runs `start()` as task `name` until the agent stops: each run on a task of its own, so a
/// panic ends only that run. While the `pod_watch` task is between runs, `/readyz` says the
/// watch is down. The handle ends when a run ends after [`Health::stop`].
pub fn spawn<F, Fut>(name: &'static str, metrics: Metrics, health: Arc<Health>, start: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF, name.len() as u64);
        loop {
            let began = Instant::now();
            let ended = tokio::spawn(start()).await;
            if health.is_stopping() {
                match ended {
                    Err(e) if e.is_panic() => {
                        tracing::error!(task = name, error = %e, "task panicked while the agent was stopping")
                    }
                    _ => tracing::debug!(task = name, "task ended: the agent is stopping"),
                }
                return;
            }
            match ended {
                Ok(()) => tracing::warn!(task = name, "task ended; restarting it"),
                Err(e) if e.is_panic() => tracing::error!(task = name, error = %e, "task panicked; restarting it"),
                Err(e) => tracing::error!(task = name, error = %e, "task was cancelled; restarting it"),
            }
            if name == "pod_watch" {
                health.watch_up.store(false, Ordering::Relaxed);
                health.pods_synced.store(false, Ordering::Relaxed);
                metrics.pod_watch_up.set(0);
            }
            metrics.task_restarts_total.with_label_values(&[name]).inc();
            tokio::time::sleep(next_backoff(&mut backoff, began.elapsed())).await;
            if health.is_stopping() {
                return;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_minute_and_starts_over_after_a_long_run() {
        let mut b = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF, 1);
        for ceiling in [1, 2, 4, 8, 16, 32, 60, 60, 60] {
            let p = next_backoff(&mut b, Duration::from_millis(10)).as_secs_f64();
            assert!(p >= ceiling as f64 / 2.0 && p <= ceiling as f64, "{p} for {ceiling}");
        }
        assert!(next_backoff(&mut b, Duration::from_secs(61)) <= FIRST_BACKOFF);
    }

    #[tokio::test]
    async fn a_panicking_task_is_restarted_and_counted() {
        tokio::time::pause();
        let metrics = Metrics::new().unwrap();
        let health = Arc::new(Health::default());
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = runs.clone();
        spawn("pod_watch", metrics.clone(), health.clone(), move || {
            let counter = counter.clone();
            async move {
                if counter.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("boom");
                }
                std::future::pending::<()>().await;
            }
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(metrics.task_restarts_total.with_label_values(&["pod_watch"]).get(), 2);
        assert!(
            !health.watch_up.load(Ordering::Relaxed),
            "the task never said it was up"
        );
    }

    /// A task that ends (or panics) once the agent is stopping is neither restarted nor
    /// counted, and its supervisor ends; before that, an ended task is restarted and counted.
    #[tokio::test]
    async fn a_task_that_ends_on_shutdown_is_not_restarted_nor_counted() {
        tokio::time::pause();
        for panics in [false, true] {
            let metrics = Metrics::new().unwrap();
            let health = Arc::new(Health::default());
            let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
            let counter = runs.clone();
            // Ends at once on its first run (an ordinary end: restarted and counted), then
            // runs until told to stop, as `api_probes` does on SIGTERM.
            let supervisor = spawn("api_probes", metrics.clone(), health.clone(), move || {
                let counter = counter.clone();
                let mut stop = stop_rx.clone();
                async move {
                    if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                        return;
                    }
                    let _ = stop.wait_for(|s| *s).await;
                    if panics {
                        panic!("boom on the way out");
                    }
                }
            });
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(runs.load(Ordering::SeqCst), 2);
            let restarts = || metrics.task_restarts_total.with_label_values(&["api_probes"]).get();
            assert_eq!(restarts(), 1);
            health.stop();
            stop_tx.send_replace(true);
            tokio::time::timeout(Duration::from_secs(1), supervisor)
                .await
                .expect("the supervisor ends with the agent")
                .unwrap();
            tokio::time::sleep(Duration::from_secs(120)).await;
            assert_eq!(runs.load(Ordering::SeqCst), 2, "not restarted (panics: {panics})");
            assert_eq!(restarts(), 1, "not counted (panics: {panics})");
        }
    }
}
