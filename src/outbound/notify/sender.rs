//! [`Notifier`]: the handle the executor calls. [`Notifier::notify`] filters, dedupes,
//! renders and queues in microseconds under a short lock and returns; it never awaits,
//! never blocks on the network and can be called from any thread. One task per webhook
//! drains that webhook's bounded queue, shared fairly between namespaces
//! (`core::fair_queue`: namespaces sent in turn; when full, the oldest of the namespace
//! holding the most is dropped and counted), so a dead webhook delays nobody else and one
//! namespace's flood never pushes out another's notifications.

use super::config::NotifySettings;
use super::dedupe::{Dedupe, Verdict};
use super::event::{Notification, NotifyOn};
use super::format::{render, Format, Payload};
use super::metrics::{FailureLabels, NotifyMetrics};
use super::poster::{PostResponse, Poster};
use super::secret_url::SecretUrl;
use crate::core::fair_queue::FairQueue;
use crate::retry::{Attempt, Backoff, Ended, Jitter, Retries, RetryAfter};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What [`Notifier::notify`] did with a notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// No `--notify-url`.
    Disabled,
    /// Not wanted under `--notify-on`.
    Filtered,
    /// Held back: the same (source object, reason) was sent within the window.
    Deduped,
    /// Queued for every webhook; `dropped` older requests made room.
    Queued { dropped: usize },
}

/// Cheap to clone; all clones share the queues and the dedupe window.
#[derive(Clone)]
pub struct Notifier {
    inner: Option<Arc<Shared>>,
}

struct Shared {
    on: NotifyOn,
    format: Format,
    info: Option<String>,
    dedupe: Mutex<Dedupe>,
    sinks: Vec<Arc<Sink>>,
    metrics: NotifyMetrics,
}

struct Sink {
    url: SecretUrl,
    capacity: usize,
    queue: Mutex<FairQueue<Arc<Payload>>>,
    wake: Notify,
}

/// How each request is attempted: its timeout, then its retries.
#[derive(Clone, Copy, Debug)]
struct Attempts {
    timeout: Duration,
    backoff: Backoff,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Notifier {
    /// Notifications off: [`Notifier::notify`] returns [`Submitted::Disabled`].
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    /// Spawns one sending task per webhook on the current tokio runtime; they stop when
    /// `cancel` fires (a request in flight is abandoned; queued ones are dropped). Must be
    /// called inside a tokio runtime; [`Notifier::notify`] may then be called from anywhere.
    pub fn start<P: Poster>(
        settings: &NotifySettings,
        poster: P,
        metrics: NotifyMetrics,
        cancel: CancellationToken,
    ) -> Self {
        if !settings.enabled() {
            return Self::disabled();
        }
        let poster = Arc::new(poster);
        let backoff = Backoff::doubling(
            settings.backoff_min,
            settings.backoff_max.max(settings.backoff_min),
        )
        .retries(settings.retries)
        // Honour Retry-After (Slack's rate limit), within the backoff ceiling.
        .retry_after(RetryAfter::Lengthens)
        .jitter(if settings.jitter {
            Jitter::Lengthen
        } else {
            Jitter::None
        });
        let attempts = Attempts {
            timeout: settings.timeout,
            backoff,
        };
        let sinks: Vec<Arc<Sink>> = settings
            .urls
            .iter()
            .map(|url| {
                Arc::new(Sink {
                    url: url.clone(),
                    capacity: settings.queue_capacity.max(1),
                    queue: Mutex::new(FairQueue::new(settings.queue_capacity)),
                    wake: Notify::new(),
                })
            })
            .collect();
        for sink in &sinks {
            tokio::spawn(drain(
                sink.clone(),
                poster.clone(),
                attempts,
                metrics.clone(),
                cancel.clone(),
            ));
        }
        Self {
            inner: Some(Arc::new(Shared {
                on: settings.on,
                format: settings.format,
                info: settings.info.clone(),
                dedupe: Mutex::new(Dedupe::new(settings.dedupe_window)),
                sinks,
                metrics,
            })),
        }
    }

    /// Never blocks or awaits: safe on the agent's hot path and from any thread.
    pub fn notify(&self, n: &Notification) -> Submitted {
        let Some(s) = &self.inner else {
            return Submitted::Disabled;
        };
        if !s.on.wants(n) {
            return Submitted::Filtered;
        }
        let now = tokio::time::Instant::now().into_std();
        let held_back = match lock(&s.dedupe).check(n, now) {
            Verdict::Suppress => {
                s.metrics.deduped.inc();
                tracing::debug!(
                    namespace = %n.namespace, pod = %n.pod, reason = n.reason(),
                    "notification held back: the same one was sent within the dedupe window"
                );
                return Submitted::Deduped;
            }
            Verdict::Send { held_back } => held_back,
        };
        let payload = Arc::new(render(s.format, n, s.info.as_deref(), held_back));
        let mut dropped = 0;
        for sink in &s.sinks {
            let gone = lock(&sink.queue).push(&n.namespace, payload.clone());
            if let Some((namespace, _)) = gone {
                dropped += 1;
                s.metrics.dropped.inc();
                tracing::warn!(
                    sink = %sink.url,
                    namespace,
                    "notification queue full ({} waiting): dropped the oldest of the namespace holding the most",
                    sink.capacity
                );
            }
            sink.wake.notify_one();
        }
        Submitted::Queued { dropped }
    }
}

async fn drain<P: Poster>(
    sink: Arc<Sink>,
    poster: Arc<P>,
    attempts: Attempts,
    metrics: NotifyMetrics,
    cancel: CancellationToken,
) {
    loop {
        let next = lock(&sink.queue).pop();
        let Some((_, payload)) = next else {
            tokio::select! {
                _ = sink.wake.notified() => continue,
                _ = cancel.cancelled() => return,
            }
        };
        tokio::select! {
            _ = deliver(&*poster, &sink.url, &payload, attempts, &metrics) => {}
            _ = cancel.cancelled() => return,
        }
    }
}

/// How one answer (or its absence) is treated.
enum Answer {
    Sent(u16),
    /// Try again: connection errors, timeouts, 408, 429, 5xx.
    Retry(&'static str, String, Option<Duration>),
    /// Retrying cannot help: other 4xx (revoked or wrong webhook), 3xx, 1xx.
    Final(&'static str, String),
}

fn judge(r: PostResponse) -> Answer {
    let detail = if r.body_prefix.is_empty() {
        format!("HTTP {}", r.status)
    } else {
        format!("HTTP {}: {}", r.status, r.body_prefix)
    };
    match r.status {
        200..=299 => Answer::Sent(r.status),
        408 | 429 => Answer::Retry("status_4xx", detail, r.retry_after),
        500..=599 => Answer::Retry("status_5xx", detail, r.retry_after),
        300..=399 => Answer::Final("redirect", format!("{detail} (redirects are not followed)")),
        400..=499 => Answer::Final("status_4xx", detail),
        _ => Answer::Final("other", detail),
    }
}

async fn deliver<P: Poster>(
    poster: &P,
    url: &SecretUrl,
    payload: &Payload,
    a: Attempts,
    metrics: &NotifyMetrics,
) {
    // No stop: cancelling is the drain task's.
    let mut retries = Retries::new(&a.backoff);
    let attempt = AtomicU32::new(0);
    let ended = retries
        .run(
            || async {
                attempt.fetch_add(1, Ordering::Relaxed);
                match tokio::time::timeout(a.timeout, poster.post(url, payload)).await {
                    Ok(Ok(resp)) => match judge(resp) {
                        Answer::Sent(status) => Attempt::Done(Ok(status)),
                        Answer::Final(reason, detail) => Attempt::Done(Err((reason, detail))),
                        Answer::Retry(reason, detail, after) => {
                            Attempt::Again((reason, detail), after)
                        }
                    },
                    Ok(Err(e)) => Attempt::Again(("connect", e.to_string()), None),
                    Err(_) => Attempt::Again(
                        ("timeout", format!("no answer within {:?}", a.timeout)),
                        None,
                    ),
                }
            },
            |(_, detail), delay| {
                metrics.retries.inc();
                let attempt = attempt.load(Ordering::Relaxed);
                tracing::info!(
                    sink = %url, attempt, error = %detail, retry_in = ?delay,
                    "notification not delivered; will retry"
                );
            },
        )
        .await;
    let attempt = attempt.load(Ordering::Relaxed);
    let (reason, detail) = match ended {
        Ended::Done(Ok(status)) => {
            metrics.sent.inc();
            tracing::debug!(sink = %url, status, attempt, "notification sent");
            return;
        }
        Ended::Done(Err(failed)) | Ended::GaveUp(failed) | Ended::Stopped(failed) => failed,
    };
    metrics
        .failed
        .get_or_create(&FailureLabels { reason })
        .inc();
    tracing::warn!(sink = %url, attempt, error = %detail, "notification not delivered; giving up");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_like_an_operator_would() {
        let table = [
            (200, "sent"),
            (204, "sent"),
            (301, "final"),
            (400, "final"),
            (403, "final"),
            (404, "final"),
            (410, "final"),
            (408, "retry"),
            (429, "retry"),
            (500, "retry"),
            (503, "retry"),
        ];
        for (status, want) in table {
            let got = match judge(PostResponse::status(status)) {
                Answer::Sent(_) => "sent",
                Answer::Retry(..) => "retry",
                Answer::Final(..) => "final",
            };
            assert_eq!(got, want, "{status}");
        }
    }
}
