//! Spark scratch directories that nothing will read again.

use std::collections::BTreeMap;

use crate::hostpath::normalize;

use crate::settings::Settings;
use crate::snapshot::{LocalDir, NodeSnapshot, Observed, PodInfo, PodSource};

/// Orphaned scratch dirs of one pod or one hostPath root.
#[derive(Debug, Clone, PartialEq)]
pub struct OrphanedDirs<'a> {
    /// The pod whose emptyDir holds them (`None`: a hostPath root).
    pub pod_uid: Option<&'a str>,
    /// That pod, when it is still in the pod list.
    pub pod: Option<&'a PodInfo>,
    /// The hostPath root they are under.
    pub host_root: Option<String>,
    pub dirs: Vec<&'a LocalDir>,
    /// Why they are orphaned, for people.
    pub reason: String,
    /// Live pods that mount the hostPath root (the dirs predate them all).
    pub root_users: Vec<&'a PodInfo>,
}

impl OrphanedDirs<'_> {
    pub fn bytes(&self) -> u64 {
        self.dirs.iter().map(|d| d.bytes).sum()
    }
}

enum Owner {
    Alive,
    Dead(String),
    Unknown,
}

fn judge_dir_owner(snap: &NodeSnapshot, uid: &str) -> Owner {
    match snap.pods.source {
        PodSource::Api | PodSource::File => match snap.pod(uid) {
            None => Owner::Dead(format!("pod {uid} is not bound to node {} any more", snap.node)),
            Some(p) if p.deleting => Owner::Unknown,
            Some(p) if p.is_terminal() => Owner::Dead(format!("pod {} has finished ({})", p.display(), p.phase)),
            Some(_) => Owner::Alive,
        },
        // The kubelet's list names pods, not UIDs: a pod it lists under a known UID is alive;
        // the rest is judged by cgroups, as without any list.
        PodSource::PodResources
            if snap
                .host
                .kubelet_view
                .ok()
                .is_some_and(|v| v.pods.iter().any(|p| p.uids.iter().any(|u| u == uid))) =>
        {
            Owner::Alive
        }
        PodSource::PodResources | PodSource::Cgroups => match &snap.host.cgroups {
            Observed::Ok(tree) => match tree.pod(uid) {
                Some(pc) if pc.alive() => Owner::Alive,
                Some(_) => Owner::Dead(format!("the cgroup of pod {uid} has no processes left")),
                None => Owner::Dead(format!("pod {uid} has no cgroup on this node")),
            },
            _ => Owner::Unknown,
        },
    }
}

/// Whether one of two host paths (without trailing slashes) contains the other: a pod that mounts
/// a parent or a child of a root may write into it.
pub(crate) fn overlaps(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        outer == "/"
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    within(a, b) || within(b, a)
}

/// The orphaned scratch dirs on this node, grouped by pod and by hostPath root.
pub fn orphaned_dirs<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Vec<OrphanedDirs<'a>> {
    crate::facts::count("orphaned_dirs");
    let Observed::Ok(all) = &snap.host.local_dirs else {
        return vec![];
    };
    let idle = |d: &LocalDir| d.newest_mtime.map(|t| snap.taken_at - t);
    let old_enough = |d: &LocalDir| idle(d).is_none_or(|s| s >= settings.local_dir_min_age_seconds);

    let mut by_pod: BTreeMap<&str, Vec<&LocalDir>> = BTreeMap::new();
    let mut by_root: BTreeMap<String, Vec<&LocalDir>> = BTreeMap::new();
    for d in all.iter().filter(|d| old_enough(d)) {
        match d.pod_uid.as_deref() {
            Some(uid) => by_pod.entry(uid).or_default().push(d),
            None => by_root.entry(normalize(&d.root)).or_default().push(d),
        }
    }

    let mut out = Vec::new();
    for (uid, dirs) in by_pod {
        if let Owner::Dead(reason) = judge_dir_owner(snap, uid) {
            out.push(OrphanedDirs {
                pod_uid: Some(uid),
                pod: snap.pod(uid),
                host_root: None,
                dirs,
                reason,
                root_users: vec![],
            });
        }
    }

    // Who mounts a hostPath root can only be read from a pod list.
    if !snap.pods.source.is_pod_list() {
        return out;
    }
    for (root, dirs) in by_root {
        let users: Vec<&PodInfo> = snap
            .pods
            .bound
            .iter()
            .filter(|p| !p.is_terminal())
            .filter(|p| {
                p.local_dir_volumes
                    .iter()
                    .any(|v| v.host_path.as_deref().is_some_and(|h| overlaps(&normalize(h), &root)))
            })
            .collect();
        // A dir last written before every user was created cannot be theirs.
        let oldest_user = users.iter().map(|p| p.created_at).min().unwrap_or(Some(i64::MAX));
        let Some(oldest_user) = oldest_user else {
            continue; // a user with no creation time: cannot tell
        };
        let orphaned: Vec<&LocalDir> = dirs
            .into_iter()
            .filter(|d| d.newest_mtime.is_some_and(|t| t < oldest_user))
            .collect();
        if orphaned.is_empty() {
            continue;
        }
        let reason = if users.is_empty() {
            format!("no running pod on {} mounts {root} as a Spark local dir", snap.node)
        } else {
            format!(
                "last written before any of the {} running pod(s) that mount {root} was created",
                users.len()
            )
        };
        out.push(OrphanedDirs {
            pod_uid: None,
            pod: None,
            host_root: Some(root),
            dirs: orphaned,
            reason,
            root_users: users,
        });
    }
    out
}

/// Seconds until a scratch dir seen now becomes old enough to judge
/// (`local_dir_min_age_seconds` after its newest file): `orphaned-local-dir` judges again then.
/// `None` when every dir is old enough already.
pub fn local_dir_age_turn(snap: &NodeSnapshot, settings: &Settings) -> Option<f64> {
    let Observed::Ok(all) = &snap.host.local_dirs else {
        return None;
    };
    all.iter()
        .filter_map(|d| d.newest_mtime)
        .map(|t| (t + settings.local_dir_min_age_seconds - snap.taken_at) as f64)
        .filter(|left| *left > 0.0)
        .min_by(f64::total_cmp)
}
