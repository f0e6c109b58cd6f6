//! The kube edges of `reloadlet controller`: metadata-only watches of ConfigMaps/Secrets, the
//! pod watch (both through [`super::watch_loop`]), the pod patches the executor writes
//! ([`crate::ports::Patcher`]), the env consumers' GET and the Lease. Everything is
//! converted to the kube-free types of [`crate::ports`] here.

use super::managed_fields;
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
    OwnDataVersions, PatchError, PatchRequest, PatchTarget, Patcher, PodMeta,
};
use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use std::future::Future;
use tokio::sync::mpsc;

/// Follows one kind with kube's `metadata_watcher`: the API server answers with
/// `PartialObjectMetadata` (`Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`),
/// so the controller never receives (or holds) ConfigMap data or Secret values.
/// `feature`: the one that needs the watch (named when it is refused); `own`: the data
/// versions the controller is writing, whose echo is not routed.
pub async fn watch_objects(
    client: Client,
    kind: SourceKind,
    feature: Feature,
    denials: RefusalSink,
    own: OwnDataVersions,
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
            watch_meta(api, kind, watched("configmaps"), denials, own, tx).await
        }
        SourceKind::Secret => {
            let api = Api::<PartialObjectMeta<Secret>>::all(client);
            watch_meta(api, kind, watched("secrets"), denials, own, tx).await
        }
        // Files a CSI driver or the kubelet's pod certificate manager writes on a node: no API
        // object to watch (docs/csi.md, docs/signals.md).
        SourceKind::SecretProviderClass | SourceKind::CsiVolume | SourceKind::PodCertificate => {}
    }
}

async fn watch_meta<K>(
    api: Api<PartialObjectMeta<K>>,
    kind: SourceKind,
    watched: Watched,
    denials: RefusalSink,
    own: OwnDataVersions,
    tx: mpsc::Sender<Input>,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let what = match kind {
        SourceKind::ConfigMap => "configmaps",
        SourceKind::Secret => "secrets",
        SourceKind::SecretProviderClass | SourceKind::CsiVolume | SourceKind::PodCertificate => {
            return
        }
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
        move |o: &PartialObjectMeta<K>| key(&o.metadata).map(|k| (k, MetaPrint::of(&o.metadata))),
    );
    futures::pin_mut!(changes);
    // The metadata fingerprints last seen, to tell the echo of the controller's own
    // data-version write apart ([`MetaPrint::echo_of_own_write`]).
    let mut prints: std::collections::HashMap<ObjectKey, MetaPrint> =
        std::collections::HashMap::new();
    while let Some(change) = changes.next().await {
        watched.report(&denials, &change);
        let input = match change {
            Change::Listed(objects) => {
                prints = objects.iter().map(|((k, _), p)| (k.clone(), *p)).collect();
                let objects = objects.into_iter().map(|(k, _)| k).collect();
                Input::ObjectsListed { kind, objects }
            }
            Change::Applied(((key, resource_version), print)) => {
                let before = prints.insert(key.clone(), print);
                // The controller's own write of reloadlet.io/data-version: nothing a feature
                // acts on changed (the data cannot have: that write is metadata only and
                // conditional on the resourceVersion it read), so it is not routed (no nudge,
                // no re-read). Another writer's change of it is (its data may have changed).
                if before.is_some_and(|b| b.echo_of_own_write(&print, &key, &own)) {
                    continue;
                }
                Input::Object {
                    key,
                    resource_version,
                }
            }
            Change::Deleted(o) => match key(&o.metadata) {
                Some((key, _)) => {
                    prints.remove(&key);
                    own.forget(&key);
                    Input::ObjectDeleted(key)
                }
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

/// Two fingerprints of an object's metadata: of everything but its resourceVersion,
/// managedFields and `reloadlet.io/data-version` annotation, and of that annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaPrint {
    rest: u64,
    /// `None`: no such annotation.
    data_version: Option<u64>,
}

impl MetaPrint {
    pub fn of(meta: &ObjectMeta) -> Self {
        use std::hash::{Hash, Hasher};
        let dv = crate::core::status::data_version::ANNOTATION;
        let mut rest = std::collections::hash_map::DefaultHasher::new();
        meta.labels.hash(&mut rest);
        if let Some(a) = &meta.annotations {
            a.iter()
                .filter(|(k, _)| *k != dv)
                .for_each(|kv| kv.hash(&mut rest));
        }
        meta.finalizers.hash(&mut rest);
        meta.owner_references
            .iter()
            .flatten()
            .for_each(|o| o.uid.hash(&mut rest));
        meta.deletion_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .hash(&mut rest);
        let data_version = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(dv))
            .map(|v| OwnDataVersions::fingerprint(v));
        Self {
            rest: rest.finish(),
            data_version,
        }
    }

    /// Only `reloadlet.io/data-version` changed between `self` and `now`, to a new value (a
    /// data change leaves the metadata as it was, but for the resourceVersion; a replace
    /// without the annotation removes it, which is never this).
    pub fn only_data_version_changed(&self, now: &Self) -> bool {
        self.rest == now.rest && now.data_version.is_some() && self.data_version != now.data_version
    }

    /// [`Self::only_data_version_changed`], to the value the controller wrote last on `key`
    /// (`own`): the echo of its own write. Another writer's value is not (a restore or a copy
    /// of the object may bring new data with it).
    pub fn echo_of_own_write(&self, now: &Self, key: &ObjectKey, own: &OwnDataVersions) -> bool {
        self.only_data_version_changed(now)
            && now
                .data_version
                .is_some_and(|fingerprint| own.is_echo(key, fingerprint))
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
    let mut keeper = crate::core::keep::Keeper::new(reloader_compat);
    let keep = move |pod: &PodView| pod_info(pod).map(|p| keeper.keep(p));
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
    let mut metadata = serde_json::json!({ "annotations": annotations });
    if let Some(uid) = &req.uid {
        metadata["uid"] = uid.as_str().into();
    }
    // Registry `Store.Update` (apiserver pkg/registry/generic/registry/store.go): a
    // resourceVersion in the patched object that is not the stored one is a 409 Conflict.
    if let PatchTarget::PodAt { resource_version } = &req.target {
        metadata["resourceVersion"] = resource_version.as_str().into();
    }
    serde_json::json!({ "metadata": metadata })
}

/// The patch body of an object's annotation: that one annotation, conditional on the
/// resourceVersion its data was read at (409 when it changed since).
pub fn object_annotation_patch(req: &PatchRequest) -> serde_json::Value {
    let annotations = serde_json::json!({ req.annotation: req.value });
    match &req.target {
        PatchTarget::Object {
            resource_version: Some(rv),
            ..
        } => {
            serde_json::json!({ "metadata": { "resourceVersion": rv, "annotations": annotations } })
        }
        _ => serde_json::json!({ "metadata": { "annotations": annotations } }),
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

impl KubePatcher {
    /// The data version of a ConfigMap/Secret: a metadata-only merge patch (a Secret's data
    /// never comes back), conditional on the resourceVersion in the body; a refusal names
    /// [`Feature::DataVersions`].
    async fn patch_object(
        &self,
        kind: SourceKind,
        req: &PatchRequest,
        params: &PatchParams,
    ) -> Result<(), PatchError> {
        let body = object_annotation_patch(req);
        let patch = Patch::Merge(&body);
        let (result, resource) = match kind {
            SourceKind::ConfigMap => (
                Api::<ConfigMap>::namespaced(self.client.clone(), &req.namespace)
                    .patch_metadata(&req.name, params, &patch)
                    .await
                    .map(|_| ()),
                "configmaps",
            ),
            SourceKind::Secret => (
                Api::<Secret>::namespaced(self.client.clone(), &req.namespace)
                    .patch_metadata(&req.name, params, &patch)
                    .await
                    .map(|_| ()),
                "secrets",
            ),
            // No API object behind it: never published.
            SourceKind::SecretProviderClass
            | SourceKind::CsiVolume
            | SourceKind::PodCertificate => return Ok(()),
        };
        report(
            &self.denials,
            Request::new(Feature::DataVersions, "patch", "", resource),
            Some(&req.namespace),
            &result,
        );
        result.map_err(patch_error)
    }
}

impl Patcher for KubePatcher {
    fn patch<'a>(&'a self, req: &'a PatchRequest) -> BoxFuture<'a, Result<(), PatchError>> {
        Box::pin(async move {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                dry_run: self.dry_run,
                ..PatchParams::default()
            };
            if let PatchTarget::Object { kind, .. } = &req.target {
                return self.patch_object(*kind, req, &params).await;
            }
            // The answer (the whole pod) is not used: it is decoded as the lean view the pod
            // watch decodes, not as k8s-openapi's `Pod` (code and work each record write would
            // otherwise add to the agent's steady state).
            let api: Api<PodView> = Api::namespaced(self.client.clone(), &req.namespace);
            let body = annotation_patch(req);
            let result = api.patch(&req.name, &params, &Patch::Merge(&body)).await;
            report(
                &self.denials,
                Request::new(self.feature, "patch", "", "pods"),
                Some(&req.namespace),
                &result,
            );
            let at_version = matches!(req.target, PatchTarget::PodAt { .. });
            match result {
                Ok(_) => Ok(()),
                // Conditional on the resourceVersion: 409 is a write since the read (the
                // caller reads again); the UID's mismatch is then a 422 (metadata.uid is
                // immutable).
                Err(kube::Error::Api(s)) if at_version && s.code == 409 => {
                    Err(PatchError::Conflict(s.message))
                }
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
            let pod = self.read_pod(namespace, name).await?;
            Ok(pod.as_ref().and_then(pod_info))
        })
    }

    fn meta<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodMeta>, PatchError>> {
        Box::pin(async move {
            let pod = self.read_pod(namespace, name).await?;
            Ok(pod.map(|p| PodMeta {
                uid: p.metadata.uid.unwrap_or_default(),
                resource_version: p.metadata.resource_version.unwrap_or_default(),
                annotations: p.metadata.annotations.unwrap_or_default(),
            }))
        })
    }
}

impl KubePatcher {
    /// One GET of a pod (`None`: not found), its refusal reported.
    async fn read_pod(&self, namespace: &str, name: &str) -> Result<Option<PodView>, PatchError> {
        let api: Api<PodView> = Api::namespaced(self.client.clone(), namespace);
        let result = api.get_opt(name).await;
        report(
            &self.denials,
            Request::new(self.feature, "get", "", "pods"),
            Some(namespace),
            &result,
        );
        result.map_err(patch_error)
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
                        data_written: managed_fields::data_written(&cm.metadata),
                        resource_version: cm.metadata.resource_version,
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
                        data_written: managed_fields::data_written(&s.metadata),
                        resource_version: s.metadata.resource_version,
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
                SourceKind::SecretProviderClass
                | SourceKind::CsiVolume
                | SourceKind::PodCertificate => Ok(None),
            }
        })
    }
}

pub struct KubeLeaseStore {
    api: Api<Lease>,
    name: String,
    namespace: String,
    denials: RefusalSink,
    /// Whose refusals they are: the controller's leader election, or the agent's read.
    feature: Feature,
}

impl KubeLeaseStore {
    pub fn new(client: Client, namespace: &str, name: &str, denials: RefusalSink) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            denials,
            feature: Feature::LeaderElection,
        }
    }

    /// The agent's reader of the controller's Lease (`get` only,
    /// [`Feature::RestartCoordination`]).
    pub fn agent_reader(client: Client, namespace: &str, name: &str, denials: RefusalSink) -> Self {
        Self {
            feature: Feature::RestartCoordination,
            ..Self::new(client, namespace, name, denials)
        }
    }

    fn seen<T>(&self, verb: &'static str, result: &Result<T, kube::Error>) {
        let request = Request::new(self.feature, verb, "coordination.k8s.io", "leases");
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

impl crate::ports::LeaseReader for KubeLeaseStore {
    fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn read(&self) -> futures::future::BoxFuture<'_, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(async move { Ok(LeaseStore::get(self).await?.map(|(record, _)| record)) })
    }
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
    fn only_the_controllers_own_data_version_write_is_told_apart() {
        let meta = |labels: &[(&str, &str)], annotations: &[(&str, &str)]| ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        };
        let dv = crate::core::status::data_version::ANNOTATION;
        let before = MetaPrint::of(&meta(&[("app", "web")], &[("team", "shop")]));
        // A data change: the metadata is as it was.
        assert!(!before.only_data_version_changed(&before));
        // The controller's write.
        let published = MetaPrint::of(&meta(&[("app", "web")], &[("team", "shop"), (dv, "v1 x")]));
        assert!(before.only_data_version_changed(&published));
        // A label or another annotation changed too: routed.
        let relabelled = MetaPrint::of(&meta(&[("app", "db")], &[("team", "shop"), (dv, "v1 y")]));
        assert!(!published.only_data_version_changed(&relabelled));
        let other = MetaPrint::of(&meta(&[("app", "web")], &[("team", "bank")]));
        assert!(!before.only_data_version_changed(&other));
        // A replace of the object without the annotation (new data, say): routed.
        assert!(!published.only_data_version_changed(&before));
        // Only the value the controller wrote is its echo; another writer's (a restore of the
        // object, with other data perhaps) is routed.
        let own = OwnDataVersions::default();
        let key = ObjectKey {
            kind: SourceKind::ConfigMap,
            namespace: "shop".into(),
            name: "app".into(),
        };
        assert!(!before.echo_of_own_write(&published, &key, &own));
        own.writing(key.clone(), "v1 x");
        assert!(before.echo_of_own_write(&published, &key, &own));
        own.writing(key.clone(), "v1 z");
        assert!(!before.echo_of_own_write(&published, &key, &own));
    }

    #[test]
    fn the_patch_writes_exactly_one_annotation() {
        assert_eq!(
            nudge_patch("configmap/app-cfg@12#2").to_string(),
            r#"{"metadata":{"annotations":{"reloadlet.io/projection-nudge":"configmap/app-cfg@12#2"}}}"#
        );
        let nudge = PatchRequest {
            target: PatchTarget::Pod,
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
        // A ConfigMap's data version: conditional on the resourceVersion its data was read at.
        let data_version = PatchRequest {
            target: PatchTarget::Object {
                kind: SourceKind::ConfigMap,
                resource_version: Some("41".into()),
            },
            uid: None,
            annotation: crate::core::status::data_version::ANNOTATION,
            value: Some("v1 since=2026-11-29T09:36:45Z app.conf=0f3c9a1e5b7d2c48".into()),
            ..baseline.clone()
        };
        assert_eq!(
            object_annotation_patch(&data_version).to_string(),
            r#"{"metadata":{"annotations":{"reloadlet.io/data-version":"v1 since=2026-11-29T09:36:45Z app.conf=0f3c9a1e5b7d2c48"},"resourceVersion":"41"}}"#
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
        // The status record: conditional on the UID and the resourceVersion it was read at.
        let record = PatchRequest {
            target: PatchTarget::PodAt {
                resource_version: "77".into(),
            },
            annotation: crate::core::status::applied::ANNOTATION,
            value: Some("{}".into()),
            ..cleared
        };
        assert_eq!(
            annotation_patch(&record).to_string(),
            r#"{"metadata":{"annotations":{"reloadlet.io/applied":"{}"},"resourceVersion":"77","uid":"u1"}}"#
        );
    }
}
