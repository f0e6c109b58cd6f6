#!/usr/bin/env bash
# The benchmark (as root), about 2–3 minutes at the defaults. On one simulated node:
#  1. swap -> signal latency (p50, p99, misses) and memory of reloadlet (--debounce 0s) and of
#     two references, the floor (examples/floor.rs: one inotify fd, kill(2) on ..data) and an
#     inotifywait + kill sidecar per volume, at 100 and at 1,000 volumes, with the ratios
#     against the bar of issue 14; reloadlet's wakeups while idle;
#  2. an eviction burst of 100 pods.
# Sizes (environment): BENCH_SMALL (100) and BENCH_LARGE (1000) volumes, BENCH_VOLS_PER_POD (4),
# BENCH_SWAPS per approach and size (400), BENCH_RATE swaps/s (50), BENCH_DEADLINE_MS for a
# miss (1000), BENCH_IDLE_SECS (10; 0 skips), BENCH_SIDECAR_MAX (200) sidecars at most.
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
cargo bench --bench node
# 3. fast projection (reloadlet controller): ConfigMap update -> SIGHUP with and without the
#    controller under the kubelet's real sync timing (about 2.5 minutes; BENCH_CTL_SLOW=0
#    skips the ~90 s wait for the kubelet's periodic sync), and the controller at cluster
#    scale, issue 30's size: 100,000 pods over 1,000 nodes, 20,000 ConfigMaps, 10,000
#    Secrets, 5,000 env consumers, about 1.5 minutes on the 2-core machine (BENCH_CTL_PODS
#    etc. for other sizes; benches/controller/main.rs lists the knobs).
cargo bench --bench controller
