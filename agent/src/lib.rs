//! nodemedic, the node agent.
//!
//! Flow of a scan (and, later, of every cycle of the daemon):
//!
//! ```text
//!  host files (/proc, /sys, kubelet dir) ──> collect::collect ──> NodeSnapshot
//!  pods (--pods file)                         (I/O, HostPaths)         │
//!                                                                      ▼
//!                               nodemedic_rules::rules::evaluate (pure) ──> Vec<Finding>
//!                                                                      │
//!                                             report::Report (text / JSON) ◄┘
//! ```
//!
//! - [`host`]: `HostPaths`, the one place host paths are resolved.
//! - [`collect`]: one module per input (checkpoint, kubelet config, sysfs, cgroups, procfs,
//!   pods); thin `read_*` over the host root beside pure, tested `parse_*`.
//! - [`report`]: the JSON report contract and the text report.
//! - [`args`] and [`cli`]: the command line and exit codes.

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
pub mod report;
pub mod serve;
pub mod spark;
