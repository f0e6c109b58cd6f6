//! `SimKubelet`: follows the API server's pods of one node and makes them real — volumes
//! on disk through the AtomicWriter, processes in cgroups through [`SimRuntime`] — and
//! reports their status back.
//!
//! It runs on its own thread (plus one that forwards [`ApiChange`]s), so its public methods
//! are blocking; they only wait for that thread, never for the network.

use crate::apiserver::ApiServer;
use crate::flavor::{CgroupDriver, CgroupVersion, Runtime};
pub use crate::kubelet_api::{KubeletApi, READY_DELAY_ANNOTATION};
use crate::kubelet_sync::SyncRecord;
pub use crate::kubelet_sync::{SyncMode, SyncReason};
use crate::kubelet_worker::{Msg, Worker};
use crate::runtime::{ContainerHandle, RuntimeConfig, RuntimeError, SimRuntime};
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the simulated node is set up.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    /// The kubelet root (`/var/lib/kubelet` on a real node): volumes go to `<root>/pods/…`.
    pub root: PathBuf,
    pub node_name: String,
    pub runtime: Runtime,
    pub driver: CgroupDriver,
    pub cgroup_version: CgroupVersion,
    /// When volumes are re-projected: [`SyncMode::ProjectOnChange`] (the test shortcut,
    /// the default of [`KubeletOptions::new`]) or the kubelet's real timing
    /// ([`SyncMode::Faithful`], see [`crate::kubelet_sync`]).
    pub sync_mode: SyncMode,
    /// [`SyncMode::ProjectOnChange`] only: delay between a ConfigMap/Secret change and
    /// the re-projection (0 = at once).
    pub sync_delay: Duration,
    /// Mount the tmpfs of secret/projected volumes this long after the volume dirs are
    /// created (the pod's containers start after it). `None`: at once.
    pub tmpfs_mount_delay: Option<Duration>,
    /// Container logs and other scratch files.
    pub work_dir: PathBuf,
    /// Upper bound on `terminationGracePeriodSeconds` when stopping containers.
    pub max_stop_grace: Duration,
}

impl KubeletOptions {
    /// containerd, systemd driver, cgroup v2, no delays, 2 s stop grace at most, and the
    /// [`SyncMode::ProjectOnChange`] test shortcut (use [`KubeletOptions::faithful`] for
    /// the kubelet's real sync timing).
    pub fn new(
        root: impl Into<PathBuf>,
        work_dir: impl Into<PathBuf>,
        node_name: impl Into<String>,
    ) -> Self {
        Self {
            root: root.into(),
            node_name: node_name.into(),
            runtime: Runtime::Containerd,
            driver: CgroupDriver::Systemd,
            cgroup_version: CgroupVersion::V2,
            sync_mode: SyncMode::ProjectOnChange,
            sync_delay: Duration::ZERO,
            tmpfs_mount_delay: None,
            work_dir: work_dir.into(),
            max_stop_grace: Duration::from_secs(2),
        }
    }
}

impl KubeletOptions {
    /// The kubelet's real sync timing with this `syncFrequency` (60 s on a real node).
    pub fn faithful(mut self, sync_frequency: Duration) -> Self {
        self.sync_mode = SyncMode::Faithful { sync_frequency };
        self
    }
}

/// Host PIDs and cgroups of one pod, for tests.
#[derive(Clone, Debug)]
pub struct PodHandles {
    pub pod_uid: String,
    /// The pause process.
    pub sandbox: ContainerHandle,
    /// Running containers: restartable (sidecar) init containers first, then regular ones.
    pub containers: Vec<ContainerHandle>,
}

impl PodHandles {
    pub fn container(&self, name: &str) -> Option<&ContainerHandle> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// CRI-O's conmon processes (empty for other runtimes).
    pub fn conmon_pids(&self) -> Vec<i32> {
        std::iter::once(&self.sandbox)
            .chain(&self.containers)
            .filter_map(|c| c.conmon_pid)
            .collect()
    }
}

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
        self.ask(Msg::RotateTokens);
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
