//! The bundled example node stays what its generator writes, and README's first command
//! shows real findings on it.

use std::collections::BTreeMap;
use std::path::Path;

use nodemedic_tests::nodemedic;

fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let kind = e.file_type().unwrap();
            if kind.is_dir() {
                stack.push(p);
            } else if kind.is_symlink() {
                // sysfs's `cpuN/nodeM` links: their target is what they hold.
                out.insert(
                    p.strip_prefix(root).unwrap().display().to_string(),
                    std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes(),
                );
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

fn example_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/worker-stale")
}

#[test]
fn example_is_current() {
    let fresh = tempfile::tempdir().unwrap();
    nodemedic_tests::scenarios::example_node().write(fresh.path()).unwrap();
    let want = files(fresh.path());
    let have = files(&example_dir());
    assert_eq!(
        have.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "examples/worker-stale is out of date: cargo run -p nodemedic-tests --bin make-example -- examples/worker-stale"
    );
    for (name, bytes) in &want {
        assert!(
            have[name] == *bytes,
            "examples/worker-stale/{name} differs from the generator"
        );
    }
}

#[test]
fn readme_first_command_shows_the_incident() {
    let dir = example_dir();
    let pods = dir.join("pods.json");
    let run = nodemedic(&[
        "scan",
        "--host-root",
        dir.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let got: Vec<(String, String)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap().into(),
                f["severity"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("exclusive-cpu-shortage", "critical"),
        ("stale-cpu-assignment", "critical"),
        ("stale-cpu-assignment", "critical"),
        ("cpuset-drift", "warning"),
        ("exclusive-cpu-shortage", "warning"),
    ];
    assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
    assert_eq!(report["findings"][0]["evidence"]["stale_cpus"], "6-7,14");
    assert!(report["notes"].as_array().unwrap().is_empty());
}
