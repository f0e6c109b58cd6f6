//! One target's pacing state (a pod, or a workload for `rollout`): pure, driven by the
//! caller's clock, serialisable so deferred work survives a restart.
//!
//! The caller reports each change ([`Pacer::changed`]), asks what to do now
//! ([`Pacer::poll`]), and reports each action it took ([`Pacer::acted`]). The rules, in the
//! order they are checked (docs/pacing.md):
//!
//! 1. **Flapping**: an open episode holds the target until its sources have been quiet for the
//!    flap window; then it acts once (on the latest content) and the episode closes.
//! 2. **Debounce**: act only once the sources have been quiet for `debounce`.
//! 3. **Maintenance window**: outside it, a held action class waits for the next opening
//!    (or `--max-defer` after the first change, whichever comes first).
//! 4. **Minimum interval**: no two actions closer than `min-interval`.
//! 5. **Flap breaker**: an action that would be the `count + 1`-th within the flap window opens
//!    an episode instead (reported once).

use super::spec::{FlapThreshold, PacingSpec, WindowActions};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// What kind of action is paced: windows hold disruptive ones by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionClass {
    /// A signal or an HTTP reload: the pod keeps running.
    InPlace,
    /// An eviction or a rollout: pods are replaced.
    Disruptive,
}

/// Why an action waits for a time the user chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferral {
    Window,
    MinInterval,
}

impl Deferral {
    pub fn as_str(self) -> &'static str {
        match self {
            Deferral::Window => "maintenance window",
            Deferral::MinInterval => "minimum interval",
        }
    }
}

/// A flapping episode as first reported: the source that keeps changing and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlapReport {
    pub source: String,
    /// Actions already taken within `within`, plus the change now held.
    pub changes: u32,
    pub within: Duration,
}

/// What the caller should do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing is pending.
    Idle,
    /// Debouncing: ask again at `at`.
    Wait { at: Timestamp },
    /// Act on the latest content now, then call [`Pacer::acted`].
    Act,
    /// Deferred until `until`; `report`: a new deferral (a Normal `ReloadDeferred` Event).
    Defer {
        until: Timestamp,
        why: Deferral,
        report: bool,
    },
    /// Held as flapping until the sources are quiet (`until` moves with each change);
    /// `report`: the episode just opened (one Warning `ReloadFlapping`).
    Flapping {
        until: Timestamp,
        report: Option<FlapReport>,
    },
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pacer {
    pending: Option<Pending>,
    last_action: Option<Timestamp>,
    /// Actions within the flap window, oldest first.
    recent: VecDeque<Timestamp>,
    /// An open flapping episode: when it opened.
    flapping_since: Option<Timestamp>,
    /// The deferral last reported, so each is reported once.
    reported_until: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Pending {
    since: Timestamp,
    last_change: Timestamp,
    source: String,
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

impl Pacer {
    /// A change of `source` (e.g. `configmap/app`) seen at `now`.
    pub fn changed(&mut self, now: Timestamp, source: &str) {
        match &mut self.pending {
            Some(p) => {
                p.last_change = now;
                if p.source != source {
                    p.source = source.to_owned();
                }
            }
            None => {
                self.pending = Some(Pending {
                    since: now,
                    last_change: now,
                    source: source.to_owned(),
                })
            }
        }
    }

    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Held as flapping (for the gauge of held targets and `explain`).
    pub fn is_flapping(&self) -> bool {
        self.flapping_since.is_some()
    }

    /// When the pending change was first seen.
    pub fn pending_since(&self) -> Option<Timestamp> {
        self.pending.as_ref().map(|p| p.since)
    }

    /// What the pending change is of (the source last seen changing).
    pub fn pending_source(&self) -> Option<&str> {
        self.pending.as_ref().map(|p| p.source.as_str())
    }

    /// What to do at `now` for an action of `class`.
    pub fn poll(&mut self, spec: &PacingSpec, class: ActionClass, now: Timestamp) -> Step {
        let Some(pending) = &self.pending else {
            return Step::Idle;
        };
        let (since, last_change) = (pending.since, pending.last_change);
        if let (Some(_), Some(flap)) = (self.flapping_since, spec.flap) {
            let quiet = add(last_change, flap.window);
            if now < quiet {
                return Step::Flapping {
                    until: quiet,
                    report: None,
                };
            }
        }
        let due = add(last_change, spec.debounce);
        if now < due {
            return Step::Wait { at: due };
        }
        if let Some((window, actions)) = &spec.window {
            let holds = class == ActionClass::Disruptive || *actions == WindowActions::All;
            if holds && !window.is_open(now) {
                let forced = spec.max_defer.map(|m| add(since, m));
                if forced.is_none_or(|f| now < f) {
                    let next = window.next_open(now).unwrap_or(Timestamp::MAX);
                    let until = forced.map_or(next, |f| f.min(next));
                    return self.defer(until, Deferral::Window);
                }
            }
        }
        if let Some(last) = self.last_action {
            let until = add(last, spec.min_interval);
            if now < until {
                return self.defer(until, Deferral::MinInterval);
            }
        }
        if let (None, Some(flap)) = (self.flapping_since, spec.flap) {
            if let Some(report) = self.would_flap(flap, now) {
                self.flapping_since = Some(now);
                return Step::Flapping {
                    until: add(last_change, flap.window),
                    report: Some(report),
                };
            }
        }
        Step::Act
    }

    /// The action was taken at `now`: the pending change is done; an open flapping episode
    /// closes (`true`).
    pub fn acted(&mut self, now: Timestamp) -> bool {
        self.pending = None;
        self.last_action = Some(now);
        self.recent.push_back(now);
        self.reported_until = None;
        self.flapping_since.take().is_some()
    }

    /// The fast path of a target with nothing to pace but the flap breaker (no debounce of
    /// its own, no minimum interval, no window) and nothing pending or held: when the breaker
    /// would not trip, records the action at `now` and returns `true` — O(1), no allocation
    /// but the history's amortised push. `false`: take the full path ([`Self::changed`],
    /// [`Self::poll`]), which names the source in the flap report.
    pub fn act_at_once(&mut self, spec: &PacingSpec, now: Timestamp) -> bool {
        let plain = spec.debounce.is_zero() && spec.min_interval.is_zero() && spec.window.is_none();
        if !plain || self.pending.is_some() || self.flapping_since.is_some() {
            return false;
        }
        self.trim(spec.flap, now);
        if spec
            .flap
            .is_some_and(|f| u32::try_from(self.recent.len()).unwrap_or(u32::MAX) >= f.count)
        {
            return false;
        }
        self.acted(now);
        self.trim(spec.flap, now);
        true
    }

    /// Keeps the history bounded: drops the actions older than the flap window (all of them
    /// when the breaker is off). Call after [`Self::acted`].
    pub fn trim(&mut self, flap: Option<FlapThreshold>, now: Timestamp) {
        match flap {
            None => self.recent.clear(),
            Some(flap) => {
                let cutoff = SignedDuration::try_from(flap.window)
                    .ok()
                    .and_then(|w| now.checked_sub(w).ok())
                    .unwrap_or(Timestamp::MIN);
                self.forget_before(cutoff);
            }
        }
    }

    /// An action taken at `at` that this pacer did not see (read back from the API after a
    /// restart or a leader change): it counts for the minimum interval and the flap breaker.
    /// Nothing changes when a later action is known already.
    pub fn seed(&mut self, at: Timestamp) {
        if self.last_action.is_some_and(|last| last >= at) {
            return;
        }
        self.last_action = Some(at);
        self.recent.push_back(at);
    }

    /// Actions read back from the API after a restart or a leader change (the target's own
    /// record of its recent actions): merged into the history, oldest first, the latest
    /// becoming the last action when it is later than the one known.
    pub fn restore_history(&mut self, times: &[Timestamp]) {
        let mut all: Vec<Timestamp> = self.recent.iter().chain(times).copied().collect();
        all.sort_unstable();
        all.dedup();
        if let Some(latest) = all.last().copied() {
            if self.last_action.is_none_or(|last| last < latest) {
                self.last_action = Some(latest);
            }
        }
        self.recent = all.into();
    }

    /// A flapping episode open when the last run ended: it stays open (its report was made
    /// then; none is made again) until the sources have been quiet for the flap window.
    pub fn reopen_episode(&mut self, since: Timestamp) {
        self.flapping_since.get_or_insert(since);
    }

    /// A deferral to `until` announced by the last run for a change first seen at `since`:
    /// the change is pending since then (a `--max-defer` counts from it), and the same
    /// deferral is not announced again.
    pub fn resume_deferral(&mut self, until: Timestamp, since: Timestamp, source: &str) {
        if self.pending.is_none() {
            self.pending = Some(Pending {
                since,
                last_change: since,
                source: source.to_owned(),
            });
        }
        self.reported_until = Some(until);
    }

    /// The actions within the flap window, oldest first (what is recorded for a restart).
    pub fn recent(&self) -> impl DoubleEndedIterator<Item = Timestamp> + ExactSizeIterator + '_ {
        self.recent.iter().copied()
    }

    /// When the open flapping episode began.
    pub fn flapping_since(&self) -> Option<Timestamp> {
        self.flapping_since
    }

    /// When the target was last acted on.
    pub fn last_action(&self) -> Option<Timestamp> {
        self.last_action
    }

    /// Whether anything here still matters at `now` for `spec` (a pending change, an open
    /// episode, actions within the flap window, a minimum interval still running): what
    /// is worth persisting across a restart.
    pub fn matters(&self, spec: &PacingSpec, now: Timestamp) -> bool {
        self.pending.is_some()
            || self.flapping_since.is_some()
            || !self.recent.is_empty()
            || self
                .last_action
                .is_some_and(|last| now < add(last, spec.min_interval))
    }

    /// Drops what is older than any window could need (call after [`Self::acted`] with the
    /// target's threshold, so the history stays bounded).
    pub fn forget_before(&mut self, cutoff: Timestamp) {
        while self.recent.front().is_some_and(|t| *t <= cutoff) {
            self.recent.pop_front();
        }
    }

    fn would_flap(&mut self, flap: FlapThreshold, now: Timestamp) -> Option<FlapReport> {
        let cutoff = SignedDuration::try_from(flap.window)
            .ok()
            .and_then(|w| now.checked_sub(w).ok())
            .unwrap_or(Timestamp::MIN);
        self.forget_before(cutoff);
        let taken = u32::try_from(self.recent.len()).unwrap_or(u32::MAX);
        (taken >= flap.count).then(|| FlapReport {
            source: self
                .pending
                .as_ref()
                .map(|p| p.source.clone())
                .unwrap_or_default(),
            changes: taken.saturating_add(1),
            within: flap.window,
        })
    }

    fn defer(&mut self, until: Timestamp, why: Deferral) -> Step {
        let report = self.reported_until != Some(until);
        self.reported_until = Some(until);
        Step::Defer { until, why, report }
    }
}

#[cfg(test)]
mod tests;
