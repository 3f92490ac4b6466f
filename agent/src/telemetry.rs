//! Logging, set up once per process: `nodemedic run` and the repairs log to stderr through
//! `tracing`, as text (colours only on a terminal) or as JSON lines, filtered by
//! `NODEMEDIC_LOG` (default `info`). A failed request of a kube client is logged once, by the
//! code that made it, at WARN (see [`KUBE_TRACE`]).

use std::io::IsTerminal as _;

use crate::output::Format;

/// Where kube's client logs each failed request at ERROR (its tower-http trace layer, part of
/// every kube client): the request's caller logs the same failure once, at WARN, with what it
/// was for, so this target is off unless `NODEMEDIC_LOG` names it.
const KUBE_TRACE: &str = "kube_client::client::builder";

/// Installs the process's log subscriber. A second call keeps the first subscriber.
pub fn init(format: Format) {
    let spec = std::env::var("NODEMEDIC_LOG").unwrap_or_default();
    let mut filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .ok()
        .filter(|_| !spec.is_empty())
        .unwrap_or_else(|| "info".into());
    if !spec.contains(KUBE_TRACE) {
        if let Ok(off) = format!("{KUBE_TRACE}=off").parse() {
            filter = filter.add_directive(off);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        Format::Json => builder.json().try_init(),
        Format::Text => builder.try_init(),
    };
}
