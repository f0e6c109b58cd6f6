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
