//! cgroups: the kubelet's pod cgroups, their container leaves, each leaf's cpuset and
//! processes (docs/kubelet.md, "Where the live truth is").
//!
//! Works on cgroup v1 (the `cpuset` controller's hierarchy) and v2 (the unified tree), with
//! the cgroupfs driver (`kubepods/burstable/pod<uid>/<id>`) and the systemd driver
//! (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
//! cri-containerd-<id>.scope`). Leaves are found by name at any depth below the pod, for
//! containerd, CRI-O and docker. The tree changes under our feet: a directory that vanishes
//! mid-scan is skipped and noted, never an error.

use std::path::{Path, PathBuf};

use nodemedic_rules::CpuSet;
use nodemedic_rules::snapshot::{
    CgroupTree, CgroupVersion, ContainerCgroup, KubeletConfig, Observed, PodCgroup, ProcessInfo, Runtime, Subtree,
};

use super::procfs::read_process;
use super::read::{read_text, with_bytes};
use crate::host::HostPaths;

const SMALL_FILE: u64 = 64 * 1024;
/// `cgroup.procs` of a container with a few thousand threads' worth of processes.
const PROCS_LIMIT: u64 = 4 * 1024 * 1024;
/// At most this many cgroup directories are visited in one pod's subtree (a container that runs
/// systemd or Docker-in-Docker nests a few dozen; a pathological tree must not stall a scan).
/// Past it the walk stops, says so, and the pod counts as alive.
pub const SUBTREE_DIR_LIMIT: usize = 4096;

/// The pod UID of a pod cgroup directory name: `pod<uid>` (cgroupfs) or
/// `kubepods[-qos]-pod<uid_>.slice` (systemd, `_` for `-`).
pub fn parse_pod_dir_name(name: &str) -> Option<String> {
    let uid = if let Some(slice) = name.strip_suffix(".slice") {
        slice.rsplit_once("-pod")?.1.replace('_', "-")
    } else {
        name.strip_prefix("pod")?.to_string()
    };
    let ok = !uid.is_empty() && uid.len() <= 64 && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then_some(uid)
}

/// The QoS class of a QoS-level directory name.
pub fn parse_qos_dir_name(name: &str) -> Option<&'static str> {
    match name {
        "burstable" | "kubepods-burstable.slice" => Some("burstable"),
        "besteffort" | "kubepods-besteffort.slice" => Some("besteffort"),
        _ => None,
    }
}

fn is_hex_id(s: &str, exact64: bool) -> bool {
    let len_ok = if exact64 {
        s.len() == 64
    } else {
        (1..=64).contains(&s.len())
    };
    len_ok && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// What a directory below a pod cgroup is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeafName {
    /// A container's leaf.
    Container(Runtime, String),
    /// CRI-O's conmon monitor: not a container, nothing below it to look at.
    Conmon,
    /// Anything else: look below it.
    Other,
}

/// Classifies a directory name below a pod cgroup.
pub fn parse_leaf_name(name: &str) -> LeafName {
    if name.starts_with("crio-conmon-") {
        return LeafName::Conmon;
    }
    let scoped = |prefix: &str| name.strip_prefix(prefix).map(|r| r.strip_suffix(".scope").unwrap_or(r));
    let candidates = [
        ("cri-containerd-", Runtime::Containerd),
        ("crio-", Runtime::Crio),
        ("docker-", Runtime::Docker),
    ];
    for (prefix, runtime) in candidates {
        if let Some(id) = scoped(prefix) {
            if is_hex_id(id, false) {
                return LeafName::Container(runtime, id.to_string());
            }
        }
    }
    if is_hex_id(name, true) {
        return LeafName::Container(Runtime::Unknown, name.to_string());
    }
    LeafName::Other
}

/// Why a `cgroup.procs` text is not a list of pids (the caller adds the file's host path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcsError {
    /// A word that is not a pid, as found.
    #[error("not a pid: {0:?}")]
    NotAPid(String),
}

/// The pids of a `cgroup.procs` file.
pub fn parse_cgroup_procs(text: &str) -> Result<Vec<u32>, ProcsError> {
    parse_cgroup_procs_bytes(text.as_bytes())
}

/// [`parse_cgroup_procs`] of the file's bytes, as read (no text made of them first).
pub fn parse_cgroup_procs_bytes(bytes: &[u8]) -> Result<Vec<u32>, ProcsError> {
    let not_a_pid = |word: &[u8]| ProcsError::NotAPid(String::from_utf8_lossy(word).into_owned());
    let mut pids = Vec::new();
    for word in bytes.split(u8::is_ascii_whitespace).filter(|w| !w.is_empty()) {
        // As `u32::from_str`: ASCII digits (one leading `+` allowed), no overflow.
        let digits = word.strip_prefix(b"+").unwrap_or(word);
        if digits.is_empty() {
            return Err(not_a_pid(word));
        }
        let mut pid: u32 = 0;
        for &b in digits {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return Err(not_a_pid(word));
            }
            pid = pid
                .checked_mul(10)
                .and_then(|p| p.checked_add(u32::from(digit)))
                .ok_or_else(|| not_a_pid(word))?;
        }
        pids.push(pid);
    }
    Ok(pids)
}

/// `populated` of a cgroup v2 `cgroup.events` file: `Some(true)` when a process runs anywhere
/// in the cgroup's subtree; `None` when the line is missing or not 0/1.
pub fn parse_cgroup_events_populated(text: &str) -> Option<bool> {
    text.lines()
        .find_map(|l| match l.trim().strip_prefix("populated ")?.trim() {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        })
}

/// Where the cgroup hierarchy that holds cpusets is mounted, and its version.
fn find_controller(host: &HostPaths) -> Option<(PathBuf, CgroupVersion)> {
    let cg = host.host("/sys/fs/cgroup");
    let v1 = cg.join("cpuset");
    let cpus = v1.join("cpuset.cpus");
    super::read::trace::stat(&cpus);
    if cpus.is_file() {
        return Some((v1, CgroupVersion::V1));
    }
    let controllers = cg.join("cgroup.controllers");
    super::read::trace::stat(&controllers);
    if controllers.is_file() {
        return Some((cg, CgroupVersion::V2));
    }
    None
}

/// Which containers get the expensive reads (each process's affinity from procfs): those the
/// checkpoint pins, by pod UID (V2/V3) or container ID (V1). Every container gets its cpuset
/// and pid list.
#[derive(Debug, Clone, Default)]
pub struct Pinned {
    pub pod_uids: std::collections::HashSet<String>,
    pub container_ids: std::collections::HashSet<String>,
}

impl Pinned {
    pub fn wants(&self, pod_uid: &str, container_id: &str) -> bool {
        self.pod_uids.contains(pod_uid) || self.container_ids.contains(container_id)
    }
}

struct Walk<'a> {
    host: &'a HostPaths,
    version: CgroupVersion,
    pinned: &'a Pinned,
    notes: &'a mut Vec<String>,
}

/// `dir/name` in one allocation of the right size (`Path::join` copies `dir`, then grows the
/// copy for `name`: the walk does this for every file it reads).
fn file_in(dir: &Path, name: &str) -> PathBuf {
    let mut path = PathBuf::with_capacity(dir.as_os_str().len() + 1 + name.len());
    path.push(dir);
    path.push(name);
    path
}

/// The link count of directory `dir`.
fn link_count(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    super::read::trace::stat(dir);
    std::fs::symlink_metadata(dir).ok().map(|m| m.nlink())
}

/// The subdirectories of `dir` by name, sorted (none when it cannot be listed).
pub fn subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
    super::read::trace::dir(dir);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            if !e.file_type().ok()?.is_dir() {
                return None;
            }
            let name = e.file_name().into_string().ok()?;
            let path = file_in(dir, &name);
            Some((name, path))
        })
        .collect();
    // Names in one directory are distinct.
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    out
}

impl Walk<'_> {
    /// A cpuset file; `None` when absent or empty (v2 without the cpuset controller, or
    /// inherited), or unparsable (noted).
    fn cpuset(&mut self, path: &Path) -> Option<CpuSet> {
        let shown = self.host.shown(path);
        let parsed = with_bytes(path, &shown, SMALL_FILE, |bytes| match std::str::from_utf8(bytes) {
            Ok(text) if text.trim().is_empty() => Ok(None),
            Ok(text) => CpuSet::parse(text).map(Some).map_err(|e| e.to_string()),
            Err(_) => Err("not UTF-8 text".to_string()),
        });
        match parsed {
            Ok(None) => None,
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                self.notes.push(e.to_string());
                None
            }
            Ok(Some(Ok(set))) => set,
            Ok(Some(Err(e))) => {
                self.notes.push(format!("{shown}: {e}"));
                None
            }
        }
    }

    /// `cgroup.procs` of `dir`, which every cgroup has: `None` when it is not there, which
    /// means the cgroup was removed since it was listed.
    fn procs_if_present(&mut self, dir: &Path) -> Option<Vec<u32>> {
        let path = file_in(dir, "cgroup.procs");
        let shown = self.host.shown(&path);
        match with_bytes(&path, &shown, PROCS_LIMIT, parse_cgroup_procs_bytes) {
            Ok(Some(parsed)) => Some(parsed.unwrap_or_else(|e| {
                self.notes.push(format!("{shown}: {e}"));
                vec![]
            })),
            Ok(None) => None,
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                self.notes.push(e.to_string());
                Some(vec![])
            }
        }
    }

    fn procs(&mut self, dir: &Path) -> Vec<u32> {
        self.procs_if_present(dir).unwrap_or_default()
    }

    fn processes(&mut self, pids: Vec<u32>) -> Vec<ProcessInfo> {
        let mut out = Vec::with_capacity(pids.len());
        for pid in pids {
            match read_process(self.host, pid) {
                Ok(Some(p)) => out.push(p),
                // Not under <root>/proc: it exited since the cgroup listed it, or the host
                // root shows another pid namespace. The cgroup's word stands for liveness;
                // only the affinity is unknown.
                Ok(None) => out.push(ProcessInfo {
                    pid,
                    cpus_allowed: None,
                }),
                Err(e) => {
                    self.notes.push(e.to_string());
                    out.push(ProcessInfo {
                        pid,
                        cpus_allowed: None,
                    });
                }
            }
        }
        out
    }

    /// A container leaf's own files (cpusets); its processes are added by the pod's walk.
    /// `None` when the leaf vanished since it was listed.
    /// `shown`: the leaf's host path, as reported.
    fn leaf(
        &mut self,
        pod_uid: &str,
        runtime: Runtime,
        id: String,
        dir: &Path,
        shown: String,
    ) -> Option<(ContainerCgroup, Vec<u32>)> {
        let (cpus_file, effective_file) = match self.version {
            CgroupVersion::V1 => ("cpuset.cpus", "cpuset.effective_cpus"),
            CgroupVersion::V2 => ("cpuset.cpus", "cpuset.cpus.effective"),
        };
        let Some(pids) = self.procs_if_present(dir) else {
            self.notes.push(format!("cgroup {shown} vanished during the scan"));
            return None;
        };
        let cpus = self.cpuset(&file_in(dir, cpus_file));
        let pinned = self.pinned.wants(pod_uid, &id);
        // The effective set adds to cpuset.cpus only when that is empty (v2: inherited) or the
        // container is pinned (a parent narrowing it is worth showing).
        let effective_cpus = if cpus.is_none() || pinned {
            self.cpuset(&file_in(dir, effective_file))
        } else {
            None
        };
        let leaf = ContainerCgroup {
            id,
            runtime,
            path: shown,
            cpus,
            effective_cpus,
            processes: vec![],
        };
        Some((leaf, pids))
    }

    /// `cgroup.events` of a v2 cgroup: whether any process runs in its subtree.
    fn populated(&mut self, dir: &Path) -> Option<bool> {
        if self.version != CgroupVersion::V2 {
            return None;
        }
        let path = file_in(dir, "cgroup.events");
        let text = read_text(&path, &self.host.shown(&path), SMALL_FILE).ok()??;
        parse_cgroup_events_populated(&text)
    }

    /// A pod cgroup and everything below it, at any depth: the container leaves (found by
    /// name), each with its processes (when the leaf itself holds none, those of the cgroups
    /// nested below it), and the processes of every other cgroup of the pod. At most
    /// [`SUBTREE_DIR_LIMIT`] directories are visited; past that the walk stops and says so,
    /// and the pod counts as alive. `shown`: the pod cgroup's host path, as reported.
    fn pod(&mut self, uid: String, qos: &str, dir: &Path, shown: String) -> PodCgroup {
        /// Whose processes a directory's are.
        #[derive(Clone, Copy)]
        enum Owner {
            Pod,
            /// A container leaf itself (its processes were read with its cpusets).
            LeafRoot(usize),
            /// A cgroup below a container leaf.
            Leaf(usize),
            Other,
        }
        let populated = self.populated(dir);
        let mut pids = Vec::new();
        let mut other_pids = Vec::new();
        let mut leaves: Vec<(ContainerCgroup, Vec<u32>)> = Vec::new();
        let mut dirs = 0usize;
        let mut truncated = false;
        let mut stack: Vec<(PathBuf, Owner)> = vec![(dir.to_path_buf(), Owner::Pod)];
        while let Some((d, owner)) = stack.pop() {
            if dirs == SUBTREE_DIR_LIMIT {
                truncated = true;
                break;
            }
            dirs += 1;
            match owner {
                Owner::Pod => pids = self.procs(&d),
                Owner::LeafRoot(_) => {}
                Owner::Leaf(i) => leaves[i].1.extend(self.procs(&d)),
                Owner::Other => other_pids.extend(self.procs(&d)),
            }
            match owner {
                // A container whose leaf holds processes is alive whatever runs below it; only
                // a leaf that holds none is looked below (systemd, Docker-in-Docker and kind run
                // their processes in cgroups nested in the leaf): not listing the thousand busy
                // leaves of a large node keeps the walk as cheap as reading the leaves.
                Owner::LeafRoot(i) if !leaves[i].1.is_empty() => continue,
                // A directory whose link count is 2 has no subdirectory (cgroupfs, like ext4 and
                // tmpfs, counts `.` and each child's `..`); a file system that does not count
                // (1) is listed.
                Owner::LeafRoot(_) | Owner::Leaf(_) if link_count(&d) == Some(2) => continue,
                _ => {}
            }
            for (name, path) in subdirs(&d) {
                let below = match owner {
                    Owner::LeafRoot(i) | Owner::Leaf(i) => Owner::Leaf(i),
                    Owner::Pod | Owner::Other => match parse_leaf_name(&name) {
                        LeafName::Container(runtime, id) => {
                            // A leaf right below the pod (every runtime's) is named after it;
                            // one nested deeper is shown as the host sees it.
                            let leaf_shown = match owner {
                                Owner::Pod => format!("{shown}/{name}"),
                                _ => self.host.display(&path),
                            };
                            match self.leaf(&uid, runtime, id, &path, leaf_shown) {
                                Some(leaf) => {
                                    leaves.push(leaf);
                                    Owner::LeafRoot(leaves.len() - 1)
                                }
                                None => continue,
                            }
                        }
                        LeafName::Conmon | LeafName::Other => Owner::Other,
                    },
                };
                stack.push((path, below));
            }
        }
        if truncated {
            self.notes.push(format!(
                "the cgroups of pod {uid} ({shown}) hold more than {SUBTREE_DIR_LIMIT} directories: not all were \
                 looked at, so the pod counts as alive"
            ));
        }
        let mut containers: Vec<ContainerCgroup> = Vec::with_capacity(leaves.len());
        for (mut leaf, mut leaf_pids) in leaves {
            leaf_pids.sort_unstable();
            leaf_pids.dedup();
            leaf.processes = if self.pinned.wants(&uid, &leaf.id) {
                self.processes(leaf_pids)
            } else {
                leaf_pids
                    .into_iter()
                    .map(|pid| ProcessInfo {
                        pid,
                        cpus_allowed: None,
                    })
                    .collect()
            };
            containers.push(leaf);
        }
        containers.sort_by(|a, b| a.id.cmp(&b.id));
        other_pids.sort_unstable();
        other_pids.dedup();
        PodCgroup {
            uid,
            qos: qos.to_string(),
            path: shown,
            pids,
            containers,
            other_pids,
            subtree: Subtree {
                dirs,
                truncated,
                populated,
            },
        }
    }
}

/// Where the kubelet's pod cgroups are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `kubepods` (cgroupfs driver) or `kubepods.slice` (systemd), on this filesystem.
    pub kubepods: PathBuf,
    pub version: CgroupVersion,
    /// `cgroupfs` or `systemd`.
    pub driver: &'static str,
}

impl Layout {
    /// The pod UID and QoS class of the pod cgroup directory `dir` (directly below
    /// `kubepods`: Guaranteed, or below a QoS directory).
    pub fn pod_of(&self, dir: &Path) -> Option<(String, &'static str)> {
        let rel = dir.strip_prefix(&self.kubepods).ok()?;
        let parts: Vec<&str> = rel.iter().map(|c| c.to_str()).collect::<Option<_>>()?;
        match parts.as_slice() {
            [pod] => Some((parse_pod_dir_name(pod)?, "guaranteed")),
            [qos, pod] => Some((parse_pod_dir_name(pod)?, parse_qos_dir_name(qos)?)),
            _ => None,
        }
    }
}

/// The cgroup directory of the pod `uid` (below `kubepods` or one of its QoS directories), as
/// it is now.
pub fn find_pod_dir(layout: &Layout, uid: &str) -> Option<PathBuf> {
    for (name, path) in subdirs(&layout.kubepods) {
        if parse_pod_dir_name(&name).as_deref() == Some(uid) {
            return Some(path);
        }
        if parse_qos_dir_name(&name).is_some() {
            if let Some(found) = subdirs(&path)
                .into_iter()
                .find(|(n, _)| parse_pod_dir_name(n).as_deref() == Some(uid))
            {
                return Some(found.1);
            }
        }
    }
    None
}

/// Why the kubelet's pod cgroups were not found: the host path that was looked for (the
/// cgroups are then `missing`, not failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupsError {
    /// Neither a cgroup v2 hierarchy nor v1's cpuset controller is there.
    #[error("no cgroup file system at {path}")]
    NoCgroupFs { path: String },
    /// No `kubepods` (cgroupfs) or `kubepods.slice` (systemd) there: the driver's name first.
    #[error("no pod cgroups at {path}")]
    NoKubepods { path: String },
}

impl CgroupsError {
    /// The host path that was looked for.
    pub fn path(&self) -> &str {
        match self {
            CgroupsError::NoCgroupFs { path } | CgroupsError::NoKubepods { path } => path,
        }
    }
}

/// Finds the kubelet's pod cgroups (`config` gives `cgroupRoot` and the driver); the host path
/// that was looked for when they are not there.
pub fn locate(host: &HostPaths, config: Option<&KubeletConfig>) -> Result<Layout, CgroupsError> {
    let Some((controller, version)) = find_controller(host) else {
        return Err(CgroupsError::NoCgroupFs {
            path: host.display(&host.host("/sys/fs/cgroup")),
        });
    };
    let cgroup_root = config.map_or("/", |c| c.cgroup_root.as_str()).trim_start_matches('/');
    let base = controller.join(cgroup_root);
    let systemd_first = config.is_some_and(|c| c.cgroup_driver == "systemd");
    let mut candidates = [("kubepods.slice", "systemd"), ("kubepods", "cgroupfs")];
    if !systemd_first {
        candidates.reverse();
    }
    candidates
        .iter()
        .map(|(n, d)| (base.join(n), *d))
        .find(|(p, _)| super::read::is_dir(p))
        .map(|(kubepods, driver)| Layout {
            kubepods,
            version,
            driver,
        })
        .ok_or_else(|| CgroupsError::NoKubepods {
            path: host.display(&base.join(candidates[0].0)),
        })
}

/// Reads the pod cgroups of `layout` (or says which host path is missing).
pub fn read_cgroups(
    host: &HostPaths,
    layout: &Result<Layout, CgroupsError>,
    pinned: &Pinned,
    notes: &mut Vec<String>,
) -> Observed<CgroupTree> {
    let layout = match layout {
        Ok(l) => l,
        Err(e) => {
            return Observed::Missing {
                path: e.path().to_string(),
            };
        }
    };
    let mut walk = Walk {
        host,
        version: layout.version,
        pinned,
        notes,
    };
    let mut pods = Vec::new();
    // Each pod's host path is kubepods' and its names (`subdirs` keeps UTF-8 names only).
    let kubepods = host.display(&layout.kubepods);
    for (name, path) in subdirs(&layout.kubepods) {
        if let Some(uid) = parse_pod_dir_name(&name) {
            pods.push(walk.pod(uid, "guaranteed", &path, format!("{kubepods}/{name}")));
        } else if let Some(qos) = parse_qos_dir_name(&name) {
            for (pod_name, path) in subdirs(&path) {
                if let Some(uid) = parse_pod_dir_name(&pod_name) {
                    pods.push(walk.pod(uid, qos, &path, format!("{kubepods}/{name}/{pod_name}")));
                }
            }
        }
    }
    pods.sort_by(|a, b| a.uid.cmp(&b.uid));
    Observed::Ok(CgroupTree {
        version: layout.version,
        driver: layout.driver.to_string(),
        kubepods,
        pods,
    })
}

/// Reads one pod cgroup, `dir`, again; `None` when it is gone.
pub fn read_pod(
    host: &HostPaths,
    layout: &Layout,
    pinned: &Pinned,
    uid: &str,
    qos: &str,
    dir: &Path,
    notes: &mut Vec<String>,
) -> Option<PodCgroup> {
    if !super::read::is_dir(dir) {
        return None;
    }
    let mut walk = Walk {
        host,
        version: layout.version,
        pinned,
        notes,
    };
    Some(walk.pod(uid.to_string(), qos, dir, host.display(dir)))
}

#[cfg(test)]
mod tests;
