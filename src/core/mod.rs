//! The pure core: no Kubernetes client, no I/O, no async. What a pod is ([`model`]), what
//! its annotations ask ([`annotations`]), whether a volume's content changed
//! ([`volume_digest`], [`detect`], [`debounce`]), which pod it belongs to ([`pod_index`]),
//! what to do ([`policy`], [`rollout`], [`reloader_compat`]), when ([`pacing`]) and the one
//! vocabulary of what became of it ([`outcome`]). Table-tested; it could be its own crate.

pub mod annotations;
pub mod debounce;
pub mod detect;
pub mod disposition;
pub mod disruption_budgets;
pub mod drain_gate;
pub mod drained;
pub mod durations;
pub mod fair_queue;
pub mod filters;
pub mod invalid;
pub mod keep;
pub mod label_selector;
pub mod lease_holder;
pub mod model;
pub mod nudge_delay;
pub mod outcome;
pub mod owner_chain;
pub mod pacing;
pub mod permission;
pub mod pod_index;
pub mod policy;
pub mod reloader_compat;
pub mod restart;
pub mod restart_grant;
pub mod restart_request;
pub mod rollout;
pub mod shared_map;
pub mod status;
pub mod volume_digest;
