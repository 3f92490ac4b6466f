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

/// README's sample of the first command's output is the real output, with every cut marked:
/// each line of the sample is a line of the real text report (its time aside), in order; where
/// the sample leaves real lines out, a line of its own says `...` (indented or not); a line
/// shortened at its end ends with `...`.
#[test]
fn readme_sample_is_the_real_output_with_its_cuts_marked() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let start = readme
        .find("this is what it prints")
        .and_then(|i| readme[i..].find("```text\n").map(|j| i + j + "```text\n".len()))
        .expect("README shows the first command's output in a ```text block after 'this is what it prints'");
    let sample: Vec<&str> = readme[start..].split("\n```").next().unwrap().lines().collect();
    let dir = example_dir();
    let pods = dir.join("pods.json");
    let run = nodemedic(&[
        "scan",
        "--host-root",
        dir.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let real: Vec<&str> = run.stdout.lines().collect();
    let time = |l: &str| match l.rfind(" at ") {
        Some(i) if l.starts_with("nodemedic ") => l[..i].to_string(),
        _ => l.to_string(),
    };
    let mut at = 0; // the next real line the sample may show
    let mut cut = false; // a `...` line since the last shown line
    for line in &sample {
        if line.trim() == "..." {
            cut = true;
            continue;
        }
        let matches = |r: &&str| match line.strip_suffix("...") {
            Some(prefix) => time(r).starts_with(&time(prefix)),
            None => time(r) == time(line),
        };
        let Some(found) = real[at..].iter().position(matches) else {
            panic!(
                "README's sample line is not in the real output (after line {at}):\n{line}\n\nreal output:\n{}",
                run.stdout
            );
        };
        assert!(
            found == 0 || cut,
            "README's sample leaves out {found} real lines before this one without a `...` line:\n{line}\nleft out:\n{}",
            real[at..at + found].join("\n")
        );
        at += found + 1;
        cut = false;
    }
    assert!(
        at == real.len() || cut,
        "README's sample ends before the real output does without a `...` line"
    );
    assert!(sample.len() >= 10, "the sample shows the report, not a line of it");
}

/// `scan --cpu-map` prints the map alone (what `kubectl nodemedic status NODE` shows), exits 0
/// when it is drawn and 4 when the CPUs could not be read.
#[test]
fn the_cpu_map_alone() {
    let dir = example_dir();
    let pods = dir.join("pods.json");
    let (root, pods) = (dir.to_str().unwrap(), pods.to_str().unwrap());
    let text = nodemedic(&["scan", "--host-root", root, "--pods", pods, "--cpu-map"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines[0], "node worker-stale");
    assert!(lines[1].starts_with("cpu map (16 CPUs; R reserved"), "{}", text.stdout);
    assert_eq!(
        lines[3],
        "                               R  L  L  L  L  L  S  S  R  L  L  L  L  L  S  ."
    );
    assert!(
        lines.contains(&"  S 7            default/feature-backfill container app (stale entry)"),
        "{}",
        text.stdout
    );
    assert!(!text.stdout.contains("CRITICAL"), "the map alone:\n{}", text.stdout);
    let json = nodemedic(&[
        "scan",
        "--host-root",
        root,
        "--pods",
        pods,
        "--cpu-map",
        "--format",
        "json",
    ]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let map: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let states: Vec<&str> = map
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["state"].as_str().unwrap())
        .collect();
    assert_eq!(states.len(), 16);
    assert_eq!(states[6], "stale");
    assert_eq!(states[0], "reserved");
    assert_eq!(map[7]["holder"], "default/feature-backfill container app");
    // No sysfs CPUs under this root: no map, exit 4, and why.
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bare.path().join("var/lib/kubelet")).unwrap();
    let none = nodemedic(&[
        "scan",
        "--host-root",
        bare.path().to_str().unwrap(),
        "--offline",
        "--cpu-map",
    ]);
    assert_eq!(none.code, 4, "{}\n{}", none.stdout, none.stderr);
    assert!(none.stdout.is_empty(), "{}", none.stdout);
    assert!(
        none.stderr.contains("no CPU map of node")
            && none.stderr.contains("the CPUs could not be read (cpus: missing)"),
        "{}",
        none.stderr
    );
}
