//! Errors of the process edge.

use std::io;
use std::path::PathBuf;

use crate::core::model::{ContainerId, ReloadSignal};

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
