//! Repairs: `nodemedic repair cpu-state | orphans | failed-pods | local-dirs`.
//!
//! Every repair computes a plan first and prints it; only `--apply` acts. A repair never
//! guesses (DESIGN.md, "Safety of repairs"): it checks its preconditions again right before
//! acting, keeps a backup of what it rewrites, writes atomically, deletes pods only with their
//! UID as a precondition, and logs every action with what, why and the evidence.

pub mod atomic;
pub mod audit;
pub mod cpu_state;
pub mod kubelet;
pub mod local_dirs;
pub mod pods;
