//! One pod as the simulated kubelet runs it: volumes, sandbox and containers, and the
//! status it reports.

use crate::kubelet::api::{KubeletApi, READY_DELAY_ANNOTATION};
use crate::kubelet::qos::qos_class;
use crate::runtime::{BindMount, ContainerSpec, RuntimeError, SandboxSpec, SimRuntime};
use crate::volumes::atomic_writer::WriteOutcome;
use crate::volumes::projection::{self, SourceLookup};
use crate::volumes::{PodVolumes, Rotation, SourceKind, VolumeError, VolumeKind};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a classic init container may run.
const INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a pod is in its life on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Volume dirs exist; tmpfs, content and processes not yet.
    Created,
    /// A ConfigMap/Secret is missing: retried when sources change or on resync.
    VolumesPending,
    Running,
    /// A container could not start or an init container failed.
    Failed,
}

/// Why a pod could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Volume(#[from] VolumeError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("container {container:?}: {why}")]
    Container { container: String, why: String },
    #[error("init container {0:?} exited with {1}")]
    InitFailed(String, i32),
}

/// A started container, for the status.
#[derive(Clone, Debug)]
struct Started {
    name: String,
    image: String,
    container_id: String,
    /// `Some(exit code)` for a classic init container that ran to completion.
    exit_code: Option<i32>,
    init: bool,
    /// `restartCount`: starts after the first in this pod.
    restart_count: i32,
    /// When the current process started.
    started_at: Option<Time>,
    /// Its main process runs (false between an exit and the restart).
    running: bool,
    /// `lastState.terminated` (or `state.terminated` while not running).
    last_terminated: Option<ContainerStateTerminated>,
    /// `state.waiting.reason` while it waits to start again (`CrashLoopBackOff`).
    waiting: Option<String>,
}

impl Started {
    fn new(
        name: &str,
        image: String,
        container_id: String,
        exit_code: Option<i32>,
        init: bool,
    ) -> Self {
        Self {
            name: name.to_owned(),
            image,
            container_id,
            exit_code,
            init,
            restart_count: 0,
            started_at: Some(Time(crate::clock::now())),
            running: exit_code.is_none(),
            last_terminated: None,
            waiting: None,
        }
    }
}

/// One pod of this node.
pub struct PodState {
    /// The latest version seen.
    pub pod: Pod,
    pub volumes: PodVolumes,
    pub stage: Stage,
    pub ready: bool,
    started: Vec<Started>,
    start_time: Option<Time>,
    message: Option<String>,
    /// The sandbox's address (`status.podIP` once the pod runs; see [`crate::pod_ip`]).
    pub pod_ip: std::net::Ipv4Addr,
}

impl PodState {
    /// Creates the volume dirs (no tmpfs, no content yet).
    pub fn create(root: &Path, pod: Pod) -> Result<Self, VolumeError> {
        let volumes = PodVolumes::create(root, &pod)?;
        Ok(Self {
            pod,
            volumes,
            stage: Stage::Created,
            ready: false,
            started: Vec::new(),
            start_time: None,
            message: None,
            pod_ip: crate::pod_ip::HOST_IP,
        })
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    fn uid(&self) -> String {
        self.pod.metadata.uid.clone().unwrap_or_default()
    }

    pub fn has_tmpfs_volumes(&self) -> bool {
        self.volumes.volumes().iter().any(|v| v.kind.is_tmpfs())
    }

    /// Mounts, projects, starts the sandbox and the containers, reports the status.
    /// Returns the ready delay still to wait, if any.
    pub fn start(
        &mut self,
        runtime: &mut SimRuntime,
        api: &dyn KubeletApi,
    ) -> Result<Option<Duration>, StartError> {
        if matches!(self.stage, Stage::Running | Stage::Failed) {
            return Ok(None);
        }
        self.volumes.mount_tmpfs()?;
        if let Err(e) = self.volumes.project_all(&self.pod, api.lookup()) {
            self.stage = Stage::VolumesPending;
            self.message = Some(e.to_string());
            return Err(e.into());
        }
        self.start_time = Some(Time(crate::clock::now()));
        match self.start_processes(runtime, api.lookup()) {
            Ok(()) => {}
            Err(e) => {
                let _ = runtime.stop_sandbox(&self.uid(), Duration::ZERO);
                self.stage = Stage::Failed;
                self.message = Some(e.to_string());
                self.report_status(api);
                return Err(e);
            }
        }
        self.stage = Stage::Running;
        let delay = self.ready_delay();
        self.ready = delay.is_none();
        self.report_status(api);
        Ok(delay)
    }

    /// How long after a container start the pod turns Ready (its readiness probe passing,
    /// [`READY_DELAY_ANNOTATION`]); `None`: at once.
    pub fn ready_delay(&self) -> Option<Duration> {
        self.pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(READY_DELAY_ANNOTATION))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    }

    fn start_processes(
        &mut self,
        runtime: &mut SimRuntime,
        lookup: &dyn SourceLookup,
    ) -> Result<(), StartError> {
        let spec = self.pod.spec.clone().unwrap_or_default();
        let uid = self.uid();
        runtime.start_sandbox(&SandboxSpec {
            pod_uid: uid.clone(),
            qos: qos_class(&spec),
            share_process_namespace: spec.share_process_namespace.unwrap_or(false),
            host_pid: spec.host_pid.unwrap_or(false),
            user_namespace: (spec.host_users == Some(false)).then(user_namespace_range),
        })?;
        let scheme = runtime.config().runtime;
        self.started.clear();
        for c in spec.init_containers.iter().flatten() {
            let cs = self.container_spec(c, lookup)?;
            let image = c.image.clone().unwrap_or_default();
            if c.restart_policy.as_deref() == Some("Always") {
                let h = runtime.start_container(&uid, &cs)?;
                self.started
                    .push(Started::new(&c.name, image, h.container_id(), None, true));
            } else {
                let done = runtime.run_to_completion(&uid, &cs, INIT_TIMEOUT)?;
                self.started.push(Started::new(
                    &c.name,
                    image,
                    scheme.container_id(&done.id),
                    Some(done.exit_code),
                    true,
                ));
                if done.exit_code != 0 {
                    return Err(StartError::InitFailed(c.name.clone(), done.exit_code));
                }
            }
        }
        for c in &spec.containers {
            let cs = self.container_spec(c, lookup)?;
            let h = runtime.start_container(&uid, &cs)?;
            let image = c.image.clone().unwrap_or_default();
            self.started
                .push(Started::new(&c.name, image, h.container_id(), None, false));
        }
        Ok(())
    }

    /// The kubelet saw the main process of container `name` exit (PLEG): it is no longer
    /// running, the pod no longer Ready. Returns whether it is to start again: always for a
    /// native sidecar; for a regular container as `restartPolicy` says — `Always` (the
    /// default) whatever the exit code, `OnFailure` for a non-zero one, `Never` not at all
    /// (pkg/kubelet/container/helpers.go, `ShouldContainerBeRestarted`).
    pub fn container_exited(&mut self, name: &str, exit_code: i32) -> bool {
        let policy = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        let Some(s) = self
            .started
            .iter_mut()
            .find(|s| s.name == name && s.running)
        else {
            return false;
        };
        s.running = false;
        s.last_terminated = Some(ContainerStateTerminated {
            exit_code,
            reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.into()),
            container_id: Some(s.container_id.clone()),
            started_at: s.started_at.clone(),
            finished_at: Some(Time(crate::clock::now())),
            ..Default::default()
        });
        self.ready = false;
        s.init || policy == "Always" || (policy == "OnFailure" && exit_code != 0)
    }

    /// `state.waiting.reason: CrashLoopBackOff` until the container starts again.
    pub fn backing_off(&mut self, name: &str) {
        if let Some(s) = self
            .started
            .iter_mut()
            .find(|s| s.name == name && !s.running)
        {
            s.waiting = Some("CrashLoopBackOff".into());
        }
    }

    /// Starts container `name` again in the running sandbox: same pod, UID, IP and volumes;
    /// `restartCount` + 1. Its env is resolved again from the API's current objects and its
    /// subPath mounts prepared again, as every container start does
    /// (kuberuntime_container.go `startContainer` → `generateContainerConfig` →
    /// kubelet_pods.go `GenerateRunContainerOptions` → `makeEnvironmentVariables` and
    /// `makeMounts`, whose subPath bind is re-made when the resolved file changed:
    /// pkg/volume/util/subpath/subpath_linux.go `prepareSubpathTarget`,
    /// `checkSubPathFileEqual`).
    pub fn restart_container(
        &mut self,
        runtime: &mut SimRuntime,
        lookup: &dyn SourceLookup,
        name: &str,
    ) -> Result<(), StartError> {
        let spec = self.pod.spec.clone().unwrap_or_default();
        let c = spec
            .containers
            .iter()
            .chain(
                spec.init_containers
                    .iter()
                    .flatten()
                    .filter(|c| c.restart_policy.as_deref() == Some("Always")),
            )
            .find(|c| c.name == name)
            .ok_or_else(|| StartError::Container {
                container: name.to_owned(),
                why: "not in the pod spec".into(),
            })?;
        let cs = self.container_spec(c, lookup)?;
        let uid = self.uid();
        let h = runtime.start_container(&uid, &cs)?;
        if let Some(s) = self.started.iter_mut().find(|s| s.name == name) {
            s.container_id = h.container_id();
            s.restart_count = s.restart_count.saturating_add(1);
            s.started_at = Some(Time(crate::clock::now()));
            s.running = true;
            s.waiting = None;
        }
        Ok(())
    }

    /// Every container that should run runs (classic init containers are done).
    fn all_running(&self) -> bool {
        self.started
            .iter()
            .all(|s| s.exit_code.is_some() || s.running)
    }

    /// Command, env and bind mounts of a container.
    fn container_spec(
        &self,
        c: &Container,
        lookup: &dyn SourceLookup,
    ) -> Result<ContainerSpec, StartError> {
        let err = |why: String| StartError::Container {
            container: c.name.clone(),
            why,
        };
        let mut argv: Vec<String> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .cloned()
            .collect();
        if argv.is_empty() {
            // image entrypoints do not exist here: a stand-in that runs until stopped
            argv = crate::runtime::stand_in_argv();
        }
        let mut env = Vec::new();
        for var in c.env.iter().flatten() {
            if let Some(value) = self.env_value(var, lookup).map_err(err)? {
                env.push((var.name.clone(), value));
            }
        }
        let mut mounts = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let Some(volume) = self.volumes.get(&m.name) else {
                return Err(err(format!("volume {:?} not in the pod spec", m.name)));
            };
            let Some(dir) = &volume.dir else { continue };
            if m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
                return Err(err("subPathExpr is not simulated".into()));
            }
            let source = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                // resolved once, at start: later `..data` swaps never reach this mount
                Some(sub) => resolve_sub_path(dir, sub).map_err(err)?,
                None => dir.clone(),
            };
            let api_data = matches!(
                volume.kind,
                VolumeKind::ConfigMap
                    | VolumeKind::Secret
                    | VolumeKind::Projected
                    | VolumeKind::DownwardApi
            );
            mounts.push(BindMount {
                source,
                target: PathBuf::from(&m.mount_path),
                read_only: api_data || m.read_only.unwrap_or(false),
            });
        }
        Ok(ContainerSpec {
            name: c.name.clone(),
            argv,
            env,
            working_dir: c.working_dir.as_ref().map(PathBuf::from),
            mounts,
            // `hostUsers: false`: the runtime has it join the sandbox's.
            user_namespace: None,
        })
    }

    fn env_value(
        &self,
        var: &k8s_openapi::api::core::v1::EnvVar,
        lookup: &dyn SourceLookup,
    ) -> Result<Option<String>, String> {
        let Some(from) = &var.value_from else {
            return Ok(Some(var.value.clone().unwrap_or_default()));
        };
        let ns = self.namespace();
        if let Some(r) = &from.config_map_key_ref {
            let value = lookup
                .configmap(ns, &r.name)
                .and_then(|cm| cm.data.and_then(|d| d.get(&r.key).cloned()));
            return match value {
                Some(v) => Ok(Some(v)),
                None if r.optional.unwrap_or(false) => Ok(None),
                None => Err(format!(
                    "env {}: configmap key {}/{} not found",
                    var.name, r.name, r.key
                )),
            };
        }
        if let Some(r) = &from.secret_key_ref {
            let value = lookup
                .secret(ns, &r.name)
                .and_then(|s| s.data.and_then(|d| d.get(&r.key).map(|b| b.0.clone())));
            return match value {
                Some(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
                None if r.optional.unwrap_or(false) => Ok(None),
                None => Err(format!(
                    "env {}: secret key {}/{} not found",
                    var.name, r.name, r.key
                )),
            };
        }
        if let Some(f) = &from.field_ref {
            let bytes = projection::downward_api_field(&self.pod, &f.field_path)
                .map_err(|e| e.to_string())?;
            return Ok(Some(String::from_utf8_lossy(&bytes).into_owned()));
        }
        Ok(None)
    }

    /// Writes every volume (no-op when unchanged); returns the volumes whose `..data` was
    /// swapped, each with the monotonic clock just after its swap.
    pub fn project_all(&mut self, lookup: &dyn SourceLookup) -> Vec<(String, i128)> {
        match self.volumes.project_all(&self.pod, lookup) {
            Ok(outcomes) => outcomes
                .into_iter()
                .filter(|(_, o, _)| matches!(o, WriteOutcome::Written { .. }))
                .map(|(name, _, at)| (name, at))
                .collect(),
            Err(e) => {
                tracing::warn!(pod = ?self.pod.metadata.name, error = %e, "volume sync failed");
                Vec::new()
            }
        }
    }

    /// Writes the volumes fed by one ConfigMap/Secret.
    pub fn project_referencing(&mut self, kind: SourceKind, name: &str, lookup: &dyn SourceLookup) {
        for volume in self.volumes.volumes_referencing(kind, name) {
            if let Err(e) = self.volumes.project_volume(&volume, &self.pod, lookup) {
                tracing::warn!(pod = ?self.pod.metadata.name, volume, error = %e, "volume update failed");
            }
        }
    }

    pub fn rotate(&mut self, what: Rotation, lookup: &dyn SourceLookup) {
        if let Err(e) = self.volumes.rotate(what, &self.pod, lookup) {
            tracing::warn!(pod = ?self.pod.metadata.name, error = %e, ?what, "rotation failed");
        }
    }

    /// What the kubelet reports.
    pub fn report_status(&self, api: &dyn KubeletApi) {
        let (ns, name) = (
            self.namespace().to_owned(),
            self.pod.metadata.name.clone().unwrap_or_default(),
        );
        api.set_pod_status(&ns, &name, self.status());
    }

    fn status(&self) -> PodStatus {
        let running = self.stage == Stage::Running;
        let containers_ready = running && self.ready;
        // GeneratePodReadyCondition: the containers, and every readiness gate's condition as
        // the API holds it (super::readiness_gates).
        let api_conditions = self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let gates = super::readiness_gates::gates_ready(&self.pod, api_conditions);
        let all_ready = containers_ready && self.all_running();
        let ready = all_ready && gates;
        let now = Time(crate::clock::now());
        // `updateLastTransitionTime` (pkg/kubelet/status/status_manager.go): a condition whose
        // status is the one the API holds keeps its lastTransitionTime; else it moved now.
        let cond = |type_: &str, ok: bool| {
            let status = if ok { "True" } else { "False" };
            let last_transition_time = api_conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .and_then(|c| c.last_transition_time.clone())
                .or_else(|| Some(now.clone()));
            PodCondition {
                type_: type_.into(),
                status: status.into(),
                last_transition_time,
                ..Default::default()
            }
        };
        let status_of = |s: &Started| {
            let state = match s.exit_code {
                Some(code) => ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code,
                        reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                        container_id: Some(s.container_id.clone()),
                        started_at: self.start_time.clone(),
                        finished_at: Some(now.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                None if s.running => ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: s.started_at.clone(),
                    }),
                    ..Default::default()
                },
                None => match &s.waiting {
                    Some(reason) => ContainerState {
                        waiting: Some(k8s_openapi::api::core::v1::ContainerStateWaiting {
                            reason: Some(reason.clone()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    None => ContainerState {
                        terminated: s.last_terminated.clone(),
                        ..Default::default()
                    },
                },
            };
            let last_state = (s.exit_code.is_none() && (s.running || s.waiting.is_some()))
                .then(|| s.last_terminated.clone())
                .flatten()
                .map(|t| ContainerState {
                    terminated: Some(t),
                    ..Default::default()
                });
            ContainerStatus {
                name: s.name.clone(),
                container_id: Some(s.container_id.clone()),
                image: s.image.clone(),
                image_id: String::new(),
                ready: s.exit_code.is_none() && s.running && containers_ready,
                started: Some(s.exit_code.is_none() && s.running && running),
                restart_count: s.restart_count,
                state: Some(state),
                last_state,
                ..Default::default()
            }
        };
        let spec = self.pod.spec.clone().unwrap_or_default();
        PodStatus {
            phase: Some(if running { "Running" } else { "Pending" }.into()),
            qos_class: Some(qos_class(&spec).as_str().into()),
            host_ip: Some(crate::pod_ip::HOST_IP.to_string()),
            host_ips: Some(vec![k8s_openapi::api::core::v1::HostIP {
                ip: crate::pod_ip::HOST_IP.to_string(),
            }]),
            pod_ip: running.then(|| self.pod_ip.to_string()),
            pod_ips: running.then(|| {
                vec![k8s_openapi::api::core::v1::PodIP {
                    ip: self.pod_ip.to_string(),
                }]
            }),
            start_time: self.start_time.clone(),
            message: self.message.clone().filter(|_| !running),
            conditions: Some(vec![
                cond("PodReadyToStartContainers", running),
                cond("Initialized", running),
                cond("Ready", ready),
                cond("ContainersReady", all_ready),
                cond("PodScheduled", true),
            ]),
            container_statuses: Some(
                self.started
                    .iter()
                    .filter(|s| !s.init)
                    .map(status_of)
                    .collect(),
            ),
            init_container_statuses: Some(
                self.started
                    .iter()
                    .filter(|s| s.init)
                    .map(status_of)
                    .collect(),
            ),
            ..Default::default()
        }
    }
}

/// `<volume>/<subPath>` with its symlinks resolved (into the current `..<timestamp>` dir),
/// refused if it leaves the volume.
fn resolve_sub_path(volume_dir: &Path, sub_path: &str) -> Result<PathBuf, String> {
    if Path::new(sub_path).is_absolute() || sub_path.split('/').any(|e| e == "..") {
        return Err(format!(
            "subPath {sub_path:?} must be relative without '..'"
        ));
    }
    let base =
        fs::canonicalize(volume_dir).map_err(|e| format!("{}: {e}", volume_dir.display()))?;
    let resolved = fs::canonicalize(volume_dir.join(sub_path))
        .map_err(|e| format!("subPath {sub_path:?}: {e}"))?;
    if !resolved.starts_with(&base) {
        return Err(format!("subPath {sub_path:?} resolves outside the volume"));
    }
    Ok(resolved)
}

/// The kubelet's allocator of `hostUsers: false` ranges (kubernetes `pkg/kubelet/userns/
/// userns_manager.go`: `userNsLength` = 65536 IDs a pod, handed out from the kubelet's own
/// range, which starts at 65536 when no `kubelet` entry in `/etc/subuid` says otherwise).
/// Never released here: 1024 ranges cycle, far more than a test node runs at once.
fn user_namespace_range() -> (u32, u32) {
    use std::sync::atomic::{AtomicU32, Ordering};
    const USER_NS_LENGTH: u32 = 65536;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let slot = NEXT.fetch_add(1, Ordering::Relaxed) % 1024;
    (USER_NS_LENGTH * (1 + slot), USER_NS_LENGTH)
}
