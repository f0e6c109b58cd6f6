//! Scene 3: three replicas that ask to be evicted on a ConfigMap change, behind a
//! PodDisruptionBudget with maxUnavailable 1, replaced one at a time through the Eviction
//! API (with the controller running, so the change reaches them in about a second).

use crate::support::*;
use crate::{cm, NODE};
use nodesim::node::SimNode;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Runs the scene; returns how long the replacement took and the number of PDB violations.
pub async fn scene(node: &SimNode, listen: &str) -> Result<(Duration, usize), String> {
    let (api, kubelet) = (&node.api, &node.kubelet);
    say("3. 3 replicas of demo/web with reloadlet.io/action: evict, PDB maxUnavailable: 1");
    api.apply_configmap(cm("web-conf", "app.conf", "v1"));
    api.create_pdb(
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "demo"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))
        .unwrap(),
    );
    let template = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}, "annotations": {"reloadlet.io/action": "evict", "nodesim.reloadlet.io/ready-delay-ms": "1500"}},
        "spec": {"containers": [{"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/conf").display().to_string()}]}],
                 "volumes": [{"name": "conf", "configMap": {"name": "web-conf"}}]}
    })).unwrap();
    let tracked_before = metric(listen, "reloadlet_volumes_tracked").unwrap_or(0.0);
    api.create_replicaset("demo", "web", 3, template, NODE);
    let originals: BTreeSet<String> = api
        .pods_of_replicaset("demo", "web")
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    for u in &originals {
        kubelet
            .wait_for_pod(u, Duration::from_secs(30))
            .ok_or("replica did not start")?;
    }
    wait_for("replicas Ready", Duration::from_secs(10), || {
        let pdb = api.get_pdb("demo", "web")?;
        (pdb.status?.current_healthy == 3).then_some(())
    })
    .await?;
    wait_for(
        "reloadlet to know the replicas' volumes",
        Duration::from_secs(10),
        || {
            metric(listen, "reloadlet_volumes_tracked")
                .filter(|n| *n >= tracked_before + originals.len() as f64)
        },
    )
    .await?;
    say("kubectl edit configmap web-conf");
    let timeline = Timeline::start();
    api.apply_configmap(cm("web-conf", "app.conf", "v2"));
    let mut seen = 0;
    loop {
        let ev = api.evictions();
        for e in ev.iter().skip(seen) {
            let pdb = api.get_pdb("demo", "web").and_then(|p| p.status);
            let verdict = match e.code {
                201 => "evicted",
                429 => "refused by the PDB (429)",
                _ => "error",
            };
            timeline.line(
                Instant::now(),
                &format!(
                    "eviction of {} -> {verdict}; PDB healthy {}/{} desired",
                    e.pod,
                    pdb.as_ref().map(|s| s.current_healthy).unwrap_or(0),
                    pdb.as_ref().map(|s| s.desired_healthy).unwrap_or(0)
                ),
            );
        }
        seen = ev.len();
        let evicted: BTreeSet<String> = ev
            .iter()
            .filter(|e| e.code == 201)
            .filter_map(|e| e.uid.clone())
            .collect();
        if evicted == originals {
            break;
        }
        if timeline.since(Instant::now()) > Duration::from_secs(60) {
            return Err("evictions did not complete".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let replaced = timeline.since(Instant::now());
    let violations = api.invariant_violations();
    println!(
        "    all 3 replaced one at a time in {:.1} s; PDB violations: {}; replicas now: {:?}",
        replaced.as_secs_f64(),
        violations.len(),
        api.pods_of_replicaset("demo", "web")
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let count = |reason: &str| {
        api.events()
            .into_iter()
            .filter(|e| e.reason == reason)
            .count()
    };
    println!(
        "    Events: {} EvictionRequested, {} EvictionBlocked",
        count("EvictionRequested"),
        count("EvictionBlocked")
    );
    Ok((replaced, violations.len()))
}
