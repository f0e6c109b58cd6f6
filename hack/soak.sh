#!/usr/bin/env bash
# The soak (issue #43 §5; not run in CI): a simulated node with the real agent and controller
# under the chart's RBAC, and for MINUTES (default 30) a tenant who keeps creating, changing
# and deleting hostile pods (annotations past every bound, 1,000-level volumes, 30 volumes a
# pod, 200 KiB annotations, HTTP reloads to a closed port, on-blocked rollouts with absurd
# timeouts, bare pods with forged ownerReferences) and ConfigMaps (up to 512 KiB), beside an
# innocent pod that must get a SIGHUP for every change of its ConfigMap. Once a minute it
# prints RSS, CPU, open fds and inotify watches of both processes; it fails when a process
# dies, the innocent pod misses a signal, or a bound is crossed (examples/soak.rs, `Bounds`).
#
#   hack/soak.sh [MINUTES]              # release build (what a node runs)
#   SOAK_PROFILE=debug hack/soak.sh 1   # a quick smoke run on a debug build
#   SOAK_SEED=42 hack/soak.sh           # another tenant
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "hack/soak.sh: run as root: the simulated node makes cgroups, mounts and PID namespaces" >&2
    exit 2
fi
minutes="${1:-30}"
profile="${SOAK_PROFILE:-release}"
flags=()
dir=release
if [[ $profile == release ]]; then flags=(--release); else dir=debug; fi
cargo build "${flags[@]}" --quiet --bin reloadlet --example soak --example sigrecorder
exec "${CARGO_TARGET_DIR:-target}/$dir/examples/soak" --minutes "$minutes" --seed "${SOAK_SEED:-$RANDOM}"
