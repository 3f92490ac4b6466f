//! The kubelet's version, as evidence: which of its behaviours a comparison may rely on.
//!
//! Some answers of the kubelet changed meaning across versions (docs/kubelet.md, "Behaviour by
//! kubelet version"): before 1.26 `GetAllocatableResources` gives the CPUs that were unassigned
//! when the kubelet started, not every CPU it may hand out (kubernetes#112913). A rule that
//! compares such an answer asks [`in_force`] first, and with an unknown or older kubelet does
//! not compare.
//!
//! The version comes from the Node object's `status.nodeInfo.kubeletVersion`, which the kubelet
//! sets at every node status update (`VersionInfo` in `pkg/kubelet/nodestatus/setters.go`:
//! `version.Get().String()`, the build's git version: `v1.23.8`, `v1.28.3-eks-7f8a1f2`,
//! `v1.30.1+k3s1`). The agent reads it through the API (`nodemedic scan` with one GET of its
//! Node, the daemon from a GET it repeats every few minutes); offline, or from a pods file, it
//! is unknown. A Node read shortly after the kubelet started may still carry the previous
//! kubelet's version, so such a reading is not trusted ([`in_force`]).

use std::fmt;

use crate::snapshot::{NodeSnapshot, Observed};

/// A kubelet version: `major.minor.patch` and the text it was read from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KubeletVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// As the Node reports it (`v1.28.3-eks-7f8a1f2`).
    pub raw: String,
}

/// Why a text is not a kubelet version ([`KubeletVersion::parse`]), why the snapshot's version
/// is not the running kubelet's ([`in_force`]), or why it does not allow a comparison
/// ([`allocatable_is_all_cpus`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("the kubelet version is empty")]
    Empty,
    #[error("kubelet version {raw:?} is not of the form v<major>.<minor>.<patch>[-suffix][+build]")]
    Malformed { raw: String },
    /// The Node was not found (what was looked for).
    #[error("not found ({path})")]
    NotFound { path: String },
    /// The Node was not read, or not applicable: the snapshot's reason (offline, ...).
    #[error("{reason}")]
    NotRead { reason: String },
    /// Read less than [`NODE_STATUS_SETTLE_SECONDS`] after the kubelet's start (or before it):
    /// the reading and how long after the start it was taken.
    #[error(
        "{} was read {after_seconds} s after the kubelet's start (or before it): the Node may still show the \
         previous kubelet's version for up to {settle} s",
        .reading.describe(),
        settle = NODE_STATUS_SETTLE_SECONDS
    )]
    TooSoon {
        reading: VersionReading,
        after_seconds: i64,
    },
    /// The running kubelet is older than [`ALLOCATABLE_ALL_CPUS`].
    #[error(
        "the kubelet is {version}: before {}.{} GetAllocatableResources gives the CPUs that were unassigned \
         when the kubelet started, not every CPU it may hand out (kubernetes#112913)",
        ALLOCATABLE_ALL_CPUS.0,
        ALLOCATABLE_ALL_CPUS.1
    )]
    BeforeAllocatableAllCpus { version: KubeletVersion },
    /// The running kubelet's version is unknown ([`in_force`]'s reason).
    #[error(
        "the kubelet's version is unknown ({why}); only from {}.{} does GetAllocatableResources give \
         every CPU the kubelet may hand out (kubernetes#112913)",
        ALLOCATABLE_ALL_CPUS.0,
        ALLOCATABLE_ALL_CPUS.1
    )]
    AllocatableVersionUnknown { why: Box<VersionError> },
}

impl KubeletVersion {
    /// Parses a git version as the kubelet reports it: an optional `v`, then
    /// `major.minor.patch`, then anything after a `-` (a pre-release or a distribution's suffix)
    /// or a `+` (build metadata). `v1.26.0-rc.1` counts as 1.26.0.
    pub fn parse(raw: &str) -> Result<Self, VersionError> {
        let text = raw.trim();
        if text.is_empty() {
            return Err(VersionError::Empty);
        }
        let malformed = || VersionError::Malformed { raw: raw.to_string() };
        let unprefixed = text.strip_prefix('v').unwrap_or(text);
        let core = unprefixed.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let mut number = || -> Result<u32, VersionError> {
            let part = parts.next().ok_or_else(malformed)?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed());
            }
            part.parse().map_err(|_| malformed())
        };
        let (major, minor, patch) = (number()?, number()?, number()?);
        if parts.next().is_some() {
            return Err(malformed());
        }
        Ok(KubeletVersion {
            major,
            minor,
            patch,
            raw: text.to_string(),
        })
    }

    /// Whether this is `major.minor` or later.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl fmt::Display for KubeletVersion {
    /// As the Node reports it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// The kubelet's version as the agent learned it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VersionReading {
    #[serde(flatten)]
    pub version: KubeletVersion,
    /// Where it came from: [`NODE_STATUS`].
    pub source: String,
    /// When it was read, unix seconds.
    pub read_at: i64,
}

/// [`VersionReading::source`] of a version read from the Node object.
pub const NODE_STATUS: &str = "Node status";

/// How long after the kubelet's start a Node may still carry the previous kubelet's version.
/// The kubelet writes its version with its node status, which it first updates once it has
/// registered, then every `nodeStatusUpdateFrequency` (10 s by default): well within this.
pub const NODE_STATUS_SETTLE_SECONDS: i64 = 60;

/// The first version whose `GetAllocatableResources` gives every CPU the kubelet may hand out
/// (the online CPUs minus the reserved ones), whatever it has assigned: kubernetes#112913.
pub const ALLOCATABLE_ALL_CPUS: (u32, u32) = (1, 26);

/// The newest kubelet whose checkpoint layouts nodemedic knows: the V4 layout of the 1.37
/// development builds (docs/kubelet.md, "Layouts by kubelet version").
pub const NEWEST_KNOWN_LAYOUTS: (u32, u32) = (1, 37);

impl VersionReading {
    /// `v1.23.8, Node status`: the report's detail of the `kubelet_version` source.
    pub fn describe(&self) -> String {
        format!("{}, {}", self.version, self.source)
    }
}

/// The kubelet's version when the snapshot knows it and it belongs to the kubelet that runs
/// now; else why not (its text is for a note).
pub fn in_force(snap: &NodeSnapshot) -> Result<&KubeletVersion, VersionError> {
    let reading = match &snap.api.kubelet_version {
        Observed::Ok(r) => r,
        Observed::Missing { path } => return Err(VersionError::NotFound { path: path.clone() }),
        Observed::NotApplicable { reason } | Observed::Error { reason } => {
            return Err(VersionError::NotRead { reason: reason.clone() });
        }
    };
    let started = snap.host.kubelet.ok().and_then(|k| k.started_at);
    if let Some(started) = started
        && reading.read_at < started + NODE_STATUS_SETTLE_SECONDS
    {
        return Err(VersionError::TooSoon {
            reading: reading.clone(),
            after_seconds: reading.read_at - started,
        });
    }
    Ok(&reading.version)
}

/// The running kubelet's version when it is newer than every kubelet whose checkpoint layouts
/// nodemedic knows ([`NEWEST_KNOWN_LAYOUTS`]): a checksum that no known layout reproduces may
/// then be one that kubelet writes and accepts.
pub fn newer_than_known_layouts(snap: &NodeSnapshot) -> Option<&KubeletVersion> {
    let (major, minor) = NEWEST_KNOWN_LAYOUTS;
    in_force(snap)
        .ok()
        .filter(|v| v.at_least(major, minor) && (v.major, v.minor) != (major, minor))
}

/// Whether `GetAllocatableResources`' CPUs are every CPU the kubelet may hand out (1.26 and
/// later, known to be running); `Err` says why they may be only those unassigned when it
/// started.
pub fn allocatable_is_all_cpus(snap: &NodeSnapshot) -> Result<(), VersionError> {
    let (major, minor) = ALLOCATABLE_ALL_CPUS;
    match in_force(snap) {
        Ok(v) if v.at_least(major, minor) => Ok(()),
        Ok(v) => Err(VersionError::BeforeAllocatableAllCpus { version: v.clone() }),
        Err(why) => Err(VersionError::AllocatableVersionUnknown { why: Box::new(why) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_nodes_report_them() {
        for (raw, want) in [
            ("v1.23.8", (1, 23, 8)),
            ("v1.28.3-eks-7f8a1f2", (1, 28, 3)),
            ("v1.30.1+k3s1", (1, 30, 1)),
            ("v1.27.3-gke.100", (1, 27, 3)),
            ("v1.26.0-rc.1", (1, 26, 0)),
            ("1.9.10", (1, 9, 10)),
            (" v1.31.0 ", (1, 31, 0)),
        ] {
            let v = KubeletVersion::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
            assert_eq!((v.major, v.minor, v.patch), want, "{raw}");
            assert_eq!(v.raw, raw.trim());
        }
        assert_eq!(KubeletVersion::parse(""), Err(VersionError::Empty));
        for bad in [
            "v1.23",
            "vx.y.z",
            "v1.23.8.1",
            "v1..8",
            "v-1.23.8",
            "latest",
            "v1.23.99999999999",
        ] {
            assert!(
                matches!(KubeletVersion::parse(bad), Err(VersionError::Malformed { .. })),
                "{bad}"
            );
        }
        let v = KubeletVersion::parse("v1.26.0").unwrap();
        assert!(v.at_least(1, 26) && v.at_least(1, 9) && !v.at_least(1, 27) && !v.at_least(2, 0));
        assert_eq!(v.to_string(), "v1.26.0");
    }

    fn snap(version: &str, read_at: i64, kubelet_started: Option<i64>) -> NodeSnapshot {
        let mut snap = crate::rules::testkit::SnapshotBuilder::static_node("0-1", &[]).build();
        snap.api.kubelet_version = Observed::Ok(VersionReading {
            version: KubeletVersion::parse(version).unwrap(),
            source: NODE_STATUS.into(),
            read_at,
        });
        if let Observed::Ok(k) = &mut snap.host.kubelet {
            k.started_at = kubelet_started;
        }
        snap
    }

    #[test]
    fn a_version_read_before_the_kubelet_settled_is_not_trusted() {
        assert_eq!(in_force(&snap("v1.27.1", 1000, Some(900))).map(|v| v.minor), Ok(27));
        assert_eq!(in_force(&snap("v1.27.1", 1000, None)).map(|v| v.minor), Ok(27));
        let why = in_force(&snap("v1.27.1", 1000, Some(990))).unwrap_err();
        assert!(
            matches!(&why, VersionError::TooSoon { reading, after_seconds: 10 } if reading.read_at == 1000),
            "{why:?}"
        );
        assert_eq!(
            why.to_string(),
            "v1.27.1, Node status was read 10 s after the kubelet's start (or before it): the Node may still show \
             the previous kubelet's version for up to 60 s"
        );
        assert!(in_force(&snap("v1.27.1", 1000, Some(2000))).is_err());
        assert_eq!(allocatable_is_all_cpus(&snap("v1.26.0", 1000, Some(0))), Ok(()));
        let old = allocatable_is_all_cpus(&snap("v1.23.8", 1000, Some(0))).unwrap_err();
        assert_eq!(
            old.to_string(),
            "the kubelet is v1.23.8: before 1.26 GetAllocatableResources gives the CPUs that were unassigned when \
             the kubelet started, not every CPU it may hand out (kubernetes#112913)"
        );
        let mut unknown = snap("v1.30.0", 1000, Some(0));
        unknown.api.kubelet_version = Observed::NotApplicable {
            reason: "offline: no Node object".into(),
        };
        let why = allocatable_is_all_cpus(&unknown).unwrap_err();
        assert_eq!(
            why,
            VersionError::AllocatableVersionUnknown {
                why: Box::new(VersionError::NotRead {
                    reason: "offline: no Node object".into()
                })
            }
        );
        assert_eq!(
            why.to_string(),
            "the kubelet's version is unknown (offline: no Node object); only from 1.26 does \
             GetAllocatableResources give every CPU the kubelet may hand out (kubernetes#112913)"
        );
        unknown.api.kubelet_version = Observed::Missing {
            path: "Node worker-3".into(),
        };
        assert_eq!(in_force(&unknown).unwrap_err().to_string(), "not found (Node worker-3)");
    }
}
