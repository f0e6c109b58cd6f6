#!/usr/bin/env bash
# Checks that a release tag (vX.Y.Z) is the version written everywhere
# (hack/bump-version.sh --check) and that CHANGELOG.md has a section for it; prints
# `version=X.Y.Z` (a GitHub Actions step output).
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:?usage: hack/release-version.sh vX.Y.Z}"
version="${tag#v}"
hack/bump-version.sh --check >&2
have="$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n1)"
[[ "$have" == "$version" ]] || { echo "release-version: tag $tag, but the sources are at $have (hack/bump-version.sh $version)" >&2; exit 1; }
hack/release-notes.sh "$version" >/dev/null
echo "version=$version"
