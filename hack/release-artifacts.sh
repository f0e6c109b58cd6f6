#!/usr/bin/env bash
# Gathers a release in target/release-dist/ (what .github/workflows/release.yml uploads and
# hack/publish.sh pushes), from the same scripts CI runs:
#   reloadlet-VERSION-linux-amd64, reloadlet-VERSION-linux-arm64   static binaries
#   reloadlet-VERSION.oci.tar           the OCI layout: image index of both platforms + SBOM
#   reloadlet-VERSION.cdx.json          the CycloneDX SBOM (also inside the layout)
#   reloadlet-chart-VERSION.tgz         the Helm chart (helm package)
#   NOTES.md                            CHANGELOG.md's section for VERSION
#   SHA256SUMS                          sha256sum of every file above
#
#   hack/release-artifacts.sh               build everything (hack/build-image.sh first)
#   hack/release-artifacts.sh --skip-image  reuse the binaries, SBOM and archive already built
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
die() { echo "release-artifacts: $*" >&2; exit 1; }

skip_image=false
case "${1:-}" in
  --skip-image) skip_image=true ;;
  "") ;;
  *) die "unknown argument '$1'" ;;
esac

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n1)"
hack/bump-version.sh --check >/dev/null
$skip_image || hack/build-image.sh
archive="$(hack/build-image.sh --print-archive)"
[[ -f "$archive" ]] || die "no image archive at $archive (hack/build-image.sh)"

dist="$root/target/release-dist"
rm -rf "$dist"
mkdir -p "$dist"
cp target/dist/reloadlet "$dist/reloadlet-$version-linux-amd64"
cp target/dist/arm64/reloadlet "$dist/reloadlet-$version-linux-arm64"
cp "$archive" "$dist/reloadlet-$version.oci.tar"
cp "${archive%.tar}.cdx.json" "$dist/reloadlet-$version.cdx.json"
hack/package-chart.sh --out "$dist" >/dev/null
hack/release-notes.sh "$version" >"$dist/NOTES.md"
(cd "$dist" && sha256sum -- * >SHA256SUMS)
echo "release-artifacts: $(cd "$dist" && printf '%s ' *)-> ${dist#"$root"/}" >&2
