//! `reloadlet_notifications_*` counters. Labels are bounded enums; no URL, host or pod
//! name ever becomes a label.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// `timeout`, `connect`, `status_4xx`, `status_5xx`, `redirect`, `other`.
    pub reason: &'static str,
}

/// Cloning shares the same series.
#[derive(Clone, Debug, Default)]
pub struct NotifyMetrics {
    /// Requests a sink answered with 2xx.
    pub sent: Counter,
    /// Requests given up (after retries, or at once on a final answer), by reason.
    pub failed: Family<FailureLabels, Counter>,
    /// Attempts retried.
    pub retries: Counter,
    /// Queued requests dropped (oldest first) because a sink's queue was full.
    pub dropped: Counter,
    /// Notifications held back by the dedupe window.
    pub deduped: Counter,
}

impl NotifyMetrics {
    /// Registers the counters into `registry` (under its prefix, e.g. `reloadlet_`).
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "notifications_sent",
            "Notification requests answered with 2xx",
            m.sent.clone(),
        );
        registry.register(
            "notifications_failed",
            "Notification requests given up, by reason",
            m.failed.clone(),
        );
        registry.register(
            "notifications_retries",
            "Notification request attempts retried",
            m.retries.clone(),
        );
        registry.register(
            "notifications_dropped",
            "Notification requests dropped because the queue was full (oldest first)",
            m.dropped.clone(),
        );
        registry.register(
            "notifications_deduped",
            "Notifications held back by the 5-minute dedupe window",
            m.deduped.clone(),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_exported_with_bounded_labels() {
        let mut registry = Registry::with_prefix("reloadlet");
        let m = NotifyMetrics::new(&mut registry);
        m.sent.inc();
        m.dropped.inc();
        m.deduped.inc();
        m.retries.inc();
        m.failed
            .get_or_create(&FailureLabels {
                reason: "status_4xx",
            })
            .inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "reloadlet_notifications_sent_total 1",
            "reloadlet_notifications_failed_total{reason=\"status_4xx\"} 1",
            "reloadlet_notifications_retries_total 1",
            "reloadlet_notifications_dropped_total 1",
            "reloadlet_notifications_deduped_total 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }
}
