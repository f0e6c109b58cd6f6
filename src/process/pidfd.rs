//! Signals through a pidfd: the process is pinned first, checked, then signalled, so a
//! reused PID can never receive a signal meant for the process that held it before.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::model::ReloadSignal;

/// Pins processes so that a later signal reaches the very process that was pinned.
pub(crate) trait Pinner: Send + Sync {
    /// Pins the process `pid` as it is now. `ErrorKind::NotFound` when it does not exist.
    fn pin(&self, pid: i32) -> io::Result<Box<dyn Pinned>>;
}

/// A pinned process.
pub(crate) trait Pinned {
    /// Sends `signal`. `ErrorKind::NotFound` when the pinned process has exited.
    fn signal(&self, signal: ReloadSignal) -> io::Result<()>;
}

/// The real thing: `pidfd_open(2)` and `pidfd_send_signal(2)` (Linux ≥ 5.3).
///
/// PIDs are those of the caller's PID namespace: the proc root used to find them must be
/// a procfs of that same namespace (with `hostPID: true`, the node's `/proc`).
pub(crate) struct Pidfds;

impl Pinner for Pidfds {
    fn pin(&self, pid: i32) -> io::Result<Box<dyn Pinned>> {
        if pid <= 0 {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(not_found_if_gone(io::Error::last_os_error()));
        }
        let fd = i32::try_from(fd).map_err(|_| io::Error::other("pidfd out of range"))?;
        // SAFETY: the kernel just returned this fd to us; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Box::new(Pidfd(fd)))
    }
}

struct Pidfd(OwnedFd);

impl Pinned for Pidfd {
    fn signal(&self, signal: ReloadSignal) -> io::Result<()> {
        // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal.number(),
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc < 0 {
            return Err(not_found_if_gone(io::Error::last_os_error()));
        }
        Ok(())
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
