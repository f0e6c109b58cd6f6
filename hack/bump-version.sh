#!/usr/bin/env bash
# Sets reloadlet's release version everywhere it is written down, or checks
# that those places agree:
#   Cargo.toml [package] version, reloadlet's entry in Cargo.lock,
#   deploy/chart/reloadlet/Chart.yaml version, appVersion and the artifacthub.io/images tag,
#   deploy/base/kustomization.yaml images newTag;
# and CHANGELOG.md: setting a version turns its "## Unreleased" section into "## VERSION"
# (a new empty "## Unreleased" above it); --check wants a section for the version.
#
#   hack/bump-version.sh 0.2.0     set the version
#   hack/bump-version.sh --check   exit 1 unless every place holds the same version
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
  "" | -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

exec python3 - "$root" "$1" <<'PY'
import re
import sys
from pathlib import Path

root, arg = Path(sys.argv[1]), sys.argv[2]
SEMVER = r"[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?"

# (file, pattern whose group 2 is the version, description)
PLACES = [
    ("Cargo.toml", r'(?ms)(^\[package\]\n(?:(?!^\[).)*?^version = ")([^"]+)(")', "Cargo.toml [package] version"),
    ("Cargo.lock", r'(?m)(^name = "reloadlet"\nversion = ")([^"]+)(")', "Cargo.lock reloadlet"),
    ("deploy/chart/reloadlet/Chart.yaml", r"(?m)(^version: )(\S+)()$", "Chart.yaml version"),
    ("deploy/chart/reloadlet/Chart.yaml", r'(?m)(^appVersion: ")([^"]+)(")', "Chart.yaml appVersion"),
    ("deploy/base/kustomization.yaml", r"(?m)(^    newTag: )(\S+)()$", "kustomization.yaml newTag"),
    ("deploy/chart/reloadlet/Chart.yaml", r"(?m)(^      image: ghcr\.io/reloadlet/reloadlet:)(\S+)()$", "Chart.yaml artifacthub.io/images"),
]

def find(text, pattern, what):
    matches = list(re.finditer(pattern, text))
    if len(matches) != 1:
        sys.exit(f"bump-version: {what}: expected one match, found {len(matches)}")
    return matches[0]

if arg == "--check":
    seen = {}
    for file, pattern, what in PLACES:
        seen[what] = find((root / file).read_text(), pattern, what).group(2)
    for what, v in seen.items():
        print(f"{v:12} {what}")
    if len(set(seen.values())) != 1:
        sys.exit("bump-version: versions disagree")
    version = next(iter(seen.values()))
    if not re.search(rf"(?m)^## {re.escape(version)}$", (root / "CHANGELOG.md").read_text()):
        sys.exit(f"bump-version: CHANGELOG.md has no '## {version}' section")
    print(f"{version:12} CHANGELOG.md section")
    print(f"bump-version: all at {next(iter(seen.values()))}")
    sys.exit(0)

if not re.fullmatch(SEMVER, arg):
    sys.exit(f"bump-version: '{arg}' is not a semantic version (e.g. 0.2.0)")
texts = {}
for file, pattern, what in PLACES:
    text = texts.get(file, (root / file).read_text())
    m = find(text, pattern, what)
    texts[file] = text[: m.start(2)] + arg + text[m.end(2) :]
changelog = (root / "CHANGELOG.md").read_text()
if not re.search(rf"(?m)^## {re.escape(arg)}$", changelog):
    if not re.search(r"(?m)^## Unreleased$", changelog):
        sys.exit("bump-version: CHANGELOG.md has neither '## Unreleased' nor '## " + arg + "'")
    texts["CHANGELOG.md"] = re.sub(r"(?m)^## Unreleased$", f"## Unreleased\n\n## {arg}", changelog, count=1)
for file, text in texts.items():
    (root / file).write_text(text)
    print(f"bump-version: {file}")
print(f"bump-version: now {arg}; run hack/check-manifests.sh, and hack/text-layout.sh as root"
      " (the version is in the symbol names the release build's code layout lists)")
PY
