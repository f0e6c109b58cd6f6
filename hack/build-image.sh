#!/usr/bin/env bash
# Builds reloadlet's multi-platform OCI image offline with buildah: one image per platform
# (linux/amd64, linux/arm64) from the Dockerfile's runtime stage (the one Dockerfile stays the
# source of truth) and the static musl binaries of hack/build-release.sh, gathered in one OCI
# image index, with the CycloneDX SBOM (hack/sbom.sh) attached to that index as an OCI 1.1
# referrer, all saved as one archive. Nothing is pulled: the runtime stage is `scratch`, and
# its `COPY --from=builder` lines read a local directory given as the build context `builder`
# instead of the builder stage (buildah-build(1), --build-context: "Additional build contexts
# can be referenced in the same manner as we access different stages in COPY instruction",
# https://github.com/containers/buildah/blob/main/docs/buildah-build.1.md).
#
#   hack/build-image.sh                  build both static binaries (hack/build-release.sh
#                                        --arch amd64 / arm64, no-ops when up to date) and
#                                        the SBOM, then the index IMAGE:VERSION, saved as
#                                        target/image/reloadlet-VERSION.tar (oci-archive)
#   hack/build-image.sh --binary PATH    use this static amd64 binary
#   hack/build-image.sh --arm64-binary PATH   and this static arm64 one
#   hack/build-image.sh --sbom PATH      use this CycloneDX JSON SBOM
#   hack/build-image.sh --out FILE       write the archive there instead
#   hack/build-image.sh --print-archive  print the archive's path, build nothing
#   hack/build-image.sh --print-image    print IMAGE:VERSION, the index's name, build nothing
#
# The archive is an OCI image layout (tar): index.json names the image index
# (org.opencontainers.image.ref.name = IMAGE:VERSION; `podman pull oci-archive:FILE:IMAGE:VERSION`
# takes this machine's platform from it) and holds the SBOM's artifact manifest
# (artifactType application/vnd.cyclonedx+json, subject = the image index), where
# `oras discover --oci-layout` finds it and `oras cp -r` carries it to a registry with the
# image. The SBOM is also written beside the archive (reloadlet-VERSION.cdx.json).
#
# IMAGE is the chart's image.repository (deploy/chart/reloadlet/values.yaml), VERSION the
# crate's version, which is the chart's appVersion (its default tag). buildah uses a
# temporary store of its own (vfs driver), not the machine's /var/lib/containers.
# Reproducible: every timestamp in the images and the archive is SOURCE_DATE_EPOCH (default:
# the last commit's time), so the same commit and binaries give the same digests.
# Checks each platform's image (only the binary and the CA bundle, its architecture, user,
# entrypoint and labels) and prints its size.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

die() { echo "build-image: $*" >&2; exit 1; }

declare -A binaries=()
sbom=""
archive=""
print_archive=false
print_image=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    --binary) [[ $# -ge 2 ]] || die "--binary needs a path"; binaries[amd64]="$2"; shift 2 ;;
    --arm64-binary) [[ $# -ge 2 ]] || die "--arm64-binary needs a path"; binaries[arm64]="$2"; shift 2 ;;
    --sbom) [[ $# -ge 2 ]] || die "--sbom needs a path"; sbom="$2"; shift 2 ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a path"; archive="$2"; shift 2 ;;
    --print-archive) print_archive=true; shift ;;
    --print-image) print_image=true; shift ;;
    -h | --help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
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
[[ -n "$archive" ]] || archive="$root/target/image/reloadlet-$version.tar"
if $print_archive; then
  echo "$archive"
  exit 0
fi
if $print_image; then
  echo "$image"
  exit 0
fi

command -v buildah >/dev/null || die "needs buildah (hack/install-test-deps.sh installs it)"
command -v python3 >/dev/null || die "needs python3"
ca=/etc/ssl/certs/ca-certificates.crt
[[ -f "$ca" ]] || die "needs $ca (apt-get install ca-certificates)"
revision="$(git rev-parse HEAD 2>/dev/null || true)"
# SOURCE_DATE_EPOCH (reproducible-builds.org): the commit's time, so two builds of one
# commit agree; a dirty tree gets the same (the binaries say what they hold).
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"

platforms=(amd64 arm64)
for arch in "${platforms[@]}"; do
  [[ -n "${binaries[$arch]:-}" ]] && continue
  # The static musl build (a no-op when it is up to date), as .ci/run makes it.
  out="$root/target/dist"
  [[ "$arch" == amd64 ]] || out="$root/target/dist/$arch"
  hack/build-release.sh --arch "$arch" --out "$out" >&2
  binaries[$arch]="$out/reloadlet"
done
if [[ -z "$sbom" ]]; then
  sbom="$root/target/dist/reloadlet.cdx.json"
  hack/sbom.sh --out "$sbom" >&2
fi
[[ -f "$sbom" ]] || die "no SBOM at $sbom"

declare -A elf_machine=([amd64]=62 [arm64]=183) # EM_X86_64, EM_AARCH64
for arch in "${platforms[@]}"; do
  bin="${binaries[$arch]}"
  [[ -x "$bin" ]] || die "no executable binary at $bin"
  # The runtime stage has no libc: the binary must be static (no interpreter, no NEEDED).
  if command -v readelf >/dev/null \
    && { readelf -l "$bin" | grep -q INTERP || readelf -d "$bin" | grep -q '(NEEDED)'; }; then
    die "$bin is dynamically linked; the scratch image needs the static musl build (hack/build-release.sh --arch $arch)"
  fi
  machine=$(od -An -tu2 -j18 -N2 "$bin" | tr -d ' ')
  [[ "$machine" == "${elf_machine[$arch]}" ]] || die "$bin is not a $arch binary (ELF machine $machine)"
done

work="$root/target/image"
mkdir -p "$work" "$(dirname "$archive")"
tmp="$(mktemp -d "$work/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# A store of its own, removed on exit: the archive is the result.
store=(--root "$tmp/store/root" --runroot "$tmp/store/run" --storage-driver vfs)
# The build context proper is an empty directory: the runtime stage copies from `builder`.
empty="$tmp/empty"
mkdir "$empty"

sizes=()
buildah "${store[@]}" manifest create "$image" >/dev/null
for arch in "${platforms[@]}"; do
  bin="${binaries[$arch]}"
  ctx="$tmp/builder-$arch"
  # The builder stage's paths, as the runtime stage copies them.
  mkdir -p "$ctx/out" "$ctx/etc/ssl/certs"
  cp "$bin" "$ctx/out/reloadlet"
  cp "$ca" "$ctx/etc/ssl/certs/ca-certificates.crt"
  local_tag="localhost/reloadlet-build:$arch"
  # --pull=never: a base image that is not local fails the build instead of being fetched.
  # --timestamp: the config's created time, the history's and every file's mtime in the
  # layer are SOURCE_DATE_EPOCH.
  buildah "${store[@]}" bud --quiet --pull=never --layers=false \
    --platform "linux/$arch" --timestamp "$SOURCE_DATE_EPOCH" \
    --target runtime --build-context "builder=$ctx" \
    --build-arg "TARGETARCH=$arch" --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
    --build-arg "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH" -f "$root/Dockerfile" -t "$local_tag" "$empty" >/dev/null

  # Each platform's image: the binary and the CA bundle only, its platform, user,
  # entrypoint and labels.
  files="$(buildah "${store[@]}" from --quiet --pull=never --arch "$arch" "$local_tag")"
  mnt="$(buildah "${store[@]}" mount "$files")"
  content="$(cd "$mnt" && find . -type f | sort | tr '\n' ' ')"
  cmp -s "$mnt/reloadlet" "$bin" || die "$arch: /reloadlet in the image is not $bin"
  buildah "${store[@]}" rm "$files" >/dev/null
  [[ "$content" == "./etc/ssl/certs/ca-certificates.crt ./reloadlet " ]] \
    || die "$arch: the image holds [$content], expected the binary and the CA bundle only"
  want="linux/$arch 0:0 [/reloadlet] $version $revision Apache-2.0 https://github.com/reloadlet/reloadlet"
  got="$(buildah "${store[@]}" inspect --type image --format \
    '{{.OCIv1.OS}}/{{.OCIv1.Architecture}} {{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}} {{index .OCIv1.Config.Labels "org.opencontainers.image.version"}} {{index .OCIv1.Config.Labels "org.opencontainers.image.revision"}} {{index .OCIv1.Config.Labels "org.opencontainers.image.licenses"}} {{index .OCIv1.Config.Labels "org.opencontainers.image.source"}}' \
    "$local_tag")"
  [[ "$got" == "$want" ]] || die "$arch: image config [$got], expected [$want]"
  buildah "${store[@]}" manifest add "$image" "containers-storage:$local_tag" >/dev/null
done

# The index and both images as an OCI layout, then the SBOM beside them.
layout="$tmp/layout"
buildah "${store[@]}" manifest push --quiet --all --format oci "$image" "oci:$layout:$image" >/dev/null
python3 "$root/hack/oci_layout.py" attach-sbom "$layout" "$sbom" "$SOURCE_DATE_EPOCH"
# The archive: the layout's files in name order, every mtime SOURCE_DATE_EPOCH, owner 0.
rm -f "$archive"
tar -C "$layout" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -cf "$archive" .
[[ "$sbom" -ef "${archive%.tar}.cdx.json" ]] || cp "$sbom" "${archive%.tar}.cdx.json"

# Each platform's share of the archive (its manifest, config and layers) against its
# payload; allow 64 KiB for the tar headers, the manifests and the config.
while read -r arch bytes; do
  payload=$(($(stat -c %s "${binaries[$arch]}") + $(stat -c %s "$ca")))
  if ((bytes > payload + 65536)); then
    die "$arch: the image is $bytes bytes, more than the binary and the CA bundle ($payload) plus 64 KiB"
  fi
  sizes+=("linux/$arch $((bytes / 1024)) KiB compressed (binary $(($(stat -c %s "${binaries[$arch]}") / 1024)) KiB)")
done < <(python3 "$root/hack/oci_layout.py" sizes "$layout")
index_digest="$(python3 "$root/hack/oci_layout.py" index-digest "$layout")"
joined="$(printf '%s, ' "${sizes[@]}")"
echo "build-image: $image ($index_digest) -> ${archive#"$root"/}: ${joined%, }; CA bundle $(($(stat -c %s "$ca") / 1024)) KiB; SBOM attached" >&2
