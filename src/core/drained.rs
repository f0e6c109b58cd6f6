//! Tables that give their memory back once drained. A burst fills a table of pending work to
//! the node's size: every volume swapped at once when a ConfigMap that every pod mounts
//! changes, or an agent catching up after a stall, when one inotify read brings a whole
//! backlog (`benches/node/bursts.rs`, the held bursts). A hash table keeps its largest
//! capacity after its entries are removed (`HashMap::remove` never shrinks), so without this
//! the agent would hold, for good, tables sized for its worst burst while it needs a few
//! entries at a time (docs/architecture.md, "Memory after a backlog").

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// Capacity a drained table may keep: what steady swaps use, so that they never reallocate.
pub const KEEP: usize = 64;

/// A table that can give back the memory of a burst once it is empty again.
pub trait ReleaseDrained {
    /// Frees the table's allocation when it is empty and holds room for more than [`KEEP`]
    /// entries; else nothing.
    fn release_if_drained(&mut self);
}

impl<K: Eq + Hash, V, S: BuildHasher> ReleaseDrained for HashMap<K, V, S> {
    fn release_if_drained(&mut self) {
        if self.is_empty() && self.capacity() > KEEP {
            self.shrink_to_fit();
        }
    }
}

impl<K: Eq + Hash, S: BuildHasher> ReleaseDrained for HashSet<K, S> {
    fn release_if_drained(&mut self) {
        if self.is_empty() && self.capacity() > KEEP {
            self.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_drained_after_a_burst_gives_its_room_back() {
        let mut m: HashMap<u32, u32> = (0..1000).map(|i| (i, i)).collect();
        m.release_if_drained();
        assert!(m.capacity() >= 1000, "a table still in use keeps its room");
        m.retain(|_, _| false);
        assert!(m.capacity() >= 1000, "removing never shrinks by itself");
        m.release_if_drained();
        assert_eq!(m.capacity(), 0);
    }

    #[test]
    fn a_small_drained_table_keeps_its_room_for_the_next_swaps() {
        let mut s: HashSet<u32> = (0..10).collect();
        let room = s.capacity();
        s.clear();
        s.release_if_drained();
        assert_eq!(s.capacity(), room);
    }
}
