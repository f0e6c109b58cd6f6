//! The controller's grant of restarts in place (issue #45 §2) end to end: `reloadlet
//! controller` and the agent against the simulated node. Three replicas of one Deployment
//! behind a PodDisruptionBudget with `maxUnavailable: 1`, all `action: restart`: one
//! ConfigMap change restarts all three in place (same pod UIDs, `restartCount` + 1), and at
//! no moment are two of them not Ready; a controller restart in the middle restarts nothing
//! twice.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::configmap;
use common::*;
use controller_process::ControllerProcess;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use nodesim::apiserver::WorkloadKind;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const NS: &str = "apps";
const NO_ELECTION: &str = "--leader-elect=false";
/// A deadline, not a timing claim (three restarts one after another on a loaded machine).
const WAIT: Duration = Duration::from_secs(120);

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {
                    "labels": {"app": "web"},
                    "annotations": {
                        "reloadlet.io/action": "restart",
                        "reloadlet.io/restart-grace": "2s",
                        "nodesim.reloadlet.io/ready-delay-ms": "1000"
                    }
                },
                "spec": {
                    "containers": [{"name": "app", "image": "app",
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}]}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "web-cfg"}}]
                }
            }
        }
    }))
    .unwrap()
}

fn pdb() -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn restart_count(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "app"))
        .map_or(-1, |c| c.restart_count)
}

fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn pods(node: &Node) -> Vec<Pod> {
    node.api
        .pods_of_workload(WorkloadKind::Deployment, NS, "web")
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// uid → restartCount of the three pods once all run Ready.
async fn settled(node: &Node, what: &str, done: impl Fn(&Pod) -> bool) -> BTreeMap<String, i32> {
    eventually(what, WAIT, || {
        let pods = pods(node);
        (pods.len() == 3 && pods.iter().all(|p| ready(p) && done(p))).then(|| {
            pods.iter()
                .map(|p| (p.metadata.uid.clone().unwrap(), restart_count(p)))
                .collect()
        })
    })
    .await
}

/// Restarted for the request it made: request, grant and restarted all the same id.
fn restarted_for_its_request(p: &Pod) -> bool {
    let request = annotation(p, "reloadlet.io/restart-request");
    request.is_some()
        && annotation(p, "reloadlet.io/restart-grant") == request
        && annotation(p, "reloadlet.io/restarted") == request
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_behind_max_unavailable_one_restart_in_place_one_at_a_time() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v1")]));
    node.api.create_pdb(pdb());
    node.api.apply_deployment(deployment()).unwrap();
    node.start_agent(&[]).await;
    let before = settled(&node, "three Ready pods", |_| true).await;
    let readiness = node
        .api
        .track_readiness(WorkloadKind::Deployment, NS, "web")
        .unwrap();
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;

    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));

    // A controller restart once the first pod is granted: nothing restarts twice.
    eventually("a first grant", WAIT, || {
        pods(&node)
            .iter()
            .any(|p| annotation(p, "reloadlet.io/restart-grant").is_some())
            .then_some(())
    })
    .await;
    controller.stop().await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;

    let after = settled(&node, "all three restarted for their request", |p| {
        restarted_for_its_request(p)
    })
    .await;
    // the same pods, each restarted exactly once
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "same pod UIDs"
    );
    for (uid, count) in &after {
        assert_eq!(*count, before[uid] + 1, "pod {uid}: {before:?} → {after:?}");
    }
    let log = readiness.log();
    assert!(
        log.min_ready().is_some_and(|n| n >= 2),
        "two pods were not Ready at once: {log:?}"
    );
    // nothing more comes of it
    never("a second restart", CONTROLLER_QUIET, || {
        pods(&node)
            .iter()
            .any(|p| restart_count(p) > before[p.metadata.uid.as_ref().unwrap()] + 1)
    })
    .await;
    controller.stop().await;
}

/// Without a controller (no Lease holder, docs/restart.md "Without a controller"): each
/// pod's request waits with one Warning `RestartUncoordinated` that nothing grants it, and
/// nothing is restarted. The positive control: once a controller holds the Lease it grants
/// them all, and the next change's requests get no Warning.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_controller_each_request_is_warned_about_once_and_nothing_restarts() {
    if !root_or_skip() {
        return;
    }
    const WARNING: &str = "RestartUncoordinated";
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v1")]));
    node.api.apply_deployment(deployment()).unwrap();
    // the chart's Lease namespace (the agent's own, which the test process does not set)
    node.start_agent(&["--controller-lease-namespace", "reloadlet-system"])
        .await;
    let before = settled(&node, "three Ready pods", |_| true).await;
    let warnings = |p: &Pod| node.events(NS, p.metadata.name.as_deref().unwrap(), WARNING);

    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));
    eventually("a request and its Warning on each pod", WAIT, || {
        let pods = pods(&node);
        (pods.len() == 3
            && pods.iter().all(|p| {
                annotation(p, "reloadlet.io/restart-request").is_some() && !warnings(p).is_empty()
            }))
        .then_some(())
    })
    .await;
    for p in pods(&node) {
        let w = warnings(&p);
        assert_eq!((w.len(), w[0].type_.as_str()), (1, "Warning"), "{w:?}");
        let note = &w[0].note;
        let request = annotation(&p, "reloadlet.io/restart-request").unwrap();
        for part in [
            "no controller holds the Lease",
            "reloadlet-system/reloadlet-controller does not exist",
            request,
        ] {
            assert!(note.contains(part), "{part} in {note}");
        }
    }
    never("a restart without a grant", Duration::from_secs(3), || {
        pods(&node).iter().any(|p| {
            restart_count(p) != before[p.metadata.uid.as_ref().unwrap()]
                || annotation(p, "reloadlet.io/restart-grant").is_some()
        })
    })
    .await;
    assert!(
        !node.agent_log().contains("forbidden"),
        "the chart's agent Role reads the Lease"
    );

    // a controller that holds the Lease grants them
    let controller = ControllerProcess::start(&node, &[], &[]).await;
    let after = settled(&node, "all three restarted for their request", |p| {
        restarted_for_its_request(p)
    })
    .await;
    for (uid, count) in &after {
        assert_eq!(*count, before[uid] + 1, "pod {uid}");
    }
    // the next change: requests with a holder, no Warning
    let done: BTreeMap<String, String> = pods(&node)
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                annotation(p, "reloadlet.io/restart-request")
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v3")]));
    eventually("a new request on each pod", WAIT, || {
        pods(&node)
            .iter()
            .all(|p| {
                annotation(p, "reloadlet.io/restart-request")
                    .is_some_and(|r| r != done[p.metadata.name.as_deref().unwrap()])
            })
            .then_some(())
    })
    .await;
    never(
        "a Warning with a Lease holder",
        Duration::from_secs(3),
        || pods(&node).iter().any(|p| warnings(p).len() != 1),
    )
    .await;
    controller.stop().await;
}
