#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine (idempotent):
# nginx (the real workload the tests reload), util-linux's unshare/nsenter, tini, dumb-init
# and catatonit (real signal-forwarding inits), buildah, podman, conmon, runc, containerd and
# busybox-static (the image and real-runtime tests), musl-tools (the static binary), the
# aarch64 cross gcc and qemu-user-static (the arm64 binary, built and run); checks that cargo
# is on the PATH (the Rust toolchain is the one prerequisite), then adds the two musl targets
# through rustup and installs cargo-auditable, cargo-cyclonedx and cargo-deny from crates.io
# when missing (hack/cargo-tools.sh).
#
# It touches nothing it did not start: the tests and the demo run their own nginx
# instances (own config, pid file and error log under a temporary directory, on a free
# loopback port), so an nginx already running on the host is left alone, and the nginx
# service Debian's package would start on install is not started (hack/install-lib.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=hack/install-lib.sh
source "$here/install-lib.sh"

if ! command -v cargo >/dev/null 2>&1; then
  msg="install-test-deps: cargo is not on the PATH"
  if [[ -n "${SUDO_USER:-}" ]]; then
    # sudo resets PATH (secure_path) and HOME: pass the invoking user's toolchain on.
    msg+=$'\n  under sudo, keep your toolchain: sudo env "PATH=$PATH" "RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}" "CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}" hack/demo.sh   (or hack/test.sh)'
  else
    msg+=$'\n  install Rust: https://rustup.rs'
  fi
  echo "$msg" >&2
  exit 1
fi

need=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx)
# A real program that reloads over HTTP (tests/http_action.rs); its service is not started
# on install (apt_install's policy-rc.d), the tests run their own.
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v unshare >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
# Signal-forwarding inits the signal tests run as PID 1 (tests/signal_handling.rs).
for init in tini dumb-init catatonit; do
  command -v "$init" >/dev/null 2>&1 || need+=("$init")
done
# The image and real container runtimes (tests/image_*.rs, tests/runtime_*.rs,
# hack/build-image.sh): buildah builds the image, podman (with conmon, runc and catatonit, its
# pause process's init) runs it, containerd 1.6 with ctr runs workloads, busybox-static gives
# the containers a shell. musl-tools: musl-gcc for the static binary the image ships
# (hack/build-release.sh). No daemon is started: the tests start containerd themselves.
command -v buildah >/dev/null 2>&1 || need+=(buildah)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v conmon >/dev/null 2>&1 || need+=(conmon)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 || need+=(containerd)
[[ -x /bin/busybox ]] || need+=(busybox-static)
command -v musl-gcc >/dev/null 2>&1 || need+=(musl-tools)
# The arm64 build and run (hack/build-release.sh --arch arm64, tests/arch_arm64.rs): Debian's
# aarch64 cross gcc compiles ring's C and drives the link (libc6-dev-arm64-cross: the headers
# ring's C includes, a recommendation apt skips here), qemu-user-static runs the binary.
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
[[ -e /usr/aarch64-linux-gnu/include/string.h ]] || need+=(libc6-dev-arm64-cross)
command -v qemu-aarch64-static >/dev/null 2>&1 || need+=(qemu-user-static)
if ((${#need[@]})); then
  apt_install "${need[@]}"
  for svc in nginx containerd; do
    if [[ " ${need[*]} " == *" $svc "* ]] && command -v systemctl >/dev/null 2>&1; then
      echo "install-test-deps: installed $svc without starting its service; Debian enables it at boot" \
        "(to keep it off: systemctl disable $svc)" >&2
    fi
  done
fi

# The static musl targets of both shipped architectures (rustup's rust-std, self-contained).
for target in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    rustup target add "$target" >&2
  fi
done
"$here/cargo-tools.sh"
