//! The data versions the publisher ([`crate::controller::publish`]) last read or wrote on each
//! consumed ConfigMap/Secret, shared with the `reloadlet_consumers` gauge: the gauge reads the
//! same `reloadlet.io/data-version` the CLI reads, without a read of its own.

use crate::core::status::data_version::Published;
use crate::ports::ObjectKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct PublishedVersions {
    map: Arc<Mutex<HashMap<ObjectKey, Published>>>,
    changed: Arc<Notify>,
}

impl PublishedVersions {
    /// `key` carries `published` now (`None`: gone, or its value unreadable).
    pub fn set(&self, key: &ObjectKey, published: Option<Published>) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = match published {
            Some(p) => map.insert(key.clone(), p.clone()) != Some(p),
            None => map.remove(key).is_some(),
        };
        drop(map);
        if changed {
            // A permit is kept when no one waits: the next wait returns at once.
            self.changed.notify_one();
        }
    }

    /// A copy of the versions (one per consumed object, a few hundred bytes each), for a
    /// count off the loop's task.
    pub fn snapshot(&self) -> HashMap<ObjectKey, Published> {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keeps only the objects `keep` says yes to.
    pub fn retain(&self, keep: impl Fn(&ObjectKey) -> bool) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|k, _| keep(k));
    }

    /// Returns once a version changed since the last return (cancel-safe).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

impl PublishedVersions {
    /// The version `key` carries, as last read or written.
    pub fn get(&self, key: &ObjectKey) -> Option<Published> {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }
}
