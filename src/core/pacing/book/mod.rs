//! The bookkeeping of pacing, once for every caller (the agent's pods, the controller's env
//! consumers and rollout workloads): each target's [`PacingSpec`] read from annotations
//! ([`PacingSpecs`], keyed by pod), one [`Pacer`] per target and the work held until its time
//! ([`PacingBook`], keyed by what is paced: a pod, or a workload for `rollout`). Pure: the
//! caller passes its clock's `now` and gets back what to do and what to tell; metrics,
//! Events and logs are the caller's.

use super::pacer::{ActionClass, Deferral, FlapReport, Pacer, Step};
use super::spec::{PacingDefaults, PacingSpec, ANNOTATIONS, DEBOUNCE};
use super::WallClock;
use jiff::Timestamp;
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// What pacing says of a change that is due.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate<W> {
    /// Act now (the action is recorded); `closed_episode`: a flapping episode ends with it;
    /// `held`: work that was held for the target, taken out — this action covers it (act on
    /// both, or it would come due later and act a second time).
    Act {
        closed_episode: bool,
        held: Option<W>,
    },
    /// Held until its time (the work is kept, [`PacingBook::take_due`]); what to tell, once.
    Held(Option<Notice>),
}

/// What a held change tells, once: a Normal `ReloadDeferred` or a Warning `ReloadFlapping`.
#[derive(Debug, PartialEq, Eq)]
pub enum Notice {
    Deferred { until: Timestamp, why: Deferral },
    Flapping(FlapReport),
}

/// A target's pacing as its annotations ask.
#[derive(Debug)]
struct OwnSpec {
    spec: PacingSpec,
    /// `reloadlet.io/debounce` is set.
    own_debounce: bool,
}

/// Each pod's [`PacingSpec`], parsed once per pod update; pods without pacing annotations
/// (most) cost nothing but the shared default.
pub struct PacingSpecs<K> {
    defaults: PacingDefaults,
    /// The spec of every key without pacing annotations.
    plain: PacingSpec,
    /// The default debounce is applied elsewhere (the agent's debouncer, the rollout's
    /// coalescing): a spec's debounce is the pod's own `reloadlet.io/debounce`, 0 without.
    debounce_elsewhere: bool,
    specs: HashMap<K, Result<OwnSpec, crate::core::invalid::Invalid>>,
}

impl<K: Eq + Hash + Clone> PacingSpecs<K> {
    pub fn new(defaults: PacingDefaults, debounce_elsewhere: bool) -> Self {
        let mut plain = PacingSpec::from_defaults(&defaults);
        if debounce_elsewhere {
            plain.debounce = Duration::ZERO;
        }
        Self {
            defaults,
            plain,
            debounce_elsewhere,
            specs: HashMap::new(),
        }
    }

    /// Reads `key`'s pacing annotations; `Err`: the invalid one, named with its value.
    pub fn read(
        &mut self,
        key: &K,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), crate::core::invalid::Invalid> {
        if !ANNOTATIONS.iter().any(|k| annotations.contains_key(*k)) {
            self.specs.remove(key);
            return Ok(());
        }
        let parsed = PacingSpec::parse(annotations, &self.defaults)
            .map(|mut spec| {
                let own_debounce = annotations.contains_key(DEBOUNCE);
                if self.debounce_elsewhere && !own_debounce {
                    spec.debounce = Duration::ZERO;
                }
                OwnSpec { spec, own_debounce }
            })
            .map_err(|e| crate::core::invalid::Invalid::new(e.to_string()));
        let result = parsed.as_ref().map(|_| ()).map_err(Clone::clone);
        self.specs.insert(key.clone(), parsed);
        result
    }

    /// The spec of `key` (the defaults without annotations); `Err`: the invalid annotation.
    pub fn get<Q>(&self, key: &Q) -> Result<&PacingSpec, &str>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Most pods have no pacing annotation: no lookup while none has.
        if self.specs.is_empty() {
            return Ok(&self.plain);
        }
        match self.specs.get(key) {
            None => Ok(&self.plain),
            Some(Ok(s)) => Ok(&s.spec),
            Some(Err(message)) => Err(message.as_str()),
        }
    }

    /// The spec of `key`, the defaults when its annotations are invalid (what to keep of it).
    pub fn get_or_plain<Q>(&self, key: &Q) -> &PacingSpec
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).unwrap_or(&self.plain)
    }

    /// Whether `key` sets its own `reloadlet.io/debounce`.
    pub fn own_debounce<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        !self.specs.is_empty() && matches!(self.specs.get(key), Some(Ok(s)) if s.own_debounce)
    }

    pub fn forget<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.specs.remove(key);
    }
}

/// Work held until its time.
struct Held<W> {
    wake: Instant,
    work: W,
    /// A deferral (window, interval), not a debounce or a flapping episode.
    deferred: bool,
}

/// One [`Pacer`] per target and the work held for it.
pub struct PacingBook<K, W> {
    pacers: HashMap<K, Pacer>,
    held: HashMap<K, Held<W>>,
    clock: WallClock,
}

impl<K: Eq + Hash + Clone, W> PacingBook<K, W> {
    pub fn new(clock: WallClock) -> Self {
        Self {
            pacers: HashMap::new(),
            held: HashMap::new(),
            clock,
        }
    }

    /// The wall clock (tests set the wall time the caller's clock starts from).
    pub fn set_clock(&mut self, clock: WallClock) {
        self.clock = clock;
    }

    pub fn clock(&self) -> WallClock {
        self.clock
    }

    /// Whether the change may be acted on now. `fresh`: a new change (not held work coming
    /// due); `source`: what changed, named in a flap report (asked for only off the fast
    /// path); `hold`: the work to keep when it must wait, given what was held for `key`.
    #[allow(clippy::too_many_arguments)]
    pub fn gate<Q>(
        &mut self,
        key: &Q,
        spec: &PacingSpec,
        class: ActionClass,
        fresh: bool,
        now: Instant,
        source: impl FnOnce() -> String,
        hold: impl FnOnce(Option<W>) -> W,
    ) -> Gate<W>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let wall = self.clock.at(now);
        let pacer = match self.pacers.get_mut(key) {
            Some(p) => p,
            None => self.pacers.entry(key.to_owned()).or_default(),
        };
        if fresh && pacer.act_at_once(spec, wall) {
            return Gate::Act {
                closed_episode: false,
                held: self.take_held(key),
            };
        }
        if fresh {
            pacer.changed(wall, &source());
        }
        let (until, notice, deferred) = match pacer.poll(spec, class, wall) {
            Step::Idle | Step::Act => {
                let closed_episode = pacer.acted(wall);
                pacer.trim(spec.flap, wall);
                let held = self.take_held(key);
                return Gate::Act {
                    closed_episode,
                    held,
                };
            }
            Step::Wait { at } => (at, None, false),
            Step::Defer { until, why, report } => (
                until,
                report.then_some(Notice::Deferred { until, why }),
                true,
            ),
            Step::Flapping { until, report } => (until, report.map(Notice::Flapping), false),
        };
        let wake = self.clock.instant(until, now);
        let previous = self.held.remove(key).map(|h| h.work);
        self.held.insert(
            key.to_owned(),
            Held {
                wake,
                work: hold(previous),
                deferred,
            },
        );
        Gate::Held(notice)
    }

    pub fn is_held<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        !self.held.is_empty() && self.held.contains_key(key)
    }

    /// The work held for `key`, whether it is a deferral (a window, an interval) and when it
    /// comes due; `None` when nothing is held (explain, the controller's pacing records).
    pub fn held<Q>(&self, key: &Q) -> Option<(&W, bool, Instant)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.held.is_empty() {
            return None;
        }
        self.held.get(key).map(|h| (&h.work, h.deferred, h.wake))
    }

    /// The work held for `key`, taken out (a fresh change merges it).
    pub fn take_held<Q>(&mut self, key: &Q) -> Option<W>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.held.is_empty() {
            return None;
        }
        self.held.remove(key).map(|h| h.work)
    }

    /// The held work whose time came by `now`.
    pub fn take_due(&mut self, now: Instant) -> Vec<(K, W)> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let due: Vec<K> = self
            .held
            .iter()
            .filter(|(_, h)| h.wake <= now)
            .map(|(k, _)| k.clone())
            .collect();
        due.into_iter()
            .filter_map(|k| self.held.remove(&k).map(|h| (k, h.work)))
            .collect()
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.values().map(|h| h.wake).min()
    }

    /// The target went away: its held work and history are dropped (`true`: work was held).
    pub fn forget<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.pacers.remove(key);
        self.held.remove(key).is_some()
    }

    /// Another replica leads now: what this one held is its to find again.
    pub fn clear_held(&mut self) -> Vec<W> {
        self.held.drain().map(|(_, h)| h.work).collect()
    }

    /// Deferred work (windows, intervals) and targets held as flapping: the gauges.
    pub fn counts(&self) -> (usize, usize) {
        let deferred = self.held.values().filter(|h| h.deferred).count();
        let flapping = self.pacers.values().filter(|p| p.is_flapping()).count();
        (deferred, flapping)
    }

    /// The target's pacer (explain, restart seeding).
    pub fn pacer(&self, key: &K) -> Option<&Pacer> {
        self.pacers.get(key)
    }

    /// The target's pacer, created empty when it has none.
    pub fn pacer_mut(&mut self, key: &K) -> &mut Pacer {
        self.pacers.entry(key.clone()).or_default()
    }

    /// The pacers worth keeping across a restart (pending, flapping, within a window), each
    /// trimmed with its target's spec.
    pub fn snapshot<'a>(
        &self,
        now: Instant,
        spec_of: impl Fn(&K) -> &'a PacingSpec,
    ) -> BTreeMap<K, Pacer>
    where
        K: Ord,
    {
        let wall = self.clock.at(now);
        self.pacers
            .iter()
            .filter_map(|(key, pacer)| {
                let spec = spec_of(key);
                let mut pacer = pacer.clone();
                pacer.trim(spec.flap, wall);
                pacer.matters(spec, wall).then(|| (key.clone(), pacer))
            })
            .collect()
    }

    /// The pacers saved by the last run.
    pub fn restore(&mut self, saved: impl IntoIterator<Item = (K, Pacer)>) {
        self.pacers.extend(saved);
    }
}

#[cfg(test)]
mod tests;
