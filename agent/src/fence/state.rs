//! What fencing must remember across a restart of the agent: the outage in progress and the
//! candidates judged while the API server answered, in a small JSON file beside the journal
//! (`<journal's directory>/fencing-state.json`), replaced atomically (temporary file, fsync,
//! rename, fsync of the directory) on each change.
//!
//! An agent that restarts during an outage cannot list its pods, so without this it would
//! fence nothing, and the two drivers fencing exists to prevent could then run. With it, the
//! restarted agent takes the outage up where it was ([`crate::contact::ApiContact::resume`]) and
//! fences the saved candidates at the original deadline, after its own requests have failed
//! too. It never fences a pod that is not in the file, and the file holds only pods judged
//! while the API server answered.
//!
//! A saved record is believed only when all of these hold, and is ignored otherwise (the agent
//! then fences nothing until it has seen the API server, as on a first start):
//! - it names this node and was written during this boot (`/proc/sys/kernel/random/boot_id`):
//!   the outage clock is the kernel's monotonic clock (`CLOCK_MONOTONIC`, which a wall clock
//!   set by hand or by NTP does not move), which starts over at each boot;
//! - it records an outage, and the last failed request of that outage is at most
//!   [`RESUME_WITHIN`] old: while no agent ran, nobody saw whether the API server answered, and
//!   an answer in that gap would have ended the outage (and restarted the control plane's
//!   clock) unseen. The record is refreshed at least every [`REFRESH_EVERY`] during an outage.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use super::{Candidate, Replacer};
use crate::contact::Outage;

/// A saved outage whose last failed request is older than this when the agent starts again
/// is not resumed.
pub const RESUME_WITHIN: Duration = Duration::from_secs(30);

/// During an outage the record's last failure is rewritten at least this often.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// The file's format version.
const VERSION: u32 = 1;

/// Why the state could not be written or read: the file and the reason.
#[derive(Debug, thiserror::Error)]
#[error("fencing state {path}: {message}")]
pub struct StateError {
    pub path: String,
    pub message: String,
}

/// Why a saved record is not resumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stale {
    #[error("it is of format version {0}, not {VERSION}")]
    Version(u32),
    #[error("it is of node {saved}, not {this}")]
    OtherNode { saved: String, this: String },
    #[error("it was written during another boot (boot id {saved}, now {this})")]
    OtherBoot { saved: String, this: String },
    #[error("this boot's id cannot be read, so its clock cannot be trusted")]
    UnknownBoot,
    #[error("it records no outage")]
    NoOutage,
    #[error("its last failed request is {0} s old: the API server may have answered meanwhile")]
    TooOld(u64),
    #[error("its times are after now on the monotonic clock")]
    FromTheFuture,
}

/// One candidate as saved.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedCandidate {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub replacer: SavedReplacer,
    pub opted_in_by: String,
    pub evicted_after: Option<i64>,
    pub fence_after_ms: u64,
    pub late: bool,
    pub grace_ms: u64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedReplacer {
    pub kind: String,
    pub name: String,
    pub restart: Option<String>,
}

/// The outage as saved: its times on the kernel's monotonic clock, in nanoseconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedOutage {
    pub since_ns: u64,
    /// The first failure on the wall clock, unix nanoseconds (the journal's ids and entries
    /// use it).
    pub since_wall_ns: u64,
    pub failures: u64,
    pub last_error: String,
    pub last_failure_ns: u64,
}

/// The file's content.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    pub version: u32,
    pub node: String,
    pub boot_id: String,
    /// When it was written, for people (RFC 3339).
    pub written_at: String,
    pub outage: Option<SavedOutage>,
    pub candidates: Vec<SavedCandidate>,
}

/// What a restarted agent takes up.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    pub outage: Outage,
    pub candidates: Vec<Candidate>,
}

/// A fixed pair of readings of the process's monotonic clock ([`crate::contact::mono_now`])
/// and the kernel's `CLOCK_MONOTONIC`, taken together once: every other instant converts
/// through it. Outside tests the two are the same clock, so the conversion is exact; under a
/// test's paused clock it keeps every conversion consistent with the paused time.
fn anchor() -> Option<(Instant, u64)> {
    static ANCHOR: OnceLock<Option<(Instant, u64)>> = OnceLock::new();
    *ANCHOR.get_or_init(|| {
        let at = crate::contact::mono_now();
        let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).ok()?;
        let ns = u64::try_from(ts.tv_sec()).ok()?.checked_mul(1_000_000_000)? + u64::try_from(ts.tv_nsec()).ok()?;
        Some((at, ns))
    })
}

/// `at` on the kernel's monotonic clock, in nanoseconds.
pub fn mono_ns(at: Instant) -> Option<u64> {
    let (base, base_ns) = anchor()?;
    if at >= base {
        base_ns.checked_add(u64::try_from(at.duration_since(base).as_nanos()).ok()?)
    } else {
        base_ns.checked_sub(u64::try_from(base.duration_since(at).as_nanos()).ok()?)
    }
}

/// The instant of `ns` on the kernel's monotonic clock.
pub fn instant_of(ns: u64) -> Option<Instant> {
    let (base, base_ns) = anchor()?;
    if ns >= base_ns {
        base.checked_add(Duration::from_nanos(ns - base_ns))
    } else {
        base.checked_sub(Duration::from_nanos(base_ns - ns))
    }
}

/// This boot's id (`/proc/sys/kernel/random/boot_id` of the kernel the agent runs on, which is
/// the node's: the file is the kernel's, not the host tree's).
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

fn wall_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl SavedCandidate {
    pub fn of(c: &Candidate) -> SavedCandidate {
        SavedCandidate {
            uid: c.uid.clone(),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            replacer: SavedReplacer {
                kind: c.replacer.kind.clone(),
                name: c.replacer.name.clone(),
                restart: c.replacer.restart.clone(),
            },
            opted_in_by: c.opted_in_by.to_string(),
            evicted_after: c.evicted_after,
            fence_after_ms: u64::try_from(c.fence_after.as_millis()).unwrap_or(u64::MAX),
            late: c.late,
            grace_ms: u64::try_from(c.grace.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The candidate again; `None` when the file says something this agent never writes.
    fn candidate(&self) -> Option<Candidate> {
        let opted_in_by = match self.opted_in_by.as_str() {
            "label" => "label",
            "annotation" => "annotation",
            "namespace" => "namespace",
            _ => return None,
        };
        Some(Candidate {
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            replacer: Replacer {
                kind: self.replacer.kind.clone(),
                name: self.replacer.name.clone(),
                restart: self.replacer.restart.clone(),
            },
            opted_in_by,
            evicted_after: self.evicted_after,
            fence_after: Duration::from_millis(self.fence_after_ms),
            late: self.late,
            grace: Duration::from_millis(self.grace_ms),
        })
    }
}

impl Saved {
    /// The record of `candidates` and `outage` (if one runs) on `node`, during boot `boot_id`.
    pub fn new(node: &str, boot_id: &str, outage: Option<&Outage>, candidates: &[Candidate]) -> Saved {
        Saved {
            version: VERSION,
            node: node.to_string(),
            boot_id: boot_id.to_string(),
            written_at: jiff::Timestamp::now().to_string(),
            outage: outage.and_then(|o| {
                Some(SavedOutage {
                    since_ns: mono_ns(o.since)?,
                    since_wall_ns: wall_ns(o.since_wall),
                    failures: o.failures,
                    last_error: o.last_error.clone(),
                    last_failure_ns: mono_ns(o.last_failure)?,
                })
            }),
            candidates: candidates.iter().map(SavedCandidate::of).collect(),
        }
    }

    /// What an agent restarted at `now` on `node` (during boot `boot_id`) takes up, or why not.
    pub fn resume(&self, node: &str, boot_id: Option<&str>, now: Instant) -> Result<Resumed, Stale> {
        if self.version != VERSION {
            return Err(Stale::Version(self.version));
        }
        if self.node != node {
            return Err(Stale::OtherNode {
                saved: self.node.clone(),
                this: node.to_string(),
            });
        }
        let Some(boot_id) = boot_id else {
            return Err(Stale::UnknownBoot);
        };
        if self.boot_id != boot_id {
            return Err(Stale::OtherBoot {
                saved: self.boot_id.clone(),
                this: boot_id.to_string(),
            });
        }
        let Some(o) = &self.outage else {
            return Err(Stale::NoOutage);
        };
        let now_ns = mono_ns(now).ok_or(Stale::FromTheFuture)?;
        if o.since_ns > o.last_failure_ns || o.last_failure_ns > now_ns {
            return Err(Stale::FromTheFuture);
        }
        let age = Duration::from_nanos(now_ns - o.last_failure_ns);
        if age > RESUME_WITHIN {
            return Err(Stale::TooOld(age.as_secs()));
        }
        let (Some(since), Some(last_failure)) = (instant_of(o.since_ns), instant_of(o.last_failure_ns)) else {
            return Err(Stale::FromTheFuture);
        };
        Ok(Resumed {
            outage: Outage {
                since,
                since_wall: SystemTime::UNIX_EPOCH + Duration::from_nanos(o.since_wall_ns),
                failures: o.failures,
                last_error: o.last_error.clone(),
                last_failure,
            },
            candidates: self.candidates.iter().filter_map(SavedCandidate::candidate).collect(),
        })
    }
}

/// The state file.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The state file in the directory of the journal `journal`.
    pub fn beside(journal: &Path) -> StateFile {
        StateFile {
            path: journal.with_file_name("fencing-state.json"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, e: impl std::fmt::Display) -> StateError {
        StateError {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }

    /// Replaces the file with `saved`, atomically.
    pub fn save(&self, saved: &Saved) -> Result<(), StateError> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| self.error(e))?;
        }
        let text = serde_json::to_vec_pretty(saved).map_err(|e| self.error(e))?;
        crate::repair::atomic::write_atomic(&self.path, &text, 0o600).map_err(|e| self.error(e))
    }

    /// The saved record; `None` when there is none.
    pub fn load(&self) -> Result<Option<Saved>, StateError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| self.error(e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate() -> Candidate {
        Candidate {
            uid: "u1".into(),
            namespace: "etl".into(),
            name: "stream-driver".into(),
            replacer: Replacer {
                kind: "Job".into(),
                name: "stream".into(),
                restart: None,
            },
            opted_in_by: "annotation",
            evicted_after: Some(300),
            fence_after: Duration::from_millis(240_500),
            late: false,
            grace: Duration::from_secs(30),
        }
    }

    #[test]
    fn an_outage_and_its_candidates_come_back_only_on_this_node_this_boot_and_soon() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::beside(&dir.path().join("state/fencing.jsonl"));
        assert_eq!(file.path(), dir.path().join("state/fencing-state.json"));
        assert_eq!(file.load().unwrap(), None, "no file: nothing to resume");
        let t0 = crate::contact::mono_now();
        let outage = Outage {
            since: t0,
            since_wall: SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789),
            failures: 4,
            last_error: "connection refused".into(),
            last_failure: t0 + Duration::from_secs(20),
        };
        file.save(&Saved::new("n1", "boot-a", Some(&outage), &[candidate()]))
            .unwrap();
        let saved = file.load().unwrap().unwrap();

        let now = t0 + Duration::from_secs(45);
        let r = saved.resume("n1", Some("boot-a"), now).unwrap();
        assert_eq!(r.candidates, vec![candidate()]);
        assert_eq!(r.outage.since, t0, "the original start, on the monotonic clock");
        assert_eq!(
            r.outage.since_wall, outage.since_wall,
            "the journal's ids stay the same"
        );
        assert_eq!(r.outage.last_failure, outage.last_failure);
        assert_eq!(
            (r.outage.failures, r.outage.last_error.as_str()),
            (4, "connection refused")
        );

        assert!(matches!(
            saved.resume("n2", Some("boot-a"), now),
            Err(Stale::OtherNode { .. })
        ));
        assert!(matches!(
            saved.resume("n1", Some("boot-b"), now),
            Err(Stale::OtherBoot { .. })
        ));
        assert_eq!(saved.resume("n1", None, now), Err(Stale::UnknownBoot));
        // 31 s after its last failed request: the API server may have answered unseen.
        let late = t0 + Duration::from_secs(51);
        assert_eq!(saved.resume("n1", Some("boot-a"), late), Err(Stale::TooOld(31)));
        // Before the record's own times (another boot's clock): never.
        assert_eq!(saved.resume("n1", Some("boot-a"), t0), Err(Stale::FromTheFuture));

        // Reachable again: no outage to resume.
        file.save(&Saved::new("n1", "boot-a", None, &[candidate()])).unwrap();
        let saved = file.load().unwrap().unwrap();
        assert_eq!(saved.resume("n1", Some("boot-a"), now), Err(Stale::NoOutage));

        // A file this agent did not write is an error that names it.
        std::fs::write(file.path(), "{not json").unwrap();
        let e = file.load().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("fencing state {}: ", file.path().display())),
            "{e}"
        );
    }

    #[test]
    fn the_monotonic_conversions_round_trip() {
        let now = crate::contact::mono_now();
        for at in [now, now + Duration::from_secs(3600), now - Duration::from_millis(1500)] {
            let ns = mono_ns(at).unwrap();
            assert_eq!(instant_of(ns), Some(at));
        }
        assert_eq!(
            mono_ns(now + Duration::from_secs(2)).unwrap() - mono_ns(now).unwrap(),
            2_000_000_000
        );
        assert!(boot_id().is_some_and(|id| id.len() == 36), "{:?}", boot_id());
    }
}
