//! `reloadlet controller`: the cluster loop. One [`router`] routes what the watches and the
//! election say to features that each own their state and decide:
//!
//! - [`nudge`]: fast projection. When a ConfigMap (or, with `--secrets`, a Secret) changes,
//!   patch one annotation (`reloadlet.io/projection-nudge`) on each running pod that opted in
//!   and projects it, so the kubelet syncs the pod — and re-projects its volumes — at once
//!   instead of at its next periodic sync (60–90 s).
//! - [`env`](mod@env): env-var consumers, evicted (or warned about) when a key they read changes.
//! - [`rollout`]: `reloadlet.io/action: rollout` pods: their owning workload is rolled (one
//!   pod template patch) when data they read changes (docs/rollout.md).
//!
//! `env` and `rollout` are peers over [`consumed`] (each owns one: the objects its pods read,
//! their baselines and GETs); neither reaches into the other.
//!
//! Every write (pod patches, evictions) is a job of the executor (`crate::execute`), which
//! owns `--dry-run`, timeouts and retries. Pure: `nudge::qualify`, `nudge::schedule`,
//! `env::hash`, `consumed::tracker`, [`lease`]. Edges behind traits: [`api`]. Loops: [`router`],
//! [`elect`].

pub mod consumed;
pub mod consumer_states;
pub mod data_version;
pub mod elect;
pub mod env;
#[cfg(test)]
pub mod fake;
pub mod feature;
pub mod lease;
pub mod metrics;
pub mod nudge;
pub mod publish;
pub mod recorded;
pub mod restart_grant;
pub mod rollout;
pub mod router;
