//! Rollouts paced per workload, in the real controller loop under a paused clock: what a
//! user sees — how often the workload is patched, when, and the Events.

use super::*;
use crate::core::pacing::{PacingDefaults, WallClock};

/// The wall time the paused clock starts from: 12:00:00 UTC.
fn paced(workloads: Arc<FakeWorkloads>, defaults: PacingDefaults) -> Harness {
    paced_over(objects(), workloads, defaults)
}

/// [`paced`] over the objects of `api` (a controller restarted over the same cluster).
fn paced_over(
    api: Arc<FakeEnvApi>,
    workloads: Arc<FakeWorkloads>,
    defaults: PacingDefaults,
) -> Harness {
    let clock = WallClock::new(NOW.parse().unwrap(), tokio::time::Instant::now().into_std());
    start_with(api, workloads, FakePatcher::default(), false, |f| {
        f.with_pacing_clock(defaults, clock)
    })
}

/// `pods` as the API holds them now: with the baselines the controller wrote.
fn with_baselines(h: &Harness, pods: &[PodInfo]) -> Vec<PodInfo> {
    let written = h.patcher.rollout_baselines();
    pods.iter()
        .map(
            |p| match written.iter().rev().find(|(_, n, _)| *n == p.name) {
                Some((_, _, v)) => with(p.clone(), ROLLOUT_BASELINE, v),
                None => p.clone(),
            },
        )
        .collect()
}

/// Two pods of Deployment `web`, both carrying the template's `annotations`.
fn web(annotations: &[(&str, &str)]) -> (Vec<PodInfo>, Arc<FakeWorkloads>) {
    let workloads = Arc::new(FakeWorkloads::default());
    let pods = ["web-a", "web-b"]
        .iter()
        .map(|n| {
            workloads.deployment_pod(NS, n, "web", Strategy::deployment_default(2));
            annotations.iter().fold(pod(n), |p, (k, v)| with(p, k, v))
        })
        .collect();
    (pods, workloads)
}

fn reasons(h: &Harness) -> Vec<&'static str> {
    h.events().into_iter().map(|e| e.1).collect()
}

#[tokio::test(start_paused = true)]
async fn a_min_interval_holds_the_second_rollout_until_it_ends_then_rolls_once() {
    let (pods, workloads) = web(&[("reloadlet.io/min-interval", "10m")]);
    let h = paced(workloads, PacingDefaults::default());
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert_eq!(h.workloads.patched().len(), 1);
    // Two more changes inside the interval: one deferral, told once, nothing rolled.
    h.change("cfg", "3", &[("app.conf", "v3")]).await;
    h.change("app-env", "2", &[("LOG", "debug"), ("PORT", "80")])
        .await;
    assert_eq!(h.workloads.patched().len(), 1);
    let events = h.events();
    let deferred: Vec<_> = events.iter().filter(|e| e.1 == "ReloadDeferred").collect();
    assert_eq!(deferred.len(), 1, "{events:?}");
    assert!(
        deferred[0].2.contains("Deployment ns/web") && deferred[0].2.contains("2026-11-26T12:10:0"),
        "{deferred:?}"
    );
    // The interval ends (10 m after the first rollout, at about 12:10:04): one rollout for
    // both changes.
    tokio::time::sleep(Duration::from_secs(9 * 60)).await;
    assert_eq!(h.workloads.patched().len(), 1, "not before 12:10");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 2, "{patched:?}");
    let cause = patched[1].1.to_string();
    assert!(
        cause.contains("configmap/cfg") && cause.contains("configmap/app-env"),
        "{cause}"
    );
    tokio::time::sleep(Duration::from_secs(20 * 60)).await;
    assert_eq!(h.workloads.patched().len(), 2, "once");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_rollout_waits_for_its_maintenance_window() {
    // 12:00 UTC; the window opens at 12:10 for 10 minutes.
    let (pods, workloads) = web(&[
        ("reloadlet.io/window", "10 12 * * *"),
        ("reloadlet.io/window-duration", "10m"),
    ]);
    let h = paced(workloads, PacingDefaults::default());
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert!(h.workloads.patched().is_empty());
    assert_eq!(reasons(&h), ["ReloadDeferred"]);
    assert!(
        h.events()[0].2.contains("maintenance window"),
        "{:?}",
        h.events()
    );
    // 12:00:06 now.
    tokio::time::sleep(Duration::from_secs(9 * 60)).await;
    assert!(h.workloads.patched().is_empty(), "not before 12:10");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_flapping_source_is_held_after_the_threshold_then_rolled_once_when_quiet() {
    let (pods, workloads) = web(&[("reloadlet.io/flap-threshold", "2/10m")]);
    let h = paced(workloads, PacingDefaults::default());
    h.list(pods).await;
    for (rv, v) in [("2", "v2"), ("3", "v3"), ("4", "v4"), ("5", "v5")] {
        h.change("cfg", rv, &[("app.conf", v)]).await;
    }
    assert_eq!(h.workloads.patched().len(), 2);
    let flapping: Vec<_> = h
        .events()
        .into_iter()
        .filter(|e| e.1 == "ReloadFlapping")
        .collect();
    assert_eq!(flapping.len(), 1, "{flapping:?}");
    assert!(
        flapping[0].2.contains("configmap cfg changed 3 times"),
        "{flapping:?}"
    );
    // Quiet for the flap window after the last change: one rollout, the episode closed.
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    assert_eq!(h.workloads.patched().len(), 3);
    tokio::time::sleep(Duration::from_secs(30 * 60)).await;
    assert_eq!(h.workloads.patched().len(), 3);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pods_own_debounce_replaces_the_coalescing_second() {
    let (pods, workloads) = web(&[("reloadlet.io/debounce", "30s")]);
    let h = paced(workloads, PacingDefaults::default());
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    h.change("cfg", "3", &[("app.conf", "v3")]).await;
    assert!(h.workloads.patched().is_empty(), "still debouncing");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    assert!(h.events().iter().all(|e| e.1 == "RolloutRequested"));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_pacing_annotation_is_warned_about_and_nothing_rolls() {
    let (pods, workloads) = web(&[("reloadlet.io/min-interval", "soon")]);
    let h = paced(workloads, PacingDefaults::default());
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(h.workloads.patched().is_empty());
    let events = h.events();
    assert_eq!(
        reasons(&h),
        ["InvalidAnnotation", "InvalidAnnotation"],
        "{events:?}"
    );
    assert!(
        events[0].2.contains("reloadlet.io/min-interval") && events[0].2.contains("soon"),
        "{events:?}"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_min_interval_holds_across_a_controller_restart() {
    let (pods, workloads) = web(&[("reloadlet.io/min-interval", "10m")]);
    let api = objects();
    let h = paced_over(api.clone(), workloads.clone(), PacingDefaults::default());
    h.list(pods.clone()).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    // Rolled at 12:00:00 (the harness's restartedAt).
    assert_eq!(workloads.patched().len(), 1);
    let survivors = with_baselines(&h, &pods);
    h.stop().await;

    // A new leader, nothing in memory; the workload's template says when it was rolled.
    let h = paced_over(api.clone(), workloads.clone(), PacingDefaults::default());
    h.list(survivors).await;
    h.change("cfg", "3", &[("app.conf", "v3")]).await;
    assert_eq!(workloads.patched().len(), 1, "the interval still holds");
    let events = h.events();
    assert_eq!(reasons(&h), ["ReloadDeferred"], "{events:?}");
    assert!(
        events[0].2.contains("until 2026-11-26T12:10:00Z"),
        "{events:?}"
    );
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    assert_eq!(workloads.patched().len(), 2, "once, when it ends");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_rollout_deferred_to_its_window_stays_deferred_across_a_restart() {
    let (pods, workloads) = web(&[
        ("reloadlet.io/window", "10 12 * * *"),
        ("reloadlet.io/window-duration", "10m"),
    ]);
    let api = objects();
    let h = paced_over(api.clone(), workloads.clone(), PacingDefaults::default());
    h.list(pods.clone()).await;
    let listed = with_baselines(&h, &pods);
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert_eq!(reasons(&h), ["ReloadDeferred"]);
    h.stop().await;

    // The new leader finds the change again (the baselines did not move) and defers it too.
    let h = paced_over(api.clone(), workloads.clone(), PacingDefaults::default());
    h.list(listed).await;
    assert!(workloads.patched().is_empty());
    assert_eq!(reasons(&h), ["ReloadDeferred"]);
    tokio::time::sleep(Duration::from_secs(8 * 60)).await;
    assert!(workloads.patched().is_empty(), "not before 12:10");
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    assert_eq!(workloads.patched().len(), 1, "once, in the window");
    h.stop().await;
}
