//! Wall time and peak RSS of the whole `nodemedic scan` process on generated nodes of
//! 10, 110 and 250 pods, the phases of a 250-pod scan, and the scan with its pods from the API
//! server double at 250 and 1,000 pods. Run it against a release build:
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

/// The NVIDIA driver's checkpoint of [`with_manager_files`], as the flag names it.
const NVIDIA: &str = "nvidia-gpu=/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json";

/// The node with the other managers' files of a GPU node: a 4 GiB memory block and one GPU for
/// every pod of the pod list, a DRA claim of one GPU for every second pod in the kubelet's file
/// and the NVIDIA driver's.
fn with_manager_files(node: nodemedic_tests::hosttree::Node) -> nodemedic_tests::hosttree::Node {
    use nodemedic_tests::checkpoints::*;
    let uids: Vec<(String, String)> = node
        .pods
        .iter()
        .filter(|p| p.in_pod_list)
        .map(|p| (p.uid.clone(), p.containers[0].name.clone()))
        .collect();
    let memory: Vec<MemoryEntry> = uids
        .iter()
        .enumerate()
        .map(|(i, (u, c))| MemoryEntry::new(u, c, (i % 2) as i64, 4 * GIB))
        .collect();
    let gpus: Vec<String> = (0..uids.len())
        .map(|i| format!("GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd"))
        .collect();
    let devices: Vec<DeviceEntry> = uids
        .iter()
        .zip(&gpus)
        .enumerate()
        .map(|(i, ((u, c), g))| DeviceEntry::new(u, c, "nvidia.com/gpu", &[(g.as_str(), (i % 2) as i64)]))
        .collect();
    let registered: Vec<&str> = gpus.iter().map(String::as_str).collect();
    let claims: Vec<DraClaim> = uids
        .iter()
        .step_by(2)
        .enumerate()
        .map(|(i, (u, _))| DraClaim {
            uid: format!("claim-{i}"),
            namespace: "spark".into(),
            name: format!("exec-{i}-gpu"),
            pods: vec![u.clone()],
            devices: vec![("gpu.nvidia.com".into(), "bench-node".into(), format!("gpu-{i}"))],
        })
        .collect();
    let driver: Vec<DriverClaim> = claims
        .iter()
        .map(|c| DriverClaim {
            uid: c.uid.clone(),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            state: "PrepareCompleted".into(),
            pods: c.pods.clone(),
            gpus: vec![c.devices[0].2.clone()],
            pool: "bench-node".into(),
        })
        .collect();
    node.file(
        "/var/lib/kubelet/memory_manager_state",
        memory_manager_state(2, 512 * GIB, &memory),
    )
    .file(
        "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
        device_checkpoint(&devices, &[("nvidia.com/gpu", &registered)]),
    )
    .file("/var/lib/kubelet/dra_manager_state", dra_manager_state(&claims))
    .file(
        "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json",
        nvidia_checkpoint(&driver),
    )
}

/// In-process breakdown of one scan of `pods` pods by collector (median of `runs`); with
/// `kubelet`, a fake kubelet serves the PodResources API on the host's socket and lists every
/// pod of the node with its exclusive CPUs; with `managers`, the node has the memory, device and
/// DRA managers' files and the NVIDIA driver's ([`with_manager_files`]).
fn phases(pods: usize, runs: usize, kubelet: bool, managers: bool) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut node = nodemedic_tests::scenarios::big_node(pods, 5);
    if managers {
        node = with_manager_files(node);
    }
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
        host: nodemedic::collect::HostOptions {
            node: Some("bench-node".into()),
            driver_checkpoints: if managers {
                vec![nodemedic::collect::managers::DriverCheckpoint::parse(NVIDIA).map_err(|e| e.to_string())?]
            } else {
                vec![]
            },
            ..Default::default()
        },
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
    let with = match (kubelet, managers) {
        (true, _) => ", the kubelet's PodResources API served",
        (false, true) => ", no kubelet socket, memory/device/DRA files and the NVIDIA driver's",
        (false, false) => ", no kubelet socket",
    };
    println!("\nin-process phases at {pods} pods{with} (median ms of {runs}):");
    for (name, v) in per {
        println!("  {name:<15} {:.2}", stats(v).1);
    }
    // The whole process on the same tree: wall time and peak RSS.
    let (root, pods_file) = (dir.path().to_string_lossy(), dir.path().join("pods.json"));
    let pods_file = pods_file.to_string_lossy();
    let mut args: Vec<&str> = measure::scan_args(&root, &pods_file).to_vec();
    if managers {
        args.extend(["--dra-driver-checkpoint", NVIDIA]);
    }
    let ((wmin, wmed, wmax), (rmin, rmed, rmax)) = measure::measure_scans(&args, runs)?;
    println!("  whole process   wall {wmed:.1} ms ({wmin:.1}-{wmax:.1}), peak RSS {rmed:.1} MiB ({rmin:.1}-{rmax:.1})");
    Ok(())
}

/// The in-cluster scan: the pods of `pods` from the API server double's LIST instead of a
/// file (as `kubectl nodemedic scan` runs in the agent's container), the whole process.
fn from_api(pods: usize, runs: usize) -> Result<(), String> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let api = runtime
        .block_on(nodemedic_tests::apiserver::ApiServer::start())
        .map_err(|e| e.to_string())?;
    let node = nodemedic_tests::scenarios::big_node(pods, 5);
    nodemedic_tests::scenarios::seed_api(&api.store(), &node);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (root, kubeconfig) = nodemedic_tests::write_host(&api, dir.path(), &node)?;
    let (root, kubeconfig) = (root.to_string_lossy(), kubeconfig.to_string_lossy());
    let args = nodemedic_tests::api_scan_args(&root, &kubeconfig, &node.name);
    let ((wmin, wmed, wmax), (rmin, rmed, rmax)) = measure::measure_scans(&args, runs)?;
    println!(
        "\nthe scan at {pods} pods with its pods from the API (the double's LIST), whole process:\n  \
         wall {wmed:.1} ms ({wmin:.1}-{wmax:.1}), peak RSS {rmed:.1} MiB ({rmin:.1}-{rmax:.1})"
    );
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
    for (kubelet, managers) in [(false, false), (true, false), (false, true)] {
        if let Err(e) = phases(250, runs, kubelet, managers) {
            eprintln!("scan-bench: {e}");
            return ExitCode::from(2);
        }
    }
    for pods in [250, 1_000] {
        if let Err(e) = from_api(pods, runs) {
            eprintln!("scan-bench: {e}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
