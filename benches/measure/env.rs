//! The env-consumer controller at scale (5,000 pods, 2,000 ConfigMaps), moved from
//! tests/env_consumers.rs.

use crate::common::fixtures::{configmap, env_key};
use crate::common::*;
use crate::controller_process::ControllerProcess;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::time::Duration;

const NS: &str = "apps";
const BASELINE: &str = "reloadlet.io/env-baseline";
const NO_ELECTION: &str = "--leader-elect=false";

/// Not a pass/fail test: 5,000 env-consumer pods over 2,000 ConfigMaps in the simulated API;
/// a ConfigMap data change → the first eviction request of one of its readers (p50/p99 over
/// samples), and the controller's RSS with the data watches on.
pub async fn env_scale() {
    const PODS: usize = 5000;
    const CONFIGMAPS: usize = 2000;
    const SAMPLES: usize = 40;
    let node = Node::start(NodeOptions::default()).await;
    for i in 0..CONFIGMAPS {
        node.api.apply_configmap(configmap(
            NS,
            &format!("cm-{i}"),
            &[("k", "v1"), ("other", "x")],
        ));
    }
    for i in 0..PODS {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": format!("p-{i}"), "namespace": NS,
                "annotations": {"reloadlet.io/action": "evict"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true}]
            },
            "spec": {
                // Another node: the simulated kubelet leaves them alone.
                "nodeName": "elsewhere",
                "containers": [{"name": "app", "image": "x",
                    "env": [env_key("K", "configmap", &format!("cm-{}", i % CONFIGMAPS), "k")]}]
            },
            "status": {"phase": "Running"}
        }))
        .unwrap();
        p.metadata.uid = None;
        node.api.create_pod(p);
    }
    let started = std::time::Instant::now();
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    let ready = started.elapsed();
    let baseline_patches = || {
        node.api
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.body.contains(BASELINE))
            .count()
    };
    until("every pod baselined", Duration::from_secs(300), || {
        baseline_patches() >= PODS
    })
    .await;
    let baselined = started.elapsed();
    let gets = node
        .api
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("/configmaps/"))
        .count();
    let mut took = Vec::new();
    for j in 0..SAMPLES {
        let before = node.api.evictions().len();
        let t = std::time::Instant::now();
        node.api.apply_configmap(configmap(
            NS,
            &format!("cm-{j}"),
            &[("k", "v2"), ("other", "x")],
        ));
        loop {
            if node.api.evictions().len() > before {
                took.push(t.elapsed());
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no eviction:\n{}",
                controller.log()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Let this change's readers (2–3 pods) be evicted before the next sample.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    took.sort();
    let pct = |p: f64| took[((took.len() as f64 * p).ceil() as usize).clamp(1, took.len()) - 1];
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", controller.child.id())).unwrap();
    let mem: Vec<&str> = status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
        .collect();
    eprintln!(
        "env consumers, {PODS} pods / {CONFIGMAPS} ConfigMaps: ready after {ready:?}, all baselined after {baselined:?} ({gets} ConfigMap GETs at start); ConfigMap change -> first eviction request over {} samples: p50 {:?} p99 {:?} max {:?}; {}",
        took.len(),
        pct(0.5),
        pct(0.99),
        took.last().unwrap(),
        mem.join(", ")
    );
    controller.stop().await;
}
