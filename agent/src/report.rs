//! The scan report: the JSON contract of docs/architecture.md and the text an SRE reads at 3 a.m.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use nodemedic_rules::coverage::{Coverage, Judgement};
use nodemedic_rules::finding::{Finding, Severity};
use nodemedic_rules::rules;
use nodemedic_rules::snapshot::{NodeSnapshot, Observed};
use serde_json::{Map, Value, json};

use crate::collect::Records;

/// The report of one scan.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub node: String,
    /// RFC 3339, seconds.
    pub generated_at: String,
    pub version: &'static str,
    /// Per input: `ok`, `missing`, `not applicable: ..`, `error: ..`; `pods` says where
    /// liveness came from (`api`, `file`, `cgroups`); `api`, last, is the snapshot's view of the
    /// API server (`ok` when probed, else why not).
    pub sources: Map<String, Value>,
    pub findings: Vec<Finding>,
    /// Per rule of the catalogue: whether it judged (`judged`), could not because a source it
    /// needs failed (`unknown`), was not asked to look (`not_applicable`) or is `disabled`;
    /// with the sources it lacked and why.
    pub coverage: BTreeMap<&'static str, Coverage>,
    /// What the collectors skipped (vanished cgroups, unparsable files).
    pub notes: Vec<String>,
    /// The kubelet's version (`major`, `minor`, `patch`, `raw`, `source`, `read_at`), when the
    /// Node object was read; absent when unknown (`sources.kubelet_version` says `unknown`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_version: Option<nodemedic_rules::kubelet_version::VersionReading>,
    /// The node's CPUs, one entry per CPU: `cpu`, `socket`, `numa_node`, `state` (`reserved`,
    /// `shared`, `live`, `stale`, `offline`, `unknown`) and `holder` where one holds it
    /// ([`nodemedic_rules::cpu_map`]); absent when the CPUs could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_map: Option<Vec<nodemedic_rules::cpu_map::CpuCell>>,
}

impl Report {
    /// Builds the report of `snapshot` with its `findings`; its `sources` are the collectors'
    /// `records`, then `api`: the status of `snapshot.api.server`. The API observation is no host
    /// collector (the daemon's comes from its probe task, and the API's health has metrics of
    /// its own), so it is read from the snapshot, which the API rules judge, not from a record.
    pub fn new(snapshot: &NodeSnapshot, findings: Vec<Finding>, records: &Records) -> Self {
        let generated_at = jiff::Timestamp::from_second(snapshot.taken_at)
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default();
        let mut sources: Map<String, Value> = records.iter().map(|r| (r.name.to_string(), json!(r.status))).collect();
        sources.insert("api".to_string(), json!(snapshot.api.server.status()));
        Report {
            node: snapshot.node.clone(),
            generated_at,
            version: env!("CARGO_PKG_VERSION"),
            sources,
            findings,
            coverage: BTreeMap::new(),
            notes: snapshot.notes.iter().map(ToString::to_string).collect(),
            kubelet_version: snapshot.api.kubelet_version.ok().cloned(),
            cpu_map: None,
        }
    }

    /// The report of a judgement: its findings, its coverage, and the map of the node's CPUs
    /// drawn from the same facts.
    pub fn judged(
        snapshot: &NodeSnapshot,
        facts: &nodemedic_rules::facts::Facts,
        judgement: Judgement,
        records: &Records,
    ) -> Self {
        let mut report = Report::new(snapshot, judgement.findings, records);
        report.coverage = judgement.coverage;
        report.cpu_map = nodemedic_rules::cpu_map::cpu_map(snapshot, facts);
        report
    }

    /// The rules that could not judge because a source they need failed.
    pub fn unknown(&self) -> impl Iterator<Item = (&'static str, &Coverage)> {
        self.coverage
            .iter()
            .filter(|(_, c)| matches!(c, Coverage::Unknown { .. }))
            .map(|(id, c)| (*id, c))
    }

    /// The `coverage:` section of the text report: how many rules judged, then one line per
    /// rule that could not (unknown), and one line per reason for those not applicable or
    /// disabled. Rules in catalogue order.
    fn coverage_text(&self, out: &mut String) {
        if self.coverage.is_empty() {
            return;
        }
        let judged = self.coverage.values().filter(|c| c.judged()).count();
        let _ = writeln!(out, "coverage: {judged} of {} rules judged", self.coverage.len());
        let in_order = || {
            rules::ALL
                .iter()
                .filter_map(|r| self.coverage.get(r.id.as_str()).map(|c| (r.id.as_str(), c)))
        };
        for (id, c) in in_order() {
            if let Coverage::Unknown { reason, .. } = c {
                let _ = writeln!(out, "  unknown         {id}: {reason}");
            }
        }
        let mut grouped: Vec<(&str, String, Vec<&str>)> = vec![];
        for (id, c) in in_order() {
            let (word, why) = match c {
                Coverage::NotApplicable { reason, .. } => ("not applicable", reason.clone()),
                Coverage::Disabled => ("disabled", "configuration".to_string()),
                _ => continue,
            };
            match grouped.iter_mut().find(|(w, y, _)| *w == word && *y == why) {
                Some((_, _, ids)) => ids.push(id),
                None => grouped.push((word, why, vec![id])),
            }
        }
        for (word, why, ids) in grouped {
            let _ = writeln!(out, "  {word:<15} {} ({why})", ids.join(", "));
        }
    }

    /// The worst severity found, if any.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The text report: a header, the sources, then findings grouped by severity with their
    /// evidence and remedy, then a summary line.
    pub fn to_text(&self, snapshot: &NodeSnapshot) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "nodemedic {} scan of node {} at {}",
            self.version, self.node, self.generated_at
        );
        let _ = writeln!(out, "sources:");
        for (name, status) in &self.sources {
            let detail = match name.as_str() {
                "cgroups" => snapshot.host.cgroups.ok().map(|t| {
                    format!(
                        " ({:?}, {} driver, {} pod cgroups under {})",
                        t.version,
                        t.driver,
                        t.pods.len(),
                        t.kubepods
                    )
                }),
                "checkpoint" => match &snapshot.host.checkpoint {
                    Observed::Ok(f) => Some(format!(" ({})", f.path)),
                    Observed::Missing { path } => Some(format!(" ({path})")),
                    _ => None,
                },
                "manager_files" => {
                    let m = &snapshot.host.managers;
                    let mut files: Vec<String> = [
                        ("memory_manager_state", m.memory.status()),
                        ("kubelet_internal_checkpoint", m.devices.status()),
                        ("dra_manager_state", m.dra.status()),
                    ]
                    .into_iter()
                    .filter(|(_, s)| s != "missing")
                    .map(|(name, s)| format!("{name} {}", s.split(':').next().unwrap_or_default()))
                    .collect();
                    files.extend(m.drivers.iter().map(|d| {
                        let status = d.claims.status();
                        format!("{} {}", d.path, status.split(':').next().unwrap_or_default())
                    }));
                    Some(if files.is_empty() {
                        " (none: no memory, device or DRA manager state on this node)".to_string()
                    } else {
                        format!(" ({})", files.join(", "))
                    })
                }
                "kubelet_config" => snapshot.host.kubelet.ok().map(|k| {
                    format!(
                        " ({}{}, policy {})",
                        k.path.as_deref().unwrap_or("flags only"),
                        k.found_by.describe().map(|d| format!(" {d}")).unwrap_or_default(),
                        k.cpu_manager.policy
                    )
                }),
                "pods" => Some(match snapshot.pods.source {
                    nodemedic_rules::snapshot::PodSource::Cgroups => {
                        " (liveness from cgroups: a pod is alive when its cgroup has processes)".to_string()
                    }
                    nodemedic_rules::snapshot::PodSource::PodResources => {
                        " (liveness from the kubelet: a pod is alive while its PodResources API lists it)".to_string()
                    }
                    _ => format!(" ({} pods bound to this node)", snapshot.pods.bound.len()),
                }),
                "podresources" => match &snapshot.host.kubelet_view {
                    Observed::Ok(v) => Some(format!(" ({} pods listed, {})", v.pods.len(), v.socket)),
                    Observed::Missing { path } => Some(format!(" ({path})")),
                    _ => None,
                },
                "kubelet_version" => Some(match &snapshot.api.kubelet_version {
                    Observed::Ok(v) => format!(" ({})", v.describe()),
                    Observed::Missing { path } => format!(" ({path} not found)"),
                    Observed::NotApplicable { reason } | Observed::Error { reason } => format!(" ({reason})"),
                }),
                "api" => snapshot.api.server.ok().map(|a| {
                    let n = a.samples.len();
                    format!(" ({n} probe sample{})", if n == 1 { "" } else { "s" })
                }),
                _ => None,
            };
            let _ = writeln!(
                out,
                "  {name:<15} {}{}",
                status.as_str().unwrap_or(""),
                detail.unwrap_or_default()
            );
        }
        self.coverage_text(&mut out);
        if let Some(map) = &self.cpu_map {
            let _ = write!(out, "\n{}", nodemedic_rules::cpu_map::draw(map));
        }
        for severity in [Severity::Critical, Severity::Warning, Severity::Info] {
            let group: Vec<&Finding> = self.findings.iter().filter(|f| f.severity == severity).collect();
            if group.is_empty() {
                continue;
            }
            let _ = writeln!(out, "\n{} ({})", severity.as_str().to_uppercase(), group.len());
            for f in group {
                let mut subject = f.subject.display();
                if let Some(c) = &f.subject.container {
                    let _ = write!(subject, " container {c}");
                }
                let _ = writeln!(out, "  [{}] {}", f.rule, subject);
                let _ = writeln!(out, "    {}", f.summary);
                for (k, v) in &f.evidence {
                    let v = match v {
                        // A CPU list (`6-7,14`, `15`) in brackets, never read as a count.
                        Value::String(s) if k.ends_with("cpus") => format!("[{s}]"),
                        Value::String(s) => s.clone(),
                        Value::Array(items) => items
                            .iter()
                            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
                            .collect::<Vec<_>>()
                            .join(", "),
                        other => other.to_string(),
                    };
                    let _ = writeln!(out, "      {k}: {v}");
                }
                let _ = writeln!(out, "    remedy: {}", f.remedy);
                if let Some(rule) = rules::by_id(f.rule.as_str()) {
                    let _ = writeln!(out, "    docs:   {}", rule.docs_path());
                }
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\nnotes:");
            for n in &self.notes {
                let _ = writeln!(out, "  - {n}");
            }
        }
        let count = |s| self.findings.iter().filter(|f| f.severity == s).count();
        let _ = writeln!(
            out,
            "\n{} critical, {} warning, {} info",
            count(Severity::Critical),
            count(Severity::Warning),
            count(Severity::Info)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use nodemedic_rules::snapshot::{ApiObservation, Observed};

    use super::*;
    use crate::host::HostPaths;
    use crate::scan::{self, Options, Pods};

    /// `sources.api` and the text report's `api` line of a scan of an empty host.
    fn api_source(opts: &Options) -> (Value, String) {
        let dir = tempfile::tempdir().unwrap();
        let host = HostPaths::new(dir.path(), None);
        let scanned = scan::snapshot_blocking(&host, Pods::Cgroups, opts).unwrap();
        let report = Report::new(&scanned.snapshot, vec![], &scanned.records);
        let text = report.to_text(&scanned.snapshot);
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("api "))
            .unwrap_or_default()
            .to_string();
        assert_eq!(
            report.sources.keys().next_back().map(String::as_str),
            Some("api"),
            "api comes after the collectors"
        );
        (report.sources["api"].clone(), line)
    }

    #[test]
    fn sources_give_the_api_as_the_snapshot_saw_it() {
        // `scan --offline`: no connection, so no probe.
        let offline = Options {
            host: crate::collect::HostOptions {
                node: Some("n".into()),
                ..Default::default()
            },
            api_probe: crate::scan::ApiProbe::Once,
            ..Default::default()
        };
        let (status, line) = api_source(&offline);
        assert_eq!(status, "not applicable: not probed");
        assert_eq!(line, "  api             not applicable: not probed");

        // The daemon's probe task saw the API.
        let observed = Options {
            api: Some(ApiObservation {
                samples: vec![],
                probing_since: 0,
                last_success_at: None,
                unreachable_since: None,
                last_error: None,
                webhooks: Observed::Ok(vec![]),
            }),
            ..offline
        };
        let (status, line) = api_source(&observed);
        assert_eq!(status, "ok");
        assert_eq!(line, "  api             ok (0 probe samples)");
    }
}
