//! reloadlet: a node agent that reloads pods in place when the kubelet projects new
//! ConfigMap or Secret content into their volumes.
//!
//! Data flows one way:
//! `watch` (inotify) → `detect` (content hashes) → `pod_index` → `policy` → `execute`
//! (signal through `process`, evict through `evict`) → Events.

pub mod annotations;
pub mod debounce;
pub mod detect;
pub mod filters;
pub mod model;
pub mod pod_index;
pub mod policy;
