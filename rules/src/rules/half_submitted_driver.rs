//! `half-submitted-driver`: a Spark driver pod that spark-submit gave up on waits forever here.
//!
//! The judgement is [`facts::half_submitted_drivers`] (its documentation says how and why): a
//! driver bound to this node that has waited to start for `half_submitted_grace_seconds`, whose
//! configuration ConfigMap volume the kubelet never set up, or that a newer driver of the same
//! submission replaced. Warning; critical once it has waited `half_submitted_critical_seconds`.
//!
//! The evidence: the pod, how long it has waited, its phase and its containers' waiting reason,
//! the missing ConfigMap and where its volume is not, the kubelet's `FailedMount` Warnings about
//! it (when read), the newer driver (when one started), the exclusive CPUs and the CPU it
//! requests, and the slow pod creates `slow-pod-admission` measures when they are slow enough
//! for it to report them: the usual cause.

use serde_json::{Value, json};

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::facts::HalfSubmitted;
use crate::finding::{Finding, Severity, Subject};
use crate::rules::{RuleGauge, RuleInfo, count_findings};
use crate::settings::Settings;
use crate::snapshot::NodeSnapshot;
use crate::submission::{
    DRIVER_TIMEOUT_KEY, SUBMISSION_TIMEOUT_KEY, client_timeout, creates_are_slow, pod_creates, suggested_timeout_ms,
};
use crate::text::{human_seconds, kubectl_delete, ms};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("half-submitted-driver");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "A Spark driver that spark-submit gave up on waits forever without its ConfigMap",
    severity: Severity::Warning,
    looks_at: "driver pods bound here that wait to start, their kubelet pod directory, their Events, newer drivers of the submission, dry-run pod creates",
    fires_when: "a driver has waited half_submitted_grace_seconds (since bound) and its spark-conf-volume-driver ConfigMap volume never appeared under its kubelet directory, or a newer driver of the same submission (spark-app-selector, or spark-app-name within an hour) started; critical after half_submitted_critical_seconds",
    event_reason: "HalfSubmittedDriver",
    needs: Needs {
        all: &[One(Source::Pods)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it reads driver pods and their Events through the API, and the kubelet's pod volume directories (`pods/<uid>/volumes/<plugin>/<volume>`), laid out the same in old and current kubelet sources",
    ),
    check,
    condition: None,
    gauge: Some(RuleGauge {
        name: "half_submitted_drivers",
        help: "Spark driver pods on this node that spark-submit gave up on and that wait to start without their \
               ConfigMap, or after a newer driver of their submission started (half-submitted-driver findings).",
        value: count_findings,
    }),
    next_judgement: Some(next_judgement),
};

fn event_json(e: &crate::snapshot::PodEvent) -> Value {
    json!({"reason": e.reason, "message": e.message, "count": e.count, "last_at": e.last_at})
}

fn finding(snap: &NodeSnapshot, settings: &Settings, h: &HalfSubmitted<'_>, slow: &Option<Value>) -> Finding {
    let pod = h.pod;
    let node = &snap.node;
    let severity = if h.waited_seconds >= settings.half_submitted_critical_seconds {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let waiting_reason = pod
        .containers
        .iter()
        .find_map(|c| c.waiting_reason.as_deref())
        .unwrap_or(pod.phase.as_str());
    let holds = if h.exclusive_cpus.is_empty() {
        String::new()
    } else {
        format!(", holding exclusive CPUs {}", h.exclusive_cpus)
    };
    let summary = format!(
        "Spark driver {} has waited {} in {waiting_reason}{holds}: {}",
        pod.display(),
        human_seconds(h.waited_seconds),
        h.reason
    );
    let mut remedy = format!(
        "spark-submit gave up on this driver (its pod create outlived the client's timeout) and will not come \
         back for it. Delete it: kubectl nodemedic repair {node} half-submitted (shows the plan), then kubectl \
         nodemedic repair {node} half-submitted --apply --yes (deletes it with its UID as a precondition; needs pod \
         delete, components/pod-repairs); or by hand, first check it is still the same pod (UID {}): kubectl get \
         pod -n {} {} -o jsonpath='{{.metadata.uid}}', then {}",
        pod.uid,
        pod.namespace,
        pod.name,
        kubectl_delete(pod)
    );
    if h.sibling.is_none() {
        remedy.push_str(
            ". No newer driver of its submission has started: submit the application again once the timeouts are raised",
        );
    }
    match slow {
        Some(s) => remedy.push_str(&format!(
            ". Raise Spark's client timeouts above the pod creation time measured here ({} s at most): --conf \
             {SUBMISSION_TIMEOUT_KEY}={ms} --conf {DRIVER_TIMEOUT_KEY}={ms} (slow-pod-admission says what makes \
             creates slow)",
            s["max_seconds"],
            ms = s["suggested_timeout_ms"]
        )),
        None => remedy.push_str(&format!(
            ". Raise Spark's client timeouts above the time a pod create takes when the driver was submitted \
             (--conf {SUBMISSION_TIMEOUT_KEY}=... --conf {DRIVER_TIMEOUT_KEY}=..., milliseconds; 10000 by \
             default): nodemedic's dry-run probe (slow-pod-admission) measures it"
        )),
    }
    let cpu_request_millis: u64 = pod.containers.iter().filter_map(|c| c.cpu_request_millis).sum();
    Finding::new(ID, severity, Subject::pod(pod), summary, remedy)
        .with("pod", pod.display())
        .with("pod_uid", pod.uid.clone())
        .with("phase", pod.phase.clone())
        .with("waiting_reason", waiting_reason)
        .with("waited_seconds", h.waited_seconds)
        .with("created_at", pod.created_at)
        .with("scheduled_at", pod.scheduled_at)
        .with("app_id", pod.spark_app())
        .with("app_name", pod.label(crate::spark::APP_NAME))
        .with("config_map", h.conf_volume.map(|v| v.config_map.clone()))
        .with("conf_volume", h.conf_volume.map(|v| v.volume.clone()))
        .with("missing_volume_path", h.missing_volume_path)
        .with(
            "mount_events",
            h.mount_events.iter().map(|e| event_json(e)).collect::<Vec<_>>(),
        )
        .with(
            "newer_driver",
            h.sibling.as_ref().map(|s| {
                json!({
                    "pod": s.pod.display(),
                    "uid": s.pod.uid,
                    "node": s.pod.node_name,
                    "phase": s.pod.phase,
                    "created_at": s.pod.created_at,
                    "tie": s.tie,
                })
            }),
        )
        .with("qos_class", pod.qos_class.clone())
        .with("cpu_request_millis", cpu_request_millis)
        .with(
            "exclusive_cpus",
            (!h.exclusive_cpus.is_empty()).then(|| h.exclusive_cpus.to_string()),
        )
        .with("slow_pod_admission", slow.clone())
        .with("critical_after_seconds", settings.half_submitted_critical_seconds)
}

/// When this rule's judgement changes by the clock alone: a driver waiting to start becomes a
/// finding once it has waited `half_submitted_grace_seconds`, and critical once it has waited
/// `half_submitted_critical_seconds`, though nothing on the host changes meanwhile. Seconds
/// until the nearest of those still ahead.
pub fn next_judgement(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    crate::facts::waiting_drivers(snap)
        .flat_map(|(_, waited)| {
            // Times are whole seconds: a second more makes sure the time has passed.
            [
                settings.half_submitted_grace_seconds,
                settings.half_submitted_critical_seconds,
            ]
            .map(|at| (at - waited) as f64 + 1.0)
        })
        .filter(|left| *left > 0.0)
        .min_by(f64::total_cmp)
}

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, settings: &Settings) -> Vec<Finding> {
    let found = &facts.half_submitted;
    if found.is_empty() {
        return vec![];
    }
    // The creates slow-pod-admission would report, as evidence of the cause.
    let slow = pod_creates(snap, settings).and_then(|c| {
        let timeout = client_timeout(snap, settings);
        creates_are_slow(&c, &timeout).then(|| {
            json!({
                "median_seconds": ms(c.median),
                "max_seconds": ms(c.max),
                "samples": c.samples.len(),
                "spark_timeout_seconds": timeout.seconds,
                "suggested_timeout_ms": suggested_timeout_ms(c.max),
            })
        })
    });
    found.iter().map(|h| finding(snap, settings, h, &slow)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{NOW, SnapshotBuilder, probe_ok, spark_driver, warning_event};
    use crate::snapshot::{ConfMount, ConfVolume, PodInfo};

    const VOLUME_DIR: &str = "/var/lib/kubelet/pods/d1/volumes/kubernetes.io~configmap/spark-conf-volume-driver";

    /// A driver bound to node-a, created and bound `waited` seconds ago, waiting in
    /// ContainerCreating, with its conf volume in the spec.
    fn waiting_driver(uid: &str, app: &str, waited: i64) -> PodInfo {
        let mut d = spark_driver(uid, app, "etl", "Pending");
        d.created_at = Some(NOW - waited);
        d.scheduled_at = Some(NOW - waited);
        d.containers[0].waiting_reason = Some("ContainerCreating".into());
        d.conf_volume = Some(ConfVolume {
            volume: "spark-conf-volume-driver".into(),
            config_map: format!("spark-drv-{uid}-conf-map"),
        });
        d
    }

    fn node(pods: &[PodInfo], mount: Option<ConfMount>) -> SnapshotBuilder {
        let b = SnapshotBuilder::spark_node(pods);
        match mount {
            Some(m) => b.with_conf_mount("d1", m),
            None => b,
        }
    }

    fn missing() -> Option<ConfMount> {
        Some(ConfMount::Missing {
            path: VOLUME_DIR.into(),
        })
    }

    #[test]
    fn a_driver_whose_config_map_never_came() {
        let s = Settings::default();
        let d = waiting_driver("d1", "spark-a", 600);
        let f = crate::rules::testkit::judged(check, &node(std::slice::from_ref(&d), missing()).build(), &s);
        assert_eq!(f.len(), 1, "{f:#?}");
        let f = &f[0];
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.subject.uid.as_deref(), Some("d1"));
        assert_eq!(
            f.summary,
            "Spark driver spark-jobs/etl-driver has waited 10m in ContainerCreating: its ConfigMap \
             spark-drv-d1-conf-map never came: volume spark-conf-volume-driver is not set up on this node"
        );
        assert_eq!(f.evidence["waited_seconds"], 600);
        assert_eq!(f.evidence["config_map"], "spark-drv-d1-conf-map");
        assert_eq!(f.evidence["missing_volume_path"], VOLUME_DIR);
        assert_eq!(f.evidence["waiting_reason"], "ContainerCreating");
        assert!(f.evidence.get("newer_driver").is_none());
        assert!(f.evidence.get("slow_pod_admission").is_none());
        for needle in [
            "kubectl nodemedic repair node-a half-submitted (shows the plan)",
            "first check it is still the same pod (UID d1)",
            "kubectl delete pod -n spark-jobs etl-driver",
            "submit the application again once the timeouts are raised",
            "nodemedic's dry-run probe (slow-pod-admission) measures it",
        ] {
            assert!(f.remedy.contains(needle), "{needle}: {}", f.remedy);
        }
        // Critical once it waited the critical time.
        let d = waiting_driver("d1", "spark-a", 1800);
        let f = crate::rules::testkit::judged(check, &node(&[d], missing()).build(), &s);
        assert_eq!(f[0].severity, Severity::Critical);
    }

    #[test]
    fn nothing_before_the_grace_or_without_evidence() {
        let s = Settings::default();
        // Too young.
        let young = waiting_driver("d1", "spark-a", 299);
        assert!(crate::rules::testkit::judged(check, &node(&[young], missing()).build(), &s).is_empty());
        // Mounted, no pod directory, or unknown: the volume is not the evidence.
        for mount in [
            Some(ConfMount::Mounted {
                path: VOLUME_DIR.into(),
            }),
            Some(ConfMount::NoPodDir {
                path: "/var/lib/kubelet/pods/d1".into(),
            }),
            Some(ConfMount::Unknown {
                reason: "permission denied".into(),
            }),
            None,
        ] {
            let d = waiting_driver("d1", "spark-a", 3600);
            assert!(
                crate::rules::testkit::judged(check, &node(&[d], mount.clone()).build(), &s).is_empty(),
                "{mount:?}"
            );
        }
        // A driver without a conf volume in its spec is not judged by the volume.
        let mut d = waiting_driver("d1", "spark-a", 3600);
        d.conf_volume = None;
        assert!(crate::rules::testkit::judged(check, &node(&[d], missing()).build(), &s).is_empty());
        // Running, being deleted, or bound to another node: not waiting here.
        let mut running = waiting_driver("d1", "spark-a", 3600);
        running.phase = "Running".into();
        running.containers[0].state = Some("running".into());
        let mut deleting = waiting_driver("d1", "spark-a", 3600);
        deleting.deleting = true;
        let mut elsewhere = waiting_driver("d1", "spark-a", 3600);
        elsewhere.node_name = Some("node-b".into());
        for p in [running, deleting, elsewhere] {
            assert!(crate::rules::testkit::judged(check, &node(&[p], missing()).build(), &s).is_empty());
        }
        // No time to measure from.
        let mut timeless = waiting_driver("d1", "spark-a", 3600);
        timeless.created_at = None;
        timeless.scheduled_at = None;
        assert!(crate::rules::testkit::judged(check, &node(&[timeless], missing()).build(), &s).is_empty());
        // The grace counts from binding, not creation (a pod that waited for a scheduler).
        let mut late = waiting_driver("d1", "spark-a", 3600);
        late.scheduled_at = Some(NOW - 60);
        assert!(crate::rules::testkit::judged(check, &node(&[late], missing()).build(), &s).is_empty());
    }

    #[test]
    fn a_newer_driver_of_the_submission_that_started() {
        let s = Settings::default();
        let old = waiting_driver("d1", "spark-a", 900);
        // Resubmitted ten minutes later: a new app id, the same app name; it runs elsewhere.
        let mut newer = spark_driver("d2", "spark-b", "etl", "Running");
        newer.created_at = Some(NOW - 300);
        newer.node_name = Some("node-b".into());
        let snap = node(std::slice::from_ref(&old), None)
            .with_app_drivers("spark-a", &[old.clone(), newer.clone()])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &s);
        assert_eq!(f.len(), 1, "the sibling alone is evidence: {f:#?}");
        assert_eq!(f[0].evidence["newer_driver"]["pod"], "spark-jobs/etl-driver");
        assert_eq!(f[0].evidence["newer_driver"]["uid"], "d2");
        assert_eq!(f[0].evidence["newer_driver"]["tie"], "spark-app-name");
        assert!(
            f[0].summary.ends_with(
                "a newer driver of the same submission, spark-jobs/etl-driver (same spark-app-name), did start"
            ),
            "{}",
            f[0].summary
        );
        assert!(!f[0].remedy.contains("submit the application again"), "{}", f[0].remedy);
        // Both pieces of evidence.
        let snap = node(std::slice::from_ref(&old), missing())
            .with_app_drivers("spark-a", &[old.clone(), newer.clone()])
            .build();
        assert!(
            crate::rules::testkit::judged(check, &snap, &s)[0]
                .summary
                .contains("never came (volume spark-conf-volume-driver is not set up on this node) and a newer driver")
        );

        // Not siblings: an older driver, one still pending, another namespace, another name,
        // the same name more than an hour later.
        let mut cases = vec![];
        let mut older = newer.clone();
        older.created_at = Some(NOW - 1000);
        cases.push(older);
        let mut pending = newer.clone();
        pending.phase = "Pending".into();
        pending.containers[0].state = Some("waiting".into());
        cases.push(pending);
        let mut other_ns = newer.clone();
        other_ns.namespace = "other".into();
        cases.push(other_ns);
        let mut other_name = newer.clone();
        other_name.labels.insert("spark-app-name".into(), "ml".into());
        cases.push(other_name);
        let mut much_later = newer.clone();
        much_later.created_at = Some(NOW - 900 + crate::facts::SIBLING_WINDOW_SECONDS + 1);
        cases.push(much_later);
        for c in cases {
            let snap = node(std::slice::from_ref(&old), None)
                .with_app_drivers("spark-a", &[old.clone(), c.clone()])
                .build();
            assert!(crate::rules::testkit::judged(check, &snap, &s).is_empty(), "{c:#?}");
        }
        // The same app id ties at any distance; a finished sibling did start.
        let mut same_app = newer.clone();
        same_app.labels.insert("spark-app-selector".into(), "spark-a".into());
        same_app.labels.insert("spark-app-name".into(), "renamed".into());
        same_app.phase = "Succeeded".into();
        same_app.created_at = Some(NOW - 10);
        let snap = node(std::slice::from_ref(&old), None)
            .with_app_drivers("spark-a", &[old.clone(), same_app])
            .build();
        assert_eq!(
            crate::rules::testkit::judged(check, &snap, &s)[0].evidence["newer_driver"]["tie"],
            "spark-app-selector"
        );
    }

    #[test]
    fn evidence_of_events_cpus_and_slow_creates() {
        let s = Settings::default();
        let d = waiting_driver("d1", "spark-a", 600);
        let snap = node(std::slice::from_ref(&d), missing())
            .with_pod_events(
                "d1",
                vec![
                    warning_event(
                        "FailedMount",
                        "MountVolume.SetUp failed for volume \"spark-conf-volume-driver\" : configmap \"spark-drv-d1-conf-map\" not found",
                        12,
                        30,
                    ),
                    warning_event("FailedMount", "MountVolume.SetUp failed for volume \"data\" : timed out", 1, 30),
                    warning_event("FailedScheduling", "spark-conf-volume-driver", 1, 30),
                ],
            )
            .with_api(vec![probe_ok("create_dry_run", 30, 30.2), probe_ok("create_dry_run", 60, 29.8)])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &s).remove(0);
        let events = f.evidence["mount_events"].as_array().unwrap();
        assert_eq!(events.len(), 1, "{events:#?}");
        assert_eq!(events[0]["count"], 12);
        assert_eq!(f.evidence["slow_pod_admission"]["max_seconds"], 30.2);
        assert_eq!(f.evidence["slow_pod_admission"]["suggested_timeout_ms"], 61000);
        assert!(
            f.remedy.contains(
                "(30.2 s at most): --conf spark.kubernetes.submission.requestTimeout=61000 --conf \
                 spark.kubernetes.driver.requestTimeout=61000"
            ),
            "{}",
            f.remedy
        );
        // Fast creates are no evidence.
        let snap = node(std::slice::from_ref(&d), missing())
            .with_api(vec![probe_ok("create_dry_run", 30, 0.2)])
            .build();
        assert!(
            crate::rules::testkit::judged(check, &snap, &s)[0]
                .evidence
                .get("slow_pod_admission")
                .is_none()
        );

        // Exclusive CPUs held since admission.
        let snap = SnapshotBuilder::static_node("0-1", &[("d1", "spark-kubernetes-driver", "2-3")])
            .with_pod_list(std::slice::from_ref(&d))
            .with_conf_mount(
                "d1",
                ConfMount::Missing {
                    path: VOLUME_DIR.into(),
                },
            )
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &s).remove(0);
        assert_eq!(f.evidence["exclusive_cpus"], "2-3");
        assert!(
            f.summary.contains("in ContainerCreating, holding exclusive CPUs 2-3:"),
            "{}",
            f.summary
        );
    }
}
