//! `reloadlet.io/on-blocked: rollout` on a **structural** block (issue #26 §2), the
//! controller's side: the node agent sends no eviction when the PodDisruptionBudget covering
//! the pod can never allow one (`status.expectedPods − status.desiredHealthy ≤ 0`, the pure
//! [`crate::core::disruption_budgets::Coverage::structural`] both sides use) and hands the change over (Normal
//! `EvictionHandedOff`). The controller follows the same budgets (a read-only list/watch of
//! policy/v1 PodDisruptionBudgets, `crate::k8s::pdb_watch`) and rolls the owner as soon as
//! the change is seen — within the batch's coalescing ([`super::COALESCE`]) — instead of
//! after `reloadlet.io/blocked-timeout`.
//!
//! A change that was seen while the block was not (yet) known structural waits for its
//! timeout as before, and is looked at again whenever the budgets change: a budget listed
//! late, or one that became structural (the workload scaled down, the budget tightened),
//! moves it to the batch at once. Either way the change is rolled once: it leaves the
//! escalations when it joins the batch, and its baseline moves when the batch is handled.
//!
//! Both sides read the budget's status as the disruption controller last wrote it; should the
//! agent and the controller see different statuses for an instant (one watch a step behind),
//! the worst case is what happened before this hook: an eviction the budget refuses, or a
//! rollout after the timeout.

use super::{Asking, RolloutFeature, COALESCE};
use crate::core::disruption_budgets::{BudgetIndex, BudgetStatus};
use crate::core::model::PodInfo;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;
use tokio::time::Instant;

/// The PodDisruptionBudgets as the controller's PDB watch keeps them, and a receiver that
/// sees every change.
pub struct Budgets {
    index: Arc<RwLock<BudgetIndex>>,
    versions: watch::Receiver<u64>,
}

impl Budgets {
    pub fn new(index: Arc<RwLock<BudgetIndex>>) -> Self {
        let versions = index.read().unwrap_or_else(|e| e.into_inner()).subscribe();
        Self { index, versions }
    }

    /// The budget that structurally blocks evicting `pod`, with its status (`None`: no
    /// budget, several, a status not processed yet, or a block that can pass).
    pub fn structural(&self, pod: &PodInfo) -> Option<(String, BudgetStatus)> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        let coverage = index.coverage(&pod.namespace, &pod.labels);
        coverage.structural().map(|(n, s)| (n.to_owned(), s))
    }
}

/// Resolves when the budgets changed since the last call (never without budgets, or once
/// the watch is gone). Cancel-safe.
pub async fn changed(budgets: &mut Option<Budgets>) {
    let gone = match budgets {
        Some(b) => b.versions.changed().await.is_err(),
        None => true,
    };
    if gone {
        std::future::pending::<()>().await;
    }
}

impl RolloutFeature {
    /// Follows the PodDisruptionBudgets: an `on-blocked: rollout` pod whose budget is
    /// structural is rolled at once.
    pub fn with_budgets(mut self, index: Arc<RwLock<BudgetIndex>>) -> Self {
        self.budgets = Some(Budgets::new(index));
        self
    }

    /// Whether `pod`'s eviction is structurally blocked (logged, with the plain words).
    pub(super) fn structurally_blocked(&self, pod: Option<&PodInfo>) -> bool {
        let (Some(budgets), Some(pod)) = (&self.budgets, pod) else {
            return false;
        };
        let Some((name, status)) = budgets.structural(pod) else {
            return false;
        };
        tracing::info!(
            pod = %format!("{}/{}", pod.namespace, pod.name),
            "{}; on-blocked: rollout, the agent sends no eviction: rolling the owner now",
            status.structural_note(&name)
        );
        true
    }

    /// Joins the batch (due within [`COALESCE`]).
    pub(super) fn join_batch(&mut self, asking: Asking) {
        self.pending
            .entry(asking.pod.uid.clone())
            .or_insert_with(|| Asking {
                pod: asking.pod.clone(),
                changes: Vec::new(),
            })
            .changes
            .extend(asking.changes);
        self.due.get_or_insert_with(|| Instant::now() + COALESCE);
    }

    /// The budgets changed: escalations whose pods are now structurally blocked join the
    /// batch without waiting for their timeout.
    pub(super) fn budgets_changed(&mut self, world: &super::World) {
        if !world.leader || self.escalations.is_empty() {
            return;
        }
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.escalations)
            .into_iter()
            .partition(|(_, a)| {
                let pod = world
                    .get(&a.pod.uid)
                    .filter(|p| !p.terminating && super::refs::mode(p).is_some());
                self.structurally_blocked(pod)
            });
        self.escalations = later;
        for (_, asking) in now {
            self.join_batch(asking);
        }
    }
}
