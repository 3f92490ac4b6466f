//! What the bench binaries measure a process with: statistics, `/proc` readings, a `/metrics`
//! scrape over a fresh connection, the port a process listens on, one whole-process run of
//! `nodemedic` with its own peak RSS, and the daemon started for a bench.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The `nodemedic` a bench runs: `$NODEMEDIC_BIN`, else the one beside the bench program
/// (`target/release/nodemedic` for a release build of the benches).
pub fn nodemedic_bin() -> PathBuf {
    std::env::var_os("NODEMEDIC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_exe().unwrap_or_default().with_file_name("nodemedic"))
}

/// `nodemedic run` at default settings for a bench: the host tree under `root`, the API of
/// `kubeconfig`, a free loopback port, logging at warn. Killed when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: std::process::Child,
    log: Option<std::thread::JoinHandle<String>>,
}

impl Daemon {
    pub fn start(root: &Path, node: &str, kubeconfig: &Path) -> Result<Daemon, String> {
        let bin = nodemedic_bin();
        let mut child = Command::new(&bin)
            .arg("run")
            .arg("--host-root")
            .arg(root)
            .args(["--node", node, "--listen", "127.0.0.1:0"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env("NODEMEDIC_LOG", "warn")
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        // The first 64 KiB of its log; the rest is drained so the daemon never blocks on it.
        let stderr = child.stderr.take();
        let log = std::thread::spawn(move || {
            use std::io::BufRead as _;
            let mut log = String::new();
            if let Some(s) = stderr {
                for line in std::io::BufReader::new(s).lines().map_while(Result::ok) {
                    if log.len() < 64 * 1024 {
                        log.push_str(&line);
                        log.push('\n');
                    }
                }
            }
            log
        });
        Ok(Daemon { child, log: Some(log) })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the daemon as the kubelet does, SIGTERM first, and SIGKILL after 30 s if it has not
    /// exited (a daemon under callgrind, tests/hot-functions.sh, writes its profile on the
    /// way out). Returns the start of its log.
    pub fn stop(mut self) -> String {
        crate::stop_child_within(&mut self.child, Duration::from_secs(30));
        self.log.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prints the first lines of a daemon's warn-level log, if it wrote any.
pub fn print_log_head(log: &str) {
    let warnings: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).take(5).collect();
    if !warnings.is_empty() {
        println!("\nnodemedic's log (warn and above, first lines):");
        for l in warnings {
            println!("    {l}");
        }
    }
}

/// (min, median, max) of the finite values, as the `slow-api` rule computes them (the median
/// of an even count is the mean of the middle two); NaNs for none.
pub fn stats(v: Vec<f64>) -> (f64, f64, f64) {
    nodemedic_rules::probes::stats(v).map_or((f64::NAN, f64::NAN, f64::NAN), |(median, min, max)| (min, median, max))
}

/// The median of [`stats`].
pub fn median(v: Vec<f64>) -> f64 {
    stats(v).1
}

/// The nearest-rank percentile `p` (0-100).
pub fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Clock ticks per second (`getconf CLK_TCK`).
pub fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// `utime + stime` of `pid` in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

/// One `GET /metrics` over a fresh connection (as Prometheus does after an idle timeout; no
/// compression asked for): time to the last byte, and the body's size. `None` unless 200.
pub fn scrape(addr: &str) -> Option<(Duration, usize)> {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let elapsed = start.elapsed();
    let split = out.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&out[..split]);
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return None;
    }
    let mut body = out.len() - split - 4;
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunked_len(&out[split + 4..]).unwrap_or(body);
    }
    Some((elapsed, body))
}

/// The payload length of a chunked body.
fn dechunked_len(mut b: &[u8]) -> Option<usize> {
    let mut total = 0;
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(total);
        }
        total += size;
        b = b.get(eol + 2 + size + 2..)?;
    }
}

/// The IPv4 TCP addresses `pid` listens on (`127.0.0.1:<port>`), from its socket inodes and
/// `/proc/net/tcp`, in that file's order.
pub fn listen_addrs(pid: u32) -> Vec<String> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return vec![];
    };
    let inodes: std::collections::HashSet<String> = fds
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_string)
        })
        .collect();
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    tcp.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // state 0A = LISTEN
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                let port = u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok()?;
                return Some(format!("127.0.0.1:{port}"));
            }
            None
        })
        .collect()
}

/// The first of [`listen_addrs`]; `None` while `pid` listens on nothing.
pub fn listen_addr(pid: u32) -> Option<String> {
    listen_addrs(pid).into_iter().next()
}

/// [`listen_addr`], asked every 100 ms for up to 30 s.
pub fn wait_listen_addr(pid: u32) -> Option<String> {
    // 30 s: tests/hot-functions.sh runs the daemon under callgrind, which starts it 20 to 50
    // times slower.
    for _ in 0..300 {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(addr) = listen_addr(pid) {
            return Some(addr);
        }
    }
    None
}

/// Runs `bin args` once and prints "wall_seconds peak_rss_kib exit_code". The peak is the
/// process's own `VmHWM`, which nodemedic prints when `NODEMEDIC_REPORT_PEAK_RSS` is set
/// (`getrusage` on a child also counts the parent's pages at fork time). Meant to be called
/// from a fresh small process (the bench re-executed) so that fork and exec cost what they
/// cost a small process.
pub fn measure_one(bin: &Path, args: &[String]) -> ExitCode {
    let start = Instant::now();
    let out = Command::new(bin)
        .args(args)
        .env("NODEMEDIC_REPORT_PEAK_RSS", "1")
        .stdout(Stdio::null())
        .output();
    let wall = start.elapsed().as_secs_f64();
    let Ok(out) = out else {
        eprintln!("cannot run {}", bin.display());
        return ExitCode::from(2);
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss: f64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("nodemedic: peak_rss_kib="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0);
    println!("{wall} {rss} {}", out.status.code().unwrap_or(-1));
    ExitCode::SUCCESS
}

/// What an API request was, for counting: `get pods`, `create pods (dry run)`,
/// `patch nodes/status`, `watch pods`, `GET /version (non-resource)`.
pub fn request_kind(r: &crate::apiserver::RequestRecord) -> String {
    if r.is_watch {
        format!("watch {}", r.resource)
    } else if r.verb.is_empty() {
        format!("{} {} (non-resource)", r.method, r.path)
    } else {
        let sub = r.subresource.as_deref().map(|s| format!("/{s}")).unwrap_or_default();
        let group = if r.group.is_empty() {
            String::new()
        } else {
            format!(".{}", r.group)
        };
        let dry = if r.query.contains("dryRun") { " (dry run)" } else { "" };
        format!("{} {}{group}{sub}{dry}", r.verb, r.resource)
    }
}

/// The whole-process offline scan of generated nodes of 10, 110 and 250 pods (`scenarios::big_node`),
/// `runs` times each: prints a Markdown table of wall time and peak RSS, median (min-max). Each
/// run is measured by this program re-executed as `<self> --measure-one <scan args>`, which the
/// calling bench must hand to [`measure_one`].
/// The offline scan the benches time: the big node's tree and its pods file, JSON out.
pub fn scan_args<'a>(root: &'a str, pods_file: &'a str) -> [&'a str; 9] {
    [
        "scan",
        "--host-root",
        root,
        "--pods",
        pods_file,
        "--node",
        "bench-node",
        "--format",
        "json",
    ]
}

/// (min, median, max) of a series.
pub type Spread = (f64, f64, f64);

/// Runs `nodemedic <args>` `runs` times through this program's `--measure-one`: the wall time
/// (ms) and peak RSS (MiB) of each, as (min, median, max).
pub fn measure_scans(args: &[&str], runs: usize) -> Result<(Spread, Spread), String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let (mut walls, mut rsss) = (vec![], vec![]);
    for _ in 0..runs {
        let out = Command::new(&me)
            .arg("--measure-one")
            .args(args)
            .output()
            .map_err(|e| format!("cannot re-run {}: {e}", me.display()))?;
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        // A scan exits 0 (no findings) or 1 (findings); the peak must have been reported.
        if f.len() != 3 || !(f[2] == 0.0 || f[2] == 1.0) || f[1] < 0.0 {
            return Err(format!("bad scan measurement {line:?}"));
        }
        walls.push(f[0] * 1000.0);
        rsss.push(f[1] / 1024.0);
    }
    Ok((stats(walls), stats(rsss)))
}

pub fn scan_table(runs: usize) -> Result<(), String> {
    println!("| pods | containers | processes | wall median (min-max) ms | peak RSS median (min-max) MiB |");
    println!("|---:|---:|---:|---|---|");
    for pods in [10usize, 110, 250] {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        crate::scenarios::big_node(pods, 5)
            .write(dir.path())
            .map_err(|e| e.to_string())?;
        let root = dir.path().to_string_lossy().into_owned();
        let pods_file = dir.path().join("pods.json").to_string_lossy().into_owned();
        let scan = scan_args(&root, &pods_file);
        let ((wmin, wmed, wmax), (rmin, rmed, rmax)) = measure_scans(&scan, runs)?;
        println!(
            "| {pods} | {} | {} | {wmed:.1} ({wmin:.1}-{wmax:.1}) | {rmed:.1} ({rmin:.1}-{rmax:.1}) |",
            pods * 3,
            pods * 8,
        );
    }
    Ok(())
}

/// Runs a bench's async part on a runtime of `workers` threads: exit 0 when it succeeds, 2
/// with `<name>: <why>` on stderr when it (or the runtime) fails.
pub fn run_bench<F: std::future::Future<Output = Result<(), String>>>(
    name: &str,
    workers: usize,
    bench: F,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        assert_eq!(stats(vec![3.0, 1.0, 2.0]), (1.0, 2.0, 3.0));
        assert_eq!(stats(vec![4.0, 1.0, 2.0, 3.0]), (1.0, 2.5, 4.0));
        assert!(median(vec![]).is_nan());
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(v.clone(), 99.0), 99.0);
        assert_eq!(percentile(v, 0.0), 1.0);
    }

    #[test]
    fn chunked_bodies_are_measured_without_their_framing() {
        assert_eq!(dechunked_len(b"5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n"), Some(8));
        assert_eq!(dechunked_len(b"5\r\nhel"), None);
    }

    #[test]
    fn this_process_is_read_from_proc() {
        let pid = std::process::id();
        assert!(status_kib(pid, "VmRSS:").is_some_and(|k| k > 0));
        assert!(cpu_seconds(pid).is_some_and(|s| s >= 0.0));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listen_addrs(pid).contains(&format!("127.0.0.1:{port}")));
        drop(listener);
        assert!(!listen_addrs(pid).contains(&format!("127.0.0.1:{port}")));
    }
}
