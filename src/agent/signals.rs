//! Signal jobs: one container of one pod, retried with backoff while the container restarts.

use crate::model::{ContainerId, PodInfo, ReloadSignal};
use std::time::{Duration, Instant};

/// Total attempts before `SignalFailed` is final (the delays are 0.5 s, 1 s, 2 s, 4 s).
pub const MAX_ATTEMPTS: u32 = 5;

#[derive(Clone, Debug)]
pub struct SignalJob {
    pub pod_uid: String,
    pub container: String,
    pub signal: ReloadSignal,
    /// "configmap nginx-conf changed"
    pub cause: String,
    pub first_seen: Instant,
    pub attempt: u32,
}

impl SignalJob {
    pub fn retry_delay(&self) -> Duration {
        Duration::from_millis(500) * 2u32.pow(self.attempt.saturating_sub(1).min(6))
    }
}

#[derive(Debug)]
pub struct SignalResult {
    pub job: SignalJob,
    pub outcome: Result<i32, String>,
}

/// The container's current runtime ID, or why it cannot be signalled now.
pub fn running_container_id(pod: &PodInfo, container: &str) -> Result<ContainerId, String> {
    let c = pod
        .containers
        .iter()
        .find(|c| c.name == container)
        .ok_or_else(|| format!("the pod has no container {container:?}"))?;
    match (&c.container_id, c.running) {
        (Some(id), true) => Ok(id.clone()),
        _ => Err(format!("container {container} is not running")),
    }
}

pub fn signaled_note(job: &SignalJob, pid: i32) -> String {
    format!(
        "sent {} to container {} (pid {pid}): {}",
        job.signal, job.container, job.cause
    )
}

pub fn failed_note(job: &SignalJob, error: &str) -> String {
    format!(
        "could not send {} to container {} after {} attempts: {error}; {}",
        job.signal, job.container, job.attempt, job.cause
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_double() {
        let mut job = SignalJob {
            pod_uid: "u".into(),
            container: "nginx".into(),
            signal: ReloadSignal::Hup,
            cause: "configmap nginx-conf changed".into(),
            first_seen: Instant::now(),
            attempt: 1,
        };
        let delays: Vec<u128> = (1..MAX_ATTEMPTS)
            .map(|a| {
                job.attempt = a;
                job.retry_delay().as_millis()
            })
            .collect();
        assert_eq!(delays, [500, 1000, 2000, 4000]);
        assert_eq!(
            signaled_note(&job, 4242),
            "sent SIGHUP to container nginx (pid 4242): configmap nginx-conf changed"
        );
    }
}
