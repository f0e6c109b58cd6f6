//! A broken API is paced, named and shown: a 403 on the pod list backs off (not one request
//! a second from every node), is logged once naming the missing permission, counted, and
//! makes /readyz answer 503 with the reason. And the PDB watch feeds the
//! `NoDisruptionBudget` warning for evict pods.

mod common;

use common::fixtures::pod;
use common::*;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;
use std::time::Duration;

fn pod_lists(node: &Node) -> usize {
    node.api
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods")
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forbidden_pod_list_backs_off_is_named_once_and_makes_the_agent_unready() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_outage(Some(403));
    // Every request answers the injected 403, whatever it asks.
    node.api.expect_forbidden("*", "*", "*");
    node.spawn_agent(&[]);
    let listen = node.agent().listen.clone();
    let body = eventually(
        "/readyz 503 naming the rule",
        Duration::from_secs(10),
        || {
            http_get(&listen, "/readyz").and_then(|(code, body)| {
                (code == 503 && body.contains("forbidden to list pods")).then_some(body)
            })
        },
    )
    .await;
    assert!(
        body.contains("feature pod-watch: forbidden to list pods cluster-wide (HTTP 403): add the rule {apiGroups: [\"\"], resources: [\"pods\"], verbs: [\"list\", \"watch\"]} to the ServiceAccount's ClusterRole"),
        "{body}"
    );
    // kube's default backoff, reset by the watcher's Init before each relist, lists about
    // once a second (6+ in 8 s). Backing off from 1 s: at most 4 (0, 1-2, 3-6, 7-14 s).
    never(
        "more than 4 pod lists within 8 s",
        Duration::from_secs(8),
        || pod_lists(&node) > 4,
    )
    .await;
    let log = node.agent_log();
    let named = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("forbidden to list pods cluster-wide"))
        .count();
    assert_eq!(named, 1, "one error naming the permission:\n{log}");
    assert!(
        !log.contains("cached pods"),
        "no pod list has arrived; nothing is cached:\n{log}"
    );
    assert!(
        node.metric("reloadlet_api_errors_total{resource=\"pods\",code=\"403\"}") >= 2.0,
        "{}",
        node.scrape()
    );
    assert!(node.metric("reloadlet_api_consecutive_failures{resource=\"pods\"}") >= 2.0);
    assert!(
        node.metric("reloadlet_forbidden_total{verb=\"list\",resource=\"pods\"}") >= 2.0,
        "{}",
        node.scrape()
    );

    // Permission granted: the next attempt (at most ~30 s later) syncs and clears the reason.
    node.api.set_outage(None);
    eventually("ready again", Duration::from_secs(45), || {
        http_get(&listen, "/readyz").and_then(|(code, _)| (code == 200).then_some(()))
    })
    .await;
    assert_eq!(
        node.metric("reloadlet_api_consecutive_failures{resource=\"pods\"}"),
        0.0
    );
    node.stop_agent().await;
}

fn pdb(name: &str, app: &str) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_evict_pod_no_budget_selects_gets_one_warning() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.create_pdb(pdb("api", "api"));
    let evict = |name: &str| {
        pod("shop", name)
            .annotate("reloadlet.io/action", "evict")
            .owned_by_replicaset("rs")
            .build()
    };
    node.api.create_pod(evict("web"));
    node.api.create_pod(evict("api"));
    node.start_agent(&[]).await;
    let ev = node.wait_event("shop", "web", "NoDisruptionBudget").await;
    assert_eq!(ev.type_, "Warning");
    assert!(
        ev.note.contains("no PodDisruptionBudget selects this pod"),
        "{}",
        ev.note
    );
    // A PDB created later is seen through the watch: a new pod it selects is not warned about.
    node.api.create_pdb(pdb("late", "late"));
    node.api.create_pod(evict("late"));
    node.api.create_pod(evict("other"));
    node.wait_event("shop", "other", "NoDisruptionBudget").await;
    never(
        "warnings for protected pods, or twice for one",
        Duration::from_secs(2),
        || {
            !node.events("shop", "api", "NoDisruptionBudget").is_empty()
                || !node.events("shop", "late", "NoDisruptionBudget").is_empty()
                || node.events("shop", "web", "NoDisruptionBudget")[0].count > 1
        },
    )
    .await;
    node.stop_agent().await;
}
