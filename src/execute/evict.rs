//! Eviction jobs: one at most per pod, paced retries while a PodDisruptionBudget says no,
//! bounded concurrency, Events that tell the operator what is going on.

use super::report::Reporter;
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::PodIndex;
use crate::host::state_file::PendingEviction;
use crate::ports::{EvictOutcome, EvictRequest, Evictor, PodRef};
use crate::retry::{Backoff, Jitter, Retries, RetryAfter};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
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
        }
    }
}

#[derive(Clone, Debug)]
pub struct EvictJob {
    pub pod: PodRef,
    pub cause: String,
    /// When the swap was seen (latency metric); `None` for jobs resumed after a restart.
    pub first_seen: Option<Instant>,
    /// The ConfigMaps/Secrets whose change it is for (empty for resumed jobs: only `cause`
    /// is persisted).
    pub sources: Vec<crate::core::model::SourceRef>,
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
    permits: Semaphore,
    cancel: CancellationToken,
    /// Pod UID → the job in progress.
    jobs: Mutex<HashMap<String, EvictJob>>,
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
                permits,
                cancel,
                jobs: Mutex::default(),
                changed: Arc::default(),
                runtime: tokio::runtime::Handle::current(),
            }),
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

    async fn run(&self, job: &EvictJob) {
        let pod = &job.pod;
        let req = EvictRequest {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            dry_run: self.report.dry_run(),
        };
        let mut retries = Retries::new(&self.settings.backoff());
        let mut last_warning: Option<Instant> = None;
        // Since when a PodDisruptionBudget has refused it (for notifications).
        let mut first_refusal: Option<Instant> = None;
        let mut attempts = 0u32;
        loop {
            if let Err(why) = self.still_wanted(pod) {
                tracing::info!(pod = %full(pod), reason = why, "eviction no longer needed");
                return;
            }
            let outcome = {
                let Ok(_permit) = self.permits.acquire().await else {
                    return;
                };
                attempts += 1;
                let timeout = self.settings.call_timeout;
                tokio::time::timeout(timeout, self.evictor.evict(&req))
                    .await
                    .unwrap_or_else(|_| EvictOutcome::Failed {
                        code: None,
                        message: format!(
                            "no answer from the API server within {}",
                            humantime::format_duration(timeout)
                        ),
                    })
            };
            let warn_now = last_warning.is_none_or(|t| t.elapsed() >= self.settings.warn_every);
            let retry_after = match outcome {
                EvictOutcome::Evicted => {
                    self.evicted(job, attempts);
                    return;
                }
                EvictOutcome::Gone => {
                    tracing::info!(pod = %full(pod), "pod already gone or replaced; eviction done");
                    return;
                }
                EvictOutcome::Blocked { cause, retry_after } => {
                    let outcome = Outcome::EvictionBlocked;
                    self.report.count(ActionKind::Evict, outcome);
                    tracing::info!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), cause = %cause, attempts, "PodDisruptionBudget refused the eviction; will retry");
                    let since = *first_refusal.get_or_insert_with(Instant::now);
                    if warn_now {
                        last_warning = Some(Instant::now());
                        let note = format!("eviction refused, will retry: {cause} ({})", job.cause);
                        self.report
                            .blocked(pod, note, &job.sources, since.elapsed());
                    }
                    retry_after
                }
                EvictOutcome::Failed { code, message } => {
                    let outcome = Outcome::EvictionFailed;
                    self.report.count(ActionKind::Evict, outcome);
                    tracing::warn!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), code, error = %message, attempts, "eviction failed; will retry");
                    if warn_now {
                        last_warning = Some(Instant::now());
                        let note =
                            format!("eviction failed, will retry: {message} ({})", job.cause);
                        self.report
                            .publish(pod, ActionKind::Evict, outcome, note, &job.sources);
                    }
                    // Errors other than a PDB refusal will not clear soon: retry at the cap,
                    // and stay there.
                    retries.hold_at_cap();
                    None
                }
            };
            // No limit, no deadline, no stop (cancelling is the caller's, which keeps the
            // job pending): there always is a next delay.
            let delay = retries
                .next(retry_after)
                .unwrap_or(self.settings.max_backoff);
            retries.wait(delay).await;
        }
    }

    fn evicted(&self, job: &EvictJob, attempts: u32) {
        let pod = &job.pod;
        if self.report.dry_run() {
            let outcome = Outcome::DryRun;
            self.report.count(ActionKind::Evict, outcome);
            tracing::info!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), cause = %job.cause, "dry-run: the API server would allow this eviction");
            return;
        }
        let outcome = Outcome::Evicted;
        let latency = job.first_seen.map(|t| t.elapsed());
        if let Some(l) = latency {
            self.report.latency(ActionKind::Evict, l);
        }
        tracing::info!(pod = %full(pod), action = "evict", outcome = outcome.as_str(), cause = %job.cause, attempts, latency_ms = latency.map(|l| l.as_secs_f64() * 1e3), "evicted through the Eviction API");
        let note = format!("evicted through the Eviction API: {}", job.cause);
        self.report
            .record(pod, ActionKind::Evict, outcome, note, &job.sources);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::PodInfo;
    use crate::ports::fake;
    use crate::serve::metrics::Metrics;

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_times_out_frees_its_permit_and_is_retried() {
        let pod = PodInfo {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "web".into(),
            ..Default::default()
        };
        let mut index = PodIndex::default();
        index.apply(pod.clone());
        // The first call never answers; the next evicts.
        let evictor = Arc::new(fake::Evictor::answering([None]));
        let events = Arc::new(fake::Events::default());
        let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
        let evictions = Evictions::new(
            EvictionSettings {
                max_in_flight: 1,
                ..EvictionSettings::default()
            },
            evictor.clone(),
            Reporter::new(
                events.clone(),
                crate::outbound::notify::Notifier::disabled(),
                metrics,
                false,
                "node-1".into(),
            ),
            Arc::new(RwLock::new(index)),
            CancellationToken::new(),
        );
        evictions.request(EvictJob {
            pod: PodRef::from(&pod),
            cause: "configmap app changed".into(),
            first_seen: None,
            sources: vec![],
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3600);
        while evictions.is_pending("u1") && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(
            !evictions.is_pending("u1"),
            "the hung call was never given up"
        );
        assert_eq!(evictor.calls(), 2);
        assert_eq!(events.reasons(), ["EvictionFailed", "EvictionRequested"]);
    }
}
