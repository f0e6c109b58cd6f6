//! A workload's readiness at every change of the server's pods, for tests that must show
//! a rollout never left a workload without a Ready pod (or that it did): sampled by the
//! server under its lock each time a pod is committed, so no moment is missed and nothing
//! polls.

use super::model::Key;
use super::readiness_log::Tracker;
pub use super::readiness_log::{ReadinessLog, ReadinessWatch, ReadySample, WorkloadKind};
use super::store::State;
use super::workloads::is_ready;
use k8s_openapi::api::core::v1::Pod;
use std::sync::{Arc, Mutex};

impl State {
    /// Starts a readiness log of a workload; `None` when it does not exist.
    pub(crate) fn track_readiness(
        &mut self,
        kind: WorkloadKind,
        key: &Key,
    ) -> Option<ReadinessWatch> {
        let w = &self.workloads;
        let uid = match kind {
            WorkloadKind::Deployment => w.deployments.get(key)?.metadata.uid.clone(),
            WorkloadKind::StatefulSet => w.statefulsets.get(key)?.metadata.uid.clone(),
            WorkloadKind::DaemonSet => w.daemonsets.get(key)?.metadata.uid.clone(),
            WorkloadKind::Rollout => w.rollouts.get(key)?.metadata.uid.clone(),
        }?;
        let log = Arc::new(Mutex::new(ReadinessLog::default()));
        self.workloads.trackers.push(Tracker {
            uid,
            log: Arc::downgrade(&log),
        });
        self.sample_readiness();
        Some(ReadinessWatch { log })
    }

    /// One sample per open tracker (kept when it differs from the previous one).
    pub(crate) fn sample_readiness(&mut self) {
        self.workloads.trackers.retain(|t| t.log.strong_count() > 0);
        if self.workloads.trackers.is_empty() {
            return;
        }
        for t in &self.workloads.trackers {
            let Some(log) = t.log.upgrade() else { continue };
            let pods: Vec<&Pod> = self
                .pods
                .values()
                .filter(|p| self.pod_of_workload(p, &t.uid))
                .collect();
            let terminating = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_some())
                .count();
            let sample = ReadySample {
                resource_version: self.rv,
                ready: pods.iter().filter(|p| is_ready(p)).count(),
                running: pods.len() - terminating,
                terminating,
            };
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            let same = log.samples.last().is_some_and(|l| {
                (l.ready, l.running, l.terminating)
                    == (sample.ready, sample.running, sample.terminating)
            });
            if !same {
                log.samples.push(sample);
            }
        }
    }
}
