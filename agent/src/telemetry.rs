//! Logging, set up once per process: `nodemedic run` and the repairs log to stderr through
//! `tracing`, as text (colours only on a terminal) or as JSON lines, filtered by
//! `NODEMEDIC_LOG` (default `info`).

use std::io::IsTerminal as _;

use crate::output::Format;

/// Installs the process's log subscriber. A second call keeps the first subscriber.
pub fn init(format: Format) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("NODEMEDIC_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        Format::Json => builder.json().try_init(),
        Format::Text => builder.try_init(),
    };
}
