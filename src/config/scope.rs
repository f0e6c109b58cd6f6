//! Which pods a mode acts on (namespaces, label selector, dry run) and the value parsers
//! every mode shares.

use crate::core::filters::{NamespaceFilter, Scope};
use crate::core::label_selector::LabelSelector;
use clap::{Args, ValueEnum};

/// Which pods the agent acts on, and whether it acts at all: shared by the agent and
/// `explain`, so both read the same flags and environment.
#[derive(Debug, Args, Clone, Default)]
pub struct ScopeArgs {
    /// Only act on pods in these namespaces (comma-separated; default: all).
    #[arg(long, env = "RELOADLET_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Never act on pods in these namespaces (comma-separated; wins over --namespaces).
    #[arg(long, env = "RELOADLET_EXCLUDE_NAMESPACES", value_delimiter = ',')]
    pub exclude_namespaces: Vec<String>,
    /// Only act on pods matching this label selector (kubectl -l syntax, e.g. `app in (web,api),tier!=db`).
    #[arg(long, env = "RELOADLET_POD_SELECTOR")]
    pub pod_selector: Option<String>,
    /// Decide and log, act on nothing (evictions are sent with dryRun=All).
    #[arg(long, env = "RELOADLET_DRY_RUN")]
    pub dry_run: bool,
}

impl ScopeArgs {
    /// Validates the selector and builds the filters (one-line error).
    pub fn scope(&self) -> Result<Scope, crate::core::invalid::Invalid> {
        let selector = match &self.pod_selector {
            None => None,
            Some(sel) if sel.trim().is_empty() => return Err("--pod-selector is empty".into()),
            Some(sel) => Some(parse_pod_selector(sel)?),
        };
        Ok(Scope {
            namespaces: namespace_filter(&self.namespaces, &self.exclude_namespaces),
            selector,
            dry_run: self.dry_run,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `--pod-selector`, parsed as the API server would (one-line error naming the flag): shared
/// by the agent, `explain` and the controller, so a selector that cannot work stops each at
/// startup instead of failing every list.
pub fn parse_pod_selector(sel: &str) -> Result<LabelSelector, crate::core::invalid::Invalid> {
    LabelSelector::parse(sel)
        .map_err(|e| crate::invalid!("--pod-selector {sel:?} is not a valid label selector: {e}"))
}

/// `--namespaces` / `--exclude-namespaces` as a filter (blank entries dropped).
pub fn namespace_filter(include: &[String], exclude: &[String]) -> NamespaceFilter {
    let clean = |v: &[String]| -> std::collections::BTreeSet<String> {
        v.iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    NamespaceFilter {
        include: clean(include),
        exclude: clean(exclude),
    }
}

/// A byte count written as a Kubernetes quantity, read like apimachinery's
/// `resource.ParseQuantity` (kubernetes/kubernetes,
/// staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go): a decimal number and one
/// suffix, binary (`Ki Mi Gi Ti Pi Ei`), decimal (`k M G T P E`, `m` = 1/1000) or an exponent
/// (`e3`, `E3`). Suffixes are case-sensitive (`24mi` is refused, as the API server does). A
/// fraction of a byte rounds up, like `Quantity.Value()`.
pub fn parse_byte_quantity(s: &str) -> Result<u64, crate::core::invalid::Invalid> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let number = number.strip_prefix('+').unwrap_or(number);
    if t.starts_with('-') {
        return Err(crate::invalid!("{s:?}: a byte count cannot be negative"));
    }
    let valid_number = !number.is_empty()
        && number.chars().filter(|c| *c == '.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    if !valid_number {
        return Err(crate::invalid!(
            "{s:?} is not a quantity (expected a number and an optional suffix, e.g. 64Mi, 1Gi, 500k, 1048576)"
        ));
    }
    // value = mantissa * num / den
    let (num, den): (u128, u128) = match suffix {
        "" => (1, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        e if (e.starts_with('e') || e.starts_with('E'))
            && e.len() > 1
            && e[1..].chars().all(|c| c.is_ascii_digit()) =>
        {
            let exp: u32 = e[1..]
                .parse()
                .map_err(|_| format!("{s:?}: exponent too large"))?;
            (
                10u128
                    .checked_pow(exp)
                    .ok_or(format!("{s:?}: exponent too large"))?,
                1,
            )
        }
        other => {
            let hint = match other.to_ascii_lowercase().as_str() {
                "ki" => " (did you mean Ki?)",
                "mi" => " (did you mean Mi?)",
                "gi" => " (did you mean Gi?)",
                "ti" => " (did you mean Ti?)",
                "kb" | "kib" => " (did you mean Ki or k?)",
                "mb" | "mib" => " (did you mean Mi or M?)",
                "gb" | "gib" => " (did you mean Gi or G?)",
                _ => "",
            };
            return Err(crate::invalid!(
                "{s:?}: unknown suffix {other:?}{hint}; quantity suffixes are case-sensitive: Ki Mi Gi Ti Pi Ei (powers of 1024) or k M G T P E (powers of 1000)"
            ));
        }
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits
        .trim_start_matches('0')
        .parse()
        .or_else(|e| {
            if digits.chars().all(|c| c == '0') {
                Ok(0)
            } else {
                Err(e)
            }
        })
        .map_err(|_| crate::invalid!("{s:?} is too large"))?;
    let scale = 10u128
        .checked_pow(frac.len() as u32)
        .ok_or(format!("{s:?} has too many decimals"))?;
    let total_num = mantissa
        .checked_mul(num)
        .ok_or(format!("{s:?} is too large"))?;
    let total_den = scale * den;
    let value = total_num.div_ceil(total_den);
    u64::try_from(value).map_err(|_| crate::invalid!("{s:?} is too large"))
}

/// The pacing flags (docs/pacing.md), shared by the agent and the controller so both read the
/// same names and environment.
#[derive(Debug, Args, Clone)]
pub struct PacingArgs {
    /// The flap breaker: more than <count> actions on one pod within <window> hold it until
    /// its sources are quiet for <window> (e.g. 10/10m, 3/1m; `off` turns it off). A pod's
    /// `reloadlet.io/flap-threshold` overrides it.
    #[arg(long, env = "RELOADLET_FLAP_THRESHOLD", default_value = "10/10m")]
    pub flap_threshold: String,
    /// The IANA time zone maintenance windows (`reloadlet.io/window`) are read in, unless a
    /// pod sets `reloadlet.io/window-timezone`.
    #[arg(long, env = "RELOADLET_TIME_ZONE", default_value = "UTC")]
    pub time_zone: String,
    /// A change deferred to a maintenance window is acted on at the latest this long after it
    /// was seen (default: it waits for the window however long).
    #[arg(long, env = "RELOADLET_MAX_DEFER", value_parser = humantime::parse_duration)]
    pub max_defer: Option<std::time::Duration>,
}

impl PacingArgs {
    /// Validates the flags (one-line errors naming the flag); `debounce`: the mode's
    /// `--debounce` (0 for the controller).
    pub fn defaults(
        &self,
        debounce: std::time::Duration,
    ) -> Result<crate::core::pacing::PacingDefaults, crate::core::invalid::Invalid> {
        let flap = crate::core::pacing::FlapThreshold::parse(&self.flap_threshold)
            .map_err(|e| format!("--flap-threshold: {e}"))?;
        let zone = self.time_zone.trim();
        // jiff's bundled IANA database, the one maintenance windows read (core/pacing/window.rs).
        if jiff::tz::db().get(zone).is_err() {
            return Err(crate::invalid!(
                "--time-zone {zone:?} is not an IANA time zone name (e.g. UTC, Europe/Berlin)"
            ));
        }
        if self.max_defer.is_some_and(|d| d.is_zero()) {
            return Err("--max-defer must be longer than 0s (leave it unset for never)".into());
        }
        Ok(crate::core::pacing::PacingDefaults {
            debounce,
            flap,
            time_zone: zone.to_owned(),
            max_defer: self.max_defer,
        })
    }
}

#[cfg(test)]
mod pacing_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: PacingArgs,
    }

    fn defaults(
        argv: &[&str],
    ) -> Result<crate::core::pacing::PacingDefaults, crate::core::invalid::Invalid> {
        Wrap::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?
            .args
            .defaults(std::time::Duration::ZERO)
    }

    #[test]
    fn pacing_flags_default_and_validate() {
        let d = defaults(&[]).expect("defaults");
        assert_eq!(d.flap, Some(crate::core::pacing::FlapThreshold::DEFAULT));
        assert_eq!((d.time_zone.as_str(), d.max_defer), ("UTC", None));
        let d = defaults(&[
            "--flap-threshold=off",
            "--time-zone=Europe/Berlin",
            "--max-defer=2h",
        ])
        .expect("valid");
        assert_eq!(d.flap, None);
        assert_eq!(d.time_zone, "Europe/Berlin");
        assert_eq!(d.max_defer, Some(std::time::Duration::from_secs(7200)));
        for (argv, flag) in [
            (["--flap-threshold=10"], "--flap-threshold"),
            (["--time-zone=Moon/Base"], "--time-zone"),
            (["--max-defer=0s"], "--max-defer"),
        ] {
            let e = defaults(&argv).expect_err("refused");
            assert!(e.contains(flag), "{e}");
        }
    }
}
