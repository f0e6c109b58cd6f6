//! Pacing through the agent's handlers (docs/pacing.md): each rule under a paused clock, with
//! the fakes of every edge, a real volume in a temp dir and a wall clock set by the test.

use super::{key, pod, world_with, World, UID};
use crate::agent::pacing::WallClock;
use crate::agent::*;
use crate::core::model::PodInfo;
use crate::core::pacing::spec;
use crate::host::inotify::LookCause;
use crate::host::state_file::SavedState;
use std::path::PathBuf;

/// 2026-11-26T12:00:30Z: half a minute before a window opening at 12:01.
fn wall0() -> jiff::Timestamp {
    "2026-11-26T12:00:30Z".parse().expect("a timestamp")
}

fn paced(action: &str, pacing: &[(&str, &str)]) -> PodInfo {
    let mut p = pod(action);
    for (k, v) in pacing {
        p.annotations.insert((*k).into(), (*v).into());
    }
    p
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

impl World {
    fn dir_of_volume(&self) -> PathBuf {
        self.dir.path().join("volume")
    }

    /// The pod is listed, its wall clock set (`wall0` at `t0`), its volume's first content seen.
    fn start(&mut self, pod: PodInfo, t0: Instant) {
        self.agent
            .pods
            .pacing_mut()
            .set_clock(WallClock::new(wall0(), t0));
        self.agent.on_pod(PodUpdate::Resync(vec![pod]));
        self.write(1, "v1");
        self.look(LookCause::Discovered, t0);
    }

    /// The kubelet projects new content (`turn` 2-9), the watcher reports the swap at `at` and
    /// the loop acts on what is due.
    fn swap(&mut self, turn: u32, at: Instant) {
        self.write(turn, &format!("v{turn}"));
        self.look(LookCause::Swap, at);
        self.agent.fire_due_at(at);
    }

    fn write(&self, turn: u32, content: &str) {
        let dir = self.dir_of_volume();
        let ts = format!("..2026_01_01_00_00_0{turn}.1");
        std::fs::create_dir_all(dir.join(&ts)).unwrap();
        std::fs::write(dir.join(&ts).join("app.conf"), content).unwrap();
        let tmp = dir.join("..data_tmp");
        std::os::unix::fs::symlink(&ts, &tmp).unwrap();
        std::fs::rename(&tmp, dir.join("..data")).unwrap();
        let link = dir.join("app.conf");
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink("..data/app.conf", link).unwrap();
        }
    }

    fn look(&mut self, cause: LookCause, at: Instant) {
        let dir = self.dir_of_volume();
        let pods = &mut self.agent.pods;
        self.agent
            .volumes
            .look_at(&key(), dir, cause, at, &mut |c: Changed<'_>| {
                pods.content_changed(c.key, c.at, at)
            });
    }

    async fn drained(&self) {
        self.agent.exec.drain(now() + secs(60)).await;
    }

    /// Evictions run on their own tasks: waits (paused clock, a deadline) for `n` calls.
    async fn evictions(&self, n: usize) -> usize {
        let deadline = tokio::time::Instant::now() + secs(60);
        while self.evictor.calls() < n && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.evictor.calls()
    }

    fn count(&self, reason: &str) -> usize {
        self.events
            .reasons()
            .iter()
            .filter(|r| **r == reason)
            .count()
    }

    fn notes(&self, reason: &str) -> Vec<String> {
        self.events
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| e.reason == reason)
            .map(|(_, e)| e.note.clone())
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn five_rapid_changes_over_three_per_minute_signal_three_times_then_once_after_quiet() {
    let mut w = world_with(None, |_| {});
    let t0 = now();
    w.start(paced("signal", &[(spec::FLAP_THRESHOLD, "3/1m")]), t0);
    for turn in 2..=6 {
        w.swap(turn, t0 + secs(u64::from(turn)));
    }
    w.drained().await;
    assert_eq!(w.processes.sent(), 3, "three signals, then held");
    assert_eq!(w.count("Signaled"), 3);
    assert_eq!(w.count("ReloadFlapping"), 1, "{:?}", w.events.reasons());
    let note = &w.notes("ReloadFlapping")[0];
    assert!(
        note.starts_with("configmap app changed 4 times within 1m"),
        "{note}"
    );
    assert_eq!(w.agent.metrics.pacing.held.get(), 1);
    // Quiet for the window after the last change (at 6 s): one signal on the latest content.
    w.agent.fire_due_at(t0 + secs(65));
    w.drained().await;
    assert_eq!(
        w.processes.sent(),
        3,
        "not before the sources were quiet a minute"
    );
    assert_eq!(w.agent.next_deadline(), Some(t0 + secs(66)));
    w.agent.fire_due_at(t0 + secs(66));
    w.drained().await;
    assert_eq!(w.processes.sent(), 4);
    assert_eq!(w.count("ReloadFlapping"), 1, "one Event per episode");
    assert_eq!(w.agent.metrics.pacing.held.get(), 0, "the episode closed");
    assert_eq!(w.agent.metrics.pacing.flap_episodes.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_eviction_outside_its_window_waits_for_it_to_open() {
    let mut w = world_with(None, |_| {});
    let t0 = now();
    // Opens 12:01 UTC, half a minute after the change.
    w.start(paced("evict", &[(spec::WINDOW, "1 12 * * *")]), t0);
    w.swap(2, t0);
    w.drained().await;
    assert_eq!(w.evictor.calls(), 0, "outside the window");
    assert_eq!(w.notes("ReloadDeferred").len(), 1);
    let note = &w.notes("ReloadDeferred")[0];
    assert!(note.contains("2026-11-26T12:01:00Z"), "{note}");
    assert_eq!(w.agent.metrics.pacing.deferred.get(), 1);
    // Another change in the meantime: still one deferral, one eviction.
    w.swap(3, t0 + secs(10));
    w.agent.fire_due_at(t0 + secs(29));
    w.drained().await;
    assert_eq!(w.evictor.calls(), 0);
    assert_eq!(w.agent.next_deadline(), Some(t0 + secs(30)));
    w.agent.fire_due_at(t0 + secs(30));
    assert_eq!(
        w.evictions(1).await,
        1,
        "once, when the window opened: {:?}",
        w.events.reasons()
    );
    assert_eq!(w.count("ReloadDeferred"), 1, "{:?}", w.events.reasons());
    assert_eq!(w.agent.metrics.pacing.deferred.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_pods_own_debounce_acts_once_after_quiet() {
    let mut w = world_with(None, |_| {});
    let t0 = now();
    w.start(paced("signal", &[(spec::DEBOUNCE, "10s")]), t0);
    w.swap(2, t0);
    w.swap(3, t0 + secs(5));
    w.agent.fire_due_at(t0 + secs(14));
    w.drained().await;
    assert_eq!(w.processes.sent(), 0, "not quiet for 10 s yet");
    w.agent.fire_due_at(t0 + secs(15));
    w.drained().await;
    assert_eq!(w.processes.sent(), 1);
    assert!(w.events.reasons().iter().all(|r| *r == "Signaled"));
}

#[tokio::test(start_paused = true)]
async fn a_bad_pacing_annotation_warns_and_nothing_is_done_until_it_is_fixed_then_once() {
    let mut w = world_with(None, |_| {});
    let t0 = now();
    w.start(paced("signal", &[(spec::MIN_INTERVAL, "soon")]), t0);
    w.swap(2, t0);
    w.drained().await;
    assert_eq!(w.processes.sent(), 0);
    let notes = w.notes("InvalidAnnotation");
    assert!(!notes.is_empty());
    assert!(
        notes[0].contains(spec::MIN_INTERVAL) && notes[0].contains("soon"),
        "{notes:?}"
    );
    // Still invalid: the pod's next update changes nothing.
    w.agent.on_pod(PodUpdate::Apply(paced(
        "signal",
        &[(spec::MIN_INTERVAL, "later")],
    )));
    w.agent.fire_due_at(t0 + secs(1));
    w.drained().await;
    assert_eq!(w.processes.sent(), 0);
    // Fixed: the change it refused is acted on at once, without a new change.
    w.agent.on_pod(PodUpdate::Apply(paced(
        "signal",
        &[(spec::MIN_INTERVAL, "1m")],
    )));
    assert!(w.agent.next_deadline() <= Some(t0 + secs(1)), "due at once");
    w.agent.fire_due_at(t0 + secs(1));
    w.drained().await;
    assert_eq!(w.processes.sent(), 1);
    assert_eq!(w.count("Signaled"), 1);
    // Once: nothing more comes of it, and the next change is paced by the fixed interval.
    w.agent.fire_due_at(t0 + secs(2));
    w.swap(3, t0 + secs(3));
    w.drained().await;
    assert_eq!(w.processes.sent(), 1);
    assert_eq!(w.count("ReloadDeferred"), 1);
    w.agent.fire_due_at(t0 + secs(61));
    w.drained().await;
    assert_eq!(w.processes.sent(), 2, "when the interval ends");
}

#[tokio::test(start_paused = true)]
async fn a_refused_change_is_dropped_with_its_pod() {
    let mut w = world_with(None, |_| {});
    let t0 = now();
    w.start(paced("signal", &[(spec::MIN_INTERVAL, "soon")]), t0);
    w.swap(2, t0);
    w.drained().await;
    assert!(w.agent.pods.pending(UID), "kept until fixed");
    w.agent.on_pod(PodUpdate::Delete { uid: UID.into() });
    assert!(!w.agent.pods.pending(UID), "dropped with the pod");
    w.agent.fire_due_at(t0 + secs(1));
    w.drained().await;
    assert_eq!(w.processes.sent(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_min_interval_holds_across_a_restart() {
    let mut w = world_with(Some(SavedState::default()), |_| {});
    let t0 = now();
    let annotated = paced("signal", &[(spec::MIN_INTERVAL, "5m")]);
    w.start(annotated.clone(), t0);
    w.swap(2, t0);
    w.drained().await;
    assert_eq!(w.processes.sent(), 1);
    w.swap(3, t0 + secs(10));
    w.drained().await;
    assert_eq!(w.processes.sent(), 1, "within the interval");
    assert_eq!(w.count("ReloadDeferred"), 1);
    w.stop.cancel();
    w.agent.shutdown().await;
    assert_eq!(
        w.processes.sent(),
        1,
        "a deferred change is saved, not acted on at shutdown"
    );

    // The agent starts again on the same state dir.
    let store = StateStore::open(&w.dir.path().join("state")).unwrap();
    let mut again = world_with(None, |_| {});
    let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
    let deps = Deps {
        events: again.events.clone(),
        processes: again.processes.clone(),
        evictor: again.evictor.clone(),
        http: again.http.clone(),
        notifier: crate::outbound::notify::Notifier::disabled(),
        record: None,
        gate: None,
    };
    let mut settings = super::settings(w.dir.path());
    settings.pacing = Default::default();
    again.agent = Agent::new(
        settings,
        EvictionSettings::default(),
        deps,
        metrics,
        again.health.clone(),
        Some(store),
        again.stop.clone(),
    );
    again.dir = w.dir;
    let t1 = t0 + secs(20);
    again
        .agent
        .pods
        .pacing_mut()
        .set_clock(WallClock::new(wall0() + secs(20), t1));
    again.agent.on_pod(PodUpdate::Resync(vec![annotated]));
    // The changed content is found again at start, and still waits for the interval.
    again.look(LookCause::Discovered, t1);
    again.agent.fire_due_at(t1);
    again.drained().await;
    assert_eq!(
        again.processes.sent(),
        0,
        "the interval outlived the restart"
    );
    assert_eq!(
        again.count("ReloadDeferred"),
        0,
        "reported once, before the restart"
    );
    assert_eq!(again.agent.next_deadline(), Some(t0 + secs(300)));
    again.agent.fire_due_at(t0 + secs(300));
    again.drained().await;
    assert_eq!(again.processes.sent(), 1, "once, when the interval ended");
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_while_held_is_dropped() {
    let mut w = world_with(None, |_| {});
    let t0 = now();
    w.start(paced("signal", &[(spec::MIN_INTERVAL, "5m")]), t0);
    w.swap(2, t0);
    w.drained().await;
    w.swap(3, t0 + secs(1));
    assert_eq!(w.agent.metrics.pacing.deferred.get(), 1);
    w.agent.on_pod(PodUpdate::Delete { uid: UID.into() });
    assert_eq!(w.agent.metrics.pacing.deferred.get(), 0);
    assert_eq!(w.agent.next_deadline(), None);
    w.agent.fire_due_at(t0 + secs(300));
    w.drained().await;
    assert_eq!(w.processes.sent(), 1, "the first change only");
}

#[tokio::test(start_paused = true)]
async fn window_actions_all_holds_a_signal_and_max_defer_forces_it() {
    let mut w = world_with(None, |s| s.pacing.max_defer = Some(secs(10)));
    let t0 = now();
    // The window opens at 12:01, 30 s away; --max-defer forces the signal after 10 s.
    w.start(
        paced(
            "signal",
            &[(spec::WINDOW, "1 12 * * *"), (spec::WINDOW_ACTIONS, "all")],
        ),
        t0,
    );
    w.swap(2, t0);
    w.drained().await;
    assert_eq!(w.processes.sent(), 0, "a signal is held too");
    let note = &w.notes("ReloadDeferred")[0];
    assert!(note.contains("2026-11-26T12:00:40Z"), "{note}");
    w.agent.fire_due_at(t0 + secs(9));
    w.drained().await;
    assert_eq!(w.processes.sent(), 0);
    w.agent.fire_due_at(t0 + secs(10));
    w.drained().await;
    assert_eq!(w.processes.sent(), 1, "forced by --max-defer");
}
