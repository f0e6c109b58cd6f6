//! How the executor runs an effect. Each effect is an [`Effect`]: an attempt that acts and its
//! `--dry-run` rehearsal. [`perform`] alone picks one (the reporter's setting), and runs it
//! through the one retry loop ([`Retries::run`]): patches, workload patches, reload
//! requests, a signal's retries, restarts and their grant requests, the drain gate opened on
//! sight, evictions (their refusals and failures retried by the same loop). What their calls
//! share (a bound on each, `retried`) is [`super::effect`]; how an outcome is reported,
//! [`super::report`].

use super::report::Reporter;
use crate::retry::{Attempt, Backoff, Ended, Retries};
use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

/// One effect as the executor runs it: what one attempt that acts is, and what `--dry-run`'s
/// rehearsal of it is. The runner never asks which runs: [`perform`] does, in one place, so
/// no effect can act under `--dry-run` by forgetting to ask.
pub trait Effect: Sync {
    type Done: Send;
    type Error: Send;
    /// One attempt that acts: a call to the API server, a signal, a request to the pod.
    fn attempt(&self) -> impl Future<Output = Attempt<Self::Done, Self::Error>> + Send;
    /// `--dry-run`'s attempt: acts on nothing; says (and reports) what [`Self::attempt`]
    /// would do, tried again as it would be.
    fn rehearse(&self) -> impl Future<Output = Attempt<Self::Done, Self::Error>> + Send;
}

/// Runs `effect`: its attempts, or under `--dry-run` (`report`'s setting) its rehearsals,
/// tried again as `retries` says ([`Retries::run`]), each retry announced to `on_retry`.
pub async fn perform<E: Effect>(
    report: &Reporter,
    retries: &mut Retries,
    effect: &E,
    on_retry: impl FnMut(&E::Error, Duration),
) -> Ended<E::Done, E::Error> {
    let rehearsed = report.dry_run();
    retries
        .run(
            || async move {
                if rehearsed {
                    effect.rehearse().await
                } else {
                    effect.attempt().await
                }
            },
            on_retry,
        )
        .await
}

/// The policy of an effect that tries nothing again itself.
const ONCE: Backoff = Backoff::doubling(Duration::ZERO, Duration::ZERO).retries(0);

/// [`perform`] of an effect that tries nothing again itself (its attempt is done, however
/// it went).
pub async fn perform_once<E: Effect<Error = Infallible>>(report: &Reporter, effect: &E) -> E::Done {
    let mut once = Retries::new(&ONCE);
    match perform(report, &mut once, effect, |_, _| {}).await {
        Ended::Done(done) => done,
        Ended::GaveUp(never) | Ended::Stopped(never) => match never {},
    }
}
