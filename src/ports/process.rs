//! The OS edge of the agent's executor: finding a container's main process and signalling
//! it (`host::process::ProcFs` through `/proc` and pidfds; `fake::Processes` in tests), and
//! what crosses it.

use crate::core::disposition::{describe, SignalCheck, SignalStatus, Verdict};
use crate::core::model::{ContainerId, ReloadSignal};
use std::io;
use std::path::PathBuf;

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
    /// ([`decide`](crate::core::disposition::decide), unless `check` is off), and sends it with `pidfd_send_signal` when the
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

/// Why a container's main process could not be found or signalled.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The pod UID is neither a UUID nor a 32-hex static-pod hash.
    #[error("{pod_uid:?} is not a pod UID")]
    InvalidPodUid { pod_uid: String },

    /// No running process sits in the container's cgroup (not started yet, exited, or
    /// the proc root is not the node's PID namespace).
    #[error("no running process of container {container} of pod {pod_uid} under {proc_root}")]
    NoProcess {
        pod_uid: String,
        container: ContainerId,
        proc_root: PathBuf,
    },

    /// The main process exited (or its PID was reused) between finding and signalling it,
    /// twice in a row.
    #[error("main process {pid} of container {container} of pod {pod_uid} vanished before it could be signalled")]
    Vanished {
        pod_uid: String,
        container: ContainerId,
        pid: i32,
    },

    /// The proc root itself could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// `/proc/<pid>/status` of the main process could not be read or parsed: nothing is
    /// sent without knowing what the process does with the signal.
    #[error("cannot read the signal masks of process {pid} from {path}: {why}")]
    Status {
        pid: i32,
        path: PathBuf,
        why: StatusError,
    },

    /// The process would not handle the signal (ignored, or its default action would kill
    /// it); nothing was sent.
    #[error("{reason}")]
    Withheld { reason: String },

    /// `pidfd_open` or `pidfd_send_signal` failed for a reason other than the process
    /// being gone (e.g. EPERM, or ENOSYS before Linux 5.3).
    #[error("cannot send {signal} to process {pid}: {source}")]
    Signal {
        pid: i32,
        signal: ReloadSignal,
        #[source]
        source: io::Error,
    },
}

/// Why `/proc/<pid>/status` told nothing about a process's signals.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("no SigBlk/SigIgn/SigCgt lines")]
    NoMasks,
    #[error(transparent)]
    Read(#[from] procfs::ProcError),
}
