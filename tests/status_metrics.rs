//! `reloadlet_consumers` end to end on the simulated node (issue #46 §1: "the same facts as
//! metrics"): the controller's /metrics counts, by namespace and state, what
//! `reloadlet status` shows for the same pods — before a change (pods started before the data
//! was first seen, its managedFields reset, and without a record: pending; not reloaded for the unannotated pod; cannot
//! for the env and the subPath consumer with a signal action), and after it, once the agent
//! has signalled one pod and failed the other's HTTP reload (current, failed, not reloaded,
//! cannot) — and per object with `--status-metrics-per-object`.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/http.rs"]
mod http_support;

use common::fixtures::{configmap, pod, secret};
use common::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const NS: &str = "shop";
const STATES: [&str; 6] = [
    "current",
    "pending",
    "failed",
    "not_reloaded",
    "cannot",
    "unknown",
];

/// The counts `reloadlet status configmap/app -o json` shows, by metric state name.
fn cli_counts(kubeconfig: &Path) -> BTreeMap<String, u64> {
    let out = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args([
            "status",
            "configmap/app",
            "-n",
            NS,
            "-o",
            "json",
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let mut counts: BTreeMap<String, u64> = STATES.iter().map(|s| (s.to_string(), 0)).collect();
    for c in v["consumers"].as_array().unwrap() {
        *counts
            .entry(c["state"].as_str().unwrap().replace(' ', "_"))
            .or_default() += 1;
    }
    counts
}

/// The controller's `reloadlet_consumers{namespace="shop",…}`, every state.
fn metric_counts(controller: &controller_process::ControllerProcess) -> BTreeMap<String, u64> {
    STATES
        .iter()
        .map(|s| {
            let series = format!("reloadlet_consumers{{namespace=\"{NS}\",state=\"{s}\"}}");
            (s.to_string(), controller.metric(&series) as u64)
        })
        .collect()
}

fn want(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = STATES.iter().map(|s| (s.to_string(), 0)).collect();
    for (s, n) in pairs {
        m.insert(s.to_string(), *n);
    }
    m
}

/// Polls the controller's counts until they are `want` (panics with them, what `status`
/// says and the controller's log after `within`).
async fn counts_become(
    controller: &controller_process::ControllerProcess,
    kubeconfig: &Path,
    want: &BTreeMap<String, u64>,
    within: Duration,
) {
    if common::within(within, || metric_counts(controller) == *want).await {
        return;
    }
    let now = metric_counts(controller);
    let body = http_get(&controller.listen, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let series: Vec<&str> = body.lines().filter(|l| l.contains("consumers")).collect();
    let cli = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["status", "configmap/app", "-n", NS, "--kubeconfig"])
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    panic!(
        "counts {now:?}, want {want:?}\n{series:#?}\nstatus says:\n{}\n{}",
        String::from_utf8_lossy(&cli.stdout),
        controller.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_counts_consumers_by_state_as_status_shows_them() {
    if !root_or_skip() {
        return;
    }
    let wait = Duration::from_secs(20);
    // The recount comes 10 s after a change; the publish and the agent's record before it.
    let recount = Duration::from_secs(45);
    let mut node = Node::start(NodeOptions::default()).await;
    // The controller's key where it keeps it, read by the agent too.
    let key_bytes = String::from_utf8(vec![9u8; 32]).unwrap();
    node.api.apply_secret(secret(
        "reloadlet-system",
        "reloadlet-controller-key",
        &[("key", &key_bytes)],
    ));
    node.start_agent(&[
        "--pod-namespace",
        "reloadlet-system",
        "--pod-name",
        "reloadlet-x",
    ])
    .await;
    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v1")]));
    // Its managedFields reset (`[]`, as a client may): they no longer tell when the data was
    // written, so the controller dates it from when it first sees it and the pods below
    // started before that (tests/status_since.rs has pods that read current from
    // managedFields).
    let mut reset = configmap(NS, "app", &[("app.conf", "v1")]);
    reset.metadata.managed_fields = Some(Vec::new());
    node.api.apply_configmap(reset);
    let (sig, plain) = (node.path("app.sig"), node.path("plain.sig"));
    node.api.create_pod(
        pod(NS, "signal-0")
            .signal()
            .configmap_volume("config", "app")
            .recorder("app", &sig, &[("config", "/etc/app")])
            .build(),
    );
    // No reloadlet.io/action: not reloaded.
    node.api.create_pod(
        pod(NS, "plain-0")
            .configmap_volume("config", "app")
            .recorder("app", &plain, &[("config", "/etc/app")])
            .build(),
    );
    // An http pod whose endpoint refuses the reload (404: failed at once).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    node.api.create_pod(
        pod(NS, "http-0")
            .annotate("reloadlet.io/action", "http")
            .annotate("reloadlet.io/http-port", "web")
            .configmap_volume("config", "app")
            .container(json!({"name": "app", "image": "app",
                "ports": [{"name": "web", "containerPort": port}],
                "volumeMounts": [{"name": "config", "mountPath": common::fixtures::sandboxed(&node.path("http-0"), "/etc/app")}]}))
            .build(),
    );
    // Through env only, with a signal action: nothing can bring it the new data (cannot).
    node.api.create_pod(
        pod(NS, "env-0")
            .signal()
            .container(json!({"name": "app", "image": "app",
                "envFrom": [{"configMapRef": {"name": "app"}}]}))
            .build(),
    );
    // Through subPath only, with a signal action: the kubelet never updates it (cannot).
    node.api.create_pod(
        pod(NS, "subpath-0")
            .signal()
            .configmap_volume("config", "app")
            .container(json!({"name": "app", "image": "app",
                "volumeMounts": [{"name": "config", "subPath": "app.conf",
                    "mountPath": common::fixtures::sandboxed(&node.path("subpath-0"), "/etc/app.conf")}]}))
            .build(),
    );
    for p in ["signal-0", "plain-0", "http-0", "env-0", "subpath-0"] {
        node.wait_running(NS, p).await;
    }
    let ip = eventually("status.podIP of http-0", wait, || {
        node.api
            .get_pod(NS, "http-0")
            .and_then(|p| p.status?.pod_ip)
            .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
    })
    .await;
    let _endpoint = http_support::Endpoint::start(
        std::net::SocketAddr::new(ip, port),
        std::iter::repeat_n(http_support::Reply::Status(404, "no such endpoint"), 10),
    )
    .await;
    eventually("recorders ready", wait, || {
        (recorder_ready(&sig) && recorder_ready(&plain)).then_some(())
    })
    .await;
    node.wait_tracked(3).await;

    let controller = controller_process::ControllerProcess::start(
        &node,
        &["--leader-elect=false", "--status-metrics-per-object"],
        &[],
    )
    .await;
    let admin = node.kubeconfig();
    // Before the change: every pod started before the controller first saw the data, none
    // has a record: the two with an action wait, the plain one is not reloaded.
    let before = want(&[("pending", 2), ("not_reloaded", 1), ("cannot", 2)]);
    counts_become(&controller, &admin, &before, recount).await;
    assert_eq!(cli_counts(&admin), before, "the CLI shows the same");

    // The change: the agent signals signal-0 and records it, http-0's reload fails.
    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v2")]));
    eventually("SIGHUP", wait, || {
        (signals_in(&sig) == ["SIGHUP"]).then_some(())
    })
    .await;
    let after = want(&[
        ("current", 1),
        ("failed", 1),
        ("not_reloaded", 1),
        ("cannot", 2),
    ]);
    counts_become(&controller, &admin, &after, recount).await;
    assert_eq!(cli_counts(&admin), after, "the CLI shows the same");
    // Per object (--status-metrics-per-object).
    let per_object = |state: &str| {
        controller.metric(&format!(
            "reloadlet_object_consumers{{namespace=\"{NS}\",kind=\"configmap\",name=\"app\",state=\"{state}\"}}"
        ))
    };
    assert_eq!(
        (
            per_object("current"),
            per_object("failed"),
            per_object("pending")
        ),
        (1.0, 1.0, 0.0),
        "{}",
        controller.log()
    );
    assert!(
        node.api.unexpected_forbidden().is_empty(),
        "{:?}",
        node.api.unexpected_forbidden()
    );
}
