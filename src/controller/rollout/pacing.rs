//! Pacing of rollouts (docs/pacing.md, issue #28 "for rollout: the same workload"): the one
//! bookkeeping of `core::pacing::book`, keyed by **workload**. Each pod's pacing annotations
//! are read as it arrives (a workload's pods carry its template's); when a batch resolves to a
//! workload, the pacing of its asking pods decides whether the patch runs now, later
//! (debounce, minimum interval, maintenance window — a rollout is disruptive: windows hold it
//! by default) or not while the workload flaps. A pod's own `reloadlet.io/debounce` waits on
//! top of the batch's one-second coalescing; without it the coalescing is the debounce.
//!
//! Held work is the asking pods and their changes; their baselines stay as they were until
//! the patch (the batch is not "handled"), so a held rollout is found again after a restart
//! or a leader change. The state is shared with the batch task that resolves workloads
//! (a plain mutex, never held across an await). [`RolloutFeature`](super::RolloutFeature)
//! drives it (`with_pacing`, `release_held`).

use super::Asking;
use crate::controller::consumer_states::versions::PublishedVersions;
use crate::controller::metrics::PacingShare;
use crate::core::model::PodInfo;
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pacing::{
    ActionClass, Gate, Notice, PacingBook, PacingDefaults, PacingRecord, PacingSpec, PacingSpecs,
    WallClock, ROLLOUT_PACING,
};
use crate::core::rollout::WorkloadRef;
use crate::execute::applied::Seen;
use crate::execute::report::{Line, Reporter};
use crate::ports::PodRef;
use crate::ports::WorkloadApi;
use jiff::Timestamp;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::Notify;

struct Inner {
    /// By pod UID.
    specs: PacingSpecs<String>,
    book: PacingBook<WorkloadRef, Vec<Asking>>,
    /// The pacing error last reported per pod.
    warned: HashMap<String, crate::core::invalid::Invalid>,
    /// Workloads whose last rollout was read back from the API in this term.
    seeded: HashSet<WorkloadRef>,
    /// The pacing record last written on (or read from) each workload.
    records: HashMap<WorkloadRef, PacingRecord>,
    gauges: PacingShare,
}

/// What pacing says of a workload's rollout.
pub(super) enum Admission {
    /// Roll for these pods now, writing this pacing record with the rollout.
    Roll(Vec<Asking>, String),
    /// Held until its time; `Some`: the hold just began with its Event — the record to
    /// write on the workload (one metadata-only patch).
    Held(Option<String>),
    /// An invalid pacing annotation (warned about when the pod was read).
    Refused,
}

pub struct RolloutPacing {
    inner: Mutex<Inner>,
    /// Woken when work is held (a new deadline).
    held: Notify,
}

impl RolloutPacing {
    /// With the flags' defaults, on the runtime's clock from now.
    pub fn with_defaults(defaults: PacingDefaults) -> Self {
        let clock = WallClock::new(
            jiff::Timestamp::now(),
            tokio::time::Instant::now().into_std(),
        );
        Self::new(defaults, clock)
    }

    pub fn new(defaults: PacingDefaults, clock: WallClock) -> Self {
        Self {
            inner: Mutex::new(Inner {
                specs: PacingSpecs::new(defaults, true),
                book: PacingBook::new(clock),
                warned: HashMap::new(),
                seeded: HashSet::new(),
                records: HashMap::new(),
                gauges: PacingShare::default(),
            }),
            held: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the pacing annotations of a pod the feature follows. A bad one of an `action:
    /// rollout` pod: one Warning `InvalidAnnotation` per distinct error (leader only), and
    /// its workload is not rolled until it is fixed. (An `on-blocked: rollout` pod's error is
    /// the agent's to report: it sees the change first and refuses the eviction.) `true`:
    /// they were invalid and are fixed now — what they refused is to be compared again.
    pub fn on_pod(&self, pod: &PodInfo, warn: bool, leader: bool, report: &Reporter) -> bool {
        let mut inner = self.lock();
        let was_invalid = inner.specs.get(pod.uid.as_str()).is_err();
        match inner.specs.read(&pod.uid, &pod.annotations) {
            Ok(()) => {
                inner.warned.remove(&pod.uid);
                return was_invalid;
            }
            Err(message) if warn && leader && inner.warned.get(&pod.uid) != Some(&message) => {
                let outcome = Outcome::InvalidAnnotation;
                let note = format!("no rollout until fixed: {message}");
                let line = Line::saying(
                    "invalid pacing annotation; no rollout of this pod's workload until it is fixed",
                )
                .error(&message);
                let (pod, seen) = (PodRef::from(pod), Seen::none());
                report.said(&pod, ActionKind::None, outcome, note, &[], &seen, line);
                inner.warned.insert(pod.uid.clone(), message);
            }
            Err(_) => {}
        }
        false
    }

    /// Whether the pod's pacing annotations are invalid (its changes are not acted on).
    pub fn refuses(&self, uid: &str) -> bool {
        self.lock().specs.get(uid).is_err()
    }

    pub fn forget_pod(&self, uid: &str) {
        let mut inner = self.lock();
        inner.specs.forget(uid);
        inner.warned.remove(uid);
    }

    /// The first time a workload is paced in a term (the controller started, or this replica
    /// became the leader): its pacing is read back from the API (one GET per workload and
    /// term; a failed one is retried next time) — the workload's own
    /// `reloadlet.io/rollout-pacing` record (its recent rollouts, an open flapping episode,
    /// a deferral: `core::pacing::record`) and the pod template's
    /// `kubectl.kubernetes.io/restartedAt`, which every rollout writes (reloadlet's, `kubectl
    /// rollout restart`) — so a minimum interval still holds, the flap breaker counts the
    /// earlier rollouts, and an episode or a deferral announced before is not announced
    /// again.
    pub async fn seed(&self, workload: &WorkloadRef, workloads: &dyn WorkloadApi) {
        if self.lock().seeded.contains(workload) {
            return;
        }
        let history = match workloads.rollout_history(workload).await {
            Ok(history) => history.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(workload = %name(workload), error = %e, "cannot read the workload's last rollouts; pacing it from what this replica saw");
                return;
            }
        };
        let mut guard = self.lock();
        let inner = &mut *guard;
        inner.seeded.insert(workload.clone());
        let restarted = match history.restarted_at.as_deref().map(str::parse::<Timestamp>) {
            Some(Ok(at)) => Some(at),
            Some(Err(e)) => {
                tracing::debug!(workload = %name(workload), error = %e, "restartedAt is not an RFC 3339 time; ignored for pacing");
                None
            }
            None => None,
        };
        let record = match history.pacing.as_deref().map(PacingRecord::parse) {
            Some(Ok(record)) => Some(record),
            Some(Err(e)) => {
                tracing::debug!(workload = %name(workload), annotation = ROLLOUT_PACING, error = %e, "the workload's rollout pacing record is not ours to read; ignored");
                None
            }
            None => None,
        };
        let now = inner
            .book
            .clock()
            .at(tokio::time::Instant::now().into_std());
        let pacer = inner.book.pacer_mut(workload);
        match record {
            Some(record) => {
                record.restore(pacer, restarted, now);
                inner.records.insert(workload.clone(), record);
            }
            None => {
                if let Some(at) = restarted {
                    pacer.seed(at);
                }
            }
        }
    }

    /// Whether `workload` may be rolled now for `asking` (`fresh`: a new batch, not held work
    /// coming due), and the pacing record to write on the workload with it.
    pub(super) fn admit(
        &self,
        workload: &WorkloadRef,
        asking: Vec<Asking>,
        fresh: bool,
        report: &Reporter,
        versions: &PublishedVersions,
    ) -> Admission {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let spec = match spec_of(&inner.specs, &asking) {
            Ok(spec) => spec,
            Err(message) => {
                tracing::warn!(workload = %name(workload), error = %message, "a pacing annotation of the workload's pods is invalid; nothing rolled");
                return Admission::Refused;
            }
        };
        let sources = sources(&asking);
        let kept = asking.clone();
        let hold = |held: Option<Vec<Asking>>| merge(held.unwrap_or_default(), kept);
        let now = tokio::time::Instant::now().into_std();
        let gate = inner.book.gate(
            workload,
            &spec,
            ActionClass::Disruptive,
            fresh,
            now,
            || sources.clone(),
            hold,
        );
        let counts = inner.book.counts();
        inner.gauges.set(&report.metrics().pacing, counts);
        let pacer = inner.book.pacer_mut(workload);
        let notice = match gate {
            Gate::Act {
                closed_episode,
                held,
            } => {
                if closed_episode {
                    tracing::info!(workload = %name(workload), "the flapping sources were quiet; rolling once and closing the episode");
                }
                let record = PacingRecord::after_action(pacer, spec.flap);
                let value = record.to_value();
                inner.records.insert(workload.clone(), record);
                // What was held for the workload rolls with this batch, once.
                return Admission::Roll(merge(held.unwrap_or_default(), asking), value);
            }
            Gate::Held(notice) => notice,
        };
        // A hold that begins with a Notice is recorded on the workload (once per deferral or
        // episode, with its Event), so a new leader neither forgets nor repeats it.
        let value = notice.as_ref().map(|notice| {
            let previous = inner.records.get(workload);
            let record = PacingRecord::on_hold(previous, pacer, spec.flap, notice);
            let value = record.to_value();
            inner.records.insert(workload.clone(), record);
            value
        });
        drop(guard);
        self.held.notify_one();
        tell(report, versions, workload, &asking, notice);
        Admission::Held(value)
    }

    /// The held rollouts whose time came by `now`.
    pub(super) fn take_due(
        &self,
        now: Instant,
        report: &Reporter,
    ) -> Vec<(WorkloadRef, Vec<Asking>)> {
        let mut inner = self.lock();
        let due = inner.book.take_due(now);
        let counts = inner.book.counts();
        inner.gauges.set(&report.metrics().pacing, counts);
        due
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.lock().book.next_deadline()
    }

    /// Another replica leads now: what this one held is its to find again. Returns the pods
    /// that asked for the held rollouts, so that this replica finds them again too should it
    /// lead again (the tracker must forget it asked for them).
    pub(super) fn clear_held(&self, report: &Reporter) -> Vec<Asking> {
        let mut inner = self.lock();
        let held = inner.book.clear_held().into_iter().flatten().collect();
        inner.seeded.clear();
        inner.records.clear();
        let counts = inner.book.counts();
        inner.gauges.set(&report.metrics().pacing, counts);
        held
    }

    /// Resolves when held work is due (cancel-safe: a wake-up without work is harmless).
    pub async fn due(&self) {
        loop {
            let notified = self.held.notified();
            match self.next_deadline() {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at.into()) => return,
                        () = notified => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

/// The workload's pacing record as a merge patch of its own metadata (docs/pacing.md): a
/// metadata-only change rolls nothing — the Deployment controller starts a new ReplicaSet
/// only for a new pod template (kubernetes `pkg/controller/deployment/sync.go`
/// `getNewReplicaSet`, through `util/deployment_util.go` `FindNewReplicaSet`), a StatefulSet's or DaemonSet's generation moves only with its spec
/// (`pkg/registry/apps/{statefulset,daemonset}/strategy.go`, `PrepareForUpdate`). A
/// Deployment's generation does move ("annotation updates bump the generation because
/// annotations are copied from deployments to their replica sets",
/// `pkg/registry/apps/deployment/strategy.go`), and the annotation is copied to its current
/// ReplicaSet (`CopyDeploymentAnnotationsToReplicaSet`), as Argo Rollouts copies a
/// Rollout's (`utils/annotations`, `copyRolloutAnnotationsToReplicaSet`).
pub(super) fn record_patch(record: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": {ROLLOUT_PACING: record}}})
}

/// The rollout's patch with the pacing record in the same request (no second write).
pub(super) fn with_record(mut patch: serde_json::Value, record: &str) -> serde_json::Value {
    if let Some(p) = patch.as_object_mut() {
        p.insert("metadata".into(), record_patch(record)["metadata"].clone());
    }
    patch
}

/// The workload's pacing: its asking pods' (the template's) — any invalid one refuses.
fn spec_of(
    specs: &PacingSpecs<String>,
    asking: &[Asking],
) -> Result<PacingSpec, crate::core::invalid::Invalid> {
    let mut found = None;
    for a in asking {
        let spec = specs.get(a.pod.uid.as_str()).map_err(str::to_owned)?;
        found.get_or_insert_with(|| spec.clone());
    }
    Ok(found.unwrap_or_else(|| specs.get_or_plain("").clone()))
}

/// Held pods and changes, with `more` merged in (one entry per pod, one change per source).
fn merge(mut held: Vec<Asking>, more: Vec<Asking>) -> Vec<Asking> {
    for a in more {
        match held.iter_mut().find(|h| h.pod.uid == a.pod.uid) {
            Some(h) => {
                for c in a.changes {
                    h.changes.retain(|o| o.source != c.source);
                    h.changes.push(c);
                }
            }
            None => held.push(a),
        }
    }
    held
}

fn sources(asking: &[Asking]) -> String {
    super::list(&super::sources_of(asking))
}

fn name(w: &WorkloadRef) -> String {
    format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name)
}

/// The Event, notification and counter of a deferral or a flapping episode, once each
/// (regarding the first asking pod; the workload is named).
fn tell(
    report: &Reporter,
    versions: &PublishedVersions,
    workload: &WorkloadRef,
    asking: &[Asking],
    notice: Option<Notice>,
) {
    let Some(first) = asking.first() else { return };
    let m = &report.metrics().pacing;
    let workload = name(workload);
    let (outcome, note, until) = match notice {
        None => return,
        Some(Notice::Deferred { until, why }) => {
            m.deferrals.inc();
            let note = format!(
                "rollout of {workload} deferred until {until} ({}); it runs once then: {} changed",
                why.as_str(),
                sources(asking)
            );
            (Outcome::Deferred, note, Some(until))
        }
        Some(Notice::Flapping(r)) => {
            m.flap_episodes.inc();
            let within = humantime::format_duration(r.within);
            let note = format!(
                "{} changed {} times within {within}: holding the rollout of {workload} until it has been quiet for {within}",
                r.source, r.changes
            );
            (Outcome::Flapping, note, None)
        }
    };
    // Every asking pod's record says it is held (until when), not only the Event's pod.
    for (pod, sources, seen) in asking.iter().filter_map(|a| a.seen(versions, until)) {
        report.note_applied(
            &pod,
            ActionKind::Rollout,
            outcome,
            &note,
            &sources,
            &seen,
            until,
        );
    }
    let sources = super::sources_of(asking);
    let (line, seen) = (Line::note(), Seen::none());
    report.said(
        &first.pod,
        ActionKind::Rollout,
        outcome,
        note,
        &sources,
        &seen,
        line,
    );
}
