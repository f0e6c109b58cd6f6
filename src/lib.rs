//! reloadlet: a node agent that reloads pods in place when the kubelet projects new
//! ConfigMap or Secret content into their volumes.
//!
//! Data flows one way:
//! `watch` (inotify) → `detect` (content hashes) → `pod_index` → `policy` → `execute`
//! (signal through `process`, evict through `evict`) → Events.

pub mod model;
pub mod watch;
