//! End-to-end test support for nodemedic: the fixture host trees ([`hosttree`]), the
//! scenarios the golden tests and the example node are built from ([`scenarios`]), real
//! cgroup v1 sandboxes ([`cgroup_v1`]), and helpers to run the real `nodemedic` binary.
//!
//! The binary is the one cargo built for this profile (`target/<profile>/nodemedic`, next
//! to the test executable's `deps/` directory), or `$NODEMEDIC_BIN`.

pub mod agent;
pub mod apiserver;
pub mod cgroup_v1;
pub mod cgroup_v2;
pub mod checkpoints;
pub mod cluster;
pub mod crd;
pub mod detection;
pub mod exposition;
pub mod fleet;
pub mod hosttree;
pub mod hot_functions;
pub mod manifests;
pub mod measure;
pub mod podresources;
pub mod repairs;
pub mod scenarios;
pub mod spark_submit;
pub mod sparkpods;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Ends `child` as a supervisor would: SIGTERM, up to 5 s to exit, then SIGKILL; reaped
/// either way.
pub fn stop_child(child: &mut std::process::Child) {
    stop_child_within(child, std::time::Duration::from_secs(5));
}

/// [`stop_child`] with `grace` to exit after the SIGTERM.
pub fn stop_child_within(child: &mut std::process::Child, grace: std::time::Duration) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `GET path` over HTTP/1.0 to `addr` (a test's own servers: the agent's `/metrics`, a
/// Prometheus): the status code (0 when nothing answers) and the body.
pub fn http_get(addr: &str, path: &str, timeout: std::time::Duration) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// The `nodemedic` binary under test.
pub fn nodemedic_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("NODEMEDIC_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test-exe> -> target/<profile>/nodemedic
    let exe = std::env::current_exe().unwrap_or_default();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let bin = profile_dir.join("nodemedic");
    assert!(
        bin.is_file(),
        "{} not found: build it first (cargo test --workspace builds it; or set NODEMEDIC_BIN)",
        bin.display()
    );
    bin
}

/// The outcome of one run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// An empty node `node` (cgroup v1, cgroupfs, containerd) written under `dir/host`, and a
/// kubeconfig for `api` at `dir/kubeconfig`: (host root, kubeconfig), what `nodemedic scan`
/// against the double takes.
pub fn scan_host(api: &apiserver::ApiServer, dir: &Path, node: &str) -> (PathBuf, PathBuf) {
    let node = hosttree::Node::new(node, hosttree::Layout::V1Cgroupfs, hosttree::Runtime::Containerd);
    write_host(api, dir, &node).unwrap_or_else(|e| panic!("{e}"))
}

/// `node` written under `dir/host`, and a kubeconfig for `api` (TLS) at `dir/kubeconfig`:
/// (host root, kubeconfig), what `nodemedic scan` and `nodemedic run` against the double take.
/// An error names the path it failed at.
pub fn write_host(api: &apiserver::ApiServer, dir: &Path, node: &hosttree::Node) -> Result<(PathBuf, PathBuf), String> {
    let root = dir.join("host");
    node.write(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, true)
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    Ok((root, kubeconfig))
}

/// The arguments of `nodemedic scan --format json` of node `node` whose host tree is `root`,
/// with its pods from the API of `kubeconfig`.
pub fn api_scan_args<'a>(root: &'a str, kubeconfig: &'a str, node: &'a str) -> [&'a str; 9] {
    [
        "scan",
        "--host-root",
        root,
        "--kubeconfig",
        kubeconfig,
        "--node",
        node,
        "--format",
        "json",
    ]
}

/// `nodemedic scan --format json` of node `node` whose host tree is `root`, against the API of
/// `kubeconfig`, with `extra` arguments: the parsed report (a run that prints no report panics
/// with its output).
pub fn scan_report(root: &Path, kubeconfig: &Path, node: &str, extra: &[&str]) -> serde_json::Value {
    let (root, kubeconfig) = (root.to_string_lossy(), kubeconfig.to_string_lossy());
    let mut args = api_scan_args(&root, &kubeconfig, node).to_vec();
    args.extend_from_slice(extra);
    let run = nodemedic(&args);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr))
}

/// Three `--kubeconfig` files a user may name that cannot be used, written under `dir`, each
/// with the words its error names: a missing file, a garbage file, and a configuration whose
/// API server refuses (port 1 on loopback: nothing listens, the connection is refused at once;
/// the error names the pod list of node `node`).
pub fn unusable_kubeconfigs(dir: &Path, node: &str) -> Vec<(String, String)> {
    let garbage = dir.join("garbage");
    std::fs::write(&garbage, "garbage\n").unwrap();
    let refused = dir.join("refused");
    std::fs::write(
        &refused,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\n\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n",
    )
    .unwrap();
    vec![
        ("/nonexistent/kubeconfig".into(), "failed to read kubeconfig".into()),
        (garbage.display().to_string(), "failed to parse kubeconfig YAML".into()),
        (refused.display().to_string(), format!("LIST pods spec.nodeName={node}")),
    ]
}

/// Runs `nodemedic <args>` with a clean environment for the variables it reads.
pub fn nodemedic(args: &[&str]) -> Run {
    let mut cmd = Command::new(nodemedic_bin());
    cmd.args(args);
    for var in [
        "NODE_NAME",
        "NODEMEDIC_HOST_ROOT",
        "NODEMEDIC_KUBELET_DIR",
        "NODEMEDIC_PODS",
        "NODEMEDIC_FORMAT",
        "NODEMEDIC_DISABLE_RULES",
        "NODEMEDIC_CONFIG",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("RUST_BACKTRACE", "1");
    // Never the API of whatever cluster this machine may know: tests that want one pass
    // --kubeconfig for the in-repo double.
    cmd.env("KUBECONFIG", "/nonexistent/nodemedic-tests/kubeconfig");
    cmd.env_remove("KUBERNETES_SERVICE_HOST");
    cmd.env_remove("NODEMEDIC_KUBECONFIG");
    match cmd.output() {
        Ok(o) => o.into(),
        Err(e) => panic!("cannot run {}: {e}", nodemedic_bin().display()),
    }
}

/// A JSON report with the fields that change from run to run replaced by placeholders
/// (`generated_at`, the checkpoint's age in seconds and mtime, the kubelet's start time).
pub fn normalize_report(json: &str) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("report is not JSON ({e}):\n{json}"));
    v["generated_at"] = "<generated_at>".into();
    if let Some(findings) = v["findings"].as_array_mut() {
        for f in findings {
            // Ages against the wall clock (a fixture's times are fixed).
            for key in ["checkpoint_age_seconds", "newest_age_seconds"] {
                if let Some(age) = f["evidence"].get_mut(key) {
                    *age = "<age>".into();
                }
            }
            for (key, placeholder) in [("checkpoint_modified", "<mtime>"), ("kubelet_started", "<started>")] {
                if let Some(v) = f["evidence"].get_mut(key) {
                    *v = placeholder.into();
                }
            }
        }
    }
    v
}

/// The rule ids of a JSON report's findings, in the report's order. Panics when the report
/// has no `findings` array or a finding no `rule` string.
pub fn finding_rules(report: &serde_json::Value) -> Vec<&str> {
    let Some(findings) = report["findings"].as_array() else {
        panic!("report has no findings array: {report}");
    };
    findings
        .iter()
        .map(|f| {
            f["rule"]
                .as_str()
                .unwrap_or_else(|| panic!("finding without a rule: {f}"))
        })
        .collect()
}

/// The findings of rule `rule` in a JSON report, in the report's order. Panics when the report
/// has no `findings` array.
pub fn findings_of<'a>(report: &'a serde_json::Value, rule: &str) -> Vec<&'a serde_json::Value> {
    let Some(findings) = report["findings"].as_array() else {
        panic!("report has no findings array: {report}");
    };
    findings.iter().filter(|f| f["rule"] == rule).collect()
}

/// Compares `actual` with the golden file `tests/golden/<name>.json`; with
/// `UPDATE_GOLDEN=1` rewrites the file instead.
pub fn assert_golden(name: &str, actual: &serde_json::Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(actual).unwrap_or_default() + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).ok();
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 to create it)", path.display()));
    if want != text {
        panic!(
            "report differs from golden {}\n--- want\n{want}\n--- got\n{text}\n(if the change is intended, rerun with UPDATE_GOLDEN=1 and review the diff)",
            path.display()
        );
    }
}

/// Copies the tree `from` into `to` (created as needed): directories, files, and symlinks as
/// symlinks (sysfs's `cpuN/nodeM` links point at what a fixture does not write).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in std::fs::read_dir(from)
        .unwrap_or_else(|e| panic!("{}: {e}", from.display()))
        .flatten()
    {
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry
            .file_type()
            .unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        if kind.is_symlink() {
            let link = std::fs::read_link(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
            std::os::unix::fs::symlink(link, &target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
        } else if kind.is_dir() {
            copy_tree(&source, &target);
        } else {
            std::fs::copy(&source, &target).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        }
    }
}
