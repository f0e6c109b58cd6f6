//! Projected volumes that mix sources, end to end on a simulated node: only a ConfigMap/Secret
//! change acts; a label edit (downwardAPI), a token refresh and a cluster CA rotation
//! (`kube-root-ca.crt`) never do, unless the pod names the CA; a pod certificate rotation
//! (KEP-4317) acts only for a pod that names the signer.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use nodesim::projection::root_ca_configmap;
use serde_json::json;
use std::time::Duration;

const NS: &str = "shop";
const WAIT: Duration = Duration::from_secs(15);

/// `app-config` and the pod's labels in one projected volume.
fn labels_volume() -> serde_json::Value {
    json!({"name": "mixed", "projected": {"sources": [
        {"configMap": {"name": "app-config"}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}
    ]}})
}

/// A Vault token and `app-config` in one projected volume.
fn token_volume() -> serde_json::Value {
    json!({"name": "mixed", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 3600, "path": "vault-token"}},
        {"configMap": {"name": "app-config", "items": [{"key": "app.conf", "path": "conf/app.conf"}]}}
    ]}})
}

/// An mTLS key and chain from a pod certificate signer and `app-config` in one projected volume.
fn certificate_volume() -> serde_json::Value {
    json!({"name": "mixed", "projected": {"sources": [
        {"configMap": {"name": "app-config"}},
        {"podCertificate": {"signerName": "example.com/mtls", "keyType": "ED25519",
            "credentialBundlePath": "tls/bundle.pem"}}
    ]}})
}

async fn mixed_pod(node: &mut Node, name: &str, volume: serde_json::Value) -> std::path::PathBuf {
    mixed_pod_with(node, name, volume, &[]).await
}

async fn mixed_pod_with(
    node: &mut Node,
    name: &str,
    volume: serde_json::Value,
    annotations: &[(&str, &str)],
) -> std::path::PathBuf {
    node.api
        .apply_configmap(configmap(NS, "app-config", &[("app.conf", "v1")]));
    let out = node.path(&format!("{name}.sig"));
    let mut builder = pod(NS, name).signal().label("tier", "web");
    for (k, v) in annotations {
        builder = builder.annotate(k, v);
    }
    node.api.create_pod(
        builder
            .volume(volume)
            .recorder("app", &out, &[("mixed", "/etc/app")])
            .build(),
    );
    node.wait_running(NS, name).await;
    eventually("recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    // mixed + the injected kube-api-access volume
    node.wait_tracked(2).await;
    out
}

fn swaps(node: &Node) -> f64 {
    node.metric("reloadlet_volume_swaps_total{plugin=\"projected\"}")
}

/// The one `Signaled` Event names only the ConfigMap.
async fn one_signal_naming_app_config(node: &Node, name: &str, out: &std::path::Path) {
    node.api
        .apply_configmap(configmap(NS, "app-config", &[("app.conf", "v2")]));
    eventually("the ConfigMap change signals", WAIT, || {
        (signals_in(out) == ["SIGHUP"]).then_some(())
    })
    .await;
    let event = node.wait_event(NS, name, "Signaled").await;
    assert!(
        event.note.ends_with(": configmap app-config changed"),
        "{}",
        event.note
    );
    never("a second signal", AGENT_QUIET, || signals_in(out).len() > 1).await;
    assert_eq!(node.events(NS, name, "Signaled").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_label_edit_never_acts_a_configmap_change_in_the_same_volume_acts_once() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = mixed_pod(&mut node, "web", labels_volume()).await;

    let before = swaps(&node);
    let mut p = node.api.get_pod(NS, "web").unwrap();
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("tier".into(), "canary".into());
    node.api.replace_pod(p);
    // The kubelet re-projects at once: the downwardAPI file changes, `..data` swaps.
    eventually("the label edit swapped the volume", WAIT, || {
        (swaps(&node) > before).then_some(())
    })
    .await;
    never("a signal on a label edit", AGENT_QUIET, || {
        !signals_in(&out).is_empty()
    })
    .await;
    assert!(node.all_events().is_empty(), "{:?}", node.all_events());

    one_signal_naming_app_config(&node, "web", &out).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_refresh_never_acts_a_configmap_change_in_the_token_volume_acts_once() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = mixed_pod(&mut node, "vault-client", token_volume()).await;

    let before = swaps(&node);
    node.kubelet.rotate_tokens();
    // The vault token volume and kube-api-access both swap.
    eventually("the token refresh swapped both volumes", WAIT, || {
        (swaps(&node) >= before + 2.0).then_some(())
    })
    .await;
    never("a signal on a token refresh", AGENT_QUIET, || {
        !signals_in(&out).is_empty()
    })
    .await;

    one_signal_naming_app_config(&node, "vault-client", &out).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_certificate_rotation_acts_only_for_a_pod_that_names_the_signer() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let plain = mixed_pod(&mut node, "plain", certificate_volume()).await;
    let opted = mixed_pod_with(
        &mut node,
        "opted",
        certificate_volume(),
        &[("reloadlet.io/pod-certificates", "example.com/mtls")],
    )
    .await;
    // Two mixed volumes and two kube-api-access volumes.
    node.wait_tracked(4).await;
    let bundle = |name: &str| {
        let uid = node.uid(NS, name);
        let file = node
            .kubelet_root()
            .join("pods")
            .join(uid)
            .join("volumes/kubernetes.io~projected/mixed/tls/bundle.pem");
        std::fs::read_to_string(file).expect("the kubelet projected the credential bundle")
    };
    let before = bundle("opted");
    assert!(
        before.starts_with("-----BEGIN PRIVATE KEY-----"),
        "{before}"
    );

    node.kubelet.rotate_pod_certificates();
    eventually("the pod that names the signer is signalled", WAIT, || {
        (signals_in(&opted) == ["SIGHUP"]).then_some(())
    })
    .await;
    assert_ne!(bundle("opted"), before, "a new key and chain");
    let event = node.wait_event(NS, "opted", "Signaled").await;
    assert!(
        event
            .note
            .ends_with(": pod certificate example.com/mtls changed"),
        "{}",
        event.note
    );
    never(
        "a signal on a rotation to a pod that did not opt in",
        AGENT_QUIET,
        || !signals_in(&plain).is_empty(),
    )
    .await;
    assert!(node.events(NS, "plain", "Signaled").is_empty());

    // The ConfigMap in the same volume acts for both, and the rotation is not named again.
    one_signal_naming_app_config(&node, "plain", &plain).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_ca_rotation_acts_only_on_pods_that_name_kube_root_ca() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-config", &[("app.conf", "v1")]));
    let (plain, named) = (node.path("plain.sig"), node.path("named.sig"));
    node.api.create_pod(
        pod(NS, "plain")
            .signal()
            .configmap_volume("conf", "app-config")
            // kube-api-access is mounted in every container by the injection.
            .recorder("app", &plain, &[("conf", "/etc/app")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "named")
            .signal()
            .annotate("reloadlet.io/configmaps", "kube-root-ca.crt")
            .recorder("app", &named, &[])
            .build(),
    );
    node.wait_running(NS, "plain").await;
    node.wait_running(NS, "named").await;
    eventually("recorders ready", WAIT, || {
        (recorder_ready(&plain) && recorder_ready(&named)).then_some(())
    })
    .await;
    // conf + two kube-api-access volumes
    node.wait_tracked(3).await;

    let mut ca = root_ca_configmap(NS);
    ca.data.get_or_insert_default().insert(
        "ca.crt".into(),
        "-----BEGIN CERTIFICATE-----\nrotated\n-----END CERTIFICATE-----\n".into(),
    );
    node.api.apply_configmap(ca);
    eventually("the pod that names the CA is signalled", WAIT, || {
        (signals_in(&named) == ["SIGHUP"]).then_some(())
    })
    .await;
    let event = node.wait_event(NS, "named", "Signaled").await;
    assert!(
        event.note.ends_with(": configmap kube-root-ca.crt changed"),
        "{}",
        event.note
    );
    never(
        "a signal to a pod that did not name the CA",
        AGENT_QUIET,
        || !signals_in(&plain).is_empty(),
    )
    .await;
    assert!(node.events(NS, "plain", "Signaled").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn while_the_agent_is_down_a_label_edit_is_nothing_and_a_configmap_change_is_acted_on() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = mixed_pod(&mut node, "web", labels_volume()).await;
    node.stop_agent().await;

    // Down: a label edit and a token refresh. At the restart the volumes are looked at before
    // the pod list arrives; the projected one must wait for the pod spec.
    let mut p = node.api.get_pod(NS, "web").unwrap();
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("tier".into(), "canary".into());
    node.api.replace_pod(p);
    node.kubelet.resync_all();
    node.kubelet.rotate_tokens();
    node.start_agent(&[]).await;
    node.wait_tracked(2).await;
    never(
        "a signal after a restart over a label edit",
        AGENT_QUIET,
        || !signals_in(&out).is_empty(),
    )
    .await;
    node.stop_agent().await;

    // Down: a real ConfigMap change. Acted on at the restart, once.
    node.api
        .apply_configmap(configmap(NS, "app-config", &[("app.conf", "v2")]));
    node.kubelet.resync_all();
    node.start_agent(&[]).await;
    eventually("the change made while down signals", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    never("a second signal", AGENT_QUIET, || {
        signals_in(&out).len() > 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cause_names_only_the_source_whose_files_changed() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api
        .apply_configmap(configmap(NS, "base", &[("base.conf", "v1")]));
    node.api
        .apply_configmap(configmap(NS, "overrides", &[("o", "v1"), ("unused", "x")]));
    node.api
        .apply_secret(common::fixtures::secret(NS, "db", &[("password", "p1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .volume(json!({"name": "all", "projected": {"sources": [
                {"configMap": {"name": "base"}},
                {"configMap": {"name": "overrides", "items": [{"key": "o", "path": "conf.d/overrides.conf"}]}},
                {"secret": {"name": "db", "items": [{"key": "password", "path": "db/password"}]}}
            ]}}))
            .recorder("app", &out, &[("all", "/etc/app")])
            .build(),
    );
    node.wait_running(NS, "web").await;
    eventually("recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    node.wait_tracked(2).await;

    node.api
        .apply_configmap(configmap(NS, "overrides", &[("o", "v2"), ("unused", "x")]));
    let event = node.wait_event(NS, "web", "Signaled").await;
    assert!(
        event.note.ends_with(": configmap overrides changed"),
        "{}",
        event.note
    );
    eventually("one signal", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;

    node.api
        .apply_secret(common::fixtures::secret(NS, "db", &[("password", "p2")]));
    eventually("the Secret change signals", WAIT, || {
        (signals_in(&out).len() == 2).then_some(())
    })
    .await;
    // (The Events recorder folds a repeated reason into a series: read the log's cause. The
    // log line follows the signal, written off the hot thread: wait for it.)
    let log = eventually("the second signal logged", WAIT, || {
        let log = node.agent_log();
        (log.matches("signal sent").count() >= 2).then_some(log)
    })
    .await;
    let causes: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("signal sent"))
        .filter_map(|l| l.split("cause=").nth(1))
        .collect();
    assert_eq!(causes.len(), 2, "{log}");
    assert!(
        causes[0].starts_with("configmap overrides changed"),
        "{causes:?}"
    );
    assert!(causes[1].starts_with("secret db changed"), "{causes:?}");
    assert!(!log.contains("configmap base"), "{log}");
}
