//! The drain readiness gate of `action: restart` (issue #45 §2, docs/restart.md): a pod that
//! declares `spec.readinessGates[].conditionType: reloadlet.io/restart-drain`
//! ([`crate::core::restart::DRAIN_GATE`]) is taken out of its Services before a restart by
//! the condition of that type set `False`, and put back by setting it `True`. Pure: which
//! condition to write, and when.
//!
//! Why a condition takes a pod out of its Services: the kubelet's Ready condition is `True`
//! only when every container is ready **and** every readiness-gate condition is `True`; a gate
//! whose condition is missing counts as not ready (`GeneratePodReadyCondition`,
//! pkg/kubelet/status/generate.go: `"corresponding condition of pod readiness gate %q does
//! not exist"`, reason `ReadinessGatesNotReady`). The EndpointSlice controller serves a pod
//! only while it is Ready (`podutil.IsPodReady`, pkg/controller/endpointslice). Hence the
//! agent also sets the condition `True` on first sight of a pod that declares the gate but
//! has no such condition yet: without it the pod would never be Ready.
//!
//! Custom conditions are written through the `pods/status` subresource; the kubelet keeps
//! the conditions it does not own when it writes its status (`mergePodStatus`,
//! pkg/kubelet/status/status_manager.go, `kubetypes.PodConditionByKubelet`) and recomputes
//! Ready when a gate's condition changed (`NeedToReconcilePodReadiness`, the same file,
//! called from `HandlePodReconcile`).

use crate::core::model::{ContainerId, PodInfo};

/// The condition's `reason` while the pod is drained.
pub const REASON_DRAINING: &str = "RestartDrain";
/// The condition's `reason` while the pod is in service.
pub const REASON_SERVING: &str = "Serving";
/// The longest `message` written (the admission policy's bound, docs/security.md).
pub const MAX_MESSAGE: usize = 256;

/// One write of the [`crate::core::restart::DRAIN_GATE`] condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateCondition {
    /// The condition's `status`: `true` is `"True"`.
    pub serving: bool,
    pub reason: &'static str,
    pub message: String,
}

impl GateCondition {
    /// Takes the pod out of its Services before `container` is restarted.
    pub fn draining(container: &str) -> Self {
        Self {
            serving: false,
            reason: REASON_DRAINING,
            message: bounded(format!(
                "reloadlet drains the pod before it restarts container {container}"
            )),
        }
    }

    /// Puts the pod back (or in for the first time).
    pub fn serving(message: impl Into<String>) -> Self {
        Self {
            serving: true,
            reason: REASON_SERVING,
            message: bounded(message.into()),
        }
    }

    pub fn status(&self) -> &'static str {
        if self.serving {
            "True"
        } else {
            "False"
        }
    }
}

fn bounded(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// On sight of a pod: the condition it needs written now, if any — `True` when it declares
/// the gate and has no such condition yet (else it is never Ready), or when the condition is
/// `False` and this agent holds no drain of the pod (`draining_here`): an agent that stopped
/// during a drain left it so, and nothing else would ever set it back. A terminating pod is
/// left alone.
pub fn on_sight(pod: &PodInfo, draining_here: bool) -> Option<GateCondition> {
    if !pod.restart.drain_gate || pod.terminating {
        return None;
    }
    match pod.restart.drain_condition {
        None => Some(GateCondition::serving(
            "reloadlet serves the readiness gate of this pod",
        )),
        Some(false) if !draining_here => Some(GateCondition::serving(
            "no drain of this pod is in progress (an agent stopped during one)",
        )),
        Some(_) => None,
    }
}

/// Whether `container` was started again after the process in `stopped` was stopped and
/// every container of the pod is ready (`ContainersReady`): the time to set the gate
/// `True` again. `stopped`: the container's ID when it was stopped (`None`: it had none,
/// then only readiness counts).
pub fn back_in_service(pod: &PodInfo, container: &str, stopped: Option<&ContainerId>) -> bool {
    let Some(c) = pod.containers.iter().find(|c| c.name == container) else {
        return false;
    };
    let restarted = stopped.is_none() || c.container_id.as_ref() != stopped;
    restarted && c.running && pod.restart.containers_ready
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ContainerInfo, ContainerKind, RestartFacts};

    fn pod(gate: bool, condition: Option<bool>, id: &str, ready: bool) -> PodInfo {
        PodInfo {
            uid: "u".into(),
            containers: vec![ContainerInfo {
                name: "app".into(),
                kind: ContainerKind::Regular,
                mounts: vec![],
                container_id: ContainerId::parse(id),
                running: true,
                ports: vec![],
            }],
            restart: Box::new(RestartFacts {
                drain_gate: gate,
                drain_condition: condition,
                containers_ready: ready,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_gate_without_its_condition_or_left_false_is_set_true_on_sight_and_nothing_else_is() {
        // (declares the gate, condition, terminating, a drain held here) → a write of True
        for (gate, condition, terminating, held, write) in [
            (true, None, false, false, true),
            (true, Some(true), false, false, false),
            (true, Some(false), false, true, false),
            (true, Some(false), false, false, true),
            (false, None, false, false, false),
            (false, Some(false), false, false, false),
            (true, None, true, false, false),
            (true, Some(false), true, false, false),
        ] {
            let mut p = pod(gate, condition, "containerd://a", true);
            p.terminating = terminating;
            let got = on_sight(&p, held);
            assert_eq!(
                got.is_some(),
                write,
                "{gate} {condition:?} {terminating} {held}"
            );
            if let Some(c) = got {
                assert!(c.serving);
                assert_eq!(c.status(), "True");
            }
        }
    }

    #[test]
    fn the_gate_is_restored_once_the_new_container_is_ready() {
        let old = ContainerId::parse("containerd://a");
        // (current ID, ContainersReady, stopped) → back in service
        for (id, ready, stopped, back) in [
            ("containerd://a", true, old.as_ref(), false),
            ("containerd://b", false, old.as_ref(), false),
            ("containerd://b", true, old.as_ref(), true),
            ("containerd://a", true, None, true),
        ] {
            let p = pod(true, Some(false), id, ready);
            assert_eq!(back_in_service(&p, "app", stopped), back, "{id} {ready}");
        }
        let p = pod(true, Some(false), "containerd://b", true);
        assert!(!back_in_service(&p, "other", old.as_ref()));
    }

    #[test]
    fn messages_are_bounded() {
        let c = GateCondition::draining(&"é".repeat(500));
        assert!(c.message.len() <= MAX_MESSAGE);
        assert!(!c.serving);
        assert_eq!(c.status(), "False");
        assert_eq!(c.reason, REASON_DRAINING);
    }
}
