//! What the simulated kubelet needs from the API server, shared by the kubelet and its
//! per-pod code.

use crate::apiserver::{ApiChange, ApiServer};
use crate::volumes::projection::SourceLookup;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus};

/// Pod annotation: milliseconds after start before the pod reports Ready=True.
pub const READY_DELAY_ANNOTATION: &str = "nodesim.reloadlet.io/ready-delay-ms";

/// What the kubelet needs from the API server (implemented by [`ApiServer`]; tests may
/// use a fake).
pub trait KubeletApi: Send + 'static {
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ApiChange>;
    fn list_pods(&self) -> Vec<Pod>;
    fn set_pod_status(&self, namespace: &str, name: &str, status: PodStatus);
    /// Removes a terminating pod once the kubelet has stopped it.
    fn finalize_pod(&self, namespace: &str, name: &str);
    /// The root-CA publisher puts `kube-root-ca.crt` in namespaces through this.
    fn apply_configmap(&self, cm: ConfigMap);
    /// ConfigMaps and Secrets.
    fn lookup(&self) -> &dyn SourceLookup;
}

impl KubeletApi for ApiServer {
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ApiChange> {
        ApiServer::subscribe(self)
    }
    fn list_pods(&self) -> Vec<Pod> {
        ApiServer::list_pods(self)
    }
    fn set_pod_status(&self, namespace: &str, name: &str, status: PodStatus) {
        ApiServer::set_pod_status(self, namespace, name, status)
    }
    fn finalize_pod(&self, namespace: &str, name: &str) {
        ApiServer::finalize_pod(self, namespace, name);
    }
    fn apply_configmap(&self, cm: ConfigMap) {
        ApiServer::apply_configmap(self, cm);
    }
    fn lookup(&self) -> &dyn SourceLookup {
        self
    }
}
