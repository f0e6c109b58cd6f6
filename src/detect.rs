//! Change detection (pure): the last content hash seen per volume, and what a new look means.

use crate::model::VolumeKey;
use std::collections::HashMap;

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
}

impl<H: Eq + Clone> Default for ChangeDetector<H> {
    fn default() -> Self {
        Self {
            seen: HashMap::new(),
            unsettled: HashMap::new(),
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
        }
    }

    pub fn observe(&mut self, key: &VolumeKey, hash: Option<H>) -> Observation {
        let Some(hash) = hash else {
            return Observation::NotWritten;
        };
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

    pub fn last(&self, key: &VolumeKey) -> Option<&H> {
        self.seen.get(key)
    }

    /// Makes `hash` the known content of a volume never seen (a migrated state file): the
    /// next look compares against it.
    pub fn seed(&mut self, key: &VolumeKey, hash: H) {
        self.seen.entry(key.clone()).or_insert(hash);
    }

    /// A change of the pod's volume `volume` not acted on yet: (content acted on last,
    /// content now).
    pub fn pending_change(&self, pod_uid: &str, volume: &str) -> Option<(&H, &H)> {
        self.unsettled
            .iter()
            .find(|(k, _)| k.pod_uid == pod_uid && k.volume == volume)
            .and_then(|(k, before)| Some((before, self.seen.get(k)?)))
    }

    /// The pod's changes were acted on (or deliberately not): persist their new hashes.
    pub fn settle_pod(&mut self, pod_uid: &str) {
        self.unsettled.retain(|k, _| k.pod_uid != pod_uid);
    }

    pub fn forget_volume(&mut self, key: &VolumeKey) {
        self.seen.remove(key);
        self.unsettled.remove(key);
    }

    pub fn forget_pod(&mut self, pod_uid: &str) {
        self.seen.retain(|k, _| k.pod_uid != pod_uid);
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
    use crate::model::VolumePlugin;

    fn key(pod: &str, vol: &str) -> VolumeKey {
        VolumeKey {
            pod_uid: pod.into(),
            plugin: VolumePlugin::ConfigMap,
            volume: vol.into(),
        }
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
