#!/usr/bin/env bash
# The main job on a machine without a cluster (as root): a simulated node with a real nginx
# pod that reloadlet reloads in place, then three replicas replaced one at a time through the
# Eviction API behind a PodDisruptionBudget.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "hack/demo.sh: run as root (sudo hack/demo.sh): the simulated node makes cgroups, mounts and PID namespaces" >&2
    exit 2
fi
hack/install-test-deps.sh
cargo build --release --quiet --bin reloadlet --example demo
exec target/release/examples/demo
