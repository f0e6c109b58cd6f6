//! Env evictions that pacing refused or held are not lost: one refused for an invalid pacing
//! annotation is acted on as soon as the annotation is fixed (issue #28: "no action on that
//! pod until it is fixed"), and one held by the replica that loses and regains the leadership
//! is found again — in the real controller loop with fakes of every edge and a paused clock.

use super::harness::{env_pod, Harness};
use crate::controller::env::*;
use crate::core::annotations::ENV_BASELINE;
use crate::ports::Input;
use std::time::Duration;

/// [`env_pod`] with a controlling owner and these pacing annotations.
fn paced_pod(name: &str, pacing: &[(&str, &str)]) -> PodInfo {
    let mut pod = env_pod(name);
    pod.has_controller = true;
    for (k, v) in pacing {
        pod.annotations.insert((*k).into(), (*v).into());
    }
    pod
}

#[tokio::test(start_paused = true)]
async fn a_refused_env_eviction_runs_once_when_the_pacing_annotation_is_fixed() {
    let mut h = Harness::start();
    // Two pods reading the same key: one with a bad annotation, one without trouble.
    let bad = paced_pod("bad", &[("reloadlet.io/min-interval", "banana")]);
    let good = paced_pod("good", &[("reloadlet.io/min-interval", "0s")]);
    h.list(&[bad.clone(), good.clone()]).await;
    assert_eq!(h.events.reasons(), ["InvalidAnnotation"]);

    // The key changes: the good pod is evicted, the bad one refused.
    h.change("debug").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.evicted(), ["good"]);
    let reads = h.api.reads.lock().unwrap().len();

    // The annotation is fixed (as the API holds the pod now: its baseline never moved): the
    // change is found again and the pod evicted once; the other pod is not evicted again.
    let mut fixed = bad.clone();
    fixed
        .annotations
        .insert("reloadlet.io/min-interval".into(), "1m".into());
    let written = h.patcher.baseline_writes();
    let (_, _, baseline) = written.iter().rev().find(|(_, n, _)| n == "bad").unwrap();
    fixed
        .annotations
        .insert(ENV_BASELINE.into(), baseline.clone());
    h.tx.send(Input::PodApplied(fixed.clone())).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.evicted(), ["good", "bad"]);
    assert_eq!(h.api.reads.lock().unwrap().len(), reads + 1, "one GET");
    // Seen again unchanged: nothing more.
    h.tx.send(Input::PodApplied(fixed)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.evicted(), ["good", "bad"]);
    assert_eq!(
        h.events.reasons(),
        [
            "InvalidAnnotation",
            "EvictionRequested",
            "EvictionRequested"
        ]
    );
    h.stop().await;
}

/// A held env eviction is found again when the replica that held it loses and regains the
/// leadership (its baseline never moved; the tracker forgets it had asked for it).
#[tokio::test(start_paused = true)]
async fn a_held_env_eviction_is_found_again_after_leadership_is_lost_and_regained() {
    let mut h = Harness::start();
    // A maintenance window at 03:00 for a minute: the eviction waits for it.
    let held = paced_pod(
        "held",
        &[
            ("reloadlet.io/window", "0 3 * * *"),
            ("reloadlet.io/window-duration", "1m"),
        ],
    );
    h.list(&[held]).await;
    h.change("debug").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.events.reasons(), ["ReloadDeferred"]);
    // The pod's record says held until the window opens (`reloadlet status`: pending until T).
    let (_, _, value) = h
        .patcher
        .applied_writes()
        .last()
        .cloned()
        .expect("a record");
    let record = crate::core::status::applied::Applied::parse(&value).unwrap();
    let entry = &record.objects[0];
    assert_eq!(
        entry.result,
        crate::core::status::applied::Recorded::Deferred
    );
    assert!(
        entry
            .until
            .is_some_and(|t| t.to_string().ends_with("T03:00:00Z")),
        "{entry:?}"
    );

    // Another replica leads for a while, then this one again: the change is held again and
    // the pod evicted once, when the window opens (within a day).
    h.tx.send(Input::Leader(false)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.tx.send(Input::Leader(true)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(h.evicted().is_empty(), "nothing evicted outside the window");
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(h.evicted(), ["held"], "evicted once, in the window");
    h.stop().await;
}
