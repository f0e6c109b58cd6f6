//! The flap breaker of env evictions counts per owner (issue #28): a ReplicaSet's pods,
//! evicted and replaced (new UIDs) at every change of a ConfigMap they read through env, in
//! the real controller loop with fakes of every edge and a paused clock.

use super::harness::{self, Harness, PAUSED_MINUTE};
use crate::controller::env::*;
use crate::core::rollout::OwnerRef;
use std::time::Duration;
use test_support::wait::until;

/// A running `action: evict` pod with `flap-threshold: 3/1m`, reading key `LOG` of `app-env`
/// through env, controlled by the ReplicaSet `rs` (none: no controller, and
/// `evict-unowned: "true"`).
fn env_pod(name: &str, rs: Option<&str>) -> PodInfo {
    let mut pod = harness::env_pod(name);
    pod.annotations
        .insert("reloadlet.io/flap-threshold".into(), "3/1m".into());
    pod.has_controller = rs.is_some();
    pod.controller = rs.map(|rs| {
        Box::new(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: rs.into(),
            uid: String::new(),
        })
    });
    if rs.is_none() {
        pod.annotations
            .insert("reloadlet.io/evict-unowned".into(), "true".into());
    }
    pod
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn names(pods: &[PodInfo]) -> Vec<String> {
    sorted(pods.iter().map(|p| p.name.clone()).collect())
}

fn replica_set(round: u32) -> Vec<PodInfo> {
    (0..3)
        .map(|i| env_pod(&format!("web-{round}-{i}"), Some("web-1")))
        .collect()
}

/// Change `round` of the ConfigMap (`v<round>`): waits for the three current pods' evictions,
/// has the ReplicaSet replace them, and lets 10 s pass; the evicted names (sorted) and the
/// replacements.
async fn change_and_replace(
    h: &mut Harness,
    pods: &[PodInfo],
    round: u32,
) -> (Vec<String>, Vec<PodInfo>) {
    h.change(&format!("v{round}")).await;
    let before = h.evicted().len();
    until("a round of evictions", PAUSED_MINUTE, || {
        h.evicted().len() == before + 3
    })
    .await;
    let evicted = sorted(h.evicted()[before..].to_vec());
    let next = replica_set(round);
    h.replace(pods, &next).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    (evicted, next)
}

#[tokio::test(start_paused = true)]
async fn a_replica_set_is_evicted_three_times_then_held_then_once_on_the_latest_content() {
    let mut h = Harness::start();
    let mut pods = replica_set(0);
    h.list(&pods).await;

    // Three changes, 10 s apart: each evicts the three current pods, which are replaced.
    for round in 1..=3u32 {
        let (evicted, next) = change_and_replace(&mut h, &pods, round).await;
        assert_eq!(evicted, names(&pods));
        pods = next;
    }
    assert_eq!(h.evicted().len(), 9);
    assert!(h.flapping().is_empty());

    // The 4th change within the minute would be the 4th action on web-1: held, told once.
    h.change("v4").await;
    until("ReloadFlapping", PAUSED_MINUTE, || !h.flapping().is_empty()).await;
    let flapping = h.flapping();
    assert_eq!(flapping.len(), 1, "{flapping:?}");
    assert!(
        flapping[0].contains("configmap app-env changed 4 times within 1m")
            && flapping[0].contains("ReplicaSet web-1"),
        "{flapping:?}"
    );
    assert_eq!(h.held(), 1, "the held gauge");
    // Each held pod carries the episode for `reloadlet explain`, written once.
    until("the held pods' records", PAUSED_MINUTE, || {
        h.records().len() == 3
    })
    .await;
    let records = h.records();
    for (record, pod) in sorted(records.clone()).iter().zip(&pods) {
        assert!(
            record.starts_with(&format!("{}: {{\"flapping\":{{", pod.name))
                && record.contains(r#""source":"configmap app-env","changes":4"#),
            "{records:?}"
        );
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    // A 5th: still held, not told again, nothing written again.
    h.change("v5").await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(h.evicted().len(), 9, "nothing evicted while flapping");
    assert_eq!(h.flapping().len(), 1);
    assert_eq!(h.records(), records);

    // Quiet for a minute after the 5th change: each pod evicted once, the episode closed.
    until(
        "the evictions after the quiet minute",
        PAUSED_MINUTE,
        || h.evicted().len() == 12,
    )
    .await;
    assert_eq!(sorted(h.evicted()[9..].to_vec()), names(&pods));
    assert_eq!(h.held(), 0);
    // Their records are removed with the hold (an eviction a budget blocks keeps the pod).
    until("the records removed", PAUSED_MINUTE, || {
        h.records().len() == 6
    })
    .await;
    let removed: Vec<String> = pods.iter().map(|p| format!("{}: ", p.name)).collect();
    assert_eq!(sorted(h.records()[3..].to_vec()), removed);
    // The replacements start on the latest content: nothing more happens.
    let last = replica_set(4);
    h.replace(&pods, &last).await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(h.evicted().len(), 12);
    assert_eq!(h.flapping().len(), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn owners_are_independent_and_a_pod_without_one_counts_for_itself() {
    let mut h = Harness::start();
    // Two ReplicaSets' pods and a bare pod read the same key.
    let web = env_pod("web", Some("web-1"));
    let api = env_pod("api", Some("api-1"));
    let bare = env_pod("bare", None);
    let mut pods = vec![web, api, bare];
    h.list(&pods).await;
    // Three changes: each evicts all three (each owner counts its own).
    for round in 1..=3u32 {
        h.change(&format!("v{round}")).await;
        let before = h.evicted().len();
        until("a round of evictions", PAUSED_MINUTE, || {
            h.evicted().len() == before + 3
        })
        .await;
        let next: Vec<PodInfo> = pods
            .iter()
            .map(|p| {
                let rs = p.controller.as_ref().map(|o| o.name.clone());
                // A bare pod's replacement is another pod (created anew by its user).
                env_pod(&format!("{}-{round}", p.name), rs.as_deref())
            })
            .collect();
        h.replace(&pods, &next).await;
        pods = next;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    // The 4th: both ReplicaSets are held (one Event each); the new bare pod has no history.
    h.change("v4").await;
    until("ReloadFlapping", PAUSED_MINUTE, || h.flapping().len() == 2).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.evicted().len(), 10);
    assert_eq!(h.evicted()[9], pods[2].name);
    let flapping = sorted(h.flapping());
    assert!(
        flapping[0].contains("ReplicaSet api-1") && flapping[1].contains("ReplicaSet web-1"),
        "{flapping:?}"
    );
    assert_eq!(h.held(), 2);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_source_back_at_what_the_pods_run_evicts_nothing_when_the_episode_closes() {
    let mut h = Harness::start();
    let mut pods = replica_set(0);
    h.list(&pods).await;
    for round in 1..=3u32 {
        pods = change_and_replace(&mut h, &pods, round).await.1;
    }
    // Held at v4; then back to v3, which the pods run.
    h.change("v4").await;
    until("ReloadFlapping", PAUSED_MINUTE, || !h.flapping().is_empty()).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    h.change("v3").await;
    // Well past the quiet minute: nothing evicted, the episode closed, the records removed.
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert_eq!(h.evicted().len(), 9);
    assert_eq!(h.held(), 0);
    let records = h.records();
    assert_eq!(records.len(), 6, "{records:?}");
    let removed: Vec<String> = pods.iter().map(|p| format!("{}: ", p.name)).collect();
    assert_eq!(sorted(records[3..].to_vec()), removed);
    // The next change is acted on at once.
    h.change("v5").await;
    until("a round of evictions", PAUSED_MINUTE, || {
        h.evicted().len() == 12
    })
    .await;
    assert_eq!(sorted(h.evicted()[9..].to_vec()), names(&pods));
    assert_eq!(h.flapping().len(), 1);
    h.stop().await;
}
