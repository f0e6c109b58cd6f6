#!/usr/bin/env bash
# The benchmark (as root). On one simulated node (this part about 11 minutes at the defaults):
#  1. swap -> signal latency (p50, p99, max, misses) and memory of reloadlet (--debounce 0s;
#     the glibc build and the image's static binary) and of two references, the floor
#     (examples/floor.rs: one inotify fd, kill(2) on ..data) and an inotifywait + kill
#     sidecar per volume, at 100 and at 1,000 volumes, with the ratios
#     against the bars of issues 14 and 30; reloadlet's wakeups while idle; the swaps are
#     made by a separate process (examples/swapper.rs), as the kubelet's are;
#  2. an eviction burst of 100 pods.
# Sizes (environment): BENCH_SMALL (100) and BENCH_LARGE (1000) volumes, BENCH_VOLS_PER_POD (4),
# BENCH_SWAPS per approach and size (2000), BENCH_BLOCK swaps an approach takes before the next
# approach's (200; every approach runs throughout, on its own copy of the volumes, and the
# blocks alternate round after round), BENCH_RATE swaps/s (50), BENCH_DEADLINE_MS for a
# miss (1000), BENCH_IDLE_SECS (10; 0 skips), BENCH_BURSTS (8; 0 skips) bursts of every volume
# swapped at once against each agent, BENCH_HELD_BURSTS (4; 0 skips) more written while it is
# stopped, BENCH_SIDECAR_MAX (200) sidecars at most,
# BENCH_SMAPS_DIR (unset) receives /proc/PID/smaps of each reloadlet run and after the bursts, BENCH_STATIC_BIN a
# static binary to measure instead of building one.
# The sidecar fleet may need fs.inotify.max_user_instances raised above its default of 128:
# the benchmark raises it for the fleet's lifetime only and restores it (so does this script
# on exit, should the benchmark be killed).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "hack/bench.sh: run as root" >&2; exit 2; }
if ! command -v inotifywait >/dev/null; then
    echo "hack/bench.sh: installing inotify-tools (the sidecar reference)" >&2
    if command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q inotify-tools >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q inotify-tools >/dev/null; } ||
            echo "hack/bench.sh: could not install inotify-tools; the sidecar is skipped" >&2
    else
        echo "hack/bench.sh: no apt-get; install inotify-tools, or the sidecar is skipped" >&2
    fi
fi
instances=/proc/sys/fs/inotify/max_user_instances
original=$(cat "$instances")
trap 'echo "$original" > "$instances"' EXIT
cargo build --release --quiet --examples
# The image's static (musl) binary beside the glibc build, where musl-gcc is installed
# (Debian: musl-tools; rustup target x86_64-unknown-linux-musl): issue 30's RSS bar for it.
if [[ -z "${BENCH_STATIC_BIN:-}" ]] && command -v musl-gcc >/dev/null &&
    rustup target list --installed 2>/dev/null | grep -qx "$(uname -m)-unknown-linux-musl"; then
    hack/build-release.sh --arch "$(uname -m)" --out target/bench-static >/dev/null &&
        export BENCH_STATIC_BIN="$PWD/target/bench-static/reloadlet" ||
        echo "hack/bench.sh: the static build failed; the static binary is skipped" >&2
fi
[[ -n "${BENCH_STATIC_BIN:-}" ]] ||
    echo "hack/bench.sh: no static binary (musl-gcc or the musl target missing); skipped" >&2
cargo bench --bench node
# 3. fast projection (reloadlet controller): ConfigMap update -> SIGHUP with and without the
#    controller under the kubelet's real sync timing (about 2.5 minutes; BENCH_CTL_SLOW=0
#    skips the ~90 s wait for the kubelet's periodic sync), and the controller at cluster
#    scale, issue 30's size: 100,000 pods over 1,000 nodes, 20,000 ConfigMaps, 10,000
#    Secrets, 5,000 env consumers, about 1.5 minutes on the 2-core machine (BENCH_CTL_PODS
#    etc. for other sizes; benches/controller/main.rs lists the knobs).
cargo bench --bench controller
# 4. The controller at cluster scale again, as the image runs it: the static (musl) binary,
#    whose allocator is not glibc's (about 1.5 minutes).
if [[ -n "${BENCH_STATIC_BIN:-}" ]]; then
    echo "== the controller at scale, the image's static binary ($BENCH_STATIC_BIN)"
    RELOADLET_BIN="$BENCH_STATIC_BIN" BENCH_CTL_LATENCY=0 cargo bench --bench controller
fi
# 5. Measurements on the simulated node that print figures and judge nothing (they were
#    ignored tests): CSI rotation -> signal latency (docs/csi.md), ConfigMap apply -> SIGHUP
#    under the kubelet's real sync timing for choosing --debounce, the env-consumer
#    controller at 5,000 pods, restart vs rollout vs evict on a 3-replica Deployment
#    (benches/measure/main.rs; BENCH_MEASURE=csi,apply,env,actions picks; none: skipped).
#    About 8 minutes.
if [[ "${BENCH_MEASURE-csi,apply,env,actions}" != none ]]; then
    BENCH_MEASURE="${BENCH_MEASURE-csi,apply,env,actions}" cargo bench --bench measure
fi
