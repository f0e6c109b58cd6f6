//! The agent's side of pacing (docs/pacing.md): each pod's [`PacingSpec`] read once per pod
//! update, one [`Pacer`] per pod that was acted on, and the changes held until their time (a
//! debounce of the pod's own, a maintenance window, a minimum interval, a flapping episode).
//!
//! A pod without pacing annotations pays one map lookup per action: the flap breaker's
//! history ([`Pacer::act_at_once`]). Its debounce stays the debouncer's (`--debounce`); a pod's
//! `reloadlet.io/debounce` replaces it by the pacer's "quiet for that long" rule.

use crate::core::debounce::PendingChange;
use crate::core::model::PodInfo;
use crate::core::pacing::spec::{ANNOTATIONS, DEBOUNCE};
pub use crate::core::pacing::WallClock;
use crate::core::pacing::{
    ActionClass, Deferral, FlapReport, Pacer, PacingDefaults, PacingSpec, Step,
};
use crate::serve::metrics::PacingMetrics;
use jiff::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// What pacing says of a change that is due.
#[derive(Debug)]
pub enum Paced {
    /// Act now (the action is recorded).
    Act,
    /// Held until its time; `notice`: what to tell (an Event, once).
    Held(Option<Notice>),
    /// The pod's pacing annotations are invalid: no action until they are fixed.
    Refused(String),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Notice {
    Deferred { until: Timestamp, why: Deferral },
    Flapping(FlapReport),
}

/// A pod's pacing, as parsed from its annotations.
#[derive(Debug)]
struct PodSpec {
    /// The pacer's view: its debounce is the pod's own `reloadlet.io/debounce`, 0 without.
    spec: PacingSpec,
    /// The pod sets `reloadlet.io/debounce`: the debouncer does not wait for it.
    own_debounce: bool,
}

struct Held {
    wake: Instant,
    change: PendingChange,
    deferred: bool,
}

pub struct PodPacing {
    /// Every pod without pacing annotations: the flags, the debounce left to the debouncer.
    plain: PacingSpec,
    defaults: PacingDefaults,
    /// Pods with pacing annotations (`Err`: the message of the bad one).
    specs: HashMap<String, Result<PodSpec, String>>,
    pacers: HashMap<String, Pacer>,
    held: HashMap<String, Held>,
    clock: WallClock,
    metrics: PacingMetrics,
}

impl PodPacing {
    pub fn new(defaults: PacingDefaults, clock: WallClock, metrics: PacingMetrics) -> Self {
        let mut plain = PacingSpec::from_defaults(&defaults);
        plain.debounce = Duration::ZERO;
        Self {
            plain,
            defaults,
            specs: HashMap::new(),
            pacers: HashMap::new(),
            held: HashMap::new(),
            clock,
            metrics,
        }
    }

    /// Tests set the wall time the agent's clock starts from.
    #[cfg(test)]
    pub fn set_clock(&mut self, clock: WallClock) {
        self.clock = clock;
    }

    /// Reads the pod's pacing annotations (once per pod update). `Err`: the invalid one,
    /// named with its value.
    pub fn on_pod(&mut self, pod: &PodInfo) -> Result<(), String> {
        if !ANNOTATIONS.iter().any(|k| pod.annotations.contains_key(*k)) {
            self.specs.remove(&pod.uid);
            return Ok(());
        }
        let parsed = PacingSpec::parse(&pod.annotations, &self.defaults)
            .map(|mut spec| {
                let own_debounce = pod.annotations.contains_key(DEBOUNCE);
                if !own_debounce {
                    spec.debounce = Duration::ZERO;
                }
                PodSpec { spec, own_debounce }
            })
            .map_err(|e| e.to_string());
        let result = parsed.as_ref().map(|_| ()).map_err(Clone::clone);
        self.specs.insert(pod.uid.clone(), parsed);
        result
    }

    /// The debounce window of the pod's swaps: `Some(0)` when the pod sets its own (the
    /// pacer waits for quiet), `None` for `--debounce`.
    pub fn debounce_window(&self, pod_uid: &str) -> Option<Duration> {
        if self.specs.is_empty() {
            return None;
        }
        match self.specs.get(pod_uid) {
            Some(Ok(s)) if s.own_debounce => Some(Duration::ZERO),
            _ => None,
        }
    }

    /// Whether the pod has a change held.
    pub fn is_held(&self, pod_uid: &str) -> bool {
        !self.held.is_empty() && self.held.contains_key(pod_uid)
    }

    /// A fresh change of a pod with a change held: one change, acted on once.
    pub fn merge_held(&mut self, pod_uid: &str, change: &mut PendingChange) {
        if self.held.is_empty() {
            return;
        }
        if let Some(held) = self.held.remove(pod_uid) {
            change.volumes.extend(held.change.volumes);
            change.first_seen = change.first_seen.min(held.change.first_seen);
            self.update_gauges();
        }
    }

    /// Whether the change may be acted on now (`fresh`: new since the last look, not one held
    /// coming due; `source`: what changed, named in a flap report — only asked for when the
    /// fast path does not take the action).
    pub fn gate(
        &mut self,
        pod_uid: &str,
        change: &PendingChange,
        class: ActionClass,
        fresh: bool,
        now: Instant,
        source: impl FnOnce() -> String,
    ) -> Paced {
        // Most pods have no pacing annotation: no lookup while none has.
        let spec = match (!self.specs.is_empty())
            .then(|| self.specs.get(pod_uid))
            .flatten()
        {
            None => &self.plain,
            Some(Ok(s)) => &s.spec,
            Some(Err(message)) => return Paced::Refused(message.clone()),
        };
        let wall = self.clock.at(now);
        let pacer = match self.pacers.get_mut(pod_uid) {
            Some(p) => p,
            None => self.pacers.entry(pod_uid.to_owned()).or_default(),
        };
        if fresh && pacer.act_at_once(spec, wall) {
            return Paced::Act;
        }
        if fresh {
            pacer.changed(wall, &source());
        }
        let (until, notice, deferred) = match pacer.poll(spec, class, wall) {
            Step::Idle | Step::Act => {
                if pacer.acted(wall) {
                    tracing::info!(
                        pod_uid,
                        "the flapping sources were quiet; acting once and closing the episode"
                    );
                }
                pacer.trim(spec.flap, wall);
                self.update_gauges();
                return Paced::Act;
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
        self.held.insert(
            pod_uid.to_owned(),
            Held {
                wake,
                change: change.clone(),
                deferred,
            },
        );
        match &notice {
            Some(Notice::Deferred { .. }) => self.metrics.deferrals.inc(),
            Some(Notice::Flapping(_)) => self.metrics.flap_episodes.inc(),
            None => 0,
        };
        self.update_gauges();
        Paced::Held(notice)
    }

    /// The held changes whose time came by `now`.
    pub fn take_due(&mut self, now: Instant) -> Vec<(String, PendingChange)> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let due: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.wake <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        let out = due
            .into_iter()
            .filter_map(|uid| self.held.remove(&uid).map(|h| (uid, h.change)))
            .collect();
        self.update_gauges();
        out
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.values().map(|h| h.wake).min()
    }

    /// The pod left: what was held for it, and its history, are dropped.
    pub fn forget(&mut self, pod_uid: &str) -> bool {
        self.specs.remove(pod_uid);
        self.pacers.remove(pod_uid);
        let dropped = self.held.remove(pod_uid).is_some();
        if dropped {
            self.update_gauges();
        }
        dropped
    }

    /// The pacers worth keeping across a restart (pending, flapping, within a window).
    pub fn snapshot(&self, now: Instant) -> BTreeMap<String, Pacer> {
        let wall = self.clock.at(now);
        self.pacers
            .iter()
            .filter_map(|(uid, pacer)| {
                let spec = match self.specs.get(uid) {
                    Some(Ok(s)) => &s.spec,
                    _ => &self.plain,
                };
                let mut pacer = pacer.clone();
                pacer.trim(spec.flap, wall);
                pacer.matters(spec, wall).then(|| (uid.clone(), pacer))
            })
            .collect()
    }

    /// The pacers saved by the last run.
    pub fn restore(&mut self, saved: BTreeMap<String, Pacer>) {
        self.pacers.extend(saved);
        self.update_gauges();
    }

    fn update_gauges(&self) {
        let deferred = self.held.values().filter(|h| h.deferred).count();
        let flapping = self.pacers.values().filter(|p| p.is_flapping()).count();
        self.metrics.deferred.set(deferred as i64);
        self.metrics.held.set(flapping as i64);
    }
}

/// The pacing class of an action: evictions replace the pod, signals and HTTP reloads do not.
pub fn class_of(kind: crate::core::outcome::ActionKind) -> ActionClass {
    match kind {
        crate::core::outcome::ActionKind::Evict => ActionClass::Disruptive,
        _ => ActionClass::InPlace,
    }
}
