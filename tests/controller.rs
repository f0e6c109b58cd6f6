//! `reloadlet controller` (fast projection) against the simulated API server and node: what
//! an operator sees on the pods, and everything that must not happen.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, pod};
use common::*;
use controller_process::ControllerProcess as Controller;
use nodesim::apiserver::RequestRecord;
use serde_json::json;
use std::time::{Duration, Instant};

const NS: &str = "shop";
const NUDGE: &str = "reloadlet.io/projection-nudge";
const WAIT: Duration = Duration::from_secs(15);

/// The nudge patches (env consumers, on by default, also write `reloadlet.io/env-baseline` once
/// on the `env` pod: tests/env_consumers.rs covers those).
fn pod_patches(node: &Node) -> Vec<RequestRecord> {
    node.api
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/pods/") && r.body.contains(NUDGE))
        .collect()
}

fn nudge_of(node: &Node, name: &str) -> Option<String> {
    node.pod_annotation(NS, name, NUDGE)
}

/// ConfigMap `app-cfg`, and pods that use it in every way: `web` (volume, opted in),
/// `subpath` (only through subPath), `env` (only through envFrom), `optout`
/// (`reloadlet.io/fast-projection: "false"`) and `plain` (volume, no reloadlet.io/action).
async fn scene() -> Node {
    let node = Node::start(NodeOptions::default()).await;
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v1")]));
    let out = |n: &str| node.path(&format!("{n}.sig"));
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &out("web"), &[("conf", "/etc/app")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "subpath")
            .signal()
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &out("subpath"), &[])
            .sub_path_mount("app", "conf", "/etc/app.conf", "app.conf")
            .build(),
    );
    let mut env_pod = pod(NS, "env")
        .signal()
        .recorder("app", &out("env"), &[])
        .build();
    env_pod.spec.as_mut().unwrap().containers[0].env_from = Some(vec![serde_json::from_value(
        json!({"configMapRef": {"name": "app-cfg"}}),
    )
    .unwrap()]);
    node.api.create_pod(env_pod);
    node.api.create_pod(
        pod(NS, "optout")
            .signal()
            .annotate("reloadlet.io/fast-projection", "false")
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &out("optout"), &[("conf", "/etc/app")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "plain")
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &out("plain"), &[("conf", "/etc/app")])
            .build(),
    );
    for p in ["web", "subpath", "env", "optout", "plain"] {
        node.wait_running(NS, p).await;
    }
    // The kubelet reports Running through the API; the controller only nudges running pods.
    eventually("pods Running in the API", WAIT, || {
        ["web", "subpath", "env", "optout", "plain"]
            .iter()
            .all(|p| {
                node.api
                    .get_pod(NS, p)
                    .and_then(|p| p.status?.phase)
                    .as_deref()
                    == Some("Running")
            })
            .then_some(())
    })
    .await;
    node
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configmap_update_writes_exactly_one_annotation_on_exactly_the_pods_that_project_it() {
    let node = scene().await;
    let controller = Controller::start(&node, &["--leader-elect=false"], &[]).await;
    let before = node.api.get_pod(NS, "web").unwrap();
    never("a nudge at startup", Duration::from_secs(2), || {
        !pod_patches(&node).is_empty()
    })
    .await;

    let rv = node
        .api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]))
        .metadata
        .resource_version
        .unwrap();
    let first = format!("configmap/app-cfg@{rv}");
    eventually("web nudged", WAIT, || {
        (nudge_of(&node, "web").as_deref() == Some(first.as_str())).then_some(())
    })
    .await;
    let third = format!("{first}#3");
    eventually("web re-nudged (#3)", WAIT, || {
        (nudge_of(&node, "web").as_deref() == Some(third.as_str())).then_some(())
    })
    .await;
    never("anything more", Duration::from_secs(2), || {
        pod_patches(&node).len() > 3
    })
    .await;

    // Three patches, each of exactly one annotation, to web only.
    let patches = pod_patches(&node);
    let bodies: Vec<(String, serde_json::Value)> = patches
        .iter()
        .map(|r| (r.path.clone(), serde_json::from_str(&r.body).unwrap()))
        .collect();
    let want = |v: &str| json!({"metadata": {"annotations": {NUDGE: v}}});
    let path = format!("/api/v1/namespaces/{NS}/pods/web");
    assert_eq!(
        bodies,
        vec![
            (path.clone(), want(&first)),
            (path.clone(), want(&format!("{first}#2"))),
            (path, want(&third)),
        ]
    );
    assert!(patches
        .iter()
        .all(|r| r.content_type.starts_with("application/merge-patch+json")));
    // Nothing else on the pod changed.
    let after = node.api.get_pod(NS, "web").unwrap();
    let mut ann = after.metadata.annotations.clone().unwrap();
    ann.remove(NUDGE);
    assert_eq!(Some(ann), before.metadata.annotations);
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(after.spec, before.spec);
    for p in ["subpath", "env", "optout", "plain"] {
        assert_eq!(nudge_of(&node, p), None, "{p} must never be nudged");
    }
    assert_eq!(
        controller.metric("reloadlet_nudges_total{kind=\"configmap\",outcome=\"patched\"}"),
        3.0
    );
    // Metadata-only: the controller never asked for ConfigMap data, except one GET of app-cfg
    // at a time for the `env` pod, which reads it through envFrom (env consumers,
    // tests/env_consumers.rs).
    let env_read = format!("/api/v1/namespaces/{NS}/configmaps/app-cfg");
    let cm_reads: Vec<RequestRecord> = node
        .api
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/configmaps"))
        .filter(|r| !(r.method == "GET" && r.path == env_read && !r.is_watch()))
        .collect();
    assert!(!cm_reads.is_empty());
    assert!(
        cm_reads
            .iter()
            .all(|r| r.accept.contains("as=PartialObjectMetadata")),
        "{:?}",
        cm_reads.iter().map(|r| &r.accept).collect::<Vec<_>>()
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_controller_nudges_nothing_by_itself() {
    let node = scene().await;
    let controller = Controller::start(&node, &["--leader-elect=false"], &[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]));
    eventually("web nudged", WAIT, || nudge_of(&node, "web")).await;
    controller.stop().await;
    // Changed while no controller ran: the restarted one takes it as its baseline.
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v3")]));
    let patches = pod_patches(&node).len();
    let controller = Controller::start(&node, &["--leader-elect=false"], &[]).await;
    never("a nudge after the restart", NUDGE_QUIET, || {
        pod_patches(&node).len() > patches
    })
    .await;
    // The positive control: the restarted controller does watch; a change made now nudges.
    let rv = node
        .api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v4")]))
        .metadata
        .resource_version
        .unwrap();
    let want = format!("configmap/app-cfg@{rv}");
    until(
        "web nudged for a change made after the restart",
        WAIT,
        || nudge_of(&node, "web").as_deref() == Some(want.as_str()),
    )
    .await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn of_two_controllers_only_the_leader_nudges_and_the_standby_takes_over() {
    let node = scene().await;
    let lease_ns = "reloadlet-system";
    let args = [
        "--retry-period",
        "200ms",
        "--renew-deadline",
        "1s",
        "--lease-duration",
        "2s",
    ];
    let a = Controller::start(
        &node,
        &args,
        &[("POD_NAMESPACE", lease_ns), ("POD_NAME", "ctl-a")],
    )
    .await;
    let holder = || {
        node.api
            .get_lease(lease_ns, "reloadlet-controller")
            .and_then(|l| l.spec?.holder_identity)
    };
    eventually("ctl-a holds the Lease", WAIT, || {
        (holder().as_deref() == Some("ctl-a")).then_some(())
    })
    .await;
    let b = Controller::start(
        &node,
        &args,
        &[("POD_NAMESPACE", lease_ns), ("POD_NAME", "ctl-b")],
    )
    .await;
    assert_eq!(b.metric("reloadlet_controller_leader"), 0.0);
    assert_eq!(a.metric("reloadlet_controller_leader"), 1.0);

    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]));
    eventually("web nudged #3", WAIT, || {
        nudge_of(&node, "web").filter(|v| v.ends_with("#3"))
    })
    .await;
    never("more than three patches", Duration::from_secs(1), || {
        pod_patches(&node).len() > 3
    })
    .await;
    let patched = "reloadlet_nudges_total{kind=\"configmap\",outcome=\"patched\"}";
    assert_eq!(a.metric(patched), 3.0);
    assert_eq!(b.metric(patched), 0.0);

    // The leader stops (and releases the Lease): the standby leads, without nudging by itself.
    a.stop().await;
    eventually("ctl-b holds the Lease", WAIT, || {
        (holder().as_deref() == Some("ctl-b")).then_some(())
    })
    .await;
    eventually("ctl-b reports leadership", WAIT, || {
        (b.metric("reloadlet_controller_leader") == 1.0).then_some(())
    })
    .await;
    never("a nudge on failover", Duration::from_secs(2), || {
        pod_patches(&node).len() > 3
    })
    .await;
    let rv = node
        .api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v3")]))
        .metadata
        .resource_version
        .unwrap();
    let want = format!("configmap/app-cfg@{rv}");
    eventually("ctl-b nudges the next change", WAIT, || {
        (nudge_of(&node, "web").as_deref() == Some(want.as_str())).then_some(())
    })
    .await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_kubelets_real_sync_timing_the_nudged_pod_reloads_in_seconds_and_the_opted_out_one_waits(
) {
    let mut node = Node::start_faithful(Duration::from_secs(60)).await;
    // Both components at their default flags (the agent's --debounce included).
    node.start_agent(&[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v1")]));
    let (fast, slow) = (node.path("fast.sig"), node.path("slow.sig"));
    node.api.create_pod(
        pod(NS, "fast")
            .signal()
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &fast, &[("conf", "/etc/app")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "slow")
            .signal()
            .annotate("reloadlet.io/fast-projection", "false")
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &slow, &[("conf", "/etc/app")])
            .build(),
    );
    for p in ["fast", "slow"] {
        node.wait_running(NS, p).await;
    }
    eventually("recorders ready", WAIT, || {
        (recorder_ready(&fast) && recorder_ready(&slow)).then_some(())
    })
    .await;
    eventually("pods Running in the API", WAIT, || {
        ["fast", "slow"]
            .iter()
            .all(|p| {
                node.api
                    .get_pod(NS, p)
                    .and_then(|p| p.status?.phase)
                    .as_deref()
                    == Some("Running")
            })
            .then_some(())
    })
    .await;
    node.wait_tracked(4).await;
    // Or the kubelet's sync right after Pending → Running would project the change below
    // by itself.
    node.wait_post_start_syncs(NS, &["fast", "slow"]).await;
    let controller = Controller::start(&node, &["--leader-elect=false"], &[]).await;

    let applied = Instant::now();
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]));
    eventually("the nudged pod got SIGHUP", Duration::from_secs(20), || {
        (signals_in(&fast) == ["SIGHUP"]).then_some(())
    })
    .await;
    eprintln!(
        "ConfigMap apply -> SIGHUP observed: {:?} (kubelet syncFrequency 60 s, agent at its default --debounce)",
        applied.elapsed()
    );
    let content = std::fs::read_to_string(
        node.kubelet_root()
            .join("pods")
            .join(node.uid(NS, "fast"))
            .join("volumes/kubernetes.io~configmap/conf/app.conf"),
    )
    .unwrap();
    assert_eq!(content, "v2");
    // The opted-out pod waits for its periodic sync (≥ 60 s after its last one).
    never(
        "the opted-out pod reloaded early",
        Duration::from_secs(5),
        || !signals_in(&slow).is_empty(),
    )
    .await;
    // The re-nudges re-project identical bytes: no second signal.
    assert_eq!(signals_in(&fast), ["SIGHUP"]);
    let delay = node.metric("reloadlet_projection_delay_seconds_count");
    assert_eq!(delay, 1.0, "{}", node.scrape());
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_are_watched_metadata_only_and_only_with_the_secrets_flag() {
    let node = Node::start(NodeOptions::default()).await;
    node.api
        .apply_secret(common::fixtures::secret(NS, "tls", &[("key", "s1")]));
    let out = node.path("s.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .secret_volume("certs", "tls")
            .recorder("app", &out, &[("certs", "/etc/tls")])
            .build(),
    );
    node.wait_running(NS, "web").await;
    eventually("Running in the API", WAIT, || {
        (node
            .api
            .get_pod(NS, "web")
            .and_then(|p| p.status?.phase)
            .as_deref()
            == Some("Running"))
        .then_some(())
    })
    .await;
    // The tenants' Secrets; the controller's own key Secret (reloadlet-controller-key in its
    // namespace, read once at start) is checked apart below.
    const KEY_SECRET: &str = "/namespaces/reloadlet-system/secrets";
    let secret_requests = || {
        node.api
            .requests()
            .into_iter()
            .filter(|r| r.path.contains("/secrets") && !r.path.contains(KEY_SECRET))
            .collect::<Vec<_>>()
    };
    // The key's reads: one Secret by name, nothing listed.
    let key_requests = || {
        node.api
            .requests()
            .into_iter()
            .filter(|r| r.path.contains(KEY_SECRET))
            .collect::<Vec<_>>()
    };

    // Default: Secrets are not even listed.
    let controller = Controller::start(&node, &["--leader-elect=false"], &[]).await;
    node.api
        .apply_secret(common::fixtures::secret(NS, "tls", &[("key", "s2")]));
    never(
        "a nudge for a Secret without --secrets",
        Duration::from_secs(2),
        || nudge_of(&node, "web").is_some(),
    )
    .await;
    assert!(secret_requests().is_empty());
    controller.stop().await;

    let controller = Controller::start(&node, &["--leader-elect=false", "--secrets"], &[]).await;
    let rv = node
        .api
        .apply_secret(common::fixtures::secret(NS, "tls", &[("key", "s3")]))
        .metadata
        .resource_version
        .unwrap();
    let want = format!("secret/tls@{rv}");
    eventually("web nudged for the Secret", WAIT, || {
        (nudge_of(&node, "web").as_deref() == Some(want.as_str())).then_some(())
    })
    .await;
    let reads = secret_requests();
    assert!(!reads.is_empty());
    // Metadata only, but for the Secret web reads: one GET of its data per change, for its
    // reloadlet.io/data-version (docs/status.md), whose write asks for metadata back.
    let tls = format!("/api/v1/namespaces/{NS}/secrets/tls");
    assert!(
        reads.iter().all(|r| (r.method == "GET"
            && (r.accept.contains("as=PartialObjectMetadata") || r.path == tls))
            || (r.method == "PATCH"
                && r.path == tls
                && r.accept.contains("as=PartialObjectMetadata"))),
        "{:?}",
        reads
            .iter()
            .map(|r| (&r.method, &r.path, &r.accept))
            .collect::<Vec<_>>()
    );
    assert!(!controller.log().contains("s3"), "Secret data in the log");
    let key_reads = key_requests();
    assert!(!key_reads.is_empty(), "the controller's key is read");
    assert!(key_reads
        .iter()
        .all(|r| r.path.ends_with("/secrets/reloadlet-controller-key")
            || (r.method == "POST" && r.path.ends_with("/secrets"))));
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn under_dry_run_a_change_is_logged_and_counted_and_no_pod_is_patched() {
    let node = scene().await;
    let controller = Controller::start(&node, &["--leader-elect=false", "--dry-run"], &[]).await;
    let rv = node
        .api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]))
        .metadata
        .resource_version
        .unwrap();
    let value = format!("configmap/app-cfg@{rv}#3");
    until("the third nudge of web logged as a dry run", WAIT, || {
        let log = controller.log();
        log.contains("dry-run: would patch") && log.contains(&value)
    })
    .await;
    let series = "reloadlet_nudges_total{kind=\"configmap\",outcome=\"dry_run\"}";
    until("dry-run nudges counted", WAIT, || {
        controller.metric(series) == 3.0
    })
    .await;
    // Nothing written: no nudge, no env baseline (the `env` pod reads app-cfg through env).
    let pod_writes: Vec<RequestRecord> = node
        .api
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/pods/") && r.method == "PATCH")
        .collect();
    assert!(pod_writes.is_empty(), "{pod_writes:?}");
    assert_eq!(nudge_of(&node, "web"), None);
    assert_eq!(
        controller.metric("reloadlet_nudges_total{kind=\"configmap\",outcome=\"patched\"}"),
        0.0
    );
    controller.stop().await;
}
