//! The state writer thread (`reloadlet-state`): the state file is encoded, written and
//! fsynced (twice: the file, then the directory) here, never on the hot thread. At 1,000
//! volumes a write takes tens of milliseconds on a busy disk; on the hot thread it held up
//! every swap that arrived meanwhile (the p99 of issue 14).
//!
//! The agent hands over a snapshot (pending evictions + the detector's digests); the thread
//! keeps only the newest one not yet written. A failed write is counted, logged and retried
//! with the newest snapshot after 1 s, doubling up to 60 s; it never spins.

use crate::core::model::VolumeKey;
use crate::core::volume_digest::VolumeDigest;
use crate::host::state_file::{PendingEviction, StateStore};
use crate::serve::metrics::Metrics;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// The thread's name (in `ps -L`).
pub const THREAD_NAME: &str = "reloadlet-state";

/// After a failed write: 1 s doubling to 60 s, without end.
const RETRY: crate::retry::Backoff =
    crate::retry::Backoff::doubling(Duration::from_secs(1), Duration::from_secs(60));

/// What is written: the evictions still pending and each volume's last digest.
pub struct Snapshot {
    pub pending_evictions: Vec<PendingEviction>,
    pub volumes: Vec<(VolumeKey, VolumeDigest)>,
    /// The pacers of pods with something pending or recent (docs/pacing.md).
    pub pacers: std::collections::BTreeMap<String, crate::core::pacing::Pacer>,
}

enum Job {
    Save(Snapshot),
    /// Write this one and say when done (at shutdown).
    Flush(Snapshot, tokio::sync::oneshot::Sender<()>),
}

/// Hands snapshots to the writer thread.
pub struct StateWriter {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Where the thread could not be started: written in place.
    fallback: Option<(StateStore, Metrics)>,
}

impl StateWriter {
    pub fn start(store: StateStore, metrics: Metrics) -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let m = metrics.clone();
        // The store moves into the thread; keep a handle for the in-place fallback.
        let store_for_thread = store.clone();
        match std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || run(&store_for_thread, &rx, &m))
        {
            Ok(thread) => Self {
                jobs: Some(tx),
                thread: Some(thread),
                fallback: None,
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the state writer thread; state is written on the agent's thread");
                Self {
                    jobs: None,
                    thread: None,
                    fallback: Some((store, metrics)),
                }
            }
        }
    }

    /// Queues `snapshot` (a newer one replaces it if it has not been written yet).
    pub fn save(&self, snapshot: Snapshot) {
        match (&self.jobs, &self.fallback) {
            (Some(tx), _) => {
                if tx.send(Job::Save(snapshot)).is_err() {
                    writer_gone();
                }
            }
            (None, Some((store, metrics))) => {
                write(store, &snapshot, metrics);
            }
            (None, None) => {}
        }
    }

    /// Writes `snapshot` and returns once it is on disk (or the write failed).
    pub async fn flush(&mut self, snapshot: Snapshot) {
        if let Some(tx) = self.jobs.take() {
            let (done, wait) = tokio::sync::oneshot::channel();
            if tx.send(Job::Flush(snapshot, done)).is_ok() {
                let _ = wait.await;
            }
            drop(tx);
            if let Some(thread) = self.thread.take() {
                // The thread ends once its channel is closed; it has nothing left to do.
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
        } else if let Some((store, metrics)) = &self.fallback {
            write(store, &snapshot, metrics);
        }
    }
}

fn writer_gone() {
    tracing::error!("the state writer thread is gone; state is no longer written");
}

fn run(store: &StateStore, jobs: &mpsc::Receiver<Job>, metrics: &Metrics) {
    let mut pending: Option<Snapshot> = None;
    let mut delays = RETRY.delays();
    let mut retry = delays.next().unwrap_or(RETRY.max);
    loop {
        let job = if pending.is_some() {
            match jobs.recv_timeout(retry) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => {
                    retry = delays.next().unwrap_or(RETRY.max);
                    None
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        };
        let mut ack = None;
        let mut take = |job: Job, pending: &mut Option<Snapshot>| match job {
            Job::Save(s) => *pending = Some(s),
            Job::Flush(s, done) => {
                *pending = Some(s);
                ack = Some(done);
            }
        };
        if let Some(job) = job {
            take(job, &mut pending);
            // Only the newest snapshot matters.
            while let Ok(job) = jobs.try_recv() {
                take(job, &mut pending);
            }
        }
        if let Some(snapshot) = &mut pending {
            // A stable order in the file, by volume key (the detector's map has none), so two
            // writes of the same state are the same bytes.
            snapshot.volumes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            if write(store, snapshot, metrics) {
                pending = None;
                delays.reset();
                retry = delays.next().unwrap_or(RETRY.max);
            }
        }
        if let Some(done) = ack {
            let _ = done.send(());
        }
    }
}

fn write(store: &StateStore, snapshot: &Snapshot, metrics: &Metrics) -> bool {
    match store.save(
        &snapshot.pending_evictions,
        &snapshot.volumes,
        &snapshot.pacers,
    ) {
        Ok(()) => true,
        Err(e) => {
            metrics.state_write_errors.inc();
            tracing::error!(error = %e, "cannot write state; changes seen now may be acted on again after a restart");
            false
        }
    }
}
