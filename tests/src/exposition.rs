//! The metrics contract as tests read it: docs/metrics.md's table of families and the families
//! an exposition text serves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The families served only while a running Spark pod's local dirs have been measured (bytes)
/// and grow (growth, forecast): labelled by application, they have no series, and so no
/// `# TYPE` line, on a node without one. `tests/tests/local_storage.rs` checks them against
/// the docs on a filling file system.
pub const GROWING_SPARK_POD_FAMILIES: [&str; 3] = [
    "nodemedic_local_storage_bytes",
    "nodemedic_local_storage_growth_bytes_per_second",
    "nodemedic_local_storage_forecast_seconds",
];

/// docs/metrics.md's table: name to type.
pub fn documented() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_string(), cells.get(2)?.to_string()))
        })
        .collect()
}

/// `(name, type)` of every family in an exposition text, from its `# TYPE` lines.
pub fn families(text: &str) -> BTreeSet<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' ').map(|(n, t)| (n.to_string(), t.trim().to_string())))
        .collect()
}

/// `promtool check metrics` (Prometheus' own linter) on an exposition text: its complaints, or
/// `Ok`.
pub fn promtool_check(text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("promtool (Debian package `prometheus`; .ci/run installs it): {e}"))?;
    promtool
        .stdin
        .take()
        .ok_or("promtool: no stdin")?
        .write_all(text.as_bytes())
        .map_err(|e| format!("promtool: {e}"))?;
    let out = promtool.wait_with_output().map_err(|e| format!("promtool: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
