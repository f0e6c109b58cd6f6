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
//!
//! This module holds the budgets as followed ([`Budgets`], [`changed`]); the feature asks
//! them with the rest of [`RolloutFeature`](super::RolloutFeature) (`structurally_blocked`,
//! `budgets_changed`).

use crate::core::disruption_budgets::{BudgetIndex, BudgetStatus};
use crate::core::model::PodInfo;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

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
