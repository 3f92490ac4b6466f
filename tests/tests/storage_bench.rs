//! `storage-bench` (the numbers of docs/performance.md, "Spark's local storage") on a small
//! node, held to the cost model the docs state: a first walk lists every directory and looks at
//! every entry; a tree that did not change is not listed again, and only its recent files are
//! looked at; new files make only their directories listed again; with the kubelet's figures
//! nothing below the local dirs is looked at.

use std::process::Command;

/// One row of the bench's table: (listings, stats).
fn row(out: &str, state: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("| {state}")))
        .unwrap_or_else(|| panic!("no row {state:?} in\n{out}"));
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    let n = |i: usize| {
        cells[i]
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("{line}: cell {i}: {e}"))
    };
    (n(4), n(5))
}

#[test]
fn the_walks_cost_what_the_docs_say() {
    let dir = tempfile::tempdir().unwrap();
    let (pods, files) = (2u64, 200u64);
    let out = Command::new(env!("CARGO_BIN_EXE_storage-bench"))
        .args([pods.to_string(), files.to_string(), "1".into()])
        .arg(dir.path())
        .env("NODEMEDIC_BIN", nodemedic_tests::nodemedic_bin())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // 64 subdirectories, the block manager's directory and the volume, per pod.
    let dirs = pods * 66;
    let first = row(&text, "first walk");
    assert!(first.0 >= dirs, "{first:?}: every directory listed\n{text}");
    assert!(
        first.1 >= pods * files + dirs,
        "{first:?}: every entry looked at\n{text}"
    );
    let recent = row(&text, "unchanged, every file recent");
    let old = row(&text, "unchanged, old files");
    assert!(
        recent.0 <= pods && old.0 == recent.0,
        "{recent:?} {old:?}: nothing listed again\n{text}"
    );
    assert!(
        recent.1 >= pods * files,
        "{recent:?}: each recent file looked at\n{text}"
    );
    assert!(old.1 < pods * files, "{old:?}: old files not looked at\n{text}");
    assert!(old.1 <= 2 * dirs, "{old:?}: about a stat per directory\n{text}");
    // 1% of 200 is 2 files a pod, one map task: one subdirectory of each pod changed.
    let grown = row(&text, "1% new files");
    assert_eq!(
        grown.0,
        old.0 + pods,
        "{grown:?}: only the changed directories listed\n{text}"
    );
    assert!(grown.1 < recent.1, "{grown:?}\n{text}");
    // With the kubelet's figures the emptyDirs are not walked: no listing but the pods'
    // (absent) CSI directories, one each, and no stat but the kubelet's directory's.
    let kubelet = row(&text, "the kubelet's figures");
    assert_eq!(kubelet, (pods, 1), "{kubelet:?}: nothing below the local dirs\n{text}");
    let scan = text
        .lines()
        .find(|l| l.starts_with("one-shot `nodemedic scan`"))
        .unwrap_or_default();
    assert!(
        scan.contains(&format!("with the {} shuffle files", pods * files)),
        "{text}"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "the bench leaves nothing behind"
    );
}
