//! A workload's rollout pacing as the controller keeps it on the workload itself, in the
//! annotation `reloadlet.io/rollout-pacing` of its own metadata (never the pod template: a
//! template change is a rollout): the times of its recent rollouts within the flap window, an
//! open flapping episode, a deferral and why (docs/pacing.md, "Where the state lives"). Pure:
//! built from a [`Pacer`] when the controller writes (inside the rollout's own patch, or one
//! metadata-only patch when a hold begins with its Event), read back into a fresh [`Pacer`]
//! by a new leader, and described by `reloadlet explain`.
//!
//! The value is compact JSON, e.g.
//! `{"rollouts":["2026-11-26T12:00:00Z"],"deferred":{"until":"2026-11-26T12:10:00Z","why":"minimum interval","since":"2026-11-26T12:00:04Z","source":"configmap cfg"}}`.
//! It is ours: an unknown or garbled value is ignored (the caller logs it at debug level).
//!
//! The same record, without rollouts, is what the controller keeps on an env consumer pod
//! whose eviction it holds, in the pod's annotation `reloadlet.io/env-pacing` (its deferral,
//! or its owner's flapping episode): written when the hold begins, removed when it ends (an
//! eviction replaces the pod, which takes the record with it). Only `explain` reads it.

use super::book::Notice;
use super::pacer::Pacer;
use super::spec::FlapThreshold;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The workload annotation that holds the record.
pub const ROLLOUT_PACING: &str = "reloadlet.io/rollout-pacing";

/// The env consumer pod annotation that holds what the controller holds for it.
pub const ENV_PACING: &str = "reloadlet.io/env-pacing";

/// At most this many rollout times are kept (the flap breaker needs `count` of them: a
/// threshold above this is counted from the last [`MAX_ROLLOUTS`] after a restart).
pub const MAX_ROLLOUTS: usize = 32;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacingRecord {
    /// The rollouts within the flap window, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollouts: Vec<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flapping: Option<Episode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<Deferred>,
}

/// An open flapping episode: when it began, the source that kept changing and how often.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Episode {
    pub since: Timestamp,
    pub source: String,
    pub changes: u32,
}

/// A rollout deferred until `until` (`why`: a maintenance window or the minimum interval),
/// for a change of `source` first seen at `since`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deferred {
    pub until: Timestamp,
    pub why: String,
    pub since: Timestamp,
    pub source: String,
}

/// The last `count` (at most [`MAX_ROLLOUTS`]) actions of `pacer` (its history is already
/// trimmed to the flap window); none with the breaker off.
fn history(pacer: &Pacer, flap: Option<FlapThreshold>) -> Vec<Timestamp> {
    let keep = flap.map_or(0, |f| usize::try_from(f.count).unwrap_or(usize::MAX));
    let keep = keep.min(MAX_ROLLOUTS);
    let skip = pacer.recent().len().saturating_sub(keep);
    pacer.recent().skip(skip).collect()
}

impl PacingRecord {
    /// After a rollout (the pacer has recorded it): the history alone — an episode closes
    /// with it, nothing is deferred.
    pub fn after_action(pacer: &Pacer, flap: Option<FlapThreshold>) -> Self {
        Self {
            rollouts: history(pacer, flap),
            ..Self::default()
        }
    }

    /// When a hold begins with `notice`: the history, the episode just opened (or the one
    /// open before, from `previous`) and the deferral just announced.
    pub fn on_hold(
        previous: Option<&Self>,
        pacer: &Pacer,
        flap: Option<FlapThreshold>,
        notice: &Notice,
    ) -> Self {
        let mut record = Self {
            rollouts: history(pacer, flap),
            flapping: previous
                .and_then(|p| p.flapping.clone())
                .filter(|_| pacer.is_flapping()),
            deferred: None,
        };
        match notice {
            Notice::Flapping(report) => {
                record.flapping = pacer.flapping_since().map(|since| Episode {
                    since,
                    source: report.source.clone(),
                    changes: report.changes,
                });
            }
            Notice::Deferred { until, why } => {
                record.deferred = Some(Deferred {
                    until: *until,
                    why: why.as_str().to_owned(),
                    since: pacer.pending_since().unwrap_or(*until),
                    source: pacer.pending_source().unwrap_or_default().to_owned(),
                });
            }
        }
        record
    }

    /// The annotation's value (compact JSON).
    pub fn to_value(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the annotation's value.
    pub fn parse(value: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(value)
    }

    /// Carries the record into `pacer` at `now` (a new leader's first look at the workload):
    /// the rollouts, and the template's last restart when it is not one of them, count for
    /// the minimum interval and the flap breaker; an open episode
    /// stays open unless the workload was restarted after it began (`restarted_at`, the
    /// template's `kubectl.kubernetes.io/restartedAt`: e.g. `kubectl rollout restart`); a
    /// deferral not yet due keeps its time and is not announced again.
    pub fn restore(&self, pacer: &mut Pacer, restarted_at: Option<Timestamp>, now: Timestamp) {
        let history: Vec<Timestamp> = self
            .rollouts
            .iter()
            .rev()
            .take(MAX_ROLLOUTS)
            .rev()
            .copied()
            .collect();
        pacer.restore_history(&history);
        // The template's restart is one of ours when a recorded rollout is within a couple of
        // seconds of it (the record's time is the pacer's, restartedAt is written just
        // after); else someone else restarted the workload (`kubectl rollout restart`).
        if let Some(r) = restarted_at {
            let ours = self
                .rollouts
                .iter()
                .any(|t| t.duration_since(r).abs() <= jiff::SignedDuration::from_secs(2));
            if !ours {
                pacer.seed(r);
            }
        }
        if let Some(e) = &self.flapping {
            if restarted_at.is_none_or(|r| r <= e.since) {
                pacer.reopen_episode(e.since);
            }
        }
        if let Some(d) = self.deferred.as_ref().filter(|d| now < d.until) {
            pacer.resume_deferral(d.until, d.since, &d.source);
        }
    }

    /// `explain`'s lines: the last rollouts and what holds the workload.
    pub fn describe(&self, now: Timestamp) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.rollouts.is_empty() {
            let shown: Vec<String> = self
                .rollouts
                .iter()
                .rev()
                .take(5)
                .map(ToString::to_string)
                .collect();
            let more = self.rollouts.len().saturating_sub(shown.len());
            lines.push(format!(
                "last rollouts (newest first): {}{}",
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} earlier within the flap window")
                } else {
                    String::new()
                }
            ));
        }
        if let Some(e) = &self.flapping {
            lines.push(format!(
                "held: flapping since {} ({} changed {} times)",
                e.since, e.source, e.changes
            ));
        }
        match &self.deferred {
            Some(d) if now < d.until => {
                lines.push(format!("held: deferred until {} ({})", d.until, d.why));
            }
            _ => {}
        }
        lines
    }
}

#[cfg(test)]
mod tests;
