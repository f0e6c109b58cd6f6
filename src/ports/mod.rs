//! Every edge of reloadlet as a small trait, with the plain data that crosses it and no
//! `kube` import: what the agent's executor needs from the Kubernetes API (Events, the
//! Eviction API), from reload endpoints and from the OS (a container's main process); what
//! the controller reads and writes (ConfigMaps/Secrets, pods, workloads, the Lease) and
//! what its watches tell it. The real implementations live in `k8s/`, `outbound/` and
//! `host/`; [`fake`] holds one fake of each agent edge for unit tests (the controller's are
//! in `controller::fake`).
//!
//! The API edges fail with [`ApiError`], which keeps the HTTP status a retry decision needs.

pub mod env_objects;
mod error;
pub mod events;
pub mod eviction;
pub mod http;
pub mod lease;
pub mod patch;
pub mod pod_condition;
pub mod process;
pub mod refusals;
pub mod watch;
pub mod workloads;

#[cfg(test)]
pub mod fake;

pub use env_objects::{EnvApi, ObjectData, ObjectKey};
pub use error::ApiError;
pub use events::{EventSink, ObjectRef, PodEvent, PodRef};
pub use eviction::{EvictOutcome, EvictRequest, Evictor};
pub use http::{HttpAnswer, HttpCall, HttpCallError, HttpCaller, HTTP_BODY_READ};
pub use lease::{LeaseError, LeaseReader, LeaseRecord, LeaseStore};
pub use patch::{PatchError, PatchRequest, PatchTarget, Patcher, PodMeta};
pub use pod_condition::GateWriter;
pub use process::{ContainerProcesses, Delivery, MainProcess, ProcessError, StatusError};
pub use refusals::{Problems, RefusalSink, Refusals};
pub use watch::{Input, OwnDataVersions};
pub use workloads::{RolloutHistory, WorkloadApi, WorkloadChange, WorkloadMeta, WorkloadPatcher};
