//! Pod readiness gates the way the kubelet computes them (kubernetes/kubernetes):
//! - `GeneratePodReadyCondition` (pkg/kubelet/status/generate.go): Ready is `True` only
//!   when every container is ready (`ContainersReady`) **and** every
//!   `spec.readinessGates[].conditionType` has a condition of that type with status `True`
//!   in the pod's status; a gate without its condition counts as not ready (reason
//!   `ReadinessGatesNotReady`, message `corresponding condition of pod readiness gate "…"
//!   does not exist.`).
//! - `mergePodStatus` (pkg/kubelet/status/status_manager.go): a status write of the kubelet
//!   keeps the conditions it does not own (`kubetypes.PodConditionsByKubelet`) as the API
//!   has them: those belong to whoever set them through `pods/status`.
//! - `NeedToReconcilePodReadiness` (the same file), called from `HandlePodReconcile`
//!   (pkg/kubelet/kubelet.go) on a status-only change of a pod that has readiness gates: when
//!   the Ready condition generated from the new status differs from the one the API shows,
//!   the kubelet syncs the pod, which writes its status again.

use k8s_openapi::api::core::v1::{Pod, PodCondition};

/// `kubetypes.PodConditionsByKubelet` (pkg/kubelet/types/pod_status.go) as the simulator's
/// kubelet writes them.
pub const KUBELET_CONDITIONS: [&str; 5] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
];

fn condition<'a>(conditions: &'a [PodCondition], type_: &str) -> Option<&'a PodCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether every readiness gate of `pod` has its condition `True` in `conditions`.
pub fn gates_ready(pod: &Pod, conditions: &[PodCondition]) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .all(|g| condition(conditions, &g.condition_type).is_some_and(|c| c.status == "True"))
}

fn has_gates(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// `mergePodStatus`: the conditions of `old` the kubelet does not own, appended to `new`
/// (which holds the kubelet's own).
pub fn keep_foreign(old: &[PodCondition], new: &mut Vec<PodCondition>) {
    for c in old {
        if !KUBELET_CONDITIONS.contains(&c.type_.as_str())
            && !new.iter().any(|n| n.type_ == c.type_)
        {
            new.push(c.clone());
        }
    }
}

/// `NeedToReconcilePodReadiness`: the pod has readiness gates, a Ready condition, and that
/// differs from what `ContainersReady` and the gates' conditions make it.
pub fn needs_reconcile(pod: &Pod) -> bool {
    if !has_gates(pod) {
        return false;
    }
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let containers_ready =
        condition(conditions, "ContainersReady").is_some_and(|c| c.status == "True");
    let want = containers_ready && gates_ready(pod, conditions);
    // only a Ready condition that is there is reconciled (`i >= 0` upstream)
    condition(conditions, "Ready").is_some_and(|c| (c.status == "True") != want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(gates: &[&str], conditions: &[(&str, &str)]) -> Pod {
        let gates: Vec<_> = gates.iter().map(|g| json!({"conditionType": g})).collect();
        let conds: Vec<_> = conditions
            .iter()
            .map(|(t, s)| json!({"type": t, "status": s}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "readinessGates": gates},
            "status": {"conditions": conds},
        }))
        .unwrap()
    }

    fn conds(p: &Pod) -> Vec<PodCondition> {
        p.status.clone().unwrap().conditions.unwrap()
    }

    #[test]
    fn ready_needs_every_gate_true_and_a_missing_gate_is_not_ready() {
        let g = "example.com/gate";
        for (conditions, ready) in [
            (vec![], false),
            (vec![(g, "False")], false),
            (vec![(g, "True")], true),
        ] {
            let p = pod(&[g], &conditions);
            assert_eq!(gates_ready(&p, &conds(&p)), ready, "{conditions:?}");
        }
        let none = pod(&[], &[]);
        assert!(gates_ready(&none, &[]));
    }

    #[test]
    fn a_gate_change_needs_a_reconcile_and_the_kubelet_keeps_foreign_conditions() {
        let g = "example.com/gate";
        let stale = pod(
            &[g],
            &[("ContainersReady", "True"), ("Ready", "True"), (g, "False")],
        );
        assert!(needs_reconcile(&stale));
        let settled = pod(
            &[g],
            &[
                ("ContainersReady", "True"),
                ("Ready", "False"),
                (g, "False"),
            ],
        );
        assert!(!needs_reconcile(&settled));
        assert!(!needs_reconcile(&pod(&[], &[("Ready", "True")])));
        assert!(!needs_reconcile(&pod(&[g], &[(g, "True")])), "no Ready yet");
        let mut new = conds(&pod(&[], &[("Ready", "True"), ("ContainersReady", "True")]));
        keep_foreign(&conds(&stale), &mut new);
        let types: Vec<_> = new.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "ContainersReady", g]);
        assert_eq!(new[0].status, "True", "the kubelet's own are its own");
    }
}
