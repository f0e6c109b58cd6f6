//! STUB — replaced by the API server implementation. Only the in-process interface
//! that the simulated kubelet and the tests use is fixed here.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus, Secret};
use std::path::Path;

/// A change the simulated kubelet (and tests) can follow without polling.
#[derive(Clone, Debug)]
pub enum ApiChange {
    PodUpserted(Box<Pod>),
    PodDeleted(Box<Pod>),
    ConfigMapChanged { namespace: String, name: String },
    SecretChanged { namespace: String, name: String },
}

#[derive(Clone)]
pub struct ApiServer {}

impl ApiServer {
    /// Binds 127.0.0.1:0 and serves until dropped/shut down.
    pub async fn start() -> anyhow::Result<ApiServer> {
        unimplemented!()
    }
    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        unimplemented!()
    }
    /// A kubeconfig whose current context points at this server (no auth).
    pub fn write_kubeconfig(&self, _path: &Path) -> std::io::Result<()> {
        unimplemented!()
    }
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ApiChange> {
        unimplemented!()
    }
    /// Assigns uid, resourceVersion, creationTimestamp, generation when missing.
    pub fn create_pod(&self, _pod: Pod) -> Pod {
        unimplemented!()
    }
    /// Replaces metadata/spec (annotations changes are visible to watchers).
    pub fn replace_pod(&self, _pod: Pod) -> Pod {
        unimplemented!()
    }
    /// What the kubelet reports: containerStatuses, phase, conditions (Ready).
    pub fn set_pod_status(&self, _namespace: &str, _name: &str, _status: PodStatus) {
        unimplemented!()
    }
    /// Removes the pod now (a DELETED watch event).
    pub fn delete_pod(&self, _namespace: &str, _name: &str) -> Option<Pod> {
        unimplemented!()
    }
    pub fn get_pod(&self, _namespace: &str, _name: &str) -> Option<Pod> {
        unimplemented!()
    }
    pub fn list_pods(&self) -> Vec<Pod> {
        unimplemented!()
    }
    pub fn apply_configmap(&self, _cm: ConfigMap) {
        unimplemented!()
    }
    pub fn get_configmap(&self, _namespace: &str, _name: &str) -> Option<ConfigMap> {
        unimplemented!()
    }
    pub fn apply_secret(&self, _secret: Secret) {
        unimplemented!()
    }
    pub fn get_secret(&self, _namespace: &str, _name: &str) -> Option<Secret> {
        unimplemented!()
    }
}
