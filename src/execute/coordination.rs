//! Whether a controller is there to grant a waiting restart request (docs/restart.md,
//! "Without a controller"): while the request waits, the agent reads the controller's Lease
//! (at once, then with a back-off, `core::lease_holder::recheck_after`); absent, without a
//! holder, or not renewed within its duration, the pod gets one Warning
//! `RestartUncoordinated` for the request and the checks end. A holder seen says nothing.
//! A read that fails is tried again later (a 401/403 is also reported by the edge, on
//! `/readyz`).

use super::Inner;
use crate::core::lease_holder::{coordination, recheck_after, LeaseFields, UNCOORDINATED};
use crate::core::outcome::ActionKind;
use crate::core::restart_grant::REQUEST;
use crate::ports::PodRef;
use std::sync::Arc;

impl Inner {
    fn still_waiting(&self, uid: &str, id: &str) -> bool {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting(uid)
            == Some(id)
    }

    /// Checks the Lease until the request `id` on `pod` is no longer waiting (granted,
    /// replaced by a newer one, or the pod gone), or a Warning was given.
    pub(super) async fn watch_coordination(self: Arc<Self>, pod: PodRef, id: String) {
        let Some(reader) = self.lease.get().cloned() else {
            return;
        };
        let mut checks = 0u32;
        loop {
            if self.stop.is_cancelled() || !self.still_waiting(&pod.uid, &id) {
                return;
            }
            let lease = reader.lease();
            match reader.read().await {
                Ok(record) => {
                    let fields = record.as_ref().map(|r| LeaseFields {
                        holder: r.holder.as_deref(),
                        renew_time: r.renew_time.as_deref(),
                        lease_duration_seconds: r.lease_duration_seconds,
                    });
                    let now = jiff::Timestamp::now();
                    if let Some(why) = coordination(fields, now).why(&lease) {
                        if !self.still_waiting(&pod.uid, &id) {
                            return;
                        }
                        // Under the flag only an `on-blocked: rollout` pod asks (`only_pod`).
                        let unless = if self.restart_without_grant {
                            "reloadlet.io/on-blocked: rollout leaves the choice between a restart and a rollout to it, also under --restart-without-grant"
                        } else {
                            "or the agent runs with --restart-without-grant"
                        };
                        let note = format!(
                            "no controller holds the Lease, so nothing grants restart request {id} ({REQUEST}): {why}; nothing is restarted until a reloadlet controller runs ({unless})"
                        );
                        tracing::warn!(pod = %pod.full_name(), request = %id, lease = %lease, "{note}");
                        self.report
                            .warning(&pod, ActionKind::Restart, UNCOORDINATED, note);
                        return;
                    }
                }
                Err(e) => {
                    tracing::debug!(pod = %pod.full_name(), lease = %lease, error = %e, "could not read the controller's Lease; trying again later");
                }
            }
            let wait = recheck_after(checks);
            checks = checks.saturating_add(1);
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}
