#!/usr/bin/env bash
# The CycloneDX SBOM of reloadlet's release binaries, from Cargo.lock, with cargo-cyclonedx
# (crates.io; hack/cargo-tools.sh): the crates compiled into the binary for each shipped
# target (x86_64- and aarch64-unknown-linux-musl; build-time-only crates and dev-dependencies
# left out), each with its version, purl, license and hashes, merged into one document.
# Reproducible: SOURCE_DATE_EPOCH (the commit's time) is the document's timestamp and
# cargo-cyclonedx then writes no random serial number.
#
#   hack/sbom.sh [--out FILE]    default target/dist/reloadlet.cdx.json
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/target/dist/reloadlet.cdx.json"
[[ "${1:-}" != --out ]] || out="${2:?--out needs a path}"

command -v cargo-cyclonedx >/dev/null || hack/cargo-tools.sh cargo-cyclonedx
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
tmp="$(mktemp -d)"
# cargo-cyclonedx writes beside each workspace member's Cargo.toml: take ours, leave no file.
name=".reloadlet-sbom-$$"
trap 'rm -rf "$tmp"; rm -f "$root/$name.json" "$root/nodesim/$name.json" "$root/bench-support/$name.json" "$root/test-support/$name.json"' EXIT
targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
for target in "${targets[@]}"; do
  cargo cyclonedx --quiet --format json --spec-version 1.5 --no-build-deps \
    --target "$target" --override-filename "$name"
  mv "$root/$name.json" "$tmp/$target.json"
done
mkdir -p "$(dirname "$out")"
python3 - "$out" "${targets[@]/#/$tmp/}" <<'PY'
import json, sys
out, *parts = sys.argv[1], *[p + ".json" for p in sys.argv[2:]]
docs = [json.load(open(p)) for p in parts]
bom = docs[0]
components = {c["bom-ref"]: c for d in docs for c in d.get("components", [])}
depends = {}
for d in docs:
    for dep in d.get("dependencies", []):
        depends.setdefault(dep["ref"], set()).update(dep.get("dependsOn", []))
bom["components"] = [components[k] for k in sorted(components)]
bom["dependencies"] = [{"ref": k, "dependsOn": sorted(v)} for k, v in sorted(depends.items())]
bom["metadata"].setdefault("properties", []).append(
    {"name": "reloadlet:targets", "value": " ".join(p.rsplit("/", 1)[1][: -len(".json")] for p in parts)})
with open(out, "w") as f:
    json.dump(bom, f, indent=1, sort_keys=True)
    f.write("\n")
print(f"sbom: {len(bom['components'])} components -> {out}", file=sys.stderr)
PY
