#!/usr/bin/env bash
# Publishes a release gathered by hack/release-artifacts.sh (.github/workflows/release.yml
# runs it; hack/test.sh runs its --dry-run): pushes the OCI layout's image index, both
# platforms' images and the SBOM referrer to the registry (`oras cp -r`), signs the index
# (and each platform's image, --recursive) and the SBOM artifact keyless with cosign, attests
# the SBOM to the index (`cosign attest --type cyclonedx`), pushes the chart as an OCI
# artifact and signs it. Keyless signing takes the CI's OIDC identity (GitHub Actions:
# `permissions: id-token: write`); nothing here holds a key.
#
#   hack/publish.sh [--dry-run] DIST    DIST: target/release-dist
# Environment: CHART_REPO (default oci://ghcr.io/reloadlet/charts); the image's repository is
# the chart's image.repository. --dry-run checks DIST and prints the commands instead.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
die() { echo "publish: $*" >&2; exit 1; }

dry_run=false
[[ "${1:-}" != --dry-run ]] || { dry_run=true; shift; }
dist="${1:?usage: hack/publish.sh [--dry-run] DIST}"
dist="$(cd "$dist" && pwd)"

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)"
repository="$(sed -n 's/^  repository: *\(.*\)$/\1/p' "$root/deploy/chart/reloadlet/values.yaml" | head -n1)"
chart_repo="${CHART_REPO:-oci://ghcr.io/reloadlet/charts}"
image="$repository:$version"
layout_tar="$dist/reloadlet-$version.oci.tar"
chart="$dist/reloadlet-chart-$version.tgz"
sbom="$dist/reloadlet-$version.cdx.json"
for f in "$layout_tar" "$chart" "$sbom" "$dist/SHA256SUMS" "$dist/NOTES.md"; do
  [[ -s "$f" ]] || die "missing $f (hack/release-artifacts.sh)"
done
(cd "$dist" && sha256sum --check --quiet SHA256SUMS) || die "SHA256SUMS does not match $dist"

# oras reads an OCI layout directory; the layout's index.json says which manifest is the
# image index (its ref name) and which the SBOM.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
layout="$tmp/layout"
mkdir "$layout"
tar -xf "$layout_tar" -C "$layout"
read -r index_digest sbom_digest < <(python3 - "$layout/index.json" "$image" <<'PY'
import json, sys
entries = json.load(open(sys.argv[1]))["manifests"]
index = [m for m in entries if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == sys.argv[2]]
sbom = [m for m in entries if m.get("artifactType") == "application/vnd.cyclonedx+json"]
if len(index) != 1 or len(sbom) != 1:
    sys.exit(f"publish: expected the image index named {sys.argv[2]} and one SBOM in index.json")
print(index[0]["digest"], sbom[0]["digest"])
PY
)

run() {
  if $dry_run; then
    printf '+'; printf ' %q' "$@"; printf '\n'
  else
    "$@"
  fi
}
# 1. The image index, both images and the SBOM referrer, by digest, then the version tag.
run oras cp -r --from-oci-layout "$layout@$index_digest" "$repository@$index_digest"
run oras tag "$repository@$index_digest" "$version"
# 2. Keyless signatures: the index and every platform image; the SBOM artifact; and the SBOM
#    as a signed attestation on the index (what `cosign verify-attestation --type cyclonedx`
#    checks).
run cosign sign --yes --recursive "$repository@$index_digest"
run cosign sign --yes "$repository@$sbom_digest"
run cosign attest --yes --type cyclonedx --predicate "$sbom" "$repository@$index_digest"
# 3. The chart, as an OCI artifact, signed too.
if $dry_run; then
  run helm push "$chart" "$chart_repo"
  chart_ref="${chart_repo#oci://}/reloadlet@sha256:<pushed digest>"
  run cosign sign --yes "$chart_ref"
else
  pushed="$(helm push "$chart" "$chart_repo" 2>&1 | tee /dev/stderr)"
  chart_digest="$(sed -n 's/^Digest: *//p' <<<"$pushed")"
  [[ -n "$chart_digest" ]] || die "helm push printed no digest"
  cosign sign --yes "${chart_repo#oci://}/reloadlet@$chart_digest"
fi
echo "publish: $image ($index_digest), SBOM $sbom_digest, chart $chart_repo/reloadlet:$version$($dry_run && echo ' (dry run)')" >&2
