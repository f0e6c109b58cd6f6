//! A simulated container: what to run ([`ContainerSpec`]), what tests see of it once it runs
//! ([`ContainerHandle`]), and what the runtime keeps to clean it up ([`Running`]).

use crate::flavor::Runtime;
use crate::runtime::cgroups::Cgroup;
use std::path::PathBuf;
use std::process::Child;

/// A bind mount into the container's mount namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindMount {
    /// Host path: a volume dir, or for a `subPath` the resolved file/dir under `..data/`.
    pub source: PathBuf,
    /// `mountPath` in the container.
    pub target: PathBuf,
    pub read_only: bool,
}

/// What to run as a container.
#[derive(Clone, Debug, Default)]
pub struct ContainerSpec {
    pub name: String,
    /// `command` + `args`, non-empty.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    pub mounts: Vec<BindMount>,
    /// `hostUsers: false`: the user namespace the command runs in ([`UserNamespace`]).
    pub user_namespace: Option<UserNamespace>,
}

/// The user namespace of a `hostUsers: false` pod (user namespaces, on by default since
/// Kubernetes 1.33). The kubelet gives the pod one range of 65536 host IDs, mapped to IDs
/// 0..65536 inside, the same for UIDs and GIDs (kubernetes `pkg/kubelet/userns/
/// userns_manager.go`, `GetOrCreateUserNamespaceMappings`: `NamespaceMode_POD` with one
/// `UIDMappings` and one `GIDMappings` entry, `ContainerId: 0`, `Length: userNsLength`);
/// the sandbox gets the namespace and every container of the pod joins it (containerd
/// `internal/cri/server/container_create_linux.go`: the container spec names the sandbox's
/// user namespace path). The processes keep their host PIDs, cgroups and PID namespace as
/// for any pod: only their credentials are mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserNamespace {
    /// A new one, mapping `0..length` inside to `host_id..host_id + length` (the sandbox's).
    New { host_id: u32, length: u32 },
    /// The user namespace of this (pause) process.
    Join(i32),
}

/// A running container (or sandbox) as tests see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerHandle {
    pub name: String,
    /// 64 hex chars.
    pub id: String,
    pub runtime: Runtime,
    /// The container cgroup relative to the hierarchy root, as in `/proc/<pid>/cgroup`.
    pub cgroup: String,
    /// The container cgroup's directory in each hierarchy.
    pub cgroup_paths: Vec<PathBuf>,
    /// Host PID of the container's main process (the command).
    pub main_pid: i32,
    /// Host PID of the shim, the main process's parent (outside the container cgroup).
    pub shim_pid: i32,
    /// CRI-O: the process in `crio-conmon-<id>` (the shim).
    pub conmon_pid: Option<i32>,
    pub log_path: PathBuf,
}

impl ContainerHandle {
    /// `<runtime>://<id>`, as in `status.containerStatuses[].containerID`.
    pub fn container_id(&self) -> String {
        self.runtime.container_id(&self.id)
    }
}

/// A running process group of ours: the handle plus what must be cleaned up.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) handle: ContainerHandle,
    pub(crate) spec: ContainerSpec,
    pub(crate) shim: Child,
    pub(crate) cgroup: Cgroup,
    pub(crate) conmon_cgroup: Option<Cgroup>,
    /// Mount targets on the host this container holds (the container's root is the host's;
    /// see [`crate::runtime::mount_targets`]).
    pub(crate) targets: Vec<PathBuf>,
}
