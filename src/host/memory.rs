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

/// Unmaps the process's read-only file pages (its own text and constants, libc's in a glibc
/// build) so that only what is still in use is mapped again. Call once, after start-up.
///
/// Start-up runs code that never runs again (argument parsing, the kube client's
/// configuration, TLS set-up, the first list); with the kernel's fault-around (a read fault
/// on a file mapping also maps the neighbouring pages already in the page cache, 64 KiB
/// around it: mm/memory.c, `do_read_fault` → `should_fault_around` → `do_fault_around`,
/// `fault_around_pages` = 65536 >> PAGE_SHIFT; `MADV_RANDOM` does not turn it off) that leaves
/// about 6 of the 7 MiB of text resident, while about 1.7 MiB is touched again afterwards
/// (measured with `/proc/PID/clear_refs` and `Referenced:` in smaps; docs/architecture.md).
/// `MADV_DONTNEED` on a private file mapping drops the page-table entries only: the pages stay
/// in the page cache, and the next use is a minor fault that maps them back (madvise(2):
/// "subsequent accesses of pages in the range ... will result in repopulating the memory
/// contents from the up-to-date contents of the underlying mapped file"). Unmapped, clean
/// file pages are what the kernel reclaims first, and what the kubelet's working set (usage −
/// inactive_file) stops counting once they go inactive.
///
/// Only read-only mappings (`r-xp`, `r--p`) of a file with no private copy in them
/// (`Anonymous: 0 kB` in smaps: the loader's relocated RELRO pages are private copies, and
/// dropping them would bring back the unrelocated bytes) are touched: nothing is lost.
/// Returns the bytes whose mappings were dropped.
pub fn release_startup_code() -> usize {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for (start, end) in unmodified_read_only_file_mappings(&smaps) {
        // SAFETY: the range is one of this process's own private, read-only file mappings
        // with no private (copied-on-write) page (from /proc/self/smaps, and read-only
        // mappings cannot gain one); MADV_DONTNEED there only drops page-table entries, and
        // a later access faults the same file contents back in.
        let dropped = unsafe {
            rustix::mm::madvise(
                start as *mut std::ffi::c_void,
                end - start,
                rustix::mm::Advice::LinuxDontNeed,
            )
        };
        if dropped.is_ok() {
            released += end - start;
        }
    }
    released
}

/// The `r-xp` and `r--p` mappings of files with `Anonymous: 0 kB` in a `/proc/PID/smaps`
/// text (not `[vdso]` and the like).
fn unmodified_read_only_file_mappings(smaps: &str) -> Vec<(usize, usize)> {
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
mod tests {
    use super::*;

    #[test]
    fn only_unmodified_read_only_file_mappings_are_picked() {
        let smaps = "\
55558aed0000-55558aee2000 rw-p 00000000 00:00 0                          [heap]
Rss:                  72 kB
Anonymous:            72 kB
7f9571000000-7f9571064000 r--p 00000000 fd:01 123 /usr/bin/reloadlet
Rss:                 400 kB
Anonymous:             0 kB
7f9571064000-7f9571749000 r-xp 00064000 fd:01 123 /usr/bin/reloadlet
Rss:                6164 kB
Anonymous:             0 kB
7f9571749000-7f957196a000 r--p 00749000 fd:01 123 /usr/bin/reloadlet
Rss:                 732 kB
Anonymous:           120 kB
7f957196a000-7f95719bc000 rw-p 0096a000 fd:01 123 /usr/bin/reloadlet
Rss:                 328 kB
Anonymous:           328 kB
7f9571af5000-7f9571af7000 r-xp 00000000 00:00 0                          [vdso]
Anonymous:             0 kB
7f9571b00000-7f9571b10000 r-xp 00000000 fd:01 99  /usr/lib/libc.so.6
Anonymous:             0 kB
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
Anonymous:             0 kB
";
        assert_eq!(
            unmodified_read_only_file_mappings(smaps),
            vec![
                (0x7f9571000000, 0x7f9571064000),
                (0x7f9571064000, 0x7f9571749000),
                (0x7f9571b00000, 0x7f9571b10000)
            ]
        );
    }

    #[test]
    fn released_code_and_constants_are_used_again() {
        static TABLE: [u64; 4] = [3, 5, 7, 11];
        let released = release_startup_code();
        assert!(released > 0, "the test binary has read-only file mappings");
        // The code and constants used next fault back in from the page cache.
        let v: Vec<u64> = (0..1000).map(|i| i * TABLE[0]).collect();
        assert_eq!(v.iter().sum::<u64>(), 1_498_500);
        assert_eq!(TABLE.iter().sum::<u64>(), 26);
        assert_eq!(format!("{:?}", Some("still here")), "Some(\"still here\")");
        assert!(release_startup_code() > 0, "and can be released again");
    }
}
