//! The only pod of its owner under `--restart-without-grant` (issue #45 §2, docs/restart.md
//! "One replica without a budget"). The agent sees its own node's pods only, so it cannot
//! tell the only pod of an owner from one whose siblings run on other nodes; the controller
//! can (`core::restart_grant::only_pod_of_owner` over every pod of the namespace).
//!
//! - A pod that says `reloadlet.io/on-blocked: rollout` is left to the controller even
//!   under the flag: the agent requests the restart as without the flag, and the controller
//!   either hands it off (its rollout feature rolls the only pod's owner, surge-first, at
//!   the change) or grants it. Restarting it at once here as well would restart a pod the
//!   rollout replaces: two actions for one change.
//! - Any other pod is restarted at once; when no other pod of its owner runs on this node,
//!   the `Restarted` Event says that a moment without a Ready pod is possible.

use super::Inner;
use crate::core::model::PodInfo;
use crate::core::rollout::{on_blocked, OnBlocked, ON_BLOCKED};

impl Inner {
    /// Under `--restart-without-grant`: the pod asks `on-blocked: rollout`, so only the
    /// controller may decide whether it is restarted or rolled (logged).
    pub(super) fn leaves_it_to_the_controller(&self, pod_uid: &str) -> bool {
        let Some(pod) = self.pod(pod_uid) else {
            return false;
        };
        let rolls = matches!(on_blocked(&pod.annotations), Ok((OnBlocked::Rollout, _)));
        if rolls {
            tracing::info!(pod = %pod.full_name(), action = "restart", "{ON_BLOCKED} is rollout: whether this is the only pod of its owner (then the controller rolls the owner instead) only the controller sees, so the restart is requested, not done at once, though the agent runs with --restart-without-grant");
        }
        rolls
    }

    /// The `Restarted` note's addition for a restart done without a grant: when no other pod
    /// of the pod's owner runs on this node, the restart may have left the owner without a
    /// Ready pod. Empty otherwise (a sibling here served meanwhile, or the pod has no owner).
    pub(super) fn alone_note(&self, pod: &PodInfo) -> String {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        let here = index.iter().filter(|p| p.namespace == pod.namespace);
        if !crate::core::restart_grant::only_pod_of_owner(pod, here) {
            return String::new();
        }
        let Some(owner) = pod.controller.as_deref() else {
            return String::new();
        };
        format!(
            "; no other pod of {} {} runs on this node, and an agent with --restart-without-grant sees no other node and asks no controller: if it is the only one, the workload had no Ready pod until this one is Ready again ({ON_BLOCKED}: rollout has the controller roll the only pod of its owner surge-first instead)",
            owner.kind, owner.name
        )
    }
}
