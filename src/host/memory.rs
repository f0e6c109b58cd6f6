//! Giving freed heap back to the OS after the one-off spike of decoding the first pod list.
//!
//! glibc keeps freed memory in its arenas; `malloc_trim` returns it. The release image is a
//! static musl build, whose allocator returns memory by itself: there this does nothing.

/// Returns free heap pages to the OS (glibc only).
pub fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// glibc gives each thread its own malloc arena; for a small agent that only inflates RSS.
/// Call once at start, before other threads exist.
pub fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: called before any other thread exists; mallopt only sets a tunable.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Drops the page-table entries of the executable's own code and constants, so that only
/// what is still in use is mapped again. Call once, after start-up.
///
/// Start-up runs code that never runs again (argument parsing, the kube client's
/// configuration, TLS set-up, the first list); with the kernel's fault-around (a read fault
/// on a file mapping also maps the neighbouring pages already in the page cache, 64 KiB
/// around it: mm/memory.c, `do_read_fault` → `should_fault_around` → `do_fault_around`,
/// `fault_around_pages` = 65536 >> PAGE_SHIFT) that leaves about 6 of the 7 MiB of text
/// resident, while about 1.7 MiB is touched again afterwards (measured with
/// `/proc/PID/clear_refs` and `Referenced:` in smaps; docs/architecture.md). Fault-around
/// cannot be turned down for one process: `MADV_RANDOM` changes readahead only, the size is
/// one system-wide debugfs knob (`fault_around_bytes`), and the only per-mapping exception is
/// a userfaultfd registration (`uffd_disable_fault_around`).
///
/// `MADV_DONTNEED` on a private file mapping drops the page-table entries, and with them any
/// private copy of a page: "subsequent accesses of pages in the range ... will result in
/// repopulating the memory contents from the up-to-date contents of the underlying mapped
/// file" (madvise(2)). For a page the process never wrote that is the same bytes, from the
/// page cache, as a minor fault. For a page it did write (the loader's relocations in RELRO,
/// `.data`) the write would be lost. So only pages that can never have been written are
/// touched, each condition checked on its own:
/// - they lie wholly inside a `PT_LOAD` segment of this executable without `PF_W`, per its
///   program headers as the loader reports them (`dl_iterate_phdr`; the segment that holds
///   this very function names the executable, whatever its path is in the container's mount
///   namespace), pages shared with a neighbouring segment left out;
/// - the mapping over them is private and not writable (`r-xp` or `r--p`) and holds no private
///   copy (`Anonymous: 0 kB` in `/proc/self/smaps`: a text relocation or a debugger's
///   breakpoint would show there).
///
/// Unmapped, clean file pages are what the kernel reclaims first, and what the kubelet's
/// working set (usage − inactive_file) stops counting once they go inactive. Returns the bytes
/// whose mappings were dropped.
pub fn release_startup_code() -> usize {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for (start, end) in releasable(
        &read_only_segments(),
        &unmodified_read_only_mappings(&smaps),
    ) {
        // SAFETY: the range lies in a non-writable segment of this executable, under a
        // private read-only mapping with no private (copied-on-write) page; MADV_DONTNEED
        // there only drops page-table entries, and a later access faults the same file
        // contents back in.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += end - start;
        }
    }
    released
}

/// The page-aligned address ranges wholly inside the non-writable `PT_LOAD` segments of the
/// executable this code is in (rounded inwards: a page shared with a writable segment is
/// left out).
fn read_only_segments() -> Vec<(usize, usize)> {
    struct Search {
        anchor: usize,
        found: Vec<(usize, usize)>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` whose `dlpi_phdr` points to
        // `dlpi_phnum` program headers, and `data` is the `Search` passed below.
        let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
        let headers = if info.dlpi_phdr.is_null() {
            &[][..]
        } else {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        let base = info.dlpi_addr as usize;
        let loads = headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
        let holds_anchor = loads.clone().any(|h| {
            let start = base + h.p_vaddr as usize;
            (start..start + h.p_memsz as usize).contains(&search.anchor)
        });
        if !holds_anchor {
            return 0; // another object (a shared library): not ours to touch
        }
        let pages = page_size();
        for h in loads.filter(|h| h.p_flags & libc::PF_W == 0) {
            let start = (base + h.p_vaddr as usize).next_multiple_of(pages);
            let end = (base + (h.p_vaddr + h.p_memsz) as usize) / pages * pages;
            if start < end {
                search.found.push((start, end));
            }
        }
        1 // found: stop
    }
    let mut search = Search {
        anchor: read_only_segments as fn() -> Vec<(usize, usize)> as usize,
        found: Vec::new(),
    };
    // SAFETY: `each` only reads what the loader hands it and writes `search`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut search as *mut Search as *mut libc::c_void) };
    search.found
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096).max(1)
}

/// The parts of `segments` covered by `mappings`.
fn releasable(segments: &[(usize, usize)], mappings: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for &(s_start, s_end) in segments {
        for &(m_start, m_end) in mappings {
            let (start, end) = (s_start.max(m_start), s_end.min(m_end));
            if start < end {
                out.push((start, end));
            }
        }
    }
    out
}

/// The private, non-writable file mappings (`r-xp`, `r--p`) with `Anonymous: 0 kB` in a
/// `/proc/PID/smaps` text (not `[vdso]` and the like).
fn unmodified_read_only_mappings(smaps: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut candidate: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        if let Some(anon) = line.strip_prefix("Anonymous:") {
            if let Some(range) = candidate.take() {
                if anon.trim() == "0 kB" {
                    found.push(range);
                }
            }
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue; // a "Key: value" line
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let path = fields.nth(3).unwrap_or("");
        candidate =
            (matches!(perms, "r-xp" | "r--p") && path.starts_with('/')).then_some((start, end));
    }
    found
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
