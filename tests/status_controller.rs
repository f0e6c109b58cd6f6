//! `reloadlet status` reading what the real controller recorded on the pods it acts on (issue
//! #46 §2, docs/status.md): against the simulated API server (RBAC and the controller's
//! admission policy enforced) and node, an env consumer whose eviction a PodDisruptionBudget
//! refuses reads `pending` waiting for a budget, and a rollout Deployment's pod reads
//! `pending` (rollout in progress) and then, replaced, `current`.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::configmap;
use common::*;
use controller_process::ControllerProcess;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use nodesim::apiserver::WorkloadKind;
use serde_json::{json, Value};
use std::time::Duration;

const NS: &str = "apps";
const APPLIED: &str = "reloadlet.io/applied";
const WAIT: Duration = Duration::from_secs(60);

/// `reloadlet status <object> -n apps -o json`, as the admin.
fn status_json(node: &Node, object: &str) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["status", object, "-n", NS, "-o", "json", "--kubeconfig"])
        .arg(node.kubeconfig())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// `(state, detail)` of `pod` in `status`.
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

fn applied(p: &Pod) -> Option<String> {
    p.metadata.annotations.as_ref()?.get(APPLIED).cloned()
}

fn env_template() -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {
            "labels": {"app": "web"},
            "annotations": {"reloadlet.io/action": "evict"}
        },
        "spec": {"containers": [{"name": "app", "image": "app", "env": [
            {"name": "LOG", "valueFrom": {"configMapKeyRef": {"name": "app-env", "key": "LOG"}}}
        ]}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_env_consumer_whose_eviction_a_budget_refuses_reads_pending_waiting_for_a_budget() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api
        .apply_configmap(configmap(NS, "app-env", &[("LOG", "v0")]));
    // Its managedFields reset (`[]`, as a client may): they no longer tell when the data was
    // written, so the controller dates it from when it first sees it (tests/status_since.rs
    // has the pods that read current from managedFields).
    let mut reset = configmap(NS, "app-env", &[("LOG", "v0")]);
    reset.metadata.managed_fields = Some(Vec::new());
    node.api.apply_configmap(reset);
    node.api
        .create_replicaset(NS, "web", 2, env_template(), NODE);
    // Both pods must stay: no eviction is ever allowed.
    node.api.create_pdb(
        serde_json::from_value::<PodDisruptionBudget>(json!({
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap(),
    );
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let pods: Vec<String> = eventually("two baselined env consumers", WAIT, || {
        let pods = node.api.pods_of_replicaset(NS, "web");
        let baselined = pods.iter().all(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("reloadlet.io/env-baseline"))
        });
        (pods.len() == 2 && baselined).then(|| {
            pods.iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect()
        })
    })
    .await;
    // Before the change: no record, and (started before the controller first saw the data)
    // nothing proves which data they run, so they wait for the controller (docs/status.md).
    let before = status_json(&node, "configmap/app-env");
    for pod in &pods {
        let (state, detail) = state_of(&before, pod).unwrap();
        assert_eq!(state, "pending", "{before}");
        assert!(detail.contains("waiting for the controller"), "{before}");
    }
    assert!(node
        .api
        .pods_of_replicaset(NS, "web")
        .iter()
        .all(|p| applied(p).is_none()));

    node.api
        .apply_configmap(configmap(NS, "app-env", &[("LOG", "v1")]));
    let status = eventually("both pods pending, waiting for a budget", WAIT, || {
        let status = status_json(&node, "configmap/app-env");
        pods.iter()
            .all(|pod| {
                state_of(&status, pod).is_some_and(|(state, detail)| {
                    state == "pending" && detail.contains("PodDisruptionBudget")
                })
            })
            .then_some(status)
    })
    .await;
    assert_eq!(status["allCurrent"], false, "{status}");
    // The record says who and what: the controller, an eviction, blocked.
    for p in node.api.pods_of_replicaset(NS, "web") {
        let record: Value = serde_json::from_str(&applied(&p).unwrap()).unwrap();
        let entry = &record["objects"][0];
        assert_eq!(
            (&entry["by"], &entry["action"], &entry["result"]),
            (&json!("controller"), &json!("evict"), &json!("blocked")),
            "{record}"
        );
        assert!(entry["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1:")));
    }
    // Retried and blocked again: no second write of the same facts.
    let writes = |node: &Node| {
        node.api
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path.contains("/pods/web"))
            .count()
    };
    let after = writes(&node);
    never("a write of the same block", CONTROLLER_QUIET, || {
        writes(&node) > after
    })
    .await;
    controller.stop().await;
}

fn rollout_template() -> Value {
    json!({
        "metadata": {
            "labels": {"app": "roll"},
            "annotations": {
                "reloadlet.io/action": "rollout",
                "nodesim.reloadlet.io/ready-delay-ms": "3000"
            }
        },
        "spec": {
            "containers": [{"name": "app", "image": "app", "env": [
                {"name": "LOG", "valueFrom": {"configMapKeyRef": {"name": "roll-cfg", "key": "LOG"}}}
            ]}]
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_pod_reads_pending_while_its_workload_rolls_then_its_replacement_current() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "roll-cfg", &[("LOG", "v0")]));
    // managedFields reset, as in the test above: the pod waits for the controller.
    let mut reset = configmap(NS, "roll-cfg", &[("LOG", "v0")]);
    reset.metadata.managed_fields = Some(Vec::new());
    node.api.apply_configmap(reset);
    node.api
        .apply_deployment(
            serde_json::from_value::<Deployment>(json!({
                "metadata": {"name": "roll", "namespace": NS},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "roll"}},
                         "template": rollout_template()}
            }))
            .unwrap(),
        )
        .unwrap();
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let old = eventually("the rollout pod, baselined", WAIT, || {
        let pods = node
            .api
            .pods_of_workload(WorkloadKind::Deployment, NS, "roll");
        let p = pods.first()?;
        let baselined = p
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("reloadlet.io/rollout-baseline"));
        (pods.len() == 1 && baselined).then(|| p.metadata.name.clone().unwrap())
    })
    .await;
    let before = status_json(&node, "configmap/roll-cfg");
    let (_, detail) = state_of(&before, &old).unwrap();
    assert!(
        detail.contains("waiting for the controller: a rollout"),
        "{before}"
    );

    node.api
        .apply_configmap(configmap(NS, "roll-cfg", &[("LOG", "v1")]));
    // The old pod carries the controller's record of the rollout it asked for.
    let record = eventually("the old pod's rollout record", WAIT, || {
        node.api
            .pods_of_workload(WorkloadKind::Deployment, NS, "roll")
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(old.as_str()))
            .and_then(applied)
    })
    .await;
    let record: Value = serde_json::from_str(&record).unwrap();
    assert_eq!(
        (&record["objects"][0]["by"], &record["objects"][0]["result"]),
        (&json!("controller"), &json!("rollout-requested")),
        "{record}"
    );
    // While the replacement starts (3 s to Ready), the old pod reads pending.
    let (state, detail) = eventually("the old pod pending", WAIT, || {
        state_of(&status_json(&node, "configmap/roll-cfg"), &old)
    })
    .await;
    assert_eq!(state, "pending", "{detail}");
    assert!(detail.contains("rollout in progress"), "{detail}");
    // Replaced: the new pod reads current, the old one is gone from the list.
    eventually("the replacement current, alone", WAIT, || {
        let status = status_json(&node, "configmap/roll-cfg");
        let consumers = status["consumers"].as_array()?.clone();
        let only_new = consumers.len() == 1 && consumers[0]["pod"] != old.as_str();
        (only_new && consumers[0]["state"] == "current" && status["allCurrent"] == true)
            .then_some(())
    })
    .await;
    controller.stop().await;
}
