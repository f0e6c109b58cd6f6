//! The OS edge that finds a container's main process through `/proc` and signals it.
//!
//! The main process is the one in the container's cgroup whose parent is not (the
//! runtime shim or CRI-O conmon is its parent); see node-facts.md §5. Signals go through
//! a pidfd after a re-check, so a reused PID never gets a signal meant for someone else.
//!
//! **PID namespace:** PIDs read from the proc root are signalled through `pidfd_open`,
//! which takes PIDs of the *agent's* PID namespace. The proc root must therefore be a
//! procfs of that namespace: run the agent with `hostPID: true` and use `/proc` (a host
//! `/proc` bind-mounted into a non-hostPID container would name the wrong processes).

pub mod cgroup;
mod disposition;
mod error;
mod pidfd;
mod proc_fs;
mod scan;
#[cfg(test)]
mod tests;

pub use disposition::{
    decide, describe, Handled, SignalCheck, SignalStatus, Unhandled, Verdict, Withheld,
    KNOWN_FORWARDING_INITS,
};
pub use error::{ProcessError, StatusError};
pub use proc_fs::ProcFs;

use crate::core::model::{ContainerId, ReloadSignal};

/// A container's main process, as found at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainProcess {
    /// The PID in the agent's PID namespace.
    pub pid: i32,
    /// `/proc/<pid>/stat` field 22 (clock ticks after boot): with the PID, it names
    /// one process for good, even after the PID is reused.
    pub start_time: u64,
}

/// What became of one signal: the process it was meant for, what that process does with it
/// (read from `/proc/<pid>/status` just before), and whether it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The main process, in the agent's PID namespace.
    pub pid: i32,
    pub status: SignalStatus,
    pub verdict: Verdict,
    /// `kill(2)` was used because the node refuses pidfds.
    pub by_kill: bool,
}

impl Delivery {
    /// The signal left reloadlet.
    pub fn sent(&self) -> bool {
        self.verdict.sends()
    }

    /// One line on what happens to `signal` at this process.
    pub fn describe(&self, signal: ReloadSignal) -> String {
        describe(&self.status, self.pid, signal, self.verdict)
    }
}

/// Finds and signals the main process of a pod's container.
pub trait ContainerProcesses: Send + Sync {
    /// The main process of the container: among processes whose cgroup (any hierarchy line)
    /// names this pod and container, the one whose parent is NOT in that same container
    /// cgroup; if several (e.g. `kubectl exec` sessions also have the shim as parent) the
    /// oldest by start time. Never the pause/sandbox process, never CRI-O conmon, never
    /// another pod's or container's process, never a child process.
    fn find_main_process(
        &self,
        pod_uid: &str,
        container: &ContainerId,
    ) -> Result<MainProcess, ProcessError>;

    /// Finds (or takes from a cache) the main process, opens a pidfd on it, re-verifies
    /// through /proc that the pidfd's process still is that container's main process (same
    /// start time, cgroup still names the container), reads what it does with `signal`
    /// ([`decide`], unless `check` is off), and sends it with `pidfd_send_signal` when the
    /// verdict says so (`kill(2)` after a fresh re-check where pidfds are refused).
    fn deliver(
        &self,
        pod_uid: &str,
        container: &ContainerId,
        signal: ReloadSignal,
        check: SignalCheck,
    ) -> Result<Delivery, ProcessError>;

    /// The hot path's [`deliver`](Self::deliver): only from what [`warm`](Self::warm) kept
    /// (a pidfd and an open `/proc/<pid>/status`), with no scan and no path lookup.
    /// `None` when nothing is kept or the kept process has exited (ESRCH): the caller then
    /// goes through `deliver`, which looks the main process up again, on a worker thread.
    fn deliver_kept(
        &self,
        _pod_uid: &str,
        _container: &ContainerId,
        _signal: ReloadSignal,
        _check: SignalCheck,
    ) -> Option<Result<Delivery, ProcessError>> {
        None
    }

    /// [`deliver`](Self::deliver) with the check on; the PID signalled, or
    /// [`ProcessError::Withheld`] when the process would not handle it.
    fn signal_container(
        &self,
        pod_uid: &str,
        container: &ContainerId,
        signal: ReloadSignal,
    ) -> Result<i32, ProcessError> {
        let delivery = self.deliver(pod_uid, container, signal, SignalCheck::On)?;
        if delivery.sent() {
            Ok(delivery.pid)
        } else {
            Err(ProcessError::Withheld {
                reason: delivery.describe(signal),
            })
        }
    }

    /// The main process and what `/proc/<pid>/status` says about its signals (for
    /// `explain`: the decision a signal would get now).
    fn inspect(
        &self,
        pod_uid: &str,
        container: &ContainerId,
    ) -> Result<(MainProcess, SignalStatus), ProcessError>;

    /// Finds the main processes of many containers in one pass over the proc root and
    /// remembers them, so that the signal for a later change costs two small reads instead
    /// of a scan. Returns how many were found. Best effort: errors are skipped.
    fn warm(&self, _targets: &[(String, ContainerId)]) -> usize {
        0
    }

    /// Forgets what is remembered about a pod that is gone.
    fn forget_pod(&self, _pod_uid: &str) {}
}
