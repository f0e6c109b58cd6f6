#!/usr/bin/env python3
"""The static binary's code layout (hack/text-layout.sh runs this; docs/architecture.md,
"Code layout: the code that runs, first").

  text_layout.py profile BINARY PAGES -- CMD...
      Runs CMD (the node benchmark, whose static agent is BINARY) and writes to PAGES the
      file pages of BINARY's code that each process running it touched after it released
      its start-up code (host::memory::release_startup_code). BINARY must sit on a file
      system whose read-ahead is 0 (text-layout.sh mounts one), so that a fault reads the
      one page it needs; once a process's code loses hundreds of pages at once (the
      release), the file's pages no process maps are dropped from the page cache, so the
      kernel's fault-around, which maps only cached neighbours, can map only pages touched
      since. (Linux mm/: read-around on a fault needs the file's ra_pages, from the
      device's read_ahead_kb, file_ra_state_init; fault-around maps only cached, up-to-date
      pages, filemap_map_pages / next_uptodate_folio; POSIX_FADV_DONTNEED invalidates only
      unmapped pages, invalidate_mapping_pages; pagemap bit 63 is "present",
      Documentation/admin-guide/mm/pagemap.rst.)

  text_layout.py script BINARY PAGES OUT TARGET
      Writes the GNU ld script that places every function on those pages first, in
      BINARY's order, in an output section `.text.hot` before `.text`: the code that runs
      after start-up, together, so that the 64 KiB fault-around maps it and little else.
      A function whose name holds a legacy hash (`17h<16 hex>E`) is named with the hash
      left open when its path is the only one of that name (the hash changes with the
      crate's version, the path does not); a generic's instance, whose path its other
      instances share, by its whole name, which holds only for BINARY's TARGET (the hash
      covers the target too).
"""
import bisect
import collections
import os
import re
import struct
import subprocess
import sys
import threading


# Pages of code gone between two looks (20 ms apart, plus a look's own time) that mean the
# process released its start-up code (1 MiB: the release unmaps all of its code, 3 to 3.5 MiB
# here, and what runs faults back in; nothing else unmaps a process's code).
RELEASED_PAGES = 256


def profile(binary, pages_out, cmd):
    binary = os.path.realpath(binary)

    def drop_cache():
        fd = os.open(binary, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def code_mapping(pid):
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[1] == "r-xp" and os.path.realpath(parts[5]) == binary:
                    start, end = (int(x, 16) for x in parts[0].split("-"))
                    return start, end, int(parts[2], 16)
        return None

    def present_pages(pid, start, end, offset):
        with open(f"/proc/{pid}/pagemap", "rb") as f:
            f.seek(start // 4096 * 8)
            entries = f.read((end - start) // 4096 * 8)
        return {
            offset // 4096 + i
            for i in range(len(entries) // 8)
            if struct.unpack_from("<Q", entries, i * 8)[0] >> 63
        }

    processes = {}  # pid -> {"peak": KiB, "released": bool, "pages": set}
    done = threading.Event()

    def watch():
        while not done.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                pid = int(entry)
                try:
                    # readlink, not realpath: the benchmark runs thousands of processes,
                    # and a look must come round within the agent's start-up (~150 ms).
                    if os.readlink(f"/proc/{pid}/exe") != binary:
                        continue
                    mapping = code_mapping(pid)
                    if mapping is None:
                        continue
                    p = processes.setdefault(pid, {"peak": 0, "released": False, "pages": set()})
                    pages = present_pages(pid, *mapping)
                    p["peak"] = max(p["peak"], len(pages) * 4)
                    if not p["released"] and len(p["pages"] - pages) >= RELEASED_PAGES:
                        p["released"] = True
                        drop_cache()
                        pages = present_pages(pid, *mapping)
                    p["pages"] = pages
                except OSError:
                    pass  # the process ended between two reads
            done.wait(0.02)

    drop_cache()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        rc = subprocess.call(cmd)
    finally:
        done.set()
        watcher.join()
    pages = set()
    for p in processes.values():
        if not p["released"]:
            p["pages"] = set()
    for pid, p in sorted(processes.items()):
        state = "released its start-up code" if p["released"] else "never released its start-up code"
        print(f"text-layout: pid {pid}: code peaked at {p['peak']} KiB, {state}; "
              f"{len(p['pages'])} pages touched after", file=sys.stderr)
        pages |= p["pages"]
    if rc != 0:
        sys.exit(f"text-layout: the benchmark failed (exit {rc})")
    if not pages:
        sys.exit("text-layout: no process of the binary released its start-up code: nothing profiled")
    with open(pages_out, "w") as f:
        f.writelines(f"{p}\n" for p in sorted(pages))
    print(f"text-layout: {len(pages)} pages ({len(pages) * 4} KiB) of code run after start-up",
          file=sys.stderr)


HASH = re.compile(r"17h[0-9a-f]{16}E")
LLVM = re.compile(r"\.llvm\.\d+")


def script(binary, pages_file, out, target):
    with open(pages_file) as f:
        pages = sorted(int(line) for line in f if line.strip())
    segments = []  # (file offset, address, size) of executable PT_LOADs
    for line in subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in f[6:]:
            segments.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
    hot = []  # address ranges of the pages
    for page in pages:
        offset = page * 4096
        for seg_offset, address, size in segments:
            if seg_offset <= offset < seg_offset + size:
                hot.append((address + offset - seg_offset, address + offset - seg_offset + 4096))
    starts = [start for start, _ in hot]

    def on_hot_page(address, size):
        end = address + max(size, 1)
        i = bisect.bisect_right(starts, end - 1) - 1
        return i >= 0 and hot[i][1] > address

    functions = []
    for line in subprocess.run(["nm", "-S", "--defined-only", "-n", binary], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tTwW":
            functions.append((int(f[0], 16), int(f[1], 16), f[3]))
    open_hash = lambda name: LLVM.sub("*", HASH.sub("17h*E", name))
    paths = collections.Counter(open_hash(name) for _, _, name in functions)
    names, placed, size_hot = [], set(), 0
    for address, size, name in functions:
        if not on_hot_page(address, size):
            continue
        pattern = open_hash(name)
        if paths[pattern] > 1:
            pattern = LLVM.sub("*", name)
        if pattern in placed or any(c in pattern for c in '[]?"'):
            continue
        placed.add(pattern)
        names.append(pattern)
        size_hot += size
    with open(out, "w") as f:
        f.write(
            "/* Generated by hack/text-layout.sh: do not edit. The functions the node benchmark's\n"
            "   static agent ran after start-up, first and together (docs/architecture.md, \"Code\n"
            f"   layout: the code that runs, first\"). Profiled: {len(pages)} pages of code;\n"
            f"   hot-bytes: {size_hot}\n"
            f"   profiled-target: {target}\n"
            "   A name no longer in the binary places nothing. Regenerate after a change of the\n"
            "   toolchain, of the version (in every hash) or of the agent's steady-state path;\n"
            "   hack/build-release.sh warns when it places less than half of it. */\n"
            "SECTIONS\n{\n  .text.hot :\n  {\n")
        f.writelines(f"    *(.text.{name})\n" for name in names)
        f.write("  }\n}\nINSERT BEFORE .text;\n")
    print(f"text-layout: {len(names)} functions, {size_hot} bytes, on {len(pages)} pages -> {out}",
          file=sys.stderr)


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) >= 4 and args[0] == "profile" and args[3] == "--":
        profile(args[1], args[2], args[4:])
    elif len(args) == 5 and args[0] == "script":
        script(args[1], args[2], args[3], args[4])
    else:
        sys.exit(__doc__)
