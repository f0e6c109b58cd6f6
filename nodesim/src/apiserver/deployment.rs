//! The Deployment controller, after kube-controller-manager's
//! (`pkg/controller/deployment/{sync.go,rolling.go,recreate.go}`,
//! `pkg/controller/deployment/util/deployment_util.go`):
//!
//! - the new ReplicaSet is the one whose template equals the Deployment's, ignoring the
//!   `pod-template-hash` label (`FindNewReplicaSet`/`EqualIgnoreHash`); a template change
//!   creates `<deployment>-<hash>` with that label on itself, its selector and its template
//!   (`getNewReplicaSet`), controlled by the Deployment;
//! - RollingUpdate (`rolloutRolling`): `ResolveFenceposts` (surge rounds up, unavailable
//!   down, both 0 → unavailable 1); the new ReplicaSet scales up within replicas + maxSurge
//!   counting ReplicaSets' `spec.replicas` (`NewRSNewReplicas`), and only when it did not
//!   scale up, old ones scale down as far as `minAvailable = replicas − maxUnavailable`
//!   counting available (Ready, `minReadySeconds` 0) pods: unhealthy old pods first
//!   (`cleanupUnhealthyReplicas`), then oldest ReplicaSets first
//!   (`scaleDownOldReplicaSetsForRollingUpdate`);
//! - Recreate (`rolloutRecreate`): old ReplicaSets scale to 0, and the new one is created
//!   and scaled up only once no old pod exists any more (terminating ones included);
//! - status (`calculateStatus`): replicas, updatedReplicas, readyReplicas,
//!   availableReplicas, unavailableReplicas, observedGeneration.
//!
//! `spec.paused` stops the rollout (status only). Proportional scaling of several
//! ReplicaSets mid-rollout is not emulated: a replica change goes to the new ReplicaSet.

use super::model::{now_ts, Key, ReplicaSetSim};
use super::store::State;
use super::workloads::{controller_ref, is_ready, scaled, template_hash};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::PodTemplateSpec;

const HASH_LABEL: &str = "pod-template-hash";

/// A Deployment's ReplicaSets as the controller sees them.
struct Sets {
    new: Option<ReplicaSetSim>,
    /// Oldest first.
    old: Vec<ReplicaSetSim>,
}

fn without_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = t.clone();
    if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove(HASH_LABEL);
    }
    t
}

fn replicas_of(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn is_recreate(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate")
}

/// `ResolveFenceposts`: (maxSurge, maxUnavailable) for `desired` replicas.
pub(crate) fn fenceposts(d: &Deployment) -> (i32, i32) {
    let desired = replicas_of(d);
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let surge = scaled(ru.and_then(|r| r.max_surge.as_ref()), desired, true);
    let unavailable = scaled(ru.and_then(|r| r.max_unavailable.as_ref()), desired, false);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// `MaxUnavailable`: 0 for Recreate or no replicas, never more than the replicas.
fn max_unavailable(d: &Deployment) -> i32 {
    let desired = replicas_of(d);
    if is_recreate(d) || desired == 0 {
        return 0;
    }
    fenceposts(d).1.min(desired)
}

impl State {
    /// Available (Ready, not terminating) pods of a ReplicaSet.
    fn available_of(&self, rs: &ReplicaSetSim) -> i32 {
        let n = self
            .pods
            .values()
            .filter(|p| rs.owns(p) && is_ready(p))
            .count();
        i32::try_from(n).unwrap_or(i32::MAX)
    }

    fn sets_of(&self, d: &Deployment) -> Sets {
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let template = d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let mut all: Vec<ReplicaSetSim> = self
            .replicasets
            .values()
            .filter(|rs| rs.owner.as_ref().is_some_and(|o| o.uid == uid))
            .cloned()
            .collect();
        all.sort_by_key(|rs| rs.created_rv);
        let pos = all
            .iter()
            .position(|rs| without_hash(&rs.template) == without_hash(&template));
        let new = pos.map(|i| all.remove(i));
        Sets { new, old: all }
    }

    fn set_rs_replicas(&mut self, rs: &ReplicaSetSim, replicas: i32) -> bool {
        match self
            .replicasets
            .get_mut(&(rs.namespace.clone(), rs.name.clone()))
        {
            Some(r) if r.replicas != replicas => {
                r.replicas = replicas;
                true
            }
            _ => false,
        }
    }

    /// `getNewReplicaSet` with `createIfNotExisted`: `<name>-<hash>` with `replicas`.
    fn create_new_rs(&mut self, d: &Deployment, replicas: i32) -> ReplicaSetSim {
        let template = d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let hash = template_hash(&template);
        let mut t = template;
        let meta = t.metadata.get_or_insert_with(Default::default);
        meta.labels
            .get_or_insert_with(Default::default)
            .insert(HASH_LABEL.into(), hash.clone());
        let mut labels = meta.labels.clone().unwrap_or_default();
        labels.insert(HASH_LABEL.into(), hash.clone());
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = format!("{}-{hash}", d.metadata.name.as_deref().unwrap_or_default());
        let rs = ReplicaSetSim {
            namespace: ns.clone(),
            name: name.clone(),
            uid: super::model::new_uid(),
            replicas: replicas.max(0),
            template: t,
            node_name: String::new(),
            owner: Some(controller_ref("Deployment", &d.metadata)),
            labels,
            created_rv: self.next_rv(),
            created_at: now_ts(),
        };
        self.replicasets.insert((ns, name), rs.clone());
        rs
    }

    /// One pass over every Deployment; true when it scaled or created a ReplicaSet.
    pub(crate) fn sync_deployments(&mut self) -> bool {
        let all: Vec<Deployment> = self.workloads.deployments.values().cloned().collect();
        let mut changed = false;
        for d in all {
            if d.spec.as_ref().and_then(|s| s.paused) == Some(true) {
                continue;
            }
            changed |= if is_recreate(&d) {
                self.rollout_recreate(&d)
            } else {
                self.rollout_rolling(&d)
            };
        }
        changed
    }

    fn rollout_recreate(&mut self, d: &Deployment) -> bool {
        let sets = self.sets_of(d);
        let mut scaled_down = false;
        for rs in &sets.old {
            scaled_down |= self.set_rs_replicas(rs, 0);
        }
        if scaled_down {
            return true;
        }
        // `oldPodsRunning`: wait until every old pod is gone.
        let old_pods = self
            .pods
            .values()
            .any(|p| sets.old.iter().any(|rs| rs.owns(p)));
        if old_pods {
            return false;
        }
        match sets.new {
            None => {
                self.create_new_rs(d, replicas_of(d));
                true
            }
            Some(rs) => self.set_rs_replicas(&rs, replicas_of(d)),
        }
    }

    fn rollout_rolling(&mut self, d: &Deployment) -> bool {
        let desired = replicas_of(d);
        let (surge, _) = fenceposts(d);
        let sets = self.sets_of(d);
        let old_count: i32 = sets.old.iter().map(|rs| rs.replicas).sum();
        // reconcileNewReplicaSet / NewRSNewReplicas.
        let new = match sets.new {
            None => {
                let up = (desired + surge - old_count).max(0).min(desired);
                self.create_new_rs(d, up);
                return true;
            }
            Some(rs) => rs,
        };
        if new.replicas > desired {
            return self.set_rs_replicas(&new, desired);
        }
        if new.replicas < desired {
            let current = old_count + new.replicas;
            let max_total = desired + surge;
            if current < max_total {
                let up = (max_total - current).min(desired - new.replicas);
                return self.set_rs_replicas(&new, new.replicas + up);
            }
        }
        // reconcileOldReplicaSets.
        let active_old: Vec<ReplicaSetSim> =
            sets.old.into_iter().filter(|rs| rs.replicas > 0).collect();
        if active_old.is_empty() {
            return false;
        }
        let all_pods = old_count + new.replicas;
        let min_available = desired - max_unavailable(d);
        let new_unavailable = new.replicas - self.available_of(&new);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        let mut changed = false;
        // cleanupUnhealthyReplicas.
        let mut cleaned = 0;
        let mut after_cleanup = Vec::new();
        for rs in active_old {
            let available = self.available_of(&rs);
            let mut rs = rs;
            if cleaned < max_scaled_down && rs.replicas > available {
                let down = (max_scaled_down - cleaned).min(rs.replicas - available);
                cleaned += down;
                changed |= self.set_rs_replicas(&rs, rs.replicas - down);
                rs.replicas -= down;
            }
            after_cleanup.push(rs);
        }
        // scaleDownOldReplicaSetsForRollingUpdate.
        let available: i32 = after_cleanup
            .iter()
            .map(|rs| self.available_of(rs))
            .sum::<i32>()
            + self.available_of(&new);
        if available <= min_available {
            return changed;
        }
        let mut budget = available - min_available;
        for rs in after_cleanup {
            if budget <= 0 {
                break;
            }
            if rs.replicas == 0 {
                continue;
            }
            let down = rs.replicas.min(budget);
            budget -= down;
            changed |= self.set_rs_replicas(&rs, rs.replicas - down);
        }
        changed
    }

    /// `calculateStatus` for every Deployment (written only when it changed).
    pub(crate) fn deployment_statuses(&mut self) {
        let all: Vec<(Key, Deployment)> = self
            .workloads
            .deployments
            .iter()
            .map(|(k, d)| (k.clone(), d.clone()))
            .collect();
        for (key, mut d) in all {
            let sets = self.sets_of(&d);
            let count = |st: &State, rs: &ReplicaSetSim, ready: bool| -> i32 {
                let n = st
                    .pods
                    .values()
                    .filter(|p| {
                        rs.owns(p)
                            && p.metadata.deletion_timestamp.is_none()
                            && (!ready || is_ready(p))
                    })
                    .count();
                i32::try_from(n).unwrap_or(i32::MAX)
            };
            let all_sets: Vec<&ReplicaSetSim> = sets.old.iter().chain(sets.new.iter()).collect();
            let replicas: i32 = all_sets.iter().map(|rs| count(self, rs, false)).sum();
            let ready: i32 = all_sets.iter().map(|rs| count(self, rs, true)).sum();
            let updated = sets.new.as_ref().map_or(0, |rs| count(self, rs, false));
            let status = DeploymentStatus {
                observed_generation: d.metadata.generation,
                replicas: Some(replicas),
                updated_replicas: Some(updated),
                ready_replicas: Some(ready),
                available_replicas: Some(ready),
                unavailable_replicas: Some((replicas_of(&d) - ready).max(0)),
                ..d.status.clone().unwrap_or_default()
            };
            if d.status.as_ref() != Some(&status) {
                d.status = Some(status);
                self.commit_by_controller(&key, d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn dep(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        let p = |s: &str| IntOrString::String(s.into());
        assert_eq!(fenceposts(&dep(1, p("25%"), p("25%"))), (1, 0));
        assert_eq!(fenceposts(&dep(3, p("25%"), p("25%"))), (1, 0));
        assert_eq!(fenceposts(&dep(4, p("25%"), p("25%"))), (1, 1));
        assert_eq!(fenceposts(&dep(10, p("25%"), p("25%"))), (3, 2));
        // Both zero: one may be unavailable.
        assert_eq!(
            fenceposts(&dep(2, IntOrString::Int(0), IntOrString::Int(0))),
            (0, 1)
        );
    }

    #[test]
    fn the_hash_is_stable_and_safe() {
        let t = PodTemplateSpec::default();
        assert_eq!(template_hash(&t), template_hash(&t));
        assert!(template_hash(&t)
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }
}
