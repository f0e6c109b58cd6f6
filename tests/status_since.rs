//! `since` from the object's managedFields (issue #46, docs/status.md "Where the facts come
//! from"): against the simulated API server (which keeps managedFields as kube-apiserver does)
//! and node, a pod started before the controller but after its ConfigMap's data was last
//! written reads `current` once the controller publishes, and a pod started before that write
//! does not.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, pod, sandboxed};
use common::*;
use controller_process::ControllerProcess;
use serde_json::{json, Value};
use std::time::Duration;

const NS: &str = "shop";
const WAIT: Duration = Duration::from_secs(60);
/// managedFields' time is to the second and the bound is that second's end: more than a
/// second between a write and a start orders them.
const APART: Duration = Duration::from_millis(1_300);

/// `reloadlet status configmap/app -n shop -o json`, as the admin.
fn status_json(node: &Node) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args([
            "status",
            "configmap/app",
            "-n",
            NS,
            "-o",
            "json",
            "--kubeconfig",
        ])
        .arg(node.kubeconfig())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// `(state, detail)` of `pod`.
fn state_of(status: &Value, pod: &str) -> Option<(String, String)> {
    let c = status["consumers"]
        .as_array()?
        .iter()
        .find(|c| c["pod"] == pod)?;
    Some((
        c["state"].as_str()?.to_owned(),
        c["detail"].as_str()?.to_owned(),
    ))
}

fn reader(node: &Node, name: &str) -> k8s_openapi::api::core::v1::Pod {
    pod(NS, name)
        .signal()
        .configmap_volume("config", "app")
        .container(json!({"name": "app", "image": "app",
            "volumeMounts": [{"name": "config", "mountPath": sandboxed(&node.path(name), "/etc/app")}]}))
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_started_after_the_last_data_write_reads_current_though_it_predates_the_controller() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v1")]));
    // Started before the data's last write: it may run v1.
    node.api.create_pod(reader(&node, "before-0"));
    node.wait_running(NS, "before-0").await;
    tokio::time::sleep(APART).await;
    let written = jiff::Timestamp::now();
    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v2")]));
    tokio::time::sleep(APART).await;
    // Started after it: it runs v2.
    node.api.create_pod(reader(&node, "after-0"));
    node.wait_running(NS, "after-0").await;
    tokio::time::sleep(APART).await;

    // Both started before the controller, which first sees the data now.
    let started = jiff::Timestamp::now();
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let status = eventually("after-0 current", WAIT, || {
        let status = status_json(&node);
        state_of(&status, "after-0")
            .is_some_and(|(state, _)| state == "current")
            .then_some(status)
    })
    .await;
    let (_, detail) = state_of(&status, "after-0").unwrap();
    assert!(detail.contains("started after the change"), "{status}");
    // The negative: the pod started before the last write is not current.
    let (state, _) = state_of(&status, "before-0").unwrap();
    assert_ne!(state, "current", "{status}");
    assert_eq!(status["allCurrent"], false, "{status}");

    // What was published: the write's second's end, not when the controller saw it.
    let published = node
        .api
        .get_configmap(NS, "app")
        .and_then(|cm| {
            cm.metadata
                .annotations?
                .get("reloadlet.io/data-version")
                .cloned()
        })
        .expect("published");
    let since: jiff::Timestamp = published
        .split_whitespace()
        .find_map(|w| w.strip_prefix("since="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(since > written, "{published}: after the write ({written})");
    assert!(
        since < started,
        "{published}: before the controller started ({started})"
    );
    controller.stop().await;
}
