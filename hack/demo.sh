#!/usr/bin/env bash
# The main job on a machine without a cluster (as root): a simulated node whose kubelet keeps
# its real sync timing, with a real nginx pod that reloadlet reloads in place — one ConfigMap
# change without `reloadlet controller` (the wait for the kubelet's periodic sync), one with
# it (about a second) — then three replicas replaced one at a time through the Eviction API
# behind a PodDisruptionBudget, a real Prometheus reloaded over HTTP (`action: http`), and a
# one-replica Deployment without reload support rolled surge-first (`action: rollout`), never
# without a Ready pod.
# 30–40 s after the build.
#
#   hack/demo.sh                        # kubelet syncFrequency 20 s (a real kubelet: 60 s)
#   hack/demo.sh --sync-frequency 60s   # the real default: a periodic sync 60–90 s after the last
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "hack/demo.sh: run as root (sudo hack/demo.sh): the simulated node makes cgroups, mounts and PID namespaces" >&2
    exit 2
fi
hack/install-test-deps.sh
cargo build --release --quiet --bin reloadlet --example demo
exec "${CARGO_TARGET_DIR:-target}/release/examples/demo" "$@"
