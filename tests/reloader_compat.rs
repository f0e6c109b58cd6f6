//! `reloadlet controller --reloader-compat` end to end (issue #26 §3): Deployments carrying
//! Stakater Reloader's annotations — on the workload or on its pod template — rolled by
//! reloadlet as `action: rollout` against the simulated API server, whose Deployment
//! controller rolls a changed template surge-first. What a user migrating from Reloader
//! sees: each annotation rolls exactly the workloads it would have rolled, once per change;
//! nothing without the flag; a pod's own `reloadlet.io/action` wins; Secret annotations
//! need `--secrets`.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, secret};
use common::*;
use controller_process::ControllerProcess;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use nodesim::apiserver::WorkloadKind;
use serde_json::{json, Value};
use std::time::Duration;

const NS: &str = "apps";
const BASELINE: &str = "reloadlet.io/rollout-baseline";
const NO_ELECTION: &str = "--leader-elect=false";
const COMPAT: &str = "--reloader-compat";
const WAIT: Duration = Duration::from_secs(40);

/// What a Deployment mounts: (volume kind, object name).
enum Mount<'a> {
    Cm(&'a str),
    Secret(&'a str),
}

/// A one-replica Deployment `name` without any `reloadlet.io/*` annotation unless
/// `template` says so: `own` on the Deployment's metadata, `template` on its pod template.
fn deployment(name: &str, own: Value, template: Value, mounts: &[Mount]) -> Deployment {
    let mut annotations = json!({"nodesim.reloadlet.io/ready-delay-ms": "300"});
    for (k, v) in template.as_object().unwrap() {
        annotations[k] = v.clone();
    }
    let volumes: Vec<Value> = mounts
        .iter()
        .enumerate()
        .map(|(i, m)| match m {
            Mount::Cm(n) => json!({"name": format!("v{i}"), "configMap": {"name": n}}),
            Mount::Secret(n) => json!({"name": format!("v{i}"), "secret": {"secretName": n}}),
        })
        .collect();
    let volume_mounts: Vec<Value> = (0..mounts.len())
        .map(|i| json!({"name": format!("v{i}"), "mountPath": format!("/etc/v{i}")}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "annotations": own},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {
                    "containers": [{"name": "app", "image": "app", "volumeMounts": volume_mounts}],
                    "volumes": volumes
                }
            }
        }
    }))
    .unwrap()
}

fn cm(node: &Node, name: &str, value: &str, annotations: &[(&str, &str)]) {
    let mut c = configmap(NS, name, &[("app.conf", value)]);
    c.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    node.api.apply_configmap(c);
}

fn sec(node: &Node, name: &str, value: &str) {
    node.api.apply_secret(secret(NS, name, &[("token", value)]));
}

fn live(node: &Node, name: &str) -> Vec<Pod> {
    node.api
        .pods_of_workload(WorkloadKind::Deployment, NS, name)
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn has_baseline(p: &Pod) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(BASELINE))
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Waits until each Deployment runs one pod, with its rollout baseline when `tracked`.
async fn settled(node: &Node, names: &[&str], tracked: bool) {
    for name in names {
        until(&format!("{name}: one running pod"), WAIT, || {
            let pods = live(node, name);
            pods.len() == 1
                && pods
                    .iter()
                    .all(|p| running(p) && (!tracked || has_baseline(p)))
        })
        .await;
    }
}

/// PATCH requests to `deployments/<name>`.
fn patches(node: &Node, name: &str) -> usize {
    node.api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/deployments/{name}")))
        .count()
}

fn explain(node: &Node, pod: &str) -> String {
    node.explain_output(NS, pod)
}

fn pod_name(node: &Node, deployment: &str) -> String {
    live(node, deployment)[0].metadata.name.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_reloader_annotation_rolls_what_reloader_would_once_and_nothing_else() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    let none = json!({});
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let match_ = [("reloader.stakater.com/match", "true")];
    let ignore = [("reloader.stakater.com/ignore", "true")];
    for name in ["auto-cfg", "tpl-cfg", "list-cfg", "list-extra", "mine-cfg"] {
        cm(&node, name, "v1", &[]);
    }
    cm(&node, "search-cfg", "v1", &match_);
    cm(&node, "nomatch-cfg", "v1", &[]);
    cm(&node, "ignored-cfg", "v1", &ignore);
    for name in ["auto-sec", "list-sec"] {
        sec(&node, name, "v1");
    }
    let apply = |d: Deployment| node.api.apply_deployment(d).unwrap();
    // reloader.stakater.com/auto on the Deployment: its ConfigMap and its Secret.
    apply(deployment(
        "auto",
        auto.clone(),
        none.clone(),
        &[Mount::Cm("auto-cfg"), Mount::Secret("auto-sec")],
    ));
    // configmap.reloader.stakater.com/auto on the pod template (Reloader's fallback).
    apply(deployment(
        "tpl",
        none.clone(),
        json!({"configmap.reloader.stakater.com/auto": "true"}),
        &[Mount::Cm("tpl-cfg")],
    ));
    // Explicit lists: `list-extra` is named though not mounted; `list-cfg` is mounted but
    // not named (no auto): only the named ones roll.
    apply(deployment(
        "list",
        json!({"configmap.reloader.stakater.com/reload": "list-extra",
               "secret.reloader.stakater.com/reload": "list-sec"}),
        none.clone(),
        &[Mount::Cm("list-cfg"), Mount::Secret("list-sec")],
    ));
    // search + match: only ConfigMaps marked match roll it.
    apply(deployment(
        "search",
        json!({"reloader.stakater.com/search": "true"}),
        none.clone(),
        &[Mount::Cm("search-cfg"), Mount::Cm("nomatch-cfg")],
    ));
    // ignore on the ConfigMap: never.
    apply(deployment(
        "ignored",
        auto.clone(),
        none.clone(),
        &[Mount::Cm("ignored-cfg")],
    ));
    // The pod's own reloadlet.io/action wins (signal: the node agent's, not the controller's).
    apply(deployment(
        "mine",
        auto.clone(),
        json!({"reloadlet.io/action": "signal"}),
        &[Mount::Cm("mine-cfg")],
    ));
    let controller =
        ControllerProcess::start(&node, &[NO_ELECTION, COMPAT, "--secrets"], &[]).await;
    settled(&node, &["auto", "tpl", "list", "search", "ignored"], true).await;
    settled(&node, &["mine"], false).await;
    let text = explain(&node, &pod_name(&node, "auto"));
    assert!(
        text.contains("reloader.stakater.com/auto: true") && text.contains("Deployment apps/auto"),
        "{text}"
    );
    let text = explain(&node, &pod_name(&node, "mine"));
    assert!(text.contains("reloadlet.io/action wins"), "{text}");

    // What rolls nothing: a mounted ConfigMap not in the list, one without match, an
    // ignored one, and the pod whose own action wins.
    for name in ["list-cfg", "nomatch-cfg", "ignored-cfg", "mine-cfg"] {
        let annotations: &[(&str, &str)] = if name == "ignored-cfg" { &ignore } else { &[] };
        cm(&node, name, "v2", annotations);
    }
    never(
        "a patch for a change no annotation asks for",
        CONTROLLER_QUIET,
        || {
            ["list", "search", "ignored", "mine"]
                .iter()
                .any(|n| patches(&node, n) > 0)
        },
    )
    .await;

    // Everything that rolls, changed at once: each Deployment patched exactly once.
    cm(&node, "auto-cfg", "v2", &[]);
    sec(&node, "auto-sec", "v2");
    cm(&node, "tpl-cfg", "v2", &[]);
    cm(&node, "list-extra", "v2", &[]);
    sec(&node, "list-sec", "v2");
    cm(&node, "search-cfg", "v2", &match_);
    for name in ["auto", "tpl", "list", "search"] {
        until(&format!("{name} rolled"), WAIT, || {
            patches(&node, name) == 1
        })
        .await;
    }
    never(
        "a second patch, or one of the others",
        CONTROLLER_QUIET,
        || {
            ["auto", "tpl", "list", "search"]
                .iter()
                .any(|n| patches(&node, n) > 1)
                || ["ignored", "mine"].iter().any(|n| patches(&node, n) > 0)
        },
    )
    .await;
    let d = node.api.get_deployment(NS, "auto").unwrap();
    let anns = d
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap();
    assert!(anns.contains_key("kubectl.kubernetes.io/restartedAt"));
    assert_eq!(
        anns["reloadlet.io/restarted-for"], "configmap/auto-cfg,secret/auto-sec",
        "{anns:?}"
    );
    // Nothing else of the workloads was written (the patches are the template annotations).
    let requested: Vec<(String, String)> = node
        .api
        .events()
        .into_iter()
        .filter(|e| e.reason == "RolloutRequested")
        .map(|e| (e.regarding_kind, e.regarding_name))
        .collect();
    assert_eq!(requested.len(), 4, "{requested:?}");
    assert!(
        requested.iter().all(|(kind, _)| kind == "Deployment"),
        "{requested:?}"
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_flag_nothing_rolls_and_secret_annotations_need_secrets() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    cm(&node, "web-cfg", "v1", &[]);
    sec(&node, "tok-sec", "v1");
    node.api
        .apply_deployment(deployment(
            "web",
            json!({"reloader.stakater.com/auto": "true"}),
            json!({}),
            &[Mount::Cm("web-cfg")],
        ))
        .unwrap();
    node.api
        .apply_deployment(deployment(
            "tok",
            json!({"secret.reloader.stakater.com/auto": "true"}),
            json!({}),
            &[Mount::Secret("tok-sec")],
        ))
        .unwrap();

    // Compat off (the default): Reloader's annotations mean nothing to reloadlet.
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    settled(&node, &["web", "tok"], false).await;
    cm(&node, "web-cfg", "v2", &[]);
    never(
        "a patch with --reloader-compat off",
        CONTROLLER_QUIET,
        || patches(&node, "web") > 0,
    )
    .await;
    assert!(live(&node, "web").iter().all(|p| !has_baseline(p)));
    controller.stop().await;

    // Compat on, no --secrets: the ConfigMap workload rolls, the Secret one cannot.
    let controller = ControllerProcess::start(&node, &[NO_ELECTION, COMPAT], &[]).await;
    settled(&node, &["web"], true).await;
    until("the warning about --secrets", WAIT, || {
        controller.log().contains("without --secrets")
    })
    .await;
    let text = explain(&node, &pod_name(&node, "tok"));
    assert!(
        text.contains("secret.reloader.stakater.com/auto") && text.contains("--secrets"),
        "{text}"
    );
    sec(&node, "tok-sec", "v2");
    cm(&node, "web-cfg", "v3", &[]);
    until("web rolled", WAIT, || patches(&node, "web") == 1).await;
    never("the Secret workload patched", CONTROLLER_QUIET, || {
        patches(&node, "tok") > 0
    })
    .await;
    let log = controller.log();
    assert_eq!(log.matches("without --secrets").count(), 1, "logged once");
    controller.stop().await;
}
