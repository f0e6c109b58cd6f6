//! The event loop: watch events and pod updates in, decisions out. Single owner of the
//! detection state; every effect (signals, evictions, Events) goes through the
//! [`Executor`], whose edges are the traits in [`crate::ports`].

pub mod budget_warnings;
mod decisions;
pub mod hasher;
pub mod hot_slice;
pub mod hot_thread;
pub mod state_writer;
#[cfg(test)]
mod tests;

use crate::config::Settings;
use crate::core::debounce::{Debouncer, PendingChange};
use crate::core::detect::{ChangeDetector, Observation, Recorded};
use crate::core::model::{PodInfo, VolumeKey, VolumePlugin};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::{IndexChange, PodIndex};
use crate::core::policy::{self, ChangedVolumes, Decision};
use crate::core::volume_digest::{HashKey, VolumeDigest};
use crate::execute::evict::{EvictJob, EvictionSettings};
use crate::execute::http::HttpJob;
use crate::execute::signal::SignalJob;
pub use crate::execute::Deps;
use crate::execute::Executor;
use crate::host::inotify::{LookCause, VolumeWatcher, WatchEvent, WatchStats};
use crate::host::state_file::{SavedState, StateStore};
use crate::host::volume_read::{
    data_target, hash_volume_counted, legacy_sha256, CountedResult, DataTarget, Layout,
};
use crate::k8s::pod_watch::PodUpdate;
use crate::ports::PodRef;
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;
use prometheus_client::metrics::counter::Counter;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long a change of a pod the API has not shown us yet is kept waiting (1 s steps).
const UNKNOWN_POD_ATTEMPTS: u32 = 30;

/// Chores after a change (state write, `NoDisruptionBudget` warnings) wait this long, so a
/// burst of changes costs one of each.
const CHORES_DELAY: Duration = Duration::from_secs(1);

/// Volumes whose last hash read more than this are hashed on the hasher thread
/// ([`hasher`]); smaller ones in place, on the hot thread. A volume not hashed yet is sized
/// from its files' metadata first ([`crate::host::volume_read::content_bytes`]).
pub const INLINE_HASH_BYTES: u64 = 256 * 1024;

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
    deps: Deps,
    metrics: Metrics,
    /// `(swaps, swaps_unchanged)` per plugin, resolved once ([`Metrics::swap_counters`]).
    swap_counters: [(Counter, Counter); 3],
    health: Arc<Health>,
    index: Arc<RwLock<PodIndex>>,
    detector: ChangeDetector<VolumeDigest>,
    /// The node's key for content digests (from the state dir, or random when not persisted).
    hash_key: HashKey,
    /// Unkeyed whole-volume hashes of a version-1 state file, used once per volume to tell a
    /// change made while reloadlet was down from none.
    legacy: HashMap<VolumeKey, [u8; 32]>,
    /// Projected volumes seen before their pod: which files count depends on the pod spec, so
    /// they are hashed once the pod is known (nothing is decided about them before).
    deferred: HashMap<VolumeKey, (PathBuf, LookCause)>,
    debouncer: Debouncer,
    exec: Executor,
    /// Pod UID → the annotation error already reported (report each error once).
    warned: HashMap<String, String>,
    /// Writes the state file off the hot thread (`None`: nothing is persisted).
    store: Option<state_writer::StateWriter>,
    /// The pending evictions last written (the loaded digests went to the detector).
    saved: SavedState,
    state_dirty: bool,
    synced: bool,
    last_stats: WatchStats,
    /// Containers whose main process was looked up ahead of any change.
    warmed: HashSet<(String, String)>,
    /// Warning `NoDisruptionBudget` for evict pods (off without [`Agent::with_budgets`]).
    budget_warnings: budget_warnings::BudgetWarnings,
    /// Fast projection: when each pod's latest nudge was seen.
    nudges: crate::core::nudge_delay::NudgeDelays,
    /// When [`Self::chores`] run next (`None`: nothing to do, no timer).
    chores_at: Option<Instant>,
    /// Big volumes go to the hasher thread.
    hasher: hasher::Hasher,
    hashed: Option<mpsc::UnboundedReceiver<hasher::Hashed>>,
    /// Bytes the last hash of each volume read (decides where the next one runs).
    sizes: HashMap<VolumeKey, u64>,
    /// Volumes on the hasher thread now; `Some`: looked at again once it is back (a swap
    /// came meanwhile).
    hashing: HashMap<VolumeKey, Option<(PathBuf, LookCause)>>,
    /// Swapped volumes taken as changed unhashed (`ChangeDetector::swapped`), with their
    /// directory: hashed after their action.
    swapped: HashMap<VolumeKey, PathBuf>,
    /// Those being hashed on the hasher thread.
    recording: HashSet<VolumeKey>,
    /// Per volume, the kubelet write (`..data` target) whose content the detector holds, or
    /// that was last taken as changed: a swap to another one is new content; a swap event
    /// naming the same one was queued before that content was hashed (a pod's first write,
    /// seen by the discovery hash before its `IN_MOVED_TO` is read) and is looked at by
    /// hashing, as any other.
    links: HashMap<VolumeKey, DataTarget>,
    /// Decisions per pod version and change ([`decisions`]): the policy is parsed once per
    /// pod version, not once per swap.
    decisions: decisions::Decisions,
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
        let detector = ChangeDetector::with_saved(saved.volume_digests());
        let legacy = saved.legacy_hashes().into_iter().collect();
        // Held by the detector now; the writer thread encodes them afresh at each write.
        saved.volumes = Default::default();
        saved.legacy = Default::default();
        let hash_key = match &store {
            Some(store) => store.key().clone(),
            None => HashKey::generate().expect("the kernel's random source (getrandom)"),
        };
        let writer = store.map(|store| state_writer::StateWriter::start(store, metrics.clone()));
        let index = Arc::new(RwLock::new(PodIndex::default()));
        let (hasher, hashed) = hasher::Hasher::new(hash_key.clone());
        let exec = Executor::new(
            &settings.node_name,
            settings.dry_run,
            eviction,
            &deps,
            metrics.clone(),
            index.clone(),
            stop_evictions,
        );
        Self {
            debouncer: Debouncer::new(settings.debounce),
            settings,
            deps,
            swap_counters: VolumePlugin::ALL.map(|p| metrics.swap_counters(p)),
            metrics,
            health,
            index,
            detector,
            hash_key,
            legacy,
            deferred: HashMap::new(),
            exec,
            warned: HashMap::new(),
            store: writer,
            saved,
            state_dirty: false,
            synced: false,
            last_stats: WatchStats::default(),
            warmed: HashSet::new(),
            budget_warnings: Default::default(),
            nudges: Default::default(),
            chores_at: None,
            hasher,
            hashed: Some(hashed),
            sizes: HashMap::new(),
            hashing: HashMap::new(),
            swapped: HashMap::new(),
            recording: HashSet::new(),
            links: HashMap::new(),
            decisions: Default::default(),
        }
    }

    /// Warns about evict pods that no PodDisruptionBudget in `budgets` selects.
    pub fn with_budgets(
        mut self,
        budgets: Arc<RwLock<crate::core::disruption_budgets::BudgetIndex>>,
    ) -> Self {
        self.budget_warnings = budget_warnings::BudgetWarnings::new(budgets);
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
        let budgets_changed = self.budget_warnings.budgets_changed();
        let mut pods_open = true;
        let mut hashed = self.hashed.take().expect("run once");
        self.update_watch_gauges(&watcher);
        self.chores();
        loop {
            let deadline = self.next_deadline();
            self.health.set_idle(true);
            let wake = tokio::select! {
                biased;
                _ = shutdown.cancelled() => Wake::Shutdown,
                batch = watcher.next_batch() => Wake::Watch(batch),
                update = pods.recv(), if pods_open => Wake::Pod(update),
                done = hashed.recv() => Wake::Hashed(done),
                _ = sleep_until(deadline), if deadline.is_some() => Wake::Due,
                _ = evictions_changed.notified() => Wake::Changed,
                _ = notified(budgets_changed.as_deref()) => Wake::Changed,
            };
            self.health.set_idle(false);
            match wake {
                Wake::Shutdown => break,
                Wake::Watch(batch) => {
                    let batch = batch.map_err(|e| anyhow::anyhow!("volume watcher failed: {e}"))?;
                    self.on_watch(&watcher, batch);
                    if self.settings.debounce.is_zero() {
                        // No window: act in this turn rather than after a timer.
                        self.fire_due();
                    }
                    // After the action: nothing a signal waits for.
                    self.update_watch_gauges(&watcher);
                }
                Wake::Pod(Some(update)) => {
                    self.on_pod(update);
                    self.chores_soon();
                }
                Wake::Pod(None) => pods_open = false,
                Wake::Hashed(Some(done)) => {
                    self.on_hashed(done);
                    if self.settings.debounce.is_zero() {
                        self.fire_due();
                    }
                }
                Wake::Hashed(None) => {}
                Wake::Due => self.fire_due(),
                Wake::Changed => self.chores_soon(),
            }
            // A pod's arrival hashes the volumes that waited for it: keep the gauge current.
            self.metrics.volumes_tracked.set(self.detector.len() as i64);
            if self.state_dirty {
                self.chores_soon();
            }
        }
        self.shutdown().await;
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        match (self.debouncer.next_deadline(), self.chores_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn chores_soon(&mut self) {
        self.chores_at
            .get_or_insert_with(|| Instant::now() + CHORES_DELAY);
    }

    fn on_watch(&mut self, watcher: &VolumeWatcher, batch: Vec<WatchEvent>) {
        let now = Instant::now();
        for event in batch {
            match event {
                WatchEvent::Look { key, cause } => self.look(watcher, &key, cause, now),
                WatchEvent::VolumeGone(key) => {
                    self.deferred.remove(&key);
                    self.sizes.remove(&key);
                    self.hashing.remove(&key);
                    self.recording.remove(&key);
                    self.swapped.remove(&key);
                    self.links.remove(&key);
                    self.detector.forget_volume(&key);
                    self.state_dirty = true;
                }
                WatchEvent::PodGone { pod_uid } => {
                    self.deferred.retain(|k, _| k.pod_uid != pod_uid);
                    self.sizes.retain(|k, _| k.pod_uid != pod_uid);
                    self.hashing.retain(|k, _| k.pod_uid != pod_uid);
                    self.recording.retain(|k| k.pod_uid != pod_uid);
                    self.swapped.retain(|k, _| k.pod_uid != pod_uid);
                    self.links.retain(|k, _| k.pod_uid != pod_uid);
                    self.detector.forget_pod(&pod_uid);
                    self.debouncer.remove_pod(&pod_uid);
                    self.state_dirty = true;
                }
                WatchEvent::Overflow => {
                    tracing::warn!("inotify queue overflowed; rescanning every watched volume");
                }
            }
        }
    }

    fn update_watch_gauges(&mut self, watcher: &VolumeWatcher) {
        let stats = watcher.stats();
        self.metrics.inotify_watches.set(stats.watches as i64);
        self.metrics.watched_volumes.set(stats.volumes as i64);
        self.metrics
            .unwatched_volumes
            .set(stats.unwatched_volumes as i64);
        self.metrics.volumes_tracked.set(self.detector.len() as i64);
        self.metrics
            .inotify_overflows
            .inc_by(stats.overflows.saturating_sub(self.last_stats.overflows));
        self.metrics.inotify_watch_limit_errors.inc_by(
            stats
                .watch_limit_errors
                .saturating_sub(self.last_stats.watch_limit_errors),
        );
        self.last_stats = stats;
    }

    fn swap_counters(&self, plugin: VolumePlugin) -> &(Counter, Counter) {
        let at = VolumePlugin::ALL.iter().position(|p| *p == plugin);
        &self.swap_counters[at.expect("every plugin is in ALL")]
    }

    fn look(&mut self, watcher: &VolumeWatcher, key: &VolumeKey, cause: LookCause, now: Instant) {
        if cause == LookCause::Swap {
            self.swap_counters(key.plugin).0.inc();
        }
        self.look_at(key, watcher.volume_dir(key), cause, now);
    }

    /// Which files of the volume count. A configMap/secret volume: all. A projected volume:
    /// those of its ConfigMap/Secret sources, known from the pod spec; `None` until the pod is
    /// known (the volume is then looked at again, see [`Self::look_deferred`]).
    fn layout(&self, key: &VolumeKey) -> Option<Layout> {
        if key.plugin != VolumePlugin::Projected {
            return Some(Layout::whole());
        }
        let index = self.index();
        let pod = index.get(&key.pod_uid)?;
        Some(
            pod.volume(&key.volume)
                .map_or_else(Layout::whole, Layout::of),
        )
    }

    /// Projected volumes that waited for their pod: looked at now that it is known. A change
    /// they went through meanwhile shows against the saved digest like any other.
    fn look_deferred(&mut self) {
        let known: Vec<VolumeKey> = {
            let index = self.index();
            self.deferred
                .keys()
                .filter(|k| index.get(&k.pod_uid).is_some())
                .cloned()
                .collect()
        };
        for key in known {
            if let Some((dir, cause)) = self.deferred.remove(&key) {
                self.look_at(&key, dir, cause, Instant::now());
            }
        }
    }

    fn look_at(&mut self, key: &VolumeKey, dir: PathBuf, cause: LookCause, now: Instant) {
        let Some(layout) = self.layout(key) else {
            tracing::debug!(volume = %key, ?cause, "projected volume of a pod not known yet; looked at when the pod is");
            self.deferred.insert(key.clone(), (dir, cause));
            return;
        };
        if self.detector.last(key).is_none() {
            if let Some(old) = self.legacy.remove(key) {
                self.migrate(key, &dir, old);
            }
        }
        if cause == LookCause::Swap
            && key.plugin != VolumePlugin::Projected
            && !self.hashing.contains_key(key)
        {
            if let Some(target) = self.new_write(key, &dir) {
                if self.detector.swapped(key) {
                    // A configMap/secret volume: every file counts, and the kubelet swaps
                    // only new content (`ChangeDetector::swapped`). Act first; hash after the
                    // action.
                    self.links.insert(key.clone(), target);
                    self.swapped.insert(key.clone(), dir);
                    self.on_changed(key, cause, "swapped: hashed after the action", now);
                    return;
                }
            }
        }
        if let Some(again) = self.hashing.get_mut(key) {
            // Its hash is on the hasher thread: look again once it is back, in order.
            let keep_swap = matches!(again, Some((_, LookCause::Swap)));
            if !keep_swap {
                *again = Some((dir, cause));
            }
            return;
        }
        let size = match self.sizes.get(key) {
            Some(&size) => size,
            None => crate::host::volume_read::content_bytes(&dir),
        };
        match self.hash_here_or_send(key, dir, layout, cause, false, size) {
            Some(result) => self.observe_hash(key, cause, result, now),
            None => {
                tracing::debug!(volume = %key, bytes = size, "big volume: hashed on the hasher thread");
                self.hashing.insert(key.clone(), None);
            }
        }
    }

    /// Hashes a volume of about `size` bytes here, or — above [`INLINE_HASH_BYTES`], while
    /// the hasher thread runs — sends it there (`None`; the result comes back through
    /// [`Self::on_hashed`] with `after_action`).
    fn hash_here_or_send(
        &mut self,
        key: &VolumeKey,
        dir: PathBuf,
        layout: Layout,
        cause: LookCause,
        after_action: bool,
        size: u64,
    ) -> Option<CountedResult> {
        let max_bytes = self.settings.max_volume_bytes;
        let (dir, layout) = if size > INLINE_HASH_BYTES {
            let job = hasher::HashJob {
                key: key.clone(),
                dir,
                cause,
                layout,
                max_bytes,
                after_action,
            };
            match self.hasher.send(job) {
                Ok(()) => return None,
                Err(job) => (job.dir, job.layout),
            }
        } else {
            (dir, layout)
        };
        Some(hash_volume_counted(
            &dir,
            max_bytes,
            &self.hash_key,
            &layout,
        ))
    }

    /// The write `..data` points to now, when the detector knows the volume's content from
    /// another one (one `readlink(2)`). `None`: no known write to differ from (not hashed
    /// since start), or the same write.
    fn new_write(&self, key: &VolumeKey, dir: &std::path::Path) -> Option<DataTarget> {
        let known = self.links.get(key)?;
        data_target(dir).filter(|now| now != known)
    }

    /// A big volume's hash is back from the hasher thread.
    fn on_hashed(&mut self, done: hasher::Hashed) {
        if done.after_action {
            if self.recording.remove(&done.key) {
                if self.swapped.contains_key(&done.key) {
                    // Swapped again meanwhile: that swap's hash is the one to keep.
                    self.hash_swapped();
                } else {
                    self.record_hash(&done.key, done.result);
                }
            }
            return;
        }
        let Some(again) = self.hashing.remove(&done.key) else {
            // The volume went away meanwhile.
            return;
        };
        let now = Instant::now();
        self.observe_hash(&done.key, done.cause, done.result, now);
        if let Some((dir, cause)) = again {
            self.look_at(&done.key, dir, cause, now);
        }
    }

    fn observe_hash(
        &mut self,
        key: &VolumeKey,
        cause: LookCause,
        result: CountedResult,
        now: Instant,
    ) {
        let hash = match result {
            Ok(Some(counted)) => {
                self.sizes.insert(key.clone(), counted.read);
                self.links.insert(key.clone(), counted.target);
                Some(counted.digest)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(volume = %key, error = %e, "cannot hash volume; change ignored");
                return;
            }
        };
        let observation = self.detector.observe(key, hash);
        tracing::debug!(volume = %key, ?cause, ?observation, "looked at volume");
        match observation {
            Observation::Changed => self.on_changed(key, cause, "hashed", now),
            Observation::Baseline => self.state_dirty = true,
            Observation::Unchanged if cause == LookCause::Swap => {
                self.swap_counters(key.plugin).1.inc();
                tracing::debug!(volume = %key, "swap without content change; skipped");
            }
            Observation::Unchanged | Observation::NotWritten => {}
        }
    }

    /// A volume's content changed (seen at `now`, told by `how`): its pod's action follows
    /// after the debounce.
    fn on_changed(&mut self, key: &VolumeKey, cause: LookCause, how: &'static str, now: Instant) {
        tracing::debug!(volume = %key, ?cause, how, "volume content changed");
        if let Some(delay) = self.nudges.on_swap(&key.pod_uid, std::time::Instant::now()) {
            self.metrics.projection_delay.observe(delay.as_secs_f64());
            tracing::debug!(volume = %key, delay_ms = delay.as_secs_f64() * 1e3, "projection nudge answered");
        }
        self.debouncer.add(&key.pod_uid, &key.volume, now);
        self.state_dirty = true;
    }

    /// After the actions: hashes the swapped volumes whose pods have nothing pending any
    /// more (acted on, or given up on), so the state file knows their content. Small ones
    /// here, big ones on the hasher thread.
    fn hash_swapped(&mut self) {
        if self.swapped.is_empty() {
            return;
        }
        let due: Vec<VolumeKey> = self
            .swapped
            .keys()
            .filter(|k| !self.debouncer.contains(&k.pod_uid) && !self.recording.contains(*k))
            .cloned()
            .collect();
        for key in due {
            let Some(dir) = self.swapped.remove(&key) else {
                continue;
            };
            let size = self.sizes.get(&key).copied().unwrap_or(0);
            match self.hash_here_or_send(&key, dir, Layout::whole(), LookCause::Swap, true, size) {
                Some(result) => self.record_hash(&key, result),
                None => {
                    self.recording.insert(key);
                }
            }
        }
    }

    fn record_hash(&mut self, key: &VolumeKey, result: CountedResult) {
        self.state_dirty = true;
        let digest = match result {
            Ok(Some(counted)) => {
                self.sizes.insert(key.clone(), counted.read);
                if self.links.get(key) != Some(&counted.target) {
                    // The kubelet wrote again since the swap acted on; that write's own
                    // event follows. Keeping the content from before the first swap, it
                    // is taken as changed too (never missed, at worst acted on once more).
                    return self.detector.unrecorded(key);
                }
                counted.digest
            }
            Ok(None) => return self.detector.unrecorded(key),
            Err(e) => {
                tracing::warn!(volume = %key, error = %e, "cannot hash the swapped volume after its action; a restart acts on it once more");
                return self.detector.unrecorded(key);
            }
        };
        if self.detector.record(key, digest) == Recorded::Unchanged {
            self.swap_counters(key.plugin).1.inc();
            tracing::warn!(volume = %key, "..data was swapped without a content change: not the kubelet's AtomicWriter? The action was taken for nothing");
        }
    }

    /// First look at a volume saved by reloadlet 0.1 (an unkeyed SHA-256 of the whole tree). The
    /// same whole-tree hash now means nothing changed while reloadlet was down: the look is a
    /// baseline. Another one in a volume whose every file comes from ConfigMaps/Secrets is a
    /// real change: acted on like any (all its sources named). In a projected volume with
    /// downwardAPI/token files it cannot be told from a label edit or token refresh: a
    /// baseline, logged (the one window in which a change is not acted on).
    fn migrate(&mut self, key: &VolumeKey, dir: &std::path::Path, old: [u8; 32]) {
        let whole = match legacy_sha256(dir, self.settings.max_volume_bytes) {
            Ok(Some(h)) => h,
            Ok(None) | Err(_) => return,
        };
        if whole == old {
            return;
        }
        let only_sources = key.plugin != VolumePlugin::Projected
            || self
                .index()
                .get(&key.pod_uid)
                .and_then(|p| p.volume(&key.volume))
                .is_some_and(|v| v.other_paths.is_empty());
        if only_sources {
            tracing::info!(volume = %key, "volume changed while reloadlet was down (migrated state)");
            self.detector.seed(key, VolumeDigest::default());
        } else {
            tracing::info!(volume = %key, "migrated state: cannot tell a ConfigMap/Secret change made while reloadlet was down from a downwardAPI/token update in this projected volume; taken as the new baseline");
        }
    }

    /// Which sources of each changed volume of the pod changed since the last action.
    fn changed_sources(&self, pod: &PodInfo, change: &PendingChange) -> ChangedVolumes {
        change
            .volumes
            .iter()
            .map(|volume| {
                let sources = self
                    .detector
                    .pending_change(&pod.uid, volume)
                    .zip(pod.volume(volume))
                    .map(|((before, now), spec)| {
                        now.changed_parts(before)
                            .iter()
                            .flat_map(|part| Layout::sources_of(spec, part))
                            .collect::<BTreeSet<_>>()
                    });
                (volume.clone(), sources)
            })
            .collect()
    }

    /// Looks up, in one pass over /proc, the main processes of the containers a signal
    /// could target, so that a later change costs two small reads instead of a scan.
    /// `then_ready`: report ready once the pass is done (the first pod list), so that the
    /// first swaps after `/readyz` take the kept pidfds rather than a /proc scan of their
    /// own beside the pass (tens of milliseconds at 250 pods).
    fn warm<'a>(&mut self, pods: impl IntoIterator<Item = &'a PodInfo>, then_ready: bool) {
        let mut targets = Vec::new();
        for pod in pods {
            let signals = matches!(
                policy::validated_policy(pod),
                Ok(Some(p)) if matches!(p.action, crate::core::annotations::Action::Signal { .. })
            );
            // Outside --namespaces / --exclude-namespaces nothing will be signalled: no
            // /proc pass and no pidfd for it.
            let in_scope = self.settings.namespaces.check(&pod.namespace).is_none();
            if !signals || pod.terminating || !in_scope {
                continue;
            }
            for c in pod.containers.iter().filter(|c| c.running) {
                let Some(id) = &c.container_id else { continue };
                if self.warmed.insert((pod.uid.clone(), id.id.clone())) {
                    targets.push((pod.uid.clone(), id.clone()));
                }
            }
        }
        let ready = then_ready.then(|| self.health.clone());
        if targets.is_empty() {
            if let Some(health) = ready {
                report_ready(&health, 0);
            }
            return;
        }
        let processes = self.deps.processes.clone();
        // On the async runtime's blocking pool: a pass over /proc is no work for the hot
        // thread.
        self.exec.runtime().spawn_blocking(move || {
            let found = processes.warm(&targets);
            tracing::debug!(
                containers = targets.len(),
                found,
                "main processes looked up ahead"
            );
            if let Some(health) = ready {
                report_ready(&health, found);
            }
        });
    }

    fn on_pod(&mut self, update: PodUpdate) {
        match update {
            PodUpdate::Apply(pod) => {
                self.validate(&pod);
                self.see_nudge(&pod);
                self.warm([&pod], false);
                self.exec.pod_updated(&pod);
                let change = self.index_mut().apply(pod);
                if change == IndexChange::Added {
                    tracing::debug!("pod added to the index");
                    self.look_deferred();
                }
            }
            PodUpdate::Delete { uid } => {
                self.index_mut().delete(&uid);
                self.forget_pod(&uid);
            }
            PodUpdate::Resync(list) => {
                for pod in &list {
                    self.validate(pod);
                    self.see_nudge(pod);
                    self.exec.pod_updated(pod);
                }
                if !self.synced {
                    tracing::info!(pods = list.len(), "pod list synced");
                }
                self.warm(&list, !self.synced);
                let gone = self.index_mut().reset(list);
                for uid in gone {
                    self.forget_pod(&uid);
                }
                self.look_deferred();
                // Decoding a full pod list is the agent's largest allocation: hand it back.
                crate::host::memory::release_free_heap();
                if self.synced {
                    self.metrics.api_watch_restarts.inc();
                } else {
                    self.synced = true;
                    self.resume_evictions();
                }
            }
            PodUpdate::WatchError(e) => {
                self.metrics.api_watch_restarts.inc();
                if self.synced {
                    tracing::warn!(error = %e, cached_pods = self.index_len(), "pod watch failed; retrying with backoff (signals keep working from the cached pods)");
                } else {
                    tracing::warn!(error = %e, "pod watch failed before the first pod list; retrying with backoff; no pod is known yet, so volume changes cannot be acted on until a pod list arrives");
                }
            }
        }
        self.metrics.watched_pods.set(self.index_len() as i64);
        self.budget_warnings.pods_changed();
    }

    fn index(&self) -> std::sync::RwLockReadGuard<'_, PodIndex> {
        // A panic while holding the lock cannot leave the index half-updated: keep using it.
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    fn index_mut(&self) -> std::sync::RwLockWriteGuard<'_, PodIndex> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    fn pod(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.index().shared(uid)
    }

    fn index_len(&self) -> usize {
        self.index().len()
    }

    /// A pod left the API view: a change still in its debounce window is dropped.
    /// Fast projection: note when a new `reloadlet.io/projection-nudge` value shows up.
    fn see_nudge(&mut self, pod: &PodInfo) {
        let nudge = pod
            .annotations
            .get(crate::core::annotations::PROJECTION_NUDGE)
            .map(String::as_str);
        if let Some(delay) = self
            .nudges
            .on_pod(&pod.uid, nudge, std::time::Instant::now())
        {
            self.metrics.projection_delay.observe(delay.as_secs_f64());
        }
    }

    fn forget_pod(&mut self, uid: &str) {
        self.nudges.forget(uid);
        self.decisions.forget(uid);
        self.exec.pod_deleted(uid);
        if self.debouncer.remove_pod(uid) {
            tracing::info!(
                pod_uid = uid,
                "pod deleted while its change was pending; no action"
            );
        }
        self.warned.remove(uid);
        self.budget_warnings.forget(uid);
        self.warmed.retain(|(pod, _)| pod != uid);
        self.deps.processes.forget_pod(uid);
        self.detector.settle_pod(uid);
    }

    /// Reports a malformed annotation as soon as the pod is seen (once per distinct error).
    fn validate(&mut self, pod: &PodInfo) {
        if self.settings.namespaces.check(&pod.namespace).is_some() {
            return;
        }
        match policy::validated_policy(pod) {
            Err(message) => {
                if self.warned.get(&pod.uid) != Some(&message) {
                    let outcome = Outcome::InvalidAnnotation;
                    tracing::warn!(pod = %pod.full_name(), outcome = outcome.as_str(), error = %message, "invalid reloadlet annotation; the pod will not be reloaded");
                    self.exec
                        .report(&pod.into(), ActionKind::None, outcome, message.clone());
                    self.warned.insert(pod.uid.clone(), message);
                }
            }
            Ok(_) => {
                self.warned.remove(&pod.uid);
            }
        }
    }

    fn fire_due(&mut self) {
        let now = Instant::now();
        self.fire_due_at(now);
        if self.chores_at.is_some_and(|at| at <= now) {
            self.chores_at = None;
            self.chores();
        }
    }

    /// Acts on the changes whose debounce window ended by `now`, then hashes the volumes
    /// taken as changed on the kubelet's word ([`Self::hash_swapped`]).
    fn fire_due_at(&mut self, now: Instant) {
        self.fire_changes_due(now);
        self.hash_swapped();
    }

    /// A change of a pod the API has not shown yet waits 1 s more, [`UNKNOWN_POD_ATTEMPTS`]
    /// times at most.
    fn fire_changes_due(&mut self, now: Instant) {
        for (uid, change) in self.debouncer.take_due(now) {
            if self.act_on(&uid, &change) {
                continue;
            }
            if change.attempts < UNKNOWN_POD_ATTEMPTS {
                // The API view may lag the kubelet: wait for the pod a little.
                self.debouncer
                    .requeue(&uid, change, now + Duration::from_secs(1));
            } else {
                tracing::warn!(pod_uid = %uid, volumes = ?change.volumes, "volume changed for a pod the API server does not show on this node; no action");
                self.detector.settle_pod(&uid);
            }
        }
    }

    /// Decides and acts on a pod's change, then records its content as handled. `false`
    /// when the pod is not (yet) in the index.
    fn act_on(&mut self, uid: &str, change: &PendingChange) -> bool {
        let Some(pod) = self.pod(uid) else {
            return false;
        };
        self.act(&pod, change);
        self.detector.settle_pod(uid);
        self.state_dirty = true;
        true
    }

    fn act(&mut self, pod: &Arc<PodInfo>, change: &PendingChange) {
        if let Some(reason) = self.settings.namespaces.check(&pod.namespace) {
            tracing::debug!(pod = %pod.full_name(), reason, "outside the namespace filter; no action");
            return;
        }
        let volumes: Vec<&str> = change.volumes.iter().map(String::as_str).collect();
        let changed = self.changed_sources(pod, change);
        let decision = self.decisions.decide(pod, changed);
        let pod: &PodInfo = pod;
        match decision {
            Decision::NotOptedIn => {
                tracing::debug!(pod = %pod.full_name(), ?volumes, "not opted in; no action");
            }
            Decision::NothingToDo { reason } => {
                tracing::info!(pod = %pod.full_name(), ?volumes, action = "none", reason, "volume changed; nothing to do");
            }
            Decision::AlreadyTerminating => {
                tracing::info!(pod = %pod.full_name(), ?volumes, action = "evict", outcome = Outcome::Skipped.as_str(), "pod already terminating");
            }
            Decision::Invalid { message } => {
                let outcome = Outcome::InvalidAnnotation;
                tracing::warn!(pod = %pod.full_name(), ?volumes, action = "none", outcome = outcome.as_str(), error = %message, "volume changed but the annotation is invalid; no action");
                let note = format!("volume changed, no action: {message}");
                self.exec
                    .report(&pod.into(), ActionKind::None, outcome, note);
            }
            Decision::SubPathOnly { action, message } => {
                let outcome = Outcome::SubPathNotUpdated;
                tracing::warn!(pod = %pod.full_name(), ?volumes, action = action.as_str(), outcome = outcome.as_str(), message, "no action");
                self.exec.report(&pod.into(), action, outcome, message);
            }
            Decision::EvictRefused { message, cause } => {
                let outcome = Outcome::Refused;
                tracing::warn!(pod = %pod.full_name(), ?volumes, cause = %cause, action = "evict", outcome = outcome.as_str(), message, "eviction refused");
                self.exec
                    .report(&pod.into(), ActionKind::Evict, outcome, message);
            }
            Decision::Evict { cause } => {
                tracing::info!(pod = %pod.full_name(), ?volumes, cause = %cause, action = "evict", "requesting eviction");
                self.exec.evict(EvictJob {
                    pod: PodRef::from(pod),
                    cause: cause.to_string(),
                    first_seen: Some(change.first_seen),
                    sources: cause.sources,
                });
            }
            Decision::Http { target, cause } => {
                tracing::info!(pod = %pod.full_name(), ?volumes, cause = %cause, action = "http", "requesting a reload over HTTP");
                self.exec.http(HttpJob {
                    pod_uid: pod.uid.clone(),
                    target,
                    sources: cause.sources,
                    first_seen: change.first_seen,
                });
            }
            Decision::Signal {
                signal,
                check,
                targets,
                cause,
            } => {
                for target in targets {
                    let job = SignalJob {
                        pod_uid: pod.uid.clone(),
                        container: target.container,
                        signal,
                        first_seen: change.first_seen,
                        attempt: 1,
                        check,
                        sources: cause.sources.clone(),
                    };
                    self.exec.signal(job);
                }
            }
        }
    }

    /// After the first sync: evictions that were pending when reloadlet last stopped resume for
    /// pods that still exist with the same UID.
    fn resume_evictions(&mut self) {
        let pending = std::mem::take(&mut self.saved.pending_evictions);
        for p in pending {
            let known = self.index().get(&p.uid).is_some();
            if known {
                tracing::info!(pod = %format!("{}/{}", p.namespace, p.name), cause = %p.cause, "resuming an eviction pending before the restart");
                self.exec.evict(EvictJob {
                    pod: PodRef {
                        uid: p.uid,
                        namespace: p.namespace,
                        name: p.name,
                    },
                    cause: p.cause,
                    first_seen: None,
                    sources: Vec::new(),
                });
            }
        }
    }

    /// `NoDisruptionBudget` warnings and the state write, once after a burst of changes.
    fn chores(&mut self) {
        self.warn_unprotected_evictions();
        if self.state_dirty || self.evictions_changed() {
            self.save_state();
        }
    }

    fn warn_unprotected_evictions(&mut self) {
        let index = self.index.clone();
        let index = index.read().unwrap_or_else(|e| e.into_inner());
        let due = self
            .budget_warnings
            .due(index.iter(), &self.settings.namespaces);
        drop(index);
        for pod in due {
            let note = crate::core::disruption_budgets::no_budget_note();
            let outcome = Outcome::NoDisruptionBudget;
            tracing::warn!(pod = %pod.full_name(), action = "evict", outcome = outcome.as_str(), "{note}");
            self.exec
                .report(&(&pod).into(), ActionKind::Evict, outcome, note);
        }
    }

    fn evictions_changed(&self) -> bool {
        self.store.is_some() && self.exec.pending_evictions() != self.saved.pending_evictions
    }

    /// Hands a snapshot to the state writer thread: the encoding, write and fsyncs never
    /// hold up the hot thread.
    fn save_state(&mut self) {
        if let Some(snapshot) = self.snapshot() {
            if let Some(writer) = &self.store {
                writer.save(snapshot);
            }
        }
    }

    fn snapshot(&mut self) -> Option<state_writer::Snapshot> {
        self.store.as_ref()?;
        // Until the first sync, pending evictions from the last run are kept as they were.
        if self.synced {
            self.saved.pending_evictions = self.exec.pending_evictions();
        }
        self.state_dirty = false;
        Some(state_writer::Snapshot {
            pending_evictions: self.saved.pending_evictions.clone(),
            volumes: self.detector.snapshot(),
        })
    }

    async fn shutdown(&mut self) {
        tracing::info!("shutting down: acting on pending changes, then flushing state");
        let deadline = Instant::now() + self.settings.shutdown_grace;
        // Finish what is in the debounce window now rather than lose it.
        let pending: Vec<_> = self
            .debouncer
            .take_due(Instant::now() + Duration::from_secs(86400 * 365));
        for (uid, change) in pending {
            self.act_on(&uid, &change);
        }
        self.exec.drain(deadline).await;
        if let Some(snapshot) = self.snapshot() {
            if let Some(writer) = &mut self.store {
                writer.flush(snapshot).await;
            }
        }
        tracing::info!("state flushed; bye");
    }
}

/// `/readyz` answers 200 from now on: the pod list is in and the main processes of its
/// signal targets looked up (`processes` of them found).
fn report_ready(health: &Health, processes: usize) {
    health.set_ready(true);
    tracing::info!(processes, "main processes looked up; ready");
}

async fn notified(notify: Option<&tokio::sync::Notify>) {
    match notify {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
