//! Pacing of env evictions (docs/pacing.md), with the one bookkeeping of `core::pacing::book`
//! in two books:
//!
//! - **per pod** (each env consumer's [`PacingSpec`] read from its annotations): debounce,
//!   minimum interval and maintenance windows. Evictions are disruptive: a window always holds
//!   them.
//! - **per owner** (the pod's controlling owner, e.g. its ReplicaSet; a pod without one is its
//!   own owner): the flap breaker alone. An eviction replaces the pod with a new one (a new
//!   UID, no history): a ReplicaSet counts only active pods, not those with a
//!   `deletionTimestamp` (kubernetes `pkg/controller/replicaset/replica_set.go`,
//!   `syncReplicaSet` → `controller.FilterActivePods`; `IsPodActive` in
//!   `pkg/controller/controller_utils.go`), and `manageReplicas` creates the missing ones from
//!   its template, often before the evicted pod is gone. A breaker per pod would never see a
//!   source that flaps; per owner, one *action* is one
//!   change — a source's new content (its digest) — acted on for that owner, counted once
//!   however many of its pods it evicts. When the count within the window would be exceeded,
//!   the evictions of all the owner's pods are held (one `ReloadFlapping`), and when the source
//!   has been quiet for the window the latest content is acted on once (the held pods go
//!   through their own per-pod rules then: a window still holds them).
//!
//! The breaker is consulted before a pod's own rules (an open episode holds every change of
//! the owner; a change that would trip it opens one), and counts an action only when the pod's
//! own rules let it run, so a change deferred to a window counts when it is acted on.
//!
//! What is held for a pod is described by [`EnvPacing::record_of`]: the controller keeps it on
//! the pod (`reloadlet.io/env-pacing`) for `reloadlet explain`.
//!
//! Nothing here is read back: a held change keeps the pod's `reloadlet.io/env-baseline` as it
//! was (only an eviction's replacement gets a new one), so after a restart or a leader change
//! the new leader finds the change again when it compares the baselines, and paces it anew
//! (the owners' flap history starts afresh then).
//!
//! [`PacingSpec`]: crate::core::pacing::PacingSpec

use crate::controller::consumed::Change;
use crate::core::model::{PodInfo, SourceRef};
use crate::core::pacing::record::{Deferred, Episode};
pub use crate::core::pacing::Notice as EnvNotice;
use crate::core::pacing::{
    ActionClass, FlapThreshold, Gate, Notice, PacingBook, PacingDefaults, PacingRecord, PacingSpec,
    PacingSpecs, WallClock,
};
use jiff::{SignedDuration, Timestamp};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// What pacing says of an env change.
#[derive(Debug, PartialEq, Eq)]
pub enum EnvPaced {
    /// Evict now for these changes (the pod's, and those held for it or for other pods of its
    /// owner that this action covers; the action is recorded).
    Act(Vec<Change>),
    /// Held; what to tell, once.
    Held(Option<EnvNotice>),
    /// A pacing annotation is invalid: no eviction until it is fixed.
    Refused(String),
}

/// Changes held (of one pod in the per-pod book; of any of an owner's pods in the owner
/// book), and when the first was seen.
#[derive(Debug)]
pub struct HeldEnv {
    pub changes: Vec<Change>,
    pub seen: Instant,
}

/// `changes` merged into `into`: the latest change per pod and source wins.
fn merge(into: &mut Vec<Change>, changes: &[Change]) {
    for change in changes {
        into.retain(|c| !(c.uid == change.uid && c.source == change.source));
        into.push(change.clone());
    }
}

fn hold(held: Option<HeldEnv>, changes: &[Change], seen: Instant) -> HeldEnv {
    let mut held = held.unwrap_or(HeldEnv {
        changes: Vec::new(),
        seen,
    });
    held.seen = held.seen.min(seen);
    merge(&mut held.changes, changes);
    held
}

/// A controlling owner of env consumers.
#[derive(Debug, Default)]
struct Owner {
    /// `ReplicaSet web-5d8f9` (Events); `None` for a pod without a controller (its own owner).
    label: Option<String>,
    /// Its env consumers known now.
    pods: usize,
    /// The content last acted on per source: the same change reaching its other pods is
    /// the same action, not counted again.
    acted: HashMap<SourceRef, String>,
    /// The flap threshold last applied (its pods' annotations or `--flap-threshold`).
    flap: Option<FlapThreshold>,
    /// The open flapping episode, as its `ReloadFlapping` told it.
    episode: Option<Episode>,
}

/// The key of a pod's owner in the owner book: `namespace/apiVersion/kind/name`, or the pod's
/// UID (which has no `/`) when it has no controller.
fn owner_key(pod: &PodInfo) -> String {
    match &pod.controller {
        Some(o) => format!("{}/{}/{}/{}", pod.namespace, o.api_version, o.kind, o.name),
        None => pod.uid.clone(),
    }
}

/// `changes` (of one pod, or of an owner's pods) through `book` under `spec`: an eviction is
/// disruptive; held work is merged with what was held for `key`.
fn gate(
    book: &mut PacingBook<String, HeldEnv>,
    key: &str,
    spec: &PacingSpec,
    fresh: bool,
    changes: &[Change],
    seen: Instant,
    now: Instant,
) -> Gate<HeldEnv> {
    let source = changes
        .first()
        .map(|c| c.source.to_string())
        .unwrap_or_default();
    book.gate(
        key,
        spec,
        ActionClass::Disruptive,
        fresh,
        now,
        || source,
        |held| hold(held, changes, seen),
    )
}

/// The flap breaker alone: what the owner book paces.
fn flap_only(flap: Option<FlapThreshold>) -> PacingSpec {
    PacingSpec {
        debounce: Duration::ZERO,
        min_interval: Duration::ZERO,
        flap,
        window: None,
        max_defer: None,
    }
}

pub struct EnvPacing {
    specs: PacingSpecs<String>,
    /// Debounce, minimum interval and windows, per pod UID.
    pods: PacingBook<String, HeldEnv>,
    /// The flap breaker, per owner key.
    owners: PacingBook<String, HeldEnv>,
    owner_of: HashMap<String, String>,
    owned: HashMap<String, Owner>,
    /// Owners without pods now, dropped once nothing of theirs matters any more.
    vacant: HashSet<String>,
    /// Held changes that became moot: the pod's source is back at what it runs.
    settled: HashSet<(String, SourceRef)>,
    /// The deferral of each pod whose eviction waits for a window or an interval, as its
    /// `ReloadDeferred` told it.
    deferrals: HashMap<String, Deferred>,
}

impl EnvPacing {
    pub fn new(defaults: PacingDefaults, clock: WallClock) -> Self {
        Self {
            specs: PacingSpecs::new(defaults, false),
            pods: PacingBook::new(clock),
            owners: PacingBook::new(clock),
            owner_of: HashMap::new(),
            owned: HashMap::new(),
            vacant: HashSet::new(),
            settled: HashSet::new(),
            deferrals: HashMap::new(),
        }
    }

    /// Reads the pod's pacing annotations and owner; `Ok(true)`: they were invalid and are
    /// fixed (what they refused is to be compared again); `Err`: the invalid one, named with
    /// its value.
    pub fn on_pod(&mut self, pod: &PodInfo) -> Result<bool, crate::core::invalid::Invalid> {
        self.own(pod);
        let was_invalid = self.specs.get(pod.uid.as_str()).is_err();
        self.specs
            .read(&pod.uid, &pod.annotations)
            .map(|()| was_invalid)
    }

    fn own(&mut self, pod: &PodInfo) {
        let key = owner_key(pod);
        if self.owner_of.get(&pod.uid) == Some(&key) {
            return;
        }
        if let Some(old) = self.owner_of.insert(pod.uid.clone(), key.clone()) {
            self.leave(&old);
        }
        let owner = self.owned.entry(key.clone()).or_insert_with(|| Owner {
            label: pod
                .controller
                .as_ref()
                .map(|o| format!("{} {}", o.kind, o.name)),
            ..Owner::default()
        });
        owner.pods += 1;
        self.vacant.remove(&key);
    }

    fn leave(&mut self, key: &str) {
        if let Some(owner) = self.owned.get_mut(key) {
            owner.pods = owner.pods.saturating_sub(1);
            if owner.pods == 0 {
                self.vacant.insert(key.to_owned());
            }
        }
    }

    /// The pod's owner as Events name it (`ReplicaSet web-5d8f9`); `None` without one.
    pub fn owner_label(&self, uid: &str) -> Option<&str> {
        let key = self.owner_of.get(uid)?;
        self.owned.get(key)?.label.as_deref()
    }

    /// Whether an eviction of the pod for a new `change` may run now. A held change is kept
    /// here until [`Self::take_due`].
    pub fn gate(&mut self, change: &Change, seen: Instant, now: Instant) -> EnvPaced {
        if !self.settled.is_empty() {
            self.settled
                .remove(&(change.uid.clone(), change.source.clone()));
        }
        self.pace(vec![change.clone()], seen, true, now)
    }

    /// The pod's source is back at the content it runs (its baseline): a change held for it
    /// is dropped when it comes due — "evict the pods whose baselines still differ".
    pub fn settle(&mut self, change: &Change) {
        self.settled
            .insert((change.uid.clone(), change.source.clone()));
    }

    /// `changes` without the settled ones (each settled entry is used up).
    fn unsettled(&mut self, mut changes: Vec<Change>) -> Vec<Change> {
        if !self.settled.is_empty() {
            changes.retain(|c| !self.settled.remove(&(c.uid.clone(), c.source.clone())));
        }
        changes
    }

    /// One pod's `changes` through the owner's breaker and the pod's own rules (`fresh`: a new
    /// change, not held work coming due).
    fn pace(&mut self, changes: Vec<Change>, seen: Instant, fresh: bool, now: Instant) -> EnvPaced {
        let Some(first) = changes.first() else {
            return EnvPaced::Held(None);
        };
        let uid = first.uid.clone();
        let spec = match self.specs.get(uid.as_str()) {
            Ok(spec) => spec.clone(),
            Err(message) => return EnvPaced::Refused(message.to_owned()),
        };
        let key = self
            .owner_of
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| uid.clone());
        if !self.counted(&key, &changes)
            && (self.owners.is_held(&key) || self.trips(&key, spec.flap, now))
        {
            // An open episode holds it, or acting would open one.
            return self.owner_gate(&key, spec.flap, &changes, seen, true, now);
        }
        let flap = spec.flap;
        let own = PacingSpec { flap: None, ..spec };
        match self.pod_gate(&uid, &own, fresh, &changes, seen, now) {
            Err(held) => held,
            Ok(all) if self.counted(&key, &all) => EnvPaced::Act(all),
            Ok(all) => self.owner_gate(&key, flap, &all, seen, true, now),
        }
    }

    /// The pod's own rules (debounce, minimum interval, window; `spec` without the breaker)
    /// for `changes`: `Ok` with every change to act on now (what was held for the pod merged
    /// in), or `Err` with what holding them says.
    fn pod_gate(
        &mut self,
        uid: &str,
        spec: &PacingSpec,
        fresh: bool,
        changes: &[Change],
        seen: Instant,
        now: Instant,
    ) -> Result<Vec<Change>, EnvPaced> {
        match gate(&mut self.pods, uid, spec, fresh, changes, seen, now) {
            Gate::Held(notice) => Err(self.pod_held(uid, notice)),
            Gate::Act { held, .. } => {
                self.deferrals.remove(uid);
                let mut all = self.unsettled(held.map(|h| h.changes).unwrap_or_default());
                merge(&mut all, changes);
                Ok(all)
            }
        }
    }

    /// Whether every change was acted on for the owner already (through another of its pods).
    fn counted(&self, key: &str, changes: &[Change]) -> bool {
        let Some(owner) = self.owned.get(key) else {
            return false;
        };
        changes
            .iter()
            .all(|c| owner.acted.get(&c.source) == Some(&c.digest))
    }

    /// Whether one more action now would be more than the owner's flap threshold allows.
    fn trips(&self, key: &str, flap: Option<FlapThreshold>, now: Instant) -> bool {
        let Some(flap) = flap else { return false };
        let Some(pacer) = self.owners.pacer(&key.to_owned()) else {
            return false;
        };
        let wall = self.owners.clock().at(now);
        let cutoff = since(wall, flap.window);
        let taken = pacer.recent().filter(|t| *t > cutoff).count();
        u32::try_from(taken).unwrap_or(u32::MAX) >= flap.count
    }

    /// The owner's breaker for `changes`: acted on (counted once, remembered per source) or
    /// held with what the owner holds already.
    fn owner_gate(
        &mut self,
        key: &str,
        flap: Option<FlapThreshold>,
        changes: &[Change],
        seen: Instant,
        fresh: bool,
        now: Instant,
    ) -> EnvPaced {
        if let Some(owner) = self.owned.get_mut(key) {
            owner.flap = flap;
        }
        let spec = flap_only(flap);
        match gate(&mut self.owners, key, &spec, fresh, changes, seen, now) {
            Gate::Held(notice) => {
                if let (Some(Notice::Flapping(r)), Some(owner)) = (&notice, self.owned.get_mut(key))
                {
                    let since = self
                        .owners
                        .pacer(&key.to_owned())
                        .and_then(|p| p.flapping_since());
                    owner.episode = Some(Episode {
                        since: since.unwrap_or_else(|| self.owners.clock().at(now)),
                        source: r.source.clone(),
                        changes: r.changes,
                    });
                }
                EnvPaced::Held(notice)
            }
            Gate::Act { held, .. } => {
                let mut all = self.unsettled(held.map(|h| h.changes).unwrap_or_default());
                merge(&mut all, changes);
                if let Some(owner) = self.owned.get_mut(key) {
                    owner.episode = None;
                    for c in &all {
                        owner.acted.insert(c.source.clone(), c.digest.clone());
                    }
                }
                EnvPaced::Act(all)
            }
        }
    }

    /// The held changes whose time came by `now`, each with what pacing says of it now
    /// (the first change of the pod concerned, when it was first seen, and the verdict).
    pub fn take_due(&mut self, now: Instant) -> Vec<(Change, Instant, EnvPaced)> {
        let mut out = Vec::new();
        for (_, held) in self.pods.take_due(now) {
            let changes = self.unsettled(held.changes);
            let Some(first) = changes.first().cloned() else {
                continue;
            };
            let paced = self.pace(changes, held.seen, false, now);
            out.push((first, held.seen, paced));
        }
        for (key, held) in self.owners.take_due(now) {
            let flap = self.owned.get(&key).and_then(|o| o.flap);
            // Settled ones are not evicted; the episode closes all the same (one action).
            let pending = self.unsettled(held.changes);
            let paced = self.owner_gate(&key, flap, &pending, held.seen, false, now);
            let EnvPaced::Act(changes) = paced else {
                if let Some(first) = pending.first().cloned() {
                    out.push((first, held.seen, paced));
                }
                continue;
            };
            // The episode closed with one action on the latest content: each pod's changes go
            // through its own rules (a window still holds them), no longer counted.
            let mut uids: Vec<&str> = Vec::new();
            for c in &changes {
                if !uids.contains(&c.uid.as_str()) {
                    uids.push(&c.uid);
                }
            }
            for uid in uids {
                let mine: Vec<Change> = changes.iter().filter(|c| c.uid == uid).cloned().collect();
                let first = mine[0].clone();
                let paced = self.released(mine, held.seen, now);
                out.push((first, held.seen, paced));
            }
        }
        out
    }

    /// A pod's changes released by its owner's closed episode, through its own rules as a
    /// change pending since it was first seen (its debounce has long passed; a window or a
    /// minimum interval may still hold it).
    fn released(&mut self, changes: Vec<Change>, seen: Instant, now: Instant) -> EnvPaced {
        let Some(first) = changes.first() else {
            return EnvPaced::Held(None);
        };
        let uid = first.uid.clone();
        let source = first.source.to_string();
        let spec = match self.specs.get(uid.as_str()) {
            Ok(spec) => PacingSpec {
                flap: None,
                ..spec.clone()
            },
            Err(message) => return EnvPaced::Refused(message.to_owned()),
        };
        let wall = self.pods.clock().at(seen);
        let pacer = self.pods.pacer_mut(&uid);
        if !pacer.is_pending() {
            pacer.changed(wall, &source);
        }
        self.pod_gate(&uid, &spec, false, &changes, seen, now)
            .map_or_else(|held| held, EnvPaced::Act)
    }

    /// A pod's own rules hold its eviction: a deferral is remembered as its notice tells it.
    fn pod_held(&mut self, uid: &str, notice: Option<Notice>) -> EnvPaced {
        if let Some(Notice::Deferred { until, why }) = &notice {
            let pacer = self.pods.pacer(&uid.to_owned());
            self.deferrals.insert(
                uid.to_owned(),
                Deferred {
                    until: *until,
                    why: why.as_str().to_owned(),
                    since: pacer.and_then(|p| p.pending_since()).unwrap_or(*until),
                    source: pacer
                        .and_then(|p| p.pending_source())
                        .unwrap_or_default()
                        .to_owned(),
                },
            );
        }
        EnvPaced::Held(notice)
    }

    /// What is held for the pod now, as the controller keeps it on the pod
    /// (`reloadlet.io/env-pacing`): its owner's flapping episode, when a change of the pod is
    /// among what the episode holds, and its own deferral; `None` when nothing is (a debounce
    /// alone is not recorded: it ends within the `--debounce` the pod asks for).
    pub fn record_of(&self, uid: &str) -> Option<PacingRecord> {
        let key = self.owner_of.get(uid).map_or(uid, String::as_str);
        let flapping = self
            .owners
            .held(key)
            .filter(|(held, ..)| held.changes.iter().any(|c| c.uid == uid))
            .and_then(|_| self.owned.get(key)?.episode.clone());
        let deferred = self
            .pods
            .held(uid)
            .filter(|(_, deferred, _)| *deferred)
            .and_then(|_| self.deferrals.get(uid).cloned());
        (flapping.is_some() || deferred.is_some()).then(|| PacingRecord {
            rollouts: Vec::new(),
            flapping,
            deferred,
        })
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        match (self.pods.next_deadline(), self.owners.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Deferred evictions now, and owners held as flapping (the gauges; a pod without an
    /// owner counts as its own).
    pub fn counts(&self) -> (usize, usize) {
        let (deferred, _) = self.pods.counts();
        let (_, flapping) = self.owners.counts();
        (deferred, flapping)
    }

    /// The pod went away at `now`: what was held for it and its own history are dropped; its
    /// owner's history is kept while the owner has pods or anything of it still matters (an
    /// eviction's replacement may come before or after its pod is gone).
    pub fn forget(&mut self, uid: &str, now: Instant) {
        if !self.settled.is_empty() {
            self.settled.retain(|(u, _)| u != uid);
        }
        self.specs.forget(uid);
        self.pods.forget(uid);
        self.deferrals.remove(uid);
        if let Some(key) = self.owner_of.remove(uid) {
            self.leave(&key);
        }
        self.sweep(now);
    }

    /// Drops the owners without pods whose history has aged out and that hold nothing.
    fn sweep(&mut self, now: Instant) {
        if self.vacant.is_empty() {
            return;
        }
        let wall = self.owners.clock().at(now);
        let stale: Vec<String> = self
            .vacant
            .iter()
            .filter(|key| {
                let Some(owner) = self.owned.get(*key) else {
                    return true;
                };
                let recent = self.owners.pacer(*key).is_some_and(|p| {
                    let cutoff = owner.flap.map_or(Timestamp::MAX, |f| since(wall, f.window));
                    p.is_flapping() || p.recent().any(|t| t > cutoff)
                });
                // A pod without an owner is gone for good: its UID never returns.
                owner.label.is_none() || (!recent && !self.owners.is_held(*key))
            })
            .cloned()
            .collect();
        for key in stale {
            self.vacant.remove(&key);
            self.owned.remove(&key);
            self.owners.forget(&key);
        }
    }

    /// The owners known now (tests: nothing is kept of owners long gone).
    #[cfg(test)]
    fn owners_len(&self) -> usize {
        self.owned.len()
    }

    /// Another replica leads now: what this one held is its to find again, and the owners'
    /// flap history is the new leader's to build (an episode open here is not held here).
    /// Returns the changes that were held, so that this replica finds them again too should
    /// it lead again (the tracker must forget it asked for them).
    pub fn clear_held(&mut self) -> Vec<Change> {
        let mut held: Vec<Change> = self
            .pods
            .clear_held()
            .into_iter()
            .flat_map(|h| h.changes)
            .collect();
        held.extend(self.owners.clear_held().into_iter().flat_map(|h| h.changes));
        self.owners = PacingBook::new(self.owners.clock());
        self.deferrals.clear();
        for owner in self.owned.values_mut() {
            owner.acted.clear();
            owner.episode = None;
        }
        held
    }
}

/// `window` before `now`.
fn since(now: Timestamp, window: Duration) -> Timestamp {
    SignedDuration::try_from(window)
        .ok()
        .and_then(|w| now.checked_sub(w).ok())
        .unwrap_or(Timestamp::MIN)
}

#[cfg(test)]
mod tests;
