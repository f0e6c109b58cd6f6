//! Rollouts paced per workload, in the real controller loop under a paused clock: what a
//! user sees — how often the workload is patched, when, and the Events.

use super::*;
use crate::core::pacing::{PacingDefaults, PacingRecord, WallClock, ROLLOUT_PACING};
use crate::core::status::applied::Recorded;
use serde_json::json;

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

/// A controller started `elapsed` after the first one (its wall clock goes on from there),
/// over the same cluster.
fn restarted(
    api: Arc<FakeEnvApi>,
    workloads: Arc<FakeWorkloads>,
    defaults: PacingDefaults,
    elapsed: Duration,
) -> Harness {
    let wall: jiff::Timestamp = NOW.parse().unwrap();
    let wall = wall.checked_add(elapsed).unwrap();
    let clock = WallClock::new(wall, tokio::time::Instant::now().into_std());
    start_with(api, workloads, FakePatcher::default(), false, |f| {
        f.with_pacing_clock(defaults, clock)
    })
}

/// `h` stops and a new controller starts over the same cluster, `t0.elapsed()` later on the
/// wall clock, nothing in memory; the pods are listed as the API holds them now (with the
/// baselines the first one wrote).
async fn restart(
    h: Harness,
    pods: &[PodInfo],
    api: &Arc<FakeEnvApi>,
    workloads: &Arc<FakeWorkloads>,
    t0: tokio::time::Instant,
) -> Harness {
    let survivors = with_baselines(&h, pods);
    h.stop().await;
    let h = restarted(
        api.clone(),
        workloads.clone(),
        PacingDefaults::default(),
        t0.elapsed(),
    );
    h.list(survivors).await;
    h
}

/// The pacing record written on the workload last (with a rollout or on its own).
fn record(workloads: &FakeWorkloads) -> PacingRecord {
    let patches = workloads.patches.lock().unwrap();
    let value = patches
        .iter()
        .rev()
        .find_map(|(_, p)| p["metadata"]["annotations"][ROLLOUT_PACING].as_str())
        .expect("a pacing record");
    PacingRecord::parse(value).unwrap()
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

/// The clock starts at 12:00 UTC; this window opens at 12:10 for 10 minutes.
const WINDOW_AT_12_10: &[(&str, &str)] = &[
    ("reloadlet.io/window", "10 12 * * *"),
    ("reloadlet.io/window-duration", "10m"),
];

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
    // The rollout's own patch carries the workload's pacing record.
    let first = &h.workloads.patched()[0].1;
    let written = PacingRecord::parse(
        first["metadata"]["annotations"][ROLLOUT_PACING]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(written.rollouts.len(), 1);
    assert!(written.deferred.is_none() && written.flapping.is_none());
    assert!(h.workloads.annotated().is_empty(), "no extra write");
    // Two more changes inside the interval: one deferral, told once, nothing rolled.
    h.change("cfg", "3", &[("app.conf", "v3")]).await;
    h.change("app-env", "2", &[("LOG", "debug"), ("PORT", "80")])
        .await;
    assert_eq!(h.workloads.patched().len(), 1);
    // The deferral is recorded once, by one metadata-only patch, when it begins.
    let annotated = h.workloads.annotated();
    assert_eq!(annotated.len(), 1, "{annotated:?}");
    let deferred = record(&h.workloads).deferred.unwrap();
    assert_eq!(deferred.why, "minimum interval");
    assert!(deferred.until.to_string().starts_with("2026-11-26T12:10:0"));
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
    let (pods, workloads) = web(WINDOW_AT_12_10);
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
    // Each asking pod's record says held until then (`reloadlet status`: pending until 12:10).
    let held = super::recorded::last_entries(&h);
    assert!(!held.is_empty());
    for e in held.values() {
        assert_eq!(e.result, Recorded::Deferred, "{e:?}");
        assert_eq!(
            e.until.map(|t| t.to_string()).as_deref(),
            Some("2026-11-26T12:10:00Z")
        );
    }
    // 12:00:06 now.
    tokio::time::sleep(Duration::from_secs(9 * 60)).await;
    assert!(h.workloads.patched().is_empty(), "not before 12:10");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    // Then in progress.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rolled = super::recorded::last_entries(&h);
    assert_eq!(rolled.len(), held.len());
    assert!(
        rolled
            .values()
            .all(|e| e.result == Recorded::RolloutRequested),
        "{rolled:?}"
    );
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
    let t0 = tokio::time::Instant::now();
    let h = paced_over(api.clone(), workloads.clone(), PacingDefaults::default());
    h.list(pods.clone()).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    // Rolled at about 12:00:04 (the record's time; the harness's restartedAt says 12:00:00).
    assert_eq!(workloads.patched().len(), 1);
    // A new leader, nothing in memory; the workload says when it was rolled.
    let h = restart(h, &pods, &api, &workloads, t0).await;
    h.change("cfg", "3", &[("app.conf", "v3")]).await;
    assert_eq!(workloads.patched().len(), 1, "the interval still holds");
    let events = h.events();
    assert_eq!(reasons(&h), ["ReloadDeferred"], "{events:?}");
    assert!(
        events[0].2.contains("until 2026-11-26T12:10:0"),
        "{events:?}"
    );
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    assert_eq!(workloads.patched().len(), 2, "once, when it ends");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_min_interval_holds_across_a_restart_from_the_template_alone() {
    // A workload rolled by something else (`kubectl rollout restart`): no record of ours,
    // the template's restartedAt (12:00:00) is the last rollout.
    let (pods, workloads) = web(&[("reloadlet.io/min-interval", "10m")]);
    let w = WorkloadRef {
        kind: WorkloadKind::Deployment,
        namespace: NS.into(),
        name: "web".into(),
    };
    workloads.patches.lock().unwrap().push((
        w,
        json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: NOW}}}}}),
    ));
    let h = paced(workloads, PacingDefaults::default());
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    let events = h.events();
    assert_eq!(reasons(&h), ["ReloadDeferred"], "{events:?}");
    assert!(
        events[0].2.contains("until 2026-11-26T12:10:00Z"),
        "{events:?}"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_rollout_deferred_to_its_window_stays_deferred_across_a_restart() {
    let (pods, workloads) = web(WINDOW_AT_12_10);
    let api = objects();
    let t0 = tokio::time::Instant::now();
    let h = paced_over(api.clone(), workloads.clone(), PacingDefaults::default());
    h.list(pods.clone()).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert_eq!(reasons(&h), ["ReloadDeferred"]);
    assert_eq!(workloads.annotated().len(), 1);

    // The new leader finds the change again (the baselines did not move) and defers it to
    // the same time, without announcing it again (the workload's record says it was).
    let h = restart(h, &pods, &api, &workloads, t0).await;
    assert!(workloads.patched().is_empty());
    let events = h.events();
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(workloads.annotated().len(), 1, "nothing written again");
    tokio::time::sleep(Duration::from_secs(8 * 60)).await;
    assert!(workloads.patched().is_empty(), "not before 12:10");
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    assert_eq!(workloads.patched().len(), 1, "once, in the window");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_flapping_episode_stays_open_across_a_restart_then_rolls_once_when_quiet() {
    let (pods, workloads) = web(&[("reloadlet.io/flap-threshold", "2/10m")]);
    let api = objects();
    let t0 = tokio::time::Instant::now();
    let h = paced_over(api.clone(), workloads.clone(), PacingDefaults::default());
    h.list(pods.clone()).await;
    for (rv, v) in [("2", "v2"), ("3", "v3"), ("4", "v4")] {
        h.change("cfg", rv, &[("app.conf", v)]).await;
    }
    assert_eq!(workloads.patched().len(), 2);
    assert_eq!(
        reasons(&h)
            .iter()
            .filter(|r| **r == "ReloadFlapping")
            .count(),
        1
    );
    let episode = record(&workloads)
        .flapping
        .expect("the episode is recorded");
    assert_eq!(
        (episode.source.as_str(), episode.changes),
        ("configmap cfg", 3)
    );
    // A new leader finds the held change again and the source keeps changing: the episode
    // is still open — nothing rolled, no second Warning, nothing written.
    let h = restart(h, &pods, &api, &workloads, t0).await;
    h.change("cfg", "5", &[("app.conf", "v5")]).await;
    assert_eq!(workloads.patched().len(), 2, "held");
    let events = h.events();
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(workloads.annotated().len(), 1);
    // Quiet for the flap window: one rollout, the episode closed (the record says so).
    tokio::time::sleep(Duration::from_secs(9 * 60)).await;
    assert_eq!(workloads.patched().len(), 2, "not before quiet");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(workloads.patched().len(), 3);
    assert!(record(&workloads).flapping.is_none());
    tokio::time::sleep(Duration::from_secs(30 * 60)).await;
    assert_eq!(workloads.patched().len(), 3, "once");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_flap_breaker_counts_the_rollouts_made_before_a_restart() {
    let (pods, workloads) = web(&[("reloadlet.io/flap-threshold", "3/10m")]);
    let api = objects();
    let t0 = tokio::time::Instant::now();
    let h = paced_over(api.clone(), workloads.clone(), PacingDefaults::default());
    h.list(pods.clone()).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    h.change("cfg", "3", &[("app.conf", "v3")]).await;
    assert_eq!(workloads.patched().len(), 2);
    assert_eq!(record(&workloads).rollouts.len(), 2);
    // The template keeps only the last restart; the record has both: the third rollout is
    // allowed, the fourth change opens the episode (not the fifth).
    let h = restart(h, &pods, &api, &workloads, t0).await;
    h.change("cfg", "4", &[("app.conf", "v4")]).await;
    assert_eq!(workloads.patched().len(), 3);
    h.change("cfg", "5", &[("app.conf", "v5")]).await;
    assert_eq!(workloads.patched().len(), 3, "held as flapping");
    let events = h.events();
    let flapping: Vec<_> = events.iter().filter(|e| e.1 == "ReloadFlapping").collect();
    assert_eq!(flapping.len(), 1, "{events:?}");
    assert!(flapping[0].2.contains("changed 4 times"), "{flapping:?}");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_garbled_pacing_record_is_ignored() {
    let (pods, workloads) = web(&[("reloadlet.io/min-interval", "10m")]);
    workloads.annotations.lock().unwrap().insert(
        WorkloadRef {
            kind: WorkloadKind::Deployment,
            namespace: NS.into(),
            name: "web".into(),
        },
        [(ROLLOUT_PACING.to_owned(), "{not json".to_owned())].into(),
    );
    let h = paced(workloads, PacingDefaults::default());
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert_eq!(
        h.workloads.patched().len(),
        1,
        "rolled as if nothing were recorded"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_rollout_refused_for_an_invalid_pacing_annotation_runs_once_when_it_is_fixed() {
    let (pods, workloads) = web(&[("reloadlet.io/min-interval", "banana")]);
    // Another Deployment reading the same ConfigMap, without pacing annotations.
    workloads.deployment_pod(NS, "api-a", "api", Strategy::deployment_default(1));
    let mut all = pods.clone();
    all.push(pod("api-a"));
    let h = paced(workloads, PacingDefaults::default());
    h.list(all).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    let rolled = |h: &Harness| -> Vec<String> {
        h.workloads
            .patched()
            .into_iter()
            .map(|(w, _)| w.name)
            .collect()
    };
    assert_eq!(rolled(&h), ["api"]);
    assert_eq!(
        reasons(&h),
        ["InvalidAnnotation", "InvalidAnnotation", "RolloutRequested"]
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        rolled(&h),
        ["api"],
        "nothing while the annotation is invalid"
    );

    // Fixed on the pods (their baselines never moved): the change is found again and the
    // workload rolled once; the other Deployment is not rolled again.
    let reads = h.api.reads.lock().unwrap().len();
    for p in with_baselines(&h, &pods) {
        let p = with(p, "reloadlet.io/min-interval", "1m");
        h.workloads.templates_from(std::slice::from_ref(&p));
        h.tx.send(Input::PodApplied(p)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rolled(&h), ["api", "web"]);
    // One GET per object a fixed pod reads (cfg, app-env), per pod at most.
    assert!(h.api.reads.lock().unwrap().len() <= reads + 4);
    tokio::time::sleep(Duration::from_secs(20 * 60)).await;
    assert_eq!(rolled(&h), ["api", "web"], "once");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_held_rollout_is_found_again_when_this_replica_leads_again() {
    let (pods, workloads) = web(WINDOW_AT_12_10);
    let h = paced(workloads, PacingDefaults::default());
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert_eq!(reasons(&h), ["ReloadDeferred"]);
    // Another replica leads for a minute, then this one again: the pods' baselines never
    // moved, so the held rollout is found again and runs once, when the window opens.
    h.tx.send(Input::Leader(false)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    h.tx.send(Input::Leader(true)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    assert!(h.workloads.patched().is_empty(), "not before 12:10");
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    assert_eq!(h.workloads.patched().len(), 1, "rolled once, in the window");
    h.stop().await;
}
