//! What the pod repairs ask of the API server and send it: the snapshot a plan is judged from
//! (through the scan's own assembler), the fresh one judged again right before deleting, and
//! the deletions, each with the pod's UID as a precondition.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client};
use nodemedic_rules::snapshot::{DriverLookup, NodeSnapshot, PodSource};

use super::plan::{PodCandidate, PodPlan};
use crate::host::HostPaths;
use crate::kube_api::{self, ApiDirectory};
use crate::repair::audit::{ActionRecord, ActionResult, Audit, RateLimiter, now_unix};
use crate::scan::{self, Pods};

/// All driver lookups of one judgement together.
const LOOKUPS_TIMEOUT: Duration = Duration::from_secs(30);

/// This node's pods and their drivers from the API, through the scan's own assembler: with
/// `host`, the host is read too (local dir sizes, the CPU manager checkpoint), without it the
/// snapshot holds only the pods and the driver lookups.
pub async fn api_snapshot(
    api: &kube_api::Connection,
    node: &str,
    host: Option<&HostPaths>,
    local_dir_roots: &[String],
) -> Result<NodeSnapshot, scan::ScanError> {
    let pods = Pods::Api {
        api: Box::new(api.clone()),
        node: node.to_string(),
        fallback: false,
    };
    let opts = scan::Options {
        host: crate::collect::HostOptions {
            node: Some(node.to_string()),
            local_dir_roots: local_dir_roots.to_vec(),
            ..Default::default()
        },
        host_reads: if host.is_some() {
            scan::HostReads::Inline
        } else {
            scan::HostReads::PodsOnly
        },
        lookups_timeout: Some(LOOKUPS_TIMEOUT),
        ..Default::default()
    };
    let root = HostPaths::new("/", None);
    let scanned = scan::snapshot::<ApiDirectory>(host.unwrap_or(&root), pods, None, &opts).await?;
    Ok(scanned.snapshot)
}

/// `base` with this node's pods listed again and the drivers of `executors` looked up again
/// (uncached), for the judgement right before deleting. A driver found only through an earlier
/// lookup (a client-mode driver whose IP now leads nowhere) keeps the earlier verdict.
pub async fn refresh_snapshot(
    client: &Client,
    base: &NodeSnapshot,
    executors: &BTreeSet<String>,
) -> Result<NodeSnapshot, kube_api::Error> {
    let pods = kube_api::node_pods(client, &base.node).await?;
    let directory = ApiDirectory::new(client.clone());
    let lookups = async {
        let mut drivers = BTreeMap::new();
        for p in pods.iter().filter(|p| executors.contains(&p.uid)) {
            let mut lookup = crate::spark::resolve_driver(&directory, p).await;
            if matches!(lookup, DriverLookup::External { .. }) {
                if let Some(before @ (DriverLookup::Gone { .. } | DriverLookup::Replaced { .. })) =
                    base.api.lookups.drivers.get(&p.uid)
                {
                    lookup = before.clone();
                }
            }
            drivers.insert(p.uid.clone(), lookup);
        }
        drivers
    };
    let drivers = tokio::time::timeout(LOOKUPS_TIMEOUT, lookups)
        .await
        .map_err(|_| kube_api::Error::Timeout {
            verb: "GET",
            resource: "the executors' driver pods".into(),
            seconds: LOOKUPS_TIMEOUT.as_secs(),
        })?;
    let mut fresh = base.clone();
    fresh.taken_at = now_unix();
    fresh.pods.source = PodSource::Api;
    fresh.pods.bound = pods;
    fresh.api.lookups.drivers = drivers;
    Ok(fresh)
}

/// Deletes `pod` only if it still has the planned UID. `Skipped` when the name now belongs to
/// another pod (409) or is gone (404).
pub async fn delete_pod(client: &Client, pod: &PodCandidate) -> (ActionResult, Option<String>) {
    // The deleted pod the server returns is decoded as the lean `PodObject`, as the watch's are.
    let api: Api<crate::collect::pods::PodObject> = Api::namespaced(client.clone(), &pod.namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&pod.name, &params).await {
        Ok(_) => (ActionResult::Applied, None),
        Err(kube::Error::Api(s)) if s.code == 409 => (
            ActionResult::Skipped,
            Some(format!(
                "the pod named {} is not the one judged (UID precondition failed: {}): a pod recreated under \
                 the same name is never touched",
                pod.display(),
                s.message
            )),
        ),
        Err(kube::Error::Api(s)) if s.code == 404 => (ActionResult::Skipped, Some("the pod is already gone".into())),
        Err(e) => (ActionResult::Failed, Some(format!("DELETE pod {}: {e}", pod.display()))),
    }
}

/// Deletes the plan's pods in order (each with its UID as a precondition), logging each and
/// recording an Event on the pod. With a limiter, each DELETE sent takes a unit; once none is
/// left the rest waits for a later call.
pub async fn apply_pod_plan(
    client: &Client,
    plan: &PodPlan,
    audit: &Audit,
    mut limiter: Option<&mut RateLimiter>,
) -> Vec<ActionRecord> {
    let mut out = vec![];
    for (i, c) in plan.delete.iter().enumerate() {
        if let Some(lim) = limiter.as_deref_mut() {
            if !lim.try_acquire() {
                tracing::info!(
                    target: "nodemedic::repair",
                    action = plan.action.as_str(),
                    left = plan.delete.len() - i,
                    max_actions_per_hour = lim.max_per_hour(),
                    "repair rate limit reached; the rest waits"
                );
                break;
            }
        }
        let (result, detail) = delete_pod(client, c).await;
        let mut rec = ActionRecord::new(
            plan.action,
            result,
            c.target(),
            c.what(),
            c.why.clone(),
            c.evidence.clone(),
        );
        rec.detail = detail;
        audit.record(&mut rec).await;
        out.push(rec);
    }
    out
}
