//! The scheduling policy of the agent's background threads: what runs *after* a signal (the
//! log line, metrics, the Event, the notification, on the async runtime's worker) runs at
//! `SCHED_IDLE`, so that it never holds a CPU the signalled process (or any workload) wants.
//!
//! Why `SCHED_IDLE` and not nice 19. A traced benchmark (docs/architecture.md, "The tail and
//! the memory at 1,000 volumes") put the signalled process's wait for a CPU at p99 1.66 ms
//! against 0.21 ms for the one-process floor, which goes back to `read(2)` at once: right after
//! the signal the agent's worker starts on its follow-up work. The kernel treats a
//! `SCHED_IDLE` task as "even weaker than nice 19" (weight 3 against nice 19's 15;
//! Documentation/scheduler/sched-design-CFS.rst, "SCHED_IDLE"; `WEIGHT_IDLEPRIO`,
//! kernel/sched/sched.h), and it does three things nice 19 does not:
//! - a non-idle task woken on a CPU that runs an idle entity preempts it at once, without
//!   the slice protection a running task otherwise keeps (kernel/sched/fair.c,
//!   `wakeup_preempt_fair`, "Preempt an idle entity in favor of a non-idle entity", and
//!   `cancel_protect_slice`, commit f553741ac8c0). Since commit faa42d29419d ("sched/fair: Make
//!   SCHED_IDLE entity be preempted in strict hierarchy") the comparison is made between the
//!   two tasks' entities in the cgroup they share: it holds for the agent's own threads (the
//!   hot thread preempts the worker at once), not across two containers' cgroups, where each
//!   group keeps its weight;
//! - a CPU whose runnable tasks are all `SCHED_IDLE` counts as idle where the kernel places a
//!   woken task (kernel/sched/fair.c, `sched_idle_cpu`, used by `select_idle_sibling`), so the
//!   signalled process may be put there rather than queued behind a busy task;
//! - it never preempts a woken non-idle task ("BATCH and IDLE tasks do not preempt others").
//!
//! It does not starve: the same document says it is "not a true idle timer scheduler in order
//! to avoid to get into priority inversion problems which would deadlock the machine": the
//! task keeps its (small) weight in the fair class, so under a CPU-bound load it still runs,
//! in short turns (tested below). Inside a pod, the agent's container is its own cgroup: its
//! idle threads compete there with the agent's other threads only, while the container as a
//! whole keeps its `cpu.weight` against the workloads.
//!
//! No privilege is needed to *enter* `SCHED_IDLE`; leaving it needs `CAP_SYS_NICE` or an
//! `RLIMIT_NICE` that covers the nice value (kernel/sched/syscalls.c,
//! `user_check_sched_params`: "Can't set/change SCHED_IDLE policy"), so a thread that does
//! signal work must never be switched. The call is made through `syscall(2)`: musl's
//! `sched_setscheduler` is a stub that returns `ENOSYS` (musl src/sched/sched_setscheduler.c;
//! Linux's call is per thread, POSIX's per process). The `RuntimeDefault` seccomp profiles
//! allow `sched_setscheduler` (moby `profiles/seccomp/default.json`, which containerd and CRI-O
//! ship).
//!
//! And the hot thread's scheduler slice ([`request_slice`]): a request for latency, not for
//! CPU, described at the function.

use std::io;
use std::time::Duration;

/// The kernel's `struct sched_param` (include/uapi/linux/sched/types.h): one int. (libc's
/// type for musl carries the POSIX sporadic-server fields the kernel does not read.)
#[repr(C)]
struct SchedParam {
    sched_priority: libc::c_int,
}

/// Switches the calling thread to `SCHED_IDLE` (its nice value is kept but no longer used).
pub fn become_idle() -> io::Result<()> {
    let param = SchedParam { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is the kernel's sched_param, alive for the
    // call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_IDLE,
            &param as *const SchedParam,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the calling thread runs at `SCHED_IDLE`.
pub fn is_idle() -> io::Result<bool> {
    // SAFETY: pid 0 is the calling thread; no memory is passed.
    let policy = unsafe { libc::syscall(libc::SYS_sched_getscheduler, 0) };
    if policy < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(policy == libc::SCHED_IDLE as libc::c_long)
    }
}

/// Whether the thread `tid` of process `pid` runs at `SCHED_IDLE`, from `<proc>/<pid>/task/<tid>/stat`
/// (field 41, `policy`: fs/proc/array.c `do_task_stat`).
pub fn thread_is_idle(stat: &str) -> Option<bool> {
    // The command name (field 2) is in parentheses and may hold spaces: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after ')'; field 41 is the 39th from there.
    let policy: i64 = rest.split_ascii_whitespace().nth(38)?.parse().ok()?;
    Some(policy == i64::from(libc::SCHED_IDLE))
}

// ------------------------------------------------------------ the hot thread's slice
//
// A short scheduler slice for the hot thread, so that its wake-up on a `..data` swap runs it
// at once instead of after the task that woke it (usually the kubelet, writing the swap).
//
// Since Linux 6.12 a `SCHED_OTHER` thread can ask for its own slice with `sched_setattr(2)`:
// `sched_attr.sched_runtime`, clamped to 0.1–100 ms (kernel/sched/syscalls.c
// `__setscheduler_params`, commit 857b158dc5e8 "sched/eevdf: Use sched_attr::sched_runtime to
// set request/slice suggestion"), and EEVDF lets a woken task with a shorter slice preempt the
// running one (kernel/sched/fair.c, feature `PREEMPT_SHORT`, commit 85e511df3cec
// "sched/eevdf: Allow shorter slices to wakeup-preempt"). Without it the kernel's base slice
// (0.7 ms × (1 + log2 of the CPU count, at most 8): 1.4 ms on 2 CPUs) applies, and a `perf sched` trace of the benchmark put the hot thread on a CPU
// 166 µs after its wake-up, against 19 µs for the one-process floor. The slice is a request
// for *latency*, not for CPU: the thread's share stays that of nice 0, and it needs no
// capability (no `CAP_SYS_NICE`: the policy and the nice value are unchanged), and the
// `RuntimeDefault` seccomp profile allows `sched_setattr` (moby `profiles/seccomp/default.json`,
// the list containerd and CRI-O ship); a stricter profile's refusal is one warning at start and
// the kernel's default slice. Older kernels accept the call and ignore the runtime of a fair
// task.

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
pub fn request_slice(slice: Duration) -> io::Result<()> {
    let mut attr = get_attr()?;
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

fn get_attr() -> io::Result<SchedAttr> {
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
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    fn own_stat() -> String {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap()
    }

    #[test]
    fn only_the_thread_that_asks_becomes_idle() {
        let (idle, child) = std::thread::spawn(|| {
            assert!(!is_idle().unwrap());
            assert_eq!(thread_is_idle(&own_stat()), Some(false));
            become_idle().unwrap();
            // A thread inherits the policy of the thread that creates it.
            let child = std::thread::spawn(|| is_idle().unwrap()).join().unwrap();
            ((is_idle().unwrap(), thread_is_idle(&own_stat())), child)
        })
        .join()
        .unwrap();
        assert_eq!(idle, (true, Some(true)));
        assert!(child);
        let sibling = std::thread::spawn(|| is_idle().unwrap()).join().unwrap();
        assert!(!sibling, "a thread started by another is untouched");
        assert!(!is_idle().unwrap(), "the test's own thread is untouched");
    }

    #[test]
    fn the_policy_field_is_read_after_the_command_name() {
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[41 - 3] = "5".into(); // SCHED_IDLE
        let stat = format!("42 (a) b (c)) {}", fields.join(" "));
        assert_eq!(thread_is_idle(&stat), Some(true));
        fields[41 - 3] = "0".into();
        let stat = format!("42 (tokio-rt-worker) {}", fields.join(" "));
        assert_eq!(thread_is_idle(&stat), Some(false));
        assert_eq!(thread_is_idle("42 (x) R 1"), None);
    }

    /// Every CPU is kept busy by normal threads; an idle thread still gets through its work:
    /// `SCHED_IDLE` is weak, not starved.
    #[test]
    fn an_idle_thread_still_works_while_every_cpu_is_busy() {
        let stop = Arc::new(AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let spinners: Vec<_> = (0..cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                })
            })
            .collect();
        let (jobs, inbox) = mpsc::channel::<u64>();
        let (results, outbox) = mpsc::channel::<u64>();
        let worker = std::thread::spawn(move || {
            become_idle().unwrap();
            for n in inbox {
                // A little work per job, as a report is: format a line.
                std::hint::black_box(format!("job {n} done after the signal"));
                let _ = results.send(n);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut done = Vec::new();
        for n in 0..50 {
            jobs.send(n).unwrap();
            match outbox.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(r) => done.push(r),
                Err(_) => break,
            }
        }
        stop.store(true, Ordering::Relaxed);
        drop(jobs);
        worker.join().unwrap();
        for s in spinners {
            s.join().unwrap();
        }
        assert_eq!(done, (0..50).collect::<Vec<_>>(), "the idle thread starved");
    }

    /// The calling thread's slice as the kernel reports it (`sched_getattr(2)`), in nanoseconds.
    fn current_slice() -> io::Result<u64> {
        get_attr().map(|a| a.sched_runtime)
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
            request_slice(Duration::from_micros(300)).unwrap();
            let now = current_slice().unwrap();
            // A kernel before 6.12 ignores the runtime of a fair task and reports 0.
            assert!(now == 300_000 || now == 0, "slice {now} ns");
            // SAFETY: as above.
            assert_eq!(unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }, 3);
            request_slice(Duration::ZERO).unwrap();
            if now != 0 {
                assert_ne!(current_slice().unwrap(), 300_000);
            }
        })
        .join()
        .unwrap();
    }
}
