//! The evict action on a simulated node: evictions go through the Eviction API, so the API
//! server enforces PodDisruptionBudgets; reloadlet paces its retries and tells the operator.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const NS: &str = "apps";
/// Fast pacing for tests; the defaults are 5 s and 2 min.
const FAST: [&str; 4] = [
    "--eviction-backoff",
    "200ms",
    "--eviction-backoff-max",
    "1s",
];

fn template(ready_delay_ms: u64, mount: &str) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {
            "labels": {"app": "web"},
            "annotations": {
                "reloadlet.io/action": "evict",
                "nodesim.reloadlet.io/ready-delay-ms": ready_delay_ms.to_string()
            }
        },
        "spec": {
            "containers": [{"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": mount}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "app-conf"}}]
        }
    }))
    .unwrap()
}

fn pdb(name: &str, spec: serde_json::Value) -> PodDisruptionBudget {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": "web"}});
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": NS}, "spec": spec}))
        .unwrap()
}

fn uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
}

/// Starts reloadlet, a ReplicaSet of `replicas` on the node, and waits until all run and
/// reloadlet knows their volumes.
async fn replicas(
    node: &mut Node,
    replicas: i32,
    ready_delay_ms: u64,
    args: &[&str],
) -> BTreeSet<String> {
    let mut all: Vec<&str> = FAST.to_vec();
    all.extend_from_slice(args);
    node.start_agent(&all).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v1")]));
    node.api.create_replicaset(
        NS,
        "web",
        replicas,
        template(ready_delay_ms, &node.path("mnt/conf").display().to_string()),
        NODE,
    );
    let pods = eventually("replicas exist", Duration::from_secs(10), || {
        let pods = node.api.pods_of_replicaset(NS, "web");
        (pods.len() == replicas as usize).then_some(pods)
    })
    .await;
    for p in &pods {
        node.wait_running(NS, p.metadata.name.as_deref().unwrap())
            .await;
    }
    node.wait_tracked(2 * replicas as usize).await;
    eventually("replicas Ready", Duration::from_secs(10), || {
        let ready = node
            .api
            .pods_of_replicaset(NS, "web")
            .iter()
            .filter(|p| is_ready(p))
            .count();
        (ready == replicas as usize).then_some(())
    })
    .await;
    uids(&pods)
}

fn is_ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until exactly `uids` have been evicted (201, not dry-run).
async fn wait_evicted(node: &Node, uids: &BTreeSet<String>, what: &str, timeout: Duration) {
    eventually(what, timeout, || {
        let evicted = evicted_set(node);
        (evicted == *uids).then_some(())
    })
    .await
}

/// No accepted eviction ever brought a PDB below its minimum.
fn assert_budgets_held(node: &Node) {
    let violations = node.api.invariant_violations();
    assert!(violations.is_empty(), "{violations:?}");
}

fn eviction_requests(node: &Node) -> usize {
    node.api
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_behind_max_unavailable_1_are_replaced_one_at_a_time() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api
        .create_pdb(pdb("web", json!({"maxUnavailable": 1})));
    let originals = replicas(&mut node, 3, 700, &[]).await;

    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));

    wait_evicted(
        &node,
        &originals,
        "all three originals evicted",
        Duration::from_secs(40),
    )
    .await;
    let running = eventually("three fresh replicas run", Duration::from_secs(20), || {
        let pods = node.api.pods_of_replicaset(NS, "web");
        let fresh = pods.iter().all(|p| p.metadata.deletion_timestamp.is_none());
        (pods.len() == 3 && fresh && uids(&pods).is_disjoint(&originals)).then_some(pods)
    })
    .await;
    never(
        "a replacement is evicted for the change it already has",
        Duration::from_secs(2),
        || evicted_uids(&node).iter().any(|u| !originals.contains(u)),
    )
    .await;
    assert_budgets_held(&node);
    let log = node.api.invariant_log();
    assert_eq!(log.len(), 3, "each eviction used the budget once: {log:?}");
    // One at a time: every accepted eviction left at least desiredHealthy ready pods.
    assert!(
        log.iter().all(|r| r.healthy_after >= r.desired_healthy),
        "{log:?}"
    );
    let requested: Vec<_> = node
        .all_events()
        .into_iter()
        .filter(|e| e.reason == "EvictionRequested")
        .collect();
    assert_eq!(requested.len(), 3);
    assert!(requested
        .iter()
        .all(|e| e.note == "evicted through the Eviction API: configmap app-conf changed"));
    assert_eq!(uids(&running).len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_that_can_never_allow_it_is_retried_at_a_bounded_rate_until_relaxed() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.create_pdb(pdb("web", json!({"minAvailable": 2})));
    let originals = replicas(&mut node, 2, 300, &[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));

    let first = eventually(
        "an EvictionBlocked warning",
        Duration::from_secs(10),
        || {
            node.all_events()
                .into_iter()
                .find(|e| e.reason == "EvictionBlocked")
        },
    )
    .await;
    assert_eq!(first.type_, "Warning");
    assert!(
        first
            .note
            .contains("The disruption budget web needs 2 healthy pods and has 2 currently"),
        "{}",
        first.note
    );
    // minAvailable 2 over 2 replicas is a structural block: said at once, in plain words,
    // then asked about no more often than every 5 minutes (tests/evict_blocked.rs).
    assert!(
        first
            .note
            .contains("no eviction can succeed while the workload keeps its size"),
        "{}",
        first.note
    );
    eventually("both pods asked once", Duration::from_secs(10), || {
        (eviction_requests(&node) >= 2).then_some(())
    })
    .await;
    let before = eviction_requests(&node);
    never("the API hammered", Duration::from_secs(3), || {
        eviction_requests(&node) > before
    })
    .await;
    assert!(evicted_uids(&node).is_empty());
    assert!(node.metric("reloadlet_evictions_pending") >= 2.0);

    // A second change while the evictions are pending does not queue more of them.
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v3")]));
    node.api.update_pdb(pdb("web", json!({"minAvailable": 1})));
    wait_evicted(
        &node,
        &originals,
        "both originals evicted once the budget allows it",
        Duration::from_secs(40),
    )
    .await;
    assert_budgets_held(&node);
    never(
        "a replacement evicted, or an original twice",
        Duration::from_secs(2),
        || evicted_uids(&node).len() != originals.len(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_eviction_survives_a_restart_of_reloadlet() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.create_pdb(pdb("web", json!({"minAvailable": 1})));
    let originals = replicas(&mut node, 1, 0, &[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    eventually("blocked", Duration::from_secs(10), || {
        node.all_events()
            .into_iter()
            .find(|e| e.reason == "EvictionBlocked")
    })
    .await;
    assert!(node.stop_agent().await.success());
    let state = std::fs::read_to_string(node.path("state/state.json")).unwrap();
    assert!(
        state.contains("pending_evictions") && state.contains("configmap app-conf changed"),
        "{state}"
    );
    node.api.update_pdb(pdb("web", json!({"minAvailable": 0})));
    node.start_agent(&FAST).await;
    wait_evicted(
        &node,
        &originals,
        "the eviction resumes and completes",
        Duration::from_secs(15),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_budget_the_pod_is_evicted_at_once() {
    let mut node = Node::start(NodeOptions::default()).await;
    let originals = replicas(&mut node, 1, 0, &[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    wait_evicted(&node, &originals, "evicted", Duration::from_secs(10)).await;
    // The API server deletes the pod before its 201 reaches the agent, which counts then.
    let series = "reloadlet_actions_total{action=\"evict\",outcome=\"evicted\"}";
    eventually("the eviction counted", Duration::from_secs(10), || {
        (node.metric(series) > 0.0).then_some(())
    })
    .await;
    assert_eq!(node.metric(series), 1.0);
    assert_eq!(eviction_requests(&node), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_budgets_give_a_warning_with_the_servers_message_and_paced_retries() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api
        .create_pdb(pdb("web-a", json!({"maxUnavailable": 1})));
    node.api
        .create_pdb(pdb("web-b", json!({"maxUnavailable": 1})));
    replicas(&mut node, 1, 0, &[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    let ev = eventually("an EvictionFailed warning", Duration::from_secs(10), || {
        node.all_events()
            .into_iter()
            .find(|e| e.reason == "EvictionFailed")
    })
    .await;
    assert_eq!(ev.type_, "Warning");
    assert!(
        ev.note.contains("more than one PodDisruptionBudget"),
        "{}",
        ev.note
    );
    let before = eviction_requests(&node);
    tokio::time::sleep(Duration::from_secs(3)).await; // a measured window
    let during = eviction_requests(&node) - before;
    assert!(
        during <= 5,
        "errors are retried at the capped interval, not spun: {during}"
    );
    assert!(evicted_uids(&node).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn unowned_pods_are_refused_unless_they_allow_it() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&FAST).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v1")]));
    for (name, allow) in [("bare", false), ("bare-ok", true)] {
        let mut b = pod(NS, name)
            .annotate("reloadlet.io/action", "evict")
            .configmap_volume("conf", "app-conf");
        if allow {
            b = b.annotate("reloadlet.io/evict-unowned", "true");
        }
        node.api.create_pod(b.container(json!({"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/conf").display().to_string()}]})).build());
        node.wait_running(NS, name).await;
    }
    node.wait_tracked(4).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    let ev = node.wait_event(NS, "bare", "EvictionRefused").await;
    assert_eq!(ev.type_, "Warning");
    assert!(
        ev.note.contains("reloadlet.io/evict-unowned"),
        "{}",
        ev.note
    );
    node.wait_event(NS, "bare-ok", "EvictionRequested").await;
    let posted: Vec<String> = node.api.evictions().into_iter().map(|e| e.pod).collect();
    assert_eq!(
        posted,
        ["bare-ok"],
        "the refused pod was never sent to the Eviction API"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_stop_when_the_pod_is_deleted() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.create_pdb(pdb("web", json!({"minAvailable": 1})));
    replicas(&mut node, 1, 0, &[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    eventually("blocked", Duration::from_secs(10), || {
        node.all_events()
            .into_iter()
            .find(|e| e.reason == "EvictionBlocked")
    })
    .await;
    node.api.scale_replicaset(NS, "web", 0);
    for p in node.api.pods_of_replicaset(NS, "web") {
        node.api.delete_pod(NS, p.metadata.name.as_deref().unwrap());
    }
    eventually("nothing pending", Duration::from_secs(10), || {
        (node.metric("reloadlet_evictions_pending") == 0.0).then_some(())
    })
    .await;
    let after = eviction_requests(&node);
    never(
        "eviction requests for a deleted pod",
        Duration::from_secs(2),
        || eviction_requests(&node) > after,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_asks_the_server_with_dry_run_all_and_deletes_nothing() {
    let mut node = Node::start(NodeOptions::default()).await;
    let originals = replicas(&mut node, 1, 0, &["--dry-run"]).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    eventually("a dry-run eviction", Duration::from_secs(10), || {
        node.api
            .evictions()
            .into_iter()
            .find(|e| e.dry_run && e.code == 201)
    })
    .await;
    assert!(node
        .api
        .requests()
        .iter()
        .any(|r| r.path.ends_with("/eviction") && r.query.contains("dryRun=All")));
    never(
        "the pod is deleted on dry-run",
        Duration::from_secs(1),
        || uids(&node.api.pods_of_replicaset(NS, "web")) != originals,
    )
    .await;
    assert!(
        node.all_events().is_empty(),
        "dry-run acts on nothing: {:?}",
        node.all_events()
    );
}
