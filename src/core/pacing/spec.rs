//! A pod's pacing, read from its `reloadlet.io/*` pacing annotations over the flags' defaults.
//!
//! Bad input is refused whole: an unparsable duration or pattern, an unknown zone, a zero
//! window is a [`PacingError`] naming the annotation and its value, and the caller acts on
//! nothing for that pod until it is fixed — acting outside the window a user asked for is
//! worse than waiting.

use super::window::{MaintenanceWindow, WindowError};
use std::collections::BTreeMap;
use std::time::Duration;

pub const DEBOUNCE: &str = "reloadlet.io/debounce";
pub const MIN_INTERVAL: &str = "reloadlet.io/min-interval";
pub const FLAP_THRESHOLD: &str = "reloadlet.io/flap-threshold";
pub const WINDOW: &str = "reloadlet.io/window";
pub const WINDOW_DURATION: &str = "reloadlet.io/window-duration";
pub const WINDOW_TIMEZONE: &str = "reloadlet.io/window-timezone";
pub const WINDOW_ACTIONS: &str = "reloadlet.io/window-actions";

/// Every pacing annotation, for the known-key check.
pub const ANNOTATIONS: [&str; 7] = [
    DEBOUNCE,
    MIN_INTERVAL,
    FLAP_THRESHOLD,
    WINDOW,
    WINDOW_DURATION,
    WINDOW_TIMEZONE,
    WINDOW_ACTIONS,
];

/// The longest `reloadlet.io/debounce` (the contract: 0s–1h).
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(3600);
/// `reloadlet.io/window-duration` when absent.
pub const DEFAULT_WINDOW_DURATION: Duration = Duration::from_secs(3600);

/// `--flap-threshold` / `reloadlet.io/flap-threshold`: more than `count` actions on one
/// target within `window` opens a flapping episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlapThreshold {
    pub count: u32,
    pub window: Duration,
}

impl FlapThreshold {
    /// The default, `10/10m`.
    pub const DEFAULT: FlapThreshold = FlapThreshold {
        count: 10,
        window: Duration::from_secs(600),
    };

    /// `<count>/<window>` (`3/1m`, `10/10m`); `off` is `None`.
    pub fn parse(s: &str) -> Result<Option<FlapThreshold>, crate::core::invalid::Invalid> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let (count, window) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not <count>/<window> (e.g. 10/10m) or \"off\""))?;
        let count: u32 = count
            .trim()
            .parse()
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| format!("{s:?}: the count must be a whole number above 0"))?;
        let window = parse_duration(window)?;
        if window.is_zero() {
            return Err(crate::invalid!("{s:?}: the window must be longer than 0s"));
        }
        Ok(Some(FlapThreshold { count, window }))
    }
}

/// Which actions a maintenance window holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WindowActions {
    /// Evictions and rollouts (the default): the actions that replace pods.
    #[default]
    Disruptive,
    /// Signals and HTTP reloads too.
    All,
}

/// The flags every pod's pacing starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacingDefaults {
    /// `--debounce`.
    pub debounce: Duration,
    /// `--flap-threshold` (`None`: off).
    pub flap: Option<FlapThreshold>,
    /// `--time-zone` (an IANA name, checked at startup).
    pub time_zone: String,
    /// `--max-defer` (`None`: a deferred action waits for its window however long).
    pub max_defer: Option<Duration>,
}

impl Default for PacingDefaults {
    fn default() -> Self {
        Self {
            debounce: Duration::ZERO,
            flap: Some(FlapThreshold::DEFAULT),
            time_zone: "UTC".to_owned(),
            max_defer: None,
        }
    }
}

/// One pod's (or workload's) pacing.
#[derive(Clone, Debug)]
pub struct PacingSpec {
    pub debounce: Duration,
    /// `Duration::ZERO`: no minimum interval.
    pub min_interval: Duration,
    pub flap: Option<FlapThreshold>,
    pub window: Option<(MaintenanceWindow, WindowActions)>,
    pub max_defer: Option<Duration>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{annotation}: {value:?}: {reason}")]
pub struct PacingError {
    pub annotation: &'static str,
    pub value: String,
    pub reason: String,
}

impl PacingSpec {
    /// The pacing a pod without pacing annotations gets.
    pub fn from_defaults(defaults: &PacingDefaults) -> Self {
        Self {
            debounce: defaults.debounce,
            min_interval: Duration::ZERO,
            flap: defaults.flap,
            window: None,
            max_defer: defaults.max_defer,
        }
    }

    /// Reads the pacing annotations over `defaults`.
    pub fn parse(
        annotations: &BTreeMap<String, String>,
        defaults: &PacingDefaults,
    ) -> Result<Self, PacingError> {
        let mut spec = Self::from_defaults(defaults);
        let get = |k: &'static str| annotations.get(k).map(|v| (k, v));
        let err = |annotation: &'static str, value: &str, reason: String| PacingError {
            annotation,
            value: value.to_owned(),
            reason,
        };
        if let Some((k, v)) = get(DEBOUNCE) {
            let d = parse_duration(v).map_err(|r| err(k, v, r.to_string()))?;
            if d > MAX_DEBOUNCE {
                return Err(err(k, v, "longer than the 1h maximum".into()));
            }
            spec.debounce = d;
        }
        if let Some((k, v)) = get(MIN_INTERVAL) {
            spec.min_interval = parse_duration(v).map_err(|r| err(k, v, r.to_string()))?;
        }
        if let Some((k, v)) = get(FLAP_THRESHOLD) {
            spec.flap = FlapThreshold::parse(v).map_err(|r| err(k, v, r.to_string()))?;
        }
        let actions = match get(WINDOW_ACTIONS) {
            None => WindowActions::Disruptive,
            Some((_, v)) if v.trim().eq_ignore_ascii_case("all") => WindowActions::All,
            Some((_, v)) if v.trim().eq_ignore_ascii_case("disruptive") => {
                WindowActions::Disruptive
            }
            Some((k, v)) => {
                return Err(err(
                    k,
                    v,
                    "use \"disruptive\" (the default) or \"all\"".into(),
                ))
            }
        };
        let duration = match get(WINDOW_DURATION) {
            None => DEFAULT_WINDOW_DURATION,
            Some((k, v)) => parse_duration(v).map_err(|r| err(k, v, r.to_string()))?,
        };
        let zone = match get(WINDOW_TIMEZONE) {
            None => defaults.time_zone.as_str(),
            Some((_, v)) => v.trim(),
        };
        match get(WINDOW) {
            Some((k, pattern)) => {
                let window = MaintenanceWindow::new(pattern.trim(), zone, duration).map_err(
                    |e| match e {
                        WindowError::Zone(_) => match get(WINDOW_TIMEZONE) {
                            Some((tk, tv)) => err(tk, tv, e.to_string()),
                            None => err(k, pattern, e.to_string()),
                        },
                        WindowError::ZeroDuration | WindowError::TooLong(_) => {
                            let (dk, dv) = get(WINDOW_DURATION)
                                .map(|(dk, dv)| (dk, dv.as_str()))
                                .unwrap_or((WINDOW_DURATION, ""));
                            err(dk, dv, e.to_string())
                        }
                        WindowError::Pattern(..) | WindowError::NeverOpens(_) => {
                            err(k, pattern, e.to_string())
                        }
                    },
                )?;
                spec.window = Some((window, actions));
            }
            None => {
                // A window's details without the window itself are a mistake worth saying.
                for key in [WINDOW_DURATION, WINDOW_TIMEZONE, WINDOW_ACTIONS] {
                    if let Some((k, v)) = get(key) {
                        return Err(err(k, v, format!("has no effect without {WINDOW}")));
                    }
                }
            }
        }
        Ok(spec)
    }
}

/// A duration as `humantime` reads it (`90s`, `10m`, `1h30m`), at most a week
/// ([`crate::core::durations::MAX_ANNOTATION_DURATION`]).
pub fn parse_duration(s: &str) -> Result<Duration, crate::core::invalid::Invalid> {
    crate::core::durations::parse_bounded(s, crate::core::durations::MAX_ANNOTATION_DURATION)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_apply_without_annotations() {
        let d = PacingDefaults {
            debounce: Duration::from_millis(250),
            ..Default::default()
        };
        let spec = PacingSpec::parse(&ann(&[]), &d).expect("valid");
        assert_eq!(spec.debounce, Duration::from_millis(250));
        assert_eq!(spec.min_interval, Duration::ZERO);
        assert_eq!(spec.flap, Some(FlapThreshold::DEFAULT));
        assert!(spec.window.is_none());
    }

    #[test]
    fn annotations_override() {
        let spec = PacingSpec::parse(
            &ann(&[
                (DEBOUNCE, "2s"),
                (MIN_INTERVAL, "5m"),
                (FLAP_THRESHOLD, "3/1m"),
                (WINDOW, "0 2 * * *"),
                (WINDOW_DURATION, "30m"),
                (WINDOW_TIMEZONE, "Europe/Berlin"),
                (WINDOW_ACTIONS, "all"),
            ]),
            &PacingDefaults::default(),
        )
        .expect("valid");
        assert_eq!(spec.debounce, Duration::from_secs(2));
        assert_eq!(spec.min_interval, Duration::from_secs(300));
        assert_eq!(
            spec.flap,
            Some(FlapThreshold {
                count: 3,
                window: Duration::from_secs(60)
            })
        );
        let (window, actions) = spec.window.expect("a window");
        assert_eq!(window.zone_name(), "Europe/Berlin");
        assert_eq!(actions, WindowActions::All);
        let off = PacingSpec::parse(&ann(&[(FLAP_THRESHOLD, "off")]), &Default::default())
            .expect("valid");
        assert_eq!(off.flap, None);
    }

    #[test]
    fn bad_values_name_annotation_and_value() {
        // (annotations, the annotation named, the value named)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let cases: &[Case] = &[
            (&[(DEBOUNCE, "soon")], DEBOUNCE, "soon"),
            (&[(DEBOUNCE, "2h")], DEBOUNCE, "2h"),
            (&[(MIN_INTERVAL, "-1s")], MIN_INTERVAL, "-1s"),
            (&[(FLAP_THRESHOLD, "10")], FLAP_THRESHOLD, "10"),
            (&[(FLAP_THRESHOLD, "0/1m")], FLAP_THRESHOLD, "0/1m"),
            (&[(FLAP_THRESHOLD, "3/0s")], FLAP_THRESHOLD, "3/0s"),
            (&[(WINDOW, "every night")], WINDOW, "every night"),
            (
                &[(WINDOW, "0 2 * * *"), (WINDOW_TIMEZONE, "Moon/Base")],
                WINDOW_TIMEZONE,
                "Moon/Base",
            ),
            (
                &[(WINDOW, "0 2 * * *"), (WINDOW_DURATION, "0s")],
                WINDOW_DURATION,
                "0s",
            ),
            (
                &[(WINDOW, "0 2 * * *"), (WINDOW_ACTIONS, "some")],
                WINDOW_ACTIONS,
                "some",
            ),
            (&[(WINDOW_DURATION, "1h")], WINDOW_DURATION, "1h"),
        ];
        for (pairs, annotation, value) in cases {
            let e =
                PacingSpec::parse(&ann(pairs), &PacingDefaults::default()).expect_err("refused");
            assert_eq!(
                (e.annotation, e.value.as_str()),
                (*annotation, *value),
                "{e}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(annotation) && text.contains(value),
                "{text}"
            );
        }
    }

    #[test]
    fn the_default_zone_comes_from_the_flag() {
        let d = PacingDefaults {
            time_zone: "Asia/Tokyo".into(),
            ..Default::default()
        };
        let spec = PacingSpec::parse(&ann(&[(WINDOW, "0 3 * * *")]), &d).expect("valid");
        assert_eq!(spec.window.expect("window").0.zone_name(), "Asia/Tokyo");
    }
}
