//! Whether each rule could judge: "no finding" must mean "looked and found nothing", never
//! "could not look".
//!
//! Every rule declares the [`Source`]s of the snapshot it needs ([`crate::rules::RuleInfo`]'s
//! `needs`, as [`Need`]s: one source, or one of several). Before a rule runs, its needs are
//! read against the snapshot ([`source_status`]) and give its [`Coverage`]:
//!
//! - `judged`: every need was read, or is absent in the normal way (a node without the static
//!   policy has no `cpu_manager_state`: there is nothing to find);
//! - `unknown`: a source it needs failed (unreadable, timed out) or is absent where it should
//!   be there (the kubelet's configuration; the PodResources socket of a running kubelet). The
//!   rule does not run: it raises nothing, and callers that remember findings keep its last
//!   judged ones. (Except where its needs say it can do without a source in part
//!   ([`Needs::partial`]): then it runs and reports only what does not depend on that
//!   source, and is still `unknown`, unless it also lacks by choice a need it cannot do
//!   without: then it is `not_applicable` and does not run.) A partial need suits a source
//!   whose absence can only make the verdict worse: `slow-pod-admission` without a driver's
//!   `spark.properties` (`spark_conf`) knows a timeout at least as large as the one in force,
//!   so what it finds holds, and finding nothing means nothing;
//! - `not_applicable`: the user chose not to look (`--offline`, no pod list given, the API not
//!   configured), or the source does not apply here (a kubelet without the PodResources call);
//! - `disabled`: switched off by configuration.
//!
//! How each source's `Missing` counts is decided once, in [`source_status`], and written down
//! in docs/architecture.md ("Coverage").
//!
//! Beside its needs, every rule says from which kubelet version each of its comparisons holds
//! and what it does with an older kubelet or an unknown version ([`KubeletVersions`]); the
//! rule's page carries both, made from the catalogue and checked by the tests below.

use std::collections::BTreeMap;

use crate::snapshot::{NodeSnapshot, Observed};

/// An input of the snapshot a rule may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The CPU manager's `cpu_manager_state`.
    Checkpoint,
    /// The memory manager's `memory_manager_state`.
    MemoryState,
    /// The device manager's `device-plugins/kubelet_internal_checkpoint`.
    DeviceState,
    /// The DRA manager's `dra_manager_state`.
    DraState,
    /// The configured DRA drivers' own checkpoints.
    DraDrivers,
    /// The kubelet's configuration (policy, reserved CPUs).
    KubeletConfig,
    /// The online CPUs and their topology (sysfs).
    Cpus,
    /// The pod cgroups under `kubepods`.
    Cgroups,
    /// `/proc` (the allowed CPUs of the processes in the cgroups: evidence only, no rule needs
    /// it to judge).
    Procfs,
    /// A list of the pods bound to the node (the API, or `--pods`).
    Pods,
    /// The kubelet's PodResources API.
    Podresources,
    /// The Spark local dirs on the node.
    LocalDirs,
    /// The Spark configuration (`spark.properties`) of the drivers on the node: whether each
    /// was read ([`crate::snapshot::SparkConfRead`]).
    SparkConf,
    /// The API server's probes.
    Api,
    /// The Spark pods' local dirs measured over a window (the daemon's).
    LocalStorage,
    /// The TCP ports listening in the node's network namespace.
    Listeners,
}

impl Source {
    /// Every source, in report order.
    pub const ALL: &'static [Source] = &[
        Source::Checkpoint,
        Source::MemoryState,
        Source::DeviceState,
        Source::DraState,
        Source::DraDrivers,
        Source::KubeletConfig,
        Source::Cpus,
        Source::Cgroups,
        Source::Procfs,
        Source::Pods,
        Source::Podresources,
        Source::LocalDirs,
        Source::SparkConf,
        Source::Api,
        Source::LocalStorage,
        Source::Listeners,
    ];

    /// The report's name (`checkpoint`, `kubelet_config`, `podresources`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Checkpoint => "checkpoint",
            Source::MemoryState => "memory_state",
            Source::DeviceState => "device_state",
            Source::DraState => "dra_state",
            Source::DraDrivers => "dra_drivers",
            Source::KubeletConfig => "kubelet_config",
            Source::Cpus => "cpus",
            Source::Cgroups => "cgroups",
            Source::Procfs => "procfs",
            Source::Pods => "pods",
            Source::Podresources => "podresources",
            Source::LocalDirs => "local_dirs",
            Source::SparkConf => "spark_conf",
            Source::Api => "api",
            Source::LocalStorage => "local_storage",
            Source::Listeners => "listeners",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a rule needs: one source, or any one of several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// This source.
    One(Source),
    /// At least one of these (liveness: a pod list, else the kubelet's PodResources list, else
    /// the cgroups).
    AnyOf(&'static [Source]),
}

impl Need {
    /// Pod liveness: a pod list, the kubelet's PodResources list, or the cgroup tree.
    pub const LIVENESS: Need = Need::AnyOf(&[Source::Pods, Source::Podresources, Source::Cgroups]);

    /// The sources it names.
    pub fn sources(&self) -> &[Source] {
        match self {
            Need::One(s) => std::slice::from_ref(s),
            Need::AnyOf(s) => s,
        }
    }

    /// How the docs write it: `checkpoint`, `one of pods, podresources, cgroups`.
    pub fn describe(&self) -> String {
        match self {
            Need::One(s) => s.as_str().to_string(),
            Need::AnyOf(s) => format!("one of {}", s.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")),
        }
    }
}

/// A rule's needs: what it reads, and what it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Every need must be met for the rule to judge.
    pub all: &'static [Need],
    /// The files the rule judges: when every one of them is absent (the normal state of a
    /// manager that is not enabled), there is nothing to judge, whatever else is unknown.
    /// Empty: the rule is about no one file.
    pub about: &'static [Source],
    /// Needs the rule can do without in part: when only these are unknown, the rule still
    /// runs and reports what does not depend on them (its code skips the checks that do), and
    /// its coverage is `unknown` naming them. Empty for most rules: a rule that lacks a need
    /// does not run.
    pub partial: &'static [Source],
}

impl Needs {
    /// The "Needs" line of the rule's page under docs/rules/ (a test keeps each page's line
    /// equal to this).
    pub fn doc_line(&self) -> String {
        let code = |s: &Source| format!("`{s}`");
        let list = |sources: &[Source], last: &str| {
            let names: Vec<String> = sources.iter().map(code).collect();
            match names.split_last() {
                Some((one, [])) => one.clone(),
                Some((tail, head)) => format!("{} {last} {tail}", head.join(", ")),
                None => String::new(),
            }
        };
        let mut line = format!(
            "**Needs:** {}",
            self.all
                .iter()
                .map(|n| match n {
                    Need::One(s) => code(s),
                    Need::AnyOf(s) => format!("one of {}", list(s, "or")),
                })
                .collect::<Vec<_>>()
                .join("; ")
        );
        if !self.about.is_empty() {
            let verb = if self.about.len() == 1 { "is" } else { "are" };
            line.push_str(&format!(
                ". With {} absent there is nothing to judge (judged)",
                list(self.about, if verb == "is" { "" } else { "and" })
            ));
        }
        if !self.partial.is_empty() {
            line.push_str(&format!(
                ". Without {} it still judges what does not depend on it, and is unknown",
                list(self.partial, "or")
            ));
        }
        line.push_str(
            ". Lacking any other need, it does not run: [coverage](../architecture.md#coverage-unknown-is-a-verdict).",
        );
        line
    }
}

/// From which kubelet version a rule's judgement holds ([`crate::rules::RuleInfo`]'s
/// `kubelet_versions`): the "Kubelet versions" block of its page under docs/rules/ is made from
/// it ([`KubeletVersions::doc_block`]), and a test keeps the two equal. The facts are
/// upstream's, gathered in docs/kubelet.md ("Behaviour by kubelet version" and the layouts of
/// each checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KubeletVersions {
    /// The rule reads nothing the kubelet writes or answers whose meaning changed across
    /// versions: why, in one clause.
    DoNotMatter(&'static str),
    /// Each comparison of something the kubelet writes or answers, with the version it holds
    /// from and what the rule does with an older kubelet or an unknown version.
    Comparisons(&'static [Comparison]),
}

/// One comparison of a rule and the kubelet versions it holds for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Comparison {
    /// What is compared with what.
    pub what: &'static str,
    /// The first kubelet version for which it holds, with the upstream reference.
    pub from: &'static str,
    /// What the rule does with a kubelet older than that.
    pub older: &'static str,
    /// What the rule does when the kubelet's version is unknown (offline, a pods file, a Node
    /// read too soon after the kubelet started: [`crate::kubelet_version::in_force`]).
    pub unknown: &'static str,
}

impl Comparison {
    /// Liveness from the kubelet's PodResources `List` when there is no pod list (the rules
    /// that take [`Need::LIVENESS`]).
    pub const PODRESOURCES_LIVENESS: Comparison = Comparison {
        what: "without a pod list, the pods the kubelet's PodResources `List` gives as the live ones",
        from: "1.20 (the `v1` service)",
        older: "the kubelet answers `Unimplemented`, and liveness comes from the cgroups",
        unknown: "`List` is used whenever it answers; the version is not needed",
    };
}

impl KubeletVersions {
    /// The first line of the block, also how the test finds it.
    pub const DOC_PREFIX: &'static str = "**Kubelet versions:**";

    /// The "Kubelet versions" block of the rule's page: one line, or a line and one item per
    /// comparison.
    pub fn doc_block(&self) -> String {
        match self {
            KubeletVersions::DoNotMatter(why) => {
                format!("{} the kubelet's version does not matter: {why}.", Self::DOC_PREFIX)
            }
            KubeletVersions::Comparisons(list) => {
                let mut block = format!(
                    "{} from which version each comparison holds ([by version](../kubelet.md#behaviour-by-kubelet-version)):",
                    Self::DOC_PREFIX
                );
                for c in *list {
                    block.push_str(&format!("\n- {}: holds from {}. ", c.what, c.from));
                    if c.older == c.unknown {
                        block.push_str(&format!("Older or unknown version: {}.", c.older));
                    } else {
                        block.push_str(&format!("Older: {}. Unknown version: {}.", c.older, c.unknown));
                    }
                }
                block
            }
        }
    }
}

/// How one source stands for coverage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceStatus {
    /// Read.
    Read,
    /// Not there, and that is a normal outcome here: nothing to judge in it.
    Absent,
    /// Not looked at by choice, or does not apply here (why).
    NotLooked(String),
    /// Could not be read, or absent where it should be there (why).
    Unknown(String),
}

/// How `source` stands in `snap`. The decisions for `Missing`:
/// `checkpoint`, the other managers' files, DRA drivers' files and local dirs: absent (a
/// manager that is not enabled writes no file); `kubelet_config`, `cpus`, `cgroups`, `procfs`:
/// unknown (every node has them: the host root or the kubelet's configuration was not found);
/// `podresources`: unknown while a kubelet process runs (its socket should be there), absent
/// otherwise (no kubelet, no memory to compare). `spark_conf` has no `Missing`: it is unknown
/// when the `spark.properties` of a live driver here failed to be read (naming each), read
/// when one was read, else absent (no driver, or none with a file to read: see
/// [`crate::snapshot::SparkConfRead::NotThere`]).
pub fn source_status(snap: &NodeSnapshot, source: Source) -> SourceStatus {
    fn of<T>(o: &Observed<T>, missing_is_unknown: bool, what: &str) -> SourceStatus {
        match o {
            Observed::Ok(_) => SourceStatus::Read,
            Observed::Missing { path } if missing_is_unknown => {
                SourceStatus::Unknown(format!("{what} {path} not found"))
            }
            Observed::Missing { .. } => SourceStatus::Absent,
            Observed::NotApplicable { reason } => SourceStatus::NotLooked(reason.clone()),
            Observed::Error { reason } => SourceStatus::Unknown(reason.clone()),
        }
    }
    match source {
        Source::Checkpoint => of(&snap.host.checkpoint, false, "cpu_manager_state"),
        Source::MemoryState => of(&snap.host.managers.memory, false, "memory_manager_state"),
        Source::DeviceState => of(&snap.host.managers.devices, false, "kubelet_internal_checkpoint"),
        Source::DraState => of(&snap.host.managers.dra, false, "dra_manager_state"),
        Source::DraDrivers => snap
            .host
            .managers
            .drivers
            .iter()
            .find_map(|d| match &d.claims {
                Observed::Error { reason } => Some(SourceStatus::Unknown(format!("{}: {reason}", d.path))),
                _ => None,
            })
            .unwrap_or(if snap.host.managers.drivers.iter().any(|d| d.claims.ok().is_some()) {
                SourceStatus::Read
            } else {
                SourceStatus::Absent
            }),
        Source::KubeletConfig => match &snap.host.kubelet {
            Observed::Missing { path } => SourceStatus::Unknown(format!(
                "the kubelet's configuration was not found ({path}): its policy and reserved CPUs are unknown"
            )),
            other => of(other, true, "kubelet configuration"),
        },
        Source::Cpus => of(&snap.host.cpus, true, "online CPUs"),
        Source::Cgroups => of(&snap.host.cgroups, true, "cgroup hierarchy"),
        Source::Procfs => of(&snap.host.procfs, true, "procfs"),
        Source::Pods if snap.pods.source.is_pod_list() => SourceStatus::Read,
        Source::Pods => match &snap.pods.list {
            Observed::Error { reason } => SourceStatus::Unknown(reason.clone()),
            Observed::NotApplicable { reason } => SourceStatus::NotLooked(reason.clone()),
            Observed::Missing { path } => SourceStatus::Unknown(format!("pod list {path} not found")),
            Observed::Ok(()) => SourceStatus::NotLooked("no pod list".into()),
        },
        Source::Podresources => {
            let kubelet_runs = snap.host.kubelet.ok().is_some_and(|k| k.started_at.is_some());
            match &snap.host.kubelet_view {
                Observed::Missing { path } if kubelet_runs => SourceStatus::Unknown(format!(
                    "the kubelet runs but its PodResources socket {path} is missing"
                )),
                other => of(other, false, "PodResources socket"),
            }
        }
        Source::LocalDirs => of(&snap.host.local_dirs, false, "local dirs"),
        Source::LocalStorage => of(&snap.host.local_storage, true, "Spark local storage"),
        Source::Listeners => of(&snap.host.listeners, true, "listening sockets"),
        Source::SparkConf => {
            let unread = crate::submission::unread_confs(snap);
            if !unread.is_empty() {
                SourceStatus::Unknown(
                    unread
                        .iter()
                        .map(|u| {
                            format!(
                                "the configuration of driver {} could not be read ({}): the Spark client timeout it \
                                 sets is unknown",
                                u.driver, u.reason
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            } else if snap
                .pods
                .spark_conf_reads
                .values()
                .any(|r| matches!(r, crate::snapshot::SparkConfRead::Read { .. }))
            {
                SourceStatus::Read
            } else {
                SourceStatus::Absent
            }
        }
        Source::Api => of(&snap.api.server, false, "API"),
    }
}

/// Whether a rule judged, and if not, what it lacked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Coverage {
    /// It ran on everything it needs.
    Judged,
    /// A source it needs failed: it did not run.
    Unknown { missing: Vec<Source>, reason: String },
    /// It was not asked to look (or the source does not apply here): it did not run.
    NotApplicable { missing: Vec<Source>, reason: String },
    /// Switched off by configuration.
    Disabled,
}

impl Coverage {
    /// `judged`, `unknown`, `not_applicable`, `disabled`.
    pub fn status(&self) -> &'static str {
        match self {
            Coverage::Judged => "judged",
            Coverage::Unknown { .. } => "unknown",
            Coverage::NotApplicable { .. } => "not_applicable",
            Coverage::Disabled => "disabled",
        }
    }

    /// Whether the rule judged everything it looks at.
    pub fn judged(&self) -> bool {
        matches!(self, Coverage::Judged)
    }

    /// Whether a rule with `needs` runs under this coverage: when it judged, or when it lacks
    /// only what it can do without in part.
    pub fn runs(&self, needs: &Needs) -> bool {
        match self {
            Coverage::Judged => true,
            Coverage::Unknown { missing, .. } => {
                !needs.partial.is_empty() && missing.iter().all(|s| needs.partial.contains(s))
            }
            _ => false,
        }
    }

    /// The sources it lacked and why (`None` when it judged or was disabled).
    pub fn lacking(&self) -> Option<(&[Source], &str)> {
        match self {
            Coverage::Unknown { missing, reason } | Coverage::NotApplicable { missing, reason } => {
                Some((missing, reason))
            }
            _ => None,
        }
    }
}

/// The coverage of a rule with `needs` on `snap`.
pub fn coverage(snap: &NodeSnapshot, needs: &Needs) -> Coverage {
    let status = |s: Source| source_status(snap, s);
    if !needs.about.is_empty() && needs.about.iter().all(|s| status(*s) == SourceStatus::Absent) {
        return Coverage::Judged;
    }
    let mut unknown: Vec<(Source, String)> = vec![];
    let mut not_looked: Vec<(Source, String)> = vec![];
    for need in needs.all {
        let statuses: Vec<(Source, SourceStatus)> = need.sources().iter().map(|s| (*s, status(*s))).collect();
        let met = match need {
            Need::One(_) => statuses
                .iter()
                .all(|(_, st)| matches!(st, SourceStatus::Read | SourceStatus::Absent)),
            Need::AnyOf(_) => statuses.iter().any(|(_, st)| *st == SourceStatus::Read),
        };
        if met {
            continue;
        }
        let before = unknown.len();
        for (s, st) in &statuses {
            if let SourceStatus::Unknown(why) = st {
                unknown.push((*s, why.clone()));
            }
        }
        if unknown.len() == before {
            for (s, st) in statuses {
                if let SourceStatus::NotLooked(why) = st {
                    not_looked.push((s, why));
                }
            }
        }
    }
    let join = |list: Vec<(Source, String)>| {
        let mut missing: Vec<Source> = list.iter().map(|(s, _)| *s).collect();
        missing.sort_unstable();
        missing.dedup();
        let reason = list
            .iter()
            .map(|(s, why)| format!("{s}: {why}"))
            .collect::<Vec<_>>()
            .join("; ");
        (missing, reason)
    };
    // A rule that lacks by choice a need it cannot do without does not run: what else it
    // could not read then changes nothing, and is no reason to say `unknown` (reading it
    // would not make the rule run). It does when what it lacks by choice is only what it can
    // do without in part, and the unknown is a need it cannot.
    let only_partial_unknown = unknown.iter().all(|(s, _)| needs.partial.contains(s));
    let lacks_by_choice_what_it_needs = not_looked.iter().any(|(s, _)| !needs.partial.contains(s));
    let not_run_anyway = !not_looked.is_empty() && (only_partial_unknown || lacks_by_choice_what_it_needs);
    if !unknown.is_empty() && !not_run_anyway {
        let (missing, reason) = join(unknown);
        Coverage::Unknown { missing, reason }
    } else if !not_looked.is_empty() {
        let (missing, reason) = join(not_looked);
        Coverage::NotApplicable { missing, reason }
    } else {
        Coverage::Judged
    }
}

/// The findings of one judgement and, for every rule of the catalogue, whether it judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// Worst first (see [`crate::finding::Finding::sort_key`]); none from rules that did not
    /// judge.
    pub findings: Vec<crate::finding::Finding>,
    /// By rule id, every rule of the catalogue.
    pub coverage: BTreeMap<&'static str, Coverage>,
}

impl Judgement {
    /// The rules that needed a source that could not be read.
    pub fn unknown(&self) -> impl Iterator<Item = (&'static str, &Coverage)> {
        self.coverage
            .iter()
            .filter(|(_, c)| matches!(c, Coverage::Unknown { .. }))
            .map(|(id, c)| (*id, c))
    }

    /// Whether rule `id` judged (a rule not in the catalogue did not).
    pub fn judged(&self, id: &str) -> bool {
        self.coverage.get(id).is_some_and(Coverage::judged)
    }
}

#[cfg(test)]
mod tests;
