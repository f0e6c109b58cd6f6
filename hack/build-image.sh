#!/usr/bin/env bash
# Builds reloadlet's OCI image offline with buildah, from the Dockerfile's runtime stage
# (the one Dockerfile stays the source of truth) and the static musl binary of
# hack/build-release.sh. Nothing is pulled: the runtime stage is `scratch`, and its
# `COPY --from=builder` lines read a local directory given as the build context `builder`
# instead of the builder stage (buildah-build(1), --build-context: "Additional build contexts
# can be referenced in the same manner as we access different stages in COPY instruction",
# https://github.com/containers/buildah/blob/main/docs/buildah-build.1.md).
#
#   hack/build-image.sh                  build the static binary (hack/build-release.sh --arch
#                                        amd64, a no-op when up to date), then
#                                        the image IMAGE:VERSION, saved as
#                                        target/image/reloadlet-VERSION.tar (oci-archive)
#   hack/build-image.sh --binary PATH    use this static binary
#   hack/build-image.sh --print-archive  print the archive's path, build nothing
#
# IMAGE is the chart's image.repository (deploy/chart/reloadlet/values.yaml), VERSION the
# crate's version, which is the chart's appVersion (its default tag). buildah uses a
# temporary store of its own (vfs driver), not the machine's /var/lib/containers.
# Prints the image's size and fails if it holds more than the binary and the CA bundle.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

die() { echo "build-image: $*" >&2; exit 1; }

binary=""
print_archive=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    --binary) [[ $# -ge 2 ]] || die "--binary needs a path"; binary="$2"; shift 2 ;;
    --print-archive) print_archive=true; shift ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n1)"
[[ -n "$version" ]] || die "no version in Cargo.toml"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' deploy/chart/reloadlet/Chart.yaml)"
[[ "$app_version" == "$version" ]] \
  || die "Cargo.toml version $version differs from the chart's appVersion '$app_version' (hack/bump-version.sh)"
repository="$(sed -n 's/^  repository: *\(.*\)$/\1/p' deploy/chart/reloadlet/values.yaml | head -n1)"
[[ -n "$repository" ]] || die "no image.repository in deploy/chart/reloadlet/values.yaml"
image="$repository:$version"
archive="$root/target/image/reloadlet-$version.tar"
if $print_archive; then
  echo "$archive"
  exit 0
fi

command -v buildah >/dev/null || die "needs buildah (hack/install-test-deps.sh installs it)"
ca=/etc/ssl/certs/ca-certificates.crt
[[ -f "$ca" ]] || die "needs $ca (apt-get install ca-certificates)"

if [[ -z "$binary" ]]; then
  # The static musl build (a no-op when it is up to date), as .ci/run makes it.
  musl=x86_64-unknown-linux-musl
  if ! rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
    rustup target add "$musl" >&2 || die "cannot add the Rust target $musl (rustup target add $musl)"
  fi
  hack/build-release.sh --arch amd64 >&2
  binary="$root/target/dist/reloadlet"
fi
[[ -x "$binary" ]] || die "no executable binary at $binary"
# The runtime stage has no libc: the binary must be static (no interpreter, no NEEDED).
if command -v readelf >/dev/null \
  && { readelf -l "$binary" | grep -q INTERP || readelf -d "$binary" | grep -q '(NEEDED)'; }; then
  die "$binary is dynamically linked; the scratch image needs the static musl build (hack/build-release.sh --arch amd64)"
fi

work="$root/target/image"
mkdir -p "$work"
tmp="$(mktemp -d "$work/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
ctx="$tmp/builder"
# The builder stage's paths, as the runtime stage copies them.
mkdir -p "$ctx/out" "$ctx/etc/ssl/certs"
cp "$binary" "$ctx/out/reloadlet"
cp "$ca" "$ctx/etc/ssl/certs/ca-certificates.crt"

# A store of its own, removed on exit: the archive is the result.
store=(--root "$tmp/store/root" --runroot "$tmp/store/run" --storage-driver vfs)
revision="$(git rev-parse HEAD 2>/dev/null || true)"
# --pull=never: a base image that is not local fails the build instead of being fetched.
# The build context proper is an empty directory: the runtime stage copies from `builder`.
empty="$tmp/empty"
mkdir "$empty"
buildah "${store[@]}" bud --quiet --pull=never --layers=false \
  --target runtime --build-context "builder=$ctx" \
  --build-arg TARGETARCH=amd64 --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
  -f "$root/Dockerfile" -t "$image" "$empty" >/dev/null
rm -f "$archive"
buildah "${store[@]}" push --quiet "$image" "oci-archive:$archive:$image" >/dev/null

# The image holds the binary and the CA bundle; allow 64 KiB for the tar headers, the
# manifest and the config.
size=$(stat -c %s "$archive")
payload=$(($(stat -c %s "$binary") + $(stat -c %s "$ca")))
files="$(buildah "${store[@]}" from --quiet --pull=never "$image")"
mnt="$(buildah "${store[@]}" mount "$files")"
content="$(cd "$mnt" && find . -type f | sort | tr '\n' ' ')"
buildah "${store[@]}" rm "$files" >/dev/null
[[ "$content" == "./etc/ssl/certs/ca-certificates.crt ./reloadlet " ]] \
  || die "the image holds [$content], expected the binary and the CA bundle only"
if ((size > payload + 65536)); then
  die "the archive is $size bytes, more than the binary and the CA bundle ($payload) plus 64 KiB"
fi
echo "build-image: $image -> ${archive#"$root"/} ($((size / 1024)) KiB: binary $(($(stat -c %s "$binary") / 1024)) KiB + CA bundle $(($(stat -c %s "$ca") / 1024)) KiB)" >&2
