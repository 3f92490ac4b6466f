//! Checkpoint read + verify + state on a large node: 256 CPUs, 250 containers in 125 pods
//! (two exclusive CPUs each), the rest in the default set. Numbers: docs/performance.md.

use criterion::{Criterion, criterion_group, criterion_main};
use nodemedic_rules::checkpoint::{Assignment, CpuState, EntryKey};
use nodemedic_rules::{Checkpoint, CpuSet};
use std::hint::black_box;

fn big_state() -> CpuState {
    let mut assignments = Vec::new();
    for i in 0..250u32 {
        assignments.push(Assignment {
            key: EntryKey::Container {
                pod_uid: format!("{:08x}-1f2e-4d3c-8b7a-{:012x}", i / 2, i / 2),
                container: format!("spark-kubernetes-executor-{}", i % 2),
            },
            cpus: CpuSet::from_ids([6 + 2 * i, 7 + 2 * i]),
        });
    }
    CpuState {
        policy_name: "static".into(),
        default_cpus: CpuSet::parse("0-5").unwrap_or_default(),
        assignments,
        pod_assignments: vec![],
    }
}

fn bench(c: &mut Criterion) {
    let json = big_state().to_checkpoint_json();
    c.bench_function("checkpoint_parse_verify_state_256cpu_250ctr", |b| {
        b.iter(|| {
            let cp = Checkpoint::parse(black_box(json.as_bytes())).ok();
            let verified = cp.as_ref().map(|cp| cp.verify().accepted());
            let state = cp.and_then(|cp| cp.state().ok());
            black_box((verified, state))
        })
    });
    let state = big_state();
    c.bench_function("checkpoint_write_256cpu_250ctr", |b| {
        b.iter(|| black_box(state.to_checkpoint_json()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
