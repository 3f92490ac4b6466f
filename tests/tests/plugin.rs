//! The kubectl plugin (`daemonset/kubectl-nodemedic`) against a fake `kubectl` that records
//! every call: which agent pod it picks, which commands it runs where, how it maps kubectl's
//! own failures, and the one-off repair pod's life (rendered from the base's template and
//! validated, created, waited for, used, and deleted on success, on failure and on Ctrl-C).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodemedic_tests::manifests::{daemonset_dir, require, run, strs, validate, yaml_docs};
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
///  - `create -f -`: saves stdin to created-N.yaml (N = 1, 2, ...), prints `pod/NAME`, or
///    fails as kubectl does with $FAKE_CREATE `forbidden` or `exists` (AlreadyExists);
///  - `get -n NS pod/...` (the pod's state): `Pending $FAKE_WAITING -` when that is set; else
///    `Running - -` for the first $FAKE_RUNNING_POLLS looks, then `Succeeded Completed 0` or
///    `Failed Error N`, N being $FAKE_PLAN_EXIT (default 1: a plan shown) for a pod without
///    `--apply` and $FAKE_APPLY_EXIT (default 0) for one with it;
///  - `logs [-f] ... pod/...`: the pod's output, `plan line 1..2` and its `Plan fingerprint:`
///    line ($FAKE_FINGERPRINT, default 0123456789abcdef), or `apply line 1..3`; with
///    $FAKE_LOG_CUT the first follow of an apply pod stops after its first line (as when the
///    kubelet stops) and the pod still runs at the next look; $FAKE_LOG_SLEEP makes a follow
///    hang that many seconds first;
///  - `delete`: exit 0;
///  - `exec`: prints "fake exec", exits $FAKE_EXIT saying "command terminated with exit code N"
///    as kubectl does, or, with $FAKE_EXEC_FAILS, fails as kubectl itself does (Forbidden);
///  - `logs` of the agent, `get nodes`, `get lease`, `get pods` (status): as before; `get nodes`
///    is Forbidden with $FAKE_NODES_FORBIDDEN;
///  - with $FAKE_API_DOWN, any call fails as kubectl does when the API server does not answer:
///    five client-go log lines (one per discovery retry), then kubectl's own summary.
struct FakeKubectl {
    dir: tempfile::TempDir,
}

const FAKE: &str = r#"#!/usr/bin/env bash
set -euo pipefail
for a in "$@"; do printf '%s\n' "$a"; done >>"$FAKE_DIR/calls.log"
echo "--END--" >>"$FAKE_DIR/calls.log"
args=" $* "
if [[ -n "${FAKE_API_DOWN:-}" ]]; then
  for _ in 1 2 3 4 5; do
    echo 'E1128 14:32:44.192268    6430 memcache.go:265] "Unhandled Error" err="couldn'"'"'t get current server API group list: Get \"https://10.0.0.1:6443/api?timeout=32s\": dial tcp 10.0.0.1:6443: connect: connection refused"' >&2
  done
  echo "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?" >&2
  exit 1
fi
n="$(cat "$FAKE_DIR/pods" 2>/dev/null || echo 0)"
current="$FAKE_DIR/created-$n.yaml"
is_apply() { grep -q -- '"--apply"' "$current"; }
looks() { local k; k="$(cat "$FAKE_DIR/looks-$n" 2>/dev/null || echo 0)"; echo $((k + 1)) >"$FAKE_DIR/looks-$n"; echo "$k"; }
pod_log() {
  if is_apply; then printf 'apply line %s\n' 1 2 3; else
    printf 'plan line %s\n' 1 2
    if [[ -n "${FAKE_PLAN_JSON:-}" ]]; then echo "$FAKE_PLAN_JSON"; else echo "Plan fingerprint: ${FAKE_FINGERPRINT-0123456789abcdef}"; fi
  fi
}
case "$args" in
  *" exec "*)
    if [[ -n "${FAKE_EXEC_FAILS:-}" ]]; then
      echo 'Error from server (Forbidden): pods "x" is forbidden: User "alice" cannot create resource "pods/exec" in API group "" in the namespace "nodemedic"' >&2
      exit 1
    fi
    echo "fake exec"
    code="${FAKE_EXIT:-0}"
    if [[ "$code" -ne 0 ]]; then echo "command terminated with exit code $code" >&2; fi
    exit "$code" ;;
  *" logs "*" pod/nodemedic-repair-"*)
    if [[ "$args" == *" -f "* ]]; then
      if [[ -n "${FAKE_LOG_SLEEP:-}" ]]; then sleep "$FAKE_LOG_SLEEP"; fi
      follows="$(cat "$FAKE_DIR/follows-$n" 2>/dev/null || echo 0)"
      echo $((follows + 1)) >"$FAKE_DIR/follows-$n"
      if [[ -n "${FAKE_LOG_CUT:-}" && "$follows" -eq 0 ]] && is_apply; then
        echo 1 >"$FAKE_DIR/cut-$n"
        # sed reads all its input: head could end the pipe early and fail the script (pipefail).
        pod_log | sed -n 1p
        exit 1
      fi
    fi
    pod_log ;;
  *" logs "*) echo "fake logs"; exit "${FAKE_EXIT:-0}" ;;
  *" create "*)
    n=$((n + 1)); echo "$n" >"$FAKE_DIR/pods"
    cat >"$FAKE_DIR/created-$n.yaml"
    name="$(awk '/^  name: / { print $2; exit }' "$FAKE_DIR/created-$n.yaml")"
    case "${FAKE_CREATE:-}" in
      forbidden) echo 'Error from server (Forbidden): pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the namespace "nodemedic"' >&2; exit 1 ;;
      exists) echo "Error from server (AlreadyExists): error when creating \"STDIN\": pods \"$name\" already exists" >&2; exit 1 ;;
    esac
    echo "pod/$name" ;;
  *" delete "*) echo "pod deleted" ;;
  *" get -n "*" pod/"*)
    if [[ -n "${FAKE_WAITING:-}" ]]; then echo "Pending $FAKE_WAITING -"; exit 0; fi
    k="$(looks)"
    if [[ -f "$FAKE_DIR/cut-$n" ]]; then rm "$FAKE_DIR/cut-$n"; echo "Running - -"; exit 0; fi
    if [[ "$k" -lt "${FAKE_RUNNING_POLLS:-1}" ]]; then echo "Running - -"; exit 0; fi
    if is_apply; then code="${FAKE_APPLY_EXIT:-0}"; else code="${FAKE_PLAN_EXIT:-1}"; fi
    if [[ "$code" -eq 0 ]]; then echo "Succeeded Completed 0"; else echo "Failed Error $code"; fi ;;
  *" get daemonset "*) printf '%s' "${FAKE_DS:-}" ;;
  *" get configmap "*)
    key="$(sed -n 's/.*index \.data "\([a-z-]*\)\.yaml".*/\1/p' <<<"$*")"
    cat "$FAKE_TEMPLATES/$key.yaml" ;;
  *" get nodes "*)
    if [[ -n "${FAKE_NODES_FORBIDDEN:-}" ]]; then
      echo 'Error from server (Forbidden): nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope' >&2
      exit 1
    fi
    printf '%s' "${FAKE_NODES:-}" ;;
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
hostpath host-numa /sys/devices/system/node\nhostpath host-kubelet /var/lib/kubelet\n";

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

    /// The pod the `n`th `create -f -` (from 1) was given.
    fn created(&self, n: usize) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join(format!("created-{n}.yaml"))).ok()
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        // A fresh state for each run: no pods created, no looks, no follows.
        for e in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            if e.file_name() != "kubectl" {
                let _ = std::fs::remove_file(e.path());
            }
        }
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
            .env("NODEMEDIC_REPAIR_POLL_SECONDS", "0.1")
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

/// The call that runs `nodemedic ARGS` in the agent `pod/nodemedic-x7k2p` of namespace
/// nodemedic, stdin not attached.
fn agent_exec(nodemedic_args: &[&str]) -> Vec<String> {
    let mut call = args(&[
        "exec",
        "-n",
        "nodemedic",
        "pod/nodemedic-x7k2p",
        "-c",
        "nodemedic",
        "--",
        "nodemedic",
    ]);
    call.extend(args(nodemedic_args));
    call
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
        "nodemedic-ccccc Running False 2026-11-24T09:00:00Z -\nnodemedic-ddddd Pending - 2026-11-24T09:30:00Z -\n";
    let r = fake.run(&["scan", "worker-3"], &[("FAKE_PODS", pods)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no Running and Ready nodemedic agent on node worker-3"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("  nodemedic-ccccc Running ready=False 2026-11-24T09:00:00Z\n"),
        "{}",
        r.stderr
    );
    // A pod without a Ready condition yet: "-", the fields stay in their columns.
    assert!(
        r.stderr
            .contains("  nodemedic-ddddd Pending ready=- 2026-11-24T09:30:00Z\n"),
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
    // A scan that could not judge every rule (4, incomplete) passes through as well.
    let r = fake.run(&["scan", "worker-3"], &[("FAKE_PODS", ONE_AGENT), ("FAKE_EXIT", "4")]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(!r.stderr.contains("kubectl failed"), "{}", r.stderr);
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
    // half-submitted too (it reads the kubelet's directory through the agent's host mount).
    let r = fake.run(
        &["repair", "worker-3", "half-submitted", "--older-than-seconds", "120"],
        &[("FAKE_PODS", ONE_AGENT)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.calls[1][r.calls[1].len() - 4..],
        args(&["repair", "half-submitted", "--older-than-seconds", "120"])[..]
    );
    // They need no pod of their own.
    for action in ["failed-pods", "half-submitted"] {
        let r = fake.run(
            &["repair", "worker-3", action, "--via", "pod"],
            &[("FAKE_PODS", ONE_AGENT)],
        );
        assert_eq!(r.code, 2);
        assert!(r.stderr.contains("runs in the agent (--via exec)"), "{}", r.stderr);
        assert!(r.calls.is_empty());
    }
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

// ----------------------------------------------------------------------- the one-off pods

/// The `n`th pod the plugin created (from 1), checked against the schemas, as JSON.
fn created_pod(fake: &FakeKubectl, n: usize) -> Value {
    let text = fake
        .created(n)
        .unwrap_or_else(|| panic!("no pod number {n} was created"));
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

fn pod_args(pod: &Value) -> Vec<String> {
    strs(&pod["spec"]["containers"][0]["args"])
}

/// The calls' verbs, after kubectl's global options, with `get` told apart by what it reads.
fn verbs(calls: &[Vec<String>]) -> Vec<String> {
    calls
        .iter()
        .map(|c| {
            let v = verb(c);
            let joined = c.join(" ");
            if v != "get" {
                v.to_string()
            } else if joined.contains(" daemonset ") {
                "get-ds".into()
            } else if joined.contains(" configmap ") {
                "get-template".into()
            } else if joined.contains(" pod/") {
                "state".into()
            } else {
                "get".into()
            }
        })
        .collect()
}

const PLAN_OUTPUT: &str = "plan line 1\nplan line 2\nPlan fingerprint: 0123456789abcdef\n";
const APPLY_OUTPUT: &str = "apply line 1\napply line 2\napply line 3\n";

#[test]
fn cpu_state_plans_in_one_pod_and_applies_in_another() {
    let fake = FakeKubectl::new();
    let r = fake.run(
        &[
            "--context",
            "prod",
            "repair",
            "worker-3",
            "cpu-state",
            "--apply",
            "--restart-kubelet",
            "--yes",
            "--guard-seconds",
            "90",
        ],
        &[("FAKE_DS", BASE_DS)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Both pods' output, in order, each line once.
    assert_eq!(r.stdout, format!("{PLAN_OUTPUT}{APPLY_OUTPUT}"));
    assert_eq!(
        verbs(&r.calls),
        [
            "get-ds",
            "get-template",
            "create",
            "state",
            "logs",
            "state",
            "logs",
            "delete",
            "get-template",
            "create",
            "state",
            "logs",
            "state",
            "logs",
            "delete"
        ],
        "{:?}",
        r.calls
    );
    assert!(r.calls.iter().all(|c| c[..2] == args(&["--context", "prod"])));
    assert!(
        r.calls.iter().all(|c| verb(c) != "exec"),
        "no kubectl exec: {:?}",
        r.calls
    );
    let joined: Vec<String> = r.calls.iter().map(|c| c.join(" ")).collect();
    assert!(
        joined[1].contains("index .data \"cpu-state-plan.yaml\""),
        "{}",
        joined[1]
    );
    assert!(
        joined[8].contains("index .data \"cpu-state-restart-kubelet.yaml\""),
        "{}",
        joined[8]
    );
    assert!(
        joined[4].ends_with("logs -f -n nodemedic pod/nodemedic-repair-worker-3 -c repair"),
        "{}",
        joined[4]
    );
    assert!(
        joined[7].ends_with("delete -n nodemedic pod/nodemedic-repair-worker-3 --ignore-not-found --wait=false"),
        "{}",
        joined[7]
    );
    assert!(
        r.stderr.contains(
            "running `nodemedic repair cpu-state --restart-kubelet --guard-seconds 90` in a one-off pod on node worker-3: \
             pod/nodemedic-repair-worker-3 (template cpu-state-plan.yaml"
        ),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("deleted pod/nodemedic-repair-worker-3").count(),
        2,
        "{}",
        r.stderr
    );

    // The plan: a dry run with the agent's rights only (everything read-only, no capability).
    let plan = created_pod(&fake, 1);
    assert_eq!(
        pod_args(&plan),
        ["repair", "cpu-state", "--restart-kubelet", "--guard-seconds", "90"]
    );
    let spec = &plan["spec"];
    assert_eq!(spec["nodeName"], "worker-3");
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["hostPID"], false);
    assert_eq!(spec["serviceAccountName"], "nodemedic");
    assert_ne!(plan["metadata"]["labels"]["app.kubernetes.io/name"], "nodemedic");
    let c = &spec["containers"][0];
    assert_eq!(c["image"], "ghcr.io/nodemedic/nodemedic:0.1.0");
    assert!(c["securityContext"]["capabilities"]["add"].is_null());
    assert!(c["securityContext"]["appArmorProfile"].is_null());
    let read_only = [
        m("/etc/nodemedic", "configMap nodemedic-config-5g7h8k", true),
        m("/host/proc", "/proc", true),
        m("/host/sys/fs/cgroup", "/sys/fs/cgroup", true),
        m("/host/sys/devices/system/cpu", "/sys/devices/system/cpu", true),
        m("/host/var/lib/kubelet", "/var/lib/kubelet", true),
    ];
    assert_eq!(mounts(&plan), read_only);
    // The apply: --apply --yes, the kubelet directory writable, what restarting the kubelet needs.
    let apply = created_pod(&fake, 2);
    assert_eq!(
        pod_args(&apply),
        [
            "repair",
            "cpu-state",
            "--apply",
            "--yes",
            "--expect-plan",
            "0123456789abcdef",
            "--restart-kubelet",
            "--guard-seconds",
            "90"
        ]
    );
    assert_eq!(apply["spec"]["hostPID"], true);
    let sc = &apply["spec"]["containers"][0]["securityContext"];
    assert_eq!(sc["appArmorProfile"]["type"], "Unconfined");
    assert_eq!(
        sc["capabilities"]["add"],
        serde_json::json!(["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"])
    );
    let mut writable = read_only.to_vec();
    writable[4].2 = false;
    assert_eq!(mounts(&apply), writable);
}

#[test]
fn the_plan_is_confirmed_before_anything_changes() {
    let fake = FakeKubectl::new();
    let base = ["repair", "worker-3", "cpu-state", "--restart-kubelet"];
    // Without --apply: the plan, its exit status (1: a plan shown), one pod.
    let r = fake.run(&base, &[("FAKE_DS", BASE_DS)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.stdout, PLAN_OUTPUT);
    assert_eq!(verbs(&r.calls).iter().filter(|v| *v == "create").count(), 1);
    // --apply without --yes and without a terminal: not confirmed, nothing applied.
    let mut with_apply = base.to_vec();
    with_apply.push("--apply");
    let r = fake.run(&with_apply, &[("FAKE_DS", BASE_DS)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("not confirmed: nothing changed (no terminal to ask; add --yes"),
        "{}",
        r.stderr
    );
    assert_eq!(verbs(&r.calls).iter().filter(|v| *v == "create").count(), 1);
    // Nothing to do (the plan exits 0): no question, no second pod.
    let r = fake.run(&with_apply, &[("FAKE_DS", BASE_DS), ("FAKE_PLAN_EXIT", "0")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(verbs(&r.calls).iter().filter(|v| *v == "create").count(), 1);
    // The plan could not run (2): its status, no apply.
    let r = fake.run(&with_apply, &[("FAKE_DS", BASE_DS), ("FAKE_PLAN_EXIT", "2")]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(verbs(&r.calls).iter().filter(|v| *v == "create").count(), 1);
    // Applied, an action failed (3): that status, both pods deleted.
    with_apply.push("--yes");
    let r = fake.run(&with_apply, &[("FAKE_DS", BASE_DS), ("FAKE_APPLY_EXIT", "3")]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(verbs(&r.calls).iter().filter(|v| *v == "delete").count(), 2);
    // A JSON plan (--format json) carries it as a field.
    let mut json = with_apply.clone();
    json.extend(["--format", "json"]);
    let r = fake.run(
        &json,
        &[
            ("FAKE_DS", BASE_DS),
            ("FAKE_FINGERPRINT", "x"),
            ("FAKE_PLAN_JSON", "  \"plan_fingerprint\": \"fedcba9876543210\","),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let apply = created_pod(&fake, 2);
    let args = pod_args(&apply);
    let at = args.iter().position(|a| a == "--expect-plan").unwrap();
    assert_eq!(args[at + 1], "fedcba9876543210");
    // A plan without a fingerprint (an older image): nothing applied.
    let r = fake.run(&with_apply, &[("FAKE_DS", BASE_DS), ("FAKE_FINGERPRINT", "")]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("the plan printed no fingerprint"), "{}", r.stderr);
    assert_eq!(verbs(&r.calls).iter().filter(|v| *v == "create").count(), 1);
    // The checkpoint cannot be rewritten from a pod with the kubelet stopped by hand.
    let r = fake.run(
        &["repair", "worker-3", "cpu-state", "--apply", "--yes"],
        &[("FAKE_DS", BASE_DS)],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("add --restart-kubelet"), "{}", r.stderr);
    assert!(r.calls.is_empty(), "{:?}", r.calls);
}

#[test]
fn the_apply_is_followed_through_a_kubelet_restart() {
    let fake = FakeKubectl::new();
    // The log stream of the apply pod breaks after its first line (the kubelet stopped) and
    // the pod still runs: the plugin follows again and prints each line once.
    let r = fake.run(
        &[
            "repair",
            "worker-3",
            "cpu-state",
            "--apply",
            "--restart-kubelet",
            "--yes",
        ],
        &[("FAKE_DS", BASE_DS), ("FAKE_LOG_CUT", "1")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, format!("{PLAN_OUTPUT}{APPLY_OUTPUT}"));
    assert!(
        r.stderr.contains(
            "the log stream ended while pod/nodemedic-repair-worker-3 runs (the kubelet restarting?); following again"
        ),
        "{}",
        r.stderr
    );
    let follows = r
        .calls
        .iter()
        .filter(|c| c.contains(&"logs".to_string()) && c.contains(&"-f".to_string()))
        .count();
    assert_eq!(follows, 3, "the plan once, the apply twice: {:?}", r.calls);
}

/// Every hostPath the agent mounts with the base and all its components (the repair overlay
/// aside): none of them is a Spark scratch root, whatever components are on.
#[test]
fn the_agents_own_mounts_are_never_local_dir_roots() {
    let components = [
        "apiserver-metrics",
        "control-plane",
        "etc-kubernetes",
        "fencing",
        "kubelet-units",
        "kubelet-units/sysconfig",
        "kubelet-units/eks",
        "node-resource-topology",
        "pod-repairs",
    ];
    let rendered = nodemedic_tests::manifests::render_with_components(&components);
    let docs = yaml_docs(&rendered);
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("the agent's DaemonSet");
    let paths: Vec<&str> = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    assert!(
        paths.contains(&"/etc/systemd/system") && paths.contains(&"/var/lib/nodemedic"),
        "{paths:?}"
    );
    let ds_lines: String = paths
        .iter()
        .enumerate()
        .map(|(i, p)| format!("hostpath volume-{i} {p}\n"))
        .collect();
    let fake = FakeKubectl::new();
    let r = fake.run(
        &["repair", "worker-3", "local-dirs", "--local-dir-root", "/data/spark"],
        &[("FAKE_DS", &format!("{BASE_DS}{ds_lines}"))],
    );
    assert_eq!(r.code, 1, "a plan only: {}", r.stderr);
    let plan = created_pod(&fake, 1);
    let roots: Vec<String> = pod_args(&plan)
        .windows(2)
        .filter(|w| w[0] == "--local-dir-root")
        .map(|w| w[1].clone())
        .collect();
    assert_eq!(roots, ["/data/spark"], "only the root the operator named");
    // And the plan's pod mounts none of them beyond the repair pod's own read-only set.
    let template_paths = ["/proc", "/sys/fs/cgroup", "/sys/devices/system/cpu", "/var/lib/kubelet"];
    for (_, source, _) in mounts(&plan) {
        assert!(
            source == "/data/spark" || source.starts_with("configMap ") || template_paths.contains(&source.as_str()),
            "the plan pod mounts {source}"
        );
    }
}

#[test]
fn local_dirs_pods_mount_the_roots() {
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
            "--yes",
        ],
        &[("FAKE_DS", &ds)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let base = [
        m("/etc/nodemedic", "configMap nodemedic-config-5g7h8k", true),
        m("/host/proc", "/proc", true),
        m("/host/sys/fs/cgroup", "/sys/fs/cgroup", true),
        m("/host/sys/devices/system/cpu", "/sys/devices/system/cpu", true),
        m("/host/var/lib/kubelet", "/var/lib/kubelet", true),
    ];
    // The plan reads them ...
    let plan = created_pod(&fake, 1);
    let mut want = base.to_vec();
    want.push(m("/host/data/spark", "/data/spark", true));
    want.push(m("/host/mnt/spark-local", "/mnt/spark-local", true));
    assert_eq!(mounts(&plan), want);
    assert_eq!(
        pod_args(&plan),
        ["repair", "local-dirs", "--local-dir-root", "/data/spark/"]
    );
    // ... with the agent's rights only ...
    let sc = &plan["spec"]["containers"][0]["securityContext"];
    assert!(sc["capabilities"]["add"].is_null(), "{sc}");
    assert!(sc["appArmorProfile"].is_null(), "{sc}");
    // ... the apply writes them, with the capabilities removing Spark's files needs.
    let apply = created_pod(&fake, 2);
    want[5].2 = false;
    want[6].2 = false;
    assert_eq!(mounts(&apply), want);
    let sc = &apply["spec"]["containers"][0]["securityContext"];
    assert_eq!(
        sc["capabilities"]["add"],
        serde_json::json!(["DAC_OVERRIDE", "SYS_PTRACE"])
    );
    assert_eq!(apply["spec"]["hostPID"], false);
    // A root that could break out of its line in the YAML is refused before anything is created.
    for bad in ["/data\n    hostPID: true", "/data/../etc", "relative"] {
        let r = fake.run(
            &["repair", "worker-3", "local-dirs", "--local-dir-root", bad],
            &[("FAKE_DS", BASE_DS)],
        );
        assert_eq!(r.code, 2, "{bad:?}");
        assert!(
            r.stderr.contains("invalid local-dir root") || r.stderr.contains("control character"),
            "{bad:?}: {}",
            r.stderr
        );
        assert!(r.calls.iter().all(|c| verb(c) == "get"), "{:?}", r.calls);
    }
    // Arguments with quotes reach nodemedic as they were given.
    let r = fake.run(
        &["repair", "worker-3", "local-dirs", "--older-than-seconds", "3\"6'0"],
        &[("FAKE_DS", BASE_DS)],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        pod_args(&created_pod(&fake, 1)),
        ["repair", "local-dirs", "--older-than-seconds", "3\"6'0"]
    );
}

#[test]
fn the_repair_pod_is_deleted_whatever_happens() {
    let fake = FakeKubectl::new();
    // It cannot start (the image cannot be pulled): 2 with the reason, and deleted.
    let r = fake.run(
        &["repair", "worker-3", "cpu-state"],
        &[("FAKE_DS", BASE_DS), ("FAKE_WAITING", "ErrImagePull")],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("pod/nodemedic-repair-worker-3 cannot start: ErrImagePull"),
        "{}",
        r.stderr
    );
    assert_eq!(verbs(&r.calls), ["get-ds", "get-template", "create", "state", "delete"]);
    // It does not start in time: 2, deleted.
    let r = fake.run(
        &["repair", "worker-3", "cpu-state"],
        &[
            ("FAKE_DS", BASE_DS),
            ("FAKE_WAITING", "ContainerCreating"),
            ("NODEMEDIC_REPAIR_POD_TIMEOUT", "1"),
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("did not start within 1s (Pending, ContainerCreating)"),
        "{}",
        r.stderr
    );
    assert_eq!(verbs(&r.calls).last().map(String::as_str), Some("delete"));
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
    assert!(r.calls.iter().all(|c| verb(c) != "delete"), "{:?}", r.calls);
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
    // Where the plugin gathers the pod's output: empty again afterwards.
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = fake.command(
        &["repair", "worker-3", "cpu-state", "--restart-kubelet"],
        &[
            ("FAKE_DS", BASE_DS),
            ("FAKE_LOG_SLEEP", "30"),
            ("TMPDIR", tmp.path().to_str().unwrap()),
        ],
    );
    // Its own process group, as a terminal's foreground job: Ctrl-C signals the whole group
    // (the plugin, kubectl, tail, tee).
    cmd.process_group(0);
    let child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(fake.log())
        .unwrap_or_default()
        .contains("\nlogs\n-f\n")
    {
        assert!(
            Instant::now() < deadline,
            "the pod was never followed: {:?}",
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
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
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
        [
            "cpu-state-plan.yaml",
            "cpu-state-restart-kubelet.yaml",
            "local-dirs-plan.yaml",
            "local-dirs.yaml"
        ]
    );
    for name in &names {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        validate(&text, name.trim_end_matches(".yaml"));
        let pod = &yaml_docs(&text)[0];
        let c = &pod["spec"]["containers"][0];
        // Never privileged, never escalating, root file system read-only, a deadline, the
        // nodemedic command line left to the plugin.
        assert_eq!(c["securityContext"]["privileged"], false, "{name}");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{name}");
        assert!(pod["spec"]["activeDeadlineSeconds"].as_u64().unwrap() <= 1800, "{name}");
        assert_eq!(pod["spec"]["restartPolicy"], "Never", "{name}");
        assert_eq!(c["args"], serde_json::json!(["__ARGS__"]), "{name}");
        assert_eq!(c["name"], "repair", "{name}");
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
            agent_exec(&["probe", "api", "--count", "10", "--format", "json"]),
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
fn status_of_a_node_shows_its_agent_and_its_cpu_map() {
    let fake = FakeKubectl::new();
    let r = fake.run(&["status", "worker-1"], &[("FAKE_PODS", ONE_AGENT)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "node worker-1: agent pod/nodemedic-x7k2p\nfake exec\n");
    assert!(is_lookup(&r.calls[0], "worker-1", "nodemedic"), "{:?}", r.calls);
    assert_eq!(r.calls[1], agent_exec(&["scan", "--cpu-map"]));
    // The agent could not read the CPUs: its exit status (4), not a plugin failure.
    let r = fake.run(&["status", "worker-1"], &[("FAKE_PODS", ONE_AGENT), ("FAKE_EXIT", "4")]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    let r = fake.run(&["status", "worker-1", "extra"], &[("FAKE_PODS", ONE_AGENT)]);
    assert_eq!(r.code, 2);
    assert!(r.calls.is_empty());
}

#[test]
fn status_says_in_one_line_what_failed_and_never_calls_unknown_nothing() {
    let fake = FakeKubectl::new();
    // The API server does not answer: kubectl's retries are not shown, one line says why.
    let r = fake.run(&["status"], &[("FAKE_API_DOWN", "1")]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        "kubectl-nodemedic: could not list the agent pods in namespace nodemedic: The connection to the server \
         10.0.0.1:6443 was refused - did you specify the right host or port?\n"
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    // The nodes cannot be listed (RBAC): which lack an agent is unknown, not "none".
    let r = fake.run(
        &["status"],
        &[
            ("FAKE_POD_NODES", "worker-1\n"),
            ("FAKE_NODES", "worker-1\nworker-2\n"),
            ("FAKE_NODES_FORBIDDEN", "1"),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "nodes without an agent: unknown, the nodes could not be listed: Error from server (Forbidden): nodes is \
             forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"\" at the cluster scope\n"
        ),
        "{}",
        r.stdout
    );
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    // An agent lookup against an API that does not answer: the same one line, kubectl's own.
    let r = fake.run(&["scan", "worker-1"], &[("FAKE_API_DOWN", "1")]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.ends_with("could not list the agent pods in namespace nodemedic: The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?\n"), "{}", r.stderr);
}

#[test]
fn every_command_has_its_help_and_never_takes_it_for_a_name() {
    let fake = FakeKubectl::new();
    for (args, usage, entry) in [
        (
            &["scan", "--help"][..],
            "kubectl nodemedic [OPTIONS] scan NODE [SCAN ARGS...]",
            "  scan NODE [ARGS]",
        ),
        (
            &["scan", "-h"],
            "kubectl nodemedic [OPTIONS] scan NODE [SCAN ARGS...]",
            "  scan NODE [ARGS]",
        ),
        (
            &["status", "--help"],
            "kubectl nodemedic [OPTIONS] status [NODE]",
            "  status [NODE]",
        ),
        (
            &["repair", "--help"],
            "repair NODE ACTION [--via pod|exec]",
            "  repair NODE ACTION",
        ),
        (
            &["repair", "worker-1", "--help"],
            "repair NODE ACTION [--via pod|exec]",
            "  repair NODE ACTION",
        ),
        (
            &["probe", "--help"],
            "probe NODE [api] [PROBE ARGS...]",
            "  probe NODE [ARGS]",
        ),
        (
            &["logs", "--help"],
            "logs NODE [KUBECTL LOGS ARGS...]",
            "  logs NODE [ARGS]",
        ),
        (
            &["help", "logs"],
            "logs NODE [KUBECTL LOGS ARGS...]",
            "  logs NODE [ARGS]",
        ),
        (
            &["--context=prod", "scan", "--help"],
            "scan NODE [SCAN ARGS...]",
            "  scan NODE [ARGS]",
        ),
    ] {
        let r = fake.run(args, &[]);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        assert!(r.calls.is_empty(), "{args:?} called kubectl: {:?}", r.calls);
        assert!(r.stdout.starts_with("Usage:\n"), "{args:?}: {}", r.stdout);
        assert!(r.stdout.contains(usage), "{args:?}: {}", r.stdout);
        assert!(r.stdout.contains(entry), "{args:?}: {}", r.stdout);
        assert!(
            r.stdout.contains("--kubeconfig FILE"),
            "{args:?}: the options are part of it"
        );
        // Only that command: no other command's entry.
        let others = [
            "  scan NODE [ARGS]",
            "  repair NODE ACTION",
            "  probe NODE [ARGS]",
            "  logs NODE [ARGS]",
            "  status [NODE]",
        ];
        for other in others.iter().filter(|o| **o != entry) {
            assert!(!r.stdout.contains(other), "{args:?} shows {other:?}: {}", r.stdout);
        }
    }
    // An option where the node goes is a usage error, never a node name looked up.
    for args in [
        &["scan", "-x"][..],
        &["scan", "--format", "json"],
        &["logs", "-f"],
        &["probe", "--count"],
        &["repair", "-n", "cpu-state"],
    ] {
        let r = fake.run(args, &[]);
        assert_eq!(r.code, 2, "{args:?}");
        assert!(
            r.stderr.contains("usage: kubectl nodemedic [OPTIONS]"),
            "{args:?}: {}",
            r.stderr
        );
        assert!(r.stderr.contains("--help"), "{args:?}: {}", r.stderr);
        assert!(r.calls.is_empty(), "{args:?} called kubectl: {:?}", r.calls);
    }
    let r = fake.run(&["help", "frobnicate"], &[]);
    assert_eq!(r.code, 2);
    assert!(r.calls.is_empty());
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
        "pods/log get",
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
