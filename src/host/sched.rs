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

use std::io;

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
}
