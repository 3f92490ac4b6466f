//! The agent's own `process_*` metrics, read from `/proc/self` at each scrape.
//!
//! The `prometheus` crate's process collector divides clock ticks by the tick rate in integers,
//! so `process_cpu_seconds_total` of an agent that uses a few milliseconds a minute stays at 0
//! and `rate()` of it reads 0. Here the ticks are divided as floats: 10 ms resolution at the
//! usual 100 ticks a second.
//!
//! `/proc/self/stat` and `/proc/self/cgroup` are parsed by `procfs-core` (once per scrape, so
//! its cost does not matter); the open descriptors are counted from `/proc/self/fd` and their
//! limit is `getrlimit(2)`'s, which need no parsing.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};

use crate::collect::procfs;

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

/// The memory limit of this process's own cgroup, from `cgroups` (the text of
/// `/proc/self/cgroup`) and the cgroup mount `root` (`/sys/fs/cgroup`); `None` when it cannot
/// be read.
///
/// The memory controller's own line is used: v1 (`N:memory:/path` or with other controllers,
/// `memory.limit_in_bytes`), else v2 (`0::/path`, `memory.max`). The path is looked up below
/// the mount first (a host cgroup namespace shows the whole tree), then the mount's root is
/// read (in a container the runtime mounts the container's own cgroup there).
pub fn own_memory_limit(cgroups: &str, root: &Path) -> Option<MemoryLimit> {
    match own_cgroup(cgroups, "memory")? {
        OwnCgroup::V1 { path, .. } => {
            let base = root.join("memory");
            read_limit(&[base.join(&path), base], "memory.limit_in_bytes")
        }
        OwnCgroup::V2 { path } => read_limit(&[root.join(&path), root.to_path_buf()], "memory.max"),
    }
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

/// The CPU limit (CFS bandwidth) of this process's own cgroup in cores, from `cgroups` (the
/// text of `/proc/self/cgroup`) and the cgroup mount `root`; `Some(f64::INFINITY)` when it has none,
/// `None` when it cannot be read. v1: the `cpu` controller's line (`N:cpu:/path`, or with
/// `cpuacct`), `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`, in the hierarchy mounted
/// under the controllers' names (`cpu,cpuacct`, else `cpu`); v2: `cpu.max` (`max 100000` or
/// `20000 100000`). Looked up below the mount first, then at its root, as for memory.
pub fn own_cpu_limit(cgroups: &str, root: &Path) -> Option<f64> {
    match own_cgroup(cgroups, "cpu")? {
        OwnCgroup::V1 { controllers, path } => {
            let mounts = [root.join(controllers), root.join("cpu")];
            let dirs: Vec<PathBuf> = mounts.iter().flat_map(|m| [m.join(&path), m.clone()]).collect();
            let dir = dirs.iter().find(|d| d.join("cpu.cfs_quota_us").is_file())?;
            let read = |f: &str| -> Option<i64> { std::fs::read_to_string(dir.join(f)).ok()?.trim().parse().ok() };
            let quota = read("cpu.cfs_quota_us")?;
            if quota < 0 {
                return Some(f64::INFINITY);
            }
            let period = read("cpu.cfs_period_us").filter(|p| *p > 0)?;
            Some(quota as f64 / period as f64)
        }
        OwnCgroup::V2 { path } => {
            let text = [root.join(&path), root.to_path_buf()]
                .iter()
                .find_map(|d| std::fs::read_to_string(d.join("cpu.max")).ok())?;
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

/// The first of `dirs` that holds `file`, parsed: `max` (v2) or a v1 value from the kernel's
/// "unlimited" up is no limit; a file that is not a number is `None`.
fn read_limit(dirs: &[PathBuf], file: &str) -> Option<MemoryLimit> {
    let text = dirs.iter().find_map(|d| std::fs::read_to_string(d.join(file)).ok())?;
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

/// Collects `process_*` for this process at each scrape. A file that cannot be read leaves
/// its metrics out of that scrape rather than exporting a wrong value.
pub struct ProcessMetrics {
    cpu_opts: Opts,
    cpu: Counter,
    resident: Gauge,
    virtual_memory: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    start_time: Gauge,
    threads: Gauge,
    memory_limit: Gauge,
    cpu_limit: Gauge,
    ticks_per_second: u64,
    page_size: u64,
    /// Boot time, read once (it does not change while the process lives).
    boot_time: Mutex<Option<u64>>,
}

impl ProcessMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let gauge = |name: &str, help: &str| Gauge::with_opts(Opts::new(name, help));
        let cpu_opts = Opts::new(
            "process_cpu_seconds_total",
            "User and system CPU time of the agent, in seconds (10 ms resolution at 100 ticks a second).",
        );
        let sysconf = |var| {
            nix::unistd::sysconf(var)
                .ok()
                .flatten()
                .and_then(|v| u64::try_from(v).ok())
        };
        Ok(ProcessMetrics {
            cpu: Counter::with_opts(cpu_opts.clone())?,
            cpu_opts,
            resident: gauge(
                "process_resident_memory_bytes",
                "Resident memory of the agent, in bytes.",
            )?,
            virtual_memory: gauge("process_virtual_memory_bytes", "Virtual memory of the agent, in bytes.")?,
            open_fds: gauge("process_open_fds", "Open file descriptors of the agent.")?,
            max_fds: gauge("process_max_fds", "The agent's limit on open file descriptors.")?,
            start_time: gauge("process_start_time_seconds", "When the agent started, in unix seconds.")?,
            threads: gauge("process_threads", "Threads of the agent.")?,
            memory_limit: gauge(
                "nodemedic_memory_limit_bytes",
                "The memory limit of the agent's own cgroup (its container's limit), in bytes; +Inf when it has none.",
            )?,
            cpu_limit: gauge(
                "nodemedic_cpu_limit_cores",
                "The CPU limit of the agent's own cgroup (its container's limit, CFS quota over period), in cores; +Inf when it has none.",
            )?,
            ticks_per_second: sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap_or(100),
            page_size: sysconf(nix::unistd::SysconfVar::PAGE_SIZE).unwrap_or(4096),
            boot_time: Mutex::new(None),
        })
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
}

impl Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&Desc> {
        let mut all = self.cpu.desc();
        for g in self.gauges() {
            all.extend(g.desc());
        }
        all
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = vec![];
        if let Some(stat) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .as_deref()
            .and_then(parse_stat)
        {
            // A fresh counter each scrape, set to the kernel's total: no drift from summing.
            if let Ok(cpu) = Counter::with_opts(self.cpu_opts.clone()) {
                cpu.inc_by(cpu_seconds(stat.cpu_ticks, self.ticks_per_second));
                families.extend(cpu.collect());
            }
            self.resident.set((stat.rss_pages * self.page_size) as f64);
            self.virtual_memory.set(stat.vsize_bytes as f64);
            self.threads.set(stat.threads as f64);
            families.extend(self.resident.collect());
            families.extend(self.virtual_memory.collect());
            families.extend(self.threads.collect());
            if let Some(boot) = self.boot_time() {
                self.start_time
                    .set(boot as f64 + cpu_seconds(stat.start_ticks, self.ticks_per_second));
                families.extend(self.start_time.collect());
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // The directory handle being read is one of the entries: leave it out.
            self.open_fds.set(dir.count().saturating_sub(1) as f64);
            families.extend(self.open_fds.collect());
        }
        if let Ok(cgroups) = std::fs::read_to_string("/proc/self/cgroup") {
            let mount = Path::new("/sys/fs/cgroup");
            if let Some(limit) = own_memory_limit(&cgroups, mount) {
                self.memory_limit.set(limit.as_f64());
                families.extend(self.memory_limit.collect());
            }
            if let Some(cores) = own_cpu_limit(&cgroups, mount) {
                self.cpu_limit.set(cores);
                families.extend(self.cpu_limit.collect());
            }
        }
        if let Ok((soft, _)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
            self.max_fds.set(soft as f64);
            families.extend(self.max_fds.collect());
        }
        families
    }
}

impl ProcessMetrics {
    fn gauges(&self) -> [&Gauge; 8] {
        [
            &self.memory_limit,
            &self.cpu_limit,
            &self.resident,
            &self.virtual_memory,
            &self.open_fds,
            &self.max_fds,
            &self.start_time,
            &self.threads,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let m = ProcessMetrics::new().unwrap();
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
        let m = ProcessMetrics::new().unwrap();
        // Spend a little CPU so the total is not 0.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let families = m.collect();
        let value = |name: &str| -> f64 {
            let f = families
                .iter()
                .find(|f| f.name() == name)
                .unwrap_or_else(|| panic!("{name}"));
            let metric = &f.get_metric()[0];
            if name.ends_with("_total") {
                metric.get_counter().get_value()
            } else {
                metric.get_gauge().get_value()
            }
        };
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
