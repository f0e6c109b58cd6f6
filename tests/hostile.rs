//! Tests that play the tenant (issue #43): what a pod author can write — annotations, volume
//! layouts — must never stop the agent or the controller, nor make them act on anything that
//! did not opt in. Each test has an innocent pod beside the hostile one, and asserts that it
//! is still served (the positive control of every "nothing else happened").

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, pod};
use common::*;
use controller_process::ControllerProcess;
use nodesim::apiserver::WorkloadKind;
use serde_json::json;
use std::time::Duration;

const NS: &str = "tenant";
const WAIT: Duration = Duration::from_secs(20);
const NUDGE: &str = "reloadlet.io/projection-nudge";

/// A configMap volume whose one item nests `depth` directories (the API server accepts
/// `items[].path` up to 4,096 characters).
fn deep_volume(volume: &str, configmap: &str, depth: usize) -> serde_json::Value {
    let path = vec!["d"; depth].join("/") + "/k";
    json!({"name": volume, "configMap": {"name": configmap, "items": [{"key": "k", "path": path}]}})
}

/// A pod in any namespace, opted in or not, with a volume a thousand directories deep: the
/// agent refuses that volume (a Warning `VolumeOverLimit` naming the limit on the pod that
/// opted in, a log line for the other), signals neither, and goes on signalling the innocent
/// pod beside them. Before the fix, the recursive walk overflowed the hot thread's stack and
/// the agent aborted at every start.
#[tokio::test(flavor = "multi_thread")]
async fn a_volume_nested_a_thousand_deep_cannot_stop_the_agent() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    for name in ["deep-conf", "app-conf"] {
        node.api
            .apply_configmap(configmap(NS, name, &[("k", "v1")]));
    }
    let out = |n: &str| node.path(&format!("{n}.sig"));
    node.api.create_pod(
        pod(NS, "deep")
            .signal()
            .volume(deep_volume("conf", "deep-conf", 1_000))
            .recorder("app", &out("deep"), &[("conf", "/etc/app")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "deep-plain")
            .volume(deep_volume("conf", "deep-conf", 1_000))
            .recorder("app", &out("deep-plain"), &[("conf", "/etc/app")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "innocent")
            .signal()
            .configmap_volume("conf", "app-conf")
            .recorder("app", &out("innocent"), &[("conf", "/etc/app")])
            .build(),
    );
    for name in ["deep", "deep-plain", "innocent"] {
        node.wait_running(NS, name).await;
    }
    let warning = node.wait_event(NS, "deep", "VolumeOverLimit").await;
    assert_eq!(warning.type_, "Warning");
    assert!(
        warning.note.contains("volume conf is not followed")
            && warning.note.contains("64-level limit"),
        "{}",
        warning.note
    );

    for name in ["deep-conf", "app-conf"] {
        node.api
            .apply_configmap(configmap(NS, name, &[("k", "v2")]));
    }
    // Positive control: the agent still acts for the innocent pod.
    eventually("the innocent pod got SIGHUP", WAIT, || {
        (signals_in(&out("innocent")) == ["SIGHUP"]).then_some(())
    })
    .await;
    never(
        "a signal to a refused volume's pod",
        Duration::from_secs(2),
        || !signals_in(&out("deep")).is_empty() || !signals_in(&out("deep-plain")).is_empty(),
    )
    .await;
    assert_eq!(
        node.events(NS, "deep", "VolumeOverLimit").len(),
        1,
        "one Warning per volume and limit"
    );
    assert!(
        node.events(NS, "deep-plain", "VolumeOverLimit").is_empty(),
        "no Event on a pod that did not opt in"
    );
    assert!(
        node.agent_log().contains("over a limit"),
        "the refused volume is logged"
    );
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"none\",outcome=\"volume_over_limit\"}"),
        1.0
    );
    // Still alive after all of it.
    assert!(http_get(&node.agent().listen, "/healthz").is_some_and(|(code, _)| code == 200));
    let status = node.stop_agent().await;
    assert!(status.success(), "the agent exited cleanly: {status:?}");
}

/// `reloadlet.io/blocked-timeout: "300000000000y"` on an `on-blocked: rollout` pod: before
/// the fix the controller panicked adding it to an instant and exited at every start. Now the
/// value is refused (a Warning `InvalidAnnotation` from the agent, naming the maximum), and
/// the controller goes on nudging the innocent pod.
#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_timeout_of_three_hundred_billion_years_cannot_stop_the_controller() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v1")]));
    let innocent_sig = node.path("innocent.sig");
    // A Deployment whose pods ask for on-blocked: rollout with an absurd timeout, and no
    // budget: the block, if any, is transient, which is where the timeout is added.
    let template = json!({
        "metadata": {"labels": {"app": "hostile"}, "annotations": {
            "reloadlet.io/action": "evict",
            "reloadlet.io/on-blocked": "rollout",
            "reloadlet.io/blocked-timeout": "300000000000y"
        }},
        "spec": {
            "containers": [{"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/conf").display().to_string()}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "app-conf"}}]
        }
    });
    let deployment = serde_json::from_value(json!({
        "metadata": {"name": "hostile", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "hostile"}}, "template": template}
    }))
    .unwrap();
    node.api.apply_deployment(deployment).unwrap();
    node.api.create_pod(
        pod(NS, "innocent")
            .signal()
            .configmap_volume("conf", "app-conf")
            .recorder("app", &innocent_sig, &[("conf", "/etc/app")])
            .build(),
    );
    node.wait_running(NS, "innocent").await;
    let hostile = eventually("the hostile Deployment's pod", WAIT, || {
        let pods = node
            .api
            .pods_of_workload(WorkloadKind::Deployment, NS, "hostile");
        pods.first()?.metadata.name.clone()
    })
    .await;
    node.wait_running(NS, &hostile).await;
    node.start_agent(&[]).await;
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let invalid = node.wait_event(NS, &hostile, "InvalidAnnotation").await;
    assert!(
        invalid.note.contains("reloadlet.io/blocked-timeout")
            && invalid.note.contains("300000000000y")
            && invalid.note.contains("7 days"),
        "{}",
        invalid.note
    );

    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    // Positive control: the controller nudged the innocent pod, and it was signalled.
    eventually("the controller nudged the innocent pod", WAIT, || {
        let pod = node.api.get_pod(NS, "innocent")?;
        pod.metadata.annotations?.get(NUDGE).cloned()
    })
    .await;
    eventually("the innocent pod got SIGHUP", WAIT, || {
        (signals_in(&innocent_sig) == ["SIGHUP"]).then_some(())
    })
    .await;
    never("the controller exited", Duration::from_secs(2), || {
        http_get(&controller.listen, "/readyz").is_none_or(|(code, _)| code != 200)
    })
    .await;
    assert!(
        evicted_uids(&node).is_empty(),
        "nothing is done for a pod with an invalid annotation"
    );
    controller.stop().await;
}
