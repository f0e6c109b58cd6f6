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
# alone (Cargo.toml, Cargo.lock and the workspace members' Cargo.toml): it stubs the missing
# crate roots and declared targets (benches/node.rs), builds, then removes the
# stubs and the workspace crates'
# artefacts so the next build compiles the real sources. --out DIR (default
# target/dist) receives the binary.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

target=""
layout=""
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

# `cargo auditable build`: the binary carries its dependency list (name, version, source of
# every crate compiled in) in a `.dep-v0` section, which scanners (Trivy, Grype, Syft,
# cargo-audit bin) read from the binary itself.
command -v cargo-auditable >/dev/null || hack/cargo-tools.sh cargo-auditable
cargo_args=(auditable build --release --locked -p reloadlet)
target_dir="${CARGO_TARGET_DIR:-target}"
bin_dir="$target_dir/release"
if [[ -n "$target" ]]; then
  cargo_args+=(--target "$target")
  bin_dir="$target_dir/$target/release"
  # Reproducible release builds (hack/check-reproducible.sh): no build path in the binary
  # (panic locations of registry crates and of code generated into OUT_DIR carry absolute
  # paths), whatever the checkout's, CARGO_HOME's or the target dir's location; rustc takes
  # the last matching prefix, so the target dir (often inside the checkout) comes last.
  # SOURCE_DATE_EPOCH for any build script that stamps a time. Only for --target builds:
  # the host build shares target/release with `cargo build --release`, whose flags these
  # would otherwise keep invalidating.
  export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
  flags=()
  read -r -a flags <<<"${RUSTFLAGS:-}"
  flags+=("--remap-path-prefix=$PWD=/reloadlet"
    "--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
    "--remap-path-prefix=$(realpath -m "$target_dir")=/target")
  if [[ "$target" == *-linux-musl && -f hack/text-layout.ld ]]; then
    # The image's binary places the code the agent runs after start-up first and together
    # (hack/text-layout.ld, from a profile of the node benchmark by hack/text-layout.sh;
    # docs/architecture.md, "Code layout: the code that runs, first"): the kernel maps code
    # 64 KiB at a time around each fault, so code that runs spread over all of `.text`
    # keeps most of it resident. build.rs links the `reloadlet` binary with it (GNU ld, of
    # musl-gcc or of the cross gcc for arm64, reads it as an addition to its own script); a
    # name the build no longer has places nothing.
    layout="$PWD/hack/text-layout.ld"
    export RELOADLET_TEXT_LAYOUT="$layout"
  fi
  CARGO_ENCODED_RUSTFLAGS="$(IFS=$'\x1f'; echo "${flags[*]}")"
  export CARGO_ENCODED_RUSTFLAGS
  if [[ "$target" == *-linux-musl ]]; then
    # Rust's musl targets are self-contained: rustup's rust-std ships musl's libc.a and
    # crt objects, so the only C is ring's (a few freestanding files and assembly). For it:
    # - on the target's own architecture, musl's gcc wrapper (musl-tools);
    # - across architectures (arm64 on amd64), Debian's cross gcc
    #   (gcc-aarch64-linux-gnu) as compiler and as linker driver. Its glibc headers are
    #   never linked: rustc links with -nostartfiles -nodefaultlibs, against the target's
    #   self-contained crt and libc.a. cc-rs would otherwise look for
    #   aarch64-linux-musl-gcc, which Debian does not ship.
    # Why this route and not cargo-zigbuild + ziglang: two apt packages that are already
    # on the test machine's list (no 50 MB zig toolchain from PyPI, no cargo install), and
    # the same rustc, std and LTO as the amd64 build; measured on the 2-core test machine
    # (README, "Release figures") the arm64 build takes as long as the amd64 one.
    arch="${target%%-*}"
    cc_var="CC_${target//-/_}"
    ld_var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$target")_LINKER"
    if [[ "$arch" == "$(uname -m)" ]]; then
      if [[ -z "${!cc_var:-}" ]]; then
        command -v musl-gcc >/dev/null || {
          echo "build-release: $target needs musl-gcc (apt-get install musl-tools)" >&2
          exit 1
        }
        export "$cc_var=musl-gcc"
      fi
    else
      cross="$arch-linux-gnu-gcc"
      if [[ -z "${!cc_var:-}" || -z "${!ld_var:-}" ]]; then
        command -v "$cross" >/dev/null || {
          echo "build-release: $target on $(uname -m) needs $cross (apt-get install gcc-${arch//_/-}-linux-gnu)" >&2
          exit 1
        }
      fi
      [[ -n "${!cc_var:-}" ]] || export "$cc_var=$cross"
      [[ -n "${!ld_var:-}" ]] || export "$ld_var=$cross"
    fi
  fi
fi

if $deps_only; then
  stubs=()
  # Every explicit target in the manifests needs a file (benches are declared in Cargo.toml).
  for f in src/main.rs src/lib.rs nodesim/src/lib.rs bench-support/src/lib.rs test-support/src/lib.rs benches/node.rs; do
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

if [[ -n "$layout" ]]; then
  # How much of the profiled code the layout placed: little means the names went stale.
  placed="$(readelf -SW "$bin_dir/reloadlet" \
    | sed -n 's/.* \.text\.hot  *PROGBITS  *[0-9a-f]* [0-9a-f]* \([0-9a-f]*\) .*/\1/p')"
  placed=$((16#${placed:-0}))
  profiled="$(sed -n 's/.*hot-bytes: \([0-9]*\).*/\1/p' "$layout")"
  profiled_target="$(sed -n 's/.*profiled-target: \([^ ]*\).*/\1/p' "$layout")"
  if [[ "$target" != "$profiled_target" ]]; then
    # A generic's instance is named with its hash, which differs per target: on another
    # target only the functions named with the hash left open are placed.
    echo "build-release: text layout: $((placed / 1024)) KiB of code placed first (profiled on $profiled_target: $((profiled / 1024)) KiB there)"
  elif ((placed * 2 < ${profiled:-0})); then
    echo "build-release: warning: the text layout placed $((placed / 1024)) KiB of the $((profiled / 1024)) KiB it names: regenerate it (hack/text-layout.sh)" >&2
  else
    echo "build-release: text layout: $((placed / 1024)) KiB of code placed first ($((profiled / 1024)) KiB profiled)"
  fi
fi

mkdir -p "$out"
cp "$bin_dir/reloadlet" "$out/reloadlet"
echo "build-release: $out/reloadlet${target:+ ($target)}"
