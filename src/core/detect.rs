//! Change detection (pure): the last content hash seen per volume, and what a new look means.

use crate::core::drained::ReleaseDrained;
use crate::core::model::VolumeKey;
use std::collections::{HashMap, HashSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// `..data` does not exist yet (the kubelet has not written the volume).
    NotWritten,
    /// First sight of this volume with no saved state: remember it, act on nothing.
    Baseline,
    /// Same bytes as last time (a no-op swap or a rescan): nothing to do.
    Unchanged,
    /// New content: an action may follow.
    Changed,
}

/// Remembers the last content hash of every volume. `H` is the hash type.
#[derive(Debug)]
pub struct ChangeDetector<H> {
    seen: HashMap<VolumeKey, H>,
    /// For volumes with a change not yet acted on: the hash before that change. Persisted
    /// instead of the new hash, so a crash before the action does not lose the change.
    unsettled: HashMap<VolumeKey, H>,
    /// Volumes taken as changed on the kubelet's word ([`Self::swapped`]) whose new content is
    /// not hashed yet; their `seen` hash is the one from before the swap.
    unhashed: HashSet<VolumeKey>,
}

/// What the hash taken after acting on a [`ChangeDetector::swapped`] volume showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Other bytes than before the swap, as the kubelet's AtomicWriter promises.
    Changed,
    /// The same bytes: whoever swapped `..data` was not the kubelet (an action was taken
    /// for nothing).
    Unchanged,
    /// Not waiting for a hash (the volume went away, or a look hashed it meanwhile).
    NotPending,
}

impl<H: Eq + Clone> Default for ChangeDetector<H> {
    fn default() -> Self {
        Self {
            seen: HashMap::new(),
            unsettled: HashMap::new(),
            unhashed: HashSet::new(),
        }
    }
}

impl<H: Eq + Clone> ChangeDetector<H> {
    /// Starts from hashes saved by an earlier run: a volume whose content differs from its
    /// saved hash when first looked at is `Changed` (it changed while reloadlet was down).
    pub fn with_saved(saved: impl IntoIterator<Item = (VolumeKey, H)>) -> Self {
        Self {
            seen: saved.into_iter().collect(),
            unsettled: HashMap::new(),
            unhashed: HashSet::new(),
        }
    }

    pub fn observe(&mut self, key: &VolumeKey, hash: Option<H>) -> Observation {
        let Some(hash) = hash else {
            return Observation::NotWritten;
        };
        // A look at a swapped volume knows its content now: compared with the content
        // before the swap (a change is pending already either way).
        if self.unhashed.remove(key) {
            self.unhashed.release_if_drained();
        }
        match self.seen.get_mut(key) {
            None => {
                self.seen.insert(key.clone(), hash);
                Observation::Baseline
            }
            Some(old) if *old == hash => Observation::Unchanged,
            Some(old) => {
                let previous = std::mem::replace(old, hash);
                self.unsettled.entry(key.clone()).or_insert(previous);
                Observation::Changed
            }
        }
    }

    /// The kubelet swapped `..data` of a volume all of whose files count (a configMap or secret
    /// volume): its content changed. The kubelet's AtomicWriter swaps only when a file's bytes,
    /// or the set of files, differ from what is on disk; with nothing changed it writes,
    /// renames and deletes nothing (kubernetes `pkg/volume/util/atomic_writer.go`, `Write`:
    /// `shouldWritePayload` compares every file byte for byte; `../shared/reference` node
    /// facts, §2). So the change is pending at once and the volume is hashed after the action
    /// ([`Self::record`]), off the swap → signal path. `false` (nothing marked) for a volume
    /// never looked at: it has no content to differ from yet.
    pub fn swapped(&mut self, key: &VolumeKey) -> bool {
        let Some(now) = self.seen.get(key) else {
            return false;
        };
        self.unsettled
            .entry(key.clone())
            .or_insert_with(|| now.clone());
        self.unhashed.insert(key.clone());
        true
    }

    /// Swapped volumes whose new content is not hashed yet.
    pub fn unhashed(&self) -> impl Iterator<Item = &VolumeKey> {
        self.unhashed.iter()
    }

    /// The content of a [`Self::swapped`] volume, hashed after the action: the content known
    /// from now on (compared with the content before the swap, for the count of swaps that
    /// changed nothing). Acts on nothing.
    pub fn record(&mut self, key: &VolumeKey, hash: H) -> Recorded {
        if !self.unhashed.remove(key) {
            return Recorded::NotPending;
        }
        self.unhashed.release_if_drained();
        match self.seen.get_mut(key) {
            Some(old) if *old == hash => Recorded::Unchanged,
            Some(old) => {
                *old = hash;
                Recorded::Changed
            }
            None => Recorded::NotPending,
        }
    }

    /// A swapped volume that could not be hashed after the action: keeps the content from
    /// before the swap (a restart then sees a change and acts once more rather than never).
    pub fn unrecorded(&mut self, key: &VolumeKey) {
        self.unhashed.remove(key);
        self.unhashed.release_if_drained();
    }

    pub fn last(&self, key: &VolumeKey) -> Option<&H> {
        self.seen.get(key)
    }

    /// Makes `hash` the known content of a volume never seen (a migrated state file): the
    /// next look compares against it.
    pub fn seed(&mut self, key: &VolumeKey, hash: H) {
        self.seen.entry(key.clone()).or_insert(hash);
    }

    /// A change of the pod's volume `volume` not acted on yet: (content acted on last,
    /// content now). `None` also for a swapped volume not hashed yet (its new content is
    /// unknown: every source may have changed).
    pub fn pending_change(&self, pod_uid: &str, volume: &str) -> Option<(&H, &H)> {
        self.unsettled
            .iter()
            .find(|(k, _)| &*k.pod_uid == pod_uid && &*k.volume == volume)
            .filter(|(k, _)| !self.unhashed.contains(*k))
            .and_then(|(k, before)| Some((before, self.seen.get(k)?)))
    }

    /// The pod's changes were acted on (or deliberately not): persist their new hashes.
    pub fn settle_pod(&mut self, pod_uid: &str) {
        self.unsettled.retain(|k, _| &*k.pod_uid != pod_uid);
        self.release_drained();
    }

    pub fn forget_volume(&mut self, key: &VolumeKey) {
        self.seen.remove(key);
        self.unsettled.remove(key);
        self.unhashed.remove(key);
        self.release_drained();
    }

    pub fn forget_pod(&mut self, pod_uid: &str) {
        self.seen.retain(|k, _| &*k.pod_uid != pod_uid);
        self.unhashed.retain(|k| &*k.pod_uid != pod_uid);
        self.settle_pod(pod_uid);
    }

    /// What to persist: the last hash acted on per volume.
    pub fn snapshot(&self) -> Vec<(VolumeKey, H)> {
        self.seen
            .iter()
            .map(|(k, h)| (k.clone(), self.unsettled.get(k).unwrap_or(h).clone()))
            .collect()
    }

    /// Keeps only the volumes `keep` says still exist (after a restart, drop saved state of
    /// pods that are gone).
    pub fn retain(&mut self, mut keep: impl FnMut(&VolumeKey) -> bool) {
        self.seen.retain(|k, _| keep(k));
        let seen = &self.seen;
        self.unsettled.retain(|k, _| seen.contains_key(k));
        self.unhashed.retain(|k| seen.contains_key(k));
        self.release_drained();
    }

    /// The tables of pending work give back a burst's memory once empty again
    /// ([`crate::core::drained`]); `seen` holds one entry per volume and stays.
    fn release_drained(&mut self) {
        self.unsettled.release_if_drained();
        self.unhashed.release_if_drained();
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&VolumeKey, &H)> {
        self.seen.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::VolumePlugin;

    fn key(pod: &str, vol: &str) -> VolumeKey {
        VolumeKey {
            pod_uid: pod.into(),
            plugin: VolumePlugin::ConfigMap,
            volume: vol.into(),
        }
    }

    #[test]
    fn a_burst_of_swaps_leaves_no_room_behind_once_settled_and_hashed() {
        // Every volume of a node swapped at once (a held burst): the tables of pending work
        // hold them all, then give their memory back; what is known per volume stays.
        let mut d = ChangeDetector::<u32>::default();
        let keys: Vec<_> = (0..1000)
            .map(|i| key(&format!("p{}", i / 4), &format!("c{i}")))
            .collect();
        for k in &keys {
            d.observe(k, Some(1));
        }
        for k in &keys {
            assert!(d.swapped(k));
        }
        assert!(d.unsettled.capacity() >= 1000 && d.unhashed.capacity() >= 1000);
        for i in 0..250 {
            d.settle_pod(&format!("p{i}"));
        }
        for k in &keys {
            assert_eq!(d.record(k, 2), Recorded::Changed);
        }
        assert_eq!((d.unsettled.capacity(), d.unhashed.capacity()), (0, 0));
        assert_eq!(d.len(), 1000);
        assert!(d.iter().all(|(_, h)| *h == 2));
    }

    #[test]
    fn a_swap_is_a_change_at_once_and_its_hash_comes_after_the_action() {
        let mut d = ChangeDetector::<u32>::default();
        let a = key("p1", "conf");
        assert!(!d.swapped(&a), "no baseline: nothing to differ from");
        assert_eq!(d.observe(&a, Some(1)), Observation::Baseline);
        assert!(d.swapped(&a));
        assert_eq!(d.unhashed().collect::<Vec<_>>(), [&a]);
        // Pending with the content from before the swap persisted; no narrowing possible.
        assert_eq!(d.snapshot(), vec![(a.clone(), 1)]);
        assert_eq!(d.pending_change("p1", "conf"), None);
        d.settle_pod("p1");
        assert_eq!(d.record(&a, 2), Recorded::Changed);
        assert_eq!(d.snapshot(), vec![(a.clone(), 2)]);
        assert_eq!(d.unhashed().count(), 0);
        assert_eq!(d.record(&a, 3), Recorded::NotPending, "recorded once");
        assert_eq!(d.observe(&a, Some(2)), Observation::Unchanged);
    }

    #[test]
    fn a_swap_that_changed_nothing_is_told_apart_after_the_action() {
        let mut d = ChangeDetector::<u32>::default();
        let a = key("p1", "conf");
        d.observe(&a, Some(1));
        d.swapped(&a);
        d.settle_pod("p1");
        assert_eq!(d.record(&a, 1), Recorded::Unchanged);
        assert_eq!(d.snapshot(), vec![(a, 1)]);
    }

    #[test]
    fn a_look_before_the_record_hashes_the_swapped_volume() {
        let mut d = ChangeDetector::<u32>::default();
        let a = key("p1", "conf");
        d.observe(&a, Some(1));
        d.swapped(&a);
        assert_eq!(d.observe(&a, Some(2)), Observation::Changed);
        assert_eq!(d.pending_change("p1", "conf"), Some((&1, &2)));
        assert_eq!(d.record(&a, 2), Recorded::NotPending);
    }

    #[test]
    fn a_swapped_volume_that_goes_away_or_is_not_hashed_keeps_nothing_pending() {
        let mut d = ChangeDetector::<u32>::default();
        let (a, b) = (key("p1", "a"), key("p2", "b"));
        d.observe(&a, Some(1));
        d.observe(&b, Some(1));
        d.swapped(&a);
        d.swapped(&b);
        d.forget_pod("p1");
        d.unrecorded(&b);
        assert_eq!(d.unhashed().count(), 0);
        d.settle_pod("p2");
        assert_eq!(
            d.snapshot(),
            vec![(b, 1)],
            "the content before the swap stays known"
        );
    }

    #[test]
    fn sequence_of_looks() {
        let mut d = ChangeDetector::<u32>::default();
        let a = key("p1", "conf");
        let steps = [
            (None, Observation::NotWritten),
            (Some(1), Observation::Baseline),
            (Some(1), Observation::Unchanged),
            (Some(2), Observation::Changed),
            (Some(2), Observation::Unchanged),
            (None, Observation::NotWritten),
            (Some(1), Observation::Changed),
        ];
        for (i, (hash, want)) in steps.into_iter().enumerate() {
            assert_eq!(d.observe(&a, hash), want, "step {i}");
        }
    }

    #[test]
    fn saved_state_turns_downtime_changes_into_changes_and_nothing_else() {
        let mut d = ChangeDetector::with_saved([(key("p1", "a"), 1u32), (key("p1", "b"), 5)]);
        assert_eq!(d.observe(&key("p1", "a"), Some(1)), Observation::Unchanged);
        assert_eq!(d.observe(&key("p1", "b"), Some(6)), Observation::Changed);
        assert_eq!(d.observe(&key("p2", "a"), Some(1)), Observation::Baseline);
    }

    #[test]
    fn unsettled_changes_persist_the_hash_before_the_change() {
        let mut d = ChangeDetector::default();
        let a = key("p1", "a");
        d.observe(&a, Some(1u8));
        d.observe(&a, Some(2));
        d.observe(&a, Some(3));
        assert_eq!(d.snapshot(), vec![(a.clone(), 1)]);
        d.settle_pod("p1");
        assert_eq!(d.snapshot(), vec![(a, 3)]);
    }

    #[test]
    fn a_pending_change_shows_the_content_acted_on_and_the_content_now() {
        let mut d = ChangeDetector::default();
        let a = key("p1", "a");
        d.observe(&a, Some(1u8));
        assert_eq!(d.pending_change("p1", "a"), None);
        d.observe(&a, Some(2));
        d.observe(&a, Some(3));
        assert_eq!(d.pending_change("p1", "a"), Some((&1, &3)));
        d.settle_pod("p1");
        assert_eq!(d.pending_change("p1", "a"), None);
        // A seeded volume compares against the seed.
        d.seed(&key("p2", "a"), 7);
        assert_eq!(d.observe(&key("p2", "a"), Some(8)), Observation::Changed);
    }

    #[test]
    fn forgetting_a_pod_makes_its_next_sight_a_baseline() {
        let mut d = ChangeDetector::default();
        d.observe(&key("p1", "a"), Some(1u8));
        d.observe(&key("p2", "a"), Some(1u8));
        d.forget_pod("p1");
        assert_eq!(d.len(), 1);
        assert_eq!(d.observe(&key("p1", "a"), Some(2)), Observation::Baseline);
    }
}
