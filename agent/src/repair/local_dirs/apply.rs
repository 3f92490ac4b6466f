//! Removing a planned scratch directory, after every check of the module's documentation.

use std::collections::BTreeMap;
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::SFlag;
use nix::unistd::UnlinkatFlags;
use nodemedic_rules::Settings;
use nodemedic_rules::facts;
use nodemedic_rules::snapshot::{LocalDir, NodeSnapshot, Observed};
use serde_json::json;

use super::procs::processes_holding;
use super::walk::*;
use super::{DirCandidate, FreshPods, LocalDirPlan, RootState};
use crate::host::HostPaths;
use crate::repair::audit::{
    ActionRecord, ActionResult, ActionTarget, Audit, RateLimiter, RepairAction, human_bytes, now_unix,
};

/// Removes one candidate after every check; the record says what happened.
fn remove_one(
    host: &HostPaths,
    c: &DirCandidate,
    root_state: &RootState,
    judge: &dyn Fn(&LocalDir) -> Option<String>,
    limiter: &mut Option<&mut RateLimiter>,
) -> Option<ActionRecord> {
    let mut rec = ActionRecord::new(
        RepairAction::LocalDirs,
        ActionResult::Skipped,
        ActionTarget::directory(&c.path),
        format!("remove directory {}", c.path),
        c.why.clone(),
        c.evidence.clone(),
    );
    let skip = |mut rec: ActionRecord, why: String| {
        rec.detail = Some(why);
        Some(rec)
    };
    let root = match open_root(host, &c.root) {
        Ok(r) => r,
        Err(e) => return skip(rec, format!("its root is refused: {e}")),
    };
    if Some((root.dev, root.ino)) != root_state.identity {
        return skip(rec, format!("the root {} is not the directory the plan saw", c.root));
    }
    let raw = nodemedic_rules::hostpath::unescape(&c.name);
    let name = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&raw);
    let st = match nix::sys::stat::fstatat(root.fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return skip(rec, "it is already gone".into()),
        Err(e) => return skip(rec, format!("cannot read it: {}", errno(e))),
    };
    let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    if kind == SFlag::S_IFLNK {
        return skip(rec, "it is now a symlink: never followed, left alone".into());
    }
    if !is_dir(&st) {
        return skip(rec, "it is not a directory any more: left alone".into());
    }
    if Some(identity(&st)) != c.identity {
        return skip(
            rec,
            "it is not the directory the plan saw (replaced since): left alone".into(),
        );
    }
    // Measure it again (bytes, newest change, every inode below it).
    let measured = open_child(&root.fd, name, &st, &root, "left alone").and_then(|fd| measure(fd, &st, &root));
    let m = match measured {
        Ok(m) => m,
        Err(e) => return skip(rec, e.to_string()),
    };
    rec.evidence.insert("bytes_measured".into(), json!(m.bytes));
    rec.evidence.insert("entries".into(), json!(m.entries));
    // Judged again by the rule with the fresh pod list and the new measurement.
    let dir = LocalDir {
        path: c.path.clone(),
        root: c.root.clone(),
        pod_uid: None,
        bytes: m.bytes,
        newest_mtime: m.newest_mtime,
    };
    if let Some(why) = judge(&dir) {
        return skip(rec, why);
    }
    // No live process may use anything below it.
    let procs = processes_holding(&host.proc(), &m.inodes);
    rec.evidence
        .insert("processes_inspected".into(), json!(procs.inspected));
    if let Some(why) = procs.refusal() {
        return skip(rec, why);
    }
    if let Some(lim) = limiter.as_deref_mut() {
        if !lim.try_acquire() {
            tracing::info!(
                target: "nodemedic::repair",
                action = "local-dirs",
                max_actions_per_hour = lim.max_per_hour(),
                "repair rate limit reached; the rest waits"
            );
            return None;
        }
    }
    // Open it once more (the process check held no descriptor below it) and remove.
    let mut freed = 0u64;
    let result = open_child(&root.fd, name, &st, &root, "stopped")
        .and_then(|fd| {
            contained(&fd, &root.canon)?;
            remove_contents(&fd, &root, 0, &mut freed)
        })
        .and_then(|()| {
            nix::unistd::unlinkat(root.fd.as_fd(), name, UnlinkatFlags::RemoveDir)
                .map_err(|errno| WalkError::RmdirTop { errno })
        });
    rec.bytes_freed = Some(freed);
    match result {
        Ok(()) => rec.result = ActionResult::Applied,
        Err(e) => {
            rec.result = ActionResult::Failed;
            rec.detail = Some(format!("{e} ({} freed before it stopped)", human_bytes(freed)));
        }
    }
    Some(rec)
}

/// Removes the plan's directories in order, each only after the checks of this module's
/// documentation; every record is logged as it happens (Events: [`Audit::events`] afterwards).
/// `fresh` is the pod list to judge with now; `snapshot` the one the plan came from. With a
/// limiter each removal started takes a unit; once none is left the rest waits.
pub fn apply(
    host: &HostPaths,
    plan: &LocalDirPlan,
    snapshot: &NodeSnapshot,
    fresh: &FreshPods,
    settings: &Settings,
    audit: &Audit,
    mut limiter: Option<&mut RateLimiter>,
) -> Vec<ActionRecord> {
    let mut base = snapshot.clone();
    base.pods.bound = fresh
        .pods
        .iter()
        .filter(|p| p.node_name.as_deref() == Some(snapshot.node.as_str()))
        .cloned()
        .collect();
    base.pods.source = fresh.source.clone();
    let roots: BTreeMap<&str, &RootState> = plan.roots.iter().map(|r| (r.root.as_str(), r)).collect();
    let mut out = vec![];
    for c in &plan.remove {
        let Some(state) = roots.get(c.root.as_str()) else {
            continue;
        };
        let judge = |dir: &LocalDir| -> Option<String> {
            let mut snap = base.clone();
            snap.taken_at = now_unix();
            snap.host.local_dirs = Observed::Ok(vec![dir.clone()]);
            let orphaned = facts::orphaned_dirs(&snap, settings);
            if orphaned.iter().any(|o| o.dirs.iter().any(|d| d.path == dir.path)) {
                None
            } else {
                Some(
                    "no longer judged orphaned on the re-check right before removal (changed recently, or a pod \
                     that may have written it mounts the root)"
                        .into(),
                )
            }
        };
        let Some(rec) = remove_one(host, c, state, &judge, &mut limiter) else {
            break; // rate limited
        };
        audit.log(&rec);
        out.push(rec);
    }
    out
}
