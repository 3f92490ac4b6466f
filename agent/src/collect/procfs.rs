//! procfs: the kubelet's command line and each container process's CPU affinity.
//!
//! `read_*` functions do I/O under the host root; `parse_*` functions are pure and tested on
//! literal kernel text. A process that exits between being listed and being read is simply
//! gone: that is an outcome, not an error.

use std::path::Path;

use nodemedic_rules::snapshot::ProcessInfo;
use nodemedic_rules::{CpuSet, CpuSetError};

use super::read::{ReadError, read_bytes, read_text, trace, with_bytes};
use crate::host::HostPaths;

/// `/proc/<pid>/status` is about 1.5 KiB; anything past this is not a status file.
const STATUS_LIMIT: u64 = 64 * 1024;
/// The kernel caps a command line at the argument space; 1 MiB is plenty.
const CMDLINE_LIMIT: u64 = 1024 * 1024;

/// Why a `/proc/<pid>/status` text says nothing usable about the process's affinity: the
/// field and its bad value (the caller adds the file's host path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// `Cpus_allowed_list` is not a cpuset.
    #[error("Cpus_allowed_list: {0}")]
    CpusAllowed(#[source] CpuSetError),
    /// `Cpus_allowed_list`'s value is not UTF-8 text.
    #[error("Cpus_allowed_list: not UTF-8 text")]
    CpusAllowedNotUtf8,
}

/// Why one process's affinity could not be read: the file's host path, and whether it could
/// not be read or says something unreadable.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// `/proc/<pid>/status` could not be read (not because the process exited).
    #[error(transparent)]
    Read(ReadError),
    /// It was read, and its content is bad.
    #[error("{path}: {source}")]
    Status { path: String, source: StatusError },
}

/// `Cpus_allowed_list` of a `/proc/<pid>/status` text. `Ok(None)` when the line is absent
/// (very old kernels); `Err` names the bad value.
pub fn parse_status_cpus_allowed(status: &str) -> Result<Option<CpuSet>, StatusError> {
    parse_status_cpus_allowed_bytes(status.as_bytes())
}

/// [`parse_status_cpus_allowed`] of the file's bytes, as read: only the value of the line is
/// read as text (a process's name, earlier in the file, may be any bytes).
pub fn parse_status_cpus_allowed_bytes(status: &[u8]) -> Result<Option<CpuSet>, StatusError> {
    const FIELD: &[u8] = b"Cpus_allowed_list:";
    for line in status.split(|b| *b == b'\n') {
        if let Some(value) = line.strip_prefix(FIELD) {
            let value = std::str::from_utf8(value).map_err(|_| StatusError::CpusAllowedNotUtf8)?;
            return CpuSet::parse(value.trim()).map(Some).map_err(StatusError::CpusAllowed);
        }
    }
    Ok(None)
}

/// The arguments of a `/proc/<pid>/cmdline` (NUL-separated, usually NUL-terminated).
pub fn parse_cmdline(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// A `/proc/<pid>/stat` line (proc_pid_stat(5)) parsed by `procfs-core`; `None` when it is not
/// one (cut short, a field that is not a number). The command, field 2, is in parentheses and may
/// itself hold spaces and `)`, so the fields are counted from the last `)`. procfs-core 0.18
/// slices the line at its parentheses unchecked and panics on some malformed lines (`4242 (a)`,
/// `(a) S 1`, `1 )a( S`), so the shape it relies on is checked first: a space before the first
/// `(` and after the last `)`, which come in that order.
pub fn parse_stat(stat: &str) -> Option<procfs_core::process::Stat> {
    use procfs_core::FromRead as _;
    let line = stat.trim();
    let (open, close) = (line.find('(')?, line.rfind(')')?);
    let bytes = line.as_bytes();
    let shaped = open > 0 && close > open && bytes[open - 1] == b' ' && bytes.get(close + 1) == Some(&b' ');
    shaped
        .then(|| procfs_core::process::Stat::from_read(line.as_bytes()).ok())
        .flatten()
}

/// When process `pid` started, unix seconds: its start time in clock ticks after boot
/// (`/proc/<pid>/stat` field 22) over the tick rate, plus the boot time (`btime` of
/// `/proc/stat`). `None` when either is unreadable.
pub fn started_at(host: &HostPaths, pid: u32) -> Option<i64> {
    let stat_path = host.proc().join(pid.to_string()).join("stat");
    let stat = read_text(&stat_path, &"", STATUS_LIMIT).ok()??;
    let ticks = parse_stat(&stat)?.starttime;
    let boot = read_text(&host.proc().join("stat"), &"", STATUS_LIMIT).ok()??;
    let btime: i64 = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    (hz > 0).then(|| btime + (ticks / hz as u64) as i64)
}

/// Whether a command line is the kubelet's (`/usr/bin/kubelet ...`, or `hyperkube kubelet`).
pub fn is_kubelet(args: &[String]) -> bool {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    match args.first().map(|a| base(a)) {
        Some(b) if b == "kubelet" => true,
        Some(b) if b == "hyperkube" => args.get(1).is_some_and(|a| a == "kubelet"),
        _ => false,
    }
}

/// The pids listed under `<root>/proc`.
pub fn list_pids(host: &HostPaths) -> std::io::Result<Vec<u32>> {
    let proc = host.proc();
    trace::dir(&proc);
    let mut pids: Vec<u32> = std::fs::read_dir(&proc)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// The kubelet's pid and arguments, if a kubelet process is visible.
pub fn find_kubelet(host: &HostPaths) -> Option<(u32, Vec<String>)> {
    for pid in list_pids(host).ok()? {
        let path = host.proc().join(pid.to_string()).join("cmdline");
        let Ok(Some(bytes)) = read_bytes(&path, &"", CMDLINE_LIMIT) else {
            continue;
        };
        let args = parse_cmdline(&bytes);
        if is_kubelet(&args) {
            return Some((pid, args));
        }
    }
    None
}

/// One process's affinity; `Ok(None)` when it has exited.
pub fn read_process(host: &HostPaths, pid: u32) -> Result<Option<ProcessInfo>, ProcessError> {
    // One buffer grown once: `<root>/proc/<pid>/status`.
    let mut path = host.proc();
    path.reserve(18);
    path.push(pid.to_string());
    path.push("status");
    read_process_at(&path, &host.shown(&path), pid)
}

fn read_process_at(path: &Path, shown: &dyn std::fmt::Display, pid: u32) -> Result<Option<ProcessInfo>, ProcessError> {
    match with_bytes(path, shown, STATUS_LIMIT, parse_status_cpus_allowed_bytes) {
        Ok(None) => Ok(None),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(ProcessError::Read(e)),
        Ok(Some(parsed)) => {
            let cpus_allowed = parsed.map_err(|source| ProcessError::Status {
                path: shown.to_string(),
                source,
            })?;
            Ok(Some(ProcessInfo { pid, cpus_allowed }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tjava\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\n\
        Cpus_allowed:\t0c\nCpus_allowed_list:\t2-3\nMems_allowed:\t1\nMems_allowed_list:\t0\n";

    #[test]
    fn status_table() {
        let cases: &[(&str, Result<Option<&str>, &str>)] = &[
            (STATUS, Ok(Some("2-3"))),
            ("Name:\tsleep\nCpus_allowed_list:\t0,4-27\n", Ok(Some("0,4-27"))),
            ("Name:\tsleep\n", Ok(None)),
            ("", Ok(None)),
            (
                "Cpus_allowed_list:\t1.3\n",
                Err("Cpus_allowed_list: invalid cpuset token \"1.3\""),
            ),
            ("Cpus_allowed_list:", Ok(Some(""))),
        ];
        for (text, want) in cases {
            let got = parse_status_cpus_allowed(text);
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g.map(|c| c.to_string()).as_deref(), *w, "{text:?}"),
                (Err(g), Err(w)) => assert!(g.to_string().starts_with(w), "{g}"),
                (g, w) => panic!("{text:?}: got {g:?}, want {w:?}"),
            }
        }
        // Read as bytes: a process name may be any bytes; a value that is not text says so.
        let named = parse_status_cpus_allowed_bytes(b"Name:\t\xffjava\nCpus_allowed_list:\t2-3\n").unwrap();
        assert_eq!(named.map(|c| c.to_string()).as_deref(), Some("2-3"));
        assert_eq!(
            parse_status_cpus_allowed_bytes(b"Cpus_allowed_list:\t\xff\n"),
            Err(StatusError::CpusAllowedNotUtf8)
        );
    }

    #[test]
    fn cmdline_and_kubelet_detection() {
        let args = parse_cmdline(b"/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0--v=2\0");
        assert_eq!(
            args,
            ["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--v=2"]
        );
        assert!(is_kubelet(&args));
        assert!(is_kubelet(&parse_cmdline(b"hyperkube\0kubelet\0--config\0/etc/k.yaml")));
        assert!(!is_kubelet(&parse_cmdline(b"/usr/bin/kubelet-wrapper\0")));
        assert!(!is_kubelet(&parse_cmdline(b"")));
        assert!(!is_kubelet(&parse_cmdline(b"/bin/sh\0-c\0kubelet")));
        // Non-UTF-8 bytes are replaced, never a panic.
        assert_eq!(parse_cmdline(b"\xffkubelet\0").len(), 1);
    }

    #[test]
    fn exited_process_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_process_at(&dir.path().join("status"), &"/proc/9/status", 9),
            Ok(None)
        ));
    }

    /// A status file with a bad affinity names the file (as the host sees it) and the field;
    /// one that cannot be read is the read's own error.
    #[test]
    fn process_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("status");
        std::fs::write(&path, "Name:\tjava\nCpus_allowed_list:\t1.3\n").unwrap();
        let e = read_process_at(&path, &"/proc/9/status", 9).unwrap_err();
        assert!(
            matches!(&e, ProcessError::Status { path, source: StatusError::CpusAllowed(_) } if path == "/proc/9/status"),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("/proc/9/status: Cpus_allowed_list: invalid cpuset token \"1.3\""),
            "{e}"
        );
        let e = read_process_at(dir.path(), &"/proc/9/status", 9).unwrap_err();
        assert!(matches!(&e, ProcessError::Read(ReadError::IsDir { .. })), "{e:?}");
        assert_eq!(e.to_string(), "/proc/9/status: is a directory, not a file");
    }

    proptest::proptest! {
        #[test]
        fn status_and_cmdline_parsers_never_panic(text in "\\PC{0,200}", bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse_status_cpus_allowed(&text);
            let _ = parse_status_cpus_allowed(&format!("Cpus_allowed_list:\t{text}"));
            let args = parse_cmdline(&bytes);
            let _ = is_kubelet(&args);
        }
    }
}

#[cfg(test)]
mod start_time_tests {
    use super::*;

    #[test]
    fn start_time_is_boot_time_plus_ticks() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        std::fs::create_dir_all(proc.join("42")).unwrap();
        std::fs::write(proc.join("stat"), "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n").unwrap();
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap().unwrap() as u64;
        // The 52 fields of Linux 3.5 and later, start time in field 22; the command holds a space
        // and a parenthesis, as a process may name itself.
        let mut fields: Vec<String> = (3..=21).map(|n| n.to_string()).collect();
        fields.push((hz * 3600 + 7).to_string());
        fields.extend((23..=52).map(|n| n.to_string()));
        std::fs::write(proc.join("42/stat"), format!("42 (kube let) ) {}\n", fields.join(" "))).unwrap();
        let host = HostPaths::new(dir.path(), None);
        assert_eq!(started_at(&host, 42), Some(1_700_003_600));
        assert_eq!(started_at(&host, 43), None);
        std::fs::write(proc.join("stat"), "cpu 1\n").unwrap();
        assert_eq!(started_at(&host, 42), None);
    }
}

#[cfg(test)]
mod stat_tests {
    use super::*;

    /// A line as Linux 3.5 and later write it (52 fields), of a process whose command holds ") (".
    const STAT: &str = "4242 (a) (b) S 1 4242 4242 0 -1 4194560 1190 0 0 0 150 7 0 0 20 0 5 0 123456 27774976 3390 \
                        18446744073709551615 1 1 0 0 0 0 0 4096 17415 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn fields_are_counted_from_the_last_parenthesis() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!((s.pid, s.comm.as_str(), s.state), (4242, "a) (b", 'S'));
        assert_eq!((s.flags, s.utime, s.stime, s.num_threads), (4194560, 150, 7, 5));
        assert_eq!((s.starttime, s.vsize, s.rss), (123456, 27774976, 3390));
        // Linux before 3.5 writes fewer fields at the end: still a stat line.
        let old: Vec<&str> = STAT.split(' ').take(44).collect();
        assert_eq!(parse_stat(&old.join(" ")).map(|s| s.starttime), Some(123456));
    }

    #[test]
    fn what_is_not_a_stat_line_is_none_never_a_panic() {
        // procfs-core 0.18 alone panics on the first three (it slices at the parentheses).
        for text in [
            "4242 (a)",
            "(a) S 1 2 3",
            "4242 )a( S 1",
            "\u{e9}(a) S 1",
            "4242 (a)\u{e9}S 1",
            "4242 (a) S 1 2 3",
            "no parentheses here",
            "",
        ] {
            assert!(parse_stat(text).is_none(), "{text:?}");
        }
        assert!(
            parse_stat(&STAT.replace(" 150 ", " x ")).is_none(),
            "a field that is not a number"
        );
    }

    #[test]
    fn this_process_s_own_line() {
        let s = parse_stat(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        assert_eq!(s.pid, std::process::id() as i32);
        assert!(s.num_threads >= 1 && s.vsize > 0 && s.rss > 0, "{s:?}");
    }

    proptest::proptest! {
        #[test]
        fn the_stat_parser_never_panics(head in "\\PC{0,20}", tail in "\\PC{0,200}") {
            let _ = parse_stat(&format!("{head}({tail}"));
            let _ = parse_stat(&format!("{head}){tail}"));
            let _ = parse_stat(&format!("{head} (x) {tail}"));
            let _ = parse_stat(&format!("1 ({head}) {tail}"));
        }
    }
}
