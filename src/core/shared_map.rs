//! A pod's annotations and labels as the controller keeps them: one copy for every pod that
//! carries the same ones. The pods of a workload carry its template's, and once trimmed to
//! what the features read (`core::keep`) they are equal; a `BTreeMap` allocates a whole node (~0.5
//! KiB) for a single entry, so at 100,000 pods one map per pod was ~55 MiB of the
//! controller's heap (docs/status.md, "What this costs").
//!
//! [`SharedMap`] reads as the `BTreeMap` it wraps and copies it on the first write (the
//! agent and tests build and edit maps as before); [`Interner`] hands out one copy of each
//! map still in use.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A string map shared copy-on-write.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct SharedMap(Arc<BTreeMap<String, String>>);

impl SharedMap {
    /// The map to edit (a copy of its own if it is shared).
    pub fn make_mut(&mut self) -> &mut BTreeMap<String, String> {
        Arc::make_mut(&mut self.0)
    }

    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        self.make_mut().insert(key, value)
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.make_mut().remove(key)
    }

    pub fn retain(&mut self, keep: impl FnMut(&String, &mut String) -> bool) {
        self.make_mut().retain(keep);
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Both hold the same copy.
    pub fn shares_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for SharedMap {
    type Target = BTreeMap<String, String>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl fmt::Debug for SharedMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<BTreeMap<String, String>> for SharedMap {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self(Arc::new(map))
    }
}

impl<const N: usize> From<[(String, String); N]> for SharedMap {
    fn from(entries: [(String, String); N]) -> Self {
        BTreeMap::from(entries).into()
    }
}

impl FromIterator<(String, String)> for SharedMap {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(entries: I) -> Self {
        BTreeMap::from_iter(entries).into()
    }
}

impl Extend<(String, String)> for SharedMap {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, entries: I) {
        self.make_mut().extend(entries);
    }
}

impl<'a> IntoIterator for &'a SharedMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// One copy of each map: [`Interner::share`] answers an equal map handed out before, if one
/// is still in use. Maps no one holds any more are dropped once the set has doubled since it
/// was last swept, so it holds at most twice the maps in use (and [`SWEEP_FLOOR`]): a pod
/// author who gives every pod its own annotations costs one map per pod, as without it.
#[derive(Default)]
pub struct Interner {
    maps: HashSet<SharedMap>,
    /// Maps held after the last sweep.
    swept: usize,
}

/// The set is never swept below this many maps.
pub const SWEEP_FLOOR: usize = 1024;

impl Interner {
    pub fn share(&mut self, map: SharedMap) -> SharedMap {
        if let Some(held) = self.maps.get(&map) {
            return held.clone();
        }
        self.maps.insert(map.clone());
        if self.maps.len() > (2 * self.swept).max(SWEEP_FLOOR) {
            self.maps.retain(|m| Arc::strong_count(&m.0) > 1);
            self.swept = self.maps.len();
        }
        map
    }

    /// Maps held (in use, or not yet swept).
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> SharedMap {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equal_maps_share_one_copy_and_different_ones_do_not() {
        let mut interner = Interner::default();
        let a = interner.share(map(&[("reloadlet.io/action", "signal")]));
        let b = interner.share(map(&[("reloadlet.io/action", "signal")]));
        let c = interner.share(map(&[("reloadlet.io/action", "evict")]));
        assert!(a.shares_with(&b));
        assert!(!a.shares_with(&c));
        assert_eq!(interner.len(), 2);
    }

    #[test]
    fn a_write_to_a_shared_map_changes_only_the_writers_copy() {
        let mut interner = Interner::default();
        let a = interner.share(map(&[("k", "v")]));
        let mut b = interner.share(map(&[("k", "v")]));
        b.insert("k".into(), "changed".into());
        assert_eq!(a.get("k").map(String::as_str), Some("v"));
        assert_eq!(b.get("k").map(String::as_str), Some("changed"));
        let fresh = interner.share(map(&[("k", "v")]));
        assert!(
            fresh.shares_with(&a),
            "the interner still hands out the unchanged copy"
        );
    }

    #[test]
    fn maps_no_one_holds_are_dropped_and_the_set_stays_within_twice_those_in_use() {
        let mut interner = Interner::default();
        let kept: Vec<SharedMap> = (0..100)
            .map(|i| interner.share(map(&[("kept", &i.to_string())])))
            .collect();
        let mut most = 0;
        // Every pod with annotations of its own, each gone before the next comes.
        for i in 0..20 * SWEEP_FLOOR {
            drop(interner.share(map(&[("gone", &i.to_string())])));
            most = most.max(interner.len());
        }
        assert!(most <= SWEEP_FLOOR + 1, "held {most} maps at most");
        assert!(interner.len() >= kept.len());
        for (i, m) in kept.iter().enumerate() {
            let again = interner.share(map(&[("kept", &i.to_string())]));
            assert!(again.shares_with(m), "map {i} in use was dropped");
        }
    }
}
