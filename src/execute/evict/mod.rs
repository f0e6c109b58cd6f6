//! Eviction jobs: one at most per pod, paced retries while a PodDisruptionBudget says no,
//! bounded concurrency, Events that tell the operator what is going on.
//!
//! A budget that can never allow the eviction while the workload keeps its size (a
//! *structural* block, [`crate::core::disruption_budgets::Block`], known from the PDB watch's
//! index) is told at once and then asked about no more often than every
//! [`EvictionSettings::structural_retry`] (`reloadlet.io/on-blocked: wait`, the default), or
//! not asked at all: the change is left to the controller's rollout (`on-blocked: rollout`,
//! Normal `EvictionHandedOff`). A transient block (a pod still starting, another eviction in
//! flight) is retried as every refusal.

use super::effect::{no_answer, within};
use super::perform::{perform, Effect};
use super::report::{Line, Reporter};
use crate::core::disruption_budgets::{BudgetIndex, BudgetStatus, Coverage};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::PodIndex;
use crate::core::rollout::{self, OnBlocked};
use crate::host::state_file::PendingEviction;
use crate::ports::{EvictOutcome, EvictRequest, Evictor, PodRef};
use crate::retry::{Attempt, Backoff, Ended, Jitter, Retries, RetryAfter};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct EvictionSettings {
    pub max_in_flight: usize,
    /// First retry delay after a refusal (doubles with jitter up to `max_backoff`).
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// `EvictionBlocked` / `EvictionFailed` are repeated at most this often per pod.
    pub warn_every: Duration,
    /// One eviction call may take this long (it holds one of `max_in_flight` permits
    /// meanwhile); then it counts as failed and is retried.
    pub call_timeout: Duration,
    /// While a budget blocks the eviction structurally (`reloadlet.io/on-blocked: wait`), it
    /// is asked again no more often than this (sooner only once the budget changes so that
    /// the block is no longer structural).
    pub structural_retry: Duration,
}

impl EvictionSettings {
    /// Doubling from `initial_backoff` to `max_backoff`, without end, ±20 % (backon's own
    /// jitter would only lengthen them, by up to 100 %), a `Retry-After` obeyed.
    fn backoff(&self) -> Backoff {
        Backoff::doubling(self.initial_backoff, self.max_backoff)
            .jitter(Jitter::Spread)
            .retry_after(RetryAfter::Obeyed)
    }
}

impl Default for EvictionSettings {
    fn default() -> Self {
        Self {
            max_in_flight: 10,
            initial_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(120),
            warn_every: Duration::from_secs(300),
            call_timeout: Duration::from_secs(30),
            structural_retry: Duration::from_secs(300),
        }
    }
}

#[derive(Clone, Debug)]
pub struct EvictJob {
    pub pod: PodRef,
    pub cause: String,
    /// When the swap was seen (latency metric); `None` for jobs resumed after a restart.
    pub first_seen: Option<std::time::Instant>,
    /// The ConfigMaps/Secrets whose change it is for (empty for resumed jobs: only `cause`
    /// is persisted).
    pub sources: Vec<crate::core::model::SourceRef>,
    /// The writes of the changed volumes it is for (the pod's status record).
    pub seen: crate::execute::applied::Seen,
}

#[derive(Clone)]
pub struct Evictions {
    inner: Arc<Inner>,
}

struct Inner {
    settings: EvictionSettings,
    evictor: Arc<dyn Evictor>,
    report: Reporter,
    index: Arc<RwLock<PodIndex>>,
    /// The PodDisruptionBudgets, once the agent follows them (tells structural blocks).
    budgets: OnceLock<Arc<RwLock<BudgetIndex>>>,
    permits: Semaphore,
    cancel: CancellationToken,
    /// Pod UID → the job in progress.
    jobs: Mutex<HashMap<String, EvictJob>>,
    /// Pod UID → cancelled when the pod is deleted or starts terminating (ends a long wait
    /// on a structural block at once).
    ends: Mutex<HashMap<String, CancellationToken>>,
    /// Woken when a job starts or ends (what is persisted changed).
    changed: Arc<tokio::sync::Notify>,
    /// The async runtime eviction tasks run on (the caller may be the hot thread, which
    /// runs no eviction).
    runtime: tokio::runtime::Handle,
}

impl Evictions {
    pub fn new(
        settings: EvictionSettings,
        evictor: Arc<dyn Evictor>,
        report: Reporter,
        index: Arc<RwLock<PodIndex>>,
        cancel: CancellationToken,
    ) -> Self {
        let permits = Semaphore::new(settings.max_in_flight.max(1));
        Self {
            inner: Arc::new(Inner {
                settings,
                evictor,
                report,
                index,
                budgets: OnceLock::new(),
                permits,
                cancel,
                jobs: Mutex::default(),
                ends: Mutex::default(),
                changed: Arc::default(),
                runtime: tokio::runtime::Handle::current(),
            }),
        }
    }

    /// Tells structural blocks from transient ones with these budgets (kept by the PDB
    /// watch). Without them every refusal is retried as a transient one.
    /// `reloadlet.io/on-blocked: rollout` on the pod and a budget that structurally blocks
    /// disrupting it (an eviction's test, asked for `action: restart` too): the budget's name
    /// and status; `None`: act as usual.
    pub fn structural_handoff(&self, pod: &PodRef) -> Option<(String, BudgetStatus)> {
        self.inner.structural_handoff(pod)
    }

    pub fn use_budgets(&self, budgets: Arc<RwLock<BudgetIndex>>) {
        if self.inner.budgets.set(budgets).is_err() {
            tracing::debug!("eviction budgets already set; keeping the first");
        }
    }

    /// The pod was deleted or is terminating: a wait on a structural block ends at once (the
    /// job then sees the pod gone).
    pub fn pod_gone(&self, uid: &str) {
        let ends = self.inner.ends.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(end) = ends.get(uid) {
            end.cancel();
        }
    }

    /// Starts evicting `job.pod` unless an eviction of that pod is already pending: a change
    /// that arrives meanwhile is served by the same eviction.
    pub fn request(&self, job: EvictJob) -> bool {
        {
            let mut jobs = self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
            if jobs.contains_key(&job.pod.uid) {
                tracing::info!(pod = %full(&job.pod), cause = %job.cause, "eviction already pending for this pod; not queueing another");
                return false;
            }
            jobs.insert(job.pod.uid.clone(), job.clone());
            self.inner
                .ends
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(job.pod.uid.clone(), CancellationToken::new());
            self.inner
                .report
                .metrics()
                .evictions_pending
                .set(jobs.len() as i64);
        }
        self.inner.changed.notify_one();
        let inner = self.inner.clone();
        self.inner.runtime.spawn(async move {
            let uid = job.pod.uid.clone();
            tokio::select! {
                _ = inner.cancel.cancelled() => {
                    tracing::info!(pod = %full(&job.pod), "shutting down: eviction left pending");
                    return; // keep it in `jobs`, so it is persisted
                }
                _ = inner.run(&job) => {}
            }
            inner
                .ends
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&uid);
            let mut jobs = inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
            jobs.remove(&uid);
            inner
                .report
                .metrics()
                .evictions_pending
                .set(jobs.len() as i64);
            drop(jobs);
            inner.changed.notify_one();
        });
        true
    }

    pub fn pending(&self) -> Vec<PendingEviction> {
        let jobs = self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<PendingEviction> = jobs
            .values()
            .map(|j| PendingEviction {
                uid: j.pod.uid.clone(),
                namespace: j.pod.namespace.clone(),
                name: j.pod.name.clone(),
                cause: j.cause.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.uid.cmp(&b.uid));
        out
    }

    /// Notified when an eviction starts or ends.
    pub fn changed(&self) -> Arc<tokio::sync::Notify> {
        self.inner.changed.clone()
    }

    pub fn is_pending(&self, uid: &str) -> bool {
        self.inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(uid)
    }
}

/// One eviction attempt as an [`Effect`]: is it still wanted, may it be asked at all (a
/// structural block and `on-blocked: rollout`), then the call within its timeout and one of
/// the [`EvictionSettings::max_in_flight`] permits; under `--dry-run` the same call with
/// `dryRun=All`, so the API server checks it (budgets included) and evicts nothing. A
/// refusal that may pass is tried again by [`perform`]'s loop; what ends that loop is
/// [`Settled`].
struct EvictAttempt<'a> {
    inner: &'a Inner,
    pod: &'a PodRef,
    /// Calls made (each held a permit).
    calls: AtomicU32,
}

/// How an eviction's attempts ended.
enum Settled {
    /// Allowed (`rehearsed`: `--dry-run`'s, which the API server only checked).
    Evicted { rehearsed: bool },
    /// The pod is already gone or was replaced (404, or 409 on its UID).
    Gone,
    /// Not needed any more: why.
    Unwanted(&'static str),
    /// `on-blocked: rollout` and a structural block: no eviction is sent.
    HandedOff {
        budget: String,
        status: BudgetStatus,
    },
    /// A budget that can never allow it while the workload keeps its size (`on-blocked:
    /// wait`): asked again only after [`EvictionSettings::structural_retry`], or once the
    /// budgets change.
    Structural {
        budget: String,
        status: BudgetStatus,
        cause: String,
        retry_after: Option<Duration>,
    },
}

/// A refusal or failure that [`perform`] tries again.
enum Refused {
    /// A budget said no for now (429).
    Blocked { cause: String },
    /// Any other answer, or none in time: will not pass soon (the delays go to the cap).
    Failed { code: Option<u16>, message: String },
}

impl EvictAttempt<'_> {
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }

    async fn once(&self, dry_run: bool) -> Attempt<Settled, Refused> {
        let (inner, pod) = (self.inner, self.pod);
        if let Err(why) = inner.still_wanted(pod) {
            return Attempt::Done(Settled::Unwanted(why));
        }
        // `on-blocked: rollout` and a block known before asking: no eviction at all.
        if let Some((budget, status)) = inner.structural_handoff(pod) {
            return Attempt::Done(Settled::HandedOff { budget, status });
        }
        let req = EvictRequest {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            dry_run,
        };
        let answer = {
            let Ok(_permit) = inner.permits.acquire().await else {
                return Attempt::Done(Settled::Unwanted("the agent is shutting down"));
            };
            self.calls.fetch_add(1, Ordering::Relaxed);
            let timeout = inner.settings.call_timeout;
            within(timeout, inner.evictor.evict(&req), |t| {
                EvictOutcome::Failed {
                    code: None,
                    message: no_answer(t),
                }
            })
            .await
        };
        match answer {
            EvictOutcome::Evicted => Attempt::Done(Settled::Evicted { rehearsed: dry_run }),
            EvictOutcome::Gone => Attempt::Done(Settled::Gone),
            EvictOutcome::Blocked { cause, retry_after } => {
                let (mode, coverage) = inner.situation(pod);
                let Some((budget, status)) = coverage.structural() else {
                    return Attempt::Again(Refused::Blocked { cause }, retry_after);
                };
                let budget = budget.to_owned();
                Attempt::Done(match mode {
                    OnBlocked::Rollout => Settled::HandedOff { budget, status },
                    OnBlocked::Wait => Settled::Structural {
                        budget,
                        status,
                        cause,
                        retry_after,
                    },
                })
            }
            EvictOutcome::Failed { code, message } => {
                Attempt::AgainAtCap(Refused::Failed { code, message })
            }
        }
    }
}

impl Effect for EvictAttempt<'_> {
    type Done = Settled;
    type Error = Refused;

    async fn attempt(&self) -> Attempt<Settled, Refused> {
        self.once(false).await
    }

    async fn rehearse(&self) -> Attempt<Settled, Refused> {
        self.once(true).await
    }
}

/// What one eviction job has told the operator so far: its Events and notifications come
/// at most every [`EvictionSettings::warn_every`].
#[derive(Default)]
struct Told {
    last_warning: Option<Instant>,
    /// Since when a PodDisruptionBudget has refused it (for notifications).
    first_refusal: Option<Instant>,
    /// The last refusal was a structural block (already told).
    structural: bool,
}

impl Told {
    /// Whether the Event and notification are due now (`anyway`, or none for `every`);
    /// when they are, they count as told from now.
    fn warning_due(&mut self, every: Duration, anyway: bool) -> bool {
        let due = anyway || self.last_warning.is_none_or(|t| t.elapsed() >= every);
        if due {
            self.last_warning = Some(Instant::now());
        }
        due
    }

    fn refused_since(&mut self) -> Instant {
        *self.first_refusal.get_or_insert_with(Instant::now)
    }
}

fn full(p: &PodRef) -> String {
    format!("{}/{}", p.namespace, p.name)
}

impl Inner {
    /// Is the pod still this node's, with the same UID, and not already going away?
    fn still_wanted(&self, pod: &PodRef) -> Result<(), &'static str> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        match index.get(&pod.uid) {
            None => Err("the pod is gone"),
            Some(p) if p.terminating => Err("the pod is already terminating"),
            Some(_) => Ok(()),
        }
    }

    /// The pod's `reloadlet.io/on-blocked` (an invalid value was refused before the job
    /// started; one that became invalid since counts as the default, `wait`) and the budgets
    /// that select it.
    fn situation(&self, pod: &PodRef) -> (OnBlocked, Coverage) {
        let (mode, labels) = {
            let index = self.index.read().unwrap_or_else(|e| e.into_inner());
            match index.get(&pod.uid) {
                Some(p) => (
                    rollout::on_blocked(&p.annotations).map_or(OnBlocked::Wait, |(m, _)| m),
                    p.labels.clone(),
                ),
                None => return (OnBlocked::Wait, Coverage::None),
            }
        };
        let coverage = match self.budgets.get() {
            Some(budgets) => budgets
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .coverage(&pod.namespace, &labels),
            None => Coverage::None,
        };
        (mode, coverage)
    }

    /// `reloadlet.io/on-blocked: rollout` on the pod and a budget that structurally blocks
    /// disrupting it (the same test as an eviction's): the budget's name and status.
    fn structural_handoff(&self, pod: &PodRef) -> Option<(String, BudgetStatus)> {
        match self.situation(pod) {
            (OnBlocked::Rollout, coverage) => coverage.structural().map(|(n, s)| (n.to_owned(), s)),
            (OnBlocked::Wait, _) => None,
        }
    }

    async fn run(&self, job: &EvictJob) {
        let pod = &job.pod;
        let attempt = EvictAttempt {
            inner: self,
            pod,
            calls: AtomicU32::new(0),
        };
        let mut retries = Retries::new(&self.settings.backoff());
        let mut told = Told::default();
        loop {
            let ended = perform(&self.report, &mut retries, &attempt, |refused, _| {
                self.refused(job, refused, attempt.calls(), &mut told)
            })
            .await;
            let settled = match ended {
                Ended::Done(settled) => settled,
                // The policy has no limit, no deadline and no stop (cancelling is the
                // caller's, which keeps the job pending): not reached, but if it were, the
                // refusal is told and asked again after the cap.
                Ended::GaveUp(refused) | Ended::Stopped(refused) => {
                    self.refused(job, &refused, attempt.calls(), &mut told);
                    retries.wait(self.settings.max_backoff).await;
                    continue;
                }
            };
            match settled {
                Settled::Evicted { rehearsed } => {
                    return self.evicted(job, attempt.calls(), rehearsed)
                }
                Settled::Gone => {
                    tracing::info!(pod = %full(pod), "pod already gone or replaced; eviction done");
                    return;
                }
                Settled::Unwanted(why) => {
                    tracing::info!(pod = %full(pod), reason = why, "eviction no longer needed");
                    return;
                }
                Settled::HandedOff { budget, status } => {
                    return self.handed_off(job, &budget, status, attempt.calls())
                }
                Settled::Structural {
                    budget,
                    status,
                    cause,
                    retry_after,
                } => {
                    let every = self.settings.structural_retry;
                    self.blocked_for_good(job, &budget, status, &cause, attempt.calls(), &mut told);
                    let delay = retries
                        .next(retry_after)
                        .unwrap_or(self.settings.max_backoff)
                        .max(every);
                    self.wait_structural(pod, delay).await;
                }
            }
        }
    }

    /// A structural block (`on-blocked: wait`): counted and logged each time; the Event
    /// and notification when it is new, then every [`EvictionSettings::warn_every`].
    fn blocked_for_good(
        &self,
        job: &EvictJob,
        budget: &str,
        status: BudgetStatus,
        cause: &str,
        attempts: u32,
        told: &mut Told,
    ) {
        let pod = &job.pod;
        let since = told.refused_since();
        let outcome = Outcome::EvictionBlocked;
        self.report.count(ActionKind::Evict, outcome);
        let every = self.settings.structural_retry;
        tracing::warn!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), budget, cause = %cause, attempts, budget_status = %status.arithmetic(), "PodDisruptionBudget can never allow the eviction while the workload keeps its size; will retry every {}", humantime::format_duration(every));
        let new = !told.structural;
        if told.warning_due(self.settings.warn_every, new) {
            let note = format!(
                "{}; will retry every {}: {cause} ({})",
                status.structural_note(budget),
                humantime::format_duration(every),
                job.cause
            );
            self.report
                .blocked(pod, note, &job.sources, &job.seen, since.elapsed());
        }
        told.structural = true;
    }

    /// A refusal or failure about to be tried again: counted and logged each time; the
    /// Event and notification at most every [`EvictionSettings::warn_every`]; the status
    /// record follows each refusal.
    fn refused(&self, job: &EvictJob, refused: &Refused, attempts: u32, told: &mut Told) {
        let pod = &job.pod;
        let warn_now = told.warning_due(self.settings.warn_every, false);
        match refused {
            Refused::Blocked { cause } => {
                let since = told.refused_since();
                told.structural = false;
                let outcome = Outcome::EvictionBlocked;
                self.report.count(ActionKind::Evict, outcome);
                tracing::info!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), cause = %cause, attempts, "PodDisruptionBudget refused the eviction; will retry");
                let note = format!("eviction refused, will retry: {cause} ({})", job.cause);
                if warn_now {
                    self.report
                        .blocked(pod, note, &job.sources, &job.seen, since.elapsed());
                } else {
                    // The record follows each retry (a write only when it changed: e.g.
                    // the data version the controller published after the first refusal),
                    // though the Event and notification wait for `warn_every`.
                    self.report.note_applied(
                        pod,
                        ActionKind::Evict,
                        outcome,
                        &note,
                        &job.sources,
                        &job.seen,
                        None,
                    );
                }
            }
            Refused::Failed { code, message } => {
                let outcome = Outcome::EvictionFailed;
                self.report.count(ActionKind::Evict, outcome);
                tracing::warn!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), code, error = %message, attempts, "eviction failed; will retry");
                if warn_now {
                    let note = format!("eviction failed, will retry: {message} ({})", job.cause);
                    self.report.publish_seen(
                        pod,
                        ActionKind::Evict,
                        outcome,
                        note,
                        &job.sources,
                        &job.seen,
                    );
                }
            }
        }
    }

    /// Waits `delay` while a budget blocks the pod's eviction structurally; ends sooner when
    /// the budgets change so that the block is no longer structural (scaled up, the budget
    /// relaxed or deleted), the pod's `on-blocked` turned to `rollout`, or the pod went away.
    async fn wait_structural(&self, pod: &PodRef, delay: Duration) {
        let deadline = tokio::time::Instant::now() + delay;
        let end = self
            .ends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pod.uid)
            .cloned()
            .unwrap_or_default();
        let Some(budgets) = self.budgets.get() else {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                _ = end.cancelled() => {}
            }
            return;
        };
        let mut versions = budgets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .subscribe();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = end.cancelled() => return,
                changed = versions.changed() => {
                    if changed.is_err() {
                        tokio::select! {
                            _ = tokio::time::sleep_until(deadline) => {}
                            _ = end.cancelled() => {}
                        }
                        return;
                    }
                    let (mode, coverage) = self.situation(pod);
                    if coverage.structural().is_none() || mode == OnBlocked::Rollout {
                        tracing::info!(pod = %full(pod), "the PodDisruptionBudget no longer blocks the eviction for good; asking again");
                        return;
                    }
                }
            }
        }
    }

    /// `on-blocked: rollout` and a structural block: nothing (more) is sent; the change is
    /// the controller's (it rolls the pod's workload).
    fn handed_off(&self, job: &EvictJob, budget: &str, status: BudgetStatus, attempts: u32) {
        let pod = &job.pod;
        let outcome = Outcome::EvictionHandedOff;
        let sent = if attempts == 0 {
            "no eviction sent".to_owned()
        } else {
            format!("no further eviction sent after {attempts} refused")
        };
        tracing::info!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), budget, budget_status = %status.arithmetic(), cause = %job.cause, attempts, "{sent}; the change is left to reloadlet controller's rollout");
        let note = format!(
            "{}; {} is rollout: {sent}, reloadlet controller rolls the pod's workload instead ({})",
            status.structural_note(budget),
            rollout::ON_BLOCKED,
            job.cause
        );
        self.report.record_seen(
            pod,
            ActionKind::Evict,
            outcome,
            note,
            &job.sources,
            &job.seen,
        );
    }

    /// The eviction was allowed (`rehearsed`: `--dry-run`'s, which the API server only
    /// checked).
    fn evicted(&self, job: &EvictJob, attempts: u32, rehearsed: bool) {
        let pod = &job.pod;
        if rehearsed {
            let (outcome, line) = (Outcome::DryRun, Line::note().cause(&job.cause));
            let note = "dry-run: the API server would allow this eviction".into();
            let (sources, seen) = (&job.sources, &job.seen);
            let action = ActionKind::Evict;
            self.report
                .said(pod, action, outcome, note, sources, seen, line);
            return;
        }
        let outcome = Outcome::Evicted;
        let latency = job.first_seen.map(|t| t.elapsed());
        if let Some(l) = latency {
            self.report.latency(ActionKind::Evict, l);
        }
        tracing::info!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), cause = %job.cause, attempts, latency_ms = latency.map(|l| l.as_secs_f64() * 1e3), "evicted through the Eviction API");
        let note = format!("evicted through the Eviction API: {}", job.cause);
        self.report.record_seen(
            pod,
            ActionKind::Evict,
            outcome,
            note,
            &job.sources,
            &job.seen,
        );
    }
}

#[cfg(test)]
mod tests;
