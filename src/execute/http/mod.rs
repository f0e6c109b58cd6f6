//! HTTP reload jobs (`reloadlet.io/action: http`): one request per pod to
//! `<scheme>://<status.podIP>:<port><path>`, 10 s per attempt, retried with backoff
//! (1 s doubling to 30 s, ±20 %) for up to 5 minutes while the endpoint is unreachable,
//! times out or answers 5xx, 408 or 429. Any other 4xx is final at once. At most one job
//! per pod: a newer change replaces a job still retrying (and takes over its sources); a
//! restarted container or a deleted pod ends it. At most
//! [`HttpSettings::max_in_flight`] requests are in flight on the node at once, and one
//! namespace holds at most three quarters of them ([`HttpSettings::per_namespace`]): a
//! tenant whose endpoints hang cannot take every slot from the others.

use super::effect::within;
use super::perform::{perform, Effect};
use super::report::{Line, Reporter};
use crate::core::annotations::HttpScheme;
use crate::core::model::{PodInfo, SourceRef};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::PodIndex;
use crate::core::policy::{Cause, HttpTarget, SignalTarget};
use crate::ports::{HttpAnswer, HttpCall, HttpCallError, HttpCaller, PodRef};
use crate::retry::{Attempt, Backoff, Ended, Jitter, Retries};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// One attempt may take this long (connect, TLS, request and the first bytes of the
    /// body).
    pub timeout: Duration,
    /// First retry delay; doubles up to `backoff_max`, each delay ±20 %.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// No retry starts later than this after the first attempt.
    pub give_up_after: Duration,
    /// Requests in flight on this node at once (a retry waiting for its delay holds none).
    pub max_in_flight: usize,
}

impl HttpSettings {
    /// The requests one namespace may have in flight at once: all but a quarter of
    /// [`HttpSettings::max_in_flight`] (rounded down), so a quarter stays for the others.
    pub fn per_namespace(&self) -> usize {
        let all = self.max_in_flight.max(1);
        (all - all / 4).max(1)
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            give_up_after: Duration::from_secs(300),
            max_in_flight: 16,
        }
    }
}

#[derive(Clone, Debug)]
pub struct HttpJob {
    pub pod_uid: String,
    pub target: HttpTarget,
    /// The ConfigMaps/Secrets whose change it is for.
    pub sources: Vec<SourceRef>,
    /// When the swap was seen (latency metric).
    pub first_seen: Instant,
    /// The writes of the changed volumes it is for (the pod's status record).
    pub seen: crate::execute::applied::Seen,
}

impl HttpJob {
    /// "configmap prometheus-config changed"
    pub fn cause(&self) -> String {
        Cause::text(&self.sources)
    }
}

/// `ip` as the host part of a URL (`[fd00::1]` for IPv6).
pub fn host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// The request of `target` to the pod at `ip`.
pub fn call(target: &HttpTarget, ip: IpAddr) -> HttpCall {
    let spec = &target.spec;
    let scheme = match spec.scheme {
        HttpScheme::Http => "http",
        HttpScheme::Https => "https",
    };
    HttpCall {
        method: spec.method,
        url: format!("{scheme}://{}:{}{}", host(ip), target.port, spec.path),
        body: spec.body.clone(),
    }
}

/// Why an attempt got no HTTP answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttemptError {
    #[error("the pod has no IP yet (status.podIP)")]
    NoPodIp,
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error(transparent)]
    Call(#[from] HttpCallError),
}

/// How one attempt ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Reloaded,
    /// Worth another attempt (no answer, timeout, 5xx, 408, 429); the text says why.
    Retry(String),
    /// Final (any other status): the text says why.
    Refused(String),
}

/// Classifies an answer: 2xx reloaded; 408, 429 and 5xx retried (the endpoint is busy or
/// starting); any other status final. The text quotes the start of the body
/// ([`quoted_body`]; Prometheus: 403 "Lifecycle API is not enabled.").
pub fn verdict(answer: &Result<HttpAnswer, AttemptError>) -> Verdict {
    match answer {
        Err(e) => Verdict::Retry(e.to_string()),
        Ok(a) => {
            let said = match quoted_body(&a.body_prefix) {
                None => format!("→ {}", a.status),
                Some(quoted) => format!("→ {} {quoted}", a.status),
            };
            match a.status {
                200..=299 => Verdict::Reloaded,
                408 | 429 | 500..=599 => Verdict::Retry(said),
                _ => Verdict::Refused(said),
            }
        }
    }
}

/// The most bytes of an answer body's text quoted in an Event note, a log line or a
/// notification (before the closing `…"`).
pub const QUOTED_BODY_BYTES: usize = 200;

/// The start of an answer body as data for one line of text: in double quotes, at most
/// [`QUOTED_BODY_BYTES`] bytes of it (cut at a character, then `…`). The endpoint is the
/// tenant's, so nothing in it may read as more than a quote: runs of whitespace (newlines,
/// tabs, U+2028 …) become one space, other control characters (NUL, ESC of an ANSI sequence,
/// DEL, C1) and bidirectional overrides become U+FFFD, and `"` and `\` are escaped. `None`
/// when nothing visible is left.
pub fn quoted_body(body: &str) -> Option<String> {
    let mut text = String::with_capacity(QUOTED_BODY_BYTES.min(body.len()));
    let mut space = false;
    let mut cut = false;
    let mut utf8 = [0u8; 4];
    for c in body.chars() {
        if c.is_whitespace() {
            space = !text.is_empty();
            continue;
        }
        let piece: &str = if c.is_control() || is_bidi_control(c) {
            "\u{fffd}"
        } else if c == '"' {
            "\\\""
        } else if c == '\\' {
            "\\\\"
        } else {
            c.encode_utf8(&mut utf8)
        };
        if text.len() + usize::from(space) + piece.len() > QUOTED_BODY_BYTES {
            cut = true;
            break;
        }
        if std::mem::take(&mut space) {
            text.push(' ');
        }
        text.push_str(piece);
    }
    if text.is_empty() {
        return None;
    }
    Some(format!("\"{text}{}\"", if cut { "…" } else { "" }))
}

/// Characters that reorder how the text around them is shown (Unicode bidirectional
/// formatting: ALM, LRM, RLM, LRE…RLO, LRI…PDI).
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

impl HttpSettings {
    /// Doubling from `backoff_min` to `backoff_max`, ±20 %, none starting after
    /// `give_up_after`.
    fn backoff(&self) -> Backoff {
        Backoff::doubling(self.backoff_min, self.backoff_max)
            .jitter(Jitter::Spread)
            .give_up_after(self.give_up_after)
    }
}

#[derive(Clone)]
pub struct HttpReloads {
    inner: Arc<Inner>,
}

struct Inner {
    settings: HttpSettings,
    caller: Arc<dyn HttpCaller>,
    report: Reporter,
    index: Arc<RwLock<PodIndex>>,
    permits: Semaphore,
    /// Namespace → its share of `permits` ([`HttpSettings::per_namespace`]).
    namespace_permits: Mutex<HashMap<String, Arc<Semaphore>>>,
    stop: CancellationToken,
    tracker: TaskTracker,
    /// The async runtime requests run on (the caller may be the agent's hot thread, whose
    /// single-threaded runtime must not carry them).
    runtime: tokio::runtime::Handle,
    /// Pod UID → the job in progress.
    jobs: Mutex<HashMap<String, Running>>,
    next_id: AtomicU64,
}

struct Running {
    id: u64,
    cancel: CancellationToken,
    sources: Vec<SourceRef>,
    containers: Vec<SignalTarget>,
}

impl HttpReloads {
    pub fn new(
        settings: HttpSettings,
        caller: Arc<dyn HttpCaller>,
        report: Reporter,
        index: Arc<RwLock<PodIndex>>,
        stop: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        let permits = Semaphore::new(settings.max_in_flight.max(1));
        Self {
            inner: Arc::new(Inner {
                settings,
                caller,
                report,
                index,
                permits,
                namespace_permits: Mutex::default(),
                stop,
                tracker,
                runtime: tokio::runtime::Handle::current(),
                jobs: Mutex::default(),
                next_id: AtomicU64::new(0),
            }),
        }
    }

    /// Starts the job, replacing one of the same pod still in progress.
    pub fn request(&self, mut job: HttpJob) {
        let inner = &self.inner;
        let cancel = CancellationToken::new();
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut jobs = inner.lock();
            if let Some(old) = jobs.remove(&job.pod_uid) {
                old.cancel.cancel();
                for s in old.sources {
                    if !job.sources.contains(&s) {
                        job.sources.push(s);
                    }
                }
                job.sources.sort();
                tracing::info!(pod_uid = %job.pod_uid, cause = %job.cause(), "a newer change replaces the reload request still in progress");
            }
            jobs.insert(
                job.pod_uid.clone(),
                Running {
                    id,
                    cancel: cancel.clone(),
                    sources: job.sources.clone(),
                    containers: job.target.containers.clone(),
                },
            );
        }
        let inner = self.inner.clone();
        self.inner.tracker.spawn_on(
            async move {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = inner.run(&job) => {}
                }
                let mut jobs = inner.lock();
                if jobs.get(&job.pod_uid).is_some_and(|r| r.id == id) {
                    jobs.remove(&job.pod_uid);
                }
            },
            &self.inner.runtime,
        );
    }

    /// The pod was updated: a restart of a container the job is for ends it (the
    /// container read its configuration anew when it started).
    pub fn pod_updated(&self, pod: &PodInfo) {
        let mut jobs = self.inner.lock();
        let Some(running) = jobs.get(&pod.uid) else {
            return;
        };
        if let Some(why) = restarted(pod, &running.containers) {
            tracing::info!(pod = %pod.full_name(), why, "reload request dropped: the container restarted and read its configuration anew");
            running.cancel.cancel();
            jobs.remove(&pod.uid);
        }
    }

    /// The pod is gone: its job ends.
    pub fn pod_deleted(&self, uid: &str) {
        if let Some(running) = self.inner.lock().remove(uid) {
            tracing::info!(pod_uid = uid, "pod deleted; reload request dropped");
            running.cancel.cancel();
        }
    }

    /// Pods with a job in progress.
    pub fn in_progress(&self) -> usize {
        self.inner.lock().len()
    }
}

/// Why the job for `containers` is moot in `pod` now: one of them runs another container
/// (ID) than when the change was decided, or no longer runs.
fn restarted(pod: &PodInfo, containers: &[SignalTarget]) -> Option<String> {
    containers.iter().find_map(|t| {
        let now = pod.containers.iter().find(|c| c.name == t.container);
        match now {
            None => Some(format!("container {} is gone", t.container)),
            // Only a container known to run at the change can have restarted since. One that
            // had no ID then may have started before the change and its status come later
            // (the kubelet reports status after it starts containers): asking it once more
            // costs a reload of an already new file; dropping the request could lose one.
            Some(c) if t.container_id.is_some() && c.container_id != t.container_id => {
                Some(format!("container {} restarted", t.container))
            }
            Some(c) if !c.running && t.container_id.is_some() => {
                Some(format!("container {} is not running", t.container))
            }
            Some(_) => None,
        }
    })
}

/// What a reload request that may pass failed on: the pod, the URL, the error.
type Failed = (PodInfo, String, String);

/// One pod's reload request as an [`Effect`]: each attempt looks at the pod first (gone, or
/// its container restarted: done), waits for its IP and its share of the node's slots.
struct Request<'a> {
    inner: &'a Inner,
    job: &'a HttpJob,
    attempts: &'a AtomicU32,
}

impl Effect for Request<'_> {
    type Done = ();
    type Error = Failed;

    async fn attempt(&self) -> Attempt<(), Failed> {
        self.inner.attempt(self.job, self.attempts, false).await
    }

    /// Reached the way a real request is (waiting for the pod's IP, replaced, cancelled
    /// alike), then logged instead of sent.
    async fn rehearse(&self) -> Attempt<(), Failed> {
        self.inner.attempt(self.job, self.attempts, true).await
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pod(&self, uid: &str) -> Option<PodInfo> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        index.get(uid).cloned()
    }

    /// `--dry-run`: the request that would go out now, logged instead of sent. Reached the
    /// way a real request is (waiting for the pod's IP, replaced, cancelled alike).
    fn dry_run(&self, job: &HttpJob, pod: &PodInfo, url: &str) {
        let method = job.target.spec.method.as_str();
        let body = job.target.spec.body.len();
        let message = format!("dry-run: would send {method} {url} ({body} bytes of body)");
        let (sources, seen) = (&job.sources, &job.seen);
        let note = "dry-run: the reload request was not sent".into();
        let cause = job.cause();
        self.report.said(
            &PodRef::from(pod),
            ActionKind::Http,
            Outcome::DryRun,
            note,
            sources,
            seen,
            Line::saying(&message).cause(&cause),
        );
    }

    /// The namespace's share of the node's slots; shares nobody holds are forgotten once
    /// there are many.
    fn namespace_share(&self, namespace: &str) -> Arc<Semaphore> {
        let per = self.settings.per_namespace();
        let mut shares = self
            .namespace_permits
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if shares.len() >= 1024 && !shares.contains_key(namespace) {
            shares.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < per);
        }
        shares
            .entry(namespace.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(per)))
            .clone()
    }

    async fn run(&self, job: &HttpJob) {
        let mut retries = Retries::new(&self.settings.backoff()).stopped_by(self.stop.clone());
        let attempts = AtomicU32::new(0);
        let method = job.target.spec.method.as_str();
        let request = Request {
            inner: self,
            job,
            attempts: &attempts,
        };
        let ended = perform(&self.report, &mut retries, &request, |(pod, url, error), delay| {
            let attempts = attempts.load(Ordering::Relaxed);
            tracing::warn!(pod = %pod.full_name(), method, url, attempts, error = %error, retry_in_ms = delay.as_millis() as u64, action = "http", "reload request failed; will retry");
        })
        .await;
        let attempts = attempts.load(Ordering::Relaxed);
        match ended {
            Ended::Done(()) => {}
            Ended::GaveUp((pod, url, error)) => {
                let elapsed = retries.elapsed();
                let note = format!(
                    "{method} {url} failed {attempts} time(s) in {}, last: {error}: {}",
                    humantime::format_duration(Duration::from_secs(elapsed.as_secs())),
                    job.cause()
                );
                self.failed(job, &pod, note, attempts, &error);
            }
            Ended::Stopped((pod, _, _)) => {
                tracing::info!(pod = %pod.full_name(), "shutting down: reload request dropped");
            }
        }
    }

    /// One reload request (`rehearsed`: `--dry-run`'s line instead), unless the job is moot:
    /// done (reported), or the pod, URL and error to try again on.
    async fn attempt(
        &self,
        job: &HttpJob,
        attempts: &AtomicU32,
        rehearsed: bool,
    ) -> Attempt<(), Failed> {
        let Some(pod) = self.pod(&job.pod_uid) else {
            tracing::info!(pod_uid = %job.pod_uid, "pod gone; reload request dropped");
            return Attempt::Done(());
        };
        if let Some(why) = restarted(&pod, &job.target.containers) {
            tracing::info!(pod = %pod.full_name(), why, "reload request dropped: the container restarted and read its configuration anew");
            return Attempt::Done(());
        }
        let (url, result) = match pod.pod_ip {
            None => (
                format!("port {}", job.target.port),
                Err(AttemptError::NoPodIp),
            ),
            Some(ip) => {
                let call = call(&job.target, ip);
                if rehearsed {
                    self.dry_run(job, &pod, &call.url);
                    return Attempt::Done(());
                }
                let share = self.namespace_share(&pod.namespace);
                let Ok(_share) = share.acquire().await else {
                    return Attempt::Done(());
                };
                let Ok(_permit) = self.permits.acquire().await else {
                    return Attempt::Done(());
                };
                attempts.fetch_add(1, Ordering::Relaxed);
                let timeout = self.settings.timeout;
                let answer = within(
                    timeout,
                    async { self.caller.call(&call).await.map_err(AttemptError::from) },
                    |t| Err(AttemptError::Timeout(t)),
                )
                .await;
                (call.url, answer)
            }
        };
        let method = job.target.spec.method.as_str();
        let attempts = attempts.load(Ordering::Relaxed);
        match verdict(&result) {
            Verdict::Reloaded => {
                let status = result.map(|a| a.status).unwrap_or_default();
                self.reloaded(job, &pod, &url, status, attempts);
                Attempt::Done(())
            }
            Verdict::Refused(said) => {
                let note = format!("{method} {url} {said}: {}", job.cause());
                self.failed(job, &pod, note, attempts, &said);
                Attempt::Done(())
            }
            Verdict::Retry(why) => Attempt::Again((pod, url, why), None),
        }
    }

    fn reloaded(&self, job: &HttpJob, pod: &PodInfo, url: &str, status: u16, attempts: u32) {
        let outcome = Outcome::Reloaded;
        let method = job.target.spec.method.as_str();
        let latency = job.first_seen.elapsed();
        self.report.latency(ActionKind::Http, latency);
        tracing::info!(pod = %pod.full_name(), method, url, status, attempts, cause = %job.cause(), action = "http", outcome = outcome.as_str(), latency_ms = latency.as_secs_f64() * 1e3, "reloaded over HTTP");
        let note = format!("{method} {url} → {status}: {}", job.cause());
        self.report.record_seen(
            &PodRef::from(pod),
            ActionKind::Http,
            outcome,
            note,
            &job.sources,
            &job.seen,
        );
    }

    fn failed(&self, job: &HttpJob, pod: &PodInfo, note: String, attempts: u32, error: &str) {
        let outcome = Outcome::ReloadFailed;
        let method = job.target.spec.method.as_str();
        tracing::warn!(pod = %pod.full_name(), method, attempts, error = %error, cause = %job.cause(), action = "http", outcome = outcome.as_str(), "reload over HTTP failed; giving up");
        self.report.record_seen(
            &PodRef::from(pod),
            ActionKind::Http,
            outcome,
            note,
            &job.sources,
            &job.seen,
        );
    }
}

#[cfg(test)]
mod tests;
