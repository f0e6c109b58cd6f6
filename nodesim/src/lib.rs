//! nodesim: a simulated Kubernetes node, faithful to the facts in
//! `shared/reference/node-facts.md` and `eviction-facts.md`.
//!
//! - [`apiserver`]: a stateful API server on loopback speaking the real wire format
//!   (pods, events, ConfigMaps, Secrets, evictions, PDBs, ReplicaSets).
//! - [`atomic_writer`]: the kubelet's AtomicWriter, byte for byte in its sequence.
//! - [`runtime`]: "containers" as real processes in real cgroups, named as containerd,
//!   CRI-O and cri-dockerd name them, under both cgroup drivers.
//! - [`kubelet`]: syncs the API's pods of this node onto disk and processes.

pub mod apiserver;
pub mod atomic_writer;
pub mod bench_support;
pub mod cgroups;
pub mod clock;
pub mod crash_backoff;
pub mod csi;
pub mod flavor;
pub mod hold;
pub mod kubelet;
mod kubelet_api;
mod kubelet_options;
mod kubelet_pod;
pub mod kubelet_sync;
mod kubelet_worker;
mod mount_targets;
pub mod node;
pub mod pod_ip;
pub mod probe;
pub mod proc_stat;
pub mod projection;
pub mod qos;
pub mod runtime;
mod runtime_container;
mod runtime_shim;
pub mod volumes;
