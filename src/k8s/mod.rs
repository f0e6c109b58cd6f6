//! The Kubernetes API edge: the only place (with `main`) that imports `kube` / `k8s_openapi`.

pub mod api_backoff;
pub mod client;
pub mod controller;
pub mod controller_serve;
pub mod events;
pub mod eviction;
pub mod pdb_watch;
pub mod pod_convert;
pub mod pod_watch;
