//! The drain readiness-gate condition written through `pods/status` (`core::drain_gate`): a
//! strategic merge patch of `status.conditions`, whose merge key is `type`
//! (`patchMergeKey:"type"` on `PodStatus.Conditions`, k8s.io/api core/v1 types.go), so only
//! the condition `reloadlet.io/restart-drain` is written and the kubelet's own stay as they
//! are. Conditional on the pod's UID. A refusal names [`Feature::RestartDrain`].

use super::controller::patch_error;
use super::refusals::report;
use crate::core::drain_gate::GateCondition;
use crate::core::permission::{Feature, Request};
use crate::core::restart::DRAIN_GATE;
use crate::ports::{GateWriter, PatchError, PodRef, RefusalSink};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

/// The field manager of the condition (visible in the pod's managedFields).
pub const FIELD_MANAGER: &str = "reloadlet-agent";

pub struct KubeGate {
    client: Client,
    denials: RefusalSink,
}

impl KubeGate {
    pub fn new(client: Client, denials: RefusalSink) -> Self {
        Self { client, denials }
    }
}

/// The patch body: the one condition, conditional on the pod's UID; `now`: its
/// `lastTransitionTime` (RFC 3339, seconds, as `metav1.Time` is written).
pub fn gate_patch(uid: &str, condition: &GateCondition, now: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": { "uid": uid },
        "status": { "conditions": [{
            "type": DRAIN_GATE,
            "status": condition.status(),
            "reason": condition.reason,
            "message": condition.message,
            "lastTransitionTime": now,
        }]},
    })
}

impl GateWriter for KubeGate {
    fn set<'a>(
        &'a self,
        pod: &'a PodRef,
        condition: &'a GateCondition,
    ) -> BoxFuture<'a, Result<(), PatchError>> {
        Box::pin(async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            let body = gate_patch(&pod.uid, condition, &now);
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            let result = api
                .patch_status(&pod.name, &params, &Patch::Strategic(&body))
                .await;
            report(
                &self.denials,
                Request::new(Feature::RestartDrain, "patch", "", "pods/status"),
                Some(&pod.namespace),
                &result,
            );
            match result {
                Ok(_) => Ok(()),
                // Conditional on the UID — 404: gone; 409/422: another pod of the same name.
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {
                    Err(PatchError::NotFound)
                }
                Err(e) => Err(patch_error(e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_holds_one_condition_keyed_by_type_and_the_uid() {
        let body = gate_patch(
            "u-1",
            &GateCondition::draining("app"),
            "2026-11-29T19:00:00Z",
        );
        assert_eq!(
            body,
            serde_json::json!({
                "metadata": {"uid": "u-1"},
                "status": {"conditions": [{
                    "type": "reloadlet.io/restart-drain",
                    "status": "False",
                    "reason": "RestartDrain",
                    "message": "reloadlet drains the pod before it restarts container app",
                    "lastTransitionTime": "2026-11-29T19:00:00Z",
                }]},
            })
        );
    }
}
