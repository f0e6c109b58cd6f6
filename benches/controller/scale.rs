//! The controller at cluster scale (issue 30 §3), measured from the outside against the
//! simulated API server: `pods` Running pods spread over `nodes` nodes that exist only in the
//! API (no kubelet runs them; the controller only sees the API), `configmaps` ConfigMaps,
//! `secrets` Secrets, `env_pods` env consumers, and the controller with `--secrets` and
//! `--max-nudges-per-second rate`.
//!
//! The layout: `pods / hot` namespaces; in each, every group of 50 pods mounts one ConfigMap
//! of its own (so each of those has exactly 50 consumers) and one Secret; every pod of the
//! first namespace also mounts the ConfigMap `hot` (`hot` consumers); the first `env_pods`
//! pods read a key of another ConfigMap through `env` (env consumers: the controller follows
//! those objects' data). Every pod says `reloadlet.io/action: signal`.
//!
//! Figures, each beside its bar: ready and leading after start; RSS steady (settled after
//! the initial lists) and peak (`VmHWM` over the whole run); memory per pod and per object
//! (from three controllers: on an empty API, on the objects alone, on everything); `fifty`
//! changes of ConfigMaps with 50 consumers, one a second (first write to a consumer after
//! the update, p99); `hot` changed once (every consumer nudged, no other pod written, at
//! most `rate` patches in any second and the cap used, not idled).

use crate::procs::{quantile, status_mib, Reloadlet};
use crate::Knobs;
use nodesim::apiserver::RequestRecord;
use nodesim::node::SimNode;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const BAR_STEADY_MIB: f64 = 256.0;
const BAR_PEAK_MIB: f64 = 384.0;
const BAR_READY: Duration = Duration::from_secs(30);
const BAR_FIRST_WRITE_P99: Duration = Duration::from_millis(100);
/// Consumers of each group ConfigMap.
const GROUP: usize = 50;

/// Where every pod and object goes, and who consumes what.
struct Layout {
    namespaces: usize,
    /// ConfigMap (namespace, name) → the paths of the pods that mount it.
    consumers: BTreeMap<(String, String), BTreeSet<String>>,
    env_pods: usize,
}

fn ns(m: usize) -> String {
    format!("ns-{m}")
}

fn pod_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/{name}")
}

impl Layout {
    fn new(k: &Knobs) -> Layout {
        Layout {
            namespaces: (k.pods / k.hot).max(1),
            consumers: BTreeMap::new(),
            env_pods: 0,
        }
    }

    /// Pod `i`, shaped like a Deployment's pod: labels, its ReplicaSet as controlling owner, the
    /// injected kube-api-access volume, a container with env, resources and mounts.
    fn pod(&mut self, i: usize, k: &Knobs) -> k8s_openapi::api::core::v1::Pod {
        let n = self.namespaces;
        let (m, t) = (i % n, i / n);
        let namespace = ns(m);
        let name = format!("web-{i}");
        let path = pod_path(&namespace, &name);
        let group_cm = format!("cm-{}", m + n * (t / GROUP));
        let secret = format!("sec-{}", m + n * (t % (k.secrets / n).max(1)));
        let mut volumes = vec![
            json!({"name": "conf", "configMap": {"name": group_cm}}),
            json!({"name": "creds", "secret": {"secretName": secret}}),
            json!({"name": "kube-api-access-x7k2p", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
            ]}}),
        ];
        let mut mounts = vec![
            json!({"name": "conf", "mountPath": "/etc/app"}),
            json!({"name": "creds", "mountPath": "/etc/creds"}),
            json!({"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}),
        ];
        self.consume(&namespace, &group_cm, &path);
        if m == 0 {
            volumes.push(json!({"name": "hot", "configMap": {"name": "hot"}}));
            mounts.push(json!({"name": "hot", "mountPath": "/etc/hot"}));
            self.consume(&namespace, "hot", &path);
        }
        let mut env = vec![
            json!({"name": "MODE", "value": "production"}),
            json!({"name": "PORT", "value": "8080"}),
        ];
        // Env consumers read a ConfigMap past the group ones (none of which they touch).
        let groups = (k.pods / n).div_ceil(GROUP);
        let env_cm = m + n * (groups + t);
        if i < k.env_pods && env_cm < k.configmaps {
            env.push(json!({"name": "APP_CONF", "valueFrom": {"configMapKeyRef": {"name": format!("cm-{env_cm}"), "key": "app.conf"}}}));
            self.env_pods += 1;
        }
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": namespace,
                "labels": {"app": format!("web-{}", t / GROUP), "pod-template-hash": "5d8f7c9b6"},
                "annotations": {"reloadlet.io/action": "signal"},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": format!("web-{}-5d8f7c9b6", t / GROUP),
                    "uid": format!("00000000-0000-4000-8000-{:012}", m * 1_000_000 + t / GROUP),
                    "controller": true, "blockOwnerDeletion": true
                }]
            },
            "spec": {
                "nodeName": format!("node-{}", i % k.nodes),
                "volumes": volumes,
                "containers": [{
                    "name": "app", "image": "registry.example/app:1.2.3",
                    "env": env,
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "volumeMounts": mounts
                }]
            }
        }))
        .unwrap()
    }

    fn consume(&mut self, namespace: &str, cm: &str, path: &str) {
        self.consumers
            .entry((namespace.to_string(), cm.to_string()))
            .or_default()
            .insert(path.to_string());
    }

    /// ConfigMaps (outside the hot namespace) with exactly [`GROUP`] consumers.
    fn fifties(&self, count: usize) -> Vec<((String, String), BTreeSet<String>)> {
        self.consumers
            .iter()
            .filter(|((namespace, name), c)| {
                namespace != &ns(0) && name != "hot" && c.len() == GROUP
            })
            .take(count)
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect()
    }
}

fn running() -> k8s_openapi::api::core::v1::PodStatus {
    serde_json::from_value(json!({"phase": "Running", "podIP": "10.0.0.1"})).unwrap()
}

fn configmap(namespace: &str, name: &str, value: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "data": {"app.conf": format!("{value}\n{}", "x".repeat(512))}
    }))
    .unwrap()
}

fn secret(namespace: &str, name: &str) -> k8s_openapi::api::core::v1::Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "data": {"token": "c2VjcmV0LXRva2VuLXZhbHVl"}
    }))
    .unwrap()
}

fn is_pod_patch(r: &RequestRecord) -> bool {
    r.method == "PATCH" && r.path.contains("/pods/")
}

/// The controller's RSS once it stops moving (unchanged by a quarter MiB over 1 s), at most
/// `limit`.
async fn settled(c: &Reloadlet, limit: Duration) -> f64 {
    let t0 = Instant::now();
    let mut last = status_mib(c.pid(), "VmRSS:");
    while t0.elapsed() < limit {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = status_mib(c.pid(), "VmRSS:");
        if (now - last).abs() < 0.25 {
            return now;
        }
        last = now;
    }
    last
}

/// Waits until the controller sends nothing but watches and Lease renewals for `quiet`;
/// returns how many requests came meanwhile.
async fn quiet(node: &SimNode, quiet: Duration, limit: Duration) -> usize {
    let start = node.api.request_count();
    let t0 = Instant::now();
    let mut seen = start;
    let mut still = Instant::now();
    while t0.elapsed() < limit && still.elapsed() < quiet {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = node.api.request_count();
        let busy = node
            .api
            .requests_since(seen)
            .iter()
            .any(|r| !r.is_watch() && !r.path.contains("/leases"));
        if busy {
            still = Instant::now();
        }
        seen = now;
    }
    seen - start
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// `true` when the bars hold.
pub async fn run(k: &Knobs) -> bool {
    let node = SimNode::start("bench-node", "reloadlet-bench-scale-", |_| {})
        .await
        .expect("simulated node");
    let args = vec![
        "--secrets".to_string(),
        "--max-nudges-per-second".to_string(),
        k.rate.to_string(),
    ];
    let unelected = |extra: &[String]| [&["--leader-elect=false".to_string()], extra].concat();
    let mut layout = Layout::new(k);
    let n = layout.namespaces;

    // The controller's floor (an empty API), then with the objects alone.
    let c0 = Reloadlet::controller_with(&node, "scale-empty", &unelected(&args));
    let r0 = settled(&c0, Duration::from_secs(10)).await;
    drop(c0);
    let t0 = Instant::now();
    for i in 0..k.configmaps {
        node.api
            .apply_configmap(configmap(&ns(i % n), &format!("cm-{i}"), "v1"));
    }
    node.api.apply_configmap(configmap(&ns(0), "hot", "v1"));
    for i in 0..k.secrets {
        node.api
            .apply_secret(secret(&ns(i % n), &format!("sec-{i}")));
    }
    let objects = k.configmaps + 1 + k.secrets;
    let c1 = Reloadlet::controller_with(&node, "scale-objects", &unelected(&args));
    let r1 = settled(&c1, Duration::from_secs(20)).await;
    drop(c1);
    for i in 0..k.pods {
        let p = node.api.create_pod(layout.pod(i, k));
        node.api
            .set_pod_status(&ns(i % n), p.metadata.name.as_deref().unwrap(), running());
    }
    eprintln!(
        "scale: {} pods over {} nodes in {n} namespaces, {} ConfigMaps, {} Secrets, {} env \
         consumers in the API after {:.1} s",
        k.pods,
        k.nodes,
        k.configmaps + 1,
        k.secrets,
        layout.env_pods,
        t0.elapsed().as_secs_f64()
    );

    // Start: ready (/readyz: every first list in) and leading (the Lease).
    let started = node.api.request_count();
    let t0 = Instant::now();
    let mut controller = Reloadlet::controller_with(&node, "scale-ctl", &args);
    controller.wait_until("the leader", Duration::from_secs(120), |c| {
        c.metric("reloadlet_controller_leader") == 1.0
    });
    let ready = t0.elapsed();
    // The leader's start-up work (one GET of each env consumer's object, their baselines),
    // then the heap at rest.
    quiet(&node, Duration::from_secs(3), Duration::from_secs(300)).await;
    let startup_took = t0.elapsed();
    let steady = settled(&controller, Duration::from_secs(20)).await;
    let start_log = node.api.requests_since(started);
    let startup = start_log
        .iter()
        .filter(|r| !r.is_watch() && !r.path.contains("/leases"))
        .count();
    let lists = start_log
        .iter()
        .filter(|r| r.method == "GET" && !r.is_watch() && r.query.contains("limit="))
        .count();
    let streams = start_log
        .iter()
        .filter(|r| r.is_watch() && r.query.contains("sendInitialEvents=true") && r.status == 200)
        .count();
    let watches = node.api.open_watches();

    // 50 consumers: one change a second, the first write to one of its consumers.
    let fifties = layout.fifties(k.fifty);
    let fifty_from = node.api.request_count();
    let mut firsts = Vec::new();
    let mut missed = 0usize;
    for ((namespace, name), consumers) in &fifties {
        let before = node.api.request_count();
        let t = Instant::now();
        node.api.apply_configmap(configmap(namespace, name, "v2"));
        let mut first = None;
        while first.is_none() && t.elapsed() < Duration::from_secs(5) {
            first = node
                .api
                .requests_since(before)
                .into_iter()
                .find(|r| is_pod_patch(r) && consumers.contains(&r.path))
                .map(|r| r.at.saturating_duration_since(t));
            if first.is_none() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        match first {
            Some(d) => firsts.push(d),
            None => missed += 1,
        }
        tokio::time::sleep_until((t + Duration::from_secs(1)).into()).await;
    }
    quiet(&node, Duration::from_secs(4), Duration::from_secs(60)).await;
    let fifty_targets: BTreeSet<&String> = fifties.iter().flat_map(|(_, c)| c).collect();
    let fifty_log = node.api.requests_since(fifty_from);
    let fifty_stray = fifty_log
        .iter()
        .filter(|r| is_pod_patch(r) && !fifty_targets.contains(&r.path))
        .count();
    firsts.sort();

    // The hot ConfigMap: every consumer, at the cap, nothing else.
    let hot = layout.consumers[&(ns(0), "hot".to_string())].clone();
    let before = node.api.request_count();
    let t = Instant::now();
    node.api.apply_configmap(configmap(&ns(0), "hot", "v2"));
    let deadline = Duration::from_secs((hot.len() / k.rate) as u64 + 30);
    let mut during = 0.0f64;
    let reached_all = |log: &[RequestRecord]| {
        let reached: BTreeSet<&String> = log
            .iter()
            .filter(|r| is_pod_patch(r) && hot.contains(&r.path))
            .map(|r| &r.path)
            .collect();
        reached.len() == hot.len()
    };
    while t.elapsed() < deadline && !reached_all(&node.api.requests_since(before)) {
        during = during.max(status_mib(controller.pid(), "VmRSS:"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The re-nudges of the last pods reached.
    quiet(&node, Duration::from_secs(4), Duration::from_secs(60)).await;
    let log = node.api.requests_since(before);
    let patches: Vec<&RequestRecord> = log.iter().filter(|r| is_pod_patch(r)).collect();
    let reached: BTreeSet<&String> = patches
        .iter()
        .filter(|r| hot.contains(&r.path))
        .map(|r| &r.path)
        .collect();
    let stray = patches.iter().filter(|r| !hot.contains(&r.path)).count();
    let times: Vec<Instant> = patches.iter().map(|r| r.at).collect();
    let busiest = (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|u| **u < times[i] + Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let span = match (times.first(), times.last()) {
        (Some(a), Some(b)) => b.saturating_duration_since(*a),
        _ => Duration::ZERO,
    };
    // Evenly spaced: n patches span n - 1 intervals.
    let mean_rate = patches.len().saturating_sub(1) as f64 / span.as_secs_f64().max(1e-9);
    let other: BTreeMap<String, usize> = log
        .iter()
        .filter(|r| !is_pod_patch(r) && !r.is_watch() && !r.path.contains("/leases"))
        .fold(BTreeMap::new(), |mut m, r| {
            *m.entry(format!("{} {}", r.method, r.path)).or_default() += 1;
            m
        });
    let after = status_mib(controller.pid(), "VmRSS:");
    let peak = status_mib(controller.pid(), "VmHWM:");
    let series = controller.series("reloadlet_nudges");
    drop(controller);

    let kib = |mib: f64, count: usize| mib * 1024.0 / count.max(1) as f64;
    let per_pod = kib(steady - r1, k.pods);
    let per_object = kib(r1 - r0, objects);
    let ready_ok = ready <= BAR_READY;
    let steady_ok = steady <= BAR_STEADY_MIB;
    let peak_ok = peak <= BAR_PEAK_MIB;
    let p99 = quantile(&firsts, 0.99);
    let fifty_ok = missed == 0 && p99 <= BAR_FIRST_WRITE_P99 && fifty_stray == 0;
    // Measured where the patches arrive (the API server's clock): the controller spaces
    // them exactly, the way there adds a few milliseconds of jitter.
    let rate = k.rate as f64;
    let paced = busiest as f64 <= rate * 1.05 && (mean_rate - rate).abs() <= rate * 0.05;
    let hot_ok = reached.len() == hot.len() && stray == 0 && paced;
    let one_watch_each = ["Pod", "ConfigMap", "Secret"]
        .iter()
        .all(|kind| watches.get(kind) == Some(&1));

    println!(
        "scale: {} pods ({} nodes), {} ConfigMaps, {} Secrets, {} env consumers; controller \
         --secrets --max-nudges-per-second {}",
        k.pods,
        k.nodes,
        k.configmaps + 1,
        k.secrets,
        layout.env_pods,
        k.rate
    );
    println!(
        "scale: ready and leading after {:.2} s [bar <= {} s: {}]; first lists: {streams} \
         streaming, {lists} paged requests; watches open {watches:?} [one per kind: {}]; \
         start-up work done after {:.1} s ({startup} requests besides watches and the Lease: the \
         env consumers' GETs and baselines)",
        ready.as_secs_f64(),
        BAR_READY.as_secs(),
        verdict(ready_ok),
        verdict(one_watch_each),
        startup_took.as_secs_f64()
    );
    println!(
        "scale: RSS steady {steady:.1} MiB [bar <= {BAR_STEADY_MIB} MiB: {}], peak (VmHWM) \
         {peak:.1} MiB [bar <= {BAR_PEAK_MIB} MiB: {}]; {during:.1} MiB while nudging, \
         {after:.1} MiB after",
        verdict(steady_ok),
        verdict(peak_ok)
    );
    println!(
        "scale: memory per pod {per_pod:.2} KiB, per object {per_object:.2} KiB [recorded] \
         (steady RSS: {r0:.1} MiB on an empty API, {r1:.1} MiB with the {objects} objects \
         alone, {steady:.1} MiB with the pods too)"
    );
    println!(
        "scale: {} changes of a ConfigMap with {GROUP} consumers: first write p50 {}, p99 {}, \
         max {}, {missed} without a write in 5 s, {fifty_stray} writes to other pods [bar p99 \
         <= {}, none missed, 0 other: {}]",
        fifties.len(),
        ms(quantile(&firsts, 0.5)),
        ms(p99),
        ms(firsts.last().copied().unwrap_or_default()),
        ms(BAR_FIRST_WRITE_P99),
        verdict(fifty_ok)
    );
    println!(
        "scale: 1 ConfigMap with {} consumers: {} of them nudged, {stray} writes to pods that \
         do not consume it, {} patches over {:.1} s; at most {busiest} in any 1 s, mean \
         {mean_rate:.1}/s vs --max-nudges-per-second {} [bar every consumer, 0 other, the \
         flag within 5% in every second and on average (at the API server): {}]; other \
         requests: {other:?}",
        hot.len(),
        reached.len(),
        patches.len(),
        span.as_secs_f64(),
        k.rate,
        verdict(hot_ok)
    );
    println!("scale: {series}");
    drop(node);
    ready_ok && steady_ok && peak_ok && fifty_ok && hot_ok && one_watch_each
}
