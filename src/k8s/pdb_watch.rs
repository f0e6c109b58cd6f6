//! Follows every PodDisruptionBudget of the cluster (policy/v1, list/watch) into a shared
//! [`BudgetIndex`], with the same non-resetting backoff and failure reporting as the pod
//! watch; the agent's (evictions, `NoDisruptionBudget`) and the controller's (the rollout
//! feature's structural blocks, `on-blocked: rollout`). Failures here never make either
//! unready: budgets feed a warning and tell a structural block (no eviction can ever pass)
//! from a transient one; without them every refusal is treated as transient.

use super::api_backoff::{self, FailureTracker};
use super::watch_loop::{self, Change, Pacing};
use crate::core::disruption_budgets::{Budget, BudgetIndex, BudgetStatus};
use crate::core::label_selector::{LabelSelector, Requirement};
use crate::ports::ApiError;
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
        .and_then(label_selector)
}

/// A selector in kube-free terms (`matchLabels` and `matchExpressions`); `None`: an operator
/// apimachinery's `LabelSelectorAsSelector` would refuse.
pub fn label_selector(sel: &KubeSelector) -> Option<LabelSelector> {
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

/// The budget's status as the disruption controller last wrote it; `None` when it has not
/// processed the current generation yet (`status.observedGeneration < metadata.generation`,
/// as the eviction subresource checks in kubernetes `pkg/registry/core/pod/storage/
/// eviction.go`, `checkAndDecrement`) or never wrote one.
pub fn status_of(pdb: &PodDisruptionBudget) -> Option<BudgetStatus> {
    let status = pdb.status.as_ref()?;
    let observed = status.observed_generation.unwrap_or(0);
    if observed < pdb.metadata.generation.unwrap_or(0) || status.observed_generation.is_none() {
        return None;
    }
    Some(BudgetStatus {
        expected_pods: status.expected_pods,
        desired_healthy: status.desired_healthy,
        current_healthy: status.current_healthy,
        disruptions_allowed: status.disruptions_allowed,
    })
}

/// The budget as the index keeps it.
pub fn budget_of(pdb: &PodDisruptionBudget) -> Budget {
    Budget::new(selector_of(pdb), status_of(pdb))
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
pub async fn run(
    client: Client,
    budgets: SharedBudgets,
    metrics: api_backoff::ApiMetrics,
    denials: crate::ports::RefusalSink,
) {
    let api: Api<PodDisruptionBudget> = Api::all(client);
    let entry = |pdb: &PodDisruptionBudget| {
        let (ns, name) = key_of(pdb);
        Some((ns, name, budget_of(pdb)))
    };
    let changes = watch_loop::changes(api, watcher::Config::default(), Pacing::UntilData, entry);
    futures::pin_mut!(changes);
    let mut failures = FailureTracker::new(api_backoff::PDBS, metrics);
    let watched = super::refusals::Watched {
        feature: crate::core::permission::Feature::Budgets,
        group: "policy",
        resource: "poddisruptionbudgets",
    };
    while let Some(change) = changes.next().await {
        watched.report(&denials, &change);
        if !matches!(change, Change::Failed(_)) && failures.on_success() > 0 {
            tracing::info!("PodDisruptionBudget watch works again");
        }
        match change {
            Change::Listed(all) => write(&budgets).reset(all),
            Change::Applied((ns, name, budget)) => write(&budgets).apply(&ns, &name, budget),
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
                // A 401/403 is the denials' to name (log, Event, /readyz).
                if !matches!(code, Some(401 | 403))
                    && watch_loop::worth_an_error(failure.count, code)
                {
                    tracing::error!(
                        code,
                        resource = "poddisruptionbudgets",
                        "{}; budgets are not known until it works (no NoDisruptionBudget warning, every block treated as transient)",
                        failure.explanation
                    );
                }
            }
        }
    }
}

/// The budgets of one namespace, listed once (for `explain`).
pub async fn list_namespace(client: Client, namespace: &str) -> Result<BudgetIndex, ApiError> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client, namespace);
    let list = api
        .list(&Default::default())
        .await
        .map_err(|e| super::refusals::api_error(&e))?;
    let mut idx = BudgetIndex::default();
    idx.reset(
        list.items
            .iter()
            .map(|p| {
                let (ns, name) = key_of(p);
                (ns, name, budget_of(p))
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

    #[test]
    fn keeps_the_status_once_the_disruption_controller_processed_the_generation() {
        let pdb = |generation: i64, observed: Option<i64>| -> PodDisruptionBudget {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "shop", "generation": generation},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
                "status": {"observedGeneration": observed, "expectedPods": 2,
                    "desiredHealthy": 2, "currentHealthy": 2, "disruptionsAllowed": 0}
            }))
            .unwrap()
        };
        assert_eq!(
            status_of(&pdb(3, Some(3))),
            Some(BudgetStatus {
                expected_pods: 2,
                desired_healthy: 2,
                current_healthy: 2,
                disruptions_allowed: 0
            })
        );
        assert_eq!(status_of(&pdb(4, Some(3))), None, "still being processed");
        assert_eq!(status_of(&pdb(1, None)), None, "never processed");
        let bare: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "namespace": "shop"}, "spec": {}
        }))
        .unwrap();
        assert_eq!(status_of(&bare), None);
    }
}
