//! reloadlet: a node agent that reloads pods in place when the kubelet projects new
//! ConfigMap or Secret content into their volumes.
//!
//! Data flows one way:
//! `watch` (inotify) → `detect` (content hashes) → `pod_index` → `policy` (decide, pure) →
//! `execute` (signal through `process`, evict through `k8s::eviction`, Events through
//! `k8s::events`; the edges as traits in `ports`) → `outcome` (one vocabulary for metrics,
//! logs and Events). `agent` is the node's event loop; `controller` the cluster's.

pub mod agent;
pub mod annotations;
pub mod config;
pub mod controller;
pub mod debounce;
pub mod detect;
pub mod disruption_budgets;
pub mod execute;
pub mod explain;
pub mod filters;
pub mod http;
pub mod http_client;
pub mod k8s;
pub mod label_selector;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod nudge_delay;
pub mod outcome;
pub mod pod_index;
pub mod policy;
pub mod ports;
pub mod process;
pub mod reload_client;
pub mod state;
pub mod volume_hash;
pub mod watch;
