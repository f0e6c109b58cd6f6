//! The controller's workload write for `reloadlet.io/action: rollout`: exactly one JSON merge
//! patch of a Deployment's, StatefulSet's or DaemonSet's pod template annotations (an Argo
//! Rollout's `spec.restartAt`), built by `core::rollout::restart_patch`, with the workload's
//! pacing record in its own metadata; and the metadata-only patch that records a hold
//! ([`Rollouts::annotate`]). A timeout per call,
//! a few retries of errors that may pass (the patch is idempotent: the same value written
//! twice is one template change), `--dry-run` (the patch is logged, nothing is sent) and the
//! typed [`Outcome`] reported through the [`Reporter`].

use super::applied::Seen;
use super::effect::bounded;
use super::perform::{perform, Effect};
use super::report::Reporter;
use crate::core::model::SourceRef;
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::rollout::WorkloadRef;
use crate::ports::{ObjectRef, PatchError, PodRef, WorkloadPatcher};
use crate::retry::{Attempt, Backoff, Ended, Retries};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One rollout: the patch of one workload for one change.
#[derive(Clone, Debug)]
pub struct RolloutJob {
    pub workload: WorkloadRef,
    pub patch: Value,
    /// `configmap app-config changed`.
    pub cause: String,
    /// What the workload's strategy will do (`RolloutFacts::note`).
    pub strategy_note: &'static str,
    /// One of the pods that asked for the rollout: named in notifications, and the
    /// `regarding` of a `RolloutFailed` Event (`RolloutRequested` is about the workload).
    pub regarding: PodRef,
    /// How many pods of the workload asked for it.
    pub pods: usize,
    /// The asking pods whose `reloadlet.io/applied` records what became of it (the
    /// controller's [`Seen`]), with the sources each asked for.
    pub recorded: Vec<(PodRef, Vec<SourceRef>, Seen)>,
    pub sources: Vec<SourceRef>,
    /// The workload's UID (its Events' `regarding.uid`).
    pub uid: String,
}

/// A failed patch that may pass (timeout, 5xx, 409): again after 1 s, 2 s, 4 s.
const RETRY: Backoff = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(4)).retries(3);

#[derive(Clone)]
pub struct Rollouts {
    inner: Arc<Inner>,
}

struct Inner {
    patcher: Arc<dyn WorkloadPatcher>,
    report: Reporter,
    call_timeout: Duration,
    stop: CancellationToken,
}

impl Rollouts {
    pub fn new(
        patcher: Arc<dyn WorkloadPatcher>,
        report: Reporter,
        call_timeout: Duration,
        stop: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                patcher,
                report,
                call_timeout,
                stop,
            }),
        }
    }

    pub fn reporter(&self) -> &Reporter {
        &self.inner.report
    }

    /// Patches the workload (or logs the patch on `--dry-run`) and reports the outcome.
    pub async fn run(&self, job: &RolloutJob) -> Outcome {
        let inner = &self.inner;
        let w = &job.workload;
        let workload = format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name);
        let rehearsal = || {
            let outcome = Outcome::DryRun;
            tracing::info!(workload = %workload, patch = %job.patch, cause = %job.cause, outcome = outcome.as_str(), "dry-run: would patch the workload's pod template");
            inner.report.count(ActionKind::Rollout, outcome);
            self.note(job, outcome, "");
        };
        let Some(result) = self.send(w, &job.patch, &workload, &rehearsal).await else {
            return Outcome::DryRun;
        };
        let (outcome, note) = match result {
            Ok(()) => (
                Outcome::RolloutRequested,
                format!(
                    "rolled {workload} ({} of its pods asked): {}; {}",
                    job.pods, job.cause, job.strategy_note
                ),
            ),
            Err(e) => (
                Outcome::RolloutFailed,
                format!("could not roll {workload} ({}): {e}", job.cause),
            ),
        };
        if outcome == Outcome::RolloutRequested {
            tracing::info!(workload = %workload, cause = %job.cause, action = "rollout", outcome = outcome.as_str(), "{note}");
        } else {
            tracing::warn!(workload = %workload, cause = %job.cause, action = "rollout", outcome = outcome.as_str(), "{note}");
        }
        self.note(job, outcome, &note);
        if outcome == Outcome::RolloutRequested {
            // Regarding the workload (issue #26: "RolloutRequested (regarding the workload,
            // naming the cause)"): `kubectl describe deployment` lists it.
            let object = ObjectRef {
                api_version: w.kind.api_version().into(),
                kind: w.kind.as_str().into(),
                uid: job.uid.clone(),
                namespace: w.namespace.clone(),
                name: w.name.clone(),
            };
            let report = &inner.report;
            report.record_about(
                &object,
                &job.regarding,
                ActionKind::Rollout,
                outcome,
                note,
                &job.sources,
            );
        } else {
            let report = &inner.report;
            report.record(
                &job.regarding,
                ActionKind::Rollout,
                outcome,
                note,
                &job.sources,
            );
        }
        outcome
    }

    /// `outcome` on each asking pod's record (in progress, or failed with `note`).
    fn note(&self, job: &RolloutJob, outcome: Outcome, note: &str) {
        for (pod, sources, seen) in &job.recorded {
            let report = &self.inner.report;
            report.note_applied(pod, ActionKind::Rollout, outcome, note, sources, seen, None);
        }
    }

    /// A metadata-only merge patch of the workload: its rollout pacing record
    /// (`reloadlet.io/rollout-pacing`, docs/pacing.md), written when a hold begins. It
    /// changes no template, so nothing rolls (and no Event: the hold's own tells). Retried
    /// like the rollout; a failure is logged (a new leader then finds less history);
    /// `--dry-run`: logged, nothing sent.
    pub async fn annotate(&self, w: &WorkloadRef, patch: &Value) {
        let workload = format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name);
        let rehearsal = || {
            tracing::info!(workload = %workload, patch = %patch, "dry-run: would record the workload's rollout pacing");
        };
        match self.send(w, patch, &workload, &rehearsal).await {
            None => {}
            Some(Ok(())) => {
                tracing::debug!(workload = %workload, "rollout pacing recorded on the workload")
            }
            Some(Err(e)) => {
                tracing::warn!(workload = %workload, error = %e, "cannot record the rollout pacing on the workload; a new leader would not know this hold")
            }
        }
    }

    /// One merge patch ([`WorkloadPatch`]): its answer, or `None` when `--dry-run` rehearsed
    /// it (`rehearsal` said so).
    async fn send(
        &self,
        w: &WorkloadRef,
        patch: &Value,
        workload: &str,
        rehearsal: &(dyn Fn() + Sync),
    ) -> Option<Result<(), PatchError>> {
        let inner = &self.inner;
        let mut retries = Retries::new(&RETRY).stopped_by(inner.stop.clone());
        let effect = WorkloadPatch {
            inner,
            w,
            patch,
            rehearsal,
        };
        let ended = perform(&inner.report, &mut retries, &effect, |error, delay| {
            tracing::warn!(workload = %workload, error = %error, retry_in_ms = delay.as_millis() as u64, "workload patch failed; retrying");
        })
        .await;
        match ended {
            Ended::Done(answer) => answer,
            Ended::GaveUp(e) | Ended::Stopped(e) => Some(Err(e)),
        }
    }
}

/// One merge patch of a workload as an [`Effect`]: a timeout per call, errors that may pass
/// (timeout, 5xx, 409) tried again; under `--dry-run` only `rehearsal`'s line.
struct WorkloadPatch<'a> {
    inner: &'a Inner,
    w: &'a WorkloadRef,
    patch: &'a Value,
    rehearsal: &'a (dyn Fn() + Sync),
}

impl Effect for WorkloadPatch<'_> {
    type Done = Option<Result<(), PatchError>>;
    type Error = PatchError;

    async fn attempt(&self) -> Attempt<Self::Done, PatchError> {
        let inner = self.inner;
        match bounded(inner.call_timeout, inner.patcher.patch(self.w, self.patch)).await {
            Err(e @ (PatchError::Other(_) | PatchError::Conflict(_))) => Attempt::Again(e, None),
            answer => Attempt::Done(Some(answer)),
        }
    }

    async fn rehearse(&self) -> Attempt<Self::Done, PatchError> {
        (self.rehearsal)();
        Attempt::Done(None)
    }
}
