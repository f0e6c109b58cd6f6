//! `reloadlet controller`: fast projection. When a ConfigMap (or, with `--secrets`, a Secret)
//! changes, patch one annotation (`reloadlet.io/projection-nudge`) on each running pod that
//! opted in and projects it, so the kubelet syncs the pod — and re-projects its volumes — at
//! once instead of at its next periodic sync (60–90 s).
//!
//! Pure: [`qualify`] (which pods), [`nudges`] (baselines, schedule, coalescing, rate cap),
//! [`lease`] (election decisions). Edges behind traits: [`api`]. Loops: [`run`], [`elect`].

pub mod api;
pub mod elect;
pub mod env;
pub mod env_hash;
pub mod lease;
pub mod metrics;
pub mod nudges;
pub mod qualify;
pub mod run;
