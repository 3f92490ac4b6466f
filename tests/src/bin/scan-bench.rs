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

use std::process::ExitCode;
use std::time::Instant;

use nodemedic_tests::measure::{self, stats};

/// In-process breakdown of one scan of `pods` pods by collector (median of `runs`); with
/// `kubelet`, a fake kubelet serves the PodResources API on the host's socket and lists every
/// pod of the node with its exclusive CPUs.
fn phases(pods: usize, runs: usize, kubelet: bool) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let node = nodemedic_tests::scenarios::big_node(pods, 5);
    node.write(dir.path()).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let _fake = if kubelet {
        use nodemedic_tests::podresources::{FakeKubelet, FakePod, Scenario};
        let mut scenario = Scenario::default();
        for p in node.pods.iter().filter(|p| p.in_pod_list && p.phase == "Running") {
            let mut fake = FakePod::new(&p.namespace, &p.name);
            for c in &p.containers {
                let cpus: Vec<i64> = p
                    .entries
                    .iter()
                    .filter(|(name, _)| *name == c.name)
                    .flat_map(|(_, set)| {
                        nodemedic_rules::CpuSet::parse(set)
                            .map(|s| s.iter().map(i64::from).collect::<Vec<_>>())
                            .unwrap_or_default()
                    })
                    .collect();
                fake = fake.container(&c.name, &cpus);
            }
            scenario = scenario.pod(fake);
        }
        let socket = dir.path().join("var/lib/kubelet/pod-resources/kubelet.sock");
        Some(
            runtime
                .block_on(FakeKubelet::start(socket, scenario))
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };
    let host = nodemedic::host::HostPaths::new(dir.path(), None);
    let opts = nodemedic::scan::Options {
        node: Some("bench-node".into()),
        ..Default::default()
    };
    let source = nodemedic::scan::Pods::File(dir.path().join("pods.json"));
    let mut per: std::collections::BTreeMap<&'static str, Vec<f64>> = Default::default();
    for _ in 0..runs {
        let scanned = nodemedic::scan::snapshot_blocking(&host, source.clone(), &opts).map_err(|e| e.to_string())?;
        let (snap, records) = (scanned.snapshot, scanned.records);
        for r in records.iter() {
            per.entry(r.name).or_default().push(r.duration.as_secs_f64() * 1000.0);
        }
        let t = Instant::now();
        let findings = nodemedic_rules::rules::evaluate(&snap, &nodemedic_rules::Settings::default());
        let _ = nodemedic::report::Report::new(&snap, findings, &records).to_json();
        per.entry("rules+report")
            .or_default()
            .push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let with = if kubelet {
        ", the kubelet's PodResources API served"
    } else {
        ", no kubelet socket"
    };
    println!("\nin-process phases at {pods} pods{with} (median ms of {runs}):");
    for (name, v) in per {
        println!("  {name:<15} {:.2}", stats(v).1);
    }
    // The whole process on the same tree: wall time and peak RSS.
    let (root, pods_file) = (dir.path().to_string_lossy(), dir.path().join("pods.json"));
    let pods_file = pods_file.to_string_lossy();
    let args = measure::scan_args(&root, &pods_file);
    let ((wmin, wmed, wmax), (rmin, rmed, rmax)) = measure::measure_scans(&args, runs)?;
    println!("  whole process   wall {wmed:.1} ms ({wmin:.1}-{wmax:.1}), peak RSS {rmed:.1} MiB ({rmin:.1}-{rmax:.1})");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure-one") {
        return measure::measure_one(&measure::nodemedic_bin(), &args[1..]);
    }
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(21);
    println!("binary: {}", measure::nodemedic_bin().display());
    if let Err(e) = measure::scan_table(runs) {
        eprintln!("scan-bench: {e}");
        return ExitCode::from(2);
    }
    for kubelet in [false, true] {
        if let Err(e) = phases(250, runs, kubelet) {
            eprintln!("scan-bench: {e}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
