//! The agent's own `process_*` metrics, read from `/proc/self` at each scrape.
//!
//! The `prometheus` crate's process collector divides clock ticks by the tick rate in integers,
//! so `process_cpu_seconds_total` of an agent that uses a few milliseconds a minute stays at 0
//! and `rate()` of it reads 0. Here the ticks are divided as floats: 10 ms resolution at the
//! usual 100 ticks a second.
//!
//! `/proc/self/stat` and `/proc/self/cgroup` are read at each scrape (the first parsed by
//! `procfs-core`; the second parsed, and the limit files looked for, only when it changed);
//! the open descriptors are counted from `/proc/self/fd` and their limit is `getrlimit(2)`'s,
//! which need no parsing.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::collect::procfs;
use crate::exposition::{Collect, Error, Families, Kind};

/// The fields of `/proc/<pid>/stat` the metrics need (proc_pid_stat(5)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// User plus system time, in clock ticks (fields 14 and 15).
    pub cpu_ticks: u64,
    /// Threads (field 20).
    pub threads: u64,
    /// Start time in clock ticks after boot (field 22).
    pub start_ticks: u64,
    /// Virtual memory in bytes (field 23).
    pub vsize_bytes: u64,
    /// Resident set in pages (field 24).
    pub rss_pages: u64,
}

/// Parses a `/proc/<pid>/stat` line ([`procfs::parse_stat`]); `None` when it is cut short or a
/// field is not a number.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let stat = procfs::parse_stat(text)?;
    Some(Stat {
        cpu_ticks: stat.utime.checked_add(stat.stime)?,
        threads: u64::try_from(stat.num_threads).ok()?,
        start_ticks: stat.starttime,
        vsize_bytes: stat.vsize,
        rss_pages: stat.rss,
    })
}

/// The boot time (unix seconds) from the `btime` line of `/proc/stat`.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// CPU seconds from clock ticks, with the fraction kept.
pub fn cpu_seconds(ticks: u64, ticks_per_second: u64) -> f64 {
    ticks as f64 / ticks_per_second.max(1) as f64
}

/// A cgroup v1 limit at or above this is "no limit" (the kernel shows the page-rounded
/// `LONG_MAX`, 9223372036854771712).
const V1_UNLIMITED: u64 = 1 << 62;

/// A cgroup's memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLimit {
    Bytes(u64),
    Unlimited,
}

impl MemoryLimit {
    /// As the metric's value: no limit is `+Inf`, so `rss > 0.8 * limit` never holds for it.
    fn as_f64(self) -> f64 {
        match self {
            MemoryLimit::Bytes(b) => b as f64,
            MemoryLimit::Unlimited => f64::INFINITY,
        }
    }
}

/// The file that holds this process's memory limit, from `cgroups` (the text of
/// `/proc/self/cgroup`) and the cgroup mount `root` (`/sys/fs/cgroup`). The memory
/// controller's own line is used: v1 (`N:memory:/path` or with other controllers,
/// `memory.limit_in_bytes`), else v2 (`0::/path`, `memory.max`). The path is looked up below
/// the mount first (a host cgroup namespace shows the whole tree), then the mount's root is
/// read (in a container the runtime mounts the container's own cgroup there).
fn memory_limit_file(cgroups: &str, root: &Path) -> Option<PathBuf> {
    match own_cgroup(cgroups, "memory")? {
        OwnCgroup::V1 { path, .. } => limit_file(&root.join("memory"), &path, "memory.limit_in_bytes"),
        OwnCgroup::V2 { path } => limit_file(root, &path, "memory.max"),
    }
}

/// `file` of the cgroup at `path` below `mount` when there is one, else at the mount's root
/// (see [`memory_limit_file`]).
fn limit_file(mount: &Path, path: &str, file: &str) -> Option<PathBuf> {
    [mount.join(path).join(file), mount.join(file)]
        .into_iter()
        .find(|f| f.is_file())
}

/// Where this process sits for one controller, from the text of `/proc/self/cgroup`.
enum OwnCgroup {
    /// The controller's own v1 line: the controllers mounted together (`cpu,cpuacct`) and the
    /// path, relative.
    V1 { controllers: String, path: String },
    /// No v1 line for it: the unified (v2) line's path, relative.
    V2 { path: String },
}

/// `None` when the text is not a cgroup file (procfs-core's `ProcessCGroups`: a line that is
/// not `hierarchy:controllers:path` with a numeric hierarchy) or has no line for `controller`.
fn own_cgroup(cgroups: &str, controller: &str) -> Option<OwnCgroup> {
    use procfs_core::FromRead as _;
    let lines = procfs_core::ProcessCGroups::from_read(cgroups.as_bytes()).ok()?;
    let mut v2 = None;
    for line in lines {
        let path = line.pathname.trim_start_matches('/').to_string();
        if line.controllers.iter().any(|c| c == controller) {
            return Some(OwnCgroup::V1 {
                controllers: line.controllers.join(","),
                path,
            });
        }
        if line.controllers.is_empty() {
            v2 = Some(OwnCgroup::V2 { path });
        }
    }
    v2
}

/// The files that hold this process's CPU limit (CFS bandwidth).
#[derive(Debug, Clone, PartialEq)]
enum CpuLimitFiles {
    /// `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`.
    V1 { quota: PathBuf, period: PathBuf },
    /// `cpu.max`: `max 100000` or `20000 100000`.
    V2(PathBuf),
}

/// The files that hold this process's CPU limit, from `cgroups` (the text of
/// `/proc/self/cgroup`) and the cgroup mount `root`. v1: the `cpu` controller's line
/// (`N:cpu:/path`, or with `cpuacct`), in the hierarchy mounted under the controllers' names
/// (`cpu,cpuacct`, else `cpu`); v2: `cpu.max`. Looked up below the mount first, then at its
/// root, as for memory.
fn cpu_limit_files(cgroups: &str, root: &Path) -> Option<CpuLimitFiles> {
    match own_cgroup(cgroups, "cpu")? {
        OwnCgroup::V1 { controllers, path } => {
            let quota = [root.join(controllers), root.join("cpu")]
                .iter()
                .find_map(|mount| limit_file(mount, &path, "cpu.cfs_quota_us"))?;
            let period = quota.with_file_name("cpu.cfs_period_us");
            Some(CpuLimitFiles::V1 { quota, period })
        }
        OwnCgroup::V2 { path } => limit_file(root, &path, "cpu.max").map(CpuLimitFiles::V2),
    }
}

/// A small file read whole in one allocation (`fs::read_to_string` sizes its buffer from the
/// file's length, which `/proc` and cgroup files report as 0, and grows it read by read).
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::with_capacity(1024);
    std::fs::File::open(path).ok()?.read_to_string(&mut text).ok()?;
    Some(text)
}

fn read_cpu_limit(files: &CpuLimitFiles) -> Option<f64> {
    match files {
        CpuLimitFiles::V1 { quota, period } => {
            let read = |f: &Path| -> Option<i64> { read_small(f)?.trim().parse().ok() };
            let quota = read(quota)?;
            if quota < 0 {
                return Some(f64::INFINITY);
            }
            let period = read(period).filter(|p| *p > 0)?;
            Some(quota as f64 / period as f64)
        }
        CpuLimitFiles::V2(file) => {
            let text = read_small(file)?;
            let mut fields = text.split_whitespace();
            let (quota, period) = (fields.next()?, fields.next().unwrap_or("100000"));
            if quota == "max" {
                return Some(f64::INFINITY);
            }
            let (quota, period): (f64, f64) = (quota.parse().ok()?, period.parse().ok()?);
            (period > 0.0).then_some(quota / period)
        }
    }
}

/// `max` (v2) or a v1 value from the kernel's "unlimited" up is no limit; a file that is not a
/// number is `None`.
fn read_memory_limit(file: &Path) -> Option<MemoryLimit> {
    let text = read_small(file)?;
    let text = text.trim();
    if text == "max" {
        return Some(MemoryLimit::Unlimited);
    }
    let value: u64 = text.parse().ok()?;
    Some(if value < V1_UNLIMITED {
        MemoryLimit::Bytes(value)
    } else {
        MemoryLimit::Unlimited
    })
}

/// Where this process's limits are read, found from `/proc/self/cgroup`: again only when that
/// file changes (the process was moved to another cgroup), since finding them takes several
/// lookups. The limits themselves are read at every scrape: they can change in place.
#[derive(Debug, Default)]
struct LimitFiles {
    /// The text of `/proc/self/cgroup` they were found from.
    cgroups: String,
    memory: Option<PathBuf>,
    cpu: Option<CpuLimitFiles>,
}

impl LimitFiles {
    fn find(cgroups: String) -> Self {
        let mount = Path::new("/sys/fs/cgroup");
        LimitFiles {
            memory: memory_limit_file(&cgroups, mount),
            cpu: cpu_limit_files(&cgroups, mount),
            cgroups,
        }
    }
}

/// The families [`ProcessMetrics`] writes, with their help texts.
const CPU: (&str, &str) = (
    "process_cpu_seconds_total",
    "User and system CPU time of the agent, in seconds (10 ms resolution at 100 ticks a second).",
);
const RESIDENT: (&str, &str) = (
    "process_resident_memory_bytes",
    "Resident memory of the agent, in bytes.",
);
const VIRTUAL: (&str, &str) = ("process_virtual_memory_bytes", "Virtual memory of the agent, in bytes.");
const OPEN_FDS: (&str, &str) = ("process_open_fds", "Open file descriptors of the agent.");
const MAX_FDS: (&str, &str) = ("process_max_fds", "The agent's limit on open file descriptors.");
const START: (&str, &str) = ("process_start_time_seconds", "When the agent started, in unix seconds.");
const THREADS: (&str, &str) = ("process_threads", "Threads of the agent.");
const MEMORY_LIMIT: (&str, &str) = (
    "nodemedic_memory_limit_bytes",
    "The memory limit of the agent's own cgroup (its container's limit), in bytes; +Inf when it has none.",
);
const CPU_LIMIT: (&str, &str) = (
    "nodemedic_cpu_limit_cores",
    "The CPU limit of the agent's own cgroup (its container's limit, CFS quota over period), in cores; +Inf when it has none.",
);
const FAMILIES: [(&str, &str); 9] = [
    CPU,
    RESIDENT,
    VIRTUAL,
    OPEN_FDS,
    MAX_FDS,
    START,
    THREADS,
    MEMORY_LIMIT,
    CPU_LIMIT,
];

/// Collects `process_*` for this process at each scrape. A file that cannot be read leaves
/// its metrics out of that scrape rather than exporting a wrong value.
pub struct ProcessMetrics {
    ticks_per_second: u64,
    page_size: u64,
    /// Boot time, read once (it does not change while the process lives).
    boot_time: Mutex<Option<u64>>,
    /// Where the limits were found, and from which `/proc/self/cgroup`.
    limits: Mutex<Option<LimitFiles>>,
}

impl ProcessMetrics {
    pub fn new() -> Self {
        let sysconf = |var| {
            nix::unistd::sysconf(var)
                .ok()
                .flatten()
                .and_then(|v| u64::try_from(v).ok())
        };
        ProcessMetrics {
            ticks_per_second: sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap_or(100),
            page_size: sysconf(nix::unistd::SysconfVar::PAGE_SIZE).unwrap_or(4096),
            boot_time: Mutex::new(None),
            limits: Mutex::new(None),
        }
    }

    fn boot_time(&self) -> Option<u64> {
        let mut cached = self.boot_time.lock().ok()?;
        if cached.is_none() {
            *cached = std::fs::read_to_string("/proc/stat")
                .ok()
                .as_deref()
                .and_then(parse_boot_time);
        }
        *cached
    }

    /// The memory and CPU limits, `None` each when it cannot be read.
    fn limits(&self) -> (Option<MemoryLimit>, Option<f64>) {
        let (Some(cgroups), Ok(mut cached)) = (read_small(Path::new("/proc/self/cgroup")), self.limits.lock()) else {
            return (None, None);
        };
        let files = match cached.take() {
            Some(files) if files.cgroups == cgroups => files,
            _ => LimitFiles::find(cgroups),
        };
        let memory = files.memory.as_deref().and_then(read_memory_limit);
        let cpu = files.cpu.as_ref().and_then(read_cpu_limit);
        // Found again next time when a file that was there could not be read.
        if memory.is_some() == files.memory.is_some() && cpu.is_some() == files.cpu.is_some() {
            *cached = Some(files);
        }
        (memory, cpu)
    }
}

impl Collect for ProcessMetrics {
    fn collect<'a>(&'a self, out: &mut Families<'a>) -> Result<(), Error> {
        let mut family = |(name, help): (&'static str, &str), kind, value| out.single(name, help, kind, value);
        if let Some(stat) = read_small(Path::new("/proc/self/stat")).as_deref().and_then(parse_stat) {
            // The kernel's total, as a counter: no drift from summing.
            family(CPU, Kind::Counter, cpu_seconds(stat.cpu_ticks, self.ticks_per_second));
            family(RESIDENT, Kind::Gauge, (stat.rss_pages * self.page_size) as f64);
            family(VIRTUAL, Kind::Gauge, stat.vsize_bytes as f64);
            family(THREADS, Kind::Gauge, stat.threads as f64);
            if let Some(boot) = self.boot_time() {
                let started = boot as f64 + cpu_seconds(stat.start_ticks, self.ticks_per_second);
                family(START, Kind::Gauge, started);
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // The directory handle being read is one of the entries: leave it out.
            family(OPEN_FDS, Kind::Gauge, dir.count().saturating_sub(1) as f64);
        }
        let (memory, cpu) = self.limits();
        if let Some(limit) = memory {
            family(MEMORY_LIMIT, Kind::Gauge, limit.as_f64());
        }
        if let Some(cores) = cpu {
            family(CPU_LIMIT, Kind::Gauge, cores);
        }
        if let Ok((soft, _)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
            family(MAX_FDS, Kind::Gauge, soft as f64);
        }
        Ok(())
    }

    fn names(&self) -> Vec<String> {
        FAMILIES.iter().map(|(name, _)| name.to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory limit of this process's own cgroup as a scrape finds and reads it.
    fn own_memory_limit(cgroups: &str, root: &Path) -> Option<MemoryLimit> {
        read_memory_limit(&memory_limit_file(cgroups, root)?)
    }

    /// The CPU limit in cores (`f64::INFINITY`: none) as a scrape finds and reads it.
    fn own_cpu_limit(cgroups: &str, root: &Path) -> Option<f64> {
        read_cpu_limit(&cpu_limit_files(cgroups, root)?)
    }

    /// A line in the kernel's layout (the first 44 fields) of a process whose command holds ") (".
    const STAT: &str = "4242 (a) (b) S 1 4242 4242 0 -1 4194560 1190 0 0 0 150 7 0 0 20 0 5 0 \
                        123456 27774976 3390 18446744073709551615 1 1 0 0 0 0 0 4096 17415 0 0 0 \
                        17 1 0 0 0 0 0";

    #[test]
    fn reads_the_fields_after_a_command_with_parentheses() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(
            s,
            Stat {
                cpu_ticks: 157,
                threads: 5,
                start_ticks: 123456,
                vsize_bytes: 27774976,
                rss_pages: 3390,
            }
        );
    }

    #[test]
    fn cpu_seconds_keep_their_fraction() {
        // 157 ticks at 100 a second: the integer division of the prometheus crate gives 1.
        assert_eq!(cpu_seconds(157, 100), 1.57);
        assert_eq!(cpu_seconds(3, 100), 0.03);
        assert_eq!(cpu_seconds(5, 0), 5.0, "a tick rate of 0 does not divide by zero");
    }

    #[test]
    fn a_short_or_garbled_line_is_none() {
        assert_eq!(parse_stat("4242 (a) S 1 2 3"), None);
        assert_eq!(parse_stat("no parentheses here"), None);
        assert_eq!(parse_stat(&STAT.replace(" 150 ", " x ")), None);
    }

    fn cgroup_tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn cpu_limit_of_the_own_cgroup_v1_v2_and_in_a_container() {
        let limit = |files: &[(&str, &str)]| {
            let t = cgroup_tree(files);
            let cgroups = std::fs::read_to_string(t.path().join("proc-self-cgroup")).unwrap();
            own_cpu_limit(&cgroups, &t.path().join("cg"))
        };
        // v1 with cpu and cpuacct co-mounted, the whole tree visible.
        let comounted = "4:memory:/a\n3:cpu,cpuacct:/kubepods/pod1/c1\n0::/\n";
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", comounted),
                ("cg/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"),
                ("cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n"),
                ("cg/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_quota_us", "20000\n"),
                ("cg/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_period_us", "100000\n"),
            ]),
            Some(0.2)
        );
        // v1 with a hierarchy of its own (`1:cpu:/...`), in a container: the mount's root.
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", "2:cpuacct:/x\n1:cpu:/x\n"),
                ("cg/cpu/cpu.cfs_quota_us", "150000\n"),
                ("cg/cpu/cpu.cfs_period_us", "100000\n"),
            ]),
            Some(1.5)
        );
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", "1:cpu:/\n"),
                ("cg/cpu/cpu.cfs_quota_us", "-1\n"),
                ("cg/cpu/cpu.cfs_period_us", "100000\n"),
            ]),
            Some(f64::INFINITY)
        );
        // v2.
        assert_eq!(
            limit(&[("proc-self-cgroup", "0::/\n"), ("cg/cpu.max", "20000 100000\n")]),
            Some(0.2)
        );
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", "0::/kubepods.slice/c1.scope\n"),
                ("cg/cpu.max", "max 100000\n"),
                ("cg/kubepods.slice/c1.scope/cpu.max", "50000 100000\n"),
            ]),
            Some(0.5)
        );
        assert_eq!(
            limit(&[("proc-self-cgroup", "0::/\n"), ("cg/cpu.max", "max 100000\n")]),
            Some(f64::INFINITY)
        );
        // Nothing readable, a zero period, garbage: no value rather than a wrong one.
        assert_eq!(limit(&[("proc-self-cgroup", "0::/\n")]), None);
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", "1:cpu:/\n"),
                ("cg/cpu/cpu.cfs_quota_us", "20000\n"),
                ("cg/cpu/cpu.cfs_period_us", "0\n"),
            ]),
            None
        );
        assert_eq!(limit(&[("proc-self-cgroup", "0::/\n"), ("cg/cpu.max", "lots\n")]), None);
    }

    #[test]
    fn memory_limit_of_the_own_cgroup_v1_v2_and_in_a_container() {
        let limit = |files: &[(&str, &str)]| {
            let t = cgroup_tree(files);
            let cgroups = std::fs::read_to_string(t.path().join("proc-self-cgroup")).unwrap();
            own_memory_limit(&cgroups, &t.path().join("cg"))
        };
        let v1_host = "9:name=systemd:/\n4:memory:/kubepods/pod1/c1\n3:cpu,cpuacct:/\n0::/\n";
        // v1, the whole tree visible: the own directory's limit, not the root's.
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", v1_host),
                ("cg/memory/memory.limit_in_bytes", "9223372036854771712\n"),
                ("cg/memory/kubepods/pod1/c1/memory.limit_in_bytes", "100663296\n"),
            ]),
            Some(MemoryLimit::Bytes(100_663_296))
        );
        // v1 in a container: the host path is not below the mount; its root is the container's.
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", v1_host),
                ("cg/memory/memory.limit_in_bytes", "100663296\n"),
            ]),
            Some(MemoryLimit::Bytes(100_663_296))
        );
        // The memory controller sharing a line with others.
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", "4:memory,hugetlb:/a\n"),
                ("cg/memory/a/memory.limit_in_bytes", "4096\n"),
            ]),
            Some(MemoryLimit::Bytes(4096))
        );
        // v1 unlimited.
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", "4:memory:/\n"),
                ("cg/memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ]),
            Some(MemoryLimit::Unlimited)
        );
        // v2 with a cgroup namespace ("/"), with the whole tree, and unlimited.
        assert_eq!(
            limit(&[("proc-self-cgroup", "0::/\n"), ("cg/memory.max", "100663296\n")]),
            Some(MemoryLimit::Bytes(100_663_296))
        );
        assert_eq!(
            limit(&[
                ("proc-self-cgroup", "0::/kubepods.slice/c1.scope\n"),
                ("cg/memory.max", "max\n"),
                ("cg/kubepods.slice/c1.scope/memory.max", "52428800\n"),
            ]),
            Some(MemoryLimit::Bytes(52_428_800))
        );
        assert_eq!(
            limit(&[("proc-self-cgroup", "0::/\n"), ("cg/memory.max", "max\n")]),
            Some(MemoryLimit::Unlimited)
        );
        assert_eq!(MemoryLimit::Unlimited.as_f64(), f64::INFINITY);
        // Nothing readable, or garbage: no value rather than a wrong one.
        assert_eq!(limit(&[("proc-self-cgroup", "0::/\n")]), None);
        assert_eq!(
            limit(&[("proc-self-cgroup", "0::/\n"), ("cg/memory.max", "lots\n")]),
            None
        );
        assert_eq!(limit(&[("proc-self-cgroup", "garbage")]), None);
    }

    #[test]
    fn this_process_s_stat_as_procfs_core_reads_it_and_as_the_kernel_wrote_it() {
        let text = std::fs::read_to_string("/proc/self/stat").unwrap();
        let s = parse_stat(&text).unwrap();
        // The fields as the kernel wrote them (proc_pid_stat(5)), counted from the last `)`.
        let fields: Vec<u64> = text[text.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let field = |n: usize| fields[n - 3];
        assert_eq!(
            s,
            Stat {
                cpu_ticks: field(14) + field(15),
                threads: field(20),
                start_ticks: field(22),
                vsize_bytes: field(23),
                rss_pages: field(24),
            }
        );
        // And sane: a live process of at least a thread and a megabyte, started since boot, that
        // has not used more CPU than every CPU since then.
        let m = ProcessMetrics::new();
        let uptime: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..10_000).contains(&s.threads), "{s:?}");
        let resident = s.rss_pages * m.page_size;
        assert!(resident > 1_000_000 && resident < s.vsize_bytes, "{s:?}");
        assert!(
            cpu_seconds(s.start_ticks, m.ticks_per_second) <= uptime,
            "{s:?}, up {uptime} s"
        );
        let cpus = std::thread::available_parallelism().unwrap().get() as f64;
        assert!(cpu_seconds(s.cpu_ticks, m.ticks_per_second) <= uptime * cpus, "{s:?}");
    }

    #[test]
    fn this_process_s_cgroup_file_names_its_memory_cgroup() {
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        // The memory controller's own v1 line, else the v2 line, as the kernel wrote it.
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.splitn(3, ':').collect()).collect();
        let v1 = lines.iter().find(|l| l[1].split(',').any(|c| c == "memory"));
        let want = v1.or_else(|| lines.iter().find(|l| l[1].is_empty())).unwrap();
        match own_cgroup(&text, "memory").unwrap() {
            OwnCgroup::V1 { controllers, path } => {
                assert_eq!(
                    (controllers.as_str(), path.as_str()),
                    (want[1], want[2].trim_start_matches('/'))
                );
            }
            OwnCgroup::V2 { path } => assert_eq!(("", path.as_str()), (want[1], want[2].trim_start_matches('/'))),
        }
        // A file the kernel would not write is no file: no limit rather than a guess from the
        // lines around the bad one.
        assert!(own_cgroup("4:memory:/a\nnot a cgroup line\n", "memory").is_none());
        assert!(own_cgroup("4:memory:/a\n", "memory").is_some());
    }

    #[test]
    fn boot_time_from_proc_stat() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1764000000\nprocesses 9\n"),
            Some(1764000000)
        );
        assert_eq!(parse_boot_time("cpu  1 2 3\n"), None);
    }

    #[test]
    fn collects_this_process_with_values_that_match_the_kernel() {
        let m = ProcessMetrics::new();
        // Spend a little CPU so the total is not 0.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let registry = crate::exposition::Registry::new();
        registry.register(Box::new(m)).unwrap();
        let text = registry.render();
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.split(' ').next() == Some(name))
                .unwrap_or_else(|| panic!("{name} in {text}"));
            line[name.len() + 1..].parse().unwrap()
        };
        for (name, _) in FAMILIES.iter().filter(|(n, _)| n.starts_with("process_")) {
            let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}: {text}");
        }
        let m = ProcessMetrics::new();
        let stat = parse_stat(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        let cpu = value("process_cpu_seconds_total");
        assert!(cpu > 0.0, "CPU seconds {cpu} of a process that spent some");
        assert!(
            cpu <= cpu_seconds(stat.cpu_ticks, m.ticks_per_second),
            "{cpu} is not ahead of the kernel"
        );
        assert_eq!(value("process_threads"), value("process_threads").round());
        assert!(value("process_threads") >= 1.0);
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
        assert!(value("process_open_fds") >= 3.0, "stdin, stdout and stderr at least");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(
            started <= now + 1.0 && started > now - 3600.0,
            "start {started}, now {now}"
        );
    }
}
