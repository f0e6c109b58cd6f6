//! Warning Event `NoDisruptionBudget`, once per pod, for pods whose action is `evict` and that
//! no PodDisruptionBudget selects (the Eviction API would then evict every replica at once).

use crate::core::annotations::Action;
use crate::core::disruption_budgets::BudgetIndex;
use crate::core::model::PodInfo;
use crate::core::policy;
use std::collections::HashSet;
use std::sync::{Arc, RwLock};

#[derive(Default)]
pub struct BudgetWarnings {
    budgets: Option<Arc<RwLock<BudgetIndex>>>,
    /// The budget index version last checked against.
    seen_version: Option<u64>,
    /// Pods changed since the last check.
    pods_changed: bool,
    /// Pods already warned about (by UID).
    warned: HashSet<String>,
}

impl BudgetWarnings {
    pub fn new(budgets: Arc<RwLock<BudgetIndex>>) -> Self {
        Self {
            budgets: Some(budgets),
            ..Default::default()
        }
    }

    /// Notified when the budgets change (`None` without budgets).
    pub fn budgets_changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        let budgets = self.budgets.as_ref()?;
        Some(budgets.read().unwrap_or_else(|e| e.into_inner()).changed())
    }

    pub fn pods_changed(&mut self) {
        self.pods_changed = true;
    }

    pub fn forget(&mut self, uid: &str) {
        self.warned.remove(uid);
    }

    /// The pods to warn about now, of `pods` (those inside the namespace filter; each pod at
    /// most once while it exists). Nothing until the budget list has been read.
    pub fn due<'a>(&mut self, pods: impl IntoIterator<Item = &'a PodInfo>) -> Vec<PodInfo> {
        let Some(budgets) = &self.budgets else {
            return Vec::new();
        };
        let budgets = budgets.read().unwrap_or_else(|e| e.into_inner());
        if !budgets.synced() {
            return Vec::new();
        }
        if !self.pods_changed && self.seen_version == Some(budgets.version()) {
            return Vec::new();
        }
        self.pods_changed = false;
        self.seen_version = Some(budgets.version());
        let mut out = Vec::new();
        for pod in pods {
            if self.warned.contains(&pod.uid) {
                continue;
            }
            let evicts = matches!(
                policy::validated_policy(pod),
                Ok(Some(p)) if matches!(p.action, Action::Evict { .. })
            );
            if evicts && budgets.selecting(&pod.namespace, &pod.labels).is_empty() {
                self.warned.insert(pod.uid.clone());
                out.push(pod.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::disruption_budgets::Budget;
    use crate::core::label_selector::LabelSelector;

    fn pod(uid: &str, action: &str, app: &str) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: "shop".into(),
            name: uid.into(),
            annotations: [("reloadlet.io/action".to_string(), action.to_string())].into(),
            labels: [("app".to_string(), app.to_string())].into(),
            has_controller: true,
            ..Default::default()
        }
    }

    #[test]
    fn warns_once_per_unprotected_evict_pod_after_budgets_are_known() {
        let idx = Arc::new(RwLock::new(BudgetIndex::default()));
        let mut w = BudgetWarnings::new(idx.clone());
        let pods = [
            pod("a", "evict", "web"),
            pod("b", "evict", "api"),
            pod("c", "signal", "api"),
        ];
        w.pods_changed();
        assert!(w.due(&pods).is_empty(), "budgets not listed yet");
        idx.write().unwrap().reset(vec![(
            "shop".into(),
            "web".into(),
            Budget::new(LabelSelector::parse("app=web").ok(), None),
        )]);
        let due: Vec<String> = w.due(&pods).into_iter().map(|p| p.uid).collect();
        assert_eq!(due, ["b"]);
        w.pods_changed();
        assert!(w.due(&pods).is_empty(), "once per pod");
    }
}
