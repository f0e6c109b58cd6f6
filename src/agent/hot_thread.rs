//! The hot thread: one OS thread that owns the inotify fd and the agent's loop, so that a
//! `..data` swap becomes a signal on the thread the kernel woke, with no hand-off.
//!
//! The thread runs a single-threaded Tokio runtime: it sleeps in `epoll_wait` on the inotify
//! fd, the mount table and the channels from the async side (pod updates, eviction and
//! budget news), with no timer unless a debounce window or the chores are due. On a swap
//! it reads the events, hashes the volume in place (a volume above
//! [`super::INLINE_HASH_BYTES`] is hashed on the hasher thread, [`super::hasher`]), looks up
//! the pod and its policy in memory and — for `--debounce 0s` or a window that ended —
//! signals through the pidfd kept for the container (`ContainerProcesses::deliver_kept`).
//! Only then is the outcome logged, counted and published, on the async runtime the
//! [`crate::execute::Executor`] holds; evictions, retries, Events, the pod watch and the
//! HTTP server run there too.
//!
//! inotify's `read(2)` returns as soon as at least one event is queued and hands over every
//! queued event that fits the buffer (kernel `fs/notify/inotify/inotify_user.c`,
//! `inotify_read`: it waits on `group->notification_waitq` only while the queue is empty, then
//! copies events until the buffer is full): one wake-up per burst, not per event.

use super::Agent;
use crate::host::inotify::{VolumeWatcher, WatchError, WatchStats, WatcherOptions};
use crate::k8s::pod_watch::PodUpdate;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What the hot thread needs to start its loop.
struct Start {
    agent: Agent,
    pods: mpsc::Receiver<PodUpdate>,
    shutdown: CancellationToken,
}

/// The hot thread, with its inotify watches armed, waiting for its [`Agent`].
pub struct HotThread {
    start: oneshot::Sender<Start>,
    done: oneshot::Receiver<anyhow::Result<()>>,
    thread: std::thread::JoinHandle<()>,
}

/// The thread's name (in `ps -L`, `top -H`).
pub const THREAD_NAME: &str = "reloadlet-hot";

impl HotThread {
    /// Starts the thread and arms the volume watches on it (the watcher's fd belongs to that
    /// thread's runtime). Errors as [`VolumeWatcher::new`] does; nothing is left running then.
    /// `slice`: the scheduler slice the thread asks for ([`crate::host::sched::request_slice`]; zero: the
    /// kernel's default); a kernel that refuses it is logged and the thread goes on.
    pub fn spawn(
        kubelet_root: PathBuf,
        opts: WatcherOptions,
        slice: Duration,
    ) -> Result<(Self, WatchStats), WatchError> {
        let (armed_tx, armed_rx) = std::sync::mpsc::sync_channel(1);
        let (start_tx, start_rx) = oneshot::channel::<Start>();
        let (done_tx, done_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                if !slice.is_zero() {
                    match crate::host::sched::request_slice(slice) {
                        Ok(()) => tracing::debug!(
                            slice_us = slice.as_micros() as u64,
                            "hot thread scheduler slice set"
                        ),
                        Err(e) => tracing::warn!(
                            error = %e,
                            "cannot set the hot thread's scheduler slice (sched_setattr); \
                             it keeps the kernel's default"
                        ),
                    }
                }
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = armed_tx.send(Err(WatchError::Init(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let watcher = match VolumeWatcher::new(&kubelet_root, opts) {
                        Ok(w) => w,
                        Err(e) => {
                            let _ = armed_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = armed_tx.send(Ok(watcher.stats()));
                    // Dropped without a start: the process is giving up before the loop ran.
                    let Ok(start) = start_rx.await else { return };
                    let result = start.agent.run(watcher, start.pods, start.shutdown).await;
                    let _ = done_tx.send(result);
                });
            })
            .map_err(WatchError::Init)?;
        match armed_rx.recv() {
            Ok(Ok(stats)) => Ok((
                Self {
                    start: start_tx,
                    done: done_rx,
                    thread,
                },
                stats,
            )),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(WatchError::Init(std::io::Error::other(
                    "the hot thread ended while arming the watches",
                )))
            }
        }
    }

    /// Runs `agent`'s loop on the hot thread until `shutdown` (and its drain) or an error.
    pub async fn run(
        self,
        agent: Agent,
        pods: mpsc::Receiver<PodUpdate>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        if self
            .start
            .send(Start {
                agent,
                pods,
                shutdown,
            })
            .is_err()
        {
            anyhow::bail!("the hot thread ended before its loop started");
        }
        let result = match self.done.await {
            Ok(result) => result,
            Err(_) => Err(anyhow::anyhow!("the hot thread panicked")),
        };
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        result
    }
}
