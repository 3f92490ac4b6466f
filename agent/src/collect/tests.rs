//! The collectors' map: docs/architecture.md's table of collectors is keyed by the report's
//! `sources`, in the report's order, so the map cannot drift from [`super::SOURCES`].

/// The first column of the table under `### Collectors, by `sources` key`, in order.
fn documented_sources(architecture: &str) -> Vec<String> {
    let section = architecture
        .split("### Collectors, by `sources` key")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .unwrap_or_default();
    // The rows after the header and its `|---|` line.
    section
        .lines()
        .skip_while(|l| !l.starts_with("|---"))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(key, _)| key.to_string()))
        .collect()
}

/// The report's sources, as `Records` orders them: the collectors of [`super::SOURCES`], then
/// the Node's kubelet version, which `scan` records after them.
#[test]
fn the_architectures_collector_table_is_the_reports_sources() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut want: Vec<&str> = super::SOURCES.to_vec();
    want.push("kubelet_version");
    assert_eq!(documented_sources(&text), want, "{}", path.display());
    // A table that lost a row is told apart.
    let without_cpus: String = text
        .lines()
        .filter(|l| !l.starts_with("| `cpus` |"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!documented_sources(&without_cpus).iter().any(|k| k == "cpus"));
}
