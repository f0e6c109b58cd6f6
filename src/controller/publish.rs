//! `reloadlet.io/data-version` (issue #46, docs/status.md): the controller publishes, on each
//! ConfigMap (with `--secrets`, each Secret) that some pod it keeps reads — through a volume,
//! a projected source or env — the keyed per-key digests of its data and when this data was
//! first seen, so that `reloadlet status` can tell which consumers run it.
//!
//! One GET of the object when its resourceVersion moves (or a pod starts to read it, or at
//! start), and a write only when [`super::data_version::to_publish`] says the data changed
//! (a label edit, its own write or a resync writes nothing). The write is the executor's
//! ([`crate::execute::patch`], `--dry-run` honoured): a merge patch of that one annotation,
//! conditional on the resourceVersion the data was read at. Leader only.
//!
//! At most [`IN_PROGRESS`] objects are being read or written at a time; the others wait in a
//! queue of keys. At start every consumed object is due at once (22,002 at the controller
//! benchmark's size): one task per object, each holding its key, its retry state and its
//! place in the semaphore's queue until its turn, took tens of MiB at once, and the small
//! long-lived records made while they drained (the versions, the keys written) pinned that
//! memory (steady RSS 335.4 MiB against 265.6 without this feature; 291.7 with the queue:
//! docs/status.md, "What this costs").

use super::consumed::fetch::{read_channel, BoundedReads, Fetched};
use super::consumer_states::versions::PublishedVersions;
use super::data_version::to_publish;
use super::feature::{Feature, Routed, World};
use crate::core::model::{PodInfo, SourceKind, SourceRef};
use crate::core::status::data_version::Published;
use crate::core::status::data_version::ANNOTATION;
use crate::core::volume_digest::HashKey;
use crate::execute::patch::{PatchJob, PatchKind, Patches};
use crate::ports::PodRef;
use crate::ports::{EnvApi, ObjectKey, OwnDataVersions};
use futures::future::BoxFuture;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// Objects read or written at once: a read holds its place until its data is handled, and
/// until the write it made due is done.
pub const IN_PROGRESS: usize = 8;

pub struct PublishDeps {
    /// One GET of an object (data included), the env consumers' edge.
    pub api: Arc<dyn EnvApi>,
    /// The executor's patches.
    pub patches: Patches,
    /// `--secrets`: Secrets too.
    pub secrets: bool,
    /// Each value written is recorded here first, so the object watches leave its echo
    /// unrouted.
    pub own: OwnDataVersions,
    pub key: HashKey,
    pub stop: CancellationToken,
    pub now: fn() -> jiff::Timestamp,
    /// Each version read or written, for the `reloadlet_consumers` gauge.
    pub versions: PublishedVersions,
}

/// The resourceVersions of one followed object (one entry, one copy of its key, per object:
/// at 30,000 objects three maps of their own kept two more).
#[derive(Default)]
struct Versions {
    /// As the watch says.
    seen: String,
    /// Last read (or being read), if the object is consumed.
    handled: Option<String>,
    /// The one whose data the last write was computed from: two reads that answer the same
    /// version (a label edit and a data change close together) write once, not twice with the
    /// second refused as a conflict.
    written: Option<String>,
}

pub struct DataVersions {
    deps: PublishDeps,
    /// Every followed object's resourceVersions.
    objects: HashMap<ObjectKey, Versions>,
    /// Objects to look at in [`Feature::settle`].
    dirty: BTreeSet<ObjectKey>,
    /// The reads, [`IN_PROGRESS`] objects at a time (read, or written after their read).
    reads: BoundedReads,
    tx: mpsc::UnboundedSender<Fetched>,
    rx: mpsc::UnboundedReceiver<Fetched>,
    /// A write this feature asked for is done (its place is free).
    written_tx: mpsc::UnboundedSender<()>,
    written_rx: mpsc::UnboundedReceiver<()>,
    permits: Arc<Semaphore>,
}

impl DataVersions {
    pub fn new(deps: PublishDeps) -> Self {
        let (tx, rx, permits) = read_channel();
        let (written_tx, written_rx) = mpsc::unbounded_channel();
        Self {
            deps,
            objects: HashMap::new(),
            dirty: BTreeSet::new(),
            reads: BoundedReads::new(IN_PROGRESS),
            tx,
            rx,
            written_tx,
            written_rx,
            permits,
        }
    }

    /// Starts the reads there is room for.
    fn start_reads(&mut self) {
        let (api, stop) = (&self.deps.api, &self.deps.stop);
        self.reads.start(api, &self.permits, stop, &self.tx);
    }

    /// The watch says `key` is at `rv`.
    fn saw(&mut self, key: &ObjectKey, rv: &str) {
        match self.objects.get_mut(key) {
            Some(versions) => rv.clone_into(&mut versions.seen),
            None => {
                let seen = rv.to_owned();
                self.objects.insert(
                    key.clone(),
                    Versions {
                        seen,
                        ..Versions::default()
                    },
                );
            }
        }
    }

    /// One object's read or write is done.
    fn done(&mut self) {
        self.reads.done();
    }

    fn followed(&self, kind: SourceKind) -> bool {
        match kind {
            SourceKind::ConfigMap => true,
            SourceKind::Secret => self.deps.secrets,
            SourceKind::SecretProviderClass
            | SourceKind::CsiVolume
            | SourceKind::PodCertificate => false,
        }
    }

    /// The data read: the annotation to write, if the data changed. The object's place is
    /// free once it is handled, or once its write is done.
    fn fetched(&mut self, fetched: Fetched) {
        self.reads.answered(&fetched.key);
        let Some(data) = fetched.data else {
            self.done();
            return;
        };
        let key = fetched.key;
        if data.resource_version.is_some()
            && self.objects.get(&key).and_then(|v| v.written.as_ref())
                == data.resource_version.as_ref()
        {
            self.done();
            return;
        }
        let source = SourceRef {
            kind: key.kind,
            name: key.name.clone(),
        };
        let current = data.annotations.get(ANNOTATION).map(String::as_str);
        let Some(value) = to_publish(
            &self.deps.key,
            &key.namespace,
            &source,
            &data,
            current,
            (self.deps.now)(),
        ) else {
            // Unchanged: the version on the object stands.
            self.deps
                .versions
                .set(&key, current.and_then(|v| Published::parse(v).ok()));
            self.done();
            return;
        };
        // What is written is what the CLI will read (a write refused as a conflict means new
        // data, which the watch brings: it is read again).
        self.deps.versions.set(&key, Published::parse(&value).ok());
        self.deps.own.writing(key.clone(), &value);
        if let Some(rv) = &data.resource_version {
            self.objects.entry(key.clone()).or_default().written = Some(rv.clone());
        }
        let job = PatchJob {
            pod: PodRef {
                uid: String::new(),
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            },
            kind: PatchKind::DataVersion {
                source,
                resource_version: data.resource_version.clone(),
            },
            value: Some(value),
        };
        // Not retried: a conflict means new data, which the watch brings; the executor logs
        // any other failure.
        let written = self.written_tx.clone();
        self.deps.patches.request(job, move |_| {
            let _ = written.send(());
        });
    }
}

/// The ConfigMaps/Secrets `pod` reads: its volumes' sources and its env references.
fn read_by(pod: &PodInfo) -> impl Iterator<Item = &SourceRef> {
    pod.volumes
        .iter()
        .flat_map(|v| v.sources.iter())
        .chain(pod.env.iter().map(|e| &e.source))
        .filter(|s| s.kind.is_api_object())
}

impl Feature for DataVersions {
    fn name(&self) -> &'static str {
        "data-version"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        Vec::new()
    }

    fn route(&mut self, event: Routed<'_>, _world: &World) {
        match event {
            Routed::Object {
                key,
                resource_version: Some(rv),
            } if self.followed(key.kind) => {
                self.saw(key, rv);
                self.dirty.insert(key.clone());
            }
            Routed::Object {
                key,
                resource_version: None,
            } => {
                self.objects.remove(key);
                self.deps.versions.set(key, None);
                self.dirty.remove(key);
                self.reads.forget(key);
            }
            Routed::Listed { kind, objects } if self.followed(kind) => {
                let listed: HashSet<&ObjectKey> = objects.iter().map(|(k, _)| k).collect();
                self.objects
                    .retain(|k, _| k.kind != kind || listed.contains(k));
                self.reads.retain(|k| k.kind != kind || listed.contains(k));
                self.deps
                    .versions
                    .retain(|k| k.kind != kind || listed.contains(k));
                for (key, rv) in objects {
                    self.saw(key, rv);
                    self.dirty.insert(key.clone());
                }
            }
            Routed::PodPut(pod) => {
                let keys: Vec<ObjectKey> = read_by(pod)
                    .filter(|s| self.followed(s.kind))
                    .map(|s| ObjectKey {
                        kind: s.kind,
                        namespace: pod.namespace.clone(),
                        name: s.name.clone(),
                    })
                    .collect();
                self.dirty.extend(keys);
            }
            _ => {}
        }
    }

    fn wake<'a>(&'a mut self, _world: &'a World) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            tokio::select! {
                // A read's failure before its answer (it sends them in that order).
                biased;
                () = self.reads.failure() => {}
                Some(fetched) = self.rx.recv() => self.fetched(fetched),
                Some(()) = self.written_rx.recv() => self.done(),
            }
        })
    }

    /// Queues for a read the dirty objects some pod reads whose resourceVersion was not read
    /// yet (leader only, once the pods are listed; until then they stay dirty), and starts the
    /// reads there is room for.
    fn settle(&mut self, world: &World) {
        self.start_reads();
        if !world.leader || !world.pods_listed || self.dirty.is_empty() {
            return;
        }
        let dirty = std::mem::take(&mut self.dirty);
        // What the pods of each namespace read, computed once per namespace.
        let mut consumed: BTreeMap<&str, HashSet<(SourceKind, &str)>> = BTreeMap::new();
        for key in &dirty {
            let Some(versions) = self.objects.get(key) else {
                continue;
            };
            if versions.handled.as_ref() == Some(&versions.seen) {
                continue;
            }
            let read = consumed.entry(key.namespace.as_str()).or_insert_with(|| {
                world
                    .pods_in(&key.namespace)
                    .flat_map(|p| read_by(p).map(|s| (s.kind, s.name.as_str())))
                    .collect()
            });
            if !read.contains(&(key.kind, key.name.as_str())) {
                continue;
            }
            if let Some(versions) = self.objects.get_mut(key) {
                versions.handled = Some(versions.seen.clone());
            }
            self.reads.queue(key.clone());
        }
        self.start_reads();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fake::{FakeEnvApi, FakePatcher};
    use crate::core::model::VolumeSpec;
    use crate::execute::patch::PatchSettings;
    use crate::ports::Input;
    use crate::ports::ObjectData;
    use std::time::Duration;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: SourceKind::ConfigMap,
            namespace: "shop".into(),
            name: name.into(),
        }
    }

    fn reader(uid: &str, configmap: &str) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: "shop".into(),
            name: format!("pod-{uid}"),
            volumes: vec![VolumeSpec {
                name: "conf".into(),
                sources: vec![SourceRef {
                    kind: SourceKind::ConfigMap,
                    name: configmap.into(),
                }],
                ..VolumeSpec::default()
            }],
            ..PodInfo::default()
        }
    }

    fn writes(patcher: &FakePatcher) -> Vec<(String, String)> {
        patcher
            .data_version_writes()
            .into_iter()
            .map(|(_, name, value)| (name, value))
            .collect()
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The publisher over `api`, writing through `patcher`, with the clock `now`.
    fn publisher(
        api: Arc<FakeEnvApi>,
        patcher: &FakePatcher,
        stop: &CancellationToken,
        own: OwnDataVersions,
        now: fn() -> jiff::Timestamp,
    ) -> DataVersions {
        let report = crate::controller::fake::reporter(
            Arc::new(crate::ports::fake::Events::default()),
            crate::outbound::notify::Notifier::disabled(),
            false,
        );
        DataVersions::new(PublishDeps {
            api,
            patches: Patches::new(
                PatchSettings::baselines(),
                Arc::new(patcher.clone()),
                report,
                stop.clone(),
            ),
            secrets: false,
            own,
            key: HashKey::from_bytes([3; 32]),
            stop: stop.clone(),
            now,
            versions: PublishedVersions::default(),
        })
    }

    /// The publisher over `api` run alone by the router: its patcher, its stop, its input.
    fn running(
        api: Arc<FakeEnvApi>,
    ) -> (
        FakePatcher,
        CancellationToken,
        mpsc::Sender<Input>,
        tokio::task::JoinHandle<()>,
    ) {
        let patcher = FakePatcher::default();
        let stop = CancellationToken::new();
        let own = OwnDataVersions::default();
        let feature = publisher(api, &patcher, &stop, own, jiff::Timestamp::now);
        let (tx, task) = crate::controller::fake::run_alone(Box::new(feature), &stop);
        (patcher, stop, tx, task)
    }

    #[tokio::test]
    async fn only_read_objects_are_published_and_only_when_their_data_changes() {
        let api = Arc::new(FakeEnvApi::default());
        let mut app = ObjectData::of(&[("app.conf", "x=1")], &[]);
        app.resource_version = Some("5".into());
        api.objects.lock().unwrap().insert(key("app"), app.clone());
        api.objects
            .lock()
            .unwrap()
            .insert(key("unread"), ObjectData::of(&[("a", "1")], &[]));
        let (patcher, stop, tx, task) = running(api.clone());
        tx.send(Input::PodsListed(vec![reader("u1", "app")]))
            .await
            .unwrap();
        tx.send(Input::ObjectsListed {
            kind: SourceKind::ConfigMap,
            objects: vec![(key("app"), "5".into()), (key("unread"), "7".into())],
        })
        .await
        .unwrap();
        settle().await;
        let first = writes(&patcher);
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(first[0].0, "app");
        assert!(first[0].1.starts_with("v1 since="), "{first:?}");
        assert_eq!(
            *api.reads.lock().unwrap(),
            [key("app")],
            "unread is never read"
        );

        // Its own write (or a label edit): a new resourceVersion, the same data: no write.
        app.annotations
            .insert(ANNOTATION.to_owned(), first[0].1.clone());
        app.resource_version = Some("6".into());
        api.objects.lock().unwrap().insert(key("app"), app.clone());
        tx.send(Input::Object {
            key: key("app"),
            resource_version: "6".into(),
        })
        .await
        .unwrap();
        // The same resourceVersion again (a resync): not even read.
        tx.send(Input::Object {
            key: key("app"),
            resource_version: "6".into(),
        })
        .await
        .unwrap();
        settle().await;
        assert_eq!(api.reads.lock().unwrap().len(), 2);
        assert_eq!(writes(&patcher).len(), 1);

        // New data: published again (the positive control of the two above).
        app.text.insert("app.conf".into(), "x=2".into());
        app.resource_version = Some("8".into());
        api.objects.lock().unwrap().insert(key("app"), app.clone());
        tx.send(Input::Object {
            key: key("app"),
            resource_version: "8".into(),
        })
        .await
        .unwrap();
        settle().await;
        let all = writes(&patcher);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_ne!(all[1].1, all[0].1);
        stop.cancel();
        let _ = task.await;
    }

    #[tokio::test]
    async fn at_most_in_progress_objects_are_read_or_written_at_once_and_the_rest_wait_their_turn()
    {
        let api = Arc::new(FakeEnvApi::default());
        let names: Vec<String> = (0..20).map(|i| format!("cm-{i:02}")).collect();
        let put = |version: &str| {
            for name in &names {
                let mut data = ObjectData::of(&[("app.conf", version)], &[]);
                data.resource_version = Some(version.into());
                api.objects.lock().unwrap().insert(key(name), data);
            }
        };
        put("1");
        let listed = |version: &str| Input::ObjectsListed {
            kind: SourceKind::ConfigMap,
            objects: names.iter().map(|n| (key(n), version.to_owned())).collect(),
        };
        let (patcher, stop, tx, task) = running(api.clone());
        let pods: Vec<PodInfo> = names
            .iter()
            .enumerate()
            .map(|(i, n)| reader(&format!("u{i}"), n))
            .collect();
        tx.send(Input::PodsListed(pods)).await.unwrap();
        tx.send(listed("1")).await.unwrap();
        settle().await;
        // Twenty due at once: every one read and published, in turns.
        assert_eq!(api.reads.lock().unwrap().len(), 20);
        assert_eq!(writes(&patcher).len(), 20);

        // Writes that never end: each object keeps its place, so no more than IN_PROGRESS
        // are read of the twenty changed.
        patcher.hang(true);
        put("2");
        tx.send(listed("2")).await.unwrap();
        settle().await;
        assert_eq!(api.reads.lock().unwrap().len(), 20 + IN_PROGRESS);
        stop.cancel();
        let _ = task.await;
    }

    #[tokio::test]
    async fn objects_whose_reads_keep_failing_hold_up_no_other() {
        let api = Arc::new(FakeEnvApi::default());
        // More refused objects than places, listed before the readable one.
        let refused: Vec<String> = (0..2 * IN_PROGRESS).map(|i| format!("a-{i:02}")).collect();
        for name in &refused {
            api.forbidden.lock().unwrap().insert(key(name));
        }
        let mut app = ObjectData::of(&[("app.conf", "x=1")], &[]);
        app.resource_version = Some("5".into());
        api.objects.lock().unwrap().insert(key("z-app"), app);
        let (patcher, stop, tx, task) = running(api.clone());
        let mut pods: Vec<PodInfo> = refused
            .iter()
            .enumerate()
            .map(|(i, n)| reader(&format!("u{i}"), n))
            .collect();
        pods.push(reader("app", "z-app"));
        tx.send(Input::PodsListed(pods)).await.unwrap();
        let mut objects: Vec<(ObjectKey, String)> =
            refused.iter().map(|n| (key(n), "1".to_owned())).collect();
        objects.push((key("z-app"), "5".into()));
        tx.send(Input::ObjectsListed {
            kind: SourceKind::ConfigMap,
            objects,
        })
        .await
        .unwrap();
        settle().await;
        // Every refused object was tried, and the readable one published meanwhile.
        let reads = api.reads.lock().unwrap().clone();
        for name in &refused {
            assert!(reads.contains(&key(name)), "{name} not tried: {reads:?}");
        }
        let written = writes(&patcher);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(written[0].0, "z-app");
        stop.cancel();
        let _ = task.await;
    }

    #[tokio::test]
    async fn two_reads_of_the_same_version_write_once_and_the_write_is_recorded_as_its_own() {
        let patcher = FakePatcher::default();
        let stop = CancellationToken::new();
        let own = OwnDataVersions::default();
        let mut feature = publisher(
            Arc::new(FakeEnvApi::default()),
            &patcher,
            &stop,
            own.clone(),
            jiff::Timestamp::now,
        );
        let mut app = ObjectData::of(&[("app.conf", "x=2")], &[]);
        app.resource_version = Some("8".into());
        let read = |data: &ObjectData| Fetched {
            key: key("app"),
            seq: 0,
            data: Some(data.clone()),
            seen: std::time::Instant::now(),
        };
        // A label edit's read and the data change's read both answered version 8.
        feature.fetched(read(&app));
        feature.fetched(read(&app));
        settle().await;
        let written = writes(&patcher);
        assert_eq!(written.len(), 1, "{written:?}");
        // Its echo is told apart by the value written.
        let fingerprint = OwnDataVersions::fingerprint(&written[0].1);
        assert!(own.is_echo(&key("app"), fingerprint));
        // Version 9 (new data) is written.
        app.text.insert("app.conf".into(), "x=3".into());
        app.resource_version = Some("9".into());
        feature.fetched(read(&app));
        settle().await;
        assert_eq!(writes(&patcher).len(), 2);
        stop.cancel();
    }

    #[tokio::test]
    async fn a_first_publication_dates_the_data_from_its_managed_fields_not_from_now() {
        let patcher = FakePatcher::default();
        let stop = CancellationToken::new();
        // The controller started at 10:00.
        let mut feature = publisher(
            Arc::new(FakeEnvApi::default()),
            &patcher,
            &stop,
            OwnDataVersions::default(),
            || "2026-11-29T10:00:00Z".parse().unwrap(),
        );
        let read = |name: &str, data: &ObjectData| Fetched {
            key: key(name),
            seq: 0,
            data: Some(data.clone()),
            seen: std::time::Instant::now(),
        };
        // Changed at 09:00 (managedFields' bound), before the controller started.
        let mut app = ObjectData::of(&[("app.conf", "x=1")], &[]);
        app.resource_version = Some("5".into());
        app.data_written = Some("2026-11-29T09:00:01Z".parse().unwrap());
        feature.fetched(read("app", &app));
        // The control: an object whose managedFields do not tell is dated from now.
        let mut other = ObjectData::of(&[("a", "1")], &[]);
        other.resource_version = Some("6".into());
        feature.fetched(read("other", &other));
        settle().await;
        let written = writes(&patcher);
        assert_eq!(written.len(), 2, "{written:?}");
        let since = |name: &str| {
            let value = &written.iter().find(|(n, _)| n == name).unwrap().1;
            Published::parse(value).unwrap().since.to_string()
        };
        assert_eq!(since("app"), "2026-11-29T09:00:01Z");
        assert_eq!(since("other"), "2026-11-29T10:00:00Z");
        stop.cancel();
    }
}
