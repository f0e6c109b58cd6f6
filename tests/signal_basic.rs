//! The signal action end to end on a simulated node: what a user of `reloadlet.io/action:
//! signal` sees, and everything that must not happen.

mod common;

use common::fixtures::{configmap, pod, recorder_container, secret};
use common::*;
use std::time::Duration;

const NS: &str = "shop";
const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread")]
async fn signals_only_the_main_process_of_the_container_that_mounts_the_changed_configmap() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("app.conf", "v1")]));
    let (app, child, sidecar) = (
        node.path("app.sig"),
        node.path("child.sig"),
        node.path("sidecar.sig"),
    );
    node.api.create_pod(
        pod(NS, "web-0")
            .signal()
            .configmap_volume("conf", "app-conf")
            .recorder_with_child("app", &app, &child, &[("conf", "/etc/app")])
            .recorder("sidecar", &sidecar, &[])
            .build(),
    );
    let handles = node.wait_running(NS, "web-0").await;
    eventually("recorders ready", WAIT, || {
        (recorder_ready(&app) && recorder_ready(&child) && recorder_ready(&sidecar)).then_some(())
    })
    .await;
    // conf + the injected kube-api-access token volume
    node.wait_tracked(2).await;

    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("app.conf", "v2")]));

    eventually("app got SIGHUP", WAIT, || {
        (signals_in(&app) == ["SIGHUP"]).then_some(())
    })
    .await;
    let ev = node.wait_event(NS, "web-0", "Signaled").await;
    let main_pid = handles.container("app").expect("app container").main_pid;
    assert_eq!(ev.type_, "Normal");
    assert_eq!(
        ev.note,
        format!("sent SIGHUP to container app (pid {main_pid}): configmap app-conf changed")
    );
    // Nothing else was touched: the child, the sibling container, the pause process.
    never("a decoy got a signal", AGENT_QUIET, || {
        !signals_in(&child).is_empty() || !signals_in(&sidecar).is_empty()
    })
    .await;
    assert!(
        alive(handles.sandbox.main_pid),
        "the pause process must never be signalled"
    );
    assert_eq!(
        stand_in_signals(&handles.sandbox),
        Vec::<String>::new(),
        "the pause process got a signal"
    );
    assert_eq!(signals_in(&app), ["SIGHUP"], "exactly one signal");
    node.wait_metric(
        "reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}",
        1.0,
    )
    .await;
    // reloadlet never reads ConfigMaps or Secrets from the API.
    assert!(node
        .api
        .requests()
        .iter()
        .all(|r| !r.path.contains("/configmaps") && !r.path.contains("/secrets")));
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_that_did_not_opt_in_are_never_touched() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v1")]));
    let (out, control) = (node.path("plain.sig"), node.path("opted.sig"));
    node.api.create_pod(
        pod(NS, "plain")
            .configmap_volume("conf", "c")
            .recorder("app", &out, &[("conf", "/c")])
            .build(),
    );
    // The positive control: the same ConfigMap, the same recorder, opted in.
    node.api.create_pod(
        pod(NS, "opted")
            .signal()
            .configmap_volume("conf", "c")
            .recorder("app", &control, &[("conf", "/c")])
            .build(),
    );
    node.wait_running(NS, "plain").await;
    node.wait_running(NS, "opted").await;
    until("both recorders ready", WAIT, || {
        recorder_ready(&out) && recorder_ready(&control)
    })
    .await;
    node.wait_tracked(4).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v2")]));
    until("the opted-in pod beside it got SIGHUP", WAIT, || {
        signals_in(&control) == ["SIGHUP"]
    })
    .await;
    never(
        "a signal to a pod without the annotation",
        AGENT_QUIET,
        || !signals_in(&out).is_empty(),
    )
    .await;
    let events = node.all_events();
    assert!(
        events.iter().all(|e| e.regarding_name == "opted"),
        "only the opted-in pod has events: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unchanged_content_and_token_rotation_cause_nothing_then_a_real_change_does() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .configmap_volume("conf", "c")
            .recorder("app", &out, &[("conf", "/c")])
            .build(),
    );
    node.wait_running(NS, "web").await;
    node.wait_tracked(2).await;

    // The same data again: the kubelet writes nothing. A periodic resync: nothing either.
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v1")]));
    node.kubelet.resync_all();
    // The service-account token volume swaps `..data` (kube-root-ca.crt is a ConfigMap source!).
    node.kubelet.rotate_tokens();
    eventually("the token swap was seen", WAIT, || {
        (node.metric("reloadlet_volume_swaps_total{plugin=\"projected\"}") >= 1.0).then_some(())
    })
    .await;
    never("a signal without a ConfigMap change", AGENT_QUIET, || {
        !signals_in(&out).is_empty()
    })
    .await;

    node.api.apply_configmap(configmap(NS, "c", &[("k", "v2")]));
    eventually("the real change signals", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn configmaps_annotation_narrows_the_sources_that_count() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "a", &[("k", "1")]));
    node.api.apply_configmap(configmap(NS, "b", &[("k", "1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .annotate("reloadlet.io/configmaps", "a")
            .annotate("reloadlet.io/signal", "usr1")
            .configmap_volume("va", "a")
            .configmap_volume("vb", "b")
            .recorder("app", &out, &[("va", "/a"), ("vb", "/b")])
            .build(),
    );
    node.wait_running(NS, "web").await;
    node.wait_tracked(3).await;
    node.api.apply_configmap(configmap(NS, "b", &[("k", "2")]));
    never(
        "a signal for a ConfigMap outside reloadlet.io/configmaps",
        AGENT_QUIET,
        || !signals_in(&out).is_empty(),
    )
    .await;
    node.api.apply_configmap(configmap(NS, "a", &[("k", "2")]));
    eventually("SIGUSR1 for the listed ConfigMap", WAIT, || {
        (signals_in(&out) == ["SIGUSR1"]).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_annotations_give_a_warning_and_no_signal() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let (bad_sig, bad_container) = (node.path("sig.sig"), node.path("container.sig"));
    // The positive control: a valid pod beside them, on the same ConfigMap.
    let control = node.path("valid.sig");
    node.api.create_pod(
        pod(NS, "valid")
            .signal()
            .configmap_volume("conf", "c")
            .recorder("app", &control, &[("conf", "/c")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "kill")
            .signal()
            .annotate("reloadlet.io/signal", "SIGKILL")
            .configmap_volume("conf", "c")
            .recorder("app", &bad_sig, &[("conf", "/c")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "typo")
            .signal()
            .annotate("reloadlet.io/containers", "ap")
            .configmap_volume("conf", "c")
            .recorder("app", &bad_container, &[("conf", "/c")])
            .build(),
    );
    let ev = node.wait_event(NS, "kill", "InvalidAnnotation").await;
    assert_eq!(ev.type_, "Warning");
    assert!(ev.note.contains("SIGKILL"), "{}", ev.note);
    let ev = node.wait_event(NS, "typo", "InvalidAnnotation").await;
    assert!(ev.note.contains("\"ap\""), "{}", ev.note);
    node.wait_running(NS, "kill").await;
    node.wait_running(NS, "typo").await;
    node.wait_running(NS, "valid").await;
    until("the valid pod's recorder ready", WAIT, || {
        recorder_ready(&control)
    })
    .await;
    node.wait_tracked(6).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    until("the valid pod beside them got SIGHUP", WAIT, || {
        signals_in(&control) == ["SIGHUP"]
    })
    .await;
    never(
        "a signal despite an invalid annotation",
        AGENT_QUIET,
        || !signals_in(&bad_sig).is_empty() || !signals_in(&bad_container).is_empty(),
    )
    .await;
    assert!(
        node.agent_log().contains("invalid"),
        "a log line names the problem"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sub_path_only_mounts_get_a_warning_instead_of_a_useless_signal() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api
        .apply_configmap(configmap(NS, "c", &[("app.conf", "1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "sub")
            .signal()
            .configmap_volume("conf", "c")
            .recorder("app", &out, &[])
            .sub_path_mount("app", "conf", "/etc/app.conf", "app.conf")
            .build(),
    );
    node.wait_running(NS, "sub").await;
    node.wait_tracked(2).await;
    node.api
        .apply_configmap(configmap(NS, "c", &[("app.conf", "2")]));
    let ev = node.wait_event(NS, "sub", "SubPathNotUpdated").await;
    assert_eq!(ev.type_, "Warning");
    assert!(ev.note.contains("subPath"), "{}", ev.note);
    never("a signal to a subPath-only consumer", AGENT_QUIET, || {
        !signals_in(&out).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_deleted_during_the_debounce_window_is_not_signalled() {
    let (node, out) = Node::with_signal_pod(&["--debounce", "2s"], NS, "short").await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    eventually("the change was seen", WAIT, || {
        node.agent_log()
            .contains("volume content changed")
            .then_some(())
    })
    .await;
    node.api.delete_pod(NS, "short");
    never(
        "a signal or event for a deleted pod",
        Duration::from_secs(3),
        || {
            signals_in(&out).iter().any(|s| s == "SIGHUP")
                || !node.events(NS, "short", "Signaled").is_empty()
        },
    )
    .await;
    assert!(http_get(&node.agent().listen, "/healthz").is_some_and(|(c, _)| c == 200));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_volume_whose_tmpfs_is_mounted_after_reloadlet_started_is_followed() {
    let mut node = Node::start(NodeOptions {
        tmpfs_mount_delay: Some(Duration::from_millis(300)),
        ..Default::default()
    })
    .await;
    node.start_agent(&[]).await;
    node.api
        .apply_secret(secret(NS, "tls", &[("tls.key", "k1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "tls")
            .signal()
            .secret_volume("tls", "tls")
            .recorder("app", &out, &[("tls", "/tls")])
            .build(),
    );
    node.wait_running(NS, "tls").await;
    node.wait_tracked(2).await;
    node.api
        .apply_secret(secret(NS, "tls", &[("tls.key", "k2")]));
    eventually(
        "SIGHUP after the secret changed inside the late tmpfs",
        WAIT,
        || (signals_in(&out) == ["SIGHUP"]).then_some(()),
    )
    .await;
    let ev = node.wait_event(NS, "tls", "Signaled").await;
    assert!(ev.note.ends_with("secret tls changed"), "{}", ev.note);
    assert!(
        !node.agent_log().contains("k2"),
        "secret contents are never logged"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn restartable_init_containers_are_signalled_too() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let (proxy, app) = (node.path("proxy.sig"), node.path("app.sig"));
    node.api.create_pod(
        pod(NS, "mesh")
            .signal()
            .configmap_volume("conf", "c")
            .init_container(recorder_container("proxy", &proxy, &[("conf", "/c")], true))
            .recorder("app", &app, &[])
            .build(),
    );
    node.wait_running(NS, "mesh").await;
    node.wait_tracked(2).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    eventually("the sidecar init container got SIGHUP", WAIT, || {
        (signals_in(&proxy) == ["SIGHUP"]).then_some(())
    })
    .await;
    never(
        "the container without the mount got nothing",
        AGENT_QUIET,
        || !signals_in(&app).is_empty(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_without_its_process_gets_retries_then_a_signal_failed_warning() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let out = node.path("gone.sig");
    let mut gone = pod(NS, "gone")
        .signal()
        .configmap_volume("conf", "c")
        .recorder("app", &out, &[("conf", "/c")])
        .build();
    // restartPolicy Never: the kubelet does not start the container again once it exits
    gone.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    node.api.create_pod(gone);
    let handles = node.wait_running(NS, "gone").await;
    node.wait_tracked(2).await;
    // The container's process dies and nothing restarts it.
    let main = handles.container("app").unwrap().main_pid;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(main),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually("the process is gone", WAIT, || (!alive(main)).then_some(())).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    let ev = eventually(
        "SignalFailed after the retries",
        Duration::from_secs(20),
        || node.events(NS, "gone", "SignalFailed").into_iter().next(),
    )
    .await;
    assert_eq!(ev.type_, "Warning");
    assert!(
        ev.note
            .starts_with("could not send SIGHUP to container app after 5 attempts"),
        "{}",
        ev.note
    );
    assert!(ev.note.ends_with("configmap c changed"), "{}", ev.note);
    assert_eq!(
        node.agent_log()
            .matches("signal failed; will retry")
            .count(),
        4
    );
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"signal\",outcome=\"signal_failed\"}"),
        1.0
    );
    assert!(node.events(NS, "gone", "Signaled").is_empty());
}
