//! The one place an outcome becomes a metric and a Kubernetes Event (and the one place
//! `--dry-run` silences Events).

use crate::metrics::Metrics;
use crate::outcome::{ActionKind, Outcome};
use crate::ports::{EventSink, PodEvent, PodRef};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct Reporter {
    events: Arc<dyn EventSink>,
    metrics: Metrics,
    dry_run: bool,
}

impl Reporter {
    pub fn new(events: Arc<dyn EventSink>, metrics: Metrics, dry_run: bool) -> Self {
        Self {
            events,
            metrics,
            dry_run,
        }
    }

    /// `--dry-run`: actions are only looked at (signals) or asked with `dryRun=All`
    /// (evictions), and no Event is published.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Counts `outcome` and publishes its Event.
    pub fn record(&self, pod: &PodRef, action: ActionKind, outcome: Outcome, note: String) {
        self.count(action, outcome);
        self.publish(pod, action, outcome, note);
    }

    /// Counts `outcome` in `reloadlet_actions_total` (when it is counted at all).
    pub fn count(&self, action: ActionKind, outcome: Outcome) {
        if outcome.counted() {
            self.metrics.action(action, outcome);
        }
    }

    /// Publishes the Event of `outcome` (if it has one), unless `--dry-run`.
    pub fn publish(&self, pod: &PodRef, action: ActionKind, outcome: Outcome, note: String) {
        if self.dry_run {
            return;
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
