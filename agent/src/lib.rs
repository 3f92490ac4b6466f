//! nodemedic, the node agent.
//!
//! Flow of a scan and of every cycle of the daemon:
//!
//! ```text
//!  host files (/proc, /sys, kubelet dir) ─┐
//!  pods (--pods file, the API, or the     ├─> collect::collect ──> NodeSnapshot
//!        daemon's watch of this node)     ┘   (I/O, HostPaths)         │
//!  Spark drivers (spark: owner ref, labels, driver URL) ─────────────>│
//!  API server probes, webhooks (probe, apimon) ──────────────────────>│
//!                                                                      ▼
//!                       nodemedic_rules::rules::evaluate (pure) ──> Vec<Finding>
//!                                                                      │
//!        report (text/JSON) · metrics (/metrics) · events (Event series) · conditions (node status)
//! ```
//!
//! - [`host`]: `HostPaths`, the one place host paths are resolved.
//! - [`collect`]: one module per input (checkpoint, kubelet config, sysfs, cgroups, procfs,
//!   pods, Spark local dirs and configurations); thin `read_*` over the host root beside pure,
//!   tested `parse_*`.
//! - [`kube_api`], [`spark`]: the Kubernetes client, pods as lean objects, driver resolution
//!   with a cached, budgeted directory.
//! - [`probe`], [`apimon`]: API server probes timed like `curl -w`, webhook attribution.
//! - [`daemon`], [`serve`], [`metrics`], [`events`], [`conditions`], [`config`]: `nodemedic run`.
//! - [`repair`]: the repairs (plan first, act only with `--apply`).
//! - [`report`], [`args`], [`cli`]: the command line, its reports and exit codes.

pub mod apimon;
pub mod args;
pub mod cli;
pub mod collect;
pub mod conditions;
pub mod config;
pub mod daemon;
pub mod events;
pub mod host;
pub mod kube_api;
pub mod metrics;
pub mod probe;
pub mod repair;
pub mod report;
pub mod serve;
pub mod spark;
