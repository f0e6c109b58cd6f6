#!/usr/bin/env bash
# Prints CHANGELOG.md's section for VERSION (the lines under `## VERSION ...` up to the next
# `## `), the GitHub release's notes; fails when there is none or it is empty.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: hack/release-notes.sh VERSION}"
notes="$(awk -v v="$version" '
  /^## / { inside = ($2 == v || $2 == "[" v "]"); next }
  inside { print }' CHANGELOG.md | sed -e '/./,$!d')"
[[ -n "${notes//[$'\n' ]/}" ]] || { echo "release-notes: no CHANGELOG.md section for $version" >&2; exit 1; }
printf '%s\n' "$notes"
