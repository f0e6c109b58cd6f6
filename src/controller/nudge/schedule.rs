//! When to write which nudge (pure): baselines of object versions, the re-nudge schedule,
//! per-pod coalescing and the rate cap. Time is passed in; nothing here sleeps.

use crate::core::model::SourceKind;
use crate::ports::ObjectKey;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

/// What a newly seen resourceVersion means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// First sight (start, restart, failover, a new object): never nudges.
    Baseline,
    Unchanged,
    /// The object changed after the controller first saw it.
    Changed,
}

/// The last resourceVersion seen per object.
#[derive(Debug, Default)]
pub struct Baselines {
    versions: HashMap<ObjectKey, String>,
}

impl Baselines {
    pub fn observe(&mut self, key: &ObjectKey, resource_version: &str) -> Seen {
        match self.versions.get_mut(key) {
            None => {
                self.versions
                    .insert(key.clone(), resource_version.to_owned());
                Seen::Baseline
            }
            Some(old) if old == resource_version => Seen::Unchanged,
            Some(old) => {
                *old = resource_version.to_owned();
                Seen::Changed
            }
        }
    }

    pub fn forget(&mut self, key: &ObjectKey) {
        self.versions.remove(key);
    }

    /// After a relist of `kind`: objects not in it are gone.
    pub fn retain_listed(&mut self, kind: SourceKind, listed: &[ObjectKey]) {
        let keep: std::collections::HashSet<&ObjectKey> = listed.iter().collect();
        self.versions
            .retain(|k, _| k.kind != kind || keep.contains(k));
    }

    pub fn len(&self) -> usize {
        self.versions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}

/// One change to project: `configmap/app-cfg@1234`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: SourceKind,
    pub name: String,
    pub resource_version: String,
}

impl Change {
    /// The annotation value of attempt `attempt` (1-based). A merge patch that sets the value
    /// already there is a no-op in the API server (no new resourceVersion, no kubelet sync),
    /// so re-nudges carry `#2`, `#3`.
    pub fn value(&self, attempt: u8) -> String {
        let base = format!(
            "{}/{}@{}",
            self.kind.as_str(),
            self.name,
            self.resource_version
        );
        if attempt <= 1 {
            base
        } else {
            format!("{base}#{attempt}")
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.value(1))
    }
}

/// After the first nudge, the kubelet's own watch of the object may still lag the
/// controller's: nudge again this long after the change.
pub const RENUDGE_AFTER: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];
/// At most one patch per pod per this interval.
pub const POD_INTERVAL: Duration = Duration::from_secs(1);

/// A pod, by namespace/name (what the patch addresses) and uid (what identifies it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// A patch to send now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nudge {
    pub pod: PodKey,
    pub change: Change,
    pub attempt: u8,
}

impl Nudge {
    pub fn value(&self) -> String {
        self.change.value(self.attempt)
    }
}

#[derive(Debug)]
struct Attempt {
    due: Instant,
    change: Change,
    attempt: u8,
}

#[derive(Debug, Default)]
struct PodQueue {
    attempts: Vec<Attempt>,
    /// No patch to this pod before this instant.
    next_allowed: Option<Instant>,
    /// Its newest change has not reached it yet (every attempt so far dropped).
    undelivered: bool,
}

/// Re-nudges dropped by the rate cap, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub configmap: u64,
    pub secret: u64,
}

/// The order in which due pods get the rate cap's room: pods waiting for their first nudge
/// first; among them — and among re-nudges — namespaces share the cap: the namespace served
/// least so far in this busy period goes next (`served`: nudges sent per namespace since the
/// queue was last empty), each namespace's longest-waiting pod first. So a namespace with
/// thousands of pods behind one change cannot hold every other namespace's change back for
/// minutes (issue #43 §1: the shared queues are shared fairly between namespaces), and with
/// one namespace alone the order is the plain oldest-first.
fn fair_order(picks: &mut [(bool, Instant, PodKey)], served: &HashMap<String, u64>) {
    picks.sort_by(|a, b| (!a.0, a.1, &a.2).cmp(&(!b.0, b.1, &b.2)));
    let mut turns: HashMap<(bool, &str), u64> = HashMap::new();
    let ranks: Vec<u64> = picks
        .iter()
        .map(|(undelivered, _, pod)| {
            let ns = pod.namespace.as_str();
            let turn = turns.entry((*undelivered, ns)).or_default();
            *turn += 1;
            served.get(ns).copied().unwrap_or(0) + *turn
        })
        .collect();
    let mut ranked: Vec<(u64, (bool, Instant, PodKey))> =
        ranks.into_iter().zip(picks.iter().cloned()).collect();
    ranked.sort_by(|(ra, a), (rb, b)| (!a.0, *ra, a.1, &a.2).cmp(&(!b.0, *rb, b.1, &b.2)));
    for (slot, (_, pick)) in picks.iter_mut().zip(ranked) {
        *slot = pick;
    }
}

/// The rate cap's window: at most `max_per_second` patches in any window this long.
const WINDOW: Duration = Duration::from_secs(1);
/// Patches are spaced `1 / max_per_second` apart; a loop that woke late may catch up this
/// much (within the window's cap).
const CATCH_UP: Duration = Duration::from_millis(50);

/// Schedules nudges per pod: attempt 1 at once, 2 and 3 after [`RENUDGE_AFTER`]; at most one
/// patch per pod per [`POD_INTERVAL`] (due attempts coalesce into the newest); at most
/// `max_per_second` patches in any one-second window (`--max-nudges-per-second`, exactly: a
/// sliding window, so no second ever sees more), spaced evenly `1 / max_per_second` apart
/// (a burst would reach the API server as one, and a burst's stragglers would crowd the
/// next second there). A pod's first nudge is never dropped: when the cap is reached it waits its turn
/// (oldest change first), so a change consumed by 2,000 pods reaches every one of them at
/// exactly the cap. A re-nudge that would take the room of a pod still waiting for its first
/// is dropped (and counted); otherwise it waits for its slot too. A pod whose first nudge
/// waited past its re-nudge times gets one patch, not three.
#[derive(Debug)]
pub struct Scheduler {
    pods: BTreeMap<PodKey, PodQueue>,
    max_per_second: u32,
    /// When the patches of the last [`WINDOW`] were sent, oldest first.
    sent: VecDeque<Instant>,
    /// The earliest the next patch may go (the even spacing).
    next_slot: Option<Instant>,
    dropped: Dropped,
    /// Nudges sent per namespace since the queue was last empty ([`fair_order`]).
    served: HashMap<String, u64>,
}

impl Scheduler {
    pub fn new(max_per_second: u32) -> Self {
        let max_per_second = max_per_second.max(1);
        Self {
            pods: BTreeMap::new(),
            max_per_second,
            sent: VecDeque::new(),
            next_slot: None,
            dropped: Dropped::default(),
            served: HashMap::new(),
        }
    }

    /// `change` should nudge `pod`: three attempts from `now`.
    pub fn schedule(&mut self, pod: PodKey, change: Change, now: Instant) {
        let queue = self.pods.entry(pod).or_default();
        queue.undelivered = true;
        queue.attempts.push(Attempt {
            due: now,
            change: change.clone(),
            attempt: 1,
        });
        for (i, after) in RENUDGE_AFTER.iter().enumerate() {
            queue.attempts.push(Attempt {
                due: now + *after,
                change: change.clone(),
                attempt: i as u8 + 2,
            });
        }
    }

    /// The pod is gone or no longer qualifies (or a patch failed for good): nothing more for it.
    pub fn cancel(&mut self, pod: &PodKey) {
        self.pods.remove(pod);
        if self.pods.is_empty() {
            self.served.clear();
        }
    }

    /// Leadership lost: forget everything pending.
    pub fn clear(&mut self) {
        self.pods.clear();
        self.served.clear();
    }

    /// Pods with attempts still to send.
    pub fn depth(&self) -> usize {
        self.pods.len()
    }

    pub fn dropped(&self) -> &Dropped {
        &self.dropped
    }

    fn interval(&self) -> Duration {
        WINDOW / self.max_per_second
    }

    /// When the cap next lets a patch through (`None`: it does now, as far as it knows).
    fn capacity_at(&self) -> Option<Instant> {
        let max = self.max_per_second as usize;
        let window = (self.sent.len() >= max).then(|| self.sent[self.sent.len() - max] + WINDOW);
        window.max(self.next_slot)
    }

    /// The next slot, crediting at most [`CATCH_UP`] of lateness.
    fn slot(&self, now: Instant) -> Instant {
        let earliest = now.checked_sub(CATCH_UP).unwrap_or(now);
        self.next_slot.map_or(now, |s| s.max(earliest))
    }

    /// How many patches the even spacing lets through at `now`.
    fn spaced_room(&self, now: Instant) -> usize {
        let slot = self.slot(now);
        if slot > now {
            return 0;
        }
        let interval = self.interval().as_nanos().max(1);
        ((now - slot).as_nanos() / interval) as usize + 1
    }

    /// When [`Scheduler::due`] will next have something (`None`: nothing pending).
    pub fn next_wakeup(&self) -> Option<Instant> {
        let ready = self
            .pods
            .values()
            .filter_map(|q| {
                let first = q.attempts.iter().map(|a| a.due).min()?;
                Some(q.next_allowed.map_or(first, |n| first.max(n)))
            })
            .min()?;
        Some(self.capacity_at().map_or(ready, |c| ready.max(c)))
    }

    /// The patches to send now: per pod, the newest of its due attempts (older due ones are
    /// covered by it: any annotation change makes the kubelet re-project every volume).
    pub fn due(&mut self, now: Instant) -> Vec<Nudge> {
        while self.sent.front().is_some_and(|t| *t + WINDOW <= now) {
            self.sent.pop_front();
        }
        // What the one-second window still allows, and what the spacing allows now.
        let mut room = (self.max_per_second as usize).saturating_sub(self.sent.len());
        let mut spaced = self.spaced_room(now);
        // (undelivered, oldest due, pod): pods waiting for their first nudge go first, the
        // longest-waiting of them first; then re-nudges in pod order.
        let mut picks: Vec<(bool, Instant, PodKey)> = self
            .pods
            .iter()
            .filter(|(_, q)| q.next_allowed.is_none_or(|n| n <= now))
            .filter_map(|(pod, q)| {
                let oldest = q
                    .attempts
                    .iter()
                    .filter(|a| a.due <= now)
                    .map(|a| a.due)
                    .min()?;
                Some((q.undelivered, oldest, pod.clone()))
            })
            .collect();
        fair_order(&mut picks, &self.served);
        // A re-nudge leaves room for each pod still waiting for its first one.
        let mut waiting = self.pods.values().filter(|q| q.undelivered).count();
        let interval = self.interval();
        let mut slot = self.slot(now);
        let mut out = Vec::new();
        for (undelivered, _, pod) in picks {
            let reserve = if undelivered { 0 } else { waiting };
            let Some(queue) = self.pods.get_mut(&pod) else {
                continue;
            };
            // A re-nudge that would take the room of a pod still waiting for its first nudge
            // is dropped; anything else without room or slot waits for it.
            let short = !undelivered && waiting > 0 && room < 1 + reserve;
            if !short && (room == 0 || spaced == 0) {
                continue;
            }
            let (due, later): (Vec<Attempt>, Vec<Attempt>) = std::mem::take(&mut queue.attempts)
                .into_iter()
                .partition(|a| a.due <= now);
            queue.attempts = later;
            // The newest change (by schedule), then the highest attempt of it.
            let Some(pick) = due
                .into_iter()
                .max_by_key(|a| (a.due - a.attempt_offset(), a.attempt))
            else {
                continue;
            };
            if short {
                match pick.change.kind {
                    SourceKind::ConfigMap => self.dropped.configmap += 1,
                    SourceKind::Secret => self.dropped.secret += 1,
                    SourceKind::SecretProviderClass
                    | SourceKind::CsiVolume
                    | SourceKind::PodCertificate => {}
                }
            } else {
                room -= 1;
                spaced -= 1;
                self.sent.push_back(now);
                slot += interval;
                self.next_slot = Some(slot);
                if undelivered {
                    waiting -= 1;
                }
                *self.served.entry(pod.namespace.clone()).or_default() += 1;
                queue.next_allowed = Some(now + POD_INTERVAL);
                queue.undelivered = false;
                out.push(Nudge {
                    pod: pod.clone(),
                    change: pick.change,
                    attempt: pick.attempt,
                });
            }
            if queue.attempts.is_empty() {
                self.pods.remove(&pod);
            }
        }
        if self.pods.is_empty() {
            // The busy period is over: the next one starts every namespace even.
            self.served.clear();
        }
        out
    }
}

impl Attempt {
    /// How long after the change this attempt was scheduled.
    fn attempt_offset(&self) -> Duration {
        match self.attempt {
            0 | 1 => Duration::ZERO,
            n => RENUDGE_AFTER[usize::from(n - 2).min(RENUDGE_AFTER.len() - 1)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: SourceKind::ConfigMap,
            namespace: "ns".into(),
            name: name.into(),
        }
    }
    fn pod(name: &str) -> PodKey {
        PodKey {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }
    fn change(name: &str, rv: &str) -> Change {
        Change {
            kind: SourceKind::ConfigMap,
            name: name.into(),
            resource_version: rv.into(),
        }
    }
    fn values(nudges: &[Nudge]) -> Vec<(String, String)> {
        nudges
            .iter()
            .map(|n| (n.pod.name.clone(), n.value()))
            .collect()
    }
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Issue #43 §1: one namespace's 1,000 consumers of a changed ConfigMap, and one pod of
    /// another namespace whose change came a moment later. At 10 nudges a second, the quiet
    /// namespace's pod is nudged in the second slot (the namespaces take turns), not after
    /// the noisy namespace's 100 s; every noisy pod is still nudged, in order, at the cap.
    #[test]
    fn namespaces_take_turns_for_the_rate_cap() {
        let mut s = Scheduler::new(10);
        let t0 = Instant::now();
        let in_ns = |ns: &str, name: &str| PodKey {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-{ns}-{name}"),
        };
        for i in 0..1_000 {
            s.schedule(in_ns("noisy", &format!("p{i:04}")), change("big", "2"), t0);
        }
        s.schedule(in_ns("quiet", "web"), change("small", "7"), t0 + ms(1));
        let mut order = Vec::new();
        let mut now = t0 + ms(1);
        while order.len() < 20 {
            for n in s.due(now) {
                order.push((n.pod.namespace.clone(), n.pod.name.clone()));
            }
            now += ms(100);
        }
        let quiet = order.iter().position(|(ns, _)| ns == "quiet");
        assert_eq!(quiet, Some(1), "{order:?}");
        let noisy: Vec<&str> = order
            .iter()
            .filter(|(ns, _)| ns == "noisy")
            .map(|(_, n)| n.as_str())
            .take(3)
            .collect();
        assert_eq!(
            noisy,
            ["p0000", "p0001", "p0002"],
            "oldest first within a namespace"
        );
    }

    #[test]
    fn first_sight_is_a_baseline() {
        let mut b = Baselines::default();
        assert_eq!(b.observe(&key("a"), "1"), Seen::Baseline);
        assert_eq!(b.observe(&key("a"), "1"), Seen::Unchanged);
        assert_eq!(b.observe(&key("a"), "2"), Seen::Changed);
        assert_eq!(b.observe(&key("b"), "2"), Seen::Baseline);
        b.forget(&key("a"));
        assert_eq!(b.observe(&key("a"), "3"), Seen::Baseline);
        b.retain_listed(SourceKind::ConfigMap, &[key("a")]);
        assert_eq!(
            b.observe(&key("b"), "2"),
            Seen::Baseline,
            "b was not relisted"
        );
        let secret = ObjectKey {
            kind: SourceKind::Secret,
            ..key("a")
        };
        assert_eq!(b.observe(&secret, "3"), Seen::Baseline, "kinds are apart");
    }

    #[test]
    fn values_name_kind_object_version_and_attempt() {
        let c = change("app-cfg", "1234");
        assert_eq!(c.value(1), "configmap/app-cfg@1234");
        assert_eq!(c.value(2), "configmap/app-cfg@1234#2");
        assert_eq!(c.value(3), "configmap/app-cfg@1234#3");
        let s = Change {
            kind: SourceKind::Secret,
            ..c
        };
        assert_eq!(s.value(1), "secret/app-cfg@1234");
    }

    #[test]
    fn one_change_nudges_at_once_then_after_1s_and_3s() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(20);
        s.schedule(pod("web"), change("app-cfg", "7"), t0);
        assert_eq!(s.next_wakeup(), Some(t0));
        assert_eq!(
            values(&s.due(t0)),
            [("web".into(), "configmap/app-cfg@7".into())]
        );
        assert_eq!(s.next_wakeup(), Some(t0 + ms(1000)));
        assert!(s.due(t0 + ms(999)).is_empty());
        assert_eq!(
            values(&s.due(t0 + ms(1000))),
            [("web".into(), "configmap/app-cfg@7#2".into())]
        );
        assert_eq!(s.next_wakeup(), Some(t0 + ms(3000)));
        assert!(s.due(t0 + ms(2000)).is_empty());
        assert_eq!(
            values(&s.due(t0 + ms(3000))),
            [("web".into(), "configmap/app-cfg@7#3".into())]
        );
        assert_eq!(s.next_wakeup(), None);
        assert_eq!(s.depth(), 0);
    }

    #[test]
    fn one_patch_per_pod_per_second_and_the_newest_change_wins() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(20);
        s.schedule(pod("web"), change("a", "1"), t0);
        assert_eq!(s.due(t0).len(), 1);
        // A second object of the same pod changes 200 ms later: held until 1 s after the last
        // patch, then sent once (covering a#2, which was due at the same time).
        s.schedule(pod("web"), change("b", "5"), t0 + ms(200));
        assert!(s.due(t0 + ms(200)).is_empty());
        assert_eq!(s.next_wakeup(), Some(t0 + ms(1000)));
        assert_eq!(
            values(&s.due(t0 + ms(1000))),
            [("web".into(), "configmap/b@5".into())]
        );
        // b#2 (due 1.2 s) waits for 2.0 s.
        assert!(s.due(t0 + ms(1200)).is_empty());
        assert_eq!(
            values(&s.due(t0 + ms(2000))),
            [("web".into(), "configmap/b@5#2".into())]
        );
        assert_eq!(
            values(&s.due(t0 + ms(3000))),
            [("web".into(), "configmap/a@1#3".into())]
        );
        assert_eq!(
            values(&s.due(t0 + ms(4000))),
            [("web".into(), "configmap/b@5#3".into())]
        );
        assert_eq!(s.depth(), 0);
    }

    #[test]
    fn over_the_cap_first_nudges_wait_their_turn_and_re_nudges_are_dropped() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(2);
        for p in ["a", "b", "c", "d"] {
            s.schedule(pod(p), change("cfg", "9"), t0);
        }
        let names = |n: Vec<Nudge>| n.into_iter().map(|n| n.pod.name).collect::<Vec<_>>();
        // 2 per second: one every 500 ms.
        assert_eq!(names(s.due(t0)), ["a"]);
        assert_eq!(s.next_wakeup(), Some(t0 + ms(500)));
        assert!(s.due(t0 + ms(499)).is_empty());
        assert_eq!(names(s.due(t0 + ms(500))), ["b"]);
        assert_eq!(
            s.dropped(),
            &Dropped::default(),
            "c and d wait, not dropped"
        );
        // At 1 s, c (its first nudge; #2 is due by then and covers it) goes before a's
        // re-nudge, which is dropped and counted: d still waits for its first.
        assert_eq!(
            values(&s.due(t0 + ms(1000))),
            [("c".into(), "configmap/cfg@9#2".into())]
        );
        assert_eq!(s.dropped().configmap, 1);
        assert_eq!(names(s.due(t0 + ms(1500))), ["d"]);
        // Everyone has been reached once: b's re-nudge waits for the next slot, and the last
        // re-nudges go one per slot, none dropped.
        assert_eq!(
            values(&s.due(t0 + ms(2000))),
            [("b".into(), "configmap/cfg@9#2".into())]
        );
        for (at, p) in [(3000, "a"), (3500, "b"), (4000, "c"), (4500, "d")] {
            assert_eq!(names(s.due(t0 + ms(at))), [p]);
        }
        assert_eq!(s.dropped().configmap, 1);
        assert_eq!(s.dropped().secret, 0);
        assert_eq!(s.depth(), 0);
    }

    #[test]
    fn re_nudges_leave_room_for_pods_not_reached_yet() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(2);
        for p in ["a", "b"] {
            s.schedule(pod(p), change("cfg", "9"), t0);
        }
        for p in ["c", "d"] {
            s.schedule(pod(p), change("other", "4"), t0 + ms(1));
        }
        let names = |n: Vec<Nudge>| n.into_iter().map(|n| n.pod.name).collect::<Vec<_>>();
        assert_eq!(names(s.due(t0)), ["a"]);
        assert!(s.due(t0 + ms(1)).is_empty(), "the next slot is at 500 ms");
        assert_eq!(
            names(s.due(t0 + ms(500))),
            ["b"],
            "the longest waiting first"
        );
        // a's re-nudge comes due at 1 s, but c and d still wait for their first.
        assert_eq!(names(s.due(t0 + ms(1000))), ["c"]);
        assert_eq!(s.dropped().configmap, 1);
        assert_eq!(names(s.due(t0 + ms(1500))), ["d"]);
        assert_eq!(names(s.due(t0 + ms(2000))), ["b"], "no one waits any more");
        assert_eq!(s.dropped().configmap, 1);
    }

    #[test]
    fn two_thousand_consumers_are_all_nudged_at_exactly_the_cap() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(20);
        for i in 0..2000 {
            s.schedule(pod(&format!("p{i:04}")), change("cfg", "9"), t0);
        }
        let mut sent: Vec<(Instant, Nudge)> = Vec::new();
        let mut now = t0;
        while let Some(next) = s.next_wakeup() {
            now = now.max(next);
            sent.extend(s.due(now).into_iter().map(|n| (now, n)));
            assert!(now < t0 + Duration::from_secs(200), "never drained");
        }
        let reached: std::collections::BTreeSet<&str> =
            sent.iter().map(|(_, n)| n.pod.name.as_str()).collect();
        assert_eq!(reached.len(), 2000, "every consumer nudged");
        // No one-second window holds more than the cap.
        for (i, (t, _)) in sent.iter().enumerate() {
            let in_window = sent[i..]
                .iter()
                .take_while(|(u, _)| *u < *t + WINDOW)
                .count();
            assert!(in_window <= 20, "{in_window} patches within 1 s of {t:?}");
        }
        // 2,000 pods at 20 per second: the last goes out after 99 s (not earlier: the cap
        // held) and by 100 s (not later: no second went unused while pods waited).
        let last = sent.iter().map(|(t, _)| *t).max().unwrap();
        assert!(last >= t0 + Duration::from_secs(99), "{:?}", last - t0);
        assert!(last <= t0 + Duration::from_secs(100), "{:?}", last - t0);
        // Those that waited past their re-nudge times got one patch, not three.
        let late = sent.iter().filter(|(t, _)| *t >= t0 + ms(3000)).count();
        let late_pods: std::collections::BTreeSet<&str> = sent
            .iter()
            .filter(|(t, _)| *t >= t0 + ms(3000))
            .map(|(_, n)| n.pod.name.as_str())
            .collect();
        assert_eq!(late, late_pods.len());
    }

    #[test]
    fn cancel_and_clear_forget_pending_attempts() {
        let t0 = Instant::now();
        let mut s = Scheduler::new(20);
        s.schedule(pod("a"), change("cfg", "1"), t0);
        s.schedule(pod("b"), change("cfg", "1"), t0);
        s.cancel(&pod("a"));
        assert_eq!(values(&s.due(t0)), [("b".into(), "configmap/cfg@1".into())]);
        s.clear();
        assert_eq!(s.next_wakeup(), None);
        assert!(s.due(t0 + ms(5000)).is_empty());
    }
}
