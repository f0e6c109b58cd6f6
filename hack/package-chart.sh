#!/usr/bin/env bash
# `helm package` of deploy/chart/reloadlet (after `helm lint --strict`), reproducibly: the
# archive's timestamps are SOURCE_DATE_EPOCH (default: the last commit's time). Prints the
# package's path.
#
#   hack/package-chart.sh [--out DIR]   default target/dist
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/target/dist"
[[ "${1:-}" != --out ]] || out="${2:?--out needs a directory}"
"$root/hack/install-manifest-tools.sh" >/dev/null 2>&1 || "$root/hack/install-manifest-tools.sh"
export PATH="$root/.tools/bin:$PATH"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
chart=deploy/chart/reloadlet
helm lint --strict "$chart" >/dev/null
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
helm package "$chart" --destination "$tmp" >/dev/null
version="$(sed -n 's/^version: *//p' "$chart/Chart.yaml")"
# helm writes its own mtimes: repack with fixed ones so that the digest depends on the
# content only.
mkdir "$tmp/x"
tar -xzf "$tmp/reloadlet-$version.tgz" -C "$tmp/x"
tar -C "$tmp/x" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  --mode=u=rwX,go=rX -cf - reloadlet | gzip -n -9 >"$out/reloadlet-chart-$version.tgz"
echo "$out/reloadlet-chart-$version.tgz"
