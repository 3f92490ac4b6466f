//! Driver fencing: when this node has lost the API server for long enough that the control
//! plane will replace its Spark drivers elsewhere, stop those drivers here first, so that one
//! application never has two drivers writing the same checkpoint.
//!
//! The timeline it races (docs/operations/partitions.md): the node's lease expires and the
//! node lifecycle controller marks it `Unknown` (about 40 s), taints it
//! `node.kubernetes.io/unreachable:NoExecute`, and the taint manager deletes each pod once its
//! toleration of that taint runs out (300 s by default); the pod's Job, or the Spark operator
//! for a `SparkApplication` that restarts, then creates a new driver on a reachable node. The
//! old driver needs no API server and keeps running. So a driver is fenced `margin` before its
//! own toleration runs out, counted from the first failed contact with the API server
//! ([`crate::contact`]), which is always at or after the start of the real outage: the control
//! plane's clock starts earlier, at the last lease renewal, and then adds about 40 s.
//!
//! This module holds the judgement (which pod is a candidate, when it is due) and the pieces
//! that act ([`stop`]: the pod's processes through its cgroup; [`journal`]: the local record;
//! [`state`]: the outage and the candidates, kept for a restart during the outage).
//! The daemon's fencing task (`daemon::fence`) runs them: the heartbeat, the clock, the Events.

pub mod journal;
pub mod state;
pub mod stop;

use std::collections::HashMap;
use std::time::Duration;

use nodemedic_rules::eviction::Eviction;
use nodemedic_rules::snapshot::PodInfo;
use nodemedic_rules::spark;

/// The label or annotation that opts a driver pod in (value `"true"`).
pub const OPT_IN: &str = nodemedic_rules::snapshot::pods::annotations::FENCE_OPT_IN;

/// What fencing does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Nothing: no heartbeat, no journal.
    #[default]
    Off,
    /// Everything but the stopping: the journal, the log, the metric and the Events say what
    /// would have been fenced and when.
    DryRun,
    /// Stops the drivers.
    On,
}

impl Mode {
    /// `off`, `dry-run` or `on`.
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "off" => Some(Mode::Off),
            "dry-run" => Some(Mode::DryRun),
            "on" => Some(Mode::On),
            _ => None,
        }
    }

    /// `off`, `dry-run`, `on` (the `mode` label of `nodemedic_fence_actions_total`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::DryRun => "dry-run",
            Mode::On => "on",
        }
    }
}

impl<'de> serde::Deserialize<'de> for Mode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // YAML 1.1 readers turn a bare `on`/`off` into booleans: take those too.
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Mode::On),
            Raw::Bool(false) => Ok(Mode::Off),
            Raw::Text(t) => {
                Mode::parse(&t).ok_or_else(|| serde::de::Error::custom(format!("{t:?} is not off, dry-run or on")))
            }
        }
    }
}

/// The configuration's `fencing:` section.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FencePolicy {
    pub mode: Mode,
    /// Namespaces whose drivers are all opted in (besides those with the label or annotation).
    pub namespaces: Vec<String>,
    /// How long before a driver's toleration of the `unreachable`/`not-ready` taints runs out
    /// it is fenced, in seconds.
    pub margin_seconds: f64,
    /// Fence no later than this after the first failed contact, in seconds (never later than
    /// the toleration allows either way).
    pub after_seconds: Option<f64>,
    /// How often the API server is probed while a candidate driver runs here, in seconds.
    pub heartbeat_seconds: f64,
    /// The journal: JSON lines, in the agent's own state directory.
    pub journal: String,
    /// The journal is rotated (one older file kept, `<journal>.1`) past this size.
    pub journal_max_bytes: u64,
}

impl Default for FencePolicy {
    fn default() -> Self {
        FencePolicy {
            mode: Mode::Off,
            namespaces: Vec::new(),
            margin_seconds: 60.0,
            after_seconds: None,
            heartbeat_seconds: 10.0,
            journal: "/var/lib/nodemedic/fencing.jsonl".into(),
            journal_max_bytes: 1024 * 1024,
        }
    }
}

/// What is wrong with a [`FencePolicy`]: the key (under `fencing:`) and its value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// A number of seconds below its least value, or not a number.
    #[error("{key}: {value} is not a number of seconds of at least {min}")]
    Seconds { key: &'static str, value: f64, min: f64 },
    /// `journal` is not an absolute path.
    #[error("journal: {path:?} is not an absolute path")]
    RelativeJournal { path: String },
    /// `journal_max_bytes` is below 4096.
    #[error("journal_max_bytes: {bytes} is below 4096")]
    JournalTooSmall { bytes: u64 },
}

impl FencePolicy {
    /// Checks the values; the error names the key.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let seconds = |key: &'static str, value: f64, min: f64| {
            if value.is_finite() && value >= min {
                Ok(())
            } else {
                Err(PolicyError::Seconds { key, value, min })
            }
        };
        seconds("margin_seconds", self.margin_seconds, 0.0)?;
        seconds("heartbeat_seconds", self.heartbeat_seconds, 0.1)?;
        if let Some(a) = self.after_seconds {
            seconds("after_seconds", a, 0.0)?;
        }
        if !self.journal.starts_with('/') {
            return Err(PolicyError::RelativeJournal {
                path: self.journal.clone(),
            });
        }
        if self.journal_max_bytes < 4096 {
            return Err(PolicyError::JournalTooSmall {
                bytes: self.journal_max_bytes,
            });
        }
        Ok(())
    }

    /// The journal this policy names.
    pub fn journal(&self) -> journal::Journal {
        journal::Journal::new(&self.journal, self.journal_max_bytes)
    }

    /// The heartbeat period.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs_f64(self.heartbeat_seconds)
    }

    /// The least time a driver's toleration must leave (after the margin) for the outage to be
    /// noticed and confirmed in time: two heartbeats. Less, and the candidate is `late`.
    pub fn notice(&self) -> Duration {
        self.heartbeat() * 2
    }
}

/// A driver is fenced only once this many requests in a row have failed, whatever its
/// `fence_after`: one failed request (a blip, a timeout) never fences by itself.
pub const MIN_FAILURES: u64 = 3;

/// A driver is fenced only on a failure this recent: an outage whose last failed request is
/// older says nothing about now (the API server may have come back while nobody asked), so the
/// agent asks first (a heartbeat out of turn) and acts only if that fails too.
pub const CONFIRM_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// What replaces a driver when its pod is deleted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Replacer {
    /// `Job` or `SparkApplication`.
    pub kind: String,
    pub name: String,
    /// The SparkApplication's `spec.restartPolicy.type` (`OnFailure`, `Always`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
}

/// A driver this agent fences when the API server stays away.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub replacer: Replacer,
    /// `label`, `annotation` or `namespace`.
    pub opted_in_by: &'static str,
    /// When the taint manager evicts it (`None`: at once, it tolerates nothing).
    pub evicted_after: Option<i64>,
    /// How long after the first failed contact it is fenced.
    pub fence_after: Duration,
    /// The toleration leaves less than [`FencePolicy::notice`] after the margin: the outage
    /// may not be confirmed ([`MIN_FAILURES`]) before the replacement starts.
    pub late: bool,
    /// How long its processes get between SIGTERM and SIGKILL (cgroup v1).
    pub grace: Duration,
}

impl Candidate {
    /// `namespace/name`.
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why a pod is not a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    NotDriver,
    Finished,
    NotOptedIn,
    /// No controller owner, or one that does not create a new driver (a bare pod, a
    /// ReplicaSet is not how drivers run).
    NoReplacer(String),
    /// A SparkApplication whose restart policy is not known yet, or is `Never`.
    NotRestarted(String),
    /// It tolerates the partition taints for ever: it is never evicted, so never replaced.
    NeverEvicted,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NotDriver => f.write_str("not a Spark driver"),
            Skip::Finished => f.write_str("finished"),
            Skip::NotOptedIn => write!(f, "not opted in ({OPT_IN})"),
            Skip::NoReplacer(why) | Skip::NotRestarted(why) => f.write_str(why),
            Skip::NeverEvicted => f.write_str("tolerates the unreachable and not-ready taints for ever"),
        }
    }
}

/// The SparkApplications' restart policies as last read from the API, by `namespace/name`:
/// `Some(type)`, or `None` when the object could not be read.
pub type RestartPolicies = HashMap<String, Option<String>>;

/// Whether a pod is a Spark driver: `spark-role=driver`, or launched by the Spark operator
/// and controlled by its SparkApplication (an executor is controlled by its driver pod).
pub fn is_driver(pod: &PodInfo) -> bool {
    spark::is_driver(pod)
        || (pod.label(spark::OPERATOR_LAUNCHED) == Some("true")
            && !spark::is_executor(pod)
            && pod.controller().is_some_and(|o| o.kind == "SparkApplication"))
}

/// The SparkApplication that controls `pod`, as `namespace/name`.
pub fn spark_application(pod: &PodInfo) -> Option<String> {
    let owner = pod.controller().filter(|o| o.kind == "SparkApplication")?;
    Some(format!("{}/{}", pod.namespace, owner.name))
}

/// How `pod` opted in to fencing: its `label` or `annotation` [`OPT_IN`] is `"true"`, or its
/// `namespace` is listed in the policy.
pub fn opted_in_by(pod: &PodInfo, policy: &FencePolicy) -> Option<&'static str> {
    let yes = |v: Option<&String>| v.is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if yes(pod.labels.get(OPT_IN)) {
        Some("label")
    } else if yes(pod.annotations.get(OPT_IN)) {
        Some("annotation")
    } else if policy.namespaces.iter().any(|n| n == &pod.namespace) {
        Some("namespace")
    } else {
        None
    }
}

/// Judges one pod bound to this node.
pub fn judge(pod: &PodInfo, policy: &FencePolicy, restarts: &RestartPolicies) -> Result<Candidate, Skip> {
    if !is_driver(pod) {
        return Err(Skip::NotDriver);
    }
    if pod.is_terminal() {
        return Err(Skip::Finished);
    }
    let Some(opted_in_by) = opted_in_by(pod, policy) else {
        return Err(Skip::NotOptedIn);
    };
    let Some(owner) = pod.controller() else {
        return Err(Skip::NoReplacer(
            "no controller owner: nothing creates a new driver".into(),
        ));
    };
    let replacer = match owner.kind.as_str() {
        "Job" => Replacer {
            kind: owner.kind.clone(),
            name: owner.name.clone(),
            restart: None,
        },
        "SparkApplication" => {
            let key = format!("{}/{}", pod.namespace, owner.name);
            match restarts.get(&key) {
                Some(Some(t)) if t == "OnFailure" || t == "Always" => Replacer {
                    kind: owner.kind.clone(),
                    name: owner.name.clone(),
                    restart: Some(t.clone()),
                },
                Some(Some(t)) => {
                    return Err(Skip::NotRestarted(format!(
                        "SparkApplication {key} has restart policy {t}: it is not resubmitted"
                    )));
                }
                _ => {
                    return Err(Skip::NotRestarted(format!(
                        "the restart policy of SparkApplication {key} is not known yet"
                    )));
                }
            }
        }
        other => {
            return Err(Skip::NoReplacer(format!(
                "controlled by a {other}, which does not run Spark drivers"
            )));
        }
    };
    let evicted_after = match pod.partition_eviction() {
        Eviction::Never => return Err(Skip::NeverEvicted),
        Eviction::Immediately => None,
        Eviction::After(s) => Some(s),
    };
    let allowed = Duration::from_secs_f64((evicted_after.unwrap_or(0) as f64 - policy.margin_seconds).max(0.0));
    let wanted = match policy.after_seconds {
        Some(cap) => allowed.min(Duration::from_secs_f64(cap)),
        None => allowed,
    };
    let late = allowed < policy.notice();
    let fence_after = wanted;
    Ok(Candidate {
        uid: pod.uid.clone(),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        replacer,
        opted_in_by,
        evicted_after,
        fence_after,
        late,
        grace: Duration::from_secs(pod.termination_grace_seconds.unwrap_or(30).clamp(0, 3600) as u64),
    })
}

/// The candidates among `pods`, and the opted-in drivers that are not, with why (for the log).
pub fn candidates<'a>(
    pods: impl IntoIterator<Item = &'a PodInfo>,
    policy: &FencePolicy,
    restarts: &RestartPolicies,
) -> (Vec<Candidate>, Vec<(String, Skip)>) {
    let mut yes = Vec::new();
    let mut no = Vec::new();
    for pod in pods {
        match judge(pod, policy, restarts) {
            Ok(c) => yes.push(c),
            Err(Skip::NotDriver | Skip::NotOptedIn | Skip::Finished) => {}
            Err(skip) => no.push((pod.display(), skip)),
        }
    }
    yes.sort_by(|a, b| a.uid.cmp(&b.uid));
    (yes, no)
}

#[cfg(test)]
mod tests {
    use nodemedic_rules::eviction::{TAINT_NOT_READY, TAINT_UNREACHABLE, Toleration};
    use nodemedic_rules::snapshot::OwnerRef;

    use super::*;

    fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            value: None,
            effect: Some("NoExecute".into()),
            seconds,
        }
    }

    /// A running driver owned by a Job, opted in by label, with the default tolerations.
    fn driver() -> PodInfo {
        PodInfo {
            uid: "u1".into(),
            namespace: "etl".into(),
            name: "stream-driver".into(),
            phase: "Running".into(),
            labels: [
                (spark::ROLE.to_string(), "driver".to_string()),
                (OPT_IN.to_string(), "true".to_string()),
            ]
            .into(),
            owner_refs: vec![OwnerRef {
                kind: "Job".into(),
                name: "stream".into(),
                uid: "j1".into(),
                controller: true,
            }],
            tolerations: vec![
                toleration(TAINT_NOT_READY, Some(300)),
                toleration(TAINT_UNREACHABLE, Some(300)),
            ],
            termination_grace_seconds: Some(30),
            ..Default::default()
        }
    }

    fn policy() -> FencePolicy {
        FencePolicy::default()
    }

    #[test]
    fn a_job_driver_that_opted_in_is_fenced_a_margin_before_its_eviction() {
        let c = judge(&driver(), &policy(), &Default::default()).unwrap();
        assert_eq!(c.fence_after, Duration::from_secs(240));
        assert_eq!(c.evicted_after, Some(300));
        assert_eq!(c.opted_in_by, "label");
        assert_eq!(c.replacer.kind, "Job");
        assert_eq!(c.grace, Duration::from_secs(30));
        assert!(!c.late);
        // A shorter toleration of either taint wins; a cap only ever brings it forward.
        let mut p = driver();
        p.tolerations[0].seconds = Some(120);
        assert_eq!(
            judge(&p, &policy(), &Default::default()).unwrap().fence_after,
            Duration::from_secs(60)
        );
        let capped = FencePolicy {
            after_seconds: Some(90.0),
            ..policy()
        };
        assert_eq!(
            judge(&driver(), &capped, &Default::default()).unwrap().fence_after,
            Duration::from_secs(90)
        );
        let loose = FencePolicy {
            after_seconds: Some(900.0),
            ..policy()
        };
        assert_eq!(
            judge(&driver(), &loose, &Default::default()).unwrap().fence_after,
            Duration::from_secs(240)
        );
    }

    #[test]
    fn a_toleration_shorter_than_the_margin_fences_at_once_and_says_it_is_late() {
        let mut p = driver();
        p.tolerations.clear();
        let c = judge(&p, &policy(), &Default::default()).unwrap();
        assert_eq!(c.evicted_after, None);
        assert_eq!(c.fence_after, Duration::ZERO);
        assert!(c.late);
        p.tolerations = vec![
            toleration(TAINT_UNREACHABLE, Some(70)),
            toleration(TAINT_NOT_READY, Some(70)),
        ];
        let c = judge(&p, &policy(), &Default::default()).unwrap();
        assert_eq!(c.fence_after, Duration::from_secs(10));
        assert!(c.late, "10 s is less than two heartbeats");
        p.tolerations = vec![
            toleration(TAINT_UNREACHABLE, Some(80)),
            toleration(TAINT_NOT_READY, Some(80)),
        ];
        assert!(!judge(&p, &policy(), &Default::default()).unwrap().late);
    }

    #[test]
    fn opt_in_by_label_annotation_or_namespace_and_nothing_else() {
        let mut p = driver();
        p.labels.remove(OPT_IN);
        assert_eq!(judge(&p, &policy(), &Default::default()), Err(Skip::NotOptedIn));
        p.annotations.insert(OPT_IN.into(), "True".into());
        assert_eq!(
            judge(&p, &policy(), &Default::default()).unwrap().opted_in_by,
            "annotation"
        );
        p.annotations.insert(OPT_IN.into(), "false".into());
        assert_eq!(judge(&p, &policy(), &Default::default()), Err(Skip::NotOptedIn));
        let by_ns = FencePolicy {
            namespaces: vec!["etl".into()],
            ..policy()
        };
        assert_eq!(judge(&p, &by_ns, &Default::default()).unwrap().opted_in_by, "namespace");
    }

    #[test]
    fn pods_that_nothing_replaces_are_never_candidates() {
        let none = RestartPolicies::default();
        // An executor, and a finished driver.
        let mut p = driver();
        p.labels.insert(spark::ROLE.into(), "executor".into());
        assert_eq!(judge(&p, &policy(), &none), Err(Skip::NotDriver));
        let mut p = driver();
        p.phase = "Failed".into();
        assert_eq!(judge(&p, &policy(), &none), Err(Skip::Finished));
        // No owner; an owner that is not a controller; a ReplicaSet.
        let mut p = driver();
        p.owner_refs.clear();
        assert!(matches!(judge(&p, &policy(), &none), Err(Skip::NoReplacer(_))));
        let mut p = driver();
        p.owner_refs[0].controller = false;
        assert!(matches!(judge(&p, &policy(), &none), Err(Skip::NoReplacer(_))));
        let mut p = driver();
        p.owner_refs[0].kind = "ReplicaSet".into();
        assert!(matches!(judge(&p, &policy(), &none), Err(Skip::NoReplacer(_))));
        // Tolerating the taints for ever.
        let mut p = driver();
        p.tolerations = vec![toleration(TAINT_UNREACHABLE, None), toleration(TAINT_NOT_READY, None)];
        assert_eq!(judge(&p, &policy(), &none), Err(Skip::NeverEvicted));
    }

    #[test]
    fn a_spark_application_counts_only_when_its_restart_policy_restarts() {
        let mut p = driver();
        p.labels.remove(spark::ROLE);
        p.labels.insert(spark::OPERATOR_LAUNCHED.into(), "true".into());
        p.owner_refs[0].kind = "SparkApplication".into();
        p.owner_refs[0].name = "stream".into();
        assert!(is_driver(&p), "the operator's driver pods count without spark-role");
        let mut restarts = RestartPolicies::default();
        assert!(
            matches!(judge(&p, &policy(), &restarts), Err(Skip::NotRestarted(_))),
            "unknown"
        );
        restarts.insert("etl/stream".into(), None);
        assert!(
            matches!(judge(&p, &policy(), &restarts), Err(Skip::NotRestarted(_))),
            "unreadable"
        );
        restarts.insert("etl/stream".into(), Some("Never".into()));
        assert!(matches!(judge(&p, &policy(), &restarts), Err(Skip::NotRestarted(w)) if w.contains("Never")));
        for t in ["OnFailure", "Always"] {
            restarts.insert("etl/stream".into(), Some(t.into()));
            let c = judge(&p, &policy(), &restarts).unwrap();
            assert_eq!(c.replacer.restart.as_deref(), Some(t));
        }
        assert_eq!(spark_application(&p).as_deref(), Some("etl/stream"));
    }

    #[test]
    fn modes_read_as_words_or_yaml_booleans() {
        for (text, mode) in [
            ("mode: dry-run", Mode::DryRun),
            ("mode: \"on\"", Mode::On),
            ("mode: 'off'", Mode::Off),
            ("mode: true", Mode::On),
            ("mode: false", Mode::Off),
        ] {
            let p: FencePolicy = serde_saphyr::from_str(text).unwrap();
            assert_eq!(p.mode, mode, "{text}");
        }
        assert!(serde_saphyr::from_str::<FencePolicy>("mode: maybe").is_err());
        assert!(FencePolicy::default().validate().is_ok());
        let bad = FencePolicy {
            heartbeat_seconds: 0.0,
            ..policy()
        };
        let e = bad.validate().unwrap_err();
        assert_eq!(
            e,
            PolicyError::Seconds {
                key: "heartbeat_seconds",
                value: 0.0,
                min: 0.1
            }
        );
        assert_eq!(
            e.to_string(),
            "heartbeat_seconds: 0 is not a number of seconds of at least 0.1"
        );
        let relative = FencePolicy {
            journal: "fencing.jsonl".into(),
            ..policy()
        };
        assert_eq!(
            relative.validate().unwrap_err().to_string(),
            "journal: \"fencing.jsonl\" is not an absolute path"
        );
        let small = FencePolicy {
            journal_max_bytes: 100,
            ..policy()
        };
        assert_eq!(
            small.validate().unwrap_err().to_string(),
            "journal_max_bytes: 100 is below 4096"
        );
    }
}
