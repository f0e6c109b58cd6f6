//! The feature in the router, on tokio's paused clock: counts after the recount delay (not
//! before: bounded work), from the publisher's versions, none once leadership is lost.

use super::*;
use crate::core::model::{PodInfo, SourceRef};
use crate::core::status::data_version::Published;
use crate::core::volume_digest::HashKey;
use crate::ports::{Input, ObjectKey};
use prometheus_client::registry::Registry;
use test_support::wait::until;
use tokio_util::sync::CancellationToken;

fn app() -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: "app".into(),
    }
}

fn key() -> ObjectKey {
    ObjectKey {
        kind: SourceKind::ConfigMap,
        namespace: "web".into(),
        name: "app".into(),
    }
}

fn reader(uid: &str, action: Option<&str>, started: jiff::Timestamp) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        annotations: action
            .map(|a| ("reloadlet.io/action".to_owned(), a.to_owned()))
            .into_iter()
            .collect(),
        started: Some(started),
        ..crate::core::model::test_pods::mounting("web", uid, app())
    }
}

fn line(registry: &std::sync::Mutex<Registry>, state: &str) -> Option<String> {
    let text = crate::serve::metrics::encode(&registry.lock().unwrap());
    let prefix = format!("reloadlet_consumers{{namespace=\"web\",state=\"{state}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
}

#[tokio::test(start_paused = true)]
async fn counts_follow_the_pods_and_versions_after_the_recount_delay_and_only_while_leading() {
    let mut registry = Registry::with_prefix("reloadlet");
    let metrics = ConsumerMetrics::new(&mut registry, false);
    let registry = std::sync::Mutex::new(registry);
    let versions = PublishedVersions::default();
    let stop = CancellationToken::new();
    let feature = ConsumerStates::new(metrics, versions.clone(), false, false);
    let (tx, task) = crate::controller::fake::run_alone(Box::new(feature), &stop);
    let t0: jiff::Timestamp = "2026-11-29T09:00:00Z".parse().unwrap();
    let t1: jiff::Timestamp = "2026-11-29T09:05:00Z".parse().unwrap();
    tx.send(Input::PodsListed(vec![
        reader("signalled", Some("signal"), t0),
        reader("plain", None, t0),
    ]))
    .await
    .unwrap();
    // No version published yet: both wait for the controller.
    until("both pending", RECOUNT_AFTER * 2, || {
        line(&registry, "pending").as_deref() == Some("2")
    })
    .await;
    assert_eq!(
        line(&registry, "current").as_deref(),
        Some("0"),
        "each state at 0"
    );

    // The publisher reads the object: data first seen at t1, after both pods started.
    let published = Published::of(
        &HashKey::from_bytes([1; 32]),
        "web",
        &app(),
        [("k", b"v".as_slice())],
        t1,
    );
    versions.set(&key(), Some(published));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        line(&registry, "pending").as_deref(),
        Some("2"),
        "not recounted at once: a change waits for the recount"
    );
    until("one pending, one not reloaded", RECOUNT_AFTER, || {
        line(&registry, "pending").as_deref() == Some("1")
            && line(&registry, "not_reloaded").as_deref() == Some("1")
    })
    .await;

    // The signalled pod restarts after the change: current.
    tx.send(Input::PodApplied(reader("signalled", Some("signal"), t1)))
        .await
        .unwrap();
    until("one current, none pending", RECOUNT_AFTER * 2, || {
        line(&registry, "current").as_deref() == Some("1")
            && line(&registry, "pending").as_deref() == Some("0")
    })
    .await;

    // Leadership lost: no series (the new leader's are the counts).
    tx.send(Input::Leader(false)).await.unwrap();
    until("no series", RECOUNT_AFTER, || {
        line(&registry, "current").is_none()
    })
    .await;
    stop.cancel();
    let _ = task.await;
}
