//! How fast kubelets answer projection nudges (pure): from the agent seeing a pod's new
//! `reloadlet.io/projection-nudge` value to the next changed `..data` swap of that pod.
//! Feeds `reloadlet_projection_delay_seconds`.

use crate::core::model::{PodInfo, SourceKind, SourceRef};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// The object a nudge value names: `configmap/app-cfg@1234#2` → ConfigMap `app-cfg` (the
/// controller's `Change::value`, `src/controller/nudge/schedule.rs`). `None` for anything else.
pub fn nudged_source(value: &str) -> Option<SourceRef> {
    let (kind, rest) = value.split_once('/')?;
    let (name, _version) = rest.rsplit_once('@')?;
    let kind = match kind {
        "configmap" => SourceKind::ConfigMap,
        "secret" => SourceKind::Secret,
        _ => return None,
    };
    (!name.is_empty()).then(|| SourceRef {
        kind,
        name: name.to_owned(),
    })
}

/// The pod's volumes the kubelet re-projects from `source` (configMap/secret volumes and
/// projected sources naming it): the volumes a nudge for `source` announces.
pub fn announced_volumes(pod: &PodInfo, source: &SourceRef) -> BTreeSet<String> {
    pod.volumes
        .iter()
        .filter(|v| v.sources.contains(source))
        .map(|v| v.name.clone())
        .collect()
}

fn base_of(nudge: &str) -> &str {
    nudge.split('#').next().unwrap_or(nudge)
}

/// A nudge older than this is not what made a later swap happen (the kubelet's periodic
/// sync, 60–90 s, would have answered it anyway).
pub const MAX_WAIT: Duration = Duration::from_secs(120);
/// The kubelet and the agent learn of a nudge from their own pod watches; the kubelet can
/// sync and swap before the agent's watch delivers the pod update. A new nudge seen this
/// soon after an unexplained swap was answered before the agent saw it: counted as 0.
pub const EARLY_WINDOW: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct PodNudges {
    /// The nudge value last seen, without its `#n` suffix.
    last_base: Option<String>,
    /// The nudge waiting for a swap, and when it was first seen.
    pending: Option<Instant>,
    /// A changed swap no nudge was waiting for.
    unexplained_swap: Option<Instant>,
}

#[derive(Debug, Default)]
pub struct NudgeDelays {
    pods: HashMap<String, PodNudges>,
}

impl NudgeDelays {
    /// Whether `nudge` is a new change for a pod seen before (not its first sight, which is a
    /// baseline, nor a re-nudge `#2`, `#3` of the change already seen).
    pub fn is_new(&self, uid: &str, nudge: Option<&str>) -> bool {
        match (self.pods.get(uid), nudge) {
            (Some(p), Some(n)) => p.last_base.as_deref() != Some(base_of(n)),
            _ => false,
        }
    }

    /// The pod's current annotation value. The first sight of a pod is a baseline (its nudge
    /// may be old); re-nudges (`#2`, `#3`) of the same change keep the first one's time.
    /// Returns a delay to record when the swap came first (see [`EARLY_WINDOW`]).
    pub fn on_pod(&mut self, uid: &str, nudge: Option<&str>, now: Instant) -> Option<Duration> {
        let base = nudge.map(|v| base_of(v).to_owned());
        let Some(p) = self.pods.get_mut(uid) else {
            self.pods.insert(
                uid.to_owned(),
                PodNudges {
                    last_base: base,
                    ..PodNudges::default()
                },
            );
            return None;
        };
        if base.is_none() || p.last_base == base {
            return None;
        }
        p.last_base = base;
        match p.unexplained_swap.take() {
            Some(at) if now.saturating_duration_since(at) <= EARLY_WINDOW => {
                p.pending = None;
                Some(Duration::ZERO)
            }
            _ => {
                p.pending = Some(now);
                None
            }
        }
    }

    /// A volume of the pod changed content: the delay since the nudge it answers, if any.
    pub fn on_swap(&mut self, uid: &str, now: Instant) -> Option<Duration> {
        let p = self.pods.get_mut(uid)?;
        let Some(since) = p.pending.take() else {
            p.unexplained_swap = Some(now);
            return None;
        };
        let delay = now.saturating_duration_since(since);
        (delay <= MAX_WAIT).then_some(delay)
    }

    pub fn forget(&mut self, uid: &str) {
        self.pods.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_measured_from_the_first_nudge_of_a_change_to_the_next_swap() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = NudgeDelays::default();
        // First sight: a baseline, even with a nudge on it.
        assert_eq!(d.on_pod("u", Some("configmap/a@1"), t0), None);
        assert_eq!(d.on_swap("u", t0 + ms(10)), None);
        let t0 = t0 + EARLY_WINDOW + ms(100);
        // A new nudge, its re-nudge, then the swap: timed from the first.
        d.on_pod("u", Some("configmap/a@2"), t0 + ms(100));
        d.on_pod("u", Some("configmap/a@2#2"), t0 + ms(1100));
        assert_eq!(d.on_swap("u", t0 + ms(1300)), Some(ms(1200)));
        // The #3 after the swap starts nothing; a second swap is not timed.
        d.on_pod("u", Some("configmap/a@2#3"), t0 + ms(3100));
        assert_eq!(d.on_swap("u", t0 + ms(4000)), None);
        // Other pod updates without a new nudge change nothing.
        d.on_pod("u", Some("configmap/a@2#3"), t0 + ms(5000));
        d.on_pod("u", None, t0 + ms(5000));
        assert_eq!(d.on_swap("u", t0 + ms(6000)), None);
        // A nudge never answered by a swap is not blamed for a much later one.
        d.on_pod("u", Some("configmap/a@3"), t0 + ms(7000));
        let late = t0 + ms(7000) + MAX_WAIT + ms(1);
        assert_eq!(d.on_swap("u", late), None);
        // The kubelet swapped before the agent's watch showed the nudge: counted as 0.
        assert_eq!(d.on_swap("u", late + ms(500)), None);
        assert_eq!(
            d.on_pod("u", Some("configmap/a@4"), late + ms(600)),
            Some(Duration::ZERO)
        );
        assert_eq!(d.on_swap("u", late + ms(700)), None);
        // …but not a swap long before it.
        assert_eq!(
            d.on_pod(
                "u",
                Some("configmap/a@5"),
                late + ms(700) + EARLY_WINDOW + ms(1)
            ),
            None
        );
        d.forget("u");
        assert_eq!(d.on_swap("u", t0), None);
    }

    #[test]
    fn a_nudge_names_its_object_and_is_new_once_per_change() {
        let cm = |n: &str| SourceRef {
            kind: SourceKind::ConfigMap,
            name: n.into(),
        };
        assert_eq!(nudged_source("configmap/app-cfg@12"), Some(cm("app-cfg")));
        assert_eq!(nudged_source("configmap/app-cfg@12#3"), Some(cm("app-cfg")));
        assert_eq!(
            nudged_source("secret/tls@9").map(|s| s.kind),
            Some(SourceKind::Secret)
        );
        for bad in ["", "configmap/app", "pod/x@1", "configmap/@1", "garbage"] {
            assert_eq!(nudged_source(bad), None, "{bad}");
        }
        let t0 = Instant::now();
        let mut d = NudgeDelays::default();
        assert!(!d.is_new("u", Some("configmap/a@1")), "first sight");
        d.on_pod("u", Some("configmap/a@1"), t0);
        assert!(!d.is_new("u", Some("configmap/a@1#2")), "a re-nudge");
        assert!(!d.is_new("u", None));
        assert!(d.is_new("u", Some("configmap/a@2")));
        d.on_pod("u", Some("configmap/a@2"), t0);
        assert!(!d.is_new("u", Some("configmap/a@2")));
    }
}
