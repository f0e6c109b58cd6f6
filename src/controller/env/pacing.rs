//! Pacing of env evictions (docs/pacing.md), per pod: the one bookkeeping of
//! `core::pacing::book` (each env consumer's [`PacingSpec`] read from its annotations, one
//! pacer per pod, the changes held until their time). Evictions are disruptive: a maintenance
//! window always holds them.
//!
//! Nothing here is persisted: a held change keeps the pod's `reloadlet.io/env-baseline` as it
//! was (only an eviction's replacement gets a new one), so after a restart or a leader change
//! the new leader finds the change again when it compares the baselines, and paces it anew.
//!
//! [`PacingSpec`]: crate::core::pacing::PacingSpec

use super::tracker::EnvChange;
use crate::core::model::PodInfo;
pub use crate::core::pacing::Notice as EnvNotice;
use crate::core::pacing::{ActionClass, Gate, PacingBook, PacingDefaults, PacingSpecs, WallClock};
use std::time::Instant;

/// What pacing says of an env change.
#[derive(Debug, PartialEq, Eq)]
pub enum EnvPaced {
    /// Evict now (the action is recorded).
    Act,
    /// Held; what to tell, once.
    Held(Option<EnvNotice>),
    /// A pacing annotation is invalid: no eviction until it is fixed.
    Refused(String),
}

/// The changes of one pod held, and when they were first seen.
pub struct HeldEnv {
    pub changes: Vec<EnvChange>,
    pub seen: Instant,
}

pub struct EnvPacing {
    specs: PacingSpecs<String>,
    book: PacingBook<String, HeldEnv>,
}

impl EnvPacing {
    pub fn new(defaults: PacingDefaults, clock: WallClock) -> Self {
        Self {
            specs: PacingSpecs::new(defaults, false),
            book: PacingBook::new(clock),
        }
    }

    /// Reads the pod's pacing annotations; `Ok(true)`: they were invalid and are fixed (what
    /// they refused is to be compared again); `Err`: the invalid one, named with its value.
    pub fn on_pod(&mut self, pod: &PodInfo) -> Result<bool, String> {
        let was_invalid = self.specs.get(pod.uid.as_str()).is_err();
        self.specs
            .read(&pod.uid, &pod.annotations)
            .map(|()| was_invalid)
    }

    /// Whether an eviction of the pod for `change` may run now (`fresh`: a new change, not a
    /// held one coming due). A held change is kept here until [`Self::take_due`].
    pub fn gate(
        &mut self,
        change: &EnvChange,
        seen: Instant,
        fresh: bool,
        now: Instant,
    ) -> EnvPaced {
        let uid = change.uid.as_str();
        let spec = match self.specs.get(uid) {
            Ok(spec) => spec,
            Err(message) => return EnvPaced::Refused(message.to_owned()),
        };
        let source = || change.source.to_string();
        let hold = |held: Option<HeldEnv>| {
            let mut held = held.unwrap_or(HeldEnv {
                changes: Vec::new(),
                seen,
            });
            held.seen = held.seen.min(seen);
            held.changes.retain(|c| c.source != change.source);
            held.changes.push(change.clone());
            held
        };
        match self
            .book
            .gate(uid, spec, ActionClass::Disruptive, fresh, now, source, hold)
        {
            Gate::Act { .. } => EnvPaced::Act,
            Gate::Held(notice) => EnvPaced::Held(notice),
        }
    }

    /// The held changes whose time came by `now`, by pod.
    pub fn take_due(&mut self, now: Instant) -> Vec<HeldEnv> {
        self.book
            .take_due(now)
            .into_iter()
            .map(|(_, held)| held)
            .collect()
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.book.next_deadline()
    }

    /// Deferred evictions now, pods held as flapping (the gauges).
    pub fn counts(&self) -> (usize, usize) {
        self.book.counts()
    }

    /// The pod went away: what was held for it and its history are dropped.
    pub fn forget(&mut self, uid: &str) {
        self.specs.forget(uid);
        self.book.forget(uid);
    }

    /// Another replica leads now: what this one held is its to find again.
    pub fn clear_held(&mut self) {
        self.book.clear_held();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{SourceKind, SourceRef};
    use jiff::Timestamp;
    use std::time::Duration;

    fn change(uid: &str, name: &str) -> EnvChange {
        EnvChange {
            uid: uid.into(),
            source: SourceRef {
                kind: SourceKind::ConfigMap,
                name: name.into(),
            },
            digest: "d".into(),
        }
    }

    fn pod(uid: &str, pacing: &[(&str, &str)]) -> PodInfo {
        let mut pod = PodInfo {
            uid: uid.into(),
            ..Default::default()
        };
        for (k, v) in pacing {
            pod.annotations.insert((*k).into(), (*v).into());
        }
        pod
    }

    #[test]
    fn an_env_eviction_waits_for_its_window_and_runs_once() {
        let t0 = Instant::now();
        // 12:00:30 UTC; the window opens at 12:01.
        let wall: Timestamp = "2026-11-26T12:00:30Z".parse().unwrap();
        let mut p = EnvPacing::new(PacingDefaults::default(), WallClock::new(wall, t0));
        p.on_pod(&pod("u1", &[("reloadlet.io/window", "1 12 * * *")]))
            .unwrap();
        let notice = p.gate(&change("u1", "a"), t0, true, t0);
        assert!(
            matches!(notice, EnvPaced::Held(Some(EnvNotice::Deferred { until, .. })) if until == "2026-11-26T12:01:00Z".parse().unwrap()),
            "{notice:?}"
        );
        // A second source changes meanwhile: held together, reported once.
        assert_eq!(
            p.gate(&change("u1", "b"), t0, true, t0 + Duration::from_secs(5)),
            EnvPaced::Held(None)
        );
        assert_eq!(p.next_deadline(), Some(t0 + Duration::from_secs(30)));
        assert!(p.take_due(t0 + Duration::from_secs(29)).is_empty());
        let due = p.take_due(t0 + Duration::from_secs(30));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].changes.len(), 2);
        assert_eq!(
            p.gate(&due[0].changes[0], t0, false, t0 + Duration::from_secs(30)),
            EnvPaced::Act
        );
        assert_eq!(p.counts(), (0, 0));
    }

    #[test]
    fn an_unannotated_pod_is_evicted_at_once_and_a_bad_one_never() {
        let t0 = Instant::now();
        let mut p = EnvPacing::new(
            PacingDefaults::default(),
            WallClock::new(Timestamp::now(), t0),
        );
        assert!(!p.on_pod(&pod("plain", &[])).unwrap());
        assert_eq!(p.gate(&change("plain", "a"), t0, true, t0), EnvPaced::Act);
        let e = p
            .on_pod(&pod("bad", &[("reloadlet.io/min-interval", "soon")]))
            .unwrap_err();
        assert!(
            e.contains("reloadlet.io/min-interval") && e.contains("soon"),
            "{e}"
        );
        assert!(matches!(
            p.gate(&change("bad", "a"), t0, true, t0),
            EnvPaced::Refused(_)
        ));
        // Fixed: said once, then acted on.
        assert!(p
            .on_pod(&pod("bad", &[("reloadlet.io/min-interval", "1m")]))
            .unwrap());
        assert!(!p
            .on_pod(&pod("bad", &[("reloadlet.io/min-interval", "1m")]))
            .unwrap());
        assert_eq!(p.gate(&change("bad", "a"), t0, true, t0), EnvPaced::Act);
    }
}
