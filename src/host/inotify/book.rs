//! Pure bookkeeping of watch descriptors ↔ watched directories.
//!
//! Generic over the descriptor type so it is table-tested without inotify. It knows which
//! pods and volumes have been seen, which directory every descriptor watches, and which
//! directories could not be watched (they are rescanned periodically instead).

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::Arc;

use super::node::Node;
use crate::core::model::VolumeKey;

/// What recording a freshly added watch did to the books.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Recorded<W> {
    /// The node had no watch before.
    Fresh,
    /// The node already had this very descriptor (same inode as before).
    Unchanged,
    /// The node had another descriptor (its directory is a new inode: remounted or
    /// recreated); the caller removes the old one from the kernel.
    Replaced(W),
    /// The descriptor already watches another node (two paths, one inode). Nothing was
    /// recorded; the caller treats the node as unwatched.
    Conflict(Node),
}

/// What forgetting a subtree released.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Forgotten<W> {
    /// Descriptors to remove from the kernel (errors there are expected and harmless).
    pub wds: Vec<W>,
    /// Volumes that were known, in order.
    pub volumes: Vec<VolumeKey>,
    /// Pods that were known, in order.
    pub pods: Vec<Arc<str>>,
}

/// The watcher's books.
#[derive(Debug)]
pub(crate) struct WatchBook<W> {
    by_wd: HashMap<W, Node>,
    by_node: HashMap<Node, W>,
    unwatched: BTreeSet<Node>,
    pods: BTreeSet<Arc<str>>,
    volumes: BTreeSet<VolumeKey>,
}

impl<W> Default for WatchBook<W> {
    fn default() -> Self {
        Self {
            by_wd: HashMap::new(),
            by_node: HashMap::new(),
            unwatched: BTreeSet::new(),
            pods: BTreeSet::new(),
            volumes: BTreeSet::new(),
        }
    }
}

impl<W: Clone + Eq + Hash> WatchBook<W> {
    /// The node a descriptor watches.
    pub(crate) fn node_of(&self, wd: &W) -> Option<&Node> {
        self.by_wd.get(wd)
    }

    /// The descriptor watching a node.
    pub(crate) fn wd_of(&self, node: &Node) -> Option<&W> {
        self.by_node.get(node)
    }

    /// Whether the node has been seen and not forgotten since.
    pub(crate) fn is_known(&self, node: &Node) -> bool {
        match node {
            Node::Pod(uid) => self.pods.contains(uid),
            Node::Volume(key) => self.volumes.contains(key),
            _ => self.by_node.contains_key(node) || self.unwatched.contains(node),
        }
    }

    /// Marks the node (and its pod) known; true when the node itself was not known before.
    fn learn(&mut self, node: &Node) -> bool {
        let first = !self.is_known(node);
        if let Some(uid) = node.pod_uid() {
            if !self.pods.contains(uid) {
                self.pods.insert(uid.clone());
            }
        }
        if let Node::Volume(key) = node {
            self.volumes.insert(key.clone());
        }
        first
    }

    /// Records that `wd` now watches `node`. The boolean is true when the node was not
    /// known before (a volume seen for the first time).
    pub(crate) fn record_armed(&mut self, node: Node, wd: W) -> (Recorded<W>, bool) {
        if let Some(other) = self.by_wd.get(&wd) {
            if *other != node {
                return (Recorded::Conflict(other.clone()), false);
            }
        }
        let first = self.learn(&node);
        self.unwatched.remove(&node);
        let outcome = match self.by_node.insert(node.clone(), wd.clone()) {
            None => Recorded::Fresh,
            Some(old) if old == wd => Recorded::Unchanged,
            Some(old) => {
                self.by_wd.remove(&old);
                Recorded::Replaced(old)
            }
        };
        self.by_wd.insert(wd, node);
        (outcome, first)
    }

    /// Records that `node` exists but has no watch (limit reached, permission, conflict).
    /// Returns a descriptor it had (to remove from the kernel) and whether it is new.
    pub(crate) fn record_unwatched(&mut self, node: Node) -> (Option<W>, bool) {
        let first = self.learn(&node);
        let old = self.by_node.remove(&node);
        if let Some(old) = &old {
            self.by_wd.remove(old);
        }
        self.unwatched.insert(node);
        (old, first)
    }

    /// The kernel dropped `wd` (IN_IGNORED): unbinds it, keeps the node known.
    pub(crate) fn remove_wd(&mut self, wd: &W) -> Option<Node> {
        let node = self.by_wd.remove(wd)?;
        if self.by_node.get(&node) == Some(wd) {
            self.by_node.remove(&node);
        }
        Some(node)
    }

    /// Forgets `node` and everything below it.
    pub(crate) fn forget_subtree(&mut self, node: &Node) -> Forgotten<W> {
        let mut wds = Vec::new();
        self.by_node.retain(|n, wd| {
            let inside = node.contains(n);
            if inside {
                wds.push(wd.clone());
            }
            !inside
        });
        for wd in &wds {
            self.by_wd.remove(wd);
        }
        self.unwatched.retain(|n| !node.contains(n));
        let volumes = take_matching(&mut self.volumes, |k| {
            node.contains(&Node::Volume(k.clone()))
        });
        let pods = match node {
            Node::Pods => std::mem::take(&mut self.pods).into_iter().collect(),
            Node::Pod(uid) if self.pods.remove(uid) => vec![uid.clone()],
            _ => Vec::new(),
        };
        Forgotten { wds, volumes, pods }
    }

    /// How many volumes of the pod are known.
    pub(crate) fn pod_volume_count(&self, pod_uid: &Arc<str>) -> usize {
        let first = VolumeKey {
            pod_uid: pod_uid.clone(),
            plugin: crate::core::model::VolumePlugin::ALL[0],
            volume: Arc::from(""),
        };
        self.volumes
            .range(first..)
            .take_while(|k| k.pod_uid == *pod_uid)
            .count()
    }

    /// Every node the books know of (watched, unwatched, known pods and volumes).
    pub(crate) fn known_nodes(&self) -> BTreeSet<Node> {
        let mut all: BTreeSet<Node> = self.by_node.keys().cloned().collect();
        all.extend(self.unwatched.iter().cloned());
        all.extend(self.pods.iter().map(|uid| Node::Pod(uid.clone())));
        all.extend(self.volumes.iter().map(|k| Node::Volume(k.clone())));
        all
    }

    /// Nodes that exist but have no watch.
    pub(crate) fn unwatched(&self) -> Vec<Node> {
        self.unwatched.iter().cloned().collect()
    }

    pub(crate) fn has_unwatched(&self) -> bool {
        !self.unwatched.is_empty()
    }

    /// Volumes that currently have a watch.
    pub(crate) fn watched_volumes(&self) -> Vec<VolumeKey> {
        let mut keys: Vec<VolumeKey> = self
            .by_node
            .keys()
            .filter_map(|n| match n {
                Node::Volume(k) => Some(k.clone()),
                _ => None,
            })
            .collect();
        keys.sort();
        keys
    }

    /// Every known volume, in order.
    pub(crate) fn volumes(&self) -> impl Iterator<Item = &VolumeKey> {
        self.volumes.iter()
    }

    pub(crate) fn watch_count(&self) -> usize {
        self.by_wd.len()
    }

    pub(crate) fn pod_count(&self) -> usize {
        self.pods.len()
    }

    pub(crate) fn volume_count(&self) -> usize {
        self.volumes.len()
    }

    pub(crate) fn unwatched_volume_count(&self) -> usize {
        self.unwatched
            .iter()
            .filter(|n| matches!(n, Node::Volume(_)))
            .count()
    }
}

fn take_matching(
    set: &mut BTreeSet<VolumeKey>,
    pred: impl Fn(&VolumeKey) -> bool,
) -> Vec<VolumeKey> {
    let taken: Vec<VolumeKey> = set.iter().filter(|k| pred(k)).cloned().collect();
    for k in &taken {
        set.remove(k);
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::VolumePlugin;

    fn key(uid: &str, name: &str) -> VolumeKey {
        VolumeKey {
            pod_uid: uid.into(),
            plugin: VolumePlugin::ConfigMap,
            volume: name.into(),
        }
    }

    fn vol(uid: &str, name: &str) -> Node {
        Node::Volume(key(uid, name))
    }

    /// Arms a pod with one configmap volume: pod=wd, volumes=wd+1, plugin=wd+2, volume=wd+3.
    fn arm_pod(book: &mut WatchBook<u32>, uid: &str, wd: u32) {
        book.record_armed(Node::Pod(uid.into()), wd);
        book.record_armed(Node::Volumes(uid.into()), wd + 1);
        book.record_armed(Node::Plugin(uid.into(), VolumePlugin::ConfigMap), wd + 2);
        book.record_armed(vol(uid, "cfg"), wd + 3);
    }

    #[test]
    fn arming_reports_fresh_unchanged_replaced_and_conflict() {
        let mut book = WatchBook::<u32>::default();
        assert_eq!(book.record_armed(vol("u", "a"), 1), (Recorded::Fresh, true));
        assert_eq!(
            book.record_armed(vol("u", "a"), 1),
            (Recorded::Unchanged, false)
        );
        assert_eq!(
            book.record_armed(vol("u", "a"), 2),
            (Recorded::Replaced(1), false)
        );
        assert_eq!(book.node_of(&1), None, "the replaced descriptor is unbound");
        assert_eq!(book.node_of(&2), Some(&vol("u", "a")));
        assert_eq!(
            book.record_armed(vol("u", "b"), 2),
            (Recorded::Conflict(vol("u", "a")), false)
        );
        assert!(!book.is_known(&vol("u", "b")), "a conflict records nothing");
        assert_eq!(book.watch_count(), 1);
        assert_eq!(book.pod_count(), 1, "arming a volume makes its pod known");
    }

    #[test]
    fn unwatched_nodes_are_known_and_counted_then_cleared_by_arming() {
        let mut book = WatchBook::<u32>::default();
        book.record_armed(vol("u", "a"), 7);
        assert_eq!(book.record_unwatched(vol("u", "a")), (Some(7), false));
        assert_eq!(book.record_unwatched(vol("u", "b")), (None, true));
        assert_eq!(
            book.record_unwatched(Node::Plugin("u".into(), VolumePlugin::Secret)),
            (None, true)
        );
        assert_eq!(book.watch_count(), 0);
        assert_eq!(book.unwatched_volume_count(), 2);
        assert_eq!(book.volume_count(), 2);
        assert!(book.has_unwatched());
        assert_eq!(
            book.record_armed(vol("u", "b"), 9),
            (Recorded::Fresh, false)
        );
        assert_eq!(book.unwatched_volume_count(), 1);
        assert_eq!(book.watched_volumes(), vec![key("u", "b")]);
    }

    #[test]
    fn ignored_descriptors_unbind_but_keep_the_node_known() {
        let mut book = WatchBook::<u32>::default();
        book.record_armed(vol("u", "a"), 3);
        assert_eq!(book.remove_wd(&3), Some(vol("u", "a")));
        assert_eq!(book.remove_wd(&3), None, "a stale descriptor is not ours");
        assert_eq!(book.watch_count(), 0);
        assert!(book.is_known(&vol("u", "a")));
        // A descriptor replaced earlier must not unbind the node's current one.
        book.record_armed(vol("u", "a"), 4);
        book.record_armed(vol("u", "a"), 5);
        assert_eq!(book.remove_wd(&4), None);
        assert_eq!(book.wd_of(&vol("u", "a")), Some(&5));
    }

    #[test]
    fn forgetting_a_pod_releases_exactly_its_watches() {
        let mut book = WatchBook::<u32>::default();
        book.record_armed(Node::Pods, 1);
        arm_pod(&mut book, "u1", 10);
        arm_pod(&mut book, "u2", 20);
        book.record_unwatched(vol("u1", "late"));
        let mut gone = book.forget_subtree(&Node::Pod("u1".into()));
        gone.wds.sort();
        assert_eq!(gone.wds, vec![10, 11, 12, 13]);
        assert_eq!(gone.volumes, vec![key("u1", "cfg"), key("u1", "late")]);
        assert_eq!(gone.pods, vec![Arc::from("u1")]);
        assert_eq!(book.watch_count(), 5);
        assert_eq!(book.unwatched_volume_count(), 0);
        assert_eq!(book.pod_count(), 1);
        assert_eq!(book.node_of(&13), None);
        assert_eq!(book.node_of(&23), Some(&vol("u2", "cfg")));
    }

    #[test]
    fn forgetting_a_volume_keeps_its_pod() {
        let mut book = WatchBook::<u32>::default();
        arm_pod(&mut book, "u1", 10);
        let gone = book.forget_subtree(&vol("u1", "cfg"));
        assert_eq!(
            gone,
            Forgotten {
                wds: vec![13],
                volumes: vec![key("u1", "cfg")],
                pods: vec![]
            }
        );
        assert_eq!(book.pod_count(), 1);
        let again = book.forget_subtree(&vol("u1", "cfg"));
        assert!(
            again.wds.is_empty() && again.volumes.is_empty(),
            "forgetting twice reports nothing"
        );
    }

    #[test]
    fn known_nodes_cover_watched_unwatched_pods_and_volumes() {
        let mut book = WatchBook::<u32>::default();
        book.record_armed(Node::Pods, 1);
        book.record_unwatched(vol("u3", "x"));
        let all = book.known_nodes();
        assert!(all.contains(&Node::Pods));
        assert!(
            all.contains(&Node::Pod("u3".into())),
            "a pod learnt through its volume"
        );
        assert!(all.contains(&vol("u3", "x")));
        assert_eq!(all.len(), 3);
    }
}
