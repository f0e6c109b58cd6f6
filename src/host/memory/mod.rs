//! The process's memory: giving freed heap back to the OS after the one-off spike of decoding
//! the first pod list, the controller's heap settings, and the agent's release of its
//! start-up code once it is ready.
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

/// The mmap threshold the controller fixes: glibc's own starting value (`mallopt(3)`).
pub const CONTROLLER_MMAP_THRESHOLD: usize = 128 * 1024;

/// The controller's heap (docs/controller.md, "Memory"): at 100,000 pods it holds some
/// 200 MiB of small, long-lived allocations, and glibc's defaults left 56 MiB of free holes
/// between them (`malloc_info` of the bench's controller: 280 MB taken from the OS, 58 MB of
/// it free in 172,000 chunks of a few hundred bytes, which `malloc_trim` cannot return).
/// Two causes, two settings (glibc only; call once at start, before other threads exist):
///
/// - **One arena.** The watches decode on the runtime's worker thread and the router keeps
///   the pods on the main thread: with two arenas each kept its own holes, and a non-main
///   arena grows in 64 MiB heaps (`HEAP_MAX_SIZE`). `M_ARENA_MAX` = 1 makes every thread
///   allocate from the main arena (`malloc/arena.c` `arena_get2`: the limit is
///   `mp_.arena_max`, latched at the first arena a new thread asks for; at the limit
///   `reused_arena` hands out an existing one). The controller's few threads seldom
///   allocate at the same moment, so the shared lock costs nothing measurable.
/// - **A fixed mmap threshold.** By default the threshold is dynamic: freeing an mmapped
///   block raises it to that block's size, up to 32 MiB (`malloc/malloc.c` `__libc_free`,
///   `!mp_.no_dyn_threshold && chunksize_nomask (p) > mp_.mmap_threshold &&
///   chunksize_nomask (p) <= DEFAULT_MMAP_THRESHOLD_MAX`). After the first list's buffers
///   (the gathered list of 100,000 pods, the pod table) doubled a few times, every later
///   buffer of up to 32 MiB came from the heap, and the small allocations made while it lived
///   pinned the space it left. Setting `M_MMAP_THRESHOLD` turns the adjustment off
///   (`do_set_mmap_threshold` sets `mp_.no_dyn_threshold`; "If the parameter is set, the
///   dynamic adjustment is disabled", the glibc manual, "Malloc Tunable Parameters"), so a
///   block of 128 KiB or more is its own mapping and goes back to the OS when freed.
///
/// Measured on the bench (100,000 pods): steady RSS 278 MiB with glibc's defaults, 242 with
/// the fixed threshold alone, 236 with one arena alone, 231 with both. The agent keeps its
/// own settings ([`limit_malloc_arenas`]): its hot path runs on a thread of its own.
pub fn tune_for_controller() {
    #[cfg(target_env = "gnu")]
    // SAFETY: called before any other thread exists; mallopt only sets tunables.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(
            libc::M_MMAP_THRESHOLD,
            CONTROLLER_MMAP_THRESHOLD as libc::c_int,
        );
    }
}

#[cfg(all(test, target_env = "gnu"))]
mod controller_heap_tests {
    use std::process::Command;

    /// Set in the child process that runs [`controller_heap_child`] alone.
    const CHILD: &str = "RELOADLET_TEST_CONTROLLER_HEAP_CHILD";

    /// The arenas `malloc_info` reports (`<heap nr="…">`, one per arena).
    fn arenas(dir: &std::path::Path) -> usize {
        let path = dir.join("malloc_info.xml");
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a fresh stream on a file of our own, closed before it is read.
        unsafe {
            let f = libc::fopen(c_path.as_ptr(), c"w".as_ptr());
            assert!(!f.is_null());
            assert_eq!(libc::malloc_info(0, f), 0);
            libc::fclose(f);
        }
        let xml = std::fs::read_to_string(path).unwrap();
        xml.matches("<heap nr=").count()
    }

    /// mallopt settings hold for a whole process (and the arena limit is latched once a
    /// thread asks for an arena), so the check runs in a child process of its own.
    #[test]
    fn the_controller_heap_is_one_arena_with_a_fixed_mmap_threshold() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "host::memory::controller_heap_tests::controller_heap_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "the child ran nothing: {text}");
    }

    #[test]
    #[ignore = "run by the_controller_heap_is_one_arena_with_a_fixed_mmap_threshold, alone in a child process"]
    fn controller_heap_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        super::tune_for_controller();
        // Freeing a 4 MiB mapping would raise a dynamic threshold to 4 MiB …
        drop(std::hint::black_box(vec![1u8; 4 << 20]));
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let mapped = || unsafe { libc::mallinfo2().hblks };
        let before = mapped();
        let block = std::hint::black_box(vec![1u8; 1 << 20]);
        // … and a 1 MiB block would then come from the heap; fixed, it is its own mapping.
        assert_eq!(mapped(), before + 1, "1 MiB is mmapped");
        drop(block);
        assert_eq!(mapped(), before, "and unmapped when freed");

        // A thread started now allocates from an arena that exists: none is added.
        let arenas_before = arenas(dir.path());
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let held: Vec<Box<[u8; 64]>> = (0..64).map(|_| Box::new([7u8; 64])).collect();
            tx.send(()).unwrap();
            done_rx.recv().unwrap();
            drop(std::hint::black_box(held));
        });
        rx.recv().unwrap();
        let arenas_during = arenas(dir.path());
        done_tx.send(()).unwrap();
        thread.join().unwrap();
        assert_eq!(arenas_during, arenas_before, "no arena for a new thread");
    }
}

#[cfg(test)]
mod tests;
