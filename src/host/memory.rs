//! The allocator: giving freed heap back to the OS after the one-off spike of decoding the
//! first pod list, and the controller's heap settings.
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
mod tests {
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
                "host::memory::tests::controller_heap_child",
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
