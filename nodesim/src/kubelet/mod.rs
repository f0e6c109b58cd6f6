//! `SimKubelet`: follows the API server's pods of one node and makes them real — volumes
//! on disk through the AtomicWriter, processes in cgroups through [`SimRuntime`] — and
//! reports their status back.
//!
//! It runs on its own thread (plus one that forwards [`ApiChange`]s), so its public methods
//! are blocking; they only wait for that thread, never for the network.

mod api;
mod options;
mod pod;
pub mod qos;
pub mod readiness_gates;
pub mod sync;
mod worker;

use crate::apiserver::ApiServer;
pub use crate::kubelet::api::{KubeletApi, READY_DELAY_ANNOTATION};
pub use crate::kubelet::options::{KubeletOptions, PodHandles};
use crate::kubelet::sync::SyncRecord;
pub use crate::kubelet::sync::{SyncMode, SyncReason};
use crate::kubelet::worker::{Msg, Worker};
use crate::runtime::{RuntimeConfig, RuntimeError, SimRuntime};
use crate::volumes::Rotation;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Errors starting the kubelet.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("container runtime: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("starting the kubelet thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The simulated kubelet of one node.
pub struct SimKubelet {
    tx: mpsc::Sender<Msg>,
    worker: Option<JoinHandle<()>>,
    node_name: String,
}

impl SimKubelet {
    /// Subscribes to the API, syncs the pods already bound to this node, then follows changes.
    pub fn start(api: ApiServer, opts: KubeletOptions) -> Result<SimKubelet, KubeletError> {
        Self::start_with(Box::new(api), opts)
    }

    /// [`SimKubelet::start`] against any [`KubeletApi`].
    pub fn start_with(
        api: Box<dyn KubeletApi>,
        opts: KubeletOptions,
    ) -> Result<SimKubelet, KubeletError> {
        let runtime = SimRuntime::new(RuntimeConfig {
            runtime: opts.runtime,
            driver: opts.driver,
            cgroup_version: opts.cgroup_version,
            log_dir: opts.work_dir.join("logs"),
        })?;
        let (tx, rx) = mpsc::channel();
        let mut changes = api.subscribe();
        let forward = tx.clone();
        std::thread::Builder::new()
            .name(format!("kubelet-watch-{}", opts.node_name))
            .spawn(move || loop {
                let msg = match changes.blocking_recv() {
                    Ok(change) => Msg::Api(change),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Msg::Relist,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                if forward.send(msg).is_err() {
                    return;
                }
            })
            .map_err(KubeletError::Thread)?;
        let node_name = opts.node_name.clone();
        let mut worker = Worker::new(api, opts, runtime);
        let handle = std::thread::Builder::new()
            .name(format!("kubelet-{node_name}"))
            .spawn(move || {
                worker.relist();
                worker.run(rx);
            })
            .map_err(KubeletError::Thread)?;
        Ok(SimKubelet {
            tx,
            worker: Some(handle),
            node_name,
        })
    }

    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    fn ask<T>(&self, make: impl FnOnce(mpsc::Sender<T>) -> Msg) -> Option<T> {
        let (reply, answer) = mpsc::channel();
        self.tx.send(make(reply)).ok()?;
        answer.recv().ok()
    }

    /// The periodic sync: every volume of every pod re-projected (a no-op when unchanged),
    /// pods missed or gone reconciled with the API's list. Returns once done.
    pub fn resync_all(&self) {
        self.ask(Msg::Resync);
    }

    /// The service-account token refresh (every ~48 minutes on a real node), now: every
    /// volume with a `serviceAccountToken` source swaps its `..data`. Returns once done.
    pub fn rotate_tokens(&self) {
        self.ask(|reply| Msg::Rotate(Rotation::Tokens, reply));
    }

    /// The pod certificate refresh (from each certificate's `beginRefreshAt` on a real node),
    /// now: every volume with a `podCertificate` source gets a new key and chain and swaps its
    /// `..data`. Returns once done.
    pub fn rotate_pod_certificates(&self) {
        self.ask(|reply| Msg::Rotate(Rotation::PodCertificates, reply));
    }

    /// Host PIDs of the pod's pause, conmon and container processes, once it runs.
    pub fn pod_handles(&self, pod_uid: &str) -> Option<PodHandles> {
        self.ask(|reply| Msg::Handles(pod_uid.to_owned(), reply))
            .flatten()
    }

    /// Every sync of the pod so far, oldest first (volumes are re-projected at each).
    pub fn syncs(&self, pod_uid: &str) -> Vec<SyncRecord> {
        self.ask(|reply| Msg::Syncs(pod_uid.to_owned(), reply))
            .unwrap_or_default()
    }

    /// Every `..data` swap the pod's syncs made so far, oldest first (with
    /// [`SyncMode::Faithful`], made by the volume manager's passes after the sync).
    pub fn swaps(&self, pod_uid: &str) -> Vec<crate::kubelet::sync::SwapRecord> {
        self.ask(|reply| Msg::Swaps(pod_uid.to_owned(), reply))
            .unwrap_or_default()
    }

    /// The resourceVersion of the pod object the kubelet has last seen (also for
    /// changes that did not sync it). Changes reach the kubelet in the API's order, so
    /// once this shows a version, every earlier change (of any object) was handled.
    pub fn observed_resource_version(&self, pod_uid: &str) -> Option<String> {
        self.ask(|reply| Msg::Observed(pod_uid.to_owned(), reply))
            .flatten()
    }

    /// Waits (polling, up to `timeout`) until the pod's containers run.
    pub fn wait_for_pod(&self, pod_uid: &str, timeout: Duration) -> Option<PodHandles> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(h) = self.pod_handles(pod_uid) {
                return Some(h);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills every process, unmounts and removes every volume and cgroup.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(worker) = self.worker.take() {
            self.ask(Msg::Shutdown);
            let _ = worker.join();
        }
    }
}

impl Drop for SimKubelet {
    fn drop(&mut self) {
        self.stop();
    }
}
