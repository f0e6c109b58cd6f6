#!/usr/bin/env bash
# Fuzzes reloadlet's parsers of user and kernel input: cgroup paths, container IDs, annotations.
#
#   hack/fuzz.sh [seconds-per-target]     (default 60)
#
# With a nightly toolchain: cargo-fuzz (libFuzzer), installed here if missing, runs each
# target in fuzz/fuzz_targets for the given time. New inputs go to a scratch dir, so the
# checked-in seed corpus (fuzz/corpus/<target>) only changes by hand; crashes land in
# fuzz/artifacts/<target>/ and replay with `cargo +nightly fuzz run <target> <file>`.
#
# Without nightly (cargo-fuzz needs it), the same properties (fuzz/checks.rs) run on
# stable as a bounded random search: tests/fuzz_parsers.rs, scaled to the time given.
#
# The parsers are safe Rust, so no sanitizer is used (a panic is the failure); this
# also keeps the build of the whole crate for fuzzing affordable.
set -euo pipefail

cd "$(dirname "$0")/.."
secs="${1:-60}"
targets=(cgroup_paths container_id annotations)

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "no nightly toolchain: running the stable property search instead" >&2
    RELOADLET_FUZZ_ITERS=$((secs * 20000)) \
        RELOADLET_FUZZ_SEED="${RELOADLET_FUZZ_SEED:-$RANDOM$RANDOM}" \
        cargo test --test fuzz_parsers -- --nocapture
    exit
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for target in "${targets[@]}"; do
    mkdir -p "$scratch/$target"
    echo "== fuzzing $target for ${secs}s" >&2
    # libFuzzer reports every new input; keep its log and show only the verdict (all of it
    # on a failure).
    if ! cargo +nightly fuzz run --fuzz-dir fuzz --sanitizer none "$target" "$scratch/$target" "fuzz/corpus/$target" \
        -- -max_total_time="$secs" -max_len=4096 >"$scratch/$target.log" 2>&1; then
        cat "$scratch/$target.log" >&2
        echo "fuzz: $target failed (input saved under fuzz/artifacts/$target/)" >&2
        exit 1
    fi
    grep -E '^Done [0-9]+ runs' "$scratch/$target.log" | sed "s/^/fuzz $target: /" >&2
done
