//! `orphaned-local-dir`: Spark scratch data on this node that no running pod will read again.
//!
//! Spark writes shuffle files and spilled blocks into `blockmgr-*` and `spark-*` directories
//! under its local dirs (docs/rules/orphaned-local-dir.md, "Cause"). On Kubernetes there is no
//! external shuffle service, so once the pod that wrote them has stopped nothing reads them
//! again. Who removes them: a JVM that stops cleanly deletes its own; the kubelet removes an
//! emptyDir volume only when the pod *object* is deleted, so a kept `Error` executor (or a
//! driver with `deleteOnTermination=false`) keeps its data; and nobody ever cleans a hostPath
//! root.
//!
//! Each measured directory (`NodeSnapshot::local_dirs`) is judged once nothing below it was
//! modified for `local_dir_min_age_seconds` (a pod that is starting, or has just stopped, is
//! left to Spark and the kubelet):
//!
//! - in an emptyDir (`pod_uid` known), by its pod: with a pod list, orphaned when the pod is
//!   not bound here any more or has finished, alive when it is not finished, not judged while
//!   it is being deleted; without one (`cgroups`), orphaned when the pod's cgroup is gone or has
//!   no processes;
//! - under a hostPath root (pod list needed; never judged from cgroups), orphaned when its
//!   newest mtime is known and no pod that has not finished mounts that root (or a directory
//!   above or below it) as a `spark-local-dir-*` volume, or every such pod was created after it
//!   was last written (it cannot be theirs).
//!
//! One finding per pod (emptyDir) or per root (hostPath) with the bytes summed: warning, info
//! when there are no bytes to free.
//!
//! The judgement is [`crate::facts::orphaned_dirs`], which `repair local-dirs` shares.

use crate::coverage::{Comparison, KubeletVersions, Need, Need::One, Needs, Source};
use crate::facts::rejected_reason;
use crate::finding::{Finding, Severity, Subject};
use crate::hostpath::normalize;
use crate::rules::{RuleGauge, RuleInfo};
use crate::settings::Settings;
use crate::snapshot::{LocalDir, NodeSnapshot, PodInfo};
use crate::text::{LISTED, human_bytes, kubectl_delete};

pub const ID: crate::finding::RuleId = crate::finding::RuleId::new("orphaned-local-dir");

/// This rule in the catalogue ([`crate::rules::ALL`]): what it is, what it needs, from which
/// kubelet versions it holds, and the sinks its findings reach.
pub const RULE: RuleInfo = RuleInfo {
    id: ID,
    title: "Spark scratch data that nothing will read again",
    severity: Severity::Warning,
    looks_at: "Spark local dirs on the node, pods, cgroups",
    fires_when: "blockmgr/spark dirs idle for the minimum age whose pod has finished or is gone, or under a hostPath root no running pod could have written them for (info when they hold no bytes)",
    event_reason: "OrphanedLocalDir",
    needs: Needs {
        all: &[One(Source::LocalDirs), Need::LIVENESS],
        about: &[Source::LocalDirs],
        partial: &[],
    },
    kubelet_versions: KubeletVersions::Comparisons(&[
        Comparison {
            what: "Spark local dirs in emptyDir volumes (`pods/<uid>/volumes/kubernetes.io~empty-dir/`) against the live pods",
            from: "every version nodemedic supports: the kubelet's pod volume directories are laid out the same in old and current kubelet sources",
            older: "judged the same; the version is not used",
            unknown: "judged the same; the version is not used",
        },
        Comparison::PODRESOURCES_LIVENESS,
    ]),
    check,
    condition: None,
    gauge: Some(RuleGauge {
        name: "orphaned_local_dir_bytes",
        help: "Bytes in orphaned Spark scratch directories on this node (the orphaned-local-dir findings' sum).",
        value: bytes,
    }),
    next_judgement: Some(crate::facts::local_dir_age_turn),
};

/// `path` quoted for a POSIX shell when it needs it.
fn shell_quote(path: &str) -> String {
    if !path.is_empty()
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-~+:@,=".contains(&b))
    {
        path.to_string()
    } else {
        format!("'{}'", path.replace('\'', r"'\''"))
    }
}

/// A shell command that removes `dirs` by hand without crossing a mount: `rm
/// --one-file-system` stops at another device, and `findmnt` first refuses a directory with
/// anything mounted below it (a bind mount of the same file system has the same device, which
/// `rm`, `find -xdev` and `du -x` cannot tell).
fn rm_command(dirs: &[&LocalDir]) -> String {
    let listed: Vec<String> = dirs.iter().take(LISTED).map(|d| shell_quote(&d.path)).collect();
    let more = dirs.len().saturating_sub(LISTED);
    format!(
        "for d in {}; do if findmnt -rno TARGET | grep -q \"^$d/\"; then echo \"$d: a file system is mounted inside: \
         unmount it first\"; else rm -rf --one-file-system \"$d\"; fi; done{}",
        listed.join(" "),
        if more > 0 {
            format!(" ({more} more not listed: scan again once these are gone)")
        } else {
            String::new()
        }
    )
}

/// The bytes its findings say the orphaned directories hold (the `nodemedic_orphaned_local_dir_bytes`
/// gauge): the `bytes` this rule writes into each finding's evidence.
pub fn bytes(findings: &[&Finding]) -> u64 {
    findings
        .iter()
        .filter_map(|f| f.evidence.get("bytes").and_then(serde_json::Value::as_u64))
        .fold(0, u64::saturating_add)
}

pub fn check(snap: &NodeSnapshot, facts: &crate::facts::Facts, _settings: &Settings) -> Vec<Finding> {
    let orphaned = &facts.orphaned_dirs;
    // Executors `repair orphans` would delete (their emptyDir goes with the pod object).
    let orphan_uids: Vec<&str> = if orphaned.iter().any(|o| o.pod.is_some()) {
        facts.orphans.iter().map(|o| o.executor.uid.as_str()).collect()
    } else {
        vec![]
    };
    orphaned
        .iter()
        .map(|o| {
            let bytes = o.bytes();
            let newest = o.dirs.iter().filter_map(|d| d.newest_mtime).max();
            let mut roots: Vec<String> = o.dirs.iter().map(|d| normalize(&d.root)).collect();
            roots.sort_unstable();
            roots.dedup();
            let (subject, whose, action) = match (o.pod, o.pod_uid, o.host_root.as_deref()) {
                (Some(p), _, _) => {
                    let repair = if orphan_uids.contains(&p.uid.as_str()) {
                        Some("orphans")
                    } else if rejected_reason(p).is_some() {
                        Some("failed-pods")
                    } else {
                        None
                    };
                    let by_repair = repair.map_or(String::new(), |r| {
                        format!(
                            "kubectl nodemedic repair {node} {r} (shows the plan), then kubectl nodemedic repair \
                             {node} {r} --apply --yes (deletes it with its UID as a precondition; needs pod delete, \
                             components/pod-repairs), or ",
                            node = snap.node
                        )
                    });
                    (
                        Subject::pod(p),
                        format!("of pod {}", p.display()),
                        format!(
                            "{by_repair}{} (deleting the pod object makes the kubelet remove its emptyDir volumes)",
                            kubectl_delete(p)
                        ),
                    )
                }
                (None, Some(uid), _) if !snap.pods.source.is_pod_list() => (
                    Subject::pod_uid(uid),
                    format!("of pod {uid}"),
                    format!(
                        "find the pod first: kubectl get pods -A --field-selector spec.nodeName={} \
                         -o custom-columns=UID:.metadata.uid,NS:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase \
                         | grep {uid}; if it has finished, deleting it removes its emptyDir: kubectl delete pod -n NS \
                         NAME, or kubectl nodemedic repair {} orphans (an orphaned executor) or failed-pods (a \
                         rejected pod), which delete with the UID as a precondition; if there is none, on the node: {}",
                        snap.node,
                        snap.node,
                        rm_command(&o.dirs)
                    ),
                ),
                (None, Some(uid), _) => (
                    Subject::pod_uid(uid),
                    format!("of pod {uid}"),
                    format!(
                        "the pod object is gone but its volume directory is not (the kubelet logs \"orphaned pod \
                         {uid} found, but ... still present on disk\" when its cleanup fails); on the node, once \
                         findmnt | grep {uid} shows nothing mounted: {}",
                        rm_command(&o.dirs)
                    ),
                ),
                (None, None, root) => {
                    let root = root.unwrap_or("?");
                    let repair = format!(
                        "kubectl nodemedic repair {} local-dirs --local-dir-root {}",
                        snap.node,
                        shell_quote(root)
                    );
                    (
                        Subject::node(&snap.node),
                        format!("under hostPath {root}"),
                        format!(
                            "nothing cleans a hostPath: {repair} (shows the plan), then {repair} --apply --yes (checks \
                             each directory again and that no process uses it; the plugin runs it in a one-off pod \
                             on the node with the root writable, see docs/operations/runbooks/repair-local-dirs.md); \
                             or on the node: {}",
                            rm_command(&o.dirs)
                        ),
                    )
                }
            };
            let severity = if bytes == 0 { Severity::Info } else { Severity::Warning };
            Finding::new(
                ID,
                severity,
                subject,
                format!(
                    "{} Spark scratch dir(s) {whose} hold {} that nothing will read again: {}",
                    o.dirs.len(),
                    human_bytes(bytes),
                    o.reason
                ),
                action,
            )
            .with("volume_type", if o.host_root.is_some() { "hostPath" } else { "emptyDir" })
            .with("pod_uid", o.pod_uid)
            .with("pod", o.pod.map(PodInfo::display))
            .with("pod_phase", o.pod.map(|p| p.phase.clone()))
            .with("app_id", o.pod.and_then(|p| p.spark_app()))
            .with("spark_role", o.pod.and_then(|p| p.spark_role()))
            .with("reason", o.reason.as_str())
            .with("liveness_source", snap.pods.source.as_str())
            .with("roots", roots)
            .with("bytes", bytes)
            .with("dir_count", o.dirs.len())
            .with(
                "dirs",
                o.dirs.iter().take(LISTED).map(|d| d.path.clone()).collect::<Vec<_>>(),
            )
            .with("newest_mtime", newest)
            .with("idle_seconds", newest.map(|t| snap.taken_at - t))
            .with(
                "root_users",
                (!o.root_users.is_empty())
                    .then(|| o.root_users.iter().take(LISTED).map(|p| p.display()).collect::<Vec<_>>()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testkit::{
        NOW, SnapshotBuilder, empty_dir_scratch, host_path_scratch, leaf, pod_cgroup, spark_executor,
    };
    use crate::snapshot::{DriverLookup, LocalDirVolume, LookupMethod, PodSource};

    const APP: &str = "spark-7f3a9c0e12d44b8a9f6d7e2a5c1b8d40";
    const ROOT: &str = "/mnt/nvme0/spark";
    const GIB: u64 = 1 << 30;

    fn on_host_path(mut p: PodInfo) -> PodInfo {
        p.local_dir_volumes = vec![LocalDirVolume {
            name: "spark-local-dir-1".into(),
            host_path: Some(format!("{ROOT}/")),
            memory: false,
            claim: None,
            size_limit_bytes: None,
        }];
        p
    }

    fn uids(snap: &NodeSnapshot) -> Vec<String> {
        crate::rules::testkit::judged(check, snap, &Settings::default())
            .iter()
            .map(|f| {
                f.evidence
                    .get("pod_uid")
                    .or_else(|| f.evidence.get("roots"))
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            })
            .collect()
    }

    #[test]
    fn empty_dirs_judged_by_their_pod() {
        let dirs = vec![
            empty_dir_scratch("running", 5 * GIB, Some(NOW - 7200)),
            empty_dir_scratch("failed", 12 * GIB, Some(NOW - 7200)),
            empty_dir_scratch("fresh-failed", GIB, Some(NOW - 60)),
            empty_dir_scratch("gone", 2 * GIB, Some(NOW - 86400)),
            empty_dir_scratch("unknown-age-gone", 0, None),
        ];
        let mut deleting = spark_executor("deleting", APP, "etl", 5, "Failed");
        deleting.deleting = true;
        let pods = [
            spark_executor("running", APP, "etl", 1, "Running"),
            spark_executor("failed", APP, "etl", 2, "Failed"),
            spark_executor("fresh-failed", APP, "etl", 3, "Failed"),
            deleting,
        ];
        let mut with_deleting = dirs.clone();
        with_deleting.push(empty_dir_scratch("deleting", GIB, Some(NOW - 7200)));
        let snap = SnapshotBuilder::spark_node(&pods)
            .with_local_dirs(with_deleting)
            .build();
        assert_eq!(uids(&snap), ["\"failed\"", "\"gone\"", "\"unknown-age-gone\""]);
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].subject.name.as_deref(), Some("etl-exec-2"));
        assert_eq!(f[0].evidence["bytes"], 12 * GIB);
        assert_eq!(f[0].evidence["app_id"], APP);
        assert_eq!(f[0].evidence["idle_seconds"], 7200);
        assert!(
            f[0].remedy.starts_with("kubectl delete pod -n spark-jobs etl-exec-2 "),
            "{}",
            f[0].remedy
        );
        assert!(
            f[0].remedy
                .ends_with("(deleting the pod object makes the kubelet remove its emptyDir volumes)"),
            "neither an orphaned executor nor a rejected pod: no repair named: {}",
            f[0].remedy
        );
        assert!(
            !f[0].remedy.contains("local-dirs"),
            "local-dirs never touches an emptyDir"
        );
        assert_eq!(f[1].subject.uid.as_deref(), Some("gone"));
        assert!(f[1].remedy.contains(
            "for d in /var/lib/kubelet/pods/gone/volumes/kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-gone; do if \
             findmnt -rno TARGET | grep -q \"^$d/\"; then echo \"$d: a file system is mounted inside: unmount it \
             first\"; else rm -rf --one-file-system \"$d\"; fi; done"
        ), "{}", f[1].remedy);
        assert_eq!(f[2].severity, Severity::Info, "nothing to free");
    }

    #[test]
    fn without_a_pod_list_cgroups_decide() {
        let dirs = vec![
            empty_dir_scratch("live", GIB, Some(NOW - 7200)),
            empty_dir_scratch("empty-cgroup", GIB, Some(NOW - 7200)),
            empty_dir_scratch("no-cgroup", GIB, Some(NOW - 7200)),
            host_path_scratch(ROOT, "blockmgr-1", GIB, Some(NOW - 86400)),
        ];
        let snap = SnapshotBuilder::spark_node(&[])
            .pod_source(PodSource::Cgroups)
            .with_cgroup_tree(vec![
                pod_cgroup("live", vec![leaf("c1", "0-1", 2)]),
                pod_cgroup("empty-cgroup", vec![leaf("c2", "0-1", 0)]),
            ])
            .with_local_dirs(dirs.clone())
            .build();
        assert_eq!(
            uids(&snap),
            ["\"empty-cgroup\"", "\"no-cgroup\""],
            "hostPath not judged"
        );
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f[0].evidence["liveness_source"], "cgroups");
        assert!(f[0].remedy.starts_with("find the pod first"));
        assert!(
            f[0].remedy
                .contains("kubectl nodemedic repair node-a orphans (an orphaned executor) or failed-pods"),
            "{}",
            f[0].remedy
        );

        let unreadable = SnapshotBuilder::spark_node(&[])
            .pod_source(PodSource::Cgroups)
            .with_local_dirs(dirs)
            .build();
        assert!(crate::rules::testkit::judged(check, &unreadable, &Settings::default()).is_empty());
    }

    #[test]
    fn host_path_roots() {
        let mut user = on_host_path(spark_executor("e1", APP, "etl", 1, "Running"));
        user.created_at = Some(NOW - 3 * 3600);
        let dirs = vec![
            host_path_scratch(ROOT, "blockmgr-old", 40 * GIB, Some(NOW - 86400)),
            host_path_scratch(ROOT, "blockmgr-current", GIB, Some(NOW - 2 * 3600)),
            host_path_scratch(ROOT, "spark-unknown-age", GIB, None),
            host_path_scratch("/mnt/nvme1/spark", "blockmgr-x", GIB, Some(NOW - 600)),
        ];
        let cases: Vec<(&str, Vec<PodInfo>, Vec<&str>)> = vec![
            (
                "no user: every old dir with a known age",
                vec![],
                vec!["/mnt/nvme0/spark/blockmgr-current", "/mnt/nvme0/spark/blockmgr-old"],
            ),
            (
                "a running user: only dirs older than it",
                vec![user.clone()],
                vec!["/mnt/nvme0/spark/blockmgr-old"],
            ),
            (
                "a finished pod does not use it",
                vec![on_host_path(spark_executor("e2", APP, "etl", 2, "Failed"))],
                vec!["/mnt/nvme0/spark/blockmgr-current", "/mnt/nvme0/spark/blockmgr-old"],
            ),
            (
                "a user with no creation time: cannot tell",
                vec![{
                    let mut u = user.clone();
                    u.created_at = None;
                    u
                }],
                vec![],
            ),
        ];
        for (name, pods, want) in cases {
            let snap = SnapshotBuilder::spark_node(&pods).with_local_dirs(dirs.clone()).build();
            let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
            let mut got: Vec<String> = f
                .iter()
                .flat_map(|f| f.evidence["dirs"].as_array().cloned().unwrap_or_default())
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            got.sort();
            assert_eq!(got, want, "{name}");
            for f in &f {
                assert_eq!(f.subject.kind, crate::finding::SubjectKind::Node);
                assert_eq!(f.evidence["volume_type"], "hostPath");
                assert_eq!(f.evidence["roots"], serde_json::json!([ROOT]));
            }
        }
        let snap = SnapshotBuilder::spark_node(&[user]).with_local_dirs(dirs).build();
        let f = &crate::rules::testkit::judged(check, &snap, &Settings::default())[0];
        assert_eq!(f.evidence["root_users"], serde_json::json!(["spark-jobs/etl-exec-1"]));
        assert_eq!(
            f.remedy,
            "nothing cleans a hostPath: kubectl nodemedic repair node-a local-dirs --local-dir-root /mnt/nvme0/spark \
             (shows the plan), then kubectl nodemedic repair node-a local-dirs --local-dir-root /mnt/nvme0/spark \
             --apply --yes (checks each directory again and that no process uses it; the plugin runs it in a one-off pod \
             on the node with the root writable, see docs/operations/runbooks/repair-local-dirs.md); or on the node: \
             for d in /mnt/nvme0/spark/blockmgr-old; do if findmnt -rno TARGET | grep -q \"^$d/\"; then \
             echo \"$d: a file system is mounted inside: unmount it first\"; else rm -rf --one-file-system \"$d\"; \
             fi; done"
        );
    }

    #[test]
    fn remedy_names_the_repair_that_deletes_the_pod() {
        // An orphaned executor (its driver is gone): `repair orphans`.
        let exec = spark_executor("e1", APP, "etl", 1, "Failed");
        let snap = SnapshotBuilder::spark_node(&[exec])
            .with_driver(
                "e1",
                DriverLookup::Gone {
                    by: LookupMethod::Labels,
                    expected: format!("a pod labelled spark-role=driver of {APP}"),
                },
            )
            .with_local_dirs(vec![empty_dir_scratch("e1", GIB, Some(NOW - 7200))])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].remedy,
            "kubectl nodemedic repair node-a orphans (shows the plan), then kubectl nodemedic repair node-a orphans \
             --apply --yes (deletes it with its UID as a precondition; needs pod delete, components/pod-repairs), or \
             kubectl delete pod -n spark-jobs etl-exec-1 (deleting the pod object makes the kubelet remove its emptyDir volumes)"
        );

        // A pod the kubelet rejected: `repair failed-pods`.
        let mut rejected = spark_executor("e2", APP, "etl", 2, "Failed");
        rejected.reason = Some("OutOfcpu".into());
        rejected.message = Some("Pod was rejected: Node didn't have enough resource: cpu".into());
        let snap = SnapshotBuilder::spark_node(&[rejected])
            .with_local_dirs(vec![empty_dir_scratch("e2", GIB, Some(NOW - 7200))])
            .build();
        let f = crate::rules::testkit::judged(check, &snap, &Settings::default());
        assert!(
            f[0].remedy
                .starts_with("kubectl nodemedic repair node-a failed-pods (shows the plan), then"),
            "{}",
            f[0].remedy
        );
    }

    #[test]
    fn odd_input() {
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
        assert_eq!(shell_quote(""), "''");
        let snap = SnapshotBuilder::spark_node(&[]).build();
        assert!(
            crate::rules::testkit::judged(check, &snap, &Settings::default()).is_empty(),
            "local dirs not read"
        );
        let many: Vec<LocalDir> = (0..25)
            .map(|i| host_path_scratch(ROOT, &format!("blockmgr-{i}"), 1, Some(NOW - 86400)))
            .collect();
        let snap = SnapshotBuilder::spark_node(&[]).with_local_dirs(many).build();
        let f = &crate::rules::testkit::judged(check, &snap, &Settings::default())[0];
        assert_eq!(f.evidence["dir_count"], 25);
        assert_eq!(f.evidence["dirs"].as_array().map(Vec::len), Some(20));
        assert!(f.remedy.contains("(5 more not listed: scan again once these are gone)"));
    }
}
