//! What a readiness log of a workload is (the records; `super::readiness` samples them under
//! the server's lock).

use std::sync::{Arc, Mutex, Weak};

/// The kind of a workload, for [`super::ApiServer::track_readiness`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    /// An Argo Rollout (with [`super::ApiServerOptions::argo_rollouts`]).
    Rollout,
}

/// The pods of a workload at one change of the server's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadySample {
    /// The resourceVersion of the pod change.
    pub resource_version: u64,
    /// Pods with condition Ready True and no `deletionTimestamp` (a terminating pod is no
    /// longer a ready endpoint: EndpointSlice `ready` is false for terminating endpoints).
    pub ready: usize,
    /// Pods without a `deletionTimestamp`.
    pub running: usize,
    /// Pods with a `deletionTimestamp`, not yet removed.
    pub terminating: usize,
}

/// Every distinct state of a workload's pods since tracking began.
#[derive(Clone, Debug, Default)]
pub struct ReadinessLog {
    pub samples: Vec<ReadySample>,
}

impl ReadinessLog {
    /// Whether there was a moment with no Ready pod.
    pub fn ever_zero_ready(&self) -> bool {
        self.samples.iter().any(|s| s.ready == 0)
    }
    /// The fewest Ready pods at any moment.
    pub fn min_ready(&self) -> Option<usize> {
        self.samples.iter().map(|s| s.ready).min()
    }
    /// The most non-terminating pods at any moment (replicas + surge).
    pub fn max_running(&self) -> usize {
        self.samples.iter().map(|s| s.running).max().unwrap_or(0)
    }
}

/// A workload's readiness, sampled by the server under its lock on every pod change (not
/// polled), from [`super::ApiServer::track_readiness`] until dropped.
#[derive(Clone, Debug)]
pub struct ReadinessWatch {
    pub(crate) log: Arc<Mutex<ReadinessLog>>,
}

impl ReadinessWatch {
    /// What was seen so far.
    pub fn log(&self) -> ReadinessLog {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

pub(crate) struct Tracker {
    /// The workload's UID: its pods are those it controls, directly or through a
    /// ReplicaSet it controls.
    pub uid: String,
    pub log: Weak<Mutex<ReadinessLog>>,
}
