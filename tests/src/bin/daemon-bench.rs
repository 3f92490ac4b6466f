//! The daemon at steady state: `nodemedic run` with default settings on a generated 250-pod
//! node (256 CPUs, 750 containers, 2,000 processes), against the in-repo API server double
//! holding the same pods and their 25 drivers on another node (its watch bookmarks once a
//! minute, as kube-apiserver sends them).
//!
//! ```text
//! cargo build --release -p nodemedic -p nodemedic-tests
//! target/release/daemon-bench [MINUTES] [PODS]
//! ```
//!
//! `NODEMEDIC_BIN` names another nodemedic (the shipped build: `target/dist/nodemedic`).
//!
//! After one minute of warm-up it samples the daemon every 5 s: resident memory (`VmRSS`),
//! CPU time (`utime + stime`), and every request the API server saw; then scrapes `/metrics`
//! 20 times for latency and size.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::measure::{self, cpu_seconds, median, scrape, status_kib};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let minutes: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(4.0);
    let pods: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(250);
    measure::run_bench("daemon-bench", 1, bench(minutes, pods))
}

async fn bench(minutes: f64, pods: usize) -> Result<(), String> {
    let api = ApiServer::start().await.map_err(|e| e.to_string())?;
    api.set_bookmark_interval(nodemedic_tests::apiserver::APISERVER_BOOKMARK_INTERVAL);
    let store = api.store();
    let node = nodemedic_tests::scenarios::big_node(pods, 5);
    // The node's pods, as the API has them, and the drivers they are owned by, elsewhere.
    let drivers = nodemedic_tests::scenarios::seed_api(&store, &node);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (root, kubeconfig) = nodemedic_tests::write_host(&api, dir.path(), &node)?;
    let daemon = measure::Daemon::start(&root, &node.name, &kubeconfig)?;
    let pid = daemon.pid();
    // Logs are at warn level, so the listen address comes from the daemon's own sockets.
    let addr = tokio::task::spawn_blocking(move || measure::wait_listen_addr(pid))
        .await
        .ok()
        .flatten()
        .ok_or("could not find the daemon's listen port")?;
    println!(
        "daemon pid {pid}, metrics at {addr}, {pods} pods, {} drivers elsewhere, {minutes} min",
        drivers
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    api.clear_requests();
    let start = Instant::now();
    let cpu0 = cpu_seconds(pid).ok_or("daemon exited during warm-up")?;
    let mut rss = vec![];
    let window = Duration::from_secs_f64(minutes * 60.0);
    while start.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(5)).await;
        rss.push(status_kib(pid, "VmRSS:").ok_or("daemon exited")? as f64 / 1024.0);
    }
    let cpu1 = cpu_seconds(pid).ok_or("daemon exited")?;
    let elapsed_min = start.elapsed().as_secs_f64() / 60.0;
    let requests = api.requests();
    let watches = requests.iter().filter(|r| r.is_watch).count();
    let others = requests.len() - watches;
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for r in &requests {
        *by.entry(measure::request_kind(r)).or_default() += 1;
    }
    let mut lat = vec![];
    let mut size = 0;
    for _ in 0..20 {
        if let Some((d, s)) = scrape(&addr) {
            lat.push(d.as_secs_f64() * 1000.0);
            size = s;
        }
    }
    let hwm = status_kib(pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    let log = daemon.stop();
    let max_rss = rss.iter().copied().fold(0.0, f64::max);
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| steady RSS, median (max) of {} samples | {:.1} MiB ({:.1} MiB) |",
        rss.len(),
        median(rss.clone()),
        max_rss
    );
    println!("| peak RSS (VmHWM, whole run) | {hwm:.1} MiB |");
    println!(
        "| CPU | {:.3} s per minute = {:.2}% of one core |",
        (cpu1 - cpu0) / elapsed_min,
        (cpu1 - cpu0) / (elapsed_min * 60.0) * 100.0
    );
    println!(
        "| API requests other than watches | {others} in {elapsed_min:.1} min = {:.2} per minute |",
        others as f64 / elapsed_min
    );
    println!("| watch requests (long-lived; reconnects every ~5 min by timeout) | {watches} |");
    println!(
        "| /metrics scrape, median (max) of {} | {:.2} ms ({:.2} ms), {size} bytes |",
        lat.len(),
        median(lat.clone()),
        lat.iter().copied().fold(0.0, f64::max)
    );
    println!("requests by verb and resource: {by:?}");
    measure::print_log_head(&log);
    Ok(())
}
