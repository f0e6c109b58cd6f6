//! The drain readiness gate around a restart (`core::drain_gate`, docs/restart.md): before
//! the stop signal the pod's condition `reloadlet.io/restart-drain` is set `False` (its Ready
//! condition follows, Services stop sending it traffic) and `reloadlet.io/drain` is waited;
//! after the stop the condition is set `True` again once the restarted container runs and
//! every container is ready (`ContainersReady`), or when `reloadlet.io/restart-timeout` has
//! passed without that: the gate never keeps a pod out of service for good (a pod that stays
//! unready is the grant's `RestartStuck`, issue #45 §2). At shutdown it is set `True` at once.

use crate::core::drain_gate::{back_in_service, GateCondition};
use crate::core::model::{ContainerId, PodInfo};
use crate::ports::{GateWriter, PatchError, PodRef};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the pod index is looked at while the restarted container starts.
const POLL: Duration = Duration::from_millis(200);

/// What became of the drain before a restart (said in the `Restarted` Event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drain {
    /// The pod does not declare the gate.
    NoGate,
    /// Taken out of service this long before the stop signal.
    Drained(Duration),
    /// The condition could not be set: restarted without the drain.
    Failed(String),
}

impl Drain {
    /// The Event's words on traffic (`""`: nothing to say).
    pub fn note(&self) -> String {
        match self {
            Drain::NoGate => "; traffic was not drained first (the pod has no readiness gate reloadlet.io/restart-drain)".into(),
            Drain::Drained(d) => format!(
                "; traffic was drained for {} first (readiness gate reloadlet.io/restart-drain False; set True again once the container is ready)",
                humantime::format_duration(*d)
            ),
            Drain::Failed(e) => format!(
                "; traffic was not drained first: the readiness gate reloadlet.io/restart-drain could not be set False ({e})"
            ),
        }
    }

    pub fn drained(&self) -> bool {
        matches!(self, Drain::Drained(_))
    }
}

/// The pods this agent holds a drain of (UID → how many containers): their condition
/// `False` is its own, not one a stopped agent left (`core::drain_gate::on_sight`).
#[derive(Clone, Default)]
pub struct Draining(Arc<Mutex<HashMap<String, usize>>>);

impl Draining {
    pub fn holds(&self, uid: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(uid)
    }

    /// Held until the returned guard is dropped.
    pub fn hold(&self, uid: &str) -> Held {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(uid.to_owned())
            .or_default() += 1;
        Held {
            of: self.clone(),
            uid: uid.to_owned(),
        }
    }
}

/// One drain held ([`Draining::hold`]).
pub struct Held {
    of: Draining,
    uid: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut map = self.of.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.uid);
            }
        }
    }
}

/// Takes the pod out of service and waits `wait`. `Err(NotFound)`: the pod is gone.
/// Cancelled (shutdown) in the wait: the condition is set back `True` and `Ok(None)`.
pub async fn take_out(
    gate: &dyn GateWriter,
    pod: &PodRef,
    container: &str,
    wait: Duration,
    stop: &CancellationToken,
) -> Result<Option<Drain>, PatchError> {
    match gate.set(pod, &GateCondition::draining(container)).await {
        Ok(()) => {}
        Err(PatchError::NotFound) => return Err(PatchError::NotFound),
        Err(e) => return Ok(Some(Drain::Failed(e.to_string()))),
    }
    tracing::info!(pod = %pod.full_name(), container, drain_s = wait.as_secs_f64(), action = "restart", "readiness gate reloadlet.io/restart-drain set False; draining");
    tokio::select! {
        _ = tokio::time::sleep(wait) => Ok(Some(Drain::Drained(wait))),
        _ = stop.cancelled() => {
            put_back(gate, pod, "reloadlet stopped before the restart; the container was not restarted").await;
            Ok(None)
        }
    }
}

/// Waits (at most `timeout`, polling `current`) until `container` was started again and
/// every container is ready, then sets the condition `True`; at once when `stop` is
/// cancelled. Nothing when the pod is gone. `held` is let go at the end.
#[allow(clippy::too_many_arguments)]
pub async fn bring_back(
    held: Held,
    gate: Arc<dyn GateWriter>,
    pod: PodRef,
    container: String,
    stopped: Option<ContainerId>,
    timeout: Duration,
    stop: CancellationToken,
    current: impl Fn(&str) -> Option<Arc<PodInfo>>,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let message = loop {
        let Some(now) = current(&pod.uid) else {
            tracing::debug!(pod = %pod.full_name(), "pod gone; readiness gate left");
            return;
        };
        if now.terminating {
            return;
        }
        if back_in_service(&now, &container, stopped.as_ref()) {
            break format!("container {container} restarted and ready");
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(pod = %pod.full_name(), container = %container, timeout_s = timeout.as_secs(), action = "restart", "the restarted container is not ready within reloadlet.io/restart-timeout; the readiness gate is set True anyway (the pod's own readiness keeps it out of service)");
            break format!(
                "container {container} not ready within {}; the gate does not keep the pod out of service",
                humantime::format_duration(timeout)
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = stop.cancelled() => break "reloadlet stopped; the gate is not held".into(),
        }
    };
    put_back(gate.as_ref(), &pod, &message).await;
    drop(held);
}

/// Sets the condition `True` (once more on a failure other than a gone pod).
pub async fn put_back(gate: &dyn GateWriter, pod: &PodRef, message: &str) {
    let condition = GateCondition::serving(message);
    for attempt in 1..=2 {
        match gate.set(pod, &condition).await {
            Ok(()) => {
                tracing::info!(pod = %pod.full_name(), action = "restart", "readiness gate reloadlet.io/restart-drain set True");
                return;
            }
            Err(PatchError::NotFound) => return,
            Err(e) if attempt == 2 => {
                tracing::warn!(pod = %pod.full_name(), error = %e, "could not set the readiness gate reloadlet.io/restart-drain True; the pod stays out of its Services until it is")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}
