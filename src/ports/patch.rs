//! The pod edge of the controller's writes: one annotation of one pod
//! (`k8s::controller::KubePatcher`), and the pod read again after a 404/409.

use super::ApiError;
use crate::core::model::PodInfo;
use futures::future::BoxFuture;

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

/// One annotation to write on one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchRequest {
    pub namespace: String,
    pub name: String,
    /// `Some`: conditional on the pod's UID (a pod replaced under the same name is never
    /// written for its predecessor; the edge answers `NotFound`).
    pub uid: Option<String>,
    pub annotation: &'static str,
    /// `None`: the annotation is removed (`null` in the merge patch).
    pub value: Option<String>,
}

/// The pod edge of the controller's writes (kube in `crate::k8s::controller`, a fake in tests).
pub trait Patcher: Send + Sync + 'static {
    /// A JSON merge patch of exactly `metadata.annotations[req.annotation]`.
    fn patch<'a>(&'a self, req: &'a PatchRequest) -> BoxFuture<'a, Result<(), PatchError>>;
    /// `Ok(None)`: the pod does not exist.
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, PatchError>>;
}
