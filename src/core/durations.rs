//! Durations a pod author writes, and the instants they lead to. Every duration read from an
//! annotation goes through [`parse_bounded`], so a tenant's `"300000000000y"` is a clear error
//! (a Warning Event and no action), and every deadline made from a duration through [`later`],
//! which saturates: `Instant + Duration` panics on overflow (`std::time::Instant`'s `Add`,
//! "overflow when adding duration to instant"), and a panic in a loop that serves every
//! namespace must never be a tenant's to cause.

use std::time::{Duration, Instant};

/// The longest duration any annotation may ask for: a week. Longer holds are an operator's
/// decision (flags), not a pod's.
pub const MAX_ANNOTATION_DURATION: Duration = Duration::from_secs(7 * 86_400);

/// The furthest ahead [`later`] ever puts a deadline: a year (far beyond any bounded input;
/// far below `Instant`'s range on every platform).
const FURTHEST: Duration = Duration::from_secs(365 * 86_400);

/// A duration as `humantime` reads it (`90s`, `10m`, `1h30m`), at most `max`.
pub fn parse_bounded(
    value: &str,
    max: Duration,
) -> Result<Duration, crate::core::invalid::Invalid> {
    let d = humantime::parse_duration(value.trim())
        .map_err(|e| format!("not a duration (e.g. 30s, 10m, 1h): {e}"))?;
    if d > max {
        return Err(crate::invalid!(
            "longer than the {} maximum",
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// `now + d`, never panicking: `d` is capped at a year, and an instant that cannot be
/// represented stays `now + a year` or, failing that, `now`.
pub fn later(now: Instant, d: Duration) -> Instant {
    let d = d.min(FURTHEST);
    now.checked_add(d).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_read_up_to_their_bound_and_refused_past_it() {
        let week = MAX_ANNOTATION_DURATION;
        for (value, want) in [
            ("10m", Ok(Duration::from_secs(600))),
            (" 1h30m ", Ok(Duration::from_secs(5_400))),
            ("7d", Ok(week)),
            ("0s", Ok(Duration::ZERO)),
        ] {
            assert_eq!(parse_bounded(value, week), want, "{value}");
        }
        for value in ["8d", "300000000000y", "99999999999999999999999s"] {
            let err = parse_bounded(value, week).unwrap_err();
            assert!(
                err.contains("maximum") || err.contains("not a duration"),
                "{value}: {err}"
            );
        }
        assert_eq!(
            parse_bounded("300000000000y", week).unwrap_err(),
            "longer than the 7days maximum"
        );
        assert!(parse_bounded("soon", week)
            .unwrap_err()
            .starts_with("not a duration"));
    }

    #[test]
    fn later_saturates_where_adding_would_panic() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let far = later(now, Duration::MAX);
        assert!(far > now);
        assert_eq!(far, now + FURTHEST);
    }
}
