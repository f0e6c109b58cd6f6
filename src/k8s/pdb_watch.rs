//! Follows every PodDisruptionBudget of the cluster (policy/v1, list/watch) into a shared
//! [`BudgetIndex`], with the same non-resetting backoff and failure reporting as the pod
//! watch. Failures here never make the agent unready: budgets only feed a warning.

use super::api_backoff::{self, FailureTracker};
use super::watch_loop::{self, Change, Pacing};
use crate::core::disruption_budgets::BudgetIndex;
use crate::core::label_selector::{LabelSelector, Requirement};
use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeSelector;
use kube::runtime::watcher;
use kube::{Api, Client};
use std::sync::{Arc, RwLock};

/// The index, shared between the watch (writer) and the agent (reader).
pub type SharedBudgets = Arc<RwLock<BudgetIndex>>;

/// A PDB's selector in eviction terms; `None`: it selects nothing (nil, or an operator
/// apimachinery's `LabelSelectorAsSelector` would refuse).
pub fn selector_of(pdb: &PodDisruptionBudget) -> Option<LabelSelector> {
    pdb.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(convert)
}

fn convert(sel: &KubeSelector) -> Option<LabelSelector> {
    let mut requirements: Vec<Requirement> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| Requirement::Equal(k.clone(), v.clone()))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.iter().flatten().cloned().collect();
        requirements.push(match e.operator.as_str() {
            "In" => Requirement::In(e.key.clone(), values),
            "NotIn" => Requirement::NotIn(e.key.clone(), values),
            "Exists" => Requirement::Exists(e.key.clone()),
            "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
            _ => return None,
        });
    }
    Some(LabelSelector { requirements })
}

fn key_of(pdb: &PodDisruptionBudget) -> (String, String) {
    (
        pdb.metadata.namespace.clone().unwrap_or_default(),
        pdb.metadata.name.clone().unwrap_or_default(),
    )
}

fn write(budgets: &SharedBudgets) -> std::sync::RwLockWriteGuard<'_, BudgetIndex> {
    budgets.write().unwrap_or_else(|e| e.into_inner())
}

/// Runs forever, keeping `budgets` current.
pub async fn run(client: Client, budgets: SharedBudgets, metrics: api_backoff::ApiMetrics) {
    let api: Api<PodDisruptionBudget> = Api::all(client);
    let entry = |pdb: &PodDisruptionBudget| {
        let (ns, name) = key_of(pdb);
        Some((ns, name, selector_of(pdb)))
    };
    let changes = watch_loop::changes(api, watcher::Config::default(), Pacing::UntilData, entry);
    futures::pin_mut!(changes);
    let mut failures = FailureTracker::new(api_backoff::PDBS, metrics);
    while let Some(change) = changes.next().await {
        if !matches!(change, Change::Failed(_)) && failures.on_success() > 0 {
            tracing::info!("PodDisruptionBudget watch works again");
        }
        match change {
            Change::Listed(all) => write(&budgets).reset(all),
            Change::Applied((ns, name, selector)) => write(&budgets).apply(&ns, &name, selector),
            Change::Deleted(pdb) => {
                let (ns, name) = key_of(&pdb);
                write(&budgets).delete(&ns, &name);
            }
            Change::Failed(e) => {
                let code = api_backoff::status_code(&e);
                if code == Some(410) {
                    continue;
                }
                let failure = failures.on_error(code, &e.to_string());
                if watch_loop::worth_an_error(failure.count, code) {
                    tracing::error!(
                        code,
                        resource = "poddisruptionbudgets",
                        "{}; the NoDisruptionBudget warning is off until it works",
                        failure.explanation
                    );
                }
            }
        }
    }
}

/// The budgets of one namespace, listed once (for `explain`).
pub async fn list_namespace(client: Client, namespace: &str) -> Result<BudgetIndex, kube::Error> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client, namespace);
    let list = api.list(&Default::default()).await?;
    let mut idx = BudgetIndex::default();
    idx.reset(
        list.items
            .iter()
            .map(|p| {
                let (ns, name) = key_of(p);
                (ns, name, selector_of(p))
            })
            .collect(),
    );
    Ok(idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_match_labels_and_expressions() {
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"maxUnavailable": 1, "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]
            }}
        }))
        .unwrap();
        let sel = selector_of(&pdb).unwrap();
        assert_eq!(sel.to_string(), "app=web,tier notin (db)");
        let none: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "namespace": "shop"}, "spec": {}
        }))
        .unwrap();
        assert!(selector_of(&none).is_none());
    }
}
