//! Pacing and reporting of failing API watches: an exponential backoff that a relist does not
//! reset, the one `error!` that names what is missing, a metric and the readiness reason.
//!
//! Why not kube's `default_backoff()`: kube-runtime's `StreamBackoff::poll_next`
//! (src/utils/stream_backoff.rs) calls `Backoff::reset` on every `Ok` item, and the watcher
//! emits `Ok(Event::Init)` before every relist (`step_trampolined` in src/watcher.rs,
//! `State::Empty` → `Event::Init`). A list that always fails (403, 400) therefore restarts
//! at the minimum delay each time: one request about every second, forever, from every node.
//! [`WatchBackoff`] ignores those resets and starts over only after the watch delivered data
//! (the consumer calls [`Progress::made`]).

use crate::retry::{Backoff, Delays, Jitter};
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// First delay after a failure.
pub const MIN_DELAY: Duration = Duration::from_secs(1);
/// No delay is ever longer than this.
pub const MAX_DELAY: Duration = Duration::from_secs(300);

/// Set by the consumer when the watch delivered data; the next failure starts over at
/// [`MIN_DELAY`].
#[derive(Clone, Default)]
pub struct Progress(Arc<AtomicBool>);

impl Progress {
    pub fn made(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Doubles from 1 s with up to 100 % jitter (so N nodes spread out), capped at 5 minutes.
pub struct WatchBackoff {
    inner: Delays,
    progress: Progress,
}

/// backon's jitter adds a random 0..100 % of the current delay; with a 150 s ceiling the
/// longest waits spread over 150–300 s.
const POLICY: Backoff = Backoff::doubling(MIN_DELAY, Duration::from_secs(MAX_DELAY.as_secs() / 2))
    .jitter(Jitter::Lengthen);

impl WatchBackoff {
    pub fn new(progress: Progress) -> Self {
        Self {
            inner: POLICY.delays(),
            progress,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.progress.0.swap(false, Ordering::Relaxed) {
            self.inner.reset();
        }
        self.inner.next().map(|d| d.min(MAX_DELAY))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    /// Called by `StreamBackoff` on every `Ok` item, `Event::Init` included: ignored (see the
    /// module docs); [`Progress::made`] resets instead.
    fn reset(&mut self) {}
}

/// The HTTP status of a watcher error, when the API server answered one.
pub fn status_code(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    }
}

/// What a watch reads, for messages ("pods", "poddisruptionbudgets").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchedResource {
    pub resource: &'static str,
    /// The RBAC rule that grants it, as a user would write it.
    pub rule: &'static str,
}

pub const PODS: WatchedResource = WatchedResource {
    resource: "pods",
    rule: "apiGroups [\"\"], resources [pods], verbs [get, list, watch]",
};
pub const PDBS: WatchedResource = WatchedResource {
    resource: "poddisruptionbudgets",
    rule: "apiGroups [policy], resources [poddisruptionbudgets], verbs [get, list, watch]",
};

/// The one-line explanation of a failure, naming what is missing when the code says so.
pub fn explain_failure(what: WatchedResource, code: Option<u16>, message: &str) -> String {
    let r = what.resource;
    match code {
        Some(403) => format!(
            "RBAC: the ServiceAccount may not list {r} cluster-wide: grant {r} list/watch ({}) in reloadlet's ClusterRole (HTTP 403: {message})",
            what.rule
        ),
        Some(401) => format!(
            "the API server does not accept the ServiceAccount's credentials (HTTP 401): is the token mounted and unexpired? ({message})"
        ),
        Some(400) => format!("the API server refuses the {r} watch as invalid (HTTP 400: {message})"),
        Some(404) => format!("the API server does not serve {r} here (HTTP 404: {message})"),
        Some(code) => format!("listing {r} failed (HTTP {code}: {message})"),
        None => format!("listing {r} failed: {message}"),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiErrorLabels {
    pub resource: String,
    /// HTTP status, or `none` for network errors.
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

/// `reloadlet_api_errors_total{resource,code}` and
/// `reloadlet_api_consecutive_failures{resource}` (0 while the watch works).
#[derive(Clone, Default)]
pub struct ApiMetrics {
    pub errors: Family<ApiErrorLabels, Counter>,
    pub consecutive_failures: Family<ResourceLabels, Gauge>,
}

impl ApiMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "api_errors",
            "Failed API list/watch requests by resource and HTTP status (none: no answer)",
            m.errors.clone(),
        );
        registry.register(
            "api_consecutive_failures",
            "Failures of a resource's list/watch since it last delivered data (0: healthy)",
            m.consecutive_failures.clone(),
        );
        for resource in [PODS.resource, PDBS.resource] {
            m.consecutive_failures
                .get_or_create(&ResourceLabels {
                    resource: resource.into(),
                })
                .set(0);
        }
        m
    }
}

/// Follows one watch's failures: counts them, says what to log, and what readiness shows.
pub struct FailureTracker {
    what: WatchedResource,
    metrics: ApiMetrics,
    failures: u32,
}

/// What to do about one failure.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    /// Consecutive failures so far (1 on the first).
    pub count: u32,
    /// The one-line explanation.
    pub explanation: String,
}

impl FailureTracker {
    pub fn new(what: WatchedResource, metrics: ApiMetrics) -> Self {
        Self {
            what,
            metrics,
            failures: 0,
        }
    }

    pub fn on_error(&mut self, code: Option<u16>, message: &str) -> Failure {
        self.failures += 1;
        self.metrics
            .errors
            .get_or_create(&ApiErrorLabels {
                resource: self.what.resource.into(),
                code: code.map_or("none".into(), |c| c.to_string()),
            })
            .inc();
        self.gauge().set(self.failures as i64);
        Failure {
            count: self.failures,
            explanation: explain_failure(self.what, code, message),
        }
    }

    /// The watch delivered data; returns how many failures preceded it (0: none).
    pub fn on_success(&mut self) -> u32 {
        let n = std::mem::take(&mut self.failures);
        if n > 0 {
            self.gauge().set(0);
        }
        n
    }

    fn gauge(&self) -> Gauge {
        self.metrics
            .consecutive_failures
            .get_or_create(&ResourceLabels {
                resource: self.what.resource.into(),
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use kube::runtime::utils::Backoff as _;
    use kube::runtime::WatchStreamExt;

    /// What kube's watcher does against an API server that refuses the list: `Init`, then
    /// the error, forever.
    fn refused_forever() -> impl futures::Stream<Item = Result<&'static str, &'static str>> {
        futures::stream::iter(std::iter::repeat_n([Ok("init"), Err("403")], 10_000).flatten())
    }

    async fn attempts_within(
        window: Duration,
        backoff: impl kube::runtime::utils::Backoff,
    ) -> usize {
        let stream = refused_forever().backoff(backoff);
        futures::pin_mut!(stream);
        let start = tokio::time::Instant::now();
        let mut errors = 0;
        while let Some(item) = stream.next().await {
            if item.is_err() {
                errors += 1;
            }
            if start.elapsed() >= window {
                break;
            }
        }
        errors
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_that_always_fails_is_paced_despite_init_events() {
        // 30 minutes of a broken API: 1+2+4+…+256 s reaches 5-minute waits after ~9 tries,
        // jitter only lengthens them; at most 9 + 30/2.5 attempts, in practice far fewer.
        let window = Duration::from_secs(1800);
        let ours = attempts_within(window, WatchBackoff::new(Progress::default())).await;
        assert!((5..=20).contains(&ours), "{ours} list attempts in 30 min");
        // kube's default backoff, reset by every Init, tries about every second.
        let default = attempts_within(window, watcher::DefaultBackoff::default()).await;
        assert!(default > 900, "default backoff: {default} attempts");
    }

    #[test]
    fn delays_grow_to_five_minutes_and_restart_after_progress() {
        let progress = Progress::default();
        let mut b = WatchBackoff::new(progress.clone());
        let delays: Vec<Duration> = (0..14).map(|_| b.next().unwrap()).collect();
        assert!(
            delays[0] >= MIN_DELAY && delays[0] < 2 * MIN_DELAY,
            "{delays:?}"
        );
        assert!(delays.iter().all(|d| *d <= MAX_DELAY), "{delays:?}");
        assert!(delays[13] >= MAX_DELAY / 2, "{delays:?}");
        b.reset();
        assert!(
            b.next().unwrap() >= MAX_DELAY / 2,
            "a reset from Init is ignored"
        );
        progress.made();
        assert!(
            b.next().unwrap() < 2 * MIN_DELAY,
            "progress restarts the backoff"
        );
    }

    #[test]
    fn failures_are_explained_counted_and_cleared() {
        let metrics = ApiMetrics::default();
        let mut t = FailureTracker::new(PODS, metrics.clone());
        let first = t.on_error(Some(403), "pods is forbidden");
        assert_eq!(first.count, 1);
        assert!(
            first.explanation.starts_with(
                "RBAC: the ServiceAccount may not list pods cluster-wide: grant pods list/watch"
            ),
            "{}",
            first.explanation
        );
        assert_eq!(t.on_error(Some(403), "x").count, 2);
        let label = ApiErrorLabels {
            resource: "pods".into(),
            code: "403".into(),
        };
        assert_eq!(metrics.errors.get_or_create(&label).get(), 2);
        assert_eq!(t.on_success(), 2);
        assert_eq!(t.on_success(), 0);
        assert!(explain_failure(PDBS, Some(403), "no")
            .contains("grant poddisruptionbudgets list/watch"));
    }
}
