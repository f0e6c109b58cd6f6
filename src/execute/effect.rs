//! What every effect's calls share, written once. A runner (signals and restarts in
//! [`super::Executor`], [`super::evict`], [`super::http`], [`super::patch`],
//! [`super::rollout`], and the pod writes of the restart grant and of the
//! `reloadlet.io/applied` record) says what one call is and what its answer means (each effect
//! an [`super::perform::Effect`], run by [`super::perform::perform`]). How long a
//! call may take, how a failed call is tried again, and what an unanswered call is, are here;
//! how an outcome becomes a metric, an Event, a notification and a record is
//! [`super::report`]; the retry policies and their waits are [`crate::retry`].
//!
//! Every call an effect makes to the API server or to a pod is bounded: a call no setting
//! bounds takes [`API_CALL_TIMEOUT`] (kube's client would otherwise wait up to its read
//! timeout, 295 s, on a server that accepted the connection and never answered).

use crate::ports::{ApiError, PatchError};
use crate::retry::{Attempt, Backoff, Ended, Retries};
use std::future::Future;
use std::time::Duration;

/// The bound of an API call no setting bounds: the restart grant's pod writes, the
/// `reloadlet.io/applied` record's read and patch. The patches' own default
/// (`PatchSettings::call_timeout`).
pub const API_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A call tried once more, at once, after a failure that may pass (a pod write of the
/// restart's annotations).
pub const ONCE_MORE: Backoff = Backoff::doubling(Duration::ZERO, Duration::ZERO).retries(1);

/// The message of a call the API server did not answer within `timeout`.
pub fn no_answer(timeout: Duration) -> String {
    format!(
        "no answer from the API server within {}",
        humantime::format_duration(timeout)
    )
}

/// An answer type that can say "no answer in time".
pub trait Unanswered {
    fn unanswered(timeout: Duration) -> Self;
}

impl Unanswered for PatchError {
    fn unanswered(timeout: Duration) -> Self {
        PatchError::Other(ApiError::other(no_answer(timeout)))
    }
}

impl<T, E: Unanswered> Unanswered for Result<T, E> {
    fn unanswered(timeout: Duration) -> Self {
        Err(E::unanswered(timeout))
    }
}

/// `call`, bounded by `timeout`: unanswered by then, it is `unanswered(timeout)` (and the
/// call is dropped, which closes its request).
pub async fn within<T>(
    timeout: Duration,
    call: impl Future<Output = T>,
    unanswered: impl FnOnce(Duration) -> T,
) -> T {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| unanswered(timeout))
}

/// [`within`] for an answer that says "no answer" itself ([`Unanswered`]).
pub async fn bounded<T: Unanswered>(timeout: Duration, call: impl Future<Output = T>) -> T {
    within(timeout, call, T::unanswered).await
}

/// Calls `attempt` until it succeeds, fails for good, or `retries` (its policy and its stop)
/// gives up: an error `retryable` accepts is tried again after the policy's next delay,
/// announced to `on_retry` (the runner's log line) before the wait; any other error, an
/// exhausted policy or a stop during the wait returns the last error ([`Retries::run`] for a
/// call whose answer is a `Result`).
pub async fn retried<T, E, Fut>(
    retries: &mut Retries,
    mut attempt: impl FnMut() -> Fut,
    retryable: impl Fn(&E) -> bool,
    on_retry: impl FnMut(&E, Duration),
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let retryable = &retryable;
    let ended = retries
        .run(
            || {
                let call = attempt();
                async move {
                    match call.await {
                        Err(e) if retryable(&e) => Attempt::Again(e, None),
                        done => Attempt::Done(done),
                    }
                }
            },
            on_retry,
        )
        .await;
    match ended {
        Ended::Done(done) => done,
        Ended::GaveUp(e) | Ended::Stopped(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio_util::sync::CancellationToken;

    fn policy(retries: usize) -> Backoff {
        Backoff::doubling(Duration::from_millis(100), Duration::from_secs(1)).retries(retries)
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_call_is_the_answers_own_no_answer_after_the_timeout() {
        let started = tokio::time::Instant::now();
        let never = std::future::pending::<Result<(), PatchError>>();
        let answer = bounded(Duration::from_secs(10), never).await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        match answer {
            Err(PatchError::Other(e)) => {
                assert_eq!(e.to_string(), "no answer from the API server within 10s")
            }
            other => panic!("{other:?}"),
        }
        // An answer in time is the answer.
        let answered = bounded(Duration::from_secs(10), async {
            Err::<(), _>(PatchError::NotFound)
        })
        .await;
        assert!(matches!(answered, Err(PatchError::NotFound)));
    }

    #[tokio::test(start_paused = true)]
    async fn retried_tries_again_only_what_may_pass_and_says_each_retry() {
        let calls = AtomicU32::new(0);
        let mut said = Vec::new();
        // Two failures that may pass, then done.
        let mut retries = Retries::new(&policy(5));
        let done = retried(
            &mut retries,
            || async {
                match calls.fetch_add(1, Ordering::Relaxed) {
                    0 | 1 => Err(PatchError::Conflict("again".into())),
                    _ => Ok(7),
                }
            },
            |e| matches!(e, PatchError::Conflict(_)),
            |_, delay| said.push(delay.as_millis()),
        )
        .await;
        assert_eq!(done.unwrap(), 7);
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        assert_eq!(said, [100, 200], "the policy's delays, in ms");

        // A failure that will not pass is not tried again.
        calls.store(0, Ordering::Relaxed);
        let mut retries = Retries::new(&policy(5));
        let refused: Result<(), _> = retried(
            &mut retries,
            || async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err(PatchError::Forbidden("no".into()))
            },
            |e| matches!(e, PatchError::Conflict(_)),
            |_, _| panic!("a forbidden call is not retried"),
        )
        .await;
        assert!(matches!(refused, Err(PatchError::Forbidden(_))));
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retried_ends_with_the_last_error_when_the_policy_or_a_stop_ends_it() {
        let calls = AtomicU32::new(0);
        let failing = || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err::<(), _>(PatchError::Conflict("busy".into()))
        };
        let mut retries = Retries::new(&policy(2));
        let out = retried(&mut retries, failing, |_| true, |_, _| {}).await;
        assert!(matches!(out, Err(PatchError::Conflict(_))));
        assert_eq!(
            calls.load(Ordering::Relaxed),
            3,
            "the first call and 2 retries"
        );

        calls.store(0, Ordering::Relaxed);
        let stop = CancellationToken::new();
        stop.cancel();
        let mut retries = Retries::new(&policy(5)).stopped_by(stop);
        let out = retried(&mut retries, failing, |_| true, |_, _| {}).await;
        assert!(matches!(out, Err(PatchError::Conflict(_))));
        assert_eq!(calls.load(Ordering::Relaxed), 1, "stopped: no retry");
    }
}
