//! `SimKubelet`: follows the API server's pods of one node and makes them real — volumes
//! on disk through the AtomicWriter, processes in cgroups through [`SimRuntime`] — and
//! reports their status back.
//!
//! It runs on its own thread (plus one that forwards [`ApiChange`]s), so its public methods
//! are blocking; they only wait for that thread, never for the network.

use crate::apiserver::{ApiChange, ApiServer};
use crate::flavor::{CgroupDriver, CgroupVersion, Runtime};
use crate::kubelet_pod::{self, PodState, Stage};
use crate::projection::{self, SourceLookup};
use crate::runtime::{ContainerHandle, RuntimeConfig, RuntimeError, SimRuntime};
use crate::volumes::SourceKind;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Pod annotation: milliseconds after start before the pod reports Ready=True.
pub const READY_DELAY_ANNOTATION: &str = "nodesim.reloadlet.io/ready-delay-ms";

/// How the simulated node is set up.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    /// The kubelet root (`/var/lib/kubelet` on a real node): volumes go to `<root>/pods/…`.
    pub root: PathBuf,
    pub node_name: String,
    pub runtime: Runtime,
    pub driver: CgroupDriver,
    pub cgroup_version: CgroupVersion,
    /// Delay between a ConfigMap/Secret change and the re-projection (the kubelet's sync
    /// period and cache; 0 = at once).
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
    /// containerd, systemd driver, cgroup v2, no delays, 2 s stop grace at most.
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
            sync_delay: Duration::ZERO,
            tmpfs_mount_delay: None,
            work_dir: work_dir.into(),
            max_stop_grace: Duration::from_secs(2),
        }
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
}

/// Everything runs on this thread.
struct Worker {
    api: Box<dyn KubeletApi>,
    opts: KubeletOptions,
    runtime: SimRuntime,
    pods: HashMap<String, PodState>,
    timers: Vec<(Instant, Timer)>,
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
                self.schedule_reproject(SourceKind::ConfigMap, namespace, name)
            }
            ApiChange::SecretChanged { namespace, name } => {
                self.schedule_reproject(SourceKind::Secret, namespace, name)
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
                // spec, labels or annotations changed: the kubelet syncs the pod at once
                let differs = kubelet_pod::differs_semantically(&state.pod, &pod);
                state.pod = pod;
                if differs && state.stage == Stage::Running {
                    self.sync_volumes(&uid);
                } else if differs && state.stage == Stage::VolumesPending {
                    self.finish_start(&uid);
                }
            }
        }
    }

    fn start_pod(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.ensure_root_ca(&pod);
        let state = match PodState::create(&self.opts.root, pod) {
            Ok(state) => state,
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
        match state.start(&mut self.runtime, self.api.as_ref()) {
            Ok(ready_delay) => {
                if let Some(d) = ready_delay {
                    self.timers
                        .push((Instant::now() + d, Timer::MarkReady(uid.to_owned())));
                }
            }
            Err(e) => tracing::warn!(pod_uid = %uid, error = %e, "pod not started"),
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
                Stage::Running => state.project_referencing(kind, name, self.api.lookup()),
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
            match self.pods.get(&uid).map(|s| s.stage) {
                Some(Stage::Running) => self.sync_volumes(&uid),
                Some(Stage::VolumesPending) => self.finish_start(&uid),
                _ => {}
            }
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
            .retain(|(_, t)| !matches!(t, Timer::FinishStart(u) | Timer::MarkReady(u) if u == uid));
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

/// What the kubelet needs from the API server (implemented by [`ApiServer`]; tests may
/// use a fake).
pub trait KubeletApi: Send + 'static {
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ApiChange>;
    fn list_pods(&self) -> Vec<Pod>;
    fn set_pod_status(&self, namespace: &str, name: &str, status: PodStatus);
    /// Removes a terminating pod once the kubelet has stopped it.
    fn finalize_pod(&self, namespace: &str, name: &str);
    /// The root-CA publisher puts `kube-root-ca.crt` in namespaces through this.
    fn apply_configmap(&self, cm: ConfigMap);
    /// ConfigMaps and Secrets.
    fn lookup(&self) -> &dyn SourceLookup;
}

impl KubeletApi for ApiServer {
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ApiChange> {
        ApiServer::subscribe(self)
    }
    fn list_pods(&self) -> Vec<Pod> {
        ApiServer::list_pods(self)
    }
    fn set_pod_status(&self, namespace: &str, name: &str, status: PodStatus) {
        ApiServer::set_pod_status(self, namespace, name, status)
    }
    fn finalize_pod(&self, namespace: &str, name: &str) {
        ApiServer::finalize_pod(self, namespace, name);
    }
    fn apply_configmap(&self, cm: ConfigMap) {
        ApiServer::apply_configmap(self, cm);
    }
    fn lookup(&self) -> &dyn SourceLookup {
        self
    }
}
