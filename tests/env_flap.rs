//! The flap breaker of the controller's env evictions counts per owner (issue #28; docs/pacing.md,
//! "Where the state lives"): against the simulated API server and node with the real binary, a
//! ReplicaSet whose pods read a ConfigMap key through env, each eviction replacing them with new
//! pods (new UIDs). With `flap-threshold: 3/1m`, five changes → three rounds of evictions, one
//! `ReloadFlapping` naming the ReplicaSet (and `reloadlet explain` on a held pod showing it),
//! then one round after the quiet minute.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::configmap;
use common::*;
use controller_process::ControllerProcess;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use nodesim::apiserver::RecordedEvent;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const NS: &str = "apps";
const BASELINE: &str = "reloadlet.io/env-baseline";
const WAIT: Duration = Duration::from_secs(60);

fn template() -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {
            "labels": {"app": "web"},
            "annotations": {
                "reloadlet.io/action": "evict",
                "reloadlet.io/flap-threshold": "3/1m",
                "nodesim.reloadlet.io/ready-delay-ms": "300"
            }
        },
        "spec": {"containers": [{"name": "app", "image": "app", "env": [
            {"name": "LOG", "valueFrom": {"configMapKeyRef": {"name": "app-env", "key": "LOG"}}}
        ]}]}
    }))
    .unwrap()
}

fn apply(node: &Node, log: &str) {
    node.api
        .apply_configmap(configmap(NS, "app-env", &[("LOG", log)]));
}

fn flapping(node: &Node) -> Vec<RecordedEvent> {
    node.api
        .events()
        .into_iter()
        .filter(|e| e.reason == "ReloadFlapping")
        .collect()
}

fn live(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The ReplicaSet's three live pods once each carries its baseline: their UIDs.
async fn baselined_pods(node: &Node) -> BTreeSet<String> {
    eventually("web: three live pods with baselines", WAIT, || {
        let pods: Vec<Pod> = node
            .api
            .pods_of_replicaset(NS, "web")
            .into_iter()
            .filter(live)
            .collect();
        let all = pods.len() == 3
            && pods.iter().all(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(BASELINE))
            });
        all.then(|| pods.iter().filter_map(|p| p.metadata.uid.clone()).collect())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_sets_env_evictions_are_held_as_flapping_then_run_once_on_the_latest_content() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    apply(&node, "v0");
    node.api.create_replicaset(NS, "web", 3, template(), NODE);
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let mut pods = baselined_pods(&node).await;

    // Three changes, each after the last round's replacements are baselined: three rounds.
    for round in 1..=3 {
        apply(&node, &format!("v{round}"));
        until(&format!("round {round} evicted"), WAIT, || {
            let evicted = evicted_set(&node);
            pods.is_subset(&evicted)
        })
        .await;
        pods = baselined_pods(&node).await;
    }
    assert_eq!(evicted_uids(&node).len(), 9);
    assert!(flapping(&node).is_empty());

    // The 4th change within the minute: held, one Warning naming the ReplicaSet.
    apply(&node, "v4");
    let events = eventually("ReloadFlapping", WAIT, || {
        let f = flapping(&node);
        (!f.is_empty()).then_some(f)
    })
    .await;
    let ev = &events[0];
    assert_eq!(ev.type_, "Warning");
    assert!(pods.contains(&ev.regarding_uid), "about one of its pods");
    assert!(
        ev.note
            .contains("configmap app-env changed 4 times within 1m")
            && ev.note.contains("ReplicaSet web"),
        "{}",
        ev.note
    );
    // A 5th: still held, told once.
    apply(&node, "v5");
    never("an eviction while flapping", CONTROLLER_QUIET, || {
        evicted_uids(&node).len() > 9
    })
    .await;
    assert_eq!(
        controller.metric("reloadlet_pacing_held_pods"),
        1.0,
        "the held gauge"
    );
    // `reloadlet explain` on a held pod shows the episode (the controller keeps it on the pod).
    let held = node
        .api
        .pods_of_replicaset(NS, "web")
        .into_iter()
        .find(|p| p.metadata.uid.as_ref().is_some_and(|u| pods.contains(u)))
        .and_then(|p| p.metadata.name)
        .expect("a held pod");
    let text = eventually("explain shows the hold", WAIT, || {
        let text = node.explain_output(NS, &held);
        text.contains("env eviction held: flapping since")
            .then_some(text)
    })
    .await;
    assert!(
        text.contains("(configmap app-env changed 4 times)"),
        "{text}"
    );
    // `reloadlet status` reads the same hold (issue #46: pending, held by pacing), for the held
    // pod only while others of the set wait for the controller.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["status", "configmap/app-env", "-n", NS, "--kubeconfig"])
        .arg(node.kubeconfig())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&status.stdout);
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(held.as_str()))
        .unwrap_or_else(|| panic!("no line for {held}:\n{out}"));
    assert!(
        line.contains("pending") && line.contains("held by pacing (flapping)"),
        "{out}"
    );
    assert_eq!(status.status.code(), Some(1), "{out}");

    // Quiet for the minute: each held pod evicted once, on v5.
    until(
        "the round after the quiet minute",
        Duration::from_secs(150),
        || {
            let evicted = evicted_set(&node);
            pods.is_subset(&evicted)
        },
    )
    .await;
    // The replacements start on the latest content: nothing more.
    baselined_pods(&node).await;
    never("another eviction", CONTROLLER_QUIET, || {
        evicted_uids(&node).len() > 12
    })
    .await;
    assert_eq!(evicted_uids(&node).len(), 12, "each pod once");
    assert_eq!(flapping(&node).len(), 1, "one Warning per episode");
    assert_eq!(controller.metric("reloadlet_pacing_held_pods"), 0.0);
    controller.stop().await;
}
