//! The env consumers feature in the real controller loop, with fakes of every edge, for
//! tests under a paused clock: one `Harness` driving it through the router's inputs (pods,
//! the ConfigMap `app-env` they read through env, leadership) and reading what a user would
//! see (evictions, Events, the held gauge).

use crate::controller::env::*;
use crate::controller::fake::{FakeEnvApi, FakePatcher};
use crate::core::model::{ContainerInfo, ContainerKind, EnvKeys, EnvRef, SourceRef};
use crate::execute::evict::EvictionSettings;
use crate::execute::patch::PatchSettings;
use crate::outbound::notify::Notifier;
use crate::ports::fake;
use crate::ports::ObjectData;
use crate::ports::{Input, ObjectKey};
use std::time::Duration;
use test_support::wait::until;

/// How long a test waits on the paused clock: a minute of it.
pub const PAUSED_MINUTE: Duration = Duration::from_secs(60);
use tokio::sync::mpsc;

pub const NS: &str = "ns";

/// The ConfigMap every test pod reads.
pub fn key() -> ObjectKey {
    ObjectKey {
        kind: SourceKind::ConfigMap,
        namespace: NS.into(),
        name: "app-env".into(),
    }
}

pub fn data(log: &str) -> ObjectData {
    ObjectData::of(&[("LOG", log)], &[])
}

/// A running `action: evict` pod reading key `LOG` of `app-env` through env (no owner).
pub fn env_pod(name: &str) -> PodInfo {
    PodInfo {
        uid: format!("uid-{name}"),
        namespace: NS.into(),
        name: name.into(),
        annotations: [("reloadlet.io/action".to_string(), "evict".to_string())].into(),
        containers: vec![ContainerInfo {
            name: "app".into(),
            kind: ContainerKind::Regular,
            mounts: Vec::new(),
            container_id: None,
            running: true,
            ports: Vec::new(),
        }],
        env: vec![EnvRef {
            source: SourceRef {
                kind: SourceKind::ConfigMap,
                name: "app-env".into(),
            },
            keys: EnvKeys::Key("LOG".into()),
            optional: false,
            container: "app".into(),
        }],
        phase: "Running".into(),
        ..PodInfo::default()
    }
}

pub struct Harness {
    pub tx: mpsc::Sender<Input>,
    pub api: Arc<FakeEnvApi>,
    pub patcher: FakePatcher,
    pub events: Arc<fake::Events>,
    pub evictor: Arc<fake::Evictor>,
    pub reporter: Reporter,
    /// The data versions the publisher would have read (set by the test).
    pub versions: crate::controller::consumer_states::versions::PublishedVersions,
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
    pub rv: u64,
}

impl Harness {
    pub fn start() -> Self {
        let api = Arc::new(FakeEnvApi::default());
        api.objects.lock().unwrap().insert(key(), data("v0"));
        Self::over(FakePatcher::default(), api, Default::default(), 1)
    }

    /// The controller restarted: this run stops, a new feature starts over the same stored
    /// pods and objects (nothing of this run's memory kept); the test lists the pods again.
    pub async fn restarted(self) -> Self {
        let (patcher, api, versions, rv) = (
            self.patcher.clone(),
            self.api.clone(),
            self.versions.clone(),
            self.rv,
        );
        self.stop().await;
        Self::over(patcher, api, versions, rv)
    }

    fn over(
        patcher: FakePatcher,
        api: Arc<FakeEnvApi>,
        versions: crate::controller::consumer_states::versions::PublishedVersions,
        rv: u64,
    ) -> Self {
        let events = Arc::new(fake::Events::default());
        let evictor = Arc::new(fake::Evictor::default());
        let recorder =
            crate::execute::applied::AppliedRecorder::controller(Arc::new(patcher.clone()));
        let reporter =
            crate::controller::fake::reporter(events.clone(), Notifier::disabled(), false)
                .with_applied(Some(recorder));
        let stop = CancellationToken::new();
        let index = Arc::new(RwLock::new(PodIndex::default()));
        let feature = EnvConsumers::new(EnvDeps {
            api: api.clone(),
            evictions: Evictions::new(
                EvictionSettings::default(),
                evictor.clone(),
                reporter.clone(),
                index.clone(),
                stop.clone(),
            ),
            index,
            baselines: Patches::new(
                PatchSettings::baselines(),
                Arc::new(patcher.clone()),
                reporter.clone(),
                stop.clone(),
            ),
            reporter: reporter.clone(),
            configmaps: true,
            secrets: false,
            stop: stop.clone(),
            pacing: Default::default(),
            key: crate::core::volume_digest::HashKey::from_bytes([7; 32]),
            versions: versions.clone(),
        });
        let (tx, task) = crate::controller::fake::run_alone(Box::new(feature), &stop);
        Self {
            tx,
            api,
            patcher,
            events,
            evictor,
            reporter,
            versions,
            stop,
            task,
            rv,
        }
    }

    pub async fn list(&self, pods: &[PodInfo]) {
        for p in pods {
            self.patcher.put(p.clone());
        }
        self.tx
            .send(Input::PodsListed(pods.to_vec()))
            .await
            .unwrap();
        self.tx
            .send(Input::ObjectsListed {
                kind: SourceKind::ConfigMap,
                objects: vec![(key(), "1".into())],
            })
            .await
            .unwrap();
        self.baselined(pods).await;
    }

    /// Waits (on the paused clock, a minute at most) until every pod has its baseline.
    pub async fn baselined(&self, pods: &[PodInfo]) {
        until("baselines", PAUSED_MINUTE, || {
            let written = self.patcher.baseline_writes();
            pods.iter()
                .all(|p| written.iter().any(|(_, name, _)| *name == p.name))
        })
        .await;
    }

    /// The ConfigMap's `LOG` becomes `log`.
    pub async fn change(&mut self, log: &str) {
        self.api.objects.lock().unwrap().insert(key(), data(log));
        self.rv += 1;
        self.tx
            .send(Input::Object {
                key: key(),
                resource_version: self.rv.to_string(),
            })
            .await
            .unwrap();
    }

    /// The evicted pods go; their ReplicaSet creates `new` (new UIDs, no baseline yet).
    pub async fn replace(&self, old: &[PodInfo], new: &[PodInfo]) {
        for p in old {
            self.patcher.remove(NS, &p.name);
            self.tx
                .send(Input::PodDeleted { uid: p.uid.clone() })
                .await
                .unwrap();
        }
        for p in new {
            self.patcher.put(p.clone());
            self.tx.send(Input::PodApplied(p.clone())).await.unwrap();
        }
        self.baselined(new).await;
    }

    pub fn evicted(&self) -> Vec<String> {
        let calls = self.evictor.calls.lock().unwrap();
        calls.iter().map(|r| r.name.clone()).collect()
    }

    pub fn flapping(&self) -> Vec<String> {
        let events = self.events.0.lock().unwrap();
        events
            .iter()
            .filter(|(_, e)| e.reason == "ReloadFlapping")
            .map(|(pod, e)| format!("{}: {}", pod.name, e.note))
            .collect()
    }

    /// `name: value` of every `reloadlet.io/env-pacing` write, in order (`name: ` removed it).
    pub fn records(&self) -> Vec<String> {
        self.patcher
            .env_pacing_writes()
            .into_iter()
            .map(|(_, name, value)| format!("{name}: {value}"))
            .collect()
    }

    pub fn held(&self) -> i64 {
        self.reporter.metrics().pacing.held.get()
    }

    pub async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}
