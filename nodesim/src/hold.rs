//! Holding a process still while its inotify queue fills, as a frozen cgroup or a starved
//! CPU would: `SIGSTOP`, and a wait until every thread has actually stopped.
//!
//! `kill(2)` returns as soon as the stop is *pending*; each thread stops only when it next
//! runs in the kernel's signal path (`do_signal_stop` in `kernel/signal.c`). A `SIGCONT`
//! sent before then removes the pending stop from every queue and clears each thread's
//! `JOBCTL_STOP_PENDING` (`prepare_signal` in the same file), so a stop followed quickly by a
//! continue on a busy machine may never hold the process at all. Waiting for every thread to
//! show state `T` in `/proc/<pid>/task/<tid>/stat` (`task_state_array` in
//! `fs/proc/array.c`) makes the hold real before anything is written behind its back.

use crate::proc_stat;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io;
use std::time::{Duration, Instant};

/// Stops `pid` and returns once every one of its threads is stopped, or an error after
/// `limit` (the process is left with the stop pending; send `SIGCONT` as usual).
pub fn stop(pid: i32, limit: Duration) -> io::Result<()> {
    kill(Pid::from_raw(pid), Signal::SIGSTOP)?;
    let deadline = Instant::now() + limit;
    while !every_thread_stopped(pid)? {
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("process {pid} did not stop within {limit:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Lets a process held by [`stop`] go on.
pub fn release(pid: i32) -> io::Result<()> {
    Ok(kill(Pid::from_raw(pid), Signal::SIGCONT)?)
}

/// Whether every thread of `pid` is in state `T` (stopped by a signal). A thread that ended
/// meanwhile is not counted.
fn every_thread_stopped(pid: i32) -> io::Result<bool> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let stat = task?.path().join("stat");
        match proc_stat::state(&stat) {
            Some('T') => {}
            None if !stat.exists() => {} // the thread ended
            _ => return Ok(false),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_held_process_has_every_thread_stopped_until_released() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        assert!(!every_thread_stopped(pid).unwrap());
        stop(pid, Duration::from_secs(10)).unwrap();
        assert!(every_thread_stopped(pid).unwrap());
        release(pid).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while every_thread_stopped(pid).unwrap() {
            assert!(Instant::now() < deadline, "still stopped after SIGCONT");
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
