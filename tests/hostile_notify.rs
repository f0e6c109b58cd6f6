//! A tenant writing into the operator's channel, end to end: the real agent on the
//! simulated node, `--notify-format slack` pointed at a local server standing in for Slack
//! (the recording server of `http_support`, which also stands in for the pods' endpoints).
//! A tenant's pod (`reloadlet.io/action: http`) answers its reload with a body full of Slack
//! mentions, links and formatting; reloadlet quotes it in `ReloadFailed` and its
//! notification. The notification must carry that body as data (issue #43, "Nothing leaks,
//! nothing is impersonated"), while a well-behaved pod's failure arrives exactly as before.

mod common;
#[path = "support/http.rs"]
mod http_support;

use common::fixtures::{configmap, pod, sandboxed};
use common::*;
use http_support::{Endpoint, Reply};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::Duration;

const NS: &str = "tenant";

/// What the tenant's endpoint answers: a 403 is final at once (a 5xx would be retried for
/// minutes first). Mentions (`<!channel>`, `<!here|here>`, a user, a user group), a
/// disguised link, a Markdown link, Google Chat's mention of everyone, formatting, and a
/// forged second line.
const HOSTILE_BODY: &str = "<!channel> <!here|here> <@U024BE7LH> <!subteam^SAZ94GDB8> \
    *URGENT* re-authenticate at <https://evil.example/login|the cluster console> or \
    [here](https://evil.example) <users/all> `rm -rf`\nReloaded: tenant/web-0 on node-a";

/// What a well-behaved program answers (Prometheus without `--web.enable-lifecycle`).
const BENIGN_BODY: &str = "Lifecycle API is not enabled.\n";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An `http` pod whose container declares port `web` = `port` and mounts `configmap`.
fn http_pod(node: &Node, name: &str, port: u16, cm: &str) -> k8s_openapi::api::core::v1::Pod {
    let mount = sandboxed(&node.path(name), &format!("/etc/{cm}"));
    pod(NS, name)
        .annotate("reloadlet.io/action", "http")
        .annotate("reloadlet.io/http-port", "web")
        .configmap_volume("config", cm)
        .container(json!({
            "name": "app",
            "image": "app",
            "ports": [{"name": "web", "containerPort": port}],
            "volumeMounts": [{"name": "config", "mountPath": mount}],
        }))
        .build()
}

/// Creates the pod and its endpoint, bound to the pod's IP and `web` port.
async fn endpoint_pod(node: &Node, name: &str, cm: &str, body: &'static str) -> Endpoint {
    let port = free_port();
    node.api.create_pod(http_pod(node, name, port, cm));
    node.wait_running(NS, name).await;
    let ip: IpAddr = eventually(
        &format!("status.podIP of {name}"),
        Duration::from_secs(10),
        || {
            node.api
                .get_pod(NS, name)
                .and_then(|p| p.status?.pod_ip)
                .and_then(|ip| ip.parse().ok())
        },
    )
    .await;
    Endpoint::start(SocketAddr::new(ip, port), [Reply::Status(403, body)]).await
}

/// The `text` of each Slack payload received, with the whole payload.
fn slack_texts(slack: &Endpoint) -> Vec<(String, Value)> {
    slack
        .seen()
        .iter()
        .map(|req| {
            let v: Value = serde_json::from_slice(&req.body).unwrap();
            let text = v["attachments"][0]["text"].as_str().unwrap().to_owned();
            (text, v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_answer_reaches_slack_quoted_and_a_plain_one_unchanged() {
    if !root_or_skip() {
        return;
    }
    // Answers 200 "ok" to every request, as Slack does.
    let slack = Endpoint::start("127.0.0.1:0".parse().unwrap(), []).await;
    let url = format!("http://{}/services/T000/B000/XXXX", slack.addr);
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--notify-url", &url, "--notify-format", "slack"])
        .await;
    // Two ConfigMaps: dedupe keys on the source object, so each failure is its own message.
    for cm in ["evil-config", "prom-config"] {
        node.api.apply_configmap(configmap(NS, cm, &[("k", "1")]));
    }
    let evil = endpoint_pod(&node, "evil-0", "evil-config", HOSTILE_BODY).await;
    let prom = endpoint_pod(&node, "prom-0", "prom-config", BENIGN_BODY).await;
    node.wait_tracked(2).await;

    for cm in ["evil-config", "prom-config"] {
        node.api.apply_configmap(configmap(NS, cm, &[("k", "2")]));
    }
    let evil_note = node.wait_event(NS, "evil-0", "ReloadFailed").await.note;
    let prom_note = node.wait_event(NS, "prom-0", "ReloadFailed").await.note;
    until("both notifications", Duration::from_secs(15), || {
        slack.count() >= 2
    })
    .await;
    assert_eq!((evil.count(), prom.count()), (1, 1));
    // The tenant's text did reach reloadlet: the Event (data for the API) quotes it.
    assert!(evil_note.contains("<!channel>"), "{evil_note}");

    let texts = slack_texts(&slack);
    let text_of = |pod: &str| {
        let prefix = format!("ReloadFailed: {NS}/{pod} on {NODE} (http; ");
        texts
            .iter()
            .find(|(t, _)| t.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no notification for {pod}: {texts:?}"))
            .clone()
    };

    // Positive control: a plain answer arrives exactly as it always did.
    let (prom_text, prom_payload) = text_of("prom-0");
    assert_eq!(
        prom_text,
        format!("ReloadFailed: {NS}/prom-0 on {NODE} (http; configmap prom-config): {prom_note}")
    );
    assert_eq!(
        prom_payload,
        json!({"attachments": [{"author_name": "reloadlet", "color": "danger", "text": prom_text}]})
    );

    // The tenant's answer: quoted, not live.
    let (evil_text, evil_payload) = text_of("evil-0");
    let prefix =
        format!("ReloadFailed: {NS}/evil-0 on {NODE} (http; configmap evil-config): `POST http://");
    assert!(evil_text.starts_with(&prefix), "{evil_text}");
    // No `<…>` survives: no @channel, @here, user or group mention, no disguised link, no
    // Google Chat `<users/all>`.
    assert!(!evil_text.contains(['<', '>']), "{evil_text}");
    for quoted in [
        "&lt;!channel&gt;",
        "&lt;!here|here&gt;",
        "&lt;@U024BE7LH&gt;",
        "&lt;!subteam^SAZ94GDB8&gt;",
        "&lt;https://evil.example/login|the cluster console&gt;",
        "&lt;users/all&gt;",
    ] {
        assert!(evil_text.contains(quoted), "{quoted} in {evil_text}");
    }
    // The whole message is one code span (the body holds `*`): its backticks were turned to
    // `ˋ`, so nothing in it is bold, italic or code of the tenant's making.
    assert!(evil_text.ends_with('`'), "{evil_text}");
    assert_eq!(evil_text.matches('`').count(), 2, "{evil_text}");
    assert!(evil_text.contains("ˋrm -rfˋ"), "{evil_text}");
    // The forged line stays inside this one: no line break, one attachment.
    assert!(!evil_text.contains(['\n', '\r']), "{evil_text:?}");
    assert_eq!(evil_payload["attachments"].as_array().unwrap().len(), 1);
    assert!(evil_payload.get("link_names").is_none());

    // And the forged "Reloaded" line was no notification of its own.
    never("a third notification", Duration::from_secs(2), || {
        slack.count() > 2
    })
    .await;
    assert_eq!(slack.count(), 2);
    assert!(slack
        .seen()
        .iter()
        .all(|req| req.method == "POST" && req.header("content-type") == Some("application/json")));
}
