//! Coalescing (pure): changes of one pod within the debounce window make one action.
//!
//! The window opens at the first change and closes `window` later, so a burst of swaps
//! (several ConfigMaps updated together) gives a single reload, and latency stays bounded
//! by the window even while swaps keep coming.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChange {
    /// Volume names (of this pod) whose content changed.
    pub volumes: BTreeSet<String>,
    /// When the first swap of the window was seen (for the swap-to-action latency).
    pub first_seen: Instant,
    /// How many times the pod was re-queued because it was not (yet) in the pod index.
    pub attempts: u32,
}

#[derive(Debug)]
pub struct Debouncer {
    window: Duration,
    pending: HashMap<String, (Instant, PendingChange)>,
}

impl Debouncer {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            pending: HashMap::new(),
        }
    }

    /// Records a change of `volume` in pod `pod_uid` seen at `now`.
    pub fn add(&mut self, pod_uid: &str, volume: &str, now: Instant) {
        self.add_within(pod_uid, volume, now, self.window);
    }

    /// [`Self::add`] with a window of the pod's own (a pod that sets `reloadlet.io/debounce`
    /// is debounced by its pacer: 0 here).
    pub fn add_within(&mut self, pod_uid: &str, volume: &str, now: Instant, window: Duration) {
        let (_, change) = self.pending.entry(pod_uid.to_owned()).or_insert_with(|| {
            (
                now + window,
                PendingChange {
                    volumes: BTreeSet::new(),
                    first_seen: now,
                    attempts: 0,
                },
            )
        });
        change.volumes.insert(volume.to_owned());
    }

    /// Puts a change back to be decided again at `at` (e.g. the pod is not known yet).
    pub fn requeue(&mut self, pod_uid: &str, mut change: PendingChange, at: Instant) {
        change.attempts += 1;
        match self.pending.get_mut(pod_uid) {
            Some((_, existing)) => {
                existing.volumes.extend(change.volumes);
                existing.first_seen = existing.first_seen.min(change.first_seen);
                existing.attempts = existing.attempts.max(change.attempts);
            }
            None => {
                self.pending.insert(pod_uid.to_owned(), (at, change));
            }
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|(at, _)| *at).min()
    }

    /// Removes and returns every change whose window has closed at `now`.
    pub fn take_due(&mut self, now: Instant) -> Vec<(String, PendingChange)> {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        let mut out: Vec<(String, PendingChange)> = due
            .into_iter()
            .filter_map(|uid| self.pending.remove(&uid).map(|(_, change)| (uid, change)))
            .collect();
        out.sort_by_key(|(_, c)| c.first_seen);
        out
    }

    /// Whether a change of the pod is pending.
    pub fn contains(&self, pod_uid: &str) -> bool {
        self.pending.contains_key(pod_uid)
    }

    /// Drops whatever is pending for a pod that went away.
    pub fn remove_pod(&mut self, pod_uid: &str) -> bool {
        self.pending.remove(pod_uid).is_some()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn swaps_within_the_window_coalesce_into_one_change() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(1000 * MS);
        d.add("p1", "conf", t0);
        d.add("p1", "tls", t0 + 300 * MS);
        d.add("p1", "conf", t0 + 900 * MS);
        assert_eq!(d.next_deadline(), Some(t0 + 1000 * MS));
        assert!(d.take_due(t0 + 999 * MS).is_empty());
        let due = d.take_due(t0 + 1000 * MS);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].1.volumes.iter().collect::<Vec<_>>(), ["conf", "tls"]);
        assert_eq!(due[0].1.first_seen, t0);
        assert!(d.is_empty());
        // The next swap opens a new window.
        d.add("p1", "conf", t0 + 1100 * MS);
        assert_eq!(d.next_deadline(), Some(t0 + 2100 * MS));
    }

    #[test]
    fn zero_window_is_due_at_once_and_pods_are_independent() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(Duration::ZERO);
        d.add("p1", "a", t0);
        d.add("p2", "a", t0 + MS);
        let due = d.take_due(t0 + MS);
        assert_eq!(
            due.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
            ["p1", "p2"]
        );
    }

    #[test]
    fn a_deleted_pod_loses_its_pending_change() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(1000 * MS);
        d.add("p1", "a", t0);
        assert!(d.remove_pod("p1"));
        assert!(d.take_due(t0 + 2000 * MS).is_empty());
        assert_eq!(d.next_deadline(), None);
    }

    #[test]
    fn requeue_merges_and_counts_attempts() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(Duration::ZERO);
        d.add("p1", "a", t0);
        let (_, change) = d.take_due(t0).remove(0);
        d.requeue("p1", change, t0 + 500 * MS);
        d.add("p1", "b", t0 + 100 * MS);
        let (_, change) = d.take_due(t0 + 500 * MS).remove(0);
        assert_eq!(change.attempts, 1);
        assert_eq!(change.volumes.len(), 2);
        assert_eq!(change.first_seen, t0);
    }
}
