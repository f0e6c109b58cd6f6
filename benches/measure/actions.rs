//! Restart in place beside the actions that replace pods (issue #45 §4). The same workload
//! for each action: a Deployment of 3 replicas behind a PodDisruptionBudget
//! (`maxUnavailable: 1`) whose app reads its config only at start (no SIGHUP handler, no
//! reload endpoint; `terminationGracePeriodSeconds: 1`), the agent and the controller (fast
//! projection; it rolls `rollout` workloads) on one simulated node, each action on a fresh
//! node. Each sample is a Deployment of its own, changed once: a second restart of one
//! container inside the kubelet's crash-loop window would wait for its back-off (and
//! reloadlet defers it, docs/restart.md), which is not what one change costs. Per change: the
//! time until every replica serves the new config, and the pods created for it; printed with
//! the ratios against `restart`.
//!
//! `restart` runs twice: as installed, under the controller's grant (a budget-paced
//! sequence, docs/restart.md "The grant": one replica at a time here, the next once the
//! restarted one is Ready), and with `--restart-without-grant` (the three replicas at once,
//! the PDB not asked: what a restart costs a pod, not a paced sequence).

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

/// The pod template of Deployment `app`: reads `app.conf` of ConfigMap `<app>-cfg` once, writes
/// it to `<out>/<pod name>`, then sleeps.
fn template(action: &str, app: &str, base: &Path, out: &Path) -> serde_json::Value {
    let conf = sandboxed(base, "/etc/app");
    let script = format!(
        "cat {conf}/app.conf > {out}/$POD; while :; do sleep 3600 & wait $!; done",
        out = out.display()
    );
    json!({
        "metadata": {
            "labels": {"app": app},
            "annotations": {"reloadlet.io/action": action}
        },
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": "example/start-only:1",
                "command": ["/bin/sh", "-c", script],
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "volumeMounts": [{"name": "conf", "mountPath": conf}]}],
            "volumes": [{"name": "conf", "configMap": {"name": format!("{app}-cfg")}}]
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
fn serving(node: &Node, app: &str, out: &Path, value: &str) -> Option<BTreeSet<String>> {
    let pods: Vec<Pod> = node
        .api
        .pods_of_workload(WorkloadKind::Deployment, NS, app)
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

async fn one_action(action: &str, agent_args: &[&str], samples: usize) -> Figures {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(agent_args).await;
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let base = node.path("");
    let mut figures = Figures {
        took: Vec::new(),
        created: Vec::new(),
    };
    for k in 1..=samples {
        let app = format!("web-{k}");
        let out = node.path(&format!("served-{k}"));
        std::fs::create_dir_all(&out).unwrap();
        let cfg = format!("{app}-cfg");
        node.api
            .apply_configmap(configmap(NS, &cfg, &[("app.conf", "v0")]));
        node.api.create_pdb(
            serde_json::from_value(json!({
                "metadata": {"name": app, "namespace": NS},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}}
            }))
            .unwrap(),
        );
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": app, "namespace": NS},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": {"app": app}},
                "template": template(action, &app, &base, &out)
            }
        }))
        .unwrap();
        node.api.apply_deployment(deployment).unwrap();
        let before = eventually(&format!("{app}: 3 replicas serve v0"), WAIT, || {
            serving(&node, &app, &out, "v0")
        })
        .await;
        // Every volume watched (a conf and a kube-api-access volume per replica), so the
        // change is not taken for a first look.
        node.wait_tracked(2 * REPLICAS * k).await;
        let started = Instant::now();
        node.api
            .apply_configmap(configmap(NS, &cfg, &[("app.conf", "v1")]));
        let after = eventually(&format!("{action}: {app} serves v1"), WAIT, || {
            serving(&node, &app, &out, "v1")
        })
        .await;
        figures.took.push(started.elapsed());
        figures.created.push(after.difference(&before).count());
        // Old pods gone before the next sample, so it starts from a quiet node.
        eventually("terminating pods gone", WAIT, || {
            (node
                .api
                .list_pods()
                .iter()
                .all(|p| p.metadata.deletion_timestamp.is_none()))
            .then_some(())
        })
        .await;
    }
    controller.stop().await;
    figures
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

/// `restart` (granted, and ungranted) vs `rollout` vs `evict`: change → every replica serving the new config, and the
/// pods created per change (`RELOADLET_MEASURE_SAMPLES` Deployments each, default 5).
pub async fn restart_rollout_evict() {
    let samples: usize = std::env::var("RELOADLET_MEASURE_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut rows = Vec::new();
    for (row, action, agent_args) in [
        ("restart", "restart", &[][..]),
        (
            "restart, ungranted",
            "restart",
            &["--restart-without-grant"][..],
        ),
        ("rollout", "rollout", &[][..]),
        ("evict", "evict", &[][..]),
    ] {
        let f = one_action(action, agent_args, samples).await;
        rows.push((row, f));
    }
    let base = median(&rows[0].1.took);
    eprintln!(
        "actions, a {REPLICAS}-replica Deployment behind maxUnavailable 1, {samples} Deployments changed once each: change -> every replica serving it (median, max), pods created per change, ratio to restart"
    );
    for (action, f) in &rows {
        let m = median(&f.took);
        eprintln!(
            "  {action:<18} median {:>8.2?}  max {:>8.2?}  pods created per change {:?}  ratio {:.2}",
            m,
            f.took.iter().max().unwrap(),
            f.created,
            m.as_secs_f64() / base.as_secs_f64()
        );
    }
}
