//! `reloadlet.io/action: http` end to end: the real agent against the simulated node, whose
//! pods get their own loopback `status.podIP`; a local HTTP server bound to that address
//! stands in for the pod's reload endpoint (and, once, Debian's real Prometheus).

mod common;
#[path = "support/http.rs"]
mod http_support;

use common::fixtures::{configmap, pod, sandboxed};
use common::*;
use http_support::{Endpoint, Reply};
use serde_json::json;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

const NS: &str = "monitoring";

/// A free port number (the pod's endpoint listens on it at the pod's own IP).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An `http` pod whose stand-in container `app` declares port `web` = `port` and mounts
/// each of `configmaps` (volume `v-<name>`).
fn http_pod(
    node: &Node,
    name: &str,
    port: u16,
    annotations: &[(&str, &str)],
    configmaps: &[&str],
) -> k8s_openapi::api::core::v1::Pod {
    let base = node.path(name);
    let mut b = pod(NS, name).annotate("reloadlet.io/action", "http");
    if !annotations
        .iter()
        .any(|(k, _)| *k == "reloadlet.io/http-port")
    {
        b = b.annotate("reloadlet.io/http-port", "web");
    }
    for (k, v) in annotations {
        b = b.annotate(k, v);
    }
    let mut mounts = Vec::new();
    for cm in configmaps {
        let volume = format!("v-{cm}");
        b = b.configmap_volume(&volume, cm);
        mounts.push(json!({"name": volume, "mountPath": sandboxed(&base, &format!("/etc/{cm}"))}));
    }
    b.container(json!({
        "name": "app",
        "image": "app",
        "ports": [{"name": "web", "containerPort": port}],
        "volumeMounts": mounts,
    }))
    .build()
}

async fn pod_ip(node: &Node, name: &str) -> IpAddr {
    node.wait_running(NS, name).await;
    eventually(
        &format!("status.podIP of {name}"),
        Duration::from_secs(10),
        || {
            node.api
                .get_pod(NS, name)
                .and_then(|p| p.status?.pod_ip)
                .and_then(|ip| ip.parse().ok())
        },
    )
    .await
}

/// Creates the pod and its endpoint (bound to the pod's IP and `web` port).
async fn endpoint_pod(
    node: &Node,
    name: &str,
    annotations: &[(&str, &str)],
    configmaps: &[&str],
    script: Vec<Reply>,
) -> Endpoint {
    let port = free_port();
    node.api
        .create_pod(http_pod(node, name, port, annotations, configmaps));
    let ip = pod_ip(node, name).await;
    assert!(ip.is_loopback() && ip.to_string() != "127.0.0.1", "{ip}");
    Endpoint::start(SocketAddr::new(ip, port), script).await
}

fn note(node: &Node, name: &str, reason: &str) -> Option<String> {
    node.events(NS, name, reason)
        .into_iter()
        .next()
        .map(|e| e.note)
}

#[tokio::test(flavor = "multi_thread")]
async fn each_answer_of_the_endpoint_ends_as_the_issue_says() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(
        NS,
        "prometheus-config",
        &[("prometheus.yml", "v1")],
    ));
    type Scene<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<Reply>);
    let scenes: Vec<Scene> = vec![
        ("ok-0", vec![], vec![Reply::Status(200, "")]),
        (
            "put-0",
            vec![
                ("reloadlet.io/http-method", "PUT"),
                ("reloadlet.io/http-path", "/api/v2/reload?force=1"),
                ("reloadlet.io/http-body", "{}"),
            ],
            vec![],
        ),
        (
            "forbidden-0",
            vec![],
            vec![Reply::Status(403, "Lifecycle API is not enabled.\n")],
        ),
        ("flaky-0", vec![], vec![Reply::Status(500, "not yet")]),
        ("slow-0", vec![], vec![Reply::After(Duration::from_secs(3))]),
        (
            "hung-0",
            vec![],
            vec![Reply::After(Duration::from_secs(15))],
        ),
    ];
    let mut endpoints = Vec::new();
    for (name, annotations, script) in scenes {
        let ep = endpoint_pod(&node, name, &annotations, &["prometheus-config"], script).await;
        endpoints.push((name, ep));
    }
    let bad_port = endpoint_pod(
        &node,
        "bad-port-0",
        &[("reloadlet.io/http-port", "Web")],
        &["prometheus-config"],
        vec![],
    )
    .await;
    node.wait_tracked(7).await;
    let invalid = node.wait_event(NS, "bad-port-0", "InvalidAnnotation").await;
    assert!(
        invalid
            .note
            .contains("reloadlet.io/http-port: \"Web\" is neither a port number"),
        "{}",
        invalid.note
    );

    node.api.apply_configmap(configmap(
        NS,
        "prometheus-config",
        &[("prometheus.yml", "v2")],
    ));

    let ep = |name: &str| &endpoints.iter().find(|(n, _)| *n == name).unwrap().1;
    let cause = "configmap prometheus-config changed";
    // 200: one POST to the pod's IP and named port, exactly as documented.
    let ok = node.wait_event(NS, "ok-0", "Reloaded").await;
    assert_eq!(
        ok.note,
        format!("POST http://{}/-/reload → 200: {cause}", ep("ok-0").addr)
    );
    assert_eq!(ok.type_, "Normal");
    let seen = ep("ok-0").seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].target, "/-/reload");
    assert!(seen[0].body.is_empty());
    assert_eq!(seen[0].header("content-length"), Some("0"));
    assert_eq!(seen[0].header("content-type"), None);
    assert_eq!(
        seen[0].header("user-agent"),
        Some(concat!("reloadlet/", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(
        seen[0].header("host"),
        Some(ep("ok-0").addr.to_string().as_str())
    );

    // PUT, path with a query, a JSON body.
    node.wait_event(NS, "put-0", "Reloaded").await;
    let seen = ep("put-0").seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "PUT");
    assert_eq!(seen[0].target, "/api/v2/reload?force=1");
    assert_eq!(seen[0].body, b"{}");
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    assert_eq!(seen[0].header("content-length"), Some("2"));

    // 403: final at once, the body quoted.
    let failed = node.wait_event(NS, "forbidden-0", "ReloadFailed").await;
    assert_eq!(failed.type_, "Warning");
    assert_eq!(
        failed.note,
        format!(
            "POST http://{}/-/reload → 403 \"Lifecycle API is not enabled.\": {cause}",
            ep("forbidden-0").addr
        )
    );

    // 500 then 200: retried about a second later.
    node.wait_event(NS, "flaky-0", "Reloaded").await;
    let seen = ep("flaky-0").seen();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_millis(800), "retried after {gap:?}");

    // A slow reply (3 s) is waited for: one request.
    node.wait_event(NS, "slow-0", "Reloaded").await;
    assert_eq!(ep("slow-0").count(), 1);

    // No answer within 10 s: the attempt times out and is retried.
    let hung = eventually("the hung endpoint's retry", Duration::from_secs(30), || {
        note(&node, "hung-0", "Reloaded")
    })
    .await;
    let seen = ep("hung-0").seen();
    assert_eq!(seen.len(), 2, "{hung}");
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(10));

    assert!(node.events(NS, "forbidden-0", "Reloaded").is_empty());
    assert_eq!(node.events(NS, "forbidden-0", "ReloadFailed").len(), 1);
    assert_eq!(bad_port.count(), 0, "an invalid annotation: no request");
    let log = node.agent_log();
    assert!(log.contains("reloaded over HTTP"), "{log}");
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"http\",outcome=\"reloaded\"}"),
        5.0
    );
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"http\",outcome=\"reload_failed\"}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_change_replaces_a_retrying_request_and_a_deleted_pod_ends_one() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    for cm in ["rules", "settings"] {
        node.api.apply_configmap(configmap(NS, cm, &[("k", "1")]));
    }
    let retrying = endpoint_pod(&node, "retry-0", &[], &["rules", "settings"], vec![]).await;
    retrying.then_answer(503);
    let doomed = endpoint_pod(&node, "doomed-0", &[], &["rules"], vec![]).await;
    doomed.then_answer(503);
    node.wait_tracked(3).await;

    node.api
        .apply_configmap(configmap(NS, "rules", &[("k", "2")]));
    until("both endpoints asked", Duration::from_secs(15), || {
        retrying.count() >= 2 && doomed.count() >= 1
    })
    .await;
    node.api
        .apply_configmap(configmap(NS, "settings", &[("k", "2")]));
    node.api.delete_pod(NS, "doomed-0");
    let asked = doomed.count();
    // Without the cancellation the retries (1 s, 2 s, 4 s …) would go on.
    never(
        "a request to the deleted pod",
        Duration::from_secs(4),
        || doomed.count() > asked + 1,
    )
    .await;
    let after = doomed.count();
    never(
        "a request to the deleted pod",
        Duration::from_secs(4),
        || doomed.count() > after,
    )
    .await;

    // The replaced request stops; the one that replaced it succeeds and names both changes.
    retrying.then_answer(200);
    let ev = node.wait_event(NS, "retry-0", "Reloaded").await;
    assert!(
        ev.note
            .ends_with("→ 200: configmap rules, configmap settings changed"),
        "{}",
        ev.note
    );
    never("a second outcome", Duration::from_secs(3), || {
        node.events(NS, "retry-0", "Reloaded").len() > 1
            || !node.events(NS, "retry-0", "ReloadFailed").is_empty()
    })
    .await;
    assert!(node.events(NS, "doomed-0", "ReloadFailed").is_empty());
    assert!(node.events(NS, "doomed-0", "Reloaded").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_logs_the_request_and_sends_nothing() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--dry-run"]).await;
    node.api
        .apply_configmap(configmap(NS, "prometheus-config", &[("k", "1")]));
    let ep = endpoint_pod(&node, "dry-0", &[], &["prometheus-config"], vec![]).await;
    node.wait_tracked(2).await;
    node.api
        .apply_configmap(configmap(NS, "prometheus-config", &[("k", "2")]));
    let line = format!("dry-run: would send POST http://{}/-/reload", ep.addr);
    until("the dry-run log line", Duration::from_secs(15), || {
        node.agent_log().contains(&line)
    })
    .await;
    never("a request under --dry-run", Duration::from_secs(2), || {
        ep.count() > 0
    })
    .await;
    assert!(node.events(NS, "dry-0", "Reloaded").is_empty());
}

// ------------------------------------------------------------------- a real program

fn prometheus_binary() -> Option<&'static str> {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

fn prometheus_yml(job: &str) -> String {
    format!("global:\n  scrape_interval: 1h\nscrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:1']\n")
}

/// A Prometheus pod: `--web.enable-lifecycle` or not; listens on every address of its
/// (here: the host's) network at `port`, as in a pod.
fn prometheus_pod(
    node: &Node,
    name: &str,
    port: u16,
    lifecycle: bool,
    bin: &str,
) -> k8s_openapi::api::core::v1::Pod {
    let base = node.path(name);
    let conf = sandboxed(&base, "/etc/prometheus");
    let data = base.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut command = vec![
        bin.to_owned(),
        format!("--config.file={conf}/prometheus.yml"),
        format!("--web.listen-address=:{port}"),
        format!("--storage.tsdb.path={}", data.display()),
    ];
    if lifecycle {
        command.push("--web.enable-lifecycle".into());
    }
    pod(NS, name)
        .annotate("reloadlet.io/action", "http")
        .annotate("reloadlet.io/http-port", "web")
        .configmap_volume("config", "prometheus-config")
        .container(json!({
            "name": "prometheus",
            "image": "prometheus",
            "command": command,
            "ports": [{"name": "web", "containerPort": port}],
            "volumeMounts": [{"name": "config", "mountPath": conf}],
        }))
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_reloads_its_configmap_over_http_and_refuses_without_the_lifecycle_api() {
    if !root_or_skip() {
        return;
    }
    let Some(bin) = prometheus_binary() else {
        eprintln!("SKIPPED: prometheus is not installed (`apt-get install prometheus`; hack/install-test-deps.sh does it)");
        return;
    };
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(
        NS,
        "prometheus-config",
        &[("prometheus.yml", &prometheus_yml("before"))],
    ));
    let (on, off) = (free_port(), free_port());
    node.api
        .create_pod(prometheus_pod(&node, "prometheus-0", on, true, bin));
    node.api
        .create_pod(prometheus_pod(&node, "locked-0", off, false, bin));
    let ip_on = pod_ip(&node, "prometheus-0").await;
    let ip_off = pod_ip(&node, "locked-0").await;
    let (addr_on, addr_off) = (format!("{ip_on}:{on}"), format!("{ip_off}:{off}"));
    for addr in [&addr_on, &addr_off] {
        eventually("prometheus ready", Duration::from_secs(30), || {
            http_get(addr, "/-/ready").filter(|(code, _)| *code == 200)
        })
        .await;
    }
    let config = |addr: &str| http_get(addr, "/api/v1/status/config").map(|(_, b)| b);
    assert!(config(&addr_on).unwrap().contains("job_name: before"));
    node.wait_tracked(4).await;

    node.api.apply_configmap(configmap(
        NS,
        "prometheus-config",
        &[("prometheus.yml", &prometheus_yml("after"))],
    ));

    let ev = node.wait_event(NS, "prometheus-0", "Reloaded").await;
    assert_eq!(
        ev.note,
        format!("POST http://{addr_on}/-/reload → 200: configmap prometheus-config changed")
    );
    eventually(
        "prometheus serves the new configuration",
        Duration::from_secs(10),
        || config(&addr_on).filter(|c| c.contains("job_name: after")),
    )
    .await;
    let refused = node.wait_event(NS, "locked-0", "ReloadFailed").await;
    assert_eq!(
        refused.note,
        format!("POST http://{addr_off}/-/reload → 403 \"Lifecycle API is not enabled.\": configmap prometheus-config changed")
    );
    assert!(config(&addr_off).unwrap().contains("job_name: before"));
}
