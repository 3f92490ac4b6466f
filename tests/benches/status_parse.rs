//! `/proc/<pid>/status` parsing, as a scan does it for every process of a pinned container
//! (2,000 at 250 pods): nodemedic's own line scan for `Cpus_allowed_list` beside
//! `procfs_core::process::Status`, on this kernel's real text (`/proc/self/status`).
//! Numbers and the decision they led to: docs/performance.md, "Parsing /proc/<pid>/status".

use criterion::{Criterion, criterion_group, criterion_main};
use nodemedic::collect::procfs::parse_status_cpus_allowed;
use procfs_core::FromRead;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    // Both must see the same affinity before their speed is compared.
    let ours = parse_status_cpus_allowed(&text)
        .expect("ours")
        .expect("a Cpus_allowed_list line");
    let theirs = procfs_core::process::Status::from_read(text.as_bytes())
        .expect("procfs-core")
        .cpus_allowed_list
        .expect("a Cpus_allowed_list");
    let count: u32 = theirs.iter().map(|(a, b)| b - a + 1).sum();
    assert_eq!(ours.len(), count as usize, "the two parsers disagree on {text}");
    let mut group = c.benchmark_group("status_parse");
    group.bench_function("nodemedic_cpus_allowed_list", |b| {
        b.iter(|| parse_status_cpus_allowed(black_box(&text)))
    });
    group.bench_function("procfs_core_status", |b| {
        b.iter(|| procfs_core::process::Status::from_read(black_box(text.as_bytes())).map(|s| s.cpus_allowed_list))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
