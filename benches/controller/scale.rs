//! The controller at scale with nudges flowing: `pods` Running, qualifying pods spread over
//! `configmaps` ConfigMaps in the simulated API (on another node: no kubelet runs them, the
//! controller only sees the API), then `changed` ConfigMaps updated at once. Measured from
//! the outside: the controller's RSS (steady before the change, the peak `VmHWM` over the
//! whole run), the watches open per kind (the simulated API server counts its open watch
//! streams) and every request the server logged after the change.

use crate::procs::{status_mib, Reloadlet};
use crate::Knobs;
use nodesim::node::SimNode;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const NS: &str = "shop";
const BAR_RSS_MIB: f64 = 64.0;
/// Each change is nudged at once, then again after 1 s and 3 s.
const PATCHES_PER_NUDGE: usize = 3;

fn pod(i: usize, configmaps: usize) -> k8s_openapi::api::core::v1::Pod {
    // Shaped like a Deployment's pod: labels, the injected kube-api-access volume, a
    // container with env, resources and two mounts.
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("web-{i}"), "namespace": NS,
            "labels": {"app": format!("web-{}", i % configmaps), "pod-template-hash": "5d8f7c9b6"},
            "annotations": {"reloadlet.io/action": "signal"}
        },
        "spec": {
            "nodeName": "elsewhere",
            "volumes": [
                {"name": "conf", "configMap": {"name": format!("cm-{}", i % configmaps)}},
                {"name": "kube-api-access-x7k2p", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
                ]}}
            ],
            "containers": [{
                "name": "app", "image": "registry.example/app:1.2.3",
                "env": [{"name": "MODE", "value": "production"}, {"name": "PORT", "value": "8080"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "volumeMounts": [
                    {"name": "conf", "mountPath": "/etc/app"},
                    {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
                ]
            }]
        }
    }))
    .unwrap()
}

fn running() -> k8s_openapi::api::core::v1::PodStatus {
    serde_json::from_value(json!({"phase": "Running", "podIP": "10.0.0.1"})).unwrap()
}

fn configmap(name: &str, value: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "data": {"app.conf": format!("{value}\n{}", "x".repeat(512))}
    }))
    .unwrap()
}

/// What a request was, for counting: `PATCH pods`, `GET leases`, `WATCH configmaps` …
fn what(r: &nodesim::apiserver::RequestRecord) -> String {
    let segs: Vec<&str> = r.path.split('/').filter(|s| !s.is_empty()).collect();
    // …/<resource> (a collection) or …/<resource>/<name>
    let resource = segs
        .iter()
        .rev()
        .find(|s| {
            matches!(
                **s,
                "pods" | "configmaps" | "secrets" | "leases" | "events" | "eviction"
            )
        })
        .copied()
        .unwrap_or("other");
    let method = if r.is_watch() {
        "WATCH"
    } else {
        r.method.as_str()
    };
    format!("{method} {resource}")
}

/// `true` when the bars hold.
pub async fn run(k: &Knobs) -> bool {
    let node = SimNode::start("bench-node", "reloadlet-bench-scale-", |_| {})
        .await
        .expect("simulated node");
    let t0 = Instant::now();
    for i in 0..k.configmaps {
        node.api
            .apply_configmap(configmap(&format!("cm-{i}"), "v1"));
    }
    for i in 0..k.pods {
        let p = node.api.create_pod(pod(i, k.configmaps));
        node.api
            .set_pod_status(NS, p.metadata.name.as_deref().unwrap(), running());
    }
    eprintln!(
        "scale: {} pods and {} ConfigMaps in the API after {:.1} s",
        k.pods,
        k.configmaps,
        t0.elapsed().as_secs_f64()
    );
    let t0 = Instant::now();
    let mut controller = Reloadlet::controller(&node, "scale-ctl");
    controller.wait_until("the leader", Duration::from_secs(60), |c| {
        c.metric("reloadlet_controller_leader") == 1.0
    });
    let ready = t0.elapsed();
    // Settle: the initial lists are processed once /readyz answers; wait for the heap to
    // stop moving (RSS unchanged over 1 s), at most 10 s.
    let mut steady = status_mib(controller.pid(), "VmRSS:");
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = status_mib(controller.pid(), "VmRSS:");
        if (now - steady).abs() < 0.25 {
            break;
        }
        steady = now;
    }
    let watches_before = node.api.open_watches();
    let before = node.api.requests().len();

    // The change: `changed` ConfigMaps at once (a release updating them together).
    let changed = k.changed.min(k.configmaps);
    let targets = (0..k.pods).filter(|i| i % k.configmaps < changed).count();
    for i in 0..changed {
        node.api
            .apply_configmap(configmap(&format!("cm-{i}"), "v2"));
    }
    let t1 = Instant::now();
    let want = targets * PATCHES_PER_NUDGE;
    let patches = || {
        node.api
            .requests()
            .iter()
            .skip(before)
            .filter(|r| r.method == "PATCH")
            .count()
    };
    let mut during = 0.0f64;
    // Until every attempt is sent or dropped: the queue empty after at least one patch.
    let drained = |c: &Reloadlet| patches() > 0 && c.metric("reloadlet_nudge_queue_depth") == 0.0;
    while patches() < want && !drained(&controller) && t1.elapsed() < Duration::from_secs(60) {
        during = during.max(status_mib(controller.pid(), "VmRSS:"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let flowed = t1.elapsed();
    // Quiet: anything that would still come (a late re-nudge, a per-object read).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = status_mib(controller.pid(), "VmRSS:");
    let peak = status_mib(controller.pid(), "VmHWM:");
    let watches = node.api.open_watches();

    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in node.api.requests().iter().skip(before) {
        *counts.entry(what(r)).or_default() += 1;
    }
    let patched = counts.get("PATCH pods").copied().unwrap_or(0);
    // Lease renewals are leader election's, on their own clock, not per object.
    let per_object: usize = counts
        .iter()
        .filter(|(w, _)| !matches!(w.as_str(), "PATCH pods" | "GET leases" | "PUT leases"))
        .map(|(_, n)| n)
        .sum();
    let one_watch_each = watches.get("Pod") == Some(&1)
        && watches.get("ConfigMap") == Some(&1)
        && watches.values().sum::<usize>() == 2
        && watches_before == watches;
    let reached = node
        .api
        .requests()
        .iter()
        .skip(before)
        .filter(|r| r.method == "PATCH")
        .map(|r| r.path.clone())
        .collect::<std::collections::HashSet<_>>()
        .len();
    let rss_ok = peak <= BAR_RSS_MIB;
    let requests_ok = per_object == 0;
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "scale: {} pods, {} ConfigMaps: controller ready and leading after {:.2} s; RSS steady \
         {steady:.1} MiB, {during:.1} MiB while nudging, {after:.1} MiB after, peak (VmHWM) \
         {peak:.1} MiB [bar <= {BAR_RSS_MIB} MiB: {}]",
        k.pods,
        k.configmaps,
        ready.as_secs_f64(),
        verdict(rss_ok)
    );
    println!(
        "scale: watches open {watches:?} (before the change {watches_before:?}) [bar one per kind: {}]",
        verdict(one_watch_each)
    );
    println!(
        "scale: {changed} ConfigMaps changed at once -> {targets} qualifying pods, {reached} of them \
         nudged; {patched} patches (at most {want}: a nudge and 2 re-nudges each, under \
         --max-nudges-per-second 20) over {:.1} s; requests after the change: {counts:?}; beyond \
         the patches and the Lease renewals: {per_object} [bar 0: {}]",
        flowed.as_secs_f64(),
        verdict(requests_ok)
    );
    println!("scale: {}", controller.series("reloadlet_nudges"));
    drop(controller);
    drop(node);
    rss_ok && one_watch_each && requests_ok
}
