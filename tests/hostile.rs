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

/// A node with the agent running and these ConfigMaps (`k: v1`) in the tenant's namespace.
async fn agent_with_configmaps(names: &[&str]) -> Node {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    for name in names {
        node.api
            .apply_configmap(configmap(NS, name, &[("k", "v1")]));
    }
    node
}

/// A pod that lists 300 volumes: the agent watches the first 256 (each is an inotify watch
/// of the node's shared budget), tells the pod once with a Warning `VolumeOverLimit` naming
/// the cap, and goes on serving the pod beside it. Before the cap, one pod spec could take
/// every inotify watch of the node (`fs.inotify.max_user_watches`).
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_three_hundred_volumes_gets_256_watches_and_one_warning() {
    let node = agent_with_configmaps(&["crowded-conf", "app-conf"]).await;
    let out = |n: &str| node.path(&format!("{n}.sig"));
    let mut crowded = pod(NS, "crowded").signal();
    for i in 0..300 {
        crowded = crowded.configmap_volume(&format!("v{i:03}"), "crowded-conf");
    }
    node.api.create_pod(
        crowded
            .recorder("app", &out("crowded"), &[("v000", "/etc/app")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "innocent")
            .signal()
            .configmap_volume("conf", "app-conf")
            .recorder("app", &out("innocent"), &[("conf", "/etc/app")])
            .build(),
    );
    for name in ["crowded", "innocent"] {
        node.wait_running(NS, name).await;
    }
    let warning = node.wait_event(NS, "crowded", "VolumeOverLimit").await;
    assert_eq!(warning.type_, "Warning");
    assert!(
        warning.note.contains("more than 256 volumes"),
        "{}",
        warning.note
    );
    // 256 of the crowded pod's volumes (its token's among them or not) and the innocent's.
    node.wait_tracked(257).await;
    // The pods directory; each pod's directory, volumes/ and two plugin directories
    // (configmap, projected); 256 volumes of the crowded pod; the innocent's two.
    let watches = node.metric("reloadlet_inotify_watches");
    assert!(watches <= (1 + 2 * 4 + 256 + 2) as f64, "{watches} watches");

    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    // Positive control: the agent still acts for the innocent pod.
    eventually("the innocent pod got SIGHUP", WAIT, || {
        (signals_in(&out("innocent")) == ["SIGHUP"]).then_some(())
    })
    .await;
    assert_eq!(
        node.events(NS, "crowded", "VolumeOverLimit").len(),
        1,
        "told once, not once per volume"
    );
    assert!(http_get(&node.agent().listen, "/healthz").is_some_and(|(code, _)| code == 200));
}

/// A pod in any namespace, opted in or not, with a volume a thousand directories deep: the
/// agent refuses that volume (a Warning `VolumeOverLimit` naming the limit on the pod that
/// opted in, a log line for the other), signals neither, and goes on signalling the innocent
/// pod beside them. Before the fix, the recursive walk overflowed the hot thread's stack and
/// the agent aborted at every start.
#[tokio::test(flavor = "multi_thread")]
async fn a_volume_nested_a_thousand_deep_cannot_stop_the_agent() {
    let mut node = agent_with_configmaps(&["deep-conf", "app-conf"]).await;
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
        node.pod_annotation(NS, "innocent", NUDGE)
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

/// A Deployment whose template mounts `cfg` and asks for `action` (`None`: nothing).
fn deployment(name: &str, action: Option<&str>) -> k8s_openapi::api::apps::v1::Deployment {
    let mut annotations = json!({"nodesim.reloadlet.io/ready-delay-ms": "200"});
    if let Some(action) = action {
        annotations["reloadlet.io/action"] = json!(action);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {
                    "containers": [{"name": "app", "image": "app",
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}]}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]
                }
            }
        }
    }))
    .unwrap()
}

fn deployment_patches(node: &Node, name: &str) -> usize {
    node.api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/deployments/{name}")))
        .count()
}

/// Issue #43 §2, a tenant who can write pods but not Deployments: `action: rollout` patched
/// onto the running pod of a Deployment whose template never asked, and a bare pod whose
/// owner reference names that Deployment's ReplicaSet with a made-up UID. The controller
/// patches neither Deployment's template; each pod gets a Warning `RolloutNotGranted` saying
/// why. Positive control: the Deployment whose template asks is rolled by the same change.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_cannot_have_a_workload_rolled_that_never_asked() {
    let node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "cfg", &[("k", "v1")]));
    node.api
        .apply_deployment(deployment("victim", None))
        .unwrap();
    node.api
        .apply_deployment(deployment("asks", Some("rollout")))
        .unwrap();
    let first_pod = |name: &str| {
        let pods = node
            .api
            .pods_of_workload(WorkloadKind::Deployment, NS, name);
        pods.first()?.metadata.name.clone()
    };
    let victim = eventually("victim's pod", WAIT, || first_pod("victim")).await;
    let asks = eventually("asks's pod", WAIT, || first_pod("asks")).await;
    node.wait_running(NS, &victim).await;
    node.wait_running(NS, &asks).await;
    let (rs, _) = node.api.replicasets_of_deployment(NS, "victim")[0].clone();
    // The tenant's two moves.
    node.api
        .merge_patch_pod(
            NS,
            &victim,
            &json!({"metadata": {"annotations": {"reloadlet.io/action": "rollout"}}}),
        )
        .unwrap();
    let mut forger = pod(NS, "forger")
        .annotate("reloadlet.io/action", "rollout")
        .label("app", "victim")
        .configmap_volume("cfg", "cfg")
        .recorder("app", &node.path("forger.sig"), &[("cfg", "/etc/app")])
        .build();
    forger.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
        "uid": "made-up-uid", "controller": true
    }))
    .unwrap()]);
    node.api.create_pod(forger);
    node.wait_running(NS, "forger").await;

    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let baselined = |name: &str| {
        node.api
            .get_pod(NS, name)
            .and_then(|p| p.metadata.annotations)
            .is_some_and(|a| a.contains_key("reloadlet.io/rollout-baseline"))
    };
    until("every asking pod has its baseline", WAIT, || {
        baselined(&victim) && baselined(&asks) && baselined("forger")
    })
    .await;

    node.api
        .apply_configmap(configmap(NS, "cfg", &[("k", "v2")]));
    until("the Deployment that asks is rolled", WAIT, || {
        deployment_patches(&node, "asks") == 1
    })
    .await;
    let victim_warning = node.wait_event(NS, &victim, "RolloutNotGranted").await;
    assert!(
        victim_warning
            .note
            .contains("reloadlet.io/action is \"rollout\" on the pod but absent in Deployment victim's pod template"),
        "{}",
        victim_warning.note
    );
    let forged = node.wait_event(NS, "forger", "RolloutNotGranted").await;
    assert!(
        forged.note.contains("with UID \"made-up-uid\""),
        "{}",
        forged.note
    );
    never(
        "a patch of the Deployment that never asked",
        Duration::from_secs(2),
        || deployment_patches(&node, "victim") > 0,
    )
    .await;
    assert_eq!(deployment_patches(&node, "asks"), 1);
    controller.stop().await;
}

/// Issue #43 §2: state the controller relies on cannot be forged. A tenant overwrites the
/// `reloadlet.io/rollout-baseline` of a pod whose Deployment asks for rollouts with a made-up
/// digest, then the controller restarts (it sees the pod afresh, as after a leader change).
/// Nothing is rolled: the forged value is not the controller's (its MAC does not hold), so a
/// fresh baseline is taken and written over it. Positive control: a real change of the data
/// then rolls the Deployment once.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_baseline_rolls_nothing_after_a_restart() {
    let node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "cfg", &[("k", "v1")]));
    node.api
        .apply_deployment(deployment("web", Some("rollout")))
        .unwrap();
    let web = eventually("web's pod", WAIT, || {
        let pods = node
            .api
            .pods_of_workload(WorkloadKind::Deployment, NS, "web");
        pods.first()?.metadata.name.clone()
    })
    .await;
    node.wait_running(NS, &web).await;
    let baseline = |node: &Node| {
        node.api
            .get_pod(NS, &web)
            .and_then(|p| p.metadata.annotations)
            .and_then(|a| a.get("reloadlet.io/rollout-baseline").cloned())
    };
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let signed = eventually("web's baseline", WAIT, || baseline(&node)).await;
    assert!(signed.contains(";mac="), "{signed}");
    controller.stop().await;

    // The tenant's forgery: the format the controller wrote before baselines were signed,
    // and a signed-looking one with a made-up MAC.
    for forged in [
        "configmap/cfg=0000000000000000",
        "configmap/cfg=0000000000000000;mac=00000000000000000000000000000000",
    ] {
        node.api
            .merge_patch_pod(
                NS,
                &web,
                &json!({"metadata": {"annotations": {"reloadlet.io/rollout-baseline": forged}}}),
            )
            .unwrap();
        let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
        until("the forged baseline replaced by a signed one", WAIT, || {
            baseline(&node).is_some_and(|b| b != forged && b.contains(";mac="))
        })
        .await;
        never(
            "a rollout from a forged baseline",
            Duration::from_secs(2),
            || deployment_patches(&node, "web") > 0,
        )
        .await;
        assert!(controller.log().contains("not this controller's"));
        controller.stop().await;
    }

    // Positive control: a real change rolls web, once.
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    node.api
        .apply_configmap(configmap(NS, "cfg", &[("k", "v2")]));
    until("web rolled for the real change", WAIT, || {
        deployment_patches(&node, "web") == 1
    })
    .await;
    controller.stop().await;
}
