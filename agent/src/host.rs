//! `HostPaths`: the one value that says where the host's files are.
//!
//! Every read of a host file goes through it, so the same code reads the real host (`/`),
//! the host mounted into the DaemonSet's container (`/host`), or a support bundle or test
//! fixture unpacked anywhere. Reports show paths as the host sees them.

use std::path::{Path, PathBuf};

/// Where the host's `/proc`, `/sys` and kubelet directory are.
#[derive(Debug, Clone)]
pub struct HostPaths {
    root: PathBuf,
    kubelet_dir: Option<PathBuf>,
}

impl HostPaths {
    /// Host files under `root`; the kubelet directory at `kubelet_dir` when given (a local
    /// path used as it is), else wherever the kubelet's `--root-dir` says, under `root`.
    pub fn new(root: impl Into<PathBuf>, kubelet_dir: Option<PathBuf>) -> Self {
        HostPaths {
            root: root.into(),
            kubelet_dir,
        }
    }

    /// The local path of a host path (`/proc/1/status` -> `<root>/proc/1/status`).
    pub fn host(&self, host_path: &str) -> PathBuf {
        self.root.join(host_path.trim_start_matches('/'))
    }

    /// The root everything is read under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/proc`.
    pub fn proc(&self) -> PathBuf {
        self.host("/proc")
    }

    /// `<root>/sys`.
    pub fn sys(&self) -> PathBuf {
        self.host("/sys")
    }

    /// The kubelet's root directory: the explicit one, else `root_dir` (the kubelet's
    /// `--root-dir`, default `/var/lib/kubelet`) under the host root.
    pub fn kubelet_dir(&self, root_dir: Option<&str>) -> PathBuf {
        match &self.kubelet_dir {
            Some(dir) => dir.clone(),
            None => self.host(root_dir.unwrap_or("/var/lib/kubelet")),
        }
    }

    /// How the host names a local path: the part under the root, with a leading `/`.
    /// Paths outside the root (an explicit `--kubelet-dir`) are shown as they are.
    pub fn display(&self, local: &Path) -> String {
        self.shown(local).to_string()
    }

    /// [`HostPaths::display`], formatted only when it is printed: for the many reads whose
    /// name is needed only if they fail.
    pub fn shown<'a>(&'a self, local: &'a Path) -> Shown<'a> {
        Shown { host: self, local }
    }
}

/// A local path as the host names it; see [`HostPaths::shown`].
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a> {
    host: &'a HostPaths,
    local: &'a Path,
}

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.local.strip_prefix(&self.host.root) {
            Ok(rest) if self.host.root != Path::new("/") => write!(f, "/{}", rest.display()),
            _ => write!(f, "{}", self.local.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_displays_host_paths() {
        let h = HostPaths::new("/host", None);
        assert_eq!(h.host("/proc/1/status"), PathBuf::from("/host/proc/1/status"));
        assert_eq!(h.kubelet_dir(None), PathBuf::from("/host/var/lib/kubelet"));
        assert_eq!(
            h.kubelet_dir(Some("/data/kubelet")),
            PathBuf::from("/host/data/kubelet")
        );
        assert_eq!(
            h.display(Path::new("/host/var/lib/kubelet/cpu_manager_state")),
            "/var/lib/kubelet/cpu_manager_state"
        );
        let real = HostPaths::new("/", Some(PathBuf::from("/tmp/k")));
        assert_eq!(real.kubelet_dir(Some("/ignored")), PathBuf::from("/tmp/k"));
        assert_eq!(
            real.display(Path::new("/tmp/k/cpu_manager_state")),
            "/tmp/k/cpu_manager_state"
        );
        // Outside the root: shown as it is; the lazy form prints the same.
        assert_eq!(h.display(Path::new("/elsewhere/x")), "/elsewhere/x");
        let p = Path::new("/host/sys/fs/cgroup/cpuset/kubepods/cpuset.cpus");
        assert_eq!(
            format!("{}: bad", h.shown(p)),
            "/sys/fs/cgroup/cpuset/kubepods/cpuset.cpus: bad"
        );
        assert_eq!(h.shown(p).to_string(), h.display(p));
    }
}
