//! The eviction subresource, answering as `EvictionREST.Create` does
//! (see `shared/reference/eviction-facts.md`).

use super::disruption::{pod_is_ready, pod_is_terminating};
use super::records::{EvictionRecord, InvariantRecord};
use super::status::ApiStatus;
use super::store::now_ts;
use super::store::{Key, State};
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;
use std::time::Instant;

/// `MaxDisruptedPodSize` in eviction.go.
const MAX_DISRUPTED_POD_SIZE: usize = 2000;
const VIOLATION: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";

impl State {
    /// Handles `POST .../pods/{name}/eviction` and records the answer.
    pub fn evict(&mut self, namespace: &str, name: &str, body: &[u8], dry_run: bool) -> ApiStatus {
        let uid = self
            .pods
            .get(&(namespace.to_string(), name.to_string()))
            .and_then(|p| p.metadata.uid.clone());
        let answer = self.evict_inner(namespace, name, body, dry_run);
        self.records.evictions.push(EvictionRecord {
            namespace: namespace.to_string(),
            pod: name.to_string(),
            uid,
            code: answer.code,
            dry_run,
            at: Instant::now(),
        });
        answer
    }

    fn evict_inner(
        &mut self,
        namespace: &str,
        name: &str,
        body: &[u8],
        dry_run: bool,
    ) -> ApiStatus {
        let eviction: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return ApiStatus::bad_request(format!("invalid Eviction body: {e}")),
        };
        if let Some(kind) = eviction.get("kind").and_then(Value::as_str) {
            if kind != "Eviction" {
                return ApiStatus::bad_request(format!("expected kind Eviction, got {kind}"));
            }
        }
        let body_name = eviction
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if body_name != name {
            return ApiStatus::bad_request("name in URL does not match name in Eviction object");
        }
        let key: Key = (namespace.to_string(), name.to_string());
        let Some(pod) = self.pods.get(&key).cloned() else {
            return ApiStatus::not_found("", "pods", name);
        };
        // A proper policy/v1 body may carry `deleteOptions.preconditions.uid` (kube-rs's
        // snake-case `delete_options` is ignored, as the real server does).
        let want_uid = eviction
            .pointer("/deleteOptions/preconditions/uid")
            .and_then(Value::as_str);
        let have_uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Some(want) = want_uid.filter(|w| *w != have_uid) {
            return ApiStatus::failure(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on Pod \"{name}\": Precondition failed: UID in precondition: {want}, UID in object meta: {have_uid}"
                ),
            );
        }

        // canIgnorePDB: terminal, pending or already terminating pods go without a check.
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Pending");
        if pod_is_terminating(&pod) || matches!(phase, "Pending" | "Succeeded" | "Failed") {
            return self.delete_evicted(&key, dry_run, None);
        }

        // The controller may have finished a pass (lag over, disruptedPods expired).
        self.recompute_pdbs();
        let pdbs = self.pdbs_for_eviction(&pod);
        if pdbs.len() > 1 {
            return ApiStatus::failure(
                500,
                "",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            );
        }
        let Some(pdb_key) = pdbs.into_iter().next() else {
            return self.delete_evicted(&key, dry_run, None);
        };
        let pdb = self.pdbs[&pdb_key].pdb.clone();
        let pdb_name = pdb.metadata.name.clone().unwrap_or_default();
        let status = pdb.status.clone().unwrap_or_default();

        if !pod_is_ready(&pod) {
            let always = pdb
                .spec
                .as_ref()
                .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
                == Some("AlwaysAllow");
            if always
                || (status.current_healthy >= status.desired_healthy && status.desired_healthy > 0)
            {
                return self.delete_evicted(&key, dry_run, Some(&pdb_key));
            }
        }

        // checkAndDecrement
        if status.observed_generation.unwrap_or(0) < pdb.metadata.generation.unwrap_or(0) {
            return ApiStatus::too_many_requests(
                VIOLATION,
                10,
                &[(
                    DISRUPTION_BUDGET_CAUSE,
                    format!(
                        "The disruption budget {pdb_name} is still being processed by the server."
                    ),
                )],
            );
        }
        if status.disruptions_allowed < 0 {
            return ApiStatus::forbidden(
                "policy",
                "poddisruptionbudget",
                &pdb_name,
                "pdb disruptions allowed is negative",
            );
        }
        let disrupted = status.disrupted_pods.as_ref().map_or(0, |m| m.len());
        if disrupted > MAX_DISRUPTED_POD_SIZE {
            return ApiStatus::forbidden(
                "policy",
                "poddisruptionbudget",
                &pdb_name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            );
        }
        if status.disruptions_allowed == 0 {
            return ApiStatus::too_many_requests(
                VIOLATION,
                0,
                &[(
                    DISRUPTION_BUDGET_CAUSE,
                    format!(
                        "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                        status.desired_healthy, status.current_healthy
                    ),
                )],
            );
        }
        if dry_run {
            return ApiStatus::success(201);
        }
        let rv = self.next_rv();
        if let Some(e) = self.pdbs.get_mut(&pdb_key) {
            let st = e.pdb.status.get_or_insert_with(Default::default);
            st.disruptions_allowed -= 1;
            st.disrupted_pods
                .get_or_insert_with(Default::default)
                .insert(name.to_string(), Time(now_ts()));
            e.pdb.metadata.resource_version = Some(rv.to_string());
        }
        self.delete_evicted(&key, false, Some(&pdb_key))
    }

    /// Adds `DisruptionTarget`, deletes gracefully, records the budget invariant, and
    /// answers 201 Success.
    fn delete_evicted(&mut self, key: &Key, dry_run: bool, pdb: Option<&Key>) -> ApiStatus {
        if dry_run {
            return ApiStatus::success(201);
        }
        let before = pdb.and_then(|k| {
            let p = &self.pdbs.get(k)?.pdb;
            Some((
                self.healthy_count(p),
                p.status.clone().unwrap_or_default().desired_healthy,
            ))
        });
        if let Some(mut pod) = self.pods.get(key).cloned() {
            if !pod_is_terminating(&pod) {
                let status = pod.status.get_or_insert_with(Default::default);
                let conditions = status.conditions.get_or_insert_with(Vec::new);
                conditions.retain(|c| c.type_ != "DisruptionTarget");
                conditions.push(PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    reason: Some("EvictionByEvictionAPI".into()),
                    message: Some("Eviction API: evicting".into()),
                    last_transition_time: Some(Time(now_ts())),
                    ..Default::default()
                });
                self.commit_pod(pod);
            }
        }
        self.graceful_no_settle(key, None);
        if let (Some(pdb_key), Some((healthy_before, desired_healthy))) = (pdb, before) {
            let healthy_after = self
                .pdbs
                .get(pdb_key)
                .map(|e| self.healthy_count(&e.pdb))
                .unwrap_or(healthy_before);
            self.records.invariants.push(InvariantRecord {
                pdb: format!("{}/{}", pdb_key.0, pdb_key.1),
                pod: format!("{}/{}", key.0, key.1),
                healthy_before,
                healthy_after,
                desired_healthy,
            });
        }
        self.settle();
        ApiStatus::success(201)
    }
}
