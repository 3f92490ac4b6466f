//! A real cgroup v1 cpuset sandbox: a uniquely named hierarchy under
//! `/sys/fs/cgroup/cpuset`, real processes pinned in it, and cleanup (kill by pid, rmdir
//! deepest first) when the sandbox is dropped, including when a test panics.
//!
//! Needs root and a mounted v1 cpuset controller, as on CI.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where the v1 cpuset controller is mounted.
pub const CPUSET_MOUNT: &str = "/sys/fs/cgroup/cpuset";

/// A cpuset hierarchy owned by one test.
#[derive(Debug)]
pub struct CpusetSandbox {
    /// The sandbox's name, a direct child of the cpuset root (use `/<name>` as `cgroupRoot`).
    pub name: String,
    dirs: Vec<PathBuf>,
    children: Vec<Child>,
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

impl CpusetSandbox {
    /// Creates `/sys/fs/cgroup/cpuset/<prefix>-<pid>-<nanos>` with the root's CPUs and memory nodes.
    pub fn new(prefix: &str) -> io::Result<Self> {
        let mount = Path::new(CPUSET_MOUNT);
        if !mount.join("cpuset.cpus").is_file() {
            return Err(io::Error::other(format!(
                "{CPUSET_MOUNT} is not a cgroup v1 cpuset hierarchy: this test needs one (and root), as CI has"
            )));
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("{prefix}-{}-{nanos}", std::process::id());
        let mut sb = CpusetSandbox {
            name,
            dirs: vec![],
            children: vec![],
        };
        sb.mkdir("", None)?;
        Ok(sb)
    }

    /// The sandbox's directory.
    pub fn root(&self) -> PathBuf {
        Path::new(CPUSET_MOUNT).join(&self.name)
    }

    /// A kubelet `config.yaml` for the static CPU manager policy with CPU 0 reserved and its
    /// cgroups in this sandbox (`cgroupfs` driver, `cgroupRoot: /<name>`).
    pub fn kubelet_config(&self) -> String {
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: cgroupfs\n\
             cgroupRoot: /{}\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
            self.name
        )
    }

    /// Writes under `root` the host files a scan of this sandbox reads besides `/proc`:
    /// `sys/fs/cgroup` linked to the machine's, sysfs's `online` CPUs, [`Self::kubelet_config`],
    /// and a static-policy checkpoint (default set `0`) that assigns each `(pod UID, cpus)` of
    /// `entries` to a container `app`, last written an hour ago so that its entries are past
    /// the kubelet's own reconciling. Returns the checkpoint's path.
    pub fn write_host(&self, root: &Path, online: &str, entries: &[(&str, &str)]) -> io::Result<PathBuf> {
        std::fs::create_dir_all(root.join("sys/fs"))?;
        std::os::unix::fs::symlink("/sys/fs/cgroup", root.join("sys/fs/cgroup"))?;
        write_node_files(root, &self.kubelet_config(), online, entries)
    }

    /// The online CPUs of the machine (the cpuset root's).
    pub fn machine_cpus() -> io::Result<String> {
        Ok(std::fs::read_to_string(Path::new(CPUSET_MOUNT).join("cpuset.cpus"))?
            .trim()
            .to_string())
    }

    /// Creates `rel` (and its parents) below the sandbox; every level gets its parent's CPUs
    /// and memory nodes, the last one `cpus` when given.
    pub fn mkdir(&mut self, rel: &str, cpus: Option<&str>) -> io::Result<PathBuf> {
        let mut dir = Path::new(CPUSET_MOUNT).to_path_buf();
        let parts: Vec<&str> = std::iter::once(self.name.as_str())
            .chain(rel.split('/').filter(|s| !s.is_empty()))
            .collect();
        for (i, part) in parts.iter().enumerate() {
            let parent = dir.clone();
            dir = dir.join(part);
            if !dir.is_dir() {
                std::fs::create_dir(&dir)
                    .map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", dir.display())))?;
                self.dirs.push(dir.clone());
                let pcpus = std::fs::read_to_string(parent.join("cpuset.cpus"))?;
                let pmems = std::fs::read_to_string(parent.join("cpuset.mems"))?;
                write(&dir.join("cpuset.mems"), pmems.trim())?;
                write(&dir.join("cpuset.cpus"), pcpus.trim())?;
            }
            if i == parts.len() - 1 {
                if let Some(c) = cpus {
                    write(&dir.join("cpuset.cpus"), c)?;
                }
            }
        }
        Ok(dir)
    }

    /// Sets `cpuset.cpus` of `rel`.
    pub fn set_cpus(&self, rel: &str, cpus: &str) -> io::Result<()> {
        write(&self.root().join(rel).join("cpuset.cpus"), cpus)
    }

    /// Starts `sleep 600` and moves it into `rel`; returns its pid.
    pub fn spawn_sleep(&mut self, rel: &str) -> io::Result<u32> {
        spawn_sleep_into(&self.root().join(rel), &mut self.children)
    }
}

impl CpusetSandbox {
    /// Kills and reaps the process `pid` started by [`CpusetSandbox::spawn_sleep`].
    pub fn stop(&mut self, pid: u32) {
        if let Some(i) = self.children.iter().position(|c| c.id() == pid) {
            let mut child = self.children.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for CpusetSandbox {
    fn drop(&mut self) {
        clean_up(&mut self.children, &self.dirs);
    }
}

/// Starts `sleep 600`, keeps it in `children` and moves it into the cgroup `dir`; returns its
/// pid.
pub(crate) fn spawn_sleep_into(dir: &Path, children: &mut Vec<Child>) -> io::Result<u32> {
    let child = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()?;
    let pid = child.id();
    children.push(child);
    write(&dir.join("cgroup.procs"), &pid.to_string())?;
    Ok(pid)
}

/// Kills and reaps `children`, then removes the cgroups `dirs` (made in that order), deepest
/// first; a cgroup whose last task just died can be busy for a moment.
pub(crate) fn clean_up(children: &mut [Child], dirs: &[PathBuf]) {
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    for dir in dirs.iter().rev() {
        for _ in 0..50 {
            match std::fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// Writes under `root` the host files a scan reads besides `/proc` and the cgroups: sysfs's
/// `online` CPUs, the kubelet's `config.yaml` (`kubelet_config`), and a static-policy checkpoint
/// (default set `0`) that assigns each `(pod UID, cpus)` of `entries` to a container `app`,
/// last written an hour ago so that its entries are past the kubelet's own reconciling.
/// Returns the checkpoint's path.
pub fn write_node_files(
    root: &Path,
    kubelet_config: &str,
    online: &str,
    entries: &[(&str, &str)],
) -> io::Result<PathBuf> {
    use nodemedic_rules::CpuSet;
    use nodemedic_rules::checkpoint::{Assignment, CpuState, EntryKey};
    let write = |rel: &str, content: &str| crate::hosttree::write_file(&root.join(rel), content);
    write("sys/devices/system/cpu/online", &format!("{online}\n"))?;
    write("var/lib/kubelet/config.yaml", kubelet_config)?;

    let cpuset =
        |text: &str| CpuSet::parse(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()));
    let mut assignments = entries
        .iter()
        .map(|(uid, cpus)| {
            Ok(Assignment {
                key: EntryKey::Container {
                    pod_uid: uid.to_string(),
                    container: "app".into(),
                },
                cpus: cpuset(cpus)?,
            })
        })
        .collect::<io::Result<Vec<_>>>()?;
    assignments.sort_by(|a, b| a.key.cmp(&b.key));
    let state = CpuState {
        policy_name: "static".into(),
        default_cpus: cpuset("0")?,
        assignments,
        pod_assignments: vec![],
    };
    let checkpoint = root.join("var/lib/kubelet/cpu_manager_state");
    crate::hosttree::write_file(&checkpoint, state.to_checkpoint_json())?;
    std::fs::File::options()
        .write(true)
        .open(&checkpoint)?
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))?;
    Ok(checkpoint)
}
