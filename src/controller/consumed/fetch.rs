//! One GET of a ConfigMap/Secret a pod consumes, retried with backoff while it fails, a few at
//! a time; the answer comes back on a channel. Shared by the env consumers and the rollout
//! feature.

use crate::ports::{EnvApi, ObjectData, ObjectKey};
use crate::retry::{Backoff, Retries};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// At most this many GETs at a time.
const FETCHES_IN_FLIGHT: usize = 8;
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
/// [`FETCHES_IN_FLIGHT`] per feature at a time); `what` comes back on `tx` with its data.
/// Shared by the env consumers and the rollout feature.
pub fn spawn_read(
    api: &Arc<dyn EnvApi>,
    permits: &Arc<Semaphore>,
    stop: &CancellationToken,
    tx: &mpsc::UnboundedSender<Fetched>,
    what: Fetched,
) {
    spawn_read_telling(api, permits, stop, tx, None, what);
}

/// [`spawn_read`] that also sends the key on `failed` at its first failed attempt, before it
/// waits to try again (a caller that bounds the reads it starts frees that read's place
/// while it waits: a read that keeps failing, a 403 on one object, must not hold up the
/// others).
pub fn spawn_read_telling(
    api: &Arc<dyn EnvApi>,
    permits: &Arc<Semaphore>,
    stop: &CancellationToken,
    tx: &mpsc::UnboundedSender<Fetched>,
    mut failed: Option<mpsc::UnboundedSender<ObjectKey>>,
    mut what: Fetched,
) {
    let api = api.clone();
    let tx = tx.clone();
    let permits = permits.clone();
    let stop = stop.clone();
    tokio::spawn(async move {
        let key = what.key.clone();
        let mut retries = Retries::new(&FETCH_RETRY).stopped_by(stop.clone());
        let read_until_done = async {
            loop {
                // The permit is held for the read only, not for the wait after it.
                let read = match permits.clone().acquire_owned().await {
                    Ok(_permit) => api.read(&key).await,
                    Err(_) => return None,
                };
                let error = match read {
                    Ok(data) => return Some(data),
                    Err(e) => e,
                };
                if let Some(failed) = failed.take() {
                    let _ = failed.send(key.clone());
                }
                let delay = retries.next(None)?;
                tracing::warn!(kind = key.kind.as_str(), namespace = %key.namespace, name = %key.name, error = %error, retry_in_ms = delay.as_millis() as u64, "cannot read a ConfigMap/Secret a pod consumes; retrying");
                if !retries.wait(delay).await {
                    return None;
                }
            }
        };
        // A stop also ends a read in flight.
        what.data = tokio::select! {
            _ = stop.cancelled() => return,
            data = read_until_done => match data {
                Some(data) => data,
                None => return,
            },
        };
        let _ = tx.send(what);
    });
}

/// A new pair of the channel [`spawn_read`] answers on, and its permits.
pub fn read_channel() -> (
    mpsc::UnboundedSender<Fetched>,
    mpsc::UnboundedReceiver<Fetched>,
    Arc<Semaphore>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, rx, Arc::new(Semaphore::new(FETCHES_IN_FLIGHT)))
}
