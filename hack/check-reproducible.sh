#!/usr/bin/env bash
# Two builds of the same commit must give the same bytes (reproducible-builds.org):
#
#   hack/check-reproducible.sh           the SBOM (hack/sbom.sh) and the image index
#                                        (hack/build-image.sh) built twice from the binaries
#                                        already in target/dist: same SBOM, same archive, same
#                                        index digest (seconds; hack/test.sh runs it)
#   hack/check-reproducible.sh --binary ARCH
#                                        also the static binary (amd64 or arm64) built again
#                                        from nothing in a target dir at another path: same
#                                        sha256 as target/dist's (a full release build, fat
#                                        LTO: minutes, so not in hack/test.sh)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
die() { echo "check-reproducible: $*" >&2; exit 1; }

binary_arch=""
case "${1:-}" in
  --binary) binary_arch="${2:?--binary needs amd64 or arm64}" ;;
  "") ;;
  *) die "unknown argument '$1'" ;;
esac

amd64="$root/target/dist/reloadlet"
arm64="$root/target/dist/arm64/reloadlet"
[[ -x "$amd64" && -x "$arm64" ]] || die "build both binaries first (hack/build-image.sh)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

hack/sbom.sh --out "$tmp/a.cdx.json" >/dev/null 2>&1 || hack/sbom.sh --out "$tmp/a.cdx.json"
hack/sbom.sh --out "$tmp/b.cdx.json" >/dev/null 2>&1
cmp -s "$tmp/a.cdx.json" "$tmp/b.cdx.json" || { diff <(head -c 4000 "$tmp/a.cdx.json") <(head -c 4000 "$tmp/b.cdx.json") | head -n 10 >&2; die "two SBOMs differ"; }
echo "check-reproducible: SBOM twice: $(sha256sum <"$tmp/a.cdx.json" | cut -c1-16)… both" >&2

digests=()
for run in a b; do
  hack/build-image.sh --binary "$amd64" --arm64-binary "$arm64" --sbom "$tmp/a.cdx.json" --out "$tmp/image-$run.tar" 2>"$tmp/$run.log" \
    || { cat "$tmp/$run.log" >&2; die "hack/build-image.sh failed"; }
  digests+=("$(sed -n 's/^build-image: .* (\(sha256:[0-9a-f]*\)) .*/\1/p' "$tmp/$run.log")")
done
[[ -n "${digests[0]}" && "${digests[0]}" == "${digests[1]}" ]] || die "image index digests differ: ${digests[*]}"
cmp -s "$tmp/image-a.tar" "$tmp/image-b.tar" || die "the two archives differ (same index digest ${digests[0]})"
echo "check-reproducible: image index twice: ${digests[0]} both, archives identical" >&2

if [[ -n "$binary_arch" ]]; then
  case "$binary_arch" in
    amd64) want="$amd64" ;;
    arm64) want="$arm64" ;;
    *) die "--binary takes amd64 or arm64" ;;
  esac
  # Another checkout path and another target dir: the build paths must not reach the binary.
  copy="$tmp/elsewhere/reloadlet-src"
  mkdir -p "$copy"
  git ls-files -z | xargs -0 cp --parents -t "$copy"
  start=$SECONDS
  (cd "$copy" && SOURCE_DATE_EPOCH="$(git -C "$root" log -1 --format=%ct)" CARGO_TARGET_DIR="$tmp/other-target" \
    nice -n 10 hack/build-release.sh --arch "$binary_arch" --out "$tmp/out" >&2)
  a="$(sha256sum <"$want" | cut -d' ' -f1)" b="$(sha256sum <"$tmp/out/reloadlet" | cut -d' ' -f1)"
  [[ "$a" == "$b" ]] || die "$binary_arch binary differs when built at another path: $a vs $b"
  echo "check-reproducible: $binary_arch binary rebuilt elsewhere in $((SECONDS - start)) s: sha256 $a both" >&2
fi
