//! `SimKubelet`: follows the API server's pods of one node and makes them real — volumes
//! on disk through the AtomicWriter, processes in cgroups through [`SimRuntime`] — and
//! reports their status back.
//!
//! It runs on its own thread (plus one that forwards [`ApiChange`]s), so its public methods
//! are blocking; they only wait for that thread, never for the network.

use crate::apiserver::{ApiChange, ApiServer};
use crate::flavor::{CgroupDriver, CgroupVersion, Runtime};
pub use crate::kubelet_api::{KubeletApi, READY_DELAY_ANNOTATION};
use crate::kubelet_pod::{PodState, Stage};
use crate::kubelet_sync::{self, next_tick, SyncRecord};
pub use crate::kubelet_sync::{SyncMode, SyncReason};
use crate::projection;
use crate::runtime::{ContainerHandle, RuntimeConfig, RuntimeError, SimRuntime};
use crate::volumes::SourceKind;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
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

enum Msg {
    Api(ApiChange),
    /// Events were lost: compare with the API's list.
    Relist,
    Resync(mpsc::Sender<()>),
    RotateTokens(mpsc::Sender<()>),
    Handles(String, mpsc::Sender<Option<PodHandles>>),
    Syncs(String, mpsc::Sender<Vec<SyncRecord>>),
    Observed(String, mpsc::Sender<Option<String>>),
    Shutdown(mpsc::Sender<()>),
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
        let mut worker = Worker {
            api,
            opts,
            runtime,
            pods: HashMap::new(),
            timers: Vec::new(),
            started: Instant::now(),
            syncs: HashMap::new(),
            pod_ips: Default::default(),
        };
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

/// Work scheduled for later.
enum Timer {
    /// The delayed tmpfs mount, then the containers.
    FinishStart(String),
    Reproject(SourceKind, String, String),
    MarkReady(String),
    /// [`SyncMode::Faithful`]: the pod's periodic sync.
    Sync(String),
    /// [`SyncMode::Faithful`]: the sync right after a phase transition.
    PhaseSync(String),
}

/// Everything runs on this thread.
struct Worker {
    api: Box<dyn KubeletApi>,
    opts: KubeletOptions,
    runtime: SimRuntime,
    pods: HashMap<String, PodState>,
    timers: Vec<(Instant, Timer)>,
    /// When the sync loop's 1 s ticker started.
    started: Instant,
    /// Every sync of every pod, for tests.
    syncs: HashMap<String, Vec<SyncRecord>>,
    /// `status.podIP` of each new pod (the CNI plugin's job on a real node).
    pod_ips: crate::pod_ip::PodIps,
}

/// `terminationGracePeriodSeconds`, capped.
fn stop_grace(pod: &Pod, cap: Duration) -> Duration {
    let secs = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0);
    Duration::from_secs(secs as u64).min(cap)
}

fn ns_name(pod: &Pod) -> (String, String) {
    (
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

impl Worker {
    fn run(&mut self, rx: mpsc::Receiver<Msg>) {
        loop {
            self.fire_due_timers();
            let msg = match self.timers.iter().map(|(at, _)| *at).min() {
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(msg) => msg,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                None => match rx.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                },
            };
            match msg {
                Msg::Api(change) => self.on_change(change),
                Msg::Relist => self.relist(),
                Msg::Resync(reply) => {
                    self.relist();
                    self.resync_volumes();
                    let _ = reply.send(());
                }
                Msg::Syncs(uid, reply) => {
                    let _ = reply.send(self.syncs.get(&uid).cloned().unwrap_or_default());
                }
                Msg::Observed(uid, reply) => {
                    let rv = self
                        .pods
                        .get(&uid)
                        .and_then(|s| s.pod.metadata.resource_version.clone());
                    let _ = reply.send(rv);
                }
                Msg::RotateTokens(reply) => {
                    self.rotate_tokens();
                    let _ = reply.send(());
                }
                Msg::Handles(uid, reply) => {
                    let handles = self.handles(&uid);
                    let _ = reply.send(handles);
                }
                Msg::Shutdown(reply) => {
                    self.shutdown();
                    let _ = reply.send(());
                    return;
                }
            }
        }
        self.shutdown();
    }

    fn fire_due_timers(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.timers)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.timers = later;
        for (_, timer) in due {
            match timer {
                Timer::FinishStart(uid) => self.finish_start(&uid),
                Timer::Reproject(kind, ns, name) => self.reproject(kind, &ns, &name),
                Timer::MarkReady(uid) => self.mark_ready(&uid),
                Timer::Sync(uid) => self.sync_pod(&uid, SyncReason::Periodic),
                Timer::PhaseSync(uid) => self.sync_pod(&uid, SyncReason::PhaseTransition),
            }
        }
    }

    fn is_mine(&self, pod: &Pod) -> bool {
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.opts.node_name.as_str())
    }

    fn on_change(&mut self, change: ApiChange) {
        match change {
            ApiChange::PodUpserted(pod) => self.on_pod(*pod),
            ApiChange::PodDeleted(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.teardown(uid);
                }
            }
            ApiChange::ConfigMapChanged { namespace, name } => {
                self.on_source_change(SourceKind::ConfigMap, namespace, name)
            }
            ApiChange::SecretChanged { namespace, name } => {
                self.on_source_change(SourceKind::Secret, namespace, name)
            }
        }
    }

    fn on_pod(&mut self, pod: Pod) {
        if !self.is_mine(&pod) {
            return;
        }
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            self.teardown(&uid);
            let (ns, name) = ns_name(&pod);
            self.api.finalize_pod(&ns, &name);
            return;
        }
        match self.pods.get_mut(&uid) {
            None => self.start_pod(pod),
            Some(state) => {
                // spec, labels, annotations or deletion fields changed: the kubelet
                // syncs the pod at once (HandlePodUpdates); status only: it just keeps
                // the new copy (config.go checkAndUpdatePod)
                let differs = kubelet_sync::differs_semantically(&state.pod, &pod);
                state.pod = pod;
                if differs {
                    self.sync_pod(&uid, SyncReason::PodUpdate);
                }
            }
        }
    }

    fn start_pod(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.ensure_root_ca(&pod);
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let state = match PodState::create(&self.opts.root, pod) {
            Ok(mut state) => {
                state.pod_ip = if host_network {
                    crate::pod_ip::HOST_IP
                } else {
                    self.pod_ips.allocate()
                };
                state
            }
            Err(e) => {
                tracing::warn!(pod_uid = %uid, error = %e, "creating volume dirs failed");
                return;
            }
        };
        let delay = self
            .opts
            .tmpfs_mount_delay
            .filter(|_| state.has_tmpfs_volumes());
        self.pods.insert(uid.clone(), state);
        match delay {
            Some(d) => self
                .timers
                .push((Instant::now() + d, Timer::FinishStart(uid))),
            None => self.finish_start(&uid),
        }
    }

    /// The root-CA publisher's job: `kube-root-ca.crt` in the pod's namespace.
    fn ensure_root_ca(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let wants = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| {
                crate::volumes::volume_references(
                    v,
                    SourceKind::ConfigMap,
                    projection::ROOT_CA_CONFIGMAP,
                )
            });
        if wants
            && self
                .api
                .lookup()
                .configmap(ns, projection::ROOT_CA_CONFIGMAP)
                .is_none()
        {
            self.api.apply_configmap(projection::root_ca_configmap(ns));
        }
    }

    fn finish_start(&mut self, uid: &str) {
        let Some(state) = self.pods.get_mut(uid) else {
            return;
        };
        let first = state.stage == Stage::Created;
        match state.start(&mut self.runtime, self.api.as_ref()) {
            Ok(ready_delay) => {
                if let Some(d) = ready_delay {
                    self.timers
                        .push((Instant::now() + d, Timer::MarkReady(uid.to_owned())));
                }
            }
            Err(e) => tracing::warn!(pod_uid = %uid, error = %e, "pod not started"),
        }
        if first {
            self.record_sync(uid, SyncReason::Start);
            let running = self
                .pods
                .get(uid)
                .is_some_and(|s| s.stage == Stage::Running);
            if running && matches!(self.opts.sync_mode, SyncMode::Faithful { .. }) {
                // Pending → Running is a phase transition: completeWork re-enqueues the
                // pod with no delay, so it syncs again on the next tick.
                self.timers.push((
                    next_tick(self.started, Instant::now()),
                    Timer::PhaseSync(uid.to_owned()),
                ));
            } else {
                self.schedule_periodic(uid);
            }
        }
    }

    /// Notes a sync of the pod for tests.
    fn record_sync(&mut self, uid: &str, reason: SyncReason) {
        self.syncs
            .entry(uid.to_owned())
            .or_default()
            .push(SyncRecord {
                reason,
                at: Instant::now(),
            });
    }

    /// [`SyncMode::Faithful`]: the next periodic sync, `wait.Jitter(syncFrequency, 0.5)`
    /// after this one, on the sync loop's next tick (pod_workers.go `completeWork`).
    fn schedule_periodic(&mut self, uid: &str) {
        let SyncMode::Faithful { sync_frequency } = self.opts.sync_mode else {
            return;
        };
        self.timers
            .retain(|(_, t)| !matches!(t, Timer::Sync(u) | Timer::PhaseSync(u) if u == uid));
        let due = Instant::now()
            + kubelet_sync::jitter(sync_frequency, kubelet_sync::RESYNC_JITTER_FACTOR);
        self.timers
            .push((next_tick(self.started, due), Timer::Sync(uid.to_owned())));
    }

    /// One `SyncPod`: every volume re-projected from the API's current objects (a no-op
    /// where nothing changed); a pod still waiting for its volumes is retried. Then the
    /// periodic timer restarts.
    fn sync_pod(&mut self, uid: &str, reason: SyncReason) {
        match self.pods.get(uid).map(|s| s.stage) {
            Some(Stage::Running) => self.sync_volumes(uid),
            Some(Stage::VolumesPending) => self.finish_start(uid),
            Some(Stage::Failed) => {}
            // not started yet (tmpfs mount delay): its start is its first sync
            Some(Stage::Created) | None => return,
        }
        self.record_sync(uid, reason);
        self.schedule_periodic(uid);
    }

    /// A ConfigMap/Secret changed. The test shortcut projects it at once; the real
    /// kubelet syncs no pod for it (the next sync will see it), but the volume manager's
    /// reconciler keeps retrying mounts that failed, so a pod waiting for a missing
    /// source starts once it appears.
    fn on_source_change(&mut self, kind: SourceKind, ns: String, name: String) {
        if self.opts.sync_mode == SyncMode::ProjectOnChange {
            self.schedule_reproject(kind, ns, name);
            return;
        }
        let pending: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, s)| s.stage == Stage::VolumesPending && s.namespace() == ns)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in pending {
            self.finish_start(&uid);
        }
    }

    fn mark_ready(&mut self, uid: &str) {
        if let Some(state) = self.pods.get_mut(uid) {
            state.ready = true;
            state.report_status(self.api.as_ref());
        }
    }

    fn schedule_reproject(&mut self, kind: SourceKind, ns: String, name: String) {
        if self.opts.sync_delay.is_zero() {
            self.reproject(kind, &ns, &name);
        } else {
            self.timers.push((
                Instant::now() + self.opts.sync_delay,
                Timer::Reproject(kind, ns, name),
            ));
        }
    }

    /// Re-writes every volume fed by the ConfigMap/Secret; retries pods waiting for it.
    fn reproject(&mut self, kind: SourceKind, ns: &str, name: &str) {
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            let Some(state) = self.pods.get_mut(&uid) else {
                continue;
            };
            if state.namespace() != ns {
                continue;
            }
            match state.stage {
                Stage::Running => {
                    let uses = state
                        .pod
                        .spec
                        .iter()
                        .flat_map(|s| s.volumes.iter().flatten())
                        .any(|v| crate::volumes::volume_references(v, kind, name));
                    state.project_referencing(kind, name, self.api.lookup());
                    if uses {
                        self.record_sync(&uid, SyncReason::SourceChanged);
                    }
                }
                Stage::VolumesPending => self.finish_start(&uid),
                _ => {}
            }
        }
    }

    fn sync_volumes(&mut self, uid: &str) {
        if let Some(state) = self.pods.get_mut(uid) {
            state.project_all(self.api.lookup());
        }
    }

    fn resync_volumes(&mut self) {
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            self.sync_pod(&uid, SyncReason::Forced);
        }
    }

    fn rotate_tokens(&mut self) {
        for state in self.pods.values_mut() {
            if state.stage == Stage::Running {
                state.rotate_tokens(self.api.lookup());
            }
        }
    }

    /// Compares with the API's pod list: starts what is missing, stops what is gone.
    fn relist(&mut self) {
        let pods: Vec<Pod> = self
            .api
            .list_pods()
            .into_iter()
            .filter(|p| self.is_mine(p))
            .collect();
        let live: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|uid| !live.contains(uid))
            .cloned()
            .collect();
        for uid in gone {
            self.teardown(&uid);
        }
        for pod in pods {
            self.on_pod(pod);
        }
    }

    fn handles(&self, uid: &str) -> Option<PodHandles> {
        let state = self.pods.get(uid)?;
        if state.stage != Stage::Running {
            return None;
        }
        let (sandbox, containers) = self.runtime.handles(uid)?;
        Some(PodHandles {
            pod_uid: uid.to_owned(),
            sandbox,
            containers,
        })
    }

    fn teardown(&mut self, uid: &str) {
        let Some(state) = self.pods.remove(uid) else {
            return;
        };
        self.timers
            .retain(|(_, t)| !matches!(t, Timer::FinishStart(u) | Timer::MarkReady(u) | Timer::Sync(u) | Timer::PhaseSync(u) if u == uid));
        let grace = stop_grace(&state.pod, self.opts.max_stop_grace);
        if let Err(e) = self.runtime.stop_sandbox(uid, grace) {
            tracing::warn!(pod_uid = %uid, error = %e, "stopping the pod failed");
        }
        if let Err(e) = state.volumes.teardown() {
            tracing::warn!(pod_uid = %uid, error = %e, "volume teardown failed");
        }
    }

    fn shutdown(&mut self) {
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            if let Some(state) = self.pods.remove(&uid) {
                let _ = self.runtime.stop_sandbox(&uid, Duration::ZERO);
                let _ = state.volumes.teardown();
            }
        }
        self.runtime.shutdown();
        self.timers.clear();
    }
}
