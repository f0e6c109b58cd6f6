//! The controller's API edges as small traits (kube-free), each with a fake for tests
//! (`super::fake`). The kube implementations live in `crate::k8s::controller`; the pod patches
//! go through the executor (`crate::execute::patch`).

use super::env::hash::ObjectData;
use super::lease::LeaseRecord;
use crate::core::model::{PodInfo, SourceKind};
use crate::core::owner_chain::{Link, PodLink, WorkloadFacts};
use crate::core::rollout::{WorkloadKind, WorkloadRef};
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::future::Future;

/// A ConfigMap or Secret, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
}

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

/// A Deployment's, StatefulSet's, DaemonSet's or Argo Rollout's own annotations (its
/// metadata, watched metadata-only with `--reloader-compat`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadMeta {
    pub workload: WorkloadRef,
    pub annotations: BTreeMap<String, String>,
}

/// What the workload metadata watches say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadChange {
    Applied(WorkloadMeta),
    Deleted(WorkloadRef),
    /// The complete list of `kind` after a (re)list.
    Listed(WorkloadKind, Vec<WorkloadMeta>),
}

/// The env-consumer edge: one GET of a referenced ConfigMap/Secret (its data, held only
/// while its consumers' digests are computed). The baseline annotation is written through
/// the executor.
pub trait EnvApi: Send + Sync + 'static {
    /// `Ok(None)`: the object does not exist.
    fn read(&self, key: &ObjectKey) -> BoxFuture<'_, Result<Option<ObjectData>, String>>;
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Someone else wrote the Lease first (409 on update, 409 "already exists" on create).
    #[error("conflict")]
    Conflict,
    #[error("{0}")]
    Other(String),
}

/// The Lease `reloadlet-controller` in the controller's namespace.
pub trait LeaseStore: Send + Sync + 'static {
    /// The record and its resourceVersion; `None` when there is no Lease.
    fn get(&self)
        -> impl Future<Output = Result<Option<(LeaseRecord, String)>, LeaseError>> + Send;
    fn create(&self, record: &LeaseRecord) -> impl Future<Output = Result<(), LeaseError>> + Send;
    /// An update conditional on `resource_version`.
    fn replace(
        &self,
        record: &LeaseRecord,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send;
}

/// A workload's past rollouts as it records them ([`WorkloadApi::rollout_history`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutHistory {
    /// The last restart (RFC 3339), whoever made it: reloadlet, `kubectl rollout restart`.
    pub restarted_at: Option<String>,
    /// `reloadlet.io/rollout-pacing` of the workload's own metadata
    /// (`crate::core::pacing::PacingRecord`).
    pub pacing: Option<String>,
}

/// The rollout feature's reads (`reloadlet.io/action: rollout`): who owns a pod, who owns a
/// ReplicaSet, and a workload's update strategy. The patch itself goes through the executor
/// (`crate::execute::rollout`).
pub trait WorkloadApi: Send + Sync + 'static {
    /// The pod's metadata: UID, labels, annotations and controlling owner (`Ok(None)`: the
    /// pod is gone).
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodLink>, String>>;
    /// A ReplicaSet: its UID, controlling owner and selector (`Ok(None)`: no such
    /// ReplicaSet).
    fn replica_set<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Link>, String>>;
    /// The workload from one GET: its update strategy (defaults filled in), UID (the Events'
    /// `regarding`), selector, own and pod template annotations; `Ok(None)`: no such workload.
    fn workload<'a>(
        &'a self,
        workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<WorkloadFacts>, String>>;
    /// The workload's own annotations, read metadata-only (`Ok(None)`: no such workload;
    /// `explain` of `--reloader-compat`).
    fn annotations<'a>(
        &'a self,
        workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, String>>;
    /// What the workload says of its past rollouts, from one GET: the pod template's
    /// `kubectl.kubernetes.io/restartedAt` (an Argo Rollout's `spec.restartAt`) and its own
    /// `reloadlet.io/rollout-pacing` annotation — what rollout pacing reads back after a
    /// restart or a leader change. `Ok(None)`: no such workload.
    fn rollout_history<'a>(
        &'a self,
        _workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<RolloutHistory>, String>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}
