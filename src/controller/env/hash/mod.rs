//! Env consumers, the pure part: which pods the controller follows for their env, and what a
//! change of an env source does to the pod. Which keys a pod reads, their digest and the
//! baseline annotation are the consumed objects' (`crate::controller::consumed`), shared with
//! the rollout feature.
//!
//! What the kubelet puts into a container's environment (kubernetes
//! `pkg/kubelet/kubelet_pods.go`, `makeEnvironmentVariables`): for `configMapKeyRef` the value of
//! `configMap.Data[key]` (`secret.Data[key]` for `secretKeyRef`), the container failing to start
//! when it is missing unless `optional`; for `envFrom` every key of `configMap.Data`
//! (`secret.Data`) as `<prefix><key>`, nothing when an `optional` object is missing. It reads
//! them once, when it creates the container: a running container never sees a change.

use crate::core::annotations::{self, Action};
use crate::core::model::{PodInfo, SourceRef};
use std::fmt;

/// Does the controller follow this pod's env at all? (opted in with a valid annotation,
/// running, not terminating).
pub fn env_eligible(pod: &PodInfo) -> Result<(), crate::core::invalid::Invalid> {
    match annotations::parse(&pod.annotations) {
        Ok(Some(p)) if p.action == Action::Rollout => {
            return Err("action rollout: a change rolls the owning workload instead".into())
        }
        Ok(Some(_)) => {}
        Ok(None) => return Err("the pod has no reloadlet.io/action annotation".into()),
        Err(e) => return Err(crate::invalid!("invalid annotation: {e}")),
    }
    if pod.terminating {
        return Err("the pod is terminating".into());
    }
    if pod.phase != "Running" {
        return Err(crate::invalid!(
            "the pod is not running (phase {:?})",
            pod.phase
        ));
    }
    Ok(())
}

/// What a change of an env source does to a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvDecision {
    /// Evict through the Eviction API (the agent's eviction, PDB-respecting).
    Evict,
    /// Warning `EvictionRefused`: no controller owns the pod and it did not allow it.
    Refused(String),
    /// Warning `EnvNotReloaded`: a signal or HTTP reload cannot refresh env.
    NotReloaded(String),
}

/// `reloadlet.io/action: evict` or `reloadlet.io/env-action: evict` evict (unowned pods only
/// with `reloadlet.io/evict-unowned: "true"`); any other action gets `EnvNotReloaded`.
pub fn decide(pod: &PodInfo, source: &SourceRef) -> EnvDecision {
    let policy = annotations::parse(&pod.annotations).ok().flatten();
    let env_evicts = annotations::env_evicts(&pod.annotations).unwrap_or(false);
    let (evict, allow_unowned) = match policy.as_ref().map(|p| &p.action) {
        Some(Action::Evict { allow_unowned }) => (true, *allow_unowned),
        _ => (
            env_evicts,
            pod.annotations
                .get(annotations::EVICT_UNOWNED)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        ),
    };
    if !evict {
        return EnvDecision::NotReloaded(format!(
            "{source} changed, but the pod reads it through env, which a running container never sees again; a signal or HTTP reload cannot refresh it. Mount it as a volume instead, or set reloadlet.io/env-action: evict to have the pod evicted (and recreated by its controller) on such a change"
        ));
    }
    if !pod.has_controller && !allow_unowned {
        return EnvDecision::Refused(format!(
            "not evicting: the pod has no controller to recreate it (set reloadlet.io/evict-unowned: \"true\" to allow): {} changed",
            Cause(source)
        ));
    }
    EnvDecision::Evict
}

/// The cause in Events and logs: `configmap app-env (env) changed`.
pub struct Cause<'a>(pub &'a SourceRef);

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (env)", self.0)
    }
}

pub fn cause(source: &SourceRef) -> String {
    format!("{} changed", Cause(source))
}

#[cfg(test)]
mod tests;
