//! Scene 5: `reloadlet.io/action: rollout` — a one-replica Deployment whose application
//! cannot reload at all (no signal handler, no endpoint), its ConfigMap changed: the
//! controller patches the Deployment's template once, the Deployment surges a new pod
//! before the old one goes, and there is no moment without a Ready pod.

use crate::support::*;
use crate::{cm, NODE};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use nodesim::apiserver::WorkloadKind;
use nodesim::node::SimNode;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn ready_uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.uid.clone())
        .collect()
}

/// Runs the scene; returns how long the rollout took and whether a moment had no Ready pod.
pub async fn scene(node: &SimNode) -> Result<(Duration, bool), String> {
    let api = &node.api;
    say("5. demo/api: 1 replica, no reload support, reloadlet.io/action: rollout (default strategy 25 %/25 %)");
    api.set_nodes(&[NODE]);
    api.apply_configmap(cm("api-conf", "app.conf", "v1"));
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "api", "namespace": "demo"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "api"}},
            "template": {
                "metadata": {"labels": {"app": "api"}, "annotations": {
                    "reloadlet.io/action": "rollout", "nodesim.reloadlet.io/ready-delay-ms": "1500"}},
                "spec": {"containers": [{"name": "app", "image": "app",
                    "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/api").display().to_string()}]}],
                    "volumes": [{"name": "conf", "configMap": {"name": "api-conf"}}]}
            }
        }
    }))
    .map_err(|e| e.to_string())?;
    api.apply_deployment(deployment)
        .map_err(|e| format!("{e:?}"))?;
    let old = wait_for(
        "the api pod Ready and known to the controller",
        Duration::from_secs(30),
        || {
            let pods = api.pods_of_workload(WorkloadKind::Deployment, "demo", "api");
            let known = pods.iter().all(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("reloadlet.io/rollout-baseline"))
            });
            let ready = ready_uids(&pods);
            (ready.len() == 1 && known).then_some(ready)
        },
    )
    .await?;
    let readiness = api
        .track_readiness(WorkloadKind::Deployment, "demo", "api")
        .ok_or("no Deployment demo/api")?;
    say("kubectl edit configmap api-conf");
    let timeline = Timeline::start();
    api.apply_configmap(cm("api-conf", "app.conf", "v2"));
    let mut shown = 0;
    let new = loop {
        let log = readiness.log();
        for s in log.samples.iter().skip(shown) {
            timeline.line(
                Instant::now(),
                &format!(
                    "pods of demo/api: {} Ready, {} running, {} terminating",
                    s.ready, s.running, s.terminating
                ),
            );
        }
        shown = log.samples.len();
        let pods = api.pods_of_workload(WorkloadKind::Deployment, "demo", "api");
        let ready = ready_uids(&pods);
        let all_new = pods
            .iter()
            .all(|p| p.metadata.uid.as_ref().is_some_and(|u| !old.contains(u)));
        if ready.len() == 1 && ready.is_disjoint(&old) && all_new {
            break ready;
        }
        if timeline.since(Instant::now()) > Duration::from_secs(60) {
            return Err("the rollout did not complete".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = timeline.since(Instant::now());
    let log = readiness.log();
    let patches = api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/deployments/api"))
        .count();
    println!(
        "    rolled in {:.1} s: {patches} PATCH of the Deployment, surge to {} pods, fewest Ready pods at any moment: {} (old {:?} -> new {:?})",
        took.as_secs_f64(),
        log.max_running(),
        log.min_ready().unwrap_or(0),
        old,
        new
    );
    if let Some(ev) = api
        .events()
        .into_iter()
        .find(|e| e.reason == "RolloutRequested")
    {
        println!("    Event {} {}: {}", ev.type_, ev.reason, ev.note);
    }
    Ok((took, log.ever_zero_ready()))
}
