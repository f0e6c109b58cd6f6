//! `reloadlet_consumers{namespace,state}` and, behind `--status-metrics-per-object`,
//! `reloadlet_object_consumers{namespace,kind,name,state}`: the counts of
//! [`super::tally::Tally`], on the controller's one registry.

use super::tally::{Counts, Tally, STATES};
use crate::ports::ObjectKey;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabels {
    pub namespace: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub namespace: String,
    pub kind: &'static str,
    pub name: String,
    pub state: &'static str,
}

pub struct ConsumerMetrics {
    by_namespace: Family<NamespaceLabels, Gauge>,
    /// `None` without `--status-metrics-per-object` (not registered at all).
    by_object: Option<Family<ObjectLabels, Gauge>>,
    /// What the gauges show now: series set anew in place (a scrape never sees them gone
    /// half-way), and those no longer counted removed.
    shown: Tally,
}

impl ConsumerMetrics {
    pub fn new(registry: &mut Registry, per_object: bool) -> Self {
        let m = Self {
            by_namespace: Family::default(),
            by_object: per_object.then(Family::default),
            shown: Tally::default(),
        };
        registry.register(
            "consumers",
            "Pods consuming a ConfigMap/Secret (one per pod and object), by namespace and state for the object's current data, as reloadlet status shows them (leader only)",
            m.by_namespace.clone(),
        );
        if let Some(family) = &m.by_object {
            registry.register(
                "object_consumers",
                "The same per ConfigMap/Secret (--status-metrics-per-object)",
                family.clone(),
            );
        }
        m
    }

    /// The gauges say `tally` now: each namespace (object) with a consumer has a series per
    /// state, 0 included; one without any has none.
    pub fn show(&mut self, tally: Tally) {
        let ns_labels = |namespace: &str, state| NamespaceLabels {
            namespace: namespace.to_owned(),
            state,
        };
        for (namespace, counts) in &tally.by_namespace {
            set_all(counts, |state| {
                self.by_namespace
                    .get_or_create(&ns_labels(namespace, state))
            });
        }
        for namespace in self.shown.by_namespace.keys() {
            if !tally.by_namespace.contains_key(namespace) {
                for state in STATES {
                    self.by_namespace.remove(&ns_labels(namespace, state));
                }
            }
        }
        if let Some(family) = &self.by_object {
            let labels = |key: &ObjectKey, state| ObjectLabels {
                namespace: key.namespace.clone(),
                kind: key.kind.as_str(),
                name: key.name.clone(),
                state,
            };
            for (key, counts) in &tally.by_object {
                set_all(counts, |state| family.get_or_create(&labels(key, state)));
            }
            for key in self.shown.by_object.keys() {
                if !tally.by_object.contains_key(key) {
                    for state in STATES {
                        family.remove(&labels(key, state));
                    }
                }
            }
        }
        self.shown = tally;
    }

    /// No series (not the leader: the leader's are the counts).
    pub fn hide(&mut self) {
        self.show(Tally::default());
    }
}

fn set_all<G: std::ops::Deref<Target = Gauge>>(
    counts: &Counts,
    mut gauge: impl FnMut(&'static str) -> G,
) {
    for (state, n) in STATES.iter().zip(counts) {
        gauge(state).set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::SourceKind;

    #[test]
    fn series_per_state_at_zero_and_gone_with_the_last_consumer() {
        let mut r = Registry::with_prefix("reloadlet");
        let mut m = ConsumerMetrics::new(&mut r, true);
        let key = ObjectKey {
            kind: SourceKind::ConfigMap,
            namespace: "web".into(),
            name: "app".into(),
        };
        let mut tally = Tally::default();
        tally.by_namespace.insert("web".into(), [2, 1, 0, 0, 0, 0]);
        tally.by_object.insert(key.clone(), [2, 1, 0, 0, 0, 0]);
        m.show(tally);
        let text = crate::serve::metrics::encode(&r);
        assert!(
            text.contains("reloadlet_consumers{namespace=\"web\",state=\"current\"} 2"),
            "{text}"
        );
        assert!(text.contains("reloadlet_consumers{namespace=\"web\",state=\"not_reloaded\"} 0"));
        assert!(text.contains(
            "reloadlet_object_consumers{namespace=\"web\",kind=\"configmap\",name=\"app\",state=\"pending\"} 1"
        ));
        m.hide();
        let text = crate::serve::metrics::encode(&r);
        assert!(!text.contains("namespace=\"web\""), "{text}");

        let mut plain = Registry::with_prefix("reloadlet");
        let mut m = ConsumerMetrics::new(&mut plain, false);
        let mut tally = Tally::default();
        tally.by_namespace.insert("web".into(), [2, 1, 0, 0, 0, 0]);
        tally.by_object.insert(key, [2, 1, 0, 0, 0, 0]);
        m.show(tally);
        let text = crate::serve::metrics::encode(&plain);
        assert!(
            text.contains("reloadlet_consumers{namespace=\"web\",state=\"current\"} 2"),
            "{text}"
        );
        assert!(
            !text.contains("object_consumers"),
            "per object only behind the flag"
        );
    }
}
