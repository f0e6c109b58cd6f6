//! ReplicaSet emulation: keeps `replicas` non-terminating pods per ReplicaSet, on one node.

use super::disruption::{pod_is_ready, pod_is_terminating};
use super::model::{new_uid, random_suffix, Key, ReplicaSetSim};
use super::store::State;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

impl ReplicaSetSim {
    /// Whether the pod's controller reference points at this ReplicaSet.
    pub fn owns(&self, pod: &Pod) -> bool {
        controller_uid(pod).is_some_and(|u| u == self.uid)
    }

    fn new_pod(&self, name: String, node: String) -> Pod {
        let tmeta = self.template.metadata.clone().unwrap_or_default();
        let mut spec: PodSpec = self.template.spec.clone().unwrap_or_default();
        spec.node_name = Some(node);
        Pod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(self.namespace.clone()),
                labels: tmeta.labels,
                annotations: tmeta.annotations,
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: self.name.clone(),
                    uid: self.uid.clone(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                // ReplicaSet pods are `generateName: <rs>-` (controller_utils.go).
                generate_name: Some(format!("{}-", self.name)),
                ..Default::default()
            },
            spec: Some(spec),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        }
    }
}

/// The UID in the pod's `controller: true` owner reference, if any.
pub(crate) fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

impl State {
    /// Registers a ReplicaSet and creates its pods. Returns its UID.
    pub fn create_replicaset(
        &mut self,
        namespace: &str,
        name: &str,
        replicas: i32,
        template: PodTemplateSpec,
        node_name: &str,
    ) -> String {
        let key: Key = (namespace.to_string(), name.to_string());
        let uid = match self.replicasets.get(&key) {
            Some(rs) => rs.uid.clone(),
            None => new_uid(),
        };
        self.replicasets.insert(
            key,
            ReplicaSetSim {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: uid.clone(),
                replicas: replicas.max(0),
                template,
                node_name: node_name.to_string(),
                owner: None,
                labels: Default::default(),
                created_rv: self.rv,
                created_at: super::model::now_ts(),
            },
        );
        self.settle();
        uid
    }

    /// Changes the replica count; returns false when there is no such ReplicaSet.
    pub fn scale_replicaset(&mut self, namespace: &str, name: &str, replicas: i32) -> bool {
        let key: Key = (namespace.to_string(), name.to_string());
        let Some(rs) = self.replicasets.get_mut(&key) else {
            return false;
        };
        rs.replicas = replicas.max(0);
        self.settle();
        true
    }

    /// Replica count of the ReplicaSet with this UID.
    pub fn replicas_of(&self, uid: &str) -> Option<i32> {
        self.replicasets
            .values()
            .find(|rs| rs.uid == uid)
            .map(|rs| rs.replicas)
    }

    /// Creates replacements for gone or terminating pods; gracefully deletes surplus ones
    /// (not-ready first, then the newest).
    pub(crate) fn reconcile_replicasets(&mut self) {
        let sets: Vec<ReplicaSetSim> = self.replicasets.values().cloned().collect();
        for rs in sets {
            let mut active: Vec<Pod> = self
                .pods
                .values()
                .filter(|p| rs.owns(p) && !pod_is_terminating(p))
                .cloned()
                .collect();
            let count = i32::try_from(active.len()).unwrap_or(i32::MAX);
            if count < rs.replicas {
                for _ in count..rs.replicas {
                    let name = loop {
                        let candidate = format!("{}-{}", rs.name, random_suffix(5));
                        if !self
                            .pods
                            .contains_key(&(rs.namespace.clone(), candidate.clone()))
                        {
                            break candidate;
                        }
                    };
                    let siblings: Vec<&Pod> = self.pods.values().filter(|p| rs.owns(p)).collect();
                    let node = if rs.node_name.is_empty() {
                        let pinned = rs
                            .template
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_deref());
                        self.pick_node(pinned, &siblings)
                    } else {
                        rs.node_name.clone()
                    };
                    let mut pod = rs.new_pod(name, node);
                    self.stamp_new(&mut pod.metadata);
                    crate::volumes::projection::inject_kube_api_access(&mut pod);

                    self.commit_pod(pod);
                }
            } else if count > rs.replicas {
                active.sort_by(|a, b| {
                    pod_is_ready(a).cmp(&pod_is_ready(b)).then_with(|| {
                        b.metadata
                            .creation_timestamp
                            .as_ref()
                            .map(|t| t.0)
                            .cmp(&a.metadata.creation_timestamp.as_ref().map(|t| t.0))
                    })
                });
                let surplus = usize::try_from(count - rs.replicas).unwrap_or(0);
                for pod in active.iter().take(surplus) {
                    let key = (
                        rs.namespace.clone(),
                        pod.metadata.name.clone().unwrap_or_default(),
                    );
                    self.graceful_no_settle(&key, None);
                }
            }
        }
    }
}
