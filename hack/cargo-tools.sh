#!/usr/bin/env bash
# Installs the cargo subcommands the release build and its checks use, from crates.io, each
# only when that version is missing (`cargo install --locked`: the tool's own lock file, so a
# new release of one of its dependencies cannot change it):
#   cargo-auditable   embeds the dependency list in the binary (hack/build-release.sh)
#   cargo-cyclonedx   the CycloneDX SBOM from Cargo.lock (hack/sbom.sh)
#   cargo-deny        the license and source policy of deny.toml (hack/check-licenses.sh)
# They land in $CARGO_HOME/bin. Compiling all three takes several minutes once per machine.
#
#   hack/cargo-tools.sh              all three
#   hack/cargo-tools.sh NAME...      only these (e.g. cargo-auditable, for hack/build-release.sh)
set -euo pipefail

tools=(cargo-auditable@0.7.7 cargo-cyclonedx@0.5.9 cargo-deny@0.20.2)

for spec in "${tools[@]}"; do
  name="${spec%@*}" want="${spec#*@}"
  [[ $# -eq 0 || " $* " == *" $name "* ]] || continue
  have="$(cargo install --list 2>/dev/null | sed -n "s/^$name v\([^:]*\):\$/\1/p")"
  [[ "$have" == "$want" ]] && continue
  echo "cargo-tools: cargo install --locked $spec (was: ${have:-absent})" >&2
  start=$SECONDS
  nice -n 10 cargo install --locked --quiet "$spec"
  echo "cargo-tools: $spec in $((SECONDS - start)) s" >&2
done
