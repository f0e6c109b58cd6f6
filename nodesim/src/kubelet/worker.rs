//! The simulated kubelet's worker thread: every pod's lifecycle, its syncs and timers, the
//! volume projections and the containers, driven by [`Msg`]s from
//! [`SimKubelet`](crate::kubelet::SimKubelet).

use crate::apiserver::ApiChange;
use crate::crash_backoff::{self, CrashLoopBackOff};
use crate::kubelet::api::KubeletApi;
use crate::kubelet::options::{KubeletOptions, PodHandles};
use crate::kubelet::pod::{PodState, Stage};
use crate::kubelet::sync::{self as kubelet_sync, next_tick, remount_at, SwapRecord, SyncRecord};
use crate::kubelet::sync::{SyncMode, SyncReason};
use crate::runtime::SimRuntime;
use crate::volumes::projection;
use crate::volumes::{Rotation, SourceKind};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What [`SimKubelet`](crate::kubelet::SimKubelet) asks of its worker thread.
pub(crate) enum Msg {
    Api(ApiChange),
    /// Events were lost: compare with the API's list.
    Relist,
    Resync(mpsc::Sender<()>),
    Rotate(Rotation, mpsc::Sender<()>),
    Handles(String, mpsc::Sender<Option<PodHandles>>),
    Syncs(String, mpsc::Sender<Vec<SyncRecord>>),
    Swaps(String, mpsc::Sender<Vec<SwapRecord>>),
    Observed(String, mpsc::Sender<Option<String>>),
    Shutdown(mpsc::Sender<()>),
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
    /// [`SyncMode::Faithful`]: the volume manager's reconciler pass that re-projects a synced
    /// pod's volumes ([`kubelet_sync::remount_at`]).
    Remount(String),
    /// The PLEG's relist: which containers exited since the last one.
    Pleg,
    /// A container's crash-loop back-off is over (pod UID, container, when it exited).
    StartContainer(String, String, Instant),
}

/// `genericPlegRelistPeriod` (pkg/kubelet/kubelet.go): how often the kubelet lists the
/// runtime's containers to see which exited.
const PLEG_RELIST_PERIOD: Duration = Duration::from_secs(1);

/// Everything runs on this thread.
pub(crate) struct Worker {
    api: Box<dyn KubeletApi>,
    opts: KubeletOptions,
    runtime: SimRuntime,
    pods: HashMap<String, PodState>,
    timers: Vec<(Instant, Timer)>,
    /// When the sync loop's 1 s ticker started.
    started: Instant,
    /// Every sync of every pod, for tests.
    syncs: HashMap<String, Vec<SyncRecord>>,
    /// Every `..data` swap a sync made, per pod, for tests and benchmarks.
    swaps: HashMap<String, Vec<SwapRecord>>,
    /// When the volume manager's populator and reconciler loops started (random phases).
    volume_loops: (Instant, Instant),
    /// `status.podIP` of each new pod (the CNI plugin's job on a real node).
    pod_ips: crate::pod_ip::PodIps,
    /// The crash-loop back-off of every container of this node.
    backoff: CrashLoopBackOff,
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
    pub(crate) fn new(api: Box<dyn KubeletApi>, opts: KubeletOptions, runtime: SimRuntime) -> Self {
        Worker {
            api,
            opts,
            runtime,
            pods: HashMap::new(),
            timers: Vec::new(),
            started: Instant::now(),
            syncs: HashMap::new(),
            swaps: HashMap::new(),
            volume_loops: (
                kubelet_sync::loop_start(Instant::now(), kubelet_sync::POPULATOR_PERIOD),
                kubelet_sync::loop_start(Instant::now(), kubelet_sync::RECONCILER_PERIOD),
            ),
            pod_ips: Default::default(),
            backoff: CrashLoopBackOff::default(),
        }
    }

    pub(crate) fn run(&mut self, rx: mpsc::Receiver<Msg>) {
        self.timers
            .push((Instant::now() + PLEG_RELIST_PERIOD, Timer::Pleg));
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
                Msg::Swaps(uid, reply) => {
                    let _ = reply.send(self.swaps.get(&uid).cloned().unwrap_or_default());
                }
                Msg::Observed(uid, reply) => {
                    let rv = self
                        .pods
                        .get(&uid)
                        .and_then(|s| s.pod.metadata.resource_version.clone());
                    let _ = reply.send(rv);
                }
                Msg::Rotate(what, reply) => {
                    self.rotate(what);
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
                Timer::Remount(uid) => self.sync_volumes(&uid),
                Timer::Pleg => {
                    self.pleg_relist();
                    self.timers
                        .push((Instant::now() + PLEG_RELIST_PERIOD, Timer::Pleg));
                }
                Timer::StartContainer(uid, name, finished) => {
                    self.start_again(&uid, &name, finished)
                }
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
                let reconcile = super::readiness_gates::needs_reconcile(&pod);
                state.pod = pod;
                if differs {
                    self.sync_pod(&uid, SyncReason::PodUpdate);
                } else if reconcile {
                    // HandlePodReconcile: a readiness gate's condition changed Ready
                    state.report_status(self.api.as_ref());
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
    /// where nothing changed) — with [`SyncMode::Faithful`] by the volume manager's next
    /// passes, else at once, as for [`SyncReason::Forced`] (`resync_all` returns once
    /// done); a pod still waiting for its volumes is retried. Then the periodic timer
    /// restarts.
    fn sync_pod(&mut self, uid: &str, reason: SyncReason) {
        let faithful = matches!(self.opts.sync_mode, SyncMode::Faithful { .. });
        match self.pods.get(uid).map(|s| s.stage) {
            Some(Stage::Running) if faithful && reason != SyncReason::Forced => {
                self.schedule_remount(uid)
            }
            Some(Stage::Running) => self.sync_volumes(uid),
            Some(Stage::VolumesPending) => self.finish_start(uid),
            Some(Stage::Failed) => {}
            // not started yet (tmpfs mount delay): its start is its first sync
            Some(Stage::Created) | None => return,
        }
        self.record_sync(uid, reason);
        self.schedule_periodic(uid);
    }

    /// The volume manager re-projects the pod's volumes in its next passes; one pending
    /// remount per pod (the populator processes a pod once per pass).
    fn schedule_remount(&mut self, uid: &str) {
        let pending = self
            .timers
            .iter()
            .any(|(_, t)| matches!(t, Timer::Remount(u) if u == uid));
        if !pending {
            let (populator, reconciler) = self.volume_loops;
            let at = remount_at(populator, reconciler, Instant::now());
            self.timers.push((at, Timer::Remount(uid.to_owned())));
        }
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

    /// Every running pod's containers whose main process exited: reported, and started
    /// again as the pod's restartPolicy and the crash-loop back-off say.
    fn pleg_relist(&mut self) {
        let uids: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, s)| s.stage == Stage::Running)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            let exited = self.runtime.reap_exited(&uid);
            if exited.is_empty() {
                continue;
            }
            let finished = Instant::now();
            let mut again = Vec::new();
            if let Some(state) = self.pods.get_mut(&uid) {
                for e in &exited {
                    tracing::info!(pod_uid = %uid, container = %e.name, exit_code = e.exit_code, "container exited");
                    if state.container_exited(&e.name, e.exit_code) {
                        again.push(e.name.clone());
                    }
                }
                state.report_status(self.api.as_ref());
            }
            for name in again {
                self.start_again(&uid, &name, finished);
            }
        }
    }

    /// `doBackOff`, then the start: at once when the container is not backed off, else
    /// `CrashLoopBackOff` until its window is over.
    fn start_again(&mut self, uid: &str, name: &str, finished: Instant) {
        let Some(state) = self.pods.get_mut(uid) else {
            return;
        };
        let key = crash_backoff::key(uid, name);
        if let Some(wait) = self.backoff.try_start(&key, finished, Instant::now()) {
            state.backing_off(name);
            state.report_status(self.api.as_ref());
            self.timers.push((
                Instant::now() + wait,
                Timer::StartContainer(uid.to_owned(), name.to_owned(), finished),
            ));
            return;
        }
        match state.restart_container(&mut self.runtime, self.api.lookup(), name) {
            Ok(()) => {
                let delay = state.ready_delay();
                state.ready = delay.is_none();
                state.report_status(self.api.as_ref());
                if let Some(d) = delay {
                    self.timers
                        .push((Instant::now() + d, Timer::MarkReady(uid.to_owned())));
                }
            }
            Err(e) => {
                tracing::warn!(pod_uid = %uid, container = name, error = %e, "container did not start again");
                // the next attempt meets the back-off, as a failed start does on a node
                self.timers.push((
                    Instant::now(),
                    Timer::StartContainer(uid.to_owned(), name.to_owned(), Instant::now()),
                ));
            }
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
        let Some(state) = self.pods.get_mut(uid) else {
            return;
        };
        if state.stage != Stage::Running {
            return;
        }
        let swapped = state.project_all(self.api.lookup());
        if !swapped.is_empty() {
            let records = self.swaps.entry(uid.to_owned()).or_default();
            records.extend(
                swapped
                    .into_iter()
                    .map(|(volume, monotonic_ns)| SwapRecord {
                        volume,
                        monotonic_ns,
                    }),
            );
        }
    }

    fn resync_volumes(&mut self) {
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            self.sync_pod(&uid, SyncReason::Forced);
        }
    }

    fn rotate(&mut self, what: Rotation) {
        for state in self.pods.values_mut() {
            if state.stage == Stage::Running {
                state.rotate(what, self.api.lookup());
            }
        }
    }

    /// Compares with the API's pod list: starts what is missing, stops what is gone.
    pub(crate) fn relist(&mut self) {
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
            .retain(|(_, t)| !matches!(t, Timer::FinishStart(u) | Timer::MarkReady(u) | Timer::Sync(u) | Timer::PhaseSync(u) | Timer::Remount(u) | Timer::StartContainer(u, _, _) if u == uid));
        self.backoff.forget_pod(uid);
        self.swaps.remove(uid);
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
