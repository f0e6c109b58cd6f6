//! What the controller records on an env consumer (`reloadlet.io/applied`, issue #46 §2): a
//! blocked eviction (pending, waiting for a budget), a failed one (failed, with the reason),
//! once per outcome, with the data version it published; nothing for an eviction that went
//! through (the pod is gone).

use super::harness::*;
use crate::core::model::{PodInfo, SourceKind, SourceRef};
use crate::core::status::applied::{Applied, Recorded};
use crate::core::status::consumers::consumer;
use crate::core::status::data_version::Published;
use crate::core::status::state::{derive, Facts, Pending, State};
use crate::ports::EvictOutcome;
use test_support::wait::until;

pub(super) fn published(log: &str) -> Published {
    let source = SourceRef {
        kind: SourceKind::ConfigMap,
        name: "app-env".into(),
    };
    let since = jiff::Timestamp::from_second(1_700_000_000).unwrap();
    let k = crate::core::volume_digest::HashKey::from_bytes([7; 32]);
    let d = data(log);
    Published::of(
        &k,
        NS,
        &source,
        crate::controller::data_version::pairs(&d),
        since,
    )
}

/// An env consumer that may be evicted (its owner is not modelled here).
fn owned_pod(name: &str) -> PodInfo {
    let mut pod = env_pod(name);
    pod.annotations
        .insert("reloadlet.io/evict-unowned".into(), "true".into());
    pod
}

fn blocked() -> Option<EvictOutcome> {
    Some(EvictOutcome::Blocked {
        cause: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        retry_after: None,
    })
}

/// The state `reloadlet status` derives from the last record written on `pod`.
pub(super) fn state(h: &Harness, pod: &PodInfo, published: &Published) -> (Applied, State) {
    let (_, _, value) = h.patcher.applied_writes().last().cloned().unwrap();
    let record = Applied::parse(&value).unwrap();
    let source = &pod.env[0].source;
    let c = consumer(pod, source).unwrap();
    let facts = Facts {
        published: Some(published),
        record: record.get(source),
        started: None,
        phase: "Running",
        env_held: None,
    };
    let state = derive(&c, &facts);
    (record, state)
}

#[tokio::test(start_paused = true)]
async fn a_blocked_eviction_is_recorded_once_as_waiting_for_a_budget_and_its_success_not_at_all() {
    let mut h = Harness::start();
    let pod = owned_pod("web-1");
    h.list(std::slice::from_ref(&pod)).await;
    // Blocked three times, then evicted.
    h.evictor.script.lock().unwrap().extend([
        blocked(),
        blocked(),
        blocked(),
        Some(EvictOutcome::Evicted),
    ]);
    h.versions.set(&key(), Some(published("v1")));
    h.change("v1").await;
    until("the blocked eviction's record", PAUSED_MINUTE, || {
        !h.patcher.applied_writes().is_empty()
    })
    .await;
    let (record, state) = state(&h, &pod, &published("v1"));
    let entry = &record.objects[0];
    assert_eq!(
        (entry.by.as_str(), entry.action.as_str(), entry.result),
        ("controller", "evict", Recorded::Blocked)
    );
    assert!(entry.version.is_some(), "the published version: {entry:?}");
    assert_eq!(state, State::Pending(Pending::Budget));
    // The retries are blocked again (no write), then the eviction goes through (no record).
    until("the eviction", PAUSED_MINUTE, || h.evictor.calls() == 4).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(
        h.patcher.applied_writes().len(),
        1,
        "one write for the block, none for its repeats or for the eviction"
    );
}

/// The publisher may publish the new data's version a moment after the env feature asked for
/// the eviction, so the first record of the block can name the old version (status: not
/// this data's). The record follows each retry — one write when it changed, none otherwise —
/// though the Warning waits for `warn_every`.
#[tokio::test(start_paused = true)]
async fn a_blocked_evictions_record_follows_the_version_published_after_it() {
    let mut h = Harness::start();
    let pod = owned_pod("web-1");
    h.list(std::slice::from_ref(&pod)).await;
    h.evictor.script.lock().unwrap().extend([
        blocked(),
        blocked(),
        blocked(),
        Some(EvictOutcome::Evicted),
    ]);
    // Not published yet: the controller still holds the old data's version.
    h.versions.set(&key(), Some(published("v1")));
    h.change("v2").await;
    until("the block's first record", PAUSED_MINUTE, || {
        !h.patcher.applied_writes().is_empty()
    })
    .await;
    let (_, first) = state(&h, &pod, &published("v2"));
    assert_ne!(first, State::Pending(Pending::Budget), "{first:?}");
    // Published; the next retry records it.
    h.versions.set(&key(), Some(published("v2")));
    until("the retry's record", PAUSED_MINUTE, || {
        h.patcher.applied_writes().len() == 2
    })
    .await;
    let (_, state_now) = state(&h, &pod, &published("v2"));
    assert_eq!(state_now, State::Pending(Pending::Budget));
    // The third block says nothing new: no write; nor does the eviction.
    until("the eviction", PAUSED_MINUTE, || h.evictor.calls() == 4).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(h.patcher.applied_writes().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_eviction_is_recorded_as_failed_with_the_reason() {
    let mut h = Harness::start();
    let pod = owned_pod("web-1");
    h.list(std::slice::from_ref(&pod)).await;
    h.evictor
        .script
        .lock()
        .unwrap()
        .push_back(Some(EvictOutcome::Failed {
            code: Some(500),
            message: "etcd is down".into(),
        }));
    h.versions.set(&key(), Some(published("v1")));
    h.change("v1").await;
    until("the failed eviction's record", PAUSED_MINUTE, || {
        !h.patcher.applied_writes().is_empty()
    })
    .await;
    let (record, state) = state(&h, &pod, &published("v1"));
    assert_eq!(record.objects[0].result, Recorded::Failed);
    match state {
        State::Failed { error } => assert!(error.contains("etcd is down"), "{error}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_eviction_is_recorded_as_failed_saying_why() {
    let mut h = Harness::start();
    // No owner, and no reloadlet.io/evict-unowned: refused.
    let pod = env_pod("lonely");
    h.list(std::slice::from_ref(&pod)).await;
    h.versions.set(&key(), Some(published("v1")));
    h.change("v1").await;
    until("the refusal's record", PAUSED_MINUTE, || {
        !h.patcher.applied_writes().is_empty()
    })
    .await;
    assert_eq!(h.evictor.calls(), 0);
    let (_, state) = state(&h, &pod, &published("v1"));
    match state {
        State::Failed { error } => {
            assert!(error.contains("no controller to recreate it"), "{error}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_eviction_refused_for_an_invalid_pacing_annotation_writes_nothing_and_status_says_what_to_fix(
) {
    let mut h = Harness::start();
    let mut bad = owned_pod("web-bad");
    bad.annotations
        .insert("reloadlet.io/window".into(), "sometimes".into());
    // The positive control: the same pod with valid pacing is evicted.
    let good = owned_pod("web-good");
    h.list(&[bad.clone(), good.clone()]).await;
    let p = published("v1");
    let before = |pod: &PodInfo| {
        let source = &pod.env[0].source;
        let facts = Facts {
            published: Some(&p),
            record: None,
            started: None,
            phase: "Running",
            env_held: None,
        };
        derive(&consumer(pod, source).unwrap(), &facts)
    };
    h.versions.set(&key(), Some(published("v1")));
    h.change("v1").await;
    until("the valid pod's eviction", PAUSED_MINUTE, || {
        h.evicted() == ["web-good".to_string()]
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    assert_eq!(
        h.evicted(),
        ["web-good"],
        "the invalid pod is never evicted"
    );
    // Derived from the pod alone: no record is written, and none is needed.
    assert!(
        h.patcher.applied_writes().is_empty(),
        "{:?}",
        h.patcher.applied_writes()
    );
    match before(&bad) {
        State::NotReloaded { fix } => assert!(
            fix.starts_with(
                "fix its reloadlet.io pacing annotation: reloadlet.io/window: \"sometimes\""
            ),
            "{fix}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        before(&good),
        State::Pending(Pending::Controller("an eviction of an env consumer".into())),
        "valid pacing: waiting for the controller until it acts"
    );
}
