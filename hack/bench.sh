#!/usr/bin/env bash
# The benchmark (as root): swap-to-signal latency on a simulated node of 250 pods and 1,000
# ConfigMap volumes, reloadlet's RSS and readiness time, and an eviction burst of 100 pods.
#   BENCH_UPDATES (default 400) and BENCH_PODS (default 250) size it.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "hack/bench.sh: run as root" >&2; exit 2; }
cargo build --release --quiet --examples
cargo bench --bench node
