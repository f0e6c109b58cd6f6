//! Signal jobs: one container of one pod, retried with backoff while the container restarts.

use crate::core::disposition::SignalCheck;
use crate::core::model::{ContainerId, PodInfo, ReloadSignal};
use crate::core::outcome::Outcome;
use crate::ports::{Delivery, ProcessError};
use crate::retry::Backoff;
use std::time::{Duration, Instant};

/// Total attempts before `SignalFailed` is final (the delays are 0.5 s, 1 s, 2 s, 4 s).
pub const MAX_ATTEMPTS: u32 = 5;

/// The delays between attempts: 0.5 s doubling, [`MAX_ATTEMPTS`] − 1 of them, no jitter.
pub const RETRY: Backoff = Backoff::doubling(Duration::from_millis(500), Duration::from_secs(60))
    .retries(MAX_ATTEMPTS as usize - 1);

#[derive(Clone, Debug)]
pub struct SignalJob {
    pub pod_uid: String,
    pub container: String,
    pub signal: ReloadSignal,
    pub first_seen: Instant,
    pub attempt: u32,
    /// `reloadlet.io/signal-check` of the pod.
    pub check: SignalCheck,
    /// The ConfigMaps/Secrets whose change it is for ([`SignalJob::cause`] names them).
    pub sources: Vec<crate::core::model::SourceRef>,
    /// The writes of the changed volumes it is for (the pod's status record).
    pub seen: super::applied::Seen,
}

impl SignalJob {
    /// "configmap nginx-conf changed", formatted when told (after the signal), not before.
    pub fn cause(&self) -> String {
        crate::core::policy::Cause::text(&self.sources)
    }
}

/// Why a signal could not be sent now (retried while the container restarts; the text of
/// the last one is in `SignalFailed`).
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("the pod has no container {0:?}")]
    NoContainer(String),
    #[error("container {0} is not running")]
    NotRunning(String),
    /// The main process could not be found, inspected or signalled.
    #[error(transparent)]
    Process(#[from] ProcessError),
}

/// The container's current runtime ID, or why it cannot be signalled now.
pub fn running_container_id<'a>(
    pod: &'a PodInfo,
    container: &str,
) -> Result<&'a ContainerId, SignalError> {
    let c = pod
        .containers
        .iter()
        .find(|c| c.name == container)
        .ok_or_else(|| SignalError::NoContainer(container.to_owned()))?;
    match (&c.container_id, c.running) {
        (Some(id), true) => Ok(id),
        _ => Err(SignalError::NotRunning(container.to_owned())),
    }
}

/// How a delivery ends up: its outcome (metric label, log field, Event reason) and the
/// Event's note.
pub fn report(job: &SignalJob, delivery: &Delivery) -> (Outcome, String) {
    if delivery.verdict.handled() {
        return (Outcome::Signaled, signaled_note(job, delivery.pid));
    }
    let (signal, container, cause) = (job.signal, &job.container, job.cause());
    let what = delivery.describe(signal);
    if delivery.sent() {
        (
            Outcome::SignalNotHandled,
            format!("sent {signal} to container {container}, but {what}: {cause}"),
        )
    } else {
        (
            Outcome::SignalWithheld,
            format!("did not send {signal} to container {container}: {what}: {cause}"),
        )
    }
}

pub fn signaled_note(job: &SignalJob, pid: i32) -> String {
    format!(
        "sent {} to container {} (pid {pid}): {}",
        job.signal,
        job.container,
        job.cause()
    )
}

pub fn failed_note(job: &SignalJob, error: &SignalError) -> String {
    format!(
        "could not send {} to container {} after {} attempts: {error}; {}",
        job.signal,
        job.container,
        job.attempt,
        job.cause()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::disposition::{decide, SignalStatus};

    fn job() -> SignalJob {
        SignalJob {
            seen: Default::default(),
            pod_uid: "u".into(),
            container: "nginx".into(),
            signal: ReloadSignal::Hup,
            first_seen: Instant::now(),
            attempt: 1,
            check: SignalCheck::On,
            sources: vec![crate::core::model::SourceRef {
                kind: crate::core::model::SourceKind::ConfigMap,
                name: "nginx-conf".into(),
            }],
        }
    }

    #[test]
    fn retry_delays_double() {
        let job = job();
        let delays: Vec<u128> = RETRY.delays().map(|d| d.as_millis()).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000]);
        assert_eq!(
            signaled_note(&job, 4242),
            "sent SIGHUP to container nginx (pid 4242): configmap nginx-conf changed"
        );
    }

    fn delivery(name: &str, caught: u64, ns_pid: i32) -> Delivery {
        let status = SignalStatus {
            name: name.into(),
            caught,
            ns_pid: Some(ns_pid),
            ..Default::default()
        };
        Delivery {
            pid: 4242,
            verdict: decide(&status, ReloadSignal::Hup, SignalCheck::On),
            status,
            by_kill: false,
        }
    }

    #[test]
    fn each_verdict_has_its_event() {
        let (handled, _) = report(&job(), &delivery("nginx", 1, 1));
        let event = handled.event().unwrap();
        assert_eq!((event.reason, event.warning), ("Signaled", false));
        assert_eq!(handled, Outcome::Signaled);

        let (pid1, note) = report(&job(), &delivery("sleep", 0, 1));
        let event = pid1.event().unwrap();
        assert_eq!((event.reason, event.warning), ("SignalNotHandled", true));
        assert_eq!(pid1, Outcome::SignalNotHandled);
        assert_eq!(
            note,
            "sent SIGHUP to container nginx, but pid 1 (sleep) has no handler for SIGHUP: the kernel drops it unless the process waits for it (host pid 4242): configmap nginx-conf changed"
        );

        let (shared, note) = report(&job(), &delivery("sleep", 0, 7));
        assert_eq!(shared, Outcome::SignalWithheld);
        assert_eq!(shared.event().unwrap().reason, "SignalNotHandled");
        assert_eq!(
            note,
            "did not send SIGHUP to container nginx: process sleep (pid 4242) has no handler for SIGHUP and is not PID 1 of its PID namespace: SIGHUP would terminate the process: configmap nginx-conf changed"
        );
    }
}
