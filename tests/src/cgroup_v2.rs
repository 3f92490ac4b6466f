//! A real cgroup v2 hierarchy of one test's own: `cgroup2` mounted on a temporary directory,
//! real processes moved into it, and cleanup (kill, rmdir deepest first, unmount) when dropped,
//! including when a test panics.
//!
//! On a machine whose controllers are all bound to cgroup v1 (CI's), a cgroup2 hierarchy has no
//! controller, but it has everything cgroup v2 gives every cgroup: `cgroup.procs`,
//! `cgroup.events` and `cgroup.kill` (Linux 5.14+). Needs root.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// A mounted cgroup2 hierarchy.
#[derive(Debug)]
pub struct Cgroup2Mount {
    dir: tempfile::TempDir,
    dirs: Vec<PathBuf>,
    children: Vec<Child>,
}

impl Cgroup2Mount {
    /// Mounts cgroup2 on a new temporary directory.
    pub fn new() -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let status = Command::new("mount")
            .args(["-t", "cgroup2", "none"])
            .arg(dir.path())
            .status()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "mount -t cgroup2 on {} failed ({status}): this test needs root",
                dir.path().display()
            )));
        }
        Ok(Cgroup2Mount {
            dir,
            dirs: vec![],
            children: vec![],
        })
    }

    /// The hierarchy's root (use it as a host's `/sys/fs/cgroup`).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Creates `rel` and its parents.
    pub fn mkdir(&mut self, rel: &str) -> io::Result<PathBuf> {
        let mut dir = self.root().to_path_buf();
        for part in rel.split('/').filter(|s| !s.is_empty()) {
            dir = dir.join(part);
            if !dir.is_dir() {
                std::fs::create_dir(&dir)?;
                self.dirs.push(dir.clone());
            }
        }
        Ok(dir)
    }

    /// Starts `sleep 600` and moves it into `rel`; returns its pid.
    pub fn spawn_sleep(&mut self, rel: &str) -> io::Result<u32> {
        let dir = self.root().join(rel);
        crate::cgroup_v1::spawn_sleep_into(&dir, &mut self.children)
    }
}

impl Drop for Cgroup2Mount {
    fn drop(&mut self) {
        crate::cgroup_v1::clean_up(&mut self.children, &self.dirs);
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}
