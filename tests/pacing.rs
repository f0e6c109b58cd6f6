//! Pacing on a simulated node, in real time (docs/pacing.md): the flap breaker, a maintenance
//! window, a minimum interval across an agent restart, and bad pacing annotations.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, pod};
use common::*;
use controller_process::ControllerProcess;
use serde_json::json;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const NS: &str = "pace";
const WAIT: Duration = Duration::from_secs(15);

/// One signal pod reading ConfigMap `c` (content `v1`), with `pacing` annotations; its
/// recorder's output.
async fn signal_pod(node: &mut Node, name: &str, pacing: &[(&str, &str)]) -> std::path::PathBuf {
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v1")]));
    let out = node.path(&format!("{name}.sig"));
    let mut b = pod(NS, name).signal().configmap_volume("conf", "c");
    for (k, v) in pacing {
        b = b.annotate(k, v);
    }
    node.api
        .create_pod(b.recorder("app", &out, &[("conf", "/c")]).build());
    node.wait_running(NS, name).await;
    eventually("recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    node.wait_tracked(2).await;
    out
}

fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The next minute boundary at least `ahead` seconds away, as a daily UTC cron pattern, and
/// its time (seconds since the epoch).
fn next_minute(ahead: u64) -> (String, u64) {
    let now = epoch_now();
    let mut opens = (now / 60 + 1) * 60;
    if opens - now < ahead {
        opens += 60;
    }
    let pattern = format!("{} {} * * *", (opens / 60) % 60, (opens / 3600) % 24);
    (pattern, opens)
}

/// Nothing reaches the Eviction API before `opens` (seconds since the epoch).
async fn no_eviction_before(node: &Node, opens: u64) {
    let left = (UNIX_EPOCH + Duration::from_secs(opens))
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    never("an eviction before the window opened", left, || {
        !node.api.evictions().is_empty()
    })
    .await;
}

/// How often `reason` was recorded for the pod (a series counts its repeats).
fn occurrences(node: &Node, pod: &str, reason: &str) -> i32 {
    node.events(NS, pod, reason).iter().map(|e| e.count).sum()
}

/// Applies content `v{n}` and waits until the agent saw the swap (the `n - 1`-th).
async fn change(node: &Node, n: u32) {
    let before = node.metric("reloadlet_volume_swaps_total{plugin=\"configmap\"}");
    node.api
        .apply_configmap(configmap(NS, "c", &[("k", &format!("v{n}"))]));
    eventually("the swap was seen", WAIT, || {
        (node.metric("reloadlet_volume_swaps_total{plugin=\"configmap\"}") > before).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn five_rapid_changes_over_the_threshold_signal_three_times_then_once_after_quiet() {
    // The numbers are 3 per minute; 3 per 5 s keeps the ratio of behaviour (three
    // actions, then held until quiet for the window) and the test short.
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = signal_pod(
        &mut node,
        "flappy",
        &[("reloadlet.io/flap-threshold", "3/5s")],
    )
    .await;
    for n in 2..=4 {
        change(&node, n).await;
        let want = (n - 1) as usize;
        eventually("a signal per change", WAIT, || {
            (signals_in(&out).len() == want).then_some(())
        })
        .await;
    }
    change(&node, 5).await;
    let ev = node.wait_event(NS, "flappy", "ReloadFlapping").await;
    assert_eq!(ev.type_, "Warning");
    assert!(
        ev.note.starts_with("configmap c changed 4 times within 5s"),
        "{}",
        ev.note
    );
    change(&node, 6).await;
    assert_eq!(signals_in(&out).len(), 3, "held while flapping");
    assert_eq!(node.metric("reloadlet_pacing_held_pods"), 1.0);
    // Quiet for 5 s after the last change: one signal on the latest content.
    eventually("one signal after the quiet window", WAIT, || {
        (signals_in(&out).len() == 4).then_some(())
    })
    .await;
    never("more signals", AGENT_QUIET, || signals_in(&out).len() != 4).await;
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}"),
        4.0
    );
    // One Warning per episode (the Event recorder folds repeats into a series: count them).
    assert_eq!(occurrences(&node, "flappy", "ReloadFlapping"), 1);
    assert_eq!(node.metric("reloadlet_pacing_flap_episodes_total"), 1.0);
    assert_eq!(node.metric("reloadlet_pacing_held_pods"), 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eviction_waits_for_the_window_opening_at_the_next_minute() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let (pattern, opens) = next_minute(10);
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v1")]));
    node.api.create_pod(
        pod(NS, "nightly")
            .annotate("reloadlet.io/action", "evict")
            .annotate("reloadlet.io/evict-unowned", "true")
            .annotate("reloadlet.io/window", &pattern)
            .annotate("reloadlet.io/window-duration", "1h")
            .configmap_volume("conf", "c")
            .container(json!({"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/conf").display().to_string()}]}))
            .build(),
    );
    node.wait_running(NS, "nightly").await;
    node.wait_tracked(2).await;
    change(&node, 2).await;
    let ev = node.wait_event(NS, "nightly", "ReloadDeferred").await;
    assert_eq!(ev.type_, "Normal");
    let opening = jiff::Timestamp::from_second(opens as i64).unwrap();
    assert!(
        ev.note.contains(&opening.to_string()),
        "{} / {opening}",
        ev.note
    );
    no_eviction_before(&node, opens).await;
    eventually("evicted once the window opened", WAIT, || {
        (!node.api.evictions().is_empty()).then_some(())
    })
    .await;
    assert_eq!(node.api.evictions().len(), 1, "exactly one eviction");
    assert_eq!(occurrences(&node, "nightly", "ReloadDeferred"), 1);
    assert_eq!(node.metric("reloadlet_pacing_deferrals_total"), 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_min_interval_holds_across_an_agent_restart() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = signal_pod(&mut node, "steady", &[("reloadlet.io/min-interval", "20s")]).await;
    change(&node, 2).await;
    eventually("the first signal", WAIT, || {
        (signals_in(&out).len() == 1).then_some(())
    })
    .await;
    let first = Instant::now();
    change(&node, 3).await;
    let ev = node.wait_event(NS, "steady", "ReloadDeferred").await;
    assert!(ev.note.contains("minimum interval"), "{}", ev.note);
    // The agent restarts while the change waits.
    node.stop_agent().await;
    assert_eq!(
        signals_in(&out).len(),
        1,
        "a deferred change is kept, not acted on at stop"
    );
    node.start_agent(&[]).await;
    eventually("the deferred signal, once", Duration::from_secs(40), || {
        (signals_in(&out).len() == 2).then_some(())
    })
    .await;
    assert!(
        first.elapsed() >= Duration::from_secs(19),
        "no two signals closer than the interval: {:?}",
        first.elapsed()
    );
    never("more signals", AGENT_QUIET, || signals_in(&out).len() != 2).await;
    assert_eq!(
        occurrences(&node, "steady", "ReloadDeferred"),
        1,
        "reported once, before the restart"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_pacing_annotation_warns_and_nothing_is_done() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = signal_pod(&mut node, "typo", &[("reloadlet.io/window", "every night")]).await;
    let ev = node.wait_event(NS, "typo", "InvalidAnnotation").await;
    assert_eq!(ev.type_, "Warning");
    assert!(
        ev.note.contains("reloadlet.io/window") && ev.note.contains("every night"),
        "{}",
        ev.note
    );
    // The positive control: a pod without pacing annotations on the same ConfigMap.
    let control = signal_pod(&mut node, "plain", &[]).await;
    node.wait_tracked(4).await;
    change(&node, 2).await;
    until("the pod beside it without pacing got SIGHUP", WAIT, || {
        signals_in(&control) == ["SIGHUP"]
    })
    .await;
    never(
        "a signal despite a bad pacing annotation",
        AGENT_QUIET,
        || !signals_in(&out).is_empty(),
    )
    .await;
    assert!(node.agent_log().contains("pacing annotation is invalid"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_env_eviction_waits_for_its_window_across_a_controller_restart() {
    let node = Node::start(NodeOptions::default()).await;
    // Far enough ahead for a controller restart in between.
    let (pattern, opens) = next_minute(25);
    node.api
        .apply_configmap(configmap(NS, "app-env", &[("LOG", "info")]));
    let template = serde_json::from_value(json!({
        "metadata": {
            "labels": {"app": "env"},
            "annotations": {
                "reloadlet.io/action": "evict",
                "reloadlet.io/window": pattern,
                "nodesim.reloadlet.io/ready-delay-ms": "200"
            }
        },
        "spec": {"containers": [{"name": "app", "image": "app", "env": [
            {"name": "LOG", "valueFrom": {"configMapKeyRef": {"name": "app-env", "key": "LOG"}}}
        ]}]}
    }))
    .unwrap();
    node.api.create_replicaset(NS, "env", 1, template, NODE);
    let (name, uid) = eventually("the pod runs", WAIT, || {
        let pods = node.api.pods_of_replicaset(NS, "env");
        let p = pods.first()?;
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        running
            .then(|| p.metadata.name.clone().zip(p.metadata.uid.clone()))
            .flatten()
    })
    .await;
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    eventually("the baseline is written", WAIT, || {
        node.pod_annotation(NS, &name, "reloadlet.io/env-baseline")
    })
    .await;
    node.api
        .apply_configmap(configmap(NS, "app-env", &[("LOG", "debug")]));
    let ev = node.wait_event(NS, &name, "ReloadDeferred").await;
    let opening = jiff::Timestamp::from_second(opens as i64).unwrap();
    assert!(ev.note.contains(&opening.to_string()), "{}", ev.note);
    // The controller restarts while the eviction waits: the new one finds the change again
    // from the baseline and defers it to the same window.
    controller.stop().await;
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    no_eviction_before(&node, opens).await;
    eventually(
        "evicted once the window opened",
        Duration::from_secs(30),
        || (!node.api.evictions().is_empty()).then_some(()),
    )
    .await;
    never("a second eviction", AGENT_QUIET, || {
        node.api.evictions().len() > 1
    })
    .await;
    let evictions = node.api.evictions();
    assert_eq!(evictions.len(), 1, "{evictions:?}");
    assert_eq!(evictions[0].uid.as_deref(), Some(uid.as_str()));
    controller.stop().await;
}
