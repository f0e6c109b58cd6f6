//! reloadlet: reloads Kubernetes pods when the content they consume changes — in place (a
//! signal, an HTTP call) or by replacing them through the Eviction API.
//!
//! The layout is the architecture. Data flows one way:
//!
//! ```text
//! inotify / API watch ─▶ detect ─▶ map to pod ─▶ decide ─▶ execute ─▶ signal / evict / HTTP / patch / Event
//!   host, k8s (edges)     core       core          core     execute     host, k8s, outbound (edges)
//! ```
//!
//! - [`core`]: pure and synchronous, no Kubernetes client, no I/O: the model, annotations,
//!   change detection, the pod index, decisions and the outcome vocabulary.
//! - [`agent`]: the node mode's loop (inotify → signal/evict/http); [`controller`]: the
//!   cluster mode's loop (API watches → nudge, env consumers).
//! - [`execute`]: the one executor every effect goes through, behind the traits in [`ports`].
//! - The edges: [`k8s`] (the API server), [`host`] (inotify, /proc, cgroups, pidfd, the
//!   volume files, the state file), [`outbound`] (reload endpoints, notifications).
//! - [`retry`]: every retry's policy (delays, cap, jitter, `Retry-After`, deadline) and
//!   its waiting, one way.
//! - [`contain`]: a panic while handling one object stays with that object.
//! - [`serve`]: health and metrics; [`config`]: flags and environment, parsed once;
//!   [`wiring`]: each mode assembled from the above; [`explain`]: the third command.

pub mod agent;
pub mod config;
pub mod contain;
pub mod controller;
pub mod core;
pub mod execute;
pub mod explain;
pub mod host;
pub mod k8s;
pub mod outbound;
pub mod ports;
pub mod retry;
pub mod serve;
pub mod status;
pub mod wiring;
