//! Leader election on a `coordination.k8s.io/v1` Lease (the decision, pure).
//!
//! The algorithm is client-go's (`tools/leaderelection/leaderelection.go`,
//! `tryAcquireOrRenew`): the holder renews `renewTime` every retry period; a candidate takes
//! the Lease over only when the record has not changed for `leaseDuration` **as observed on
//! its own clock** (so clock skew between nodes does not matter); every write is an update
//! with the resourceVersion it read (optimistic concurrency: of two candidates one gets 409).

use crate::ports::LeaseRecord;
use std::time::{Duration, Instant};

/// What to do after reading the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No Lease yet: create it, holding it.
    Create,
    /// We hold it: write a fresh `renewTime`.
    Renew,
    /// Free or expired: take it (new `acquireTime`, transitions + 1).
    Acquire,
    /// Someone else holds it and it has not expired.
    Follow { holder: String },
}

/// What a candidate remembers between reads.
#[derive(Debug, Default)]
pub struct Observer {
    /// The record and resourceVersion last seen, and when they were first seen.
    observed: Option<(LeaseRecord, String, Instant)>,
}

impl Observer {
    /// `current`: the Lease's record and resourceVersion (any write changes the latter).
    pub fn decide(
        &mut self,
        me: &str,
        current: Option<(&LeaseRecord, &str)>,
        now: Instant,
    ) -> Step {
        let Some((record, version)) = current else {
            self.observed = None;
            return Step::Create;
        };
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(r, v, _)| r != record || v != version);
        if changed {
            self.observed = Some((record.clone(), version.to_owned(), now));
        }
        let holder = record.holder.as_deref().filter(|h| !h.is_empty());
        match holder {
            Some(h) if h == me => Step::Renew,
            None => Step::Acquire,
            Some(h) => {
                let since = self.observed.as_ref().map_or(now, |(_, _, at)| *at);
                let duration = Duration::from_secs(
                    u64::try_from(record.lease_duration_seconds.max(1)).unwrap_or(1),
                );
                if now.saturating_duration_since(since) >= duration {
                    Step::Acquire
                } else {
                    Step::Follow {
                        holder: h.to_owned(),
                    }
                }
            }
        }
    }
}

/// The record to write for `step` (`None` for [`Step::Follow`]).
pub fn next_record(
    step: &Step,
    me: &str,
    current: Option<&LeaseRecord>,
    lease_duration: Duration,
    now_rfc3339: &str,
) -> Option<LeaseRecord> {
    let seconds = i32::try_from(lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
    match step {
        Step::Follow { .. } => None,
        Step::Create => Some(LeaseRecord {
            holder: Some(me.to_owned()),
            lease_duration_seconds: seconds,
            renew_time: Some(now_rfc3339.to_owned()),
            acquire_time: Some(now_rfc3339.to_owned()),
            transitions: 0,
        }),
        Step::Renew => {
            let mut r = current.cloned().unwrap_or_default();
            r.holder = Some(me.to_owned());
            r.lease_duration_seconds = seconds;
            r.renew_time = Some(now_rfc3339.to_owned());
            Some(r)
        }
        Step::Acquire => {
            let prev = current.cloned().unwrap_or_default();
            Some(LeaseRecord {
                holder: Some(me.to_owned()),
                lease_duration_seconds: seconds,
                renew_time: Some(now_rfc3339.to_owned()),
                acquire_time: Some(now_rfc3339.to_owned()),
                transitions: prev.transitions
                    + i32::from(prev.holder.is_some_and(|h| !h.is_empty())),
            })
        }
    }
}

/// The record to write when the holder steps down on shutdown (client-go `ReleaseOnCancel`):
/// no holder, so a standby takes over on its next try instead of after `leaseDuration`.
pub fn released(current: &LeaseRecord, now_rfc3339: &str) -> LeaseRecord {
    LeaseRecord {
        holder: None,
        lease_duration_seconds: 1,
        renew_time: Some(now_rfc3339.to_owned()),
        acquire_time: Some(now_rfc3339.to_owned()),
        transitions: current.transitions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(h: &str, renew: &str) -> LeaseRecord {
        LeaseRecord {
            holder: Some(h.into()),
            lease_duration_seconds: 15,
            renew_time: Some(renew.into()),
            acquire_time: Some("t0".into()),
            transitions: 2,
        }
    }

    #[test]
    fn decisions() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut o = Observer::default();
        assert_eq!(o.decide("me", None, t0), Step::Create);
        assert_eq!(
            o.decide("me", Some((&held_by("me", "r1"), "1")), t0),
            Step::Renew
        );
        let free = LeaseRecord {
            holder: Some(String::new()),
            ..held_by("x", "r1")
        };
        assert_eq!(o.decide("me", Some((&free, "2")), t0), Step::Acquire);

        // Another holder that keeps renewing is followed forever.
        let mut o = Observer::default();
        let follow = Step::Follow {
            holder: "other".into(),
        };
        let other = |renew: &str| held_by("other", renew);
        assert_eq!(o.decide("me", Some((&other("r1"), "5")), t0), follow);
        assert_eq!(
            o.decide("me", Some((&other("r1"), "5")), t0 + s(10)),
            follow
        );
        assert_eq!(
            o.decide("me", Some((&other("r2"), "6")), t0 + s(14)),
            follow
        );
        // …measured from when *we* saw the record change, not from its renewTime.
        assert_eq!(
            o.decide("me", Some((&other("r2"), "6")), t0 + s(28)),
            follow
        );
        // A write that left the record equal still counts (the resourceVersion moved).
        assert_eq!(
            o.decide("me", Some((&other("r2"), "7")), t0 + s(29)),
            follow
        );
        assert_eq!(
            o.decide("me", Some((&other("r2"), "7")), t0 + s(43)),
            follow
        );
        assert_eq!(
            o.decide("me", Some((&other("r2"), "7")), t0 + s(44)),
            Step::Acquire
        );
    }

    #[test]
    fn records_written() {
        let d = Duration::from_secs(15);
        let cur = held_by("other", "r1");
        let acquired = next_record(&Step::Acquire, "me", Some(&cur), d, "now").unwrap();
        assert_eq!(acquired.holder.as_deref(), Some("me"));
        assert_eq!(acquired.transitions, 3);
        assert_eq!(acquired.acquire_time.as_deref(), Some("now"));
        let mine = held_by("me", "r1");
        let renewed = next_record(&Step::Renew, "me", Some(&mine), d, "now").unwrap();
        assert_eq!(renewed.acquire_time.as_deref(), Some("t0"));
        assert_eq!(renewed.renew_time.as_deref(), Some("now"));
        assert_eq!(renewed.transitions, 2);
        let created = next_record(&Step::Create, "me", None, d, "now").unwrap();
        assert_eq!(
            (created.transitions, created.lease_duration_seconds),
            (0, 15)
        );
        assert_eq!(
            next_record(
                &Step::Follow { holder: "x".into() },
                "me",
                Some(&cur),
                d,
                "now"
            ),
            None
        );
        let rel = released(&renewed, "later");
        assert_eq!(rel.holder, None);
        assert_eq!(rel.lease_duration_seconds, 1);
    }
}
