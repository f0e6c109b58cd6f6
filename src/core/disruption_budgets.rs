//! Which PodDisruptionBudgets protect a pod (pure). Fed by the PDB watch; read by the agent
//! (Warning `NoDisruptionBudget` for pods whose action is `evict`) and by `explain`.
//!
//! Selection follows the eviction subresource (kubernetes/kubernetes,
//! pkg/registry/core/pod/storage/eviction.go, `getPodDisruptionBudgets`): same namespace,
//! and a nil or empty selector matches nothing. With no PDB, the Eviction API evicts every
//! replica at once.

use crate::core::label_selector::LabelSelector;
use std::collections::BTreeMap;

/// One PodDisruptionBudget as the agent keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    /// `None` selects nothing (nil, empty or unparsable).
    pub selector: Option<LabelSelector>,
    /// `None` until the disruption controller has processed the budget's current generation
    /// (`status.observedGeneration < metadata.generation`: the eviction subresource then
    /// answers 429 "still being processed", whatever the numbers say).
    pub status: Option<BudgetStatus>,
}

impl Budget {
    pub fn new(selector: Option<LabelSelector>, status: Option<BudgetStatus>) -> Self {
        Self {
            selector: selector.filter(|s| !s.is_empty()),
            status,
        }
    }
}

/// What the budgets that select one pod say about evicting it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// No budget selects the pod: the Eviction API evicts at once.
    None,
    /// Exactly one budget selects it (`status`: `None` while not known).
    One {
        name: String,
        status: Option<BudgetStatus>,
    },
    /// More than one: the eviction subresource refuses with 500 (eviction.go,
    /// "This pod has more than one PodDisruptionBudget").
    Several(Vec<String>),
}

impl Coverage {
    /// A structural block, known before asking the API server: exactly one budget with a
    /// known status that can never allow an eviction while the workload keeps its size.
    pub fn structural(&self) -> Option<(&str, BudgetStatus)> {
        match self {
            Coverage::One {
                name,
                status: Some(status),
            } if status.block() == Some(Block::Structural) => Some((name.as_str(), *status)),
            _ => None,
        }
    }
}

/// (namespace, name) → budget.
#[derive(Clone, Debug)]
pub struct BudgetIndex {
    budgets: BTreeMap<(String, String), Budget>,
    synced: bool,
    /// Bumped on every change, so readers can tell whether to look again.
    version: u64,
    /// Woken on every change (the agent's loop waits on it instead of polling).
    changed: std::sync::Arc<tokio::sync::Notify>,
    /// The version, for any number of waiters (evictions waiting out a structural block).
    versions: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for BudgetIndex {
    fn default() -> Self {
        Self {
            budgets: BTreeMap::new(),
            synced: false,
            version: 0,
            changed: std::sync::Arc::default(),
            versions: std::sync::Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

impl BudgetIndex {
    /// Notified after every change.
    pub fn changed(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.changed.clone()
    }

    /// Sees every change (unlike [`Self::changed`], which wakes one waiter).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.versions.subscribe()
    }

    fn bump(&mut self) {
        self.version += 1;
        self.changed.notify_one();
        self.versions.send_replace(self.version);
    }

    pub fn apply(&mut self, namespace: &str, name: &str, budget: Budget) {
        let budget = Budget::new(budget.selector, budget.status);
        self.budgets
            .insert((namespace.to_owned(), name.to_owned()), budget);
        self.bump();
    }

    pub fn delete(&mut self, namespace: &str, name: &str) {
        self.budgets
            .remove(&(namespace.to_owned(), name.to_owned()));
        self.bump();
    }

    /// After a (re)list: exactly these budgets exist.
    pub fn reset(&mut self, all: Vec<(String, String, Budget)>) {
        self.budgets.clear();
        for (ns, name, budget) in all {
            let budget = Budget::new(budget.selector, budget.status);
            self.budgets.insert((ns, name), budget);
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
        self.selecting_budgets(namespace, labels)
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    fn selecting_budgets<'a>(
        &'a self,
        namespace: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = (&'a str, &'a Budget)> + 'a {
        self.budgets
            .iter()
            .filter(move |((ns, _), b)| {
                ns == namespace && b.selector.as_ref().is_some_and(|s| s.matches(labels))
            })
            .map(|((_, name), b)| (name.as_str(), b))
    }

    /// The budgets that select a pod, as the eviction subresource sees them.
    /// `status.disruptionsAllowed` of the budgets that select a pod with `labels`: the
    /// smallest when several do (each must allow the disruption), 0 for one whose status the
    /// disruption controller has not written yet; `None` when no budget selects it.
    pub fn disruptions_allowed(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<i32> {
        self.selecting_budgets(namespace, labels)
            .map(|(_, b)| b.status.map_or(0, |s| s.disruptions_allowed))
            .min()
    }

    pub fn coverage(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Coverage {
        let mut found: Vec<(&str, &Budget)> = self.selecting_budgets(namespace, labels).collect();
        match found.len() {
            0 => Coverage::None,
            1 => {
                let (name, budget) = found.remove(0);
                Coverage::One {
                    name: name.to_owned(),
                    status: budget.status,
                }
            }
            _ => Coverage::Several(found.iter().map(|(n, _)| (*n).to_owned()).collect()),
        }
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

    /// The budget's arithmetic, for `explain` and logs.
    pub fn arithmetic(&self) -> String {
        format!(
            "expected pods {}, desired healthy {}, currently healthy {}, disruptions allowed {}",
            self.expected_pods,
            self.desired_healthy,
            self.current_healthy,
            self.disruptions_allowed
        )
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
    fn disruptions_allowed_is_the_smallest_of_the_selecting_budgets() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let with = |allowed: Option<i32>| {
            Budget::new(
                LabelSelector::parse("app=web").ok(),
                allowed.map(|a| BudgetStatus {
                    expected_pods: 3,
                    desired_healthy: 2,
                    current_healthy: 3,
                    disruptions_allowed: a,
                }),
            )
        };
        let mut idx = BudgetIndex::default();
        assert_eq!(idx.disruptions_allowed("shop", &labels), None);
        idx.apply("shop", "a", with(Some(2)));
        assert_eq!(idx.disruptions_allowed("shop", &labels), Some(2));
        idx.apply("shop", "b", with(Some(1)));
        assert_eq!(idx.disruptions_allowed("shop", &labels), Some(1));
        idx.apply("shop", "c", with(None));
        assert_eq!(
            idx.disruptions_allowed("shop", &labels),
            Some(0),
            "no status yet: nothing allowed"
        );
        assert_eq!(idx.disruptions_allowed("other", &labels), None);
    }

    #[test]
    fn selection_follows_the_eviction_subresource() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let sel = |s: &str| Budget::new(LabelSelector::parse(s).ok(), None);
        let mut idx = BudgetIndex::default();
        assert!(!idx.synced());
        idx.reset(vec![
            (
                "shop".into(),
                "everything".into(),
                Budget::new(Some(LabelSelector::default()), None),
            ),
            ("shop".into(), "none".into(), Budget::default()),
            ("other".into(), "web".into(), sel("app=web")),
        ]);
        assert!(idx.synced());
        assert!(
            idx.selecting("shop", &labels).is_empty(),
            "empty and nil selectors select nothing"
        );
        assert_eq!(idx.coverage("shop", &labels), Coverage::None);
        idx.apply("shop", "web", sel("app in (web)"));
        assert_eq!(idx.selecting("shop", &labels), ["web"]);
        let v = idx.version();
        idx.delete("shop", "web");
        assert!(idx.version() > v);
        assert!(idx.selecting("shop", &labels).is_empty());
    }

    #[test]
    fn coverage_keeps_each_budgets_status_and_knows_a_structural_block() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let status = |expected, desired, current, allowed| BudgetStatus {
            expected_pods: expected,
            desired_healthy: desired,
            current_healthy: current,
            disruptions_allowed: allowed,
        };
        let mut idx = BudgetIndex::default();
        let versions = idx.subscribe();
        let selector = LabelSelector::parse("app=web").ok();
        idx.reset(vec![(
            "shop".into(),
            "web".into(),
            Budget::new(selector.clone(), Some(status(2, 2, 2, 0))),
        )]);
        assert!(versions.has_changed().unwrap(), "waiters see every change");
        let cov = idx.coverage("shop", &labels);
        assert_eq!(cov.structural(), Some(("web", status(2, 2, 2, 0))));
        // Scaled to 3: a pod still starting is a transient block, not a structural one.
        idx.apply(
            "shop",
            "web",
            Budget::new(selector.clone(), Some(status(3, 2, 2, 0))),
        );
        assert_eq!(idx.coverage("shop", &labels).structural(), None);
        // A status not yet processed is not known.
        idx.apply("shop", "web", Budget::new(selector.clone(), None));
        assert_eq!(
            idx.coverage("shop", &labels),
            Coverage::One {
                name: "web".into(),
                status: None
            }
        );
        assert_eq!(idx.coverage("shop", &labels).structural(), None);
        // Two budgets: the eviction subresource refuses outright; no block is "known".
        idx.apply(
            "shop",
            "web-too",
            Budget::new(selector, Some(status(2, 2, 2, 0))),
        );
        assert_eq!(
            idx.coverage("shop", &labels),
            Coverage::Several(vec!["web".into(), "web-too".into()])
        );
        assert_eq!(idx.coverage("shop", &labels).structural(), None);
    }
}
