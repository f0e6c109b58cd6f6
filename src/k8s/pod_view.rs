//! The pod as reloadlet decodes it from the API: only the fields [`super::pod_convert`] reads,
//! with k8s-openapi's own types for the small parts (a volume source, an env var, a mount,
//! a container's state).
//!
//! k8s-openapi's `Pod` decodes everything: each `Volume` carries every one of its ~30 source
//! variants inline, each `Container` its probes, lifecycle and resources, and `metadata` the
//! `managedFields` (a JSON tree per field manager). A page of 50 such pods was the agent's
//! largest allocation (~26 KiB a pod, most of it `Vec<Volume>`), and glibc keeps the peak.
//! Here the unread fields are skipped by the parser without being built (serde ignores unknown
//! fields), so the API's wire format is unchanged: the same JSON, decoded into less.
//!
//! Field names and optionality follow the API (`k8s.io/api/core/v1/types.go`, mirrored by
//! k8s-openapi); lists the API may omit are `Option` or default to empty.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, ContainerPort, ContainerState, EnvFromSource, EnvVar, Pod,
    SecretVolumeSource, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// A `Pod` with only what reloadlet reads. A watchable resource like `Pod` itself (same
/// group, version, kind and URL).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodView {
    #[serde(default, deserialize_with = "meta_view")]
    pub metadata: ObjectMeta,
    pub spec: Option<PodSpecView>,
    pub status: Option<PodStatusView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView {
    pub node_name: Option<String>,
    #[serde(default)]
    pub containers: Vec<ContainerView>,
    pub init_containers: Option<Vec<ContainerView>>,
    pub volumes: Option<Vec<VolumeView>>,
    /// The pod shares the node's network namespace (its `status.podIP` is the node's).
    pub host_network: Option<bool>,
    /// `Always` (the default), `OnFailure` or `Never` (`action: restart`).
    pub restart_policy: Option<String>,
    pub termination_grace_period_seconds: Option<i64>,
    pub readiness_gates: Option<Vec<ReadinessGateView>>,
}

/// `spec.readinessGates[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessGateView {
    pub condition_type: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView {
    pub name: String,
    /// `Always` on an init container makes it a sidecar (KEP-753).
    pub restart_policy: Option<String>,
    pub env: Option<Vec<EnvVar>>,
    pub env_from: Option<Vec<EnvFromSource>>,
    pub volume_mounts: Option<Vec<VolumeMount>>,
    pub ports: Option<Vec<ContainerPort>>,
    /// Only `lifecycle.stopSignal` (KEP-4960) is read.
    pub lifecycle: Option<LifecycleView>,
}

/// `lifecycle`: the stop signal only (hooks are not read).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleView {
    pub stop_signal: Option<String>,
}

/// A volume's name and the sources the kubelet projects from ConfigMaps and Secrets; any
/// other kind of volume decodes with all three `None`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeView {
    pub name: String,
    pub config_map: Option<ConfigMapVolumeSource>,
    pub secret: Option<SecretVolumeSource>,
    pub projected: Option<ProjectedView>,
    /// An inline CSI volume: only its driver and attributes are read (docs/csi.md).
    pub csi: Option<CsiVolumeView>,
}

/// `spec.volumes[].projected`: its sources (k8s-openapi's `v1_35` types, which have
/// `podCertificate`, KEP-4317: alpha in 1.34, beta in 1.35).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectedView {
    pub sources: Option<Vec<VolumeProjection>>,
}

/// `spec.volumes[].csi` (`CSIVolumeSource`): the driver and `volumeAttributes`, of which only
/// `secretProviderClass` is kept.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsiVolumeView {
    pub driver: String,
    pub volume_attributes: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatusView {
    pub phase: Option<String>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    pub container_statuses: Option<Vec<ContainerStatusView>>,
    pub init_container_statuses: Option<Vec<ContainerStatusView>>,
    pub conditions: Option<Vec<ConditionView>>,
}

/// `status.conditions[]`: the type, the status and when it last changed.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub last_transition_time: Option<Time>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatusView {
    pub name: String,
    /// `<runtime>://<id>`.
    #[serde(rename = "containerID")]
    pub container_id: Option<String>,
    pub state: Option<ContainerState>,
}

/// The metadata fields reloadlet (and kube's watcher: `resourceVersion`) reads; the rest,
/// `managedFields` above all, is skipped while parsing.
fn meta_view<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct MetaView {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        annotations: Option<BTreeMap<String, String>>,
        labels: Option<BTreeMap<String, String>>,
        owner_references: Option<Vec<OwnerReference>>,
        deletion_timestamp: Option<Time>,
    }
    let m = MetaView::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        annotations: m.annotations,
        labels: m.labels,
        owner_references: m.owner_references,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

impl k8s_openapi::Resource for PodView {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for PodView {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_what_is_read_and_skips_managed_fields() {
        let pod: PodView = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "shop", "uid": "u1", "resourceVersion": "42",
                "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"reloadlet.io/action": "signal"}, "labels": {"app": "web"},
                "deletionTimestamp": "2026-01-02T00:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "x", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {}}}}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "app", "image": "nginx", "restartPolicy": null,
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "ports": [{"name": "http", "containerPort": 80}],
                    "volumeMounts": [{"name": "conf", "mountPath": "/c", "subPath": "a"}],
                    "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "a"}}}]}],
                "volumes": [
                    {"name": "conf", "configMap": {"name": "cm", "defaultMode": 420}},
                    {"name": "scratch", "emptyDir": {"medium": "Memory"}},
                    {"name": "disk", "persistentVolumeClaim": {"claimName": "data"}}
                ]
            },
            "status": {"phase": "Running", "podIP": "10.0.0.7", "hostIP": "192.168.0.1",
                "containerStatuses": [{"name": "app", "containerID": "containerd://abc", "image": "nginx", "imageID": "x", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}]}
        }))
        .unwrap();
        let m = &pod.metadata;
        assert_eq!(m.name.as_deref(), Some("web-0"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        assert!(m.deletion_timestamp.is_some());
        assert_eq!(
            m.owner_references.as_ref().unwrap()[0].controller,
            Some(true)
        );
        assert!(m.managed_fields.is_none() && m.generation.is_none());
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        let c = &spec.containers[0];
        assert_eq!(
            c.volume_mounts.as_ref().unwrap()[0].sub_path.as_deref(),
            Some("a")
        );
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 80);
        assert!(c.env.as_ref().unwrap()[0].value_from.is_some());
        let volumes = spec.volumes.unwrap();
        assert_eq!(volumes[0].config_map.as_ref().unwrap().name, "cm");
        // Other kinds of volume keep their name only.
        assert!(volumes[1..]
            .iter()
            .all(|v| v.config_map.is_none() && v.secret.is_none() && v.projected.is_none()));
        let status = pod.status.unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.7"));
        let cs = &status.container_statuses.unwrap()[0];
        assert_eq!(cs.container_id.as_deref(), Some("containerd://abc"));
        assert!(cs.state.as_ref().unwrap().running.is_some());
    }

    #[test]
    fn is_watched_at_the_url_of_pods() {
        use kube::Resource;
        assert_eq!(PodView::kind(&()), "Pod");
        assert_eq!(PodView::api_version(&()), "v1");
        assert_eq!(
            PodView::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
    }
}
