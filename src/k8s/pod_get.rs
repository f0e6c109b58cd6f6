//! The pod reads of `reloadlet explain`: the pod asked about, and the labels of the pod
//! `explain` itself runs in.

use super::pod_view::PodView;
use super::refusals::api_error;
use crate::ports::ApiError;
use kube::{Api, Client};
use std::collections::BTreeMap;

/// One GET of the pod `namespace/name`.
pub async fn get_pod(client: Client, namespace: &str, name: &str) -> Result<PodView, ApiError> {
    let api: Api<PodView> = Api::namespaced(client, namespace);
    api.get(name).await.map_err(|e| api_error(&e))
}

/// The namespace and identifying labels of the pod `explain` runs in (to name the agent on
/// another node): POD_NAMESPACE (else the ServiceAccount's namespace file) and POD_NAME (else
/// HOSTNAME), read from the API; per-revision labels are left out. Falls back to the labels
/// the manifests set.
pub async fn own_pod_identity(client: Client) -> (String, BTreeMap<String, String>) {
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "reloadlet".into());
    let fallback: BTreeMap<String, String> = [(
        "app.kubernetes.io/name".to_string(),
        "reloadlet".to_string(),
    )]
    .into();
    let name = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default();
    if name.is_empty() {
        return (namespace, fallback);
    }
    let api: Api<PodView> = Api::namespaced(client, &namespace);
    let labels = match api.get(&name).await {
        Ok(p) => p
            .metadata
            .labels
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "controller-revision-hash" | "pod-template-generation" | "pod-template-hash"
                )
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    (namespace, if labels.is_empty() { fallback } else { labels })
}

/// Every pod of `namespace`, as the core sees pods (`explain` of an `action: restart` pod:
/// whether it is the only pod of its owner). One list; pods that do not convert are left out.
pub async fn namespace_pods(
    client: Client,
    namespace: &str,
) -> Result<Vec<crate::core::model::PodInfo>, ApiError> {
    let api: Api<PodView> = Api::namespaced(client, namespace);
    let list = api
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|e| api_error(&e))?;
    Ok(list
        .items
        .iter()
        .filter_map(super::pod_convert::pod_info)
        .collect())
}
