//! How `reloadlet controller` lists at start-up: a streaming list (`sendInitialEvents`) where
//! the API server offers one, the paged LIST where it refuses it (the `WatchList` feature
//! gate off, as on Kubernetes < 1.32 or an aggregated API server) — and either way every
//! pod is known and a change is nudged.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::configmap;
use common::*;
use controller_process::ControllerProcess as Controller;
use nodesim::apiserver::RequestRecord;
use serde_json::json;
use std::time::Duration;

const NS: &str = "lists";
const NUDGE: &str = "reloadlet.io/projection-nudge";
const WAIT: Duration = Duration::from_secs(15);

/// `count` opted-in pods of another node (no kubelet runs them) mounting `app-cfg`.
fn scene(node: &Node, count: usize) {
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v1")]));
    for i in 0..count {
        node.api.create_pod(
            serde_json::from_value(json!({
                "metadata": {"name": format!("web-{i}"), "namespace": NS,
                             "annotations": {"reloadlet.io/action": "signal"}},
                "spec": {
                    "nodeName": "elsewhere",
                    "volumes": [{"name": "conf", "configMap": {"name": "app-cfg"}}],
                    "containers": [{"name": "app", "image": "app",
                                    "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"}]}]
                }
            }))
            .unwrap(),
        );
        node.api.set_pod_status(
            NS,
            &format!("web-{i}"),
            serde_json::from_value(json!({"phase": "Running"})).unwrap(),
        );
    }
}

/// A read of the collection (a LIST or a WATCH; the controller's one create of its key
/// Secret is a POST to the collection, and no read).
fn collection(r: &RequestRecord, resource: &str) -> bool {
    r.method == "GET" && r.path.ends_with(&format!("/{resource}"))
}

/// A change of `app-cfg` nudges all `count` pods.
async fn every_pod_nudged(node: &Node, count: usize) {
    let rv = node
        .api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]))
        .metadata
        .resource_version
        .unwrap();
    let want = format!("configmap/app-cfg@{rv}");
    eventually("every pod nudged", WAIT, || {
        (0..count)
            .all(|i| {
                let ann = node
                    .api
                    .get_pod(NS, &format!("web-{i}"))
                    .and_then(|p| p.metadata.annotations)
                    .and_then(|a| a.get(NUDGE).cloned())
                    .unwrap_or_default();
                ann.starts_with(&want)
            })
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn where_the_server_offers_streaming_lists_the_controller_lists_without_a_list_request() {
    let node = Node::start(NodeOptions::default()).await;
    scene(&node, 3);
    let controller = Controller::start(&node, &["--leader-elect=false", "--secrets"], &[]).await;
    let requests = node.api.requests();
    for resource in ["pods", "configmaps", "secrets"] {
        let of: Vec<&RequestRecord> = requests
            .iter()
            .filter(|r| collection(r, resource))
            .collect();
        assert!(
            of.iter().all(|r| r.is_watch()),
            "{resource}: a LIST was made: {:?}",
            of.iter().map(|r| &r.query).collect::<Vec<_>>()
        );
        let streamed: Vec<&&RequestRecord> = of
            .iter()
            .filter(|r| {
                r.query.contains("sendInitialEvents=true")
                    && r.query.contains("resourceVersionMatch=NotOlderThan")
                    && r.query.contains("allowWatchBookmarks=true")
            })
            .collect();
        assert_eq!(streamed.len(), 1, "{resource}: one streaming list");
        assert_eq!(streamed[0].status, 200);
    }
    every_pod_nudged(&node, 3).await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn where_the_server_refuses_streaming_lists_the_controller_falls_back_to_paged_lists() {
    let node = Node::start(NodeOptions::default()).await;
    node.api.set_watch_list(false);
    scene(&node, 3);
    let controller = Controller::start(&node, &["--leader-elect=false", "--secrets"], &[]).await;
    // Ready means listed; the watch from the list's version follows it (kube-rs' watcher
    // moves from the list to the watch on its next poll): wait for it.
    let plain_watch = |r: &RequestRecord| {
        r.is_watch() && !r.query.contains("sendInitialEvents") && r.status == 200
    };
    let requests = eventually("a plain watch of every kind", WAIT, || {
        let requests = node.api.requests();
        ["pods", "configmaps", "secrets"]
            .iter()
            .all(|k| requests.iter().any(|r| collection(r, k) && plain_watch(r)))
            .then_some(requests)
    })
    .await;
    for resource in ["pods", "configmaps", "secrets"] {
        let of: Vec<&RequestRecord> = requests
            .iter()
            .filter(|r| collection(r, resource))
            .collect();
        // Refused once (422), then listed in pages and watched from the list's version.
        let refused: Vec<&&RequestRecord> = of
            .iter()
            .filter(|r| r.query.contains("sendInitialEvents=true"))
            .collect();
        assert_eq!(refused.len(), 1, "{resource}: asked once, then never again");
        assert_eq!(refused[0].status, 422);
        assert!(
            of.iter()
                .any(|r| !r.is_watch() && r.query.contains("limit=500") && r.status == 200),
            "{resource}: a paged LIST"
        );
        assert!(
            of.iter().any(|r| plain_watch(r)),
            "{resource}: a plain watch after the list"
        );
    }
    every_pod_nudged(&node, 3).await;
    // Nothing was asked of the server again with sendInitialEvents.
    let again = node
        .api
        .requests()
        .iter()
        .filter(|r| r.query.contains("sendInitialEvents=true"))
        .count();
    assert_eq!(again, 3);
    controller.stop().await;
}
