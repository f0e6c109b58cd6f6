//! The workload edges of the controller (`k8s::workloads`, `k8s::workload_meta`): the rollout
//! feature's reads, the one patch of a rollout, and what the workload metadata watches say.

use super::{ApiError, PatchError};
use crate::core::owner_chain::{Link, PodLink, WorkloadFacts};
use crate::core::rollout::{WorkloadKind, WorkloadRef};
use futures::future::BoxFuture;
use serde_json::Value;
use std::collections::BTreeMap;

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
    ) -> BoxFuture<'a, Result<Option<PodLink>, ApiError>>;
    /// A ReplicaSet: its UID, controlling owner and selector (`Ok(None)`: no such
    /// ReplicaSet).
    fn replica_set<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Link>, ApiError>>;
    /// The workload from one GET: its update strategy (defaults filled in), UID (the Events'
    /// `regarding`), selector, own and pod template annotations; `Ok(None)`: no such workload.
    fn workload<'a>(
        &'a self,
        workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<WorkloadFacts>, ApiError>>;
    /// The workload's own annotations, read metadata-only (`Ok(None)`: no such workload;
    /// `explain` of `--reloader-compat`).
    fn annotations<'a>(
        &'a self,
        workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, ApiError>>;
    /// What the workload says of its past rollouts, from one GET: the pod template's
    /// `kubectl.kubernetes.io/restartedAt` (an Argo Rollout's `spec.restartAt`) and its own
    /// `reloadlet.io/rollout-pacing` annotation — what rollout pacing reads back after a
    /// restart or a leader change. `Ok(None)`: no such workload.
    fn rollout_history<'a>(
        &'a self,
        _workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<RolloutHistory>, ApiError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// The workload edge of the rollout (kube in `crate::k8s::workloads`, a fake in tests).
pub trait WorkloadPatcher: Send + Sync + 'static {
    /// One JSON merge patch (`application/merge-patch+json`) of `workload`.
    fn patch<'a>(
        &'a self,
        workload: &'a WorkloadRef,
        patch: &'a Value,
    ) -> BoxFuture<'a, Result<(), PatchError>>;
}
