//! Coalescing (pure): changes of one pod within the debounce window make one action.
//!
//! The window opens at the first change and closes `window` later, so a burst of swaps
//! (several ConfigMaps updated together) gives a single reload, and latency stays bounded
//! by the window even while swaps keep coming.
//!
//! A swap nobody announced waits for the window: the agent cannot know how many volumes of
//! the pod the kubelet's sync will swap. A projection nudge (`reloadlet.io/projection-nudge`,
//! naming the changed ConfigMap/Secret) tells it: the pod's volumes that project that object
//! ([`Debouncer::announce`]). Once all of them have swapped, the change is due
//! [`ANNOUNCED_GRACE`] later ([`announced_due`]), never later than the window.
//!
//! Why a few milliseconds are enough: the kubelet swaps the volumes of one sync in ONE pass
//! of its volume reconciler. The desired-state populator marks every volume of the pod
//! remount-required at once (`pkg/kubelet/volumemanager/populator/
//! desired_state_of_world_populator.go` `processPodVolumes` → `actualStateOfWorld.
//! MarkRemountRequired(uniquePodName)`); the reconciler's next pass
//! (`pkg/kubelet/volumemanager/reconciler/reconciler_common.go` `mountOrAttachVolumes`) walks
//! `desiredStateOfWorld.GetVolumesToMount()` and calls `operationExecutor.MountVolume` for
//! each remount-required volume, and `nestedpendingoperations.Run`
//! (`pkg/volume/util/nestedpendingoperations/nestedpendingoperations.go`) starts each
//! operation in its own goroutine at once. Each ends in `AtomicWriter.Write` (a few small
//! writes and one rename). So the swaps of one sync are started within the same pass,
//! microseconds apart, and run in parallel (sub-millisecond apart on an idle node); what can
//! spread them is the Go scheduler on a saturated node, whose `sysmon` preempts a goroutine
//! that ran 10 ms (`runtime/proc.go` `forcePreemptNS`) so that a waiting one gets a thread.
//! The next pass is 100 ms later (`reconcilerLoopSleepPeriod`). A grace of one such time
//! slice (10 ms) covers the spread of one pass, stays far from the next pass, and is small
//! beside the kubelet's own update → swap (0–200 ms of the two loops alone). The agent's
//! side adds nothing: its loop reads the watch before it fires a due change (`agent/mod.rs`,
//! a biased `select!`), so a swap already queued when the grace ends joins the change.

use crate::core::drained::ReleaseDrained;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// After the last announced volume swapped, how long the other swaps of the same reconciler
/// pass are waited for (module docs).
pub const ANNOUNCED_GRACE: Duration = Duration::from_millis(10);
/// An announcement no swap answered within this long is dropped (the kubelet's periodic
/// sync, 60–90 s, would have projected the change anyway).
pub const ANNOUNCED_FOR: Duration = Duration::from_secs(120);

/// The announced-swap rule (pure): when every volume a nudge announced (`announced`, not
/// empty) is among the pod's swapped volumes, the change is due `grace` after `now`, or at the
/// window's end if that comes first. `None`: the window's deadline stands.
pub fn announced_due(
    announced: &BTreeSet<String>,
    swapped: &BTreeSet<String>,
    window_due: Instant,
    now: Instant,
    grace: Duration,
) -> Option<Instant> {
    if announced.is_empty() || !announced.is_subset(swapped) {
        return None;
    }
    Some(window_due.min(now + grace))
}

/// What a nudge announced for one pod: the volumes its sync will swap, and when it was seen.
#[derive(Debug)]
struct Announcement {
    volumes: BTreeSet<String>,
    seen: Instant,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChange {
    /// Volume names (of this pod) whose content changed.
    pub volumes: BTreeSet<String>,
    /// When the first swap of the window was seen (for the swap-to-action latency).
    pub first_seen: Instant,
    /// How many times the pod was re-queued because it was not (yet) in the pod index.
    pub attempts: u32,
    /// Due early: every volume a nudge announced has swapped ([`announced_due`]).
    pub announced: bool,
}

#[derive(Debug)]
pub struct Debouncer {
    window: Duration,
    pending: HashMap<String, (Instant, PendingChange)>,
    /// Per pod: the volumes the last projection nudge announced, until they swapped.
    announced: HashMap<String, Announcement>,
    /// A volume set kept for the debouncer's life, never read: its B-tree leaf (280 bytes) keeps
    /// the allocator's group of that size mapped. Each change's volume set is one such leaf,
    /// made on the swap and freed after its action; under musl's mallocng, the image's
    /// allocator, a group whose last slot is freed is unmapped at once (`src/malloc/mallocng/
    /// free.c`, `okay_to_free`), so each swap paid an `mmap` and a page fault before its
    /// signal and an `munmap` after it (a trace at 1,000 volumes: all 261 swaps;
    /// docs/architecture.md, "Allocations before the signal").
    _leaf: BTreeSet<String>,
}

impl Debouncer {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            pending: HashMap::new(),
            announced: HashMap::new(),
            _leaf: BTreeSet::from([String::new()]),
        }
    }

    /// A projection nudge seen at `now` names an object that the pod's `volumes` project: the
    /// sync it causes will swap them. Empty `volumes`: nothing is announced (and an earlier
    /// announcement of the pod is dropped).
    pub fn announce(&mut self, pod_uid: &str, volumes: BTreeSet<String>, now: Instant) {
        if volumes.is_empty() {
            self.announced.remove(pod_uid);
            return;
        }
        self.announced
            .insert(pod_uid.to_owned(), Announcement { volumes, seen: now });
        // The kubelet may have swapped before the agent's pod watch showed the nudge.
        self.expedite(pod_uid, now);
    }

    /// Whether a nudge's announcement is waiting for the pod's swaps.
    pub fn is_announced(&self, pod_uid: &str) -> bool {
        self.announced.contains_key(pod_uid)
    }

    /// Brings the pod's pending change forward when the announced volumes have all swapped.
    fn expedite(&mut self, pod_uid: &str, now: Instant) {
        let Some(a) = self.announced.get(pod_uid) else {
            return;
        };
        if now.saturating_duration_since(a.seen) > ANNOUNCED_FOR {
            self.announced.remove(pod_uid);
            return;
        }
        let Some((due, change)) = self.pending.get_mut(pod_uid) else {
            return;
        };
        if let Some(at) = announced_due(&a.volumes, &change.volumes, *due, now, ANNOUNCED_GRACE) {
            *due = at;
            change.announced = true;
        }
    }

    /// Puts back a change that came due on its announcement but cannot be decided yet (a
    /// volume of the pod is still being hashed), due again at `at` — not a retry.
    pub fn postpone(&mut self, pod_uid: &str, change: PendingChange, at: Instant) {
        match self.pending.get_mut(pod_uid) {
            Some((_, existing)) => {
                existing.volumes.extend(change.volumes);
                existing.first_seen = existing.first_seen.min(change.first_seen);
            }
            None => {
                self.pending.insert(pod_uid.to_owned(), (at, change));
            }
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
                    announced: false,
                },
            )
        });
        change.volumes.insert(volume.to_owned());
        self.expedite(pod_uid, now);
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
        for (uid, change) in &out {
            // The announced swaps are in this change: the announcement is answered.
            let answered = self
                .announced
                .get(uid)
                .is_some_and(|a| a.volumes.is_subset(&change.volumes));
            if answered {
                self.announced.remove(uid);
            }
        }
        self.release_drained();
        out.sort_by_key(|(_, c)| c.first_seen);
        out
    }

    /// Whether a change of the pod is pending.
    pub fn contains(&self, pod_uid: &str) -> bool {
        self.pending.contains_key(pod_uid)
    }

    /// Drops whatever is pending for a pod that went away.
    pub fn remove_pod(&mut self, pod_uid: &str) -> bool {
        self.announced.remove(pod_uid);
        let removed = self.pending.remove(pod_uid).is_some();
        self.release_drained();
        removed
    }

    /// The pending tables give back a burst's memory once empty again
    /// ([`crate::core::drained`]).
    fn release_drained(&mut self) {
        self.pending.release_if_drained();
        self.announced.release_if_drained();
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
    fn a_burst_of_pods_leaves_no_room_behind_once_due() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(Duration::ZERO);
        for i in 0..250 {
            d.add(&format!("p{i}"), "conf", t0);
        }
        assert!(d.pending.capacity() >= 250);
        assert_eq!(d.take_due(t0).len(), 250);
        assert_eq!(d.pending.capacity(), 0);
    }

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

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn announced_due_table() {
        let t0 = Instant::now();
        let window_due = t0 + 250 * MS;
        let grace = 20 * MS;
        /// (announced, swapped, now, due)
        type Case<'a> = (&'a [&'a str], &'a [&'a str], Duration, Option<Duration>);
        let cases: &[Case] = &[
            // nothing announced: the window stands
            (&[], &["a"], 10 * MS, None),
            // the announced volume swapped: due after the grace
            (&["a"], &["a"], 10 * MS, Some(30 * MS)),
            // an unannounced volume swapped first: the window stands
            (&["a"], &["b"], 10 * MS, None),
            // two announced, one swapped: wait for the other
            (&["a", "b"], &["a"], 10 * MS, None),
            (&["a", "b"], &["a", "b"], 12 * MS, Some(32 * MS)),
            // announced and unannounced ones swapped together: one change, after the grace
            (&["a"], &["a", "c"], 12 * MS, Some(32 * MS)),
            // never later than the window
            (&["a"], &["a"], 240 * MS, Some(250 * MS)),
        ];
        for (announced, swapped, now, due) in cases {
            assert_eq!(
                announced_due(&set(announced), &set(swapped), window_due, t0 + *now, grace),
                due.map(|d| t0 + d),
                "announced {announced:?}, swapped {swapped:?} at {now:?}"
            );
        }
    }

    #[test]
    fn an_announced_swap_is_due_after_the_grace_and_takes_the_rest_of_its_pass_along() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(250 * MS);
        d.announce("p1", set(&["conf"]), t0);
        d.add("p1", "conf", t0 + 100 * MS);
        assert_eq!(d.next_deadline(), Some(t0 + 100 * MS + ANNOUNCED_GRACE));
        // Another volume of the same pass, within the grace: the same change.
        d.add("p1", "tls", t0 + 101 * MS);
        assert_eq!(d.next_deadline(), Some(t0 + 100 * MS + ANNOUNCED_GRACE));
        let due = d.take_due(t0 + 100 * MS + ANNOUNCED_GRACE);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].1.volumes, set(&["conf", "tls"]));
        assert!(due[0].1.announced);
        // Answered: the next swap nobody announced waits for the window again.
        assert!(!d.is_announced("p1"));
        d.add("p1", "conf", t0 + 2000 * MS);
        assert_eq!(d.next_deadline(), Some(t0 + 2250 * MS));
    }

    #[test]
    fn an_unannounced_swap_first_then_the_announced_one_make_one_change() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(250 * MS);
        d.announce("p1", set(&["conf"]), t0);
        d.add("p1", "other", t0 + 100 * MS);
        assert_eq!(
            d.next_deadline(),
            Some(t0 + 350 * MS),
            "not announced: the window"
        );
        d.add("p1", "conf", t0 + 102 * MS);
        assert_eq!(d.next_deadline(), Some(t0 + 102 * MS + ANNOUNCED_GRACE));
        let due = d.take_due(t0 + 102 * MS + ANNOUNCED_GRACE);
        assert_eq!(due[0].1.volumes, set(&["conf", "other"]));
    }

    #[test]
    fn a_nudge_seen_after_its_swap_brings_the_change_forward() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(250 * MS);
        d.add("p1", "conf", t0);
        d.announce("p1", set(&["conf"]), t0 + 5 * MS);
        assert_eq!(d.next_deadline(), Some(t0 + 5 * MS + ANNOUNCED_GRACE));
    }

    #[test]
    fn announcements_without_volumes_expire_or_leave_with_their_pod() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(250 * MS);
        // An object no volume of the pod projects announces nothing.
        d.announce("p1", BTreeSet::new(), t0);
        assert!(!d.is_announced("p1"));
        d.add("p1", "conf", t0);
        assert_eq!(d.next_deadline(), Some(t0 + 250 * MS));
        // A nudge never answered is dropped after ANNOUNCED_FOR.
        let mut d = Debouncer::new(250 * MS);
        d.announce("p2", set(&["conf"]), t0);
        let late = t0 + ANNOUNCED_FOR + MS;
        d.add("p2", "conf", late);
        assert_eq!(d.next_deadline(), Some(late + 250 * MS));
        assert!(!d.is_announced("p2"));
        // A deleted pod's announcement goes with it.
        d.announce("p3", set(&["conf"]), t0);
        d.remove_pod("p3");
        assert!(!d.is_announced("p3"));
    }

    #[test]
    fn a_postponed_change_keeps_its_attempts_and_merges() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(250 * MS);
        d.announce("p1", set(&["conf"]), t0);
        d.add("p1", "conf", t0);
        let (_, change) = d.take_due(t0 + ANNOUNCED_GRACE).remove(0);
        d.postpone("p1", change, t0 + 2 * ANNOUNCED_GRACE);
        d.add("p1", "big", t0 + ANNOUNCED_GRACE + MS);
        let (_, change) = d.take_due(t0 + 2 * ANNOUNCED_GRACE).remove(0);
        assert_eq!(change.attempts, 0);
        assert_eq!(change.volumes, set(&["big", "conf"]));
    }
}
