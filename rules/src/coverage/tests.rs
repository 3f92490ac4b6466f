//! Tests of [`super`] (coverage.rs keeps the code, this file its tests).

use super::*;
use crate::rules;
use crate::rules::testkit::{SnapshotBuilder, pod};

/// Every rule's judgement of `snap`, its facts derived as a judgement cycle derives them.
fn judge(snap: &NodeSnapshot, settings: &Settings) -> crate::coverage::Judgement {
    rules::judge(snap, &crate::facts::derive(snap, settings), settings)
}
use crate::settings::Settings;
use crate::snapshot::PodSource;

/// A static node whose pod list (a file) names no pod: the entry's pod is gone.
fn node() -> NodeSnapshot {
    SnapshotBuilder::static_node("0-1", &[("dead-pod", "app", "2-3")])
        .with_pod_list(&[pod("live", "exec-1", "Running", &[("app", "c1")])])
        .build()
}

fn error<T>(reason: &str) -> Observed<T> {
    Observed::Error { reason: reason.into() }
}

/// (status, missing) of every rule whose status is not `judged`.
fn not_judged(snap: &NodeSnapshot) -> BTreeMap<&'static str, (&'static str, Vec<Source>)> {
    judge(snap, &Settings::default())
        .coverage
        .into_iter()
        .filter(|(_, c)| !c.judged())
        .map(|(id, c)| {
            (
                id,
                (c.status(), c.lacking().map(|(m, _)| m.to_vec()).unwrap_or_default()),
            )
        })
        .collect()
}

fn unknown_ids(snap: &NodeSnapshot) -> Vec<&'static str> {
    not_judged(snap)
        .into_iter()
        .filter(|(_, (status, _))| *status == "unknown")
        .map(|(id, _)| id)
        .collect()
}

#[test]
fn every_rule_declares_needs_and_every_source_is_needed_by_one() {
    for r in rules::ALL {
        assert!(!r.needs.all.is_empty(), "{} needs nothing", r.id);
        for s in r.needs.about {
            assert!(
                r.needs.all.iter().any(|n| n.sources().contains(s)),
                "{}: about {s} that it does not need",
                r.id
            );
        }
    }
    // procfs gives evidence only (the processes' allowed CPUs); the process lists that
    // decide liveness are the cgroups' own.
    for s in Source::ALL.iter().filter(|s| **s != Source::Procfs) {
        assert!(
            rules::ALL
                .iter()
                .any(|r| r.needs.all.iter().any(|n| n.sources().contains(s))),
            "no rule needs {s}"
        );
    }
}

#[test]
fn a_node_with_everything_read_judges_every_rule_but_the_offline_ones() {
    let snap = node();
    let j = judge(&snap, &Settings::default());
    assert!(j.findings.iter().any(|f| f.rule.as_str() == "stale-cpu-assignment"));
    // The testkit's node has no API observation: not probed, which is not a failure.
    // Nor has it the daemon's measurements of Spark's local storage over a window.
    let not = not_judged(&snap);
    assert!(
        not.values().all(|(status, missing)| *status == "not_applicable"
            && (missing == &[Source::Api] || missing == &[Source::LocalStorage])),
        "{not:?}"
    );
    assert_eq!(not.len(), 5, "{not:?}");
    assert_eq!(unknown_ids(&snap), Vec::<&str>::new());
}

/// Each source that fails makes exactly the rules that need it unknown, and they raise
/// nothing.
#[test]
fn each_failed_source_makes_the_rules_that_need_it_unknown() {
    type Break = Box<dyn Fn(&mut NodeSnapshot)>;
    let cases: Vec<(&str, Break, Vec<&str>)> = vec![
        (
            "checkpoint",
            Box::new(|s| s.host.checkpoint = error("cpu_manager_state: permission denied")),
            vec![
                "checkpoint-invalid-state",
                "checkpoint-unreadable",
                "cpuset-drift",
                "cross-pod-cpu-overlap",
                "exclusive-cpu-shortage",
                "kubelet-state-divergence",
                "stale-cpu-assignment",
            ],
        ),
        (
            "kubelet config missing",
            Box::new(|s| {
                s.host.kubelet = Observed::Missing {
                    path: "/var/lib/kubelet/config.yaml".into(),
                }
            }),
            vec!["checkpoint-invalid-state"],
        ),
        (
            "cpus",
            Box::new(|s| s.host.cpus = error("online: EIO")),
            vec!["checkpoint-invalid-state", "exclusive-cpu-shortage"],
        ),
        (
            "cgroups",
            Box::new(|s| s.host.cgroups = error("kubepods: EACCES")),
            vec!["cpuset-drift"],
        ),
        (
            "memory state",
            Box::new(|s| s.host.managers.memory = error("memory_manager_state: EACCES")),
            vec![
                "checkpoint-unreadable",
                "device-admission-failure",
                "kubelet-state-divergence",
                "stale-memory-assignment",
            ],
        ),
        (
            "podresources hangs",
            Box::new(|s| s.host.kubelet_view = error("kubelet.sock: List did not answer within 2 s")),
            vec!["kubelet-state-divergence"],
        ),
        (
            "local dirs",
            Box::new(|s| s.host.local_dirs = error("pods dir: EIO")),
            vec!["orphaned-local-dir"],
        ),
        (
            "pod list failed",
            Box::new(|s| {
                s.pods.source = PodSource::Cgroups;
                s.pods.list = error("LIST pods: connection refused");
            }),
            vec![
                "admission-rejection",
                "device-admission-failure",
                "driver-blocked-by-partition",
                "duplicate-driver",
                "exclusive-cpu-shortage",
                "executor-without-owner",
                "half-submitted-driver",
                // Not it: a one-shot snapshot has no growth (local_storage not looked at), so
                // it would not run with the pods either.
                "orphaned-executor",
                "scheduler-conflict",
                "shuffle-service-missing",
                "spark-executor-evicted",
            ],
        ),
        (
            "local storage",
            Box::new(|s| s.host.local_storage = error("kubelet pods dir: EIO")),
            vec!["local-storage-eviction-risk"],
        ),
        (
            "listening sockets",
            Box::new(|s| s.host.listeners = error("/proc/1/net/tcp: EACCES")),
            vec!["shuffle-service-missing"],
        ),
    ];
    for (name, break_it, want) in cases {
        let mut snap = node();
        break_it(&mut snap);
        assert_eq!(unknown_ids(&snap), want, "{name}");
        let j = judge(&snap, &Settings::default());
        for id in &want {
            assert!(
                j.findings.iter().all(|f| f.rule.as_str() != *id),
                "{name}: {id} raised a finding"
            );
            let Some(Coverage::Unknown { reason, .. }) = j.coverage.get(id) else {
                panic!("{name}: {id}")
            };
            assert!(!reason.is_empty(), "{name}: {id}");
        }
    }
}

#[test]
fn liveness_needs_one_of_its_sources() {
    // No pod list (offline) and cgroups failed: stale-cpu-assignment cannot judge.
    let mut snap = node();
    snap.pods.source = PodSource::Cgroups;
    snap.pods.list = Observed::NotApplicable {
        reason: "--offline".into(),
    };
    snap.host.cgroups = error("kubepods: EACCES");
    let j = judge(&snap, &Settings::default());
    assert_eq!(
        j.coverage["stale-cpu-assignment"],
        Coverage::Unknown {
            missing: vec![Source::Cgroups],
            reason: "cgroups: kubepods: EACCES".into()
        }
    );
    assert!(j.findings.iter().all(|f| f.rule.as_str() != "stale-cpu-assignment"));
    // Offline, the rules that need a pod list are not applicable, not unknown.
    assert_eq!(
        j.coverage["orphaned-executor"],
        Coverage::NotApplicable {
            missing: vec![Source::Pods],
            reason: "pods: --offline".into()
        }
    );
    // The kubelet's PodResources list is enough.
    snap.host.kubelet_view = Observed::Ok(crate::rules::testkit::kubelet_view(vec![], Some("0-7")));
    snap.pods.source = PodSource::PodResources;
    assert!(judge(&snap, &Settings::default()).coverage["stale-cpu-assignment"].judged());
}

#[test]
fn missing_counts_per_source() {
    // No checkpoint: a node without the static policy; the checkpoint rules judged it,
    // even with the kubelet's configuration not found.
    let mut snap = node();
    snap.host.checkpoint = Observed::Missing {
        path: "/var/lib/kubelet/cpu_manager_state".into(),
    };
    snap.host.kubelet = Observed::Missing {
        path: "/var/lib/kubelet/config.yaml".into(),
    };
    assert_eq!(unknown_ids(&snap), Vec::<&str>::new());
    // A missing PodResources socket: absent without a running kubelet, unknown with one.
    let mut snap = node();
    snap.host.kubelet_view = Observed::Missing {
        path: "/var/lib/kubelet/pod-resources/kubelet.sock".into(),
    };
    assert_eq!(unknown_ids(&snap), Vec::<&str>::new());
    if let Observed::Ok(k) = &mut snap.host.kubelet {
        k.started_at = Some(1_700_000_000);
    }
    assert_eq!(unknown_ids(&snap), ["kubelet-state-divergence"]);
    // A kubelet without the call: not applicable.
    snap.host.kubelet_view = Observed::NotApplicable {
        reason: "Unimplemented".into(),
    };
    assert_eq!(not_judged(&snap)["kubelet-state-divergence"].0, "not_applicable");
}

/// `checkpoint-invalid-state` without the kubelet's configuration: unknown, and it still
/// reports what every configuration refuses (a file no policy wrote).
#[test]
fn a_rule_that_runs_in_part_is_unknown_and_keeps_what_holds_anyway() {
    let mut snap = SnapshotBuilder::static_node("0-1", &[])
        .with_raw_checkpoint(b"{}")
        .build();
    snap.host.kubelet = Observed::Missing {
        path: "/var/lib/kubelet/config.yaml".into(),
    };
    let j = judge(&snap, &Settings::default());
    assert_eq!(
        j.coverage["checkpoint-invalid-state"]
            .lacking()
            .map(|(m, _)| m.to_vec()),
        Some(vec![Source::KubeletConfig])
    );
    assert_eq!(j.coverage["checkpoint-invalid-state"].status(), "unknown");
    let found: Vec<_> = j
        .findings
        .iter()
        .filter(|f| f.rule.as_str() == "checkpoint-invalid-state")
        .map(|f| f.evidence["problem"].clone())
        .collect();
    assert_eq!(found, [serde_json::json!("unknown-policy")]);
    // A rule without partial needs does not run at all (cpuset-drift, cgroups failed).
    snap.host.cgroups = error("EACCES");
    let drift = &judge(&snap, &Settings::default()).coverage["cpuset-drift"];
    assert_eq!(drift.status(), "unknown");
    assert!(!drift.runs(&rules::by_id("cpuset-drift").unwrap().needs));
}

/// A rule that lacks by choice a need it cannot do without is not applicable, whatever else it
/// could not read: reading that would not make it run. `shuffle-service-missing` offline on a
/// host without a socket table is not applicable (it needs the pods); with the pods, unknown.
#[test]
fn lacking_a_need_by_choice_outweighs_an_unknown_that_would_change_nothing() {
    let mut snap = node();
    snap.host.listeners = Observed::Missing {
        path: "/proc/1/net/tcp".into(),
    };
    assert_eq!(unknown_ids(&snap), ["shuffle-service-missing"]);
    snap.pods.source = PodSource::Cgroups;
    snap.pods.list = Observed::NotApplicable {
        reason: "--offline".into(),
    };
    let j = judge(&snap, &Settings::default());
    let c = &j.coverage["shuffle-service-missing"];
    assert_eq!(c.status(), "not_applicable");
    assert_eq!(
        c.lacking().map(|(m, r)| (m.to_vec(), r)),
        Some((vec![Source::Pods], "pods: --offline"))
    );
    assert!(j.unknown().next().is_none(), "{:?}", j.unknown().collect::<Vec<_>>());
}

/// `spark_conf`: absent with nothing to read, read when a driver's file was, unknown (naming the
/// driver) only when the file of a live driver failed; that makes exactly `slow-pod-admission`
/// unknown, and it still runs. Offline it is not applicable: it lacks the API by choice.
#[test]
fn spark_conf_is_unknown_only_when_a_live_drivers_file_failed() {
    use crate::rules::testkit::spark_driver;
    use crate::snapshot::SparkConfRead;
    let live = spark_driver("d1", "spark-a", "etl", "Running");
    let done = spark_driver("d2", "spark-b", "old", "Failed");
    let mut snap = SnapshotBuilder::spark_node(&[live, done]).with_api(vec![]).build();
    let status = |snap: &NodeSnapshot| source_status(snap, Source::SparkConf);
    assert_eq!(
        status(&snap),
        SourceStatus::Absent,
        "no driver's state: nothing to read"
    );
    let reads = |snap: &mut NodeSnapshot, uid: &str, read: SparkConfRead| {
        snap.pods.spark_conf_reads.insert(uid.into(), read);
    };
    reads(
        &mut snap,
        "d1",
        SparkConfRead::NotThere {
            reason: "client mode".into(),
        },
    );
    assert_eq!(status(&snap), SourceStatus::Absent);
    reads(&mut snap, "d1", SparkConfRead::Read { path: "/p".into() });
    assert_eq!(status(&snap), SourceStatus::Read);
    reads(
        &mut snap,
        "d2",
        SparkConfRead::Failed {
            reason: "EACCES".into(),
        },
    );
    assert_eq!(
        status(&snap),
        SourceStatus::Read,
        "a finished driver's timeout does not matter"
    );
    assert!(unknown_ids(&snap).is_empty(), "{:?}", unknown_ids(&snap));

    reads(
        &mut snap,
        "d1",
        SparkConfRead::Failed {
            reason: "EACCES".into(),
        },
    );
    // A driver the pod list does not name counts as live.
    reads(&mut snap, "uid-9", SparkConfRead::Failed { reason: "EIO".into() });
    let why = |driver: &str, reason: &str| {
        format!(
            "the configuration of driver {driver} could not be read ({reason}): the Spark client timeout it sets is \
             unknown"
        )
    };
    assert_eq!(
        status(&snap),
        SourceStatus::Unknown(format!(
            "{}; {}",
            why("spark-jobs/etl-driver", "EACCES"),
            why("pod uid-9", "EIO")
        ))
    );
    assert_eq!(unknown_ids(&snap), ["shuffle-service-missing", "slow-pod-admission"]);
    let needs = &rules::by_id("slow-pod-admission").unwrap().needs;
    assert!(judge(&snap, &Settings::default()).coverage["slow-pod-admission"].runs(needs));

    snap.api.server = Observed::NotApplicable {
        reason: "--offline".into(),
    };
    assert_eq!(
        judge(&snap, &Settings::default()).coverage["slow-pod-admission"],
        Coverage::NotApplicable {
            missing: vec![Source::Api],
            reason: "api: --offline".into()
        }
    );
}

#[test]
fn disabled_rules_are_disabled_not_unknown() {
    let mut settings = Settings::default();
    settings.disabled_rules.insert("stale-cpu-assignment".into());
    let j = judge(&node(), &settings);
    assert_eq!(j.coverage["stale-cpu-assignment"], Coverage::Disabled);
    assert_eq!(j.coverage.len(), rules::ALL.len());
}

/// Each rule page's "Needs" line is the catalogue's. `NODEMEDIC_BLESS_DOCS=1` writes it
/// (after the page's header table, or over the old line).
#[test]
fn every_rule_page_says_what_the_rule_needs() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/rules");
    let bless = std::env::var_os("NODEMEDIC_BLESS_DOCS").is_some();
    let mut wrong = vec![];
    for r in rules::ALL {
        let path = docs.join(format!("{}.md", r.id));
        let text = std::fs::read_to_string(&path).unwrap();
        let want = r.needs.doc_line();
        let lines: Vec<&str> = text.lines().collect();
        let have: Vec<&&str> = lines.iter().filter(|l| l.starts_with("**Needs:**")).collect();
        if have.len() == 1 && *have[0] == want {
            continue;
        }
        if !bless {
            wrong.push(format!("{}: want the one line\n{want}", path.display()));
            continue;
        }
        let mut out: Vec<String> = lines
            .iter()
            .filter(|l| !l.starts_with("**Needs:**"))
            .map(|l| l.to_string())
            .collect();
        // After the header table: the first blank line after a line starting with `|`.
        let table_end = out
            .iter()
            .position(|l| l.starts_with('|'))
            .and_then(|start| out[start..].iter().position(|l| !l.starts_with('|')).map(|n| start + n))
            .unwrap_or(1);
        out.insert(table_end, String::new());
        out.insert(table_end + 1, want);
        // No doubled blank line where an old line was removed.
        out.dedup_by(|a, b| a.is_empty() && b.is_empty());
        std::fs::write(&path, out.join("\n") + "\n").unwrap();
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Each rule page's "Kubelet versions" block is the catalogue's, right under its "Needs"
/// line. `NODEMEDIC_BLESS_DOCS=1` writes it (run it with `--test-threads=1`: the "Needs"
/// test writes the same pages).
#[test]
fn every_rule_page_says_from_which_kubelet_version_it_holds() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/rules");
    let bless = std::env::var_os("NODEMEDIC_BLESS_DOCS").is_some();
    let prefix = KubeletVersions::DOC_PREFIX;
    let mut wrong = vec![];
    for r in rules::ALL {
        let path = docs.join(format!("{}.md", r.id));
        let text = std::fs::read_to_string(&path).unwrap();
        let want = r.kubelet_versions.doc_block();
        let lines: Vec<&str> = text.lines().collect();
        let starts: Vec<usize> = (0..lines.len()).filter(|i| lines[*i].starts_with(prefix)).collect();
        let needs = lines.iter().position(|l| l.starts_with("**Needs:**"));
        let block_at = |start: usize| {
            let end = (start + 1..lines.len())
                .find(|i| !lines[*i].starts_with("- "))
                .unwrap_or(lines.len());
            (start, end)
        };
        if let ([start], Some(needs)) = (starts.as_slice(), needs) {
            let (start, end) = block_at(*start);
            if start == needs + 2 && lines[needs + 1].is_empty() && lines[start..end].join("\n") == want {
                continue;
            }
        }
        if !bless || needs.is_none() {
            wrong.push(format!("{}: want, under its Needs line,\n{want}", path.display()));
            continue;
        }
        let mut out: Vec<String> = vec![];
        let mut skip_until = 0;
        for (i, line) in lines.iter().enumerate() {
            if i < skip_until {
                continue;
            }
            if line.starts_with(prefix) {
                skip_until = block_at(i).1;
                continue;
            }
            out.push(line.to_string());
            if line.starts_with("**Needs:**") {
                out.push(String::new());
                out.push(want.clone());
            }
        }
        // No doubled blank line where an old block was removed.
        out.dedup_by(|a, b| a.is_empty() && b.is_empty());
        std::fs::write(&path, out.join("\n") + "\n").unwrap();
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A rule that reads a file or an answer of the kubelet says from which version each of its
/// comparisons holds; only a rule that reads none may say the version does not matter.
#[test]
fn rules_that_read_the_kubelet_say_from_which_version() {
    let kubelet_sources = [
        Source::Checkpoint,
        Source::MemoryState,
        Source::DeviceState,
        Source::DraState,
        Source::Podresources,
    ];
    for r in rules::ALL {
        let reads_kubelet = r
            .needs
            .all
            .iter()
            .any(|n| n.sources().iter().any(|s| kubelet_sources.contains(s)));
        match r.kubelet_versions {
            KubeletVersions::DoNotMatter(why) => {
                assert!(!reads_kubelet, "{} reads the kubelet's files or answers", r.id);
                assert!(!why.is_empty() && !why.ends_with('.'), "{}", r.id);
            }
            KubeletVersions::Comparisons(list) => {
                assert!(!list.is_empty(), "{}", r.id);
                for c in list {
                    for part in [c.what, c.from, c.older, c.unknown] {
                        assert!(!part.is_empty() && !part.ends_with('.'), "{}: {part:?}", r.id);
                    }
                }
            }
        }
    }
    assert_eq!(
        KubeletVersions::Comparisons(&[Comparison {
            what: "a",
            from: "1.20",
            older: "b",
            unknown: "c",
        }])
        .doc_block(),
        "**Kubelet versions:** from which version each comparison holds \
             ([by version](../kubelet.md#behaviour-by-kubelet-version)):\n- a: holds from 1.20. Older: b. Unknown version: c."
    );
}

#[test]
fn coverage_serializes_as_the_report_contract() {
    let c = Coverage::Unknown {
        missing: vec![Source::Podresources],
        reason: "podresources: hung".into(),
    };
    assert_eq!(
        serde_json::to_value(&c).unwrap(),
        serde_json::json!({"status": "unknown", "missing": ["podresources"], "reason": "podresources: hung"})
    );
    assert_eq!(
        serde_json::to_value(Coverage::Judged).unwrap(),
        serde_json::json!({"status": "judged"})
    );
}
