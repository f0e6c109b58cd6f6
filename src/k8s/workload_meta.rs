//! `--reloader-compat`: the metadata of Deployments, StatefulSets, DaemonSets (and Argo
//! Rollouts with `--argo-rollouts`), watched metadata-only through [`super::watch_loop`] —
//! kube's `Api<PartialObjectMeta<K>>` sends `Accept:
//! application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` on lists and
//! `…;as=PartialObjectMetadata;…` on watches (kube-core `request.rs`, `JSON_METADATA_LIST_MIME`
//! / `JSON_METADATA_MIME`), which the API server answers with `meta.k8s.io/v1`
//! `PartialObjectMetadata(List)` (apiserver `pkg/endpoints/handlers/response.go`,
//! `asPartialObjectMetadata(List)`): the controller never receives pod templates, only each
//! workload's own annotations, which is where Reloader's sit.

use super::refusals::Watched;
use super::watch_loop::{self, Change, Pacing};
use crate::core::permission::Feature;
use crate::core::rollout::{WorkloadKind, WorkloadRef};
use crate::ports::RefusalSink;
use crate::ports::{Input, WorkloadChange, WorkloadMeta};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PartialObjectMeta};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use tokio::sync::mpsc;

/// One watch per kind, each on its own task.
pub fn spawn_watches(client: Client, argo: bool, denials: RefusalSink, tx: mpsc::Sender<Input>) {
    tokio::spawn(watch(
        Api::<PartialObjectMeta<Deployment>>::all(client.clone()),
        WorkloadKind::Deployment,
        denials.clone(),
        tx.clone(),
    ));
    tokio::spawn(watch(
        Api::<PartialObjectMeta<StatefulSet>>::all(client.clone()),
        WorkloadKind::StatefulSet,
        denials.clone(),
        tx.clone(),
    ));
    tokio::spawn(watch(
        Api::<PartialObjectMeta<DaemonSet>>::all(client.clone()),
        WorkloadKind::DaemonSet,
        denials.clone(),
        tx.clone(),
    ));
    if argo {
        let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "rollouts");
        tokio::spawn(watch(
            Api::<PartialObjectMeta<DynamicObject>>::all_with(client, &resource),
            WorkloadKind::ArgoRollout,
            denials,
            tx,
        ));
    }
}

/// The workload and its own annotations (`None`: no name or namespace).
pub fn workload_meta(kind: WorkloadKind, meta: &ObjectMeta) -> Option<WorkloadMeta> {
    Some(WorkloadMeta {
        workload: WorkloadRef {
            kind,
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
        },
        annotations: meta.annotations.clone().unwrap_or_default(),
    })
}

async fn watch<K>(
    api: Api<PartialObjectMeta<K>>,
    kind: WorkloadKind,
    denials: RefusalSink,
    tx: mpsc::Sender<Input>,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let what = match kind {
        WorkloadKind::Deployment => "deployments",
        WorkloadKind::StatefulSet => "statefulsets",
        WorkloadKind::DaemonSet => "daemonsets",
        WorkloadKind::ArgoRollout => "rollouts",
    };
    let watched = match kind {
        WorkloadKind::ArgoRollout => Watched {
            feature: Feature::ArgoRollouts,
            group: "argoproj.io",
            resource: what,
        },
        _ => Watched {
            feature: Feature::ReloaderCompat,
            group: "apps",
            resource: what,
        },
    };
    let changes = watch_loop::changes(
        api,
        watcher::Config::default(),
        Pacing::UntilData,
        move |o: &PartialObjectMeta<K>| workload_meta(kind, &o.metadata),
    );
    futures::pin_mut!(changes);
    while let Some(change) = changes.next().await {
        watched.report(&denials, &change);
        let input = match change {
            Change::Listed(all) => Input::Workload(WorkloadChange::Listed(kind, all)),
            Change::Applied(w) => Input::Workload(WorkloadChange::Applied(w)),
            Change::Deleted(o) => match workload_meta(kind, &o.metadata) {
                Some(w) => Input::Workload(WorkloadChange::Deleted(w.workload)),
                None => continue,
            },
            Change::Failed(e) => Input::WatchError {
                what,
                error: e.to_string(),
            },
        };
        if tx.send(input).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_is_its_kind_namespace_name_and_own_annotations() {
        let meta = ObjectMeta {
            name: Some("web".into()),
            namespace: Some("shop".into()),
            annotations: Some([("reloader.stakater.com/auto".into(), "true".into())].into()),
            ..ObjectMeta::default()
        };
        let w = workload_meta(WorkloadKind::StatefulSet, &meta).unwrap();
        assert_eq!(w.workload.name, "web");
        assert_eq!(w.workload.namespace, "shop");
        assert_eq!(w.workload.kind, WorkloadKind::StatefulSet);
        assert_eq!(w.annotations["reloader.stakater.com/auto"], "true");
        let cluster_scoped = ObjectMeta {
            namespace: None,
            ..meta
        };
        assert!(workload_meta(WorkloadKind::Deployment, &cluster_scoped).is_none());
    }
}
