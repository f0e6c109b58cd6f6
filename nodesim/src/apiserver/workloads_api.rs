//! The in-process handle's `apps/v1` workload helpers: apply, get, merge-patch, the pods
//! of a workload and its readiness log (see [`super::workloads`]).

use super::objects::{self, Stored};
use super::{key, ApiServer, ApiStatus, ReadinessWatch, WorkloadKind};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;

impl ApiServer {
    /// The nodes the workload controllers schedule pods on (a template's `nodeName`
    /// wins; a DaemonSet runs one pod on each); `["node-a"]` until set.
    pub fn set_nodes(&self, nodes: &[&str]) {
        self.state().workloads.nodes = nodes.iter().map(|n| n.to_string()).collect();
    }
    /// Creates or replaces a Deployment as `kubectl apply` would (defaults, generation,
    /// the controller runs); a selector that does not match the template is refused.
    pub fn apply_deployment(&self, d: Deployment) -> Result<Deployment, ApiStatus> {
        d.validate()?;
        Ok(self.state().apply_object(d))
    }
    /// One Deployment.
    pub fn get_deployment(&self, namespace: &str, name: &str) -> Option<Deployment> {
        self.state()
            .workloads
            .deployments
            .get(&key(namespace, name))
            .cloned()
    }
    /// Creates or replaces a StatefulSet (as [`ApiServer::apply_deployment`]).
    pub fn apply_statefulset(&self, s: StatefulSet) -> Result<StatefulSet, ApiStatus> {
        s.validate()?;
        Ok(self.state().apply_object(s))
    }
    /// One StatefulSet.
    pub fn get_statefulset(&self, namespace: &str, name: &str) -> Option<StatefulSet> {
        self.state()
            .workloads
            .statefulsets
            .get(&key(namespace, name))
            .cloned()
    }
    /// Creates or replaces a DaemonSet (as [`ApiServer::apply_deployment`]).
    pub fn apply_daemonset(&self, d: DaemonSet) -> Result<DaemonSet, ApiStatus> {
        d.validate()?;
        Ok(self.state().apply_object(d))
    }
    /// One DaemonSet.
    pub fn get_daemonset(&self, namespace: &str, name: &str) -> Option<DaemonSet> {
        self.state()
            .workloads
            .daemonsets
            .get(&key(namespace, name))
            .cloned()
    }
    /// A JSON merge patch of a workload's main resource, as `PATCH` with
    /// `application/merge-patch+json` does it (what `kubectl rollout restart` sends, as a
    /// strategic merge patch, which is the same for these fields).
    pub fn merge_patch_workload(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<serde_json::Value, ApiStatus> {
        let body = serde_json::to_vec(patch).unwrap_or_default();
        let k = key(namespace, name);
        let how = objects::PatchType::Merge;
        let mut st = self.state();
        let v = match kind {
            WorkloadKind::Deployment => {
                serde_json::to_value(st.patch_object::<Deployment>(&k, how, &body, "", false)?)
            }
            WorkloadKind::StatefulSet => {
                serde_json::to_value(st.patch_object::<StatefulSet>(&k, how, &body, "", false)?)
            }
            WorkloadKind::DaemonSet => {
                serde_json::to_value(st.patch_object::<DaemonSet>(&k, how, &body, "", false)?)
            }
        };
        Ok(v.unwrap_or_default())
    }
    /// Pods of a workload (through its ReplicaSets for a Deployment), terminating ones
    /// included, ordered by namespace and name.
    pub fn pods_of_workload(&self, kind: WorkloadKind, namespace: &str, name: &str) -> Vec<Pod> {
        let st = self.state();
        let k = key(namespace, name);
        let uid = match kind {
            WorkloadKind::Deployment => st
                .workloads
                .deployments
                .get(&k)
                .and_then(|d| d.metadata.uid.clone()),
            WorkloadKind::StatefulSet => st
                .workloads
                .statefulsets
                .get(&k)
                .and_then(|d| d.metadata.uid.clone()),
            WorkloadKind::DaemonSet => st
                .workloads
                .daemonsets
                .get(&k)
                .and_then(|d| d.metadata.uid.clone()),
        };
        let Some(uid) = uid else { return Vec::new() };
        st.pods
            .values()
            .filter(|p| st.pod_of_workload(p, &uid))
            .cloned()
            .collect()
    }
    /// Starts recording a workload's Ready pods at every change of the server's pods
    /// (under the server's lock, so no moment is missed); `None` when it does not exist.
    /// Recording ends when the last clone of the answer is dropped.
    pub fn track_readiness(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Option<ReadinessWatch> {
        self.state().track_readiness(kind, &key(namespace, name))
    }
    /// Names of the ReplicaSets the Deployment controls, oldest first, with their
    /// `spec.replicas`.
    pub fn replicasets_of_deployment(&self, namespace: &str, name: &str) -> Vec<(String, i32)> {
        let st = self.state();
        let Some(uid) = st
            .workloads
            .deployments
            .get(&key(namespace, name))
            .and_then(|d| d.metadata.uid.clone())
        else {
            return Vec::new();
        };
        let mut sets: Vec<_> = st
            .replicasets
            .values()
            .filter(|rs| rs.owner.as_ref().is_some_and(|o| o.uid == uid))
            .collect();
        sets.sort_by_key(|rs| rs.created_rv);
        sets.iter()
            .map(|rs| (rs.name.clone(), rs.replicas))
            .collect()
    }
}
