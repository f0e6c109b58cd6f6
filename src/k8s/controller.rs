//! The kube edges of `reloadlet controller`: metadata-only watches of ConfigMaps/Secrets, the
//! pod watch (both through [`super::watch_loop`]), the pod patches the executor writes
//! ([`crate::ports::Patcher`]), the env consumers' GET and the Lease. Everything is
//! converted to the kube-free types of [`crate::ports`] here.

use super::pod_convert::pod_info;
use super::pod_view::PodView;
use super::refusals::{api_error, report, Watched};
use super::watch_loop::{self, Change, Listing, Pacing};
use crate::core::annotations::PROJECTION_NUDGE;
use crate::core::model::{PodInfo, SourceKind};
use crate::core::permission::Feature;
use crate::core::permission::Request;
use crate::ports::RefusalSink;
use crate::ports::{
    ApiError, EnvApi, Input, LeaseError, LeaseRecord, LeaseStore, ObjectData, ObjectKey,
    PatchError, PatchRequest, Patcher,
};
use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use std::future::Future;
use tokio::sync::mpsc;

/// Follows one kind with kube's `metadata_watcher`: the API server answers with
/// `PartialObjectMetadata` (`Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`),
/// so the controller never receives (or holds) ConfigMap data or Secret values.
/// `feature`: the one that needs the watch (named when it is refused).
pub async fn watch_objects(
    client: Client,
    kind: SourceKind,
    feature: Feature,
    denials: RefusalSink,
    tx: mpsc::Sender<Input>,
) {
    let watched = |resource| Watched {
        feature,
        group: "",
        resource,
    };
    match kind {
        SourceKind::ConfigMap => {
            let api = Api::<PartialObjectMeta<ConfigMap>>::all(client);
            watch_meta(api, kind, watched("configmaps"), denials, tx).await
        }
        SourceKind::Secret => {
            let api = Api::<PartialObjectMeta<Secret>>::all(client);
            watch_meta(api, kind, watched("secrets"), denials, tx).await
        }
        // Files a CSI driver writes on a node: no API object to watch (docs/csi.md).
        SourceKind::SecretProviderClass | SourceKind::CsiVolume => {}
    }
}

async fn watch_meta<K>(
    api: Api<PartialObjectMeta<K>>,
    kind: SourceKind,
    watched: Watched,
    denials: RefusalSink,
    tx: mpsc::Sender<Input>,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let what = match kind {
        SourceKind::ConfigMap => "configmaps",
        SourceKind::Secret => "secrets",
        SourceKind::SecretProviderClass | SourceKind::CsiVolume => return,
    };
    let key = move |meta: &ObjectMeta| -> Option<(ObjectKey, String)> {
        Some((
            ObjectKey {
                kind,
                namespace: meta.namespace.clone()?,
                name: meta.name.clone()?,
            },
            meta.resource_version.clone()?,
        ))
    };
    let changes = watch_loop::changes_listed(
        api,
        watcher::Config::default(),
        Listing::Streaming,
        Pacing::UntilData,
        move |o: &PartialObjectMeta<K>| key(&o.metadata),
    );
    futures::pin_mut!(changes);
    while let Some(change) = changes.next().await {
        watched.report(&denials, &change);
        let input = match change {
            Change::Listed(objects) => Input::ObjectsListed { kind, objects },
            Change::Applied((key, resource_version)) => Input::Object {
                key,
                resource_version,
            },
            Change::Deleted(o) => match key(&o.metadata) {
                Some((key, _)) => Input::ObjectDeleted(key),
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

/// Pods in all namespaces (label selector applied by the API server). Like the object
/// watches, listed by a streaming list where the server offers one (one request per kind at
/// start-up, and no paged LIST held in the API server's memory: KEP-3157), else in pages.
/// `reloader_compat`: keep what `--reloader-compat` needs to find a pod's workload
/// (`core::keep::trimmed_for_compat`).
pub async fn watch_pods(
    client: Client,
    label_selector: Option<String>,
    reloader_compat: bool,
    denials: RefusalSink,
    tx: mpsc::Sender<Input>,
) {
    let api: Api<PodView> = Api::all(client);
    let mut config = watcher::Config::default();
    if let Some(sel) = &label_selector {
        config = config.labels(sel);
    }
    // Kept as the controller keeps pods: trimmed to what its features read.
    let trim = if reloader_compat {
        crate::core::keep::trimmed_for_compat
    } else {
        crate::core::keep::trimmed
    };
    let keep = move |pod: &PodView| pod_info(pod).map(trim);
    let changes =
        watch_loop::changes_listed(api, config, Listing::Streaming, Pacing::UntilData, keep);
    futures::pin_mut!(changes);
    let watched = Watched {
        feature: Feature::Pods,
        group: "",
        resource: "pods",
    };
    while let Some(change) = changes.next().await {
        watched.report(&denials, &change);
        let input = match change {
            Change::Listed(pods) => Input::PodsListed(pods),
            Change::Applied(info) => Input::PodApplied(info),
            Change::Deleted(pod) => match pod.metadata.uid {
                Some(uid) => Input::PodDeleted { uid },
                None => continue,
            },
            Change::Failed(e) => Input::WatchError {
                what: "pods",
                error: e.to_string(),
            },
        };
        if tx.send(input).await.is_err() {
            return;
        }
    }
}

/// The field manager of the nudge patch (visible in the pod's managedFields).
pub const FIELD_MANAGER: &str = "reloadlet-controller";

pub struct KubePatcher {
    client: Client,
    denials: RefusalSink,
    /// The feature a refusal names.
    feature: Feature,
    /// Patches are sent with `dryRun=All` (the agent's `--dry-run`).
    dry_run: bool,
}

impl KubePatcher {
    /// `denials`: where a refused request is reported (`crate::serve::denials`).
    pub fn new(client: Client, denials: RefusalSink) -> Self {
        Self {
            client,
            denials,
            feature: Feature::PodAnnotations,
            dry_run: false,
        }
    }

    /// The agent's status record (`reloadlet.io/applied`): refusals name
    /// [`Feature::StatusRecord`]; under `--dry-run` every patch is sent with `dryRun=All`, as
    /// the agent's evictions are (checked by the API server, RBAC and admission included,
    /// persisted nowhere).
    pub fn status_record(client: Client, denials: RefusalSink, dry_run: bool) -> Self {
        Self {
            client,
            denials,
            feature: Feature::StatusRecord,
            dry_run,
        }
    }
}

/// The nudge patch body: exactly one annotation.
pub fn nudge_patch(value: &str) -> serde_json::Value {
    serde_json::json!({ "metadata": { "annotations": { PROJECTION_NUDGE: value } } })
}

/// The patch body of `req`: exactly one annotation, conditional on the pod's UID when the
/// request names one (a pod replaced under the same name is never written for its
/// predecessor).
pub fn annotation_patch(req: &PatchRequest) -> serde_json::Value {
    // RFC 7386: a null member removes the key.
    let annotations = serde_json::json!({ req.annotation: req.value });
    match &req.uid {
        Some(uid) => serde_json::json!({ "metadata": { "uid": uid, "annotations": annotations } }),
        None => serde_json::json!({ "metadata": { "annotations": annotations } }),
    }
}

pub(super) fn patch_error(e: kube::Error) -> PatchError {
    match e {
        kube::Error::Api(s) if s.code == 404 => PatchError::NotFound,
        kube::Error::Api(s) if s.code == 409 => PatchError::Conflict(s.message),
        kube::Error::Api(s) if s.code == 403 => PatchError::Forbidden(s.message),
        other => PatchError::Other(api_error(&other)),
    }
}

impl Patcher for KubePatcher {
    fn patch<'a>(&'a self, req: &'a PatchRequest) -> BoxFuture<'a, Result<(), PatchError>> {
        Box::pin(async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &req.namespace);
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                dry_run: self.dry_run,
                ..PatchParams::default()
            };
            let body = annotation_patch(req);
            let result = api.patch(&req.name, &params, &Patch::Merge(&body)).await;
            report(
                &self.denials,
                Request::new(self.feature, "patch", "", "pods"),
                Some(&req.namespace),
                &result,
            );
            match result {
                Ok(_) => Ok(()),
                // Conditional on the UID — 404: gone; 409/422: another pod of the same name.
                Err(kube::Error::Api(s))
                    if req.uid.is_some() && matches!(s.code, 404 | 409 | 422) =>
                {
                    Err(PatchError::NotFound)
                }
                Err(e) => Err(patch_error(e)),
            }
        })
    }

    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, PatchError>> {
        Box::pin(async move {
            let api: Api<PodView> = Api::namespaced(self.client.clone(), namespace);
            let result = api.get_opt(name).await;
            report(
                &self.denials,
                Request::new(self.feature, "get", "", "pods"),
                Some(namespace),
                &result,
            );
            match result {
                Ok(pod) => Ok(pod.as_ref().and_then(pod_info)),
                Err(e) => Err(patch_error(e)),
            }
        })
    }
}

/// The env consumers' edge: a GET of one referenced object (full, data included: only ever
/// for objects some opted-in pod reads through env).
pub struct KubeEnvApi {
    client: Client,
    denials: RefusalSink,
    /// The features its GETs serve: of ConfigMaps, of Secrets.
    features: (Feature, Feature),
}

impl KubeEnvApi {
    /// `features`: the one a refused GET of a ConfigMap names, and of a Secret.
    pub fn new(client: Client, denials: RefusalSink, features: (Feature, Feature)) -> Self {
        Self {
            client,
            denials,
            features,
        }
    }

    fn seen<T>(&self, key: &ObjectKey, result: &Result<T, kube::Error>) {
        let (feature, resource) = match key.kind {
            SourceKind::Secret => (self.features.1, "secrets"),
            _ => (self.features.0, "configmaps"),
        };
        report(
            &self.denials,
            Request::new(feature, "get", "", resource),
            Some(&key.namespace),
            result,
        );
    }
}

impl EnvApi for KubeEnvApi {
    fn read(&self, key: &ObjectKey) -> BoxFuture<'_, Result<Option<ObjectData>, ApiError>> {
        let key = key.clone();
        Box::pin(async move {
            match key.kind {
                SourceKind::ConfigMap => {
                    let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.namespace);
                    let cm = api.get_opt(&key.name).await;
                    self.seen(&key, &cm);
                    let cm = cm.map_err(|e| api_error(&e))?;
                    Ok(cm.map(|cm| ObjectData {
                        annotations: cm.metadata.annotations.unwrap_or_default(),
                        text: cm.data.unwrap_or_default(),
                        binary: cm
                            .binary_data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0))
                            .collect(),
                        secret: false,
                    }))
                }
                SourceKind::Secret => {
                    let api: Api<Secret> = Api::namespaced(self.client.clone(), &key.namespace);
                    let secret = api.get_opt(&key.name).await;
                    self.seen(&key, &secret);
                    let secret = secret.map_err(|e| api_error(&e))?;
                    Ok(secret.map(|s| ObjectData {
                        annotations: s.metadata.annotations.unwrap_or_default(),
                        text: Default::default(),
                        binary: s
                            .data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0))
                            .collect(),
                        secret: true,
                    }))
                }
                // Never an env reference: no API object behind it.
                SourceKind::SecretProviderClass | SourceKind::CsiVolume => Ok(None),
            }
        })
    }
}

pub struct KubeLeaseStore {
    api: Api<Lease>,
    name: String,
    namespace: String,
    denials: RefusalSink,
}

impl KubeLeaseStore {
    pub fn new(client: Client, namespace: &str, name: &str, denials: RefusalSink) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            denials,
        }
    }

    fn seen<T>(&self, verb: &'static str, result: &Result<T, kube::Error>) {
        let request = Request::new(
            Feature::LeaderElection,
            verb,
            "coordination.k8s.io",
            "leases",
        );
        report(&self.denials, request, Some(&self.namespace), result);
    }

    fn lease(&self, record: &LeaseRecord, resource_version: Option<&str>) -> Lease {
        let time = |s: &Option<String>| {
            s.as_deref()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(MicroTime)
        };
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: resource_version.map(str::to_owned),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: record.holder.clone(),
                lease_duration_seconds: Some(record.lease_duration_seconds),
                acquire_time: time(&record.acquire_time),
                renew_time: time(&record.renew_time),
                lease_transitions: Some(record.transitions),
                ..LeaseSpec::default()
            }),
        }
    }
}

fn lease_error(e: kube::Error) -> LeaseError {
    match e {
        kube::Error::Api(s) if s.code == 409 => LeaseError::Conflict,
        other => LeaseError::Other(api_error(&other)),
    }
}

/// The wall clock in the Lease's micro-time format.
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

impl LeaseStore for KubeLeaseStore {
    async fn get(&self) -> Result<Option<(LeaseRecord, String)>, LeaseError> {
        {
            let found = self.api.get_opt(&self.name).await;
            self.seen("get", &found);
            let Some(lease) = found.map_err(lease_error)? else {
                return Ok(None);
            };
            let spec = lease.spec.unwrap_or_default();
            let record = LeaseRecord {
                holder: spec.holder_identity,
                lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(15),
                renew_time: spec.renew_time.map(|t| t.0.to_string()),
                acquire_time: spec.acquire_time.map(|t| t.0.to_string()),
                transitions: spec.lease_transitions.unwrap_or(0),
            };
            Ok(Some((
                record,
                lease.metadata.resource_version.unwrap_or_default(),
            )))
        }
    }

    fn create(&self, record: &LeaseRecord) -> impl Future<Output = Result<(), LeaseError>> + Send {
        let lease = self.lease(record, None);
        async move {
            let result = self.api.create(&PostParams::default(), &lease).await;
            self.seen("create", &result);
            result.map(|_| ()).map_err(lease_error)
        }
    }

    fn replace(
        &self,
        record: &LeaseRecord,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send {
        let lease = self.lease(record, Some(resource_version));
        async move {
            let result = self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await;
            self.seen("update", &result);
            result.map(|_| ()).map_err(lease_error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_writes_exactly_one_annotation() {
        assert_eq!(
            nudge_patch("configmap/app-cfg@12#2").to_string(),
            r#"{"metadata":{"annotations":{"reloadlet.io/projection-nudge":"configmap/app-cfg@12#2"}}}"#
        );
        let nudge = PatchRequest {
            namespace: "ns".into(),
            name: "web".into(),
            uid: None,
            annotation: PROJECTION_NUDGE,
            value: Some("configmap/app-cfg@12#2".into()),
        };
        assert_eq!(
            annotation_patch(&nudge),
            nudge_patch("configmap/app-cfg@12#2")
        );
        let baseline = PatchRequest {
            uid: Some("u1".into()),
            annotation: crate::core::annotations::ENV_BASELINE,
            value: Some("configmap/app=ab12".into()),
            ..nudge
        };
        assert_eq!(
            annotation_patch(&baseline).to_string(),
            r#"{"metadata":{"annotations":{"reloadlet.io/env-baseline":"configmap/app=ab12"},"uid":"u1"}}"#
        );
        // No value removes the annotation (RFC 7386: null).
        let cleared = PatchRequest {
            annotation: crate::core::pacing::ENV_PACING,
            value: None,
            ..baseline
        };
        assert_eq!(
            annotation_patch(&cleared).to_string(),
            r#"{"metadata":{"annotations":{"reloadlet.io/env-pacing":null},"uid":"u1"}}"#
        );
    }
}
