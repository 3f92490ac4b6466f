//! nodemedic side by side with the node agent every cluster already runs, Prometheus's
//! `node_exporter`, in one run on one machine:
//!
//! 1. the offline `nodemedic scan` of generated nodes of 10, 110 and 250 pods (whole process:
//!    wall time and the process's own `VmHWM`, median and min-max of RUNS runs);
//! 2. the daemon (`nodemedic run`, default settings) on the 250-pod node against the in-repo
//!    API server double (its watch bookmarks once a minute, as kube-apiserver sends them), and `node_exporter` (default collectors, on 127.0.0.1) started at the
//!    same moment, measured over the same window with the same sampling: `VmRSS` every 5 s,
//!    CPU (`utime + stime` from `/proc/<pid>/stat`), 30 `/metrics` scrapes of each spread
//!    evenly over the window (latency and size), and the API requests the double saw;
//! 3. nodemedic's figures as ratios to node_exporter's.
//!
//! ```text
//! apt-get install -y prometheus-node-exporter   # the binary only: the service need not run
//! cargo build --release -p nodemedic -p nodemedic-tests
//! target/release/compare-bench [MINUTES] [RUNS]     # defaults: 5 minutes, 21 runs
//! ```
//!
//! `COMPARE_BENCH_ROLE=follower` measures the daemon as every agent but one runs: another agent
//! (the bench, renewing it every 15 s) holds the prober Lease, so the daemon only reads it and
//! runs no admission probe. The default, `prober`, measures the one agent that probes.
//!
//! `NODE_EXPORTER` names another node_exporter binary (default
//! `/usr/bin/prometheus-node-exporter`, Debian's), `NODEMEDIC_BIN` another nodemedic.
//! One minute of warm-up precedes the window. node_exporter does its work when scraped, so
//! its CPU depends on the scrape interval: the CPU spent inside scrapes is measured apart and
//! the table also gives both agents' CPU at a 30 s scrape interval.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::measure::{self, cpu_seconds, percentile, scrape, stats, status_kib};
use serde_json::json;

const PROBE_NAMESPACE: &str = "nodemedic";
const SCRAPES: usize = 30;
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// One minute, or `COMPARE_BENCH_WARMUP_SECONDS` (for a quick check of the bench itself).
fn warm_up() -> Duration {
    let secs = std::env::var("COMPARE_BENCH_WARMUP_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s >= 0.0)
        .unwrap_or(60.0);
    Duration::from_secs_f64(secs)
}

fn node_exporter_bin() -> PathBuf {
    std::env::var_os("NODE_EXPORTER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/prometheus-node-exporter"))
}

fn free_port() -> Option<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    Some(l.local_addr().ok()?.port())
}

// ---------------------------------------------------------------- 1. offline scans

fn scans(runs: usize) -> Result<(), String> {
    println!("## Offline `nodemedic scan` (whole process, {runs} runs per size)\n");
    measure::scan_table(runs)?;
    println!();
    Ok(())
}

// ---------------------------------------------------------------- 2. the two agents

/// What was measured of one long-running agent.
#[derive(Default)]
struct Agent {
    rss_mib: Vec<f64>,
    hwm_mib: f64,
    cpu_total: f64,
    /// CPU the agent spent while being scraped (summed over the scrapes).
    cpu_in_scrapes: f64,
    latency_ms: Vec<f64>,
    size: Vec<usize>,
    failed_scrapes: usize,
}

impl Agent {
    fn scrape(&mut self, pid: u32, addr: &str) {
        let before = cpu_seconds(pid);
        match scrape(addr) {
            Some((d, size)) => {
                self.latency_ms.push(d.as_secs_f64() * 1000.0);
                self.size.push(size);
            }
            None => self.failed_scrapes += 1,
        }
        // The agent's scrape work is done when the last byte has arrived.
        if let (Some(b), Some(a)) = (before, cpu_seconds(pid)) {
            self.cpu_in_scrapes += a - b;
        }
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn agents(minutes: f64) -> Result<(), String> {
    let pods = 250;
    let api = ApiServer::start().await.map_err(|e| e.to_string())?;
    api.set_bookmark_interval(nodemedic_tests::apiserver::APISERVER_BOOKMARK_INTERVAL);
    let node = nodemedic_tests::scenarios::big_node(pods, 5);
    api.store()
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBE_NAMESPACE}}));
    let drivers = nodemedic_tests::scenarios::seed_api(&api.store(), &node);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (root, kubeconfig) = nodemedic_tests::write_host(&api, dir.path(), &node)?;
    // The probe's dry-run pod goes to the kubeconfig's namespace, as in the DaemonSet.
    let text = std::fs::read_to_string(&kubeconfig).map_err(|e| e.to_string())?;
    let patched = text.replacen("namespace: default", &format!("namespace: {PROBE_NAMESPACE}"), 1);
    std::fs::write(&kubeconfig, patched).map_err(|e| e.to_string())?;

    // As a follower: the prober Lease is held elsewhere and renewed by the bench.
    let follower = std::env::var("COMPARE_BENCH_ROLE").is_ok_and(|r| r == "follower");
    let renewer = follower.then(|| {
        let store = api.store();
        let now = || jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
        store.create(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "nodemedic-prober", "namespace": PROBE_NAMESPACE},
            "spec": {"holderIdentity": "nodemedic-other/worker-2", "leaseDurationSeconds": 60,
                     "acquireTime": now(), "renewTime": now(), "leaseTransitions": 0}}));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(15)).await;
                store.modify("leases", Some(PROBE_NAMESPACE), "nodemedic-prober", |l| {
                    l["spec"]["renewTime"] = json!(now());
                });
            }
        })
    });
    println!(
        "role: {}\n",
        if follower {
            "follower (the prober Lease is held by another agent)"
        } else {
            "prober (the only agent: it holds the Lease and probes admission)"
        }
    );

    // nodemedic, default settings.
    let nm = measure::Daemon::start(&root, &node.name, &kubeconfig)?;
    let nm_pid = nm.pid();

    // node_exporter, default collectors, on a free loopback port. Not the systemd service.
    let ne_bin = node_exporter_bin();
    let ne_port = free_port().ok_or("no free port")?;
    let ne_addr = format!("127.0.0.1:{ne_port}");
    let ne_version = Command::new(&ne_bin)
        .arg("--version")
        .output()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines().next().unwrap_or("").to_string()
        })
        .map_err(|e| {
            format!(
                "{}: {e} (apt-get install -y prometheus-node-exporter)",
                ne_bin.display()
            )
        })?;
    let ne_child = Command::new(&ne_bin)
        .arg(format!("--web.listen-address={ne_addr}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", ne_bin.display()))?;
    let ne_pid = ne_child.id();
    let ne = Killed(ne_child);

    let nm_addr = tokio::task::spawn_blocking(move || measure::wait_listen_addr(nm_pid))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("could not find the daemon's listen port")?;
    println!("## The daemon and node_exporter at steady state\n");
    println!(
        "nodemedic pid {nm_pid} ({}) at {nm_addr}; {pods} pods here, {drivers} drivers elsewhere",
        measure::nodemedic_bin().display()
    );
    println!(
        "node_exporter pid {ne_pid} ({}, {ne_version}) at {ne_addr}",
        ne_bin.display()
    );
    println!(
        "warm-up {} s, then {minutes} min: VmRSS every {} s, {SCRAPES} scrapes of each spread evenly\n",
        warm_up().as_secs_f64(),
        SAMPLE_EVERY.as_secs()
    );
    tokio::time::sleep(warm_up()).await;

    api.clear_requests();
    let window = Duration::from_secs_f64(minutes * 60.0);
    let scrape_every = window.div_f64(SCRAPES as f64);
    let (mut a, mut b) = (Agent::default(), Agent::default());
    let start = Instant::now();
    let nm_cpu0 = cpu_seconds(nm_pid).ok_or("nodemedic exited during warm-up")?;
    let ne_cpu0 = cpu_seconds(ne_pid).ok_or("node_exporter exited during warm-up")?;
    let (mut next_sample, mut next_scrape, mut scrapes) = (SAMPLE_EVERY, scrape_every / 2, 0);
    loop {
        let next = next_sample.min(if scrapes < SCRAPES { next_scrape } else { Duration::MAX });
        if next > window {
            break;
        }
        tokio::time::sleep(next.saturating_sub(start.elapsed())).await;
        if next == next_sample {
            a.rss_mib
                .push(status_kib(nm_pid, "VmRSS:").ok_or("nodemedic exited")? as f64 / 1024.0);
            b.rss_mib
                .push(status_kib(ne_pid, "VmRSS:").ok_or("node_exporter exited")? as f64 / 1024.0);
            next_sample += SAMPLE_EVERY;
        } else {
            // One after the other, alternating who goes first, never both at once.
            let (na, nb) = (nm_addr.clone(), ne_addr.clone());
            let first_nm = scrapes % 2 == 0;
            let (ra, rb) = tokio::task::spawn_blocking(move || {
                if first_nm {
                    a.scrape(nm_pid, &na);
                    b.scrape(ne_pid, &nb);
                } else {
                    b.scrape(ne_pid, &nb);
                    a.scrape(nm_pid, &na);
                }
                (a, b)
            })
            .await
            .map_err(|e| e.to_string())?;
            (a, b) = (ra, rb);
            scrapes += 1;
            next_scrape += scrape_every;
        }
    }
    tokio::time::sleep(window.saturating_sub(start.elapsed())).await;
    a.cpu_total = cpu_seconds(nm_pid).ok_or("nodemedic exited")? - nm_cpu0;
    b.cpu_total = cpu_seconds(ne_pid).ok_or("node_exporter exited")? - ne_cpu0;
    let elapsed_min = start.elapsed().as_secs_f64() / 60.0;
    let requests = api.requests();
    a.hwm_mib = status_kib(nm_pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    b.hwm_mib = status_kib(ne_pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    let log = nm.stop();
    drop(ne);
    if let Some(r) = renewer {
        r.abort();
    }

    report(&a, &b, elapsed_min, scrape_every);
    println!();
    api_requests(&requests, elapsed_min);
    measure::print_log_head(&log);
    Ok(())
}

fn report(a: &Agent, b: &Agent, minutes: f64, scrape_every: Duration) {
    let ratio = |x: f64, y: f64| if y > 0.0 { format!("{:.2}", x / y) } else { "n/a".into() };
    let (amin, amed, amax) = stats(a.rss_mib.clone());
    let (bmin, bmed, bmax) = stats(b.rss_mib.clone());
    let acpu = a.cpu_total / minutes;
    let bcpu = b.cpu_total / minutes;
    // Per scrape CPU, and the CPU per minute at a 30 s scrape interval.
    let per = |x: &Agent| x.cpu_in_scrapes / x.latency_ms.len().max(1) as f64;
    let at30 = |x: &Agent| (x.cpu_total - x.cpu_in_scrapes) / minutes + 2.0 * per(x);
    let lat = |x: &Agent| {
        (
            stats(x.latency_ms.clone()).1,
            percentile(x.latency_ms.clone(), 90.0),
            x.latency_ms.iter().copied().fold(0.0, f64::max),
        )
    };
    let (alat, ap90, amaxl) = lat(a);
    let (blat, bp90, bmaxl) = lat(b);
    let size = |x: &Agent| stats(x.size.iter().map(|&s| s as f64).collect()).1;
    let spm = 60.0 / scrape_every.as_secs_f64();
    println!("| measure | nodemedic `run` | node_exporter | ratio nodemedic / node_exporter |");
    println!("|---|---|---|---|");
    println!(
        "| steady RSS, median (min-max) of {} samples, MiB | {amed:.1} ({amin:.1}-{amax:.1}) | {bmed:.1} ({bmin:.1}-{bmax:.1}) | {} |",
        a.rss_mib.len(),
        ratio(amed, bmed)
    );
    println!(
        "| peak RSS (VmHWM, whole run), MiB | {:.1} | {:.1} | {} |",
        a.hwm_mib,
        b.hwm_mib,
        ratio(a.hwm_mib, b.hwm_mib)
    );
    println!(
        "| CPU s per minute, scraped every {:.0} s ({spm:.0}/min) | {acpu:.3} ({:.2}% of a core) | {bcpu:.3} ({:.2}% of a core) | {} |",
        scrape_every.as_secs_f64(),
        acpu / 60.0 * 100.0,
        bcpu / 60.0 * 100.0,
        ratio(acpu, bcpu)
    );
    println!(
        "| CPU s per scrape (mean of {}) | {:.4} | {:.4} | {} |",
        a.latency_ms.len().min(b.latency_ms.len()),
        per(a),
        per(b),
        ratio(per(a), per(b))
    );
    println!(
        "| CPU s per minute at a 30 s scrape interval (derived) | {:.3} | {:.3} | {} |",
        at30(a),
        at30(b),
        ratio(at30(a), at30(b))
    );
    println!(
        "| `/metrics` scrape latency, median / p90 / max of {}, ms | {alat:.2} / {ap90:.2} / {amaxl:.2} | {blat:.2} / {bp90:.2} / {bmaxl:.2} | {} (median) |",
        a.latency_ms.len().min(b.latency_ms.len()),
        ratio(alat, blat)
    );
    println!(
        "| `/metrics` size, bytes (median) | {:.0} | {:.0} | {} |",
        size(a),
        size(b),
        ratio(size(a), size(b))
    );
    if a.failed_scrapes + b.failed_scrapes > 0 {
        println!(
            "\nfailed scrapes: nodemedic {}, node_exporter {}",
            a.failed_scrapes, b.failed_scrapes
        );
    }
}

fn api_requests(requests: &[nodemedic_tests::apiserver::RequestRecord], minutes: f64) {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for r in requests {
        *by.entry(measure::request_kind(r)).or_default() += 1;
    }
    let watches = requests.iter().filter(|r| r.is_watch).count();
    let others = requests.len() - watches;
    println!("API requests the double saw in {minutes:.2} min (node of 250 pods, default settings):\n");
    println!("| verb resource | requests | per minute |");
    println!("|---|---:|---:|");
    for (what, n) in &by {
        println!("| {what} | {n} | {:.2} |", *n as f64 / minutes);
    }
    println!("| **all but watches** | {others} | {:.2} |", others as f64 / minutes);
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure-one") {
        return measure::measure_one(&measure::nodemedic_bin(), &args[1..]);
    }
    let minutes: f64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(21);
    if minutes.is_nan() || minutes <= 0.0 || runs == 0 {
        eprintln!("usage: compare-bench [MINUTES>0] [RUNS>0]");
        return ExitCode::from(2);
    }
    if !node_exporter_bin().is_file() {
        eprintln!(
            "compare-bench: {} not found (apt-get install -y prometheus-node-exporter, or set NODE_EXPORTER)",
            node_exporter_bin().display()
        );
        return ExitCode::from(2);
    }
    println!("nodemedic: {}\n", measure::nodemedic_bin().display());
    if let Err(e) = scans(runs) {
        eprintln!("compare-bench: {e}");
        return ExitCode::from(2);
    }
    measure::run_bench("compare-bench", 1, agents(minutes))
}
