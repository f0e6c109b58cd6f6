//! Ctrl-C and SIGTERM for a process that runs a simulated node of its own (the demo, the
//! soak, the benchmarks). A signal's default action ends the process at once, leaving the
//! node's processes, tmpfs mounts and cgroups behind. Here the work is dropped instead, so
//! every [`crate::node::SimNode`] it holds cleans up through `Drop`, as it does on an error.
//! A work future that is blocked in a synchronous wait is dropped once it next yields.

use tokio::signal::unix::{signal, SignalKind};

/// How the work ended before it was done.
#[derive(Debug, thiserror::Error)]
pub enum Interrupted {
    #[error("interrupted (Ctrl-C); cleaned up")]
    Interrupt,
    #[error("terminated (SIGTERM); cleaned up")]
    Terminate,
    #[error("cannot watch for SIGINT/SIGTERM: {0}")]
    Setup(#[from] std::io::Error),
}

/// Runs `work` to its end, or until SIGINT or SIGTERM, which drop it.
pub async fn until_signalled<T>(
    work: impl std::future::Future<Output = T>,
) -> Result<T, Interrupted> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        done = work => Ok(done),
        _ = interrupt.recv() => Err(Interrupted::Interrupt),
        _ = terminate.recv() => Err(Interrupted::Terminate),
    }
}
