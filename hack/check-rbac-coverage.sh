#!/usr/bin/env bash
# Least privilege as a measured fact: after the integration tests (which record, per test,
# the RBAC rule entries the agent's and the controller's service accounts used, in
# target/rbac-used/), fails on any rule entry the chart grants in any rendered value
# combination (nodesim/fixtures/rbac-chart.json) that no test exercised, unless
# hack/rbac-unexercised.txt lists it with a reason. Run by hack/test.sh after `cargo test`
# (which it precedes by emptying target/rbac-used).
#
#   hack/check-rbac-coverage.sh [USED-DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
used="${1:-${RELOADLET_RBAC_USED_DIR:-$root/target/rbac-used}}"
cd "$root"
cargo run -q -p nodesim --example rbac_coverage -- "$used" "$root/hack/rbac-unexercised.txt"
