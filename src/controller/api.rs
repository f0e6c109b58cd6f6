//! The controller's API edges as small traits (kube-free), each with a fake for tests.
//! The kube implementations live in `crate::k8s::controller`.

use super::env_hash::ObjectData;
use super::lease::LeaseRecord;
use super::nudges::ObjectKey;
use crate::core::model::{PodInfo, SourceKind};
use futures::future::BoxFuture;
use std::future::Future;

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
    /// A watch failed; it retries with backoff.
    WatchError {
        what: &'static str,
        error: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("not found")]
    NotFound,
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("{0}")]
    Other(String),
}

/// Writes the nudge annotation; reads a pod back after a 404/409.
pub trait PodPatcher: Send + Sync + 'static {
    /// A JSON merge patch of exactly `metadata.annotations["reloadlet.io/projection-nudge"]`.
    fn patch_nudge(
        &self,
        namespace: &str,
        name: &str,
        value: &str,
    ) -> impl Future<Output = Result<(), PatchError>> + Send;
    /// `Ok(None)`: the pod does not exist.
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<PodInfo>, PatchError>> + Send;
}

/// The env-consumer edges: one GET of a referenced ConfigMap/Secret (its data, held only
/// while its consumers' digests are computed) and the baseline annotation write.
pub trait EnvApi: Send + Sync + 'static {
    /// `Ok(None)`: the object does not exist.
    fn read(&self, key: &ObjectKey) -> BoxFuture<'_, Result<Option<ObjectData>, String>>;
    /// A JSON merge patch of exactly `reloadlet.io/env-baseline` on the pod, conditional on
    /// its UID. `Ok(false)`: the pod is gone.
    fn write_baseline<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        uid: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>>;
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Someone else wrote the Lease first (409 on update, 409 "already exists" on create).
    #[error("conflict")]
    Conflict,
    #[error("{0}")]
    Other(String),
}

/// The Lease `reloadlet-controller` in the controller's namespace.
pub trait LeaseStore: Send + Sync + 'static {
    /// The record and its resourceVersion; `None` when there is no Lease.
    fn get(&self)
        -> impl Future<Output = Result<Option<(LeaseRecord, String)>, LeaseError>> + Send;
    fn create(&self, record: &LeaseRecord) -> impl Future<Output = Result<(), LeaseError>> + Send;
    /// An update conditional on `resource_version`.
    fn replace(
        &self,
        record: &LeaseRecord,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send;
}

pub mod fake {
    //! In-memory fakes that record what was asked of them.
    use super::*;
    use std::collections::{HashMap, VecDeque};
    use std::sync::{Arc, Mutex};

    /// Objects by key; records reads and baseline writes.
    #[derive(Default)]
    pub struct FakeEnvApi {
        pub objects: Mutex<HashMap<ObjectKey, ObjectData>>,
        pub reads: Mutex<Vec<ObjectKey>>,
        /// (namespace, name, value) of every baseline write.
        pub writes: Mutex<Vec<(String, String, String)>>,
    }

    impl EnvApi for FakeEnvApi {
        fn read(&self, key: &ObjectKey) -> BoxFuture<'_, Result<Option<ObjectData>, String>> {
            self.reads.lock().unwrap().push(key.clone());
            let found = self.objects.lock().unwrap().get(key).cloned();
            Box::pin(std::future::ready(Ok(found)))
        }
        fn write_baseline<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
            _uid: &'a str,
            value: &'a str,
        ) -> BoxFuture<'a, Result<bool, String>> {
            self.writes
                .lock()
                .unwrap()
                .push((namespace.into(), name.into(), value.into()));
            Box::pin(std::future::ready(Ok(true)))
        }
    }

    #[derive(Default)]
    struct PatcherState {
        pods: HashMap<(String, String), PodInfo>,
        patches: Vec<(String, String, String)>,
        gets: usize,
        scripted: VecDeque<PatchError>,
        always: Option<PatchError>,
    }

    /// Pods by namespace/name; every patch is recorded (and applied to the stored pod).
    #[derive(Clone, Default)]
    pub struct FakePatcher {
        state: Arc<Mutex<PatcherState>>,
    }

    impl FakePatcher {
        pub fn put(&self, pod: PodInfo) {
            let mut s = self.state.lock().unwrap();
            s.pods
                .insert((pod.namespace.clone(), pod.name.clone()), pod);
        }
        pub fn remove(&self, namespace: &str, name: &str) {
            let mut s = self.state.lock().unwrap();
            s.pods.remove(&(namespace.to_owned(), name.to_owned()));
        }
        /// The next patches fail with these errors, in order.
        pub fn fail_next(&self, errors: impl IntoIterator<Item = PatchError>) {
            self.state.lock().unwrap().scripted.extend(errors);
        }
        /// Every patch fails with this error.
        pub fn fail_always(&self, error: PatchError) {
            self.state.lock().unwrap().always = Some(error);
        }
        /// `(namespace, name, value)` of every patch request, in order.
        pub fn patches(&self) -> Vec<(String, String, String)> {
            self.state.lock().unwrap().patches.clone()
        }
        pub fn gets(&self) -> usize {
            self.state.lock().unwrap().gets
        }
    }

    impl PodPatcher for FakePatcher {
        fn patch_nudge(
            &self,
            namespace: &str,
            name: &str,
            value: &str,
        ) -> impl Future<Output = Result<(), PatchError>> + Send {
            let mut s = self.state.lock().unwrap();
            s.patches
                .push((namespace.to_owned(), name.to_owned(), value.to_owned()));
            let result = if let Some(e) = s.always.clone() {
                Err(e)
            } else if let Some(e) = s.scripted.pop_front() {
                Err(e)
            } else {
                match s.pods.get_mut(&(namespace.to_owned(), name.to_owned())) {
                    Some(p) => {
                        p.annotations.insert(
                            crate::core::annotations::PROJECTION_NUDGE.to_owned(),
                            value.to_owned(),
                        );
                        Ok(())
                    }
                    None => Err(PatchError::NotFound),
                }
            };
            std::future::ready(result)
        }

        fn get(
            &self,
            namespace: &str,
            name: &str,
        ) -> impl Future<Output = Result<Option<PodInfo>, PatchError>> + Send {
            let mut s = self.state.lock().unwrap();
            s.gets += 1;
            let pod = s
                .pods
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned();
            std::future::ready(Ok(pod))
        }
    }

    #[derive(Default)]
    struct LeaseState {
        record: Option<(LeaseRecord, u64)>,
        writes: usize,
        down: bool,
    }

    /// One Lease shared by every clone (two candidates can share one store).
    #[derive(Clone, Default)]
    pub struct FakeLeaseStore {
        state: Arc<Mutex<LeaseState>>,
    }

    impl FakeLeaseStore {
        pub fn holder(&self) -> Option<String> {
            let s = self.state.lock().unwrap();
            s.record.as_ref().and_then(|(r, _)| r.holder.clone())
        }
        pub fn record(&self) -> Option<LeaseRecord> {
            self.state
                .lock()
                .unwrap()
                .record
                .as_ref()
                .map(|(r, _)| r.clone())
        }
        /// Every request fails while down.
        pub fn set_down(&self, down: bool) {
            self.state.lock().unwrap().down = down;
        }
        pub fn writes(&self) -> usize {
            self.state.lock().unwrap().writes
        }
    }

    impl LeaseStore for FakeLeaseStore {
        fn get(
            &self,
        ) -> impl Future<Output = Result<Option<(LeaseRecord, String)>, LeaseError>> + Send
        {
            let s = self.state.lock().unwrap();
            let r = if s.down {
                Err(LeaseError::Other("API unavailable".into()))
            } else {
                Ok(s.record.as_ref().map(|(r, v)| (r.clone(), v.to_string())))
            };
            std::future::ready(r)
        }
        fn create(
            &self,
            record: &LeaseRecord,
        ) -> impl Future<Output = Result<(), LeaseError>> + Send {
            let mut s = self.state.lock().unwrap();
            let r = if s.down {
                Err(LeaseError::Other("API unavailable".into()))
            } else if s.record.is_some() {
                Err(LeaseError::Conflict)
            } else {
                s.writes += 1;
                s.record = Some((record.clone(), 1));
                Ok(())
            };
            std::future::ready(r)
        }
        fn replace(
            &self,
            record: &LeaseRecord,
            resource_version: &str,
        ) -> impl Future<Output = Result<(), LeaseError>> + Send {
            let mut s = self.state.lock().unwrap();
            let r = if s.down {
                Err(LeaseError::Other("API unavailable".into()))
            } else {
                match &s.record {
                    Some((_, v)) if v.to_string() == resource_version => {
                        let next = v + 1;
                        s.writes += 1;
                        s.record = Some((record.clone(), next));
                        Ok(())
                    }
                    _ => Err(LeaseError::Conflict),
                }
            };
            std::future::ready(r)
        }
    }
}
