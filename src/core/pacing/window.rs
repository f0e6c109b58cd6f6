//! Maintenance windows: a 5-field cron pattern marks when a window opens, a duration how long
//! it stays open, an IANA time zone where the pattern is read (docs/pacing.md).
//!
//! The pattern is evaluated by `croner` on `jiff` zoned times, so daylight-saving days behave
//! as Vixie cron does: a fixed time that falls in the spring-forward gap runs at the first
//! valid minute after it, one that falls in the autumn overlap runs once (croner's README,
//! "Daylight Saving Time (DST) Handling"). The time zone database is jiff's bundled copy of
//! the IANA database, so every node — and a `scratch` image — reads the same rules.

use croner::errors::CronError;
use croner::parser::{CronParser, Seconds};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};
use std::time::Duration;

/// A window that opens at each match of `pattern` (in `zone`) and stays open `duration`.
#[derive(Clone, Debug)]
pub struct MaintenanceWindow {
    cron: Cron,
    zone: TimeZone,
    zone_name: String,
    duration: SignedDuration,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WindowError {
    #[error(
        "{0:?} is not a 5-field cron pattern (minute hour day-of-month month day-of-week): {1}"
    )]
    Pattern(String, String),
    #[error("{0:?} is not an IANA time zone name (e.g. UTC, Europe/Berlin, America/New_York)")]
    Zone(String),
    #[error("a window must stay open for more than 0s")]
    ZeroDuration,
    #[error("{0:?} is too long for a window")]
    TooLong(Duration),
    #[error("{0:?} never matches a date (e.g. 30 February): the window would never open")]
    NeverOpens(String),
}

impl MaintenanceWindow {
    /// Parses `pattern` (exactly five fields; croner would also take seconds and years, which
    /// an annotation should not) read in the IANA zone `zone`, open `duration` from each match.
    pub fn new(pattern: &str, zone: &str, duration: Duration) -> Result<Self, WindowError> {
        if duration.is_zero() {
            return Err(WindowError::ZeroDuration);
        }
        let duration =
            SignedDuration::try_from(duration).map_err(|_| WindowError::TooLong(duration))?;
        let fields = pattern.split_whitespace().count();
        if fields != 5 {
            return Err(WindowError::Pattern(
                pattern.to_owned(),
                format!("{fields} fields"),
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .build()
            .parse(pattern)
            .map_err(|e: CronError| WindowError::Pattern(pattern.to_owned(), e.to_string()))?;
        // A pattern that names no real date would make every later search walk croner's whole
        // range (to year 5000) for each pending change; refuse it once, here, instead.
        if !ever_matches_a_date(&cron) {
            return Err(WindowError::NeverOpens(pattern.to_owned()));
        }
        let tz = jiff::tz::db()
            .get(zone)
            .map_err(|_| WindowError::Zone(zone.to_owned()))?;
        Ok(Self {
            cron,
            zone: tz,
            zone_name: zone.to_owned(),
            duration,
        })
    }

    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// When the window that contains `at` opened, if one does.
    pub fn open_since(&self, at: Timestamp) -> Option<Timestamp> {
        let now = at.to_zoned(self.zone.clone());
        // The latest opening at or before `at`; the window is open while `at` is before its end.
        let opened = self.cron.find_previous_occurrence(&now, true).ok()?;
        let opened = opened.timestamp();
        (at < opened + self.duration).then_some(opened)
    }

    pub fn is_open(&self, at: Timestamp) -> bool {
        self.open_since(at).is_some()
    }

    /// `at` itself when the window is open, else when it next opens (`None`: the pattern never
    /// matches again, e.g. 30 February).
    pub fn next_open(&self, at: Timestamp) -> Option<Timestamp> {
        if self.is_open(at) {
            return Some(at);
        }
        let now: Zoned = at.to_zoned(self.zone.clone());
        self.cron
            .find_next_occurrence(&now, false)
            .ok()
            .map(|z| z.timestamp())
    }

    /// When the window open at `at` closes (`None` when it is closed at `at`).
    pub fn closes(&self, at: Timestamp) -> Option<Timestamp> {
        self.open_since(at).map(|opened| opened + self.duration)
    }

    /// The next opening, written in the window's zone (for Events and `explain`).
    pub fn describe_next(&self, at: Timestamp) -> String {
        match self.next_open(at) {
            Some(t) if t == at => "open now".to_owned(),
            Some(t) => t
                .to_zoned(self.zone.clone())
                .strftime("%Y-%m-%d %H:%M %Z")
                .to_string(),
            None => "never".to_owned(),
        }
    }
}

/// Whether the day part of `cron` (day of month, month, day of week, `L`, `W`, `#`) matches
/// some date. Every such match depends only on whether the year is a leap year and on the
/// weekday of its first day, and every combination of the two occurs within 28 consecutive
/// years of the Gregorian calendar between 1901 and 2099, so 28 years answer for all of them
/// (about 10,000 cheap checks, microseconds). The hour and minute fields of a parsed pattern
/// always hold a value.
fn ever_matches_a_date(cron: &Cron) -> bool {
    let pattern = &cron.pattern;
    let first = jiff::civil::date(2024, 1, 1);
    let last = jiff::civil::date(2052, 1, 1);
    first
        .series(jiff::Span::new().days(1))
        .take_while(|d| *d < last)
        .any(|d| {
            let (year, month, day) = (i32::from(d.year()), d.month() as u32, d.day() as u32);
            let weekday =
                croner::Weekday::from_days_from_sunday(d.weekday().to_sunday_zero_offset() as u32);
            pattern.month_match(month).unwrap_or(false)
                && pattern
                    .day_match(year, month, day, weekday)
                    .unwrap_or(false)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn open_and_next_in_utc() {
        // Every day at 02:00 for an hour.
        let w = MaintenanceWindow::new("0 2 * * *", "UTC", HOUR).expect("valid");
        assert!(!w.is_open(ts("2026-11-26T01:59:59Z")));
        assert!(w.is_open(ts("2026-11-26T02:00:00Z")));
        assert!(w.is_open(ts("2026-11-26T02:59:59Z")));
        assert!(!w.is_open(ts("2026-11-26T03:00:00Z")));
        assert_eq!(
            w.next_open(ts("2026-11-26T03:00:00Z")),
            Some(ts("2026-11-27T02:00:00Z"))
        );
        assert_eq!(
            w.next_open(ts("2026-11-26T02:30:00Z")),
            Some(ts("2026-11-26T02:30:00Z"))
        );
        assert_eq!(
            w.closes(ts("2026-11-26T02:30:00Z")),
            Some(ts("2026-11-26T03:00:00Z"))
        );
        assert_eq!(w.closes(ts("2026-11-26T04:00:00Z")), None);
    }

    #[test]
    fn weekdays_in_a_named_zone() {
        // Saturdays and Sundays 22:00 Berlin time (CET = UTC+1 in November), 2 hours.
        let w = MaintenanceWindow::new("0 22 * * 6,0", "Europe/Berlin", 2 * HOUR).expect("valid");
        // 2026-11-26 is a Thursday; next Saturday 28th 22:00 CET = 21:00 UTC.
        assert_eq!(
            w.next_open(ts("2026-11-26T12:00:00Z")),
            Some(ts("2026-11-28T21:00:00Z"))
        );
        // Open across midnight until 00:00 Sunday CET.
        assert!(w.is_open(ts("2026-11-28T22:59:00Z")));
        assert!(!w.is_open(ts("2026-11-28T23:00:00Z")));
    }

    #[test]
    fn spring_forward_gap_runs_after_the_gap() {
        // 2027-03-28: Europe/Berlin jumps 02:00 CET → 03:00 CEST; 02:30 does not exist that day.
        let w = MaintenanceWindow::new("30 2 * * *", "Europe/Berlin", HOUR).expect("valid");
        let next = w
            .next_open(ts("2027-03-27T12:00:00Z"))
            .expect("a next opening");
        // Vixie-cron behaviour: the fixed-time job runs at the first valid minute after the
        // gap, 03:00 CEST = 01:00 UTC, that same day (never skipped).
        assert_eq!(next, ts("2027-03-28T01:00:00Z"));
        // The day before and after: 02:30 CET = 01:30 UTC, 02:30 CEST = 00:30 UTC.
        assert_eq!(
            w.next_open(ts("2027-03-26T12:00:00Z")),
            Some(ts("2027-03-27T01:30:00Z"))
        );
        assert_eq!(
            w.next_open(ts("2027-03-28T12:00:00Z")),
            Some(ts("2027-03-29T00:30:00Z"))
        );
    }

    #[test]
    fn fall_back_overlap_opens_once() {
        // 2026-11-01: America/New_York falls back 02:00 EDT → 01:00 EST; 01:30 happens twice.
        let w = MaintenanceWindow::new("30 1 * * *", "America/New_York", HOUR / 2).expect("valid");
        let first = w.next_open(ts("2026-10-31T12:00:00Z")).expect("opens");
        // 01:30 EDT = 05:30 UTC.
        assert_eq!(first, ts("2026-11-01T05:30:00Z"));
        // After that window closed (06:00 UTC = 01:00 EST), the repeated 01:30 EST is not a
        // second opening that day: the next one is 2 November 01:30 EST = 06:30 UTC.
        assert_eq!(
            w.next_open(ts("2026-11-01T06:00:00Z")),
            Some(ts("2026-11-02T06:30:00Z"))
        );
    }

    #[test]
    fn bad_input_is_refused_with_the_reason() {
        assert!(matches!(
            MaintenanceWindow::new("0 2 * *", "UTC", HOUR),
            Err(WindowError::Pattern(..))
        ));
        assert!(matches!(
            MaintenanceWindow::new("0 0 2 * * *", "UTC", HOUR),
            Err(WindowError::Pattern(..))
        ));
        assert!(matches!(
            MaintenanceWindow::new("99 2 * * *", "UTC", HOUR),
            Err(WindowError::Pattern(..))
        ));
        assert_eq!(
            MaintenanceWindow::new("0 2 * * *", "Mars/Olympus", HOUR).err(),
            Some(WindowError::Zone("Mars/Olympus".into()))
        );
        assert_eq!(
            MaintenanceWindow::new("0 2 * * *", "UTC", Duration::ZERO).err(),
            Some(WindowError::ZeroDuration)
        );
    }

    #[test]
    fn a_pattern_that_names_no_date_is_refused_and_rare_ones_are_kept() {
        for never in ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"] {
            assert_eq!(
                MaintenanceWindow::new(never, "UTC", HOUR).err(),
                Some(WindowError::NeverOpens(never.into())),
                "{never}"
            );
        }
        // 29 February opens every four years; with a weekday as well (Vixie cron: either
        // field) it opens every Monday of February too.
        let leap = MaintenanceWindow::new("0 0 29 2 *", "UTC", HOUR).expect("valid");
        assert_eq!(
            leap.next_open(ts("2026-11-26T00:00:00Z")),
            Some(ts("2028-02-29T00:00:00Z"))
        );
        for rare in ["0 0 30 2 1", "0 0 L 2 *", "0 0 * 2 1#5", "0 0 LW * *"] {
            let w = MaintenanceWindow::new(rare, "UTC", HOUR).expect(rare);
            assert!(w.next_open(ts("2026-11-26T00:00:00Z")).is_some(), "{rare}");
        }
    }

    #[test]
    fn a_window_longer_than_its_period_is_always_open() {
        // Every minute, open for two: overlapping windows are fine.
        let w =
            MaintenanceWindow::new("* * * * *", "UTC", 2 * Duration::from_secs(60)).expect("valid");
        assert!(w.is_open(ts("2026-11-26T12:00:30Z")));
        assert_eq!(w.describe_next(ts("2026-11-26T12:00:30Z")), "open now");
    }
}
