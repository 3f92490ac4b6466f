//! nodemedic, the node agent.
//!
//! Flow of a scan, of every cycle of the daemon, and of every repair's plan:
//!
//! ```text
//!  pods: the API, the daemon's watch,  ─┐
//!        a --pods file, or none        │   scan::snapshot (the one assembler)
//!  host files (/proc, /sys, kubelet dir)├─> collect::collect ─> drivers ─> NodeSnapshot
//!  Spark drivers (spark, kube_api)      │   (records per collector)           │
//!  API server probes (probe, apimon) ──┘                                      ▼
//!                        nodemedic_rules::rules::evaluate (pure) ──> Vec<Finding>
//!                                                                             │
//!   report (text/JSON) · metrics (/metrics) · events · conditions · repair (plan → act)
//! ```
//!
//! The modules are layers; each imports only from layers below it (`tests/layers.py`, run by
//! CI, fails on an upward import or a cycle):
//!
//! 1. [`host`] (where host files are), [`output`] (formats, writing), [`telemetry`] (logging),
//!    [`contact`] (whether the API server answers, as every request finds it), [`exposition`]
//!    (the metric types and their Prometheus text), [`deadline`] (the time each request of a
//!    kube client has, idle connections kept).
//! 2. [`collect`] (host readers: checkpoint, kubelet config, sysfs, cgroups, procfs, pods files,
//!    Spark local dirs and configurations; thin `read_*` over pure `parse_*`), [`spark`]
//!    (driver resolution through a `PodDirectory`), [`probe`] (API requests timed like
//!    `curl -w`). The kubelet's PodResources API (`collect::podresources`) is read here too.
//! 3. [`kube_api`] (the client, lean pods, typed errors), [`apimon`] (probe rounds, webhook
//!    attribution).
//! 4. [`scan`]: the one snapshot assembler.
//! 5. Sinks and repairs: [`report`], [`metrics`], [`events`], [`conditions`], [`repair`]
//!    (`command`: plan → print → confirm → re-check → apply → record, for every repair),
//!    [`fence`] (driver fencing on partitioned nodes: candidates, stopping, the journal),
//!    [`nrt`] (this node's NodeResourceTopology: built from a snapshot, written on change).
//! 6. [`config`] (file and flags merged), [`daemon`] (`nodemedic run`: one runtime,
//!    supervised tasks, the HTTP endpoint).
//! 7. [`cli`]: the only module that knows clap; maps arguments to options and errors to exit
//!    codes.
//!
//! docs/architecture.md says where each rule, collector, sink and repair lives.

pub mod apimon;
pub mod cli;
pub mod collect;
pub mod conditions;
pub mod config;
pub mod contact;
pub mod daemon;
pub mod deadline;
pub mod events;
pub mod exposition;
pub mod fence;
pub mod heap;
pub mod host;
pub mod kube_api;
pub mod leader;
pub mod metrics;
pub mod nrt;
pub mod output;
pub mod probe;
pub mod repair;
pub mod report;
pub mod retry;
pub mod scan;
pub mod spark;
pub mod telemetry;

/// The one kind of runtime nodemedic uses: current-thread, with I/O and timers (blocking host
/// reads go to its blocking pool). The daemon runs on one; a one-shot command on one.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

/// Runs `future` to completion on a [`runtime`] of its own: the way a one-shot command (or a
/// test) that is not in a runtime runs async code.
pub fn block_on<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    Ok(runtime()?.block_on(future))
}
