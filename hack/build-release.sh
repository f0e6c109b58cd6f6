#!/usr/bin/env bash
# Builds reloadlet's release binary. The one build command shared by the
# Dockerfile (both its dependency layer and its final build) and CI.
#
#   hack/build-release.sh                      host target -> target/dist/reloadlet
#   hack/build-release.sh --arch arm64         static aarch64-unknown-linux-musl
#   hack/build-release.sh --target TRIPLE      any installed target
#   hack/build-release.sh --arch amd64 --print-target   prints the triple, builds nothing
#   hack/build-release.sh --arch amd64 --deps-only      builds dependencies only
#
# --arch takes Docker's TARGETARCH (amd64, arm64) or uname -m (x86_64, aarch64)
# and selects the static musl target. --deps-only works from the manifests
# alone (Cargo.toml, Cargo.lock, nodesim/Cargo.toml): it stubs the missing
# crate roots and declared targets (benches/node.rs), builds, then removes the
# stubs and the workspace crates'
# artefacts so the next build compiles the real sources. --out DIR (default
# target/dist) receives the binary.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

target=""
out="target/dist"
deps_only=false
print_target=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch)
      [[ $# -ge 2 ]] || usage
      case "$2" in
        amd64 | x86_64) target=x86_64-unknown-linux-musl ;;
        arm64 | aarch64) target=aarch64-unknown-linux-musl ;;
        *) echo "build-release: unsupported architecture '$2' (amd64 or arm64)" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --target) [[ $# -ge 2 ]] || usage; target="$2"; shift 2 ;;
    --out) [[ $# -ge 2 ]] || usage; out="$2"; shift 2 ;;
    --deps-only) deps_only=true; shift ;;
    --print-target) print_target=true; shift ;;
    -h | --help) usage ;;
    *) echo "build-release: unknown argument '$1'" >&2; usage ;;
  esac
done

if $print_target; then
  [[ -n "$target" ]] || { echo "build-release: --print-target needs --arch or --target" >&2; exit 2; }
  echo "$target"
  exit 0
fi

cd "$(dirname "$0")/.."

cargo_args=(build --release --locked -p reloadlet)
bin_dir="${CARGO_TARGET_DIR:-target}/release"
if [[ -n "$target" ]]; then
  cargo_args+=(--target "$target")
  bin_dir="${CARGO_TARGET_DIR:-target}/$target/release"
  if [[ "$target" == *-linux-musl ]]; then
    # ring compiles C: use musl's gcc wrapper. cc-rs would look for
    # aarch64-linux-musl-gcc on arm64, which Debian does not ship.
    cc_var="CC_${target//-/_}"
    if [[ -z "${!cc_var:-}" ]]; then
      command -v musl-gcc >/dev/null || {
        echo "build-release: $target needs musl-gcc (apt-get install musl-tools)" >&2
        exit 1
      }
      export "$cc_var=musl-gcc"
    fi
  fi
fi

if $deps_only; then
  stubs=()
  # Every explicit target in the manifests needs a file (benches are declared in Cargo.toml).
  for f in src/main.rs src/lib.rs nodesim/src/lib.rs benches/node.rs; do
    if [[ ! -e "$f" ]]; then
      mkdir -p "$(dirname "$f")"
      if [[ "$f" == */main.rs || "$f" == benches/* ]]; then echo 'fn main() {}' >"$f"; else : >"$f"; fi

      stubs+=("$f")
    fi
  done
  cargo "${cargo_args[@]}"
  clean_args=(clean --release -p reloadlet)
  [[ -n "$target" ]] && clean_args+=(--target "$target")
  cargo "${clean_args[@]}"
  [[ ${#stubs[@]} -eq 0 ]] || rm -f "${stubs[@]}"
  echo "build-release: dependencies built${target:+ for $target}"
  exit 0
fi

cargo "${cargo_args[@]}"

if [[ "$target" == *-linux-musl ]] && command -v readelf >/dev/null; then
  # A static binary has no program interpreter and no shared libraries.
  if readelf -l "$bin_dir/reloadlet" | grep -q 'INTERP' \
    || readelf -d "$bin_dir/reloadlet" | grep -q '(NEEDED)'; then
    echo "build-release: $bin_dir/reloadlet is not statically linked" >&2
    exit 1
  fi
fi

mkdir -p "$out"
cp "$bin_dir/reloadlet" "$out/reloadlet"
echo "build-release: $out/reloadlet${target:+ ($target)}"
