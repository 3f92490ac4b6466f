//! Wall time and peak RSS of the whole `nodemedic scan` process on generated nodes of
//! 10, 110 and 250 pods. Run it against a release build:
//!
//! ```text
//! cargo build --release -p nodemedic -p nodemedic-tests
//! target/release/scan-bench [RUNS]
//! ```
//!
//! Wall time is measured around each run; peak RSS is the scan process's own `VmHWM`, which
//! it reports when `NODEMEDIC_REPORT_PEAK_RSS` is set.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

fn release_bin() -> PathBuf {
    std::env::var_os("NODEMEDIC_BIN").map(PathBuf::from).unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap_or_default();
        exe.with_file_name("nodemedic")
    })
}

/// Runs one scan; prints "wall_seconds peak_rss_kib exit_code". The peak is the scan's own
/// `VmHWM` (`NODEMEDIC_REPORT_PEAK_RSS`): `getrusage` on a child also counts the parent's
/// pages at fork time.
fn measure_one(args: &[String]) -> ExitCode {
    let start = Instant::now();
    let out = Command::new(release_bin())
        .args(args)
        .env("NODEMEDIC_REPORT_PEAK_RSS", "1")
        .stdout(Stdio::null())
        .output();
    let wall = start.elapsed().as_secs_f64();
    let Ok(out) = out else {
        eprintln!("scan-bench: cannot run {}", release_bin().display());
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

/// In-process breakdown of one scan of `pods` pods by collector (median of `runs`).
fn phases(pods: usize, runs: usize) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    nodemedic_tests::scenarios::big_node(pods, 5)
        .write(dir.path())
        .map_err(|e| e.to_string())?;
    let host = nodemedic::host::HostPaths::new(dir.path(), None);
    let opts = nodemedic::collect::ScanOptions {
        node: Some("bench-node".into()),
        pods_file: Some(dir.path().join("pods.json")),
        ..Default::default()
    };
    let mut per: std::collections::BTreeMap<&'static str, Vec<f64>> = Default::default();
    for _ in 0..runs {
        let collected = nodemedic::collect::collect(&host, &opts).map_err(|e| e.to_string())?;
        let (snap, timings) = (collected.snapshot, collected.timings);
        for (name, d) in timings.collectors {
            per.entry(name).or_default().push(d.as_secs_f64() * 1000.0);
        }
        let t = Instant::now();
        let findings = nodemedic_rules::rules::evaluate(&snap, &nodemedic_rules::Settings::default());
        let _ = nodemedic::report::Report::new(&snap, findings).to_json();
        per.entry("rules+report")
            .or_default()
            .push(t.elapsed().as_secs_f64() * 1000.0);
    }
    println!("\nin-process phases at {pods} pods (median ms of {runs}):");
    for (name, v) in per {
        println!("  {name:<15} {:.2}", stats(v).1);
    }
    Ok(())
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    (v[0], median, v[v.len() - 1])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure-one") {
        return measure_one(&args[1..]);
    }
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(21);
    println!("binary: {}", release_bin().display());
    println!("| pods | containers | processes | wall median (min-max) ms | peak RSS median (min-max) MiB |");
    println!("|---:|---:|---:|---|---|");
    for pods in [10usize, 110, 250] {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("scan-bench: tempdir: {e}");
                return ExitCode::from(2);
            }
        };
        let node = nodemedic_tests::scenarios::big_node(pods, 5);
        if let Err(e) = node.write(dir.path()) {
            eprintln!("scan-bench: {e}");
            return ExitCode::from(2);
        }
        let root = dir.path().to_string_lossy().into_owned();
        let pods_file = dir.path().join("pods.json").to_string_lossy().into_owned();
        let scan = [
            "scan",
            "--host-root",
            &root,
            "--pods",
            &pods_file,
            "--node",
            "bench-node",
            "--format",
            "json",
        ];
        let mut walls = vec![];
        let mut rsss = vec![];
        for _ in 0..runs {
            let Ok(out) = Command::new(std::env::current_exe().unwrap_or_default())
                .arg("--measure-one")
                .args(scan)
                .output()
            else {
                eprintln!("scan-bench: cannot re-run itself");
                return ExitCode::from(2);
            };
            let line = String::from_utf8_lossy(&out.stdout);
            let f: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            if f.len() != 3 || !(f[2] == 0.0 || f[2] == 1.0) {
                eprintln!("scan-bench: bad measurement {line:?}");
                return ExitCode::from(2);
            }
            walls.push(f[0] * 1000.0);
            rsss.push(f[1] / 1024.0);
        }
        let (wmin, wmed, wmax) = stats(walls);
        let (rmin, rmed, rmax) = stats(rsss);
        println!(
            "| {pods} | {} | {} | {wmed:.1} ({wmin:.1}-{wmax:.1}) | {rmed:.1} ({rmin:.1}-{rmax:.1}) |",
            pods * 3,
            pods * 8,
        );
    }
    if let Err(e) = phases(250, runs) {
        eprintln!("scan-bench: {e}");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
