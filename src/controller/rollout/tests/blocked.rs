//! `on-blocked: rollout` on a structural block, in the real controller loop under a paused
//! clock: the owner is rolled once, within the coalescing second, not after the timeout.

use super::*;
use crate::core::disruption_budgets::{Budget, BudgetIndex, BudgetStatus};
use crate::core::label_selector::LabelSelector;
use std::sync::RwLock;

fn status(expected: i32, desired: i32, current: i32, allowed: i32) -> BudgetStatus {
    BudgetStatus {
        expected_pods: expected,
        desired_healthy: desired,
        current_healthy: current,
        disruptions_allowed: allowed,
    }
}

fn budget(status: BudgetStatus) -> Budget {
    Budget::new(LabelSelector::parse("app=web").ok(), Some(status))
}

/// An `on-blocked: rollout` pod of Deployment `deployment`, labelled `app`, default timeout.
fn labelled(name: &str, deployment: &str, app: &str, workloads: &FakeWorkloads) -> PodInfo {
    workloads.deployment_pod(NS, name, deployment, Strategy::deployment_default(1));
    let mut p = blocked_pod(name, None);
    p.labels.insert("app".into(), app.into());
    p
}

fn budgets(status: BudgetStatus) -> Arc<RwLock<BudgetIndex>> {
    let mut index = BudgetIndex::default();
    index.reset(vec![(NS.into(), "web".into(), budget(status))]);
    Arc::new(RwLock::new(index))
}

#[tokio::test(start_paused = true)]
async fn a_structural_block_rolls_the_owner_at_once_and_once() {
    let workloads = Arc::new(FakeWorkloads::default());
    // One replica, minAvailable 1: structural. "other" is selected by no budget.
    let stuck = labelled("stuck", "web", "web", &workloads);
    let other = labelled("other", "api", "api", &workloads);
    let index = budgets(status(1, 1, 1, 0));
    let h = start_with(objects(), workloads, FakePatcher::default(), false, |f| {
        f.with_budgets(index.clone())
    });
    h.list(vec![stuck, other]).await;
    // `change` waits 3 s: past the coalescing second, far from the 10 m timeout.
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 1, "{patched:?}");
    assert_eq!(patched[0].0, deployment("web"));
    // The budget changes again (status refreshed): nothing more is rolled.
    index
        .write()
        .unwrap()
        .apply(NS, "web", budget(status(1, 1, 0, 0)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    // The pod not covered by a structural budget waits for its timeout, then rolls; the
    // structurally blocked one is not rolled a second time.
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 2, "{patched:?}");
    assert_eq!(patched[1].0, deployment("api"));
    let events = h.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(
        events.iter().all(|e| e.1 == "RolloutRequested"),
        "{events:?}"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_block_that_becomes_structural_after_the_change_rolls_when_it_does() {
    let workloads = Arc::new(FakeWorkloads::default());
    let stuck = labelled("stuck", "web", "web", &workloads);
    // Two expected, one needed, one healthy: transient (a pod still starting).
    let index = budgets(status(2, 1, 1, 0));
    let h = start_with(objects(), workloads, FakePatcher::default(), false, |f| {
        f.with_budgets(index.clone())
    });
    h.list(vec![stuck]).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(h.workloads.patched().is_empty(), "a transient block waits");
    // Scaled down to one replica: the same budget can never allow the eviction now.
    index
        .write()
        .unwrap()
        .apply(NS, "web", budget(status(1, 1, 1, 0)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    assert_eq!(h.workloads.patched().len(), 1, "not again at the timeout");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_budgets_a_block_waits_for_its_timeout() {
    let workloads = Arc::new(FakeWorkloads::default());
    let stuck = labelled("stuck", "web", "web", &workloads);
    // Budgets not followed (the controller runs without the PDB watch): as before.
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(vec![stuck]).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    tokio::time::sleep(Duration::from_secs(9 * 60)).await;
    assert!(h.workloads.patched().is_empty());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    h.stop().await;
}

/// A pod of Deployment `deployment` with `action: signal`, `env-action: restart` and
/// `on-blocked: rollout` (it mounts `cfg` and reads `app-env` through env).
fn env_restart_pod(name: &str, deployment: &str, workloads: &FakeWorkloads) -> PodInfo {
    workloads.deployment_pod(NS, name, deployment, Strategy::deployment_default(1));
    let mut p = with(pod(name), "reloadlet.io/action", "signal");
    p.annotations
        .insert("reloadlet.io/env-action".into(), "restart".into());
    p.annotations
        .insert("reloadlet.io/on-blocked".into(), "rollout".into());
    p.controller = Some(Box::new(crate::core::rollout::OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: format!("{deployment}-rs"),
        uid: format!("uid-{deployment}-rs"),
    }));
    p
}

#[tokio::test(start_paused = true)]
async fn an_env_restart_of_the_only_pod_of_its_owner_with_on_blocked_rollout_rolls_the_owner() {
    let workloads = Arc::new(FakeWorkloads::default());
    // "solo" is the only pod of its ReplicaSet (the grant hands its env restart request
    // off); "pair-a" and "pair-b" share one (the grant's: restarted in place).
    let pods = vec![
        env_restart_pod("solo", "solo", &workloads),
        env_restart_pod("pair-a", "pair", &workloads),
        env_restart_pod("pair-b", "pair", &workloads),
    ];
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    // The mounted ConfigMap: the agent's signal, never a rollout.
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert!(
        h.workloads.patched().is_empty(),
        "{:?}",
        h.workloads.patched()
    );
    // The env source: the only pod's owner is rolled, once.
    h.change("app-env", "2", &[("LOG", "debug"), ("PORT", "80")])
        .await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 1, "{patched:?}");
    assert_eq!(patched[0].0, deployment("solo"));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_env_restart_of_an_evict_pod_is_not_waited_out_as_a_blocked_eviction() {
    let workloads = Arc::new(FakeWorkloads::default());
    // `action: evict` with `env-action: restart` and `on-blocked: rollout` after 1 m:
    // "solo" alone in its ReplicaSet, "pair-a" and "pair-b" sharing one.
    let evicting = |name: &str, deployment: &str| {
        let mut p = env_restart_pod(name, deployment, &workloads);
        p.annotations
            .insert("reloadlet.io/action".into(), "evict".into());
        p.annotations
            .insert("reloadlet.io/blocked-timeout".into(), "1m".into());
        p
    };
    let pods = vec![
        evicting("solo", "solo"),
        evicting("pair-a", "pair"),
        evicting("pair-b", "pair"),
    ];
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    // The env source: restarted in place, so the grant's rule — the only pod's owner rolled
    // at once, the pair's never, also long after the eviction timeout.
    h.change("app-env", "2", &[("LOG", "debug"), ("PORT", "80")])
        .await;
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 1, "{patched:?}");
    assert_eq!(patched[0].0, deployment("solo"));
    // The mounted ConfigMap: the agent's eviction, and the pair still running after the
    // timeout is rolled.
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(h.workloads.patched().len(), 1, "not before the timeout");
    tokio::time::sleep(Duration::from_secs(45)).await;
    let rolled: Vec<_> = h.workloads.patched().into_iter().map(|p| p.0).collect();
    assert!(rolled.contains(&deployment("pair")), "{rolled:?}");
    h.stop().await;
}
