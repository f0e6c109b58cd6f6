//! One GET of a ConfigMap/Secret a pod consumes, retried with backoff while it fails, a few at
//! a time ([`BoundedReads`]); the answer comes back on a channel. Shared by the env consumers,
//! the rollout feature and the data versions.

use crate::ports::{EnvApi, ObjectData, ObjectKey};
use crate::retry::{Attempt, Backoff, Ended, Retries};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// At most this many GETs at a time.
pub const FETCHES_IN_FLIGHT: usize = 8;
/// A failed GET of an env consumer's source: again after 0.5 s, doubling up to a minute,
/// until it succeeds or the controller stops.
const FETCH_RETRY: Backoff = Backoff::doubling(Duration::from_millis(500), Duration::from_secs(60));

/// One GET answered.
pub struct Fetched {
    pub key: ObjectKey,
    pub seq: u64,
    pub data: Option<ObjectData>,
    pub seen: std::time::Instant,
}

/// One GET of `what.key` on the runtime (retried with backoff while it fails, at most
/// [`FETCHES_IN_FLIGHT`] per feature at a time); `what` comes back on `tx` with its data. The
/// key is sent on `failed` at its first failed attempt, before it waits to try again
/// ([`BoundedReads`] frees that read's place while it waits: a read that keeps failing, a 403
/// on one object, must not hold up the others).
fn spawn_read(
    api: &Arc<dyn EnvApi>,
    permits: &Arc<Semaphore>,
    stop: &CancellationToken,
    tx: &mpsc::UnboundedSender<Fetched>,
    failed: mpsc::UnboundedSender<ObjectKey>,
    mut what: Fetched,
) {
    let api = api.clone();
    let tx = tx.clone();
    let permits = permits.clone();
    let stop = stop.clone();
    tokio::spawn(async move {
        let key = what.key.clone();
        let mut retries = Retries::new(&FETCH_RETRY).stopped_by(stop.clone());
        let failed = std::sync::Mutex::new(Some(failed));
        let read_until_done = retries.run(
            || async {
                // The permit is held for the read only, not for the wait after it.
                let read = match permits.clone().acquire_owned().await {
                    Ok(_permit) => api.read(&key).await,
                    Err(_) => return Attempt::Done(None),
                };
                match read {
                    Ok(data) => Attempt::Done(Some(data)),
                    Err(e) => {
                        if let Some(failed) = failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
                            let _ = failed.send(key.clone());
                        }
                        Attempt::Again(e, None)
                    }
                }
            },
            |error, delay| {
                tracing::warn!(kind = key.kind.as_str(), namespace = %key.namespace, name = %key.name, error = %error, retry_in_ms = delay.as_millis() as u64, "cannot read a ConfigMap/Secret a pod consumes; retrying");
            },
        );
        // A stop also ends a read in flight.
        what.data = tokio::select! {
            _ = stop.cancelled() => return,
            ended = read_until_done => match ended {
                Ended::Done(Some(data)) => data,
                Ended::Done(None) | Ended::GaveUp(_) | Ended::Stopped(_) => return,
            },
        };
        let _ = tx.send(what);
    });
}

/// Reads started at most `limit` objects at a time, the other due keys queued: a feature
/// with every consumed object due at once (the data versions at start, 22,002 objects at the
/// controller benchmark's size; the env consumers and rollouts when they gain leadership)
/// spawns `limit` tasks, not one per object waiting for a permit (docs/status.md, "What this
/// costs"). An object holds its place from its read's start until the feature says
/// [`Self::done`] (its data handled, and any write it made due done); a read that fails frees
/// its place while it waits to be tried again, so objects that keep failing (a 403 on one)
/// hold up no other.
pub struct BoundedReads {
    limit: usize,
    /// Due keys, each with the newest sequence number it was queued with and when it was
    /// first found due (one read serves every time it was queued before its turn).
    queue: BTreeMap<ObjectKey, (u64, std::time::Instant)>,
    in_progress: usize,
    /// Objects whose read failed and is tried again (a count: two reads of one object may be
    /// in flight, each started by its own version).
    retrying: HashMap<ObjectKey, usize>,
    failed_tx: mpsc::UnboundedSender<ObjectKey>,
    failed_rx: mpsc::UnboundedReceiver<ObjectKey>,
}

impl BoundedReads {
    pub fn new(limit: usize) -> Self {
        let (failed_tx, failed_rx) = mpsc::unbounded_channel();
        Self {
            limit: limit.max(1),
            queue: BTreeMap::new(),
            in_progress: 0,
            retrying: HashMap::new(),
            failed_tx,
            failed_rx,
        }
    }

    /// `key` is due to be read (once, however often it is queued before its turn).
    pub fn queue(&mut self, key: ObjectKey) {
        self.queue_read(key, 0, std::time::Instant::now());
    }

    /// [`Self::queue`] with the answer's sequence number (the newest queued wins: the read
    /// starts after all of them) and when the change was seen (the earliest is kept).
    pub fn queue_read(&mut self, key: ObjectKey, seq: u64, seen: std::time::Instant) {
        let due = self.queue.entry(key).or_insert((seq, seen));
        due.0 = due.0.max(seq);
    }

    /// `key` was deleted: not read.
    pub fn forget(&mut self, key: &ObjectKey) {
        self.queue.remove(key);
    }

    /// Keeps queued only the keys `keep` accepts (the others were deleted).
    pub fn retain(&mut self, keep: impl Fn(&ObjectKey) -> bool) {
        self.queue.retain(|key, _| keep(key));
    }

    /// Starts reads of queued objects while fewer than the limit are in progress; each answer
    /// comes on `tx` ([`spawn_read`]).
    pub fn start(
        &mut self,
        api: &Arc<dyn EnvApi>,
        permits: &Arc<Semaphore>,
        stop: &CancellationToken,
        tx: &mpsc::UnboundedSender<Fetched>,
    ) {
        while self.in_progress < self.limit {
            let Some((key, (seq, seen))) = self.queue.pop_first() else {
                return;
            };
            self.in_progress += 1;
            let what = Fetched {
                key,
                seq,
                data: None,
                seen,
            };
            spawn_read(api, permits, stop, tx, self.failed_tx.clone(), what);
        }
    }

    /// A read's answer arrived (before it is handled): a read that failed first takes a place
    /// again until [`Self::done`].
    pub fn answered(&mut self, key: &ObjectKey) {
        if let Some(n) = self.retrying.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.retrying.remove(key);
            }
            self.in_progress += 1;
        }
    }

    /// One object's read, and any write it made due, is done: its place is free.
    pub fn done(&mut self) {
        self.in_progress = self.in_progress.saturating_sub(1);
    }

    /// Waits for a read's first failure and frees its place (cancel-safe: a channel). Poll it
    /// before the answers (`biased`): a read sends its failure before its answer.
    pub async fn failure(&mut self) {
        if let Some(key) = self.failed_rx.recv().await {
            *self.retrying.entry(key).or_default() += 1;
            self.done();
        }
    }
}

/// A new pair of the channel the reads answer on, and their permits.
pub fn read_channel() -> (
    mpsc::UnboundedSender<Fetched>,
    mpsc::UnboundedReceiver<Fetched>,
    Arc<Semaphore>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, rx, Arc::new(Semaphore::new(FETCHES_IN_FLIGHT)))
}
