//! Prometheus metrics (`reloadlet_*`). Labels are bounded enums: never pod names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: &'static str,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ActionKind {
    Signal,
    Evict,
    None,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    Signaled,
    SignalFailed,
    Evicted,
    EvictionBlocked,
    EvictionFailed,
    Refused,
    InvalidAnnotation,
    SubPathNotUpdated,
    DryRun,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
    pub outcome: &'static str,
}

impl ActionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signal => "signal",
            Self::Evict => "evict",
            Self::None => "none",
        }
    }
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signaled => "signaled",
            Self::SignalFailed => "signal_failed",
            Self::Evicted => "evicted",
            Self::EvictionBlocked => "eviction_blocked",
            Self::EvictionFailed => "eviction_failed",
            Self::Refused => "refused",
            Self::InvalidAnnotation => "invalid_annotation",
            Self::SubPathNotUpdated => "subpath_not_updated",
            Self::DryRun => "dry_run",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub action: &'static str,
}

/// Every metric reloadlet exports; cloning shares the same series.
#[derive(Clone)]
pub struct Metrics {
    pub swaps: Family<PluginLabels, Counter>,
    pub swaps_unchanged: Family<PluginLabels, Counter>,
    pub actions: Family<ActionLabels, Counter>,
    pub latency: Family<LatencyLabels, Histogram>,
    pub evictions_pending: Gauge,
    pub watched_pods: Gauge,
    pub watched_volumes: Gauge,
    pub volumes_tracked: Gauge,
    pub inotify_watches: Gauge,
    pub unwatched_volumes: Gauge,
    pub inotify_overflows: Counter,
    pub inotify_watch_limit_errors: Counter,
    pub api_watch_restarts: Counter,
    pub events_dropped: Counter,
    pub state_write_errors: Counter,
    /// From a new `reloadlet.io/projection-nudge` on a pod to its next changed swap.
    pub projection_delay: Histogram,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            swaps: Family::default(),
            swaps_unchanged: Family::default(),
            actions: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 4.0, 10))
            }),
            evictions_pending: Gauge::default(),
            watched_pods: Gauge::default(),
            watched_volumes: Gauge::default(),
            volumes_tracked: Gauge::default(),
            inotify_watches: Gauge::default(),
            unwatched_volumes: Gauge::default(),
            inotify_overflows: Counter::default(),
            inotify_watch_limit_errors: Counter::default(),
            api_watch_restarts: Counter::default(),
            events_dropped: Counter::default(),
            state_write_errors: Counter::default(),
            projection_delay: Histogram::new(exponential_buckets(0.05, 2.0, 10)),
        };
        let r = registry;
        r.register(
            "volume_swaps",
            "Volume `..data` swaps seen, by volume plugin",
            m.swaps.clone(),
        );
        r.register(
            "volume_swaps_unchanged",
            "Swaps skipped because the content hash did not change",
            m.swaps_unchanged.clone(),
        );
        r.register(
            "actions",
            "Actions taken, by kind and outcome",
            m.actions.clone(),
        );
        r.register(
            "action_latency_seconds",
            "Time from seeing the volume swap to the action (signal sent / eviction accepted)",
            m.latency.clone(),
        );
        r.register(
            "projection_delay_seconds",
            "Time from seeing a new reloadlet.io/projection-nudge on a pod to its next changed volume swap (how fast kubelets answer the controller)",
            m.projection_delay.clone(),
        );
        r.register(
            "evictions_pending",
            "Evictions waiting for a PodDisruptionBudget or retry",
            m.evictions_pending.clone(),
        );
        r.register(
            "watched_pods",
            "Pods of this node in the pod index",
            m.watched_pods.clone(),
        );
        r.register(
            "watched_volumes",
            "ConfigMap/Secret/projected volumes watched",
            m.watched_volumes.clone(),
        );
        r.register(
            "volumes_tracked",
            "Volumes whose current content hash is known (a later change is detected)",
            m.volumes_tracked.clone(),
        );
        r.register(
            "inotify_watches",
            "inotify watches held",
            m.inotify_watches.clone(),
        );
        r.register(
            "unwatched_volumes",
            "Volumes without a watch (limit reached), rescanned periodically",
            m.unwatched_volumes.clone(),
        );
        r.register(
            "inotify_overflows",
            "inotify queue overflows (each followed by a full rescan)",
            m.inotify_overflows.clone(),
        );
        r.register(
            "inotify_watch_limit_errors",
            "inotify_add_watch failures with ENOSPC (fs.inotify.max_user_watches reached)",
            m.inotify_watch_limit_errors.clone(),
        );
        r.register(
            "api_watch_restarts",
            "Pod watch errors and relists",
            m.api_watch_restarts.clone(),
        );
        r.register(
            "events_dropped",
            "Kubernetes Events dropped because the queue was full",
            m.events_dropped.clone(),
        );
        r.register(
            "state_write_errors",
            "Failed writes of the state file",
            m.state_write_errors.clone(),
        );
        m
    }

    pub fn action(&self, action: ActionKind, outcome: Outcome) {
        self.actions
            .get_or_create(&ActionLabels {
                action: action.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub fn observe_latency(&self, action: ActionKind, seconds: f64) {
        self.latency
            .get_or_create(&LatencyLabels {
                action: action.as_str(),
            })
            .observe(seconds);
    }
}

pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_labels_bounded() {
        let mut reg = Registry::with_prefix("reloadlet");
        let m = Metrics::new(&mut reg);
        m.action(ActionKind::Signal, Outcome::Signaled);
        m.swaps
            .get_or_create(&PluginLabels {
                plugin: "configmap",
            })
            .inc();
        m.observe_latency(ActionKind::Signal, 0.0003);
        let text = encode(&reg);
        assert!(
            text.contains("reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("reloadlet_volume_swaps_total{plugin=\"configmap\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("reloadlet_action_latency_seconds_bucket"),
            "{text}"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(name.starts_with("reloadlet_"), "{line}");
        }
    }
}
