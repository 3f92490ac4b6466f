//! The fencing journal: what fencing did or would have done, one JSON object a line, in a file
//! of the agent's own state directory, so that the record survives the partition (no Event
//! can be sent during it) and a restart of the agent.
//!
//! Two kinds of lines: an action ([`Entry`], with its `id`), and a note that an action was
//! published as Events (`{"published": "<id>", "at": ...}`), so that it is published once,
//! restarts included. Each line is appended whole with one `write` and flushed to disk. The
//! file is bounded: past `max_bytes` it is renamed to `<file>.1` (replacing the older one) and
//! a new file is started, so the journal takes at most twice `max_bytes`.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::stop::Stopped;
use super::{Mode, Replacer};

/// One action of fencing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// `<pod uid>@<outage start, unix ms>`: one action per pod and outage.
    pub id: String,
    /// When it acted (RFC 3339).
    pub at: String,
    pub mode: String,
    /// `fenced`, `would-fence`, `failed`.
    pub outcome: String,
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub node: String,
    /// What replaces the driver (`Job/stream`).
    pub replaced_by: String,
    /// How the pod opted in.
    pub opted_in_by: String,
    /// The first failed contact with the API server (RFC 3339).
    pub outage_since: String,
    /// How long the outage had lasted when it acted.
    pub outage_seconds: f64,
    pub fence_after_seconds: f64,
    /// When the taint manager would evict the pod (`None`: at once).
    pub evicted_after_seconds: Option<i64>,
    /// The last error of the failed requests.
    pub last_error: String,
    /// The pod's cgroup (a host path).
    #[serde(default)]
    pub cgroup: Option<String>,
    /// What stopping it did (`on` mode).
    #[serde(default)]
    pub stopped: Option<serde_json::Value>,
    /// A sentence for people.
    pub message: String,
}

impl Entry {
    /// The `outcome` label of `nodemedic_fence_actions_total` (`fenced`, `would_fence`,
    /// `failed`).
    pub fn metric_outcome(&self) -> &'static str {
        match self.outcome.as_str() {
            "fenced" => "fenced",
            "would-fence" => "would_fence",
            _ => "failed",
        }
    }

    /// Builds the entry of one action.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        candidate: &super::Candidate,
        node: &str,
        mode: Mode,
        outage: &crate::contact::Outage,
        lasted: std::time::Duration,
        cgroup: Option<String>,
        stopped: Option<&Stopped>,
        error: Option<String>,
    ) -> Entry {
        let since_ms = outage
            .since_wall
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let outcome = match (mode, stopped, &error) {
            (Mode::DryRun, _, None) => "would-fence",
            (Mode::On, Some(s), None) if s.complete() => "fenced",
            _ => "failed",
        };
        let Replacer { kind, name, .. } = &candidate.replacer;
        let what = format!("driver {} ({kind} {name})", candidate.display());
        let waited = format!(
            "no API server answer for {:.0} s (fence after {:.0} s)",
            lasted.as_secs_f64(),
            candidate.fence_after.as_secs_f64()
        );
        let message = match (outcome, stopped, &error) {
            ("would-fence", _, _) => format!("dry run: would have stopped {what}: {waited}"),
            ("fenced", Some(s), _) => format!(
                "stopped {what}: {waited}; {} process(es), {} ended on SIGTERM, {} killed ({})",
                s.processes, s.terminated, s.killed, s.method
            ),
            (_, _, Some(e)) => format!("could not stop {what}: {e}"),
            (_, Some(s), _) => format!(
                "could not stop {what}: {} process(es) still there after {} ms{}",
                s.remaining.len(),
                s.took_ms,
                s.error.as_deref().map_or(String::new(), |e| format!(" ({e})"))
            ),
            _ => format!("could not stop {what}"),
        };
        Entry {
            id: format!("{}@{since_ms}", candidate.uid),
            at: jiff::Timestamp::now().to_string(),
            mode: mode.as_str().into(),
            outcome: outcome.into(),
            namespace: candidate.namespace.clone(),
            pod: candidate.name.clone(),
            uid: candidate.uid.clone(),
            node: node.into(),
            replaced_by: format!("{kind}/{name}"),
            opted_in_by: candidate.opted_in_by.into(),
            outage_since: jiff::Timestamp::try_from(outage.since_wall)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            outage_seconds: (lasted.as_secs_f64() * 10.0).round() / 10.0,
            fence_after_seconds: candidate.fence_after.as_secs_f64(),
            evicted_after_seconds: candidate.evicted_after,
            last_error: outage.last_error.clone(),
            cgroup,
            stopped: stopped.and_then(|s| serde_json::to_value(s).ok()),
            message,
        }
    }
}

/// The journal file.
#[derive(Debug, Clone)]
pub struct Journal {
    path: PathBuf,
    max_bytes: u64,
}

/// Why the journal could not be written or read: the file and the reason.
#[derive(Debug, thiserror::Error)]
#[error("fencing journal {path}: {message}")]
pub struct JournalError {
    pub path: String,
    pub message: String,
}

impl Journal {
    pub fn new(path: impl Into<PathBuf>, max_bytes: u64) -> Self {
        Journal {
            path: path.into(),
            max_bytes,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, e: impl std::fmt::Display) -> JournalError {
        JournalError {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }

    /// The older file, `<file>.1`.
    fn older(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }

    /// Appends one line (rotating first when it would pass the bound) and flushes it to disk.
    fn append(&self, line: &str) -> Result<(), JournalError> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| self.error(e))?;
        }
        let size = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        if size > 0 && size + line.len() as u64 + 1 > self.max_bytes {
            std::fs::rename(&self.path, self.older()).map_err(|e| self.error(format!("rotate: {e}")))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.error(e))?;
        file.write_all(format!("{line}\n").as_bytes())
            .map_err(|e| self.error(e))?;
        file.sync_data().map_err(|e| self.error(e))
    }

    /// Records an action.
    pub fn record(&self, entry: &Entry) -> Result<(), JournalError> {
        let line = serde_json::to_string(entry).map_err(|e| self.error(e))?;
        self.append(&line)
    }

    /// Notes that the action `id` was published.
    pub fn published(&self, id: &str) -> Result<(), JournalError> {
        let line = serde_json::json!({"published": id, "at": jiff::Timestamp::now().to_string()}).to_string();
        self.append(&line)
    }

    /// The ids of every action in the journal, published or not (from both files).
    pub fn ids(&self) -> Result<BTreeSet<String>, JournalError> {
        let mut ids = BTreeSet::new();
        for file in [self.older(), self.path.clone()] {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.error(format!("{}: {e}", file.display()))),
            };
            for line in text.lines() {
                if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
                    if let Some(id) = value.get("id").and_then(|v| v.as_str()) {
                        ids.insert(id.to_string());
                    }
                }
            }
        }
        Ok(ids)
    }

    /// The actions not published yet, oldest first (from both files). Lines that do not parse
    /// are skipped and counted.
    pub fn unpublished(&self) -> Result<(Vec<Entry>, usize), JournalError> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut published = BTreeSet::new();
        let mut bad = 0;
        for file in [self.older(), self.path.clone()] {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.error(format!("{}: {e}", file.display()))),
            };
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                    bad += 1;
                    continue;
                };
                if let Some(id) = value.get("published").and_then(|v| v.as_str()) {
                    published.insert(id.to_string());
                } else if let Ok(entry) = serde_json::from_value::<Entry>(value) {
                    entries.push(entry);
                } else {
                    bad += 1;
                }
            }
        }
        entries.retain(|e| !published.contains(&e.id));
        Ok((entries, bad))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant, SystemTime};

    use super::*;
    use crate::contact::Outage;
    use crate::fence::Candidate;

    fn candidate(uid: &str) -> Candidate {
        Candidate {
            uid: uid.into(),
            namespace: "etl".into(),
            name: format!("driver-{uid}"),
            replacer: Replacer {
                kind: "Job".into(),
                name: "stream".into(),
                restart: None,
            },
            opted_in_by: "label",
            evicted_after: Some(300),
            fence_after: Duration::from_secs(240),
            late: false,
            grace: Duration::from_secs(30),
        }
    }

    fn outage() -> Outage {
        Outage {
            since: Instant::now(),
            since_wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            failures: 3,
            last_error: "connection refused".into(),
            last_failure: Instant::now(),
        }
    }

    #[test]
    fn entries_are_published_once_and_the_file_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::new(dir.path().join("state/fencing.jsonl"), 4096);
        let o = outage();
        let dry = Entry::new(
            &candidate("a"),
            "n1",
            Mode::DryRun,
            &o,
            Duration::from_secs(241),
            None,
            None,
            None,
        );
        assert_eq!(dry.outcome, "would-fence");
        assert_eq!(dry.id, "a@1700000000000");
        assert_eq!(dry.outage_since, "2023-11-14T22:13:20Z");
        assert!(
            dry.message
                .starts_with("dry run: would have stopped driver etl/driver-a (Job stream)"),
            "{}",
            dry.message
        );
        journal.record(&dry).unwrap();
        let stopped = Stopped {
            method: "signals",
            processes: 2,
            terminated: 2,
            ..Default::default()
        };
        let on = Entry::new(
            &candidate("b"),
            "n1",
            Mode::On,
            &o,
            Duration::from_secs(240),
            Some("/sys/fs/cgroup/x".into()),
            Some(&stopped),
            None,
        );
        assert_eq!(on.outcome, "fenced");
        assert_eq!(on.metric_outcome(), "fenced");
        journal.record(&on).unwrap();
        let (left, bad) = journal.unpublished().unwrap();
        assert_eq!(
            (left.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), bad),
            (vec!["a@1700000000000", "b@1700000000000"], 0)
        );
        journal.published(&dry.id).unwrap();
        let (left, _) = journal.unpublished().unwrap();
        assert_eq!(left, vec![on.clone()]);

        // Incomplete stop: failed, with what is left.
        let partial = Stopped {
            remaining: vec![42],
            ..stopped.clone()
        };
        let failed = Entry::new(
            &candidate("c"),
            "n1",
            Mode::On,
            &o,
            Duration::from_secs(240),
            None,
            Some(&partial),
            None,
        );
        assert_eq!((failed.outcome.as_str(), failed.metric_outcome()), ("failed", "failed"));
        assert!(
            failed.message.contains("1 process(es) still there"),
            "{}",
            failed.message
        );

        // Many entries: rotated at the bound, at most two files, the newest kept.
        for i in 0..40 {
            journal
                .record(&Entry::new(
                    &candidate(&format!("p{i}")),
                    "n1",
                    Mode::DryRun,
                    &o,
                    Duration::ZERO,
                    None,
                    None,
                    None,
                ))
                .unwrap();
        }
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        assert!(size(journal.path()) <= 4096, "{}", size(journal.path()));
        assert!(size(&journal.older()) <= 4096 && size(&journal.older()) > 0);
        let (left, _) = journal.unpublished().unwrap();
        assert_eq!(left.last().unwrap().uid, "p39");
        assert!(left.len() < 40, "the oldest were rotated away");

        // A torn or foreign line is skipped and counted, not fatal.
        std::fs::OpenOptions::new()
            .append(true)
            .open(journal.path())
            .unwrap()
            .write_all(b"{\"id\": tor\n")
            .unwrap();
        assert_eq!(journal.unpublished().unwrap().1, 1);
    }

    #[test]
    fn an_unwritable_journal_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let journal = Journal::new(dir.path().join("file/fencing.jsonl"), 4096);
        let e = journal.published("x").unwrap_err().to_string();
        assert!(
            e.starts_with("fencing journal ") && e.contains("file/fencing.jsonl"),
            "{e}"
        );
    }
}
