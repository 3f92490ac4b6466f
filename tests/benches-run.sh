#!/usr/bin/env bash
# Runs every nodemedic benchmark and keeps the output: the shipped build of nodemedic (profile
# `dist`, as in the image) with release builds of the bench programs, the criterion benches,
# scan-bench, floor-bench (the scan against the floor of its own file reads), daemon-bench,
# fleet-bench (30 agents at default settings), compare-bench (nodemedic against node_exporter),
# detection-bench (how fast the daemon reports a change) and storage-bench (the walk of Spark's
# local dirs at 50 executors x 10,000 shuffle files). Not part of CI: it takes about 40 minutes with the defaults, and its numbers only mean something on a quiet
# machine. The numbers in docs/performance.md come from it.
#
# Usage (from anywhere in the repository):
#
#   apt-get install -y prometheus-node-exporter    # once; compare-bench runs the binary itself
#   tests/benches-run.sh [RESULTS_FILE]            # default: bench-results-<UTC time>.md
#
# Environment:
#   RUNS=21             scan runs per size (scan-bench, compare-bench), scan and floor runs (floor-bench)
#   DAEMON_MINUTES=12   daemon-bench's measured window (plus one minute of warm-up)
#   COMPARE_MINUTES=10  compare-bench's measured window (plus one minute of warm-up): the
#                       cost goals of issue 16 are over 10 minutes
#   FLEET_AGENTS=30     fleet-bench's agents
#   FLEET_MINUTES=5     fleet-bench's measured window (plus a start over one read period and
#                       one lease duration of warm-up)
#   DETECTION_ROUNDS=20 detection-bench's rounds of each change it makes (at most 31)
#   NODE_EXPORTER=...   node_exporter binary (default /usr/bin/prometheus-node-exporter)
#   SKIP_CRITERION=1    skip the criterion benches
#
# The criterion benches are selected by name (`--bench checkpoint`, `--bench scan`): a plain
# `cargo bench -p <crate> -- --noplot` would also run the crates' unit-test harnesses in bench
# mode, which reject criterion's `--noplot`.
set -euo pipefail

cd "$(dirname "$0")/.."
results="${1:-bench-results-$(date -u +%Y%m%dT%H%M%SZ).md}"
runs="${RUNS:-21}"
daemon_minutes="${DAEMON_MINUTES:-12}"
compare_minutes="${COMPARE_MINUTES:-10}"
fleet_agents="${FLEET_AGENTS:-30}"
fleet_minutes="${FLEET_MINUTES:-5}"
detection_rounds="${DETECTION_ROUNDS:-20}"
node_exporter="${NODE_EXPORTER:-/usr/bin/prometheus-node-exporter}"

if [[ ! -x "$node_exporter" ]]; then
    echo "benches-run: $node_exporter not found: apt-get install -y prometheus-node-exporter (or set NODE_EXPORTER)" >&2
    exit 2
fi
export NODE_EXPORTER="$node_exporter"

target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
bin="$target_dir/release"

# Everything below goes to the terminal and to the results file.
exec > >(tee "$results") 2>&1

step() { printf '\n## %s\n\n' "$*"; }

step "Machine"
echo "date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
echo "cpus: $(nproc), memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
# shellcheck disable=SC1091
echo "os: $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
echo "cgroup: $(stat -fc %T /sys/fs/cgroup)"
echo "rustc: $(rustc --version)"
echo "node_exporter: $("$node_exporter" --version 2>&1 | head -n1)"
echo "load average at start: $(cat /proc/loadavg)"

step "Build"
# With its link map, which says how much of the function layout (agent/link/hot-functions.txt)
# this build still finds; tests/hot-functions.sh writes the map to the same place.
NODEMEDIC_LINK_MAP="$target_dir/dist/nodemedic.map" cargo build --profile dist -p nodemedic
cargo build --release -p nodemedic-tests
"$bin/hot-functions" check "$target_dir/dist/nodemedic.map" agent/link/hot-functions.txt
# The bench programs run the nodemedic named here, not the release one beside them.
export NODEMEDIC_BIN="$target_dir/dist/nodemedic"
echo "nodemedic: $NODEMEDIC_BIN"

if [[ -z "${SKIP_CRITERION:-}" ]]; then
    step "Criterion: nodemedic-rules"
    cargo bench -p nodemedic-rules --bench checkpoint -- --noplot
    step "Criterion: nodemedic-tests"
    cargo bench -p nodemedic-tests --bench scan -- --noplot
fi

step "scan-bench $runs"
"$bin/scan-bench" "$runs"

step "floor-bench $runs (250 pods)"
"$bin/floor-bench" "$runs" 250
step "floor-bench $runs (1,000 pods)"
"$bin/floor-bench" "$runs" 1000

step "daemon-bench $daemon_minutes 250"
"$bin/daemon-bench" "$daemon_minutes" 250

step "fleet-bench $fleet_agents $fleet_minutes"
"$bin/fleet-bench" "$fleet_agents" "$fleet_minutes"

step "compare-bench $compare_minutes $runs"
"$bin/compare-bench" "$compare_minutes" "$runs"

step "detection-bench $detection_rounds"
"$bin/detection-bench" "$detection_rounds"

step "storage-bench 50 10000 $runs"
"$bin/storage-bench" 50 10000 "$runs"

step "Done"
echo "load average at end: $(cat /proc/loadavg)"
echo "results: $results"
