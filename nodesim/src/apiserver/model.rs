//! The data every part of the simulated API server shares — object keys, change and
//! watch-event types, the ReplicaSet and PDB entries, UIDs and timestamps — so that the
//! store, the controllers and the HTTP side import it from here and not from each other.

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use rand::Rng;
use std::time::Instant;

/// A change the simulated kubelet (and tests) can follow without polling.
#[derive(Clone, Debug)]
pub enum ApiChange {
    /// A pod was created or changed (including getting a deletionTimestamp).
    PodUpserted(Box<Pod>),
    /// A pod was removed for good.
    PodDeleted(Box<Pod>),
    /// A ConfigMap was created or replaced.
    ConfigMapChanged { namespace: String, name: String },
    /// A Secret was created or replaced.
    SecretChanged { namespace: String, name: String },
}

/// `(namespace, name)`
pub(crate) type Key = (String, String);

/// The type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One pod change, as retained in history and sent to watches.
#[derive(Clone, Debug)]
pub(crate) struct PodEvent {
    pub rv: u64,
    pub kind: ChangeKind,
    /// The pod before the change (for Modified), to tell a watcher it left its selector.
    pub old: Option<Pod>,
    /// The pod after the change (its last state for Deleted).
    pub new: Pod,
}

/// The kinds of object the server keeps, each with its own list/watch endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Resource {
    Pods,
    ConfigMaps,
    Secrets,
    Leases,
    /// `apps/v1` Deployments, StatefulSets, DaemonSets (see [`super::workloads`]).
    Deployments,
    StatefulSets,
    DaemonSets,
    /// `apps/v1` ReplicaSets: served read-only from the emulation's [`ReplicaSetSim`]s.
    ReplicaSets,
}

/// One change of a ConfigMap, Secret or Lease, as retained in history and sent to
/// watches (the objects as JSON: watches only serialize them).
#[derive(Clone, Debug)]
pub(crate) struct ObjEvent {
    pub rv: u64,
    pub kind: ChangeKind,
    pub resource: Resource,
    /// The object before the change (for Modified).
    pub old: Option<serde_json::Value>,
    /// The object after the change (its last state for Deleted).
    pub new: serde_json::Value,
}

/// One retained change of any resource; one history and one resourceVersion counter
/// for all of them, as etcd has.
#[derive(Clone, Debug)]
pub(crate) enum Recorded {
    Pod(Box<PodEvent>),
    Object(ObjEvent),
}

impl Recorded {
    pub fn rv(&self) -> u64 {
        match self {
            Recorded::Pod(e) => e.rv,
            Recorded::Object(e) => e.rv,
        }
    }
}

/// What open watches receive.
#[derive(Clone, Debug)]
pub(crate) enum WatchSignal {
    Pod(Box<PodEvent>),
    Object(Box<ObjEvent>),
    /// History was compacted by `compact()`: every open watch ends with 410 Expired.
    Compacted {
        rv: u64,
    },
}

/// A PDB and when the disruption controller may observe its current generation.
#[derive(Clone, Debug)]
pub(crate) struct PdbEntry {
    pub pdb: PodDisruptionBudget,
    /// Until this instant the controller has not seen the latest generation (lag).
    pub observe_after: Option<Instant>,
    /// A test pinned the status: the controller leaves it alone.
    pub frozen: bool,
}

/// A simulated ReplicaSet.
#[derive(Clone, Debug)]
pub(crate) struct ReplicaSetSim {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub replicas: i32,
    pub template: PodTemplateSpec,
    /// Where its pods run; empty: the server's nodes, spread (see `State::pick_node`).
    pub node_name: String,
    /// The Deployment that controls it (`controller: true`), if any.
    pub owner: Option<OwnerReference>,
    /// `metadata.labels` (a Deployment's ReplicaSet carries `pod-template-hash`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// The resourceVersion it was created at: orders ReplicaSets oldest first.
    pub created_rv: u64,
    /// `metadata.creationTimestamp`.
    pub created_at: Timestamp,
}

/// A random RFC 4122 version-4 UID.
pub(crate) fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// `n` random characters of `[a-z0-9]`.
pub(crate) fn random_suffix(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// `(namespace, name)` of an object's metadata ("default" namespace when missing).
pub(crate) fn key_of(meta: &ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The current time as a Kubernetes timestamp.
pub(crate) fn now_ts() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    let nanos = i32::try_from(d.subsec_nanos()).unwrap_or(0);
    Timestamp::new(secs, nanos).unwrap_or(Timestamp::UNIX_EPOCH)
}
