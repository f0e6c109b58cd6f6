//! `/healthz` (the event loop turns), `/readyz` (watches armed, first pod list synced and
//! its signal targets looked up), `/metrics` (OpenMetrics 1.0 text, with its own content
//! type: [`crate::serve::metrics::CONTENT_TYPE`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What the HTTP server sees of the agent.
#[derive(Default)]
pub struct Health {
    ready: AtomicBool,
    /// Unix millis of the event loop's last turn.
    heartbeat_ms: AtomicU64,
    /// The loop is waiting for work (not stuck, however long ago its last turn was).
    idle: AtomicBool,
    /// Why the agent is not ready although it may have synced (the pod watch keeps failing).
    problem: Mutex<Option<String>>,
    /// The API requests refused with 401/403 that still stand (`super::denials`).
    denied: Mutex<Option<String>>,
}

impl Health {
    /// The loop is considered stuck when it has not turned for this long.
    pub const STALE: Duration = Duration::from_secs(30);

    pub fn beat(&self) {
        self.heartbeat_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// A loop that sleeps without a timer while nothing happens says when it waits
    /// (`true`) and when it works (`false`, which also beats): live while waiting, and
    /// while a turn is shorter than [`Self::STALE`].
    pub fn set_idle(&self, idle: bool) {
        if !idle {
            self.beat();
        }
        self.idle.store(idle, Ordering::Relaxed);
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// `Some(reason)`: `/readyz` answers 503 with it; `None` clears it.
    pub fn set_problem(&self, problem: Option<String>) {
        *self.problem.lock().unwrap_or_else(|e| e.into_inner()) = problem;
    }

    /// `Some(reason)`: refused API requests stand (`super::denials`); `None` clears it.
    pub fn set_denied(&self, denied: Option<String>) {
        *self.denied.lock().unwrap_or_else(|e| e.into_inner()) = denied;
    }

    pub fn is_ready(&self) -> bool {
        self.readiness().is_ok()
    }

    /// `Err(why)` while not ready.
    pub fn readiness(&self) -> Result<(), NotReady> {
        if let Some(d) = self
            .denied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(NotReady(d));
        }
        if let Some(p) = self
            .problem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(NotReady(p));
        }
        if self.ready.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err(NotReady("pod list not synced yet".into()))
        }
    }

    pub fn is_live(&self) -> bool {
        self.idle.load(Ordering::Relaxed)
            || now_ms().saturating_sub(self.heartbeat_ms.load(Ordering::Relaxed))
                < Self::STALE.as_millis() as u64
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    registry: Arc<Registry>,
}

pub fn router(health: Arc<Health>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AppState { health, registry })
}

async fn healthz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    if s.health.is_live() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "event loop stalled\n")
    }
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, String) {
    match s.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

/// The body is OpenMetrics text whatever the request's `Accept` says, labelled as such:
/// Prometheus (2.5 and later) picks its parser by the response's content type and parses
/// OpenMetrics whether or not it asked for it first; labelling this body as Prometheus 0.0.4
/// text would make it read every `_total` sample as untyped.
async fn metrics(
    State(s): State<AppState>,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::serve::metrics::CONTENT_TYPE,
        )],
        crate::serve::metrics::encode(&s.registry),
    )
}

impl crate::ports::Problems for Health {
    fn set_problem(&self, problem: Option<String>) {
        Health::set_problem(self, problem);
    }
}

/// Why `/readyz` fails: the sentence it answers with (a refused API request and the rule to
/// grant, a failing watch, a list not synced yet).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotReady(String);

impl NotReady {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_watch_makes_a_synced_agent_unready_with_its_reason() {
        let h = Health::default();
        assert_eq!(
            h.readiness().unwrap_err().as_str(),
            "pod list not synced yet"
        );
        h.set_ready(true);
        assert!(h.is_ready());
        h.set_problem(Some(
            "pod watch failing (2 consecutive failures): RBAC: …".into(),
        ));
        assert!(!h.is_ready());
        assert!(h
            .readiness()
            .unwrap_err()
            .as_str()
            .starts_with("pod watch failing"));
        h.set_problem(None);
        assert!(h.is_ready());
    }
}

#[cfg(test)]
mod idle_tests {
    use super::*;

    #[test]
    fn a_loop_waiting_for_work_is_live_however_long_ago_it_last_turned() {
        let h = Health::default();
        assert!(!h.is_live(), "never turned");
        h.set_idle(true);
        assert!(h.is_live(), "waiting without a timer");
        h.set_idle(false);
        assert!(h.is_live(), "just started a turn");
    }
}
