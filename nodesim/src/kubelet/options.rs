//! How a simulated kubelet is set up ([`KubeletOptions`]) and what it tells about a pod's
//! containers ([`PodHandles`]).

use crate::flavor::{CgroupDriver, CgroupVersion, Runtime};
use crate::kubelet::sync::SyncMode;
use crate::runtime::ContainerHandle;
use std::path::PathBuf;
use std::time::Duration;

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
    /// ([`SyncMode::Faithful`], see [`crate::kubelet::sync`]).
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
