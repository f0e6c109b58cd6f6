//! The ConfigMaps and Secrets a feature's pods consume, followed for that feature: the
//! bookkeeping ([`tracker`]: references, baselines, which pods a change concerns), the digest of
//! what a pod reads ([`digest`]; its env references: [`env_refs`]), the signed baseline annotation ([`baseline`]), and one GET of
//! an object when it may have changed ([`fetch`]). The env consumers and the rollout feature
//! each own one [`Consumed`] and are peers over it: neither reaches into the other.

pub mod baseline;
pub mod digest;
pub mod env_refs;
pub mod fetch;
pub mod tracker;
mod vec_map;

#[cfg(test)]
pub(crate) mod tests;

use super::feature::World;
use crate::core::model::SourceKind;
use crate::ports::{EnvApi, ObjectKey};
use fetch::{read_channel, BoundedReads, FETCHES_IN_FLIGHT};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use fetch::Fetched;
pub use tracker::{Change, Tracker};

/// One feature's consumed objects: its [`Tracker`] and its GETs (a few at a time, the other
/// due objects queued: [`BoundedReads`]; retried with back-off, answered on [`Self::next`]).
/// GETs are sent by the leader only, once the first pod list is in.
pub struct Consumed {
    pub tracker: Tracker,
    api: Arc<dyn EnvApi>,
    stop: CancellationToken,
    reads: BoundedReads,
    tx: mpsc::UnboundedSender<Fetched>,
    rx: mpsc::UnboundedReceiver<Fetched>,
    permits: Arc<Semaphore>,
}

impl Consumed {
    pub fn new(tracker: Tracker, api: Arc<dyn EnvApi>, stop: CancellationToken) -> Self {
        let (tx, rx, permits) = read_channel();
        Self {
            tracker,
            api,
            stop,
            reads: BoundedReads::new(FETCHES_IN_FLIGHT),
            tx,
            rx,
            permits,
        }
    }

    /// A pod was put into the tracker, which asked for `fetch`. `fixed`: the pod's pacing
    /// annotation, which refused its action, is fixed now — its objects are compared again
    /// (its baselines never moved, so a change refused meanwhile is found again and acted on).
    pub fn pod_put(&mut self, uid: &str, mut fetch: Vec<ObjectKey>, fixed: bool, world: &World) {
        if fixed {
            self.tracker.release(uid);
            for key in self.tracker.objects_of(uid) {
                if !fetch.contains(&key) {
                    fetch.push(key);
                }
            }
        }
        if world.leader && world.pods_listed {
            let now = Instant::now().into_std();
            for key in fetch {
                self.fetch(key, None, now);
            }
        }
    }

    /// An object's new resourceVersion (`None`: deleted), from the metadata watch.
    pub fn object(&mut self, key: &ObjectKey, rv: Option<&str>, world: &World) {
        if world.leader && world.pods_listed && self.tracker.needs_fetch(key, rv) {
            self.fetch(key.clone(), rv, Instant::now().into_std());
        }
    }

    /// After a relist of `kind`: what changed (or vanished) during a watch gap.
    pub fn relisted(&mut self, kind: SourceKind, objects: &[(ObjectKey, String)], world: &World) {
        let rvs: HashMap<&ObjectKey, &str> = objects.iter().map(|(k, v)| (k, v.as_str())).collect();
        for key in self
            .tracker
            .objects()
            .into_iter()
            .filter(|k| k.kind == kind)
        {
            let rv = rvs.get(&key).copied();
            self.object(&key, rv, world);
        }
    }

    /// Compares every pod's baseline with what its objects hold now (a change made while the
    /// controller was down, or led by another replica, is found here). Those a relist replayed
    /// just before were fetched already: one GET each.
    pub fn fetch_all(&mut self, world: &World) {
        if !world.leader {
            return;
        }
        let now = Instant::now().into_std();
        for key in self.tracker.unrequested() {
            self.fetch(key, None, now);
        }
    }

    /// Leadership changed: what was asked for is forgotten, and a new leader compares
    /// everything.
    pub fn leader(&mut self, leader: bool, world: &World) {
        self.tracker.forget_fetches();
        // Reads not started yet: a follower sends none (a new term queues them again).
        self.reads.retain(|_| false);
        if leader && world.pods_listed {
            self.fetch_all(world);
        }
    }

    /// The next GET answered (cancel-safe: channel receives, each followed by bookkeeping that
    /// does not wait). A read that failed frees its place here while it waits to be tried
    /// again.
    pub async fn next(&mut self) -> Option<Fetched> {
        loop {
            tokio::select! {
                biased;
                () = self.reads.failure() => self.start_reads(),
                fetched = self.rx.recv() => {
                    let fetched = fetched?;
                    self.reads.answered(&fetched.key);
                    self.reads.done();
                    self.start_reads();
                    return Some(fetched);
                }
            }
        }
    }

    /// One GET of `key` (retried with back-off while it fails); answered on [`Self::next`].
    fn fetch(&mut self, key: ObjectKey, rv: Option<&str>, seen: std::time::Instant) {
        let seq = self.tracker.start_fetch(&key, rv);
        self.reads.queue_read(key, seq, seen);
        self.start_reads();
    }

    /// Starts the reads there is room for.
    fn start_reads(&mut self) {
        self.reads
            .start(&self.api, &self.permits, &self.stop, &self.tx);
    }
}
