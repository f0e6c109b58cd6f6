#!/usr/bin/env bash
# Regenerates hack/text-layout.ld, the release build's code layout: the functions the agent
# runs after start-up, placed first and together (docs/architecture.md, "Code layout: the
# code that runs, first"). Run it after a toolchain change or a version bump, or when
# hack/build-release.sh says less than half of the layout is placed. Needs root (a loop
# mount, /proc/PID/pagemap) and what hack/bench.sh needs; about 10 minutes on the 2-core
# test machine.
#
#   hack/text-layout.sh            profile and rewrite hack/text-layout.ld
#
# 1. Builds the image's static binary (hack/build-release.sh --arch amd64).
# 2. Copies it onto a small ext4 file system of its own (a loop device, read-ahead 0), so
#    a page fault reads only the page it needs; nothing of the machine's disks is changed.
# 3. Runs the node benchmark's swaps (reduced: 400 swaps, no idle phase, no bursts) with
#    that copy as its static agent, under `hack/text_layout.py profile`, which records the
#    pages of code each agent touches after it released its start-up code.
# 4. `hack/text_layout.py script` turns the pages into the linker script.
set -euo pipefail
cd "$(dirname "$0")/.."

[[ $EUID -eq 0 ]] || { echo "text-layout: needs root (a loop mount, /proc/PID/pagemap)" >&2; exit 1; }
for tool in losetup mkfs.ext4 readelf nm python3; do
  command -v "$tool" >/dev/null || { echo "text-layout: needs $tool" >&2; exit 1; }
done

work="$(mktemp -d /tmp/reloadlet-text-layout.XXXXXX)"
dev=""
# The benchmark raises fs.inotify.max_user_instances for its sidecar fleet and restores it;
# restored here too if it is killed first, as hack/bench.sh does.
instances=/proc/sys/fs/inotify/max_user_instances
original_instances="$(cat "$instances")"
cleanup() {
  echo "$original_instances" >"$instances"
  if mountpoint -q "$work/mnt" 2>/dev/null; then umount "$work/mnt"; fi
  [[ -z "$dev" ]] || losetup -d "$dev" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

hack/build-release.sh --arch amd64 --out "$work/bin"

truncate -s 64M "$work/fs.img"
mkfs.ext4 -q -F "$work/fs.img"
mkdir "$work/mnt"
dev="$(losetup --find --show "$work/fs.img")"
echo 0 >"/sys/block/${dev#/dev/}/queue/read_ahead_kb"
mount "$dev" "$work/mnt"
cp "$work/bin/reloadlet" "$work/mnt/reloadlet"
sync

cargo build --release --quiet --examples
BENCH_SWAPS=400 BENCH_IDLE_SECS=0 BENCH_BURSTS=0 BENCH_HELD_BURSTS=0 \
  BENCH_STATIC_BIN="$work/mnt/reloadlet" \
  python3 hack/text_layout.py profile "$work/mnt/reloadlet" "$work/pages" -- \
  cargo bench -q --bench node >"$work/bench.log" || {
  tail -n 20 "$work/bench.log" >&2
  exit 1
}
python3 hack/text_layout.py script "$work/bin/reloadlet" "$work/pages" hack/text-layout.ld \
  "$(hack/build-release.sh --arch amd64 --print-target)"
