//! Argo Rollouts' `argoproj.io/v1alpha1` `Rollout`, served only when the server starts
//! with [`super::ApiServerOptions::argo_rollouts`] (otherwise its group is unknown:
//! discovery `/apis/argoproj.io/v1alpha1` and every Rollout URL answer 404, as on a cluster
//! without the CRD). Stored like the other objects (the CRD has the status subresource, so
//! a client write keeps the stored status, and `metadata.generation` follows spec changes).
//!
//! What its controller does here, after argo-rollouts `rollout/restart.go`
//! (`RolloutPodRestarter.Reconcile`): pods run in a ReplicaSet `<name>-<hash>` labelled
//! `rollouts-pod-template-hash` and controlled by the Rollout; once `spec.restartAt` has
//! passed, while every pod is available, the oldest pod created before it is deleted (Argo
//! evicts it; one at a time, the simulator's `maxUnavailable` being taken as 1) and the
//! ReplicaSet replaces it; when none is left, `status.restartedAt` is set to `restartAt`.
//! Not emulated: canary steps, blue-green, traffic routing, analysis — a template change
//! moves all replicas to the new ReplicaSet at once. A `restartAt` in the future takes
//! effect at the first change of the server's pods or objects after it (no timer).

pub use super::argo_rollout::{Rollout, RolloutSpec};
use super::model::{new_uid, now_ts, Key, ReplicaSetSim, Resource};
use super::objects::Stored;
use super::status::ApiStatus;
use super::store::State;
use super::workloads::{is_ready, template_hash, validate_selector};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const HASH_LABEL: &str = "rollouts-pod-template-hash";

impl Stored for Rollout {
    const RESOURCE: Resource = Resource::Rollouts;
    const ERROR_GROUP: &'static str = "argoproj.io";
    const CONTROLLED: bool = true;
    fn map(st: &State) -> &BTreeMap<Key, Self> {
        &st.workloads.rollouts
    }
    fn map_mut(st: &mut State) -> &mut BTreeMap<Key, Self> {
        &mut st.workloads.rollouts
    }
    fn validate(&self) -> Result<(), ApiStatus> {
        let spec = self.spec.clone().unwrap_or_default();
        validate_selector("Rollout", &self.metadata, &spec.selector, &spec.template)
    }
    fn prepare(old: Option<&Self>, new: &mut Self) {
        "argoproj.io/v1alpha1".clone_into(&mut new.api_version);
        "Rollout".clone_into(&mut new.kind);
        match old {
            Some(old) => {
                new.status = old.status.clone();
                let gen = old.metadata.generation.unwrap_or(1);
                new.metadata.generation = Some(gen + i64::from(new.spec != old.spec));
            }
            None => {
                new.status = None;
                new.metadata.generation = Some(1);
            }
        }
    }
}

/// `/apis/argoproj.io/v1alpha1`: the APIResourceList discovery answers with the CRD.
pub(crate) fn discovery() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "argoproj.io/v1alpha1",
        "resources": [{
            "name": "rollouts", "singularName": "rollout", "namespaced": true,
            "kind": "Rollout", "shortNames": ["ro"],
            "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
        }, {
            "name": "rollouts/status", "singularName": "", "namespaced": true,
            "kind": "Rollout", "verbs": ["get", "patch", "update"]
        }]
    })
}

fn without_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = t.clone();
    if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove(HASH_LABEL);
    }
    t
}

impl State {
    /// One pass over every Rollout; true when it changed a ReplicaSet or deleted a pod.
    pub(crate) fn sync_rollouts(&mut self) -> bool {
        let all: Vec<(Key, Rollout)> = self
            .workloads
            .rollouts
            .iter()
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        let mut changed = false;
        for (key, ro) in all {
            changed |= self.sync_rollout(&key, ro);
        }
        changed
    }

    fn sync_rollout(&mut self, key: &Key, mut ro: Rollout) -> bool {
        let uid = ro.metadata.uid.clone().unwrap_or_default();
        let spec = ro.spec.clone().unwrap_or_default();
        let replicas = spec.replicas.unwrap_or(1);
        let owned: Vec<ReplicaSetSim> = self
            .replicasets
            .values()
            .filter(|rs| rs.owner.as_ref().is_some_and(|o| o.uid == uid))
            .cloned()
            .collect();
        let current = owned
            .iter()
            .find(|rs| without_hash(&rs.template) == without_hash(&spec.template))
            .cloned();
        let mut changed = false;
        let current = match current {
            Some(rs) => rs,
            None => {
                changed = true;
                self.create_rollout_rs(key, &ro, replicas)
            }
        };
        for rs in owned.iter().filter(|rs| rs.uid != current.uid) {
            if let Some(r) = self
                .replicasets
                .get_mut(&(rs.namespace.clone(), rs.name.clone()))
            {
                changed |= r.replicas != 0;
                r.replicas = 0;
            }
        }
        if let Some(r) = self.replicasets.get_mut(&key_of_rs(&current)) {
            changed |= r.replicas != replicas;
            r.replicas = replicas;
        }
        let pods: Vec<_> = self
            .pods
            .values()
            .filter(|p| self.pod_of_workload(p, &uid))
            .cloned()
            .collect();
        let ready = pods.iter().filter(|p| is_ready(p)).count();
        let mut status = ro.status.clone().unwrap_or_else(|| json!({}));
        if let Some(at) = spec.restart_at.as_ref().filter(|t| t.0 <= now_ts()) {
            let at_text = serde_json::to_value(at).unwrap_or(Value::Null);
            let all_available =
                pods.iter().all(is_ready) && i32::try_from(pods.len()).unwrap_or(0) >= replicas;
            if status.get("restartedAt") != Some(&at_text) && all_available {
                let oldest = pods
                    .iter()
                    .filter(|p| created_before(p, at))
                    .min_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|c| c.0));
                match oldest {
                    Some(p) => {
                        self.graceful_no_settle(&super::model::key_of(&p.metadata), None);
                        changed = true;
                    }
                    None => status["restartedAt"] = at_text,
                }
            }
        }
        let n = |x: usize| json!(i32::try_from(x).unwrap_or(0));
        let live = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count();
        status["replicas"] = n(live);
        status["readyReplicas"] = n(ready);
        status["availableReplicas"] = n(ready);
        status["updatedReplicas"] = n(pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && current.owns(p))
            .count());
        status["currentPodHash"] = json!(current.labels.get(HASH_LABEL));
        if ro.status.as_ref() != Some(&status) {
            ro.status = Some(status);
            self.commit_by_controller(key, ro);
        }
        changed
    }

    fn create_rollout_rs(&mut self, key: &Key, ro: &Rollout, replicas: i32) -> ReplicaSetSim {
        let mut template = ro.spec.clone().unwrap_or_default().template;
        let hash = template_hash(&template);
        let meta = template.metadata.get_or_insert_with(Default::default);
        let labels = meta.labels.get_or_insert_with(Default::default);
        labels.insert(HASH_LABEL.into(), hash.clone());
        let labels = labels.clone();
        let name = format!("{}-{hash}", key.1);
        let rs = ReplicaSetSim {
            namespace: key.0.clone(),
            name: name.clone(),
            uid: new_uid(),
            replicas,
            template,
            node_name: String::new(),
            owner: Some(OwnerReference {
                api_version: "argoproj.io/v1alpha1".into(),
                kind: "Rollout".into(),
                name: key.1.clone(),
                uid: ro.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }),
            labels,
            created_rv: self.next_rv(),
            created_at: now_ts(),
        };
        self.replicasets.insert((key.0.clone(), name), rs.clone());
        rs
    }
}

/// Created before `at`, as read from the API: `metav1.Time` has whole seconds, so a pod
/// created in the second of `restartAt` is not older than it (Argo skips pods whose
/// creationTimestamp is after or equal to restartAt).
fn created_before(p: &k8s_openapi::api::core::v1::Pod, at: &Time) -> bool {
    p.metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|c| c.0.as_second() < at.0.as_second())
}

fn key_of_rs(rs: &ReplicaSetSim) -> Key {
    (rs.namespace.clone(), rs.name.clone())
}
