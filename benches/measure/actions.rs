//! Restart in place beside the actions that replace pods (issue #45 §4). The same workload
//! for each action: a Deployment of 3 replicas behind a PodDisruptionBudget
//! (`maxUnavailable: 1`) whose app reads its config only at start (no SIGHUP handler, no
//! reload endpoint; `terminationGracePeriodSeconds: 1`), the agent and the controller (fast
//! projection; it rolls `rollout` workloads) on one simulated node, each action on a fresh
//! node. Per ConfigMap change: the time until every replica serves the new config, and the
//! pods created for it; printed with the ratios against `restart`.
//!
//! `restart` runs with `--restart-without-grant`: the controller's grant (a budget-paced
//! sequence, docs/restart.md) is not built yet, so the three replicas restart at once and
//! the PDB is not asked. Its figure is what a restart costs a pod, not a paced sequence.

use crate::common::fixtures::{configmap, sandboxed};
use crate::common::*;
use crate::controller_process::ControllerProcess;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use nodesim::apiserver::WorkloadKind;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

const NS: &str = "apps";
const REPLICAS: usize = 3;
const WAIT: Duration = Duration::from_secs(180);

/// The pod template: reads `app.conf` once, writes it to `<out>/<pod name>`, then sleeps.
fn template(action: &str, base: &Path, out: &Path) -> serde_json::Value {
    let conf = sandboxed(base, "/etc/app");
    let script = format!(
        "cat {conf}/app.conf > {out}/$POD; while :; do sleep 3600 & wait $!; done",
        out = out.display()
    );
    json!({
        "metadata": {
            "labels": {"app": "web"},
            "annotations": {"reloadlet.io/action": action}
        },
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": "example/start-only:1",
                "command": ["/bin/sh", "-c", script],
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "volumeMounts": [{"name": "conf", "mountPath": conf}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "web-cfg"}}]
        }
    })
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Deployment's pods that are not terminating, when there are exactly [`REPLICAS`] of
/// them, all Ready and all serving `value`.
fn serving(node: &Node, out: &Path, value: &str) -> Option<BTreeSet<String>> {
    let pods: Vec<Pod> = node
        .api
        .pods_of_workload(WorkloadKind::Deployment, NS, "web")
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let all = pods.len() == REPLICAS
        && pods.iter().all(|p| {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            ready(p) && std::fs::read_to_string(out.join(name)).is_ok_and(|s| s == value)
        });
    all.then(|| pods.iter().filter_map(|p| p.metadata.uid.clone()).collect())
}

struct Figures {
    took: Vec<Duration>,
    created: Vec<usize>,
}

async fn one_action(action: &str, samples: usize) -> Figures {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--restart-without-grant"]).await;
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let out = node.path("served");
    std::fs::create_dir_all(&out).unwrap();
    let base = node.path("");
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v0")]));
    node.api.create_pdb(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap(),
    );
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": template(action, &base, &out)
        }
    }))
    .unwrap();
    node.api.apply_deployment(deployment).unwrap();
    let mut uids = eventually("3 replicas serve v0", WAIT, || serving(&node, &out, "v0")).await;
    // Every volume watched (3 conf + 3 kube-api-access), so the first change is not a baseline.
    node.wait_tracked(2 * REPLICAS).await;
    let mut figures = Figures {
        took: Vec::new(),
        created: Vec::new(),
    };
    for k in 1..=samples {
        let value = format!("v{k}");
        // Let the last change settle (terminating pods gone) before the next one.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let started = Instant::now();
        node.api
            .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", &value)]));
        let now = eventually(&format!("{action}: 3 replicas serve {value}"), WAIT, || {
            serving(&node, &out, &value)
        })
        .await;
        figures.took.push(started.elapsed());
        figures.created.push(now.difference(&uids).count());
        uids = now;
    }
    controller.stop().await;
    figures
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

/// `restart` vs `rollout` vs `evict`: change → every replica serving the new config, and the
/// pods created per change (`RELOADLET_MEASURE_SAMPLES` changes each, default 5).
pub async fn restart_rollout_evict() {
    let samples: usize = std::env::var("RELOADLET_MEASURE_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut rows = Vec::new();
    for action in ["restart", "rollout", "evict"] {
        let f = one_action(action, samples).await;
        rows.push((action, f));
    }
    let base = median(&rows[0].1.took);
    eprintln!(
        "actions, a {REPLICAS}-replica Deployment behind maxUnavailable 1, {samples} ConfigMap changes each: change -> every replica serving it (median, max), pods created per change, ratio to restart"
    );
    for (action, f) in &rows {
        let m = median(&f.took);
        eprintln!(
            "  {action:<8} median {:>8.2?}  max {:>8.2?}  pods created per change {:?}  ratio {:.2}",
            m,
            f.took.iter().max().unwrap(),
            f.created,
            m.as_secs_f64() / base.as_secs_f64()
        );
    }
}
