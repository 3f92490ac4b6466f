#!/usr/bin/env bash
# The image, built and run as the DaemonSet runs it (tests/run.sh calls this; it can run alone).
#
#  1. A container engine: the one DOCKER_HOST points at when it answers, else Debian's docker.io
#     (dockerd 20.10, installed when missing), started here on a socket of its own, without
#     iptables or a bridge (no network is needed: every container runs with --network none),
#     and stopped at the end.
#  2. A local stand-in for the runtime base, gcr.io/distroless/cc-debian12:nonroot, which these
#     machines cannot pull: a root file system made from this Debian 12 machine's own packages
#     carrying what that image carries (glibc, libgcc, libstdc++, libgomp, libssl, the CA
#     certificates, tzdata, /etc/passwd with root, nobody and nonroot 65532, /tmp), imported
#     with `docker import`. The build base (rust:1.95.0-bookworm) is not needed: the image takes
#     the binary built already (`--build-arg BINARY_FROM=prebuilt`), stripped as the dist
#     build ships it, so CI compiles once.
#  3. daemonset/Dockerfile built with those, through BuildKit (DOCKER_BUILDKIT=1).
#  4. The image run as daemonset/base/daemonset.yaml runs the container: user 0, every
#     capability dropped, no privilege escalation, a read-only root file system, no network;
#     `scan` of the bundled example (mounted read-only) must print exactly what the host binary
#     prints, text and JSON, and exit with the same status (1: findings). `--version` must
#     print the binary's version, and the image's default user must be 65532.
#  5. The image's size, printed (docs/performance.md records it).
#
# Needs root (dockerd) and target/debug/nodemedic (README's command 1 builds it; built here
# when missing), or NODEMEDIC_IMAGE_BINARY.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

have() { command -v "$1" >/dev/null 2>&1; }
fail() { echo "tests/image.sh: $*" >&2; exit 1; }

work="$(mktemp -d /tmp/nodemedic-image.XXXXXX)"
engine_pid=""
cleanup() {
    if [ -n "$engine_pid" ]; then
        kill "$engine_pid" 2>/dev/null || true
        # dockerd stops its containerd and containers within a few seconds of SIGTERM.
        for _ in $(seq 1 50); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.2; done
        umount "$work/data/overlay2" 2>/dev/null || true
    fi
    rm -rf "$work" 2>/dev/null || true
}
trap cleanup EXIT

# Debian's client (20.10) speaks to Debian's engine; another docker first on PATH may lack
# BuildKit's builder.
docker=/usr/bin/docker
if [ -z "${DOCKER_HOST:-}" ] || ! "$docker" info >/dev/null 2>&1; then
    if ! [ -x /usr/sbin/dockerd ] || ! [ -x "$docker" ]; then
        echo "installing Debian's docker.io"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
    fi
    export DOCKER_HOST="unix://$work/docker.sock"
    /usr/sbin/dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver=overlay2 \
        --data-root "$work/data" --exec-root "$work/exec" --pidfile "$work/dockerd.pid" \
        -H "$DOCKER_HOST" >"$work/dockerd.log" 2>&1 &
    engine_pid=$!
    for _ in $(seq 1 100); do "$docker" info >/dev/null 2>&1 && break; sleep 0.1; done
    "$docker" info >/dev/null 2>&1 || { cat "$work/dockerd.log" >&2; fail "dockerd did not start"; }
fi
export DOCKER_BUILDKIT=1
echo "engine: $("$docker" version --format '{{.Server.Version}}')"

# ---------------------------------------------------------------- the runtime base stand-in
root="$work/rootfs"
mkdir -p "$root/etc" "$root/tmp" "$root/home/nonroot" "$root/etc/ssl/certs"
chmod 1777 "$root/tmp"
# Debian 12 is merged-/usr: /lib, /lib64, /bin and /sbin are links into /usr, as in the image.
for link in lib lib64 bin sbin; do
    mkdir -p "$root/usr/$link"
    ln -s "usr/$link" "$root/$link"
done
for pkg in libc6 libgcc-s1 libstdc++6 libgomp1 libssl3 tzdata; do
    dpkg -L "$pkg" | while read -r path; do
        case "$path" in /usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*) continue ;; esac
        if [ -f "$path" ] || [ -L "$path" ]; then
            mkdir -p "$root$(dirname "$path")"
            cp -a "$path" "$root$path"
        fi
    done
done
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
cp /etc/os-release "$root/etc/os-release"
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
chown 65532:65532 "$root/home/nonroot"
runtime=nodemedic-ci/cc-debian12:nonroot
tar -C "$root" -c . | "$docker" import --change 'USER 65532:65532' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$runtime" >/dev/null

# ---------------------------------------------------------------- the image
# The binary: target/debug/nodemedic (README's command 1 and the test build make it; built
# here when missing): what is checked is the Dockerfile and the container's confinement, and
# the scan's output is the same from any build. NODEMEDIC_IMAGE_BINARY names another, the dist
# build to measure the image as it ships.
binary="${NODEMEDIC_IMAGE_BINARY:-target/debug/nodemedic}"
if [ -z "${NODEMEDIC_IMAGE_BINARY:-}" ] && ! [ -x "$binary" ]; then cargo build -p nodemedic; fi
[ -x "$binary" ] || fail "$binary: no such binary"
# The context the Dockerfile's `prebuilt` stage reads: ARCH/nodemedic.
case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) fail "no image architecture for $(uname -m)" ;;
esac
ctx="$work/context"
mkdir -p "$ctx/$arch"
strip -o "$ctx/$arch/nodemedic" "$binary"
image=nodemedic-ci/nodemedic:test
revision="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
"$docker" build --quiet -f daemonset/Dockerfile --build-arg BINARY_FROM=prebuilt \
    --build-arg RUNTIME_IMAGE="$runtime" --build-arg REVISION="$revision" -t "$image" "$ctx" >/dev/null
user="$("$docker" image inspect --format '{{.Config.User}}' "$image")"
[ "$user" = "65532:65532" ] || fail "the image's user is '$user', not 65532:65532"

# ---------------------------------------------------------------- run it as the DaemonSet does
example="$PWD/examples/worker-stale"
as_daemonset=(run --rm --network none --user 0:0 --cap-drop ALL --security-opt no-new-privileges
    --read-only -v "$example:/example:ro" "$image")
version_host="$("$binary" --version)"
version_image="$("$docker" "${as_daemonset[@]}" --version)"
[ "$version_image" = "$version_host" ] || fail "--version: image '$version_image', host '$version_host'"
for format in text json; do
    set +e
    "$binary" scan --host-root "$example" --pods "$example/pods.json" --format "$format" \
        >"$work/host.$format" 2>"$work/host.$format.err"
    rc_host=$?
    "$docker" "${as_daemonset[@]}" scan --host-root /example --pods /example/pods.json --format "$format" \
        >"$work/image.$format" 2>"$work/image.$format.err"
    rc_image=$?
    set -e
    [ "$rc_host" -eq 1 ] || { cat "$work/host.$format.err" >&2; fail "host scan ($format) exited $rc_host, not 1"; }
    [ "$rc_image" -eq "$rc_host" ] || { cat "$work/image.$format.err" >&2; fail "image scan ($format) exited $rc_image, host $rc_host"; }
    # The two runs differ only in the moment they ran: the report's time, and the ages of the
    # files it read (now minus their mtime) are normalised before comparing.
    normalise() {
        sed -E -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z/<time>/g' \
            -e 's/(age_seconds"?: *)[0-9.]+/\1<age>/g' "$1"
    }
    if ! diff <(normalise "$work/host.$format") <(normalise "$work/image.$format") >"$work/diff"; then
        cat "$work/diff" >&2
        fail "the image's $format scan differs from the host binary's"
    fi
    [ -s "$work/image.$format" ] || fail "the image's $format scan printed nothing"
done
size="$("$docker" image inspect --format '{{.Size}}' "$image")"
echo "image ok: $image, $((size / 1000)) kB (binary $(($(stat -c %s "$ctx/$arch/nodemedic") / 1000)) kB), runs as the DaemonSet runs it, scans the example as the host binary does"
