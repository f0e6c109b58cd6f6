//! The node agent's event loop, dispatch only: watch events, pod updates, hashes back from
//! the hasher thread and timers in; each routed to its owner — the volumes to the
//! [`volumes::VolumeTracker`], the pods to [`pods::Pods`], the periodic chores to
//! [`chores::Chores`] — and every effect (signals, evictions, Events) goes through the
//! [`Executor`], whose edges are the traits in [`crate::ports`].
//!
//! Time is read from Tokio's clock ([`now`]), so a paused clock drives the loop in tests.

pub mod budget_warnings;
mod chores;
mod decisions;
pub mod hasher;
pub mod hot_thread;
mod migrate;
pub mod pacing;
mod pods;
pub mod state_writer;
#[cfg(test)]
mod tests;
mod volumes;

pub use volumes::INLINE_HASH_BYTES;

use crate::config::Settings;
use crate::contain::{Caught, Quarantine, Stage, QUARANTINE_CAP};
use crate::core::debounce::Debouncer;
use crate::core::model::VolumeKey;
use crate::core::pod_index::PodIndex;
use crate::execute::evict::EvictionSettings;
use crate::execute::report::Line;
pub use crate::execute::Deps;
use crate::execute::Executor;
use crate::host::inotify::{VolumeWatcher, WatchEvent, WatchStats};
use crate::host::state_file::StateStore;
use crate::k8s::pod_watch::PodUpdate;
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;
use chores::Chores;
use pods::{Acted, Pods};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use volumes::{Changed, VolumeTracker};

/// How long a change of a pod the API has not shown us yet is kept waiting (1 s steps).
const UNKNOWN_POD_ATTEMPTS: u32 = 30;

/// What woke the loop.
enum Wake {
    /// A big volume's hash came back from the hasher thread.
    Hashed(Option<hasher::Hashed>),
    Shutdown,
    Watch(Result<Vec<WatchEvent>, crate::host::inotify::WatchError>),
    Pod(Option<PodUpdate>),
    Due,
    /// Evictions or budgets changed.
    Changed,
}

pub struct Agent {
    settings: Settings,
    metrics: Metrics,
    health: Arc<Health>,
    exec: Executor,
    /// Every watched volume: detection, hashing, migration.
    volumes: VolumeTracker,
    /// The pods, what is pending for them, and acting on it.
    pods: Pods,
    /// The state write, budget warnings, resumed evictions.
    chores: Chores,
    last_stats: WatchStats,
    /// Big volumes' hashes, back from the hasher thread (taken by [`Self::run`]).
    hashed: Option<mpsc::UnboundedReceiver<hasher::Hashed>>,
    /// Volumes whose look panicked (`crate::contain`): forgotten, and not looked at again
    /// until they (or their pod) go away.
    poisoned_volumes: Quarantine<VolumeKey, ()>,
}

/// The pod index, read. A panic while holding the lock cannot leave the index half-updated:
/// keep using it.
fn read_index(index: &RwLock<PodIndex>) -> std::sync::RwLockReadGuard<'_, PodIndex> {
    index.read().unwrap_or_else(|e| e.into_inner())
}

/// The agent's clock: Tokio's, so that a paused clock drives the loop in tests. Outside a
/// paused runtime it is the monotonic clock, as `std::time::Instant::now()`.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl Agent {
    /// `store`: where state persists (`None`: nothing is persisted, every volume starts as a
    /// baseline). `stop_evictions` ends pending eviction retries (at shutdown).
    pub fn new(
        settings: Settings,
        eviction: EvictionSettings,
        deps: Deps,
        metrics: Metrics,
        health: Arc<Health>,
        store: Option<StateStore>,
        stop_evictions: CancellationToken,
    ) -> Self {
        let mut saved = store.as_ref().map(StateStore::load).unwrap_or_default();
        let digests = saved.volume_digests();
        let legacy = saved.legacy_hashes();
        // Held by the volume tracker now; the writer thread encodes them afresh at each write.
        saved.volumes = Default::default();
        saved.legacy = Default::default();
        let hash_key = match &store {
            Some(store) => store.key().clone(),
            None => crate::core::volume_digest::HashKey::generate()
                .expect("the kernel's random source (getrandom)"),
        };
        let writer = store.map(|store| state_writer::StateWriter::start(store, metrics.clone()));
        let index = Arc::new(RwLock::new(PodIndex::default()));
        let (volumes, hashed) = VolumeTracker::new(
            digests,
            legacy,
            hash_key.clone(),
            index.clone(),
            settings.volumes.max_volume_bytes,
            &metrics,
        );
        let volumes = volumes
            .with_csi_settle(settings.volumes.csi_settle)
            .with_pods_dir(settings.paths.kubelet_root.join("pods"));
        let exec = Executor::new(
            &settings.node_name,
            settings.scope.dry_run,
            eviction,
            &deps,
            metrics.clone(),
            index.clone(),
            stop_evictions,
        )
        .with_restart_spacing(settings.restart_spacing)
        .with_restart_without_grant(settings.restart_without_grant);
        // Restart request ids carry a MAC with the agent's own key (its state file): one made
        // before an agent restart is recognised after it (docs/restart.md, "The grant").
        exec.use_restart_key(hash_key);
        // Wall time for pacing, read once here and carried forward on the agent's clock.
        let clock = pacing::WallClock::new(jiff::Timestamp::now(), now());
        let mut paced =
            pacing::PodPacing::new(settings.pacing.clone(), clock, metrics.pacing.clone());
        paced.restore(std::mem::take(&mut saved.pacers));
        crate::contain::precreate(&metrics, &Stage::AGENT);
        let pods = Pods::new(
            index,
            Debouncer::new(settings.volumes.debounce),
            settings.scope.namespaces.clone(),
            paced,
            deps.processes.clone(),
            health.clone(),
            metrics.clone(),
        )
        .with_http_fence(settings.http_fence);
        Self {
            settings,
            metrics,
            health,
            exec,
            volumes,
            pods,
            chores: Chores::new(writer, saved),
            last_stats: WatchStats::default(),
            hashed: Some(hashed),
            poisoned_volumes: Quarantine::new(QUARANTINE_CAP),
        }
    }

    /// Reads the controller's Lease while a restart request waits (docs/restart.md, "Without
    /// a controller").
    pub fn with_controller_lease(self, lease: Arc<dyn crate::ports::LeaseReader>) -> Self {
        self.exec.watch_lease(lease);
        self
    }

    /// Warns about evict pods that no PodDisruptionBudget in `budgets` selects, and tells
    /// structural budget blocks from transient ones (`reloadlet.io/on-blocked`).
    pub fn with_budgets(
        mut self,
        budgets: Arc<RwLock<crate::core::disruption_budgets::BudgetIndex>>,
    ) -> Self {
        self.exec.use_budgets(budgets.clone());
        self.chores.with_budgets(budgets);
        self
    }

    /// Runs until `shutdown` is cancelled, then finishes in-flight work (within
    /// `--shutdown-grace`) and flushes state.
    pub async fn run(
        mut self,
        mut watcher: VolumeWatcher,
        mut pods: mpsc::Receiver<PodUpdate>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        // No timer runs while nothing happens: the loop sleeps until the kernel, the API
        // watch, an eviction task or the budget watch has news, or a debounce window or
        // the chores are due.
        let evictions_changed = self.exec.evictions_changed();
        let budgets_changed = self.chores.budgets_changed();
        let mut pods_open = true;
        let Some(mut hashed) = self.hashed.take() else {
            anyhow::bail!("the agent's loop runs once");
        };
        self.update_watch_gauges(&watcher);
        self.chores.run(&self.pods, &mut self.volumes, &self.exec);
        // The waits that outlive one turn are made once and kept across turns: a swap's turn
        // then polls them in place instead of making, registering and dropping each of them
        // (a notification's waiter list, the timer wheel's entry) before its signal. A
        // notification's wait is made again once it fired; the timer is moved only when the
        // deadline moves (`Sleep::reset`), which the chores' 1-s timer does once a second.
        let cancelled = shutdown.cancelled();
        let evictions = evictions_changed.notified();
        let budgets = notified(budgets_changed.as_deref());
        let timer = unarmed_timer();
        tokio::pin!(cancelled, evictions, budgets, timer);
        let mut timer_at: Option<Instant> = None;
        loop {
            let deadline = self.next_deadline();
            if deadline != timer_at {
                match deadline {
                    Some(at) => timer.as_mut().reset(at.into()),
                    // Nothing due: a timer set earlier is dropped, so that it does not wake
                    // the loop once for nothing.
                    None => timer.set(unarmed_timer()),
                }
                timer_at = deadline;
            }
            self.health.set_idle(true);
            let wake = tokio::select! {
                biased;
                _ = &mut cancelled => Wake::Shutdown,
                batch = watcher.next_batch() => Wake::Watch(batch),
                update = pods.recv(), if pods_open => Wake::Pod(update),
                done = hashed.recv() => Wake::Hashed(done),
                _ = &mut timer, if deadline.is_some() => {
                    timer_at = None;
                    Wake::Due
                }
                _ = &mut evictions => {
                    evictions.set(evictions_changed.notified());
                    Wake::Changed
                }
                _ = &mut budgets => {
                    budgets.set(notified(budgets_changed.as_deref()));
                    Wake::Changed
                }
            };
            self.health.set_idle(false);
            match wake {
                Wake::Shutdown => break,
                Wake::Watch(batch) => {
                    let batch = batch.map_err(|e| anyhow::anyhow!("volume watcher failed: {e}"))?;
                    self.on_watch(&watcher, batch);
                    if self.settings.volumes.debounce.is_zero() {
                        // No window: act in this turn rather than after a timer.
                        self.fire_due();
                    }
                    // After the action: nothing a signal waits for.
                    self.update_watch_gauges(&watcher);
                }
                Wake::Pod(Some(update)) => {
                    self.on_pod(update);
                    self.chores.soon(now());
                }
                Wake::Pod(None) => pods_open = false,
                Wake::Hashed(Some(done)) => {
                    self.on_hashed(done);
                    if self.settings.volumes.debounce.is_zero() {
                        self.fire_due();
                    }
                }
                Wake::Hashed(None) => {}
                Wake::Due => self.fire_due(),
                Wake::Changed => self.chores.soon(now()),
            }
            self.report_over_limit();
            // A pod's arrival hashes the volumes that waited for it: keep the gauge current.
            self.metrics
                .watch
                .volumes_tracked
                .set(self.volumes.len() as i64);
            if self.volumes.dirty() {
                self.chores.soon(now());
            }
        }
        self.shutdown().await;
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        [
            self.pods.next_deadline(),
            self.chores.next(),
            self.volumes.next_settled(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn on_watch(&mut self, watcher: &VolumeWatcher, batch: Vec<WatchEvent>) {
        let at = now();
        for event in batch {
            match event {
                WatchEvent::Look { key, cause } => {
                    if self.poisoned_volumes.contains(&key) {
                        continue;
                    }
                    let dir = watcher.volume_dir(&key);
                    let pods = &mut self.pods;
                    let volumes = &mut self.volumes;
                    let looked = crate::contain::catch(|| {
                        volumes.look(&key, dir, cause, at, &mut |c: Changed<'_>| {
                            pods.content_changed(c.key, c.at, now())
                        })
                    });
                    if let Err(caught) = looked {
                        self.volume_panicked(&key, &caught);
                    }
                }
                WatchEvent::VolumeGone(key) => {
                    self.poisoned_volumes.release(&key);
                    self.volumes.forget_volume(&key);
                }
                WatchEvent::PodGone { pod_uid } => {
                    self.poisoned_volumes.retain(|k| *k.pod_uid != *pod_uid);
                    self.volumes.forget_pod(&pod_uid);
                    self.pods.drop_pending(&pod_uid);
                }
                WatchEvent::Overflow => {
                    tracing::warn!("inotify queue overflowed; rescanning every watched volume");
                }
                WatchEvent::TooManyVolumes { key, max } => {
                    let why = format!(
                        "the pod has more than {max} volumes that reloadlet follows; this one and the rest are not watched"
                    );
                    self.volumes.refused_unwatched(&key, why);
                }
            }
        }
    }

    /// A panic was caught while looking at (or taking the hash of) volume `key`: logged and
    /// counted, the volume forgotten (its half-made state dropped) and quarantined until it or
    /// its pod goes away; a Warning `InternalError` on its pod when the pod opted in and is
    /// inside the namespace filter. The rest of the node goes on.
    fn volume_panicked(&mut self, key: &VolumeKey, caught: &Caught) {
        tracing::error!(volume = %key, stage = Stage::Volume.as_str(), panic = %caught.message, at = caught.location.as_deref().unwrap_or("?"), "panic while looking at a volume; it is not followed until it goes away");
        crate::contain::count(&self.metrics, Stage::Volume);
        let forgotten = crate::contain::catch(|| self.volumes.forget_volume(key));
        if forgotten.is_err() {
            tracing::error!(volume = %key, "panic while forgetting a volume after a panic");
        }
        self.poisoned_volumes.hold(key.clone(), ());
        let pod = self.pods.index().get(&key.pod_uid).cloned();
        let opted_in = |p: &crate::core::model::PodInfo| {
            p.annotations.contains_key(crate::core::annotations::ACTION) && self.pods.in_scope(p)
        };
        let Some(pod) = pod.filter(opted_in) else {
            return;
        };
        let note = format!(
            "reloadlet could not handle volume {} of this pod: {}; it is not followed until the pod is recreated",
            key.volume, caught.message
        );
        let exec = &self.exec;
        let reported = crate::contain::catch(|| {
            exec.report(
                &(&pod).into(),
                crate::core::outcome::ActionKind::None,
                crate::core::outcome::Outcome::InternalError,
                note,
                Line::written(),
            )
        });
        if let Err(again) = reported {
            tracing::error!(volume = %key, panic = %again.message, "panic while reporting a caught panic; no Event");
        }
    }

    /// Volumes refused for a limit: a Warning `VolumeOverLimit` on a pod that opted in (its
    /// author can fix the volume), a log line for any other; the rest of the node goes on.
    fn report_over_limit(&mut self) {
        for (key, why) in self.volumes.take_over_limit() {
            let pod = self.pods.index().get(&key.pod_uid).cloned();
            if pod.is_none() {
                // The volume came before its pod: told when the pod is known.
                self.volumes.keep_over_limit(key, why);
                continue;
            }
            let opted_in = pod
                .as_ref()
                .is_some_and(|p| p.annotations.contains_key(crate::core::annotations::ACTION));
            match pod {
                Some(pod) if opted_in => {
                    let note = format!("volume {} is not followed: {why}", key.volume);
                    let line = Line::saying("volume over a limit; not followed").error(&why);
                    let volume = [&*key.volume];
                    self.exec.report(
                        &(&pod).into(),
                        crate::core::outcome::ActionKind::None,
                        crate::core::outcome::Outcome::VolumeOverLimit,
                        note,
                        line.volumes(&volume),
                    );
                }
                _ => {
                    tracing::warn!(volume = %key, error = %why, "volume of a pod that did not opt in is over a limit; not followed");
                }
            }
        }
    }

    fn update_watch_gauges(&mut self, watcher: &VolumeWatcher) {
        let stats = watcher.stats();
        self.metrics.watch.inotify_watches.set(stats.watches as i64);
        self.metrics.watch.watched_volumes.set(stats.volumes as i64);
        self.metrics
            .watch
            .unwatched_volumes
            .set(stats.unwatched_volumes as i64);
        self.metrics
            .watch
            .volumes_tracked
            .set(self.volumes.len() as i64);
        self.metrics
            .watch
            .inotify_overflows
            .inc_by(stats.overflows.saturating_sub(self.last_stats.overflows));
        self.metrics.watch.inotify_watch_limit_errors.inc_by(
            stats
                .watch_limit_errors
                .saturating_sub(self.last_stats.watch_limit_errors),
        );
        self.last_stats = stats;
    }

    /// A big volume's hash is back from the hasher thread.
    fn on_hashed(&mut self, done: hasher::Hashed) {
        let key = done.key.clone();
        if self.poisoned_volumes.contains(&key) {
            return;
        }
        let pods = &mut self.pods;
        let volumes = &mut self.volumes;
        let step = crate::contain::catch(|| {
            volumes.on_hashed(done, now(), &mut |c: Changed<'_>| {
                pods.content_changed(c.key, c.at, now())
            })
        });
        let swapped_again = match step {
            Ok(again) => again,
            Err(caught) => {
                self.volume_panicked(&key, &caught);
                false
            }
        };
        if swapped_again {
            let pods = &self.pods;
            self.volumes.hash_swapped(|uid| pods.pending(uid));
        }
    }

    fn on_pod(&mut self, update: PodUpdate) {
        let entered = self.pods.on_update(update, &self.exec, now());
        for uid in &entered.gone {
            self.chores.forget(uid);
            self.volumes.given_up(uid);
            self.poisoned_volumes.retain(|k| *k.pod_uid != **uid);
        }
        if entered.added {
            self.look_deferred();
        }
        if entered.first_sync {
            self.chores.resume_evictions(&self.pods, &self.exec);
        }
        self.chores.pods_changed();
    }

    fn look_deferred(&mut self) {
        let pods = &mut self.pods;
        let volumes = &mut self.volumes;
        let step = crate::contain::catch(|| {
            volumes.look_deferred(now(), &mut |c: Changed<'_>| {
                pods.content_changed(c.key, c.at, now())
            })
        });
        if let Err(caught) = step {
            self.volumes_panicked("volumes waiting for their pod", &caught);
        }
    }

    /// A panic was caught in a step over several volumes (no one volume to blame): logged
    /// and counted; those volumes are looked at again at their next event.
    fn volumes_panicked(&self, what: &str, caught: &Caught) {
        tracing::error!(volumes = what, stage = Stage::Volume.as_str(), panic = %caught.message, at = caught.location.as_deref().unwrap_or("?"), "panic while looking at volumes; the loop goes on");
        crate::contain::count(&self.metrics, Stage::Volume);
    }

    fn fire_due(&mut self) {
        let now = now();
        self.fire_due_at(now);
        if self.chores.take_due(now) {
            self.chores.run(&self.pods, &mut self.volumes, &self.exec);
        }
    }

    /// Acts on the changes whose debounce window ended by `now`, then hashes the volumes
    /// taken as changed on the kubelet's word.
    fn fire_due_at(&mut self, now: Instant) {
        let pods = &mut self.pods;
        let volumes = &mut self.volumes;
        let step = crate::contain::catch(|| {
            volumes.look_settled(now, &mut |c: Changed<'_>| {
                pods.content_changed(c.key, c.at, now)
            })
        });
        if let Err(caught) = step {
            self.volumes_panicked("CSI volumes settling", &caught);
        }
        self.fire_changes_due(now);
        let pods = &self.pods;
        self.volumes.hash_swapped(|uid| pods.pending(uid));
    }

    /// A change of a pod the API has not shown yet waits 1 s more, [`UNKNOWN_POD_ATTEMPTS`]
    /// times at most.
    fn fire_changes_due(&mut self, now: Instant) {
        // Changes held by their pod's pacing whose time came: decided again, not new changes.
        for (uid, change) in self.pods.take_held_due(now) {
            if self.act_on(&uid, &change, false, now) == Acted::Unknown {
                tracing::info!(pod_uid = %uid, "the pod of a held change is gone; no action");
                self.volumes.given_up(&uid);
            }
        }
        // Changes refused for an invalid pacing annotation that is fixed now: new to the pacer.
        for (uid, change) in self.pods.pacing_mut().take_fixed() {
            if self.act_on(&uid, &change, true, now) == Acted::Unknown {
                self.volumes.given_up(&uid);
            }
        }
        for (uid, mut change) in self.pods.take_due(now) {
            if change.announced && self.volumes.hashing(&uid) {
                // Due on its nudge's announcement, but another volume of the pod is on the
                // hasher thread: its change may belong to the same sync.
                let at = now + crate::core::debounce::ANNOUNCED_GRACE;
                self.pods.postpone(&uid, change, at);
                continue;
            }
            self.pods.pacing_mut().merge_held(&uid, &mut change);
            if self.act_on(&uid, &change, true, now) != Acted::Unknown {
                continue;
            }
            if change.attempts < UNKNOWN_POD_ATTEMPTS {
                // The API view may lag the kubelet: wait for the pod a little.
                self.pods
                    .requeue(&uid, change, now + Duration::from_secs(1));
            } else {
                tracing::warn!(pod_uid = %uid, volumes = ?change.volumes, "volume changed for a pod the API server does not show on this node; no action");
                self.volumes.given_up(&uid);
            }
        }
    }

    /// Decides and acts on a pod's change, then records its content as handled. `false`
    /// when the pod is not (yet) in the index.
    /// `fresh`: a new change (not a held one coming due).
    fn act_on(
        &mut self,
        uid: &str,
        change: &crate::core::debounce::PendingChange,
        fresh: bool,
        now: Instant,
    ) -> Acted {
        let volumes = &self.volumes;
        let changed =
            |pod: &crate::core::model::PodInfo| volumes.changed_sources(pod, &change.volumes);
        // The writes the action is for, pinned before it (the pod's status record).
        let seen = || volumes.pins(uid, &change.volumes);
        let pods = &mut self.pods;
        let exec = &self.exec;
        let step = crate::contain::catch(|| pods.act(uid, change, fresh, changed, seen, exec, now));
        let acted = match step {
            Ok(acted) => acted,
            Err(caught) => {
                // The change is dropped with the pod's other pending work (`Pods::poison`);
                // its content counts as handled, so a later change is a new one.
                let pod = self.pods.index().get(uid).cloned();
                match pod {
                    Some(pod) => self.pods.poison(&pod, Stage::Act, &caught, &self.exec),
                    None => {
                        tracing::error!(pod_uid = uid, panic = %caught.message, "panic while acting on a pod that left the index");
                        crate::contain::count(&self.metrics, Stage::Act);
                    }
                }
                Acted::Done
            }
        };
        if acted == Acted::Done {
            self.volumes.acted(uid);
        }
        acted
    }

    async fn shutdown(&mut self) {
        tracing::info!("shutting down: acting on pending changes, then flushing state");
        let deadline = now() + self.settings.shutdown_grace;
        // Finish what is in the debounce window now rather than lose it.
        // Changes held by their pod's pacing stay held: their pacers are saved with the state,
        // and the changed content is found again at the next start.
        let at = now();
        let pending = self.pods.take_due(at + Duration::from_secs(86400 * 365));
        for (uid, mut change) in pending {
            self.pods.pacing_mut().merge_held(&uid, &mut change);
            self.act_on(&uid, &change, true, at);
        }
        self.exec.drain(deadline).await;
        self.chores
            .flush(&self.pods, &mut self.volumes, &self.exec)
            .await;
        tracing::info!("state flushed; bye");
    }
}

async fn notified(notify: Option<&tokio::sync::Notify>) {
    match notify {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// A timer in no timer wheel: Tokio registers a `Sleep` at its first poll, not when it is
/// made (tokio 1.54 `src/time/sleep.rs`, `poll_elapsed`: the `TimerEntry` is created there),
/// and the loop polls it only while a deadline is set (after `Sleep::reset` to it).
fn unarmed_timer() -> tokio::time::Sleep {
    tokio::time::sleep_until(now().into())
}
