//! The in-process handle's core objects: pods, ConfigMaps, Secrets, Leases, ReplicaSets and
//! PodDisruptionBudgets, written and read as a client would (workloads: [`super::workloads_api`]).

use super::{key, objects, ApiServer, ApiStatus};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus, PodTemplateSpec, Secret};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use std::sync::Arc;
use std::time::Duration;

impl ApiServer {
    /// Assigns uid, resourceVersion, creationTimestamp, generation when missing; a pod
    /// without status starts `Pending`. An existing pod of that name is replaced.
    pub fn create_pod(&self, pod: Pod) -> Pod {
        self.state().create_pod(pod)
    }
    /// Replaces metadata/spec (annotations changes are visible to watchers); keeps status.
    pub fn replace_pod(&self, pod: Pod) -> Pod {
        self.state().replace_pod(pod)
    }
    /// What the kubelet reports: containerStatuses, phase, conditions (Ready).
    pub fn set_pod_status(&self, namespace: &str, name: &str, status: PodStatus) {
        self.state().set_pod_status(&key(namespace, name), status);
    }
    /// Removes the pod now (a DELETED watch event).
    pub fn delete_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.state().delete_pod_now(&key(namespace, name))
    }
    /// The kubelet confirms a terminating pod is gone: removes it (DELETED).
    pub fn finalize_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.state().delete_pod_now(&key(namespace, name))
    }
    /// One pod.
    pub fn get_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.state().pods.get(&key(namespace, name)).cloned()
    }
    /// All pods, ordered by namespace and name.
    pub fn list_pods(&self) -> Vec<Pod> {
        self.state().pods.values().cloned().collect()
    }
    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.state().rv
    }
    /// Creates or replaces a ConfigMap as `kubectl apply` would, through the same path as
    /// HTTP writes: a new resourceVersion and a watch event, unless nothing changed
    /// (then neither, as the real server). Returns the stored object.
    pub fn apply_configmap(&self, cm: ConfigMap) -> ConfigMap {
        self.state().apply_object(cm)
    }
    /// One ConfigMap.
    pub fn get_configmap(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        self.state().configmaps.get(&key(namespace, name)).cloned()
    }
    /// Creates or replaces a Secret (as [`ApiServer::apply_configmap`]).
    pub fn apply_secret(&self, secret: Secret) -> Secret {
        self.state().apply_object(secret)
    }
    /// One Secret.
    pub fn get_secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        self.state().secrets.get(&key(namespace, name)).cloned()
    }
    /// Removes a Secret (a DELETED watch event).
    pub fn delete_secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        self.state().delete_object(&key(namespace, name)).ok()
    }
    /// Removes a ConfigMap (a DELETED watch event).
    pub fn delete_configmap(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        self.state().delete_object(&key(namespace, name)).ok()
    }
    /// Creates or replaces a Lease (as [`ApiServer::apply_configmap`]).
    pub fn apply_lease(&self, lease: Lease) -> Lease {
        self.state().apply_object(lease)
    }
    /// One Lease.
    pub fn get_lease(&self, namespace: &str, name: &str) -> Option<Lease> {
        self.state().leases.get(&key(namespace, name)).cloned()
    }
    /// A JSON merge patch of a pod, exactly as `PATCH` with
    /// `application/merge-patch+json` does it (a no-op when nothing changes; 409 on a
    /// stale `metadata.resourceVersion`; 404 when missing).
    pub fn merge_patch_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Pod, ApiStatus> {
        let body = serde_json::to_vec(patch).unwrap_or_default();
        self.state()
            .patch_pod(&key(namespace, name), objects::PatchType::Merge, &body)
    }
    /// A JSON merge patch of a ConfigMap, as `PATCH` does it.
    pub fn merge_patch_configmap(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<ConfigMap, ApiStatus> {
        let body = serde_json::to_vec(patch).unwrap_or_default();
        self.state().patch_object(
            &key(namespace, name),
            objects::PatchType::Merge,
            &body,
            "kubectl-patch",
            false,
        )
    }
    /// Creates `replicas` pods `<name>-<5 random>` owned by a ReplicaSet that keeps that
    /// many non-terminating pods on `node_name`. Returns the ReplicaSet's UID.
    pub fn create_replicaset(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
        template: PodTemplateSpec,
        node_name: &str,
    ) -> String {
        self.state()
            .create_replicaset(namespace, name, replicas, template, node_name)
    }
    /// Changes a ReplicaSet's replica count; false when it does not exist.
    pub fn scale_replicaset(&self, namespace: &str, name: &str, replicas: i32) -> bool {
        self.state().scale_replicaset(namespace, name, replicas)
    }
    /// Pods whose controller is the named ReplicaSet (terminating ones included).
    pub fn pods_of_replicaset(&self, namespace: &str, name: &str) -> Vec<Pod> {
        let st = self.state();
        let Some(rs) = st.replicasets.get(&key(namespace, name)) else {
            return Vec::new();
        };
        st.pods.values().filter(|p| rs.owns(p)).cloned().collect()
    }
    /// Creates a PDB (generation 1); the controller computes its status (after the lag).
    pub fn create_pdb(&self, pdb: PodDisruptionBudget) -> PodDisruptionBudget {
        let out = self.state().create_pdb(pdb);
        self.after_pdb_change();
        out
    }
    /// Replaces a PDB's spec, bumping `metadata.generation`.
    pub fn update_pdb(&self, pdb: PodDisruptionBudget) -> PodDisruptionBudget {
        let out = self.state().update_pdb(pdb);
        self.after_pdb_change();
        out
    }
    /// Removes a PDB.
    pub fn delete_pdb(&self, namespace: &str, name: &str) -> Option<PodDisruptionBudget> {
        self.state().delete_pdb(&key(namespace, name))
    }
    /// A PDB with its current status.
    pub fn get_pdb(&self, namespace: &str, name: &str) -> Option<PodDisruptionBudget> {
        let mut st = self.state();
        st.recompute_pdbs();
        st.pdbs.get(&key(namespace, name)).map(|e| e.pdb.clone())
    }
    /// Pins a PDB's status as given (the disruption controller stops updating it; the
    /// eviction subresource still spends from it), to stage states such as a negative
    /// budget, an oversized `disruptedPods` map or a stale count. `None` unpins it.
    /// Returns false when there is no such PDB.
    pub fn pin_pdb_status(
        &self,
        namespace: &str,
        name: &str,
        status: Option<PodDisruptionBudgetStatus>,
    ) -> bool {
        self.state().pin_pdb_status(&key(namespace, name), status)
    }
    /// Once the lag is over, a controller pass observes the new generation.
    fn after_pdb_change(&self) {
        let lag = self.state().behaviour.controller_lag;
        if lag.is_zero() {
            return;
        }
        let shared = Arc::downgrade(&self.inner.shared);
        tokio::spawn(async move {
            tokio::time::sleep(lag + Duration::from_millis(1)).await;
            if let Some(s) = shared.upgrade() {
                s.lock().recompute_pdbs();
            }
        });
    }
}
