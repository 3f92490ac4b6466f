//! A fleet at default settings: N real `nodemedic run` agents (empty host trees, nodes
//! `node-<i>`, bearer tokens `token-<i>`) against the in-repo API server double, counting what
//! each asks of the API server, and what that would be for 5,000 nodes.
//!
//! ```text
//! cargo build --release -p nodemedic -p nodemedic-tests
//! target/release/fleet-bench [AGENTS] [MINUTES]      # defaults: 30 agents, 5 minutes
//! ```
//!
//! `NODEMEDIC_BIN` names another nodemedic (the shipped build: `target/dist/nodemedic`).
//!
//! After one lease duration of warm-up (every agent has read the Lease, listed its pods and
//! patched its node's conditions) it counts every request for MINUTES: per agent per minute,
//! followers and the Lease holder apart, by verb and resource; the dry-run creates and the API
//! server `/metrics` reads per probe interval, cluster-wide. Then it extrapolates to 5,000
//! nodes (4,999 followers at the measured rate plus one holder) and compares with the API
//! server's default concurrency limits, `--max-requests-inflight 400` (reads) and
//! `--max-mutating-requests-inflight 200` (writes, dry runs included), through Little's law:
//! requests in flight = arrival rate x mean latency, at the latency measured on the double
//! and at an assumed 50 ms and 1 s. Watches are long-running requests, which those limits do
//! not count; they are reported apart.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use nodemedic::leader::{DEFAULT_LEASE_DURATION, ElectionConfig};
use nodemedic_tests::apiserver::{ApiServer, RequestRecord};
use nodemedic_tests::fleet::{self, FleetProcess, LeaseSampler, secs_between};
use nodemedic_tests::measure::{self, cpu_seconds, median, percentile};

/// The default `--probe-interval-seconds`.
const PROBE_INTERVAL_SECONDS: f64 = 60.0;
/// The API server's defaults.
const MAX_REQUESTS_INFLIGHT: f64 = 400.0;
const MAX_MUTATING_REQUESTS_INFLIGHT: f64 = 200.0;
const FLEET: f64 = 5000.0;
/// The default `--condition-heartbeat-seconds`.
const HEARTBEAT_SECONDS: f64 = 300.0;
/// How often the holder lists the webhook configurations and reads the probe namespace
/// (`apimon`).
const WEBHOOK_REFRESH_SECONDS: f64 = 300.0;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let agents: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);
    let minutes: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5.0);
    if agents < 2 {
        eprintln!("fleet-bench: at least 2 agents (a holder and a follower)");
        return ExitCode::from(2);
    }
    measure::run_bench("fleet-bench", 2, bench(agents, minutes))
}

/// Requests per minute of one kind: mean per follower, and the holder's.
#[derive(Debug, Default)]
struct Row {
    followers: usize,
    leader: usize,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// (mean, p99) latency in seconds of the requests, arrival to response head.
fn latency(requests: &[&RequestRecord]) -> (f64, f64) {
    let l: Vec<f64> = requests.iter().map(|r| r.elapsed.as_secs_f64()).collect();
    (mean(&l), percentile(l, 99.0))
}

/// The most of the sorted `times` within any one second.
fn peak_per_second(times: &[SystemTime]) -> usize {
    let mut peak = 0;
    let mut start = 0;
    for (end, t) in times.iter().enumerate() {
        while secs_between(times[start], *t) >= 1.0 {
            start += 1;
        }
        peak = peak.max(end + 1 - start);
    }
    peak
}

async fn bench(n: usize, minutes: f64) -> Result<(), String> {
    let bin = measure::nodemedic_bin();
    if !bin.is_file() {
        return Err(format!(
            "{} not found: cargo build --release -p nodemedic (or set NODEMEDIC_BIN)",
            bin.display()
        ));
    }
    let election = ElectionConfig {
        namespace: "default".into(),
        name: fleet::LEASE.into(),
        identity: String::new(),
        duration: DEFAULT_LEASE_DURATION,
        timeout: Duration::from_secs(10),
    };
    let lease = DEFAULT_LEASE_DURATION.as_secs_f64();
    let api = ApiServer::start().await.map_err(|e| e.to_string())?;
    for i in 0..n {
        api.store().create(fleet::node_object(i));
    }
    let leases = LeaseSampler::start(&api, Duration::from_millis(250));
    println!(
        "{n} agents ({}) at default settings: lease {lease} s (renewed every {} s, read every {} s), probe interval \
         {PROBE_INTERVAL_SECONDS} s; started over one read period, warm-up {lease} s, then {minutes} min counted",
        bin.display(),
        election.renew_every().as_secs_f64(),
        election.read_every().as_secs_f64()
    );
    // One after another over one read period, as a DaemonSet's pods come up (the followers'
    // reads keep the phase they started with).
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        agents.push(FleetProcess::start(&api, &bin, i, &[])?);
        tokio::time::sleep(election.read_every() / n as u32).await;
    }
    tokio::time::sleep(DEFAULT_LEASE_DURATION).await;
    for a in &mut agents {
        if !a.alive() {
            return Err(format!("agent {} exited during warm-up:\n{}", a.index, a.log()));
        }
    }
    let cpu0: Vec<f64> = agents.iter().map(|a| cpu_seconds(a.pid()).unwrap_or(0.0)).collect();
    let w0 = SystemTime::now();
    tokio::time::sleep(Duration::from_secs_f64(minutes * 60.0)).await;
    let w1 = SystemTime::now();
    let cpu1: Vec<f64> = agents.iter().map(|a| cpu_seconds(a.pid()).unwrap_or(0.0)).collect();
    let window_min = secs_between(w0, w1) / 60.0;
    let requests = api.requests();
    let in_window: Vec<&RequestRecord> = requests.iter().filter(|r| r.time >= w0 && r.time < w1).collect();

    // Who held the Lease during the window (the API server's view).
    let samples = leases.samples();
    let holders: BTreeSet<usize> = samples
        .iter()
        .filter(|s| s.at >= w0 && s.at < w1)
        .filter_map(|s| s.holder_index())
        .collect();
    let changes = fleet::holder_changes(&samples)
        .into_iter()
        .filter(|(t, _, _)| *t >= w0 && *t < w1)
        .count();
    if holders.len() != 1 || changes != 0 {
        println!(
            "\nNOTE: the Lease had holders {holders:?} during the window ({changes} changes); all are counted as leaders"
        );
    }
    let is_leader = |i: usize| holders.contains(&i);
    let followers: Vec<usize> = (0..n).filter(|&i| !is_leader(i)).collect();
    let leaders = holders.len().max(1) as f64;

    let counts = fleet::count_by_agent(&requests, w0, w1);
    let total = |i: usize| counts.get(&i).map_or(0, |k| k.values().sum::<usize>()) as f64 / window_min;
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for (i, kinds) in &counts {
        for (k, c) in kinds {
            let row = rows.entry(k.clone()).or_default();
            if is_leader(*i) {
                row.leader += c;
            } else {
                row.followers += c;
            }
        }
    }
    let follower_rates: Vec<f64> = followers.iter().map(|&i| total(i)).collect();
    let leader_rate: f64 = holders.iter().map(|&i| total(i)).sum::<f64>() / leaders;
    let per_follower = |c: usize| c as f64 / followers.len() as f64 / window_min;
    let per_leader = |c: usize| c as f64 / leaders / window_min;

    println!("\n## Requests per agent per minute (non-watch), {window_min:.2} min window\n");
    println!("| request | per follower | leader |");
    println!("|---|---:|---:|");
    for (k, row) in &rows {
        println!(
            "| {k} | {:.3} | {:.3} |",
            per_follower(row.followers),
            per_leader(row.leader)
        );
    }
    println!(
        "| **all** | **{:.3}** (min {:.3}, max {:.3}, {} followers) | **{leader_rate:.3}** (agent {}) |",
        mean(&follower_rates),
        follower_rates.iter().copied().fold(f64::MAX, f64::min),
        follower_rates.iter().copied().fold(0.0, f64::max),
        followers.len(),
        holders.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
    );

    // Cluster-wide, per probe interval.
    let intervals = secs_between(w0, w1) / PROBE_INTERVAL_SECONDS;
    let dry: Vec<&&RequestRecord> = in_window.iter().filter(|r| fleet::is_dry_run(r)).collect();
    let dry_from: BTreeSet<usize> = dry.iter().filter_map(|r| fleet::sender(r)).collect();
    let metrics_reads = in_window.iter().filter(|r| !r.is_watch && r.path == "/metrics").count();
    let watches = in_window.iter().filter(|r| r.is_watch).count();
    let cluster = in_window.iter().filter(|r| !r.is_watch).count() as f64 / window_min;
    println!("\n## Cluster-wide ({n} agents)\n");
    println!("| measure | value |");
    println!("|---|---|");
    println!("| requests per minute (non-watch) | {cluster:.2} |");
    println!(
        "| dry-run creates per probe interval ({PROBE_INTERVAL_SECONDS} s) | {:.2} ({} in {intervals:.2} intervals, from agents {dry_from:?}) |",
        dry.len() as f64 / intervals,
        dry.len()
    );
    println!(
        "| API server /metrics reads per probe interval | {:.2} ({metrics_reads}) |",
        metrics_reads as f64 / intervals
    );
    println!("| watch requests opened in the window (long-running) | {watches} |");
    let mut times: Vec<SystemTime> = in_window.iter().filter(|r| !r.is_watch).map(|r| r.time).collect();
    times.sort();
    println!(
        "| most requests in any 1 s (non-watch; mean {:.2}/s) | {} |",
        cluster / 60.0,
        peak_per_second(&times)
    );
    let cpu: Vec<f64> = cpu0.iter().zip(&cpu1).map(|(a, b)| (b - a) / window_min).collect();
    let leader_cpu: Vec<f64> = holders.iter().filter_map(|&i| cpu.get(i).copied()).collect();
    let follower_cpu: Vec<f64> = followers.iter().filter_map(|&i| cpu.get(i).copied()).collect();
    println!(
        "| agent CPU per minute (empty host tree) | follower median {:.3} s, leader {:.3} s |",
        median(follower_cpu),
        mean(&leader_cpu)
    );

    // Latency on the double, reads and writes apart.
    let non_watch: Vec<&RequestRecord> = in_window.iter().filter(|r| !r.is_watch).copied().collect();
    let reads: Vec<&RequestRecord> = non_watch.iter().filter(|r| !fleet::is_mutating(r)).copied().collect();
    let writes: Vec<&RequestRecord> = non_watch.iter().filter(|r| fleet::is_mutating(r)).copied().collect();
    let (read_lat, read_p99) = latency(&reads);
    let (write_lat, write_p99) = latency(&writes);
    println!(
        "| latency on the double, reads (mean, p99) | {:.2} ms, {:.2} ms ({} requests) |",
        read_lat * 1e3,
        read_p99 * 1e3,
        reads.len()
    );
    println!(
        "| latency on the double, writes (mean, p99) | {:.2} ms, {:.2} ms ({} requests) |",
        write_lat * 1e3,
        write_p99 * 1e3,
        writes.len()
    );

    // 5,000 nodes: the per-follower rate 4,999 times, plus one holder; reads and writes apart.
    let rate = |pick: &dyn Fn(&RequestRecord) -> bool, who: &[usize]| {
        let c = non_watch
            .iter()
            .filter(|r| fleet::sender(r).is_some_and(|i| who.contains(&i)) && pick(r))
            .count() as f64;
        c / who.len().max(1) as f64 / (window_min * 60.0)
    };
    let holder_list: Vec<usize> = holders.iter().copied().collect();
    let f_read = rate(&|r| !fleet::is_mutating(r), &followers);
    let f_write = rate(&|r| fleet::is_mutating(r), &followers);
    let l_read = rate(&|r| !fleet::is_mutating(r), &holder_list);
    let l_write = rate(&|r| fleet::is_mutating(r), &holder_list);
    let big_read = (FLEET - 1.0) * f_read + l_read;
    let big_write = (FLEET - 1.0) * f_write + l_write;
    // The same from the default periods, for what a short window misses (a condition
    // heartbeat every 300 s, the webhook list every 300 s).
    let read_every = election.read_every().as_secs_f64();
    let renew_every = election.renew_every().as_secs_f64();
    let (nf_read, nf_write) = (1.0 / read_every, 1.0 / HEARTBEAT_SECONDS);
    let nl_read = 3.0 / PROBE_INTERVAL_SECONDS + 3.0 / WEBHOOK_REFRESH_SECONDS;
    let nl_write = 1.0 / renew_every + 1.0 / PROBE_INTERVAL_SECONDS + 1.0 / HEARTBEAT_SECONDS;
    let nominal = ((FLEET - 1.0) * nf_read + nl_read, (FLEET - 1.0) * nf_write + nl_write);
    println!("\n## Extrapolated to {FLEET} nodes (4,999 followers + 1 leader)\n");
    println!("| rates | per follower | leader | cluster-wide |");
    println!("|---|---|---|---|");
    println!(
        "| measured | {:.4} reads/s + {:.4} writes/s | {:.4} + {:.4} | **{:.2} requests/s** ({:.2} reads/s + {:.2} writes/s) |",
        f_read,
        f_write,
        l_read,
        l_write,
        big_read + big_write,
        big_read,
        big_write
    );
    println!(
        "| from the default periods (Lease read every {read_every} s, heartbeat every {HEARTBEAT_SECONDS} s; leader: renewal \
         every {renew_every} s, 4 probe requests every {PROBE_INTERVAL_SECONDS} s, 3 every {WEBHOOK_REFRESH_SECONDS} s) | {:.4} + \
         {:.4} | {:.4} + {:.4} | **{:.2} requests/s** ({:.2} + {:.2}) |",
        nf_read,
        nf_write,
        nl_read,
        nl_write,
        nominal.0 + nominal.1,
        nominal.0,
        nominal.1
    );
    println!(
        "\nIn flight (Little's law: rate x mean latency) against the API server's defaults; watches are long-running \
         requests, which these limits do not count.\n"
    );
    println!(
        "| rates | server latency (mean) | reads in flight | of --max-requests-inflight {MAX_REQUESTS_INFLIGHT} | writes in flight | of --max-mutating-requests-inflight {MAX_MUTATING_REQUESTS_INFLIGHT} |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for (rates, (rr, rw)) in [("measured", (big_read, big_write)), ("default periods", nominal)] {
        for (label, lr, lw) in [
            (
                format!(
                    "measured on the double ({:.2} ms reads, {:.2} ms writes)",
                    read_lat * 1e3,
                    write_lat * 1e3
                ),
                read_lat,
                write_lat,
            ),
            ("assumed 50 ms".to_string(), 0.05, 0.05),
            ("assumed 1 s".to_string(), 1.0, 1.0),
        ] {
            let (ir, iw) = (rr * lr, rw * lw);
            println!(
                "| {rates} | {label} | {ir:.4} | {:.4}% | {iw:.4} | {:.4}% |",
                ir / MAX_REQUESTS_INFLIGHT * 100.0,
                iw / MAX_MUTATING_REQUESTS_INFLIGHT * 100.0
            );
        }
    }

    // Anything the agents warned about.
    let mut warned = 0;
    for a in &agents {
        let log = a.log();
        let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).take(3).collect();
        if !lines.is_empty() && warned < 5 {
            warned += 1;
            println!("\nagent {} log (warn and above, first lines):", a.index);
            for l in lines {
                println!("    {l}");
            }
        }
    }
    // The holder releases the Lease on SIGTERM; then everything is killed when dropped.
    for a in &agents {
        a.terminate();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(agents);
    Ok(())
}
