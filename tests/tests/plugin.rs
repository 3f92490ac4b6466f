//! The kubectl plugin (`daemonset/kubectl-nodemedic`) against a fake `kubectl` that records
//! every call: which agent pod it picks, which commands it runs where, how it maps kubectl's
//! own failures, and the one-off repair pod's life (rendered from the base's template and
//! validated, created, waited for, used, and deleted on success, on failure and on Ctrl-C).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodemedic_tests::manifests::{daemonset_dir, require, run, validate, yaml_docs};
use serde_json::Value;

fn plugin() -> PathBuf {
    daemonset_dir().join("kubectl-nodemedic")
}

/// A fake `kubectl` on PATH. It appends each call's arguments (one per line, then `--END--`)
/// to calls.log, and answers:
///  - `get pods ... go-template` (the agent lookup): $FAKE_PODS, lines of
///    `name phase ready created deleting`;
///  - `get daemonset`: $FAKE_DS, lines of `image IMAGE -`, `configmap VOLUME NAME`,
///    `hostpath VOLUME PATH`;
///  - `get configmap` (the repair pod templates): the template file the go-template names,
///    from daemonset/base/repair-pods/ (as the base's ConfigMap holds it);
///  - `create -f -`: saves stdin to created.yaml, prints `pod/NAME` with the pod's name, or
///    fails as kubectl does with $FAKE_CREATE `forbidden` or `exists` (AlreadyExists);
///  - `wait`: exit $FAKE_WAIT_EXIT; `get -n NS pod/...`: $FAKE_POD_STATUS; `delete`: exit 0;
///  - `exec`: prints "fake exec", sleeps $FAKE_EXEC_SLEEP seconds, and exits $FAKE_EXIT
///    saying "command terminated with exit code N" as kubectl does, or, with $FAKE_EXEC_FAILS,
///    fails as kubectl itself does (Forbidden, exit 1);
///  - `logs`, `get nodes`, `get lease`, `get pods` (status): as before.
struct FakeKubectl {
    dir: tempfile::TempDir,
}

const FAKE: &str = r#"#!/usr/bin/env bash
set -euo pipefail
for a in "$@"; do printf '%s\n' "$a"; done >>"$FAKE_DIR/calls.log"
echo "--END--" >>"$FAKE_DIR/calls.log"
args=" $* "
case "$args" in
  *" exec "*)
    if [[ -n "${FAKE_EXEC_FAILS:-}" ]]; then
      echo 'Error from server (Forbidden): pods "x" is forbidden: User "alice" cannot create resource "pods/exec" in API group "" in the namespace "nodemedic"' >&2
      exit 1
    fi
    echo "fake exec"
    if [[ -n "${FAKE_EXEC_SLEEP:-}" ]]; then sleep "$FAKE_EXEC_SLEEP"; fi
    code="${FAKE_EXIT:-0}"
    if [[ "$code" -ne 0 ]]; then echo "command terminated with exit code $code" >&2; fi
    exit "$code" ;;
  *" logs "*) echo "fake logs"; exit "${FAKE_EXIT:-0}" ;;
  *" create "*)
    cat >"$FAKE_DIR/created.yaml"
    name="$(sed -n 's/^  name: //p' "$FAKE_DIR/created.yaml" | head -n 1)"
    case "${FAKE_CREATE:-}" in
      forbidden) echo 'Error from server (Forbidden): pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the namespace "nodemedic"' >&2; exit 1 ;;
      exists) echo "Error from server (AlreadyExists): error when creating \"STDIN\": pods \"$name\" already exists" >&2; exit 1 ;;
    esac
    echo "pod/$name" ;;
  *" wait "*)
    if [[ "${FAKE_WAIT_EXIT:-0}" -ne 0 ]]; then
      echo "error: timed out waiting for the condition on pods/nodemedic-repair-worker-3" >&2
      exit "$FAKE_WAIT_EXIT"
    fi
    echo "pod/nodemedic-repair-worker-3 condition met" ;;
  *" delete "*) echo "pod \"nodemedic-repair-worker-3\" deleted" ;;
  *" get -n "*" pod/"*) printf '%s' "${FAKE_POD_STATUS:-}" ;;
  *" get daemonset "*) printf '%s' "${FAKE_DS:-}" ;;
  *" get configmap "*)
    key="$(sed -n 's/.*index \.data "\([a-z-]*\)\.yaml".*/\1/p' <<<"$*")"
    cat "$FAKE_TEMPLATES/$key.yaml" ;;
  *" get nodes "*) printf '%s' "${FAKE_NODES:-}" ;;
  *" get lease "*) printf '%s' "${FAKE_LEASE:-}"; exit "${FAKE_LEASE_EXIT:-0}" ;;
  *" get pods "*"go-template="*) printf '%s' "${FAKE_PODS:-}" ;;
  *" get pods "*"jsonpath="*) printf '%s' "${FAKE_POD_NODES:-}" ;;
  *" get pods "*) echo "NODE POD READY"; printf '%s' "${FAKE_POD_NODES:-}" ;;
  *) echo "fake kubectl: unexpected call: $*" >&2; exit 99 ;;
esac
"#;

/// One Running, Ready agent.
const ONE_AGENT: &str = "nodemedic-x7k2p Running True 2026-11-20T10:00:00Z -\n";
/// The base DaemonSet as the plugin reads it.
const BASE_DS: &str = "image ghcr.io/nodemedic/nodemedic:0.1.0 -\nconfigmap config nodemedic-config-5g7h8k\n\
hostpath host-proc /proc\nhostpath host-cgroup /sys/fs/cgroup\nhostpath host-cpu /sys/devices/system/cpu\n\
hostpath host-kubelet /var/lib/kubelet\n";

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    calls: Vec<Vec<String>>,
}

impl FakeKubectl {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubectl");
        std::fs::write(&path, FAKE).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeKubectl { dir }
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("calls.log")
    }

    /// The pod the last `create -f -` was given.
    fn created(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join("created.yaml")).ok()
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let _ = std::fs::remove_file(self.dir.path().join("created.yaml"));
        std::fs::write(self.log(), "").unwrap();
        let path = format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("bash");
        cmd.arg(plugin())
            .args(args)
            .env("PATH", path)
            .env("FAKE_DIR", self.dir.path())
            .env("FAKE_TEMPLATES", daemonset_dir().join("base/repair-pods"))
            .env_remove("NODEMEDIC_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    fn calls(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.log())
            .unwrap()
            .split("--END--\n")
            .filter(|c| !c.is_empty())
            .map(|c| c.lines().map(String::from).collect())
            .collect()
    }

    /// Runs the plugin with `args` and `env`; stdin is not a terminal.
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Ran {
        let out = self.command(args, env).output().unwrap();
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            calls: self.calls(),
        }
    }
}

fn args(s: &[&str]) -> Vec<String> {
    s.iter().map(|a| a.to_string()).collect()
}

/// The verb of a call, after kubectl's global options.
fn verb(call: &[String]) -> &str {
    let mut i = 0;
    while i < call.len() && (call[i] == "--context" || call[i] == "--kubeconfig") {
        i += 2;
    }
    call.get(i).map(String::as_str).unwrap_or("")
}

fn is_lookup(call: &[String], node: &str, ns: &str) -> bool {
    let joined = call.join(" ");
    verb(call) == "get"
        && joined.contains(&format!(
            "get pods -n {ns} -l app.kubernetes.io/name=nodemedic --field-selector spec.nodeName={node} -o go-template="
        ))
}

// ------------------------------------------------------------------------- agent commands

#[test]
fn scan_execs_nodemedic_scan_in_the_nodes_agent() {
    let fake = FakeKubectl::new();
    let r = fake.run(
        &[
            "--context",
            "prod",
            "scan",
            "worker-3",
            "--format",
            "json",
            "--disable-rule",
            "a b",
        ],
        &[("FAKE_PODS", ONE_AGENT), ("FAKE_EXIT", "1")],
    );
    // scan's exit status comes through (1: findings), kubectl's message too.
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.stdout, "fake exec\n");
    assert!(r.stderr.contains("command terminated with exit code 1"), "{}", r.stderr);
    assert_eq!(r.calls.len(), 2, "{:?}", r.calls);
    assert!(is_lookup(&r.calls[0], "worker-3", "nodemedic"), "{:?}", r.calls[0]);
    assert_eq!(&r.calls[0][..2], &args(&["--context", "prod"])[..]);
    assert_eq!(
        r.calls[1],
        args(&[
            "--context",
            "prod",
            "exec",
            "-n",
            "nodemedic",
            "pod/nodemedic-x7k2p",
            "-c",
            "nodemedic",
            "--",
            "nodemedic",
            "scan",
            "--format",
            "json",
            "--disable-rule",
            "a b",
        ])
    );
}

#[test]
fn the_agent_is_the_newest_running_and_ready_pod() {
    let fake = FakeKubectl::new();
    // A rolling update: the old pod is being deleted, one new pod is not Ready yet, one is
    // Pending; of the two Running and Ready, the newer one. Listed alphabetically, the first
    // would be the terminating one.
    let pods = "nodemedic-aaaaa Running True 2026-11-20T10:00:00Z deleting\n\
                nodemedic-bbbbb Running True 2026-11-23T08:00:00Z -\n\
                nodemedic-ccccc Running False 2026-11-24T09:00:00Z -\n\
                nodemedic-ddddd Pending False 2026-11-24T09:30:00Z -\n\
                nodemedic-eeeee Running True 2026-11-21T10:00:00Z -\n";
    let r = fake.run(&["scan", "worker-3"], &[("FAKE_PODS", pods)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.calls[1][3], "pod/nodemedic-bbbbb", "{:?}", r.calls[1]);
    assert!(
        r.stderr
            .contains("5 agent pods on node worker-3 (a rolling update?); using pod/nodemedic-bbbbb"),
        "{}",
        r.stderr
    );
    // None Running and Ready: exit 2, each pod's state, nothing exec'd.
    let pods =
        "nodemedic-ccccc Running False 2026-11-24T09:00:00Z -\nnodemedic-ddddd Pending  2026-11-24T09:30:00Z -\n";
    let r = fake.run(&["scan", "worker-3"], &[("FAKE_PODS", pods)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no Running and Ready nodemedic agent on node worker-3"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("  nodemedic-ccccc Running ready=False"),
        "{}",
        r.stderr
    );
    assert_eq!(r.calls.len(), 1, "nothing is exec'd: {:?}", r.calls);
}

#[test]
fn kubectls_own_failures_exit_2_with_the_reason() {
    let fake = FakeKubectl::new();
    // kubectl exec refused (no pods/exec): 2, not scan's 1 (findings).
    let r = fake.run(
        &["scan", "worker-3"],
        &[("FAKE_PODS", ONE_AGENT), ("FAKE_EXEC_FAILS", "1")],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "kubectl-nodemedic: kubectl failed (exit 1), nothing ran or the session was cut: Error from server (Forbidden)"
        ),
        "{}",
        r.stderr
    );
    // The same for probe and the API-only repairs.
    for cmd in [
        &["probe", "worker-3"][..],
        &["repair", "worker-3", "orphans", "--apply"],
    ] {
        let r = fake.run(cmd, &[("FAKE_PODS", ONE_AGENT), ("FAKE_EXEC_FAILS", "1")]);
        assert_eq!(r.code, 2, "{cmd:?}: {}", r.stderr);
    }
    // The remote command's own statuses pass through, 2 and 3 included.
    for code in [0, 1, 2, 3] {
        let c = code.to_string();
        let r = fake.run(
            &["repair", "worker-3", "failed-pods", "--apply", "--yes"],
            &[("FAKE_PODS", ONE_AGENT), ("FAKE_EXIT", &c)],
        );
        assert_eq!(r.code, code, "{}", r.stderr);
        assert!(!r.stderr.contains("kubectl failed"), "{}", r.stderr);
    }
}

#[test]
fn api_only_repairs_exec_in_the_agent() {
    let fake = FakeKubectl::new();
    let r = fake.run(
        &[
            "--kubeconfig",
            "/tmp/kc",
            "repair",
            "worker-3",
            "orphans",
            "--apply",
            "--include-running",
        ],
        &[("FAKE_PODS", ONE_AGENT), ("NODEMEDIC_NAMESPACE", "ops")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(is_lookup(&r.calls[0], "worker-3", "ops"));
    assert_eq!(
        r.calls[1],
        args(&[
            "--kubeconfig",
            "/tmp/kc",
            "exec",
            "-i",
            "-n",
            "ops",
            "pod/nodemedic-x7k2p",
            "-c",
            "nodemedic",
            "--",
            "nodemedic",
            "repair",
            "orphans",
            "--apply",
            "--include-running",
        ])
    );
    assert!(
        r.stderr
            .contains("repairing in the agent (pod/nodemedic-x7k2p) on node worker-3 (kubectl exec)"),
        "{}",
        r.stderr
    );
    // They need no pod of their own.
    let r = fake.run(
        &["repair", "worker-3", "failed-pods", "--via", "pod"],
        &[("FAKE_PODS", ONE_AGENT)],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("uses the API only"), "{}", r.stderr);
    assert!(r.calls.is_empty());
}

#[test]
fn host_repairs_via_exec_run_in_the_agent() {
    let fake = FakeKubectl::new();
    let r = fake.run(
        &[
            "repair",
            "worker-3",
            "cpu-state",
            "--via",
            "exec",
            "--apply",
            "--restart-kubelet",
        ],
        &[("FAKE_PODS", ONE_AGENT)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.calls.len(), 2);
    assert_eq!(
        r.calls[1],
        args(&[
            "exec",
            "-i",
            "-n",
            "nodemedic",
            "pod/nodemedic-x7k2p",
            "-c",
            "nodemedic",
            "--",
            "nodemedic",
            "repair",
            "cpu-state",
            "--apply",
            "--restart-kubelet",
        ])
    );
}

// ----------------------------------------------------------------------- the one-off pod

/// The pod the plugin created, checked against the schemas and returned as JSON.
fn created_pod(fake: &FakeKubectl) -> Value {
    let text = fake.created().expect("a pod was created");
    assert!(!text.contains("__"), "a placeholder was left:\n{text}");
    validate(&text, "repair-pod");
    let mut docs = yaml_docs(&text);
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

fn mounts(pod: &Value) -> Vec<(String, String, bool)> {
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    pod["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let v = volumes.iter().find(|v| v["name"] == m["name"]).unwrap();
            let source = v["hostPath"]["path"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| format!("configMap {}", v["configMap"]["name"].as_str().unwrap()));
            (
                m["mountPath"].as_str().unwrap().to_string(),
                source,
                m["readOnly"] == true,
            )
        })
        .collect()
}

fn m(path: &str, source: &str, read_only: bool) -> (String, String, bool) {
    (path.into(), source.into(), read_only)
}

#[test]
fn cpu_state_runs_in_a_one_off_pod_that_is_deleted_afterwards() {
    let fake = FakeKubectl::new();
    let r = fake.run(
        &[
            "--context",
            "prod",
            "repair",
            "worker-3",
            "cpu-state",
            "--apply",
            "--yes",
        ],
        &[("FAKE_DS", BASE_DS), ("FAKE_EXIT", "0")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let verbs: Vec<&str> = r.calls.iter().map(|c| verb(c)).collect();
    assert_eq!(
        verbs,
        ["get", "get", "create", "wait", "exec", "delete"],
        "{:?}",
        r.calls
    );
    assert!(r.calls.iter().all(|c| c[..2] == args(&["--context", "prod"])));
    let joined: Vec<String> = r.calls.iter().map(|c| c.join(" ")).collect();
    assert!(
        joined[0].contains("get daemonset -n nodemedic -l app.kubernetes.io/name=nodemedic"),
        "{}",
        joined[0]
    );
    assert!(
        joined[1].contains("get configmap -n nodemedic -l app.kubernetes.io/component=repair-pods")
            && joined[1].contains("index .data \"cpu-state.yaml\""),
        "{}",
        joined[1]
    );
    assert!(joined[2].ends_with("create -n nodemedic -f - -o name"), "{}", joined[2]);
    assert!(
        joined[3].ends_with("wait -n nodemedic --for=condition=Ready pod/nodemedic-repair-worker-3 --timeout=180s"),
        "{}",
        joined[3]
    );
    assert_eq!(
        r.calls[4][2..],
        args(&[
            "exec",
            "-i",
            "-n",
            "nodemedic",
            "pod/nodemedic-repair-worker-3",
            "-c",
            "repair",
            "--",
            "nodemedic",
            "repair",
            "cpu-state",
            "--apply",
            "--yes"
        ])[..]
    );
    assert!(
        joined[5].ends_with("delete -n nodemedic pod/nodemedic-repair-worker-3 --ignore-not-found --wait=false"),
        "{}",
        joined[5]
    );
    assert!(
        r.stderr.contains(
            "repairing through a one-off pod on node worker-3: pod/nodemedic-repair-worker-3 (template cpu-state.yaml"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("deleted pod/nodemedic-repair-worker-3"),
        "{}",
        r.stderr
    );

    // The pod: the node, the agent's image and configuration, the kubelet directory writable,
    // nothing else beyond the base's read-only mounts; no capability, no hostPID.
    let pod = created_pod(&fake);
    let spec = &pod["spec"];
    assert_eq!(spec["nodeName"], "worker-3");
    assert_eq!(spec["restartPolicy"], "Never");
    assert!(spec["activeDeadlineSeconds"].as_u64().unwrap() <= 1800);
    assert_eq!(spec["hostPID"], false);
    assert_eq!(spec["serviceAccountName"], "nodemedic");
    assert_ne!(pod["metadata"]["labels"]["app.kubernetes.io/name"], "nodemedic");
    let c = &spec["containers"][0];
    assert_eq!(c["image"], "ghcr.io/nodemedic/nodemedic:0.1.0");
    assert_eq!(c["args"][0], "hold");
    assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(c["securityContext"]["capabilities"]["add"].is_null());
    assert!(c["securityContext"]["appArmorProfile"].is_null());
    assert_eq!(
        mounts(&pod),
        [
            m("/etc/nodemedic", "configMap nodemedic-config-5g7h8k", true),
            m("/host/proc", "/proc", true),
            m("/host/sys/fs/cgroup", "/sys/fs/cgroup", true),
            m("/host/sys/devices/system/cpu", "/sys/devices/system/cpu", true),
            m("/host/var/lib/kubelet", "/var/lib/kubelet", false),
        ]
    );

    // --restart-kubelet: the template that may run systemd-run and systemctl in the host's
    // namespaces (and signal the kubelet when they fail).
    let r = fake.run(
        &["repair", "worker-3", "cpu-state", "--apply", "--restart-kubelet"],
        &[("FAKE_DS", BASE_DS), ("FAKE_EXIT", "3")],
    );
    assert_eq!(r.code, 3, "applied, an action failed: {}", r.stderr);
    assert!(r.calls[1].join(" ").contains("cpu-state-restart-kubelet.yaml"));
    assert_eq!(
        verb(r.calls.last().unwrap()),
        "delete",
        "deleted after a failed repair too"
    );
    let pod = created_pod(&fake);
    assert_eq!(pod["spec"]["hostPID"], true);
    let sc = &pod["spec"]["containers"][0]["securityContext"];
    assert_eq!(sc["appArmorProfile"]["type"], "Unconfined");
    assert_eq!(
        sc["capabilities"]["add"],
        serde_json::json!(["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"])
    );
}

#[test]
fn local_dirs_pod_mounts_the_roots_writable() {
    let fake = FakeKubectl::new();
    // The agent mounts one local-dir root read-only (the install docs' patch); the operator
    // names another.
    let ds = format!("{BASE_DS}hostpath local-dir-0 /mnt/spark-local\n");
    let r = fake.run(
        &[
            "repair",
            "worker-3",
            "local-dirs",
            "--local-dir-root",
            "/data/spark/",
            "--apply",
        ],
        &[("FAKE_DS", &ds)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let pod = created_pod(&fake);
    let sc = &pod["spec"]["containers"][0]["securityContext"];
    assert_eq!(
        sc["capabilities"]["add"],
        serde_json::json!(["DAC_OVERRIDE", "SYS_PTRACE"])
    );
    assert_eq!(pod["spec"]["hostPID"], false);
    assert_eq!(
        mounts(&pod),
        [
            m("/etc/nodemedic", "configMap nodemedic-config-5g7h8k", true),
            m("/host/proc", "/proc", true),
            m("/host/sys/fs/cgroup", "/sys/fs/cgroup", true),
            m("/host/sys/devices/system/cpu", "/sys/devices/system/cpu", true),
            m("/host/var/lib/kubelet", "/var/lib/kubelet", true),
            m("/host/data/spark", "/data/spark", false),
            m("/host/mnt/spark-local", "/mnt/spark-local", false),
        ]
    );
    // A root that could break out of its line in the YAML is refused before anything is created.
    let r = fake.run(
        &[
            "repair",
            "worker-3",
            "local-dirs",
            "--local-dir-root",
            "/data\n    hostPID: true",
        ],
        &[("FAKE_DS", BASE_DS)],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("invalid local-dir root"), "{}", r.stderr);
    assert!(r.calls.iter().all(|c| verb(c) == "get"), "{:?}", r.calls);
}

#[test]
fn the_repair_pod_is_deleted_whatever_happens() {
    let fake = FakeKubectl::new();
    // Never Ready: 2 with the pod's state, and deleted.
    let r = fake.run(
        &["repair", "worker-3", "cpu-state"],
        &[
            ("FAKE_DS", BASE_DS),
            ("FAKE_WAIT_EXIT", "1"),
            ("FAKE_POD_STATUS", "Pending: ErrImagePull pull access denied"),
            ("NODEMEDIC_REPAIR_POD_TIMEOUT", "5s"),
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "pod/nodemedic-repair-worker-3 did not become Ready within 5s (Pending: ErrImagePull pull access denied)"
        ),
        "{}",
        r.stderr
    );
    let verbs: Vec<&str> = r.calls.iter().map(|c| verb(c)).collect();
    assert_eq!(verbs, ["get", "get", "create", "wait", "get", "delete"]);
    // kubectl exec refused: 2, deleted.
    let r = fake.run(
        &["repair", "worker-3", "cpu-state"],
        &[("FAKE_DS", BASE_DS), ("FAKE_EXEC_FAILS", "1")],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("kubectl failed (exit 1)"), "{}", r.stderr);
    assert_eq!(verb(r.calls.last().unwrap()), "delete");
    // The plan only (exit 1): deleted.
    let r = fake.run(
        &["repair", "worker-3", "cpu-state"],
        &[("FAKE_DS", BASE_DS), ("FAKE_EXIT", "1")],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(verb(r.calls.last().unwrap()), "delete");
    // Not created (forbidden): nothing to delete, 2 with kubectl's reason.
    let r = fake.run(
        &["repair", "worker-3", "cpu-state"],
        &[("FAKE_DS", BASE_DS), ("FAKE_CREATE", "forbidden")],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("could not create the repair pod on node worker-3: Error from server (Forbidden)"),
        "{}",
        r.stderr
    );
    assert!(r.calls.iter().all(|c| verb(c) != "delete"), "{:?}", r.calls);
    // Another repair's pod on the node (or one left behind): said so, and not deleted.
    let r = fake.run(
        &["repair", "worker-3", "local-dirs", "--apply"],
        &[("FAKE_DS", BASE_DS), ("FAKE_CREATE", "exists")],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "pod/nodemedic-repair-worker-3 already exists: another repair is running on node worker-3, or one was left behind"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.calls.iter().all(|c| verb(c) != "delete" && verb(c) != "exec"),
        "{:?}",
        r.calls
    );
    // No DaemonSet (another namespace?): 2 before anything is created.
    let r = fake.run(&["repair", "worker-3", "local-dirs"], &[("FAKE_DS", "")]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("no nodemedic DaemonSet"), "{}", r.stderr);
    assert_eq!(r.calls.len(), 1);
}

#[test]
fn ctrl_c_during_the_repair_deletes_the_pod() {
    use std::os::unix::process::CommandExt as _;
    let fake = FakeKubectl::new();
    let mut cmd = fake.command(
        &["repair", "worker-3", "cpu-state", "--apply"],
        &[("FAKE_DS", BASE_DS), ("FAKE_EXEC_SLEEP", "30")],
    );
    // Its own process group, as a terminal's foreground job: Ctrl-C signals the whole group
    // (the plugin, kubectl, tee).
    cmd.process_group(0);
    let child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(fake.log())
        .unwrap_or_default()
        .contains("\nexec\n")
    {
        assert!(
            Instant::now() < deadline,
            "the repair never started: {:?}",
            fake.calls()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let calls = fake.calls();
    let last = calls.last().unwrap();
    assert_eq!(verb(last), "delete", "{calls:?}");
    assert!(last.contains(&"pod/nodemedic-repair-worker-3".to_string()));
    assert!(stderr.contains("deleted pod/nodemedic-repair-worker-3"), "{stderr}");
}

#[test]
fn the_templates_validate_and_differ_only_where_their_repair_needs() {
    let dir = daemonset_dir().join("base/repair-pods");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["cpu-state-restart-kubelet.yaml", "cpu-state.yaml", "local-dirs.yaml"]
    );
    for name in &names {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        validate(&text, name.trim_end_matches(".yaml"));
        let pod = &yaml_docs(&text)[0];
        let c = &pod["spec"]["containers"][0];
        // Never privileged, never escalating, root filesystem read-only, the pod's deadline
        // beyond `hold`'s own.
        assert_eq!(c["securityContext"]["privileged"], false, "{name}");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{name}");
        let hold: u64 = c["args"][2].as_str().unwrap().parse().unwrap();
        assert!(pod["spec"]["activeDeadlineSeconds"].as_u64().unwrap() > hold, "{name}");
        let grace: u64 = c["args"][4].as_str().unwrap().parse().unwrap();
        assert!(
            pod["spec"]["terminationGracePeriodSeconds"].as_u64().unwrap() > grace,
            "{name}"
        );
        assert_eq!(pod["spec"]["nodeName"], "__NODE__");
        assert_eq!(pod["metadata"]["name"], "nodemedic-repair-__NODE__");
    }
}

// ------------------------------------------------------------------------------- the rest

#[test]
fn probe_execs_nodemedic_probe_api_in_the_nodes_agent() {
    let fake = FakeKubectl::new();
    // `api` may be given as in `nodemedic probe api`, or left out; both run the same.
    for given in [
        &["probe", "worker-3", "--count", "10", "--format", "json"][..],
        &["probe", "worker-3", "api", "--count", "10", "--format", "json"],
    ] {
        let r = fake.run(given, &[("FAKE_PODS", ONE_AGENT), ("FAKE_EXIT", "1")]);
        // probe's exit status comes through (1: some requests failed).
        assert_eq!(r.code, 1, "{given:?}: {}", r.stderr);
        assert_eq!(r.stdout, "fake exec\n");
        assert_eq!(
            r.calls[1],
            args(&[
                "exec",
                "-n",
                "nodemedic",
                "pod/nodemedic-x7k2p",
                "-c",
                "nodemedic",
                "--",
                "nodemedic",
                "probe",
                "api",
                "--count",
                "10",
                "--format",
                "json",
            ]),
            "{given:?}"
        );
    }
}

#[test]
fn logs_runs_kubectl_logs_of_the_agent() {
    let fake = FakeKubectl::new();
    let r = fake.run(
        &["-n", "monitoring", "logs", "worker-3", "-f", "--since=1h"],
        &[("FAKE_PODS", ONE_AGENT)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "fake logs\n");
    assert!(is_lookup(&r.calls[0], "worker-3", "monitoring"));
    assert_eq!(
        r.calls[1],
        args(&[
            "logs",
            "-n",
            "monitoring",
            "pod/nodemedic-x7k2p",
            "-c",
            "nodemedic",
            "-f",
            "--since=1h"
        ])
    );
}

#[test]
fn fails_clearly_without_an_agent_on_the_node() {
    let fake = FakeKubectl::new();
    for command in [
        &["scan", "worker-9"][..],
        &["repair", "worker-9", "orphans"],
        &["repair", "worker-9", "cpu-state", "--via", "exec"],
        &["probe", "worker-9"],
        &["logs", "worker-9"],
    ] {
        let r = fake.run(command, &[("FAKE_PODS", "")]);
        assert_eq!(r.code, 2, "{command:?}: {}", r.stderr);
        assert_eq!(r.stdout, "");
        assert!(
            r.stderr
                .contains("no nodemedic agent pod on node worker-9 in namespace nodemedic"),
            "{command:?}: {}",
            r.stderr
        );
        assert!(
            r.stderr.contains("control-plane nodes are left out by default"),
            "{}",
            r.stderr
        );
        assert_eq!(r.calls.len(), 1, "nothing is exec'd");
    }
}

#[test]
fn status_lists_agents_and_nodes_without_one() {
    let fake = FakeKubectl::new();
    let r = fake.run(
        &["--context=prod", "status"],
        &[
            ("FAKE_POD_NODES", "worker-1\nworker-2\n"),
            ("FAKE_NODES", "worker-1\nworker-2\nworker-3\n"),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("NODE POD READY"), "{}", r.stdout);
    assert!(r.stdout.contains("nodes without an agent"), "{}", r.stdout);
    assert!(r.stdout.contains("\n  worker-3\n\nadmission prober"), "{}", r.stdout);
    assert!(r.calls.iter().all(|c| c[0] == "--context=prod"), "{:?}", r.calls);
    let r = fake.run(
        &["status"],
        &[
            ("FAKE_POD_NODES", "worker-1\n"),
            ("FAKE_NODES", "worker-1\n"),
            (
                "FAKE_LEASE",
                "nodemedic-abcde/worker-1|2026-11-24T03:40:00.000000Z|5 dry-run creates from worker-1: median 0.120 s",
            ),
        ],
    );
    assert_eq!(r.code, 0);
    assert!(!r.stdout.contains("nodes without an agent"), "{}", r.stdout);
    assert!(
        r.stdout.contains(
            "admission prober (Lease nodemedic/nodemedic-prober): nodemedic-abcde/worker-1 (renewed 2026-11-24T03:40:00.000000Z)\n  5 dry-run creates from worker-1: median 0.120 s\n"
        ),
        "{}",
        r.stdout
    );
    let r = fake.run(
        &["status"],
        &[
            ("FAKE_POD_NODES", "worker-1\n"),
            ("FAKE_NODES", "worker-1\n"),
            ("FAKE_LEASE_EXIT", "1"),
        ],
    );
    assert_eq!(r.code, 0);
    assert!(
        r.stdout
            .contains("admission prober: cannot read Lease nodemedic/nodemedic-prober"),
        "{}",
        r.stdout
    );
}

#[test]
fn help_and_usage_errors() {
    let fake = FakeKubectl::new();
    let r = fake.run(&["--help"], &[]);
    assert_eq!(r.code, 0);
    for word in [
        "scan NODE",
        "repair NODE ACTION",
        "--via pod|exec",
        "probe NODE",
        "logs NODE",
        "status",
        "--context",
        "--kubeconfig",
        "NODEMEDIC_NAMESPACE",
        "Permissions",
        "pods/exec create",
    ] {
        assert!(r.stdout.contains(word), "--help does not mention {word}");
    }
    assert!(r.calls.is_empty());
    for bad in [
        &[][..],
        &["frobnicate"],
        &["scan"],
        &["repair", "worker-1"],
        &["repair", "worker-1", "defrag"],
        &["repair", "worker-1", "cpu-state", "--via", "ssh"],
        &["repair", "Worker_1", "cpu-state"],
        &["probe"],
        &["--bogus", "status"],
        &["--context"],
    ] {
        let r = fake.run(bad, &[("FAKE_DS", BASE_DS)]);
        assert_eq!(r.code, 2, "{bad:?}");
        assert!(!r.stderr.is_empty(), "{bad:?}: no message");
        assert!(r.calls.is_empty(), "{bad:?}: called kubectl: {:?}", r.calls);
    }
}

#[test]
fn passes_shellcheck() {
    let shellcheck = require("shellcheck", "apt-get install shellcheck");
    run(Command::new(shellcheck).arg(plugin()));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(plugin()).unwrap().permissions().mode();
    assert!(
        mode & 0o111 != 0,
        "daemonset/kubectl-nodemedic must be executable (kubectl finds plugins on PATH)"
    );
}
