//! What the controller's watches (`k8s::controller`, `k8s::workload_meta`) tell its loop.

use super::{ObjectKey, WorkloadChange};
use crate::core::model::{PodInfo, SourceKind};

/// What the watches tell the controller loop.
#[derive(Debug)]
pub enum Input {
    /// A ConfigMap/Secret (metadata only) was added or modified.
    Object {
        key: ObjectKey,
        resource_version: String,
    },
    ObjectDeleted(ObjectKey),
    /// The complete list of `kind` after a (re)list.
    ObjectsListed {
        kind: SourceKind,
        objects: Vec<(ObjectKey, String)>,
    },
    PodApplied(PodInfo),
    PodDeleted {
        uid: String,
    },
    /// The complete pod list after a (re)list.
    PodsListed(Vec<PodInfo>),
    /// Leadership gained (`true`) or lost.
    Leader(bool),
    /// A workload's metadata (`--reloader-compat`).
    Workload(WorkloadChange),
    /// A watch failed; it retries with backoff.
    WatchError {
        what: &'static str,
        error: String,
    },
}
