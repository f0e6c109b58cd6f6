//! What the controller's watches (`k8s::controller`, `k8s::workload_meta`) tell its loop.

use super::{ObjectKey, WorkloadChange};
use crate::core::model::{PodInfo, SourceKind};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// What the watches tell the controller loop.
#[derive(Debug)]
pub enum Input {
    /// A ConfigMap/Secret (metadata only) was added or modified.
    Object {
        key: ObjectKey,
        resource_version: String,
    },
    ObjectDeleted(ObjectKey),
    /// The complete list of `kind` after a (re)list.
    ObjectsListed {
        kind: SourceKind,
        objects: Vec<(ObjectKey, String)>,
    },
    PodApplied(PodInfo),
    PodDeleted {
        uid: String,
    },
    /// The complete pod list after a (re)list.
    PodsListed(Vec<PodInfo>),
    /// Leadership gained (`true`) or lost.
    Leader(bool),
    /// A workload's metadata (`--reloader-compat`).
    Workload(WorkloadChange),
    /// A watch failed; it retries with backoff.
    WatchError {
        what: &'static str,
        error: String,
    },
}

/// The `reloadlet.io/data-version` values the controller is writing, by object (docs/status.md):
/// its object watches leave the echo of its own write unrouted (nothing a feature acts on
/// changed, so no nudge and no re-read), and route any other change of that annotation — a
/// restore, a copy from another object, a hand edit — whose data may have changed with it.
/// Cheap to clone; one fingerprint per object whose write is not echoed yet.
#[derive(Clone, Debug, Default)]
pub struct OwnDataVersions {
    writing: Arc<Mutex<HashMap<ObjectKey, u64>>>,
}

impl OwnDataVersions {
    /// The fingerprint of an annotation value (what the watches compare).
    pub fn fingerprint(value: &str) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        value.hash(&mut h);
        h.finish()
    }

    /// The controller is about to write `value` on `key` (recorded before the request: the
    /// watch may bring the echo before the answer).
    pub fn writing(&self, key: ObjectKey, value: &str) {
        self.map().insert(key, Self::fingerprint(value));
    }

    /// `true` once for the echo of the controller's own write: `key`'s annotation now has the
    /// value it wrote last.
    pub fn is_echo(&self, key: &ObjectKey, fingerprint: u64) -> bool {
        let mut map = self.map();
        if map.get(key) == Some(&fingerprint) {
            map.remove(key);
            return true;
        }
        false
    }

    /// `key` was deleted.
    pub fn forget(&self, key: &ObjectKey) {
        self.map().remove(key);
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, u64>> {
        self.writing.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_value_written_last_is_an_echo_and_only_once() {
        let own = OwnDataVersions::default();
        let key = ObjectKey {
            kind: SourceKind::ConfigMap,
            namespace: "shop".into(),
            name: "app".into(),
        };
        let ours = "v1 since=2026-11-29T09:36:45Z app.conf=0f3c9a1e5b7d2c48";
        let restored = "v1 since=2026-11-28T08:00:00Z app.conf=1f3c9a1e5b7d2c48";
        assert!(!own.is_echo(&key, OwnDataVersions::fingerprint(ours)));
        own.writing(key.clone(), ours);
        assert!(!own.is_echo(&key, OwnDataVersions::fingerprint(restored)));
        assert!(own.is_echo(&key, OwnDataVersions::fingerprint(ours)));
        assert!(!own.is_echo(&key, OwnDataVersions::fingerprint(ours)));
        own.writing(key.clone(), ours);
        own.forget(&key);
        assert!(!own.is_echo(&key, OwnDataVersions::fingerprint(ours)));
    }
}
