//! The pods of this node, keyed by UID (pure; fed by the API watcher).

use crate::core::model::PodInfo;
use std::collections::HashMap;
use std::sync::Arc;

/// Pods are held in an [`Arc`]: the agent's hot thread and the executor take one with a
/// reference count, not a copy of the pod's strings and maps ([`Self::shared`]).
#[derive(Debug, Default)]
pub struct PodIndex {
    pods: HashMap<String, Arc<PodInfo>>,
}

/// What an update did, so the agent can release per-pod state.
#[derive(Debug, PartialEq, Eq)]
pub enum IndexChange {
    Added,
    Updated,
    Removed,
    Unchanged,
}

impl PodIndex {
    pub fn apply(&mut self, pod: PodInfo) -> IndexChange {
        match self.pods.get(&pod.uid) {
            Some(old) if **old == pod => IndexChange::Unchanged,
            Some(_) => {
                self.pods.insert(pod.uid.clone(), Arc::new(pod));
                IndexChange::Updated
            }
            None => {
                self.pods.insert(pod.uid.clone(), Arc::new(pod));
                IndexChange::Added
            }
        }
    }

    /// [`Self::apply`] of a pod already shared elsewhere (the controller's kept pod): the
    /// index holds a reference count, not a second copy.
    pub fn apply_shared(&mut self, pod: Arc<PodInfo>) -> IndexChange {
        let change = match self.pods.get(&pod.uid) {
            Some(old) if Arc::ptr_eq(old, &pod) => return IndexChange::Unchanged,
            Some(old) if **old == *pod => IndexChange::Unchanged,
            Some(_) => IndexChange::Updated,
            None => IndexChange::Added,
        };
        // Even when unchanged: the old copy is released, the shared one kept.
        self.pods.insert(pod.uid.clone(), pod);
        change
    }

    pub fn delete(&mut self, uid: &str) -> Option<PodInfo> {
        self.pods.remove(uid).map(Arc::unwrap_or_clone)
    }

    /// Replaces the whole index (after a relist); returns the UIDs that are gone.
    pub fn reset(&mut self, pods: Vec<PodInfo>) -> Vec<String> {
        let fresh: HashMap<String, Arc<PodInfo>> = pods
            .into_iter()
            .map(|p| (p.uid.clone(), Arc::new(p)))
            .collect();
        let gone = self
            .pods
            .keys()
            .filter(|uid| !fresh.contains_key(*uid))
            .cloned()
            .collect();
        self.pods = fresh;
        gone
    }

    pub fn get(&self, uid: &str) -> Option<&PodInfo> {
        self.pods.get(uid).map(|p| &**p)
    }

    /// The pod, shared (a reference count, no copy).
    pub fn shared(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.pods.get(uid).cloned()
    }

    pub fn find(&self, namespace: &str, name: &str) -> Option<&PodInfo> {
        self.pods
            .values()
            .map(|p| &**p)
            .find(|p| p.namespace == namespace && p.name == name)
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &PodInfo> {
        self.pods.values().map(|p| &**p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, name: &str) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: "ns".into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_shared_pod_is_held_not_copied() {
        let mut idx = PodIndex::default();
        let first = Arc::new(pod("u1", "a"));
        assert_eq!(idx.apply_shared(first.clone()), IndexChange::Added);
        assert_eq!(idx.apply_shared(first.clone()), IndexChange::Unchanged);
        assert!(Arc::ptr_eq(&idx.shared("u1").unwrap(), &first));
        // An equal pod in a new allocation: unchanged, and the index now holds that one.
        let again = Arc::new(pod("u1", "a"));
        assert_eq!(idx.apply_shared(again.clone()), IndexChange::Unchanged);
        assert!(Arc::ptr_eq(&idx.shared("u1").unwrap(), &again));
        drop(first);
        let mut changed = pod("u1", "a");
        changed.annotations.insert("k".into(), "v".into());
        assert_eq!(idx.apply_shared(Arc::new(changed)), IndexChange::Updated);
        assert_eq!(idx.get("u1").unwrap().annotations.len(), 1);
        assert_eq!(Arc::strong_count(&again), 1, "the old pod was released");
    }

    #[test]
    fn apply_delete_reset() {
        let mut idx = PodIndex::default();
        assert_eq!(idx.apply(pod("u1", "a")), IndexChange::Added);
        assert_eq!(idx.apply(pod("u1", "a")), IndexChange::Unchanged);
        let mut changed = pod("u1", "a");
        changed.annotations.insert("k".into(), "v".into());
        assert_eq!(idx.apply(changed), IndexChange::Updated);
        assert_eq!(idx.apply(pod("u2", "b")), IndexChange::Added);
        assert_eq!(idx.find("ns", "b").map(|p| p.uid.as_str()), Some("u2"));
        assert_eq!(
            idx.reset(vec![pod("u2", "b"), pod("u3", "c")]),
            vec!["u1".to_string()]
        );
        assert_eq!(idx.len(), 2);
        assert!(idx.delete("u2").is_some());
        assert!(idx.get("u2").is_none());
    }
}
