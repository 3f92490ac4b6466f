//! Which live processes hold something below a directory: their working directory, root, an
//! open file or a memory-mapped file, compared by (device, inode) under the host's `/proc`.

use std::collections::HashSet;
use std::path::Path;

use super::MAX_PROCESS_LINKS;
use crate::collect::procfs::parse_stat;

/// Who holds a directory: live processes with their cwd, root, an open file or a mapping
/// below it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessCheck {
    /// `pid 123 (java): cwd /var/data/...`.
    pub holders: Vec<String>,
    /// Processes that could not be inspected (permission), by pid.
    pub uninspected: Vec<u32>,
    /// Processes inspected.
    pub inspected: usize,
    /// The check stopped at [`MAX_PROCESS_LINKS`], or `/proc` could not be read.
    pub incomplete: Option<String>,
}

impl ProcessCheck {
    /// Why the directory must stay, if it must.
    pub fn refusal(&self) -> Option<String> {
        if let Some(why) = &self.incomplete {
            return Some(format!("the live-process check could not be done: {why}"));
        }
        if !self.holders.is_empty() {
            let listed: Vec<&str> = self.holders.iter().take(5).map(String::as_str).collect();
            return Some(format!(
                "in use by {} live process link(s): {}",
                self.holders.len(),
                listed.join("; ")
            ));
        }
        if !self.uninspected.is_empty() {
            let listed: Vec<String> = self.uninspected.iter().take(10).map(u32::to_string).collect();
            return Some(format!(
                "{} process(es) could not be inspected (pids {}{}): the agent needs CAP_SYS_PTRACE (and, under \
                 AppArmor, a profile that allows ptrace read of other processes) to see every process's files; \
                 nothing is removed unless every process was checked",
                self.uninspected.len(),
                listed.join(", "),
                if self.uninspected.len() > 10 { ", ..." } else { "" }
            ));
        }
        None
    }
}

/// Whether `/proc/<pid>/stat` says the process is a kernel thread (`PF_KTHREAD` in its flags,
/// field 9).
pub(super) fn is_kernel_thread(proc_pid: &Path) -> bool {
    use procfs_core::process::StatFlags;
    let Ok(stat) = std::fs::read_to_string(proc_pid.join("stat")) else {
        return false;
    };
    parse_stat(&stat).is_some_and(|s| s.flags & StatFlags::PF_KTHREAD.bits() != 0)
}

/// `(dev, inode)` of a `/proc/<pid>/maps` line, when it maps a file.
pub(super) fn maps_identity(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    let dev = fields.nth(3)?;
    let inode: u64 = fields.next()?.parse().ok()?;
    if inode == 0 {
        return None;
    }
    let (major, minor) = dev.split_once(':')?;
    let major = u64::from_str_radix(major, 16).ok()?;
    let minor = u64::from_str_radix(minor, 16).ok()?;
    Some((nix::sys::stat::makedev(major, minor) as u64, inode))
}

/// Checks every process under `proc_dir` (the host's `/proc`) for a cwd, root, open file or
/// mapping whose (device, inode) is in `inodes`. Processes that exit meanwhile are skipped;
/// kernel threads are skipped.
pub fn processes_holding(proc_dir: &Path, inodes: &HashSet<(u64, u64)>) -> ProcessCheck {
    use std::os::unix::fs::MetadataExt;
    let mut check = ProcessCheck::default();
    let entries = match std::fs::read_dir(proc_dir) {
        Ok(e) => e,
        Err(e) => {
            check.incomplete = Some(format!("{}: {e}", proc_dir.display()));
            return check;
        }
    };
    let mut links = 0usize;
    let denied = |e: &std::io::Error| {
        e.kind() == std::io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(nix::libc::EPERM)
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dir = entry.path();
        if is_kernel_thread(&dir) {
            continue;
        }
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let who = format!("pid {pid} ({})", comm.trim());
        let mut blocked = false;
        let mut held = |what: String, path: &Path| {
            let shown = std::fs::read_link(path).map_or_else(|_| "?".to_string(), |p| p.display().to_string());
            check.holders.push(format!("{who}: {what} {shown}"));
        };
        for link in ["cwd", "root"] {
            links += 1;
            match std::fs::metadata(dir.join(link)) {
                Ok(m) if inodes.contains(&(m.dev(), m.ino())) => held(link.to_string(), &dir.join(link)),
                Ok(_) => {}
                Err(e) if denied(&e) => blocked = true,
                Err(_) => {} // exited, or a zombie
            }
        }
        match std::fs::read_dir(dir.join("fd")) {
            Ok(fds) => {
                for fd in fds.flatten() {
                    links += 1;
                    if links > MAX_PROCESS_LINKS {
                        check.incomplete = Some(format!("more than {MAX_PROCESS_LINKS} process links"));
                        return check;
                    }
                    if let Ok(m) = std::fs::metadata(fd.path()) {
                        if inodes.contains(&(m.dev(), m.ino())) {
                            held(format!("fd {}", fd.file_name().to_string_lossy()), &fd.path());
                        }
                    }
                }
            }
            Err(e) if denied(&e) => blocked = true,
            Err(_) => {}
        }
        match std::fs::read_to_string(dir.join("maps")) {
            Ok(maps) => {
                let mut seen: HashSet<(u64, u64)> = HashSet::new();
                for line in maps.lines() {
                    links += 1;
                    if let Some(id) = maps_identity(line) {
                        if inodes.contains(&id) && seen.insert(id) {
                            let path = line.split_whitespace().nth(5).unwrap_or("?");
                            check.holders.push(format!("{who}: maps {path}"));
                        }
                    }
                }
                if links > MAX_PROCESS_LINKS {
                    check.incomplete = Some(format!("more than {MAX_PROCESS_LINKS} process links"));
                    return check;
                }
            }
            Err(e) if denied(&e) => blocked = true,
            Err(_) => {}
        }
        // A process that exited meanwhile is neither: it is gone.
        if !dir.join("stat").exists() {
            continue;
        }
        if blocked {
            check.uninspected.push(pid);
        } else {
            check.inspected += 1;
        }
    }
    check.uninspected.sort_unstable();
    if check.inspected == 0 && check.uninspected.is_empty() {
        check.incomplete = Some(format!(
            "no process found under {} (not the host's /proc?)",
            proc_dir.display()
        ));
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_threads_by_their_flags() {
        let dir = tempfile::tempdir().unwrap();
        let write = |pid: &str, stat: &str| {
            std::fs::create_dir_all(dir.path().join(pid)).unwrap();
            std::fs::write(dir.path().join(pid).join("stat"), stat).unwrap();
        };
        // kthreadd as Linux 6.x writes it: flags 0x208040 (PF_KTHREAD | PF_NOFREEZE | PF_FORKNOEXEC).
        let kthreadd = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 2 0 0 18446744073709551615 0 0 \
                        0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        write("2", kthreadd);
        write("3", &kthreadd.replacen("2129984", "4194560", 1));
        write("4", "4 (short) S 0 0 0 0 -1 2129984\n");
        assert!(is_kernel_thread(&dir.path().join("2")));
        assert!(!is_kernel_thread(&dir.path().join("3")), "a user process's flags");
        assert!(
            !is_kernel_thread(&dir.path().join("4")),
            "not a stat line: inspected like a process"
        );
        assert!(!is_kernel_thread(&dir.path().join("5")), "gone");
        assert!(!is_kernel_thread(Path::new("/proc/self")));
    }
}
