//! The volume tracker: what the agent knows of each watched volume, in one map
//! (`VolumeKey → VolumeState`), and the one owner of its detection ([`ChangeDetector`]),
//! hashing (in place, or on the [`hasher`] thread) and migration of 0.1 hashes. A look at a
//! volume goes in; "its content changed" comes out, handed to the pod side by the loop.
//!
//! Following one volume change: [`VolumeTracker::look`] → (a configMap/secret swap of a new
//! write: changed on the kubelet's word, hashed after the action by
//! [`VolumeTracker::hash_swapped`]) or (hashed here, or on the hasher thread and back through
//! [`VolumeTracker::on_hashed`]) → the detector's [`Observation`] → `changed`.

use super::hasher::{self, Hasher};
use super::migrate::migrate;
use super::read_index;
use crate::core::detect::{ChangeDetector, Observation, Recorded};
use crate::core::model::{VolumeKey, VolumePlugin};
use crate::core::pod_index::PodIndex;
use crate::core::volume_digest::{HashKey, VolumeDigest};
use crate::execute::applied::{Pin, Seen};
use crate::host::inotify::volume_path;
use crate::host::inotify::LookCause;
use crate::host::volume_read::{
    content_bytes, data_target, hash_volume_counted, CountedResult, DataTarget, Layout,
};
use crate::serve::metrics::Metrics;
use prometheus_client::metrics::counter::Counter;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

mod settle;
use settle::Settling;
mod sources;

/// Volumes whose last hash read more than this are hashed on the hasher thread
/// ([`hasher`]); smaller ones in place, on the hot thread. A volume not hashed yet is sized
/// from its files' metadata first ([`crate::host::volume_read::content_bytes`]).
pub const INLINE_HASH_BYTES: u64 = 256 * 1024;

/// Where a look at the volume stands.
#[derive(Debug, Default)]
enum Look {
    #[default]
    Idle,
    /// A projected volume seen before its pod: which files count depends on the pod spec, so
    /// it is hashed once the pod is known (nothing is decided about it before).
    Deferred { dir: PathBuf, cause: LookCause },
    /// Its hash is on the hasher thread; `again`: looked at again once it is back, in order
    /// (a look came meanwhile; a swap is not overwritten by a later look of another cause).
    Hashing { again: Option<(PathBuf, LookCause)> },
}

/// The hash after the action of a configMap/secret volume taken as changed unhashed
/// ([`ChangeDetector::swapped`]).
#[derive(Debug, Default)]
enum AfterAction {
    #[default]
    None,
    /// Hashed once its pod has nothing pending any more (acted on, or given up on).
    Swapped { dir: PathBuf },
    /// That hash is on the hasher thread; `swapped_again`: a swap came meanwhile, whose own
    /// hash is the one to keep.
    Recording { swapped_again: Option<PathBuf> },
}

/// One volume: what its last hash told, and its phases.
#[derive(Debug, Default)]
struct VolumeState {
    /// Bytes the last hash read (decides where the next one runs).
    size: Option<u64>,
    /// The kubelet write (`..data` target) whose content the detector holds, or that was last
    /// taken as changed: a swap to another one is new content; a swap event naming the same
    /// one was queued before that content was hashed (a pod's first write, seen by the
    /// discovery hash before its `IN_MOVED_TO` is read) and is looked at by hashing, as any
    /// other.
    link: Option<DataTarget>,
    /// The unkeyed whole-volume hash of a version-1 state file, used once to tell a change
    /// made while reloadlet was down from none.
    legacy: Option<[u8; 32]>,
    look: Look,
    after: AfterAction,
    /// The limit the volume's last hash was refused for (reported once until it changes).
    over_limit: Option<String>,
}

/// A volume whose content changed at `at`: its pod's action follows after the debounce.
pub struct Changed<'a> {
    pub key: &'a VolumeKey,
    pub at: Instant,
}

pub struct VolumeTracker {
    states: HashMap<VolumeKey, VolumeState>,
    /// The volumes in [`AfterAction::Swapped`], so the pass after each action touches only
    /// them.
    swapped: Vec<VolumeKey>,
    detector: ChangeDetector<VolumeDigest>,
    /// The node's key for content digests (from the state dir, or random when not persisted).
    hash_key: HashKey,
    hasher: Hasher,
    /// Read for a projected volume's layout (the pod spec) and a migration.
    index: Arc<RwLock<PodIndex>>,
    max_bytes: u64,
    /// `(swaps, swaps_unchanged)` per plugin, resolved once ([`Metrics::swap_counters`]).
    swap_counters: [(Counter, Counter); 4],
    /// Something to persist changed since the last [`Self::snapshot`].
    dirty: bool,
    settling: Settling,
    /// Volumes newly refused for a limit, for the loop to report ([`Self::take_over_limit`]).
    over_limit: Vec<(VolumeKey, String)>,
    /// `<kubelet root>/pods`: where a pinned write is read from ([`Self::pins`]).
    pods_dir: PathBuf,
}

impl VolumeTracker {
    /// Starts from the digests (and 0.1 hashes) saved by the last run. The results of the
    /// hasher thread come back on the returned receiver, for [`Self::on_hashed`].
    pub fn new(
        saved: Vec<(VolumeKey, VolumeDigest)>,
        legacy: Vec<(VolumeKey, [u8; 32])>,
        hash_key: HashKey,
        index: Arc<RwLock<PodIndex>>,
        max_bytes: u64,
        metrics: &Metrics,
    ) -> (Self, tokio::sync::mpsc::UnboundedReceiver<hasher::Hashed>) {
        let (hasher, hashed) = Hasher::new(hash_key.clone());
        let states = legacy
            .into_iter()
            .map(|(key, old)| {
                let state = VolumeState {
                    legacy: Some(old),
                    ..Default::default()
                };
                (key, state)
            })
            .collect();
        let tracker = Self {
            states,
            swapped: Vec::new(),
            detector: ChangeDetector::with_saved(saved),
            hash_key,
            hasher,
            index,
            max_bytes,
            swap_counters: VolumePlugin::ALL.map(|p| metrics.swap_counters(p)),
            dirty: false,
            over_limit: Vec::new(),
            settling: Settling::default(),
            pods_dir: PathBuf::new(),
        };
        (tracker, hashed)
    }

    /// Volumes whose content is known.
    /// Volumes are below `<kubelet root>/pods` (where [`Self::pins`] point).
    pub fn with_pods_dir(mut self, pods_dir: PathBuf) -> Self {
        self.pods_dir = pods_dir;
        self
    }

    /// The kubelet write each of the pod's changed `volumes` showed when its change was taken
    /// (or hashed): pinned before the action, read after it by the status record
    /// (`crate::execute::applied`). No system call: the `..data` target was read then.
    pub fn pins(&self, pod_uid: &str, volumes: &BTreeSet<String>) -> Seen {
        let mut pins = Vec::new();
        let uid: Arc<str> = Arc::from(pod_uid);
        for volume in volumes {
            let name: Arc<str> = Arc::from(volume.as_str());
            let found = [
                VolumePlugin::ConfigMap,
                VolumePlugin::Secret,
                VolumePlugin::Projected,
            ]
            .into_iter()
            .find_map(|plugin| {
                let key = VolumeKey {
                    pod_uid: uid.clone(),
                    plugin,
                    volume: name.clone(),
                };
                let target = self.states.get(&key)?.link.clone()?;
                Some((key, target))
            });
            if let Some((key, target)) = found {
                pins.push(Pin {
                    volume: volume.clone(),
                    dir: volume_path(&self.pods_dir, &key),
                    target,
                });
            }
        }
        Seen::new(pins)
    }

    pub fn len(&self) -> usize {
        self.detector.len()
    }

    /// Whether something to persist changed since the last [`Self::snapshot`].
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Nothing is persisted (no state store): the changes need no write.
    pub fn not_persisted(&mut self) {
        self.dirty = false;
    }

    /// What to persist: the last digest acted on per volume.
    pub fn snapshot(&mut self) -> Vec<(VolumeKey, VolumeDigest)> {
        self.dirty = false;
        self.detector.snapshot()
    }

    #[cfg(test)]
    pub fn detector(&self) -> &ChangeDetector<VolumeDigest> {
        &self.detector
    }

    /// Volumes with any state, and those waiting for their hash after an action.
    #[cfg(test)]
    pub fn entries(&self) -> (usize, usize) {
        (self.states.len(), self.swapped.len())
    }

    #[cfg(test)]
    pub fn hash_key(&self) -> &HashKey {
        &self.hash_key
    }

    pub(super) fn swap_counters(&self, plugin: VolumePlugin) -> &(Counter, Counter) {
        let at = VolumePlugin::ALL.iter().position(|p| *p == plugin);
        &self.swap_counters[at.expect("every plugin is in ALL")]
    }

    /// Changes the state of `key`, made on first need (its key is cloned once per volume,
    /// not per look).
    fn with_state(&mut self, key: &VolumeKey, change: impl FnOnce(&mut VolumeState)) {
        match self.states.get_mut(key) {
            Some(state) => change(state),
            None => {
                let mut state = VolumeState::default();
                change(&mut state);
                self.states.insert(key.clone(), state);
            }
        }
    }

    /// Whether a volume of the pod is being hashed on the hasher thread.
    pub fn hashing(&self, pod_uid: &str) -> bool {
        self.states
            .iter()
            .any(|(k, s)| &*k.pod_uid == pod_uid && matches!(s.look, Look::Hashing { .. }))
    }

    fn look_state(&mut self, key: &VolumeKey) -> Option<&mut Look> {
        self.states.get_mut(key).map(|s| &mut s.look)
    }

    /// A look the watcher asked for (`dir`: the volume's directory).
    pub fn look(
        &mut self,
        key: &VolumeKey,
        dir: PathBuf,
        cause: LookCause,
        now: Instant,
        changed: &mut impl FnMut(Changed<'_>),
    ) {
        if cause == LookCause::Swap {
            self.swap_counters(key.plugin).0.inc();
        } else if key.plugin == VolumePlugin::Csi {
            // A write in place, and also the mount appearing or going (a driver may still
            // be writing its first files): one look once the writes settled, so a partly
            // written volume is never a baseline.
            self.settling.written(key, dir, now);
            return;
        }
        self.look_at(key, dir, cause, now, changed);
    }

    /// The volume is gone (its directory removed).
    pub fn forget_volume(&mut self, key: &VolumeKey) {
        self.settling.forget(|k| k == key);
        self.states.remove(key);
        self.swapped.retain(|k| k != key);
        self.detector.forget_volume(key);
        self.dirty = true;
    }

    /// Every volume of the pod is gone: one entry per volume dropped.
    pub fn forget_pod(&mut self, pod_uid: &str) {
        self.settling.forget(|k| &*k.pod_uid == pod_uid);
        self.states.retain(|k, _| &*k.pod_uid != pod_uid);
        self.swapped.retain(|k| &*k.pod_uid != pod_uid);
        self.over_limit.retain(|(k, _)| &*k.pod_uid != pod_uid);
        self.detector.forget_pod(pod_uid);
        self.dirty = true;
    }

    /// The pod's changes were acted on: their content is the one to persist.
    pub fn acted(&mut self, pod_uid: &str) {
        self.detector.settle_pod(pod_uid);
        self.dirty = true;
    }

    /// The pod's changes will not be acted on (the pod left, or never showed).
    pub fn given_up(&mut self, pod_uid: &str) {
        self.detector.settle_pod(pod_uid);
    }

    /// Which files of the volume count. A configMap/secret volume: all. A projected volume:
    /// those of its ConfigMap/Secret sources, known from the pod spec; `None` until the pod is
    /// known (the volume is then looked at again, see [`Self::look_deferred`]).
    fn layout(&self, key: &VolumeKey) -> Option<Layout> {
        match key.plugin {
            VolumePlugin::Csi => return Some(Layout::csi()),
            VolumePlugin::ConfigMap | VolumePlugin::Secret => return Some(Layout::whole()),
            VolumePlugin::Projected => {}
        }
        let index = read_index(&self.index);
        let pod = index.get(&key.pod_uid)?;
        Some(
            pod.volume(&key.volume)
                .map_or_else(Layout::whole, Layout::of),
        )
    }

    /// Projected volumes that waited for their pod: looked at now that it is known. A change
    /// they went through meanwhile shows against the saved digest like any other.
    pub fn look_deferred(&mut self, now: Instant, changed: &mut impl FnMut(Changed<'_>)) {
        let known: Vec<VolumeKey> = {
            let index = read_index(&self.index);
            self.states
                .iter()
                .filter(|(k, s)| {
                    matches!(s.look, Look::Deferred { .. }) && index.get(&k.pod_uid).is_some()
                })
                .map(|(k, _)| k.clone())
                .collect()
        };
        for key in known {
            let Some(look) = self.look_state(&key) else {
                continue;
            };
            if let Look::Deferred { dir, cause } = std::mem::take(look) {
                self.look_at(&key, dir, cause, now, changed);
            }
        }
    }

    pub(super) fn look_at(
        &mut self,
        key: &VolumeKey,
        dir: PathBuf,
        cause: LookCause,
        now: Instant,
        changed: &mut impl FnMut(Changed<'_>),
    ) {
        let Some(layout) = self.layout(key) else {
            tracing::debug!(volume = %key, ?cause, "projected volume of a pod not known yet; looked at when the pod is");
            self.with_state(key, |state| match &mut state.look {
                Look::Hashing { again } => look_again(again, dir, cause),
                look => *look = Look::Deferred { dir, cause },
            });
            return;
        };
        if self.detector.last(key).is_none() {
            if let Some(old) = self.states.get_mut(key).and_then(|s| s.legacy.take()) {
                migrate(
                    &mut self.detector,
                    &self.index,
                    key,
                    &dir,
                    old,
                    self.max_bytes,
                );
            }
        }
        let hashing = match self.look_state(key) {
            Some(Look::Hashing { .. }) => true,
            Some(look) => {
                // The pod is known: this look stands for a deferred one.
                *look = Look::Idle;
                false
            }
            None => false,
        };
        if cause == LookCause::Swap && key.plugin != VolumePlugin::Projected && !hashing {
            if let Some(target) = self.new_write(key, &dir) {
                if self.detector.swapped(key) {
                    // A configMap/secret volume: every file counts, and the kubelet swaps
                    // only new content (`ChangeDetector::swapped`). Act first; hash after the
                    // action.
                    self.swapped_unhashed(key, dir, target);
                    self.on_changed(key, cause, "swapped: hashed after the action", now, changed);
                    return;
                }
            }
        }
        if let Some(Look::Hashing { again }) = self.look_state(key) {
            // Its hash is on the hasher thread: look again once it is back, in order.
            look_again(again, dir, cause);
            return;
        }
        let size = match self.states.get(key).and_then(|s| s.size) {
            Some(size) => size,
            None => content_bytes(&dir),
        };
        match self.hash_here_or_send(key, dir, layout, cause, false, size) {
            Some(result) => self.observe_hash(key, cause, result, now, changed),
            None => {
                tracing::debug!(volume = %key, bytes = size, "big volume: hashed on the hasher thread");
                self.with_state(key, |state| state.look = Look::Hashing { again: None });
            }
        }
    }

    /// A swap of a configMap/secret volume to the new write `target`, taken as changed.
    fn swapped_unhashed(&mut self, key: &VolumeKey, dir: PathBuf, target: DataTarget) {
        let mut queued = false;
        self.with_state(key, |state| {
            state.link = Some(target);
            match &mut state.after {
                AfterAction::Recording { swapped_again } => *swapped_again = Some(dir),
                AfterAction::Swapped { dir: was } => *was = dir,
                after @ AfterAction::None => {
                    *after = AfterAction::Swapped { dir };
                    queued = true;
                }
            }
        });
        if queued {
            self.swapped.push(key.clone());
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
        let max_bytes = self.max_bytes;
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
    fn new_write(&self, key: &VolumeKey, dir: &Path) -> Option<DataTarget> {
        let known = self.states.get(key)?.link.as_ref()?;
        data_target(dir).filter(|now| now != known)
    }

    /// A big volume's hash is back from the hasher thread. `true`: a swapped volume is to be
    /// hashed again ([`Self::hash_swapped`], next).
    pub fn on_hashed(
        &mut self,
        done: hasher::Hashed,
        now: Instant,
        changed: &mut impl FnMut(Changed<'_>),
    ) -> bool {
        let Some(state) = self.states.get_mut(&done.key) else {
            // The volume went away meanwhile.
            return false;
        };
        if done.after_action {
            match std::mem::take(&mut state.after) {
                AfterAction::Recording {
                    swapped_again: Some(dir),
                } => {
                    // Swapped again meanwhile: that swap's hash is the one to keep.
                    state.after = AfterAction::Swapped { dir };
                    self.swapped.push(done.key);
                    return true;
                }
                AfterAction::Recording {
                    swapped_again: None,
                } => self.record_hash(&done.key, done.result),
                other => state.after = other,
            }
            return false;
        }
        if !matches!(state.look, Look::Hashing { .. }) {
            return false;
        }
        let Look::Hashing { again } = std::mem::take(&mut state.look) else {
            return false;
        };
        self.observe_hash(&done.key, done.cause, done.result, now, changed);
        if let Some((dir, cause)) = again {
            self.look_at(&done.key, dir, cause, now, changed);
        }
        false
    }

    fn observe_hash(
        &mut self,
        key: &VolumeKey,
        cause: LookCause,
        result: CountedResult,
        now: Instant,
        changed: &mut impl FnMut(Changed<'_>),
    ) {
        let hash = match result {
            Ok(Some(counted)) => {
                self.with_state(key, |state| {
                    state.size = Some(counted.read);
                    state.link = Some(counted.target);
                });
                Some(counted.digest)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(volume = %key, error = %e, "cannot hash volume; change ignored");
                if e.over_limit() {
                    self.refused(key, e.to_string());
                }
                return;
            }
        };
        self.with_state(key, |state| state.over_limit = None);
        let observation = self.detector.observe(key, hash);
        tracing::debug!(volume = %key, ?cause, ?observation, "looked at volume");
        match observation {
            Observation::Changed => self.on_changed(key, cause, "hashed", now, changed),
            Observation::Baseline => self.dirty = true,
            Observation::Unchanged if cause == LookCause::Swap => {
                self.swap_counters(key.plugin).1.inc();
                tracing::debug!(volume = %key, "swap without content change; skipped");
            }
            Observation::Unchanged | Observation::NotWritten => {}
        }
    }

    /// A volume over a limit: not followed as it is; reported once per volume and limit.
    fn refused(&mut self, key: &VolumeKey, why: String) {
        let mut new = false;
        self.with_state(key, |state| {
            new = state.over_limit.as_ref() != Some(&why);
            state.over_limit = Some(why.clone());
        });
        if new {
            self.over_limit.push((key.clone(), why));
        }
    }

    /// A volume the watcher does not follow for a limit (too many volumes in its pod).
    pub fn refused_unwatched(&mut self, key: &VolumeKey, why: String) {
        self.refused(key, why);
    }

    /// The volumes refused for a limit since the last call (each once per limit).
    pub fn take_over_limit(&mut self) -> Vec<(VolumeKey, String)> {
        std::mem::take(&mut self.over_limit)
    }

    /// A refusal whose pod is not known yet: told again once it is (kept until the pod's
    /// volumes are forgotten).
    pub fn keep_over_limit(&mut self, key: VolumeKey, why: String) {
        self.over_limit.push((key, why));
    }

    /// A volume's content changed (seen at `now`, told by `how`).
    fn on_changed(
        &mut self,
        key: &VolumeKey,
        cause: LookCause,
        how: &'static str,
        now: Instant,
        changed: &mut impl FnMut(Changed<'_>),
    ) {
        tracing::debug!(volume = %key, ?cause, how, "volume content changed");
        self.dirty = true;
        changed(Changed { key, at: now });
    }

    /// After the actions: hashes the swapped volumes whose pods have nothing `pending` any
    /// more (acted on, or given up on), so the state file knows their content. Small ones
    /// here, big ones on the hasher thread.
    pub fn hash_swapped(&mut self, pending: impl Fn(&str) -> bool) {
        if self.swapped.is_empty() {
            return;
        }
        let (waiting, due): (Vec<VolumeKey>, Vec<VolumeKey>) = std::mem::take(&mut self.swapped)
            .into_iter()
            .partition(|k| pending(&k.pod_uid));
        self.swapped = waiting;
        for key in due {
            let Some(state) = self.states.get_mut(&key) else {
                continue;
            };
            let AfterAction::Swapped { dir } = std::mem::take(&mut state.after) else {
                continue;
            };
            let size = state.size.unwrap_or(0);
            match self.hash_here_or_send(&key, dir, Layout::whole(), LookCause::Swap, true, size) {
                Some(result) => self.record_hash(&key, result),
                None => self.with_state(&key, |state| {
                    state.after = AfterAction::Recording {
                        swapped_again: None,
                    }
                }),
            }
        }
    }

    fn record_hash(&mut self, key: &VolumeKey, result: CountedResult) {
        self.dirty = true;
        let digest = match result {
            Ok(Some(counted)) => {
                let mut same_write = false;
                self.with_state(key, |state| {
                    state.size = Some(counted.read);
                    same_write = state.link.as_ref() == Some(&counted.target);
                });
                if !same_write {
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
}

/// A look while the volume's hash is on the hasher thread: the latest one is kept, but a
/// pending swap is not overwritten.
fn look_again(again: &mut Option<(PathBuf, LookCause)>, dir: PathBuf, cause: LookCause) {
    let keep_swap = matches!(again, Some((_, LookCause::Swap)));
    if !keep_swap {
        *again = Some((dir, cause));
    }
}
