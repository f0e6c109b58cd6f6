//! Mount table change notification: `/proc/self/mountinfo` polls with `POLLPRI` (epoll
//! `EPOLLPRI`) after every mount or unmount in the reader's mount namespace.

use std::fs::File;
use std::io;
use std::path::Path;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Where the current process's mount table lives.
pub(crate) const MOUNTINFO: &str = "/proc/self/mountinfo";

/// Wakes up when the mount table changes.
#[derive(Debug)]
pub(crate) struct MountTable {
    fd: AsyncFd<File>,
}

impl MountTable {
    /// Opens `path` (normally [`MOUNTINFO`]) and registers it for priority readiness.
    /// Needs a Tokio runtime.
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        // SAFETY: the `File` is owned by the `AsyncFd` for its whole life, so its fd stays
        // open and `as_raw_fd` always returns the same descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(file, Interest::PRIORITY) }?;
        Ok(Self { fd })
    }

    /// Resolves after the next mount table change. Cancel-safe: nothing is consumed until
    /// it resolves.
    pub(crate) async fn changed(&self) -> io::Result<()> {
        let mut guard = self.fd.ready(Interest::PRIORITY).await?;
        guard.clear_ready();
        Ok(())
    }
}

/// Waits for a mount table change, or forever when there is no mount table to watch.
pub(crate) async fn mount_change(table: Option<&MountTable>) -> io::Result<()> {
    match table {
        Some(table) => table.changed().await,
        None => std::future::pending().await,
    }
}
