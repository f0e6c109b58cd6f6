//! Which PodDisruptionBudgets protect a pod (pure). Fed by the PDB watch; read by the agent
//! (Warning `NoDisruptionBudget` for pods whose action is `evict`) and by `explain`.
//!
//! Selection follows the eviction subresource (kubernetes/kubernetes,
//! pkg/registry/core/pod/storage/eviction.go, `getPodDisruptionBudgets`): same namespace,
//! and a nil or empty selector matches nothing. With no PDB, the Eviction API evicts every
//! replica at once.

use crate::core::label_selector::LabelSelector;
use std::collections::BTreeMap;

/// (namespace, name) → selector; `None` selects nothing (nil, empty or unparsable).
#[derive(Clone, Debug, Default)]
pub struct BudgetIndex {
    budgets: BTreeMap<(String, String), Option<LabelSelector>>,
    synced: bool,
    /// Bumped on every change, so readers can tell whether to look again.
    version: u64,
    /// Woken on every change (the agent's loop waits on it instead of polling).
    changed: std::sync::Arc<tokio::sync::Notify>,
}

impl BudgetIndex {
    /// Notified after every change.
    pub fn changed(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.changed.clone()
    }

    fn bump(&mut self) {
        self.version += 1;
        self.changed.notify_one();
    }

    pub fn apply(&mut self, namespace: &str, name: &str, selector: Option<LabelSelector>) {
        let selector = selector.filter(|s| !s.is_empty());
        self.budgets
            .insert((namespace.to_owned(), name.to_owned()), selector);
        self.bump();
    }

    pub fn delete(&mut self, namespace: &str, name: &str) {
        self.budgets
            .remove(&(namespace.to_owned(), name.to_owned()));
        self.bump();
    }

    /// After a (re)list: exactly these budgets exist.
    pub fn reset(&mut self, all: Vec<(String, String, Option<LabelSelector>)>) {
        self.budgets.clear();
        for (ns, name, sel) in all {
            self.budgets
                .insert((ns, name), sel.filter(|s| !s.is_empty()));
        }
        self.synced = true;
        self.bump();
    }

    /// Whether a complete list has arrived (before that, "no budget" means "not known yet").
    pub fn synced(&self) -> bool {
        self.synced
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Names of the budgets in `namespace` whose selector selects `labels`.
    pub fn selecting(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<String> {
        self.budgets
            .iter()
            .filter(|((ns, _), sel)| {
                ns == namespace && sel.as_ref().is_some_and(|s| s.matches(labels))
            })
            .map(|((_, name), _)| name.clone())
            .collect()
    }
}

/// The note of the Warning Event `NoDisruptionBudget` and of `explain`.
pub fn no_budget_note() -> String {
    "reloadlet.io/action is evict, but no PodDisruptionBudget selects this pod: the Eviction API \
     then evicts every replica at once when their configuration changes together; add a PDB \
     (e.g. maxUnavailable: 1) for the pod's workload"
        .into()
}

/// A PDB's status as the disruption controller keeps it (kubernetes
/// `pkg/controller/disruption/disruption.go`, `updatePdbStatus`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetStatus {
    pub expected_pods: i32,
    pub desired_healthy: i32,
    pub current_healthy: i32,
    pub disruptions_allowed: i32,
}

/// Why a budget refuses an eviction now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// No eviction can succeed while the workload keeps its size: `expectedPods −
    /// desiredHealthy ≤ 0` (`minAvailable` equal to the replicas, `maxUnavailable: 0`, one
    /// replica with `minAvailable: 1`).
    Structural,
    /// A pod still starting, another eviction in flight: it can pass later.
    Transient,
}

impl BudgetStatus {
    /// `None`: the budget allows an eviction now.
    pub fn block(&self) -> Option<Block> {
        if self.disruptions_allowed > 0 {
            None
        } else if self.expected_pods - self.desired_healthy <= 0 {
            Some(Block::Structural)
        } else {
            Some(Block::Transient)
        }
    }

    /// The plain words of a structural block, for the Warning `EvictionBlocked` and `explain`.
    pub fn structural_note(&self, budget: &str) -> String {
        format!(
            "PodDisruptionBudget {budget} needs {} of {} pods healthy: no eviction can succeed \
             while the workload keeps its size; see reloadlet.io/on-blocked",
            self.desired_healthy, self.expected_pods
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structural_and_transient_blocks() {
        let status = |expected, desired, current, allowed| BudgetStatus {
            expected_pods: expected,
            desired_healthy: desired,
            current_healthy: current,
            disruptions_allowed: allowed,
        };
        // minAvailable: 2 over 2 replicas; maxUnavailable: 0; 1 replica with minAvailable: 1.
        assert_eq!(status(2, 2, 2, 0).block(), Some(Block::Structural));
        assert_eq!(status(3, 3, 3, 0).block(), Some(Block::Structural));
        assert_eq!(status(1, 1, 1, 0).block(), Some(Block::Structural));
        // A pod still starting, or another eviction in flight.
        assert_eq!(status(3, 2, 2, 0).block(), Some(Block::Transient));
        assert_eq!(status(3, 2, 3, 1).block(), None);
        assert_eq!(
            status(2, 2, 2, 0).structural_note("web"),
            "PodDisruptionBudget web needs 2 of 2 pods healthy: no eviction can succeed while \
             the workload keeps its size; see reloadlet.io/on-blocked"
        );
    }

    #[test]
    fn selection_follows_the_eviction_subresource() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let mut idx = BudgetIndex::default();
        assert!(!idx.synced());
        idx.reset(vec![
            (
                "shop".into(),
                "everything".into(),
                Some(LabelSelector::default()),
            ),
            ("shop".into(), "none".into(), None),
            (
                "other".into(),
                "web".into(),
                LabelSelector::parse("app=web").ok(),
            ),
        ]);
        assert!(idx.synced());
        assert!(
            idx.selecting("shop", &labels).is_empty(),
            "empty and nil selectors select nothing"
        );
        idx.apply("shop", "web", LabelSelector::parse("app in (web)").ok());
        assert_eq!(idx.selecting("shop", &labels), ["web"]);
        let v = idx.version();
        idx.delete("shop", "web");
        assert!(idx.version() > v);
        assert!(idx.selecting("shop", &labels).is_empty());
    }
}
