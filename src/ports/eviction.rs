//! The Eviction API edge (`k8s::eviction::KubeEvictor`).

use futures::future::BoxFuture;
use std::time::Duration;

/// What the Eviction API answered (`k8s::eviction::classify`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictOutcome {
    /// 201/200: the pod is being deleted (or would be, on dry-run).
    Evicted,
    /// 429: a PodDisruptionBudget does not allow it now. `cause` is the server's explanation.
    Blocked {
        cause: String,
        retry_after: Option<Duration>,
    },
    /// 404 or 409 (UID precondition failed): the pod is gone or was replaced.
    Gone,
    /// Anything else (500 for several PDBs, 403, network errors, no answer in time): keep
    /// retrying, report it.
    Failed { code: Option<u16>, message: String },
}

#[derive(Clone, Debug)]
pub struct EvictRequest {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub dry_run: bool,
}

/// The Eviction API (`k8s::eviction::KubeEvictor`).
pub trait Evictor: Send + Sync {
    fn evict(&self, req: &EvictRequest) -> BoxFuture<'_, EvictOutcome>;
}
