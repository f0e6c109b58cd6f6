//! How fast kubelets answer projection nudges (pure): from the agent seeing a pod's new
//! `reloadlet.io/projection-nudge` value to the next changed `..data` swap of that pod.
//! Feeds `reloadlet_projection_delay_seconds`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A nudge older than this is not what made a later swap happen (the kubelet's periodic
/// sync, 60–90 s, would have answered it anyway).
pub const MAX_WAIT: Duration = Duration::from_secs(120);

#[derive(Debug, Default)]
struct PodNudges {
    /// The nudge value last seen, without its `#n` suffix.
    last_base: Option<String>,
    /// The nudge waiting for a swap, and when it was first seen.
    pending: Option<Instant>,
}

#[derive(Debug, Default)]
pub struct NudgeDelays {
    pods: HashMap<String, PodNudges>,
}

impl NudgeDelays {
    /// The pod's current annotation value. The first sight of a pod is a baseline (its nudge
    /// may be old); re-nudges (`#2`, `#3`) of the same change keep the first one's time.
    pub fn on_pod(&mut self, uid: &str, nudge: Option<&str>, now: Instant) {
        let base = nudge.map(|v| v.split('#').next().unwrap_or(v).to_owned());
        match self.pods.get_mut(uid) {
            None => {
                self.pods.insert(
                    uid.to_owned(),
                    PodNudges {
                        last_base: base,
                        pending: None,
                    },
                );
            }
            Some(p) => {
                if base.is_some() && p.last_base != base {
                    p.last_base = base;
                    p.pending = Some(now);
                }
            }
        }
    }

    /// A volume of the pod changed content: the delay since the nudge it answers, if any.
    pub fn on_swap(&mut self, uid: &str, now: Instant) -> Option<Duration> {
        let p = self.pods.get_mut(uid)?;
        let since = p.pending.take()?;
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
        d.on_pod("u", Some("configmap/a@1"), t0);
        assert_eq!(d.on_swap("u", t0 + ms(10)), None);
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
        assert_eq!(d.on_swap("u", t0 + ms(7000) + MAX_WAIT + ms(1)), None);
        d.forget("u");
        assert_eq!(d.on_swap("u", t0), None);
    }
}
