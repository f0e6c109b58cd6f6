//! The server's objects, its one resourceVersion counter and the retained history of
//! changes (pods, ConfigMaps, Secrets, Leases).
//!
//! Every mutation goes through [`State`] under one mutex; changes are appended to
//! the history and broadcast to open watches while that lock is held, so a watch that
//! subscribes under the lock never misses or duplicates a change.

use super::argo_rollout::Rollout;
use super::model::ApiChange;
pub(crate) use super::model::{
    key_of, new_uid, now_ts, random_suffix, ChangeKind, Key, ObjEvent, PdbEntry, PodEvent,
    Recorded, ReplicaSetSim, Resource, WatchSignal,
};
use super::readiness_log::Tracker;
use super::records::{EvictionRecord, InvariantRecord, RequestRecord};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod, PodStatus, Secret};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use tokio::sync::broadcast;

/// The workloads and their controllers' bookkeeping.
#[derive(Default)]
pub(crate) struct Workloads {
    pub deployments: BTreeMap<Key, Deployment>,
    pub statefulsets: BTreeMap<Key, StatefulSet>,
    pub daemonsets: BTreeMap<Key, DaemonSet>,
    pub rollouts: BTreeMap<Key, Rollout>,
    /// The nodes pods are scheduled on (a template's `nodeName` wins); DaemonSets run one
    /// pod on each.
    pub nodes: Vec<String>,
    /// UIDs of deleted workloads: the garbage collector deletes what they controlled.
    pub deleted_owners: BTreeSet<String>,
    /// Pod templates of StatefulSet revisions (`ControllerRevision`s), by
    /// (namespace, `<set>-<hash>`).
    pub revisions: BTreeMap<Key, PodTemplateSpec>,
    /// Open readiness logs.
    pub trackers: Vec<Tracker>,
}

/// The retained history of changes and the channels that carry them to open watches.
pub(crate) struct Journal {
    pub history: VecDeque<Recorded>,
    pub history_len: usize,
    /// Watching from a resourceVersion below this one answers 410.
    pub compacted_rv: u64,
    pub watch_tx: broadcast::Sender<WatchSignal>,
    pub change_tx: broadcast::Sender<ApiChange>,
}

/// Both Event APIs' objects (`events.k8s.io/v1` and core `v1`).
#[derive(Default)]
pub(crate) struct Events {
    pub v1: BTreeMap<Key, EventsV1Event>,
    pub core: BTreeMap<Key, CoreEvent>,
}

/// What the server saw, kept for tests to read afterwards (`super::records`).
#[derive(Default)]
pub(crate) struct Records {
    pub evictions: Vec<EvictionRecord>,
    pub invariants: Vec<InvariantRecord>,
    pub requests: Vec<RequestRecord>,
    /// The sequence number the next request arriving gets (`super::server::gate`).
    pub next_request: u64,
    /// The requests being answered (their sequence numbers): logged in `requests` once
    /// answered, removed from here under the same lock.
    pub answering: std::collections::BTreeSet<u64>,
}

/// How the simulated control plane behaves (set at start or by a test).
pub(crate) struct Behaviour {
    /// The garbage collector finalizes deleted pods by itself.
    pub auto_finalize: bool,
    /// How long the simulated controllers take to act on a change.
    pub controller_lag: Duration,
}

/// All server state.
pub(crate) struct State {
    pub rv: u64,
    pub journal: Journal,
    pub pods: BTreeMap<Key, Pod>,
    pub configmaps: BTreeMap<Key, ConfigMap>,
    pub secrets: BTreeMap<Key, Secret>,
    pub leases: BTreeMap<Key, Lease>,
    /// Server-side apply's field ownership, per object: leaf path → field manager.
    pub managers: BTreeMap<(Resource, Key), BTreeMap<String, String>>,
    pub events: Events,
    pub pdbs: BTreeMap<Key, PdbEntry>,
    pub replicasets: BTreeMap<Key, ReplicaSetSim>,
    /// `apps/v1` workloads and their controllers' bookkeeping (see `super::workloads`).
    pub workloads: Workloads,
    pub records: Records,
    pub behaviour: Behaviour,
}

impl State {
    pub fn new(
        history_len: usize,
        auto_finalize: bool,
        controller_lag: Duration,
        watch_tx: broadcast::Sender<WatchSignal>,
        change_tx: broadcast::Sender<ApiChange>,
    ) -> Self {
        Self {
            rv: 1,
            journal: Journal {
                history: VecDeque::new(),
                history_len: history_len.max(1),
                compacted_rv: 0,
                watch_tx,
                change_tx,
            },
            pods: BTreeMap::new(),
            configmaps: BTreeMap::new(),
            secrets: BTreeMap::new(),
            leases: BTreeMap::new(),
            managers: BTreeMap::new(),
            events: Events::default(),
            pdbs: BTreeMap::new(),
            replicasets: BTreeMap::new(),
            workloads: Default::default(),
            records: Records::default(),
            behaviour: Behaviour {
                auto_finalize,
                controller_lag,
            },
        }
    }

    /// Bumps the global counter and returns the new resourceVersion.
    pub fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Fills uid, creationTimestamp, generation and a generated name; sets rv.
    pub fn stamp_new(&mut self, meta: &mut ObjectMeta) {
        if meta.name.as_deref().unwrap_or_default().is_empty() {
            if let Some(prefix) = meta.generate_name.as_ref() {
                meta.name = Some(format!("{prefix}{}", random_suffix(5)));
            }
        }
        if meta.namespace.is_none() {
            meta.namespace = Some("default".into());
        }
        if meta.uid.as_deref().unwrap_or_default().is_empty() {
            meta.uid = Some(new_uid());
        }
        if meta.creation_timestamp.is_none() {
            meta.creation_timestamp = Some(Time(now_ts()));
        }
        if meta.generation.is_none() {
            meta.generation = Some(1);
        }
        let rv = self.next_rv();
        meta.resource_version = Some(rv.to_string());
    }

    // ---- pods: low-level commits (history + broadcast), no controllers ----

    /// Appends to the retained history, dropping the oldest beyond `history_len`.
    pub(crate) fn retain(&mut self, ev: Recorded) {
        self.journal.history.push_back(ev);
        while self.journal.history.len() > self.journal.history_len {
            if let Some(old) = self.journal.history.pop_front() {
                self.journal.compacted_rv = old.rv();
            }
        }
    }

    fn record(&mut self, ev: PodEvent) {
        self.retain(Recorded::Pod(Box::new(ev.clone())));
        let change = match ev.kind {
            ChangeKind::Deleted => ApiChange::PodDeleted(Box::new(ev.new.clone())),
            _ => ApiChange::PodUpserted(Box::new(ev.new.clone())),
        };
        let _ = self.journal.watch_tx.send(WatchSignal::Pod(Box::new(ev)));
        let _ = self.journal.change_tx.send(change);
        self.sample_readiness();
    }

    /// Stores the pod with a new resourceVersion; ADDED or MODIFIED.
    pub fn commit_pod(&mut self, mut pod: Pod) -> Pod {
        let rv = self.next_rv();
        pod.metadata.resource_version = Some(rv.to_string());
        let key = key_of(&pod.metadata);
        let old = self.pods.insert(key, pod.clone());
        let kind = if old.is_some() {
            ChangeKind::Modified
        } else {
            ChangeKind::Added
        };
        self.record(PodEvent {
            rv,
            kind,
            old,
            new: pod.clone(),
        });
        pod
    }

    /// Removes the pod for good; DELETED.
    pub fn commit_pod_removal(&mut self, key: &Key) -> Option<Pod> {
        let mut pod = self.pods.remove(key)?;
        let rv = self.next_rv();
        pod.metadata.resource_version = Some(rv.to_string());
        self.record(PodEvent {
            rv,
            kind: ChangeKind::Deleted,
            old: None,
            new: pod.clone(),
        });
        Some(pod)
    }

    /// Drops all retained history: watching from any earlier version answers 410, and
    /// every open watch ends with a 410 ERROR event.
    pub fn compact(&mut self) {
        self.journal.history.clear();
        self.journal.compacted_rv = self.rv;
        let _ = self
            .journal
            .watch_tx
            .send(WatchSignal::Compacted { rv: self.rv });
    }

    // ---- pods: operations (run the controllers afterwards) ----

    /// Creates (or, when the name exists, replaces) a pod, defaulting its status to Pending.
    pub fn create_pod(&mut self, mut pod: Pod) -> Pod {
        let key = key_of(&pod.metadata);
        if self.pods.contains_key(&key) {
            return self.replace_pod(pod);
        }
        self.stamp_new(&mut pod.metadata);
        // Admission (ServiceAccount plugin): every pod gets its kube-api-access volume.
        crate::volumes::projection::inject_kube_api_access(&mut pod);
        if pod.status.is_none() {
            pod.status = Some(PodStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            });
        }
        let pod = self.commit_pod(pod);
        self.settle();
        self.pods.get(&key).cloned().unwrap_or(pod)
    }

    /// Replaces metadata and spec, keeping uid, creation time, deletion state and status.
    pub fn replace_pod(&mut self, mut pod: Pod) -> Pod {
        let key = key_of(&pod.metadata);
        let Some(old) = self.pods.get(&key).cloned() else {
            return self.create_pod(pod);
        };
        pod.metadata.namespace = Some(key.0.clone());
        pod.metadata.uid = old.metadata.uid.clone();
        pod.metadata.creation_timestamp = old.metadata.creation_timestamp.clone();
        pod.metadata.deletion_timestamp = old.metadata.deletion_timestamp.clone();
        pod.metadata.deletion_grace_period_seconds = old.metadata.deletion_grace_period_seconds;
        let gen = old.metadata.generation.unwrap_or(1);
        pod.metadata.generation = Some(if pod.spec != old.spec { gen + 1 } else { gen });
        pod.status = old.status.clone();
        let pod = self.commit_pod(pod);
        self.settle();
        self.pods.get(&key).cloned().unwrap_or(pod)
    }

    /// Sets the status the kubelet reports.
    pub fn set_pod_status(&mut self, key: &Key, status: PodStatus) -> Option<Pod> {
        let mut pod = self.pods.get(key)?.clone();
        let mut status = status;
        // mergePodStatus: the conditions the kubelet does not own stay as the API has them
        let old = pod.status.as_ref().and_then(|s| s.conditions.as_deref());
        if let (Some(old), Some(new)) = (old, status.conditions.as_mut()) {
            crate::kubelet::readiness_gates::keep_foreign(old, new);
        }
        pod.status = Some(status);
        let pod = self.commit_pod(pod);
        self.settle();
        Some(pod)
    }

    /// Removes a pod now.
    pub fn delete_pod_now(&mut self, key: &Key) -> Option<Pod> {
        let pod = self.commit_pod_removal(key)?;
        self.settle();
        Some(pod)
    }

    /// A graceful delete: sets deletionTimestamp (MODIFIED); removes at once when the grace
    /// period is 0, the pod is not bound to a node, or the server auto-finalizes.
    /// Returns the pod as the DELETE call answers it.
    pub fn delete_pod_graceful(&mut self, key: &Key, grace: Option<i64>) -> Option<Pod> {
        let pod = self.graceful_no_settle(key, grace)?;
        self.settle();
        Some(pod)
    }

    pub(crate) fn graceful_no_settle(&mut self, key: &Key, grace: Option<i64>) -> Option<Pod> {
        let mut pod = self.pods.get(key)?.clone();
        let unbound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none_or(|n| n.is_empty());
        let grace = grace
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        if grace <= 0 || unbound || self.behaviour.auto_finalize {
            return self.commit_pod_removal(key);
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return Some(pod);
        }
        pod.metadata.deletion_timestamp = Some(Time(now_ts()));
        pod.metadata.deletion_grace_period_seconds = Some(grace);
        pod.metadata.generation = Some(pod.metadata.generation.unwrap_or(1) + 1);
        Some(self.commit_pod(pod))
    }

    /// Runs the controllers after a change: workloads and ReplicaSets first (they may add
    /// pods), then the disruption controller over every PDB.
    pub fn settle(&mut self) {
        self.reconcile_workloads();
        self.recompute_pdbs();
    }
}
