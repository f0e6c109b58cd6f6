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

use crate::core::annotations::{self, Action, EnvAction};
use crate::core::model::{ContainerInfo, ContainerKind, PodInfo, SourceRef};
use crate::core::restart::{self, RestartContainers};
use crate::core::restart_request::MAX_TAGGED;
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
    /// Restart these containers in place (the controller's request, granted as the agent's
    /// are, performed by the node agent; docs/restart.md, "Env consumers").
    Restart(Vec<String>),
    /// Warning `EvictionRefused`: no controller owns the pod and it did not allow it.
    Refused(String),
    /// Warning `RestartRefused`: a restart in place cannot serve this pod.
    RestartRefused(String),
    /// Nothing for the controller to do: the node agent's `action: restart` of the same
    /// source's volume restarts every container that would (the reason, logged).
    Covered(String),
    /// Warning `EnvNotReloaded`: a signal or HTTP reload cannot refresh env.
    NotReloaded(String),
}

/// `reloadlet.io/env-action: evict` (or `action: evict` without an env-action) evicts
/// (unowned pods only with `reloadlet.io/evict-unowned: "true"`); `env-action: restart` (or
/// `action: restart` without an env-action) restarts in place ([`decide_restart`]); any
/// other action gets `EnvNotReloaded`.
pub fn decide(pod: &PodInfo, source: &SourceRef) -> EnvDecision {
    let policy = annotations::parse(&pod.annotations).ok().flatten();
    let env_action = annotations::env_action(&pod.annotations).ok().flatten();
    let action = policy.as_ref().map(|p| &p.action);
    let restarts = match env_action {
        Some(EnvAction::Restart) => true,
        Some(EnvAction::Evict) => false,
        None => matches!(action, Some(Action::Restart(_))),
    };
    if restarts {
        return decide_restart(pod, source);
    }
    let (evict, allow_unowned) = match action {
        Some(Action::Evict { allow_unowned }) => (true, *allow_unowned),
        _ => (
            env_action == Some(EnvAction::Evict),
            pod.annotations
                .get(annotations::EVICT_UNOWNED)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        ),
    };
    if !evict {
        return EnvDecision::NotReloaded(format!(
            "{source} changed, but the pod reads it through env, which a running container never sees again; a signal or HTTP reload cannot refresh it. Mount it as a volume instead, or set reloadlet.io/env-action: restart to have its containers restarted in place, or reloadlet.io/env-action: evict to have the pod evicted (and recreated by its controller), on such a change"
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

/// Which containers an env restart stops: those `reloadlet.io/restart-containers` names, else
/// those whose env reads `source` (classic init containers never). Refused as `action:
/// restart` is (`core::restart::refusal`: `restartPolicy` other than `Always`, a static pod;
/// an unknown container name; a stop signal reloadlet cannot send), and past
/// [`MAX_TAGGED`] containers (the request id names each). A pod whose `action` is `restart`
/// and that mounts `source` as a volume too: the node agent restarts the containers that
/// mount it on the same change (their env comes along), so only the others are left here.
pub fn decide_restart(pod: &PodInfo, source: &SourceRef) -> EnvDecision {
    let refused = |why: &dyn fmt::Display| {
        EnvDecision::RestartRefused(format!("not restarted: {why} ({} changed)", Cause(source)))
    };
    if let Some(why) = restart::refusal(pod) {
        return refused(&why);
    }
    let spec = match restart::parse(&pod.annotations) {
        Ok(spec) => spec,
        Err(e) => return refused(&e),
    };
    if let Err(e) = restart::check_names(pod, &spec) {
        return refused(&e);
    }
    let agent_restarts = pod
        .annotations
        .get(annotations::ACTION)
        .is_some_and(|a| a.trim().eq_ignore_ascii_case("restart"));
    let mounting: Vec<&str> = pod
        .volumes
        .iter()
        .filter(|v| v.sources.contains(source))
        .map(|v| v.name.as_str())
        .collect();
    let mounts_it = |c: &ContainerInfo| {
        c.mounts
            .iter()
            .any(|m| mounting.contains(&m.volume.as_str()))
    };
    let by_agent = |c: &ContainerInfo| {
        agent_restarts
            && !mounting.is_empty()
            && match &spec.containers {
                RestartContainers::Changed => mounts_it(c),
                RestartContainers::All | RestartContainers::Named(_) => true,
            }
    };
    let selected: Vec<&ContainerInfo> = pod
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::Init)
        .filter(|c| match &spec.containers {
            RestartContainers::All => true,
            RestartContainers::Named(names) => names.contains(&c.name),
            RestartContainers::Changed => pod
                .env
                .iter()
                .any(|r| r.container == c.name && &r.source == source),
        })
        .collect();
    let chosen: Vec<&ContainerInfo> = selected.iter().copied().filter(|c| !by_agent(c)).collect();
    if chosen.is_empty() {
        return if selected.is_empty() {
            EnvDecision::Covered(format!("no selected container reads {source} through env"))
        } else {
            EnvDecision::Covered(format!(
                "the node agent restarts the containers that mount {source} on the same change (action restart), and their env comes along"
            ))
        };
    }
    if chosen.len() > MAX_TAGGED {
        return refused(&format_args!(
            "{} containers to restart; an env restart names at most {MAX_TAGGED} (reloadlet.io/restart-containers can name fewer)",
            chosen.len()
        ));
    }
    for c in &chosen {
        if let Err(e) = restart::stop_plan(pod, &spec, &c.name) {
            return refused(&e);
        }
    }
    EnvDecision::Restart(chosen.into_iter().map(|c| c.name.clone()).collect())
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
