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

#[cfg(test)]
mod tests {
    use super::*;

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
