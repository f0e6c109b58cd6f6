//! Env consumers restarted in place (`reloadlet.io/env-action: restart`, docs/restart.md "Env
//! consumers"): the controller writes its request, naming the containers that read the
//! change, records it pending on the pod, and never replaces a request in flight: a change
//! during a restart is asked for once that restart is over; a change while its own request
//! still waits for the grant replaces it (newest wins, its containers kept).

use super::harness::*;
use super::recorded::{published, state};
use crate::core::model::{ContainerId, PodInfo};
use crate::core::restart_grant::{GRANT, REQUEST, RESTARTED};
use crate::core::restart_request::controller_targets;
use crate::core::status::applied::Recorded;
use crate::core::status::state::State;
use crate::core::volume_digest::HashKey;
use crate::ports::Input;
use test_support::wait::until;

/// An env consumer with `action: signal` and `env-action: restart`, its container `app`
/// running as `container`.
fn restart_pod(container: &str) -> PodInfo {
    let mut pod = env_pod("web-1");
    pod.annotations = [
        ("reloadlet.io/action".to_owned(), "signal".to_owned()),
        ("reloadlet.io/env-action".to_owned(), "restart".to_owned()),
    ]
    .into();
    pod.has_controller = true;
    pod.containers[0].container_id = ContainerId::parse(&format!("containerd://{container}"));
    pod
}

fn requests(h: &Harness) -> Vec<String> {
    h.patcher
        .written_values(REQUEST)
        .into_iter()
        .map(|(_, _, v)| v)
        .collect()
}

/// The pod watch shows the stored pod with `f` applied (the agent's and the grant's writes).
async fn show(h: &Harness, f: impl FnOnce(&mut PodInfo)) -> PodInfo {
    let mut pod = h.patcher.stored(NS, "web-1").unwrap();
    f(&mut pod);
    h.patcher.put(pod.clone());
    h.tx.send(Input::PodApplied(pod.clone())).await.unwrap();
    pod
}

#[tokio::test(start_paused = true)]
async fn an_env_restart_is_requested_for_the_containers_that_read_it_and_never_over_one_in_flight()
{
    let ck = HashKey::from_bytes([7; 32]);
    let mut h = Harness::start();
    let pod = restart_pod("c1");
    h.list(std::slice::from_ref(&pod)).await;
    h.versions.set(&key(), Some(published("v1")));
    h.change("v1").await;
    until("the request", PAUSED_MINUTE, || requests(&h).len() == 1).await;
    let first = requests(&h).remove(0);
    assert_eq!(
        controller_targets(&ck, &pod.uid, &first, &[("app", Some("c1"))]),
        Some(vec![true]),
        "{first}"
    );
    until("its Event", PAUSED_MINUTE, || {
        h.events.reasons().contains(&"RestartRequested")
    })
    .await;
    let (record, state) = state(&h, &pod, &published("v1"));
    let entry = &record.objects[0];
    assert_eq!(
        (entry.by.as_str(), entry.action.as_str(), entry.result),
        ("controller", "restart", Recorded::Requested)
    );
    assert!(matches!(state, State::Pending(_)), "{state:?}");

    // Granted, in flight: a second change waits for it.
    show(&h, |p| {
        p.annotations.insert(GRANT.into(), first.clone());
    })
    .await;
    h.change("v2").await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(requests(&h).len(), 1, "never over a request in flight");
    // Restarted (a new container): the second change is asked for, for the new container.
    show(&h, |p| {
        p.annotations.insert(RESTARTED.into(), first.clone());
        p.containers[0].container_id = ContainerId::parse("containerd://c2");
    })
    .await;
    until("the second request", PAUSED_MINUTE, || {
        requests(&h).len() == 2
    })
    .await;
    let second = requests(&h).remove(1);
    assert_eq!(
        controller_targets(&ck, &pod.uid, &second, &[("app", Some("c2"))]),
        Some(vec![true]),
        "{second}"
    );
    // Not granted yet: a third change replaces it (newest wins), naming app still.
    show(&h, |_| {}).await;
    h.change("v3").await;
    until("the third request", PAUSED_MINUTE, || {
        requests(&h).len() == 3
    })
    .await;
    let third = requests(&h).remove(2);
    assert_ne!(third, second);
    assert_eq!(
        controller_targets(&ck, &pod.uid, &third, &[("app", Some("c2"))]),
        Some(vec![true])
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_env_restart_waits_for_the_agents_own_request_is_asked_again_if_replaced_and_a_refused_one_is_recorded(
) {
    let mut h = Harness::start();
    let pod = restart_pod("c1");
    h.list(std::slice::from_ref(&pod)).await;
    // The agent's request (an id the controller cannot verify) waits for its grant.
    show(&h, |p| {
        p.annotations
            .insert(REQUEST.into(), "0123abcd-0123456789abcdef".into());
    })
    .await;
    h.change("v1").await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert!(
        requests(&h).is_empty(),
        "the agent's request is not replaced"
    );
    show(&h, |p| {
        p.annotations
            .insert(RESTARTED.into(), "0123abcd-0123456789abcdef".into());
    })
    .await;
    until("the request after the agent's", PAUSED_MINUTE, || {
        requests(&h).len() == 1
    })
    .await;

    // The pod shows the controller's request, then the agent's replaces it (written at the
    // same moment, the last write kept) before any grant: asked again after the agent's.
    let asked = requests(&h).remove(0);
    show(&h, |p| {
        p.annotations.insert(REQUEST.into(), asked.clone());
    })
    .await;
    show(&h, |p| {
        p.annotations
            .insert(REQUEST.into(), "4567cdef-0123456789abcdef".into());
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(requests(&h).len(), 1, "not over the agent's request");
    show(&h, |p| {
        p.annotations
            .insert(GRANT.into(), "4567cdef-0123456789abcdef".into());
        p.annotations
            .insert(RESTARTED.into(), "4567cdef-0123456789abcdef".into());
    })
    .await;
    until("asked again", PAUSED_MINUTE, || requests(&h).len() == 2).await;
    // Shown restarted: nothing more.
    let again = requests(&h).remove(1);
    show(&h, |p| {
        p.annotations.insert(REQUEST.into(), again.clone());
        p.annotations.insert(GRANT.into(), again.clone());
        p.annotations.insert(RESTARTED.into(), again.clone());
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(requests(&h).len(), 2);
    h.stop().await;

    // restartPolicy Never: refused, recorded failed, nothing requested.
    let mut h = Harness::start();
    let mut never = restart_pod("c1");
    never.restart.restart_policy = Some("Never".into());
    h.list(std::slice::from_ref(&never)).await;
    h.versions.set(&key(), Some(published("v1")));
    h.change("v1").await;
    until("RestartRefused", PAUSED_MINUTE, || {
        h.events.reasons().contains(&"RestartRefused")
    })
    .await;
    let (record, _) = state(&h, &never, &published("v1"));
    assert_eq!(record.objects[0].result, Recorded::Failed);
    assert!(requests(&h).is_empty());
    h.stop().await;
}

/// The controller restarted (a new feature over the same stored pods and objects): the pods
/// listed again as the API shows them.
async fn restart_controller(h: Harness) -> Harness {
    let h = h.restarted().await;
    let pod = h.patcher.stored(NS, "web-1").unwrap();
    h.list(&[pod]).await;
    h
}

#[tokio::test(start_paused = true)]
async fn an_env_restart_replaced_by_the_agents_request_is_asked_again_after_a_controller_restart() {
    let ck = HashKey::from_bytes([7; 32]);
    let mut h = Harness::start();
    let pod = restart_pod("c1");
    h.list(std::slice::from_ref(&pod)).await;
    let baselines = h.patcher.baseline_writes().len();
    h.change("v1").await;
    until("the request", PAUSED_MINUTE, || requests(&h).len() == 1).await;
    // Shown, then the agent's request (a volume change) replaces it before any grant.
    show(&h, |_| {}).await;
    show(&h, |p| {
        p.annotations
            .insert(REQUEST.into(), "4567cdef-0123456789abcdef".into());
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(
        h.patcher.baseline_writes().len(),
        baselines,
        "the baseline waits for the restart"
    );

    // The controller restarts in that window: the change is found again from the pod.
    let h = restart_controller(h).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(requests(&h).len(), 1, "not over the agent's request");
    show(&h, |p| {
        p.annotations
            .insert(GRANT.into(), "4567cdef-0123456789abcdef".into());
        p.annotations
            .insert(RESTARTED.into(), "4567cdef-0123456789abcdef".into());
    })
    .await;
    until("asked again", PAUSED_MINUTE, || requests(&h).len() == 2).await;
    let again = requests(&h).remove(1);
    assert_eq!(
        controller_targets(&ck, &pod.uid, &again, &[("app", Some("c1"))]),
        Some(vec![true])
    );
    // Restarted: the baseline moves, and the next controller finds nothing to restart.
    show(&h, |p| {
        p.annotations.insert(GRANT.into(), again.clone());
        p.annotations.insert(RESTARTED.into(), again.clone());
        p.containers[0].container_id = ContainerId::parse("containerd://c2");
    })
    .await;
    until("the baseline moved", PAUSED_MINUTE, || {
        h.patcher.baseline_writes().len() > baselines
    })
    .await;
    let h = restart_controller(h).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(requests(&h).len(), 2, "one restart for one change");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_controller_restart_before_the_grant_writes_no_second_request_for_the_same_change() {
    let mut h = Harness::start();
    let pod = restart_pod("c1");
    h.list(std::slice::from_ref(&pod)).await;
    let baselines = h.patcher.baseline_writes().len();
    h.change("v1").await;
    until("the request", PAUSED_MINUTE, || requests(&h).len() == 1).await;
    let first = requests(&h).remove(0);
    show(&h, |_| {}).await;

    // Restarted before the grant: the pending request serves the change found again.
    let h = restart_controller(h).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(requests(&h), vec![first.clone()], "no second request");
    assert_eq!(h.patcher.baseline_writes().len(), baselines);
    show(&h, |p| {
        p.annotations.insert(GRANT.into(), first.clone());
        p.annotations.insert(RESTARTED.into(), first.clone());
        p.containers[0].container_id = ContainerId::parse("containerd://c2");
    })
    .await;
    until("the baseline moved", PAUSED_MINUTE, || {
        h.patcher.baseline_writes().len() > baselines
    })
    .await;
    let h = restart_controller(h).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(requests(&h).len(), 1, "one restart for one change");
    h.stop().await;
}
