//! The event loop's decisions, driven through its handlers with a fake of every edge
//! (processes, Eviction API, Events), a real volume in a temp dir and explicit instants.

mod arrival;
mod contain;
mod grant;
mod pacing;
mod record;
mod run;

use super::*;
use crate::config::agent::{EvictionLimits, HostPaths, VolumeSettings};
use crate::config::LogFormat;
use crate::core::annotations;
use crate::core::model::{
    ContainerId, ContainerInfo, ContainerKind, ContainerPort, PodInfo, SourceKind, SourceRef,
    VolumeKey, VolumeMount, VolumePlugin, VolumeSpec,
};
use crate::host::inotify::LookCause;
use crate::host::state_file::{PendingEviction, SavedState};
use crate::host::volume_read::{hash_volume_counted, Layout};
use crate::ports::fake;
use std::path::{Path, PathBuf};

pub(super) const UID: &str = "0f0e0d0c-0b0a-4900-8800-000000000001";

pub(super) struct World {
    pub(super) agent: Agent,
    pub(super) events: Arc<fake::Events>,
    pub(super) processes: Arc<fake::Processes>,
    pub(super) evictor: Arc<fake::Evictor>,
    pub(super) http: Arc<fake::Http>,
    pub(super) health: Arc<Health>,
    pub(super) stop: CancellationToken,
    pub(super) dir: tempfile::TempDir,
    /// The pod edge of the status record, and the controller's key as the agent knows it.
    pub(super) patcher: crate::controller::fake::FakePatcher,
    pub(super) key: tokio::sync::watch::Sender<Option<crate::core::volume_digest::HashKey>>,
}

pub(super) fn settings(dir: &Path) -> Settings {
    Settings {
        node_name: "node-1".into(),
        own_pod: None,
        paths: HostPaths {
            kubelet_root: dir.into(),
            proc_root: "/proc".into(),
            state_dir: dir.join("state"),
        },
        volumes: VolumeSettings {
            debounce: Duration::ZERO,
            hot_thread_slice: Duration::ZERO,
            max_volume_bytes: 1 << 20,
            rescan_interval: Duration::from_secs(60),
            csi_drivers: Vec::new(),
            csi_settle: Duration::from_secs(2),
        },
        listen: "127.0.0.1:0".parse().unwrap(),
        log_format: LogFormat::Text,
        // No namespace filter, no selector, not a dry run.
        scope: Default::default(),
        eviction: EvictionLimits {
            max_in_flight: 10,
            backoff: Duration::from_secs(5),
            backoff_max: Duration::from_secs(120),
        },
        shutdown_grace: Duration::from_secs(5),
        restart_spacing: crate::core::restart::MIN_SPACING,
        restart_without_grant: true,
        controller_lease: None,
        notify: Default::default(),
        pacing: Default::default(),
        http_ca_file: None,
        http_fence: Default::default(),
    }
}

pub(super) fn world(saved: Option<SavedState>) -> World {
    world_with(saved, |_| {})
}

/// [`world`], with `settings` changed by `adjust`.
pub(super) fn world_with(saved: Option<SavedState>, adjust: impl FnOnce(&mut Settings)) -> World {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(fake::Events::default());
    let processes = Arc::new(fake::Processes::with("abc", 4242));
    let evictor = Arc::new(fake::Evictor::default());
    let http = Arc::new(fake::Http::default());
    let patcher = crate::controller::fake::FakePatcher::default();
    let (key, key_rx) = tokio::sync::watch::channel(None);
    let deps = Deps {
        events: events.clone(),
        processes: processes.clone(),
        evictor: evictor.clone(),
        http: http.clone(),
        notifier: crate::outbound::notify::Notifier::disabled(),
        record: Some(crate::execute::applied::RecordDeps {
            patcher: Arc::new(patcher.clone()),
            key: key_rx,
        }),
        gate: None,
    };
    let store = saved.map(|saved| {
        let store = StateStore::open(&dir.path().join("state")).unwrap();
        store
            .save(
                &saved.pending_evictions,
                &saved.volume_digests(),
                &saved.pacers,
            )
            .unwrap();
        store
    });
    let stop = CancellationToken::new();
    let health = Arc::new(Health::default());
    let mut settings = settings(dir.path());
    adjust(&mut settings);
    let agent = Agent::new(
        settings,
        EvictionSettings::default(),
        deps,
        Metrics::new(&mut prometheus_client::registry::Registry::default()),
        health.clone(),
        store,
        stop.clone(),
    );
    World {
        agent,
        events,
        processes,
        evictor,
        http,
        health,
        stop,
        dir,
        patcher,
        key,
    }
}

/// An opted-in pod whose container `app` mounts configMap volume `conf`.
pub(super) fn pod(action: &str) -> PodInfo {
    let mut pod = PodInfo {
        uid: UID.into(),
        namespace: "web".into(),
        name: "web-0".into(),
        has_controller: true,
        phase: "Running".into(),
        volumes: vec![VolumeSpec {
            name: "conf".into(),
            sources: vec![SourceRef {
                kind: SourceKind::ConfigMap,
                name: "app".into(),
            }],
            ..Default::default()
        }],
        containers: vec![ContainerInfo {
            name: "app".into(),
            kind: ContainerKind::Regular,
            mounts: vec![VolumeMount {
                volume: "conf".into(),
                sub_path: false,
            }],
            container_id: ContainerId::parse("containerd://abc"),
            running: true,
            ports: Vec::new(),
        }],
        ..Default::default()
    };
    pod.annotations
        .insert(annotations::ACTION.into(), action.into());
    pod
}

pub(super) fn key() -> VolumeKey {
    VolumeKey {
        pod_uid: UID.into(),
        plugin: VolumePlugin::ConfigMap,
        volume: "conf".into(),
    }
}

impl World {
    /// Where the kubelet keeps the volume (status records read the pinned write there).
    fn volume_dir(&self) -> PathBuf {
        crate::host::inotify::volume_path(&self.dir.path().join("pods"), &key())
    }

    /// A signal pod whose volume holds `content`, looked at once (the baseline); its dir.
    fn discovered(&mut self, content: &str, at: Instant) -> PathBuf {
        self.agent.on_pod(PodUpdate::Resync(vec![pod("signal")]));
        let dir = self.volume_dir();
        self.project(1, content);
        self.look_at(dir.clone(), LookCause::Discovered, at);
        dir
    }

    /// Projects `content` the way the kubelet's AtomicWriter does: a new timestamped
    /// directory, then `..data` swapped to it.
    fn project(&self, turn: u32, content: &str) {
        let dir = self.volume_dir();
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

    /// The volume is seen (a baseline), then changes at `at`.
    fn change_at(&mut self, at: Instant) {
        self.project(1, "v1");
        let dir = self.volume_dir();
        self.look_at(dir.clone(), LookCause::Discovered, at);
        self.project(2, "v2");
        self.look_at(dir, LookCause::Swap, at);
    }

    /// The volume looked at (as the watcher asks) at `at`.
    fn look_at(&mut self, dir: PathBuf, cause: LookCause, at: Instant) {
        let pods = &mut self.agent.pods;
        self.agent
            .volumes
            .look_at(&key(), dir, cause, at, &mut |c: Changed<'_>| {
                pods.content_changed(c.key, c.at, at)
            });
    }

    pub(super) async fn settle(&self) {
        self.agent.exec.drain(now() + Duration::from_secs(60)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_change_of_a_pod_the_api_has_not_shown_yet_waits_for_it() {
    let mut w = world(None);
    let t0 = now();
    w.change_at(t0);
    w.agent.fire_due_at(t0);
    assert_eq!(
        w.agent.pods.debouncer().next_deadline(),
        Some(t0 + Duration::from_secs(1))
    );
    // The pod shows up three seconds late.
    for s in 1..=3 {
        w.agent.fire_due_at(t0 + Duration::from_secs(s));
    }
    w.agent.on_pod(PodUpdate::Apply(pod("signal")));
    w.agent.fire_due_at(t0 + Duration::from_secs(4));
    w.settle().await;
    assert_eq!(w.processes.sent(), 1);
    assert_eq!(w.events.reasons(), ["Signaled"]);
}

#[tokio::test(start_paused = true)]
async fn a_change_of_a_pod_that_never_shows_is_given_up_without_action() {
    let mut w = world(None);
    let t0 = now();
    w.change_at(t0);
    for s in 0..=u64::from(UNKNOWN_POD_ATTEMPTS) {
        w.agent.fire_due_at(t0 + Duration::from_secs(s));
    }
    assert_eq!(w.agent.pods.debouncer().next_deadline(), None, "given up");
    // The pod showing up later does not act on the old change.
    w.agent.on_pod(PodUpdate::Apply(pod("signal")));
    w.agent.fire_due_at(t0 + Duration::from_secs(3600));
    w.settle().await;
    assert_eq!(w.processes.sent(), 0);
    assert!(w.events.reasons().is_empty());
}

#[tokio::test(start_paused = true)]
async fn shutdown_acts_on_a_change_still_in_its_debounce_window() {
    let mut w = world(None);
    *w.agent.pods.debouncer_mut() = Debouncer::new(Duration::from_secs(3600));
    w.agent.on_pod(PodUpdate::Resync(vec![pod("signal")]));
    w.change_at(now());
    w.stop.cancel();
    w.agent.shutdown().await;
    assert_eq!(w.processes.sent(), 1);
    assert_eq!(w.events.reasons(), ["Signaled"]);
}

#[tokio::test(start_paused = true)]
async fn an_eviction_pending_at_the_last_stop_resumes_after_the_first_pod_list() {
    let saved = SavedState {
        pending_evictions: vec![
            PendingEviction {
                uid: UID.into(),
                namespace: "web".into(),
                name: "web-0".into(),
                cause: "configmap app changed".into(),
            },
            PendingEviction {
                uid: "gone".into(),
                namespace: "web".into(),
                name: "web-1".into(),
                cause: "configmap app changed".into(),
            },
        ],
        ..Default::default()
    };
    let mut w = world(Some(saved));
    w.agent.on_pod(PodUpdate::Resync(vec![pod("evict")]));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while w.evictor.calls() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let calls: Vec<String> = w
        .evictor
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(calls, ["web-0"], "only the pod that still exists");
    while w.events.reasons().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(w.events.reasons(), ["EvictionRequested"]);
}

/// An `http` pod: container `app` declares port `web` (9090); the pod's IP is 10.1.2.3.
pub(super) fn http_pod() -> PodInfo {
    let mut pod = pod("http");
    pod.annotations
        .insert(annotations::HTTP_PORT.into(), "web".into());
    pod.annotations
        .insert(annotations::HTTP_BODY.into(), "{}".into());
    pod.containers[0].ports = vec![ContainerPort::named("web", 9090)];
    pod.pod_ip = Some("10.1.2.3".parse().unwrap());
    pod
}

#[tokio::test(start_paused = true)]
async fn an_http_pod_gets_one_request_to_its_ip_and_named_port() {
    let mut w = world(None);
    w.agent.on_pod(PodUpdate::Resync(vec![http_pod()]));
    let t0 = now();
    w.change_at(t0);
    w.agent.fire_due_at(t0);
    w.settle().await;
    let calls = w.http.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].url, "http://10.1.2.3:9090/-/reload");
    assert_eq!(calls[0].body, "{}");
    assert_eq!(w.processes.sent(), 0, "no signal");
    assert_eq!(w.events.reasons(), ["Reloaded"]);
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_or_restarted_while_its_request_retries_gets_no_more_requests() {
    for restart in [false, true] {
        let mut w = world(None);
        w.http
            .script
            .lock()
            .unwrap()
            .extend(std::iter::repeat_n(fake::Reply::Status(503, ""), 1000));
        w.agent.on_pod(PodUpdate::Resync(vec![http_pod()]));
        let t0 = now();
        w.change_at(t0);
        w.agent.fire_due_at(t0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while w.http.calls().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if restart {
            let mut restarted = http_pod();
            restarted.containers[0].container_id = ContainerId::parse("containerd://def");
            w.agent.on_pod(PodUpdate::Apply(restarted));
        } else {
            w.agent.on_pod(PodUpdate::Delete { uid: UID.into() });
        }
        tokio::time::sleep(Duration::from_secs(600)).await;
        w.settle().await;
        assert_eq!(w.http.calls().len(), 1, "restart: {restart}");
        assert!(w.events.reasons().is_empty(), "restart: {restart}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_kubelet_swap_is_acted_on_before_the_volume_is_hashed_and_hashed_after() {
    let mut w = world(None);
    w.agent.on_pod(PodUpdate::Resync(vec![pod("signal")]));
    let t0 = now();
    w.change_at(t0);
    // Taken as changed on the kubelet's word: pending, not hashed yet.
    assert_eq!(
        w.agent.volumes.detector().unhashed().collect::<Vec<_>>(),
        [&key()]
    );
    let before = w.agent.volumes.detector().last(&key()).unwrap().clone();
    w.agent.fire_due_at(t0);
    w.settle().await;
    assert_eq!(w.processes.sent(), 1);
    assert_eq!(w.events.reasons(), ["Signaled"]);
    // Then hashed: the state file knows the new content.
    assert_eq!(w.agent.volumes.detector().unhashed().count(), 0);
    let now = hash_volume_counted(
        &w.volume_dir(),
        1 << 20,
        w.agent.volumes.hash_key(),
        &Layout::whole(),
    )
    .unwrap()
    .unwrap()
    .digest;
    assert_ne!(before, now);
    assert_eq!(w.agent.volumes.detector().snapshot(), vec![(key(), now)]);
}

#[tokio::test(start_paused = true)]
async fn a_swap_without_new_bytes_is_acted_on_and_counted_as_unchanged() {
    let mut w = world(None);
    let t0 = now();
    let dir = w.discovered("v1", t0);
    // Not the kubelet (its AtomicWriter writes nothing when nothing changed).
    w.project(2, "v1");
    w.look_at(dir, LookCause::Swap, t0);
    w.agent.fire_due_at(t0);
    w.settle().await;
    assert_eq!(w.processes.sent(), 1);
    let unchanged = w
        .agent
        .volumes
        .swap_counters(VolumePlugin::ConfigMap)
        .1
        .get();
    assert_eq!(unchanged, 1);
}

#[tokio::test(start_paused = true)]
async fn a_swap_event_queued_before_the_first_hash_changes_nothing() {
    // A pod's first write: the discovery hash reads it before the `IN_MOVED_TO ..data`
    // of that same write is read from the inotify queue.
    let mut w = world(None);
    let t0 = now();
    let dir = w.discovered("v1", t0);
    w.look_at(dir, LookCause::Swap, t0);
    assert_eq!(
        w.agent.volumes.detector().unhashed().count(),
        0,
        "hashed, not trusted"
    );
    w.agent.fire_due_at(t0 + Duration::from_secs(60));
    w.settle().await;
    assert_eq!(w.processes.sent(), 0);
    assert!(w.events.reasons().is_empty());
}

#[tokio::test(start_paused = true)]
async fn without_a_state_store_the_chores_do_not_come_back() {
    let mut w = world(None);
    w.change_at(now());
    assert!(w.agent.volumes.dirty());
    w.agent.chores.soon(now());
    let due = w.agent.chores.next().unwrap();
    assert!(w.agent.chores.take_due(due));
    w.agent
        .chores
        .run(&w.agent.pods, &mut w.agent.volumes, &w.agent.exec);
    // The loop arms the chores again after a turn only while something is unsaved.
    assert!(!w.agent.volumes.dirty());
    assert_eq!(w.agent.chores.next(), None);
}

#[tokio::test(start_paused = true)]
async fn a_pod_gone_drops_each_of_its_volumes_in_one_call() {
    let mut w = world(None);
    w.change_at(now());
    // Known, and swapped: waiting for its pod's action and its hash after it.
    assert_eq!(w.agent.volumes.entries(), (1, 1));
    w.agent.volumes.forget_pod(UID);
    assert_eq!(w.agent.volumes.entries(), (0, 0));
    assert_eq!(w.agent.volumes.len(), 0);
    assert!(w.agent.volumes.snapshot().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_csi_volume_written_in_place_is_acted_on_once_after_the_writes_settled() {
    let mut w = world(None);
    let mut p = pod("signal");
    p.volumes = vec![VolumeSpec {
        name: "conf".into(),
        csi: Some(crate::core::model::CsiVolumeSpec {
            driver: "secrets-store.csi.k8s.io".into(),
            class: Some("vault-db".into()),
        }),
        ..Default::default()
    }];
    w.agent.on_pod(PodUpdate::Resync(vec![p]));
    let k = VolumeKey {
        plugin: VolumePlugin::Csi,
        ..key()
    };
    let dir = w.volume_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let write = |v: &str, file: &str| std::fs::write(dir.join(file), v).unwrap();
    let look = |w: &mut World, cause: LookCause, at: Instant| {
        let pods = &mut w.agent.pods;
        w.agent
            .volumes
            .look(&k, dir.clone(), cause, at, &mut |c: Changed<'_>| {
                pods.content_changed(c.key, c.at, at)
            });
    };
    let s = Duration::from_secs(2);
    let t0 = now();
    for f in ["a", "b", "c"] {
        write("1", f);
    }
    // The mount seen: a baseline once settled, no action.
    look(&mut w, LookCause::Remounted, t0);
    assert_eq!(w.agent.next_deadline(), Some(t0 + s));
    w.agent.fire_due_at(t0 + s);
    assert_eq!(w.agent.volumes.len(), 1);
    // Three files over one second: one look, after the last write.
    let t1 = t0 + Duration::from_secs(10);
    for (i, f) in ["a", "b", "c"].into_iter().enumerate() {
        write("2", f);
        look(
            &mut w,
            LookCause::Written,
            t1 + Duration::from_millis(500) * i as u32,
        );
    }
    let due = t1 + Duration::from_secs(1) + s;
    assert_eq!(w.agent.next_deadline(), Some(due));
    w.agent.fire_due_at(due - Duration::from_millis(1));
    w.settle().await;
    assert_eq!(w.processes.sent(), 0, "acted on before the writes settled");
    w.agent.fire_due_at(due);
    w.settle().await;
    assert_eq!(w.processes.sent(), 1);
    assert_eq!(w.events.reasons(), ["Signaled"]);
    // The same bytes written again: hashed, unchanged, nothing.
    write("2", "a");
    look(&mut w, LookCause::Written, due);
    w.agent.fire_due_at(due + s);
    w.settle().await;
    assert_eq!(w.processes.sent(), 1);
}
