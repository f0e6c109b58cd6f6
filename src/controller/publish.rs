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

use crate::ports::{EnvApi, ObjectKey};
use super::data_version::to_publish;
use super::env::fetch::{read_channel, spawn_read, Fetched};
use super::feature::{Feature, Routed, World};
use crate::core::model::{PodInfo, SourceKind, SourceRef};
use crate::core::status::data_version::ANNOTATION;
use crate::core::volume_digest::HashKey;
use crate::execute::patch::{PatchJob, PatchKind, Patches};
use crate::ports::PodRef;
use futures::future::BoxFuture;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

pub struct PublishDeps {
    /// One GET of an object (data included), the env consumers' edge.
    pub api: Arc<dyn EnvApi>,
    /// The executor's patches.
    pub patches: Patches,
    /// `--secrets`: Secrets too.
    pub secrets: bool,
    pub key: HashKey,
    pub stop: CancellationToken,
    pub now: fn() -> jiff::Timestamp,
}

pub struct DataVersions {
    deps: PublishDeps,
    /// The resourceVersion of every followed object, as the watch says.
    seen: HashMap<ObjectKey, String>,
    /// The resourceVersion last read (or being read) of each consumed object.
    handled: HashMap<ObjectKey, String>,
    /// Objects to look at in [`Feature::settle`].
    dirty: BTreeSet<ObjectKey>,
    tx: mpsc::UnboundedSender<Fetched>,
    rx: mpsc::UnboundedReceiver<Fetched>,
    permits: Arc<Semaphore>,
}

impl DataVersions {
    pub fn new(deps: PublishDeps) -> Self {
        let (tx, rx, permits) = read_channel();
        Self {
            deps,
            seen: HashMap::new(),
            handled: HashMap::new(),
            dirty: BTreeSet::new(),
            tx,
            rx,
            permits,
        }
    }

    fn followed(&self, kind: SourceKind) -> bool {
        match kind {
            SourceKind::ConfigMap => true,
            SourceKind::Secret => self.deps.secrets,
            SourceKind::SecretProviderClass | SourceKind::CsiVolume => false,
        }
    }

    /// The data read: the annotation to write, if the data changed.
    fn fetched(&mut self, fetched: Fetched) {
        let Some(data) = fetched.data else {
            return;
        };
        let key = fetched.key;
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
            return;
        };
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
        self.deps.patches.request(job, |_| {});
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
                self.seen.insert(key.clone(), rv.to_owned());
                self.dirty.insert(key.clone());
            }
            Routed::Object {
                key,
                resource_version: None,
            } => {
                self.seen.remove(key);
                self.handled.remove(key);
                self.dirty.remove(key);
            }
            Routed::Listed { kind, objects } if self.followed(kind) => {
                let listed: HashSet<&ObjectKey> = objects.iter().map(|(k, _)| k).collect();
                self.seen
                    .retain(|k, _| k.kind != kind || listed.contains(k));
                self.handled
                    .retain(|k, _| k.kind != kind || listed.contains(k));
                for (key, rv) in objects {
                    self.seen.insert(key.clone(), rv.clone());
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
            if let Some(fetched) = self.rx.recv().await {
                self.fetched(fetched);
            }
        })
    }

    /// Reads the dirty objects some pod reads whose resourceVersion was not read yet (leader
    /// only, once the pods are listed; until then they stay dirty).
    fn settle(&mut self, world: &World) {
        if !world.leader || !world.pods_listed || self.dirty.is_empty() {
            return;
        }
        let dirty = std::mem::take(&mut self.dirty);
        // What the pods of each namespace read, computed once per namespace.
        let mut consumed: BTreeMap<&str, HashSet<(SourceKind, &str)>> = BTreeMap::new();
        for key in &dirty {
            let Some(rv) = self.seen.get(key) else {
                continue;
            };
            if self.handled.get(key) == Some(rv) {
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
            self.handled.insert(key.clone(), rv.clone());
            spawn_read(
                &self.deps.api,
                &self.permits,
                &self.deps.stop,
                &self.tx,
                Fetched {
                    key: key.clone(),
                    seq: 0,
                    data: None,
                    seen: std::time::Instant::now(),
                },
            );
        }
    }
}
