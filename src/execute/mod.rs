//! The one executor: every effect reloadlet has on a pod goes through here. It owns
//! signalling (with retries while a container restarts), eviction (paced retries, a
//! timeout per call, bounded concurrency), `--dry-run` (decided here and in [`report`]
//! only) and the reporting of each typed [`Outcome`] as a metric and an Event.
//!
//! The HTTP action (`http/`: paced retries, one job per pod, bounded concurrency) is the
//! third kind of effect, with its own outcomes `Reloaded` / `ReloadFailed`. The controller's
//! pod patches (`patch.rs`: the projection nudge, the env baseline) are the fourth.

pub mod applied;
mod coordination;
pub mod drain;
pub mod effect;
pub mod evict;
mod grant_wait;
pub mod http;
mod only_pod;
pub mod patch;
pub mod perform;
pub mod report;
pub mod restart;
pub mod restart_grant;
pub mod rollout;
pub mod signal;

use crate::core::model::{PodInfo, SourceRef};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::PodIndex;
use crate::host::state_file::PendingEviction;
use crate::outbound::notify::Notifier;
use crate::ports::{ContainerProcesses, Delivery, EventSink, Evictor, HttpCaller, PodRef};
use crate::retry::{Attempt, Ended, Retries};
use crate::serve::metrics::Metrics;
use evict::{EvictJob, EvictionSettings, Evictions};
use http::{HttpJob, HttpReloads, HttpSettings};
use perform::{perform, perform_once, Effect};
use report::{Line, Reporter};
use restart::RestartJob;
use signal::{SignalError, SignalJob};
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Mutex;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The edges effects go through (real ones in `main`, fakes in tests).
#[derive(Clone)]
pub struct Deps {
    pub events: Arc<dyn EventSink>,
    pub processes: Arc<dyn ContainerProcesses>,
    pub evictor: Arc<dyn Evictor>,
    /// Reload requests of `reloadlet.io/action: http` pods.
    pub http: Arc<dyn HttpCaller>,
    /// Webhook notifications (`Notifier::disabled()` without `--notify-url`).
    pub notifier: Notifier,
    /// The pods' `reloadlet.io/applied` record (`None`: not written).
    pub record: Option<applied::RecordDeps>,
    /// The drain readiness gate of `action: restart` (`None`: not written).
    pub gate: Option<Arc<dyn crate::ports::GateWriter>>,
}

#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

struct Inner {
    processes: Arc<dyn ContainerProcesses>,
    index: Arc<RwLock<PodIndex>>,
    report: Reporter,
    evictions: Evictions,
    http: HttpReloads,
    /// Signal and HTTP jobs (with their retries) in flight; waited for at shutdown.
    signals: TaskTracker,
    /// Cancelled at shutdown: no more retries; pending evictions are left pending.
    stop: CancellationToken,
    /// When each (pod UID, container) was last restarted (`action: restart`).
    /// (tokio's clock: the one the deferral sleeps on.)
    restarted: Mutex<HashMap<(String, String), tokio::time::Instant>>,
    /// `--restart-spacing`: restarts of one container at least this far apart.
    restart_spacing: Duration,
    /// `--restart-without-grant`: restarts are done without the controller's grant; off,
    /// each waits for it (`restart_grant`).
    restart_without_grant: bool,
    /// The restarts waiting for (or carrying out) the controller's grant.
    requests: Mutex<restart_grant::Requests>,
    /// The pod edge the restart annotations are written through (the one of
    /// `reloadlet.io/applied`; `None`: no pod patches, so no restart can be requested).
    pod_patcher: Option<Arc<dyn crate::ports::Patcher>>,
    /// The key of the request ids (the agent's own, kept in its state file).
    restart_key: std::sync::OnceLock<crate::core::volume_digest::HashKey>,
    /// The controller's key as the agent follows it from its Secret
    /// (`k8s::controller_key::follow`): the controller's env restart requests verify under it.
    controller_key:
        Option<tokio::sync::watch::Receiver<Option<crate::core::volume_digest::HashKey>>>,
    /// Set once the task that looks at granted requests again when that key changes runs.
    controller_key_followed: std::sync::Once,
    /// The controller's Lease, read while a restart request waits (`None`: not read, no
    /// Warning when no controller holds it).
    lease: std::sync::OnceLock<Arc<dyn crate::ports::LeaseReader>>,
    /// Restarts deferred to the end of their crash-loop window: the latest job of each.
    deferred: Mutex<HashMap<(String, String), RestartJob>>,
    /// The drain readiness gate's writes (`None`: not written; a gated pod is restarted
    /// undrained, and says so).
    gate: Option<Arc<dyn crate::ports::GateWriter>>,
    /// Pods whose gate condition was set `True` on sight, until the pod shows it (one write
    /// per pod, not one per update).
    gate_opened: Mutex<HashSet<String>>,
    /// Pods with a drain in progress here.
    draining: drain::Draining,
    /// The async runtime that reports, retries and evicts. The caller of
    /// [`Executor::signal`] may be the hot thread (`agent::hot_thread`), which only signals.
    runtime: tokio::runtime::Handle,
}

impl Executor {
    /// `node`: this node's name (in notifications).
    pub fn new(
        node: &str,
        dry_run: bool,
        eviction: EvictionSettings,
        deps: &Deps,
        metrics: Metrics,
        index: Arc<RwLock<PodIndex>>,
        stop: CancellationToken,
    ) -> Self {
        let report = Reporter::new(
            deps.events.clone(),
            deps.notifier.clone(),
            metrics,
            dry_run,
            node.to_owned(),
        )
        .with_applied(
            deps.record
                .clone()
                .map(|d| applied::AppliedRecorder::start(d, index.clone())),
        );
        let evictions = Evictions::new(
            eviction,
            deps.evictor.clone(),
            report.clone(),
            index.clone(),
            stop.clone(),
        );
        let signals = TaskTracker::new();
        let http = HttpReloads::new(
            HttpSettings::default(),
            deps.http.clone(),
            report.clone(),
            index.clone(),
            stop.clone(),
            signals.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                processes: deps.processes.clone(),
                index,
                report,
                evictions,
                http,
                signals,
                stop,
                restarted: Mutex::default(),
                restart_spacing: crate::core::restart::MIN_SPACING,
                restart_without_grant: false,
                requests: Mutex::default(),
                pod_patcher: deps.record.as_ref().map(|r| r.patcher.clone()),
                restart_key: std::sync::OnceLock::new(),
                controller_key: deps.record.as_ref().map(|r| r.key.clone()),
                controller_key_followed: std::sync::Once::new(),
                lease: std::sync::OnceLock::new(),
                deferred: Mutex::default(),
                gate: deps.gate.clone(),
                gate_opened: Mutex::default(),
                draining: drain::Draining::default(),
                runtime: tokio::runtime::Handle::current(),
            }),
        }
    }

    /// An outcome of no action on a pod's change (an invalid annotation, a refused eviction,
    /// a missing budget …), reported whole: its log line, count and Event.
    pub fn report(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        line: Line<'_>,
    ) {
        let (sources, seen): (&[SourceRef], _) = (&[], &applied::Seen::none());
        let report = &self.inner.report;
        report.said(pod, action, outcome, note, sources, seen, line);
    }

    /// [`Self::report`] of an action paced (deferred until `until`, or held by the flap
    /// breaker) for `sources`, recorded on the pod too.
    #[allow(clippy::too_many_arguments)]
    pub fn report_paced(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
        seen: &applied::Seen,
        until: Option<jiff::Timestamp>,
        line: Line<'_>,
    ) {
        let report = &self.inner.report;
        report.note_applied(pod, action, outcome, &note, sources, seen, until);
        self.report(pod, action, outcome, note, line);
    }

    /// Signals one container of a pod; retried while the container is not running or its
    /// main process cannot be found. Under `--dry-run`, only looks at what the signal would do.
    ///
    /// The hot path: when the container's main process was kept by
    /// [`ContainerProcesses::warm`] (a pidfd and its open status file), the signal is sent
    /// right here, on the caller's thread, and only then is the outcome logged, counted and
    /// published, on the async runtime. Otherwise (nothing kept, the kept process exited,
    /// dry-run) the first attempt runs on a blocking thread of that runtime, as do retries.
    pub fn signal(&self, job: SignalJob) {
        // The first attempt is made here, before any retry (the retries are an `Effect`, run
        // by `perform::perform`): under `--dry-run` it only looks (`Inner::look`, which reports
        // it), and the hot path is skipped.
        let rehearsed = self.inner.report.dry_run();
        let pod = (!rehearsed).then(|| self.inner.pod(&job.pod_uid)).flatten();
        if let Some(pod) = pod {
            let kept = signal::running_container_id(&pod, &job.container)
                .ok()
                .and_then(|id| {
                    self.inner
                        .processes
                        .deliver_kept(&job.pod_uid, id, job.signal, job.check)
                });
            if let Some(delivered) = kept {
                let latency = job.first_seen.elapsed();
                let inner = self.inner.clone();
                let runtime = &self.inner.runtime;
                match delivered {
                    Ok(delivery) => {
                        self.inner.signals.spawn_on(
                            async move { inner.finish(job, &pod, delivery, latency, true) },
                            runtime,
                        );
                    }
                    Err(e) => {
                        let retrying = inner.clone();
                        self.inner
                            .signals
                            .spawn_on(retrying.run_signal(job, e.into()), runtime);
                    }
                }
                return;
            }
        }
        // The first attempt on a blocking thread; a task for the retries only when it failed
        // (most signals need none).
        let inner = self.inner.clone();
        self.inner.signals.spawn_blocking_on(
            move || {
                let first = if rehearsed {
                    inner.look(job)
                } else {
                    inner.deliver(job)
                };
                if let Some((job, error)) = first {
                    let retrying = inner.clone();
                    inner.signals.spawn(retrying.run_signal(job, error));
                }
            },
            &self.inner.runtime,
        );
    }

    /// Spaces restarts of one container `spacing` apart (default
    /// [`crate::core::restart::MIN_SPACING`]). Before the executor is shared.
    pub fn with_restart_spacing(mut self, spacing: Duration) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.restart_spacing = spacing;
        }
        self
    }

    /// Restarts without the controller's grant (`--restart-without-grant`). Before the
    /// executor is shared.
    pub fn with_restart_without_grant(mut self, allowed: bool) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.restart_without_grant = allowed;
        }
        self
    }

    /// Writes the drain readiness gate of `action: restart` pods with `gate`
    /// (docs/restart.md). Before the executor is shared.
    pub fn with_drain_gate(mut self, gate: Arc<dyn crate::ports::GateWriter>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.gate = Some(gate);
        }
        self
    }

    /// Restarts one container of a pod in place (`action: restart`): its stop signal, SIGKILL
    /// after the grace; the kubelet starts it again. A container restarted less than the
    /// crash-loop window ago is deferred to the window's end (one `RestartDeferred` per
    /// deferral; the latest change is the one restarted then). Under `--dry-run`, logs only.
    ///
    /// Without `--restart-without-grant` this waits for the controller's grant
    /// ([`Self::restart_pod`]).
    pub fn restart(&self, job: RestartJob) {
        self.restart_pod(&job.pod_uid.clone(), vec![job]);
    }

    /// The restart of these containers of one pod (one change): with
    /// `--restart-without-grant` each at once ([`Self::restart`]'s spacing); else requested
    /// (`reloadlet.io/restart-request`) and carried out when the controller grants it.
    ///
    /// `reloadlet.io/on-blocked: rollout` and a PodDisruptionBudget that structurally blocks
    /// the pod (no disruption while the workload keeps its size, e.g. one replica under
    /// `minAvailable: 1`): nothing is stopped or requested; Normal `RestartHandedOff`, the controller rolls
    /// the owner surge-first (`crate::controller::rollout`, the same test on the same budgets).
    /// Any other `on-blocked: rollout` pod is requested even with `--restart-without-grant`:
    /// only the controller sees whether it is the only pod of its owner (`only_pod`).
    pub fn restart_pod(&self, pod_uid: &str, jobs: Vec<RestartJob>) {
        if self.inner.restart_handed_off(pod_uid, &jobs) {
            return;
        }
        let inner = self.inner.clone();
        if self.inner.restart_without_grant && !self.inner.leaves_it_to_the_controller(pod_uid) {
            for job in jobs {
                let inner = inner.clone();
                self.inner.signals.spawn_on(
                    async move {
                        inner.restart_container(job, true).await;
                    },
                    &self.inner.runtime,
                );
            }
            return;
        }
        let uid = pod_uid.to_owned();
        self.inner
            .signals
            .spawn_on(inner.request_restart(uid, jobs), &self.inner.runtime);
    }

    /// The key restart request ids are made with (the agent's own, from its state file).
    /// Without one, a key made at the first request (then a request granted before an agent
    /// restart is not recognised after it).
    pub fn use_restart_key(&self, key: crate::core::volume_digest::HashKey) {
        let _ = self.inner.restart_key.set(key);
    }

    /// Reads the controller's Lease while a restart request waits: a Warning
    /// `RestartUncoordinated` when no controller holds it (docs/restart.md).
    pub fn watch_lease(&self, lease: Arc<dyn crate::ports::LeaseReader>) {
        let _ = self.inner.lease.set(lease);
    }

    /// The async runtime effects run on (for work the caller's thread must not do).
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.inner.runtime
    }

    /// Tells structural PodDisruptionBudget blocks from transient ones with these budgets
    /// (`reloadlet.io/on-blocked`).
    pub fn use_budgets(&self, budgets: Arc<RwLock<crate::core::disruption_budgets::BudgetIndex>>) {
        self.inner.evictions.use_budgets(budgets);
    }

    /// Evicts a pod (at most one eviction per pod at a time).
    pub fn evict(&self, job: EvictJob) -> bool {
        self.inner.evictions.request(job)
    }

    /// Sends a pod's reload request (retried while the endpoint is unreachable or busy),
    /// replacing one of the same pod still in progress. Under `--dry-run`, logs it only.
    pub fn http(&self, job: HttpJob) {
        self.inner.http.request(job);
    }

    /// A pod was updated: ends its reload request if a container it is for restarted, and a
    /// long eviction wait if it is terminating.
    pub fn pod_updated(&self, pod: &PodInfo) {
        self.inner.http.pod_updated(pod);
        self.open_gate(pod);
        self.inner.grant_step(pod);
        if pod.terminating {
            self.inner.evictions.pod_gone(&pod.uid);
        }
    }

    /// A pod was deleted: ends its reload request and any eviction wait.
    pub fn pod_deleted(&self, uid: &str) {
        self.inner.http.pod_deleted(uid);
        self.inner
            .gate_opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(uid);
        self.inner.evictions.pod_gone(uid);
    }

    /// A pod that declares the drain readiness gate and has no such condition yet gets it
    /// `True` (else it is never Ready: `core::drain_gate`). Once per pod; under `--dry-run`
    /// logged only.
    fn open_gate(&self, pod: &PodInfo) {
        let Some(gate) = self.inner.gate.clone() else {
            return;
        };
        let mut opened = self
            .inner
            .gate_opened
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let draining = self.inner.draining.holds(&pod.uid);
        let Some(condition) = crate::core::drain_gate::on_sight(pod, draining) else {
            opened.remove(&pod.uid);
            return;
        };
        if !opened.insert(pod.uid.clone()) {
            return;
        }
        let open = OpenGate {
            gate,
            target: PodRef::from(pod),
            condition,
        };
        let inner = self.inner.clone();
        self.inner.signals.spawn_on(
            async move { perform_once(&inner.report, &open).await },
            &self.inner.runtime,
        );
    }

    pub fn pending_evictions(&self) -> Vec<PendingEviction> {
        self.inner.evictions.pending()
    }

    /// Notified when an eviction starts or ends (the pending set, which is persisted,
    /// changed).
    pub fn evictions_changed(&self) -> Arc<tokio::sync::Notify> {
        self.inner.evictions.changed()
    }

    /// At shutdown (after `stop` was cancelled): waits for signals in flight until
    /// `deadline`. Failures are then final (no retries).
    pub async fn drain(&self, deadline: Instant) {
        self.inner.signals.close();
        let _ = tokio::time::timeout_at(deadline.into(), self.inner.signals.wait()).await;
    }
}

/// A container's place in the restart spacing (`Inner::restarted`), taken when its stop
/// begins. Given back (the time of the restart before, or none) unless [`Self::keep`]: a
/// restart that stopped nothing is no restart, and must not defer the next change by a
/// crash-loop window that never began. The kubelet's own back-off counts the container's
/// exits, not attempts to stop it (`pkg/kubelet/kuberuntime/kuberuntime_manager.go`,
/// `doBackOff`: keyed on the last terminated instance of the container).
struct SpacingSlot<'a> {
    restarted: &'a Mutex<HashMap<(String, String), tokio::time::Instant>>,
    key: (String, String),
    before: Option<tokio::time::Instant>,
    kept: bool,
}

impl<'a> SpacingSlot<'a> {
    fn take(
        restarted: &'a Mutex<HashMap<(String, String), tokio::time::Instant>>,
        key: (String, String),
    ) -> Self {
        let before = restarted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), tokio::time::Instant::now());
        Self {
            restarted,
            key,
            before,
            kept: false,
        }
    }

    /// The container was stopped: the restart counts.
    fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for SpacingSlot<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let mut restarted = self.restarted.lock().unwrap_or_else(|e| e.into_inner());
        match self.before {
            Some(at) => restarted.insert(self.key.clone(), at),
            None => restarted.remove(&self.key),
        };
    }
}

/// The drain readiness gate set `True` on sight, as an [`Effect`] (under `--dry-run`,
/// logged only).
struct OpenGate {
    gate: Arc<dyn crate::ports::GateWriter>,
    target: PodRef,
    condition: crate::core::drain_gate::GateCondition,
}

impl Effect for OpenGate {
    type Done = ();
    type Error = Infallible;

    async fn attempt(&self) -> Attempt<(), Infallible> {
        let (target, condition) = (&self.target, &self.condition);
        match self.gate.set(target, condition).await {
            Ok(()) => {
                tracing::info!(pod = %target.full_name(), reason = %condition.message, "readiness gate reloadlet.io/restart-drain set True on sight")
            }
            Err(e) => {
                tracing::warn!(pod = %target.full_name(), error = %e, "could not set the readiness gate reloadlet.io/restart-drain True; the pod is not Ready until it is")
            }
        }
        Attempt::Done(())
    }

    async fn rehearse(&self) -> Attempt<(), Infallible> {
        tracing::info!(pod = %self.target.full_name(), outcome = Outcome::DryRun.as_str(), "dry-run: would set the readiness gate reloadlet.io/restart-drain True");
        Attempt::Done(())
    }
}

/// One container's restart in place as an [`Effect`]: [`Inner::restart_now`], or under
/// `--dry-run` [`Inner::rehearse_restart`]. `true`: its main process was stopped.
struct Restart {
    inner: Arc<Inner>,
    job: RestartJob,
    grantless: bool,
}

impl Effect for Restart {
    type Done = bool;
    type Error = Infallible;

    async fn attempt(&self) -> Attempt<bool, Infallible> {
        let inner = self.inner.clone();
        Attempt::Done(inner.restart_now(self.job.clone(), self.grantless).await)
    }

    async fn rehearse(&self) -> Attempt<bool, Infallible> {
        self.inner.rehearse_restart(&self.job);
        Attempt::Done(false)
    }
}

/// One signal's retries as an [`Effect`], each on a blocking thread: delivered
/// ([`Inner::deliver`]) or, under `--dry-run`, looked at ([`Inner::look`]). Its first
/// attempt ran before (the hot thread's or a blocking thread's: most signals need no retry,
/// and no task); its failure is the effect's first answer. The error says which attempt
/// failed: `true` for the rehearsal's.
struct Signal {
    inner: Arc<Inner>,
    /// The first attempt's failure, not yet answered.
    failed: Mutex<Option<SignalError>>,
    /// The latest attempt's job.
    job: Mutex<SignalJob>,
}

impl Signal {
    fn latest(&self) -> SignalJob {
        self.job.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn step(
        &self,
        attempt: fn(&Inner, SignalJob) -> Option<(SignalJob, SignalError)>,
        rehearsed: bool,
    ) -> Attempt<(), (SignalError, bool)> {
        if let Some(error) = self.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Attempt::Again((error, rehearsed), None);
        }
        let mut next = self.latest();
        next.attempt += 1;
        let inner = self.inner.clone();
        match tokio::task::spawn_blocking(move || attempt(&inner, next)).await {
            Ok(None) => Attempt::Done(()),
            Ok(Some((tried, error))) => {
                *self.job.lock().unwrap_or_else(|e| e.into_inner()) = tried;
                Attempt::Again((error, rehearsed), None)
            }
            Err(e) => {
                tracing::error!(error = %e, "signal attempt panicked");
                Attempt::Done(())
            }
        }
    }
}

impl Effect for Signal {
    type Done = ();
    type Error = (SignalError, bool);

    async fn attempt(&self) -> Attempt<(), (SignalError, bool)> {
        self.step(Inner::deliver, false).await
    }

    async fn rehearse(&self) -> Attempt<(), (SignalError, bool)> {
        self.step(Inner::look, true).await
    }
}

impl Inner {
    /// Restarts one container (spaced by the crash-loop window). `true`: its main process was
    /// stopped.
    async fn restart_one(self: Arc<Self>, job: RestartJob) -> bool {
        self.restart_container(job, false).await
    }

    /// [`Self::restart_one`]; `grantless`: done at once under `--restart-without-grant`, whose
    /// `Restarted` note says when no other pod of the owner runs here (`only_pod`).
    async fn restart_container(self: Arc<Self>, job: RestartJob, grantless: bool) -> bool {
        let restart = Restart {
            inner: self.clone(),
            job,
            grantless,
        };
        perform_once(&self.report, &restart).await
    }

    /// `--dry-run`'s restart: said, nothing stopped.
    fn rehearse_restart(&self, job: &RestartJob) {
        let Some(pod) = self.pod(&job.pod_uid) else {
            tracing::info!(pod_uid = %job.pod_uid, container = %job.container, "pod gone; restart dropped");
            return;
        };
        let message = format!(
            "dry-run: would restart the container {} ({})",
            job.container, job.stop.signal
        );
        let note = "dry-run: the container was not restarted";
        self.said_restart_rehearsed(&pod, job, note, &message);
    }

    /// A rehearsed restart (or its request), reported: `note` on the pod's record, `message`
    /// in the log line.
    fn said_restart_rehearsed(&self, pod: &PodInfo, job: &RestartJob, note: &str, message: &str) {
        let cause = job.cause();
        self.report.said(
            &PodRef::from(pod),
            ActionKind::Restart,
            Outcome::DryRun,
            note.into(),
            &job.sources,
            &job.seen,
            Line::saying(message).cause(&cause),
        );
    }

    /// The restart itself: spaced by the crash-loop window (a change inside it deferred to
    /// its end, the latest job of each container), drained, stopped, reported.
    async fn restart_now(self: Arc<Self>, mut job: RestartJob, grantless: bool) -> bool {
        let key = job.key();
        loop {
            let since = self
                .restarted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .map(|at| at.elapsed());
            let Some(wait) = crate::core::restart::spacing(since, self.restart_spacing) else {
                break;
            };
            let first = self
                .deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), job.clone())
                .is_none();
            if !first {
                // the waiting task restarts with this (latest) job
                return false;
            }
            if let Some(pod) = self.pod(&job.pod_uid) {
                let note = restart::deferred_note(&job, self.restart_spacing, wait);
                tracing::info!(pod = %pod.full_name(), container = %job.container, cause = %job.cause(), action = "restart", outcome = Outcome::RestartDeferred.as_str(), wait_s = wait.as_secs(), "restart deferred");
                self.report.record_seen(
                    &PodRef::from(&*pod),
                    ActionKind::Restart,
                    Outcome::RestartDeferred,
                    note,
                    &job.sources,
                    &job.seen,
                );
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.cancelled() => return false,
            }
            match self
                .deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key)
            {
                Some(latest) => job = latest,
                None => return false,
            }
        }
        let Some(pod) = self.pod(&job.pod_uid) else {
            tracing::info!(pod_uid = %job.pod_uid, container = %job.container, "pod gone; restart dropped");
            return false;
        };
        // Taken before the stop, so that a change meanwhile is deferred, not run alongside;
        // given back when nothing was stopped (`SpacingSlot`).
        let mut slot = SpacingSlot::take(&self.restarted, key);
        let target = PodRef::from(&*pod);
        // while held, the condition False is this agent's own (not reset on sight)
        let held = job
            .stop
            .drain
            .is_some()
            .then(|| self.draining.hold(&job.pod_uid));
        let drain = match (job.stop.drain, &self.gate) {
            (None, _) => drain::Drain::NoGate,
            (Some(_), None) => drain::Drain::Failed("this agent does not write it".into()),
            (Some(wait), Some(gate)) => {
                match drain::take_out(gate.as_ref(), &target, &job.container, wait, &self.stop)
                    .await
                {
                    Ok(Some(d)) => d,
                    // shutdown in the drain: the gate is open again, nothing stopped
                    Ok(None) => return false,
                    Err(_) => {
                        tracing::info!(pod = %pod.full_name(), container = %job.container, "pod gone; restart dropped");
                        return false;
                    }
                }
            }
        };
        // The pod as it is now (after the drain), and its container as it was stopped.
        // Its container not shown running (or its main process not found) is retried as a
        // signal is (`signal::RETRY`): this view of the pod comes from the API watch, which
        // may lag the kubelet (a change taken right after the pod started finds its
        // container still waiting there). Dropped, the change would be lost: it counts as
        // acted on.
        // A container that runs under another container ID at a retry than at the first
        // attempt started anew meanwhile (its process had exited — e.g. stopped by an agent
        // that restarted before it recorded the restart): it read the new config, and a stop
        // now would be a second restart.
        let Some((pod, stopped)) = self.clone().stop_container(&job).await else {
            return false;
        };
        let anew = matches!(stopped, Err(restart::RestartError::StartedAnew));
        let stopped_id = pod
            .containers
            .iter()
            .find(|c| c.name == job.container)
            .and_then(|c| c.container_id.clone());
        if stopped.is_ok() || anew {
            slot.keep();
        }
        if drain.drained() {
            if let (Some(gate), Some(held)) = (self.gate.clone(), held) {
                if stopped.is_ok() || anew {
                    let index = self.clone();
                    self.signals.spawn(drain::bring_back(
                        held,
                        gate,
                        target.clone(),
                        job.container.clone(),
                        stopped_id,
                        job.stop.timeout,
                        self.stop.clone(),
                        move |uid| index.pod(uid),
                    ));
                } else {
                    let message = "the container could not be stopped; the gate is not held";
                    drain::put_back(gate.as_ref(), &target, message).await;
                }
            }
        }
        let alone = match &stopped {
            Ok(_) if grantless => self.alone_note(&pod),
            _ => String::new(),
        };
        let (outcome, note) = match &stopped {
            Ok(s) => (
                Outcome::Restarted,
                restart::restarted_note(&job, s, &drain, &alone),
            ),
            Err(_) if anew => (
                Outcome::Restarted,
                format!(
                    "container {} started anew in the same pod since the change (another container ID), so it reads the new config; not stopped again: {}",
                    job.container,
                    job.cause()
                ),
            ),
            Err(e) => (
                Outcome::RestartFailed,
                format!(
                    "could not restart container {}: {e}; {}",
                    job.container,
                    job.cause()
                ),
            ),
        };
        match &stopped {
            Ok(s) => {
                tracing::info!(pod = %pod.full_name(), container = %job.container, pid = s.pid, killed = s.killed, cause = %job.cause(), action = "restart", outcome = outcome.as_str(), "container stopped; the kubelet starts it again{alone}")
            }
            Err(_) if anew => {
                tracing::info!(pod = %pod.full_name(), container = %job.container, cause = %job.cause(), action = "restart", outcome = outcome.as_str(), "the container started anew since the change; not stopped again")
            }
            Err(e) => {
                tracing::warn!(pod = %pod.full_name(), container = %job.container, cause = %job.cause(), action = "restart", outcome = outcome.as_str(), error = %e, "restart failed")
            }
        }
        self.report.record_seen(
            &PodRef::from(&*pod),
            ActionKind::Restart,
            outcome,
            note,
            &job.sources,
            &job.seen,
        );
        stopped.is_ok() || anew
    }

    /// Stops `job`'s container, retried as a signal is while nothing could be sent
    /// ([`restart::RestartError::nothing_sent`]); the pod as it was then, and how the stop went
    /// ([`restart::RestartError::StartedAnew`]: the container runs under another ID than at
    /// the first attempt). `None`: the pod went away, or shutdown dropped the retry (said).
    async fn stop_container(
        self: Arc<Self>,
        job: &RestartJob,
    ) -> Option<(
        Arc<PodInfo>,
        Result<restart::Stopped, restart::RestartError>,
    )> {
        let mut retries = Retries::new(&signal::RETRY).stopped_by(self.stop.clone());
        // The container's ID at the first attempt.
        let first_id: Mutex<Option<Option<String>>> = Mutex::new(None);
        let ended = retries
            .run(
                || async {
                    let Some(pod) = self.pod(&job.pod_uid) else {
                        return Attempt::Done(None);
                    };
                    let (now_id, running) = restart::shown_id(&pod, &job.container);
                    {
                        let mut first = first_id.lock().unwrap_or_else(|e| e.into_inner());
                        match &*first {
                            None => *first = Some(now_id),
                            Some(Some(was))
                                if running && now_id.as_ref().is_some_and(|now| now != was) =>
                            {
                                return Attempt::Done(Some((
                                    pod,
                                    Err(restart::RestartError::StartedAnew),
                                )));
                            }
                            Some(_) => {}
                        }
                    }
                    let inner = self.clone();
                    let (p, j) = (pod.clone(), job.clone());
                    let stopped = tokio::task::spawn_blocking(move || {
                        restart::stop(inner.processes.as_ref(), &p, &j)
                    })
                    .await
                    .unwrap_or_else(|e| Err(restart::RestartError::Panicked(e.to_string())));
                    match stopped {
                        Err(e) if e.nothing_sent() => Attempt::Again((pod, e), None),
                        stopped => Attempt::Done(Some((pod, stopped))),
                    }
                },
                |(pod, e), delay| {
                    tracing::info!(pod = %pod.full_name(), container = %job.container, error = %e, retry_in_ms = delay.as_millis() as u64, "restart: the container cannot be stopped yet; will retry");
                },
            )
            .await;
        match ended {
            Ended::Done(Some(done)) => Some(done),
            Ended::Done(None) => {
                tracing::info!(pod_uid = %job.pod_uid, container = %job.container, "pod gone while drained; restart dropped");
                None
            }
            Ended::GaveUp((pod, e)) => Some((pod, Err(e))),
            Ended::Stopped(_) => {
                tracing::info!(pod_uid = %job.pod_uid, container = %job.container, "shutting down: restart retry dropped");
                None
            }
        }
    }

    /// [`Executor::restart_pod`]'s hand-off: `true` when the restart was handed to the
    /// controller's rollout (and reported).
    fn restart_handed_off(&self, pod_uid: &str, jobs: &[RestartJob]) -> bool {
        let (Some(first), Some(pod)) = (jobs.first(), self.pod(pod_uid)) else {
            return false;
        };
        let pod_ref = PodRef::from(&*pod);
        let Some((budget, status)) = self.evictions.structural_handoff(&pod_ref) else {
            return false;
        };
        let outcome = Outcome::RestartHandedOff;
        let containers: Vec<&str> = jobs.iter().map(|j| j.container.as_str()).collect();
        tracing::info!(pod = %pod.full_name(), action = "restart", outcome = outcome.as_str(), budget, budget_status = %status.arithmetic(), cause = %first.cause(), "no restart: the budget allows none while the workload keeps its size; the change is left to reloadlet controller's rollout");
        let note = format!(
            "PodDisruptionBudget {budget} needs {} of {} pods healthy: a restart would leave too few Ready; {} is rollout: {} not restarted, reloadlet controller rolls the pod's workload instead (surge-first) ({})",
            status.desired_healthy,
            status.expected_pods,
            crate::core::rollout::ON_BLOCKED,
            containers.join(", "),
            first.cause()
        );
        self.report.record_seen(
            &pod_ref,
            ActionKind::Restart,
            outcome,
            note,
            &first.sources,
            &first.seen,
        );
        true
    }

    fn pod(&self, uid: &str) -> Option<Arc<PodInfo>> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        index.shared(uid)
    }

    /// One attempt, on a blocking thread: `None` when it is over (sent and reported, or the
    /// pod is gone), else the job and the error to retry on.
    fn deliver(&self, job: SignalJob) -> Option<(SignalJob, SignalError)> {
        let pod = self.signalled_pod(&job)?;
        let delivered = signal::running_container_id(&pod, &job.container).and_then(|id| {
            self.processes
                .deliver(&job.pod_uid, id, job.signal, job.check)
                .map_err(SignalError::from)
        });
        let delivery = match delivered {
            Ok(d) => d,
            Err(e) => return Some((job, e)),
        };
        let latency = job.first_seen.elapsed();
        self.finish(job, &pod, delivery, latency, false);
        None
    }

    /// After a signal was delivered (or withheld): the log line, the metrics, the Event.
    /// `hot`: it went through the kept pidfd on the caller's thread (log field `hot_path`).
    fn finish(
        &self,
        job: SignalJob,
        pod: &PodInfo,
        delivery: Delivery,
        latency: Duration,
        hot: bool,
    ) {
        let name = pod.full_name();
        let (outcome, note) = signal::report(&job, &delivery);
        let (pid, process) = (delivery.pid, delivery.status.name.as_str());
        let verdict = format!("{:?}", delivery.verdict);
        if delivery.sent() {
            self.report.latency(ActionKind::Signal, latency);
        }
        let field = outcome.as_str();
        if outcome.event().is_some_and(|e| e.warning) {
            let what = delivery.describe(job.signal);
            tracing::warn!(pod = %name, container = %job.container, pid, process, signal = %job.signal, sent = delivery.sent(), verdict, by_kill = delivery.by_kill, hot_path = hot, cause = %job.cause(), action = "signal", outcome = field, "{what}");
        } else {
            tracing::info!(pod = %name, container = %job.container, pid, process, signal = %job.signal, verdict, by_kill = delivery.by_kill, hot_path = hot, cause = %job.cause(), action = "signal", outcome = field, latency_ms = latency.as_secs_f64() * 1e3, "signal sent");
        }
        let sources = &job.sources;
        let pod_ref = PodRef::from(pod);
        self.report.record_seen(
            &pod_ref,
            ActionKind::Signal,
            outcome,
            note,
            sources,
            &job.seen,
        );
    }

    /// A signal's retries ([`Signal`]) after its failed first attempt (`failed`: on the hot
    /// path, or on a blocking thread): 0.5 s doubling while the container restarts, none at
    /// shutdown; `SignalFailed` once they are used up.
    async fn run_signal(self: Arc<Self>, job: SignalJob, failed: SignalError) {
        let mut retries = Retries::new(&signal::RETRY).stopped_by(self.stop.clone());
        let signal = Signal {
            inner: self.clone(),
            failed: Mutex::new(Some(failed)),
            job: Mutex::new(job),
        };
        let ended = perform(&self.report, &mut retries, &signal, |(error, _), delay| {
            let job = signal.latest();
            tracing::warn!(pod_uid = %job.pod_uid, container = %job.container, signal = %job.signal, attempt = job.attempt, error = %error, retry_in_ms = delay.as_millis() as u64, "signal failed; will retry");
        })
        .await;
        let job = signal.latest();
        match ended {
            Ended::Done(()) => {}
            Ended::GaveUp((error, rehearsed)) => self.give_up(&job, &error, rehearsed),
            Ended::Stopped(_) => {
                tracing::info!(pod_uid = %job.pod_uid, container = %job.container, "shutting down: signal retry dropped");
            }
        }
    }

    /// The pod of a signal's attempt; gone, the signal is dropped (said).
    fn signalled_pod(&self, job: &SignalJob) -> Option<Arc<PodInfo>> {
        let pod = self.pod(&job.pod_uid);
        if pod.is_none() {
            tracing::info!(pod_uid = %job.pod_uid, container = %job.container, "pod gone; signal dropped");
        }
        pod
    }

    /// `--dry-run`'s attempt: logs what the signal would do to the main process (the same
    /// check as a real signal, retried the same way while the container is not running),
    /// and sends nothing.
    fn look(&self, job: SignalJob) -> Option<(SignalJob, SignalError)> {
        let pod = self.signalled_pod(&job)?;
        let seen = signal::running_container_id(&pod, &job.container).and_then(|id| {
            let (main, status) = self.processes.inspect(&job.pod_uid, id)?;
            let verdict = crate::core::disposition::decide(&status, job.signal, job.check);
            let what = crate::core::disposition::describe(&status, main.pid, job.signal, verdict);
            Ok((verdict.sends(), what))
        });
        let (sends, what) = match seen {
            Ok(seen) => seen,
            Err(e) => return Some((job, e)),
        };
        let message = if sends {
            "dry-run: would send signal"
        } else {
            "dry-run: would NOT send signal (SignalNotHandled)"
        };
        let line = format!(
            "{message} {} to container {}: {what}",
            job.signal, job.container
        );
        let cause = job.cause();
        self.report.said(
            &PodRef::from(&*pod),
            ActionKind::Signal,
            Outcome::DryRun,
            message.into(),
            &job.sources,
            &job.seen,
            Line::saying(&line).cause(&cause),
        );
        None
    }

    /// The attempts are used up (`rehearsed`: `--dry-run`'s).
    fn give_up(&self, job: &SignalJob, error: &SignalError, rehearsed: bool) {
        let Some(pod) = self.signalled_pod(job) else {
            return;
        };
        if rehearsed {
            let message = "dry-run: would send signal, but the main process was not found";
            let cause = job.cause();
            self.report.said(
                &PodRef::from(&*pod),
                ActionKind::Signal,
                Outcome::DryRun,
                message.into(),
                &job.sources,
                &job.seen,
                Line::saying(message).cause(&cause).error(error),
            );
            return;
        }
        let outcome = Outcome::SignalFailed;
        tracing::error!(pod = %pod.full_name(), container = %job.container, signal = %job.signal, action = "signal", outcome = outcome.as_str(), error = %error, "signal failed; giving up");
        let note = signal::failed_note(job, error);
        self.report.record_seen(
            &PodRef::from(&*pod),
            ActionKind::Signal,
            outcome,
            note,
            &job.sources,
            &job.seen,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::disposition::SignalCheck;
    use crate::core::model::{ContainerId, ContainerInfo, ContainerKind, ReloadSignal};
    use crate::ports::fake;
    use std::time::Duration;

    mod drain;
    mod only_pod;

    struct World {
        exec: Executor,
        events: Arc<fake::Events>,
        processes: Arc<fake::Processes>,
        registry: prometheus_client::registry::Registry,
        stop: CancellationToken,
    }

    fn pod() -> PodInfo {
        PodInfo {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "web".into(),
            containers: vec![ContainerInfo {
                name: "app".into(),
                kind: ContainerKind::Regular,
                mounts: vec![],
                container_id: ContainerId::parse("containerd://abc"),
                running: true,
                ports: Vec::new(),
            }],
            ..Default::default()
        }
    }

    fn world(dry_run: bool, failures: u32) -> World {
        world_notifying(dry_run, failures, Notifier::disabled())
    }

    fn world_notifying(dry_run: bool, failures: u32, notifier: Notifier) -> World {
        world_with(dry_run, failures, notifier, true)
    }

    fn world_with(dry_run: bool, failures: u32, notifier: Notifier, grantless: bool) -> World {
        let mut index = PodIndex::default();
        index.apply(pod());
        let events = Arc::new(fake::Events::default());
        let processes = Arc::new(fake::Processes::with("abc", 4242));
        *processes.fail.lock().unwrap() = failures;
        let mut registry = prometheus_client::registry::Registry::with_prefix("reloadlet");
        let metrics = Metrics::new(&mut registry);
        let stop = CancellationToken::new();
        let deps = Deps {
            events: events.clone(),
            processes: processes.clone(),
            evictor: Arc::new(fake::Evictor::default()),
            http: Arc::new(fake::Http::default()),
            notifier,
            record: None,
            gate: None,
        };
        let exec = Executor::new(
            "node-1",
            dry_run,
            EvictionSettings::default(),
            &deps,
            metrics.clone(),
            Arc::new(RwLock::new(index)),
            stop.clone(),
        )
        .with_restart_without_grant(grantless);
        World {
            exec,
            events,
            processes,
            registry,
            stop,
        }
    }

    fn job() -> SignalJob {
        SignalJob {
            seen: Default::default(),
            pod_uid: "u1".into(),
            container: "app".into(),
            signal: ReloadSignal::Hup,
            first_seen: Instant::now(),
            attempt: 1,
            check: SignalCheck::On,
            sources: vec![crate::core::model::SourceRef {
                kind: crate::core::model::SourceKind::ConfigMap,
                name: "app".into(),
            }],
        }
    }

    impl World {
        fn count(&self, action: &str, outcome: &str) -> String {
            let text = crate::serve::metrics::encode(&self.registry);
            let series =
                format!("reloadlet_actions_total{{action=\"{action}\",outcome=\"{outcome}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&series))
                .unwrap_or("missing")
                .to_owned()
        }

        async fn settle(&self) {
            self.exec
                .drain(Instant::now() + Duration::from_secs(3600))
                .await;
        }
    }

    fn restart_job(sources: &str) -> RestartJob {
        RestartJob {
            seen: Default::default(),
            pod_uid: "u1".into(),
            container: "app".into(),
            stop: crate::core::restart::StopPlan {
                signal: ReloadSignal::Term,
                grace: Duration::ZERO,
                drain: None,
                timeout: crate::core::restart::DEFAULT_TIMEOUT,
            },
            first_seen: Instant::now(),
            sources: vec![crate::core::model::SourceRef {
                kind: crate::core::model::SourceKind::ConfigMap,
                name: sources.into(),
            }],
        }
    }

    /// Without `--restart-without-grant` (the default) and with no pod edge to request the
    /// grant through, nothing is stopped: a Warning `RestartRefused` says why (the grant
    /// itself: `grant_wait/tests.rs`). The same job with the flag is restarted (the positive
    /// control).
    #[tokio::test(start_paused = true)]
    async fn without_the_grant_or_a_way_to_ask_for_it_a_restart_is_refused() {
        let refused = world_with(false, 0, Notifier::disabled(), false);
        refused.exec.restart(restart_job("app"));
        refused.settle().await;
        assert_eq!(refused.processes.sent(), 0);
        assert_eq!(refused.events.reasons(), ["RestartRefused"]);
        assert_eq!(refused.count("restart", "restart_refused"), "1");
        let granted = world(false, 0);
        granted.exec.restart(restart_job("app"));
        granted.settle().await;
        assert!(granted.processes.sent() > 0);
        assert_eq!(granted.events.reasons(), ["Restarted"]);
    }

    /// Under `--dry-run` a restart that would ask for the controller's grant asks nothing:
    /// counted `dry_run`, not the `RestartRefused` the same job gets for real here (no pod
    /// edge to ask through: the test above, the control).
    #[tokio::test(start_paused = true)]
    async fn dry_run_asks_no_grant_and_counts_dry_run() {
        let w = world_with(true, 0, Notifier::disabled(), false);
        w.exec.restart(restart_job("app"));
        w.settle().await;
        assert_eq!(w.processes.sent(), 0);
        assert_eq!(w.count("restart", "dry_run"), "1");
        assert_eq!(w.count("restart", "restart_refused"), "0");
    }

    #[tokio::test(start_paused = true)]
    async fn dry_run_restarts_nothing_and_counts_dry_run() {
        let w = world(true, 0);
        w.exec.restart(restart_job("app"));
        w.settle().await;
        assert_eq!(w.processes.sent(), 0);
        assert!(w.events.reasons().is_empty());
        assert_eq!(w.count("restart", "dry_run"), "1");
        assert_eq!(w.count("restart", "restarted"), "0");
    }

    #[tokio::test(start_paused = true)]
    async fn changes_inside_the_crash_loop_window_are_deferred_once_and_restarted_once_after() {
        let w = world(false, 0);
        w.exec.restart(restart_job("v2"));
        w.exec.restart(restart_job("v3"));
        w.exec.restart(restart_job("v4"));
        w.settle().await;
        // TERM + KILL (the fake process never exits) for the first change, then once for
        // v3 and v4 together at the end of the window
        let sent: Vec<ReloadSignal> = w
            .processes
            .sent
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, s)| *s)
            .collect();
        assert_eq!(
            sent,
            [
                ReloadSignal::Term,
                ReloadSignal::Kill,
                ReloadSignal::Term,
                ReloadSignal::Kill
            ]
        );
        // (the deferral may be told while the first stop still waits for its process)
        let mut reasons = w.events.reasons();
        reasons.sort();
        assert_eq!(reasons, ["RestartDeferred", "Restarted", "Restarted"]);
        assert_eq!(w.count("restart", "restarted"), "2");
        assert_eq!(w.count("restart", "restart_deferred"), "1");
    }

    /// The agent's view of the pod (the API watch) may lag the kubelet: a change taken right
    /// after the pod started can find its container not shown running yet. The restart is
    /// retried as a signal is (`signal::RETRY`), not dropped: the change is not lost.
    #[tokio::test(start_paused = true)]
    async fn a_restart_waits_for_a_container_the_api_does_not_show_running_yet() {
        let w = world(false, 0);
        let mut lagging = pod();
        lagging.containers[0].running = false;
        w.exec.inner.index.write().unwrap().apply(lagging);
        w.exec.restart(restart_job("v2"));
        // the watch catches up 0.7 s later (after the first retry's 0.5 s)
        tokio::time::sleep(Duration::from_millis(700)).await;
        w.exec.inner.index.write().unwrap().apply(pod());
        w.settle().await;
        assert!(w.processes.sent() > 0, "the container was never stopped");
        assert_eq!(w.events.reasons(), ["Restarted"]);
        assert_eq!(w.count("restart", "restarted"), "1");
        assert_eq!(w.count("restart", "restart_failed"), "0");
    }

    /// The container's process is gone while the API still shows it running (an agent
    /// stopped it and restarted before it wrote `restarted`); at a retry the pod shows it
    /// running under a new container ID: it started anew and read the new config, so it is
    /// not stopped a second time, and the restart is reported done.
    #[tokio::test(start_paused = true)]
    async fn a_container_that_started_anew_during_the_retries_is_not_stopped_again() {
        let w = world(false, 0);
        w.processes.pids.lock().unwrap().remove("abc");
        w.processes.pids.lock().unwrap().insert("def".into(), 4343);
        w.exec.inner.index.write().unwrap().apply(pod());
        w.exec.restart(restart_job("v2"));
        tokio::time::sleep(Duration::from_millis(700)).await;
        let mut anew = pod();
        anew.containers[0].container_id = ContainerId::parse("containerd://def");
        w.exec.inner.index.write().unwrap().apply(anew);
        w.settle().await;
        assert_eq!(w.processes.sent(), 0, "the new container was stopped");
        assert_eq!(w.events.reasons(), ["Restarted"]);
        let note = w.events.0.lock().unwrap()[0].1.note.clone();
        assert!(note.contains("started anew in the same pod"), "{note}");
    }

    /// A restart that stopped nothing is no restart: the next change is not deferred to the
    /// end of a crash-loop window that never began.
    #[tokio::test(start_paused = true)]
    async fn a_failed_restart_does_not_start_the_crash_loop_window() {
        let w = world(false, 0);
        let mut stopped = pod();
        stopped.containers[0].running = false;
        w.exec.inner.index.write().unwrap().apply(stopped);
        w.exec.restart(restart_job("v2"));
        w.settle().await;
        assert_eq!(w.events.reasons(), ["RestartFailed"]);
        assert_eq!(w.processes.sent(), 0);

        // it runs now; the next change restarts it at once
        w.exec.inner.index.write().unwrap().apply(pod());
        w.exec.inner.signals.reopen();
        w.exec.restart(restart_job("v3"));
        w.settle().await;
        assert_eq!(w.events.reasons(), ["RestartFailed", "Restarted"]);
        assert_eq!(w.count("restart", "restart_deferred"), "0");
        assert_eq!(w.count("restart", "restarted"), "1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_is_retried_while_the_container_restarts_then_sent_once() {
        let w = world(false, 3);
        w.exec.signal(job());
        w.settle().await;
        assert_eq!(w.processes.sent(), 1);
        assert_eq!(w.events.reasons(), ["Signaled"]);
        assert_eq!(w.count("signal", "signaled"), "1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_process_is_signalled_on_the_callers_thread_and_reported_after() {
        let w = world(false, 0);
        w.processes
            .kept
            .store(true, std::sync::atomic::Ordering::Relaxed);
        w.exec.signal(job());
        // Sent before `signal` returned: no task, no other thread.
        assert_eq!(w.processes.sent(), 1);
        assert_eq!(
            w.processes.hot.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        w.settle().await;
        assert_eq!(w.events.reasons(), ["Signaled"]);
        assert_eq!(w.count("signal", "signaled"), "1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_hot_attempt_counts_as_the_first_and_is_retried() {
        let w = world(false, 1);
        w.processes
            .kept
            .store(true, std::sync::atomic::Ordering::Relaxed);
        w.exec.signal(job());
        assert_eq!(w.processes.sent(), 0);
        w.settle().await;
        assert_eq!(w.processes.sent(), 1);
        assert_eq!(
            *w.processes.fail.lock().unwrap(),
            0,
            "one failure, one retry"
        );
        assert_eq!(w.events.reasons(), ["Signaled"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_that_keeps_failing_ends_in_one_signal_failed_after_five_attempts() {
        let w = world(false, 100);
        w.exec.signal(job());
        w.settle().await;
        assert_eq!(w.processes.sent(), 0);
        assert_eq!(
            *w.processes.fail.lock().unwrap(),
            100 - signal::MAX_ATTEMPTS
        );
        assert_eq!(w.events.reasons(), ["SignalFailed"]);
        assert_eq!(w.count("signal", "signal_failed"), "1");
    }

    #[tokio::test(start_paused = true)]
    async fn at_shutdown_a_failure_is_final_and_no_retry_is_waited_for() {
        let w = world(false, 100);
        w.stop.cancel();
        w.exec.signal(job());
        w.settle().await;
        assert_eq!(*w.processes.fail.lock().unwrap(), 99, "one attempt only");
        assert_eq!(w.events.reasons(), ["SignalFailed"]);
    }

    #[tokio::test(start_paused = true)]
    async fn dry_run_sends_nothing_publishes_nothing_and_counts_dry_run() {
        let w = world(true, 0);
        w.exec.signal(job());
        w.exec.report(
            &(&pod()).into(),
            ActionKind::None,
            Outcome::InvalidAnnotation,
            "bad".into(),
            Line::note(),
        );
        w.settle().await;
        assert_eq!(w.processes.sent(), 0);
        assert!(w.events.reasons().is_empty());
        assert_eq!(w.count("signal", "dry_run"), "1");
        assert_eq!(w.count("none", "invalid_annotation"), "1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_that_failed_for_good_is_notified_with_its_sources() {
        use crate::core::model::{SourceKind, SourceRef};
        use crate::outbound::notify::{FakePoster, NotifySettings, SecretUrl};
        let settings = NotifySettings {
            urls: vec![SecretUrl::parse("https://hooks.example.com/x").unwrap()],
            ..Default::default()
        };
        let poster = FakePoster::default();
        let registry = &mut prometheus_client::registry::Registry::default();
        let notifier = Notifier::start(
            &settings,
            poster.clone(),
            crate::outbound::notify::NotifyMetrics::new(registry),
            CancellationToken::new(),
        );
        let w = world_notifying(false, 100, notifier);
        let mut job = job();
        job.sources = vec![SourceRef {
            kind: SourceKind::ConfigMap,
            name: "app".into(),
        }];
        w.exec.signal(job);
        w.settle().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while poster.requests().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let requests = poster.requests();
        assert_eq!(requests.len(), 1, "{requests:?}");
        let body = format!("{:?}", requests[0].payload);
        for part in ["SignalFailed", "ns/web", "app", "node-1"] {
            assert!(body.contains(part), "{part} not in {body}");
        }
    }
}
