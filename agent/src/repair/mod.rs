//! Repairs: `nodemedic repair cpu-state | orphans | failed-pods | local-dirs`, and the daemon's
//! automatic repair.
//!
//! Every repair plans from the snapshot `nodemedic scan` would report ([`crate::scan`]),
//! prints the plan, and acts only with `--apply`, through one flow ([`command`]). A repair
//! never guesses: it checks its preconditions again right before acting, keeps a backup of
//! what it rewrites, writes atomically, deletes pods only with their UID as a precondition,
//! and logs every action with what, why and the evidence ([`audit`]).

pub mod atomic;
pub mod audit;
pub mod auto;
pub mod command;
pub mod cpu_state;
pub mod interrupt;
pub mod kubelet;
pub mod local_dirs;
pub mod pods;
