#!/usr/bin/env bash
# Renders the Helm chart as hack/check-manifests.sh does (helm template, release reloadlet in
# reloadlet-system) and prints its documents as one JSON array on stdout. The image and
# runtime tests (tests/image_*.rs) take the agent's and the controller's posture from it, so
# the chart and the tests cannot drift apart.
#
#   hack/render-chart-json.sh [HELM TEMPLATE ARGS...]   e.g. --set kubeletRoot=/tmp/x
#
# Tools come from hack/install-manifest-tools.sh (helm, and PyYAML in .tools/venv).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${RELOADLET_TOOLS_DIR:-$root/.tools}"
if [[ ! -x "$tools/bin/helm" || ! -x "$tools/venv/bin/python" ]]; then
  "$root/hack/install-manifest-tools.sh" >&2
fi
"$tools/bin/helm" template reloadlet "$root/deploy/chart/reloadlet" -n reloadlet-system "$@" \
  | "$tools/venv/bin/python" -c '
import json, sys, yaml
print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))
'
