//! What a controller feature is: it owns its state, hears what the router routes to it,
//! decides, and hands its writes to the executor. Adding one is a new module implementing
//! [`Feature`] and one `.with(…)` where the controller is built.

use crate::core::model::{PodInfo, SourceKind};
use crate::ports::{ObjectKey, WorkloadChange};
use futures::future::BoxFuture;
use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

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

/// Each call into a feature runs contained (`crate::contain`, in the router): a panic in it
/// is caught, logged and counted, and the object it concerned quarantined; the feature and
/// the loop go on.
pub trait Feature: Send {
    /// Its name in logs (`nudge`, `env`, `rollout`).
    fn name(&self) -> &'static str;
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
    /// Keyed by the pod's own uid ([`Kept`]): at 100,000 pods a separate key `String` per
    /// pod and per index is megabytes (docs/controller.md, "Memory").
    pods: HashSet<Kept>,
    by_namespace: HashMap<String, BTreeSet<Kept>>,
}

/// A kept pod, shared by [`World`]'s table, its namespace index and the eviction index
/// (`Arc`: a reference count, not a copy), hashed, compared and looked up by uid.
#[derive(Clone, Debug)]
struct Kept(Arc<PodInfo>);

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.0.uid == other.0.uid
    }
}

impl Eq for Kept {}

impl std::hash::Hash for Kept {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes: `Borrow<str>` requires the same hash.
        self.0.uid.as_str().hash(state);
    }
}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.uid.cmp(&other.0.uid)
    }
}

impl Borrow<str> for Kept {
    fn borrow(&self) -> &str {
        &self.0.uid
    }
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
            .map(|p| &*p.0)
    }

    pub fn get(&self, uid: &str) -> Option<&PodInfo> {
        self.pods.get(uid).map(|p| &*p.0)
    }

    /// The pod, shared (a reference count, no copy).
    pub fn shared(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.pods.get(uid).map(|p| p.0.clone())
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Every kept pod, in no particular order.
    pub fn pods(&self) -> impl Iterator<Item = &PodInfo> + '_ {
        self.pods.iter().map(|p| &*p.0)
    }

    /// Every kept pod, shared (reference counts, no copies), for work off the loop's task.
    pub fn shared_pods(&self) -> Vec<Arc<PodInfo>> {
        self.pods.iter().map(|p| p.0.clone()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// UIDs of the pods not in `keep`.
    pub(super) fn others(&self, keep: &BTreeSet<&str>) -> Vec<String> {
        self.pods
            .iter()
            .filter(|p| !keep.contains(p.0.uid.as_str()))
            .map(|p| p.0.uid.clone())
            .collect()
    }

    pub(super) fn put(&mut self, pod: PodInfo) {
        let kept = Kept(Arc::new(pod));
        // `replace`, not `insert`: an equal (same uid) element is not replaced by `insert`.
        self.by_namespace
            .entry(kept.0.namespace.clone())
            .or_default()
            .replace(kept.clone());
        self.pods.replace(kept);
    }

    pub(super) fn remove(&mut self, uid: &str) -> Option<PodInfo> {
        let pod = self.pods.take(uid)?.0;
        if let Some(set) = self.by_namespace.get_mut(&pod.namespace) {
            set.remove(uid);
            if set.is_empty() {
                self.by_namespace.remove(&pod.namespace);
            }
        }
        Some(Arc::unwrap_or_clone(pod))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, namespace: &str, phase: &str) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: namespace.into(),
            name: format!("pod-{uid}"),
            phase: phase.into(),
            ..PodInfo::default()
        }
    }

    #[test]
    fn the_world_finds_pods_by_uid_and_namespace_and_a_put_replaces() {
        let mut world = World::new(true);
        world.put(pod("u2", "shop", "Pending"));
        world.put(pod("u1", "shop", "Pending"));
        world.put(pod("u3", "bank", "Running"));
        world.put(pod("u2", "shop", "Running"));
        assert_eq!(world.len(), 3);
        assert_eq!(world.get("u2").map(|p| p.phase.as_str()), Some("Running"));
        let shop: Vec<(&str, &str)> = world
            .pods_in("shop")
            .map(|p| (p.uid.as_str(), p.phase.as_str()))
            .collect();
        assert_eq!(
            shop,
            [("u1", "Pending"), ("u2", "Running")],
            "by uid, the new u2"
        );
        let shared = world.shared("u3").unwrap();
        assert!(std::ptr::eq(&*shared, world.get("u3").unwrap()));
        let keep = BTreeSet::from(["u1", "u2"]);
        assert_eq!(world.others(&keep), ["u3"]);
        assert_eq!(world.remove("u3").map(|p| p.uid), Some("u3".to_owned()));
        assert_eq!(world.pods_in("bank").count(), 0);
        assert!(world.get("u3").is_none() && world.remove("u3").is_none());
        assert_eq!(
            world.remove("u1").map(|p| p.name),
            Some("pod-u1".to_owned())
        );
        assert_eq!(world.pods_in("shop").count(), 1);
    }
}
