//! nodesim: a simulated Kubernetes node, faithful to the facts in
//! `shared/reference/node-facts.md` and `eviction-facts.md`.
//!
//! - [`apiserver`]: a stateful API server on loopback speaking the real wire format
//!   (pods, events, ConfigMaps, Secrets, evictions, PDBs, ReplicaSets).
//! - [`volumes`]: the kubelet's volume plugins: what a pod's volumes project
//!   ([`volumes::projection`]), the AtomicWriter byte for byte in its sequence
//!   ([`volumes::atomic_writer`]), a CSI driver's own writes ([`volumes::csi`]).
//! - [`runtime`]: "containers" as real processes in real cgroups ([`runtime::cgroups`]),
//!   named as containerd, CRI-O and cri-dockerd name them, under both cgroup drivers.
//! - [`kubelet`]: syncs the API's pods of this node onto disk and processes.

pub mod apiserver;
pub mod clock;
pub mod crash_backoff;
pub mod flavor;
pub mod hold;
pub mod interrupt;
pub mod kubelet;
pub mod node;
pub mod pod_ip;
pub mod probe;
pub mod proc_stat;
pub mod runtime;
pub mod volumes;

// The flat paths of the layout before the kubelet/, runtime/ and volumes/ folders, kept for
// the tests, benches and examples that name them.
pub use kubelet::{qos, sync as kubelet_sync};
pub use runtime::cgroups;
pub use volumes::{atomic_writer, csi, projection};
