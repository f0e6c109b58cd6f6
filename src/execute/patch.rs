//! Patches of the controller: on pods the projection nudge and the env baseline, on a
//! ConfigMap/Secret its `reloadlet.io/data-version` (docs/status.md), each exactly one
//! annotation. A timeout per call, bounded concurrency, one re-read and retry after a
//! 404/409 (nudges only), `--dry-run` (nothing is written, the patch is logged) and a typed
//! [`Outcome`] handed back to the feature that asked, reported through the [`Reporter`].

use super::effect::bounded;
use super::perform::{perform_once, Effect};
use super::report::Reporter;
use crate::core::annotations::{ENV_BASELINE, PROJECTION_NUDGE, ROLLOUT_BASELINE};
use crate::core::model::{PodInfo, SourceRef};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pacing::ENV_PACING;
use crate::core::status::data_version::ANNOTATION as DATA_VERSION;
use crate::ports::{PatchError, PatchRequest, PatchTarget, Patcher, PodRef};
use crate::retry::Attempt;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Which of the controller's patches (what is logged and reported).
#[derive(Clone, Debug)]
pub enum PatchKind {
    /// `reloadlet.io/projection-nudge` for a change of `source`. After a 404/409 the pod is
    /// read again and, if it is still the same pod and `still_wanted` holds, patched once
    /// more. A failure is notified (`NudgeFailed`).
    Nudge {
        source: SourceRef,
        still_wanted: fn(&PodInfo, &SourceRef) -> bool,
    },
    /// `reloadlet.io/env-baseline`, conditional on the pod's UID, never retried (a 403 from
    /// RBAC or an admission policy would repeat for every pod): the baseline stays in memory.
    EnvBaseline,
    /// `reloadlet.io/rollout-baseline` of an `action: rollout` pod, as [`Self::EnvBaseline`].
    RolloutBaseline,
    /// `reloadlet.io/env-pacing` of an env consumer whose eviction is held (removed when the
    /// hold ends), as [`Self::EnvBaseline`].
    EnvPacing,
    /// `reloadlet.io/restart-grant` of an `action: restart` pod (the controller's grant of the
    /// agent's request, docs/restart.md), conditional on the pod's UID, never retried here:
    /// the grant feature looks again after a failure.
    RestartGrant,
    /// `reloadlet.io/restart-request` of an env consumer the controller restarts in place
    /// (`reloadlet.io/env-action: restart`, docs/restart.md "Env consumers"), conditional on
    /// the pod's UID, never retried here: the env feature reports the failure.
    RestartRequest,
    /// `reloadlet.io/data-version` of the ConfigMap/Secret `source` (the job's `pod` names
    /// its namespace and name, no uid), conditional on `resource_version`, never retried: a
    /// 409 means its data changed, and the watch brings that change.
    DataVersion {
        source: SourceRef,
        resource_version: Option<String>,
    },
}

#[derive(Clone, Debug)]
pub struct PatchJob {
    pub pod: PodRef,
    pub kind: PatchKind,
    /// The annotation's value; `None`: the annotation is removed.
    pub value: Option<String>,
}

impl PatchJob {
    /// The value as logs and notes show it.
    fn shown(&self) -> &str {
        self.value.as_deref().unwrap_or("(removed)")
    }
}

impl PatchJob {
    fn request(&self) -> PatchRequest {
        let (annotation, uid) = match self.kind {
            PatchKind::Nudge { .. } => (PROJECTION_NUDGE, None),
            PatchKind::EnvBaseline => (ENV_BASELINE, Some(self.pod.uid.clone())),
            PatchKind::RolloutBaseline => (ROLLOUT_BASELINE, Some(self.pod.uid.clone())),
            PatchKind::EnvPacing => (ENV_PACING, Some(self.pod.uid.clone())),
            PatchKind::RestartGrant => (
                crate::core::restart_grant::GRANT,
                Some(self.pod.uid.clone()),
            ),
            PatchKind::RestartRequest => (
                crate::core::restart_grant::REQUEST,
                Some(self.pod.uid.clone()),
            ),
            PatchKind::DataVersion { .. } => (DATA_VERSION, None),
        };
        let target = match &self.kind {
            PatchKind::DataVersion {
                source,
                resource_version,
            } => PatchTarget::Object {
                kind: source.kind,
                resource_version: resource_version.clone(),
            },
            _ => PatchTarget::Pod,
        };
        PatchRequest {
            target,
            namespace: self.pod.namespace.clone(),
            name: self.pod.name.clone(),
            uid,
            annotation,
            value: self.value.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct PatchSettings {
    /// Patches in flight at once.
    pub max_in_flight: usize,
    /// One call may take this long; then it counts as failed.
    pub call_timeout: Duration,
}

impl PatchSettings {
    /// Nudges: every due nudge at once (the scheduler's rate cap paces them).
    pub fn nudges() -> Self {
        Self {
            max_in_flight: Semaphore::MAX_PERMITS,
            call_timeout: Duration::from_secs(10),
        }
    }

    /// Baseline writes: a few at a time.
    pub fn baselines() -> Self {
        Self {
            max_in_flight: 4,
            call_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Clone)]
pub struct Patches {
    inner: Arc<Inner>,
}

struct Inner {
    settings: PatchSettings,
    patcher: Arc<dyn Patcher>,
    report: Reporter,
    permits: Semaphore,
    stop: CancellationToken,
    /// A 403 is logged once until a patch succeeds again.
    forbidden_reported: AtomicBool,
}

impl Patches {
    pub fn new(
        settings: PatchSettings,
        patcher: Arc<dyn Patcher>,
        report: Reporter,
        stop: CancellationToken,
    ) -> Self {
        let permits = Semaphore::new(settings.max_in_flight.clamp(1, Semaphore::MAX_PERMITS));
        Self {
            inner: Arc::new(Inner {
                settings,
                patcher,
                report,
                permits,
                stop,
                forbidden_reported: AtomicBool::new(false),
            }),
        }
    }

    /// Writes `job` on the runtime; `done` gets its outcome (not called when shutdown stops
    /// it first).
    pub fn request(&self, job: PatchJob, done: impl FnOnce(Outcome) + Send + 'static) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let outcome = tokio::select! {
                _ = inner.stop.cancelled() => return,
                outcome = inner.run(&job) => outcome,
            };
            done(outcome);
        });
    }
}

/// One patch as an [`Effect`]: written (after a 404/409 of a nudge, read again and written
/// once more), or under `--dry-run` logged.
struct Patch<'a> {
    inner: &'a Inner,
    job: &'a PatchJob,
    req: PatchRequest,
}

impl Effect for Patch<'_> {
    type Done = Outcome;
    type Error = Infallible;

    async fn attempt(&self) -> Attempt<Outcome, Infallible> {
        let (inner, job, req) = (self.inner, self.job, &self.req);
        let result = match inner.call(req).await {
            Err(PatchError::NotFound | PatchError::Conflict(_))
                if matches!(job.kind, PatchKind::Nudge { .. }) =>
            {
                inner.again(job, req).await
            }
            other => other,
        };
        Attempt::Done(inner.finish(job, result))
    }

    async fn rehearse(&self) -> Attempt<Outcome, Infallible> {
        let (job, req) = (self.job, &self.req);
        let outcome = Outcome::DryRun;
        if let PatchKind::DataVersion { source, .. } = &job.kind {
            tracing::info!(namespace = %job.pod.namespace, object = %source, annotation = req.annotation, value = %job.shown(), outcome = outcome.as_str(), "dry-run: would patch the object's annotation");
        } else {
            tracing::info!(pod = %job.pod.full_name(), annotation = req.annotation, value = %job.shown(), outcome = outcome.as_str(), "dry-run: would patch the pod's annotation");
        }
        Attempt::Done(outcome)
    }
}

impl Inner {
    async fn run(&self, job: &PatchJob) -> Outcome {
        let patch = Patch {
            inner: self,
            job,
            req: job.request(),
        };
        perform_once(&self.report, &patch).await
    }

    /// One call, within the timeout, holding a permit.
    async fn call(&self, req: &PatchRequest) -> Result<(), PatchError> {
        let Ok(_permit) = self.permits.acquire().await else {
            return Err(PatchError::Other("shutting down".into()));
        };
        bounded(self.settings.call_timeout, self.patcher.patch(req)).await
    }

    /// After a 404/409 of a nudge: the pod is read again and, if it is still the same pod
    /// and still wanted, patched once more.
    async fn again(&self, job: &PatchJob, req: &PatchRequest) -> Result<(), PatchError> {
        let PatchKind::Nudge {
            source,
            still_wanted,
        } = &job.kind
        else {
            return Err(PatchError::NotFound);
        };
        let timeout = self.settings.call_timeout;
        let read = bounded(timeout, self.patcher.get(&req.namespace, &req.name)).await?;
        match read {
            Some(pod) if pod.uid == job.pod.uid && still_wanted(&pod, source) => {
                self.call(req).await
            }
            Some(_) | None => Err(PatchError::NotFound),
        }
    }

    /// The outcome of a patch: its log line and, for a failed nudge, its notification.
    fn finish(&self, job: &PatchJob, result: Result<(), PatchError>) -> Outcome {
        let pod = job.pod.full_name();
        let outcome = match &result {
            Ok(()) => Outcome::Patched,
            Err(PatchError::NotFound) => Outcome::PodGone,
            Err(PatchError::Conflict(_)) => Outcome::PatchConflict,
            Err(PatchError::Forbidden(_)) => Outcome::PatchForbidden,
            Err(PatchError::Other(_)) => Outcome::PatchFailed,
        };
        let source = match &job.kind {
            PatchKind::DataVersion { source, .. } => {
                match &result {
                    Ok(()) => {
                        self.forbidden_reported.store(false, Ordering::Relaxed);
                        tracing::debug!(namespace = %job.pod.namespace, object = %source, value = %job.shown(), "published the data version")
                    }
                    // Its data changed since it was read: the watch brings the new version.
                    Err(PatchError::Conflict(_) | PatchError::NotFound) => {
                        tracing::debug!(namespace = %job.pod.namespace, object = %source, "not publishing the data version: the object changed or went away since it was read")
                    }
                    Err(e @ PatchError::Forbidden(_)) => {
                        if !self.forbidden_reported.swap(true, Ordering::Relaxed) {
                            tracing::error!(namespace = %job.pod.namespace, object = %source, error = %e, "patching ConfigMaps/Secrets is forbidden: check the controller's ClusterRole (configmaps patch; secrets patch with --secrets) and admission policy; `reloadlet status` reports its consumers pending until the data version is published");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(namespace = %job.pod.namespace, object = %source, error = %e, "could not publish the data version; it is published with the object's next change")
                    }
                }
                return outcome;
            }
            PatchKind::RestartGrant => {
                match &result {
                    Ok(()) => {
                        self.forbidden_reported.store(false, Ordering::Relaxed);
                        tracing::info!(pod = %pod, grant = %job.shown(), "restart granted")
                    }
                    Err(PatchError::NotFound) => {}
                    Err(e) => {
                        tracing::warn!(pod = %pod, grant = %job.shown(), error = %e, "could not write the restart grant; trying again shortly (check the controller's pods patch permission and admission policy)")
                    }
                }
                return outcome;
            }
            PatchKind::RestartRequest => {
                if result.is_ok() {
                    self.forbidden_reported.store(false, Ordering::Relaxed);
                }
                return outcome;
            }
            PatchKind::EnvBaseline | PatchKind::RolloutBaseline | PatchKind::EnvPacing => {
                if let Err(
                    e @ (PatchError::Conflict(_) | PatchError::Forbidden(_) | PatchError::Other(_)),
                ) = &result
                {
                    let what = if matches!(job.kind, PatchKind::EnvPacing) {
                        "could not write the env pacing record (explain shows it; pacing itself is unaffected)"
                    } else {
                        "could not write the baseline annotation; keeping it in memory (a restart before it is written takes a new baseline)"
                    };
                    tracing::warn!(pod_uid = %job.pod.uid, error = %e, "{what}");
                }
                return outcome;
            }
            PatchKind::Nudge { source, .. } => source,
        };
        let error = match result {
            Ok(()) => {
                self.forbidden_reported.store(false, Ordering::Relaxed);
                tracing::debug!(pod = %pod, value = %job.shown(), "nudged");
                return outcome;
            }
            Err(PatchError::NotFound) => return outcome,
            Err(e) => e,
        };
        match &error {
            PatchError::Conflict(_) => {
                tracing::warn!(pod = %pod, error = %error, "nudge conflicted twice; the kubelet's periodic sync will project the change");
            }
            PatchError::Forbidden(_) => {
                if !self.forbidden_reported.swap(true, Ordering::Relaxed) {
                    tracing::error!(pod = %pod, error = %error, "patching pods is forbidden: check the controller's ClusterRole (pods patch) and admission policies; changes will wait for the kubelet's periodic sync");
                }
            }
            _ => {
                tracing::warn!(pod = %pod, error = %error, "nudge failed; the kubelet's periodic sync will project the change");
            }
        }
        let note = format!(
            "projection nudge {} failed: {error}; the kubelet's periodic sync will project {source}",
            job.shown()
        );
        self.report.publish(
            &job.pod,
            ActionKind::None,
            Outcome::NudgeFailed,
            note,
            std::slice::from_ref(source),
        );
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fake::FakePatcher;
    use crate::ports::fake;
    use crate::serve::metrics::Metrics;

    fn patches(patcher: &FakePatcher, dry_run: bool) -> (Patches, Arc<fake::Events>) {
        let events = Arc::new(fake::Events::default());
        let report = Reporter::new(
            events.clone(),
            crate::outbound::notify::Notifier::disabled(),
            Metrics::new(&mut prometheus_client::registry::Registry::default()),
            dry_run,
            "controller-0".into(),
        );
        let settings = PatchSettings {
            max_in_flight: 1,
            call_timeout: Duration::from_secs(10),
        };
        let p = Patches::new(
            settings,
            Arc::new(patcher.clone()),
            report,
            CancellationToken::new(),
        );
        (p, events)
    }

    fn nudge(value: &str) -> PatchJob {
        PatchJob {
            pod: PodRef {
                uid: "u1".into(),
                namespace: "ns".into(),
                name: "web".into(),
            },
            kind: PatchKind::Nudge {
                source: SourceRef {
                    kind: crate::core::model::SourceKind::ConfigMap,
                    name: "cfg".into(),
                },
                still_wanted: |_, _| true,
            },
            value: Some(value.into()),
        }
    }

    async fn outcome(p: &Patches, job: PatchJob) -> Outcome {
        let (tx, rx) = tokio::sync::oneshot::channel();
        p.request(job, move |o| {
            let _ = tx.send(o);
        });
        rx.await.unwrap()
    }

    fn pod() -> PodInfo {
        PodInfo {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "web".into(),
            ..PodInfo::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_fails_after_its_timeout_and_is_notified() {
        let patcher = FakePatcher::default();
        patcher.put(pod());
        patcher.hang(true);
        let (p, events) = patches(&patcher, false);
        let started = tokio::time::Instant::now();
        assert_eq!(
            outcome(&p, nudge("configmap/cfg@2")).await,
            Outcome::PatchFailed
        );
        assert!(started.elapsed() >= Duration::from_secs(10));
        // No Event for a nudge (its notification only).
        assert!(events.reasons().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn dry_run_writes_nothing() {
        let patcher = FakePatcher::default();
        patcher.put(pod());
        let (p, _) = patches(&patcher, true);
        assert_eq!(outcome(&p, nudge("configmap/cfg@2")).await, Outcome::DryRun);
        let mut baseline = nudge("configmap/cfg=abc");
        baseline.kind = PatchKind::EnvBaseline;
        assert_eq!(outcome(&p, baseline).await, Outcome::DryRun);
        assert!(patcher.patches().is_empty());
        assert!(patcher.baseline_writes().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_baseline_is_conditional_on_the_uid_and_never_re_read() {
        let patcher = FakePatcher::default();
        let (p, _) = patches(&patcher, false);
        let mut job = nudge("configmap/cfg=abc");
        job.kind = PatchKind::EnvBaseline;
        // The pod is gone: one request, no re-read.
        assert_eq!(outcome(&p, job.clone()).await, Outcome::PodGone);
        assert_eq!(patcher.gets(), 0);
        patcher.put(pod());
        assert_eq!(outcome(&p, job).await, Outcome::Patched);
        assert_eq!(
            patcher.baseline_writes(),
            [
                ("ns".into(), "web".into(), "configmap/cfg=abc".into()),
                ("ns".into(), "web".into(), "configmap/cfg=abc".into())
            ]
        );
    }
}
