#!/usr/bin/env bash
# Writes agent/link/hot-functions.txt, the functions the linker lays out first and together
# (agent/build.rs; docs/performance.md, "The code a process touches"), from what the shipped
# build really runs:
#
#  1. builds the `dist` binary with LLD's map of it (NODEMEDIC_LINK_MAP);
#  2. runs that binary under callgrind (--dump-instr=yes) through the benches: scan-bench
#     (scans of 10 to 250 pods from files, a GPU node's manager files, scans with their pods
#     from the API double) and compare-bench as prober and as follower (the daemon's start,
#     its first judgements, Events and conditions, a minute of steady state and scrapes);
#  3. maps every instruction the profiles counted to the function whose section holds it, and
#     writes those functions so that the code of each stage (a scan of a pods file, a scan of
#     the API, the daemon) is one stretch of the binary (target/release/hot-functions);
#  4. builds `dist` again, laid out by the new list, and checks the list against its map.
#
# Run it when Cargo.lock, the Rust toolchain or the dist profile change, or the agent's
# steady-state code moves: their function names change with them, and a name the build no
# longer has is only left unplaced (step 4 says how much of the list still holds). Not part
# of CI: about 15 minutes on 2 vCPUs, most of it the two dist links. Needs valgrind and node_exporter
# (apt-get install -y valgrind prometheus-node-exporter).
set -euo pipefail

cd "$(dirname "$0")/.."
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
work="$(mktemp -d)"
# Kept when a step fails: the profiles and the benches' output say why.
trap 'if [[ $? == 0 ]]; then rm -rf "$work"; else echo "hot-functions.sh: failed; its files are in $work" >&2; fi' EXIT
# Where benches-run.sh has it written too: the same build, no second link between them.
map="$target_dir/dist/nodemedic.map"
bin="$target_dir/dist/nodemedic"
list="agent/link/hot-functions.txt"

NODEMEDIC_LINK_MAP="$map" cargo build --profile dist -p nodemedic
cargo build --release -p nodemedic-tests --bin scan-bench --bin compare-bench --bin hot-functions

# The benches run this in place of nodemedic, each stage's profiles in a directory of its own
# ($PROFILES). The daemon is stopped with SIGTERM and writes its profile on the way out; what
# callgrind has counted is also written every 20 M basic blocks, in case it is killed.
cat > "$work/nodemedic" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --dump-instr=yes --dump-every-bb=20000000 \\
    --callgrind-out-file="\$PROFILES/callgrind.%p" --log-file="\$PROFILES/valgrind.%p.log" "$bin" "\$@"
EOF
chmod +x "$work/nodemedic"
export NODEMEDIC_BIN="$work/nodemedic"

# In the order the list lays them out: scans of a pods file, scans of the API, the daemon (a
# profile's stage is what its command line ran; compare-bench's own scans read pods files).
mkdir "$work/1-scans" "$work/2-follower" "$work/3-prober"
PROFILES="$work/1-scans" "$target_dir/release/scan-bench" 1 > "$work/1-scans/scan-bench.out"
PROFILES="$work/2-follower" COMPARE_BENCH_ROLE=follower COMPARE_BENCH_WARMUP_SECONDS=30 \
    "$target_dir/release/compare-bench" 1 1 > "$work/2-follower/compare-bench.out"
PROFILES="$work/3-prober" COMPARE_BENCH_ROLE=prober COMPARE_BENCH_WARMUP_SECONDS=30 \
    "$target_dir/release/compare-bench" 1 1 > "$work/3-prober/compare-bench.out"

# Each stage's processes in the order they ran (by pid, then callgrind's part number).
profiles=()
for stage in 1-scans 2-follower 3-prober; do
    while IFS= read -r f; do profiles+=("$f"); done < <(printf "%s\n" "$work/$stage"/callgrind.* | sort -V)
done
"$target_dir/release/hot-functions" write "$map" "$bin" "$list" "${profiles[@]}"

# The build laid out by the new list, and how much of the list it finds.
NODEMEDIC_LINK_MAP="$map" cargo build --profile dist -p nodemedic
"$target_dir/release/hot-functions" check "$map" "$list"
