//! What every repair does with an action it took: one [`ActionRecord`] (what, why, the
//! evidence, the outcome), written to the log, turned into a Kubernetes Event when the API is
//! reachable, and counted in `nodemedic_repair_actions_total{action,result}` by the daemon.
//! Also the [`RateLimiter`] that bounds automatic repair.
//!
//! The log: a `tracing` event (target `nodemedic::repair`) for the daemon's log. A command
//! run by hand (`kubectl nodemedic repair ...`, a `kubectl exec` into the agent) also writes
//! the record as one JSON line to its stderr and, when the container's PID 1 is the
//! `nodemedic run` daemon, to the daemon's stderr, so the action shows in `kubectl logs` of the
//! agent after the exec session is gone.

use std::collections::VecDeque;
use std::io::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Map, Value};

use crate::events::{EventSpec, regarding};

/// Which repair acted: the `action` label of `nodemedic_repair_actions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairAction {
    /// `repair orphans`: an orphaned Spark executor pod deleted.
    Orphans,
    /// `repair failed-pods`: a pod the kubelet rejected at admission deleted.
    FailedPods,
    /// `repair half-submitted`: a Spark driver spark-submit gave up on deleted (never automatic).
    HalfSubmitted,
    /// `repair local-dirs`: an orphaned Spark scratch directory removed from a hostPath root.
    LocalDirs,
    /// `repair cpu-state`: the CPU manager checkpoint rewritten without its stale entries
    /// (never automatic).
    CpuState,
}

impl RepairAction {
    /// `orphans`, `failed-pods`, `local-dirs` (the subcommand and the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            RepairAction::Orphans => "orphans",
            RepairAction::FailedPods => "failed-pods",
            RepairAction::HalfSubmitted => "half-submitted",
            RepairAction::LocalDirs => "local-dirs",
            RepairAction::CpuState => "cpu-state",
        }
    }

    /// The reason of the Event recorded for an applied action (PascalCase).
    pub fn event_reason(self) -> &'static str {
        match self {
            RepairAction::Orphans => "OrphanedExecutorDeleted",
            RepairAction::FailedPods => "RejectedPodDeleted",
            RepairAction::HalfSubmitted => "HalfSubmittedDriverDeleted",
            RepairAction::LocalDirs => "OrphanedLocalDirRemoved",
            RepairAction::CpuState => "CPUManagerStateRepaired",
        }
    }

    /// The Event's `action` field.
    fn event_action(self) -> &'static str {
        match self {
            RepairAction::Orphans | RepairAction::FailedPods | RepairAction::HalfSubmitted => "Delete",
            RepairAction::LocalDirs => "Remove",
            RepairAction::CpuState => "Rewrite",
        }
    }
}

/// How an action ended: the `result` label of `nodemedic_repair_actions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionResult {
    /// Done: the pod was deleted, the directory removed.
    Applied,
    /// Not done, on purpose: a precondition failed (the pod was recreated under its name: 409;
    /// it is already gone; the directory is in use, changed, or no longer judged orphaned).
    Skipped,
    /// Tried and failed (API error, I/O error): nothing or only part was done.
    Failed,
}

impl ActionResult {
    /// `applied`, `skipped`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionResult::Applied => "applied",
            ActionResult::Skipped => "skipped",
            ActionResult::Failed => "failed",
        }
    }
}

/// The kind of object an action was about, as the report's `target.kind` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum TargetKind {
    /// A pod (`namespace`, `name`, `uid`): orphans, failed pods.
    Pod,
    /// A directory (`path`, a host path): local dirs.
    Directory,
    /// The node (`name`): the CPU manager checkpoint.
    Node,
}

impl TargetKind {
    /// `Pod`, `Directory` or `Node`: the Kubernetes kind for `Pod` and `Node`.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Pod => "Pod",
            TargetKind::Directory => "Directory",
            TargetKind::Node => "Node",
        }
    }
}

/// What an action was about.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ActionTarget {
    pub kind: TargetKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// A directory's host path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl ActionTarget {
    /// A pod.
    pub fn pod(namespace: &str, name: &str, uid: &str) -> Self {
        ActionTarget {
            kind: TargetKind::Pod,
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            path: None,
        }
    }

    /// A directory (host path).
    pub fn directory(path: &str) -> Self {
        ActionTarget {
            kind: TargetKind::Directory,
            namespace: None,
            name: None,
            uid: None,
            path: Some(path.into()),
        }
    }

    /// The node `name`.
    pub fn node(name: &str) -> Self {
        ActionTarget {
            kind: TargetKind::Node,
            namespace: None,
            name: Some(name.into()),
            uid: None,
            path: None,
        }
    }

    /// `ns/name (uid U)` or the path.
    pub fn display(&self) -> String {
        match (&self.namespace, &self.name, &self.uid, &self.path) {
            (Some(ns), Some(name), Some(uid), _) => format!("pod {ns}/{name} (uid {uid})"),
            (_, _, _, Some(path)) => path.clone(),
            _ => self.kind.as_str().to_string(),
        }
    }
}

/// One action a repair took or tried, with what, why and the evidence.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ActionRecord {
    pub action: RepairAction,
    pub result: ActionResult,
    pub target: ActionTarget,
    /// What was done (or would have been): `delete pod ...`, `remove directory ...`.
    pub what: String,
    /// Why it was a candidate (the rule's judgement).
    pub why: String,
    /// The rule's evidence.
    pub evidence: Map<String, Value>,
    /// Why it was skipped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Bytes freed (local dirs): the sizes of the regular files removed, each read just
    /// before its removal, symlinks not followed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_freed: Option<u64>,
    /// When, unix seconds.
    pub at: i64,
    /// Whether the Event was recorded (`None`: not tried: not applied, or no API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_recorded: Option<bool>,
}

impl ActionRecord {
    /// A record stamped now.
    pub fn new(
        action: RepairAction,
        result: ActionResult,
        target: ActionTarget,
        what: String,
        why: String,
        evidence: Map<String, Value>,
    ) -> Self {
        ActionRecord {
            action,
            result,
            target,
            what,
            why,
            evidence,
            detail: None,
            bytes_freed: None,
            at: now_unix(),
            event_recorded: None,
        }
    }

    /// With a detail (why skipped or failed).
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// The labels of `nodemedic_repair_actions_total{action,result}`.
    pub fn metric_labels(&self) -> [&'static str; 2] {
        [self.action.as_str(), self.result.as_str()]
    }

    /// One line for people: `applied: delete pod ns/x (uid u): why [detail]`.
    pub fn line(&self) -> String {
        let mut text = format!("{}: {}", self.result.as_str(), self.what);
        if let Some(b) = self.bytes_freed {
            text.push_str(&format!(" ({} freed)", human_bytes(b)));
        }
        if let Some(d) = &self.detail {
            text.push_str(&format!(": {d}"));
        }
        text
    }
}

/// Unix seconds now.
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Human size, as the rules print it in findings: `1.5 GiB`.
pub use nodemedic_rules::text::human_bytes;

/// Where action records go: the log, and Events when a client is given.
#[derive(Clone)]
pub struct Audit {
    client: Option<Client>,
    node: String,
    instance: String,
    /// Also one JSON line per record on stderr and on the daemon's stderr (commands run by hand).
    echo: bool,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("node", &self.node)
            .field("instance", &self.instance)
            .field("api", &self.client.is_some())
            .field("echo", &self.echo)
            .finish()
    }
}

impl Audit {
    /// Records for `node`; Events through `client` (none: log only) with `instance` as their
    /// `reportingInstance` (the agent's pod name).
    pub fn new(client: Option<Client>, node: &str, instance: &str) -> Self {
        Audit {
            client,
            node: node.to_string(),
            instance: instance.to_string(),
            echo: false,
        }
    }

    /// For a command run by hand: every record also goes to stderr as one JSON line, and to
    /// the daemon's stderr when the container's PID 1 is `nodemedic run`.
    pub fn echoing(mut self) -> Self {
        self.echo = true;
        self
    }

    /// The client Events go through.
    pub fn client(&self) -> Option<&Client> {
        self.client.as_ref()
    }

    /// Writes `rec` to the log.
    pub fn log(&self, rec: &ActionRecord) {
        let evidence = Value::Object(rec.evidence.clone());
        match rec.result {
            ActionResult::Applied => tracing::info!(
                target: "nodemedic::repair",
                action = rec.action.as_str(),
                result = rec.result.as_str(),
                node = %self.node,
                subject = %rec.target.display(),
                why = %rec.why,
                evidence = %evidence,
                bytes_freed = rec.bytes_freed,
                "repair: {}",
                rec.what
            ),
            _ => tracing::warn!(
                target: "nodemedic::repair",
                action = rec.action.as_str(),
                result = rec.result.as_str(),
                node = %self.node,
                subject = %rec.target.display(),
                why = %rec.why,
                detail = rec.detail.as_deref().unwrap_or(""),
                evidence = %evidence,
                "repair: {} not applied",
                rec.what
            ),
        }
        if self.echo {
            let line = audit_line(&self.node, rec);
            let _ = writeln!(std::io::stderr(), "{line}");
            forward_to_daemon(&line);
        }
    }

    /// Records an applied action as an Event on its pod (pod deletions) or on the node (local
    /// dirs). Only applied actions become Events; without a client nothing is sent.
    pub async fn event(&self, rec: &ActionRecord) -> Option<bool> {
        let client = self.client.as_ref()?;
        if rec.result != ActionResult::Applied {
            return None;
        }
        let t = &rec.target;
        let mut note = format!("nodemedic repair {}: {}: {}", rec.action.as_str(), rec.what, rec.why);
        if let Some(b) = rec.bytes_freed {
            note.push_str(&format!(" ({} freed)", human_bytes(b)));
        }
        let (namespace, event) = EventSpec {
            regarding: regarding(
                t.kind.as_str(),
                t.namespace.as_deref(),
                t.name.as_deref(),
                t.uid.as_deref(),
                &self.node,
            ),
            type_: "Normal",
            reason: rec.action.event_reason().into(),
            action: rec.action.event_action(),
            note,
            label: ("nodemedic.io/repair", rec.action.as_str().to_string()),
            instance: self.instance.clone(),
        }
        .build();
        let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => Some(true),
            Err(e) => {
                tracing::warn!(
                    target: "nodemedic::repair",
                    error = %e,
                    subject = %rec.target.display(),
                    "could not record the repair as an event"
                );
                Some(false)
            }
        }
    }

    /// Logs `rec` and, when applied, records its Event; notes the outcome in the record.
    pub async fn record(&self, rec: &mut ActionRecord) {
        self.log(rec);
        rec.event_recorded = self.event(rec).await;
    }

    /// Events for records already logged (the local-dirs removals, which run on a blocking
    /// thread and log as they go).
    pub async fn events(&self, records: &mut [ActionRecord]) {
        for rec in records.iter_mut() {
            rec.event_recorded = self.event(rec).await;
        }
    }
}

/// A record as one JSON log line, in the shape of the daemon's JSON log.
fn audit_line(node: &str, rec: &ActionRecord) -> String {
    let mut v = serde_json::json!({
        "timestamp": jiff::Timestamp::now().to_string(),
        "level": if rec.result == ActionResult::Applied { "INFO" } else { "WARN" },
        "target": "nodemedic::repair",
        "message": format!("repair: {}", rec.line()),
        "node": node,
    });
    if let (Value::Object(out), Ok(Value::Object(mut fields))) = (&mut v, serde_json::to_value(rec)) {
        // `target` is the log's (as in the daemon's JSON log); the record's target is the subject.
        if let Some(subject) = fields.remove("target") {
            out.insert("subject".into(), subject);
        }
        for (k, val) in fields {
            out.entry(k).or_insert(val);
        }
    }
    v.to_string()
}

/// Appends `line` to the daemon's stderr (the container log) when PID 1 is `nodemedic run`.
fn forward_to_daemon(line: &str) {
    let Ok(cmdline) = std::fs::read("/proc/1/cmdline") else {
        return;
    };
    let args = crate::collect::procfs::parse_cmdline(&cmdline);
    let is_daemon = args.first().is_some_and(|a| a.ends_with("nodemedic")) && args.get(1).is_some_and(|a| a == "run");
    if !is_daemon || std::process::id() == 1 {
        return;
    }
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open("/proc/1/fd/2") {
        let _ = writeln!(f, "{line}");
    }
}

/// At most `max_per_hour` actions in any sliding hour. Automatic repair takes one unit per
/// mutation it sends (a pod DELETE, the removal of a directory), whatever its outcome.
#[derive(Debug, Clone, Default)]
pub struct RateLimiter {
    max_per_hour: u32,
    taken: VecDeque<Instant>,
}

/// The limiter's window.
pub const RATE_WINDOW: Duration = Duration::from_secs(3600);

impl RateLimiter {
    pub fn new(max_per_hour: u32) -> Self {
        RateLimiter {
            max_per_hour,
            taken: VecDeque::new(),
        }
    }

    /// Changes the limit (a configuration reload); what was taken in the window still counts.
    pub fn set_max_per_hour(&mut self, max_per_hour: u32) {
        self.max_per_hour = max_per_hour;
    }

    pub fn max_per_hour(&self) -> u32 {
        self.max_per_hour
    }

    fn prune(&mut self, now: Instant) {
        while self
            .taken
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= RATE_WINDOW)
        {
            self.taken.pop_front();
        }
    }

    /// Units left in the hour before `now`.
    pub fn remaining_at(&mut self, now: Instant) -> u32 {
        self.prune(now);
        self.max_per_hour.saturating_sub(self.taken.len() as u32)
    }

    /// Units left now.
    pub fn remaining(&mut self) -> u32 {
        self.remaining_at(Instant::now())
    }

    /// Takes one unit at `now`, or says no.
    pub fn try_acquire_at(&mut self, now: Instant) -> bool {
        if self.remaining_at(now) == 0 {
            return false;
        }
        self.taken.push_back(now);
        true
    }

    /// Takes one unit now, or says no.
    pub fn try_acquire(&mut self) -> bool {
        self.try_acquire_at(Instant::now())
    }

    /// When the next unit frees up, if none is left at `now`.
    pub fn next_free_at(&mut self, now: Instant) -> Option<Instant> {
        if self.remaining_at(now) > 0 {
            return None;
        }
        self.taken.front().map(|t| *t + RATE_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_is_a_sliding_hour() {
        let t0 = Instant::now();
        let mut lim = RateLimiter::new(2);
        assert!(lim.try_acquire_at(t0));
        assert!(lim.try_acquire_at(t0 + Duration::from_secs(1800)));
        assert!(
            !lim.try_acquire_at(t0 + Duration::from_secs(1801)),
            "third within the hour"
        );
        assert_eq!(lim.remaining_at(t0 + Duration::from_secs(3599)), 0);
        assert_eq!(
            lim.next_free_at(t0 + Duration::from_secs(3599)),
            Some(t0 + Duration::from_secs(3600))
        );
        // The first unit leaves the window an hour after it was taken, the second later.
        assert_eq!(lim.remaining_at(t0 + Duration::from_secs(3600)), 1);
        assert!(lim.try_acquire_at(t0 + Duration::from_secs(3600)));
        assert!(!lim.try_acquire_at(t0 + Duration::from_secs(5399)));
        assert!(lim.try_acquire_at(t0 + Duration::from_secs(5400)));
        assert!(!lim.try_acquire_at(t0 + Duration::from_secs(5400)));
        // Zero allows nothing; raising the limit allows more at once.
        let mut none = RateLimiter::new(0);
        assert!(!none.try_acquire_at(t0));
        assert_eq!(none.next_free_at(t0), None, "nothing taken, nothing to wait for");
        lim.set_max_per_hour(3);
        assert!(lim.try_acquire_at(t0 + Duration::from_secs(5400)));
        assert_eq!(lim.max_per_hour(), 3);
        assert_eq!(RateLimiter::default().remaining_at(t0), 0);
    }

    #[test]
    fn records_read_well_and_label_metrics() {
        let mut rec = ActionRecord::new(
            RepairAction::LocalDirs,
            ActionResult::Applied,
            ActionTarget::directory("/mnt/spark/blockmgr-1"),
            "remove directory /mnt/spark/blockmgr-1".into(),
            "no running pod mounts /mnt/spark".into(),
            Map::new(),
        );
        rec.bytes_freed = Some(3 << 30);
        assert_eq!(rec.metric_labels(), ["local-dirs", "applied"]);
        assert_eq!(
            rec.line(),
            "applied: remove directory /mnt/spark/blockmgr-1 (3.0 GiB freed)"
        );
        let line: Value = serde_json::from_str(&audit_line("n1", &rec)).unwrap();
        assert_eq!(line["action"], "local-dirs");
        assert_eq!(line["result"], "applied");
        assert_eq!(line["target"], "nodemedic::repair");
        assert_eq!(line["subject"]["path"], "/mnt/spark/blockmgr-1");
        assert_eq!(line["bytes_freed"], 3u64 << 30);
        assert_eq!(line["node"], "n1");
        let pod = ActionTarget::pod("spark", "etl-exec-1", "u1");
        assert_eq!(pod.display(), "pod spark/etl-exec-1 (uid u1)");
        let skipped = ActionRecord::new(
            RepairAction::Orphans,
            ActionResult::Skipped,
            pod,
            "delete pod spark/etl-exec-1 (uid u1)".into(),
            "driver gone".into(),
            Map::new(),
        )
        .with_detail("recreated");
        assert_eq!(skipped.metric_labels(), ["orphans", "skipped"]);
        assert_eq!(
            skipped.line(),
            "skipped: delete pod spark/etl-exec-1 (uid u1): recreated"
        );
        assert_eq!(RepairAction::FailedPods.event_reason(), "RejectedPodDeleted");
        assert_eq!(RepairAction::HalfSubmitted.event_reason(), "HalfSubmittedDriverDeleted");
        assert_eq!(RepairAction::HalfSubmitted.as_str(), "half-submitted");
        assert_eq!(crate::events::note_text("é".repeat(600)).len(), 1023);
    }

    #[test]
    fn target_kinds_are_written_as_before() {
        let json = |t: &ActionTarget| serde_json::to_value(t).unwrap();
        let pod = ActionTarget::pod("spark", "etl-exec-1", "u1");
        assert_eq!(
            json(&pod),
            serde_json::json!({"kind": "Pod", "namespace": "spark", "name": "etl-exec-1", "uid": "u1"})
        );
        let dir = ActionTarget::directory("/mnt/spark/blockmgr-1");
        assert_eq!(
            json(&dir),
            serde_json::json!({"kind": "Directory", "path": "/mnt/spark/blockmgr-1"})
        );
        let node = ActionTarget::node("worker-3");
        assert_eq!(json(&node), serde_json::json!({"kind": "Node", "name": "worker-3"}));
        assert_eq!(node.display(), "Node");
        for t in [&pod, &dir, &node] {
            assert_eq!(json(t)["kind"], t.kind.as_str());
        }
    }
}
