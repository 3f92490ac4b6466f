//! `stale-dra-claim`: a ResourceClaim stays prepared on this node (in the kubelet's
//! `dra_manager_state`, or in a configured DRA driver's own checkpoint) although every pod it
//! was prepared for is gone.
//!
//! A prepared claim holds its devices in the driver: the next pod that gets the same device
//! stays in `ContainerCreating` with `requested device gpu-N is already allocated to different
//! claim <uid>` (NVIDIA's GPU driver, dra-driver-nvidia-gpu #1278). A claim a driver's
//! checkpoint keeps while the kubelet's file no longer holds it will never be unprepared: the
//! kubelet only asks drivers to unprepare the claims it knows. Liveness of the claim's pods is
//! the CPU rules' ([`crate::facts::judge_pod`]).
//!
//! The remedy is the least invasive that releases the claim: delete the ResourceClaim when
//! nothing needs it, then the driver (its plugin restarted, or its errors fixed). A kubelet
//! restart releases nothing (docs/kubelet.md, "What a kubelet restart clears").

use serde_json::json;

use crate::coverage::{Comparison, KubeletVersions, Need, Need::One, Needs, Source};
use crate::facts::ClaimSource;
use crate::finding::{Finding, Severity, Subject, SubjectKind};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{ClaimObject, NodeSnapshot};
use crate::text::{LISTED, dra_claim_remedy};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("stale-dra-claim");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "A ResourceClaim stays prepared on the node after its pods are gone",
    severity: Severity::Warning,
    looks_at: "dra_manager_state, configured DRA driver checkpoints, pods on the node",
    fires_when: "every pod a prepared claim was prepared for is gone, or a driver keeps a claim the kubelet's file no longer holds",
    event_reason: "StaleDRAClaim",
    needs: Needs {
        all: &[One(Source::DraState), One(Source::DraDrivers), Need::LIVENESS],
        about: &[Source::DraState, Source::DraDrivers],
        partial: &[Source::DraDrivers],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[
        Comparison {
            what: "the claims of `dra_manager_state` against the live pods they were prepared for",
            from: "1.27, the first DRA checkpoint (the 1.31 envelope from #126303)",
            older: "no kubelet before 1.27 writes the file (1.26 keeps its claims in memory only): nothing to judge",
            unknown: "every layout is read; the version is not used",
        },
        Comparison::PODRESOURCES_LIVENESS,
    ]),
    check,
    condition: None,
    gauge: None,
    next_judgement: Some(crate::facts::grace_turn),
};

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    facts
        .stale_claims
        .iter()
        .map(|c| {
            let path = c.source.path(snap);
            let subject = match c.claim.as_deref().and_then(|c| c.split_once('/')) {
                Some((ns, name)) => Subject {
                    kind: SubjectKind::ResourceClaim,
                    namespace: Some(ns.to_string()),
                    name: Some(name.to_string()),
                    uid: Some(c.claim_uid.clone()),
                    container: None,
                },
                None => Subject {
                    kind: SubjectKind::ResourceClaim,
                    uid: Some(c.claim_uid.clone()),
                    ..Default::default()
                },
            };
            let whose = match &c.claim {
                Some(name) => format!("ResourceClaim {name} ({})", c.claim_uid),
                None => format!("ResourceClaim {}", c.claim_uid),
            };
            let devices = match c.devices.len() {
                0 => "no device recorded".to_string(),
                n if n > LISTED => format!("{} devices ({}, ...)", n, c.devices[..LISTED].join(", ")),
                _ => c.devices.join(", "),
            };
            let holder = match c.source {
                ClaimSource::Kubelet => "the kubelet".to_string(),
                ClaimSource::Driver(format, _) => format!("DRA driver {}", format.driver()),
            };
            let state = c.state.as_deref().map(|s| format!(" ({s})")).unwrap_or_default();
            let mut summary = format!(
                "{whose} is still prepared by {holder}{state} in {path}, holding {devices}, but its pods are gone: {}",
                c.reason
            );
            if let Some(said) = c.object_said() {
                summary.push_str(&format!("; {said}"));
            }
            // Deleting the ResourceClaim is advice only while it may still be this claim's.
            let deletable = match &c.object {
                Some(ClaimObject::Gone) => None,
                Some(ClaimObject::Exists { .. }) if !c.object_exists() => None,
                _ => c.claim.as_deref(),
            };
            let mut remedy = dra_claim_remedy(&snap.node, &path, c.source.driver(), deletable);
            remedy.push_str(&match c.source {
                ClaimSource::Kubelet => format!(
                    ". A kubelet restart does not release it: the kubelet restores the claim from {path} and \
                     removes it only once the driver's NodeUnprepareResources succeeds"
                ),
                ClaimSource::Driver(..) => ". Restarting the kubelet does not release it either".to_string(),
            });
            Finding::new(ID, Severity::Warning, subject, summary, remedy)
                .with("resource_claim", c.object.as_ref().map(|o| json!(o)))
                .with("claim_uid", c.claim_uid.as_str())
                .with("claim", c.claim.clone())
                .with(
                    "source",
                    match c.source {
                        ClaimSource::Kubelet => "kubelet".to_string(),
                        ClaimSource::Driver(format, _) => format.name().to_string(),
                    },
                )
                .with("state", c.state.clone())
                .with("pod_uids", json!(c.pod_uids))
                .with("devices", json!(c.devices))
                .with("reason", c.reason.clone())
                .with("liveness_source", snap.pods.source.as_str())
                .with("path", path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managers::drivers::DriverClaim;
    use crate::rules::testkit::{SnapshotBuilder, dra_claim, pod};

    fn driver_claim(uid: &str, pods: &[&str], state: &str) -> DriverClaim {
        DriverClaim {
            claim_uid: uid.into(),
            namespace: Some("spark".into()),
            claim_name: Some(format!("claim-{uid}")),
            state: state.into(),
            pod_uids: pods.iter().map(|p| p.to_string()).collect(),
            devices: vec!["gpu-3".into()],
        }
    }

    #[test]
    fn kubelet_claims_whose_every_pod_is_gone() {
        let snap = SnapshotBuilder::static_node("0-7", &[])
            .with_dra_claims(vec![
                dra_claim(
                    "c-live",
                    "spark/exec-1-gpu",
                    &["live", "gone"],
                    &["gpu.nvidia.com/node-a/gpu-0"],
                ),
                dra_claim(
                    "c-gone",
                    "spark/exec-2-gpu",
                    &["gone", "done"],
                    &["gpu.nvidia.com/node-a/gpu-1"],
                ),
            ])
            .with_pod_list(&[
                pod("live", "exec-1", "Running", &[("exec", "c1")]),
                pod("done", "exec-3", "Failed", &[("exec", "c3")]),
            ])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].evidence["claim_uid"], "c-gone");
        assert_eq!(f[0].evidence["source"], "kubelet");
        assert_eq!(f[0].subject.kind, SubjectKind::ResourceClaim);
        assert_eq!(f[0].subject.display(), "spark/exec-2-gpu");
        assert_eq!(f[0].evidence["devices"], json!(["gpu.nvidia.com/node-a/gpu-1"]));
        assert!(
            f[0].summary
                .contains("is still prepared by the kubelet in /var/lib/kubelet/dra_manager_state")
        );
        assert!(f[0].summary.contains("phase Failed"), "{}", f[0].summary);
        // The least invasive first: the claim object, then the driver; a kubelet restart is
        // said not to help.
        let remedy = &f[0].remedy;
        assert!(
            remedy.starts_with("if the ResourceClaim still exists and nothing needs it, delete it (kubectl delete resourceclaim -n spark exec-2-gpu)"),
            "{remedy}"
        );
        assert!(
            remedy.ends_with(
                "A kubelet restart does not release it: the kubelet restores the claim from \
                 /var/lib/kubelet/dra_manager_state and removes it only once the driver's NodeUnprepareResources \
                 succeeds"
            ),
            "{remedy}"
        );
    }

    #[test]
    fn driver_claims_by_their_pods_or_by_the_kubelets_file() {
        let snap = SnapshotBuilder::static_node("0-7", &[])
            .with_dra_claims(vec![dra_claim(
                "c-known",
                "spark/a",
                &["live"],
                &["gpu.nvidia.com/node-a/gpu-0"],
            )])
            .with_driver_claims(vec![
                driver_claim("c-known", &[], "PrepareCompleted"),
                driver_claim("c-forgotten", &[], "PrepareCompleted"),
                driver_claim("c-gone-pod", &["gone"], "PrepareStarted"),
                driver_claim("c-live-pod", &["live"], "PrepareCompleted"),
            ])
            .with_pod_list(&[pod("live", "exec-1", "Running", &[("exec", "c1")])])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        let got: Vec<(&str, &str)> = f
            .iter()
            .map(|f| {
                (
                    f.evidence["claim_uid"].as_str().unwrap(),
                    f.evidence["source"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, [("c-forgotten", "nvidia-gpu"), ("c-gone-pod", "nvidia-gpu")]);
        assert!(
            f[0].summary
                .contains("the kubelet's /var/lib/kubelet/dra_manager_state holds no claim c-forgotten"),
            "{}",
            f[0].summary
        );
        assert!(
            f[1].summary.contains("DRA driver gpu.nvidia.com (PrepareStarted)"),
            "{}",
            f[1].summary
        );
        assert!(
            f[1].remedy.contains("kubectl delete resourceclaim")
                && f[1].remedy.find("kubectl delete resourceclaim")
                    < f[1].remedy.find("restart the driver's kubelet plugin pod")
                && f[1]
                    .remedy
                    .contains("the kubelet asks gpu.nvidia.com to unprepare only the claims it holds itself")
                && f[1]
                    .remedy
                    .ends_with("Restarting the kubelet does not release it either"),
            "{}",
            f[1].remedy
        );

        // The API server says c-known's ResourceClaim is gone and c-gone-pod's still exists: a
        // claim the kubelet holds stays the kubelet's to judge (it holds c-known for a live pod).
        let mut asked = snap.clone();
        asked
            .api
            .lookups
            .resource_claims
            .insert("spark/claim-c-known".into(), ClaimObject::Gone);
        asked.api.lookups.resource_claims.insert(
            "spark/claim-c-gone-pod".into(),
            ClaimObject::Exists {
                uid: "c-gone-pod".into(),
            },
        );
        let f = crate::rules::testkit::judged(check, &asked, &Settings::default());
        let got: Vec<&str> = f.iter().map(|f| f.evidence["claim_uid"].as_str().unwrap()).collect();
        assert_eq!(got, ["c-forgotten", "c-gone-pod"]);
        let gone_pod = &f[1];
        assert!(
            gone_pod
                .summary
                .ends_with("its ResourceClaim spark/claim-c-gone-pod still exists"),
            "{}",
            gone_pod.summary
        );
        assert!(
            gone_pod
                .remedy
                .contains("kubectl delete resourceclaim -n spark claim-c-gone-pod")
        );
        assert_eq!(gone_pod.evidence["resource_claim"]["state"], "exists");

        // Without the kubelet's file a claim with no pod cannot be judged by it, only by its
        // ResourceClaim: gone (or recreated under the name) makes it stale, not asked leaves it.
        let mut snap = snap;
        snap.host.managers.dra = crate::snapshot::Observed::Missing {
            path: "/var/lib/kubelet/dra_manager_state".into(),
        };
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].evidence["claim_uid"], "c-gone-pod");
        snap.api
            .lookups
            .resource_claims
            .insert("spark/claim-c-known".into(), ClaimObject::Gone);
        snap.api.lookups.resource_claims.insert(
            "spark/claim-c-forgotten".into(),
            ClaimObject::Exists {
                uid: "another-uid".into(),
            },
        );
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        let got: Vec<&str> = f.iter().map(|f| f.evidence["claim_uid"].as_str().unwrap()).collect();
        assert_eq!(got, ["c-known", "c-forgotten", "c-gone-pod"]);
        assert!(
            f[0].summary.contains("its ResourceClaim spark/claim-c-known is gone"),
            "{}",
            f[0].summary
        );
        assert!(!f[0].remedy.contains("kubectl delete resourceclaim"), "{}", f[0].remedy);
        assert!(
            f[1].summary.contains("is another object now (UID another-uid)"),
            "{}",
            f[1].summary
        );
        assert!(
            !f[1].remedy.contains("kubectl delete resourceclaim"),
            "a new claim of the name is not to delete"
        );
    }
}
