//! `reloadlet.io/action: rollout` (pure): which workload owns a pod, what its update
//! strategy will do with a template change, and the one patch that asks for it.
//!
//! The patch is what `kubectl rollout restart` writes — the pod template annotation
//! `kubectl.kubernetes.io/restartedAt` (kubectl `pkg/polymorphichelpers/objectrestarter.go`)
//! — plus `reloadlet.io/restarted-for` naming the cause, as one JSON merge patch of
//! `spec.template.metadata.annotations`; an Argo Rollout gets `spec.restartAt` instead (Argo
//! Rollouts' restart: pods created before it are replaced, capped by maxUnavailable).

use serde_json::{json, Value};
use std::time::Duration;

/// The annotation `kubectl rollout restart` sets in the pod template.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// Beside it: what made reloadlet roll the workload (`configmap/app-config`).
pub const RESTARTED_FOR: &str = "reloadlet.io/restarted-for";
/// `reloadlet.io/on-blocked`: what the agent does when a budget can never allow an eviction.
pub const ON_BLOCKED: &str = "reloadlet.io/on-blocked";
/// `reloadlet.io/blocked-timeout`: how long a transient block may last before `on-blocked:
/// rollout` rolls the owner anyway.
pub const BLOCKED_TIMEOUT: &str = "reloadlet.io/blocked-timeout";
pub const DEFAULT_BLOCKED_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest `blocked-timeout` a pod may ask for (a week): longer is refused as invalid.
pub const MAX_BLOCKED_TIMEOUT: Duration = crate::core::durations::MAX_ANNOTATION_DURATION;

/// The kinds a rollout can restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    /// `argoproj.io/v1alpha1` Rollout.
    ArgoRollout,
}

impl WorkloadKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::ArgoRollout => "Rollout",
        }
    }

    /// The `apiVersion` of the kind (`apps/v1`, `argoproj.io/v1alpha1`).
    pub fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::Deployment | WorkloadKind::StatefulSet | WorkloadKind::DaemonSet => {
                "apps/v1"
            }
            WorkloadKind::ArgoRollout => "argoproj.io/v1alpha1",
        }
    }
}

/// A pod's controlling owner reference (`ownerReferences[]` with `controller: true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// The owner's UID as the reference names it (checked against the owner read,
    /// [`crate::core::owner_chain::verify`]).
    pub uid: String,
}

/// One workload, the unit a rollout patches once per change.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadRef {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
}

/// Why a pod's owner cannot be rolled (Warning `RolloutUnsupported`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("the pod has no controlling owner: nothing would roll it; use action evict or signal")]
    NoOwner,
    #[error("the pod is owned by {kind} {name}, which reloadlet cannot roll (Deployment, StatefulSet, DaemonSet or Argo Rollout only)")]
    Owner { kind: String, name: String },
    #[error("the pod's ReplicaSet {0} has no Deployment or Rollout owner: a bare ReplicaSet does not replace pods on a template change")]
    BareReplicaSet(String),
    #[error("{kind} {name} uses updateStrategy OnDelete: a template change replaces no pod until each is deleted")]
    OnDelete { kind: &'static str, name: String },
}

fn kind_of(owner: &OwnerRef) -> Option<WorkloadKind> {
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    match (group, owner.kind.as_str()) {
        ("apps", "Deployment") => Some(WorkloadKind::Deployment),
        ("apps", "StatefulSet") => Some(WorkloadKind::StatefulSet),
        ("apps", "DaemonSet") => Some(WorkloadKind::DaemonSet),
        ("argoproj.io", "Rollout") => Some(WorkloadKind::ArgoRollout),
        _ => None,
    }
}

/// The workload to roll for a pod. `replica_set_owner` is asked for the controlling owner of
/// the pod's ReplicaSet when the pod's owner is one (Deployments and Argo Rollouts own pods
/// through ReplicaSets).
pub fn workload_of(
    namespace: &str,
    owner: Option<&OwnerRef>,
    replica_set_owner: impl FnOnce(&str) -> Option<OwnerRef>,
) -> Result<WorkloadRef, Unsupported> {
    let owner = owner.ok_or(Unsupported::NoOwner)?;
    let target = if owner.kind == "ReplicaSet" && owner.api_version.starts_with("apps/") {
        let rs_owner = replica_set_owner(&owner.name)
            .ok_or_else(|| Unsupported::BareReplicaSet(owner.name.clone()))?;
        match kind_of(&rs_owner) {
            Some(kind @ (WorkloadKind::Deployment | WorkloadKind::ArgoRollout)) => {
                (kind, rs_owner.name)
            }
            _ => return Err(Unsupported::BareReplicaSet(owner.name.clone())),
        }
    } else {
        match kind_of(owner) {
            Some(kind @ (WorkloadKind::StatefulSet | WorkloadKind::DaemonSet)) => {
                (kind, owner.name.clone())
            }
            _ => {
                return Err(Unsupported::Owner {
                    kind: owner.kind.clone(),
                    name: owner.name.clone(),
                })
            }
        }
    };
    Ok(WorkloadRef {
        kind: target.0,
        namespace: namespace.to_owned(),
        name: target.1,
    })
}

/// Why nothing would roll the pod, as far as its own controlling owner reference tells
/// (`reloadlet status` derives it from the pod, the controller then writes nothing on it):
/// none, or a kind no rollout applies to. `None`: rollable as far as the pod tells; an owning
/// ReplicaSet's own owner, the workload's strategy and whether it exists are the
/// controller's to read (and it records what it found, `Unsupported::BareReplicaSet`,
/// `Unsupported::OnDelete`).
pub fn unrollable_by_pod(owner: Option<&OwnerRef>) -> Option<Unsupported> {
    match workload_of("", owner, |_| None) {
        Err(why @ (Unsupported::NoOwner | Unsupported::Owner { .. })) => Some(why),
        Ok(_) | Err(Unsupported::BareReplicaSet(_) | Unsupported::OnDelete { .. }) => None,
    }
}

/// A rolling update's `maxSurge` / `maxUnavailable` (an `IntOrString`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i32),
    Percent(i32),
}

impl IntOrPercent {
    /// Scaled as apimachinery's `GetScaledValueFromIntOrPercent`: a percent of `total`,
    /// rounded up or down.
    pub fn scaled(self, total: i32, round_up: bool) -> i32 {
        match self {
            IntOrPercent::Int(v) => v,
            IntOrPercent::Percent(p) => {
                let product = i64::from(p) * i64::from(total);
                let v = if round_up {
                    (product + 99).div_euclid(100)
                } else {
                    product.div_euclid(100)
                };
                i32::try_from(v).unwrap_or(i32::MAX)
            }
        }
    }
}

/// The update strategy a workload declares (defaults filled in by the API server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Deployment (or Argo Rollout canary) rolling update.
    Rolling {
        replicas: i32,
        max_surge: IntOrPercent,
        max_unavailable: IntOrPercent,
    },
    /// Deployment `Recreate`: every old pod goes before a new one starts.
    Recreate,
    /// StatefulSet `RollingUpdate`: one pod at a time, deleted before its replacement starts.
    OrderedRolling,
    /// DaemonSet `RollingUpdate` (per node; surges only with `maxSurge` > 0).
    DaemonSetRolling { max_surge: IntOrPercent },
    /// StatefulSet or DaemonSet `OnDelete`.
    OnDelete,
}

/// What a template change will do to the workload's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutFacts {
    /// A new pod starts before an old one stops (no moment with fewer Ready pods).
    pub surges: bool,
    /// Every pod is down at once at some point.
    pub downtime: bool,
    /// A sentence for the `RolloutRequested` Event and `explain`.
    pub note: &'static str,
}

impl Strategy {
    /// The Deployment's default: RollingUpdate 25 % / 25 % (kubernetes `pkg/apis/apps/v1/
    /// defaults.go`, `SetDefaults_Deployment`).
    pub fn deployment_default(replicas: i32) -> Self {
        Strategy::Rolling {
            replicas,
            max_surge: IntOrPercent::Percent(25),
            max_unavailable: IntOrPercent::Percent(25),
        }
    }

    /// `Err`: the strategy never applies a template change.
    pub fn facts(self, kind: WorkloadKind, name: &str) -> Result<RolloutFacts, Unsupported> {
        match self {
            Strategy::Rolling {
                replicas,
                max_surge,
                max_unavailable,
            } => {
                // kubernetes pkg/controller/deployment/util/deployment_util.go
                // `ResolveFenceposts`: surge rounds up, unavailable down, and both 0 makes
                // unavailable 1.
                let surge = max_surge.scaled(replicas, true);
                let mut unavailable = max_unavailable.scaled(replicas, false);
                if surge == 0 && unavailable == 0 {
                    unavailable = 1;
                }
                let surges = surge > 0;
                let downtime = !surges && unavailable >= replicas;
                Ok(RolloutFacts {
                    surges,
                    downtime,
                    note: match (surges, downtime) {
                        (true, _) => "a rolling update that starts each new pod before an old one stops",
                        (false, false) => "a rolling update without surge: old pods stop before their replacements are Ready",
                        (false, true) => "a rolling update that may stop every pod before a new one is Ready (no surge, maxUnavailable covers all replicas)",
                    },
                })
            }
            Strategy::Recreate => Ok(RolloutFacts {
                surges: false,
                downtime: true,
                note: "strategy Recreate: every pod stops before the new ones start (downtime)",
            }),
            Strategy::OrderedRolling => Ok(RolloutFacts {
                surges: false,
                downtime: false,
                note: "a StatefulSet rolling update: one pod at a time, each stopped before its replacement starts (no surge)",
            }),
            Strategy::DaemonSetRolling { max_surge } => {
                let surges = max_surge.scaled(1, true) > 0;
                Ok(RolloutFacts {
                    surges,
                    downtime: false,
                    note: if surges {
                        "a DaemonSet rolling update with maxSurge: each node's new pod starts before the old one stops"
                    } else {
                        "a DaemonSet rolling update: each node's pod stops before its replacement starts (no surge)"
                    },
                })
            }
            Strategy::OnDelete => Err(Unsupported::OnDelete {
                kind: kind.as_str(),
                name: name.to_owned(),
            }),
        }
    }
}

/// The one JSON merge patch that restarts `kind`, at `now` (RFC 3339), for `cause`
/// (`configmap/app-config`; an Argo Rollout carries the cause in the Event only). Nothing
/// else of the workload is written.
pub fn restart_patch(kind: WorkloadKind, now_rfc3339: &str, cause: &str) -> Value {
    match kind {
        // Only `spec.restartAt`: a template annotation would be a new revision of its own.
        WorkloadKind::ArgoRollout => json!({"spec": {"restartAt": now_rfc3339}}),
        _ => json!({
            "spec": {"template": {"metadata": {"annotations": {
                RESTARTED_AT: now_rfc3339,
                RESTARTED_FOR: cause,
            }}}}
        }),
    }
}

/// `reloadlet.io/on-blocked`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnBlocked {
    /// Keep the eviction pending (retried no more often than every 5 minutes when the block
    /// is structural) and say why.
    #[default]
    Wait,
    /// Hand the pod to the controller's rollout instead.
    Rollout,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockedError {
    #[error("{ON_BLOCKED}: {0:?} is not valid; use \"wait\" (the default) or \"rollout\"")]
    OnBlocked(String),
    #[error(
        "{BLOCKED_TIMEOUT}: {0:?} is not a duration above 0s and at most 7 days (e.g. 10m, 1h)"
    )]
    Timeout(String),
}

/// `reloadlet.io/on-blocked` and `reloadlet.io/blocked-timeout` of a pod.
pub fn on_blocked(
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<(OnBlocked, Duration), BlockedError> {
    let mode = match annotations.get(ON_BLOCKED).map(|v| v.trim()) {
        None => OnBlocked::Wait,
        Some(v) if v.eq_ignore_ascii_case("wait") => OnBlocked::Wait,
        Some(v) if v.eq_ignore_ascii_case("rollout") => OnBlocked::Rollout,
        Some(v) => return Err(BlockedError::OnBlocked(v.to_owned())),
    };
    let timeout = match annotations.get(BLOCKED_TIMEOUT) {
        None => DEFAULT_BLOCKED_TIMEOUT,
        Some(v) => crate::core::durations::parse_bounded(v, MAX_BLOCKED_TIMEOUT)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| BlockedError::Timeout(v.clone()))?,
    };
    Ok((mode, timeout))
}

#[cfg(test)]
mod tests;
