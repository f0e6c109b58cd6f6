//! Failure containment in the agent (`crate::contain`, issue #43 §1): a fault injected in one
//! pod's handling (a fake edge that panics for that pod) stays with that pod. The other pod
//! is still acted on, the panic is counted and told as a Warning `InternalError` on the
//! poisoned pod, which is not handled again until it changes.

use super::run::project;
use super::{key, pod, world, World, UID};
use crate::agent::*;
use crate::core::model::{ContainerId, PodInfo, VolumeKey};
use crate::host::inotify::LookCause;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

const POISON_UID: &str = "0f0e0d0c-0b0a-4900-8800-00000000dead";

/// A second signal pod (`web/poison`), its container `bad`.
fn poison_pod() -> PodInfo {
    let mut p = pod("signal");
    p.uid = POISON_UID.into();
    p.name = "poison".into();
    p.containers[0].container_id = ContainerId::parse("containerd://bad");
    p
}

fn poison_key() -> VolumeKey {
    VolumeKey {
        pod_uid: POISON_UID.into(),
        ..key()
    }
}

impl World {
    fn dir_of(&self, key: &VolumeKey) -> PathBuf {
        self.dir.path().join(&*key.pod_uid)
    }

    /// Writes `content` into `key`'s volume (`turn`: a new write) and lets the agent look.
    fn write_volume(&mut self, key: &VolumeKey, turn: u32, content: &str, at: Instant) {
        let dir = self.dir_of(key);
        project(&dir, turn, content);
        let cause = if turn == 1 {
            LookCause::Discovered
        } else {
            LookCause::Swap
        };
        let pods = &mut self.agent.pods;
        self.agent
            .volumes
            .look_at(key, dir, cause, at, &mut |c: Changed<'_>| {
                pods.content_changed(c.key, c.at, at)
            });
    }

    /// Both volumes written at `turn`, and what is due acted on.
    async fn both_change(&mut self, turn: u32, at: Instant) {
        self.write_volume(&key(), turn, &format!("v{turn}"), at);
        self.write_volume(&poison_key(), turn, &format!("v{turn}"), at);
        self.agent.fire_due_at(at);
        self.settle().await;
    }

    fn signalled(&self) -> Vec<String> {
        let sent = self.processes.sent.lock().unwrap();
        sent.iter().map(|(uid, _, _)| uid.clone()).collect()
    }

    fn panics(&self, stage: &'static str) -> u64 {
        self.agent
            .metrics
            .handler_panics_series("agent", stage)
            .get()
    }

    /// `(pod name, reason, note)` of every Event.
    fn events_seen(&self) -> Vec<(String, &'static str, String)> {
        let events = self.events.0.lock().unwrap();
        events
            .iter()
            .map(|(p, e)| (p.name.clone(), e.reason, e.note.clone()))
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_panic_acting_on_one_pod_stays_with_it_until_it_changes() {
    crate::contain::install_panic_hook();
    let mut w = world(None);
    w.processes.kept.store(true, Ordering::Relaxed);
    w.processes.pids.lock().unwrap().insert("bad".into(), 666);
    *w.processes.panic_for.lock().unwrap() = Some(POISON_UID.into());
    w.agent
        .on_pod(PodUpdate::Resync(vec![pod("signal"), poison_pod()]));
    let t0 = now();
    for k in [key(), poison_key()] {
        w.write_volume(&k, 1, "v1", t0);
    }

    w.both_change(2, t0).await;
    assert_eq!(w.signalled(), [UID], "the other pod is signalled");
    assert_eq!(w.panics("act"), 1);
    assert_eq!(w.panics("pod_update") + w.panics("volume"), 0);
    let events = w.events_seen();
    let internal: Vec<_> = events.iter().filter(|e| e.1 == "InternalError").collect();
    assert_eq!(internal.len(), 1, "{events:?}");
    assert_eq!(internal[0].0, "poison");
    assert_eq!(
        internal[0].2,
        format!(
            "reloadlet could not handle this pod: injected: cannot signal pod {POISON_UID}; \
             it is skipped until it changes"
        )
    );
    assert!(events.iter().any(|e| e.0 == "web-0" && e.1 == "Signaled"));
    assert!(w.agent.pods.poisoned(POISON_UID));
    assert!(
        !w.agent.pods.pending(POISON_UID),
        "its pending work dropped"
    );

    // The loop goes on; the poisoned pod is not tried again while it is unchanged, however
    // often its volume swaps or the pod list comes again.
    let t1 = t0 + Duration::from_secs(1);
    w.agent
        .on_pod(PodUpdate::Resync(vec![pod("signal"), poison_pod()]));
    w.both_change(3, t1).await;
    assert_eq!(w.signalled(), [UID, UID]);
    assert_eq!(w.panics("act"), 1, "not retried");
    assert_eq!(w.events_seen().len(), events.len() + 1, "one more Signaled");

    // The pod changes (and the bug is gone): handled again.
    *w.processes.panic_for.lock().unwrap() = None;
    let mut fixed = poison_pod();
    fixed.labels.insert("fixed".into(), "yes".into());
    w.agent.on_pod(PodUpdate::Apply(fixed));
    assert!(!w.agent.pods.poisoned(POISON_UID));
    w.both_change(4, t1 + Duration::from_secs(1)).await;
    let mut last = w.signalled().split_off(2);
    last.sort();
    assert_eq!(last, [UID, POISON_UID], "both, in either order");
    assert_eq!(w.panics("act"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panic_taking_in_one_pod_stays_with_it_until_it_changes() {
    crate::contain::install_panic_hook();
    let mut w = world(None);
    // Its invalid annotation is reported as it enters, and that report panics.
    *w.events.2.lock().unwrap() = Some("poison".into());
    let mut poison = poison_pod();
    poison
        .annotations
        .insert(crate::core::annotations::ACTION.into(), "bogus".into());
    w.agent
        .on_pod(PodUpdate::Resync(vec![poison.clone(), pod("signal")]));
    assert_eq!(w.panics("pod_update"), 1);
    assert!(w.agent.pods.poisoned(POISON_UID));
    assert!(w.agent.pods.synced(), "the list was taken in");
    let reasons: Vec<_> = w.events_seen().into_iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(reasons, [("poison".to_string(), "InternalError")]);

    // The same pod again (a relist, an update that changes nothing): not handled again.
    w.agent
        .on_pod(PodUpdate::Resync(vec![poison.clone(), pod("signal")]));
    w.agent.on_pod(PodUpdate::Apply(poison.clone()));
    assert_eq!(w.panics("pod_update"), 1, "not retried");

    // The other pod is acted on; the poisoned one is not.
    let t0 = now();
    for k in [key(), poison_key()] {
        w.write_volume(&k, 1, "v1", t0);
    }
    w.both_change(2, t0).await;
    assert_eq!(w.signalled(), [UID]);
    assert_eq!(w.panics("act"), 0);

    // The pod changes (and the bug is gone): taken in again, its annotation reported as
    // usual.
    *w.events.2.lock().unwrap() = None;
    poison.labels.insert("edited".into(), "yes".into());
    w.agent.on_pod(PodUpdate::Apply(poison));
    assert!(!w.agent.pods.poisoned(POISON_UID));
    assert_eq!(
        w.events_seen().last().map(|e| e.1),
        Some("InvalidAnnotation")
    );
    // Deleted: nothing of it is kept.
    w.agent.on_pod(PodUpdate::Delete {
        uid: POISON_UID.into(),
    });
    assert!(!w.agent.pods.poisoned(POISON_UID));
}
