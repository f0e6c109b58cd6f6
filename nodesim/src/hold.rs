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

/// Whether every thread of `pid` is in state `T` (stopped by a signal).
fn every_thread_stopped(pid: i32) -> io::Result<bool> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let stat = match std::fs::read_to_string(task?.path().join("stat")) {
            Ok(stat) => stat,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // the thread ended
            Err(e) => return Err(e),
        };
        if state(&stat) != Some('T') {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The state letter of a `stat` line: the field after the `(comm)`, which may itself hold
/// spaces and parentheses, so the last `)` ends it.
fn state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn the_state_is_read_after_a_comm_holding_parentheses() {
        assert_eq!(state("42 (a) b) T 1 42"), Some('T'));
        assert_eq!(state("42 (sleep) S 1 42"), Some('S'));
        assert_eq!(state("garbage"), None);
    }

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
