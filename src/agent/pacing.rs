//! The agent's side of pacing (docs/pacing.md): each pod's [`PacingSpec`] read once per pod
//! update, one [`Pacer`] per pod that was acted on, and the changes held until their time (a
//! debounce of the pod's own, a maintenance window, a minimum interval, a flapping episode).
//!
//! A pod without pacing annotations pays one map lookup per action: the flap breaker's
//! history ([`Pacer::act_at_once`]). Its debounce stays the debouncer's (`--debounce`); a pod's
//! `reloadlet.io/debounce` replaces it by the pacer's "quiet for that long" rule.

use crate::core::debounce::PendingChange;
use crate::core::model::PodInfo;
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pacing::{ActionClass, Gate, Pacer, PacingBook, PacingDefaults, PacingSpecs};
pub use crate::core::pacing::{Notice, WallClock};
use crate::execute::report::Line;
use crate::serve::metrics::PacingMetrics;
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

/// Each pod's pacing: the one bookkeeping of `core::pacing::book`, keyed by pod UID, its
/// debounce left to the debouncer (`--debounce`) unless the pod sets its own.
pub struct PodPacing {
    specs: PacingSpecs<String>,
    book: PacingBook<String, PendingChange>,
    metrics: PacingMetrics,
    /// Changes refused for an invalid pacing annotation, by pod: acted on once it is fixed
    /// (not recorded as handled meanwhile, so a restart finds them again too).
    refused: HashMap<String, PendingChange>,
    /// Refused changes of pods whose annotations were just fixed: due at once, as new
    /// changes ([`Self::take_fixed`]).
    fixed: Vec<(String, PendingChange)>,
}

impl PodPacing {
    pub fn new(defaults: PacingDefaults, clock: WallClock, metrics: PacingMetrics) -> Self {
        Self {
            specs: PacingSpecs::new(defaults, true),
            book: PacingBook::new(clock),
            metrics,
            refused: HashMap::new(),
            fixed: Vec::new(),
        }
    }

    /// Tests set the wall time the agent's clock starts from.
    #[cfg(test)]
    pub fn set_clock(&mut self, clock: WallClock) {
        self.book.set_clock(clock);
    }

    /// Reads the pod's pacing annotations (once per pod update). `Err`: the invalid one,
    /// named with its value. Valid again: a change refused meanwhile is due at once.
    pub fn on_pod(&mut self, pod: &PodInfo) -> Result<(), crate::core::invalid::Invalid> {
        let read = self.specs.read(&pod.uid, &pod.annotations);
        if read.is_ok() && !self.refused.is_empty() {
            if let Some(change) = self.refused.remove(&pod.uid) {
                tracing::info!(pod = %pod.full_name(), volumes = ?change.volumes, "pacing annotations fixed; acting on the change they refused");
                self.fixed.push((pod.uid.clone(), change));
            }
        }
        read
    }

    /// Changes refused for an invalid pacing annotation that is fixed now (to act on as new
    /// changes: the pacer has not seen them).
    pub fn take_fixed(&mut self) -> Vec<(String, PendingChange)> {
        std::mem::take(&mut self.fixed)
    }

    /// The debounce window of the pod's swaps: `Some(0)` when the pod sets its own (the
    /// pacer waits for quiet), `None` for `--debounce`.
    pub fn debounce_window(&self, pod_uid: &str) -> Option<Duration> {
        // `own_debounce` looks nothing up while no pod has pacing annotations.
        self.specs.own_debounce(pod_uid).then_some(Duration::ZERO)
    }

    /// Whether the pod has a change held (paced, or refused until its annotation is fixed).
    pub fn is_held(&self, pod_uid: &str) -> bool {
        self.book.is_held(pod_uid)
            || (!self.refused.is_empty() && self.refused.contains_key(pod_uid))
            || self.fixed.iter().any(|(uid, _)| uid == pod_uid)
    }

    /// A fresh change of a pod with a change held: one change, acted on once.
    pub fn merge_held(&mut self, pod_uid: &str, change: &mut PendingChange) {
        if let Some(held) = self.book.take_held(pod_uid) {
            change.volumes.extend(held.volumes);
            change.first_seen = change.first_seen.min(held.first_seen);
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
        let spec = match self.specs.get(pod_uid) {
            Ok(spec) => spec,
            Err(message) => {
                // Kept (merged with one refused before) for when the annotation is fixed.
                let kept = self
                    .refused
                    .entry(pod_uid.to_owned())
                    .or_insert_with(|| change.clone());
                kept.volumes.extend(change.volumes.iter().cloned());
                kept.first_seen = kept.first_seen.min(change.first_seen);
                return Paced::Refused(message.to_owned());
            }
        };
        let gate = self
            .book
            .gate(pod_uid, spec, class, fresh, now, source, |_| change.clone());
        match gate {
            // Nothing is held here: a fresh change took the held one first (`merge_held`).
            Gate::Act { closed_episode, .. } => {
                if closed_episode {
                    tracing::info!(
                        pod_uid,
                        "the flapping sources were quiet; acting once and closing the episode"
                    );
                    self.update_gauges();
                }
                Paced::Act
            }
            Gate::Held(notice) => {
                match &notice {
                    Some(Notice::Deferred { .. }) => self.metrics.deferrals.inc(),
                    Some(Notice::Flapping(_)) => self.metrics.flap_episodes.inc(),
                    None => 0,
                };
                self.update_gauges();
                Paced::Held(notice)
            }
        }
    }

    /// The held changes whose time came by `now`.
    pub fn take_due(&mut self, now: Instant) -> Vec<(String, PendingChange)> {
        let due = self.book.take_due(now);
        if !due.is_empty() {
            self.update_gauges();
        }
        due
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        // A fixed change is due at once (its first swap is in the past).
        let fixed = self.fixed.iter().map(|(_, c)| c.first_seen).min();
        match (self.book.next_deadline(), fixed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The pod left: what was held for it, and its history, are dropped.
    pub fn forget(&mut self, pod_uid: &str) -> bool {
        self.specs.forget(pod_uid);
        let refused = self.refused.remove(pod_uid).is_some();
        self.fixed.retain(|(uid, _)| uid != pod_uid);
        let dropped = self.book.forget(pod_uid) | refused;
        if dropped {
            self.update_gauges();
        }
        dropped
    }

    /// The pacers worth keeping across a restart (pending, flapping, within a window).
    pub fn snapshot(&self, now: Instant) -> BTreeMap<String, Pacer> {
        self.book.snapshot(now, |uid| self.specs.get_or_plain(uid))
    }

    /// The pacers saved by the last run.
    pub fn restore(&mut self, saved: BTreeMap<String, Pacer>) {
        self.book.restore(saved);
        self.update_gauges();
    }

    fn update_gauges(&self) {
        let (deferred, flapping) = self.book.counts();
        self.metrics.deferred.set(deferred as i64);
        self.metrics.held.set(flapping as i64);
    }
}

/// The pacing class of an action: evictions replace the pod, signals and HTTP reloads do not.
pub fn class_of(kind: ActionKind) -> ActionClass {
    match kind {
        ActionKind::Evict | ActionKind::Restart => ActionClass::Disruptive,
        _ => ActionClass::InPlace,
    }
}

/// The Event (and notification) of a deferral or a flapping episode, once each.
pub(super) fn report_notice(
    pod: &PodInfo,
    kind: ActionKind,
    notice: Option<Notice>,
    volumes: &[&str],
    sources: &[crate::core::model::SourceRef],
    seen: &crate::execute::applied::Seen,
    exec: &crate::execute::Executor,
) {
    let (outcome, until, note) = match notice {
        None => return,
        Some(Notice::Deferred { until, why }) => (
            Outcome::Deferred,
            Some(until),
            format!(
                "{} deferred until {until} ({}); it runs once then, on the latest content",
                kind.as_str(),
                why.as_str()
            ),
        ),
        Some(Notice::Flapping(r)) => (
            Outcome::Flapping,
            None,
            format!(
                "{} changed {} times within {}: holding the {} until it has been quiet for {}",
                r.source,
                r.changes,
                humantime::format_duration(r.within),
                kind.as_str(),
                humantime::format_duration(r.within)
            ),
        ),
    };
    let line = Line::note().volumes(volumes);
    exec.report_paced(&pod.into(), kind, outcome, note, sources, seen, until, line);
}
