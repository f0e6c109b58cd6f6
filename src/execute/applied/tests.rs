//! The status record's writer against a fake pod edge, real files in a temp dir and a paused
//! clock.

use super::*;
use crate::controller::fake::FakePatcher;
use crate::core::model::{SourceKind, VolumeSpec};
use std::time::Duration;

const UID: &str = "u1";

fn cm(name: &str) -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: name.into(),
    }
}

fn key() -> HashKey {
    HashKey::from_bytes([9; 32])
}

/// Pod `shop/web-0` with configMap volume `conf` (ConfigMap `app`), `spec` adjusting it.
fn pod(spec: impl FnOnce(&mut VolumeSpec)) -> PodInfo {
    let mut volume = VolumeSpec {
        name: "conf".into(),
        sources: vec![cm("app")],
        ..VolumeSpec::default()
    };
    spec(&mut volume);
    PodInfo {
        uid: UID.into(),
        namespace: "shop".into(),
        name: "web-0".into(),
        volumes: vec![volume],
        ..PodInfo::default()
    }
}

struct World {
    recorder: AppliedRecorder,
    patcher: FakePatcher,
    index: Arc<RwLock<PodIndex>>,
    key: watch::Sender<Option<HashKey>>,
    dir: tempfile::TempDir,
}

fn world(pod: PodInfo) -> World {
    let patcher = FakePatcher::default();
    patcher.put(pod.clone());
    let mut index = PodIndex::default();
    index.apply(pod);
    let index = Arc::new(RwLock::new(index));
    let (key, rx) = watch::channel(Some(self::key()));
    let deps = RecordDeps {
        patcher: Arc::new(patcher.clone()),
        key: rx,
    };
    World {
        recorder: AppliedRecorder::start(deps, index.clone()),
        patcher,
        index,
        key,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl World {
    /// A kubelet write of `files` in the volume dir; its pin.
    fn write(&self, ts: &str, files: &[(&str, &str)]) -> Seen {
        let dir = self.dir.path();
        for (path, content) in files {
            let file = dir.join(ts).join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, content).unwrap();
        }
        let _ = std::fs::remove_file(dir.join("..data"));
        std::os::unix::fs::symlink(ts, dir.join("..data")).unwrap();
        Seen::new(vec![Pin {
            volume: "conf".into(),
            dir: dir.to_path_buf(),
            target: crate::host::volume_read::data_target(dir).unwrap(),
        }])
    }

    fn note(&self, outcome: Outcome, note: &str, seen: &Seen) {
        let pod = PodRef {
            uid: UID.into(),
            namespace: "shop".into(),
            name: "web-0".into(),
        };
        let sources = [cm("app")];
        self.recorder.note(
            &pod,
            ActionKind::Signal,
            outcome,
            note,
            &sources,
            seen,
            None,
        );
    }

    /// The records written so far, parsed.
    async fn written(&self) -> Vec<Applied> {
        // The writer's turn (its file reads run on the blocking pool).
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.patcher
            .applied_writes()
            .iter()
            .map(|(_, _, v)| Applied::parse(v).unwrap())
            .collect()
    }
}

fn version_of(files: &[(&str, &str)]) -> DataVersion {
    version_of_files(
        &key(),
        "shop",
        &cm("app"),
        files.iter().map(|(k, v)| (*k, v.as_bytes())),
    )
}

#[tokio::test(start_paused = true)]
async fn an_outcome_is_recorded_with_the_version_of_the_write_pinned_before_the_action() {
    let w = world(pod(|_| {}));
    let seen = w.write("..2026_11_29_09_00_00.1", &[("app.conf", "x=2")]);
    // The kubelet writes again after the action; the pinned write is still there.
    w.write("..2026_11_29_09_00_05.2", &[("app.conf", "x=3")]);
    w.note(Outcome::Signaled, "sent SIGHUP", &seen);
    let written = w.written().await;
    assert_eq!(written.len(), 1);
    let entry = written[0].get(&cm("app")).unwrap();
    assert_eq!(
        entry.data_version(),
        Some(version_of(&[("app.conf", "x=2")]))
    );
    assert_eq!(
        (entry.result, entry.by.as_str(), entry.action.as_str()),
        (Recorded::Applied, BY, "signal")
    );
    assert_eq!(entry.error, None);
}

#[tokio::test(start_paused = true)]
async fn the_same_facts_again_are_not_written_even_before_the_pod_shows_the_first() {
    let w = world(pod(|_| {}));
    let seen = w.write("..2026_11_29_09_00_00.1", &[("app.conf", "x=2")]);
    // Two containers signalled for one change: the same facts twice. The index never shows
    // the first write (no watch here): the writer remembers it.
    w.note(Outcome::Signaled, "sent SIGHUP", &seen);
    w.note(Outcome::Signaled, "sent SIGHUP", &seen);
    assert_eq!(w.written().await.len(), 1);
    // A failure is news, with the Event's text.
    w.note(Outcome::SignalFailed, "container app is not running", &seen);
    let written = w.written().await;
    assert_eq!(written.len(), 2);
    let entry = written[1].get(&cm("app")).unwrap();
    assert_eq!(entry.result, Recorded::Failed);
    assert_eq!(entry.error.as_deref(), Some("container app is not running"));
    // Outcomes that are not about an action are never recorded.
    w.note(Outcome::InvalidAnnotation, "bad", &seen);
    assert_eq!(w.written().await.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn without_the_controllers_key_or_the_pinned_write_an_entry_has_no_version() {
    let w = world(pod(|_| {}));
    w.key.send_replace(None);
    let seen = w.write("..2026_11_29_09_00_00.1", &[("app.conf", "x=2")]);
    w.note(Outcome::Signaled, "sent", &seen);
    let written = w.written().await;
    assert_eq!(written[0].get(&cm("app")).unwrap().version, None);
    // The key is known now, but the write acted on is gone: no version claimed.
    w.key.send_replace(Some(key()));
    std::fs::remove_dir_all(w.dir.path().join("..2026_11_29_09_00_00.1")).unwrap();
    w.note(Outcome::SignalFailed, "x", &seen);
    let written = w.written().await;
    assert_eq!(written.len(), 2);
    assert_eq!(written[1].get(&cm("app")).unwrap().version, None);
}

#[tokio::test(start_paused = true)]
async fn items_are_read_back_at_their_paths_and_other_files_left_out() {
    // items: [{key: a.conf, path: conf/app.ini}]
    let w = world(pod(|v| {
        v.source_items = vec![(cm("app"), vec![("a.conf".into(), "conf/app.ini".into())])];
    }));
    let seen = w.write("..2026_11_29_09_00_00.1", &[("conf/app.ini", "x=1")]);
    w.note(Outcome::Signaled, "sent", &seen);
    let written = w.written().await;
    assert_eq!(
        written[0].get(&cm("app")).unwrap().data_version(),
        Some(version_of(&[("a.conf", "x=1")]))
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_gone_is_not_written_and_errors_are_retried_once() {
    let w = world(pod(|_| {}));
    let seen = w.write("..2026_11_29_09_00_00.1", &[("app.conf", "x=2")]);
    w.patcher.fail_next([
        PatchError::Other(crate::ports::ApiError::status(500, "etcd")),
        PatchError::Other(crate::ports::ApiError::status(500, "etcd")),
    ]);
    w.note(Outcome::Signaled, "sent", &seen);
    assert_eq!(w.patcher.applied_writes().len(), 0);
    assert_eq!(w.written().await.len(), 2, "tried twice, then given up");
    assert_eq!(
        w.patcher.meta_reads(),
        2,
        "each write built on the pod read now"
    );
    // Forbidden (told by the edge, through Denials): not tried again.
    w.patcher
        .fail_next([PatchError::Forbidden("pods is forbidden".into())]);
    w.note(Outcome::Deferred, "later", &seen);
    assert_eq!(w.written().await.len(), 3);
    // The pod left the index: nothing is written for it.
    w.index.write().unwrap().delete(UID);
    w.note(Outcome::SignalFailed, "x", &seen);
    assert_eq!(w.written().await.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_projected_source_among_others_is_read_without_their_files() {
    // One whole ConfigMap beside a downwardAPI file and a Secret with items.
    let w = world(pod(|v| {
        v.sources = vec![
            cm("app"),
            SourceRef {
                kind: SourceKind::Secret,
                name: "db".into(),
            },
        ];
        v.other_paths = vec!["labels".into()];
        v.source_paths = vec![(
            SourceRef {
                kind: SourceKind::Secret,
                name: "db".into(),
            },
            vec!["db/pw".into()],
        )];
        v.source_items = vec![(
            SourceRef {
                kind: SourceKind::Secret,
                name: "db".into(),
            },
            vec![("password".into(), "db/pw".into())],
        )];
    }));
    let seen = w.write(
        "..2026_11_29_09_00_00.1",
        &[
            ("app.conf", "x=1"),
            ("labels", "app=web"),
            ("db/pw", "hunter2"),
        ],
    );
    w.note(Outcome::Signaled, "sent", &seen);
    let written = w.written().await;
    assert_eq!(
        written[0].get(&cm("app")).unwrap().data_version(),
        Some(version_of(&[("app.conf", "x=1")]))
    );
}

/// The other writer's record on the pod: `configmap/NAME` by `by`, result `result`.
fn other_entry(name: &str, by: &str, action: ActionKind, result: Recorded) -> Entry {
    Entry::new(
        &cm(name),
        None,
        Timestamp::from_second(1_764_406_800).unwrap(),
        by,
        action,
        result,
    )
}

/// Writes `entry` into the stored pod's record, as another writer's patch does.
fn write_entry(pod: &mut PodInfo, entry: Entry) {
    let mut record = Applied::of_pod(&pod.annotations)
        .ok()
        .flatten()
        .unwrap_or_default();
    record.record(entry);
    pod.annotations.insert(ANNOTATION.into(), record.render());
}

#[tokio::test(start_paused = true)]
async fn an_entry_the_agent_writes_between_the_controllers_read_and_write_is_kept() {
    // A rollout pod that also mounts a volume the agent acts on: the controller records its
    // rollout while the agent records a signal for the volume's ConfigMap.
    let pod = pod(|_| {});
    let patcher = FakePatcher::default();
    patcher.put(pod.clone());
    let recorder = AppliedRecorder::controller(Arc::new(patcher.clone()));
    patcher.after_next_read(|p| {
        write_entry(
            p,
            other_entry("volume-conf", BY, ActionKind::Signal, Recorded::Applied),
        )
    });
    let versions: Arc<VersionsOf> = Arc::new(|_: &PodInfo, _: &[SourceRef]| BTreeMap::new());
    let seen = Seen::known(Known {
        pod: Arc::new(pod.clone()),
        versions,
        until: None,
    });
    let pod_ref = PodRef::from(&pod);
    recorder.note(
        &pod_ref,
        ActionKind::Rollout,
        Outcome::RolloutRequested,
        "rolled",
        &[cm("app")],
        &seen,
        None,
    );
    let stored = || {
        let p = patcher.stored("shop", "web-0").unwrap();
        Applied::of_pod(&p.annotations).unwrap().unwrap_or_default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while stored().get(&cm("app")).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "never written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let record = stored();
    assert_eq!(
        record
            .get(&cm("volume-conf"))
            .map(|e| (e.by.as_str(), e.result)),
        Some((BY, Recorded::Applied)),
        "the agent's entry survives: {record:?}"
    );
    assert_eq!(
        record.get(&cm("app")).map(|e| (e.by.as_str(), e.result)),
        Some((BY_CONTROLLER, Recorded::RolloutRequested))
    );
    // The first patch was refused (409: written since the read), the second built on the
    // record as the agent left it.
    assert_eq!(patcher.applied_writes().len(), 2);
    assert_eq!(patcher.meta_reads(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_agents_writer_keeps_the_controllers_entry_its_watch_has_not_shown() {
    let w = world(pod(|_| {}));
    // The controller recorded an eviction held by a budget on the pod; the agent's index
    // (its watch) does not show it yet.
    let mut stored = w.patcher.stored("shop", "web-0").unwrap();
    write_entry(
        &mut stored,
        other_entry(
            "env-src",
            BY_CONTROLLER,
            ActionKind::Evict,
            Recorded::Blocked,
        ),
    );
    w.patcher.put(stored);
    let seen = w.write("..2026_11_29_09_00_00.1", &[("app.conf", "x=2")]);
    w.note(Outcome::Signaled, "sent", &seen);
    let written = w.written().await;
    assert_eq!(written.len(), 1);
    assert!(written[0].get(&cm("env-src")).is_some(), "{:?}", written[0]);
    assert!(written[0].get(&cm("app")).is_some());
}

#[tokio::test(start_paused = true)]
async fn conflicts_are_read_and_merged_again_a_bounded_number_of_times() {
    let w = world(pod(|_| {}));
    let seen = w.write("..2026_11_29_09_00_00.1", &[("app.conf", "x=2")]);
    // Someone writes the pod after every read: four refusals, then given up.
    for i in 0..MAX_CONFLICTS {
        w.patcher.after_next_read(move |p| {
            p.labels.insert("churn".into(), i.to_string());
        });
    }
    w.note(Outcome::Signaled, "sent", &seen);
    let written = w.written().await;
    assert_eq!(written.len(), MAX_CONFLICTS as usize);
    assert!(!w
        .patcher
        .stored("shop", "web-0")
        .unwrap()
        .annotations
        .contains_key(ANNOTATION));
    // Quiet again: the next note is written at once.
    w.note(Outcome::SignalFailed, "x", &seen);
    assert_eq!(w.written().await.len(), MAX_CONFLICTS as usize + 1);
    assert!(w
        .patcher
        .stored("shop", "web-0")
        .unwrap()
        .annotations
        .contains_key(ANNOTATION));
}
