//! Restart jobs (`reloadlet.io/action: restart`): one container of one pod is stopped the way
//! the kubelet stops it — its stop signal, then SIGKILL once the grace is over — through the
//! same pidfd path as a signal (it can only reach that container's main process); the
//! kubelet starts it again in the same pod. Restarts of one container are spaced by the
//! crash-loop window ([`crate::core::restart::MIN_SPACING`]); a change inside it is
//! deferred (Normal `RestartDeferred`), kept, and restarted at its end.

use crate::core::model::{ContainerId, PodInfo, ReloadSignal, SignalCheck, SourceRef};
use crate::core::restart::StopPlan;
use crate::ports::{ContainerProcesses, MainProcess, ProcessError};
use std::time::{Duration, Instant};

/// How often the main process is looked for while the grace runs.
const POLL: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
pub struct RestartJob {
    pub pod_uid: String,
    pub container: String,
    pub stop: StopPlan,
    pub first_seen: Instant,
    /// The ConfigMaps/Secrets whose change it is for.
    pub sources: Vec<SourceRef>,
    /// The writes of the changed volumes it is for (the pod's status record).
    pub seen: crate::execute::applied::Seen,
}

impl RestartJob {
    pub fn cause(&self) -> String {
        crate::core::policy::Cause::text(&self.sources)
    }

    /// The key restarts are spaced by.
    pub fn key(&self) -> (String, String) {
        (self.pod_uid.clone(), self.container.clone())
    }
}

/// The same restart: of the same container of the same pod.
impl PartialEq for RestartJob {
    fn eq(&self, other: &Self) -> bool {
        self.pod_uid == other.pod_uid && self.container == other.container
    }
}

impl Eq for RestartJob {}

/// How a stop ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stopped {
    pub pid: i32,
    /// SIGKILL was needed after the grace.
    pub killed: bool,
}

/// Why a restart did not stop the container.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    /// No such container, or it is not running.
    #[error("{0}")]
    Container(#[from] crate::execute::signal::SignalError),
    /// Its main process could not be found or sent the stop signal.
    #[error("{0}")]
    Process(#[from] ProcessError),
    /// The process outlived the grace and SIGKILL failed.
    #[error("SIGKILL after the grace: {0}")]
    Kill(ProcessError),
    /// The blocking task ended in a panic.
    #[error("the stop panicked: {0}")]
    Panicked(String),
    /// The container runs under another container ID than when the restart began: it
    /// started anew meanwhile (not an error to report: nothing more to stop).
    #[error("the container started anew meanwhile")]
    StartedAnew,
}

/// The ID of `container`'s container as the pod shows it (running or not), and whether it
/// runs.
pub fn shown_id(pod: &PodInfo, container: &str) -> (Option<String>, bool) {
    pod.containers
        .iter()
        .find(|c| c.name == container)
        .map(|c| (c.container_id.as_ref().map(|id| id.id.clone()), c.running))
        .unwrap_or((None, false))
}

impl RestartError {
    /// The container was not reached (not shown running, its main process not found or not
    /// signalled): nothing was sent, so a later attempt is a first one.
    pub fn nothing_sent(&self) -> bool {
        matches!(self, Self::Container(_) | Self::Process(_))
    }
}

/// Stops the main process of `container`: `stop.signal` (unchecked: the kubelet does not
/// look either), then, while the same process (PID and start time) is still the
/// container's main process after `stop.grace`, SIGKILL. Blocking (polls `/proc`).
pub fn stop(
    processes: &dyn ContainerProcesses,
    pod: &PodInfo,
    job: &RestartJob,
) -> Result<Stopped, RestartError> {
    let id = crate::execute::signal::running_container_id(pod, &job.container)?.clone();
    let main = processes.find_main_process(&job.pod_uid, &id)?;
    let delivery = processes.deliver(&job.pod_uid, &id, job.stop.signal, SignalCheck::Off)?;
    let deadline = crate::core::durations::later(Instant::now(), job.stop.grace);
    while Instant::now() < deadline {
        if !still_running(processes, &job.pod_uid, &id, main) {
            return Ok(Stopped {
                pid: delivery.pid,
                killed: false,
            });
        }
        std::thread::sleep(POLL);
    }
    if !still_running(processes, &job.pod_uid, &id, main) {
        return Ok(Stopped {
            pid: delivery.pid,
            killed: false,
        });
    }
    match processes.deliver(&job.pod_uid, &id, ReloadSignal::Kill, SignalCheck::Off) {
        Ok(_) | Err(ProcessError::NoProcess { .. }) => Ok(Stopped {
            pid: delivery.pid,
            killed: true,
        }),
        Err(e) => Err(RestartError::Kill(e)),
    }
}

fn still_running(
    processes: &dyn ContainerProcesses,
    pod_uid: &str,
    id: &ContainerId,
    main: MainProcess,
) -> bool {
    processes.find_main_process(pod_uid, id).ok() == Some(main)
}

/// The Event's note of a restart (`drain`: what became of the drain first; `also`: more to
/// say before the cause, e.g. `"; …"`).
pub fn restarted_note(
    job: &RestartJob,
    stopped: &Stopped,
    drain: &crate::execute::drain::Drain,
    also: &str,
) -> String {
    let how = if stopped.killed {
        format!(
            "{}, then SIGKILL after {}",
            job.stop.signal,
            humantime::format_duration(job.stop.grace)
        )
    } else {
        job.stop.signal.name().to_owned()
    };
    let drained = drain.note();
    format!(
        "stopped container {} (pid {}) with {how}; the kubelet starts it again in the same pod{drained}{also}: {}",
        job.container,
        stopped.pid,
        job.cause()
    )
}

/// The Event's note of a deferral.
pub fn deferred_note(job: &RestartJob, spacing: Duration, wait: Duration) -> String {
    format!(
        "container {} restarted less than {} ago (the kubelet's crash-loop back-off); restart deferred by {}, then on the latest content: {}",
        job.container,
        humantime::format_duration(spacing),
        humantime::format_duration(Duration::from_secs(wait.as_secs())),
        job.cause()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ContainerInfo, ContainerKind, SourceKind};
    use crate::ports::fake;

    fn pod() -> PodInfo {
        PodInfo {
            uid: "u".into(),
            containers: vec![ContainerInfo {
                name: "app".into(),
                kind: ContainerKind::Regular,
                mounts: vec![],
                container_id: ContainerId::parse("containerd://abc"),
                running: true,
                ports: vec![],
            }],
            ..Default::default()
        }
    }

    fn job(grace: Duration) -> RestartJob {
        RestartJob {
            seen: Default::default(),
            pod_uid: "u".into(),
            container: "app".into(),
            stop: StopPlan {
                signal: ReloadSignal::Term,
                grace,
                drain: None,
                timeout: crate::core::restart::DEFAULT_TIMEOUT,
            },
            first_seen: Instant::now(),
            sources: vec![SourceRef {
                kind: SourceKind::ConfigMap,
                name: "app-config".into(),
            }],
        }
    }

    #[test]
    fn a_process_that_outlives_the_grace_gets_sigkill_through_the_same_path() {
        // the fake's process never exits: TERM, then KILL
        let processes = fake::Processes::with("abc", 4242);
        let stopped = stop(&processes, &pod(), &job(Duration::from_millis(150))).unwrap();
        assert_eq!(
            stopped,
            Stopped {
                pid: 4242,
                killed: true
            }
        );
        let sent: Vec<ReloadSignal> = processes
            .sent
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, s)| *s)
            .collect();
        assert_eq!(sent, [ReloadSignal::Term, ReloadSignal::Kill]);
        use crate::execute::drain::Drain;
        let note = restarted_note(&job(Duration::from_secs(30)), &stopped, &Drain::NoGate, "");
        assert_eq!(note, "stopped container app (pid 4242) with SIGTERM, then SIGKILL after 30s; the kubelet starts it again in the same pod; traffic was not drained first (the pod has no readiness gate reloadlet.io/restart-drain): configmap app-config changed");
        let note = restarted_note(
            &job(Duration::from_secs(30)),
            &stopped,
            &Drain::Drained(Duration::from_secs(5)),
            "",
        );
        assert!(note.contains("; traffic was drained for 5s first (readiness gate reloadlet.io/restart-drain False; set True again once the container is ready): configmap"), "{note}");
    }

    #[test]
    fn a_process_that_exits_in_the_grace_gets_no_sigkill() {
        let processes = fake::Processes::with("abc", 4242);
        let p = pod();
        let j = job(Duration::from_secs(5));
        // it exits as soon as it is signalled
        let stopped = std::thread::scope(|s| {
            let h = s.spawn(|| stop(&processes, &p, &j));
            while processes.sent() == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
            processes.pids.lock().unwrap().clear();
            h.join().unwrap()
        })
        .unwrap();
        assert!(!stopped.killed);
        assert_eq!(processes.sent(), 1);
    }

    #[test]
    fn a_container_not_running_is_not_restarted() {
        let processes = fake::Processes::with("abc", 4242);
        let mut p = pod();
        p.containers[0].running = false;
        assert!(stop(&processes, &p, &job(Duration::ZERO)).is_err());
        assert_eq!(processes.sent(), 0);
    }
}
