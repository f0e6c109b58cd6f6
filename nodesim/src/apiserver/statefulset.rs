//! The StatefulSet controller, after kube-controller-manager's
//! (`pkg/controller/statefulset/stateful_set_control.go` `updateStatefulSet`,
//! `stateful_set_utils.go`), for `podManagementPolicy: OrderedReady`:
//!
//! - pods are `<name>-<ordinal>`, labelled `controller-revision-hash: <name>-<hash>`,
//!   `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`, controlled by
//!   the StatefulSet; a missing ordinal is created (at the update revision, or the current
//!   one below a RollingUpdate `partition`: `newVersionedStatefulSetPod`) once every lower
//!   ordinal is Running and Ready, and a name is reused only after its pod is gone;
//! - nothing else happens while a pod is terminating or not Ready (monotonic);
//! - surplus ordinals are deleted from the highest, one at a time;
//! - RollingUpdate: from the highest ordinal down to `partition`, the first pod not at the
//!   update revision is deleted (its replacement comes when it is gone), and the update
//!   waits for each pod to be Ready; `OnDelete` never deletes a pod for a template change;
//! - status (`computeReplicaStatus`, `completeRollingUpdate`): replicas, readyReplicas,
//!   availableReplicas, currentReplicas, updatedReplicas, currentRevision, updateRevision,
//!   observedGeneration.

use super::model::Key;
use super::store::State;
use super::workloads::{controller_ref, is_ready, template_hash, NewPod};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use std::collections::BTreeMap;

pub(crate) const REVISION_LABEL: &str = "controller-revision-hash";

fn revision_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map(String::as_str)
}

fn ordinal_of(set_name: &str, pod: &Pod) -> Option<i32> {
    pod.metadata
        .name
        .as_deref()?
        .strip_prefix(set_name)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

impl State {
    /// One pass over every StatefulSet; true when it created or deleted a pod.
    pub(crate) fn sync_statefulsets(&mut self) -> bool {
        let all: Vec<(Key, StatefulSet)> = self
            .workloads
            .statefulsets
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let mut changed = false;
        for (key, set) in all {
            changed |= self.sync_statefulset(&key, set);
        }
        changed
    }

    fn sync_statefulset(&mut self, key: &Key, mut set: StatefulSet) -> bool {
        let name = key.1.clone();
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let spec = set.spec.clone().unwrap_or_default();
        let replicas = spec.replicas.unwrap_or(1);
        let update_rev = format!("{name}-{}", template_hash(&spec.template));
        self.workloads
            .revisions
            .insert((key.0.clone(), update_rev.clone()), spec.template.clone());
        let status = set.status.clone().unwrap_or_default();
        let current_rev = status
            .current_revision
            .clone()
            .unwrap_or_else(|| update_rev.clone());
        let strategy = spec.update_strategy.clone().unwrap_or_default();
        let rolling = strategy.type_.as_deref() != Some("OnDelete");
        let partition = strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.partition)
            .unwrap_or(0);
        let pods: BTreeMap<i32, Pod> = self
            .pods_controlled_by(&uid)
            .into_iter()
            .filter_map(|p| Some((ordinal_of(&name, &p)?, p)))
            .collect();
        let changed = self.step_statefulset(
            key,
            &set,
            replicas,
            &pods,
            (&current_rev, &update_rev),
            rolling,
            partition,
        );

        // Status, from the pods as they are now.
        let pods = self.pods_controlled_by(&uid);
        let count = |f: &dyn Fn(&Pod) -> bool| {
            i32::try_from(pods.iter().filter(|p| f(p)).count()).unwrap_or(0)
        };
        let ready = count(&|p| is_ready(p));
        let created = count(&|p| p.metadata.deletion_timestamp.is_none());
        let updated = count(&|p| revision_of(p) == Some(update_rev.as_str()));
        let mut current = count(&|p| revision_of(p) == Some(current_rev.as_str()));
        let mut current_revision = current_rev.clone();
        if rolling && updated == replicas && ready == replicas && created == replicas {
            current_revision = update_rev.clone();
            current = updated;
        }
        let new_status = StatefulSetStatus {
            observed_generation: set.metadata.generation,
            replicas: created,
            ready_replicas: Some(ready),
            available_replicas: Some(ready),
            current_replicas: Some(current),
            updated_replicas: Some(updated),
            current_revision: Some(current_revision),
            update_revision: Some(update_rev),
            ..status
        };
        if set.status.as_ref() != Some(&new_status) {
            set.status = Some(new_status);
            self.commit_by_controller(key, set);
        }
        changed
    }

    #[allow(clippy::too_many_arguments)]
    fn step_statefulset(
        &mut self,
        key: &Key,
        set: &StatefulSet,
        replicas: i32,
        pods: &BTreeMap<i32, Pod>,
        (current_rev, update_rev): (&str, &str),
        rolling: bool,
        partition: i32,
    ) -> bool {
        // Create the lowest missing ordinal once all below it are healthy.
        for ord in 0..replicas {
            match pods.get(&ord) {
                None => {
                    let rev = if rolling && ord < partition {
                        current_rev
                    } else {
                        update_rev
                    };
                    self.create_set_pod(key, set, ord, rev);
                    return true;
                }
                Some(p) if p.metadata.deletion_timestamp.is_some() || !is_ready(p) => {
                    return false;
                }
                Some(_) => {}
            }
        }
        // Scale down from the highest surplus ordinal, one at a time.
        if let Some((_, p)) = pods.iter().rev().find(|(o, _)| **o >= replicas) {
            if p.metadata.deletion_timestamp.is_none() {
                self.graceful_no_settle(&super::model::key_of(&p.metadata), None);
                return true;
            }
            return false;
        }
        if !rolling {
            return false;
        }
        for ord in (partition.max(0)..replicas).rev() {
            let Some(p) = pods.get(&ord) else {
                return false;
            };
            if revision_of(p) != Some(update_rev) && p.metadata.deletion_timestamp.is_none() {
                self.graceful_no_settle(&super::model::key_of(&p.metadata), None);
                return true;
            }
            if !is_ready(p) {
                return false;
            }
        }
        false
    }

    fn create_set_pod(&mut self, key: &Key, set: &StatefulSet, ord: i32, rev: &str) {
        let template: PodTemplateSpec = self
            .workloads
            .revisions
            .get(&(key.0.clone(), rev.to_string()))
            .cloned()
            .or_else(|| set.spec.as_ref().map(|s| s.template.clone()))
            .unwrap_or_default();
        let pod_name = format!("{}-{ord}", key.1);
        let node = self.pick_node(
            template.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            &[],
        );
        let extra = BTreeMap::from([
            (REVISION_LABEL.to_string(), rev.to_string()),
            (
                "statefulset.kubernetes.io/pod-name".to_string(),
                pod_name.clone(),
            ),
            ("apps.kubernetes.io/pod-index".to_string(), ord.to_string()),
        ]);
        self.spawn_pod(NewPod {
            namespace: &key.0,
            name: pod_name,
            template: &template,
            extra_labels: extra,
            owner: controller_ref("StatefulSet", &set.metadata),
            node,
        });
    }
}
