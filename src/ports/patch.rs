//! The controller's annotation writes (`k8s::controller::KubePatcher`): one annotation of one
//! pod, and the pod read again after a 404/409; or the `reloadlet.io/data-version` annotation
//! of one ConfigMap/Secret (docs/status.md).

use super::ApiError;
use crate::core::model::{PodInfo, SourceKind};
use futures::future::BoxFuture;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("not found")]
    NotFound,
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Anything else: a 5xx, a 422, no answer in time, a client error.
    #[error("{0}")]
    Other(ApiError),
}

/// What a [`PatchRequest`] writes: a pod, or a ConfigMap/Secret (conditional on the
/// resourceVersion its data was read at: a version computed from older data is never written
/// over newer data; the edge answers `Conflict`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatchTarget {
    Pod,
    /// A pod, conditional on the resourceVersion it was read at ([`Patcher::meta`]): the edge
    /// answers `Conflict` when anyone wrote it since (re-read it and merge again), `NotFound`
    /// when it is gone or another pod of the same name (with `uid`).
    PodAt {
        resource_version: String,
    },
    Object {
        kind: SourceKind,
        resource_version: Option<String>,
    },
}

/// One annotation to write on one pod (or one ConfigMap/Secret, [`PatchTarget`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchRequest {
    pub target: PatchTarget,
    pub namespace: String,
    pub name: String,
    /// `Some`: conditional on the pod's UID (a pod replaced under the same name is never
    /// written for its predecessor; the edge answers `NotFound`).
    pub uid: Option<String>,
    pub annotation: &'static str,
    /// `None`: the annotation is removed (`null` in the merge patch).
    pub value: Option<String>,
}

/// A pod's metadata as read for a write conditional on it ([`PatchTarget::PodAt`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMeta {
    pub uid: String,
    pub resource_version: String,
    pub annotations: BTreeMap<String, String>,
}

/// The controller's annotation writes (kube in `crate::k8s::controller`, a fake in tests).
pub trait Patcher: Send + Sync + 'static {
    /// A JSON merge patch of exactly `metadata.annotations[req.annotation]`.
    fn patch<'a>(&'a self, req: &'a PatchRequest) -> BoxFuture<'a, Result<(), PatchError>>;
    /// `Ok(None)`: the pod does not exist.
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, PatchError>>;
    /// The pod's UID, resourceVersion and annotations, read now (not from a watch);
    /// `Ok(None)`: the pod does not exist.
    fn meta<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodMeta>, PatchError>>;
}
