//! A short scheduler slice for the hot thread, so that its wake-up on a `..data` swap runs it
//! at once instead of after the task that woke it (usually the kubelet, writing the swap).
//!
//! Since Linux 6.12 a `SCHED_OTHER` thread can ask for its own slice with `sched_setattr(2)`:
//! `sched_attr.sched_runtime`, clamped to 0.1–100 ms (kernel/sched/syscalls.c
//! `__setscheduler_params`, commit 857b158dc5e8 "sched/eevdf: Use sched_attr::sched_runtime to
//! set request/slice suggestion"), and EEVDF lets a woken task with a shorter slice preempt the
//! running one (kernel/sched/fair.c, feature `PREEMPT_SHORT`, commit 85e511df3cec
//! "sched/eevdf: Allow shorter slices to wakeup-preempt"). Without it the kernel's base slice
//! (0.7 ms × (1 + log2 of the CPU count, at most 8): 1.4 ms on 2 CPUs) applies, and a `perf sched` trace of the benchmark put the hot thread on a CPU
//! 166 µs after its wake-up, against 19 µs for the one-process floor. The slice is a request
//! for *latency*, not for CPU: the thread's share stays that of nice 0, and it needs no
//! capability (no `CAP_SYS_NICE`: the policy and the nice value are unchanged), and the
//! `RuntimeDefault` seccomp profile allows `sched_setattr` (moby `profiles/seccomp/default.json`,
//! the list containerd and CRI-O ship); a stricter profile's refusal is one warning at start and
//! the kernel's default slice. Older kernels accept the call and ignore the runtime of a fair
//! task.

use std::io;
use std::time::Duration;

/// The kernel's `struct sched_attr` (include/uapi/linux/sched/types.h), version 1 (56 bytes).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Asks the kernel for a slice of `slice` for the calling thread (`Duration::ZERO`: the
/// kernel's default). The thread's policy and nice value are read first and passed back
/// unchanged (`SCHED_FLAG_KEEP_PARAMS` would not do: it skips `__setscheduler_params`, where
/// the runtime is taken).
pub fn request(slice: Duration) -> io::Result<()> {
    let mut attr = get()?;
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    attr.sched_flags = 0;
    attr.sched_runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // SAFETY: `attr` is a valid `sched_attr` of the size it declares, alive for the call; pid
    // 0 is the calling thread; flags 0.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get() -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is writable for the size passed; pid 0 is the calling thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0u32,
        )
    };
    if rc == 0 {
        Ok(attr)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's slice as the kernel reports it (`sched_getattr(2)`), in nanoseconds.
    fn current() -> io::Result<u64> {
        get().map(|a| a.sched_runtime)
    }

    #[test]
    fn the_layout_is_the_kernels_version_1() {
        // SCHED_ATTR_SIZE_VER1 (include/uapi/linux/sched/types.h).
        assert_eq!(std::mem::size_of::<SchedAttr>(), 56);
    }

    #[test]
    fn a_thread_gets_the_slice_it_asks_for_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            // A nice value of 3 (raising it needs no privilege) must survive the call.
            // SAFETY: setpriority/getpriority on this thread's id (Linux: per thread).
            let tid = unsafe { libc::gettid() } as libc::id_t;
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 3) }, 0);
            request(Duration::from_micros(300)).unwrap();
            let now = current().unwrap();
            // A kernel before 6.12 ignores the runtime of a fair task and reports 0.
            assert!(now == 300_000 || now == 0, "slice {now} ns");
            // SAFETY: as above.
            assert_eq!(unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }, 3);
            request(Duration::ZERO).unwrap();
            if now != 0 {
                assert_ne!(current().unwrap(), 300_000);
            }
        })
        .join()
        .unwrap();
    }
}
