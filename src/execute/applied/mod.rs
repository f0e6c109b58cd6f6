//! The agent's side of `reloadlet status` (issue #46 §2): after each outcome the executor
//! reports for a pod ([`super::report`]), the pod's `reloadlet.io/applied` record says, per
//! changed ConfigMap/Secret, the data version acted for, when, by which action and what became
//! of it. Written off the hot path, by one task that takes the notes in order: a record never
//! delays an action, and two outcomes of one pod are never written at once.
//!
//! **Which data.** The version is that of the kubelet write each changed volume showed
//! *before* the action: the `..data` target the agent read when it took the swap (or hashed
//! the volume) is pinned with the job ([`Seen`]), and its files are read here, later. The
//! AtomicWriter never changes a `..<timestamp>` directory once `..data` pointed to it, so
//! reading it later reads what was there before the action. A swap between that read and the
//! action makes the record name the older version while the process may have loaded the newer
//! one: `status` then says `pending`, the safe side. Reading the volume *after* the action
//! could name a version newer than the process loaded, and call a pod `current` that is not.
//! When the pinned write is gone (the kubelet wrote again and removed it), the entry has no
//! version (again `pending`).
//!
//! **The key.** Versions are keyed by the controller's key (`core::status::data_version`),
//! which the agent reads from the controller's Secret (`k8s::controller_key::follow`). Until it
//! has it (no controller installed, or not yet readable), entries are written without
//! `version`.
//!
//! **The write.** Nothing when the record, as the pod is known (and with what this writer
//! wrote since), already says the same ([`Applied::record`] answers `false`): no request at
//! all. Otherwise the pod is read now ([`Patcher::meta`]: UID, resourceVersion, annotations),
//! the entries merged per object into the record it carries, and one JSON merge patch of the
//! one annotation sent through [`Patcher`], conditional on the pod's UID and on that
//! resourceVersion ([`PatchTarget::PodAt`]). Two writers share the record (the agent's
//! entries for volumes, the controller's for env evictions and rollouts, on one pod): a 409
//! says the other wrote in between, and the writer reads and merges again (at most
//! [`MAX_CONFLICTS`] times), so neither drops the other's entry. A 404 (the pod is gone) is
//! silent; a 403 is reported by the edge (`Denials`); anything else is tried once more, then
//! logged. Under `--dry-run` the edge sends the patch
//! with `dryRun=All`: checked by the API server (RBAC, admission), persisted nowhere.
//!
//! **The controller's side** ([`AppliedRecorder::controller`], `by: controller`): the same
//! writer, fed from the same report path, for env evictions and rollouts (and a rollout it
//! cannot do for a reason the pod alone does not show). It knows no files:
//! each outcome comes with a [`Known`] (the pod as the controller knew it, and how to tell the
//! version it published for each source when the record is written); a success is not
//! recorded (an evicted pod is gone, a rolled workload's new pods read `current` by their
//! start time), and an outcome without a [`Known`] is not recorded at all.

use super::effect::{bounded, API_CALL_TIMEOUT};
use crate::core::model::{PodInfo, SourceKind, SourceRef, VolumeSpec};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::PodIndex;
use crate::core::status::applied::{Applied, Entry, Recorded, ANNOTATION};
use crate::core::status::data_version::{pairs_of_files, version_of_files, DataVersion};
use crate::core::volume_digest::HashKey;
use crate::host::volume_read::{read_write, DataTarget};
use crate::ports::{PatchError, PatchRequest, PatchTarget, Patcher, PodRef};
use jiff::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use tokio::sync::{mpsc, watch};

/// The `by` of the agent's entries.
pub const BY: &str = "agent";
/// The `by` of the controller's entries.
pub const BY_CONTROLLER: &str = "controller";
/// Notes waiting for the writer; more are dropped (and logged): a record never blocks.
const QUEUE: usize = 1024;
/// Writes of one record refused for a stale resourceVersion before it is given up (each
/// reads the pod again).
const MAX_CONFLICTS: u32 = 4;
/// Most bytes read from one pinned write (a ConfigMap or Secret holds at most 1 MiB; a
/// projected volume may hold several).
const MAX_READ: u64 = 8 << 20;

/// One changed volume as the pod saw it before the action: the kubelet write `..data` named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The volume's name in the pod spec.
    pub volume: String,
    /// The volume's directory on the node.
    pub dir: PathBuf,
    /// Where `..data` pointed.
    pub target: DataTarget,
}

/// What one action was for (cheap to clone): the agent's pins (empty: nothing pinned, entries
/// have no version), or the controller's [`Known`].
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pins: Option<Arc<[Pin]>>,
    known: Option<Arc<Known>>,
}

/// The controller's side (issue #46 §2): it sees API objects, not files, so it hands the pod as
/// it knew it (it keeps no [`PodIndex`] of every pod for the writer) and the data version of
/// each source acted for (`Published::version_for` of the keys the pod reads, from the version
/// it published: `crate::controller::consumer_states::versions`).
pub struct Known {
    pub pod: Arc<PodInfo>,
    /// The versions of the sources as the controller knows them when the record is written
    /// (not when the action was asked for: the publisher may read the new data a moment after
    /// the feature did, and a blocked eviction's next retry then records the version).
    pub versions: Arc<VersionsOf>,
    /// A hold's end (pacing).
    pub until: Option<Timestamp>,
}

/// The data version of each of the sources for the pod (`None` left out).
pub type VersionsOf =
    dyn Fn(&PodInfo, &[SourceRef]) -> BTreeMap<SourceRef, DataVersion> + Send + Sync;

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known")
            .field("pod", &self.pod.uid)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}

impl Seen {
    pub fn new(pins: Vec<Pin>) -> Self {
        Self {
            pins: (!pins.is_empty()).then(|| pins.into()),
            known: None,
        }
    }

    pub fn none() -> Self {
        Self::default()
    }

    /// The controller's action on `known.pod`.
    pub fn known(known: Known) -> Self {
        Self {
            pins: None,
            known: Some(Arc::new(known)),
        }
    }

    fn pins(&self) -> &[Pin] {
        self.pins.as_deref().unwrap_or_default()
    }
}

/// What the writer needs from outside: the pod edge, and the controller's key as it is known
/// (`None` until it is).
#[derive(Clone)]
pub struct RecordDeps {
    pub patcher: Arc<dyn Patcher>,
    pub key: watch::Receiver<Option<HashKey>>,
}

/// One outcome to record.
struct Note {
    pod: PodRef,
    action: ActionKind,
    result: Recorded,
    error: Option<String>,
    until: Option<Timestamp>,
    sources: Vec<SourceRef>,
    seen: Seen,
    at: Timestamp,
}

/// Where the executor's report hands outcomes to be recorded (cheap to clone).
#[derive(Clone)]
pub struct AppliedRecorder {
    tx: mpsc::Sender<Note>,
    /// [`BY`] or [`BY_CONTROLLER`].
    by: &'static str,
}

impl AppliedRecorder {
    /// Starts the writer on the current runtime; it ends when every recorder is dropped.
    pub fn start(deps: RecordDeps, index: Arc<RwLock<PodIndex>>) -> Self {
        Self::start_as(BY, deps, index)
    }

    /// The controller's writer: it records only what comes with its [`Known`] (env evictions
    /// and rollouts), never a success (an evicted pod is gone; a rolled workload's new pods
    /// read `current` by their start time).
    pub fn controller(patcher: Arc<dyn Patcher>) -> Self {
        let (_, key) = watch::channel(None);
        let deps = RecordDeps { patcher, key };
        Self::start_as(BY_CONTROLLER, deps, Arc::default())
    }

    fn start_as(by: &'static str, deps: RecordDeps, index: Arc<RwLock<PodIndex>>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let writer = Writer {
            patcher: deps.patcher,
            key: deps.key,
            index,
            own: HashMap::new(),
            by,
        };
        tokio::spawn(writer.run(rx));
        Self { tx, by }
    }

    /// Records `outcome` of `action` for `sources` (what became of the action; `note`: the
    /// Event's text, kept as the error of a failure). Outcomes that are not about an action
    /// (`Recorded::of` → `None`) and outcomes with no source are not recorded.
    #[allow(clippy::too_many_arguments)]
    pub fn note(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: &str,
        sources: &[SourceRef],
        seen: &Seen,
        until: Option<Timestamp>,
    ) {
        let Some(result) = Recorded::of(outcome) else {
            return;
        };
        if sources.is_empty() {
            return;
        }
        if self.by == BY_CONTROLLER && (seen.known.is_none() || result == Recorded::Applied) {
            return;
        }
        let until = until.or_else(|| seen.known.as_ref().and_then(|k| k.until));
        let note = Note {
            pod: pod.clone(),
            action,
            result,
            error: (result == Recorded::Failed).then(|| note.to_owned()),
            until: until.filter(|_| result == Recorded::Deferred),
            sources: sources.to_vec(),
            seen: seen.clone(),
            at: Timestamp::now(),
        };
        if let Err(e) = self.tx.try_send(note) {
            tracing::warn!(pod = %pod.full_name(), error = %e, "status record not written: its queue is full or closed");
        }
    }
}

struct Writer {
    patcher: Arc<dyn Patcher>,
    key: watch::Receiver<Option<HashKey>>,
    index: Arc<RwLock<PodIndex>>,
    /// Pod UID → the entries this writer wrote last (the pod watch may not show them yet).
    own: HashMap<String, Vec<Entry>>,
    by: &'static str,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Note>) {
        while let Some(note) = rx.recv().await {
            self.write(note).await;
        }
    }

    fn pod(&self, uid: &str) -> Option<Arc<PodInfo>> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        index.shared(uid)
    }

    async fn write(&mut self, note: Note) {
        let known = note.seen.known.clone();
        let pod = self
            .pod(&note.pod.uid)
            .or_else(|| known.as_ref().map(|k| k.pod.clone()));
        let Some(pod) = pod else {
            // Gone: nothing to record on.
            self.own.remove(&note.pod.uid);
            return;
        };
        if known.is_none() {
            let index = self.index.read().unwrap_or_else(|e| e.into_inner());
            self.own.retain(|uid, _| index.get(uid).is_some());
        } else if self.own.len() > QUEUE * 4 {
            // The controller's pods come with the notes: forget the oldest knowledge wholesale
            // (the pod's own record, read next time, says the same but later).
            self.own.clear();
        }
        let key = self.key.borrow().clone();
        let versions = match (&key, note.seen.pins().is_empty()) {
            _ if known.is_some() => known
                .as_ref()
                .map(|k| (k.versions)(&pod, &note.sources))
                .unwrap_or_default(),
            (Some(key), false) => {
                let (key, pod, sources, seen) = (
                    key.clone(),
                    pod.clone(),
                    note.sources.clone(),
                    note.seen.clone(),
                );
                tokio::task::spawn_blocking(move || versions(&key, &pod, &sources, seen.pins()))
                    .await
                    .unwrap_or_default()
            }
            _ => BTreeMap::new(),
        };
        let entries: Vec<Entry> = note
            .sources
            .iter()
            .map(|source| {
                let entry = Entry::new(
                    source,
                    versions.get(source),
                    note.at,
                    self.by,
                    note.action,
                    note.result,
                )
                .with_until(note.until);
                match &note.error {
                    Some(e) => entry.with_error(e),
                    None => entry,
                }
            })
            .collect();
        // As the pod is known (the watch, or the controller's view, and what this writer
        // wrote since): nothing to write, nothing asked of the API server.
        let mut known = record_of(&pod.annotations);
        if let Some(own) = self.own.get(&pod.uid) {
            known.catch_up(own);
        }
        if !entries
            .iter()
            .fold(false, |changed, e| known.record(e.clone()) | changed)
        {
            tracing::debug!(pod = %note.pod.full_name(), "status record already says so; not written");
            return;
        }
        match self.write_at_version(&pod, &entries).await {
            Ok(Written::Patched | Written::AlreadySaid) => {
                let own = self.own.entry(pod.uid.clone()).or_default();
                for entry in entries {
                    own.retain(|e| e.object != entry.object);
                    own.push(entry);
                }
                tracing::debug!(pod = %note.pod.full_name(), action = note.action.as_str(), "status record written");
            }
            Err(PatchError::NotFound) => {
                self.own.remove(&pod.uid);
            }
            // Told by the edge (`Denials`): once, with the rule to add.
            Err(PatchError::Forbidden(_)) => {}
            Err(e) => {
                tracing::warn!(pod = %note.pod.full_name(), error = %e, "status record not written");
            }
        }
    }

    /// Writes `entries` into the record the pod carries *now*: read (UID, resourceVersion,
    /// annotations), merged per object, patched conditional on that resourceVersion. A 409
    /// (someone wrote the pod since: the other writer's entry, a label, the kubelet's status)
    /// reads and merges again, at most [`MAX_CONFLICTS`] times, so no writer's entry for
    /// another object is lost; any other error (an unanswered call: [`API_CALL_TIMEOUT`]) is
    /// tried once more. `NotFound`: the pod is
    /// gone, or another pod has its name.
    async fn write_at_version(
        &self,
        pod: &PodInfo,
        entries: &[Entry],
    ) -> Result<Written, PatchError> {
        let (mut conflicts, mut errors) = (0, 0);
        loop {
            let read = match bounded(
                API_CALL_TIMEOUT,
                self.patcher.meta(&pod.namespace, &pod.name),
            )
            .await
            {
                Ok(Some(read)) if read.uid == pod.uid => read,
                Ok(_) => return Err(PatchError::NotFound),
                Err(e @ (PatchError::NotFound | PatchError::Forbidden(_))) => return Err(e),
                Err(e) => {
                    errors += 1;
                    if errors >= 2 {
                        return Err(e);
                    }
                    continue;
                }
            };
            let mut record = record_of(&read.annotations);
            // Under `--dry-run` nothing persists: the record shows what this writer would
            // have written before.
            if let Some(own) = self.own.get(&pod.uid) {
                record.catch_up(own);
            }
            if !entries
                .iter()
                .fold(false, |changed, e| record.record(e.clone()) | changed)
            {
                return Ok(Written::AlreadySaid);
            }
            let req = PatchRequest {
                target: PatchTarget::PodAt {
                    resource_version: read.resource_version,
                },
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: Some(pod.uid.clone()),
                annotation: ANNOTATION,
                value: Some(record.render()),
            };
            match bounded(API_CALL_TIMEOUT, self.patcher.patch(&req)).await {
                Ok(()) => return Ok(Written::Patched),
                Err(e @ PatchError::Conflict(_)) => {
                    conflicts += 1;
                    if conflicts >= MAX_CONFLICTS {
                        return Err(e);
                    }
                }
                Err(e @ PatchError::Other(_)) => {
                    errors += 1;
                    if errors >= 2 {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// What a conditional write came to.
enum Written {
    Patched,
    /// The pod's record, read now, already said so.
    AlreadySaid,
}

/// The record `annotations` carry; a malformed one (a pod author can write one) is replaced.
fn record_of(annotations: &BTreeMap<String, String>) -> Applied {
    Applied::of_pod(annotations)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The version of each of `sources` the pod saw in its pinned writes (blocking: reads files).
/// A source without a pinned volume, whose write is gone, or whose files cannot be told
/// apart from another source's, has none.
fn versions(
    key: &HashKey,
    pod: &PodInfo,
    sources: &[SourceRef],
    pins: &[Pin],
) -> BTreeMap<SourceRef, DataVersion> {
    let mut read: HashMap<&str, Option<BTreeMap<String, Vec<u8>>>> = HashMap::new();
    let mut out = BTreeMap::new();
    for source in sources {
        let found = pins.iter().find_map(|pin| {
            let spec = pod.volume(&pin.volume)?;
            spec.sources.contains(source).then_some((pin, spec))
        });
        let Some((pin, spec)) = found else { continue };
        let files = read.entry(pin.volume.as_str()).or_insert_with(|| {
            read_write(&pin.dir, &pin.target, MAX_READ)
                .map_err(|e| tracing::debug!(volume = %pin.volume, error = %e, "pinned write not read; no version"))
                .ok()
                .flatten()
        });
        let Some(files) = files else { continue };
        if let Some(version) = version_in(key, &pod.namespace, spec, source, files) {
            out.insert(source.clone(), version);
        }
    }
    out
}

/// The version of `source` among a volume's files (`spec`: the volume in the pod spec).
fn version_in(
    key: &HashKey,
    namespace: &str,
    spec: &VolumeSpec,
    source: &SourceRef,
    files: &BTreeMap<String, Vec<u8>>,
) -> Option<DataVersion> {
    let items = spec
        .source_items
        .iter()
        .find(|(s, _)| s == source)
        .map(|(_, pairs)| pairs.as_slice());
    // Files no ConfigMap/Secret of the volume writes (downwardAPI, token, trust bundle) and
    // those the spec gives to other sources are not this source's.
    let theirs = |path: &str| {
        spec.other_paths.iter().any(|p| p == path)
            || spec
                .source_paths
                .iter()
                .filter(|(s, _)| s != source)
                .any(|(_, paths)| paths.iter().any(|p| p == path))
    };
    let own: BTreeMap<String, Vec<u8>>;
    let files = if items.is_none() {
        own = files
            .iter()
            .filter(|(path, _)| !theirs(path))
            .map(|(p, b)| (p.clone(), b.clone()))
            .collect();
        &own
    } else {
        files
    };
    let whole_sources = spec
        .sources
        .iter()
        .filter(|s| matches!(s.kind, SourceKind::ConfigMap | SourceKind::Secret))
        .filter(|s| {
            !spec.source_items.iter().any(|(i, _)| i == *s)
                && !spec.source_paths.iter().any(|(p, _)| p == *s)
        })
        .count();
    let pairs = pairs_of_files(files, items, whole_sources == 1)?;
    Some(version_of_files(key, namespace, source, pairs))
}

#[cfg(test)]
mod tests;
