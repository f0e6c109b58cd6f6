//! The real [`Agent::run`] loop under Tokio's paused clock: a temp-dir kubelet root watched
//! with inotify, the fakes of [`crate::ports::fake`] for every other edge, and the test
//! stepping the clock ([`tokio::time::advance`]) across the debounce window.

use super::{pod, world_with, World, UID};
use crate::agent::*;
use crate::core::model::VolumePlugin;
use crate::host::inotify::WatcherOptions;
use crate::ports::fake;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::path::{Path, PathBuf};
use test_support::wait::until_yielding;

/// The debounce window of these tests.
const WINDOW: Duration = Duration::from_secs(2);

/// The loop, running, and what the test watches it through.
struct Running {
    events: Arc<fake::Events>,
    processes: Arc<fake::Processes>,
    /// The kubelet root.
    dir: tempfile::TempDir,
    pods: mpsc::Sender<PodUpdate>,
    shutdown: CancellationToken,
    run: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// Swaps of configMap volumes seen.
    swaps: Counter,
    /// Volumes whose content the agent holds.
    tracked: Gauge,
}

/// `<kubelet-root>/pods/<UID>/volumes/kubernetes.io~configmap/conf`.
fn volume_dir(root: &Path) -> PathBuf {
    root.join("pods")
        .join(UID)
        .join("volumes/kubernetes.io~configmap/conf")
}

/// Projects `content` into the volume at `dir` the way the kubelet's AtomicWriter does: a new
/// timestamped directory, then `..data` swapped to it.
pub(super) fn project(dir: &Path, turn: u32, content: &str) {
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

/// Starts the loop over a kubelet root holding the signal pod's configMap volume (content
/// `v1`), with the pod list sent; returns once the volume's content is known.
async fn start() -> Running {
    let World {
        agent,
        events,
        processes,
        dir,
        ..
    } = world_with(None, |s| s.volumes.debounce = WINDOW);
    project(&volume_dir(dir.path()), 1, "v1");
    let watcher = VolumeWatcher::new(dir.path(), WatcherOptions::default()).unwrap();
    let swaps = agent
        .volumes
        .swap_counters(VolumePlugin::ConfigMap)
        .0
        .clone();
    let tracked = agent.metrics.watch.volumes_tracked.clone();
    let (pods, rx) = mpsc::channel(16);
    pods.send(PodUpdate::Resync(vec![pod("signal")]))
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(agent.run(watcher, rx, shutdown.clone()));
    let running = Running {
        events,
        processes,
        dir,
        pods,
        shutdown,
        run,
        swaps,
        tracked,
    };
    until_yielding("the volume's first content", || running.tracked.get() == 1).await;
    running
}

impl Running {
    fn volume_dir(&self) -> PathBuf {
        volume_dir(self.dir.path())
    }

    /// The kubelet writes new content into the volume; returns once the loop saw the swap.
    async fn swap(&self, turn: u32, content: &str) {
        let before = self.swaps.get();
        project(&self.volume_dir(), turn, content);
        until_yielding("the swap to be seen", || self.swaps.get() > before).await;
    }

    /// Ends the loop and waits for it: `run` returns `Ok`.
    async fn stop(mut self) -> Self {
        self.shutdown.cancel();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !self.run.is_finished() {
            assert!(std::time::Instant::now() < deadline, "run did not end");
            tokio::task::yield_now().await;
        }
        (&mut self.run).await.unwrap().unwrap();
        self
    }
}

#[tokio::test(start_paused = true)]
async fn a_configmap_swap_signals_the_container_once_after_the_debounce() {
    let r = start().await;
    r.swap(2, "v2").await;
    // Sleeping on the paused clock (not `advance`): the runtime runs every task that is ready
    // before it moves the clock to the next timer, so whatever the loop would do before the
    // window ends has been done when this returns.
    tokio::time::sleep(WINDOW - Duration::from_millis(1)).await;
    assert_eq!(r.processes.sent(), 0, "acted within the window");
    tokio::time::advance(Duration::from_millis(1)).await;
    until_yielding("the signal", || r.processes.sent() == 1).await;
    // Nothing more comes of the one change, however long the loop runs on.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let sent = r.processes.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((sent[0].0.as_str(), sent[0].1.as_str()), (UID, "abc"));
    let w = r.stop().await;
    assert_eq!(w.events.reasons(), ["Signaled"]);
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_in_its_window_drops_its_volume_state_and_nothing_is_done() {
    let r = start().await;
    r.swap(2, "v2").await;
    r.pods
        .send(PodUpdate::Delete { uid: UID.into() })
        .await
        .unwrap();
    // The kubelet removes the pod's directory.
    std::fs::remove_dir_all(r.dir.path().join("pods").join(UID)).unwrap();
    until_yielding("the pod's volume state to go", || r.tracked.get() == 0).await;
    // The positive control of this absence is the test above: the same swap, kept, is
    // signalled once its window ends; here ten windows pass on the paused clock.
    tokio::time::sleep(WINDOW * 10).await;
    assert_eq!(r.processes.sent(), 0);
    let w = r.stop().await;
    assert!(w.events.reasons().is_empty());
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_run() {
    let r = start().await;
    let w = r.stop().await;
    assert_eq!(w.processes.sent(), 0);
}

/// The signal pod with a projection nudge naming `value` (and `extra` annotations).
fn nudged(value: &str, extra: &[(&str, &str)]) -> crate::core::model::PodInfo {
    let mut p = pod("signal");
    p.annotations.insert(
        crate::core::annotations::PROJECTION_NUDGE.into(),
        value.into(),
    );
    for (k, v) in extra {
        p.annotations.insert((*k).into(), (*v).into());
    }
    p
}

impl Running {
    /// Sends a pod update; returns once the loop took it.
    async fn update(&self, pod: crate::core::model::PodInfo) {
        self.pods.send(PodUpdate::Apply(pod)).await.unwrap();
        until_yielding("the pod update to be taken", || {
            self.pods.capacity() == self.pods.max_capacity()
        })
        .await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// Lets the loop run `by` of paused time; the signals sent so far (a signal job may run
    /// off the loop's task: given 200 ms of wall-clock time to show).
    async fn after(&self, by: Duration) -> usize {
        let before = self.processes.sent();
        tokio::time::advance(by).await;
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        while self.processes.sent() == before && std::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        self.processes.sent()
    }
}

#[tokio::test(start_paused = true)]
async fn a_swap_a_nudge_announced_is_acted_on_after_the_grace_not_the_debounce() {
    use crate::core::debounce::ANNOUNCED_GRACE;
    let r = start().await;
    // The pod's first sight with a nudge is a baseline; the next value is a new change of
    // ConfigMap `app`, which volume `conf` projects.
    r.update(nudged("configmap/app@1", &[])).await;
    r.update(nudged("configmap/app@2", &[])).await;
    r.swap(2, "v2").await;
    assert_eq!(r.after(ANNOUNCED_GRACE - Duration::from_millis(1)).await, 0);
    assert_eq!(
        r.after(Duration::from_millis(1)).await,
        1,
        "due after the grace"
    );
    // The re-nudge of the same change, and the rest of the window: nothing more.
    r.update(nudged("configmap/app@2#2", &[])).await;
    assert_eq!(r.after(WINDOW * 10).await, 1);
    // The next swap nobody announced waits for the debounce again.
    r.swap(3, "v3").await;
    assert_eq!(r.after(WINDOW - Duration::from_millis(1)).await, 1);
    assert_eq!(r.after(Duration::from_millis(1)).await, 2);
    let w = r.stop().await;
    assert_eq!(w.events.reasons(), ["Signaled", "Signaled"]);
}

#[tokio::test(start_paused = true)]
async fn a_nudge_for_another_object_or_a_pods_own_debounce_keeps_the_wait() {
    use crate::core::debounce::ANNOUNCED_GRACE;
    let r = start().await;
    r.update(nudged("configmap/app@1", &[])).await;
    // Another object: volume `conf` is not announced, the swap waits for the window.
    r.update(nudged("configmap/other@2", &[])).await;
    r.swap(2, "v2").await;
    assert_eq!(r.after(ANNOUNCED_GRACE * 2).await, 0);
    assert_eq!(r.after(WINDOW).await, 1);
    // The pod's own `reloadlet.io/debounce` wins over the announcement.
    let own = [("reloadlet.io/debounce", "5s")];
    r.update(nudged("configmap/app@3", &own)).await;
    r.update(nudged("configmap/app@4", &own)).await;
    r.swap(3, "v3").await;
    assert_eq!(r.after(ANNOUNCED_GRACE * 2).await, 1);
    assert_eq!(r.after(Duration::from_secs(5)).await, 2);
    r.stop().await;
}

/// Writes `bytes` of content into a configMap-style volume at `dir` (`..data` → a new write).
fn write_volume(dir: &Path, turn: u32, bytes: usize) {
    project(dir, turn, &"x".repeat(bytes));
}

#[tokio::test(start_paused = true)]
async fn an_announced_change_waits_while_another_volume_of_the_pod_is_on_the_hasher_thread() {
    use crate::core::debounce::ANNOUNCED_GRACE;
    use crate::core::model::{SourceKind, SourceRef, VolumeKey, VolumeSpec};
    use crate::host::inotify::LookCause;
    let mut w = world_with(None, |s| s.volumes.debounce = WINDOW);
    let mut p = nudged("configmap/app@1", &[]);
    p.volumes.push(VolumeSpec {
        name: "big".into(),
        sources: vec![SourceRef {
            kind: SourceKind::ConfigMap,
            name: "big".into(),
        }],
        ..Default::default()
    });
    w.agent.on_pod(PodUpdate::Resync(vec![p.clone()]));
    p.annotations.insert(
        crate::core::annotations::PROJECTION_NUDGE.into(),
        "configmap/app@2".into(),
    );
    w.agent.on_pod(PodUpdate::Apply(p));
    let t0 = now();
    let key = |volume: &str| VolumeKey {
        pod_uid: UID.into(),
        plugin: VolumePlugin::ConfigMap,
        volume: volume.into(),
    };
    let (conf, big) = (w.dir.path().join("conf"), w.dir.path().join("big"));
    // `conf`: known, then swapped (the announced volume).
    project(&conf, 1, "v1");
    let pods = &mut w.agent.pods;
    let mut changed = |c: Changed<'_>| pods.content_changed(c.key, c.at, t0);
    w.agent.volumes.look_at(
        &key("conf"),
        conf.clone(),
        LookCause::Discovered,
        t0,
        &mut changed,
    );
    project(&conf, 2, "v2");
    w.agent
        .volumes
        .look_at(&key("conf"), conf, LookCause::Swap, t0, &mut changed);
    // `big`: over INLINE_HASH_BYTES, looked at: its hash goes to the hasher thread.
    write_volume(&big, 1, INLINE_HASH_BYTES as usize + 1);
    w.agent
        .volumes
        .look_at(&key("big"), big, LookCause::Swap, t0, &mut changed);
    assert!(w.agent.volumes.hashing(UID));
    assert_eq!(w.agent.pods.next_deadline(), Some(t0 + ANNOUNCED_GRACE));
    // Due on the announcement, but `big` may belong to the same sync: postponed, not acted on.
    w.agent.fire_due_at(t0 + ANNOUNCED_GRACE);
    w.agent.exec.drain(now() + Duration::from_secs(60)).await;
    assert_eq!(w.processes.sent(), 0);
    assert_eq!(w.agent.pods.next_deadline(), Some(t0 + 2 * ANNOUNCED_GRACE));
    // The hash is back (the volume's first content, a baseline): the change goes, once.
    let mut hashed = w.agent.hashed.take().unwrap();
    let done = hashed.recv().await.unwrap();
    w.agent.on_hashed(done);
    assert!(!w.agent.volumes.hashing(UID));
    w.agent.fire_due_at(t0 + 2 * ANNOUNCED_GRACE);
    w.agent.exec.drain(now() + Duration::from_secs(60)).await;
    assert_eq!(w.processes.sent(), 1);
    assert_eq!(w.events.reasons(), ["Signaled"]);
}
