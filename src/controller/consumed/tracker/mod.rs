//! The consumed objects' bookkeeping (pure, synchronous): which objects the tracked pods read
//! (through env for the env consumers; through volumes and env for the rollout feature), what
//! each pod's baseline digest is, which fetches are needed, and which pods a fetched object
//! changed for. [`super::Consumed`] does the fetching; the features act and write.
//!
//! Ordering: every fetch carries a sequence number taken when it is sent. A result older than
//! one already applied for the same object is dropped (two GETs in flight never apply out of
//! order), and a pod's first baseline is only taken from a fetch sent after the pod was first
//! seen (a GET answered with data older than the pod never becomes its baseline).

use super::baseline::{format_baseline, parse_baseline};
use super::digest::{digest, Selector};
use super::vec_map::VecMap;
use crate::core::model::{PodInfo, SourceRef};
use crate::core::volume_digest::HashKey;
use crate::ports::ObjectData;
use crate::ports::ObjectKey;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Debug)]
struct PodEnv {
    namespace: String,
    name: String,
    refs: VecMap<SourceRef, Vec<Selector>>,
    /// The digest per reference the pod is known to run with (its baseline).
    known: VecMap<SourceRef, String>,
    /// `reloadlet.io/env-baseline` as last seen on the pod (or written).
    written: Option<String>,
    /// A write of this value is in flight.
    writing: Option<String>,
    /// The digest per reference an eviction was already requested for (in memory only: the
    /// baseline annotation keeps the old digest until the pod is gone, so a controller
    /// restarted mid-eviction asks again; within one run, a second GET of the same data —
    /// a replacement pod's first fetch, the metadata watch's first event — must not evict
    /// the pod twice).
    acting: VecMap<SourceRef, String>,
    /// The fetch sequence when the pod was first seen.
    seen_seq: u64,
}

/// A pod whose env source changed after its baseline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub uid: String,
    pub source: SourceRef,
    /// The digest of what the pod would read now.
    pub digest: String,
}

/// A baseline annotation to write: (namespace, name, uid, value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaselineWrite {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub value: String,
}

/// What a pod reads of which objects (env references; for the rollout feature, volumes too).
pub type RefsFn = fn(&PodInfo, bool, bool) -> BTreeMap<SourceRef, Vec<Selector>>;

/// The tracker serves the env consumers (`reloadlet.io/env-baseline`, env references) and the
/// rollout feature (`reloadlet.io/rollout-baseline`, volume and env references) alike, each
/// its own.
#[derive(Debug)]
pub struct Tracker {
    refs: RefsFn,
    /// The controller's key: digests and baseline MACs ([`Self::keyed`]).
    key: HashKey,
    annotation: &'static str,
    configmaps: bool,
    secrets: bool,
    pods: HashMap<String, PodEnv>,
    /// The uids reading each object (as a set: the values are `()`).
    by_object: HashMap<ObjectKey, VecMap<String, ()>>,
    /// The resourceVersion last asked for per object (`None`: unknown, e.g. after a delete).
    requested: HashMap<ObjectKey, Option<String>>,
    /// The sequence number of the newest fetch applied per object.
    applied: HashMap<ObjectKey, u64>,
    seq: u64,
    /// Pods whose baseline may differ from their annotation (looked at by [`Self::writes`]).
    dirty: BTreeSet<String>,
    /// Env consumers only: pods whose source went back to their baseline while an eviction
    /// was requested or held for it ([`Self::take_settled`]).
    settled: Option<Vec<Change>>,
}

fn key_of(namespace: &str, source: &SourceRef) -> ObjectKey {
    ObjectKey {
        kind: source.kind,
        namespace: namespace.to_owned(),
        name: source.name.clone(),
    }
}

impl Tracker {
    /// Also keeps the changes that went back to their baseline while acted on
    /// ([`Self::take_settled`]: the env consumers release what their pacing held for them).
    pub fn settling(mut self) -> Self {
        self.settled = Some(Vec::new());
        self
    }

    /// Digests and baseline MACs under `key` (the controller's, which outlives a restart:
    /// `crate::k8s::controller_key`).
    pub fn keyed(mut self, key: HashKey) -> Self {
        self.key = key;
        self
    }

    /// A tracker of what `refs` says each pod reads, its baseline kept in `annotation`.
    pub fn with(refs: RefsFn, annotation: &'static str, configmaps: bool, secrets: bool) -> Self {
        Self {
            refs,
            // Replaced by the controller's key ([`Self::keyed`]); a tracker made without one
            // (tests) still never trusts a baseline it did not sign itself.
            key: HashKey::generate().expect("the kernel's random source (getrandom)"),
            annotation,
            configmaps,
            secrets,
            pods: HashMap::new(),
            by_object: HashMap::new(),
            requested: HashMap::new(),
            applied: HashMap::new(),
            seq: 0,
            dirty: BTreeSet::new(),
            settled: None,
        }
    }

    /// A pod was added or changed (only for pods the owning feature follows). Returns the
    /// objects to fetch: those of references with no baseline yet.
    pub fn put_pod(&mut self, pod: &PodInfo) -> Vec<ObjectKey> {
        let refs = (self.refs)(pod, self.configmaps, self.secrets);
        if refs.is_empty() {
            self.remove_pod(&pod.uid);
            return Vec::new();
        }
        let annotation = pod.annotations.get(self.annotation).cloned();
        let seq = self.seq;
        let entry = self.pods.entry(pod.uid.clone()).or_insert_with(|| PodEnv {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            refs: VecMap::default(),
            // First sight: the baseline the controller wrote earlier, if any — and only if it
            // is the controller's (its MAC holds): a forged or copied one is not trusted, and
            // a baseline is taken afresh (then written over it).
            known: annotation
                .as_deref()
                .and_then(|a| {
                    let parsed = parse_baseline(&self.key, self.annotation, &pod.uid, a);
                    if parsed.is_none() {
                        tracing::warn!(pod = %pod.full_name(), annotation = self.annotation, "the baseline annotation on the pod is not this controller's (unsigned, forged or copied); ignored, a baseline is taken afresh");
                    }
                    parsed
                })
                .map(|known| known.into_iter().collect())
                .unwrap_or_default(),
            written: annotation.clone(),
            writing: None,
            acting: VecMap::default(),
            seen_seq: seq,
        });
        if entry.written != annotation {
            self.dirty.insert(pod.uid.clone());
        }
        entry.written = annotation;
        if entry.writing.as_ref() == entry.written.as_ref() {
            entry.writing = None;
        }
        let old: Vec<SourceRef> = entry.refs.keys().cloned().collect();
        entry.refs = refs.into_iter().collect();
        entry.known.retain(|s, _| entry.refs.contains_key(s));
        let unknown: Vec<SourceRef> = entry
            .refs
            .keys()
            .filter(|s| !entry.known.contains_key(*s))
            .cloned()
            .collect();
        let namespace = entry.namespace.clone();
        for s in &old {
            if !self.pods[&pod.uid].refs.contains_key(s) {
                self.unlink(&key_of(&namespace, s), &pod.uid);
            }
        }
        let sources: Vec<SourceRef> = self.pods[&pod.uid].refs.keys().cloned().collect();
        for s in sources {
            self.by_object
                .entry(key_of(&namespace, &s))
                .or_default()
                .insert(pod.uid.clone(), ());
        }
        unknown.iter().map(|s| key_of(&namespace, s)).collect()
    }

    pub fn remove_pod(&mut self, uid: &str) {
        if let Some(p) = self.pods.remove(uid) {
            for s in p.refs.keys() {
                self.unlink(&key_of(&p.namespace, s), uid);
            }
        }
    }

    fn unlink(&mut self, key: &ObjectKey, uid: &str) {
        if let Some(set) = self.by_object.get_mut(key) {
            set.remove(uid);
            if set.is_empty() {
                self.by_object.remove(key);
                self.requested.remove(key);
                self.applied.remove(key);
            }
        }
    }

    pub fn tracks(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// Does some tracked pod read `key`, and is `resource_version` (`None`: deleted) not what
    /// was last fetched? Then it must be fetched.
    pub fn needs_fetch(&self, key: &ObjectKey, resource_version: Option<&str>) -> bool {
        if !self.by_object.contains_key(key) {
            return false;
        }
        match (self.requested.get(key), resource_version) {
            (Some(Some(old)), Some(new)) => old != new,
            (Some(None), None) => false,
            _ => true,
        }
    }

    /// Every object some tracked pod reads (after gaining leadership).
    pub fn objects(&self) -> Vec<ObjectKey> {
        let mut v: Vec<ObjectKey> = self.by_object.keys().cloned().collect();
        v.sort();
        v
    }

    /// Objects some tracked pod reads that no fetch was sent for (since the last
    /// [`Self::forget_fetches`]).
    pub fn unrequested(&self) -> Vec<ObjectKey> {
        let mut v: Vec<ObjectKey> = self
            .by_object
            .keys()
            .filter(|k| !self.requested.contains_key(*k))
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// A fetch of `key` is being sent, for `resource_version` when known: its sequence number.
    pub fn start_fetch(&mut self, key: &ObjectKey, resource_version: Option<&str>) -> u64 {
        self.seq += 1;
        self.requested
            .insert(key.clone(), resource_version.map(str::to_owned));
        self.seq
    }

    /// Forget what was fetched (leadership lost: the next leader term fetches everything again).
    pub fn forget_fetches(&mut self) {
        self.requested.clear();
    }

    /// A fetch answered (`data`: `None` when the object does not exist). Takes baselines of
    /// pods that had none and returns the pods whose references read something else now.
    pub fn fetched(&mut self, key: &ObjectKey, seq: u64, data: Option<&ObjectData>) -> Vec<Change> {
        if self.applied.get(key).is_some_and(|&s| s > seq) {
            return Vec::new();
        }
        let Some(uids) = self.by_object.get(key) else {
            return Vec::new();
        };
        self.applied.insert(key.clone(), seq);
        let source = SourceRef {
            kind: key.kind,
            name: key.name.clone(),
        };
        let mut changes = Vec::new();
        for (uid, ()) in uids.iter() {
            let Some(pod) = self.pods.get_mut(uid) else {
                continue;
            };
            let Some(selectors) = pod.refs.get(&source) else {
                continue;
            };
            let now = digest(&self.key, selectors, data);
            match pod.known.get(&source) {
                None if seq > pod.seen_seq => {
                    pod.known.insert(source.clone(), now);
                    self.dirty.insert(uid.clone());
                }
                None => {}
                Some(old) if *old == now => {
                    // Back to what the pod runs: what was asked for it is moot (and a change
                    // to that content again is a change again).
                    if let Some(settled) = &mut self.settled {
                        if pod.acting.contains_key(&source) {
                            pod.acting.remove(&source);
                            settled.push(Change {
                                uid: uid.clone(),
                                source: source.clone(),
                                digest: now,
                            });
                        }
                    }
                }
                Some(_) if pod.acting.get(&source) == Some(&now) => {}
                Some(_) => changes.push(Change {
                    uid: uid.clone(),
                    source: source.clone(),
                    digest: now,
                }),
            }
        }
        changes
    }

    /// The change was dealt with for good (a warning published, an eviction refused): the
    /// pod's baseline becomes what it would read now, so it is not reported again.
    pub fn acknowledge(&mut self, change: &Change) {
        if let Some(pod) = self.pods.get_mut(&change.uid) {
            pod.known
                .insert(change.source.clone(), change.digest.clone());
            self.dirty.insert(change.uid.clone());
        }
    }

    /// An eviction was requested for the change: the same digest is not reported again in
    /// this run (a different one is). The baseline is left as it is (see `acting`).
    pub fn acting(&mut self, change: &Change) {
        if let Some(pod) = self.pods.get_mut(&change.uid) {
            pod.acting
                .insert(change.source.clone(), change.digest.clone());
        }
    }

    /// Env consumers: the pods whose source went back to their baseline (what they run) after
    /// an eviction was asked for it, since the last call; their held evictions are moot.
    pub fn take_settled(&mut self) -> Vec<Change> {
        self.settled
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The objects the pod reads (sorted).
    pub fn objects_of(&self, uid: &str) -> Vec<ObjectKey> {
        let Some(pod) = self.pods.get(uid) else {
            return Vec::new();
        };
        let mut v: Vec<ObjectKey> = pod.refs.keys().map(|s| key_of(&pod.namespace, s)).collect();
        v.sort();
        v
    }

    /// Forgets what was requested for the pod in this run ([`Self::acting`]): its pacing
    /// annotation was invalid and is fixed, so what pacing refused or dropped meanwhile is
    /// found again by the next comparison (its baseline never moved).
    pub fn release(&mut self, uid: &str) {
        if let Some(pod) = self.pods.get_mut(uid) {
            pod.acting = VecMap::default();
        }
    }

    /// Forgets that an eviction was asked for this change ([`Self::acting`]): it was held and
    /// dropped (leadership lost), so the next comparison finds it again.
    pub fn release_change(&mut self, change: &Change) {
        if let Some(pod) = self.pods.get_mut(&change.uid) {
            if pod.acting.get(&change.source) == Some(&change.digest) {
                pod.acting.remove(&change.source);
            }
        }
    }

    /// Baseline annotations that differ from what the pods carry (and are not being written).
    pub fn writes(&mut self) -> Vec<BaselineWrite> {
        let mut out = Vec::new();
        for uid in std::mem::take(&mut self.dirty) {
            let Some(pod) = self.pods.get_mut(&uid) else {
                continue;
            };
            if pod.known.is_empty() {
                continue;
            }
            let known: BTreeMap<SourceRef, String> = pod
                .known
                .iter()
                .map(|(s, d)| (s.clone(), d.clone()))
                .collect();
            let value = format_baseline(&self.key, self.annotation, &uid, &known);
            if pod.written.as_ref() == Some(&value) || pod.writing.as_ref() == Some(&value) {
                continue;
            }
            pod.writing = Some(value.clone());
            out.push(BaselineWrite {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid,
                value,
            });
        }
        out.sort_by(|a, b| a.uid.cmp(&b.uid));
        out
    }

    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    /// The namespace and name of a tracked pod.
    pub fn pod_name(&self, uid: &str) -> Option<(&str, &str)> {
        self.pods
            .get(uid)
            .map(|p| (p.namespace.as_str(), p.name.as_str()))
    }

    pub fn objects_len(&self) -> usize {
        self.by_object.len()
    }
}

#[cfg(test)]
mod tests;
