//! ConfigMap apply → SIGHUP under the kubelet's real sync timing, with the controller, moved
//! from tests/controller.rs.

use crate::common::fixtures::{configmap, pod};
use crate::common::*;
use crate::controller_process::ControllerProcess as Controller;
use std::time::{Duration, Instant};

const NS: &str = "shop";
const WAIT: Duration = Duration::from_secs(15);

/// Not a pass/fail test: ConfigMap apply → SIGHUP with the kubelet's real sync timing, for
/// choosing the agent's `--debounce` (`RELOADLET_MEASURE_DEBOUNCE`, default 1s;
/// `RELOADLET_MEASURE_SAMPLES`, default 10).
pub async fn apply_to_sighup() {
    let debounce = std::env::var("RELOADLET_MEASURE_DEBOUNCE").unwrap_or_else(|_| "1s".into());
    let samples: usize = std::env::var("RELOADLET_MEASURE_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut node = Node::start_faithful(Duration::from_secs(60)).await;
    node.start_agent(&["--debounce", &debounce]).await;
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v0")]));
    let out = node.path("m.sig");
    node.api.create_pod(
        pod(NS, "m")
            .signal()
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &out, &[("conf", "/etc/app")])
            .build(),
    );
    node.wait_running(NS, "m").await;
    eventually("recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    eventually("Running in the API", WAIT, || {
        (node
            .api
            .get_pod(NS, "m")
            .and_then(|p| p.status?.phase)
            .as_deref()
            == Some("Running"))
        .then_some(())
    })
    .await;
    node.wait_tracked(2).await;
    let controller = Controller::start(
        &node,
        &[],
        &[("POD_NAMESPACE", "reloadlet-system"), ("POD_NAME", "m")],
    )
    .await;
    eventually("leader", WAIT, || {
        (controller.metric("reloadlet_controller_leader") == 1.0).then_some(())
    })
    .await;
    let mut took = Vec::new();
    for i in 1..=samples {
        let before = signals_in(&out).len();
        let t = Instant::now();
        node.api
            .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", &format!("v{i}"))]));
        eventually("SIGHUP", Duration::from_secs(100), || {
            (signals_in(&out).len() > before).then_some(())
        })
        .await;
        took.push(t.elapsed());
        // Past the re-nudges (1 s, 3 s) before the next change.
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    took.sort();
    let pct = |p: f64| took[((took.len() as f64 * p).ceil() as usize).clamp(1, took.len()) - 1];
    eprintln!(
        "debounce {debounce}: {} samples, apply -> SIGHUP p50 {:?} p99 {:?} max {:?}",
        took.len(),
        pct(0.5),
        pct(0.99),
        took.last().unwrap()
    );
    controller.stop().await;
}
