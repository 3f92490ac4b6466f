//! `driver-blocked-by-partition`: a replacement Spark driver on this node cannot start, because
//! its volume is still held for the old driver on a node cut off from the API server.
//!
//! The timeline (docs/rules/driver-blocked-by-partition.md, "Cause"): a node stops reaching the
//! API server; about 40 s later the node lifecycle controller marks it `Ready=Unknown` and taints
//! it `node.kubernetes.io/unreachable:NoExecute`; once a pod's toleration of that taint runs out
//! (300 s by default) the taint manager deletes it, and whatever runs the driver (a Job, or
//! spark-operator with a restart policy) creates a new one elsewhere. The old pod stays
//! (`Terminating`, its kubelet cannot confirm), so its ReadWriteOnce volume stays attached to the
//! old node, and the new driver waits in `ContainerCreating` until that node comes back or a
//! person lets the volume go. Nothing tells anyone why.
//!
//! Inputs: this node's pods; the Warning Events of its drivers that wait to start
//! (`ApiLookups::pod_events`); every driver of their applications, wherever it runs
//! (`app_drivers`); and the status of the nodes those run on (`nodes`). A driver here is blocked
//! when it is `Pending` with no container running, one of its Events says a volume cannot be
//! attached or mounted ([`block_of`]), and another unfinished driver of the same application
//! ([`spark::same_application`]: app id, spark-operator run, or the same Job) is bound to another
//! node whose `Ready` condition is `Unknown` or `False`. Without Events or the other node's
//! status (a pods file, `--offline`, an Event that expired) it says nothing; an old node that is
//! `Ready` is a slow detach, not a partition. Critical: the application is down until a person
//! acts. One finding per blocked driver, on that driver.

use serde_json::{Value, json};

use crate::coverage::{KubeletVersions, Need::One, Needs, Source};
use crate::finding::{Finding, Severity, Subject};
use crate::rules::RuleInfo;
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, NodeStatus, PodEvent, PodInfo};
use crate::spark::{self, APP_SELECTOR, alive_drivers};
use crate::text::human_seconds;

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("driver-blocked-by-partition");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "A replacement Spark driver waits for a volume held on a node cut off from the API server",
    severity: Severity::Critical,
    looks_at: "driver pods bound here, their Events, other drivers of the app, their nodes",
    fires_when: "a driver here stays Pending with a FailedAttachVolume (Multi-Attach) or FailedMount (mount timeout) Warning while another unfinished driver of its application (same spark-app-selector, operator run or Job) is on a node whose Ready is Unknown or False",
    event_reason: "DriverBlockedByPartition",
    needs: Needs {
        all: &[One(Source::Pods)],
        about: &[],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::DoNotMatter(
        "it reads driver pods, their Events and their nodes' `Ready` condition through the API; the Events' reasons (`FailedMount`, `FailedAttachVolume` with Multi-Attach) are matched as current releases write them, which is not established for old ones",
    ),
    check,
    condition: None,
    gauge: None,
    next_judgement: None,
};

/// The taint of non-graceful node shutdown: the node's pods are force-deleted and their volumes
/// detached at once (kubernetes `pkg/controller/volume/attachdetach/reconciler`).
const TAINT_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// How a volume keeps a pod from starting, by the Event that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// `FailedAttachVolume` from the attach/detach controller: `Multi-Attach error for volume
    /// "<pv>" Volume is already exclusively attached to one node and can't be attached to
    /// another`, or `... Volume is already used by pod(s) <names>` (kubernetes
    /// `pkg/controller/volume/attachdetach/reconciler/reconciler.go`, `reportMultiAttachError`;
    /// reported once per volume).
    MultiAttach,
    /// `FailedMount` from the kubelet when its wait for the pod's volumes timed out:
    /// `Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data
    /// kube-api-access-x]: timed out waiting for the condition` (`pkg/kubelet/kubelet.go` around
    /// `volumemanager.WaitForAttachAndMount`), or before Kubernetes 1.17 `Unable to mount volumes
    /// for pod "<name>_<ns>(<uid>)": timeout expired waiting for volumes to attach or mount for pod
    /// "<ns>"/"<name>". list of unmounted volumes=[data]. list of unattached volumes=[...]`.
    /// Kubelets since 1.28 no longer report a timed-out wait as an Event.
    MountTimeout,
}

impl Block {
    fn as_str(self) -> &'static str {
        match self {
            Block::MultiAttach => "multi-attach",
            Block::MountTimeout => "mount-timeout",
        }
    }
}

/// What a timed-out wait for volumes says, across kubelet versions.
const TIMEOUTS: &[&str] = &[
    "timed out waiting for the condition",
    "timeout expired waiting for volumes",
    "context deadline exceeded",
];

/// The first `volume "<name>"` of a message.
fn quoted_volume(message: &str) -> Option<String> {
    let rest = &message[message.find("volume \"")? + "volume \"".len()..];
    let name = &rest[..rest.find('"')?];
    (!name.is_empty()).then(|| name.to_string())
}

/// The names in Go's `%v` of a string list right after `prefix`: `unmounted volumes=[a b]`.
fn listed_after(message: &str, prefix: &str) -> Vec<String> {
    let Some(at) = message.find(prefix) else { return vec![] };
    let rest = &message[at + prefix.len()..];
    let Some(end) = rest.find(']') else { return vec![] };
    rest[..end].split_whitespace().map(str::to_string).collect()
}

/// The block an Event reports and the volumes it names, when it reports one.
fn block_of(event: &PodEvent) -> Option<(Block, Vec<String>)> {
    if event.type_ != "Warning" {
        return None;
    }
    let m = event.message.as_str();
    match event.reason.as_str() {
        "FailedAttachVolume" if m.contains("Multi-Attach error") => {
            Some((Block::MultiAttach, quoted_volume(m).into_iter().collect()))
        }
        "FailedMount" if TIMEOUTS.iter().any(|t| m.contains(t)) => {
            // `list of unattached/unmounted volumes=[...]` (1.9) ends the same way.
            let volumes = listed_after(m, "unmounted volumes=[");
            (!volumes.is_empty()).then_some((Block::MountTimeout, volumes))
        }
        _ => None,
    }
}

/// An old driver of the application, on a node that is not ready.
struct OldDriver<'a> {
    pod: &'a PodInfo,
    node: &'a NodeStatus,
    matched_by: &'static str,
}

/// The drivers of `blocked`'s application on other nodes whose `Ready` is `Unknown` or `False`,
/// oldest first.
fn old_drivers<'a>(snap: &'a NodeSnapshot, drivers: &[&'a PodInfo], blocked: &PodInfo) -> Vec<OldDriver<'a>> {
    let mut out: Vec<OldDriver> = drivers
        .iter()
        .filter(|d| d.uid != blocked.uid)
        .filter_map(|d| {
            let node_name = d.node_name.as_deref().filter(|n| *n != snap.node)?;
            let node = snap.api.lookups.nodes.get(node_name)?;
            if !matches!(node.ready.as_deref(), Some("Unknown" | "False")) {
                return None;
            }
            let matched_by = spark::same_application(blocked, d)?;
            Some(OldDriver {
                pod: d,
                node,
                matched_by,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        let key = |p: &PodInfo| (p.created_at.is_none(), p.created_at, p.name.clone());
        key(a.pod).cmp(&key(b.pod))
    });
    out
}

/// How the node's readiness reads: `Ready=Unknown, NodeStatusUnknown`.
fn readiness(node: &NodeStatus) -> String {
    let status = node.ready.as_deref().unwrap_or("?");
    match node.ready_reason.as_deref().filter(|r| !r.is_empty()) {
        Some(reason) => format!("Ready={status}, {reason}"),
        None => format!("Ready={status}"),
    }
}

fn remedy(old: &OldDriver) -> String {
    let (node, pod) = (&old.node.name, old.pod);
    let tainted = old.node.no_execute_taints.iter().any(|t| t == TAINT_OUT_OF_SERVICE);
    let first = if tainted {
        format!(
            "Node {node} already carries {TAINT_OUT_OF_SERVICE}: its pods are being force-deleted and the volume \
             detached, so this driver should start shortly; if it does not, check the VolumeAttachment objects \
             (kubectl get volumeattachment) and the CSI driver's attacher"
        )
    } else {
        format!(
            "Wait for node {node} to come back: its kubelet then stops {} and the volume is released and attached \
             here",
            pod.display()
        )
    };
    format!(
        "{first}. Only once {node} is confirmed down (powered off or fenced, checked outside Kubernetes), release the \
         volume now: kubectl taint node {node} {TAINT_OUT_OF_SERVICE}=nodeshutdown:NoExecute (non-graceful node \
         shutdown, GA in Kubernetes 1.28: force-deletes its pods and detaches their volumes at once; remove the taint \
         when the node is back), or kubectl delete pod --force --grace-period=0 -n {} {} (the attach/detach \
         controller then detaches after up to 6 minutes). Never force-delete while {node} may still run the old \
         driver: two drivers would write the same checkpoint and output. nodemedic's driver fencing, when on for \
         the driver, stops it on the cut-off node itself before its toleration runs out \
         (docs/operations/partitions.md)",
        pod.namespace, pod.name
    )
}

pub fn check(snap: &NodeSnapshot, _facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    if snap.api.lookups.pod_events.is_empty() || snap.api.lookups.nodes.is_empty() {
        return vec![];
    }
    let drivers = alive_drivers(snap);
    let mut findings = Vec::new();
    for blocked in snap
        .pods
        .bound
        .iter()
        .filter(|p| crate::spark::driver_waits_to_start(p, &snap.node))
    {
        let Some(events) = snap.api.lookups.pod_events.get(&blocked.uid) else {
            continue;
        };
        let blocks: Vec<(&PodEvent, Block, Vec<String>)> = events
            .iter()
            .filter_map(|e| block_of(e).map(|(b, v)| (e, b, v)))
            .collect();
        // The newest Event that says so is the one reported.
        let Some((event, block, _)) = blocks
            .iter()
            .max_by_key(|(e, _, _)| (e.last_at.or(e.first_at), e.count))
        else {
            continue;
        };
        let olds = old_drivers(snap, &drivers, blocked);
        let Some(old) = olds.first() else { continue };
        let mut volumes: Vec<&str> = Vec::new();
        for v in blocks.iter().flat_map(|(_, _, v)| v) {
            if !volumes.contains(&v.as_str()) {
                volumes.push(v);
            }
        }
        let not_ready_seconds = old.node.ready_since.map(|s| snap.taken_at.saturating_sub(s));
        let waiting_seconds = blocked.created_at.map(|c| snap.taken_at.saturating_sub(c));
        let for_how_long = not_ready_seconds.map_or(String::new(), |s| format!(" for {}", human_seconds(s)));
        let held = match volumes.as_slice() {
            [] => "its volume is".to_string(),
            [one] => format!("volume {one} is"),
            many => format!("volumes {} are", many.join(", ")),
        };
        let summary = format!(
            "Spark driver {} cannot start: {held} still held for the old driver {} on node {}, not ready{for_how_long} ({})",
            blocked.display(),
            old.pod.display(),
            old.node.name,
            readiness(old.node),
        );
        let also: Vec<Value> = olds[1..]
            .iter()
            .map(|o| json!({"pod": o.pod.display(), "uid": o.pod.uid, "node": o.node.name}))
            .collect();
        findings.push(
            Finding::new(ID, Severity::Critical, Subject::pod(blocked), summary, remedy(old))
                .with("app_id", spark::non_empty_label(blocked, APP_SELECTOR))
                .with("matched_by", old.matched_by)
                .with("owner", blocked.controller().map(|o| format!("{}/{}", o.kind, o.name)))
                .with("waiting_seconds", waiting_seconds)
                .with("block", block.as_str())
                .with("volumes", volumes)
                .with("event_reason", event.reason.clone())
                .with("event_message", event.message.clone())
                .with("event_count", event.count)
                .with("event_source", event.source.clone())
                .with("event_last_at", event.last_at)
                .with("old_pod", old.pod.display())
                .with("old_pod_uid", old.pod.uid.clone())
                .with("old_pod_phase", old.pod.phase.clone())
                .with("old_pod_deleting", old.pod.deleting)
                .with("old_node", old.node.name.clone())
                .with("old_node_ready", old.node.ready.clone())
                .with("old_node_ready_reason", old.node.ready_reason.clone())
                .with("old_node_not_ready_seconds", not_ready_seconds)
                .with("old_node_no_execute_taints", old.node.no_execute_taints.clone())
                .with("other_old_drivers", (!also.is_empty()).then_some(also)),
        );
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{NOW, SnapshotBuilder, node_status, spark_driver, warning_event};
    use crate::snapshot::OwnerRef;

    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";
    const PV: &str = "pvc-7f3a9c0e-12d4-4b8a-9f6d-7e2a5c1b8d40";

    fn multi_attach() -> PodEvent {
        warning_event(
            "FailedAttachVolume",
            &format!(
                "Multi-Attach error for volume \"{PV}\" Volume is already exclusively attached to one node and can't be \
                 attached to another"
            ),
            1,
            100,
        )
    }

    fn mount_timeout() -> PodEvent {
        warning_event(
            "FailedMount",
            "Unable to attach or mount volumes: unmounted volumes=[checkpoint], unattached volumes=[checkpoint \
             kube-api-access-7xk2p]: timed out waiting for the condition",
            3,
            20,
        )
    }

    fn mount_timeout_old_kubelet() -> PodEvent {
        warning_event(
            "FailedMount",
            "Unable to mount volumes for pod \"etl-driver-b_spark-jobs(2f7c)\": timeout expired waiting for volumes to \
             attach or mount for pod \"spark-jobs\"/\"etl-driver-b\". list of unmounted volumes=[checkpoint]. list of \
             unattached volumes=[checkpoint default-token-x7k2p]",
            5,
            20,
        )
    }

    fn job() -> OwnerRef {
        OwnerRef {
            kind: "Job".into(),
            name: "etl-hourly".into(),
            uid: "job-uid-1".into(),
            controller: true,
        }
    }

    /// The new driver here (Pending, waiting to create its container, 2 minutes old) and the old
    /// one on worker-2 (Running, being deleted), both of one Job.
    fn pair() -> (PodInfo, PodInfo) {
        let mut new = spark_driver("new", APP, "etl", "Pending");
        new.name = "etl-driver-b".into();
        new.created_at = Some(NOW - 120);
        new.owner_refs.push(job());
        let mut old = spark_driver("old", APP, "etl", "Running");
        old.name = "etl-driver-a".into();
        old.node_name = Some("worker-2".into());
        old.deleting = true;
        old.owner_refs.push(job());
        (new, old)
    }

    fn snapshot(new: &PodInfo, old: &PodInfo, events: Vec<PodEvent>, worker2: NodeStatus) -> NodeSnapshot {
        let mut b = SnapshotBuilder::spark_node(std::slice::from_ref(new));
        if let Some(key) = spark::app_drivers_key(new) {
            b = b.with_app_drivers(&key, &[new.clone(), old.clone()]);
        }
        b.with_pod_events(&new.uid, events).with_node(worker2).build()
    }

    fn unreachable() -> NodeStatus {
        node_status("worker-2", "Unknown", "NodeStatusUnknown", 200)
    }

    #[test]
    fn fires_only_for_a_driver_blocked_by_a_volume_held_on_a_node_that_is_not_ready() {
        let (new, old) = pair();
        let mut finished = old.clone();
        finished.phase = "Failed".into();
        let mut running = new.clone();
        running.phase = "Running".into();
        running.containers[0].state = Some("running".into());
        let mut no_app_id = new.clone();
        no_app_id.labels.remove(APP_SELECTOR);
        let mut old_no_app_id = old.clone();
        old_no_app_id.labels.remove(APP_SELECTOR);
        let mut normal = multi_attach();
        normal.type_ = "Normal".into();
        let other_reasons = vec![
            warning_event("FailedScheduling", "0/3 nodes are available", 1, 10),
            warning_event(
                "FailedMount",
                "MountVolume.SetUp failed for volume \"spark-conf-volume-driver\" : configmap \"etl-conf\" not found",
                4,
                10,
            ),
            warning_event(
                "FailedAttachVolume",
                "AttachVolume.Attach failed for volume \"pvc-1\" : rpc error: code = Internal",
                2,
                10,
            ),
            normal,
        ];
        let ready = node_status("worker-2", "True", "KubeletReady", 3000);
        let not_ready = node_status("worker-2", "False", "KubeletNotReady", 90);
        // (case, the driver here, the old driver, the Events here, worker-2, the block reported)
        type Case = (
            &'static str,
            PodInfo,
            PodInfo,
            Vec<PodEvent>,
            NodeStatus,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "multi-attach",
                new.clone(),
                old.clone(),
                vec![multi_attach()],
                unreachable(),
                Some("multi-attach"),
            ),
            (
                "mount timeout",
                new.clone(),
                old.clone(),
                vec![mount_timeout()],
                unreachable(),
                Some("mount-timeout"),
            ),
            (
                "mount timeout, kubelet before 1.17",
                new.clone(),
                old.clone(),
                vec![mount_timeout_old_kubelet()],
                unreachable(),
                Some("mount-timeout"),
            ),
            (
                "old node Ready=False",
                new.clone(),
                old.clone(),
                vec![multi_attach()],
                not_ready,
                Some("multi-attach"),
            ),
            (
                "old node Ready: a slow detach",
                new.clone(),
                old.clone(),
                vec![multi_attach()],
                ready,
                None,
            ),
            (
                "old driver finished",
                new.clone(),
                finished,
                vec![multi_attach()],
                unreachable(),
                None,
            ),
            ("no events", new.clone(), old.clone(), vec![], unreachable(), None),
            (
                "other reasons",
                new.clone(),
                old.clone(),
                other_reasons,
                unreachable(),
                None,
            ),
            (
                "the driver here runs",
                running,
                old.clone(),
                vec![multi_attach()],
                unreachable(),
                None,
            ),
            (
                "one Job, no spark-app-selector",
                no_app_id,
                old_no_app_id,
                vec![multi_attach()],
                unreachable(),
                Some("multi-attach"),
            ),
        ];
        for (name, new, old, events, worker2, want) in cases {
            let snap = snapshot(&new, &old, events, worker2);
            let found = crate::rules::testkit::judged(check, &snap, &Settings::default());
            assert_eq!(
                found.first().map(|f| f.evidence["block"].as_str().unwrap()),
                want,
                "{name}: {found:#?}"
            );
            assert!(found.len() <= 1, "{name}");
        }
    }

    #[test]
    fn evidence_names_the_old_driver_its_node_and_the_volume() {
        let (new, old) = pair();
        let snap = snapshot(&new, &old, vec![mount_timeout(), multi_attach()], unreachable());
        let f = &crate::rules::testkit::judged(check, &snap, &Settings::default())[0];
        assert_eq!(f.rule, ID);
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.subject.uid.as_deref(), Some("new"));
        let e = &f.evidence;
        assert_eq!(e["old_pod"], "spark-jobs/etl-driver-a");
        assert_eq!(e["old_pod_uid"], "old");
        assert_eq!(e["old_pod_deleting"], true);
        assert_eq!(e["old_node"], "worker-2");
        assert_eq!(e["old_node_ready"], "Unknown");
        assert_eq!(e["old_node_ready_reason"], "NodeStatusUnknown");
        assert_eq!(e["old_node_not_ready_seconds"], 200);
        assert_eq!(
            e["old_node_no_execute_taints"],
            json!(["node.kubernetes.io/unreachable"])
        );
        assert_eq!(e["matched_by"], APP_SELECTOR);
        assert_eq!(e["owner"], "Job/etl-hourly");
        assert_eq!(e["waiting_seconds"], 120);
        // The newest Event is reported; the volumes of all of them are listed.
        assert_eq!(e["event_reason"], "FailedMount");
        assert_eq!(e["event_count"], 3);
        assert_eq!(e["volumes"], json!(["checkpoint", PV]));
        assert_eq!(
            f.summary,
            format!(
                "Spark driver spark-jobs/etl-driver-b cannot start: volumes checkpoint, {PV} are still held for the old \
                 driver spark-jobs/etl-driver-a on node worker-2, not ready for 3m (Ready=Unknown, NodeStatusUnknown)"
            )
        );
        for part in [
            "Wait for node worker-2 to come back",
            "kubectl taint node worker-2 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
            "kubectl delete pod --force --grace-period=0 -n spark-jobs etl-driver-a",
            "Never force-delete while worker-2 may still run the old driver",
            "docs/operations/partitions.md",
        ] {
            assert!(f.remedy.contains(part), "{part}: {}", f.remedy);
        }
        // Matched by the Job alone: the evidence says so.
        let (mut new, mut old) = pair();
        new.labels.remove(APP_SELECTOR);
        old.labels.remove(APP_SELECTOR);
        let snap = snapshot(&new, &old, vec![multi_attach()], unreachable());
        let f = &crate::rules::testkit::judged(check, &snap, &Settings::default())[0];
        assert_eq!(f.evidence["matched_by"], "job");
        assert!(f.evidence.get("app_id").is_none());
        assert_eq!(f.evidence["volumes"], json!([PV]));
    }

    #[test]
    fn an_out_of_service_node_is_being_released() {
        let (new, old) = pair();
        let mut worker2 = unreachable();
        worker2.no_execute_taints.push(TAINT_OUT_OF_SERVICE.into());
        let snap = snapshot(&new, &old, vec![multi_attach()], worker2);
        let f = &crate::rules::testkit::judged(check, &snap, &Settings::default())[0];
        assert!(
            f.remedy
                .starts_with("Node worker-2 already carries node.kubernetes.io/out-of-service")
        );
    }

    #[test]
    fn messages_are_read_as_kubernetes_writes_them() {
        let cases = [
            (
                "FailedAttachVolume",
                "Multi-Attach error for volume \"pvc-1\" Volume is already used by pod(s) etl-driver-a",
                Some((Block::MultiAttach, vec!["pvc-1"])),
            ),
            (
                "FailedAttachVolume",
                "Multi-Attach error for volume \"pvc-2\" Volume is already used by 1 pod(s) in different namespaces",
                Some((Block::MultiAttach, vec!["pvc-2"])),
            ),
            (
                "FailedMount",
                "Unable to attach or mount volumes: unmounted volumes=[data logs], unattached volumes=[data logs \
                 kube-api-access-x], failed to process volumes=[]: context deadline exceeded",
                Some((Block::MountTimeout, vec!["data", "logs"])),
            ),
            (
                "FailedMount",
                "Unable to mount volumes for pod \"x_default(f2)\": timeout expired waiting for volumes to \
                 attach/mount for pod \"default\"/\"x\". list of unattached/unmounted volumes=[blobdisk01]",
                Some((Block::MountTimeout, vec!["blobdisk01"])),
            ),
            (
                "FailedMount",
                "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to \
                 process volumes=[data]: error processing PVC spark-jobs/data: PVC is not bound",
                None,
            ),
            (
                "FailedAttachVolume",
                "AttachVolume.Attach failed for volume \"pvc-4\" : timed out waiting for external-attacher",
                None,
            ),
        ];
        for (reason, message, want) in cases {
            let got = block_of(&warning_event(reason, message, 1, 0));
            let want = want.map(|(b, v)| (b, v.into_iter().map(String::from).collect::<Vec<_>>()));
            assert_eq!(got, want, "{message}");
        }
    }
}
