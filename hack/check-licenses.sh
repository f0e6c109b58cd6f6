#!/usr/bin/env bash
# The dependency tree against deny.toml with cargo-deny: licenses (an allow-list of
# permissive licenses), bans (no wildcard versions) and sources (crates.io only). Offline:
# cargo-deny (--frozen: --locked and --offline) reads the crates cargo has already fetched
# (`cargo fetch --locked` first, the one step that needs crates.io) and fetches no advisory
# database (the advisories check needs GitHub and runs in .github/workflows/release.yml).
#
#   hack/check-licenses.sh            check; exit 1 on a license outside the allow-list
#   hack/check-licenses.sh --self-test  also prove it fails: run the check against a copy
#                                     of deny.toml without "MIT" and expect a rejection
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-deny >/dev/null || hack/cargo-tools.sh
cargo fetch --locked --quiet
deny=(cargo deny --frozen --log-level error)
"${deny[@]}" check licenses bans sources
echo "check-licenses: every dependency's license is on deny.toml's allow-list" >&2

if [[ "${1:-}" == --self-test ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  grep -v '^  "MIT",$' deny.toml >"$tmp/deny.toml"
  if "${deny[@]}" --config "$tmp/deny.toml" check licenses >"$tmp/log" 2>&1; then
    echo "check-licenses: self-test FAILED: a policy without MIT accepted the tree" >&2
    exit 1
  fi
  grep -q 'license-not-encountered\|rejected' "$tmp/log" \
    || { echo "check-licenses: self-test: failed, but not on a license:" >&2; tail -n 5 "$tmp/log" >&2; exit 1; }
  echo "check-licenses: self-test passed (without MIT on the list, the check fails)" >&2
fi
