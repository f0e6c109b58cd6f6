//! What a controller feature is: it owns its state, hears what the router routes to it,
//! decides, and hands its writes to the executor. Adding one is a new module implementing
//! [`Feature`] and one `.with(…)` where the controller is built.

use super::api::{ObjectKey, WorkloadChange};
use crate::core::model::{PodInfo, SourceKind};
use futures::future::BoxFuture;
use std::collections::{BTreeSet, HashMap};

/// What the router tells every feature, in the order it happened. Pods and objects outside
/// the namespace filter never get here.
#[derive(Clone, Copy, Debug)]
pub enum Routed<'a> {
    /// A ConfigMap/Secret's new resourceVersion (`None`: deleted).
    Object {
        key: &'a ObjectKey,
        resource_version: Option<&'a str>,
    },
    /// The complete list of `kind` after a (re)list.
    Listed {
        kind: SourceKind,
        objects: &'a [(ObjectKey, String)],
    },
    /// A pod added or changed (already in [`World`]).
    PodPut(&'a PodInfo),
    /// A pod deleted (already out of [`World`]).
    PodRemoved(&'a PodInfo),
    /// A pod (re)list was applied.
    PodsListed,
    /// Leadership changed.
    Leader(bool),
    /// A workload's metadata (`--reloader-compat` only; namespaces outside the filter are
    /// left out).
    Workload(&'a WorkloadChange),
}

pub trait Feature: Send {
    /// The kinds whose first list must complete before the controller is ready.
    fn kinds(&self) -> Vec<SourceKind>;
    fn route(&mut self, event: Routed<'_>, world: &World);
    /// Waits for this feature's own timers and results, and handles what came. Dropped by the
    /// router when something else comes first: it only awaits cancel-safe things (a sleep, a
    /// channel) and handles what it received before it returns.
    fn wake<'a>(&'a mut self, world: &'a World) -> BoxFuture<'a, ()>;
    /// After each turn of the loop (gauges, writes the turn made due).
    fn settle(&mut self, world: &World);
}

/// What the router knows and every feature reads: the pods, the leadership, whether the
/// first pod list is in.
#[derive(Debug, Default)]
pub struct World {
    pub leader: bool,
    pub pods_listed: bool,
    /// Boxed: a table of 100,000 pods has 131,072 buckets, each as wide as its value.
    pods: HashMap<String, Box<PodInfo>>,
    by_namespace: HashMap<String, BTreeSet<String>>,
}

impl World {
    pub fn new(leader: bool) -> Self {
        Self {
            leader,
            ..Self::default()
        }
    }

    pub fn pods_in<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a PodInfo> + 'a {
        self.by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.pods.get(uid).map(|p| &**p))
    }

    pub fn get(&self, uid: &str) -> Option<&PodInfo> {
        self.pods.get(uid).map(|p| &**p)
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// UIDs of the pods not in `keep`.
    pub(super) fn others(&self, keep: &BTreeSet<&str>) -> Vec<String> {
        self.pods
            .keys()
            .filter(|uid| !keep.contains(uid.as_str()))
            .cloned()
            .collect()
    }

    pub(super) fn put(&mut self, pod: PodInfo) {
        self.by_namespace
            .entry(pod.namespace.clone())
            .or_default()
            .insert(pod.uid.clone());
        self.pods.insert(pod.uid.clone(), Box::new(pod));
    }

    pub(super) fn remove(&mut self, uid: &str) -> Option<PodInfo> {
        let pod = *self.pods.remove(uid)?;
        if let Some(set) = self.by_namespace.get_mut(&pod.namespace) {
            set.remove(uid);
            if set.is_empty() {
                self.by_namespace.remove(&pod.namespace);
            }
        }
        Some(pod)
    }
}
