#!/usr/bin/env bash
# The whole test suite, as root (the simulated node makes cgroups, tmpfs mounts and PID
# namespaces): the license policy (hack/check-licenses.sh), the multi-platform OCI image with
# its SBOM (hack/build-image.sh) and its reproducibility, the release artifacts, formatting
# and lints, every Rust test (unit, simulated-node integration under the chart's RBAC,
# parser fuzzing on stable, the image under podman with the chart's posture, the arm64
# binary under qemu-user), every RBAC rule the chart grants exercised by some test
# (hack/check-rbac-coverage.sh), and the rendered-manifest checks (with actionlint over
# .github/workflows).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "hack/test.sh: run as root (sudo hack/test.sh): the tests create cgroups, mounts and namespaces" >&2
    exit 2
fi

# Incremental caches only pay for a next build in the same tree; this run builds each crate
# once, and the caches would take another ~10 GB of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

hack/install-test-deps.sh
hack/install-manifest-tools.sh

echo "== licenses (hack/check-licenses.sh: cargo-deny, offline, deny.toml's allow-list)" >&2
hack/check-licenses.sh --self-test

echo "== image (hack/build-image.sh: static musl binaries for amd64 and arm64, one OCI index, SBOM)" >&2
hack/build-image.sh
# The image and runtime tests (tests/image_*.rs, tests/runtime_*.rs) run here, never skip;
# nor does a test that needs root (test-support/src/wait.rs, root_or_skip).
export RELOADLET_REQUIRE_IMAGE=1
export RELOADLET_REQUIRE_ROOT=1
# The arm64 binary hack/build-image.sh built, run under qemu-user (tests/arch_arm64.rs),
# never skipped either.
export RELOADLET_ARM64_BIN="$PWD/target/dist/arm64/reloadlet" RELOADLET_REQUIRE_ARM64=1

echo "== reproducible (hack/check-reproducible.sh: the image index rebuilt, same digest)" >&2
hack/check-reproducible.sh

echo "== release artifacts (hack/release-artifacts.sh, hack/publish.sh --dry-run)" >&2
hack/release-artifacts.sh --skip-image
hack/publish.sh --dry-run target/release-dist

echo "== cargo fmt / clippy" >&2
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test" >&2
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# The integration tests append the RBAC rule entries they used here (tests/common/rbac.rs).
rm -rf target/rbac-used
# --no-fail-fast: one run shows every failing test binary, not only the first.
cargo test --workspace --no-fail-fast 2>&1 | tee "$log"
passed=$(grep -E '^test result:' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -E '^test result:' "$log" | awk '{s += $6} END {print s + 0}')

echo "== RBAC least privilege: every granted rule exercised by a test" >&2
hack/check-rbac-coverage.sh

echo "== rendered manifests" >&2
hack/check-manifests.sh
hack/check-manifests.sh --self-test

# One plain closing line (also kept for .ci/run, which prints it last).
mkdir -p target
echo "tests: $passed passed, $failed failed" | tee target/test-summary.txt
