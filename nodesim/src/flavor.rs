//! The kinds of node the simulator can be: container runtime, cgroup driver, cgroup
//! version, and a pod's QoS class (which picks its cgroup parent).

use std::fmt;

/// The container runtime whose naming the simulator follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    Containerd,
    CriO,
    /// cri-dockerd.
    Docker,
}

impl Runtime {
    pub const ALL: [Runtime; 3] = [Self::Containerd, Self::CriO, Self::Docker];

    /// The scheme of `status.containerStatuses[].containerID`: `containerd`, `cri-o`, `docker`.
    pub fn scheme(self) -> &'static str {
        match self {
            Self::Containerd => "containerd",
            Self::CriO => "cri-o",
            Self::Docker => "docker",
        }
    }

    /// `<scheme>://<id>`.
    pub fn container_id(self, id: &str) -> String {
        format!("{}://{id}", self.scheme())
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.scheme())
    }
}

/// The kubelet's and runtime's `cgroupDriver`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CgroupDriver {
    Systemd,
    Cgroupfs,
}

impl CgroupDriver {
    pub const ALL: [CgroupDriver; 2] = [Self::Systemd, Self::Cgroupfs];
}

/// Which cgroup hierarchy the node's containers live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CgroupVersion {
    /// Several hierarchies, one per controller (plus `name=systemd`).
    V1,
    /// The unified hierarchy.
    V2,
}

impl CgroupVersion {
    pub const ALL: [CgroupVersion; 2] = [Self::V1, Self::V2];
}

/// `status.qosClass`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub const ALL: [QosClass; 3] = [Self::Guaranteed, Self::Burstable, Self::BestEffort];

    /// As written in `status.qosClass`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
            Self::BestEffort => "BestEffort",
        }
    }
}
