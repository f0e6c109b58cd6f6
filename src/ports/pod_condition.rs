//! The write of a pod's drain readiness-gate condition (`reloadlet.io/restart-drain`,
//! `core::drain_gate`): a patch of the `pods/status` subresource (kube in
//! `crate::k8s::pod_condition`, a fake in tests).

use super::{PatchError, PodRef};
use crate::core::drain_gate::GateCondition;
use futures::future::BoxFuture;

pub trait GateWriter: Send + Sync + 'static {
    /// Sets the condition `reloadlet.io/restart-drain` of `pod` (conditional on its UID: a
    /// pod replaced under the same name answers `NotFound`).
    fn set<'a>(
        &'a self,
        pod: &'a PodRef,
        condition: &'a GateCondition,
    ) -> BoxFuture<'a, Result<(), PatchError>>;
}
