//! Whether a controller coordinates `action: restart` now (docs/restart.md, "Without a
//! controller"): the agent reads the controller's Lease while a restart request of its waits,
//! and a Lease that is absent, has no `holderIdentity`, or was not renewed within its
//! `leaseDurationSeconds` means that nothing grants the request (Warning
//! [`UNCOORDINATED`], once per request). Pure: the Lease's fields and the wall clock in.
//!
//! The agent compares the controller's `renewTime` with its own clock, so a skew between
//! the two nodes moves the verdict by that skew; it only decides whether a Warning is given,
//! never whether a restart happens (the grant alone decides that).

use jiff::{SignedDuration, Timestamp};
use std::time::Duration;

/// The Warning's reason.
pub const UNCOORDINATED: &str = "RestartUncoordinated";

/// The first re-check of a Lease that had a holder.
pub const FIRST_RECHECK: Duration = Duration::from_secs(15);
/// The longest wait between two checks.
pub const MAX_RECHECK: Duration = Duration::from_secs(300);

/// The Lease's fields that matter here (`coordination.k8s.io/v1` `LeaseSpec`).
#[derive(Clone, Copy, Debug)]
pub struct LeaseFields<'a> {
    pub holder: Option<&'a str>,
    /// `renewTime` (RFC 3339 micro time).
    pub renew_time: Option<&'a str>,
    pub lease_duration_seconds: i32,
}

/// Who grants restarts now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coordination {
    /// A controller holds the Lease and renewed it within its duration.
    Held { holder: String },
    /// There is no Lease: no controller ever ran with leader election here.
    NoLease,
    /// The Lease has no holder (the last one released it).
    NoHolder,
    /// The holder did not renew it within `leaseDurationSeconds` (or never wrote a
    /// `renewTime` that can be read).
    Expired { holder: String },
}

impl Coordination {
    pub fn coordinated(&self) -> bool {
        matches!(self, Self::Held { .. })
    }

    /// Why nothing grants, for the Warning (`lease`: "namespace/name"); `None` when held.
    pub fn why(&self, lease: &str) -> Option<String> {
        match self {
            Self::Held { .. } => None,
            Self::NoLease => Some(format!("the Lease {lease} does not exist")),
            Self::NoHolder => Some(format!("the Lease {lease} has no holder")),
            Self::Expired { holder } => Some(format!(
                "the Lease {lease} of {holder} expired (not renewed within its leaseDurationSeconds)"
            )),
        }
    }
}

/// Who grants, from the Lease (`None`: there is none) at `now`.
pub fn coordination(lease: Option<LeaseFields<'_>>, now: Timestamp) -> Coordination {
    let Some(lease) = lease else {
        return Coordination::NoLease;
    };
    let Some(holder) = lease.holder.filter(|h| !h.is_empty()) else {
        return Coordination::NoHolder;
    };
    let holder = holder.to_owned();
    let renewed = lease.renew_time.and_then(|t| t.parse::<Timestamp>().ok());
    let duration = SignedDuration::from_secs(i64::from(lease.lease_duration_seconds.max(1)));
    match renewed.and_then(|r| r.checked_add(duration).ok()) {
        Some(until) if now < until => Coordination::Held { holder },
        _ => Coordination::Expired { holder },
    }
}

/// How long to wait before the check after `checks` checks that found a holder: 15 s,
/// doubling, at most 5 min.
pub fn recheck_after(checks: u32) -> Duration {
    FIRST_RECHECK
        .saturating_mul(1u32 << checks.min(16))
        .min(MAX_RECHECK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn who_grants_from_the_leases_fields_and_the_clock() {
        let now = at("2026-11-29T10:00:00Z");
        let lease = |holder, renew_time, lease_duration_seconds| {
            Some(LeaseFields {
                holder,
                renew_time,
                lease_duration_seconds,
            })
        };
        let held = Coordination::Held {
            holder: "c-1".into(),
        };
        let expired = Coordination::Expired {
            holder: "c-1".into(),
        };
        let cases = [
            ("no Lease", None, Coordination::NoLease),
            (
                "no holder",
                lease(None, Some("2026-11-29T09:59:59Z"), 15),
                Coordination::NoHolder,
            ),
            (
                "an empty holder",
                lease(Some(""), Some("2026-11-29T09:59:59Z"), 15),
                Coordination::NoHolder,
            ),
            (
                "renewed 1 s ago, 15 s",
                lease(Some("c-1"), Some("2026-11-29T09:59:59Z"), 15),
                held.clone(),
            ),
            (
                "renewed 14.999999 s ago",
                lease(Some("c-1"), Some("2026-11-29T09:59:45.000001Z"), 15),
                held.clone(),
            ),
            (
                "renewed exactly 15 s ago: passed",
                lease(Some("c-1"), Some("2026-11-29T09:59:45Z"), 15),
                expired.clone(),
            ),
            (
                "renewed a minute ago",
                lease(Some("c-1"), Some("2026-11-29T09:59:00Z"), 15),
                expired.clone(),
            ),
            (
                "a long lease renewed a minute ago",
                lease(Some("c-1"), Some("2026-11-29T09:59:00Z"), 120),
                held.clone(),
            ),
            (
                "renewed in the future (skew)",
                lease(Some("c-1"), Some("2026-11-29T10:00:05Z"), 15),
                held.clone(),
            ),
            (
                "micro time with an offset",
                lease(Some("c-1"), Some("2026-11-29T11:59:59.5+02:00"), 15),
                held,
            ),
            (
                "no renewTime",
                lease(Some("c-1"), None, 15),
                expired.clone(),
            ),
            (
                "an unreadable renewTime",
                lease(Some("c-1"), Some("yesterday"), 15),
                expired.clone(),
            ),
            (
                "a duration of 0 counts as 1 s",
                lease(Some("c-1"), Some("2026-11-29T09:59:59Z"), 0),
                expired,
            ),
        ];
        for (what, lease, want) in cases {
            assert_eq!(coordination(lease, now), want, "{what}");
        }
    }

    #[test]
    fn only_a_held_lease_coordinates_and_the_others_say_why() {
        let lease = "reloadlet-system/reloadlet-controller";
        assert!(Coordination::Held { holder: "c".into() }.coordinated());
        assert_eq!(Coordination::Held { holder: "c".into() }.why(lease), None);
        for (c, words) in [
            (Coordination::NoLease, "does not exist"),
            (Coordination::NoHolder, "has no holder"),
            (
                Coordination::Expired {
                    holder: "c-1".into(),
                },
                "of c-1 expired",
            ),
        ] {
            assert!(!c.coordinated());
            let why = c.why(lease).unwrap();
            assert!(why.contains(lease) && why.contains(words), "{why}");
        }
    }

    #[test]
    fn re_checks_back_off_to_five_minutes() {
        let secs: Vec<u64> = (0..7).map(|n| recheck_after(n).as_secs()).collect();
        assert_eq!(secs, [15, 30, 60, 120, 240, 300, 300]);
        assert_eq!(recheck_after(u32::MAX), MAX_RECHECK);
    }
}
