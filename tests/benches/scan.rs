//! A full offline scan (collect + evaluate + JSON report) of a generated node: 250 pods,
//! 750 containers (plus 250 sandboxes), 2,000 processes, 256 CPUs, cgroup v1 + cgroupfs.
//! Numbers: docs/performance.md.

use criterion::{Criterion, criterion_group, criterion_main};
use nodemedic::host::HostPaths;
use nodemedic::report::Report;
use nodemedic::scan::{self, Pods};
use nodemedic_rules::{Settings, rules};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = nodemedic_tests::scenarios::big_node(250, 5);
    node.write(dir.path()).expect("write node");
    let host = HostPaths::new(dir.path(), None);
    let opts = scan::Options {
        host: nodemedic::collect::HostOptions {
            node: Some("bench-node".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let pods = Pods::File(dir.path().join("pods.json"));
    let mut group = c.benchmark_group("scan");
    group.sample_size(30);
    group.bench_function("offline_scan_250pods_750ctr_2000procs", |b| {
        b.iter(|| {
            let scanned = scan::snapshot_blocking(&host, pods.clone(), &opts).expect("scan");
            let findings = rules::evaluate(&scanned.snapshot, &Settings::default());
            black_box(Report::new(&scanned.snapshot, findings, &scanned.records).to_json())
        })
    });
    group.finish();

    // The `/metrics` body after the daemon's judgement of the same node: what every scrape
    // renders (the registry's gather, the text encoding, the agent's `process_*` reads).
    let scanned = scan::snapshot_blocking(&host, pods.clone(), &opts).expect("scan");
    let settings = Settings::default();
    let facts = nodemedic_rules::facts::derive(&scanned.snapshot, &settings);
    let findings = rules::evaluate(&scanned.snapshot, &settings);
    let metrics = nodemedic::metrics::Metrics::new().expect("metrics");
    metrics.observe_scan(&scanned.snapshot, &facts, &findings, &scanned.records);
    let mut group = c.benchmark_group("metrics");
    group.bench_function("render_after_250pod_judgement", |b| {
        b.iter(|| black_box(metrics.render().len()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
