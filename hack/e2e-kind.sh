#!/usr/bin/env bash
# End-to-end test of reloadlet on a throwaway kind cluster. Needs docker, kind,
# kubectl and network access to pull nginx and busybox. Not run by CI.
#
#   hack/e2e-kind.sh                  build, install, run both scenarios, delete the cluster
#   KEEP_CLUSTER=1 hack/e2e-kind.sh   keep the cluster afterwards for debugging
#
# Scenario "signal": nginx reads a ConfigMap; reloadlet.io/action: signal makes
# the agent send SIGHUP when the kubelet projects a new version; the same pod
# (same UID, no restart) must then serve v2, and a Signaled event must exist.
# Scenario "evict": 3 replicas with reloadlet.io/action: evict and a PDB
# (maxUnavailable: 1); every pod must be replaced, EvictionRequested events
# must exist, and at least 2 replicas must stay ready throughout.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cluster="${KIND_CLUSTER:-reloadlet-e2e}"
ns=reloadlet-e2e
timeout_s="${E2E_TIMEOUT:-240}" # kubelet sync (60-90 s) + ConfigMap cache + debounce

log() { echo "e2e: $*" >&2; }
die() { log "FAILED: $*"; exit 1; }
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

cleanup() {
  local status=$?
  if [[ $status -ne 0 ]]; then
    kubectl -n reloadlet-system logs ds/reloadlet --tail=100 >&2 || true
    kubectl -n "$ns" get pods,events -o wide >&2 || true
  fi
  if [[ "${KEEP_CLUSTER:-0}" == 1 ]]; then
    log "keeping cluster $cluster (kind delete cluster --name $cluster)"
  else
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

# poll SECONDS DESCRIPTION CMD...: retries CMD every 2 s until it succeeds.
poll() {
  local deadline=$((SECONDS + $1)) what="$2"
  shift 2
  until "$@" >/dev/null 2>&1; do
    [[ $SECONDS -lt $deadline ]] || die "timed out waiting for $what"
    sleep 2
  done
  log "ok: $what"
}

# The image under the exact name deploy/ refers to, so `kubectl apply -k deploy/`
# runs it unchanged (imagePullPolicy IfNotPresent finds it loaded on the node).
image="$(kubectl kustomize "$root/deploy" | sed -n 's/^ *image: //p' | head -n 1)"
[[ -n "$image" ]] || die "no image in deploy/"

log "creating kind cluster $cluster"
kind create cluster --name "$cluster" --wait 180s
log "building $image"
docker build -t "$image" "$root"
kind load docker-image "$image" --name "$cluster"

kubectl apply -k "$root/deploy"
kubectl -n reloadlet-system rollout status ds/reloadlet --timeout=180s

kubectl create namespace "$ns"
kubectl -n "$ns" run fetch --image=busybox:1.36 --restart=Never -- sleep 3600
kubectl -n "$ns" wait --for=condition=Ready pod/fetch --timeout=120s

# app NAME REPLICAS ACTION: a Deployment of nginx serving its ConfigMap's text.
app() {
  local name="$1" replicas="$2" action="$3"
  kubectl -n "$ns" apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $name}
spec:
  replicas: $replicas
  selector: {matchLabels: {app: $name}}
  template:
    metadata:
      labels: {app: $name}
      annotations:
        reloadlet.io/action: $action
        reloadlet.io/signal: SIGHUP
    spec:
      containers:
        - name: nginx
          image: nginx:1.27
          readinessProbe: {httpGet: {path: /, port: 80}, periodSeconds: 2}
          volumeMounts: [{name: conf, mountPath: /etc/nginx/conf.d}]
      volumes: [{name: conf, configMap: {name: $name}}]
---
apiVersion: v1
kind: Service
metadata: {name: $name}
spec:
  selector: {app: $name}
  ports: [{port: 80}]
YAML
}

# conf NAME TEXT: (re)writes the ConfigMap that makes NAME answer TEXT.
conf() {
  kubectl -n "$ns" create configmap "$1" --dry-run=client -o yaml \
    --from-literal=default.conf="server { listen 80; location / { return 200 '$2'; } }" |
    kubectl -n "$ns" apply -f -
}

serves() { [[ "$(kubectl -n "$ns" exec fetch -- wget -qO- "http://$1/")" == "$2" ]]; }
has_event() { [[ -n "$(kubectl -n "$ns" get events --field-selector "reason=$1" -o name)" ]]; }
uids() { kubectl -n "$ns" get pods -l "app=$1" -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' | sort; }

# --- signal --------------------------------------------------------------------
conf web v1
app web 1 signal
kubectl -n "$ns" rollout status deploy/web --timeout=120s
poll 60 "web serves v1" serves web v1
before="$(uids web)"
conf web v2
poll "$timeout_s" "web serves v2 after SIGHUP" serves web v2
[[ "$(uids web)" == "$before" ]] || die "web's pod was replaced; expected a reload in place"
restarts="$(kubectl -n "$ns" get pods -l app=web -o jsonpath='{.items[0].status.containerStatuses[0].restartCount}')"
[[ "$restarts" == 0 ]] || die "nginx restarted $restarts time(s); expected a reload in place"
poll 30 "a Signaled event" has_event Signaled

# --- evict -----------------------------------------------------------------------
conf evictee v1
app evictee 3 evict
kubectl -n "$ns" apply -f - <<YAML
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: evictee}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: evictee}}
YAML
kubectl -n "$ns" rollout status deploy/evictee --timeout=180s
old="$(uids evictee)"
conf evictee v2
min_ready=3
replaced() {
  local ready
  ready="$(kubectl -n "$ns" get deploy/evictee -o jsonpath='{.status.readyReplicas}')"
  [[ "${ready:-0}" -lt $min_ready ]] && min_ready="${ready:-0}"
  [[ "${ready:-0}" == 3 ]] && [[ -z "$(comm -12 <(echo "$old") <(uids evictee))" ]]
}
deadline=$((SECONDS + timeout_s * 2))
until replaced; do
  [[ $SECONDS -lt $deadline ]] || die "timed out waiting for every evictee pod to be replaced"
  sleep 2
done
log "ok: every evictee pod replaced (fewest ready replicas seen: $min_ready)"
[[ $min_ready -ge 2 ]] || die "only $min_ready replicas were ready at some point; the PDB allows 1 down"
poll 30 "EvictionRequested events" has_event EvictionRequested
poll 30 "evictee serves v2" serves evictee v2

log "PASSED"
