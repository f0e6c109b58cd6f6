#!/usr/bin/env bash
# Renders the RBAC objects (ClusterRoles, Roles and their bindings) of the Helm chart, for
# each chart value combination the integration tests run the controller with, into
# nodesim/fixtures/rbac-chart.json: the simulated API server authorizes the agent's and the
# controller's service accounts with exactly these rules (tests/common/rbac.rs picks the
# combination from the controller's flags, as the chart's controller-deployment.yaml maps
# values to flags). Only kind, name, namespace, rules, roleRef and subjects are kept (no
# labels: a version bump must not change the fixture).
# It also checks that the kustomize base (deploy/, with the controller component) renders
# the same RBAC objects as the chart's defaults, and that each optional kustomize component
# (deploy/components/controller-*, one per feature flag that needs more rules) grants
# exactly what the chart grants with the matching value: the same (group, resource, verb)
# entries, nothing missing, nothing more.
#
#   hack/render-rbac.sh           write the fixture
#   hack/render-rbac.sh --check   fail if the committed fixture differs from a fresh render
#                                 (run by hack/check-manifests.sh)
#
# Tools come from hack/install-manifest-tools.sh (helm, kubectl, PyYAML in .tools/venv).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${RELOADLET_TOOLS_DIR:-$root/.tools}"
fixture="$root/nodesim/fixtures/rbac-chart.json"
check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
if [[ ! -x "$tools/bin/helm" || ! -x "$tools/venv/bin/python" ]]; then
  "$root/hack/install-manifest-tools.sh" >&2
fi
export PATH="$tools/bin:$PATH"
chart="$root/deploy/chart/reloadlet"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# The value combinations, one line each (space-separated --set values, sorted; "" = the
# defaults). Add a line when a test runs the controller with another combination of flags.
combinations=(
  ""
  "controller.envConsumers=false"
  "controller.envConsumersSecrets=true"
  "controller.reloaderCompat=true"
  "controller.reloaderCompat=true controller.secrets=true"
  "controller.reloaderCompat=true controller.rollout.argoRollouts=true"
  "controller.rollout.argoRollouts=true"
  "controller.rollout.enabled=false"
  "controller.secrets=true"
)
i=0
for combo in "${combinations[@]}"; do
  args=()
  for v in $combo; do args+=(--set "$v"); done
  helm template reloadlet "$chart" -n reloadlet-system "${args[@]}" >"$out/render-$i.yaml"
  printf '%s\n' "$combo" >"$out/values-$i.txt"
  i=$((i + 1))
done
kubectl kustomize "$root/deploy" >"$out/kustomize.yaml"

# Each optional component set on top of deploy/base, and the chart values it stands for
# ("component,component|value value"). Every deploy/components/controller-* that is not
# the controller or its admission policy must appear here.
component_sets=(
  "controller-secrets|controller.secrets=true"
  "controller-env-consumers-secrets|controller.envConsumersSecrets=true"
  "controller-reloader-compat|controller.reloaderCompat=true"
  "controller-argo-rollouts|controller.rollout.argoRollouts=true"
  "controller-reloader-compat,controller-secrets|controller.reloaderCompat=true controller.secrets=true"
  "controller-reloader-compat,controller-argo-rollouts,controller-reloader-compat-argo-rollouts|controller.reloaderCompat=true controller.rollout.argoRollouts=true"
)
mkdir -p "$root/target"
overlay="$(mktemp -d -p "$root/target" render-rbac.XXXXXX)"
trap 'rm -rf "$out" "$overlay"' EXIT
j=0
for set in "${component_sets[@]}"; do
  comps="${set%%|*}"
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources: [../../deploy/base]"
    echo "components:"
    for c in ${comps//,/ }; do echo "  - ../../deploy/components/$c"; done
  } >"$overlay/kustomization.yaml"
  kubectl kustomize "$overlay" >"$out/component-$j.yaml" 2>"$out/component-$j.err" || {
    cat "$out/component-$j.err" >&2
    exit 1
  }
  printf '%s\n' "$comps" >"$out/component-names-$j.txt"
  printf '%s\n' "${set#*|}" >"$out/component-values-$j.txt"
  j=$((j + 1))
done
for dir in "$root"/deploy/components/controller-*/; do
  name="$(basename "$dir")"
  case "$name" in controller-admission-policy) continue ;; esac
  if ! printf '%s\n' "${component_sets[@]}" | grep -q -E "(^|,)$name(,|\|)"; then
    echo "render-rbac: deploy/components/$name is not checked: add it to component_sets" >&2
    exit 1
  fi
done

"$tools/venv/bin/python" - "$out" "$i" "$j" >"$out/rbac-chart.json" <<'PY'
import json, sys, yaml

out, n, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")

def rbac(path):
    keep = []
    with open(path) as f:
        for d in yaml.safe_load_all(f):
            if not d or d.get("kind") not in KINDS:
                continue
            meta = {"name": d["metadata"]["name"]}
            if d["metadata"].get("namespace"):
                meta["namespace"] = d["metadata"]["namespace"]
            o = {"apiVersion": d["apiVersion"], "kind": d["kind"], "metadata": meta}
            for k in ("rules", "roleRef", "subjects"):
                if k in d:
                    o[k] = d[k]
            keep.append(o)
    return sorted(keep, key=lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]))

renders = []
for i in range(n):
    values = open(f"{out}/values-{i}.txt").read().split()
    renders.append({"values": sorted(values), "objects": rbac(f"{out}/render-{i}.yaml")})
default = next(r for r in renders if not r["values"])
kustomize = rbac(f"{out}/kustomize.yaml")
if kustomize != default["objects"]:
    a = {(o["kind"], o["metadata"]["name"]): o for o in kustomize}
    b = {(o["kind"], o["metadata"]["name"]): o for o in default["objects"]}
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            print(f"render-rbac: kustomize and the chart's defaults differ on {k[0]} {k[1]}:\n"
                  f"  kustomize: {json.dumps(a.get(k))}\n  chart:     {json.dumps(b.get(k))}", file=sys.stderr)
    sys.exit(1)

def grants(objects):
    """What the objects grant: per object, its (group, resource, verb, names) entries."""
    g = {}
    for o in objects:
        key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        entries = set()
        for r in o.get("rules", []):
            for grp in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    for verb in r.get("verbs", []):
                        entries.add((grp, res, verb, tuple(sorted(r.get("resourceNames", [])))))
        g[key] = (entries, json.dumps(o.get("roleRef")), json.dumps(o.get("subjects")))
    return g

failed = False
for j in range(m):
    names = open(f"{out}/component-names-{j}.txt").read().strip()
    values = sorted(open(f"{out}/component-values-{j}.txt").read().split())
    chart = next((r for r in renders if r["values"] == values), None)
    if chart is None:
        print(f"render-rbac: no chart render for {values} (components {names}): add it to combinations", file=sys.stderr)
        sys.exit(1)
    a, b = grants(rbac(f"{out}/component-{j}.yaml")), grants(chart["objects"])
    for k in sorted(set(a) | set(b)):
        if a.get(k) == b.get(k):
            continue
        failed = True
        ea, eb = (a.get(k) or (set(),))[0], (b.get(k) or (set(),))[0]
        print(f"render-rbac: components {names} and the chart with {' '.join(values)} differ on {k[0]} {k[2]}:\n"
              f"  only the components grant: {sorted(ea - eb)}\n  only the chart grants:      {sorted(eb - ea)}", file=sys.stderr)
if failed:
    sys.exit(1)
print(json.dumps({
    "generated_by": "hack/render-rbac.sh (do not edit; run it after changing deploy/)",
    "release": "reloadlet in reloadlet-system",
    "renders": renders,
}, indent=1))
PY

if $check; then
  if ! diff -u "$fixture" "$out/rbac-chart.json" >"$out/diff"; then
    echo "render-rbac: $fixture is stale: run hack/render-rbac.sh" >&2
    head -n 40 "$out/diff" >&2
    exit 1
  fi
  echo "render-rbac: $fixture matches the chart; the kustomize base and its $j component sets grant what the chart does"
else
  cp "$out/rbac-chart.json" "$fixture"
  echo "render-rbac: wrote $fixture"
fi
