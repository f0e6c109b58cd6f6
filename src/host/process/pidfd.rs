//! Signals through a pidfd: the process is pinned first, checked, then signalled, so a
//! reused PID can never receive a signal meant for the process that held it before.
//!
//! Where the node does not allow pidfds — `ENOSYS` before Linux 5.3, `EPERM` from an older
//! container runtime's seccomp profile — signals fall back to `kill(2)`, with a warning logged
//! once. The fallback is not pinned: the caller re-checks the process (start time, cgroup)
//! right before the `kill` ([`Pinned::exact`] is false), which leaves a window of two small
//! reads in which the PID would have to be freed and reused.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustix::process::{Pid, PidfdFlags, Signal};

use crate::core::model::ReloadSignal;

/// Pins processes so that a later signal reaches the very process that was pinned.
pub(crate) trait Pinner: Send + Sync {
    /// Pins the process `pid` as it is now. `ErrorKind::NotFound` when it does not exist.
    fn pin(&self, pid: i32) -> io::Result<Box<dyn Pinned>>;
}

/// A pinned process.
pub(crate) trait Pinned: Send + Sync {
    /// Sends `signal`. `ErrorKind::NotFound` when the pinned process has exited;
    /// `ErrorKind::Unsupported` when this kind of pin cannot signal on this node (pin again:
    /// the next pin falls back to `kill`).
    fn signal(&self, signal: ReloadSignal) -> io::Result<()>;

    /// The pin holds the process itself (a pidfd), not only its PID: a check made after
    /// pinning stays true until the signal. `false`: re-check right before signalling.
    fn exact(&self) -> bool {
        true
    }
}

/// The system calls behind [`Pidfds`] (a fake in tests).
pub(crate) trait SignalCalls: Send + Sync + 'static {
    fn pidfd_open(&self, pid: i32) -> io::Result<OwnedFd>;
    fn pidfd_send_signal(&self, pidfd: &OwnedFd, signal: ReloadSignal) -> io::Result<()>;
    fn kill(&self, pid: i32, signal: ReloadSignal) -> io::Result<()>;
}

/// The real calls, through rustix.
pub(crate) struct OsCalls;

fn rustix_signal(signal: ReloadSignal) -> Signal {
    match signal {
        ReloadSignal::Hup => Signal::HUP,
        ReloadSignal::Int => Signal::INT,
        ReloadSignal::Quit => Signal::QUIT,
        ReloadSignal::Usr1 => Signal::USR1,
        ReloadSignal::Usr2 => Signal::USR2,
        ReloadSignal::Term => Signal::TERM,
        ReloadSignal::Winch => Signal::WINCH,
        ReloadSignal::Kill => Signal::KILL,
    }
}

fn pid(pid: i32) -> io::Result<Pid> {
    Pid::from_raw(pid).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
}

impl SignalCalls for OsCalls {
    fn pidfd_open(&self, raw: i32) -> io::Result<OwnedFd> {
        Ok(rustix::process::pidfd_open(pid(raw)?, PidfdFlags::empty())?)
    }

    fn pidfd_send_signal(&self, pidfd: &OwnedFd, signal: ReloadSignal) -> io::Result<()> {
        Ok(rustix::process::pidfd_send_signal(
            pidfd.as_fd(),
            rustix_signal(signal),
        )?)
    }

    fn kill(&self, raw: i32, signal: ReloadSignal) -> io::Result<()> {
        Ok(rustix::process::kill_process(
            pid(raw)?,
            rustix_signal(signal),
        )?)
    }
}

/// The real thing: `pidfd_open(2)` and `pidfd_send_signal(2)` (Linux ≥ 5.3), else `kill(2)`.
///
/// PIDs are those of the caller's PID namespace: the proc root used to find them must be
/// a procfs of that same namespace (with `hostPID: true`, the node's `/proc`).
pub(crate) struct Pidfds<S: SignalCalls = OsCalls> {
    shared: Arc<Shared<S>>,
}

struct Shared<S> {
    calls: S,
    /// pidfds were refused once (ENOSYS/EPERM): every later signal uses `kill`.
    kill_only: AtomicBool,
}

impl Default for Pidfds<OsCalls> {
    fn default() -> Self {
        Self::with_calls(OsCalls)
    }
}

impl<S: SignalCalls> Pidfds<S> {
    pub(crate) fn with_calls(calls: S) -> Self {
        Self {
            shared: Arc::new(Shared {
                calls,
                kill_only: AtomicBool::new(false),
            }),
        }
    }
}

impl<S: SignalCalls> Shared<S> {
    /// After ENOSYS/EPERM from a pidfd call: `kill` from now on. Logs once.
    fn refused(&self, call: &str, err: &io::Error) {
        if !self.kill_only.swap(true, Ordering::Relaxed) {
            tracing::warn!(call, error = %err, "pidfds are not available on this node (Linux < 5.3, or a seccomp profile that refuses them); signalling with kill(2) after re-checking each process's start time and cgroup");
        }
    }
}

/// ENOSYS: no such system call; EPERM: refused by seccomp (`pidfd_open` itself checks no
/// permission, see its man page). Either way the node will not allow pidfds.
fn pidfds_refused(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM))
}

impl<S: SignalCalls> Pinner for Pidfds<S> {
    fn pin(&self, pid: i32) -> io::Result<Box<dyn Pinned>> {
        if pid <= 0 {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let by_pid = || -> Box<dyn Pinned> {
            Box::new(ByPid {
                pid,
                shared: self.shared.clone(),
            })
        };
        if self.shared.kill_only.load(Ordering::Relaxed) {
            return Ok(by_pid());
        }
        match self.shared.calls.pidfd_open(pid) {
            Ok(fd) => Ok(Box::new(Pidfd {
                fd,
                shared: self.shared.clone(),
            })),
            Err(err) if pidfds_refused(&err) => {
                self.shared.refused("pidfd_open", &err);
                Ok(by_pid())
            }
            Err(err) => Err(not_found_if_gone(err)),
        }
    }
}

struct Pidfd<S> {
    fd: OwnedFd,
    shared: Arc<Shared<S>>,
}

impl<S: SignalCalls> Pinned for Pidfd<S> {
    fn signal(&self, signal: ReloadSignal) -> io::Result<()> {
        match self.shared.calls.pidfd_send_signal(&self.fd, signal) {
            Ok(()) => Ok(()),
            Err(err) if pidfds_refused(&err) => {
                self.shared.refused("pidfd_send_signal", &err);
                Err(io::Error::new(io::ErrorKind::Unsupported, err))
            }
            Err(err) => Err(not_found_if_gone(err)),
        }
    }
}

/// The fallback: a PID only.
struct ByPid<S> {
    pid: i32,
    shared: Arc<Shared<S>>,
}

impl<S: SignalCalls> Pinned for ByPid<S> {
    fn signal(&self, signal: ReloadSignal) -> io::Result<()> {
        tracing::debug!(pid = self.pid, %signal, "kill(2) fallback");
        self.shared
            .calls
            .kill(self.pid, signal)
            .map_err(not_found_if_gone)
    }

    fn exact(&self) -> bool {
        false
    }
}

/// ESRCH ("no such process") becomes `NotFound`, the one kind callers treat as "gone".
fn not_found_if_gone(err: io::Error) -> io::Error {
    if err.raw_os_error() == Some(libc::ESRCH) {
        io::Error::new(io::ErrorKind::NotFound, err)
    } else {
        err
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! Scripted system calls: pidfds refused with a given errno, kills recorded.
    use super::*;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    pub(crate) struct FakeCalls {
        /// errno returned by `pidfd_open` (0: succeeds).
        pub open_errno: i32,
        /// errno returned by `pidfd_send_signal` (0: succeeds).
        pub send_errno: i32,
        pub log: Arc<Mutex<Vec<String>>>,
    }

    impl FakeCalls {
        pub(crate) fn log(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }
    }

    fn result(errno: i32) -> io::Result<()> {
        if errno == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(errno))
        }
    }

    impl SignalCalls for FakeCalls {
        fn pidfd_open(&self, pid: i32) -> io::Result<OwnedFd> {
            self.log.lock().unwrap().push(format!("pidfd_open {pid}"));
            result(self.open_errno)?;
            Ok(std::fs::File::open("/dev/null")?.into())
        }

        fn pidfd_send_signal(&self, _: &OwnedFd, signal: ReloadSignal) -> io::Result<()> {
            self.log
                .lock()
                .unwrap()
                .push(format!("pidfd_send_signal {signal}"));
            result(self.send_errno)
        }

        fn kill(&self, pid: i32, signal: ReloadSignal) -> io::Result<()> {
            self.log
                .lock()
                .unwrap()
                .push(format!("kill {pid} {signal}"));
            Ok(())
        }
    }
}
