//! Wall time for pacing, read from a monotonic clock: one wall-clock reading at start plus the
//! time elapsed since on the caller's clock (Tokio's, in the agent and the controller), so a
//! paused clock drives windows and intervals in tests. NTP's frequency corrections apply to
//! both clocks (CLOCK_MONOTONIC is slewed like CLOCK_REALTIME, clock_gettime(2)); a step of
//! the wall clock after start is not followed until the next restart.

use jiff::{SignedDuration, Timestamp};
use std::time::{Duration, Instant};

/// Wall time on a monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    wall: Timestamp,
    mono: Instant,
}

/// Nothing is held longer than this before it is looked at again (a window a year away still
/// wakes the loop, harmlessly, once a day).
const LONGEST_SLEEP: Duration = Duration::from_secs(86_400);

impl WallClock {
    pub fn new(wall: Timestamp, mono: Instant) -> Self {
        Self { wall, mono }
    }

    /// The wall time at `t`.
    pub fn at(&self, t: Instant) -> Timestamp {
        let elapsed = t.saturating_duration_since(self.mono);
        SignedDuration::try_from(elapsed)
            .ok()
            .and_then(|d| self.wall.checked_add(d).ok())
            .unwrap_or(Timestamp::MAX)
    }

    /// When, on the agent's clock, the wall time `at` comes (`now` at the earliest, a day
    /// from `now` at the latest).
    pub fn instant(&self, at: Timestamp, now: Instant) -> Instant {
        let ahead = at.duration_since(self.at(now));
        let ahead = Duration::try_from(ahead).unwrap_or(Duration::ZERO);
        now + ahead.min(LONGEST_SLEEP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_time_follows_the_monotonic_clock_both_ways() {
        let mono = Instant::now();
        let wall: Timestamp = "2026-11-26T12:00:00Z".parse().unwrap();
        let clock = WallClock::new(wall, mono);
        let later = mono + Duration::from_secs(90);
        assert_eq!(clock.at(later), "2026-11-26T12:01:30Z".parse().unwrap());
        assert_eq!(
            clock.instant("2026-11-26T12:01:30Z".parse().unwrap(), mono),
            later
        );
        // In the past: now; far ahead: a day at most.
        assert_eq!(clock.instant(wall, later), later);
        assert_eq!(
            clock.instant(Timestamp::MAX, mono),
            mono + Duration::from_secs(86_400)
        );
    }
}
