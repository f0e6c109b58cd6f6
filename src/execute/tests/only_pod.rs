//! The only pod of its owner under `--restart-without-grant` (`super::super::only_pod`),
//! on the executor with the fake pod edge and fake processes: a pod that says
//! `reloadlet.io/on-blocked: rollout` is requested, not restarted (the controller decides
//! between its grant and its rollout); any other pod is restarted at once, and its
//! `Restarted` says when no other pod of its owner runs on this node.

use super::*;
use crate::controller::fake::FakePatcher;
use crate::core::restart_grant::REQUEST;
use crate::core::rollout::{OwnerRef, ON_BLOCKED};
use test_support::wait::until;

/// How long a test waits for what a task (or a blocking thread) does.
const WAIT: Duration = Duration::from_secs(10);

const ALONE: &str = "no other pod of ReplicaSet web-7d9 runs on this node";

fn owned(uid: &str, name: &str, on_blocked: Option<&str>) -> PodInfo {
    let mut p = pod();
    p.uid = uid.into();
    p.name = name.into();
    p.has_controller = true;
    p.controller = Some(Box::new(OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web-7d9".into(),
        uid: "rs-1".into(),
    }));
    p.annotations
        .insert("reloadlet.io/action".into(), "restart".into());
    if let Some(v) = on_blocked {
        p.annotations.insert(ON_BLOCKED.into(), v.into());
    }
    p
}

struct Node {
    exec: Executor,
    patcher: FakePatcher,
    events: Arc<fake::Events>,
    processes: Arc<fake::Processes>,
    _key: tokio::sync::watch::Sender<Option<crate::core::volume_digest::HashKey>>,
}

/// An agent with `--restart-without-grant` whose node runs `pods` (the first is `u1`, the
/// one restarted).
fn node(pods: Vec<PodInfo>) -> Node {
    let mut index = PodIndex::default();
    let patcher = FakePatcher::default();
    for p in pods {
        patcher.put(p.clone());
        index.apply(p);
    }
    let events = Arc::new(fake::Events::default());
    let processes = Arc::new(fake::Processes::with("abc", 4242));
    let (key_tx, key) = tokio::sync::watch::channel(None);
    let deps = Deps {
        events: events.clone(),
        processes: processes.clone(),
        evictor: Arc::new(fake::Evictor::default()),
        http: Arc::new(fake::Http::default()),
        notifier: Notifier::disabled(),
        record: Some(applied::RecordDeps {
            patcher: Arc::new(patcher.clone()),
            key,
        }),
        gate: None,
    };
    let exec = Executor::new(
        "node-1",
        false,
        EvictionSettings::default(),
        &deps,
        Metrics::new(&mut prometheus_client::registry::Registry::default()),
        Arc::new(RwLock::new(index)),
        CancellationToken::new(),
    )
    .with_restart_without_grant(true);
    exec.use_restart_key(crate::core::volume_digest::HashKey::from_bytes([9; 32]));
    Node {
        exec,
        patcher,
        events,
        processes,
        _key: key_tx,
    }
}

impl Node {
    fn requested(&self) -> bool {
        self.patcher
            .stored("ns", "web")
            .is_some_and(|p| p.annotations.contains_key(REQUEST))
    }

    fn restarted_note(&self) -> Option<String> {
        let events = self.events.0.lock().unwrap();
        events
            .iter()
            .find(|(_, e)| e.reason == "Restarted")
            .map(|(_, e)| e.note.clone())
    }
}

/// The controller's rollout rolls the only pod of an owner that says `on-blocked: rollout`
/// at the change, whatever the agent's flag: the agent must not restart it as well. It
/// requests instead (the controller hands the request off, or grants it where the pod has
/// siblings on other nodes). The same pod without `on-blocked: rollout` is restarted at once
/// (the positive control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_flag_an_on_blocked_rollout_pod_is_requested_not_restarted() {
    let rolls = node(vec![owned("u1", "web", Some("rollout"))]);
    rolls.exec.restart(restart_job("app"));
    until("the request", WAIT, || rolls.requested()).await;
    until("RestartRequested", WAIT, || {
        rolls.events.reasons() == ["RestartRequested"]
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rolls.processes.sent(), 0, "left to the controller");

    let waits = node(vec![owned("u1", "web", Some("wait"))]);
    waits.exec.restart(restart_job("app"));
    until("the stop", WAIT, || waits.processes.sent() > 0).await;
    until("Restarted", WAIT, || waits.restarted_note().is_some()).await;
    assert!(!waits.requested(), "restarted without asking");
}

/// Restarted at once, the only pod of its owner on this node: `Restarted` says a moment
/// without a Ready pod is possible. With a sibling on the node (which served meanwhile), it
/// says nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_a_sibling_on_the_node_says_it_may_have_left_no_ready_pod() {
    let alone = node(vec![owned("u1", "web", None)]);
    alone.exec.restart(restart_job("app"));
    until("Restarted", WAIT, || alone.restarted_note().is_some()).await;
    let note = alone.restarted_note().unwrap();
    assert!(note.contains(ALONE), "{note}");
    assert!(
        note.contains("the workload had no Ready pod until this one is Ready again")
            && note.ends_with("surge-first instead): configmap app changed"),
        "{note}"
    );

    let mut sibling = owned("u2", "web-b", None);
    sibling.containers[0].container_id = ContainerId::parse("containerd://other");
    let paired = node(vec![owned("u1", "web", None), sibling]);
    paired.exec.restart(restart_job("app"));
    until("Restarted", WAIT, || paired.restarted_note().is_some()).await;
    let note = paired.restarted_note().unwrap();
    assert!(!note.contains(ALONE), "{note}");
    assert!(note.contains("stopped container app"), "{note}");
}

/// Without a controller such a request waits: the Warning names `on-blocked: rollout` as the
/// reason the agent asked though it may restart without a grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_flag_without_a_controller_the_warning_says_why_the_pod_asked() {
    let rolls = node(vec![owned("u1", "web", Some("rollout"))]);
    rolls
        .exec
        .watch_lease(Arc::new(fake::Lease::answering(Ok(None))));
    rolls.exec.restart(restart_job("app"));
    let warning = || {
        let events = rolls.events.0.lock().unwrap();
        events
            .iter()
            .find(|(_, e)| e.reason == crate::core::lease_holder::UNCOORDINATED)
            .map(|(_, e)| e.note.clone())
    };
    until("RestartUncoordinated", WAIT, || warning().is_some()).await;
    let note = warning().unwrap();
    assert!(
        note.contains("reloadlet.io/on-blocked: rollout leaves the choice between a restart and a rollout to it, also under --restart-without-grant")
            && !note.contains("or the agent runs with --restart-without-grant"),
        "{note}"
    );
    assert_eq!(rolls.processes.sent(), 0);
}
