//! The agent's side of the grant through the real executor, with the fake pod edge and fake
//! processes: the request is written and nothing stopped; a forged grant stops nothing; the
//! grant of the request stops the container once; `restarted` follows once it runs again.

use crate::controller::fake::FakePatcher;
use crate::core::model::{
    ContainerId, ContainerInfo, ContainerKind, PodInfo, ReloadSignal, SourceKind, SourceRef,
    VolumeMount, VolumeSpec,
};
use crate::core::pod_index::PodIndex;
use crate::core::restart_grant::{GRANT, REQUEST, RESTARTED};
use crate::core::restart_request::{is_own_request, request_id};
use crate::core::volume_digest::HashKey;
use crate::execute::applied::RecordDeps;
use crate::execute::evict::EvictionSettings;
use crate::execute::restart::RestartJob;
use crate::execute::{Deps, Executor};
use crate::outbound::notify::Notifier;
use crate::ports::fake;
use crate::serve::metrics::Metrics;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use test_support::wait::until;
use tokio_util::sync::CancellationToken;

/// How long a test waits for what a task (or a blocking thread) does.
const WAIT: Duration = Duration::from_secs(10);

const KEY: [u8; 32] = [9; 32];

fn pod(annotations: &[(&str, &str)], container: &str) -> PodInfo {
    PodInfo {
        uid: "u1".into(),
        namespace: "ns".into(),
        name: "web".into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .chain([
                ("reloadlet.io/action".to_owned(), "restart".to_owned()),
                // a recovered restart's stop plan: SIGKILL after 1 s (the fake process stays)
                ("reloadlet.io/restart-grace".to_owned(), "1s".to_owned()),
            ])
            .collect(),
        volumes: vec![VolumeSpec {
            name: "conf".into(),
            sources: vec![SourceRef {
                kind: SourceKind::ConfigMap,
                name: "app-conf".into(),
            }],
            ..VolumeSpec::default()
        }],
        containers: vec![ContainerInfo {
            name: "app".into(),
            kind: ContainerKind::Regular,
            mounts: vec![VolumeMount {
                volume: "conf".into(),
                sub_path: false,
            }],
            container_id: ContainerId::parse(&format!("containerd://{container}")),
            running: true,
            ports: Vec::new(),
        }],
        ..Default::default()
    }
}

fn job() -> RestartJob {
    RestartJob {
        seen: Default::default(),
        pod_uid: "u1".into(),
        container: "app".into(),
        stop: crate::core::restart::StopPlan {
            signal: ReloadSignal::Term,
            grace: Duration::ZERO,
            drain: None,
            timeout: Duration::from_secs(300),
        },
        first_seen: Instant::now(),
        sources: vec![SourceRef {
            kind: SourceKind::ConfigMap,
            name: "app-conf".into(),
        }],
    }
}

struct Agent {
    exec: Executor,
    index: Arc<RwLock<PodIndex>>,
    patcher: FakePatcher,
    events: Arc<fake::Events>,
    processes: Arc<fake::Processes>,
    _key: tokio::sync::watch::Sender<Option<HashKey>>,
}

fn agent() -> Agent {
    let index = Arc::new(RwLock::new(PodIndex::default()));
    let patcher = FakePatcher::default();
    let first = pod(&[], "abc");
    index.write().unwrap().apply(first.clone());
    patcher.put(first);
    let events = Arc::new(fake::Events::default());
    let processes = Arc::new(fake::Processes::with("abc", 4242));
    let (key_tx, key) = tokio::sync::watch::channel(None);
    let deps = Deps {
        events: events.clone(),
        processes: processes.clone(),
        evictor: Arc::new(fake::Evictor::default()),
        http: Arc::new(fake::Http::default()),
        notifier: Notifier::disabled(),
        record: Some(RecordDeps {
            patcher: Arc::new(patcher.clone()),
            key,
        }),
        gate: None,
    };
    let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
    let exec = Executor::new(
        "node-1",
        false,
        EvictionSettings::default(),
        &deps,
        metrics,
        index.clone(),
        CancellationToken::new(),
    );
    exec.use_restart_key(HashKey::from_bytes(KEY));
    Agent {
        exec,
        index,
        patcher,
        events,
        processes,
        _key: key_tx,
    }
}

impl Agent {
    /// The pod watch shows `pod` (the agent's index, then the executor).
    fn show(&self, pod: PodInfo) {
        self.index.write().unwrap().apply(pod.clone());
        self.exec.pod_updated(&pod);
    }

    fn written(&self, annotation: &str) -> Vec<String> {
        self.patcher
            .stored("ns", "web")
            .and_then(|p| p.annotations.get(annotation).cloned())
            .into_iter()
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_waits_for_the_grant_of_its_own_request_and_is_recorded_once() {
    let a = agent();
    a.exec.restart(job());
    until("the request", WAIT, || !a.written(REQUEST).is_empty()).await;
    let id = a.written(REQUEST).remove(0);
    assert!(is_own_request(&HashKey::from_bytes(KEY), "u1", &id), "{id}");
    until("its Event", WAIT, || {
        a.events.reasons() == ["RestartRequested"]
    })
    .await;
    let note = a.events.0.lock().unwrap()[0].1.note.clone();
    assert!(
        note.contains("waiting for the controller's grant"),
        "{note}"
    );
    // the pod author grants something else: nothing is stopped
    a.show(pod(
        &[(REQUEST, &id), (GRANT, "c0ffee00-0000000000000000")],
        "abc",
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.processes.sent(), 0);
    // the controller's grant: stopped once
    let granted = pod(&[(REQUEST, &id), (GRANT, &id)], "abc");
    a.show(granted.clone());
    until("the stop", WAIT, || a.processes.sent() > 0).await;
    until("Restarted", WAIT, || {
        a.events.reasons().contains(&"Restarted")
    })
    .await;
    a.show(granted.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = a.processes.sent();
    assert!(
        a.written(RESTARTED).is_empty(),
        "not before the container runs again"
    );
    // the kubelet started it again (a new container): recorded
    a.show(pod(&[(REQUEST, &id), (GRANT, &id)], "def"));
    until("restarted", WAIT, || a.written(RESTARTED) == [id.clone()]).await;
    a.show(pod(
        &[(REQUEST, &id), (GRANT, &id), (RESTARTED, &id)],
        "def",
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.processes.sent(), sent, "never twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_agent_restart_a_granted_request_of_its_own_is_performed_and_a_forged_one_is_not()
{
    let a = agent();
    // a request and grant the pod author wrote (the template, another pod's id): nothing
    let forged = "0123abcd-0123456789abcdef";
    a.show(pod(&[(REQUEST, forged), (GRANT, forged)], "abc"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.processes.sent(), 0);
    // one the agent wrote before it restarted (same key, same pod): performed
    let own = request_id(
        &HashKey::from_bytes(KEY),
        "u1",
        b"change",
        &[("app", Some("abc"))],
    );
    a.show(pod(&[(REQUEST, &own), (GRANT, &own)], "abc"));
    until("the stop", WAIT, || a.processes.sent() > 0).await;
    a.show(pod(&[(REQUEST, &own), (GRANT, &own)], "def"));
    until("restarted", WAIT, || a.written(RESTARTED) == [own.clone()]).await;
}

/// Without a controller (docs/restart.md, "Without a controller"): a waiting request whose
/// Lease has no live holder gets one Warning `RestartUncoordinated`, and the checks end.
#[tokio::test(start_paused = true)]
async fn a_request_nobody_can_grant_is_warned_about_once() {
    use crate::core::lease_holder::UNCOORDINATED;
    let uncoordinated = |a: &Agent| {
        a.events
            .reasons()
            .iter()
            .filter(|r| **r == UNCOORDINATED)
            .count()
    };
    let expired = fake::Lease::record(
        Some("c-1"),
        jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60),
        15,
    );
    for (what, answer, words) in [
        ("no Lease", Ok(None), "does not exist"),
        ("expired", Ok(Some(expired)), "of c-1 expired"),
    ] {
        let a = agent();
        let lease = Arc::new(fake::Lease::answering(answer));
        a.exec.watch_lease(lease.clone());
        a.exec.restart(job());
        until("the Warning", WAIT, || uncoordinated(&a) == 1).await;
        let id = a.written(REQUEST).remove(0);
        let events = a.events.0.lock().unwrap().clone();
        let (_, warning) = events
            .iter()
            .find(|(_, e)| e.reason == UNCOORDINATED)
            .unwrap();
        assert!(warning.warning, "{what}");
        for part in [
            "no controller holds the Lease",
            "reloadlet-system/reloadlet-controller",
            words,
            id.as_str(),
        ] {
            assert!(
                warning.note.contains(part),
                "{what}: {part} in {}",
                warning.note
            );
        }
        // once: no more reads, no more Warnings, however long it waits
        let reads = lease.reads();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!((uncoordinated(&a), lease.reads()), (1, reads), "{what}");
    }
}

/// The positive control: a held Lease says nothing and is read again with a back-off while
/// the request waits; a holder lost later is one Warning; a grant ends the checks.
#[tokio::test(start_paused = true)]
async fn a_held_lease_says_nothing_and_is_read_again_while_the_request_waits() {
    use crate::core::lease_holder::UNCOORDINATED;
    let a = agent();
    let live = || {
        Ok(Some(fake::Lease::record(
            Some("c-1"),
            jiff::Timestamp::now(),
            3600,
        )))
    };
    let lease = Arc::new(fake::Lease::answering(live()));
    a.exec.watch_lease(lease.clone());
    a.exec.restart(job());
    until("the request", WAIT, || !a.written(REQUEST).is_empty()).await;
    until("the first read", WAIT, || lease.reads() == 1).await;
    // 15 s, 30 s, 60 s, 120 s later: four more reads, no Warning
    tokio::time::sleep(Duration::from_secs(15 + 30 + 60 + 120 + 1)).await;
    assert_eq!(lease.reads(), 5);
    assert_eq!(a.events.reasons(), ["RestartRequested"]);
    // a read that fails is tried again, and says nothing
    lease.set(Err(crate::ports::LeaseError::Other(
        crate::ports::ApiError::other("boom"),
    )));
    tokio::time::sleep(Duration::from_secs(241)).await;
    assert_eq!(lease.reads(), 6);
    assert_eq!(a.events.reasons(), ["RestartRequested"]);
    // the controller went away: one Warning at the next read
    lease.set(Ok(Some(fake::Lease::record(
        None,
        jiff::Timestamp::now(),
        15,
    ))));
    tokio::time::sleep(Duration::from_secs(301)).await;
    until("the Warning", WAIT, || {
        a.events.reasons().contains(&UNCOORDINATED)
    })
    .await;
    let reads = lease.reads();
    lease.set(live());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(lease.reads(), reads, "no more checks after the Warning");
    assert_eq!(a.events.reasons(), ["RestartRequested", UNCOORDINATED]);

    // a granted request is no longer checked
    let b = agent();
    let lease = Arc::new(fake::Lease::answering(live()));
    b.exec.watch_lease(lease.clone());
    b.exec.restart(job());
    until("the first read", WAIT, || lease.reads() == 1).await;
    let id = b.written(REQUEST).remove(0);
    b.show(pod(&[(REQUEST, &id), (GRANT, &id)], "abc"));
    lease.set(Ok(None));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(lease.reads(), 1);
    assert!(!b.events.reasons().contains(&UNCOORDINATED));
}

/// The controller's env restart (docs/restart.md, "Env consumers"): a granted request the
/// controller made is carried out once its key is known — the key read later looks at the
/// pod again — stopping the containers its tags name as they run; one made for another pod
/// or under another key stops nothing, nor does one whose container already started anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_controller_request_stops_its_tagged_containers_once_the_key_is_known() {
    use crate::core::restart_request::controller_request_id;
    let controller = HashKey::from_bytes([5; 32]);
    let made = |key: &HashKey, uid: &str, container: &str| {
        controller_request_id(key, uid, b"configmap app-env", &[("app", Some(container))]).unwrap()
    };
    // forged: copied from another pod, made under another key; and the real one for a
    // container that has started anew since (nothing to stop: recorded at once)
    let a = agent();
    a._key.send_replace(Some(controller.clone()));
    for forged in [
        made(&controller, "u2", "abc"),
        made(&HashKey::from_bytes([6; 32]), "u1", "abc"),
    ] {
        a.show(pod(&[(REQUEST, &forged), (GRANT, &forged)], "abc"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.processes.sent(), 0);
    assert!(a.written(RESTARTED).is_empty());
    let stale = made(&controller, "u1", "old");
    a.show(pod(&[(REQUEST, &stale), (GRANT, &stale)], "abc"));
    until("restarted", WAIT, || {
        a.written(RESTARTED) == [stale.clone()]
    })
    .await;
    assert_eq!(
        a.processes.sent(),
        0,
        "a container started anew is not stopped"
    );

    // the real one, granted before the agent knows the controller's key
    let a = agent();
    let id = made(&controller, "u1", "abc");
    a.show(pod(&[(REQUEST, &id), (GRANT, &id)], "abc"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.processes.sent(), 0, "not verifiable yet");
    a._key.send_replace(Some(controller.clone()));
    until("the stop", WAIT, || a.processes.sent() > 0).await;
    until("Restarted", WAIT, || {
        a.events.reasons().contains(&"Restarted")
    })
    .await;
    a.show(pod(&[(REQUEST, &id), (GRANT, &id)], "def"));
    until("restarted", WAIT, || a.written(RESTARTED) == [id.clone()]).await;
    let sent = a.processes.sent();
    a.show(pod(
        &[(REQUEST, &id), (GRANT, &id), (RESTARTED, &id)],
        "def",
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.processes.sent(), sent, "never twice");
}
