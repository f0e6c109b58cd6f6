//! The controller's Prometheus metrics (`reloadlet_nudges_total`, …), on their own registry.

use crate::core::model::SourceKind;
use crate::core::outcome::Outcome;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// How a nudge can end (the `outcome` label of `reloadlet_nudges_total`, each series created
/// at 0): one vocabulary with the executor's.
pub const NUDGE_OUTCOMES: [Outcome; 6] = [
    Outcome::Patched,
    Outcome::PodGone,
    Outcome::PatchConflict,
    Outcome::PatchForbidden,
    Outcome::PatchFailed,
    Outcome::NudgeDropped,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NudgeLabels {
    pub kind: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub resource: &'static str,
}

#[derive(Clone)]
pub struct ControllerMetrics {
    pub nudges: Family<NudgeLabels, Counter>,
    /// Pods with nudges still to send.
    pub queue_depth: Gauge,
    /// 1 while this replica holds the Lease.
    pub leader: Gauge,
    pub watched_pods: Gauge,
    pub watched_objects: Gauge,
    pub watch_errors: Family<WatchLabels, Counter>,
}

impl ControllerMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            nudges: Family::default(),
            queue_depth: Gauge::default(),
            leader: Gauge::default(),
            watched_pods: Gauge::default(),
            watched_objects: Gauge::default(),
            watch_errors: Family::default(),
        };
        registry.register(
            "nudges",
            "Projection nudges (pod annotation patches) by object kind and outcome",
            m.nudges.clone(),
        );
        registry.register(
            "nudge_queue_depth",
            "Pods with projection nudges still to send",
            m.queue_depth.clone(),
        );
        registry.register(
            "controller_leader",
            "1 while this controller replica holds the leader Lease",
            m.leader.clone(),
        );
        registry.register(
            "controller_watched_pods",
            "Pods the controller follows",
            m.watched_pods.clone(),
        );
        registry.register(
            "controller_watched_objects",
            "ConfigMaps/Secrets whose resourceVersion the controller follows",
            m.watched_objects.clone(),
        );
        registry.register(
            "controller_watch_errors",
            "Watch failures (retried with backoff), by resource",
            m.watch_errors.clone(),
        );
        for kind in [SourceKind::ConfigMap, SourceKind::Secret] {
            for outcome in NUDGE_OUTCOMES {
                let _ = m.nudges.get_or_create(&NudgeLabels {
                    kind: kind.as_str(),
                    outcome: outcome.as_str(),
                });
            }
        }
        for resource in ["pods", "configmaps", "secrets"] {
            let _ = m.watch_errors.get_or_create(&WatchLabels { resource });
        }
        m
    }

    pub fn count(&self, kind: SourceKind, outcome: Outcome, n: u64) {
        self.nudges
            .get_or_create(&NudgeLabels {
                kind: kind.as_str(),
                outcome: outcome.as_str(),
            })
            .inc_by(n);
    }

    pub fn get(&self, kind: SourceKind, outcome: Outcome) -> u64 {
        self.nudges
            .get_or_create(&NudgeLabels {
                kind: kind.as_str(),
                outcome: outcome.as_str(),
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_exists_at_zero() {
        let mut r = Registry::with_prefix("reloadlet");
        let _m = ControllerMetrics::new(&mut r);
        let text = crate::serve::metrics::encode(&r);
        assert!(
            text.contains("reloadlet_nudges_total{kind=\"configmap\",outcome=\"patched\"} 0"),
            "{text}"
        );
        assert!(text.contains("reloadlet_nudges_total{kind=\"secret\",outcome=\"dropped\"} 0"));
        assert!(text.contains("reloadlet_nudge_queue_depth 0"));
        assert!(text.contains("reloadlet_controller_leader 0"));
    }
}

/// One feature's share of the pacing gauges (`reloadlet_pacing_deferred_actions`,
/// `reloadlet_pacing_held_pods`): the env consumers and the rollout feature each add what
/// they hold, so neither overwrites the other's count.
#[derive(Default)]
pub struct PacingShare {
    deferred: i64,
    held: i64,
}

impl PacingShare {
    /// This feature now holds `deferred` deferrals and `held` flapping targets.
    pub fn set(&mut self, m: &crate::serve::metrics::PacingMetrics, counts: (usize, usize)) {
        let (deferred, held) = (counts.0 as i64, counts.1 as i64);
        m.deferred.inc_by(deferred - self.deferred);
        m.held.inc_by(held - self.held);
        self.deferred = deferred;
        self.held = held;
    }
}
