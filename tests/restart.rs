//! `reloadlet.io/action: restart` end to end on a simulated node (issue #45): an app that
//! reads its config (a mounted file and an env var) only at start serves the new config
//! after a ConfigMap change — same pod UID and IP, `restartCount` + 1 — and a second change
//! inside the crash-loop window is deferred, then applied, never lost. A `hostUsers: false`
//! pod (user namespaces, on by default since 1.33) restarts the same way.

mod common;

use common::fixtures::{configmap, pod, sandboxed};
use common::*;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const NS: &str = "shop";
/// A deadline, not a timing claim: on a loaded 2-core CI machine the first restart (the
/// kubelet's projection, the stop, the kubelet's PLEG and start) took over 30 s once.
const WAIT: Duration = Duration::from_secs(60);

/// A container that reads `/etc/app/app.conf` and `$GREETING` once, writes what it serves to
/// `out`, and then only sleeps: no SIGHUP handler, no reload endpoint, no SIGTERM handler
/// either (PID 1 of its namespace: the stop signal is dropped, SIGKILL after the grace).
fn start_only_app(base: &Path, out: &Path) -> serde_json::Value {
    let conf = sandboxed(base, "/etc/app");
    let script = format!(
        "echo \"serving $(cat {conf}/app.conf) greeting=$GREETING\" > {out}; while :; do sleep 3600 & wait $!; done",
        out = out.display()
    );
    json!({
        "name": "app",
        "image": "example/start-only:1",
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "app-conf", "key": "greeting"}}}],
        "volumeMounts": [{"name": "conf", "mountPath": conf}],
    })
}

fn app_conf(conf: &str, greeting: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    configmap(
        NS,
        "app-conf",
        &[("app.conf", conf), ("greeting", greeting)],
    )
}

fn restart_count(p: &Pod) -> Option<i32> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "app")
        .map(|c| c.restart_count)
}

fn served(out: &Path) -> String {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

async fn start_only_pod(node: &mut Node, agent_args: &[&str]) -> (std::path::PathBuf, Pod) {
    // These tests are about the restart itself: each pod restarts on its own node's
    // decision. The controller's grant is `restart_grant.rs` (and the test below).
    let mut args = vec!["--restart-without-grant"];
    args.extend_from_slice(agent_args);
    start_only_pod_with(node, &args).await
}

async fn start_only_pod_with(node: &mut Node, args: &[&str]) -> (std::path::PathBuf, Pod) {
    node.start_agent(args).await;
    node.api.apply_configmap(app_conf("v1", "one"));
    let out = node.path("served");
    let base = out.parent().unwrap().to_owned();
    let b = pod(NS, "web-0")
        .annotate("reloadlet.io/action", "restart")
        .annotate("reloadlet.io/restart-grace", "1s")
        .configmap_volume("conf", "app-conf")
        .container(start_only_app(&base, &out));
    node.api.create_pod(b.build());
    node.wait_running(NS, "web-0").await;
    eventually("the app serves v1", WAIT, || {
        (served(&out) == "serving v1 greeting=one").then_some(())
    })
    .await;
    node.wait_tracked(2).await;
    let before = node.api.get_pod(NS, "web-0").unwrap();
    (out, before)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_only_app_serves_the_new_config_after_a_restart_in_the_same_pod() {
    let mut node = Node::start(NodeOptions::default()).await;
    let (out, before) = start_only_pod(&mut node, &[]).await;
    let ip = before.status.as_ref().unwrap().pod_ip.clone();
    assert_eq!(restart_count(&before), Some(0));
    let explained = node.explain_output(NS, "web-0");
    assert!(
        explained.contains("action: restart in place")
            && explained.contains("triggers a restart of app (SIGTERM, SIGKILL after 1s)"),
        "{explained}"
    );
    // who grants (no controller here: no Lease), what is pending, the budget (none)
    for part in [
        "grant: no controller holds the Lease: nothing will be granted (the Lease reloadlet-system/reloadlet-controller does not exist)",
        "pending: nothing requested",
        "budget: no PodDisruptionBudget: one pod of the owner at a time",
    ] {
        assert!(explained.contains(part), "{part:?} in\n{explained}");
    }

    node.api.apply_configmap(app_conf("v2", "two"));

    // the new process read the new file and the new env value
    eventually("the app serves v2", WAIT, || {
        (served(&out) == "serving v2 greeting=two").then_some(())
    })
    .await;
    let after = eventually("restartCount 1", WAIT, || {
        let p = node.api.get_pod(NS, "web-0")?;
        (restart_count(&p) == Some(1)).then_some(p)
    })
    .await;
    assert_eq!(after.metadata.uid, before.metadata.uid, "same pod");
    assert_eq!(after.status.as_ref().unwrap().pod_ip, ip, "same IP");
    let ev = node.wait_event(NS, "web-0", "Restarted").await;
    assert_eq!(ev.type_, "Normal");
    assert!(
        ev.note.contains("with SIGTERM, then SIGKILL after 1s")
            && ev.note.contains("traffic was not drained")
            && ev.note.ends_with("configmap app-conf changed"),
        "{}",
        ev.note
    );
    node.wait_metric(
        "reloadlet_actions_total{action=\"restart\",outcome=\"restarted\"}",
        1.0,
    )
    .await;
    // no pod was created or evicted for it
    assert_eq!(node.api.list_pods().len(), 1);
    assert!(evicted_uids(&node).is_empty());
}

/// The first line of `/proc/<pid>/uid_map`: (inside, outside).
fn uid_map(pid: i32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let mut f = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    (f.next().unwrap(), f.next().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_users_false_pod_restarts_in_place_in_its_user_namespace() {
    use std::os::unix::fs::PermissionsExt;
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--restart-without-grant"]).await;
    node.api.apply_configmap(app_conf("v1", "one"));
    // The app runs as the pod's root, an unprivileged host UID: it needs a way into the
    // node's dir and a dir it may write.
    let base = node.path("");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711)).unwrap();
    let out_dir = node.path("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = out_dir.join("served");
    let mut p = pod(NS, "web-0")
        .annotate("reloadlet.io/action", "restart")
        .annotate("reloadlet.io/restart-grace", "1s")
        .configmap_volume("conf", "app-conf")
        .container(start_only_app(&base, &out))
        .build();
    p.spec.as_mut().unwrap().host_users = Some(false);
    node.api.create_pod(p);
    let handles = node.wait_running(NS, "web-0").await;
    let first = handles.container("app").unwrap().main_pid;
    let (inside, outside) = uid_map(first);
    assert!(
        inside == 0 && outside > 0,
        "a user namespace: {inside} {outside}"
    );
    eventually("the app serves v1", WAIT, || {
        (served(&out) == "serving v1 greeting=one").then_some(())
    })
    .await;
    node.wait_tracked(2).await;
    let uid = node.uid(NS, "web-0");

    node.api.apply_configmap(app_conf("v2", "two"));
    eventually("the app serves v2", WAIT, || {
        (served(&out) == "serving v2 greeting=two").then_some(())
    })
    .await;
    eventually("restartCount 1", WAIT, || {
        let p = node.api.get_pod(NS, "web-0")?;
        (restart_count(&p) == Some(1)).then_some(())
    })
    .await;
    assert_eq!(node.uid(NS, "web-0"), uid, "same pod");
    let handles = node.kubelet.pod_handles(&uid).expect("the pod runs");
    let second = handles.container("app").unwrap().main_pid;
    assert_ne!(second, first, "a new process");
    assert_eq!(uid_map(second), (0, outside), "in the pod's user namespace");
    node.wait_event(NS, "web-0", "Restarted").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn restart_policy_never_is_refused_with_a_warning_and_nothing_is_stopped() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--restart-without-grant"]).await;
    node.api.apply_configmap(app_conf("v1", "one"));
    let out = node.path("served");
    let base = out.parent().unwrap().to_owned();
    let mut p = pod(NS, "once")
        .annotate("reloadlet.io/action", "restart")
        .configmap_volume("conf", "app-conf")
        .container(start_only_app(&base, &out))
        .build();
    p.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    node.api.create_pod(p);
    let handles = node.wait_running(NS, "once").await;
    node.wait_tracked(2).await;
    let pid = handles.container("app").unwrap().main_pid;
    // (the shell writes what it serves after it started: not before the change)
    eventually("the app serves v1", WAIT, || {
        (served(&out) == "serving v1 greeting=one").then_some(())
    })
    .await;
    node.api.apply_configmap(app_conf("v2", "two"));
    let ev = node.wait_event(NS, "once", "RestartRefused").await;
    assert_eq!(ev.type_, "Warning");
    assert!(ev.note.contains("restartPolicy Never"), "{}", ev.note);
    assert!(alive(pid), "the process was left alone");
    assert_eq!(served(&out), "serving v1 greeting=one");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_change_inside_the_crash_loop_window_is_deferred_then_applied_not_lost() {
    let mut node = Node::start(NodeOptions::default()).await;
    // a short window, so that the test sees its end (10m by default), long enough that the
    // kubelet projects v4 inside it even on a loaded machine (else v4 is a change of its own,
    // restarted after another window: right, but not what this test asserts)
    let (out, _) = start_only_pod(&mut node, &["--restart-spacing", "10s"]).await;
    node.api.apply_configmap(app_conf("v2", "two"));
    eventually("the app serves v2", WAIT, || {
        (served(&out) == "serving v2 greeting=two").then_some(())
    })
    .await;
    node.wait_event(NS, "web-0", "Restarted").await;

    // two more changes inside the window: one deferral, and the latest content wins
    node.api.apply_configmap(app_conf("v3", "three"));
    let ev = node.wait_event(NS, "web-0", "RestartDeferred").await;
    assert_eq!(ev.type_, "Normal");
    assert!(
        ev.note.contains("restarted less than 10s ago"),
        "{}",
        ev.note
    );
    node.api.apply_configmap(app_conf("v4", "four"));

    eventually(
        "the app serves v4 after the window",
        Duration::from_secs(60),
        || (served(&out) == "serving v4 greeting=four").then_some(()),
    )
    .await;
    let p = eventually("restartCount 2", WAIT, || {
        let p = node.api.get_pod(NS, "web-0")?;
        (restart_count(&p) == Some(2)).then_some(p)
    })
    .await;
    assert_eq!(
        restart_count(&p),
        Some(2),
        "one restart for v3 and v4 together"
    );
    node.wait_metric(
        "reloadlet_actions_total{action=\"restart\",outcome=\"restarted\"}",
        2.0,
    )
    .await;
    node.wait_metric(
        "reloadlet_actions_total{action=\"restart\",outcome=\"restart_deferred\"}",
        1.0,
    )
    .await;
}

/// The condition `type_` of the pod: (status, lastTransitionTime).
fn condition(p: &Pod, type_: &str) -> Option<(String, Option<jiff::Timestamp>)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    let at = c
        .last_transition_time
        .as_ref()
        .and_then(|t| t.0.to_string().parse().ok());
    Some((c.status.clone(), at))
}

fn ready(p: &Pod) -> bool {
    condition(p, "Ready").is_some_and(|(s, _)| s == "True")
}

/// When the app container's previous process ended (`lastState.terminated.finishedAt`).
fn finished_at(p: &Pod) -> Option<jiff::Timestamp> {
    let c = p
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "app")?;
    let t = c.last_state.as_ref()?.terminated.as_ref()?;
    t.finished_at.as_ref()?.0.to_string().parse().ok()
}

const DRAIN_GATE: &str = "reloadlet.io/restart-drain";

/// Drain through the readiness gate (issue #45 §2): a pod that declares
/// `reloadlet.io/restart-drain` is Ready only once the agent set that condition True (on first
/// sight); on a change it is set False — Ready False while the old process still runs — the
/// drain (default 5 s) is waited, then the container is stopped, and once the new one is
/// ready the gate is True again: same UID, restartCount + 1. A pod without the gate, changed
/// at the same time, is restarted with no condition written (the positive control).
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_the_drain_gate_leaves_its_services_before_the_restart_and_comes_back() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--restart-without-grant"]).await;
    node.api.apply_configmap(app_conf("v1", "one"));
    let base = node.path("");
    let spec = |name: &str, out: &Path| {
        pod(NS, name)
            .annotate("reloadlet.io/action", "restart")
            .annotate("reloadlet.io/restart-grace", "1s")
            .configmap_volume("conf", "app-conf")
            .container(start_only_app(&base, out))
            .build()
    };
    let (gated_out, plain_out) = (node.path("gated-served"), node.path("plain-served"));
    let mut gated = spec("gated", &gated_out);
    gated.spec.as_mut().unwrap().readiness_gates =
        Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
            condition_type: DRAIN_GATE.into(),
        }]);
    node.api.create_pod(gated);
    node.api.create_pod(spec("plain", &plain_out));
    let handles = node.wait_running(NS, "gated").await;
    let explained = node.explain_output(NS, "gated");
    assert!(
        explained.contains(
            "drain: readiness gate reloadlet.io/restart-drain set False 5s before the stop signal"
        ),
        "{explained}"
    );
    let first = handles.container("app").unwrap().main_pid;
    node.wait_running(NS, "plain").await;
    // Ready only once the agent opened the gate
    let before = eventually("the gated pod Ready (gate set True on sight)", WAIT, || {
        let p = node.api.get_pod(NS, "gated")?;
        (ready(&p) && condition(&p, DRAIN_GATE)?.0 == "True").then_some(p)
    })
    .await;
    eventually("both apps serve v1", WAIT, || {
        (served(&gated_out) == "serving v1 greeting=one"
            && served(&plain_out) == "serving v1 greeting=one")
            .then_some(())
    })
    .await;
    node.wait_tracked(4).await;

    node.api.apply_configmap(app_conf("v2", "two"));

    // out of its Services while the old process still runs (the drain is 5 s)
    let draining = eventually("the gated pod not Ready, gate False", WAIT, || {
        let p = node.api.get_pod(NS, "gated")?;
        (!ready(&p) && condition(&p, DRAIN_GATE)?.0 == "False").then_some(p)
    })
    .await;
    assert!(alive(first), "drained before the stop signal");
    assert_eq!(restart_count(&draining), Some(0));
    let (_, drained_at) = condition(&draining, DRAIN_GATE).unwrap();

    let after = eventually("the gated pod restarted and Ready again", WAIT, || {
        let p = node.api.get_pod(NS, "gated")?;
        (restart_count(&p) == Some(1) && ready(&p) && condition(&p, DRAIN_GATE)?.0 == "True")
            .then_some(p)
    })
    .await;
    assert_eq!(after.metadata.uid, before.metadata.uid, "same pod");
    assert_eq!(served(&gated_out), "serving v2 greeting=two");
    // the process ended at least the drain (5 s, less a second of the condition's
    // precision) after the gate was set False
    let (drained_at, ended) = (drained_at.unwrap(), finished_at(&after).unwrap());
    assert!(
        ended.duration_since(drained_at) >= jiff::SignedDuration::from_secs(4),
        "gate False at {drained_at}, process ended at {ended}"
    );
    let ev = node.wait_event(NS, "gated", "Restarted").await;
    assert!(
        ev.note.contains("traffic was drained for 5s first"),
        "{}",
        ev.note
    );

    // the positive control: restarted too, never a condition written
    let plain = eventually("the plain pod restarted", WAIT, || {
        let p = node.api.get_pod(NS, "plain")?;
        (restart_count(&p) == Some(1) && ready(&p)).then_some(p)
    })
    .await;
    assert_eq!(condition(&plain, DRAIN_GATE), None, "no condition");
    let status_patches = |name: &str| {
        let path = format!("/api/v1/namespaces/{NS}/pods/{name}/status");
        node.api
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path == path)
            .map(|r| r.status)
            .collect::<Vec<_>>()
    };
    assert!(status_patches("plain").is_empty(), "no status patch");
    // the gated pod's: True on sight, False, True again — each admitted (the request log
    // takes a request once answered, after the store shows it: polled)
    let gated = eventually("the gated pod's three status patches logged", WAIT, || {
        let patches = status_patches("gated");
        (patches.len() >= 3).then_some(patches)
    })
    .await;
    assert_eq!(gated, [200, 200, 200]);
    let ev = node.wait_event(NS, "plain", "Restarted").await;
    assert!(ev.note.contains("traffic was not drained"), "{}", ev.note);
}

/// Without `--restart-without-grant` and without a controller to grant it, the agent only
/// asks: the request is on the pod, a Normal `RestartRequested` Event says it waits for the
/// controller's grant, and the app keeps running its old config in the same container.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_grant_nothing_restarts_and_the_pod_says_it_waits_for_it() {
    let mut node = Node::start(NodeOptions::default()).await;
    let (out, before) = start_only_pod_with(&mut node, &[]).await;
    assert_eq!(restart_count(&before), Some(0));

    node.api.apply_configmap(app_conf("v2", "two"));

    let ev = node.wait_event(NS, "web-0", "RestartRequested").await;
    assert_eq!(ev.type_, "Normal");
    assert!(
        ev.note.contains("waiting for the controller's grant")
            && ev.note.ends_with("configmap app-conf changed"),
        "{}",
        ev.note
    );
    let request = eventually("the request on the pod", WAIT, || {
        let p = node.api.get_pod(NS, "web-0")?;
        p.metadata
            .annotations
            .as_ref()?
            .get("reloadlet.io/restart-request")
            .cloned()
    })
    .await;
    // `<content>-<mac>-<tag>`: one tag, for the one container (docs/restart.md, "The grant")
    let parts: Vec<usize> = request.split('-').map(str::len).collect();
    assert!(
        parts == [8, 16, 4] && request.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'),
        "{request}"
    );
    // The ungranted restart took a second or two after the decision (the tests above): for
    // five seconds after the request, the container is the same and serves v1.
    never(
        "a restart without a grant, or other than v1 served",
        Duration::from_secs(5),
        || {
            let p = node.api.get_pod(NS, "web-0").unwrap();
            restart_count(&p) != Some(0) || served(&out) != "serving v1 greeting=one"
        },
    )
    .await;
    let p = node.api.get_pod(NS, "web-0").unwrap();
    let annotations = p.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key("reloadlet.io/restarted"));
    node.wait_metric(
        "reloadlet_actions_total{action=\"restart\",outcome=\"restart_requested\"}",
        1.0,
    )
    .await;
}
