//! nodemedic's pure core: the domain types and the judgement.
//!
//! Data flows one way: the agent reads the host and the API into a [`NodeSnapshot`] (our own
//! small types, no Kubernetes or I/O types), then [`rules::evaluate`] turns the snapshot and the
//! [`Settings`] into [`Finding`]s. Nothing in this crate touches files, the network or a
//! clock: time comes in as `NodeSnapshot::taken_at`, so every rule is a plain function that a
//! table test can drive.
//!
//! - [`cpuset`]: CPU id sets in the kubelet's list format.
//! - [`checkpoint`]: the kubelet's `cpu_manager_state` codec (read V1-V4, checksum, write).
//! - [`topology`]: CPU topology and the kubelet's reserved-CPU choice.
//! - [`validate`]: the static policy's state checks (docs/kubelet.md, "Why a kubelet refuses to
//!   start").
//! - [`snapshot`]: what the agent saw on the node.
//! - [`finding`]: what a rule reports.
//! - [`coverage`]: which sources each rule needs, and whether it could judge.
//! - [`rules`]: the rule catalogue, one module per rule id.
//! - [`facts`]: the judgements several rules, the agent's metrics and its repairs share (stale
//!   checkpoint entries, rejected pods, orphaned executors and scratch dirs).
//! - [`probes`]: the API probes' window, statistics and phases.
//! - [`spark`]: Spark's and spark-operator's labels and container names, pod classification.
//! - [`submission`]: Spark's submission client here: the pod create time measured and the
//!   client timeout in force.
//! - [`text`]: list lengths, human sizes and durations, shared command lines and remedies.
//! - [`admission`]: which admission webhooks apply to a pod CREATE (admissionregistration/v1).
//! - [`promtext`]: the API server's admission webhook latencies from its `/metrics` text.
//! - [`kubelet_view`]: the kubelet's own view of its CPU, memory and device assignments
//!   (PodResources API).
//! - [`kubelet_version`]: the kubelet's version, and which of its answers a comparison may
//!   rely on.
//! - [`managers`]: the other resource managers' checkpoints (memory, devices, DRA) and the DRA
//!   drivers' own, read and verified like the CPU one.

pub mod admission;
pub mod checkpoint;
pub mod coverage;
pub mod cpu_map;
pub mod cpuset;
pub mod eviction;
pub mod facts;
pub mod finding;
pub mod hostpath;
pub mod kubelet_version;
pub mod kubelet_view;
pub mod local_storage;
pub mod managers;
pub mod probes;
pub mod promtext;
pub mod quantity;
pub mod rules;
pub mod settings;
pub mod snapshot;
pub mod spark;
pub mod submission;
pub mod text;
pub mod topology;
pub mod validate;

pub use checkpoint::{Checkpoint, CheckpointError, CpuState, Verification};
pub use cpuset::{CpuSet, CpuSetError};
pub use finding::{Finding, RuleId, Severity, Subject};
pub use settings::Settings;
pub use snapshot::NodeSnapshot;
