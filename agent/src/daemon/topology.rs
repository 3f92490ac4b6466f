//! Publishing this node's NodeResourceTopology (on when configured): the cycles hand the
//! desired object over a watch channel, so a slow or failing API server never holds a scan up,
//! and only the newest object is ever written. Every [`crate::nrt::RECHECK`] the object is read
//! again, so one deleted or changed behind the agent's back is found.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::nrt::{Outcome, Publisher};

/// The first pause after a failed write; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(5);
const MAX_RETRY: Duration = Duration::from_secs(300);

/// Writes each new desired object (retrying a failed write with a growing pause, or sooner when
/// a newer object arrives).
pub async fn run(client: kube::Client, mut desired: watch::Receiver<Option<Value>>, metrics: Metrics) {
    let mut publisher = Publisher::new(client);
    let mut retry = FIRST_RETRY;
    loop {
        let object = desired.borrow_and_update().clone();
        if let Some(object) = object {
            let (outcome, why) = publisher.publish(&object).await;
            metrics
                .node_resource_topology_writes_total
                .with_label_values(&[outcome.as_str()])
                .inc();
            match (outcome, why) {
                (Outcome::Failed, why) => {
                    tracing::warn!(
                        error = why.unwrap_or_default(),
                        retry_seconds = retry.as_secs(),
                        "NodeResourceTopology not written"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(retry) => {}
                        changed = desired.changed() => if changed.is_err() { return },
                    }
                    retry = (retry * 2).min(MAX_RETRY);
                    continue;
                }
                (Outcome::Conflict, Some(why)) => tracing::warn!("{why}"),
                (Outcome::Created | Outcome::Updated, _) => {
                    tracing::info!(outcome = outcome.as_str(), "NodeResourceTopology written")
                }
                _ => {}
            }
            retry = FIRST_RETRY;
        }
        // A new object, or time to make sure the one written is still there as written.
        tokio::select! {
            changed = desired.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(crate::nrt::RECHECK) => {}
        }
    }
}
