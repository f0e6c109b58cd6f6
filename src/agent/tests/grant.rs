//! A granted restart the agent finds on a pod in its first pod list (it requested it before
//! it restarted, docs/restart.md "The grant"): the executor is told of the pod only once
//! the index holds it, so the restart it starts finds the pod, stops the container, and
//! `restarted` is written only after the container runs again; a container that started
//! anew since the request is not stopped again.

use super::{pod, world_with, World, UID};
use crate::agent::*;
use crate::core::model::{ContainerId, PodInfo, ReloadSignal};
use crate::core::restart_grant::{GRANT, REQUEST, RESTARTED};
use crate::core::restart_request::request_id;
use crate::host::state_file::{SavedState, StateStore};
use test_support::wait::until;

/// How long a test waits for what a task (or a blocking thread) does.
const WAIT: Duration = Duration::from_secs(10);

/// An agent that asks for grants, just restarted, and its own request for `change`, made
/// while container `app` ran as `abc` (the key it keeps in its state directory).
fn restarted_agent(change: &[u8]) -> (World, String) {
    let w = world_with(Some(SavedState::default()), |s| {
        s.restart_without_grant = false
    });
    let key = StateStore::open(&w.dir.path().join("state"))
        .unwrap()
        .key()
        .clone();
    let own = request_id(&key, UID, change, &[("app", Some("abc"))]);
    (w, own)
}

/// The pod as the kubelet shows it, with the agent's own granted request on it; its
/// container runs as `container`.
fn granted(own: &str, container: &str) -> PodInfo {
    let mut p = pod("restart");
    p.annotations
        .insert("reloadlet.io/restart-grace".into(), "1s".into());
    p.annotations.insert(REQUEST.into(), own.into());
    p.annotations.insert(GRANT.into(), own.into());
    p.containers[0].container_id = ContainerId::parse(&format!("containerd://{container}"));
    p
}

/// `reloadlet.io/restarted` on the pod as stored.
fn restarted(w: &World) -> Option<String> {
    w.patcher
        .stored("web", "web-0")
        .and_then(|p| p.annotations.get(RESTARTED).cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_request_in_the_first_pod_list_is_carried_out_then_recorded() {
    let (mut w, own) = restarted_agent(b"change before the agent restarted");
    let before = granted(&own, "abc");
    w.patcher.put(before.clone());
    w.agent.on_pod(PodUpdate::Resync(vec![before]));
    until("the granted restart stops the container", WAIT, || {
        w.processes.sent() > 0
    })
    .await;
    // Positive control for the record below: not written while the old container runs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        restarted(&w),
        None,
        "recorded before the container ran again"
    );
    // The kubelet started it again (a new container ID): recorded.
    w.agent.on_pod(PodUpdate::Apply(granted(&own, "def")));
    until("restarted written", WAIT, || {
        restarted(&w).as_deref() == Some(own.as_str())
    })
    .await;
    // One stop: SIGTERM, then SIGKILL after the 1 s grace (the fake process stays); nothing
    // for the new container.
    let sent: Vec<(String, ReloadSignal)> = w
        .processes
        .sent
        .lock()
        .unwrap()
        .iter()
        .map(|(_, c, s)| (c.clone(), *s))
        .collect();
    assert_eq!(
        sent,
        [
            ("abc".to_owned(), ReloadSignal::Term),
            ("abc".to_owned(), ReloadSignal::Kill)
        ]
    );
}

/// The agent stopped the container, the kubelet started it again, and the agent restarted
/// before it wrote `restarted`: the new agent finds the request granted and not restarted,
/// but the container runs anew (another ID than the request was made with): it is not
/// stopped a second time, and `restarted` is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_restarted_before_the_agent_restarted_is_not_stopped_again() {
    let (mut w, own) = restarted_agent(b"the change");
    // requested while the container ran as abc; it runs as def now
    w.processes.pids.lock().unwrap().insert("def".into(), 4343);
    let now = granted(&own, "def");
    w.patcher.put(now.clone());
    w.agent.on_pod(PodUpdate::Resync(vec![now]));
    until("restarted written", WAIT, || {
        restarted(&w).as_deref() == Some(own.as_str())
    })
    .await;
    assert_eq!(w.processes.sent(), 0, "nothing stopped a second time");
}
