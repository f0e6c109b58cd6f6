//! Prometheus metrics (`reloadlet_*`). Labels are bounded enums: never pod names.
//!
//! Every label combination of the outcome counters is created at 0 when the registry is
//! built, so the first failure shows in `increase()` / `rate()` (a series born at 1 has no
//! earlier sample to increase from). The combinations come from iterating the label enums,
//! so a new variant is exported without further edits.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use strum::IntoEnumIterator;

use crate::core::model::VolumePlugin;
pub use crate::core::outcome::{ActionKind, Outcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
    pub outcome: &'static str,
}

/// Upper bounds (seconds) of `reloadlet_action_latency_seconds`. The latency runs from the
/// first swap to the signal / accepted eviction, so it includes the debounce (default 250 ms):
/// fine steps between 0.25 s and 0.5 s tell "debounce plus a few ms" from "debounce plus a
/// retry" or "a second swap restarted the window"; the same around 1 s for those who set
/// `--debounce 1s`; 0.001–0.1 s covers `--debounce 0s`; minutes to an hour cover evictions
/// that waited for a PodDisruptionBudget.
pub const LATENCY_BUCKETS: [f64; 26] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.255, 0.275, 0.3, 0.4, 0.5, 0.75, 1.0,
    1.05, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PanicLabels {
    pub mode: &'static str,
    pub stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub action: &'static str,
}

/// Every metric reloadlet exports; cloning shares the same series. Grouped by area: what is
/// watched ([`WatchMetrics`]), what was done (`actions`, `evictions_pending`), how long it
/// took ([`TimingMetrics`]), and what was lost.
#[derive(Clone)]
pub struct Metrics {
    pub watch: WatchMetrics,
    pub actions: Family<ActionLabels, Counter>,
    pub evictions_pending: Gauge,
    pub timing: TimingMetrics,
    pub events_dropped: Counter,
    pub state_write_errors: Counter,
    pub pacing: PacingMetrics,
    /// Panics caught while handling one object (`crate::contain`), by mode and stage; each
    /// mode creates its own stages' series at 0.
    pub handler_panics: Family<PanicLabels, Counter>,
}

/// Pacing (docs/pacing.md): what waits, what is held as flapping, and how often.
#[derive(Clone)]
pub struct PacingMetrics {
    /// Actions deferred now (to a maintenance window or the end of a minimum interval).
    pub deferred: Gauge,
    /// Pods (workloads) held by the flap breaker now.
    pub held: Gauge,
    /// Deferrals reported (each a `ReloadDeferred` Event).
    pub deferrals: Counter,
    /// Flapping episodes opened (each a `ReloadFlapping` Event).
    pub flap_episodes: Counter,
}

/// The volumes and pods the agent watches: the swaps seen, the watches held, and the
/// watches' troubles.
#[derive(Clone)]
pub struct WatchMetrics {
    pub swaps: Family<PluginLabels, Counter>,
    pub swaps_unchanged: Family<PluginLabels, Counter>,
    pub watched_pods: Gauge,
    pub watched_volumes: Gauge,
    pub volumes_tracked: Gauge,
    pub inotify_watches: Gauge,
    pub unwatched_volumes: Gauge,
    pub inotify_overflows: Counter,
    pub inotify_watch_limit_errors: Counter,
    pub api_watch_restarts: Counter,
}

/// The histograms.
#[derive(Clone)]
pub struct TimingMetrics {
    /// From the first swap to the action, by action ([`Metrics::observe_latency`]).
    pub latency: Family<LatencyLabels, Histogram>,
    /// From a new `reloadlet.io/projection-nudge` on a pod to its next changed swap.
    pub projection_delay: Histogram,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            watch: WatchMetrics {
                swaps: Family::default(),
                swaps_unchanged: Family::default(),
                watched_pods: Gauge::default(),
                watched_volumes: Gauge::default(),
                volumes_tracked: Gauge::default(),
                inotify_watches: Gauge::default(),
                unwatched_volumes: Gauge::default(),
                inotify_overflows: Counter::default(),
                inotify_watch_limit_errors: Counter::default(),
                api_watch_restarts: Counter::default(),
            },
            actions: Family::default(),
            evictions_pending: Gauge::default(),
            timing: TimingMetrics {
                latency: Family::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS)),
                projection_delay: Histogram::new(exponential_buckets(0.05, 2.0, 10)),
            },
            events_dropped: Counter::default(),
            state_write_errors: Counter::default(),
            pacing: PacingMetrics {
                deferred: Gauge::default(),
                held: Gauge::default(),
                deferrals: Counter::default(),
                flap_episodes: Counter::default(),
            },
            handler_panics: Family::default(),
        };
        let r = registry;
        r.register(
            "volume_swaps",
            "Volume `..data` swaps seen, by volume plugin",
            m.watch.swaps.clone(),
        );
        r.register(
            "volume_swaps_unchanged",
            "Swaps skipped because the content hash did not change",
            m.watch.swaps_unchanged.clone(),
        );
        r.register(
            "actions",
            "Actions taken, by kind and outcome",
            m.actions.clone(),
        );
        r.register(
            "action_latency_seconds",
            "Time from seeing the volume swap to the action (signal sent / eviction accepted)",
            m.timing.latency.clone(),
        );
        r.register(
            "projection_delay_seconds",
            "Time from seeing a new reloadlet.io/projection-nudge on a pod to its next changed volume swap (how fast kubelets answer the controller)",
            m.timing.projection_delay.clone(),
        );
        r.register(
            "evictions_pending",
            "Evictions waiting for a PodDisruptionBudget or retry",
            m.evictions_pending.clone(),
        );
        r.register(
            "watched_pods",
            "Pods of this node in the pod index",
            m.watch.watched_pods.clone(),
        );
        r.register(
            "watched_volumes",
            "ConfigMap/Secret/projected volumes watched",
            m.watch.watched_volumes.clone(),
        );
        r.register(
            "volumes_tracked",
            "Volumes whose current content hash is known (a later change is detected)",
            m.watch.volumes_tracked.clone(),
        );
        r.register(
            "inotify_watches",
            "inotify watches held",
            m.watch.inotify_watches.clone(),
        );
        r.register(
            "unwatched_volumes",
            "Volumes without a watch (limit reached), rescanned periodically",
            m.watch.unwatched_volumes.clone(),
        );
        r.register(
            "inotify_overflows",
            "inotify queue overflows (each followed by a full rescan)",
            m.watch.inotify_overflows.clone(),
        );
        r.register(
            "inotify_watch_limit_errors",
            "inotify_add_watch failures with ENOSPC (fs.inotify.max_user_watches reached)",
            m.watch.inotify_watch_limit_errors.clone(),
        );
        r.register(
            "api_watch_restarts",
            "Pod watch errors and relists",
            m.watch.api_watch_restarts.clone(),
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
        r.register(
            "pacing_deferred_actions",
            "Actions deferred now, to a maintenance window or the end of a minimum interval",
            m.pacing.deferred.clone(),
        );
        r.register(
            "pacing_held_pods",
            "Pods (workloads) the flap breaker holds now",
            m.pacing.held.clone(),
        );
        r.register(
            "pacing_deferrals",
            "Actions deferred (each a ReloadDeferred Event)",
            m.pacing.deferrals.clone(),
        );
        r.register(
            "pacing_flap_episodes",
            "Flapping episodes opened (each a ReloadFlapping Event)",
            m.pacing.flap_episodes.clone(),
        );
        r.register(
            "handler_panics",
            "Panics caught while handling one object (the object is skipped until it changes), by mode and stage",
            m.handler_panics.clone(),
        );
        m.precreate();
        m
    }

    /// Creates every known label combination at 0 (see the module docs).
    fn precreate(&self) {
        for outcome in Outcome::iter() {
            for action in outcome.actions() {
                let _ = self.actions.get_or_create(&ActionLabels {
                    action: action.as_str(),
                    outcome: outcome.as_str(),
                });
            }
        }
        for action in ActionKind::iter().filter(|a| *a != ActionKind::None) {
            let _ = self.timing.latency.get_or_create(&LatencyLabels {
                action: action.as_str(),
            });
        }
        for plugin in VolumePlugin::ALL {
            let labels = PluginLabels {
                plugin: plugin.as_str(),
            };
            let _ = self.watch.swaps.get_or_create(&labels);
            let _ = self.watch.swaps_unchanged.get_or_create(&labels);
        }
    }

    /// The swap counters of one plugin, resolved once (`(swaps, swaps_unchanged)`): counting
    /// a swap on the hot path is then one atomic add, with no label lookup.
    pub fn swap_counters(&self, plugin: VolumePlugin) -> (Counter, Counter) {
        let labels = PluginLabels {
            plugin: plugin.as_str(),
        };
        (
            self.watch.swaps.get_or_create(&labels).clone(),
            self.watch.swaps_unchanged.get_or_create(&labels).clone(),
        )
    }

    pub fn action(&self, action: ActionKind, outcome: Outcome) {
        self.actions
            .get_or_create(&ActionLabels {
                action: action.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// One panic caught in `stage` (`crate::contain::count`).
    pub fn handler_panic(&self, mode: &'static str, stage: &'static str) {
        self.handler_panics_series(mode, stage).inc();
    }

    /// The series of `stage` (created at 0 if new).
    pub fn handler_panics_series(&self, mode: &'static str, stage: &'static str) -> Counter {
        self.handler_panics
            .get_or_create(&PanicLabels { mode, stage })
            .clone()
    }

    pub fn observe_latency(&self, action: ActionKind, seconds: f64) {
        self.timing
            .latency
            .get_or_create(&LatencyLabels {
                action: action.as_str(),
            })
            .observe(seconds);
    }
}

/// Content type of [`encode`]'s output: OpenMetrics 1.0 text (what prometheus-client
/// writes: `# TYPE x counter` with `x_total` samples, `# EOF`). Served whatever the
/// `Accept` header says: Prometheus parses the body by this header, and the Prometheus 0.0.4
/// text type on this body makes it mistype every counter.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry in the OpenMetrics text format ([`CONTENT_TYPE`]).
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
        m.watch
            .swaps
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

    fn line_value(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
    }

    #[test]
    fn every_outcome_series_exists_at_zero_before_anything_happens() {
        let mut reg = Registry::with_prefix("reloadlet");
        let _m = Metrics::new(&mut reg);
        let text = encode(&reg);
        for outcome in Outcome::iter() {
            assert_eq!(
                outcome.actions().is_empty(),
                !outcome.counted(),
                "{outcome:?}"
            );
            for action in outcome.actions() {
                let series = format!(
                    "reloadlet_actions_total{{action=\"{}\",outcome=\"{}\"}}",
                    action.as_str(),
                    outcome.as_str()
                );
                assert_eq!(
                    line_value(&text, &series).as_deref(),
                    Some("0"),
                    "{series}\n{text}"
                );
            }
        }
        for plugin in VolumePlugin::ALL {
            for family in ["volume_swaps_total", "volume_swaps_unchanged_total"] {
                let series = format!("reloadlet_{family}{{plugin=\"{}\"}}", plugin.as_str());
                assert_eq!(line_value(&text, &series).as_deref(), Some("0"), "{series}");
            }
        }
        for action in ["signal", "evict"] {
            let series = format!("reloadlet_action_latency_seconds_count{{action=\"{action}\"}}");
            assert_eq!(line_value(&text, &series).as_deref(), Some("0"), "{series}");
        }
    }

    #[test]
    fn latency_buckets_resolve_the_default_debounce() {
        // A signal sent right after the default 250 ms debounce, one after a 200 ms retry
        // and one after a second swap restarted the window land in different buckets; the
        // same around a 1 s debounce, and both apart from 2 s.
        let bucket = |v: f64| LATENCY_BUCKETS.iter().position(|b| v <= *b);
        assert_ne!(bucket(0.252), bucket(0.45));
        assert_ne!(bucket(0.252), bucket(0.29));
        assert_ne!(bucket(0.252), bucket(0.1));
        assert_ne!(bucket(1.003), bucket(1.2));
        assert_ne!(bucket(1.2), bucket(1.9));
        assert_ne!(bucket(0.6), bucket(1.003));
        assert!(LATENCY_BUCKETS.windows(2).all(|w| w[0] < w[1]));
        assert!(*LATENCY_BUCKETS.last().unwrap() >= 3600.0);
    }
}
