//! The one place an outcome becomes a metric, a Kubernetes Event and a notification (and
//! the one place `--dry-run` silences Events and notifications).

use crate::core::model::SourceRef;
use crate::core::outcome::{ActionKind, Outcome};
use crate::outbound::notify::{self, Notification, Notifier};
use crate::ports::{EventSink, PodEvent, PodRef};
use crate::serve::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct Reporter {
    events: Arc<dyn EventSink>,
    notifier: Notifier,
    metrics: Metrics,
    dry_run: bool,
    /// The node that acts (named in notifications).
    node: String,
}

impl Reporter {
    pub fn new(
        events: Arc<dyn EventSink>,
        notifier: Notifier,
        metrics: Metrics,
        dry_run: bool,
        node: String,
    ) -> Self {
        Self {
            events,
            notifier,
            metrics,
            dry_run,
            node,
        }
    }

    /// `--dry-run`: actions are only looked at (signals) or asked with `dryRun=All`
    /// (evictions), and no Event is published.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Counts `outcome` and publishes its Event and notification. `sources`: the
    /// ConfigMaps/Secrets whose change led to it.
    pub fn record(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
    ) {
        self.count(action, outcome);
        self.publish(pod, action, outcome, note, sources);
    }

    /// Counts `outcome` in `reloadlet_actions_total` (when it is counted at all).
    pub fn count(&self, action: ActionKind, outcome: Outcome) {
        if outcome.counted() {
            self.metrics.action(action, outcome);
        }
    }

    /// Publishes the Event and notification of `outcome` (if it has them), unless
    /// `--dry-run`.
    pub fn publish(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
    ) {
        self.emit(pod, action, outcome, note, sources, Duration::ZERO);
    }

    /// [`Self::publish`] of `EvictionBlocked`, refused for `blocked_for` so far (a
    /// notification under `--notify-on failure` only once that is long).
    pub fn blocked(
        &self,
        pod: &PodRef,
        note: String,
        sources: &[SourceRef],
        blocked_for: Duration,
    ) {
        let outcome = Outcome::EvictionBlocked;
        self.emit(pod, ActionKind::Evict, outcome, note, sources, blocked_for);
    }

    fn emit(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
        blocked_for: Duration,
    ) {
        if self.dry_run {
            return;
        }
        if let Some(n) = notification(action, outcome, blocked_for) {
            let (action, outcome) = n;
            self.notifier.notify(&Notification {
                node: self.node.clone(),
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                action,
                sources: sources.to_vec(),
                outcome,
                message: note.clone(),
            });
        }
        if let Some(kind) = outcome.event() {
            self.events.publish(
                pod,
                PodEvent {
                    warning: kind.warning,
                    reason: kind.reason,
                    action: action.event_action(),
                    note,
                },
            );
            // Events are dropped only here (the queue is full): count them now.
            let dropped = self.events.dropped();
            let counted = self.metrics.events_dropped.get();
            self.metrics
                .events_dropped
                .inc_by(dropped.saturating_sub(counted));
        }
    }

    /// From the first swap to the signal sent / eviction accepted.
    pub fn latency(&self, action: ActionKind, latency: Duration) {
        self.metrics.observe_latency(action, latency.as_secs_f64());
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// The notification of an outcome, if it has one (derived like its Event).
fn notification(
    action: ActionKind,
    outcome: Outcome,
    blocked_for: Duration,
) -> Option<(notify::Action, notify::Outcome)> {
    match outcome {
        Outcome::EnvNotReloaded => {
            return Some((notify::Action::Signal, notify::Outcome::EnvNotReloaded))
        }
        Outcome::NudgeFailed => return Some((notify::Action::Nudge, notify::Outcome::NudgeFailed)),
        _ => {}
    }
    let action = match action {
        ActionKind::Signal => notify::Action::Signal,
        ActionKind::Evict => notify::Action::Evict,
        ActionKind::Http => notify::Action::Http,
        ActionKind::None => return None,
    };
    let outcome = match outcome {
        Outcome::Signaled => notify::Outcome::Signaled,
        Outcome::SignalNotHandled | Outcome::SignalWithheld => notify::Outcome::SignalNotHandled,
        Outcome::SignalFailed => notify::Outcome::SignalFailed,
        Outcome::Evicted => notify::Outcome::EvictionRequested,
        Outcome::EvictionFailed => notify::Outcome::EvictionFailed,
        Outcome::EvictionBlocked => notify::Outcome::EvictionBlocked { blocked_for },
        Outcome::Reloaded => notify::Outcome::Reloaded,
        Outcome::ReloadFailed => notify::Outcome::ReloadFailed,
        Outcome::Refused
        | Outcome::InvalidAnnotation
        | Outcome::SubPathNotUpdated
        | Outcome::DryRun
        | Outcome::NoDisruptionBudget
        | Outcome::Skipped
        | Outcome::EnvNotReloaded
        | Outcome::NudgeFailed
        | Outcome::Patched
        | Outcome::PodGone
        | Outcome::PatchConflict
        | Outcome::PatchForbidden
        | Outcome::PatchFailed
        | Outcome::NudgeDropped => return None,
    };
    Some((action, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn a_notification_says_what_its_event_says() {
        for outcome in Outcome::iter() {
            for action in outcome.actions() {
                if let Some((_, n)) = notification(*action, outcome, Duration::ZERO)
                    .filter(|_| outcome != Outcome::NudgeFailed)
                {
                    assert_eq!(
                        Some(n.reason()),
                        outcome.event().map(|e| e.reason),
                        "{outcome:?}"
                    );
                }
            }
        }
    }
}
