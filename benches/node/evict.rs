//! The eviction burst: 100 annotated pods without a PDB, one ConfigMap swapped in all of
//! them at once; time from the last swap to the last eviction request, and the most requests
//! in flight while the API answers in 20 ms.

use crate::approaches::Agent;
use crate::NODE;
use bench_support::timed_update;
use nodesim::node::SimNode;
use serde_json::json;
use std::time::{Duration, Instant};

pub async fn evict_bench(pods: usize) {
    let s = SimNode::start(NODE, "reloadlet-bench-", |_| {})
        .await
        .unwrap();
    s.api.set_response_delay(Some(Duration::from_millis(20)));
    let template = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "burst"}, "annotations": {"reloadlet.io/action": "evict"}},
        "spec": {"containers": [{"name": "app", "image": "x", "volumeMounts": [{"name": "conf", "mountPath": s.path("mnt/conf").display().to_string()}]}],
                 "volumes": [{"name": "conf", "configMap": {"name": "burst"}}]}
    }))
    .unwrap();
    s.api.apply_configmap(
        serde_json::from_value(
            json!({"metadata": {"name": "burst", "namespace": "bench"}, "data": {"k": "v0"}}),
        )
        .unwrap(),
    );
    s.api
        .create_replicaset("bench", "burst", pods as i32, template, NODE);
    let originals: Vec<String> = s
        .api
        .pods_of_replicaset("bench", "burst")
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    for uid in &originals {
        s.kubelet
            .wait_for_pod(uid, Duration::from_secs(120))
            .expect("pod runs");
    }
    s.api.set_response_delay(None);
    let agent = Agent::start(
        &s,
        &s.kubelet_root(),
        &Agent::glibc_binary(),
        &s.path("reloadlet.log"),
        &s.path("state"),
    );
    agent.wait_metric("reloadlet_volumes_tracked", (2 * pods) as f64);
    s.api.set_response_delay(Some(Duration::from_millis(20)));
    // The kubelet re-projects the ConfigMap into every pod: all swaps land within a burst.
    let first = Instant::now();
    for uid in &originals {
        let dir = s
            .kubelet_root()
            .join("pods")
            .join(uid)
            .join("volumes/kubernetes.io~configmap/conf");
        timed_update(&dir, "k", b"v1").unwrap();
    }
    let last_swap = Instant::now();
    let t0 = Instant::now();
    let evictions = loop {
        let reqs: Vec<_> = s
            .api
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
            .collect();
        if reqs.len() >= pods {
            break reqs;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "only {} eviction requests",
            reqs.len()
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let last_sent = evictions.iter().map(|r| r.at).max().unwrap();
    let max_in_flight = evictions.iter().map(|r| r.in_flight).max().unwrap();
    println!("== evict: {pods} pods without a PDB, one ConfigMap swapped in all of them");
    println!(
        "swaps took {:.1} ms; last eviction request {:.0} ms after the last swap; at most {max_in_flight} requests in flight (limit 10, API answers in 20 ms)",
        (last_swap - first).as_secs_f64() * 1e3,
        last_sent.saturating_duration_since(last_swap).as_secs_f64() * 1e3
    );
}
