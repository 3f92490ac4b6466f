//! `nodemedic repair local-dirs`: remove orphaned Spark scratch directories (`blockmgr-*`,
//! `spark-*`) under the configured hostPath local-dir roots, and nowhere else.
//!
//! Candidates are what `orphaned-local-dir` reports under a hostPath root (nothing ever cleans
//! those). Scratch dirs in emptyDir volumes are never removed here: deleting the pod object
//! makes the kubelet remove them (`nodemedic repair orphans` / `failed-pods`, or `kubectl
//! delete pod`), and nodemedic does not touch the kubelet's own directory.
//!
//! Safety, right before each removal:
//!
//! - the root is opened with `O_DIRECTORY|O_NOFOLLOW` after checking that neither it nor any
//!   directory between the host root and it is a symlink (a root that is a symlink is refused),
//!   that it is not the host root and not inside the kubelet's directory, and that it is still
//!   the directory (device, inode) the plan saw;
//! - the scratch directory is opened relative to the root's descriptor, by name, with
//!   `O_NOFOLLOW`: a symlink, a file where a directory is expected, or another directory than
//!   the plan's is left alone;
//! - every directory below is opened the same way, relative to its parent's descriptor, and its
//!   real path (`/proc/self/fd/N`) must still be under the root's canonical path; symlinks are
//!   unlinked, never followed; a file system mounted inside stops the removal;
//! - the directory is measured again and judged again by the rule with a fresh pod list (a pod
//!   that mounts the root and may have written it keeps it), and no live process may have its
//!   working directory, root, an open file or a memory-mapped file below it (`<host>/proc/*/
//!   {cwd,root,fd/*,maps}`, compared by device and inode, so any mount namespace counts); a
//!   process that cannot be inspected (the agent lacks `CAP_SYS_PTRACE`) makes the check
//!   fail, and the directory stays.
//!
//! The bytes freed are the sizes of the regular files removed, read just before each removal
//! without following symlinks.

use std::io::Write;
use std::path::PathBuf;

use nodemedic_rules::Settings;
use nodemedic_rules::snapshot::{PodInfo, PodSource};
use serde_json::{Map, Value, json};

use super::audit::{ActionRecord, Audit, human_bytes};
use super::command::{self, Confirm, End, Flow, Ran, Readiness, Repair, RepairError};
use super::pods::{evidence_line, records_end, render_records};
use crate::host::HostPaths;
use crate::kube_api;
use crate::scan::{self, Pods};

mod apply;
mod plan;
mod procs;
mod walk;

pub use apply::apply;
pub use plan::plan;
pub use procs::{ProcessCheck, processes_holding};

/// At most this many entries below one scratch directory; a larger one is left (remove it by
/// hand): its inodes are what live processes are compared against.
pub const MAX_ENTRIES: usize = 200_000;
/// At most this deep below a scratch directory (Spark writes two levels).
pub const MAX_DEPTH: usize = 64;
/// At most this many process links (`cwd`, `root`, fds, mappings) are inspected per check; past
/// it the check fails.
pub const MAX_PROCESS_LINKS: usize = 2_000_000;

/// A configured root and whether removals may happen under it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RootState {
    /// The host path as configured.
    pub root: String,
    pub usable: bool,
    /// Why it is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// (device, inode) of the root when the plan was made.
    #[serde(skip)]
    pub(super) identity: Option<(u64, u64)>,
}

/// A scratch directory the plan removes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DirCandidate {
    /// Host path.
    pub path: String,
    /// The configured root it is directly under (host path).
    pub root: String,
    /// Its name in the root.
    pub name: String,
    /// Bytes as measured by the scan.
    pub bytes: u64,
    pub newest_mtime: Option<i64>,
    /// The rule's reason.
    pub why: String,
    pub evidence: Map<String, Value>,
    /// (device, inode) when the plan was made.
    #[serde(skip)]
    pub(super) identity: Option<(u64, u64)>,
}

/// A scratch directory the rule reports that this repair leaves, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeftDir {
    pub path: String,
    pub bytes: u64,
    pub why: String,
    pub left_because: String,
}

/// What `repair local-dirs` would remove.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LocalDirPlan {
    pub node: String,
    pub roots: Vec<RootState>,
    pub remove: Vec<DirCandidate>,
    pub left: Vec<LeftDir>,
    pub notes: Vec<String>,
}

impl LocalDirPlan {
    /// The bytes the plan would free, as measured by the scan.
    pub fn bytes(&self) -> u64 {
        self.remove.iter().map(|c| c.bytes).sum()
    }
}

/// The pod list the re-check right before each removal judges with.
#[derive(Debug, Clone)]
pub struct FreshPods {
    pub pods: Vec<PodInfo>,
    pub source: PodSource,
}

/// What `repair local-dirs` runs with (the command line, as plain values).
#[derive(Debug, Clone)]
pub struct Options {
    pub host: HostPaths,
    /// This node; default: the host's name.
    pub node: Option<String>,
    /// The configured roots (host paths); only directories directly under these are removed.
    pub roots: Vec<String>,
    /// Judge liveness with this pods file instead of the API.
    pub pods_file: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,
    /// The rule settings (`local_dir_min_age_seconds`, ...).
    pub settings: Settings,
    /// The name this run's Events are reported by.
    pub instance: String,
    pub flow: Flow,
}

/// Where the pod list comes from, the first time and right before each removal.
enum Source {
    Api(Box<kube_api::Connection>),
    File(PathBuf),
}

struct LocalDirs<'a> {
    opts: &'a Options,
    node: String,
    source: Source,
    runtime: &'a tokio::runtime::Runtime,
    snapshot: nodemedic_rules::snapshot::NodeSnapshot,
}

impl LocalDirs<'_> {
    fn pods(&self) -> Pods {
        match &self.source {
            Source::Api(api) => Pods::Api {
                api: api.clone(),
                node: self.node.clone(),
                fallback: false,
            },
            Source::File(path) => Pods::File(path.clone()),
        }
    }

    /// The pod list again, for the re-check right before removing.
    fn fresh(&self) -> Result<FreshPods, RepairError> {
        let opts = scan::Options {
            host: crate::collect::HostOptions {
                node: Some(self.node.clone()),
                ..Default::default()
            },
            host_reads: scan::HostReads::PodsOnly,
            ..Default::default()
        };
        let scanned = self
            .runtime
            .block_on(scan::snapshot::<kube_api::ApiDirectory>(
                &self.opts.host,
                self.pods(),
                None,
                &opts,
            ))
            .map_err(|e| {
                RepairError::CouldNotRun(format!("{e} (local-dirs needs a pod list: the API, or --pods FILE)"))
            })?;
        Ok(FreshPods {
            pods: scanned.snapshot.pods.bound,
            source: scanned.snapshot.pods.source,
        })
    }
}

impl Repair for LocalDirs<'_> {
    type Plan = LocalDirPlan;
    type Applied = Vec<ActionRecord>;

    fn readiness(&self, plan: &LocalDirPlan) -> Readiness {
        if plan.remove.is_empty() {
            Readiness::NothingToDo
        } else {
            Readiness::Ready
        }
    }

    fn question(&self, plan: &LocalDirPlan) -> String {
        format!(
            "Remove the {} director(ies) above ({})?",
            plan.remove.len(),
            human_bytes(plan.bytes())
        )
    }

    fn render_plan(&self, plan: &LocalDirPlan, dry_run: bool) -> String {
        render_plan(plan, !dry_run)
    }

    fn apply(&mut self, plan: &LocalDirPlan) -> Result<Vec<ActionRecord>, RepairError> {
        let fresh = self.fresh()?;
        let client = match &self.source {
            Source::Api(api) => Some(api.client.clone()),
            Source::File(_) => None,
        };
        let audit = Audit::new(client.clone(), &self.node, &self.opts.instance).echoing();
        let mut records = apply(
            &self.opts.host,
            plan,
            &self.snapshot,
            &fresh,
            &self.opts.settings,
            &audit,
            None,
        );
        if client.is_some() {
            self.runtime.block_on(audit.events(&mut records));
        }
        Ok(records)
    }

    fn render_applied(&self, _: &LocalDirPlan, records: &Vec<ActionRecord>) -> String {
        let freed: u64 = records.iter().filter_map(|r| r.bytes_freed).sum();
        format!("{}{} freed\n", render_records(records), human_bytes(freed))
    }

    fn end(&self, records: &Vec<ActionRecord>) -> End {
        records_end(records)
    }

    fn json(&self, plan: &LocalDirPlan, records: Option<&Vec<ActionRecord>>, end: &End) -> Value {
        json!({"repair": "local-dirs", "node": plan.node, "dry_run": records.is_none(), "plan": plan,
               "actions": records.cloned().unwrap_or_default(), "exit_code": end.exit_code()})
    }

    fn targets(&self, plan: &LocalDirPlan) -> Vec<String> {
        plan.remove.iter().map(|d| format!("remove {}", d.path)).collect()
    }
}

/// `nodemedic repair local-dirs`: plan from the scan's snapshot (pods from the API or
/// `pods_file`), then the flow of [`command`].
pub fn run(
    opts: &Options,
    out: &mut dyn Write,
    confirm: Confirm<'_>,
) -> Result<Ran<LocalDirPlan, Vec<ActionRecord>>, RepairError> {
    if !opts.host.root().is_dir() {
        return Err(format!(
            "{}: host root does not exist or is not a directory",
            opts.host.root().display()
        )
        .into());
    }
    if opts.roots.is_empty() {
        return Err(RepairError::CouldNotRun(
            "no local-dir roots: pass --local-dir-root DIR (or --config /etc/nodemedic/config.yaml for the daemon's \
             local_dir_roots); only directories under those roots are removed"
                .into(),
        ));
    }
    let runtime = crate::runtime().map_err(|e| format!("tokio runtime: {e}"))?;
    let node = opts
        .node
        .clone()
        .unwrap_or_else(|| crate::collect::host_node_name(&opts.host));
    let source = match &opts.pods_file {
        Some(path) => Source::File(path.clone()),
        None => Source::Api(Box::new(
            runtime
                .block_on(kube_api::Connection::load(
                    opts.kubeconfig.as_deref(),
                    std::time::Duration::from_secs(10),
                ))
                .map_err(|e| RepairError::CouldNotRun(e.to_string()))?,
        )),
    };
    let mut repair = LocalDirs {
        opts,
        node: node.clone(),
        source,
        runtime: &runtime,
        snapshot: nodemedic_rules::snapshot::NodeSnapshot::empty(&node, 0),
    };
    let scan_opts = scan::Options {
        host: crate::collect::HostOptions {
            node: Some(node),
            local_dir_roots: opts.roots.clone(),
            ..Default::default()
        },
        host_reads: scan::HostReads::Inline,
        ..Default::default()
    };
    let scanned = runtime
        .block_on(scan::snapshot::<kube_api::ApiDirectory>(
            &opts.host,
            repair.pods(),
            None,
            &scan_opts,
        ))
        .map_err(|e| RepairError::CouldNotRun(format!("{e} (local-dirs needs a pod list: the API, or --pods FILE)")))?;
    repair.snapshot = scanned.snapshot;
    let plan = plan(&opts.host, &opts.roots, &repair.snapshot, &opts.settings);
    command::run(&mut repair, plan, &opts.flow, out, confirm)
}

fn render_plan(plan: &LocalDirPlan, apply: bool) -> String {
    let mut text = format!(
        "nodemedic repair local-dirs on node {}: {} director(ies) to remove, {} ({} bytes)\n",
        plan.node,
        plan.remove.len(),
        human_bytes(plan.bytes()),
        plan.bytes()
    );
    for r in &plan.roots {
        match &r.problem {
            None => text.push_str(&format!("  root {}: ok\n", r.root)),
            Some(p) => text.push_str(&format!("  root {}: refused: {p}\n", r.root)),
        }
    }
    for note in &plan.notes {
        text.push_str(&format!("  note: {note}\n"));
    }
    for c in &plan.remove {
        text.push_str(&format!(
            "  remove {:?} ({}, {} bytes)\n",
            c.path,
            human_bytes(c.bytes),
            c.bytes
        ));
        text.push_str(&format!("    why: {}\n", c.why));
        text.push_str(&format!("    evidence: {}\n", evidence_line(&c.evidence)));
    }
    if !plan.left.is_empty() {
        text.push_str(&format!("left alone: {} director(ies)\n", plan.left.len()));
        for l in &plan.left {
            text.push_str(&format!(
                "  {:?} ({}): {}\n    why it was judged: {}\n",
                l.path,
                human_bytes(l.bytes),
                l.left_because,
                l.why
            ));
        }
    }
    if !apply && !plan.remove.is_empty() {
        text.push_str(
            "dry run: nothing changed; add --apply to remove (each directory is checked again right before)\n",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::os::fd::AsFd;
    use std::path::Path;

    use nix::fcntl::AtFlags;

    use super::procs::maps_identity;
    use super::walk::*;
    use super::*;

    #[test]
    fn maps_lines() {
        let dev = nix::sys::stat::makedev(0xfd, 1) as u64;
        assert_eq!(
            maps_identity(
                "7f1c2a000000-7f1c2a200000 r--s 00000000 fd:01 1234567 /mnt/spark/blockmgr-1/0c/shuffle_0_1_0.data"
            ),
            Some((dev, 1234567))
        );
        assert_eq!(maps_identity("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]"), None);
        assert_eq!(maps_identity("garbage"), None);
    }

    #[test]
    fn roots_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        walk::plant_roots(root);
        let host = HostPaths::new(root, None);
        assert!(open_root(&host, "/mnt/spark").is_ok());
        assert!(open_root(&host, "/mnt/spark/").is_ok());
        for (bad, want) in [
            ("/mnt/link", "is a symlink"),
            ("/alias/spark", "on the way to /alias/spark, is a symlink"),
            ("/mnt/file", "is not a directory"),
            ("/mnt/none", "does not exist"),
            ("/mnt/../mnt/spark", ".. components"),
            ("mnt/spark", "not an absolute"),
            ("/", "root directory"),
            ("/var/lib/kubelet/spark", "inside the kubelet's directory"),
        ] {
            let e = open_root(&host, bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn measures_and_removes_by_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let scratch = root.join("mnt/spark/blockmgr-1");
        std::fs::create_dir_all(scratch.join("0c/deep")).unwrap();
        std::fs::write(scratch.join("0c/shuffle_0_1_0.data"), vec![0u8; 1000]).unwrap();
        std::fs::write(scratch.join("0c/deep/x"), vec![0u8; 24]).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(root.join("outside/keep"), vec![0u8; 5000]).unwrap();
        std::os::unix::fs::symlink(root.join("outside"), scratch.join("link")).unwrap();
        let host = HostPaths::new(root, None);
        let safe = open_root(&host, "/mnt/spark").unwrap();
        let st = nix::sys::stat::fstatat(safe.fd.as_fd(), "blockmgr-1", AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        let m = measure(
            open_child(&safe.fd, "blockmgr-1".as_ref(), &st, &safe, "left alone").unwrap(),
            &st,
            &safe,
        )
        .unwrap();
        assert_eq!(m.bytes, 1024, "the symlink's target is not counted");
        assert_eq!(m.entries, 5);
        let mut freed = 0;
        let fd = open_child(&safe.fd, "blockmgr-1".as_ref(), &st, &safe, "stopped").unwrap();
        remove_contents(&fd, &safe, 0, &mut freed).unwrap();
        assert_eq!(freed, 1024);
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
        assert_eq!(std::fs::read(root.join("outside/keep")).unwrap().len(), 5000);
    }

    #[test]
    fn finds_a_process_by_its_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(dir.path())
            .spawn()
            .unwrap();
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir.path()).unwrap();
        let inodes: HashSet<(u64, u64)> = [(m.dev(), m.ino())].into();
        let check = processes_holding(Path::new("/proc"), &inodes);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            check
                .holders
                .iter()
                .any(|h| h.contains(&format!("pid {} (sleep): cwd", child.id()))),
            "{check:?}"
        );
        assert!(check.refusal().is_some());
        let none = processes_holding(Path::new("/nonexistent/proc"), &inodes);
        assert!(none.refusal().unwrap().contains("could not be done"));
        let empty = processes_holding(dir.path(), &inodes);
        assert!(empty.refusal().unwrap().contains("no process found"), "{empty:?}");
    }
}
