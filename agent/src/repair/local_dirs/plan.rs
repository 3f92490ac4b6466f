//! The local-dirs plan: what `orphaned-local-dir` reports directly under a usable configured
//! root, and why everything else it reports is left.

use nodemedic_rules::Settings;
use nodemedic_rules::facts;
use nodemedic_rules::snapshot::{NodeSnapshot, Observed, PodSource};
use serde_json::{Map, json};

use std::os::unix::ffi::OsStrExt as _;

use nodemedic_rules::hostpath::{normalize, unescape};

use super::walk::open_root;
use super::{DirCandidate, LeftDir, LocalDirPlan, RootState};
use crate::collect::localdirs::is_spark_scratch_name;
use crate::host::HostPaths;

/// The plan: the scratch dirs `orphaned-local-dir` reports directly under a usable configured
/// root; the rule's other dirs (emptyDir volumes, other roots) are listed as left.
pub fn plan(host: &HostPaths, roots: &[String], snapshot: &NodeSnapshot, settings: &Settings) -> LocalDirPlan {
    let mut plan = LocalDirPlan {
        node: snapshot.node.clone(),
        roots: vec![],
        remove: vec![],
        left: vec![],
        notes: vec![],
    };
    for root in roots {
        let state = match open_root(host, root) {
            Ok(r) => RootState {
                root: normalize(root),
                usable: true,
                problem: None,
                identity: Some((r.dev, r.ino)),
            },
            Err(problem) => RootState {
                root: normalize(root),
                usable: false,
                problem: Some(problem.to_string()),
                identity: None,
            },
        };
        plan.roots.push(state);
    }
    match &snapshot.host.local_dirs {
        Observed::Ok(_) => {}
        other => plan
            .notes
            .push(format!("Spark local dirs were not measured: {}", other.status())),
    }
    if snapshot.pods.source == PodSource::Cgroups {
        plan.notes.push(
            "no pod list (API or --pods): who uses a hostPath root cannot be judged, so nothing under one is removed"
                .into(),
        );
    }
    for o in facts::orphaned_dirs(snapshot, settings) {
        for d in &o.dirs {
            let left = |because: String| LeftDir {
                path: d.path.clone(),
                bytes: d.bytes,
                why: o.reason.clone(),
                left_because: because,
            };
            if let Some(uid) = o.pod_uid {
                let whose = o
                    .pod
                    .map_or_else(|| format!("pod {uid}"), |p| format!("pod {}", p.display()));
                plan.left.push(left(format!(
                    "it is in an emptyDir volume of {whose}: deleting the pod object makes the kubelet remove it \
                     (nodemedic repair orphans / failed-pods, or kubectl delete pod); the kubelet's directory is \
                     never touched"
                )));
                continue;
            }
            let root = normalize(&d.root);
            let Some(state) = plan.roots.iter().find(|r| r.root == root) else {
                plan.left
                    .push(left(format!("{root} is not a configured local-dir root")));
                continue;
            };
            if let Some(problem) = &state.problem {
                plan.left.push(left(format!("its root is refused: {problem}")));
                continue;
            }
            let (parent, name) = match d.path.rsplit_once('/') {
                Some((p, n)) => (normalize(if p.is_empty() { "/" } else { p }), n),
                None => (String::new(), d.path.as_str()),
            };
            if parent != root || !is_spark_scratch_name(name) || name.contains('/') {
                plan.left.push(left(format!(
                    "it is not a blockmgr-*/spark-* directory directly under {root}"
                )));
                continue;
            }
            // The name as the scan showed it may be escaped (not UTF-8): the real bytes.
            let local = host.host(&parent).join(std::ffi::OsStr::from_bytes(&unescape(name)));
            let identity = match std::fs::symlink_metadata(&local) {
                Ok(m) if m.file_type().is_dir() => {
                    use std::os::unix::fs::MetadataExt;
                    Some((m.dev(), m.ino()))
                }
                Ok(m) if m.file_type().is_symlink() => {
                    plan.left.push(left("it is a symlink: never followed".into()));
                    continue;
                }
                Ok(_) => {
                    plan.left.push(left("it is not a directory: left alone".into()));
                    continue;
                }
                Err(e) => {
                    plan.left.push(left(format!("it cannot be read now: {e}")));
                    continue;
                }
            };
            let mut evidence = Map::new();
            evidence.insert("path".into(), json!(d.path));
            evidence.insert("root".into(), json!(root));
            evidence.insert("bytes".into(), json!(d.bytes));
            if let Some(t) = d.newest_mtime {
                evidence.insert("newest_mtime".into(), json!(t));
                evidence.insert("idle_seconds".into(), json!(snapshot.taken_at - t));
            }
            evidence.insert("reason".into(), json!(o.reason));
            evidence.insert("liveness_source".into(), json!(snapshot.pods.source.as_str()));
            if !o.root_users.is_empty() {
                evidence.insert(
                    "root_users".into(),
                    json!(o.root_users.iter().map(|p| p.display()).collect::<Vec<_>>()),
                );
            }
            plan.remove.push(DirCandidate {
                path: d.path.clone(),
                root: root.to_string(),
                name: name.to_string(),
                bytes: d.bytes,
                newest_mtime: d.newest_mtime,
                why: o.reason.clone(),
                evidence,
                identity,
            });
        }
    }
    plan
}
