//! The tenant against `reloadlet.io/action: http` (issue #43 §3): a pod author chooses the
//! port, the network and the answer of the endpoint the privileged agent sends its request
//! to. The agent must reach only a port the pod declares, never the node's own address unless
//! the operator allows it, and quote an answer as one short line. Each test has an innocent
//! `http` pod beside the hostile one, reloaded by the same change (the positive control of
//! every "nothing reached this endpoint").

mod common;
#[path = "support/http.rs"]
mod http_support;

use common::fixtures::{configmap, pod, sandboxed};
use common::*;
use http_support::{Endpoint, Reply};
use serde_json::json;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::Duration;

const NS: &str = "tenant";
const CONFIG: &str = "app-config";

/// A free port number (an endpoint listens on it at a pod's IP, or at the node's).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An `http` pod asking for `http_port`, whose container `app` declares `web` = `declared`
/// and mounts the shared ConfigMap.
fn http_pod(
    node: &Node,
    name: &str,
    http_port: &str,
    declared: u16,
    host_network: bool,
) -> k8s_openapi::api::core::v1::Pod {
    let base = node.path(name);
    let mut p = pod(NS, name)
        .annotate("reloadlet.io/action", "http")
        .annotate("reloadlet.io/http-port", http_port)
        .configmap_volume("config", CONFIG)
        .container(json!({
            "name": "app",
            "image": "app",
            "ports": [{"name": "web", "containerPort": declared}],
            "volumeMounts": [{"name": "config", "mountPath": sandboxed(&base, "/etc/app")}],
        }))
        .build();
    if host_network {
        p.spec.as_mut().unwrap().host_network = Some(true);
    }
    p
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

/// The innocent pod: asks for its declared port by name; its endpoint listens there.
async fn innocent(node: &Node) -> Endpoint {
    let port = free_port();
    node.api
        .create_pod(http_pod(node, "innocent", "web", port, false));
    let ip = pod_ip(node, "innocent").await;
    Endpoint::start(SocketAddr::new(ip, port), []).await
}

fn change_config(node: &Node, version: &str) {
    node.api
        .apply_configmap(configmap(NS, CONFIG, &[("app.conf", version)]));
}

/// A pod whose `http-port` is a number no container declares (some other service of the
/// pod, or of the node behind it): a Warning `InvalidAnnotation` naming what is declared, and
/// no request, while the innocent pod beside it is reloaded by the same change.
#[tokio::test(flavor = "multi_thread")]
async fn a_port_the_pod_does_not_declare_is_never_asked() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    change_config(&node, "v1");
    let innocent = innocent(&node).await;
    let (declared, undeclared) = (free_port(), free_port());
    node.api.create_pod(http_pod(
        &node,
        "sneaky",
        &undeclared.to_string(),
        declared,
        false,
    ));
    let ip = pod_ip(&node, "sneaky").await;
    // What the tenant aims at: a service on the pod's IP at a port its spec never names.
    let target = Endpoint::start(SocketAddr::new(ip, undeclared), []).await;
    node.wait_tracked(2).await;

    let warning = node.wait_event(NS, "sneaky", "InvalidAnnotation").await;
    assert_eq!(warning.type_, "Warning");
    assert_eq!(
        warning.note,
        format!(
            "reloadlet.io/http-port: {undeclared} is not a port any container of the pod declares (declared: {declared}/web)"
        )
    );

    change_config(&node, "v2");
    // Positive control: the same change reloads the innocent pod.
    let ok = node.wait_event(NS, "innocent", "Reloaded").await;
    assert!(ok.note.contains(&innocent.addr.to_string()), "{}", ok.note);
    assert_eq!(innocent.count(), 1);
    never(
        "a request to the undeclared port",
        Duration::from_secs(3),
        || target.count() > 0,
    )
    .await;
    assert!(node.events(NS, "sneaky", "Reloaded").is_empty());
    assert!(node.events(NS, "sneaky", "ReloadFailed").is_empty());
    assert_eq!(node.events(NS, "sneaky", "InvalidAnnotation").len(), 1);
}

/// A `hostNetwork` pod's IP is the node's own address: its `http` action would make the agent
/// call a service of the node (here one on a port the pod even declares). Refused with a
/// Warning unless the operator starts the agent with `--http-allow-host-network`; with the
/// flag the same pod is reloaded (the refusal was the fence, not a broken setup).
#[tokio::test(flavor = "multi_thread")]
async fn a_host_network_pod_cannot_aim_the_agent_at_the_node() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    change_config(&node, "v1");
    let innocent = innocent(&node).await;
    let port = free_port();
    node.api
        .create_pod(http_pod(&node, "on-host", "web", port, true));
    let ip = pod_ip(&node, "on-host").await;
    assert_eq!(
        ip,
        IpAddr::from(nodesim::pod_ip::HOST_IP),
        "the node's own address"
    );
    // A service of the node, listening on the node's address.
    let node_service = Endpoint::start(SocketAddr::new(ip, port), []).await;
    node.wait_tracked(2).await;

    let warning = node.wait_event(NS, "on-host", "InvalidAnnotation").await;
    assert_eq!(warning.type_, "Warning");
    assert_eq!(
        warning.note,
        "reloadlet.io/action: http is refused on a hostNetwork pod: its IP is the node's own \
         address, so the request would go to a service of the node; the operator has not \
         allowed that (agent flag --http-allow-host-network)"
    );

    change_config(&node, "v2");
    node.wait_event(NS, "innocent", "Reloaded").await;
    assert_eq!(innocent.count(), 1);
    never(
        "a request to the node's service",
        Duration::from_secs(3),
        || node_service.count() > 0,
    )
    .await;
    assert!(node.events(NS, "on-host", "Reloaded").is_empty());

    // The operator allows it: the same pod, the next change, one request.
    node.stop_agent().await;
    node.start_agent(&["--http-allow-host-network"]).await;
    change_config(&node, "v3");
    let ok = node.wait_event(NS, "on-host", "Reloaded").await;
    assert_eq!(
        ok.note,
        format!("POST http://127.0.0.1:{port}/-/reload → 200: configmap {CONFIG} changed")
    );
    assert_eq!(node_service.count(), 1);
}

/// An endpoint answering 500, then 403, each with a mebibyte of forged log lines, terminal
/// escapes and NUL: the agent reads a few KiB of it, logs the retry on one line, and the
/// Warning quotes at most 200 bytes of it on one line.
#[tokio::test(flavor = "multi_thread")]
async fn a_megabyte_answer_is_one_short_quoted_line() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    change_config(&node, "v1");
    let innocent = innocent(&node).await;
    let forged: &'static str =
        "FORGED\nPOST http://10.0.0.1/-/reload → 200: configmap x changed\r\n\u{1b}[2J\0"
            .repeat((1 << 20) / 64)
            .leak();
    assert!(forged.len() >= 1 << 20);
    let port = free_port();
    node.api
        .create_pod(http_pod(&node, "loud", "web", port, false));
    let ip = pod_ip(&node, "loud").await;
    let loud = Endpoint::start(
        SocketAddr::new(ip, port),
        [Reply::Status(500, forged), Reply::Status(403, forged)],
    )
    .await;
    node.wait_tracked(2).await;

    change_config(&node, "v2");
    node.wait_event(NS, "innocent", "Reloaded").await;
    assert_eq!(innocent.count(), 1);
    let failed = node.wait_event(NS, "loud", "ReloadFailed").await;
    assert_eq!(loud.count(), 2, "the 500 retried once, the 403 final");
    let note = &failed.note;
    let head = format!(
        "POST http://{}/-/reload → 403 \"FORGED POST http://10.0.0.1/-/reload → 200: configmap x changed \u{fffd}[2J\u{fffd}FORGED",
        loud.addr
    );
    assert!(note.starts_with(&head), "{note}");
    assert!(
        note.ends_with(&format!("…\": configmap {CONFIG} changed")),
        "{note}"
    );
    assert!(note.len() < 400, "{} bytes: {note}", note.len());
    assert!(!note.contains(['\n', '\r', '\0', '\u{1b}']), "{note:?}");

    // The log: the retry after the 500 quotes the body inside its own record; no line of
    // the log is the endpoint's.
    let log = node.agent_log();
    let quoting: Vec<&str> = log.lines().filter(|l| l.contains("FORGED")).collect();
    assert!(
        quoting
            .iter()
            .any(|l| l.contains("will retry") && l.contains("error=→ 500 \"FORGED POST ")),
        "{quoting:#?}"
    );
    assert!(
        quoting
            .iter()
            .any(|l| l.contains("giving up") && l.contains("error=→ 403 \"FORGED POST ")),
        "{quoting:#?}"
    );
    for line in &quoting {
        assert!(line.len() < 2048, "a log line of {} bytes", line.len());
    }
    for line in log.lines() {
        assert!(
            !line.starts_with("FORGED") && !line.starts_with("POST http://10.0.0.1"),
            "a line of the endpoint's in the agent's log: {line}"
        );
    }
}
